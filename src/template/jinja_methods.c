/*
 * jinja_methods.c — the methods templates call on values (str.split,
 * dict.get, ...) with Python's semantics, the immutable sandbox's refusal of
 * every mutating method (list.append, dict.update, ...), Python's `%` string
 * formatting, and the globals transformers gives templates: range, namespace,
 * dict, raise_exception and strftime_now.
 *
 * A method is looked up by (kind of self, name): jinja_has_method says whether
 * one exists (so `x.name` yields a bound method), jinja_method runs it. Nothing
 * here changes self; results are new values.
 */
#include "template/jinja_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

jv *jinja_filter_case(jctx *J, jv *x, int mode);

static const char *const str_methods[] = { "startswith", "endswith",   "split",   "rsplit",     "strip",
                                           "lstrip",     "rstrip",     "replace", "upper",      "lower",
                                           "title",      "capitalize", "format",  "find",       "rfind",
                                           "count",      "join",       "isdigit", "isalpha",    "isalnum",
                                           "isspace",    "islower",    "isupper", "splitlines", "index",
                                           "center",     "ljust",      "rjust",   NULL };
static const char *const dict_methods[] = { "get", "items", "keys", "values", "copy", NULL };
static const char *const list_methods[] = { "index", "count", "copy", NULL };
/* refused by the immutable sandbox */
static const char *const mutators[] = { "append",  "extend", "insert",  "pop",    "remove",
                                        "clear",   "sort",   "reverse", "update", "setdefault",
                                        "popitem", "add",    "discard", NULL };

static bool in_set(const char *const *set, const char *name, size_t n)
{
    for (size_t i = 0; set[i]; i++)
        if (strlen(set[i]) == n && !memcmp(set[i], name, n)) return true;
    return false;
}

bool jinja_has_method(const jv *self, const char *name, size_t n)
{
    switch (self->kind) {
    case JV_STR: return in_set(str_methods, name, n);
    case JV_DICT: return !self->is_ns && (in_set(dict_methods, name, n) || in_set(mutators, name, n));
    case JV_LIST: return in_set(list_methods, name, n) || (!self->is_tuple && in_set(mutators, name, n));
    default: return false;
    }
}

static const char *S(const jv *x) { return x->u.str.s; }

static jv *need_str(jctx *J, jv *x, const char *what)
{
    if (!x || x->kind != JV_STR) jinja_fail(J, "%s: expected a string argument", what);
    return x;
}

/* Is the code point at s[i] one of chars (a string of code points)? *len its bytes. */
static bool in_chars(const char *s, size_t n, size_t i, const jv *chars, size_t *len)
{
    size_t e = i + 1;
    while (e < n && ((unsigned char)s[e] & 0xC0) == 0x80) e++;
    *len = e - i;
    const char *c = chars->u.str.s;
    for (size_t k = 0; k < chars->u.str.n;) {
        size_t ke = k + 1;
        while (ke < chars->u.str.n && ((unsigned char)c[ke] & 0xC0) == 0x80) ke++;
        if (ke - k == *len && !memcmp(c + k, s + i, *len)) return true;
        k = ke;
    }
    return false;
}

/* Byte length of the code point that ends at s[end) */
static size_t cp_before(const char *s, size_t end)
{
    size_t b = end - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    return end - b;
}

static jv *strip(jctx *J, jv *self, jv *chars, bool left, bool right)
{
    const char *s = S(self);
    size_t a = 0, b = self->u.str.n, len;
    if (chars && chars->kind == JV_NONE) chars = NULL;
    if (chars) need_str(J, chars, "strip");
    while (left && a < b && (chars ? in_chars(s, b, a, chars, &len) : u8_isspace_at(s, b, a, &len))) a += len;
    while (right && b > a) {
        size_t l = cp_before(s, b);
        bool hit = chars ? in_chars(s, b, b - l, chars, &len) : u8_isspace_at(s, b, b - l, &len);
        if (!hit) break;
        b -= l;
    }
    return jv_str(J, s + a, b - a);
}

static jv *split(jctx *J, jv *self, jv *sep, jv *maxsplit, bool from_right)
{
    const char *s = S(self);
    size_t n = self->u.str.n;
    int64_t max = maxsplit && maxsplit->kind == JV_INT ? maxsplit->u.i : -1;
    jv *out = jv_list(J, 0);
    if (sep && sep->kind == JV_NONE) sep = NULL;
    if (!sep) {
        /* runs of whitespace separate; no empty strings */
        jv *parts = jv_list(J, 0);
        size_t i = 0, len;
        size_t start[2];
        (void)start;
        if (!from_right) {
            while (i < n) {
                while (i < n && u8_isspace_at(s, n, i, &len)) i += len;
                if (i >= n) break;
                if (max >= 0 && (int64_t)parts->u.list.n == max) {
                    size_t e = n;
                    while (e > i && u8_isspace_at(s, n, e - cp_before(s, e), &len)) e -= cp_before(s, e);
                    jv_list_push(J, parts, jv_str(J, s + i, e - i));
                    break;
                }
                size_t b = i;
                while (i < n && !u8_isspace_at(s, n, i, &len)) i += len;
                jv_list_push(J, parts, jv_str(J, s + b, i - b));
            }
            return parts;
        }
        /* rsplit() without a separator: split all, then join the head back if limited */
        jv *all = split(J, self, NULL, NULL, false);
        if (max < 0 || (int64_t)all->u.list.n <= max + 1) return all;
        size_t keep = all->u.list.n - (size_t)max;
        jv *last_head = all->u.list.v[keep - 1];
        const char *head_end = S(last_head) + last_head->u.str.n;
        size_t h = 0;
        while (h < n && u8_isspace_at(s, n, h, &len)) h += len;
        jv_list_push(J, out, jv_str(J, s + h, (size_t)(head_end - (s + h))));
        for (size_t k = keep; k < all->u.list.n; k++) jv_list_push(J, out, all->u.list.v[k]);
        return out;
    }
    need_str(J, sep, "split");
    size_t m = sep->u.str.n;
    if (!m) jinja_fail(J, "empty separator");
    if (!from_right) {
        size_t b = 0;
        for (size_t i = 0; i + m <= n;) {
            if ((max < 0 || (int64_t)out->u.list.n < max) && !memcmp(s + i, S(sep), m)) {
                jv_list_push(J, out, jv_str(J, s + b, i - b));
                i += m;
                b = i;
            } else {
                i++;
            }
        }
        jv_list_push(J, out, jv_str(J, s + b, n - b));
        return out;
    }
    /* from the right: collect pieces backwards */
    jv *rev = jv_list(J, 0);
    size_t e = n;
    for (size_t i = n; i >= m;) {
        if ((max < 0 || (int64_t)rev->u.list.n < max) && !memcmp(s + i - m, S(sep), m)) {
            jv_list_push(J, rev, jv_str(J, s + i, e - i));
            i -= m;
            e = i;
        } else {
            i--;
        }
    }
    jv_list_push(J, rev, jv_str(J, s, e));
    for (size_t k = rev->u.list.n; k-- > 0;) jv_list_push(J, out, rev->u.list.v[k]);
    return out;
}

static jv *replace(jctx *J, jv *self, jv *old, jv *nw, jv *count)
{
    need_str(J, old, "replace");
    need_str(J, nw, "replace");
    int64_t max = count && count->kind == JV_INT ? count->u.i : -1;
    const char *s = S(self);
    size_t n = self->u.str.n, m = old->u.str.n;
    jbuf b = { 0 };
    int64_t done = 0;
    if (!m) {
        /* Python inserts new between every code point */
        for (size_t i = 0; i <= n;) {
            if (max < 0 || done < max) {
                jb_put(J, &b, S(nw), nw->u.str.n);
                done++;
            }
            if (i == n) break;
            size_t e = i + 1;
            while (e < n && ((unsigned char)s[e] & 0xC0) == 0x80) e++;
            jb_put(J, &b, s + i, e - i);
            i = e;
        }
        return jv_str(J, b.p ? b.p : "", b.n);
    }
    size_t run = 0;
    for (size_t i = 0; i + m <= n;) {
        if ((max < 0 || done < max) && !memcmp(s + i, S(old), m)) {
            jinja_step(J);
            jb_put(J, &b, s + run, i - run);
            jb_put(J, &b, S(nw), nw->u.str.n);
            i += m;
            run = i;
            done++;
        } else {
            i++;
        }
    }
    jb_put(J, &b, s + run, n - run);
    return jv_str(J, b.p ? b.p : "", b.n);
}

/* Byte offset of the first (last) occurrence of sub in s, or -1. */
static int64_t find(const jv *self, const jv *sub, bool last)
{
    size_t n = self->u.str.n, m = sub->u.str.n;
    if (m > n) return -1;
    if (last) {
        for (size_t i = n - m + 1; i-- > 0;)
            if (!memcmp(S(self) + i, S(sub), m)) return (int64_t)i;
        return -1;
    }
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(S(self) + i, S(sub), m)) return (int64_t)i;
    return -1;
}

static bool affix(jctx *J, jv *self, jv *a, bool end)
{
    if (a && a->kind == JV_LIST) {
        for (size_t i = 0; i < a->u.list.n; i++)
            if (affix(J, self, a->u.list.v[i], end)) return true;
        return false;
    }
    need_str(J, a, end ? "endswith" : "startswith");
    size_t n = self->u.str.n, m = a->u.str.n;
    if (m > n) return false;
    return !memcmp(S(self) + (end ? n - m : 0), S(a), m);
}

/* str.format: {} {0} {name} and {{ }}; a format spec after ':' is ignored. */
static jv *format(jctx *J, jv *self, jv **args, const char **kws, size_t na)
{
    jbuf b = { 0 };
    const char *s = S(self);
    size_t n = self->u.str.n, auto_i = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if ((c == '{' || c == '}') && i + 1 < n && s[i + 1] == c) {
            jb_put(J, &b, &c, 1);
            i++;
            continue;
        }
        if (c != '{') {
            jb_put(J, &b, &c, 1);
            continue;
        }
        const char *close = memchr(s + i, '}', n - i);
        if (!close) jinja_fail(J, "format: single '{' encountered in format string");
        size_t fe = (size_t)(close - s), ne = i + 1;
        while (ne < fe && s[ne] != ':' && s[ne] != '!') ne++;
        jv *v;
        if (ne == i + 1) {
            v = jinja_arg(args, kws, na, auto_i++, NULL);
        } else if (isdigit((unsigned char)s[i + 1])) {
            v = jinja_arg(args, kws, na, (size_t)strtoul(s + i + 1, NULL, 10), NULL);
        } else {
            char *key = ja_strdup(J, s + i + 1, ne - i - 1);
            v = jinja_arg(args, kws, na, SIZE_MAX, key);
        }
        if (!v) jinja_fail(J, "format: replacement index out of range");
        jv_to_str(J, &b, v);
        i = fe;
    }
    return jv_str(J, b.p ? b.p : "", b.n);
}

jv *jinja_str_format(jctx *J, jv *fmt, jv *args)
{
    jv *list = args->kind == JV_LIST && args->is_tuple ? args : NULL;
    size_t ai = 0;
    jbuf b = { 0 };
    const char *s = S(fmt);
    for (size_t i = 0; i < fmt->u.str.n; i++) {
        if (s[i] != '%') {
            jb_put(J, &b, s + i, 1);
            continue;
        }
        if (++i >= fmt->u.str.n) jinja_fail(J, "incomplete format");
        int prec = -1;
        if (s[i] == '.') {
            prec = 0;
            while (++i < fmt->u.str.n && isdigit((unsigned char)s[i])) prec = prec * 10 + (s[i] - '0');
            if (i >= fmt->u.str.n) jinja_fail(J, "incomplete format");
        }
        char c = s[i];
        if (c == '%') {
            jb_put(J, &b, "%", 1);
            continue;
        }
        jv *v = list ? (ai < list->u.list.n ? list->u.list.v[ai] : NULL) : (ai == 0 ? args : NULL);
        ai++;
        if (!v) jinja_fail(J, "not enough arguments for format string");
        char num[64];
        if (c == 's') {
            jv_to_str(J, &b, v);
        } else if (c == 'r') {
            jv_repr(J, &b, v);
        } else if (c == 'd' || c == 'i') {
            if (v->kind != JV_INT && v->kind != JV_FLOAT && v->kind != JV_BOOL)
                jinja_fail(J, "%%d format: a real number is required, not %s", jv_type_name(v));
            if (v->kind == JV_FLOAT && !(v->u.f > -9.2e18 && v->u.f < 9.2e18))
                jinja_fail(J, "%%d format: %g is out of range", v->u.f);
            long long x = v->kind == JV_INT ? v->u.i : v->kind == JV_BOOL ? v->u.b : (long long)v->u.f;
            snprintf(num, sizeof num, "%lld", x);
            jb_put(J, &b, num, strlen(num));
        } else if (c == 'f') {
            if (v->kind != JV_INT && v->kind != JV_FLOAT && v->kind != JV_BOOL)
                jinja_fail(J, "%%f format: a real number is required, not %s", jv_type_name(v));
            double x = v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
            snprintf(num, sizeof num, "%.*f", prec < 0 ? 6 : prec > 30 ? 30 : prec, x);
            jb_put(J, &b, num, strlen(num));
        } else {
            jinja_fail(J, "unsupported format character '%c'", c);
        }
    }
    return jv_str(J, b.p ? b.p : "", b.n);
}

static bool all_chars(const jv *self, int (*pred)(int))
{
    if (!self->u.str.n) return false;
    for (size_t i = 0; i < self->u.str.n; i++)
        if (!pred((unsigned char)S(self)[i])) return false;
    return true;
}

#define IS(w) (n == strlen(w) && !memcmp(name, w, n))

/* str.center / ljust / rjust (how: 'c', 'l', 'r') to width code points with fill (one character). */
static jv *justify(jctx *J, jv *self, jv *width, jv *fill, char how)
{
    if (!width || width->kind != JV_INT) jinja_fail(J, "%cjust: the width must be an integer", how);
    if (fill && (fill->kind != JV_STR || u8_len(fill->u.str.s, fill->u.str.n) != 1))
        jinja_fail(J, "The fill character must be exactly one character long");
    const char *f = fill ? fill->u.str.s : " ";
    const size_t fn = fill ? fill->u.str.n : 1, len = u8_len(S(self), self->u.str.n);
    if (width->u.i > 65536) jinja_fail(J, "%cjust: width too large", how);
    if (width->u.i <= (int64_t)len) return self;
    const size_t pad = (size_t)width->u.i - len;
    /* Python's center puts the odd space on the left when the width is odd */
    size_t left = how == 'l' ? 0 : how == 'r' ? pad : pad / 2 + (pad & (size_t)width->u.i & 1);
    jbuf b = { 0 };
    for (size_t i = 0; i < left; i++) jb_put(J, &b, f, fn);
    jb_put(J, &b, S(self), self->u.str.n);
    for (size_t i = left; i < pad; i++) jb_put(J, &b, f, fn);
    return jv_str(J, b.p, b.n);
}

static jv *str_method(jctx *J, jv *self, const char *name, size_t n, jv **args, const char **kws, size_t na)
{
    jv *a0 = jinja_arg(args, kws, na, 0, NULL), *a1 = jinja_arg(args, kws, na, 1, NULL);
    if (IS("startswith") || IS("endswith")) return jv_bool(affix(J, self, a0, IS("endswith")));
    if (IS("split") || IS("rsplit")) {
        jv *sep = jinja_arg(args, kws, na, 0, "sep"), *max = jinja_arg(args, kws, na, 1, "maxsplit");
        return split(J, self, sep, max, IS("rsplit"));
    }
    if (IS("strip")) return strip(J, self, a0, true, true);
    if (IS("lstrip")) return strip(J, self, a0, true, false);
    if (IS("rstrip")) return strip(J, self, a0, false, true);
    if (IS("replace")) return replace(J, self, a0, a1, jinja_arg(args, kws, na, 2, NULL));
    if (IS("lower")) return jinja_filter_case(J, self, 0);
    if (IS("upper")) return jinja_filter_case(J, self, 1);
    if (IS("capitalize")) return jinja_filter_case(J, self, 2);
    if (IS("title")) return jinja_filter_case(J, self, 3);
    if (IS("format")) return format(J, self, args, kws, na);
    if (IS("find") || IS("rfind") || IS("index")) {
        int64_t at = find(self, need_str(J, a0, "find"), IS("rfind"));
        if (at < 0 && IS("index")) jinja_fail(J, "substring not found");
        return jv_int(J, at < 0 ? -1 : (int64_t)u8_len(S(self), (size_t)at));
    }
    if (IS("count")) {
        need_str(J, a0, "count");
        int64_t c = 0;
        size_t m = a0->u.str.n;
        if (!m) return jv_int(J, (int64_t)u8_len(S(self), self->u.str.n) + 1);
        for (size_t i = 0; i + m <= self->u.str.n;)
            if (!memcmp(S(self) + i, S(a0), m))
                c++, i += m;
            else
                i++;
        return jv_int(J, c);
    }
    if (IS("join")) {
        jv *items = jinja_iter_list(J, a0 ? a0 : jv_list(J, 0));
        jbuf b = { 0 };
        for (size_t i = 0; i < items->u.list.n; i++) {
            jv *it = items->u.list.v[i];
            if (it->kind != JV_STR)
                jinja_fail(J, "sequence item %zu: expected str instance, %s found", i, jv_type_name(it));
            if (i) jb_put(J, &b, S(self), self->u.str.n);
            jb_put(J, &b, S(it), it->u.str.n);
        }
        return jv_str(J, b.p ? b.p : "", b.n);
    }
    if (IS("center") || IS("ljust") || IS("rjust")) return justify(J, self, a0, a1, name[0]);
    if (IS("isdigit")) return jv_bool(all_chars(self, isdigit));
    if (IS("isalpha")) return jv_bool(all_chars(self, isalpha));
    if (IS("isalnum")) return jv_bool(all_chars(self, isalnum));
    if (IS("isspace")) return jv_bool(all_chars(self, isspace));
    if (IS("islower") || IS("isupper")) {
        bool cased = false, ok = true;
        for (size_t i = 0; i < self->u.str.n; i++) {
            int c = (unsigned char)S(self)[i];
            if (isalpha(c)) cased = true;
            if (IS("islower") ? isupper(c) : islower(c)) ok = false;
        }
        return jv_bool(cased && ok);
    }
    if (IS("splitlines")) {
        jv *out = jv_list(J, 0);
        size_t b = 0, len = self->u.str.n;
        for (size_t i = 0; i < len; i++) {
            if (S(self)[i] != '\n' && S(self)[i] != '\r') continue;
            jv_list_push(J, out, jv_str(J, S(self) + b, i - b));
            if (S(self)[i] == '\r' && i + 1 < len && S(self)[i + 1] == '\n') i++;
            b = i + 1;
        }
        if (b < len) jv_list_push(J, out, jv_str(J, S(self) + b, len - b));
        return out;
    }
    return NULL;
}

/* Markup's string methods: their string arguments escaped (join's items too),
 * a string result, or each string of a list result, markup. */
static jv *markup_method(jctx *J, jv *self, const char *name, size_t n, jv **args, const char **kws,
                         size_t na)
{
    jv **ea = ja_alloc(J, (na + 1) * sizeof *ea);
    for (size_t i = 0; i < na; i++) {
        jv *a = args[i];
        /* replace escapes its new text only (markupsafe's Markup.replace) */
        if (a->kind == JV_STR && !(IS("replace") && i != 1)) a = jinja_escape(J, a, false);
        if (IS("join") && a->kind == JV_LIST) {
            jv *l = jv_list(J, a->u.list.n);
            for (size_t k = 0; k < a->u.list.n; k++) {
                jv *it = a->u.list.v[k];
                jv_list_push(J, l, it->kind == JV_STR ? jinja_escape(J, it, false) : it);
            }
            a = l;
        }
        ea[i] = a;
    }
    jv plain = *self;
    plain.is_markup = false;
    const bool escapes = IS("replace") || IS("join") || IS("format");
    jv *r = str_method(J, &plain, name, n, escapes ? ea : args, kws, na);
    if (r && r->kind == JV_STR) return jv_markup(J, r);
    if (r && r->kind == JV_LIST && (IS("split") || IS("rsplit") || IS("splitlines")))
        for (size_t k = 0; k < r->u.list.n; k++) r->u.list.v[k] = jv_markup(J, r->u.list.v[k]);
    return r;
}

jv *jinja_method(jctx *J, jv *self, const char *name, size_t n, jv **args, const char **kws, size_t na)
{
    jinja_step(J);
    if ((self->kind == JV_LIST || (self->kind == JV_DICT && !self->is_ns)) && in_set(mutators, name, n) &&
        !(self->kind == JV_LIST && self->is_tuple))
        jinja_fail(J, "access to attribute '%.*s' of '%s' object is unsafe", (int)n, name,
                   jv_type_name(self));
    if (self->kind == JV_STR && self->is_markup) return markup_method(J, self, name, n, args, kws, na);
    if (self->kind == JV_STR) return str_method(J, self, name, n, args, kws, na);
    jv *a0 = jinja_arg(args, kws, na, 0, NULL);
    if (self->kind == JV_DICT && !self->is_ns) {
        if (IS("get")) {
            if (!a0) jinja_fail(J, "get expected at least 1 argument, got 0");
            jv *v = jv_dict_getv(self, a0), *d = jinja_arg(args, kws, na, 1, NULL);
            return v ? v : d ? d : jv_none();
        }
        if (IS("copy")) {
            jv *d = jv_dict(J);
            for (size_t i = 0; i < self->u.dict.n; i++)
                jv_dict_set(J, d, self->u.dict.k[i], self->u.dict.v[i]);
            return d;
        }
        jv *out = jv_list(J, self->u.dict.n);
        for (size_t i = 0; i < self->u.dict.n; i++) {
            if (IS("keys"))
                jv_list_push(J, out, self->u.dict.k[i]);
            else if (IS("values"))
                jv_list_push(J, out, self->u.dict.v[i]);
            else if (IS("items")) {
                jv *t = jv_list(J, 2);
                jv_list_push(J, t, self->u.dict.k[i]);
                jv_list_push(J, t, self->u.dict.v[i]);
                t->is_tuple = true;
                jv_list_push(J, out, t);
            } else
                return NULL;
        }
        if (IS("keys") || IS("values") || IS("items")) return out;
        return NULL;
    }
    if (self->kind == JV_LIST) {
        if (IS("copy")) {
            jv *l = jv_list(J, self->u.list.n);
            for (size_t i = 0; i < self->u.list.n; i++) jv_list_push(J, l, self->u.list.v[i]);
            return l;
        }
        if (IS("index") || IS("count")) {
            if (!a0) jinja_fail(J, "%.*s: missing argument", (int)n, name);
            int64_t c = 0;
            for (size_t i = 0; i < self->u.list.n; i++)
                if (jv_equal(self->u.list.v[i], a0)) {
                    if (IS("index")) return jv_int(J, (int64_t)i);
                    c++;
                }
            if (IS("index")) jinja_fail(J, "value is not in list");
            return jv_int(J, c);
        }
    }
    return NULL;
}

#undef IS

/* ---- globals ---- */

enum { G_RANGE = 1, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };

jv *jinja_global(jctx *J, const char *name, size_t n)
{
    static const struct {
        const char *name;
        int id;
    } g[] = { { "range", G_RANGE },
              { "namespace", G_NAMESPACE },
              { "dict", G_DICT },
              { "raise_exception", G_RAISE },
              { "strftime_now", G_STRFTIME } };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (strlen(g[i].name) == n && !memcmp(g[i].name, name, n)) {
            jv *f = jv_new(J, JV_FUNC);
            f->u.func.id = g[i].id;
            return f;
        }
    return NULL;
}

static int64_t int_arg(jctx *J, jv *x)
{
    if (!x || (x->kind != JV_INT && x->kind != JV_BOOL))
        jinja_fail(J, "range: '%s' object cannot be interpreted as an integer", x ? jv_type_name(x) : "None");
    return x->kind == JV_INT ? x->u.i : x->u.b;
}

jv *jinja_call_func(jctx *J, jv *fn, jv **args, const char **kws, size_t na)
{
    switch (fn->u.func.id) {
    case G_RANGE: {
        int64_t a = 0, b, step = 1;
        if (na == 1)
            b = int_arg(J, args[0]);
        else if (na == 2 || na == 3) {
            a = int_arg(J, args[0]);
            b = int_arg(J, args[1]);
            if (na == 3) step = int_arg(J, args[2]);
        } else
            jinja_fail(J, "range expected 1 to 3 arguments, got %zu", na);
        if (!step) jinja_fail(J, "range() arg 3 must not be zero");
        jv *l = jv_list(J, 0);
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
            jinja_step(J);
            jv_list_push(J, l, jv_int(J, i));
        }
        return l;
    }
    case G_NAMESPACE:
    case G_DICT: {
        jv *d = jv_dict(J);
        d->is_ns = fn->u.func.id == G_NAMESPACE;
        for (size_t i = 0; i < na; i++) {
            if (kws[i]) {
                jv_dict_set(J, d, jv_cstr(J, kws[i]), args[i]);
            } else if (args[i]->kind == JV_DICT) {
                for (size_t k = 0; k < args[i]->u.dict.n; k++)
                    jv_dict_set(J, d, args[i]->u.dict.k[k], args[i]->u.dict.v[k]);
            } else {
                jinja_fail(J, "%s: positional arguments must be mappings", d->is_ns ? "namespace" : "dict");
            }
        }
        return d;
    }
    case G_RAISE: {
        jv *m = na ? jv_stringify(J, args[0]) : jv_str(J, "", 0);
        jinja_fail(J, "%s", m->u.str.s);
    }
    case G_STRFTIME: {
        if (!na || args[0]->kind != JV_STR) jinja_fail(J, "strftime_now: expected a format string");
        time_t now = time(NULL);
        struct tm tm;
        char buf[256];
        if (!localtime_r(&now, &tm)) jinja_fail(J, "strftime_now: no local time");
        size_t len = strftime(buf, sizeof buf, args[0]->u.str.s, &tm);
        return jv_str(J, buf, len);
    }
    default: jinja_fail(J, "not callable");
    }
}
