/*
 * fwd_lora.c — the per-row LoRA terms of one matrix product (fwd_lora.h).
 *
 * Data structure: per call and set slot k, done [n] marks the rows already handled
 * (or without an adapter at slot k). Rows sharing slot k's adapter form groups of at
 * most FWD_LORA_ROWS (grp: the rows idx[i0 .. i0 + cnt), the pair and its A, B);
 * groups gather into waves of at most FWD_LORA_WAVE rows, and a wave runs in two
 * pool runs:
 *   1. per group (threads take groups in turn): its input rows, gathered into
 *      xg [cnt][n_in] unless they are consecutive rows of x, then t = xg A^T
 *      [cnt][r];
 *   2. per (group, column slice of B) (each thread its slice of every group):
 *      y[idx[i]][slice] += s_i (B t[i])[slice] from B transposed (kern_lora_bt).
 * The A products are kern_matmul on the calling thread and the B products
 * kern_lora_bt, neither of whose output elements depends on the other rows or on
 * the slice of outputs asked for, so a row's bits are those of the row alone,
 * whatever the groups, waves or threads.
 * Invariant: every row with an adapter at slot k is in exactly one group of slot k,
 * and slot k's terms are added (its last wave run) before slot k + 1's start.
 * Two pool hand-offs per wave instead of two per group: a decode step of rows with
 * four adapters costs two hand-offs per adapted matrix, not eight.
 */
#include "forward/fwd_lora.h"

#include "base/error.h"
#include "forward/fwd_alloc.h"
#include "kernels/kernels.h"
#include "kernels/lora_bt.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define FWD_LORA_ROWS 64  /* rows per group */
#define FWD_LORA_WAVE 128 /* rows of the groups of one wave */

typedef struct lora_grp {
    const lora_pair *p;
    kern_tensor a;   /* A [r][n_in] (an expert's rows of the pair) */
    const float *bt; /* B transposed in panels (the expert's part of the pair's bt) */
    int64_t n_out;
    int i0, cnt;     /* rows idx[i0 .. i0 + cnt) */
    const float *xr; /* the group's inputs: x rows when consecutive, else xg */
    int64_t ldxr;    /* their stride */
} lora_grp;

struct fwd_lora {
    int n_rows_max;
    int64_t max_in, max_out;
    unsigned char *done;       /* [n_rows_max] */
    int idx[FWD_LORA_WAVE];    /* the wave's rows, group after group */
    lora_grp g[FWD_LORA_WAVE]; /* the wave's groups */
    float *xg;                 /* [FWD_LORA_WAVE][max_in] gathered inputs */
    float *t;                  /* [FWD_LORA_WAVE][LORA_MAX_RANK] A products */
};

/* One wave's run (both phases read it). */
typedef struct wave_ctx {
    fwd_lora *s;
    tpool *pool;
    const lora_set *const *sets;
    int k, ng;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    atomic_int failed;
} wave_ctx;

fwd_lora *fwd_lora_create(const struct kvi_model *m, int n_rows_max, size_t *bytes)
{
    fwd_lora *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_rows_max = n_rows_max;
    for (int l = 0; l < m->n_layers; l++)
        for (int w = 0; w < LORA_N_MAT; w++) {
            int64_t per_out = 0;
            const kern_tensor *W = lora_base(m, l, (lora_mat)w, &per_out);
            if (!W) continue;
            if (W->n_in > s->max_in) s->max_in = W->n_in;
            if (per_out > s->max_out) s->max_out = per_out;
        }
    bool ok = true;
    s->done = fwd_alloc64((size_t)n_rows_max, bytes, &ok);
    s->xg = fwd_alloc64((size_t)FWD_LORA_WAVE * (size_t)s->max_in * sizeof(float), bytes, &ok);
    s->t = fwd_alloc64((size_t)FWD_LORA_WAVE * LORA_MAX_RANK * sizeof(float), bytes, &ok);
    if (!ok) {
        fwd_lora_free(s);
        return NULL;
    }
    return s;
}

void fwd_lora_free(fwd_lora *s)
{
    if (!s) return;
    free(s->done);
    free(s->xg);
    free(s->t);
    free(s);
}

/* The adapter at slot k of row r's set, or NULL */
static const struct kvi_lora *slot_of(const lora_set *const *sets, int r, int k)
{
    const lora_set *st = sets[r];
    return st && k < st->n ? st->ad[k] : NULL;
}

/* Phase 1: group g's inputs (gathered when needed) through A into t [i0..][r]. */
static void a_jobs(void *vc, int ith, int nth)
{
    wave_ctx *c = vc;
    fwd_lora *s = c->s;
    for (int gi = ith; gi < c->ng; gi += nth) {
        lora_grp *g = &s->g[gi];
        const int64_t n_in = g->a.n_in;
        if (g->xr != c->x + (size_t)s->idx[g->i0] * c->ldx) /* scattered rows: gather */
            for (int i = 0; i < g->cnt; i++)
                memcpy(s->xg + (size_t)(g->i0 + i) * n_in, c->x + (size_t)s->idx[g->i0 + i] * c->ldx,
                       (size_t)n_in * sizeof(float));
        if (kern_matmul(NULL, &g->a, g->xr, g->ldxr, g->cnt, s->t + (size_t)g->i0 * LORA_MAX_RANK,
                        LORA_MAX_RANK))
            atomic_store(&c->failed, 1);
    }
}

/* Phase 2: this thread's column slice of every group: y += s (B t) (lora_bt.h). */
static void b_jobs(void *vc, int ith, int nth)
{
    wave_ctx *c = vc;
    const fwd_lora *s = c->s;
    float sc[FWD_LORA_ROWS], *yr[FWD_LORA_ROWS];
    for (int gi = 0; gi < c->ng; gi++) {
        const lora_grp *g = &s->g[gi];
        const int64_t np = (g->n_out + 15) / 16, p0 = np * ith / nth, p1 = np * (ith + 1) / nth;
        const int64_t j0 = p0 * 16, j1 = p1 * 16 < g->n_out ? p1 * 16 : g->n_out; /* whole panels */
        if (j1 <= j0) continue;
        for (int i = 0; i < g->cnt; i++) {
            const int row = s->idx[g->i0 + i];
            sc[i] = c->sets[row]->scale[c->k] * g->p->ar;
            yr[i] = c->y + (size_t)row * c->ldy + j0;
        }
        kern_lora_bt(c->pool, s->t + (size_t)g->i0 * LORA_MAX_RANK, LORA_MAX_RANK, g->cnt, g->p->rank,
                     g->bt + kern_lora_bt_at(g->p->rank, j0, 0), j1 - j0, sc, yr);
    }
}

static int run_wave(wave_ctx *c)
{
    if (c->ng == 0) return 0;
    atomic_store(&c->failed, 0);
    tpool_run(c->pool, a_jobs, c);
    if (!atomic_load(&c->failed)) tpool_run(c->pool, b_jobs, c);
    c->ng = 0;
    return atomic_load(&c->failed) ? KVI_E_NOMEM : 0;
}

int fwd_lora_add(fwd_lora *s, tpool *pool, const lora_set *const *sets, int l, lora_mat w, int e,
                 const float *x, int64_t ldx, int n, float *y, int64_t ldy)
{
    if (!sets || n <= 0) return 0;
    if (n > s->n_rows_max) return KVI_E_INVALID;
    const bool exp = w >= LORA_EXP_GATE;
    wave_ctx c = { .s = s, .pool = pool, .sets = sets, .x = x, .ldx = ldx, .y = y, .ldy = ldy };
    for (int k = 0; k < LORA_SET_MAX; k++) {
        bool any = false;
        int rows = 0; /* the wave's rows so far */
        c.k = k;
        memset(s->done, 0, (size_t)n);
        for (int r0 = 0; r0 < n; r0++) {
            if (s->done[r0]) continue;
            const struct kvi_lora *ad = slot_of(sets, r0, k);
            const lora_pair *p = ad ? lora_pair_of(ad, l, w) : NULL;
            any |= ad != NULL;
            if (!p || !p->a.data) continue; /* later rows of this adapter skip too */
            if (rows + FWD_LORA_ROWS > FWD_LORA_WAVE) {
                const int rc = run_wave(&c);
                if (rc) return rc;
                rows = 0;
            }
            lora_grp *g = &s->g[c.ng++];
            g->p = p;
            g->i0 = rows;
            g->cnt = 0;
            for (int r = r0; r < n && g->cnt < FWD_LORA_ROWS; r++)
                if (!s->done[r] && slot_of(sets, r, k) == ad) {
                    s->idx[rows + g->cnt++] = r;
                    s->done[r] = 1;
                }
            const int64_t rk = p->rank, n_out = exp ? p->b.n_out / (p->a.n_out / rk) : p->b.n_out;
            g->a = exp ? kern_tensor_rows(&p->a, (int64_t)e * rk, rk) : p->a;
            g->bt = p->bt + (exp ? (size_t)e * kern_lora_bt_floats((int)rk, n_out) : 0);
            g->n_out = n_out;
            const bool consecutive = s->idx[rows + g->cnt - 1] - s->idx[rows] == g->cnt - 1;
            g->xr = consecutive ? x + (size_t)s->idx[rows] * ldx : s->xg + (size_t)rows * g->a.n_in;
            g->ldxr = consecutive ? ldx : g->a.n_in;
            rows += g->cnt;
        }
        const int rc = run_wave(&c);
        if (rc) return rc;
        if (!any) break;
    }
    return 0;
}
