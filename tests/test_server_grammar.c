/*
 * test_server_grammar.c — constrained output over real HTTP on 127.0.0.1 with
 * stories260K (`kvinfer serve --spec ngram`, a child process on a free port):
 *
 *  - "grammar" (GBNF): greedy and sampled completions are sentences of the
 *    grammar ending with finish_reason "stop"; a streamed one too (the deltas
 *    joined); the server speculates, but never for these requests
 *    (usage.timings.spec_drafted 0);
 *  - "response_format": json_object gives a JSON object; json_schema gives JSON
 *    with the required keys and types of its schema, for chat and completions;
 *  - "logit_bias": +100 on "," makes the greedy text commas; -100 on the token
 *    greedy picks first changes it;
 *  - the 400s, in OpenAI's error shape (type invalid_request_error, code
 *    invalid_value, param null): a grammar that does not parse (its line and
 *    column), a schema keyword that cannot be enforced (named), a bad
 *    response_format type, grammar with a JSON response_format, logit_bias with
 *    a key that is no token id, an id past the vocabulary, a bias of 101.
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static cJSON *post(int port, const char *path, const char *body, int *status)
{
    http_resp r = http_request(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (!j) fprintf(stderr, "body: %s\n", r.body ? r.body : "(none)");
    free(r.body);
    return j;
}

static const char *choice_text(const cJSON *j, bool chat)
{
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content")
                          : cJSON_GetObjectItem(c0, "text");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static const char *finish_reason(const cJSON *j)
{
    const cJSON *f =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "finish_reason");
    return cJSON_IsString(f) ? f->valuestring : "";
}

static void check_400(int port, const char *path, const char *body, const char *want)
{
    int st = 0;
    cJSON *j = post(port, path, body, &st);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    const cJSON *msg = cJSON_GetObjectItem(e, "message"), *type = cJSON_GetObjectItem(e, "type"),
                *code = cJSON_GetObjectItem(e, "code"), *param = cJSON_GetObjectItem(e, "param");
    CHECK(st == 400, "status %d for %s", st, body);
    CHECK(cJSON_IsString(msg) && strstr(msg->valuestring, want), "message '%s' lacks '%s'",
          cJSON_IsString(msg) ? msg->valuestring : "", want);
    CHECK(cJSON_IsString(type) && !strcmp(type->valuestring, "invalid_request_error"), "error type");
    CHECK(cJSON_IsString(code) && !strcmp(code->valuestring, "invalid_value"), "error code");
    CHECK(cJSON_IsNull(param), "param null");
    cJSON_Delete(j);
}

static bool grammar_accepts(kvi_grammar_vocab *v, const char *gbnf, const char *text)
{
    kvi_grammar *g = kvi_grammar_parse(gbnf, strlen(gbnf), NULL);
    kvi_grammar_matcher *m = g ? kvi_grammar_matcher_create(g, v, NULL) : NULL;
    bool ok =
        m && kvi_grammar_matcher_accept_bytes(m, text, strlen(text)) == 0 && kvi_grammar_matcher_can_end(m);
    kvi_grammar_matcher_free(m);
    kvi_grammar_free(g);
    return ok;
}

/* A JSON string of GBNF text for a request body (malloc'd). */
static char *json_str(const char *s)
{
    cJSON *x = cJSON_CreateString(s);
    char *o = cJSON_PrintUnformatted(x);
    cJSON_Delete(x);
    return o;
}

static void test_grammar_field(int port, kvi_grammar_vocab *v)
{
    const char *gbnf = "root ::= \" \" name \" went to the \" place \".\"\n"
                       "name ::= \"Tim\" | \"Lily\" | \"Sue\"\nplace ::= \"park\" | \"store\" | [a-z]{3,8}";
    char *gs = json_str(gbnf);
    char body[2048];
    for (int k = 0; k < 4; k++) {
        snprintf(body, sizeof body,
                 "{\"prompt\":\"Once upon a "
                 "time\",\"max_tokens\":60,\"temperature\":%s,\"seed\":%d,\"grammar\":%s}",
                 k == 0 ? "0" : "1.0", k, gs);
        int st = 0;
        cJSON *j = post(port, "/v1/completions", body, &st);
        const char *t = choice_text(j, false);
        CHECK(st == 200 && t, "status %d", st);
        CHECK(t && grammar_accepts(v, gbnf, t), "completion %d '%s' not in the grammar", k, t ? t : "");
        CHECK(!strcmp(finish_reason(j), "stop"), "finish_reason %s", finish_reason(j));
        const cJSON *sd = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "timings"),
                                              "spec_drafted");
        CHECK(!sd || (cJSON_IsNumber(sd) && sd->valueint == 0), "a grammar request speculated");
        if (k == 0) printf("grammar, greedy: '%s'\n", t ? t : "");
        cJSON_Delete(j);
    }
    /* streamed: the deltas joined are a sentence */
    snprintf(
        body, sizeof body,
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":1.0,\"seed\":9,\"stream\":true,"
        "\"grammar\":%s}",
        gs);
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, body);
    char text[1024] = "";
    const char *cur = r.body, *data;
    size_t n;
    bool done = false;
    while (cur && sse_next(&cur, &data, &n, &done)) {
        cJSON *ev = cJSON_ParseWithLength(data, n);
        const char *t = choice_text(ev, false);
        if (t && strlen(text) + strlen(t) < sizeof text) strcat(text, t);
        cJSON_Delete(ev);
    }
    CHECK(r.status == 200 && done, "stream status %d", r.status);
    CHECK(grammar_accepts(v, gbnf, text), "streamed '%s' not in the grammar", text);
    free(r.body);
    free(gs);
}

static void test_response_format(int port)
{
    int st = 0;
    cJSON *j = post(port, "/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],\"max_tokens\":300,"
                    "\"temperature\":0,\"response_format\":{\"type\":\"json_object\"}}",
                    &st);
    const char *t = choice_text(j, true);
    cJSON *o = t ? cJSON_Parse(t) : NULL;
    CHECK(st == 200, "status %d", st);
    if (!strcmp(finish_reason(j), "stop")) CHECK(cJSON_IsObject(o), "json_object content '%s'", t ? t : "");
    printf("json_object: %s (%s)\n", t ? t : "", finish_reason(j));
    cJSON_Delete(o);
    cJSON_Delete(j);

    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":10},"
        "\"age\":{\"type\":\"integer\"},\"happy\":{\"type\":\"boolean\"}},\"required\":[\"name\","
        "\"age\",\"happy\"],\"additionalProperties\":false}";
    for (int k = 0; k < 3; k++) {
        char body[2048];
        const bool chat = k != 1;
        snprintf(body, sizeof body,
                 "{%s,\"max_tokens\":200,\"temperature\":%s,\"seed\":%d,\"response_format\":{\"type\":"
                 "\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":%s}}}",
                 chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"Who?\"}]" : "\"prompt\":\"Once\"",
                 k == 0 ? "0" : "0.9", k, schema);
        j = post(port, chat ? "/v1/chat/completions" : "/v1/completions", body, &st);
        t = choice_text(j, chat);
        CHECK(st == 200 && t, "json_schema status %d", st);
        CHECK(!strcmp(finish_reason(j), "stop"), "json_schema finish %s: '%s'", finish_reason(j), t ? t : "");
        o = t ? cJSON_Parse(t) : NULL;
        const cJSON *name = cJSON_GetObjectItem(o, "name"), *age = cJSON_GetObjectItem(o, "age"),
                    *happy = cJSON_GetObjectItem(o, "happy");
        CHECK(cJSON_IsObject(o) && cJSON_GetArraySize(o) == 3 && cJSON_IsString(name) &&
                  strlen(name->valuestring) <= 10 && cJSON_IsNumber(age) && cJSON_IsBool(happy),
              "json_schema output '%s'", t ? t : "");
        if (k == 0) printf("json_schema, greedy: %s\n", t ? t : "");
        cJSON_Delete(o);
        cJSON_Delete(j);
    }
}

static void test_logit_bias(int port, const kvi_model *m)
{
    int32_t comma = -1;
    for (int32_t t = 0; t < kvi_n_vocab(m) && comma < 0; t++) {
        char pc[16];
        if (kvi_token_to_piece(m, t, pc, sizeof pc, false) == 1 && pc[0] == ',') comma = t;
    }
    char body[512];
    snprintf(
        body, sizeof body,
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0,\"logit_bias\":{\"%d\":100}}",
        comma);
    int st = 0;
    cJSON *j = post(port, "/v1/completions", body, &st);
    const char *t = choice_text(j, false);
    CHECK(st == 200 && t && !strcmp(t, ",,,,"), "biased text '%s'", t ? t : "");
    cJSON_Delete(j);
    /* -100 on the first greedy token changes the first token */
    j = post(port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":1,\"temperature\":0}",
             &st);
    char first[64] = "";
    snprintf(first, sizeof first, "%s", choice_text(j, false) ? choice_text(j, false) : "");
    cJSON_Delete(j);
    int32_t ids[8];
    int32_t n = kvi_tokenize(m, first, strlen(first), false, false, ids, 8);
    if (n >= 1) {
        snprintf(body, sizeof body,
                 "{\"prompt\":\"Once upon a "
                 "time\",\"max_tokens\":1,\"temperature\":0,\"logit_bias\":{\"%d\":-100}}",
                 ids[n - 1]);
        j = post(port, "/v1/completions", body, &st);
        t = choice_text(j, false);
        CHECK(st == 200 && t && strcmp(t, first) != 0, "-100 did not change '%s'", first);
        cJSON_Delete(j);
    }
}

static void test_errors(int port)
{
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"grammar\":\"root ::= \\\"a\\\" |\\n (\"}",
              "line 2, column");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"grammar\":\"root ::= nope\"}",
              "undefined rule 'nope'");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"grammar\":7}", "'grammar' must be a string");
    check_400(
        port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
        "\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"string\",\"pattern\":\"^a\"}}}}",
        "keyword 'pattern' is not supported");
    check_400(
        port, "/v1/completions",
        "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
        "\"schema\":{\"type\":\"integer\",\"minimum\":1}}}}",
        "minimum");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"response_format\":{\"type\":\"yaml\"}}",
              "response_format.type");
    check_400(
        port, "/v1/completions",
        "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}}",
        "json_schema.name");
    check_400(port, "/v1/completions",
              "{\"prompt\":\"a\",\"grammar\":\"root ::= "
              "\\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}}",
              "cannot be combined");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"abc\":1}}", "not a token id");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"99999\":1}}", "not a token id");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":101}}", "[-100, 100]");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":\"x\"}}", "[-100, 100]");
    check_400(port, "/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":[1]}",
              "'logit_bias' must be an object");
}

int main(void)
{
    kvi_model *m = load_stories260k(NULL);
    kvi_grammar_vocab *v = m ? kvi_grammar_vocab_create(m, NULL) : NULL;
    test_server c;
    if (v && test_server_start(&c, "--parallel 4 --spec ngram", "server_grammar.err")) {
        test_errors(c.port);
        test_grammar_field(c.port, v);
        test_response_format(c.port);
        test_logit_bias(c.port, m);
        CHECK(test_server_stop(&c) == 0, "server exit status");
    } else {
        CHECK(false, "server did not start");
    }
    kvi_grammar_vocab_free(v);
    kvi_model_free(m);
    return test_main_end();
}
