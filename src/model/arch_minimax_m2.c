/*
 * arch_minimax_m2.c — "minimax-m2" (MiniMax-M2, M2.1, M2.5).
 *
 * What differs from llama:
 *  - q/k RMSNorm over the whole projection (all heads at once, weights
 *    [n_heads * head_dim] / [n_kv_heads * head_dim]) before partial NeoX RoPE
 *    (rope.dimension_count of the head's dims);
 *  - every layer a mixture of experts: sigmoid gating (expert_gating_func, which
 *    the file must carry), the selection bias exp_probs_b, the chosen weights
 *    always renormalised, no scale (llama.cpp reads no expert_weights_scale here);
 *    the expert width is feed_forward_length (expert_feed_forward_length sizes
 *    nothing); no shared expert.
 */
#include "model/arch.h"

#include "base/error.h"

static int minimax_m2_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: minimax-m2 without minimax-m2.expert_count");
    m->expert_ffn = m->ffn_dim;
    m->expert_norm = true;
    return model_moe_keys(m, g, MOE_KEY_GATING, -1, err);
}

const model_arch model_arch_minimax_m2 = { "minimax-m2", 0, MODEL_QK_FULL, true, minimax_m2_hparams };
