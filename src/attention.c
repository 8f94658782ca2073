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
 *
 * Tiles come straight from the cached format (kvq_row_slice for f32/f16/q8_0/
 * q4_0 rows; a KIVI group's codes, or its f16 rows from the table's tail or the
 * batch stash while the group is incomplete at the row's position).
 *
 * Received attention (H2O): for a row with recv[r], one work item covers all its
 * kv heads in order, and after the online pass a second pass over the K tiles
 * recomputes each score exactly as before and adds e^(s - m) / l to recv[r][t],
 * heads in order: deterministic, and nothing is paid by rows without recv.
 */
#include "attention.h"

#include "kernels.h"
#include "kv_quant.h"
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

/* K tile [nt][hd] of kv head g from logical block j (positions j*bs ..), as seen
 * by a query at position pos. */
static void load_k_tile(const attn_args *a, const kv_table *t, int32_t j, int nt, int g,
                        int32_t pos, float *ktile)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim, bs = kv->block_size, kvd = kv->kv_dim, off = g * hd;
    if (kv->type_k == KVI_TYPE_KV_Q4) {
        const kvi_f16 *f = NULL;
        if ((int64_t)j * bs + bs - 1 > pos) f = kivi_group_f16(kv, t, a->layer, j, a->stash);
        if (f) {
            for (int i = 0; i < nt; i++)
                for (int d = 0; d < hd; d++)
                    ktile[(size_t)i * hd + d] = kvi_f16_to_f32(f[(size_t)i * kvd + off + d]);
        } else {
            const uint8_t *region = kv_k_group(kv, t, a->layer, j);
            for (int i = 0; i < nt; i++) kivi_group_slice(region, kvd, i, off, hd, ktile + (size_t)i * hd);
        }
        return;
    }
    const int32_t t0 = j * bs;
    for (int i = 0; i < nt; i++)
        kvq_row_slice(kv->type_k, kv_k_row(kv, t, a->layer, t0 + i), off, hd, ktile + (size_t)i * hd);
}

static void load_v_tile(const attn_args *a, const kv_table *t, int32_t j, int nt, int g, float *vtile)
{
    const kv_pool *kv = a->kv;
    const int hd = a->head_dim;
    const int32_t t0 = j * kv->block_size;
    for (int i = 0; i < nt; i++)
        kvq_row_slice(kv->type_v, kv_v_row(kv, t, a->layer, t0 + i), g * hd, hd, vtile + (size_t)i * hd);
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
    const float scale = 1.0f / sqrtf((float)hd);
    const int32_t pos = a->pos[r];
    const kv_table *t = a->tables[r];
    const size_t qstride = (size_t)a->n_heads * hd;

    for (int j = 0; j < group; j++) {
        mx[j] = -INFINITY;
        sum[j] = 0.0f;
    }
    memset(acc, 0, (size_t)group * hd * sizeof(float));

    for (int32_t t0 = 0, blk = 0; t0 <= pos; t0 += bs, blk++) {
        const int nt = (pos - t0 + 1) < bs ? (int)(pos - t0 + 1) : bs;
        load_k_tile(a, t, blk, nt, g, pos, ktile);
        load_v_tile(a, t, blk, nt, g, vtile);
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

    /* H2O: normalised weights of this kv head's query heads, added per position */
    float *recv = a->recv ? a->recv[r] : NULL;
    if (!recv) return;
    for (int32_t t0 = 0, blk = 0; t0 <= pos; t0 += bs, blk++) {
        const int nt = (pos - t0 + 1) < bs ? (int)(pos - t0 + 1) : bs;
        load_k_tile(a, t, blk, nt, g, pos, ktile);
        for (int j = 0; j < group; j++) {
            const int h = g * group + j;
            const float *qh = a->q + (size_t)r * qstride + (size_t)h * hd;
            const float inv = 1.0f / sum[j];
            for (int i = 0; i < nt; i++) {
                const float si = kvi_dot_f32(qh, ktile + (size_t)i * hd, hd) * scale;
                recv[t0 + i] += expf(si - mx[j]) * inv;
            }
        }
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
    for (int64_t it = ith; it < n_items; it += nth) {
        const int r = (int)(it / a->n_kv_heads), g = (int)(it % a->n_kv_heads);
        if (a->recv && a->recv[r]) {
            /* one thread adds every head of the row to recv[r], in head order */
            if (g == 0)
                for (int gg = 0; gg < a->n_kv_heads; gg++) attend_item(a, job->s, w, r, gg);
        } else {
            attend_item(a, job->s, w, r, g);
        }
    }
}

void attention_rows(kvi_pool *pool, attn_scratch *s, const attn_args *a)
{
    attn_job job = {a, s};
    kvi_pool_run(pool, attn_worker, &job);
}

/* Key row of position tp as a query at position p sees it (kv_dim floats). */
static void ref_key(const attn_args *a, const kv_table *t, int32_t tp, int32_t p, float *row)
{
    const kv_pool *kv = a->kv;
    if (kv->type_k != KVI_TYPE_KV_Q4) {
        kv_read_row(kv, t, a->layer, 0, tp, row);
        return;
    }
    const int bs = kv->block_size, kvd = kv->kv_dim;
    const int32_t g = tp / bs;
    const kvi_f16 *f = (int64_t)g * bs + bs - 1 > p ? kivi_group_f16(kv, t, a->layer, g, a->stash) : NULL;
    if (f)
        for (int c = 0; c < kvd; c++) row[c] = kvi_f16_to_f32(f[(size_t)(tp % bs) * kvd + c]);
    else
        kivi_group_slice(kv_k_group(kv, t, a->layer, g), kvd, tp % bs, 0, kvd, row);
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
                ref_key(a, a->tables[r], t, a->pos[r], row);
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
                kv_read_row(kv, a->tables[r], a->layer, 1, t, row);
                for (int i = 0; i < hd; i++) acc[i] += p[t] / tot * row[g * hd + i];
            }
            for (int i = 0; i < hd; i++) o[i] = (float)acc[i];
            free(acc);
        }
    }
    free(row);
    free(p);
}
