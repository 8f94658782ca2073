/*
 * kernels_avx512.c — the AVX-512 (F, BW, VL) table: dot product and F16 / BF16
 * dequantisation 16 lanes wide; the block types reuse the AVX2 code (every
 * AVX-512 CPU kern_isa_detect() accepts also has AVX2, FMA and F16C), and the
 * integer products of q8.h with VNNI (vpdpbusd) when the CPU has it.
 *
 * Dot reduction order (fixed by n alone): four 16-lane accumulators take elements
 * i mod 64; remaining full 16-lane groups go into accumulator 0, the last n mod 16
 * elements (masked load) into accumulator 1; then (a0 + a1) + (a2 + a3), folded
 * 16 -> 8 -> 4 -> 2 -> 1 lanes.
 */
#include "kernels/isa_target.h"
#include "base/cpu.h"
#include "kernels/fmm_amx.h"
#include "kernels/qgemm_amx.h"
#include "kernels/qgemm_iq.h"
#include "kernels/kernels_int.h"
#include "kernels/q8_lowbit.h"
#include "kernels/r16.h"
#include "kernels/qgemm_r16_mid.h"
#include "kernels/r16_pack.h"
#include "kernels/vnni_avx512.h"
#include "formats/quant.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AVX512 KVI_TARGET_AVX512

AVX512 static float hsum512(__m512 v)
{
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX512 static float dot_avx512(const float *a, const float *b, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a1);
    }
    return hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Six dot_avx512 at once (n % 64 == 0): each output keeps its own four
 * accumulators over the same element order, so the bits are dot_avx512's. */
AVX512 static void dot_3x2_avx512(const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n,
                                  float out[6])
{
    __m512 a[6][4];
    for (int o = 0; o < 6; o++)
        for (int k = 0; k < 4; k++) a[o][k] = _mm512_setzero_ps();
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *w0 = w, *w1 = w + ldw;
    for (int64_t i = 0; i < n; i += 64)
        for (int k = 0; k < 4; k++) {
            const int64_t e = i + 16 * k;
            const __m512 v0 = _mm512_loadu_ps(w0 + e), v1 = _mm512_loadu_ps(w1 + e);
            __m512 u = _mm512_loadu_ps(x0 + e);
            a[0][k] = _mm512_fmadd_ps(u, v0, a[0][k]);
            a[1][k] = _mm512_fmadd_ps(u, v1, a[1][k]);
            u = _mm512_loadu_ps(x1 + e);
            a[2][k] = _mm512_fmadd_ps(u, v0, a[2][k]);
            a[3][k] = _mm512_fmadd_ps(u, v1, a[3][k]);
            u = _mm512_loadu_ps(x2 + e);
            a[4][k] = _mm512_fmadd_ps(u, v0, a[4][k]);
            a[5][k] = _mm512_fmadd_ps(u, v1, a[5][k]);
        }
    for (int o = 0; o < 6; o++)
        out[o] = hsum512(_mm512_add_ps(_mm512_add_ps(a[o][0], a[o][1]), _mm512_add_ps(a[o][2], a[o][3])));
}

AVX512 static void deq_f16(const uint8_t *p, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i))));
    for (; i < n; i++) {
        quant_f16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = quant_f16_to_f32(h);
    }
}

AVX512 static void deq_bf16(const uint8_t *p, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    for (; i < n; i++) {
        quant_bf16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = quant_bf16_to_f32(h);
    }
}

AVX512 static int dequant_avx512(kvi_type t, const void *src, float *dst, int64_t n)
{
    if (n <= 0) return 0;
    switch (t) {
    case KVI_TYPE_F16: deq_f16(src, dst, n); return 1;
    case KVI_TYPE_BF16: deq_bf16(src, dst, n); return 1;
    default: return kern_dequant_avx2(t, src, dst, n);
    }
}

/* ---- integer products with VNNI (q8.h contract) ------------------
 *
 * A tile is 16 weight rows; lane l of every vector belongs to weight row j0 + l.
 * For a 32-input block, W[k] (k = 0..7) holds in lane l the four weight levels
 * 4k..4k+3 of row l as unsigned bytes (Q8_0: q + 128; Q4_0: the nibble, q + 8;
 * IQ4_NL / MXFP4: the nibble's level + 128, by vpshufb), so
 * one vpdpbusd with the broadcast activation quants 4k..4k+3 adds four products
 * to each row's sum; starting the sum at -offset * sum(x quants) makes it the exact
 * isum. Then acc = fma(dw * dx, (float)isum, acc), lane by lane: the contract's
 * steps (dw: the f16 d as float, or MXFP4's 2^(e - 128), kern_e8m0_half_ps).
 *
 * Q8_0 / Q4_0 / IQ4_NL / MXFP4 with many rows (qgemm_packed): the inputs are walked in chunks of
 * at most KC blocks; for each chunk, each pair of 16-row tiles (32 outputs) is
 * packed into the scratch, per block PACK2 bytes: for k = 0..7 the two tiles'
 * W[k] side by side (128 bytes), then their dw (2 x 16 f32). Every group of RT
 * activation rows then runs over the packed chunk (L1-resident). An output's
 * accumulator goes through y between chunks (an exact f32 store and load), so
 * each output still takes its blocks in order 0, 1, ...: the contract. A chunk of
 * every activation row (n_rows * KC * 48 bytes) stays in L2 while all tiles use it.
 *
 * Register tile (rt_kernel): 32 outputs (nh = 2 tiles; 1 for a last odd tile) x
 * nr <= RT rows, fully unrolled: per tile and row an int32 sum and an f32
 * accumulator (4 * RT zmm), W[k] of both tiles (2), one broadcast activation word
 * (used by both tiles' vpdpbusd), dw. The k loop is outside the row loop, so the
 * 2 * RT sums are independent vpdpbusd chains in flight together. Each sum starts
 * at its row's correction, read from cor[rr][b] (built once per chunk for every
 * row by cor_build, in a buffer allocated per call; the kernel declines without it);
 * dx is a broadcast operand of the multiply. Per 32-input block and row:
 * 16 vpdpbusd + 2 x (cvt, mul, fma), and 8 + 3 activation loads.
 */
#define RT 6       /* activation rows per register tile */
#define KC 32      /* at most this many 32-input blocks per chunk */
#define PACK2 1152 /* one packed block of a tile pair */

/* Block at byte offset off of the 16 rows p[] into W[8] and dw. */
VNNI_INLINE void load_block(kvi_type t, const tile16 *tl, size_t off, __m512i W[8], __m512 *dw)
{
    if (t == KVI_TYPE_Q8_0) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        transpose16x4(tl->p, off + 2, W);
        transpose16x4(tl->p, off + 18, W + 4);
        for (int k = 0; k < 8; k++) W[k] = _mm512_xor_si512(W[k], flip);
    } else { /* Q4_0 / IQ4_NL / MXFP4: low nibbles are inputs 0..15, high nibbles 16..31 */
        const bool mx = t == KVI_TYPE_MXFP4; /* one exponent byte, not an f16 d, before the quants */
        const __m512i lo = _mm512_set1_epi8(0x0f), lut = mx ? kern_mxfp4_lut() : kern_iq4nl_lut();
        __m512i R[4];
        transpose16x4(tl->p, off + (mx ? 1 : 2), R);
        for (int k = 0; k < 4; k++) {
            W[k] = _mm512_and_si512(R[k], lo);
            W[k + 4] = _mm512_and_si512(_mm512_srli_epi16(R[k], 4), lo);
        }
        if (t != KVI_TYPE_Q4_0) /* nibbles to levels + 128 */
            for (int k = 0; k < 8; k++) W[k] = _mm512_shuffle_epi8(lut, W[k]);
        if (mx) {
            *dw = scales16_e8m0(tl, off);
            return;
        }
    }
    *dw = scales16(tl, off, 0);
}

/* acc[h * RT + rr] += blocks b < nk of rows xr[rr] (each pointing at the chunk's
 * first block) times tiles h < nh of the packed chunk wp; corrections
 * cor[rr * KC + b] (one broadcast load, the second tile's sum a register copy).
 * The same block of the next row group (pf bytes further) is prefetched into L1. */
VNNI_INLINE void rt_kernel(const uint8_t *wp, const int32_t *cor, const uint8_t *const *xr, int64_t nk,
                           const int nh, const int nr, __m512 *acc, size_t pf)
{
    for (int64_t b = 0; b < nk; b++) {
#pragma GCC unroll 16
        for (int rr = 0; rr < nr; rr++)
            _mm_prefetch((const char *)xr[rr] + (size_t)b * sizeof(kern_q8a) + pf, _MM_HINT_T0);
        const uint8_t *q = wp + (size_t)b * PACK2;
        const size_t o = (size_t)b * sizeof(kern_q8a);
        __m512i s[2 * RT]; /* [h * RT + rr] */
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++)
#pragma GCC unroll 16
            for (int rr = 0; rr < nr; rr++) s[h * RT + rr] = _mm512_set1_epi32(cor[rr * KC + b]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i W[2];
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++) W[h] = _mm512_load_si512((const void *)(q + 128 * k + 64 * h));
#pragma GCC unroll 16
            for (int rr = 0; rr < nr; rr++) {
                const __m512i xv = _mm512_set1_epi32(load_i32((const int8_t *)xr[rr] + o + 4 * k));
#pragma GCC unroll 2
                for (int h = 0; h < nh; h++) s[h * RT + rr] = _mm512_dpbusd_epi32(s[h * RT + rr], W[h], xv);
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            const __m512 dw = _mm512_load_ps((const float *)(q + 1024 + 64 * h));
#pragma GCC unroll 16
            for (int rr = 0; rr < nr; rr++) {
                const __m512 dx = _mm512_set1_ps(((const kern_q8a *)(xr[rr] + o))->d);
                acc[h * RT + rr] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(s[h * RT + rr]),
                                                   acc[h * RT + rr]);
            }
        }
    }
}

/* rt_kernel for nh tiles (masks m[h]) and n rows: accumulators from y (0 in the
 * first chunk), back to y. One instance per (nh, n), so that every loop above
 * unrolls. */
VNNI_INLINE void rt_run(const uint8_t *wp, const int32_t *cor, const uint8_t *const *xr, int64_t nk,
                        const int nh, const int n, float *const *yr, bool first, const __mmask16 *m,
                        size_t pf)
{
    __m512 acc[2 * RT];
#pragma GCC unroll 2
    for (int h = 0; h < nh; h++)
#pragma GCC unroll 16
        for (int rr = 0; rr < n; rr++)
            acc[h * RT + rr] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[h], yr[rr] + 16 * h);
    rt_kernel(wp, cor, xr, nk, nh, n, acc, pf);
#pragma GCC unroll 2
    for (int h = 0; h < nh; h++)
#pragma GCC unroll 16
        for (int rr = 0; rr < n; rr++) _mm512_mask_storeu_ps(yr[rr] + 16 * h, m[h], acc[h * RT + rr]);
}

#define RT_CASE(n)                                              \
    case n:                                                     \
        if (nh == 2)                                            \
            rt_run(wp, cor, xr, nk, 2, n, yr, kb0 == 0, m, pf); \
        else                                                    \
            rt_run(wp, cor, xr, nk, 1, n, yr, kb0 == 0, m, pf); \
        break;

/* The corrections -off * sum(x quants) of nk blocks of one activation row (x: its
 * first block) into dst[b]: the sums (48 bytes = 12 words apart) 16 blocks at a
 * time by a gather. */
VNNI_INLINE void cor_build(const uint8_t *x, int64_t nk, int32_t off, int32_t *dst)
{
    const __m512i gidx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int)(sizeof(kern_q8a) / 4)));
    const int32_t *sums = &((const kern_q8a *)x)->sum;
    for (int64_t b = 0; b < nk; b += 16) {
        const __mmask16 bm = nk - b >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nk - b)) - 1);
        __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), bm, gidx, sums + 12 * b, 4);
        v = _mm512_mullo_epi32(v, _mm512_set1_epi32(-off));
        _mm512_mask_storeu_epi32(dst + b, bm, v);
    }
}

/* Rows r0 .. r0 + nr - 1 (nr <= RT) times the nh packed tiles of outputs jt ..
 * (masks m), chunk kb0 .. kb0 + nk - 1. cor_rows: the chunk's corrections of every
 * row, [n_rows][KC] (cor_build). */
VNNI static void rows_chunk(const kern_qgemm_args *a, const uint8_t *wp, const int32_t *cor_rows, int64_t jt,
                            int nh, const __mmask16 m[2], int64_t r0, int nr, int64_t kb0, int64_t nk)
{
    const int32_t *cor = cor_rows + r0 * KC; /* [RT][KC] -off * sum(x quants) */
    const uint8_t *xr[RT];                   /* row rr's block kb0 */
    float *yr[RT];                           /* row rr's output jt */
    const size_t pf = RT * a->xq_rb; /* to the next row group (a prefetch past the last row is harmless) */
    /* the next row group's accumulators, read back from y after this group (later chunks) */
    if (kb0 > 0)
        for (int64_t r = r0 + RT; r < r0 + 2 * RT && r < a->n_rows; r++)
            for (int h = 0; h < nh; h++)
                _mm_prefetch((const char *)(a->y + r * a->ldy + jt + 16 * h), _MM_HINT_T0);
    /* and its corrections (RT rows x KC words) */
    const int64_t next = a->n_rows - r0 - RT < RT ? a->n_rows - r0 - RT : RT; /* rows of the next group */
    for (int64_t l = 0; l < next * (int64_t)(KC * sizeof(int32_t) / 64); l++)
        _mm_prefetch((const char *)(cor + RT * KC) + 64 * l, _MM_HINT_T0);
    for (int rr = 0; rr < nr; rr++) {
        xr[rr] = a->xq + (size_t)(r0 + rr) * a->xq_rb + (size_t)kb0 * sizeof(kern_q8a);
        yr[rr] = a->y + (r0 + rr) * a->ldy + jt;
    }
    switch (nr) {
        RT_CASE(1)
        RT_CASE(2)
        RT_CASE(3)
        RT_CASE(4)
        RT_CASE(5)
        RT_CASE(6)
    default: break;
    }
}

/* Blocks kb0 .. kb0 + nk - 1 of tile h (outputs jt + 16h .., nv of them) from the
 * rows layout into the packed chunk. */
VNNI static void pack_rows_tile(const kern_qgemm_args *a, int64_t jt, int h, int nv, int64_t kb0, int64_t nk,
                                uint8_t *packed)
{
    const size_t bb = quant_block_bytes(a->type);
    tile16 tl;
    tile_init(&tl, a, jt + 16 * h, nv);
    for (int64_t b = 0; b < nk; b++) {
        __m512i W[8];
        __m512 dw;
        load_block(a->type, &tl, (size_t)(kb0 + b) * bb, W, &dw);
        uint8_t *q = packed + (size_t)b * PACK2 + 64 * (size_t)h;
        for (int k = 0; k < 8; k++) _mm512_store_si512((void *)(q + 128 * k), W[k]);
        _mm512_store_ps((float *)(q + 1024), dw);
    }
}

/* The same from the R16 layout (r16_pack.h): the tile's vectors are already
 * transposed; Q4_0 / IQ4_NL / MXFP4 nibbles are split (and looked up) as load_block
 * does. */
VNNI static void pack_r16_tile(const kern_qgemm_args *a, int64_t jt, int h, int64_t kb0, int64_t nk,
                               uint8_t *packed)
{
    const bool q8 = a->type == KVI_TYPE_Q8_0, mx = a->type == KVI_TYPE_MXFP4;
    const size_t sc = mx ? 32 : 64, /* bytes of a pair's scales (16 E8M0 bytes or f16 per block) */
        qbytes = q8 ? 512 : 256,    /* bytes per block's quants */
        pair = sc + 2 * qbytes;     /* bytes per block pair */
    const uint8_t *tile = a->w + (size_t)(jt + 16 * h) * a->w_rb;
    const __m512i lo = _mm512_set1_epi8(0x0f), lut = mx ? kern_mxfp4_lut() : kern_iq4nl_lut();
    const bool nl = a->type == KVI_TYPE_IQ4_NL || mx;
    for (int64_t b = 0; b < nk; b++) {
        const int64_t blk = kb0 + b;
        const uint8_t *p = tile + (size_t)(blk / 2) * pair;
        const uint8_t *qs = p + sc + (size_t)(blk & 1) * qbytes;
        uint8_t *q = packed + (size_t)b * PACK2 + 64 * (size_t)h;
        if (q8) {
            for (int k = 0; k < 8; k++)
                _mm512_store_si512((void *)(q + 128 * k), _mm512_loadu_si512((const void *)(qs + 64 * k)));
        } else {
            for (int k = 0; k < 4; k++) {
                const __m512i r = _mm512_loadu_si512((const void *)(qs + 64 * k));
                __m512i wl = _mm512_and_si512(r, lo), wh = _mm512_and_si512(_mm512_srli_epi16(r, 4), lo);
                if (nl) {
                    wl = _mm512_shuffle_epi8(lut, wl);
                    wh = _mm512_shuffle_epi8(lut, wh);
                }
                _mm512_store_si512((void *)(q + 128 * k), wl);
                _mm512_store_si512((void *)(q + 128 * (k + 4)), wh);
            }
        }
        if (mx) {
            _mm512_store_ps((float *)(q + 1024), kern_e8m0_half16(p + 16 * (size_t)(blk & 1)));
        } else {
            const __m256i d16 = _mm256_loadu_si256((const __m256i *)(p + 32 * (size_t)(blk & 1)));
            _mm512_store_ps((float *)(q + 1024), _mm512_cvtph_ps(d16));
        }
    }
}

/* Q8_0 / Q4_0 / IQ4_NL / MXFP4 with the scratch (KVI_QGEMM_SCRATCH(n_in) bytes), any
 * number of rows (AMX takes only Q8_0 / Q4_0, kern_qgemm_amx_q8 declines the others);
 * r16: a->w is in the R16 layout (j0, j1 multiples of 16). Returns 0 (nothing
 * written) when the corrections' buffer cannot be allocated. */
VNNI static int qgemm_packed(const kern_qgemm_args *a, uint8_t *packed, bool r16)
{
    const int64_t nb = a->n_in / 32;
    const int64_t kc_fit = (int64_t)(KVI_QGEMM_SCRATCH(a->n_in) / PACK2); /* >= 1 */
    const int64_t kc = kc_fit < KC ? kc_fit : KC;
    const int32_t off = kern_q8_level_offset(a->type);
    /* [n_rows][KC]: every row's corrections of the chunk, built once per chunk
     * (not once per tile pair and row group) */
    int32_t *cor_rows = a->n_rows <= (int64_t)(SIZE_MAX / (KC * sizeof(int32_t)))
                            ? malloc((size_t)a->n_rows * KC * sizeof(int32_t))
                            : NULL;
    if (!cor_rows) return 0;
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kc) {
        const int64_t nk = nb - kb0 < kc ? nb - kb0 : kc;
        for (int64_t r = 0; r < a->n_rows; r++)
            cor_build(a->xq + (size_t)r * a->xq_rb + (size_t)kb0 * sizeof(kern_q8a), nk, off,
                      cor_rows + r * KC);
        for (int64_t jt = a->j0; jt < a->j1; jt += 32) {
            const int64_t left = a->j1 - jt;
            const int nh = left > 16 ? 2 : 1;
            __mmask16 m[2] = { 0, 0 };
            for (int h = 0; h < nh; h++) {
                const int nv = left - 16 * h < 16 ? (int)(left - 16 * h) : 16;
                m[h] = (__mmask16)((1u << nv) - 1);
                if (r16)
                    pack_r16_tile(a, jt, h, kb0, nk, packed);
                else
                    pack_rows_tile(a, jt, h, nv, kb0, nk, packed);
            }
            for (int64_t r = 0; r < a->n_rows; r += RT)
                rows_chunk(a, packed, cor_rows, jt, nh, m, r, a->n_rows - r < RT ? (int)(a->n_rows - r) : RT,
                           kb0, nk);
        }
    }
    free(cor_rows);
    return 1;
}

static int qgemm_r16k_many(const kern_qgemm_args *a);

int kern_qgemm_r16_many_avx512(const kern_qgemm_args *a)
{
    if (!kern_has_vnni() || !a->scratch) return 0;
    if (a->type == KVI_TYPE_Q4_K || a->type == KVI_TYPE_Q6_K) return qgemm_r16k_many(a);
    if (a->type != KVI_TYPE_Q8_0 && a->type != KVI_TYPE_Q4_0 && a->type != KVI_TYPE_IQ4_NL &&
        a->type != KVI_TYPE_MXFP4)
        return 0;
    if (a->n_in % 64 != 0 || a->j0 % 16 != 0 || a->j1 % 16 != 0 || a->n_rows < 1) return 0;
    return qgemm_packed(a, a->scratch, true);
}

int kern_has_vnni(void) { return cpu_features()->avx512_vnni; }

/* ---- every other integer type: tiles unpacked, then packed -----------------
 *
 * The tile's 16 rows are unpacked and transposed with SIMD into the packed
 * layout: per 32 inputs ("chunk" c), GEN_BYTES bytes: W[0..7] (as above), then 16-lane vectors
 * sc_a, sc_b (i32 sub-block scales: Q4_K/Q5_K sub-block c mod 8; Q6_K sub-blocks
 * 2(c mod 8) and 2(c mod 8)+1), mn (i32 mins), fd (f32 d) and fm (f32 m or dmin).
 * The K-quant sums isum/msum are exact int32 (vpmulld of scale and sub-block dot).
 */
#define GEN_BYTES 832
#define RBK 6 /* input rows per register tile, K-quants */
#define RB 8  /* input rows per register tile, other legacy types */

/* ---- SIMD packing of a 16-row tile into the layout above ---------------- */

/* Bits 0..3 of each 32-bit lane to bit 4 of its bytes 0..3 (b_i * 2^(7m) never collide). */
VNNI_INLINE __m512i spread4_bit4(__m512i v)
{
    const __m512i t =
        _mm512_mullo_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xf)), _mm512_set1_epi32(0x00204081));
    return _mm512_slli_epi32(_mm512_and_si512(t, _mm512_set1_epi32(0x01010101)), 4);
}

VNNI_INLINE void store_chunk(uint8_t *g, const __m512i W[8])
{
    for (int k = 0; k < 8; k++) _mm512_store_si512((void *)(g + 64 * k), W[k]);
}

/* Q4_1 Q5_0 Q5_1 (Q4_0/Q8_0 use load_block): levels, d and m. */
VNNI static void pack_legacy(kvi_type t, const tile16 *tl, int64_t nb, uint8_t *packed)
{
    const size_t bb = quant_block_bytes(t);
    const size_t qs_off = t == KVI_TYPE_Q4_1 ? 4 : t == KVI_TYPE_Q5_0 ? 6 : 8;
    const size_t qh_off = t == KVI_TYPE_Q5_0 ? 2 : 4;
    const bool five = t != KVI_TYPE_Q4_1, has_m = t != KVI_TYPE_Q5_0;
    const __m512i lo = _mm512_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * bb;
        __m512i R[4], W[8];
        transpose16x4(tl->p, o + qs_off, R);
        for (int k = 0; k < 4; k++) {
            W[k] = _mm512_and_si512(R[k], lo);
            W[k + 4] = _mm512_and_si512(_mm512_srli_epi16(R[k], 4), lo);
        }
        if (five) {
            const __m512i qh = gather16_u32(tl, o + qh_off);
            for (int k = 0; k < 8; k++)
                W[k] = _mm512_or_si512(W[k], spread4_bit4(_mm512_srli_epi32(qh, (unsigned)(4 * k))));
        }
        uint8_t *g = packed + (size_t)b * GEN_BYTES;
        store_chunk(g, W);
        _mm512_store_ps((float *)(g + 704), scales16(tl, o, 0));
        _mm512_store_ps((float *)(g + 768), has_m ? scales16(tl, o + 2, 0) : _mm512_setzero_ps());
    }
}

/* Q4_K, and Q5_K (five: the fifth bit of input 64i+l / 64i+32+l is bit 2i / 2i+1 of
 * qh[l]); the two share d, dmin and the 6-bit scales. */
VNNI static void pack_q4k(const tile16 *tl, int64_t nsb, bool five, uint8_t *packed)
{
    const size_t bsz = five ? sizeof(block_q5_K) : sizeof(block_q4_K), qs0 = five ? 48 : 16;
    const __m512i one = _mm512_set1_epi8(1);
    const __m512i lo = _mm512_set1_epi8(0x0f), m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(0xf);
    const __m512i m2 = _mm512_set1_epi32(3);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const size_t o = (size_t)sb * bsz;
        uint8_t *g0 = packed + (size_t)(sb * 8) * GEN_BYTES;
        __m512i QH[8];
        if (five) {
            transpose16x4(tl->p, o + 16, QH);
            transpose16x4(tl->p, o + 32, QH + 4);
        }
        for (int i = 0; i < 4; i++) {
            __m512i R[8], W[8];
            transpose16x4(tl->p, o + qs0 + 32 * (size_t)i, R);
            transpose16x4(tl->p, o + qs0 + 32 * (size_t)i + 16, R + 4);
            for (int k = 0; k < 8; k++) {
                W[k] = _mm512_and_si512(R[k], lo);
                if (five)
                    W[k] = _mm512_or_si512(
                        W[k], _mm512_slli_epi16(
                                  _mm512_and_si512(_mm512_srli_epi16(QH[k], (unsigned)(2 * i)), one), 4));
            }
            store_chunk(g0 + (size_t)(2 * i) * GEN_BYTES, W);
            for (int k = 0; k < 8; k++) {
                W[k] = _mm512_and_si512(_mm512_srli_epi16(R[k], 4), lo);
                if (five)
                    W[k] = _mm512_or_si512(
                        W[k], _mm512_slli_epi16(
                                  _mm512_and_si512(_mm512_srli_epi16(QH[k], (unsigned)(2 * i + 1)), one), 4));
            }
            store_chunk(g0 + (size_t)(2 * i + 1) * GEN_BYTES, W);
        }
        const __m512i s0 = gather16_u32(tl, o + 4), s1 = gather16_u32(tl, o + 8),
                      s2 = gather16_u32(tl, o + 12);
        for (int j = 0; j < 8; j++) {
            const unsigned sh = 8u * (unsigned)(j & 3);
            __m512i sc, mn;
            if (j < 4) {
                sc = _mm512_and_si512(_mm512_srli_epi32(s0, sh), m6);
                mn = _mm512_and_si512(_mm512_srli_epi32(s1, sh), m6);
            } else {
                const __m512i b2 = _mm512_srli_epi32(s2, sh);
                sc = _mm512_or_si512(
                    _mm512_and_si512(b2, m4),
                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, sh + 6), m2), 4));
                mn = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi32(b2, 4), m4),
                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, sh + 6), m2), 4));
            }
            uint8_t *g = g0 + (size_t)j * GEN_BYTES;
            _mm512_store_si512((void *)(g + 512), sc);
            _mm512_store_si512((void *)(g + 576), _mm512_setzero_si512());
            _mm512_store_si512((void *)(g + 640), mn);
        }
        _mm512_store_ps((float *)(g0 + 704), scales16(tl, o, 0));
        _mm512_store_ps((float *)(g0 + 768), scales16(tl, o + 2, 0));
    }
}

VNNI static void pack_q6k(const tile16 *tl, int64_t nsb, uint8_t *packed)
{
    const __m512i lo = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(3);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const size_t o = (size_t)sb * sizeof(block_q6_K);
        uint8_t *g0 = packed + (size_t)(sb * 8) * GEN_BYTES;
        for (int h = 0; h < 2; h++) {
            __m512i QA[8], QB[8], QH[8];
            transpose16x4(tl->p, o + 64 * (size_t)h, QA);
            transpose16x4(tl->p, o + 64 * (size_t)h + 16, QA + 4);
            transpose16x4(tl->p, o + 64 * (size_t)h + 32, QB);
            transpose16x4(tl->p, o + 64 * (size_t)h + 48, QB + 4);
            transpose16x4(tl->p, o + 128 + 32 * (size_t)h, QH);
            transpose16x4(tl->p, o + 128 + 32 * (size_t)h + 16, QH + 4);
            for (int q = 0; q < 4; q++) {
                __m512i W[8];
                for (int k = 0; k < 8; k++) {
                    const __m512i src = (q & 1) ? QB[k] : QA[k];
                    const __m512i l4 = (q >> 1) ? _mm512_and_si512(_mm512_srli_epi16(src, 4), lo)
                                                : _mm512_and_si512(src, lo);
                    const __m512i h2 = _mm512_and_si512(_mm512_srli_epi16(QH[k], (unsigned)(2 * q)), m3);
                    W[k] = _mm512_or_si512(l4, _mm512_slli_epi16(h2, 4));
                }
                store_chunk(g0 + (size_t)(4 * h + q) * GEN_BYTES, W);
            }
        }
        __m512i S[4];
        transpose16x4(tl->p, o + 192, S); /* lane l of S[k]: scales 4k..4k+3 of row l */
        for (int c = 0; c < 8; c++) {
            const __m512i v = S[c / 2];
            const unsigned ba = 8u * (unsigned)((2 * c) & 3), bb2 = ba + 8;
            uint8_t *g = g0 + (size_t)c * GEN_BYTES;
            _mm512_store_si512((void *)(g + 512), _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - ba), 24));
            _mm512_store_si512((void *)(g + 576), _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - bb2), 24));
            _mm512_store_si512((void *)(g + 640), _mm512_setzero_si512());
        }
        _mm512_store_ps((float *)(g0 + 704), scales16(tl, o + 208, 1));
        _mm512_store_ps((float *)(g0 + 768), _mm512_setzero_ps());
    }
}

/* IQ4_XS: sub-block ib of super-block sb is chunk 8 sb + ib; its levels are the
 * codebook's + 128 (the sum starts at -128 * sum32, genk_kernel), its scale ls - 32
 * (signed, i32 lanes at +512); no min. */
VNNI static void pack_iq4xs(const tile16 *tl, int64_t nsb, uint8_t *packed)
{
    const __m512i lo = _mm512_set1_epi8(0x0f), lut = kern_iq4nl_lut();
    const __m512i m4 = _mm512_set1_epi32(0xf), m2 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const size_t o = (size_t)sb * sizeof(block_iq4_xs);
        uint8_t *g0 = packed + (size_t)(sb * 8) * GEN_BYTES;
        const __m512i sh = _mm512_srli_epi32(gather16_u32(tl, o), 16), sl = gather16_u32(tl, o + 4);
        for (int ib = 0; ib < 8; ib++) {
            __m512i R[4], W[8];
            transpose16x4(tl->p, o + 8 + 16 * (size_t)ib, R);
            for (int k = 0; k < 4; k++) {
                W[k] = _mm512_shuffle_epi8(lut, _mm512_and_si512(R[k], lo));
                W[k + 4] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(R[k], 4), lo));
            }
            uint8_t *g = g0 + (size_t)ib * GEN_BYTES;
            store_chunk(g, W);
            const __m512i ls = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(sl, (unsigned)(4 * ib)), m4),
                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, (unsigned)(2 * ib)), m2), 4));
            _mm512_store_si512((void *)(g + 512), _mm512_sub_epi32(ls, k32));
            _mm512_store_si512((void *)(g + 576), _mm512_setzero_si512());
            _mm512_store_si512((void *)(g + 640), _mm512_setzero_si512());
        }
        _mm512_store_ps((float *)(g0 + 704), scales16(tl, o, 0));
        _mm512_store_ps((float *)(g0 + 768), _mm512_setzero_ps());
    }
}

/* Legacy types (_0 / _1) from the packed tile. */
VNNI static void gen_rows_legacy(const kern_qgemm_args *a, const uint8_t *packed, int64_t jt, __mmask16 msk,
                                 int64_t r0, int nr)
{
    const int32_t off = kern_q8_level_offset(a->type);
    const bool has_m = a->type == KVI_TYPE_Q4_1 || a->type == KVI_TYPE_Q5_1;
    const int64_t nc = a->n_in / 32;
    const kern_q8a *x[RB];
    __m512 acc[RB];
    for (int rr = 0; rr < RB; rr++) {
        x[rr] = (const kern_q8a *)(a->xq + (size_t)(r0 + (rr < nr ? rr : 0)) * a->xq_rb);
        acc[rr] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < nc; c++) {
        const uint8_t *g = packed + (size_t)c * GEN_BYTES;
        __m512i W[8];
        for (int k = 0; k < 8; k++) W[k] = _mm512_load_si512((const void *)(g + 64 * k));
        const __m512 fd = _mm512_load_ps((const float *)(g + 704)),
                     fm = _mm512_load_ps((const float *)(g + 768));
        for (int rr = 0; rr < nr; rr++) {
            const kern_q8a *xb = x[rr] + c;
            __m512i s = _mm512_set1_epi32(-off * xb->sum), s2 = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                s = _mm512_dpbusd_epi32(s, W[k], _mm512_set1_epi32(load_i32(xb->qs + 4 * k)));
                s2 = _mm512_dpbusd_epi32(s2, W[k + 4], _mm512_set1_epi32(load_i32(xb->qs + 16 + 4 * k)));
            }
            s = _mm512_add_epi32(s, s2);
            acc[rr] =
                _mm512_fmadd_ps(_mm512_mul_ps(fd, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(s), acc[rr]);
            if (has_m) acc[rr] = _mm512_fmadd_ps(fm, _mm512_set1_ps(xb->s), acc[rr]);
        }
    }
    for (int rr = 0; rr < nr; rr++) _mm512_mask_storeu_ps(a->y + (r0 + rr) * a->ldy + jt, msk, acc[rr]);
}

/* K-quants from the packed tile: acc[rr] for the nr rows x[rr]. The chunk's
 * vpdpbusd run k-outer over the rows, so the rows' chains are in flight together;
 * the integer sums are exact (their order does not matter), the float steps are
 * the contract's. kind: GK_Q4K (Q4_K / Q5_K: scale and min per 32), GK_Q6K (two
 * scales per 32, levels offset 32), GK_IQ4XS (one signed scale per 32, levels
 * offset 128, no min). One instance per (nr, kind), so that every loop unrolls. */
#define GK_Q4K 0
#define GK_Q6K 1
#define GK_IQ4XS 2
VNNI_INLINE void genk_kernel(const uint8_t *packed, int64_t nsb, const kern_q8k *const *x, const int nr,
                             const int kind, __m512 *acc)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const bool q6 = kind == GK_Q6K, has_min = kind == GK_Q4K;
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m512i isum[RBK], msum[RBK];
#pragma GCC unroll 16
        for (int rr = 0; rr < nr; rr++) isum[rr] = msum[rr] = _mm512_setzero_si512();
        for (int c = 0; c < 8; c++) {
            const uint8_t *g = packed + (size_t)(sb * 8 + c) * GEN_BYTES;
            const __m512i sa = _mm512_load_si512((const void *)(g + 512));
            __m512i s0[RBK], s1[RBK];
#pragma GCC unroll 16
            for (int rr = 0; rr < nr; rr++) {
                s0[rr] = q6                 ? _mm512_set1_epi32(-32 * x[rr][sb].sum16[2 * c])
                         : kind == GK_IQ4XS ? _mm512_set1_epi32(-128 * x[rr][sb].sum32[c])
                                            : _mm512_setzero_si512();
                if (q6) s1[rr] = _mm512_set1_epi32(-32 * x[rr][sb].sum16[2 * c + 1]);
            }
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i W = _mm512_load_si512((const void *)(g + 64 * k));
#pragma GCC unroll 16
                for (int rr = 0; rr < nr; rr++) {
                    const __m512i xv = _mm512_set1_epi32(load_i32(x[rr][sb].qs + 32 * c + 4 * k));
                    if (q6 && k >= 4)
                        s1[rr] = _mm512_dpbusd_epi32(s1[rr], W, xv);
                    else
                        s0[rr] = _mm512_dpbusd_epi32(s0[rr], W, xv);
                }
            }
            if (q6) {
                const __m512i sbv = _mm512_load_si512((const void *)(g + 576));
#pragma GCC unroll 16
                for (int rr = 0; rr < nr; rr++)
                    isum[rr] = _mm512_add_epi32(isum[rr], _mm512_add_epi32(_mm512_mullo_epi32(sa, s0[rr]),
                                                                           _mm512_mullo_epi32(sbv, s1[rr])));
            } else if (has_min) {
                const __m512i mn = _mm512_load_si512((const void *)(g + 640));
#pragma GCC unroll 16
                for (int rr = 0; rr < nr; rr++) {
                    isum[rr] = _mm512_add_epi32(isum[rr], _mm512_mullo_epi32(sa, s0[rr]));
                    msum[rr] = _mm512_add_epi32(
                        msum[rr], _mm512_mullo_epi32(mn, _mm512_set1_epi32(x[rr][sb].sum32[c])));
                }
            } else {
#pragma GCC unroll 16
                for (int rr = 0; rr < nr; rr++)
                    isum[rr] = _mm512_add_epi32(isum[rr], _mm512_mullo_epi32(sa, s0[rr]));
            }
        }
        const uint8_t *g0 = packed + (size_t)(sb * 8) * GEN_BYTES;
        const __m512 fd = _mm512_load_ps((const float *)(g0 + 704)),
                     fm = _mm512_load_ps((const float *)(g0 + 768));
#pragma GCC unroll 16
        for (int rr = 0; rr < nr; rr++) {
            const __m512 dx = _mm512_set1_ps(x[rr][sb].d);
            acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(fd, dx), _mm512_cvtepi32_ps(isum[rr]), acc[rr]);
            if (has_min)
                acc[rr] = _mm512_fmadd_ps(
                    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(fm, dx)), sign)),
                    _mm512_cvtepi32_ps(msum[rr]), acc[rr]);
        }
    }
}

#define GENK_CASE(n)                                                  \
    case n:                                                           \
        if (kind == GK_Q6K)                                           \
            genk_kernel(packed, a->n_in / QK_K, x, n, GK_Q6K, acc);   \
        else if (kind == GK_IQ4XS)                                    \
            genk_kernel(packed, a->n_in / QK_K, x, n, GK_IQ4XS, acc); \
        else                                                          \
            genk_kernel(packed, a->n_in / QK_K, x, n, GK_Q4K, acc);   \
        break;

/* K-quants from the packed tile, rows r0 .. r0 + nr - 1 (nr <= RBK). */
VNNI static void gen_rows_k(const kern_qgemm_args *a, const uint8_t *packed, int64_t jt, __mmask16 msk,
                            int64_t r0, int nr)
{
    const int kind = a->type == KVI_TYPE_Q6_K ? GK_Q6K : a->type == KVI_TYPE_IQ4_XS ? GK_IQ4XS : GK_Q4K;
    const kern_q8k *x[RBK];
    __m512 acc[RBK];
    for (int rr = 0; rr < RBK; rr++) {
        x[rr] = (const kern_q8k *)(a->xq + (size_t)(r0 + (rr < nr ? rr : 0)) * a->xq_rb);
        acc[rr] = _mm512_setzero_ps();
    }
    switch (nr) {
        GENK_CASE(1)
        GENK_CASE(2)
        GENK_CASE(3)
        GENK_CASE(4)
        GENK_CASE(5)
        GENK_CASE(6)
    default: break;
    }
    for (int rr = 0; rr < nr; rr++) _mm512_mask_storeu_ps(a->y + (r0 + rr) * a->ldy + jt, msk, acc[rr]);
}

/* The packed layout above from an R16 Q4_K / Q6_K tile (r16_pack.h): its supers are
 * already lane = row, so no transposes or gathers; the same bytes pack_q4k /
 * pack_q6k write from the rows. */
VNNI static void pack_r16k(kvi_type t, const uint8_t *tile, int64_t nsb, uint8_t *packed)
{
    const __m512i lo = _mm512_set1_epi8(0x0f), z = _mm512_setzero_si512();
    for (int64_t sb = 0; sb < nsb; sb++) {
        uint8_t *g0 = packed + (size_t)(sb * 8) * GEN_BYTES;
        if (t == KVI_TYPE_Q6_K) {
            const uint8_t *sup = tile + (size_t)sb * KVI_R16_Q6K_SUPER;
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 8; k++) {
                    __m512i L[4];
                    r16k_q6_levels(sup, h, k, L);
                    for (int q = 0; q < 4; q++)
                        _mm512_store_si512((void *)(g0 + (size_t)(4 * h + q) * GEN_BYTES + 64 * k), L[q]);
                }
            for (int c = 0; c < 8; c++) {
                uint8_t *g = g0 + (size_t)c * GEN_BYTES;
                const uint8_t *sc = sup + KVI_R16_Q6K_SC + 32 * c; /* scales of sub-blocks 2c, 2c+1 */
                _mm512_store_si512((void *)(g + 512),
                                   _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sc)));
                _mm512_store_si512((void *)(g + 576),
                                   _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + 16))));
                _mm512_store_si512((void *)(g + 640), z);
            }
            _mm512_store_ps((float *)(g0 + 704), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sup)));
            _mm512_store_ps((float *)(g0 + 768), _mm512_setzero_ps());
            continue;
        }
        const uint8_t *sup = tile + (size_t)sb * KVI_R16_Q4K_SUPER;
        __m512i E[4];
        r16k_q4_scales(sup, E);
        for (int j = 0; j < 4; j++) { /* chunks 2j (low nibbles) and 2j+1 (high) */
            uint8_t *ga = g0 + (size_t)(2 * j) * GEN_BYTES, *gb = ga + GEN_BYTES;
            for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_loadu_si512((const void *)(sup + KVI_R16_Q4K_QS + 64 * (8 * j + k)));
                _mm512_store_si512((void *)(ga + 64 * k), _mm512_and_si512(v, lo));
                _mm512_store_si512((void *)(gb + 64 * k), _mm512_and_si512(_mm512_srli_epi16(v, 4), lo));
            }
            const __m512i mn = r16k_q4_mn(E, j); /* mn_2j | mn_2j+1 << 16 */
            _mm512_store_si512((void *)(ga + 512), r16k_q4_sc(E, 2 * j));
            _mm512_store_si512((void *)(gb + 512), r16k_q4_sc(E, 2 * j + 1));
            _mm512_store_si512((void *)(ga + 576), z);
            _mm512_store_si512((void *)(gb + 576), z);
            _mm512_store_si512((void *)(ga + 640), _mm512_and_si512(mn, _mm512_set1_epi32(0xffff)));
            _mm512_store_si512((void *)(gb + 640), _mm512_srli_epi32(mn, 16));
        }
        _mm512_store_ps((float *)(g0 + 704), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sup)));
        _mm512_store_ps((float *)(g0 + 768),
                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sup + KVI_R16_Q4K_DMIN))));
    }
}

/* Q4_K / Q6_K in the R16 layout, any number of rows: each tile packed from its
 * supers, then gen_rows_k as for the rows layout (the same bits). */
VNNI static int qgemm_r16k_many(const kern_qgemm_args *a)
{
    if (a->n_in <= 0 || a->n_in % QK_K || a->j0 % 16 || a->j1 % 16 || a->n_rows < 1) return 0;
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        pack_r16k(a->type, a->w + (size_t)(jt / 16) * 16 * a->w_rb, a->n_in / QK_K, a->scratch);
        for (int64_t r = 0; r < a->n_rows; r += RBK)
            gen_rows_k(a, a->scratch, jt, (__mmask16)0xFFFF, r,
                       a->n_rows - r < RBK ? (int)(a->n_rows - r) : RBK);
    }
    return 1;
}

VNNI static int qgemm_generic(const kern_qgemm_args *a)
{
    if (!a->scratch) return 0;
    uint8_t *packed = a->scratch;
    const bool kq = kern_q8_act_type(a->type) == KVI_TYPE_Q8_K;
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        const int nv = a->j1 - jt < 16 ? (int)(a->j1 - jt) : 16;
        const __mmask16 m = (__mmask16)((1u << nv) - 1);
        tile16 tl;
        tile_init(&tl, a, jt, nv);
        switch (a->type) {
        case KVI_TYPE_Q4_1:
        case KVI_TYPE_Q5_0:
        case KVI_TYPE_Q5_1: pack_legacy(a->type, &tl, a->n_in / 32, packed); break;
        case KVI_TYPE_Q4_K: pack_q4k(&tl, a->n_in / QK_K, false, packed); break;
        case KVI_TYPE_Q5_K: pack_q4k(&tl, a->n_in / QK_K, true, packed); break;
        case KVI_TYPE_Q6_K: pack_q6k(&tl, a->n_in / QK_K, packed); break;
        case KVI_TYPE_IQ4_XS: pack_iq4xs(&tl, a->n_in / QK_K, packed); break;
        default: return 0;
        }
        if (kq)
            for (int64_t r = 0; r < a->n_rows; r += RBK)
                gen_rows_k(a, packed, jt, m, r, a->n_rows - r < RBK ? (int)(a->n_rows - r) : RBK);
        else
            for (int64_t r = 0; r < a->n_rows; r += RB)
                gen_rows_legacy(a, packed, jt, m, r, a->n_rows - r < RB ? (int)(a->n_rows - r) : RB);
    }
    return 1;
}

VNNI static int qgemm_avx512(const kern_qgemm_args *a)
{
    if (!kern_has_vnni() || kern_q8_act_type(a->type) == KVI_TYPE_F32) return 0;
    if (a->w_rb > (size_t)INT32_MAX / 16) return 0; /* gather offsets are int32 */
    if (quant_iq_is_grid(a->type)) return kern_qgemm_iq_avx512(a); /* qgemm_iq_avx512.c */
    if (kern_lowbit_type(a->type)) return kern_lowbit_gemm_avx512(a); /* q8_lowbit_avx512.c */
    if (kern_qgemv_avx512(a) || kern_qgemv_kq_avx512(a)) return 1;
    if (a->type != KVI_TYPE_Q8_0 && a->type != KVI_TYPE_Q4_0 && a->type != KVI_TYPE_IQ4_NL &&
        a->type != KVI_TYPE_MXFP4)
        return qgemm_generic(a);
    if (!a->scratch) return 0;
    if (kern_qgemm_amx_q8(a, false)) return 1;
    return qgemm_packed(a, a->scratch, false);
}

/* ---- R16 weights: AMX for many rows, the streaming VNNI kernels otherwise ---- */

static int qgemm_r16_avx512(const kern_qgemm_args *a)
{
    if (!kern_has_vnni()) return 0;
    if (kern_qgemm_amx_q8(a, true)) return 1;
    if (kern_qgemm_r16_mid_avx512(a)) return 1; /* Q8_0, 5..64 rows (qgemm_r16_mid_avx512.c) */
    return a->n_rows <= KVI_R16_STREAM_ROWS_MAX ? kern_qgemv_r16_avx512(a) : kern_qgemm_r16_many_avx512(a);
}

static void r16_to_rows_avx512(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *rows)
{
    if (kern_has_vnni())
        kern_r16_to_rows_avx512(t, tile, n_in, rows);
    else
        kern_r16_to_rows(t, tile, n_in, rows);
}

static bool r16_preferred_avx512(void) { return kern_has_vnni(); }

const kern_table kern_table_avx512 = {
    .isa = KVI_ISA_AVX512,
    .dot = dot_avx512,
    .dequant = dequant_avx512,
    .dot_3x2 = dot_3x2_avx512,
    .qgemm = qgemm_avx512,
    .actq_a = kern_actq_a_avx512,
    .actq_k = kern_actq_k_avx512,
    .f16_row = kern_f16_row_avx512,
    .qgemm_r16 = qgemm_r16_avx512,
    .r16_to_rows = r16_to_rows_avx512,
    .r16_preferred = r16_preferred_avx512,
    .fmm = kern_fmm_avx512,
    .fmm_amx = kern_fmm_amx,
    .amx_q8 = true,
    .delta_step = kern_delta_step_avx512,
    .lora_bt = kern_lora_bt_avx512,
    .shortconv_row = kern_shortconv_row_avx512,
};
