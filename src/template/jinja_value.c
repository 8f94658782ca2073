/*
 * jinja_value.c — the arena, the values and how Python prints them.
 *
 * Arena: chunks of at least 64 KiB in a singly linked list; ja_alloc hands out
 * 16-byte aligned slices of the head chunk and never frees one; the arena's total
 * never exceeds max_bytes (past it, and on a failed malloc, jinja_fail).
 * Values: JV_NONE, JV_BOOL and the empty-name JV_UNDEF are static singletons;
 * everything else is an arena object. A list or dict grows by copying into a
 * larger arena array (the old one is abandoned: at most twice the final size).
 * Printing follows CPython: str() of a float is repr() (shortest round trip,
 * scientific notation below 1e-4 and from 1e16), lists and dicts print their
 * items' repr(); json.dumps with ensure_ascii=False.
 */
#include "template/jinja_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

_Noreturn void jinja_fail(jctx *J, const char *fmt, ...)
{
    if (J->err) {
        char msg[sizeof J->err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (J->line > 0)
            err_set(J->err, KVI_E_INVALID, "template: line %d: %s", J->line, msg);
        else
            err_set(J->err, KVI_E_INVALID, "template: %s", msg);
    }
    longjmp(J->jb, 1);
}

static _Noreturn void fail_nomem(jctx *J, size_t n)
{
    if (J->err) err_set(J->err, KVI_E_NOMEM, "template: out of memory (%zu bytes)", n);
    longjmp(J->jb, 2);
}

void *ja_alloc(jctx *J, size_t n)
{
    jarena *A = J->A;
    n = (n + 15) & ~(size_t)15;
    if (!A->head || A->head->cap - A->head->used < n) {
        size_t cap = n > (size_t)1 << 16 ? n : (size_t)1 << 16;
        if (A->head && A->head->cap * 2 > cap && A->head->cap < ((size_t)1 << 24)) cap = A->head->cap * 2;
        if (A->total + cap > A->max_bytes) {
            if (A->total + n > A->max_bytes)
                jinja_fail(J, "memory limit of %zu bytes exceeded", A->max_bytes);
            cap = n;
        }
        jchunk *c = malloc(sizeof *c + cap);
        if (!c) fail_nomem(J, cap);
        c->next = A->head;
        c->used = 0;
        c->cap = cap;
        A->head = c;
        A->total += cap;
    }
    void *p = A->head->data + A->head->used;
    A->head->used += n;
    return p;
}

void ja_free_all(jarena *A)
{
    for (jchunk *c = A->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    A->head = NULL;
    A->total = 0;
}

char *ja_strdup(jctx *J, const char *s, size_t n)
{
    char *p = ja_alloc(J, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static jv v_none = { .kind = JV_NONE }, v_true = { .kind = JV_BOOL, .u.b = true },
          v_false = { .kind = JV_BOOL, .u.b = false }, v_undef = { .kind = JV_UNDEF };

jv *jv_new(jctx *J, int kind)
{
    jv *x = ja_alloc(J, sizeof *x);
    memset(x, 0, sizeof *x);
    x->kind = (uint8_t)kind;
    return x;
}

jv *jv_str(jctx *J, const char *s, size_t n)
{
    jv *x = jv_new(J, JV_STR);
    x->u.str.s = ja_strdup(J, s, n);
    x->u.str.n = n;
    return x;
}

jv *jv_cstr(jctx *J, const char *s) { return jv_str(J, s, strlen(s)); }

jv *jv_markup(jctx *J, jv *s)
{
    if (s->kind != JV_STR || s->is_markup) return s;
    jv *x = jv_new(J, JV_STR);
    x->u.str = s->u.str;
    x->is_markup = true;
    return x;
}

jv *jv_int(jctx *J, int64_t i)
{
    jv *x = jv_new(J, JV_INT);
    x->u.i = i;
    return x;
}

jv *jv_float(jctx *J, double f)
{
    jv *x = jv_new(J, JV_FLOAT);
    x->u.f = f;
    return x;
}

jv *jv_bool(bool b) { return b ? &v_true : &v_false; }
jv *jv_none(void) { return &v_none; }

jv *jv_undef(jctx *J, const char *name, size_t n)
{
    if (!name) return &v_undef;
    jv *x = jv_new(J, JV_UNDEF);
    x->u.str.s = ja_strdup(J, name, n);
    x->u.str.n = n;
    return x;
}

jv *jv_list(jctx *J, size_t cap)
{
    jv *x = jv_new(J, JV_LIST);
    if (cap) x->u.list.v = ja_alloc(J, cap * sizeof(jv *));
    x->u.list.cap = cap;
    return x;
}

jv *jv_dict(jctx *J) { return jv_new(J, JV_DICT); }

void jv_list_push(jctx *J, jv *l, jv *x)
{
    if (l->u.list.n == l->u.list.cap) {
        size_t cap = l->u.list.cap ? l->u.list.cap * 2 : 4;
        jv **v = ja_alloc(J, cap * sizeof *v);
        if (l->u.list.n) memcpy(v, l->u.list.v, l->u.list.n * sizeof *v);
        l->u.list.v = v;
        l->u.list.cap = cap;
    }
    l->u.list.v[l->u.list.n++] = x;
}

jv *jv_dict_getv(const jv *d, const jv *k)
{
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (jv_equal(d->u.dict.k[i], k)) return d->u.dict.v[i];
    return NULL;
}

jv *jv_dict_get(const jv *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const jv *key = d->u.dict.k[i];
        if (key->kind == JV_STR && key->u.str.n == n && !memcmp(key->u.str.s, k, n)) return d->u.dict.v[i];
    }
    return NULL;
}

void jv_dict_set(jctx *J, jv *d, jv *k, jv *v)
{
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (jv_equal(d->u.dict.k[i], k)) {
            d->u.dict.v[i] = v;
            return;
        }
    if (d->u.dict.n == d->u.dict.cap) {
        size_t cap = d->u.dict.cap ? d->u.dict.cap * 2 : 8;
        jv **nk = ja_alloc(J, cap * sizeof *nk), **nv = ja_alloc(J, cap * sizeof *nv);
        if (d->u.dict.n) {
            memcpy(nk, d->u.dict.k, d->u.dict.n * sizeof *nk);
            memcpy(nv, d->u.dict.v, d->u.dict.n * sizeof *nv);
        }
        d->u.dict.k = nk;
        d->u.dict.v = nv;
        d->u.dict.cap = cap;
    }
    d->u.dict.k[d->u.dict.n] = k;
    d->u.dict.v[d->u.dict.n++] = v;
}

bool jv_truthy(const jv *x)
{
    switch (x->kind) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return x->u.b;
    case JV_INT: return x->u.i != 0;
    case JV_FLOAT: return x->u.f != 0.0;
    case JV_STR: return x->u.str.n > 0;
    case JV_LIST: return x->u.list.n > 0;
    case JV_DICT: return x->is_ns || x->u.dict.n > 0;
    default: return true;
    }
}

static bool is_num(const jv *x) { return x->kind == JV_INT || x->kind == JV_FLOAT || x->kind == JV_BOOL; }
static double num_of(const jv *x)
{
    return x->kind == JV_FLOAT ? x->u.f : x->kind == JV_INT ? (double)x->u.i : (double)x->u.b;
}

bool jv_equal(const jv *a, const jv *b)
{
    if (a == b) return true;
    if (is_num(a) && is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT)
            return (a->kind == JV_INT ? a->u.i : a->u.b) == (b->kind == JV_INT ? b->u.i : b->u.b);
        return num_of(a) == num_of(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a->u.str.n == b->u.str.n && !memcmp(a->u.str.s, b->u.str.s, a->u.str.n);
    case JV_LIST:
        if (a->u.list.n != b->u.list.n) return false;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!jv_equal(a->u.list.v[i], b->u.list.v[i])) return false;
        return true;
    case JV_DICT:
        if (a->is_ns || b->is_ns) return false;
        if (a->u.dict.n != b->u.dict.n) return false;
        for (size_t i = 0; i < a->u.dict.n; i++) {
            const jv *o = jv_dict_getv(b, a->u.dict.k[i]);
            if (!o || !jv_equal(a->u.dict.v[i], o)) return false;
        }
        return true;
    default: return false;
    }
}

const char *jv_type_name(const jv *x)
{
    switch (x->kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return x->is_tuple ? "tuple" : "list";
    case JV_DICT: return x->is_ns ? "Namespace" : "dict";
    case JV_LOOP: return "LoopContext";
    default: return "function";
    }
}

int jv_compare(jctx *J, const jv *a, const jv *b)
{
    if (is_num(a) && is_num(b)) {
        if (a->kind == JV_INT && b->kind == JV_INT) return (a->u.i > b->u.i) - (a->u.i < b->u.i);
        double x = num_of(a), y = num_of(b);
        return (x > y) - (x < y);
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = a->u.str.n < b->u.str.n ? a->u.str.n : b->u.str.n;
        int c = memcmp(a->u.str.s, b->u.str.s, n);
        if (c) return c;
        return (a->u.str.n > b->u.str.n) - (a->u.str.n < b->u.str.n);
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST) {
        for (size_t i = 0; i < a->u.list.n && i < b->u.list.n; i++) {
            if (jv_equal(a->u.list.v[i], b->u.list.v[i])) continue;
            return jv_compare(J, a->u.list.v[i], b->u.list.v[i]);
        }
        return (a->u.list.n > b->u.list.n) - (a->u.list.n < b->u.list.n);
    }
    jinja_fail(J, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

/* ---- output buffers ---- */

void jb_put(jctx *J, jbuf *b, const char *s, size_t n)
{
    if (!n) return;
    /* what statements write (output, captured macro and block bodies) counts against
     * max_output; strings built by expressions are bounded by the arena alone */
    if (b == J->out) {
        if (J->out_total + n > J->lim.max_output || J->out_total + n < J->out_total)
            jinja_fail(J, "output limit of %zu bytes exceeded", J->lim.max_output);
        J->out_total += n;
    }
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1) cap *= 2;
        char *p = ja_alloc(J, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void jb_puts(jctx *J, jbuf *b, const char *s) { jb_put(J, b, s, strlen(s)); }

/* CPython's float repr: the shortest digits that read back as f. */
void jv_float_repr(char *buf, size_t cap, double f)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e = [-]d.ddde[+-]xx: digits and exponent */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp = atoi(p + 1);
    char *o = buf;
    size_t left = cap;
#define PUT(...)                                                      \
    do {                                                              \
        int w_ = snprintf(o, left, __VA_ARGS__);                      \
        if (w_ > 0 && (size_t)w_ < left) o += w_, left -= (size_t)w_; \
    } while (0)
    if (neg) PUT("-");
    if (exp < -4 || exp >= 16) {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        PUT("0.");
        for (int i = -1; i > exp; i--) PUT("0");
        PUT("%s", digits);
    } else {
        for (int i = 0; i <= exp; i++) PUT("%c", i < nd ? digits[i] : '0');
        PUT(".");
        if (nd > exp + 1)
            PUT("%s", digits + exp + 1);
        else
            PUT("0");
    }
#undef PUT
}

static void put_repr_str(jctx *J, jbuf *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jb_put(J, b, &q, 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char hex[8];
        if (c == '\\')
            esc = "\\\\";
        else if (c == (unsigned char)q)
            esc = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(hex, sizeof hex, "\\x%02x", c);
            esc = hex;
        }
        if (esc) {
            jb_put(J, b, s + run, i - run);
            jb_puts(J, b, esc);
            run = i + 1;
        }
    }
    jb_put(J, b, s + run, n - run);
    jb_put(J, b, &q, 1);
}

void jv_repr(jctx *J, jbuf *b, const jv *x)
{
    if (x->kind == JV_STR)
        put_repr_str(J, b, x->u.str.s, x->u.str.n);
    else
        jv_to_str(J, b, x);
}

void jv_to_str(jctx *J, jbuf *b, const jv *x)
{
    char num[64];
    switch (x->kind) {
    case JV_UNDEF: return;
    case JV_NONE: jb_puts(J, b, "None"); return;
    case JV_BOOL: jb_puts(J, b, x->u.b ? "True" : "False"); return;
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)x->u.i);
        jb_puts(J, b, num);
        return;
    case JV_FLOAT:
        jv_float_repr(num, sizeof num, x->u.f);
        jb_puts(J, b, num);
        return;
    case JV_STR: jb_put(J, b, x->u.str.s, x->u.str.n); return;
    case JV_LIST:
        jb_puts(J, b, x->is_tuple ? "(" : "[");
        for (size_t i = 0; i < x->u.list.n; i++) {
            if (i) jb_puts(J, b, ", ");
            jinja_step(J);
            jv_repr(J, b, x->u.list.v[i]);
        }
        if (x->is_tuple && x->u.list.n == 1) jb_puts(J, b, ",");
        jb_puts(J, b, x->is_tuple ? ")" : "]");
        return;
    case JV_DICT:
        if (x->is_ns) jb_puts(J, b, "<Namespace ");
        jb_puts(J, b, "{");
        for (size_t i = 0; i < x->u.dict.n; i++) {
            if (i) jb_puts(J, b, ", ");
            jinja_step(J);
            jv_repr(J, b, x->u.dict.k[i]);
            jb_puts(J, b, ": ");
            jv_repr(J, b, x->u.dict.v[i]);
        }
        jb_puts(J, b, "}");
        if (x->is_ns) jb_puts(J, b, ">");
        return;
    case JV_LOOP: jb_puts(J, b, "<LoopContext>"); return;
    default: jb_puts(J, b, "<function>"); return;
    }
}

jv *jv_stringify(jctx *J, const jv *x)
{
    if (x->kind == JV_STR) return (jv *)x;
    jbuf b = { 0 };
    jv_to_str(J, &b, x);
    jv *s = jv_new(J, JV_STR);
    s->u.str.s = b.p ? b.p : "";
    s->u.str.n = b.n;
    return s;
}

static void json_str(jctx *J, jbuf *b, const char *s, size_t n, bool ascii)
{
    jb_puts(J, b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof esc, "\\%c", c);
        else if (c == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (c == '\r')
            snprintf(esc, sizeof esc, "\\r");
        else if (c == '\t')
            snprintf(esc, sizeof esc, "\\t");
        else if (c == '\b')
            snprintf(esc, sizeof esc, "\\b");
        else if (c == '\f')
            snprintf(esc, sizeof esc, "\\f");
        else if (c < 0x20 || (ascii && c == 0x7f))
            snprintf(esc, sizeof esc, "\\u%04x", c);
        else if (ascii && c >= 0x80) {
            /* one code point as \\uXXXX (a surrogate pair above U+FFFF) */
            size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
            if (i + len > n) len = 1;
            uint32_t cp = len == 1 ? 0xFFFD : c & (0x7Fu >> len);
            for (size_t k = 1; k < len; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3Fu);
            jb_put(J, b, s + run, i - run);
            char u[16];
            if (cp >= 0x10000) {
                snprintf(u, sizeof u, "\\u%04x", 0xD800 + ((cp - 0x10000) >> 10));
                jb_puts(J, b, u);
                cp = 0xDC00 + ((cp - 0x10000) & 0x3FF);
            }
            snprintf(u, sizeof u, "\\u%04x", cp);
            jb_puts(J, b, u);
            i += len - 1;
            run = i + 1;
            continue;
        } else
            continue;
        jb_put(J, b, s + run, i - run);
        jb_puts(J, b, esc);
        run = i + 1;
    }
    jb_put(J, b, s + run, n - run);
    jb_puts(J, b, "\"");
}

static void json_nl(jctx *J, jbuf *b, int indent, int level)
{
    jb_puts(J, b, "\n");
    for (int i = 0; i < indent * level; i++) jb_puts(J, b, " ");
}

void jv_to_json(jctx *J, jbuf *b, const jv *x, const jjson_opts *o, int level)
{
    int indent = o->indent;
    const char *isep = o->item_sep ? o->item_sep : indent >= 0 ? "," : ", ";
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    char num[64];
    jinja_step(J);
    if (level > J->lim.max_depth) jinja_fail(J, "tojson: nesting deeper than %d", J->lim.max_depth);
    switch (x->kind) {
    case JV_NONE: jb_puts(J, b, "null"); return;
    case JV_BOOL: jb_puts(J, b, x->u.b ? "true" : "false"); return;
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)x->u.i);
        jb_puts(J, b, num);
        return;
    case JV_FLOAT:
        if (isnan(x->u.f))
            jb_puts(J, b, "NaN");
        else if (isinf(x->u.f))
            jb_puts(J, b, x->u.f < 0 ? "-Infinity" : "Infinity");
        else {
            jv_float_repr(num, sizeof num, x->u.f);
            jb_puts(J, b, num);
        }
        return;
    case JV_STR: json_str(J, b, x->u.str.s, x->u.str.n, o->ensure_ascii); return;
    case JV_LIST:
        if (!x->u.list.n) {
            jb_puts(J, b, "[]");
            return;
        }
        jb_puts(J, b, "[");
        for (size_t i = 0; i < x->u.list.n; i++) {
            if (i) jb_puts(J, b, isep);
            if (indent >= 0) json_nl(J, b, indent, level + 1);
            jv_to_json(J, b, x->u.list.v[i], o, level + 1);
        }
        if (indent >= 0) json_nl(J, b, indent, level);
        jb_puts(J, b, "]");
        return;
    case JV_DICT:
        if (x->is_ns) break;
        if (!x->u.dict.n) {
            jb_puts(J, b, "{}");
            return;
        }
        /* the order keys are written in: as given, or sorted (insertion sort: stable) */
        size_t *order = ja_alloc(J, x->u.dict.n * sizeof *order);
        for (size_t i = 0; i < x->u.dict.n; i++) {
            size_t j = i;
            for (; o->sort_keys && j > 0 && jv_compare(J, x->u.dict.k[order[j - 1]], x->u.dict.k[i]) > 0; j--)
                order[j] = order[j - 1];
            order[j] = i;
        }
        jb_puts(J, b, "{");
        for (size_t i = 0; i < x->u.dict.n; i++) {
            if (i) jb_puts(J, b, isep);
            if (indent >= 0) json_nl(J, b, indent, level + 1);
            const jv *k = x->u.dict.k[order[i]];
            if (k->kind == JV_STR)
                json_str(J, b, k->u.str.s, k->u.str.n, o->ensure_ascii);
            else if (k->kind == JV_INT || k->kind == JV_FLOAT || k->kind == JV_BOOL || k->kind == JV_NONE) {
                jb_puts(J, b, "\"");
                if (k->kind == JV_BOOL || k->kind == JV_NONE)
                    jb_puts(J, b, k->kind == JV_NONE ? "null" : k->u.b ? "true" : "false");
                else
                    jv_to_str(J, b, k);
                jb_puts(J, b, "\"");
            } else
                jinja_fail(J, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
            jb_puts(J, b, ksep);
            jv_to_json(J, b, x->u.dict.v[order[i]], o, level + 1);
        }
        if (indent >= 0) json_nl(J, b, indent, level);
        jb_puts(J, b, "}");
        return;
    default: break;
    }
    jinja_fail(J, "Object of type %s is not JSON serializable", jv_type_name(x));
}

/* ---- UTF-8 ---- */

size_t u8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

size_t u8_offset(const char *s, size_t n, size_t cp)
{
    size_t i = 0;
    for (; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (cp == 0) return i;
            cp--;
        }
    }
    return n;
}

/* Python's str.isspace() for the code point at s[at]; *len its bytes. */
bool u8_isspace_at(const char *s, size_t n, size_t at, size_t *len)
{
    unsigned char c = (unsigned char)s[at];
    *len = 1;
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
    uint32_t cp;
    if ((c & 0xE0) == 0xC0 && at + 1 < n) {
        cp = ((c & 0x1Fu) << 6) | (s[at + 1] & 0x3Fu);
        *len = 2;
    } else if ((c & 0xF0) == 0xE0 && at + 2 < n) {
        cp = ((c & 0x0Fu) << 12) | ((s[at + 1] & 0x3Fu) << 6) | (s[at + 2] & 0x3Fu);
        *len = 3;
    } else {
        return false;
    }
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
