/*
 * arch_qwen3.c — "qwen3" (Qwen3 dense).
 *
 * What differs from llama: each head of Q and K is RMS-normalised (attn_q_norm,
 * attn_k_norm: head_dim weights shared by all heads) after the projection and
 * before RoPE; RoPE pairs NeoX-style; head_dim (attention.key_length) need not be
 * dim / heads. The output matrix is often tied to the embedding (no output.weight).
 */
#include "model/arch.h"

const model_arch model_arch_qwen3 = { "qwen3", 0, MODEL_QK_HEAD, true, NULL };
