/*
 * fmm_amx.c — y = x W^T for F16 / BF16 weights with AMX tiles, in the
 * order of fmm_amx.h (per output: K tiles of 32 in order, each hi*xh,
 * hi*xl, then lo*xh for F16, one FP32 accumulator).
 *
 * Roles: the weights are the A operand (tile rows = 16 outputs, 64 bytes = 32 K
 * elements per row: the weight rows converted element by element, no transpose),
 * the inputs the B operand (tile row p = the K pair (2p, 2p+1) of 16 tokens), so a
 * C tile is [16 outputs][N tokens] of FP32.
 *
 * Buffers:
 *  - xb, the inputs of a chunk of at most ROW_CHUNK rows, converted once per
 *    chunk by all threads: [n_tb][kt_n][2: xh, xl][16 pairs][16 tokens][2] bf16,
 *    one 1 KiB B tile each (n_tb = token blocks of 16, kt_n = K tiles); tokens
 *    past the chunk's rows and K past n_in are zeros;
 *  - wa, per thread, the weights of two output blocks over one K block:
 *    [2 blocks][kc_tiles][2: hi, lo][16 outputs][32] bf16 (lo unused for BF16),
 *    rows past n_out or past the thread's blocks zero; when a chunk has at most
 *    32 rows, two halves (the decode pipeline's units) of the same size, each
 *    the 32 weight rows of a unit one after another, [32][kc_tiles][2: hi, lo]
 *    [32] bf16, whose A tiles are loaded with a stride of a row (the conversion
 *    of a row then stores into consecutive lines);
 *  - cbuf, per thread, only when n_in has more than one K block: the C tiles
 *    parked between K blocks, [block - b0][n_tb][16][16] f32 (exact).
 * Threads own output blocks of 16: thread ith takes [OB*ith/nth, OB*(ith+1)/nth)
 * and never splits K. Inside a thread: for each K block, for each pair of output
 * blocks, convert its weights into wa, then run every token block pair (2x2 C
 * tiles; a last odd token block 2x1) over the K tiles of the block. At most 32
 * rows (decode, serving batches): a pipeline of units (pair of output blocks, K
 * block): unit u is converted row by row (each weight row's K block one
 * contiguous read: the prefetchers follow it) into one half of wa while the
 * tiles run unit u - 1 from the other half, a slice after each converted row,
 * so the weight stream and the tile products overlap; C stays in its tiles
 * over the K blocks of a pair.
 * Tile registers: 0..3 C, 4..5 A (weights), 6..7 B (inputs); one configuration
 * per chunk: A 16 x 64 bytes, B and C 16 x 4N bytes with N = min(16, rows).
 *
 * Invariants: reads x[r][0..n_in) and the weight rows only; writes y[r][0..n_out)
 * only; every thread loads its tile configuration at the start of its part and
 * releases the tiles before it returns.
 */
#include "kernels/isa_target.h"
#include "kernels/fmm_amx.h"

#include "base/cpu.h"
#include "kernels/tiles_amx.h"
#include "formats/quant.h"

#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define AMX KVI_TARGET_AMX_BF16
#define AMX_INLINE AMX static inline __attribute__((always_inline))

#define KT 32                 /* K elements per tile */
#define TB 16                 /* tokens per block (B/C tile columns) */
#define OBS 16                /* outputs per block (A/C tile rows) */
#define TILE_BYTES 1024       /* one A or B tile: 16 rows x 64 bytes */
#define KC_TILES 32           /* K tiles per K block: a pair of blocks' weights is 128 KiB (L2) */
#define KC_TILES_FEW 64       /* the same for <= 32 rows (two units of the pipeline: 2 x 256 KiB, L2) */
#define PREFETCH_ELEMS 256    /* weights prefetched this far ahead in their row */
#define ROW_CHUNK 256         /* input rows per chunk: a K block of xb is 1 MiB (L2) */
#define CONVERT_INLINE_ROWS 4 /* fewer input rows are converted by the caller */
#define PREFETCH_FEW 512      /* few rows: weights prefetched this many bytes ahead in their row */
#define ROW_PIECE 128         /* few rows: bytes of one weight row's K tile in wa (hi, lo) */

typedef struct amx_ctx {
    kvi_type type;    /* F16 or BF16 */
    const uint8_t *w; /* [n_out][w_rb] */
    size_t w_rb;
    int64_t n_in, n_out, kt_n, ob_n; /* K tiles, output blocks */
    const float *x;                  /* [n_rows][ldx] */
    int64_t ldx;
    float *y; /* [n_rows][ldy] */
    int64_t ldy;
    int64_t r0, nr, n_tb; /* the chunk: rows [r0, r0 + nr), token blocks */
    int n_cols;           /* N: tokens per tile (16, or nr when nr < 16) */
    int64_t kc_tiles;     /* K tiles per K block (KC_TILES, or KC_TILES_FEW for few rows) */
    uint8_t *xb;          /* the chunk's B tiles (see above) */
    uint8_t *scr0;        /* thread 0's wa (+ cbuf) */
    size_t thr_bytes;     /* wa + cbuf bytes of one thread */
    tpool *pool;
} amx_ctx;

static size_t wa_bytes(int64_t kc_tiles) { return (size_t)2 * (size_t)kc_tiles * 2 * TILE_BYTES; }

/* ---- conversions ------------------------------------------------------- */

/* f32 of the 32 bf16 in v: elements 0..15 and 16..31 */
AMX_INLINE void bf16_widen(__m512i v, __m512 *f0, __m512 *f1)
{
    *f0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
    *f1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
}

/* hi = bf16(f) and lo = bf16(f - hi) of 32 floats (f0: 0..15, f1: 16..31), RNE
 * (the inputs' split) */
AMX_INLINE void split_bf16(__m512 f0, __m512 f1, __m512i *hi, __m512i *lo)
{
    *hi = (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
    __m512 h0, h1;
    bf16_widen(*hi, &h0, &h1);
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(f1, h1), _mm512_sub_ps(f0, h0));
}

/* The weights' split of 32 F16 at p (mk: which are read, the others 0): hi = the
 * f32 value's upper 16 bits (truncation), lo = f - hi, exact in f32 and in BF16
 * (at most the 3 low bits of the F16 significand), also its upper 16 bits. The
 * upper halves are gathered with one word permutation: ~11 vector ops per 64
 * bytes, the decode's budget (fmm_amx.h). */
AMX_INLINE void split_f16(const uint8_t *p, __mmask32 mk, __m512i *hi, __m512i *lo)
{
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31,
                                         29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 f0, f1;
    if (mk == 0xFFFFFFFFu) {
        f0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        f1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
    } else {
        f0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)mk, p));
        f1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)(mk >> 16), p + 32));
    }
    const __m512i u0 = _mm512_castps_si512(f0), u1 = _mm512_castps_si512(f1);
    const __m512 l0 = _mm512_sub_ps(f0, _mm512_castsi512_ps(_mm512_and_si512(u0, top)));
    const __m512 l1 = _mm512_sub_ps(f1, _mm512_castsi512_ps(_mm512_and_si512(u1, top)));
    *hi = _mm512_permutex2var_epi16(u0, odd, u1);
    *lo = _mm512_permutex2var_epi16(_mm512_castps_si512(l0), odd, _mm512_castps_si512(l1));
}

/* Row r of the chunk (token n of block tb) into xb: for each K tile, xh and xl as
 * 16 pairs at stride 64 bytes (column n of the B tiles). */
AMX static void convert_x_row(const amx_ctx *c, int64_t r)
{
    const float *xr = c->x + (c->r0 + r) * c->ldx;
    uint8_t *col = c->xb + (size_t)(r / TB) * (size_t)c->kt_n * 2 * TILE_BYTES + (size_t)(r % TB) * 4;
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(64));
    for (int64_t kt = 0; kt < c->kt_n; kt++, col += 2 * TILE_BYTES) {
        const int64_t i = kt * KT, rem = c->n_in - i;
        __m512 f0, f1;
        if (rem >= KT) {
            f0 = _mm512_loadu_ps(xr + i);
            f1 = _mm512_loadu_ps(xr + i + 16);
        } else {
            const int n0 = rem < 16 ? (int)rem : 16, n1 = (int)rem - n0;
            f0 = _mm512_maskz_loadu_ps((__mmask16)((1u << n0) - 1), xr + i);
            f1 = _mm512_maskz_loadu_ps((__mmask16)((1u << n1) - 1), xr + i + 16);
        }
        __m512i hi, lo;
        split_bf16(f0, f1, &hi, &lo);
        _mm512_i32scatter_epi32(col, idx, hi, 1);
        _mm512_i32scatter_epi32(col + TILE_BYTES, idx, lo, 1);
    }
}

static void xb_worker(void *vctx, int ith, int nth)
{
    const amx_ctx *c = vctx;
    const int64_t a = c->nr * ith / nth, b = c->nr * (ith + 1) / nth;
    for (int64_t r = a; r < b; r++) convert_x_row(c, r);
}

/* One K tile (32 elements, rem of them real) of one weight row at wr into its A
 * tile rows: hi at hi_p, lo at lo_p (F16; BF16 weights are hi alone). */
AMX_INLINE void convert_piece(kvi_type type, const uint8_t *wr, int64_t rem, uint8_t *hi_p, uint8_t *lo_p)
{
    const __mmask32 mk = rem >= KT ? 0xFFFFFFFFu : (__mmask32)((1u << rem) - 1);
    if (type == KVI_TYPE_BF16) {
        _mm512_store_si512(hi_p, rem >= KT ? _mm512_loadu_si512(wr) : _mm512_maskz_loadu_epi16(mk, wr));
        return;
    }
    __m512i hi, lo;
    split_f16(wr, mk, &hi, &lo);
    _mm512_store_si512(hi_p, hi);
    _mm512_store_si512(lo_p, lo);
}

/* Output blocks ob and ob + 1 (valid1: whether ob + 1 is the thread's) for K tiles
 * [kc0, kc0 + nkt) into dst [2][kc_tiles][2][16][32]; rows past n_out (or the
 * second block when not valid1) are zeros. K tile outer, the 32 rows inner: 32
 * rows streamed at once, each a line ahead prefetched. */
AMX static void convert_w_pair(const amx_ctx *c, int64_t ob, int valid1, int64_t kc0, int64_t nkt,
                               uint8_t *dst)
{
    const int64_t nrow = (valid1 ? 2 * OBS : OBS);
    const int64_t rows_ok = c->n_out - ob * OBS < nrow ? c->n_out - ob * OBS : nrow;
    const size_t blk = (size_t)c->kc_tiles * 2 * TILE_BYTES; /* bytes of one block in dst */
    for (int64_t t = 0; t < nkt; t++) {
        const int64_t i = (kc0 + t) * KT, rem = c->n_in - i;
        const int pf = i + PREFETCH_ELEMS + KT <= c->n_in;
        for (int64_t m = 0; m < 2 * OBS; m++) {
            uint8_t *hi_p =
                dst + (size_t)(m / OBS) * blk + (size_t)t * 2 * TILE_BYTES + (size_t)(m % OBS) * 64;
            uint8_t *lo_p = hi_p + TILE_BYTES;
            if (m >= rows_ok) {
                _mm512_store_si512(hi_p, _mm512_setzero_si512());
                _mm512_store_si512(lo_p, _mm512_setzero_si512());
                continue;
            }
            const uint8_t *wr = c->w + (size_t)(ob * OBS + m) * c->w_rb + 2 * i;
            if (pf) _mm_prefetch((const char *)(wr + 2 * PREFETCH_ELEMS), _MM_HINT_T0);
            convert_piece(c->type, wr, rem, hi_p, lo_p);
        }
    }
}

/* Row m (0..31) of output blocks ob, ob + 1 (valid1 as above) over K tiles
 * [kc0, kc0 + nkt) into dst, the unit's rows [32][kc_tiles][2: hi, lo][32] bf16
 * (row m's K tiles one after another, 128 bytes each: the stores run on, and the
 * tiles are loaded from it with a stride of a row): one contiguous run of the
 * weight row, prefetched PREFETCH_FEW bytes ahead, the next row's same piece
 * into L2 (decode, few input rows); rows past n_out or the thread's blocks are
 * zeros. */
AMX static void convert_w_row(const amx_ctx *c, int64_t ob, int valid1, int64_t m, int64_t kc0, int64_t nkt,
                              uint8_t *dst)
{
    const int64_t nrow = (valid1 ? 2 * OBS : OBS);
    const int64_t rows_ok = c->n_out - ob * OBS < nrow ? c->n_out - ob * OBS : nrow;
    uint8_t *hi_p = dst + (size_t)m * (size_t)c->kc_tiles * ROW_PIECE;
    if (m >= rows_ok) {
        for (int64_t t = 0; t < nkt; t++, hi_p += ROW_PIECE) {
            _mm512_store_si512(hi_p, _mm512_setzero_si512());
            _mm512_store_si512(hi_p + 64, _mm512_setzero_si512());
        }
        return;
    }
    const uint8_t *wr = c->w + (size_t)(ob * OBS + m) * c->w_rb + (size_t)kc0 * 2 * KT;
    const uint8_t *pf_end = c->w + (size_t)(ob * OBS + m + 1) * c->w_rb; /* no prefetch past the row */
    const int next = m + 1 < rows_ok;
    for (int64_t t = 0; t < nkt; t++, wr += 2 * KT, hi_p += ROW_PIECE) {
        if (wr + PREFETCH_FEW < pf_end) _mm_prefetch((const char *)(wr + PREFETCH_FEW), _MM_HINT_T0);
        if (next) _mm_prefetch((const char *)(wr + c->w_rb), _MM_HINT_T1);
        convert_piece(c->type, wr, c->n_in - (kc0 + t) * KT, hi_p, hi_p + 64);
    }
}

/* ---- tile steps -------------------------------------------------------- */

/* One K tile for output blocks (a0, a1) x token blocks (b0, b1): C tiles 0 (a0,b0),
 * 1 (a0,b1), 2 (a1,b0), 3 (a1,b1). a*: hi tile (rows sa bytes apart), lo tile
 * lo_off bytes after; b*: xh, xl. */
AMX_INLINE void step_2x2(const uint8_t *a0, const uint8_t *a1, size_t sa, size_t lo_off, const uint8_t *b0,
                         const uint8_t *b1, int with_lo)
{
/* the four products of A tiles 4, 5 and B tiles 6, 7 into C tiles 0..3 */
#define DP_2X2()                 \
    do {                         \
        _tile_dpbf16ps(0, 4, 6); \
        _tile_dpbf16ps(1, 4, 7); \
        _tile_dpbf16ps(2, 5, 6); \
        _tile_dpbf16ps(3, 5, 7); \
    } while (0)
    _tile_loadd(4, a0, sa);
    _tile_loadd(5, a1, sa);
    _tile_loadd(6, b0, 64);
    _tile_loadd(7, b1, 64);
    DP_2X2(); /* hi * xh */
    _tile_loadd(6, b0 + TILE_BYTES, 64);
    _tile_loadd(7, b1 + TILE_BYTES, 64);
    DP_2X2(); /* hi * xl */
    if (with_lo) {
        _tile_loadd(4, a0 + lo_off, sa);
        _tile_loadd(5, a1 + lo_off, sa);
        _tile_loadd(6, b0, 64);
        _tile_loadd(7, b1, 64);
        DP_2X2(); /* lo * xh */
    }
#undef DP_2X2
}

/* One K tile for output blocks (a0, a1) x one token block b: C tiles 0 (a0), 1 (a1)
 * (a*, sa, lo_off as above). */
AMX_INLINE void step_2x1(const uint8_t *a0, const uint8_t *a1, size_t sa, size_t lo_off, const uint8_t *b,
                         int with_lo)
{
    _tile_loadd(4, a0, sa);
    _tile_loadd(5, a1, sa);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b + TILE_BYTES, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
    _tile_dpbf16ps(0, 4, 7);
    _tile_dpbf16ps(1, 5, 7);
    if (with_lo) {
        _tile_loadd(4, a0 + lo_off, sa);
        _tile_loadd(5, a1 + lo_off, sa);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 5, 6);
    }
}

/* C tile [16 outputs][N tokens] (stride 64 bytes in tmp) of output block ob and
 * token block tb into y, transposed; outputs past n_out dropped. */
static void scatter_c(const amx_ctx *c, const float *tmp, int64_t ob, int64_t tb)
{
    const int64_t j0 = ob * OBS, nj = c->n_out - j0 < OBS ? c->n_out - j0 : OBS;
    const int64_t t0 = tb * TB, nt = c->nr - t0 < TB ? c->nr - t0 : TB;
    for (int64_t n = 0; n < nt; n++) {
        float *yr = c->y + (c->r0 + t0 + n) * c->ldy + j0;
        for (int64_t m = 0; m < nj; m++) yr[m] = tmp[m * 16 + n];
    }
}

/* C tile t: zero at the first K block, else the parked value; t is a constant. */
#define C_START(t, first, park)         \
    do {                                \
        if (first)                      \
            _tile_zero(t);              \
        else                            \
            _tile_loadd(t, (park), 64); \
    } while (0)

/* C tile t: parked for the next K block, or into y after the last (tmp: 1 KiB). */
#define C_END(t, last, park, ob, tb)                      \
    do {                                                  \
        if (last) {                                       \
            _tile_stored(t, tmp, 64);                     \
            if ((ob) < b1) scatter_c(c, tmp, (ob), (tb)); \
        } else {                                          \
            _tile_stored(t, (park), 64);                  \
        }                                                 \
    } while (0)

AMX static void compute_worker(void *vctx, int ith, int nth)
{
    amx_ctx *c = vctx;
    const int64_t b0 = c->ob_n * ith / nth, b1 = c->ob_n * (ith + 1) / nth;
    if (b0 >= b1) return;
    uint8_t *scr = ith == 0 ? c->scr0 : tpool_scratch(c->pool, ith, c->thr_bytes);
    if (!scr) { /* memory short: this thread's outputs are NaN, never garbage */
        for (int64_t r = 0; r < c->nr; r++)
            for (int64_t j = b0 * OBS; j < b1 * OBS && j < c->n_out; j++)
                c->y[(c->r0 + r) * c->ldy + j] = NAN;
        return;
    }
    uint8_t *wa = scr;                               /* [2][KC_TILES][2][16][32] bf16 */
    uint8_t *cbuf = scr + wa_bytes(c->kc_tiles);     /* [b1 - b0 + 1][n_tb][16][16] f32 */
    float tmp[16 * 16] __attribute__((aligned(64))); /* one C tile on its way to y */
    const int with_lo = c->type == KVI_TYPE_F16;
    const size_t tb_stride = (size_t)c->kt_n * 2 * TILE_BYTES; /* bytes of xb per token block */

    amx_tile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = (uint16_t)(t == 4 || t == 5 ? 64 : 4 * c->n_cols);
    }
    KVI_AMX_STORES_BEFORE_TILE_LOADS();
    _tile_loadconfig(&cfg);

    if (c->n_tb <= 2) { /* few rows: a pipeline of units (output block pair, K block) */
        /* unit u = (pair ob, K block kc0) is converted into half u % 2 of wa, its
         * rows one after another (each row's K block read as one run), while the
         * tiles run the products of unit u - 1, a slice of its K tiles after each
         * converted row; C stays in its tiles over the K blocks of a pair. */
        const size_t half = wa_bytes(c->kc_tiles), rs = (size_t)c->kc_tiles * ROW_PIECE; /* rs: a row in wa */
        const uint8_t *xb1 = c->xb + tb_stride;
        const int64_t kb_n = (c->kt_n + c->kc_tiles - 1) / c->kc_tiles;
        const int64_t n_units = (b1 - b0 + 1) / 2 * kb_n;
        int64_t p_ob = -1, p_kc0 = 0, p_nkt = 0; /* the unit whose products run */
        for (int64_t u = 0; u <= n_units; u++) {
            const int64_t ob = b0 + 2 * (u / kb_n), kc0 = (u % kb_n) * c->kc_tiles;
            const int64_t nkt = u < n_units ? (c->kt_n - kc0 < c->kc_tiles ? c->kt_n - kc0 : c->kc_tiles) : 0;
            uint8_t *dst = wa + (size_t)(u % 2) * half;
            const uint8_t *src = wa + (size_t)((u + 1) % 2) * half;
            if (p_ob >= 0 && p_kc0 == 0) { /* a new pair's products start: C from zero */
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            KVI_AMX_STORES_BEFORE_TILE_LOADS();
            for (int64_t m = 0; m < 2 * OBS; m++) {
                if (u < n_units) convert_w_row(c, ob, ob + 1 < b1, m, kc0, nkt, dst);
                if (p_ob < 0) continue;
                KVI_AMX_STORES_BEFORE_TILE_LOADS();
                for (int64_t t = p_nkt * m / (2 * OBS); t < p_nkt * (m + 1) / (2 * OBS); t++) {
                    const uint8_t *a0 = src + (size_t)t * ROW_PIECE, *a1 = a0 + (size_t)OBS * rs;
                    const size_t xo = (size_t)(p_kc0 + t) * 2 * TILE_BYTES;
                    if (c->n_tb == 2)
                        step_2x2(a0, a1, rs, 64, c->xb + xo, xb1 + xo, with_lo);
                    else
                        step_2x1(a0, a1, rs, 64, c->xb + xo, with_lo);
                }
            }
            if (p_ob >= 0 && p_kc0 + p_nkt == c->kt_n) { /* the pair's last K block: C out */
                if (c->n_tb == 2) {
                    C_END(0, 1, NULL, p_ob, 0);
                    C_END(1, 1, NULL, p_ob, 1);
                    C_END(2, 1, NULL, p_ob + 1, 0);
                    C_END(3, 1, NULL, p_ob + 1, 1);
                } else {
                    C_END(0, 1, NULL, p_ob, 0);
                    C_END(1, 1, NULL, p_ob + 1, 0);
                }
            }
            p_ob = ob;
            p_kc0 = kc0;
            p_nkt = nkt;
        }
        _tile_release();
        return;
    }
    for (int64_t kc0 = 0; kc0 < c->kt_n; kc0 += c->kc_tiles) {
        const int64_t nkt = c->kt_n - kc0 < c->kc_tiles ? c->kt_n - kc0 : c->kc_tiles;
        const int first = kc0 == 0, last = kc0 + nkt == c->kt_n;
        for (int64_t ob = b0; ob < b1; ob += 2) {
            uint8_t *wa1 = wa + (size_t)c->kc_tiles * 2 * TILE_BYTES;
            convert_w_pair(c, ob, ob + 1 < b1, kc0, nkt, wa);
            KVI_AMX_STORES_BEFORE_TILE_LOADS();
            uint8_t *park0 = cbuf + (size_t)(ob - b0) * (size_t)c->n_tb * TILE_BYTES;
            uint8_t *park1 = park0 + (size_t)c->n_tb * TILE_BYTES;
            int64_t tb = 0;
            for (; tb + 2 <= c->n_tb; tb += 2) {
                C_START(0, first, park0 + (size_t)tb * TILE_BYTES);
                C_START(1, first, park0 + (size_t)(tb + 1) * TILE_BYTES);
                C_START(2, first, park1 + (size_t)tb * TILE_BYTES);
                C_START(3, first, park1 + (size_t)(tb + 1) * TILE_BYTES);
                const uint8_t *xb0 = c->xb + (size_t)tb * tb_stride + (size_t)kc0 * 2 * TILE_BYTES;
                for (int64_t t = 0; t < nkt; t++)
                    step_2x2(wa + (size_t)t * 2 * TILE_BYTES, wa1 + (size_t)t * 2 * TILE_BYTES, 64,
                             TILE_BYTES, xb0 + (size_t)t * 2 * TILE_BYTES,
                             xb0 + tb_stride + (size_t)t * 2 * TILE_BYTES, with_lo);
                C_END(0, last, park0 + (size_t)tb * TILE_BYTES, ob, tb);
                C_END(1, last, park0 + (size_t)(tb + 1) * TILE_BYTES, ob, tb + 1);
                C_END(2, last, park1 + (size_t)tb * TILE_BYTES, ob + 1, tb);
                C_END(3, last, park1 + (size_t)(tb + 1) * TILE_BYTES, ob + 1, tb + 1);
            }
            if (tb < c->n_tb) {
                C_START(0, first, park0 + (size_t)tb * TILE_BYTES);
                C_START(1, first, park1 + (size_t)tb * TILE_BYTES);
                const uint8_t *xb0 = c->xb + (size_t)tb * tb_stride + (size_t)kc0 * 2 * TILE_BYTES;
                for (int64_t t = 0; t < nkt; t++)
                    step_2x1(wa + (size_t)t * 2 * TILE_BYTES, wa1 + (size_t)t * 2 * TILE_BYTES, 64,
                             TILE_BYTES, xb0 + (size_t)t * 2 * TILE_BYTES, with_lo);
                C_END(0, last, park0 + (size_t)tb * TILE_BYTES, ob, tb);
                C_END(1, last, park1 + (size_t)tb * TILE_BYTES, ob + 1, tb);
            }
        }
    }
    _tile_release();
}

/* ---- entry ------------------------------------------------------------- */

/* whether the path is on: off until kern_amx_f16_set(1) (kvi_cpu_params.amx_f16) */
static _Atomic int g_on = 0;

void kern_amx_f16_set(int on) { atomic_store(&g_on, on ? 1 : 0); }

int kern_amx_f16_on(void) { return atomic_load(&g_on) && cpu_amx_on(); }

int kern_fmm_amx(tpool *pool, const kern_tensor *W, const float *x, int64_t ldx, int64_t n_rows, float *y,
                 int64_t ldy)
{
    if (!W || (W->type != KVI_TYPE_F16 && W->type != KVI_TYPE_BF16) || W->layout != KVI_LAYOUT_ROWS ||
        n_rows <= 0 || W->n_out <= 0 || !cpu_amx_on())
        return 0;
    amx_ctx c = {
        .type = W->type,
        .w = W->data,
        .w_rb = quant_row_bytes(W->type, W->n_in),
        .n_in = W->n_in,
        .n_out = W->n_out,
        .kt_n = (W->n_in + KT - 1) / KT,
        .ob_n = (W->n_out + OBS - 1) / OBS,
        .x = x,
        .ldx = ldx,
        .y = y,
        .ldy = ldy,
        .pool = pool,
    };
    const int nth = pool ? tpool_size(pool) : 1;
    const int64_t chunk = n_rows < ROW_CHUNK ? n_rows : ROW_CHUNK;
    const int64_t tb_max = (chunk + TB - 1) / TB;
    const size_t xb_bytes = (size_t)tb_max * (size_t)c.kt_n * 2 * TILE_BYTES;
    const int64_t ob_thr =
        (c.ob_n + nth - 1) / nth + 1; /* most blocks a thread holds, + the pair's partner */
    c.kc_tiles = n_rows <= 2 * TB ? KC_TILES_FEW : KC_TILES;
    const size_t cbuf_bytes =
        c.kt_n > c.kc_tiles && tb_max > 2 ? (size_t)ob_thr * (size_t)tb_max * TILE_BYTES : 0;
    c.thr_bytes = (tb_max <= 2 ? 2 : 1) * wa_bytes(c.kc_tiles) + cbuf_bytes;
    uint8_t *own = NULL, *buf;
    if (pool) {
        buf = tpool_scratch(pool, 0, xb_bytes + c.thr_bytes);
    } else {
        if (posix_memalign((void **)&own, 64, xb_bytes + c.thr_bytes) != 0) own = NULL;
        buf = own;
    }
    if (!buf) return 0;
    c.xb = buf;
    c.scr0 = buf + xb_bytes;
    for (c.r0 = 0; c.r0 < n_rows; c.r0 += chunk) {
        c.nr = n_rows - c.r0 < chunk ? n_rows - c.r0 : chunk;
        c.n_tb = (c.nr + TB - 1) / TB;
        c.n_cols = c.nr < TB ? (int)c.nr : TB;
        if (c.nr % TB) /* the last token block's missing tokens are zeros */
            memset(c.xb + (size_t)(c.n_tb - 1) * (size_t)c.kt_n * 2 * TILE_BYTES, 0,
                   (size_t)c.kt_n * 2 * TILE_BYTES);
        if (c.nr <= CONVERT_INLINE_ROWS)
            xb_worker(&c, 0, 1);
        else
            tpool_run(pool, xb_worker, &c);
        tpool_run(pool, compute_worker, &c);
    }
    free(own);
    return 1;
}
