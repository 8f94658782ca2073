/*
 * fwd_encoder.c — an embedding model's pass over whole inputs (fwd_encoder.h),
 * the block of model_enc.h, with no KV cache.
 *
 * The n_in inputs are laid end to end as N rows: input i is rows
 * [start[i], start[i + 1]), its row j at position j. Every matrix product runs over
 * all N rows at once (the FFN in chunks of ENC_CHUNK rows), so a batch of inputs is
 * a few large products; attention runs per (input, head), each job reading only
 * its input's rows: encoders all of them (a window layer |p_q - p_k| <= W / 2),
 * decoders positions 0 .. p (a window layer the last W).
 *
 *   x    [N][dim]      residual stream
 *   xb   [N][dim]      a sub-layer's normed input, then its output
 *   q    [N][n_heads * head_dim], k, v [N][n_kv_heads * head_dim]
 *   att  [N][n_heads * head_dim]
 *   hg, hu [ENC_CHUNK][ffn]    FFN gate / up of one chunk
 *   rc, rs [n_sets][max_len][n_rot / 2]   RoPE cos / sin by position
 *
 * Invariant: every row's result depends only on its own input's rows, through
 * computations whose order does not depend on N, on the row's place or on the
 * thread count (the products' contract, per-row norms, per-job attention), so an
 * input gives the same bits alone or inside any batch.
 */
#include "forward/fwd_encoder.h"

#include "forward/fwd_act.h"
#include "forward/fwd_alloc.h"
#include "forward/fwd_norm.h"

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ENC_CHUNK 256 /* rows per FFN chunk */

typedef struct enc_pass {
    const struct kvi_model *m;
    const model_enc *e;
    tpool *pool;
    int n_in, N, max_len;
    int *start; /* [n_in + 1] first row of each input */
    float *x, *xb, *q, *k, *v, *att, *hg, *hu;
    float *rc, *rs; /* [n_sets][max_len][half] */
    uint16_t *gelu; /* [65536] f16 GELU table (fwd_act.h) */
    float *gelu32;  /* [65536] the same widened to f32 */
    float *moe_buf; /* [ENC_CHUNK][n_expert_used][dim] expert outputs, or NULL */
    int layer;      /* the layer an attention run is for */
    bool failed;    /* an attention job could not run (scratch memory) */
    size_t bytes;
} enc_pass;

static void pass_free(enc_pass *p)
{
    free(p->start), free(p->x), free(p->xb), free(p->q), free(p->k), free(p->v), free(p->att);
    free(p->hg), free(p->hu), free(p->rc), free(p->rs), free(p->gelu), free(p->gelu32), free(p->moe_buf);
}

static float *falloc(enc_pass *p, size_t n, bool *ok)
{
    return fwd_alloc64(n * sizeof(float), &p->bytes, ok);
}

/* out = norm(x) by w (+ b): LayerNorm or RMSNorm as the model says; a copy when w is NULL */
static void norm_rows(const enc_pass *p, float *out, const float *x, const float *w, const float *b, int n)
{
    const struct kvi_model *m = p->m;
    if (!w) {
        if (out != x) memcpy(out, x, (size_t)n * m->dim * sizeof(float));
    } else if (p->e->layer_norm) {
        fwd_layernorm_bias_rows(out, x, w, b, n, m->dim, m->rms_eps);
    } else {
        fwd_rmsnorm_rows(out, x, w, n, m->dim, m->rms_eps);
    }
}

static void add_bias(float *y, const float *b, int n, int d)
{
    for (int r = 0; b && r < n; r++)
        for (int i = 0; i < d; i++) y[(size_t)r * d + i] += b[i];
}

static void add_rows(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static int pass_alloc(enc_pass *p, kvi_error *err)
{
    const struct kvi_model *m = p->m;
    const size_t N = (size_t)p->N, qd = (size_t)m->n_heads * m->head_dim,
                 kvd = (size_t)m->n_kv_heads * m->head_dim;
    const size_t C = N < ENC_CHUNK ? N : ENC_CHUNK, half = (size_t)(m->n_rot / 2);
    const size_t ffn = (size_t)(m->ffn_dim > m->expert_ffn ? m->ffn_dim : m->expert_ffn);
    bool ok = true, need_gelu;
    p->x = falloc(p, N * m->dim, &ok);
    p->xb = falloc(p, N * m->dim, &ok);
    p->q = falloc(p, N * qd, &ok);
    p->k = falloc(p, N * kvd, &ok);
    p->v = falloc(p, N * kvd, &ok);
    p->att = falloc(p, N * qd, &ok);
    p->hg = falloc(p, C * (ffn > (size_t)m->n_expert ? ffn : (size_t)m->n_expert), &ok);
    p->hu = falloc(p, C * ffn, &ok);
    p->rc = falloc(p, (size_t)m->n_rope_sets * p->max_len * (half ? half : 1), &ok);
    p->rs = falloc(p, (size_t)m->n_rope_sets * p->max_len * (half ? half : 1), &ok);
    if (m->n_expert > 0) p->moe_buf = falloc(p, C * m->n_expert_used * m->dim, &ok);
    p->gelu = fwd_act_table(MODEL_ACT_GELU_TANH, &need_gelu);
    p->gelu32 = fwd_gelu_table_f32(p->gelu);
    if (!ok || !p->gelu32)
        return err_set(err, KVI_E_NOMEM, "embed: cannot allocate the scratch of %d rows (%zu bytes)", p->N,
                       p->bytes);
    return 0;
}

/* RoPE cos / sin of positions 0 .. max_len - 1 for every set (forward.c's
 * frequencies: rounded to float, linear scaling only). */
static void rope_tables(enc_pass *p)
{
    const struct kvi_model *m = p->m;
    const int half = m->n_rot / 2;
    double inv[MODEL_MAX_HEAD_DIM / 2];
    for (int s = 0; s < m->n_rope_sets; s++) {
        const model_rope *r = &m->rope[s];
        for (int i = 0; i < half; i++) {
            double f = kern_rope_freq(r->theta, m->n_rot, r->factors, i);
            if (r->freq_scale != 1.0f) f *= r->freq_scale;
            inv[i] = (double)(float)f;
        }
        for (int pos = 0; pos < p->max_len; pos++) {
            const size_t o = ((size_t)s * p->max_len + pos) * half;
            kern_rope_cos_sin((double)pos, inv, half, p->rc + o, p->rs + o);
        }
    }
}

/* x = embed(token) * emb_scale (+ position row) (+ token type 0), then the embedding norm */
static int embed_rows(enc_pass *p, const int32_t *const toks[], kvi_error *err)
{
    const struct kvi_model *m = p->m;
    const model_enc *e = p->e;
    const int dim = m->dim;
    for (int i = 0; i < p->n_in; i++)
        for (int j = 0; j < p->start[i + 1] - p->start[i]; j++) {
            float *xr = p->x + (size_t)(p->start[i] + j) * dim;
            const int32_t t = toks[i][j];
            if (t < 0 || t >= m->n_vocab || kern_tensor_get_row(&m->tok_embd, t, xr))
                return err_set(err, KVI_E_INVALID,
                               "embed: input %d: token %d is not in the vocabulary (0..%d)", i, (int)t,
                               m->n_vocab - 1);
            if (m->emb_scale != 1.0f)
                for (int d = 0; d < dim; d++) xr[d] *= m->emb_scale;
            if (e->tok_type0) add_rows(xr, e->tok_type0, (size_t)dim);
            if (e->pos_embd.data) {
                float *row = p->xb; /* free until the first layer */
                if (kern_tensor_get_row(&e->pos_embd, j, row))
                    return err_set(err, KVI_E_INVALID, "embed: position %d beyond the model's %lld", j,
                                   (long long)e->pos_embd.n_out);
                add_rows(xr, row, (size_t)dim);
            }
        }
    norm_rows(p, p->x, p->x, e->embd_norm, e->embd_norm_b, p->N);
    return 0;
}

/* The keys row r (position pos of an input of len rows) sees in a layer of window w */
static void key_range(const enc_pass *p, int w, int pos, int len, int *lo, int *hi)
{
    if (p->e->encoder) {
        *lo = 0, *hi = len - 1;
        if (w > 0 && p->e->sym_window) {
            *lo = pos - w / 2 > 0 ? pos - w / 2 : 0;
            *hi = pos + w / 2 < len - 1 ? pos + w / 2 : len - 1;
        } else if (w > 0) {
            *lo = pos - w + 1 > 0 ? pos - w + 1 : 0;
        }
    } else {
        *lo = w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0, *hi = pos;
    }
}

/* One (input, head) attention job per index, on the thread's scratch [kh | vt | sc]:
 *   kh [len][hd]   the head's keys, gathered
 *   vt [hd][len]   its values, transposed
 *   sc [len][len]  scores q kh^T (one product), masked, softmax by rows in place,
 * then att = sc vt^T (one product). The products run on the calling thread
 * (kern_matmul without a pool), each with the input's own sizes, so a job's bits do
 * not depend on the other inputs or on the thread that runs it. */
static void attn_jobs(void *ctx, int ith, int nth)
{
    enc_pass *p = ctx;
    const struct kvi_model *m = p->m;
    const int hd = m->head_dim, nh = m->n_heads, grp = m->n_heads / m->n_kv_heads;
    const size_t qd = (size_t)nh * hd, kvd = (size_t)m->n_kv_heads * hd, L = (size_t)p->max_len;
    const int w = m->layers[p->layer].window;
    float *kh = tpool_scratch(p->pool, ith, (2 * L * hd + L * L) * sizeof(float));
    for (int job = ith; kh && job < p->n_in * nh; job += nth) {
        const int in = job / nh, h = job % nh, r0 = p->start[in], len = p->start[in + 1] - r0;
        float *vt = kh + (size_t)len * hd, *sc = vt + (size_t)len * hd;
        for (int j = 0; j < len; j++) {
            const size_t o = (size_t)(r0 + j) * kvd + (size_t)(h / grp) * hd;
            memcpy(kh + (size_t)j * hd, p->k + o, (size_t)hd * sizeof(float));
            for (int d = 0; d < hd; d++) vt[(size_t)d * len + j] = p->v[o + d];
        }
        const kern_tensor K = { .data = kh, .type = KVI_TYPE_F32, .n_in = hd, .n_out = len };
        const kern_tensor V = { .data = vt, .type = KVI_TYPE_F32, .n_in = len, .n_out = hd };
        if (kern_matmul(NULL, &K, p->q + (size_t)r0 * qd + (size_t)h * hd, (int64_t)qd, len, sc, len)) {
            p->failed = true;
            continue;
        }
        for (int pos = 0; pos < len; pos++) {
            float *row = sc + (size_t)pos * len, mx = -INFINITY;
            int lo, hi;
            key_range(p, w, pos, len, &lo, &hi);
            for (int j = lo; j <= hi; j++) {
                float s = row[j] * m->kq_scale;
                if (m->attn_softcap > 0.0f) s = m->attn_softcap * tanhf(s / m->attn_softcap);
                row[j] = s;
                mx = s > mx ? s : mx;
            }
            double sum = 0;
            for (int j = lo; j <= hi; j++) sum += row[j] = expf(row[j] - mx);
            const float inv = (float)(1.0 / sum);
            for (int j = 0; j < len; j++) row[j] = j < lo || j > hi ? 0.0f : row[j] * inv;
        }
        if (kern_matmul(NULL, &V, sc, len, len, p->att + (size_t)r0 * qd + (size_t)h * hd, (int64_t)qd))
            p->failed = true;
    }
    if (!kh) p->failed = true;
}

/* q, k, v of all rows from xb, their biases, q/k norms and RoPE; attention into att;
 * the output projection into xb. */
static int attention(enc_pass *p, int l)
{
    const struct kvi_model *m = p->m;
    const model_layer *L = &m->layers[l];
    const int N = p->N, hd = m->head_dim, half = m->n_rot / 2;
    const int qd = m->n_heads * hd, kvd = m->n_kv_heads * hd;
    const kern_tensor *w3[3] = { &L->wq, &L->wk, &L->wv };
    float *const y3[3] = { p->q, p->k, p->v };
    const int64_t ld3[3] = { qd, kvd, kvd };
    int rc = kern_matmul_multi(p->pool, 3, w3, p->xb, m->dim, N, y3, ld3);
    if (rc) return rc;
    add_bias(p->q, L->bq, N, qd);
    add_bias(p->k, L->bk, N, kvd);
    add_bias(p->v, L->bv, N, kvd);
    if (L->q_norm) fwd_rmsnorm_rows(p->q, p->q, L->q_norm, N * m->n_heads, hd, m->rms_eps);
    if (L->k_norm) fwd_rmsnorm_rows(p->k, p->k, L->k_norm, N * m->n_kv_heads, hd, m->rms_eps);
    for (int i = 0; p->e->rope && i < p->n_in; i++)
        for (int r = p->start[i]; r < p->start[i + 1]; r++) {
            const size_t o = ((size_t)L->rope_set * p->max_len + (r - p->start[i])) * half;
            for (int h = 0; h < m->n_heads; h++)
                kern_rope_head(p->q + (size_t)r * qd + (size_t)h * hd, p->rc + o, p->rs + o, half,
                               m->rope_neox);
            for (int h = 0; h < m->n_kv_heads; h++)
                kern_rope_head(p->k + (size_t)r * kvd + (size_t)h * hd, p->rc + o, p->rs + o, half,
                               m->rope_neox);
        }
    p->layer = l;
    tpool_run(p->pool, attn_jobs, p);
    if (p->failed) return KVI_E_NOMEM;
    if ((rc = kern_matmul(p->pool, &L->wo, p->att, qd, N, p->xb, m->dim))) return rc;
    add_bias(p->xb, L->bo, N, m->dim);
    return 0;
}

/* index of the k largest of s [n] into idx, ties to the lower index */
static void top_k(const float *s, int n, int k, int *idx)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool used = false;
            for (int u = 0; u < j; u++) used |= idx[u] == e;
            if (!used && (best < 0 || s[e] > s[best])) best = e;
        }
        idx[j] = best;
    }
}

/* The experts of rows xb [n][dim] into out [n][dim] (model_enc.h): softmax router,
 * top n_expert_used, each chosen expert's plain GELU FFN weighted by its
 * probability, summed in the order of choice. Each expert runs once over the rows
 * that chose it (gathered into xg [n][dim], results yg [n][dim] scattered into
 * moe_buf [n][K][dim]); a row's bits do not depend on which rows share its expert. */
static int experts(enc_pass *p, const model_layer *L, const float *xb, int n, float *out)
{
    const struct kvi_model *m = p->m;
    const int E = m->n_expert, K = m->n_expert_used, F = m->expert_ffn, dim = m->dim;
    int *sel = malloc((size_t)n * K * sizeof *sel), *who = malloc((size_t)n * sizeof *who); /* [n][K], [n] */
    float *w = malloc((size_t)n * K * sizeof *w), *xg = malloc(2 * (size_t)n * dim * sizeof *xg), *yg;
    int rc = sel && who && w && xg ? kern_matmul(p->pool, &L->router, xb, dim, n, p->hg, E) : KVI_E_NOMEM;
    yg = xg + (size_t)n * dim;
    for (int r = 0; !rc && r < n; r++) { /* hg [n][E] logits -> probabilities, the choice */
        float *lg = p->hg + (size_t)r * E, mx = -INFINITY;
        double sum = 0;
        for (int e = 0; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
        for (int e = 0; e < E; e++) sum += lg[e] = expf(lg[e] - mx);
        for (int e = 0; e < E; e++) lg[e] = (float)(lg[e] / sum);
        top_k(lg, E, K, sel + (size_t)r * K);
        for (int j = 0; j < K; j++) w[(size_t)r * K + j] = lg[sel[(size_t)r * K + j]];
    }
    for (int e = 0; !rc && e < E; e++) {
        int cnt = 0;
        for (int i = 0; i < n * K; i++)
            if (sel[i] == e) {
                memcpy(xg + (size_t)cnt * dim, xb + (size_t)(i / K) * dim, (size_t)dim * sizeof *xg);
                who[cnt++] = i;
            }
        if (cnt == 0) continue;
        const kern_tensor up = kern_tensor_rows(&L->exp_up, (int64_t)e * F, F);
        const kern_tensor down = kern_tensor_rows(&L->exp_down, (int64_t)e * dim, dim);
        if ((rc = kern_matmul(p->pool, &up, xg, dim, cnt, p->hu, F))) break;
        fwd_gelu(p->gelu32, p->hu, (size_t)cnt * F);
        if ((rc = kern_matmul(p->pool, &down, p->hu, F, cnt, yg, dim))) break;
        for (int c = 0; c < cnt; c++)
            memcpy(p->moe_buf + (size_t)who[c] * dim, yg + (size_t)c * dim, (size_t)dim * sizeof *yg);
    }
    for (int r = 0; !rc && r < n; r++) {
        float *o = out + (size_t)r * dim;
        memset(o, 0, (size_t)dim * sizeof(float));
        for (int j = 0; j < K; j++)
            for (int d = 0; d < dim; d++)
                o[d] += w[(size_t)r * K + j] * p->moe_buf[((size_t)r * K + j) * dim + d];
    }
    free(sel), free(who), free(w), free(xg);
    return rc;
}

/* The FFN of rows xb [n][dim] into out [n][dim]: experts, gated or plain. */
static int ffn(enc_pass *p, const model_layer *L, const float *xb, int n, float *out)
{
    const struct kvi_model *m = p->m;
    const int dim = m->dim, f = m->ffn_dim;
    int rc;
    if (L->moe) return experts(p, L, xb, n, out);
    if (L->w_gate.data) {
        const kern_tensor *w2[2] = { &L->w_gate, &L->w_up };
        float *const y2[2] = { p->hg, p->hu };
        const int64_t ld2[2] = { f, f };
        if ((rc = kern_matmul_multi(p->pool, 2, w2, xb, dim, n, y2, ld2))) return rc;
        add_bias(p->hg, L->b_gate, n, f);
        add_bias(p->hu, L->b_up, n, f);
        fwd_glu(m->act, p->gelu, p->hg, p->hu, (size_t)n * f);
    } else {
        if ((rc = kern_matmul(p->pool, &L->w_up, xb, dim, n, p->hg, f))) return rc;
        add_bias(p->hg, L->b_up, n, f);
        fwd_gelu(p->gelu32, p->hg, (size_t)n * f);
    }
    if ((rc = kern_matmul(p->pool, &L->w_down, p->hg, f, n, out, dim))) return rc;
    add_bias(out, L->b_down, n, dim);
    return 0;
}

static int layer(enc_pass *p, int l)
{
    const struct kvi_model *m = p->m;
    const model_layer *L = &m->layers[l];
    const model_enc_layer *EL = p->e->layers ? &p->e->layers[l] : NULL;
    const int dim = m->dim;
    const size_t nd = (size_t)p->N * dim;
    const bool post = p->e->post_ln;
    int rc;
    /* attention: x = LN(x + o) (post-LN) or x += post_norm(o) */
    norm_rows(p, p->xb, p->x, post ? NULL : L->attn_norm, EL ? EL->attn_norm_b : NULL, p->N);
    if ((rc = attention(p, l))) return rc;
    if (L->post_attn_norm) fwd_rmsnorm_rows(p->xb, p->xb, L->post_attn_norm, p->N, dim, m->rms_eps);
    add_rows(p->x, p->xb, nd);
    if (post) norm_rows(p, p->x, p->x, EL->attn_out_norm, EL->attn_out_norm_b, p->N);
    /* FFN by chunks of rows: x = LN(x + d) or x += post_norm(d) */
    for (int r0 = 0; r0 < p->N; r0 += ENC_CHUNK) {
        const int n = p->N - r0 < ENC_CHUNK ? p->N - r0 : ENC_CHUNK;
        float *x = p->x + (size_t)r0 * dim, *xb = p->xb + (size_t)r0 * dim;
        norm_rows(p, xb, x, post ? NULL : L->ffn_norm, EL ? EL->ffn_norm_b : NULL, n);
        if ((rc = ffn(p, L, xb, n, xb))) return rc;
        if (L->post_ffn_norm) fwd_rmsnorm_rows(xb, xb, L->post_ffn_norm, n, dim, m->rms_eps);
        add_rows(x, xb, (size_t)n * dim);
        if (post) norm_rows(p, x, x, EL->out_norm, EL->out_norm_b, n);
    }
    return 0;
}

/* rows [n][dim] through the dense projections into out [n][n_embd_out] (each
 * intermediate [n][its width] allocated here) */
static int project(enc_pass *p, const float *rows, int n, float *out)
{
    const model_enc *e = p->e;
    const float *in = rows;
    float *prev = NULL;
    int64_t w = p->m->dim;
    int rc = 0;
    for (int i = 0; !rc && i < e->n_dense; i++) {
        const bool last = i == e->n_dense - 1;
        float *y = last ? out : malloc((size_t)n * e->dense[i].n_out * sizeof(float));
        rc = y ? kern_matmul(p->pool, &e->dense[i], in, w, n, y, e->dense[i].n_out) : KVI_E_NOMEM;
        free(prev);
        prev = last ? NULL : y;
        in = y, w = e->dense[i].n_out;
    }
    free(prev);
    if (e->n_dense == 0) memcpy(out, rows, (size_t)n * w * sizeof(float));
    return rc;
}

/* The classification head on rows h [n][dim] (overwritten) into out [n][n_cls_out]. */
static int rank_head(enc_pass *p, float *h, int n, float *out)
{
    const model_enc *e = p->e;
    const int dim = p->m->dim, nc = e->n_cls_out;
    int rc;
    if (e->cls.data) { /* h = tanh(cls h + cls_b), through t [n][dim] */
        float *t = malloc((size_t)n * dim * sizeof *t);
        rc = t ? kern_matmul(p->pool, &e->cls, h, dim, n, t, dim) : KVI_E_NOMEM;
        if (!rc) {
            add_bias(t, e->cls_b, n, dim);
            for (size_t i = 0; i < (size_t)n * dim; i++) h[i] = tanhf(t[i]);
        }
        free(t);
        if (rc) return rc;
    }
    if ((rc = kern_matmul(p->pool, &e->cls_out, h, dim, n, out, nc))) return rc;
    add_bias(out, e->cls_out_b, n, nc);
    for (int r = 0; e->cls_softmax && r < n; r++) {
        float *o = out + (size_t)r * nc, mx = -INFINITY;
        double sum = 0;
        for (int c = 0; c < nc; c++) mx = o[c] > mx ? o[c] : mx;
        for (int c = 0; c < nc; c++) sum += o[c] = expf(o[c] - mx);
        for (int c = 0; c < nc; c++) o[c] = (float)(o[c] / sum);
    }
    return 0;
}

/* Pools x (after the output norm) per input into xb [n_in][dim], then writes out. */
static int pool_out(enc_pass *p, int pooling, float *out)
{
    const struct kvi_model *m = p->m;
    const int dim = m->dim;
    if (pooling == KVI_POOLING_NONE) return project(p, p->x, p->N, out);
    for (int i = 0; i < p->n_in; i++) {
        const int r0 = p->start[i], len = p->start[i + 1] - r0;
        float *o = p->xb + (size_t)i * dim;
        if (pooling == KVI_POOLING_MEAN) {
            for (int d = 0; d < dim; d++) {
                float s = 0;
                for (int r = 0; r < len; r++) s += p->x[(size_t)(r0 + r) * dim + d];
                o[d] = s / (float)len;
            }
        } else {
            const bool first = pooling == KVI_POOLING_CLS || (pooling == KVI_POOLING_RANK && p->e->encoder);
            memcpy(o, p->x + (size_t)(first ? r0 : r0 + len - 1) * dim, (size_t)dim * sizeof(float));
        }
    }
    return pooling == KVI_POOLING_RANK ? rank_head(p, p->xb, p->n_in, out) : project(p, p->xb, p->n_in, out);
}

/* What this pass does not run: decoder features of chat models (fwd_run has them). */
static const char *unsupported(const struct kvi_model *m)
{
    if (m->mla_kv_rank > 0) return "latent attention";
    if (m->n_recurrent > 0) return "linear attention layers";
    if (m->attn_gated) return "gated attention";
    for (int s = 0; s < m->n_rope_sets; s++)
        if (m->rope[s].yarn || m->rope[s].mscale != 1.0f || m->rope_long)
            return "RoPE scaling by YaRN or LongRoPE";
    for (int l = 0; l < m->n_layers; l++) {
        if (m->layers[l].sinks) return "attention sinks";
        if (m->layers[l].moe && (m->layers[l].exp_gate.data || m->layers[l].sh_gate.data || m->expert_norm ||
                                 m->gating != MODEL_GATE_SOFTMAX || m->layers[l].router_b))
            return "gated or shared experts";
    }
    return NULL;
}

int fwd_encode(tpool *pool, const struct kvi_model *m, const int32_t *const toks[], const int32_t n_toks[],
               int n_in, int pooling, float *out, kvi_error *err)
{
    if (!m->enc) return err_set(err, KVI_E_UNSUPPORTED, "embed: the model has no embedding description");
    const char *no = unsupported(m);
    if (no) return err_set(err, KVI_E_UNSUPPORTED, "embed: %s (%s) in an embedding pass", no, m->arch);
    if (pooling == KVI_POOLING_RANK && m->enc->n_cls_out == 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "embed: rank pooling needs a classification head (cls.output)");
    if (pooling < KVI_POOLING_NONE || pooling > KVI_POOLING_RANK)
        return err_set(err, KVI_E_INVALID, "embed: unknown pooling %d", pooling);
    enc_pass p = { .m = m, .e = m->enc, .pool = pool, .n_in = n_in };
    int rc = 0;
    if (!(p.start = malloc(((size_t)n_in + 1) * sizeof *p.start)))
        return err_set(err, KVI_E_NOMEM, "embed: out of memory");
    p.start[0] = 0;
    for (int i = 0; i < n_in; i++) {
        p.start[i + 1] = p.start[i] + n_toks[i];
        p.max_len = n_toks[i] > p.max_len ? n_toks[i] : p.max_len;
    }
    p.N = p.start[n_in];
    if (!rc) rc = pass_alloc(&p, err);
    if (!rc) {
        rope_tables(&p);
        rc = embed_rows(&p, toks, err);
    }
    for (int l = 0; !rc && l < m->n_layers; l++)
        if ((rc = layer(&p, l))) err_set(err, rc, "embed: layer %d failed", l);
    if (!rc) {
        norm_rows(&p, p.x, p.x, m->output_norm, p.e->out_norm_b, p.N);
        if ((rc = pool_out(&p, pooling, out))) err_set(err, rc, "embed: pooling failed");
    }
    pass_free(&p);
    return rc;
}
