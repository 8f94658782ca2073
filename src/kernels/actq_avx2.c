/*
 * actq_avx2.c — activation quantisation (kern_q8a, kern_q8k) and F32 -> F16
 * rows, 8 lanes wide (AVX2 + F16C); contract in actq.h.
 *
 * Data: a 32-input group is 4 ymm of inputs; its int32 levels are narrowed with
 * saturating packs (exact: the levels are already clamped to [-127, 127]) whose
 * lane interleave one vpermd undoes. kern_q8a = one group; kern_q8k = 8 groups, the
 * 16-input sums being the lane sums of ymm pairs (0, 1) and (2, 3).
 *
 * amax: lane-wise _mm256_max_ps(|x|, acc) keeps acc when |x| is NaN, as the scalar
 * `if (a > amax)`; acc is never NaN, so the lane fold's order does not matter.
 * Q8_K's signed max is x at the first index with |x| == amax.
 *
 * Every function carries the AVX2 target attribute and is reached only after
 * kern_isa_detect() saw AVX2 and F16C.
 */
#include "kernels/isa_target.h"
#include "kernels/actq.h"

#include <immintrin.h>
#include <string.h>

#define AVX2 KVI_TARGET_AVX2_NOFMA

AVX2 static float hmax256(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

AVX2 static int32_t hsum256i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* |x| of 32 inputs folded into acc */
AVX2 static __m256 amax32(const float *x, __m256 acc)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int j = 0; j < 4; j++) acc = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * j)), acc);
    return acc;
}

/* levels of 32 inputs, clamp(rint(x * s), -127, 127): bytes to qs, int32 lanes to q[4] */
AVX2 static void levels32(const float *x, __m256 s, int8_t *qs, __m256i q[4])
{
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (int j = 0; j < 4; j++) {
        const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), s));
        q[j] = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
    }
    /* packs work per 128-bit lane: bytes come out as dwords 0 4 1 5 2 6 3 7 */
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i o = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, o);
}

AVX2 void kern_actq_a_avx2(const float *x, kern_q8a *b, int64_t nb)
{
    for (int64_t k = 0; k < nb; k++, x += 32, b++) {
        const float amax = hmax256(amax32(x, _mm256_setzero_ps()));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256i q[4];
        levels32(x, _mm256_set1_ps(id), b->qs, q);
        const int32_t sum =
            hsum256i(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        b->d = kern_f16_round_f16c(d);
        b->s = kern_f16_round_f16c(d * (float)sum);
        b->sum = sum;
        b->pad = 0;
    }
}

AVX2 void kern_actq_k_avx2(const float *x, kern_q8k *b, int64_t nb)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t k = 0; k < nb; k++, x += QK_K, b++) {
        __m256 m = _mm256_setzero_ps();
        for (int g = 0; g < QK_K / 32; g++) m = amax32(x + 32 * g, m);
        const float amax = hmax256(m);
        memset(b, 0, sizeof *b);
        if (amax == 0.0f) continue;
        float max = 0.0f;
        const __m256 am = _mm256_set1_ps(amax);
        for (int g = 0; g < QK_K / 8; g++) {
            const __m256 e =
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * g)), am, _CMP_EQ_OQ);
            const int mask = _mm256_movemask_ps(e);
            if (mask) {
                max = x[8 * g + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 s = _mm256_set1_ps(iscale);
        for (int g = 0; g < QK_K / 32; g++) {
            __m256i q[4];
            levels32(x + 32 * g, s, b->qs + 32 * g, q);
            b->sum16[2 * g] = hsum256i(_mm256_add_epi32(q[0], q[1]));
            b->sum16[2 * g + 1] = hsum256i(_mm256_add_epi32(q[2], q[3]));
            b->sum32[g] = b->sum16[2 * g] + b->sum16[2 * g + 1];
        }
        b->d = 1.0f / iscale;
    }
}

AVX2 void kern_f16_row_avx2(const float *src, void *dst, int64_t n)
{
    uint8_t *h = dst; /* [n][2] bytes, any alignment */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        const __m128i c = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(h + 2 * i), a);
        _mm_storeu_si128((__m128i *)(h + 2 * i + 16), c);
    }
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        const uint16_t v =
            (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(src[i]), _MM_FROUND_TO_NEAREST_INT), 0);
        memcpy(h + 2 * i, &v, 2);
    }
}
