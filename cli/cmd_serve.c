/*
 * cmd_serve.c — `kvinfer serve`: the OpenAI-compatible server.
 *
 * Order of life: parse flags; listen (GET /health answers 503 "loading");
 * load the model; create one engine (n_seq_max = --parallel) and one scheduler
 * whose engine thread runs every forward pass; print "kvinfer: ready" on stdout;
 * wait for SIGINT/SIGTERM; then refuse new work, free the scheduler (every
 * request still alive is cancelled and its client told), stop HTTP, free the
 * engine and the model.
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
#include "cli/cli.h"
#include "server/server.h"
#include "cli/run_spec.h"

#include <inttypes.h>
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
    "POST /tokenize, POST /detokenize, GET /health, GET /metrics (Prometheus), GET /v1/kv,\n"
    "and a chat page at GET /. Requests share one KV pool and every forward pass\n"
    "(continuous batching; long prompts are prefilled in chunks).\n"
    "\n"
    "  -m, --model PATH        GGUF model, llama2.c checkpoint or Hugging Face folder\n"
    "                          (default: ../shared/models/stories260K.gguf if it exists)\n"
    "  --tokenizer PATH        tokenizer.bin for llama2.c checkpoints\n"
    "  --mmap                  map the model file instead of reading it\n"
    "  --host ADDR             IPv4 address to bind (default 127.0.0.1)\n"
    "  --port N                TCP port (default 8080; 0: any free port, printed)\n"
    "  -t, --threads N         worker threads (default 0: every core)\n"
    "  -c, --ctx-size N        context of EACH sequence (default: the model's context_length)\n"
    "  --parallel N            sequences decoding at once (default 16)\n"
    "  --queue-max N           requests waiting beyond those; more get HTTP 429 (default 256)\n"
    "  --kv-budget BYTES       bound on the whole KV pool, e.g. 2GiB (default: parallel x ctx tokens)\n"
    "  --batch-tokens N        rows per forward pass: decode rows first, then prefill chunks\n"
    "                          (default 512)\n"
    "  --kv-type T             KV cache type for K and V: f32 or f16 (default f16)\n"
    "  --no-prefix-cache       recompute every prompt (default: whole KV blocks of earlier\n"
    "                          prompts are reused; usage.prompt_tokens_details.cached_tokens)\n"
    "  --api-key KEY           require \"Authorization: Bearer KEY\" on /v1 endpoints\n"
    "  --alias NAME            the model's name in the API (default: file name without .gguf)\n"
    "  --spec ngram            speculative decoding by prompt lookup for every request\n"
    "  --draft PATH            speculative decoding with a draft model of the same vocabulary\n"
    "  --draft-max K           most tokens drafted per round (default 8)\n"
    "  --draft-min N           verify only proposals of at least N tokens (default 1)\n"
    "  --ngram N               longest suffix matched by --spec ngram (default 3)\n"
    "  --no-spec-adapt         always draft K (default: K follows the acceptance and the\n"
    "                          measured cost of extra rows at the current load)\n"
    "                          A request's \"speculative\": false turns it off for that request;\n"
    "                          usage.timings reports spec_drafted, spec_accepted, spec_acceptance.\n"
    "  --quiet                 no per-request log lines\n"
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

int cmd_serve(int argc, char **argv)
{
    const char *model = NULL, *tokenizer = NULL, *alias = NULL, *api_key = NULL, *host = "127.0.0.1";
    bool mmap = false, quiet = false, prefix_cache = true;
    int64_t port = 8080, threads = 0, ctx = 0, parallel = 16, queue_max = 256, batch_tokens = 512;
    size_t budget = 0;
    kvi_type kv = KVI_TYPE_F16;
    run_spec_opts so;
    run_spec_opts_default(&so);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        const int sf = run_spec_parse_flag(argc, argv, &i, &so);
        if (sf < 0) return 1;
        if (sf > 0) continue;
#define VALUE() (v = cli_flag_value(argc, argv, &i))
#define INT_FLAG(var, lo, hi)                                                                 \
    do {                                                                                      \
        if (!VALUE()) return 1;                                                               \
        if (!cli_parse_i64(v, lo, hi, &var)) return cli_error("%s: '%s' is not an integer in [%d, %d]", a, v, lo, hi); \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(serve_help, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = VALUE())) return 1;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(tokenizer = VALUE())) return 1;
        } else if (!strcmp(a, "--mmap")) {
            mmap = true;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            prefix_cache = false;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--host")) {
            if (!(host = VALUE())) return 1;
        } else if (!strcmp(a, "--port")) {
            INT_FLAG(port, 0, 65535);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            INT_FLAG(threads, 0, 1024);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            INT_FLAG(ctx, 0, 1 << 24);
        } else if (!strcmp(a, "--parallel")) {
            INT_FLAG(parallel, 1, 4096);
        } else if (!strcmp(a, "--queue-max")) {
            INT_FLAG(queue_max, 0, 1 << 20);
        } else if (!strcmp(a, "--batch-tokens")) {
            INT_FLAG(batch_tokens, 1, 1 << 16);
        } else if (!strcmp(a, "--kv-budget")) {
            if (!VALUE()) return 1;
            if (!cli_parse_size(v, &budget)) return cli_error("--kv-budget: '%s' is not a size", v);
        } else if (!strcmp(a, "--kv-type")) {
            if (!VALUE() || !cli_parse_kv_type(a, v, &kv)) return 1;
        } else if (!strcmp(a, "--api-key")) {
            if (!(api_key = VALUE())) return 1;
        } else if (!strcmp(a, "--alias")) {
            if (!(alias = VALUE())) return 1;
        } else {
            return cli_error("serve: unknown option '%s' (kvinfer serve --help)", a);
        }
#undef VALUE
#undef INT_FLAG
    }
    if (!model) model = cli_default_model();
    if (!model) return cli_error("serve: no model given (-m MODEL)");
    if (so.ngram && so.draft_path) return cli_error("serve: choose one speculation: --spec ngram or --draft PATH");
    if (so.draft_min > so.draft_max)
        return cli_error("serve: --draft-min %d is larger than --draft-max %d", (int)so.draft_min, (int)so.draft_max);
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
    char *name = alias ? strdup(alias) : model_name_of(model);
    if (!srv || !name) {
        free(srv);
        free(name);
        return cli_error("out of memory");
    }
    pthread_mutex_init(&srv->mu, NULL);
    srv_metrics_init(&srv->metrics);
    srv->cfg.host = host;
    srv->cfg.port = (int)port;
    srv->cfg.api_key = api_key;
    srv->cfg.model_name = name;
    srv->cfg.quiet = quiet;
    kvi_sampler_params_default(&srv->cfg.sampling);
    srv->cfg.sampling.temp = 0.8f;
    srv->cfg.sampling.top_k = 40;
    srv->cfg.sampling.top_p = 0.95f;
    srv->cfg.sampling.min_p = 0.05f;
    srv->cfg.sampling.repeat_penalty = 1.0f;
    srv->cfg.sampling.repeat_last_n = 64;
    srv->cfg.sampling.seed = (uint64_t)time(NULL);

    int rc = 0;
    kvi_error err = {0};
    if (srv_start(srv, &err) != 0) {
        rc = cli_error("serve: %s", err.msg);
        goto out;
    }
    printf("kvinfer: listening on http://%s:%d\n", host, srv_bound_port(srv));
    fflush(stdout);

    kvi_model *m = cli_load_model(model, mmap, tokenizer);
    if (!m) { rc = 1; goto out; }
    srv->m = m;
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    kvi_engine_params ep;
    cli_engine_params_default(&ep);
    ep.n_threads = (int)threads;
    ep.n_ctx = (int)ctx;
    ep.kv_type_k = ep.kv_type_v = kv;
    ep.n_seq_max = (int)parallel;
    ep.kv_budget_bytes = budget;
    ep.n_batch_max = (int)(batch_tokens + parallel);
    ep.prefix_cache = prefix_cache;
    srv->e = kvi_engine_create(m, &ep, &err);
    if (!srv->e) { rc = cli_error("serve: cannot create the engine: %s", err.msg); goto out; }
    srv->cfg.n_ctx = kvi_engine_n_ctx(srv->e);
    kvi_sched_params sp;
    kvi_sched_params_default(&sp);
    sp.n_parallel = (int)parallel;
    sp.queue_max = (int)queue_max;
    sp.batch_tokens = (int)batch_tokens;
    kvi_sched *s = kvi_sched_create(srv->e, &sp, &err);
    if (s && run_spec_enabled(&so)) {
        kvi_spec_params pp;
        kvi_spec_params_default(&pp);
        pp.draft_max = so.draft_max;
        pp.draft_min = so.draft_min;
        pp.ngram_max = so.ngram_n;
        pp.adapt = so.adapt;
        if (so.draft_path) {
            if (!(dm = cli_load_model(so.draft_path, mmap, NULL))) {
                kvi_sched_free(s);
                rc = 1;
                goto out;
            }
            kvi_engine_params dp;
            cli_engine_params_default(&dp);
            dp.n_threads = (int)threads;
            dp.n_ctx = srv->cfg.n_ctx;
            dp.kv_type_k = dp.kv_type_v = kv;
            dp.n_seq_max = (int)parallel;
            dp.prefix_cache = false;
            if (!(de = kvi_engine_create(dm, &dp, &err))) {
                kvi_sched_free(s);
                rc = cli_error("serve: cannot create the draft engine: %s", err.msg);
                goto out;
            }
        }
        if (kvi_sched_set_spec(s, &pp, de, &err) != 0) {
            kvi_sched_free(s);
            rc = cli_error("serve: speculative decoding: %s", err.msg);
            goto out;
        }
        fprintf(stderr, "kvinfer: speculative decoding: %s, draft-max %d\n", so.draft_path ? so.draft_path : "ngram",
                (int)so.draft_max);
    }
    if (!s || kvi_sched_start(s, &err) != 0) {
        kvi_sched_free(s);
        rc = cli_error("serve: cannot start the scheduler: %s", err.msg);
        goto out;
    }
    kvi_stats ks;
    kvi_stats_get(srv->e, NULL, &ks);
    __atomic_store_n(&srv->s, s, __ATOMIC_RELEASE);
    fprintf(stderr, "kvinfer: serving '%s' (context %d per sequence, %d parallel, KV pool %d blocks of %d tokens = %zu bytes)\n",
            name, srv->cfg.n_ctx, (int)parallel, ks.kv_blocks_total, ks.kv_block_size, ks.kv_bytes_budget);
    printf("kvinfer: ready\n");
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "kvinfer: signal %d, shutting down\n", sig);
    pthread_mutex_lock(&srv->mu);
    srv->closing = true;
    pthread_mutex_unlock(&srv->mu);
    __atomic_store_n(&srv->s, NULL, __ATOMIC_RELEASE);
    kvi_sched_free(s);
out:
    srv_stop(srv);
    __atomic_store_n(&srv->s, NULL, __ATOMIC_RELEASE);
    kvi_engine_free(de);
    kvi_model_free(dm);
    kvi_engine_free(srv->e);
    kvi_model_free(srv->m);
    srv_metrics_free(&srv->metrics);
    pthread_mutex_destroy(&srv->mu);
    free(name);
    free(srv);
    return rc;
}
