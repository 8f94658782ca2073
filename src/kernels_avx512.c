/*
 * kernels_avx512.c — the AVX-512 (F, BW, VL) table: dot product and F16 / BF16
 * dequantisation 16 lanes wide; the block types reuse the AVX2 code (every
 * AVX-512 CPU kvi_isa_detect() accepts also has AVX2, FMA and F16C).
 *
 * Dot reduction order (fixed by n alone): four 16-lane accumulators take elements
 * i mod 64; remaining full 16-lane groups go into accumulator 0, the last n mod 16
 * elements (masked load) into accumulator 1; then (a0 + a1) + (a2 + a3), folded
 * 16 -> 8 -> 4 -> 2 -> 1 lanes.
 */
#include "kernels_isa.h"
#include "quant.h"

#include <immintrin.h>
#include <string.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

AVX512 static float hsum512(__m512 v)
{
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX512 static float dot_avx512(const float *a, const float *b, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a1);
    }
    return hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

AVX512 static void deq_f16(const uint8_t *p, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i))));
    for (; i < n; i++) {
        kvi_f16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = kvi_f16_to_f32(h);
    }
}

AVX512 static void deq_bf16(const uint8_t *p, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    for (; i < n; i++) {
        kvi_bf16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = kvi_bf16_to_f32(h);
    }
}

AVX512 static int dequant_avx512(kvi_type t, const void *src, float *dst, int64_t n)
{
    if (n <= 0) return 0;
    switch (t) {
    case KVI_TYPE_F16: deq_f16(src, dst, n); return 1;
    case KVI_TYPE_BF16: deq_bf16(src, dst, n); return 1;
    default: return kvi_dequant_avx2(t, src, dst, n);
    }
}

const kvi_kernel_table kvi_kernels_avx512 = {KVI_ISA_AVX512, dot_avx512, dequant_avx512};
