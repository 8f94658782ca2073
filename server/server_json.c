/*
 * server_json.c — OpenAI-compatible JSON: request fields to srv_params, the
 * server-sent events of a stream, the non-streamed responses and the errors.
 *
 * Requests: unknown fields are accepted and named in the request log (the
 * known ones: srv_fields_completions / srv_fields_chat, server_log.c); known
 * fields of the wrong type or out of range are a 400 naming the field. Prompt ids are range-checked here, and a
 * prompt plus max_tokens past the context is context_length_exceeded (400), as
 * OpenAI answers. Response text always goes through kvi_utf8_sanitize so that
 * the JSON is valid UTF-8 whatever the tokens were.
 *
 * Logprobs, in OpenAI's two shapes. Chat ("logprobs": true, "top_logprobs":
 * 0..20): choices[i].logprobs.content[j] = {token, logprob, bytes, top_logprobs:
 * [{token, logprob, bytes}]}. Completions ("logprobs": 0..20): choices[i].logprobs
 * = {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}, the
 * top dictionary also holding the sampled token (OpenAI's "up to logprobs + 1"),
 * text_offset counted in bytes of the completion text from 0. Streamed chunks
 * carry the entry of their token. Values are the log-softmax of the RAW logits
 * (before penalties, temperature and top-k/top-p/min-p), as OpenAI reports them;
 * token strings render special tokens ("</s>"); bytes are the token's own bytes.
 * A stop string's cut drops the entries of tokens wholly after it.
 *
 * Constrained output: "grammar" (GBNF) or "response_format" ({"type":
 * "json_object"} or {"type": "json_schema", "json_schema": {"name", "schema",
 * "strict"}}) compiles to one kvi_grammar per request; a grammar that does not
 * parse, a schema keyword that cannot be enforced, or both fields at once are a
 * 400 carrying the library's message. "logit_bias" keys must be token ids in
 * [0, n_vocab), values in [-100, 100]; anything else is a 400.
 */
#include "server/server.h"
#include "formats/json_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

char *srv_error_json(const srv_err *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *o = cJSON_AddObjectToObject(root, "error");
    char *clean = kvi_utf8_sanitize(e->msg, strlen(e->msg));
    cJSON_AddStringToObject(o, "message", clean ? clean : "error");
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0])
        cJSON_AddStringToObject(o, "param", e->param);
    else
        cJSON_AddNullToObject(o, "param");
    if (e->code)
        cJSON_AddStringToObject(o, "code", e->code);
    else
        cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    free(clean);
    return s;
}

void srv_params_free(srv_params *p)
{
    free(p->prompt);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    kvi_grammar_free(p->grammar);
    free(p->bias_ids);
    free(p->bias_vals);
    memset(p, 0, sizeof *p);
}

static int bad(srv_err *er, const char *field, const char *what)
{
    return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'%s' %s", field, what);
}

/* A number field within [lo, hi]; absent leaves *out. */
static int num_field(const cJSON *o, const char *name, double lo, double hi, bool integer, double *out,
                     srv_err *er)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return bad(er, name, "must be a number");
    const double x = v->valuedouble;
    if (!isfinite(x) || (integer && x != floor(x)))
        return bad(er, name, integer ? "must be an integer" : "must be finite");
    if (x < lo || x > hi) {
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'%s' is %g, outside [%g, %g]",
                           name, x, lo, hi);
    }
    *out = x;
    return 0;
}

static int bool_field(const cJSON *o, const char *name, bool *out, srv_err *er)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return bad(er, name, "must be true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* kvinfer's "context_policy": "error" opts out of the server's --ctx-policy, its
 * name opts in; absent: the server's (evicting when it has one). */
static int srv_ctx_policy_field(const srv_server *srv, const cJSON *o, srv_params *p, srv_err *er)
{
    const char *own = srv->cfg.ctx_policy;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "context_policy");
    p->ctx_evict = own != NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return bad(er, "context_policy", "must be a string");
    if (!strcmp(v->valuestring, "error")) {
        p->ctx_evict = false;
        return 0;
    }
    if (own && !strcmp(v->valuestring, own)) return 0;
    return srv_err_set(
        er, 400, "invalid_request_error", "invalid_value",
        "'context_policy' '%.40s': this server's policy is '%s' (serve --ctx-policy NAME: shift, "
        "sinks, heavy)",
        v->valuestring, own ? own : "error");
}

/* Chat: "logprobs": bool, "top_logprobs": 0..20 (only with logprobs true).
 * Completions: "logprobs": 0..20 or null. */
static int parse_logprobs(const cJSON *root, bool chat, srv_params *p, srv_err *er)
{
    double k = 0;
    int rc;
    if (chat) {
        if ((rc = bool_field(root, "logprobs", &p->logprobs, er))) return rc;
        if ((rc = num_field(root, "top_logprobs", 0, KVI_LOGPROBS_MAX, true, &k, er))) return rc;
        if (k > 0 && !p->logprobs) return bad(er, "top_logprobs", "requires \"logprobs\": true");
    } else {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        if (!v || cJSON_IsNull(v)) return 0;
        if ((rc = num_field(root, "logprobs", 0, KVI_LOGPROBS_MAX, true, &k, er))) return rc;
        p->logprobs = true;
    }
    p->top_logprobs = (int32_t)k;
    return 0;
}

static int push_ids(srv_params *p, const int32_t *ids, int32_t n)
{
    int32_t *np = realloc(p->prompt, ((size_t)p->n_prompt + (size_t)n + 1) * sizeof *np);
    if (!np) return -1;
    p->prompt = np;
    memcpy(p->prompt + p->n_prompt, ids, (size_t)n * sizeof *ids);
    p->n_prompt += n;
    return 0;
}

static int tokenize_into(const kvi_model *m, const char *s, bool add_special, srv_params *p, srv_err *er)
{
    const size_t len = strlen(s);
    int32_t n = kvi_tokenize(m, s, len, add_special, false, NULL, 0);
    if (n == KVI_E_NOMEM) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    if (n < 0) return srv_err_set(er, 400, "invalid_request_error", NULL, "the prompt cannot be tokenized");
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    n = kvi_tokenize(m, s, len, add_special, false, ids, n);
    int rc = n >= 0 ? push_ids(p, ids, n) : -1;
    free(ids);
    if (rc) return srv_err_set(er, 500, "server_error", NULL, "out of memory"); /* either fails only so */
    return 0;
}

static int ids_from_array(const cJSON *a, const char *field, int32_t n_vocab, srv_params *p, srv_err *er)
{
    const int n = cJSON_GetArraySize(a);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a)
    {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
            free(ids);
            return bad(er, field, "must hold only integer token ids");
        }
        if (v->valuedouble < 0 || v->valuedouble >= n_vocab) {
            free(ids);
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'%s': token id %.0f at position %d is out of range [0, %d)", field,
                               v->valuedouble, i, (int)n_vocab);
        }
        ids[i++] = (int32_t)v->valuedouble;
    }
    int rc = push_ids(p, ids, i);
    free(ids);
    return rc ? srv_err_set(er, 500, "server_error", NULL, "out of memory") : 0;
}

static int parse_prompt(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er)
{
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const int32_t nv = kvi_n_vocab(srv->m);
    if (!pr)
        return srv_err_set(er, 400, "invalid_request_error", "missing_required_parameter",
                           "'prompt' is required");
    if (cJSON_IsString(pr)) return tokenize_into(srv->m, pr->valuestring, true, p, er);
    if (!cJSON_IsArray(pr) || cJSON_GetArraySize(pr) == 0)
        return bad(pr ? er : er, "prompt",
                   "must be a string, an array of token ids, or an array of one of them");
    const cJSON *first = cJSON_GetArrayItem(pr, 0);
    if (cJSON_IsNumber(first)) return ids_from_array(pr, "prompt", nv, p, er);
    if (cJSON_GetArraySize(pr) != 1)
        return bad(er, "prompt", "may hold only one prompt (batches are not supported)");
    if (cJSON_IsString(first)) return tokenize_into(srv->m, first->valuestring, true, p, er);
    if (cJSON_IsArray(first)) return ids_from_array(first, "prompt", nv, p, er);
    return bad(er, "prompt", "must be a string or token ids");
}

/* A chat body's messages for the built-in layouts (content parts joined). */
typedef struct chat_msgs {
    kvi_chat_msg *v;
    char **owned; /* [n] joined content parts, or NULL */
    int n;
} chat_msgs;

static void chat_msgs_free(chat_msgs *c)
{
    for (int k = 0; c->owned && k < c->n; k++) free(c->owned[k]);
    free(c->owned);
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* The text of a content part (text / input_text: "text", refusal: "refusal"),
 * or NULL with *er set: media parts (this server's models take text only) and
 * unknown types are a 400 naming the part. */
static const char *part_text(const cJSON *part, int i, int j, srv_err *er)
{
    static const char *const media[] = { "image_url", "input_image", "image", "input_audio", "audio",
                                         "audio_url", "video_url",   "video", "file",        "input_file" };
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
        srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                    "'messages[%d].content[%d]' must be an object with a string \"type\"", i, j);
        return NULL;
    }
    const char *ty = type->valuestring;
    const bool refusal = !strcmp(ty, "refusal");
    if (refusal || !strcmp(ty, "text") || !strcmp(ty, "input_text")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, refusal ? "refusal" : "text");
        if (cJSON_IsString(t)) return t->valuestring;
        srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                    "'messages[%d].content[%d].%s' must be a string", i, j, refusal ? "refusal" : "text");
        return NULL;
    }
    for (size_t k = 0; k < sizeof media / sizeof *media; k++)
        if (!strcmp(ty, media[k])) {
            srv_err_set(er, 400, "invalid_request_error", "unsupported_content",
                        "this model takes text only: 'messages[%d].content[%d]' is %s %s part (%s)", i, j,
                        strstr(ty, "audio") || strstr(ty, "image") ? "an" : "a",
                        strstr(ty, "image")   ? "image"
                        : strstr(ty, "audio") ? "audio"
                        : strstr(ty, "video") ? "video"
                                              : "file",
                        ty);
            return NULL;
        }
    srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                "'messages[%d].content[%d]' has an unknown type '%.60s' (text parts only)", i, j, ty);
    return NULL;
}

/* A list of content parts as one string (malloc'd into *out): the texts joined
 * with "\n", as vLLM joins them for a template that takes a string. */
static int join_parts(const cJSON *parts, int i, char **out, srv_err *er)
{
    size_t len = 0;
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, parts)
    {
        const char *t = part_text(part, i, j++, er);
        if (!t) return -1;
        len += strlen(t) + 1;
    }
    if (!(*out = malloc(len + 1))) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    size_t at = 0;
    j = 0;
    cJSON_ArrayForEach(part, parts)
    {
        const char *t = part_text(part, i, j, er);
        const size_t n = strlen(t);
        if (j++) (*out)[at++] = '\n';
        memcpy(*out + at, t, n);
        at += n;
    }
    (*out)[at] = 0;
    return 0;
}

/* Checks the body's messages (each an object with a string role and a string,
 * parts or null content) and collects them. 0, or -1 with *er set. */
static int collect_messages(const cJSON *root, chat_msgs *c, srv_err *er)
{
    memset(c, 0, sizeof *c);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!ms)
        return srv_err_set(er, 400, "invalid_request_error", "missing_required_parameter",
                           "'messages' is required");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) == 0)
        return bad(er, "messages", "must be a non-empty array");
    const int n = cJSON_GetArraySize(ms);
    c->n = n;
    c->v = calloc((size_t)n, sizeof *c->v);
    c->owned = calloc((size_t)n, sizeof *c->owned);
    if (!c->v || !c->owned) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    int i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, ms)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role))
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'messages[%d].role' must be a string", i);
        c->v[i].role = role->valuestring;
        static const char *const roles[] = { "system", "developer", "user",   "assistant",
                                             "tool",   "function",  "ipython" };
        size_t r = 0;
        while (r < sizeof roles / sizeof *roles && strcmp(roles[r], role->valuestring) != 0) r++;
        if (r == sizeof roles / sizeof *roles)
            return srv_err_set(
                er, 400, "invalid_request_error", "invalid_value",
                "'messages[%d].role' must be system, developer, user, assistant, tool, function "
                "or ipython (got '%.40s')",
                i, role->valuestring);
        const bool calls = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(msg, "tool_calls")) > 0 ||
                           cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(msg, "function_call"));
        if ((!content || cJSON_IsNull(content)) && r < 4 && !(r == 3 && calls))
            return srv_err_set(er, 400, "invalid_request_error", "missing_required_parameter",
                               "'messages[%d].content' is required for a %s message%s", i, roles[r],
                               r == 3 ? " without tool_calls" : "");
        if (cJSON_IsString(content)) {
            c->v[i].content = content->valuestring;
        } else if (cJSON_IsArray(content)) {
            if (join_parts(content, i, &c->owned[i], er)) return -1;
            c->v[i].content = c->owned[i];
        } else if (cJSON_IsNull(content) || !content) {
            c->v[i].content = "";
        } else {
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'messages[%d].content' must be a string or an array of parts", i);
        }
        i++;
    }
    return 0;
}

/* The built-in layout's ids for the messages (malloc'd, *n of them), or NULL with *er set. */
static int32_t *layout_ids(const srv_server *srv, const chat_msgs *c, int32_t *n, srv_err *er)
{
    kvi_error err = { 0 };
    int32_t cnt = kvi_chat_apply(srv->m, c->v, c->n, true, NULL, 0, &err);
    int32_t *ids = cnt >= 0 ? malloc(((size_t)cnt + 1) * sizeof *ids) : NULL;
    if (cnt < 0 || !ids) {
        srv_err_set(er, 400, "invalid_request_error", NULL, "%s",
                    err.msg[0] ? err.msg : "chat template failed");
    } else if (kvi_chat_apply(srv->m, c->v, c->n, true, ids, cnt, &err) != cnt) {
        srv_err_set(er, 500, "server_error", NULL, "chat template failed");
    } else {
        *n = cnt;
        return ids;
    }
    free(ids);
    return NULL;
}

/* The chat prompt's ids: the Jinja template's rendering (srv_template_ids), or
 * the built-in layout. */
static int parse_messages(srv_server *srv, const cJSON *root, const char *body, size_t len, srv_params *p,
                          srv_err *er)
{
    chat_msgs c;
    int rc = collect_messages(root, &c, er);
    if (!rc) {
        int32_t n = 0;
        int32_t *ids = srv->tmpl ? srv_template_ids(srv, body, len, &n, &p->in_reasoning, er)
                                 : layout_ids(srv, &c, &n, er);
        if (!ids)
            rc = -1;
        else if (push_ids(p, ids, n))
            rc = srv_err_set(er, 500, "server_error", NULL, "out of memory");
        free(ids);
    }
    chat_msgs_free(&c);
    return rc;
}

char *srv_chat_prompt_text(srv_server *srv, const char *body, size_t len, srv_err *er)
{
    cJSON *root = cJSON_ParseWithLength(body ? body : "", len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        srv_err_set(er, 400, "invalid_request_error", NULL, "the body must be a JSON object");
        return NULL;
    }
    chat_msgs c;
    char *text = NULL;
    if (collect_messages(root, &c, er) == 0) {
        if (srv->tmpl) {
            text = srv_template_render(srv, body, len, er);
        } else {
            int32_t n = 0;
            int32_t *ids = layout_ids(srv, &c, &n, er);
            int32_t need = ids ? kvi_detokenize(srv->m, ids, n, NULL, 0, true, false) : -1;
            char *raw = need >= 0 ? malloc((size_t)need + 1) : NULL;
            if (raw) kvi_detokenize(srv->m, ids, n, raw, (size_t)need + 1, true, false);
            text = raw ? kvi_utf8_sanitize(raw, (size_t)need) : NULL;
            if (ids && !text) srv_err_set(er, 500, "server_error", NULL, "out of memory");
            free(raw);
            free(ids);
        }
    }
    chat_msgs_free(&c);
    cJSON_Delete(root);
    return text;
}

static int parse_stop(const cJSON *root, srv_params *p, srv_err *er)
{
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!st || cJSON_IsNull(st)) return 0;
    if (cJSON_IsString(st)) {
        if (!*st->valuestring) return 0;
        if (strlen(st->valuestring) > SRV_STOP_MAX_LEN)
            return bad(er, "stop", "strings may be at most 256 bytes");
        if (!(p->stop[p->n_stop++] = strdup(st->valuestring)))
            return srv_err_set(er, 500, "server_error", NULL, "out of memory");
        return 0;
    }
    if (!cJSON_IsArray(st)) return bad(er, "stop", "must be a string or an array of strings");
    if (cJSON_GetArraySize(st) > SRV_MAX_STOP) return bad(er, "stop", "may hold at most 64 strings");
    const cJSON *v;
    cJSON_ArrayForEach(v, st)
    {
        if (!cJSON_IsString(v)) return bad(er, "stop", "must hold only strings");
        if (strlen(v->valuestring) > SRV_STOP_MAX_LEN)
            return bad(er, "stop", "strings may be at most 256 bytes");
        if (!*v->valuestring) continue;
        if (!(p->stop[p->n_stop++] = strdup(v->valuestring)))
            return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    }
    return 0;
}

/* GBNF text (or a JSON Schema's grammar) to p->grammar; a 400 naming `field`. */
static int compile_grammar(const char *text, size_t len, const char *field, srv_params *p, srv_err *er)
{
    kvi_error err = { 0 };
    p->grammar = kvi_grammar_parse(text, len, &err);
    if (!p->grammar)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'%s': %s", field, err.msg);
    return 0;
}

/* "grammar": GBNF text; "response_format": {"type": "text" | "json_object" |
 * "json_schema", "json_schema": {"name", "schema", "strict"}}. At most one. */
static int parse_constraints(const cJSON *root, srv_params *p, srv_err *er)
{
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (gr && !cJSON_IsNull(gr)) {
        if (!cJSON_IsString(gr)) return bad(er, "grammar", "must be a string of GBNF");
        if (rf && !cJSON_IsNull(rf)) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
                return bad(er, "grammar", "cannot be combined with a JSON response_format");
        }
        return compile_grammar(gr->valuestring, strlen(gr->valuestring), "grammar", p, er);
    }
    if (!rf || cJSON_IsNull(rf)) return 0;
    if (!cJSON_IsObject(rf)) return bad(er, "response_format", "must be an object");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(t)) return bad(er, "response_format.type", "must be a string");
    if (!strcmp(t->valuestring, "text")) return 0;
    char *schema = NULL;
    if (!strcmp(t->valuestring, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        if (!cJSON_IsObject(js)) return bad(er, "response_format.json_schema", "must be an object");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
        if (!cJSON_IsString(name)) return bad(er, "response_format.json_schema.name", "must be a string");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
        if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
            return bad(er, "response_format.json_schema.strict", "must be a boolean");
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (sc && !cJSON_IsObject(sc) && !cJSON_IsBool(sc))
            return bad(er, "response_format.json_schema.schema", "must be a JSON Schema object");
        schema = sc ? cJSON_PrintUnformatted(sc) : strdup("{}");
        if (!schema) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    } else if (strcmp(t->valuestring, "json_object") != 0) {
        return bad(er, "response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
    }
    kvi_error err = { 0 };
    char *gbnf = kvi_json_schema_to_gbnf(schema, schema ? strlen(schema) : 0, &err);
    free(schema);
    if (!gbnf)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'response_format': %s",
                           err.msg);
    int rc = compile_grammar(gbnf, strlen(gbnf), "response_format", p, er);
    free(gbnf);
    return rc;
}

/* The server's own biases (-l) after the request's; the sampler adds both
 * when a token is in each. 0, or -1 with *er set (out of memory). */
static int add_server_bias(const srv_config *cfg, srv_params *p, srv_err *er)
{
    if (cfg->n_bias == 0) return 0;
    const size_t n = (size_t)p->n_bias + (size_t)cfg->n_bias;
    int32_t *ids = realloc(p->bias_ids, n * sizeof *ids);
    if (ids) p->bias_ids = ids;
    float *vals = ids ? realloc(p->bias_vals, n * sizeof *vals) : NULL;
    if (vals) p->bias_vals = vals;
    if (!ids || !vals) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    memcpy(ids + p->n_bias, cfg->bias_ids, (size_t)cfg->n_bias * sizeof *ids);
    memcpy(vals + p->n_bias, cfg->bias_vals, (size_t)cfg->n_bias * sizeof *vals);
    p->n_bias += cfg->n_bias;
    return 0;
}

/* "logit_bias": {"token id": bias in [-100, 100]} (OpenAI's map), then the server's. */
static int parse_logit_bias(const srv_config *cfg, const cJSON *root, int32_t n_vocab, srv_params *p,
                            srv_err *er)
{
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return add_server_bias(cfg, p, er);
    if (!cJSON_IsObject(lb)) return bad(er, "logit_bias", "must be an object of token id strings to numbers");
    const int n = cJSON_GetArraySize(lb);
    if (n == 0) return add_server_bias(cfg, p, er);
    if (n > n_vocab) return bad(er, "logit_bias", "has more entries than the vocabulary has tokens");
    p->bias_ids = malloc((size_t)n * sizeof *p->bias_ids);
    p->bias_vals = malloc((size_t)n * sizeof *p->bias_vals);
    if (!p->bias_ids || !p->bias_vals) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    for (const cJSON *e = lb->child; e; e = e->next) {
        const char *k = e->string;
        char *end = NULL;
        long id = k && *k >= '0' && *k <= '9' ? strtol(k, &end, 10) : -1;
        if (id < 0 || !end || *end || id >= n_vocab)
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'logit_bias': key '%.40s' is not a token id in [0, %d)", k ? k : "", n_vocab);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100.0 && e->valuedouble <= 100.0))
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'logit_bias': the bias of token %ld must be a number in [-100, 100]", id);
        p->bias_ids[p->n_bias] = (int32_t)id;
        p->bias_vals[p->n_bias++] = (float)e->valuedouble;
    }
    return add_server_bias(cfg, p, er);
}

/* "model": any name is served by the one model and answered with its alias
 * (llama-server's way: agent CLIs send their own names); --strict-model
 * refuses other names with OpenAI's 404; a LoRA adapter's name selects the
 * adapter (srv_lora_parse). 0, or -1 with *er set. */
static int check_model(const srv_server *srv, const cJSON *root, srv_err *er)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model || cJSON_IsNull(model)) return 0;
    if (!cJSON_IsString(model)) return bad(er, "model", "must be a string");
    if (srv->cfg.strict_model && strcmp(model->valuestring, srv->cfg.model_name) != 0 &&
        !srv_lora_named(srv, model->valuestring))
        return srv_err_set(er, 404, "invalid_request_error", "model_not_found",
                           "The model '%.200s' does not exist (this server serves '%.200s')",
                           model->valuestring, srv->cfg.model_name);
    return 0;
}

int srv_check_model(const srv_server *srv, const cJSON *root, srv_err *er)
{
    return check_model(srv, root, er);
}

static int parse_request(srv_server *srv, const char *body, size_t len, bool chat, bool infill, srv_params *p,
                         srv_err *er)
{
    memset(p, 0, sizeof *p);
    p->chat = chat;
    p->infill = infill;
    p->n = 1;
    p->sp = srv->cfg.sampling;
    bool oom = false;
    cJSON *root = kvi_json_parse(body, len, &oom);
    if (oom) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    if (!root) return srv_err_set(er, 400, "invalid_request_error", NULL, "the body is not valid JSON");
    int rc = 0;
    double x;
    if (!cJSON_IsObject(root)) {
        rc = srv_err_set(er, 400, "invalid_request_error", NULL, "the body must be a JSON object");
        goto done;
    }
    srv_log_unknown(root, infill ? &srv_fields_infill : chat ? &srv_fields_chat : &srv_fields_completions, 1);
    if ((rc = check_model(srv, root, er))) goto done;
    if ((rc = srv_lora_parse(srv, root, p, er))) goto done;
    const int32_t big = 1 << 30;
    double mt = 0;
    if ((rc = num_field(root, "max_tokens", 1, big, true, &mt, er))) goto done;
    if ((rc = num_field(root, "max_completion_tokens", 1, big, true, &mt, er))) goto done;
    /* /infill: llama.cpp's n_predict too (-1: until the end of generation) */
    if (infill && (rc = num_field(root, "n_predict", -1, big, true, &mt, er))) goto done;
    p->max_tokens = mt > 0 ? (int32_t)mt : 0;
    const bool asked_max = p->max_tokens > 0;
    /* -n: the server's cap cuts a larger or absent max_tokens (finish "length") */
    if (srv->cfg.n_predict > 0 && (p->max_tokens == 0 || p->max_tokens > srv->cfg.n_predict))
        p->max_tokens = srv->cfg.n_predict;
    x = p->sp.temp;
    if ((rc = num_field(root, "temperature", 0, 2, false, &x, er))) goto done;
    p->sp.temp = (float)x;
    x = p->sp.top_p;
    if ((rc = num_field(root, "top_p", 0, 1, false, &x, er))) goto done;
    p->sp.top_p = x <= 0 ? 1e-6f : (float)x;
    x = p->sp.top_k;
    if ((rc = num_field(root, "top_k", 0, big, true, &x, er))) goto done;
    p->sp.top_k = (int32_t)x;
    x = p->sp.min_p;
    if ((rc = num_field(root, "min_p", 0, 1, false, &x, er))) goto done;
    p->sp.min_p = (float)x;
    x = p->sp.repeat_penalty;
    if ((rc = num_field(root, "repeat_penalty", 0, 10, false, &x, er))) goto done;
    p->sp.repeat_penalty = (float)x;
    /* OpenAI's penalties on generated tokens (the sampler applies them) */
    x = 0;
    if ((rc = num_field(root, "presence_penalty", -2, 2, false, &x, er))) goto done;
    p->sp.presence_penalty = (float)x;
    x = 0;
    if ((rc = num_field(root, "frequency_penalty", -2, 2, false, &x, er))) goto done;
    p->sp.frequency_penalty = (float)x;
    x = (double)p->sp.seed;
    if ((rc = num_field(root, "seed", -9007199254740992.0, 9007199254740992.0, true, &x, er))) goto done;
    p->sp.seed = (uint64_t)(int64_t)x;
    x = 1;
    if ((rc = num_field(root, "n", 1, SRV_MAX_N, true, &x, er))) goto done;
    p->n = (int)x;
    if ((rc = bool_field(root, "stream", &p->stream, er))) goto done;
    if ((rc = bool_field(root, "ignore_eos", &p->ignore_eos, er))) goto done;
    {
        bool spec = true; /* kvinfer's own: false opts out of the server's speculation */
        if ((rc = bool_field(root, "speculative", &spec, er))) goto done;
        p->no_spec = !spec;
    }
    if ((rc = srv_ctx_policy_field(srv, root, p, er))) goto done;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) {
            rc = bad(er, "stream_options", "must be an object");
            goto done;
        }
        if ((rc = bool_field(so, "include_usage", &p->include_usage, er))) goto done;
    }
    if ((rc = parse_stop(root, p, er))) goto done;
    if ((rc = parse_logprobs(root, chat, p, er))) goto done;
    if ((rc = srv_parse_sampling(srv, root, p, er))) goto done;
    if (infill && p->logprobs) { /* llama.cpp's /infill answer shape has no place for them here */
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        rc = bad(er, lp && !cJSON_IsNull(lp) ? "logprobs" : "n_probs",
                 "is not supported on /infill (its answer has no token probabilities; /v1/completions with "
                 "\"suffix\" gives them)");
        goto done;
    }
    if ((rc = parse_logit_bias(&srv->cfg, root, kvi_n_vocab(srv->m), p, er))) goto done;
    if ((rc = parse_constraints(root, p, er))) goto done;
    if (chat && (rc = srv_parse_tools(srv, root, p, er))) goto done;
    rc = chat                         ? parse_messages(srv, root, body, len, p, er)
         : srv_infill_wanted(root, p) ? srv_infill_prompt(srv, root, p, er)
                                      : parse_prompt(srv, root, p, er);
    if (rc) goto done;
    if (chat && (rc = srv_tools_grammar(srv, root, p, er))) goto done;
    if (p->n_prompt == 0) {
        rc = srv_err_set(er, 400, "invalid_request_error", "invalid_value", "the prompt is empty");
        goto done;
    }
    /* a cap the client did not ask for never makes the request too long: the
     * generation ends at the full context instead */
    /* past the context, an evicting request continues: an absent max_tokens is then the context */
    if (p->ctx_evict && p->max_tokens == 0) p->max_tokens = srv->cfg.n_ctx;
    if (!p->ctx_evict && ((int64_t)p->n_prompt + (asked_max ? p->max_tokens : 0) > srv->cfg.n_ctx ||
                          p->n_prompt > srv->cfg.n_ctx)) {
        rc = srv_err_set(
            er, 400, "invalid_request_error", "context_length_exceeded",
            "This model's maximum context length is %d tokens. However, you requested %lld tokens "
            "(%d in the prompt, %d in the completion).",
            srv->cfg.n_ctx, (long long)p->n_prompt + p->max_tokens, (int)p->n_prompt, (int)p->max_tokens);
        goto done;
    }
done:
    cJSON_Delete(root);
    if (rc) srv_params_free(p);
    return rc;
}

int srv_parse_request(srv_server *srv, const char *body, size_t len, bool chat, srv_params *p, srv_err *er)
{
    return parse_request(srv, body, len, chat, false, p, er);
}

int srv_parse_infill(srv_server *srv, const char *body, size_t len, srv_params *p, srv_err *er)
{
    return parse_request(srv, body, len, false, true, p, er);
}

/* ---- responses ---- */

static const char *finish_name(kvi_finish f)
{
    return f == KVI_FINISH_LENGTH      ? "length"
           : f == KVI_FINISH_STOP      ? "stop"
           : f == KVI_FINISH_CANCELLED ? "cancelled"
                                       : "error";
}

/* "tool_calls" when the model ended its reply with calls, else the finish's name. */
static const char *choice_finish(const srv_choice *c)
{
    return c->finish == KVI_FINISH_STOP && srv_output_has_calls(c) ? "tool_calls" : finish_name(c->finish);
}

cJSON *srv_usage_json(srv_req *r)
{
    cJSON *u = cJSON_CreateObject();
    int32_t comp = 0;
    size_t kv = 0, kvw = 0;
    for (int i = 0; i < r->p.n; i++) {
        comp += r->ch[i].usage.completion_tokens;
        kv += r->ch[i].usage.kv_bytes;
        kvw += r->ch[i].usage.kv_bytes_window;
    }
    const kvi_usage *u0 = &r->ch[0].usage;
    cJSON_AddNumberToObject(u, "prompt_tokens", r->p.n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", comp);
    cJSON_AddNumberToObject(u, "total_tokens", r->p.n_prompt + comp);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", u0->cached_tokens);
    /* where the prompt's positions came from: pool, RAM tier, disk tier, computed */
    cJSON_AddNumberToObject(d, "cached_pool_tokens",
                            u0->cached_tokens - u0->cached_ram_tokens - u0->cached_disk_tokens);
    cJSON_AddNumberToObject(d, "cached_ram_tokens", u0->cached_ram_tokens);
    cJSON_AddNumberToObject(d, "cached_disk_tokens", u0->cached_disk_tokens);
    cJSON_AddNumberToObject(d, "computed_tokens", r->p.n_prompt - u0->cached_tokens);
    if (r->p.ctx_evict) {
        int32_t dropped = 0;
        for (int i = 0; i < r->p.n; i++) dropped += r->ch[i].usage.positions_dropped;
        cJSON_AddNumberToObject(u, "positions_dropped", dropped);
    }
    cJSON *t = cJSON_AddObjectToObject(u, "timings");
    cJSON_AddNumberToObject(t, "queue_ms", u0->queue_ms);
    cJSON_AddNumberToObject(t, "prefill_ms", u0->prefill_ms);
    cJSON_AddNumberToObject(t, "ttft_ms", u0->ttft_ms);
    cJSON_AddNumberToObject(t, "decode_ms", u0->decode_ms);
    cJSON_AddNumberToObject(t, "kv_bytes", (double)kv);
    /* the KV layer kinds (engine figures as of the request's end) */
    const kvi_sched_stats st = r->st_end;
    cJSON *k = cJSON_AddObjectToObject(t, "kv");
    cJSON_AddNumberToObject(k, "bytes_global", (double)(kv - kvw)); /* this request's, at its end */
    cJSON_AddNumberToObject(k, "bytes_window", (double)kvw);
    cJSON_AddNumberToObject(k, "bytes_per_token_global", (double)st.engine.kv_bytes_per_token_global);
    cJSON_AddNumberToObject(k, "bytes_per_token_window", (double)st.engine.kv_bytes_per_token_window);
    cJSON_AddNumberToObject(k, "bytes_per_token_indexer", (double)st.engine.kv_bytes_per_token_indexer);
    cJSON_AddNumberToObject(k, "n_layers_window", st.engine.kv_n_layers_window);
    cJSON_AddNumberToObject(k, "window", st.engine.kv_window);
    cJSON_AddNumberToObject(k, "pool_window_parts_held", st.engine.kv_wparts_held);
    cJSON_AddNumberToObject(k, "pool_window_parts_released", (double)st.engine.kv_wparts_released);
    cJSON_AddNumberToObject(k, "n_layers_recurrent", st.engine.kv_n_layers_recurrent);
    cJSON_AddNumberToObject(k, "bytes_state",
                            (double)(st.engine.kv_n_layers_recurrent ? st.engine.kv_bytes_state_seq : 0));
    cJSON_AddNumberToObject(t, "preempted", u0->n_preempted);
    int32_t sd = 0, sa = 0; /* speculative decoding, every choice */
    for (int i = 0; i < r->p.n; i++) {
        sd += r->ch[i].usage.spec_drafted;
        sa += r->ch[i].usage.spec_accepted;
    }
    cJSON_AddNumberToObject(t, "spec_drafted", sd);
    cJSON_AddNumberToObject(t, "spec_accepted", sa);
    cJSON_AddNumberToObject(t, "spec_acceptance", sd > 0 ? (double)sa / (double)sd : 0.0);
    return u;
}

static cJSON *envelope(srv_req *r, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(
        o, "object", r->p.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->srv->cfg.model_name);
    return o;
}

bool srv_out_append(srv_req *r, const char *s, size_t n)
{
    if (r->out_len + n + 1 > r->out_cap) {
        size_t cap = (r->out_len + n + 1) * 2;
        char *no = realloc(r->out, cap);
        if (!no) return false;
        r->out = no;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, s, n);
    r->out_len += n;
    r->out[r->out_len] = 0;
    return true;
}

/* "[event: <o.type>\n]data: <o>\n\n"; o is consumed. */
static bool sse_write(srv_req *r, cJSON *o, bool named)
{
    const cJSON *t = named ? cJSON_GetObjectItemCaseSensitive(o, "type") : NULL;
    char *s = cJSON_PrintUnformatted(o);
    bool ok = s && (!named || cJSON_IsString(t));
    if (ok && named)
        ok = srv_out_append(r, "event: ", 7) && srv_out_append(r, t->valuestring, strlen(t->valuestring)) &&
             srv_out_append(r, "\n", 1);
    ok = ok && srv_out_append(r, "data: ", 6) && srv_out_append(r, s, strlen(s)) &&
         srv_out_append(r, "\n\n", 2);
    free(s);
    cJSON_Delete(o);
    return ok;
}

static bool emit(srv_req *r, cJSON *o) { return sse_write(r, o, false); }

bool srv_sse_event(srv_req *r, cJSON *o) { return sse_write(r, o, false); }

bool srv_sse_named(srv_req *r, cJSON *o) { return sse_write(r, o, true); }

bool srv_logprobs_push(srv_choice *c, int32_t token, float logprob, const int32_t *top_ids,
                       const float *top_lps, int32_t n_top)
{
    if (c->n_lp == c->cap_lp) {
        const int32_t cap = c->cap_lp ? 2 * c->cap_lp : 32;
        srv_lp *nl = realloc(c->lp, (size_t)cap * sizeof *nl);
        if (!nl) return false;
        c->lp = nl;
        c->cap_lp = cap;
    }
    srv_lp *e = &c->lp[c->n_lp++];
    memset(e, 0, sizeof *e);
    e->token = token;
    e->logprob = logprob;
    e->offset = c->len;
    e->n_top = n_top < 0 ? 0 : n_top > KVI_LOGPROBS_MAX ? KVI_LOGPROBS_MAX : n_top;
    memcpy(e->top_id, top_ids, (size_t)e->n_top * sizeof *top_ids);
    memcpy(e->top_lp, top_lps, (size_t)e->n_top * sizeof *top_lps);
    return true;
}

/* A token's bytes for logprobs (special tokens rendered); *n_out bytes. */
static const char *lp_piece(const kvi_model *m, int32_t tok, char *buf, size_t cap, size_t *n_out)
{
    int32_t n = kvi_token_to_piece(m, tok, buf, cap, true);
    if (n < 0) n = 0;
    if ((size_t)n > cap) n = (int32_t)cap; /* a longer piece is cut (none in real vocabularies) */
    *n_out = (size_t)n;
    return buf;
}

/* {token, logprob, bytes} of the chat shape. */
static cJSON *chat_lp_item(const kvi_model *m, int32_t tok, float lp)
{
    char buf[512];
    size_t n;
    lp_piece(m, tok, buf, sizeof buf, &n);
    cJSON *o = cJSON_CreateObject();
    char *clean = kvi_utf8_sanitize(buf, n);
    cJSON_AddStringToObject(o, "token", clean ? clean : "");
    free(clean);
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)buf[i]));
    return o;
}

/* Chat: {"content": [entries], "refusal": null}. */
static cJSON *chat_logprobs(const kvi_model *m, const srv_lp *e, int32_t n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "content");
    for (int32_t i = 0; i < n; i++) {
        cJSON *it = chat_lp_item(m, e[i].token, e[i].logprob);
        cJSON *top = cJSON_AddArrayToObject(it, "top_logprobs");
        for (int32_t j = 0; j < e[i].n_top; j++)
            cJSON_AddItemToArray(top, chat_lp_item(m, e[i].top_id[j], e[i].top_lp[j]));
        cJSON_AddItemToArray(a, it);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

/* Adds {piece: logprob} unless the piece is already a key (two ids, one text). */
static void add_top_key(cJSON *d, const kvi_model *m, int32_t tok, float lp)
{
    char buf[512];
    size_t n;
    lp_piece(m, tok, buf, sizeof buf, &n);
    char *clean = kvi_utf8_sanitize(buf, n);
    if (clean && !cJSON_GetObjectItemCaseSensitive(d, clean)) cJSON_AddNumberToObject(d, clean, lp);
    free(clean);
}

/* Completions: {tokens, token_logprobs, top_logprobs, text_offset}. */
static cJSON *completion_logprobs(const kvi_model *m, const srv_lp *e, int32_t n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int32_t i = 0; i < n; i++) {
        char buf[512];
        size_t len;
        lp_piece(m, e[i].token, buf, sizeof buf, &len);
        char *clean = kvi_utf8_sanitize(buf, len);
        cJSON_AddItemToArray(toks, cJSON_CreateString(clean ? clean : ""));
        free(clean);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(e[i].logprob));
        cJSON *d = cJSON_CreateObject();
        for (int32_t j = 0; j < e[i].n_top; j++) add_top_key(d, m, e[i].top_id[j], e[i].top_lp[j]);
        add_top_key(d, m, e[i].token, e[i].logprob);
        cJSON_AddItemToArray(tops, d);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)e[i].offset));
    }
    return o;
}

static cJSON *logprobs_json(srv_req *r, const srv_lp *e, int32_t n)
{
    return r->p.chat ? chat_logprobs(r->srv->m, e, n) : completion_logprobs(r->srv->m, e, n);
}

static cJSON *chunk_choice(srv_req *r, cJSON *o, int index, const char *text, const char *finish, bool first,
                           const srv_lp *lp)
{
    cJSON *a = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(a, c);
    cJSON_AddNumberToObject(c, "index", index);
    if (r->p.chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (first) cJSON_AddStringToObject(d, "role", "assistant");
        if (text) cJSON_AddStringToObject(d, "content", text);
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
    }
    if (lp)
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(r, lp, 1));
    else
        cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

/* The event of a token of a parsed choice: what the parser settled since the
 * last one (nothing is sent when nothing was, unless the role or logprobs are due). */
static bool sse_parsed(srv_req *r, srv_choice *c, const srv_lp *lp)
{
    cJSON *o = envelope(r, true);
    cJSON *ch = chunk_choice(r, o, c->index, NULL, NULL, c->n_tokens == 1, lp);
    const bool added = srv_output_delta(r, c, cJSON_GetObjectItemCaseSensitive(ch, "delta"), false);
    if (!added && c->n_tokens != 1 && !lp) {
        cJSON_Delete(o);
        return true;
    }
    return emit(r, o);
}

bool srv_sse_token(srv_req *r, srv_choice *c, const char *piece, size_t n)
{
    if (c->co) {
        const srv_lp *lp =
            r->p.logprobs && c->n_lp > 0 && c->n_lp == c->n_tokens ? &c->lp[c->n_lp - 1] : NULL;
        return sse_parsed(r, c, lp);
    }
    char *clean = kvi_utf8_sanitize(piece, n);
    if (!clean) return false;
    cJSON *o = envelope(r, true);
    /* the token's logprobs ride with its event (when recorded for this very token) */
    const srv_lp *lp = r->p.logprobs && c->n_lp > 0 && c->n_lp == c->n_tokens ? &c->lp[c->n_lp - 1] : NULL;
    chunk_choice(r, o, c->index, clean, NULL, c->n_tokens == 1, lp);
    free(clean);
    return emit(r, o);
}

bool srv_sse_final(srv_req *r)
{
    bool ok = true;
    for (int i = 0; i < r->p.n; i++) {
        srv_choice *c = &r->ch[i];
        if (c->co) {
            cJSON *o = envelope(r, true);
            cJSON *ch = chunk_choice(r, o, i, NULL, choice_finish(c), c->n_tokens == 0, NULL);
            srv_output_delta(r, c, cJSON_GetObjectItemCaseSensitive(ch, "delta"), true);
            ok = ok && emit(r, o);
            continue;
        }
        char *rest = kvi_utf8_sanitize(c->text ? c->text + c->sent : "", c->text ? c->len - c->sent : 0);
        c->sent = c->len;
        cJSON *o = envelope(r, true);
        chunk_choice(r, o, i, rest && *rest ? rest : (r->p.chat ? NULL : ""), choice_finish(c),
                     c->n_tokens == 0, NULL);
        free(rest);
        ok = ok && emit(r, o);
    }
    if (r->p.include_usage) {
        cJSON *o = envelope(r, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", srv_usage_json(r));
        ok = ok && emit(r, o);
    }
    return ok && srv_out_append(r, "data: [DONE]\n\n", 14);
}

char *srv_response_json(srv_req *r)
{
    cJSON *o = envelope(r, false);
    cJSON *a = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < r->p.n; i++) {
        srv_choice *c = &r->ch[i];
        char *txt = kvi_utf8_sanitize(c->text ? c->text : "", c->len);
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddItemToArray(a, ch);
        cJSON_AddNumberToObject(ch, "index", i);
        if (r->p.chat) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (c->co)
                srv_output_message(r, c, m);
            else
                cJSON_AddStringToObject(m, "content", txt ? txt : "");
        } else {
            cJSON_AddStringToObject(ch, "text", txt ? txt : "");
        }
        if (r->p.logprobs) {
            /* entries of tokens that start before the end of the text (a stop
             * string's cut drops the rest) */
            int32_t n = c->n_lp;
            if (c->stopped)
                for (n = 0; n < c->n_lp && c->lp[n].offset < c->len;) n++;
            cJSON_AddItemToObject(ch, "logprobs", logprobs_json(r, c->lp, n));
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON_AddStringToObject(ch, "finish_reason", choice_finish(c));
        free(txt);
    }
    cJSON_AddItemToObject(o, "usage", srv_usage_json(r));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

const srv_api srv_api_openai = {
    .name = "openai",
    .sse_token = srv_sse_token,
    .sse_final = srv_sse_final,
    .response_json = srv_response_json,
    .error_json = srv_error_json,
    .state_free = NULL,
};
