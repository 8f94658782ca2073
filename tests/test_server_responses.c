/*
 * test_server_responses.c — OpenAI's Responses API (POST /v1/responses, GET
 * and DELETE /v1/responses/{id}) over real HTTP on 127.0.0.1 with stories260K
 * (`kvinfer serve`, a child process) and Qwen2.5's chat template (Hermes/Qwen
 * <tool_call> format) from ../shared/templates, plus DeepSeek-R1-Distill's
 * (its generation prompt opens "<think>") for reasoning items:
 *
 *  - plain: a string input answers one message item whose text is the chat
 *    route's answer for the same conversation (greedy), status "incomplete"
 *    with reason max_output_tokens at the cap, usage in the Responses shape;
 *  - streamed: every block's "event:" names its data's type, sequence numbers
 *    count from 0 by 1, created / in_progress first, the item events in order,
 *    the deltas joined are the whole answer's text and the last event carries
 *    the same response;
 *  - a function tool with tool_choice "required": a function_call item with
 *    JSON arguments that follow the schema; its result sent back with
 *    previous_response_id and a function_call_output gives the same prompt as
 *    the whole conversation sent at once (input_tokens equal), and its KV comes
 *    from the prefix cache (cached_tokens > 0);
 *  - the store: GET answers the stored response, DELETE removes it (then 404),
 *    store false keeps nothing, --responses-max 3 evicts the oldest, so does
 *    --responses-max-bytes (a response larger than it is not kept); an
 *    unknown previous_response_id is a 404 naming the param;
 *  - text.format json_schema: the text parses and follows the schema;
 *  - hosted tools (web_search, ...) are left out: the prompt is the one
 *    without them, and the request log line names each once (left_out, JSON
 *    and text); an unknown field is accepted and named in the line (unknown),
 *    the known ones are not; an image part is a 400 ("this model takes text
 *    only");
 *  - reasoning (R1): a reasoning item with reasoning_text content, streamed as
 *    response.reasoning_text.delta events joined to the same text;
 *  - reasoning.effort (gpt-oss's template): the prompt of the chat route with
 *    chat_template_kwargs.reasoning_effort (minimal as low).
 */
#include "testutil.h"

#include "http_util.h"

#include <stdlib.h>
#include <string.h>

static cJSON *call(int port, const char *method, const char *path, cJSON *body, int *status)
{
    char *s = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    http_resp r = http_request(port, method, path, NULL, s);
    free(s);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return j;
}

static cJSON *post(int port, cJSON *body, int *status)
{
    return call(port, "POST", "/v1/responses", body, status);
}

static bool str_eq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* A body: input, greedy, max_output_tokens n. */
static cJSON *body_new(const char *input, int n)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "input", input);
    cJSON_AddNumberToObject(b, "max_output_tokens", n);
    cJSON_AddNumberToObject(b, "temperature", 0);
    return b;
}

/* The text of the first output item of type message. */
static const char *message_text(const cJSON *resp)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(resp, "output"))
    {
        if (str_eq(json_get_str(it, "type"), "message"))
            return json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(it, "content"), 0), "text");
    }
    return NULL;
}

static const cJSON *item_of_type(const cJSON *resp, const char *type)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(resp, "output"))
    {
        if (str_eq(json_get_str(it, "type"), type)) return it;
    }
    return NULL;
}

static void check_error(const cJSON *j, int st, int want_status, const char *want_msg, const char *want_param)
{
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    const char *msg = json_get_str(e, "message");
    CHECK(st == want_status, "status %d, want %d (%s)", st, want_status, msg ? msg : "");
    CHECK(msg && strstr(msg, want_msg), "message '%s' lacks '%s'", msg ? msg : "", want_msg);
    if (want_param) CHECK(str_eq(json_get_str(e, "param"), want_param), "param of '%s'", msg ? msg : "");
    CHECK(str_eq(json_get_str(e, "type"), "invalid_request_error"), "error type");
}

/* ---- streams ---- */

typedef struct joined {
    char text[8192], reasoning[8192];
    cJSON *last; /* the final event's response */
    int n_events;
    bool ok; /* types, numbering and order held */
} joined;

static void cat(char *dst, size_t cap, const char *s)
{
    const size_t n = strlen(dst);
    snprintf(dst + n, cap - n, "%s", s ? s : "");
}

/* Posts body with stream true and checks the event sequence. */
static void stream_join(int port, cJSON *b, joined *jn)
{
    memset(jn, 0, sizeof *jn);
    cJSON_AddTrueToObject(b, "stream");
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    http_resp r = http_request(port, "POST", "/v1/responses", NULL, s);
    free(s);
    jn->ok = r.status == 200 && r.body;
    CHECK(r.status == 200, "stream status %d", r.status);
    const char *p = r.body ? r.body : "";
    int open_items = 0;
    char last_type[64] = "";
    while (jn->ok && (p = strstr(p, "event: "))) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? strstr(nl, "\n\n") : NULL;
        if (!nl || !end || strncmp(nl + 1, "data: ", 6) != 0) {
            jn->ok = false;
            break;
        }
        char type[64];
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        cJSON *ev = cJSON_ParseWithLength(nl + 7, (size_t)(end - nl - 7));
        const char *dt = json_get_str(ev, "type");
        if (!str_eq(dt, type) || json_get_num(ev, "sequence_number") != jn->n_events) {
            CHECK(false, "event %d: '%s' / data type '%s', sequence_number %g", jn->n_events, type,
                  dt ? dt : "", json_get_num(ev, "sequence_number"));
            jn->ok = false;
        }
        if ((jn->n_events == 0 && strcmp(type, "response.created") != 0) ||
            (jn->n_events == 1 && strcmp(type, "response.in_progress") != 0)) {
            CHECK(false, "event %d is %s", jn->n_events, type);
            jn->ok = false;
        }
        if (!strcmp(type, "response.output_item.added")) open_items++;
        if (!strcmp(type, "response.output_item.done")) open_items--;
        if (open_items < 0 || open_items > 1) jn->ok = false;
        if (!strcmp(type, "response.output_text.delta"))
            cat(jn->text, sizeof jn->text, json_get_str(ev, "delta"));
        if (!strcmp(type, "response.reasoning_text.delta"))
            cat(jn->reasoning, sizeof jn->reasoning, json_get_str(ev, "delta"));
        if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete") ||
            !strcmp(type, "response.failed")) {
            cJSON_Delete(jn->last);
            jn->last = cJSON_DetachItemFromObject(ev, "response");
        }
        snprintf(last_type, sizeof last_type, "%s", type);
        cJSON_Delete(ev);
        jn->n_events++;
        p = end;
    }
    CHECK(open_items == 0, "every item added is done");
    CHECK(jn->last && (!strcmp(last_type, "response.completed") || !strcmp(last_type, "response.incomplete")),
          "the last event is the end (%s)", last_type);
    free(r.body);
}

/* ---- tests ---- */

static void test_plain(int port)
{
    int st = 0;
    cJSON *j = post(port, body_new("Once upon a time", 24), &st);
    CHECK(st == 200, "plain status %d", st);
    CHECK(str_eq(json_get_str(j, "object"), "response"), "object");
    CHECK(json_get_str(j, "id") && !strncmp(json_get_str(j, "id"), "resp_", 5), "id resp_...");
    CHECK(str_eq(json_get_str(j, "status"), "incomplete"), "status at the cap");
    CHECK(str_eq(json_get_str(cJSON_GetObjectItem(j, "incomplete_details"), "reason"), "max_output_tokens"),
          "incomplete_details.reason");
    CHECK(json_get_num(j, "max_output_tokens") == 24 && json_get_num(j, "temperature") == 0, "echoed fields");
    const cJSON *msg = item_of_type(j, "message");
    CHECK(msg && str_eq(json_get_str(msg, "role"), "assistant") && json_get_str(msg, "id") &&
              !strncmp(json_get_str(msg, "id"), "msg_", 4),
          "a message item");
    const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "content"), 0);
    CHECK(str_eq(json_get_str(part, "type"), "output_text") &&
              cJSON_IsArray(cJSON_GetObjectItem(part, "annotations")),
          "output_text part with annotations");
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    CHECK(json_get_num(u, "output_tokens") == 24, "usage.output_tokens %g", json_get_num(u, "output_tokens"));
    CHECK(json_get_num(u, "total_tokens") == json_get_num(u, "input_tokens") + 24, "usage.total_tokens");
    CHECK(json_get_num(cJSON_GetObjectItem(u, "input_tokens_details"), "cached_tokens") >= 0 &&
              json_get_num(cJSON_GetObjectItem(u, "output_tokens_details"), "reasoning_tokens") == 0,
          "usage details");
    /* the chat route's answer for the same conversation */
    cJSON *c = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
                           "\"max_tokens\":24,\"temperature\":0}");
    cJSON *cj = call(port, "POST", "/v1/chat/completions", c, &st);
    const cJSON *cm =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cj, "choices"), 0), "message");
    CHECK(str_eq(message_text(j), json_get_str(cm, "content")), "text '%s' = chat's '%s'", message_text(j),
          json_get_str(cm, "content") ? json_get_str(cm, "content") : "");
    CHECK(json_get_num(u, "input_tokens") == json_get_num(cJSON_GetObjectItem(cj, "usage"), "prompt_tokens"),
          "input_tokens = the chat prompt's");
    /* streamed: the same answer */
    joined jn;
    stream_join(port, body_new("Once upon a time", 24), &jn);
    CHECK(jn.ok && jn.n_events >= 10, "stream events well formed (%d)", jn.n_events);
    CHECK(str_eq(jn.text, message_text(j)), "deltas '%s' = '%s'", jn.text, message_text(j));
    CHECK(str_eq(message_text(jn.last), message_text(j)), "final event's text");
    CHECK(str_eq(json_get_str(jn.last, "status"), "incomplete"), "final event's status");
    /* instructions: a system message first, as the chat route's */
    cJSON *b = body_new("Once upon a time", 4);
    cJSON_AddStringToObject(b, "instructions", "Tell a story about a cat.");
    cJSON *ji = post(port, b, &st);
    c = cJSON_Parse(
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Tell a story about a cat.\"},"
        "{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":4,\"temperature\":0}");
    cJSON *cs = call(port, "POST", "/v1/chat/completions", c, &st);
    CHECK(st == 200 && json_get_num(cJSON_GetObjectItem(ji, "usage"), "input_tokens") ==
                           json_get_num(cJSON_GetObjectItem(cs, "usage"), "prompt_tokens"),
          "instructions: the prompt of a system message first");
    cJSON_Delete(cs);
    CHECK(str_eq(json_get_str(ji, "instructions"), "Tell a story about a cat."), "instructions echoed");
    cJSON_Delete(ji);
    cJSON_Delete(jn.last);
    cJSON_Delete(cj);
    cJSON_Delete(j);
}

static const char *tool_json =
    "[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather of a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":10}},"
    "\"required\":[\"city\"],\"additionalProperties\":false},\"strict\":true}]";

static void test_tools(int port)
{
    cJSON *b = body_new("What is the weather in Paris?", 200);
    cJSON_AddItemToObject(b, "tools", cJSON_Parse(tool_json));
    cJSON_AddStringToObject(b, "tool_choice", "required");
    cJSON_AddFalseToObject(b, "parallel_tool_calls");
    int st = 0;
    cJSON *j = post(port, b, &st);
    CHECK(st == 200, "tool status %d", st);
    const cJSON *fc = item_of_type(j, "function_call");
    CHECK(fc && str_eq(json_get_str(fc, "name"), "get_weather") &&
              str_eq(json_get_str(fc, "status"), "completed"),
          "a function_call item");
    CHECK(fc && json_get_str(fc, "id") && !strncmp(json_get_str(fc, "id"), "fc_", 3), "its id fc_...");
    CHECK(fc && json_get_str(fc, "call_id") && !strncmp(json_get_str(fc, "call_id"), "call_", 5),
          "its call_id call_...");
    cJSON *args = fc ? cJSON_Parse(json_get_str(fc, "arguments")) : NULL;
    const char *city = json_get_str(args, "city");
    CHECK(city && strlen(city) <= 10 && cJSON_GetArraySize(args) == 1, "arguments follow the schema: %s",
          fc ? json_get_str(fc, "arguments") : "");
    cJSON_Delete(args);
    CHECK(str_eq(json_get_str(j, "tool_choice"), "required") &&
              cJSON_GetArraySize(cJSON_GetObjectItem(j, "tools")) == 1,
          "tools echoed");
    const char *id = json_get_str(j, "id");
    /* the result, sent back as a follow-up turn */
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "previous_response_id", id);
    cJSON *in = cJSON_AddArrayToObject(f, "input");
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "type", "function_call_output");
    cJSON_AddStringToObject(out, "call_id", fc ? json_get_str(fc, "call_id") : "x");
    cJSON_AddStringToObject(out, "output", "sunny, 21 C");
    cJSON_AddItemToArray(in, out);
    cJSON_AddItemToObject(f, "tools", cJSON_Parse(tool_json));
    cJSON_AddNumberToObject(f, "max_output_tokens", 8);
    cJSON_AddNumberToObject(f, "temperature", 0);
    cJSON *full = cJSON_Duplicate(f, true); /* the whole conversation at once */
    cJSON *k = post(port, f, &st);
    CHECK(st == 200, "follow-up status %d", st);
    const cJSON *u = cJSON_GetObjectItem(k, "usage");
    const double n_in = json_get_num(u, "input_tokens");
    CHECK(str_eq(json_get_str(k, "previous_response_id"), id), "previous_response_id echoed");
    CHECK(n_in > json_get_num(cJSON_GetObjectItem(j, "usage"), "input_tokens"),
          "the follow-up's prompt is longer");
    CHECK(json_get_num(cJSON_GetObjectItem(u, "input_tokens_details"), "cached_tokens") > 0,
          "cached_tokens %g > 0 (prefix cache)",
          json_get_num(cJSON_GetObjectItem(u, "input_tokens_details"), "cached_tokens"));
    cJSON_DeleteItemFromObject(full, "previous_response_id");
    cJSON *fin = cJSON_CreateArray();
    cJSON *um = cJSON_CreateObject();
    cJSON_AddStringToObject(um, "role", "user");
    cJSON_AddStringToObject(um, "content", "What is the weather in Paris?");
    cJSON_AddItemToArray(fin, um);
    cJSON_AddItemToArray(fin, cJSON_Duplicate(fc, true));
    cJSON_AddItemToArray(fin,
                         cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItem(full, "input"), 0), true));
    cJSON_ReplaceItemInObject(full, "input", fin);
    cJSON *w = post(port, full, &st);
    CHECK(st == 200 && json_get_num(cJSON_GetObjectItem(w, "usage"), "input_tokens") == n_in,
          "the stored chain's prompt = the whole conversation's (%g, %g)",
          json_get_num(cJSON_GetObjectItem(w, "usage"), "input_tokens"), n_in);
    CHECK(str_eq(message_text(w), message_text(k)), "and the same answer");
    cJSON_Delete(w);
    /* named function, streamed: the call's events */
    b = body_new("Weather?", 200);
    cJSON_AddItemToObject(b, "tools", cJSON_Parse(tool_json));
    cJSON_AddItemToObject(b, "tool_choice", cJSON_Parse("{\"type\":\"function\",\"name\":\"get_weather\"}"));
    joined jn;
    stream_join(port, b, &jn);
    const cJSON *sfc = item_of_type(jn.last, "function_call");
    CHECK(jn.ok && sfc && str_eq(json_get_str(sfc, "name"), "get_weather"), "streamed named call");
    cJSON_Delete(jn.last);
    cJSON_Delete(k);
    cJSON_Delete(j);
}

static void test_store(int port)
{
    int st = 0;
    cJSON *j = post(port, body_new("Lily", 3), &st);
    const char *id = json_get_str(j, "id");
    char path[128];
    snprintf(path, sizeof path, "/v1/responses/%s", id ? id : "x");
    cJSON *g = call(port, "GET", path, NULL, &st);
    CHECK(st == 200 && cJSON_Compare(g, j, true), "GET answers the stored response");
    cJSON_Delete(g);
    cJSON *d = call(port, "DELETE", path, NULL, &st);
    CHECK(st == 200 && str_eq(json_get_str(d, "object"), "response.deleted") &&
              cJSON_IsTrue(cJSON_GetObjectItem(d, "deleted")),
          "DELETE");
    cJSON_Delete(d);
    g = call(port, "GET", path, NULL, &st);
    CHECK(st == 404, "GET after DELETE: %d", st);
    cJSON_Delete(g);
    d = call(port, "DELETE", path, NULL, &st);
    CHECK(st == 404, "DELETE twice: %d", st);
    cJSON_Delete(d);
    cJSON_Delete(j);
    /* store false */
    cJSON *b = body_new("Lily", 2);
    cJSON_AddFalseToObject(b, "store");
    j = post(port, b, &st);
    CHECK(st == 200 && cJSON_IsFalse(cJSON_GetObjectItem(j, "store")), "store false echoed");
    snprintf(path, sizeof path, "/v1/responses/%s", json_get_str(j, "id") ? json_get_str(j, "id") : "x");
    g = call(port, "GET", path, NULL, &st);
    CHECK(st == 404, "store false keeps nothing: %d", st);
    cJSON_Delete(g);
    cJSON_Delete(j);
    /* --responses-max 3: four kept, the oldest gone */
    char ids[4][64];
    for (int i = 0; i < 4; i++) {
        j = post(port, body_new("Tom", 1), &st);
        snprintf(ids[i], sizeof ids[i], "%s", json_get_str(j, "id") ? json_get_str(j, "id") : "");
        cJSON_Delete(j);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "/v1/responses/%s", ids[i]);
        g = call(port, "GET", path, NULL, &st);
        CHECK(st == (i == 0 ? 404 : 200), "response %d of 4 with --responses-max 3: %d", i, st);
        cJSON_Delete(g);
    }
    b = body_new("x", 2);
    cJSON_AddStringToObject(b, "previous_response_id", ids[0]);
    j = post(port, b, &st);
    check_error(j, st, 404, "not found", "previous_response_id");
    cJSON_Delete(j);
    b = body_new("x", 2);
    cJSON_AddStringToObject(b, "previous_response_id", "resp_unknown");
    j = post(port, b, &st);
    check_error(j, st, 404, "resp_unknown", "previous_response_id");
    cJSON_Delete(j);
}

static void test_schema(int port)
{
    cJSON *b = body_new("Give me a person.", 200);
    cJSON_AddItemToObject(
        b, "text",
        cJSON_Parse("{\"format\":{\"type\":\"json_schema\",\"name\":\"person\",\"strict\":true,\"schema\":{"
                    "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
                    "\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"],"
                    "\"additionalProperties\":false}}}"));
    int st = 0;
    cJSON *j = post(port, b, &st);
    CHECK(st == 200 && str_eq(json_get_str(j, "status"), "completed"), "json_schema status %d", st);
    cJSON *v = message_text(j) ? cJSON_Parse(message_text(j)) : NULL;
    const cJSON *name = cJSON_GetObjectItem(v, "name"), *age = cJSON_GetObjectItem(v, "age");
    CHECK(cJSON_IsObject(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(name) &&
              strlen(name->valuestring) <= 8 && cJSON_IsNumber(age) &&
              age->valuedouble == (double)(long)age->valuedouble,
          "the text follows the schema: %s", message_text(j) ? message_text(j) : "");
    CHECK(str_eq(json_get_str(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "text"), "format"), "type"),
                 "json_schema"),
          "text.format echoed");
    cJSON_Delete(v);
    cJSON_Delete(j);
}

static void test_refusals(int port)
{
    /* hosted tools: left out, the prompt is the one without them */
    cJSON *b = body_new("Hi", 1);
    cJSON_AddItemToObject(b, "tools", cJSON_Parse(tool_json));
    int st = 0;
    cJSON *a = post(port, b, &st);
    b = body_new("Hi", 1);
    cJSON *tools = cJSON_Parse(tool_json);
    cJSON_AddItemToArray(tools, cJSON_Parse("{\"type\":\"web_search\"}"));
    cJSON_AddItemToArray(tools, cJSON_Parse("{\"type\":\"file_search\",\"vector_store_ids\":[\"vs_1\"]}"));
    cJSON_AddItemToArray(tools, cJSON_Parse("{\"type\":\"local_shell\"}"));
    cJSON_AddItemToObject(b, "tools", tools);
    cJSON *h = post(port, b, &st);
    CHECK(st == 200, "hosted tools accepted: %d", st);
    CHECK(json_get_num(cJSON_GetObjectItem(h, "usage"), "input_tokens") ==
              json_get_num(cJSON_GetObjectItem(a, "usage"), "input_tokens"),
          "hosted tools are not in the prompt");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(h, "tools")) == 4, "tools echoed as sent");
    cJSON_Delete(a);
    cJSON_Delete(h);
    /* text only */
    b = cJSON_Parse(
        "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"What is "
        "this?\"},{\"type\":\"input_image\",\"image_url\":\"https://example.invalid/a.png\"}]}]}");
    cJSON *j = post(port, b, &st);
    check_error(j, st, 400, "this model takes text only", "input[0].content[1]");
    cJSON_Delete(j);
    b = body_new("x", 1);
    cJSON_AddItemToObject(b, "tools", cJSON_Parse("[{\"type\":\"magic\"}]"));
    j = post(port, b, &st);
    check_error(j, st, 400, "magic", "tools[0].type");
    cJSON_Delete(j);
    b = body_new("x", 1);
    cJSON_ReplaceItemInObject(b, "max_output_tokens", cJSON_CreateNumber(0));
    j = post(port, b, &st);
    check_error(j, st, 400, "max_output_tokens", "max_output_tokens");
    cJSON_Delete(j);
    b = cJSON_Parse("{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}");
    j = post(port, b, &st);
    check_error(j, st, 400, "item_reference", "input[0].type");
    cJSON_Delete(j);
    /* accepted without effect */
    b = cJSON_Parse("{\"input\":\"x\",\"max_output_tokens\":1,\"metadata\":{\"k\":\"v\"},\"user\":\"u\","
                    "\"safety_identifier\":\"s\",\"service_tier\":\"auto\",\"truncation\":\"auto\","
                    "\"prompt_cache_key\":\"p\",\"include\":[\"reasoning.encrypted_content\"],"
                    "\"client_metadata\":{\"a\":\"b\"},\"text\":{\"verbosity\":\"low\"},"
                    "\"reasoning\":{\"effort\":\"minimal\",\"summary\":\"auto\"},\"seed\":7,\"top_p\":0.5}");
    j = post(port, b, &st);
    CHECK(st == 200, "accepted fields: %d", st);
    CHECK(str_eq(json_get_str(cJSON_GetObjectItem(j, "metadata"), "k"), "v") &&
              json_get_num(j, "top_p") == 0.5 &&
              str_eq(json_get_str(cJSON_GetObjectItem(j, "reasoning"), "effort"), "minimal"),
          "metadata, top_p, reasoning echoed");
    cJSON_Delete(j);
}

static void test_reasoning(int port)
{
    int st = 0;
    cJSON *j = post(port, body_new("Tell me", 30), &st);
    const cJSON *rs = item_of_type(j, "reasoning");
    const char *text = json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(rs, "content"), 0), "text");
    CHECK(st == 200 && rs && text && strlen(text) > 0 && !strstr(text, "<think>"), "a reasoning item");
    CHECK(json_get_str(rs, "id") && !strncmp(json_get_str(rs, "id"), "rs_", 3), "its id rs_...");
    const cJSON *otd = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "output_tokens_details");
    CHECK(json_get_num(otd, "reasoning_tokens") > 0 && json_get_num(otd, "reasoning_tokens") <= 30,
          "reasoning_tokens %g", json_get_num(otd, "reasoning_tokens"));
    joined jn;
    stream_join(port, body_new("Tell me", 30), &jn);
    CHECK(jn.ok && str_eq(jn.reasoning, text), "streamed reasoning '%s' = '%s'", jn.reasoning,
          text ? text : "");
    const cJSON *lrs = item_of_type(jn.last, "reasoning");
    CHECK(str_eq(json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(lrs, "content"), 0), "text"), text),
          "the final event's reasoning item");
    cJSON *b = body_new("Tell me", 4);
    cJSON_AddItemToObject(b, "reasoning", cJSON_Parse("{\"summary\":\"auto\"}"));
    cJSON *s = post(port, b, &st);
    const cJSON *sum = cJSON_GetObjectItem(item_of_type(s, "reasoning"), "summary");
    CHECK(str_eq(json_get_str(cJSON_GetArrayItem(sum, 0), "type"), "summary_text"),
          "reasoning.summary: summary_text");
    cJSON_Delete(s);
    cJSON_Delete(jn.last);
    cJSON_Delete(j);
}

/* --responses-max-bytes 6KiB: the oldest evicted to make room, and a response
 * larger than the bound alone is not kept. */
static void test_store_bytes(int port)
{
    char ids[8][64];
    int st = 0;
    for (int i = 0; i < 8; i++) {
        cJSON *j = post(port, body_new("Tom", 1), &st);
        snprintf(ids[i], sizeof ids[i], "%s", json_get_str(j, "id") ? json_get_str(j, "id") : "");
        cJSON_Delete(j);
    }
    char path[640];
    int kept = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "/v1/responses/%s", ids[i]);
        cJSON *g = call(port, "GET", path, NULL, &st);
        kept += st == 200;
        if (i == 0) CHECK(st == 404, "the oldest is evicted by bytes: %d", st);
        if (i == 7) CHECK(st == 200, "the youngest is kept: %d", st);
        cJSON_Delete(g);
    }
    CHECK(kept >= 2 && kept < 8, "%d of 8 kept in 6 KiB", kept);
    char big[7000]; /* "the cat " repeated: more than 6 KiB in the stored input items */
    big[0] = 0;
    while (strlen(big) + 9 < sizeof big) strcat(big, "the cat ");
    cJSON *b = body_new(big, 1);
    cJSON_AddStringToObject(b, "instructions", "x");
    cJSON *j = post(port, b, &st);
    CHECK(st == 200, "a large request: %d", st);
    snprintf(path, sizeof path, "/v1/responses/%s", json_get_str(j, "id") ? json_get_str(j, "id") : "x");
    cJSON *g = call(port, "GET", path, NULL, &st);
    CHECK(st == 404, "a response larger than --responses-max-bytes is not kept: %d", st);
    snprintf(path, sizeof path, "/v1/responses/%s", ids[7]);
    cJSON_Delete(g);
    g = call(port, "GET", path, NULL, &st);
    CHECK(st == 200, "and evicts nothing: %d", st);
    cJSON_Delete(g);
    cJSON_Delete(j);
}

/* reasoning.effort onto gpt-oss's reasoning_effort: the prompt of the chat
 * route with that template variable (minimal: low). */
static void test_effort(int port)
{
    const char *efforts[][2] = { { "high", "high" }, { "minimal", "low" }, { "medium", "medium" } };
    for (int k = 0; k < 3; k++) {
        cJSON *b = body_new("Hi", 1);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(b, "reasoning"), "effort", efforts[k][0]);
        int st = 0;
        cJSON *j = post(port, b, &st);
        char chat[256];
        snprintf(chat, sizeof chat,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1,"
                 "\"chat_template_kwargs\":{\"reasoning_effort\":\"%s\"}}",
                 efforts[k][1]);
        cJSON *c = call(port, "POST", "/v1/chat/completions", cJSON_Parse(chat), &st);
        CHECK(json_get_num(cJSON_GetObjectItem(j, "usage"), "input_tokens") ==
                      json_get_num(cJSON_GetObjectItem(c, "usage"), "prompt_tokens") &&
                  json_get_num(cJSON_GetObjectItem(j, "usage"), "input_tokens") > 0,
              "effort %s: the prompt with reasoning_effort %s", efforts[k][0], efforts[k][1]);
        cJSON_Delete(c);
        cJSON_Delete(j);
    }
}

/* The Qwen2.5 server's tests (one server: the store is shared). */
static void qwen_tests(int port)
{
    test_plain(port);
    test_tools(port);
    test_schema(port);
    test_refusals(port);
    test_store(port);
}

/* Runs fn against a server started with flags and, when template is not
 * NULL, --chat-template-file ../shared/templates/<template>. */
static void with_server(const char *flags, const char *template, const char *err_name, void (*fn)(int))
{
    char extra[1024];
    snprintf(extra, sizeof extra, "%s", flags);
    if (template) snprintf(extra, sizeof extra, "%s --chat-template-file '%s'", flags, shared_path(template));
    test_server s;
    if (!test_server_start(&s, extra, err_name)) {
        CHECK(false, "the server (%s) did not start", extra);
        return;
    }
    fn(s.port);
    CHECK(test_server_stop(&s) == 0, "server exit status (%s)", extra);
}

/* A body with two unknown fields, known fields without effect and hosted
 * tools (one twice): answered; the log line names the unknown ones and the
 * hosted tools left out. */
static void logged_request(int port)
{
    cJSON *b = body_new("Hi", 1);
    cJSON_AddNumberToObject(b, "frequency_penalty", 1);
    cJSON_AddStringToObject(b, "user", "u");
    cJSON_AddStringToObject(b, "truncation", "auto");
    cJSON_AddTrueToObject(b, "frobnicate");
    cJSON_AddItemToObject(b, "tools",
                          cJSON_Parse("[{\"type\":\"web_search\"},{\"type\":\"local_shell\"},"
                                      "{\"type\":\"web_search\"}]"));
    int st = 0;
    cJSON *j = post(port, b, &st);
    CHECK(st == 200 && str_eq(json_get_str(j, "object"), "response"), "unknown fields accepted: %d", st);
    cJSON_Delete(j);
}

static void test_logged(void)
{
    char extra[1024];
    snprintf(extra, sizeof extra, "--log-format json --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    test_server s;
    CHECK(test_server_start_logged(&s, extra, "server_responses_log.err"), "logged server starts");
    logged_request(s.port);
    CHECK(test_server_stop(&s) == 0, "logged server exit status");
    int n = 0;
    cJSON *a = test_log_lines("server_responses_log.err", "/v1/responses", &n);
    const cJSON *l = cJSON_GetArrayItem(a, 0);
    CHECK(n == 1 && test_log_names(l, "unknown_fields", "frequency_penalty,frobnicate"),
          "the line names the unknown fields (%d lines)", n);
    CHECK(test_log_names(l, "left_out", "web_search,local_shell"),
          "the line names the hosted tools once each");
    cJSON_Delete(a);
    /* the text form */
    snprintf(extra, sizeof extra, "--chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    CHECK(test_server_start_logged(&s, extra, "server_responses_logt.err"), "text-logged server starts");
    logged_request(s.port);
    CHECK(test_server_stop(&s) == 0, "text-logged server exit status");
    char *text = read_file(tmp_path("server_responses_logt.err"), NULL);
    const char *line = text ? strstr(text, " POST /v1/responses 200 ") : NULL;
    const char *nl = line ? strchr(line, '\n') : NULL;
    const char *u =
        line ? strstr(line, " unknown=frequency_penalty,frobnicate left_out=web_search,local_shell") : NULL;
    CHECK(u && (!nl || u < nl), "the text line: %.300s", line ? line : "(no line)");
    CHECK(text && !strstr(text, "hosted tools left out"), "nothing else printed about the hosted tools");
    free(text);
}

int main(void)
{
    with_server("-c 4096 --responses-max 3", "templates/Qwen-Qwen2.5-7B-Instruct.jinja",
                "server_responses_qwen.err", qwen_tests);
    with_server("-c 2048", "templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
                "server_responses_r1.err", test_reasoning);
    with_server("-c 4096 --responses-max-bytes 6KiB", NULL, "server_responses_bytes.err", test_store_bytes);
    with_server("-c 2048", "templates/openai-gpt-oss-120b.jinja", "server_responses_gptoss.err", test_effort);
    test_logged();
    return test_main_end();
}
