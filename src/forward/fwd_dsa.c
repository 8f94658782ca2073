/*
 * fwd_dsa.c — DeepSeek Sparse Attention of one layer (fwd_dsa.h).
 *
 * Data (one chunk of n rows; IH indexer heads of ID dims, R RoPE dims):
 *   iq [n][IH * ID]  the indexer queries (after RoPE)
 *   ik [n][ID]       the keys before they go to the cache
 *   wt [n][IH]       the heads' weights, scaled by 1 / sqrt(ID IH)
 * Per thread (tpool_scratch), for one row at a time: the scores [pos + 1], the chosen
 * positions [top_k] and their latent rows [top_k][head_dim].
 */
#include "forward/fwd_dsa.h"

#include "forward/fwd_alloc.h"
#include "forward/fwd_norm.h"

#include "base/error.h"
#include "kernels/dsa.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct fwd_dsa {
    float *iq; /* [chunk][IH * ID] */
    float *ik; /* [chunk][ID] */
    float *wt; /* [chunk][IH] */
};

void fwd_dsa_free(fwd_dsa *s)
{
    if (!s) return;
    free(s->iq);
    free(s->ik);
    free(s->wt);
    free(s);
}

fwd_dsa *fwd_dsa_create(const struct kvi_model *m, int chunk, size_t *bytes)
{
    fwd_dsa *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t c = (size_t)chunk, ih = (size_t)m->idx_heads, id = (size_t)m->idx_dim;
    bool ok = true;
    s->iq = fwd_alloc64(c * ih * id * sizeof(float), bytes, &ok);
    s->ik = fwd_alloc64(c * id * sizeof(float), bytes, &ok);
    s->wt = fwd_alloc64(c * ih * sizeof(float), bytes, &ok);
    if (!ok) {
        fwd_dsa_free(s);
        return NULL;
    }
    return s;
}

int fwd_dsa_index(fwd_dsa *s, tpool *pool, const struct kvi_model *m, const model_layer *L, const float *xb,
                  const float *qa, int n, const float *rc, const float *rs, kv_pool *kv, int l,
                  const kv_table *const *tables, const int32_t *pos)
{
    const int ih = m->idx_heads, id = m->idx_dim, half = m->n_rot / 2;
    int rc_;
    const kern_tensor *w2[2] = { &L->idx_wk, &L->idx_proj };
    float *const y2[2] = { s->ik, s->wt };
    const int64_t ld2[2] = { id, ih };
    if ((rc_ = kern_matmul_multi(pool, 2, w2, xb, m->dim, n, y2, ld2)) ||
        (rc_ = kern_matmul(pool, &L->idx_wq_b, qa, m->mla_q_rank, n, s->iq, (int64_t)ih * id)))
        return rc_;
    fwd_layernorm_bias_rows(s->ik, s->ik, L->idx_k_norm, L->idx_k_bias, n, id, m->rms_eps);
    const float wscale = 1.0f / sqrtf((float)id * (float)ih);
    for (int r = 0; r < n; r++) {
        const float *c = rc + (size_t)r * half, *sn = rs + (size_t)r * half;
        float *k = s->ik + (size_t)r * id;
        kern_rope_head(k, c, sn, half, true);
        for (int h = 0; h < ih; h++) kern_rope_head(s->iq + ((size_t)r * ih + h) * id, c, sn, half, true);
        for (int h = 0; h < ih; h++) s->wt[(size_t)r * ih + h] *= wscale;
        memcpy(kv_idx_row(kv, tables[r], l, pos[r]), k, (size_t)id * sizeof(float));
    }
    return 0;
}

typedef struct {
    const fwd_dsa *s;
    tpool *pool;
    const struct kvi_model *m;
    const kv_pool *kv;
    int l, n;
    const kv_table *const *tables;
    const int32_t *pos;
    const float *q;
    float *att;
    int failed; /* a part found no scratch memory */
} dsa_job;

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Rows ith, ith + nth, ...: scores block by block, the choice, the attention. */
static void dsa_rows(void *ctx, int ith, int nth)
{
    dsa_job *j = ctx;
    const struct kvi_model *m = j->m;
    const kv_pool *kv = j->kv;
    const int ih = m->idx_heads, id = m->idx_dim, hd = m->head_dim, nh = m->n_heads, bs = kv->block_size;
    const int top = m->idx_top_k;
    for (int r = ith; r < j->n; r += nth) {
        const kv_table *t = j->tables[r];
        const int np = j->pos[r] + 1, nsel = np < top ? np : top;
        /* sc [np] scores, sel [nsel] positions, rows [nsel][hd] */
        const size_t o_sel = ((size_t)np * sizeof(float) + 63) / 64 * 64;
        const size_t o_rows = o_sel + ((size_t)nsel * sizeof(int32_t) + 63) / 64 * 64;
        uint8_t *mem = tpool_scratch(j->pool, ith, o_rows + (size_t)nsel * (size_t)hd * sizeof(float));
        if (!mem) {
            j->failed = 1;
            return;
        }
        float *sc = (float *)mem, *rows = (float *)(mem + o_rows);
        int32_t *sel = (int32_t *)(mem + o_sel);
        const float *iq = j->s->iq + (size_t)r * ih * id, *wt = j->s->wt + (size_t)r * ih;
        for (int p0 = 0; p0 < np; p0 += bs) /* one block's keys at a time */
            kern_dsa_scores(iq, wt, ih, id, kv_idx_row(kv, t, j->l, p0), id, np - p0 < bs ? np - p0 : bs,
                            sc + p0);
        const int ns = kern_dsa_topk(sc, np, nsel, sel);
        qsort(sel, (size_t)ns, sizeof *sel, cmp_i32); /* attention in position order */
        for (int i = 0; i < ns; i++) kv_read_row(kv, t, j->l, 0, sel[i], rows + (size_t)i * hd);
        for (int h = 0; h < nh; h++)
            kern_dsa_attend(j->q + ((size_t)r * nh + h) * hd, rows, hd, ns, hd, m->kq_scale,
                            j->att + ((size_t)r * nh + h) * hd);
    }
}

int fwd_dsa_attend(fwd_dsa *s, tpool *pool, const struct kvi_model *m, const kv_pool *kv, int l,
                   const kv_table *const *tables, const int32_t *pos, int n, const float *q, float *att)
{
    dsa_job j = { s, pool, m, kv, l, n, tables, pos, q, att, 0 };
    tpool_run(pool, dsa_rows, &j);
    return j.failed ? KVI_E_NOMEM : 0;
}
