/*
 * cmd_bench.c — `kvinfer bench`: prefill and decode speed with llama-bench's
 * meaning, beside the machine's limits (a roofline), and `kvinfer bench --hw`:
 * the limits alone.
 *
 * Tests (each the same as llama-bench's):
 *  - ppP: one kvi_step of P rows (random valid token ids, logits for the last
 *    row only) on a sequence already holding D positions;
 *  - tgN: N steps of one row each (logits every step), from position D.
 * D (-d) positions are prefilled once, untimed, in chunks of n_batch rows, into a
 * base sequence; every repetition runs on a fork of it, so each one starts from
 * the same cache. One warm-up run of each test is not counted. t/s = tokens / wall time
 * of the timed steps; avg and sample stddev over -r repetitions.
 *
 * Roofline: tg moves kvi_model_decode_bytes() of weights per token (GB/s against
 * the measured read bandwidth); pp does 2 x kvi_model_matmul_params() operations
 * per token (attention's share not counted), against the peak of the
 * instruction the weight type's kernels use: AMX tdpbssd for Q8_0 / Q4_0 where
 * AMX is on, int8 vpdpbusd for the other block-quantised weights, FP32 FMA for
 * F32 and for F16/BF16 (widened to f32), AMX tdpbf16ps for F16/BF16 where that
 * path is on (KVINFER_AMX_F16=1).
 *
 * Output: a table on stdout (progress on stderr); --json prints only
 *   {"model", "type", "threads", "results": [{"test", "n_prompt", "n_gen",
 *    "n_depth", "avg_ts", "stddev_ts", ..., roofline fields}], "hw": {...}}
 * with results in the order: every pp test, then every tg test.
 *
 * --parallel LIST: instead of those tests, B sequences (each value of LIST)
 * prefilled and decoded together through the scheduler, as llama-batched-bench
 * -npl (cli/bench_parallel.c); the first -p and -n values are PP and TG; --json
 * prints {"model", "type", "threads", "parallel": [{PP, TG, B, N_KV, T_PP, S_PP,
 * T_TG, S_TG, T, S, step_ms: {...}}]}.
 */
#include "cli/cli_opts.h"
#include "cli/bench_parallel.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_MAX_VALUES 16
#define BENCH_MAX_REPS 100

static const char bench_help[] =
    "usage: kvinfer bench -m MODEL [-p 512] [-n 128] [-d 0] [-t N] [-r 5] [--json]\n"
    "       kvinfer bench --hw [--quick] [-t N] [--json]\n"
    "\n"
    "Measures prefill (ppP: one forward pass of P prompt rows) and decode (tgN: N\n"
    "single-row steps) in tokens/s, like llama-bench, next to the machine's limits:\n"
    "GB/s of weights read per token for tg, GOP/s of matrix work for pp.\n"
    "\n"
    "options:\n"
    "  -m, --model PATH     GGUF model, llama2.c checkpoint or Hugging Face folder\n"
    "  -p, --n-prompt LIST  prompt sizes, e.g. 128,512 (default 512; 0 skips pp)\n"
    "  -n, --n-gen LIST     tokens generated (default 128; 0 skips tg)\n"
    "  -d, --n-depth LIST   positions already in the KV cache (default 0)\n"
    "  -t, --threads N      worker threads (default 0: every core)\n"
    "  -r, --repetitions N  timed repetitions per test (default 5)\n"
    "  -b, --batch-size N   rows per forward pass when filling the depth (default 512)\n"
    "  --kv-type T          KV cache type for K and V (default f16)\n"
    "  --lora FILE          LoRA adapter (GGUF), scale 1; --lora-scaled FILE S (or FILE:S[,..])\n"
    "  --mmap               map the model file instead of reading it\n"
    "  --no-hw              do not measure the machine's limits (no roofline)\n"
    "  --hw                 measure only the machine's limits: read GB/s, FP32 FMA,\n"
    "                       BF16 vdpbf16ps, INT8 vpdpbusd and (where AMX is on) AMX\n"
    "                       tdpbssd and tdpbf16ps peaks on all threads\n"
    "  --quick              short limit measurements (a 64 MiB buffer; for tests)\n"
    "  --parallel LIST      B sequences prefilled (-p tokens each) and decoded (-n steps)\n"
    "                       together through the scheduler, like llama-batched-bench\n"
    "                       -npl, with a per-step breakdown (e.g. 1,4,16,64)\n"
    "  --json               print one JSON object only\n"
    "  --lora-each          with --parallel: sequence i applies adapter i mod n alone, so\n"
    "                       one batch mixes the n adapters given (default: all of them)\n"
    "  -h, --help           this help\n";

typedef struct bench_opts {
    cli_common c; /* model, --mmap, threads, --kv-type (K and V) */
    int64_t pp[BENCH_MAX_VALUES], tg[BENCH_MAX_VALUES], depth[BENCH_MAX_VALUES], par[BENCH_MAX_VALUES];
    int n_pp, n_tg, n_depth, n_par;
    int64_t reps, batch;
    bool json, hw_only, no_hw, quick, lora_each;
} bench_opts;

/* The shared flags `bench` takes (cli/cli_opts.h): --kv-type for K and V, any
 * type kvi_type_from_name knows (the engine refuses those it cannot cache). */
#define BENCH_OPTS \
    (CLI_OPT_MODEL | CLI_OPT_MMAP | CLI_OPT_THREADS | CLI_OPT_KV_TYPE | CLI_OPT_KV_ANY | CLI_OPT_LORA)

typedef struct bench_result {
    char name[64];
    int n_prompt, n_gen, n_depth;
    double avg_ts, stddev_ts;
    double samples_ts[BENCH_MAX_REPS]; /* (reps) */
    int n_samples;
    uint64_t pool_parallel, pool_serial; /* thread-pool runs of the measured reps */
} bench_result;

/* "128,512" into vals; false on junk, an empty field, a value outside [lo, hi]
 * or too many values. */
static bool parse_list(const char *s, int64_t lo, int64_t hi, int64_t *vals, int *n)
{
    char buf[32];
    *n = 0;
    for (const char *p = s;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len >= sizeof buf || *n >= BENCH_MAX_VALUES) return false;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (!cli_parse_i64(buf, lo, hi, &vals[*n])) return false;
        (*n)++;
        if (!end) return true;
        p = end + 1;
    }
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- the machine's limits ------------------------------------------------- */

static cJSON *hw_json(const kvi_hw_limits *hw)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "threads", hw->n_threads);
    cJSON_AddNumberToObject(o, "reps", hw->reps);
    cJSON_AddNumberToObject(o, "read_bytes", (double)hw->read_bytes);
    cJSON_AddNumberToObject(o, "read_gbs", hw->read_gbs);
    cJSON_AddStringToObject(o, "read_method", hw->read_method ? hw->read_method : "none");
    cJSON *rm = cJSON_AddArrayToObject(o, "read_methods");
    for (int k = 0; rm && k < hw->n_read_methods && k < KVI_HW_READ_METHODS_MAX; k++) {
        const kvi_hw_read_figure *fig = &hw->read_methods[k];
        cJSON *e = cJSON_CreateObject();
        if (!e) break;
        cJSON_AddStringToObject(e, "method", fig->method ? fig->method : "none");
        cJSON_AddNumberToObject(e, "median_gbs", fig->median_gbs);
        cJSON_AddNumberToObject(e, "best_gbs", fig->best_gbs);
        cJSON_AddItemToArray(rm, e);
    }
    cJSON_AddNumberToObject(o, "fp32_gflops", hw->fp32_gflops);
    cJSON_AddStringToObject(o, "fp32_isa", hw->fp32_isa ? hw->fp32_isa : "none");
    cJSON_AddNumberToObject(o, "bf16_gflops", hw->bf16_gflops);
    cJSON_AddNumberToObject(o, "int8_gops", hw->int8_gops);
    cJSON_AddNumberToObject(o, "amx_int8_gops", hw->amx_int8_gops);
    cJSON_AddNumberToObject(o, "amx_bf16_gflops", hw->amx_bf16_gflops);
    cJSON_AddStringToObject(o, "isa", kvi_isa_name());
    return o;
}

static void hw_print(FILE *f, const kvi_hw_limits *hw)
{
    fprintf(f, "machine limits (%d threads, medians of %d runs, kernel isa %s):\n", hw->n_threads, hw->reps,
            kvi_isa_name());
    fprintf(f, "  read bandwidth     %8.1f GB/s   (%zu MiB buffer, read method %s)\n", hw->read_gbs,
            hw->read_bytes >> 20, hw->read_method ? hw->read_method : "none");
    for (int k = 0; hw->n_read_methods > 1 && k < hw->n_read_methods && k < KVI_HW_READ_METHODS_MAX; k++)
        fprintf(f, "    %-20s %8.1f GB/s median, %5.1f best\n", hw->read_methods[k].method,
                hw->read_methods[k].median_gbs, hw->read_methods[k].best_gbs);
    if (hw->fp32_gflops > 0)
        fprintf(f, "  FP32 FMA           %8.1f GFLOP/s (%s)\n", hw->fp32_gflops, hw->fp32_isa);
    else
        fprintf(f, "  FP32 FMA                n/a\n");
    if (hw->bf16_gflops > 0)
        fprintf(f, "  BF16 vdpbf16ps     %8.1f GFLOP/s\n", hw->bf16_gflops);
    else
        fprintf(f, "  BF16 vdpbf16ps           n/a (no AVX512_BF16)\n");
    if (hw->int8_gops > 0)
        fprintf(f, "  INT8 vpdpbusd      %8.1f GOP/s\n", hw->int8_gops);
    else
        fprintf(f, "  INT8 vpdpbusd            n/a (no AVX512_VNNI)\n");
    if (hw->amx_int8_gops > 0) fprintf(f, "  INT8 AMX tdpbssd   %8.1f GOP/s\n", hw->amx_int8_gops);
    if (hw->amx_bf16_gflops > 0) fprintf(f, "  BF16 AMX tdpbf16ps %8.1f GFLOP/s\n", hw->amx_bf16_gflops);
}

/* The compute peak that weights of type t are multiplied at, and its name. */
static double pp_limit(const kvi_hw_limits *hw, kvi_type t, const char **kind)
{
    if (t == KVI_TYPE_F32) {
        *kind = "fp32";
        return hw->fp32_gflops;
    }
    if ((t == KVI_TYPE_F16 || t == KVI_TYPE_BF16) && hw->f16_on_amx && hw->amx_bf16_gflops > 0) {
        *kind = "amx-bf16"; /* three tile products per weight (fmm_amx.h) */
        return hw->amx_bf16_gflops;
    }
    if ((t == KVI_TYPE_Q8_0 || t == KVI_TYPE_Q4_0) && hw->amx_int8_gops > 0) { /* their prefill runs on AMX */
        *kind = "amx-int8";
        return hw->amx_int8_gops;
    }
    if (t != KVI_TYPE_F16 && t != KVI_TYPE_BF16 && hw->int8_gops > 0) {
        *kind = "int8";
        return hw->int8_gops;
    }
    *kind = "fp32";
    return hw->fp32_gflops;
}

/* ---- one test --------------------------------------------------------------- */

typedef struct bench_ctx {
    kvi_engine *e;
    kvi_seq *seq;
    kvi_seq *base; /* holds the depth; seq is a fork of it per run */
    kvi_batch *b;
    int32_t n_vocab;
    int batch;
    uint64_t rng;
} bench_ctx;

/* Puts a fresh sequence at exactly depth positions: the base sequence holds them
 * (prefilled untimed, in chunks, once per depth) and each run takes a fork of it
 * (its blocks shared, copy on write), so no run rewinds a cache: sliding-window
 * layers release what they pass and cannot be rewound far. */
static int set_depth(bench_ctx *c, int depth)
{
    if (c->seq) kvi_seq_free(c->seq);
    c->seq = NULL;
    if (kvi_seq_len(c->base) > depth && kvi_seq_truncate(c->base, depth) != 0) {
        kvi_seq_free(c->base); /* released window parts: start the base again */
        if (!(c->base = kvi_seq_create(c->e))) return cli_error("bench: cannot create a sequence");
    }
    int32_t pos = kvi_seq_len(c->base);
    while (pos < depth) {
        int n = depth - pos < c->batch ? depth - pos : c->batch;
        kvi_batch_clear(c->b);
        for (int i = 0; i < n; i++)
            kvi_batch_add(c->b, c->base, (int32_t)(xorshift(&c->rng) % (uint64_t)c->n_vocab), pos + i, false);
        kvi_error err = { 0 };
        int rc = kvi_step(c->e, c->b, &err);
        if (rc)
            return cli_error("bench: filling the cache to depth %d failed: %s", depth,
                             err.msg[0] ? err.msg : kvi_strerror(rc));
        pos += n;
    }
    if (!(c->seq = kvi_seq_fork(c->base))) return cli_error("bench: cannot fork the depth sequence");
    return 0;
}

/* Milliseconds of one run of the test (pp when n_prompt > 0, else tg), or < 0. */
static double run_once(bench_ctx *c, int n_prompt, int n_gen, int depth)
{
    if (set_depth(c, depth)) return -1.0;
    kvi_error err = { 0 };
    double ms = 0.0;
    if (n_prompt > 0) {
        kvi_batch_clear(c->b);
        for (int i = 0; i < n_prompt; i++)
            kvi_batch_add(c->b, c->seq, (int32_t)(xorshift(&c->rng) % (uint64_t)c->n_vocab), depth + i,
                          i == n_prompt - 1);
        double t0 = kvi_time_ms();
        int rc = kvi_step(c->e, c->b, &err);
        ms = kvi_time_ms() - t0;
        if (rc) {
            cli_error("bench: pp%d failed: %s", n_prompt, err.msg[0] ? err.msg : kvi_strerror(rc));
            return -1.0;
        }
        return ms;
    }
    for (int i = 0; i < n_gen; i++) {
        kvi_batch_clear(c->b);
        kvi_batch_add(c->b, c->seq, (int32_t)(xorshift(&c->rng) % (uint64_t)c->n_vocab), depth + i, true);
        double t0 = kvi_time_ms();
        int rc = kvi_step(c->e, c->b, &err);
        ms += kvi_time_ms() - t0;
        if (rc) {
            cli_error("bench: tg%d failed at token %d: %s", n_gen, i,
                      err.msg[0] ? err.msg : kvi_strerror(rc));
            return -1.0;
        }
    }
    return ms;
}

static int run_test(bench_ctx *c, int n_prompt, int n_gen, int depth, int reps, bench_result *r)
{
    memset(r, 0, sizeof *r);
    r->n_prompt = n_prompt;
    r->n_gen = n_gen;
    r->n_depth = depth;
    if (depth > 0)
        snprintf(r->name, sizeof r->name, "%s%d @ d%d", n_prompt ? "pp" : "tg", n_prompt ? n_prompt : n_gen,
                 depth);
    else
        snprintf(r->name, sizeof r->name, "%s%d", n_prompt ? "pp" : "tg", n_prompt ? n_prompt : n_gen);
    fprintf(stderr, "kvinfer bench: %s: warm-up + %d runs\n", r->name, reps);
    /* warm-up: the whole prefill; the first (up to) 16 decode steps */
    if (run_once(c, n_prompt, n_gen > 16 ? 16 : n_gen, depth) < 0) return 1;
    int tokens = n_prompt ? n_prompt : n_gen;
    double sum = 0.0;
    kvi_stats st0, st1;
    kvi_stats_get(c->e, NULL, &st0);
    for (int k = 0; k < reps; k++) {
        double ms = run_once(c, n_prompt, n_gen, depth);
        if (ms < 0) return 1;
        r->samples_ts[k] = ms > 0 ? tokens * 1e3 / ms : 0.0;
        sum += r->samples_ts[k];
    }
    kvi_stats_get(c->e, NULL, &st1);
    r->pool_parallel = st1.pool_runs_parallel - st0.pool_runs_parallel;
    r->pool_serial = st1.pool_runs_serial - st0.pool_runs_serial;
    r->n_samples = reps;
    r->avg_ts = sum / reps;
    double ss = 0.0;
    for (int k = 0; k < reps; k++) ss += (r->samples_ts[k] - r->avg_ts) * (r->samples_ts[k] - r->avg_ts);
    r->stddev_ts = reps > 1 ? sqrt(ss / (reps - 1)) : 0.0;
    return 0;
}

/* ---- the command ------------------------------------------------------------ */

static void human_size(char *buf, size_t cap, double bytes)
{
    if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, cap, "%.2f MiB", bytes / (1024.0 * 1024));
}

static void human_count(char *buf, size_t cap, double n)
{
    if (n >= 1e9)
        snprintf(buf, cap, "%.2f B", n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, cap, "%.2f M", n / 1e6);
    else
        snprintf(buf, cap, "%.2f K", n / 1e3);
}

/* -p, -n, -d: a list of at most BENCH_MAX_VALUES integers. 1 consumed, 0 not
 * one of them, -1 error printed. */
static int list_flag(int argc, char **argv, int *i, bench_opts *o)
{
    const char *a = argv[*i];
    int64_t *vals = NULL, hi = 1 << 20;
    int *n = NULL;
    if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt"))
        vals = o->pp, n = &o->n_pp;
    else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen"))
        vals = o->tg, n = &o->n_tg;
    else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth"))
        vals = o->depth, n = &o->n_depth, hi = 1 << 22;
    else if (!strcmp(a, "--parallel"))
        vals = o->par, n = &o->n_par, hi = 4096;
    if (!vals) return 0;
    const char *v = cli_flag_value(argc, argv, i);
    if (!v) return -1;
    if (!parse_list(v, 0, hi, vals, n))
        return -cli_error("%s: '%s' is not a list of at most %d integers in [0, %d]", a, v, BENCH_MAX_VALUES,
                          (int)hi);
    return 1;
}

static int parse_opts(int argc, char **argv, bench_opts *o, bool *help)
{
    memset(o, 0, sizeof *o);
    cli_common_init(&o->c);
    o->pp[0] = 512, o->n_pp = 1;
    o->tg[0] = 128, o->n_tg = 1;
    o->depth[0] = 0, o->n_depth = 1;
    o->reps = 5;
    o->batch = 512;
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            *help = true;
            return 0;
        } else if ((r = cli_opt_common(argc, argv, &i, &o->c, BENCH_OPTS)) != 0 ||
                   (r = list_flag(argc, argv, &i, o)) != 0) {
            if (r < 0) return 1;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (cli_flag_i64(a, cli_flag_value(argc, argv, &i), 1, BENCH_MAX_REPS, &o->reps) < 0) return 1;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (cli_flag_i64(a, cli_flag_value(argc, argv, &i), 1, 1 << 20, &o->batch) < 0) return 1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--hw")) {
            o->hw_only = true;
        } else if (!strcmp(a, "--no-hw")) {
            o->no_hw = true;
        } else if (!strcmp(a, "--quick")) {
            o->quick = true;
        } else if (!strcmp(a, "--lora-each")) {
            o->lora_each = true;
        } else if (a[0] == '-') {
            return cli_error("bench: unknown option '%s' (kvinfer bench --help)", a);
        } else {
            return cli_error("bench: unexpected argument '%s'", a);
        }
    }
    if (o->hw_only && o->no_hw) return cli_error("bench: --hw and --no-hw contradict each other");
    if (o->lora_each && (o->n_par == 0 || o->c.n_lora == 0))
        return cli_error("bench: --lora-each needs --parallel and at least one --lora adapter");
    return 0;
}

/* Adds the llama-bench fields and the roofline of one result to arr. */
static void result_json(cJSON *arr, const bench_result *r, const kvi_model_info *info, uint64_t n_params,
                        int threads, const kvi_hw_limits *hw, double achieved, double limit, const char *kind)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "test", r->name);
    cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
    cJSON_AddNumberToObject(o, "n_gen", r->n_gen);
    cJSON_AddNumberToObject(o, "n_depth", r->n_depth);
    cJSON_AddNumberToObject(o, "n_threads", threads);
    cJSON_AddNumberToObject(o, "model_size", (double)info->weight_bytes);
    cJSON_AddNumberToObject(o, "model_n_params", (double)n_params);
    cJSON_AddNumberToObject(o, "avg_ts", r->avg_ts);
    cJSON_AddNumberToObject(o, "stddev_ts", r->stddev_ts);
    cJSON_AddNumberToObject(o, "pool_runs_parallel", (double)r->pool_parallel);
    cJSON_AddNumberToObject(o, "pool_runs_serial", (double)r->pool_serial);
    int tokens = r->n_prompt ? r->n_prompt : r->n_gen;
    cJSON_AddNumberToObject(o, "avg_ns", r->avg_ts > 0 ? tokens * 1e9 / r->avg_ts : 0.0);
    cJSON *s = cJSON_AddArrayToObject(o, "samples_ts");
    for (int k = 0; k < r->n_samples; k++) cJSON_AddItemToArray(s, cJSON_CreateNumber(r->samples_ts[k]));
    if (r->n_prompt) {
        cJSON_AddNumberToObject(o, "achieved_gops", achieved);
        if (hw) {
            cJSON_AddNumberToObject(o, "limit_gops", limit);
            cJSON_AddStringToObject(o, "limit_kind", kind);
        }
    } else {
        cJSON_AddNumberToObject(o, "achieved_gbs", achieved);
        if (hw) {
            cJSON_AddNumberToObject(o, "limit_gbs", limit);
            cJSON_AddStringToObject(o, "limit_kind", kind);
        }
    }
    if (hw) cJSON_AddNumberToObject(o, "roofline_frac", limit > 0 ? achieved / limit : 0.0);
    cJSON_AddItemToArray(arr, o);
}

static int bench_hw_only(const bench_opts *o)
{
    kvi_hw_limits hw;
    kvi_error err = { 0 };
    int rc = kvi_hw_bench(&hw, (int)o->c.n_threads, o->quick, &err);
    if (rc) return cli_error("bench --hw: %s", err.msg[0] ? err.msg : kvi_strerror(rc));
    if (o->json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddItemToObject(root, "hw", hw_json(&hw));
        return cli_print_json(root, "bench: out of memory writing JSON");
    }
    hw_print(stdout, &hw);
    return 0;
}

/* What the report needs besides the results: the model and the limits. */
typedef struct bench_model {
    kvi_model_info info;
    uint64_t n_params, mm_params, active_params;
    size_t decode_bytes; /* the active bytes of one decode token */
    int threads;
    const kvi_hw_limits *hw; /* NULL: not measured */
    cJSON *pipe;             /* mpirun: the stages and their costs (cli_pipe_json), or NULL */
} bench_model;

/* Below the table: what one token reads, the decode roofline's bytes (of a
 * mixture of experts only its chosen experts). */
static void active_print(const bench_model *bm)
{
    char ap[32], np[32], ab[32], fb[32];
    human_count(ap, sizeof ap, (double)bm->active_params);
    human_count(np, sizeof np, (double)bm->n_params);
    human_size(ab, sizeof ab, (double)bm->decode_bytes);
    human_size(fb, sizeof fb, (double)bm->info.weight_bytes);
    printf("\nactive per decode token: %s of %s params, %s of %s weights", ap, np, ab, fb);
    if (bm->info.n_expert > 0)
        printf(" (%d of %d experts per layer)", bm->info.n_expert_used, bm->info.n_expert);
    putchar('\n');
}

/* The table on stdout, or the JSON document with --json. */
static int bench_report(const bench_opts *o, const bench_model *bm, const bench_result *res, int n_tests)
{
    const kvi_model_info *info = &bm->info;
    const char *tname = kvi_type_name(info->weight_type) ? kvi_type_name(info->weight_type) : "?";
    const char *kvname = kvi_type_name(o->c.kv_k) ? kvi_type_name(o->c.kv_k) : "?";
    char size_s[32], par_s[32], model_s[128];
    human_size(size_s, sizeof size_s, (double)info->weight_bytes);
    human_count(par_s, sizeof par_s, (double)bm->n_params);
    snprintf(model_s, sizeof model_s, "%s %s %s", info->arch, par_s, tname);
    cJSON *root = o->json ? cJSON_CreateObject() : NULL;
    cJSON *arr = NULL;
    if (root) {
        cJSON_AddStringToObject(root, "model", o->c.model ? o->c.model : "default");
        cJSON_AddStringToObject(root, "model_type", model_s);
        cJSON_AddStringToObject(root, "type", tname);
        cJSON_AddNumberToObject(root, "threads", bm->threads);
        cJSON_AddNumberToObject(root, "model_size", (double)info->weight_bytes);
        cJSON_AddNumberToObject(root, "model_n_params", (double)bm->n_params);
        cJSON_AddNumberToObject(root, "model_active_params", (double)bm->active_params);
        cJSON_AddNumberToObject(root, "decode_bytes", (double)bm->decode_bytes);
        cJSON_AddNumberToObject(root, "n_expert", info->n_expert);
        cJSON_AddNumberToObject(root, "n_expert_used", info->n_expert_used);
        cJSON_AddStringToObject(root, "type_k", kvname);
        cJSON_AddStringToObject(root, "type_v", kvname);
        arr = cJSON_AddArrayToObject(root, "results");
    } else {
        printf("| %-24s | %10s | %9s | %5s | %7s | %14s | %20s | %-36s |\n", "model", "size", "params",
               "type", "threads", "test", "t/s", "roofline");
        printf("| %.24s | %.10s | %.9s | %.5s | %.7s | %.14s | %.20s | %.36s |\n", "------------------------",
               "----------", "---------", "-----", "-------", "--------------", "--------------------",
               "------------------------------------");
    }
    for (int i = 0; i < n_tests; i++) {
        const bench_result *r = &res[i];
        const char *kind = "read";
        double achieved, limit = 0.0;
        if (r->n_prompt) {
            achieved = 2.0 * (double)bm->mm_params * r->avg_ts / 1e9;
            if (bm->hw) limit = pp_limit(bm->hw, info->weight_type, &kind);
        } else {
            achieved = (double)bm->decode_bytes * r->avg_ts / 1e9;
            if (bm->hw) limit = bm->hw->read_gbs;
        }
        if (root) {
            result_json(arr, r, info, bm->n_params, bm->threads, bm->hw, achieved, limit, kind);
            continue;
        }
        char ts[40], roof[80];
        snprintf(ts, sizeof ts, "%.2f ± %.2f", r->avg_ts, r->stddev_ts);
        const char *unit = r->n_prompt ? "GOP/s" : "GB/s";
        if (bm->hw && limit > 0)
            snprintf(roof, sizeof roof, "%.1f %s = %.0f%% of %.0f (%s)", achieved, unit,
                     100.0 * achieved / limit, limit, kind);
        else
            snprintf(roof, sizeof roof, "%.1f %s", achieved, unit);
        printf("| %-24s | %10s | %9s | %5s | %7d | %14s | %20s | %-36s |\n", model_s, size_s, par_s, tname,
               bm->threads, r->name, ts, roof);
    }
    if (root) {
        if (bm->hw) cJSON_AddItemToObject(root, "hw", hw_json(bm->hw));
        if (bm->pipe) cJSON_AddItemToObject(root, "pipeline", bm->pipe);
        return cli_print_json(root, "bench: out of memory writing JSON");
    }
    active_print(bm);
    for (int i = 0; i < n_tests; i++) {
        const bench_result *r = &res[i];
        const uint64_t all = r->pool_parallel + r->pool_serial;
        if (r->pool_serial > 0)
            printf("%s: %.1f%% of the thread pool's runs on the calling thread alone (measured faster than "
                   "waiting for the workers: a shared CPU or parts too small)\n",
                   r->name, 100.0 * (double)r->pool_serial / (double)all);
    }
    if (bm->hw) {
        putchar('\n');
        hw_print(stdout, bm->hw);
    }
    return 0;
}

/* --parallel: each B of the list, then the table or the JSON. */
static int bench_parallel_cmd(const bench_opts *o)
{
    const int pp = (int)o->pp[0], tg = (int)o->tg[0];
    for (int i = 0; i < o->n_par; i++)
        if (o->par[i] < 1) return cli_error("bench: --parallel values must be at least 1");
    if (tg < 1) return cli_error("bench: --parallel needs -n of at least 1");
    kvi_model *m = cli_opt_load_model(&o->c);
    if (!m) return 1;
    kvi_engine_params ep;
    cli_opt_engine_params(&o->c, &ep);
    ep.n_threads = o->c.n_threads > 0 ? (int)o->c.n_threads : cli_n_cores();
    bench_par_result res[BENCH_MAX_VALUES];
    int rc = 0, n = 0;
    for (int i = 0; rc == 0 && i < o->n_par; i++)
        rc = bench_parallel(m, &ep, &o->c, o->lora_each, (int)o->par[i], pp, tg, &res[n++]);
    if (rc == 0 && o->json) {
        cJSON *j = cJSON_CreateObject();
        kvi_model_info info;
        kvi_model_get_info(m, &info);
        cJSON_AddStringToObject(j, "model", o->c.model);
        cJSON_AddStringToObject(j, "type",
                                kvi_type_name(info.weight_type) ? kvi_type_name(info.weight_type) : "?");
        cJSON_AddNumberToObject(j, "threads", ep.n_threads);
        cJSON *arr = cJSON_AddArrayToObject(j, "parallel");
        for (int i = 0; i < n; i++) bench_parallel_json(arr, &res[i]);
        char *s = cJSON_Print(j);
        if (s) puts(s);
        free(s);
        cJSON_Delete(j);
    } else if (rc == 0) {
        printf("model %s, %d threads, through the scheduler (no HTTP)", o->c.model, ep.n_threads);
        if (o->c.n_lora > 0)
            printf(", %d LoRA adapter%s (%s)", o->c.n_lora, o->c.n_lora > 1 ? "s" : "",
                   o->lora_each ? "sequence i: adapter i mod n alone" : "every sequence: all of them");
        printf("\n\n");
        bench_parallel_print(stdout, res, n);
    }
    kvi_model_free(m);
    return rc;
}

/* Every pp test, then every tg test, each at every depth, into res. 0, or 1
 * with the error printed. */
static int bench_tests(const bench_opts *o, bench_ctx *c, bench_result *res, int *n_tests)
{
    int rc = 0;
    *n_tests = 0;
    for (int k = 0; rc == 0 && k < o->n_pp; k++)
        for (int d = 0; rc == 0 && d < o->n_depth; d++)
            if (o->pp[k] > 0)
                rc = run_test(c, (int)o->pp[k], 0, (int)o->depth[d], (int)o->reps, &res[(*n_tests)++]);
    for (int k = 0; rc == 0 && k < o->n_tg; k++)
        for (int d = 0; rc == 0 && d < o->n_depth; d++)
            if (o->tg[k] > 0)
                rc = run_test(c, 0, (int)o->tg[k], (int)o->depth[d], (int)o->reps, &res[(*n_tests)++]);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o;
    bool help;
    if (parse_opts(argc, argv, &o, &help)) return 1;
    if (help) {
        fputs(bench_help, stdout);
        return 0;
    }
    if (o.hw_only) return bench_hw_only(&o);
    if (o.n_par > 0) return bench_parallel_cmd(&o);

    int max_need = 1, max_pp = 1;
    for (int d = 0; d < o.n_depth; d++)
        for (int k = 0; k < BENCH_MAX_VALUES; k++) {
            int64_t need = o.depth[d] + (k < o.n_pp ? o.pp[k] : 0);
            int64_t need2 = o.depth[d] + (k < o.n_tg ? o.tg[k] : 0);
            if (need > max_need) max_need = (int)need;
            if (need2 > max_need) max_need = (int)need2;
        }
    for (int k = 0; k < o.n_pp; k++)
        if (o.pp[k] > max_pp) max_pp = (int)o.pp[k];
    if (max_need > (1 << 24))
        return cli_error("bench: depth + tokens = %d exceeds 16777216 positions", max_need);

    kvi_model *m = cli_opt_load_model(&o.c);
    if (!m) return 1;
    bench_model bm = { .n_params = kvi_model_n_params(m),
                       .mm_params = kvi_model_matmul_params(m),
                       .active_params = kvi_model_active_params(m),
                       .decode_bytes = kvi_model_decode_bytes(m),
                       .threads = o.c.n_threads > 0 ? (int)o.c.n_threads : cli_n_cores() };
    kvi_model_get_info(m, &bm.info);

    bench_ctx c = { .n_vocab = kvi_n_vocab(m), .batch = (int)o.batch, .rng = 0x9E3779B97F4A7C15ull };
    kvi_engine_params ep;
    cli_opt_engine_params(&o.c, &ep);
    ep.n_threads = bm.threads;
    ep.n_ctx = max_need;
    ep.n_seq_max = 2; /* the depth sequence and a run's fork of it */
    ep.n_batch_max = max_pp > (int)o.batch ? max_pp : (int)o.batch;
    int rc = 0;
    if (!(c.e = cli_engine_create(m, &ep, "bench: "))) rc = 1;
    if (rc == 0 && cli_opt_lora(&o.c, c.e, "bench: ")) rc = 1;
    if (rc == 0 && cli_pipe_attach(c.e, &ep)) rc = 1; /* mpirun: stage 0 of the pipeline */
    if (rc == 0 && !(c.base = kvi_seq_create(c.e))) rc = cli_error("bench: cannot create a sequence");
    if (rc == 0 && !(c.b = kvi_batch_create(ep.n_batch_max)))
        rc = cli_error("bench: out of memory creating a batch of %d rows", ep.n_batch_max);

    int n_tests = 0;
    bench_result *res = calloc(2 * BENCH_MAX_VALUES * BENCH_MAX_VALUES, sizeof *res);
    if (rc == 0 && !res) rc = cli_error("bench: out of memory");
    if (rc == 0) rc = bench_tests(&o, &c, res, &n_tests);

    /* the limits, measured in the same run, after the model tests */
    kvi_hw_limits hw;
    if (rc == 0 && !o.no_hw && cli_pipe_active()) /* the other ranks poll MPI: the cores are not free */
        fprintf(stderr, "kvinfer bench: under mpirun the machine's limits are not measured\n");
    else if (rc == 0 && !o.no_hw) {
        fprintf(stderr, "kvinfer bench: measuring the machine's limits%s\n", o.quick ? " (quick)" : "");
        kvi_error herr = { 0 };
        int hr = kvi_hw_bench(&hw, bm.threads, o.quick, &herr);
        if (hr)
            fprintf(stderr, "kvinfer: warning: limits not measured: %s\n",
                    herr.msg[0] ? herr.msg : kvi_strerror(hr));
        else
            bm.hw = &hw;
    }
    if (rc == 0 && cli_pipe_active()) { /* each stage's costs over all the tests */
        cli_pipe_summary(c.e);
        if (o.json) bm.pipe = cli_pipe_json(c.e);
    }
    if (rc == 0) rc = bench_report(&o, &bm, res, n_tests);
    else cJSON_Delete(bm.pipe);
    free(res);
    if (c.b) kvi_batch_free(c.b);
    if (c.seq) kvi_seq_free(c.seq);
    if (c.base) kvi_seq_free(c.base);
    if (c.e) kvi_engine_free(c.e);
    kvi_model_free(m);
    return rc;
}
