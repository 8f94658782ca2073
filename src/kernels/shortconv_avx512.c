/*
 * shortconv_avx512.c — the gated short convolution's row step on AVX-512
 * (shortconv.h): 16 channels a vector, each channel's K taps gathered from its
 * row of w (stride K), the products rounded before each sum in tap order (built
 * without FMA in the target), so every lane computes the reference's operations:
 * the same bits. The channels past the last multiple of 16 go to the reference.
 */
#include "kernels/shortconv.h"

#include "kernels/isa_target.h"
#include "kernels/kernels_int.h"

#include <immintrin.h>

#define AVX512 KVI_TARGET_AVX512_NOFMA

AVX512 void kern_shortconv_row_avx512(const float *w, int K, float *st, size_t ld, const float *b,
                                      const float *c, const float *x, int c0, int c1, float *y)
{
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(K)); /* lane l: channel l's row */
    int ch = c0;
    for (; ch + 16 <= c1; ch += 16) {
        const float *wc = w + (size_t)ch * K; /* [16][K] the 16 channels' taps */
        const __m512 u = _mm512_mul_ps(_mm512_loadu_ps(b + ch), _mm512_loadu_ps(x + ch));
        __m512 s = _mm512_setzero_ps();
        for (int k = 0; k < K - 1; k++) {
            const __m512 wk = _mm512_i32gather_ps(idx, wc + k, 4);
            s = _mm512_add_ps(s, _mm512_mul_ps(wk, _mm512_loadu_ps(st + (size_t)k * ld + ch)));
        }
        s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_i32gather_ps(idx, wc + K - 1, 4), u));
        for (int k = 0; k + 1 < K - 1; k++)
            _mm512_storeu_ps(st + (size_t)k * ld + ch, _mm512_loadu_ps(st + (size_t)(k + 1) * ld + ch));
        _mm512_storeu_ps(st + (size_t)(K - 2) * ld + ch, u);
        _mm512_storeu_ps(y + ch, _mm512_mul_ps(_mm512_loadu_ps(c + ch), s));
    }
    if (ch < c1) kern_shortconv_row_ref(w, K, st, ld, b, c, x, ch, c1, y);
}
