/*
 * fwd_moe.c — mixture-of-experts feed-forward (fwd_moe.h): routing, the grouping of
 * a chunk's rows by expert, one product per chosen expert, the weighted sums.
 *
 * Data structure: per chunk, sel/w [n][k] (each row's choice), then a counting sort
 * of the n * k (row, slot) pairs by expert: order [n * k] lists them expert by
 * expert (increasing expert, then increasing row), start [E + 1] where each
 * expert's run begins. Invariant: every (row, slot) appears exactly once in order.
 */
#include "forward/fwd_moe.h"

#include "base/error.h"
#include "forward/fwd_act.h"
#include "forward/fwd_alloc.h"
#include "formats/quant.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct fwd_moe {
    int chunk, E, k, F;
    int rows_cap;  /* rows of xe / hg / hu / de: max(chunk, k * min(chunk, 16)) */
    float *logits; /* [chunk][E] */
    int *sel;      /* [chunk][k] */
    float *w;      /* [chunk][k] */
    int *start;    /* [E + 1] */
    int *order;    /* [chunk * k] row * k + slot, grouped by expert */
    float *xe;     /* [rows_cap][dim] the rows of a batch of experts, gathered */
    float *hg;     /* [rows_cap][max(F, S)] gate */
    float *hu;     /* [rows_cap][max(F, S)] up */
    float *de;     /* [rows_cap][dim] the experts' output rows */
    float *route;  /* [2 * E] routing scratch */
    const lora_set **ls; /* [chunk] the LoRA sets of one expert's rows, in their order */
};

void fwd_moe_free(fwd_moe *s)
{
    if (!s) return;
    free(s->logits);
    free(s->sel);
    free(s->w);
    free(s->start);
    free(s->order);
    free(s->xe);
    free(s->hg);
    free(s->hu);
    free(s->de);
    free(s->route);
    free(s->ls);
    free(s);
}

fwd_moe *fwd_moe_create(const struct kvi_model *m, int chunk, size_t *bytes)
{
    fwd_moe *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t c = (size_t)chunk, E = (size_t)m->n_expert, k = (size_t)m->n_expert_used;
    const size_t h = (size_t)(m->expert_ffn > m->shared_ffn ? m->expert_ffn : m->shared_ffn);
    s->chunk = chunk;
    s->rows_cap = chunk > m->n_expert_used * (chunk < 16 ? chunk : 16)
                      ? chunk
                      : m->n_expert_used * (chunk < 16 ? chunk : 16);
    const size_t R = (size_t)s->rows_cap;
    s->E = m->n_expert;
    s->k = m->n_expert_used;
    s->F = m->expert_ffn;
    bool ok = true;
    s->logits = fwd_alloc64(c * E * sizeof(float), bytes, &ok);
    s->sel = fwd_alloc64(c * k * sizeof(int), bytes, &ok);
    s->w = fwd_alloc64(c * k * sizeof(float), bytes, &ok);
    s->start = fwd_alloc64((E + 1) * sizeof(int), bytes, &ok);
    s->order = fwd_alloc64(c * k * sizeof(int), bytes, &ok);
    s->xe = fwd_alloc64(R * (size_t)m->dim * sizeof(float), bytes, &ok);
    s->hg = fwd_alloc64(R * h * sizeof(float), bytes, &ok);
    s->hu = fwd_alloc64(R * h * sizeof(float), bytes, &ok);
    s->de = fwd_alloc64(R * (size_t)m->dim * sizeof(float), bytes, &ok);
    s->route = fwd_alloc64(2 * E * sizeof(float), bytes, &ok);
    s->ls = fwd_alloc64(c * sizeof *s->ls, bytes, &ok);
    if (!ok) {
        fwd_moe_free(s);
        return NULL;
    }
    return s;
}

/* The smallest divisor of the chosen weights' normalisation: 2^-14 = 6.1e-5, as
 * llama.cpp clamps the sum (a row whose sigmoid probabilities all vanish). */
#define MOE_NORM_MIN 6.103515625e-5f

/* The k best of score [n] (entries of -INFINITY never chosen unless nothing else
 * is left) into idx [k], best first; ties to the lower index. */
static void top_k(const float *score, int n, int k, int *idx)
{
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int j = 0; j < n; j++) {
            bool taken = false;
            for (int t = 0; t < i; t++) taken |= idx[t] == j;
            if (taken) continue;
            if (best < 0 || score[j] > score[best]) best = j;
        }
        idx[i] = best;
    }
}

void fwd_moe_route(const struct kvi_model *m, const float *sel_bias, const float *l, int *sel, float *w,
                   float *scratch)
{
    const int E = m->n_expert, k = m->n_expert_used;
    float *p = scratch, *score = scratch + E; /* [E] probabilities, [E] selection scores */
    if (m->gating == MODEL_GATE_SOFTMAX) {
        float mx = l[0];
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        float sum = 0.0f;
        for (int e = 0; e < E; e++) sum += (p[e] = expf(l[e] - mx));
        for (int e = 0; e < E; e++) {
            p[e] /= sum;
            score[e] = sel_bias ? p[e] + sel_bias[e] : p[e];
        }
    } else if (m->gating == MODEL_GATE_SIGMOID) {
        for (int e = 0; e < E; e++) {
            p[e] = 1.0f / (1.0f + expf(-l[e]));
            score[e] = sel_bias ? p[e] + sel_bias[e] : p[e];
        }
    } else { /* MODEL_GATE_SOFTMAX_CHOSEN: select by the logits themselves */
        for (int e = 0; e < E; e++) p[e] = score[e] = l[e];
    }
    if (m->n_groups_used < m->n_expert_groups) {
        /* a group scores the sum of its two best members; the others are masked */
        const int G = m->n_expert_groups, gs = E / G;
        float gscore[MODEL_MAX_EXPERTS] = { 0 };
        int keep[MODEL_MAX_EXPERTS], two[2];
        for (int g = 0; g < G; g++) {
            top_k(score + g * gs, gs, gs < 2 ? gs : 2, two);
            gscore[g] = score[g * gs + two[0]] + (gs < 2 ? 0.0f : score[g * gs + two[1]]);
        }
        top_k(gscore, G, m->n_groups_used, keep);
        for (int g = 0; g < G; g++) {
            bool kept = false;
            for (int t = 0; t < m->n_groups_used; t++) kept |= keep[t] == g;
            if (!kept)
                for (int e = 0; e < gs; e++) score[g * gs + e] = -INFINITY;
        }
    }
    top_k(score, E, k, sel);
    if (m->gating == MODEL_GATE_SOFTMAX_CHOSEN) {
        float mx = p[sel[0]], sum = 0.0f; /* sel[0] holds the largest chosen logit */
        for (int i = 0; i < k; i++) sum += (w[i] = expf(p[sel[i]] - mx));
        for (int i = 0; i < k; i++) w[i] /= sum;
    } else {
        for (int i = 0; i < k; i++) w[i] = p[sel[i]];
        if (m->expert_norm) {
            float sum = 0.0f;
            for (int i = 0; i < k; i++) sum += w[i];
            sum = sum > MOE_NORM_MIN ? sum : MOE_NORM_MIN;
            for (int i = 0; i < k; i++) w[i] /= sum;
        }
    }
    if (m->expert_scale != 1.0f)
        for (int i = 0; i < k; i++) w[i] *= m->expert_scale;
}

static void add_bias_rows(float *y, const float *b, int n, int d)
{
    if (!b) return;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < d; i++) y[(size_t)r * d + i] += b[i];
}

/* h = act(x G^T + bg) * (x U^T + bu), d = h D^T + bd over rows x [n][dim] */
static int glu_ffn(fwd_moe *s, tpool *pool, const struct kvi_model *m, const uint16_t *gelu,
                   const kern_tensor *G, const kern_tensor *U, const kern_tensor *D, const float *bg,
                   const float *bu, const float *bd, const float *x, int n, float *d)
{
    const int64_t F = G->n_out, dim = m->dim;
    const kern_tensor *w2[2] = { G, U };
    float *const y2[2] = { s->hg, s->hu };
    const int64_t ld2[2] = { F, F };
    int rc = kern_matmul_multi(pool, 2, w2, x, dim, n, y2, ld2);
    if (rc) return rc;
    add_bias_rows(s->hg, bg, n, (int)F);
    add_bias_rows(s->hu, bu, n, (int)F);
    fwd_glu(m->act, gelu, s->hg, s->hu, (size_t)n * F);
    if ((rc = kern_matmul(pool, D, s->hg, F, n, d, dim))) return rc;
    add_bias_rows(d, bd, n, (int)dim);
    return 0;
}

/* Experts per grouped product: a gate and an up matrix each. */
#define MOE_BATCH_EXPERTS (KVI_MATMUL_MULTI_MAX / 2)

/* The end of the batch of experts starting at e0: as many consecutive experts as
 * fit rows_cap rows and MOE_BATCH_EXPERTS chosen experts (at least one). */
static int batch_end(const fwd_moe *s, int e0)
{
    int e = e0, chosen = 0;
    while (e < s->E) {
        const int c = s->start[e + 1] - s->start[e];
        if (c > 0 && (chosen == MOE_BATCH_EXPERTS || s->start[e + 1] - s->start[e0] > s->rows_cap)) break;
        chosen += c > 0;
        e++;
    }
    return e;
}

/* The LoRA terms of matrix w of expert e for its c rows starting at order index
 * start[e]: input x [c][ldx], output y [c][ldy] (fwd_lora.h). */
static int experts_lora(fwd_moe *s, tpool *pool, const fwd_moe_lora *lo, lora_mat w, int e, const float *x,
                        int64_t ldx, float *y, int64_t ldy)
{
    const int c = s->start[e + 1] - s->start[e];
    if (!lo || !lo->sets || c == 0) return 0;
    for (int j = 0; j < c; j++) s->ls[j] = lo->sets[s->order[s->start[e] + j] / s->k];
    return fwd_lora_add(lo->s, pool, s->ls, lo->layer, w, e, x, ldx, c, y, ldy);
}

/* Experts [e0, e1) over their rows (order[start[e0] .. start[e1])), gathered into
 * xe in that order: gate and up of every chosen expert in one grouped product, the
 * activation, the downs in another; outputs in de, row i - start[e0]. Each
 * expert's rows go through exactly the products kern_matmul would give them. */
static int experts_batch(fwd_moe *s, tpool *pool, const struct kvi_model *m, const model_layer *L,
                         const uint16_t *gelu, const float *x, int e0, int e1, const fwd_moe_lora *lo)
{
    const int k = s->k, F = s->F, dim = m->dim, base = s->start[e0], total = s->start[e1] - base;
    for (int i = 0; i < total; i++) {
        float *xe = s->xe + (size_t)i * dim;
        memcpy(xe, x + (size_t)(s->order[base + i] / k) * dim, (size_t)dim * sizeof *x);
        if (m->moe_weight_input) /* llama4: the weight scales the expert's input */
            for (int j = 0; j < dim; j++) xe[j] *= s->w[s->order[base + i]];
    }
    kern_tensor gu[KVI_MATMUL_MULTI_MAX], dn[MOE_BATCH_EXPERTS];
    const kern_tensor *gup[KVI_MATMUL_MULTI_MAX], *dnp[MOE_BATCH_EXPERTS];
    int64_t r0[KVI_MATMUL_MULTI_MAX], nr[KVI_MATMUL_MULTI_MAX], ldf[KVI_MATMUL_MULTI_MAX],
        ldd[MOE_BATCH_EXPERTS];
    float *ygu[KVI_MATMUL_MULTI_MAX], *ydn[MOE_BATCH_EXPERTS];
    int ne = 0;
    for (int e = e0; e < e1; e++) {
        const int c = s->start[e + 1] - s->start[e], o = s->start[e] - base;
        if (c == 0) continue; /* nobody chose it: its weights are not read */
        if (L->exp_gate_up) { /* one fused matrix: expert e's gate rows, then its up rows */
            gu[2 * ne] = kern_tensor_rows(&L->exp_gate, (int64_t)e * 2 * F, F);
            gu[2 * ne + 1] = kern_tensor_rows(&L->exp_gate, (int64_t)e * 2 * F + F, F);
        } else {
            gu[2 * ne] = kern_tensor_rows(&L->exp_gate, (int64_t)e * F, F);
            gu[2 * ne + 1] = kern_tensor_rows(&L->exp_up, (int64_t)e * F, F);
        }
        dn[ne] = kern_tensor_rows(&L->exp_down, (int64_t)e * dim, dim);
        for (int h = 0; h < 2; h++) {
            gup[2 * ne + h] = &gu[2 * ne + h];
            r0[2 * ne + h] = o;
            nr[2 * ne + h] = c;
            ldf[2 * ne + h] = F;
        }
        ygu[2 * ne] = s->hg + (size_t)o * F;
        ygu[2 * ne + 1] = s->hu + (size_t)o * F;
        dnp[ne] = &dn[ne];
        ldd[ne] = dim;
        ydn[ne] = s->de + (size_t)o * dim;
        ne++;
    }
    int rc = kern_matmul_grouped(pool, 2 * ne, gup, s->xe, dim, total, r0, nr, ygu, ldf);
    if (rc) return rc;
    for (int e = e0; e < e1; e++) {
        const int c = s->start[e + 1] - s->start[e], o = s->start[e] - base;
        if (c == 0) continue;
        const float *xo = s->xe + (size_t)o * dim;
        if ((rc = experts_lora(s, pool, lo, LORA_EXP_GATE, e, xo, dim, s->hg + (size_t)o * F, F))) return rc;
        if ((rc = experts_lora(s, pool, lo, LORA_EXP_UP, e, xo, dim, s->hu + (size_t)o * F, F))) return rc;
        add_bias_rows(s->hg + (size_t)o * F, L->exp_b_gate ? L->exp_b_gate + (size_t)e * F : NULL, c, F);
        add_bias_rows(s->hu + (size_t)o * F, L->exp_b_up ? L->exp_b_up + (size_t)e * F : NULL, c, F);
    }
    fwd_glu(m->act, gelu, s->hg, s->hu, (size_t)total * F);
    int64_t r0d[MOE_BATCH_EXPERTS], nrd[MOE_BATCH_EXPERTS];
    for (int i = 0; i < ne; i++) {
        r0d[i] = r0[2 * i];
        nrd[i] = nr[2 * i];
    }
    if ((rc = kern_matmul_grouped(pool, ne, dnp, s->hg, F, total, r0d, nrd, ydn, ldd))) return rc;
    for (int e = e0; e < e1; e++) {
        const int c = s->start[e + 1] - s->start[e], o = s->start[e] - base;
        if (c > 0 && (rc = experts_lora(s, pool, lo, LORA_EXP_DOWN, e, s->hg + (size_t)o * F, F,
                                        s->de + (size_t)o * dim, dim)))
            return rc;
        if (c > 0 && L->exp_b_down)
            add_bias_rows(s->de + (size_t)o * dim, L->exp_b_down + (size_t)e * dim, c, dim);
    }
    return 0;
}

int fwd_moe_run(fwd_moe *s, tpool *pool, const struct kvi_model *m, const model_layer *L,
                const uint16_t *gelu, const float *x, int n, float *y, uint64_t *counts,
                const fwd_moe_lora *lora)
{
    const int E = s->E, k = s->k, dim = m->dim;
    if (n > s->chunk) return KVI_E_INVALID;
    int rc = kern_matmul(pool, &L->router, x, dim, n, s->logits, E);
    if (rc) return rc;
    add_bias_rows(s->logits, L->router_b, n, E);
    memset(s->start, 0, (size_t)(E + 1) * sizeof *s->start);
    for (int r = 0; r < n; r++) {
        fwd_moe_route(m, L->sel_bias, s->logits + (size_t)r * E, s->sel + (size_t)r * k, s->w + (size_t)r * k,
                      s->route);
        for (int i = 0; i < k; i++) s->start[s->sel[(size_t)r * k + i] + 1]++;
    }
    for (int e = 0; e < E; e++) {
        if (counts) counts[e] += (uint64_t)s->start[e + 1];
        s->start[e + 1] += s->start[e];
    }
    { /* counting sort of the (row, slot) pairs by expert; rows stay increasing */
        int *fill = (int *)s->route; /* [E] cursors (the routing scratch is free now) */
        memcpy(fill, s->start, (size_t)E * sizeof *fill);
        for (int r = 0; r < n; r++)
            for (int i = 0; i < k; i++) s->order[fill[s->sel[(size_t)r * k + i]]++] = r * k + i;
    }
    memset(y, 0, (size_t)n * dim * sizeof *y);
    for (int e0 = 0; e0 < E;) { /* batches of consecutive experts (experts_batch) */
        const int e1 = batch_end(s, e0);
        if ((rc = experts_batch(s, pool, m, L, gelu, x, e0, e1, lora))) return rc;
        for (int e = e0; e < e1; e++) /* a row's sum runs in increasing expert index */
            for (int i = s->start[e]; i < s->start[e + 1]; i++) {
                const int rs = s->order[i];
                const float wt = m->moe_weight_input ? 1.0f : s->w[rs];
                float *yr = y + (size_t)(rs / k) * dim;
                const float *dr = s->de + (size_t)(i - s->start[e0]) * dim;
                for (int j = 0; j < dim; j++) yr[j] += wt * dr[j];
            }
        e0 = e1;
    }
    if (L->sh_gate.data) { /* the shared expert: every row, after the routed ones */
        if ((rc = glu_ffn(s, pool, m, gelu, &L->sh_gate, &L->sh_up, &L->sh_down, NULL, NULL, NULL, x, n,
                          s->de)))
            return rc;
        for (int r = 0; r < n; r++) {
            const float *dr = s->de + (size_t)r * dim;
            float *yr = y + (size_t)r * dim;
            if (L->sh_gate_inp) { /* Qwen2-MoE / Qwen3-Next: a scalar gate sigmoid(x . w) per row */
                const float *xr = x + (size_t)r * dim;
                float g = 0.0f;
                for (int j = 0; j < dim; j++) g += xr[j] * L->sh_gate_inp[j];
                g = 1.0f / (1.0f + expf(-g));
                for (int j = 0; j < dim; j++) yr[j] += g * dr[j];
            } else {
                for (int j = 0; j < dim; j++) yr[j] += dr[j];
            }
        }
    }
    return 0;
}
