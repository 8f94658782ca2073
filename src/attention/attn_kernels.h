/*
 * attn_kernels.h — the inner kernels of tiled attention (internal to
 * attention*.c): one block of positions against a tile of query vectors, with a
 * scalar reference and AVX2 / AVX-512 builds chosen at run time by the active
 * kernel ISA (kern_isa_active()).
 *
 * Layout ("query lanes"): the nq query vectors of a work item (rows x heads of one
 * KV head group) sit side by side in lanes, nqp = nq rounded up to 16:
 *
 *     qt   [hd][nqp]   query vectors, transposed (padding lanes 0)
 *     k, v [nt][hd]    the block's keys and values as f32 (nt <= block size)
 *     s    [nt][nqp]   scores, then weights e
 *     acc  [hd][nqp]   running weighted sum of values, transposed
 *     m, l [nqp]       running max and running sum
 *     lim  [nqp]       positions 0..lim-1 of the block count for the lane (0: none)
 *
 * Exact semantics (every build gives the same bits, so the result of a lane never
 * depends on the tile it sits in, on the ISA, or on the other lanes):
 *   s[t][i] = (fma chain over d = 0..hd-1 of qt[d][i] * k[t][d], from 0) * scale
 *   b = max of s[t][i] over t < lim[i];  when b > m[i]: c = attn_exp(m[i] - b),
 *       l[i] *= c, acc[.][i] *= c, m[i] = b
 *   e[t][i] = attn_exp(s[t][i] - m[i]) for t < lim[i], else 0
 *   for t = 0..nt-1 in order: l[i] += e[t][i]; acc[d][i] = fma(e[t][i], v[t][d], acc[d][i])
 * (masked terms add an exact zero: acc and l are never -0.)
 * A score of -INFINITY (t < lim) adds the same exact zero: attn_exp(-inf) = 0, the
 * block max ignores it, and e^(-inf - (-inf)) is attn_exp(NaN) = 0; attention.c
 * masks the positions before a lane's window start that way, so a lane's bits do
 * not depend on whether such positions were visited.
 */
#ifndef KVI_ATTENTION_KERNELS_H
#define KVI_ATTENTION_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/threadpool.h"
#include "kvinfer_types.h"

#define ATTN_LANES 16

typedef struct attn_blk {
    int nt, hd, nqp;
    float scale;
    const float *qt;    /* [hd][nqp] */
    const float *k;     /* [nt][hd] */
    const float *v;     /* [nt][hd] */
    const int32_t *lim; /* [nqp] */
    float *s;           /* [nt][nqp] */
    float *m, *l;       /* [nqp] */
    float *acc;         /* [hd][nqp] */
} attn_blk;

/* Position lanes, for tiles of few query vectors (a decode row: group lanes of 16
 * would sit idle). The same per-element operations as above, laid out so that
 * positions fill the lanes of the scores and head dims those of P x V:
 *
 *     q    [nq][hd]   query vectors (nq <= ATTN_POS_MAXQ)
 *     kt   [hd][ld]   keys of a chunk of positions, transposed (ld % 16 == 0)
 *     s    [nq][ld]   scores of the chunk, then (block by block) weights e
 *     v    [nt][hd]   one block's values
 *     acc  [nq][hd]   running weighted sum; m, l, lim [nq]
 *
 * ptrans: kt[d][t] = k[t][d] for t < n, 0 for n <= t < round16(n).
 * pscores: s[i][t] for t < np (np % 16 == 0) as s[t][i] above.
 * pupdate: one block (positions 0..nt-1 of s and v; s already offset to it, row
 *   stride ld): lane i does exactly what `update` does for lane i. With vh set,
 *   the values are read from f16 rows instead (v[t][d] = f16_to_f32(vh[t *
 *   vh_stride + d]), exact), so an f16 cache needs no f32 copy of them.
 * ptrans_f16: kt[d][t] = f16_to_f32(src[t * src_stride + d]) for t < nt, d < hd
 *   (exact): an f16 cache's key rows straight into position lanes; columns
 *   t >= nt are left as they are (the caller pads the chunk's last columns). */
#define ATTN_POS_MAXQ 8

typedef struct attn_pblk {
    int nq, hd, nt, ld;
    const float *v;     /* [nt][hd] (vh == NULL) */
    const uint16_t *vh; /* [nt][vh_stride] f16 values, first hd of each row used; NULL: v */
    size_t vh_stride;
    const int32_t *lim; /* [nq] */
    float *s;           /* [nq][ld], offset to the block */
    float *m, *l;       /* [nq] */
    float *acc;         /* [nq][hd] */
} attn_pblk;

typedef struct attn_kernels {
    /* s = scaled scores of every lane and position t < nt */
    void (*scores)(const attn_blk *b);
    /* online-softmax update of m, l, acc from s (overwritten by the weights) */
    void (*update)(const attn_blk *b);
    /* n f16 values to f32 (exact) */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int n);
    /* position lanes (NULL: the build has none; tiles use the query lanes) */
    void (*ptrans)(const float *k, int n, int hd, float *kt, int ld);
    void (*pscores)(const float *q, int nq, int hd, const float *kt, int ld, int np, float scale, float *s);
    void (*pupdate)(const attn_pblk *b);
    /* elements [off, off + n) of a q8_0 / q4_0 row to f32: exactly kvq_row_slice
     * (level x scale, one product per element) */
    void (*qslice)(kvi_type t, const uint8_t *row, int off, int n, float *dst);
    /* channels [off, off + n) of token i of a KIVI key group: exactly
     * kivi_group_slice (code x scale, then + minimum: two roundings, no fma) */
    void (*kslice)(const uint8_t *region, int kv_dim, int i, int off, int n, float *dst);
    /* nt rows of n f16 values, src_stride values apart, to dst[nt][n] (exact: the
     * bits of f16_to_f32 per row); NULL: f16_to_f32 row by row */
    void (*f16_rows)(const uint16_t *src, size_t src_stride, int nt, int n, float *dst);
    /* f16 key rows to position lanes (NULL: f16_rows, then ptrans) */
    void (*ptrans_f16)(const uint16_t *src, size_t src_stride, int nt, int hd, float *kt, int ld);
} attn_kernels;

/* The table of the active ISA (kernels.h kern_isa_active). */
const attn_kernels *attn_kernels_active(void);
/* The build that attention run on this pool takes (its kern_cfg, kernels.h). */
const attn_kernels *attn_kernels_of(const tpool *pool);
extern const attn_kernels attn_kernels_scalar;
extern const attn_kernels attn_kernels_avx2;
extern const attn_kernels attn_kernels_avx512;

/* e^x for the softmax, the same bits in every build: 0 below -87 (and for NaN),
 * x clamped at 88; n = round-to-even(x log2 e), r = x - n ln2 (two fma), a
 * degree-6 Taylor polynomial in Horner form by fma, times 2^n. */
#define ATTN_LOG2E 1.44269504088896341f
#define ATTN_LN2_HI 0.693145751953125f
#define ATTN_LN2_LO 1.42860682030941723212e-6f
#define ATTN_C6 1.38888889e-3f
#define ATTN_C5 8.33333333e-3f
#define ATTN_C4 4.16666667e-2f
#define ATTN_C3 1.66666667e-1f
#define ATTN_C2 0.5f

static inline float attn_exp(float x)
{
    if (!(x >= -87.0f)) return 0.0f;
    if (x > 88.0f) x = 88.0f;
    const float n = rintf(x * ATTN_LOG2E);
    float r = fmaf(n, -ATTN_LN2_HI, x);
    r = fmaf(n, -ATTN_LN2_LO, r);
    float p = fmaf(ATTN_C6, r, ATTN_C5);
    p = fmaf(p, r, ATTN_C4);
    p = fmaf(p, r, ATTN_C3);
    p = fmaf(p, r, ATTN_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float sc;
    memcpy(&sc, &bits, sizeof sc);
    return p * sc;
}

#endif
