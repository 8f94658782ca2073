/*
 * hwbench.c — the machine's limits, measured: streaming read bandwidth and the
 * peak rates of the instructions the kernels are built on (FP32 FMA, BF16
 * vdpbf16ps, INT8 vpdpbusd), each on all threads of one worker pool.
 *
 * These are the roofline that `kvinfer bench` compares its tokens/s against:
 * decode should move weights near read_gbs, prefill should compute near the
 * arithmetic peak of its kernels' instruction.
 *
 * Method (each figure is the median of `reps` timed runs after one warm-up):
 *  - read: a buffer of read_bytes (1 GiB, 64 MiB quick; much larger than the
 *    per-core caches), filled with non-zero bytes first so every page is faulted
 *    in; each thread sums its contiguous slice with 64-byte loads into 8
 *    independent accumulators. GB/s = read_bytes / wall time.
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
 * 16 lanes x 4 products x 2 = 128 OP.
 */
#include "error.h"
#include "threads.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HW_CHAINS 12
#define HW_MAX_REPS 64

typedef enum hw_kernel { HW_READ, HW_FMA512, HW_FMA256, HW_BF16, HW_VNNI } hw_kernel;

typedef struct hw_job {
    hw_kernel kind;
    const uint8_t *buf;       /* [bytes] read test buffer */
    size_t bytes;
    uint64_t iters;           /* compute tests: iterations per thread */
    volatile float sink[64];  /* [thread] results kept alive */
} hw_job;

/* ---- per-ISA loops --------------------------------------------------------- */

__attribute__((target("avx512f")))
static float read_avx512(const uint8_t *p, size_t n)
{
    __m512i a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 512 <= n; i += 512)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            a[k] = _mm512_add_epi64(a[k], _mm512_load_si512((const void *)(p + i + 64 * k)));
    for (int k = 1; k < 8; k++) a[0] = _mm512_add_epi64(a[0], a[k]);
    uint64_t t[8], s = 0;   /* unsigned sum: the header's reduce is signed and may overflow */
    _mm512_storeu_si512((void *)t, a[0]);
    for (int k = 0; k < 8; k++) s += t[k];
    for (; i < n; i++) s += p[i];
    return (float)s;
}

__attribute__((target("avx2")))
static float read_avx2(const uint8_t *p, size_t n)
{
    __m256i a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 256 <= n; i += 256)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            a[k] = _mm256_add_epi64(a[k], _mm256_load_si256((const __m256i *)(p + i + 32 * k)));
    for (int k = 1; k < 8; k++) a[0] = _mm256_add_epi64(a[0], a[k]);
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a[0]);
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) s += p[i];
    return (float)s;
}

static float read_scalar(const uint8_t *p, size_t n)
{
    uint64_t s[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t v;
            memcpy(&v, p + i + 8 * k, 8);
            s[k] += v;
        }
    for (; i < n; i++) s[0] += p[i];
    return (float)(s[0] + s[1] + s[2] + s[3]);
}

__attribute__((target("avx512f,fma")))
static float fma_avx512(uint64_t iters)
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

__attribute__((target("avx2,fma")))
static float fma_avx2(uint64_t iters)
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

__attribute__((target("avx512f,avx512bf16")))
static float bf16_avx512(uint64_t iters)
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

__attribute__((target("avx512f,avx512vnni")))
static float vnni_avx512(uint64_t iters)
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

/* ---- pool driver ----------------------------------------------------------- */

static bool cpu_has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

static void hw_worker(void *ctx, int ith, int nth)
{
    hw_job *j = ctx;
    float r = 0.0f;
    switch (j->kind) {
    case HW_READ: {
        /* contiguous slices on 512-byte boundaries; the last thread takes the tail */
        size_t per = j->bytes / (size_t)nth / 512 * 512;
        size_t off = per * (size_t)ith;
        size_t len = ith == nth - 1 ? j->bytes - off : per;
        if (cpu_has_avx512()) r = read_avx512(j->buf + off, len);
        else if (__builtin_cpu_supports("avx2")) r = read_avx2(j->buf + off, len);
        else r = read_scalar(j->buf + off, len);
        break;
    }
    case HW_FMA512: r = fma_avx512(j->iters); break;
    case HW_FMA256: r = fma_avx2(j->iters); break;
    case HW_BF16: r = bf16_avx512(j->iters); break;
    case HW_VNNI: r = vnni_avx512(j->iters); break;
    }
    j->sink[ith & 63] = r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median wall time (ms) of reps runs of the job, after one warm-up. */
static double time_median(kvi_pool *pool, hw_job *j, int reps)
{
    double t[HW_MAX_REPS];
    kvi_pool_run(pool, hw_worker, j);
    for (int r = 0; r < reps; r++) {
        double t0 = kvi_time_ms();
        kvi_pool_run(pool, hw_worker, j);
        t[r] = kvi_time_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

/* Rate (1e9 ops/s, all threads) of a compute kernel doing ops_per_iter per thread
 * and iteration; iterations doubled until one run lasts target_ms. */
static double compute_rate(kvi_pool *pool, hw_kernel kind, double ops_per_iter, double target_ms, int reps)
{
    hw_job *j = calloc(1, sizeof *j);
    if (!j) return 0.0;
    j->kind = kind;
    j->iters = 1024;
    for (;;) {
        double t0 = kvi_time_ms();
        kvi_pool_run(pool, hw_worker, j);
        double ms = kvi_time_ms() - t0;
        if (ms >= target_ms || j->iters >= ((uint64_t)1 << 40)) break;
        j->iters *= ms > target_ms / 64 ? 2 : 16;
    }
    double ms = time_median(pool, j, reps);
    double ops = ops_per_iter * (double)j->iters * kvi_pool_size(pool);
    free(j);
    return ms > 0 ? ops / (ms * 1e6) : 0.0;
}

int kvi_hw_bench(kvi_hw_limits *out, int n_threads, bool quick, kvi_error *err)
{
    if (!out) return kvi_err_set(err, KVI_E_INVALID, "hw bench: no output");
    memset(out, 0, sizeof *out);
    if (n_threads < 0 || n_threads > 1024)
        return kvi_err_set(err, KVI_E_INVALID, "hw bench: %d threads is outside [0, 1024]", n_threads);
    __builtin_cpu_init();
    kvi_pool *pool = kvi_pool_create(n_threads);
    if (!pool) return kvi_err_set(err, KVI_E_NOMEM, "hw bench: cannot create a pool of %d threads", n_threads);
    out->n_threads = kvi_pool_size(pool);
    out->reps = quick ? 3 : 7;
    out->read_bytes = quick ? (size_t)64 << 20 : (size_t)1 << 30;
    double target_ms = quick ? 5.0 : 100.0;

    void *buf = mmap(NULL, out->read_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        kvi_pool_free(pool);
        size_t b = out->read_bytes;
        memset(out, 0, sizeof *out);
        return kvi_err_set(err, KVI_E_NOMEM, "hw bench: cannot allocate the %zu-byte read buffer", b);
    }
    memset(buf, 0x5A, out->read_bytes);   /* fault every page in; non-zero data */
    hw_job *j = calloc(1, sizeof *j);
    bool read_ok = j != NULL;
    if (j) {
        j->kind = HW_READ;
        j->buf = buf;
        j->bytes = out->read_bytes;
        double ms = time_median(pool, j, out->reps);
        out->read_gbs = ms > 0 ? (double)out->read_bytes / (ms * 1e6) : 0.0;
        free(j);
    }
    munmap(buf, out->read_bytes);

    out->fp32_isa = "none";
    if (cpu_has_avx512()) {
        out->fp32_isa = "avx512";
        out->fp32_gflops = compute_rate(pool, HW_FMA512, HW_CHAINS * 32.0, target_ms, out->reps);
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        out->fp32_isa = "avx2";
        out->fp32_gflops = compute_rate(pool, HW_FMA256, HW_CHAINS * 16.0, target_ms, out->reps);
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"))
        out->bf16_gflops = compute_rate(pool, HW_BF16, HW_CHAINS * 64.0, target_ms, out->reps);
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"))
        out->int8_gops = compute_rate(pool, HW_VNNI, HW_CHAINS * 128.0, target_ms, out->reps);
    kvi_pool_free(pool);
    if (!read_ok) return kvi_err_set(err, KVI_E_NOMEM, "hw bench: out of memory");
    return 0;
}
