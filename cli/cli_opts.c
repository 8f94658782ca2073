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

#include <stddef.h>
#include <stdio.h>
#include <string.h>

void cli_common_init(cli_common *o)
{
    memset(o, 0, sizeof *o);
    o->kv_k = o->kv_v = KVI_TYPE_F16;
    o->sink = 4;
    o->kv_cache_disk = CLI_KV_CACHE_DISK;
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

/* --kv-cache-ram SIZE, --kv-cache-dir DIR, --kv-cache-disk SIZE. */
static int tier_flag(int argc, char **argv, int *i, cli_common *o)
{
    const char *a = argv[*i];
    const bool ram = !strcmp(a, "--kv-cache-ram"), disk = !strcmp(a, "--kv-cache-disk");
    if (!ram && !disk && strcmp(a, "--kv-cache-dir") != 0) return 0;
    const char *s = cli_flag_value(argc, argv, i);
    if (!s) return -1;
    if (!ram && !disk) {
        o->kv_cache_dir = s;
        return 1;
    }
    size_t bytes;
    if (!cli_parse_size(s, &bytes)) {
        cli_error("%s: '%s' is not a size (bytes, or like 512MiB, 2GiB)", a, s);
        return -1;
    }
    *(ram ? &o->kv_cache_ram : &o->kv_cache_disk) = bytes;
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

/* One adapter (path of len bytes, scale) onto o's list. */
static int lora_push(cli_common *o, const char *flag, const char *path, size_t len, float scale)
{
    if (len == 0) return -cli_error("%s: empty file name", flag);
    if (o->n_lora == CLI_LORA_MAX) return -cli_error("%s: at most %d adapters", flag, CLI_LORA_MAX);
    o->lora_path[o->n_lora] = path;
    o->lora_len[o->n_lora] = len;
    o->lora_name[o->n_lora] = NULL;
    o->lora_name_len[o->n_lora] = 0;
    o->lora_scale[o->n_lora++] = scale;
    return 1;
}

/* --lora NAME=PATH (vLLM's --lora-modules form): v is not a file, and the part before
 * its first '=' is a name (no '/'); NULL otherwise */
static const char *lora_name_split(const char *v)
{
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1] || memchr(v, '/', (size_t)(eq - v))) return NULL;
    FILE *f = fopen(v, "rb");
    if (f) {
        fclose(f);
        return NULL;
    }
    return eq;
}

/* --lora FILE; --lora-scaled FILE SCALE (two arguments, llama.cpp's older form) or
 * --lora-scaled FILE:SCALE[,FILE:SCALE...] (its newer one; the scale after the last ':') */
static int lora_flag(int argc, char **argv, int *i, cli_common *o)
{
    const char *a = argv[*i], *v = cli_flag_value(argc, argv, i);
    if (!v) return -1;
    if (!strcmp(a, "--lora")) {
        const char *eq = lora_name_split(v);
        const int r = lora_push(o, a, eq ? eq + 1 : v, strlen(eq ? eq + 1 : v), 1.0f);
        if (r > 0 && eq) o->lora_name[o->n_lora - 1] = v, o->lora_name_len[o->n_lora - 1] = (size_t)(eq - v);
        return r;
    }
    float sc;
    if (*i + 1 < argc && cli_parse_f32(argv[*i + 1], &sc)) {
        ++*i;
        return lora_push(o, a, v, strlen(v), sc);
    }
    for (const char *p = v; *p;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *colon = NULL;
        for (const char *q = p; q < p + n; q++)
            if (*q == ':') colon = q;
        char num[64];
        const size_t nn = colon ? (size_t)(p + n - colon - 1) : 0;
        if (!colon || nn == 0 || nn >= sizeof num)
            return -cli_error("%s: '%s': want FILE SCALE or FILE:SCALE[,FILE:SCALE]", a, v);
        memcpy(num, colon + 1, nn);
        num[nn] = '\0';
        if (!cli_parse_f32(num, &sc)) return -cli_error("%s: '%s' is not a scale", a, num);
        const int r = lora_push(o, a, p, (size_t)(colon - p), sc);
        if (r < 0) return r;
        p = end ? end + 1 : p + n;
    }
    return 1;
}

int cli_opt_lora(const cli_common *o, kvi_engine *e, const char *who)
{
    for (int k = 0; k < o->n_lora; k++) {
        char path[4096];
        if (o->lora_len[k] >= sizeof path) return cli_error("%slora: file name too long", who);
        memcpy(path, o->lora_path[k], o->lora_len[k]);
        path[o->lora_len[k]] = '\0';
        kvi_error err = { 0 };
        const int id = kvi_engine_lora_load(e, path, o->lora_scale[k], &err);
        if (id < 0) return cli_error("%slora: %s: %s", who, path, err.msg[0] ? err.msg : kvi_strerror(err.code));
        char name[128];
        if (o->lora_name[k]) {
            if (o->lora_name_len[k] >= sizeof name) return cli_error("%slora: name too long", who);
            memcpy(name, o->lora_name[k], o->lora_name_len[k]);
            name[o->lora_name_len[k]] = '\0';
            if (kvi_lora_set_name(kvi_engine_lora_get(e, id), name))
                return cli_error("%slora: '%s' is not a name (printable ASCII without spaces, '/' or '=')",
                                 who, name);
        }

    }
    return 0;
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
    if ((which & CLI_OPT_LORA) && (!strcmp(a, "--lora") || !strcmp(a, "--lora-scaled")))
        return lora_flag(argc, argv, i, o);
    if (which & CLI_OPT_KV_TIERS) {
        const int r = tier_flag(argc, argv, i, o);
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
    ep->kv_cache_ram = o->kv_cache_ram;
    ep->kv_cache_dir = o->kv_cache_dir;
    ep->kv_cache_disk = o->kv_cache_disk;
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

/* ---- llama.cpp's sampler flags (run, chat) ---- */

const char cli_sampling_help[] =
    "  --typical P             locally typical sampling (default 1.0: off)\n"
    "  --mirostat N            mirostat 1 or 2: temperature then mirostat replace the\n"
    "                          other samplers (default 0: off)\n"
    "  --mirostat-lr ETA       mirostat learning rate (default 0.1)\n"
    "  --mirostat-ent TAU      mirostat target entropy (default 5.0)\n"
    "  --dry-multiplier M      DRY repetition penalty strength (default 0: off)\n"
    "  --dry-base B            DRY penalty base (default 1.75; below 1: 1.75)\n"
    "  --dry-allowed-length N  repeats longer than N are penalised (default 2)\n"
    "  --dry-penalty-last-n N  tokens DRY looks back over (default 64; 0: off)\n"
    "  --dry-sequence-breaker S  a string that ends a repeat for DRY; repeatable, \"none\":\n"
    "                          no breaker (default: \"\\n\" \":\" \"\\\"\" \"*\")\n"
    "  --xtc-probability P     chance XTC removes the top choices (default 0: off)\n"
    "  --xtc-threshold T       XTC's probability threshold (default 0.1; > 0.5: off)\n"
    "  --top-nsigma N          drop logits below max - N standard deviations (default -1: off)\n"
    "  --dynatemp-range R      dynamic temperature in temp +- R by entropy (default 0: off)\n"
    "  --dynatemp-exp E        dynamic temperature exponent (default 1.0)\n"
    "  --presence-penalty P    minus P for a token among the last repeat-last-n (default 0)\n"
    "  --frequency-penalty F   minus F per occurrence among the last repeat-last-n (default 0)\n"
    "  --samplers LIST         the chain's order, names separated by ';' (default\n"
    "                          penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)\n"
    "  --sampling-seq SEQ      the same as letters (default edskypmxt)\n"
    "  --min-keep N            least tokens top-p, min-p, typical and XTC keep (default 0)\n";

/* A float flag in [lo, hi]. */
static int f32_flag(const char *flag, const char *v, float lo, float hi, float *out)
{
    float x;
    if (!v) return -1;
    if (!cli_parse_f32(v, &x) || x < lo || x > hi)
        return -cli_error("%s: '%s' is not a number in [%g, %g]", flag, v, (double)lo, (double)hi);
    *out = x;
    return 1;
}

/* --samplers "a;b;c" (names) or --sampling-seq "letters". */
static int order_flag(const char *a, const char *v, bool names, kvi_sampler_params *sp)
{
    if (!v) return -1;
    const char *list[KVI_SAMPLERS_MAX * 4];
    char buf[512];
    int32_t n = 0, unknown = 0;
    if (names) {
        if (snprintf(buf, sizeof buf, "%s", v) >= (int)sizeof buf)
            return -cli_error("%s: the list is too long", a);
        for (char *t = buf, *end; t && n < KVI_SAMPLERS_MAX * 4; t = end) {
            end = strchr(t, ';');
            if (end) *end++ = 0;
            if (*t) list[n++] = t;
        }
    }
    if (kvi_sampler_order_parse(sp, names ? list : NULL, n, v, &unknown) != 0)
        return -cli_error("%s: more than %d samplers", a, KVI_SAMPLERS_MAX);
    if (unknown > 0)
        fprintf(stderr, "kvinfer: warning: %s: %d unknown sampler(s) skipped\n", a, (int)unknown);
    return 1;
}

static int breaker_flag(const char *a, const char *v, cli_sampling *o)
{
    if (!v) return -1;
    if (!o->breakers_given) o->n_breakers = 0;
    o->breakers_given = true;
    if (!strcmp(v, "none")) {
        o->n_breakers = 0;
        return 1;
    }
    if (o->n_breakers == CLI_DRY_BREAKERS_MAX)
        return -cli_error("%s: more than %d breakers", a, CLI_DRY_BREAKERS_MAX);
    o->breakers[o->n_breakers++] = v;
    return 1;
}

int cli_opt_sampling(int argc, char **argv, int *i, kvi_sampler_params *sp, cli_sampling *o)
{
    const char *a = argv[*i];
    static const struct {
        const char *flag;
        float lo, hi;
        size_t off;
    } floats[] = {
        { "--typical", 0, 1, offsetof(kvi_sampler_params, typical_p) },
        { "--mirostat-lr", 0, 10, offsetof(kvi_sampler_params, mirostat_eta) },
        { "--mirostat-ent", 0, 100, offsetof(kvi_sampler_params, mirostat_tau) },
        { "--dry-multiplier", 0, 100, offsetof(kvi_sampler_params, dry_multiplier) },
        { "--dry-base", 0, 100, offsetof(kvi_sampler_params, dry_base) },
        { "--xtc-probability", 0, 1, offsetof(kvi_sampler_params, xtc_probability) },
        { "--xtc-threshold", 0, 1, offsetof(kvi_sampler_params, xtc_threshold) },
        { "--top-nsigma", -1e6f, 1e6f, offsetof(kvi_sampler_params, top_n_sigma) },
        { "--dynatemp-range", 0, 100, offsetof(kvi_sampler_params, dynatemp_range) },
        { "--dynatemp-exp", 0, 100, offsetof(kvi_sampler_params, dynatemp_exponent) },
        { "--presence-penalty", -100, 100, offsetof(kvi_sampler_params, presence_penalty) },
        { "--frequency-penalty", -100, 100, offsetof(kvi_sampler_params, frequency_penalty) },
    };
    static const struct {
        const char *flag;
        int32_t lo, hi;
        size_t off;
    } ints[] = {
        { "--mirostat", 0, 2, offsetof(kvi_sampler_params, mirostat) },
        { "--dry-allowed-length", 0, 1 << 20, offsetof(kvi_sampler_params, dry_allowed_length) },
        { "--dry-penalty-last-n", 0, 1 << 24, offsetof(kvi_sampler_params, dry_penalty_last_n) },
        { "--min-keep", 0, 1 << 20, offsetof(kvi_sampler_params, min_keep) },
    };
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++)
        if (!strcmp(a, floats[k].flag))
            return f32_flag(a, cli_flag_value(argc, argv, i), floats[k].lo, floats[k].hi,
                            (float *)(void *)((char *)sp + floats[k].off));
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if (!strcmp(a, ints[k].flag))
            return cli_flag_i32(a, cli_flag_value(argc, argv, i), ints[k].lo, ints[k].hi,
                                (int32_t *)(void *)((char *)sp + ints[k].off));
    if (!strcmp(a, "--samplers")) return order_flag(a, cli_flag_value(argc, argv, i), true, sp);
    if (!strcmp(a, "--sampling-seq")) return order_flag(a, cli_flag_value(argc, argv, i), false, sp);
    if (!strcmp(a, "--dry-sequence-breaker")) return breaker_flag(a, cli_flag_value(argc, argv, i), o);
    return 0;
}

int cli_sampler_breakers(kvi_sampler *smp, const kvi_model *m, const kvi_sampler_params *sp,
                         const cli_sampling *o)
{
    if (sp->dry_multiplier == 0.0f || sp->dry_penalty_last_n == 0 || sp->mirostat != 0) return 0;
    kvi_error err = { 0 };
    if (kvi_sampler_set_dry_breakers(smp, m, o->breakers_given ? o->breakers : NULL, o->n_breakers, &err) !=
        0)
        return cli_error("DRY sequence breakers: %s", err.msg);
    return 0;
}
