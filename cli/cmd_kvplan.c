/*
 * cmd_kvplan.c — `kvinfer kv-plan`: the KV cache's size, worked out before any
 * memory is spent. For a model shape (a preset, or a file's metadata read
 * without its weights), a context length, a KV type and a memory size:
 *
 *   bytes_per_token    = n_layers x (K bytes + V bytes of one token's vectors)
 *   bytes_per_sequence = bytes_per_token x ctx
 *   max_sequences      = floor(mem / bytes_per_sequence)
 *   max_context        = floor(mem / bytes_per_token)   (one sequence)
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
 */
#include "cli/cli.h"

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
 */
typedef struct kvplan_shape {
    const char *name;
    int n_layers, n_heads, n_kv_heads, head_dim, n_ctx_train;
} kvplan_shape;

static const kvplan_shape presets[] = {
    {"llama-2-7b", 32, 32, 32, 128, 4096},
    {"llama-2-70b", 80, 64, 8, 128, 4096},
    {"llama-3-8b", 32, 32, 8, 128, 8192},
    {"llama-3-70b", 80, 64, 8, 128, 8192},
    {"mistral-7b", 32, 32, 8, 128, 32768},
    {"qwen2.5-7b", 28, 28, 4, 128, 131072},
    {"seed-70b", 80, 64, 8, 128, 0},
    {"seed-70b-mha", 80, 64, 64, 128, 0},
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
    "                     qwen2.5-7b, seed-70b (80 layers, 64 heads, 8 KV heads, d_k 128),\n"
    "                     seed-70b-mha (the same without GQA: 64 KV heads)\n"
    "  -m, --model FILE   read the shape from a model file's metadata (weights not loaded)\n"
    "  -c, --ctx N        tokens per sequence (default: the model's context length)\n"
    "  --mem SIZE         memory for the KV cache alone: 80GiB, 512MiB, 1.5G, 4096 (bytes)\n"
    "  --kv-type T        f32, f16, bf16, q8_0, q4_0 or q4 (KIVI) for K and V (default f16)\n"
    "  --kv-type-k T      the type of the keys alone\n"
    "  --kv-type-v T      the type of the values alone\n"
    "  --json             print {\"bytes_per_token\", \"bytes_per_sequence\", \"max_sequences\",\n"
    "                     \"max_context\", ...} only\n"
    "  -h, --help         this help\n"
    "\n"
    "q4 is an estimate: 4-bit keys with an f16 scale and minimum per channel per group of\n"
    "32 tokens, values as q4_0; KIVI's f16 window of the newest tokens is not counted.\n";

typedef enum kv_elem { KV_F32, KV_F16, KV_BF16, KV_Q8_0, KV_Q4_0, KV_Q4 } kv_elem;

static const char *const kv_elem_names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4"};

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

static void human_bytes(char *buf, size_t cap, double b)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024.0 && u < 5) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", b, units[u]);
}

int cmd_kvplan(int argc, char **argv)
{
    const char *preset = NULL, *model = NULL;
    int64_t ctx = 0;
    size_t mem = 0;
    bool have_mem = false, json = false;
    kv_elem tk = KV_F16, tv = KV_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(kvplan_help, stdout);
            return 0;
        } else if (!strcmp(a, "--preset")) {
            if (!(preset = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 1, (int64_t)1 << 40, &ctx))
                return cli_error("%s: '%s' is not a positive integer (at most 2^40)", a, v);
        } else if (!strcmp(a, "--mem")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_size(v, &mem) || mem == 0)
                return cli_error("%s: '%s' is not a memory size (e.g. 80GiB, 512MiB, 4096)", a, v);
            have_mem = true;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(v = cli_flag_value(argc, argv, &i)) || !parse_elem(a, v, &tk)) return 1;
            tv = tk;
        } else if (!strcmp(a, "--kv-type-k")) {
            if (!(v = cli_flag_value(argc, argv, &i)) || !parse_elem(a, v, &tk)) return 1;
        } else if (!strcmp(a, "--kv-type-v")) {
            if (!(v = cli_flag_value(argc, argv, &i)) || !parse_elem(a, v, &tv)) return 1;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (a[0] == '-') {
            return cli_error("kv-plan: unknown option '%s' (kvinfer kv-plan --help)", a);
        } else {
            return cli_error("kv-plan: unexpected argument '%s'", a);
        }
    }
    if (!preset == !model) return cli_error("kv-plan: give exactly one of --preset NAME or -m FILE");
    if (!have_mem) return cli_error("kv-plan: --mem SIZE is required (memory for the KV cache)");

    kvplan_shape shape = {0};
    char source[300];
    if (preset) {
        const kvplan_shape *p = NULL;
        for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
            if (!strcasecmp(preset, presets[i].name)) p = &presets[i];
        if (!p) return cli_error("kv-plan: unknown preset '%s' (kvinfer kv-plan --help lists them)", preset);
        shape = *p;
        snprintf(source, sizeof source, "%s (preset)", p->name);
    } else {
        kvi_model_info info;
        kvi_error err = {0};
        int rc = kvi_model_info_from_file(model, &info, &err);
        if (rc) return cli_error("kv-plan: %s", err.msg[0] ? err.msg : kvi_strerror(rc));
        shape.name = model;
        shape.n_layers = info.n_layers;
        shape.n_heads = info.n_heads;
        shape.n_kv_heads = info.n_kv_heads;
        shape.head_dim = info.head_dim;
        shape.n_ctx_train = info.n_ctx_train;
        snprintf(source, sizeof source, "%s (%s)", model, info.name[0] ? info.name : info.arch);
    }
    if (ctx == 0) ctx = shape.n_ctx_train;
    if (ctx == 0) return cli_error("kv-plan: --ctx N is required (preset %s has no context length)", shape.name);

    uint64_t kv_dim = (uint64_t)shape.n_kv_heads * (uint64_t)shape.head_dim;
    uint64_t per_layer = vector_bytes(tk, kv_dim, true) + vector_bytes(tv, kv_dim, false);
    uint64_t bpt = per_layer * (uint64_t)shape.n_layers;
    if (bpt == 0) return cli_error("kv-plan: the model shape gives 0 bytes per token");
    double bps_d = (double)bpt * (double)ctx;   /* may exceed 2^64 only for absurd inputs */
    uint64_t bps = bps_d < 1.8e19 ? bpt * (uint64_t)ctx : UINT64_MAX;
    uint64_t max_seq = (uint64_t)mem / bps;
    uint64_t max_ctx = (uint64_t)mem / bpt;

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", shape.name);
        cJSON_AddNumberToObject(o, "n_layers", shape.n_layers);
        cJSON_AddNumberToObject(o, "n_heads", shape.n_heads);
        cJSON_AddNumberToObject(o, "n_kv_heads", shape.n_kv_heads);
        cJSON_AddNumberToObject(o, "head_dim", shape.head_dim);
        cJSON_AddNumberToObject(o, "n_ctx_train", shape.n_ctx_train);
        cJSON_AddStringToObject(o, "kv_type_k", kv_elem_names[tk]);
        cJSON_AddStringToObject(o, "kv_type_v", kv_elem_names[tv]);
        cJSON_AddStringToObject(o, "kv_type", tk == tv ? kv_elem_names[tk] : "mixed");
        cJSON_AddNumberToObject(o, "ctx", (double)ctx);
        cJSON_AddNumberToObject(o, "mem", (double)mem);
        cJSON_AddNumberToObject(o, "bytes_per_token", (double)bpt);
        cJSON_AddNumberToObject(o, "bytes_per_sequence", bps_d);
        cJSON_AddNumberToObject(o, "max_sequences", (double)max_seq);
        cJSON_AddNumberToObject(o, "max_context", (double)max_ctx);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!s) return cli_error("kv-plan: out of memory");
        puts(s);
        free(s);
        return 0;
    }
    char b1[32], b2[32], b3[32];
    human_bytes(b1, sizeof b1, (double)bpt);
    human_bytes(b2, sizeof b2, bps_d);
    human_bytes(b3, sizeof b3, (double)mem);
    printf("model           %s\n", source);
    printf("shape           %d layers, %d KV heads x %d dims (%d query heads%s)\n", shape.n_layers,
           shape.n_kv_heads, shape.head_dim, shape.n_heads, shape.n_kv_heads < shape.n_heads ? ", GQA" : "");
    printf("KV type         K %s, V %s%s\n", kv_elem_names[tk], kv_elem_names[tv],
           tk == KV_Q4 || tv == KV_Q4 ? " (q4: estimate, see --help)" : "");
    printf("per token       %s (%llu bytes)\n", b1, (unsigned long long)bpt);
    printf("per sequence    %s at %lld tokens\n", b2, (long long)ctx);
    printf("memory          %s\n", b3);
    printf("sequences       %llu fit at %lld tokens each\n", (unsigned long long)max_seq, (long long)ctx);
    printf("max context     %llu tokens for one sequence%s\n", (unsigned long long)max_ctx,
           shape.n_ctx_train > 0 && max_ctx > (uint64_t)shape.n_ctx_train ? " (beyond the trained context)" : "");
    return 0;
}
