/*
 * cmd_serve.c — `kvinfer serve`: the OpenAI-compatible server.
 *
 * Order of life: parse flags; listen (GET /health answers 503 "loading");
 * load the model; create one engine (n_seq_max = --parallel) and one scheduler
 * whose engine thread runs every forward pass; print "kvinfer: ready" on stdout;
 * wait for SIGINT/SIGTERM; then drain (new generations get 503 while those in
 * flight finish, at most --shutdown-timeout seconds), refuse new work, free the
 * scheduler (every request still alive is cancelled and its client told), stop
 * HTTP, free the engine and the model.
 *
 * Speculative decoding (--spec ngram, --draft PATH): the scheduler gives every
 * request a kvi_spec (a request's "speculative": false opts out); a draft model
 * gets one engine of its own with a sequence per parallel slot, the target's
 * context and KV type, freed after the scheduler.
 *
 * Invariant: defaults equal `kvinfer run`'s (KV type f16, sampling temp 0.8,
 * top-k 40, top-p 0.95, min-p 0.05, context = the model's), so a greedy request
 * gets the same tokens from both.
 */
#include "cli/cli_opts.h"
#include "server/server.h"
#include "cli/run_spec.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char serve_help[] =
    "usage: kvinfer serve [-m MODEL] [options]\n"
    "\n"
    "Serves the model over HTTP with an OpenAI-compatible API: POST /v1/completions,\n"
    "POST /v1/chat/completions (\"stream\": true for server-sent events), GET /v1/models,\n"
    "POST /tokenize, POST /detokenize, POST /apply-template (the chat prompt as text),\n"
    "GET /health, GET /metrics (Prometheus), GET /v1/kv, GET /props and GET /slots\n"
    "(llama-server's shapes),\n"
    "and a chat page at GET /. Requests share one KV pool and every forward pass\n"
    "(continuous batching; long prompts are prefilled in chunks).\n"
    "\n"
    "  -m, --model PATH        GGUF model, llama2.c checkpoint or Hugging Face folder\n"
    "                          (default: ../shared/models/stories260K.gguf if it exists)\n"
    "  --tokenizer PATH        tokenizer.bin for llama2.c checkpoints\n"
    "  --mmap                  map the model file instead of reading it\n"
    "  --host ADDR             IPv4 address to bind (default 127.0.0.1)\n"
    "  --port N                TCP port (default 8080; 0: any free port, printed)\n"
    "  --lora [NAME=]FILE      LoRA adapter (GGUF), scale 1, named NAME (default: the file name\n"
    "                          less .gguf); --lora-scaled FILE S (or FILE:S[,..]);\n"
    "                          listed at GET /lora-adapters, ids in load order\n"
    "  --lora-runtime          allow POST /v1/load_lora_adapter {\"lora_name\", \"lora_path\"} and\n"
    "                          /v1/unload_lora_adapter {\"lora_name\"} while serving (vLLM's;\n"
    "                          off by default: they read files named by the client)\n"
    "  -t, --threads N         worker threads (default 0: every core)\n"
    "  -c, --ctx-size N        context of EACH sequence (default: the model's context_length)\n"
    "  --parallel N            sequences decoding at once (default 16)\n"
    "  --queue-max N           requests waiting beyond those; more get HTTP 503 + Retry-After (default 256)\n"
    "  --kv-budget BYTES       bound on the whole KV pool, e.g. 2GiB (default: parallel x ctx tokens)\n"
    "  --batch-tokens N        rows per forward pass: decode rows first, then prefill chunks\n"
    "                          (default 512)\n"
    "  --pp-lanes N            batches in flight at once, each with its own requests (default 0:\n"
    "                          one per pipeline stage under mpirun, else 1; 1: one step at a\n"
    "                          time; at most 4)\n"
    "  --kv-type T             KV cache type for K and V: f32 or f16 (default f16)\n"
    "  --kv-cache-ram BYTES    host-RAM tier for prefix blocks the pool evicts (default 1GiB; 0: off)\n"
    "  --kv-cache-dir DIR      disk tier: evicted and, at shutdown, all cached prefix blocks as files\n"
    "                          in DIR, found again after a restart (default: off)\n"
    "  --kv-cache-disk BYTES   bound on the disk tier's files (default 8GiB)\n"
    "  --ctx-policy P          a conversation past the context continues: shift, sinks or heavy\n"
    "                          makes room (default error: a 400); requests may opt out or in\n"
    "                          with \"context_policy\": \"error\" | P; usage.positions_dropped\n"
    "  --keep N, --sink N, --window N   the policy's parameters, as for `run`\n"
    "  --no-prefix-cache       recompute every prompt (default: whole KV blocks of earlier\n"
    "                          prompts are reused; usage.prompt_tokens_details.cached_tokens)\n"
    "  --chat-template-file F  render chat prompts with the Jinja template in F instead of\n"
    "                          the model's (default: its tokenizer.chat_template; a model\n"
    "                          without one uses the built-in layouts)\n" CLI_CONTENT_FORMAT_HELP
    "  --special-in-content    recognise special-token text inside messages too (Hugging\n"
    "                          Face's tokenization; default: message text stays plain text)\n"
    "  --reasoning-format F    auto: a template's <think>...</think> (or gpt-oss analysis)\n"
    "                          text goes to message.reasoning_content (default); none: it\n"
    "                          stays in content. Tool calls are parsed in the template's\n"
    "                          format (Hermes/Qwen, Llama 3, Mistral, gpt-oss, DeepSeek,\n"
    "                          Granite, Command R, Kimi K2, GLM ...; logged at start).\n"
    "  -to, --timeout S        close a connection silent for S seconds while it sends its\n"
    "                          request (slow clients; default 10)\n"
    "  --body-max BYTES        larger request bodies get HTTP 413 (default 4194304)\n"
    "  --conn-max N            connections served at once; more get HTTP 503 + Retry-After\n"
    "                          (default the larger of 1024 and 8 x --parallel)\n"
    "  --conn-per-ip N         of them from one address (default the larger of 256 and 8 x --parallel)\n"
    "  --ssl-cert-file F       serve HTTPS with the PEM certificate (chain) in F ...\n"
    "  --ssl-key-file F        ... and its PEM private key in F (both or neither)\n"
    "  --api-key KEY           require \"Authorization: Bearer KEY\" on every route but GET /,\n"
    "                          /health and OPTIONS (/metrics too, unless --metrics-public)\n"
    "  --metrics-public        GET /metrics without the key\n"
    "  --cors-origin ORIGIN    Access-Control-Allow-Origin of every answer (default *);\n"
    "                          OPTIONS on any path answers the CORS preflight (204)\n"
    "  --alias NAME            the model's name in the API (default: file name without .gguf);\n"
    "                          requests may name any model and are answered with this one\n"
    "  --strict-model          a request naming another model gets HTTP 404 model_not_found\n"
    "  -n, --n-predict N       most tokens any request generates: a larger or absent\n"
    "                          max_tokens is cut to N, finish_reason \"length\" (default -1:\n"
    "                          no cap)\n"
    "  -l, --logit-bias T(+|-)B  add B to token T's logit in every request, beside the\n"
    "                          request's own logit_bias (repeatable; e.g. -l 2-inf: token 2\n"
    "                          never sampled; B in [-100, 100] or -inf)\n"
    "  --responses-max N       /v1/responses kept for previous_response_id and GET (default\n"
    "                          1024; the oldest are evicted first)\n"
    "  --responses-max-bytes S and the bytes they may hold, e.g. 64MiB (default 256MiB)\n"
    "  --spec ngram            speculative decoding by prompt lookup for every request\n"
    "  --draft PATH            speculative decoding with a draft model of the same vocabulary\n"
    "  --draft-max K           most tokens drafted per round (default 8)\n"
    "  --draft-min N           verify only proposals of at least N tokens (default 1)\n"
    "  --ngram N               longest suffix matched by --spec ngram (default 3)\n"
    "  --no-spec-adapt         always draft K (default: K follows the acceptance and the\n"
    "                          measured cost of extra rows at the current load)\n"
    "                          A request's \"speculative\": false turns it off for that request;\n"
    "                          usage.timings reports spec_drafted, spec_accepted, spec_acceptance.\n"
    "  --log-format F          the request log on stderr: text (default) or json, one line\n"
    "                          per request: time, id, route, status, client, prompt /\n"
    "                          cached / generated tokens, time to first token, duration,\n"
    "                          finish reason and the body fields the server ignored\n"
    "  --shutdown-timeout S    on SIGTERM/SIGINT: new requests get HTTP 503 (GET /health too)\n"
    "                          while those in flight finish, for at most S seconds (a second\n"
    "                          signal: at once); then the rest are cancelled and the server\n"
    "                          exits (default 30)\n"
    "  --embeddings            serve POST /v1/embeddings, /embedding(s) (the default for an\n"
    "                          encoder, whose chat routes answer HTTP 400)\n"
    "  --reranking             serve POST /v1/rerank and /rerank (pooling rank: the model's\n"
    "                          classification head)\n"
    "  --pooling P             none, mean, cls, last or rank (default: the file's pooling_type)\n"
    "  --quiet                 no request log (nor the template and tool-format notes)\n"
    "  -h, --help              this help\n"
    "\n"
    "Sampling defaults are `kvinfer run`'s (temperature 0.8, top-k 40, top-p 0.95,\n"
    "min-p 0.05); requests override them with the OpenAI fields.\n";

static char *model_name_of(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *s = strdup(*base ? base : path);
    if (!s) return NULL;
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/') s[--n] = 0;
    if (n > 5 && !strcmp(s + n - 5, ".gguf")) s[n - 5] = 0;
    return s;
}

/* The shared flags `serve` takes (cli/cli_opts.h): -c 0 is the model's context,
 * --kv-budget 0 the default bound; --kv-type for K and V only. */
#define SERVE_OPTS                                                                                         \
    (CLI_OPT_MODEL | CLI_OPT_TOKENIZER | CLI_OPT_MMAP | CLI_OPT_THREADS | CLI_OPT_CTX | CLI_OPT_CTX_MIN0 | \
     CLI_OPT_KV_TYPE | CLI_OPT_KV_BUDGET | CLI_OPT_BUDGET_ZERO | CLI_OPT_NO_PREFIX | CLI_OPT_LORA |        \
     CLI_OPT_KV_TIERS | CLI_OPT_POLICY)

#define SERVE_BIAS_MAX 256 /* most -l flags */

typedef struct serve_opts {
    cli_common c;
    const char *alias, *api_key, *host, *chat_template_file, *cors_origin;
    const char *ssl_cert_file, *ssl_key_file;
    bool quiet, special_in_content, no_reasoning;
    int content_format; /* kvi_content_format */
    int64_t port, parallel, queue_max, batch_tokens, lanes;
    int64_t timeout_s, body_max, conn_max, conn_per_ip; /* HTTP limits (0: the server's default) */
    bool strict_model, log_json, metrics_public;
    int64_t n_predict, shutdown_timeout;
    int32_t bias_ids[SERVE_BIAS_MAX]; /* -l, in the order given */
    float bias_vals[SERVE_BIAS_MAX];
    int32_t n_bias;
    int64_t responses_max;                              /* /v1/responses store (0: the default) */
    size_t responses_max_bytes;
    run_spec_opts so;                                   /* speculative decoding */
    bool embeddings, reranking;                         /* --embeddings, --reranking */
    bool lora_runtime;                                  /* --lora-runtime */
    int pooling;                                        /* --pooling (kvi_pooling; MODEL: the file's) */
} serve_opts;

/* serve's own integer flags: 1 consumed, 0 not one of them, -1 error printed. */
static int serve_int_flag(int argc, char **argv, int *i, serve_opts *o)
{
    const char *a = argv[*i];
    int64_t *dst = NULL, lo = 0, hi = 0;
    if (!strcmp(a, "--port"))
        dst = &o->port, lo = 0, hi = 65535;
    else if (!strcmp(a, "--parallel"))
        dst = &o->parallel, lo = 1, hi = 4096;
    else if (!strcmp(a, "--queue-max"))
        dst = &o->queue_max, lo = 0, hi = 1 << 20;
    else if (!strcmp(a, "--batch-tokens"))
        dst = &o->batch_tokens, lo = 1, hi = 1 << 16;
    else if (!strcmp(a, "--pp-lanes"))
        dst = &o->lanes, lo = 0, hi = KVI_STEP_DEPTH_MAX;
    else if (!strcmp(a, "--timeout") || !strcmp(a, "-to"))
        dst = &o->timeout_s, lo = 1, hi = 3600;
    else if (!strcmp(a, "--body-max"))
        dst = &o->body_max, lo = 1024, hi = (int64_t)1 << 30;
    else if (!strcmp(a, "--conn-max"))
        dst = &o->conn_max, lo = 1, hi = 65536;
    else if (!strcmp(a, "--conn-per-ip"))
        dst = &o->conn_per_ip, lo = 1, hi = 65536;
    else if (!strcmp(a, "--shutdown-timeout"))
        dst = &o->shutdown_timeout, lo = 0, hi = 86400;
    else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
        dst = &o->n_predict, lo = -1, hi = 1 << 30;
    else if (!strcmp(a, "--responses-max"))
        dst = &o->responses_max, lo = 1, hi = 1 << 24;
    if (!dst) return 0;
    return cli_flag_i64(a, cli_flag_value(argc, argv, i), lo, hi, dst);
}

/* -l TOKEN(+|-)BIAS (llama.cpp's syntax: "15043+1", "2-inf"): 0, or 1 with
 * the error printed. The id's range is checked once the model is loaded. */
static int serve_bias_flag(const char *v, serve_opts *o)
{
    char *end = NULL;
    const long id = v && *v >= '0' && *v <= '9' ? strtol(v, &end, 10) : -1;
    if (id < 0 || id > INT32_MAX || (*end != '+' && *end != '-'))
        return cli_error("serve: --logit-bias '%s' is not TOKEN+BIAS or TOKEN-BIAS", v ? v : "");
    const char *num = end + 1;
    if (*num == '+' || *num == '-')
        return cli_error("serve: --logit-bias '%s' is not TOKEN+BIAS or TOKEN-BIAS", v);
    const bool neg = *end == '-';
    float b = strtof(num, &end);
    if (end == num || *end || isnan(b) || (isinf(b) && !neg) || (!isinf(b) && b > 100.0f))
        return cli_error("serve: --logit-bias '%s': the bias must be a number in [-100, 100] or -inf", v);
    if (o->n_bias == SERVE_BIAS_MAX)
        return cli_error("serve: more than %d --logit-bias flags", SERVE_BIAS_MAX);
    o->bias_ids[o->n_bias] = (int32_t)id;
    o->bias_vals[o->n_bias++] = neg ? -b : b;
    return 0;
}

/* 0: parsed; 1: error printed; 2: help printed. */
static int parse_serve_args(int argc, char **argv, serve_opts *o)
{
    memset(o, 0, sizeof *o);
    cli_common_init(&o->c);
    o->c.kv_cache_ram = CLI_KV_CACHE_RAM;
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 16;
    o->queue_max = 256;
    o->batch_tokens = 512;
    o->shutdown_timeout = 30;
    o->pooling = KVI_POOLING_MODEL;
    run_spec_opts_default(&o->so);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = run_spec_parse_flag(argc, argv, &i, &o->so);
        if (r == 0 && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            fputs(serve_help, stdout);
            return 2;
        }
        if (r == 0) r = cli_opt_common(argc, argv, &i, &o->c, SERVE_OPTS);
        if (r == 0) r = serve_int_flag(argc, argv, &i, o);
        if (r < 0) return 1;
        if (r > 0) continue;
        const char **str = !strcmp(a, "--host")                 ? &o->host
                           : !strcmp(a, "--api-key")            ? &o->api_key
                           : !strcmp(a, "--alias")              ? &o->alias
                           : !strcmp(a, "--chat-template-file") ? &o->chat_template_file
                           : !strcmp(a, "--cors-origin")        ? &o->cors_origin
                           : !strcmp(a, "--ssl-cert-file")      ? &o->ssl_cert_file
                           : !strcmp(a, "--ssl-key-file")       ? &o->ssl_key_file
                                                                : NULL;
        if (str) {
            if (!(*str = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--strict-model")) {
            o->strict_model = true;
        } else if (!strcmp(a, "--metrics-public")) {
            o->metrics_public = true;
        } else if (!strcmp(a, "--log-format")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return 1;
            if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
                return cli_error("serve: --log-format must be text or json (got '%s')", v);
            o->log_json = !strcmp(v, "json");
        } else if (!strcmp(a, "-l") || !strcmp(a, "--logit-bias")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v || serve_bias_flag(v, o) != 0) return 1;
        } else if (!strcmp(a, "--lora-runtime")) {
            o->lora_runtime = true;
        } else if (!strcmp(a, "--embeddings") || !strcmp(a, "--embedding")) {
            o->embeddings = true;
        } else if (!strcmp(a, "--reranking") || !strcmp(a, "--rerank")) {
            o->reranking = true;
        } else if (!strcmp(a, "--pooling")) {
            const char *v = cli_flag_value(argc, argv, &i);
            kvi_pooling pl;
            if (!v) return 1;
            if (kvi_pooling_parse(v, &pl) != 0 || pl == KVI_POOLING_MODEL)
                return cli_error("serve: --pooling must be none, mean, cls, last or rank (got '%s')", v);
            o->pooling = pl;
        } else if (!strcmp(a, "--special-in-content")) {
            o->special_in_content = true;
        } else if (!strcmp(a, "--chat-template-content-format")) {
            if (cli_flag_content_format(cli_flag_value(argc, argv, &i), &o->content_format) < 0) return 1;
        } else if (!strcmp(a, "--responses-max-bytes")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return 1;
            if (!cli_parse_size(v, &o->responses_max_bytes) || o->responses_max_bytes == 0)
                return cli_error("serve: --responses-max-bytes: '%s' is not a size", v);
        } else if (!strcmp(a, "--reasoning-format")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return 1;
            if (!strcmp(v, "none"))
                o->no_reasoning = true;
            else if (strcmp(v, "auto") != 0 && strcmp(v, "deepseek") != 0)
                return cli_error("serve: --reasoning-format must be auto or none (got '%s')", v);
        } else {
            return cli_error("serve: unknown option '%s' (kvinfer serve --help)", a);
        }
    }
    if (!o->c.model) o->c.model = cli_default_model();
    if (!o->c.model) return cli_error("serve: no model given (-m MODEL)");
    if (!o->ssl_cert_file != !o->ssl_key_file)
        return cli_error("serve: HTTPS needs both --ssl-cert-file and --ssl-key-file");
    if (o->so.ngram && o->so.draft_path)
        return cli_error("serve: choose one speculation: --spec ngram or --draft PATH");
    if (o->so.draft_min > o->so.draft_max)
        return cli_error("serve: --draft-min %d is larger than --draft-max %d", (int)o->so.draft_min,
                         (int)o->so.draft_max);
    return 0;
}

/* Gives the scheduler speculative decoding; with --draft, loads the draft model
 * and its engine (a sequence per parallel slot, the target's context and KV
 * type) into *dm, *de, which the caller frees after the scheduler. 0, or 1 with
 * the error printed. */
static int serve_spec(const serve_opts *o, kvi_sched *s, int n_ctx, kvi_model **dm, kvi_engine **de)
{
    kvi_error err = { 0 };
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.draft_max = o->so.draft_max;
    pp.draft_min = o->so.draft_min;
    pp.ngram_max = o->so.ngram_n;
    pp.adapt = o->so.adapt;
    if (o->so.draft_path) {
        if (!(*dm = cli_load_model(o->so.draft_path, o->c.mmap, NULL))) return 1;
        kvi_engine_params dp;
        cli_engine_params_default(&dp);
        dp.n_threads = (int)o->c.n_threads;
        dp.n_ctx = n_ctx;
        dp.kv_type_k = dp.kv_type_v = o->c.kv_k;
        dp.n_seq_max = (int)o->parallel;
        dp.prefix_cache = false;
        if (!(*de = kvi_engine_create(*dm, &dp, &err)))
            return cli_error("serve: cannot create the draft engine: %s", err.msg);
    }
    if (kvi_sched_set_spec(s, &pp, *de, &err) != 0)
        return cli_error("serve: speculative decoding: %s", err.msg);
    fprintf(stderr, "kvinfer: speculative decoding: %s, draft-max %d\n",
            o->so.draft_path ? o->so.draft_path : "ngram", (int)o->so.draft_max);
    return 0;
}

/* --ssl-cert-file / --ssl-key-file read (PEM texts, malloc'd; NULL without
 * TLS). 0, or 1 with the error printed. */
static int serve_tls(const serve_opts *o, char **cert, char **key)
{
    size_t len = 0;
    if (!o->ssl_cert_file) return 0;
    if (!(*cert = cli_read_file(o->ssl_cert_file, &len)))
        return cli_error("serve: cannot read --ssl-cert-file '%s': %s", o->ssl_cert_file, strerror(errno));
    if (!(*key = cli_read_file(o->ssl_key_file, &len)))
        return cli_error("serve: cannot read --ssl-key-file '%s': %s", o->ssl_key_file, strerror(errno));
    return 0;
}

/* Waits for the requests in flight (srv_drain) up to timeout_ms, in short
 * rounds so that a second signal ends the wait at once. */
static void serve_drain(srv_server *srv, const sigset_t *sigs, double timeout_ms)
{
    const double end = kvi_time_ms() + timeout_ms;
    const struct timespec now = { 0, 0 };
    while (!srv_drain(srv, 100.0)) {
        if (kvi_time_ms() >= end) {
            fprintf(stderr,
                    "kvinfer: --shutdown-timeout %.0f s reached: the requests still running are cancelled\n",
                    timeout_ms / 1000.0);
            return;
        }
        const int sig = sigtimedwait(sigs, NULL, &now);
        if (sig > 0) {
            fprintf(stderr, "kvinfer: signal %d again: the requests still running are cancelled\n", sig);
            return;
        }
    }
}

/* The request log's sink: a line on stderr (one call, so lines never mix). */
static void log_stderr(void *user, const char *line)
{
    (void)user;
    fprintf(stderr, "%s\n", line);
}

/* The server's configuration before it listens: sampling defaults are run's. */
static void serve_config(srv_server *srv, const serve_opts *o, const char *name)
{
    pthread_mutex_init(&srv->mu, NULL);
    srv_metrics_init(&srv->metrics);
    srv->cfg.host = o->host;
    srv->cfg.port = (int)o->port;
    srv->cfg.api_key = o->api_key;
    srv->cfg.model_name = name;
    srv->cfg.quiet = o->quiet;
    srv->cfg.log_fn = o->quiet ? NULL : log_stderr;
    srv->cfg.log_json = o->log_json;
    srv->cfg.cors_origin = o->cors_origin;
    srv->cfg.metrics_public = o->metrics_public;
    srv->cfg.model_path = o->c.model;
    srv->cfg.n_parallel = (int)o->parallel;
    srv->cfg.timeout_s = (int)o->timeout_s;
    srv->cfg.body_max = (size_t)o->body_max;
    srv->cfg.conn_max = (unsigned)o->conn_max;
    srv->cfg.conn_per_ip = (unsigned)o->conn_per_ip;
    srv->cfg.responses_max = (size_t)o->responses_max;
    srv->cfg.responses_max_bytes = o->responses_max_bytes;
    srv->cfg.special_in_content = o->special_in_content;
    srv->cfg.no_reasoning = o->no_reasoning;
    srv->cfg.strict_model = o->strict_model;
    srv->cfg.n_predict = o->n_predict > 0 ? (int32_t)o->n_predict : 0;
    srv->cfg.bias_ids = o->bias_ids;
    srv->cfg.bias_vals = o->bias_vals;
    srv->cfg.n_bias = o->n_bias;
    srv->cfg.content_format = o->content_format;
    srv->cfg.embeddings = o->embeddings;
    srv->cfg.lora_runtime = o->lora_runtime;
    srv->cfg.reranking = o->reranking;
    srv->cfg.pooling = o->pooling;
    kvi_sampler_params_default(&srv->cfg.sampling);
    srv->cfg.sampling.temp = 0.8f;
    srv->cfg.sampling.top_k = 40;
    srv->cfg.sampling.top_p = 0.95f;
    srv->cfg.sampling.min_p = 0.05f;
    srv->cfg.sampling.repeat_penalty = 1.0f;
    srv->cfg.sampling.repeat_last_n = 64;
    srv->cfg.sampling.seed = (uint64_t)time(NULL);
}

/* The chat template (the model's, --chat-template-file's, or the built-in
 * layouts), logged. 0, or 1 with the error printed. */
static int serve_template(srv_server *srv, const serve_opts *o)
{
    kvi_error err = { 0 };
    size_t len = 0;
    char *text = NULL;
    if (o->chat_template_file && !(text = cli_read_file(o->chat_template_file, &len)))
        return cli_error("serve: cannot read '%s': %s", o->chat_template_file, strerror(errno));
    int rc = srv_template_init(srv, text, len, o->chat_template_file, &err);
    if (!rc && srv->tmpl) srv_tools_init(srv, text ? text : kvi_model_chat_template(srv->m));
    for (const char *p = srv->notes, *nl; p && *p; p = nl + 1) { /* each ends in "\n" */
        nl = strchr(p, '\n');
        fprintf(stderr, "kvinfer: %.*s\n", (int)(nl - p), p);
    }
    /* GET /props shows the template in use (freed by cmd_serve) */
    const char *shown = text ? text : kvi_model_chat_template(srv->m);
    if (!rc && srv->tmpl && shown) srv->cfg.chat_template = strdup(shown);
    free(text);
    return rc ? cli_error("serve: %s", err.msg) : 0;
}

/* Under mpirun: when serve last asked the ranks for each stage's figures, and
 * whether requests were alive after the last step (the engine thread's alone once
 * the scheduler runs). */
static double g_pipe_metrics_ms;
static bool g_pipe_busy;

/* The scheduler's after_step under mpirun: each stage's figures into /metrics,
 * asked of the ranks (on the engine thread, between steps) at most once a second
 * while requests run, and once when the last one ends (idle: the figures are final). */
static void serve_pipe_metrics(void *user, kvi_engine *e, int n_alive)
{
    const double now = kvi_time_ms();
    const bool went_idle = n_alive == 0 && g_pipe_busy;
    g_pipe_busy = n_alive > 0;
    if (!went_idle && (n_alive == 0 || now - g_pipe_metrics_ms < 1000.0)) return;
    g_pipe_metrics_ms = now;
    char *text = cli_pipe_metrics(e);
    if (text) srv_metrics_set_extra(&((srv_server *)user)->metrics, text);
}

/* Embeddings and reranking (--embeddings, --reranking, an encoder): an engine of
 * their own, one sequence. 0, or 1 with the error printed. */
static int serve_embed(srv_server *srv, const serve_opts *o, const kvi_engine_params *ep)
{
    const bool encoder = kvi_model_is_encoder(srv->m);
    int pooling = o->reranking ? KVI_POOLING_RANK : o->pooling;
    if (!o->embeddings && !o->reranking && !encoder && o->pooling == KVI_POOLING_MODEL) return 0;
    kvi_engine_params eep = *ep;
    eep.n_seq_max = 1;
    kvi_engine *e = cli_engine_create(srv->m, &eep, "serve: embeddings: ");
    if (!e) return 1;
    kvi_error err = { 0 };
    if (srv_embed_attach(srv, e, (kvi_pooling)pooling, &err) != 0) {
        kvi_engine_free(e);
        return cli_error("serve: %s", err.msg);
    }
    return 0;
}

/* Loads the model, creates the engine and starts the scheduler (with
 * speculation when asked); *sp gets the running scheduler. 0, or 1 with the
 * error printed. */
static int serve_start(srv_server *srv, const serve_opts *o, kvi_sched **sp, kvi_model **dm, kvi_engine **de)
{
    kvi_error err = { 0 };
    if (!(srv->m = cli_opt_load_model(&o->c))) return 1;
    if (serve_template(srv, o) != 0) return 1;
    kvi_engine_params ep;
    cli_opt_engine_params(&o->c, &ep);
    ep.n_seq_max = (int)o->parallel;
    ep.n_batch_max = (int)(o->batch_tokens + o->parallel);
    if (!(srv->e = cli_engine_create(srv->m, &ep, "serve: "))) return 1;
    if (cli_opt_lora(&o->c, srv->e, "serve: ")) return 1;
    for (int i = 0; i < kvi_engine_lora_count(srv->e); i++) /* names select adapters: one each */
        for (int j = 0; j < i; j++)
            if (!strcmp(kvi_lora_name(kvi_engine_lora_get(srv->e, i)), kvi_lora_name(kvi_engine_lora_get(srv->e, j))))
                return cli_error("serve: two LoRA adapters named '%s' (name them: --lora NAME=PATH)",
                                 kvi_lora_name(kvi_engine_lora_get(srv->e, i)));
    if (cli_pipe_attach(srv->e, &ep)) return 1; /* mpirun: stage 0 of the pipeline */
    srv->cfg.n_ctx = kvi_engine_n_ctx(srv->e);
    srv->cfg.ctx_policy = cli_opt_policy(&o->c);
    if (serve_embed(srv, o, &ep) != 0) return 1;
    for (int32_t i = 0; i < o->n_bias; i++)
        if (o->bias_ids[i] >= kvi_n_vocab(srv->m))
            return cli_error("serve: --logit-bias: token %d is not in the vocabulary [0, %d)",
                             (int)o->bias_ids[i], (int)kvi_n_vocab(srv->m));
    kvi_sched_params sched;
    kvi_sched_params_default(&sched);
    sched.n_parallel = (int)o->parallel;
    sched.queue_max = (int)o->queue_max;
    sched.batch_tokens = (int)o->batch_tokens;
    sched.n_lanes = (int)o->lanes;
    if (cli_pipe_active()) { /* the stages in /metrics from the start, then after steps */
        sched.after_step = serve_pipe_metrics;
        sched.after_step_user = srv;
        srv_metrics_set_extra(&srv->metrics, cli_pipe_metrics(srv->e));
        g_pipe_metrics_ms = kvi_time_ms();
    }
    kvi_sched *s = kvi_sched_create(srv->e, &sched, &err);
    if (s && run_spec_enabled(&o->so) && serve_spec(o, s, srv->cfg.n_ctx, dm, de) != 0) {
        kvi_sched_free(s);
        return 1;
    }
    if (!s || kvi_sched_start(s, &err) != 0) {
        kvi_sched_free(s);
        return cli_error("serve: cannot start the scheduler: %s", err.msg);
    }
    *sp = s;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    serve_opts o;
    int prc = parse_serve_args(argc, argv, &o);
    if (prc != 0) return prc == 2 ? 0 : 1;
    kvi_model *dm = NULL;
    kvi_engine *de = NULL;

    /* every thread started from here on inherits this mask: signals come to sigwait */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_server *srv = calloc(1, sizeof *srv);
    char *name = o.alias ? strdup(o.alias) : model_name_of(o.c.model);
    if (!srv || !name) {
        free(srv);
        free(name);
        return cli_error("out of memory");
    }
    serve_config(srv, &o, name);

    int rc = 0;
    kvi_error err = { 0 };
    kvi_sched *s = NULL;
    char *tls_cert = NULL, *tls_key = NULL;
    if (serve_tls(&o, &tls_cert, &tls_key) != 0) {
        rc = 1;
        goto out;
    }
    srv->cfg.tls_cert_pem = tls_cert;
    srv->cfg.tls_key_pem = tls_key;
    if (srv_start(srv, &err) != 0) {
        rc = cli_error("serve: %s", err.msg);
        goto out;
    }
    printf("kvinfer: listening on %s://%s:%d\n", o.ssl_cert_file ? "https" : "http", o.host,
           srv_bound_port(srv));
    fflush(stdout);
    if (serve_start(srv, &o, &s, &dm, &de) != 0) {
        rc = 1;
        goto out;
    }
    kvi_stats ks;
    kvi_stats_get(srv->e, NULL, &ks);
    __atomic_store_n(&srv->s, s, __ATOMIC_RELEASE);
    fprintf(stderr,
            "kvinfer: serving '%s' (context %d per sequence, %d parallel, KV pool %d blocks of %d tokens = "
            "%zu bytes)\n",
            name, srv->cfg.n_ctx, (int)o.parallel, ks.kv_blocks_total, ks.kv_block_size, ks.kv_bytes_budget);
    printf("kvinfer: ready\n");
    fflush(stdout);

    int sig = 0;
    if (cli_pipe_active()) { /* a failed pipeline ends the server: requests got 503 */
        const struct timespec second = { 1, 0 };
        while ((sig = sigtimedwait(&sigs, NULL, &second)) < 0 && !cli_pipe_failure()) continue;
    } else {
        sigwait(&sigs, &sig);
    }
    if (sig > 0) {
        fprintf(stderr, "kvinfer: signal %d, shutting down (requests in flight get up to %d s)\n", sig,
                (int)o.shutdown_timeout);
        serve_drain(srv, &sigs, (double)o.shutdown_timeout * 1000.0);
    } else {
        rc = cli_error("serve: the pipeline failed, shutting down");
    }
    pthread_mutex_lock(&srv->mu);
    srv->closing = true;
    pthread_mutex_unlock(&srv->mu);
    __atomic_store_n(&srv->s, NULL, __ATOMIC_RELEASE);
    kvi_sched_free(s);
    if (!cli_pipe_failure()) cli_pipe_summary(srv->e); /* mpirun: each stage's costs */
out:
    srv_stop(srv);
    __atomic_store_n(&srv->s, NULL, __ATOMIC_RELEASE);
    kvi_engine_free(de);
    kvi_model_free(dm);
    kvi_engine_free(srv->e);
    srv_embed_free(srv);
    srv_template_free(srv);
    free((char *)srv->cfg.chat_template);
    free(tls_cert);
    free(tls_key);
    srv_store_free(srv);
    kvi_model_free(srv->m);
    srv_metrics_free(&srv->metrics);
    pthread_mutex_destroy(&srv->mu);
    free(name);
    free(srv);
    return rc;
}
