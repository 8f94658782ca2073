/*
 * arch_gemma.c — "gemma2" and "gemma3" (Gemma 2, Gemma 3 text models).
 *
 * What differs from llama, both: GeGLU (tanh GELU) instead of SwiGLU; embedding
 * rows times sqrt(dim); the attention and FFN outputs are RMS-normalised before
 * their residual adds (post_attention_norm, post_ffw_norm) besides the pre-norms;
 * the norm weights are stored already shifted by 1 (used as stored); RoPE pairs
 * NeoX-style; the KQ scale is 1/sqrt(head_dim) (1/sqrt(dim / heads) for the 27B
 * sizes, as llama.cpp: 46 layers for gemma2, 62 for gemma3); sliding-window layers
 * (attention.sliding_window) alternate with global ones.
 *
 * gemma2: attention scores soft-capped (attn_logit_softcapping, default 50) and
 * the logits too (final_logit_softcapping, default 30); window pattern period 2
 * (even layers local).
 *
 * gemma3: per-head q/k RMSNorm instead of the attention soft-cap; pattern period 6
 * (5 local : 1 global) unless the file says otherwise; local layers use their own
 * RoPE base (rope.freq_base_swa, else 10000) without scaling, global layers the
 * file's base and scaling (linear 8 in the 4B..27B files). A multimodal file's
 * vision tensors are left unread.
 */
#include "model/arch.h"

#include <math.h>

static int gemma_common(struct kvi_model *m, int n_layers_27b)
{
    m->act = MODEL_ACT_GELU_TANH;
    m->emb_scale = sqrtf((float)m->dim);
    const int qd = m->n_layers == n_layers_27b ? m->dim / m->n_heads : m->head_dim;
    m->kq_scale = 1.0f / sqrtf((float)qd);
    return 0;
}

static int gemma2_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc;
    gemma_common(m, 46);
    if ((rc = model_gguf_float(g, m->arch, "attn_logit_softcapping", false, 50.0, &m->attn_softcap, err)) ||
        (rc = model_gguf_float(g, m->arch, "final_logit_softcapping", false, 30.0, &m->final_softcap, err)))
        return rc;
    return model_swa_layers(m, g, 2, 0, err);
}

static int gemma3_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    gemma_common(m, 62);
    m->n_rope_sets = 2;
    m->rope[1] = (model_rope){ .theta = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f };
    int rc = model_gguf_float(g, m->arch, "rope.freq_base_swa", false, 10000.0, &m->rope[1].theta, err);
    if (rc) return rc;
    return model_swa_layers(m, g, 6, 1, err);
}

const model_arch model_arch_gemma2 = { "gemma2", ARCH_POST_NORMS, MODEL_QK_NONE, true, gemma2_hparams };
const model_arch model_arch_gemma3 = { "gemma3", ARCH_POST_NORMS | ARCH_VISION_PART, MODEL_QK_HEAD, true,
                                       gemma3_hparams };
