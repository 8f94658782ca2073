/*
 * forward.c — the transformer block of model.h over a batch of rows.
 *
 * For n rows (any mix of prefill chunks and decode rows of any sequences):
 *
 *   x = embed(tokens) * emb_scale                       x    [n][dim]
 *   for each layer:
 *     xb = attn_norm ? rmsnorm(x) * attn_norm : x       xb   [n][dim]
 *     -- a recurrent layer (hybrid models): x += DeltaNet(xb), fwd_delta.h, each
 *        row advancing its sequence's state (kv_state); then the FFN below
 *     (gated attention: q rows per head [q | gate], or gate = xb Wo_gate^T;
 *      att *= sigmoid(gate))
 *     q = xb Wq^T (+bq), k = xb Wk^T (+bk),             q    [n][n_heads * head_dim]
 *     v = xb Wv^T (+bv)     -- one matrix product       k, v [n][kv_dim]
 *                              over all rows
 *     q, k = qk_norm(q), qk_norm(k)    (per head or over the row; none)
 *     RoPE(q, k) at each row's position, with the layer's RoPE set (rc, rs tables)
 *       (none on a NoPE / no_rope layer; the q/k norm after it when qk_norm_after_rope);
 *       q *= the position's temperature on q_temp layers
 *       -- latent attention (DeepSeek's MLA, fwd_mla.h): q in cache space
 *          [n][n_heads * head_dim], k = [rmsnorm(c) | rope(k_pe)] [n][head_dim],
 *          one KV head whose values are the keys' first mla_kv_rank dims
 *       -- sparse attention (DeepSeek V3.2, fwd_dsa.h): the indexer's key of each row
 *          into the blocks' indexer rows; each row attends only to the top_k positions
 *          its indexer scores highest
 *     K, V of each row -> its sequence's KV blocks at its position
 *     att = attention of each row over its sequence's  att  [n][n_heads * head_dim]
 *           cached positions (the causal mask is implied by the position; a
 *           window layer sees the last W), KQ scale and soft-cap of the model
 *     (latent: att of head h -> v_b[h] att[h][0..kv_rank)     mla_v [n][n_heads * v_dim])
 *     o = att Wo^T (+bo); o = post_attn_norm ? rmsnorm(o) * w : o
 *     x += residual_scale * o
 *     xb = ffn_norm ? rmsnorm(x) * ffn_norm : x  (parallel block: the attention's xb, kept in xp)
 *     h = act(xb Wgate^T (+b)) * (xb Wup^T (+b))        hg, hu [n][ffn_dim]
 *       (ungated, w_gate unbound: h = xielu(xb Wup^T (+b)) with the layer's parameters)
 *     d = h Wdown^T (+b); d = post_ffn_norm ? rmsnorm(d) * w : d
 *       -- or, in a mixture-of-experts layer, d = the chosen experts' weighted
 *          sum (+ a shared expert), fwd_moe.h          moe_y [n][dim]
 *     x += residual_scale * d
 *   logits = softcap(rmsnorm(x[out rows]) * output_norm Wout^T / logit_scale)
 *                                                       logits [n_out][n_vocab]
 *
 * (rmsnorm of the block's pre-norms and the output norm: LayerNorm when m->norm says so)
 * Every optional step is decided by the model's fields and tensors (model.h),
 * never by the architecture's name.
 *
 * Nothing here knows whether a row is "prefill" or "decode". Every row's result
 * depends only on its own inputs and its sequence's cache, computed in a fixed
 * order, so a row gives the same bits alone or inside any batch.
 *
 * Memory: only x (and the RoPE tables) hold every row. Each layer runs over the rows
 * in chunks of `chunk` rows (xb, q, k, v, att, hg, hu hold one chunk), chunk sized
 * so that those buffers stay near FWD_CHUNK_BYTES: a 1000-row prefill of a 1B model
 * would otherwise hold ~100 MB of activations. A chunk's rows write their K, V and
 * then attend; rows of one sequence come in position order, so every position a row
 * reads was written by its own or an earlier chunk, and the batch invariance above
 * makes the chunked pass bit-identical to an unchunked one.
 */
#include "forward/forward.h"

#include "forward/fwd_act.h"
#include "forward/fwd_alloc.h"
#include "forward/fwd_delta.h"
#include "forward/fwd_dsa.h"
#include "forward/fwd_shortconv.h"
#include "forward/fwd_lora.h"
#include "forward/fwd_mamba2.h"
#include "forward/fwd_mla.h"
#include "forward/fwd_moe.h"
#include "forward/fwd_norm.h"
#include "forward/fwd_ple.h"

#include "attention/attention.h"
#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "kernels/vec4.h"
#include "kv/kv_quant.h"
#include "formats/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Target bytes of the per-chunk activations (xb, q, k, v, att, hg, hu). */
#define FWD_CHUNK_BYTES ((size_t)16 << 20)
#define FWD_CHUNK_ALIGN 16 /* rows; the GEMM's row tile */
#define FWD_DELTA_ROWS 64  /* rows per part of a DeltaNet layer (fwd_delta.h) */
#define FWD_ATTN_SHAPES 4  /* distinct (head_dim, KV heads) of the layers */

struct fwd_ctx {
    const struct kvi_model *m;
    int n_rows_max;
    int chunk;                         /* rows per chunk, 1..n_rows_max */
    float *x;                          /* [n_rows_max][dim] residual stream */
    float *xb;                         /* [chunk][dim] normed input of a sub-layer */
    float *q;                          /* [chunk][n_heads * head_dim] */
    float *k;                          /* [chunk][kv_dim] */
    float *v;                          /* [chunk][kv_dim] */
    float *att;                        /* [chunk][n_heads * head_dim] attention output */
    float *hg;                         /* [chunk][ffn_dim] gate */
    float *hu;                         /* [chunk][ffn_dim] up */
    int n_sets;                        /* RoPE sets (model.h) */
    float *rc, *rs;                    /* [n_sets][n_rows_max][n_rot / 2] RoPE cos, sin per row */
    double *inv_freq;                  /* [n_sets][n_rot / 2] RoPE frequencies (float values) */
    float mscale[MODEL_MAX_ROPE_SETS]; /* cos and sin factor of each set */
    uint16_t *gelu;                    /* [65536] f16 GELU table (MODEL_ACT_GELU_TANH) or NULL */
    fwd_moe *moe;                      /* expert scratch (mixture-of-experts models) or NULL */
    float *moe_y;                      /* [chunk][dim] the expert block's output */
    uint64_t *routed;                  /* [n_layers][n_expert] rows routed to each expert, or NULL */
    fwd_mla *mla;                      /* latent attention scratch (mla_kv_rank > 0) or NULL */
    fwd_dsa *dsa;                      /* sparse attention's indexer (idx_heads > 0) or NULL */
    float *mla_v;                      /* [chunk][n_heads * mla_v_dim] the heads' values */
    fwd_delta *delta;                  /* DeltaNet scratch (hybrid models) or NULL */
    fwd_shortconv *sconv;              /* short convolution scratch (m->shortconv) or NULL */
    fwd_mamba2 *mamba;                 /* Mamba-2 scratch (ssm_kind MODEL_SSM_MAMBA2) or NULL */
    fwd_lora *lora;                    /* LoRA scratch, made by the first pass with adapters, or NULL */
    float **st, **sn;                  /* [chunk] per row: its sequence's layer state, snapshot or NULL */
    float *qg;                         /* [chunk][2 n_heads head_dim] gated q rows [q | gate] per head */
    float *gate;                       /* [chunk][n_heads * head_dim] the attention output gate */
    float *xp;                         /* [chunk][dim] the parallel block's normed input, or NULL */
    float *xm;                         /* [chunk][dim] the normed input of a Mamba-2 mixer beside
                                          attention (ssm_both), or NULL */
    size_t bytes;
    attn_scratch *attn;
    kv_stash stash; /* q4 key groups a layer's rows still read in f16 (kv_quant.h) */
    /* per-layer widths (gemma4): one attention scratch per (head_dim, KV heads) */
    int n_ash;
    attn_scratch *ash[FWD_ATTN_SHAPES];
    int ash_hd[FWD_ATTN_SHAPES], ash_kvh[FWD_ATTN_SHAPES];
    int kv_ld;        /* the cache's row (model_kv_dim) */
    float *kpad;      /* [kv_ld] a row padded with zeros to the cache's row, or NULL */
    kv_stash *lstash; /* [n_layers] layers whose K/V other layers read keep their own stash, or NULL */
    kv_stash *cur;    /* the stash of the layer running */
    fwd_ple *ple;     /* per-layer inputs (ple_dim > 0) or NULL */
};

static float *falloc(fwd_ctx *f, size_t n, bool *ok) { return fwd_alloc64(n * sizeof(float), &f->bytes, ok); }

void fwd_free(fwd_ctx *f)
{
    if (!f) return;
    free(f->x);
    free(f->xb);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->hg);
    free(f->hu);
    free(f->rc);
    free(f->rs);
    free(f->inv_freq);
    free(f->gelu);
    fwd_moe_free(f->moe);
    fwd_mla_free(f->mla);
    fwd_dsa_free(f->dsa);
    free(f->mla_v);
    fwd_delta_free(f->delta);
    fwd_shortconv_free(f->sconv);
    fwd_mamba2_free(f->mamba);
    fwd_lora_free(f->lora);
    free(f->st);
    free(f->sn);
    free(f->qg);
    free(f->gate);
    free(f->xp);
    free(f->xm);
    free(f->moe_y);
    free(f->routed);
    attn_scratch_free(f->attn);
    kv_stash_free(&f->stash);
    for (int i = 0; i < f->n_ash; i++) attn_scratch_free(f->ash[i]);
    free(f->kpad);
    for (int l = 0; f->lstash && l < f->m->n_layers; l++) kv_stash_free(&f->lstash[l]);
    free(f->lstash);
    fwd_ple_free(f->ple);
    free(f);
}

/* Frequency of pair i of RoPE set r (model.h), rounded to float as the pass has
 * always used them. */
static double rope_freq(const model_rope *r, int n_rot, int i)
{
    double f = kern_rope_freq(r->theta, n_rot, r->factors, i);
    if (r->yarn) { /* llama.cpp's ramp: 1 below yarn_lo (extrapolate), 0 above yarn_hi */
        const double d = r->yarn_hi - r->yarn_lo > 0.001 ? r->yarn_hi - r->yarn_lo : 0.001;
        double y = (i - r->yarn_lo) / d;
        y = y < 0 ? 0 : y > 1 ? 1 : y;
        const double ramp = 1.0 - y;
        f *= r->freq_scale * (1.0 - ramp) + ramp;
    } else if (r->freq_scale != 1.0f) {
        f *= r->freq_scale;
    }
    return (double)(float)f;
}

/* Per-layer widths (gemma4): an attention scratch for each (head_dim, KV heads) the
 * layers use besides the model's; a zero-padded row when a layer's K/V row is
 * narrower than the cache's; own stashes for layers whose K/V others read. */
static int fwd_layer_shapes(fwd_ctx *f, int n_threads, int block_size)
{
    const struct kvi_model *m = f->m;
    bool share = false, narrow = false, ok = true;
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const int hd = model_lhd(m, L), kvh = model_lkvh(m, L);
        share |= L->kv_share > 0;
        narrow |= !L->recurrent && hd * kvh < f->kv_ld;
        if (L->recurrent || (hd == m->head_dim && kvh == m->n_kv_heads)) continue;
        int i = 0;
        while (i < f->n_ash && (f->ash_hd[i] != hd || f->ash_kvh[i] != kvh)) i++;
        if (i < f->n_ash) continue;
        if (i == FWD_ATTN_SHAPES) return KVI_E_UNSUPPORTED;
        f->ash[i] = attn_scratch_create(n_threads, block_size, hd, m->n_heads, kvh, f->kv_ld);
        if (!f->ash[i]) return KVI_E_NOMEM;
        f->ash_hd[i] = hd;
        f->ash_kvh[i] = kvh;
        f->n_ash++;
    }
    if (narrow && !(f->kpad = falloc(f, (size_t)f->kv_ld, &ok))) return KVI_E_NOMEM;
    if (share) {
        f->lstash = calloc((size_t)m->n_layers, sizeof *f->lstash);
        if (!f->lstash) return KVI_E_NOMEM;
        for (int l = 0; l < m->n_layers; l++) kv_stash_init(&f->lstash[l]);
    }
    return 0;
}

/* The attention scratch of layer L's widths. */
static attn_scratch *layer_attn(const fwd_ctx *f, const model_layer *L)
{
    const int hd = model_lhd(f->m, L), kvh = model_lkvh(f->m, L);
    for (int i = 0; i < f->n_ash; i++)
        if (f->ash_hd[i] == hd && f->ash_kvh[i] == kvh) return f->ash[i];
    return f->attn;
}

fwd_ctx *fwd_create(const struct kvi_model *m, int n_rows_max, int force_chunk, int n_threads, int block_size,
                    int n_ctx, kvi_error *err)
{
    fwd_ctx *f = calloc(1, sizeof *f);
    if (!f) {
        err_set(err, KVI_E_NOMEM, "forward: out of memory");
        return NULL;
    }
    f->m = m;
    f->n_rows_max = n_rows_max;
    const size_t n = (size_t)n_rows_max;
    const size_t qd = (size_t)m->n_heads * m->head_dim, kvd = (size_t)m->n_kv_heads * m->head_dim;
    size_t row_bytes = ((size_t)m->dim + 2 * qd + 2 * kvd + 2 * (size_t)m->ffn_dim) * sizeof(float);
    if (m->n_expert > 0) /* fwd_moe's rows: logits, choices, gathered input, gate, up, output, sums */
        row_bytes += ((size_t)m->n_expert + 3 * (size_t)m->n_expert_used + 3 * (size_t)m->dim +
                      2 * (size_t)(m->expert_ffn > m->shared_ffn ? m->expert_ffn : m->shared_ffn)) *
                     sizeof(float);
    bool out_gate = m->attn_gated; /* some layer's attention output is gated */
    for (int l = 0; l < m->n_layers; l++) out_gate |= m->layers[l].wo_gate.data != NULL;
    if (out_gate) row_bytes += 3 * qd * sizeof(float); /* [q | gate] rows and the gate */
    if (m->parallel_ffn) row_bytes += (size_t)m->dim * sizeof(float); /* xp */
    size_t chunk = FWD_CHUNK_BYTES / row_bytes;
    chunk = chunk > FWD_CHUNK_ALIGN ? chunk / FWD_CHUNK_ALIGN * FWD_CHUNK_ALIGN : FWD_CHUNK_ALIGN;
    /* a caller's chunk (kvi_engine_params.fwd_chunk: tests of the chunked path) */
    if (force_chunk > 0) chunk = (size_t)force_chunk;
    if (chunk > n) chunk = n;
    f->chunk = (int)chunk;
    bool ok = true;
    f->x = falloc(f, n * m->dim, &ok);
    f->xb = falloc(f, chunk * m->dim, &ok);
    f->q = falloc(f, chunk * qd, &ok);
    f->k = falloc(f, chunk * kvd, &ok);
    f->v = falloc(f, chunk * kvd, &ok);
    f->att = falloc(f, chunk * qd, &ok);
    f->hg = falloc(f, chunk * m->ffn_dim, &ok);
    f->hu = falloc(f, chunk * m->ffn_dim, &ok);
    f->n_sets = m->n_rope_sets;
    const size_t half = (size_t)(m->n_rot / 2), ns = (size_t)f->n_sets;
    f->rc = falloc(f, ns * n * half, &ok);
    f->rs = falloc(f, ns * n * half, &ok);
    f->inv_freq = (double *)falloc(f, 2 * ns * half, &ok); /* 64-aligned: doubles */
    f->kv_ld = model_kv_dim(m);
    f->attn = attn_scratch_create(n_threads, block_size, m->head_dim, m->n_heads, m->n_kv_heads, f->kv_ld);
    if (f->attn && fwd_layer_shapes(f, n_threads, block_size) != 0) ok = false;
    if (!ok || !f->attn) {
        fwd_free(f);
        err_set(err, KVI_E_NOMEM, "forward: cannot allocate scratch for %d rows", n_rows_max);
        return NULL;
    }
    bool need_table;
    f->gelu = fwd_act_table(m->act, &need_table);
    if (need_table && !f->gelu) {
        fwd_free(f);
        err_set(err, KVI_E_NOMEM, "forward: cannot allocate the GELU table");
        return NULL;
    }
    if (f->gelu) f->bytes += 65536 * sizeof *f->gelu;
    if (m->n_expert > 0) {
        f->moe = fwd_moe_create(m, (int)chunk, &f->bytes);
        f->moe_y = falloc(f, chunk * m->dim, &ok);
        f->routed = calloc((size_t)m->n_layers * m->n_expert, sizeof *f->routed);
        if (!f->moe || !ok || !f->routed) {
            fwd_free(f);
            err_set(err, KVI_E_NOMEM, "forward: cannot allocate the expert scratch for %zu rows", chunk);
            return NULL;
        }
        f->bytes += (size_t)m->n_layers * m->n_expert * sizeof *f->routed;
    }
    if (m->mla_kv_rank > 0) {
        f->mla = fwd_mla_create(m, (int)chunk, &f->bytes);
        f->mla_v = falloc(f, chunk * (size_t)m->n_heads * m->mla_v_dim, &ok);
        if (m->idx_heads > 0 && !(f->dsa = fwd_dsa_create(m, (int)chunk, &f->bytes))) ok = false;
        if (!f->mla || !ok) {
            fwd_free(f);
            err_set(err, KVI_E_NOMEM, "forward: cannot allocate the latent attention scratch");
            return NULL;
        }
    }
    if (m->n_recurrent > 0) {
        /* its own parts of at most FWD_DELTA_ROWS rows: its scratch does not shrink the chunk */
        const int part = chunk < FWD_DELTA_ROWS ? (int)chunk : FWD_DELTA_ROWS;
        if (m->shortconv)
            f->sconv = fwd_shortconv_create(m, part, &f->bytes);
        else if (m->ssm_kind == MODEL_SSM_MAMBA2)
            f->mamba = fwd_mamba2_create(m, part, &f->bytes);
        else
            f->delta = fwd_delta_create(m, part, &f->bytes);
        f->st = calloc(chunk, sizeof *f->st);
        f->sn = calloc(chunk, sizeof *f->sn);
        if ((!f->delta && !f->sconv && !f->mamba) || !f->st || !f->sn) {
            fwd_free(f);
            err_set(err, KVI_E_NOMEM, "forward: cannot allocate the linear attention scratch");
            return NULL;
        }
    }
    if (out_gate) {
        f->qg = falloc(f, chunk * 2 * qd, &ok);
        f->gate = falloc(f, chunk * qd, &ok);
        if (!ok) {
            fwd_free(f);
            err_set(err, KVI_E_NOMEM, "forward: cannot allocate the attention gate scratch");
            return NULL;
        }
    }
    if (m->parallel_ffn) {
        f->xp = falloc(f, chunk * m->dim, &ok);
        if (!ok) {
            fwd_free(f);
            err_set(err, KVI_E_NOMEM, "forward: cannot allocate the parallel block's scratch");
            return NULL;
        }
    }
    if (m->ssm_both && !(f->xm = falloc(f, chunk * m->dim, &ok))) {
        fwd_free(f);
        err_set(err, KVI_E_NOMEM, "forward: cannot allocate the parallel mixer's scratch");
        return NULL;
    }
    if (m->ple_dim > 0 && !(f->ple = fwd_ple_create(m, n_rows_max, (int)chunk, &f->bytes))) {
        fwd_free(f);
        err_set(err, KVI_E_NOMEM, "forward: cannot allocate the per-layer input scratch");
        return NULL;
    }
    model_rope sets[MODEL_MAX_ROPE_SETS];
    model_rope_for_ctx(m, n_ctx, sets);
    for (size_t r = 0; r < ns; r++) {
        const int nr = sets[r].n_rot ? sets[r].n_rot : m->n_rot; /* a set's pairs: the first nr / 2 */
        for (size_t i = 0; i < half; i++)
            f->inv_freq[r * half + i] = (int)i < nr / 2 ? rope_freq(&sets[r], nr, (int)i) : 0.0;
        f->mscale[r] = sets[r].mscale;
    }
    return f;
}

size_t fwd_scratch_bytes(const fwd_ctx *f) { return f->bytes; }

const uint64_t *fwd_routed(const fwd_ctx *f) { return f->routed; }

/* Elementwise helpers work 4 lanes at a time with GCC/Clang vector types (SSE2 on
 * any x86-64, no target flags): each lane computes the scalar tail's expression,
 * with no fused multiply-add (the build targets no FMA), so the bits do not
 * depend on a row's length or place in the batch. */

/* x[i] += y[i], x and y not overlapping */
static void add_into(float *x, const float *y, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) st4(x + i, ld4(x + i) + ld4(y + i));
    for (; i < n; i++) x[i] += y[i];
}

static void add_bias(float *y, const float *b, int n, int d)
{
    if (!b) return;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < d; i++) y[(size_t)r * d + i] += b[i];
}

/* x[i] *= a, a != 1 (a == 1 leaves the bits as they are: callers skip it) */
static void scale_rows(float *x, float a, size_t n)
{
    size_t i = 0;
    const v4f av = { a, a, a, a };
    for (; i + 4 <= n; i += 4) st4(x + i, ld4(x + i) * av);
    for (; i < n; i++) x[i] *= a;
}

/* Rotates pairs of every head of rows x [n][n_h * hd], batch rows r0.., by RoPE
 * set `set` (its n_rot, else the model's; the tables' rows hold n_rot / 2 pairs) */
static void rope_rows(const fwd_ctx *f, int set, float *x, int r0, int n, int n_h, int hd)
{
    const struct kvi_model *m = f->m;
    const int ld = m->n_rot / 2, half = m->rope[set].n_rot ? m->rope[set].n_rot / 2 : ld;
    const size_t base = (size_t)set * f->n_rows_max * ld;
    for (int r = 0; r < n; r++) {
        const float *c = f->rc + base + (size_t)(r0 + r) * ld, *s = f->rs + base + (size_t)(r0 + r) * ld;
        for (int h = 0; h < n_h; h++)
            kern_rope_head(x + ((size_t)r * n_h + h) * hd, c, s, half, m->rope_neox);
    }
}

/* the model's norm (RMS or LayerNorm) of rows x [n][dim] into out by w, or a copy of x
 * when w is NULL */
static void norm_or_copy(const struct kvi_model *m, float *out, const float *x, const float *w, int n,
                         int dim)
{
    if (w)
        fwd_norm_rows(m->norm, out, x, w, n, dim, m->rms_eps);
    else if (out != x)
        memcpy(out, x, (size_t)n * dim * sizeof(float));
}

/* x += residual_scale * (post ? rmsnorm(y) * post : y), y [n][dim] (overwritten) */
static void residual_add(const struct kvi_model *m, float *x, float *y, const float *post, int n)
{
    const size_t nd = (size_t)n * m->dim;
    if (post) fwd_rmsnorm_rows(y, y, post, n, m->dim, m->rms_eps);
    if (m->residual_scale != 1.0f) scale_rows(y, m->residual_scale, nd);
    add_into(x, y, nd);
}

/* q/k norm of rows y [n][n_h * hd] (model.h qk_norm) */
static void qk_norm_rows(const struct kvi_model *m, float *y, const float *w, int n, int n_h, int hd)
{
    if (m->qk_norm == MODEL_QK_HEAD)
        fwd_rmsnorm_rows(y, y, w, n * n_h, hd, m->rms_eps);
    else if (m->qk_norm == MODEL_QK_FULL)
        fwd_rmsnorm_rows(y, y, w, n, n_h * hd, m->rms_eps);
}

/* q of rows [n][qd] at positions pos [n] times the model's query temperature
 * (model.h q_temp_*) */
static void q_temperature(const struct kvi_model *m, float *q, size_t qd, const int32_t *pos, int n)
{
    for (int r = 0; r < n; r++) {
        const double p = floor((double)((int64_t)pos[r] + m->q_temp_offset) / m->q_temp_len);
        const float t = (float)(log(p + 1.0) * m->q_temp_beta + 1.0);
        if (t != 1.0f) scale_rows(q + (size_t)r * qd, t, qd);
    }
}

/* y [n][ldy] += the LoRA terms of matrix w of layer L for rows [r0, r0 + n) with
 * input x [n][ldx] (fwd_lora.h), after the base product */
static int lora_add(fwd_ctx *f, tpool *pool, const fwd_rows *rows, int r0, const model_layer *L, lora_mat w,
                    const float *x, int64_t ldx, int n, float *y, int64_t ldy)
{
    if (!rows->lora) return KVI_OK;
    return fwd_lora_add(f->lora, pool, rows->lora + r0, (int)(L - f->m->layers), w, 0, x, ldx, n, y, ldy);
}

/* q, k, v of rows [r0, r0 + n) from xb: projections, biases, q/k norms, RoPE (not on a
 * NoPE layer), the unweighted q/k RMSNorm after RoPE, the query temperature. */
static int qkv(fwd_ctx *f, tpool *pool, const model_layer *L, const fwd_rows *rows, int r0, int n)
{
    const struct kvi_model *m = f->m;
    const int hd = model_lhd(m, L), kvh = model_lkvh(m, L), qd = m->n_heads * hd, kvd = kvh * hd;
    const bool own_k = !L->kv_share; /* a layer reading another's K/V computes none */
    { /* one quantisation of xb for the three products (bits as three kern_matmul);
         without wv (gemma4) V is the raw K projection */
        const kern_tensor *w3[3] = { &L->wq, &L->wk, &L->wv };
        float *const y3[3] = { m->attn_gated ? f->qg : f->q, f->k, f->v };
        const int64_t ld3[3] = { m->attn_gated ? 2 * qd : qd, kvd, kvd };
        const int nw = !own_k ? 1 : L->wv.data ? 3 : 2;
        int rc = kern_matmul_multi(pool, nw, w3, f->xb, m->dim, n, y3, ld3);
        for (int i = 0; i < nw && !rc; i++)
            rc = lora_add(f, pool, rows, r0, L, (lora_mat)(LORA_WQ + i), f->xb, m->dim, n, y3[i], ld3[i]);
        if (rc) return rc;
        if (own_k && !L->wv.data) memcpy(f->v, f->k, (size_t)n * kvd * sizeof(float));
    }
    if (m->attn_gated) /* per head [q | gate] -> q, gate */
        for (int r = 0; r < n; r++)
            for (int h = 0; h < m->n_heads; h++) {
                const float *src = f->qg + (size_t)r * 2 * qd + (size_t)h * 2 * m->head_dim;
                memcpy(f->q + (size_t)r * qd + (size_t)h * m->head_dim, src,
                       (size_t)m->head_dim * sizeof(float));
                memcpy(f->gate + (size_t)r * qd + (size_t)h * m->head_dim, src + m->head_dim,
                       (size_t)m->head_dim * sizeof(float));
            }
    add_bias(f->q, L->bq, n, qd);
    add_bias(f->k, L->bk, n, kvd);
    add_bias(f->v, L->bv, n, kvd);
    for (int step = 0; step < 2; step++) { /* q/k norm and RoPE, in the model's order */
        if (step == (m->qk_norm_after_rope ? 1 : 0)) {
            qk_norm_rows(m, f->q, L->q_norm, n, m->n_heads, hd);
            if (own_k) qk_norm_rows(m, f->k, L->k_norm, n, kvh, hd);
        } else if (!L->no_rope) {
            rope_rows(f, L->rope_set, f->q, r0, n, m->n_heads, hd);
            if (own_k) rope_rows(f, L->rope_set, f->k, r0, n, kvh, hd);
        }
    }
    if (own_k && L->v_rms) fwd_rms_rows(f->v, n * kvh, hd, m->rms_eps); /* gemma4: per head, no weight */
    if (L->qk_rms_post) { /* llama4: per head, no weight, after RoPE */
        fwd_rms_rows(f->q, n * m->n_heads, hd, m->rms_eps);
        if (own_k) fwd_rms_rows(f->k, n * kvh, hd, m->rms_eps);
    }
    if (L->q_temp && m->q_temp_beta != 0.0f) q_temperature(m, f->q, (size_t)qd, rows->pos + r0, n);
    if (L->wo_gate.data) /* the output gate's logits, from the same normed input */
        return kern_matmul(pool, &L->wo_gate, f->xb, m->dim, n, f->gate, qd);
    return KVI_OK;
}

/* Latent attention (fwd_mla.h): queries in cache space into q, cache rows into k. */
static int mla_qk(fwd_ctx *f, tpool *pool, const model_layer *L, int r0, int n)
{
    const size_t half = (size_t)(f->m->n_rot / 2);
    const size_t o = ((size_t)L->rope_set * f->n_rows_max + (size_t)r0) * half;
    return fwd_mla_qk(f->mla, pool, f->m, L, f->xb, n, f->rc + o, f->rs + o, f->q, f->k);
}

/* A K or V row of kvd elements as the cache stores it: itself, or padded with
 * zeros to the cache's row (layers narrower than the widest). */
static const float *kv_row(fwd_ctx *f, const float *row, int kvd)
{
    if (kvd == f->kv_ld) return row;
    memcpy(f->kpad, row, (size_t)kvd * sizeof(float));
    memset(f->kpad + kvd, 0, (size_t)(f->kv_ld - kvd) * sizeof(float));
    return f->kpad;
}

/* The attention mixer of layer l over rows [r0, r0 + n): x += attention output. */
static int attn_chunk(fwd_ctx *f, tpool *pool, kv_pool *kv, const fwd_rows *rows, int l, int r0, int n)
{
    const struct kvi_model *m = f->m;
    const model_layer *L = &m->layers[l];
    const int dim = m->dim, hd = model_lhd(m, L), kvd = model_lkvh(m, L) * hd;
    float *x = f->x + (size_t)r0 * dim; /* [n][dim] this chunk's residual rows */
    int rc = m->mla_kv_rank > 0 ? mla_qk(f, pool, L, r0, n) : qkv(f, pool, L, rows, r0, n);
    if (!rc && f->dsa) { /* sparse attention: the indexer's keys to the cache, its queries kept */
        const size_t o = ((size_t)L->rope_set * f->n_rows_max + (size_t)r0) * (size_t)(m->n_rot / 2);
        rc = fwd_dsa_index(f->dsa, pool, m, L, f->xb, fwd_mla_qa(f->mla), n, f->rc + o, f->rs + o, kv, l,
                           rows->tables + r0, rows->pos + r0);
    }
    if (rc) return rc;

    /* K and V appended to the cache (not by a layer reading another's), then every
     * row reads its own sequence back */
    for (int r = 0; r < n && !L->kv_share; r++) {
        kv_table *t = (kv_table *)rows->tables[r0 + r];
        kv_write_row_batch(kv, t, l, 0, rows->pos[r0 + r], kv_row(f, f->k + (size_t)r * kvd, kvd), f->cur);
        if (!kv->v_in_k)
            kv_write_row_batch(kv, t, l, 1, rows->pos[r0 + r], kv_row(f, f->v + (size_t)r * kvd, kvd),
                               f->cur);
    }
    const attn_args aa = {
        .kv = kv,
        .layer = L->kv_share ? L->kv_share - 1 : l,
        .n_rows = n,
        .tables = rows->tables + r0,
        .pos = rows->pos + r0,
        .q = f->q,
        .out = f->att,
        .n_heads = m->n_heads,
        .n_kv_heads = model_lkvh(m, L),
        .stash = f->cur,
        .head_dim = hd,
        .recv = rows->recv ? rows->recv + r0 : NULL,
        .window = L->window,
        .softcap = m->attn_softcap,
        .scale = m->kq_scale,
        .sinks = L->sinks,
        .chunk = L->attn_chunk,
    };
    if (f->dsa) {
        if ((rc = fwd_dsa_attend(f->dsa, pool, m, kv, l, rows->tables + r0, rows->pos + r0, n, f->q, f->att)))
            return rc;
    } else {
        attention_rows(pool, layer_attn(f, L), &aa);
    }
    if (m->attn_gated || L->wo_gate.data) { /* att *= sigmoid(gate) */
        const size_t nq = (size_t)n * m->n_heads * hd;
        for (size_t i = 0; i < nq; i++) f->att[i] *= 1.0f / (1.0f + expf(-f->gate[i]));
    }

    /* x += att Wo^T (xb reused as the projection output); latent attention: the
     * heads' values out of the latent space first */
    const float *wo_x = f->att;
    if (m->mla_kv_rank > 0) {
        if ((rc = fwd_mla_values(pool, m, L, f->att, n, f->mla_v))) return rc;
        wo_x = f->mla_v;
    }
    if ((rc = kern_matmul(pool, &L->wo, wo_x, L->wo.n_in, n, f->xb, dim))) return rc;
    if ((rc = lora_add(f, pool, rows, r0, L, LORA_WO, wo_x, L->wo.n_in, n, f->xb, dim))) return rc;
    add_bias(f->xb, L->bo, n, dim);
    residual_add(m, x, f->xb, L->post_attn_norm, n);
    return KVI_OK;
}

/* The gated DeltaNet mixer (fwd_delta.h), the short convolution (fwd_shortconv.h) or Mamba-2 (fwd_mamba2.h)
 * of recurrent layer l over rows [r0, r0 + n): x += its output; each row's sequence
 * state advances by the row. */
static int delta_chunk(fwd_ctx *f, tpool *pool, kv_pool *kv, const fwd_rows *rows, int l, int r0, int n)
{
    const struct kvi_model *m = f->m;
    const size_t off = (size_t)kv->state_slot[l] * kv->state_layer_bytes / sizeof(float);
    for (int r = 0; r < n; r++) {
        f->st[r] = kv_state(kv, rows->tables[r0 + r], l);
        f->sn[r] = rows->snap && rows->snap[r0 + r] ? rows->snap[r0 + r] + off : NULL;
    }
    /* the mixer's output replaces its input in xb [n][dim] */
    const int rc = f->sconv   ? fwd_shortconv_run(f->sconv, pool, m, &m->layers[l], f->xb, n, f->st,
                                                  rows->pos + r0, f->sn, f->xb)
                   : f->mamba ? fwd_mamba2_run(f->mamba, pool, m, &m->layers[l], f->xb, n, f->st,
                                               rows->pos + r0, f->sn, f->xb)
                              : fwd_delta_run(f->delta, pool, m, &m->layers[l], f->xb, n, f->st,
                                              rows->pos + r0, f->sn, f->xb);
    if (rc) return rc;
    residual_add(m, f->x + (size_t)r0 * m->dim, f->xb, m->layers[l].post_attn_norm, n);
    return KVI_OK;
}

/* After layer l's FFN (gemma4): the per-layer input branch, then the residual
 * stream times layer_output_scale. */
static int layer_tail(fwd_ctx *f, tpool *pool, int l, int r0, int n)
{
    const struct kvi_model *m = f->m;
    const model_layer *L = &m->layers[l];
    float *x = f->x + (size_t)r0 * m->dim; /* [n][dim] */
    if (L->ple_gate.data) {
        const int rc = fwd_ple_layer(f->ple, pool, m, l, f->gelu, x, r0, n, f->xb);
        if (rc) return rc;
    }
    if (L->out_scale && L->out_scale[0] != 1.0f) scale_rows(x, L->out_scale[0], (size_t)n * m->dim);
    return KVI_OK;
}

/* One layer over rows [r0, r0 + n) of the batch (a chunk; see the file comment). */
static int layer_chunk(fwd_ctx *f, tpool *pool, kv_pool *kv, const fwd_rows *rows, int l, int r0, int n)
{
    const struct kvi_model *m = f->m;
    const model_layer *L = &m->layers[l];
    const int dim = m->dim, ffn = model_lffn(m, L);
    float *x = f->x + (size_t)r0 * dim; /* [n][dim] this chunk's residual rows */

    /* mixer: attention, or a recurrent layer's DeltaNet / Mamba-2; none on an FFN-only layer */
    int rc = 0;
    if (!L->no_mixer) {
        norm_or_copy(m, f->xb, x, L->attn_norm, n, dim);
        if (f->xp) memcpy(f->xp, f->xb, (size_t)n * dim * sizeof(float));
        if (f->xm) memcpy(f->xm, f->xb, (size_t)n * dim * sizeof(float));
        rc =
            L->recurrent ? delta_chunk(f, pool, kv, rows, l, r0, n) : attn_chunk(f, pool, kv, rows, l, r0, n);
        if (rc) return rc;
        if (f->xm) { /* the Mamba-2 mixer beside attention, on the same normed input */
            memcpy(f->xb, f->xm, (size_t)n * dim * sizeof(float));
            if ((rc = delta_chunk(f, pool, kv, rows, l, r0, n))) return rc;
        }
    }
    if (L->no_ffn) return layer_tail(f, pool, l, r0, n);

    /* feed-forward block: gated (SwiGLU / GeGLU), ungated (xIELU), or the experts of a
     * moe layer; a parallel block's reads the attention's normed input */
    if (f->xp)
        memcpy(f->xb, f->xp, (size_t)n * dim * sizeof(float));
    else
        norm_or_copy(m, f->xb, x, L->ffn_norm, n, dim);
    if (L->moe) {
        const fwd_moe_lora ml = { f->lora, rows->lora ? rows->lora + r0 : NULL, l };
        if ((rc = fwd_moe_run(f->moe, pool, m, L, f->gelu, f->xb, n, f->moe_y,
                              f->routed + (size_t)l * m->n_expert, &ml)))
            return rc;
        residual_add(m, x, f->moe_y, L->post_ffn_norm, n);
        return layer_tail(f, pool, l, r0, n);
    }
    if (!L->w_gate.data) { /* h = act(xb Wup^T (+b)) into hg (xIELU or ReLU^2) */
        if ((rc = kern_matmul(pool, &L->w_up, f->xb, dim, n, f->hg, ffn))) return rc;
        if ((rc = lora_add(f, pool, rows, r0, L, LORA_UP, f->xb, dim, n, f->hg, ffn))) return rc;
        add_bias(f->hg, L->b_up, n, ffn);
        if (m->act == MODEL_ACT_RELU2)
            fwd_relu2(f->hg, (size_t)n * ffn);
        else
            fwd_xielu(&L->xielu, f->hg, (size_t)n * ffn);
    } else {
        const kern_tensor *w2[2] = { &L->w_gate, &L->w_up };
        float *const y2[2] = { f->hg, f->hu };
        const int64_t ld2[2] = { ffn, ffn };
        if ((rc = kern_matmul_multi(pool, 2, w2, f->xb, dim, n, y2, ld2))) return rc;
        if ((rc = lora_add(f, pool, rows, r0, L, LORA_GATE, f->xb, dim, n, f->hg, ffn))) return rc;
        if ((rc = lora_add(f, pool, rows, r0, L, LORA_UP, f->xb, dim, n, f->hu, ffn))) return rc;
        add_bias(f->hg, L->b_gate, n, ffn);
        add_bias(f->hu, L->b_up, n, ffn);
        fwd_glu(m->act, f->gelu, f->hg, f->hu, (size_t)n * ffn);
    }
    if ((rc = kern_matmul(pool, &L->w_down, f->hg, ffn, n, f->xb, dim))) return rc;
    if ((rc = lora_add(f, pool, rows, r0, L, LORA_DOWN, f->hg, ffn, n, f->xb, dim))) return rc;
    add_bias(f->xb, L->b_down, n, dim);
    residual_add(m, x, f->xb, L->post_ffn_norm, n);
    return layer_tail(f, pool, l, r0, n);
}

float *fwd_x(fwd_ctx *f) { return f->x; }

int fwd_run(fwd_ctx *f, tpool *pool, kv_pool *kv, const fwd_rows *rows)
{
    return fwd_run_layers(f, pool, kv, rows, 0, f->m->n_layers, true);
}

int fwd_run_layers(fwd_ctx *f, tpool *pool, kv_pool *kv, const fwd_rows *rows, int l0, int l1, bool head)
{
    const struct kvi_model *m = f->m;
    const int n = rows->n, dim = m->dim, half = m->n_rot / 2;
    if (rows->lora && !f->lora && !(f->lora = fwd_lora_create(m, f->n_rows_max, &f->bytes)))
        return KVI_E_NOMEM;

    for (int r = 0; r < n; r++) {
        float *xr = f->x + (size_t)r * dim;
        if (l0 == 0) { /* later stages received x from the stage before */
            const int rc = kern_tensor_get_row(&m->tok_embd, rows->tokens[r], xr);
            if (rc) return rc;
            if (m->emb_scale != 1.0f) scale_rows(xr, m->emb_scale, (size_t)dim);
        }
        for (int set = 0; set < f->n_sets; set++) {
            const size_t o = ((size_t)set * f->n_rows_max + r) * half;
            const int sh = m->rope[set].n_rot ? m->rope[set].n_rot / 2 : half; /* the set's pairs */
            kern_rope_cos_sin((double)rows->pos[r], f->inv_freq + (size_t)set * half, sh, f->rc + o,
                              f->rs + o);
            if (f->mscale[set] != 1.0f) {
                scale_rows(f->rc + o, f->mscale[set], (size_t)half);
                scale_rows(f->rs + o, f->mscale[set], (size_t)half);
            }
        }
    }

    if (f->ple) { /* per-layer inputs from the embeddings, before the first layer */
        if (l0 != 0) return KVI_E_UNSUPPORTED;
        const int rc = fwd_ple_inputs(f->ple, pool, m, rows->tokens, f->x, n);
        if (rc) return rc;
    }
    for (int l = l0; l < l1; l++) {
        /* a layer whose K/V others read keeps its stash for them (kv_share) */
        const int src = m->layers[l].kv_share ? m->layers[l].kv_share - 1 : l;
        f->cur = f->lstash ? &f->lstash[src] : &f->stash;
        if (!m->layers[l].kv_share)
            kv_stash_begin(f->cur, l); /* once per layer: chunks of one batch share it */
        for (int r0 = 0; r0 < n; r0 += f->chunk) {
            const int rc = layer_chunk(f, pool, kv, rows, l, r0, n - r0 < f->chunk ? n - r0 : f->chunk);
            if (rc) return rc;
        }
    }

    /* logits only for the rows that asked, a chunk at a time: gather, norm, project */
    for (int o0 = 0; head && o0 < rows->n_out; o0 += f->chunk) {
        const int no = rows->n_out - o0 < f->chunk ? rows->n_out - o0 : f->chunk;
        for (int o = 0; o < no; o++)
            memcpy(f->xb + (size_t)o * dim, f->x + (size_t)rows->out_rows[o0 + o] * dim,
                   (size_t)dim * sizeof(float));
        fwd_norm_rows(m->norm, f->xb, f->xb, m->output_norm, no, dim, m->rms_eps);
        float *lg = rows->logits + (size_t)o0 * m->n_vocab; /* [no][n_vocab] */
        const int rc = kern_matmul(pool, &m->output, f->xb, dim, no, lg, m->n_vocab);
        if (rc) return rc;
        const size_t nl = (size_t)no * m->n_vocab;
        if (m->logit_scale != 1.0f)
            for (size_t i = 0; i < nl; i++) lg[i] /= m->logit_scale;
        if (m->final_softcap > 0.0f) {
            const float c = m->final_softcap;
            for (size_t i = 0; i < nl; i++) lg[i] = c * tanhf(lg[i] / c);
        }
    }
    return KVI_OK;
}
