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
#include "cli/cli.h"

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
    "  -n, --n-predict N    most tokens per answer (default 256)\n"
    "  -c, --ctx-size N     context size (default: the model's)\n"
    "  -t, --threads N      worker threads (default 0: every core)\n"
    "  --temp T             temperature (default 0.8; 0: argmax)\n"
    "  --seed S             sampler seed (default 0xC0FFEE)\n"
    "  -h, --help           this help\n";

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

int cmd_chat(int argc, char **argv)
{
    const char *model = NULL, *system = NULL;
    int64_t n_predict = 256, ctx = 0, threads = 0;
    kvi_sampler_params sp;
    kvi_sampler_params_default(&sp);
    sp.temp = 0.8f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(chat_help, stdout);
            return 0;
        }
        if (!(v = cli_flag_value(argc, argv, &i))) return 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-s") || !strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_parse_i64(v, 1, 1 << 24, &n_predict)) return cli_error("%s: bad value '%s'", a, v);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!cli_parse_i64(v, 0, 1 << 24, &ctx)) return cli_error("%s: bad value '%s'", a, v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_parse_i64(v, 0, 1024, &threads)) return cli_error("%s: bad value '%s'", a, v);
        } else if (!strcmp(a, "--temp")) {
            if (!cli_parse_f32(v, &sp.temp) || sp.temp < 0) return cli_error("--temp: bad value '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(v, &sp.seed)) return cli_error("--seed: bad value '%s'", v);
        } else {
            return cli_error("chat: unknown option '%s' (kvinfer chat --help)", a);
        }
    }
    kvi_model *m = cli_load_model(model, false, NULL);
    if (!m) return 1;
    kvi_engine_params ep;
    cli_engine_params_default(&ep);
    ep.n_threads = (int)threads;
    ep.n_ctx = (int)ctx;
    kvi_error err = {0};
    kvi_engine *e = kvi_engine_create(m, &ep, &err);
    if (!e) {
        kvi_model_free(m);
        return cli_error("chat: cannot create the engine: %s", err.msg);
    }
    const int n_ctx = kvi_engine_n_ctx(e);
    kvi_seq *seq = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n_ctx);
    int32_t *conv = malloc(((size_t)n_ctx + 1) * sizeof *conv), n_conv = 0;
    int32_t *want = malloc(((size_t)n_ctx + 1) * sizeof *want);
    msgs ms = {0};
    int rc = 0;
    if (!seq || !b || !conv || !want || (system && !msgs_add(&ms, "system", system, strlen(system)))) {
        rc = cli_error("chat: out of memory");
        goto out;
    }
    fprintf(stderr, "kvinfer chat: template %s, context %d (empty line quits)\n", kvi_chat_family(m), n_ctx);
    char line[8192];
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) break;
        size_t len = strlen(line);
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) break;
        if (!msgs_add(&ms, "user", line, len)) { rc = cli_error("chat: out of memory"); break; }
        const int32_t n_want = kvi_chat_apply(m, ms.v, ms.n, true, want, n_ctx + 1, &err);
        if (n_want < 0) { rc = cli_error("chat: %s", err.msg); break; }
        if (n_want >= n_ctx) { rc = cli_error("chat: context_length_exceeded (%d tokens, context %d)", n_want, n_ctx); break; }
        /* reuse the cached prefix; prefill the rest in one pass */
        int32_t common = 0, cached = kvi_seq_len(seq);
        while (common < cached && common < n_want && conv[common] == want[common]) common++;
        if (common == n_want) common--;   /* the last id must run to give logits */
        kvi_seq_truncate(seq, common);
        memcpy(conv, want, (size_t)n_want * sizeof *conv);
        n_conv = n_want;
        const double t0 = kvi_time_ms();
        kvi_batch_clear(b);
        for (int32_t p = common; p < n_conv; p++) kvi_batch_add(b, seq, conv[p], p, p == n_conv - 1);
        if (kvi_step(e, b, &err) != 0) { rc = cli_error("chat: prefill failed: %s", err.msg); break; }
        const double t1 = kvi_time_ms();
        kvi_sampler *smp = kvi_sampler_create(&sp, kvi_n_vocab(m));
        if (!smp) { rc = cli_error("chat: out of memory"); break; }
        for (int32_t p = 0; p < n_conv; p++) kvi_sampler_accept(smp, conv[p]);
        int32_t row = kvi_batch_n_rows(b) - 1, n_gen = 0;
        size_t alen = 0, acap = 256;
        char *answer = malloc(acap);
        while (answer && n_gen < n_predict && n_conv < n_ctx) {
            const int32_t tok = kvi_sampler_sample(smp, kvi_logits(e, row));
            kvi_sampler_accept(smp, tok);
            if (kvi_token_is_eog(m, tok)) break;
            char piece[256];
            int32_t pl = kvi_token_to_piece(m, tok, piece, sizeof piece, false);
            if (pl > 0 && (size_t)pl <= sizeof piece) {
                fwrite(piece, 1, (size_t)pl, stdout);
                fflush(stdout);
                if (alen + (size_t)pl + 1 > acap) {
                    char *na = realloc(answer, acap = 2 * (alen + (size_t)pl + 1));
                    if (!na) break;
                    answer = na;
                }
                memcpy(answer + alen, piece, (size_t)pl);
                alen += (size_t)pl;
            }
            conv[n_conv++] = tok;
            n_gen++;
            kvi_batch_clear(b);
            kvi_batch_add(b, seq, tok, n_conv - 1, true);
            if (kvi_step(e, b, &err) != 0) break;
            row = 0;
        }
        const double t2 = kvi_time_ms();
        kvi_sampler_free(smp);
        kvi_stats ks;
        kvi_stats_get(e, seq, &ks);
        fprintf(stderr, "\n[prefill %d tokens in %.1f ms, %d served from the cache; decode %d tokens in %.1f ms; KV %zu bytes]\n",
                (int)(n_want - common), t1 - t0, (int)common, (int)n_gen, t2 - t1, ks.kv_bytes);
        if (!msgs_add(&ms, "assistant", answer ? answer : "", answer ? alen : 0)) {
            free(answer);
            rc = cli_error("chat: out of memory");
            break;
        }
        free(answer);
    }
out:
    for (int i = 0; i < ms.n; i++) free(ms.owned[i]);
    free(ms.owned);
    free(ms.v);
    free(conv);
    free(want);
    kvi_batch_free(b);
    if (seq) kvi_seq_free(seq);
    kvi_engine_free(e);
    kvi_model_free(m);
    return rc;
}
