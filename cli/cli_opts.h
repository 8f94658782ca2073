/*
 * cli_opts.h — the flags several `kvinfer` commands share (model, threads,
 * context size, KV cache), parsed in one place (cli/cli_opts.c) into one
 * cli_common, and the engine parameters that follow from it.
 *
 * A command passes cli_opt_common a mask: the CLI_OPT_* flag groups it accepts,
 * plus the CLI_OPT_* variant bits that keep the few places where commands
 * differ (a range, a message, when a type is checked). A flag outside the mask
 * is not consumed (0), so the command goes on to report it as unknown.
 *
 * Invariants: cli_common_init gives the values a flag not given leaves, which
 * are also the engine's defaults (threads 0, context 0, KV f16, block size and
 * budget 0 = the engine's, prefix cache on, no policy, keep 0, sink 4,
 * window 0); a value is written only after it parsed and passed its range.
 */
#ifndef KVI_CLI_OPTS_H
#define KVI_CLI_OPTS_H

#include "cli/cli.h"

enum {
    /* flag groups */
    CLI_OPT_MODEL = 1u << 0,      /* -m, --model PATH */
    CLI_OPT_TOKENIZER = 1u << 1,  /* --tokenizer PATH */
    CLI_OPT_MMAP = 1u << 2,       /* --mmap */
    CLI_OPT_THREADS = 1u << 3,    /* -t, --threads N in [0, 1024] */
    CLI_OPT_CTX = 1u << 4,        /* -c, --ctx-size N in [1, 2^24] */
    CLI_OPT_KV_TYPE = 1u << 5,    /* --kv-type T: K and V */
    CLI_OPT_KV_TYPE_KV = 1u << 6, /* --kv-type-k T, --kv-type-v T */
    CLI_OPT_KV_BLOCK = 1u << 7,   /* --kv-block N in [1, 4096] */
    CLI_OPT_KV_BUDGET = 1u << 8,  /* --kv-budget SIZE, more than 0 */
    CLI_OPT_NO_PREFIX = 1u << 9,  /* --no-prefix-cache */
    CLI_OPT_POLICY = 1u << 10,    /* --ctx-policy P, --keep N, --sink N, --window N in [0, 2^24] */
    CLI_OPT_PROMPT = 1u << 11,    /* -p, --prompt TEXT; -f, --file PATH; --tokens IDS; --special */
    CLI_OPT_LORA = 1u << 12,      /* --lora [NAME=]FILE, --lora-scaled FILE SCALE | FILE:SCALE[,FILE:SCALE] */
    CLI_OPT_KV_TIERS = 1u << 13,  /* --kv-cache-ram SIZE, --kv-cache-dir DIR, --kv-cache-disk SIZE */
    /* where commands differ */
    CLI_OPT_CTX_MIN0 = 1u << 16,       /* -c 0 accepted: the model's context (serve, chat) */
    CLI_OPT_CTX_MIN4 = 1u << 17,       /* -c at least 4 (perplexity: a chunk of 4 scores one row) */
    CLI_OPT_KV_ANY = 1u << 18,         /* any type kvi_type_from_name knows (bf16 too; the engine
                                      decides), a bad one "X: unknown type 'T'" (bench) */
    CLI_OPT_KV_LATER = 1u << 19,       /* like KV_ANY, but the names are only kept, and checked by
                                      cli_opt_kv_check after every flag (perplexity) */
    CLI_OPT_BUDGET_ZERO = 1u << 20,    /* --kv-budget 0 accepted (the default bound); a bad size
                                       is "--kv-budget: 'S' is not a size" (serve) */
    CLI_OPT_POLICY_UNKNOWN = 1u << 21, /* a bad policy is "X: unknown policy 'P' (...)" instead
                                          of "X: 'P' is not a policy (...)" (perplexity) */
    CLI_OPT_TERSE = 1u << 22,          /* a bad number is "X: bad value 'V'" (chat) */
};

#define CLI_LORA_MAX 16
#define CLI_KV_CACHE_RAM ((size_t)1 << 30)  /* --kv-cache-ram default: 1 GiB */
#define CLI_KV_CACHE_DISK ((size_t)8 << 30) /* --kv-cache-disk default: 8 GiB */

/* What the flags that cli_opt_common consumed say. */
typedef struct cli_common {
    const char *model;     /* NULL: the command's default */
    const char *tokenizer; /* NULL: next to the model */
    bool mmap;
    int64_t n_threads;     /* 0: every core */
    int64_t n_ctx;         /* 0: not given (the model's, or the command's default) */
    kvi_type kv_k, kv_v;   /* F16 unless given */
    const char *kv_k_name; /* the type names as given (NULL: not given); */
    const char *kv_v_name; /*   with CLI_OPT_KV_LATER not yet checked */
    int64_t kv_block;      /* 0: the engine's block size */
    size_t kv_budget;      /* 0: the engine's bound */
    bool no_prefix;
    size_t kv_cache_ram;                /* RAM tier bytes (CLI_KV_CACHE_RAM unless given; 0: off) */
    const char *kv_cache_dir;           /* disk tier directory, NULL: off */
    size_t kv_cache_disk;               /* disk tier bytes (CLI_KV_CACHE_DISK unless given) */
    const char *ctx_policy;             /* as given ("error" too); NULL: not given */
    int64_t keep, sink, window;         /* 0, 4, 0 unless given */
    const char *prompt, *file, *tokens; /* the prompt's sources as given (cli_prompt_ids) */
    bool special;
    int n_lora;                          /* LoRA adapters, in the order given (cli_opt_lora loads them) */
    const char *lora_path[CLI_LORA_MAX]; /* into argv: lora_len[i] bytes (a FILE:SCALE list's part) */
    size_t lora_len[CLI_LORA_MAX];
    float lora_scale[CLI_LORA_MAX];
    const char *lora_name[CLI_LORA_MAX]; /* --lora NAME=PATH: NAME (lora_name_len bytes), else NULL */
    size_t lora_name_len[CLI_LORA_MAX];
} cli_common;

/* The values of no flag given (see the invariants above). */
void cli_common_init(cli_common *o);
/* Parses argv[*i] when it is a flag of the mask `which`, advancing *i past its
 * value: 1 when consumed, 0 when argv[*i] is not such a flag (nothing read),
 * -1 with one "kvinfer: error: ..." line printed (missing or bad value). */
int cli_opt_common(int argc, char **argv, int *i, cli_common *o, unsigned which);
/* CLI_OPT_KV_LATER: resolves kv_k_name and kv_v_name into kv_k and kv_v. 0, or
 * 1 with "--kv-type-k: unknown type 'T'" (or -v) printed. */
int cli_opt_kv_check(cli_common *o);
/* The context policy that evicts: NULL when none was given or it is "error". */
const char *cli_opt_policy(const cli_common *o);

/* cli_engine_params_default, then every value of o on top: threads, context
 * (0: the model's), KV types, block size and budget when given, prefix cache,
 * the policy when given, keep, sink and window. The caller sets what is its own
 * (n_seq_max, n_batch_max, a context it worked out). */
void cli_opt_engine_params(const cli_common *o, kvi_engine_params *ep);
/* cli_load_model with o's model, --mmap and --tokenizer. */
kvi_model *cli_opt_load_model(const cli_common *o);
/* Loads o's LoRA adapters into e (kvi_engine_lora_load, each at its scale): 0, or 1
 * with "<who>lora: <why>" printed. */
int cli_opt_lora(const cli_common *o, kvi_engine *e, const char *who);
/* kvi_engine_create, or NULL with "<who>cannot create the engine: <why>" printed
 * (who: "" or a prefix such as "bench: "). */
kvi_engine *cli_engine_create(kvi_model *m, const kvi_engine_params *ep, const char *who);

/* llama.cpp's sampler flags that `run` and `chat` share (cli_opt_sampling):
 * --typical, --mirostat, --mirostat-lr, --mirostat-ent, --dry-*, --xtc-*,
 * --top-nsigma, --dynatemp-range, --dynatemp-exp, --presence-penalty,
 * --frequency-penalty, --samplers, --sampling-seq, --min-keep. The breakers
 * point into argv. */
#define CLI_DRY_BREAKERS_MAX 16
typedef struct cli_sampling {
    bool breakers_given; /* false: llama.cpp's defaults */
    int32_t n_breakers;
    const char *breakers[CLI_DRY_BREAKERS_MAX];
} cli_sampling;
/* Their help lines, for a command's --help. */
extern const char cli_sampling_help[];
/* Parses argv[*i] when it is one of those flags into sp and o: 1 consumed, 0
 * not one of them, -1 with one error line printed (a bad or missing value). */
int cli_opt_sampling(int argc, char **argv, int *i, kvi_sampler_params *sp, cli_sampling *o);
/* Gives smp the DRY breakers of o when sp turns DRY on. 0, or 1 with an error printed. */
int cli_sampler_breakers(kvi_sampler *smp, const kvi_model *m, const kvi_sampler_params *sp,
                         const cli_sampling *o);

#endif
