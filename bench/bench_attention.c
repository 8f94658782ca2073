/*
 * bench_attention.c — micro-benchmark of attention_rows alone: one layer of the
 * llama-1b shape (32 query heads, 8 KV heads, head_dim 64, f16 cache, blocks of 16
 * positions), ROWS consecutive rows of one sequence at positions DEPTH ..
 * DEPTH + ROWS - 1 (a prefill chunk over a filled cache), random K/V/Q.
 * Prints the best and median wall seconds of R calls, the best process CPU seconds
 * (less sensitive to a loaded machine: a thread waiting for a core is not counted;
 * GFLOP/s per core = flop / cpu, cpu summed over the threads), GFLOP/s (2 flop per multiply-add
 * of QK and of PV over the visible positions: 4 * heads * head_dim * (pos + 1) per
 * row) and an FNV hash of the output bits, so that two builds, ISAs
 * (KVINFER_ISA=avx2|scalar) or thread counts can be checked for identical results.
 *
 * Build: built with kvinfer (CMake target of the same name, BUILD/bench_attention).
 * Run: BUILD/bench_attention [threads=1] [reps=5] [depth=4096] [rows=512] [kvtype=f16] [window=0]
 * (window > 0: a sliding window of that many positions; the flop count is then of
 * the window's positions).
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

enum { HEADS = 32, KVH = 8, HD = 64, BS = 16 };

/* One timed call: attention_rows of the whole batch. */
typedef struct call {
    tpool *pool;
    attn_scratch *sc;
    attn_args a;
} call;

static void run_call(void *ctx)
{
    call *c = ctx;
    attention_rows(c->pool, c->sc, &c->a);
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    const int depth = argc > 3 ? atoi(argv[3]) : 4096;
    const int rows = argc > 4 ? atoi(argv[4]) : 512;
    kvi_type type = KVI_TYPE_F16;
    if (argc > 5 && strcmp(argv[5], "q8_0") == 0) type = KVI_TYPE_Q8_0;
    if (argc > 5 && strcmp(argv[5], "f32") == 0) type = KVI_TYPE_F32;
    const int window = argc > 6 ? atoi(argv[6]) : 0;
    if (threads < 1 || reps < 1 || depth < 0 || rows < 1 || window < 0) return 2;
    const int kvd = KVH * HD, qd = HEADS * HD, npos = depth + rows;
    kv_pool kv;
    kvi_error err = { 0 };
    if (kv_pool_init(&kv, 1, kvd, BS, type, type, (size_t)npos * kvd * 8 + ((size_t)1 << 24), &err)) {
        fprintf(stderr, "pool: %s\n", err.msg);
        return 1;
    }
    kv_table t;
    memset(&t, 0, sizeof t);
    if (kv_table_reserve(&kv, &t, npos, &err)) {
        fprintf(stderr, "reserve: %s\n", err.msg);
        return 1;
    }
    t.n_pos = npos;
    bench_bufs b;
    if (!bench_bufs_alloc(&b, rows, (size_t)rows * qd, (size_t)rows * qd, reps) ||
        bench_fill_kv(&kv, &t, 0, npos))
        return 1;
    double flop = 0;
    for (int r = 0; r < rows; r++) {
        b.tabs[r] = &t;
        b.pos[r] = depth + r;
        const int seen = window > 0 && window < depth + r + 1 ? window : depth + r + 1;
        flop += 4.0 * HEADS * HD * (double)seen;
    }
    for (size_t i = 0; i < (size_t)rows * qd; i++) b.q[i] = 2.0f * bench_rnd();
    call c = { .pool = tpool_create(threads) };
    c.sc = attn_scratch_create(tpool_size(c.pool), BS, HD, HEADS, KVH, kvd);
    if (!c.pool || !c.sc) return 1;
    c.a = (attn_args){ .kv = &kv,
                       .layer = 0,
                       .n_rows = rows,
                       .tables = b.tabs,
                       .pos = b.pos,
                       .q = b.q,
                       .out = b.out,
                       .n_heads = HEADS,
                       .n_kv_heads = KVH,
                       .head_dim = HD,
                       .window = window };
    bench_time(run_call, &c, reps, b.ts, b.cs);
    const double *ts = b.ts, *cs = b.cs;
    const uint64_t h = bench_fnv(b.out, (size_t)rows * qd * sizeof(float));
    printf("threads %d depth %d rows %d %s window %d: wall best %.4f median %.4f s (%.1f GFLOP/s)  "
           "cpu best %.4f s (%.1f GFLOP/s per core)  hash %016llx\n",
           threads, depth, rows, kvi_type_name(type), window, ts[0], ts[reps / 2], flop / ts[0] * 1e-9, cs[0],
           flop / cs[0] * 1e-9, (unsigned long long)h);
    attn_scratch_free(c.sc);
    tpool_free(c.pool);
    kv_table_release(&kv, &t);
    kv_pool_free(&kv);
    bench_bufs_free(&b);
    return 0;
}
