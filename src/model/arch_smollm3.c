/*
 * arch_smollm3.c — "smollm3" (SmolLM3).
 *
 * What differs from llama: every fourth layer (il + 1 divisible by 4, SmolLM3's
 * no_rope_layer_interval, which llama.cpp hard-codes: no GGUF key) rotates
 * nothing (NoPE). Everything else is the plain block (RoPE on adjacent pairs).
 */
#include "model/arch.h"

static int smollm3_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    (void)g;
    (void)err;
    for (int l = 0; l < m->n_layers; l++) m->layers[l].no_rope = (l + 1) % 4 == 0;
    return 0;
}

const model_arch model_arch_smollm3 = { "smollm3", 0, MODEL_QK_NONE, false, smollm3_hparams };
