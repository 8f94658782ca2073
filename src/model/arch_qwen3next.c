/*
 * arch_qwen3next.c — "qwen3next" (Qwen3-Next): the qwen35 hybrid (arch_qwen35.c) with
 * a mixture of experts in every layer.
 *
 * What differs from qwen35:
 *  - value head j of a DeltaNet layer reads key head j / (Hv / Hk) (Hugging Face's
 *    grouped order), and beta / alpha come from one projection ssm_ba laid out per
 *    key head: the r = Hv / Hk betas of its value heads, then their r alphas;
 *  - plain NeoX RoPE (no sections);
 *  - every FFN: softmax over all router logits, the top expert_used_count divided by
 *    their sum, plus a shared expert (expert_shared_feed_forward_length wide) scaled
 *    by sigmoid(ffn_gate_inp_shexp . x).
 */
#include "model/arch.h"

#include "base/error.h"

static int qwen3next_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: qwen3next without qwen3next.expert_count");
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = true;
    m->ssm_tiled = false;
    m->attn_gated = true;
    return model_hybrid_layers(m, g, err);
}

const model_arch model_arch_qwen3next = { "qwen3next", ARCH_FFN_NORM_POST_ATTN, MODEL_QK_HEAD, true,
                                          qwen3next_hparams };
