/*
 * hwbench.c — the machine's limits, measured: streaming read bandwidth and the
 * peak rates of the instructions the kernels are built on (FP32 FMA, BF16
 * vdpbf16ps, INT8 vpdpbusd, AMX-INT8 tdpbssd), each on all threads of one worker
 * pool.
 *
 * These are the roofline that `kvinfer bench` compares its tokens/s against:
 * decode should move weights near read_gbs, prefill should compute near the
 * arithmetic peak of its kernels' instruction.
 *
 * Method (each figure is the median of `reps` timed runs after one warm-up):
 *  - read: a buffer of read_bytes (1 GiB, 64 MiB quick; larger than the last-level
 *    cache when not quick), 2 MiB-aligned with a huge-page hint, filled with
 *    non-zero bytes first so every page is faulted in; each thread sums its
 *    contiguous slice by one of several read methods (streams per thread, prefetch
 *    distance: see "read loops"). The methods run in turn, one run each per round,
 *    reps rounds; read_gbs is the highest of their medians, and every method's
 *    median and best run are reported. Threads are pinned to distinct cores for the
 *    whole measurement (not when quick, nor with more threads than cores) and get
 *    their affinity back at the end. GB/s = read_bytes / wall time of one run.
 *  - compute: each thread runs `iters` iterations of 12 independent dependency
 *    chains of one instruction on registers (12 chains hide a 4-cycle latency on
 *    two ports); the count is doubled until one run takes the target time. The
 *    chains' results are stored so the loop cannot be removed.
 * The chain loops are fully unrolled (#pragma GCC unroll) so that every
 * accumulator lives in a register, not on the stack.
 * Each ISA function is compiled with __attribute__((target(...))) and called only
 * after __builtin_cpu_supports() says the CPU has it.
 *
 * Units: FP32 FMA = 2 FLOP per lane (16 lanes in a zmm, 8 in a ymm);
 * vdpbf16ps zmm = 16 lanes x 2 products x 2 = 64 FLOP; vpdpbusd zmm =
 * 16 lanes x 4 products x 2 = 128 OP; AMX tdpbssd on 16 x 64-byte tiles =
 * 16 x 16 x 64 products x 2 = 32768 OP (measured only where AMX is on: the tiles
 * stay loaded, four independent accumulators).
 */
#define _GNU_SOURCE
#include "kvinfer.h"
#include "base/stats.h"

#include "base/clock.h"
#include "base/cpu.h"
#include "kernels/tiles_amx.h"
#include "base/error.h"
#include "tools/hwbench.h"
#include "kernels/fmm_amx.h"
#include "base/threadpool.h"

#include <immintrin.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HW_CHAINS 12
#define HW_MAX_REPS 64

typedef enum hw_kernel {
    HW_READ,
    HW_PIN,
    HW_UNPIN,
    HW_FMA512,
    HW_FMA256,
    HW_BF16,
    HW_VNNI,
    HW_AMX,
    HW_AMX_BF16
} hw_kernel;

typedef struct hw_job {
    hw_kernel kind;
    const uint8_t *buf; /* [bytes] read test buffer */
    size_t bytes;
    int method;              /* read test: index into HW_READ_METHODS */
    uint64_t iters;          /* compute tests: iterations per thread */
    int n_cpus;              /* pin: online CPUs */
    bool pinned[64];         /* [thread] affinity changed by HW_PIN */
    cpu_set_t saved[64];     /* [thread] affinity before HW_PIN */
    volatile float sink[64]; /* [thread] results kept alive */
} hw_job;

/* ---- read loops -------------------------------------------------------------
 *
 * Every read loop returns the same checksum of its n bytes, so any two can be
 * compared exactly (tests/test_hwbench.c): the sum mod 2^64 of the little-endian
 * u64 words of the first n / 8 * 8 bytes, plus the trailing bytes one by one.
 * hw_read_ref() is the scalar reference.
 *
 * A method reads one thread's slice as S streams (S contiguous sub-slices read
 * side by side, 16 / S cache lines from each per iteration: 1 KiB per iteration,
 * 8 independent accumulators) and, when pf > 0, issues one prefetcht0 per line pf
 * bytes ahead in its stream. Several streams keep more misses in flight than the
 * L2 streamer starts for one; the prefetches start them earlier. Loads are
 * unaligned-safe (loadu), prefetches past the end are harmless (they never fault).
 */

static uint64_t sum_tail(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    for (; i < n; i++) s += p[i];
    return s;
}

uint64_t hw_read_ref(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    for (size_t i = n / 8 * 8; i < n; i++) s += p[i];
    return s;
}

#define HW_LINES 16 /* cache lines per iteration, all streams */
#define HW_ITER_BYTES (HW_LINES * 64)

__attribute__((target("avx512f"), always_inline)) static inline uint64_t
read512_streams(const uint8_t *p, size_t n, const int S, const size_t pf)
{
    const int lps = HW_LINES / S;                     /* lines per stream and iteration */
    const size_t step = (size_t)lps * 64;             /* bytes per stream and iteration */
    const size_t per = n / ((size_t)S * step) * step; /* bytes of each stream */
    __m512i a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm512_setzero_si512();
    for (size_t i = 0; i < per; i += step) {
#pragma GCC unroll 16
        for (int l = 0; l < HW_LINES; l++) {
            const uint8_t *q = p + (size_t)(l / lps) * per + i + (size_t)(l % lps) * 64;
            if (pf) _mm_prefetch((const char *)(q + pf), _MM_HINT_T0);
            a[l & 7] = _mm512_add_epi64(a[l & 7], _mm512_loadu_si512((const void *)q));
        }
    }
    for (int k = 1; k < 8; k++) a[0] = _mm512_add_epi64(a[0], a[k]);
    uint64_t t[8], s = 0;
    _mm512_storeu_si512((void *)t, a[0]);
    for (int k = 0; k < 8; k++) s += t[k];
    /* the streams covered S * per bytes, a multiple of 64 (so of 8): the words after
     * them continue the same word sum */
    return s + sum_tail(p + (size_t)S * per, n - (size_t)S * per);
}

#define HW_READ512(NAME, S, PF)                                                         \
    __attribute__((target("avx512f"))) static uint64_t NAME(const uint8_t *p, size_t n) \
    {                                                                                   \
        return read512_streams(p, n, S, PF);                                            \
    }
HW_READ512(read512_s1, 1, 0) /* one stream, no prefetch: the earlier method */
HW_READ512(read512_s1_pf, 1, 2048)
HW_READ512(read512_s2_pf, 2, 1024)
HW_READ512(read512_s4, 4, 0)
HW_READ512(read512_s4_pf, 4, 512)
HW_READ512(read512_s8_pf, 8, 512)

__attribute__((target("avx2"))) static uint64_t read256_s1(const uint8_t *p, size_t n)
{
    __m256i a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 256 <= n; i += 256)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            a[k] = _mm256_add_epi64(a[k], _mm256_loadu_si256((const __m256i *)(p + i + 32 * k)));
    for (int k = 1; k < 8; k++) a[0] = _mm256_add_epi64(a[0], a[k]);
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a[0]);
    return t[0] + t[1] + t[2] + t[3] + sum_tail(p + i, n - i);
}

static uint64_t read_scalar4(const uint8_t *p, size_t n)
{
    uint64_t s[4] = { 0, 0, 0, 0 };
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t v;
            memcpy(&v, p + i + 8 * k, 8);
            s[k] += v;
        }
    return s[0] + s[1] + s[2] + s[3] + sum_tail(p + i, n - i);
}

typedef uint64_t (*hw_read_fn)(const uint8_t *p, size_t n);

typedef struct hw_read_method {
    const char *name; /* "avx512 s4 pf512": ISA, streams per thread, prefetch distance */
    hw_read_fn fn;
    int isa; /* 2 = AVX-512F, 1 = AVX2, 0 = none */
} hw_read_method;

/* All read methods; the first one the CPU supports is the quick-mode method. */
static const hw_read_method HW_READ_METHODS[] = {
    { "avx512 s2 pf1024", read512_s2_pf, 2 }, /* highest median in bench/RESULTS-hw.md */
    { "avx512 s1", read512_s1, 2 },
    { "avx512 s1 pf2048", read512_s1_pf, 2 },
    { "avx512 s4 pf512", read512_s4_pf, 2 },
    { "avx512 s4", read512_s4, 2 },
    { "avx512 s8 pf512", read512_s8_pf, 2 },
    { "avx2 s1", read256_s1, 1 },
    { "scalar", read_scalar4, 0 },
};
#define HW_N_READ_METHODS ((int)(sizeof HW_READ_METHODS / sizeof HW_READ_METHODS[0]))

static int cpu_isa_level(void)
{
    const cpu_feature_set *f = cpu_features();
    return f->avx512f ? 2 : f->avx2 ? 1 : 0;
}

int hw_read_n_methods(void) { return HW_N_READ_METHODS; }

const char *hw_read_method_name(int m)
{
    return m >= 0 && m < HW_N_READ_METHODS ? HW_READ_METHODS[m].name : NULL;
}

bool hw_read_method_supported(int m)
{
    return m >= 0 && m < HW_N_READ_METHODS && HW_READ_METHODS[m].isa <= cpu_isa_level();
}

uint64_t hw_read_sum(int m, const uint8_t *p, size_t n)
{
    if (!hw_read_method_supported(m)) return 0;
    return HW_READ_METHODS[m].fn(p, n);
}

/* ---- compute loops --------------------------------------------------------- */

__attribute__((target("avx512f,fma"))) static float fma_avx512(uint64_t iters)
{
    __m512 acc[HW_CHAINS];
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
    for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm512_set1_ps((float)k);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm512_fmadd_ps(acc[k], x, y);
    for (int k = 1; k < HW_CHAINS; k++) acc[0] = _mm512_add_ps(acc[0], acc[k]);
    return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(uint64_t iters)
{
    __m256 acc[HW_CHAINS];
    const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-4f);
    for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm256_set1_ps((float)k);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm256_fmadd_ps(acc[k], x, y);
    for (int k = 1; k < HW_CHAINS; k++) acc[0] = _mm256_add_ps(acc[0], acc[k]);
    float t[8];
    _mm256_storeu_ps(t, acc[0]);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

__attribute__((target("avx512f,avx512bf16"))) static float bf16_avx512(uint64_t iters)
{
    __m512 acc[HW_CHAINS];
    /* 32 bf16 values of 0x3C00 (2^-7) in each operand */
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3C00), b = (__m512bh)_mm512_set1_epi16(0x3C00);
    for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm512_set1_ps((float)k);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
    for (int k = 1; k < HW_CHAINS; k++) acc[0] = _mm512_add_ps(acc[0], acc[k]);
    return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx512f,avx512vnni"))) static float vnni_avx512(uint64_t iters)
{
    __m512i acc[HW_CHAINS];
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm512_set1_epi32(k);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int k = 0; k < HW_CHAINS; k++) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
    for (int k = 1; k < HW_CHAINS; k++) acc[0] = _mm512_add_epi32(acc[0], acc[k]);
    uint32_t t[16], s = 0;
    _mm512_storeu_si512((void *)t, acc[0]);
    for (int k = 0; k < 16; k++) s += t[k];
    return (float)s;
}

/* AMX peaks: per iteration four TDPBSSD (16 x 16 x 64 int8 products each) or
 * TDPBF16PS (16 x 16 x 32 bf16 products each): C tiles 0..3 += A tiles 4, 5 x B
 * tiles 6, 7, all 16 x 64 bytes, on tiles loaded once; the C tiles are stored at
 * the end so the loop cannot be removed. Only after cpu_amx_on(); the tiles are
 * released before returning (cpu.h). */
static const amx_tile_cfg hw_amx_cfg = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

/* bf16: TDPBF16PS on tiles of bf16 2^-7, else TDPBSSD on int8 tiles. */
__attribute__((target("amx-tile,amx-int8,amx-bf16"))) static float amx_peak(bool bf16, uint64_t iters)
{
    static const int8_t a8[16 * 64] = { 3 }, b8[16 * 64] = { -2 };
    uint16_t a16[16 * 32]; /* on each thread's stack */
    for (int i = 0; i < 16 * 32; i++) a16[i] = 0x3C00;
    const void *a = bf16 ? (const void *)a16 : (const void *)a8,
               *b = bf16 ? (const void *)a16 : (const void *)b8;
    uint32_t c[16 * 16];
    _tile_loadconfig(&hw_amx_cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b, 64);
    if (bf16) {
        for (uint64_t i = 0; i < iters; i++) {
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    } else {
        for (uint64_t i = 0; i < iters; i++) {
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 4, 7);
            _tile_dpbssd(2, 5, 6);
            _tile_dpbssd(3, 5, 7);
        }
    }
    float s = 0;
    int32_t si = 0;
#define HW_AMX_SUM(t)                \
    do {                             \
        _tile_stored(t, c, 64);      \
        float f;                     \
        memcpy(&f, &c[0], sizeof f); \
        s += f;                      \
        si += (int32_t)c[0];         \
    } while (0)
    HW_AMX_SUM(0);
    HW_AMX_SUM(1);
    HW_AMX_SUM(2);
    HW_AMX_SUM(3);
#undef HW_AMX_SUM
    _tile_release();
    return bf16 ? s : (float)si;
}

/* ---- pool driver ----------------------------------------------------------- */

static bool cpu_has_avx512(void) { return cpu_features()->avx512f && cpu_features()->fma; }

static void hw_worker(void *ctx, int ith, int nth)
{
    hw_job *j = ctx;
    float r = 0.0f;
    switch (j->kind) {
    case HW_READ: {
        /* contiguous slices on 4 KiB boundaries; the last thread takes the tail */
        size_t per = j->bytes / (size_t)nth / 4096 * 4096;
        size_t off = per * (size_t)ith;
        size_t len = ith == nth - 1 ? j->bytes - off : per;
        r = (float)HW_READ_METHODS[j->method].fn(j->buf + off, len);
        break;
    }
    case HW_PIN:
    case HW_UNPIN:
        if (ith < 64) {
            /* pin: thread ith on core ith (mod the cores); unpin: the mask it had */
            if (j->kind == HW_PIN) {
                j->pinned[ith] = sched_getaffinity(0, sizeof j->saved[ith], &j->saved[ith]) == 0;
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(ith % j->n_cpus, &one);
                if (j->pinned[ith]) j->pinned[ith] = sched_setaffinity(0, sizeof one, &one) == 0;
            } else if (j->pinned[ith]) {
                (void)sched_setaffinity(0, sizeof j->saved[ith], &j->saved[ith]);
                j->pinned[ith] = false;
            }
        }
        break;
    case HW_FMA512: r = fma_avx512(j->iters); break;
    case HW_FMA256: r = fma_avx2(j->iters); break;
    case HW_BF16: r = bf16_avx512(j->iters); break;
    case HW_VNNI: r = vnni_avx512(j->iters); break;
    case HW_AMX: r = amx_peak(false, j->iters); break;
    case HW_AMX_BF16: r = amx_peak(true, j->iters); break;
    }
    j->sink[ith & 63] = r;
}

/* Median wall time (ms) of reps runs of the job, after one warm-up. */
static double time_median(tpool *pool, hw_job *j, int reps)
{
    double t[HW_MAX_REPS];
    tpool_run(pool, hw_worker, j);
    for (int r = 0; r < reps; r++) {
        double t0 = kvi_time_ms();
        tpool_run(pool, hw_worker, j);
        t[r] = kvi_time_ms() - t0;
    }
    return stats_median(t, reps);
}

/* Rate (1e9 ops/s, all threads) of a compute kernel doing ops_per_iter per thread
 * and iteration; iterations doubled until one run lasts target_ms. */
static double compute_rate(tpool *pool, hw_kernel kind, double ops_per_iter, double target_ms, int reps)
{
    hw_job *j = calloc(1, sizeof *j);
    if (!j) return 0.0;
    j->kind = kind;
    j->iters = 1024;
    for (;;) {
        double t0 = kvi_time_ms();
        tpool_run(pool, hw_worker, j);
        double ms = kvi_time_ms() - t0;
        if (ms >= target_ms || j->iters >= ((uint64_t)1 << 40)) break;
        j->iters *= ms > target_ms / 64 ? 2 : 16;
    }
    double ms = time_median(pool, j, reps);
    double ops = ops_per_iter * (double)j->iters * tpool_size(pool);
    free(j);
    return ms > 0 ? ops / (ms * 1e6) : 0.0;
}

/* The read test: every supported method (only the first when quick) once per
 * round, rounds interleaved so that a burst of load elsewhere hits every method
 * alike; one untimed warm-up round. Fills out->read_* (read_bytes already set). */
static void read_bench(tpool *pool, hw_job *j, kvi_hw_limits *out, bool quick)
{
    int ms_of[KVI_HW_READ_METHODS_MAX]; /* [n] index into HW_READ_METHODS */
    int n = 0;
    const int isa = cpu_isa_level();
    for (int m = 0; m < HW_N_READ_METHODS && n < KVI_HW_READ_METHODS_MAX && !(quick && n == 1); m++)
        if (HW_READ_METHODS[m].isa == isa) ms_of[n++] = m;
    double t[KVI_HW_READ_METHODS_MAX][HW_MAX_REPS]; /* [method][rep] ms */
    for (int r = -1; r < out->reps; r++)
        for (int k = 0; k < n; k++) {
            j->method = ms_of[k];
            double t0 = kvi_time_ms();
            tpool_run(pool, hw_worker, j);
            if (r >= 0) t[k][r] = kvi_time_ms() - t0;
        }
    const double gb = (double)out->read_bytes / 1e6; /* GB/s = gb / ms */
    out->n_read_methods = n;
    for (int k = 0; k < n; k++) {
        kvi_hw_read_figure *f = &out->read_methods[k];
        f->method = HW_READ_METHODS[ms_of[k]].name;
        double med = stats_median(t[k], out->reps); /* sorted: t[k][0] is the fastest */
        f->median_gbs = med > 0 ? gb / med : 0.0;
        f->best_gbs = t[k][0] > 0 ? gb / t[k][0] : 0.0;
        if (f->median_gbs > out->read_gbs) {
            out->read_gbs = f->median_gbs;
            out->read_method = f->method;
        }
    }
}

/* Anonymous buffer of `bytes` on a 2 MiB boundary, huge pages hinted; *map_len is
 * the length to unmap from the returned base (*base). NULL when memory is short. */
static uint8_t *alloc_read_buffer(size_t bytes, void **base, size_t *map_len)
{
    const size_t huge = (size_t)2 << 20;
    *map_len = bytes + huge;
    void *p = mmap(NULL, *map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *base = p;
    uint8_t *b = (uint8_t *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(b, bytes, MADV_HUGEPAGE); /* a hint only */
#endif
    return b;
}

int kvi_hw_bench(kvi_hw_limits *out, int n_threads, bool quick, kvi_error *err)
{
    if (!out) return err_set(err, KVI_E_INVALID, "hw bench: no output");
    memset(out, 0, sizeof *out);
    if (n_threads < 0 || n_threads > 1024)
        return err_set(err, KVI_E_INVALID, "hw bench: %d threads is outside [0, 1024]", n_threads);
    const cpu_feature_set *cpu = cpu_features();
    tpool *pool = tpool_create(n_threads);
    if (!pool) return err_set(err, KVI_E_NOMEM, "hw bench: cannot create a pool of %d threads", n_threads);
    out->n_threads = tpool_size(pool);
    out->reps = quick ? 3 : 9;
    out->read_bytes = quick ? (size_t)64 << 20 : (size_t)1 << 30;
    out->read_method = "none";
    double target_ms = quick ? 5.0 : 100.0;

    void *base = NULL;
    size_t map_len = 0;
    uint8_t *buf = alloc_read_buffer(out->read_bytes, &base, &map_len);
    hw_job *j = buf ? calloc(1, sizeof *j) : NULL;
    if (!j) {
        if (buf) munmap(base, map_len);
        tpool_free(pool);
        size_t b = out->read_bytes;
        memset(out, 0, sizeof *out);
        return err_set(err, KVI_E_NOMEM, "hw bench: cannot allocate the %zu-byte read buffer", b);
    }
    memset(buf, 0x5A, out->read_bytes); /* fault every page in before timing; non-zero data */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    j->n_cpus = cpus > 0 ? (int)cpus : 1;
    /* pinning only when every thread gets a core of its own */
    const bool pin = !quick && out->n_threads > 1 && out->n_threads <= j->n_cpus;
    if (pin) {
        j->kind = HW_PIN;
        tpool_run(pool, hw_worker, j);
    }
    j->kind = HW_READ;
    j->buf = buf;
    j->bytes = out->read_bytes;
    read_bench(pool, j, out, quick);
    munmap(base, map_len);

    out->fp32_isa = "none";
    if (cpu_has_avx512()) {
        out->fp32_isa = "avx512";
        out->fp32_gflops = compute_rate(pool, HW_FMA512, HW_CHAINS * 32.0, target_ms, out->reps);
    } else if (cpu->avx2) {
        out->fp32_isa = "avx2";
        out->fp32_gflops = compute_rate(pool, HW_FMA256, HW_CHAINS * 16.0, target_ms, out->reps);
    }
    if (cpu->avx512_bf16)
        out->bf16_gflops = compute_rate(pool, HW_BF16, HW_CHAINS * 64.0, target_ms, out->reps);
    if (cpu->avx512f && cpu->avx512_vnni)
        out->int8_gops = compute_rate(pool, HW_VNNI, HW_CHAINS * 128.0, target_ms, out->reps);
    if (cpu_amx_on()) {
        out->amx_int8_gops = compute_rate(pool, HW_AMX, 4.0 * 16 * 16 * 64 * 2, target_ms, out->reps);
        out->amx_bf16_gflops = compute_rate(pool, HW_AMX_BF16, 4.0 * 16 * 16 * 32 * 2, target_ms, out->reps);
    }
    out->f16_on_amx = kern_amx_f16_on();
    if (pin) {
        j->kind = HW_UNPIN; /* the caller's thread gets its own mask back */
        tpool_run(pool, hw_worker, j);
    }
    free(j);
    tpool_free(pool);
    return 0;
}
