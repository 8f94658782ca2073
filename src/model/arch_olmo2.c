/*
 * arch_olmo2.c — "olmo2" (OLMo 2).
 *
 * What differs from llama: no pre-norms; the attention and FFN outputs are
 * RMS-normalised before their residual adds (post_attention_norm, post_ffw_norm);
 * Q and K are RMS-normalised over the whole projection (all heads at once:
 * attn_q_norm has n_heads * head_dim weights, attn_k_norm n_kv_heads * head_dim)
 * before the split into heads and RoPE; RoPE pairs NeoX-style.
 */
#include "model/arch.h"

const model_arch model_arch_olmo2 = { "olmo2", ARCH_NO_PRE_NORM | ARCH_POST_NORMS, MODEL_QK_FULL, true,
                                      NULL };
