/*
 * test_kernels_kq.c — the K-quant (and IQ4_XS) decode GEMV (qgemv_kq_avx512.c) against
 * the scalar reference kern_qgemm_ref, bit for bit.
 *
 * Weights: Q4_K, Q5_K, Q6_K and IQ4_XS matrices whose rows are either quantised from
 * random normals or random bytes with finite random f16 scales (every 6-bit scale
 * and min, negative Q6_K scales down to -128), plus an extreme matrix (largest
 * levels and scales, the Q6_K level 0) against +-127 activations, where an int16
 * or int32 shortcut would overflow. Activations: random normals quantised by
 * kern_q8_quantize_act (never zeros). Shapes: n_in 256, 768, 2048, 11008; n_out
 * not a multiple of 16; 1..4 input rows; sub-ranges [j0, j1). Outputs outside the
 * range and rows past n_rows must stay untouched; calls the kernel declines
 * (5 rows, no scratch, n_in not a multiple of 256) must write nothing.
 * Skipped (one passing check) on a CPU without AVX-512 VNNI.
 */
#include "kvinfer.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "kernels/vnni_avx512.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kvi_type KQ_TYPES[] = { KVI_TYPE_Q4_K, KVI_TYPE_Q5_K, KVI_TYPE_Q6_K, KVI_TYPE_IQ4_XS };
#define N_KQ (int)(sizeof KQ_TYPES / sizeof KQ_TYPES[0])

static quant_f16 rand_f16(uint64_t *rs)
{
    float v = (0.001f + trand_uniform(rs) * 0.05f) * (trand_u64(rs) & 1 ? 1.0f : -1.0f);
    return quant_f32_to_f16(v);
}

/* One 256-input block of random bytes with finite f16 scales. */
static void random_block(kvi_type t, uint8_t *p, uint64_t *rs)
{
    const size_t bb = quant_block_bytes(t);
    for (size_t i = 0; i < bb; i++) p[i] = (uint8_t)trand_u64(rs);
    if (t == KVI_TYPE_Q6_K) {
        block_q6_K *b = (block_q6_K *)p;
        b->d = rand_f16(rs);
    } else if (t == KVI_TYPE_IQ4_XS) {
        block_iq4_xs *b = (block_iq4_xs *)p;
        b->d = rand_f16(rs);
    } else if (t == KVI_TYPE_Q4_K) {
        block_q4_K *b = (block_q4_K *)p;
        b->d = rand_f16(rs);
        b->dmin = rand_f16(rs);
    } else {
        block_q5_K *b = (block_q5_K *)p;
        b->d = rand_f16(rs);
        b->dmin = rand_f16(rs);
    }
}

/* The block of largest products: Q4_K/Q5_K levels and 6-bit scales/mins at their
 * maximum; Q6_K level 0 (-32 after the offset) and scale -128; IQ4_XS level -127
 * (index 0) with scales -32 and +31 alternating, as the activations' signs do. */
static void extreme_block(kvi_type t, uint8_t *p)
{
    const size_t bb = quant_block_bytes(t);
    if (t == KVI_TYPE_IQ4_XS) {
        block_iq4_xs *b = (block_iq4_xs *)p;
        memset(p, 0, bb);
        b->d = quant_f32_to_f16(0.01f);
        b->scales_h = 0xcccc;                          /* odd sub-blocks: high bits 3 */
        memset(b->scales_l, 0xf0, sizeof b->scales_l); /* odd sub-blocks: low bits 15 */
    } else if (t == KVI_TYPE_Q6_K) {
        block_q6_K *b = (block_q6_K *)p;
        memset(p, 0, bb);
        memset(b->scales, 0x80, sizeof b->scales);
        b->d = quant_f32_to_f16(0.01f);
    } else {
        memset(p, 0xff, bb);
        block_q4_K *b = (block_q4_K *)p; /* Q5_K shares d, dmin at the front */
        b->d = quant_f32_to_f16(0.01f);
        b->dmin = quant_f32_to_f16(0.02f);
    }
}

/* [n_out][n_in] matrix of type t; kind 0: quantised normals and random-byte rows
 * alternating, 1: every block extreme. Caller frees. */
static uint8_t *make_matrix(kvi_type t, int64_t n_out, int64_t n_in, int kind, uint64_t *rs)
{
    const size_t rb = quant_row_bytes(t, n_in), bb = quant_block_bytes(t);
    uint8_t *w = malloc(rb * (size_t)n_out);
    float *row = malloc((size_t)n_in * sizeof(float));
    for (int64_t j = 0; j < n_out; j++) {
        uint8_t *p = w + (size_t)j * rb;
        if (kind == 1) {
            for (int64_t b = 0; b < n_in / QK_K; b++) extreme_block(t, p + (size_t)b * bb);
        } else if (j % 2 == 0) {
            for (int64_t i = 0; i < n_in; i++) row[i] = 0.02f * trand_normal(rs);
            quant_quantize_row(t, row, p, n_in);
        } else {
            for (int64_t b = 0; b < n_in / QK_K; b++) random_block(t, p + (size_t)b * bb, rs);
        }
    }
    free(row);
    return w;
}

/* n_rows quantised activation rows; extreme: every quant +-127 (sign alternating
 * by 32-input block, so sums are large too). Caller frees. */
static uint8_t *make_act(kvi_type t, int64_t n_rows, int64_t n_in, int extreme, uint64_t *rs)
{
    const size_t xrb = kern_q8_act_row_bytes(t, n_in);
    uint8_t *xq = malloc(xrb * (size_t)n_rows);
    float *x = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n_in; i++) x[i] = extreme ? ((i / 32) % 2 ? -1.0f : 1.0f) : trand_normal(rs);
        kern_q8_quantize_act(t, x, xq + (size_t)r * xrb, n_in);
    }
    free(x);
    return xq;
}

static bool same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* One product: the kernel and the reference on the same arguments, outputs into
 * sentinel-filled [n_rows + 1][ldy] buffers. Returns true when bits agree. */
static bool check_one(kvi_type t, const uint8_t *w, int64_t n_out, int64_t n_in, const uint8_t *xq,
                      int64_t n_rows, int64_t j0, int64_t j1, int *handled)
{
    const int64_t ldy = n_out + 5;
    const size_t ny = (size_t)(n_rows + 1) * (size_t)ldy;
    float *y = malloc(ny * sizeof(float)), *yr = malloc(ny * sizeof(float));
    const size_t sb = KVI_QGEMM_SCRATCH(n_in);
    void *s1 = aligned_alloc(64, (sb + 63) & ~(size_t)63), *s2 = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    for (size_t i = 0; i < ny; i++) y[i] = yr[i] = -12345.0f;
    kern_qgemm_args a = { .type = t,
                          .w = w,
                          .w_rb = quant_row_bytes(t, n_in),
                          .n_in = n_in,
                          .j0 = j0,
                          .j1 = j1,
                          .xq = xq,
                          .xq_rb = kern_q8_act_row_bytes(t, n_in),
                          .n_rows = n_rows,
                          .y = y,
                          .ldy = ldy,
                          .scratch = s1 };
    *handled = kern_qgemv_kq_avx512(&a);
    a.y = yr;
    a.scratch = s2;
    kern_qgemm_ref(&a);
    const bool ok = same_bits(y, yr, ny);
    if (!ok)
        for (size_t i = 0; i < ny; i++)
            if (memcmp(&y[i], &yr[i], sizeof(float))) {
                fprintf(stderr,
                        "  %s n_in %lld rows %lld [%lld,%lld): first diff at r %lld j %lld: %.9g vs %.9g\n",
                        kvi_type_name(t), (long long)n_in, (long long)n_rows, (long long)j0, (long long)j1,
                        (long long)(i / (size_t)ldy), (long long)(i % (size_t)ldy), y[i], yr[i]);
                break;
            }
    free(y);
    free(yr);
    free(s1);
    free(s2);
    return ok;
}

static void test_random(void)
{
    static const int64_t N_IN[] = { 256, 768, 2048, 11008 };
    uint64_t rs = 0x6b71u;
    for (int ti = 0; ti < N_KQ; ti++) {
        const kvi_type t = KQ_TYPES[ti];
        for (int ni = 0; ni < 4; ni++) {
            const int64_t n_in = N_IN[ni], n_out = ni == 3 ? 37 : 83;
            uint8_t *w = make_matrix(t, n_out, n_in, 0, &rs);
            uint8_t *xq = make_act(t, 4, n_in, 0, &rs);
            const int64_t ranges[][2] = {
                { 0, n_out }, { 5, n_out - 3 }, { 16, 33 }, { n_out - 1, n_out }, { 7, 8 }
            };
            for (int ri = 0; ri < 5; ri++)
                for (int64_t nr = 1; nr <= 4; nr++) {
                    int handled = 0;
                    const bool ok =
                        check_one(t, w, n_out, n_in, xq, nr, ranges[ri][0], ranges[ri][1], &handled);
                    CHECK(handled == 1, "%s n_in %lld rows %lld: kernel declined", kvi_type_name(t),
                          (long long)n_in, (long long)nr);
                    CHECK(ok, "%s n_in %lld rows %lld range %d: bits differ from kern_qgemm_ref",
                          kvi_type_name(t), (long long)n_in, (long long)nr, ri);
                }
            free(w);
            free(xq);
        }
    }
}

static void test_extreme(void)
{
    uint64_t rs = 0x7e57u;
    for (int ti = 0; ti < N_KQ; ti++) {
        const kvi_type t = KQ_TYPES[ti];
        const int64_t n_in = 2048, n_out = 21;
        uint8_t *w = make_matrix(t, n_out, n_in, 1, &rs);
        uint8_t *xq = make_act(t, 3, n_in, 1, &rs);
        int handled = 0;
        CHECK(check_one(t, w, n_out, n_in, xq, 3, 0, n_out, &handled) && handled, "%s extreme blocks",
              kvi_type_name(t));
        free(w);
        free(xq);
    }
}

static void test_declines(void)
{
    uint64_t rs = 0xdec1u;
    const kvi_type t = KVI_TYPE_Q4_K;
    const int64_t n_in = 512, n_out = 20;
    uint8_t *w = make_matrix(t, n_out, n_in, 0, &rs);
    uint8_t *xq = make_act(t, 5, n_in, 0, &rs);
    float y[5 * 20];
    void *s = aligned_alloc(64, KVI_QGEMM_SCRATCH(n_in) + 64);
    for (int i = 0; i < 100; i++) y[i] = -1.0f;
    kern_qgemm_args a = { .type = t,
                          .w = w,
                          .w_rb = quant_row_bytes(t, n_in),
                          .n_in = n_in,
                          .j0 = 0,
                          .j1 = n_out,
                          .xq = xq,
                          .xq_rb = kern_q8_act_row_bytes(t, n_in),
                          .n_rows = 5,
                          .y = y,
                          .ldy = n_out,
                          .scratch = s };
    CHECK(kern_qgemv_kq_avx512(&a) == 0, "5 rows declined");
    a.n_rows = 1;
    a.scratch = NULL;
    CHECK(kern_qgemv_kq_avx512(&a) == 0, "no scratch declined");
    a.scratch = (uint8_t *)s + 4;
    CHECK(kern_qgemv_kq_avx512(&a) == 0, "unaligned scratch declined");
    a.scratch = s;
    a.n_in = 300;
    CHECK(kern_qgemv_kq_avx512(&a) == 0, "n_in not a multiple of 256 declined");
    a.n_in = n_in;
    a.type = KVI_TYPE_Q4_0;
    CHECK(kern_qgemv_kq_avx512(&a) == 0, "other types declined");
    bool untouched = true;
    for (int i = 0; i < 100; i++) untouched = untouched && y[i] == -1.0f;
    CHECK(untouched, "declined calls write nothing");
    free(s);
    free(w);
    free(xq);
}

int main(void)
{
    if (!kern_has_vnni()) {
        printf("no AVX-512 VNNI: K-quant GEMV not testable here\n");
        CHECK(1, "skipped");
        return test_main_end();
    }
    test_random();
    test_extreme();
    test_declines();
    return test_main_end();
}
