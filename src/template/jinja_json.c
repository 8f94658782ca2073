/*
 * jinja_json.c — JSON text to template values, as Python's json.loads reads it:
 * integers stay JV_INT (a literal with '.', 'e' or beyond int64 is JV_FLOAT),
 * objects keep their keys in the order written (a repeated key keeps the first
 * position and the last value), strings are UTF-8 with \uXXXX escapes (surrogate
 * pairs joined) decoded. Nesting is bounded by the render's max_depth.
 *
 * State: a cursor (p, end) over the text; a syntax error clears *ok and returns
 * NULL up the recursion without failing the render (tool-call arguments that are
 * not JSON stay strings).
 */
#include "template/jinja_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct jp {
    jctx *J;
    const char *p, *end;
    bool ok;
    int depth;
} jp;

static void ws(jp *P)
{
    while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r')) P->p++;
}

static jv *bad(jp *P)
{
    P->ok = false;
    return NULL;
}

static int hex4(const char *s)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    return v;
}

static size_t put_u8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static jv *str(jp *P)
{
    const char *s = ++P->p;
    size_t n = 0;
    bool esc = false;
    for (; P->p < P->end && *P->p != '"'; P->p++, n++) {
        if ((unsigned char)*P->p < 0x20) return bad(P);
        if (*P->p == '\\') {
            esc = true;
            if (++P->p >= P->end) return bad(P);
        }
    }
    if (P->p >= P->end) return bad(P);
    size_t raw = (size_t)(P->p - s);
    P->p++;
    if (!esc) return jv_str(P->J, s, raw);
    char *o = ja_alloc(P->J, raw + 1); /* escapes never grow the text */
    size_t k = 0;
    for (size_t i = 0; i < raw; i++) {
        if (s[i] != '\\') {
            o[k++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case '"':
        case '\\':
        case '/': o[k++] = c; break;
        case 'u': {
            int h = i + 4 < raw ? hex4(s + i + 1) : -1;
            if (h < 0) return bad(P);
            i += 4;
            uint32_t cp = (uint32_t)h;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < raw && s[i + 1] == '\\' && s[i + 2] == 'u') {
                int lo = hex4(s + i + 3);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    i += 6;
                }
            }
            k += put_u8(o + k, cp);
            break;
        }
        default: return bad(P);
        }
    }
    o[k] = 0;
    jv *x = jv_new(P->J, JV_STR);
    x->u.str.s = o;
    x->u.str.n = k;
    return x;
}

static jv *num(jp *P)
{
    const char *s = P->p;
    bool is_float = false;
    if (P->p < P->end && *P->p == '-') P->p++;
    if (P->p >= P->end || *P->p < '0' || *P->p > '9') return bad(P);
    while (P->p < P->end) {
        char c = *P->p;
        if (c >= '0' && c <= '9')
            ;
        else if (c == '.' || c == 'e' || c == 'E' ||
                 ((c == '+' || c == '-') && (P->p[-1] == 'e' || P->p[-1] == 'E')))
            is_float = true;
        else
            break;
        P->p++;
    }
    char buf[64];
    size_t n = (size_t)(P->p - s);
    if (n >= sizeof buf) is_float = true;
    char *tmp = ja_strdup(P->J, s, n);
    errno = 0;
    if (!is_float) {
        long long v = strtoll(tmp, NULL, 10);
        if (errno != ERANGE) return jv_int(P->J, v);
    }
    return jv_float(P->J, strtod(tmp, NULL));
}

static jv *value(jp *P);

static jv *arr(jp *P)
{
    jv *l = jv_list(P->J, 0);
    P->p++;
    ws(P);
    if (P->p < P->end && *P->p == ']') {
        P->p++;
        return l;
    }
    for (;;) {
        jv *x = value(P);
        if (!x) return NULL;
        jv_list_push(P->J, l, x);
        ws(P);
        if (P->p < P->end && *P->p == ',') {
            P->p++;
            continue;
        }
        if (P->p < P->end && *P->p == ']') {
            P->p++;
            return l;
        }
        return bad(P);
    }
}

static jv *obj(jp *P)
{
    jv *d = jv_dict(P->J);
    P->p++;
    ws(P);
    if (P->p < P->end && *P->p == '}') {
        P->p++;
        return d;
    }
    for (;;) {
        ws(P);
        if (P->p >= P->end || *P->p != '"') return bad(P);
        jv *k = str(P);
        if (!k) return NULL;
        ws(P);
        if (P->p >= P->end || *P->p != ':') return bad(P);
        P->p++;
        jv *v = value(P);
        if (!v) return NULL;
        jv_dict_set(P->J, d, k, v);
        ws(P);
        if (P->p < P->end && *P->p == ',') {
            P->p++;
            continue;
        }
        if (P->p < P->end && *P->p == '}') {
            P->p++;
            return d;
        }
        return bad(P);
    }
}

static bool word(jp *P, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(P->end - P->p) >= n && !memcmp(P->p, w, n)) {
        P->p += n;
        return true;
    }
    return false;
}

static jv *value(jp *P)
{
    ws(P);
    if (P->p >= P->end) return bad(P);
    if (++P->depth > P->J->lim.max_depth) return bad(P);
    jv *x;
    switch (*P->p) {
    case '{': x = obj(P); break;
    case '[': x = arr(P); break;
    case '"': x = str(P); break;
    default:
        if (word(P, "true"))
            x = jv_bool(true);
        else if (word(P, "false"))
            x = jv_bool(false);
        else if (word(P, "null"))
            x = jv_none();
        else
            x = num(P);
    }
    P->depth--;
    return x;
}

jv *jinja_json_parse(jctx *J, const char *s, size_t n, bool *ok)
{
    jp P = { .J = J, .p = s, .end = s + n, .ok = true };
    jv *x = value(&P);
    ws(&P);
    if (x && P.p != P.end) x = bad(&P);
    *ok = P.ok && x;
    return *ok ? x : NULL;
}
