/*
 * bench_util.h — what the stand-alone micro-benchmarks in bench/ share (header-only,
 * so each still builds with one gcc line): clocks, a deterministic random source
 * and the comparison for sorting timings to take medians.
 */
#ifndef KVI_BENCH_UTIL_H
#define KVI_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

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
