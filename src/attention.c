/*
 * attention.c — tiled causal attention with online softmax over paged KV
 * (contract in attention.h).
 *
 * Work item = (row, kv head). For one item the thread walks the row's blocks in
 * order; for each block it converts the kv head's slice of the K and V rows to
 * f32 tiles ([n_tok][head_dim] each), then updates every query head of the
 * group (n_heads / n_kv_heads heads share one kv head: GQA):
 *     s_t = q_h . k_t / sqrt(head_dim)
 *     m' = max(m, max_t s_t);  acc = acc * e^(m - m') + sum_t e^(s_t - m') v_t
 *     l  = l * e^(m - m') + sum_t e^(s_t - m')
 * and finally out_h = acc / l.
 */
#include "attention.h"

#include "kernels.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct attn_scratch {
    int n_threads;
    size_t floats_per_thread;
    float *buf;          /* [n_threads][floats_per_thread] */
    int block_size, head_dim, group, kv_dim;
};

/* Per-thread layout: ktile [bs][hd] | vtile [bs][hd] | scores [bs] | acc [group][hd]
 * | m [group] | l [group] | row [kv_dim] (generic dequantisation) */
attn_scratch *attn_scratch_create(int n_threads, int block_size, int head_dim, int n_heads,
                                  int n_kv_heads, int kv_dim)
{
    attn_scratch *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_threads = n_threads;
    s->block_size = block_size;
    s->head_dim = head_dim;
    s->group = n_heads / n_kv_heads;
    s->kv_dim = kv_dim;
    size_t f = 2 * (size_t)block_size * head_dim + block_size + (size_t)s->group * head_dim +
               2 * (size_t)s->group + kv_dim;
    s->floats_per_thread = (f + 15) & ~(size_t)15;
    s->buf = aligned_alloc(64, (size_t)n_threads * s->floats_per_thread * sizeof(float));
    if (!s->buf) {
        free(s);
        return NULL;
    }
    return s;
}

void attn_scratch_free(attn_scratch *s)
{
    if (!s) return;
    free(s->buf);
    free(s);
}

/* Elements [off, off+n) of a cached row of type t, as f32. */
static void row_slice_f32(kvi_type t, const uint8_t *row, int kv_dim, int off, int n, float *dst,
                          float *tmp)
{
    if (t == KVI_TYPE_F32) {
        memcpy(dst, (const float *)row + off, (size_t)n * sizeof(float));
    } else if (t == KVI_TYPE_F16) {
        const kvi_f16 *h = (const kvi_f16 *)row + off;
        for (int i = 0; i < n; i++) dst[i] = kvi_f16_to_f32(h[i]);
    } else {
        kvi_dequant_row(t, row, tmp, kv_dim);
        memcpy(dst, tmp + off, (size_t)n * sizeof(float));
    }
}

static void attend_item(const attn_args *a, attn_scratch *s, float *w, int r, int g)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, bs = kv->block_size, group = s->group;
    float *ktile = w;
    float *vtile = ktile + (size_t)bs * hd;
    float *sc = vtile + (size_t)bs * hd;
    float *acc = sc + bs;
    float *mx = acc + (size_t)group * hd;
    float *sum = mx + group;
    float *tmp = sum + group;
    const float scale = 1.0f / sqrtf((float)hd);
    const int32_t pos = a->pos[r];
    const kv_table *t = a->tables[r];
    const size_t qstride = (size_t)a->n_heads * hd;

    for (int j = 0; j < group; j++) {
        mx[j] = -INFINITY;
        sum[j] = 0.0f;
    }
    memset(acc, 0, (size_t)group * hd * sizeof(float));

    for (int32_t t0 = 0; t0 <= pos; t0 += bs) {
        const int nt = (pos - t0 + 1) < bs ? (int)(pos - t0 + 1) : bs;
        for (int i = 0; i < nt; i++) {
            row_slice_f32(kv->type_k, kv_k_row(kv, t, a->layer, t0 + i), kv->kv_dim, g * hd, hd,
                          ktile + (size_t)i * hd, tmp);
            row_slice_f32(kv->type_v, kv_v_row(kv, t, a->layer, t0 + i), kv->kv_dim, g * hd, hd,
                          vtile + (size_t)i * hd, tmp);
        }
        for (int j = 0; j < group; j++) {
            const int h = g * group + j;
            const float *qh = a->q + (size_t)r * qstride + (size_t)h * hd;
            float bmax = -INFINITY;
            for (int i = 0; i < nt; i++) {
                sc[i] = kvi_dot_f32(qh, ktile + (size_t)i * hd, hd) * scale;
                if (sc[i] > bmax) bmax = sc[i];
            }
            float *ah = acc + (size_t)j * hd;
            if (bmax > mx[j]) {
                const float c = expf(mx[j] - bmax);   /* 0 on the first block */
                for (int d = 0; d < hd; d++) ah[d] *= c;
                sum[j] *= c;
                mx[j] = bmax;
            }
            for (int i = 0; i < nt; i++) {
                const float e = expf(sc[i] - mx[j]);
                sum[j] += e;
                const float *vi = vtile + (size_t)i * hd;
                for (int d = 0; d < hd; d++) ah[d] += e * vi[d];
            }
        }
    }
    for (int j = 0; j < group; j++) {
        const int h = g * group + j;
        float *o = a->out + (size_t)r * qstride + (size_t)h * hd;
        const float inv = 1.0f / sum[j];
        for (int d = 0; d < hd; d++) o[d] = acc[(size_t)j * hd + d] * inv;
    }
}

typedef struct {
    const attn_args *a;
    attn_scratch *s;
} attn_job;

static void attn_worker(void *ctx, int ith, int nth)
{
    const attn_job *job = ctx;
    const attn_args *a = job->a;
    float *w = job->s->buf + (size_t)ith * job->s->floats_per_thread;
    const int64_t n_items = (int64_t)a->n_rows * a->n_kv_heads;
    for (int64_t it = ith; it < n_items; it += nth)
        attend_item(a, job->s, w, (int)(it / a->n_kv_heads), (int)(it % a->n_kv_heads));
}

void attention_rows(kvi_pool *pool, attn_scratch *s, const attn_args *a)
{
    attn_job job = {a, s};
    kvi_pool_run(pool, attn_worker, &job);
}

void attention_rows_ref(const attn_args *a)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const size_t qstride = (size_t)a->n_heads * hd;
    float *row = malloc((size_t)kv->kv_dim * sizeof(float));
    int32_t maxpos = 0;
    for (int r = 0; r < a->n_rows; r++)
        if (a->pos[r] > maxpos) maxpos = a->pos[r];
    double *p = malloc(((size_t)maxpos + 1) * sizeof(double));
    if (!row || !p) {
        free(row);
        free(p);
        return;
    }
    for (int r = 0; r < a->n_rows; r++) {
        for (int h = 0; h < a->n_heads; h++) {
            const int g = h / group;
            const float *qh = a->q + (size_t)r * qstride + (size_t)h * hd;
            double mx = -INFINITY, tot = 0;
            for (int32_t t = 0; t <= a->pos[r]; t++) {
                kvi_dequant_row(kv->type_k, kv_k_row(kv, a->tables[r], a->layer, t), row, kv->kv_dim);
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qh[i] * row[g * hd + i];
                p[t] = d / sqrt((double)hd);
                if (p[t] > mx) mx = p[t];
            }
            for (int32_t t = 0; t <= a->pos[r]; t++) {
                p[t] = exp(p[t] - mx);
                tot += p[t];
            }
            float *o = a->out + (size_t)r * qstride + (size_t)h * hd;
            for (int i = 0; i < hd; i++) o[i] = 0;
            double *acc = calloc((size_t)hd, sizeof(double));
            if (!acc) continue;
            for (int32_t t = 0; t <= a->pos[r]; t++) {
                kvi_dequant_row(kv->type_v, kv_v_row(kv, a->tables[r], a->layer, t), row, kv->kv_dim);
                for (int i = 0; i < hd; i++) acc[i] += p[t] / tot * row[g * hd + i];
            }
            for (int i = 0; i < hd; i++) o[i] = (float)acc[i];
            free(acc);
        }
    }
    free(row);
    free(p);
}
