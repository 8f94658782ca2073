/*
 * qgemv_avx512.c — Q8_0 / Q4_0 / IQ4_NL / MXFP4 products with few input rows
 * (decode), with AVX-512 VNNI; the bits of q8.h's contract. See the comment below.
 */
#include "kernels/r16.h"
#include "kernels/vnni_avx512.h"

/* ---- few input rows (decode): weights streamed row-major -----------------
 *
 * With n_rows <= GV_ROWS the 16-row tile is not transposed. Each weight row l is
 * read as it lies (contiguous loads) and dotted with vpdpbusd against the
 * activation, arranged once per call in the scratch, into P_l: 16 dword lanes of
 * partial sums of G consecutive blocks (Q8_0: G = 2, lanes 8k..8k+7 = block k;
 * Q4_0, IQ4_NL and MXFP4 (Q4_0's nibbles, MXFP4's one byte nearer the block start;
 * IQ4_NL / MXFP4 nibbles looked up, vpshufb, as their level + 128): G = 4, lanes
 * 4k..4k+3 = block k). A fixed unpack/shuffle/add tree folds
 * P_0..P_15 into R_0..R_{G-1} with lane l of R_k = row l's exact integer sum of
 * block k. The float steps then run lane by lane, block by block in order, as in
 * tile_rows: acc = fma(dw * dx, (float)(R_k - offset * sum(x quants)), acc), dw
 * the f16 d as float or MXFP4's 2^(e - 128) (kern_e8m0_half_ps). The
 * integers are exact and the float operations the same, so the bits are
 * tile_rows' and kern_qgemm_ref's.
 *
 * Scratch per input row (gv_act): xg [ng][G * 32] i8 (Q8_0: quants of blocks 2g,
 * 2g+1; Q4_0: inputs 0..15 of blocks 4g..4g+3, then their inputs 16..31; blocks
 * past nb are zero, their lanes computed from a repeated valid block and unused),
 * corr [nb] i32 = -offset * sum(x quants), dx [nb] f32.
 */
#define GV_ROWS 4
#define GV_PREFETCH 768 /* bytes ahead in each weight row */

typedef struct gv_act {
    const int8_t *xg;    /* [ng][G * 32] */
    const int32_t *corr; /* [nb] */
    const float *dx;     /* [nb] */
} gv_act;

static size_t gv_act_bytes(int64_t nb, int G)
{
    const size_t ng = (size_t)((nb + G - 1) / G);
    return ng * (size_t)G * 32 + (((size_t)nb * 8 + 63) & ~(size_t)63);
}

static void gv_act_build(kvi_type t, const kern_q8a *x, int64_t nb, int G, uint8_t *dst, gv_act *ga)
{
    const int64_t ng = (nb + G - 1) / G;
    const int32_t off = kern_q8_level_offset(t);
    int8_t *xg = (int8_t *)dst;
    int32_t *corr = (int32_t *)(dst + (size_t)ng * (size_t)G * 32);
    float *dx = (float *)(corr + nb);
    memset(xg, 0, (size_t)ng * (size_t)G * 32);
    for (int64_t b = 0; b < nb; b++) {
        const int64_t g = b / G, k = b % G;
        int8_t *o = xg + g * G * 32;
        if (G == 2) {
            memcpy(o + 32 * k, x[b].qs, 32);
        } else {
            memcpy(o + 16 * k, x[b].qs, 16);
            memcpy(o + 64 + 16 * k, x[b].qs + 16, 16);
        }
        corr[b] = -off * x[b].sum;
        dx[b] = x[b].d;
    }
    ga->xg = xg;
    ga->corr = corr;
    ga->dx = dx;
}

/* Q8_0, blocks b0 and b1 (byte offsets o0, o1) of the 16 rows against X:
 * R[0], R[1] with lane l = row l's sum of w (flipped to unsigned) * x. */
VNNI_INLINE void gv_sums_q8_0(const tile16 *tl, size_t o0, size_t o1, __m512i X, __m512i R[2])
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i P[16], V[4];
    for (int l = 0; l < 16; l++) {
        const uint8_t *p = tl->p[l];
        __m512i w = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + o0 + 2)));
        w = _mm512_inserti64x4(w, _mm256_loadu_si256((const __m256i *)(p + o1 + 2)), 1);
        _mm_prefetch((const char *)(p + o0 + GV_PREFETCH), _MM_HINT_T0);
        P[l] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(w, flip), X);
    }
    vnni_fold16(P, V);
    /* chunks 0, 1 are block b0 and chunks 2, 3 block b1 */
    const __m512i A =
        _mm512_add_epi32(_mm512_shuffle_i32x4(V[0], V[1], 0x88), _mm512_shuffle_i32x4(V[0], V[1], 0xDD));
    const __m512i B =
        _mm512_add_epi32(_mm512_shuffle_i32x4(V[2], V[3], 0x88), _mm512_shuffle_i32x4(V[2], V[3], 0xDD));
    R[0] = _mm512_shuffle_i32x4(A, B, 0x88);
    R[1] = _mm512_shuffle_i32x4(A, B, 0xDD);
}

/* The nibble kinds of gv_sums_q4_0 / gv_tile (a constant in each copy). */
#define GV_Q4_0 0
#define GV_IQ4NL 1
#define GV_MXFP4 2

/* Q4_0, IQ4_NL or MXFP4 (kind), blocks at byte offsets o[0..3] of the 16 rows
 * against XL (inputs 0..15 of the four blocks) and XH (inputs 16..31): R[k], lane
 * l = row l's sum of block k (levels as unsigned bytes: nibble, or level + 128). */
VNNI_INLINE void gv_sums_q4_0(const tile16 *tl, const size_t o[4], __m512i XL, __m512i XH, __m512i R[4],
                              const int kind)
{
    const int nl = kind != GV_Q4_0;
    const size_t q = kind == GV_MXFP4 ? 1 : 2; /* the quants' offset in a block */
    const __m512i lo = _mm512_set1_epi8(0x0f), lut = kind == GV_MXFP4 ? kern_mxfp4_lut() : kern_iq4nl_lut();
    __m512i P[16];
    for (int l = 0; l < 16; l++) {
        const uint8_t *p = tl->p[l];
        __m512i w = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + o[0] + q)));
        w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + o[1] + q)), 1);
        w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + o[2] + q)), 2);
        w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + o[3] + q)), 3);
        _mm_prefetch((const char *)(p + o[0] + GV_PREFETCH), _MM_HINT_T0);
        __m512i wl = _mm512_and_si512(w, lo), wh = _mm512_and_si512(_mm512_srli_epi16(w, 4), lo);
        if (nl) {
            wl = _mm512_shuffle_epi8(lut, wl);
            wh = _mm512_shuffle_epi8(lut, wh);
        }
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wl, XL);
        P[l] = _mm512_dpbusd_epi32(s, wh, XH);
    }
    vnni_sum16x4(P, R); /* chunk c of row l's sums is block c */
}

/* One tile of rows jt.. (mask m of valid lanes) for nr <= GV_ROWS input rows; kind:
 * the nibbles' meaning for Q4_0-like weights (a constant in each copy). */
VNNI_INLINE void gv_tile(const kern_qgemm_args *a, const tile16 *tl, const gv_act *x, int nr, int64_t jt,
                         __mmask16 m, const int kind)
{
    const int G = a->type == KVI_TYPE_Q8_0 ? 2 : 4;
    const int64_t nb = a->n_in / 32, ng = (nb + G - 1) / G;
    const size_t bb = quant_block_bytes(a->type);
    __m512 acc[GV_ROWS];
    for (int rr = 0; rr < GV_ROWS; rr++) acc[rr] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const int nk = nb - g * G < G ? (int)(nb - g * G) : G;
        size_t o[4];
        __m512 dw[4];
        for (int k = 0; k < G; k++) o[k] = (size_t)(g * G + (k < nk ? k : nk - 1)) * bb;
        for (int k = 0; k < nk; k++)
            dw[k] = kind == GV_MXFP4 ? scales16_e8m0(tl, o[k]) : scales16(tl, o[k], 0);
        for (int rr = 0; rr < nr; rr++) {
            __m512i R[4];
            const int8_t *xg = x[rr].xg + g * G * 32;
            if (G == 2)
                gv_sums_q8_0(tl, o[0], o[1], _mm512_load_si512((const void *)xg), R);
            else
                gv_sums_q4_0(tl, o, _mm512_load_si512((const void *)xg),
                             _mm512_load_si512((const void *)(xg + 64)), R, kind);
            for (int k = 0; k < nk; k++) {
                const int64_t b = g * G + k;
                const __m512i s = _mm512_add_epi32(R[k], _mm512_set1_epi32(x[rr].corr[b]));
                acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(dw[k], _mm512_set1_ps(x[rr].dx[b])),
                                          _mm512_cvtepi32_ps(s), acc[rr]);
            }
        }
    }
    for (int rr = 0; rr < nr; rr++) _mm512_mask_storeu_ps(a->y + rr * a->ldy + jt, m, acc[rr]);
}

VNNI static void gv_tile_q(const kern_qgemm_args *a, const tile16 *tl, const gv_act *x, int nr, int64_t jt,
                           __mmask16 m)
{
    gv_tile(a, tl, x, nr, jt, m, GV_Q4_0);
}

VNNI static void gv_tile_nl(const kern_qgemm_args *a, const tile16 *tl, const gv_act *x, int nr, int64_t jt,
                            __mmask16 m)
{
    gv_tile(a, tl, x, nr, jt, m, GV_IQ4NL);
}

VNNI static void gv_tile_mx(const kern_qgemm_args *a, const tile16 *tl, const gv_act *x, int nr, int64_t jt,
                            __mmask16 m)
{
    gv_tile(a, tl, x, nr, jt, m, GV_MXFP4);
}

/* Q8_0 / Q4_0 / IQ4_NL / MXFP4 with 1..GV_ROWS input rows; 0 when not handled
 * (nothing written). */
VNNI int kern_qgemv_avx512(const kern_qgemm_args *a)
{
    if (a->type != KVI_TYPE_Q8_0 && a->type != KVI_TYPE_Q4_0 && a->type != KVI_TYPE_IQ4_NL &&
        a->type != KVI_TYPE_MXFP4)
        return 0;
    if (a->n_rows < 1 || a->n_rows > GV_ROWS || !a->scratch) return 0;
    const int G = a->type == KVI_TYPE_Q8_0 ? 2 : 4, nr = (int)a->n_rows;
    const int64_t nb = a->n_in / 32;
    const size_t ab = gv_act_bytes(nb, G);
    if ((size_t)nr * ab > KVI_QGEMM_SCRATCH(a->n_in)) return 0;
    gv_act x[GV_ROWS];
    for (int rr = 0; rr < nr; rr++)
        gv_act_build(a->type, (const kern_q8a *)(a->xq + (size_t)rr * a->xq_rb), nb, G,
                     (uint8_t *)a->scratch + (size_t)rr * ab, &x[rr]);
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        const int nv = a->j1 - jt < 16 ? (int)(a->j1 - jt) : 16;
        tile16 tl;
        tile_init(&tl, a, jt, nv);
        if (a->type == KVI_TYPE_IQ4_NL)
            gv_tile_nl(a, &tl, x, nr, jt, (__mmask16)((1u << nv) - 1));
        else if (a->type == KVI_TYPE_MXFP4)
            gv_tile_mx(a, &tl, x, nr, jt, (__mmask16)((1u << nv) - 1));
        else
            gv_tile_q(a, &tl, x, nr, jt, (__mmask16)((1u << nv) - 1));
    }
    return 1;
}

/* ---- R16 weights (r16_pack.h): one linear stream per tile -----------------
 *
 * The tile's vectors already have lane l = weight row l, so each block is: the
 * 16 scales (one f16 load; MXFP4: 16 E8M0 bytes, kern_e8m0_half16), the quants as
 * 8 u8 vectors (Q8_0) or 4 vectors whose low / high nibbles are inputs 4k.. /
 * 16+4k.. (Q4_0; IQ4_NL / MXFP4 looked up as level + 128), vpdpbusd against the
 * activation quads broadcast from the kern_q8a block, the sum started at
 * -offset * sum(x quants). Then acc = fma(dw * dx, (float)isum, acc) block by block:
 * the contract's steps, so the bits of every other path. Prefetch runs
 * R16_PF_BYTES_Q8 / _Q4 ahead of the stream. */
/* measured against 0, 256, 1024, 2048, 4096 (T0/T1/T2 hints) on llama-1b Q8_0, and
 * Q4_0 against 256, 512, 1536: about one Q4_0 block pair (576 bytes) further ahead
 * pays (tg 49.4-50.6 -> 51.9-52.3 tok/s, alternated), Q8_0 prefers 512 (27.3-27.6 vs
 * 27.2-27.3 at 1024) */
#define R16_PF_BYTES_Q8 512
#define R16_PF_BYTES_Q4 1024
#define R16_STREAMS 2 /* tiles streamed at once by one thread for one input row (3, 4: no gain) */

VNNI_INLINE void r16_block(kvi_type t, const uint8_t *q, __m512 dw, const kern_q8a *const *x, int64_t b,
                           int nr, __m512 *acc)
{
    __m512i W[8];
    if (t == KVI_TYPE_Q8_0) {
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) W[k] =
            _mm512_loadu_si512((const void *)(q + 64 * k));
    } else if (t == KVI_TYPE_IQ4_NL || t == KVI_TYPE_MXFP4) { /* Q4_0's nibbles, looked up as level + 128 */
        const __m512i lo = _mm512_set1_epi8(0x0f),
                      lut = t == KVI_TYPE_MXFP4 ? kern_mxfp4_lut() : kern_iq4nl_lut();
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        {
            const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * k));
            W[k] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, lo));
            W[k + 4] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), lo));
        }
    } else {
        /* high nibbles kept in place (16 x level): their sum is shifted down once */
        const __m512i lo = _mm512_set1_epi8(0x0f), hi = _mm512_set1_epi8((char)0xf0);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        {
            const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * k));
            W[k] = _mm512_and_si512(v, lo);
            W[k + 4] = _mm512_and_si512(v, hi);
        }
    }
    const int32_t off = t == KVI_TYPE_Q4_0 ? 8 : 128;
    _Pragma("GCC unroll 4") for (int rr = 0; rr < nr; rr++)
    {
        const kern_q8a *xb = x[rr] + b;
        __m512i s = _mm512_set1_epi32(-off * xb->sum), s2 = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        {
            s = _mm512_dpbusd_epi32(s, W[k], _mm512_set1_epi32(load_i32(xb->qs + 4 * k)));
            s2 = _mm512_dpbusd_epi32(s2, W[k + 4], _mm512_set1_epi32(load_i32(xb->qs + 16 + 4 * k)));
        }
        /* Q4_0: s2 = 16 * (exact sum), so the shift is exact */
        s = _mm512_add_epi32(s, t == KVI_TYPE_Q4_0 ? _mm512_srai_epi32(s2, 4) : s2);
        acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(s), acc[rr]);
    }
}

/* Pair p (blocks 2p, 2p+1) of the tile at `tile` for nr activation rows: prefetch
 * ahead, the two blocks' scales (f16, or MXFP4's E8M0 bytes), then r16_block for
 * each. */
VNNI_INLINE void r16_pair(const kern_qgemm_args *a, const uint8_t *tile, int64_t p, const kern_q8a *const *x,
                          int nr, __m512 *acc)
{
    const bool mx = a->type == KVI_TYPE_MXFP4;
    const size_t qb = a->type == KVI_TYPE_Q8_0 ? 512 : 256, sc = mx ? 32 : 64, pair = sc + 2 * qb;
    const uint8_t *q = tile + (size_t)p * pair;
    const size_t pf = a->type == KVI_TYPE_Q8_0 ? R16_PF_BYTES_Q8 : R16_PF_BYTES_Q4;
    _Pragma("GCC unroll 17") for (size_t o = 0; o < pair; o += 64)
        _mm_prefetch((const char *)(q + pf + o), _MM_HINT_T0);
    __m512 d0, d1;
    if (mx) {
        d0 = kern_e8m0_half16(q);
        d1 = kern_e8m0_half16(q + 16);
    } else {
        d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)q));
        d1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + 32)));
    }
    r16_block(a->type, q + sc, d0, x, 2 * p, nr, acc);
    r16_block(a->type, q + sc + qb, d1, x, 2 * p + 1, nr, acc);
}

/* Tile rows [jt, jt + 16) for the nr (1..GV_ROWS, a constant after inlining)
 * activation rows x[0..nr), outputs at y + jt (row rr at y + rr * ldy). */
VNNI_INLINE void r16_tile(const kern_qgemm_args *a, const uint8_t *tile, const kern_q8a *const *x, int nr,
                          float *y)
{
    __m512 acc[GV_ROWS];
    _Pragma("GCC unroll 4") for (int rr = 0; rr < GV_ROWS; rr++) acc[rr] = _mm512_setzero_ps();
    for (int64_t p = 0; p < a->n_in / 64; p++) r16_pair(a, tile, p, x, nr, acc);
    _Pragma("GCC unroll 4") for (int rr = 0; rr < nr; rr++) _mm512_storeu_ps(y + rr * a->ldy, acc[rr]);
}

/* One activation row against ns (2 or 4, a constant after inlining) tiles at once:
 * several linear streams per thread (the memory system serves them faster than
 * one); each tile's outputs take exactly r16_tile's steps. */
VNNI_INLINE void r16_tiles(const kern_qgemm_args *a, const uint8_t *const *t, const kern_q8a *const *x,
                           float *const *y, int ns)
{
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int i = 0; i < ns; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t p = 0; p < a->n_in / 64; p++)
        _Pragma("GCC unroll 4") for (int i = 0; i < ns; i++) r16_pair(a, t[i], p, x, 1, &acc[i]);
    _Pragma("GCC unroll 4") for (int i = 0; i < ns; i++) _mm512_storeu_ps(y[i], acc[i]);
}

/* Q8_0 / Q4_0 / IQ4_NL / MXFP4 over R16 weights (Q4_K / Q6_K: qgemv_r16k_avx512.c), any
 * number of rows: each tile is read once from memory and reused (from L1) by the groups
 * of up to GV_ROWS activation rows. */
VNNI int kern_qgemv_r16_avx512(const kern_qgemm_args *a)
{
    if (a->type == KVI_TYPE_Q4_K || a->type == KVI_TYPE_Q6_K) return kern_qgemv_r16k_avx512(a);
    if (a->type != KVI_TYPE_Q8_0 && a->type != KVI_TYPE_Q4_0 && a->type != KVI_TYPE_IQ4_NL &&
        a->type != KVI_TYPE_MXFP4)
        return 0;
    if (a->n_rows < 1 || a->n_in % 64 != 0 || a->j0 % 16 || a->j1 % 16) return 0;
    if (!kern_has_vnni()) return 0;
    const size_t tb = 16 * a->w_rb;
    int64_t j0 = a->j0;
    if (a->n_rows == 1 && R16_STREAMS > 1) { /* tiles i, i + part, i + 2 part, ... together */
        const int64_t part = (a->j1 - a->j0) / 16 / R16_STREAMS;
        const kern_q8a *x[1] = { (const kern_q8a *)a->xq };
        for (int64_t i = 0; i < part; i++) {
            const uint8_t *t[R16_STREAMS];
            float *y[R16_STREAMS];
            for (int k = 0; k < R16_STREAMS; k++) {
                const int64_t jt = a->j0 + 16 * (i + k * part);
                t[k] = a->w + (size_t)(jt / 16) * tb;
                y[k] = a->y + jt;
            }
            r16_tiles(a, t, x, y, R16_STREAMS);
        }
        j0 = a->j0 + 16 * R16_STREAMS * part; /* the last few tiles below */
    }
    for (int64_t jt = j0; jt < a->j1; jt += 16) {
        const uint8_t *tile = a->w + (size_t)(jt / 16) * tb;
        for (int64_t r0 = 0; r0 < a->n_rows; r0 += GV_ROWS) {
            const int nr = a->n_rows - r0 < GV_ROWS ? (int)(a->n_rows - r0) : GV_ROWS;
            const kern_q8a *x[GV_ROWS];
            for (int rr = 0; rr < GV_ROWS; rr++)
                x[rr] = (const kern_q8a *)(a->xq + (size_t)(r0 + (rr < nr ? rr : 0)) * a->xq_rb);
            float *y = a->y + r0 * a->ldy + jt;
            switch (nr) {
            case 1: r16_tile(a, tile, x, 1, y); break;
            case 2: r16_tile(a, tile, x, 2, y); break;
            case 3: r16_tile(a, tile, x, 3, y); break;
            default: r16_tile(a, tile, x, 4, y); break;
            }
        }
    }
    return 1;
}

/* kern_r16_from_rows with in-register transposes (the same bytes; r16_pack.c's
 * scalar version is the reference). */
VNNI void kern_r16_from_rows_avx512(kvi_type t, const uint8_t *src, int64_t n_in, uint8_t *dst)
{
    if (t == KVI_TYPE_Q4_K || t == KVI_TYPE_Q6_K) {
        kern_r16k_from_rows_avx512(t, src, n_in, dst);
        return;
    }
    const size_t rb = quant_row_bytes(t, n_in), bb = quant_block_bytes(t);
    const size_t sb = t == KVI_TYPE_MXFP4 ? 1 : 2; /* scale bytes per block */
    const size_t qb = t == KVI_TYPE_Q8_0 ? 512 : 256, pair = 32 * sb + 2 * qb;
    const uint8_t *p[16];
    for (int l = 0; l < 16; l++) p[l] = src + (size_t)l * rb;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t b = 0; b < n_in / 32; b++) {
        uint8_t *q = dst + (size_t)(b / 2) * pair;
        const size_t off = (size_t)b * bb;
        for (int l = 0; l < 16; l++) memcpy(q + 16 * sb * (size_t)(b % 2) + sb * (size_t)l, p[l] + off, sb);
        uint8_t *o = q + 32 * sb + (size_t)(b % 2) * qb;
        __m512i T[8];
        transpose16x4(p, off + sb, T);
        if (t == KVI_TYPE_Q8_0) {
            transpose16x4(p, off + 18, T + 4);
            for (int k = 0; k < 8; k++)
                _mm512_storeu_si512((void *)(o + 64 * k), _mm512_xor_si512(T[k], flip));
        } else {
            for (int k = 0; k < 4; k++) _mm512_storeu_si512((void *)(o + 64 * k), T[k]);
        }
    }
}

/* kern_r16_to_rows with in-register transposes (untranspose16x4): the same bytes as
 * r16_pack.c's version. */
VNNI void kern_r16_to_rows_avx512(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *dst)
{
    if (t == KVI_TYPE_Q4_K || t == KVI_TYPE_Q6_K) {
        kern_r16k_to_rows_avx512(t, tile, n_in, dst);
        return;
    }
    const size_t rb = quant_row_bytes(t, n_in), bb = quant_block_bytes(t);
    const size_t sb = t == KVI_TYPE_MXFP4 ? 1 : 2; /* scale bytes per block */
    const size_t qb = t == KVI_TYPE_Q8_0 ? 512 : 256, pair = 32 * sb + 2 * qb;
    const __m512i flip = _mm512_set1_epi8(t == KVI_TYPE_Q8_0 ? (char)0x80 : 0);
    for (int64_t b = 0; b < n_in / 32; b++) {
        const uint8_t *q = tile + (size_t)(b / 2) * pair;
        const uint8_t *in = q + 32 * sb + (size_t)(b % 2) * qb;
        const size_t off = (size_t)b * bb;
        for (int l = 0; l < 16; l++)
            memcpy(dst + (size_t)l * rb + off, q + 16 * sb * (size_t)(b % 2) + sb * (size_t)l, sb);
        for (int h = 0; h < (t == KVI_TYPE_Q8_0 ? 2 : 1); h++) {
            __m512i T[4];
            for (int k = 0; k < 4; k++)
                T[k] =
                    _mm512_xor_si512(_mm512_loadu_si512((const void *)(in + 256 * (size_t)h + 64 * k)), flip);
            untranspose16x4(T, dst + off + sb + 16 * (size_t)h, rb);
        }
    }
}
