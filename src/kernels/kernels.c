/*
 * kernels.c — CPU-feature dispatch, dot products and the matrix product over
 * weights of any type (see kernels.h).
 *
 * Dispatch: `g_tab` points at one of three constant tables (kernels_int.h): scalar
 * here, AVX2 / AVX-512 in their own files. It is chosen once (pthread_once) from
 * kern_isa_detect(), and changed afterwards only by kern_isa_set() (the public
 * kvi_cpu_configure, and tests).
 *
 * kern_matmul: thread ith of nth owns the contiguous output columns
 * [n_out*ith/nth, n_out*(ith+1)/nth). It walks them in tiles of up to TILE weight
 * rows; each tile is dequantised into the thread's scratch (tile [TILE][n_in] f32,
 * owned by the pool, or one malloc per call without a pool), then every input row
 * r gets y[r][j] = dot(x_r, w_j) with the active ISA's dot. F32 weights are used in
 * place. Each output is therefore one dot over the same two vectors, whatever the
 * batch size, the tile or the thread count: results are bit-identical across them.
 * On AVX-512, F32/F16/BF16 weights go to fmm_avx512.c instead (its own
 * fixed order, one 16-lane accumulator per output; the scratch only from
 * KVI_FMM_MIN_ROWS rows, decode rows read the weights in place).
 *
 * Integer path (q8.h): for the weight types of kern_q8_act_type() the input
 * rows are first quantised (one pool run, rows split between threads) into a buffer
 * that thread 0's pool scratch holds ahead of its own tile scratch; a second run
 * splits the outputs in tiles of 16 columns (QTILE) and calls the table's qgemm, or
 * kern_qgemm_ref. Both give the contract's bits, so the split does not matter.
 * kern_matmul_multi does the same for several matrices that read the same input
 * (Q/K/V, gate/up): one quantisation, one run over their concatenated tiles.
 * Up to QUANT_INLINE_ROWS input rows are quantised by the calling thread.
 *
 * Invariants: no function here allocates per row; bad arguments (unknown type,
 * n_in not a multiple of the block size, ld too small, row out of range) never
 * read out of bounds: the call returns KVI_E_INVALID and writes no output.
 */
#include "kernels/kernels.h"

#include "kernels/fmm_amx.h"
#include "kernels/qgemm_amx.h"
#include "kernels/delta.h"
#include "kernels/lora_bt.h"
#include "kernels/shortconv.h"
#include "kernels/fmm_avx512.h"
#include "kernels/kernels_int.h"
#include "base/cpu.h"
#include "base/prof.h"
#include "kernels/q8.h"
#include "kernels/r16.h"
#include "formats/quant.h"
#include "kernels/r16_pack.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TILE 16
#define TILE_MAX_FLOATS (1 << 18) /* a tile is cut shorter when n_in is huge */

/* ---- ISA detection and dispatch ---------------------------------------- */

static float dot_scalar(const float *a, const float *b, int64_t n);

static const kern_table TAB_SCALAR = {
    .isa = KVI_ISA_SCALAR,
    .dot = dot_scalar,
    .actq_a = kern_actq_a_ref,
    .actq_k = kern_actq_k_ref,
    .f16_row = kern_f16_row_ref,
    .r16_to_rows = kern_r16_to_rows,
};

static _Atomic(const kern_table *) g_tab;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

kern_isa kern_isa_detect(void)
{
    const cpu_feature_set *f = cpu_features();
    return f->avx512 ? KVI_ISA_AVX512 : f->avx2 ? KVI_ISA_AVX2 : KVI_ISA_SCALAR;
}

/* isa, lowered to the best the CPU has */
static kern_isa isa_capped(kern_isa isa)
{
    const kern_isa best = kern_isa_detect();
    return (int)isa > (int)best ? best : isa;
}

/* the table of an ISA the CPU has */
static const kern_table *table_of(kern_isa isa)
{
    switch (isa) {
    case KVI_ISA_AVX512: return &kern_table_avx512;
    case KVI_ISA_AVX2: return &kern_table_avx2;
    default: return &TAB_SCALAR;
    }
}

static const kern_table *table_for(kern_isa isa) { return table_of(isa_capped(isa)); }

/* The best path the CPU has, until kern_isa_set() says otherwise. */
static void isa_init(void) { atomic_store(&g_tab, table_for(KVI_ISA_AVX512)); }

static const kern_table *tab(void)
{
    pthread_once(&g_once, isa_init);
    return atomic_load_explicit(&g_tab, memory_order_acquire);
}

kern_isa kern_isa_active(void) { return tab()->isa; }

/* ---- per-pool configuration (kern_cfg) --------------------------------- */

static const kern_cfg *cfg_of(const tpool *pool) { return pool ? tpool_user(pool) : NULL; }

static const kern_table *tab_of(const tpool *pool)
{
    const kern_cfg *c = cfg_of(pool);
    return c ? table_of(c->isa) : tab(); /* c->isa was capped by kern_cfg_make */
}

kern_isa kern_isa_of(const tpool *pool) { return tab_of(pool)->isa; }

void kern_delta_step(const tpool *pool, float *S, const float *q, const float *k, const float *v, float decay,
                     const float *gk, float beta, float scale, int dk, float *o)
{
    const kern_table *t = tab_of(pool);
    (t->delta_step ? t->delta_step : kern_delta_step_ref)(S, q, k, v, decay, gk, beta, scale, dk, o);
}

void kern_lora_bt(const tpool *pool, const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n,
                  const float *s, float *const *y)
{
    const kern_table *tb = tab_of(pool);
    (tb->lora_bt ? tb->lora_bt : kern_lora_bt_ref)(t, ldt, cnt, r, bt, n, s, y);
}

void kern_shortconv_row(const tpool *pool, const float *w, int K, float *st, size_t ld, const float *b,
                        const float *c, const float *x, int c0, int c1, float *y)
{
    const kern_table *t = tab_of(pool);
    (t->shortconv_row ? t->shortconv_row : kern_shortconv_row_ref)(w, K, st, ld, b, c, x, c0, c1, y);
}

/* AMX-INT8 for the integer products of this pool (the process-wide switch,
 * cpu_amx_on, bounds every pool's) */
static bool amx_of(const tpool *pool)
{
    const kern_cfg *c = cfg_of(pool);
    return cpu_amx_on() && (!c || c->amx);
}

/* AMX-BF16 for the float products of this pool */
static bool amx_f16_of(const tpool *pool)
{
    const kern_cfg *c = cfg_of(pool);
    return c ? c->amx_f16 && c->amx && cpu_amx_on() : kern_amx_f16_on();
}

const kern_table *kern_table_active(void) { return tab(); }

void kern_isa_set(kern_isa isa)
{
    pthread_once(&g_once, isa_init);
    atomic_store(&g_tab, table_for(isa));
}

bool kern_isa_parse(const char *name, kern_isa *out)
{
    static const kern_isa all[] = { KVI_ISA_SCALAR, KVI_ISA_AVX2, KVI_ISA_AVX512 };
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcasecmp(name, kern_isa_str(all[i]))) {
            *out = all[i];
            return true;
        }
    return false;
}

kern_cfg kern_cfg_make(kern_isa isa, bool amx, bool amx_f16)
{
    return (kern_cfg){ .isa = isa_capped(isa), .amx = amx, .amx_f16 = amx_f16 };
}

const char *kern_isa_str(kern_isa isa)
{
    switch (isa) {
    case KVI_ISA_AVX512: return "avx512";
    case KVI_ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}

const char *kvi_isa_name(void) { return kern_isa_str(kern_isa_active()); }

/* ---- dot products ------------------------------------------------------ */

/* Eight independent accumulators (i mod 8), summed pairwise at the end. */
static float dot_scalar(const float *a, const float *b, int64_t n)
{
    float s[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    for (int k = 0; i < n; i++, k++) s[k] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

float kern_dot_f32_ref(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return (float)s;
}

float kern_dot_f32(const float *a, const float *b, int64_t n)
{
    if (n <= 0) return 0.0f;
    return tab()->dot(a, b, n);
}

/* ---- rows of any type -------------------------------------------------- */

static bool tensor_ok(const kern_tensor *W)
{
    return W && W->data && W->n_in > 0 && W->n_out >= 0 && quant_row_bytes(W->type, W->n_in) > 0;
}

static void dequant_with(const kern_table *t, kvi_type type, const void *src, float *dst, int64_t n)
{
    if (t->dequant && t->dequant(type, src, dst, n)) return;
    quant_dequant_row(type, src, dst, n);
}

kern_tensor kern_tensor_rows(const kern_tensor *W, int64_t r0, int64_t n)
{
    kern_tensor v = *W;
    v.data = (const uint8_t *)W->data + (size_t)r0 * quant_row_bytes(W->type, W->n_in);
    v.n_out = n;
    return v;
}

int kern_tensor_get_row(const kern_tensor *W, int64_t row, float *dst)
{
    if (!dst || !tensor_ok(W) || row < 0 || row >= W->n_out) return KVI_E_INVALID;
    size_t rb = quant_row_bytes(W->type, W->n_in);
    if (W->layout == KVI_LAYOUT_R16) { /* the row out of its tile, then as usual */
        uint8_t stack[8192], *buf = rb <= sizeof stack ? stack : malloc(rb); /* [rb] one row */
        if (!buf) return KVI_E_NOMEM;
        kern_r16_row(W->type, (const uint8_t *)W->data + (size_t)(row / 16) * 16 * rb, W->n_in,
                     (int)(row % 16), buf);
        dequant_with(tab(), W->type, buf, dst, W->n_in);
        if (buf != stack) free(buf);
        return KVI_OK;
    }
    dequant_with(tab(), W->type, (const uint8_t *)W->data + (size_t)row * rb, dst, W->n_in);
    return KVI_OK;
}

/* ---- matrix product ---------------------------------------------------- */

typedef struct mm_ctx {
    const kern_tensor *W;
    const float *x; /* [n_rows][ldx] */
    int64_t ldx, n_rows;
    float *y; /* [n_rows][ldy] */
    int64_t ldy;
    tpool *pool;
    float *own_scratch; /* [tile][n_in] when there is no pool, else NULL */
    const kern_table *tab;
    size_t row_bytes;
    int64_t tile;
} mm_ctx;

/* Out-of-memory fallback: dot of x with row w, one dequantised block at a time.
 * Correct, but its rounding differs from the normal path. */
static float dot_blockwise(const mm_ctx *c, const float *x, const uint8_t *w)
{
    float buf[QK_K]; /* one block (at most QK_K elements) */
    int64_t be = quant_block_elems(c->W->type);
    size_t bb = quant_block_bytes(c->W->type);
    float s = 0.0f;
    for (int64_t i = 0; i < c->W->n_in; i += be, w += bb) {
        quant_dequant_row(c->W->type, w, buf, be);
        s += c->tab->dot(x + i, buf, be);
    }
    return s;
}

/* y[r * ldy + t] = dot(x_r, w_t) for r < n_rows, t < nt (w_t at w + t * ldw), in
 * register tiles of 3 x 2 where the ISA has them: the same bits as dot. */
static void dots(const kern_table *tb, const float *x, int64_t ldx, int64_t n_rows, const float *w,
                 int64_t ldw, int64_t nt, int64_t n, float *y, int64_t ldy)
{
    int64_t r = 0;
    if (tb->dot_3x2 && n % 64 == 0) {
        float o[6];
        for (; r + 3 <= n_rows; r += 3) {
            int64_t t = 0;
            for (; t + 2 <= nt; t += 2) {
                tb->dot_3x2(x + r * ldx, ldx, w + t * ldw, ldw, n, o);
                for (int i = 0; i < 3; i++) {
                    y[(r + i) * ldy + t] = o[2 * i];
                    y[(r + i) * ldy + t + 1] = o[2 * i + 1];
                }
            }
            for (; t < nt; t++)
                for (int i = 0; i < 3; i++) y[(r + i) * ldy + t] = tb->dot(x + (r + i) * ldx, w + t * ldw, n);
        }
    }
    for (; r < n_rows; r++)
        for (int64_t t = 0; t < nt; t++) y[r * ldy + t] = tb->dot(x + r * ldx, w + t * ldw, n);
}

static void mm_worker(void *vctx, int ith, int nth)
{
    const mm_ctx *c = vctx;
    const kern_tensor *W = c->W;
    const int64_t n_in = W->n_in;
    const int64_t j0 = W->n_out * ith / nth, j1 = W->n_out * (ith + 1) / nth;
    const uint8_t *base = W->data;

    if (c->tab->fmm && (W->type == KVI_TYPE_F32 || W->type == KVI_TYPE_F16 || W->type == KVI_TYPE_BF16)) {
        float *fscr = NULL; /* [KVI_FMM_TILE][n_in]; NULL: streaming path, same bits */
        if (W->type != KVI_TYPE_F32 && c->n_rows >= KVI_FMM_MIN_ROWS && c->tile == KVI_FMM_TILE)
            fscr = c->own_scratch ? c->own_scratch : tpool_scratch(c->pool, ith, KVI_FMM_SCRATCH(n_in));
        const kern_fmm_args fa = {
            .type = W->type,
            .w = base,
            .w_rb = c->row_bytes,
            .n_in = n_in,
            .j0 = j0,
            .j1 = j1,
            .x = c->x,
            .ldx = c->ldx,
            .n_rows = c->n_rows,
            .y = c->y,
            .ldy = c->ldy,
            .scratch = fscr,
        };
        if (c->tab->fmm(&fa)) return;
    }

    if (W->type == KVI_TYPE_F32) {
        for (int64_t jt = j0; jt < j1; jt += c->tile) {
            int64_t nt = j1 - jt < c->tile ? j1 - jt : c->tile;
            dots(c->tab, c->x, c->ldx, c->n_rows, (const float *)(base + (size_t)jt * c->row_bytes),
                 (int64_t)(c->row_bytes / sizeof(float)), nt, n_in, c->y + jt, c->ldy);
        }
        return;
    }

    float *scr = c->own_scratch; /* [tile][n_in] */
    if (!scr) scr = tpool_scratch(c->pool, ith, (size_t)c->tile * (size_t)n_in * sizeof(float));
    if (!scr) {
        for (int64_t j = j0; j < j1; j++)
            for (int64_t r = 0; r < c->n_rows; r++)
                c->y[r * c->ldy + j] = dot_blockwise(c, c->x + r * c->ldx, base + (size_t)j * c->row_bytes);
        return;
    }
    for (int64_t jt = j0; jt < j1; jt += c->tile) {
        int64_t nt = j1 - jt < c->tile ? j1 - jt : c->tile;
        for (int64_t t = 0; t < nt; t++)
            dequant_with(c->tab, W->type, base + (size_t)(jt + t) * c->row_bytes, scr + t * n_in, n_in);
        dots(c->tab, c->x, c->ldx, c->n_rows, scr, n_in, nt, n_in, c->y + jt, c->ldy);
    }
}

/* ---- integer path ------------------------------------------------------ */

#define QTILE 16

typedef struct qmm_ctx {
    int n_w;
    const kern_tensor *const *W;                    /* [n_w], one activation type and n_in */
    float *const *y;                                /* [n_w] outputs, y[i]: [n_rows][ldy[i]] */
    const int64_t *ldy;                             /* [n_w] */
    int64_t tiles_before[KVI_MATMUL_MULTI_MAX + 1]; /* QTILE tiles of W[0..i) */
    const float *x;                                 /* [n_rows][ldx] */
    int64_t ldx, n_rows;
    /* grouped (kern_matmul_grouped): W[i] reads rows [row0[i], row0[i] + rows[i]) of x
     * only, and the threads split the work by tiles x rows (cost_before: of W[0..i));
     * NULL: every matrix reads all rows, the split is by tiles */
    const int64_t *row0, *rows;
    int64_t cost_before[KVI_MATMUL_MULTI_MAX + 1];
    tpool *pool;
    uint8_t *xq; /* [n_rows][xq_rb] quantised activations */
    size_t xq_rb;
    uint8_t *xt;          /* NULL, or the same as 16-row tiles for the AMX kernels (q8.h) */
    uint8_t *scratch0;    /* thread 0's tile scratch (or the only one) */
    size_t scratch_bytes; /* KVI_QGEMM_SCRATCH, then [16 * row bytes] for R16 tiles */
    size_t r16_rows_off;  /* where that R16 tile-as-rows buffer starts */
    const kern_table *tab;
} qmm_ctx;

static void qmm_quant_worker(void *vctx, int ith, int nth)
{
    const qmm_ctx *c = vctx;
    const int64_t r0 = c->n_rows * ith / nth, r1 = c->n_rows * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        kern_q8_quantize_act(c->W[0]->type, c->x + r * c->ldx, c->xq + (size_t)r * c->xq_rb, c->W[0]->n_in);
        if (c->xt)
            kern_q8_tiles_row(c->xq + (size_t)r * c->xq_rb, c->W[0]->n_in, r, r == c->n_rows - 1, c->xt);
    }
}

/* Thread ith takes the tiles [T*ith/nth, T*(ith+1)/nth) of the concatenated outputs
 * (T tiles of QTILE rows over every matrix), so the threads end together. */
/* Grouped: the first tile whose work starts at or after cost `target`. */
static int64_t tile_at_cost(const qmm_ctx *c, int64_t target)
{
    for (int i = 0; i < c->n_w; i++) {
        if (c->cost_before[i + 1] <= target) continue;
        const int64_t per = c->rows[i], a0 = c->tiles_before[i];
        const int64_t t = a0 + (target - c->cost_before[i] + per - 1) / per;
        return t < c->tiles_before[i + 1] ? t : c->tiles_before[i + 1];
    }
    return c->tiles_before[c->n_w];
}

static void qmm_worker(void *vctx, int ith, int nth)
{
    const qmm_ctx *c = vctx;
    const int64_t n_tiles = c->tiles_before[c->n_w];
    int64_t t0 = n_tiles * ith / nth, t1 = n_tiles * (ith + 1) / nth;
    if (c->rows) { /* tiles weighted by the rows they run over */
        const int64_t cost = c->cost_before[c->n_w];
        t0 = tile_at_cost(c, cost * ith / nth);
        t1 = ith == nth - 1 ? n_tiles : tile_at_cost(c, cost * (ith + 1) / nth);
    }
    if (t0 >= t1) return;
    void *scr = ith == 0 ? c->scratch0 : tpool_scratch(c->pool, ith, c->scratch_bytes);
    for (int i = 0; i < c->n_w; i++) {
        const int64_t a0 = c->tiles_before[i], a1 = c->tiles_before[i + 1];
        const int64_t s0 = t0 > a0 ? t0 : a0, s1 = t1 < a1 ? t1 : a1;
        if (s0 >= s1) continue;
        const kern_tensor *W = c->W[i];
        const int64_t j1 = (s1 - a0) * QTILE;
        const int64_t r0 = c->row0 ? c->row0[i] : 0, nr = c->rows ? c->rows[i] : c->n_rows;
        if (nr == 0) continue;
        kern_qgemm_args a = {
            .type = W->type,
            .w = W->data,
            .w_rb = quant_row_bytes(W->type, W->n_in),
            .n_in = W->n_in,
            .j0 = (s0 - a0) * QTILE,
            .j1 = j1 < W->n_out ? j1 : W->n_out,
            .xq = c->xq + (size_t)r0 * c->xq_rb,
            .xq_rb = c->xq_rb,
            .n_rows = nr,
            .y = c->y[i],
            .ldy = c->ldy[i],
            .scratch = scr,
            .xt = c->xt,
        };
        if (W->layout == KVI_LAYOUT_R16)
            kern_qgemm_r16(c->tab, &a, (uint8_t *)scr + c->r16_rows_off);
        else if (!(c->tab->qgemm && c->tab->qgemm(&a)))
            kern_qgemm_ref(&a);
    }
}

/* Few rows are quantised by the caller: a pool run costs more than the work. */
#define QUANT_INLINE_ROWS 4

/* Returns false (nothing written) when memory is short: the caller falls back.
 * Every W[i] has the activation type and n_in of W[0]. */
static bool matmul_q8_run(tpool *pool, int n_w, const kern_tensor *const *W, const float *x, int64_t ldx,
                          int64_t n_rows, const int64_t *row0, const int64_t *rows, float *const *y,
                          const int64_t *ldy)
{
    qmm_ctx c = {
        .row0 = row0,
        .rows = rows,
        .n_w = n_w,
        .W = W,
        .y = y,
        .ldy = ldy,
        .x = x,
        .ldx = ldx,
        .n_rows = n_rows,
        .pool = pool,
        .xq_rb = kern_q8_act_row_bytes(W[0]->type, W[0]->n_in),
        .scratch_bytes = KVI_QGEMM_SCRATCH(W[0]->n_in),
        .tab = tab_of(pool),
    };
    c.tiles_before[0] = 0;
    c.cost_before[0] = 0;
    for (int i = 0; i < n_w; i++) {
        c.tiles_before[i + 1] = c.tiles_before[i] + (W[i]->n_out + QTILE - 1) / QTILE;
        c.cost_before[i + 1] =
            c.cost_before[i] + (c.tiles_before[i + 1] - c.tiles_before[i]) * (rows ? rows[i] : n_rows);
    }
    c.r16_rows_off = (c.scratch_bytes + 63) & ~(size_t)63;
    for (int i = 0; i < n_w; i++)
        if (W[i]->layout == KVI_LAYOUT_R16) {
            const size_t need = c.r16_rows_off + 16 * quant_row_bytes(W[i]->type, W[i]->n_in);
            if (need > c.scratch_bytes) c.scratch_bytes = need;
        }
    const size_t xq_bytes = ((c.xq_rb * (size_t)n_rows) + 63) & ~(size_t)63;
    if (c.xq_rb == 0 || xq_bytes / c.xq_rb < (size_t)n_rows) return false;
    /* the AMX kernels read the activations as 16-row tiles, built beside them */
    size_t xt_bytes = 0;
    bool amx = false;
    for (int i = 0; i < n_w; i++)
        amx = amx || kern_qgemm_amx_q8_wanted(W[i]->type, W[i]->layout == KVI_LAYOUT_R16, n_rows, W[i]->n_in);
    if (c.tab->amx_q8 && amx && amx_of(pool) && !rows) /* AMX tiles: 16 rows from row 0 */
        xt_bytes = (kern_q8_tiles_bytes(n_rows, W[0]->n_in) + 63) & ~(size_t)63;
    if (xt_bytes > SIZE_MAX - xq_bytes - c.scratch_bytes) xt_bytes = 0;
    uint8_t *buf = pool ? tpool_scratch(pool, 0, xq_bytes + xt_bytes + c.scratch_bytes) : NULL;
    uint8_t *own = NULL;
    if (!pool) {
        if (posix_memalign((void **)&own, 64, xq_bytes + xt_bytes + c.scratch_bytes) != 0) own = NULL;
        buf = own;
    }
    if (!buf) return false;
    c.xq = buf;
    c.xt = xt_bytes ? buf + xq_bytes : NULL;
    c.scratch0 = buf + xq_bytes + xt_bytes;
    if (n_rows <= QUANT_INLINE_ROWS)
        qmm_quant_worker(&c, 0, 1);
    else
        tpool_run(pool, qmm_quant_worker, &c);
    tpool_run(pool, qmm_worker, &c);
    free(own);
    return true;
}

/* matmul_q8_run, timed by row count for the profile (base/prof.h) */
static bool matmul_q8(tpool *pool, int n_w, const kern_tensor *const *W, const float *x, int64_t ldx,
                      int64_t n_rows, const int64_t *row0, const int64_t *rows, float *const *y,
                      const int64_t *ldy)
{
    const uint64_t t0 = prof_begin();
    const bool ok = matmul_q8_run(pool, n_w, W, x, ldx, n_rows, row0, rows, y, ldy);
    prof_end_mm(n_rows, t0);
    return ok;
}

static bool matmul_args_ok(const kern_tensor *W, const float *x, int64_t ldx, int64_t ldy)
{
    return tensor_ok(W) && x && ldx >= W->n_in && ldy >= W->n_out;
}

int kern_matmul(tpool *pool, const kern_tensor *W, const float *x, int64_t ldx, int64_t n_rows, float *y,
                int64_t ldy)
{
    if (n_rows < 0 || (n_rows > 0 && !y) || !matmul_args_ok(W, x, ldx, ldy)) return KVI_E_INVALID;
    if (n_rows == 0 || W->n_out == 0) return KVI_OK;
    if (kern_q8_act_type(W->type) != KVI_TYPE_F32 &&
        matmul_q8(pool, 1, &W, x, ldx, n_rows, NULL, NULL, &y, &ldy))
        return KVI_OK;
    /* only the integer path reads other layouts: it could not get its buffers */
    if (W->layout != KVI_LAYOUT_ROWS) return KVI_E_NOMEM;
    const kern_table *t = tab_of(pool);
    if (t->fmm_amx && amx_f16_of(pool) && t->fmm_amx(pool, W, x, ldx, n_rows, y, ldy)) return KVI_OK;
    mm_ctx c = {
        .W = W,
        .x = x,
        .ldx = ldx,
        .n_rows = n_rows,
        .y = y,
        .ldy = ldy,
        .pool = pool,
        .own_scratch = NULL,
        .tab = t,
        .row_bytes = quant_row_bytes(W->type, W->n_in),
    };
    c.tile = TILE_MAX_FLOATS / W->n_in;
    if (c.tile > TILE) c.tile = TILE;
    if (c.tile < 1) c.tile = 1;
    if (!pool && W->type != KVI_TYPE_F32)
        c.own_scratch = malloc((size_t)c.tile * (size_t)W->n_in * sizeof(float));
    const uint64_t t0 = prof_begin();
    tpool_run(pool, mm_worker, &c);
    prof_end_mm(n_rows, t0);
    free(c.own_scratch);
    return KVI_OK;
}

/* Whether one 8-bit quantisation of the input serves all n_w (1..KVI_MATMUL_MULTI_MAX)
 * matrices: integer products, the same n_in and activation type, none empty. */
static bool one_quantisation(int n_w, const kern_tensor *const W[])
{
    bool ok = n_w > 0 && n_w <= KVI_MATMUL_MULTI_MAX && kern_q8_act_type(W[0]->type) != KVI_TYPE_F32;
    for (int i = 0; ok && i < n_w; i++)
        ok = W[i]->n_out > 0 && W[i]->n_in == W[0]->n_in &&
             kern_q8_act_type(W[i]->type) == kern_q8_act_type(W[0]->type);
    return ok;
}

int kern_matmul_multi(tpool *pool, int n_w, const kern_tensor *const W[], const float *x, int64_t ldx,
                      int64_t n_rows, float *const y[], const int64_t ldy[])
{
    if (n_rows < 0 || n_w < 0 || (n_w > 0 && (!W || !y || !ldy))) return KVI_E_INVALID;
    for (int i = 0; i < n_w; i++) /* all or nothing: no output written when one is refused */
        if ((n_rows > 0 && !y[i]) || !matmul_args_ok(W[i], x, ldx, ldy[i])) return KVI_E_INVALID;
    if (n_rows == 0) return KVI_OK;
    /* the arguments are checked above: what remains is whether one quantisation serves all */
    if (one_quantisation(n_w, W) && matmul_q8(pool, n_w, W, x, ldx, n_rows, NULL, NULL, y, ldy))
        return KVI_OK;
    for (int i = 0; i < n_w; i++) {
        const int rc = kern_matmul(pool, W[i], x, ldx, n_rows, y[i], ldy[i]);
        if (rc) return rc;
    }
    return KVI_OK;
}

int kern_matmul_grouped(tpool *pool, int n_w, const kern_tensor *const W[], const float *x, int64_t ldx,
                        int64_t n_rows, const int64_t row0[], const int64_t rows[], float *const y[],
                        const int64_t ldy[])
{
    if (n_rows < 0 || n_w < 0 || n_w > KVI_MATMUL_MULTI_MAX ||
        (n_w > 0 && (!W || !y || !ldy || !row0 || !rows)))
        return KVI_E_INVALID;
    for (int i = 0; i < n_w; i++) /* all or nothing, as kern_matmul_multi */
        if (row0[i] < 0 || rows[i] < 0 || row0[i] > n_rows || rows[i] > n_rows - row0[i] ||
            (rows[i] > 0 && !y[i]) || !matmul_args_ok(W[i], x, ldx, ldy[i]))
            return KVI_E_INVALID;
    if (n_rows == 0) return KVI_OK;
    if (one_quantisation(n_w, W) && matmul_q8(pool, n_w, W, x, ldx, n_rows, row0, rows, y, ldy))
        return KVI_OK;
    for (int i = 0; i < n_w; i++) {
        const int rc = rows[i] ? kern_matmul(pool, W[i], x + row0[i] * ldx, ldx, rows[i], y[i], ldy[i]) : 0;
        if (rc) return rc;
    }
    return KVI_OK;
}

int kern_matmul_ref(const kern_tensor *W, const float *x, int64_t ldx, int64_t n_rows, float *y, int64_t ldy)
{
    if (n_rows < 0 || (n_rows > 0 && !y) || !matmul_args_ok(W, x, ldx, ldy)) return KVI_E_INVALID;
    size_t rb = quant_row_bytes(W->type, W->n_in);
    float *w = malloc((size_t)W->n_in * sizeof(float)); /* [n_in] one dequantised row */
    if (!w) return KVI_E_NOMEM;
    for (int64_t j = 0; j < W->n_out; j++) {
        if (W->layout == KVI_LAYOUT_R16)
            kern_tensor_get_row(W, j, w); /* exact, like quant_dequant_row */
        else
            quant_dequant_row(W->type, (const uint8_t *)W->data + (size_t)j * rb, w, W->n_in);
        for (int64_t r = 0; r < n_rows; r++) y[r * ldy + j] = kern_dot_f32_ref(x + r * ldx, w, W->n_in);
    }
    free(w);
    return KVI_OK;
}
