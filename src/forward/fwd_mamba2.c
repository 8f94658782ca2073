/*
 * fwd_mamba2.c — the Mamba-2 mixer (fwd_mamba2.h) over n rows:
 *
 *   [z | xBC | dt] = xb Win^T                 zx [n][2 d_inner + 2 G N + n_h]
 *   per channel (threads split the channels), rows in order (fwd_conv.h):
 *     c = SiLU(conv(xBC; conv state) + conv_b)             c [n][C], C = d_inner + 2 G N
 *   per row: delta_h = softplus(dt_h + dt_bias_h), decay_h = exp(delta_h A_h)
 *   per head h (threads split the heads), rows in order (kernels/ssm.h):
 *     S_h <- decay_h S_h + (delta_h x_h) B_g^T;  y_h = S_h C_g + D_h x_h
 *       x = c[0, d_inner) as n_h heads of P, B, C = the next G N each, g = h / (n_h / G)
 *   y *= SiLU(z); y = rmsnorm of each group of d_inner / G channels * ssm_norm (if any)
 *   out = y Wout^T                                          out [n][dim]
 *
 * Every value comes from the same expressions in the same order whatever the batch,
 * the thread count and the ISA, so prefill == token-by-token decode bit for bit.
 */
#include "forward/fwd_mamba2.h"

#include "forward/fwd_alloc.h"
#include "forward/fwd_conv.h"
#include "forward/fwd_norm.h"

#include "kernels/kernels.h"
#include "kernels/ssm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* rows from which the conv and the gates are split over the pool */
#define FWD_MAMBA2_PAR_ROWS 16

struct fwd_mamba2 {
    int chunk;
    float *zx;     /* [chunk][W] the input projection, W = 2 d_inner + 2 G N + n_h */
    float *c;      /* [chunk][C] conv output: x | B | C */
    float *dt;     /* [chunk][n_h] delta */
    float *da;     /* [chunk][n_h] decay */
    float *y;      /* [chunk][d_inner] scan output */
    int *prev;     /* [chunk] */
    uint8_t *last; /* [chunk] */
};

void fwd_mamba2_free(fwd_mamba2 *d)
{
    if (!d) return;
    free(d->zx);
    free(d->c);
    free(d->dt);
    free(d->da);
    free(d->y);
    free(d->prev);
    free(d->last);
    free(d);
}

fwd_mamba2 *fwd_mamba2_create(const struct kvi_model *m, int chunk, size_t *bytes)
{
    fwd_mamba2 *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    const size_t n = (size_t)chunk, di = (size_t)m->ssm_inner, nh = (size_t)m->ssm_hv;
    const size_t conv = di + 2 * (size_t)m->ssm_hk * m->ssm_dk;
    bool ok = true;
    d->chunk = chunk;
    d->zx = fwd_alloc64(n * (di + conv + nh) * sizeof(float), bytes, &ok);
    d->c = fwd_alloc64(n * conv * sizeof(float), bytes, &ok);
    d->dt = fwd_alloc64(n * nh * sizeof(float), bytes, &ok);
    d->da = fwd_alloc64(n * nh * sizeof(float), bytes, &ok);
    d->y = fwd_alloc64(n * di * sizeof(float), bytes, &ok);
    d->prev = fwd_alloc64(n * sizeof(int), bytes, &ok);
    d->last = fwd_alloc64(n, bytes, &ok);
    if (!ok) {
        fwd_mamba2_free(d);
        return NULL;
    }
    return d;
}

typedef struct mamba_task {
    const struct kvi_model *m;
    const model_layer *L;
    const fwd_mamba2 *d;
    int n;
    float *const *state;
    float *const *snap;
    const tpool *pool;
} mamba_task;

/* conv input width and the projection's row width */
static int conv_width(const struct kvi_model *m) { return m->ssm_inner + 2 * m->ssm_hk * m->ssm_dk; }
static int proj_width(const struct kvi_model *m) { return m->ssm_inner + conv_width(m) + m->ssm_hv; }

static void mamba_conv(void *ctx, int ith, int nth)
{
    const mamba_task *t = ctx;
    const struct kvi_model *m = t->m;
    const fwd_conv_rows cr = { .n = t->n,
                               .K = m->ssm_conv,
                               .C = conv_width(m),
                               .p = t->d->zx + m->ssm_inner,
                               .ldp = (size_t)proj_width(m),
                               .state = t->state,
                               .snap = t->snap,
                               .prev = t->d->prev,
                               .last = t->d->last,
                               .w = t->L->conv_w,
                               .b = t->L->conv_b,
                               .out = t->d->c };
    fwd_conv_part(&cr, ith, nth);
}

/* delta and decay of every head: rows [r0, r1) of thread ith */
static void mamba_gates(void *ctx, int ith, int nth)
{
    const mamba_task *t = ctx;
    const struct kvi_model *m = t->m;
    const int nh = m->ssm_hv, off = m->ssm_inner + conv_width(m), w = proj_width(m);
    int r0, r1;
    tpool_share(t->n, ith, nth, &r0, &r1);
    for (int r = r0; r < r1; r++)
        for (int h = 0; h < nh; h++) {
            const float x = t->d->zx[(size_t)r * w + off + h] + t->L->dt_bias[h];
            const float dt = x > 20.0f ? x : log1pf(expf(x));
            t->d->dt[(size_t)r * nh + h] = dt;
            t->d->da[(size_t)r * nh + h] = expf(dt * t->L->ssm_a[h]);
        }
}

/* The scan of heads ith, ith + nth, ... over every row, in row order. */
static void mamba_heads(void *ctx, int ith, int nth)
{
    const mamba_task *t = ctx;
    const struct kvi_model *m = t->m;
    const int nh = m->ssm_hv, N = m->ssm_dk, di = m->ssm_inner, P = di / nh, per_g = nh / m->ssm_hk;
    const int C = conv_width(m), gn = m->ssm_hk * N;
    const size_t cf = (size_t)(m->ssm_conv - 1) * C, hs = (size_t)P * N;
    for (int h = ith; h < nh; h += nth) {
        const int g = h / per_g;
        for (int r = 0; r < t->n; r++) {
            const float *c = t->d->c + (size_t)r * C; /* [C] x | B | C */
            float *S = t->state[r] + cf + (size_t)h * hs;
            const size_t rh = (size_t)r * nh + h;
            kern_ssm_scan_step(t->pool, S, c + (size_t)h * P, c + di + (size_t)g * N,
                               c + di + gn + (size_t)g * N, t->d->da[rh], t->d->dt[rh], t->L->ssm_d[h], P, N,
                               t->d->y + (size_t)r * di + (size_t)h * P);
            if (t->snap && t->snap[r]) memcpy(t->snap[r] + cf + (size_t)h * hs, S, hs * sizeof(float));
        }
    }
}

/* y *= SiLU(z), then the grouped RMSNorm: rows [r0, r1) of thread ith */
static void mamba_out(void *ctx, int ith, int nth)
{
    const mamba_task *t = ctx;
    const struct kvi_model *m = t->m;
    const int di = m->ssm_inner, w = proj_width(m), G = m->ssm_hk, gs = di / G;
    int r0, r1;
    tpool_share(t->n, ith, nth, &r0, &r1);
    for (int r = r0; r < r1; r++) {
        float *y = t->d->y + (size_t)r * di;       /* [d_inner] */
        const float *z = t->d->zx + (size_t)r * w; /* [d_inner] */
        for (int i = 0; i < di; i++) y[i] *= z[i] / (1.0f + expf(-z[i]));
        for (int g = 0; t->L->ssm_norm && g < G; g++)
            fwd_rmsnorm_rows(y + (size_t)g * gs, y + (size_t)g * gs, t->L->ssm_norm + (size_t)g * gs, 1, gs,
                             m->rms_eps);
    }
}

static void run_on(tpool *pool, tpool_fn fn, mamba_task *t, bool par)
{
    if (par)
        tpool_run(pool, fn, t);
    else
        fn(t, 0, 1);
}

/* fwd_mamba2_run over at most d->chunk rows */
static int mamba_part(fwd_mamba2 *d, tpool *pool, const struct kvi_model *m, const model_layer *L,
                      const float *xb, int n, float *const *state, const int32_t *pos, float *const *snap,
                      float *y)
{
    int rc = kern_matmul(pool, &L->ssm_in, xb, m->dim, n, d->zx, proj_width(m));
    if (rc) return rc;
    fwd_conv_link(state, pos, n, model_state_layer_floats(m), d->prev, d->last);
    mamba_task t = { .m = m, .L = L, .d = d, .n = n, .state = state, .snap = snap, .pool = pool };
    const bool par = n >= FWD_MAMBA2_PAR_ROWS; /* a few rows: less work than waking the pool */
    run_on(pool, mamba_conv, &t, par);         /* channels split, rows in order */
    run_on(pool, mamba_gates, &t, par);        /* rows split */
    run_on(pool, mamba_heads, &t, true);       /* heads split, rows in order */
    run_on(pool, mamba_out, &t, par);          /* rows split */
    return kern_matmul(pool, &L->ssm_out, d->y, m->ssm_inner, n, y, m->dim);
}

int fwd_mamba2_run(fwd_mamba2 *d, tpool *pool, const struct kvi_model *m, const model_layer *L,
                   const float *xb, int n, float *const *state, const int32_t *pos, float *const *snap,
                   float *y)
{
    for (int r0 = 0; r0 < n; r0 += d->chunk) {
        const int k = n - r0 < d->chunk ? n - r0 : d->chunk;
        const int rc = mamba_part(d, pool, m, L, xb + (size_t)r0 * m->dim, k, state + r0, pos + r0,
                                  snap ? snap + r0 : NULL, y + (size_t)r0 * m->dim);
        if (rc) return rc;
    }
    return 0;
}
