/*
 * test_kernels_amx_f16.c — the AMX product for F16 / BF16 weights
 * (fmm_amx.h) through kern_matmul on random data (normal weights and
 * inputs, never zeros):
 *  (1) every output within 2^-14 * sum_i |x_i w_i| of the double-precision
 *      kern_matmul_ref (rounding the weights or the inputs to one BF16 alone misses
 *      this by far on the short rows: about 2^-9 per product);
 *  (2) a row's outputs are the same bits alone, in batches of 2 .. 70 rows (the
 *      decode pipeline: 1 .. 32 rows, one or two token blocks; then pairs, an odd
 *      last block) and in a 300-row batch (two chunks), with no pool and on 1, 2
 *      or 3 threads;
 *  (3) nothing is written outside y's columns [0, n_out);
 *  (4) the path really ran: with AMX turned off (cpu_amx_set(0)) the same call
 *      gives the AVX-512 FP32 order, which differs in some outputs.
 * Shapes: n_in a multiple of 32 and not (a zero-padded last K tile), n_in over
 * one K block (1024 inputs, 2048 for at most 32 rows: accumulators parked or kept
 * in their tiles between blocks), n_out not a multiple
 * of 16. Where the CPU or the OS offers no AMX the checks are skipped with a note.
 */
#include "kvinfer.h"
#include "base/cpu.h"
#include "kernels/kernels.h"
#include "kernels/fmm_amx.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int64_t N_INS[] = { 768, 40, 100, 2056 };
static const int64_t N_OUTS[] = { 45, 16, 37, 33 };
#define N_SHAPES 4
static const int64_t ROWS[] = { 1, 2, 3, 8, 15, 16, 17, 31, 32, 33, 70 };
#define N_ROWS 11
#define MAX_ROWS 300 /* the reference batch: two chunks of input rows */
#define MID_ROWS 70  /* the largest sub-batch checked on every pool */

static void test_shape(kvi_type t, int64_t n_in, int64_t n_out, tpool *const pools[3], uint64_t *rs)
{
    const int64_t ldx = n_in + 3, ldy = n_out + 5;
    float *x = malloc((size_t)(MAX_ROWS * ldx) * sizeof(float));  /* [MAX_ROWS][ldx] */
    float *yb = malloc((size_t)(MAX_ROWS * ldy) * sizeof(float)); /* the 300-row product, 2 threads */
    float *yr = malloc((size_t)(MAX_ROWS * ldy) * sizeof(float)); /* kern_matmul_ref */
    float *y = malloc((size_t)(MAX_ROWS * ldy) * sizeof(float));  /* sub-batches */
    float *row = malloc((size_t)n_in * sizeof(float));            /* [n_in] */
    trand_fill_normal(x, MAX_ROWS * ldx, rs);
    uint8_t *w = trand_weights_normal(t, n_out, n_in, rs); /* [n_out][row bytes] */
    const kern_tensor W = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
    const char *tn = kvi_type_name(t);
    kern_matmul_ref(&W, x, ldx, MAX_ROWS, yr, ldy);
    for (int64_t i = 0; i < MAX_ROWS * ldy; i++) yb[i] = -777.0f;
    kern_matmul(pools[1], &W, x, ldx, MAX_ROWS, yb, ldy);

    /* (1) against the reference, (3) the stride padding */
    int far = 0, pad = 0;
    double worst = 0;
    for (int64_t r = 0; r < MAX_ROWS; r++) {
        for (int64_t j = 0; j < n_out; j++) {
            kern_tensor_get_row(&W, j, row);
            const double mag = abs_dot(x + r * ldx, row, n_in);
            const double e = fabs((double)yb[r * ldy + j] - yr[r * ldy + j]) / mag;
            far += !(e <= 0x1p-14);
            if (e > worst) worst = e;
        }
        for (int64_t j = n_out; j < ldy; j++) pad += yb[r * ldy + j] != -777.0f;
    }
    CHECK(far == 0, "%s %lldx%lld: %d outputs off the reference (worst %.3g of sum|xw|)", tn,
          (long long)n_out, (long long)n_in, far, worst);
    CHECK(pad == 0, "%s %lldx%lld: %d writes into the stride padding", tn, (long long)n_out, (long long)n_in,
          pad);

    /* (2) sub-batches of the last MID_ROWS rows, every pool: the 300-row product's bits */
    int diff = 0;
    for (int p = -1; p < 3; p++)
        for (int k = 0; k < N_ROWS; k++) {
            const int64_t n_rows = ROWS[k], r0 = MID_ROWS - n_rows;
            for (int64_t i = 0; i < n_rows * ldy; i++) y[i] = -777.0f;
            kern_matmul(p < 0 ? NULL : pools[p], &W, x + r0 * ldx, ldx, n_rows, y, ldy);
            for (int64_t r = 0; r < n_rows; r++) {
                diff += memcmp(y + r * ldy, yb + (r0 + r) * ldy, (size_t)n_out * sizeof(float)) != 0;
                for (int64_t j = n_out; j < ldy; j++) pad += y[r * ldy + j] != -777.0f;
            }
        }
    /* the 300 rows again on 3 threads and without a pool */
    for (int p = -1; p < 3; p += 3) {
        kern_matmul(p < 0 ? NULL : pools[2], &W, x, ldx, MAX_ROWS, y, ldy);
        for (int64_t r = 0; r < MAX_ROWS; r++)
            diff += memcmp(y + r * ldy, yb + r * ldy, (size_t)n_out * sizeof(float)) != 0;
    }
    CHECK(diff == 0, "%s %lldx%lld: %d rows differ from the same rows in the 300-row product", tn,
          (long long)n_out, (long long)n_in, diff);
    CHECK(pad == 0, "%s %lldx%lld: sub-batches wrote %d padding floats", tn, (long long)n_out,
          (long long)n_in, pad);

    /* (4) AMX off: the FP32 order's bits, not these */
    cpu_amx_set(0);
    kern_matmul(pools[1], &W, x, ldx, MID_ROWS, y, ldy);
    cpu_amx_set(1);
    int other = 0;
    for (int64_t r = 0; r < MID_ROWS; r++)
        other += memcmp(y + r * ldy, yb + r * ldy, (size_t)n_out * sizeof(float)) != 0;
    CHECK(other > 0, "%s %lldx%lld: AMX on and off gave the same bits in all %d rows (AMX path not taken?)",
          tn, (long long)n_out, (long long)n_in, MID_ROWS);
    free(x);
    free(yb);
    free(yr);
    free(y);
    free(row);
    free(w);
}

int main(void)
{
    if (!cpu_amx_available() || kern_isa_active() != KVI_ISA_AVX512) {
        printf("note: no AMX (or not the AVX-512 path) here: the AMX F16/BF16 checks are skipped\n");
        CHECK(1, "skipped");
        return test_main_end();
    }
    kern_amx_f16_set(1); /* opt-in in the engine for now (fmm_amx.h) */
    tpool *pools[3] = { tpool_create(1), tpool_create(2), tpool_create(3) };
    uint64_t rs = 20250317;
    const kvi_type types[2] = { KVI_TYPE_F16, KVI_TYPE_BF16 };
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < N_SHAPES; s++) test_shape(types[k], N_INS[s], N_OUTS[s], pools, &rs);
    for (int p = 0; p < 3; p++) tpool_free(pools[p]);
    return test_main_end();
}
