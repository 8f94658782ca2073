/*
 * arch_exaone4.c — "exaone4" (LG EXAONE 4.0: 1.2B, 32B).
 *
 * What differs from llama:
 *  - no pre-norms; the attention and FFN outputs are RMS-normalised before their
 *    residual adds (post_attention_norm, post_ffw_norm), as olmo2;
 *  - q/k RMSNorm per head (weights [head_dim]) before RoPE; RoPE pairs NeoX-style;
 *  - with 64 layers (the 32B; llama.cpp keys it on the block count) sliding-window
 *    layers: window attention.sliding_window, period 4 unless an integer
 *    sliding_window_pattern says otherwise (the converter's array is ignored, as
 *    llama.cpp does), and the global layers have no RoPE. Any other block count
 *    (the 1.2B): every layer global, with RoPE.
 */
#include "model/arch.h"

static int exaone4_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    return m->n_layers == 64 ? model_swa_period(m, g, 4, true, err) : 0;
}

const model_arch model_arch_exaone4 = { "exaone4", ARCH_NO_PRE_NORM | ARCH_POST_NORMS, MODEL_QK_HEAD, true,
                                        exaone4_hparams };
