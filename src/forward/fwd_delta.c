/*
 * fwd_delta.c — the gated DeltaNet mixer (fwd_delta.h) over n rows:
 *
 *   p = xb Wqkv^T, z = xb Wz^T, b, a = xb Wbeta^T, xb Walpha^T  p [n][C], z [n][Hv dk],
 *     (or both from one ssm_ba product, per key head: r b's, r a's)  b, a [n][Hv]
 *                                        -- one quantisation of xb, matrix products
 *                                           over all rows
 *   per row, in order (serial):          c [n][C]
 *     c = SiLU(sum_k w[:, k] * [conv state | p][k])   causal depthwise conv, K taps
 *     conv state <- its last K - 2 rows, then p
 *     q, k heads of c L2-normalised: x / max(|x|, eps)
 *     beta = sigmoid(b), decay = exp(softplus(a + dt_bias) * ssm_a)
 *   per value head j (the pool's threads split the heads), rows in order:
 *     S_j <- decay S_j; u = S_j k; S_j += k (beta (v_j - u))^T;   o [n][Hv dk]
 *     o_j = S_j q / sqrt(dk)           (k, q of key head j % Hk or j / (Hv / Hk))
 *   o_j = rmsnorm(o_j) * ssm_norm * SiLU(z_j)
 *   y = o Wout^T                                                  y [n][dim]
 *
 * Every value is computed by the same scalar expressions in the same order
 * whatever the batch and the thread count (a head's rows stay with one thread, in
 * row order), so prefill == token-by-token decode bit for bit.
 */
#include "forward/fwd_delta.h"

#include "forward/fwd_alloc.h"
#include "forward/fwd_norm.h"

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/vec4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct fwd_delta {
    int chunk;
    float *p;   /* [chunk][C] projections before the conv */
    float *z;   /* [chunk][Hv dk] output gate */
    float *ba;  /* [chunk][2 Hv] b then a of every value head */
    float *raw; /* [chunk][2 Hv] ssm_ba's rows as stored */
    float *c;   /* [chunk][C] conv output: q | k | v */
    float *gb;  /* [chunk][Hv] beta */
    float *gd;  /* [chunk][Hv] decay */
    float *o;   /* [chunk][Hv dk] */
};

size_t fwd_delta_state_floats(const struct kvi_model *m) { return model_state_layer_floats(m); }

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
    free(d->o);
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
    d->gd = fwd_alloc64(n * hv * sizeof(float), bytes, &ok);
    d->o = fwd_alloc64(n * hv * dk * sizeof(float), bytes, &ok);
    if (!ok) {
        fwd_delta_free(d);
        return NULL;
    }
    return d;
}

float fwd_delta_dot(const float *a, const float *b, int n)
{
    v4f a0 = { 0, 0, 0, 0 }, a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 += ld4(a + i) * ld4(b + i);
        a1 += ld4(a + i + 4) * ld4(b + i + 4);
        a2 += ld4(a + i + 8) * ld4(b + i + 8);
        a3 += ld4(a + i + 12) * ld4(b + i + 12);
    }
    const v4f s = (a0 + a1) + (a2 + a3);
    float r = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

void fwd_delta_head_step(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                         float scale, int dk, float *o)
{
    const v4f dv = { decay, decay, decay, decay };
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dk; /* [dk] value dim i over the key dims */
        int c = 0;
        for (; c + 4 <= dk; c += 4) st4(row + c, ld4(row + c) * dv);
        for (; c < dk; c++) row[c] *= decay;
        const float u = fwd_delta_dot(row, k, dk);
        const float dl = beta * (v[i] - u);
        const v4f d4 = { dl, dl, dl, dl };
        for (c = 0; c + 4 <= dk; c += 4) st4(row + c, ld4(row + c) + d4 * ld4(k + c));
        for (; c < dk; c++) row[c] += dl * k[c];
        o[i] = fwd_delta_dot(row, q, dk) * scale;
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* x [n] / max(|x|, eps) */
static void l2_normalise(float *x, int n, float eps)
{
    const float ss = fwd_delta_dot(x, x, n);
    const float s = 1.0f / fmaxf(sqrtf(ss), eps);
    for (int i = 0; i < n; i++) x[i] *= s;
}

typedef struct delta_task {
    const struct kvi_model *m;
    const fwd_delta *d;
    int n;
    float *const *state;
    float *const *snap;
} delta_task;

/* The recurrence of value heads ith, ith + nth, ... over every row, in row order. */
static void delta_heads(void *ctx, int ith, int nth)
{
    const delta_task *t = ctx;
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
            fwd_delta_head_step(S, c + (size_t)kh * dk, c + (size_t)(hk + kh) * dk,
                                c + 2 * (size_t)hk * dk + (size_t)j * dk, t->d->gd[(size_t)r * hv + j],
                                t->d->gb[(size_t)r * hv + j], scale, dk, t->d->o + ((size_t)r * hv + j) * dk);
            if (t->snap && t->snap[r]) memcpy(t->snap[r] + cf + (size_t)j * hs, S, hs * sizeof(float));
        }
    }
}

int fwd_delta_run(fwd_delta *d, tpool *pool, const struct kvi_model *m, const model_layer *L, const float *xb,
                  int n, float *const *state, const int32_t *pos, float *const *snap, float *y)
{
    const int dim = m->dim, dk = m->ssm_dk, hk = m->ssm_hk, hv = m->ssm_hv, K = m->ssm_conv;
    const int conv = 2 * hk * dk + hv * dk, inner = hv * dk;
    const size_t cf = (size_t)(K - 1) * conv, sf = fwd_delta_state_floats(m);
    int rc;
    { /* projections: one quantisation of xb */
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
    /* conv, q/k normalisation and gates, row by row in order */
    for (int r = 0; r < n; r++) {
        float *st = state[r];
        if (pos[r] == 0) memset(st, 0, sf * sizeof(float));
        const float *p = d->p + (size_t)r * conv;
        float *c = d->c + (size_t)r * conv;
        for (int ch = 0; ch < conv; ch++) {
            const float *w = L->conv_w + (size_t)ch * K;
            float s = 0.0f;
            for (int k = 0; k < K - 1; k++) s += w[k] * st[(size_t)k * conv + ch];
            s += w[K - 1] * p[ch];
            c[ch] = silu(s);
        }
        if (K > 2) memmove(st, st + conv, (size_t)(K - 2) * conv * sizeof(float));
        memcpy(st + (size_t)(K - 2) * conv, p, (size_t)conv * sizeof(float));
        if (snap && snap[r]) memcpy(snap[r], st, cf * sizeof(float));
        for (int h = 0; h < 2 * hk; h++) l2_normalise(c + (size_t)h * dk, dk, m->rms_eps);
        const float *b = d->ba + (size_t)r * 2 * hv, *a = b + hv;
        for (int j = 0; j < hv; j++) {
            const float x = a[j] + L->dt_bias[j];
            const float sp = x > 20.0f ? x : log1pf(expf(x));
            d->gb[(size_t)r * hv + j] = 1.0f / (1.0f + expf(-b[j]));
            d->gd[(size_t)r * hv + j] = expf(sp * L->ssm_a[j]);
        }
    }
    delta_task t = { .m = m, .d = d, .n = n, .state = state, .snap = snap };
    tpool_run(pool, delta_heads, &t);
    /* gated output norm per value head, then the output projection */
    fwd_rmsnorm_rows(d->o, d->o, L->ssm_norm, n * hv, dk, m->rms_eps);
    for (size_t i = 0; i < (size_t)n * inner; i++) d->o[i] *= silu(d->z[i]);
    return kern_matmul(pool, &L->ssm_out, d->o, inner, n, y, dim);
}
