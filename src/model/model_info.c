/*
 * model_info.c — what a model costs, without running it: hyper-parameters read
 * from a file's metadata alone, parameter counts and the weight bytes one decode
 * step streams.
 *
 * kvi_model_info_from_file() maps a GGUF file read-only and parses only its
 * header (gguf_open with use_mmap: key/values and tensor infos are validated, the
 * pages of the data section are never touched), so a 40 GB file costs a few
 * page reads. Other formats (llama2.c, Hugging Face folders) are loaded in full.
 *
 * Invariants: the hyper-parameters come from model_hparams_gguf() (model.c), the
 * loader's own reading of the metadata with its range checks, and the layer kinds
 * (sliding-window layers) from the architecture's own hparams function (arch.h:
 * model_swa_layers for gemma2/3) run on a layers array of the info's own, so the
 * planner and the loader never disagree about a shape or a window. Counts use
 * uint64_t so a 400B model does not overflow.
 */
#include "base/error.h"
#include "formats/gguf.h"
#include "model/arch.h"
#include "formats/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The layer kinds of a GGUF as the loader lays them out: the architecture's
 * hparams function (which reads the sliding-window keys) on a layers array of
 * m's own (the caller frees it). An architecture kvinfer does not run, or one
 * without such keys, has global layers only (m->layers stays NULL). */
static int info_kinds_gguf(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    const model_arch *a = model_arch_find(m->arch);
    if (!a || !a->hparams) return 0;
    model_block_defaults(m); /* the defaults an architecture's keys fall back to, as loaded */
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    if (!m->layers) return err_set(err, KVI_E_NOMEM, "model info: out of memory for %d layers", m->n_layers);
    return a->hparams(m, g, err);
}

/* Fills out from a parsed GGUF header. */
static int info_from_gguf(const gguf_ctx *g, const char *file, kvi_model_info *out, kvi_error *err)
{
    struct kvi_model m;
    memset(&m, 0, sizeof m);
    int rc = model_hparams_gguf(&m, g, true, err);
    if (rc == 0) rc = info_kinds_gguf(&m, g, err);
    if (rc == 0) model_info_shape(&m, out);
    free(m.layers);
    if (rc) {
        if (err) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            err_set(err, rc, "model info: %s: %s", file, msg);
        }
        return rc;
    }

    /* Weight bytes (validated by the reader) and the type of most layer-matrix elements. */
    uint64_t count[KVI_TYPE_COUNT] = { 0 };
    size_t bytes = 0;
    int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        bytes += t->nbytes; /* each lies inside the file: the sum is at most its size */
        if (t->n_dims >= 2 && strncmp(t->name, "blk.", 4) == 0 && (unsigned)t->type < KVI_TYPE_COUNT)
            count[t->type] += (uint64_t)t->ne[0] * (uint64_t)t->ne[1];
    }
    int best = KVI_TYPE_F32;
    for (int t = 0; t < KVI_TYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    out->weight_type = (kvi_type)best;
    out->weight_bytes = bytes;
    out->has_weights = nt > 0;
    return 0;
}

int kvi_model_info_from_file(const char *path, kvi_model_info *out, kvi_error *err)
{
    if (!path || !out) return err_set(err, KVI_E_INVALID, "model info: no path or output");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    char magic[4] = { 0 };
    bool is_gguf = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    if (!is_gguf) {
        /* llama2.c checkpoints and Hugging Face folders: the loader knows them. */
        kvi_load_params lp;
        kvi_load_params_default(&lp);
        lp.use_mmap = true;
        kvi_model *m = kvi_model_load(path, &lp, err);
        if (!m) return err && err->code ? err->code : KVI_E_FORMAT;
        kvi_model_get_info(m, out);
        kvi_model_free(m);
        return 0;
    }
    gguf_ctx *g = NULL;
    int rc = gguf_open(path, true, &g, err);
    if (rc) return rc;
    rc = info_from_gguf(g, path, out, err);
    gguf_close(g);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

static uint64_t mat_elems(const kern_tensor *t)
{
    return t->data ? (uint64_t)t->n_in * (uint64_t)t->n_out : 0;
}

static size_t mat_bytes(const kern_tensor *t)
{
    return t->data ? quant_row_bytes(t->type, t->n_in) * (size_t)t->n_out : 0;
}

/* The matrices of layer L one token passes through, as elements (bytes: false) or
 * bytes: the dense ones, the router, the shared expert, and of the routed experts
 * `experts` of n_expert (n_expert_used for one token, n_expert for the whole file). */
static uint64_t layer_mats(const kvi_model *m, const model_layer *L, bool bytes, int experts)
{
    const kern_tensor *dense[27] = { &L->ple_gate,  &L->ple_proj, &L->wq,      &L->wk,      &L->wv,
                                     &L->wo,        &L->w_gate,   &L->w_up,    &L->w_down,  &L->sh_gate,
                                     &L->sh_up,     &L->sh_down,  &L->wq_a,    &L->wq_b,    &L->wkv_a,
                                     &L->wk_b,      &L->wv_b,     &L->ssm_qkv, &L->ssm_z,   &L->ssm_beta,
                                     &L->ssm_alpha, &L->ssm_ba,   &L->ssm_out, &L->ssm_f_a, &L->ssm_f_b,
                                     &L->ssm_g_a,   &L->ssm_g_b };
    uint64_t n = 0;
    for (int i = 0; i < 27; i++) n += bytes ? mat_bytes(dense[i]) : mat_elems(dense[i]);
    n += bytes ? mat_bytes(&L->wo_gate) : mat_elems(&L->wo_gate);
    const kern_tensor *idx[3] = { &L->idx_wq_b, &L->idx_wk, &L->idx_proj }; /* deepseek32's indexer */
    for (int i = 0; i < 3; i++) n += bytes ? mat_bytes(idx[i]) : mat_elems(idx[i]);
    n += bytes ? mat_bytes(&L->ssm_in) : mat_elems(&L->ssm_in);
    if (!L->moe || m->n_expert <= 0) return n;
    const kern_tensor *ex[3] = { &L->exp_gate, &L->exp_up, &L->exp_down };
    uint64_t e = 0;
    for (int i = 0; i < 3; i++) e += bytes ? mat_bytes(ex[i]) : mat_elems(ex[i]);
    return n + (bytes ? mat_bytes(&L->router) : mat_elems(&L->router)) + e / (uint64_t)m->n_expert * experts;
}

uint64_t kvi_model_matmul_params(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    uint64_t n = mat_elems(&m->output) + mat_elems(&m->ple_model_proj);
    for (int l = 0; l < m->n_layers; l++) n += layer_mats(m, &m->layers[l], false, m->n_expert_used);
    return n;
}

/* Elements of one bound vector (NULL: 0). */
static uint64_t vec(const float *v, uint64_t n) { return v ? n : 0; }

/* Elements of the 1-D vectors: every norm, bias and sink vector bound (expert
 * biases are counted with the experts). */
static uint64_t vector_elems(const kvi_model *m)
{
    const uint64_t qd = (uint64_t)m->n_heads * (uint64_t)m->head_dim;
    const uint64_t kd = (uint64_t)m->n_kv_heads * (uint64_t)m->head_dim, d = (uint64_t)m->dim,
                   f = (uint64_t)m->ffn_dim;
    const bool full = m->qk_norm == MODEL_QK_FULL;
    const uint64_t half = (uint64_t)(m->n_rot / 2); /* RoPE frequency factors */
    uint64_t n = vec(m->output_norm, d) + vec(m->rope_freqs, half) + vec(m->rope_long, half) +
                 vec(m->rope_short, half) + vec(m->ple_proj_norm, (uint64_t)m->ple_dim);
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const uint64_t hd = (uint64_t)model_lhd(m, L);
        n += vec(L->ple_norm, d) + vec(L->out_scale, 1);
        n += vec(L->attn_norm, d) + vec(L->bq, qd) + vec(L->bk, kd) + vec(L->bv, kd) +
             vec(L->q_norm, full ? qd : hd) + vec(L->k_norm, full ? kd : hd) + vec(L->bo, d) +
             vec(L->sinks, (uint64_t)m->n_heads) + vec(L->post_attn_norm, d) +
             vec(L->no_mixer ? NULL : L->ffn_norm, d) + /* no_mixer: attn_norm */
             vec(L->b_gate, f) + vec(L->b_up, f) + vec(L->b_down, d) + vec(L->post_ffn_norm, d) +
             vec(L->q_a_norm, (uint64_t)m->mla_q_rank) + vec(L->kv_a_norm, (uint64_t)m->mla_kv_rank) +
             vec(L->sh_gate_inp, d) + vec(L->idx_k_norm, (uint64_t)m->idx_dim) +
             vec(L->idx_k_bias, (uint64_t)m->idx_dim);
        if (L->ssm_in.data) { /* Mamba-2: conv taps and bias, dt bias, A, D, the grouped norm */
            const uint64_t di = (uint64_t)m->ssm_inner, hv = (uint64_t)m->ssm_hv;
            const uint64_t c = di + 2 * (uint64_t)m->ssm_hk * (uint64_t)m->ssm_dk;
            n += vec(L->conv_w, c * (uint64_t)m->ssm_conv) + vec(L->conv_b, c) + vec(L->dt_bias, hv) +
                 vec(L->ssm_a, hv) + vec(L->ssm_d, hv) + vec(L->ssm_norm, di);
        } else if (L->recurrent) { /* conv taps, the gates' vectors, the output norm */
            const uint64_t hv = (uint64_t)m->ssm_hv, dk = (uint64_t)m->ssm_dk;
            const uint64_t ch = m->shortconv ? d : 2 * (uint64_t)m->ssm_hk * dk + hv * dk; /* conv channels */
            n += vec(L->conv_w, ch * (uint64_t)m->ssm_conv) + vec(L->dt_bias, m->ssm_kda ? hv * dk : hv) +
                 vec(L->ssm_a, hv) + vec(L->ssm_norm, dk);
        }
        if (L->moe) n += vec(L->router_b, (uint64_t)m->n_expert) + vec(L->sel_bias, (uint64_t)m->n_expert);
    }
    return n;
}

/* Elements of the per-expert biases of `experts` experts in every moe layer. */
static uint64_t expert_bias_elems(const kvi_model *m, int experts)
{
    uint64_t n = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        if (L->moe)
            n += (uint64_t)experts *
                 ((L->exp_b_gate ? (uint64_t)m->expert_ffn : 0) +
                  (L->exp_b_up ? (uint64_t)m->expert_ffn : 0) + (L->exp_b_down ? (uint64_t)m->dim : 0));
    }
    return n;
}

uint64_t kvi_model_n_params(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    uint64_t n = mat_elems(&m->output) + vector_elems(m) + expert_bias_elems(m, m->n_expert) +
                 mat_elems(&m->ple_tok) + mat_elems(&m->ple_model_proj);
    for (int l = 0; l < m->n_layers; l++) n += layer_mats(m, &m->layers[l], false, m->n_expert);
    if (m->tok_embd.data != m->output.data) n += mat_elems(&m->tok_embd);
    return n;
}

uint64_t kvi_model_active_params(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    /* per-layer inputs: one row of per_layer_token_embd */
    const uint64_t ple = m->ple_dim ? (uint64_t)m->ple_tok.n_in : 0;
    return ple + kvi_model_matmul_params(m) + vector_elems(m) + expert_bias_elems(m, m->n_expert_used) +
           (m->tok_embd.data != m->output.data ? (uint64_t)m->dim : 0);
}

size_t kvi_model_decode_bytes(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    size_t b = mat_bytes(&m->output) +
               (size_t)(vector_elems(m) + expert_bias_elems(m, m->n_expert_used)) * sizeof(float);
    for (int l = 0; l < m->n_layers; l++) b += layer_mats(m, &m->layers[l], true, m->n_expert_used);
    if (m->ple_dim) b += quant_row_bytes(m->ple_tok.type, m->ple_tok.n_in) + mat_bytes(&m->ple_model_proj);
    if (m->tok_embd.data && m->tok_embd.data != m->output.data)
        b += quant_row_bytes(m->tok_embd.type, m->tok_embd.n_in); /* one embedding row */
    return b;
}
