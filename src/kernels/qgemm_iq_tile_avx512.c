/*
 * qgemm_iq_tile_avx512.c — grid-type weights (IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S)
 * times Q8_K activations with AVX-512 VNNI for many activation rows (prefill):
 * 16 weight rows at a time are decoded once per call into an int8 tile, and every
 * activation row is multiplied with it, 16 outputs per vector (qgemm_iq.h).
 *
 * The tile of weight rows j .. j + 15 (rows past j1 padded with zero levels and
 * dw = 0) lives in the scratch, block b at S + b * TILE_BLK:
 *   lv [64][16][4] u8 at 0:  lv[k][m][i] = 64 + level of input 4 k + i of row j + m
 *                            (level = +-grid byte, |level| <= 62, so 2..126),
 *   sc [16][16] i32 at 4096: sc[s][m] = odd scale of inputs 16 s .. 16 s + 15, row m,
 *   dw [16] f32 at 5120:     the rows' block factors.
 * (5184 bytes per 256 inputs: about 20 per input, within KVI_QGEMM_SCRATCH; a tile
 * of a 4096-input row is 83 KB and stays in L2 while the activation rows pass.)
 * Built per block from kern_iq_decode_block's bytes (quant_iq_unpack's values):
 * levels with their signs applied, then a 16 x 16 dword transpose per 64 inputs.
 *
 * For activation row r (RG rows at a time) and block b, per sub-block s:
 *   D = dpbusd(-64 * sum16_s(x), lv, x) over 4 groups of 4 inputs: lane m = the
 *       exact signed dot of row m's 16 levels with x's 16 quants (|D| < 2^17),
 *   isum += D * sc[s]  (vpmulld; |isum| < 2^26, exact),
 * then acc = fmadd(dw * dx, (float)isum, acc) lane by lane: kern_qgemm_ref's
 * integers and float steps, so y has its bits whatever the row count, the output
 * range or the thread split.
 */
#include "kernels/qgemm_iq.h"

#include "kernels/isa_target.h"
#include "base/cpu.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TILE_BLK 5184 /* tile bytes per 256 inputs: lv 4096, sc 1024, dw 64 */
#define LV_OFF 64     /* added to every level to make it an unsigned byte */
#define RG 4          /* activation rows per pass over a tile */

/* 16 rows r[m] of 16 dwords each, transposed in place: r[c] lane m = old r[m] lane c. */
KVI_TARGET_VNNI static void transpose16(__m512i r[16])
{
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* b[4 g + c], 128-bit lane L: rows 4 g .. 4 g + 3 of column 4 L + c */
    for (int g = 0; g < 4; g++) {
        b[4 * g] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
        b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
        b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
        b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44),
                      e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xee);
        const __m512i f0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44),
                      f1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xee);
        r[c] = _mm512_shuffle_i32x4(e0, f0, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(e0, f0, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(e1, f1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(e1, f1, 0xdd);
    }
}

/* Block b of the nj (<= 16) weight rows from w (row stride rb) into the tile block t. */
KVI_TARGET_VNNI static void tile_block(kvi_type ty, const uint8_t *w, size_t rb, int nj, uint8_t *t)
{
    _Alignas(64) uint8_t lv[16][QK_K]; /* row m's levels + LV_OFF, in input order */
    _Alignas(64) uint8_t o[IQ_BLK];
    int32_t *sc = (int32_t *)(t + 4096);
    float *dw = (float *)(t + 5120);
    const __m512i off = _mm512_set1_epi8(LV_OFF);
    for (int m = 0; m < 16; m++) {
        if (m >= nj) { /* padding: level 0, scale 1, factor 0 */
            memset(lv[m], LV_OFF, QK_K);
            for (int s = 0; s < 16; s++) sc[16 * s + m] = 1;
            dw[m] = 0.0f;
            continue;
        }
        kern_iq_decode_block(ty, w + (size_t)m * rb, o);
        for (int q = 0; q < 4; q++) {
            const __m512i mag = _mm512_load_si512((const void *)(o + 64 * q));
            uint64_t sg;
            memcpy(&sg, o + 256 + 8 * q, 8);
            const __m512i v = _mm512_mask_sub_epi8(_mm512_add_epi8(off, mag), (__mmask64)sg, off, mag);
            _mm512_store_si512((void *)(lv[m] + 64 * q), v);
        }
        for (int s = 0; s < 16; s++) sc[16 * s + m] = o[288 + s];
        memcpy(&dw[m], o + 304, 4);
    }
    for (int h = 0; h < 4; h++) { /* dwords 16 h .. 16 h + 15 of every row: groups k = 16 h + c */
        __m512i r[16];
        for (int m = 0; m < 16; m++) r[m] = _mm512_load_si512((const void *)(lv[m] + 64 * h));
        transpose16(r);
        for (int c = 0; c < 16; c++) _mm512_store_si512((void *)(t + 64 * (16 * h + c)), r[c]);
    }
}

/* acc[rr] (16 outputs) = the tile S (nb blocks) times activation rows x[rr], rr < nr. */
__attribute__((always_inline)) KVI_TARGET_VNNI static inline void
tile_rows_n(const uint8_t *S, int64_t nb, const kern_q8k *const *x, const int nr, __m512 *acc)
{
#pragma GCC unroll 4
    for (int rr = 0; rr < nr; rr++) acc[rr] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *t = S + (size_t)b * TILE_BLK;
        __m512i isum[RG];
#pragma GCC unroll 4
        for (int rr = 0; rr < nr; rr++) isum[rr] = _mm512_setzero_si512();
        for (int s = 0; s < 16; s++) {
            __m512i D[RG];
#pragma GCC unroll 4
            for (int rr = 0; rr < nr; rr++) D[rr] = _mm512_set1_epi32(-LV_OFF * x[rr][b].sum16[s]);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                const __m512i lv = _mm512_load_si512((const void *)(t + 64 * (4 * s + g)));
#pragma GCC unroll 4
                for (int rr = 0; rr < nr; rr++) {
                    int32_t xw;
                    memcpy(&xw, x[rr][b].qs + 16 * s + 4 * g, 4);
                    D[rr] = _mm512_dpbusd_epi32(D[rr], lv, _mm512_set1_epi32(xw));
                }
            }
            const __m512i sc = _mm512_load_si512((const void *)(t + 4096 + 64 * s));
#pragma GCC unroll 4
            for (int rr = 0; rr < nr; rr++)
                isum[rr] = _mm512_add_epi32(isum[rr], _mm512_mullo_epi32(D[rr], sc));
        }
        const __m512 dw = _mm512_load_ps((const void *)(t + 5120));
#pragma GCC unroll 4
        for (int rr = 0; rr < nr; rr++)
            acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x[rr][b].d)),
                                      _mm512_cvtepi32_ps(isum[rr]), acc[rr]);
    }
}

KVI_TARGET_VNNI static void tile_rows(const uint8_t *S, int64_t nb, const kern_q8k *const *x, int nr,
                                      __m512 *acc)
{
    switch (nr) {
    case 1: tile_rows_n(S, nb, x, 1, acc); break;
    case 2: tile_rows_n(S, nb, x, 2, acc); break;
    case 3: tile_rows_n(S, nb, x, 3, acc); break;
    default: tile_rows_n(S, nb, x, RG, acc); break;
    }
}

KVI_TARGET_VNNI int kern_qgemm_iq_tile_avx512(const kern_qgemm_args *a)
{
    if (!quant_iq_is_grid(a->type) || !cpu_features()->avx512_vnni) return 0;
    if (!a->scratch || ((uintptr_t)a->scratch & 63) || a->n_in <= 0 || a->n_in % QK_K) return 0;
    const int64_t nb = a->n_in / QK_K;
    const size_t bb = quant_block_bytes(a->type);
    uint8_t *S = a->scratch;
    for (int64_t j = a->j0; j < a->j1; j += 16) {
        const int nj = a->j1 - j < 16 ? (int)(a->j1 - j) : 16;
        for (int64_t b = 0; b < nb; b++)
            tile_block(a->type, a->w + (size_t)j * a->w_rb + (size_t)b * bb, a->w_rb, nj,
                       S + (size_t)b * TILE_BLK);
        const __mmask16 keep = (__mmask16)((1u << nj) - 1);
        for (int64_t r = 0; r < a->n_rows; r += RG) {
            const int nr = a->n_rows - r < RG ? (int)(a->n_rows - r) : RG;
            const kern_q8k *x[RG];
            __m512 acc[RG];
            for (int rr = 0; rr < nr; rr++) x[rr] = (const kern_q8k *)(a->xq + (size_t)(r + rr) * a->xq_rb);
            tile_rows(S, nb, x, nr, acc);
            for (int rr = 0; rr < nr; rr++)
                _mm512_mask_storeu_ps(a->y + (r + rr) * a->ldy + j, keep, acc[rr]);
        }
    }
    return 1;
}
