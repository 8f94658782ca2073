/*
 * qgemm_amx.c — Q8_0 / Q4_0 weights times many quantised activation rows
 * with AMX-INT8 tiles (TDPBSSD), in q8.h's contract: the bits of
 * kern_qgemm_ref, whatever the rows, tiles or threads.
 *
 * One 16 x 16 output tile (16 activation rows x 16 weight rows) per step, one
 * 32-input block at a time: TDPBSSD multiplies the rows' block (A tile: 16 rows x
 * 32 signed bytes, from the activations as 16-row tiles, a->xt, q8.h) by
 * the weight rows' block (B tile: 8 rows x 64 bytes, row k = for each weight row
 * n the four signed levels 4k..4k+3) into 16 x 16 exact int32 sums isum_b. The
 * sums go to memory (TILESTORED) and each output takes
 *     acc = fma(dw_b * dx_b, (float)isum_b, acc)
 * block by block in order, its accumulator in a zmm register (16 rows = 16 zmm):
 * the contract's steps. Two C tiles alternate, and the float steps of a pair of
 * blocks run while the next pair's products do (row_tile_chunk).
 *
 * Data: per (16-output tile, chunk of blocks), the weights are packed once into
 * the scratch, PACKED_BLOCK bytes per block: the B tile (levels as signed bytes:
 * Q8_0 as stored, Q4_0 nibble - 8), then dw as 16 f32. Every row tile then runs
 * over the packed chunk (L1-resident). Chunks of the inputs keep the activation
 * tiles of every row (n_tiles x chunk x KVI_Q8_TILE_BLOCK bytes) within ACT_CHUNK_BYTES, so
 * they stay in L2 while all the output tiles use them; accumulators go through
 * y between chunks (an exact f32 store and load). The last row tile's rows past
 * n_rows are zero in a->xt: computed, never stored.
 *
 * Direct (R16 Q8_0, at most DIRECT_TILES_MAX row tiles: decode batches): packing
 * would cost as much as the products, so the B tiles are read in place from the
 * R16 tile (levels + 128, unsigned: TDPBSUD, signed x unsigned) and each C tile
 * starts from a correction tile (row m = -128 * the row's sum of quants, built
 * once per chunk in the scratch), so C ends as the same exact isum_b.
 *
 * Weights come from the R16 layout (r16_pack.h; the quants are already B
 * tiles) or from rows (16 rows transposed in registers, vnni_avx512.h).
 * Invariants: reads only weight rows [j0, j1) (a short last tile repeats its last
 * row and drops the duplicates) and the activation tiles; writes only
 * y[r][j0..j1); loads its own tile configuration and releases the tiles before
 * returning (cpu.h).
 */
#include "kernels/isa_target.h"
#include "kernels/qgemm_amx.h"

#include "base/cpu.h"
#include "kernels/tiles_amx.h"
#include "kernels/vnni_avx512.h"

#include <immintrin.h>
#include <stdalign.h>

#define AMX_Q8 KVI_TARGET_AMX_INT8
#define AMX_INLINE AMX_Q8 __attribute__((always_inline)) static inline

#define PACKED_BLOCK 576             /* B tile (8 x 64 bytes), then 16 f32 dw */
#define ACT_CHUNK_BYTES (768 * 1024) /* activations of one chunk, every row */
#define DIRECT_TILES_MAX 2           /* R16 Q8_0 with at most this many row tiles: no packing */
#define DIRECT_PF_BYTES 1024         /* direct: weights prefetched this far ahead */

/* tile registers */
#define TC0 0 /* C: isum of an even block, 16 x 16 int32 */
#define TC1 1 /* C: the odd block's */
#define TA0 2 /* A: 16 rows x 32 activation bytes */
#define TA1 3
#define TB0 4 /* B: 8 x 64 weight bytes */
#define TB1 5

/* The tile shapes above (a constant object: _tile_loadconfig tells the compiler
 * it reads only the first bytes, so no stores to it may be pending). */
static const amx_tile_cfg tile_cfg = {
    .palette = 1,
    .colsb = { [TC0] = 64, [TC1] = 64, [TA0] = 32, [TA1] = 32, [TB0] = 64, [TB1] = 64 },
    .rows = { [TC0] = 16, [TC1] = 16, [TA0] = 16, [TA1] = 16, [TB0] = 8, [TB1] = 8 },
};

/* Blocks kb0 .. kb0 + nk - 1 of the R16 tile with outputs jt .. jt + 15. */
AMX_INLINE void pack_r16(const kern_qgemm_args *a, int64_t jt, int64_t kb0, int64_t nk, uint8_t *packed)
{
    const bool q8 = a->type == KVI_TYPE_Q8_0;
    const size_t qb = q8 ? 512 : 256, pair = 64 + 2 * qb; /* bytes per block's quants, per block pair */
    const uint8_t *tile = a->w + (size_t)jt * a->w_rb;
    const __m512i flip = _mm512_set1_epi8((char)0x80), lo = _mm512_set1_epi8(0x0f),
                  eight = _mm512_set1_epi8(8);
    for (int64_t b = 0; b < nk; b++) {
        const int64_t blk = kb0 + b;
        const uint8_t *p = tile + (size_t)(blk / 2) * pair;
        const uint8_t *qs = p + 64 + (size_t)(blk & 1) * qb;
        uint8_t *o = packed + (size_t)b * PACKED_BLOCK;
        if (q8) {
            for (int k = 0; k < 8; k++)
                _mm512_store_si512((void *)(o + 64 * k),
                                   _mm512_xor_si512(_mm512_loadu_si512((const void *)(qs + 64 * k)), flip));
        } else {
            for (int k = 0; k < 4; k++) {
                const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * k));
                _mm512_store_si512((void *)(o + 64 * k), _mm512_sub_epi8(_mm512_and_si512(v, lo), eight));
                _mm512_store_si512((void *)(o + 64 * (k + 4)),
                                   _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), lo), eight));
            }
        }
        _mm512_store_ps((float *)(o + 512),
                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32 * (blk & 1)))));
    }
}

/* The same from the rows layout: outputs jt .. jt + nv - 1 (rows past the end
 * repeat the last one). */
AMX_INLINE void pack_rows(const kern_qgemm_args *a, int64_t jt, int nv, int64_t kb0, int64_t nk,
                          uint8_t *packed)
{
    const bool q8 = a->type == KVI_TYPE_Q8_0;
    const size_t bb = quant_block_bytes(a->type);
    const __m512i lo = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    tile16 tl;
    tile_init(&tl, a, jt, nv);
    for (int64_t b = 0; b < nk; b++) {
        const size_t off = (size_t)(kb0 + b) * bb;
        uint8_t *o = packed + (size_t)b * PACKED_BLOCK;
        __m512i W[8];
        transpose16x4(tl.p, off + 2, W);
        if (q8) {
            transpose16x4(tl.p, off + 18, W + 4);
        } else { /* low nibbles are inputs 0..15, high nibbles 16..31 */
            for (int k = 0; k < 4; k++) {
                W[k + 4] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(W[k], 4), lo), eight);
                W[k] = _mm512_sub_epi8(_mm512_and_si512(W[k], lo), eight);
            }
        }
        for (int k = 0; k < 8; k++) _mm512_store_si512((void *)(o + 64 * k), W[k]);
        _mm512_store_ps((float *)(o + 512), scales16(&tl, off, 0));
    }
}

/* acc[m] = fma(dw * dx[m], (float)isum[m], acc[m]) for the 16 rows of one block:
 * isum the stored C tile, ab the rows' tile block (dx at byte 512 + 4m). */
AMX_INLINE void block_floats(const int32_t (*isum)[16], __m512 dw, const uint8_t *ab, __m512 *acc)
{
    const float *dx = (const float *)(ab + 512);
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++)
        acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[m])),
                                 _mm512_cvtepi32_ps(_mm512_load_si512((const void *)isum[m])), acc[m]);
}

/* Where one chunk's weights come from: packed (B tiles of signed levels, dw as
 * f32), or (direct) the R16 Q8_0 tile in place (levels + 128 as unsigned bytes,
 * dw as f16), with cor the chunk's correction tiles of the row tile. */
typedef struct wsrc {
    const uint8_t *packed; /* [nk][PACKED_BLOCK] */
    const uint8_t *tile;   /* direct: the R16 tile */
    const uint8_t *cor;    /* direct: [nk][16][16] i32, row m = -128 * sum(x quants of row m) */
    int64_t kb0;           /* direct: the chunk's first block */
} wsrc;

AMX_INLINE const uint8_t *b_tile(const wsrc *w, int64_t b, bool direct)
{
    if (!direct) return w->packed + (size_t)b * PACKED_BLOCK;
    const int64_t blk = w->kb0 + b;
    return w->tile + (size_t)(blk / 2) * 1088 + 64 + (size_t)(blk & 1) * 512;
}

AMX_INLINE __m512 b_scales(const wsrc *w, int64_t b, bool direct)
{
    if (!direct) return _mm512_load_ps((const float *)(w->packed + (size_t)b * PACKED_BLOCK + 512));
    const int64_t blk = w->kb0 + b;
    return _mm512_cvtph_ps(
        _mm256_loadu_si256((const __m256i *)(w->tile + (size_t)(blk / 2) * 1088 + 32 * (blk & 1))));
}

/* Block b into C tile c from A tile ta and B tile tb. Packed: C from zero, signed x
 * signed. Direct: C from the correction tile, signed x unsigned, so C = isum. The
 * weights of a few blocks ahead are prefetched (direct: they come from memory). */
#define TILE_PRODUCT(c, ta, tb, b)                                                                   \
    do {                                                                                             \
        _tile_loadd(ta, xa + (size_t)(b)*KVI_Q8_TILE_BLOCK, 32);                                     \
        _tile_loadd(tb, b_tile(w, (b), direct), 64);                                                 \
        if (direct) {                                                                                \
            _mm_prefetch((const char *)b_tile(w, (b), direct) + DIRECT_PF_BYTES, _MM_HINT_T0);       \
            _mm_prefetch((const char *)b_tile(w, (b), direct) + DIRECT_PF_BYTES + 256, _MM_HINT_T0); \
            _tile_loadd(c, w->cor + (size_t)(b)*1024, 64);                                           \
            _tile_dpbsud(c, ta, tb);                                                                 \
        } else {                                                                                     \
            _tile_zero(c);                                                                           \
            _tile_dpbssd(c, ta, tb);                                                                 \
        }                                                                                            \
    } while (0)

/* Blocks 0 .. nk - 1 of the chunk (weights w) times one row tile's chunk xa (its
 * block 0), into acc[16]. Block b's product goes to C0 (b even) or C1 (b odd).
 * Per pair of blocks: store both sums (to isum[pair parity]), start the next
 * pair's products, then run the float steps of the PREVIOUS pair, whose sums
 * were stored one iteration earlier (the stores have left the core by then, so
 * the loads do not wait on them); blocks stay in order. */
AMX_INLINE void row_tile_chunk(const wsrc *w, const uint8_t *xa, int64_t nk, __m512 *acc, const bool direct)
{
    alignas(64) int32_t isum[2][2][16][16]; /* [pair parity][C0, C1][row][output] */
    const int64_t np = (nk + 1) / 2;
    TILE_PRODUCT(TC0, TA0, TB0, 0);
    if (nk > 1) TILE_PRODUCT(TC1, TA1, TB1, 1);
    for (int64_t i = 0; i < np; i++) {
        const int64_t b = 2 * i;
        _tile_stored(TC0, isum[i & 1][0], 64);
        if (b + 1 < nk) _tile_stored(TC1, isum[i & 1][1], 64);
        if (b + 2 < nk) TILE_PRODUCT(TC0, TA0, TB0, b + 2);
        if (b + 3 < nk) TILE_PRODUCT(TC1, TA1, TB1, b + 3);
        if (i > 0) { /* the previous pair: two full blocks */
            const int64_t pb = b - 2;
            block_floats((const int32_t(*)[16])isum[(i - 1) & 1][0], b_scales(w, pb, direct),
                         xa + (size_t)pb * KVI_Q8_TILE_BLOCK, acc);
            block_floats((const int32_t(*)[16])isum[(i - 1) & 1][1], b_scales(w, pb + 1, direct),
                         xa + (size_t)(pb + 1) * KVI_Q8_TILE_BLOCK, acc);
        }
    }
    const int64_t lb = 2 * (np - 1); /* the last pair (one block when nk is odd) */
    block_floats((const int32_t(*)[16])isum[(np - 1) & 1][0], b_scales(w, lb, direct),
                 xa + (size_t)lb * KVI_Q8_TILE_BLOCK, acc);
    if (lb + 1 < nk)
        block_floats((const int32_t(*)[16])isum[(np - 1) & 1][1], b_scales(w, lb + 1, direct),
                     xa + (size_t)(lb + 1) * KVI_Q8_TILE_BLOCK, acc);
}

/* One 16-output tile (mask m) of row tile t over the chunk kb0 .. kb0 + nk - 1:
 * accumulators from y (0 in the first chunk), back to y; rows past n_rows are
 * computed (zero tiles) and not stored. */
AMX_INLINE void out_tile(const kern_qgemm_args *a, const wsrc *w, int64_t jt, __mmask16 m, int64_t t,
                         int64_t kb0, int64_t nk, const bool direct)
{
    const int nr = a->n_rows - 16 * t < 16 ? (int)(a->n_rows - 16 * t) : 16;
    float *y = a->y + 16 * t * a->ldy + jt;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        acc[r] = kb0 == 0 || r >= nr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + r * a->ldy);
    const int64_t nb = a->n_in / 32;
    row_tile_chunk(w, a->xt + (size_t)(t * nb + kb0) * KVI_Q8_TILE_BLOCK, nk, acc, direct);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        if (r < nr) _mm512_mask_storeu_ps(y + r * a->ldy, m, acc[r]);
}

AMX_Q8 static void out_tile_packed(const kern_qgemm_args *a, const wsrc *w, int64_t jt, __mmask16 m,
                                   int64_t t, int64_t kb0, int64_t nk)
{
    out_tile(a, w, jt, m, t, kb0, nk, false);
}

AMX_Q8 static void out_tile_direct(const kern_qgemm_args *a, const wsrc *w, int64_t jt, __mmask16 m,
                                   int64_t t, int64_t kb0, int64_t nk)
{
    out_tile(a, w, jt, m, t, kb0, nk, true);
}

/* The correction tiles of row tile t, blocks kb0 .. kb0 + nk - 1, into cor
 * ([nk][16][16] i32: row m = -128 * the row's sum of quants). */
AMX_Q8 static void build_cor(const kern_qgemm_args *a, int64_t t, int64_t kb0, int64_t nk, uint8_t *cor)
{
    const int64_t nb = a->n_in / 32;
    for (int64_t b = 0; b < nk; b++) {
        const int32_t *sx = (const int32_t *)(a->xt + (size_t)(t * nb + kb0 + b) * KVI_Q8_TILE_BLOCK + 576);
        for (int m = 0; m < 16; m++)
            _mm512_store_si512((void *)(cor + (size_t)b * 1024 + 64 * m), _mm512_set1_epi32(-128 * sx[m]));
    }
}

AMX_Q8 static void qgemm_amx(const kern_qgemm_args *a, bool r16)
{
    const int64_t nb = a->n_in / 32, n_tiles = (a->n_rows + 15) / 16;
    /* direct: the correction tiles of kc blocks, n_tiles * kc * 1024 bytes, fill the scratch */
    const int64_t kc_direct = (int64_t)(KVI_QGEMM_SCRATCH(a->n_in) / ((size_t)n_tiles * 1024));
    const bool direct = r16 && a->type == KVI_TYPE_Q8_0 && n_tiles <= DIRECT_TILES_MAX && kc_direct >= 1;
    int64_t kc = direct ? kc_direct : (int64_t)(ACT_CHUNK_BYTES / ((size_t)n_tiles * KVI_Q8_TILE_BLOCK));
    if (kc < 1) kc = 1; /* packed: kc * PACKED_BLOCK <= nb * 576 < KVI_QGEMM_SCRATCH */
    if (kc > nb) kc = nb;
    _tile_loadconfig(&tile_cfg);
    wsrc w = { .packed = a->scratch };
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kc) {
        const int64_t nk = nb - kb0 < kc ? nb - kb0 : kc;
        if (direct) {
            for (int64_t t = 0; t < n_tiles; t++)
                build_cor(a, t, kb0, nk, (uint8_t *)a->scratch + (size_t)(t * kc) * 1024);
            KVI_AMX_STORES_BEFORE_TILE_LOADS();
        }
        for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
            const int nv = a->j1 - jt < 16 ? (int)(a->j1 - jt) : 16;
            const __mmask16 m = (__mmask16)((1u << nv) - 1);
            if (direct) {
                w.tile = a->w + (size_t)jt * a->w_rb;
                w.kb0 = kb0;
                for (int64_t t = 0; t < n_tiles; t++) {
                    w.cor = (const uint8_t *)a->scratch + (size_t)(t * kc) * 1024;
                    out_tile_direct(a, &w, jt, m, t, kb0, nk);
                }
                continue;
            }
            if (r16)
                pack_r16(a, jt, kb0, nk, a->scratch);
            else
                pack_rows(a, jt, nv, kb0, nk, a->scratch);
            KVI_AMX_STORES_BEFORE_TILE_LOADS();
            for (int64_t t = 0; t < n_tiles; t++) out_tile_packed(a, &w, jt, m, t, kb0, nk);
        }
    }
    _tile_release();
}

bool kern_qgemm_amx_q8_wanted(kvi_type t, bool r16, int64_t n_rows, int64_t n_in)
{
    const int64_t min_rows = r16 && t == KVI_TYPE_Q8_0 ? KVI_AMX_Q8_MIN_ROWS_DIRECT : KVI_AMX_Q8_MIN_ROWS;
    return (t == KVI_TYPE_Q8_0 || t == KVI_TYPE_Q4_0) && n_rows >= min_rows && n_in >= 32 &&
           n_in % (r16 ? 64 : 32) == 0 && kern_has_vnni() && cpu_amx_on();
}

int kern_qgemm_amx_q8(const kern_qgemm_args *a, bool r16)
{
    if (!kern_qgemm_amx_q8_wanted(a->type, r16, a->n_rows, a->n_in) || !a->scratch || !a->xt) return 0;
    if (((uintptr_t)a->scratch & 63) || ((uintptr_t)a->xt & 63)) return 0; /* aligned stores and tile rows */
    if (r16 && (a->j0 % 16 != 0 || a->j1 % 16 != 0)) return 0;
    if (a->j0 >= a->j1) return 1;
    if (a->w_rb > (size_t)INT32_MAX / 16) return 0; /* gather offsets are int32 */
    qgemm_amx(a, r16);
    return 1;
}
