/*
 * fmm_avx512.c — y = x W^T for F32 / F16 / BF16 weights with AVX-512, in
 * the reduction order of fmm_avx512.h (one 16-lane accumulator per output,
 * lane l over i = l mod 16, then a fixed tree over the lanes).
 *
 * Three paths, same per-output operations:
 *  - decode (one input row): the thread's weight rows as STREAM_S long streams
 *    (stream s: rows j0 + s * part + k, k = 0, 1, ...), one row of each at a time,
 *    read straight from the weights with prefetch ahead, one accumulator per row;
 *  - streaming (2 .. FMM_MR - 1 rows, or no scratch): 16 weight rows at a time
 *    are read straight from the weights (F16/BF16 widened in registers, no copy),
 *    16 accumulators, one per weight row, each a dot-product chain with the input
 *    row;
 *  - tiled (>= FMM_MR rows and a scratch, which it no longer reads): rows in row
 *    blocks (row_block: ~1 MiB of x, stays in L2 across the weight tiles); per
 *    16-row weight tile, n_in in blocks of FMM_KC widened into an aligned stack
 *    buffer wblk [16][FMM_KC] (stays in L1 while the row groups pass), register
 *    tiles of FMM_MR input rows x 4 weight rows (24 accumulators) kept in acc
 *    between blocks, so each lane's chain is still increasing i; while the row
 *    groups pass, the weights of the next block are prefetched into L2, a slice
 *    per group (every row block reads all the weights again: without it each
 *    widen_block waited on memory); the remaining rows of a row block (< FMM_MR)
 *    take the streaming kernel on the weights.
 * The tiled and streaming paths end with reduce16(), which sums 16 accumulators
 * at once with shuffles, the decode path with hsum_tree() on each: every output
 * gets exactly the lane tree (l+8, l+4, l+2, l+1), so the bits do not depend on
 * which path or which tile position an output had.
 *
 * Invariants: reads only rows [j0, j1) of W (a short tile repeats its last row and
 * drops the duplicates) and x[r][0..n_in); writes only y[r][j0..j1).
 */
#include "kernels/isa_target.h"
#include "kernels/fmm_avx512.h"

#include "formats/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX512 KVI_TARGET_AVX512
#define AVX512_INLINE AVX512 static inline __attribute__((always_inline))

#define FMM_MR KVI_FMM_MIN_ROWS /* input rows per register tile of the tiled path */
#define FMM_NR 4                /* weight rows per register tile */
#define FMM_KC \
    256                            /* elements of n_in per block (multiple of 16): a 16-row f32 tile's block
                    * (16 KiB) stays in L1 while every row group of a row block passes */
#define FMM_MB_MAX 96              /* input rows per row block, a multiple of FMM_MR */
#define FMM_XBLOCK_BYTES (1 << 20) /* a row block's inputs stay in L2 across weight tiles */
#define STREAM_S 4                 /* decode: weight rows streamed at once (2: +5%, 8: +9%, 4: +14% tok/s) */
#define STREAM_PF 2048 /* decode: bytes prefetched ahead in each row (1024 / 3072 / 4096: within noise) */

/* ---- the contract in scalar C ------------------------------------------ */

static float weight_at(kvi_type t, const void *w, int64_t i)
{
    const uint8_t *p = w;
    if (t == KVI_TYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t == KVI_TYPE_F16 ? quant_f16_to_f32(h) : quant_bf16_to_f32(h);
}

float kern_fdot_lanes16_ref(kvi_type t, const void *w, const float *x, int64_t n)
{
    float v[16] = { 0 };
    int64_t i = 0;
    for (; i < n; i++) v[i % 16] = fmaf(x[i], weight_at(t, w, i), v[i % 16]);
    for (; i % 16 != 0; i++) v[i % 16] = fmaf(0.0f, 0.0f, v[i % 16]); /* the padded tail */
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) v[l] = v[l] + v[l + h];
    return v[0];
}

/* ---- loads ------------------------------------------------------------- */

/* 16 weights of the row at p from element i, widened to f32 (t is a constant at
 * every call site, so the switch folds away). */
AVX512_INLINE __m512 load_w(kvi_type t, const uint8_t *p, int64_t i)
{
    switch (t) {
    case KVI_TYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
    case KVI_TYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i))), 16));
    default: return _mm512_loadu_ps((const float *)p + i);
    }
}

/* The same for the lanes of m only (the others 0). */
AVX512_INLINE __m512 load_w_mask(kvi_type t, const uint8_t *p, int64_t i, __mmask16 m)
{
    switch (t) {
    case KVI_TYPE_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
    case KVI_TYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * i)), 16));
    default: return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    }
}

/* ---- the lane tree, 16 outputs at once --------------------------------- */

/* Lane k of the result is the tree sum of a[k] (s1 = l + l+8, then l + l+4,
 * l + l+2, l + l+1), the same additions hsum would do on a[k] alone. */
AVX512_INLINE __m512 reduce16(const __m512 a[16])
{
    __m512 b[8], c[4], d[2];
/* b[p]: lanes 0-7 = a[p] lo + hi, lanes 8-15 = a[p+8] lo + hi */
#pragma GCC unroll 32
    for (int p = 0; p < 8; p++)
        b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[p], a[p + 8], 0x44),
                             _mm512_shuffle_f32x4(a[p], a[p + 8], 0xEE));
/* c[q]: 128-bit blocks = outputs q, q+8, q+4, q+12 (4 partials each) */
#pragma GCC unroll 32
    for (int q = 0; q < 4; q++)
        c[q] = _mm512_add_ps(_mm512_shuffle_f32x4(b[q], b[q + 4], 0x88),
                             _mm512_shuffle_f32x4(b[q], b[q + 4], 0xDD));
/* d[s]: per block two outputs of c[s] then two of c[s+2], 2 partials each */
#pragma GCC unroll 32
    for (int s = 0; s < 2; s++)
        d[s] =
            _mm512_add_ps(_mm512_shuffle_ps(c[s], c[s + 2], 0x44), _mm512_shuffle_ps(c[s], c[s + 2], 0xEE));
    /* e lanes hold outputs 0 2 1 3 8 10 9 11 4 6 5 7 12 14 13 15 */
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
    return _mm512_permutexvar_ps(order, e);
}

/* ---- streaming kernel: one input row, 16 weight rows -------------------- */

/* y[t] = x . w_t for t < nt (w_t at w + t * rb; rows nt..15 repeat row nt-1). */
AVX512_INLINE void stream16(kvi_type t, const uint8_t *w, size_t rb, int nt, const float *x, int64_t n,
                            float *y)
{
    const uint8_t *p[16];
#pragma GCC unroll 32
    for (int k = 0; k < 16; k++) p[k] = w + (size_t)(k < nt ? k : nt - 1) * rb;
    __m512 acc[16];
#pragma GCC unroll 32
    for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
    /* the same rows of the next tile (16 rows on), one line per row per 64 bytes
     * consumed, into L2: short rows would otherwise start every tile cold */
    const size_t es = t == KVI_TYPE_F32 ? 4 : 2, ahead = 16 * rb;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if ((((size_t)i * es) & 63) == 0) {
#pragma GCC unroll 32
            for (int k = 0; k < 16; k++)
                _mm_prefetch((const char *)(p[k] + ahead + (size_t)i * es), _MM_HINT_T1);
        }
        const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 32
        for (int k = 0; k < 16; k++) acc[k] = _mm512_fmadd_ps(load_w(t, p[k], i), xv, acc[k]);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
#pragma GCC unroll 32
        for (int k = 0; k < 16; k++) acc[k] = _mm512_fmadd_ps(load_w_mask(t, p[k], i, m), xv, acc[k]);
    }
    _mm512_mask_storeu_ps(y, (__mmask16)((1u << nt) - 1), reduce16(acc));
}

/* Lane 0 of the result: the lane tree of v (l + l+8, then l+4, l+2, l+1), the
 * additions reduce16() does for one output. */
AVX512_INLINE float hsum_tree(__m512 v)
{
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xEE));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x01));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xEE));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x01));
    return _mm512_cvtss_f32(v);
}

/* Decode (one input row): y_k = x . w_k for the STREAM_S rows p[k] at once, each
 * a stream of its own through the thread's part of the weights (the memory
 * system serves a few long streams faster than stream16's sixteen short ones);
 * each row is stream16's chain and tree, so the bits are too. Prefetch runs
 * STREAM_PF bytes ahead in each row, into L1. */
AVX512_INLINE void stream_rows(kvi_type t, const uint8_t *const *p, const float *x, int64_t n,
                               float *const *y)
{
    __m512 acc[STREAM_S];
#pragma GCC unroll 16
    for (int k = 0; k < STREAM_S; k++) acc[k] = _mm512_setzero_ps();
    const size_t es = t == KVI_TYPE_F32 ? 4 : 2;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if ((((size_t)i * es) & 63) == 0) {
#pragma GCC unroll 16
            for (int k = 0; k < STREAM_S; k++)
                _mm_prefetch((const char *)(p[k] + STREAM_PF + (size_t)i * es), _MM_HINT_T0);
        }
        const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 16
        for (int k = 0; k < STREAM_S; k++) acc[k] = _mm512_fmadd_ps(load_w(t, p[k], i), xv, acc[k]);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
#pragma GCC unroll 16
        for (int k = 0; k < STREAM_S; k++) acc[k] = _mm512_fmadd_ps(load_w_mask(t, p[k], i, m), xv, acc[k]);
    }
#pragma GCC unroll 16
    for (int k = 0; k < STREAM_S; k++) *y[k] = hsum_tree(acc[k]);
}

AVX512_INLINE void stream_rows_any(kvi_type t, const uint8_t *const *p, const float *x, int64_t n,
                                   float *const *y)
{
    switch (t) {
    case KVI_TYPE_F16: stream_rows(KVI_TYPE_F16, p, x, n, y); break;
    case KVI_TYPE_BF16: stream_rows(KVI_TYPE_BF16, p, x, n, y); break;
    default: stream_rows(KVI_TYPE_F32, p, x, n, y); break;
    }
}

/* Rows [j0, j1) of W for one input row: stream s takes rows j0 + s * part + k
 * (k < part), the last (j1 - j0) % STREAM_S rows go alone (the other lanes of
 * the call repeat the row, their results dropped). */
AVX512 static void stream_decode(kvi_type t, const uint8_t *w, size_t rb, int64_t j0, int64_t j1,
                                 const float *x, int64_t n, float *y)
{
    const int64_t part = (j1 - j0) / STREAM_S;
    const uint8_t *p[STREAM_S];
    float *yp[STREAM_S], drop[STREAM_S];
    for (int64_t k = 0; k < part; k++) {
        for (int s = 0; s < STREAM_S; s++) {
            p[s] = w + (size_t)(j0 + s * part + k) * rb;
            yp[s] = y + j0 + s * part + k;
        }
        stream_rows_any(t, p, x, n, yp);
    }
    for (int64_t j = j0 + STREAM_S * part; j < j1; j++) {
        for (int s = 0; s < STREAM_S; s++) {
            p[s] = w + (size_t)j * rb;
            yp[s] = s == 0 ? y + j : &drop[s];
        }
        stream_rows_any(t, p, x, n, yp);
    }
}

AVX512 static void stream16_f32(const uint8_t *w, size_t rb, int nt, const float *x, int64_t n, float *y)
{
    stream16(KVI_TYPE_F32, w, rb, nt, x, n, y);
}

AVX512 static void stream16_f16(const uint8_t *w, size_t rb, int nt, const float *x, int64_t n, float *y)
{
    stream16(KVI_TYPE_F16, w, rb, nt, x, n, y);
}

AVX512 static void stream16_bf16(const uint8_t *w, size_t rb, int nt, const float *x, int64_t n, float *y)
{
    stream16(KVI_TYPE_BF16, w, rb, nt, x, n, y);
}

typedef void (*stream_fn)(const uint8_t *w, size_t rb, int nt, const float *x, int64_t n, float *y);

/* ---- tiled kernel: FMM_MR input rows x FMM_NR f32 weight rows ---------- */

/* Continues the accumulators of x_r . w_t (r < FMM_MR, t < FMM_NR; w_t at w + t *
 * ldw floats, rows t >= nt repeat row nt-1) over elements [k0, k0 + kn): acc is
 * [FMM_MR * FMM_NR][16] (64-byte aligned, index r * FMM_NR + t), zero when first;
 * kn is a multiple of 16 unless the block ends the row. When last, the trees are
 * summed into y[r * ldy + t] for t < nt instead of storing acc. */
AVX512 static void tile_mr_nr(const float *x, int64_t ldx, const float *w, int64_t ldw, int nt, int64_t k0,
                              int64_t kn, float *acc_mem, bool first, bool last, float *y, int64_t ldy)
{
    __m512 acc[FMM_MR * FMM_NR]; /* acc[r * FMM_NR + t] */
#pragma GCC unroll 32
    for (int k = 0; k < FMM_MR * FMM_NR; k++)
        acc[k] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc_mem + 16 * k);
    const float *wp[FMM_NR];
#pragma GCC unroll 32
    for (int t = 0; t < FMM_NR; t++) wp[t] = w + (t < nt ? t : nt - 1) * ldw + k0;
    x += k0;
    int64_t i = 0;
    for (; i + 16 <= kn; i += 16) {
        __m512 wv[FMM_NR];
#pragma GCC unroll 32
        for (int t = 0; t < FMM_NR; t++) wv[t] = _mm512_loadu_ps(wp[t] + i);
#pragma GCC unroll 32
        for (int r = 0; r < FMM_MR; r++) {
            const __m512 xv = _mm512_loadu_ps(x + r * ldx + i);
#pragma GCC unroll 32
            for (int t = 0; t < FMM_NR; t++)
                acc[r * FMM_NR + t] = _mm512_fmadd_ps(wv[t], xv, acc[r * FMM_NR + t]);
        }
    }
    if (i < kn) {
        const __mmask16 m = (__mmask16)((1u << (kn - i)) - 1);
        __m512 wv[FMM_NR];
#pragma GCC unroll 32
        for (int t = 0; t < FMM_NR; t++) wv[t] = _mm512_maskz_loadu_ps(m, wp[t] + i);
#pragma GCC unroll 32
        for (int r = 0; r < FMM_MR; r++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + r * ldx + i);
#pragma GCC unroll 32
            for (int t = 0; t < FMM_NR; t++)
                acc[r * FMM_NR + t] = _mm512_fmadd_ps(wv[t], xv, acc[r * FMM_NR + t]);
        }
    }
    if (!last) {
#pragma GCC unroll 32
        for (int k = 0; k < FMM_MR * FMM_NR; k++) _mm512_store_ps(acc_mem + 16 * k, acc[k]);
        return;
    }
    const __mmask16 keep = (__mmask16)((1u << nt) - 1);
    /* rows 0-3 in one tree, rows 4-5 (given twice) in another */
    float out[32];
    _mm512_storeu_ps(out, reduce16(acc));
    __m512 rest[16];
#pragma GCC unroll 32
    for (int k = 0; k < 16; k++) rest[k] = acc[16 + k % 8];
    _mm512_storeu_ps(out + 16, reduce16(rest));
#pragma GCC unroll 32
    for (int r = 0; r < FMM_MR; r++)
        _mm512_mask_storeu_ps(y + r * ldy, keep, _mm512_maskz_loadu_ps((__mmask16)0xF, out + r * FMM_NR));
}
_Static_assert(FMM_MR == 6 && FMM_NR == 4, "tile_mr_nr reduces 16 + 8 accumulators");

/* ---- driver ------------------------------------------------------------ */

/* Input rows per row block for rows of n floats: FMM_XBLOCK_BYTES of x, a multiple
 * of FMM_MR within [FMM_MR, FMM_MB_MAX]. */
static int64_t row_block(int64_t n)
{
    int64_t mb = FMM_XBLOCK_BYTES / (n * (int64_t)sizeof(float)) / FMM_MR * FMM_MR;
    return mb < FMM_MR ? FMM_MR : mb > FMM_MB_MAX ? FMM_MB_MAX : mb;
}

/* Widens elements [k0, k0 + kn) of rows [0, nt) of the tile at w into dst
 * [16][FMM_KC] f32 (rows nt..15 and columns kn.. unused). */
AVX512 static void widen_block(kvi_type t, const uint8_t *w, size_t rb, int nt, int64_t k0, int64_t kn,
                               float *dst)
{
    for (int k = 0; k < nt; k++) {
        const uint8_t *p = w + (size_t)k * rb;
        float *d = dst + (size_t)k * FMM_KC - k0;
        int64_t i = k0;
        if (t == KVI_TYPE_F16)
            for (; i + 16 <= k0 + kn; i += 16) _mm512_store_ps(d + i, load_w(KVI_TYPE_F16, p, i));
        else if (t == KVI_TYPE_BF16)
            for (; i + 16 <= k0 + kn; i += 16) _mm512_store_ps(d + i, load_w(KVI_TYPE_BF16, p, i));
        else
            for (; i + 16 <= k0 + kn; i += 16) _mm512_store_ps(d + i, load_w(KVI_TYPE_F32, p, i));
        if (i < k0 + kn) {
            const __mmask16 m = (__mmask16)((1u << (k0 + kn - i)) - 1);
            _mm512_mask_store_ps(d + i, m,
                                 t == KVI_TYPE_F16    ? load_w_mask(KVI_TYPE_F16, p, i, m)
                                 : t == KVI_TYPE_BF16 ? load_w_mask(KVI_TYPE_BF16, p, i, m)
                                                      : load_w_mask(KVI_TYPE_F32, p, i, m));
        }
    }
}

int kern_fmm_avx512(const kern_fmm_args *a)
{
    stream_fn stream;
    switch (a->type) {
    case KVI_TYPE_F32: stream = stream16_f32; break;
    case KVI_TYPE_F16: stream = stream16_f16; break;
    case KVI_TYPE_BF16: stream = stream16_bf16; break;
    default: return 0;
    }
    const int64_t n = a->n_in;
    const bool tiled = a->n_rows >= FMM_MR && (a->scratch || a->type == KVI_TYPE_F32);
    if (!tiled && a->n_rows == 1) {
        stream_decode(a->type, a->w, a->w_rb, a->j0, a->j1, a->x, n, a->y);
        return 1;
    }
    if (!tiled) {
        for (int64_t jt = a->j0; jt < a->j1; jt += KVI_FMM_TILE) {
            const int nt = (int)(a->j1 - jt < KVI_FMM_TILE ? a->j1 - jt : KVI_FMM_TILE);
            const uint8_t *wt = a->w + (size_t)jt * a->w_rb;
            for (int64_t r = 0; r < a->n_rows; r++)
                stream(wt, a->w_rb, nt, a->x + r * a->ldx, n, a->y + r * a->ldy + jt);
        }
        return 1;
    }
    /* the register tiles' accumulators between blocks of n_in:
     * [row group][weight quad][FMM_MR * FMM_NR][16] */
    _Alignas(64) float wblk[KVI_FMM_TILE * FMM_KC]; /* [16][FMM_KC]: a block of n_in of the tile */
    _Alignas(64) float acc[FMM_MB_MAX / FMM_MR * (KVI_FMM_TILE / FMM_NR) * FMM_MR * FMM_NR * 16];
    const int64_t mb = row_block(n);
    for (int64_t r0 = 0; r0 < a->n_rows; r0 += mb) {
        const int64_t rn = a->n_rows - r0 < mb ? a->n_rows - r0 : mb, ng = rn / FMM_MR;
        const float *xb = a->x + r0 * a->ldx;
        float *yb = a->y + r0 * a->ldy;
        for (int64_t jt = a->j0; jt < a->j1; jt += KVI_FMM_TILE) {
            const int nt = (int)(a->j1 - jt < KVI_FMM_TILE ? a->j1 - jt : KVI_FMM_TILE);
            const uint8_t *wt = a->w + (size_t)jt * a->w_rb;
            for (int64_t k0 = 0; k0 < n; k0 += FMM_KC) {
                const int64_t kn = n - k0 < FMM_KC ? n - k0 : FMM_KC;
                widen_block(a->type, wt, a->w_rb, nt, k0, kn, wblk);
                /* the weights the next widen_block reads (the next K block of this
                 * tile, or the next tile's first), into L2 a slice per row group */
                const bool next_k = k0 + FMM_KC < n;
                const int64_t jn = next_k ? jt : jt + KVI_FMM_TILE;
                const int nn = (int)(a->j1 - jn < KVI_FMM_TILE ? a->j1 - jn : KVI_FMM_TILE);
                const int64_t kn0 = next_k ? k0 + FMM_KC : 0;
                const size_t seg = quant_row_bytes(a->type, n - kn0 < FMM_KC ? n - kn0 : FMM_KC);
                const uint8_t *wn = a->w + (size_t)jn * a->w_rb + quant_row_bytes(a->type, kn0);
                for (int64_t g = 0; g < ng; g++) {
                    if (nn > 0)
                        for (int64_t r = nn * g / ng; r < nn * (g + 1) / ng; r++)
                            for (size_t o = 0; o < seg; o += 64)
                                _mm_prefetch((const char *)(wn + (size_t)r * a->w_rb + o), _MM_HINT_T1);
                    for (int t0 = 0; t0 < nt; t0 += FMM_NR)
                        tile_mr_nr(xb + g * FMM_MR * a->ldx, a->ldx, wblk + t0 * FMM_KC - k0, FMM_KC,
                                   nt - t0 < FMM_NR ? nt - t0 : FMM_NR, k0, kn,
                                   acc + (g * (KVI_FMM_TILE / FMM_NR) + t0 / FMM_NR) * (FMM_MR * FMM_NR * 16),
                                   k0 == 0, k0 + kn >= n, yb + g * FMM_MR * a->ldy + jt + t0, a->ldy);
                }
            }
            for (int64_t r = ng * FMM_MR; r < rn; r++)
                stream(wt, a->w_rb, nt, xb + r * a->ldx, n, yb + r * a->ldy + jt);
        }
    }
    return 1;
}
