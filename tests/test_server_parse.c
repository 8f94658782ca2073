/*
 * test_server_parse.c — the server library's request parser called directly
 * (server/server_json.c: srv_parse_request), no HTTP and no child process:
 *
 *  - a /v1/completions body with ids, sampling fields, stop strings, stream
 *    options and logprobs lands in srv_params field by field, the ids as given;
 *  - a text prompt becomes the model's tokens with BOS, a chat body the chat
 *    layout's tokens (the same as kvi_chat_apply on the same messages);
 *  - bad bodies get OpenAI's error shape with the right status, type and code:
 *    not JSON, not an object, an unknown model under strict_model (404
 *    model_not_found; any name is served without it), a field of
 *    the wrong type or out of range, an empty ids prompt, a request over the
 *    context (context_length_exceeded), too many stop strings.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static srv_server srv;

static int parse(const char *body, bool chat, srv_params *p, srv_err *er)
{
    memset(er, 0, sizeof *er);
    return srv_parse_request(&srv, body, strlen(body), chat, p, er);
}

/* A body that must fail with this status / code (code NULL: none), in OpenAI's
 * error shape. */
static void expect_error(const char *body, bool chat, int status, const char *code, const char *what)
{
    srv_params p;
    srv_err er;
    int rc = parse(body, chat, &p, &er);
    CHECK(rc != 0, "%s: accepted", what);
    if (rc == 0) {
        srv_params_free(&p);
        return;
    }
    CHECK(er.status == status, "%s: status %d, want %d", what, er.status, status);
    CHECK(code ? er.code && !strcmp(er.code, code) : er.code == NULL, "%s: code %s, want %s", what,
          er.code ? er.code : "(none)", code ? code : "(none)");
    char *js = srv_error_json(&er);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
    const cJSON *msg = e ? cJSON_GetObjectItemCaseSensitive(e, "message") : NULL;
    const cJSON *type = e ? cJSON_GetObjectItemCaseSensitive(e, "type") : NULL;
    CHECK(cJSON_IsString(msg) && msg->valuestring[0], "%s: error.message missing in %s", what,
          js ? js : "(null)");
    CHECK(cJSON_IsString(type) && !strcmp(type->valuestring, "invalid_request_error"), "%s: error.type",
          what);
    CHECK(e && cJSON_HasObjectItem(e, "param") && cJSON_HasObjectItem(e, "code"), "%s: param/code keys",
          what);
    cJSON_Delete(j);
    free(js);
}

static void test_fields(void)
{
    srv_params p;
    srv_err er;
    int rc = parse("{\"model\": \"stories260K\", \"prompt\": [1, 403, 407, 9], \"max_tokens\": 7,"
                   " \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 12, \"min_p\": 0.05, \"seed\": 42,"
                   " \"n\": 3, \"stream\": true, \"stream_options\": {\"include_usage\": true},"
                   " \"stop\": [\"cat\", \"dog\"], \"presence_penalty\": 0.25, \"frequency_penalty\": -0.5,"
                   " \"logprobs\": 2, \"ignore_eos\": true, \"speculative\": false}",
                   false, &p, &er);
    CHECK(rc == 0, "full completions body refused: %d %s", er.status, er.msg);
    if (rc) return;
    const int32_t want[] = { 1, 403, 407, 9 };
    CHECK(p.n_prompt == 4 && !memcmp(p.prompt, want, sizeof want), "ids prompt not used as given");
    CHECK(!p.chat && p.max_tokens == 7 && p.n == 3, "max_tokens / n");
    CHECK(p.sp.temp == 0.5f && p.sp.top_p == 0.9f && p.sp.top_k == 12 && p.sp.min_p == 0.05f,
          "sampling fields");
    CHECK(p.sp.seed == 42, "seed %llu", (unsigned long long)p.sp.seed);
    CHECK(p.sp.presence_penalty == 0.25f && p.sp.frequency_penalty == -0.5f, "penalties");
    CHECK(p.stream && p.include_usage && p.ignore_eos && p.no_spec,
          "stream / include_usage / ignore_eos / speculative");
    CHECK(p.n_stop == 2 && !strcmp(p.stop[0], "cat") && !strcmp(p.stop[1], "dog"), "stop strings");
    CHECK(p.logprobs && p.top_logprobs == 2, "logprobs %d top %d", p.logprobs, (int)p.top_logprobs);
    srv_params_free(&p);

    /* defaults: the server's sampling, one choice, no stream */
    rc = parse("{\"prompt\": [5, 6]}", false, &p, &er);
    CHECK(rc == 0, "minimal body refused: %s", er.msg);
    if (rc == 0) {
        CHECK(p.n == 1 && !p.stream && p.max_tokens == 0 && p.n_stop == 0 && !p.logprobs, "defaults");
        CHECK(p.sp.temp == srv.cfg.sampling.temp && p.sp.top_k == srv.cfg.sampling.top_k,
              "server sampling defaults");
        srv_params_free(&p);
    }
}

static void test_text_and_chat(void)
{
    srv_params p;
    srv_err er;
    int32_t ids[256];
    const char *text = "Once upon a time";
    int32_t n = kvi_tokenize(srv.m, text, strlen(text), true, false, ids, 256);
    int rc = parse("{\"prompt\": \"Once upon a time\"}", false, &p, &er);
    CHECK(rc == 0 && n > 1, "text prompt refused: %s", er.msg);
    if (rc == 0) {
        CHECK(p.n_prompt == n && !memcmp(p.prompt, ids, (size_t)n * sizeof *ids), "text prompt tokens");
        CHECK(p.prompt[0] == kvi_token_bos(srv.m), "text prompt starts with BOS");
        srv_params_free(&p);
    }
    const kvi_chat_msg msgs[] = { { "system", "Be brief." }, { "user", "Hi there" } };
    n = kvi_chat_apply(srv.m, msgs, 2, true, ids, 256, NULL);
    rc = parse("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
               " {\"role\": \"user\", \"content\": \"Hi there\"}], \"max_completion_tokens\": 5}",
               true, &p, &er);
    CHECK(rc == 0 && n > 4, "chat body refused: %s", er.msg);
    if (rc == 0) {
        CHECK(p.chat && p.max_tokens == 5, "chat flags");
        CHECK(p.n_prompt == n && !memcmp(p.prompt, ids, (size_t)n * sizeof *ids), "chat layout tokens");
        srv_params_free(&p);
    }
}

/* A body (len 0: strlen) srv_body_check must refuse with a 400 whose message holds want. */
static void expect_body_error(const char *body, size_t len, const char *want, const char *what)
{
    srv_err er;
    memset(&er, 0, sizeof er);
    int rc = srv_body_check(body, len ? len : strlen(body), &er);
    CHECK(rc != 0 && er.status == 400, "%s: status %d", what, er.status);
    CHECK(strstr(er.msg, want) != NULL, "%s: message '%s' lacks '%s'", what, er.msg, want);
}

static void expect_body_ok(const char *body, const char *what)
{
    srv_err er;
    memset(&er, 0, sizeof er);
    CHECK(srv_body_check(body, strlen(body), &er) == 0, "%s: refused: %s", what, er.msg);
}

static void test_body(void)
{
    expect_body_ok("{\"prompt\": \"caf\xc3\xa9 \\ud83d\\ude00 \\u00e9\"}\n  ",
                   "UTF-8, a surrogate pair, white space after");
    expect_body_error("{\"prompt\": \"a\"} x", 0, "more than one JSON value (trailing bytes at byte 16)",
                      "trailing bytes");
    expect_body_error("{\"prompt\": \"a\"}{}", 0, "more than one JSON value", "two values");
    expect_body_error("{\"prompt\": \"a\"}\0", 16, "more than one JSON value", "a NUL after the value");
    expect_body_error("{\"prompt\": \"\xff\"}", 0, "not valid UTF-8 (byte 12)", "a 0xFF byte");
    expect_body_error("{\"prompt\": \"\xc0\xaf\"}", 0, "not valid UTF-8", "an overlong '/'");
    expect_body_error("{\"prompt\": \"\xed\xa0\x80\"}", 0, "not valid UTF-8", "an encoded surrogate");
    expect_body_error("{\"prompt\": \"\xf4\x90\x80\x80\"}", 0, "not valid UTF-8", "past U+10FFFF");
    expect_body_error("{\"prompt\": \"\xe2\x82\"}", 0, "not valid UTF-8", "a cut character");
    expect_body_error("{\"prompt\": \"\\ud800\"}", 0, "forms no Unicode code point", "a lone high surrogate");
    expect_body_error("{\"prompt\": \"\\udc00\\ud800\"}", 0, "forms no Unicode code point",
                      "a reversed pair");
    expect_body_error("{\"prompt\": \"\\ud800x\\udc00\"}", 0, "forms no Unicode code point", "a split pair");
    expect_body_error("{\"prompt\": \"a\tb\"}", 0, "raw control character", "a raw tab in a string");
    expect_body_error("{\"prompt\": \"a\", \"prompt\": \"b\"}", 0, "the key 'prompt' twice",
                      "a duplicate key");
    expect_body_error("{\"x\": {\"k\": 1, \"j\": 2, \"k\": 3}}", 0, "the key 'k' twice",
                      "a nested duplicate");
    expect_body_error("{\"prompt\": [1, 2", 0, "not valid JSON", "truncated");
    char deep[200];
    int n = 0;
    n += snprintf(deep + n, sizeof deep - n, "{\"x\": ");
    for (int i = 0; i < 64; i++) deep[n++] = '[';
    for (int i = 0; i < 64; i++) deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = 0;
    expect_body_error(deep, strlen(deep), "more than 64 deep", "65 levels");
    memmove(deep + 6, deep + 7, strlen(deep + 7) + 1); /* 63 [ */
    memmove(deep + 69, deep + 70, strlen(deep + 70) + 1);
    expect_body_ok(deep, "64 levels");
}

static void test_errors(void)
{
    expect_error("{\"prompt\": [1, 2", false, 400, NULL, "truncated JSON");
    expect_error("[1, 2, 3]", false, 400, NULL, "not an object");
    /* any model name is served (llama-server's way); --strict-model refuses others */
    srv_params p;
    srv_err er;
    CHECK(parse("{\"model\": \"claude-sonnet-4\", \"prompt\": [1]}", false, &p, &er) == 0,
          "another model's name refused: %s", er.msg);
    srv_params_free(&p);
    srv.cfg.strict_model = true;
    expect_error("{\"model\": \"gpt-4\", \"prompt\": [1]}", false, 404, "model_not_found", "unknown model");
    srv.cfg.strict_model = false;
    expect_error("{\"model\": 7, \"prompt\": [1]}", false, 400, "invalid_value", "model not a string");
    expect_error("{\"prompt\": [1], \"temperature\": 3}", false, 400, "invalid_value", "temperature > 2");
    expect_error("{\"prompt\": [1], \"max_tokens\": \"ten\"}", false, 400, "invalid_value",
                 "max_tokens string");
    expect_error("{\"prompt\": [1], \"n\": 129}", false, 400, "invalid_value", "n > 128");
    expect_error("{\"prompt\": []}", false, 400, "invalid_value", "empty ids prompt");
    expect_error("{\"prompt\": [1], \"max_tokens\": 256}", false, 400, "context_length_exceeded",
                 "over the context");
    {
        char body[1024] = "{\"prompt\": [1], \"stop\": [";
        for (int i = 0; i < 65; i++) strcat(body, i ? ", \"s\"" : "\"s\"");
        strcat(body, "]}");
        expect_error(body, false, 400, "invalid_value", "65 stop strings");
        char s257[300 + 40];
        snprintf(s257, sizeof s257, "{\"prompt\": [1], \"stop\": \"%0257d\"}", 0);
        expect_error(s257, false, 400, "invalid_value", "a stop string of 257 bytes");
    }
    expect_error("{\"prompt\": [1], \"logprobs\": 21}", false, 400, "invalid_value", "logprobs > 20");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": true, "
                 "\"top_logprobs\": 21}",
                 true, 400, "invalid_value", "top_logprobs > 20");
    expect_error("{\"prompt\": [1], \"temperature\": \"0.5\"}", false, 400, "invalid_value",
                 "temperature as a string");
    expect_error("{\"prompt\": [1], \"seed\": 1e300}", false, 400, "invalid_value", "seed out of range");
    /* chat messages: roles, and content where it is required */
    expect_error("{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}]}", true, 400, "invalid_value",
                 "an unknown role");
    expect_error("{\"messages\": [{\"role\": \"user\"}]}", true, 400, "missing_required_parameter",
                 "a user message without content");
    expect_error("{\"messages\": [{\"role\": \"system\", \"content\": null}, {\"role\": \"user\", "
                 "\"content\": \"a\"}]}",
                 true, 400, "missing_required_parameter", "a system message with null content");
    expect_error("{\"messages\": [{\"role\": \"developer\"}, {\"role\": \"user\", \"content\": \"a\"}]}",
                 true, 400, "missing_required_parameter", "a developer message without content");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\"}]}",
                 true, 400, "missing_required_parameter", "an assistant message without content or calls");
    {
        srv_params p;
        srv_err er;
        int rc = parse("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
                       "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": "
                       "\"f\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c\", "
                       "\"content\": \"1\"}], \"n\": 128}",
                       true, &p, &er);
        CHECK(rc == 0, "an assistant message with tool_calls and no content, n 128: %s", er.msg);
        if (rc == 0) srv_params_free(&p);
    }
    expect_error("{\"messages\": \"hello\"}", true, 400, "invalid_value", "messages not an array");
}

int main(void)
{
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path("models/stories260K.gguf"), &lp, &err);
    CHECK(m != NULL, "load stories260K: %s", err.msg);
    if (!m) return test_main_end();
    srv.m = m;
    srv.cfg.model_name = "stories260K";
    srv.cfg.n_ctx = 256;
    kvi_sampler_params_default(&srv.cfg.sampling);
    test_fields();
    test_text_and_chat();
    test_errors();
    test_body();
    kvi_model_free(m);
    return test_main_end();
}
