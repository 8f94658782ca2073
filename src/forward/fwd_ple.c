/*
 * fwd_ple.c — gemma4's per-layer inputs (fwd_ple.h).
 *
 * Data structure: pl [n_rows][N * P] the batch's per-layer inputs (row r, layer l
 * at pl + r * N * P + l * P), computed by fwd_ple_inputs before the first layer;
 * tok [chunk][N * P] the token rows of one part of the batch; g, u [chunk][P] the
 * branch's gate and its per-layer input slice. Invariant: pl holds the current
 * batch's rows from fwd_ple_inputs until the next batch.
 */
#include "forward/fwd_ple.h"

#include "forward/fwd_act.h"
#include "forward/fwd_alloc.h"
#include "forward/fwd_norm.h"

#include "base/error.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

struct fwd_ple {
    int n_rows, chunk, np; /* np = N * P */
    float *pl;             /* [n_rows][np] */
    float *tok;            /* [chunk][np] */
    float *g, *u;          /* [chunk][P] */
};

void fwd_ple_free(fwd_ple *s)
{
    if (!s) return;
    free(s->pl);
    free(s->tok);
    free(s->g);
    free(s->u);
    free(s);
}

fwd_ple *fwd_ple_create(const struct kvi_model *m, int n_rows, int chunk, size_t *bytes)
{
    fwd_ple *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_rows = n_rows;
    s->chunk = chunk;
    s->np = m->n_layers * m->ple_dim;
    const size_t np = (size_t)s->np, c = (size_t)chunk, P = (size_t)m->ple_dim;
    bool ok = true;
    s->pl = fwd_alloc64((size_t)n_rows * np * sizeof(float), bytes, &ok);
    s->tok = fwd_alloc64(c * np * sizeof(float), bytes, &ok);
    s->g = fwd_alloc64(c * P * sizeof(float), bytes, &ok);
    s->u = fwd_alloc64(c * P * sizeof(float), bytes, &ok);
    if (!ok) {
        fwd_ple_free(s);
        return NULL;
    }
    return s;
}

int fwd_ple_inputs(fwd_ple *s, tpool *pool, const struct kvi_model *m, const int32_t *tokens, const float *x,
                   int n)
{
    const int np = s->np, P = m->ple_dim;
    const float tok_scale = sqrtf((float)P), proj_scale = 1.0f / sqrtf((float)m->dim);
    const float half = 1.0f / sqrtf(2.0f);
    if (n > s->n_rows) return KVI_E_INVALID;
    for (int r0 = 0; r0 < n; r0 += s->chunk) {
        const int nr = n - r0 < s->chunk ? n - r0 : s->chunk;
        float *pl = s->pl + (size_t)r0 * np; /* [nr][np] */
        int rc = kern_matmul(pool, &m->ple_model_proj, x + (size_t)r0 * m->dim, m->dim, nr, pl, np);
        if (rc) return rc;
        for (size_t i = 0; i < (size_t)nr * np; i++) pl[i] *= proj_scale;
        fwd_rmsnorm_rows(pl, pl, m->ple_proj_norm, nr * m->n_layers, P, m->rms_eps);
        for (int r = 0; r < nr; r++) {
            float *t = s->tok + (size_t)r * np, *o = pl + (size_t)r * np;
            if ((rc = kern_tensor_get_row(&m->ple_tok, tokens[r0 + r], t))) return rc;
            for (int i = 0; i < np; i++) o[i] = (o[i] + t[i] * tok_scale) * half;
        }
    }
    return 0;
}

int fwd_ple_layer(fwd_ple *s, tpool *pool, const struct kvi_model *m, int l, const uint16_t *gelu, float *x,
                  int r0, int n, float *y)
{
    const model_layer *L = &m->layers[l];
    const int P = m->ple_dim, dim = m->dim;
    if (n > s->chunk) return KVI_E_INVALID;
    int rc = kern_matmul(pool, &L->ple_gate, x, dim, n, s->g, P);
    if (rc) return rc;
    for (int r = 0; r < n; r++)
        memcpy(s->u + (size_t)r * P, s->pl + (size_t)(r0 + r) * s->np + (size_t)l * P,
               (size_t)P * sizeof(float));
    fwd_glu(MODEL_ACT_GELU_TANH, gelu, s->g, s->u, (size_t)n * P);
    if ((rc = kern_matmul(pool, &L->ple_proj, s->g, P, n, y, dim))) return rc;
    fwd_rmsnorm_rows(y, y, L->ple_norm, n, dim, m->rms_eps);
    for (size_t i = 0; i < (size_t)n * dim; i++) x[i] += y[i];
    return 0;
}
