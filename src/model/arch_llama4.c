/*
 * arch_llama4.c — "llama4" (Llama 4 Scout / Maverick text models).
 *
 * What differs from llama (llama.cpp's llama4 graph; the periods are hard-coded
 * there, no GGUF key):
 *  - NoPE layers: layer l is rotated only when (l + 1) % 4 != 0;
 *  - on the rotated layers, q and k are RMS-normed per head without weight after
 *    RoPE (off for 128-expert files: Maverick), and attention is chunked: a
 *    position sees only the keys of its own 8192-position chunk;
 *  - on the NoPE layers q is multiplied by 1 + 0.1 ln(floor((p + 1) / 8192) + 1);
 *  - mixture of experts on every interleave_moe_layer_step-th layer (dense SwiGLU of
 *    feed_forward_length on the others): top expert_used_count by the raw router
 *    logit, weight sigmoid(logit) unnormalised, multiplying the expert's input;
 *    plus a shared expert of the expert width.
 */
#include "model/arch.h"

#include "base/error.h"

#define LLAMA4_NOPE_PERIOD 4
#define LLAMA4_CHUNK 8192

static int llama4_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: llama4 without llama4.expert_count");
    int rc = model_gguf_int(g, m->arch, "interleave_moe_layer_step", false, 1, 1, MODEL_MAX_LAYERS,
                            &m->moe_step, err);
    if (rc) return rc;
    m->gating = MODEL_GATE_SIGMOID; /* sigmoid is monotone: the top logits are chosen */
    m->expert_norm = false;
    m->moe_weight_input = true;
    m->shared_ffn = m->expert_ffn;
    m->q_temp_beta = 0.1f;
    m->q_temp_len = LLAMA4_CHUNK;
    m->q_temp_offset = 1;
    const bool qk_norm = m->n_expert != 128;
    for (int l = 0; l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        L->no_rope = (l + 1) % LLAMA4_NOPE_PERIOD == 0;
        L->qk_rms_post = !L->no_rope && qk_norm;
        L->attn_chunk = L->no_rope ? 0 : LLAMA4_CHUNK;
        L->q_temp = L->no_rope;
    }
    return 0;
}

const model_arch model_arch_llama4 = { "llama4", 0, MODEL_QK_NONE, false, llama4_hparams };
