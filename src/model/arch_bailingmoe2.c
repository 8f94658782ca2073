/*
 * arch_bailingmoe2.c — "bailingmoe2" (Ling / Ring 2.0 mini and flash).
 *
 * What differs from llama:
 *  - one fused attn_qkv [q (dim) | k | v], then per-head q/k RMSNorm before
 *    partial NeoX RoPE (rope.dimension_count of the head's dims);
 *  - leading_dense_block_count dense layers, then mixtures of experts: sigmoid
 *    gating (expert_gating_func required), the selection bias exp_probs_b, expert
 *    groups (expert_group_count, expert_group_used_count: a group scores the sum
 *    of its two best), the chosen weights normalised when expert_weights_norm,
 *    times expert_weights_scale; an ungated shared expert of width
 *    expert_shared_feed_forward_length (the expert width when absent) x
 *    expert_shared_count;
 *  - trailing next-token-prediction blocks (nextn_predict_layers) are not run.
 */
#include "model/arch.h"

#include "base/error.h"

static int bailingmoe2_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: bailingmoe2 without bailingmoe2.expert_count");
    if ((int64_t)m->n_heads * m->head_dim != m->dim)
        return err_set(err, KVI_E_FORMAT, "gguf: bailingmoe2: %d heads x %d is not embedding_length %d",
                       m->n_heads, m->head_dim, m->dim);
    int rc, count = 0, width = 0;
    if ((rc = model_gguf_int(g, m->arch, "expert_shared_count", false, 0, 0, 64, &count, err)) ||
        (rc = model_gguf_int(g, m->arch, "expert_shared_feed_forward_length", false, m->expert_ffn, 1,
                             MODEL_MAX_FFN, &width, err)))
        return rc;
    m->shared_ffn = count * width;
    return model_moe_keys(m, g, MOE_KEY_GATING | MOE_KEY_NORM | MOE_KEY_SCALE | MOE_KEY_GROUPS, -1, err);
}

const model_arch model_arch_bailingmoe2 = { "bailingmoe2", ARCH_FUSED_QKV, MODEL_QK_HEAD, true,
                                            bailingmoe2_hparams };
