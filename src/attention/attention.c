/*
 * attention.c — tiled causal attention with online softmax over paged KV
 * (contract in attention.h; block kernels in attn_kernels.h).
 *
 * Work item = (row tile, kv head g). A row tile is up to `rmax` consecutive
 * batch rows of the same sequence (same table), rmax * group <= 128 query lanes
 * (group = n_heads / n_kv_heads query heads share one kv head: GQA); a row with
 * a received-attention array (H2O) is a tile of its own. For one item the thread
 * walks the blocks 0 .. (max position of the tile) / block_size in order; each
 * block's K and V slices of kv head g are converted to f32 once
 * ([nt][head_dim] each) and used by every (row, head) lane of the tile:
 *     s_t = q . k_t * scale,  m' = max(m, max_t s_t),  acc = acc e^(m - m') + ...
 * exactly as attn_kernels.h states it, lane by lane, with lim = the number
 * of the block's positions that the lane's row sees (0 past its position). The
 * operations a (row, head) output goes through do not depend on the other lanes,
 * on the tile size, on the thread or on the ISA: a row alone and the row inside
 * any batch give the same bits, and so do prefill and token-by-token decode.
 *
 * Tiles come straight from the cached format (f16/f32/q8_0/q4_0 rows by the
 * kernel table's f16_to_f32 / qslice, exact; a KIVI group's codes by kslice, or
 * its f16 rows from the table's tail or the batch stash while the group is
 * incomplete at the row's position). When a KIVI block is seen quantised by some rows of a tile and in
 * f16 by others, the block goes through the kernels twice, each lane taking part
 * in exactly one of the two passes (lim = 0 in the other leaves it unchanged).
 *
 * Tiles of at most ATTN_POS_MAXQ query vectors (decode rows: one row under GQA
 * fills `group` of 16 query lanes) go, when the ISA has them (and for KIVI keys
 * when the tile is one row), through the position-lane kernels instead
 * (attend_pos): the keys of a chunk of pcb blocks are transposed, the chunk's
 * scores computed with positions in lanes, then each block's update with head
 * dims in lanes; the per-element operations are those above, so the bits are the
 * same. An f16 cache's key rows go straight into position lanes (ptrans_f16) and
 * its values are read as f16 by pupdate: no f32 copies. The first chunk's K/V
 * slices are prefetched all at once when the item starts; later ones a block
 * (values) and a chunk (row keys) ahead: the KV stream comes from memory in strided 128-byte pieces, and a
 * serving step's short rows would otherwise wait on each block's misses in turn.
 *
 * Chunked path (row-type caches, tiles of more than 16 query vectors: prefill):
 * tiles grow to ATTN_BIG_LANES query vectors (128 rows under GQA 4), so the KV
 * stream of a prefill chunk is read once per 128 rows. The K and V slices of a
 * chunk of pcb blocks (128 positions) are converted once for the tile; each
 * sub-tile of ATTN_SUB_LANES lanes then runs the chunk's blocks in order with its
 * own qt, acc, m, l (laid out [hd][32] at lane offset * hd, L1-resident), skipping
 * the blocks none of its rows sees (they would add exact zeros). Every lane still
 * goes through the operations above, block by block: the same bits.
 *
 * Threads take items from a shared counter, the last tiles (the longest rows of
 * a prefill) first, so neither thread idles at the end; an output is written by
 * one item only, so the split never changes a bit.
 *
 * Window, softcap, sinks (attention.h): an item starts at the block of the
 * smallest window start of its rows (the chunked path's sub-tiles also skip the
 * blocks before all of their rows' windows), so earlier blocks are never touched
 * and a row costs its window. After the scores kernel a scalar post-pass
 * (post_lanes, post_pos) applies the softcap (tanhf, the same call per element on
 * every path) and sets the scores before a lane's window start to -inf, which the
 * update kernels turn into exact zeros (attn_kernels.h): a lane gives the same bits
 * whether or not the positions before its window were visited, so a row alone, in
 * any tile or chunk, on any ISA gives the same bits. A sink is folded in once after
 * a lane's last block (sink_fold), before the output and H2O's second pass.
 *
 * Received attention (H2O): the single-row item of a row with recv[r] covers all
 * its kv heads in order, and after each head's online pass a second pass over the
 * K tiles recomputes each score with the same kernel and adds e^(s - m) / l to
 * recv[r][t], heads in order: deterministic, and nothing is paid by other rows.
 */
#include "attention/attention.h"

#include "attention/attn_kernels.h"
#include "kernels/kernels.h"
#include "base/prof.h"
#include "kv/kv_quant.h"
#include "formats/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_MAX_LANES 128 /* query vectors of one tile (rows x group) */
#define ATTN_BIG_LANES 512 /* the same on the chunked path (row-type caches) */
#define ATTN_SUB_LANES 32  /* chunked path: lanes of a sub-tile (its qt, acc, s stay in L1) */
#define ATTN_CLAIM \
    2 /* items a thread takes at once (2: -35% decode attention in bench_attn_decode, +2-3% serving at 16 streams) */
#define PF_V_BLOCKS 1 /* position lanes: values prefetched this many blocks ahead */

struct attn_scratch {
    int n_threads;
    size_t floats_per_thread;
    float *buf; /* [n_threads][floats_per_thread] */
    int block_size, head_dim, group, kv_dim;
    int rmax;       /* rows per tile: max(1, ATTN_MAX_LANES / group) */
    int rmax_big;   /* rows per tile on the chunked path: max(1, ATTN_BIG_LANES / group) */
    int nqp_max;    /* lanes of the largest tile, a multiple of 16 */
    int pcb;        /* position lanes: blocks per chunk of scores, max(1, 128 / block_size) */
    int pld;        /* positions of a chunk, rounded up to 16 */
    int32_t *tiles; /* [tiles_cap] first batch row of each tile, then n_rows */
    size_t tiles_cap;
};

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Per-thread layout (each part 64-byte aligned):
 *   qt [hd][nqp_max] | s [bs][nqp_max] | acc [hd][nqp_max] | m [nqp_max] | l [nqp_max]
 *   | lim [nqp_max] int32 | k [bs][hd] | v [bs][hd]
 *   | position lanes (Q = ATTN_POS_MAXQ): kc [pld][hd] | kt [hd][pld] | ps [Q][pld]
 *   (the chunked path: kc, vc [pld][hd] keys and values of a chunk)
 *   | pq [Q][hd] | pacc [Q][hd] | pm, pl, plim [16] */
attn_scratch *attn_scratch_create(int n_threads, int block_size, int head_dim, int n_heads, int n_kv_heads,
                                  int kv_dim)
{
    if (n_threads < 1 || block_size < 1 || head_dim < 1 || n_kv_heads < 1 || n_heads < n_kv_heads)
        return NULL;
    attn_scratch *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_threads = n_threads;
    s->block_size = block_size;
    s->head_dim = head_dim;
    s->group = n_heads / n_kv_heads;
    s->kv_dim = kv_dim;
    s->rmax = s->group < ATTN_MAX_LANES ? ATTN_MAX_LANES / s->group : 1;
    s->rmax_big = s->group < ATTN_BIG_LANES ? ATTN_BIG_LANES / s->group : 1;
    s->nqp_max = (int)up16((size_t)s->rmax_big * s->group);
    const size_t nq = (size_t)s->nqp_max, hd = (size_t)head_dim, bs = (size_t)block_size;
    s->pcb = block_size < 128 ? 128 / block_size : 1;
    s->pld = (int)up16((size_t)s->pcb * bs);
    const size_t pld = (size_t)s->pld, pq = ATTN_POS_MAXQ;
    s->floats_per_thread = up16(hd * nq) + up16(bs * nq) + up16(hd * nq) + 3 * nq + 2 * up16(bs * hd) +
                           3 * up16(pld * hd) + up16(pq * pld) + 2 * up16(pq * hd) + 3 * 16;
    s->buf = aligned_alloc(64, (size_t)n_threads * s->floats_per_thread * sizeof(float));
    if (!s->buf) {
        free(s);
        return NULL;
    }
    return s;
}

void attn_scratch_free(attn_scratch *s)
{
    if (!s) return;
    free(s->tiles);
    free(s->buf);
    free(s);
}

/* One thread's view of its scratch for a tile of nqp lanes. */
typedef struct attn_work {
    const attn_kernels *kn;
    attn_blk b;
    float *ktile, *vtile; /* [bs][hd] */
    int32_t *lim;         /* [nqp_max] */
    /* position lanes */
    float *kc;        /* [pld][hd] keys of a chunk */
    float *vc;        /* [pld][hd] values of a chunk (chunked path) */
    float *kt;        /* [hd][pld] the same, transposed */
    float *ps;        /* [ATTN_POS_MAXQ][pld] scores, weights */
    float *pq, *pacc; /* [ATTN_POS_MAXQ][hd] */
    float *pm, *pl;   /* [16] */
    int32_t *plim;    /* [16] */
} attn_work;

static void work_init(attn_work *w, const attn_scratch *s, float *base, const attn_kernels *kn)
{
    const size_t nq = (size_t)s->nqp_max, hd = (size_t)s->head_dim, bs = (size_t)s->block_size;
    memset(w, 0, sizeof *w);
    w->kn = kn;
    float *p = base;
    w->b.qt = p;
    p += up16(hd * nq);
    w->b.s = p;
    p += up16(bs * nq);
    w->b.acc = p;
    p += up16(hd * nq);
    w->b.m = p;
    p += nq;
    w->b.l = p;
    p += nq;
    w->lim = (int32_t *)p;
    w->b.lim = w->lim;
    p += nq;
    w->ktile = p;
    p += up16(bs * hd);
    w->vtile = p;
    p += up16(bs * hd);
    const size_t pld = (size_t)s->pld, pq = ATTN_POS_MAXQ;
    w->kc = p;
    p += up16(pld * hd);
    w->vc = p;
    p += up16(pld * hd);
    w->kt = p;
    p += up16(pld * hd);
    w->ps = p;
    p += up16(pq * pld);
    w->pq = p;
    p += up16(pq * hd);
    w->pacc = p;
    p += up16(pq * hd);
    w->pm = p;
    p += 16;
    w->pl = p;
    p += 16;
    w->plim = (int32_t *)p;
    w->b.hd = s->head_dim;
}

/* Rows [nt][hd] of kv head g of a row-type cache (K when which == 0), block j. */
static void load_rows(const attn_args *a, const attn_work *w, const kv_table *t, int which, int32_t j, int nt,
                      int g, float *dst)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, off = g * hd;
    const kvi_type ty = which ? kv->type_v : kv->type_k;
    const int32_t t0 = j * kv->block_size;
    if (ty == KVI_TYPE_F16 && w->kn->f16_rows && nt > 0) { /* the block's rows lie row_bytes apart */
        const uint8_t *row0 = which ? kv_v_row(kv, t, a->layer, t0) : kv_k_row(kv, t, a->layer, t0);
        const size_t stride = (which ? kv->row_bytes_v : kv->row_bytes_k) / sizeof(uint16_t);
        w->kn->f16_rows((const uint16_t *)row0 + off, stride, nt, hd, dst);
        return;
    }
    for (int i = 0; i < nt; i++) {
        const uint8_t *row = which ? kv_v_row(kv, t, a->layer, t0 + i) : kv_k_row(kv, t, a->layer, t0 + i);
        float *d = dst + (size_t)i * hd;
        if (ty == KVI_TYPE_F16)
            w->kn->f16_to_f32((const uint16_t *)row + off, d, hd);
        else if (ty == KVI_TYPE_F32)
            memcpy(d, (const float *)row + off, (size_t)hd * sizeof(float));
        else
            w->kn->qslice(ty, row, off, hd, d);
    }
}

/* Hints the cache to fetch the slices of kv head g of positions [p0, p1) (K when
 * which == 0) of a row-type cache: at depth, the KV stream of a decode row comes
 * from memory, and the rows of a head's slice are too far apart for the hardware
 * prefetcher. */
static void prefetch_rows(const attn_args *a, const kv_table *t, int which, int32_t p0, int32_t p1, int g)
{
    const kv_pool *kv = a->kv;
    const kvi_type ty = which ? kv->type_v : kv->type_k;
    const size_t off = quant_row_bytes(ty, (int64_t)g * a->head_dim), n = quant_row_bytes(ty, a->head_dim);
    const size_t stride = which ? kv->row_bytes_v : kv->row_bytes_k;
    const int32_t bs = kv->block_size;
    for (int32_t p = p0; p < p1;) {
        /* one block's rows lie `stride` apart: one table look-up per block, one
         * hint per 64-byte line the slice touches */
        const int32_t be = (p / bs + 1) * bs < p1 ? (p / bs + 1) * bs : p1;
        const uint8_t *row = (which ? kv_v_row(kv, t, a->layer, p) : kv_k_row(kv, t, a->layer, p)) + off;
        for (; p < be; p++, row += stride) {
            const uintptr_t last = (uintptr_t)(row + n - 1);
            for (uintptr_t c = (uintptr_t)row & ~(uintptr_t)63; c <= last; c += 64)
                __builtin_prefetch((const void *)c, 0, 2);
        }
    }
}

/* KIVI keys of block j, kv head g: the f16 rows f when given, else the codes. */
static void load_kivi(const attn_args *a, const attn_work *w, const kv_table *t, int32_t j, int nt, int g,
                      const quant_f16 *f, float *dst)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, kvd = kv->kv_dim, off = g * hd;
    if (f) {
        for (int i = 0; i < nt; i++) w->kn->f16_to_f32(f + (size_t)i * kvd + off, dst + (size_t)i * hd, hd);
        return;
    }
    const uint8_t *region = kv_k_group(kv, t, a->layer, j);
    for (int i = 0; i < nt; i++) w->kn->kslice(region, kvd, i, off, hd, dst + (size_t)i * hd);
}

/* Sets lim for the lanes of rows [r0, r0 + nr) over block start t0 (nt positions
 * at most), keeping only rows whose position is >= from (sel > 0), < from (sel < 0)
 * or all (sel == 0). Returns the largest lim. */
static int set_lim(const attn_args *a, attn_work *w, int r0, int nr, int group, int32_t t0, int nt, int sel,
                   int32_t from)
{
    int most = 0;
    for (int rr = 0; rr < nr; rr++) {
        const int32_t p = a->pos[r0 + rr];
        int64_t n = (int64_t)p - t0 + 1;
        if (n < 0) n = 0;
        if (n > nt) n = nt;
        if ((sel > 0 && p < from) || (sel < 0 && p >= from)) n = 0;
        for (int j = 0; j < group; j++) w->lim[rr * group + j] = (int32_t)n;
        if (n > most) most = (int)n;
    }
    return most;
}

/* First position row r sees: max(0, pos - window + 1) with a window, else 0; with
 * a chunk no earlier than the chunk's first position (attention.h). */
static int32_t win_start(const attn_args *a, int r)
{
    int64_t w = a->window > 0 ? (int64_t)a->pos[r] - a->window + 1 : 0;
    if (a->chunk > 0 && a->pos[r] - a->pos[r] % a->chunk > w) w = a->pos[r] - a->pos[r] % a->chunk;
    return w > 0 ? (int32_t)w : 0;
}

/* Smallest and largest window start of rows [r0, r0 + nr). */
static void win_range(const attn_args *a, int r0, int nr, int32_t *wmin, int32_t *wmax)
{
    *wmin = *wmax = win_start(a, r0);
    for (int rr = 1; rr < nr; rr++) {
        const int32_t w = win_start(a, r0 + rr);
        if (w < *wmin) *wmin = w;
        if (w > *wmax) *wmax = w;
    }
}

static float kq_scale(const attn_args *a)
{
    return a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)a->head_dim);
}

/* The scalar post-pass of every path, the same per element whatever the layout:
 * x = softcap * tanhf(x / softcap). */
static void cap_scores(float cap, float *x, int n)
{
    for (int i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

/* Scores of a block in query lanes (s [nt][nqp], block start t0): softcap, then
 * -inf before each lane's window start. Lane i (i < nl) is lane i0 + i of the
 * tile whose first row is r0 (row r0 + (i0 + i) / group); wmax: the tile's largest
 * window start (no lane is masked from there on). */
static void post_lanes(const attn_args *a, float *s, int nt, int nqp, int nl, int32_t t0, int r0, int i0,
                       int group, int32_t wmax)
{
    if (a->softcap != 0.0f)
        for (int t = 0; t < nt; t++) cap_scores(a->softcap, s + (size_t)t * nqp, nl);
    if (t0 >= wmax) return;
    for (int i = 0; i < nl; i++) {
        const int32_t ws = win_start(a, r0 + (i0 + i) / group);
        for (int t = 0; t < nt && t0 + t < ws; t++) s[(size_t)t * nqp + i] = -INFINITY;
    }
}

/* The same in position lanes (s [nq][ld], np positions from c0, lane i of row r0 + i / group). */
static void post_pos(const attn_args *a, float *s, int ld, int nq, int np, int32_t c0, int r0, int group,
                     int32_t wmax)
{
    if (a->softcap != 0.0f)
        for (int i = 0; i < nq; i++) cap_scores(a->softcap, s + (size_t)i * ld, np);
    if (c0 >= wmax) return;
    for (int i = 0; i < nq; i++) {
        const int32_t ws = win_start(a, r0 + i / group);
        for (int t = 0; t < np && c0 + t < ws; t++) s[(size_t)i * ld + t] = -INFINITY;
    }
}

/* A sink logit x folded into a lane's final state (m, l, acc[d * stride], d < hd),
 * after its last block, as one more block of one position with no value:
 * m' = max(m, x), acc and l rescaled as the kernels rescale them, l += e^(x - m'). */
static void sink_fold(float x, float *m, float *l, float *acc, size_t stride, int hd)
{
    if (x > *m) {
        const float c = attn_exp(*m - x);
        *l *= c;
        for (int d = 0; d < hd; d++) acc[(size_t)d * stride] *= c;
        *m = x;
    }
    *l += attn_exp(x - *m);
}

/* One block in query lanes: scores, the post-pass when it changes anything, the update. */
static void run_block(const attn_args *a, attn_work *w, int nt, int32_t t0, int r0, int i0, int nl, int group,
                      int32_t wmax)
{
    w->b.nt = nt;
    w->kn->scores(&w->b);
    if (a->softcap != 0.0f || t0 < wmax) post_lanes(a, w->b.s, nt, w->b.nqp, nl, t0, r0, i0, group, wmax);
    w->kn->update(&w->b);
}

/* H2O: adds the normalised weights of kv head g's query heads of row r to recv. */
static void add_recv(const attn_args *a, attn_work *w, int r, int g, int group, float *recv)
{
    const kv_pool *kv = a->kv;
    const kv_table *t = a->tables[r];
    const int bs = kv->block_size, nqp = w->b.nqp;
    const int32_t pos = a->pos[r], ws = win_start(a, r);
    for (int32_t blk = ws / bs, t0 = blk * bs; t0 <= pos; t0 += bs, blk++) {
        const int nt = (pos - t0 + 1) < bs ? (int)(pos - t0 + 1) : bs;
        if (kv->type_k == KVI_TYPE_KV_Q4) {
            const quant_f16 *f =
                (int64_t)t0 + bs - 1 > pos ? kivi_group_f16(kv, t, a->layer, blk, a->stash) : NULL;
            load_kivi(a, w, t, blk, nt, g, f, w->ktile);
        } else {
            load_rows(a, w, t, 0, blk, nt, g, w->ktile);
        }
        w->b.nt = nt;
        w->kn->scores(&w->b);
        if (a->softcap != 0.0f) post_lanes(a, w->b.s, nt, nqp, group, t0, r, 0, group, 0);
        for (int j = 0; j < group; j++) {
            const float inv = 1.0f / w->b.l[j];
            for (int i = ws > t0 ? ws - t0 : 0; i < nt; i++)
                recv[t0 + i] += attn_exp(w->b.s[(size_t)i * nqp + j] - w->b.m[j]) * inv;
        }
    }
}

/* Rows [r0, r0 + nr) (one table), kv head g. */
static void attend_tile(const attn_args *a, const attn_scratch *s, attn_work *w, int r0, int nr, int g)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, bs = kv->block_size, group = s->group;
    const int nq = nr * group, nqp = (int)up16((size_t)nq);
    const size_t qstride = (size_t)a->n_heads * hd;
    const kv_table *t = a->tables[r0];
    attn_blk *b = &w->b;
    b->nqp = nqp;
    b->scale = kq_scale(a);

    /* queries of the tile, transposed: lane rr * group + j is head g * group + j of row r0 + rr */
    float *qt = (float *)b->qt;
    for (int rr = 0; rr < nr; rr++)
        for (int j = 0; j < group; j++) {
            const float *src = a->q + (size_t)(r0 + rr) * qstride + (size_t)(g * group + j) * hd;
            const int i = rr * group + j;
            for (int d = 0; d < hd; d++) qt[(size_t)d * nqp + i] = src[d];
        }
    for (int d = 0; d < hd; d++)
        for (int i = nq; i < nqp; i++) qt[(size_t)d * nqp + i] = 0.0f;
    for (int i = 0; i < nqp; i++) {
        b->m[i] = -INFINITY;
        b->l[i] = 0.0f;
    }
    memset(b->acc, 0, (size_t)hd * nqp * sizeof(float));
    for (int i = nq; i < nqp; i++) w->lim[i] = 0;

    int32_t pmin = a->pos[r0], pmax = a->pos[r0];
    for (int rr = 1; rr < nr; rr++) {
        if (a->pos[r0 + rr] < pmin) pmin = a->pos[r0 + rr];
        if (a->pos[r0 + rr] > pmax) pmax = a->pos[r0 + rr];
    }
    const bool kivi = kv->type_k == KVI_TYPE_KV_Q4;
    int32_t wmin, wmax;
    win_range(a, r0, nr, &wmin, &wmax);
    /* from the block of the first window start: no earlier block is touched */
    for (int32_t blk = wmin / bs, t0 = blk * bs; t0 <= pmax; t0 += bs, blk++) {
        const int ntb = (pmax - t0 + 1) < bs ? (int)(pmax - t0 + 1) : bs;
        if (t0 + bs <= pmax) { /* the next block's slices (see attend_pos) */
            const int32_t n1 = t0 + 2 * bs <= pmax + 1 ? t0 + 2 * bs : pmax + 1;
            if (!kivi) prefetch_rows(a, t, 0, t0 + bs, n1, g);
            prefetch_rows(a, t, 1, t0 + bs, n1, g);
        }
        b->k = w->ktile;
        b->v = w->vtile;
        load_rows(a, w, t, 1, blk, ntb, g, w->vtile);
        const int32_t end = t0 + bs - 1; /* the KIVI group is complete at positions >= end */
        const quant_f16 *f = kivi && pmin < end ? kivi_group_f16(kv, t, a->layer, blk, a->stash) : NULL;
        if (!f) {
            const int nt = set_lim(a, w, r0, nr, group, t0, ntb, 0, 0);
            if (kivi)
                load_kivi(a, w, t, blk, nt, g, NULL, w->ktile);
            else
                load_rows(a, w, t, 0, blk, nt, g, w->ktile);
            run_block(a, w, nt, t0, r0, 0, nq, group, wmax);
            continue;
        }
        int nt = set_lim(a, w, r0, nr, group, t0, ntb, 1, end);
        if (nt > 0) {
            load_kivi(a, w, t, blk, nt, g, NULL, w->ktile);
            run_block(a, w, nt, t0, r0, 0, nq, group, wmax);
        }
        nt = set_lim(a, w, r0, nr, group, t0, ntb, -1, end);
        if (nt > 0) {
            load_kivi(a, w, t, blk, nt, g, f, w->ktile);
            run_block(a, w, nt, t0, r0, 0, nq, group, wmax);
        }
    }
    if (a->sinks)
        for (int i = 0; i < nq; i++)
            sink_fold(a->sinks[g * group + i % group], &b->m[i], &b->l[i], b->acc + i, (size_t)nqp, hd);

    for (int rr = 0; rr < nr; rr++)
        for (int j = 0; j < group; j++) {
            const int i = rr * group + j;
            float *o = a->out + (size_t)(r0 + rr) * qstride + (size_t)(g * group + j) * hd;
            const float inv = 1.0f / b->l[i];
            for (int d = 0; d < hd; d++) o[d] = b->acc[(size_t)d * nqp + i] * inv;
        }

    float *recv = a->recv ? a->recv[r0] : NULL;
    if (recv && nr == 1) add_recv(a, w, r0, g, group, recv);
}

/* Rows [r0, r0 + nr) (one table, row-type keys), kv head g, chunked: the K and V
 * slices of a chunk of pcb blocks are converted once for the whole tile (up to
 * ATTN_BIG_LANES query vectors, so the KV stream is read once per 128 rows under
 * GQA 4), then each sub-tile of ATTN_SUB_LANES lanes runs the chunk's blocks in
 * order with its own qt, acc, m, l (sub-tile lanes [i0, i0 + sw): qt and acc at
 * i0 * hd, laid out [hd][sw]). A sub-tile skips the blocks none of its lanes
 * sees (those would add exact zeros); otherwise every lane goes through the
 * operations attend_tile gives it, so the bits are the same. */
static void attend_chunked(const attn_args *a, const attn_scratch *s, attn_work *w, int r0, int nr, int g)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, bs = kv->block_size, group = s->group, cpos = s->pcb * bs;
    const int nq = nr * group, nqp = (int)up16((size_t)nq);
    const size_t qstride = (size_t)a->n_heads * hd;
    const kv_table *t = a->tables[r0];
    attn_blk *b = &w->b;
    float *const qt = (float *)b->qt, *const acc = b->acc, *const m = b->m, *const l = b->l;
    b->scale = kq_scale(a);

    /* queries: lane i = rr * group + j is head g * group + j of row r0 + rr */
    for (int i0 = 0; i0 < nqp; i0 += ATTN_SUB_LANES) {
        const int sw = nqp - i0 < ATTN_SUB_LANES ? nqp - i0 : ATTN_SUB_LANES;
        for (int li = 0; li < sw; li++) {
            const int i = i0 + li;
            float *qd = qt + (size_t)i0 * hd + li;
            if (i < nq) {
                const float *src =
                    a->q + (size_t)(r0 + i / group) * qstride + (size_t)(g * group + i % group) * hd;
                for (int d = 0; d < hd; d++) qd[(size_t)d * sw] = src[d];
            } else {
                for (int d = 0; d < hd; d++) qd[(size_t)d * sw] = 0.0f;
            }
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
    }
    memset(acc, 0, (size_t)hd * nqp * sizeof(float));
    int32_t pmax = a->pos[r0];
    for (int rr = 1; rr < nr; rr++)
        if (a->pos[r0 + rr] > pmax) pmax = a->pos[r0 + rr];

    int32_t wmin, wmax;
    win_range(a, r0, nr, &wmin, &wmax);
    /* chunks from the block of the first window start: no earlier block is touched */
    for (int32_t c0 = wmin / bs * bs; c0 <= pmax; c0 += cpos) {
        const int np = (int64_t)pmax - c0 + 1 < cpos ? (int)(pmax - c0 + 1) : cpos;
        for (int j = 0; j * bs < np; j++) {
            const int nt = np - j * bs < bs ? np - j * bs : bs;
            load_rows(a, w, t, 0, c0 / bs + j, nt, g, w->kc + (size_t)j * bs * hd);
            load_rows(a, w, t, 1, c0 / bs + j, nt, g, w->vc + (size_t)j * bs * hd);
        }
        /* the next chunk's slices, spread over the sub-tiles (a burst of them
         * would stall on full fill buffers) */
        const int32_t c1 = c0 + cpos, n1 = (int64_t)c1 + cpos <= (int64_t)pmax + 1 ? c1 + cpos : pmax + 1;
        const int nsub = (nqp + ATTN_SUB_LANES - 1) / ATTN_SUB_LANES;
        for (int i0 = 0, k = 0; i0 < nqp; i0 += ATTN_SUB_LANES, k++) {
            if (c1 <= pmax) {
                const int32_t p0 = c1 + (int32_t)((int64_t)(n1 - c1) * k / nsub);
                const int32_t p1 = c1 + (int32_t)((int64_t)(n1 - c1) * (k + 1) / nsub);
                prefetch_rows(a, t, 0, p0, p1, g);
                prefetch_rows(a, t, 1, p0, p1, g);
            }
            const int sw = nqp - i0 < ATTN_SUB_LANES ? nqp - i0 : ATTN_SUB_LANES;
            const int ie = i0 + sw < nq ? i0 + sw : nq;       /* real lanes [i0, ie) */
            const int ra = i0 / group, rb = (ie - 1) / group; /* its rows r0 + [ra, rb] */
            int32_t smax = a->pos[r0 + ra], smin = smax, swmin, swmax;
            for (int rr = ra + 1; rr <= rb; rr++) {
                if (a->pos[r0 + rr] > smax) smax = a->pos[r0 + rr];
                if (a->pos[r0 + rr] < smin) smin = a->pos[r0 + rr];
            }
            win_range(a, r0 + ra, rb - ra + 1, &swmin, &swmax);
            if (smax < c0 || (int64_t)c0 + np <= swmin) continue;
            b->nqp = sw;
            b->qt = qt + (size_t)i0 * hd;
            b->acc = acc + (size_t)i0 * hd;
            b->m = m + i0;
            b->l = l + i0;
            b->lim = w->lim + i0;
            for (int i = ie; i < i0 + sw; i++) w->lim[i] = 0;
            for (int j = 0; j * bs < np && c0 + j * bs <= smax; j++) {
                const int32_t t0 = c0 + j * bs;
                const int ntb = np - j * bs < bs ? np - j * bs : bs;
                if ((int64_t)t0 + ntb <= swmin) continue; /* before every window of the sub-tile */
                int most = ntb;
                if ((int64_t)t0 + ntb - 1 <= smin) { /* every lane sees the whole block */
                    for (int i = i0; i < ie; i++) w->lim[i] = ntb;
                } else {
                    most = 0;
                    for (int rr = ra, i = i0; rr <= rb; rr++) {
                        int64_t n = (int64_t)a->pos[r0 + rr] - t0 + 1;
                        if (n < 0) n = 0;
                        if (n > ntb) n = ntb;
                        if (n > most) most = (int)n;
                        for (int e = rr == ra ? i0 - ra * group : 0; e < group && i < ie; e++)
                            w->lim[i++] = (int32_t)n;
                    }
                }
                b->k = w->kc + (size_t)j * bs * hd;
                b->v = w->vc + (size_t)j * bs * hd;
                run_block(a, w, most, t0, r0, i0, ie - i0, group, swmax);
            }
        }
    }

    for (int i = 0; i < nq; i++) {
        const int i0 = i - i % ATTN_SUB_LANES, sw = nqp - i0 < ATTN_SUB_LANES ? nqp - i0 : ATTN_SUB_LANES;
        float *ai = acc + (size_t)i0 * hd + (i - i0);
        if (a->sinks) sink_fold(a->sinks[g * group + i % group], &m[i], &l[i], ai, (size_t)sw, hd);
        float *o = a->out + (size_t)(r0 + i / group) * qstride + (size_t)(g * group + i % group) * hd;
        const float inv = 1.0f / l[i];
        for (int d = 0; d < hd; d++) o[d] = ai[(size_t)d * sw] * inv;
    }
    b->qt = qt;
    b->acc = acc;
    b->m = m;
    b->l = l;
    b->lim = w->lim;
}

/* Rows [r0, r0 + nr) (one table), kv head g, in position lanes (nr * group <=
 * ATTN_POS_MAXQ, row-type keys): the scores of a chunk of pcb blocks at once
 * (scores do not depend on m or l), then each block's online-softmax update in
 * order; every lane goes through the operations attend_tile gives it. */
static void attend_pos(const attn_args *a, const attn_scratch *s, attn_work *w, int r0, int nr, int g)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, bs = kv->block_size, group = s->group, nq = nr * group, ld = s->pld;
    const size_t qstride = (size_t)a->n_heads * hd;
    const kv_table *t = a->tables[r0];
    const attn_kernels *kn = w->kn;
    const float scale = kq_scale(a);
    const bool kivi = kv->type_k == KVI_TYPE_KV_Q4;
    for (int rr = 0; rr < nr; rr++)
        memcpy(w->pq + (size_t)rr * group * hd, a->q + (size_t)(r0 + rr) * qstride + (size_t)g * group * hd,
               (size_t)group * hd * sizeof(float));
    for (int i = 0; i < nq; i++) {
        w->pm[i] = -INFINITY;
        w->pl[i] = 0.0f;
    }
    memset(w->pacc, 0, (size_t)nq * hd * sizeof(float));
    int32_t pmax = a->pos[r0];
    for (int rr = 1; rr < nr; rr++)
        if (a->pos[r0 + rr] > pmax) pmax = a->pos[r0 + rr];
    attn_pblk pb = {
        .nq = nq, .hd = hd, .ld = ld, .v = w->vtile, .lim = w->plim, .m = w->pm, .l = w->pl, .acc = w->pacc
    };
    /* f16 rows go straight into the kernels: keys into position lanes, values read as they lie */
    const bool kh = kv->type_k == KVI_TYPE_F16 && kn->ptrans_f16;
    const bool vh = kv->type_v == KVI_TYPE_F16;
    const size_t kstride = kv->row_bytes_k / sizeof(uint16_t), vstride = kv->row_bytes_v / sizeof(uint16_t);
    pb.vh_stride = vstride;
    /* the first chunk's slices all at once: a short row (a serving step's decode
     * rows) is read from memory with every line in flight together, not block by
     * block behind the loads that need them */
    int32_t wmin, wmax;
    win_range(a, r0, nr, &wmin, &wmax);
    const int32_t cb = wmin / bs * bs; /* the block of the first window start: nothing before is touched */
    const int32_t n0 = (int64_t)pmax + 1 - cb < (int64_t)s->pcb * bs ? pmax + 1 : cb + s->pcb * bs;
    if (!kivi) prefetch_rows(a, t, 0, cb, n0, g);
    prefetch_rows(a, t, 1, cb, n0, g);
    for (int32_t c0 = cb; c0 <= pmax; c0 += s->pcb * bs) {
        const int np = (int64_t)pmax - c0 + 1 < (int64_t)s->pcb * bs ? (int)(pmax - c0 + 1) : s->pcb * bs;
        for (int j = 0; j * bs < np; j++) {
            const int nt = np - j * bs < bs ? np - j * bs : bs;
            const int32_t blk = c0 / bs + j;
            if (kivi) {
                /* one row: the group is f16 (incomplete at pmax) or quantised for all lanes */
                const int32_t end = blk * bs + bs - 1;
                const quant_f16 *f = pmax < end ? kivi_group_f16(kv, t, a->layer, blk, a->stash) : NULL;
                load_kivi(a, w, t, blk, nt, g, f, w->kc + (size_t)j * bs * hd);
            } else if (kh) {
                const uint16_t *k0 = (const uint16_t *)kv_k_row(kv, t, a->layer, blk * bs) + (size_t)g * hd;
                kn->ptrans_f16(k0, kstride, nt, hd, w->kt + (size_t)j * bs, ld);
            } else {
                load_rows(a, w, t, 0, blk, nt, g, w->kc + (size_t)j * bs * hd);
            }
        }
        if (kh) {
            for (int d = 0; d < hd; d++)
                for (int c = np; c < ((np + 15) & ~15); c++) w->kt[(size_t)d * ld + c] = 0.0f;
        } else {
            kn->ptrans(w->kc, np, hd, w->kt, ld);
        }
        kn->pscores(w->pq, nq, hd, w->kt, ld, (np + 15) & ~15, scale, w->ps);
        if (a->softcap != 0.0f || c0 < wmax) post_pos(a, w->ps, ld, nq, np, c0, r0, group, wmax);
        const int32_t c1 = c0 + s->pcb * bs; /* the next chunk */
        for (int j = 0; j * bs < np; j++) {
            const int32_t t0 = c0 + j * bs;
            const int ntb = np - j * bs < bs ? np - j * bs : bs;
            /* the next block's values and the next chunk's keys, a block at a time */
            const int32_t vn = t0 + PF_V_BLOCKS * bs;
            if (vn >= n0 && vn <= pmax)
                prefetch_rows(a, t, 1, vn, vn + bs <= pmax + 1 ? vn + bs : pmax + 1, g);
            if (!kivi && c1 + j * bs <= pmax)
                prefetch_rows(a, t, 0, c1 + j * bs,
                              c1 + (j + 1) * bs <= pmax + 1 ? c1 + (j + 1) * bs : pmax + 1, g);
            int most = 0;
            for (int rr = 0; rr < nr; rr++) {
                int64_t n = (int64_t)a->pos[r0 + rr] - t0 + 1;
                if (n < 0) n = 0;
                if (n > ntb) n = ntb;
                for (int q = 0; q < group; q++) w->plim[rr * group + q] = (int32_t)n;
                if (n > most) most = (int)n;
            }
            if (vh)
                pb.vh = (const uint16_t *)kv_v_row(kv, t, a->layer, t0) + (size_t)g * hd;
            else
                load_rows(a, w, t, 1, t0 / bs, ntb, g, w->vtile);
            pb.nt = most;
            pb.s = w->ps + (size_t)j * bs;
            kn->pupdate(&pb);
        }
    }
    for (int rr = 0; rr < nr; rr++)
        for (int q = 0; q < group; q++) {
            const int i = rr * group + q;
            float *o = a->out + (size_t)(r0 + rr) * qstride + (size_t)(g * group + q) * hd;
            if (a->sinks)
                sink_fold(a->sinks[g * group + q], &w->pm[i], &w->pl[i], w->pacc + (size_t)i * hd, 1, hd);
            const float inv = 1.0f / w->pl[i];
            for (int d = 0; d < hd; d++) o[d] = w->pacc[(size_t)i * hd + d] * inv;
        }
}

typedef struct {
    const attn_args *a;
    attn_scratch *s;
    const attn_kernels *kn;
    int n_tiles;
    const int32_t *tiles; /* [n_tiles + 1] first rows, NULL: one row per tile */
    atomic_int_fast64_t next;
} attn_job;

static void attn_worker(void *ctx, int ith, int nth)
{
    attn_job *job = ctx;
    const attn_args *a = job->a;
    if (ith >= job->s->n_threads) return;
    attn_work w;
    work_init(&w, job->s, job->s->buf + (size_t)ith * job->s->floats_per_thread, job->kn);
    const int nkv = a->n_kv_heads;
    const int64_t n_items = (int64_t)job->n_tiles * nkv;
    /* items are claimed ATTN_CLAIM at a time (fewer atomic claims; hinting the
     * next item's first chunk too was measured slower when serving: 16 streams
     * 772-793 -> 807-815 tok/s without it) */
    for (int64_t it = 0, claim_end = 0;; it++) {
        if (it >= claim_end) {
            it = atomic_fetch_add(&job->next, ATTN_CLAIM);
            claim_end = it + ATTN_CLAIM < n_items ? it + ATTN_CLAIM : n_items;
        }
        if (it >= n_items) break;
        const int tile = job->n_tiles - 1 - (int)(it / nkv), g = (int)(it % nkv);
        const int r0 = job->tiles ? job->tiles[tile] : tile;
        const int nr = job->tiles ? job->tiles[tile + 1] - r0 : 1;
        if (a->recv && a->recv[r0]) {
            /* one item adds every head of the row to recv[r], in head order */
            if (g == 0)
                for (int gg = 0; gg < nkv; gg++) attend_tile(a, job->s, &w, r0, 1, gg);
        } else if (w.kn->pscores && nr * job->s->group <= ATTN_POS_MAXQ &&
                   (a->kv->type_k != KVI_TYPE_KV_Q4 || nr == 1)) {
            attend_pos(a, job->s, &w, r0, nr, g);
        } else if (a->kv->type_k != KVI_TYPE_KV_Q4 && nr * job->s->group > ATTN_LANES) {
            attend_chunked(a, job->s, &w, r0, nr, g);
        } else {
            attend_tile(a, job->s, &w, r0, nr, g);
        }
    }
}

void attention_rows(tpool *pool, attn_scratch *s, const attn_args *a)
{
    if (a->n_rows <= 0) return;
    attn_job job = { .a = a, .s = s, .kn = attn_kernels_of(pool) };
    atomic_init(&job.next, 0);
    /* tiles: runs of rows of one table without recv, at most rmax rows */
    if (s->tiles_cap < (size_t)a->n_rows + 1) {
        int32_t *nt = realloc(s->tiles, ((size_t)a->n_rows + 1) * sizeof *nt);
        if (nt) {
            s->tiles = nt;
            s->tiles_cap = (size_t)a->n_rows + 1;
        }
    }
    if (s->tiles_cap >= (size_t)a->n_rows + 1) {
        int n = 0;
        const int rmax = a->kv->type_k == KVI_TYPE_KV_Q4 ? s->rmax : s->rmax_big;
        for (int r = 0; r < a->n_rows;) {
            s->tiles[n++] = r;
            const bool alone = a->recv && a->recv[r];
            int e = r + 1;
            if (!alone)
                while (e < a->n_rows && e - r < rmax && a->tables[e] == a->tables[r] &&
                       !(a->recv && a->recv[e]))
                    e++;
            r = e;
        }
        s->tiles[n] = a->n_rows;
        job.n_tiles = n;
        job.tiles = s->tiles;
    } else {
        job.n_tiles = a->n_rows; /* no memory for the tile list: one row per tile */
    }
    const uint64_t t0 = prof_begin();
    tpool_run(pool, attn_worker, &job);
    prof_end(PROF_ATTENTION, t0);
}

/* Key row of position tp as a query at position p sees it (kv_dim floats). */
static void ref_key(const attn_args *a, const kv_table *t, int32_t tp, int32_t p, float *row)
{
    const kv_pool *kv = a->kv;
    if (kv->type_k != KVI_TYPE_KV_Q4) {
        kv_read_row(kv, t, a->layer, 0, tp, row);
        return;
    }
    const int bs = kv->block_size, kvd = kv->kv_dim;
    const int32_t g = tp / bs;
    const quant_f16 *f = (int64_t)g * bs + bs - 1 > p ? kivi_group_f16(kv, t, a->layer, g, a->stash) : NULL;
    if (f)
        for (int c = 0; c < kvd; c++) row[c] = quant_f16_to_f32(f[(size_t)(tp % bs) * kvd + c]);
    else
        kivi_group_slice(kv_k_group(kv, t, a->layer, g), kvd, tp % bs, 0, kvd, row);
}

void attention_rows_ref(const attn_args *a)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const size_t qstride = (size_t)a->n_heads * hd;
    float *row = malloc((size_t)kv->kv_dim * sizeof(float));
    int32_t maxpos = 0;
    for (int r = 0; r < a->n_rows; r++)
        if (a->pos[r] > maxpos) maxpos = a->pos[r];
    double *p = malloc(((size_t)maxpos + 1) * sizeof(double));
    if (!row || !p) {
        free(row);
        free(p);
        return;
    }
    for (int r = 0; r < a->n_rows; r++) {
        for (int h = 0; h < a->n_heads; h++) {
            const int g = h / group;
            const float *qh = a->q + (size_t)r * qstride + (size_t)h * hd;
            int32_t ws = a->window > 0 && a->pos[r] - a->window + 1 > 0 ? a->pos[r] - a->window + 1 : 0;
            if (a->chunk > 0 && a->pos[r] / a->chunk * a->chunk > ws) ws = a->pos[r] / a->chunk * a->chunk;
            double mx = -INFINITY, tot = 0;
            for (int32_t t = ws; t <= a->pos[r]; t++) {
                ref_key(a, a->tables[r], t, a->pos[r], row);
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qh[i] * row[g * hd + i];
                p[t] = a->scale != 0.0f ? d * a->scale : d / sqrt((double)hd);
                if (a->softcap != 0.0f) p[t] = a->softcap * tanh(p[t] / a->softcap);
                if (p[t] > mx) mx = p[t];
            }
            if (a->sinks && a->sinks[h] > mx) mx = a->sinks[h];
            for (int32_t t = ws; t <= a->pos[r]; t++) {
                p[t] = exp(p[t] - mx);
                tot += p[t];
            }
            if (a->sinks) tot += exp(a->sinks[h] - mx);
            float *o = a->out + (size_t)r * qstride + (size_t)h * hd;
            for (int i = 0; i < hd; i++) o[i] = 0;
            double *acc = calloc((size_t)hd, sizeof(double));
            if (!acc) continue;
            for (int32_t t = ws; t <= a->pos[r]; t++) {
                kv_read_row(kv, a->tables[r], a->layer, 1, t, row);
                for (int i = 0; i < hd; i++) acc[i] += p[t] / tot * row[g * hd + i];
            }
            for (int i = 0; i < hd; i++) o[i] = (float)acc[i];
            free(acc);
        }
    }
    free(row);
    free(p);
}
