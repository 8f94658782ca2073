/*
 * fwd_lora.c — the per-row LoRA terms of one matrix product (fwd_lora.h).
 *
 * Data structure: per call and set slot k, done [n] marks the rows already handled
 * (or without an adapter at slot k); a group idx [<= FWD_LORA_ROWS] of rows sharing
 * slot k's adapter is gathered into xg [group][n_in], then t = xg A^T [group][r],
 * u = t B^T [group][n_out], and y[idx[i]] += s_i u[i]. Invariant: every row with an
 * adapter at slot k is in exactly one group of slot k, and slot k's terms are added
 * before slot k + 1's.
 */
#include "forward/fwd_lora.h"

#include "base/error.h"
#include "forward/fwd_alloc.h"
#include "kernels/kernels.h"

#include <string.h>

#define FWD_LORA_ROWS 32 /* rows per gathered group */

struct fwd_lora {
    int n_rows_max;
    int64_t max_in, max_out;
    unsigned char *done; /* [n_rows_max] */
    int idx[FWD_LORA_ROWS];
    float *xg; /* [FWD_LORA_ROWS][max_in] */
    float *t;  /* [FWD_LORA_ROWS][LORA_MAX_RANK] */
    float *u;  /* [FWD_LORA_ROWS][max_out] */
};

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
    const size_t R = FWD_LORA_ROWS;
    s->done = fwd_alloc64((size_t)n_rows_max, bytes, &ok);
    s->xg = fwd_alloc64(R * (size_t)s->max_in * sizeof(float), bytes, &ok);
    s->t = fwd_alloc64(R * LORA_MAX_RANK * sizeof(float), bytes, &ok);
    s->u = fwd_alloc64(R * (size_t)s->max_out * sizeof(float), bytes, &ok);
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
    free(s->u);
    free(s);
}

/* The adapter at slot k of row r's set, or NULL */
static const struct kvi_lora *slot_of(const lora_set *const *sets, int r, int k)
{
    const lora_set *st = sets[r];
    return st && k < st->n ? st->ad[k] : NULL;
}

/* The group's products and additions: rows idx [cnt], pair p (expert e). */
static int run_group(fwd_lora *s, tpool *pool, const lora_set *const *sets, int k, const lora_pair *p,
                     bool exp, int e, const float *x, int64_t ldx, int cnt, float *y, int64_t ldy)
{
    const int64_t r = p->rank, n_in = p->a.n_in, n_out = exp ? p->b.n_out / (p->a.n_out / r) : p->b.n_out;
    const kern_tensor A = exp ? kern_tensor_rows(&p->a, (int64_t)e * r, r) : p->a;
    const kern_tensor B = exp ? kern_tensor_rows(&p->b, (int64_t)e * n_out, n_out) : p->b;
    for (int i = 0; i < cnt; i++)
        memcpy(s->xg + (size_t)i * n_in, x + (size_t)s->idx[i] * ldx, (size_t)n_in * sizeof(float));
    int rc = kern_matmul(pool, &A, s->xg, n_in, cnt, s->t, r);
    if (!rc) rc = kern_matmul(pool, &B, s->t, r, cnt, s->u, n_out);
    if (rc) return rc;
    for (int i = 0; i < cnt; i++) {
        const float sc = sets[s->idx[i]]->scale[k] * p->ar;
        float *yr = y + (size_t)s->idx[i] * ldy;
        const float *ur = s->u + (size_t)i * n_out;
        for (int64_t j = 0; j < n_out; j++) yr[j] += ur[j] * sc;
    }
    return 0;
}

int fwd_lora_add(fwd_lora *s, tpool *pool, const lora_set *const *sets, int l, lora_mat w, int e,
                 const float *x, int64_t ldx, int n, float *y, int64_t ldy)
{
    if (!sets || n <= 0) return 0;
    if (n > s->n_rows_max) return KVI_E_INVALID;
    const bool exp = w >= LORA_EXP_GATE;
    for (int k = 0; k < LORA_SET_MAX; k++) {
        bool any = false;
        memset(s->done, 0, (size_t)n);
        for (int r0 = 0; r0 < n; r0++) {
            if (s->done[r0]) continue;
            const struct kvi_lora *ad = slot_of(sets, r0, k);
            const lora_pair *p = ad ? lora_pair_of(ad, l, w) : NULL;
            any |= ad != NULL;
            if (!p || !p->a.data) continue; /* later rows of this adapter skip too */
            int cnt = 0;
            for (int r = r0; r < n && cnt < FWD_LORA_ROWS; r++)
                if (!s->done[r] && slot_of(sets, r, k) == ad) {
                    s->idx[cnt++] = r;
                    s->done[r] = 1;
                }
            const int rc = run_group(s, pool, sets, k, p, exp, e, x, ldx, cnt, y, ldy);
            if (rc) return rc;
        }
        if (!any) break;
    }
    return 0;
}
