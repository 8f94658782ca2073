/*
 * test_server_infill.c — fill in the middle: the FIM tokens of a GGUF, the
 * prompt layout of POST /infill and of /v1/completions with "suffix", and both
 * routes over HTTP.
 *
 * Models: stories260K copied with FIM token keys (the project's GGUF writer):
 * "fim" names PRE/SUF/MID/REP/SEP with tokenizer.ggml.fim_*_token_id, "old"
 * names PRE/SUF/MID with the older prefix/suffix/middle_token_id keys only; plain
 * stories260K has none. The FIM ids are byte tokens of control characters
 * (<0x01>..<0x05>), which no text of these tests tokenizes to.
 *
 * Expected ids are assembled here by hand, piece by piece, following the layout
 * llama.cpp's server documents and implements (format_prompt_infill):
 *   [REP] "myproject\n" ([SEP] filename "\n" text)* [SEP] "filename\n"
 *   BOS [PRE] prefix prompt [SUF] suffix [MID]
 * snippets "\n\n--- snippet ---\n\n" text without SEP, and the budget: the last
 * 3 (n_batch / 4) prefix tokens, the first n_batch / 4 - 2 - |prompt| suffix
 * tokens, the last n_ctx - n_batch - 2 n_predict extra tokens.
 */
#include "testutil.h"

#include "http_util.h"

#include "formats/gguf.h"
#include "kvinfer.h"
#include "server/server.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

enum { PRE = 4, SUF = 5, MID = 6, REP = 7, SEP = 8 }; /* <0x01> .. <0x05> */

static int add_fim(void *w, void *user)
{
    (void)user;
    return gguf_writer_set_u32(w, "tokenizer.ggml.fim_pre_token_id", PRE) ||
           gguf_writer_set_u32(w, "tokenizer.ggml.fim_suf_token_id", SUF) ||
           gguf_writer_set_u32(w, "tokenizer.ggml.fim_mid_token_id", MID) ||
           gguf_writer_set_u32(w, "tokenizer.ggml.fim_rep_token_id", REP) ||
           gguf_writer_set_u32(w, "tokenizer.ggml.fim_sep_token_id", SEP);
}

static int add_fim_old(void *w, void *user)
{
    (void)user;
    return gguf_writer_set_u32(w, "tokenizer.ggml.prefix_token_id", PRE) ||
           gguf_writer_set_u32(w, "tokenizer.ggml.suffix_token_id", SUF) ||
           gguf_writer_set_u32(w, "tokenizer.ggml.middle_token_id", MID);
}

static kvi_model *load(const char *path)
{
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(path, &lp, &err);
    CHECK(m != NULL, "load %s: %s", path, err.msg);
    return m;
}

/* Expected ids, appended piece by piece. */
typedef struct want {
    int32_t v[4096];
    int32_t n;
} want;

static void w_id(want *w, int32_t id) { w->v[w->n++] = id; }

/* text's ids (no BOS); special: special text recognised. Only the ids from
 * `from` (negative: the last -from) and at most `take` (-1: all). */
static void w_text_part(want *w, const kvi_model *m, const char *s, bool special, int32_t from, int32_t take)
{
    int32_t ids[1024];
    const int32_t n = kvi_tokenize(m, s, strlen(s), false, special, ids, 1024);
    CHECK(n >= 0 && n <= 1024, "tokenize '%s'", s);
    int32_t a = from < 0 ? n + from : from;
    if (a < 0) a = 0;
    int32_t b = take < 0 || a + take > n ? n : a + take;
    for (int32_t i = a; i < b; i++) w_id(w, ids[i]);
}

static void w_text(want *w, const kvi_model *m, const char *s) { w_text_part(w, m, s, false, 0, -1); }

static int32_t n_tokens(const kvi_model *m, const char *s)
{
    return kvi_tokenize(m, s, strlen(s), false, false, NULL, 0);
}

/* srv_infill_ids of body == w (or, w NULL, a 400 whose message holds msg). */
static void check_ids(const kvi_model *m, const char *body, bool openai, int n_batch, int n_ctx,
                      int n_predict, const want *w, const char *msg, const char *what)
{
    cJSON *root = cJSON_Parse(body);
    CHECK(root != NULL, "%s: body parses", what);
    srv_err er = { 0 };
    int32_t n = 0;
    int32_t *ids = srv_infill_ids(m, root, openai, n_batch, n_ctx, n_predict, &n, &er);
    if (w) {
        bool same = ids && n == w->n && !memcmp(ids, w->v, (size_t)n * sizeof *ids);
        CHECK(same, "%s: %d ids, want %d (%s)", what, ids ? n : -1, w->n, ids ? "" : er.msg);
        for (int32_t i = 0; ids && !same && i < n && i < w->n; i++)
            if (ids[i] != w->v[i]) {
                fprintf(stderr, "  first difference at %d: %d, want %d\n", i, ids[i], w->v[i]);
                break;
            }
    } else {
        CHECK(!ids && er.status == 400 && strstr(er.msg, msg), "%s: 400 '%s' (got %d '%s')", what, msg,
              er.status, er.msg);
    }
    free(ids);
    cJSON_Delete(root);
}

#define PREFIX "Once upon a time there was a little girl named Lily. She liked to play"
#define SUFFIX " in the park with her dog. They were happy."

static void test_tokens(const kvi_model *fim, const kvi_model *old, const kvi_model *plain)
{
    const kvi_fim_kind kinds[6] = { KVI_FIM_PRE, KVI_FIM_SUF, KVI_FIM_MID,
                                    KVI_FIM_PAD, KVI_FIM_REP, KVI_FIM_SEP };
    const int32_t want_fim[6] = { PRE, SUF, MID, -1, REP, SEP }, want_old[6] = { PRE, SUF, MID, -1, -1, -1 };
    for (int k = 0; k < 6; k++) {
        CHECK(kvi_token_fim(fim, kinds[k]) == want_fim[k], "fim kind %d: %d", k,
              kvi_token_fim(fim, kinds[k]));
        CHECK(kvi_token_fim(old, kinds[k]) == want_old[k], "old keys, kind %d: %d", k,
              kvi_token_fim(old, kinds[k]));
        CHECK(kvi_token_fim(plain, kinds[k]) == -1, "no FIM in stories260K, kind %d", k);
    }
    CHECK(kvi_token_fim(fim, (kvi_fim_kind)6) == -1 && kvi_token_fim(NULL, KVI_FIM_PRE) == -1,
          "out of range");
    char piece[32];
    const int32_t np = kvi_token_to_piece(fim, PRE, piece, sizeof piece, true);
    CHECK(np == 6 && !memcmp(piece, "<0x01>", 6), "the FIM_PRE id is the byte token <0x01> (%d bytes)", np);
    /* the repository and separator tokens end generation, as llama.cpp's */
    CHECK(kvi_token_is_eog(fim, REP) && kvi_token_is_eog(fim, SEP) && !kvi_token_is_eog(fim, PRE),
          "FIM_REP / FIM_SEP end generation, FIM_PRE does not");
}

static void test_layout(const kvi_model *fim, const kvi_model *old, const kvi_model *plain)
{
    const int32_t bos = kvi_token_bos(fim);
    CHECK(bos >= 0 && kvi_model_add_bos(fim), "stories260K adds BOS");
    const char *body = "{\"input_prefix\": \"" PREFIX "\", \"input_suffix\": \"" SUFFIX "\","
                       " \"input_extra\": [{\"filename\": \"a.txt\", \"text\": \"Tom had a ball.\"},"
                       " {\"text\": \"The sun was hot.\"}], \"prompt\": \"</s> with\"}";
    /* the extra context: the repository-level pattern */
    want e = { .n = 0 };
    w_id(&e, REP);
    w_text(&e, fim, "myproject\n");
    w_id(&e, SEP);
    w_text(&e, fim, "a.txt\n");
    w_text(&e, fim, "Tom had a ball.");
    w_id(&e, SEP);
    w_text(&e, fim, "tmp\n"); /* llama.cpp's default file name */
    w_text(&e, fim, "The sun was hot.");
    w_id(&e, SEP);
    w_text(&e, fim, "filename\n");
    /* everything fits */
    want w = e;
    w_id(&w, bos);
    w_id(&w, PRE);
    w_text(&w, fim, PREFIX);
    w_text_part(&w, fim, "</s> with", true, 0, -1); /* the prompt's special text is special */
    w_id(&w, SUF);
    w_text(&w, fim, SUFFIX);
    w_id(&w, MID);
    check_ids(fim, body, false, 2048, 8192, -1, &w, NULL, "repository-level layout");
    int32_t eos_in_prompt = 0;
    for (int32_t i = 0; i < w.n; i++) eos_in_prompt += w.v[i] == kvi_token_eos(fim);
    CHECK(eos_in_prompt == 1, "the prompt's </s> is the EOS id (%d)", eos_in_prompt);

    /* the budget: n_batch 24 keeps the last 18 prefix tokens and the first
     * 6 - 2 - |prompt| suffix tokens; n_ctx 42, n_predict 5: the last 8 extra ids */
    const int32_t n_prompt = kvi_tokenize(fim, "</s> with", 9, false, true, NULL, 0);
    CHECK(n_tokens(fim, PREFIX) > 18 && 6 - 2 - n_prompt > 0 && n_tokens(fim, SUFFIX) > 6 - 2 - n_prompt &&
              e.n > 8,
          "texts long enough: %d %d %d %d", n_tokens(fim, PREFIX), n_tokens(fim, SUFFIX), n_prompt, e.n);
    want b = { .n = 0 };
    for (int32_t i = e.n - 8; i < e.n; i++) w_id(&b, e.v[i]);
    w_id(&b, bos);
    w_id(&b, PRE);
    w_text_part(&b, fim, PREFIX, false, -18, -1);
    w_text_part(&b, fim, "</s> with", true, 0, -1);
    w_id(&b, SUF);
    w_text_part(&b, fim, SUFFIX, false, 0, 6 - 2 - n_prompt);
    w_id(&b, MID);
    check_ids(fim, body, false, 24, 42, 5, &b, NULL, "budget split");
    /* no room for extra context (n_ctx - n_batch - 2 n_predict < 0) nor for the suffix */
    want c = { .n = 0 };
    w_id(&c, bos);
    w_id(&c, PRE);
    w_text_part(&c, fim, PREFIX, false, -3, -1);
    w_text_part(&c, fim, "</s> with", true, 0, -1);
    w_id(&c, SUF);
    w_id(&c, MID);
    check_ids(fim, body, false, 4, 4, 1, &c, NULL, "tiny budget");

    /* without FIM_REP / FIM_SEP: the chunks as snippets */
    want s = { .n = 0 };
    w_text(&s, old, "\n\n--- snippet ---\n\n");
    w_text(&s, old, "Tom had a ball.");
    w_text(&s, old, "\n\n--- snippet ---\n\n");
    w_text(&s, old, "The sun was hot.");
    w_id(&s, bos);
    w_id(&s, PRE);
    w_text(&s, old, PREFIX);
    w_text_part(&s, old, "</s> with", true, 0, -1);
    w_id(&s, SUF);
    w_text(&s, old, SUFFIX);
    w_id(&s, MID);
    check_ids(old, body, false, 2048, 8192, -1, &s, NULL, "snippets without FIM_SEP");

    /* input_prefix as a mix of texts and ids (llama.cpp's tokenize_mixed) */
    want mx = { .n = 0 };
    w_id(&mx, bos);
    w_id(&mx, PRE);
    w_text(&mx, fim, "Once");
    w_id(&mx, 100);
    w_text(&mx, fim, " upon");
    w_id(&mx, SUF);
    w_id(&mx, MID);
    check_ids(fim, "{\"input_prefix\": [\"Once\", 100, \" upon\"], \"input_suffix\": \"\"}", false, 2048,
              2048, 1, &mx, NULL, "mixed prefix");

    /* /v1/completions: prompt is the prefix, suffix the suffix, the same pattern */
    want o = { .n = 0 };
    w_id(&o, REP);
    w_text(&o, fim, "myproject\n");
    w_id(&o, SEP);
    w_text(&o, fim, "filename\n");
    w_id(&o, bos);
    w_id(&o, PRE);
    w_text(&o, fim, PREFIX);
    w_id(&o, SUF);
    w_text(&o, fim, SUFFIX);
    w_id(&o, MID);
    check_ids(fim, "{\"prompt\": \"" PREFIX "\", \"suffix\": \"" SUFFIX "\"}", true, 2048, 8192, -1, &o, NULL,
              "OpenAI suffix");
    check_ids(fim, "{\"prompt\": [\"" PREFIX "\"], \"suffix\": \"" SUFFIX "\"}", true, 2048, 8192, -1, &o,
              NULL, "OpenAI suffix, prompt as [string]");

    /* refusals */
    check_ids(plain, body, false, 2048, 8192, -1, NULL, "not supported by this model", "no FIM tokens");
    check_ids(plain, "{\"prompt\": \"a\", \"suffix\": \"b\"}", true, 2048, 2048, -1, NULL,
              "not supported by this model", "no FIM tokens (suffix)");
    check_ids(fim, "{\"input_suffix\": \"x\"}", false, 2048, 2048, -1, NULL, "'input_prefix' is required",
              "missing prefix");
    check_ids(fim, "{\"input_prefix\": \"x\"}", false, 2048, 2048, -1, NULL, "'input_suffix' is required",
              "missing suffix");
    check_ids(fim, "{\"input_prefix\": \"x\", \"input_suffix\": \"\", \"prompt\": 3}", false, 2048, 2048, -1,
              NULL, "'prompt' must be a string", "prompt of ids");
    check_ids(fim, "{\"input_prefix\": \"x\", \"input_suffix\": \"\", \"input_extra\": {}}", false, 2048,
              2048, -1, NULL, "'input_extra' must be an array", "extra not an array");
    check_ids(fim,
              "{\"input_prefix\": \"x\", \"input_suffix\": \"\", \"input_extra\": [{\"filename\": \"a\"}]}",
              false, 2048, 2048, -1, NULL, "'input_extra[0]' must be an object with a string \"text\"",
              "chunk without text");
    check_ids(fim,
              "{\"input_prefix\": \"x\", \"input_suffix\": \"\", \"input_extra\": [{\"text\": \"a\", "
              "\"filename\": 7}]}",
              false, 2048, 2048, -1, NULL, "'input_extra[0].filename' must be a string", "numeric file name");
    check_ids(fim, "{\"input_prefix\": [\"x\", 100000], \"input_suffix\": \"\"}", false, 2048, 2048, -1, NULL,
              "token ids of the vocabulary", "id out of range");
    check_ids(fim, "{\"prompt\": [1, 2], \"suffix\": \"b\"}", true, 2048, 2048, -1, NULL,
              "must be one string when 'suffix' is given", "id prompt with suffix");
    check_ids(fim, "{\"prompt\": \"a\", \"suffix\": 5}", true, 2048, 2048, -1, NULL,
              "'suffix' must be a string", "numeric suffix");
}

/* POST path body: status and parsed body. */
static cJSON *post(int port, const char *path, const char *body, int *status)
{
    http_resp r = http_request(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (!j) fprintf(stderr, "%s %d: %s\n", path, r.status, r.body ? r.body : "");
    free(r.body);
    return j;
}

static char *ids_json(const int32_t *ids, int32_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}

/* Greedy text of /v1/completions with the ids as prompt (malloc'd). */
static char *completion_of_ids(int port, const int32_t *ids, int32_t n, int max_tokens)
{
    char *a = ids_json(ids, n);
    char *body = malloc(strlen(a) + 128);
    sprintf(body, "{\"prompt\": %s, \"max_tokens\": %d, \"temperature\": 0}", a, max_tokens);
    int st = 0;
    cJSON *j = post(port, "/v1/completions", body, &st);
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    char *out = st == 200 && cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(j);
    free(body);
    free(a);
    return out;
}

#define INFILL_BODY                                                                                      \
    "{\"input_prefix\": \"" PREFIX "\", \"input_suffix\": \"" SUFFIX "\", \"input_extra\": [{\"text\": " \
    "\"Tom had a ball.\"}], \"n_predict\": 6, \"temperature\": 0"

static void test_http(const kvi_model *fim, const char *gpath)
{
    char extra[1024];
    snprintf(extra, sizeof extra, "-m '%s' -c 512", gpath);
    test_server s;
    CHECK(test_server_start(&s, extra, "server_infill.err"), "server starts on the FIM GGUF");
    /* the ids the server should run: its budget (n_batch = n_ctx = 512, n_predict = max_tokens) */
    cJSON *root = cJSON_Parse(INFILL_BODY "}");
    srv_err er = { 0 };
    int32_t n = 0;
    int32_t *ids = srv_infill_ids(fim, root, false, 512, 512, 6, &n, &er);
    cJSON_Delete(root);
    CHECK(ids && n > 20, "layout for the server: %s", er.msg);
    char *ref = ids ? completion_of_ids(s.port, ids, n, 6) : NULL;
    CHECK(ref != NULL, "the completion of those ids");

    int st = 0;
    cJSON *j = post(s.port, "/infill", INFILL_BODY "}", &st);
    const cJSON *content = cJSON_GetObjectItem(j, "content");
    CHECK(st == 200 && cJSON_IsString(content), "/infill answers 200 with content");
    CHECK(ref && cJSON_IsString(content) && !strcmp(content->valuestring, ref), "/infill text '%s' == '%s'",
          cJSON_IsString(content) ? content->valuestring : "", ref ? ref : "");
    CHECK(cJSON_GetObjectItem(j, "tokens_evaluated") &&
              cJSON_GetObjectItem(j, "tokens_evaluated")->valueint == n,
          "tokens_evaluated = %d ids", n);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "stop")) && cJSON_GetObjectItem(j, "tokens_predicted") &&
              cJSON_GetObjectItem(j, "tokens_predicted")->valueint <= 6,
          "stop: true, tokens_predicted");
    const cJSON *stype = cJSON_GetObjectItem(j, "stop_type");
    CHECK(cJSON_IsString(stype) &&
              (!strcmp(stype->valuestring, "limit") || !strcmp(stype->valuestring, "eos")),
          "stop_type");
    cJSON_Delete(j);

    /* streamed: llama.cpp's events, the same text, the last one stop: true, no [DONE] */
    http_resp r = http_request(s.port, "POST", "/infill", NULL, INFILL_BODY ", \"stream\": true}");
    CHECK(r.status == 200 && r.body, "streamed /infill");
    char text[4096] = "";
    int n_ev = 0, n_stop = 0;
    bool done = false;
    const char *cur = r.body ? r.body : "", *ev;
    size_t len;
    while (sse_next(&cur, &ev, &len, &done)) {
        cJSON *e = cJSON_ParseWithLength(ev, len);
        const cJSON *c = cJSON_GetObjectItem(e, "content");
        if (cJSON_IsString(c) && strlen(text) + strlen(c->valuestring) < sizeof text)
            strcat(text, c->valuestring);
        n_stop += cJSON_IsTrue(cJSON_GetObjectItem(e, "stop"));
        n_ev++;
        cJSON_Delete(e);
    }
    CHECK(!done && n_ev >= 2 && n_stop == 1, "events %d, one final (%d), no [DONE]", n_ev, n_stop);
    CHECK(ref && !strcmp(text, ref), "streamed text '%s' == '%s'", text, ref ? ref : "");
    free(r.body);

    /* /v1/completions with suffix: OpenAI's completion of the FIM ids */
    root = cJSON_Parse("{\"prompt\": \"" PREFIX "\", \"suffix\": \"" SUFFIX "\"}");
    int32_t no = 0;
    int32_t *oids = srv_infill_ids(fim, root, true, 512, 512, 6, &no, &er);
    cJSON_Delete(root);
    char *oref = oids ? completion_of_ids(s.port, oids, no, 6) : NULL;
    j = post(s.port, "/v1/completions",
             "{\"prompt\": \"" PREFIX "\", \"suffix\": \"" SUFFIX
             "\", \"max_tokens\": 6, \"temperature\": 0}",
             &st);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(ch, "text");
    const cJSON *pt = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens");
    CHECK(st == 200 && cJSON_IsString(t) && oref && !strcmp(t->valuestring, oref), "suffix completion '%s'",
          cJSON_IsString(t) ? t->valuestring : "");
    CHECK(pt && pt->valueint == no, "prompt_tokens %d == %d FIM ids", pt ? pt->valueint : -1, no);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "object")) &&
              !strcmp(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion"),
          "OpenAI's shape");
    cJSON_Delete(j);
    /* bad fields: 400 in OpenAI's error shape */
    j = post(s.port, "/infill", "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": 3}",
             &st);
    const cJSON *err = cJSON_GetObjectItem(j, "error");
    CHECK(st == 400 && cJSON_IsString(cJSON_GetObjectItem(err, "message")), "bad input_extra: 400");
    cJSON_Delete(j);
    free(oref);
    free(oids);
    free(ref);
    free(ids);
    CHECK(test_server_stop(&s) == 0, "server exit status");

    /* a model without FIM tokens */
    CHECK(test_server_start(&s, NULL, "server_infill_plain.err"), "server starts on stories260K");
    j = post(s.port, "/infill", "{\"input_prefix\": \"a\", \"input_suffix\": \"b\"}", &st);
    err = cJSON_GetObjectItem(j, "error");
    const cJSON *msg = cJSON_GetObjectItem(err, "message");
    CHECK(st == 400 && cJSON_IsString(msg) && strstr(msg->valuestring, "not supported by this model") &&
              cJSON_IsString(cJSON_GetObjectItem(err, "type")),
          "no FIM: 400 in OpenAI's shape");
    cJSON_Delete(j);
    j = post(s.port, "/v1/completions", "{\"prompt\": \"a\", \"suffix\": \"b\"}", &st);
    CHECK(st == 400 && cJSON_GetObjectItem(j, "error"), "suffix without FIM: 400");
    cJSON_Delete(j);
    j = post(s.port, "/v1/completions", "{\"prompt\": \"a\", \"suffix\": null, \"max_tokens\": 2}", &st);
    CHECK(st == 200, "suffix null: a plain completion");
    cJSON_Delete(j);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char gfim[512], gold[512];
    snprintf(gfim, sizeof gfim, "%s", tmp_path("stories260K-fim.gguf"));
    snprintf(gold, sizeof gold, "%s", tmp_path("stories260K-fim-old.gguf"));
    const char *src = shared_path("models/stories260K.gguf");
    CHECK(write_gguf_copy(src, gfim, add_fim, NULL), "write the FIM GGUF");
    CHECK(write_gguf_copy(src, gold, add_fim_old, NULL), "write the old-keys GGUF");
    kvi_model *fim = load(gfim), *old = load(gold), *plain = load(src);
    if (fim && old && plain) {
        test_tokens(fim, old, plain);
        test_layout(fim, old, plain);
        test_http(fim, gfim);
    }
    kvi_model_free(fim);
    kvi_model_free(old);
    kvi_model_free(plain);
    return test_main_end();
}
