/*
 * actq_avx512.c — activation quantisation (kern_q8a, kern_q8k) and F32 -> F16
 * rows, 16 lanes wide (AVX-512 F + BW + VL, F16C); contract in actq.h.
 *
 * Data: kern_q8a block = 2 zmm of inputs; kern_q8k block = 16 zmm, one per 16-input
 * group (sum16[g] is the lane sum of group g's levels, sum32[j] = sum16[2j] +
 * sum16[2j + 1], exactly as integers).
 *
 * amax: lane-wise _mm512_max_ps(|x|, acc) keeps acc when |x| is NaN, which is the
 * scalar `if (a > amax)` per lane; acc is never NaN, so the lane fold's order does
 * not matter. Q8_K's signed max is x at the first index with |x| == amax, which is
 * the element the scalar loop's strict `>` keeps.
 *
 * Every function carries the AVX512 target attribute and is reached only after
 * kern_isa_detect() saw those features.
 */
#include "kernels/isa_target.h"
#include "kernels/actq.h"

#include <immintrin.h>
#include <string.h>

#define AVX512 KVI_TARGET_AVX512_NOFMA

/* levels of 16 inputs: clamp(rint(v * s), -127, 127) as int32 */
AVX512 static __m512i levels16(__m512 v, __m512 s)
{
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, s));
    return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
}

AVX512 void kern_actq_a_avx512(const float *x, kern_q8a *b, int64_t nb)
{
    for (int64_t k = 0; k < nb; k++, x += 32, b++) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        __m512 m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_abs_ps(v1), m);
        const float amax = _mm512_reduce_max_ps(m);
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512 s = _mm512_set1_ps(id);
        const __m512i q0 = levels16(v0, s), q1 = levels16(v1, s);
        _mm_storeu_si128((__m128i *)b->qs, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(b->qs + 16), _mm512_cvtepi32_epi8(q1));
        const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        b->d = kern_f16_round_f16c(d);
        b->s = kern_f16_round_f16c(d * (float)sum);
        b->sum = sum;
        b->pad = 0;
    }
}

AVX512 void kern_actq_k_avx512(const float *x, kern_q8k *b, int64_t nb)
{
    for (int64_t k = 0; k < nb; k++, x += QK_K, b++) {
        __m512 m = _mm512_setzero_ps();
        for (int g = 0; g < QK_K / 16; g++) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * g)), m);
        const float amax = _mm512_reduce_max_ps(m);
        memset(b, 0, sizeof *b);
        if (amax == 0.0f) continue;
        float max = 0.0f;
        const __m512 am = _mm512_set1_ps(amax);
        for (int g = 0; g < QK_K / 16; g++) {
            const __mmask16 e =
                _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * g)), am, _CMP_EQ_OQ);
            if (e) {
                max = x[16 * g + __builtin_ctz((unsigned)e)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 s = _mm512_set1_ps(iscale);
        for (int g = 0; g < QK_K / 16; g++) {
            const __m512i q = levels16(_mm512_loadu_ps(x + 16 * g), s);
            _mm_storeu_si128((__m128i *)(b->qs + 16 * g), _mm512_cvtepi32_epi8(q));
            b->sum16[g] = _mm512_reduce_add_epi32(q);
        }
        for (int j = 0; j < QK_K / 32; j++) b->sum32[j] = b->sum16[2 * j] + b->sum16[2 * j + 1];
        b->d = 1.0f / iscale;
    }
}

AVX512 void kern_f16_row_avx512(const float *src, void *dst, int64_t n)
{
    uint8_t *h = dst; /* [n][2] bytes, any alignment */
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        const __m256i c = _mm512_cvtps_ph(_mm512_loadu_ps(src + i + 16), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((__m256i *)(h + 2 * i), a);
        _mm256_storeu_si256((__m256i *)(h + 2 * i + 32), c);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m256i a = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(h + 2 * i, m, a);
    }
}
