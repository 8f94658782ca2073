/*
 * jinja_eval.c — runs a syntax tree: statements write to J->out, expressions
 * return values, with jinja2's semantics where templates depend on them.
 *
 * Scopes: J->sc is a chain of jscope (innermost first). The template's own scope
 * (J->top) holds top-level `set`s and macros; each for-loop iteration and each
 * macro call gets a fresh scope whose parent is where the loop runs or the macro
 * was defined, so a `set` inside a loop does not outlive its iteration (that is
 * what namespace() is for). A name not found in the chain is looked up in the
 * render's variables (J->vars), then among the globals, else it is undefined.
 * Undefined values print as "" and are false; an attribute of one, a call of
 * one or arithmetic on one is an error, as with jinja2's default Undefined.
 *
 * Bounds: every statement and expression is a step (J->steps <= max_steps);
 * nesting of statements, expressions and macro calls is J->depth <= max_depth;
 * output goes through jb_put, which counts every byte against max_output.
 * exec() returns 0, or FLOW_BREAK / FLOW_CONTINUE travelling up to the loop.
 */
#include "template/jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE };

void jinja_step(jctx *J)
{
    if (++J->steps > J->lim.max_steps)
        jinja_fail(J, "step limit of %llu exceeded", (unsigned long long)J->lim.max_steps);
}

static void enter(jctx *J, const jnode *n)
{
    jinja_step(J);
    if (n->line) J->line = n->line;
    if (++J->depth > J->lim.max_depth) jinja_fail(J, "recursion deeper than %d", J->lim.max_depth);
}

static jscope *scope_new(jctx *J, jscope *parent)
{
    jscope *s = ja_alloc(J, sizeof *s);
    s->parent = parent;
    s->vars = jv_dict(J);
    return s;
}

static void scope_set(jctx *J, const char *name, size_t n, jv *v)
{
    jv_dict_set(J, J->sc->vars, jv_str(J, name, n), v);
}

static jv *lookup(jctx *J, const char *name, size_t n)
{
    for (jscope *s = J->sc; s; s = s->parent) {
        jv *v = jv_dict_get(s->vars, name, n);
        if (v) return v;
    }
    jv *v = jv_dict_get(J->vars, name, n);
    if (v) return v;
    v = jinja_global(J, name, n);
    return v ? v : jv_undef(J, name, n);
}

/* ---- attribute and item lookup ---- */

static const char *undef_name(const jv *u) { return u->u.str.s ? u->u.str.s : "value"; }

jv *jinja_getattr(jctx *J, jv *obj, const char *name, size_t n)
{
    switch (obj->kind) {
    case JV_UNDEF: jinja_fail(J, "'%s' is undefined", undef_name(obj));
    case JV_DICT:
        if (!obj->is_ns && jinja_has_method(obj, name, n)) break;
        {
            jv *v = jv_dict_get(obj, name, n);
            return v ? v : jv_undef(J, name, n);
        }
    case JV_LOOP: {
        size_t i = obj->u.loop.index0, len = obj->u.loop.items->u.list.n;
#define IS(w) (n == strlen(w) && !memcmp(name, w, n))
        if (IS("index")) return jv_int(J, (int64_t)i + 1);
        if (IS("index0")) return jv_int(J, (int64_t)i);
        if (IS("revindex")) return jv_int(J, (int64_t)(len - i));
        if (IS("revindex0")) return jv_int(J, (int64_t)(len - i - 1));
        if (IS("first")) return jv_bool(i == 0);
        if (IS("last")) return jv_bool(i + 1 == len);
        if (IS("length")) return jv_int(J, (int64_t)len);
        if (IS("depth")) return jv_int(J, obj->u.loop.depth);
        if (IS("depth0")) return jv_int(J, obj->u.loop.depth - 1);
        if (IS("previtem")) return i > 0 ? obj->u.loop.items->u.list.v[i - 1] : jv_undef(J, name, n);
        if (IS("nextitem")) return i + 1 < len ? obj->u.loop.items->u.list.v[i + 1] : jv_undef(J, name, n);
        if (IS("cycle")) break;
#undef IS
        return jv_undef(J, name, n);
    }
    default: break;
    }
    if (jinja_has_method(obj, name, n)) {
        jv *f = jv_new(J, JV_FUNC);
        f->u.func.id = -1;
        f->u.func.self = obj;
        /* the method's name travels as a string value beside self */
        jv *pair = jv_list(J, 2);
        jv_list_push(J, pair, obj);
        jv_list_push(J, pair, jv_str(J, name, n));
        f->u.func.self = pair;
        return f;
    }
    return jv_undef(J, name, n);
}

static int64_t norm_index(int64_t i, size_t len) { return i < 0 ? i + (int64_t)len : i; }

jv *jinja_getitem(jctx *J, jv *obj, jv *key)
{
    switch (obj->kind) {
    case JV_UNDEF: jinja_fail(J, "'%s' is undefined", undef_name(obj));
    case JV_DICT: {
        jv *v = jv_dict_getv(obj, key);
        if (v) return v;
        if (key->kind == JV_STR) return jinja_getattr(J, obj, key->u.str.s, key->u.str.n);
        return jv_undef(J, NULL, 0);
    }
    case JV_LIST:
        if (key->kind == JV_INT || key->kind == JV_BOOL) {
            int64_t i = norm_index(key->kind == JV_INT ? key->u.i : key->u.b, obj->u.list.n);
            if (i >= 0 && (size_t)i < obj->u.list.n) return obj->u.list.v[i];
        }
        return jv_undef(J, NULL, 0);
    case JV_STR:
        if (key->kind == JV_INT) {
            size_t len = u8_len(obj->u.str.s, obj->u.str.n);
            int64_t i = norm_index(key->u.i, len);
            if (i >= 0 && (size_t)i < len) {
                size_t a = u8_offset(obj->u.str.s, obj->u.str.n, (size_t)i);
                size_t b = u8_offset(obj->u.str.s, obj->u.str.n, (size_t)i + 1);
                jv *ch = jv_str(J, obj->u.str.s + a, b - a);
                return obj->is_markup ? jv_markup(J, ch) : ch;
            }
            return jv_undef(J, NULL, 0);
        }
        break;
    case JV_LOOP:
        if (key->kind == JV_STR) return jinja_getattr(J, obj, key->u.str.s, key->u.str.n);
        break;
    default: break;
    }
    if (key->kind == JV_STR) return jinja_getattr(J, obj, key->u.str.s, key->u.str.n);
    return jv_undef(J, NULL, 0);
}

/* Python's slice.indices(): start, stop for step over len items. */
static void slice_bounds(jctx *J, jv *a, jv *b, int64_t step, size_t len, int64_t *start, int64_t *stop)
{
    int64_t n = (int64_t)len;
    for (int k = 0; k < 2; k++) {
        jv *x = k ? b : a;
        int64_t *o = k ? stop : start;
        if (!x || x->kind == JV_NONE || x->kind == JV_UNDEF) {
            *o = step > 0 ? (k ? n : 0) : (k ? -1 : n - 1);
            continue;
        }
        if (x->kind != JV_INT) jinja_fail(J, "slice indices must be integers or None");
        int64_t v = x->u.i;
        if (v < 0) {
            v += n;
            if (v < 0) v = step > 0 ? 0 : -1;
        } else if (v >= n) {
            v = step > 0 ? n : n - 1;
        }
        *o = v;
    }
}

static jv *slice(jctx *J, jv *obj, jv *a, jv *b, jv *c)
{
    int64_t step = 1;
    if (c && c->kind != JV_NONE) {
        if (c->kind != JV_INT) jinja_fail(J, "slice indices must be integers or None");
        step = c->u.i;
        if (step == 0) jinja_fail(J, "slice step cannot be zero");
    }
    bool is_str = obj->kind == JV_STR;
    if (obj->kind == JV_UNDEF) jinja_fail(J, "'%s' is undefined", undef_name(obj));
    if (!is_str && obj->kind != JV_LIST) return jv_undef(J, NULL, 0);
    size_t len = is_str ? u8_len(obj->u.str.s, obj->u.str.n) : obj->u.list.n;
    int64_t start, stop;
    slice_bounds(J, a, b, step, len, &start, &stop);
    if (is_str && step == 1) {
        if (stop <= start) return jv_str(J, "", 0);
        size_t x = u8_offset(obj->u.str.s, obj->u.str.n, (size_t)start);
        size_t y = u8_offset(obj->u.str.s, obj->u.str.n, (size_t)stop);
        return jv_str(J, obj->u.str.s + x, y - x);
    }
    jv *out = jv_list(J, 0);
    jbuf sb = { 0 };
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        jinja_step(J);
        if (is_str) {
            size_t x = u8_offset(obj->u.str.s, obj->u.str.n, (size_t)i);
            size_t y = u8_offset(obj->u.str.s, obj->u.str.n, (size_t)i + 1);
            jb_put(J, &sb, obj->u.str.s + x, y - x);
        } else {
            jv_list_push(J, out, obj->u.list.v[i]);
        }
    }
    if (is_str) return jv_str(J, sb.p ? sb.p : "", sb.n);
    out->is_tuple = obj->is_tuple;
    return out;
}

/* ---- calls ---- */

static int exec(jctx *J, const jnode *n);

/* A macro (N_MACRO: params kids[0], body kids[1]) or a call block's caller
 * (N_CALLBLOCK: params kids[1], body kids[2]) called with args. */
static jv *call_macro(jctx *J, jv *m, jv **args, const char **kws, size_t na, jv *caller)
{
    const jnode *node = m->u.macro.node;
    const jnode *ps = node->type == N_MACRO ? node->kids[0] : node->kids[1];
    const jnode *body = node->type == N_MACRO ? node->kids[1] : node->kids[2];
    jscope *saved = J->sc;
    jbuf *saved_out = J->out;
    jscope *s = scope_new(J, m->u.macro.scope);
    J->sc = s;
    jv *varargs = jv_list(J, 0), *kwargs = jv_dict(J);
    size_t pos = 0;
    jv **bound = ja_alloc(J, (ps->nk + 1) * sizeof *bound);
    memset(bound, 0, (ps->nk + 1) * sizeof *bound);
    for (size_t i = 0; i < na; i++) {
        if (!kws[i]) {
            if (pos < ps->nk)
                bound[pos++] = args[i];
            else
                jv_list_push(J, varargs, args[i]);
            continue;
        }
        size_t k = 0;
        for (; k < ps->nk; k++)
            if (!strcmp(ps->kids[k]->s, kws[i])) break;
        if (k < ps->nk)
            bound[k] = args[i];
        else
            jv_dict_set(J, kwargs, jv_cstr(J, kws[i]), args[i]);
    }
    for (size_t k = 0; k < ps->nk; k++) {
        const jnode *p = ps->kids[k];
        jv *v = bound[k];
        if (!v) v = p->nk && p->kids[0] ? jinja_eval(J, p->kids[0]) : jv_undef(J, p->s, p->n);
        scope_set(J, p->s, p->n, v);
    }
    scope_set(J, "varargs", 7, varargs);
    scope_set(J, "kwargs", 6, kwargs);
    if (caller) scope_set(J, "caller", 6, caller);
    jbuf out = { 0 };
    J->out = &out;
    exec(J, body);
    J->out = saved_out;
    J->sc = saved;
    jv *r = jv_new(J, JV_STR);
    r->u.str.s = out.p ? out.p : "";
    r->u.str.n = out.n;
    return r;
}

static jv *call_with_caller(jctx *J, jv *fn, jv **args, const char **kws, size_t na, jv *caller)
{
    switch (fn->kind) {
    case JV_MACRO: return call_macro(J, fn, args, kws, na, caller);
    case JV_FUNC:
        if (fn->u.func.id < 0) {
            jv *pair = fn->u.func.self;
            jv *self = pair->u.list.v[0], *name = pair->u.list.v[1];
            jv *r = jinja_method(J, self, name->u.str.s, name->u.str.n, args, kws, na);
            if (r) return r;
            jinja_fail(J, "'%s' object has no attribute '%s'", jv_type_name(self), name->u.str.s);
        }
        return jinja_call_func(J, fn, args, kws, na);
    case JV_UNDEF: jinja_fail(J, "'%s' is undefined", undef_name(fn));
    default: jinja_fail(J, "'%s' object is not callable", jv_type_name(fn));
    }
}

jv *jinja_call_value(jctx *J, jv *fn, jv **args, const char **kws, size_t na)
{
    return call_with_caller(J, fn, args, kws, na, NULL);
}

/* Evaluates the arguments of a call, filter or test: kids[first..]. */
static size_t eval_args(jctx *J, const jnode *n, size_t first, jv ***args, const char ***kws)
{
    size_t na = n->nk > first ? n->nk - first : 0;
    *args = ja_alloc(J, (na + 1) * sizeof **args);
    *kws = ja_alloc(J, (na + 1) * sizeof **kws);
    for (size_t i = 0; i < na; i++) {
        (*args)[i] = jinja_eval(J, n->kids[first + i]);
        (*kws)[i] = n->kids[first + i]->kw;
    }
    return na;
}

static jv *eval_call(jctx *J, const jnode *n, jv *caller)
{
    jv **args;
    const char **kws;
    const jnode *f = n->kids[0];
    jv *fn;
    if (f->type == N_ATTR) {
        jv *obj = jinja_eval(J, f->kids[0]);
        size_t na = eval_args(J, n, 1, &args, &kws);
        if (obj->kind != JV_DICT || obj->is_ns || !jv_dict_get(obj, f->s, f->n)) {
            if (obj->kind != JV_UNDEF && obj->kind != JV_LOOP && jinja_has_method(obj, f->s, f->n)) {
                jv *r = jinja_method(J, obj, f->s, f->n, args, kws, na);
                if (r) return r;
            }
        }
        fn = jinja_getattr(J, obj, f->s, f->n);
        if (obj->kind == JV_LOOP && f->n == 5 && !memcmp(f->s, "cycle", 5)) {
            if (!na) jinja_fail(J, "no items for cycling given");
            return args[obj->u.loop.index0 % na];
        }
        return call_with_caller(J, fn, args, kws, na, caller);
    }
    fn = jinja_eval(J, f);
    size_t na = eval_args(J, n, 1, &args, &kws);
    return call_with_caller(J, fn, args, kws, na, caller);
}

/* ---- operators ---- */

static bool is_numeric(const jv *x) { return x->kind == JV_INT || x->kind == JV_FLOAT || x->kind == JV_BOOL; }
static int64_t as_i(const jv *x)
{
    return x->kind == JV_INT ? x->u.i : x->kind == JV_BOOL ? (int64_t)x->u.b : 0;
}
static double as_f(const jv *x) { return x->kind == JV_FLOAT ? x->u.f : (double)as_i(x); }

static const char *op_sym(int op)
{
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "**";
    default: return "?";
    }
}

static _Noreturn void op_type_error(jctx *J, int op, const jv *a, const jv *b)
{
    if (a->kind == JV_UNDEF) jinja_fail(J, "'%s' is undefined", undef_name(a));
    if (b->kind == JV_UNDEF) jinja_fail(J, "'%s' is undefined", undef_name(b));
    if (op == OP_ADD && a->kind == JV_STR)
        jinja_fail(J, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == OP_ADD && a->kind == JV_LIST)
        jinja_fail(J, "can only concatenate list (not \"%s\") to list", jv_type_name(b));
    jinja_fail(J, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), jv_type_name(a),
               jv_type_name(b));
}

static jv *repeat(jctx *J, jv *seq, int64_t times)
{
    if (seq->kind == JV_STR) {
        jbuf b = { 0 };
        for (int64_t i = 0; i < times; i++) {
            jinja_step(J);
            jb_put(J, &b, seq->u.str.s, seq->u.str.n);
        }
        jv *r = jv_str(J, b.p ? b.p : "", b.n);
        return seq->is_markup ? jv_markup(J, r) : r;
    }
    jv *l = jv_list(J, 0);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq->u.list.n; k++) {
            jinja_step(J);
            jv_list_push(J, l, seq->u.list.v[k]);
        }
    return l;
}

/* Markup % args: the string arguments escaped (one, or each of a tuple). */
static jv *escape_args(jctx *J, jv *b)
{
    if (b->kind == JV_STR) return jinja_escape(J, b, false);
    if (b->kind != JV_LIST || !b->is_tuple) return b;
    jv *t = jv_list(J, b->u.list.n);
    for (size_t i = 0; i < b->u.list.n; i++) jv_list_push(J, t, escape_args(J, b->u.list.v[i]));
    t->is_tuple = true;
    return t;
}

static jv *arith(jctx *J, int op, jv *a, jv *b)
{
    if (is_numeric(a) && is_numeric(b)) {
        bool ints = a->kind != JV_FLOAT && b->kind != JV_FLOAT;
        int64_t x = as_i(a), y = as_i(b), r;
        double fx = as_f(a), fy = as_f(b);
        switch (op) {
        case OP_ADD:
            if (!ints) return jv_float(J, fx + fy);
            if (__builtin_add_overflow(x, y, &r)) jinja_fail(J, "integer overflow");
            return jv_int(J, r);
        case OP_SUB:
            if (!ints) return jv_float(J, fx - fy);
            if (__builtin_sub_overflow(x, y, &r)) jinja_fail(J, "integer overflow");
            return jv_int(J, r);
        case OP_MUL:
            if (!ints) return jv_float(J, fx * fy);
            if (__builtin_mul_overflow(x, y, &r)) jinja_fail(J, "integer overflow");
            return jv_int(J, r);
        case OP_DIV:
            if (fy == 0.0) jinja_fail(J, "division by zero");
            return jv_float(J, fx / fy);
        case OP_FLOORDIV:
        case OP_MOD:
            if (ints ? y == 0 : fy == 0.0)
                jinja_fail(J, ints && op == OP_MOD ? "integer modulo by zero" : "division by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1) jinja_fail(J, "integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) q--, m += y;
                return jv_int(J, op == OP_FLOORDIV ? q : m);
            } else {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return jv_float(J, op == OP_FLOORDIV ? floor((fx - m) / fy + 0.5) : m);
            }
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1;
                for (int64_t i = 0; i < y; i++) {
                    jinja_step(J);
                    if (__builtin_mul_overflow(acc, x, &acc)) jinja_fail(J, "integer overflow");
                }
                return jv_int(J, acc);
            }
            return jv_float(J, pow(fx, fy));
        default: break;
        }
    }
    if (op == OP_ADD && a->kind == JV_STR && b->kind == JV_STR) {
        /* Markup + str escapes the str (and str + Markup): the result is markup */
        const bool markup = a->is_markup || b->is_markup;
        if (markup) a = jinja_escape(J, a, false), b = jinja_escape(J, b, false);
        char *s = ja_alloc(J, a->u.str.n + b->u.str.n + 1);
        memcpy(s, a->u.str.s, a->u.str.n);
        memcpy(s + a->u.str.n, b->u.str.s, b->u.str.n);
        s[a->u.str.n + b->u.str.n] = 0;
        jv *r = jv_new(J, JV_STR);
        r->u.str.s = s;
        r->u.str.n = a->u.str.n + b->u.str.n;
        r->is_markup = markup;
        return r;
    }
    if (op == OP_ADD && a->kind == JV_LIST && b->kind == JV_LIST) {
        jv *l = jv_list(J, a->u.list.n + b->u.list.n);
        for (size_t i = 0; i < a->u.list.n; i++) jv_list_push(J, l, a->u.list.v[i]);
        for (size_t i = 0; i < b->u.list.n; i++) jv_list_push(J, l, b->u.list.v[i]);
        return l;
    }
    if (op == OP_MUL && (a->kind == JV_STR || a->kind == JV_LIST) &&
        (b->kind == JV_INT || b->kind == JV_BOOL))
        return repeat(J, a, as_i(b));
    if (op == OP_MUL && (b->kind == JV_STR || b->kind == JV_LIST) &&
        (a->kind == JV_INT || a->kind == JV_BOOL))
        return repeat(J, b, as_i(a));
    if (op == OP_MOD && a->kind == JV_STR && a->is_markup)
        return jv_markup(J, jinja_str_format(J, a, escape_args(J, b)));
    if (op == OP_MOD && a->kind == JV_STR) return jinja_str_format(J, a, b);
    op_type_error(J, op, a, b);
}

static bool contains(jctx *J, jv *hay, jv *needle)
{
    switch (hay->kind) {
    case JV_STR:
        if (needle->kind != JV_STR)
            jinja_fail(J, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        if (!needle->u.str.n) return true;
        if (needle->u.str.n > hay->u.str.n) return false;
        for (size_t i = 0; i + needle->u.str.n <= hay->u.str.n; i++)
            if (!memcmp(hay->u.str.s + i, needle->u.str.s, needle->u.str.n)) return true;
        return false;
    case JV_LIST:
        for (size_t i = 0; i < hay->u.list.n; i++)
            if (jv_equal(hay->u.list.v[i], needle)) return true;
        return false;
    case JV_DICT: return jv_dict_getv(hay, needle) != NULL;
    case JV_UNDEF: return false;
    default: jinja_fail(J, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

bool jinja_contains(jctx *J, jv *hay, jv *needle) { return contains(J, hay, needle); }

static jv *binary(jctx *J, const jnode *n)
{
    jv *a = jinja_eval(J, n->kids[0]);
    if (n->op == OP_AND) return jv_truthy(a) ? jinja_eval(J, n->kids[1]) : a;
    if (n->op == OP_OR) return jv_truthy(a) ? a : jinja_eval(J, n->kids[1]);
    jv *b = jinja_eval(J, n->kids[1]);
    switch (n->op) {
    case OP_CONCAT: {
        jbuf buf = { 0 };
        jv_to_str(J, &buf, a);
        jv_to_str(J, &buf, b);
        return jv_str(J, buf.p ? buf.p : "", buf.n);
    }
    case OP_EQ: return jv_bool(jv_equal(a, b));
    case OP_NE: return jv_bool(!jv_equal(a, b));
    case OP_LT: return jv_bool(jv_compare(J, a, b) < 0);
    case OP_LE: return jv_bool(jv_compare(J, a, b) <= 0);
    case OP_GT: return jv_bool(jv_compare(J, a, b) > 0);
    case OP_GE: return jv_bool(jv_compare(J, a, b) >= 0);
    case OP_IN: return jv_bool(contains(J, b, a));
    case OP_NOTIN: return jv_bool(!contains(J, b, a));
    default: return arith(J, n->op, a, b);
    }
}

static jv *unary(jctx *J, const jnode *n)
{
    jv *a = jinja_eval(J, n->kids[0]);
    switch (n->op) {
    case OP_NOT: return jv_bool(!jv_truthy(a));
    case OP_NEG:
        if (a->kind == JV_INT || a->kind == JV_BOOL) {
            if (as_i(a) == INT64_MIN) jinja_fail(J, "integer overflow");
            return jv_int(J, -as_i(a));
        }
        if (a->kind == JV_FLOAT) return jv_float(J, -a->u.f);
        break;
    case OP_POS:
        if (is_numeric(a)) return a->kind == JV_BOOL ? jv_int(J, as_i(a)) : a;
        break;
    default: break;
    }
    if (a->kind == JV_UNDEF) jinja_fail(J, "'%s' is undefined", undef_name(a));
    jinja_fail(J, "bad operand type for unary %s: '%s'", n->op == OP_NEG ? "-" : "+", jv_type_name(a));
}

jv *jinja_eval(jctx *J, const jnode *n)
{
    enter(J, n);
    jv *r = NULL;
    switch (n->type) {
    case N_LIT: r = n->val; break;
    case N_NAME: r = lookup(J, n->s, n->n); break;
    case N_LIST:
    case N_TUPLE:
        r = jv_list(J, n->nk);
        for (size_t i = 0; i < n->nk; i++) jv_list_push(J, r, jinja_eval(J, n->kids[i]));
        r->is_tuple = n->type == N_TUPLE;
        break;
    case N_DICT:
        r = jv_dict(J);
        for (size_t i = 0; i + 1 < n->nk; i += 2) {
            jv *k = jinja_eval(J, n->kids[i]);
            jv_dict_set(J, r, k, jinja_eval(J, n->kids[i + 1]));
        }
        break;
    case N_ATTR: r = jinja_getattr(J, jinja_eval(J, n->kids[0]), n->s, n->n); break;
    case N_ITEM: {
        jv *obj = jinja_eval(J, n->kids[0]);
        r = jinja_getitem(J, obj, jinja_eval(J, n->kids[1]));
        break;
    }
    case N_SLICE: {
        jv *obj = jinja_eval(J, n->kids[0]);
        jv *p[3];
        for (int i = 0; i < 3; i++) p[i] = n->kids[i + 1] ? jinja_eval(J, n->kids[i + 1]) : NULL;
        r = slice(J, obj, p[0], p[1], p[2]);
        if (obj->kind == JV_STR && obj->is_markup) r = jv_markup(J, r);
        break;
    }
    case N_CALL: r = eval_call(J, n, NULL); break;
    case N_FILTER: {
        jv *x = n->kids[0] ? jinja_eval(J, n->kids[0]) : jv_undef(J, NULL, 0);
        jv **args;
        const char **kws;
        size_t na = eval_args(J, n, 1, &args, &kws);
        J->line = n->line;
        r = jinja_filter(J, n->s, x, args, kws, na);
        break;
    }
    case N_TEST: {
        jv *x = jinja_eval(J, n->kids[0]);
        jv **args;
        const char **kws;
        size_t na = eval_args(J, n, 1, &args, &kws);
        J->line = n->line;
        bool t = jinja_test(J, n->s, x, args, na);
        r = jv_bool(n->op ? !t : t);
        break;
    }
    case N_UNARY: r = unary(J, n); break;
    case N_BINARY: r = binary(J, n); break;
    case N_COND:
        if (jv_truthy(jinja_eval(J, n->kids[0])))
            r = jinja_eval(J, n->kids[1]);
        else
            r = n->kids[2] ? jinja_eval(J, n->kids[2]) : jv_undef(J, NULL, 0);
        break;
    case N_BLOCKVAL: r = J->blockval; break;
    default: jinja_fail(J, "not an expression");
    }
    J->depth--;
    return r;
}

/* ---- statements ---- */

static void assign(jctx *J, const jnode *target, jv *v)
{
    if (target->type == N_NAME) {
        scope_set(J, target->s, target->n, v);
    } else if (target->type == N_ATTR) {
        jv *ns = jinja_eval(J, target->kids[0]);
        if (ns->kind != JV_DICT || !ns->is_ns)
            jinja_fail(J, "cannot assign attribute on non-namespace object");
        jv_dict_set(J, ns, jv_str(J, target->s, target->n), v);
    } else {
        if (v->kind != JV_LIST) jinja_fail(J, "cannot unpack non-iterable %s object", jv_type_name(v));
        if (v->u.list.n != target->nk)
            jinja_fail(J, "%s values to unpack (expected %zu, got %zu)",
                       v->u.list.n > target->nk ? "too many" : "not enough", target->nk, v->u.list.n);
        for (size_t i = 0; i < target->nk; i++) assign(J, target->kids[i], v->u.list.v[i]);
    }
}

/* The items a for loop visits: a list's items, a dict's keys, a string's characters. */
jv *jinja_iter_list(jctx *J, jv *x)
{
    switch (x->kind) {
    case JV_LIST: return x;
    case JV_UNDEF: return jv_list(J, 0);
    case JV_DICT: {
        jv *l = jv_list(J, x->u.dict.n);
        for (size_t i = 0; i < x->u.dict.n; i++) jv_list_push(J, l, x->u.dict.k[i]);
        return l;
    }
    case JV_STR: {
        jv *l = jv_list(J, 0);
        for (size_t i = 0; i < x->u.str.n;) {
            size_t e = i + 1;
            while (e < x->u.str.n && ((unsigned char)x->u.str.s[e] & 0xC0) == 0x80) e++;
            jv_list_push(J, l, jv_str(J, x->u.str.s + i, e - i));
            i = e;
        }
        return l;
    }
    default: jinja_fail(J, "'%s' object is not iterable", jv_type_name(x));
    }
}

static int loop_depth(jctx *J)
{
    for (jscope *s = J->sc; s; s = s->parent) {
        jv *l = jv_dict_get(s->vars, "loop", 4);
        if (l && l->kind == JV_LOOP) return l->u.loop.depth;
    }
    return 0;
}

static void exec_for(jctx *J, const jnode *n)
{
    jv *items = jinja_iter_list(J, jinja_eval(J, n->kids[1]));
    jscope *saved = J->sc;
    if (n->kids[2]) {
        jv *kept = jv_list(J, 0);
        for (size_t i = 0; i < items->u.list.n; i++) {
            J->sc = scope_new(J, saved);
            assign(J, n->kids[0], items->u.list.v[i]);
            if (jv_truthy(jinja_eval(J, n->kids[2]))) jv_list_push(J, kept, items->u.list.v[i]);
            J->sc = saved;
        }
        items = kept;
    }
    int depth = loop_depth(J) + 1;
    for (size_t i = 0; i < items->u.list.n; i++) {
        J->sc = scope_new(J, saved);
        jv *loop = jv_new(J, JV_LOOP);
        loop->u.loop.items = items;
        loop->u.loop.index0 = i;
        loop->u.loop.depth = depth;
        scope_set(J, "loop", 4, loop);
        assign(J, n->kids[0], items->u.list.v[i]);
        int flow = exec(J, n->kids[3]);
        J->sc = saved;
        if (flow == FLOW_BREAK) break;
    }
    if (!items->u.list.n && n->kids[4]) exec(J, n->kids[4]);
}

/* The body's output as a string. */
static jv *capture(jctx *J, const jnode *body)
{
    jbuf *saved = J->out, b = { 0 };
    J->out = &b;
    exec(J, body);
    J->out = saved;
    jv *r = jv_new(J, JV_STR);
    r->u.str.s = b.p ? b.p : "";
    r->u.str.n = b.n;
    return r;
}

static jv *apply_chain(jctx *J, const jnode *chain, jv *v)
{
    jv *saved = J->blockval;
    J->blockval = v;
    jv *r = jinja_eval(J, chain);
    J->blockval = saved;
    return r;
}

static int exec(jctx *J, const jnode *n)
{
    enter(J, n);
    int flow = FLOW_NONE;
    switch (n->type) {
    case N_BODY:
        for (size_t i = 0; i < n->nk && flow == FLOW_NONE; i++) flow = exec(J, n->kids[i]);
        break;
    case N_TEXT: jb_put(J, J->out, n->s, n->n); break;
    case N_OUTPUT: jv_to_str(J, J->out, jinja_eval(J, n->kids[0])); break;
    case N_IF:
        if (jv_truthy(jinja_eval(J, n->kids[0])))
            flow = exec(J, n->kids[1]);
        else if (n->kids[2])
            flow = exec(J, n->kids[2]);
        break;
    case N_FOR: exec_for(J, n); break;
    case N_SET: assign(J, n->kids[0], jinja_eval(J, n->kids[1])); break;
    case N_SETBLOCK: {
        jv *v = capture(J, n->kids[1]);
        if (n->kids[2]) v = apply_chain(J, n->kids[2], v);
        assign(J, n->kids[0], v);
        break;
    }
    case N_MACRO: {
        jv *m = jv_new(J, JV_MACRO);
        m->u.macro.node = n;
        m->u.macro.scope = J->sc;
        scope_set(J, n->s, n->n, m);
        break;
    }
    case N_CALLBLOCK: {
        jv *caller = jv_new(J, JV_MACRO);
        caller->u.macro.node = n;
        caller->u.macro.scope = J->sc;
        jv_to_str(J, J->out, eval_call(J, n->kids[0], caller));
        break;
    }
    case N_FILTERBLOCK: jv_to_str(J, J->out, apply_chain(J, n->kids[0], capture(J, n->kids[1]))); break;
    case N_BREAK: flow = FLOW_BREAK; break;
    case N_CONTINUE: flow = FLOW_CONTINUE; break;
    default: jinja_fail(J, "not a statement");
    }
    J->depth--;
    return flow;
}

void jinja_exec(jctx *J, const jnode *body) { exec(J, body); }
