/*
 * server_messages.c — Anthropic's Messages API: POST /v1/messages and
 * POST /v1/messages/count_tokens, a route family (srv_api_messages) beside
 * OpenAI's.
 *
 * Request side: the body is checked field by field (Anthropic's shapes; a 400
 * in Anthropic's error shape naming the field otherwise) and translated into an
 * OpenAI chat-completions body (a cJSON tree built here), which
 * srv_parse_request(chat=true) turns into the shared request model, so the
 * template, tools, stop strings, grammars and scheduling are the OpenAI
 * route's. The mapping: "system" (a string or text blocks) and system-role
 * messages become system messages; a user message's text blocks are joined
 * into one user message and each tool_result becomes a "tool" message (in
 * block order); an assistant message's text becomes content, its thinking
 * reasoning_content, its tool_use blocks tool_calls (input as the arguments'
 * JSON text); tools become function tools (input_schema: parameters);
 * tool_choice auto/any/tool/none becomes auto/required/named/none and
 * disable_parallel_tool_use parallel_tool_calls false; stop_sequences: stop;
 * thinking enabled/disabled: chat_template_kwargs.enable_thinking (when the
 * template reasons), thinking.display "omitted": thinking blocks without their
 * text (msg_state.omit_thinking); output_config.format json_schema: response_format.
 * Fields without effect here (cache_control, metadata, service_tier, ...)
 * are accepted (README.md says why that is harmless), unknown fields too
 * (named in the request log line: srv_log_unknown); content the model cannot
 * take (images, documents) is a 400.
 *
 * Response side, state per request (msg_state, r->api_state): blocks are
 * numbered in the order they start; at most one block is open (open >= 0)
 * and it is the last started; a tool_use block opens and closes within one
 * event batch (its input arrives whole, one input_json_delta, as the parser
 * gives a call once it is complete). message_start (then one ping) goes out
 * before the first block; message_delta and message_stop end every stream
 * that began, an "error" event replacing them when generation failed. The
 * non-streamed body lists the same blocks: thinking, text, tool_use.
 * input_tokens counts the prompt tokens the prefix cache did not supply
 * (cache_read_input_tokens), so their sum is the prompt, as Anthropic counts.
 */
#include "server/server.h"
#include "formats/json_util.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLK_NONE, BLK_TEXT, BLK_THINKING };

typedef struct msg_state {
    bool started;       /* message_start (and the ping) sent */
    int n_blocks;       /* blocks started */
    int open;           /* index of the open block, -1: none */
    int open_kind;      /* BLK_* of the open block */
    bool omit_thinking; /* thinking.display "omitted": thinking blocks carry no text */
} msg_state;

/* ---- errors ---- */

static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static cJSON *error_obj(const srv_err *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "type", "error");
    cJSON *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "type", error_type(e->status));
    char *clean = kvi_utf8_sanitize(e->msg, strlen(e->msg));
    cJSON_AddStringToObject(o, "message", clean ? clean : "error");
    free(clean);
    return root;
}

/* {"type": "error", "error": {"type", "message"}} (malloc'd). */
static char *messages_error_json(const srv_err *e)
{
    cJSON *o = error_obj(e);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

bool srv_messages_path(const char *url)
{
    return !strncmp(url, "/v1/messages", 12) && (url[12] == 0 || url[12] == '/');
}

/* ---- the request: Anthropic's body to OpenAI's ---- */

static int bad(srv_err *er, const char *fmt, const char *field, const char *what)
{
    return srv_err_set(er, 400, "invalid_request_error", NULL, fmt, field, what);
}

static const char *type_of(const cJSON *block)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(block, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* A growing text (malloc'd s, len bytes); false when out of memory. */
typedef struct sbuf {
    char *s;
    size_t len;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *sep, const char *t)
{
    const size_t ns = b->len ? strlen(sep) : 0, nt = strlen(t);
    char *n = b->oom ? NULL : realloc(b->s, b->len + ns + nt + 1);
    if (!n) {
        b->oom = true;
        return;
    }
    memcpy(n + b->len, sep, ns);
    memcpy(n + b->len + ns, t, nt + 1);
    b->s = n;
    b->len += ns + nt;
}

/* A block refused: an image or document (text only), or a type unknown here. */
static int refuse_block(srv_err *er, const char *where, const char *type)
{
    if (type && (!strcmp(type, "image") || !strcmp(type, "document")))
        return srv_err_set(er, 400, "invalid_request_error", NULL,
                           "%s: a '%s' block; this model takes text only", where, type);
    return srv_err_set(er, 400, "invalid_request_error", NULL,
                       "%s: content block type '%.64s' is not supported", where, type ? type : "(none)");
}

/* The text of a string or an array of text blocks (joined by "\n") into b. */
static int text_of(const cJSON *c, const char *where, sbuf *b, srv_err *er)
{
    if (cJSON_IsString(c)) {
        sb_add(b, "\n", c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return bad(er, "'%s' %s", where, "must be a string or an array of content blocks");
    const cJSON *blk;
    cJSON_ArrayForEach(blk, c)
    {
        const char *t = type_of(blk);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
        if (!cJSON_IsObject(blk) || !t || strcmp(t, "text") != 0) return refuse_block(er, where, t);
        if (!cJSON_IsString(text))
            return bad(er, "'%s' %s", where, "has a text block without a string 'text'");
        sb_add(b, "\n", text->valuestring);
    }
    return 0;
}

/* Adds {"role", "content": text} to msgs (content null when text is NULL). */
static cJSON *add_msg(cJSON *msgs, const char *role, const char *text)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    if (text)
        cJSON_AddStringToObject(m, "content", text);
    else
        cJSON_AddNullToObject(m, "content");
    cJSON_AddItemToArray(msgs, m);
    return m;
}

/* A user message's blocks: text joined into user messages, tool_result blocks
 * as tool messages, in order. */
static int user_blocks(const cJSON *content, int i, cJSON *msgs, srv_err *er)
{
    char where[64];
    snprintf(where, sizeof where, "messages[%d].content", i);
    sbuf txt = { 0 };
    int rc = 0;
    const cJSON *blk;
    cJSON_ArrayForEach(blk, content)
    {
        const char *t = type_of(blk);
        if (t && !strcmp(t, "text")) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
            if (!cJSON_IsString(text)) {
                rc = bad(er, "'%s' %s", where, "has a text block without a string 'text'");
                break;
            }
            sb_add(&txt, "\n", text->valuestring);
        } else if (t && !strcmp(t, "tool_result")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "tool_use_id");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(blk, "content");
            const cJSON *is_err = cJSON_GetObjectItemCaseSensitive(blk, "is_error");
            if (!cJSON_IsString(id)) {
                rc = bad(er, "'%s' %s", where, "has a tool_result without a string 'tool_use_id'");
                break;
            }
            if (is_err && !cJSON_IsBool(is_err)) {
                rc = bad(er, "'%s' %s", where, "has a tool_result whose 'is_error' is not a boolean");
                break;
            }
            if (txt.len) add_msg(msgs, "user", txt.s);
            txt.len = 0;
            sbuf res = { 0 };
            if (c && !cJSON_IsNull(c) && (rc = text_of(c, where, &res, er))) {
                free(res.s);
                break;
            }
            cJSON *m = add_msg(msgs, "tool", res.s ? res.s : "");
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            txt.oom |= res.oom;
            free(res.s);
        } else {
            rc = refuse_block(er, where, t);
            break;
        }
    }
    if (!rc && txt.len) add_msg(msgs, "user", txt.s);
    if (!rc && txt.oom) rc = srv_err_set(er, 500, "api_error", NULL, "out of memory");
    free(txt.s);
    return rc;
}

/* An assistant message's blocks: text as content, thinking as
 * reasoning_content, tool_use as tool_calls. */
static int assistant_blocks(const cJSON *content, int i, cJSON *msgs, srv_err *er)
{
    char where[64];
    snprintf(where, sizeof where, "messages[%d].content", i);
    sbuf txt = { 0 }, think = { 0 };
    cJSON *calls = cJSON_CreateArray();
    int rc = 0;
    const cJSON *blk;
    cJSON_ArrayForEach(blk, content)
    {
        const char *t = type_of(blk);
        const cJSON *text =
            cJSON_GetObjectItemCaseSensitive(blk, t && !strcmp(t, "thinking") ? "thinking" : "text");
        if (t && (!strcmp(t, "text") || !strcmp(t, "thinking"))) {
            if (!cJSON_IsString(text)) {
                rc = bad(er, "'%s' has a %s block without a string text", where, t);
                break;
            }
            sb_add(!strcmp(t, "text") ? &txt : &think, "\n", text->valuestring);
        } else if (t && !strcmp(t, "tool_use")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(blk, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(blk, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input)) {
                rc = bad(er, "'%s' %s", where,
                         "has a tool_use block without string 'id', 'name' and object 'input'");
                break;
            }
            char *args = cJSON_PrintUnformatted(input);
            cJSON *call = cJSON_CreateObject(), *fn;
            cJSON_AddStringToObject(call, "id", id->valuestring);
            cJSON_AddStringToObject(call, "type", "function");
            fn = cJSON_AddObjectToObject(call, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            cJSON_AddStringToObject(fn, "arguments", args ? args : "{}");
            cJSON_free(args);
            cJSON_AddItemToArray(calls, call);
        } else if (!t || strcmp(t, "redacted_thinking") != 0) {
            /* redacted_thinking: encrypted reasoning of another model, unreadable here */
            rc = refuse_block(er, where, t);
            break;
        }
    }
    if (!rc) {
        cJSON *m =
            add_msg(msgs, "assistant", txt.len || !cJSON_GetArraySize(calls) ? (txt.s ? txt.s : "") : NULL);
        if (think.len) cJSON_AddStringToObject(m, "reasoning_content", think.s);
        if (cJSON_GetArraySize(calls))
            cJSON_AddItemToObject(m, "tool_calls", calls);
        else
            cJSON_Delete(calls);
        calls = NULL;
        if (txt.oom || think.oom) rc = srv_err_set(er, 500, "api_error", NULL, "out of memory");
    }
    cJSON_Delete(calls);
    free(txt.s);
    free(think.s);
    return rc;
}

static int translate_messages(const cJSON *root, cJSON *out, srv_err *er)
{
    cJSON *msgs = cJSON_AddArrayToObject(out, "messages");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (sys && !cJSON_IsNull(sys)) {
        sbuf b = { 0 };
        int rc = text_of(sys, "system", &b, er);
        if (!rc) add_msg(msgs, "system", b.s ? b.s : "");
        free(b.s);
        if (rc) return rc;
    }
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) == 0)
        return bad(er, "'%s' %s", "messages", "is required: a non-empty array of messages");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        char where[64];
        snprintf(where, sizeof where, "messages[%d]", i);
        if (!cJSON_IsObject(m) || (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system")))
            return bad(er, "'%s.role' %s", where, "must be \"user\" or \"assistant\"");
        int rc = 0;
        if (cJSON_IsString(content)) {
            add_msg(msgs, r, content->valuestring);
        } else if (!cJSON_IsArray(content)) {
            rc = bad(er, "'%s.content' %s", where, "must be a string or an array of content blocks");
        } else if (!strcmp(r, "system")) {
            sbuf b = { 0 };
            snprintf(where, sizeof where, "messages[%d].content", i);
            if (!(rc = text_of(content, where, &b, er))) add_msg(msgs, "system", b.s ? b.s : "");
            free(b.s);
        } else {
            rc = !strcmp(r, "user") ? user_blocks(content, i, msgs, er)
                                    : assistant_blocks(content, i, msgs, er);
        }
        if (rc) return rc;
        i++;
    }
    return 0;
}

/* Anthropic's tool names: 1-128 of [a-zA-Z0-9_-] (the OpenAI check, 64, comes later). */
static int translate_tools(const cJSON *root, cJSON *out, srv_err *er)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return bad(er, "'%s' %s", "tools", "must be an array of tools");
    cJSON *a = cJSON_AddArrayToObject(out, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        const char *type = type_of(t);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        char where[32];
        snprintf(where, sizeof where, "tools[%d]", i++);
        if (!cJSON_IsObject(t)) return bad(er, "'%s' %s", where, "must be an object");
        if (type && strcmp(type, "custom") != 0)
            return srv_err_set(er, 400, "invalid_request_error", NULL,
                               "'%s.type': server tool '%.64s' is not available here (only custom tools)",
                               where, type);
        if (!cJSON_IsString(name)) return bad(er, "'%s.name' %s", where, "must be a string");
        if (desc && !cJSON_IsString(desc)) return bad(er, "'%s.description' %s", where, "must be a string");
        if (!cJSON_IsObject(schema))
            return bad(er, "'%s.input_schema' %s", where, "must be a JSON Schema object");
        cJSON *ft = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(ft, "type", "function");
        fn = cJSON_AddObjectToObject(ft, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (desc) cJSON_AddStringToObject(fn, "description", desc->valuestring);
        cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, true));
        cJSON_AddItemToArray(a, ft);
    }
    return 0;
}

static int translate_tool_choice(const cJSON *root, cJSON *out, srv_err *er)
{
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!tc || cJSON_IsNull(tc)) return 0;
    const char *type = type_of(tc);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(tc, "disable_parallel_tool_use");
    if (!cJSON_IsObject(tc) || !type)
        return bad(er, "'%s' %s", "tool_choice",
                   "must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (dp && !cJSON_IsBool(dp))
        return bad(er, "'%s' %s", "tool_choice.disable_parallel_tool_use", "must be a boolean");
    if (!strcmp(type, "auto") || !strcmp(type, "none")) {
        /* without tools both mean plain text (OpenAI's check would refuse them) */
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(out, "tools")) > 0)
            cJSON_AddStringToObject(out, "tool_choice", type);
    } else if (!strcmp(type, "any")) {
        cJSON_AddStringToObject(out, "tool_choice", "required");
    } else if (!strcmp(type, "tool")) {
        if (!cJSON_IsString(name)) return bad(er, "'%s' %s", "tool_choice.name", "must be a string");
        cJSON *o = cJSON_AddObjectToObject(out, "tool_choice"), *fn;
        cJSON_AddStringToObject(o, "type", "function");
        fn = cJSON_AddObjectToObject(o, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
    } else {
        return bad(er, "'%s' %s", "tool_choice.type", "must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
    if (cJSON_IsTrue(dp)) cJSON_AddFalseToObject(out, "parallel_tool_calls");
    return 0;
}

/* thinking: {"type": "enabled", "budget_tokens"} | {"type": "disabled"} |
 * {"type": "adaptive"}: the template's enable_thinking switch (when it reasons).
 * budget_tokens must be below max_tokens, except under interleaved thinking
 * (the anthropic-beta header's interleaved-thinking-2025-05-14), where it is
 * the budget of the whole turn and may exceed max_tokens, as Anthropic allows.
 * display: "summarized" (the whole reasoning: no summarizer here) or "omitted"
 * (*omit set: the blocks come without their text). */
static int translate_thinking(srv_server *srv, const cJSON *root, bool interleaved, bool *omit, cJSON *out,
                              srv_err *er)
{
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (!th || cJSON_IsNull(th)) return 0;
    const char *type = type_of(th);
    if (!cJSON_IsObject(th) || !type ||
        (strcmp(type, "enabled") && strcmp(type, "disabled") && strcmp(type, "adaptive")))
        return bad(er, "'%s' %s", "thinking.type", "must be \"enabled\", \"disabled\" or \"adaptive\"");
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(th, "display");
    if (dp && !cJSON_IsNull(dp) &&
        (!cJSON_IsString(dp) ||
         (strcmp(dp->valuestring, "summarized") && strcmp(dp->valuestring, "omitted"))))
        return bad(er, "'%s' %s", "thinking.display", "must be \"summarized\" or \"omitted\"");
    *omit = cJSON_IsString(dp) && !strcmp(dp->valuestring, "omitted");
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(th, "budget_tokens");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    if (!strcmp(type, "enabled")) {
        if (!cJSON_IsNumber(bt) || bt->valuedouble != floor(bt->valuedouble) || bt->valuedouble < 1024)
            return bad(er, "'%s' %s", "thinking.budget_tokens", "must be an integer >= 1024");
        if (!interleaved && cJSON_IsNumber(mt) && bt->valuedouble >= mt->valuedouble)
            return bad(er, "'%s' %s", "thinking.budget_tokens", "must be less than max_tokens");
    }
    if (!srv->reasons || !strcmp(type, "adaptive")) return 0; /* the template's own default */
    cJSON *kw = cJSON_AddObjectToObject(out, "chat_template_kwargs");
    cJSON_AddBoolToObject(kw, "enable_thinking", !strcmp(type, "enabled"));
    return 0;
}

/* output_config: {"effort", "format": {"type": "json_schema", "schema"}}. */
static int translate_output(const cJSON *root, cJSON *out, srv_err *er)
{
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(root, "output_config");
    if (!oc || cJSON_IsNull(oc)) return 0;
    if (!cJSON_IsObject(oc)) return bad(er, "'%s' %s", "output_config", "must be an object");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(oc, "format");
    if (!f || cJSON_IsNull(f)) return 0;
    const char *type = type_of(f);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
    if (!type || strcmp(type, "json_schema") != 0 || !cJSON_IsObject(schema))
        return bad(er, "'%s' %s", "output_config.format",
                   "must be {\"type\": \"json_schema\", \"schema\": {...}}");
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format"), *js;
    cJSON_AddStringToObject(rf, "type", "json_schema");
    js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", "output");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, true));
    return 0;
}

/* Fields taken as they are (same name and meaning in OpenAI's body; seed is
 * kvinfer's extension) or accepted without effect. */
static const char *const passed[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "stream", "seed"
};
static const char *const accepted[] = {
    "system",        "messages",       "tools",         "tool_choice",  "thinking",
    "output_config", "stop_sequences", "metadata",      "service_tier", "context_management",
    "container",     "mcp_servers",    "cache_control", "inference_geo"
};

/* The fields this route knows; the request log names the others (accepted). */
static const srv_field_set known_fields[] = { { passed, sizeof passed / sizeof *passed },
                                              { accepted, sizeof accepted / sizeof *accepted } };

static bool listed(const char *k, const char *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, v[i])) return true;
    return false;
}

/* The OpenAI chat body of an Anthropic body (a cJSON tree), or NULL with *er
 * set. count: /v1/messages/count_tokens (max_tokens not required). */
static cJSON *translate(srv_server *srv, const cJSON *root, bool count, bool interleaved, bool *omit,
                        srv_err *er)
{
    if (!cJSON_IsObject(root)) {
        srv_err_set(er, 400, "invalid_request_error", NULL, "the body must be a JSON object");
        return NULL;
    }
    cJSON *out = cJSON_CreateObject();
    int rc = 0;
    for (const cJSON *f = root->child; f; f = f->next) {
        if (listed(f->string, passed, sizeof passed / sizeof *passed) && !cJSON_IsNull(f))
            cJSON_AddItemToObject(out, f->string, cJSON_Duplicate(f, true));
    }
    srv_log_unknown(root, known_fields, 2);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    const cJSON *temp = cJSON_GetObjectItemCaseSensitive(root, "temperature");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stop_sequences");
    if (!rc && !count && (!mt || cJSON_IsNull(mt)))
        rc = bad(er, "'%s' %s", "max_tokens", "is required: the most tokens to generate");
    if (!rc && cJSON_IsNumber(temp) && (temp->valuedouble < 0 || temp->valuedouble > 1))
        rc = bad(er, "'%s' %s", "temperature", "must be in [0, 1]");
    if (!rc && md && !cJSON_IsNull(md) && !cJSON_IsObject(md))
        rc = bad(er, "'%s' %s", "metadata", "must be an object");
    if (!rc && st && !cJSON_IsNull(st)) {
        const cJSON *s;
        bool ok = cJSON_IsArray(st);
        cJSON_ArrayForEach(s, st) ok = ok && cJSON_IsString(s) && s->valuestring[0];
        if (!ok)
            rc = bad(er, "'%s' %s", "stop_sequences", "must be an array of non-empty strings");
        else
            cJSON_AddItemToObject(out, "stop", cJSON_Duplicate(st, true));
    }
    if (count) cJSON_DeleteItemFromObjectCaseSensitive(out, "stream");
    if (!rc) rc = translate_messages(root, out, er);
    if (!rc) rc = translate_tools(root, out, er);
    if (!rc) rc = translate_tool_choice(root, out, er);
    if (!rc) rc = translate_thinking(srv, root, interleaved, omit, out, er);
    if (!rc) rc = translate_output(root, out, er);
    if (rc) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

/* ---- the response ---- */

/* "toolu_<n>_<k>": the call k of the request msg_<n>. */
static void tool_id(const srv_req *r, int k, char *buf, size_t cap)
{
    snprintf(buf, cap, "toolu_%s_%d", r->id + 4, k);
}

/* A call's input: its arguments parsed (an object), else {}. */
static cJSON *input_of(const char *args)
{
    cJSON *in = args ? cJSON_Parse(args) : NULL;
    if (cJSON_IsObject(in)) return in;
    cJSON_Delete(in);
    return cJSON_CreateObject();
}

static cJSON *tool_block(const srv_req *r, int k, const char *name, cJSON *input)
{
    char id[96];
    tool_id(r, k, id, sizeof id);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", name);
    cJSON_AddItemToObject(b, "input", input);
    return b;
}

static cJSON *text_block(int kind, const char *text)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", kind == BLK_THINKING ? "thinking" : "text");
    cJSON_AddStringToObject(b, kind == BLK_THINKING ? "thinking" : "text", text);
    if (kind == BLK_THINKING) cJSON_AddStringToObject(b, "signature", "");
    return b;
}

static const char *stop_reason(const srv_choice *c)
{
    if (srv_output_has_calls(c) && c->finish == KVI_FINISH_STOP) return "tool_use";
    if (c->stop_hit) return "stop_sequence";
    return c->finish == KVI_FINISH_LENGTH ? "max_tokens" : "end_turn";
}

static void add_stop_sequence(cJSON *o, const srv_choice *c)
{
    if (c->stop_hit && !srv_output_has_calls(c))
        cJSON_AddStringToObject(o, "stop_sequence", c->stop_hit);
    else
        cJSON_AddNullToObject(o, "stop_sequence");
}

/* usage; final: the figures at the end (else those known at the start). */
static cJSON *usage_json(const srv_req *r, bool final)
{
    const srv_choice *c = &r->ch[0];
    const int32_t cached = final ? c->usage.cached_tokens : 0;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", r->p.n_prompt - cached);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    cJSON_AddNumberToObject(u, "output_tokens", final ? c->usage.completion_tokens : 0);
    return u;
}

static char *sanitized(const char *t, size_t n) { return kvi_utf8_sanitize(t ? t : "", t ? n : 0); }

/* The content blocks of a finished choice: thinking, text, tool_use. */
static cJSON *content_blocks(const srv_req *r, const srv_choice *c)
{
    cJSON *a = cJSON_CreateArray();
    size_t n = 0;
    if (!c->co) {
        char *s = sanitized(c->text, c->len);
        if (s && *s) cJSON_AddItemToArray(a, text_block(BLK_TEXT, s));
        free(s);
        return a;
    }
    const msg_state *ms = r->api_state;
    const char *t = kvi_chat_output_reasoning(c->co, &n);
    char *s = n ? sanitized(t, n) : NULL;
    if (s) cJSON_AddItemToArray(a, text_block(BLK_THINKING, ms && ms->omit_thinking ? "" : s));
    free(s);
    t = kvi_chat_output_content(c->co, &n);
    s = n ? sanitized(t, n) : NULL;
    if (s) cJSON_AddItemToArray(a, text_block(BLK_TEXT, s));
    free(s);
    const int nc = kvi_chat_output_n_calls(c->co);
    for (int k = 0; k < nc; k++) {
        const char *name = NULL, *args = NULL;
        if (kvi_chat_output_call(c->co, k, &name, &args) == 0)
            cJSON_AddItemToArray(a, tool_block(r, k, name, input_of(args)));
    }
    return a;
}

/* The message object; final: with its content and ending. */
static cJSON *message_json(const srv_req *r, bool final)
{
    const srv_choice *c = &r->ch[0];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", r->srv->cfg.model_name);
    cJSON_AddItemToObject(o, "content", final ? content_blocks(r, c) : cJSON_CreateArray());
    if (final) {
        cJSON_AddStringToObject(o, "stop_reason", stop_reason(c));
        add_stop_sequence(o, c);
    } else {
        cJSON_AddNullToObject(o, "stop_reason");
        cJSON_AddNullToObject(o, "stop_sequence");
    }
    cJSON_AddItemToObject(o, "usage", usage_json(r, final));
    return o;
}

static char *messages_response_json(srv_req *r)
{
    cJSON *o = message_json(r, true);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- streaming ---- */

/* An event's data object {"type": type} (the caller adds its fields). */
static cJSON *ev(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static bool start(srv_req *r, msg_state *ms)
{
    if (ms->started) return true;
    ms->started = true;
    cJSON *o = ev("message_start");
    cJSON_AddItemToObject(o, "message", message_json(r, false));
    return srv_sse_named(r, o) && srv_sse_named(r, ev("ping"));
}

static bool block_stop(srv_req *r, msg_state *ms)
{
    if (ms->open < 0) return true;
    cJSON *o = ev("content_block_stop");
    cJSON_AddNumberToObject(o, "index", ms->open);
    ms->open = -1;
    ms->open_kind = BLK_NONE;
    return srv_sse_named(r, o);
}

static bool block_start(srv_req *r, msg_state *ms, cJSON *block)
{
    bool ok = block_stop(r, ms);
    cJSON *o = ev("content_block_start");
    cJSON_AddNumberToObject(o, "index", ms->n_blocks);
    cJSON_AddItemToObject(o, "content_block", block);
    ms->open = ms->n_blocks++;
    return srv_sse_named(r, o) && ok;
}

/* A text or thinking delta, in a block of its kind (opened when needed). */
static bool text_delta(srv_req *r, msg_state *ms, int kind, const char *text)
{
    if (!text || !*text) return true;
    bool ok = true;
    if (ms->open_kind != kind) {
        ok = block_start(r, ms, text_block(kind, ""));
        ms->open_kind = kind;
    }
    if (kind == BLK_THINKING && ms->omit_thinking) return ok; /* the block, without its text */
    cJSON *o = ev("content_block_delta"), *d;
    cJSON_AddNumberToObject(o, "index", ms->open);
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", kind == BLK_THINKING ? "thinking_delta" : "text_delta");
    cJSON_AddStringToObject(d, kind == BLK_THINKING ? "thinking" : "text", text);
    return srv_sse_named(r, o) && ok;
}

/* A whole call: its block, the input as one input_json_delta, the block's end. */
static bool call_events(srv_req *r, msg_state *ms, int k, const char *name, const char *args)
{
    bool ok = block_start(r, ms, tool_block(r, k, name, cJSON_CreateObject()));
    cJSON *in = input_of(args);
    char *js = cJSON_PrintUnformatted(in);
    cJSON_Delete(in);
    cJSON *o = ev("content_block_delta"), *d;
    cJSON_AddNumberToObject(o, "index", ms->open);
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", "input_json_delta");
    cJSON_AddStringToObject(d, "partial_json", js ? js : "{}");
    cJSON_free(js);
    ok = srv_sse_named(r, o) && ok;
    return block_stop(r, ms) && ok;
}

/* What the parser settled since the last event: reasoning, content, calls. */
static bool parsed_events(srv_req *r, srv_choice *c, msg_state *ms, bool final)
{
    cJSON *d = cJSON_CreateObject();
    srv_output_delta(r, c, d, final);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(d, "reasoning_content");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(d, "content");
    bool ok = text_delta(r, ms, BLK_THINKING, cJSON_IsString(rs) ? rs->valuestring : NULL);
    ok = text_delta(r, ms, BLK_TEXT, cJSON_IsString(ct) ? ct->valuestring : NULL) && ok;
    const cJSON *call;
    cJSON_ArrayForEach(call, cJSON_GetObjectItemCaseSensitive(d, "tool_calls"))
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(call, "index");
        ok = call_events(r, ms, cJSON_IsNumber(idx) ? idx->valueint : 0,
                         cJSON_IsString(name) ? name->valuestring : "",
                         cJSON_IsString(args) ? args->valuestring : "{}") &&
             ok;
    }
    cJSON_Delete(d);
    return ok;
}

static bool messages_sse_token(srv_req *r, srv_choice *c, const char *piece, size_t n)
{
    msg_state *ms = r->api_state;
    bool ok = start(r, ms);
    if (c->co) return parsed_events(r, c, ms, false) && ok;
    if (n == 0) return ok;
    char *s = kvi_utf8_sanitize(piece, n);
    ok = s && text_delta(r, ms, BLK_TEXT, s) && ok;
    free(s);
    return ok;
}

static bool messages_sse_final(srv_req *r)
{
    msg_state *ms = r->api_state;
    srv_choice *c = &r->ch[0];
    bool ok = start(r, ms);
    if (r->error) {
        srv_err er = { 0 };
        srv_err_set(&er, r->err_code == KVI_E_TIMEOUT ? 503 : 500, "api_error", NULL, "%s", r->err_msg);
        return srv_sse_named(r, error_obj(&er)) && ok;
    }
    if (c->co) {
        ok = parsed_events(r, c, ms, true) && ok;
    } else {
        char *rest = sanitized(c->text ? c->text + c->sent : NULL, c->text ? c->len - c->sent : 0);
        c->sent = c->len;
        ok = rest && text_delta(r, ms, BLK_TEXT, rest) && ok;
        free(rest);
    }
    ok = block_stop(r, ms) && ok;
    cJSON *o = ev("message_delta"), *d;
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(c));
    add_stop_sequence(d, c);
    cJSON_AddItemToObject(o, "usage", usage_json(r, true));
    ok = srv_sse_named(r, o) && ok;
    return srv_sse_named(r, ev("message_stop")) && ok;
}

const srv_api srv_api_messages = {
    .name = "anthropic",
    .sse_token = messages_sse_token,
    .sse_final = messages_sse_final,
    .response_json = messages_response_json,
    .error_json = messages_error_json,
    .state_free = free,
};

/* ---- the routes ---- */

static int send_err(struct MHD_Connection *con, const srv_err *er)
{
    return srv_send_error(con, &srv_api_messages, er);
}

/* Whether the anthropic-beta header (comma-separated names) names interleaved thinking. */
static bool interleaved_beta(struct MHD_Connection *con)
{
    static const char name[] = "interleaved-thinking-2025-05-14";
    const char *v = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "anthropic-beta");
    for (const char *p = v; p && *p;) {
        p += strspn(p, " \t,");
        const size_t n = strcspn(p, ",");
        size_t m = n;
        while (m && (p[m - 1] == ' ' || p[m - 1] == '\t')) m--;
        if (m == sizeof name - 1 && !strncmp(p, name, m)) return true;
        p += n;
    }
    return false;
}

/* omit: set when thinking.display is "omitted". */
static int parse_body(srv_server *srv, const char *body, size_t len, bool count, bool interleaved, bool *omit,
                      srv_params *p, srv_err *er)
{
    bool oom = false;
    cJSON *root = kvi_json_parse(body ? body : "", len, &oom);
    if (!root)
        return srv_err_set(er, oom ? 500 : 400, "invalid_request_error", NULL,
                           oom ? "out of memory" : "the body is not valid JSON");
    cJSON *out = translate(srv, root, count, interleaved, omit, er);
    cJSON_Delete(root);
    char *chat = out ? cJSON_PrintUnformatted(out) : NULL;
    cJSON_Delete(out);
    if (!chat) return out ? srv_err_set(er, 500, "api_error", NULL, "out of memory") : -1;
    const int rc = srv_parse_request(srv, chat, strlen(chat), true, p, er);
    free(chat);
    return rc;
}

int srv_messages_parse(srv_server *srv, const char *body, size_t len, bool count, srv_params *p, srv_err *er)
{
    bool omit = false;
    return parse_body(srv, body, len, count, false, &omit, p, er);
}

static int count_tokens(srv_server *srv, struct MHD_Connection *con, const char *body, size_t len)
{
    srv_err er = { 0 };
    srv_params p;
    bool omit = false;
    if (parse_body(srv, body, len, true, interleaved_beta(con), &omit, &p, &er)) return send_err(con, &er);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", p.n_prompt);
    srv_params_free(&p);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_send_body(con, 200, s);
}

int srv_messages(srv_server *srv, struct MHD_Connection *con, const char *url, const char *body, size_t len)
{
    srv_err er = { 0 };
    if (!strcmp(url, "/v1/messages/count_tokens")) return count_tokens(srv, con, body, len);
    if (strcmp(url, "/v1/messages") != 0) {
        srv_err_set(&er, 404, "not_found_error", NULL, "no route POST %.200s", url);
        return send_err(con, &er);
    }
    srv_req *r = srv_req_new(srv, &srv_api_messages, "msg");
    msg_state *ms = r ? calloc(1, sizeof *ms) : NULL;
    if (!ms) {
        if (r) srv_req_discard(r);
        srv_err_set(&er, 500, "api_error", NULL, "out of memory");
        return send_err(con, &er);
    }
    ms->open = -1;
    r->api_state = ms;
    r->id[3] = '_'; /* "msg_<n>", Anthropic's spelling */
    if (parse_body(srv, body, len, false, interleaved_beta(con), &ms->omit_thinking, &r->p, &er)) {
        srv_req_discard(r);
        return send_err(con, &er);
    }
    return srv_answer(srv, con, r);
}
