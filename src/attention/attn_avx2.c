/*
 * attn_avx2.c — AVX2 (+FMA, F16C) build of the attention block kernels
 * (attn_kernels.h): 8 query lanes per register, a 16-lane chunk in two.
 *
 * scores: register tile of 16 lanes x 6 positions (12 accumulators), each the
 *   sequential fma chain over d of one (position, lane).
 * update: per 8 lanes the masked block max, masked rescale (blends), weights by
 *   the vector attn_exp, the sequential sum; then P x V in tiles of 16 lanes x 6
 *   head dims, positions in order.
 * Contraction is off (-ffp-contract=off for the attention library): every mul and
 * add is the one the reference performs.
 */
#include "kernels/isa_target.h"
#include "attention/attn_kernels.h"
#include "kv/kv_quant.h"

#include <immintrin.h>

#define AVX2 KVI_TARGET_AVX2
#define INLINE2 KVI_INLINE_AVX2

INLINE2 __m256 exp256(__m256 x)
{
    const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(ATTN_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-ATTN_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-ATTN_LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(ATTN_C6), r, _mm256_set1_ps(ATTN_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ATTN_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(ok, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* scores of lanes [i0, i0 + 16) and positions [t0, t0 + tn), tn <= 6 */
INLINE2 void scores_tile(const attn_blk *b, int i0, int t0, int tn)
{
    const int nqp = b->nqp, hd = b->hd;
    const float *kp[6];
#pragma GCC unroll 6
    for (int j = 0; j < 6; j++) kp[j] = b->k + (size_t)(t0 + (j < tn ? j : 0)) * hd;
    __m256 a0[6], a1[6];
#pragma GCC unroll 6
    for (int j = 0; j < 6; j++) a0[j] = a1[j] = _mm256_setzero_ps();
    const float *q = b->qt + i0;
    for (int d = 0; d < hd; d++, q += nqp) {
        const __m256 q0 = _mm256_loadu_ps(q), q1 = _mm256_loadu_ps(q + 8);
#pragma GCC unroll 6
        for (int j = 0; j < 6; j++) {
            const __m256 kb = _mm256_broadcast_ss(kp[j] + d);
            a0[j] = _mm256_fmadd_ps(q0, kb, a0[j]);
            a1[j] = _mm256_fmadd_ps(q1, kb, a1[j]);
        }
    }
    const __m256 sc = _mm256_set1_ps(b->scale);
#pragma GCC unroll 6
    for (int j = 0; j < tn; j++) {
        float *st = b->s + (size_t)(t0 + j) * nqp + i0;
        _mm256_storeu_ps(st, _mm256_mul_ps(a0[j], sc));
        _mm256_storeu_ps(st + 8, _mm256_mul_ps(a1[j], sc));
    }
}

AVX2 static void scores_avx2(const attn_blk *b)
{
    for (int i0 = 0; i0 < b->nqp; i0 += 16)
        for (int t0 = 0; t0 < b->nt; t0 += 6) scores_tile(b, i0, t0, b->nt - t0 < 6 ? b->nt - t0 : 6);
}

/* acc[d0 .. d0 + DN)[lanes i0 .. i0 + 16) += sum over t of e[t] v[t][d], t in order */
INLINE2 void pv_tile(const attn_blk *b, int i0, int d0, const int DN)
{
    const int nqp = b->nqp, hd = b->hd;
    __m256 a0[6], a1[6];
#pragma GCC unroll 6
    for (int j = 0; j < DN; j++) {
        a0[j] = _mm256_loadu_ps(b->acc + (size_t)(d0 + j) * nqp + i0);
        a1[j] = _mm256_loadu_ps(b->acc + (size_t)(d0 + j) * nqp + i0 + 8);
    }
    for (int t = 0; t < b->nt; t++) {
        const float *e = b->s + (size_t)t * nqp + i0;
        const float *vt = b->v + (size_t)t * hd + d0;
        const __m256 e0 = _mm256_loadu_ps(e), e1 = _mm256_loadu_ps(e + 8);
#pragma GCC unroll 6
        for (int j = 0; j < DN; j++) {
            const __m256 vb = _mm256_broadcast_ss(vt + j);
            a0[j] = _mm256_fmadd_ps(e0, vb, a0[j]);
            a1[j] = _mm256_fmadd_ps(e1, vb, a1[j]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < DN; j++) {
        _mm256_storeu_ps(b->acc + (size_t)(d0 + j) * nqp + i0, a0[j]);
        _mm256_storeu_ps(b->acc + (size_t)(d0 + j) * nqp + i0 + 8, a1[j]);
    }
}

AVX2 static void update_avx2(const attn_blk *b)
{
    const int nqp = b->nqp, hd = b->hd, nt = b->nt;
    for (int i0 = 0; i0 < nqp; i0 += 8) {
        const __m256i lim = _mm256_loadu_si256((const __m256i *)(b->lim + i0));
        __m256 bmax = _mm256_set1_ps(-INFINITY);
        for (int t = 0; t < nt; t++) {
            const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, _mm256_set1_epi32(t)));
            const __m256 s = _mm256_loadu_ps(b->s + (size_t)t * nqp + i0);
            bmax = _mm256_blendv_ps(bmax, _mm256_max_ps(s, bmax), in);
        }
        __m256 m = _mm256_loadu_ps(b->m + i0);
        __m256 l = _mm256_loadu_ps(b->l + i0);
        const __m256 up = _mm256_cmp_ps(bmax, m, _CMP_GT_OQ);
        if (_mm256_movemask_ps(up)) {
            const __m256 c = exp256(_mm256_sub_ps(m, bmax));
            l = _mm256_blendv_ps(l, _mm256_mul_ps(l, c), up);
            for (int d = 0; d < hd; d++) {
                float *a = b->acc + (size_t)d * nqp + i0;
                const __m256 av = _mm256_loadu_ps(a);
                _mm256_storeu_ps(a, _mm256_blendv_ps(av, _mm256_mul_ps(av, c), up));
            }
            m = _mm256_blendv_ps(m, bmax, up);
            _mm256_storeu_ps(b->m + i0, m);
        }
        for (int t = 0; t < nt; t++) {
            float *s = b->s + (size_t)t * nqp + i0;
            const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, _mm256_set1_epi32(t)));
            const __m256 e = _mm256_and_ps(in, exp256(_mm256_sub_ps(_mm256_loadu_ps(s), m)));
            _mm256_storeu_ps(s, e);
            l = _mm256_add_ps(l, e);
        }
        _mm256_storeu_ps(b->l + i0, l);
    }
    for (int i0 = 0; i0 < nqp; i0 += 16) {
        int d0 = 0;
        for (; d0 + 6 <= hd; d0 += 6) pv_tile(b, i0, d0, 6);
        for (; d0 < hd; d0++) pv_tile(b, i0, d0, 1);
    }
}

AVX2 static void f16_avx2(const uint16_t *src, float *dst, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

AVX2 static void f16_rows_avx2(const uint16_t *src, size_t src_stride, int nt, int n, float *dst)
{
    for (int r = 0; r < nt; r++) f16_avx2(src + (size_t)r * src_stride, dst + (size_t)r * n, n);
}

const attn_kernels attn_kernels_avx2 = { scores_avx2, update_avx2,   f16_avx2,         NULL,          NULL,
                                         NULL,        kvq_row_slice, kivi_group_slice, f16_rows_avx2, NULL };
