/*
 * server_responses.c — OpenAI's Responses API: POST /v1/responses, GET and
 * DELETE /v1/responses/{id}.
 *
 * Request: the body is checked field by field (an unknown field is accepted
 * and named in the request log line, as on the chat route) and translated
 * into a chat-completions body that srv_parse_request(chat = true) turns into
 * the shared request model: "instructions" becomes a first system message;
 * the conversation of "previous_response_id" (its chain's stored items,
 * server_store.c) comes next, then "input" (a string: one user message;
 * items: messages with input_text / output_text parts, function_call,
 * function_call_output and reasoning items); function tools (flat here)
 * become chat tools, namespace tools are flattened into theirs, and hosted
 * tools the server cannot run are left out (named once each in the request
 * log line's left_out); "text.format" becomes "response_format",
 * "max_output_tokens" "max_tokens", "reasoning.effort" the template's
 * enable_thinking / reasoning_effort where it reads them.
 *
 * Output: the parsed choice (server_tools.c: reasoning, content and tool
 * calls, in the order the model wrote them) becomes output items: a
 * "reasoning" item per run of reasoning text, a "message" item per run of
 * content, a "function_call" item per call. Streamed and whole answers go
 * through the same item machine (resp_state), so the streamed items joined are
 * the whole answer's. Streams are OpenAI's typed events ("event: <type>" and
 * "data: {...}" lines), numbered by sequence_number from 0 without gaps:
 * response.created, response.in_progress, then per item output_item.added,
 * content_part.added, the text's deltas, its .done, content_part.done,
 * output_item.done (function calls: arguments delta and done), and last
 * response.completed, response.incomplete (max_output_tokens) or
 * response.failed.
 *
 * Invariants of resp_state: output holds the closed items, in order; at most
 * one item is open (open != OPEN_NONE), its text open_text[0, open_len), its
 * index the size of output; seq is the next sequence number. The request's
 * response object is stored (when "store") exactly once, when it ends
 * without error.
 */
#include "server/server.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPEN_NONE, OPEN_REASONING, OPEN_MESSAGE };

typedef struct resp_state {
    cJSON *base;   /* the response object's echoed fields */
    cJSON *input;  /* this turn's input items (stored with the output) */
    cJSON *output; /* closed output items */
    char prev[48]; /* previous_response_id ("" none) */
    bool store, summary, streaming;
    int seq;
    int open;
    char *open_text;
    size_t open_len, open_cap;
    char open_id[64];
} resp_state;

static void state_free(void *p)
{
    resp_state *st = p;
    if (!st) return;
    cJSON_Delete(st->base);
    cJSON_Delete(st->input);
    cJSON_Delete(st->output);
    free(st->open_text);
    free(st);
}

/* ---- errors ---- */

/* er->param = param (cut to fit). */
static void set_param(srv_err *er, const char *param)
{
    size_t n = strlen(param);
    if (n >= sizeof er->param) n = sizeof er->param - 1;
    memcpy(er->param, param, n);
    er->param[n] = 0;
}

static int fail(srv_err *er, const char *param, const char *fmt, const char *a, const char *b)
{
    srv_err_set(er, 400, "invalid_request_error", "invalid_value", fmt, a, b);
    set_param(er, param);
    return -1;
}

static int fail_type(srv_err *er, const char *param, const char *what)
{
    srv_err_set(er, 400, "invalid_request_error", "invalid_type", "Invalid type for '%s': expected %s.",
                param, what);
    set_param(er, param);
    return -1;
}

static int oom(srv_err *er) { return srv_err_set(er, 500, "server_error", NULL, "out of memory"); }

/* ---- the chat body ---- */

/* Fields of the request (the request log names any other: srv_log_unknown). */
static const char *const known_fields[] = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "max_output_tokens",
    "temperature",
    "top_p",
    "store",
    "previous_response_id",
    "include",
    "stream",
    "stream_options",
    "seed",
    "metadata",
    "user",
    "safety_identifier",
    "service_tier",
    "truncation",
    "prompt_cache_key",
    "client_metadata",
    "background",
    "top_logprobs",
    "max_tool_calls",
    "conversation",
    "prompt",
    "prompt_cache_retention",
};

/* Hosted tools: run by OpenAI, not by the model's client; left out here. */
static const char *const hosted_tools[] = {
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "web_search_2025_08_26",
    "file_search",
    "local_shell",
    "shell",
    "custom",
    "code_interpreter",
    "image_generation",
    "mcp",
    "computer_use_preview",
    "computer_use",
    "apply_patch",
    "tool_search",
};

static bool in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i])) return true;
    return false;
}

static const cJSON *field(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool str_is(const cJSON *v, const char *s) { return cJSON_IsString(v) && !strcmp(v->valuestring, s); }

/* A one-of string field (absent: fine). */
static int enum_field(const cJSON *o, const char *k, const char *param, const char *const *vals, size_t n,
                      srv_err *er)
{
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsString(v) || !in_list(v->valuestring, vals, n))
        return fail(er, param, "Invalid value for '%s': '%.64s' is not supported.", param,
                    cJSON_IsString(v) ? v->valuestring : "?");
    return 0;
}

static int string_field(const cJSON *o, const char *k, srv_err *er)
{
    const cJSON *v = field(o, k);
    return v && !cJSON_IsString(v) ? fail_type(er, k, "a string") : 0;
}

/* The text of a content part list or string (input_text / output_text / text /
 * refusal parts joined); images, files and audio are refused. Malloc'd, or NULL
 * with *er set (param names the item). */
static char *content_text(const cJSON *c, const char *param, srv_err *er)
{
    if (cJSON_IsString(c)) {
        char *s = strdup(c->valuestring);
        if (!s) oom(er);
        return s;
    }
    if (!cJSON_IsArray(c)) {
        fail_type(er, param, "a string or an array of content parts");
        return NULL;
    }
    size_t len = 0;
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
        char where[96];
        snprintf(where, sizeof where, "%s[%d]", param, j++);
        if (str_is(t, "input_image") || str_is(t, "input_file") || str_is(t, "input_audio") ||
            str_is(t, "image_url")) {
            srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                        "'%s': this model takes text only (a '%s' part cannot be read)", where,
                        t->valuestring);
            set_param(er, where);
            return NULL;
        }
        const char *k = str_is(t, "refusal") ? "refusal" : "text";
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(part, k);
        if (!(str_is(t, "input_text") || str_is(t, "output_text") || str_is(t, "text") ||
              str_is(t, "refusal")) ||
            !cJSON_IsString(x)) {
            fail(er, where, "'%s' must be an input_text, output_text or refusal part with its text%s", where,
                 "");
            return NULL;
        }
        len += strlen(x->valuestring);
    }
    char *s = malloc(len + 1);
    if (!s) {
        oom(er);
        return NULL;
    }
    s[0] = 0;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
        strcat(
            s,
            cJSON_GetObjectItemCaseSensitive(part, str_is(t, "refusal") ? "refusal" : "text")->valuestring);
    }
    return s;
}

/* Building the chat messages from items: the pending reasoning text waits for
 * the assistant message it belongs to. */
typedef struct conv {
    srv_server *srv;
    cJSON *msgs;
    char *reasoning; /* malloc'd, or NULL */
} conv;

/* The assistant message the next call or text goes to: the last message when
 * it is an assistant's (a turn's text, then its calls), else a new one. */
static cJSON *assistant_msg(conv *cv, bool for_call)
{
    cJSON *last = cJSON_GetArrayItem(cv->msgs, cJSON_GetArraySize(cv->msgs) - 1);
    cJSON *m = NULL;
    if (for_call && last && str_is(cJSON_GetObjectItemCaseSensitive(last, "role"), "assistant") &&
        !cv->reasoning)
        m = last;
    if (!m) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "assistant");
        if (for_call) cJSON_AddNullToObject(m, "content");
        cJSON_AddItemToArray(cv->msgs, m);
    }
    if (cv->reasoning) {
        if (cv->srv->tmpl_reasoning_in) cJSON_AddStringToObject(m, "reasoning_content", cv->reasoning);
        free(cv->reasoning);
        cv->reasoning = NULL;
    }
    return m;
}

static int item_message(conv *cv, const cJSON *it, const char *param, srv_err *er)
{
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    static const char *const roles[] = { "user", "assistant", "system", "developer" };
    char where[96];
    snprintf(where, sizeof where, "%s.role", param);
    if (!cJSON_IsString(role) || !in_list(role->valuestring, roles, 4))
        return fail(er, where, "'%s' must be user, assistant, system or developer%s", where, "");
    snprintf(where, sizeof where, "%s.content", param);
    char *text = content_text(cJSON_GetObjectItemCaseSensitive(it, "content"), where, er);
    if (!text) return -1;
    cJSON *m;
    if (str_is(role, "assistant")) {
        m = assistant_msg(cv, false);
    } else {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", str_is(role, "developer") ? "system" : role->valuestring);
        cJSON_AddItemToArray(cv->msgs, m);
    }
    cJSON_AddStringToObject(m, "content", text);
    free(text);
    return 0;
}

static int item_call(conv *cv, const cJSON *it, const char *param, srv_err *er)
{
    const char *keys[] = { "name", "arguments", "call_id" };
    for (int k = 0; k < 3; k++)
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, keys[k]))) {
            char where[96];
            snprintf(where, sizeof where, "%s.%s", param, keys[k]);
            return fail_type(er, where, "a string");
        }
    cJSON *m = assistant_msg(cv, true);
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", cJSON_GetObjectItemCaseSensitive(it, "call_id")->valuestring);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring);
    cJSON_AddStringToObject(f, "arguments", cJSON_GetObjectItemCaseSensitive(it, "arguments")->valuestring);
    cJSON_AddItemToArray(calls, c);
    return 0;
}

static int item_call_output(conv *cv, const cJSON *it, const char *param, srv_err *er)
{
    char where[96];
    snprintf(where, sizeof where, "%s.call_id", param);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
    if (!cJSON_IsString(id)) return fail_type(er, where, "a string");
    snprintf(where, sizeof where, "%s.output", param);
    char *text = content_text(cJSON_GetObjectItemCaseSensitive(it, "output"), where, er);
    if (!text) return -1;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    cJSON_AddStringToObject(m, "content", text);
    free(text);
    cJSON_AddItemToArray(cv->msgs, m);
    return 0;
}

/* A reasoning item's text (its content, else its summary) waits for the next
 * assistant message; a template that reads no reasoning_content drops it. */
static int item_reasoning(conv *cv, const cJSON *it, srv_err *er)
{
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (cJSON_GetArraySize(parts) == 0) parts = cJSON_GetObjectItemCaseSensitive(it, "summary");
    const cJSON *p;
    cJSON_ArrayForEach(p, parts)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(t)) continue;
        const size_t have = cv->reasoning ? strlen(cv->reasoning) : 0;
        char *n = realloc(cv->reasoning, have + strlen(t->valuestring) + 2);
        if (!n) return oom(er);
        if (!have) n[0] = 0;
        if (have) strcat(n, "\n");
        strcat(n, t->valuestring);
        cv->reasoning = n;
    }
    return 0;
}

/* Items to messages; base names them in errors ("input"). */
static int items_to_messages(conv *cv, const cJSON *items, const char *base, srv_err *er)
{
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, items)
    {
        char param[64];
        snprintf(param, sizeof param, "%s[%d]", base, i++);
        if (!cJSON_IsObject(it)) return fail_type(er, param, "an object (an input item)");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        int rc;
        if (!type || str_is(type, "message"))
            rc = item_message(cv, it, param, er);
        else if (str_is(type, "function_call"))
            rc = item_call(cv, it, param, er);
        else if (str_is(type, "function_call_output"))
            rc = item_call_output(cv, it, param, er);
        else if (str_is(type, "reasoning"))
            rc = item_reasoning(cv, it, er);
        else {
            char where[80];
            snprintf(where, sizeof where, "%s.type", param);
            return fail(er, where,
                        "'%s' is '%.64s'; kvinfer reads message, function_call, function_call_output and "
                        "reasoning items",
                        where, cJSON_IsString(type) ? type->valuestring : "?");
        }
        if (rc) return rc;
    }
    return 0;
}

/* A function tool of the Responses shape as a chat tool. */
static int add_function_tool(cJSON *out, const cJSON *t, const char *param, srv_err *er)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
    char where[96];
    snprintf(where, sizeof where, "%s.name", param);
    if (!cJSON_IsString(name)) return fail_type(er, where, "a string");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    const char *keys[] = { "name", "description", "parameters", "strict" };
    for (int k = 0; k < 4; k++) {
        const cJSON *v = field(t, keys[k]);
        if (v) cJSON_AddItemToObject(f, keys[k], cJSON_Duplicate(v, true));
    }
    cJSON_AddItemToArray(out, c);
    return 0;
}

/* "tools": function tools, namespace tools' functions, hosted tools left out. */
static int tools_to_chat(resp_state *st, const cJSON *tools, cJSON *chat, srv_err *er)
{
    if (!tools) return 0;
    if (!cJSON_IsArray(tools)) return fail_type(er, "tools", "an array of tools");
    cJSON *out = cJSON_CreateArray();
    cJSON_AddItemToObject(chat, "tools", out);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        char param[64];
        snprintf(param, sizeof param, "tools[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type)) return fail_type(er, param, "a tool with a 'type'");
        if (str_is(type, "function")) {
            if (add_function_tool(out, t, param, er)) return -1;
        } else if (str_is(type, "namespace")) {
            const cJSON *inner = cJSON_GetObjectItemCaseSensitive(t, "tools");
            char where[96];
            snprintf(where, sizeof where, "%s.tools", param);
            if (!cJSON_IsArray(inner)) return fail_type(er, where, "an array of function tools");
            int j = 0;
            const cJSON *f;
            cJSON_ArrayForEach(f, inner)
            {
                char fp[128];
                snprintf(fp, sizeof fp, "%s[%d]", where, j++);
                const cJSON *ft = cJSON_GetObjectItemCaseSensitive(f, "type");
                if (ft && !str_is(ft, "function")) {
                    if (!cJSON_IsString(ft) ||
                        !in_list(ft->valuestring, hosted_tools, sizeof hosted_tools / sizeof *hosted_tools))
                        return fail(er, fp, "'%s' must be a function tool%s", fp, "");
                    srv_log_left_out(ft->valuestring);
                    continue;
                }
                if (add_function_tool(out, f, fp, er)) return -1;
            }
        } else if (in_list(type->valuestring, hosted_tools, sizeof hosted_tools / sizeof *hosted_tools)) {
            srv_log_left_out(type->valuestring);
        } else {
            char where[80];
            snprintf(where, sizeof where, "%s.type", param);
            return fail(er, where, "'%s' is '%.64s': not a tool type kvinfer knows", where,
                        type->valuestring);
        }
    }
    if (cJSON_GetArraySize(out) == 0) cJSON_DeleteItemFromObjectCaseSensitive(chat, "tools");
    return 0;
}

/* "tool_choice": auto / none / required / {"type": "function", "name"}. */
static int tool_choice_to_chat(const cJSON *tc, cJSON *chat, srv_err *er)
{
    if (!tc) return 0;
    const bool has_tools = cJSON_GetObjectItemCaseSensitive(chat, "tools") != NULL;
    if (str_is(tc, "auto") || str_is(tc, "none")) {
        if (has_tools) cJSON_AddStringToObject(chat, "tool_choice", tc->valuestring);
        return 0;
    }
    if (str_is(tc, "required")) {
        if (!has_tools)
            return fail(er, "tool_choice", "'tool_choice' is \"required\" but no function tools%s%s",
                        " are given (hosted tools are left out)", "");
        cJSON_AddStringToObject(chat, "tool_choice", "required");
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (cJSON_IsObject(tc) && str_is(type, "function") && cJSON_IsString(name)) {
        cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name->valuestring);
        return 0;
    }
    return fail(er, "tool_choice",
                "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                "\"name\": ...}%s%s",
                cJSON_IsObject(tc) && cJSON_IsString(type) ? " (hosted tools cannot be chosen: " : "",
                cJSON_IsObject(tc) && cJSON_IsString(type) ? "kvinfer runs none)" : "");
}

/* "text": {"format": {"type": text | json_object | json_schema, ...}, "verbosity"}. */
static int text_to_chat(const cJSON *text, cJSON *chat, srv_err *er)
{
    if (!text) return 0;
    if (!cJSON_IsObject(text)) return fail_type(er, "text", "an object");
    static const char *const verb[] = { "low", "medium", "high" };
    if (enum_field(text, "verbosity", "text.verbosity", verb, 3, er)) return -1;
    const cJSON *f = field(text, "format");
    if (!f) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type))
        return fail_type(er, "text.format", "an object with a 'type'");
    if (str_is(type, "text")) return 0;
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    if (str_is(type, "json_object")) {
        cJSON_AddStringToObject(rf, "type", "json_object");
        return 0;
    }
    if (!str_is(type, "json_schema"))
        return fail(er, "text.format.type", "'text.format.type' must be text, json_object or json_schema%s%s",
                    "", "");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    if (!cJSON_IsString(name)) return fail_type(er, "text.format.name", "a string");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    const char *keys[] = { "name", "schema", "strict", "description" };
    for (int k = 0; k < 4; k++) {
        const cJSON *v = field(f, keys[k]);
        if (v) cJSON_AddItemToObject(js, keys[k], cJSON_Duplicate(v, true));
    }
    return 0;
}

/* "reasoning": {"effort", "summary"} onto the template's variables. */
static int reasoning_to_chat(srv_server *srv, resp_state *st, const cJSON *rs, cJSON *chat, srv_err *er)
{
    if (!rs) return 0;
    if (!cJSON_IsObject(rs)) return fail_type(er, "reasoning", "an object");
    static const char *const efforts[] = { "none", "minimal", "low", "medium", "high", "xhigh" };
    static const char *const summaries[] = { "auto", "concise", "detailed" };
    if (enum_field(rs, "effort", "reasoning.effort", efforts, 6, er)) return -1;
    if (enum_field(rs, "summary", "reasoning.summary", summaries, 3, er)) return -1;
    if (enum_field(rs, "generate_summary", "reasoning.generate_summary", summaries, 3, er)) return -1;
    st->summary = field(rs, "summary") || field(rs, "generate_summary");
    const cJSON *e = field(rs, "effort");
    if (!e) return 0;
    const bool off = str_is(e, "none") || str_is(e, "minimal");
    cJSON *kw = NULL;
    if (off && srv->tmpl_think_switch) {
        kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
        cJSON_AddFalseToObject(kw, "enable_thinking");
    } else if (srv->tmpl_effort) {
        kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
        cJSON_AddStringToObject(kw, "reasoning_effort",
                                off                  ? "low"
                                : str_is(e, "xhigh") ? "high"
                                                     : e->valuestring);
    }
    return 0;
}

/* The other top-level fields' checks (accepted: see README). */
static int check_misc(const cJSON *root, srv_err *er)
{
    const srv_field_set known = { known_fields, sizeof known_fields / sizeof *known_fields };
    srv_log_unknown(root, &known, 1);
    const char *strs[] = { "model", "instructions",      "previous_response_id",
                           "user",  "safety_identifier", "prompt_cache_key" };
    for (size_t k = 0; k < sizeof strs / sizeof *strs; k++)
        if (string_field(root, strs[k], er)) return -1;
    static const char *const tiers[] = { "auto", "default", "flex", "scale", "priority" };
    static const char *const truncs[] = { "auto", "disabled" };
    static const char *const retention[] = { "in-memory", "24h" };
    if (enum_field(root, "service_tier", "service_tier", tiers, 5, er)) return -1;
    if (enum_field(root, "truncation", "truncation", truncs, 2, er)) return -1;
    if (enum_field(root, "prompt_cache_retention", "prompt_cache_retention", retention, 2, er)) return -1;
    const char *bools[] = { "store", "stream", "background", "parallel_tool_calls" };
    for (size_t k = 0; k < sizeof bools / sizeof *bools; k++) {
        const cJSON *v = field(root, bools[k]);
        if (v && !cJSON_IsBool(v)) return fail_type(er, bools[k], "a boolean");
    }
    if (cJSON_IsTrue(field(root, "background")))
        return fail(er, "background",
                    "'background': true is not supported (kvinfer answers each request %s%s",
                    "on its connection)", "");
    const char *refused[] = { "conversation", "prompt", "max_tool_calls" };
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++)
        if (field(root, refused[k]))
            return fail(er, refused[k], "'%s' is not supported by kvinfer%s", refused[k], "");
    const cJSON *tl = field(root, "top_logprobs");
    if (tl && !(cJSON_IsNumber(tl) && tl->valuedouble == 0))
        return fail(er, "top_logprobs", "'top_logprobs' other than 0 is not supported on /v1/responses%s%s",
                    "", "");
    const cJSON *md = field(root, "metadata");
    if (md) {
        if (!cJSON_IsObject(md) || cJSON_GetArraySize(md) > 16)
            return fail_type(er, "metadata", "an object of at most 16 string values");
        for (const cJSON *v = md->child; v; v = v->next)
            if (!cJSON_IsString(v) || strlen(v->string) > 64 || strlen(v->valuestring) > 512)
                return fail(er, "metadata",
                            "'metadata': values must be strings of at most 512 characters, keys "
                            "at most 64%s%s",
                            "", "");
    }
    const cJSON *cm = field(root, "client_metadata");
    if (cm && !cJSON_IsObject(cm)) return fail_type(er, "client_metadata", "an object");
    const cJSON *inc = field(root, "include");
    if (inc) {
        if (!cJSON_IsArray(inc)) return fail_type(er, "include", "an array of strings");
        for (const cJSON *v = inc->child; v; v = v->next)
            if (!cJSON_IsString(v)) return fail_type(er, "include", "an array of strings");
    }
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return fail_type(er, "stream_options", "an object");
        for (const cJSON *v = so->child; v; v = v->next)
            if (strcmp(v->string, "include_obfuscation") != 0 || !cJSON_IsBool(v))
                return fail(er, "stream_options",
                            "'stream_options' may hold only include_obfuscation (a %s)%s", "boolean", "");
    }
    return 0;
}

/* Copies root's field k into chat as ck when present. */
static void pass(const cJSON *root, const char *k, cJSON *chat, const char *ck)
{
    const cJSON *v = field(root, k);
    if (v) cJSON_AddItemToObject(chat, ck, cJSON_Duplicate(v, true));
}

/* The chat body of a Responses body; fills st (input, hosted tools, store, prev). */
static cJSON *build_chat(srv_server *srv, const cJSON *root, resp_state *st, srv_err *er)
{
    if (check_misc(root, er)) return NULL;
    cJSON *chat = cJSON_CreateObject();
    conv cv = { .srv = srv, .msgs = cJSON_AddArrayToObject(chat, "messages") };
    int rc = 0;
    const cJSON *ins = field(root, "instructions");
    if (ins) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", ins->valuestring);
        cJSON_AddItemToArray(cv.msgs, m);
    }
    const cJSON *prev = field(root, "previous_response_id");
    if (prev) {
        char missing[48];
        cJSON *chain = srv_store_chain(srv, prev->valuestring, missing);
        if (!chain && missing[0]) {
            srv_err_set(er, 404, "invalid_request_error", "previous_response_not_found",
                        "Previous response with id '%.64s' not found.", missing);
            set_param(er, "previous_response_id");
            rc = -1;
        } else if (!chain) {
            rc = oom(er);
        } else {
            snprintf(st->prev, sizeof st->prev, "%s", prev->valuestring);
            rc = items_to_messages(&cv, chain, "previous_response_id", er);
            cJSON_Delete(chain);
        }
    }
    const cJSON *in = field(root, "input");
    if (!rc && cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        st->input = cJSON_CreateArray();
        cJSON_AddItemToArray(st->input, m);
        rc = items_to_messages(&cv, st->input, "input", er);
    } else if (!rc && cJSON_IsArray(in)) {
        st->input = cJSON_Duplicate(in, true);
        rc = items_to_messages(&cv, in, "input", er);
    } else if (!rc && in) {
        rc = fail_type(er, "input", "a string or an array of input items");
    } else if (!rc) {
        st->input = cJSON_CreateArray();
    }
    free(cv.reasoning); /* reasoning no assistant message followed */
    if (!rc && cJSON_GetArraySize(cv.msgs) == 0)
        rc = fail(er, "input", "'input' is required (with no instructions and no previous_response_id)%s%s",
                  "", "");
    if (!rc) rc = tools_to_chat(st, field(root, "tools"), chat, er);
    if (!rc) rc = tool_choice_to_chat(field(root, "tool_choice"), chat, er);
    if (!rc) rc = text_to_chat(field(root, "text"), chat, er);
    if (!rc) rc = reasoning_to_chat(srv, st, field(root, "reasoning"), chat, er);
    if (rc) {
        cJSON_Delete(chat);
        return NULL;
    }
    pass(root, "model", chat, "model");
    pass(root, "max_output_tokens", chat, "max_tokens");
    pass(root, "temperature", chat, "temperature");
    pass(root, "top_p", chat, "top_p");
    pass(root, "seed", chat, "seed");
    pass(root, "stream", chat, "stream");
    if (cJSON_GetObjectItemCaseSensitive(chat, "tools"))
        pass(root, "parallel_tool_calls", chat, "parallel_tool_calls");
    const cJSON *store = field(root, "store");
    st->store = !store || cJSON_IsTrue(store);
    return chat;
}

/* The chat parser's messages name its own fields: Responses' names instead. */
static void rename_param(srv_err *er)
{
    static const char *const map[][2] = { { "'max_tokens'", "max_output_tokens" },
                                          { "'response_format", "text.format" },
                                          { "'messages", "input" },
                                          { "'temperature'", "temperature" },
                                          { "'top_p'", "top_p" },
                                          { "'seed'", "seed" },
                                          { "'tools", "tools" },
                                          { "'tool_choice'", "tool_choice" },
                                          { "'model'", "model" } };
    for (size_t k = 0; k < sizeof map / sizeof *map && !er->param[0]; k++)
        if (strstr(er->msg, map[k][0])) set_param(er, map[k][1]);
    if (!strncmp(er->msg, "'max_tokens'", 12)) {
        char rest[512];
        snprintf(rest, sizeof rest, "'max_output_tokens'%s", er->msg + 12);
        snprintf(er->msg, sizeof er->msg, "%s", rest);
    }
}

/* The response object's fields known before generation. */
static cJSON *base_new(srv_req *r, const cJSON *root)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)r->created);
    cJSON_AddStringToObject(o, "status", "in_progress");
    cJSON_AddFalseToObject(o, "background");
    cJSON_AddNullToObject(o, "error");
    cJSON_AddNullToObject(o, "incomplete_details");
    const char *echo_null[] = { "instructions", "max_output_tokens", "max_tool_calls" };
    for (int k = 0; k < 3; k++) {
        const cJSON *v = field(root, echo_null[k]);
        cJSON_AddItemToObject(o, echo_null[k], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    cJSON_AddStringToObject(o, "model", r->srv->cfg.model_name);
    cJSON_AddArrayToObject(o, "output");
    const cJSON *ptc = field(root, "parallel_tool_calls");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", !ptc || cJSON_IsTrue(ptc));
    const cJSON *prev = field(root, "previous_response_id");
    cJSON_AddItemToObject(o, "previous_response_id", prev ? cJSON_Duplicate(prev, true) : cJSON_CreateNull());
    const char *echo2[] = { "prompt_cache_key", "safety_identifier" };
    for (int k = 0; k < 2; k++) {
        const cJSON *v = field(root, echo2[k]);
        cJSON_AddItemToObject(o, echo2[k], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    const cJSON *rs = field(root, "reasoning");
    cJSON *ro = cJSON_AddObjectToObject(o, "reasoning");
    const cJSON *eff = field(rs, "effort"), *sum = field(rs, "summary");
    cJSON_AddItemToObject(ro, "effort", eff ? cJSON_Duplicate(eff, true) : cJSON_CreateNull());
    cJSON_AddItemToObject(ro, "summary", sum ? cJSON_Duplicate(sum, true) : cJSON_CreateNull());
    const cJSON *tier = field(root, "service_tier");
    cJSON_AddStringToObject(o, "service_tier", tier && !str_is(tier, "auto") ? tier->valuestring : "default");
    const cJSON *store = field(root, "store");
    cJSON_AddBoolToObject(o, "store", !store || cJSON_IsTrue(store));
    cJSON_AddNumberToObject(o, "temperature", round(r->p.sp.temp * 1e6) / 1e6); /* the float as written */
    const cJSON *text = field(root, "text");
    cJSON *to = text ? cJSON_Duplicate(text, true) : cJSON_CreateObject();
    if (!field(to, "format")) {
        cJSON_DeleteItemFromObjectCaseSensitive(to, "format");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(to, "format"), "type", "text");
    }
    if (!field(to, "verbosity")) {
        cJSON_DeleteItemFromObjectCaseSensitive(to, "verbosity");
        cJSON_AddStringToObject(to, "verbosity", "medium");
    }
    cJSON_AddItemToObject(o, "text", to);
    const cJSON *tc = field(root, "tool_choice");
    cJSON_AddItemToObject(o, "tool_choice", tc ? cJSON_Duplicate(tc, true) : cJSON_CreateString("auto"));
    const cJSON *tools = field(root, "tools");
    cJSON_AddItemToObject(o, "tools", tools ? cJSON_Duplicate(tools, true) : cJSON_CreateArray());
    cJSON_AddNumberToObject(o, "top_logprobs", 0);
    cJSON_AddNumberToObject(o, "top_p", round(r->p.sp.top_p * 1e6) / 1e6);
    const cJSON *tr = field(root, "truncation");
    cJSON_AddStringToObject(o, "truncation", tr ? tr->valuestring : "disabled");
    cJSON_AddNullToObject(o, "usage");
    const cJSON *user = field(root, "user");
    cJSON_AddItemToObject(o, "user", user ? cJSON_Duplicate(user, true) : cJSON_CreateNull());
    const cJSON *md = field(root, "metadata");
    cJSON_AddItemToObject(o, "metadata", md ? cJSON_Duplicate(md, true) : cJSON_CreateObject());
    return o;
}

/* ---- the item machine ---- */

/* A new event {"type", "sequence_number"}; NULL when not streaming. */
static cJSON *ev_new(resp_state *st, const char *type)
{
    if (!st->streaming) return NULL;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "sequence_number", st->seq++);
    return e;
}

/* An event about the open item: item_id, output_index (, content_index). */
static cJSON *ev_item(resp_state *st, const char *type, bool content_index)
{
    cJSON *e = ev_new(st, type);
    if (!e) return NULL;
    cJSON_AddStringToObject(e, "item_id", st->open_id);
    cJSON_AddNumberToObject(e, "output_index", cJSON_GetArraySize(st->output));
    if (content_index) cJSON_AddNumberToObject(e, "content_index", 0);
    return e;
}

static cJSON *part_json(int kind, const char *text)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", kind == OPEN_MESSAGE ? "output_text" : "reasoning_text");
    if (kind == OPEN_MESSAGE) cJSON_AddArrayToObject(p, "annotations");
    if (kind == OPEN_MESSAGE) cJSON_AddArrayToObject(p, "logprobs");
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

/* The open item with its text (done: the finished item). */
static cJSON *item_json(resp_state *st, const char *status, bool done)
{
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", st->open_id);
    const char *text = st->open_text ? st->open_text : "";
    if (st->open == OPEN_MESSAGE) {
        cJSON_AddStringToObject(it, "type", "message");
        cJSON_AddStringToObject(it, "status", status);
        cJSON_AddStringToObject(it, "role", "assistant");
        cJSON *c = cJSON_AddArrayToObject(it, "content");
        if (done) cJSON_AddItemToArray(c, part_json(OPEN_MESSAGE, text));
    } else {
        cJSON_AddStringToObject(it, "type", "reasoning");
        cJSON *sm = cJSON_AddArrayToObject(it, "summary");
        if (done && st->summary) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "summary_text");
            cJSON_AddStringToObject(p, "text", text);
            cJSON_AddItemToArray(sm, p);
        }
        cJSON *c = cJSON_AddArrayToObject(it, "content");
        if (done) cJSON_AddItemToArray(c, part_json(OPEN_REASONING, text));
    }
    return it;
}

static bool open_item(srv_req *r, resp_state *st, int kind)
{
    st->open = kind;
    st->open_len = 0;
    if (st->open_text) st->open_text[0] = 0;
    snprintf(st->open_id, sizeof st->open_id, "%s_%s_%d", kind == OPEN_MESSAGE ? "msg" : "rs", r->id + 5,
             cJSON_GetArraySize(st->output));
    if (!st->streaming) return true;
    cJSON *e = ev_new(st, "response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", cJSON_GetArraySize(st->output));
    cJSON_AddItemToObject(e, "item", item_json(st, "in_progress", false));
    bool ok = srv_sse_named(r, e);
    e = ev_item(st, "response.content_part.added", true);
    cJSON_AddItemToObject(e, "part", part_json(kind, ""));
    return srv_sse_named(r, e) && ok;
}

static bool close_item(srv_req *r, resp_state *st, const char *status)
{
    if (st->open == OPEN_NONE) return true;
    bool ok = true;
    const char *text = st->open_text ? st->open_text : "";
    if (st->streaming) {
        cJSON *e = ev_item(
            st, st->open == OPEN_MESSAGE ? "response.output_text.done" : "response.reasoning_text.done",
            true);
        cJSON_AddStringToObject(e, "text", text);
        if (st->open == OPEN_MESSAGE) cJSON_AddArrayToObject(e, "logprobs");
        ok = srv_sse_named(r, e);
        e = ev_item(st, "response.content_part.done", true);
        cJSON_AddItemToObject(e, "part", part_json(st->open, text));
        ok = srv_sse_named(r, e) && ok;
        e = ev_new(st, "response.output_item.done");
        cJSON_AddNumberToObject(e, "output_index", cJSON_GetArraySize(st->output));
        cJSON_AddItemToObject(e, "item", item_json(st, status, true));
        ok = srv_sse_named(r, e) && ok;
    }
    cJSON_AddItemToArray(st->output, item_json(st, status, true));
    st->open = OPEN_NONE;
    return ok;
}

/* Text of kind for the output: into the open item of that kind, or a new one. */
static bool add_text(srv_req *r, resp_state *st, int kind, const char *s)
{
    const size_t n = strlen(s);
    if (n == 0) return true;
    bool ok = true;
    if (st->open != kind) ok = close_item(r, st, "completed") && open_item(r, st, kind);
    if (st->open_len + n + 1 > st->open_cap) {
        const size_t cap = (st->open_len + n + 1) * 2;
        char *t = realloc(st->open_text, cap);
        if (!t) return false;
        st->open_text = t;
        st->open_cap = cap;
    }
    memcpy(st->open_text + st->open_len, s, n + 1);
    st->open_len += n;
    if (!st->streaming) return ok;
    cJSON *e = ev_item(
        st, kind == OPEN_MESSAGE ? "response.output_text.delta" : "response.reasoning_text.delta", true);
    cJSON_AddStringToObject(e, "delta", s);
    if (kind == OPEN_MESSAGE) cJSON_AddArrayToObject(e, "logprobs");
    return srv_sse_named(r, e) && ok;
}

/* A chat tool call ({"id", "function": {"name", "arguments"}}) as a function_call item. */
static bool add_call(srv_req *r, resp_state *st, const cJSON *call)
{
    bool ok = close_item(r, st, "completed");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(call, "function");
    const char *args = cJSON_GetObjectItemCaseSensitive(f, "arguments")->valuestring;
    const int idx = cJSON_GetArraySize(st->output);
    cJSON *it = cJSON_CreateObject();
    char id[80];
    snprintf(id, sizeof id, "fc_%s_%d", r->id + 5, idx);
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "status", "in_progress");
    cJSON_AddStringToObject(it, "arguments", "");
    cJSON_AddStringToObject(it, "call_id", cJSON_GetObjectItemCaseSensitive(call, "id")->valuestring);
    cJSON_AddStringToObject(it, "name", cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring);
    if (st->streaming) {
        cJSON *e = ev_new(st, "response.output_item.added");
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddItemToObject(e, "item", cJSON_Duplicate(it, true));
        ok = srv_sse_named(r, e) && ok;
        e = ev_new(st, "response.function_call_arguments.delta");
        cJSON_AddStringToObject(e, "item_id", id);
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddStringToObject(e, "delta", args);
        ok = srv_sse_named(r, e) && ok;
        e = ev_new(st, "response.function_call_arguments.done");
        cJSON_AddStringToObject(e, "item_id", id);
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddStringToObject(e, "name", cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring);
        cJSON_AddStringToObject(e, "arguments", args);
        ok = srv_sse_named(r, e) && ok;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(it, "status", cJSON_CreateString("completed"));
    cJSON_ReplaceItemInObjectCaseSensitive(it, "arguments", cJSON_CreateString(args));
    if (st->streaming) {
        cJSON *e = ev_new(st, "response.output_item.done");
        cJSON_AddNumberToObject(e, "output_index", idx);
        cJSON_AddItemToObject(e, "item", cJSON_Duplicate(it, true));
        ok = srv_sse_named(r, e) && ok;
    }
    cJSON_AddItemToArray(st->output, it);
    return ok;
}

/* What the choice's parser settled since the last call (final: all of it)
 * through the item machine; without a parser, text is the content. */
static bool advance(srv_req *r, resp_state *st, srv_choice *c, const char *text, size_t n, bool final)
{
    if (!c->co) {
        char *s = kvi_utf8_sanitize(text, n);
        bool ok = s && add_text(r, st, OPEN_MESSAGE, s);
        free(s);
        return ok;
    }
    cJSON *d = cJSON_CreateObject();
    srv_output_delta(r, c, d, final);
    bool ok = d != NULL;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(d, "reasoning_content");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(d, "content");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(d, "tool_calls");
    if (ok && cJSON_IsString(rs)) ok = add_text(r, st, OPEN_REASONING, rs->valuestring);
    if (ok && cJSON_IsString(ct)) ok = add_text(r, st, OPEN_MESSAGE, ct->valuestring);
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) ok = ok && add_call(r, st, call);
    cJSON_Delete(d);
    return ok;
}

/* Tokens of the reasoning items' text (re-tokenized: the parser keeps text). */
static int32_t reasoning_tokens(srv_req *r, const resp_state *st)
{
    int32_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, st->output)
    {
        if (!str_is(cJSON_GetObjectItemCaseSensitive(it, "type"), "reasoning")) continue;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(it, "content"), 0), "text");
        if (cJSON_IsString(t)) {
            const int32_t k =
                kvi_tokenize(r->srv->m, t->valuestring, strlen(t->valuestring), false, false, NULL, 0);
            if (k > 0) n += k;
        }
    }
    const int32_t out = r->ch[0].usage.completion_tokens;
    return n < out ? n : out;
}

/* The finished response object (a new cJSON) from the closed items. */
static cJSON *final_response(srv_req *r, resp_state *st)
{
    const srv_choice *c = &r->ch[0];
    cJSON *o = cJSON_Duplicate(st->base, true);
    const bool incomplete = !r->error && c->finish == KVI_FINISH_LENGTH;
    const char *status = r->error ? "failed" : incomplete ? "incomplete" : "completed";
    cJSON_ReplaceItemInObjectCaseSensitive(o, "status", cJSON_CreateString(status));
    if (r->error) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", r->err_msg);
        cJSON_ReplaceItemInObjectCaseSensitive(o, "error", e);
    }
    if (incomplete) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
        cJSON_ReplaceItemInObjectCaseSensitive(o, "incomplete_details", d);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(o, "output", cJSON_Duplicate(st->output, true));
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", r->p.n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
                            c->usage.cached_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", c->usage.completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens",
                            reasoning_tokens(r, st));
    cJSON_AddNumberToObject(u, "total_tokens", r->p.n_prompt + c->usage.completion_tokens);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "usage", u);
    return o;
}

/* Ends the items, stores the response when asked; the response object. */
static cJSON *finish(srv_req *r, resp_state *st)
{
    const bool incomplete = !r->error && r->ch[0].finish == KVI_FINISH_LENGTH;
    close_item(r, st, incomplete ? "incomplete" : "completed");
    cJSON *o = final_response(r, st);
    if (st->store && !r->error) {
        cJSON *items = cJSON_Duplicate(st->input, true);
        const cJSON *it;
        cJSON_ArrayForEach(it, st->output) cJSON_AddItemToArray(items, cJSON_Duplicate(it, true));
        srv_store_put(r->srv, r->id, st->prev, cJSON_PrintUnformatted(items), cJSON_PrintUnformatted(o));
        cJSON_Delete(items);
    }
    return o;
}

/* ---- srv_api_responses ---- */

static bool resp_sse_token(srv_req *r, srv_choice *c, const char *piece, size_t n)
{
    return advance(r, r->api_state, c, piece, n, false);
}

static bool resp_sse_final(srv_req *r)
{
    resp_state *st = r->api_state;
    srv_choice *c = &r->ch[0];
    bool ok = advance(r, st, c, c->text ? c->text + c->sent : "", c->text ? c->len - c->sent : 0, true);
    c->sent = c->len;
    cJSON *o = finish(r, st);
    const char *status = cJSON_GetObjectItemCaseSensitive(o, "status")->valuestring;
    char type[48];
    snprintf(type, sizeof type, "response.%s", status);
    cJSON *e = ev_new(st, type);
    cJSON_AddItemToObject(e, "response", o);
    return srv_sse_named(r, e) && ok;
}

static char *resp_response_json(srv_req *r)
{
    resp_state *st = r->api_state;
    srv_choice *c = &r->ch[0];
    if (!advance(r, st, c, c->text ? c->text : "", c->len, true)) return NULL;
    cJSON *o = finish(r, st);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static const srv_api srv_api_responses = {
    .name = "responses",
    .sse_token = resp_sse_token,
    .sse_final = resp_sse_final,
    .response_json = resp_response_json,
    .error_json = srv_error_json,
    .state_free = state_free,
};

/* ---- routes ---- */

/* The stream's first events: response.created and response.in_progress. */
static bool stream_open(srv_req *r, resp_state *st)
{
    const char *types[] = { "response.created", "response.in_progress" };
    bool ok = true;
    for (int k = 0; k < 2; k++) {
        cJSON *e = ev_new(st, types[k]);
        cJSON_AddItemToObject(e, "response", cJSON_Duplicate(st->base, true));
        ok = srv_sse_named(r, e) && ok;
    }
    return ok;
}

/* The body translated into a chat body and parsed into *p: the body's JSON
 * (for the echoed fields), or NULL with *er set. */
static cJSON *parse_body(srv_server *srv, const char *body, size_t len, resp_state *st, srv_params *p,
                         srv_err *er)
{
    cJSON *root = cJSON_ParseWithLength(body ? body : "", len);
    cJSON *chat = NULL;
    if (!cJSON_IsObject(root))
        srv_err_set(er, 400, "invalid_request_error", NULL, "the body must be a JSON object");
    else
        chat = build_chat(srv, root, st, er);
    char *text = chat ? cJSON_PrintUnformatted(chat) : NULL;
    cJSON_Delete(chat);
    if (chat && !text) oom(er);
    const bool ok = text && srv_parse_request(srv, text, strlen(text), true, p, er) == 0;
    if (text && !ok) rename_param(er);
    free(text);
    if (ok) return root;
    cJSON_Delete(root);
    return NULL;
}

int srv_responses_parse(srv_server *srv, const char *body, size_t len, srv_params *p, srv_err *er)
{
    resp_state *st = calloc(1, sizeof *st);
    if (!st) return oom(er);
    cJSON *root = parse_body(srv, body, len, st, p, er);
    state_free(st);
    cJSON_Delete(root);
    return root ? 0 : -1;
}

int srv_responses_create(srv_server *srv, struct MHD_Connection *con, const char *body, size_t len)
{
    srv_err er = { 0 };
    srv_req *r = srv_req_new(srv, &srv_api_responses, "resp");
    resp_state *st = r ? calloc(1, sizeof *st) : NULL;
    if (!st) {
        if (r) srv_req_discard(r);
        oom(&er);
        return srv_send_error(con, &srv_api_responses, &er);
    }
    r->api_state = st;
    /* "resp_" and 24 hex digits: the creation time and the server's counter */
    snprintf(r->id, sizeof r->id, "resp_%08lx%016llx", (unsigned long)r->created,
             strtoull(strchr(r->id, '-') + 1, NULL, 10));
    st->output = cJSON_CreateArray();
    cJSON *root = parse_body(srv, body, len, st, &r->p, &er);
    if (!root) {
        srv_req_discard(r);
        return srv_send_error(con, &srv_api_responses, &er);
    }
    st->base = base_new(r, root);
    cJSON_Delete(root);
    st->streaming = r->p.stream;
    if (st->streaming && !stream_open(r, st)) {
        srv_req_discard(r);
        oom(&er);
        return srv_send_error(con, &srv_api_responses, &er);
    }
    return srv_answer(srv, con, r);
}

static int not_found(struct MHD_Connection *con, const char *id)
{
    srv_err er = { 0 };
    srv_err_set(&er, 404, "invalid_request_error", "not_found", "Response with id '%.64s' not found.", id);
    return srv_send_error(con, &srv_api_responses, &er);
}

int srv_responses_get(srv_server *srv, struct MHD_Connection *con, const char *id)
{
    char *s = srv_store_response(srv, id);
    return s ? srv_send_body(con, 200, s) : not_found(con, id);
}

int srv_responses_delete(srv_server *srv, struct MHD_Connection *con, const char *id)
{
    if (!srv_store_delete(srv, id)) return not_found(con, id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "response.deleted");
    cJSON_AddTrueToObject(o, "deleted");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_send_body(con, 200, s);
}
