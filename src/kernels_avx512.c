/*
 * kernels_avx512.c — the AVX-512 (F, BW, VL) table: dot product and F16 / BF16
 * dequantisation 16 lanes wide; the block types reuse the AVX2 code (every
 * AVX-512 CPU kvi_isa_detect() accepts also has AVX2, FMA and F16C), and the
 * integer products of kernels_q8.h with VNNI (vpdpbusd) when the CPU has it.
 *
 * Dot reduction order (fixed by n alone): four 16-lane accumulators take elements
 * i mod 64; remaining full 16-lane groups go into accumulator 0, the last n mod 16
 * elements (masked load) into accumulator 1; then (a0 + a1) + (a2 + a3), folded
 * 16 -> 8 -> 4 -> 2 -> 1 lanes.
 */
#include "kernels_isa.h"
#include "kernels_vnni.h"
#include "quant.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

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
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a1);
    }
    return hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Six dot_avx512 at once (n % 64 == 0): each output keeps its own four
 * accumulators over the same element order, so the bits are dot_avx512's. */
AVX512 static void dot_3x2_avx512(const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n, float out[6])
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
        kvi_f16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = kvi_f16_to_f32(h);
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
        kvi_bf16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = kvi_bf16_to_f32(h);
    }
}

AVX512 static int dequant_avx512(kvi_type t, const void *src, float *dst, int64_t n)
{
    if (n <= 0) return 0;
    switch (t) {
    case KVI_TYPE_F16: deq_f16(src, dst, n); return 1;
    case KVI_TYPE_BF16: deq_bf16(src, dst, n); return 1;
    default: return kvi_dequant_avx2(t, src, dst, n);
    }
}


/* ---- integer products with VNNI (kernels_q8.h contract) ------------------
 *
 * A tile is 16 weight rows; lane l of every vector belongs to weight row j0 + l.
 * For a 32-input block, W[k] (k = 0..7) holds in lane l the four weight levels
 * 4k..4k+3 of row l as unsigned bytes (Q8_0: q + 128; Q4_0: the nibble, q + 8), so
 * one vpdpbusd with the broadcast activation quants 4k..4k+3 adds four products
 * to each row's sum; starting the sum at -offset * sum(x quants) makes it the exact
 * isum. Then acc = fma(dw * dx, (float)isum, acc), lane by lane: the contract's
 * steps. With more than RB input rows the tile is first packed into the scratch
 * (per block: W[0..7] then the 16 scales as f32, 576 bytes) and reused for every
 * group of RB rows; otherwise the blocks are transposed in registers as they come.
 */
#define RB 8            /* input rows per register tile */
#define PACK_BYTES 576  /* one packed block of a 16-row tile */

/* Block at byte offset off of the 16 rows p[] into W[8] and dw. */
VNNI_INLINE void load_block(kvi_type t, const tile16 *tl, size_t off, __m512i W[8], __m512 *dw)
{
    if (t == KVI_TYPE_Q8_0) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        transpose16x4(tl->p, off + 2, W);
        transpose16x4(tl->p, off + 18, W + 4);
        for (int k = 0; k < 8; k++) W[k] = _mm512_xor_si512(W[k], flip);
    } else {   /* Q4_0: low nibbles are inputs 0..15, high nibbles 16..31 */
        const __m512i lo = _mm512_set1_epi8(0x0f);
        __m512i R[4];
        transpose16x4(tl->p, off + 2, R);
        for (int k = 0; k < 4; k++) {
            W[k] = _mm512_and_si512(R[k], lo);
            W[k + 4] = _mm512_and_si512(_mm512_srli_epi16(R[k], 4), lo);
        }
    }
    *dw = scales16(tl, off, 0);
}


/* acc[rr] for nr (<= RB) activation rows x[rr] at block b. */
VNNI_INLINE void rows_block(const __m512i W[8], __m512 dw, int32_t off, const kvi_q8a *const *x, int64_t b,
                            int nr, __m512 *acc)
{
    for (int rr = 0; rr < nr; rr++) {
        const kvi_q8a *xb = x[rr] + b;
        /* two dependency chains, then one exact add */
        __m512i s = _mm512_set1_epi32(-off * xb->sum), s2 = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            s = _mm512_dpbusd_epi32(s, W[k], _mm512_set1_epi32(load_i32(xb->qs + 4 * k)));
            s2 = _mm512_dpbusd_epi32(s2, W[k + 4], _mm512_set1_epi32(load_i32(xb->qs + 16 + 4 * k)));
        }
        s = _mm512_add_epi32(s, s2);
        acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(s), acc[rr]);
    }
}

VNNI static void tile_rows(const kvi_qgemm_args *a, const tile16 *tl, const uint8_t *packed, int64_t jt,
                           __mmask16 m, int64_t r0, int nr)
{
    const int32_t off = a->type == KVI_TYPE_Q8_0 ? 128 : 8;
    const int64_t nb = a->n_in / 32;
    const size_t bb = kvi_type_block_bytes(a->type);
    const kvi_q8a *x[RB];
    __m512 acc[RB];
    for (int rr = 0; rr < RB; rr++) {
        x[rr] = (const kvi_q8a *)(a->xq + (size_t)(r0 + (rr < nr ? rr : 0)) * a->xq_rb);
        acc[rr] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        __m512i W[8];
        __m512 dw;
        if (packed) {
            const uint8_t *q = packed + (size_t)b * PACK_BYTES;
            for (int k = 0; k < 8; k++) W[k] = _mm512_load_si512((const void *)(q + 64 * k));
            dw = _mm512_load_ps((const float *)(q + 512));
        } else {
            load_block(a->type, tl, (size_t)b * bb, W, &dw);
        }
        if (nr == RB) rows_block(W, dw, off, x, b, RB, acc);
        else rows_block(W, dw, off, x, b, nr, acc);
    }
    for (int rr = 0; rr < nr; rr++) _mm512_mask_storeu_ps(a->y + (r0 + rr) * a->ldy + jt, m, acc[rr]);
}

int kvi_has_vnni(void)
{
    static _Atomic int v = -1;   /* the same value whoever stores it first */
    int r = atomic_load_explicit(&v, memory_order_relaxed);
    if (r < 0) {
        __builtin_cpu_init();
        r = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
        atomic_store_explicit(&v, r, memory_order_relaxed);
    }
    return r;
}


/* ---- every other integer type: tiles unpacked, then packed -----------------
 *
 * The tile's 16 rows are unpacked and transposed with SIMD into the packed
 * layout: per 32 inputs ("chunk" c), GEN_BYTES bytes: W[0..7] (as above), then 16-lane vectors
 * sc_a, sc_b (i32 sub-block scales: Q4_K/Q5_K sub-block c mod 8; Q6_K sub-blocks
 * 2(c mod 8) and 2(c mod 8)+1), mn (i32 mins), fd (f32 d) and fm (f32 m or dmin).
 * The K-quant sums isum/msum are exact int32 (vpmulld of scale and sub-block dot).
 */
#define GEN_BYTES 832
#define RBK 4   /* input rows per register tile, K-quants */


/* ---- SIMD packing of a 16-row tile into the layout above ---------------- */


/* Bits 0..3 of each 32-bit lane to bit 4 of its bytes 0..3 (b_i * 2^(7m) never collide). */
VNNI_INLINE __m512i spread4_bit4(__m512i v)
{
    const __m512i t = _mm512_mullo_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xf)), _mm512_set1_epi32(0x00204081));
    return _mm512_slli_epi32(_mm512_and_si512(t, _mm512_set1_epi32(0x01010101)), 4);
}

VNNI_INLINE void store_chunk(uint8_t *g, const __m512i W[8])
{
    for (int k = 0; k < 8; k++) _mm512_store_si512((void *)(g + 64 * k), W[k]);
}

/* Q4_1 Q5_0 Q5_1 (Q4_0/Q8_0 use load_block): levels, d and m. */
VNNI static void pack_legacy(kvi_type t, const tile16 *tl, int64_t nb, uint8_t *packed)
{
    const size_t bb = kvi_type_block_bytes(t);
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
                    W[k] = _mm512_or_si512(W[k], _mm512_slli_epi16(
                               _mm512_and_si512(_mm512_srli_epi16(QH[k], (unsigned)(2 * i)), one), 4));
            }
            store_chunk(g0 + (size_t)(2 * i) * GEN_BYTES, W);
            for (int k = 0; k < 8; k++) {
                W[k] = _mm512_and_si512(_mm512_srli_epi16(R[k], 4), lo);
                if (five)
                    W[k] = _mm512_or_si512(W[k], _mm512_slli_epi16(
                               _mm512_and_si512(_mm512_srli_epi16(QH[k], (unsigned)(2 * i + 1)), one), 4));
            }
            store_chunk(g0 + (size_t)(2 * i + 1) * GEN_BYTES, W);
        }
        const __m512i s0 = gather16_u32(tl, o + 4), s1 = gather16_u32(tl, o + 8), s2 = gather16_u32(tl, o + 12);
        for (int j = 0; j < 8; j++) {
            const unsigned sh = 8u * (unsigned)(j & 3);
            __m512i sc, mn;
            if (j < 4) {
                sc = _mm512_and_si512(_mm512_srli_epi32(s0, sh), m6);
                mn = _mm512_and_si512(_mm512_srli_epi32(s1, sh), m6);
            } else {
                const __m512i b2 = _mm512_srli_epi32(s2, sh);
                sc = _mm512_or_si512(_mm512_and_si512(b2, m4),
                                     _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, sh + 6), m2), 4));
                mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(b2, 4), m4),
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
                    const __m512i l4 = (q >> 1) ? _mm512_and_si512(_mm512_srli_epi16(src, 4), lo) : _mm512_and_si512(src, lo);
                    const __m512i h2 = _mm512_and_si512(_mm512_srli_epi16(QH[k], (unsigned)(2 * q)), m3);
                    W[k] = _mm512_or_si512(l4, _mm512_slli_epi16(h2, 4));
                }
                store_chunk(g0 + (size_t)(4 * h + q) * GEN_BYTES, W);
            }
        }
        __m512i S[4];
        transpose16x4(tl->p, o + 192, S);   /* lane l of S[k]: scales 4k..4k+3 of row l */
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

/* Legacy types (_0 / _1) from the packed tile. */
VNNI static void gen_rows_legacy(const kvi_qgemm_args *a, const uint8_t *packed, int64_t jt, __mmask16 msk,
                                 int64_t r0, int nr)
{
    const int32_t off = kvi_q8_level_offset(a->type);
    const bool has_m = a->type == KVI_TYPE_Q4_1 || a->type == KVI_TYPE_Q5_1;
    const int64_t nc = a->n_in / 32;
    const kvi_q8a *x[RB];
    __m512 acc[RB];
    for (int rr = 0; rr < RB; rr++) {
        x[rr] = (const kvi_q8a *)(a->xq + (size_t)(r0 + (rr < nr ? rr : 0)) * a->xq_rb);
        acc[rr] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < nc; c++) {
        const uint8_t *g = packed + (size_t)c * GEN_BYTES;
        __m512i W[8];
        for (int k = 0; k < 8; k++) W[k] = _mm512_load_si512((const void *)(g + 64 * k));
        const __m512 fd = _mm512_load_ps((const float *)(g + 704)), fm = _mm512_load_ps((const float *)(g + 768));
        for (int rr = 0; rr < nr; rr++) {
            const kvi_q8a *xb = x[rr] + c;
            __m512i s = _mm512_set1_epi32(-off * xb->sum), s2 = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                s = _mm512_dpbusd_epi32(s, W[k], _mm512_set1_epi32(load_i32(xb->qs + 4 * k)));
                s2 = _mm512_dpbusd_epi32(s2, W[k + 4], _mm512_set1_epi32(load_i32(xb->qs + 16 + 4 * k)));
            }
            s = _mm512_add_epi32(s, s2);
            acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(fd, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(s), acc[rr]);
            if (has_m) acc[rr] = _mm512_fmadd_ps(fm, _mm512_set1_ps(xb->s), acc[rr]);
        }
    }
    for (int rr = 0; rr < nr; rr++) _mm512_mask_storeu_ps(a->y + (r0 + rr) * a->ldy + jt, msk, acc[rr]);
}

/* K-quants from the packed tile. */
VNNI static void gen_rows_k(const kvi_qgemm_args *a, const uint8_t *packed, int64_t jt, __mmask16 msk, int64_t r0,
                            int nr)
{
    const bool q6 = a->type == KVI_TYPE_Q6_K;
    const int64_t nsb = a->n_in / QK_K;
    const kvi_q8k *x[RBK];
    __m512 acc[RBK];
    for (int rr = 0; rr < RBK; rr++) {
        x[rr] = (const kvi_q8k *)(a->xq + (size_t)(r0 + (rr < nr ? rr : 0)) * a->xq_rb);
        acc[rr] = _mm512_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m512i isum[RBK], msum[RBK];
        for (int rr = 0; rr < RBK; rr++) isum[rr] = msum[rr] = _mm512_setzero_si512();
        for (int c = 0; c < 8; c++) {
            const uint8_t *g = packed + (size_t)(sb * 8 + c) * GEN_BYTES;
            __m512i W[8];
            for (int k = 0; k < 8; k++) W[k] = _mm512_load_si512((const void *)(g + 64 * k));
            const __m512i sa = _mm512_load_si512((const void *)(g + 512));
            const __m512i sbv = _mm512_load_si512((const void *)(g + 576));
            const __m512i mn = _mm512_load_si512((const void *)(g + 640));
            for (int rr = 0; rr < nr; rr++) {
                const kvi_q8k *xb = x[rr] + sb;
                const int8_t *xq = xb->qs + 32 * c;
                if (q6) {
                    __m512i s0 = _mm512_set1_epi32(-32 * xb->sum16[2 * c]);
                    __m512i s1 = _mm512_set1_epi32(-32 * xb->sum16[2 * c + 1]);
                    for (int k = 0; k < 4; k++) {
                        s0 = _mm512_dpbusd_epi32(s0, W[k], _mm512_set1_epi32(load_i32(xq + 4 * k)));
                        s1 = _mm512_dpbusd_epi32(s1, W[k + 4], _mm512_set1_epi32(load_i32(xq + 16 + 4 * k)));
                    }
                    isum[rr] = _mm512_add_epi32(isum[rr], _mm512_add_epi32(_mm512_mullo_epi32(sa, s0),
                                                                          _mm512_mullo_epi32(sbv, s1)));
                } else {
                    __m512i s = _mm512_setzero_si512();
                    for (int k = 0; k < 8; k++) s = _mm512_dpbusd_epi32(s, W[k], _mm512_set1_epi32(load_i32(xq + 4 * k)));
                    isum[rr] = _mm512_add_epi32(isum[rr], _mm512_mullo_epi32(sa, s));
                    msum[rr] = _mm512_add_epi32(msum[rr], _mm512_mullo_epi32(mn, _mm512_set1_epi32(xb->sum32[c])));
                }
            }
        }
        const uint8_t *g0 = packed + (size_t)(sb * 8) * GEN_BYTES;
        const __m512 fd = _mm512_load_ps((const float *)(g0 + 704)), fm = _mm512_load_ps((const float *)(g0 + 768));
        const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
        for (int rr = 0; rr < nr; rr++) {
            const __m512 dx = _mm512_set1_ps(x[rr][sb].d);
            acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(fd, dx), _mm512_cvtepi32_ps(isum[rr]), acc[rr]);
            if (!q6)
                acc[rr] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(fm, dx)), sign)), _mm512_cvtepi32_ps(msum[rr]),
                                          acc[rr]);
        }
    }
    for (int rr = 0; rr < nr; rr++) _mm512_mask_storeu_ps(a->y + (r0 + rr) * a->ldy + jt, msk, acc[rr]);
}

VNNI static int qgemm_generic(const kvi_qgemm_args *a)
{
    if (!a->scratch) return 0;
    uint8_t *packed = a->scratch;
    const bool kq = kvi_q8_act_type(a->type) == KVI_TYPE_Q8_K;
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


VNNI static int qgemm_avx512(const kvi_qgemm_args *a)
{
    if (!kvi_has_vnni() || kvi_q8_act_type(a->type) == KVI_TYPE_F32) return 0;
    if (a->w_rb > (size_t)INT32_MAX / 16) return 0;   /* gather offsets are int32 */
    if (kvi_qgemv_avx512(a) || kvi_qgemv_kq_avx512(a)) return 1;
    if (a->type != KVI_TYPE_Q8_0 && a->type != KVI_TYPE_Q4_0) return qgemm_generic(a);
    const int64_t nb = a->n_in / 32;
    const size_t bb = kvi_type_block_bytes(a->type);
    uint8_t *packed = a->n_rows > RB && a->scratch ? a->scratch : NULL;
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        const int nv = a->j1 - jt < 16 ? (int)(a->j1 - jt) : 16;
        const __mmask16 m = (__mmask16)((1u << nv) - 1);
        tile16 tl;
        tile_init(&tl, a, jt, nv);
        if (packed)
            for (int64_t b = 0; b < nb; b++) {
                __m512i W[8];
                __m512 dw;
                load_block(a->type, &tl, (size_t)b * bb, W, &dw);
                uint8_t *q = packed + (size_t)b * PACK_BYTES;
                for (int k = 0; k < 8; k++) _mm512_store_si512((void *)(q + 64 * k), W[k]);
                _mm512_store_ps((float *)(q + 512), dw);
            }
        for (int64_t r = 0; r < a->n_rows; r += RB)
            tile_rows(a, &tl, packed, jt, m, r, a->n_rows - r < RB ? (int)(a->n_rows - r) : RB);
    }
    return 1;
}

const kvi_kernel_table kvi_kernels_avx512 = {KVI_ISA_AVX512, dot_avx512, dequant_avx512, dot_3x2_avx512, qgemm_avx512};
