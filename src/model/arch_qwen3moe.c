/*
 * arch_qwen3moe.c — "qwen3moe" (Qwen3-MoE, e.g. Qwen3-30B-A3B).
 *
 * What differs from llama: Qwen3's attention (per-head q/k RMSNorm before NeoX RoPE,
 * attention.key_length heads) and every layer's FFN a mixture of experts: softmax over
 * all router logits, the top expert_used_count, their weights divided by their sum
 * (llama.cpp always renormalises for qwen3moe), expert width
 * expert_feed_forward_length (feed_forward_length is present and unused).
 */
#include "model/arch.h"

#include "base/error.h"

static int qwen3moe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    (void)g;
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: qwen3moe without qwen3moe.expert_count");
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = true;
    return 0;
}

const model_arch model_arch_qwen3moe = { "qwen3moe", 0, MODEL_QK_HEAD, true, qwen3moe_hparams };
