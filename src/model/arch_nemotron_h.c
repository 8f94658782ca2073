/*
 * arch_nemotron_h.c — "nemotron_h" (NVIDIA Nemotron-H, Nemotron Nano v2): each layer
 * is one sub-layer, x += Layer(rmsnorm(x) * attn_norm), of one of three kinds read
 * from two per-layer arrays (arch_mamba2.c):
 *
 *   attention.head_count_kv  feed_forward_length  kind
 *   0                        0                    Mamba-2 mixer (fwd_mamba2.h)
 *   > 0                      0                    attention, no positional encoding
 *   0                        > 0                  MLP: down(relu(up x)^2), no gate
 *
 * Every layer has only attn_norm (no ffn_norm); the attention heads may be wider
 * than dim / heads (key_length).
 */
#include "model/arch.h"

static int nemotron_h_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    m->act = MODEL_ACT_RELU2;
    for (int l = 0; l < m->n_layers; l++) m->layers[l].no_rope = true;
    return model_mamba2_layers(m, g, true, err);
}

const model_arch model_arch_nemotron_h = { "nemotron_h", ARCH_FFN_NO_GATE, MODEL_QK_NONE, false,
                                           nemotron_h_hparams };
