/*
 * arch_falcon_h1.c — "falcon-h1" (TII Falcon-H1): attention and a Mamba-2 mixer in
 * parallel in every layer, on the same normed input:
 *
 *   h = rmsnorm(x) * attn_norm;  x += attention(h) + mamba2(h)
 *   x += SwiGLU(rmsnorm(x) * ffn_norm)
 *
 * What differs from llama: the Mamba-2 mixer beside attention (fwd_mamba2.h; every
 * layer keeps KV rows and a recurrent state, model.h ssm_both), usually without the
 * grouped norm (ssm_norm absent); NeoX RoPE; the FFN norm named blk.N.ffn_norm
 * without .weight. Falcon-H1's multipliers are folded into the weights by the
 * converter: none is in the file.
 */
#include "model/arch.h"

static int falcon_h1_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    const int rc = model_mamba2_keys(m, g, err);
    if (rc) return rc;
    m->ssm_both = true;
    m->n_recurrent = m->n_layers;
    return 0;
}

const model_arch model_arch_falcon_h1 = { "falcon-h1", ARCH_FFN_NORM_BARE, MODEL_QK_NONE, true,
                                          falcon_h1_hparams };
