/*
 * arch_gptoss.c — "gpt-oss" (OpenAI gpt-oss-20b / -120b).
 *
 * What differs from llama:
 *  - attention with biases on Q, K, V and the output, and a learned sink logit per
 *    head (attn_sinks) that joins every softmax and takes no value;
 *  - sliding-window layers alternating with global ones (default period 2: even
 *    layers local), the same RoPE (NeoX, YaRN from the common scaling keys) on both;
 *  - the pre-FFN norm stored as post_attention_norm (no ffn_norm);
 *  - every FFN a mixture of experts: the top expert_used_count router logits
 *    (router bias included), weights = softmax over the chosen logits only, experts
 *    with biases, and the clamped SwiGLU x = min(gate, 7), y = clamp(up, -7, 7),
 *    x * sigmoid(1.702 x) * (y + 1).
 * Its published files hold the experts in MXFP4, a weight type like any other.
 */
#include "model/arch.h"

#include "base/error.h"

static int gptoss_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: gpt-oss without gpt-oss.expert_count");
    m->gating = MODEL_GATE_SOFTMAX_CHOSEN;
    m->expert_norm = false;
    m->act = MODEL_ACT_SWIGLU_OAI;
    return model_swa_layers(m, g, 2, 0, err);
}

const model_arch model_arch_gptoss = { "gpt-oss", ARCH_FFN_NORM_POST_ATTN, MODEL_QK_NONE, true,
                                       gptoss_hparams };
