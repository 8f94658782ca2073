/*
 * vnni_avx512.h — what the AVX-512 VNNI integer products share (internal to
 * kernels_avx512.c, qgemv_avx512.c, qgemv_kq_avx512.c, qgemv_r16k_avx512.c and
 * r16_pack.c): the
 * 16-row weight tile (lane l of every vector belongs to weight row j0 + l), its
 * in-register transposes and gathers, the codebook lookups (IQ4_NL, MXFP4) and
 * MXFP4's E8M0 scales as floats, and the entry points of the decode (GEMV)
 * kernels. Every function here is compiled for AVX-512 VNNI and must be called
 * only after kern_has_vnni() returned 1.
 */
#ifndef KVI_KERNELS_VNNI_H
#define KVI_KERNELS_VNNI_H

#include "kernels/isa_target.h"
#include "kernels/kernels_int.h"
#include "kernels/r16_pack.h"
#include "formats/quant.h"

#include <immintrin.h>
#include <string.h>

#define VNNI KVI_TARGET_VNNI
#define VNNI_INLINE VNNI __attribute__((always_inline)) static inline

/* The 16 weight rows of a tile: p[l] = p[0] + idx[l] (rows past the end repeat
 * the last valid one), so one gather reads a word of every row. */
typedef struct tile16 {
    const uint8_t *p[16];
    __m512i idx; /* [16] i32 byte offsets of the rows from p[0] */
} tile16;

/* 16 rows x 16 bytes at p[l] + off -> T[k], lane l = bytes 4k..4k+3 of row l. */
VNNI_INLINE void transpose16x4(const uint8_t *const *p, size_t off, __m512i T[4])
{
    __m512i Z[4];
    for (int a = 0; a < 4; a++) {
        __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p[a] + off)));
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p[a + 4] + off)), 1);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p[a + 8] + off)), 2);
        Z[a] = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p[a + 12] + off)), 3);
    }
    __m512i t0 = _mm512_unpacklo_epi32(Z[0], Z[1]), t1 = _mm512_unpacklo_epi32(Z[2], Z[3]);
    __m512i t2 = _mm512_unpackhi_epi32(Z[0], Z[1]), t3 = _mm512_unpackhi_epi32(Z[2], Z[3]);
    T[0] = _mm512_unpacklo_epi64(t0, t1);
    T[1] = _mm512_unpackhi_epi64(t0, t1);
    T[2] = _mm512_unpacklo_epi64(t2, t3);
    T[3] = _mm512_unpackhi_epi64(t2, t3);
}

/* transpose16x4's inverse: T[k] lane l = bytes 4k..4k+3 of row l -> the 16 bytes of
 * row l at dst + l * rb. */
VNNI_INLINE void untranspose16x4(const __m512i T[4], uint8_t *dst, size_t rb)
{
    const __m512i t0 = _mm512_unpacklo_epi32(T[0], T[1]), t1 = _mm512_unpacklo_epi32(T[2], T[3]);
    const __m512i t2 = _mm512_unpackhi_epi32(T[0], T[1]), t3 = _mm512_unpackhi_epi32(T[2], T[3]);
    const __m512i Z[4] = { _mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1),
                           _mm512_unpacklo_epi64(t2, t3), _mm512_unpackhi_epi64(t2, t3) };
    for (int a = 0; a < 4; a++) {
        _mm_storeu_si128((__m128i *)(dst + (size_t)a * rb), _mm512_castsi512_si128(Z[a]));
        _mm_storeu_si128((__m128i *)(dst + (size_t)(a + 4) * rb), _mm512_extracti32x4_epi32(Z[a], 1));
        _mm_storeu_si128((__m128i *)(dst + (size_t)(a + 8) * rb), _mm512_extracti32x4_epi32(Z[a], 2));
        _mm_storeu_si128((__m128i *)(dst + (size_t)(a + 12) * rb), _mm512_extracti32x4_epi32(Z[a], 3));
    }
}

/* lane l = the 32-bit word at p[l] + off */
VNNI_INLINE __m512i gather16_u32(const tile16 *tl, size_t off)
{
    return _mm512_i32gather_epi32(tl->idx, (const void *)(tl->p[0] + off), 1);
}

/* The 16 f16 scales at p[l] + off as floats; hi: the half is the upper one of the
 * word at p[l] + off - 2 (so that the gather stays inside a block that ends with it). */
VNNI_INLINE __m512 scales16(const tile16 *tl, size_t off, int hi)
{
    __m512i g = hi ? _mm512_srli_epi32(gather16_u32(tl, off - 2), 16) : gather16_u32(tl, off);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* Lane l = row row[l] of the weights (row[0] the lowest; the rows' span fits the
 * int32 gather offsets). */
VNNI_INLINE void tile_init_rows(tile16 *tl, const kern_qgemm_args *a, const int64_t row[16])
{
    int32_t off[16];
    for (int l = 0; l < 16; l++) {
        tl->p[l] = a->w + (size_t)row[l] * a->w_rb;
        off[l] = (int32_t)(tl->p[l] - tl->p[0]);
    }
    tl->idx = _mm512_loadu_si512((const void *)off);
}

/* Rows jt .. jt + nv - 1 (nv >= 1), the rest repeating the last. */
VNNI_INLINE void tile_init(tile16 *tl, const kern_qgemm_args *a, int64_t jt, int nv)
{
    int64_t row[16];
    for (int l = 0; l < 16; l++) row[l] = jt + (l < nv ? l : nv - 1);
    tile_init_rows(tl, a, row);
}

VNNI_INLINE int32_t load_i32(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The IQ4_NL / IQ4_XS codebook plus 128 as unsigned bytes, in each 128-bit lane:
 * vpshufb of a nibble vector gives the levels as vpdpbusd's unsigned operand
 * (the sum then starts at -128 * sum(x quants), kern_q8_level_offset). */
VNNI_INLINE __m512i kern_iq4nl_lut(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141,
                                                (char)153, (char)166, (char)181, (char)197, (char)217,
                                                (char)241));
}

/* The MXFP4 levels (quant_kvalues_mxfp4, -12..12) plus 128, likewise. */
VNNI_INLINE __m512i kern_mxfp4_lut(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8((char)128, (char)129, (char)130, (char)131, (char)132,
                                                (char)134, (char)136, (char)140, (char)128, 127, 126, 125,
                                                124, 122, 120, 116));
}

/* 2^(e - 128) of the E8M0 bytes e in the low byte of each i32 lane (higher bytes
 * ignored): quant_e8m0_half's bits, (e - 1) << 23, or for e < 2 the subnormals
 * 0x00200000 << e. */
VNNI_INLINE __m512 kern_e8m0_half_ps(__m512i v)
{
    const __m512i e = _mm512_and_si512(v, _mm512_set1_epi32(0xff));
    const __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, nrm, sub));
}

/* The 16 E8M0 bytes at p (an R16 pair's scales, r16_pack.h) as 2^(e - 128). */
VNNI_INLINE __m512 kern_e8m0_half16(const uint8_t *p)
{
    return kern_e8m0_half_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* The 16 MXFP4 scales 2^(e - 128) of the blocks at p[l] + off (e its first byte;
 * the gathered word stays inside the 17-byte block). */
VNNI_INLINE __m512 scales16_e8m0(const tile16 *tl, size_t off)
{
    return kern_e8m0_half_ps(gather16_u32(tl, off));
}

/* ---- R16 K-quant supers (r16_pack.h), decoded for the 16 rows at once ----
 * (qgemv_r16k_avx512.c's decode products, kernels_avx512.c's many-row packing) */

/* Q4_K: E0..E3 of a super, its 6-bit scales and mins as bytes. */
VNNI_INLINE void r16k_q4_scales(const uint8_t *sup, __m512i E[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i NL = _mm512_loadu_si512((const void *)(sup + KVI_R16_Q4K_NL)),
                  NH = _mm512_loadu_si512((const void *)(sup + KVI_R16_Q4K_NH)),
                  H = _mm512_loadu_si512((const void *)(sup + KVI_R16_Q4K_HB));
    /* a | (b & c): 0xF8 */
    E[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(NL, m4), _mm512_slli_epi16(H, 4), m30, 0xF8);
    E[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(NL, 4), m4), _mm512_slli_epi16(H, 2),
                                     m30, 0xF8);
    E[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(NH, m4), H, m30, 0xF8);
    E[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(NH, 4), m4), _mm512_srli_epi16(H, 2),
                                     m30, 0xF8);
}

/* sc_s of the 16 rows as dwords (chunk s % 4 of E[s / 4]). */
VNNI_INLINE __m512i r16k_q4_sc(const __m512i E[4], int s)
{
    const __m512i e = E[s / 4];
    switch (s % 4) {
    case 0: return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(e));
    case 1: return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(e, 1));
    case 2: return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(e, 2));
    default: return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(e, 3));
    }
}

/* dword lane l = mn_2j | mn_2j+1 << 16 of row l (half j % 2 of E[2 + j / 2]). */
VNNI_INLINE __m512i r16k_q4_mn(const __m512i E[4], int j)
{
    const __m512i e = E[2 + j / 2];
    return _mm512_cvtepu8_epi16(j % 2 ? _mm512_extracti64x4_epi64(e, 1) : _mm512_castsi512_si256(e));
}

/* Q6_K: the levels (0..63) of inputs 128h + 32q + 4k .. +3 (k < 8) of the 16 rows
 * into W[q], q = 0..3, from triplet 8h + k: ql 16h + k (low nibbles for q 0, high for
 * q 2), ql 16h + 8 + k (q 1, 3), qh 8h + k (bits 2q, 2q+1). */
VNNI_INLINE void r16k_q6_levels(const uint8_t *sup, int h, int k, __m512i W[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const uint8_t *t = sup + KVI_R16_Q6K_Q + 192 * (8 * h + k); /* triplet 8h + k */
    const __m512i L0 = _mm512_loadu_si512((const void *)t), L1 = _mm512_loadu_si512((const void *)(t + 64)),
                  Q = _mm512_loadu_si512((const void *)(t + 128));
    W[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(L0, m4), _mm512_slli_epi16(Q, 4), m30, 0xF8);
    W[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(L1, m4), _mm512_slli_epi16(Q, 2), m30, 0xF8);
    W[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), Q, m30, 0xF8);
    W[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4), _mm512_srli_epi16(Q, 2),
                                     m30, 0xF8);
}

/* 16 vectors of dword partial sums (one per weight row) folded: V[i] 128-bit chunk
 * c, lane k = the sum of the four dwords of chunk c of P[4i + k] (exact wrap-around
 * int32 sums; the one fold of the decode kernels' and q8_lowbit_avx512.c's tiles). */
VNNI_INLINE void vnni_fold16(const __m512i P[16], __m512i V[4])
{
    __m512i U[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        U[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(P[2 * i], P[2 * i + 1]),
                                _mm512_unpackhi_epi32(P[2 * i], P[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        V[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(U[2 * i], U[2 * i + 1]),
                                _mm512_unpackhi_epi64(U[2 * i], U[2 * i + 1]));
}

/* lane l = the sum of all 16 dwords of P[l] */
VNNI_INLINE __m512i vnni_sum16(const __m512i P[16])
{
    __m512i V[4];
    vnni_fold16(P, V);
    const __m512i A =
        _mm512_add_epi32(_mm512_shuffle_i32x4(V[0], V[1], 0x88), _mm512_shuffle_i32x4(V[0], V[1], 0xDD));
    const __m512i B =
        _mm512_add_epi32(_mm512_shuffle_i32x4(V[2], V[3], 0x88), _mm512_shuffle_i32x4(V[2], V[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(A, B, 0x88), _mm512_shuffle_i32x4(A, B, 0xDD));
}

/* R[c] lane 4i + k = the sum of the four dwords of chunk c of P[4i + k]: per row,
 * the sums of its four 128-bit chunks (vnni_fold16, then a 4 x 4 transpose of chunks) */
VNNI_INLINE void vnni_sum16x4(const __m512i P[16], __m512i R[4])
{
    __m512i V[4];
    vnni_fold16(P, V);
    const __m512i T0 = _mm512_shuffle_i32x4(V[0], V[1], 0x44), T1 = _mm512_shuffle_i32x4(V[0], V[1], 0xEE);
    const __m512i T2 = _mm512_shuffle_i32x4(V[2], V[3], 0x44), T3 = _mm512_shuffle_i32x4(V[2], V[3], 0xEE);
    R[0] = _mm512_shuffle_i32x4(T0, T2, 0x88);
    R[1] = _mm512_shuffle_i32x4(T0, T2, 0xDD);
    R[2] = _mm512_shuffle_i32x4(T1, T3, 0x88);
    R[3] = _mm512_shuffle_i32x4(T1, T3, 0xDD);
}

/* 1 when the CPU has AVX-512 VNNI (cached). */
int kern_has_vnni(void);

/* Decode products (few input rows, weights streamed as they lie), q8.h's
 * bits; each returns 0 (nothing written) when it does not handle the arguments.
 * Q8_0 / Q4_0 / IQ4_NL / MXFP4 (qgemv_avx512.c): */
int kern_qgemv_avx512(const kern_qgemm_args *a);
/* K-quants (qgemv_kq_avx512.c): */
int kern_qgemv_kq_avx512(const kern_qgemm_args *a);

/* Many-row product over Q8_0 / Q4_0 / IQ4_NL / MXFP4 weights in the R16 layout (r16_pack.h;
 * kernels_avx512.c, the rows layout's tiles and bits); 0 when not handled. */
int kern_qgemm_r16_many_avx512(const kern_qgemm_args *a);

#endif
