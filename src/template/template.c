/*
 * template.c — the template layer's entry points: parse a template once, render
 * it with variables, or with an OpenAI chat body turned into the variables that
 * transformers' apply_chat_template gives a template.
 *
 * A kvi_chat_template owns one arena holding the normalised source and the
 * syntax tree; it is never written after parsing. Each render has its own
 * jctx and arena (both heap-allocated, so that they survive jinja_fail's
 * longjmp unchanged), frees the arena on every exit and returns a malloc'd copy
 * of the output.
 */
#include "template/jinja_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct kvi_chat_template {
    jarena A;
    jnode *root;           /* N_BODY */
    bool iterates;         /* some loop iterates a message's content (jinja_content.c) */
    kvi_content_format cf; /* set by kvi_chat_template_set_content_format; AUTO: from iterates */
};

jlimits jinja_default_limits(void)
{
    return (jlimits){ .max_steps = 20000000,
                      .max_output = (size_t)64 << 20,
                      .max_bytes = (size_t)512 << 20,
                      .max_depth = 400 };
}

kvi_chat_template *kvi_chat_template_parse(const char *text, size_t len, kvi_error *err)
{
    kvi_chat_template *volatile t = calloc(1, sizeof *t);
    jctx *J = calloc(1, sizeof *J);
    if (!t || !J) {
        free(t);
        free(J);
        err_set(err, KVI_E_NOMEM, "template: out of memory");
        return NULL;
    }
    J->err = err;
    J->lim = jinja_default_limits();
    t->A.max_bytes = J->lim.max_bytes;
    J->A = &t->A;
    if (setjmp(J->jb)) {
        if (err && err->code == KVI_E_INVALID) err->code = KVI_E_FORMAT;
        ja_free_all(&t->A);
        free(t);
        free(J);
        return NULL;
    }
    t->root = jinja_parse(J, text ? text : "", text ? len : 0);
    t->iterates = jinja_iterates_content(t->root);
    free(J);
    return t;
}

void kvi_chat_template_set_content_format(kvi_chat_template *t, kvi_content_format f)
{
    if (t) t->cf = f;
}

kvi_content_format kvi_chat_template_content_format(const kvi_chat_template *t)
{
    if (!t) return KVI_CONTENT_STRING;
    if (t->cf != KVI_CONTENT_AUTO) return t->cf;
    return t->iterates ? KVI_CONTENT_OPENAI : KVI_CONTENT_STRING;
}

int kvi_content_format_parse(const char *name)
{
    static const char *const names[] = { "auto", "string", "openai" };
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

void kvi_chat_template_free(kvi_chat_template *t)
{
    if (!t) return;
    ja_free_all(&t->A);
    free(t);
}

/* Builds the render's variables in J; vars_json or a chat body. */
typedef jv *(*vars_fn)(jctx *J, const void *arg);

static int render(const kvi_chat_template *t, const jlimits *lim, vars_fn fn, const void *arg, char **out,
                  size_t *out_len, kvi_error *err)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return err_set(err, KVI_E_INVALID, "template: no template");
    jctx *J = calloc(1, sizeof *J);
    jarena *A = calloc(1, sizeof *A);
    if (!J || !A) {
        free(J);
        free(A);
        return err_set(err, KVI_E_NOMEM, "template: out of memory");
    }
    kvi_error local = { 0 };
    J->err = err ? err : &local;
    J->lim = lim ? *lim : jinja_default_limits();
    A->max_bytes = J->lim.max_bytes;
    J->A = A;
    if (setjmp(J->jb)) {
        int code = J->err->code ? J->err->code : KVI_E_INVALID;
        ja_free_all(A);
        free(A);
        free(J);
        return code;
    }
    J->vars = fn(J, arg);
    J->line = 0;
    J->top = ja_alloc(J, sizeof *J->top);
    J->top->parent = NULL;
    J->top->vars = jv_dict(J);
    J->sc = J->top;
    jbuf b = { 0 };
    J->out = &b;
    jinja_exec(J, t->root);
    char *s = malloc(b.n + 1);
    if (!s) {
        ja_free_all(A);
        free(A);
        free(J);
        return err_set(err, KVI_E_NOMEM, "template: out of memory");
    }
    if (b.n) memcpy(s, b.p, b.n);
    s[b.n] = 0;
    *out = s;
    if (out_len) *out_len = b.n;
    ja_free_all(A);
    free(A);
    free(J);
    return 0;
}

typedef struct text_arg {
    const char *s;
    size_t n;
    const char *bos, *eos;
    bool join; /* the template takes content as a string: lists of parts are joined */
    /* continue_final_message: the final message's text (malloc'd, the caller frees it) */
    bool cont;
    char *final;
    size_t final_n;
} text_arg;

static jv *parse_object(jctx *J, const text_arg *a, const char *what)
{
    bool ok;
    jv *v = jinja_json_parse(J, a->s ? a->s : "", a->s ? a->n : 0, &ok);
    if (!ok || v->kind != JV_DICT) jinja_fail(J, "%s is not a JSON object", what);
    return v;
}

static jv *vars_from_json(jctx *J, const void *arg) { return parse_object(J, arg, "the variables"); }

int jinja_render_vars(const kvi_chat_template *t, const char *vars_json, size_t n, const jlimits *lim,
                      char **out, size_t *out_len, kvi_error *err)
{
    text_arg a = { .s = vars_json, .n = n };
    return render(t, lim, vars_from_json, &a, out, out_len, err);
}

/* A list of content parts as one string: the text parts' texts joined with "\n"
 * (vLLM's string form); another part is an error naming it. */
static jv *join_parts(jctx *J, const jv *parts, size_t msg)
{
    jbuf b = { 0 };
    for (size_t i = 0; i < parts->u.list.n; i++) {
        const jv *p = parts->u.list.v[i];
        const jv *type = p->kind == JV_DICT ? jv_dict_get(p, "type", 4) : NULL;
        const bool refusal =
            type && type->kind == JV_STR && type->u.str.n == 7 && !memcmp(type->u.str.s, "refusal", 7);
        const jv *t =
            p->kind == JV_DICT ? jv_dict_get(p, refusal ? "refusal" : "text", refusal ? 7 : 4) : NULL;
        const bool text = type && type->kind == JV_STR &&
                          ((type->u.str.n == 4 && !memcmp(type->u.str.s, "text", 4)) ||
                           (type->u.str.n == 10 && !memcmp(type->u.str.s, "input_text", 10)) || refusal);
        if (!text || !t || t->kind != JV_STR)
            jinja_fail(J, "request: messages[%zu].content[%zu] is not a text part (this template takes text)",
                       msg, i);
        if (i) jb_put(J, &b, "\n", 1);
        jb_put(J, &b, t->u.str.s, t->u.str.n);
    }
    return jv_str(J, b.p ? b.p : "", b.n);
}

/* A message with its tool calls' string arguments parsed as JSON (vLLM, llama.cpp)
 * and, for a template of the string form, a list content joined. */
static jv *prepare_message(jctx *J, jv *m, bool join, size_t idx)
{
    if (m->kind != JV_DICT) jinja_fail(J, "request: every message must be an object");
    jv *content = jv_dict_get(m, "content", 7);
    if (join && content && content->kind == JV_LIST) {
        jv *copy = jv_dict(J);
        for (size_t i = 0; i < m->u.dict.n; i++) jv_dict_set(J, copy, m->u.dict.k[i], m->u.dict.v[i]);
        jv_dict_set(J, copy, jv_str(J, "content", 7), join_parts(J, content, idx));
        m = copy;
    }
    jv *calls = jv_dict_get(m, "tool_calls", 10);
    if (!calls || calls->kind != JV_LIST) return m;
    jv *copy = jv_dict(J), *new_calls = jv_list(J, calls->u.list.n);
    for (size_t i = 0; i < m->u.dict.n; i++) jv_dict_set(J, copy, m->u.dict.k[i], m->u.dict.v[i]);
    for (size_t i = 0; i < calls->u.list.n; i++) {
        jv *tc = calls->u.list.v[i], *fn = tc->kind == JV_DICT ? jv_dict_get(tc, "function", 8) : NULL;
        jv *args = fn && fn->kind == JV_DICT ? jv_dict_get(fn, "arguments", 9) : NULL;
        bool ok = false;
        jv *parsed =
            args && args->kind == JV_STR ? jinja_json_parse(J, args->u.str.s, args->u.str.n, &ok) : NULL;
        if (!ok) {
            jv_list_push(J, new_calls, tc);
            continue;
        }
        jv *fn2 = jv_dict(J), *tc2 = jv_dict(J);
        for (size_t k = 0; k < fn->u.dict.n; k++) jv_dict_set(J, fn2, fn->u.dict.k[k], fn->u.dict.v[k]);
        jv_dict_set(J, fn2, jv_str(J, "arguments", 9), parsed);
        for (size_t k = 0; k < tc->u.dict.n; k++) jv_dict_set(J, tc2, tc->u.dict.k[k], tc->u.dict.v[k]);
        jv_dict_set(J, tc2, jv_str(J, "function", 8), fn2);
        jv_list_push(J, new_calls, tc2);
    }
    jv_dict_set(J, copy, jv_str(J, "tool_calls", 10), new_calls);
    return copy;
}

/* The text continue_final_message continues: the final message's content, or
 * the last text part of a list of parts (as transformers takes it). */
static void take_final(jctx *J, const jv *msgs, text_arg *a)
{
    const jv *last = msgs->u.list.n ? msgs->u.list.v[msgs->u.list.n - 1] : NULL;
    const jv *c = last && last->kind == JV_DICT ? jv_dict_get(last, "content", 7) : NULL;
    if (c && c->kind == JV_LIST) {
        const jv *t = NULL;
        for (size_t i = c->u.list.n; !t && i-- > 0;) {
            const jv *part = c->u.list.v[i];
            t = part->kind == JV_DICT ? jv_dict_get(part, "text", 4) : NULL;
        }
        c = t;
    }
    if (!c || c->kind != JV_STR)
        jinja_fail(J, "request: continue_final_message needs a final message with text content");
    if (!(a->final = malloc(c->u.str.n + 1))) jinja_fail(J, "template: out of memory");
    memcpy(a->final, c->u.str.s, c->u.str.n);
    a->final[c->u.str.n] = 0;
    a->final_n = c->u.str.n;
}

static jv *vars_from_chat(jctx *J, const void *arg)
{
    text_arg *a = (text_arg *)arg; /* continue_final_message's text goes back through it */
    jv *req = parse_object(J, a, "the request");
    jv *vars = jv_dict(J);
    if (a->bos) jv_dict_set(J, vars, jv_str(J, "bos_token", 9), jv_cstr(J, a->bos));
    if (a->eos) jv_dict_set(J, vars, jv_str(J, "eos_token", 9), jv_cstr(J, a->eos));
    jv *kw = jv_dict_get(req, "chat_template_kwargs", 20);
    if (kw && kw->kind == JV_DICT)
        for (size_t i = 0; i < kw->u.dict.n; i++) jv_dict_set(J, vars, kw->u.dict.k[i], kw->u.dict.v[i]);
    else if (kw && kw->kind != JV_NONE)
        jinja_fail(J, "request: chat_template_kwargs must be an object");
    jv *msgs = jv_dict_get(req, "messages", 8);
    if (!msgs || msgs->kind != JV_LIST) jinja_fail(J, "request: messages must be an array");
    jv *list = jv_list(J, msgs->u.list.n);
    for (size_t i = 0; i < msgs->u.list.n; i++)
        jv_list_push(J, list, prepare_message(J, msgs->u.list.v[i], a->join, i));
    jv_dict_set(J, vars, jv_str(J, "messages", 8), list);
    jv *tools = jv_dict_get(req, "tools", 5);
    jv_dict_set(J, vars, jv_str(J, "tools", 5), tools ? tools : jv_none());
    jv *agp = jv_dict_get(req, "add_generation_prompt", 21);
    jv *cfm = jv_dict_get(req, "continue_final_message", 22);
    if (cfm && cfm->kind != JV_BOOL && cfm->kind != JV_NONE)
        jinja_fail(J, "request: continue_final_message must be a boolean");
    a->cont = cfm && cfm->kind == JV_BOOL && cfm->u.b;
    if (a->cont && agp && agp->kind == JV_BOOL && agp->u.b)
        jinja_fail(J, "request: continue_final_message and add_generation_prompt cannot both be true");
    if (a->cont) take_final(J, msgs, a);
    /* absent: true, except when the final message is continued */
    jv_dict_set(J, vars, jv_str(J, "add_generation_prompt", 21), agp ? agp : jv_bool(!a->cont));
    return vars;
}

static bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* continue_final_message, as transformers does it: the rendering ends right
 * after the final message's text (its last occurrence; the stripped text when
 * the template trimmed trailing white space), so the reply continues it. */
static int cut_at_final(char *out, size_t *out_len, const char *f, size_t fn, kvi_error *err)
{
    size_t b = 0, e = fn; /* the stripped text is f[b, e) */
    while (b < e && py_space(f[b])) b++;
    while (e > b && py_space(f[e - 1])) e--;
    const size_t n = strlen(out), sn = e - b;
    size_t loc = n + 1;
    for (size_t i = n - sn + 1; sn <= n && i-- > 0;)
        if (!memcmp(out + i, f + b, sn)) {
            loc = i;
            break;
        }
    if (loc > n)
        return err_set(err, KVI_E_INVALID,
                       "continue_final_message: the final message does not appear in the rendered chat");
    const size_t ln = fn - b; /* len(final.lstrip()) */
    const size_t cut = loc + ln <= n && ln == fn && !memcmp(out + loc, f, fn) ? loc + ln : loc + sn;
    out[cut] = 0;
    if (out_len) *out_len = cut;
    return 0;
}

int jinja_render_chat(const kvi_chat_template *t, const char *request_json, size_t n, const char *bos_token,
                      const char *eos_token, const jlimits *lim, char **out, size_t *out_len, kvi_error *err)
{
    text_arg a = { .s = request_json,
                   .n = n,
                   .bos = bos_token,
                   .eos = eos_token,
                   .join = kvi_chat_template_content_format(t) == KVI_CONTENT_STRING };
    int rc = render(t, lim, vars_from_chat, &a, out, out_len, err);
    if (!rc && a.cont && (rc = cut_at_final(*out, out_len, a.final, a.final_n, err)) != 0) {
        free(*out);
        *out = NULL;
    }
    free(a.final);
    return rc;
}

char *kvi_chat_template_render(const kvi_chat_template *t, const char *request_json, const char *bos_token,
                               const char *eos_token, kvi_error *err)
{
    char *out = NULL;
    size_t n = request_json ? strlen(request_json) : 0;
    if (jinja_render_chat(t, request_json, n, bos_token, eos_token, NULL, &out, NULL, err) != 0) return NULL;
    return out;
}
