/*
 * arch_mistral3.c — "mistral3" (Ministral 3, Devstral 2 text models).
 *
 * What differs from llama (RoPE on adjacent pairs, SwiGLU, as llama):
 *  - YaRN from the common scaling keys, with rope.scaling.yarn_log_multiplier m
 *    (the converter's mscale_all_dim): cos and sin are multiplied by
 *    attn_factor (1 + 0.1 ln factor) / (1 + 0.1 m ln factor) — 1 for m = 1, as
 *    Hugging Face's mscale / mscale_all_dim; without the key, YaRN's usual
 *    attn_factor (1 + 0.1 ln factor);
 *  - a query temperature on every layer (attention.temperature_scale, Llama 4's
 *    scaling beta): after RoPE, q at position p times
 *    1 + beta ln(floor(p / original_context_length) + 1), no position offset.
 */
#include "model/arch.h"

#include <math.h>

static int mistral3_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc;
    model_rope *r = &m->rope[0];
    if (r->yarn && gguf_find_key(g, "mistral3.rope.scaling.yarn_log_multiplier") >= 0) {
        float mul = 1.0f, factor = 1.0f, attn = 1.0f;
        if ((rc = model_gguf_float(g, m->arch, "rope.scaling.yarn_log_multiplier", true, 1.0, &mul, err)) ||
            (rc = model_gguf_float(g, m->arch, "rope.scaling.factor", false, 1.0, &factor, err)) ||
            (rc = model_gguf_float(g, m->arch, "rope.scaling.attn_factor", false, 1.0, &attn, err)))
            return rc;
        const double lf = factor > 1.0f ? log(factor) : 0.0;
        r->mscale = (float)(attn * (1.0 + 0.1 * lf) / (1.0 + 0.1 * mul * lf));
    }
    if (gguf_find_key(g, "mistral3.attention.temperature_scale") >= 0) {
        if ((rc = model_gguf_float(g, m->arch, "attention.temperature_scale", true, 0.0, &m->q_temp_beta,
                                   err)))
            return rc;
        m->q_temp_len = m->rope_orig_ctx;
        m->q_temp_offset = 0;
        for (int l = 0; l < m->n_layers; l++) m->layers[l].q_temp = true;
    }
    return 0;
}

const model_arch model_arch_mistral3 = { "mistral3", 0, MODEL_QK_NONE, false, mistral3_hparams };
