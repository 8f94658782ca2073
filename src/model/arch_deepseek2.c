/*
 * arch_deepseek2.c — "deepseek2" (DeepSeek-V2, V2-Lite, V2.5, V3, R1 as llama.cpp's
 * converter writes them, with the attention split into attn_k_b / attn_v_b).
 *
 * What differs from llama:
 *  - multi-head latent attention (model.h, fwd_mla.h): the cache keeps one row per
 *    position and layer, [rmsnorm(c) | rope(k_pe)], shared by all heads; each
 *    head's no-RoPE query is taken into the latent space through attn_k_b and its
 *    output out of it through attn_v_b; KQ scale 1/sqrt(key_length_mla);
 *  - RoPE on adjacent pairs (not NeoX), over the rope.dimension_count dims only;
 *  - leading_dense_block_count dense FFN layers, then mixtures of experts with
 *    shared experts (expert_shared_count x expert width, always added);
 *  - gating by expert_gating_func (1 softmax, 2 sigmoid; absent: softmax, as the
 *    V2 files lack it), a selection bias (exp_probs_b) added for choosing only,
 *    expert groups (expert_group_count, expert_group_used_count: a group scores
 *    the sum of its two best, the best groups stay), the chosen weights divided
 *    by their sum when expert_weights_norm, times expert_weights_scale;
 *  - YaRN files (V2/V3 publish factor 40): with rope.scaling.yarn_log_multiplier
 *    (the converter's 0.1 x mscale_all_dim) RoPE keeps magnitude attn_factor and the
 *    KQ scale is multiplied by (attn_factor (1 + multiplier ln factor))^2; without it
 *    RoPE has YaRN's usual magnitude attn_factor (1 + 0.1 ln factor) and the KQ scale
 *    its square — llama.cpp's deepseek2 graph and context set-up (Aug 2026), worked
 *    out from its source; no golden covers it (the test model has no YaRN).
 */
#include "model/arch.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>

static int deepseek2_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->mla_kv_rank == 0)
        return err_set(
            err, KVI_E_UNSUPPORTED,
            "gguf: deepseek2 / deepseek32 without attention.kv_lora_rank (DeepSeek-V1-style attention) is "
            "not supported");
    int rc;
    float log_mul = 0.0f, attn = 1.0f, factor = 1.0f;
    if ((rc = model_moe_keys(m, g, MOE_KEY_GATING | MOE_KEY_NORM | MOE_KEY_SCALE | MOE_KEY_GROUPS, 1, err)))
        return rc;
    if (m->rope[0].yarn) {
        /* the file's own prefix: deepseek32 (arch_deepseek32.c) reads these keys too */
        const char *arch = gguf_get_str(g, "general.architecture");
        char key[96];
        snprintf(key, sizeof key, "%s.rope.scaling.yarn_log_multiplier", arch);
        const bool has_mul = gguf_find_key(g, key) >= 0;
        if ((rc = model_gguf_float(g, arch, "rope.scaling.yarn_log_multiplier", false, 0.0, &log_mul, err)) ||
            (rc = model_gguf_float(g, arch, "rope.scaling.attn_factor", false, 1.0, &attn, err)) ||
            (rc = model_gguf_float(g, arch, "rope.scaling.factor", false, 1.0, &factor, err)))
            return rc;
        const float lf = factor > 1.0f ? logf(factor) : 0.0f;
        /* with the multiplier: RoPE magnitude attn_factor, KQ scale times
         * (attn_factor (1 + multiplier ln factor))^2; without: the usual YaRN magnitude
         * attn_factor (1 + 0.1 ln factor) on RoPE and its square on the KQ scale */
        const float ms = has_mul ? attn * (1.0f + log_mul * lf) : attn * (1.0f + 0.1f * lf);
        if (has_mul) m->rope[0].mscale = attn;
        m->kq_scale *= ms * ms;
    }
    return 0;
}

const model_arch model_arch_deepseek2 = { "deepseek2", 0, MODEL_QK_NONE, false, deepseek2_hparams };
