/*
 * jinja_filters.c — the filters (x | name(args)) and tests (x is name args) of
 * jinja2 that chat templates use, with jinja2's defaults (unique, sort and
 * dictsort compare strings case-insensitively; default() replaces only
 * undefined unless its boolean argument is true) and transformers' tojson
 * (json.dumps with ensure_ascii=False, key order kept, indent optional).
 *
 * Filters are pure: they build new values and never change their input. An
 * unknown filter or test is a render error naming it.
 *
 * jinja2's leniency where templates rely on it: map and the select family give
 * an empty sequence for a false value (none, undefined, 0, ""); default() and
 * length accept undefined. Markup (jv.is_markup, from safe and escape): escape
 * leaves it alone, and the filters jinja2 runs through soft_str (trim, upper,
 * lower, capitalize, center, indent, string, format) keep it markup, format's
 * arguments escaped; the others give plain strings, as jinja2's do.
 */
#include "template/jinja_int.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NAME_IS(w) (!strcmp(name, w))

jv *jinja_arg(jv **args, const char **kws, size_t na, size_t pos, const char *name)
{
    size_t p = 0;
    for (size_t i = 0; i < na; i++) {
        if (kws[i]) {
            if (name && !strcmp(kws[i], name)) return args[i];
        } else if (p++ == pos) {
            return args[i];
        }
    }
    return NULL;
}

static jv *str_of(jctx *J, jv *x) { return jv_stringify(J, x); }

/* x as a plain string (a markup string's bytes without the mark). */
static jv *plain_of(jctx *J, jv *x)
{
    x = str_of(J, x);
    if (!x->is_markup) return x;
    jv *p = jv_str(J, "", 0);
    p->u.str = x->u.str;
    return p;
}

static _Noreturn void fail_undefined(jctx *J, const jv *x)
{
    jinja_fail(J, "'%s' is undefined", x->u.str.s ? x->u.str.s : "value");
}

static jv *case_map(jctx *J, jv *x, int mode) /* 0 lower, 1 upper, 2 capitalize, 3 title */
{
    x = str_of(J, x);
    char *s = ja_strdup(J, x->u.str.s, x->u.str.n);
    bool start = true;
    for (size_t i = 0; i < x->u.str.n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool alpha = isalpha(c) || c >= 0x80;
        if (mode == 0)
            s[i] = (char)tolower(c);
        else if (mode == 1)
            s[i] = (char)toupper(c);
        else if (mode == 2)
            s[i] = (char)(i == 0 ? toupper(c) : tolower(c));
        else
            s[i] = (char)(start ? toupper(c) : tolower(c));
        if (mode == 3) start = !alpha && !isdigit(c);
    }
    return jv_str(J, s, x->u.str.n);
}

jv *jinja_filter_case(jctx *J, jv *x, int mode) { return case_map(J, x, mode); }

/* The attribute "a" or "a.b" of x (jinja2's make_attrgetter: dots descend, digits index). */
static jv *attr_path(jctx *J, jv *x, jv *attr)
{
    if (attr->kind == JV_INT) return jinja_getitem(J, x, attr);
    attr = str_of(J, attr);
    const char *s = attr->u.str.s, *end = s + attr->u.str.n;
    while (s <= end) {
        const char *dot = memchr(s, '.', (size_t)(end - s));
        if (!dot) dot = end;
        bool digits = dot > s;
        for (const char *c = s; c < dot; c++) digits &= isdigit((unsigned char)*c) != 0;
        if (digits)
            x = jinja_getitem(J, x, jv_int(J, strtoll(s, NULL, 10)));
        else
            x = jinja_getitem(J, x, jv_str(J, s, (size_t)(dot - s)));
        s = dot + 1;
        if (dot == end) break;
    }
    return x;
}

static int64_t to_int(jctx *J, jv *x, const char *what)
{
    if (x->kind == JV_INT) return x->u.i;
    if (x->kind == JV_BOOL) return x->u.b;
    if (x->kind == JV_FLOAT) return (int64_t)x->u.f;
    jinja_fail(J, "%s: expected an integer, got %s", what, jv_type_name(x));
}

/* Case-folded copy of a string value (for jinja2's case-insensitive sorts). */
static jv *fold(jctx *J, jv *x, bool case_sensitive)
{
    if (case_sensitive || x->kind != JV_STR) return x;
    return case_map(J, x, 0);
}

typedef struct sort_item {
    jv *key, *val;
} sort_item;

/* Stable merge sort of n items by key (jv_compare may fail: no qsort state to unwind). */
static void sort_items(jctx *J, sort_item *a, size_t n, bool reverse)
{
    if (n < 2) return;
    sort_item *tmp = ja_alloc(J, n * sizeof *tmp);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                jinja_step(J);
                int c = jv_compare(J, a[j].key, a[i].key);
                if (reverse) c = -c;
                tmp[k++] = c < 0 ? a[j++] : a[i++];
            }
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof *a);
    }
}

static jv *f_tojson(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    /* transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    jv *asc = jinja_arg(args, kws, na, 0, "ensure_ascii"), *ind = jinja_arg(args, kws, na, 1, "indent");
    jv *seps = jinja_arg(args, kws, na, 2, "separators"), *sk = jinja_arg(args, kws, na, 3, "sort_keys");
    jjson_opts o = { .indent = -1, .ensure_ascii = asc && jv_truthy(asc), .sort_keys = sk && jv_truthy(sk) };
    if (ind && ind->kind != JV_NONE) o.indent = (int)to_int(J, ind, "tojson indent");
    if (o.indent > 64) o.indent = 64;
    if (seps && seps->kind == JV_LIST && seps->u.list.n == 2 && seps->u.list.v[0]->kind == JV_STR &&
        seps->u.list.v[1]->kind == JV_STR) {
        o.item_sep = seps->u.list.v[0]->u.str.s;
        o.key_sep = seps->u.list.v[1]->u.str.s;
    }
    jbuf b = { 0 };
    jv_to_json(J, &b, x, &o, 0);
    return jv_str(J, b.p ? b.p : "", b.n);
}

static jv *f_join(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *sep = jinja_arg(args, kws, na, 0, "d"), *attr = jinja_arg(args, kws, na, 1, "attribute");
    jv *items = jinja_iter_list(J, x);
    jbuf b = { 0 };
    jv *s = sep ? str_of(J, sep) : NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        jinja_step(J);
        if (i && s) jb_put(J, &b, s->u.str.s, s->u.str.n);
        jv *it = items->u.list.v[i];
        jv_to_str(J, &b, attr ? attr_path(J, it, attr) : it);
    }
    return jv_str(J, b.p ? b.p : "", b.n);
}

/* jinja2's map and select family iterate only a true value: none, false, 0 or
 * "" give an empty sequence. */
static jv *iter_if_true(jctx *J, jv *x) { return jv_truthy(x) ? jinja_iter_list(J, x) : jv_list(J, 0); }

static jv *f_map(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *items = iter_if_true(J, x), *out = jv_list(J, items->u.list.n);
    jv *attr = jinja_arg(args, kws, na, SIZE_MAX, "attribute");
    jv *dflt = jinja_arg(args, kws, na, SIZE_MAX, "default");
    jv *fname = attr ? NULL : jinja_arg(args, kws, na, 0, NULL);
    if (!attr && (!fname || fname->kind != JV_STR)) jinja_fail(J, "map: give a filter name or attribute=");
    for (size_t i = 0; i < items->u.list.n; i++) {
        jinja_step(J);
        jv *it = items->u.list.v[i], *r;
        if (attr) {
            r = attr_path(J, it, attr);
            if (r->kind == JV_UNDEF && dflt) r = dflt;
        } else {
            r = jinja_filter(J, ja_strdup(J, fname->u.str.s, fname->u.str.n), it, args + 1, kws + 1, na - 1);
        }
        jv_list_push(J, out, r);
    }
    return out;
}

/* select / reject / selectattr / rejectattr */
static jv *f_select(jctx *J, jv *x, jv **args, const char **kws, size_t na, bool by_attr, bool keep)
{
    jv *items = iter_if_true(J, x), *out = jv_list(J, 0);
    size_t first = by_attr ? 1 : 0;
    jv *attr = by_attr ? jinja_arg(args, kws, na, 0, NULL) : NULL;
    if (by_attr && !attr) jinja_fail(J, "selectattr: missing attribute");
    jv *test = na > first ? args[first] : NULL;
    if (test && test->kind != JV_STR) jinja_fail(J, "select: the test must be a name");
    for (size_t i = 0; i < items->u.list.n; i++) {
        jinja_step(J);
        jv *it = items->u.list.v[i], *v = by_attr ? attr_path(J, it, attr) : it;
        bool t = test ? jinja_test(J, ja_strdup(J, test->u.str.s, test->u.str.n), v, args + first + 1,
                                   na - first - 1)
                      : jv_truthy(v);
        if (t == keep) jv_list_push(J, out, it);
    }
    return out;
}

static jv *f_items(jctx *J, jv *x)
{
    if (x->kind == JV_UNDEF) return jv_list(J, 0);
    if (x->kind != JV_DICT) jinja_fail(J, "items: can only get item pairs from a mapping");
    jv *out = jv_list(J, x->u.dict.n);
    for (size_t i = 0; i < x->u.dict.n; i++) {
        jv *t = jv_list(J, 2);
        jv_list_push(J, t, x->u.dict.k[i]);
        jv_list_push(J, t, x->u.dict.v[i]);
        t->is_tuple = true;
        jv_list_push(J, out, t);
    }
    return out;
}

static jv *f_sort(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *rev = jinja_arg(args, kws, na, 0, "reverse"), *cs = jinja_arg(args, kws, na, 1, "case_sensitive");
    jv *attr = jinja_arg(args, kws, na, 2, "attribute");
    jv *items = jinja_iter_list(J, x);
    size_t n = items->u.list.n;
    sort_item *a = ja_alloc(J, (n + 1) * sizeof *a);
    for (size_t i = 0; i < n; i++) {
        jv *v = items->u.list.v[i];
        a[i].val = v;
        a[i].key = fold(J, attr ? attr_path(J, v, attr) : v, cs && jv_truthy(cs));
    }
    sort_items(J, a, n, rev && jv_truthy(rev));
    jv *out = jv_list(J, n);
    for (size_t i = 0; i < n; i++) jv_list_push(J, out, a[i].val);
    return out;
}

static jv *f_dictsort(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *cs = jinja_arg(args, kws, na, 0, "case_sensitive"), *by = jinja_arg(args, kws, na, 1, "by");
    jv *rev = jinja_arg(args, kws, na, 2, "reverse");
    bool by_value = by && by->kind == JV_STR && by->u.str.n == 5 && !memcmp(by->u.str.s, "value", 5);
    if (x->kind == JV_UNDEF) fail_undefined(J, x);
    jv *pairs = f_items(J, x);
    size_t n = pairs->u.list.n;
    sort_item *a = ja_alloc(J, (n + 1) * sizeof *a);
    for (size_t i = 0; i < n; i++) {
        a[i].val = pairs->u.list.v[i];
        a[i].key = fold(J, a[i].val->u.list.v[by_value ? 1 : 0], cs && jv_truthy(cs));
    }
    sort_items(J, a, n, rev && jv_truthy(rev));
    jv *out = jv_list(J, n);
    for (size_t i = 0; i < n; i++) jv_list_push(J, out, a[i].val);
    return out;
}

static jv *f_unique(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *cs = jinja_arg(args, kws, na, 0, "case_sensitive"), *attr = jinja_arg(args, kws, na, 1, "attribute");
    jv *items = jinja_iter_list(J, x), *out = jv_list(J, 0), *seen = jv_list(J, 0);
    for (size_t i = 0; i < items->u.list.n; i++) {
        jv *v = items->u.list.v[i];
        jv *k = fold(J, attr ? attr_path(J, v, attr) : v, cs && jv_truthy(cs));
        if (jinja_contains(J, seen, k)) continue;
        jv_list_push(J, seen, k);
        jv_list_push(J, out, v);
    }
    return out;
}

static jv *f_indent(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *w = jinja_arg(args, kws, na, 0, "width"), *first = jinja_arg(args, kws, na, 1, "first");
    jv *blank = jinja_arg(args, kws, na, 2, "blank");
    jv *pad;
    if (w && w->kind == JV_STR)
        pad = w;
    else {
        int64_t n = w ? to_int(J, w, "indent width") : 4;
        if (n < 0) n = 0;
        if (n > 4096) jinja_fail(J, "indent: width too large");
        char *s = ja_alloc(J, (size_t)n + 1);
        memset(s, ' ', (size_t)n);
        pad = jv_str(J, s, (size_t)n);
    }
    x = str_of(J, x);
    jbuf b = { 0 };
    const char *s = x->u.str.s, *end = s + x->u.str.n;
    bool at_first = true;
    /* lines split on "\n"; jinja2 appends a newline then strips it again */
    while (s <= end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        bool is_blank = true;
        for (const char *c = s; c < le; c++) is_blank &= *c == ' ' || *c == '\t' || *c == '\r';
        bool do_pad = at_first ? first && jv_truthy(first) : (blank && jv_truthy(blank)) || !is_blank;
        if (do_pad && !(at_first && le == s && !nl && x->u.str.n == 0))
            jb_put(J, &b, pad->u.str.s, pad->u.str.n);
        jb_put(J, &b, s, (size_t)(le - s));
        if (!nl) break;
        jb_put(J, &b, "\n", 1);
        s = nl + 1;
        at_first = false;
    }
    return jv_str(J, b.p ? b.p : "", b.n);
}

static jv *f_replace(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *old = jinja_arg(args, kws, na, 0, "old"), *nw = jinja_arg(args, kws, na, 1, "new");
    jv *count = jinja_arg(args, kws, na, 2, "count");
    if (!old || !nw) jinja_fail(J, "replace: needs old and new");
    jv *a[3] = { str_of(J, old), str_of(J, nw), count };
    const char *k[3] = { NULL, NULL, NULL };
    return jinja_method(J, plain_of(J, x), "replace", 7, a, k, count ? 3 : 2); /* plain, as jinja2's */
}

static jv *f_trim(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *chars = jinja_arg(args, kws, na, 0, "chars");
    jv *a[1] = { chars };
    const char *k[1] = { NULL };
    return jinja_method(J, str_of(J, x), "strip", 5, a, k, chars ? 1 : 0);
}

static jv *f_int(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *d = jinja_arg(args, kws, na, 0, "default");
    if (x->kind == JV_UNDEF) fail_undefined(J, x);
    switch (x->kind) {
    case JV_INT: return x;
    case JV_BOOL: return jv_int(J, x->u.b);
    case JV_FLOAT:
        if (isfinite(x->u.f) && fabs(x->u.f) < 9.2e18) return jv_int(J, (int64_t)x->u.f);
        break;
    case JV_STR: {
        char *s = ja_strdup(J, x->u.str.s, x->u.str.n), *e;
        long long v = strtoll(s, &e, 10);
        while (*e == ' ' || *e == '\n' || *e == '\t') e++;
        if (e != s && !*e) return jv_int(J, v);
        double f = strtod(s, &e);
        while (*e == ' ' || *e == '\n' || *e == '\t') e++;
        if (e != s && !*e && isfinite(f) && fabs(f) < 9.2e18) return jv_int(J, (int64_t)f);
        break;
    }
    default: break;
    }
    return d ? d : jv_int(J, 0);
}

static jv *f_float(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *d = jinja_arg(args, kws, na, 0, "default");
    if (x->kind == JV_UNDEF) fail_undefined(J, x);
    if (x->kind == JV_FLOAT) return x;
    if (x->kind == JV_INT || x->kind == JV_BOOL)
        return jv_float(J, x->kind == JV_INT ? (double)x->u.i : x->u.b);
    if (x->kind == JV_STR) {
        char *s = ja_strdup(J, x->u.str.s, x->u.str.n), *e;
        double f = strtod(s, &e);
        if (e != s && !*e) return jv_float(J, f);
    }
    return d ? d : jv_float(J, 0.0);
}

static jv *f_round(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *p = jinja_arg(args, kws, na, 0, "precision"), *m = jinja_arg(args, kws, na, 1, "method");
    int64_t prec = p ? to_int(J, p, "round precision") : 0;
    if (x->kind != JV_INT && x->kind != JV_FLOAT && x->kind != JV_BOOL)
        jinja_fail(J, "round: expected a number, got %s", jv_type_name(x));
    double v = x->kind == JV_FLOAT ? x->u.f : x->kind == JV_INT ? (double)x->u.i : x->u.b;
    if (prec < -300 || prec > 300) return jv_float(J, v);
    double scale = pow(10.0, (double)prec), s = v * scale;
    const char *meth = m && m->kind == JV_STR ? m->u.str.s : "common";
    if (!strcmp(meth, "ceil"))
        s = ceil(s);
    else if (!strcmp(meth, "floor"))
        s = floor(s);
    else
        s = nearbyint(s);
    return jv_float(J, s / scale);
}

static jv *f_first_last(jctx *J, jv *x, bool last)
{
    jv *items = jinja_iter_list(J, x);
    if (!items->u.list.n) return jv_undef(J, last ? "last" : "first", last ? 4 : 5);
    return items->u.list.v[last ? items->u.list.n - 1 : 0];
}

static jv *f_length(jctx *J, jv *x)
{
    switch (x->kind) {
    case JV_STR: return jv_int(J, (int64_t)u8_len(x->u.str.s, x->u.str.n));
    case JV_LIST: return jv_int(J, (int64_t)x->u.list.n);
    case JV_DICT: return jv_int(J, (int64_t)x->u.dict.n);
    case JV_UNDEF: return jv_int(J, 0);
    default: jinja_fail(J, "object of type '%s' has no len()", jv_type_name(x));
    }
}

static jv *f_sum_min_max(jctx *J, jv *x, jv **args, const char **kws, size_t na, int which)
{
    jv *attr = jinja_arg(args, kws, na, which == 0 ? 0 : 1, "attribute");
    jv *items = jinja_iter_list(J, x);
    if (which == 0) {
        jv *acc = jinja_arg(args, kws, na, 1, "start");
        if (!acc) acc = jv_int(J, 0);
        for (size_t i = 0; i < items->u.list.n; i++) {
            jv *v = items->u.list.v[i];
            if (attr) v = attr_path(J, v, attr);
            jv *pa[2] = { acc, v };
            (void)pa;
            if ((acc->kind == JV_INT || acc->kind == JV_BOOL) && (v->kind == JV_INT || v->kind == JV_BOOL))
                acc = jv_int(J, (acc->kind == JV_INT ? acc->u.i : acc->u.b) +
                                    (v->kind == JV_INT ? v->u.i : v->u.b));
            else if ((acc->kind == JV_INT || acc->kind == JV_FLOAT) &&
                     (v->kind == JV_INT || v->kind == JV_FLOAT))
                acc = jv_float(J, (acc->kind == JV_INT ? (double)acc->u.i : acc->u.f) +
                                      (v->kind == JV_INT ? (double)v->u.i : v->u.f));
            else
                jinja_fail(J, "sum: unsupported operand types");
        }
        return acc;
    }
    if (!items->u.list.n) return jv_undef(J, which == 1 ? "min" : "max", 3);
    jv *best = items->u.list.v[0];
    for (size_t i = 1; i < items->u.list.n; i++) {
        jv *v = items->u.list.v[i];
        jv *ka = fold(J, attr ? attr_path(J, best, attr) : best, false);
        jv *kb = fold(J, attr ? attr_path(J, v, attr) : v, false);
        int c = jv_compare(J, kb, ka);
        if (which == 1 ? c < 0 : c > 0) best = v;
    }
    return best;
}

/* jinja2's wordcount: the matches of \w+ (letters, digits, _ and, for UTF-8,
 * every non-ASCII byte counted as a word character). */
static jv *f_wordcount(jctx *J, jv *x)
{
    x = str_of(J, x);
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < x->u.str.n; i++) {
        const unsigned char c = (unsigned char)x->u.str.s[i];
        const bool w = isalnum(c) || c == '_' || c >= 0x80;
        n += w && !in;
        in = w;
    }
    return jv_int(J, n);
}

/* truncate(length=255, killwords=false, end="...", leeway=5): s itself when at
 * most length + leeway code points, else its first length - len(end) code points
 * (cut back to before their last space unless killwords) and end. */
static jv *f_truncate(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *l = jinja_arg(args, kws, na, 0, "length"), *kill = jinja_arg(args, kws, na, 1, "killwords");
    jv *end = jinja_arg(args, kws, na, 2, "end"), *lw = jinja_arg(args, kws, na, 3, "leeway");
    x = str_of(J, x);
    jv *e = end ? str_of(J, end) : jv_str(J, "...", 3);
    const int64_t length = l ? to_int(J, l, "truncate length") : 255;
    const int64_t leeway = lw && lw->kind != JV_NONE ? to_int(J, lw, "truncate leeway") : 5;
    const size_t elen = u8_len(e->u.str.s, e->u.str.n), slen = u8_len(x->u.str.s, x->u.str.n);
    if (length < (int64_t)elen) jinja_fail(J, "expected length >= %zu, got %lld", elen, (long long)length);
    if (leeway < 0) jinja_fail(J, "expected leeway >= 0, got %lld", (long long)leeway);
    if ((int64_t)slen <= length + leeway) return x;
    const bool kill_words = kill && jv_truthy(kill);
    const size_t keep = u8_offset(x->u.str.s, x->u.str.n, (size_t)(length - (int64_t)elen));
    size_t cut = keep, k = keep;
    while (!kill_words && k > 0 && x->u.str.s[k - 1] != ' ') k--;
    if (!kill_words && k > 0) cut = k - 1; /* rsplit(" ", 1)[0] */
    jbuf b = { 0 };
    jb_put(J, &b, x->u.str.s, cut);
    jb_put(J, &b, e->u.str.s, e->u.str.n);
    return jv_str(J, b.p, b.n);
}

/* jinja2's filter and test names (what `x is filter` / `x is test` ask). */
static const char *const jinja2_filters[] = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr",
};
static const char *const jinja2_tests[] = {
    "!=",       "<",           "<=",          "==",      ">",       ">=",        "boolean",  "callable",
    "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",      "false",    "filter",
    "float",    "ge",          "greaterthan", "gt",      "in",      "integer",   "iterable", "le",
    "lessthan", "lower",       "lt",          "mapping", "ne",      "none",      "number",   "odd",
    "sameas",   "sequence",    "string",      "test",    "true",    "undefined", "upper",
};

static bool named_in(const jv *x, const char *const *names, size_t n)
{
    if (x->kind != JV_STR) return false;
    for (size_t i = 0; i < n; i++)
        if (strlen(names[i]) == x->u.str.n && !memcmp(names[i], x->u.str.s, x->u.str.n)) return true;
    return false;
}

/* batch(linecount, fill_with=none): lists of linecount items, the last filled. */
static jv *f_batch(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *c = jinja_arg(args, kws, na, 0, "linecount"), *fill = jinja_arg(args, kws, na, 1, "fill_with");
    const int64_t k = c ? to_int(J, c, "batch linecount") : 0;
    if (k <= 0) jinja_fail(J, "batch: linecount must be positive");
    jv *items = jinja_iter_list(J, x), *out = jv_list(J, 0), *cur = NULL;
    for (size_t i = 0; i < items->u.list.n; i++) {
        jinja_step(J);
        if (!cur || (int64_t)cur->u.list.n == k) jv_list_push(J, out, cur = jv_list(J, (size_t)k));
        jv_list_push(J, cur, items->u.list.v[i]);
    }
    while (fill && fill->kind != JV_NONE && cur && (int64_t)cur->u.list.n < k) jv_list_push(J, cur, fill);
    return out;
}

/* slice(slices, fill_with=none): slices columns, the first len % slices one longer
 * (the others filled when fill_with is given). */
static jv *f_slice(jctx *J, jv *x, jv **args, const char **kws, size_t na)
{
    jv *c = jinja_arg(args, kws, na, 0, "slices"), *fill = jinja_arg(args, kws, na, 1, "fill_with");
    const int64_t k = c ? to_int(J, c, "slice slices") : 0;
    if (k <= 0 || k > 4096) jinja_fail(J, "slice: slices must be in 1..4096");
    jv *items = jinja_iter_list(J, x), *out = jv_list(J, (size_t)k);
    const size_t n = items->u.list.n, per = n / (size_t)k, extra = n % (size_t)k;
    size_t off = 0;
    for (size_t s = 0; s < (size_t)k; s++) {
        const size_t len = per + (s < extra);
        jv *col = jv_list(J, len + 1);
        for (size_t i = 0; i < len; i++) jv_list_push(J, col, items->u.list.v[off + i]);
        off += len;
        if (fill && fill->kind != JV_NONE && extra && s >= extra) jv_list_push(J, col, fill);
        jv_list_push(J, out, col);
    }
    return out;
}

jv *jinja_escape(jctx *J, jv *x, bool force)
{
    x = str_of(J, x);
    if (x->is_markup && !force) return x;
    jbuf b = { 0 };
    for (size_t i = 0; i < x->u.str.n; i++) {
        char c = x->u.str.s[i];
        const char *e = c == '&'    ? "&amp;"
                        : c == '<'  ? "&lt;"
                        : c == '>'  ? "&gt;"
                        : c == '"'  ? "&#34;"
                        : c == '\'' ? "&#39;"
                                    : NULL;
        if (e)
            jb_put(J, &b, e, strlen(e));
        else
            jb_put(J, &b, &c, 1);
    }
    return jv_markup(J, jv_str(J, b.p ? b.p : "", b.n));
}

/* The filters that keep a markup input markup (jinja2's soft_str: the string
 * methods of Markup), with format's arguments escaped as Markup's % does. */
static const char *const markup_kept[] = { "trim",   "upper",  "lower",  "capitalize", "center",
                                           "indent", "string", "format", "truncate" };

static jv *filter_markup(jctx *J, const char *name, jv *x, jv **args, const char **kws, size_t na)
{
    jv **ea = ja_alloc(J, (na + 1) * sizeof *ea);
    for (size_t i = 0; i < na; i++)
        ea[i] = args[i]->kind == JV_STR ? jinja_escape(J, args[i], false) : args[i];
    jv plain = *x;
    plain.is_markup = false;
    jv *r = jinja_filter(J, name, &plain, !strcmp(name, "format") ? ea : args, kws, na);
    return jv_markup(J, r);
}

jv *jinja_filter(jctx *J, const char *name, jv *x, jv **args, const char **kws, size_t na)
{
    jinja_step(J);
    if (x->kind == JV_STR && x->is_markup)
        for (size_t k = 0; k < sizeof markup_kept / sizeof *markup_kept; k++)
            if (NAME_IS(markup_kept[k])) return filter_markup(J, name, x, args, kws, na);
    if (NAME_IS("tojson")) return f_tojson(J, x, args, kws, na);
    if (NAME_IS("trim")) return f_trim(J, x, args, kws, na);
    if (NAME_IS("length") || NAME_IS("count")) return f_length(J, x);
    if (NAME_IS("join")) return f_join(J, x, args, kws, na);
    if (NAME_IS("map")) return f_map(J, x, args, kws, na);
    if (NAME_IS("select")) return f_select(J, x, args, kws, na, false, true);
    if (NAME_IS("reject")) return f_select(J, x, args, kws, na, false, false);
    if (NAME_IS("selectattr")) return f_select(J, x, args, kws, na, true, true);
    if (NAME_IS("rejectattr")) return f_select(J, x, args, kws, na, true, false);
    if (NAME_IS("items")) return f_items(J, x);
    if (NAME_IS("list")) {
        jv *items = jinja_iter_list(J, x), *l = jv_list(J, items->u.list.n);
        for (size_t i = 0; i < items->u.list.n; i++) jv_list_push(J, l, items->u.list.v[i]);
        return l;
    }
    if (NAME_IS("first")) return f_first_last(J, x, false);
    if (NAME_IS("last")) return f_first_last(J, x, true);
    if (NAME_IS("default") || NAME_IS("d")) {
        jv *d = jinja_arg(args, kws, na, 0, "default_value"), *b = jinja_arg(args, kws, na, 1, "boolean");
        bool use = x->kind == JV_UNDEF || (b && jv_truthy(b) && !jv_truthy(x));
        return use ? (d ? d : jv_str(J, "", 0)) : x;
    }
    if (NAME_IS("upper")) return case_map(J, x, 1);
    if (NAME_IS("lower")) return case_map(J, x, 0);
    if (NAME_IS("capitalize")) return case_map(J, x, 2);
    if (NAME_IS("title")) return case_map(J, x, 3);
    if (NAME_IS("replace")) return f_replace(J, x, args, kws, na);
    if (NAME_IS("safe")) return jv_markup(J, str_of(J, x));
    if (NAME_IS("string")) return str_of(J, x);
    if (NAME_IS("escape") || NAME_IS("e") || NAME_IS("forceescape"))
        return jinja_escape(J, x, NAME_IS("forceescape"));
    if (NAME_IS("int")) return f_int(J, x, args, kws, na);
    if (NAME_IS("float")) return f_float(J, x, args, kws, na);
    if (NAME_IS("unique")) return f_unique(J, x, args, kws, na);
    if (NAME_IS("reverse")) {
        if (x->kind == JV_STR) {
            jv *chars = jinja_iter_list(J, x);
            jbuf b = { 0 };
            for (size_t i = chars->u.list.n; i-- > 0;) jv_to_str(J, &b, chars->u.list.v[i]);
            jv *r = jv_str(J, b.p ? b.p : "", b.n);
            return x->is_markup ? jv_markup(J, r) : r; /* Markup[::-1] */
        }
        jv *items = jinja_iter_list(J, x), *l = jv_list(J, items->u.list.n);
        for (size_t i = items->u.list.n; i-- > 0;) jv_list_push(J, l, items->u.list.v[i]);
        return l;
    }
    if (NAME_IS("sort")) return f_sort(J, x, args, kws, na);
    if (NAME_IS("dictsort")) return f_dictsort(J, x, args, kws, na);
    if (NAME_IS("indent")) return f_indent(J, x, args, kws, na);
    if (NAME_IS("wordcount")) return f_wordcount(J, x);
    if (NAME_IS("batch")) return f_batch(J, x, args, kws, na);
    if (NAME_IS("truncate")) return f_truncate(J, x, args, kws, na);
    if (NAME_IS("slice")) return f_slice(J, x, args, kws, na);
    if (NAME_IS("abs")) {
        if (x->kind == JV_INT) return jv_int(J, x->u.i < 0 ? -x->u.i : x->u.i);
        if (x->kind == JV_FLOAT) return jv_float(J, fabs(x->u.f));
        if (x->kind == JV_BOOL) return jv_int(J, x->u.b);
        jinja_fail(J, "bad operand type for abs(): '%s'", jv_type_name(x));
    }
    if (NAME_IS("round")) return f_round(J, x, args, kws, na);
    if (NAME_IS("sum")) return f_sum_min_max(J, x, args, kws, na, 0);
    if (NAME_IS("min")) return f_sum_min_max(J, x, args, kws, na, 1);
    if (NAME_IS("max")) return f_sum_min_max(J, x, args, kws, na, 2);
    if (NAME_IS("attr")) {
        jv *a = jinja_arg(args, kws, na, 0, "name");
        if (!a || a->kind != JV_STR) jinja_fail(J, "attr: needs a name");
        return jinja_getattr(J, x, a->u.str.s, a->u.str.n);
    }
    if (NAME_IS("format")) {
        jv *t = jv_list(J, na);
        for (size_t i = 0; i < na; i++) jv_list_push(J, t, args[i]);
        t->is_tuple = true;
        return jinja_str_format(J, str_of(J, x), t);
    }
    if (NAME_IS("center")) {
        jv *w = jinja_arg(args, kws, na, 0, "width");
        int64_t width = w ? to_int(J, w, "center width") : 80;
        x = str_of(J, x);
        int64_t len = (int64_t)u8_len(x->u.str.s, x->u.str.n);
        if (width > 4096) jinja_fail(J, "center: width too large");
        if (width <= len) return x;
        int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        jbuf b = { 0 };
        for (int64_t i = 0; i < left; i++) jb_put(J, &b, " ", 1);
        jb_put(J, &b, x->u.str.s, x->u.str.n);
        for (int64_t i = 0; i < pad - left; i++) jb_put(J, &b, " ", 1);
        return jv_str(J, b.p, b.n);
    }
    jinja_fail(J, "no filter named '%s'", name);
}

bool jinja_test(jctx *J, const char *name, jv *x, jv **args, size_t na)
{
    jinja_step(J);
    jv *a = na ? args[0] : NULL;
    if (NAME_IS("defined")) return x->kind != JV_UNDEF;
    if (NAME_IS("undefined")) return x->kind == JV_UNDEF;
    if (NAME_IS("none")) return x->kind == JV_NONE;
    if (NAME_IS("boolean")) return x->kind == JV_BOOL;
    if (NAME_IS("true")) return x->kind == JV_BOOL && x->u.b;
    if (NAME_IS("false")) return x->kind == JV_BOOL && !x->u.b;
    if (NAME_IS("integer")) return x->kind == JV_INT;
    if (NAME_IS("float")) return x->kind == JV_FLOAT;
    if (NAME_IS("number")) return x->kind == JV_INT || x->kind == JV_FLOAT || x->kind == JV_BOOL;
    if (NAME_IS("string")) return x->kind == JV_STR;
    if (NAME_IS("mapping")) return x->kind == JV_DICT && !x->is_ns;
    if (NAME_IS("iterable"))
        return x->kind == JV_LIST || (x->kind == JV_DICT && !x->is_ns) || x->kind == JV_STR ||
               x->kind == JV_UNDEF;
    if (NAME_IS("sequence"))
        return x->kind == JV_LIST || (x->kind == JV_DICT && !x->is_ns) || x->kind == JV_STR ||
               x->kind == JV_UNDEF;
    if (NAME_IS("callable")) return x->kind == JV_MACRO || x->kind == JV_FUNC;
    if (NAME_IS("escaped")) return x->kind == JV_STR && x->is_markup;
    if (NAME_IS("filter")) return named_in(x, jinja2_filters, sizeof jinja2_filters / sizeof *jinja2_filters);
    if (NAME_IS("test")) return named_in(x, jinja2_tests, sizeof jinja2_tests / sizeof *jinja2_tests);
    if (NAME_IS("sameas")) {
        if (!a) jinja_fail(J, "sameas: needs an argument");
        if (x->kind != a->kind) return false;
        if (x->kind == JV_NONE || x->kind == JV_BOOL) return jv_equal(x, a);
        return x == a;
    }
    if (NAME_IS("in")) {
        if (!a) jinja_fail(J, "in: needs an argument");
        return jinja_contains(J, a, x);
    }
    if (NAME_IS("equalto") || NAME_IS("eq") || NAME_IS("==") || NAME_IS("ne") || NAME_IS("!=")) {
        if (!a) jinja_fail(J, "%s: needs an argument", name);
        return jv_equal(x, a) == (name[0] == 'e' || name[0] == '=');
    }
    if (NAME_IS("lt") || NAME_IS("le") || NAME_IS("gt") || NAME_IS("ge") || NAME_IS("lessthan") ||
        NAME_IS("greaterthan")) {
        if (!a) jinja_fail(J, "%s: needs an argument", name);
        int c = jv_compare(J, x, a);
        if (NAME_IS("lt") || NAME_IS("lessthan")) return c < 0;
        if (NAME_IS("le")) return c <= 0;
        if (NAME_IS("gt") || NAME_IS("greaterthan")) return c > 0;
        return c >= 0;
    }
    if (NAME_IS("odd") || NAME_IS("even") || NAME_IS("divisibleby")) {
        if (x->kind != JV_INT) jinja_fail(J, "%s: expected an integer", name);
        if (NAME_IS("divisibleby")) {
            int64_t d = a ? to_int(J, a, "divisibleby") : 0;
            if (!d) jinja_fail(J, "integer modulo by zero");
            return x->u.i % d == 0;
        }
        return (x->u.i % 2 != 0) == NAME_IS("odd");
    }
    if (NAME_IS("lower") || NAME_IS("upper")) {
        if (x->kind != JV_STR) return false;
        jv *m = case_map(J, x, NAME_IS("lower") ? 0 : 1);
        bool cased = false;
        for (size_t i = 0; i < x->u.str.n; i++) cased |= isalpha((unsigned char)x->u.str.s[i]) != 0;
        return cased && jv_equal(m, x);
    }
    jinja_fail(J, "no test named '%s'", name);
}
