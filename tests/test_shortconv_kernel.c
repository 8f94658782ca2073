/*
 * test_shortconv_kernel.c — the gated short convolution's row step
 * (kernels/shortconv.h) on random inputs (never zeros), taps K = 2, 3, 4 and 5,
 * channels 64, 37 (a tail after the 16-lane loop) and 16, over 6 consecutive rows:
 *  - the outputs within 1e-6 relative of plain double-precision loops over a kept
 *    history of the gated inputs, and the state equal, bit for bit, to the last
 *    K - 1 gated inputs b * x (rounded to float) in time order;
 *  - a channel range split in two gives the whole range's bits;
 *  - the AVX-512 path (where the CPU has it) gives the reference's bits, state and
 *    outputs, on every size;
 *  - taps [0, .., 0, 1]: y = c * b * x exactly (no history).
 */
#include "testutil.h"

#include "kernels/kernels_int.h"
#include "kernels/shortconv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 6 };

static void check_size(int K, int C, uint64_t *rng)
{
    const size_t sn = (size_t)(K - 1) * C;
    float *w = malloc((size_t)C * K * sizeof *w), *st = malloc(sn * sizeof *st);
    float *st2 = malloc(sn * sizeof *st2), *st3 = malloc(sn * sizeof *st3);
    float *b = malloc((size_t)C * sizeof *b), *c = malloc((size_t)C * sizeof *c),
          *x = malloc((size_t)C * sizeof *x);
    float *y = malloc((size_t)C * sizeof *y), *y2 = malloc((size_t)C * sizeof *y2),
          *y3 = malloc((size_t)C * sizeof *y3);
    float *hist =
        calloc((size_t)(K - 1 + ROWS) * C, sizeof *hist); /* [K - 1 + ROWS][C] gated inputs, oldest first */
    trand_fill_normal(w, (int64_t)C * K, rng);
    trand_fill_normal(st, (int64_t)sn, rng);
    memcpy(hist, st, sn * sizeof *st);
    memcpy(st2, st, sn * sizeof *st);
    memcpy(st3, st, sn * sizeof *st);
    const bool avx512 = kern_isa_detect() == KVI_ISA_AVX512;
    bool split_same = true, isa_same = true, state_ok = true;
    double worst = 0;
    for (int r = 0; r < ROWS; r++) {
        trand_fill_normal(b, C, rng);
        trand_fill_normal(c, C, rng);
        trand_fill_normal(x, C, rng);
        kern_shortconv_row_ref(w, K, st, (size_t)C, b, c, x, 0, C, y);
        const int mid = C / 2 + 1; /* split unevenly */
        kern_shortconv_row_ref(w, K, st2, (size_t)C, b, c, x, 0, mid, y2);
        kern_shortconv_row_ref(w, K, st2, (size_t)C, b, c, x, mid, C, y2);
        split_same &= !memcmp(y, y2, (size_t)C * sizeof *y) && !memcmp(st, st2, sn * sizeof *st);
        if (avx512) {
            kern_shortconv_row_avx512(w, K, st3, (size_t)C, b, c, x, 0, C, y3);
            isa_same &= !memcmp(y, y3, (size_t)C * sizeof *y) && !memcmp(st, st3, sn * sizeof *st);
        }
        float *h = hist + (size_t)(K - 1 + r) * C; /* this row's gated input */
        for (int ch = 0; ch < C; ch++) h[ch] = b[ch] * x[ch];
        double num = 0, den = 0;
        for (int ch = 0; ch < C; ch++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)w[(size_t)ch * K + k] * hist[(size_t)(r + k) * C + ch];
            const double ref = s * c[ch];
            num += (y[ch] - ref) * (y[ch] - ref);
            den += ref * ref;
        }
        if (sqrt(num / den) > worst) worst = sqrt(num / den);
        state_ok &= !memcmp(st, hist + (size_t)(r + 1) * C, sn * sizeof *st);
    }
    CHECK(worst < 1e-6, "K %d C %d: outputs %.3g relative to float64", K, C, worst);
    CHECK(state_ok, "K %d C %d: the state is not the last K - 1 gated inputs", K, C);
    CHECK(split_same, "K %d C %d: a split channel range differs", K, C);
    CHECK(isa_same, "K %d C %d: the AVX-512 step differs from the reference", K, C);
    /* taps [0, .., 0, 1]: no history */
    for (int ch = 0; ch < C; ch++)
        for (int k = 0; k < K; k++) w[(size_t)ch * K + k] = k == K - 1 ? 1.0f : 0.0f;
    kern_shortconv_row_ref(w, K, st, (size_t)C, b, c, x, 0, C, y);
    bool direct = true;
    for (int ch = 0; ch < C; ch++) direct &= y[ch] == c[ch] * (b[ch] * x[ch]);
    CHECK(direct, "K %d C %d: taps [0 .. 1] are not c * b * x", K, C);
    printf("K %d C %2d: outputs %.2g relative to float64%s\n", K, C, worst,
           avx512 ? ", AVX-512 bits equal" : "");
    free(w);
    free(st);
    free(st2);
    free(st3);
    free(b);
    free(c);
    free(x);
    free(y);
    free(y2);
    free(y3);
    free(hist);
}

int main(void)
{
    uint64_t rng = 11;
    for (int K = 2; K <= 5; K++) {
        check_size(K, 64, &rng);
        check_size(K, 37, &rng);
        check_size(K, 16, &rng);
    }
    return test_main_end();
}
