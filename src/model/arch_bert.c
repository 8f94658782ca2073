/*
 * arch_bert.c — the BERT-family encoders (model_enc.h): "bert", "nomic-bert",
 * "nomic-bert-moe", "modern-bert". All attend bidirectionally, use LayerNorm
 * (attention.layer_norm_epsilon) and keep no KV cache; their tensors are bound by
 * model_enc_bind_encoder.
 *
 * bert (BGE, MiniLM, bge-reranker): absolute position and token-type embeddings,
 * an embedding LayerNorm, post-LN blocks with biases, a plain GELU FFN; no RoPE.
 * nomic-bert (nomic-embed v1.5): token types, no position table but RoPE NeoX over
 * the whole head; fused qkv; post-LN; SwiGLU; no biases but the LayerNorms'.
 * nomic-bert-moe (nomic-embed v2): as nomic-bert with qkv and output biases, a plain
 * GELU FFN with biases, and on every layer l with l % moe_every_n_layers == 1 experts
 * (softmax router, top expert_used_count, the probabilities as weights).
 * modern-bert (ModernBERT): pre-norm LayerNorms without bias (layer 0 has no
 * attn_norm), fused qkv, RoPE NeoX, fused GeGLU, an output norm; sliding-window
 * layers with their own RoPE base (rope.freq_base_swa), window symmetric, layer l
 * global when l % sliding_window_pattern == 0.
 */
#include "model/arch.h"
#include "model/model_enc.h"

#include "base/error.h"

static int enc_common(struct kvi_model *m, const gguf_ctx *g, bool post_ln, bool rope, kvi_error *err)
{
    model_enc *e = model_enc_get(m);
    if (!e) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    e->encoder = true;
    e->layer_norm = true;
    e->post_ln = post_ln;
    e->rope = rope;
    e->sym_window = true;
    return model_gguf_float(g, m->arch, "attention.layer_norm_epsilon", true, 0, &m->rms_eps, err);
}

static int bert_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    m->act = MODEL_ACT_GELU_TANH;
    return enc_common(m, g, true, false, err);
}

static int nomic_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    m->act = MODEL_ACT_SILU;
    return enc_common(m, g, true, true, err);
}

static int nomic_moe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    m->act = MODEL_ACT_GELU_TANH;
    m->expert_norm = false; /* the router's probabilities as they are */
    int rc = enc_common(m, g, true, true, err);
    if (rc) return rc;
    if ((rc = model_gguf_int(g, m->arch, "moe_every_n_layers", false, 0, 0, m->n_layers, &m->enc->moe_every,
                             err)))
        return rc;
    if (m->n_expert > 0 && m->enc->moe_every == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: %s has experts but no moe_every_n_layers", m->arch);
    return 0;
}

static int modern_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    m->act = MODEL_ACT_GELU_TANH;
    int rc = enc_common(m, g, false, true, err), window = 0, period = 0;
    if (rc) return rc;
    m->n_rope_sets = 2;
    m->rope[1] = (model_rope){ .theta = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f };
    if ((rc = model_gguf_float(g, m->arch, "rope.freq_base_swa", false, 10000.0, &m->rope[1].theta, err)) ||
        (rc = model_gguf_int(g, m->arch, "attention.sliding_window", false, 0, 0, MODEL_MAX_CTX, &window,
                             err)) ||
        (rc = model_gguf_int(g, m->arch, "attention.sliding_window_pattern", false, 1, 1, MODEL_MAX_LAYERS,
                             &period, err)))
        return rc;
    for (int l = 0; window > 0 && l < m->n_layers; l++) /* "dense first": layer 0 is global */
        if (l % period != 0) m->layers[l].window = window, m->layers[l].rope_set = 1;
    return 0;
}

const model_arch model_arch_bert = { "bert", ARCH_ENCODER_TENSORS, MODEL_QK_NONE, true, bert_hparams };
const model_arch model_arch_nomic_bert = { "nomic-bert", ARCH_ENCODER_TENSORS, MODEL_QK_NONE, true,
                                           nomic_hparams };
const model_arch model_arch_nomic_bert_moe = { "nomic-bert-moe", ARCH_ENCODER_TENSORS, MODEL_QK_NONE, true,
                                               nomic_moe_hparams };
const model_arch model_arch_modern_bert = { "modern-bert", ARCH_ENCODER_TENSORS | ARCH_FUSED_GATE_UP,
                                            MODEL_QK_NONE, true, modern_hparams };
