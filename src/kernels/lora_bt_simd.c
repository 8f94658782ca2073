/*
 * lora_bt_simd.c — y += s (B t) from B's transposed panels (lora_bt.h) on AVX-512
 * and AVX2: a panel's 16 output columns in the lanes of one register (two on AVX2),
 * up to four rows at once so a panel is read once for them, the panel's r x 16
 * values read in order. Per element: one fused multiply-add per k in order from a
 * zero accumulator, then the product with s and the sum, as the reference (built
 * with -ffp-contract=off: no contraction the source does not spell).
 */
#include "kernels/isa_target.h"
#include "kernels/kernels_int.h"

#include <immintrin.h>
#include <stddef.h>

#define LBT_ROWS 4

KVI_TARGET_AVX512 void kern_lora_bt_avx512(const float *t, int64_t ldt, int cnt, int r, const float *bt,
                                           int64_t n, const float *s, float *const *y)
{
    for (int i0 = 0; i0 < cnt; i0 += LBT_ROWS) {
        const int nr = cnt - i0 < LBT_ROWS ? cnt - i0 : LBT_ROWS;
        const float *ti[LBT_ROWS];
        for (int q = 0; q < LBT_ROWS; q++) ti[q] = t + (size_t)(i0 + (q < nr ? q : 0)) * (size_t)ldt;
        const float *b = bt;
        for (int64_t j = 0; j < n; j += 16) {
            const __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
            __m512 acc[LBT_ROWS];
            for (int q = 0; q < LBT_ROWS; q++) acc[q] = _mm512_setzero_ps();
            for (int k = 0; k < r; k++, b += 16) {
                const __m512 bv = _mm512_loadu_ps(b);
                for (int q = 0; q < LBT_ROWS; q++)
                    acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(ti[q][k]), bv, acc[q]);
            }
            for (int q = 0; q < nr; q++) {
                float *yr = y[i0 + q] + j;
                const __m512 p = _mm512_mul_ps(acc[q], _mm512_set1_ps(s[i0 + q]));
                _mm512_mask_storeu_ps(yr, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, yr), p));
            }
        }
    }
}

KVI_TARGET_AVX2 void kern_lora_bt_avx2(const float *t, int64_t ldt, int cnt, int r, const float *bt,
                                       int64_t n, const float *s, float *const *y)
{
    for (int i0 = 0; i0 < cnt; i0 += LBT_ROWS) {
        const int nr = cnt - i0 < LBT_ROWS ? cnt - i0 : LBT_ROWS;
        const float *ti[LBT_ROWS];
        for (int q = 0; q < LBT_ROWS; q++) ti[q] = t + (size_t)(i0 + (q < nr ? q : 0)) * (size_t)ldt;
        for (int64_t j = 0; j < n; j += 8) {
            const float *b = bt + (size_t)(j >> 4) * (size_t)r * 16 + (size_t)(j & 15);
            __m256 acc[LBT_ROWS];
            for (int q = 0; q < LBT_ROWS; q++) acc[q] = _mm256_setzero_ps();
            for (int k = 0; k < r; k++, b += 16) {
                const __m256 bv = _mm256_loadu_ps(b); /* columns past n_out are the panel's zeros */
                for (int q = 0; q < LBT_ROWS; q++)
                    acc[q] = _mm256_fmadd_ps(_mm256_set1_ps(ti[q][k]), bv, acc[q]);
            }
            for (int q = 0; q < nr; q++) {
                float *yr = y[i0 + q] + j;
                const __m256 p = _mm256_mul_ps(acc[q], _mm256_set1_ps(s[i0 + q]));
                if (n - j >= 8) {
                    _mm256_storeu_ps(yr, _mm256_add_ps(_mm256_loadu_ps(yr), p));
                } else {
                    float pv[8];
                    _mm256_storeu_ps(pv, p);
                    for (int64_t c = 0; c < n - j; c++) yr[c] = yr[c] + pv[c];
                }
            }
        }
    }
}
