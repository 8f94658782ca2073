/*
 * q8_lowbit_avx512.c — the low-bit integer products (IQ1_S, IQ1_M, TQ1_0, TQ2_0 with
 * Q8_K activations, NVFP4 with Q8_0) on AVX-512 VNNI, with the bits of q8_lowbit.h's
 * contract (the scalar reference q8_lowbit.c).
 *
 * Tiles: a thread's weight rows [j0, j1) go 16 at a time. Each row of a tile is
 * unpacked once into the scratch as unsigned levels in value order, u[16][n_in]:
 *   TQ2_0  t = (qs >> 2l) & 3 (0..2): byte 32c + m of that shift is value 128c + 32l + m;
 *   TQ1_0  the 52 digit bytes (masked load), digit n by 16-bit multiplies of the even
 *          and odd bytes ((b * 3^n) mod 256 * 3 >> 8), stored to values 32n + i,
 *          160 + 16n + i, 240 + 4n + i;
 *   IQ1    u = 8 g + 9 + delta (0..18): grid entries by scalar loads (gathers are
 *          slow on Zen 4), -1/0/+1 bytes looked up (vpshufb), +-1 per group of 8;
 *          with each block's 16 scales ls (kq_blk);
 *   NVFP4  the nibbles in value order looked up (vpshufb) as level + 12 (0..24);
 * and each block's weight factor per row as a 16-lane float vector (d, d / 8, or
 * the four halved UE4M3 scales). Then for every activation row, block by block:
 * vpdpbusd (unsigned level times signed quant, four per dword lane) gives each
 * row's exact partial sums S[l]; the offset's term is subtracted exactly (TQ: the
 * quants' sum16; IQ1: 9 * ls_h * sum16_h, the 64-value partials scaled by vpdpwssd
 * against ls, |partial| <= 4 * 18 * 127 fits int16; NVFP4: 12 * the quants' sums by
 * vpdpbusd); a fixed unpack/shuffle tree folds S[0..15] into isum with lane l =
 * row l (NVFP4: one vector per 16-value sub-block); and the float steps run lane by
 * lane in the reference's order (fmadd of the rounded product dw * dx), so each
 * output has the reference's bits whatever the tile or the row range. Rows past the
 * last of a tile repeat it and are not stored.
 *
 * Declines (0, nothing written) for other types, without VNNI, and without a
 * 64-byte aligned scratch of KVI_QGEMM_SCRATCH(n_in) bytes (the tile needs at most
 * 16 n_in + n_in / 256 * 16 * 68 bytes).
 */
#include "kernels/q8_lowbit.h"
#include "kernels/vnni_avx512.h"
#include "formats/quant_iq1.h"
#include "formats/quant_nvfp4.h"
#include "formats/quant_tq.h"
#include "formats/quant_grid_iq1.h"

#include <math.h>

/* 64 bytes: q[a..a+31] then q[b..b+31] */
VNNI_INLINE __m512i q2x32(const int8_t *qa, const int8_t *qb)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)qa)),
                              _mm256_loadu_si256((const __m256i *)qb), 1);
}

/* ---- Q8_K types: 16 weight rows unpacked, then dotted as 16 lanes -------- */

typedef struct kq_blk {
    int32_t ls[16]; /* IQ1: 2s + 1 of values 16h..16h+15 */
} kq_blk;
_Static_assert(sizeof(kq_blk) == 64, "kq_blk size");

VNNI static void unpack_tq2(const uint8_t *p, uint8_t *u)
{
    const __m512i qs = _mm512_loadu_si512((const void *)p), m3 = _mm512_set1_epi8(3);
    for (int l = 0; l < 4; l++) {
        const __m512i t = _mm512_and_si512(_mm512_srli_epi16(qs, 2 * l), m3);
        _mm256_storeu_si256((__m256i *)(u + 32 * l), _mm512_castsi512_si256(t));
        _mm256_storeu_si256((__m256i *)(u + 128 + 32 * l), _mm512_extracti64x4_epi64(t, 1));
    }
}

/* digit n (pow = 3^n) of every byte, as bytes, from the even and odd bytes */
VNNI_INLINE __m512i tq1_digits(__m512i ev, __m512i od, int pow)
{
    const __m512i p = _mm512_set1_epi16((short)pow), ff = _mm512_set1_epi16(0xff),
                  three = _mm512_set1_epi16(3);
    __m512i e = _mm512_and_si512(_mm512_mullo_epi16(ev, p), ff);
    __m512i o = _mm512_and_si512(_mm512_mullo_epi16(od, p), ff);
    e = _mm512_srli_epi16(_mm512_mullo_epi16(e, three), 8);
    o = _mm512_srli_epi16(_mm512_mullo_epi16(o, three), 8);
    return _mm512_or_si512(e, _mm512_slli_epi16(o, 8));
}

VNNI static void unpack_tq1(const uint8_t *p, uint8_t *u)
{
    static const int POW3[5] = { 1, 3, 9, 27, 81 };
    const __m512i b = _mm512_maskz_loadu_epi8((__mmask64)0x000fffffffffffffull, p); /* qs[48], qh[4] */
    const __m512i ev = _mm512_and_si512(b, _mm512_set1_epi16(0xff)), od = _mm512_srli_epi16(b, 8);
    for (int n = 0; n < 5; n++) {
        const __m512i t = tq1_digits(ev, od, POW3[n]);
        _mm256_storeu_si256((__m256i *)(u + 32 * n), _mm512_castsi512_si256(t));
        _mm_storeu_si128((__m128i *)(u + 160 + 16 * n), _mm512_extracti32x4_epi32(t, 2));
        if (n < 4) {
            const int32_t w = _mm_cvtsi128_si32(_mm512_extracti32x4_epi32(t, 3));
            memcpy(u + 240 + 4 * n, &w, 4);
        }
    }
}

/* IQ1_S / IQ1_M: u = 8 g + 9 + delta (0..18); the 32 grid indices and delta signs
 * computed as two vectors of 16 groups */
VNNI static void unpack_iq1(kvi_type t, const uint8_t *p, uint8_t *u, kq_blk *k, float *dw)
{
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const bool s = t == KVI_TYPE_IQ1_S;
    const uint8_t *qs = s ? p + 2 : p;
    /* IQ1_S: qh[ib] (uint16) per 4 groups, index bits at 3 (g % 4), sign bit 15;
     * IQ1_M: qh byte per 2 groups, index bits at 4 (g % 2), sign bit 3 above them */
    const __m512i H =
        s ? _mm512_cvtepu16_epi32(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 34))))
          : _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 32)));
    const __m512i sh =
        s ? _mm512_mullo_epi32(_mm512_and_si512(lane, _mm512_set1_epi32(3)), _mm512_set1_epi32(3))
          : _mm512_slli_epi32(_mm512_and_si512(lane, _mm512_set1_epi32(1)), 2);
    const __m512i seven = _mm512_set1_epi32(7);
    __m512i idx[2];
    uint32_t neg = 0; /* bit g: group g's delta is negative */
    for (int v = 0; v < 2; v++) {
        const __m512i sel = _mm512_srli_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(16 * v)), s ? 2 : 1);
        const __m512i hv = _mm512_permutexvar_epi32(sel, H), f = _mm512_srlv_epi32(hv, sh);
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16 * v)));
        idx[v] = _mm512_or_si512(q, _mm512_slli_epi32(_mm512_and_si512(f, seven), 8));
        const __mmask16 m = s ? _mm512_test_epi32_mask(hv, _mm512_set1_epi32(0x8000))
                              : _mm512_test_epi32_mask(f, _mm512_set1_epi32(8));
        neg |= (uint32_t)m << (16 * v);
    }
    float d;
    if (s) {
        d = quant_f16_to_f32((quant_f16)(p[0] | p[1] << 8));
        /* ls of values 16h.. = 2 ((qh[h / 2] >> 12) & 7) + 1 */
        const __m512i hh = _mm512_permutexvar_epi32(_mm512_srli_epi32(lane, 1), H);
        const __m512i ls = _mm512_add_epi32(
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hh, 12), seven), 1), _mm512_set1_epi32(1));
        _mm512_storeu_si512((void *)k->ls, ls);
    } else {
        unsigned sc[4];
        for (int q = 0; q < 4; q++) sc[q] = p[48 + 2 * q] | (unsigned)p[49 + 2 * q] << 8;
        d = quant_f16_to_f32(
            (quant_f16)((sc[0] >> 12) | (sc[1] >> 8 & 0xf0) | (sc[2] >> 4 & 0xf00) | (sc[3] & 0xf000)));
        for (int ib = 0; ib < 8; ib++) {
            k->ls[2 * ib] = (int32_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
            k->ls[2 * ib + 1] = (int32_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
        }
    }
    *dw = d * 0.125f;
    /* grid bytes -1, 0, 1 -> (& 3) 3, 0, 1 -> 8 g + 9 = 1, 9, 17 */
    const __m512i tab =
        _mm512_broadcast_i32x4(_mm_setr_epi8(9, 17, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m512i three = _mm512_set1_epi8(3), plus = _mm512_set1_epi8(1), minus = _mm512_set1_epi8(-1);
    /* the entries by scalar loads: a gather of 8 is far slower on Zen 4 */
    int32_t ix[32];
    _mm512_storeu_si512((void *)ix, idx[0]);
    _mm512_storeu_si512((void *)(ix + 16), idx[1]);
    const long long *G = (const long long *)quant_iq1s_grid;
    for (int v = 0; v < 4; v++) {
        const int32_t *i8 = ix + 8 * v;
        const __m512i g =
            _mm512_set_epi64(G[i8[7]], G[i8[6]], G[i8[5]], G[i8[4]], G[i8[3]], G[i8[2]], G[i8[1]], G[i8[0]]);
        const __m512i base = _mm512_shuffle_epi8(tab, _mm512_and_si512(g, three));
        const __m512i dl = _mm512_mask_blend_epi64((__mmask8)(neg >> (8 * v)), plus, minus);
        _mm512_storeu_si512((void *)(u + 64 * v), _mm512_add_epi8(base, dl));
    }
}

/* The 16 unpacked rows (u [16][n_in], blk [16][nb]) with activation row x: lane l
 * of the result is row l's output (rows past nv repeat row nv - 1). */
VNNI static __m512 tile_dot_k(bool iq1, const uint8_t *u, const kq_blk *blk, const float *dwv, int64_t n_in,
                              int nv, const kern_q8k *x)
{
    const int64_t nb = n_in / QK_K;
    __m512 acc = _mm512_setzero_ps();
    const __m512i lane_grp =
        _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
    for (int64_t b = 0; b < nb; b++) {
        __m512i X[4], S[16];
        for (int k = 0; k < 4; k++) X[k] = _mm512_loadu_si512((const void *)(x[b].qs + 64 * k));
        const __m512i sum16 = _mm512_loadu_si512((const void *)x[b].sum16);
        const __m512i off = _mm512_mullo_epi32(sum16, _mm512_set1_epi32(-9));
        for (int l = 0; l < 16; l++) {
            const int row = l < nv ? l : nv - 1;
            const uint8_t *ur = u + (size_t)row * (size_t)n_in + (size_t)b * QK_K;
            if (iq1) {
                const __m512i ls =
                    _mm512_loadu_si512((const void *)blk[(size_t)row * (size_t)nb + (size_t)b].ls);
                __m512i t = _mm512_mullo_epi32(ls, off);
                for (int k = 0; k < 4; k++) {
                    const __m512i d = _mm512_dpbusd_epi32(
                        _mm512_setzero_si512(), _mm512_loadu_si512((const void *)(ur + 64 * k)), X[k]);
                    const __m512i lsk =
                        _mm512_permutexvar_epi32(_mm512_add_epi32(lane_grp, _mm512_set1_epi32(4 * k)), ls);
                    t = _mm512_dpwssd_epi32(t, d, lsk);
                }
                S[l] = t;
            } else {
                __m512i t = _mm512_sub_epi32(_mm512_setzero_si512(), sum16);
                for (int k = 0; k < 4; k++)
                    t = _mm512_dpbusd_epi32(t, _mm512_loadu_si512((const void *)(ur + 64 * k)), X[k]);
                S[l] = t;
            }
        }
        const __m512 dw = _mm512_loadu_ps(dwv + 16 * b);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x[b].d)), _mm512_cvtepi32_ps(vnni_sum16(S)),
                              acc);
    }
    return acc;
}

/* TQ2_0 with few activation rows (decode): no unpacking, each tile's 16 rows read
 * in place; a block's 2-bit fields (qs >> 2l) & 3 meet q[32l..] | q[128 + 32l..].
 * The same integers and float steps as tile_dot_k. */
#define TQ2_DIRECT_ROWS 4
VNNI static void gemm_tq2_direct(const kern_qgemm_args *a)
{
    const int64_t nb = a->n_in / QK_K;
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int64_t j0 = a->j0; j0 < a->j1; j0 += 16) {
        const int nv = a->j1 - j0 < 16 ? (int)(a->j1 - j0) : 16;
        for (int64_t r = 0; r < a->n_rows; r++) {
            const kern_q8k *x = (const kern_q8k *)(a->xq + (size_t)r * a->xq_rb);
            __m512 acc = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                __m512i X[4], S[16];
                float dw[16];
                for (int l = 0; l < 4; l++) X[l] = q2x32(x[b].qs + 32 * l, x[b].qs + 128 + 32 * l);
                const __m512i nsum =
                    _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)x[b].sum16));
                for (int l = 0; l < 16; l++) {
                    const uint8_t *p = a->w + (size_t)(j0 + (l < nv ? l : nv - 1)) * a->w_rb +
                                       (size_t)b * sizeof(block_tq2_0);
                    const __m512i qs = _mm512_loadu_si512((const void *)p);
                    __m512i t = nsum;
                    for (int k = 0; k < 4; k++)
                        t = _mm512_dpbusd_epi32(t, _mm512_and_si512(_mm512_srli_epi16(qs, 2 * k), m3), X[k]);
                    S[l] = t;
                    dw[l] = quant_f16_to_f32((quant_f16)(p[64] | p[65] << 8));
                }
                acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(dw), _mm512_set1_ps(x[b].d)),
                                      _mm512_cvtepi32_ps(vnni_sum16(S)), acc);
            }
            _mm512_mask_storeu_ps(a->y + r * a->ldy + j0, (__mmask16)((1u << nv) - 1), acc);
        }
    }
}

/* Rows [j0, j1) as tiles of 16: each tile unpacked once into the scratch, then
 * every activation row. 0 when the scratch is missing or too small. */
VNNI static int gemm_k(const kern_qgemm_args *a)
{
    const kvi_type t = a->type;
    const bool iq1 = t == KVI_TYPE_IQ1_S || t == KVI_TYPE_IQ1_M;
    const int64_t nb = a->n_in / QK_K;
    const size_t bb = quant_block_bytes(t), ub = 16 * (size_t)a->n_in;
    if (!a->scratch || (uintptr_t)a->scratch % 64 ||
        ub + 16 * (size_t)nb * (sizeof(kq_blk) + sizeof(float)) > KVI_QGEMM_SCRATCH(a->n_in))
        return 0;
    uint8_t *u = a->scratch;                       /* [16][n_in] unsigned levels */
    kq_blk *blk = (kq_blk *)(u + ub);              /* [16][nb] */
    float *dwv = (float *)(blk + 16 * (size_t)nb); /* [nb][16] the rows' weight factors */
    for (int64_t j0 = a->j0; j0 < a->j1; j0 += 16) {
        const int nv = a->j1 - j0 < 16 ? (int)(a->j1 - j0) : 16;
        memset(dwv, 0, 16 * (size_t)nb * sizeof(float));
        for (int l = 0; l < nv; l++) {
            const uint8_t *w = a->w + (size_t)(j0 + l) * a->w_rb;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *ur = u + (size_t)l * (size_t)a->n_in + (size_t)b * QK_K;
                kq_blk *k = &blk[(size_t)l * (size_t)nb + (size_t)b];
                const uint8_t *p = w + (size_t)b * bb;
                if (iq1) {
                    unpack_iq1(t, p, ur, k, &dwv[16 * b + l]);
                    continue;
                }
                if (t == KVI_TYPE_TQ1_0)
                    unpack_tq1(p, ur);
                else
                    unpack_tq2(p, ur);
                dwv[16 * b + l] = quant_f16_to_f32((quant_f16)(p[bb - 2] | p[bb - 1] << 8));
            }
        }
        for (int64_t r = 0; r < a->n_rows; r++) {
            const __m512 v =
                tile_dot_k(iq1, u, blk, dwv, a->n_in, nv, (const kern_q8k *)(a->xq + (size_t)r * a->xq_rb));
            _mm512_mask_storeu_ps(a->y + r * a->ldy + j0, (__mmask16)((1u << nv) - 1), v);
        }
    }
    return 1;
}

/* ---- NVFP4: 16 weight rows unpacked, each sub-block's isum as 16 lanes ---- */

/* One block's 64 codes, looked up as level + 12 (0..24), in value order, into u */
VNNI static void unpack_nvfp4(const uint8_t *p, __m512i tab, uint8_t *u)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i qs = _mm256_loadu_si256((const __m256i *)(p + 4));
    const __m256i lo = _mm256_and_si256(qs, m4), hi = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m4);
    /* [sub 0 | sub 2], [sub 1 | sub 3] in value order, then sub-blocks 0..3 */
    const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi64(lo, hi)),
                                         _mm256_unpackhi_epi64(lo, hi), 1);
    const __m512i codes = _mm512_shuffle_i64x2(c, c, _MM_SHUFFLE(3, 1, 2, 0));
    _mm512_storeu_si512((void *)u, _mm512_shuffle_epi8(tab, codes));
}

VNNI static __m512 tile_dot_nvfp4(const uint8_t *u, const float *dhv, int64_t n_in, int nv, const kern_q8a *x)
{
    const int64_t nb = n_in / QK_NVFP4;
    const __m512i c12 = _mm512_set1_epi8(12);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512i q = q2x32(x[2 * b].qs, x[2 * b + 1].qs);
        const __m512i off = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c12, q);
        __m512i S[16], V[4];
        for (int l = 0; l < 16; l++) {
            const int row = l < nv ? l : nv - 1;
            const __m512i w =
                _mm512_loadu_si512((const void *)(u + (size_t)row * (size_t)n_in + (size_t)b * 64));
            S[l] = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, q), off);
        }
        vnni_sum16x4(S, V); /* V[s]: sub-block s of the 16 rows */
        for (int k = 0; k < 4; k++) {
            const __m512 dw =
                _mm512_mul_ps(_mm512_loadu_ps(dhv + (4 * b + k) * 16), _mm512_set1_ps(x[2 * b + k / 2].d));
            acc = _mm512_fmadd_ps(dw, _mm512_cvtepi32_ps(V[k]), acc);
        }
    }
    return acc;
}

VNNI static int gemm_nvfp4(const kern_qgemm_args *a)
{
    const int64_t nb = a->n_in / QK_NVFP4;
    const size_t ub = 16 * (size_t)a->n_in;
    if (!a->scratch || (uintptr_t)a->scratch % 64 ||
        ub + 64 * (size_t)nb * sizeof(float) > KVI_QGEMM_SCRATCH(a->n_in))
        return 0;
    uint8_t *u = a->scratch;        /* [16][n_in] levels + 12 */
    float *dhv = (float *)(u + ub); /* [nb][4][16] the rows' halved scales */
    int8_t lv12[16];
    for (int i = 0; i < 16; i++) lv12[i] = (int8_t)(quant_kvalues_mxfp4[i] + 12);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lv12));
    for (int64_t j0 = a->j0; j0 < a->j1; j0 += 16) {
        const int nv = a->j1 - j0 < 16 ? (int)(a->j1 - j0) : 16;
        memset(dhv, 0, 64 * (size_t)nb * sizeof(float));
        for (int l = 0; l < nv; l++) {
            const uint8_t *w = a->w + (size_t)(j0 + l) * a->w_rb;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *p = w + (size_t)b * sizeof(block_nvfp4);
                unpack_nvfp4(p, tab, u + (size_t)l * (size_t)a->n_in + (size_t)b * 64);
                for (int k = 0; k < 4; k++) dhv[(4 * b + k) * 16 + l] = quant_ue4m3_half(p[k]);
            }
        }
        for (int64_t r = 0; r < a->n_rows; r++) {
            const __m512 v =
                tile_dot_nvfp4(u, dhv, a->n_in, nv, (const kern_q8a *)(a->xq + (size_t)r * a->xq_rb));
            _mm512_mask_storeu_ps(a->y + r * a->ldy + j0, (__mmask16)((1u << nv) - 1), v);
        }
    }
    return 1;
}

int kern_lowbit_gemm_avx512(const kern_qgemm_args *a)
{
    if (!kern_lowbit_type(a->type) || !kern_has_vnni()) return 0;
    if (a->type == KVI_TYPE_TQ2_0 && a->n_rows <= TQ2_DIRECT_ROWS) {
        gemm_tq2_direct(a);
        return 1;
    }
    return a->type == KVI_TYPE_NVFP4 ? gemm_nvfp4(a) : gemm_k(a);
}
