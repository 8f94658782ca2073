/*
 * arch_llama.c — "llama" (Llama 2/3, Mistral, Mistral Nemo, TinyLlama, SmolLM2) and
 * "qwen2" (Qwen2, Qwen2.5): the plain block of model.h.
 *
 * What differs: qwen2 pairs RoPE dims NeoX-style (i, i + n_rot/2). Everything else
 * these files vary in is read generically: q/k/v, output and FFN biases where the
 * file has them, head_dim from attention.key_length (Mistral Nemo: 128 != 5120/32),
 * Llama 3 frequency factors (rope_freqs), linear / YaRN scaling keys.
 */
#include "model/arch.h"

const model_arch model_arch_llama = { "llama", 0, MODEL_QK_NONE, false, NULL };
const model_arch model_arch_qwen2 = { "qwen2", 0, MODEL_QK_NONE, true, NULL };
