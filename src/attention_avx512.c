/*
 * attention_avx512.c — AVX-512 build of the attention block kernels
 * (attention_kernels.h): 16 query lanes per register.
 *
 * scores: register tile of 32 (or 16) lanes x 8 positions, 16 accumulators; per
 *   d one or two loads of qt and eight broadcast keys; each accumulator is the
 *   sequential fma chain over d of one (position, lane), as in the reference.
 * update: per 16-lane chunk the masked block max, the masked rescale, the weights
 *   by the vector attn_exp, the sequential sum; then P x V in register tiles of
 *   32 (or 16) lanes x 8 head dims, positions in order.
 * Contraction is off: every mul and add is the one the reference performs.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "attention_kernels.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INLINE512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"), always_inline)) static inline

INLINE512 __m512 exp512(__m512 x)
{
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(ATTN_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-ATTN_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-ATTN_LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(ATTN_C6), r, _mm512_set1_ps(ATTN_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTN_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(e));
}

/* scores of lanes [i0, i0 + 16 * A) and positions [t0, t0 + tn), tn <= 8 */
INLINE512 void scores_tile(const attn_blk *b, int i0, int t0, int tn, const int A)
{
    const int nqp = b->nqp, hd = b->hd;
    const float *kp[8];
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) kp[j] = b->k + (size_t)(t0 + (j < tn ? j : 0)) * hd;
    __m512 a0[8], a1[8];
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) a0[j] = a1[j] = _mm512_setzero_ps();
    const float *q = b->qt + i0;
    for (int d = 0; d < hd; d++, q += nqp) {
        const __m512 q0 = _mm512_loadu_ps(q);
        const __m512 q1 = A == 2 ? _mm512_loadu_ps(q + 16) : q0;
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512 kb = _mm512_set1_ps(kp[j][d]);
            a0[j] = _mm512_fmadd_ps(q0, kb, a0[j]);
            if (A == 2) a1[j] = _mm512_fmadd_ps(q1, kb, a1[j]);
        }
    }
    const __m512 sc = _mm512_set1_ps(b->scale);
    #pragma GCC unroll 8
    for (int j = 0; j < tn; j++) {
        float *st = b->s + (size_t)(t0 + j) * nqp + i0;
        _mm512_storeu_ps(st, _mm512_mul_ps(a0[j], sc));
        if (A == 2) _mm512_storeu_ps(st + 16, _mm512_mul_ps(a1[j], sc));
    }
}

AVX512 static void scores_avx512(const attn_blk *b)
{
    for (int i0 = 0; i0 < b->nqp;) {
        const int two = b->nqp - i0 >= 32;
        for (int t0 = 0; t0 < b->nt; t0 += 8) {
            const int tn = b->nt - t0 < 8 ? b->nt - t0 : 8;
            if (two) scores_tile(b, i0, t0, tn, 2);
            else scores_tile(b, i0, t0, tn, 1);
        }
        i0 += two ? 32 : 16;
    }
}

/* acc[d0 .. d0 + DN)[lanes i0 .. i0 + 16 A) += sum over t of e[t] v[t][d], t in order */
INLINE512 void pv_tile(const attn_blk *b, int i0, int d0, const int A, const int DN)
{
    const int nqp = b->nqp, hd = b->hd;
    __m512 a0[8], a1[8];
    #pragma GCC unroll 8
    for (int j = 0; j < DN; j++) {
        a0[j] = _mm512_loadu_ps(b->acc + (size_t)(d0 + j) * nqp + i0);
        if (A == 2) a1[j] = _mm512_loadu_ps(b->acc + (size_t)(d0 + j) * nqp + i0 + 16);
    }
    for (int t = 0; t < b->nt; t++) {
        const float *e = b->s + (size_t)t * nqp + i0;
        const float *vt = b->v + (size_t)t * hd + d0;
        const __m512 e0 = _mm512_loadu_ps(e);
        const __m512 e1 = A == 2 ? _mm512_loadu_ps(e + 16) : e0;
        #pragma GCC unroll 8
        for (int j = 0; j < DN; j++) {
            const __m512 vb = _mm512_set1_ps(vt[j]);
            a0[j] = _mm512_fmadd_ps(e0, vb, a0[j]);
            if (A == 2) a1[j] = _mm512_fmadd_ps(e1, vb, a1[j]);
        }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < DN; j++) {
        _mm512_storeu_ps(b->acc + (size_t)(d0 + j) * nqp + i0, a0[j]);
        if (A == 2) _mm512_storeu_ps(b->acc + (size_t)(d0 + j) * nqp + i0 + 16, a1[j]);
    }
}

AVX512 static void update_avx512(const attn_blk *b)
{
    const int nqp = b->nqp, hd = b->hd, nt = b->nt;
    for (int i0 = 0; i0 < nqp; i0 += 16) {
        const __m512i lim = _mm512_loadu_si512(b->lim + i0);
        __m512 bmax = _mm512_set1_ps(-INFINITY);
        for (int t = 0; t < nt; t++) {
            const __mmask16 in = _mm512_cmpgt_epi32_mask(lim, _mm512_set1_epi32(t));
            bmax = _mm512_mask_max_ps(bmax, in, _mm512_loadu_ps(b->s + (size_t)t * nqp + i0), bmax);
        }
        __m512 m = _mm512_loadu_ps(b->m + i0);
        __m512 l = _mm512_loadu_ps(b->l + i0);
        const __mmask16 up = _mm512_cmp_ps_mask(bmax, m, _CMP_GT_OQ);
        if (up) {
            const __m512 c = exp512(_mm512_sub_ps(m, bmax));
            l = _mm512_mask_mul_ps(l, up, l, c);
            for (int d = 0; d < hd; d++) {
                float *a = b->acc + (size_t)d * nqp + i0;
                const __m512 av = _mm512_loadu_ps(a);
                _mm512_storeu_ps(a, _mm512_mask_mul_ps(av, up, av, c));
            }
            m = _mm512_mask_mov_ps(m, up, bmax);
            _mm512_storeu_ps(b->m + i0, m);
        }
        for (int t = 0; t < nt; t++) {
            float *s = b->s + (size_t)t * nqp + i0;
            const __mmask16 in = _mm512_cmpgt_epi32_mask(lim, _mm512_set1_epi32(t));
            const __m512 e = _mm512_maskz_mov_ps(in, exp512(_mm512_sub_ps(_mm512_loadu_ps(s), m)));
            _mm512_storeu_ps(s, e);
            l = _mm512_add_ps(l, e);
        }
        _mm512_storeu_ps(b->l + i0, l);
    }
    for (int i0 = 0; i0 < nqp;) {
        const int two = nqp - i0 >= 32;
        int d0 = 0;
        for (; d0 + 8 <= hd; d0 += 8) {
            if (two) pv_tile(b, i0, d0, 2, 8);
            else pv_tile(b, i0, d0, 1, 8);
        }
        for (; d0 < hd; d0++) {
            if (two) pv_tile(b, i0, d0, 2, 1);
            else pv_tile(b, i0, d0, 1, 1);
        }
        i0 += two ? 32 : 16;
    }
}

AVX512 static void f16_avx512(const uint16_t *src, float *dst, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

const attn_kernels attn_kernels_avx512 = {scores_avx512, update_avx512, f16_avx512};
