/*
 * test_server_tools.c — tools and reasoning over real HTTP on 127.0.0.1 with
 * stories260K (`kvinfer serve`, a child process) and chat templates of
 * ../shared/templates:
 *
 *  - Qwen2.5's template (Hermes/Qwen <tool_call> format), tool_choice "auto",
 *    the output steered by a "grammar" into a call: message.tool_calls with
 *    the name and the arguments as a JSON string, content null, finish_reason
 *    "tool_calls"; text before the call stays content; streamed, the deltas
 *    (content, delta.tool_calls with index/id/type/function) joined give the
 *    same message; tool_choice "none" leaves the same text in content;
 *  - tool_choice "required" and a named function: the server's grammar forces a
 *    call whose arguments follow the tool's schema (enum, maxLength), and
 *    parallel_tool_calls false gives exactly one; sampled forced calls are in
 *    the compact form (json.dumps' separators, the template's newlines, read
 *    from the tokens' bytes) and, parallel off, nothing follows the call;
 *  - DeepSeek-R1-Distill's template (its generation prompt opens "<think>"):
 *    text up to "</think>" is message.reasoning_content, the rest content,
 *    plain and streamed (delta.reasoning_content); --reasoning-format none
 *    keeps it all in content;
 *  - the 400s in OpenAI's error shape: tools of the wrong shape, a bad or
 *    duplicate function name, a bad tool_choice, tool_choice naming no tool or
 *    without tools, parallel_tool_calls not a boolean, "required" together with
 *    a grammar, tools for a model without a template (the built-in layouts) and
 *    for a template whose tool-call format kvinfer does not know; stop: 65
 *    strings or one of 257 bytes (64 of 256 bytes are fine).
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static cJSON *post(int port, cJSON *body, int *status)
{
    char *s = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    http_resp r = http_request(port, "POST", "/v1/chat/completions", NULL, s);
    free(s);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (!j || r.status != 200) fprintf(stderr, "status %d body: %s\n", r.status, r.body ? r.body : "(none)");
    free(r.body);
    return j;
}

/* A chat body: one user message, greedy, max_tokens 120 (cJSON, owned by the caller). */
static cJSON *body_new(const char *user)
{
    cJSON *b = cJSON_CreateObject();
    cJSON *ms = cJSON_AddArrayToObject(b, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", user);
    cJSON_AddItemToArray(ms, m);
    cJSON_AddNumberToObject(b, "max_tokens", 120);
    cJSON_AddNumberToObject(b, "temperature", 0);
    return b;
}

static const char *tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":10},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\",\"unit\"],"
    "\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"zone\":{\"type\":\"string\",\"enum\":[\"UTC\",\"CET\"]}},\"required\":[\"zone\"],"
    "\"additionalProperties\":false}}}]";

static void add_tools(cJSON *b) { cJSON_AddItemToObject(b, "tools", cJSON_Parse(tools_json)); }

static const cJSON *message_of(const cJSON *j)
{
    return cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
}

static const char *finish_of(const cJSON *j)
{
    const char *f = json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "finish_reason");
    return f ? f : "";
}

static void check_400(int port, cJSON *b, const char *want)
{
    int st = 0;
    char *s = cJSON_PrintUnformatted(b);
    cJSON *j = post(port, b, &st);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    const char *msg = json_get_str(e, "message");
    CHECK(st == 400, "status %d for %.300s", st, s);
    CHECK(msg && strstr(msg, want), "message '%s' lacks '%s'", msg ? msg : "", want);
    CHECK(json_get_str(e, "type") && !strcmp(json_get_str(e, "type"), "invalid_request_error"), "error type");
    free(s);
    cJSON_Delete(j);
}

/* A streamed chat's events joined: content, reasoning and the tool calls
 * (delta.tool_calls entries merged by index, as OpenAI clients do). */
/* Two tool_calls arrays are the same calls: equal but for their ids (unique per
 * request), which must be "call_..." strings. */
static bool same_calls(const cJSON *a, const cJSON *b)
{
    cJSON *x = cJSON_Duplicate(a, true), *y = cJSON_Duplicate(b, true);
    bool ok = x && y && cJSON_GetArraySize(x) == cJSON_GetArraySize(y) && cJSON_GetArraySize(x) > 0;
    for (int k = 0; ok && k < 2; k++) {
        cJSON *c, *arr = k ? y : x;
        cJSON_ArrayForEach(c, arr)
        {
            const cJSON *id = cJSON_GetObjectItem(c, "id");
            ok = ok && cJSON_IsString(id) && !strncmp(id->valuestring, "call_", 5);
            cJSON_DeleteItemFromObject(c, "id");
        }
    }
    ok = ok && cJSON_Compare(x, y, true);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return ok;
}

typedef struct joined {
    char content[4096], reasoning[4096];
    cJSON *calls; /* array of {id, type, function: {name, arguments}} */
    char finish[32];
    int n_events;
} joined;

static void cat(char *dst, size_t cap, const char *s)
{
    if (s) strncat(dst, s, cap - strlen(dst) - 1);
}

static bool stream_join(int port, cJSON *b, joined *out)
{
    memset(out, 0, sizeof *out);
    out->calls = cJSON_CreateArray();
    cJSON_AddBoolToObject(b, "stream", true);
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    http_resp r = http_request(port, "POST", "/v1/chat/completions", NULL, s);
    free(s);
    if (r.status != 200 || !r.body) {
        free(r.body);
        return false;
    }
    const char *cur = r.body, *data;
    size_t n;
    bool done = false;
    while (sse_next(&cur, &data, &n, &done)) {
        cJSON *ev = cJSON_ParseWithLength(data, n);
        const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0);
        const cJSON *d = cJSON_GetObjectItem(c0, "delta");
        out->n_events++;
        cat(out->content, sizeof out->content, json_get_str(d, "content"));
        cat(out->reasoning, sizeof out->reasoning, json_get_str(d, "reasoning_content"));
        const cJSON *tc;
        cJSON_ArrayForEach(tc, cJSON_GetObjectItem(d, "tool_calls"))
        {
            const int idx =
                cJSON_GetObjectItem(tc, "index") ? cJSON_GetObjectItem(tc, "index")->valueint : -1;
            CHECK(idx == cJSON_GetArraySize(out->calls), "delta.tool_calls index %d in order", idx);
            cJSON *copy = cJSON_Duplicate(tc, true);
            cJSON_DeleteItemFromObject(copy, "index");
            cJSON_AddItemToArray(out->calls, copy);
        }
        if (json_get_str(c0, "finish_reason"))
            snprintf(out->finish, sizeof out->finish, "%s", json_get_str(c0, "finish_reason"));
        cJSON_Delete(ev);
    }
    free(r.body);
    return done;
}

/* GBNF that makes the reply `prefix` then one Hermes call to get_weather. */
static char *weather_call_gbnf(const char *prefix)
{
    static char g[1024];
    snprintf(g, sizeof g,
             "root ::= %s\"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": "
             "{\\\"city\\\": \\\"\" [a-z]{2,6} \"\\\", \\\"unit\\\": \\\"celsius\\\"}}\\n</tool_call>\"\n",
             prefix);
    return g;
}

static void test_hermes(int port)
{
    /* a call only: tool_calls, content null */
    cJSON *b = body_new("weather?");
    add_tools(b);
    cJSON_AddStringToObject(b, "grammar", weather_call_gbnf(""));
    int st = 0;
    cJSON *j = post(port, b, &st);
    const cJSON *m = message_of(j);
    const cJSON *calls = cJSON_GetObjectItem(m, "tool_calls");
    const cJSON *c0 = cJSON_GetArrayItem(calls, 0);
    const cJSON *fn = cJSON_GetObjectItem(c0, "function");
    CHECK(st == 200 && cJSON_GetArraySize(calls) == 1, "one tool call (status %d)", st);
    CHECK(!strcmp(finish_of(j), "tool_calls"), "finish_reason '%s'", finish_of(j));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(m, "content")), "content is null beside the calls");
    CHECK(json_get_str(c0, "type") && !strcmp(json_get_str(c0, "type"), "function") &&
              json_get_str(c0, "id") && !strncmp(json_get_str(c0, "id"), "call_", 5),
          "call type and id");
    CHECK(json_get_str(fn, "name") && !strcmp(json_get_str(fn, "name"), "get_weather"), "function name");
    cJSON *args = json_get_str(fn, "arguments") ? cJSON_Parse(json_get_str(fn, "arguments")) : NULL;
    const char *city = json_get_str(args, "city");
    CHECK(city && strlen(city) >= 2 && strlen(city) <= 6 && json_get_str(args, "unit") &&
              !strcmp(json_get_str(args, "unit"), "celsius") && cJSON_GetArraySize(args) == 2,
          "arguments %s", json_get_str(fn, "arguments") ? json_get_str(fn, "arguments") : "(none)");
    /* streamed: the same call in delta.tool_calls */
    b = body_new("weather?");
    add_tools(b);
    cJSON_AddStringToObject(b, "grammar", weather_call_gbnf(""));
    joined sj;
    CHECK(stream_join(port, b, &sj), "stream ends with [DONE]");
    CHECK(!strcmp(sj.finish, "tool_calls"), "streamed finish_reason '%s'", sj.finish);
    CHECK(sj.content[0] == 0, "streamed content '%s' is empty", sj.content);
    CHECK(same_calls(sj.calls, calls), "streamed calls == plain calls");
    cJSON_Delete(sj.calls);
    cJSON_Delete(args);
    cJSON_Delete(j);

    /* text before the call stays content */
    b = body_new("weather?");
    add_tools(b);
    cJSON_AddStringToObject(b, "grammar", weather_call_gbnf("\"Let me look. \" "));
    j = post(port, b, &st);
    m = message_of(j);
    CHECK(json_get_str(m, "content") && !strncmp(json_get_str(m, "content"), "Let me look.", 12),
          "content '%s'", json_get_str(m, "content") ? json_get_str(m, "content") : "(null)");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(m, "tool_calls")) == 1, "and one call");
    b = body_new("weather?");
    add_tools(b);
    cJSON_AddStringToObject(b, "grammar", weather_call_gbnf("\"Let me look. \" "));
    CHECK(stream_join(port, b, &sj), "stream ends");
    CHECK(!strcmp(sj.content, json_get_str(m, "content") ? json_get_str(m, "content") : ""),
          "streamed content '%s'", sj.content);
    CHECK(same_calls(sj.calls, cJSON_GetObjectItem(m, "tool_calls")), "streamed calls == plain");
    cJSON_Delete(sj.calls);
    cJSON_Delete(j);

    /* tool_choice none: the same text is content */
    b = body_new("weather?");
    add_tools(b);
    cJSON_AddStringToObject(b, "tool_choice", "none");
    cJSON_AddStringToObject(b, "grammar", weather_call_gbnf(""));
    j = post(port, b, &st);
    m = message_of(j);
    CHECK(json_get_str(m, "content") && strstr(json_get_str(m, "content"), "<tool_call>") &&
              !cJSON_GetObjectItem(m, "tool_calls"),
          "tool_choice none: the call text stays content");
    CHECK(!strcmp(finish_of(j), "stop"), "tool_choice none: finish '%s'", finish_of(j));
    cJSON_Delete(j);
}

static void test_forced(int port)
{
    /* required, one call: the server's grammar follows the schema */
    cJSON *b = body_new("What is the weather in Paris?");
    add_tools(b);
    cJSON_AddStringToObject(b, "tool_choice", "required");
    cJSON_AddBoolToObject(b, "parallel_tool_calls", false);
    cJSON_ReplaceItemInObject(b, "max_tokens", cJSON_CreateNumber(200));
    int st = 0;
    cJSON *j = post(port, b, &st);
    const cJSON *calls = cJSON_GetObjectItem(message_of(j), "tool_calls");
    const cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function");
    const char *name = json_get_str(fn, "name");
    cJSON *args = json_get_str(fn, "arguments") ? cJSON_Parse(json_get_str(fn, "arguments")) : NULL;
    CHECK(st == 200 && cJSON_GetArraySize(calls) == 1 && !strcmp(finish_of(j), "tool_calls"),
          "required: exactly one call, finish '%s'", finish_of(j));
    if (name && !strcmp(name, "get_weather")) {
        const char *u = json_get_str(args, "unit"), *city = json_get_str(args, "city");
        CHECK(u && (!strcmp(u, "celsius") || !strcmp(u, "fahrenheit")) && city && strlen(city) <= 10 &&
                  cJSON_GetArraySize(args) == 2,
              "required: get_weather arguments follow the schema: %s", json_get_str(fn, "arguments"));
    } else {
        const char *z = json_get_str(args, "zone");
        CHECK(name && !strcmp(name, "get_time") && z && (!strcmp(z, "UTC") || !strcmp(z, "CET")) &&
                  cJSON_GetArraySize(args) == 1,
              "required: get_time arguments follow the schema: %s", json_get_str(fn, "arguments"));
    }
    cJSON_Delete(args);
    cJSON_Delete(j);
    /* a named function */
    b = body_new("What is the weather in Paris?");
    add_tools(b);
    cJSON_AddItemToObject(b, "tool_choice",
                          cJSON_Parse("{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}"));
    j = post(port, b, &st);
    calls = cJSON_GetObjectItem(message_of(j), "tool_calls");
    fn = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function");
    CHECK(st == 200 && cJSON_GetArraySize(calls) >= 1 && json_get_str(fn, "name") &&
              !strcmp(json_get_str(fn, "name"), "get_time"),
          "named: get_time is called");
    cJSON_Delete(j);
}

/* The generated text of a chat answer: its tokens' bytes joined (logprobs). */
static char *raw_text(const cJSON *j)
{
    const cJSON *lp =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs");
    char *s = calloc(1, 8192);
    size_t n = 0;
    const cJSON *e, *b;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(lp, "content"))
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(e, "bytes"))
    {
        if (n < 8191) s[n++] = (char)b->valueint;
    }
    return s;
}

/* text with every JSON string's contents removed ("..." -> ""). */
static void strip_strings(char *text)
{
    char *w = text;
    bool in = false;
    for (const char *r = text; *r; r++) {
        if (in && *r == '\\' && r[1]) {
            r++;
            continue;
        }
        if (*r == '"') in = !in;
        if (!in || *r == '"') *w++ = *r;
    }
    *w = 0;
}

/* Forced calls in the compact form: json.dumps' separators and the template's
 * newlines only, nothing after the one call (parallel off); with parallel on,
 * every call compact. Sampled (temperature 1) so that white space is tempting. */
static void test_forced_compact(int port)
{
    for (int k = 0; k < 4; k++) {
        const bool parallel = k >= 2;
        cJSON *b = body_new("What is the weather in Paris?");
        add_tools(b);
        cJSON_AddStringToObject(b, "tool_choice", "required");
        cJSON_AddBoolToObject(b, "parallel_tool_calls", parallel);
        cJSON_AddBoolToObject(b, "logprobs", true);
        cJSON_ReplaceItemInObject(b, "temperature", cJSON_CreateNumber(1));
        cJSON_ReplaceItemInObject(b, "max_tokens", cJSON_CreateNumber(parallel ? 300 : 200));
        cJSON_AddNumberToObject(b, "seed", 100 + k);
        int st = 0;
        cJSON *j = post(port, b, &st);
        char *raw = raw_text(j);
        const int n_calls = cJSON_GetArraySize(cJSON_GetObjectItem(message_of(j), "tool_calls"));
        if (!parallel)
            CHECK(st == 200 && n_calls == 1 && !strcmp(finish_of(j), "tool_calls"),
                  "parallel off: one call, then the end (finish '%s', %d calls)", finish_of(j), n_calls);
        else
            CHECK(st == 200 && n_calls >= 1, "parallel on: calls (%d)", n_calls);
        const char *end = strstr(raw, "</tool_call>");
        CHECK(!strncmp(raw, "<tool_call>", 11) && end, "the text is calls: %s", raw);
        if (!parallel && end) CHECK(end[12] == 0, "nothing after the one call: '%s'", end + 12);
        strip_strings(raw);
        /* outside strings: only "<tool_call>\n?{", "\": ", "\", " and "}\n?</tool_call>" */
        for (const char *p = raw; *p; p++) {
            if (*p == ' ')
                CHECK(p > raw && (p[-1] == ':' || p[-1] == ',') && p[1] != ' ',
                      "a lone space after ':' or ',' only: %s", raw);
            if (*p == '\n')
                CHECK((p >= raw + 11 && !strncmp(p - 11, "<tool_call>", 11)) ||
                          !strncmp(p + 1, "</tool_call>", 12) ||
                          (parallel && p > raw && p[-1] == '>' && !strncmp(p + 1, "<tool_call>", 11)),
                      "a newline only where the template puts one: %s", raw);
            CHECK(*p != '\t' && *p != '\r', "no tabs: %s", raw);
        }
        free(raw);
        cJSON_Delete(j);
    }
}

static void test_errors(int port)
{
    cJSON *b = body_new("x");
    cJSON_AddStringToObject(b, "tools", "get_weather");
    check_400(port, b, "'tools' must be an array");
    b = body_new("x");
    cJSON_AddItemToObject(b, "tools", cJSON_Parse("[{\"type\":\"code\",\"function\":{\"name\":\"f\"}}]"));
    check_400(port, b, "'tools[0].type' must be \"function\"");
    b = body_new("x");
    cJSON_AddItemToObject(b, "tools",
                          cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]"));
    check_400(port, b, "'tools[0].function.name'");
    b = body_new("x");
    cJSON_AddItemToObject(b, "tools",
                          cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
                                      "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"));
    check_400(port, b, "'tools[1].function.name' names a function that an earlier entry names too");
    b = body_new("x");
    cJSON_AddItemToObject(
        b, "tools", cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]"));
    check_400(port, b, "'tools[0].function.parameters' must be a JSON Schema object");
    b = body_new("x");
    add_tools(b);
    cJSON_AddStringToObject(b, "tool_choice", "always");
    check_400(port, b, "'tool_choice' must be");
    b = body_new("x");
    add_tools(b);
    cJSON_AddItemToObject(b, "tool_choice",
                          cJSON_Parse("{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}"));
    check_400(port, b, "not in 'tools'");
    b = body_new("x");
    cJSON_AddStringToObject(b, "tool_choice", "required");
    check_400(port, b, "'tool_choice' is only allowed when 'tools' are specified");
    b = body_new("x");
    add_tools(b);
    cJSON_AddNumberToObject(b, "parallel_tool_calls", 1);
    check_400(port, b, "'parallel_tool_calls' must be a boolean");
    b = body_new("x");
    add_tools(b);
    cJSON_AddStringToObject(b, "tool_choice", "required");
    cJSON_AddStringToObject(b, "grammar", "root ::= \"a\"");
    check_400(port, b, "cannot be combined with 'grammar'");
    /* stop: 64 strings of 256 bytes are fine, 65 or 257 bytes are not */
    char s256[258];
    memset(s256, 'q', 256);
    s256[256] = 0;
    b = body_new("x");
    cJSON *st = cJSON_AddArrayToObject(b, "stop");
    for (int i = 0; i < 64; i++) cJSON_AddItemToArray(st, cJSON_CreateString(s256));
    cJSON_ReplaceItemInObject(b, "max_tokens", cJSON_CreateNumber(4));
    int status = 0;
    cJSON *j = post(port, b, &status);
    CHECK(status == 200, "64 stop strings of 256 bytes: status %d", status);
    cJSON_Delete(j);
    b = body_new("x");
    st = cJSON_AddArrayToObject(b, "stop");
    for (int i = 0; i < 65; i++) cJSON_AddItemToArray(st, cJSON_CreateString("z"));
    check_400(port, b, "at most 64 strings");
    s256[256] = 'q';
    s256[257] = 0;
    b = body_new("x");
    cJSON_AddStringToObject(b, "stop", s256);
    check_400(port, b, "at most 256 bytes");
}

static void test_reasoning(int port, bool split)
{
    /* DeepSeek-R1-Distill's generation prompt ends "<think>\n": the reply opens in reasoning */
    static const char g[] = "root ::= [a-z]{3,8} \" \" [a-z]{3,8} \"\\n</think>\\n\\n\" [a-z]{3,8} \".\"\n";
    cJSON *b = body_new("Tell me");
    cJSON_AddStringToObject(b, "grammar", g);
    int st = 0;
    cJSON *j = post(port, b, &st);
    const cJSON *m = message_of(j);
    const char *content = json_get_str(m, "content"), *reasoning = json_get_str(m, "reasoning_content");
    CHECK(st == 200 && content, "reasoning: a reply (status %d)", st);
    if (split) {
        CHECK(reasoning && strlen(reasoning) >= 7 && strchr(reasoning, ' ') && !strstr(reasoning, "think>"),
              "reasoning_content '%s'", reasoning ? reasoning : "(none)");
        CHECK(content && !strstr(content, "think>") && strlen(content) >= 4 &&
                  content[strlen(content) - 1] == '.' && content[0] != '\n',
              "content '%s' is the text after </think> (leading newlines dropped)", content ? content : "");
        joined sj;
        b = body_new("Tell me");
        cJSON_AddStringToObject(b, "grammar", g);
        CHECK(stream_join(port, b, &sj), "reasoning: stream ends");
        CHECK(reasoning && !strcmp(sj.reasoning, reasoning), "streamed reasoning '%s'", sj.reasoning);
        CHECK(content && !strcmp(sj.content, content), "streamed content '%s'", sj.content);
        CHECK(!strcmp(sj.finish, "stop"), "streamed finish '%s'", sj.finish);
        cJSON_Delete(sj.calls);
    } else {
        CHECK(!reasoning && content && strstr(content, "\n</think>\n\n"),
              "--reasoning-format none: all in content '%s'", content ? content : "");
    }
    cJSON_Delete(j);
}

int main(void)
{
    char extra[1024];
    test_server s;
    snprintf(extra, sizeof extra, "-c 4096 --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    if (test_server_start(&s, extra, "server_tools_qwen.err")) {
        test_hermes(s.port);
        test_forced(s.port);
        test_forced_compact(s.port);
        test_errors(s.port);
        CHECK(test_server_stop(&s) == 0, "server exit status");
    } else {
        CHECK(false, "server with Qwen2.5's template did not start");
    }
    snprintf(extra, sizeof extra, "-c 2048 --chat-template-file '%s'",
             shared_path("templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"));
    if (test_server_start(&s, extra, "server_tools_r1.err")) {
        test_reasoning(s.port, true);
        CHECK(test_server_stop(&s) == 0, "server exit status");
    } else {
        CHECK(false, "server with R1's template did not start");
    }
    snprintf(extra, sizeof extra, "-c 2048 --reasoning-format none --chat-template-file '%s'",
             shared_path("templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"));
    if (test_server_start(&s, extra, "server_tools_r1_none.err")) {
        test_reasoning(s.port, false);
        CHECK(test_server_stop(&s) == 0, "server exit status");
    }
    /* no template (the built-in layouts), and a template without a known tool format */
    for (int k = 0; k < 2; k++) {
        extra[0] = 0;
        if (k)
            snprintf(extra, sizeof extra, "--chat-template-file '%s'",
                     shared_path("templates/microsoft-Phi-3.5-mini-instruct.jinja"));
        if (!test_server_start(&s, extra, k ? "server_tools_phi.err" : "server_tools_none.err")) {
            CHECK(false, "server %d did not start", k);
            continue;
        }
        cJSON *b = body_new("x");
        add_tools(b);
        check_400(s.port, b, k ? "a format kvinfer cannot parse" : "ships no chat template");
        b = body_new("x");
        add_tools(b);
        cJSON_AddStringToObject(b, "tool_choice", "none");
        int st = 0;
        cJSON *j = post(s.port, b, &st);
        CHECK(st == 200, "tool_choice none is honoured without a tool format (status %d)", st);
        cJSON_Delete(j);
        CHECK(test_server_stop(&s) == 0, "server exit status");
    }
    return test_main_end();
}
