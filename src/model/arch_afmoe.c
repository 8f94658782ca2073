/*
 * arch_afmoe.c — "afmoe" (Arcee Trinity).
 *
 * What differs from llama:
 *  - embedding rows times sqrt(dim) (the tied output uses them unscaled);
 *  - sliding-window layers (attention.sliding_window; pattern period 4 unless the
 *    file says otherwise: three local layers, then a global one);
 *  - no RoPE on every fourth layer ((l + 1) % 4 == 0, a fixed step in llama.cpp,
 *    whatever the window pattern), NeoX RoPE elsewhere with rope.freq_base;
 *  - per-head q/k RMSNorm before RoPE; the attention output, before attn_output,
 *    times sigmoid(attn_gate . a), a the normed layer input;
 *  - four norms per layer: attn_norm, post_attention_norm on the attention
 *    output, ffn_norm, post_ffw_norm on the FFN output;
 *  - leading_dense_block_count dense layers, then mixtures of experts: sigmoid
 *    gating (expert_gating_func, sigmoid when absent), the selection bias
 *    exp_probs_b, the chosen weights normalised when expert_weights_norm, times
 *    expert_weights_scale; an ungated shared expert of expert_shared_count x the
 *    expert width.
 */
#include "model/arch.h"

#include "base/error.h"

#include <math.h>

static int afmoe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: afmoe without afmoe.expert_count");
    m->emb_scale = sqrtf((float)m->dim);
    int rc = model_moe_keys(m, g, MOE_KEY_GATING | MOE_KEY_NORM | MOE_KEY_SCALE, 2, err);
    if (rc || (rc = model_swa_layers(m, g, 4, 0, err))) return rc;
    for (int l = 0; l < m->n_layers; l++) m->layers[l].no_rope = (l + 1) % 4 == 0;
    return 0;
}

const model_arch model_arch_afmoe = { "afmoe", ARCH_POST_NORMS | ARCH_ATTN_OUT_GATE, MODEL_QK_HEAD, true,
                                      afmoe_hparams };
