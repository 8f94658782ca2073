/*
 * arch_cohere2.c — "cohere2" (Cohere Command R7B, Command A).
 *
 * What differs from llama:
 *  - LayerNorm without bias (mean subtracted; attention.layer_norm_epsilon) for the
 *    block's norm and the output norm;
 *  - a parallel block with one norm per layer (no ffn_norm):
 *    h = layernorm(x) attn_norm, x += attn(h) + ffn(h);
 *  - sliding-window layers (window attention.sliding_window, period 4 unless an
 *    integer sliding_window_pattern says otherwise; an array is ignored, as
 *    llama.cpp does); RoPE on adjacent pairs on the sliding layers only, the global
 *    layers have none;
 *  - the logits multiplied by logit_scale (stored here as its inverse, the
 *    divisor of model.h);
 *  - the output matrix is the token embedding (the converted files have no
 *    output.weight).
 */
#include "model/arch.h"

static int cohere2_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    float ls = 1.0f;
    int rc = model_gguf_float(g, m->arch, "logit_scale", false, 1.0, &ls, err);
    if (rc) return rc;
    m->logit_scale = 1.0f / ls;
    m->norm = MODEL_NORM_LAYER;
    m->parallel_ffn = true;
    return model_swa_period(m, g, 4, true, err);
}

const model_arch model_arch_cohere2 = { "cohere2", ARCH_PARALLEL, MODEL_QK_NONE, false, cohere2_hparams };
