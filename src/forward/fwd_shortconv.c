/*
 * fwd_shortconv.c — LFM2's gated short convolution (fwd_shortconv.h) over n rows:
 *
 *   p = xb in_proj^T                        p [n][3 dim]: [B | C | x] per row
 *                                           -- one matrix product over all rows
 *   per channel (the pool's threads split the channels), rows in order
 *   (kernels/shortconv.h):
 *     u = B * x; c = sum_k w[:, k] [conv state | u][k]; state <- its last K - 2 rows, u
 *     v = C * c                             v [n][dim]
 *   y = v out_proj^T                        y [n][dim]
 *
 * A row reads and advances its own sequence's state in place, so rows of one
 * sequence in position order see exactly what token-by-token decode would: the same
 * bits whatever the batch, the thread count (a channel stays with one thread) and
 * the ISA path (the kernel's contract).
 */
#include "forward/fwd_shortconv.h"

#include "forward/fwd_alloc.h"

#include "kernels/kernels.h"
#include "kernels/shortconv.h"

#include <string.h>

/* Rows from which the convolution is split over the pool (below, the calling thread
 * does it: the same bits either way) */
#define FWD_SHORTCONV_PAR_ROWS 16

struct fwd_shortconv {
    int chunk;
    float *p; /* [chunk][3 dim] in_proj output: B | C | x */
    float *v; /* [chunk][dim] C * conv(B * x) */
};

void fwd_shortconv_free(fwd_shortconv *s)
{
    if (!s) return;
    free(s->p);
    free(s->v);
    free(s);
}

fwd_shortconv *fwd_shortconv_create(const struct kvi_model *m, int chunk, size_t *bytes)
{
    fwd_shortconv *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t n = (size_t)chunk, dim = (size_t)m->dim;
    bool ok = true;
    s->chunk = chunk;
    s->p = fwd_alloc64(n * 3 * dim * sizeof(float), bytes, &ok);
    s->v = fwd_alloc64(n * dim * sizeof(float), bytes, &ok);
    if (!ok) {
        fwd_shortconv_free(s);
        return NULL;
    }
    return s;
}

typedef struct sconv_task {
    const struct kvi_model *m;
    const model_layer *L;
    const fwd_shortconv *s;
    int n;
    float *const *state;
    const int32_t *pos;
    float *const *snap;
    const tpool *pool;
} sconv_task;

/* Channels [c0, c1) of thread ith of nth over every row, in row order. */
static void sconv_channels(void *ctx, int ith, int nth)
{
    const sconv_task *t = ctx;
    const tpool *pool = t->pool;
    const int dim = t->m->dim, K = t->m->ssm_conv;
    int c0, c1;
    tpool_share(dim, ith, nth, &c0, &c1);
    const size_t bytes = (size_t)(c1 - c0) * sizeof(float);
    for (int r = 0; r < t->n; r++) {
        float *st = t->state[r]; /* [K - 1][dim] */
        if (t->pos[r] == 0)      /* a sequence's first position starts from zeros */
            for (int k = 0; k < K - 1; k++) memset(st + (size_t)k * dim + c0, 0, bytes);
        const float *p = t->s->p + (size_t)r * 3 * dim;
        kern_shortconv_row(pool, t->L->conv_w, K, st, (size_t)dim, p, p + dim, p + 2 * (size_t)dim, c0, c1,
                           t->s->v + (size_t)r * dim);
        if (t->snap && t->snap[r]) /* the state as it is after row r */
            for (int k = 0; k < K - 1; k++)
                memcpy(t->snap[r] + (size_t)k * dim + c0, st + (size_t)k * dim + c0, bytes);
    }
}

/* fwd_shortconv_run over at most s->chunk rows */
static int sconv_part(fwd_shortconv *s, tpool *pool, const struct kvi_model *m, const model_layer *L,
                      const float *xb, int n, float *const *state, const int32_t *pos, float *const *snap,
                      float *y)
{
    const int dim = m->dim;
    int rc = kern_matmul(pool, &L->ssm_qkv, xb, dim, n, s->p, 3 * dim);
    if (rc) return rc;
    sconv_task t = { .m = m, .L = L, .s = s, .n = n, .state = state, .pos = pos, .snap = snap, .pool = pool };
    if (n >= FWD_SHORTCONV_PAR_ROWS) /* a few rows: less work than waking the pool */
        tpool_run(pool, sconv_channels, &t);
    else
        sconv_channels(&t, 0, 1);
    return kern_matmul(pool, &L->ssm_out, s->v, dim, n, y, dim);
}

int fwd_shortconv_run(fwd_shortconv *s, tpool *pool, const struct kvi_model *m, const model_layer *L,
                      const float *xb, int n, float *const *state, const int32_t *pos, float *const *snap,
                      float *y)
{
    /* parts of s->chunk rows in order: each continues the states the previous left */
    const int dim = m->dim;
    for (int r0 = 0; r0 < n; r0 += s->chunk) {
        const int k = n - r0 < s->chunk ? n - r0 : s->chunk;
        const int rc = sconv_part(s, pool, m, L, xb + (size_t)r0 * dim, k, state + r0, pos + r0,
                                  snap ? snap + r0 : NULL, y + (size_t)r0 * dim);
        if (rc) return rc;
    }
    return 0;
}
