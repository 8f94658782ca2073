/*
 * cli_opts.c — the one parser of the flags `kvinfer` commands share (model,
 * threads, context size, KV cache; see cli_opts.h) and the engine parameters
 * they give.
 *
 * Invariants: a flag is consumed only when its group is in the caller's mask;
 * its value is parsed whole and range-checked before anything is written; each
 * error is one line naming the flag as the user spelt it, worded as the
 * command worded it before the flags were shared (the variant bits).
 */
#include "cli/cli_opts.h"

#include <stdio.h>
#include <string.h>

void cli_common_init(cli_common *o)
{
    memset(o, 0, sizeof *o);
    o->kv_k = o->kv_v = KVI_TYPE_F16;
    o->sink = 4;
}

static bool is_flag(const char *a, const char *short_name, const char *long_name)
{
    return (short_name && !strcmp(a, short_name)) || !strcmp(a, long_name);
}

/* An integer flag in [lo, hi]. */
static int int_flag(int argc, char **argv, int *i, unsigned which, int64_t lo, int64_t hi, int64_t *out)
{
    const char *a = argv[*i], *v = cli_flag_value(argc, argv, i);
    if (!(which & CLI_OPT_TERSE)) return cli_flag_i64(a, v, lo, hi, out);
    if (!v) return -1;
    if (cli_parse_i64(v, lo, hi, out)) return 1;
    return -cli_error("%s: bad value '%s'", a, v);
}

/* --kv-type (K and V), --kv-type-k, --kv-type-v. */
static int kv_type_flag(int argc, char **argv, int *i, cli_common *o, unsigned which)
{
    const char *a = argv[*i];
    const bool both = (which & CLI_OPT_KV_TYPE) && !strcmp(a, "--kv-type");
    const bool k = both || ((which & CLI_OPT_KV_TYPE_KV) && !strcmp(a, "--kv-type-k"));
    const bool v = both || ((which & CLI_OPT_KV_TYPE_KV) && !strcmp(a, "--kv-type-v"));
    if (!k && !v) return 0;
    const char *s = cli_flag_value(argc, argv, i);
    if (!s) return -1;
    if (k) o->kv_k_name = s;
    if (v) o->kv_v_name = s;
    if (which & CLI_OPT_KV_LATER) return 1;
    kvi_type t;
    if (which & CLI_OPT_KV_ANY) {
        if (kvi_type_from_name(s, &t) != 0) {
            cli_error("%s: unknown type '%s'", a, s);
            return -1;
        }
    } else if (!cli_parse_kv_type(a, s, &t)) {
        return -1;
    }
    if (k) o->kv_k = t;
    if (v) o->kv_v = t;
    return 1;
}

static int budget_flag(int argc, char **argv, int *i, cli_common *o, unsigned which)
{
    const char *a = argv[*i], *s = cli_flag_value(argc, argv, i);
    if (!s) return -1;
    size_t bytes;
    if (which & CLI_OPT_BUDGET_ZERO) {
        if (!cli_parse_size(s, &bytes)) {
            cli_error("%s: '%s' is not a size", a, s);
            return -1;
        }
    } else if (!cli_parse_size(s, &bytes) || bytes == 0) {
        cli_error("%s: '%s' is not a size (bytes, or like 512MiB, 2GiB)", a, s);
        return -1;
    }
    o->kv_budget = bytes;
    return 1;
}

/* --ctx-policy, --keep, --sink, --window. */
static int policy_flag(int argc, char **argv, int *i, cli_common *o, unsigned which)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--keep")) return int_flag(argc, argv, i, which, 0, 1 << 24, &o->keep);
    if (!strcmp(a, "--sink")) return int_flag(argc, argv, i, which, 0, 1 << 24, &o->sink);
    if (!strcmp(a, "--window")) return int_flag(argc, argv, i, which, 0, 1 << 24, &o->window);
    if (strcmp(a, "--ctx-policy") != 0) return 0;
    const char *s = cli_flag_value(argc, argv, i);
    if (!s) return -1;
    if (strcmp(s, "error") && strcmp(s, "shift") && strcmp(s, "sinks") && strcmp(s, "heavy")) {
        if (which & CLI_OPT_POLICY_UNKNOWN)
            cli_error("%s: unknown policy '%s' (error, shift, sinks, heavy)", a, s);
        else
            cli_error("%s: '%s' is not a policy (error, shift, sinks, heavy)", a, s);
        return -1;
    }
    o->ctx_policy = s;
    return 1;
}

/* Where a flag that takes a string kept as given goes; NULL when a is none of the mask's. */
static const char **string_flag(const char *a, cli_common *o, unsigned which)
{
    if ((which & CLI_OPT_MODEL) && is_flag(a, "-m", "--model")) return &o->model;
    if ((which & CLI_OPT_TOKENIZER) && is_flag(a, NULL, "--tokenizer")) return &o->tokenizer;
    if ((which & CLI_OPT_PROMPT) && is_flag(a, "-p", "--prompt")) return &o->prompt;
    if ((which & CLI_OPT_PROMPT) && is_flag(a, "-f", "--file")) return &o->file;
    if ((which & CLI_OPT_PROMPT) && is_flag(a, NULL, "--tokens")) return &o->tokens;
    return NULL;
}

/* Where a flag without a value goes (it sets true); NULL when a is none of the mask's. */
static bool *switch_flag(const char *a, cli_common *o, unsigned which)
{
    if ((which & CLI_OPT_MMAP) && is_flag(a, NULL, "--mmap")) return &o->mmap;
    if ((which & CLI_OPT_NO_PREFIX) && is_flag(a, NULL, "--no-prefix-cache")) return &o->no_prefix;
    if ((which & CLI_OPT_PROMPT) && is_flag(a, NULL, "--special")) return &o->special;
    return NULL;
}

int cli_opt_common(int argc, char **argv, int *i, cli_common *o, unsigned which)
{
    const char *a = argv[*i];
    const char **str = string_flag(a, o, which);
    if (str) return (*str = cli_flag_value(argc, argv, i)) ? 1 : -1;
    bool *on = switch_flag(a, o, which);
    if (on) {
        *on = true;
        return 1;
    }
    if ((which & CLI_OPT_THREADS) && is_flag(a, "-t", "--threads"))
        return int_flag(argc, argv, i, which, 0, 1024, &o->n_threads);
    if ((which & CLI_OPT_CTX) && is_flag(a, "-c", "--ctx-size")) {
        const int64_t lo = (which & CLI_OPT_CTX_MIN0) ? 0 : (which & CLI_OPT_CTX_MIN4) ? 4 : 1;
        return int_flag(argc, argv, i, which, lo, 1 << 24, &o->n_ctx);
    }
    if ((which & CLI_OPT_KV_BLOCK) && is_flag(a, NULL, "--kv-block"))
        return int_flag(argc, argv, i, which, 1, 4096, &o->kv_block);
    if ((which & CLI_OPT_KV_BUDGET) && is_flag(a, NULL, "--kv-budget"))
        return budget_flag(argc, argv, i, o, which);
    if (which & (CLI_OPT_KV_TYPE | CLI_OPT_KV_TYPE_KV)) {
        const int r = kv_type_flag(argc, argv, i, o, which);
        if (r != 0) return r;
    }
    if (which & CLI_OPT_POLICY) return policy_flag(argc, argv, i, o, which);
    return 0;
}

int cli_opt_kv_check(cli_common *o)
{
    if (o->kv_k_name && kvi_type_from_name(o->kv_k_name, &o->kv_k) != 0)
        return cli_error("--kv-type-k: unknown type '%s'", o->kv_k_name);
    if (o->kv_v_name && kvi_type_from_name(o->kv_v_name, &o->kv_v) != 0)
        return cli_error("--kv-type-v: unknown type '%s'", o->kv_v_name);
    return 0;
}

const char *cli_opt_policy(const cli_common *o)
{
    return o->ctx_policy && strcmp(o->ctx_policy, "error") != 0 ? o->ctx_policy : NULL;
}

void cli_opt_engine_params(const cli_common *o, kvi_engine_params *ep)
{
    cli_engine_params_default(ep);
    ep->n_threads = (int)o->n_threads;
    ep->n_ctx = (int)o->n_ctx;
    ep->kv_type_k = o->kv_k;
    ep->kv_type_v = o->kv_v;
    if (o->kv_block > 0) ep->kv_block_size = (int)o->kv_block;
    if (o->kv_budget > 0) ep->kv_budget_bytes = o->kv_budget;
    ep->prefix_cache = !o->no_prefix;
    if (o->ctx_policy) ep->ctx_policy = o->ctx_policy;
    ep->n_keep = (int32_t)o->keep;
    ep->n_sink = (int32_t)o->sink;
    ep->n_window = (int32_t)o->window;
}

kvi_model *cli_opt_load_model(const cli_common *o) { return cli_load_model(o->model, o->mmap, o->tokenizer); }

kvi_engine *cli_engine_create(kvi_model *m, const kvi_engine_params *ep, const char *who)
{
    kvi_error err = { 0 };
    kvi_engine *e = kvi_engine_create(m, ep, &err);
    if (!e) cli_error("%scannot create the engine: %s", who, err.msg[0] ? err.msg : kvi_strerror(err.code));
    return e;
}
