/*
 * synth.c — synthetic GGUF files with random weights, of every architecture
 * kvinfer runs (llama, qwen2, qwen3, gemma2, gemma3, phi3, granite, olmo2, ...; the
 * keys of mistral3, apertus, exaone4 and cohere2 beyond these in synth_dense_t3.c), for
 * benchmarks and tests of shapes no trained model in ../shared has.
 *
 * Data structure: a table of synth_tensor descriptions (name, GGUF dims, element
 * type, kind of values), built from the hyper-parameters and the architecture's
 * tensor flags (model/arch.h: the loader binds by the same flags) in llama.cpp's
 * order: [rope_factors_long, rope_factors_short,] token_embd, then per block
 * attn_norm, attn_q | attn_k | attn_v (+ biases) or the fused attn_qkv,
 * attn_q_norm, attn_k_norm, attn_output, post_attention_norm, ffn_norm, ffn_gate
 * + ffn_up or the fused ffn_up [gate | up], ffn_down, post_ffw_norm (each where the
 * architecture has it), then output_norm and output (absent when tied). Dims are
 * GGUF's: ne[0] is the row length (the input side of a matrix), ne[1] the rows.
 * Metadata follows llama.cpp's converter per architecture (the goldens in
 * ../shared/golden/arch carry the same keys): key_length / value_length for
 * qwen3 and gemma (else only when head_dim != dim / heads), rope.dimension_count
 * for llama, phi3 and granite (else only when partial), gemma2's soft-caps,
 * attention.sliding_window, granite's four scales, phi3's LongRoPE tensors and
 * rope.scaling keys.
 *
 * Invariants:
 *   - the f32 values of a tensor depend only on (seed, tensor name): each tensor
 *     has its own generator seeded from both, so every --type stores the same
 *     underlying weights, quantised;
 *   - matrices are N(0, 0.02); norm weights 1 + N(0, 0.02), i.e. Gemma's norms are
 *     stored already shifted by 1, as llama.cpp's converter stores them; biases
 *     N(0, 0.02); LongRoPE factors a fixed ramp >= 1 (not random); never all zero;
 *   - a matrix whose row length is not a multiple of the type's block falls back
 *     to Q8_0 (row length % 32 == 0) or F16, with a notice (kvi_synth_params
 *     notice; the library never prints: the CLI prints notices and progress);
 *   - the file is streamed: one tensor's quantised bytes plus one f32 row are in
 *     memory at a time, never the whole model;
 *   - on any failure the partial output file is removed.
 */
#include "base/error.h"
#include "formats/gguf.h"
#include "kvinfer.h"
#include "formats/quant.h"
#include "base/rng.h"
#include "model/arch.h"
#include "tools/synth_dense_t3.h"
#include "tools/synth_int.h"
#include "tools/synth_moe_t3.h"
#include "tools/synth_bert.h"
#include "tools/synth_vocab_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- architectures: what llama.cpp's converter writes for each ---- */

enum {
    SA_KEY_LEN = 1 << 0,    /* writes attention.key_length / value_length always */
    SA_ROPE_DIMS = 1 << 1,  /* writes rope.dimension_count always */
    SA_QKV_BIAS = 1 << 2,   /* attn_q / attn_k / attn_v biases (qwen2) */
    SA_TIED = 1 << 3,       /* no output.weight by default */
    SA_SWA = 1 << 4,        /* sliding-window layers (gemma2/3) */
    SA_GEMMA2 = 1 << 5,     /* attention and final soft-caps */
    SA_GRANITE = 1 << 6,    /* embedding / residual / attention / logit scales */
    SA_PHI3 = 1 << 7,       /* attention.sliding_window key (ignored), LongRoPE */
    SA_VOCAB_SIZE = 1 << 8, /* writes <arch>.vocab_size (llama) */
    SA_MOE = 1 << 9,        /* every FFN a mixture of experts (qwen3moe, olmoe, gpt-oss) */
    SA_EXP_FFN_KEY =
        1 << 10, /* writes expert_feed_forward_length (else feed_forward_length is the expert width) */
    SA_GPTOSS = 1 << 11, /* attention biases and sinks, biased router and experts, YaRN */
    SA_HYBRID = 1 << 12, /* gated DeltaNet layers + gated attention (qwen35, qwen3next) */
    SA_DENSE_T3 = 1 << 13,   /* more keys and rope_freqs from synth_dense_t3.c */
    SA_LAYER_NORM = 1 << 14, /* attention.layer_norm_epsilon instead of the RMS one (cohere2) */
    SA_YARN = 1 << 15,       /* rope_orig_ctx: YaRN (rope_linear its factor), written by synth_dense_t3.c */
    SA_MOE_T3 = 1 << 16, /* routing keys and extra tensors from synth_moe_t3.c */
    SA_SHORTCONV = 1 << 17,  /* short-convolution hybrids: written by synth_lfm2.c */
    SA_NO_ROPE_BASE = 1 << 19, /* no rope.freq_base (nemotron_h: no positional encoding) */
    SA_KIMI = 1 << 21,   /* kimi-linear: no rope.freq_base, key_length / value_length from its hooks */
};

typedef struct synth_arch {
    const char *name;
    unsigned flags;
    float rope_base, rms_eps;
    int window, pattern; /* SA_SWA defaults */
} synth_arch;

static const synth_arch k_archs[] = {
    { "llama", SA_ROPE_DIMS | SA_VOCAB_SIZE, 10000.0f, 1e-5f, 0, 0 },
    { "qwen2", SA_QKV_BIAS, 1e6f, 1e-6f, 0, 0 },
    { "qwen3", SA_KEY_LEN | SA_TIED, 1e6f, 1e-6f, 0, 0 },
    { "gemma2", SA_KEY_LEN | SA_TIED | SA_SWA | SA_GEMMA2, 10000.0f, 1e-6f, 4096, 2 },
    { "gemma3", SA_KEY_LEN | SA_TIED | SA_SWA, 1e6f, 1e-6f, 512, 6 },
    { "phi3", SA_ROPE_DIMS | SA_PHI3, 10000.0f, 1e-5f, 0, 0 },
    { "granite", SA_ROPE_DIMS | SA_GRANITE, 10000.0f, 1e-5f, 0, 0 },
    { "olmo2", 0, 500000.0f, 1e-6f, 0, 0 },
    { "qwen3moe", SA_KEY_LEN | SA_MOE | SA_EXP_FFN_KEY, 1e6f, 1e-6f, 0, 0 },
    { "olmoe", SA_MOE, 10000.0f, 1e-5f, 0, 0 },
    { "gpt-oss", SA_KEY_LEN | SA_SWA | SA_MOE | SA_EXP_FFN_KEY | SA_GPTOSS, 150000.0f, 1e-5f, 128, 2 },
    { "qwen35", SA_KEY_LEN | SA_ROPE_DIMS | SA_TIED | SA_HYBRID, 1e7f, 1e-6f, 0, 0 },
    { "qwen3next", SA_KEY_LEN | SA_ROPE_DIMS | SA_MOE | SA_EXP_FFN_KEY | SA_HYBRID, 1e7f, 1e-6f, 0, 0 },
    { "mistral3", SA_KEY_LEN | SA_ROPE_DIMS | SA_VOCAB_SIZE | SA_DENSE_T3 | SA_YARN, 1e6f, 1e-5f, 0, 0 },
    { "smollm3", SA_ROPE_DIMS | SA_VOCAB_SIZE | SA_TIED, 5e6f, 1e-6f, 0, 0 },
    { "seed_oss", SA_KEY_LEN | SA_QKV_BIAS, 1e7f, 1e-6f, 0, 0 },
    { "apertus", SA_ROPE_DIMS | SA_VOCAB_SIZE | SA_DENSE_T3, 1.2e7f, 1e-5f, 0, 0 },
    { "exaone4", SA_VOCAB_SIZE | SA_DENSE_T3, 1e6f, 1e-5f, 0, 0 },
    { "cohere2", SA_ROPE_DIMS | SA_VOCAB_SIZE | SA_TIED | SA_SWA | SA_LAYER_NORM | SA_DENSE_T3, 5e4f, 1e-5f,
      4096, 4 },
    { "glm4moe", SA_KEY_LEN | SA_ROPE_DIMS | SA_QKV_BIAS | SA_MOE | SA_EXP_FFN_KEY | SA_MOE_T3, 1e6f, 1e-5f,
      0, 0 },
    { "minimax-m2", SA_KEY_LEN | SA_ROPE_DIMS | SA_MOE | SA_EXP_FFN_KEY | SA_MOE_T3, 5e6f, 1e-6f, 0, 0 },
    { "hunyuan-moe", SA_TIED | SA_MOE | SA_EXP_FFN_KEY | SA_MOE_T3, 11158840.0f, 1e-5f, 0, 0 },
    { "ernie4_5-moe", SA_KEY_LEN | SA_TIED | SA_MOE | SA_EXP_FFN_KEY | SA_MOE_T3, 5e5f, 1e-5f, 0, 0 },
    { "bailingmoe2", SA_KEY_LEN | SA_ROPE_DIMS | SA_VOCAB_SIZE | SA_MOE | SA_EXP_FFN_KEY | SA_MOE_T3, 6e5f,
      1e-6f, 0, 0 },
    { "afmoe", SA_TIED | SA_SWA | SA_MOE | SA_EXP_FFN_KEY | SA_MOE_T3, 10000.0f, 1e-5f, 4096, 4 },
    { "qwen35moe", SA_KEY_LEN | SA_ROPE_DIMS | SA_MOE | SA_EXP_FFN_KEY | SA_HYBRID | SA_MOE_T3, 1e7f, 1e-6f,
      0, 0 },
    { "bert", 0, 0.0f, 1e-12f, 0, 0 }, /* written by synth_bert.c */
    { "llama4", SA_KEY_LEN | SA_ROPE_DIMS | SA_VOCAB_SIZE | SA_MOE | SA_EXP_FFN_KEY, 500000.0f, 1e-5f, 0, 0 },
    { "gemma4", SA_KEY_LEN | SA_ROPE_DIMS | SA_TIED, 1e6f, 1e-6f, 512, 6 },
    { "lfm2", SA_VOCAB_SIZE | SA_TIED | SA_SHORTCONV, 1e6f, 1e-5f, 0, 0 },
    { "lfm2moe", SA_VOCAB_SIZE | SA_TIED | SA_MOE | SA_EXP_FFN_KEY | SA_SHORTCONV, 1e6f, 1e-5f, 0, 0 },
    /* Mamba-2 hybrids: synth_mamba2.c */
    { "granitehybrid", 0, 10000.0f, 1e-5f, 0, 0 },
    { "nemotron_h", SA_KEY_LEN | SA_NO_ROPE_BASE, 10000.0f, 1e-5f, 0, 0 },
    { "falcon-h1", SA_KEY_LEN | SA_VOCAB_SIZE, 100000.0f, 1e-5f, 0, 0 },
    { "kimi-linear", SA_VOCAB_SIZE | SA_MOE | SA_EXP_FFN_KEY | SA_KIMI, 10000.0f, 1e-5f, 0, 0 },
};

/* Architectures described in their own file (synth_int.h), else NULL. */
static const synth_hooks *synth_hooks_of(const synth_arch *a)
{
    return !strcmp(a->name, "llama4")        ? &synth_hooks_llama4
           : !strcmp(a->name, "gemma4")      ? &synth_hooks_gemma4
           : (a->flags & SA_SHORTCONV)       ? &synth_hooks_lfm2
           : !strcmp(a->name, "granitehybrid") || !strcmp(a->name, "nemotron_h") || !strcmp(a->name, "falcon-h1")
               ? &synth_hooks_mamba2
           : !strcmp(a->name, "kimi-linear") ? &synth_hooks_kimi_linear
                                             : NULL;
}
#define N_ARCHS (sizeof k_archs / sizeof k_archs[0])

static const char *const k_arch_names[N_ARCHS + 1] = {
    "llama",       "qwen2",        "qwen3",       "gemma2",  "gemma3",    "phi3",      "granite",
    "olmo2",       "qwen3moe",     "olmoe",       "gpt-oss", "qwen35",    "qwen3next", "mistral3",
    "smollm3",     "seed_oss",     "apertus",     "exaone4", "cohere2",   "glm4moe",   "minimax-m2",
    "hunyuan-moe", "ernie4_5-moe", "bailingmoe2", "afmoe",   "qwen35moe", "bert",      "llama4",
    "gemma4",      "lfm2",         "lfm2moe",     "granitehybrid", "nemotron_h", "falcon-h1", "kimi-linear", NULL,
};

const char *const *kvi_synth_arch_names(void) { return k_arch_names; }

static const synth_arch *synth_arch_find(const char *name)
{
    if (!name || !name[0]) return &k_archs[0];
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(name, k_archs[i].name)) return &k_archs[i];
    return NULL;
}

/* ---- presets ---- */

typedef struct synth_preset {
    const char *name, *arch;
    int dim, ffn_dim, n_layers, n_heads, n_kv_heads, n_vocab, n_ctx;
    int head_dim, n_rot, window, pattern, tie, rope_orig_ctx;
    int n_expert, n_expert_used, expert_ffn;
    int ssm_groups, ssm_heads, ssm_state; /* hybrids (0: the defaults) */
} synth_preset;

/* The real shapes come from the models' config.json files (hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
 * head_dim, vocab_size, max_position_embeddings, tie_word_embeddings):
 *  - Qwen/Qwen3-0.6B: 1024, 3072, 28, 16, 8, 128, 151936, 40960, tied; RoPE 1e6;
 *  - google/gemma-3-1b-pt: 1152, 6912, 26, 4, 1, 256, 262144, 32768, tied;
 *    sliding_window 512 on 5 of every 6 layers, local base 10000, global 1e6, no
 *    RoPE scaling (the 4B..27B sizes scale the global layers linearly by 8);
 *  - microsoft/Phi-4-mini-instruct: 3072, 8192, 32, 24, 8, 128, 200064, 131072,
 *    tied; partial_rotary_factor 0.75 (96 of 128 dims), LongRoPE over
 *    original_max_position_embeddings 4096, sliding_window 262144.
 * The LongRoPE factors are synth's own ramp (see synth_rope_factor), not
 * Phi-4-mini's. gemma3-tiny is ../shared/golden/arch/gemma3's shape with a window
 * of 16 (tests of the window parts of the KV cache).
 * Mixtures of experts:
 *  - allenai/OLMoE-1B-7B-0924: 2048, expert 1024, 16 layers, 16 heads (no GQA), 64
 *    experts, 8 used, vocab 50304, 4096 positions; 6.9B parameters, 1.3B active;
 *  - openai/gpt-oss-20b: 2880, experts 32 x 2880, 4 used, 64 heads of 64, 8 KV
 *    heads, vocab 201088, window 128 on even layers, YaRN 32 over 4096 — with 6 of
 *    its 24 layers (gpt-oss-20b-6l) so that it fits this project's machines;
 *  - dense-1.3b: a dense llama with OLMoE-1B-7B's active shape (its 8 chosen
 *    experts as one FFN of 8192): what the MoE's decode would run at if routing
 *    and scattered expert reads cost nothing.
 * Hybrids (gated DeltaNet, every 4th layer attention):
 *  - Qwen/Qwen3.5-0.8B (its config.json's text part as published): hidden 1024, 24
 *    layers, intermediate 3584, 8 heads of 256 with 2 KV heads and 64 rotary dims
 *    (partial_rotary_factor 0.25), linear attention 16 key and 16 value heads of
 *    128, conv kernel 4, vocab 248320, tied, 262144 positions;
 *  - qwen35-dense-0.8b: a plain qwen3 of the same width and depth (every layer
 *    attention, 8 heads of 256, 2 KV heads): the KV cache the hybrid replaces.
 * More dense architectures (text configs as published):
 *  - mistralai/Ministral-3-8B (Instruct-2512): 4096, 14336, 34 layers, 32 heads, 8 KV
 *    heads of 128, vocab 131072, 262144 positions, untied; YaRN factor 16 over 16384,
 *    rope_theta 1e6, llama_4_scaling_beta 0.1;
 *  - HuggingFaceTB/SmolLM3-3B: 2048, 11008, 36 layers, 16 heads, 4 KV heads, vocab
 *    128256, 65536 positions, tied, rope_theta 5e6, no RoPE on every 4th layer;
 *  - ByteDance-Seed/Seed-OSS-36B: 5120, 27648, 80 heads, 8 KV heads of 128, vocab
 *    155136, 524288 positions, untied, rope_theta 1e7, q/k/v biases — with 8 of its
 *    64 layers (seed-oss-36b-8l);
 *  - swiss-ai/Apertus-8B: 4096, 21504, 32 layers, 32 heads, 8 KV heads, vocab 131072,
 *    65536 positions, untied, rope_theta 1.2e7, Llama 3 scaling factor 8;
 *  - LGAI-EXAONE/EXAONE-4.0-32B: 5120, 27392, 64 layers, 40 heads, 8 KV heads of 128,
 *    vocab 102400, 131072 positions, untied, sliding_window 4096 on 3 of every 4
 *    layers (llama.cpp enables them only at 64 layers: no reduced depth), Llama 3
 *    scaling factor 16;
 *  - CohereForAI/c4ai-command-r7b-12-2024: 4096, 14336, 32 layers, 32 heads, 8 KV
 *    heads, vocab 256000, 131072 positions, tied, sliding_window 4096 on 3 of every
 *    4 layers, rope_theta 50000, logit_scale 0.25.
 * Issue 36's mixtures of experts, fewer layers than published (+ their MTP block):
 *  - zai-org/GLM-4.5-Air: hidden 4096, dense intermediate 10944, 96 heads of 128, 8
 *    KV heads, partial_rotary_factor 0.5, 128 experts of 1408, 8 used, 1 shared,
 *    first_k_dense_replace 1, vocab 151552, 131072 positions; 4 of its 46 layers;
 *  - Qwen/Qwen3.5-35B-A3B (text part): hidden 2048, 16 heads of 256, 2 KV heads, 64
 *    rotary dims, 256 experts of 512, 8 used, shared expert 512, linear attention
 *    16 key / 32 value heads of 128, vocab 248320, 262144 positions; 8 of its 40
 *    layers;
 *  - MiniMaxAI/MiniMax-M2: hidden 3072, 48 heads of 128, 8 KV heads, rotary_dim 64,
 *    256 experts of 1536, 8 used, vocab 200064, 196608 positions; 4 of its 62 layers. */
static const synth_preset k_presets[] = {
    // clang-format off
    /* the shape of stories260K (../shared/models/stories260K.gguf) */
    { "tiny", "llama", 64, 172, 5, 8, 4, 512, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    /* the shape of ../shared/golden/quant/qtest-*.gguf */
    { "qtest", "llama", 256, 768, 4, 8, 4, 512, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "stories15M", "llama", 288, 768, 6, 6, 6, 32000, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "stories42M", "llama", 512, 1376, 8, 8, 8, 32000, 1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "stories110M", "llama", 768, 2048, 12, 12, 12, 32000, 1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "llama-1b", "llama", 2048, 8192, 16, 32, 8, 32000, 2048, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "qwen3-0.6b", "qwen3", 1024, 3072, 28, 16, 8, 151936, 40960, 128, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0 },
    { "gemma-3-1b", "gemma3", 1152, 6912, 26, 4, 1, 262144, 32768, 256, 0, 512, 6, 1, 0, 0, 0, 0, 0, 0, 0 },
    { "phi-4-mini", "phi3", 3072, 8192, 32, 24, 8, 200064, 131072, 128, 96, 262144, 0, 1, 4096, 0, 0, 0, 0, 0, 0 },
    { "gemma3-tiny", "gemma3", 128, 256, 7, 4, 1, 512, 512, 64, 0, 16, 6, 1, 0, 0, 0, 0, 0, 0, 0 },
    { "olmoe-1b-7b", "olmoe", 2048, 1024, 16, 16, 16, 50304, 4096, 0, 0, 0, 0, 0, 0, 64, 8, 0, 0, 0, 0 },
    { "dense-1.3b", "llama", 2048, 8192, 16, 16, 16, 50304, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "gpt-oss-20b-6l", "gpt-oss", 2880, 2880, 6, 64, 8, 201088, 131072, 64, 0, 128, 2, -1, 4096, 32, 4, 0, 0, 0, 0 },
    { "moe-tiny", "qwen3moe", 128, 256, 4, 4, 2, 512, 512, 64, 0, 0, 0, 0, 0, 8, 2, 32, 0, 0, 0 },
    { "qwen3.5-0.8b", "qwen35", 1024, 3584, 24, 8, 2, 248320, 262144, 256, 64, 0, 0, 1, 0, 0, 0, 0, 16, 16, 128 },
    { "qwen35-dense-0.8b", "qwen3", 1024, 3584, 24, 8, 2, 248320, 262144, 256, 64, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0 },
    /* ../shared/golden/arch/qwen35's shape */
    { "qwen35-tiny", "qwen35", 128, 256, 8, 4, 2, 512, 512, 64, 16, 0, 0, -1, 0, 0, 0, 0, 2, 4, 32 },
    /* more dense architectures (see synth_dense_t3.c for their extra keys) */
    { "ministral-3-8b", "mistral3", 4096, 14336, 34, 32, 8, 131072, 262144, 128, 0, 0, 0, -1, 16384, 0, 0, 0, 0, 0, 0 },
    { "smollm3-3b", "smollm3", 2048, 11008, 36, 16, 4, 128256, 65536, 128, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0 },
    { "seed-oss-36b-8l", "seed_oss", 5120, 27648, 8, 80, 8, 155136, 524288, 128, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0 },
    { "apertus-8b", "apertus", 4096, 21504, 32, 32, 8, 131072, 65536, 128, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0 },
    { "exaone-4-32b", "exaone4", 5120, 27392, 64, 40, 8, 102400, 131072, 128, 0, 4096, 4, -1, 0, 0, 0, 0, 0, 0, 0 },
    { "command-r7b", "cohere2", 4096, 14336, 32, 32, 8, 256000, 131072, 128, 0, 4096, 4, 1, 0, 0, 0, 0, 0, 0, 0 },
    /* issue 36's mixtures of experts at reduced depth (their real widths) */
    { "glm-4.5-air-4l", "glm4moe", 4096, 10944, 4, 96, 8, 151552, 131072, 128, 64, 0, 0, -1, 0, 128, 8, 1408, 0, 0, 0 },
    { "qwen3.5-35b-a3b-8l", "qwen35moe", 2048, 512, 8, 16, 2, 248320, 262144, 256, 64, 0, 0, -1, 0, 256, 8, 512, 16, 32, 128 },
    { "minimax-m2-4l", "minimax-m2", 3072, 1536, 4, 48, 8, 200064, 196608, 128, 64, 0, 0, -1, 0, 256, 8, 1536, 0, 0, 0 },
    // clang-format on
};
#define N_PRESETS (sizeof k_presets / sizeof k_presets[0])

/* k_presets, then the presets of synth_int.h hooks */
static const char *const k_preset_names[] = {
    "tiny", "qtest", "stories15M", "stories42M", "stories110M", "llama-1b", "qwen3-0.6b", "gemma-3-1b",
    "phi-4-mini", "gemma3-tiny", "olmoe-1b-7b", "dense-1.3b", "gpt-oss-20b-6l", "moe-tiny", "qwen3.5-0.8b",
    "qwen35-dense-0.8b", "qwen35-tiny", "ministral-3-8b", "smollm3-3b", "seed-oss-36b-8l", "apertus-8b",
    "exaone-4-32b", "command-r7b", "glm-4.5-air-4l", "qwen3.5-35b-a3b-8l", "minimax-m2-4l",
    "llama-4-scout-4l", "llama4-tiny", "gemma-4-e4b", "gemma-4-31b-6l", "gemma4-tiny", "lfm2-1.2b",
    "lfm2-8b-a1b", "lfm2-tiny", "lfm2moe-tiny", "kimi-linear-tiny", NULL,
};

const char *const *kvi_synth_preset_names(void) { return k_preset_names; }

static int ascii_casecmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        int ca = (unsigned char)*a, cb = (unsigned char)*b;
        if (ca >= 'A' && ca <= 'Z') ca += 32;
        if (cb >= 'A' && cb <= 'Z') cb += 32;
        if (ca != cb || ca == 0) return ca - cb;
    }
}

int kvi_synth_preset(const char *name, kvi_synth_params *p)
{
    if (!name || !p) return KVI_E_INVALID;
    if (synth_bert_preset(name, p) == 0) return KVI_OK;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const synth_preset *s = &k_presets[i];
        if (ascii_casecmp(name, s->name) != 0) continue;
        memset(p, 0, sizeof *p);
        p->dim = s->dim;
        p->ffn_dim = s->ffn_dim;
        p->n_layers = s->n_layers;
        p->n_heads = s->n_heads;
        p->n_kv_heads = s->n_kv_heads;
        p->n_vocab = s->n_vocab;
        p->n_ctx = s->n_ctx;
        p->type = KVI_TYPE_F32;
        p->seed = 1;
        p->vocab_from = NULL;
        p->name = s->name;
        p->arch = s->arch;
        p->head_dim = s->head_dim;
        p->n_rot = s->n_rot;
        p->window = s->window;
        p->window_pattern = s->pattern;
        p->tie = s->tie;
        p->rope_orig_ctx = s->rope_orig_ctx;
        p->n_expert = s->n_expert;
        p->n_expert_used = s->n_expert_used;
        p->expert_ffn = s->expert_ffn;
        p->ssm_groups = s->ssm_groups;
        p->ssm_heads = s->ssm_heads;
        p->ssm_state = s->ssm_state;
        return KVI_OK;
    }
    if (synth_hooks_llama4.preset(name, p) == 0 || synth_hooks_gemma4.preset(name, p) == 0 ||
        synth_hooks_lfm2.preset(name, p) == 0 || synth_hooks_mamba2.preset(name, p) == 0 ||
        synth_hooks_kimi_linear.preset(name, p) == 0)
        return KVI_OK;
    return KVI_E_INVALID;
}

void synth_preset_base(kvi_synth_params *p, const char *name, const char *arch, int dim, int ffn, int layers,
                       int heads, int kv_heads, int head_dim, int vocab, int ctx)
{
    *p = (kvi_synth_params){ .dim = dim,
                             .ffn_dim = ffn,
                             .n_layers = layers,
                             .n_heads = heads,
                             .n_kv_heads = kv_heads,
                             .n_vocab = vocab,
                             .n_ctx = ctx,
                             .type = KVI_TYPE_F32,
                             .seed = 1,
                             .name = name,
                             .arch = arch,
                             .head_dim = head_dim };
}

int kvi_synth_resolve(const kvi_synth_params *p, kvi_synth_params *out)
{
    if (!p || !out) return KVI_E_INVALID;
    const synth_arch *a = synth_arch_find(p->arch);
    if (!a) return KVI_E_INVALID;
    *out = *p;
    out->arch = a->name;
    if (out->head_dim == 0 && out->n_heads > 0) out->head_dim = out->dim / out->n_heads;
    if (out->n_rot == 0) out->n_rot = out->head_dim;
    if (out->tie == 0) out->tie = (a->flags & SA_TIED) ? 1 : -1;
    if (out->rope_base == 0.0f) out->rope_base = a->rope_base;
    if (out->rms_eps == 0.0f) out->rms_eps = a->rms_eps;
    if (a->flags & SA_SWA) {
        if (out->window == 0) out->window = a->window;
        if (out->window_pattern == 0) out->window_pattern = a->pattern;
    }
    if ((a->flags & SA_PHI3) && out->window == 0) out->window = out->n_ctx;
    if (!strcmp(a->name, "gemma3") && out->rope_base_local == 0.0f) out->rope_base_local = 10000.0f;
    if (out->n_expert > 0 && out->expert_ffn == 0) out->expert_ffn = out->ffn_dim;
    synth_dt3_resolve(out);
    if (a->flags & SA_HYBRID) {
        if (out->ssm_groups == 0) out->ssm_groups = 16;
        if (out->ssm_heads == 0) out->ssm_heads = out->ssm_groups;
        if (out->ssm_state == 0) out->ssm_state = 128;
        if (out->ssm_conv == 0) out->ssm_conv = 4;
        if (out->attn_interval == 0) out->attn_interval = 4;
        if (out->n_expert > 0 && out->shared_ffn == 0) out->shared_ffn = out->ffn_dim;
    }
    if (a->flags & SA_MOE_T3) synth_t3_resolve(out);
    if (synth_hooks_of(a)) synth_hooks_of(a)->resolve(out);
    return KVI_OK;
}

/* ---- the random weights ---- */

/* Normal deviates by the Box-Muller transform, two per 64-bit draw; the spare
 * carries over between calls so a tensor's stream does not depend on row size. */
typedef struct synth_normal {
    rng_state rng;
    float spare;
    int has_spare;
} synth_normal;

/* The generator of one tensor: seeded from the model seed and the tensor's name. */
static void synth_normal_init(synth_normal *g, uint64_t seed, const char *name)
{
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a of the name */
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) h = (h ^ *c) * 0x100000001B3ull;
    uint64_t x = seed;
    rng_seed(&g->rng, rng_splitmix64(&x) ^ h);
    g->has_spare = 0;
    g->spare = 0.0f;
}

static void synth_normal_fill(synth_normal *g, float *dst, int64_t n, float mean, float std)
{
    int64_t i = 0;
    if (n > 0 && g->has_spare) {
        dst[i++] = mean + std * g->spare;
        g->has_spare = 0;
    }
    for (; i < n; i += 2) {
        uint64_t r = rng_next(&g->rng);
        /* u1 in (0, 1] (log is finite), u2 in [0, 1), 24 bits each */
        float u1 = (float)((r >> 40) + 1) * (1.0f / 16777216.0f);
        float u2 = (float)((r >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
        float rad = sqrtf(-2.0f * logf(u1));
        float th = 6.28318530718f * u2;
        dst[i] = mean + std * rad * cosf(th);
        float z1 = rad * sinf(th);
        if (i + 1 < n) {
            dst[i + 1] = mean + std * z1;
        } else {
            g->spare = z1;
            g->has_spare = 1;
        }
    }
}

/* ---- the tensor table ---- */

/* llama.cpp's LLAMA_FTYPE_MOSTLY_* for a file whose matrices are all `t`
 * ("pure" K types take the _S number, as llama-quantize --pure writes them;
 * the _M mixes their own). */
static int synth_file_type(kvi_type t, bool mix_m)
{
    if (mix_m) return t == KVI_TYPE_Q4_K ? 15 : t == KVI_TYPE_Q5_K ? 17 : -1;
    switch (t) {
    case KVI_TYPE_F32: return 0;
    case KVI_TYPE_F16: return 1;
    case KVI_TYPE_Q4_0: return 2;
    case KVI_TYPE_Q4_1: return 3;
    case KVI_TYPE_Q8_0: return 7;
    case KVI_TYPE_Q5_0: return 8;
    case KVI_TYPE_Q5_1: return 9;
    case KVI_TYPE_Q2_K: return 10;
    case KVI_TYPE_Q3_K: return 11;
    case KVI_TYPE_Q4_K: return 14;
    case KVI_TYPE_Q5_K: return 16;
    case KVI_TYPE_Q6_K: return 18;
    case KVI_TYPE_IQ4_NL: return 25;
    case KVI_TYPE_IQ4_XS: return 30;
    case KVI_TYPE_BF16: return 32;
    case KVI_TYPE_MXFP4: return 38; /* MXFP4_MOE, as llama-quantize --pure writes it */
    default: return -1;
    }
}

/* The stored type of a matrix with rows of n elements, and a note when it differs. */
static kvi_type synth_matrix_type(kvi_type want, int64_t n)
{
    int64_t blk = quant_block_elems(want);
    if (blk > 0 && n % blk == 0) return want;
    if (n % QK8_0 == 0) return KVI_TYPE_Q8_0;
    return KVI_TYPE_F16;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every
 * third one between take more bits in the _M mixes. */
static bool synth_more_bits(int l, int n) { return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2; }

/* The type llama-quantize gives matrix `role` of layer l (-1: not in a block):
 * the file's type, or for the _M mixes (llama_tensor_get_type) Q6_K for attn_v
 * and ffn_down where use_more_bits, one K type up for a fused attn_qkv; the output
 * matrix (the embedding when tied) in Q6_K for Q4_0 and the mixes. */
kvi_type synth_role_type(const kvi_synth_params *p, const char *role, int l, bool is_output)
{
    const kvi_type t = p->type;
    if (is_output) return (t == KVI_TYPE_Q4_0 || p->mix_m) && p->dim % QK_K == 0 ? KVI_TYPE_Q6_K : t;
    if (!p->mix_m) return t;
    const kvi_type up = t == KVI_TYPE_Q4_K ? KVI_TYPE_Q5_K : KVI_TYPE_Q6_K;
    if (!strcmp(role, "attn_qkv")) return up;
    if ((!strcmp(role, "attn_v") || !strcmp(role, "ffn_down")) && synth_more_bits(l, p->n_layers))
        return KVI_TYPE_Q6_K;
    return t;
}

void synth_add(synth_table *tab, const char *name, int64_t ne0, int64_t ne1, synth_kind kind, kvi_type want)
{
    synth_tensor *d = &tab->t[tab->n++];
    snprintf(d->name, sizeof d->name, "%s", name);
    d->ne[0] = ne0;
    d->ne[1] = ne1;
    d->ne[2] = d->ne[3] = 1;
    d->n_dims = kind == SK_MATRIX || kind == SK_ROUTER || kind == SK_CONV ? 2 : 1;
    d->kind = kind;
    d->type = kind == SK_MATRIX ? synth_matrix_type(want, ne0) : KVI_TYPE_F32;
}

void synth_add_block(synth_table *tab, const kvi_synth_params *p, int l, const char *role, int64_t ne0,
                     int64_t ne1, synth_kind kind, int64_t n_exp)
{
    char nm[64];
    snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, role);
    if (n_exp > 0)
        synth_add_experts(tab, nm, ne0, ne1, n_exp, kind, synth_role_type(p, role, l, false));
    else
        synth_add(tab, nm, ne0, ne1, kind, synth_role_type(p, role, l, false));
}

/* An expert tensor {ne0, ne1, n_exp}: a matrix per expert, or (bias) a vector per expert. */
void synth_add_experts(synth_table *tab, const char *name, int64_t ne0, int64_t ne1, int64_t n_exp,
                       synth_kind kind, kvi_type want)
{
    synth_add(tab, name, ne0, kind == SK_BIAS ? n_exp : ne1, kind, want);
    synth_tensor *d = &tab->t[tab->n - 1];
    if (kind == SK_BIAS) {
        d->n_dims = 2;
        return;
    }
    d->ne[2] = n_exp;
    d->n_dims = 3;
}

/* One notice per row length that could not take the requested type, naming
 * the matrices (their role: "attn_q" stands for every layer's); nothing when p
 * has no notice callback. Deliberate choices (Q6_K output, the _M mix) are not
 * reported. */
static void synth_note_fallbacks(const kvi_synth_params *p, const synth_tensor *t, size_t n)
{
    const kvi_type want = p->type;
    int64_t done[4] = { 0, 0, 0, 0 }; /* row lengths already reported */
    int n_done = 0;
#define FELL(x) ((x).kind == SK_MATRIX && (x).type != want && (x).type == synth_matrix_type(want, (x).ne[0]))
    for (size_t i = 0; p->notice && i < n && n_done < 4; i++) {
        if (!FELL(t[i])) continue;
        const int64_t len = t[i].ne[0];
        bool seen = false;
        for (int k = 0; k < n_done; k++) seen |= done[k] == len;
        if (seen) continue;
        char roles[256] = "";
        for (size_t j = i; j < n; j++) {
            if (!FELL(t[j]) || t[j].ne[0] != len) continue;
            const char *nm = t[j].name;
            int skip = 0;
            if (sscanf(nm, "blk.%*d.%n", &skip) >= 0 && skip > 0) nm += skip; /* any block's role, once */
            size_t rl = strcspn(nm, ".");
            size_t used = strlen(roles);
            char role[64];
            snprintf(role, sizeof role, "%.*s", (int)rl, nm);
            bool listed = false;
            for (const char *r = strstr(roles, role); r && !listed; r = strstr(r + 1, role))
                listed = (r == roles || r[-1] == ' ') && (r[rl] == ',' || r[rl] == 0);
            if (!listed && used + rl + 3 < sizeof roles)
                snprintf(roles + used, sizeof roles - used, "%s%.*s", used ? ", " : "", (int)rl, nm);
        }
        char msg[512];
        snprintf(msg, sizeof msg,
                 "synth: note: rows of %lld are not a multiple of %s's block of %lld: %s stored as %s",
                 (long long)len, kvi_type_name(want), (long long)quant_block_elems(want), roles,
                 kvi_type_name(t[i].type));
        p->notice(p->user, msg);
        done[n_done++] = len;
    }
#undef FELL
}

/* Most tensors a table can hold: 5 outside the blocks, 28 per block (MTP blocks too). */
static size_t synth_table_cap(const kvi_synth_params *p, const synth_arch *sa)
{
    return synth_hooks_of(sa) ? synth_hooks_of(sa)->table_cap(p) : 5 + 28 * (size_t)(p->n_layers + 4);
}

/* synth_moe_t3.h's emitter: a tensor of block l into c->tab, typed for c->p. */
typedef struct synth_t3_ctx {
    const kvi_synth_params *p;
    synth_table *tab;
} synth_t3_ctx;

static void synth_t3_add(void *ctx, int l, const char *name, int64_t ne0, int64_t ne1, synth_t3_kind kind,
                         const char *role)
{
    const synth_t3_ctx *c = ctx;
    char nm[64];
    snprintf(nm, sizeof nm, "blk.%d.%s", l, name);
    synth_add(c->tab, nm, ne0, ne1,
              kind == T3_MATRIX ? SK_MATRIX
              : kind == T3_NORM ? SK_NORM
                                : SK_BIAS,
              synth_role_type(c->p, role, l, false));
}

/* Fills tab (room for synth_table_cap) in file order for the resolved p. */
static void synth_build_table(const kvi_synth_params *p, const synth_arch *sa, const model_arch *ma,
                              int n_vocab, synth_table *tab)
{
    const int64_t dim = p->dim, ffn = p->ffn_dim, hd = p->head_dim;
    const int64_t qd = hd * p->n_heads, kvd = hd * p->n_kv_heads;
    const bool tied = p->tie > 0;
    char nm[64];
    if (synth_hooks_of(sa)) {
        synth_hooks_of(sa)->table(p, n_vocab, tab);
        return;
    }
    if (p->rope_orig_ctx > 0 && (sa->flags & SA_PHI3)) {
        synth_add(tab, "rope_factors_long.weight", p->n_rot / 2, 1, SK_ROPE_LONG, p->type);
        synth_add(tab, "rope_factors_short.weight", p->n_rot / 2, 1, SK_ROPE_SHORT, p->type);
    }
    synth_add(tab, "token_embd.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "token_embd", -1, tied));
    if ((sa->flags & SA_DENSE_T3) && synth_dt3_has_rope_freqs(p))
        synth_add(tab, "rope_freqs.weight", p->n_rot / 2, 1, SK_ROPE_FREQS, p->type);
    const bool pre = !(ma->flags & ARCH_NO_PRE_NORM), post = (ma->flags & ARCH_POST_NORMS) != 0;
    const int lead = synth_t3_dense_lead(p); /* leading dense blocks, then trailing MTP blocks */
    synth_t3_ctx t3 = { p, tab };
    for (int l = 0; l < p->n_layers + synth_t3_nextn(p); l++) {
#define BLK(role, ne0, ne1, kind)                                               \
    do {                                                                        \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, role);                          \
        synth_add(tab, nm, ne0, ne1, kind, synth_role_type(p, role, l, false)); \
    } while (0)
        if (pre) BLK("attn_norm.weight", dim, 1, SK_NORM);
        const bool rec = (sa->flags & SA_HYBRID) && (l + 1) % p->attn_interval != 0 && l < p->n_layers;
        if (rec) { /* gated DeltaNet (model.h): conv dim C = 2 Hk dk + Hv dk */
            const int64_t dk = p->ssm_state, hv = p->ssm_heads,
                          conv = 2 * (int64_t)p->ssm_groups * dk + hv * dk;
            BLK("attn_qkv.weight", dim, conv, SK_MATRIX);
            BLK("attn_gate.weight", dim, hv * dk, SK_MATRIX);
            snprintf(nm, sizeof nm, "blk.%d.ssm_conv1d.weight", l);
            synth_add(tab, nm, p->ssm_conv, conv, SK_CONV, KVI_TYPE_F32);
            snprintf(nm, sizeof nm, "blk.%d.ssm_dt.bias", l);
            synth_add(tab, nm, hv, 1, SK_DT_BIAS, KVI_TYPE_F32);
            snprintf(nm, sizeof nm, "blk.%d.ssm_a", l);
            synth_add(tab, nm, hv, 1, SK_SSM_A, KVI_TYPE_F32);
            if (!strcmp(p->arch, "qwen3next")) { /* beta and alpha fused */
                BLK("ssm_ba.weight", dim, 2 * hv, SK_MATRIX);
            } else {
                BLK("ssm_beta.weight", dim, hv, SK_MATRIX);
                BLK("ssm_alpha.weight", dim, hv, SK_MATRIX);
            }
            BLK("ssm_norm.weight", dk, 1, SK_NORM);
            BLK("ssm_out.weight", hv * dk, dim, SK_MATRIX);
        } else if (ma->flags & ARCH_FUSED_QKV) {
            snprintf(nm, sizeof nm, "blk.%d.attn_qkv.weight", l);
            synth_add(tab, nm, dim, qd + 2 * kvd, SK_MATRIX, synth_role_type(p, "attn_qkv", l, false));
        } else {
            snprintf(nm, sizeof nm, "blk.%d.attn_q.weight", l); /* hybrids: per head [q | gate] */
            synth_add(tab, nm, dim, (sa->flags & SA_HYBRID) ? 2 * qd : qd, SK_MATRIX,
                      synth_role_type(p, "attn_q", l, false));
            if (sa->flags & (SA_QKV_BIAS | SA_GPTOSS)) BLK("attn_q.bias", qd, 1, SK_BIAS);
            snprintf(nm, sizeof nm, "blk.%d.attn_k.weight", l);
            synth_add(tab, nm, dim, kvd, SK_MATRIX, synth_role_type(p, "attn_k", l, false));
            if (sa->flags & (SA_QKV_BIAS | SA_GPTOSS)) BLK("attn_k.bias", kvd, 1, SK_BIAS);
            snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
            synth_add(tab, nm, dim, kvd, SK_MATRIX, synth_role_type(p, "attn_v", l, false));
            if (sa->flags & (SA_QKV_BIAS | SA_GPTOSS)) BLK("attn_v.bias", kvd, 1, SK_BIAS);
        }
        if (ma->qk_norm != MODEL_QK_NONE && !rec) {
            const bool head = ma->qk_norm == MODEL_QK_HEAD;
            BLK("attn_q_norm.weight", head ? hd : qd, 1, SK_NORM);
            BLK("attn_k_norm.weight", head ? hd : kvd, 1, SK_NORM);
        }
        if (!rec) {
            snprintf(nm, sizeof nm, "blk.%d.attn_output.weight", l);
            synth_add(tab, nm, qd, dim, SK_MATRIX, synth_role_type(p, "attn_output", l, false));
        }
        if (sa->flags & SA_GPTOSS) {
            BLK("attn_output.bias", dim, 1, SK_BIAS);
            BLK("attn_sinks.weight", p->n_heads, 1, SK_SINK);
        }
        if (post || (ma->flags & ARCH_FFN_NORM_POST_ATTN)) BLK("post_attention_norm.weight", dim, 1, SK_NORM);
        if (pre && !(ma->flags & (ARCH_FFN_NORM_POST_ATTN | ARCH_PARALLEL)))
            BLK("ffn_norm.weight", dim, 1, SK_NORM);
        if (sa->flags & SA_MOE_T3) synth_t3_block(p, l, synth_t3_add, &t3);
        if (p->n_expert > 0 && l >= lead) {
            const int64_t E = p->n_expert, F = p->expert_ffn;
            const bool bias = (sa->flags & SA_GPTOSS) != 0;
#define EXP(role, ne0, ne1, kind, want)                      \
    do {                                                     \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, role);       \
        synth_add_experts(tab, nm, ne0, ne1, E, kind, want); \
    } while (0)
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate_inp.weight", l);
            synth_add(tab, nm, dim, E, SK_ROUTER, KVI_TYPE_F32);
            if (bias) BLK("ffn_gate_inp.bias", E, 1, SK_BIAS);
            EXP("ffn_gate_exps.weight", dim, F, SK_MATRIX, synth_role_type(p, "ffn_gate", l, false));
            if (bias) EXP("ffn_gate_exps.bias", F, 1, SK_BIAS, KVI_TYPE_F32);
            EXP("ffn_up_exps.weight", dim, F, SK_MATRIX, synth_role_type(p, "ffn_up", l, false));
            if (bias) EXP("ffn_up_exps.bias", F, 1, SK_BIAS, KVI_TYPE_F32);
            EXP("ffn_down_exps.weight", F, dim, SK_MATRIX, synth_role_type(p, "ffn_down", l, false));
            if (bias) EXP("ffn_down_exps.bias", dim, 1, SK_BIAS, KVI_TYPE_F32);
#undef EXP
            if (sa->flags & SA_HYBRID) { /* Qwen3-Next: a shared expert behind a sigmoid gate */
                snprintf(nm, sizeof nm, "blk.%d.ffn_gate_inp_shexp.weight", l);
                synth_add(tab, nm, dim, 1, SK_BIAS, KVI_TYPE_F32);
                BLK("ffn_gate_shexp.weight", dim, p->shared_ffn, SK_MATRIX);
                BLK("ffn_up_shexp.weight", dim, p->shared_ffn, SK_MATRIX);
                BLK("ffn_down_shexp.weight", p->shared_ffn, dim, SK_MATRIX);
            }
            if (post) BLK("post_ffw_norm.weight", dim, 1, SK_NORM);
            continue;
        }
        if (ma->flags & ARCH_FUSED_GATE_UP) {
            snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
            synth_add(tab, nm, dim, 2 * ffn, SK_MATRIX, synth_role_type(p, "ffn_up", l, false));
        } else {
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate.weight", l);
            if (!(ma->flags & ARCH_FFN_NO_GATE))
                synth_add(tab, nm, dim, ffn, SK_MATRIX, synth_role_type(p, "ffn_gate", l, false));
            snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
            synth_add(tab, nm, dim, ffn, SK_MATRIX, synth_role_type(p, "ffn_up", l, false));
        }
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        synth_add(tab, nm, ffn, dim, SK_MATRIX, synth_role_type(p, "ffn_down", l, false));
        if (post) BLK("post_ffw_norm.weight", dim, 1, SK_NORM);
#undef BLK
    }
    synth_add(tab, "output_norm.weight", dim, 1, SK_NORM, p->type);
    /* llama.cpp's Q4_0 file type and the _M mixes keep the output matrix in Q6_K
     * (its quantiser's default, and what ../shared/golden/quant/qtest-q4_0.gguf
     * holds), the embedding when tied: do the same, so benchmarks against
     * llama.cpp's files compare like with like. */
    if (!tied)
        synth_add(tab, "output.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "output", -1, true));
}

/* LongRoPE factor i of half = n_rot / 2: the short set rises from 1 to 1.25, the
 * long set from 1 to n_ctx / rope_orig_ctx (geometrically): low-frequency pairs
 * stretched the most, as LongRoPE's searched factors are. */
static float synth_rope_factor(const kvi_synth_params *p, synth_kind kind, int64_t i, int64_t half)
{
    const double t = half > 1 ? (double)i / (double)(half - 1) : 0.0;
    if (kind == SK_ROPE_SHORT) return (float)(1.0 + 0.25 * t * t);
    const double ratio = (double)p->n_ctx / (double)p->rope_orig_ctx;
    return (float)pow(ratio > 1.0 ? ratio : 1.0, t);
}

/* ---- the generated SentencePiece-style vocabulary ---- */

#define SYNTH_N_SPECIAL 3  /* <unk> <s> </s> */
#define SYNTH_N_BYTES 256  /* <0x00> .. <0xFF> */
#define SYNTH_PIECE_MAX 24 /* bytes per generated piece, NUL included */

/* The k-th synthetic piece: "▁" alone, then for L = 1, 2, ...: every word of L
 * letters with the "▁" word-start prefix, then without it, letters in English
 * frequency order. All pieces differ, and every prefix of a piece of length L
 * (with or without "▁") occurs earlier, so SentencePiece merges can build it. */
static void synth_piece(uint64_t k, char *out)
{
    static const char letters[] = "etaoinshrdlcumwfgypbvkjxqz";
    if (k == 0) {
        memcpy(out, "\xE2\x96\x81", 4);
        return;
    }
    k -= 1;
    uint64_t group = 26; /* 26^L */
    int len = 1;
    while (k >= 2 * group && len < 12) {
        k -= 2 * group;
        group *= 26;
        len++;
    }
    char *o = out;
    if (k < group) { /* prefixed half */
        memcpy(o, "\xE2\x96\x81", 3);
        o += 3;
    } else {
        k -= group;
    }
    for (int i = len - 1; i >= 0; i--) {
        o[i] = letters[k % 26];
        k /= 26;
    }
    o[len] = 0;
}

static int synth_vocab_generated(gguf_writer *w, int n_vocab, kvi_error *err)
{
    const size_t n = (size_t)n_vocab;
    char *text = malloc(n * SYNTH_PIECE_MAX);
    const char **tok = malloc(n * sizeof *tok);
    float *score = malloc(n * sizeof *score);
    int32_t *ttype = malloc(n * sizeof *ttype);
    int rc = KVI_OK;
    if (!text || !tok || !score || !ttype) {
        rc = err_set(err, KVI_E_NOMEM, "synth: no memory for a vocabulary of %d tokens", n_vocab);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char *s = text + i * SYNTH_PIECE_MAX;
        tok[i] = s;
        score[i] = 0.0f;
        if (i == 0) {
            strcpy(s, "<unk>");
            ttype[i] = 2;
        } else if (i == 1) {
            strcpy(s, "<s>");
            ttype[i] = 3;
        } else if (i == 2) {
            strcpy(s, "</s>");
            ttype[i] = 3;
        } else if (i < SYNTH_N_SPECIAL + SYNTH_N_BYTES) {
            snprintf(s, SYNTH_PIECE_MAX, "<0x%02X>", (unsigned)(i - SYNTH_N_SPECIAL));
            ttype[i] = 6;
        } else {
            uint64_t k = i - SYNTH_N_SPECIAL - SYNTH_N_BYTES;
            synth_piece(k, s);
            score[i] = -(float)k; /* earlier pieces merge first */
            ttype[i] = 1;
        }
    }
    if (gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") < 0 ||
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, n) < 0 ||
        gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", score, n) < 0 ||
        gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", ttype, n) < 0 ||
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1) < 0 ||
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2) < 0 ||
        gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0) < 0 ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true) < 0 ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false) < 0)
        rc = err_set(err, KVI_E_NOMEM, "synth: could not add the tokenizer metadata");
done:
    free(text);
    free(tok);
    free(score);
    free(ttype);
    return rc;
}

/* The token count of src's vocabulary (validated). */
static int synth_vocab_count(const gguf_ctx *src, const char *path, int *n_vocab, kvi_error *err)
{
    gguf_vtype et;
    uint64_t n = 0;
    int rc = gguf_get_arr_info(src, "tokenizer.ggml.tokens", &et, &n, err);
    if (rc == -1) return err_set(err, KVI_E_FORMAT, "synth: %s has no tokenizer.ggml.tokens", path);
    if (rc < 0) return rc;
    if (et != GGUF_T_STRING || n == 0 || n > (1u << 24))
        return err_set(err, KVI_E_FORMAT,
                       "synth: %s: tokenizer.ggml.tokens is not a string array of 1..2^24 entries", path);
    *n_vocab = (int)n;
    return KVI_OK;
}

/* Copies every tokenizer.* key of src. */
static int synth_vocab_copy(gguf_writer *w, const gguf_ctx *src, const char *path, kvi_error *err)
{
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *key = gguf_kv_key(src, i);
        if (!key || strncmp(key, "tokenizer.", 10) != 0) continue;
        int rc = gguf_writer_copy_kv(w, src, key);
        if (rc < 0) return err_set(err, rc, "synth: could not copy %s from %s", key, path);
    }
    return KVI_OK;
}

/* ---- validation ---- */

/* p resolved (kvi_synth_resolve). */
static int synth_check(const kvi_synth_params *p, kvi_error *err)
{
#define NEED(cond, ...) \
    if (!(cond)) return err_set(err, KVI_E_INVALID, __VA_ARGS__)
    const bool swa = (synth_arch_find(p->arch)->flags & SA_SWA) != 0;
    NEED(p->dim > 0 && p->dim <= 65536, "synth: dim %d out of range 1..65536", p->dim);
    NEED(p->ffn_dim > 0 && p->ffn_dim <= 262144, "synth: ffn %d out of range 1..262144", p->ffn_dim);
    NEED(p->n_layers > 0 && p->n_layers <= 1024, "synth: layers %d out of range 1..1024", p->n_layers);
    NEED(p->n_heads > 0 && p->n_heads <= p->dim, "synth: heads %d out of range 1..dim", p->n_heads);
    NEED(p->head_dim > 0 && p->head_dim <= 4096, "synth: head dim %d out of range 1..4096", p->head_dim);
    NEED(p->head_dim != p->dim / p->n_heads || p->dim % p->n_heads == 0,
         "synth: dim %d is not a multiple of heads %d", p->dim, p->n_heads);
    NEED(p->head_dim % 2 == 0, "synth: head dim %d must be even (RoPE rotates pairs)", p->head_dim);
    NEED(p->n_rot > 0 && p->n_rot <= p->head_dim && p->n_rot % 2 == 0,
         "synth: rotary dims %d must be even and within the head dim %d", p->n_rot, p->head_dim);
    NEED(p->n_kv_heads > 0 && p->n_kv_heads <= p->n_heads && p->n_heads % p->n_kv_heads == 0,
         "synth: kv-heads %d must divide heads %d", p->n_kv_heads, p->n_heads);
    NEED(p->n_ctx > 0 && p->n_ctx <= (1 << 24), "synth: ctx %d out of range 1..16777216", p->n_ctx);
    NEED(p->window >= 0 && p->window <= (1 << 24), "synth: window %d out of range 1..16777216", p->window);
    NEED(!swa || p->window > 0, "synth: %s needs a window of at least 1", p->arch);
    NEED(p->window_pattern >= 0 && p->window_pattern <= 1024, "synth: window pattern %d out of range 0..1024",
         p->window_pattern);
    NEED(p->rope_base > 0 && isfinite(p->rope_base), "synth: RoPE base %g must be positive", p->rope_base);
    NEED(p->rms_eps > 0 && isfinite(p->rms_eps), "synth: rms epsilon %g must be positive", p->rms_eps);
    NEED(p->rope_linear >= 0 && isfinite(p->rope_linear), "synth: RoPE scaling %g invalid", p->rope_linear);
    NEED(p->rope_base_local >= 0 && isfinite(p->rope_base_local), "synth: local RoPE base %g invalid",
         p->rope_base_local);
    NEED(p->rope_orig_ctx == 0 ||
             ((!strcmp(p->arch, "phi3") || !strcmp(p->arch, "gpt-oss") || !strcmp(p->arch, "llama4") ||
               (synth_arch_find(p->arch)->flags & SA_YARN)) &&
              p->rope_orig_ctx > 0 && p->rope_orig_ctx < p->n_ctx),
         "synth: LongRoPE / YaRN / Llama 3 factors (original context %d) need arch phi3 / gpt-oss / "
         "mistral3 / llama4 and an original context below ctx %d",
         p->rope_orig_ctx, p->n_ctx);
    NEED(p->n_expert >= 0 && p->n_expert <= 1024, "synth: experts %d out of range 0..1024", p->n_expert);
    NEED(p->n_expert == 0 || (p->n_expert_used >= 1 && p->n_expert_used <= p->n_expert),
         "synth: experts used %d must be in 1..%d", p->n_expert_used, p->n_expert);
    NEED(p->n_expert == 0 || (p->expert_ffn > 0 && p->expert_ffn <= 262144),
         "synth: expert ffn %d out of range", p->expert_ffn);
    NEED(p->n_expert > 0 || !(synth_arch_find(p->arch)->flags & SA_MOE),
         "synth: %s needs experts (--experts N)", p->arch);
    if (synth_arch_find(p->arch)->flags & SA_HYBRID) {
        NEED(p->ssm_groups > 0 && p->ssm_groups <= 1024 && p->ssm_heads > 0 && p->ssm_heads <= 1024 &&
                 p->ssm_heads % p->ssm_groups == 0,
             "synth: linear attention value heads %d must be a multiple of key heads %d (1..1024)",
             p->ssm_heads, p->ssm_groups);
        NEED(p->ssm_state > 0 && p->ssm_state <= 1024,
             "synth: linear attention head dim %d out of range 1..1024", p->ssm_state);
        NEED(p->ssm_conv >= 2 && p->ssm_conv <= 64, "synth: conv kernel %d out of range 2..64", p->ssm_conv);
        NEED(p->attn_interval >= 2 && p->attn_interval <= p->n_layers,
             "synth: attention interval %d out of range 2..layers %d", p->attn_interval, p->n_layers);
        NEED(p->n_expert == 0 || (p->shared_ffn > 0 && p->shared_ffn <= 262144),
             "synth: shared expert ffn %d out of range", p->shared_ffn);
        NEED(!strcmp(p->arch, "qwen35") ? p->n_expert == 0 : p->n_expert > 0,
             "synth: qwen35 is dense, qwen3next needs experts");
    }
    if (!p->vocab_from)
        NEED(p->n_vocab > SYNTH_N_SPECIAL + SYNTH_N_BYTES && p->n_vocab <= (1 << 22),
             "synth: vocab %d out of range %d..4194304 (3 special + 256 byte tokens + pieces)", p->n_vocab,
             SYNTH_N_SPECIAL + SYNTH_N_BYTES + 1);
    if (synth_hooks_of(synth_arch_find(p->arch))) {
        const int rc = synth_hooks_of(synth_arch_find(p->arch))->check(p, err);
        if (rc) return rc;
    }
    if (synth_file_type(p->type, p->mix_m) < 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "synth: type %s%s is not supported for weights (use f32, f16, "
                       "bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, "
                       "mxfp4, q4_k_m or q5_k_m)",
                       kvi_type_name(p->type) ? kvi_type_name(p->type) : "(unknown)",
                       p->mix_m ? " (_m)" : "");
#undef NEED
    return KVI_OK;
}

/* ---- writing ---- */

/* "<arch>.<key>" */
static const char *synth_key(char *buf, size_t cap, const char *arch, const char *key)
{
    snprintf(buf, cap, "%s.%s", arch, key);
    return buf;
}

/* The general and architecture keys of the resolved p, as llama.cpp's converter
 * writes them for p->arch (see the file comment). */
static int synth_set_metadata(gguf_writer *w, const kvi_synth_params *p, const synth_arch *a, int n_vocab)
{
    const char *ar = p->arch;
    char k[128];
    int bad = 0;
#define U32(key, v) (bad |= gguf_writer_set_u32(w, synth_key(k, sizeof k, ar, key), (uint32_t)(v)) < 0)
#define F32(key, v) (bad |= gguf_writer_set_f32(w, synth_key(k, sizeof k, ar, key), (float)(v)) < 0)
    bad |= gguf_writer_set_str(w, "general.architecture", ar) < 0;
    bad |= gguf_writer_set_str(w, "general.name", p->name && p->name[0] ? p->name : "kvinfer-synth") < 0;
    bad |= gguf_writer_set_u32(w, "general.file_type", (uint32_t)synth_file_type(p->type, p->mix_m)) < 0;
    /* llama.cpp's quantiser writes the version for every file type, f16/bf16 included */
    if (p->type != KVI_TYPE_F32) bad |= gguf_writer_set_u32(w, "general.quantization_version", 2) < 0;
    U32("context_length", p->n_ctx);
    U32("embedding_length", p->dim);
    U32("feed_forward_length", p->n_expert > 0 && !(a->flags & SA_EXP_FFN_KEY) ? p->expert_ffn : p->ffn_dim);
    U32("block_count", p->n_layers + synth_t3_nextn(p));
    U32("attention.head_count", p->n_heads);
    U32("attention.head_count_kv", p->n_kv_heads);
    if (((a->flags & SA_KEY_LEN) || p->head_dim != p->dim / p->n_heads) && !(a->flags & SA_KIMI)) {
        U32("attention.key_length", p->head_dim);
        U32("attention.value_length", p->head_dim);
    }
    if ((a->flags & SA_ROPE_DIMS) || p->n_rot != p->head_dim) U32("rope.dimension_count", p->n_rot);
    if (!(a->flags & (SA_NO_ROPE_BASE | SA_KIMI))) F32("rope.freq_base", p->rope_base);
    F32((a->flags & SA_LAYER_NORM) ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon",
        p->rms_eps);
    if (a->flags & SA_VOCAB_SIZE) U32("vocab_size", n_vocab);
    if (a->flags & SA_SWA) {
        U32("attention.sliding_window", p->window);
        if (p->window_pattern != a->pattern) U32("attention.sliding_window_pattern", p->window_pattern);
    }
    if (a->flags & SA_GEMMA2) {
        F32("attn_logit_softcapping", 50.0f); /* Gemma 2's config values */
        F32("final_logit_softcapping", 30.0f);
    }
    if (!strcmp(ar, "gemma3") && p->rope_base_local != 10000.0f)
        F32("rope.freq_base_swa", p->rope_base_local);
    if (p->rope_linear > 0.0f && p->rope_linear != 1.0f && !(a->flags & SA_YARN)) {
        bad |= gguf_writer_set_str(w, synth_key(k, sizeof k, ar, "rope.scaling.type"), "linear") < 0;
        F32("rope.scaling.factor", p->rope_linear);
    }
    if (a->flags & SA_GRANITE) {
        /* Granite 3.x's multipliers (embedding 12, residual 0.22, logits 8) and an
         * attention multiplier of 1 / head_dim */
        F32("embedding_scale", 12.0f);
        F32("residual_scale", 0.22f);
        F32("attention.scale", 1.0f / (float)p->head_dim);
        F32("logit_scale", 8.0f);
    }
    if (a->flags & SA_PHI3) U32("attention.sliding_window", p->window);
    if (p->n_expert > 0) {
        U32("expert_count", p->n_expert);
        U32("expert_used_count", p->n_expert_used);
        if (a->flags & SA_EXP_FFN_KEY) U32("expert_feed_forward_length", p->expert_ffn);
    }
    if (a->flags & SA_HYBRID) {
        U32("ssm.conv_kernel", p->ssm_conv);
        U32("ssm.state_size", p->ssm_state);
        U32("ssm.group_count", p->ssm_groups);
        U32("ssm.time_step_rank", p->ssm_heads);
        U32("ssm.inner_size", p->ssm_heads * p->ssm_state);
        U32("full_attention_interval", p->attn_interval);
        if (p->n_expert > 0) U32("expert_shared_feed_forward_length", p->shared_ffn);
        if (!strncmp(ar, "qwen35",
                     6)) { /* M-RoPE sections over the rotated pairs, as Qwen3.5's [11, 11, 10, 0] */
            const int half = p->n_rot / 2, s0 = (half + 2) / 3, s1 = (half + 1) / 3;
            const int32_t sec[4] = { s0, s1, half - s0 - s1, 0 };
            bad |=
                gguf_writer_set_arr_i32(w, synth_key(k, sizeof k, ar, "rope.dimension_sections"), sec, 4) < 0;
        }
    }
    if ((a->flags & SA_MOE_T3) && synth_t3_keys(w, p) < 0) bad = 1;
    if ((a->flags & SA_GPTOSS) && p->rope_orig_ctx > 0) { /* YaRN: gpt-oss-20b's factor 32 over 4096 */
        bad |= gguf_writer_set_str(w, synth_key(k, sizeof k, ar, "rope.scaling.type"), "yarn") < 0;
        F32("rope.scaling.factor", (double)p->n_ctx / p->rope_orig_ctx);
        U32("rope.scaling.original_context_length", p->rope_orig_ctx);
    }
    if (p->rope_orig_ctx > 0 && (a->flags & SA_PHI3)) {
        /* the converter's LongRoPE attention factor:
         * sqrt(1 + ln(ctx / original ctx) / ln(original ctx)) */
        const double r = (double)p->n_ctx / p->rope_orig_ctx;
        F32("rope.scaling.attn_factor", sqrt(1.0 + log(r) / log((double)p->rope_orig_ctx)));
        U32("rope.scaling.original_context_length", p->rope_orig_ctx);
    }
    if ((a->flags & SA_DENSE_T3) && synth_dt3_metadata(w, p) != 0) bad = 1;
#undef U32
#undef F32
    if (synth_hooks_of(a)) bad |= synth_hooks_of(a)->metadata(w, p) < 0;
    return bad ? KVI_E_NOMEM : KVI_OK;
}

/* One kvi_synth_write in progress: what it holds and must free. */
typedef struct synth_job {
    kvi_synth_params p; /* resolved (kvi_synth_resolve) */
    const synth_arch *sa;
    const model_arch *ma; /* the loader's tensor flags for p.arch */
    gguf_ctx *src;        /* p.vocab_from, or NULL */
    synth_json_vocab *js; /* p.vocab_from when it is a tokenizer.json, or NULL */
    gguf_writer *w;
    int n_vocab;
    synth_table tab;    /* [synth_table_cap] the tensor table */
    size_t max_bytes;   /* the largest tensor in its stored type */
    size_t total_bytes; /* every tensor's bytes */
    int64_t max_row;    /* the longest row (ne0) */
    uint8_t *qbuf;      /* [max_bytes] one tensor in its stored type */
    float *row;         /* [max_row] one row of f32 weights */
} synth_job;

static void synth_job_free(synth_job *j)
{
    free(j->qbuf);
    free(j->row);
    free(j->tab.t);
    gguf_writer_free(j->w);
    if (j->src) gguf_close(j->src);
    synth_vocab_json_free(j->js);
}

/* The vocabulary's source and size, then the metadata in llama.cpp's order:
 * general, arch, then tokenizer. */
static int synth_metadata(synth_job *j, kvi_error *err)
{
    const kvi_synth_params *p = &j->p;
    int rc;
    const size_t vl = p->vocab_from ? strlen(p->vocab_from) : 0;
    const bool json = vl >= 5 && !strcmp(p->vocab_from + vl - 5, ".json");
    if (json) {
        if (!(j->js = synth_vocab_json_load(p->vocab_from, err))) return err->code ? err->code : KVI_E_FORMAT;
        j->n_vocab = synth_vocab_json_n(j->js);
    } else if (p->vocab_from) {
        rc = gguf_open(p->vocab_from, true, &j->src, err);
        if (rc < 0) return rc;
        rc = synth_vocab_count(j->src, p->vocab_from, &j->n_vocab, err);
        if (rc < 0) return rc;
    }
    rc = synth_set_metadata(j->w, p, j->sa, j->n_vocab);
    if (rc < 0) return err_set(err, rc, "synth: could not add the model metadata");
    return j->js           ? synth_vocab_json_write(j->w, j->js, err)
           : p->vocab_from ? synth_vocab_copy(j->w, j->src, p->vocab_from, err)
                           : synth_vocab_generated(j->w, j->n_vocab, err);
}

/* The tensor table (with notices of type fallbacks), each tensor declared to
 * the writer, and the buffers for the largest one. */
static int synth_tensors(synth_job *j, kvi_error *err)
{
    const kvi_synth_params *p = &j->p;
    j->tab.t = calloc(synth_table_cap(p, j->sa), sizeof *j->tab.t);
    if (!j->tab.t) return err_set(err, KVI_E_NOMEM, "synth: no memory for the tensor table");
    synth_build_table(p, j->sa, j->ma, j->n_vocab, &j->tab);
    synth_note_fallbacks(p, j->tab.t, j->tab.n);
    for (size_t i = 0; i < j->tab.n; i++) {
        const synth_tensor *t = &j->tab.t[i];
        size_t b = quant_row_bytes(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
        if (b == 0)
            return err_set(err, KVI_E_UNSUPPORTED, "synth: %s: no row size for type %s", t->name,
                           kvi_type_name(t->type));
        if (b > j->max_bytes) j->max_bytes = b;
        if (t->ne[0] > j->max_row) j->max_row = t->ne[0];
        j->total_bytes += b;
        int rc = gguf_writer_add_tensor(j->w, t->name, t->type, t->n_dims, t->ne);
        if (rc < 0) return err_set(err, rc, "synth: could not declare tensor %s", t->name);
    }
    j->qbuf = malloc(j->max_bytes);
    j->row = malloc((size_t)j->max_row * sizeof *j->row);
    if (!j->qbuf || !j->row)
        return err_set(err, KVI_E_NOMEM, "synth: no memory for a tensor of %zu bytes", j->max_bytes);
    return KVI_OK;
}

/* Row r of tensor t's f32 values into j->row, from its generator g. */
static void synth_row(synth_job *j, const synth_tensor *t, synth_normal *g)
{
    if (t->kind == SK_ROPE_LONG || t->kind == SK_ROPE_SHORT) {
        for (int64_t i = 0; i < t->ne[0]; i++) j->row[i] = synth_rope_factor(&j->p, t->kind, i, t->ne[0]);
        return;
    }
    if (t->kind == SK_ROPE_FREQS) {
        for (int64_t i = 0; i < t->ne[0]; i++) j->row[i] = synth_dt3_rope_freq(&j->p, i);
        return;
    }
    if (t->kind == SK_ROPE_LLAMA3) {
        for (int64_t i = 0; i < t->ne[0]; i++)
            j->row[i] = synth_llama3_factor(j->p.rope_base, 2 * t->ne[0], i, 16.0, j->p.rope_orig_ctx);
        return;
    }
    if (t->kind == SK_ONE || t->kind == SK_PROP_ROPE) { /* gemma4: fixed values */
        for (int64_t i = 0; i < t->ne[0]; i++)
            j->row[i] = t->kind == SK_ONE || i < t->ne[0] / 4 ? 1.0f : 1e30f;
        return;
    }
    if (t->kind == SK_SSM_A) {
        synth_normal_fill(g, j->row, t->ne[0], -1.5f, 0.5f);
        for (int64_t i = 0; i < t->ne[0]; i++) j->row[i] = -expf(j->row[i]);
        return;
    }
    const float mean = t->kind == SK_NORM || t->kind == SK_SINK || t->kind == SK_DT_BIAS ? 1.0f : 0.0f;
    const float std = t->kind == SK_CONV ? 0.3f : t->kind == SK_DT_BIAS ? 0.3f : 0.02f;
    synth_normal_fill(g, j->row, t->ne[0], mean, std);
}

/* Every tensor's data after the header, generated and quantised one tensor at a
 * time; progress reported after each. */
static int synth_data(synth_job *j, FILE *f, kvi_error *err)
{
    const kvi_synth_params *p = &j->p;
    size_t done_bytes = 0;
    for (size_t i = 0; i < j->tab.n; i++) {
        const synth_tensor *t = &j->tab.t[i];
        const size_t rb = quant_row_bytes(t->type, t->ne[0]);
        synth_normal g;
        synth_normal_init(&g, p->seed, t->name);
        for (int64_t r = 0; r < t->ne[1] * t->ne[2]; r++) {
            synth_row(j, t, &g);
            int rc = quant_quantize_row(t->type, j->row, j->qbuf + (size_t)r * rb, t->ne[0]);
            if (rc < 0)
                return err_set(err, rc, "synth: %s: quantisation to %s failed", t->name,
                               kvi_type_name(t->type));
        }
        int rc = gguf_writer_write_tensor(j->w, f, (int64_t)i, j->qbuf, err);
        if (rc < 0) return rc;
        done_bytes += rb * (size_t)(t->ne[1] * t->ne[2]);
        if (p->progress) p->progress(p->user, i + 1, j->tab.n, done_bytes, j->total_bytes);
    }
    return KVI_OK;
}

int kvi_synth_write(const kvi_synth_params *p, const char *path, kvi_error *err)
{
    if (!p || !path || !path[0]) return err_set(err, KVI_E_INVALID, "synth: no parameters or no output path");
    if (p->arch && !strcmp(p->arch, "bert")) return synth_bert_write(p, path, err);
    synth_job j = { .n_vocab = p->n_vocab };
    if (kvi_synth_resolve(p, &j.p) != 0) {
        char list[128];
        model_arch_list(list, sizeof list);
        return err_set(err, KVI_E_INVALID, "synth: unknown architecture '%.32s' (%s)", p->arch, list);
    }
    j.sa = synth_arch_find(j.p.arch);
    j.ma = model_arch_find(j.p.arch);
    if (!j.ma) return err_set(err, KVI_E_INVALID, "synth: the loader has no architecture %s", j.p.arch);
    int rc = synth_check(&j.p, err);
    if (rc < 0) return rc;

    FILE *f = NULL;
    bool created = false; /* path is ours to remove on failure */
    j.w = gguf_writer_create();
    if (!j.w) return err_set(err, KVI_E_NOMEM, "synth: no memory for the GGUF writer");
    rc = synth_metadata(&j, err);
    if (rc == 0) rc = synth_tensors(&j, err);
    if (rc == 0) {
        f = fopen(path, "wb");
        if (!f) rc = err_set(err, KVI_E_IO, "synth: cannot create %s", path);
    }
    if (rc == 0) {
        created = true;
        rc = gguf_writer_write_header(j.w, f, err);
    }
    if (rc == 0) rc = synth_data(&j, f, err);
    if (rc == 0) {
        const int closed = fclose(f);
        f = NULL;
        if (closed != 0) rc = err_set(err, KVI_E_IO, "synth: writing %s failed (disk full?)", path);
    }
    if (rc != 0) {
        if (f) fclose(f);
        if (created) remove(path);
    }
    synth_job_free(&j);
    return rc;
}
