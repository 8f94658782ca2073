/*
 * test_kernels_f16.c — the float-weight (F32, F16, BF16) matrix product on random
 * data: on AVX-512 every output equals kern_fdot_lanes16_ref() bit for bit (the
 * order fmm_avx512.h promises), on every ISA it is within a stated bound of
 * the double-precision kern_matmul_ref, and a row's outputs are the same bits alone,
 * in batches of 3, 17 and 64 rows (streaming and tiled paths, partial register
 * tiles, a short last weight tile) and on 1, 2 or 3 threads, with and without a
 * pool. Nothing is written outside y's columns [0, n_out).
 * kern_fmm_avx512 on 203 rows (several row blocks, blocks of n_in, leftover rows)
 * and a column range [j0, j1) is also checked against the order directly.
 */
#include "kvinfer.h"
#include "base/cpu.h"
#include "kernels/kernels.h"
#include "kernels/fmm_avx512.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kvi_type TYPES[] = { KVI_TYPE_F32, KVI_TYPE_F16, KVI_TYPE_BF16 };
#define N_FTYPES 3

/* Shapes: n_in with and without a partial group of 16 lanes, n_out with a short
 * last tile of 16 and of 4 rows. */
static const int64_t N_INS[] = { 768, 100, 2056 };
static const int64_t N_OUTS[] = { 45, 37, 16 };
#define N_SHAPES 3
static const int64_t ROWS[] = { 1, 3, 17, 64 };
#define N_ROWS 4
#define MAX_ROWS 64

static void test_shape(int64_t n_in, int64_t n_out, tpool *const pools[3], uint64_t *rs)
{
    const int64_t ldx = n_in + 5, ldy = n_out + 3;
    float *x = malloc((size_t)(MAX_ROWS * ldx) * sizeof(float));  /* [MAX_ROWS][ldx] */
    float *y = malloc((size_t)(MAX_ROWS * ldy) * sizeof(float));  /* [MAX_ROWS][ldy] */
    float *yb = malloc((size_t)(MAX_ROWS * ldy) * sizeof(float)); /* the 64-row product, 2 threads */
    float *yr = malloc((size_t)(MAX_ROWS * ldy) * sizeof(float)); /* kern_matmul_ref */
    float *row = malloc((size_t)n_in * sizeof(float));            /* [n_in] */
    trand_fill_normal(x, MAX_ROWS * ldx, rs);
    for (int k = 0; k < N_FTYPES; k++) {
        const kvi_type t = TYPES[k];
        const size_t rb = quant_row_bytes(t, n_in);
        uint8_t *w = trand_weights_normal(t, n_out, n_in, rs); /* [n_out][rb] */
        const kern_tensor W = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
        kern_matmul_ref(&W, x, ldx, MAX_ROWS, yr, ldy);
        for (int isa = 0; isa <= (int)kern_isa_detect(); isa++) {
            kern_isa_set((kern_isa)isa);
            const char *in = kern_isa_str((kern_isa)isa), *tn = kvi_type_name(t);
            for (int64_t i = 0; i < MAX_ROWS * ldy; i++) yb[i] = -777.0f;
            kern_matmul(pools[1], &W, x, ldx, MAX_ROWS, yb, ldy);

            /* every output against the double-precision reference: |e| <= 1e-5 * sum|x w| */
            int far = 0, pad = 0;
            for (int64_t r = 0; r < MAX_ROWS; r++) {
                for (int64_t j = 0; j < n_out; j++) {
                    kern_tensor_get_row(&W, j, row);
                    const double mag = abs_dot(x + r * ldx, row, n_in);
                    far += !(fabs((double)yb[r * ldy + j] - yr[r * ldy + j]) <= 1e-5 * mag + 1e-7);
                }
                for (int64_t j = n_out; j < ldy; j++) pad += yb[r * ldy + j] != -777.0f;
            }
            CHECK(far == 0, "%s/%s %lldx%lld: %d outputs off the reference", tn, in, (long long)n_out,
                  (long long)n_in, far);
            CHECK(pad == 0, "%s/%s: %d writes into the stride padding", tn, in, pad);

            /* the order of fmm_avx512.h, exactly */
            if (isa == KVI_ISA_AVX512) {
                int bad = 0;
                for (int64_t r = 0; r < MAX_ROWS; r++)
                    for (int64_t j = 0; j < n_out; j++) {
                        const float e = kern_fdot_lanes16_ref(t, w + (size_t)j * rb, x + r * ldx, n_in);
                        bad += memcmp(&e, &yb[r * ldy + j], sizeof e) != 0;
                    }
                CHECK(bad == 0, "%s/avx512 %lldx%lld: %d outputs differ from the lanes16 order", tn,
                      (long long)n_out, (long long)n_in, bad);
            }

            /* 1 / 3 / 17 / 64 rows, no pool and 1..3 threads: the 64-row product's bits */
            int diff = 0;
            for (int p = -1; p < 3; p++)
                for (int nr = 0; nr < N_ROWS; nr++) {
                    const int64_t n_rows = ROWS[nr], r0 = MAX_ROWS - n_rows; /* the last rows */
                    for (int64_t i = 0; i < n_rows * ldy; i++) y[i] = -777.0f;
                    kern_matmul(p < 0 ? NULL : pools[p], &W, x + r0 * ldx, ldx, n_rows, y, ldy);
                    for (int64_t r = 0; r < n_rows; r++)
                        diff += memcmp(y + r * ldy, yb + (r0 + r) * ldy, (size_t)n_out * sizeof(float)) != 0;
                }
            CHECK(diff == 0, "%s/%s %lldx%lld: %d rows differ from the same rows in the 64-row product", tn,
                  in, (long long)n_out, (long long)n_in, diff);
        }
        free(w);
    }
    kern_isa_set(KVI_ISA_AVX512);
    free(x);
    free(y);
    free(yb);
    free(yr);
    free(row);
}

/* The scalar order itself against a hand sum: 17 ones times 1..17 (lane 0 gets
 * 1 and 17, the others one term each) is 153 exactly; n = 0 gives 0. */
static void test_lanes16_ref(void)
{
    float w[17], x[17];
    for (int i = 0; i < 17; i++) {
        w[i] = 1.0f;
        x[i] = (float)(i + 1);
    }
    CHECK(kern_fdot_lanes16_ref(KVI_TYPE_F32, w, x, 17) == 153.0f, "lanes16 hand sum");
    CHECK(kern_fdot_lanes16_ref(KVI_TYPE_F32, w, x, 0) == 0.0f, "lanes16 empty");
    /* order matters: 1e8 + 1 - 1e8 in one lane is 0 at f32, in different lanes 1 */
    float a[17] = { 1e8f }, b[17] = { 1.0f };
    a[1] = 1.0f;
    a[16] = -1e8f;
    for (int i = 0; i < 17; i++) b[i] = 1.0f;
    CHECK(kern_fdot_lanes16_ref(KVI_TYPE_F32, a, b, 17) == 1.0f, "lanes16: i and i+16 share lane 0");
}

/* kern_fmm_avx512 alone on many rows: several row blocks (their size depends on
 * n_in), n_in in several blocks with a partial last group of 16, columns [3, n_out
 * - 2) with a short last tile: every output is kern_fdot_lanes16_ref's bits and
 * nothing outside the columns is written. */
static void test_many_rows(int64_t n_in, int64_t n_out, uint64_t *rs)
{
    const int64_t n_rows = 203, ldx = n_in + 3, ldy = n_out + 1, j0 = 3, j1 = n_out - 2;
    float *x = malloc((size_t)(n_rows * ldx) * sizeof(float)); /* [n_rows][ldx] */
    float *y = malloc((size_t)(n_rows * ldy) * sizeof(float)); /* [n_rows][ldy] */
    float *scr = malloc(KVI_FMM_SCRATCH(n_in));                /* [16][n_in] */
    trand_fill_normal(x, n_rows * ldx, rs);
    for (int k = 0; k < N_FTYPES; k++) {
        const kvi_type t = TYPES[k];
        const size_t rb = quant_row_bytes(t, n_in);
        uint8_t *w = trand_weights_normal(t, n_out, n_in, rs); /* [n_out][rb] */
        for (int64_t i = 0; i < n_rows * ldy; i++) y[i] = -777.0f;
        const kern_fmm_args a = { .type = t,
                                  .w = w,
                                  .w_rb = rb,
                                  .n_in = n_in,
                                  .j0 = j0,
                                  .j1 = j1,
                                  .x = x,
                                  .ldx = ldx,
                                  .n_rows = n_rows,
                                  .y = y,
                                  .ldy = ldy,
                                  .scratch = scr };
        if (kern_fmm_avx512(&a)) {
            int bad = 0, pad = 0;
            for (int64_t r = 0; r < n_rows; r++)
                for (int64_t j = 0; j < ldy; j++) {
                    if (j < j0 || j >= j1) {
                        pad += y[r * ldy + j] != -777.0f;
                        continue;
                    }
                    const float e = kern_fdot_lanes16_ref(t, w + (size_t)j * rb, x + r * ldx, n_in);
                    bad += memcmp(&e, &y[r * ldy + j], sizeof e) != 0;
                }
            CHECK(bad == 0, "%s fmm %lld rows %lldx%lld: %d outputs differ from the lanes16 order",
                  kvi_type_name(t), (long long)n_rows, (long long)n_out, (long long)n_in, bad);
            CHECK(pad == 0, "%s fmm: %d writes outside columns [j0, j1)", kvi_type_name(t), pad);
        }
        free(w);
    }
    free(x);
    free(y);
    free(scr);
}

int main(void)
{
    tpool *pools[3] = { tpool_create(1), tpool_create(2), tpool_create(3) };
    uint64_t rs = 20240611;
    cpu_amx_set(0); /* this file tests the FP32 order; the AMX path has test_kernels_amx_f16.c */
    test_lanes16_ref();
    for (int s = 0; s < N_SHAPES; s++) test_shape(N_INS[s], N_OUTS[s], pools, &rs);
    test_many_rows(2056, 37, &rs);
    test_many_rows(8200, 21, &rs);
    for (int p = 0; p < 3; p++) tpool_free(pools[p]);
    return test_main_end();
}
