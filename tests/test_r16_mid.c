/*
 * test_r16_mid.c — the Q8_0 R16 kernel for 5..64 input rows
 * (src/kernels/qgemm_r16_mid_avx512.c) against the scalar reference: random
 * Q8_0 weights (several shapes: n_in 64 .. 2048, n_out 16 .. 96) repacked to
 * R16, random normal inputs; kern_matmul over the R16 tensor on the best ISA
 * gives exactly the scalar table's bits (kern_matmul over the rows layout with
 * kern_isa_set(KVI_ISA_SCALAR): kern_qgemm_ref, q8.h's contract) for every row count
 * 1..64 (1..4 take the streaming kernel, 5..64 this one, split into passes of
 * up to 12 rows) and 1..3 threads; the kernel itself refuses what it does not
 * handle (other types, 4 or 65 rows, n_in not a multiple of 64) and writes
 * nothing then. Skips (77) without AVX-512 VNNI.
 */
#include "kvinfer.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/qgemm_r16_mid.h"
#include "kernels/r16_pack.h"
#include "kernels/vnni_avx512.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_shape(int64_t n_out, int64_t n_in, uint64_t *rs)
{
    const kvi_type t = KVI_TYPE_Q8_0;
    const int max_rows = 64;
    uint8_t *w = trand_weights(t, n_out, n_in, rs);
    const size_t bytes = quant_row_bytes(t, n_in) * (size_t)n_out;
    uint8_t *wr = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    memcpy(wr, w, bytes);
    kern_tensor rows = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
    kern_tensor r16 = { .data = wr, .type = t, .n_in = n_in, .n_out = n_out };
    CHECK(kern_r16_repack(&r16, 1) == 0 && r16.layout == KVI_LAYOUT_R16, "%lldx%lld: repacked to R16",
          (long long)n_out, (long long)n_in);
    float *x = malloc((size_t)max_rows * (size_t)n_in * sizeof(float));
    float *y0 = malloc((size_t)max_rows * (size_t)n_out * sizeof(float));
    float *y1 = malloc((size_t)max_rows * (size_t)n_out * sizeof(float));
    for (int64_t i = 0; i < max_rows * n_in; i++) x[i] = trand_normal(rs);
    for (int threads = 1; threads <= 3; threads++) {
        tpool *pool = tpool_create(threads);
        int bad = 0, first_bad = 0;
        for (int nr = 1; nr <= max_rows; nr++) {
            kern_isa_set(KVI_ISA_SCALAR);
            kern_matmul(NULL, &rows, x, n_in, nr, y0, n_out);
            kern_isa_set(kern_isa_detect());
            for (int64_t i = 0; i < nr * n_out; i++) y1[i] = NAN;
            kern_matmul(pool, &r16, x, n_in, nr, y1, n_out);
            if (memcmp(y0, y1, (size_t)nr * (size_t)n_out * sizeof(float)) != 0 && !bad++) first_bad = nr;
        }
        CHECK(bad == 0,
              "Q8_0 %lldx%lld, %d threads: %d row counts differ from the scalar reference (first %d)",
              (long long)n_out, (long long)n_in, threads, bad, first_bad);
        tpool_free(pool);
    }
    free(w);
    free(wr);
    free(x);
    free(y0);
    free(y1);
}

/* What the kernel refuses it leaves untouched. */
static void test_refusals(uint64_t *rs)
{
    const int64_t n_in = 128, n_out = 16;
    uint8_t *w = trand_weights(KVI_TYPE_Q8_0, n_out, n_in, rs);
    uint8_t xq[65 * 4 * sizeof(kern_q8a)];
    memset(xq, 0, sizeof xq);
    float y[65 * 16];
    for (int i = 0; i < 65 * 16; i++) y[i] = 7.0f;
    kern_qgemm_args a = { .type = KVI_TYPE_Q8_0,
                          .w = w,
                          .w_rb = quant_row_bytes(KVI_TYPE_Q8_0, n_in),
                          .n_in = n_in,
                          .j0 = 0,
                          .j1 = 16,
                          .xq = xq,
                          .xq_rb = 4 * sizeof(kern_q8a),
                          .n_rows = 4,
                          .y = y,
                          .ldy = 16 };
    int taken = kern_qgemm_r16_mid_avx512(&a);
    a.n_rows = 65;
    taken += kern_qgemm_r16_mid_avx512(&a);
    a.n_rows = 8;
    a.type = KVI_TYPE_Q4_0;
    taken += kern_qgemm_r16_mid_avx512(&a);
    a.type = KVI_TYPE_Q8_0;
    a.n_in = 96;
    taken += kern_qgemm_r16_mid_avx512(&a);
    bool same = true;
    for (int i = 0; i < 65 * 16; i++) same &= y[i] == 7.0f;
    CHECK(taken == 0 && same, "4 rows, 65 rows, Q4_0, n_in 96: refused (%d taken), nothing written", taken);
    free(w);
}

int main(void)
{
    if (!kern_has_vnni()) {
        printf("skipped: no AVX-512 VNNI\n");
        return 77;
    }
    uint64_t rs = 0x5eed;
    static const int64_t shapes[][2] = { { 16, 64 }, { 32, 768 }, { 96, 256 }, { 48, 2048 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) test_shape(shapes[k][0], shapes[k][1], &rs);
    test_refusals(&rs);
    return test_main_end();
}
