/*
 * qgemm_iq_avx512.c — grid-type weights (IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S) times
 * Q8_K activations with AVX-512 VNNI (qgemm_iq.h): fewer than KVI_IQ_TILE_MIN_ROWS
 * activation rows here; from there on the 16-row tiles of qgemm_iq_tile_avx512.c,
 * which start from this file's block decoder (kern_iq_decode_block).
 *
 * Each weight row j of [j0, j1) is decoded once per call into the scratch, by a
 * vector decoder per type (IQ2_XXS grid entries loaded, the others gathered, sign parity computed; IQ2_XS
 * by quant_iq_unpack itself) that writes exactly the bytes of quant_iq_unpack (formats/quant_iq.c; the products
 * are checked against the reference bit for bit): per 256-input block b, at
 * S + b * IQ_BLK: mag [256] (grid bytes, unsigned), sgn [32] (bit i % 8 of byte
 * i / 8: input i negative), sc [16] (odd scales per 16 inputs), dw (f32).
 * Then for the activation rows, IQ_RG at a time, block by block in order:
 *   xs_q = x_q with the weight's signs applied (vpsubb under the sign mask; the
 *          quants lie in [-127, 127], so the negation is exact),
 *   D_q  = dpbusd(0, mag_q, xs_q): per dword lane the dot of 4 inputs, |D| <=
 *          4 * 62 * 127 < 2^15, so it fits the low int16 word,
 *   T   += dpwssd(D_q, SC_q): SC_q lane k = the scale of its 16 inputs (sub-block
 *          4 q + k / 4) in the low word, 0 in the high word,
 * for q = 0..3 (inputs 64 q .. 64 q + 63); isum = the lane sum of T, exact
 * (|isum| < 2^26). The float step is the reference's: acc = fmaf(dw * dx,
 * (float)isum, acc), so y[r][j] has kern_qgemm_ref's bits whatever the row
 * grouping, the range or the thread split.
 */
#include "kernels/qgemm_iq.h"

#include "kernels/isa_target.h"
#include "base/cpu.h"
#include "formats/quant_grids.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define IQ_RG 4 /* activation rows per pass over a decoded weight row */

/* 16 sign indices (7 bits, one per dword lane) as their 16 sign bytes: the index
 * with its parity as bit 7 (quant_ksigns_iq2xs's rule). */
KVI_TARGET_VNNI static __m128i sign_bytes(__m512i i7)
{
    __m512i t = _mm512_xor_si512(i7, _mm512_srli_epi32(i7, 4));
    t = _mm512_xor_si512(t, _mm512_srli_epi32(t, 2));
    t = _mm512_xor_si512(t, _mm512_srli_epi32(t, 1));
    const __m512i par = _mm512_and_si512(t, _mm512_set1_epi32(1));
    return _mm512_cvtepi32_epi8(_mm512_or_si512(i7, _mm512_slli_epi32(par, 7)));
}

/* The signs, odd scales and factor of a block whose sub-block ib keeps its 4 sign
 * indices (7 bits at 7l) and scale s (bits 28..31) in a u32, found at dword
 * 2 ib + 1 (IQ2_XXS) or ib (IQ3_XXS) of v: into o + 256 (sign bytes, parity as
 * bit 7: quant_ksigns_iq2xs's rule), o + 288 (2 s + 1, twice) and o + 304. */
KVI_TARGET_VNNI static void decode_ksigns(__m512i v, int stride, int off, float dw, uint8_t *o)
{
    const __m512i sh = _mm512_set_epi32(21, 14, 7, 0, 21, 14, 7, 0, 21, 14, 7, 0, 21, 14, 7, 0);
    const __m512i m7 = _mm512_set1_epi32(127), one = _mm512_set1_epi32(1);
    const __m512i sub = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int h = 0; h < 2; h++) { /* sign groups 16h .. 16h+15: sub-blocks 4h .. 4h+3 */
        const __m512i pos = _mm512_add_epi32(
            _mm512_mullo_epi32(_mm512_add_epi32(sub, _mm512_set1_epi32(4 * h)), _mm512_set1_epi32(stride)),
            _mm512_set1_epi32(off));
        const __m512i aux = _mm512_permutexvar_epi32(pos, v);
        const __m512i i7 = _mm512_and_si512(_mm512_srlv_epi32(aux, sh), m7);
        _mm_storeu_si128((__m128i *)(o + 256 + 16 * h), sign_bytes(i7));
        /* lanes 0, 4, 8, 12 hold sub-blocks 4h .. 4h+3: their 2 s + 1 */
        const __m512i sc = _mm512_add_epi32(_mm512_slli_epi32(_mm512_srli_epi32(aux, 28), 1), one);
        uint8_t s8[16];
        _mm_storeu_si128((__m128i *)s8, _mm512_cvtepi32_epi8(sc));
        for (int k = 0; k < 4; k++) o[288 + 8 * h + 2 * k] = o[288 + 8 * h + 2 * k + 1] = s8[4 * k];
    }
    memcpy(o + 304, &dw, 4);
}

static float f16_at(const uint8_t *p) { return quant_f16_to_f32((quant_f16)(p[0] | p[1] << 8)); }

/* 8 u64 grid entries g[ix[0..7]] as one vector (entry m in qword m), built from
 * scalar loads: on the AMD EPYC measured (bench/RESULTS.md) 1.45x faster than a
 * vector gather for IQ2_XXS; IQ2_S (10-bit indices) and the 16 u32 entries of IQ3
 * keep their gathers, there as fast or faster. */
__attribute__((always_inline)) KVI_TARGET_VNNI static inline __m512i grid8(const uint64_t *g,
                                                                           const uint32_t *ix)
{
    return _mm512_set_epi64((long long)g[ix[7]], (long long)g[ix[6]], (long long)g[ix[5]],
                            (long long)g[ix[4]], (long long)g[ix[3]], (long long)g[ix[2]],
                            (long long)g[ix[1]], (long long)g[ix[0]]);
}

/* The odd scales of 8 bytes of nibble pairs (IQ2_S: byte ib, low nibble the first
 * 16 inputs of sub-block ib) or 4 (IQ3_S: byte k, low nibble sub-block 2k). */
static void nibble_scales(const uint8_t *b, int per16, uint8_t *sc)
{
    for (int i = 0; i < 16; i++) {
        const int byte = per16 ? i / 2 : i / 4, hi = per16 ? i % 2 : (i / 2) % 2;
        sc[i] = (uint8_t)(2 * ((b[byte] >> (4 * hi)) & 0xf) + 1);
    }
}

/* One IQ2_XXS block at p into the scratch block o, the bytes quant_iq_unpack
 * writes, in vectors: the 8 index bytes of sub-blocks 2k, 2k+1 give the grid
 * entries of inputs 64k..64k+63 (one vector each: no scalar copies to memory). */
KVI_TARGET_VNNI static void decode_iq2xxs(const uint8_t *p, uint8_t *o)
{
    const uint8_t *q = p + 2; /* 8 x (4 index bytes, u32 signs and scale) */
    for (int k = 0; k < 4; k++) {
        uint32_t lo, hi;
        memcpy(&lo, q + 16 * k, 4);
        memcpy(&hi, q + 16 * k + 8, 4);
        const uint32_t ix[8] = { lo & 255, (lo >> 8) & 255, (lo >> 16) & 255, lo >> 24,
                                 hi & 255, (hi >> 8) & 255, (hi >> 16) & 255, hi >> 24 };
        _mm512_store_si512((void *)(o + 64 * k), grid8(quant_iq2xxs_grid, ix));
    }
    decode_ksigns(_mm512_loadu_si512((const void *)q), 2, 1, f16_at(p) * 0.125f, o);
}

/* One IQ3_XXS block likewise: 16 index bytes gather the entries of 64 inputs. */
KVI_TARGET_VNNI static void decode_iq3xxs(const uint8_t *p, uint8_t *o)
{
    for (int k = 0; k < 4; k++) {
        const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 2 + 16 * k)));
        _mm512_store_si512((void *)(o + 64 * k),
                           _mm512_i32gather_epi32(idx, (const void *)quant_iq3xxs_grid, 4));
    }
    const __m512i v = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 66)));
    decode_ksigns(v, 1, 0, f16_at(p) * 0.25f, o);
}

/* One IQ2_S block likewise: group g's 10-bit index is its low byte and 2 bits of
 * qh (bits 2l..2l+1 of sub-block ib's byte); the sign bytes are stored as such. */
KVI_TARGET_VNNI static void decode_iq2s(const uint8_t *p, uint8_t *o)
{
    const __m512i sh = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), m3 = _mm512_set1_epi64(3);
    for (int k = 0; k < 4; k++) { /* sub-blocks 2k, 2k+1: groups 8k .. 8k+7 */
        uint64_t lo;
        memcpy(&lo, p + 2 + 8 * k, 8);
        const uint64_t h = (uint64_t)p[66 + 2 * k] | (uint64_t)p[67 + 2 * k] << 8;
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi64(_mm512_set1_epi64((long long)h), sh), m3);
        const __m512i idx =
            _mm512_or_si512(_mm512_cvtepu8_epi64(_mm_cvtsi64_si128((long long)lo)), _mm512_slli_epi64(hi, 8));
        _mm512_store_si512((void *)(o + 64 * k),
                           _mm512_i64gather_epi64(idx, (const void *)quant_iq2s_grid, 8));
    }
    memcpy(o + 256, p + 34, 32);
    nibble_scales(p + 74, 1, o + 288);
    const float dw = f16_at(p) * 0.125f;
    memcpy(o + 304, &dw, 4);
}

/* One IQ3_S block likewise: entry m of sub-blocks 2k, 2k+1 (16 of them) has bit 8
 * of its index in bit m of qh[2k] | qh[2k+1] << 8, a lane mask. */
KVI_TARGET_VNNI static void decode_iq3s(const uint8_t *p, uint8_t *o)
{
    const __m512i b8 = _mm512_set1_epi32(256);
    for (int k = 0; k < 4; k++) {
        const __mmask16 h = (__mmask16)(p[66 + 2 * k] | p[67 + 2 * k] << 8);
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 2 + 16 * k)));
        idx = _mm512_mask_or_epi32(idx, h, idx, b8);
        _mm512_store_si512((void *)(o + 64 * k),
                           _mm512_i32gather_epi32(idx, (const void *)quant_iq3s_grid, 4));
    }
    memcpy(o + 256, p + 74, 32);
    nibble_scales(p + 106, 0, o + 288);
    const float dw = f16_at(p);
    memcpy(o + 304, &dw, 4);
}

/* One block of type t at blk into the scratch block o (the layout above). */
KVI_TARGET_VNNI void kern_iq_decode_block(kvi_type t, const uint8_t *blk, uint8_t *o)
{
    switch (t) {
    case KVI_TYPE_IQ2_XXS: decode_iq2xxs(blk, o); return;
    case KVI_TYPE_IQ3_XXS: decode_iq3xxs(blk, o); return;
    case KVI_TYPE_IQ2_S: decode_iq2s(blk, o); return;
    case KVI_TYPE_IQ3_S: decode_iq3s(blk, o); return;
    default: break; /* IQ2_XS: the reference decoder (its gathers, and grid8, measured slower) */
    }
    float dw;
    quant_iq_unpack(t, blk, o, o + 256, o + 288, &dw);
    memcpy(o + 304, &dw, 4);
}

/* The row's nb blocks into the scratch layout above. */
KVI_TARGET_VNNI static void decode_row(kvi_type t, const uint8_t *w, int64_t nb, uint8_t *s)
{
    const size_t bb = quant_block_bytes(t);
    /* one loop per type, so that each decoder is inlined into it */
#define DECODE_ROW(fn)                                                               \
    for (int64_t b = 0; b < nb; b++) fn(w + (size_t)b * bb, s + (size_t)b * IQ_BLK); \
    return
    switch (t) {
    case KVI_TYPE_IQ2_XXS: DECODE_ROW(decode_iq2xxs);
    case KVI_TYPE_IQ3_XXS: DECODE_ROW(decode_iq3xxs);
    case KVI_TYPE_IQ2_S: DECODE_ROW(decode_iq2s);
    case KVI_TYPE_IQ3_S: DECODE_ROW(decode_iq3s);
    default: break;
    }
#undef DECODE_ROW
    for (int64_t b = 0; b < nb; b++) kern_iq_decode_block(t, w + (size_t)b * bb, s + (size_t)b * IQ_BLK);
}

/* The dword lanes' sub-block (of 16 inputs) in vector q: 4 q + lane / 4. */
static const int32_t SUB_OF_LANE[4][16] = {
    { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 },
    { 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7 },
    { 8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11 },
    { 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15 },
};

/* acc[rr] = the product of the decoded row s (nb blocks) with rows x[rr], rr < nr:
 * the blocks in order, the nr rows' chains in flight together. One instance per
 * nr, so that every loop unrolls. */
__attribute__((always_inline)) KVI_TARGET_VNNI static inline void
rows_dot_n(const uint8_t *s, int64_t nb, const kern_q8k *const *x, const int nr, float *acc)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i idx[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) idx[q] = _mm512_loadu_si512((const void *)SUB_OF_LANE[q]);
#pragma GCC unroll 4
    for (int rr = 0; rr < nr; rr++) acc[rr] = 0.0f;
    __m128 acc4 = _mm_setzero_ps(); /* nr == 4: lane rr = acc[rr] */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = s + (size_t)b * IQ_BLK;
        const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(o + 288)));
        __m512i T[IQ_RG];
#pragma GCC unroll 4
        for (int rr = 0; rr < nr; rr++) T[rr] = z;
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const __m512i M = _mm512_load_si512((const void *)(o + 64 * q));
            const __m512i SC = _mm512_permutexvar_epi32(idx[q], sc);
            uint64_t m;
            memcpy(&m, o + 256 + 8 * q, 8);
            const __mmask64 sg = (__mmask64)m;
#pragma GCC unroll 4
            for (int rr = 0; rr < nr; rr++) {
                const __m512i xv = _mm512_loadu_si512((const void *)(x[rr][b].qs + 64 * q));
                const __m512i xs = _mm512_mask_sub_epi8(xv, sg, z, xv);
                T[rr] = _mm512_dpwssd_epi32(T[rr], _mm512_dpbusd_epi32(z, M, xs), SC);
            }
        }
        float dw;
        memcpy(&dw, o + 304, 4);
        if (nr == 4) { /* the four lane sums at once (exact), then the float steps lane by lane */
            const __m512i a01 =
                _mm512_add_epi32(_mm512_unpacklo_epi32(T[0], T[1]), _mm512_unpackhi_epi32(T[0], T[1]));
            const __m512i a23 =
                _mm512_add_epi32(_mm512_unpacklo_epi32(T[2], T[3]), _mm512_unpackhi_epi32(T[2], T[3]));
            const __m512i a4 =
                _mm512_add_epi32(_mm512_unpacklo_epi64(a01, a23), _mm512_unpackhi_epi64(a01, a23));
            const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(a4), _mm512_extracti64x4_epi64(a4, 1));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            const __m128 dx = _mm_set_ps(x[3][b].d, x[2][b].d, x[1][b].d, x[0][b].d);
            acc4 = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dw), dx), _mm_cvtepi32_ps(s4), acc4);
            continue;
        }
#pragma GCC unroll 4
        for (int rr = 0; rr < nr; rr++)
            acc[rr] = fmaf(dw * x[rr][b].d, (float)_mm512_reduce_add_epi32(T[rr]), acc[rr]);
    }
    if (nr == 4) _mm_storeu_ps(acc, acc4);
}

KVI_TARGET_VNNI static void rows_dot(const uint8_t *s, int64_t nb, const kern_q8k *const *x, int nr,
                                     float *acc)
{
    switch (nr) {
    case 1: rows_dot_n(s, nb, x, 1, acc); break;
    case 2: rows_dot_n(s, nb, x, 2, acc); break;
    case 3: rows_dot_n(s, nb, x, 3, acc); break;
    default: rows_dot_n(s, nb, x, 4, acc); break;
    }
}

int kern_qgemm_iq_avx512(const kern_qgemm_args *a)
{
    if (!quant_iq_is_grid(a->type) || !cpu_features()->avx512_vnni) return 0;
    if (!a->scratch || ((uintptr_t)a->scratch & 63) || a->n_in <= 0 || a->n_in % QK_K) return 0;
    if (a->n_rows >= KVI_IQ_TILE_MIN_ROWS) return kern_qgemm_iq_tile_avx512(a); /* qgemm_iq_tile_avx512.c */
    const int64_t nb = a->n_in / QK_K;
    for (int64_t j = a->j0; j < a->j1; j++) {
        decode_row(a->type, a->w + (size_t)j * a->w_rb, nb, a->scratch);
        for (int64_t r = 0; r < a->n_rows; r += IQ_RG) {
            const int nr = a->n_rows - r < IQ_RG ? (int)(a->n_rows - r) : IQ_RG;
            const kern_q8k *x[IQ_RG];
            float acc[IQ_RG];
            for (int rr = 0; rr < nr; rr++) x[rr] = (const kern_q8k *)(a->xq + (size_t)(r + rr) * a->xq_rb);
            rows_dot(a->scratch, nb, x, nr, acc);
            for (int rr = 0; rr < nr; rr++) a->y[(r + rr) * a->ldy + j] = acc[rr];
        }
    }
    return 1;
}
