/*
 * arch_olmoe.c — "olmoe" (OLMoE-1B-7B).
 *
 * What differs from llama: q/k RMSNorm over the whole projection (all heads at
 * once, as olmo2) before NeoX RoPE, and every layer's FFN a mixture of experts:
 * softmax over all router logits, the top expert_used_count with their
 * probabilities as they are — not renormalised (OLMoE's norm_topk_prob = false;
 * llama.cpp hard-codes it and reads no expert_weights_* key for olmoe). The expert
 * width is feed_forward_length.
 */
#include "model/arch.h"

#include "base/error.h"

static int olmoe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    (void)g;
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: olmoe without olmoe.expert_count");
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = false;
    return 0;
}

const model_arch model_arch_olmoe = { "olmoe", 0, MODEL_QK_FULL, true, olmoe_hparams };
