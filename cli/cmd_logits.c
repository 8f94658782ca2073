/*
 * cmd_logits.c — `kvinfer logits`: the logits of every prompt position from ONE
 * prefill forward pass (one kvi_step, every row with want_logits).
 *
 * Output: with --json exactly one JSON object
 *   {"prompt_tokens": [n_prompt ids], "logits": [[n_vocab floats] x n_prompt]}
 * written by hand with "%.9g" (cJSON is too slow and too large for 32000 x 512
 * floats) into a large stdout buffer; otherwise, per position, the token and the
 * top-5 next tokens with their logits.
 */
#include "cli/cli_opts.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char logits_help[] =
    "usage: kvinfer logits [-m MODEL] (-p TEXT | -f FILE | --tokens IDS) [options]\n"
    "\n"
    "Runs the prompt through one prefill pass and prints the logits after every\n"
    "position: the top-5 next tokens per position, or every logit with --json.\n"
    "\n"
    "options:\n"
    "  -m, --model PATH    GGUF model, llama2.c checkpoint or Hugging Face folder\n"
    "                      (default: ../shared/models/stories260K.gguf if it exists)\n"
    "  --tokenizer PATH    tokenizer.bin for llama2.c checkpoints (default: next to it)\n"
    "  --lora FILE         LoRA adapter (GGUF), scale 1; --lora-scaled FILE S (or FILE:S[,..])\n"
    "  --mmap              map the model file instead of reading it (default: off)\n"
    "  -p, --prompt TEXT   the prompt, tokenized with BOS as the model says\n"
    "  -f, --file PATH     read the prompt from a file (one trailing newline dropped)\n"
    "  --tokens IDS        prompt token ids \"1,2,3\", used exactly (no BOS added)\n"
    "  --special           special-token text in the prompt becomes the token (default: off)\n"
    "  --kv-type T         KV cache type for K and V: f32, f16, q8_0, q4_0, q4 (default f16)\n"
    "  -t, --threads N     worker threads (default 0: every core)\n"
    "  -c, --ctx-size N    context size (default: the model's context_length)\n"
    "  --top N             tokens listed per position without --json (default 5)\n"
    "  --json              print {\"prompt_tokens\": [...], \"logits\": [[...], ...]} only\n"
    "  -h, --help          this help\n";

/* Prints a piece quoted and escaped on one line. */
static void print_piece(const kvi_model *m, int32_t tok)
{
    char buf[64];
    int32_t l = kvi_token_to_piece(m, tok, buf, sizeof buf, true);
    if (l < 0) l = 0;
    if ((size_t)l > sizeof buf) l = (int32_t)sizeof buf; /* long piece: shown truncated */
    putchar('\'');
    for (int32_t i = 0; i < l; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\\' || c == '\'')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('\'');
}

/* Writes the logits JSON document; false when a value is not finite (JSON has no NaN). */
static bool print_logits_json(const kvi_engine *e, const int32_t *ids, int32_t n, int32_t n_vocab)
{
    fputs("{\"prompt_tokens\": [", stdout);
    for (int32_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)ids[i]);
    fputs("], \"logits\": [", stdout);
    bool finite = true;
    for (int32_t i = 0; i < n; i++) {
        const float *lg = kvi_logits(e, i); /* (n_vocab) floats */
        fputs(i ? ",\n[" : "\n[", stdout);
        for (int32_t v = 0; v < n_vocab; v++) {
            float x = lg ? lg[v] : NAN;
            if (!isfinite(x)) {
                finite = false;
                x = 0.0f;
            }
            printf(v ? ",%.9g" : "%.9g", (double)x);
        }
        putchar(']');
    }
    putchar(']');
    cJSON *pipe = cli_pipe_json(e); /* mpirun: the stages (cli_pipe.c) */
    char *ps = pipe ? cJSON_PrintUnformatted(pipe) : NULL;
    if (ps) printf(", \"pipeline\": %s", ps);
    cJSON_free(ps);
    cJSON_Delete(pipe);
    fputs("}\n", stdout);
    return finite;
}

static void print_logits_text(const kvi_model *m, const kvi_engine *e, const int32_t *ids, int32_t n,
                              int32_t n_vocab, int top)
{
    int32_t best[16]; /* (top) indices of the largest logits, descending */
    for (int32_t i = 0; i < n; i++) {
        const float *lg = kvi_logits(e, i); /* (n_vocab) floats */
        printf("%5d %6d ", (int)i, (int)ids[i]);
        print_piece(m, ids[i]);
        fputs("  ->", stdout);
        if (!lg) {
            fputs(" (no logits)\n", stdout);
            continue;
        }
        int k = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            /* insertion into the short sorted list; NaN never ranks */
            if (!(lg[v] == lg[v])) continue;
            int j = k < top ? k++ : top;
            if (j == top && !(lg[v] > lg[best[top - 1]])) continue;
            if (j == top) j = top - 1;
            while (j > 0 && lg[v] > lg[best[j - 1]]) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = v;
        }
        for (int j = 0; j < k; j++) {
            printf("  %d ", (int)best[j]);
            print_piece(m, best[j]);
            printf(" %.4f", (double)lg[best[j]]);
        }
        putchar('\n');
    }
}

/* The shared flags `logits` takes (cli/cli_opts.h): --kv-type for K and V only. */
#define LOGITS_OPTS                                                                                      \
    (CLI_OPT_MODEL | CLI_OPT_TOKENIZER | CLI_OPT_MMAP | CLI_OPT_PROMPT | CLI_OPT_THREADS | CLI_OPT_CTX | \
     CLI_OPT_KV_TYPE | CLI_OPT_LORA)

/* 0: parsed; 1: error printed; 2: help printed. */
static int parse_logits_args(int argc, char **argv, cli_common *c, int64_t *top, bool *json)
{
    cli_common_init(c);
    *top = 5;
    *json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(logits_help, stdout);
            return 2;
        } else if ((r = cli_opt_common(argc, argv, &i, c, LOGITS_OPTS)) != 0) {
            if (r < 0) return 1;
        } else if (!strcmp(a, "--top")) {
            if (cli_flag_i64(a, cli_flag_value(argc, argv, &i), 1, 16, top) < 0) return 1;
        } else if (!strcmp(a, "--json")) {
            *json = true;
        } else if (a[0] == '-') {
            return cli_error("logits: unknown option '%s' (kvinfer logits --help)", a);
        } else {
            return cli_error("logits: unexpected argument '%s' (the prompt goes after -p)", a);
        }
    }
    if (!c->prompt && !c->file && !c->tokens)
        return cli_error("logits: no prompt: use -p TEXT, -f FILE or --tokens IDS");
    if ((c->prompt != NULL) + (c->file != NULL) + (c->tokens != NULL) > 1)
        return cli_error("logits: give the prompt only once: -p TEXT, -f FILE or --tokens IDS");
    return 0;
}

int cmd_logits(int argc, char **argv)
{
    cli_common c;
    int64_t top;
    bool json;
    int prc = parse_logits_args(argc, argv, &c, &top, &json);
    if (prc != 0) return prc == 2 ? 0 : 1;

    kvi_model *m = cli_opt_load_model(&c);
    if (!m) return 1;
    int32_t *ids = NULL, n = 0;
    kvi_engine *e = NULL;
    kvi_seq *seq = NULL;
    kvi_batch *b = NULL;
    int rc = cli_prompt_ids(m, c.prompt, c.file, c.tokens, c.special, &ids, &n);
    if (rc == 0) {
        kvi_model_info info;
        kvi_model_get_info(m, &info);
        int n_ctx = c.n_ctx > 0 ? (int)c.n_ctx : info.n_ctx_train;
        kvi_engine_params ep;
        cli_opt_engine_params(&c, &ep);
        ep.n_ctx = n_ctx > 0 ? n_ctx : 0;
        ep.n_seq_max = 1;
        if (ep.n_batch_max < n) ep.n_batch_max = n; /* one forward pass */
        if (n_ctx > 0 && n > n_ctx)
            rc = cli_ctx_exceeded(n, n_ctx);
        else if (!(e = cli_engine_create(m, &ep, "")) || cli_opt_lora(&c, e, ""))
            rc = 1;
        else if (cli_pipe_attach(e, &ep)) /* mpirun: stage 0 of the pipeline */
            rc = 1;
    }
    if (rc == 0 && n > kvi_engine_n_ctx(e)) rc = cli_ctx_exceeded(n, kvi_engine_n_ctx(e));
    if (rc == 0 && !(seq = kvi_seq_create(e))) rc = cli_error("cannot create a sequence");
    if (rc == 0 && !(b = kvi_batch_create(n)))
        rc = cli_error("out of memory creating a batch of %d rows", (int)n);
    for (int32_t i = 0; rc == 0 && i < n; i++)
        if (kvi_batch_add(b, seq, ids[i], i, true) < 0) rc = cli_error("cannot add prompt row %d", (int)i);
    if (rc == 0) {
        kvi_error err = { 0 };
        double t0 = kvi_time_ms();
        int r = kvi_step(e, b, &err);
        double ms = kvi_time_ms() - t0;
        if (r != 0)
            rc = cli_error("prefill failed: %s", err.msg[0] ? err.msg : kvi_strerror(r));
        else
            fprintf(stderr, "kvinfer: %d prompt tokens in one pass: %.2f ms\n", (int)n, ms);
    }
    if (rc == 0) {
        int32_t n_vocab = kvi_n_vocab(m);
        if (json) {
            static char obuf[1 << 20]; /* stdout buffer: 1 MiB */
            setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
            if (!print_logits_json(e, ids, n, n_vocab))
                fprintf(stderr, "kvinfer: warning: non-finite logits were written as 0\n");
            fflush(stdout);
        } else {
            print_logits_text(m, e, ids, n, n_vocab, (int)top);
        }
    }
    if (b) kvi_batch_free(b);
    if (seq) kvi_seq_free(seq);
    if (e) kvi_engine_free(e);
    kvi_model_free(m);
    free(ids);
    return rc;
}
