/*
 * attn_avx512.c — AVX-512 build of the attention block kernels
 * (attn_kernels.h): 16 query lanes per register.
 *
 * scores: register tile of 32 (or 16) lanes x 8 positions, 16 accumulators; per
 *   d one or two loads of qt and eight broadcast keys; each accumulator is the
 *   sequential fma chain over d of one (position, lane), as in the reference.
 * update: per 16-lane chunk the masked block max, the masked rescale, the weights
 *   by the vector attn_exp, the sequential sum; then P x V in register tiles of
 *   32 (or 16) lanes x 8 head dims, positions in order.
 * position lanes: ptrans (16 x 16 register transposes), ptrans_f16 (the same,
 *   the rows converted from f16 as loaded), pscores (positions in lanes, one fma
 *   chain per position), pupdate (head dims in lanes; values f32 or f16 rows).
 * Contraction is off (-ffp-contract=off for the attention library): every mul and
 * add is the one the reference performs.
 */
#include "kernels/isa_target.h"
#include "attention/attn_kernels.h"
#include "kv/kv_quant.h"
#include "formats/quant.h"

#include <immintrin.h>

#define AVX512 KVI_TARGET_AVX512
#define INLINE512 KVI_INLINE_AVX512

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
            if (two)
                scores_tile(b, i0, t0, tn, 2);
            else
                scores_tile(b, i0, t0, tn, 1);
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
            if (two)
                pv_tile(b, i0, d0, 2, 8);
            else
                pv_tile(b, i0, d0, 1, 8);
        }
        for (; d0 < hd; d0++) {
            if (two)
                pv_tile(b, i0, d0, 2, 1);
            else
                pv_tile(b, i0, d0, 1, 1);
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

AVX512 static void f16_rows_avx512(const uint16_t *src, size_t src_stride, int nt, int n, float *dst)
{
    for (int r = 0; r < nt; r++) f16_avx512(src + (size_t)r * src_stride, dst + (size_t)r * n, n);
}

/* ---- position lanes (attn_kernels.h, attn_pblk) ---- */

/* kt[c][r] = r_in[r][c], r, c < 16, columns r outside mk left as they are: a
 * 16 x 16 transpose in registers (r is clobbered) */
INLINE512 void trans16_regs(__m512 *r, float *kt, int ld, __mmask16 mk)
{
    __m512 u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(u[i], u[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(u[i], u[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(u[i + 1], u[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
    }
/* r[4a + b] holds, in 128-bit lane c, column 4c + b of rows 4a .. 4a + 3; then
     * u[b] = (col b rows 0-3, col 8+b rows 0-3, col b rows 4-7, col 8+b rows 4-7),
     * u[4 + b] the same for cols 4+b / 12+b, u[8 + b], u[12 + b] for rows 8-15 */
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        u[b] = _mm512_shuffle_f32x4(r[b], r[4 + b], 0x88);
        u[4 + b] = _mm512_shuffle_f32x4(r[b], r[4 + b], 0xDD);
        u[8 + b] = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0x88);
        u[12 + b] = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0xDD);
    }
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        _mm512_mask_storeu_ps(kt + (size_t)b * ld, mk, _mm512_shuffle_f32x4(u[b], u[8 + b], 0x88));
        _mm512_mask_storeu_ps(kt + (size_t)(8 + b) * ld, mk, _mm512_shuffle_f32x4(u[b], u[8 + b], 0xDD));
        _mm512_mask_storeu_ps(kt + (size_t)(4 + b) * ld, mk, _mm512_shuffle_f32x4(u[4 + b], u[12 + b], 0x88));
        _mm512_mask_storeu_ps(kt + (size_t)(12 + b) * ld, mk,
                              _mm512_shuffle_f32x4(u[4 + b], u[12 + b], 0xDD));
    }
}

/* kt[d0 + c][t0 + r] = k[t0 + r][d0 + c], r, c < 16 */
INLINE512 void trans16(const float *k, int hd, float *kt, int ld)
{
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(k + (size_t)i * hd);
    trans16_regs(r, kt, ld, (__mmask16)0xFFFF);
}

AVX512 static void ptrans_avx512(const float *k, int n, int hd, float *kt, int ld)
{
    const int np = (n + 15) & ~15;
    int t0 = 0;
    for (; t0 + 16 <= n; t0 += 16) {
        int d0 = 0;
        for (; d0 + 16 <= hd; d0 += 16) trans16(k + (size_t)t0 * hd + d0, hd, kt + (size_t)d0 * ld + t0, ld);
        for (; d0 < hd; d0++)
            for (int t = t0; t < t0 + 16; t++) kt[(size_t)d0 * ld + t] = k[(size_t)t * hd + d0];
    }
    for (int d = 0; d < hd && t0 < np; d++)
        for (int t = t0; t < np; t++) kt[(size_t)d * ld + t] = t < n ? k[(size_t)t * hd + d] : 0.0f;
}

static inline __mmask16 first_n(int n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

/* f16 key rows to position lanes: 16 rows x 16 dims converted in registers
 * (vcvtph2ps, exact) and transposed; rows past nt load as zeros and their
 * columns are not stored; dims past the last 16 one by one. */
AVX512 static void ptrans_f16_avx512(const uint16_t *src, size_t src_stride, int nt, int hd, float *kt,
                                     int ld)
{
    for (int t0 = 0; t0 < nt; t0 += 16) {
        const int n = nt - t0 < 16 ? nt - t0 : 16;
        const uint16_t *s0 = src + (size_t)t0 * src_stride;
        int d0 = 0;
        for (; d0 + 16 <= hd; d0 += 16) {
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = i < n ? _mm512_cvtph_ps(
                                   _mm256_loadu_si256((const __m256i *)(s0 + (size_t)i * src_stride + d0)))
                             : _mm512_setzero_ps();
            trans16_regs(r, kt + (size_t)d0 * ld + t0, ld, first_n(n));
        }
        for (; d0 < hd; d0++)
            for (int i = 0; i < n; i++)
                kt[(size_t)d0 * ld + t0 + i] = _cvtsh_ss(s0[(size_t)i * src_stride + d0]);
    }
}

/* s[i][t0 .. t0 + 16 J) of query i: J chains over d, one per 16 positions */
INLINE512 void pscores_tile(const float *q, int hd, const float *kt, int ld, int t0, float scale, float *s,
                            const int J)
{
    __m512 a[8];
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) a[j] = _mm512_setzero_ps();
    const float *k = kt + t0;
    for (int d = 0; d < hd; d++, k += ld) {
        const __m512 qb = _mm512_set1_ps(q[d]);
#pragma GCC unroll 8
        for (int j = 0; j < J; j++) a[j] = _mm512_fmadd_ps(qb, _mm512_loadu_ps(k + 16 * j), a[j]);
    }
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) _mm512_storeu_ps(s + t0 + 16 * j, _mm512_mul_ps(a[j], sc));
}

AVX512 static void pscores_avx512(const float *q, int nq, int hd, const float *kt, int ld, int np,
                                  float scale, float *s)
{
    for (int t0 = 0; t0 < np; t0 += 128) {
        const int J = np - t0 >= 128 ? 8 : (np - t0) / 16;
        for (int i = 0; i < nq; i++) {
            const float *qi = q + (size_t)i * hd;
            float *si = s + (size_t)i * ld;
            switch (J) {
            case 8: pscores_tile(qi, hd, kt, ld, t0, scale, si, 8); break;
            case 7: pscores_tile(qi, hd, kt, ld, t0, scale, si, 7); break;
            case 6: pscores_tile(qi, hd, kt, ld, t0, scale, si, 6); break;
            case 5: pscores_tile(qi, hd, kt, ld, t0, scale, si, 5); break;
            case 4: pscores_tile(qi, hd, kt, ld, t0, scale, si, 4); break;
            case 3: pscores_tile(qi, hd, kt, ld, t0, scale, si, 3); break;
            case 2: pscores_tile(qi, hd, kt, ld, t0, scale, si, 2); break;
            default: pscores_tile(qi, hd, kt, ld, t0, scale, si, 1); break;
            }
        }
    }
}

/* acc[i .. i + Q)[d0 .. d0 + 64) (masked at hd) += e[t] v[t][d], t in order;
 * H: the values are f16 rows (b->vh), converted as loaded */
INLINE512 void ppv_tile(const attn_pblk *b, int i, int d0, const int Q, const int H)
{
    const int hd = b->hd;
    __mmask16 mk[4];
    __m512 a[2][4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        mk[c] = first_n(hd - d0 - 16 * c > 0 ? hd - d0 - 16 * c : 0);
#pragma GCC unroll 2
        for (int qq = 0; qq < Q; qq++)
            a[qq][c] = _mm512_maskz_loadu_ps(mk[c], b->acc + (size_t)(i + qq) * hd + d0 + 16 * c);
    }
    const float *e0 = b->s + (size_t)i * b->ld, *e1 = e0 + (Q == 2 ? b->ld : 0);
    for (int t = 0; t < b->nt; t++) {
        const float *vt = H ? NULL : b->v + (size_t)t * hd + d0;
        const uint16_t *vht = H ? b->vh + (size_t)t * b->vh_stride + d0 : NULL;
        const __m512 w0 = _mm512_set1_ps(e0[t]);
        const __m512 w1 = _mm512_set1_ps(e1[t]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512 vv = H ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk[c], vht + 16 * c))
                                : _mm512_maskz_loadu_ps(mk[c], vt + 16 * c);
            a[0][c] = _mm512_fmadd_ps(w0, vv, a[0][c]);
            if (Q == 2) a[1][c] = _mm512_fmadd_ps(w1, vv, a[1][c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
#pragma GCC unroll 2
        for (int qq = 0; qq < Q; qq++)
            _mm512_mask_storeu_ps(b->acc + (size_t)(i + qq) * hd + d0 + 16 * c, mk[c], a[qq][c]);
    }
}

AVX512 static void pupdate_avx512(const attn_pblk *b)
{
    const int hd = b->hd, nt = b->nt;
    for (int i = 0; i < b->nq; i++) {
        float *s = b->s + (size_t)i * b->ld, *acc = b->acc + (size_t)i * hd;
        const int lim = b->lim[i];
        /* the block max (max is exact: the lane order cannot change it; NaN scores
         * are skipped as the reference's `s > bmax` skips them) */
        __m512 bm = _mm512_set1_ps(-INFINITY);
        for (int t0 = 0; t0 < lim; t0 += 16) {
            const __mmask16 in = first_n(lim - t0);
            bm = _mm512_mask_max_ps(bm, in, _mm512_maskz_loadu_ps(in, s + t0), bm);
        }
        const float bmax = _mm512_reduce_max_ps(bm);
        if (bmax > b->m[i]) {
            const float c = attn_exp(b->m[i] - bmax);
            b->l[i] *= c;
            const __m512 cv = _mm512_set1_ps(c);
            for (int d0 = 0; d0 < hd; d0 += 16) {
                const __mmask16 mk = first_n(hd - d0);
                _mm512_mask_storeu_ps(acc + d0, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, acc + d0), cv));
            }
            b->m[i] = bmax;
        }
        const __m512 mv = _mm512_set1_ps(b->m[i]);
        for (int t0 = 0; t0 < nt; t0 += 16) {
            const __mmask16 all = first_n(nt - t0);
            const __mmask16 in = first_n(lim - t0 > 0 ? lim - t0 : 0);
            const __m512 e =
                _mm512_maskz_mov_ps(in, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(all, s + t0), mv)));
            _mm512_mask_storeu_ps(s + t0, all, e);
        }
        float l = b->l[i];
        for (int t = 0; t < nt; t++) l += s[t];
        b->l[i] = l;
    }
    for (int d0 = 0; d0 < hd; d0 += 64) {
        int i = 0;
        if (b->vh) {
            for (; i + 2 <= b->nq; i += 2) ppv_tile(b, i, d0, 2, 1);
            if (i < b->nq) ppv_tile(b, i, d0, 1, 1);
        } else {
            for (; i + 2 <= b->nq; i += 2) ppv_tile(b, i, d0, 2, 0);
            if (i < b->nq) ppv_tile(b, i, d0, 1, 0);
        }
    }
}

/* q8_0 / q4_0 slices on whole blocks: level to f32 (exact), times the block's
 * scale (f16 to f32, exact): the one product kvq_row_slice computes. */
AVX512 static void qslice_avx512(kvi_type t, const uint8_t *row, int off, int n, float *dst)
{
    if ((t != KVI_TYPE_Q8_0 && t != KVI_TYPE_Q4_0) || off % 32 || n % 32) {
        kvq_row_slice(t, row, off, n, dst);
        return;
    }
    if (t == KVI_TYPE_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)row + off / QK8_0;
        for (int i = 0; i < n; i += 32, b++) {
            const __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
            const __m128i lo = _mm_loadu_si128((const __m128i *)b->qs);
            const __m128i hi = _mm_loadu_si128((const __m128i *)(b->qs + 16));
            _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
            _mm512_storeu_ps(dst + i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
        }
        return;
    }
    const block_q4_0 *b = (const block_q4_0 *)row + off / QK4_0;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m512i eight = _mm512_set1_epi32(8);
    for (int i = 0; i < n; i += 32, b++) {
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
        const __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
        const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        const __m512i l32 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight);
        const __m512i h32 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight);
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtepi32_ps(l32), d));
        _mm512_storeu_ps(dst + i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(h32), d));
    }
}

/* KIVI key slices of 16 channels at a time (off even): codes of channels 2k, 2k+1
 * in the low, high nibble of byte k; code x scale, then + minimum (no fma, as
 * kivi_group_slice). */
AVX512 static void kslice_avx512(const uint8_t *region, int kv_dim, int i, int off, int n, float *dst)
{
    if (off % 2 || n % 16) {
        kivi_group_slice(region, kv_dim, i, off, n, dst);
        return;
    }
    const uint16_t *d = (const uint16_t *)region, *mn = d + kv_dim;
    const uint8_t *q = region + 4 * (size_t)kv_dim + (size_t)i * (size_t)(kv_dim / 2);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int k = 0; k < n; k += 16) {
        const int c = off + k;
        const __m128i b = _mm_loadl_epi64((const __m128i *)(q + c / 2));
        const __m128i lo = _mm_and_si128(b, m4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
        const __m512 code = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(d + c)));
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mn + c)));
        _mm512_storeu_ps(dst + k, _mm512_add_ps(_mm512_mul_ps(code, dv), mv));
    }
}

const attn_kernels attn_kernels_avx512 = { scores_avx512,   update_avx512,    f16_avx512,    ptrans_avx512,
                                           pscores_avx512,  pupdate_avx512,   qslice_avx512, kslice_avx512,
                                           f16_rows_avx512, ptrans_f16_avx512 };
