/*
 * cmd_run.c — `kvinfer run`: text generation with the two phases made visible.
 *
 * Pipeline (public API only): one engine with one sequence; prefill = kvi_steps
 * of up to 512 prompt rows each (one forward pass each; logits of the last row only);
 * then decode = one row per kvi_step, each row's token sampled from the previous
 * step's logits. With --no-kv-cache every decode step forgets the cache
 * (kvi_seq_truncate(seq, 0)) and recomputes all tokens so far as one batch: the
 * same tokens for quadratically more rows, counted in rows_computed.
 *
 * Invariants: all_ids[0 .. n_prompt + n_gen) holds the prompt then the generated
 * tokens; in KV mode the sequence caches positions 0 .. n_prompt + n_gen - 2
 * after each decode step (the newest token is run by the next step). Streaming
 * never prints an incomplete UTF-8 sequence: bytes wait until it completes.
 * With --json stdout holds exactly one JSON object and nothing else.
 */
#include "cli/cli_opts.h"
#include "cli/run_spec.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Prompt rows per prefill step */
#define RUN_PREFILL_STEP 512

static const char run_help[] =
    "usage: kvinfer run [-m MODEL] [-p TEXT | -f FILE | --tokens IDS] [options]\n"
    "\n"
    "Generates text: the prompt goes through prefill (passes of 512 rows), then tokens are decoded\n"
    "one per step against the KV cache and streamed to stdout. A summary of both\n"
    "phases (tokens, times, tokens/s, KV cache bytes) is printed on stderr.\n"
    "\n"
    "model and prompt:\n"
    "  -m, --model PATH        GGUF model, llama2.c checkpoint or Hugging Face folder\n"
    "                          (default: ../shared/models/stories260K.gguf if it exists)\n"
    "  --tokenizer PATH        tokenizer.bin for llama2.c checkpoints (default: next to it)\n"
    "  --lora FILE             LoRA adapter (GGUF), scale 1; repeatable\n"
    "  --lora-scaled FILE S    LoRA adapter at scale S (or FILE:S[,FILE:S]); repeatable\n"
    "  --mmap                  map the model file instead of reading it (default: off)\n"
    "  -p, --prompt TEXT       the prompt (default: empty, i.e. BOS alone)\n"
    "  -f, --file PATH         read the prompt from a file (one trailing newline dropped)\n"
    "  --tokens IDS            prompt token ids \"1,2,3\", used exactly (no BOS added)\n"
    "  --chat                  the prompt is a user's message: laid out by the model's chat\n"
    "                          template (Jinja; built-in layouts for a model without one)\n"
    "                          with the assistant's turn opened\n"
    "  --chat-template-file F  --chat with the Jinja template in F\n"
    "  -sys, --system TEXT     --chat with a system message first\n"
    "  --special               special-token text in the prompt (<s>) becomes the token\n"
    "                          (default: off)\n"
    "generation:\n"
    "  -n, --n-predict N       tokens to generate (default 256; -1: until end of\n"
    "                          generation or a full context)\n"
    "  --ignore-eos            do not stop at the end-of-generation token (default: stop)\n"
    "  --temp T                temperature (default 0.8; 0: greedy)\n"
    "  --top-k K               keep the K most likely tokens (default 40; 0: off)\n"
    "  --top-p P               nucleus sampling (default 0.95; 1: off)\n"
    "  --min-p P               drop tokens below P * max probability (default 0.05; 0: off)\n"
    "  --repeat-penalty R      penalty for repeated tokens (default 1.0: off)\n"
    "  --repeat-last-n N       accepted tokens (prompt too) the penalties look back over\n"
    "                          (default 64; 0: off)\n"
    "  --seed S                sampler seed (default: random, printed in the summary)\n";

/* The help after the sampler flags of cli_sampling_help. */
static const char run_help_tail[] =
    "constrained output (not with --spec / --draft):\n"
    "  --grammar TEXT          GBNF grammar the output must follow (rule root; llama.cpp's\n"
    "                          format); generation stops where it is complete\n"
    "  --grammar-file FILE     the same, read from FILE\n"
    "  --json-schema S         JSON Schema the output must satisfy: inline JSON when S starts\n"
    "                          with '{', else a file to read; keywords it cannot enforce\n"
    "                          are an error naming them\n"
    "  --json-schema-file FILE the same, always read from FILE\n"
    "engine:\n"
    "  -t, --threads N         worker threads (default 0: every core)\n"
    "  -c, --ctx-size N        context size in tokens (default: the model's context_length)\n"
    "  --kv-type T             KV cache type for K and V: f32, f16, q8_0, q4_0, or q4\n"
    "                          (4-bit KIVI: keys per channel, values q4_0) (default f16)\n"
    "  --kv-type-k T           KV cache type for K only (default f16)\n"
    "  --kv-type-v T           KV cache type for V only (default f16)\n"
    "  --no-kv-cache           recompute every token at each step instead of caching K and V\n"
    "                          (same tokens, quadratically more work; default: cache)\n"
    "  --kv-block N            tokens per KV block (default 16)\n"
    "  --kv-budget SIZE        bound on the whole KV pool, bytes or 512MiB / 2GiB style\n"
    "                          (default: one context's worth)\n"
    "  --no-prefix-cache       do not index full KV blocks for reuse (default: on)\n"
    "  --ctx-policy P          when the context is full: error (default), shift, sinks, heavy\n"
    "  --keep N                shift: first tokens never dropped (default 0)\n"
    "  --sink N                sinks, heavy: attention-sink tokens kept (default 4)\n"
    "  --window N              sinks: recent tokens kept (default: all that fit);\n"
    "                          heavy: recent window (default: a quarter of the context)\n"
    "  --save-session FILE     write the sequence's tokens and KV cache to FILE at the end\n"
    "  --load-session FILE     restore a saved session first and reuse its longest common\n"
    "                          prefix with the prompt (same model, KV types, block size)\n"
    "output:\n"
    "  --json                  print one JSON object (prompt_tokens, tokens, text,\n"
    "                          finish_reason, stats) and nothing else on stdout\n"
    "  -h, --help              this help\n";

typedef struct run_opts {
    cli_common c; /* model, prompt, threads, context, KV cache, context policy */
    bool ignore_eos, no_kv, json;
    int64_t n_predict; /* -1: unlimited */
    kvi_sampler_params sp;
    cli_sampling so; /* DRY's breakers */
    bool seed_given;
    const char *save_session, *load_session;
    run_spec_opts spec; /* speculative decoding (cli/run_spec.c) */
    /* constrained output: at most one of them */
    const char *grammar, *grammar_file, *json_schema, *json_schema_file;
    /* a one-turn chat: the prompt is the user's message, laid out by a chat template */
    bool chat;
    const char *chat_template_file, *system;
} run_opts;

/* The shared flags `run` takes (cli/cli_opts.h): all of them, with the default ranges. */
#define RUN_OPTS                                                                                         \
    (CLI_OPT_MODEL | CLI_OPT_TOKENIZER | CLI_OPT_MMAP | CLI_OPT_PROMPT | CLI_OPT_THREADS | CLI_OPT_CTX | \
     CLI_OPT_KV_TYPE | CLI_OPT_KV_TYPE_KV | CLI_OPT_KV_BLOCK | CLI_OPT_KV_BUDGET | CLI_OPT_NO_PREFIX |   \
     CLI_OPT_POLICY | CLI_OPT_LORA)

/* Parses a float flag value; prints an error naming the flag on failure. */
static int flag_f32(const char *flag, const char *v, float lo, float hi, float *out)
{
    float x;
    if (!v) return -1;
    if (!cli_parse_f32(v, &x) || x < lo || x > hi) {
        cli_error("%s: '%s' is not a number in [%g, %g]", flag, v, (double)lo, (double)hi);
        return -1;
    }
    *out = x;
    return 1;
}

/* The sampling flags: 1 consumed, 0 not one of them, -1 error printed. */
static int parse_sampling_flag(int argc, char **argv, int *i, run_opts *o)
{
    const char *a = argv[*i];
#define VALUE() cli_flag_value(argc, argv, i)
    if (!strcmp(a, "--temp")) return flag_f32(a, VALUE(), 0.0f, 1e6f, &o->sp.temp);
    if (!strcmp(a, "--top-k")) return cli_flag_i32(a, VALUE(), 0, INT32_MAX, &o->sp.top_k);
    if (!strcmp(a, "--top-p")) return flag_f32(a, VALUE(), 0.0f, 1.0f, &o->sp.top_p);
    if (!strcmp(a, "--min-p")) return flag_f32(a, VALUE(), 0.0f, 1.0f, &o->sp.min_p);
    if (!strcmp(a, "--repeat-last-n")) return cli_flag_i32(a, VALUE(), 0, INT32_MAX, &o->sp.repeat_last_n);
    if (!strcmp(a, "--repeat-penalty")) {
        float f;
        if (flag_f32(a, VALUE(), 0.0f, 1e6f, &f) < 0) return -1;
        if (f <= 0.0f) return -cli_error("%s: must be greater than 0", a);
        o->sp.repeat_penalty = f;
        return 1;
    }
    if (!strcmp(a, "--seed")) {
        const char *s = VALUE();
        if (!s) return -1;
        if (!cli_parse_u64(s, &o->sp.seed)) return -cli_error("%s: '%s' is not an unsigned integer", a, s);
        o->seed_given = true;
        return 1;
    }
#undef VALUE
    return cli_opt_sampling(argc, argv, i, &o->sp, &o->so);
}

/* run's own flags besides sampling: 1 consumed, 0 not one of them, -1 error printed. */
static int parse_run_flag(int argc, char **argv, int *i, run_opts *o)
{
    const char *a = argv[*i];
    if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
        int32_t n;
        if (cli_flag_i32(a, cli_flag_value(argc, argv, i), -1, INT32_MAX, &n) < 0) return -1;
        o->n_predict = n;
        return 1;
    }
    bool *on = !strcmp(a, "--ignore-eos")    ? &o->ignore_eos
               : !strcmp(a, "--no-kv-cache") ? &o->no_kv
               : !strcmp(a, "--json")        ? &o->json
               : !strcmp(a, "--chat")        ? &o->chat
                                             : NULL;
    if (on) {
        *on = true;
        return 1;
    }
    const char **path = !strcmp(a, "--save-session")       ? &o->save_session
                        : !strcmp(a, "--load-session")     ? &o->load_session
                        : !strcmp(a, "--grammar")          ? &o->grammar
                        : !strcmp(a, "--grammar-file")     ? &o->grammar_file
                        : !strcmp(a, "--json-schema")      ? &o->json_schema
                        : !strcmp(a, "--json-schema-file") ? &o->json_schema_file
                        : !strcmp(a, "--chat-template-file") ? &o->chat_template_file
                        : !strcmp(a, "-sys") || !strcmp(a, "--system") ? &o->system
                                                           : NULL;
    if (path) return (*path = cli_flag_value(argc, argv, i)) ? 1 : -1;
    return parse_sampling_flag(argc, argv, i, o);
}

/* 0: parsed; 1: error printed; 2: help printed. */
static int parse_run_args(int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof *o);
    cli_common_init(&o->c);
    o->n_predict = 256;
    kvi_sampler_params_default(&o->sp);
    o->sp.temp = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = 0.95f;
    o->sp.min_p = 0.05f;
    o->sp.repeat_penalty = 1.0f;
    o->sp.repeat_last_n = 64;
    run_spec_opts_default(&o->spec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(run_help, stdout);
            fputs(cli_sampling_help, stdout);
            fputs(run_help_tail, stdout);
            fputs(run_spec_help, stdout);
            return 2;
        }
        int r = cli_opt_common(argc, argv, &i, &o->c, RUN_OPTS);
        if (r == 0) r = parse_run_flag(argc, argv, &i, o);
        if (r == 0) r = run_spec_parse_flag(argc, argv, &i, &o->spec);
        if (r < 0) return 1;
        if (r > 0) {
            o->chat |= o->chat_template_file || o->system; /* both imply --chat */
            continue;
        }
        if (a[0] == '-')
            cli_error("run: unknown option '%s' (kvinfer run --help)", a);
        else
            cli_error("run: unexpected argument '%s' (the prompt goes after -p)", a);
        return 1;
    }
    return 0;
}

/* A seed below 2^32 (exact in JSON numbers) from the system's entropy. */
static uint64_t random_seed(void)
{
    uint32_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&s, sizeof s, 1, f) != 1) s = 0;
        fclose(f);
    }
    if (s == 0) s = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
    return s;
}

/* Growable byte buffer for the generated text. */
typedef struct text_buf {
    char *data; /* (cap) bytes; data[0 .. len) is the text */
    size_t len, cap;
    size_t printed; /* bytes already streamed to stdout */
} text_buf;

static bool text_append(text_buf *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *d = realloc(t->data, cap);
        if (!d) return false;
        t->data = d;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
    return true;
}

/* Appends the piece of tok (special tokens not rendered); false when out of memory. */
static bool append_piece(const kvi_model *m, text_buf *t, int32_t tok)
{
    char small[128];
    int32_t l = kvi_token_to_piece(m, tok, small, sizeof small, false);
    if (l < 0) return true; /* ids were range-checked; nothing to show */
    if ((size_t)l <= sizeof small) return text_append(t, small, (size_t)l);
    char *big = malloc((size_t)l); /* (l) bytes of one long piece */
    if (!big) return false;
    bool ok = kvi_token_to_piece(m, tok, big, (size_t)l, false) == l && text_append(t, big, (size_t)l);
    free(big);
    return ok;
}

/* The model's weights and the share one decode token reads (of a mixture of
 * experts: the router, shared experts and n_expert_used chosen experts). */
typedef struct run_weights {
    uint64_t n_params, active_params;
    size_t active_bytes;
    int n_expert, n_expert_used; /* 0: dense */
    int mla_kv_rank;             /* latent attention: values inside the keys; 0: none */
    int n_heads, head_dim, mla_k_head, mla_v_head;
} run_weights;

static void run_weights_get(const kvi_model *m, run_weights *w)
{
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    *w = (run_weights){ .n_params = kvi_model_n_params(m),
                        .active_params = kvi_model_active_params(m),
                        .active_bytes = kvi_model_decode_bytes(m),
                        .n_expert = info.n_expert,
                        .n_expert_used = info.n_expert_used,
                        .mla_kv_rank = info.mla_kv_rank,
                        .n_heads = info.n_heads,
                        .head_dim = info.head_dim,
                        .mla_k_head = info.mla_k_head,
                        .mla_v_head = info.mla_v_head };
}

typedef struct run_result {
    int32_t *all_ids; /* (ids_cap) prompt then generated ids */
    int32_t ids_cap;
    int32_t n_prompt, n_gen;
    int32_t n_cached;   /* prompt positions taken from a session or the prefix cache */
    const char *finish; /* "stop" or "length" */
    text_buf text;
    double prefill_ms, ttft_ms, decode_ms;
    int64_t n_decode_steps;
    int64_t rows_computed;
    kvi_stats kv;   /* of the sequence, at the end */
    kvi_stats pool; /* of the engine, at the end: its thread pool's runs */
    int n_ctx;
    run_spec_result spec; /* speculative decoding, when on */
    kvi_mem_stats mem;    /* at the end, before anything is freed */
    double load_ms;       /* model load and engine creation */
    run_weights w;        /* what one decode token reads */
} run_result;

static double per_s(double count, double ms) { return ms > 0.0 ? count * 1000.0 / ms : 0.0; }

/* Decode speed: tokens after the first over decode time (one per step unless
 * speculative decoding verified several per step). */
static double decode_tok_s(const run_result *r)
{
    double n = r->spec.on ? (double)(r->n_gen > 0 ? r->n_gen - 1 : 0) : (double)r->n_decode_steps;
    return per_s(n, r->decode_ms);
}

/* Rows of the largest recompute batch without the KV cache: every token that
 * can be run, bounded by the context and by -n. */
static int32_t no_kv_rows(const run_opts *o, int32_t n_prompt, int n_ctx)
{
    int64_t rows = n_ctx;
    if (o->n_predict >= 0 && (int64_t)n_prompt + o->n_predict < rows) rows = (int64_t)n_prompt + o->n_predict;
    return rows > n_prompt ? (int32_t)rows : n_prompt;
}

/* Runs one forward pass; prints the library's error and returns 1 on failure. */
static int step_or_error(kvi_engine *e, kvi_batch *b, const char *phase)
{
    kvi_error err = { 0 };
    int rc = kvi_step(e, b, &err);
    if (rc != 0) return cli_error("%s failed: %s", phase, err.msg[0] ? err.msg : kvi_strerror(rc));
    return 0;
}

/* One sampled token, for both loops: end of generation (finish "stop", unless
 * --ignore-eos), else the ids, the text and the stream to stdout (unless
 * --json). 1: stop (end of generation or -n reached), 0: go on, -1: out of
 * memory (error printed). */
static int keep_token(const run_opts *o, const kvi_model *m, run_result *r, int32_t tok)
{
    const int32_t bos = kvi_token_bos(m);
    if (!o->ignore_eos && tok != bos && kvi_token_is_eog(m, tok)) {
        r->finish = "stop";
        return 1;
    }
    if (r->n_prompt + r->n_gen >= r->ids_cap) {
        int32_t cap = r->ids_cap * 2;
        int32_t *ni = realloc(r->all_ids, (size_t)cap * sizeof *ni);
        if (!ni) return -cli_error("out of memory");
        r->all_ids = ni;
        r->ids_cap = cap;
    }
    r->all_ids[r->n_prompt + r->n_gen] = tok;
    r->n_gen++;
    if (!append_piece(m, &r->text, tok)) return -cli_error("out of memory");
    if (!o->json) {
        size_t ready = kvi_utf8_complete_prefix(r->text.data, r->text.len);
        if (ready > r->text.printed) {
            fwrite(r->text.data + r->text.printed, 1, ready - r->text.printed, stdout);
            r->text.printed = ready;
        }
        fflush(stdout);
    }
    return o->n_predict >= 0 && r->n_gen >= o->n_predict ? 1 : 0;
}

/* The speculative loop's receiver of each generated token (run_spec_emit_fn). */
typedef struct spec_sink {
    const run_opts *o;
    const kvi_model *m;
    run_result *r;
} spec_sink;

static int spec_emit(void *ctx, int32_t tok)
{
    spec_sink *k = ctx;
    return keep_token(k->o, k->m, k->r, tok);
}

static int generate_spec(const run_opts *o, kvi_model *m, kvi_engine *e, kvi_seq *seq, kvi_sampler *smp,
                         run_result *r)
{
    r->finish = "length";
    if (o->n_predict == 0) return 0;
    spec_sink sink = { o, m, r };
    run_spec_ctx c = {
        .m = m,
        .e = e,
        .seq = seq,
        .smp = smp,
        .sp = &o->sp,
        .prompt = r->all_ids,
        .n_prompt = r->n_prompt,
        .n_cached = r->n_cached,
        .n_ctx = r->n_ctx,
        .n_predict = o->n_predict,
        .n_threads = (int)o->c.n_threads,
        .kv_k = o->c.kv_k,
        .kv_v = o->c.kv_v,
        .mmap = o->c.mmap,
        .emit = spec_emit,
        .emit_ctx = &sink,
    };
    int rc = run_spec_generate(&o->spec, &c, &r->prefill_ms, &r->ttft_ms, &r->decode_ms, &r->spec);
    r->n_decode_steps = r->spec.n_steps;
    r->rows_computed = (r->n_prompt - r->n_cached) + r->spec.rows;
    kvi_stats_get(e, seq, &r->kv);
    kvi_stats_get(e, NULL, &r->pool);
    return rc;
}

/* The generation loop (see the file comment). Streams text when !o->json. */
static int generate(const run_opts *o, kvi_model *m, kvi_engine *e, kvi_seq *seq, kvi_sampler *smp,
                    run_result *r)
{
    if (run_spec_enabled(&o->spec)) return generate_spec(o, m, e, seq, smp, r);
    const int n_ctx = r->n_ctx;
    const int32_t n_prompt = r->n_prompt;
    const int32_t n_vocab = kvi_n_vocab(m);
    int32_t batch_rows = o->no_kv ? no_kv_rows(o, n_prompt, n_ctx) : n_prompt;
    const int32_t n_cached = r->n_cached; /* < n_prompt: the last prompt row always runs */
    kvi_batch *b = kvi_batch_create(batch_rows);
    if (!b) return cli_error("out of memory creating a batch of %d rows", (int)batch_rows);

    /* prefill: the prompt rows in steps of RUN_PREFILL_STEP (one pass each, the
     * same bits as one pass over all: batch invariance), logits of the last row
     * only; between steps sliding-window layers release what they no longer see */
    double t0 = kvi_time_ms();
    for (int32_t s0 = n_cached; s0 < n_prompt; s0 += RUN_PREFILL_STEP) {
        const int32_t s1 = n_prompt - s0 > RUN_PREFILL_STEP ? s0 + RUN_PREFILL_STEP : n_prompt;
        kvi_batch_clear(b);
        for (int32_t i = s0; i < s1; i++) {
            if (kvi_batch_add(b, seq, r->all_ids[i], i, i == n_prompt - 1) < 0) {
                kvi_batch_free(b);
                return cli_error("cannot add prompt row %d to the batch", (int)i);
            }
        }
        if (step_or_error(e, b, "prefill")) {
            kvi_batch_free(b);
            return 1;
        }
    }
    double t1 = kvi_time_ms();
    r->prefill_ms = t1 - t0;
    r->rows_computed = n_prompt - n_cached;
    int32_t logits_row = (n_prompt - 1 - n_cached) % RUN_PREFILL_STEP;
    for (int32_t i = 0; i < n_prompt; i++) kvi_sampler_accept(smp, r->all_ids[i]);

    double t_decode0 = t1, t_last = t1;
    r->finish = "length";
    for (;;) {
        if (o->n_predict >= 0 && r->n_gen >= o->n_predict) break;
        const float *logits = kvi_logits(e, logits_row);
        if (!logits) {
            kvi_batch_free(b);
            return cli_error("no logits after the forward pass");
        }
        int32_t tok = kvi_sampler_sample(smp, logits);
        t_last = kvi_time_ms();
        if (r->n_gen == 0 && r->n_decode_steps == 0) {
            r->ttft_ms = t_last - t0;
            t_decode0 = t_last;
        }
        if (tok < 0 && (o->grammar || o->grammar_file || o->json_schema || o->json_schema_file)) {
            kvi_batch_free(b);
            return cli_error("the grammar allows no token of the vocabulary after %d generated tokens",
                             (int)r->n_gen);
        }
        if (tok < 0 || tok >= n_vocab) {
            kvi_batch_free(b);
            return cli_error("the sampler returned token %d, outside the vocabulary", (int)tok);
        }
        kvi_sampler_accept_output(smp, tok); /* also advances a grammar */
        const int kept = keep_token(o, m, r, tok);
        if (kept < 0) {
            kvi_batch_free(b);
            return 1;
        }
        if (kept > 0) break;
        int32_t n_all = n_prompt + r->n_gen;
        /* the newest token takes position n_all - 1: none left means the context is full,
         * unless a context policy makes room (positions then re-assigned) */
        const bool policy = !o->no_kv && cli_opt_policy(&o->c) != NULL;
        if (n_all > n_ctx && !policy) break;
        int32_t pos = n_all - 1;
        if (policy) {
            kvi_error err = { 0 };
            pos = kvi_seq_make_room(seq, 1, &err);
            if (pos < 0) {
                kvi_batch_free(b);
                return cli_error("context policy: %s", err.msg[0] ? err.msg : kvi_strerror(pos));
            }
        }
        kvi_batch_clear(b);
        if (o->no_kv) {
            /* recompute: forget the cache and run every token so far */
            if (kvi_seq_truncate(seq, 0) != 0) {
                kvi_batch_free(b);
                return cli_error("cannot reset the sequence");
            }
            for (int32_t i = 0; i < n_all; i++) kvi_batch_add(b, seq, r->all_ids[i], i, i == n_all - 1);
            logits_row = n_all - 1;
            r->rows_computed += n_all;
        } else {
            kvi_batch_add(b, seq, tok, pos, true);
            logits_row = 0;
            r->rows_computed += 1;
        }
        if (step_or_error(e, b, "decode")) {
            kvi_batch_free(b);
            return 1;
        }
        r->n_decode_steps++;
    }
    r->decode_ms = r->n_decode_steps > 0 ? t_last - t_decode0 : 0.0;
    kvi_stats_get(e, seq, &r->kv);
    kvi_stats_get(e, NULL, &r->pool);
    kvi_batch_free(b);
    return 0;
}

static void print_summary(const run_opts *o, const run_result *r, int n_threads)
{
    FILE *f = stderr;
    fprintf(
        f, "\nkvinfer: prompt     %6d tokens   prefill %9.2f ms  %9.1f tok/s   time to first token %.2f ms\n",
        (int)r->n_prompt, r->prefill_ms, per_s(r->n_prompt, r->prefill_ms), r->ttft_ms);
    fprintf(f,
            "kvinfer: generated  %6d tokens   decode  %9.2f ms  %9.1f tok/s   (%" PRId64
            " steps, finish: %s)\n",
            (int)r->n_gen, r->decode_ms, decode_tok_s(r), r->n_decode_steps, r->finish);
    fprintf(f, "kvinfer: KV cache   %zu bytes in use, %zu bytes/token (K %s, V %s), context %d\n",
            r->kv.kv_bytes, r->kv.kv_bytes_per_token, kvi_type_name(o->c.kv_k),
            r->w.mla_kv_rank ? "latent: inside K" : kvi_type_name(o->c.kv_v), r->n_ctx);
    if (r->w.mla_kv_rank > 0 && r->w.head_dim > 0) {
        /* the same attention with per-head keys and values, at this cache's bytes per element */
        const double heads = (double)r->kv.kv_bytes_per_token * r->w.n_heads *
                             (r->w.mla_k_head + r->w.mla_v_head) / r->w.head_dim;
        fprintf(f,
                "kvinfer: KV latent  one row of %d + %d values a token and layer; per-head keys and values "
                "(%d x (%d + %d)) would take %.0f bytes/token (the latent row is %.1f%% smaller)\n",
                r->w.mla_kv_rank, r->w.head_dim - r->w.mla_kv_rank, r->w.n_heads, r->w.mla_k_head,
                r->w.mla_v_head, heads, 100.0 * (1.0 - (double)r->kv.kv_bytes_per_token / heads));
    }
    if (r->kv.kv_n_layers_recurrent > 0)
        fprintf(f,
                "kvinfer: state      %d recurrent layers hold %zu bytes (f32, fixed: does not grow with the "
                "context); K/V only in the attention layers (--kv-type applies to those)\n",
                (int)r->kv.kv_n_layers_recurrent, r->kv.kv_bytes_state);
    if (r->kv.kv_n_layers_window > 0)
        fprintf(f,
                "kvinfer: KV kinds   global layers %zu bytes/token, %zu bytes held; %d window layers (W %d) "
                "%zu bytes/token, %zu bytes held in %d window parts (%" PRIu64 " released)\n",
                r->kv.kv_bytes_per_token_global, r->kv.kv_bytes_global, (int)r->kv.kv_n_layers_window,
                (int)r->kv.kv_window, r->kv.kv_bytes_per_token_window, r->kv.kv_bytes_window,
                (int)r->kv.kv_wparts_held, r->kv.kv_wparts_released);
    if (r->kv.kv_bytes_per_token_indexer > 0)
        fprintf(f,
                "kvinfer: KV kinds   latent rows %zu bytes/token, sparse-attention indexer keys %zu "
                "bytes/token (f32)\n",
                r->kv.kv_bytes_per_token - r->kv.kv_bytes_per_token_indexer,
                r->kv.kv_bytes_per_token_indexer);
    if (o->no_kv)
        fprintf(f, "kvinfer: no KV cache: recomputed %" PRId64 " rows (with the cache: %d)\n",
                r->rows_computed, (int)(r->n_prompt + r->n_decode_steps));
    else
        fprintf(f, "kvinfer: rows computed %" PRId64 "\n", r->rows_computed);
    fprintf(f,
            "kvinfer: KV blocks  %d held (%d shared) of %d tokens; prompt: %d tokens reused, "
            "%d computed; evicted %" PRIu64 " positions (policy %s)\n",
            (int)r->kv.kv_blocks_used, (int)r->kv.kv_blocks_shared, (int)r->kv.kv_block_size,
            (int)r->n_cached, (int)(r->n_prompt - r->n_cached), r->kv.n_evicted,
            o->c.ctx_policy ? o->c.ctx_policy : "error");
    run_spec_print_summary(f, &r->spec);
    const double mib = 1024.0 * 1024.0;
    fprintf(f,
            "kvinfer: memory     peak RSS %.1f MiB = model %.1f MiB + KV %.1f MiB + %.1f MiB other "
            "(scratch %.1f MiB); load %.0f ms\n",
            (double)r->mem.rss_peak_bytes / mib, (double)r->mem.model_bytes / mib,
            (double)r->mem.kv_bytes / mib,
            ((double)r->mem.rss_peak_bytes - (double)r->mem.model_bytes - (double)r->mem.kv_bytes) / mib,
            (double)r->mem.scratch_bytes / mib, r->load_ms);
    const double dt = decode_tok_s(r);
    fprintf(f,
            "kvinfer: weights    %.3g M of %.3g M params, %.1f MiB read per decode token (%.2f GB/s at "
            "%.1f tok/s)",
            (double)r->w.active_params / 1e6, (double)r->w.n_params / 1e6, (double)r->w.active_bytes / mib,
            (double)r->w.active_bytes * dt / 1e9, dt);
    if (r->w.n_expert > 0) fprintf(f, "; %d of %d experts per token", r->w.n_expert_used, r->w.n_expert);
    fputc('\n', f);
    fprintf(f, "kvinfer: seed %" PRIu64 ", %d threads, isa %s", o->sp.seed, n_threads, kvi_isa_name());
    if (r->pool.pool_runs_serial > 0) /* the pool's serial fallback (threadpool.c) */
        fprintf(f,
                "; %.0f%% of parallel work ran on one thread (measured faster than waiting for the "
                "workers: a shared CPU or parts too small)",
                100.0 * (double)r->pool.pool_runs_serial /
                    (double)(r->pool.pool_runs_serial + r->pool.pool_runs_parallel));
    fputc('\n', f);
}

static cJSON *id_array(const int32_t *ids, int32_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; a && i < n; i++) {
        cJSON *v = cJSON_CreateNumber(ids[i]);
        if (!v) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, v);
    }
    return a;
}

static int print_json(const run_opts *o, const run_result *r, int n_threads, const kvi_engine *e)
{
    char *clean = kvi_utf8_sanitize(r->text.data ? r->text.data : "", r->text.len);
    cJSON *root = cJSON_CreateObject();
    cJSON *pt = id_array(r->all_ids, r->n_prompt);
    cJSON *gt = id_array(r->all_ids + r->n_prompt, r->n_gen);
    cJSON *st = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, o->sp.seed); /* raw: exact beyond 2^53 */
    bool ok = clean && root && pt && gt && st;
    if (ok) {
        cJSON_AddItemToObject(root, "prompt_tokens", pt);
        cJSON_AddItemToObject(root, "tokens", gt);
        pt = gt = NULL;
        ok = cJSON_AddStringToObject(root, "text", clean) &&
             cJSON_AddStringToObject(root, "finish_reason", r->finish);
        cJSON_AddItemToObject(root, "stats", st);
        st = NULL;
    }
    cJSON *s = ok ? cJSON_GetObjectItemCaseSensitive(root, "stats") : NULL;
    if (s) {
        ok = cJSON_AddNumberToObject(s, "n_prompt", r->n_prompt) &&
             cJSON_AddNumberToObject(s, "n_gen", r->n_gen) &&
             cJSON_AddNumberToObject(s, "prefill_ms", r->prefill_ms) &&
             cJSON_AddNumberToObject(s, "prefill_tok_s", per_s(r->n_prompt, r->prefill_ms)) &&
             cJSON_AddNumberToObject(s, "ttft_ms", r->ttft_ms) &&
             cJSON_AddNumberToObject(s, "decode_ms", r->decode_ms) &&
             cJSON_AddNumberToObject(s, "decode_tok_s", decode_tok_s(r)) &&
             cJSON_AddNumberToObject(s, "decode_steps", (double)r->n_decode_steps) &&
             cJSON_AddNumberToObject(s, "kv_bytes", (double)r->kv.kv_bytes) &&
             cJSON_AddNumberToObject(s, "kv_bytes_per_token", (double)r->kv.kv_bytes_per_token) &&
             cJSON_AddNumberToObject(s, "kv_bytes_per_token_global",
                                     (double)r->kv.kv_bytes_per_token_global) &&
             cJSON_AddNumberToObject(s, "kv_bytes_per_token_window",
                                     (double)r->kv.kv_bytes_per_token_window) &&
             cJSON_AddNumberToObject(s, "kv_bytes_per_token_indexer",
                                     (double)r->kv.kv_bytes_per_token_indexer) &&
             cJSON_AddNumberToObject(s, "kv_tokens", r->kv.n_tokens) &&
             cJSON_AddNumberToObject(s, "kv_bytes_global", (double)r->kv.kv_bytes_global) &&
             cJSON_AddNumberToObject(s, "kv_bytes_window", (double)r->kv.kv_bytes_window) &&
             cJSON_AddNumberToObject(s, "kv_n_layers_window", r->kv.kv_n_layers_window) &&
             cJSON_AddNumberToObject(s, "kv_window", r->kv.kv_window) &&
             cJSON_AddNumberToObject(s, "kv_wparts_held", r->kv.kv_wparts_held) &&
             cJSON_AddNumberToObject(s, "kv_wparts_released", (double)r->kv.kv_wparts_released) &&
             cJSON_AddNumberToObject(s, "kv_n_layers_recurrent", r->kv.kv_n_layers_recurrent) &&
             cJSON_AddNumberToObject(s, "kv_bytes_state", (double)r->kv.kv_bytes_state) &&
             cJSON_AddBoolToObject(s, "kv_cache", !o->no_kv) &&
             cJSON_AddNumberToObject(s, "rows_computed", (double)r->rows_computed) &&
             cJSON_AddNumberToObject(s, "prompt_cached_tokens", r->n_cached) &&
             cJSON_AddNumberToObject(s, "kv_blocks", r->kv.kv_blocks_used) &&
             cJSON_AddNumberToObject(s, "kv_evicted", (double)r->kv.n_evicted) &&
             cJSON_AddStringToObject(s, "ctx_policy", o->c.ctx_policy ? o->c.ctx_policy : "error") &&
             cJSON_AddNumberToObject(s, "n_ctx", r->n_ctx) &&
             cJSON_AddNumberToObject(s, "n_threads", n_threads) &&
             cJSON_AddNumberToObject(s, "pool_runs_parallel", (double)r->pool.pool_runs_parallel) &&
             cJSON_AddNumberToObject(s, "pool_runs_serial", (double)r->pool.pool_runs_serial) &&
             cJSON_AddStringToObject(s, "kv_type",
                                     o->c.kv_k == o->c.kv_v ? kvi_type_name(o->c.kv_k) : "mixed") &&
             cJSON_AddStringToObject(s, "kv_type_k", kvi_type_name(o->c.kv_k)) &&
             cJSON_AddStringToObject(s, "kv_type_v", kvi_type_name(o->c.kv_v)) &&
             cJSON_AddRawToObject(s, "seed", seed) && run_spec_json_add(s, &r->spec) &&
             cJSON_AddNumberToObject(s, "rss_peak_bytes", (double)r->mem.rss_peak_bytes) &&
             cJSON_AddNumberToObject(s, "rss_bytes", (double)r->mem.rss_bytes) &&
             cJSON_AddNumberToObject(s, "model_bytes", (double)r->mem.model_bytes) &&
             cJSON_AddNumberToObject(s, "kv_bytes_allocated", (double)r->mem.kv_bytes) &&
             cJSON_AddNumberToObject(s, "scratch_bytes", (double)r->mem.scratch_bytes) &&
             cJSON_AddNumberToObject(s, "load_ms", r->load_ms) &&
             cJSON_AddNumberToObject(s, "n_params", (double)r->w.n_params) &&
             cJSON_AddNumberToObject(s, "active_params", (double)r->w.active_params) &&
             cJSON_AddNumberToObject(s, "active_bytes", (double)r->w.active_bytes) &&
             cJSON_AddNumberToObject(s, "n_expert", r->w.n_expert) &&
             cJSON_AddNumberToObject(s, "n_expert_used", r->w.n_expert_used) &&
             cJSON_AddStringToObject(s, "isa", kvi_isa_name());
    }
    cJSON *pipe = ok ? cli_pipe_json(e) : NULL; /* mpirun: the stages (cli_pipe.c) */
    if (pipe) cJSON_AddItemToObject(root, "pipeline", pipe);
    char *out = ok ? cJSON_PrintUnformatted(root) : NULL;
    int rc = 0;
    if (out)
        printf("%s\n", out);
    else
        rc = cli_error("out of memory building JSON");
    free(out);
    cJSON_Delete(root);
    cJSON_Delete(pt);
    cJSON_Delete(gt);
    cJSON_Delete(st);
    free(clean);
    return rc;
}

/* The engine for one sequence of n_ctx positions (0: the model's) whose prefill,
 * and each recompute without the cache, is ONE forward pass. NULL: error printed. */
static kvi_engine *create_engine(const run_opts *o, kvi_model *m, int32_t n_prompt, int n_ctx)
{
    kvi_engine_params ep;
    cli_opt_engine_params(&o->c, &ep);
    ep.n_ctx = n_ctx > 0 ? n_ctx : 0;
    ep.n_seq_max = 1;
    int need = o->no_kv && n_ctx > 0 ? no_kv_rows(o, n_prompt, n_ctx)
                                     : (n_prompt < RUN_PREFILL_STEP ? n_prompt : RUN_PREFILL_STEP);
    if (ep.n_batch_max < need) ep.n_batch_max = need;
    kvi_engine *e = cli_engine_create(m, &ep, "");
    if (e && (cli_opt_lora(&o->c, e, "") || cli_pipe_attach(e, &ep))) { /* mpirun: stage 0 of the pipeline */
        kvi_engine_free(e);
        return NULL;
    }
    return e;
}

/* Prompt positions the fresh sequence takes without computing them: the longest
 * common prefix with a restored session (--load-session), else whole cached
 * blocks (a no-op in a fresh process); the last prompt row always runs. 0, or 1
 * with the error printed. */
static int reuse_prompt(const run_opts *o, kvi_seq *seq, const int32_t *prompt, int32_t n_prompt,
                        int32_t *n_cached)
{
    if (!o->load_session) {
        int32_t held = kvi_seq_reuse_prefix(seq, prompt, n_prompt);
        *n_cached = held > 0 ? held : 0;
        return 0;
    }
    kvi_error err = { 0 };
    bool shifted = false;
    if (kvi_seq_load(seq, o->load_session, &shifted, &err) != 0)
        return cli_error("--load-session: %s", err.msg);
    const int32_t *st = kvi_seq_tokens(seq);
    int32_t lcp = 0, held = kvi_seq_len(seq);
    while (!shifted && lcp < held && lcp < n_prompt - 1 && st[lcp] == prompt[lcp]) lcp++;
    if (kvi_seq_truncate(seq, lcp) != 0) { /* recurrent layers: the saved state is at its end only */
        kvi_seq_truncate(seq, 0);
        lcp = 0;
    }
    *n_cached = lcp;
    return 0;
}

/* Echoes the prompt, generates (streaming unless --json), saves the session and
 * prints the summary (and the JSON). r holds the prompt already. */
static int generate_and_report(const run_opts *o, kvi_model *m, kvi_engine *e, kvi_seq *seq, kvi_sampler *smp,
                               run_result *r)
{
    if (!o->json) {
        /* echo the prompt as the user should read it, then stream the rest */
        int32_t bos = kvi_token_bos(m);
        size_t len = 0;
        char *txt = cli_detokenize(m, r->all_ids, r->n_prompt, false, bos >= 0 && r->all_ids[0] == bos, &len);
        if (txt) fwrite(txt, 1, len, stdout);
        free(txt);
        fflush(stdout);
    }
    int threads = o->c.n_threads > 0 ? (int)o->c.n_threads : cli_n_cores();
    int rc = generate(o, m, e, seq, smp, r);
    if (rc == 0 && !o->json) {
        /* bytes held back waiting for a UTF-8 continuation are printed as they are */
        if (r->text.len > r->text.printed)
            fwrite(r->text.data + r->text.printed, 1, r->text.len - r->text.printed, stdout);
        putchar('\n');
        fflush(stdout);
    }
    if (rc == 0 && o->save_session) {
        kvi_error err = { 0 };
        if (kvi_seq_save(seq, o->save_session, &err) != 0) rc = cli_error("--save-session: %s", err.msg);
    }
    if (rc == 0) {
        kvi_mem_stats_get(m, e, &r->mem);
        run_weights_get(m, &r->w);
        print_summary(o, r, threads);
        cli_pipe_summary(e); /* mpirun: each stage's costs */
        if (o->json) rc = print_json(o, r, threads, e);
    }
    return rc;
}

/* The grammar of --grammar, --grammar-file, --json-schema or --json-schema-file
 * (NULL with *rc 0 when none; NULL with *rc 1 after printing an error). */
static kvi_grammar *load_grammar(const run_opts *o, int *rc)
{
    *rc = 0;
    const char *schema_path = o->json_schema_file;
    if (o->json_schema && o->json_schema[0] != '{') schema_path = o->json_schema;
    const char *path = o->grammar_file ? o->grammar_file : schema_path;
    char *file = NULL;
    size_t len = 0;
    if (path && !(file = cli_read_file(path, &len))) {
        *rc = cli_error("cannot read '%s'", path);
        return NULL;
    }
    const char *text = o->grammar ? o->grammar : o->grammar_file ? file : NULL;
    char *gbnf = NULL;
    kvi_error err = { 0 };
    if (!text && (o->json_schema || o->json_schema_file)) {
        const char *schema = schema_path ? file : o->json_schema;
        gbnf = kvi_json_schema_to_gbnf(schema, schema_path ? len : strlen(schema), &err);
        if (!gbnf) {
            free(file);
            *rc = cli_error("%s", err.msg);
            return NULL;
        }
        text = gbnf;
    }
    kvi_grammar *g = NULL;
    if (text) {
        g = kvi_grammar_parse(text, text == file ? len : strlen(text), &err);
        if (!g) *rc = cli_error("%s%s%s", path && !gbnf ? path : "", path && !gbnf ? ": " : "", err.msg);
    }
    free(gbnf);
    free(file);
    return g;
}

/* --chat: the prompt (-p or -f) as the user's message after the --system one, laid
 * out by --chat-template-file's Jinja template, else the model's (or, for a model
 * that ships none, the built-in layouts), with the assistant's turn opened;
 * special tokens are recognised in the template's text only, as serve does.
 * 0 with a malloc'd array, or 1 with the error printed. */
static int chat_prompt_ids(const run_opts *o, kvi_model *m, int32_t **ids, int32_t *n)
{
    size_t ulen = 0, flen = 0;
    char *user = o->c.file ? cli_read_file(o->c.file, &ulen) : NULL;
    if (o->c.file && !user) return cli_error("run: cannot read '%s': %s", o->c.file, strerror(errno));
    if (user && ulen > 0 && user[ulen - 1] == '\n') user[--ulen] = 0;
    char *ftext = o->chat_template_file ? cli_read_file(o->chat_template_file, &flen) : NULL;
    if (o->chat_template_file && !ftext) {
        free(user);
        return cli_error("run: cannot read '%s': %s", o->chat_template_file, strerror(errno));
    }
    const char *utext = user ? user : o->c.prompt ? o->c.prompt : "";
    srv_server tsrv;
    memset(&tsrv, 0, sizeof tsrv);
    tsrv.m = m;
    kvi_error err = { 0 };
    int rc = srv_template_init(&tsrv, ftext, flen, o->chat_template_file, &err) ? cli_error("run: %s", err.msg) : 0;
    free(ftext);
    if (!rc && tsrv.tmpl) { /* Jinja: the body as a chat request */
        cJSON *body = cJSON_CreateObject(), *arr = body ? cJSON_AddArrayToObject(body, "messages") : NULL;
        for (int k = o->system ? 0 : 1; arr && k < 2; k++) {
            cJSON *msg = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, msg);
            cJSON_AddStringToObject(msg, "role", k ? "user" : "system");
            cJSON_AddStringToObject(msg, "content", k ? utext : o->system);
        }
        char *json = arr ? cJSON_PrintUnformatted(body) : NULL;
        cJSON_Delete(body);
        srv_err er = { 0 };
        bool in_reasoning = false;
        *ids = json ? srv_template_ids(&tsrv, json, strlen(json), n, &in_reasoning, &er) : NULL;
        free(json);
        if (!*ids) rc = cli_error("run: chat template: %s", json ? er.msg : "out of memory");
    } else if (!rc) { /* the built-in layouts */
        const kvi_chat_msg msgs[2] = { { "system", o->system }, { "user", utext } };
        const int k0 = o->system ? 0 : 1;
        int32_t cap = 256;
        for (int32_t got = -1; !rc;) {
            *ids = malloc((size_t)cap * sizeof **ids);
            got = *ids ? kvi_chat_apply(m, msgs + k0, 2 - k0, true, *ids, cap, &err) : KVI_E_NOMEM;
            if (got == 0) rc = cli_error("run: the chat layout gave no tokens");
            if (got > 0 && got <= cap) {
                *n = got;
                break;
            }
            free(*ids);
            *ids = NULL;
            if (got < 0) rc = cli_error("run: chat layout: %s", err.msg[0] ? err.msg : kvi_strerror(got));
            cap = got;
        }
    }
    srv_template_free(&tsrv);
    free(user);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int prc = parse_run_args(argc, argv, &o);
    if (prc != 0) return prc == 2 ? 0 : 1;
    if (!o.seed_given) o.sp.seed = random_seed();
    if ((o.c.prompt != NULL) + (o.c.file != NULL) + (o.c.tokens != NULL) > 1)
        return cli_error("give the prompt only once: -p TEXT, -f FILE or --tokens IDS");
    if (run_spec_enabled(&o.spec) && (o.no_kv || cli_opt_policy(&o.c)))
        return cli_error("speculative decoding (--spec, --draft) needs the KV cache and --ctx-policy error");
    if (o.spec.ngram && o.spec.draft_path)
        return cli_error("choose one speculation: --spec ngram or --draft PATH");
    const int n_constraints = (o.grammar != NULL) + (o.grammar_file != NULL) + (o.json_schema != NULL) +
                              (o.json_schema_file != NULL);
    if (n_constraints > 1)
        return cli_error("give one of --grammar, --grammar-file, --json-schema, --json-schema-file");
    if (n_constraints && run_spec_enabled(&o.spec))
        return cli_error(
            "a grammar or JSON schema cannot be combined with speculative decoding (--spec, --draft)");
    if (run_spec_enabled(&o.spec) && kvi_sampler_params_stateful(&o.sp))
        return cli_error(
            "mirostat, DRY and XTC cannot be combined with speculative decoding (--spec, --draft)");
    int grc = 0;
    kvi_grammar *grammar = load_grammar(&o, &grc);
    if (grc) return 1;
    kvi_grammar_vocab *gvocab = NULL;

    const double t_load0 = kvi_time_ms();
    kvi_model *m = cli_opt_load_model(&o.c);
    if (!m) {
        kvi_grammar_free(grammar);
        return 1;
    }
    int32_t *prompt = NULL, n_prompt = 0;
    kvi_engine *e = NULL;
    kvi_seq *seq = NULL;
    kvi_sampler *smp = NULL;
    run_result r;
    memset(&r, 0, sizeof r);

    int rc = o.chat && o.c.tokens ? cli_error("run: --chat takes the message as text (-p or -f), not --tokens")
             : o.chat             ? chat_prompt_ids(&o, m, &prompt, &n_prompt)
                    : cli_prompt_ids(m, o.c.prompt, o.c.file, o.c.tokens, o.c.special, &prompt, &n_prompt);
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    int n_ctx = o.c.n_ctx > 0 ? (int)o.c.n_ctx : info.n_ctx_train;
    if (rc == 0 && n_ctx > 0 && n_prompt > n_ctx) rc = cli_ctx_exceeded(n_prompt, n_ctx);
    if (rc == 0 && !(e = create_engine(&o, m, n_prompt, n_ctx))) rc = 1;
    if (rc == 0) {
        r.load_ms = kvi_time_ms() - t_load0;
        r.n_ctx = kvi_engine_n_ctx(e);
        if (n_prompt > r.n_ctx) rc = cli_ctx_exceeded(n_prompt, r.n_ctx);
    }
    if (rc == 0 && !(seq = kvi_seq_create(e))) rc = cli_error("cannot create a sequence");
    if (rc == 0 && !(smp = kvi_sampler_create(&o.sp, kvi_n_vocab(m))))
        rc = cli_error("cannot create the sampler");
    if (rc == 0) rc = cli_sampler_breakers(smp, m, &o.sp, &o.so);
    if (rc == 0 && grammar) {
        kvi_error err = { 0 };
        kvi_grammar_matcher *gm = NULL;
        if (!(gvocab = kvi_grammar_vocab_create(m, &err)) ||
            !(gm = kvi_grammar_matcher_create(grammar, gvocab, &err)))
            rc = cli_error("%s", err.msg);
        else if (kvi_sampler_set_grammar(smp, gm) != 0) {
            kvi_grammar_matcher_free(gm);
            rc = cli_error("out of memory for the grammar");
        }
    }
    if (rc == 0) {
        r.ids_cap = r.n_ctx + 1;
        r.all_ids = malloc((size_t)r.ids_cap * sizeof *r.all_ids);
        if (!r.all_ids) rc = cli_error("out of memory for %d token ids", r.n_ctx + 1);
    }
    if (rc == 0 && !o.no_kv) rc = reuse_prompt(&o, seq, prompt, n_prompt, &r.n_cached);
    if (rc == 0) {
        memcpy(r.all_ids, prompt, (size_t)n_prompt * sizeof *prompt);
        r.n_prompt = n_prompt;
        rc = generate_and_report(&o, m, e, seq, smp, &r);
    }
    free(r.text.data);
    free(r.all_ids);
    if (smp) kvi_sampler_free(smp);
    kvi_grammar_vocab_free(gvocab); /* after the sampler: its matcher reads both */
    kvi_grammar_free(grammar);
    if (seq) kvi_seq_free(seq);
    if (e) kvi_engine_free(e);
    kvi_model_free(m);
    free(prompt);
    return rc;
}
