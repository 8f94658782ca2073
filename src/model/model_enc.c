/*
 * model_enc.c — binding what embedding models add to the block (model_enc.h):
 * the pooling key, the dense projections and classification head any architecture
 * may carry, and the BERT-family encoders' own tensors.
 *
 * Invariant: every size comes from the hyper-parameters checked by
 * model_check_hparams or from a tensor's shape checked here before use; a tensor
 * named but of another shape is refused with its name.
 */
#include "model/arch.h"
#include "model/model_enc.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

model_enc *model_enc_get(struct kvi_model *m)
{
    if (!m->enc) m->enc = model_own(m, calloc(1, sizeof *m->enc));
    return m->enc;
}

/* dense_2, dense_3 (sentence-transformers' Dense modules as the converter writes
 * them): each [out][in], the first reading dim, each the previous one's output. */
static int bind_dense(gbind *b, struct kvi_model *m, model_enc *e, kvi_error *err)
{
    int64_t in = m->dim;
    e->n_embd_out = m->dim;
    for (int i = 0; i < MODEL_MAX_DENSE; i++) {
        char name[32];
        snprintf(name, sizeof name, "dense_%d.weight", i + 2);
        const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
        if (!t) break;
        if (t->ne[1] < 1 || t->ne[1] > MODEL_MAX_DIM)
            return err_set(err, KVI_E_FORMAT, "gguf: %s has %lld outputs", name, (long long)t->ne[1]);
        int rc = model_gbind_matrix(b, name, in, t->ne[1], true, &e->dense[i], err);
        if (rc) return rc;
        in = t->ne[1];
        e->n_dense = i + 1;
        e->n_embd_out = (int)in;
    }
    return 0;
}

/* cls.weight / cls.bias (dense + tanh) and cls.output.weight / .bias. */
static int bind_cls(gbind *b, struct kvi_model *m, model_enc *e, kvi_error *err)
{
    const gguf_tensor *t = gguf_find_tensor(m->gguf, "cls.output.weight");
    if (t && (t->ne[1] < 1 || t->ne[1] > MODEL_MAX_VOCAB))
        return err_set(err, KVI_E_FORMAT, "gguf: cls.output.weight has %lld outputs", (long long)t->ne[1]);
    const int64_t dim = m->dim, n_out = t ? t->ne[1] : 1;
    int rc;
    if ((rc = model_gbind_matrix(b, "cls.weight", dim, dim, false, &e->cls, err)) ||
        (rc = model_gbind_vector(b, "cls.bias", dim, false, &e->cls_b, err)) ||
        (rc = model_gbind_matrix(b, "cls.output.weight", dim, n_out, false, &e->cls_out, err)) ||
        (rc = model_gbind_vector(b, "cls.output.bias", n_out, false, &e->cls_out_b, err)))
        return rc;
    if (e->cls.data && !e->cls_out.data)
        return err_set(err, KVI_E_FORMAT, "gguf: cls.weight without cls.output");
    e->n_cls_out = e->cls_out.data ? (int)n_out : 0;
    e->cls_softmax = strcmp(m->arch, "qwen3") == 0; /* as llama.cpp's graph, for this arch only */
    return 0;
}

int model_enc_bind_heads(gbind *b, struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    model_enc *e = model_enc_get(m);
    if (!e) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    if (!e->encoder) e->rope = true; /* a decoder used for embeddings */
    int rc;
    if ((rc = bind_dense(b, m, e, err)) || (rc = bind_cls(b, m, e, err))) return rc;
    /* no key: rank for a file with a head (llama-server --reranking), else none */
    return model_gguf_int(g, m->arch, "pooling_type", false, e->n_cls_out > 0 ? 4 : 0, 0, 4, &e->pooling,
                          err);
}

/* Layer l's attention: fused attn_qkv (+ bias) or attn_q/k/v (+ biases); output. */
static int bind_enc_attention(gbind *b, struct kvi_model *m, int l, kvi_error *err)
{
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, qd = (int64_t)m->n_heads * m->head_dim,
                  kvd = (int64_t)m->n_kv_heads * m->head_dim;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if (gguf_find_tensor(m->gguf, NM("attn_qkv.weight"))) {
        kern_tensor qkv = { 0 };
        const float *bqkv = NULL;
        if ((rc = model_gbind_matrix(b, NM("attn_qkv.weight"), dim, qd + 2 * kvd, true, &qkv, err)) ||
            (rc = model_gbind_vector(b, NM("attn_qkv.bias"), qd + 2 * kvd, false, &bqkv, err)))
            return rc;
        L->wq = kern_tensor_rows(&qkv, 0, qd);
        L->wk = kern_tensor_rows(&qkv, qd, kvd);
        L->wv = kern_tensor_rows(&qkv, qd + kvd, kvd);
        if (bqkv) L->bq = bqkv, L->bk = bqkv + qd, L->bv = bqkv + qd + kvd;
    } else if ((rc = model_gbind_matrix(b, NM("attn_q.weight"), dim, qd, true, &L->wq, err)) ||
               (rc = model_gbind_matrix(b, NM("attn_k.weight"), dim, kvd, true, &L->wk, err)) ||
               (rc = model_gbind_matrix(b, NM("attn_v.weight"), dim, kvd, true, &L->wv, err)) ||
               (rc = model_gbind_vector(b, NM("attn_q.bias"), qd, false, &L->bq, err)) ||
               (rc = model_gbind_vector(b, NM("attn_k.bias"), kvd, false, &L->bk, err)) ||
               (rc = model_gbind_vector(b, NM("attn_v.bias"), kvd, false, &L->bv, err))) {
        return rc;
    }
    return (rc = model_gbind_matrix(b, NM("attn_output.weight"), qd, dim, true, &L->wo, err))
               ? rc
               : model_gbind_vector(b, NM("attn_output.bias"), dim, false, &L->bo, err);
#undef NM
}

/* Layer l's FFN: experts (moe_every), fused GeGLU (ffn_up of 2 ffn rows: [gate | up]),
 * gated (ffn_gate present) or plain, with optional biases. */
static int bind_enc_ffn(gbind *b, struct kvi_model *m, unsigned flags, int l, kvi_error *err)
{
    model_layer *L = &m->layers[l];
    const model_enc *e = m->enc;
    const int64_t dim = m->dim, ffn = m->ffn_dim;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    L->moe = m->n_expert > 0 && e->moe_every > 0 && l % e->moe_every == 1;
    if (L->moe) {
        const int64_t E = m->n_expert, F = m->expert_ffn;
        return (rc = model_gbind_matrix(b, NM("ffn_gate_inp.weight"), dim, E, true, &L->router, err)) ||
                       (rc = model_gbind_experts(b, NM("ffn_up_exps.weight"), dim, F, E, &L->exp_up, err))
                   ? rc
                   : model_gbind_experts(b, NM("ffn_down_exps.weight"), F, dim, E, &L->exp_down, err);
    }
    if (flags & ARCH_FUSED_GATE_UP) {
        kern_tensor gu = { 0 };
        if ((rc = model_gbind_matrix(b, NM("ffn_up.weight"), dim, 2 * ffn, true, &gu, err))) return rc;
        L->w_gate = kern_tensor_rows(&gu, 0, ffn);
        L->w_up = kern_tensor_rows(&gu, ffn, ffn);
    } else if ((rc = model_gbind_matrix(b, NM("ffn_gate.weight"), dim, ffn, false, &L->w_gate, err)) ||
               (rc = model_gbind_matrix(b, NM("ffn_up.weight"), dim, ffn, true, &L->w_up, err)) ||
               (rc = model_gbind_vector(b, NM("ffn_up.bias"), ffn, false, &L->b_up, err))) {
        return rc;
    }
    return (rc = model_gbind_matrix(b, NM("ffn_down.weight"), ffn, dim, true, &L->w_down, err))
               ? rc
               : model_gbind_vector(b, NM("ffn_down.bias"), dim, false, &L->b_down, err);
#undef NM
}

/* Layer l's norms: BERT's post-LN pair, or pre-norms (each optional: ModernBERT's
 * first layer has no attn_norm), each with an optional bias. */
static int bind_enc_norms(gbind *b, struct kvi_model *m, int l, kvi_error *err)
{
    model_layer *L = &m->layers[l];
    model_enc_layer *EL = &m->enc->layers[l];
    const int64_t dim = m->dim;
    const bool post = m->enc->post_ln;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if (post)
        return (rc = model_gbind_vector(b, NM("attn_output_norm.weight"), dim, true, &EL->attn_out_norm,
                                        err)) ||
                       (rc = model_gbind_vector(b, NM("attn_output_norm.bias"), dim, false,
                                                &EL->attn_out_norm_b, err)) ||
                       (rc = model_gbind_vector(b, NM("layer_output_norm.weight"), dim, true, &EL->out_norm,
                                                err))
                   ? rc
                   : model_gbind_vector(b, NM("layer_output_norm.bias"), dim, false, &EL->out_norm_b, err);
    return (rc = model_gbind_vector(b, NM("attn_norm.weight"), dim, false, &L->attn_norm, err)) ||
                   (rc = model_gbind_vector(b, NM("attn_norm.bias"), dim, false, &EL->attn_norm_b, err)) ||
                   (rc = model_gbind_vector(b, NM("ffn_norm.weight"), dim, true, &L->ffn_norm, err))
               ? rc
               : model_gbind_vector(b, NM("ffn_norm.bias"), dim, false, &EL->ffn_norm_b, err);
#undef NM
}

/* token_embd, token_types (row 0 kept), position_embd, token_embd_norm. */
static int bind_enc_embeddings(gbind *b, struct kvi_model *m, model_enc *e, kvi_error *err)
{
    const int64_t dim = m->dim;
    int rc;
    if ((rc = model_gbind_matrix(b, "token_embd.weight", dim, m->n_vocab, true, &m->tok_embd, err)))
        return rc;
    const gguf_tensor *tt = gguf_find_tensor(m->gguf, "token_types.weight");
    if (tt) {
        kern_tensor types = { 0 };
        if (tt->ne[1] < 1 || tt->ne[1] > 1024)
            return err_set(err, KVI_E_FORMAT, "gguf: token_types.weight has %lld rows", (long long)tt->ne[1]);
        if ((rc = model_gbind_matrix(b, "token_types.weight", dim, tt->ne[1], true, &types, err))) return rc;
        float *row = model_own(m, malloc((size_t)dim * sizeof *row)); /* [dim] */
        if (!row) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
        if ((rc = kern_tensor_get_row(&types, 0, row)))
            return err_set(err, KVI_E_FORMAT, "gguf: token_types.weight: type %d not readable",
                           (int)types.type);
        e->tok_type0 = row;
    }
    const gguf_tensor *pt = gguf_find_tensor(m->gguf, "position_embd.weight");
    if (pt) {
        if (pt->ne[1] < 1 || pt->ne[1] > MODEL_MAX_CTX)
            return err_set(err, KVI_E_FORMAT, "gguf: position_embd.weight has %lld rows",
                           (long long)pt->ne[1]);
        if ((rc = model_gbind_matrix(b, "position_embd.weight", dim, pt->ne[1], true, &e->pos_embd, err)))
            return rc;
    }
    return (rc = model_gbind_vector(b, "token_embd_norm.weight", dim, false, &e->embd_norm, err)) ||
                   (rc = model_gbind_vector(b, "token_embd_norm.bias", dim, false, &e->embd_norm_b, err)) ||
                   (rc = model_gbind_vector(b, "output_norm.weight", dim, false, &m->output_norm, err))
               ? rc
               : model_gbind_vector(b, "output_norm.bias", dim, false, &e->out_norm_b, err);
}

int model_enc_bind_encoder(gbind *b, struct kvi_model *m, unsigned arch_flags, kvi_error *err)
{
    model_enc *e = model_enc_get(m);
    if (!e || !(e->layers = model_own(m, calloc((size_t)m->n_layers, sizeof *e->layers))))
        return err_set(err, KVI_E_NOMEM, "gguf: out of memory for %d layers", m->n_layers);
    int rc = bind_enc_embeddings(b, m, e, err);
    for (int l = 0; !rc && l < m->n_layers; l++)
        if (!(rc = bind_enc_attention(b, m, l, err)) && !(rc = bind_enc_norms(b, m, l, err)))
            rc = bind_enc_ffn(b, m, arch_flags, l, err);
    return rc;
}

int model_enc_validate(const struct kvi_model *m, kvi_error *err)
{
    int rc = model_validate_vocab(m, err);
    if (rc) return rc;
    if (!m->enc || !m->enc->layers || !m->layers)
        return err_set(err, KVI_E_FORMAT, "model: no encoder layers");
    if (m->enc->rope && m->n_rot != m->head_dim)
        return err_set(err, KVI_E_UNSUPPORTED, "model: partial RoPE (%d of %d dims) in an encoder", m->n_rot,
                       m->head_dim);
    return 0;
}
