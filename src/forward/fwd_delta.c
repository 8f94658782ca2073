/*
 * fwd_delta.c — the gated DeltaNet mixer (fwd_delta.h) over n rows:
 *
 *   p = xb Wqkv^T, z = xb Wz^T, b, a = xb Wbeta^T, xb Walpha^T  p [n][C], z [n][Hv dk],
 *     (or both from one ssm_ba product, per key head: r b's, r a's)  b, a [n][Hv]
 *                                        -- one quantisation of xb, matrix products
 *                                           over all rows
 *   per channel (the pool's threads split the channels), rows in order:
 *     c = SiLU(sum_k w[:, k] * [conv state | p][k])   causal depthwise conv, K taps
 *     conv state <- its last K - 2 rows, then p       c [n][C]
 *   per row (threads split the rows):
 *     q, k heads of c L2-normalised: x / max(|x|, eps)
 *     beta = sigmoid(b), decay = exp(softplus(a + dt_bias) * ssm_a)
 *   per value head j (the pool's threads split the heads), rows in order:
 *     S_j <- decay S_j; u = S_j k; S_j += k (beta (v_j - u))^T;   o [n][Hv dk]
 *     o_j = S_j q / sqrt(dk)           (k, q of key head j % Hk or j / (Hv / Hk))
 *   o_j = rmsnorm(o_j) * ssm_norm * SiLU(z_j)
 *   y = o Wout^T                                                  y [n][dim]
 *
 * KDA (m->ssm_kda, Kimi Linear) is the same recurrence with other inputs:
 *   p = [xb Wq^T | xb Wk^T | xb Wv^T], b = xb Wbeta^T; lr = [xb Wf_a^T | xb Wg_a^T]
 *   (one quantisation of xb), f = lr_f Wf_b^T, z = lr_g Wg_b^T    lr [n][2R], f [n][Hv dk]
 *   decay of key channel i of head j: exp(softplus(f + dt_bias)[j dk + i] * ssm_a[j])
 *     (kern_delta_step's gk: S's key row i scaled by it)
 *   o_j = rmsnorm(o_j) * ssm_norm * sigmoid(z_j)
 *
 * Every value is computed by the same scalar expressions in the same order
 * whatever the batch, the thread count and the ISA (a channel's and a head's rows
 * stay with one thread, in row order; kernels/delta.h fixes the step's order), so
 * prefill == token-by-token decode bit for bit.
 */
#include "forward/fwd_delta.h"

#include "forward/fwd_alloc.h"
#include "forward/fwd_conv.h"
#include "forward/fwd_norm.h"

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/delta.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows from which the conv, gates and output norm are split over the pool (below,
 * the calling thread does them: the same bits either way) */
#define FWD_DELTA_PAR_ROWS 16

struct fwd_delta {
    int chunk;
    float *p;      /* [chunk][C] projections before the conv */
    float *z;      /* [chunk][Hv dk] output gate */
    float *ba;     /* [chunk][2 Hv] b then a of every value head */
    float *raw;    /* [chunk][2 Hv] ssm_ba's rows as stored */
    float *c;      /* [chunk][C] conv output: q | k | v */
    float *gb;     /* [chunk][Hv] beta */
    float *gd;     /* [chunk][Hv] decay, or [chunk][Hv dk] one per key channel (KDA) */
    float *lr;     /* [chunk][2R] the low-rank gates' first products f_a x | g_a x (KDA) */
    float *o;      /* [chunk][Hv dk] */
    int *prev;     /* [chunk] the previous row of the row's sequence in this pass, or -1 */
    uint8_t *last; /* [chunk] 1: the last row of its sequence in this pass */
};

void fwd_delta_free(fwd_delta *d)
{
    if (!d) return;
    free(d->p);
    free(d->z);
    free(d->ba);
    free(d->raw);
    free(d->c);
    free(d->gb);
    free(d->gd);
    free(d->lr);
    free(d->o);
    free(d->prev);
    free(d->last);
    free(d);
}

fwd_delta *fwd_delta_create(const struct kvi_model *m, int chunk, size_t *bytes)
{
    fwd_delta *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    const size_t n = (size_t)chunk, dk = (size_t)m->ssm_dk, hv = (size_t)m->ssm_hv;
    const size_t conv = 2 * (size_t)m->ssm_hk * dk + hv * dk;
    bool ok = true;
    d->chunk = chunk;
    d->p = fwd_alloc64(n * conv * sizeof(float), bytes, &ok);
    d->z = fwd_alloc64(n * hv * dk * sizeof(float), bytes, &ok);
    d->ba = fwd_alloc64(n * 2 * hv * sizeof(float), bytes, &ok);
    d->raw = fwd_alloc64(n * 2 * hv * sizeof(float), bytes, &ok);
    d->c = fwd_alloc64(n * conv * sizeof(float), bytes, &ok);
    d->gb = fwd_alloc64(n * hv * sizeof(float), bytes, &ok);
    d->gd = fwd_alloc64(n * hv * (m->ssm_kda ? dk : 1) * sizeof(float), bytes, &ok);
    d->lr = fwd_alloc64(n * 2 * (size_t)m->ssm_rank * sizeof(float), bytes, &ok);
    d->o = fwd_alloc64(n * hv * dk * sizeof(float), bytes, &ok);
    d->prev = fwd_alloc64(n * sizeof(int), bytes, &ok);
    d->last = fwd_alloc64(n, bytes, &ok);
    if (!ok) {
        fwd_delta_free(d);
        return NULL;
    }
    return d;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* x [n] / max(|x|, eps) */
static void l2_normalise(float *x, int n, float eps)
{
    const float ss = kern_delta_dot(x, x, n);
    const float s = 1.0f / fmaxf(sqrtf(ss), eps);
    for (int i = 0; i < n; i++) x[i] *= s;
}

typedef struct delta_task {
    const struct kvi_model *m;
    const model_layer *L;
    const fwd_delta *d;
    int n;
    float *const *state;
    float *const *snap;
    const tpool *pool;
} delta_task;

/* The recurrence of value heads ith, ith + nth, ... over every row, in row order. */
static void delta_heads(void *ctx, int ith, int nth)
{
    const delta_task *t = ctx;
    const tpool *pool = t->pool;
    const struct kvi_model *m = t->m;
    const int dk = m->ssm_dk, hk = m->ssm_hk, hv = m->ssm_hv, r_per = hv / hk;
    const size_t conv = 2 * (size_t)hk * dk + (size_t)hv * dk, cf = (size_t)(m->ssm_conv - 1) * conv;
    const size_t hs = (size_t)dk * dk;
    const float scale = 1.0f / sqrtf((float)dk);
    for (int j = ith; j < hv; j += nth) {
        const int kh = m->ssm_tiled ? j % hk : j / r_per;
        for (int r = 0; r < t->n; r++) {
            const float *c = t->d->c + (size_t)r * conv;
            float *S = t->state[r] + cf + (size_t)j * hs;
            const float *gk = m->ssm_kda ? t->d->gd + ((size_t)r * hv + j) * dk : NULL;
            kern_delta_step(pool, S, c + (size_t)kh * dk, c + (size_t)(hk + kh) * dk,
                            c + 2 * (size_t)hk * dk + (size_t)j * dk,
                            gk ? 0.0f : t->d->gd[(size_t)r * hv + j], gk, t->d->gb[(size_t)r * hv + j], scale,
                            dk, t->d->o + ((size_t)r * hv + j) * dk);
            if (t->snap && t->snap[r]) memcpy(t->snap[r] + cf + (size_t)j * hs, S, hs * sizeof(float));
        }
    }
}

/* The causal conv and SiLU of the channels of thread ith over every row (fwd_conv.h) */
static void delta_conv(void *ctx, int ith, int nth)
{
    const delta_task *t = ctx;
    const struct kvi_model *m = t->m;
    const int conv = 2 * m->ssm_hk * m->ssm_dk + m->ssm_hv * m->ssm_dk;
    const fwd_conv_rows cr = { .n = t->n,
                               .K = m->ssm_conv,
                               .C = conv,
                               .p = t->d->p,
                               .ldp = (size_t)conv,
                               .state = t->state,
                               .snap = t->snap,
                               .prev = t->d->prev,
                               .last = t->d->last,
                               .w = t->L->conv_w,
                               .b = NULL,
                               .out = t->d->c };
    fwd_conv_part(&cr, ith, nth);
}

/* q, k heads L2-normalised; beta and decay per value head: rows [r0, r1) */
static void delta_gates(void *ctx, int ith, int nth)
{
    const delta_task *t = ctx;
    const struct kvi_model *m = t->m;
    const int dk = m->ssm_dk, hk = m->ssm_hk, hv = m->ssm_hv, conv = 2 * hk * dk + hv * dk;
    int r0, r1;
    tpool_share(t->n, ith, nth, &r0, &r1);
    for (int r = r0; r < r1; r++) {
        float *c = t->d->c + (size_t)r * conv;
        for (int h = 0; h < 2 * hk; h++) l2_normalise(c + (size_t)h * dk, dk, m->rms_eps);
        const float *b = t->d->ba + (size_t)r * 2 * hv, *a = b + hv;
        if (m->ssm_kda) { /* a decay per key channel, from f (already in gd) */
            float *g = t->d->gd + (size_t)r * hv * dk;
            for (int j = 0; j < hv; j++) {
                t->d->gb[(size_t)r * hv + j] = 1.0f / (1.0f + expf(-b[j]));
                for (int i = j * dk; i < (j + 1) * dk; i++) {
                    const float x = g[i] + t->L->dt_bias[i];
                    g[i] = expf((x > 20.0f ? x : log1pf(expf(x))) * t->L->ssm_a[j]);
                }
            }
            continue;
        }
        for (int j = 0; j < hv; j++) {
            const float x = a[j] + t->L->dt_bias[j];
            const float sp = x > 20.0f ? x : log1pf(expf(x));
            t->d->gb[(size_t)r * hv + j] = 1.0f / (1.0f + expf(-b[j]));
            t->d->gd[(size_t)r * hv + j] = expf(sp * t->L->ssm_a[j]);
        }
    }
}

/* the gated output norm per value head: rows [r0, r1) */
static void delta_out(void *ctx, int ith, int nth)
{
    const delta_task *t = ctx;
    const struct kvi_model *m = t->m;
    const int dk = m->ssm_dk, hv = m->ssm_hv;
    int r0, r1;
    tpool_share(t->n, ith, nth, &r0, &r1);
    if (r1 <= r0) return;
    float *o = t->d->o + (size_t)r0 * hv * dk;
    const float *z = t->d->z + (size_t)r0 * hv * dk;
    fwd_rmsnorm_rows(o, o, t->L->ssm_norm, (r1 - r0) * hv, dk, m->rms_eps);
    if (m->ssm_kda)
        for (size_t i = 0; i < (size_t)(r1 - r0) * hv * dk; i++) o[i] *= 1.0f / (1.0f + expf(-z[i]));
    else
        for (size_t i = 0; i < (size_t)(r1 - r0) * hv * dk; i++) o[i] *= silu(z[i]);
}

/* fn over the pool's threads, or on the calling thread alone (the same bits) */
static void run_on(tpool *pool, tpool_fn fn, delta_task *t, bool par)
{
    if (par)
        tpool_run(pool, fn, t);
    else
        fn(t, 0, 1);
}

/* KDA's projections (top of the file): q, k, v, beta and the low-rank gates' first
 * halves from one quantisation of xb, then their second halves */
static int kda_projections(fwd_delta *d, tpool *pool, const struct kvi_model *m, const model_layer *L,
                           const float *xb, int n)
{
    const int dim = m->dim, dk = m->ssm_dk, hk = m->ssm_hk, hv = m->ssm_hv, R = m->ssm_rank;
    const int conv = 2 * hk * dk + hv * dk, inner = hv * dk;
    const kern_tensor *w[6] = { &L->wq, &L->wk, &L->wv, &L->ssm_beta, &L->ssm_f_a, &L->ssm_g_a };
    float *const yy[6] = {
        d->p, d->p + (size_t)hk * dk, d->p + 2 * (size_t)hk * dk, d->ba, d->lr, d->lr + R
    };
    const int64_t ld[6] = { conv, conv, conv, 2 * hv, 2 * R, 2 * R };
    int rc;
    if ((rc = kern_matmul_multi(pool, 6, w, xb, dim, n, yy, ld)) ||
        (rc = kern_matmul(pool, &L->ssm_f_b, d->lr, 2 * R, n, d->gd, inner)))
        return rc;
    return kern_matmul(pool, &L->ssm_g_b, d->lr + R, 2 * R, n, d->z, inner);
}

/* fwd_delta_run over at most d->chunk rows */
static int delta_part(fwd_delta *d, tpool *pool, const struct kvi_model *m, const model_layer *L,
                      const float *xb, int n, float *const *state, const int32_t *pos, float *const *snap,
                      float *y)
{
    const int dim = m->dim, dk = m->ssm_dk, hk = m->ssm_hk, hv = m->ssm_hv;
    const int conv = 2 * hk * dk + hv * dk, inner = hv * dk;
    const size_t sf = model_state_layer_floats(m);
    int rc;
    if (m->ssm_kda) {
        if ((rc = kda_projections(d, pool, m, L, xb, n))) return rc;
    } else { /* projections: one quantisation of xb */
        const bool fused = L->ssm_ba.data != NULL;
        const kern_tensor *w[4] = { &L->ssm_qkv, &L->ssm_z, fused ? &L->ssm_ba : &L->ssm_beta,
                                    &L->ssm_alpha };
        float *const yy[4] = { d->p, d->z, fused ? d->raw : d->ba, d->ba + hv };
        const int64_t ld[4] = { conv, inner, 2 * hv, 2 * hv };
        if ((rc = kern_matmul_multi(pool, fused ? 3 : 4, w, xb, dim, n, yy, ld))) return rc;
        if (fused) { /* per key head g: rows [g 2r, g 2r + r) are b, [g 2r + r, (g + 1) 2r) a */
            const int r_per = hv / hk;
            for (int r = 0; r < n; r++) {
                const float *src = d->raw + (size_t)r * 2 * hv;
                float *dst = d->ba + (size_t)r * 2 * hv;
                for (int g = 0; g < hk; g++)
                    for (int i = 0; i < r_per; i++) {
                        dst[g * r_per + i] = src[g * 2 * r_per + i];
                        dst[hv + g * r_per + i] = src[g * 2 * r_per + r_per + i];
                    }
            }
        }
    }
    /* a sequence's first row starts from zeros; each row's predecessor in this pass */
    fwd_conv_link(state, pos, n, sf, d->prev, d->last);
    delta_task t = { .m = m, .L = L, .d = d, .n = n, .state = state, .snap = snap, .pool = pool };
    const bool par = n >= FWD_DELTA_PAR_ROWS; /* a few rows: less work than waking the pool */
    run_on(pool, delta_conv, &t, par);        /* channels split, rows in order */
    run_on(pool, delta_gates, &t, par);       /* rows split */
    run_on(pool, delta_heads, &t, true);      /* value heads split, rows in order */
    run_on(pool, delta_out, &t, par);         /* rows split */
    return kern_matmul(pool, &L->ssm_out, d->o, inner, n, y, dim);
}

int fwd_delta_run(fwd_delta *d, tpool *pool, const struct kvi_model *m, const model_layer *L, const float *xb,
                  int n, float *const *state, const int32_t *pos, float *const *snap, float *y)
{
    /* parts of d->chunk rows in order: each continues the states the previous left */
    const int dim = m->dim;
    for (int r0 = 0; r0 < n; r0 += d->chunk) {
        const int k = n - r0 < d->chunk ? n - r0 : d->chunk;
        const int rc = delta_part(d, pool, m, L, xb + (size_t)r0 * dim, k, state + r0, pos + r0,
                                  snap ? snap + r0 : NULL, y + (size_t)r0 * dim);
        if (rc) return rc;
    }
    return 0;
}
