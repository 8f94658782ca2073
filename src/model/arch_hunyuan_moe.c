/*
 * arch_hunyuan_moe.c — "hunyuan-moe" (Hunyuan-A13B).
 *
 * What differs from llama:
 *  - NeoX RoPE first, then the per-head q/k RMSNorm (the opposite of qwen3's
 *    order); the RoPE base as stored (the converter folds the NTK alpha into it);
 *  - every layer a mixture of experts: softmax over all router logits, the top
 *    expert_used_count renormalised (llama.cpp hard-codes both), no bias, no scale;
 *    the expert width is feed_forward_length; plus an ungated shared expert of
 *    expert_shared_feed_forward_length.
 */
#include "model/arch.h"

#include "base/error.h"

static int hunyuan_moe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    (void)g;
    if (m->n_expert == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: hunyuan-moe without hunyuan-moe.expert_count");
    m->expert_ffn = m->ffn_dim;
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = true;
    m->qk_norm_after_rope = true;
    return 0;
}

const model_arch model_arch_hunyuan_moe = { "hunyuan-moe", 0, MODEL_QK_HEAD, true, hunyuan_moe_hparams };
