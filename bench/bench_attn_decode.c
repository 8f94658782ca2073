/*
 * bench_attn_decode.c — micro-benchmark of the decode attention of a serving step:
 * the stories110M shape (12 layers, 12 heads = 12 KV heads, head_dim 64, f16 cache,
 * blocks of 16 positions), SEQS sequences of one decode row each, at positions
 * spread evenly over [LO, HI] (the 16-stream load: 32-token prompts, 128 new
 * tokens), random K/V/Q. One step = attention_rows once per layer (each layer's
 * slices lie where the engine puts them, so the cache footprint is a real step's).
 * Prints the best and median wall and process-CPU milliseconds of a step over R
 * steps and an FNV hash of the last step's output bits (two builds must agree).
 *
 * Build: built with kvinfer (CMake target of the same name, BUILD/bench_attn_decode).
 * Run: BUILD/bench_attn_decode [threads=1] [steps=50] [seqs=16] [lo=32] [hi=160]
 */
#include "kvinfer.h"
#include "attention/attention.h"
#include "kv/kv_cache.h"
#include "formats/quant.h"

#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LAYERS = 12, HEADS = 12, KVH = 12, HD = 64, BS = 16 };

/* One timed step: attention_rows of the decode rows, layer by layer. */
typedef struct step {
    tpool *pool;
    attn_scratch *sc;
    kv_pool *kv;
    int seqs;
    const kv_table **tabs;
    const int32_t *pos;
    const float *q; /* [LAYERS][seqs][HEADS * HD] */
    float *out;     /* [seqs][HEADS * HD] */
} step;

static void run_step(void *ctx)
{
    const step *st = ctx;
    const size_t qd = (size_t)HEADS * HD;
    for (int l = 0; l < LAYERS; l++) {
        attn_args a = { .kv = st->kv,
                        .layer = l,
                        .n_rows = st->seqs,
                        .tables = st->tabs,
                        .pos = st->pos,
                        .q = st->q + (size_t)l * st->seqs * qd,
                        .out = st->out,
                        .n_heads = HEADS,
                        .n_kv_heads = KVH,
                        .head_dim = HD };
        attention_rows(st->pool, st->sc, &a);
    }
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const int steps = argc > 2 ? atoi(argv[2]) : 50;
    const int seqs = argc > 3 ? atoi(argv[3]) : 16;
    const int lo = argc > 4 ? atoi(argv[4]) : 32;
    const int hi = argc > 5 ? atoi(argv[5]) : 160;
    if (threads < 1 || steps < 1 || seqs < 1 || lo < 0 || hi < lo) return 2;
    const int kvd = KVH * HD, qd = HEADS * HD;
    kv_pool kv;
    kvi_error err = { 0 };
    const size_t budget = (size_t)seqs * (hi + BS + 1) * kvd * 4 * LAYERS + ((size_t)1 << 24);
    if (kv_pool_init(&kv, LAYERS, kvd, BS, KVI_TYPE_F16, KVI_TYPE_F16, budget, &err)) {
        fprintf(stderr, "pool: %s\n", err.msg);
        return 1;
    }
    kv_table *tab = calloc((size_t)seqs, sizeof *tab);
    bench_bufs b;
    if (!bench_bufs_alloc(&b, seqs, (size_t)LAYERS * seqs * qd, (size_t)seqs * qd, steps) || !tab) return 1;
    const kv_table **tabs = b.tabs;
    int32_t *pos = b.pos;
    for (int s = 0; s < seqs; s++) {
        pos[s] = seqs > 1 ? lo + (int32_t)((int64_t)(hi - lo) * s / (seqs - 1)) : hi;
        if (kv_table_reserve(&kv, &tab[s], pos[s] + 1, &err)) {
            fprintf(stderr, "reserve: %s\n", err.msg);
            return 1;
        }
        tab[s].n_pos = pos[s] + 1;
        tabs[s] = &tab[s];
        for (int l = 0; l < LAYERS; l++)
            if (bench_fill_kv(&kv, &tab[s], l, pos[s] + 1)) return 1;
    }
    for (size_t i = 0; i < (size_t)LAYERS * seqs * qd; i++) b.q[i] = 2.0f * bench_rnd();
    step st = { .pool = tpool_create(threads),
                .kv = &kv,
                .seqs = seqs,
                .tabs = tabs,
                .pos = pos,
                .q = b.q,
                .out = b.out };
    st.sc = attn_scratch_create(tpool_size(st.pool), BS, HD, HEADS, KVH, kvd);
    if (!st.pool || !st.sc) return 1;
    bench_time(run_step, &st, steps, b.ts, b.cs);
    const double *ts = b.ts, *cs = b.cs;
    const uint64_t h = bench_fnv(b.out, (size_t)seqs * qd * sizeof(float));
    printf("threads %d seqs %d pos %d..%d: step wall best %.3f median %.3f ms, cpu best %.3f median %.3f ms"
           "  hash %016llx\n",
           threads, seqs, lo, hi, ts[0] * 1e3, ts[steps / 2] * 1e3, cs[0] * 1e3, cs[steps / 2] * 1e3,
           (unsigned long long)h);
    attn_scratch_free(st.sc);
    tpool_free(st.pool);
    for (int s = 0; s < seqs; s++) kv_table_release(&kv, &tab[s]);
    kv_pool_free(&kv);
    free(tab);
    bench_bufs_free(&b);
    return 0;
}
