/*
 * bench_util.h — what the stand-alone micro-benchmarks in bench/ share (header-only,
 * so each builds from one source file): clocks, a deterministic random source,
 * the comparison for sorting timings to take medians, and the CLI's KVINFER_ISA /
 * KVINFER_AMX / KVINFER_AMX_F16 overrides (the library reads no environment).
 */
#ifndef KVI_BENCH_UTIL_H
#define KVI_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvinfer.h"

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

#endif
