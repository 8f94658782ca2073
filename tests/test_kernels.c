/*
 * test_kernels.c — dot products of every ISA the machine has against the scalar
 * reference, matmul of every weight type against kern_matmul_ref, the bit-identity
 * of an output row across batch sizes and thread counts, SIMD dequantisation
 * against the reference, and the worker pool.
 */
#include "kvinfer.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const kvi_type ALL_TYPES[] = {
    KVI_TYPE_F32,  KVI_TYPE_F16,  KVI_TYPE_BF16, KVI_TYPE_Q8_0,   KVI_TYPE_Q8_1,   KVI_TYPE_Q4_0,
    KVI_TYPE_Q4_1, KVI_TYPE_Q5_0, KVI_TYPE_Q5_1, KVI_TYPE_Q2_K,   KVI_TYPE_Q3_K,   KVI_TYPE_Q4_K,
    KVI_TYPE_Q5_K, KVI_TYPE_Q6_K, KVI_TYPE_Q8_K, KVI_TYPE_IQ4_NL, KVI_TYPE_IQ4_XS, KVI_TYPE_MXFP4,
};
#define N_TYPES (int)(sizeof ALL_TYPES / sizeof ALL_TYPES[0])

/* A random [n_out][n_in] matrix of type t (Q8_1, which kvinfer does not quantise
 * to, gets random quants and scales directly). Caller frees. */
static void *random_matrix(kvi_type t, int64_t n_out, int64_t n_in, uint64_t *rs)
{
    if (t != KVI_TYPE_Q8_1) return trand_weights_normal(t, n_out, n_in, rs);
    size_t rb = quant_row_bytes(t, n_in);
    uint8_t *w = malloc(rb * (size_t)n_out);
    for (int64_t j = 0; j < n_out; j++) {
        block_q8_1 *b = (block_q8_1 *)(w + (size_t)j * rb);
        for (int64_t k = 0; k < n_in / 32; k++) {
            b[k].d = quant_f32_to_f16(0.01f + trand_uniform(rs) * 0.02f);
            b[k].s = 0;
            for (int l = 0; l < 32; l++) b[k].qs[l] = (int8_t)(trand_u64(rs) % 255 - 127);
        }
    }
    return w;
}

static void test_isa(void)
{
    kern_isa best = kern_isa_detect();
    printf("detected ISA: %s, active: %s\n", kern_isa_str(best), kvi_isa_name());
    CHECK(strcmp(kvi_isa_name(), kern_isa_str(kern_isa_active())) == 0, "isa name");
    CHECK((int)kern_isa_active() <= (int)best, "active never above detected");
    for (int i = 0; i <= (int)best; i++) {
        kern_isa_set((kern_isa)i);
        CHECK(kern_isa_active() == (kern_isa)i, "set %s", kern_isa_str((kern_isa)i));
    }
    kern_isa_set(KVI_ISA_AVX512);
    CHECK(kern_isa_active() == best, "set is capped at the CPU's best");
    CHECK(strcmp(kern_isa_str(KVI_ISA_AVX2), "avx2") == 0 &&
              strcmp(kern_isa_str(KVI_ISA_SCALAR), "scalar") == 0 &&
              strcmp(kern_isa_str(KVI_ISA_AVX512), "avx512") == 0,
          "isa strings");
}

static void test_dot(void)
{
    static const int64_t lens[] = { 1,  2,  3,  7,  8,   9,   15,  16,  17,   31,  32,
                                    33, 63, 64, 65, 100, 127, 255, 257, 1000, 4097 };
    enum { MAXN = 4097 };
    float *a = malloc(MAXN * sizeof(float)), *b = malloc(MAXN * sizeof(float));
    uint64_t rs = 777;
    trand_fill_normal(a, MAXN, &rs);
    trand_fill_normal(b, MAXN, &rs);
    for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
        kern_isa_set((kern_isa)isa);
        int bad = 0;
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            int64_t n = lens[k];
            const double mag = abs_dot(a, b, n);
            /* offsets 0..2 make the loads unaligned */
            for (int off = 0; off < 3 && off + n <= MAXN; off++) {
                float d = kern_dot_f32(a + off, b + off, n), r = kern_dot_f32_ref(a + off, b + off, n);
                if (!(fabs((double)d - r) <= 2e-6 * mag + 1e-7)) {
                    bad++;
                    CHECK(0, "%s dot n=%lld off=%d: %.9g vs ref %.9g", kern_isa_str((kern_isa)isa),
                          (long long)n, off, d, r);
                }
            }
        }
        CHECK(bad == 0, "%s dot", kern_isa_str((kern_isa)isa));
        /* hand value: sum_{i=1..n} i * 1 = n(n+1)/2, exact in f32 for n = 999 */
        float *c = malloc(999 * sizeof(float)), *o = malloc(999 * sizeof(float));
        for (int i = 0; i < 999; i++) {
            c[i] = (float)(i + 1);
            o[i] = 1.0f;
        }
        CHECK(kern_dot_f32(c, o, 999) == 499500.0f, "%s dot 1..999", kern_isa_str((kern_isa)isa));
        CHECK(kern_dot_f32(c, o, 0) == 0.0f, "empty dot");
        free(c);
        free(o);
    }
    kern_isa_set(KVI_ISA_AVX512);
    free(a);
    free(b);
}

/* SIMD dequantisation (through kern_tensor_get_row) equals the reference exactly. */
static void test_get_row(void)
{
    const int64_t n_in = 512, n_out = 3;
    uint64_t rs = 99;
    float *ref = malloc(n_in * sizeof(float)), *got = malloc(n_in * sizeof(float));
    for (int k = 0; k < N_TYPES; k++) {
        kvi_type t = ALL_TYPES[k];
        void *w = random_matrix(t, n_out, n_in, &rs);
        kern_tensor W = { w, t, n_in, n_out, KVI_LAYOUT_ROWS };
        size_t rb = quant_row_bytes(t, n_in);
        for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
            kern_isa_set((kern_isa)isa);
            int bad = 0;
            for (int64_t j = 0; j < n_out; j++) {
                quant_dequant_row(t, (const uint8_t *)w + (size_t)j * rb, ref, n_in);
                kern_tensor_get_row(&W, j, got);
                bad += memcmp(ref, got, (size_t)n_in * sizeof(float)) != 0;
            }
            CHECK(bad == 0, "%s get_row (%s) differs from reference", kvi_type_name(t),
                  kern_isa_str((kern_isa)isa));
        }
        got[0] = 7.0f;
        CHECK(kern_tensor_get_row(&W, n_out, got) == KVI_E_INVALID && got[0] == 7.0f,
              "%s get_row out of range: KVI_E_INVALID, nothing written", kvi_type_name(t));
        CHECK(kern_tensor_get_row(&W, -1, got) == KVI_E_INVALID, "%s get_row -1 refused", kvi_type_name(t));
        free(w);
    }
    kern_isa_set(KVI_ISA_AVX512);
    free(ref);
    free(got);
}

/* The floats that the activation blocks of n inputs of x stand for (d * q). */
static void q8_dequant_act(kvi_type t, const float *x, float *dst, int64_t n)
{
    void *xq = malloc(kern_q8_act_row_bytes(t, n));
    kern_q8_quantize_act(t, x, xq, n);
    if (kern_q8_act_type(t) == KVI_TYPE_Q8_0) {
        const kern_q8a *b = xq;
        for (int64_t i = 0; i < n; i++) dst[i] = b[i / 32].d * (float)b[i / 32].qs[i % 32];
    } else {
        const kern_q8k *b = xq;
        for (int64_t i = 0; i < n; i++) dst[i] = b[i / QK_K].d * (float)b[i / QK_K].qs[i % QK_K];
    }
    free(xq);
}

/* Activation quantisation: Q8_0 blocks equal quant_quantize_row's (an independent
 * quantiser) in scale and quants, sums are exact, and a hand-made Q8_K block. */
static void test_q8_act(void)
{
    enum { N = 512 };
    float x[N];
    uint64_t rs = 5150;
    trand_fill_normal(x, N, &rs);
    kern_q8a qa[N / 32];
    block_q8_0 ref[N / 32];
    kern_q8_quantize_act(KVI_TYPE_Q4_0, x, qa, N);
    quant_quantize_row(KVI_TYPE_Q8_0, x, ref, N);
    int bad = 0;
    for (int b = 0; b < N / 32; b++) {
        int sum = 0;
        for (int i = 0; i < 32; i++) sum += qa[b].qs[i];
        bad +=
            qa[b].d != quant_f16_to_f32(ref[b].d) || memcmp(qa[b].qs, ref[b].qs, 32) != 0 || qa[b].sum != sum;
        bad += fabsf(qa[b].s - qa[b].d * (float)sum) > 1e-3f * fabsf(qa[b].d * (float)sum) + 1e-6f;
    }
    CHECK(bad == 0, "q8 activation blocks differ from Q8_0 quantisation in %d blocks", bad);
    /* Q8_K by hand: x = i - 155 for i < 256: largest magnitude -155, d = 155/127,
     * q(100) = round(100 * 127 / 155) = 82 */
    float xk[QK_K];
    for (int i = 0; i < QK_K; i++) xk[i] = (float)(i - 155);
    kern_q8k k;
    kern_q8_quantize_act(KVI_TYPE_Q4_K, xk, &k, QK_K);
    CHECK(fabsf(k.d - 155.0f / 127.0f) < 1e-6f && k.qs[0] == -127 && k.qs[155] == 0 && k.qs[255] == 82,
          "q8_K hand block: d %g q %d %d %d", k.d, k.qs[0], k.qs[155], k.qs[255]);
    int s32 = 0;
    for (int i = 32; i < 64; i++) s32 += k.qs[i];
    CHECK(k.sum32[1] == s32 && k.sum16[3] == k.qs[48] + k.qs[49] + k.qs[50] + k.qs[51] + k.qs[52] + k.qs[53] +
                                                 k.qs[54] + k.qs[55] + k.qs[56] + k.qs[57] + k.qs[58] +
                                                 k.qs[59] + k.qs[60] + k.qs[61] + k.qs[62] + k.qs[63],
          "q8_K sums");
    /* hand dot: Q8_0 weight block of ones (d = 0.5) times activation quants 1..32
     * (d_x from the block): isum = 528, y = 0.5 * d_x * 528 */
    block_q8_0 wb;
    wb.d = quant_f32_to_f16(0.5f);
    for (int i = 0; i < 32; i++) wb.qs[i] = 1;
    float xs[32];
    for (int i = 0; i < 32; i++) xs[i] = (float)(i + 1);
    kern_q8a xa;
    kern_q8_quantize_act(KVI_TYPE_Q8_0, xs, &xa, 32);
    CHECK(xa.qs[31] == 127 && xa.d == quant_f16_to_f32(quant_f32_to_f16(32.0f / 127.0f)),
          "q8 act hand block");
    int isum = 0;
    for (int i = 0; i < 32; i++) isum += xa.qs[i];
    CHECK(kern_q8_dot_ref(KVI_TYPE_Q8_0, &wb, &xa, 32) == 0.5f * xa.d * (float)isum, "q8 hand dot");
}

/* Every ISA's integer path gives kern_q8_dot_ref's bits, on shapes with a partial
 * 16-row tile and 1..9 input rows. */
static void test_q8_exact(tpool *pool)
{
    const int64_t n_in = 768, n_out = 53;
    uint64_t rs = 8080;
    float *x = malloc((size_t)(9 * n_in) * sizeof(float)), *y = malloc((size_t)(9 * n_out) * sizeof(float));
    float *yr = malloc((size_t)(9 * n_out) * sizeof(float));
    trand_fill_normal(x, 9 * n_in, &rs);
    for (int k = 0; k < N_TYPES; k++) {
        kvi_type t = ALL_TYPES[k];
        if (kern_q8_act_type(t) == KVI_TYPE_F32) continue;
        void *wq = random_matrix(t, n_out, n_in, &rs);
        kern_tensor W = { wq, t, n_in, n_out, KVI_LAYOUT_ROWS };
        size_t xrb = kern_q8_act_row_bytes(t, n_in), rb = quant_row_bytes(t, n_in);
        uint8_t *xq = malloc(xrb * 9);
        for (int r = 0; r < 9; r++) kern_q8_quantize_act(t, x + r * n_in, xq + (size_t)r * xrb, n_in);
        for (int r = 0; r < 9; r++)
            for (int64_t j = 0; j < n_out; j++)
                yr[r * n_out + j] =
                    kern_q8_dot_ref(t, (const uint8_t *)wq + (size_t)j * rb, xq + (size_t)r * xrb, n_in);
        for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
            kern_isa_set((kern_isa)isa);
            int bad = 0;
            for (int nr = 1; nr <= 9; nr += 4) {
                kern_matmul(pool, &W, x, n_in, nr, y, n_out);
                bad += memcmp(y, yr, (size_t)(nr * n_out) * sizeof(float)) != 0;
            }
            CHECK(bad == 0, "%s/%s: integer path differs from kern_q8_dot_ref", kvi_type_name(t),
                  kern_isa_str((kern_isa)isa));
        }
        free(xq);
        free(wq);
    }
    kern_isa_set(KVI_ISA_AVX512);
    free(x);
    free(y);
    free(yr);
}

/* MXFP4 blocks of random bytes (every nibble) with exponents that the quantiser
 * never writes for these inputs: the subnormal scales e = 0, 1, then 2, 3, 60,
 * 180 and random ones in 100..140 (every fifth output row only 0 or 1, so that
 * its sum is made of subnormal scales alone); 37 outputs (a partial 16-row tile), 7 blocks
 * (a partial group of four in the decode GEMV), 1..9 rows of random non-zero
 * inputs, 1 and 3 threads: every ISA's path gives kern_q8_dot_ref's bits. */
static void test_mxfp4_exact(tpool *pool)
{
    const int64_t n_in = 7 * 32, n_out = 37, n_rows = 9;
    const size_t rb = quant_row_bytes(KVI_TYPE_MXFP4, n_in),
                 xrb = kern_q8_act_row_bytes(KVI_TYPE_MXFP4, n_in);
    static const uint8_t E[6] = { 0, 1, 2, 3, 60, 180 };
    uint64_t rs = 3939;
    uint8_t *w = malloc(rb * (size_t)n_out), *xq = malloc(xrb * (size_t)n_rows);
    float *x = malloc((size_t)(n_rows * n_in) * sizeof(float));
    float *y = malloc((size_t)(n_rows * n_out) * sizeof(float)),
          *yr = malloc((size_t)(n_rows * n_out) * sizeof(float));
    int n_sub = 0;
    for (int64_t j = 0; j < n_out; j++)
        for (int64_t b = 0; b < n_in / 32; b++) {
            uint8_t *blk = w + (size_t)j * rb + (size_t)b * 17;
            const uint64_t r = trand_u64(&rs);
            blk[0] = j % 5 == 0   ? (uint8_t)(r & 1)
                     : r % 3 == 0 ? E[(r >> 8) % 6]
                                  : (uint8_t)(100 + (r >> 16) % 41);
            n_sub += blk[0] < 2;
            for (int i = 1; i < 17; i++) blk[i] = (uint8_t)trand_u64(&rs);
        }
    for (int64_t i = 0; i < n_rows * n_in; i++) {
        const float v = trand_normal(&rs);
        x[i] = v != 0.0f ? v : 0.5f;
    }
    CHECK(n_sub > 5, "mxfp4 extremes: only %d subnormal scales", n_sub);
    for (int64_t r = 0; r < n_rows; r++)
        kern_q8_quantize_act(KVI_TYPE_MXFP4, x + r * n_in, xq + (size_t)r * xrb, n_in);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < n_out; j++)
            yr[r * n_out + j] =
                kern_q8_dot_ref(KVI_TYPE_MXFP4, w + (size_t)j * rb, xq + (size_t)r * xrb, n_in);
    int n_fin = 0;
    for (int64_t i = 0; i < n_rows * n_out; i++) n_fin += isfinite(yr[i]) && yr[i] != 0.0f;
    CHECK(n_fin == n_rows * n_out, "mxfp4 extremes: %d of %d reference outputs finite and non-zero", n_fin,
          (int)(n_rows * n_out));
    kern_tensor W = { w, KVI_TYPE_MXFP4, n_in, n_out, KVI_LAYOUT_ROWS };
    for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
        kern_isa_set((kern_isa)isa);
        int bad = 0;
        for (int nr = 1; nr <= n_rows; nr++) {
            memset(y, 0, (size_t)(n_rows * n_out) * sizeof(float));
            kern_matmul(pool, &W, x, n_in, nr, y, n_out);
            bad += memcmp(y, yr, (size_t)(nr * n_out) * sizeof(float)) != 0;
        }
        CHECK(bad == 0, "mxfp4 extremes/%s: %d row counts differ from kern_q8_dot_ref",
              kern_isa_str((kern_isa)isa), bad);
    }
    kern_isa_set(KVI_ISA_AVX512);
    free(w);
    free(xq);
    free(x);
    free(y);
    free(yr);
}

/* The many-row integer tiles against kern_q8_dot_ref, bit for bit: every row count
 * 1..14 and 31 (register tiles of several rows with a partial last one), outputs
 * that are not a multiple of 32 split over 1, 2 and 4 threads (thread ranges of an
 * odd number of 16-output tiles), and n_in = 37 blocks (the packed path walks the
 * inputs in chunks, carrying accumulators through y). */
static void test_qgemm_tiles(void)
{
    const int64_t n_in = 37 * 32, n_out = 87, max_rows = 31, x_cap = 5 * QK_K; /* x_cap >= every nin */
    const kvi_type types[] = { KVI_TYPE_Q8_0, KVI_TYPE_Q4_0,   KVI_TYPE_Q5_0,   KVI_TYPE_Q4_1,
                               KVI_TYPE_Q6_K, KVI_TYPE_IQ4_NL, KVI_TYPE_IQ4_XS, KVI_TYPE_MXFP4 };
    uint64_t rs = 4242;
    float *x = malloc((size_t)(max_rows * x_cap) * sizeof(float));
    float *y = malloc((size_t)(max_rows * n_out) * sizeof(float));
    float *yr = malloc((size_t)(max_rows * n_out) * sizeof(float));
    trand_fill_normal(x, max_rows * x_cap, &rs);
    for (int k = 0; k < (int)(sizeof types / sizeof types[0]); k++) {
        const kvi_type t = types[k];
        const int64_t nin = kern_q8_act_type(t) == KVI_TYPE_Q8_K ? 5 * QK_K : n_in;
        void *wq = random_matrix(t, n_out, nin, &rs);
        kern_tensor W = { wq, t, nin, n_out, KVI_LAYOUT_ROWS };
        const size_t xrb = kern_q8_act_row_bytes(t, nin), rb = quant_row_bytes(t, nin);
        uint8_t *xq = malloc(xrb * (size_t)max_rows);
        for (int r = 0; r < max_rows; r++) {
            kern_q8_quantize_act(t, x + r * nin, xq + (size_t)r * xrb, nin);
            for (int64_t j = 0; j < n_out; j++)
                yr[r * n_out + j] =
                    kern_q8_dot_ref(t, (const uint8_t *)wq + (size_t)j * rb, xq + (size_t)r * xrb, nin);
        }
        const int threads[] = { 1, 2, 4 };
        for (int ti = 0; ti < 3; ti++) {
            tpool *pool = tpool_create(threads[ti]);
            int bad = 0;
            for (int nr = 1; nr <= max_rows; nr = nr < 14 ? nr + 1 : max_rows + (nr == max_rows)) {
                for (int64_t i = 0; i < nr * n_out; i++) y[i] = NAN;
                kern_matmul(pool, &W, x, nin, nr, y, n_out);
                bad += memcmp(y, yr, (size_t)(nr * n_out) * sizeof(float)) != 0;
            }
            CHECK(bad == 0, "%s, %d threads: %d row counts differ from kern_q8_dot_ref", kvi_type_name(t),
                  threads[ti], bad);
            tpool_free(pool);
        }
        free(xq);
        free(wq);
    }
    free(x);
    free(y);
    free(yr);
}

/* kern_matmul of every type and ISA against the scalar reference; strides wider than
 * the data must leave the padding alone. */
static void test_matmul_vs_ref(tpool *pool)
{
    const int64_t n_in = 512, n_out = 37, n_rows = 5, ldx = n_in + 3, ldy = n_out + 5;
    uint64_t rs = 4242;
    float *x = malloc((size_t)(n_rows * ldx) * sizeof(float));
    float *y = malloc((size_t)(n_rows * ldy) * sizeof(float));
    float *yr = malloc((size_t)(n_rows * ldy) * sizeof(float));
    float *w = malloc((size_t)n_in * sizeof(float));
    trand_fill_normal(x, n_rows * ldx, &rs);
    for (int k = 0; k < N_TYPES; k++) {
        kvi_type t = ALL_TYPES[k];
        void *wq = random_matrix(t, n_out, n_in, &rs);
        kern_tensor W = { wq, t, n_in, n_out, KVI_LAYOUT_ROWS };
        kern_matmul_ref(&W, x, ldx, n_rows, yr, ldy);
        const bool q8 = kern_q8_act_type(t) != KVI_TYPE_F32;
        float *xd = malloc((size_t)(n_rows * ldx) * sizeof(float)); /* [n_rows][ldx] */
        memcpy(xd, x, (size_t)(n_rows * ldx) * sizeof(float));
        if (q8) {
            /* the integer path multiplies the 8-bit activations: reference = the
             * dequantised activations times the dequantised weights, in double */
            for (int64_t r = 0; r < n_rows; r++) q8_dequant_act(t, x + r * ldx, xd + r * ldx, n_in);
            for (int64_t j = 0; j < n_out; j++) {
                kern_tensor_get_row(&W, j, w);
                for (int64_t r = 0; r < n_rows; r++)
                    yr[r * ldy + j] = kern_dot_f32_ref(xd + r * ldx, w, n_in);
            }
            if (t == KVI_TYPE_Q4_1 || t == KVI_TYPE_Q5_1) {
                /* these use the block sum s = d * sum(q) rounded through f16 (as
                 * ggml's Q8_1) for the min term m * s: add that rounding */
                kern_q8a *xa = malloc(kern_q8_act_row_bytes(t, n_in));
                size_t rb = quant_row_bytes(t, n_in), bb = quant_block_bytes(t);
                for (int64_t r = 0; r < n_rows; r++) {
                    kern_q8_quantize_act(t, x + r * ldx, xa, n_in);
                    for (int64_t j = 0; j < n_out; j++) {
                        double c = 0;
                        for (int64_t b = 0; b < n_in / 32; b++) {
                            const uint8_t *blk = (const uint8_t *)wq + (size_t)j * rb + (size_t)b * bb;
                            quant_f16 mh;
                            memcpy(&mh, blk + 2, 2); /* m follows d in both layouts */
                            c += (double)quant_f16_to_f32(mh) *
                                 ((double)xa[b].s - (double)xa[b].d * xa[b].sum);
                        }
                        yr[r * ldy + j] = (float)(yr[r * ldy + j] + c);
                    }
                }
                free(xa);
            }
        }
        for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
            kern_isa_set((kern_isa)isa);
            for (int64_t i = 0; i < n_rows * ldy; i++) y[i] = -777.0f;
            kern_matmul(pool, &W, x, ldx, n_rows, y, ldy);
            int bad = 0, pad = 0;
            for (int64_t r = 0; r < n_rows; r++) {
                for (int64_t j = 0; j < n_out; j++) {
                    kern_tensor_get_row(&W, j, w);
                    const double mag = abs_dot(xd + r * ldx, w, n_in);
                    double e = fabs((double)y[r * ldy + j] - yr[r * ldy + j]);
                    if (!(e <= 1e-4 * mag + 1e-6)) {
                        if (bad++ < 3)
                            CHECK(0, "%s/%s y[%lld][%lld] = %.7g, ref %.7g", kvi_type_name(t),
                                  kern_isa_str((kern_isa)isa), (long long)r, (long long)j, y[r * ldy + j],
                                  yr[r * ldy + j]);
                    }
                }
                for (int64_t j = n_out; j < ldy; j++) pad += y[r * ldy + j] != -777.0f;
            }
            CHECK(bad == 0, "%s/%s matmul vs ref: %d outputs off", kvi_type_name(t),
                  kern_isa_str((kern_isa)isa), bad);
            CHECK(pad == 0, "%s matmul wrote into the stride padding", kvi_type_name(t));
        }
        free(wq);
        free(xd);
    }
    kern_isa_set(KVI_ISA_AVX512);
    /* hand check: W = [[1,2],[3,4],[5,6]] (rows), x = [1, -1] -> y = [-1, -1, -1] at f32
     * with n_in a block-free 2 */
    {
        float wm[6] = { 1, 2, 3, 4, 5, 6 }, xv[2] = { 1, -1 }, yv[3];
        kern_tensor W = { wm, KVI_TYPE_F32, 2, 3, KVI_LAYOUT_ROWS };
        kern_matmul(pool, &W, xv, 2, 1, yv, 3);
        CHECK(yv[0] == -1.0f && yv[1] == -1.0f && yv[2] == -1.0f, "hand matmul %g %g %g", yv[0], yv[1],
              yv[2]);
    }
    /* bad arguments: an error code, no output written, no crash */
    {
        float yv[4] = { 1, 2, 3, 4 };
        kern_tensor W = { x, (kvi_type)4, 32, 4, KVI_LAYOUT_ROWS };
        CHECK(kern_matmul(pool, &W, x, 32, 1, yv, 4) == KVI_E_INVALID, "unknown type refused");
        CHECK(yv[0] == 1 && yv[3] == 4, "unknown type: output untouched");
        kern_tensor W2 = { x, KVI_TYPE_Q4_0, 33, 4, KVI_LAYOUT_ROWS };
        CHECK(kern_matmul(pool, &W2, x, 33, 1, yv, 4) == KVI_E_INVALID, "partial block refused");
        CHECK(kern_matmul_ref(&W2, x, 33, 1, yv, 4) == KVI_E_INVALID,
              "partial block refused by the reference");
        kern_tensor W3 = { x, KVI_TYPE_F32, 32, 4, KVI_LAYOUT_ROWS };
        CHECK(kern_matmul(pool, &W3, x, 31, 1, yv, 4) == KVI_E_INVALID, "ldx < n_in refused");
        CHECK(kern_matmul(pool, &W3, x, 32, 1, yv, 3) == KVI_E_INVALID, "ldy < n_out refused");
        CHECK(kern_matmul(pool, &W3, NULL, 32, 1, yv, 4) == KVI_E_INVALID, "no input refused");
        const kern_tensor *ws[2] = { &W3, &W2 };
        float *ys[2] = { yv, yv };
        const int64_t lds[2] = { 4, 4 };
        CHECK(kern_matmul_multi(pool, 2, ws, x, 33, 1, ys, lds) == KVI_E_INVALID,
              "multi: a bad matrix refused");
        CHECK(yv[0] == 1 && yv[3] == 4, "refusals wrote nothing");
        CHECK(kern_matmul(pool, &W3, x, 32, 1, yv, 4) == KVI_OK && yv[0] != 1, "a good call succeeds");
    }
    free(x);
    free(y);
    free(yr);
    free(w);
}

/* A row computed alone equals the same row inside a 64-row batch, bit for bit,
 * and the result does not depend on the number of threads. */
static void test_bit_identity(void)
{
    const int64_t n_in = 768, n_out = 45, n_rows = 64;
    uint64_t rs = 31337;
    tpool *p1 = tpool_create(1), *p2 = tpool_create(2), *p3 = tpool_create(3);
    float *x = malloc((size_t)(n_rows * n_in) * sizeof(float));
    float *yb = malloc((size_t)(n_rows * n_out) * sizeof(float));
    float *yt = malloc((size_t)(n_rows * n_out) * sizeof(float));
    float *y1 = malloc((size_t)n_out * sizeof(float));
    trand_fill_normal(x, n_rows * n_in, &rs);
    for (int k = 0; k < N_TYPES; k++) {
        kvi_type t = ALL_TYPES[k];
        if (quant_row_bytes(t, n_in) == 0) continue;
        void *wq = random_matrix(t, n_out, n_in, &rs);
        kern_tensor W = { wq, t, n_in, n_out, KVI_LAYOUT_ROWS };
        for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
            kern_isa_set((kern_isa)isa);
            kern_matmul(p2, &W, x, n_in, n_rows, yb, n_out);
            int bad_rows = 0;
            for (int64_t r = 0; r < n_rows; r += 7) {
                kern_matmul(NULL, &W, x + r * n_in, n_in, 1, y1, n_out);
                bad_rows += memcmp(y1, yb + r * n_out, (size_t)n_out * sizeof(float)) != 0;
            }
            CHECK(bad_rows == 0, "%s/%s: %d rows differ alone vs in a batch", kvi_type_name(t),
                  kern_isa_str((kern_isa)isa), bad_rows);
            kern_matmul(p1, &W, x, n_in, n_rows, yt, n_out);
            CHECK(memcmp(yt, yb, (size_t)(n_rows * n_out) * sizeof(float)) == 0,
                  "%s/%s: 1 vs 2 threads differ", kvi_type_name(t), kern_isa_str((kern_isa)isa));
            kern_matmul(p3, &W, x, n_in, n_rows, yt, n_out);
            CHECK(memcmp(yt, yb, (size_t)(n_rows * n_out) * sizeof(float)) == 0,
                  "%s/%s: 3 vs 2 threads differ", kvi_type_name(t), kern_isa_str((kern_isa)isa));
        }
        free(wq);
    }
    kern_isa_set(KVI_ISA_AVX512);
    tpool_free(p1);
    tpool_free(p2);
    tpool_free(p3);
    free(x);
    free(yb);
    free(yt);
    free(y1);
}

/* Decode shapes: 1..4 input rows (the AVX-512 row-major path for Q8_0/Q4_0) give
 * kern_q8_dot_ref's bits and the bits of the same rows inside a 64-row product, for
 * every ISA and 1..3 threads; n_in = 416 leaves a partial group of blocks. */
static void test_gemv_exact(void)
{
    const int64_t n_ins[2] = { 416, 2048 }, n_out = 53, n_big = 64;
    uint64_t rs = 4242;
    tpool *pools[3] = { tpool_create(1), tpool_create(2), tpool_create(3) };
    float *x = malloc((size_t)(n_big * 2048) * sizeof(float));
    float *yb = malloc((size_t)(n_big * n_out) * sizeof(float)),
          *y = malloc((size_t)(4 * n_out) * sizeof(float));
    float *yr = malloc((size_t)(4 * n_out) * sizeof(float));
    trand_fill_normal(x, n_big * 2048, &rs);
    for (int ni = 0; ni < 2; ni++) {
        const int64_t n_in = n_ins[ni];
        for (int k = 0; k < N_TYPES; k++) {
            const kvi_type t = ALL_TYPES[k];
            const size_t xrb = kern_q8_act_row_bytes(t, n_in), rb = quant_row_bytes(t, n_in);
            if (xrb == 0) continue;
            void *wq = random_matrix(t, n_out, n_in, &rs);
            kern_tensor W = { wq, t, n_in, n_out, KVI_LAYOUT_ROWS };
            uint8_t *xq = malloc(xrb * 4);
            for (int r = 0; r < 4; r++) {
                kern_q8_quantize_act(t, x + r * n_in, xq + (size_t)r * xrb, n_in);
                for (int64_t j = 0; j < n_out; j++)
                    yr[r * n_out + j] =
                        kern_q8_dot_ref(t, (const uint8_t *)wq + (size_t)j * rb, xq + (size_t)r * xrb, n_in);
            }
            for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
                kern_isa_set((kern_isa)isa);
                kern_matmul(pools[1], &W, x, n_in, n_big, yb, n_out);
                int bad_ref = 0, bad_big = 0;
                for (int p = 0; p < 3; p++)
                    for (int nr = 1; nr <= 4; nr++) {
                        for (int64_t i = 0; i < nr * n_out; i++) y[i] = -777.0f;
                        kern_matmul(pools[p], &W, x, n_in, nr, y, n_out);
                        bad_ref += memcmp(y, yr, (size_t)(nr * n_out) * sizeof(float)) != 0;
                        bad_big += memcmp(y, yb, (size_t)(nr * n_out) * sizeof(float)) != 0;
                    }
                CHECK(
                    bad_ref == 0 && bad_big == 0,
                    "%s n_in %d/%s: %d decode products differ from the reference, %d from the 64-row product",
                    kvi_type_name(t), (int)n_in, kern_isa_str((kern_isa)isa), bad_ref, bad_big);
            }
            free(xq);
            free(wq);
        }
    }
    kern_isa_set(KVI_ISA_AVX512);
    for (int p = 0; p < 3; p++) tpool_free(pools[p]);
    free(x);
    free(yb);
    free(y);
    free(yr);
}

/* kern_matmul_multi equals one kern_matmul per matrix, bit for bit: matrices of one
 * type, of two types sharing an activation type, of different activation types
 * (fallback) and of a float type; 1 and 9 input rows; padded output strides. */
static void test_matmul_multi(tpool *pool)
{
    const int64_t n_in = 512, n_out[3] = { 53, 16, 37 }, ldy[3] = { 55, 16, 40 };
    const kvi_type sets[5][3] = {
        { KVI_TYPE_Q8_0, KVI_TYPE_Q8_0, KVI_TYPE_Q8_0 }, { KVI_TYPE_Q4_0, KVI_TYPE_Q4_0, KVI_TYPE_Q4_0 },
        { KVI_TYPE_Q4_K, KVI_TYPE_Q6_K, KVI_TYPE_Q4_K }, { KVI_TYPE_Q8_0, KVI_TYPE_Q4_K, KVI_TYPE_Q4_0 },
        { KVI_TYPE_F16, KVI_TYPE_Q8_0, KVI_TYPE_F32 },
    };
    uint64_t rs = 777;
    float *x = malloc((size_t)(9 * n_in) * sizeof(float));
    trand_fill_normal(x, 9 * n_in, &rs);
    float *ym[3], *ys[3];
    for (int i = 0; i < 3; i++) {
        ym[i] = malloc((size_t)(9 * ldy[i]) * sizeof(float));
        ys[i] = malloc((size_t)(9 * ldy[i]) * sizeof(float));
    }
    for (int s = 0; s < 5; s++) {
        void *wq[3];
        kern_tensor W[3];
        const kern_tensor *Wp[3];
        for (int i = 0; i < 3; i++) {
            wq[i] = random_matrix(sets[s][i], n_out[i], n_in, &rs);
            W[i] = (kern_tensor){ wq[i], sets[s][i], n_in, n_out[i], KVI_LAYOUT_ROWS };
            Wp[i] = &W[i];
        }
        for (int nr = 1; nr <= 9; nr += 8) {
            for (int i = 0; i < 3; i++) {
                for (int64_t e = 0; e < 9 * ldy[i]; e++) ym[i][e] = ys[i][e] = -777.0f;
                kern_matmul(pool, &W[i], x, n_in, nr, ys[i], ldy[i]);
            }
            kern_matmul_multi(pool, 3, Wp, x, n_in, nr, ym, ldy);
            int bad = 0;
            for (int i = 0; i < 3; i++)
                bad += memcmp(ym[i], ys[i], (size_t)(9 * ldy[i]) * sizeof(float)) != 0;
            CHECK(bad == 0, "set %d, %d rows: %d of 3 multi outputs differ from kern_matmul", s, nr, bad);
            CHECK(ys[0][0] != -777.0f && ys[0][54] == -777.0f, "set %d: output written, padding kept", s);
        }
        for (int i = 0; i < 3; i++) free(wq[i]);
    }
    for (int i = 0; i < 3; i++) {
        free(ym[i]);
        free(ys[i]);
    }
    free(x);
}

/* kern_matmul_grouped equals one kern_matmul per matrix over its rows, bit for bit:
 * 5 matrices over row groups of 0..13 rows of 24 (one empty, two overlapping), in
 * the types of a mixture of experts (Q4_K / Q6_K / Q8_0 / MXFP4 / F16), random
 * inputs; padding columns of y stay untouched. */
static void test_matmul_grouped(tpool *pool)
{
    enum { NW = 5, NR = 24 };
    const int64_t n_in = 256, n_out = 40, ldy = 43;
    const int64_t row0[NW] = { 0, 3, 3, 16, 24 }, rows[NW] = { 3, 13, 0, 8, 0 };
    const kvi_type types[5] = { KVI_TYPE_Q4_K, KVI_TYPE_Q6_K, KVI_TYPE_Q8_0, KVI_TYPE_MXFP4, KVI_TYPE_F16 };
    uint64_t rs = 4242;
    float *x = malloc((size_t)NR * n_in * sizeof(float));
    trand_fill_normal(x, NR * n_in, &rs);
    float *yg[NW], *ys[NW];
    for (int i = 0; i < NW; i++) {
        yg[i] = malloc((size_t)NR * ldy * sizeof(float));
        ys[i] = malloc((size_t)NR * ldy * sizeof(float));
    }
    for (int t = 0; t < 5; t++) {
        void *wq[NW];
        kern_tensor W[NW];
        const kern_tensor *Wp[NW];
        for (int i = 0; i < NW; i++) {
            wq[i] = random_matrix(types[t], n_out, n_in, &rs);
            W[i] = (kern_tensor){ wq[i], types[t], n_in, n_out, KVI_LAYOUT_ROWS };
            Wp[i] = &W[i];
            for (int64_t e = 0; e < NR * ldy; e++) yg[i][e] = ys[i][e] = -777.0f;
            if (rows[i]) kern_matmul(pool, &W[i], x + row0[i] * n_in, n_in, rows[i], ys[i], ldy);
        }
        CHECK(kern_matmul_grouped(pool, NW, Wp, x, n_in, NR, row0, rows, yg,
                                  (const int64_t[NW]){ ldy, ldy, ldy, ldy, ldy }) == 0,
              "%s: grouped refused", kvi_type_name(types[t]));
        int bad = 0;
        for (int i = 0; i < NW; i++) bad += memcmp(yg[i], ys[i], (size_t)NR * ldy * sizeof(float)) != 0;
        CHECK(bad == 0, "%s: %d of %d grouped outputs differ from kern_matmul", kvi_type_name(types[t]), bad,
              NW);
        CHECK(yg[0][0] != -777.0f && yg[0][40] == -777.0f && yg[2][0] == -777.0f,
              "%s: outputs written, padding and the empty group kept", kvi_type_name(types[t]));
        for (int i = 0; i < NW; i++) free(wq[i]);
    }
    /* a group past the input rows is refused, nothing written */
    const int64_t bad0[1] = { 20 }, badn[1] = { 5 }, ld1[1] = { ldy };
    void *w1 = random_matrix(KVI_TYPE_Q8_0, n_out, n_in, &rs);
    const kern_tensor W1 = { w1, KVI_TYPE_Q8_0, n_in, n_out, KVI_LAYOUT_ROWS }, *W1p[1] = { &W1 };
    yg[0][0] = -777.0f;
    CHECK(kern_matmul_grouped(pool, 1, W1p, x, n_in, NR, bad0, badn, yg, ld1) == KVI_E_INVALID &&
              yg[0][0] == -777.0f,
          "rows 20..25 of 24 accepted");
    free(w1);
    for (int i = 0; i < NW; i++) {
        free(yg[i]);
        free(ys[i]);
    }
    free(x);
}

/* ---- the pool ------------------------------------------------------------ */

typedef struct pool_ctx {
    atomic_int calls;
    atomic_int mask; /* bit ith set by thread ith */
    int nth_seen[8]; /* each thread writes only its own slot */
    long sum[8];
} pool_ctx;

static void pool_fn(void *vctx, int ith, int nth)
{
    pool_ctx *c = vctx;
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_or(&c->mask, 1 << ith);
    c->nth_seen[ith] = nth;
    long s = 0;
    for (int i = ith; i < 1000; i += nth) s += i;
    c->sum[ith] = s;
}

static void test_pool(void)
{
    CHECK(tpool_n_cores() >= 1, "cores");
    for (int n = 1; n <= 4; n++) {
        tpool *p = tpool_create(n);
        CHECK(p != NULL && tpool_size(p) == n, "pool of %d", n);
        if (!p) continue;
        int bad = 0;
        for (int run = 0; run < 500; run++) {
            pool_ctx c;
            memset(&c, 0, sizeof c);
            tpool_run(p, pool_fn, &c);
            long total = 0;
            for (int i = 0; i < n; i++) {
                total += c.sum[i];
                bad += c.nth_seen[i] != n;
            }
            bad += atomic_load(&c.calls) != n || atomic_load(&c.mask) != (1 << n) - 1 || total != 499500;
        }
        CHECK(bad == 0, "pool of %d: %d bad runs", n, bad);
        void *s1 = tpool_scratch(p, n - 1, 100);
        CHECK(s1 && ((uintptr_t)s1 & 63) == 0, "scratch aligned");
        CHECK(tpool_scratch(p, n - 1, 50) == s1, "scratch kept");
        CHECK(tpool_scratch(p, n, 50) == NULL && tpool_scratch(NULL, 0, 50) == NULL, "scratch bounds");
        tpool_free(p);
    }
    pool_ctx c;
    memset(&c, 0, sizeof c);
    tpool_run(NULL, pool_fn, &c);
    CHECK(atomic_load(&c.calls) == 1 && c.nth_seen[0] == 1 && c.sum[0] == 499500,
          "NULL pool runs on the caller");
    tpool *p = tpool_create(0);
    CHECK(p && tpool_size(p) == tpool_n_cores(), "pool of 0 threads uses every core");
    tpool_free(p);
    tpool_free(NULL);
}

int main(void)
{
    test_isa();
    test_dot();
    test_get_row();
    test_pool();
    test_q8_act();
    tpool *pool = tpool_create(2);
    test_q8_exact(pool);
    test_q8_exact(NULL);
    test_mxfp4_exact(pool);
    test_mxfp4_exact(NULL);
    test_matmul_vs_ref(pool);
    test_matmul_vs_ref(NULL);
    test_matmul_multi(pool);
    test_matmul_multi(NULL);
    test_matmul_grouped(pool);
    test_matmul_grouped(NULL);
    tpool_free(pool);
    test_gemv_exact();
    test_qgemm_tiles();
    test_bit_identity();
    return test_main_end();
}
