/*
 * bench_util.h — what the stand-alone micro-benchmarks in bench/ share (header-only,
 * so each builds from one source file): clocks, a deterministic random source,
 * the comparison for sorting timings to take medians, a timing loop, a hash of
 * output bits, random K/V for the attention benchmarks, and the CLI's KVINFER_ISA /
 * KVINFER_AMX / KVINFER_AMX_F16 overrides (the library reads no environment).
 */
#ifndef KVI_BENCH_UTIL_H
#define KVI_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvinfer.h"
#include "formats/quant.h"
#include "kv/kv_cache.h"

/* Before main(): the CPU paths the environment asks for, as `kvinfer` applies them. */
__attribute__((constructor)) static void bench_apply_env(void)
{
    kvi_cpu_params cp;
    kvi_cpu_params_default(&cp);
    const char *e;
    if ((e = getenv("KVINFER_ISA")) && (!strcmp(e, "avx2") || !strcmp(e, "scalar"))) cp.isa = e;
    if ((e = getenv("KVINFER_AMX")) && !strcmp(e, "0")) cp.amx = false;
    if ((e = getenv("KVINFER_AMX_F16")) && !strcmp(e, "1")) cp.amx_f16 = true;
    kvi_cpu_configure(&cp, NULL);
}

/* Seconds on clock c (CLOCK_MONOTONIC for wall time, CLOCK_PROCESS_CPUTIME_ID for
 * the process's CPU time). */
static inline double bench_now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Uniform in [-1, 1), xorshift64 from a fixed seed: the same inputs every run. */
static inline float bench_rnd(void)
{
    static uint64_t s = 0x9E3779B97F4A7C15ull;
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (float)((s >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}

/* qsort comparison of doubles, ascending. */
static inline int bench_cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Calls fn(ctx) once to warm up, then reps times: the wall and process-CPU seconds
 * of each call into ts[reps] and cs[reps], each sorted ascending (best first). */
static inline void bench_time(void (*fn)(void *), void *ctx, int reps, double *ts, double *cs)
{
    fn(ctx);
    for (int i = 0; i < reps; i++) {
        const double t0 = bench_now(CLOCK_MONOTONIC), c0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
        fn(ctx);
        ts[i] = bench_now(CLOCK_MONOTONIC) - t0;
        cs[i] = bench_now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(ts, (size_t)reps, sizeof *ts, bench_cmp_d);
    qsort(cs, (size_t)reps, sizeof *cs, bench_cmp_d);
}

/* FNV-1a hash of n bytes: two builds, ISAs or thread counts with the same output
 * bits print the same hash. */
static inline uint64_t bench_fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The buffers of an attention benchmark: tables and positions of its query rows,
 * q[n_q] and out[n_out] floats, and wall / CPU seconds of its reps timed calls. */
typedef struct bench_bufs {
    const kv_table **tabs;
    int32_t *pos;
    float *q, *out;
    double *ts, *cs;
} bench_bufs;

/* Allocates b's buffers for rows query rows; 0 when out of memory. */
static inline int bench_bufs_alloc(bench_bufs *b, int rows, size_t n_q, size_t n_out, int reps)
{
    b->tabs = malloc((size_t)rows * sizeof *b->tabs);
    b->pos = malloc((size_t)rows * sizeof *b->pos);
    b->q = malloc(n_q * sizeof(float));
    b->out = malloc(n_out * sizeof(float));
    b->ts = malloc((size_t)reps * sizeof(double));
    b->cs = malloc((size_t)reps * sizeof(double));
    return b->tabs && b->pos && b->q && b->out && b->ts && b->cs;
}

/* Frees what bench_bufs_alloc allocated. */
static inline void bench_bufs_free(bench_bufs *b)
{
    free(b->tabs);
    free(b->pos);
    free(b->q);
    free(b->out);
    free(b->ts);
    free(b->cs);
}

/* Random K (in [-2, 2)) and V (in [-1, 1)) rows of layer l of t, positions
 * [0, n_pos), in kv's types (bench_rnd: K then V, position by position); -1 when
 * out of memory. */
static inline int bench_fill_kv(kv_pool *kv, const kv_table *t, int l, int n_pos)
{
    const int kvd = kv->kv_dim;
    float *row = malloc((size_t)kvd * sizeof(float));
    if (!row) return -1;
    for (int p = 0; p < n_pos; p++) {
        for (int i = 0; i < kvd; i++) row[i] = 2.0f * bench_rnd();
        quant_quantize_row(kv->type_k, row, kv_k_row(kv, t, l, p), kvd);
        for (int i = 0; i < kvd; i++) row[i] = bench_rnd();
        quant_quantize_row(kv->type_v, row, kv_v_row(kv, t, l, p), kvd);
    }
    free(row);
    return 0;
}

#endif
