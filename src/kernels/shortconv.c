/*
 * shortconv.c — the gated short convolution's row step (shortconv.h): the scalar
 * reference (kernels.c dispatches to the pool's ISA path, shortconv_avx512.c).
 */
#include "kernels/shortconv.h"

void kern_shortconv_row_ref(const float *w, int K, float *st, size_t ld, const float *b, const float *c,
                            const float *x, int c0, int c1, float *y)
{
    for (int ch = c0; ch < c1; ch++) {
        const float *wc = w + (size_t)ch * K; /* [K] this channel's taps */
        const float u = b[ch] * x[ch];
        float s = 0.0f;
        for (int k = 0; k < K - 1; k++) {
            const float p = wc[k] * st[(size_t)k * ld + ch];
            s += p;
        }
        const float p = wc[K - 1] * u;
        s += p;
        for (int k = 0; k + 1 < K - 1; k++) st[(size_t)k * ld + ch] = st[(size_t)(k + 1) * ld + ch];
        st[(size_t)(K - 2) * ld + ch] = u;
        y[ch] = c[ch] * s;
    }
}
