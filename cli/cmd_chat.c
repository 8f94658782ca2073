/*
 * cmd_chat.c — `kvinfer chat`: an interactive chat in the terminal that keeps
 * the conversation's KV cache between turns.
 *
 * Data structure: conv[0..n_conv) holds the token ids of the whole conversation
 * so far, laid out by the model's chat template (kvi_chat_apply); the one
 * sequence caches positions 0..kvi_seq_len-1 of it. Each turn the template is
 * applied to every message again; the ids that agree with conv are already in
 * the cache, so only the rest (the new message, the assistant's opening) is
 * prefilled — printed per turn as "cached" vs "prefilled" tokens, with the
 * prefill and decode times.
 *
 * Invariant: conv[0..kvi_seq_len(seq)) are exactly the ids whose K/V are
 * cached; a mismatch truncates the sequence to the common prefix.
 */
#include "cli/cli_opts.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char chat_help[] =
    "usage: kvinfer chat [-m MODEL] [options]\n"
    "\n"
    "Interactive chat in the terminal using the model's chat template. The\n"
    "conversation's KV cache is kept between turns, so each turn prefills only the\n"
    "new message; per turn it prints prefill and decode time and the tokens served\n"
    "from the cache. An empty line or end of input quits.\n"
    "\n"
    "  -m, --model PATH     model (default: ../shared/models/stories260K.gguf if it exists)\n"
    "  -s, --system TEXT    system message\n"
    "  --chat-template-file F  lay the conversation out with the Jinja template in F\n"
    "                       (default: the model's tokenizer.chat_template; a model without\n"
    "                       one uses the built-in layouts)\n"
    "  -n, --n-predict N    most tokens per answer (default 256)\n"
    "  -c, --ctx-size N     context size (default: the model's)\n"
    "  --lora FILE          LoRA adapter (GGUF), scale 1; --lora-scaled FILE S (or FILE:S[,..])\n"
    "  -t, --threads N      worker threads (default 0: every core)\n"
    "  --temp T             temperature (default 0.8; 0: argmax)\n"
    "  --seed S             sampler seed (default 0xC0FFEE)\n"
    "  -h, --help           this help\n"
    "sampling (llama.cpp's flags):\n";

typedef struct msgs {
    kvi_chat_msg *v;
    char **owned;
    int n, cap;
} msgs;

static bool msgs_add(msgs *m, const char *role, const char *text, size_t len)
{
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        kvi_chat_msg *nv = realloc(m->v, (size_t)cap * sizeof *nv);
        if (!nv) return false;
        m->v = nv;
        char **no = realloc(m->owned, (size_t)cap * sizeof *no);
        if (!no) return false;
        m->owned = no;
        m->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s) return false;
    memcpy(s, text, len);
    s[len] = 0;
    m->owned[m->n] = s;
    m->v[m->n].role = role;
    m->v[m->n].content = s;
    m->n++;
    return true;
}

/* The shared flags `chat` takes (cli/cli_opts.h): -c 0 is the model's context,
 * and a bad number reads "X: bad value 'V'". */
#define CHAT_OPTS \
    (CLI_OPT_MODEL | CLI_OPT_THREADS | CLI_OPT_CTX | CLI_OPT_CTX_MIN0 | CLI_OPT_TERSE | CLI_OPT_LORA)

typedef struct chat_opts {
    cli_common c;
    const char *system, *template_file;
    int64_t n_predict;
    kvi_sampler_params sp;
    cli_sampling so; /* DRY's breakers */
} chat_opts;

/* Every chat option takes a value (an unknown one too, which is then reported).
 * 0: parsed; 1: error printed; 2: help printed. */
static int parse_chat_args(int argc, char **argv, chat_opts *o)
{
    cli_common_init(&o->c);
    memset(&o->so, 0, sizeof o->so);
    o->system = NULL;
    o->template_file = NULL;
    o->n_predict = 256;
    kvi_sampler_params_default(&o->sp);
    o->sp.temp = 0.8f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(chat_help, stdout);
            fputs(cli_sampling_help, stdout);
            return 2;
        }
        if (i + 1 >= argc) {
            cli_flag_value(argc, argv, &i); /* prints "flag X needs a value" */
            return 1;
        }
        int r = cli_opt_common(argc, argv, &i, &o->c, CHAT_OPTS);
        if (r == 0) r = cli_opt_sampling(argc, argv, &i, &o->sp, &o->so);
        if (r < 0) return 1;
        if (r > 0) continue;
        v = cli_flag_value(argc, argv, &i);
        if (!strcmp(a, "-s") || !strcmp(a, "--system"))
            o->system = v;
        else if (!strcmp(a, "--chat-template-file"))
            o->template_file = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_parse_i64(v, 1, 1 << 24, &o->n_predict)) return cli_error("%s: bad value '%s'", a, v);
        } else if (!strcmp(a, "--temp")) {
            if (!cli_parse_f32(v, &o->sp.temp) || o->sp.temp < 0)
                return cli_error("--temp: bad value '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(v, &o->sp.seed)) return cli_error("--seed: bad value '%s'", v);
        } else {
            return cli_error("chat: unknown option '%s' (kvinfer chat --help)", a);
        }
    }
    return 0;
}

/* The conversation: its engine, one sequence, and conv (see the file comment). */
typedef struct chat_state {
    kvi_model *m;
    kvi_engine *e;
    kvi_seq *seq;
    kvi_batch *b;
    int n_ctx;
    int32_t *conv, n_conv; /* (n_ctx + 1) ids of the conversation so far */
    int32_t *want;         /* (n_ctx + 1) ids the template gives this turn */
    msgs ms;
    /* the Jinja template, rendered and tokenized as `serve` does (server/
     * server_template.c: message text stays plain text); tsrv.tmpl NULL: the
     * built-in layouts (kvi_chat_apply) */
    srv_server tsrv;
} chat_state;

/* The Jinja template: --chat-template-file's, else the model's (when it ships
 * one and it parses; the choice is logged). 0, or 1 with the error printed. */
static int chat_template_setup(chat_state *st, const char *file)
{
    size_t len = 0;
    char *text = NULL;
    if (file && !(text = cli_read_file(file, &len)))
        return cli_error("chat: cannot read '%s': %s", file, strerror(errno));
    kvi_error err = { 0 };
    st->tsrv.m = st->m;
    int rc = srv_template_init(&st->tsrv, text, len, file, &err);
    free(text);
    return rc ? cli_error("chat: %s", err.msg) : 0;
}

/* The conversation's ids by the Jinja template: messages rendered with the
 * assistant's opening, special tokens recognised in the template's own text
 * only. Returns the number of ids (may exceed n_max) or a negative code with
 * err filled. */
static int32_t chat_render_ids(chat_state *st, int32_t *out, int32_t n_max, kvi_error *err)
{
    cJSON *body = cJSON_CreateObject();
    cJSON *arr = body ? cJSON_AddArrayToObject(body, "messages") : NULL;
    for (int i = 0; arr && i < st->ms.n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, m);
        cJSON_AddStringToObject(m, "role", st->ms.v[i].role);
        cJSON_AddStringToObject(m, "content", st->ms.v[i].content);
    }
    char *json = arr ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (!json) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return err->code = KVI_E_NOMEM;
    }
    srv_err er = { 0 };
    int32_t n = 0;
    bool in_reasoning = false; /* chat prints the reply as it comes, reasoning included */
    int32_t *ids = srv_template_ids(&st->tsrv, json, strlen(json), &n, &in_reasoning, &er);
    free(json);
    if (!ids) {
        snprintf(err->msg, sizeof err->msg, "%s", er.msg);
        return err->code = KVI_E_INVALID;
    }
    memcpy(out, ids, (size_t)(n < n_max ? n : n_max) * sizeof *out);
    free(ids);
    return n;
}

/* Samples and streams the answer after the prefill whose logits are in batch
 * row `row`, one decode step per token. The answer's text (malloc'd, alen bytes;
 * NULL when out of memory) and its token count in *n_gen. */
static char *chat_answer(chat_state *st, kvi_sampler *smp, int32_t row, int64_t n_predict, int32_t *n_gen,
                         size_t *alen)
{
    kvi_error err = { 0 };
    size_t acap = 256;
    char *answer = malloc(acap);
    *alen = 0;
    *n_gen = 0;
    while (answer && *n_gen < n_predict && st->n_conv < st->n_ctx) {
        const int32_t tok = kvi_sampler_sample(smp, kvi_logits(st->e, row));
        kvi_sampler_accept_output(smp, tok); /* mirostat's mu follows it */
        if (kvi_token_is_eog(st->m, tok)) break;
        char piece[256];
        int32_t pl = kvi_token_to_piece(st->m, tok, piece, sizeof piece, false);
        if (pl > 0 && (size_t)pl <= sizeof piece) {
            fwrite(piece, 1, (size_t)pl, stdout);
            fflush(stdout);
            if (*alen + (size_t)pl + 1 > acap) {
                char *na = realloc(answer, acap = 2 * (*alen + (size_t)pl + 1));
                if (!na) break;
                answer = na;
            }
            memcpy(answer + *alen, piece, (size_t)pl);
            *alen += (size_t)pl;
        }
        st->conv[st->n_conv++] = tok;
        (*n_gen)++;
        kvi_batch_clear(st->b);
        kvi_batch_add(st->b, st->seq, tok, st->n_conv - 1, true);
        if (kvi_step(st->e, st->b, &err) != 0) break;
        row = 0;
    }
    return answer;
}

/* One turn: the user's line is added, the template applied again, only the ids
 * past the cached prefix prefilled, the answer streamed and added. 0, or 1 with
 * the error printed. */
static int chat_turn(chat_state *st, const chat_opts *o, const char *line, size_t len)
{
    kvi_error err = { 0 };
    if (!msgs_add(&st->ms, "user", line, len)) return cli_error("chat: out of memory");
    const int32_t n_want =
        st->tsrv.tmpl ? chat_render_ids(st, st->want, st->n_ctx + 1, &err)
                      : kvi_chat_apply(st->m, st->ms.v, st->ms.n, true, st->want, st->n_ctx + 1, &err);
    if (n_want < 0) return cli_error("chat: %s", err.msg);
    if (n_want >= st->n_ctx)
        return cli_error("chat: context_length_exceeded (%d tokens, context %d)", n_want, st->n_ctx);
    /* reuse the cached prefix; prefill the rest in one pass */
    int32_t common = 0, cached = kvi_seq_len(st->seq);
    while (common < cached && common < n_want && st->conv[common] == st->want[common]) common++;
    if (common == n_want) common--;               /* the last id must run to give logits */
    if (kvi_seq_truncate(st->seq, common) != 0) { /* recurrent layers: no rewind, run it all again */
        kvi_seq_truncate(st->seq, 0);
        common = 0;
    }
    memcpy(st->conv, st->want, (size_t)n_want * sizeof *st->conv);
    st->n_conv = n_want;
    const double t0 = kvi_time_ms();
    kvi_batch_clear(st->b);
    for (int32_t p = common; p < st->n_conv; p++)
        kvi_batch_add(st->b, st->seq, st->conv[p], p, p == st->n_conv - 1);
    if (kvi_step(st->e, st->b, &err) != 0) return cli_error("chat: prefill failed: %s", err.msg);
    const double t1 = kvi_time_ms();
    kvi_sampler *smp = kvi_sampler_create(&o->sp, kvi_n_vocab(st->m));
    if (!smp) return cli_error("chat: out of memory");
    if (cli_sampler_breakers(smp, st->m, &o->sp, &o->so) != 0) {
        kvi_sampler_free(smp);
        return 1;
    }
    for (int32_t p = 0; p < st->n_conv; p++) kvi_sampler_accept(smp, st->conv[p]);
    int32_t n_gen;
    size_t alen;
    char *answer = chat_answer(st, smp, kvi_batch_n_rows(st->b) - 1, o->n_predict, &n_gen, &alen);
    const double t2 = kvi_time_ms();
    kvi_sampler_free(smp);
    kvi_stats ks;
    kvi_stats_get(st->e, st->seq, &ks);
    fprintf(stderr,
            "\n[prefill %d tokens in %.1f ms, %d served from the cache; decode %d tokens in %.1f ms; KV %zu "
            "bytes]\n",
            (int)(n_want - common), t1 - t0, (int)common, (int)n_gen, t2 - t1, ks.kv_bytes);
    const bool ok = msgs_add(&st->ms, "assistant", answer ? answer : "", answer ? alen : 0);
    free(answer);
    return ok ? 0 : cli_error("chat: out of memory");
}

int cmd_chat(int argc, char **argv)
{
    chat_opts o;
    int prc = parse_chat_args(argc, argv, &o);
    if (prc != 0) return prc == 2 ? 0 : 1;
    chat_state st = { 0 };
    if (!(st.m = cli_opt_load_model(&o.c))) return 1;
    kvi_engine_params ep;
    cli_opt_engine_params(&o.c, &ep);
    if (!(st.e = cli_engine_create(st.m, &ep, "chat: ")) || cli_opt_lora(&o.c, st.e, "chat: ") ||
        cli_pipe_attach(st.e, &ep)) {
        kvi_engine_free(st.e); /* mpirun: stage 0 of the pipeline */
        kvi_model_free(st.m);
        return 1;
    }
    st.n_ctx = kvi_engine_n_ctx(st.e);
    st.seq = kvi_seq_create(st.e);
    st.b = kvi_batch_create(st.n_ctx);
    st.conv = malloc(((size_t)st.n_ctx + 1) * sizeof *st.conv);
    st.want = malloc(((size_t)st.n_ctx + 1) * sizeof *st.want);
    int rc = chat_template_setup(&st, o.template_file);
    if (rc) {
        /* the error is printed */
    } else if (!st.seq || !st.b || !st.conv || !st.want ||
               (o.system && !msgs_add(&st.ms, "system", o.system, strlen(o.system)))) {
        rc = cli_error("chat: out of memory");
    } else {
        if (st.tsrv.tmpl)
            fprintf(stderr, "kvinfer chat: template Jinja (%s), context %d (empty line quits)\n",
                    o.template_file ? o.template_file : "the model's", st.n_ctx);
        else
            fprintf(stderr, "kvinfer chat: template %s, context %d (empty line quits)\n",
                    kvi_chat_family(st.m), st.n_ctx);
        char line[8192];
        for (;;) {
            fputs("> ", stdout);
            fflush(stdout);
            if (!fgets(line, sizeof line, stdin)) break;
            size_t len = strlen(line);
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if (len == 0 || (rc = chat_turn(&st, &o, line, len)) != 0) break;
        }
    }
    for (int i = 0; i < st.ms.n; i++) free(st.ms.owned[i]);
    free(st.ms.owned);
    free(st.ms.v);
    free(st.conv);
    free(st.want);
    srv_template_free(&st.tsrv);
    kvi_batch_free(st.b);
    if (st.seq) kvi_seq_free(st.seq);
    kvi_engine_free(st.e);
    kvi_model_free(st.m);
    return rc;
}
