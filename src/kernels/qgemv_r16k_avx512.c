/*
 * qgemv_r16k_avx512.c — Q4_K and Q6_K products over R16 weights (r16_pack.h:
 * "supers" of 16 rows x 256 inputs, 2304 / 3360 bytes) with 1..KVI_R16_STREAM_ROWS_MAX
 * input rows (decode and small batches), with AVX-512 VNNI; and the SIMD repack of
 * those tiles both ways.
 *
 * Lane l of every vector is weight row l of the tile, so nothing is summed across
 * lanes. For each pair j of sub-blocks (2j, 2j+1) the 8 quant vectors v = 8j + k
 * give WL_k = v & 0x0f (inputs 64j + 4k .. +3 of sub-block 2j) and WH_k = v & 0xf0
 * (16 x the levels of inputs 64j + 32 + 4k .. of sub-block 2j+1); vpdpbusd against
 * the activation's four quants broadcast gives per row
 *     DL = sum_k WL_k . x[64j + 4k ..]          (|DL| <= 32 * 15 * 127)
 *     DH = sum_k WH_k . x[64j + 32 + 4k ..]     (= 16 x the exact dot: >> 4 is exact)
 *     isum += DL * sc_2j + (DH >> 4) * sc_2j+1   (vpmulld; sc_s one dword vector
 *                                                 over the rows, zero-extended from
 *                                                 the decoded scales E0 / E1)
 *     msum = vpdpwssd(msum, MN_j, sum32[2j] | sum32[2j+1] << 16)
 *                                               (MN_j: words mn_2j, mn_2j+1 of each
 *                                                row, from E2 / E3; |sum32| <= 32 * 127
 *                                                fits an int16 word)
 * All exact integers whose totals are kern_qgemm_ref's isum and msum (the int32
 * wrap-around argument of q8.c). Then, block by block in order, acc = fma(d * dx,
 * (float)isum, acc) and acc = fma(-(dmin * dx), (float)msum, acc): the contract's
 * steps, so the bits of every other path whatever the rows, tiles or threads.
 *
 * Versus the rows-layout kernel (qgemv_kq_avx512.c) this drops, per row and block,
 * the 12-byte scale decode (done once for 16 rows), the four vpdpwssd that applied
 * the scales lane by lane and the horizontal fold of 16 rows' partial sums.
 *
 * Q6_K: for each half h and k < 8 the triplet 8h + k (ql 16h + k: L0, ql 16h + 8 + k:
 * L1, qh 8h + k: Q) gives the levels (0..63) of inputs 128h + 4k .. (L0 low nibbles,
 * Q bits 0-1), 128h + 32 + 4k .. (L1 low, Q bits 2-3), 128h + 64 + 4k .. (L0 high,
 * Q bits 4-5) and 128h + 96 + 4k .. (L1 high, Q bits 6-7). Each 16-input sub-block
 * s is four vpdpbusd started at -32 * sum16[s] (the level offset), so D_s = the
 * exact signed dot, and isum += D_s * scale_s (vpmulld, the int8 scales of the 16
 * rows sign-extended); then acc = fma(d * dx, (float)isum, acc) per block.
 *
 * Memory: a super is read front to back (Q6_K's triplets put the three vectors each
 * step needs side by side: with ql and qh as separate runs, three streams a super,
 * one thread read 8 GB/s from memory against 23 now, `bench_matmul gemv 1 9 1024
 * q6_k`), and prefetches the next super's lines (K4_PF / K6_PF bytes ahead; the
 * tiles of a thread's rows follow each other in memory) a few per step: Q6_K's 53
 * lines in one burst stalled on the misses in flight.
 */
#include "kernels/r16.h"
#include "kernels/vnni_avx512.h"
#include "kernels/r16_pack.h"

#include <stddef.h>

#define K4_ROWS 4 /* activation rows per pass over a tile */
#ifndef K4_PF
#define K4_PF KVI_R16_Q4K_SUPER /* bytes ahead in the stream: the next super */
#endif
#ifndef K6_PF
#define K6_PF KVI_R16_Q6K_SUPER
#endif

/* One super against nr (a constant after inlining) activation blocks xb[r]. */
VNNI_INLINE void k4_super(const uint8_t *sup, const kern_q8k *const *xb, int nr, __m512 *acc)
{
    const __m512i lo = _mm512_set1_epi8(0x0f), hi = _mm512_set1_epi8((char)0xf0);
    __m512i E[4], isum[K4_ROWS], msum[K4_ROWS];
    r16k_q4_scales(sup, E);
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) isum[r] = msum[r] = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
    {
        const uint8_t *q = sup + KVI_R16_Q4K_QS + 512 * (size_t)j;
        _Pragma("GCC unroll 9") for (size_t o = 0; o < KVI_R16_Q4K_SUPER / 4; o += 64)
            _mm_prefetch((const char *)(sup + K4_PF + (KVI_R16_Q4K_SUPER / 4) * (size_t)j + o), _MM_HINT_T0);
        __m512i WL[8], WH[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
        {
            const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * k));
            WL[k] = _mm512_and_si512(v, lo);
            WH[k] = _mm512_and_si512(v, hi);
        }
        const __m512i s0 = r16k_q4_sc(E, 2 * j), s1 = r16k_q4_sc(E, 2 * j + 1), mn = r16k_q4_mn(E, j);
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)
        {
            const int8_t *x = xb[r]->qs + 64 * j;
            __m512i dl0 = _mm512_setzero_si512(), dl1 = dl0, dh0 = dl0, dh1 = dl0;
            _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2)
            {
                dl0 = _mm512_dpbusd_epi32(dl0, WL[k], _mm512_set1_epi32(load_i32(x + 4 * k)));
                dl1 = _mm512_dpbusd_epi32(dl1, WL[k + 1], _mm512_set1_epi32(load_i32(x + 4 * k + 4)));
                dh0 = _mm512_dpbusd_epi32(dh0, WH[k], _mm512_set1_epi32(load_i32(x + 32 + 4 * k)));
                dh1 = _mm512_dpbusd_epi32(dh1, WH[k + 1], _mm512_set1_epi32(load_i32(x + 36 + 4 * k)));
            }
            const __m512i dl = _mm512_add_epi32(dl0, dl1),
                          dh = _mm512_srai_epi32(_mm512_add_epi32(dh0, dh1), 4);
            isum[r] = _mm512_add_epi32(
                isum[r], _mm512_add_epi32(_mm512_mullo_epi32(dl, s0), _mm512_mullo_epi32(dh, s1)));
            const uint32_t sp = (uint32_t)(uint16_t)xb[r]->sum32[2 * j] | (uint32_t)xb[r]->sum32[2 * j + 1]
                                                                              << 16;
            msum[r] = _mm512_dpwssd_epi32(msum[r], mn, _mm512_set1_epi32((int32_t)sp));
        }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sup)),
                 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sup + KVI_R16_Q4K_DMIN)));
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)
    {
        const __m512 dx = _mm512_set1_ps(xb[r]->d);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum[r]), acc[r]);
        const __m512 nm =
            _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dmin, dx)), sign));
        acc[r] = _mm512_fmadd_ps(nm, _mm512_cvtepi32_ps(msum[r]), acc[r]);
    }
}

/* One Q6_K super against nr activation blocks xb[r]. */
VNNI_INLINE void k6_super(const uint8_t *sup, const kern_q8k *const *xb, int nr, __m512 *acc)
{
    __m512i isum[K4_ROWS];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) isum[r] = _mm512_setzero_si512();
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
    {
        _Pragma("GCC unroll 2") for (int g = 0; g < 2; g++)
        {
            /* k = 4g + kk: W[q][kk] = levels of inputs 128h + 32q + 16g + 4kk .., sub-block 8h + 2q + g */
            __m512i W[4][4], SC[4];
            _Pragma("GCC unroll 4") for (int kk = 0; kk < 4; kk++)
            {
                /* the next super's 53 lines, a few per step: a burst of prefetches
                 * stalls once the misses in flight fill the load queue */
                const int it = 8 * h + 4 * g + kk;
                _Pragma("GCC unroll 4") for (int ln = it * 53 / 16; ln < (it + 1) * 53 / 16; ln++)
                    _mm_prefetch((const char *)(sup + K6_PF + 64 * ln), _MM_HINT_T0);
                __m512i L[4];
                r16k_q6_levels(sup, h, 4 * g + kk, L);
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) W[q][kk] = L[q];
            }
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) SC[q] = _mm512_cvtepi8_epi32(
                _mm_loadu_si128((const __m128i *)(sup + KVI_R16_Q6K_SC + 16 * (8 * h + 2 * q + g))));
            _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)
            {
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++)
                {
                    const int sb = 8 * h + 2 * q + g;
                    const int8_t *x = xb[r]->qs + 16 * sb;
                    __m512i D = _mm512_set1_epi32(-32 * xb[r]->sum16[sb]);
                    _Pragma("GCC unroll 4") for (int kk = 0; kk < 4; kk++) D =
                        _mm512_dpbusd_epi32(D, W[q][kk], _mm512_set1_epi32(load_i32(x + 4 * kk)));
                    isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(D, SC[q]));
                }
            }
        }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sup));
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) acc[r] =
        _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xb[r]->d)), _mm512_cvtepi32_ps(isum[r]), acc[r]);
}

/* The tile's 16 rows against nr activation rows x[r] (nb blocks each): y + r * ldy;
 * six: Q6_K, else Q4_K (constants after inlining). */
VNNI_INLINE void k_tile(const uint8_t *tile, int64_t nb, const kern_q8k *const *x, int nr, float *y,
                        int64_t ldy, int six)
{
    __m512 acc[K4_ROWS];
    _Pragma("GCC unroll 4") for (int r = 0; r < K4_ROWS; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const kern_q8k *xb[K4_ROWS];
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) xb[r] = x[r] + b;
        if (six)
            k6_super(tile + (size_t)b * KVI_R16_Q6K_SUPER, xb, nr, acc);
        else
            k4_super(tile + (size_t)b * KVI_R16_Q4K_SUPER, xb, nr, acc);
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);
}

#define K_TILE_FN(name, NR, SIX)                                                                            \
    VNNI static void name(const uint8_t *tile, int64_t nb, const kern_q8k *const *x, float *y, int64_t ldy) \
    {                                                                                                       \
        k_tile(tile, nb, x, NR, y, ldy, SIX);                                                               \
    }
K_TILE_FN(k4_tile_1, 1, 0)
K_TILE_FN(k4_tile_2, 2, 0)
K_TILE_FN(k4_tile_3, 3, 0)
K_TILE_FN(k4_tile_4, 4, 0)
K_TILE_FN(k6_tile_1, 1, 1)
K_TILE_FN(k6_tile_2, 2, 1)
K_TILE_FN(k6_tile_3, 3, 1)
K_TILE_FN(k6_tile_4, 4, 1)

VNNI int kern_qgemv_r16k_avx512(const kern_qgemm_args *a)
{
    if ((a->type != KVI_TYPE_Q4_K && a->type != KVI_TYPE_Q6_K) || !kern_has_vnni()) return 0;
    if (a->n_rows < 1 || a->n_in <= 0 || a->n_in % QK_K || a->j0 % 16 || a->j1 % 16) return 0;
    typedef void (*tile_fn)(const uint8_t *, int64_t, const kern_q8k *const *, float *, int64_t);
    static const tile_fn f4[K4_ROWS] = { k4_tile_1, k4_tile_2, k4_tile_3, k4_tile_4 },
                         f6[K4_ROWS] = { k6_tile_1, k6_tile_2, k6_tile_3, k6_tile_4 };
    const tile_fn *fns = a->type == KVI_TYPE_Q6_K ? f6 : f4;
    const int64_t nb = a->n_in / QK_K;
    const size_t tb = 16 * a->w_rb;
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        const uint8_t *tile = a->w + (size_t)(jt / 16) * tb;
        for (int64_t r0 = 0; r0 < a->n_rows; r0 += K4_ROWS) {
            const int nr = a->n_rows - r0 < K4_ROWS ? (int)(a->n_rows - r0) : K4_ROWS;
            const kern_q8k *x[K4_ROWS];
            for (int r = 0; r < K4_ROWS; r++)
                x[r] = (const kern_q8k *)(a->xq + (size_t)(r0 + (r < nr ? r : 0)) * a->xq_rb);
            fns[nr - 1](tile, nb, x, a->y + r0 * a->ldy + jt, a->ldy);
        }
    }
    return 1;
}

/* ---- repacking (r16_pack.c's byte moves, in registers) ---------------------- */

/* The super's four quant vectors of 16-byte group g of a row (vector k lane l = bytes
 * 16g + 4k .. +3 of row l): Q4_K qs groups 0..7; Q6_K ql groups 0..7, then qh 8..11. */
static void k_group(kvi_type t, uint8_t *sup, int g, uint8_t *v[4])
{
    for (int k = 0; k < 4; k++)
        v[k] = sup + (t == KVI_TYPE_Q4_K ? KVI_R16_Q4K_QS + 64 * (size_t)(4 * g + k)
                      : g < 8            ? kern_r16_q6_ql(4 * g + k)
                                         : kern_r16_q6_qh(4 * (g - 8) + k));
}

/* Where group 0 of a block's quants starts in its rows: Q4_K qs, Q6_K ql (qh follows). */
static size_t k_group0(kvi_type t) { return t == KVI_TYPE_Q4_K ? offsetof(block_q4_K, qs) : 0; }

/* Q4_K's NL, NH, HB from the decoded scales e (E0..E3, 256 bytes; r16_pack.h). */
VNNI_INLINE void k4_encode_scales(const uint8_t *e, uint8_t *sup)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i E[4];
    for (int i = 0; i < 4; i++) E[i] = _mm512_loadu_si512((const void *)(e + 64 * i));
    const __m512i NL = _mm512_or_si512(_mm512_and_si512(E[0], m4),
                                       _mm512_slli_epi16(_mm512_and_si512(E[1], m4), 4)),
                  NH = _mm512_or_si512(_mm512_and_si512(E[2], m4),
                                       _mm512_slli_epi16(_mm512_and_si512(E[3], m4), 4));
    const __m512i h0 = _mm512_srli_epi16(_mm512_andnot_si512(m4, E[0]), 4),
                  h1 = _mm512_srli_epi16(_mm512_andnot_si512(m4, E[1]), 2),
                  h2 = _mm512_andnot_si512(m4, E[2]),
                  h3 = _mm512_slli_epi16(_mm512_andnot_si512(m4, E[3]), 2);
    _mm512_storeu_si512((void *)(sup + KVI_R16_Q4K_NL), NL);
    _mm512_storeu_si512((void *)(sup + KVI_R16_Q4K_NH), NH);
    _mm512_storeu_si512((void *)(sup + KVI_R16_Q4K_HB),
                        _mm512_or_si512(_mm512_or_si512(h0, h1), _mm512_or_si512(h2, h3)));
}

VNNI void kern_r16k_from_rows_avx512(kvi_type t, const uint8_t *src, int64_t n_in, uint8_t *dst)
{
    const bool q4 = t == KVI_TYPE_Q4_K;
    const size_t rb = quant_row_bytes(t, n_in), bb = q4 ? sizeof(block_q4_K) : sizeof(block_q6_K);
    const uint8_t *p[16];
    for (int l = 0; l < 16; l++) p[l] = src + (size_t)l * rb;
    for (int64_t b = 0; b < n_in / QK_K; b++) {
        const size_t off = (size_t)b * bb;
        uint8_t *sup = dst + (size_t)b * (q4 ? KVI_R16_Q4K_SUPER : KVI_R16_Q6K_SUPER);
        _Alignas(64) uint8_t e[256]; /* Q4_K: E0..E3 */
        for (int l = 0; l < 16; l++) {
            if (q4) {
                const block_q4_K *blk = (const block_q4_K *)(p[l] + off);
                memcpy(sup + 2 * l, &blk->d, 2);
                memcpy(sup + KVI_R16_Q4K_DMIN + 2 * l, &blk->dmin, 2);
                for (int s = 0; s < 8; s++)
                    quant_scale_min_k4(s, blk->scales, &e[kern_r16_q4_sc_at(s, l)],
                                       &e[kern_r16_q4_mn_at(s, l)]);
            } else {
                const block_q6_K *blk = (const block_q6_K *)(p[l] + off);
                memcpy(sup + 2 * l, &blk->d, 2);
                for (int s = 0; s < 16; s++) sup[KVI_R16_Q6K_SC + 16 * s + l] = (uint8_t)blk->scales[s];
            }
        }
        if (q4) k4_encode_scales(e, sup);
        for (int g = 0; g < (q4 ? 8 : 12); g++) {
            uint8_t *v[4];
            __m512i T[4];
            k_group(t, sup, g, v);
            transpose16x4(p, off + k_group0(t) + 16 * (size_t)g, T);
            for (int k = 0; k < 4; k++) _mm512_storeu_si512((void *)v[k], T[k]);
        }
    }
}

VNNI void kern_r16k_to_rows_avx512(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *dst)
{
    const bool q4 = t == KVI_TYPE_Q4_K;
    const size_t rb = quant_row_bytes(t, n_in), bb = q4 ? sizeof(block_q4_K) : sizeof(block_q6_K);
    for (int64_t b = 0; b < n_in / QK_K; b++) {
        const size_t off = (size_t)b * bb;
        uint8_t *sup = (uint8_t *)tile + (size_t)b * (q4 ? KVI_R16_Q4K_SUPER : KVI_R16_Q6K_SUPER);
        _Alignas(64) uint8_t e[256]; /* Q4_K: E0..E3 */
        if (q4) {
            __m512i E[4];
            r16k_q4_scales(sup, E);
            for (int i = 0; i < 4; i++) _mm512_store_si512((void *)(e + 64 * i), E[i]);
        }
        for (int l = 0; l < 16; l++) {
            if (q4) {
                block_q4_K *blk = (block_q4_K *)(dst + (size_t)l * rb + off);
                uint8_t sc[8], mn[8];
                memcpy(&blk->d, sup + 2 * l, 2);
                memcpy(&blk->dmin, sup + KVI_R16_Q4K_DMIN + 2 * l, 2);
                for (int s = 0; s < 8; s++) {
                    sc[s] = e[kern_r16_q4_sc_at(s, l)];
                    mn[s] = e[kern_r16_q4_mn_at(s, l)];
                }
                quant_pack_scale_min_k4(sc, mn, blk->scales);
            } else {
                block_q6_K *blk = (block_q6_K *)(dst + (size_t)l * rb + off);
                memcpy(&blk->d, sup + 2 * l, 2);
                for (int s = 0; s < 16; s++) blk->scales[s] = (int8_t)sup[KVI_R16_Q6K_SC + 16 * s + l];
            }
        }
        for (int g = 0; g < (q4 ? 8 : 12); g++) {
            uint8_t *v[4];
            __m512i T[4];
            k_group(t, sup, g, v);
            for (int k = 0; k < 4; k++) T[k] = _mm512_loadu_si512((const void *)v[k]);
            untranspose16x4(T, dst + off + k_group0(t) + 16 * (size_t)g, rb);
        }
    }
}
