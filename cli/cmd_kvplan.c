/*
 * cmd_kvplan.c — `kvinfer kv-plan`: the KV cache's size, worked out before any
 * memory is spent. For a model shape (a preset, or a file's metadata read
 * without its weights), a context length, a KV type and a memory size:
 *
 *   per_layer          = K bytes + V bytes of one token's vectors in one layer
 *   bytes_per_token    = n_layers x per_layer            (every layer's, while the
 *                        sequence is shorter than the window)
 *   per kind:            global = n_global x per_layer, window = n_window x per_layer
 *   bytes_per_sequence = global x ctx + window x min(ctx, W)
 *   full               = bytes_per_token x ctx            (every layer global)
 *   saving             = full - bytes_per_sequence        (the sliding window's)
 *   max_sequences      = floor(mem / bytes_per_sequence)
 *   max_context        = the largest c with global x c + window x min(c, W) <= mem
 *                        (one sequence; unbounded when every layer has a window)
 *
 * Layer kinds: sliding-window layers (Gemma 2/3) need a token's K and V only while
 * it is within the last W positions, so they hold at most W positions whatever
 * the context. A model file's kinds come from kvi_model_info_from_file (the
 * loader's own reading of the window keys). kvinfer's paged cache keeps a window
 * layer's blocks for W + 64 positions (rewinds) plus the block being written, so
 * it holds up to about W + 96 positions there: not counted (an ideal cache).
 *
 * Per layer, each token stores a K vector and a V vector of kv_dim = n_kv_heads x
 * head_dim elements. Element types: f32 4 bytes, f16/bf16 2 bytes; q8_0 / q4_0
 * are whole 32-element blocks over each vector (34 / 18 bytes a block, the last
 * block padded when kv_dim is not a multiple of 32). q4 (the KIVI scheme: keys
 * quantised per channel over groups of tokens, values q4_0) is estimated as:
 * V = q4_0; K = 4 bits per element plus an f16 scale and an f16 minimum per
 * channel per group of KVPLAN_Q4_GROUP tokens, amortised over the group
 * (kv_dim x (4 + 32 / 32) / 8 bytes for groups of 32). The newest, incomplete
 * group that KIVI keeps in f16 (at most a group x kv_dim x 2 bytes per layer and
 * sequence) is not counted. The paged cache rounds each sequence up to whole
 * blocks of 16 tokens; that rounding is not counted either.
 *
 * Latent attention (DeepSeek-V2/V3's MLA): a token stores per layer one key row of
 * kv_lora_rank + RoPE dims and no value (the value is the row's first
 * kv_lora_rank elements), so per_layer = K bytes of that row alone. Beside it the
 * plan shows what per-head keys and values would take (n_heads x (key head +
 * value head) elements, the K type for both) and the saving. q4 (KIVI) keys
 * cannot hold values, so a latent plan refuses them as the engine does.
 *
 * Hybrid models (Qwen3.5, Qwen3-Next): n_recurrent gated DeltaNet layers keep no K/V
 * but a fixed state per sequence, f32 whatever --kv-type:
 *   state = n_recurrent x ((K - 1) x (2 Hk dk + Hv dk) + Hv dk dk) x 4 bytes
 * (conv taps K, key heads Hk, value heads Hv of dk dims); per_layer counts the
 * other layers only, bytes_per_sequence adds the state, max_context is
 * (mem - state) / bytes_per_token; beside it, what the same depth would take
 * with attention in every layer.
 */
#include "cli/cli_opts.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KVPLAN_Q4_GROUP 32

/*
 * Shapes of well-known models, from their Hugging Face config.json files
 * (num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size /
 * num_attention_heads, max_position_embeddings):
 *  - meta-llama/Llama-2-7b-hf: 32 layers, 32 heads, 32 KV heads, 4096 / 32 = 128, 4096
 *  - meta-llama/Llama-2-70b-hf: 80 layers, 64 heads, 8 KV heads, 8192 / 64 = 128, 4096
 *  - meta-llama/Meta-Llama-3-8B: 32 layers, 32 heads, 8 KV heads, 4096 / 32 = 128, 8192
 *  - meta-llama/Meta-Llama-3-70B: 80 layers, 64 heads, 8 KV heads, 8192 / 64 = 128, 8192
 *  - mistralai/Mistral-7B-v0.1: 32 layers, 32 heads, 8 KV heads, 4096 / 32 = 128, 32768
 *    (sliding window 4096 not modelled: the plan is for a full cache)
 *  - Qwen/Qwen2.5-7B: 28 layers, 28 heads, 4 KV heads, 3584 / 28 = 128, 131072
 *    (32768 in the Instruct config)
 *  - the seed's example "70B, 80 layers, 64 heads, d_k = 128": with grouped-query
 *    attention of 8 KV heads (seed-70b, the Llama-2/3-70B layout) and without
 *    (seed-70b-mha: 64 KV heads).
 *  - Qwen/Qwen3-32B: 64 layers, 64 heads, 8 KV heads, head_dim 128, 40960
 *  - Qwen/Qwen3-0.6B: 28 layers, 16 heads, 8 KV heads, head_dim 128, 40960
 *  - microsoft/Phi-4-mini-instruct: 32 layers, 24 heads, 8 KV heads, 3072 / 24 = 128,
 *    131072 (its sliding_window 262144 is ignored by llama.cpp and kvinfer: global)
 *  - google/gemma-3-27b (text_config): 62 layers, 32 heads, 16 KV heads, head_dim
 *    128, 131072, sliding_window 1024 on 5 of every 6 layers (llama.cpp's pattern 6:
 *    layer l local when l % 6 < 5 -> 52 window layers, 10 global)
 *  - google/gemma-3-1b-pt: 26 layers, 4 heads, 1 KV head, head_dim 256, 32768,
 *    sliding_window 512, pattern 6 (22 window, 4 global)
 *  - google/gemma-2-9b: 42 layers, 16 heads, 8 KV heads, head_dim 256, 8192,
 *    sliding_window 4096 on even layers (21 window, 21 global)
 *  - deepseek-ai/DeepSeek-V3: 61 layers, 128 heads, kv_lora_rank 512, qk_rope_head_dim
 *    64, qk_nope_head_dim 128 (key head 192), v_head_dim 128, 163840
 *  - deepseek-ai/DeepSeek-V2-Lite: 27 layers, 16 heads, the same MLA dims, 163840
 *  - Qwen/Qwen3.5-0.8B: 24 layers (every 4th attention), 8 heads, 2 KV heads of 256,
 *    262144; linear attention 16 key / 16 value heads of 128, conv kernel 4
 *  - meta-llama/Llama-4-Scout-17B-16E: 48 layers, 40 heads, 8 KV heads, head_dim 128,
 *    10485760 (chunked attention of 8192 on 3 of 4 layers: not modelled, the cache
 *    keeps those layers whole as the engine does)
 *  - Qwen/Qwen3-Next-80B-A3B: 48 layers (every 4th attention), 16 heads, 2 KV heads
 *    of 256, 262144; linear attention 16 key / 32 value heads of 128, conv kernel 4
 *  - mistralai/Ministral-3-8B: 34 layers, 32 heads, 8 KV heads of 128, 262144
 *  - HuggingFaceTB/SmolLM3-3B: 36 layers, 16 heads, 4 KV heads, 2048 / 16 = 128, 65536
 *  - ByteDance-Seed/Seed-OSS-36B: 64 layers, 80 heads, 8 KV heads of 128, 524288
 *  - swiss-ai/Apertus-8B: 32 layers, 32 heads, 8 KV heads, 4096 / 32 = 128, 65536
 *  - LGAI-EXAONE/EXAONE-4.0-32B: 64 layers, 40 heads, 8 KV heads of 128, 131072,
 *    sliding_window 4096 on 3 of every 4 layers (48 window, 16 global)
 *  - CohereForAI/c4ai-command-r7b-12-2024: 32 layers, 32 heads, 8 KV heads, 4096 / 32
 *    = 128, 131072, sliding_window 4096 on 3 of every 4 layers (24 window, 8 global)
 *  - Qwen/Qwen3.5-35B-A3B: 40 layers (every 4th attention), 16 heads, 2 KV heads of
 *    256, 262144; linear attention 16 key / 32 value heads of 128, conv kernel 4
 *  - zai-org/GLM-4.5-Air: 46 layers (+ 1 MTP block, no cache), 96 heads, 8 KV heads
 *    of 128, 131072
 *  - MiniMaxAI/MiniMax-M2: 62 layers, 48 heads, 8 KV heads of 128, 196608
 */
typedef struct kvplan_shape {
    const char *name;
    int n_layers, n_heads, n_kv_heads, head_dim, n_ctx_train;
    int window, pattern; /* sliding window W on layers l % pattern < pattern - 1; 0: none */
    int n_window;        /* window layers (from the pattern, or the file) */
    /* latent attention: cache row = mla_kv_rank + the RoPE dims (head_dim, 1 KV
     * head); a per-head cache would hold n_heads x (mla_k_head + mla_v_head). 0: none */
    int mla_kv_rank, mla_k_head, mla_v_head;
    /* hybrid: gated DeltaNet layers with conv taps K, Hk key / Hv value heads of dk
     * dims, every attn_interval-th layer attention; 0: none */
    int ssm_conv, ssm_dk, ssm_hk, ssm_hv, attn_interval;
    int n_recurrent;      /* recurrent layers (from the interval, or the file) */
    uint64_t state_bytes; /* their state per sequence (from the shape, or the file) */
} kvplan_shape;

static const kvplan_shape presets[] = {
    // clang-format off
    { "llama-2-7b", 32, 32, 32, 128, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "llama-2-70b", 80, 64, 8, 128, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "llama-3-8b", 32, 32, 8, 128, 8192, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "llama-3-70b", 80, 64, 8, 128, 8192, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "mistral-7b", 32, 32, 8, 128, 32768, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "qwen2.5-7b", 28, 28, 4, 128, 131072, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "seed-70b", 80, 64, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "seed-70b-mha", 80, 64, 64, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "qwen3-32b", 64, 64, 8, 128, 40960, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "qwen3-0.6b", 28, 16, 8, 128, 40960, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "phi-4-mini", 32, 24, 8, 128, 131072, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "gemma-3-27b", 62, 32, 16, 128, 131072, 1024, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "gemma-3-1b", 26, 4, 1, 256, 32768, 512, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "gemma-2-9b", 42, 16, 8, 256, 8192, 4096, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    /* latent attention: one KV head of kv_lora_rank 512 + RoPE 64 */
    { "deepseek-v3", 61, 128, 1, 576, 163840, 0, 0, 0, 512, 192, 128, 0, 0, 0, 0, 0, 0, 0 },
    { "deepseek-v2-lite", 27, 16, 1, 576, 163840, 0, 0, 0, 512, 192, 128, 0, 0, 0, 0, 0, 0, 0 },
    /* hybrids: gated DeltaNet in 3 of every 4 layers */
    { "qwen3.5-0.8b", 24, 8, 2, 256, 262144, 0, 0, 0, 0, 0, 0, 4, 128, 16, 16, 4, 0, 0 },
    { "qwen3-next-80b", 48, 16, 2, 256, 262144, 0, 0, 0, 0, 0, 0, 4, 128, 16, 32, 4, 0, 0 },
    { "qwen3.5-35b-a3b", 40, 16, 2, 256, 262144, 0, 0, 0, 0, 0, 0, 4, 128, 16, 32, 4, 0, 0 },
    /* mixtures of experts (the experts do not change the cache) */
    { "glm-4.5-air", 46, 96, 8, 128, 131072, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "minimax-m2", 62, 48, 8, 128, 196608, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    /* qwen3.5-0.8b's width and depth with attention in every layer */
    { "qwen3.5-0.8b-all-attention", 24, 8, 2, 256, 262144, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    /* more dense architectures (window 4096 on 3 of every 4 layers: exaone-4-32b, command-r7b) */
    { "ministral-3-8b", 34, 32, 8, 128, 262144, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "smollm3-3b", 36, 16, 4, 128, 65536, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "seed-oss-36b", 64, 80, 8, 128, 524288, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "apertus-8b", 32, 32, 8, 128, 65536, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "exaone-4-32b", 64, 40, 8, 128, 131072, 4096, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    { "command-r7b", 32, 32, 8, 128, 131072, 4096, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    /* Llama 4 Scout: its chunked layers kept whole (kvinfer releases no chunk) */
    { "llama-4-scout", 48, 40, 8, 128, 10485760, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    // clang-format on
};

static const char kvplan_help[] =
    "usage: kvinfer kv-plan (--preset NAME | -m FILE) --ctx N --mem SIZE [--kv-type T] [--json]\n"
    "\n"
    "How large the KV cache is for a model shape, and what fits in a memory size:\n"
    "bytes per token, per sequence at --ctx tokens, how many such sequences fit in\n"
    "--mem, and the longest context one sequence can have there.\n"
    "\n"
    "options:\n"
    "  --preset NAME      llama-2-7b, llama-2-70b, llama-3-8b, llama-3-70b, mistral-7b,\n"
    "                     qwen2.5-7b, qwen3-32b, qwen3-0.6b, phi-4-mini, seed-70b (80 layers,\n"
    "                     64 heads, 8 KV heads, d_k 128), seed-70b-mha (the same without\n"
    "                     GQA: 64 KV heads); with sliding-window layers: gemma-3-27b,\n"
    "                     gemma-3-1b, gemma-2-9b; with latent attention (MLA): deepseek-v3,\n"
    "                     deepseek-v2-lite; hybrids (gated DeltaNet + attention):\n"
    "                     qwen3.5-0.8b, qwen3-next-80b, qwen3.5-35b-a3b, and\n"
    "                     qwen3.5-0.8b-all-attention (the same depth, attention\n"
    "                     everywhere); mixtures of experts: glm-4.5-air, minimax-m2;\n"
    "                     ministral-3-8b, smollm3-3b, seed-oss-36b, apertus-8b; with\n"
    "                     window layers: exaone-4-32b, command-r7b; llama-4-scout\n"
    "  -m, --model FILE   read the shape from a model file's metadata (weights not loaded)\n"
    "  -c, --ctx N        tokens per sequence (default: the model's context length)\n"
    "  --mem SIZE         memory for the KV cache alone: 80GiB, 512MiB, 1.5G, 4096 (bytes)\n"
    "  --kv-type T        f32, f16, bf16, q8_0, q4_0 or q4 (KIVI) for K and V (default f16)\n"
    "  --kv-type-k T      the type of the keys alone\n"
    "  --kv-type-v T      the type of the values alone\n"
    "  --json             print {\"bytes_per_token\", \"bytes_per_sequence\", \"max_sequences\",\n"
    "                     \"max_context\", \"bytes_per_token_global\", \"bytes_per_token_window\",\n"
    "                     \"bytes_per_sequence_full\", \"window_saving_bytes\", ...} only\n"
    "  -h, --help         this help\n"
    "\n"
    "q4 is an estimate: 4-bit keys with an f16 scale and minimum per channel per group of\n"
    "32 tokens, values as q4_0; KIVI's f16 window of the newest tokens is not counted.\n"
    "\n"
    "Sliding-window layers (Gemma 2/3) hold at most their window W of positions: a\n"
    "sequence of ctx tokens takes global x ctx + window x min(ctx, W) bytes, shown beside\n"
    "a full cache of the same shape (every layer global) and the saving.\n"
    "\n"
    "Hybrid models (Qwen3.5, Qwen3-Next) keep K/V only in their attention layers; their\n"
    "gated DeltaNet layers hold a fixed f32 state per sequence whatever the context and\n"
    "--kv-type, shown apart and added to every sequence (also in max_context).\n";

typedef enum kv_elem { KV_F32, KV_F16, KV_BF16, KV_Q8_0, KV_Q4_0, KV_Q4 } kv_elem;

static const char *const kv_elem_names[] = { "f32", "f16", "bf16", "q8_0", "q4_0", "q4" };

static bool parse_elem(const char *flag, const char *s, kv_elem *out)
{
    for (int i = 0; i < (int)(sizeof kv_elem_names / sizeof kv_elem_names[0]); i++)
        if (!strcasecmp(s, kv_elem_names[i])) {
            *out = (kv_elem)i;
            return true;
        }
    cli_error("%s: unknown KV type '%s' (f32, f16, bf16, q8_0, q4_0, q4)", flag, s);
    return false;
}

/* Bytes of one token's vector of n elements, of the K (is_key) or V cache. */
static uint64_t vector_bytes(kv_elem t, uint64_t n, bool is_key)
{
    uint64_t blocks = (n + 31) / 32;
    switch (t) {
    case KV_F32: return 4 * n;
    case KV_F16:
    case KV_BF16: return 2 * n;
    case KV_Q8_0: return blocks * 34;
    case KV_Q4_0: return blocks * 18;
    case KV_Q4:
        if (!is_key) return blocks * 18;
        /* n/2 bytes of 4-bit codes + (2 + 2 bytes) x n channels per group of tokens */
        return (n * (KVPLAN_Q4_GROUP / 2 + 4) + KVPLAN_Q4_GROUP - 1) / KVPLAN_Q4_GROUP;
    }
    return 0;
}

typedef struct kvplan_opts {
    cli_common c; /* -m only */
    const char *preset;
    int64_t ctx; /* 0: the model's */
    size_t mem;
    bool have_mem, json;
    kv_elem tk, tv;
} kvplan_opts;

/* -m is the shared flag (cli/cli_opts.h). -c and the --kv-type flags stay kv-plan's
 * own: a plan's context goes up to 2^40 (also spelt --ctx), and its types are
 * sizes by name (bf16 too) for a model that is never loaded. */
static int parse_kvplan_args(int argc, char **argv, kvplan_opts *o)
{
    memset(o, 0, sizeof *o);
    cli_common_init(&o->c);
    o->tk = o->tv = KV_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(kvplan_help, stdout);
            return 2;
        } else if ((r = cli_opt_common(argc, argv, &i, &o->c, CLI_OPT_MODEL)) != 0) {
            if (r < 0) return 1;
        } else if (!strcmp(a, "--preset")) {
            if (!(o->preset = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 1, (int64_t)1 << 40, &o->ctx))
                return cli_error("%s: '%s' is not a positive integer (at most 2^40)", a, v);
        } else if (!strcmp(a, "--mem")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_size(v, &o->mem) || o->mem == 0)
                return cli_error("%s: '%s' is not a memory size (e.g. 80GiB, 512MiB, 4096)", a, v);
            o->have_mem = true;
        } else if (!strcmp(a, "--kv-type") || !strcmp(a, "--kv-type-k") || !strcmp(a, "--kv-type-v")) {
            kv_elem t;
            if (!(v = cli_flag_value(argc, argv, &i)) || !parse_elem(a, v, &t)) return 1;
            if (strcmp(a, "--kv-type-v") != 0) o->tk = t; /* --kv-type and --kv-type-k */
            if (strcmp(a, "--kv-type-k") != 0) o->tv = t; /* --kv-type and --kv-type-v */
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (a[0] == '-') {
            return cli_error("kv-plan: unknown option '%s' (kvinfer kv-plan --help)", a);
        } else {
            return cli_error("kv-plan: unexpected argument '%s'", a);
        }
    }
    if (!o->preset == !o->c.model) return cli_error("kv-plan: give exactly one of --preset NAME or -m FILE");
    if (!o->have_mem) return cli_error("kv-plan: --mem SIZE is required (memory for the KV cache)");
    return 0;
}

/* The shape of the preset or of the model file's metadata, and a line naming
 * it. 0, or 1 with the error printed. */
static int plan_shape(const kvplan_opts *o, kvplan_shape *shape, char *source, size_t cap)
{
    memset(shape, 0, sizeof *shape);
    if (o->preset) {
        const kvplan_shape *p = NULL;
        for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
            if (!strcasecmp(o->preset, presets[i].name)) p = &presets[i];
        if (!p)
            return cli_error("kv-plan: unknown preset '%s' (kvinfer kv-plan --help lists them)", o->preset);
        *shape = *p;
        for (int l = 0; p->window > 0 && l < p->n_layers; l++)
            shape->n_window += l % p->pattern < p->pattern - 1; /* llama.cpp's pattern */
        for (int l = 0; p->attn_interval > 0 && l < p->n_layers; l++)
            shape->n_recurrent += (l + 1) % p->attn_interval != 0; /* the last of each group attends */
        const uint64_t dk = (uint64_t)p->ssm_dk,
                       conv = 2 * (uint64_t)p->ssm_hk * dk + (uint64_t)p->ssm_hv * dk;
        shape->state_bytes =
            (uint64_t)shape->n_recurrent *
            ((uint64_t)(p->ssm_conv > 0 ? p->ssm_conv - 1 : 0) * conv + (uint64_t)p->ssm_hv * dk * dk) * 4;
        snprintf(source, cap, "%s (preset)", p->name);
        return 0;
    }
    kvi_model_info info;
    kvi_error err = { 0 };
    int rc = kvi_model_info_from_file(o->c.model, &info, &err);
    if (rc) return cli_error("kv-plan: %s", err.msg[0] ? err.msg : kvi_strerror(rc));
    shape->name = o->c.model;
    shape->n_layers = info.n_layers;
    shape->n_heads = info.n_heads;
    shape->n_kv_heads = info.n_kv_heads;
    shape->head_dim = info.head_dim;
    shape->n_ctx_train = info.n_ctx_train;
    shape->n_window = info.n_layers_window;
    shape->window = info.window;
    shape->mla_kv_rank = info.mla_kv_rank;
    shape->mla_k_head = info.mla_k_head;
    shape->mla_v_head = info.mla_v_head;
    shape->n_recurrent = info.n_layers_recurrent;
    shape->state_bytes = info.state_bytes;
    snprintf(source, cap, "%s (%s)", o->c.model, info.name[0] ? info.name : info.arch);
    return 0;
}

/* The plan's figures (see the file comment). */
typedef struct kvplan_figures {
    int64_t ctx;
    uint64_t bpt;          /* bytes per token, every layer */
    uint64_t bpt_g, bpt_w; /* ... of the global layers, of the window layers */
    double bps_d;          /* bytes per sequence */
    double full_d;         /* bytes per sequence of a full cache (every layer global) */
    uint64_t max_seq, max_ctx;
    bool ctx_unbounded; /* every layer has a window: no context exhausts mem */
    uint64_t bpt_heads; /* latent attention: bytes per token of per-head K and V, else 0 */
    double all_attn_d;  /* hybrid: bytes per sequence with attention in every layer */
} kvplan_figures;

static int print_plan_json(const kvplan_opts *o, const kvplan_shape *shape, const kvplan_figures *f)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", shape->name);
    cJSON_AddNumberToObject(j, "n_layers", shape->n_layers);
    cJSON_AddNumberToObject(j, "n_heads", shape->n_heads);
    cJSON_AddNumberToObject(j, "n_kv_heads", shape->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", shape->head_dim);
    cJSON_AddNumberToObject(j, "n_ctx_train", shape->n_ctx_train);
    cJSON_AddStringToObject(j, "kv_type_k", kv_elem_names[o->tk]);
    cJSON_AddStringToObject(j, "kv_type_v", kv_elem_names[o->tv]);
    cJSON_AddStringToObject(j, "kv_type", o->tk == o->tv ? kv_elem_names[o->tk] : "mixed");
    cJSON_AddNumberToObject(j, "ctx", (double)f->ctx);
    cJSON_AddNumberToObject(j, "mem", (double)o->mem);
    cJSON_AddNumberToObject(j, "bytes_per_token", (double)f->bpt);
    cJSON_AddNumberToObject(j, "bytes_per_sequence", f->bps_d);
    cJSON_AddNumberToObject(j, "max_sequences", (double)f->max_seq);
    if (f->ctx_unbounded)
        cJSON_AddNullToObject(j, "max_context");
    else
        cJSON_AddNumberToObject(j, "max_context", (double)f->max_ctx);
    cJSON_AddNumberToObject(j, "n_layers_global", shape->n_layers - shape->n_window);
    cJSON_AddNumberToObject(j, "n_layers_window", shape->n_window);
    cJSON_AddNumberToObject(j, "window", shape->window);
    cJSON_AddNumberToObject(j, "bytes_per_token_global", (double)f->bpt_g);
    cJSON_AddNumberToObject(j, "bytes_per_token_window", (double)f->bpt_w);
    cJSON_AddNumberToObject(j, "bytes_per_sequence_full", f->full_d);
    cJSON_AddNumberToObject(j, "window_saving_bytes", f->full_d - f->bps_d);
    cJSON_AddNumberToObject(j, "window_saving", f->full_d > 0 ? (f->full_d - f->bps_d) / f->full_d : 0.0);
    cJSON_AddBoolToObject(j, "latent", shape->mla_kv_rank > 0);
    if (shape->mla_kv_rank > 0) {
        cJSON_AddNumberToObject(j, "kv_lora_rank", shape->mla_kv_rank);
        cJSON_AddNumberToObject(j, "bytes_per_token_per_head", (double)f->bpt_heads);
        cJSON_AddNumberToObject(j, "latent_saving", 1.0 - (double)f->bpt / (double)f->bpt_heads);
    }
    cJSON_AddNumberToObject(j, "n_layers_recurrent", shape->n_recurrent);
    cJSON_AddNumberToObject(j, "state_bytes_per_sequence", (double)shape->state_bytes);
    if (shape->n_recurrent > 0) {
        cJSON_AddNumberToObject(j, "kv_bytes_per_sequence", f->bps_d - (double)shape->state_bytes);
        cJSON_AddNumberToObject(j, "bytes_per_sequence_all_attention", f->all_attn_d);
    }
    return cli_print_json(j, "kv-plan: out of memory");
}

static void print_plan_text(const kvplan_opts *o, const kvplan_shape *shape, const char *source,
                            const kvplan_figures *f)
{
    char b1[32], b2[32], b3[32];
    cli_human_bytes(b1, sizeof b1, (double)f->bpt);
    cli_human_bytes(b2, sizeof b2, f->bps_d);
    cli_human_bytes(b3, sizeof b3, (double)o->mem);
    printf("model           %s\n", source);
    printf("shape           %d layers, %d KV heads x %d dims (%d query heads%s)\n", shape->n_layers,
           shape->n_kv_heads, shape->head_dim, shape->n_heads,
           shape->mla_kv_rank > 0               ? " sharing one latent row"
           : shape->n_kv_heads < shape->n_heads ? ", GQA"
                                                : "");
    if (shape->mla_kv_rank > 0)
        printf("KV type         K %s, V none (latent: values are the first %d dims of each key row)\n",
               kv_elem_names[o->tk], shape->mla_kv_rank);
    else
        printf("KV type         K %s, V %s%s\n", kv_elem_names[o->tk], kv_elem_names[o->tv],
               o->tk == KV_Q4 || o->tv == KV_Q4 ? " (q4: estimate, see --help)" : "");
    printf("per token       %s (%llu bytes)\n", b1, (unsigned long long)f->bpt);
    if (shape->mla_kv_rank > 0) {
        char h[32];
        cli_human_bytes(h, sizeof h, (double)f->bpt_heads);
        printf("latent          %d + %d values a token and layer; per-head keys and values would hold %d x "
               "(%d + %d): %s a token; the latent cache is %.1f%% smaller\n",
               shape->mla_kv_rank, shape->head_dim - shape->mla_kv_rank, shape->n_heads, shape->mla_k_head,
               shape->mla_v_head, h, 100.0 * (1.0 - (double)f->bpt / (double)f->bpt_heads));
    }
    if (shape->n_window > 0) {
        char g[32], w[32], full[32], save[32];
        cli_human_bytes(g, sizeof g, (double)f->bpt_g);
        cli_human_bytes(w, sizeof w, (double)f->bpt_w);
        cli_human_bytes(full, sizeof full, f->full_d);
        cli_human_bytes(save, sizeof save, f->full_d - f->bps_d);
        printf("layer kinds     %d global: %s a token (%llu bytes); %d window (W %d): %s a token (%llu "
               "bytes) for the last %d positions only\n",
               shape->n_layers - shape->n_window, g, (unsigned long long)f->bpt_g, shape->n_window,
               shape->window, w, (unsigned long long)f->bpt_w, shape->window);
        printf("full cache      %s at %lld tokens (every layer global)\n", full, (long long)f->ctx);
        printf("window saving   %s (%.1f%%)\n", save,
               f->full_d > 0 ? 100.0 * (f->full_d - f->bps_d) / f->full_d : 0.0);
    }
    if (shape->n_recurrent > 0) {
        char st[32], kv[32], all[32];
        cli_human_bytes(st, sizeof st, (double)shape->state_bytes);
        cli_human_bytes(kv, sizeof kv, f->bps_d - (double)shape->state_bytes);
        cli_human_bytes(all, sizeof all, f->all_attn_d);
        printf("layer kinds     %d attention: K/V %s at %lld tokens; %d recurrent (a fixed state): state %s "
               "(%llu bytes, f32, fixed whatever the context)\n",
               shape->n_layers - shape->n_recurrent, kv, (long long)f->ctx, shape->n_recurrent, st,
               (unsigned long long)shape->state_bytes);
        printf("all attention   %s at %lld tokens (attention in all %d layers; the hybrid takes %.1f%%)\n",
               all, (long long)f->ctx, shape->n_layers,
               f->all_attn_d > 0 ? 100.0 * f->bps_d / f->all_attn_d : 0.0);
    }
    printf("per sequence    %s at %lld tokens\n", b2, (long long)f->ctx);
    printf("memory          %s\n", b3);
    printf("sequences       %llu fit at %lld tokens each\n", (unsigned long long)f->max_seq,
           (long long)f->ctx);
    if (f->ctx_unbounded)
        printf("max context     unbounded for one sequence (every layer has a window)\n");
    else
        printf("max context     %llu tokens for one sequence%s\n", (unsigned long long)f->max_ctx,
               shape->n_ctx_train > 0 && f->max_ctx > (uint64_t)shape->n_ctx_train
                   ? " (beyond the trained context)"
                   : "");
}

int cmd_kvplan(int argc, char **argv)
{
    kvplan_opts o;
    int prc = parse_kvplan_args(argc, argv, &o);
    if (prc != 0) return prc == 2 ? 0 : 1;
    kvplan_shape shape;
    char source[300];
    if (plan_shape(&o, &shape, source, sizeof source) != 0) return 1;
    kvplan_figures f = { .ctx = o.ctx };
    if (f.ctx == 0) f.ctx = shape.n_ctx_train;
    if (f.ctx == 0)
        return cli_error("kv-plan: --ctx N is required (preset %s has no context length)", shape.name);

    uint64_t kv_dim = (uint64_t)shape.n_kv_heads * (uint64_t)shape.head_dim;
    const bool latent = shape.mla_kv_rank > 0;
    if (latent && o.tk == KV_Q4)
        return cli_error("kv-plan: latent attention keeps its values inside the keys: q4 (KIVI) keys cannot "
                         "hold them (f32, f16, bf16, q8_0, q4_0)");
    uint64_t per_layer = vector_bytes(o.tk, kv_dim, true) + (latent ? 0 : vector_bytes(o.tv, kv_dim, false));
    if (latent)
        f.bpt_heads = (uint64_t)shape.n_layers *
                      (vector_bytes(o.tk, (uint64_t)shape.n_heads * (uint64_t)shape.mla_k_head, true) +
                       vector_bytes(o.tk, (uint64_t)shape.n_heads * (uint64_t)shape.mla_v_head, false));
    const int n_attn = shape.n_layers - shape.n_recurrent; /* layers with K/V */
    f.bpt = per_layer * (uint64_t)n_attn;
    if (f.bpt == 0) return cli_error("kv-plan: the model shape gives 0 bytes per token");
    f.all_attn_d = (double)per_layer * shape.n_layers * (double)f.ctx;
    f.bpt_w = per_layer * (uint64_t)shape.n_window;
    f.bpt_g = f.bpt - f.bpt_w;
    const int64_t wctx = shape.n_window > 0 && shape.window < f.ctx ? shape.window : f.ctx;
    /* doubles may exceed 2^64 only for absurd inputs */
    f.full_d = (double)f.bpt * (double)f.ctx;
    f.bps_d = (double)f.bpt_g * (double)f.ctx + (double)f.bpt_w * (double)wctx + (double)shape.state_bytes;
    uint64_t bps = f.bps_d < 1.8e19 ? f.bpt_g * (uint64_t)f.ctx + f.bpt_w * (uint64_t)wctx + shape.state_bytes
                                    : UINT64_MAX;
    f.max_seq = (uint64_t)o.mem / bps;
    /* a hybrid's one sequence: its state first, the rest for K/V */
    const uint64_t mem_kv = (uint64_t)o.mem > shape.state_bytes ? (uint64_t)o.mem - shape.state_bytes : 0;
    /* the largest c: within the window every layer grows, past it the global ones only */
    const uint64_t wfull = f.bpt * (uint64_t)shape.window; /* bytes at c = W */
    if (shape.n_recurrent > 0)
        f.max_ctx = mem_kv / f.bpt;
    else if (shape.n_window == 0 || (uint64_t)o.mem < wfull)
        f.max_ctx = (uint64_t)o.mem / f.bpt;
    else if (f.bpt_g == 0)
        f.ctx_unbounded = true;
    else
        f.max_ctx = (uint64_t)shape.window + ((uint64_t)o.mem - wfull) / f.bpt_g;
    if (o.json) return print_plan_json(&o, &shape, &f);
    print_plan_text(&o, &shape, source, &f);
    return 0;
}
