/*
 * test_server_messages.c — Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens) over real HTTP on 127.0.0.1: `kvinfer serve` on
 * stories260K with Qwen2.5's chat template (Hermes tool calls) from
 * ../shared/templates, an API key, and a second server with
 * DeepSeek-R1-Distill's template (its prompt opens a <think> block):
 *
 *  - the non-streamed message: id "msg_...", type, role, model, a text block,
 *    stop_reason, usage; a query string (?beta=true) changes nothing;
 *  - the streamed events: "event:" lines equal to data.type, message_start,
 *    ping, content blocks started / delta'd / stopped in index order,
 *    message_delta, message_stop; the text deltas joined equal the
 *    non-streamed text (greedy), and both carry the same stop_reason and usage;
 *  - stop_sequences: the text is the unstopped text cut before the sequence,
 *    stop_reason "stop_sequence" and stop_sequence the string; max_tokens:
 *    stop_reason "max_tokens" with output_tokens = max_tokens;
 *  - tool_choice any (one call): a tool_use block "toolu_..." whose input is an
 *    object following the tool's schema, stop_reason "tool_use", the same
 *    streamed (input_json_delta); a tool_result round trip is accepted and its
 *    text reaches the prompt (count_tokens grows with it);
 *  - count_tokens = input_tokens + cache_read_input_tokens of the same request;
 *    a repeated long prompt reads cache_read_input_tokens > 0 from the prefix cache;
 *  - thinking: a thinking block (with a signature) before the text, the
 *    same streamed; output_config.format constrains the text to its schema;
 *    cache_control, service_tier, context_management, redacted_thinking,
 *    thinking blocks and system messages inside the list are accepted;
 *  - errors in Anthropic's shape ({"type": "error", "error": {"type", "message"}}):
 *    max_tokens missing, a bad type, an image block, an unknown block type,
 *    bad JSON, no key / a wrong key (x-api-key or Bearer both accepted), an
 *    unknown route under /v1/messages, a body over --body-max;
 *  - an unknown top-level field is accepted and named in the request log line
 *    (JSON and text), the fields accepted without effect are not, on
 *    /v1/messages and count_tokens.
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

#define KEY_HDR "x-api-key: sk-messages\r\n"

static bool eq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* POST body (consumed) to path with headers; the parsed answer, *status set. */
static cJSON *post_to(int port, const char *path, const char *headers, cJSON *body, int *status)
{
    char *s = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    http_resp r = http_request(port, "POST", path, headers, s);
    free(s);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (!j || r.status != 200)
        fprintf(stderr, "status %d body: %.400s\n", r.status, r.body ? r.body : "(none)");
    free(r.body);
    return j;
}

static cJSON *post(int port, cJSON *body, int *status)
{
    return post_to(port, "/v1/messages", KEY_HDR, body, status);
}

/* A body: one user message, greedy, max_tokens n. */
static cJSON *body_new(const char *user, int n)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", "stories260K");
    cJSON_AddNumberToObject(b, "max_tokens", n);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", user);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "messages"), m);
    return b;
}

static const char *tools_json =
    "[{\"name\":\"get_weather\",\"description\":\"Weather of a "
    "city\",\"cache_control\":{\"type\":\"ephemeral\"},"
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":10},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\",\"unit\"],"
    "\"additionalProperties\":false}}]";

/* The text of a message's single text block ("" when it has none). */
static const char *text_of(const cJSON *msg)
{
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItem(msg, "content")) if (eq(json_get_str(b, "type"),
                                                                      "text")) return json_get_str(b, "text");
    return "";
}

/* A stream's events, checked for Anthropic's order, assembled into a message. */
typedef struct streamed {
    cJSON *msg; /* message_start's message with the blocks and message_delta applied */
    int n_events, n_ping;
    bool ended; /* message_stop seen last */
} streamed;

static void apply_delta(cJSON *blk, const cJSON *d, char **json_buf)
{
    const char *t = json_get_str(d, "type");
    const char *field = eq(t, "text_delta") ? "text" : eq(t, "thinking_delta") ? "thinking" : NULL;
    if (field) {
        const char *old = json_get_str(blk, field), *add = json_get_str(d, field);
        CHECK(old && add, "%s on a block with a %s", t, field);
        if (!old || !add) return;
        char *n = malloc(strlen(old) + strlen(add) + 1);
        strcpy(n, old);
        strcat(n, add);
        cJSON_ReplaceItemInObject(blk, field, cJSON_CreateString(n));
        free(n);
    } else if (eq(t, "input_json_delta")) {
        const char *pj = json_get_str(d, "partial_json");
        CHECK(pj != NULL, "input_json_delta has partial_json");
        size_t old = *json_buf ? strlen(*json_buf) : 0;
        *json_buf = realloc(*json_buf, old + strlen(pj ? pj : "") + 1);
        strcpy(*json_buf + old, pj ? pj : "");
    } else {
        CHECK(0, "unknown delta type %s", t ? t : "(none)");
    }
}

static bool stream(int port, cJSON *body, streamed *out)
{
    memset(out, 0, sizeof *out);
    cJSON_AddBoolToObject(body, "stream", true);
    char *s = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    http_resp r = http_request(port, "POST", "/v1/messages", KEY_HDR, s);
    free(s);
    if (r.status != 200 || !r.body) {
        fprintf(stderr, "stream status %d: %.300s\n", r.status, r.body ? r.body : "");
        free(r.body);
        return false;
    }
    int open = -1, next = 0;
    bool deltaed = false;
    char *json_buf = NULL;
    for (const char *cur = r.body; *cur;) {
        const char *end = strstr(cur, "\n\n");
        if (!end) break;
        char name[64] = "";
        CHECK(sscanf(cur, "event: %63s\n", name) == 1, "an event line first: %.40s", cur);
        const char *data = strstr(cur, "\ndata: ");
        CHECK(data && data < end, "a data line");
        if (!data || data > end) break;
        cJSON *ev = cJSON_ParseWithLength(data + 7, (size_t)(end - data - 7));
        cur = end + 2;
        const char *type = json_get_str(ev, "type");
        CHECK(eq(type, name), "event: %s carries data.type %s", name, type ? type : "(none)");
        CHECK(!out->ended, "nothing after message_stop (%s)", name);
        const int idx = (int)json_get_num(ev, "index");
        if (out->n_events == 0) {
            CHECK(eq(type, "message_start"), "message_start first (%s)", name);
            out->msg = cJSON_DetachItemFromObject(ev, "message");
        } else if (eq(type, "ping")) {
            out->n_ping++;
        } else if (eq(type, "content_block_start")) {
            CHECK(open < 0 && idx == next, "block %d starts (open %d, next %d)", idx, open, next);
            open = next++;
            cJSON_AddItemToArray(cJSON_GetObjectItem(out->msg, "content"),
                                 cJSON_DetachItemFromObject(ev, "content_block"));
        } else if (eq(type, "content_block_delta")) {
            CHECK(idx == open && open >= 0, "delta for the open block %d (index %d)", open, idx);
            cJSON *blk = cJSON_GetArrayItem(cJSON_GetObjectItem(out->msg, "content"), open);
            if (blk) apply_delta(blk, cJSON_GetObjectItem(ev, "delta"), &json_buf);
        } else if (eq(type, "content_block_stop")) {
            CHECK(idx == open && open >= 0, "stop of the open block %d (index %d)", open, idx);
            cJSON *blk = cJSON_GetArrayItem(cJSON_GetObjectItem(out->msg, "content"), open);
            if (json_buf && blk) {
                cJSON *in = cJSON_Parse(json_buf);
                CHECK(cJSON_IsObject(in), "input_json_delta's joined text is an object: %s", json_buf);
                cJSON_ReplaceItemInObject(blk, "input", in ? in : cJSON_CreateObject());
            }
            free(json_buf);
            json_buf = NULL;
            open = -1;
        } else if (eq(type, "message_delta")) {
            CHECK(open < 0 && !deltaed, "message_delta once, after every block stopped");
            deltaed = true;
            const cJSON *d = cJSON_GetObjectItem(ev, "delta");
            cJSON_ReplaceItemInObject(out->msg, "stop_reason",
                                      cJSON_Duplicate(cJSON_GetObjectItem(d, "stop_reason"), 1));
            cJSON_ReplaceItemInObject(out->msg, "stop_sequence",
                                      cJSON_Duplicate(cJSON_GetObjectItem(d, "stop_sequence"), 1));
            cJSON_ReplaceItemInObject(out->msg, "usage",
                                      cJSON_Duplicate(cJSON_GetObjectItem(ev, "usage"), 1));
        } else if (eq(type, "message_stop")) {
            CHECK(deltaed, "message_stop after message_delta");
            out->ended = true;
        } else {
            CHECK(0, "unexpected event %s", name);
        }
        if (out->n_events == 1) CHECK(eq(type, "ping"), "one ping right after message_start (%s)", name);
        out->n_events++;
        cJSON_Delete(ev);
    }
    free(json_buf);
    free(r.body);
    return out->msg && out->ended;
}

static void check_error(int status, cJSON *j, int want_status, const char *want_type, const char *want_msg)
{
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    CHECK(status == want_status, "status %d, want %d (%s)", status, want_status, want_msg);
    CHECK(eq(json_get_str(j, "type"), "error") && eq(json_get_str(e, "type"), want_type),
          "error type %s, want %s", json_get_str(e, "type") ? json_get_str(e, "type") : "(none)", want_type);
    CHECK(json_get_str(e, "message") && strstr(json_get_str(e, "message"), want_msg), "message '%s' has '%s'",
          json_get_str(e, "message") ? json_get_str(e, "message") : "", want_msg);
    cJSON_Delete(j);
}

static void bad_body(int port, const char *json, const char *want_msg)
{
    int st = 0;
    cJSON *j = post(port, cJSON_Parse(json), &st);
    check_error(st, j, 400, "invalid_request_error", want_msg);
}

static void test_plain_and_stream(int port)
{
    int st = 0;
    cJSON *j = post_to(port, "/v1/messages?beta=true", KEY_HDR, body_new("Once upon a time", 40), &st);
    CHECK(st == 200, "status %d", st);
    CHECK(json_get_str(j, "id") && !strncmp(json_get_str(j, "id"), "msg_", 4), "id msg_...");
    CHECK(eq(json_get_str(j, "type"), "message") && eq(json_get_str(j, "role"), "assistant") &&
              eq(json_get_str(j, "model"), "stories260K"),
          "type, role, model");
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    CHECK(json_get_num(u, "output_tokens") == 40 && eq(json_get_str(j, "stop_reason"), "max_tokens") &&
              cJSON_IsNull(cJSON_GetObjectItem(j, "stop_sequence")),
          "max_tokens: 40 tokens, stop_reason %s",
          json_get_str(j, "stop_reason") ? json_get_str(j, "stop_reason") : "");
    CHECK(json_get_num(u, "input_tokens") > 10 && json_get_num(u, "cache_creation_input_tokens") == 0 &&
              json_get_num(u, "cache_read_input_tokens") >= 0,
          "usage figures");
    const char *text = text_of(j);
    CHECK(strlen(text) > 20 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "content")) == 1,
          "one text block '%s'", text);

    /* the same request streamed: the same message, block by block */
    streamed sm;
    CHECK(stream(port, body_new("Once upon a time", 40), &sm), "the stream ends with message_stop");
    CHECK(sm.n_ping == 1, "one ping (%d)", sm.n_ping);
    CHECK(eq(text_of(sm.msg), text), "streamed text '%s' == '%s'", text_of(sm.msg), text);
    CHECK(eq(json_get_str(sm.msg, "stop_reason"), "max_tokens"), "streamed stop_reason");
    const cJSON *su = cJSON_GetObjectItem(sm.msg, "usage");
    CHECK(json_get_num(su, "output_tokens") == 40 &&
              json_get_num(su, "input_tokens") + json_get_num(su, "cache_read_input_tokens") ==
                  json_get_num(u, "input_tokens") + json_get_num(u, "cache_read_input_tokens"),
          "streamed usage: the same prompt and output");
    cJSON_Delete(sm.msg);

    /* stop_sequences: a word from the middle of the greedy text */
    const char *sp = strchr(text + 8, ' ');
    char seq[16] = "";
    if (sp) snprintf(seq, sizeof seq, "%.4s", sp + 1);
    const size_t cut = sp ? (size_t)(strstr(text, seq) - text) : 0;
    cJSON *b = body_new("Once upon a time", 40);
    cJSON *ss = cJSON_AddArrayToObject(b, "stop_sequences");
    cJSON_AddItemToArray(ss, cJSON_CreateString("zzqzz"));
    cJSON_AddItemToArray(ss, cJSON_CreateString(seq));
    cJSON *k = post(port, b, &st);
    CHECK(st == 200 && eq(json_get_str(k, "stop_reason"), "stop_sequence") &&
              eq(json_get_str(k, "stop_sequence"), seq),
          "stop_sequence '%s' reported", seq);
    CHECK(strlen(text_of(k)) == cut && !strncmp(text_of(k), text, cut),
          "stopped text '%s' = the first %zu bytes", text_of(k), cut);
    cJSON_Delete(k);
    b = body_new("Once upon a time", 40);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "stop_sequences"), cJSON_CreateString(seq));
    CHECK(stream(port, b, &sm), "stop_sequences streamed");
    CHECK(eq(json_get_str(sm.msg, "stop_sequence"), seq) && strlen(text_of(sm.msg)) == cut,
          "streamed stop '%s'", text_of(sm.msg));
    cJSON_Delete(sm.msg);

    /* count_tokens: the prompt of the same body (max_tokens not needed) */
    b = body_new("Once upon a time", 40);
    cJSON_DeleteItemFromObject(b, "max_tokens");
    k = post_to(port, "/v1/messages/count_tokens", KEY_HDR, b, &st);
    CHECK(st == 200 && json_get_num(k, "input_tokens") ==
                           json_get_num(u, "input_tokens") + json_get_num(u, "cache_read_input_tokens"),
          "count_tokens %g = input %g + cache read %g", json_get_num(k, "input_tokens"),
          json_get_num(u, "input_tokens"), json_get_num(u, "cache_read_input_tokens"));
    cJSON_Delete(k);
    cJSON_Delete(j);
}

static void test_cache(int port)
{
    char big[6000] = "";
    for (int i = 0; i < 60; i++) strcat(big, "The little dog ran to the park and played with a ball. ");
    int st = 0;
    cJSON *a = post(port, body_new(big, 4), &st);
    cJSON *b = post(port, body_new(big, 4), &st);
    const cJSON *ua = cJSON_GetObjectItem(a, "usage"), *ub = cJSON_GetObjectItem(b, "usage");
    CHECK(json_get_num(ub, "cache_read_input_tokens") > 256, "repeated prompt: cache_read_input_tokens %g",
          json_get_num(ub, "cache_read_input_tokens"));
    CHECK(json_get_num(ua, "input_tokens") + json_get_num(ua, "cache_read_input_tokens") ==
              json_get_num(ub, "input_tokens") + json_get_num(ub, "cache_read_input_tokens"),
          "input + cache read is the prompt both times");
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static void check_weather_input(const cJSON *in)
{
    const char *city = json_get_str(in, "city"), *unit = json_get_str(in, "unit");
    CHECK(cJSON_IsObject(in) && city && strlen(city) <= 10 &&
              (eq(unit, "celsius") || eq(unit, "fahrenheit")) && cJSON_GetArraySize(in) == 2,
          "input follows the schema");
}

static void test_tools(int port)
{
    cJSON *b = body_new("What is the weather in Paris?", 200);
    cJSON_AddItemToObject(b, "tools", cJSON_Parse(tools_json));
    cJSON_AddItemToObject(b, "tool_choice",
                          cJSON_Parse("{\"type\":\"any\",\"disable_parallel_tool_use\":true}"));
    char *again = cJSON_PrintUnformatted(b);
    int st = 0;
    cJSON *j = post(port, b, &st);
    const cJSON *content = cJSON_GetObjectItem(j, "content");
    const cJSON *call = cJSON_GetArrayItem(content, cJSON_GetArraySize(content) - 1);
    CHECK(st == 200 && eq(json_get_str(j, "stop_reason"), "tool_use"), "tool_use stop_reason");
    CHECK(eq(json_get_str(call, "type"), "tool_use") && eq(json_get_str(call, "name"), "get_weather") &&
              json_get_str(call, "id") && !strncmp(json_get_str(call, "id"), "toolu_", 6),
          "a tool_use block");
    check_weather_input(cJSON_GetObjectItem(call, "input"));
    streamed sm;
    CHECK(stream(port, cJSON_Parse(again), &sm), "tool call streamed");
    const cJSON *sc = cJSON_GetArrayItem(cJSON_GetObjectItem(sm.msg, "content"),
                                         cJSON_GetArraySize(cJSON_GetObjectItem(sm.msg, "content")) - 1);
    CHECK(eq(json_get_str(sm.msg, "stop_reason"), "tool_use") &&
              eq(json_get_str(sc, "name"), "get_weather") &&
              cJSON_Compare(cJSON_GetObjectItem(sc, "input"), cJSON_GetObjectItem(call, "input"), true),
          "streamed call == plain call");
    cJSON_Delete(sm.msg);
    free(again);

    /* the round trip: the call, its result (text reaches the prompt), an answer */
    char *id = strdup(json_get_str(call, "id") ? json_get_str(call, "id") : "toolu_x");
    double counts[2] = { 0, 0 };
    for (int v = 0; v < 3; v++) {
        char rt[2048];
        snprintf(
            rt, sizeof rt,
            "{\"max_tokens\":16,\"temperature\":0,\"tools\":%s,\"system\":[{\"type\":\"text\",\"text\":\"Be "
            "brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],\"metadata\":{\"user_id\":\"u1\"},"
            "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather?\"}]},"
            "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me see.\"},{\"type\":"
            "\"tool_use\",\"id\":\"%s\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\",\"unit\":"
            "\"celsius\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"%"
            "s\","
            "\"content\":%s},{\"type\":\"text\",\"text\":\"And now?\"}]}]}",
            tools_json, id, id,
            v == 0   ? "\"sunny\""
            : v == 1 ? "[{\"type\":\"text\",\"text\":\"sunny, warm and dry all day long\"}]"
                     : "\"sunny\",\"is_error\":false");
        if (v < 2) {
            cJSON *c = post_to(port, "/v1/messages/count_tokens", KEY_HDR, cJSON_Parse(rt), &st);
            counts[v] = json_get_num(c, "input_tokens");
            cJSON_Delete(c);
        }
        cJSON *a = post(port, cJSON_Parse(rt), &st);
        CHECK(st == 200 && eq(json_get_str(a, "type"), "message"), "tool_result round trip %d accepted", v);
        cJSON_Delete(a);
    }
    CHECK(counts[0] > 50 && counts[1] > counts[0] + 4,
          "the tool result's text is in the prompt (%g, %g tokens)", counts[0], counts[1]);
    free(id);
    cJSON_Delete(j);
}

static void test_errors(int port)
{
    int st = 0;
    bad_body(port, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "'max_tokens' is required");
    bad_body(port, "{\"max_tokens\":\"ten\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             "max_tokens");
    bad_body(port,
             "{\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             "'temperature' must be in [0, 1]");
    bad_body(port, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":5}]}",
             "messages[0].content");
    bad_body(port, "{\"max_tokens\":5,\"messages\":[{\"role\":\"robot\",\"content\":\"hi\"}]}",
             "messages[0].role");
    bad_body(
        port,
        "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{"
        "\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AAAA\"}}]}]}",
        "this model takes text only");
    bad_body(port,
             "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"hologram\"}]}]}",
             "'hologram'");
    bad_body(port, "{\"max_tokens\":5,\"messages\":[]}", "messages");
    bad_body(port,
             "{\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             "web_search_20250305");
    bad_body(port,
             "{\"max_tokens\":5,\"tool_choice\":{\"type\":\"sometimes\"},\"tools\":" /* tools come next */
             "[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             "tool_choice.type");
    bad_body(port,
             "{\"max_tokens\":2000,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":10},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             "budget_tokens");
    http_resp r = http_request(port, "POST", "/v1/messages", KEY_HDR, "{\"max_tokens\": 5,");
    check_error(r.status, r.body ? cJSON_Parse(r.body) : NULL, 400, "invalid_request_error", "JSON");
    free(r.body);
    /* authentication: none, a wrong key, the key as a Bearer token */
    cJSON *j = post_to(port, "/v1/messages", NULL, body_new("hi", 2), &st);
    check_error(st, j, 401, "authentication_error", "API key");
    j = post_to(port, "/v1/messages", "x-api-key: sk-wrong\r\n", body_new("hi", 2), &st);
    check_error(st, j, 401, "authentication_error", "API key");
    j = post_to(port, "/v1/messages", "Authorization: Bearer sk-messages\r\n", body_new("hi", 2), &st);
    CHECK(st == 200 && eq(json_get_str(j, "type"), "message"), "a Bearer token works too");
    cJSON_Delete(j);
    j = post_to(port, "/v1/messages/batches", KEY_HDR, body_new("hi", 2), &st);
    check_error(st, j, 404, "not_found_error", "no route");
    /* over --body-max (65536) */
    char *big = malloc(70000);
    memset(big, 'a', 69999);
    big[69999] = 0;
    j = post_to(port, "/v1/messages", KEY_HDR, body_new(big, 2), &st);
    check_error(st, j, 413, "request_too_large", "exceeds");
    free(big);
}

/* Fields taken with an effect beyond the basics, or accepted without one. */
static void test_accepted(int port)
{
    int st = 0;
    cJSON *j =
        post(port,
             cJSON_Parse("{\"max_tokens\":100,\"temperature\":0,\"output_config\":{\"effort\":\"low\","
                         "\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\","
                         "\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
                         "\"additionalProperties\":false}}},\"messages\":[{\"role\":\"user\",\"content\":"
                         "\"x\"}]}"),
             &st);
    cJSON *o = cJSON_Parse(text_of(j));
    CHECK(st == 200 && cJSON_IsNumber(cJSON_GetObjectItem(o, "a")) && cJSON_GetArraySize(o) == 1 &&
              eq(json_get_str(j, "stop_reason"), "end_turn"),
          "output_config.format: the text '%s' follows the schema", text_of(j));
    cJSON_Delete(o);
    cJSON_Delete(j);
    j = post(
        port,
        cJSON_Parse("{\"max_tokens\":4,\"service_tier\":\"auto\",\"context_management\":{\"edits\":[]},"
                    "\"tool_choice\":{\"type\":\"auto\"},\"thinking\":{\"type\":\"disabled\"},"
                    "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\","
                    "\"cache_control\":{\"type\":\"ephemeral\"}}]},{\"role\":\"assistant\",\"content\":["
                    "{\"type\":\"redacted_thinking\",\"data\":\"abc\"},{\"type\":\"thinking\",\"thinking\":"
                    "\"hm\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"hi\"}]},{\"role\":\"system\","
                    "\"content\":\"Be kind.\"},{\"role\":\"user\",\"content\":\"y\"}]}"),
        &st);
    CHECK(st == 200 && eq(json_get_str(j, "type"), "message"), "accepted fields and blocks: a message (%d)",
          st);
    cJSON_Delete(j);
}

/* budget_tokens over max_tokens: a 400, unless the anthropic-beta header names
 * interleaved thinking, where the budget is the whole turn's (Anthropic's
 * extended-thinking docs); Qwen Code sends budget 32000 with max_tokens 8000. */
static void test_interleaved_budget(int port)
{
    static const char body[] =
        "{\"max_tokens\":4,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":32000},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    int st = 0;
    cJSON *j = post(port, cJSON_Parse(body), &st);
    check_error(st, j, 400, "invalid_request_error", "must be less than max_tokens");
    static const char *const betas[] = {
        "interleaved-thinking-2025-05-14",
        "fine-grained-tool-streaming-2025-05-14, interleaved-thinking-2025-05-14 "
    };
    for (int i = 0; i < 2; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr, KEY_HDR "anthropic-beta: %s\r\n", betas[i]);
        j = post_to(port, "/v1/messages", hdr, cJSON_Parse(body), &st);
        const cJSON *u = cJSON_GetObjectItem(j, "usage");
        CHECK(st == 200 && eq(json_get_str(j, "type"), "message") && json_get_num(u, "output_tokens") <= 4,
              "interleaved thinking (%s): budget_tokens over max_tokens accepted (%d)", betas[i], st);
        cJSON_Delete(j);
    }
    j = post_to(port, "/v1/messages", KEY_HDR "anthropic-beta: interleaved-thinking-2025-05-140\r\n",
                cJSON_Parse(body), &st);
    check_error(st, j, 400, "invalid_request_error", "must be less than max_tokens");
}

static void test_thinking(int port)
{
    static const char th[] = "{\"type\":\"enabled\",\"budget_tokens\":1024}";
    cJSON *b = body_new("Tell me", 1030);
    cJSON_AddItemToObject(b, "thinking", cJSON_Parse(th));
    int st = 0;
    cJSON *j = post(port, b, &st);
    const cJSON *b0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "content"), 0);
    CHECK(st == 200 && eq(json_get_str(b0, "type"), "thinking") && json_get_str(b0, "thinking") &&
              strlen(json_get_str(b0, "thinking")) > 0 && eq(json_get_str(b0, "signature"), ""),
          "a thinking block with a signature first");
    b = body_new("Tell me", 1030);
    cJSON_AddItemToObject(b, "thinking", cJSON_Parse(th));
    streamed sm;
    CHECK(stream(port, b, &sm), "thinking streamed");
    const cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(sm.msg, "content"), 0);
    CHECK(eq(json_get_str(s0, "type"), "thinking") &&
              eq(json_get_str(s0, "thinking"), json_get_str(b0, "thinking")),
          "streamed thinking == plain thinking");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(sm.msg, "content")) ==
              cJSON_GetArraySize(cJSON_GetObjectItem(j, "content")),
          "as many blocks streamed as plain");
    cJSON_Delete(sm.msg);
    /* display "omitted" (pi sends display): the same blocks, the thinking one
     * without its text, plain and streamed (no thinking_delta) */
    static const char omitted[] = "{\"type\":\"enabled\",\"budget_tokens\":1024,\"display\":\"omitted\"}";
    b = body_new("Tell me", 1030);
    cJSON_AddItemToObject(b, "thinking", cJSON_Parse(omitted));
    cJSON *o = post(port, b, &st);
    const cJSON *oc = cJSON_GetObjectItem(o, "content"), *jc = cJSON_GetObjectItem(j, "content");
    CHECK(st == 200 && eq(json_get_str(cJSON_GetArrayItem(oc, 0), "type"), "thinking") &&
              eq(json_get_str(cJSON_GetArrayItem(oc, 0), "thinking"), "") &&
              cJSON_GetArraySize(oc) == cJSON_GetArraySize(jc),
          "display omitted: a thinking block without its text, as many blocks");
    for (int i = 1; i < cJSON_GetArraySize(jc); i++)
        CHECK(cJSON_Compare(cJSON_GetArrayItem(oc, i), cJSON_GetArrayItem(jc, i), true),
              "display omitted: block %d as without it", i);
    b = body_new("Tell me", 1030);
    cJSON_AddItemToObject(b, "thinking", cJSON_Parse(omitted));
    CHECK(stream(port, b, &sm), "omitted thinking streamed");
    const cJSON *sc = cJSON_GetObjectItem(sm.msg, "content");
    CHECK(eq(json_get_str(cJSON_GetArrayItem(sc, 0), "type"), "thinking") &&
              eq(json_get_str(cJSON_GetArrayItem(sc, 0), "thinking"), "") && cJSON_Compare(sc, oc, true),
          "streamed omitted thinking == plain");
    cJSON_Delete(sm.msg);
    cJSON_Delete(o);
    cJSON_Delete(j);
    bad_body(port,
             "{\"max_tokens\":2000,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024,\"display\":"
             "\"full\"},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             "thinking.display");
}

/* Unknown fields: answered, and named in the log line (the known ones, with
 * an effect or without, are not). */
static void test_unknown_logged(void)
{
    test_server s;
    CHECK(test_server_start_logged(&s, "--log-format json", "messages_log.err"), "logged server starts");
    int st = 0;
    cJSON *b = body_new("hi", 2);
    cJSON_AddNumberToObject(b, "frobnicate", 1);
    cJSON_AddItemToObject(b, "metadata", cJSON_Parse("{\"user_id\":\"u\"}"));
    cJSON_AddStringToObject(b, "service_tier", "auto");
    cJSON_AddStringToObject(b, "betas", "x");
    cJSON *j = post_to(s.port, "/v1/messages", NULL, b, &st);
    CHECK(st == 200 && eq(json_get_str(j, "type"), "message"), "an unknown field is accepted (%d)", st);
    cJSON_Delete(j);
    b = body_new("hi", 2);
    cJSON_AddTrueToObject(b, "frobnicate");
    j = post_to(s.port, "/v1/messages/count_tokens", NULL, b, &st);
    CHECK(st == 200 && json_get_num(j, "input_tokens") > 0, "count_tokens with an unknown field (%d)", st);
    cJSON_Delete(j);
    CHECK(test_server_stop(&s) == 0, "logged server stops cleanly");
    CHECK(test_log_one("messages_log.err", "/v1/messages", "unknown_fields", "frobnicate,betas"),
          "the /v1/messages line names frobnicate and betas");
    CHECK(test_log_one("messages_log.err", "/v1/messages/count_tokens", "unknown_fields", "frobnicate"),
          "the count_tokens line names frobnicate");
    /* the text form */
    CHECK(test_server_start_logged(&s, "", "messages_logt.err"), "text-logged server starts");
    b = body_new("hi", 2);
    cJSON_AddNumberToObject(b, "frobnicate", 1);
    j = post_to(s.port, "/v1/messages", NULL, b, &st);
    CHECK(st == 200, "an unknown field is accepted (%d)", st);
    cJSON_Delete(j);
    CHECK(test_server_stop(&s) == 0, "text-logged server stops cleanly");
    char *text = read_file(tmp_path("messages_logt.err"), NULL);
    const char *line = text ? strstr(text, " POST /v1/messages 200 ") : NULL;
    const char *nl = line ? strchr(line, '\n') : NULL;
    const char *u = line ? strstr(line, " unknown=frobnicate") : NULL;
    CHECK(u && (!nl || u < nl), "the text line names frobnicate: %.300s", line ? line : "(no line)");
    free(text);
}

int main(void)
{
    char extra[1024];
    snprintf(extra, sizeof extra, "-c 4096 --api-key sk-messages --body-max 65536 --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    test_server s;
    CHECK(test_server_start(&s, extra, "messages.err"), "server starts");
    test_plain_and_stream(s.port);
    test_cache(s.port);
    test_tools(s.port);
    test_errors(s.port);
    test_accepted(s.port);
    test_interleaved_budget(s.port);
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    snprintf(extra, sizeof extra, "-c 2048 --api-key sk-messages --chat-template-file '%s'",
             shared_path("templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"));
    CHECK(test_server_start(&s, extra, "messages_r1.err"), "R1 server starts");
    test_thinking(s.port);
    CHECK(test_server_stop(&s) == 0, "R1 server stops cleanly");
    test_unknown_logged();
    return test_main_end();
}
