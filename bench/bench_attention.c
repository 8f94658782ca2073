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
 * Run: BUILD/bench_attention [threads=1] [reps=5] [depth=4096] [rows=512] [kvtype=f16]
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


int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    const int depth = argc > 3 ? atoi(argv[3]) : 4096;
    const int rows = argc > 4 ? atoi(argv[4]) : 512;
    kvi_type type = KVI_TYPE_F16;
    if (argc > 5 && strcmp(argv[5], "q8_0") == 0) type = KVI_TYPE_Q8_0;
    if (argc > 5 && strcmp(argv[5], "f32") == 0) type = KVI_TYPE_F32;
    if (threads < 1 || reps < 1 || depth < 0 || rows < 1) return 2;
    const int kvd = KVH * HD, qd = HEADS * HD, npos = depth + rows;
    kv_pool kv;
    kvi_error err = {0};
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
    float *row = malloc((size_t)kvd * sizeof(float));
    const kv_table **tabs = malloc((size_t)rows * sizeof *tabs);
    int32_t *pos = malloc((size_t)rows * sizeof *pos);
    float *q = malloc((size_t)rows * qd * sizeof(float));
    float *out = malloc((size_t)rows * qd * sizeof(float));
    double *ts = malloc((size_t)reps * sizeof(double)), *cs = malloc((size_t)reps * sizeof(double));
    if (!row || !tabs || !pos || !q || !out || !ts || !cs) return 1;
    for (int p = 0; p < npos; p++) {
        for (int i = 0; i < kvd; i++) row[i] = 2.0f * bench_rnd();
        kvi_quantize_row(type, row, kv_k_row(&kv, &t, 0, p), kvd);
        for (int i = 0; i < kvd; i++) row[i] = bench_rnd();
        kvi_quantize_row(type, row, kv_v_row(&kv, &t, 0, p), kvd);
    }
    double flop = 0;
    for (int r = 0; r < rows; r++) {
        tabs[r] = &t;
        pos[r] = depth + r;
        flop += 4.0 * HEADS * HD * (double)(depth + r + 1);
    }
    for (size_t i = 0; i < (size_t)rows * qd; i++) q[i] = 2.0f * bench_rnd();
    tpool *pool = tpool_create(threads);
    attn_scratch *sc = attn_scratch_create(tpool_size(pool), BS, HD, HEADS, KVH, kvd);
    if (!pool || !sc) return 1;
    attn_args a = {.kv = &kv, .layer = 0, .n_rows = rows, .tables = tabs, .pos = pos, .q = q,
                   .out = out, .n_heads = HEADS, .n_kv_heads = KVH, .head_dim = HD};
    attention_rows(pool, sc, &a);   /* warm-up */
    for (int i = 0; i < reps; i++) {
        const double t0 = bench_now(CLOCK_MONOTONIC), c0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
        attention_rows(pool, sc, &a);
        ts[i] = bench_now(CLOCK_MONOTONIC) - t0;
        cs[i] = bench_now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(ts, (size_t)reps, sizeof *ts, bench_cmp_d);
    qsort(cs, (size_t)reps, sizeof *cs, bench_cmp_d);
    uint64_t h = 1469598103934665603ull;
    const unsigned char *ob = (const unsigned char *)out;
    for (size_t i = 0; i < (size_t)rows * qd * sizeof(float); i++) h = (h ^ ob[i]) * 1099511628211ull;
    printf("threads %d depth %d rows %d %s: wall best %.4f median %.4f s (%.1f GFLOP/s)  cpu best %.4f s "
           "(%.1f GFLOP/s per core)  hash %016llx\n",
           threads, depth, rows, kvi_type_name(type), ts[0], ts[reps / 2], flop / ts[0] * 1e-9, cs[0],
           flop / cs[0] * 1e-9, (unsigned long long)h);
    attn_scratch_free(sc);
    tpool_free(pool);
    kv_table_release(&kv, &t);
    kv_pool_free(&kv);
    free(row);
    free(tabs);
    free(pos);
    free(q);
    free(out);
    free(ts);
    free(cs);
    return 0;
}
