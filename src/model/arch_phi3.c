/*
 * arch_phi3.c — "phi3" (Phi-3, Phi-3.5, Phi-4-mini).
 *
 * What differs from llama: one fused attn_qkv matrix (rows Q | K | V) and one fused
 * ffn_up (rows gate | up, no ffn_gate); RoPE pairs NeoX-style, partial rotary
 * where rope.dimension_count < head_dim (Phi-4-mini: 3/4). LongRoPE files carry
 * rope_factors_long / rope_factors_short (read generically; model_rope_for_ctx
 * picks one set per engine context, as llama.cpp does) and
 * rope.scaling.attn_factor, which scales cos and sin.
 *
 * Phi-3 files carry attention.sliding_window; llama.cpp ignores it for phi3
 * ("Phi SWA is currently disabled") and so does kvinfer: plain causal attention,
 * every layer global, so the logits match llama.cpp's.
 */
#include "model/arch.h"

const model_arch model_arch_phi3 = { "phi3", ARCH_FUSED_QKV | ARCH_FUSED_GATE_UP, MODEL_QK_NONE, true, NULL };
