/*
 * arch_seed_oss.c — "seed_oss" (ByteDance Seed-OSS-36B).
 *
 * What differs from llama: RoPE pairs NeoX-style; the pre-FFN norm is stored as
 * post_attention_norm (no ffn_norm). Its q/k/v biases and head_dim
 * (attention.key_length, != dim / heads) are read generically.
 */
#include "model/arch.h"

const model_arch model_arch_seed_oss = { "seed_oss", ARCH_FFN_NORM_POST_ATTN, MODEL_QK_NONE, true, NULL };
