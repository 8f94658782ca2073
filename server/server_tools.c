/*
 * server_tools.c — tools and reasoning on /v1/chat/completions.
 *
 * Request side: "tools", "tool_choice" and "parallel_tool_calls" are checked
 * (OpenAI's shapes; 400 otherwise) and become the output parser's settings:
 * the tool-call format the chat template shows (kvi_tool_format_of, read once
 * at start) and whether reasoning is split off. "required" or a named function
 * adds a grammar built from the tools' parameter schemas (kvi_tool_call_gbnf)
 * over a vocabulary where the format's control-token markers count as their
 * text, so even a weak model writes a valid call.
 *
 * Output side: each choice of such a request has a parser (c->co,
 * src/template/chat_output.c) that splits the generated text into content,
 * reasoning and tool calls; they become message.content / reasoning_content /
 * tool_calls, and in streams delta.content / delta.reasoning_content /
 * delta.tool_calls (a call is sent whole once it is complete).
 *
 * Invariants: c->co exists exactly when the request parses tool calls or
 * reasoning. The parser has been fed c->text[0, c->co_fed), only text that no
 * stop string can still cut. The stream has sent content[0, sent_content),
 * reasoning[0, sent_reasoning) and calls [0, sent_calls): prefixes of the
 * parser's append-only results, so the deltas joined are the final message.
 */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- start-up ---- */

void srv_tools_init(srv_server *srv, const char *template_text)
{
    srv->tool_format = template_text ? kvi_tool_format_of(template_text) : KVI_TOOLS_NONE;
    srv->reasons = template_text && !srv->cfg.no_reasoning && kvi_template_reasons(template_text);
    /* the variables /v1/responses may set or fill (reasoning.effort, reasoning items) */
    srv->tmpl_think_switch = template_text && strstr(template_text, "enable_thinking");
    srv->tmpl_effort = template_text && strstr(template_text, "reasoning_effort");
    srv->tmpl_reasoning_in = template_text && strstr(template_text, "reasoning_content");
    if (template_text && !srv->cfg.quiet)
        srv_note(srv, "chat template: tool calls: %s; reasoning: %s",
                 srv->tool_format ? kvi_tool_format_name(srv->tool_format) : "none (tools are refused)",
                 srv->reasons ? "split off into reasoning_content" : "none");
}

void srv_tools_free(srv_server *srv)
{
    kvi_grammar_vocab_free(srv->gv_markers);
    srv->gv_markers = NULL;
}

/* ---- the request ---- */

/* A 400 about tools[i]'s field ("" for the entry itself). */
static int tool_err(srv_err *er, int i, const char *field, const char *what)
{
    return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'tools[%d]%s' %s", i, field, what);
}

/* OpenAI's rule for function names: 1-64 of [a-zA-Z0-9_-]. */
static bool name_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') ||
              s[n] == '_' || s[n] == '-'))
            return false;
    return n >= 1 && n <= 64;
}

/* Checks "tools": every entry {"type": "function", "function": {"name",
 * "description"?, "parameters"?, "strict"?}} with distinct names. Returns the
 * number of tools, or -1 with *er set. */
static int check_tools(const cJSON *tools, srv_err *er)
{
    if (!cJSON_IsArray(tools))
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
            return tool_err(er, i, ".type", "must be \"function\"");
        if (!cJSON_IsObject(fn)) return tool_err(er, i, ".function", "must be an object");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(fn, "strict");
        if (!cJSON_IsString(name) || !name_ok(name->valuestring))
            return tool_err(er, i, ".function.name", "must be 1 to 64 letters, digits, '_' or '-'");
        if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc))
            return tool_err(er, i, ".function.description", "must be a string");
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
            return tool_err(er, i, ".function.parameters", "must be a JSON Schema object");
        if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
            return tool_err(er, i, ".function.strict", "must be a boolean");
        for (const cJSON *u = tools->child; u != t; u = u->next) {
            const cJSON *un =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "function"), "name");
            if (!strcmp(un->valuestring, name->valuestring))
                return tool_err(er, i, ".function.name", "names a function that an earlier entry names too");
        }
        i++;
    }
    return i;
}

static bool has_tool(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *n =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return true;
    }
    return false;
}

/* The grammar vocabulary with the format's markers (built once, under srv->mu). */
static const kvi_grammar_vocab *marker_vocab(srv_server *srv, srv_err *er)
{
    pthread_mutex_lock(&srv->mu);
    kvi_error err = { 0 };
    if (!srv->gv_markers)
        srv->gv_markers = kvi_grammar_vocab_create_markers(srv->m, srv->tool_format, srv->reasons, &err);
    const kvi_grammar_vocab *v = srv->gv_markers;
    pthread_mutex_unlock(&srv->mu);
    if (!v) srv_err_set(er, 500, "server_error", NULL, "out of memory (the grammar vocabulary)");
    return v;
}

int srv_parse_tools(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON *ptc = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    int n_tools = 0;
    if (tools && !cJSON_IsNull(tools) && (n_tools = check_tools(tools, er)) < 0) return -1;
    bool parallel = true;
    if (ptc && !cJSON_IsNull(ptc)) {
        if (!cJSON_IsBool(ptc))
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'parallel_tool_calls' must be a boolean");
        parallel = cJSON_IsTrue(ptc);
    }
    p->tool_choice = n_tools > 0 ? SRV_TOOLS_AUTO : SRV_TOOLS_NONE;
    const char *named = NULL;
    if (tc && !cJSON_IsNull(tc)) {
        if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")) {
            p->tool_choice = SRV_TOOLS_NONE;
        } else if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "auto")) {
            p->tool_choice = SRV_TOOLS_AUTO;
        } else if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) {
            p->tool_choice = SRV_TOOLS_REQUIRED;
        } else if (cJSON_IsObject(tc)) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
            const cJSON *name =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !cJSON_IsString(name))
                return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                                   "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                                   "\"function\", \"function\": {\"name\": ...}}");
            named = name->valuestring;
            p->tool_choice = SRV_TOOLS_NAMED;
        } else {
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                               "\"function\", \"function\": {\"name\": ...}}");
        }
        if (p->tool_choice != SRV_TOOLS_NONE && n_tools == 0)
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                               "are specified.");
        if (named && !has_tool(tools, named))
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'tool_choice' names the function '%.64s', which is not in 'tools'", named);
    }
    p->reasoning = srv->tmpl && srv->reasons;
    if (p->tool_choice == SRV_TOOLS_NONE) return 0;
    if (!srv->tmpl)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           "'tools': the model ships no chat template, and the built-in layouts cannot show "
                           "tools; start the server with --chat-template-file (a template that supports "
                           "tools) or use \"tool_choice\": \"none\"");
    if (srv->tool_format == KVI_TOOLS_NONE)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           "'tools': the chat template writes tool calls in a format kvinfer cannot parse; "
                           "the calls could not be returned as tool_calls (use \"tool_choice\": \"none\" "
                           "or --chat-template-file)");
    p->tool_format = srv->tool_format;
    p->tool_parallel = parallel;
    if (p->tool_choice != SRV_TOOLS_AUTO && p->grammar)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           "'tool_choice' %s cannot be combined with 'grammar' or a JSON 'response_format'",
                           named ? "naming a function" : "\"required\"");
    return 0;
}

int srv_tools_grammar(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er)
{
    if (p->tool_choice != SRV_TOOLS_REQUIRED && p->tool_choice != SRV_TOOLS_NAMED) return 0;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON *nm =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
    const char *named = p->tool_choice == SRV_TOOLS_NAMED && cJSON_IsString(nm) ? nm->valuestring : NULL;
    /* a reasoning model may think first: a block it opens, or the one the
     * prompt opened (then the reply starts inside it) */
    const unsigned flags = (p->tool_parallel ? KVI_TOOL_CALL_PARALLEL : 0u) |
                           (p->reasoning ? KVI_TOOL_CALL_THINK : 0u) |
                           (p->reasoning && p->in_reasoning ? KVI_TOOL_CALL_IN_THINK : 0u);
    char *tools_json = cJSON_PrintUnformatted(tools);
    if (!tools_json) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    kvi_error err = { 0 };
    char *gbnf = kvi_tool_call_gbnf(p->tool_format, tools_json, strlen(tools_json), named, flags, &err);
    free(tools_json);
    if (!gbnf)
        return err.code == KVI_E_NOMEM
                   ? srv_err_set(er, 500, "server_error", NULL, "out of memory")
                   : srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'tools': %s", err.msg);
    p->grammar = kvi_grammar_parse(gbnf, strlen(gbnf), &err);
    free(gbnf);
    if (!p->grammar)
        return srv_err_set(er, 500, "server_error", NULL, "the tool-call grammar does not compile: %s",
                           err.msg);
    if (!(p->grammar_vocab = marker_vocab(srv, er))) return -1;
    p->forced_call = true;
    return 0;
}

/* ---- the output ---- */

int32_t srv_token_text(const srv_req *r, int32_t tok, char *buf, size_t cap)
{
    const kvi_model *m = r->srv->m;
    int32_t n = kvi_token_to_piece(m, tok, buf, cap, false);
    if (n < 0 || (size_t)n > cap) return 0;
    if (n > 0 || (!r->p.tool_format && !r->p.reasoning)) return n;
    /* a control token: its special text, when it is a marker the parser reads */
    int32_t k = kvi_token_to_piece(m, tok, buf, cap, true);
    if (k <= 0 || (size_t)k >= cap) return 0;
    buf[k] = 0;
    return kvi_tool_format_marker((kvi_tool_format)r->p.tool_format, r->p.reasoning, buf) ? k : 0;
}

int srv_output_init(srv_req *r, srv_choice *c)
{
    if (!r->p.chat || (!r->p.tool_format && !r->p.reasoning)) return 0;
    kvi_chat_output_params op = { .tools = (kvi_tool_format)r->p.tool_format,
                                  .reasoning = r->p.reasoning,
                                  .in_reasoning = r->p.reasoning && r->p.in_reasoning };
    c->co = kvi_chat_output_create(&op);
    return c->co ? 0 : KVI_E_NOMEM;
}

void srv_output_free(srv_choice *c)
{
    kvi_chat_output_free(c->co);
    c->co = NULL;
}

bool srv_output_feed(srv_choice *c, size_t upto)
{
    if (!c->co || upto <= c->co_fed) return true;
    const int rc = kvi_chat_output_feed(c->co, c->text + c->co_fed, upto - c->co_fed);
    c->co_fed = upto;
    return rc == 0;
}

bool srv_output_finish(srv_choice *c)
{
    if (!c->co) return true;
    bool ok = srv_output_feed(c, c->len);
    return kvi_chat_output_finish(c->co) == 0 && ok;
}

bool srv_output_has_calls(const srv_choice *c) { return c->co && kvi_chat_output_n_calls(c->co) > 0; }

/* {"index", "id", "type": "function", "function": {"name", "arguments"}} of call k. */
static cJSON *call_json(const srv_req *r, const srv_choice *c, int k, bool with_index)
{
    const char *name = NULL, *args = NULL;
    if (kvi_chat_output_call(c->co, k, &name, &args) != 0) return NULL;
    cJSON *o = cJSON_CreateObject();
    char id[80];
    snprintf(id, sizeof id, "call_%s_%d_%d", r->id + (strncmp(r->id, "chatcmpl-", 9) ? 0 : 9), c->index, k);
    if (with_index) cJSON_AddNumberToObject(o, "index", k);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", args);
    return o;
}

/* The bytes of text[*sent, n) ready to send (whole UTF-8 characters unless
 * final), as a sanitized string, advancing *sent; NULL when none (or out of memory). */
static char *take(const char *text, size_t n, size_t *sent, bool final)
{
    if (!text || n <= *sent) return NULL;
    size_t k = final ? n - *sent : kvi_utf8_complete_prefix(text + *sent, n - *sent);
    if (k == 0) return NULL;
    char *s = kvi_utf8_sanitize(text + *sent, k);
    *sent += k;
    return s;
}

bool srv_output_delta(srv_req *r, srv_choice *c, cJSON *d, bool final)
{
    bool added = false;
    size_t n = 0;
    const char *t = kvi_chat_output_reasoning(c->co, &n);
    char *s = take(t, n, &c->sent_reasoning, final);
    if (s) {
        cJSON_AddStringToObject(d, "reasoning_content", s);
        added = true;
    }
    free(s);
    t = kvi_chat_output_content(c->co, &n);
    if ((s = take(t, n, &c->sent_content, final))) {
        cJSON_AddStringToObject(d, "content", s);
        added = true;
    }
    free(s);
    const int nc = kvi_chat_output_n_calls(c->co);
    if (nc > c->sent_calls) {
        cJSON *a = cJSON_AddArrayToObject(d, "tool_calls");
        for (; c->sent_calls < nc; c->sent_calls++) {
            cJSON *call = call_json(r, c, c->sent_calls, true);
            if (call) cJSON_AddItemToArray(a, call);
        }
        added = true;
    }
    return added;
}

void srv_output_message(srv_req *r, srv_choice *c, cJSON *m)
{
    size_t n = 0;
    const char *t = kvi_chat_output_content(c->co, &n);
    const int nc = kvi_chat_output_n_calls(c->co);
    char *s = kvi_utf8_sanitize(t ? t : "", t ? n : 0);
    if (nc > 0 && n == 0)
        cJSON_AddNullToObject(m, "content"); /* OpenAI: content null beside tool_calls */
    else
        cJSON_AddStringToObject(m, "content", s ? s : "");
    free(s);
    t = kvi_chat_output_reasoning(c->co, &n);
    if (t && n > 0) {
        s = kvi_utf8_sanitize(t, n);
        cJSON_AddStringToObject(m, "reasoning_content", s ? s : "");
        free(s);
    }
    if (nc > 0) {
        cJSON *a = cJSON_AddArrayToObject(m, "tool_calls");
        for (int k = 0; k < nc; k++) {
            cJSON *call = call_json(r, c, k, false);
            if (call) cJSON_AddItemToArray(a, call);
        }
    }
}
