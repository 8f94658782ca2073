/*
 * arch_glm4moe.c — "glm4moe" (GLM-4.5, 4.6, 4.7 and -Air; Solar Open).
 *
 * What differs from llama:
 *  - Q, K, V with biases; per-head q/k RMSNorm before RoPE when the file has the
 *    norm tensors (GLM's use_qk_norm; without them none);
 *  - partial NeoX RoPE (rope.dimension_count of the head's dims: GLM's
 *    partial_rotary_factor 0.5);
 *  - the pre-FFN norm stored as post_attention_norm;
 *  - leading_dense_block_count dense layers, then mixtures of experts: sigmoid
 *    gating (expert_gating_func, sigmoid when absent), the selection bias
 *    exp_probs_b, optional expert groups, the chosen weights normalised when
 *    expert_weights_norm, times expert_weights_scale; an ungated shared expert of
 *    expert_shared_count x the expert width;
 *  - the trailing next-token-prediction block(s) (nextn_predict_layers) are not
 *    run: their tensors are left unread (model_gguf.c).
 */
#include "model/arch.h"

#include "base/error.h"

static int glm4moe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: glm4moe without glm4moe.expert_count");
    if (!gguf_find_tensor(g, "blk.0.attn_q_norm.weight")) m->qk_norm = MODEL_QK_NONE;
    return model_moe_keys(m, g, MOE_KEY_GATING | MOE_KEY_NORM | MOE_KEY_SCALE | MOE_KEY_GROUPS, 2, err);
}

const model_arch model_arch_glm4moe = { "glm4moe", ARCH_FFN_NORM_POST_ATTN, MODEL_QK_HEAD, true,
                                        glm4moe_hparams };
