/*
 * test_logprobs.c — log-probabilities: kvi_logprobs_top against hand-computed
 * and long-double values, then `kvinfer serve` over real HTTP: the values of
 * a greedy completion equal the log-softmax of `kvinfer logits --json` for the
 * same tokens (computed here, in double), OpenAI's shapes for chat and
 * completions, streamed and not, and 400 for out-of-range fields.
 *
 * The server is a child process on a free port (--port 0, read from stdout);
 * a small HTTP/1.0 client reads each response to the close.
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- kvi_logprobs_top alone ---- */

static void test_hand_values(void)
{
    /* probabilities 1/2, 1/4, 1/8, 1/8 shifted by a constant: log p exactly */
    const float logits[4] = { logf(0.5f) + 3.0f, logf(0.25f) + 3.0f, logf(0.125f) + 3.0f,
                              logf(0.125f) + 3.0f };
    int32_t ids[KVI_LOGPROBS_MAX];
    float lps[KVI_LOGPROBS_MAX], lp = 1.0f;
    int32_t n = kvi_logprobs_top(logits, 4, 3, 3, &lp, ids, lps);
    CHECK(n == 3, "n %d", n);
    CHECK(fabsf(lp - logf(0.125f)) < 1e-6f, "token 3: %g", lp);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2, "order %d %d %d (tie: lower id first)", ids[0], ids[1],
          ids[2]);
    CHECK(fabsf(lps[0] - logf(0.5f)) < 1e-6f && fabsf(lps[1] - logf(0.25f)) < 1e-6f &&
              fabsf(lps[2] - logf(0.125f)) < 1e-6f,
          "values %g %g %g", lps[0], lps[1], lps[2]);
    /* k beyond the vocabulary: all of it */
    n = kvi_logprobs_top(logits, 4, 0, 20, NULL, ids, lps);
    CHECK(n == 4 && ids[3] == 3, "n %d", n);
    /* refused: k > 20, token out of range, no logits */
    CHECK(kvi_logprobs_top(logits, 4, 0, 21, NULL, ids, lps) == KVI_E_INVALID, "k 21");
    CHECK(kvi_logprobs_top(logits, 4, 4, 1, &lp, ids, lps) == KVI_E_INVALID, "token 4 of 4");
    CHECK(kvi_logprobs_top(NULL, 4, 0, 1, &lp, ids, lps) == KVI_E_INVALID, "no logits");
    /* -inf logits have probability 0; the rest still sums to one */
    const float two[3] = { 0.0f, -INFINITY, 0.0f };
    n = kvi_logprobs_top(two, 3, 1, 3, &lp, ids, lps);
    CHECK(n == 3 && isinf(lp) && lp < 0 && fabsf(lps[0] - logf(0.5f)) < 1e-6f && ids[2] == 1, "with -inf");
}

static void test_random_values(void)
{
    enum { V = 3000 };
    float *lg = malloc(V * sizeof *lg);
    uint64_t st = 42;
    for (int i = 0; i < V; i++) lg[i] = 4.0f * trand_normal(&st) + 1.0f;
    long double mx = lg[0], sum = 0;
    for (int i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < V; i++) sum += expl((long double)lg[i] - mx);
    const long double lse = mx + logl(sum);
    int32_t ids[KVI_LOGPROBS_MAX];
    float lps[KVI_LOGPROBS_MAX], lp;
    const int32_t n = kvi_logprobs_top(lg, V, 17, 20, &lp, ids, lps);
    CHECK(n == 20, "n %d", n);
    CHECK(fabsl((long double)lp - ((long double)lg[17] - lse)) < 1e-5L, "token 17: %g", lp);
    /* the 20 best, by counting how many logits beat each one */
    for (int j = 0; j < n; j++) {
        int above = 0;
        for (int i = 0; i < V; i++) above += lg[i] > lg[ids[j]];
        CHECK(above == j, "rank of top %d is %d", j, above);
        CHECK(fabsl((long double)lps[j] - ((long double)lg[ids[j]] - lse)) < 1e-5L, "top %d value", j);
    }
    free(lg);
}

/* ---- the server ---- */

static http_resp post(int port, const char *path, const char *body)
{
    http_resp r = http_request(port, "POST", path, NULL, body);
    if (!r.body) r.body = strdup("");
    return r;
}

/* post, then the reply parsed into *doc (cJSON_Delete it; free r->body): its
 * choices[0], NULL when absent. */
static const cJSON *post_choice0(int port, const char *path, const char *body, http_resp *r, cJSON **doc)
{
    *r = post(port, path, body);
    *doc = cJSON_Parse(r->body);
    return cJSON_GetArrayItem(cJSON_GetObjectItem(*doc, "choices"), 0);
}

/* The events of an SSE body as one JSON array of their choices[0] (malloc'd). */
static cJSON *sse_choices(const char *body, bool *done)
{
    cJSON *arr = cJSON_CreateArray();
    *done = false;
    const char *p = body, *ev;
    size_t n;
    while (sse_next(&p, &ev, &n, done)) {
        cJSON *j = cJSON_ParseWithLength(ev, n);
        cJSON *ch = cJSON_GetObjectItem(j, "choices");
        if (cJSON_GetArraySize(ch) > 0) cJSON_AddItemToArray(arr, cJSON_DetachItemFromArray(ch, 0));
        cJSON_Delete(j);
    }
    return arr;
}

static double num(const cJSON *o) { return cJSON_IsNumber(o) ? o->valuedouble : NAN; }

enum { NP = 3, NG = 6, TOPK = 5 };

/* Greedy ids from `kvinfer run` and the log-softmax of `kvinfer logits --json` of
 * the positions that chose them: ref[j][v] for generated token j. */
static bool reference(int32_t gen[NG], double ref[NG][512], int32_t *n_vocab)
{
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "run -m '%s' --tokens 1,403,407 -n %d --temp 0 --ignore-eos --json -t 1",
             shared_path("models/stories260K.gguf"), NG);
    int rc = run_kvinfer(args, &out, NULL);
    cJSON *j = rc == 0 && out ? cJSON_Parse(out) : NULL;
    free(out);
    const cJSON *t = cJSON_GetObjectItem(j, "tokens");
    CHECK(cJSON_GetArraySize(t) == NG, "kvinfer run gave %d tokens (rc %d)", cJSON_GetArraySize(t), rc);
    if (cJSON_GetArraySize(t) != NG) {
        cJSON_Delete(j);
        return false;
    }
    for (int i = 0; i < NG; i++) gen[i] = cJSON_GetArrayItem(t, i)->valueint;
    cJSON_Delete(j);
    int n = snprintf(args, sizeof args, "logits -m '%s' --json -t 1 --tokens 1,403,407",
                     shared_path("models/stories260K.gguf"));
    for (int i = 0; i < NG - 1; i++) n += snprintf(args + n, sizeof args - (size_t)n, ",%d", gen[i]);
    out = NULL;
    rc = run_kvinfer(args, &out, NULL);
    j = rc == 0 && out ? cJSON_Parse(out) : NULL;
    free(out);
    const cJSON *L = cJSON_GetObjectItem(j, "logits");
    CHECK(cJSON_GetArraySize(L) == NP + NG - 1, "kvinfer logits rows %d (rc %d)", cJSON_GetArraySize(L), rc);
    bool ok = cJSON_GetArraySize(L) == NP + NG - 1;
    for (int g = 0; ok && g < NG; g++) {
        const cJSON *row = cJSON_GetArrayItem(L, NP - 1 + g);
        const int V = cJSON_GetArraySize(row);
        if (V < 2 || V > 512) {
            ok = false;
            break;
        }
        *n_vocab = V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, num(cJSON_GetArrayItem(row, v)));
        for (int v = 0; v < V; v++) sum += exp(num(cJSON_GetArrayItem(row, v)) - mx);
        for (int v = 0; v < V; v++) ref[g][v] = num(cJSON_GetArrayItem(row, v)) - mx - log(sum);
    }
    CHECK(ok, "logits rows malformed");
    cJSON_Delete(j);
    return ok;
}

/* Checks a completion's logprobs object against the reference; returns its
 * token_logprobs as a string for comparing the stream to it. */
static void check_completion_lp(const cJSON *lp, const int32_t gen[NG], double ref[NG][512], int V,
                                const char *what)
{
    const cJSON *toks = cJSON_GetObjectItem(lp, "tokens"), *tlp = cJSON_GetObjectItem(lp, "token_logprobs");
    const cJSON *top = cJSON_GetObjectItem(lp, "top_logprobs"), *off = cJSON_GetObjectItem(lp, "text_offset");
    CHECK(cJSON_GetArraySize(toks) == NG && cJSON_GetArraySize(tlp) == NG && cJSON_GetArraySize(top) == NG &&
              cJSON_GetArraySize(off) == NG,
          "%s: arrays of %d %d %d %d, want %d", what, cJSON_GetArraySize(toks), cJSON_GetArraySize(tlp),
          cJSON_GetArraySize(top), cJSON_GetArraySize(off), NG);
    if (cJSON_GetArraySize(tlp) != NG || cJSON_GetArraySize(top) != NG) return;
    size_t text_off = 0;
    for (int g = 0; g < NG; g++) {
        const double got = num(cJSON_GetArrayItem(tlp, g));
        CHECK(fabs(got - ref[g][gen[g]]) < 2e-5, "%s: token %d logprob %.8f, log-softmax of the logits %.8f",
              what, g, got, ref[g][gen[g]]);
        /* the k best values of the reference row, descending */
        double best[TOPK];
        for (int k = 0; k < TOPK; k++) {
            best[k] = -INFINITY;
            for (int v = 0; v < V; v++) {
                int above = 0;
                for (int u = 0; u < V; u++) above += ref[g][u] > ref[g][v];
                if (above == k) best[k] = fmax(best[k], ref[g][v]);
            }
        }
        const cJSON *d = cJSON_GetArrayItem(top, g);
        const int nd = cJSON_GetArraySize(d);
        CHECK(nd >= 1 && nd <= TOPK + 1, "%s: token %d has %d alternatives", what, g, nd);
        /* every listed value is one of the reference's top values (distinct
         * pieces; the sampled token is the greedy argmax, so among them) */
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, d)
        {
            bool found = false;
            for (int b = 0; b < TOPK; b++) found = found || fabs(num(it) - best[b]) < 2e-5;
            CHECK(found, "%s: token %d alternative '%s' %.8f not among the top %d", what, g, it->string,
                  num(it), TOPK);
            if (k == 0) CHECK(fabs(num(it) - best[0]) < 2e-5, "%s: first alternative is not the best", what);
            k++;
        }
        CHECK((size_t)num(cJSON_GetArrayItem(off, g)) == text_off, "%s: text_offset[%d] %g, want %zu", what,
              g, num(cJSON_GetArrayItem(off, g)), text_off);
        const cJSON *ts = cJSON_GetArrayItem(toks, g);
        if (cJSON_IsString(ts)) text_off += strlen(ts->valuestring);
    }
}

static void test_completions(int port)
{
    int32_t gen[NG];
    static double ref[NG][512];
    int V = 0;
    if (!reference(gen, ref, &V)) return;
    char body[512];
    snprintf(
        body, sizeof body,
        "{\"prompt\":[1,403,407],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":%d}",
        NG, TOPK);
    http_resp r;
    cJSON *j;
    const cJSON *c0 = post_choice0(port, "/v1/completions", body, &r, &j);
    CHECK(r.status == 200, "completions %d: %s", r.status, r.body);
    const cJSON *lp = cJSON_GetObjectItem(c0, "logprobs");
    check_completion_lp(lp, gen, ref, V, "completion");
    /* the tokens' strings make the text */
    const cJSON *text = cJSON_GetObjectItem(c0, "text");
    char joined[1024] = "";
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(lp, "tokens")) if (cJSON_IsString(it))
        strncat(joined, it->valuestring, sizeof joined - strlen(joined) - 1);
    CHECK(cJSON_IsString(text) && !strcmp(joined, text->valuestring), "tokens '%s' vs text", joined);
    cJSON_Delete(j);
    free(r.body);

    /* streamed: one entry per token event, the same values */
    snprintf(
        body, sizeof body,
        "{\"prompt\":[1,403,407],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":%d,"
        "\"stream\":true}",
        NG, TOPK);
    r = post(port, "/v1/completions", body);
    CHECK(r.status == 200, "stream %d", r.status);
    bool done;
    cJSON *ev = sse_choices(r.body, &done);
    CHECK(done, "stream ends with [DONE]");
    cJSON *merged = cJSON_CreateObject();
    const char *keys[4] = { "tokens", "token_logprobs", "top_logprobs", "text_offset" };
    cJSON *arrs[4];
    for (int k = 0; k < 4; k++) arrs[k] = cJSON_AddArrayToObject(merged, keys[k]);
    int n_tok_events = 0;
    cJSON_ArrayForEach(it, ev)
    {
        const cJSON *l = cJSON_GetObjectItem(it, "logprobs");
        if (cJSON_IsNull(cJSON_GetObjectItem(it, "finish_reason"))) {
            n_tok_events++;
            CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(l, "tokens")) == 1,
                  "a token event carries one entry");
        } else {
            CHECK(cJSON_IsNull(l), "the final event has logprobs null");
        }
        for (int k = 0; k < 4 && cJSON_IsObject(l); k++) {
            const cJSON *x;
            cJSON_ArrayForEach(x, cJSON_GetObjectItem(l, keys[k]))
                cJSON_AddItemToArray(arrs[k], cJSON_Duplicate(x, 1));
        }
    }
    CHECK(n_tok_events == NG, "%d token events", n_tok_events);
    check_completion_lp(merged, gen, ref, V, "stream");
    cJSON_Delete(merged);
    cJSON_Delete(ev);
    free(r.body);
}

/* Chat entries: shape, order, bytes, greedy = best; returns the logprobs. */
static void check_chat_entries(const cJSON *content, int want_n, int k, double *lps_out, const char *what)
{
    CHECK(cJSON_GetArraySize(content) == want_n, "%s: %d entries, want %d", what, cJSON_GetArraySize(content),
          want_n);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, content)
    {
        const cJSON *tok = cJSON_GetObjectItem(e, "token"), *bytes = cJSON_GetObjectItem(e, "bytes");
        const cJSON *top = cJSON_GetObjectItem(e, "top_logprobs");
        const double lp = num(cJSON_GetObjectItem(e, "logprob"));
        if (i < want_n) lps_out[i] = lp;
        CHECK(cJSON_IsString(tok) && cJSON_IsArray(bytes) && lp <= 0 && cJSON_GetArraySize(top) == k,
              "%s: entry %d shape (logprob %g, %d alternatives)", what, i, lp, cJSON_GetArraySize(top));
        if (cJSON_IsString(tok) && cJSON_IsArray(bytes)) {
            bool same = (size_t)cJSON_GetArraySize(bytes) == strlen(tok->valuestring);
            for (int b = 0; same && b < cJSON_GetArraySize(bytes); b++)
                same = num(cJSON_GetArrayItem(bytes, b)) == (unsigned char)tok->valuestring[b];
            CHECK(same, "%s: entry %d bytes are not the token's", what, i);
        }
        double prev = 0;
        for (int t = 0; t < cJSON_GetArraySize(top); t++) {
            const cJSON *a = cJSON_GetArrayItem(top, t);
            const double v = num(cJSON_GetObjectItem(a, "logprob"));
            CHECK(v <= prev && cJSON_IsString(cJSON_GetObjectItem(a, "token")) &&
                      cJSON_IsArray(cJSON_GetObjectItem(a, "bytes")),
                  "%s: entry %d alternative %d", what, i, t);
            prev = v;
        }
        if (k > 0)
            CHECK(fabs(num(cJSON_GetObjectItem(cJSON_GetArrayItem(top, 0), "logprob")) - lp) < 1e-7,
                  "%s: greedy token %d is not the most likely", what, i);
        i++;
    }
}

static void test_chat(int port)
{
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}]";
    char body[512];
    snprintf(
        body, sizeof body,
        "{%s,\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":3}",
        msgs);
    http_resp r;
    cJSON *j;
    const cJSON *c0 = post_choice0(port, "/v1/chat/completions", body, &r, &j);
    CHECK(r.status == 200, "chat %d: %s", r.status, r.body);
    const cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content");
    double a[5] = { 0 }, b[5] = { 1, 1, 1, 1, 1 };
    check_chat_entries(content, 5, 3, a, "chat");
    cJSON_Delete(j);
    free(r.body);

    snprintf(
        body, sizeof body,
        "{%s,\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":3,"
        "\"stream\":true}",
        msgs);
    r = post(port, "/v1/chat/completions", body);
    bool done;
    cJSON *ev = sse_choices(r.body, &done);
    cJSON *all = cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, ev)
    {
        const cJSON *l = cJSON_GetObjectItem(it, "logprobs");
        const cJSON *x;
        if (cJSON_IsNull(cJSON_GetObjectItem(it, "finish_reason")))
            CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(l, "content")) == 1,
                  "a chat token event carries one entry");
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(l, "content"))
            cJSON_AddItemToArray(all, cJSON_Duplicate(x, 1));
    }
    check_chat_entries(all, 5, 3, b, "chat stream");
    for (int i = 0; i < 5; i++) CHECK(a[i] == b[i], "stream entry %d %.9g vs %.9g", i, b[i], a[i]);
    cJSON_Delete(all);
    cJSON_Delete(ev);
    free(r.body);

    /* logprobs without alternatives; none asked: null */
    snprintf(body, sizeof body,
             "{%s,\"max_tokens\":2,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true}", msgs);
    c0 = post_choice0(port, "/v1/chat/completions", body, &r, &j);
    check_chat_entries(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content"), 2, 0, a,
                       "no top");
    cJSON_Delete(j);
    free(r.body);
    snprintf(body, sizeof body, "{%s,\"max_tokens\":2}", msgs);
    c0 = post_choice0(port, "/v1/chat/completions", body, &r, &j);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(c0, "logprobs")), "logprobs not asked: null");
    cJSON_Delete(j);
    free(r.body);
}

static void test_errors(int port)
{
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]";
    char body[512];
    const char *chat_bad[] = { "\"logprobs\":true,\"top_logprobs\":21",
                               "\"logprobs\":true,\"top_logprobs\":-1", "\"top_logprobs\":2",
                               "\"logprobs\":\"yes\"", "\"logprobs\":true,\"top_logprobs\":1.5" };
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, "{%s,\"max_tokens\":2,%s}", m, chat_bad[i]);
        http_resp r = post(port, "/v1/chat/completions", body);
        CHECK(r.status == 400 && strstr(r.body, "\"invalid_request_error\"") && strstr(r.body, "logprobs"),
              "chat %s: %d %s", chat_bad[i], r.status, r.body);
        free(r.body);
    }
    const char *cmpl_bad[] = { "21", "-1", "true", "\"3\"" };
    for (int i = 0; i < 4; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"Once\",\"max_tokens\":2,\"logprobs\":%s}", cmpl_bad[i]);
        http_resp r = post(port, "/v1/completions", body);
        CHECK(r.status == 400 && strstr(r.body, "'logprobs'"), "completions logprobs %s: %d %s", cmpl_bad[i],
              r.status, r.body);
        free(r.body);
    }
    /* 20 is the most, and allowed */
    snprintf(body, sizeof body, "{%s,\"max_tokens\":1,\"logprobs\":true,\"top_logprobs\":20}", m);
    http_resp r = post(port, "/v1/chat/completions", body);
    CHECK(r.status == 200 && strstr(r.body, "\"top_logprobs\""), "top_logprobs 20: %d", r.status);
    free(r.body);
}

int main(void)
{
    test_hand_values();
    test_random_values();
    test_server s;
    const bool up = test_server_start(&s, "", "logprobs_server.err");
    CHECK(up, "the server did not start");
    if (up) {
        test_completions(s.port);
        test_chat(s.port);
        test_errors(s.port);
    }
    CHECK(test_server_stop(&s) == 0, "server exit status");
    return test_main_end();
}
