/*
 * arch_ernie45_moe.c — "ernie4_5-moe" (ERNIE-4.5-21B-A3B, -300B-A47B).
 *
 * What differs from llama:
 *  - RoPE on adjacent pairs over the whole head (as llama);
 *  - leading_dense_block_count dense layers, then a mixture of experts in every
 *    layer (interleave_moe_layer_step is 1 in every published model, and
 *    llama.cpp builds experts for every such layer whatever it says): softmax
 *    probabilities, the selection bias exp_probs_b (ERNIE's
 *    e_score_correction_bias) added to them for choosing only, the chosen
 *    (unbiased) probabilities renormalised, no scale (all hard-coded in llama.cpp);
 *  - the shared experts as one ungated SwiGLU of expert_shared_feed_forward_length
 *    (built only when that key is > 0).
 */
#include "model/arch.h"

#include "base/error.h"

static int ernie45_moe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: ernie4_5-moe without ernie4_5-moe.expert_count");
    int rc = model_gguf_int(g, m->arch, "expert_shared_feed_forward_length", false, 0, 0, MODEL_MAX_FFN,
                            &m->shared_ffn, err);
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = true;
    return rc;
}

const model_arch model_arch_ernie45_moe = { "ernie4_5-moe", 0, MODEL_QK_NONE, false, ernie45_moe_hparams };
