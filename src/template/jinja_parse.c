/*
 * jinja_parse.c — tokens to a syntax tree, by recursive descent in jinja2's
 * order of precedence (lowest first): ternary `x if c else y`, or, and, not,
 * comparisons and `in`, + -, ~, * / // %, **, unary - +, then a primary with
 * its postfix (.attr, [item], [a:b:c], (call)), filters (|f) and tests (is t).
 *
 * State: a cursor over the token array (jinja_lex). Statements nest by
 * parse_body(), which stops at the first block tag whose name is one of the
 * caller's end words. Nesting (statements and expressions) is bounded by
 * max_depth, so a hostile template cannot exhaust the C stack.
 */
#include "template/jinja_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jparser {
    jctx *J;
    jtok *t;
    size_t nt, i;
    int depth;
} jparser;

static jtok *cur(jparser *P) { return &P->t[P->i]; }
static jtok *adv(jparser *P)
{
    jtok *t = &P->t[P->i];
    if (P->i + 1 < P->nt) P->i++;
    return t;
}

static _Noreturn void perr(jparser *P, const char *what)
{
    jtok *t = cur(P);
    P->J->line = t->line;
    if (t->t == T_EOF) jinja_fail(P->J, "unexpected end of template: %s", what);
    jinja_fail(P->J, "%s, got '%.*s'", what, (int)(t->n > 40 ? 40 : t->n), t->n ? t->s : "end of tag");
}

static bool tok_is(const jtok *t, int type, const char *s)
{
    return t->t == type && t->n == strlen(s) && !memcmp(t->s, s, t->n);
}
static bool is_op(jparser *P, const char *s) { return tok_is(cur(P), T_OP, s); }
static bool is_name(jparser *P, const char *s) { return tok_is(cur(P), T_NAME, s); }
static bool skip_op(jparser *P, const char *s)
{
    if (!is_op(P, s)) return false;
    adv(P);
    return true;
}
static bool skip_name(jparser *P, const char *s)
{
    if (!is_name(P, s)) return false;
    adv(P);
    return true;
}
static void expect_op(jparser *P, const char *s)
{
    if (!skip_op(P, s)) {
        char m[64];
        snprintf(m, sizeof m, "expected '%s'", s);
        perr(P, m);
    }
}
static void expect_type(jparser *P, int type, const char *what)
{
    if (cur(P)->t != type) perr(P, what);
    adv(P);
}
static void block_end(jparser *P) { expect_type(P, T_BLOCK_END, "expected end of statement block"); }

static jnode *mk(jparser *P, int type)
{
    jnode *n = ja_alloc(P->J, sizeof *n);
    memset(n, 0, sizeof *n);
    n->type = (uint8_t)type;
    n->line = cur(P)->line;
    return n;
}

static void add(jparser *P, jnode *n, jnode *kid)
{
    /* capacity: the next power of two >= nk */
    if ((n->nk & (n->nk - 1)) == 0) {
        size_t cap = n->nk ? n->nk * 2 : 2;
        jnode **k = ja_alloc(P->J, cap * sizeof *k);
        if (n->nk) memcpy(k, n->kids, n->nk * sizeof *k);
        n->kids = k;
    }
    n->kids[n->nk++] = kid;
}

static jnode *mk2(jparser *P, int type, int op, jnode *a, jnode *b)
{
    jnode *n = mk(P, type);
    n->op = (uint8_t)op;
    add(P, n, a);
    if (b) add(P, n, b);
    return n;
}

static void enter(jparser *P)
{
    if (++P->depth > P->J->lim.max_depth) {
        P->J->line = cur(P)->line;
        jinja_fail(P->J, "template nested deeper than %d", P->J->lim.max_depth);
    }
}

static jnode *expr(jparser *P, bool condexpr);
static jnode *unary(jparser *P, bool with_filter);
static jnode *postfix(jparser *P, jnode *n);

static jnode *lit(jparser *P, jv *v)
{
    jnode *n = mk(P, N_LIT);
    n->val = v;
    return n;
}

/* (args) of a call, filter or test: appended to n after its existing kids. */
static void call_args(jparser *P, jnode *n)
{
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        const char *kw = NULL;
        if (cur(P)->t == T_NAME && P->i + 1 < P->nt && tok_is(&P->t[P->i + 1], T_OP, "=")) {
            kw = ja_strdup(P->J, cur(P)->s, cur(P)->n);
            adv(P);
            adv(P);
        }
        jnode *a = expr(P, true);
        a->kw = kw; /* a is this argument's own node */
        add(P, n, a);
        if (!skip_op(P, ",")) break;
    }
    expect_op(P, ")");
}

static jnode *primary(jparser *P)
{
    jtok *t = cur(P);
    jnode *n;
    switch (t->t) {
    case T_NAME:
        adv(P);
        if (tok_is(t, T_NAME, "true") || tok_is(t, T_NAME, "True")) return lit(P, jv_bool(true));
        if (tok_is(t, T_NAME, "false") || tok_is(t, T_NAME, "False")) return lit(P, jv_bool(false));
        if (tok_is(t, T_NAME, "none") || tok_is(t, T_NAME, "None")) return lit(P, jv_none());
        n = mk(P, N_NAME);
        n->s = ja_strdup(P->J, t->s, t->n);
        n->n = t->n;
        n->line = t->line;
        return n;
    case T_STRING: {
        jbuf b = { 0 };
        while (cur(P)->t == T_STRING) {
            jb_put(P->J, &b, cur(P)->s, cur(P)->n);
            adv(P);
        }
        return lit(P, jv_str(P->J, b.p ? b.p : "", b.n));
    }
    case T_INT:
    case T_FLOAT: {
        char *s = ja_alloc(P->J, t->n + 1);
        size_t k = 0;
        for (size_t i = 0; i < t->n; i++)
            if (t->s[i] != '_') s[k++] = t->s[i];
        s[k] = 0;
        adv(P);
        errno = 0;
        if (t->t == T_INT) {
            long long v = strtoll(s, NULL, 10);
            if (errno != ERANGE) return lit(P, jv_int(P->J, v));
        }
        return lit(P, jv_float(P->J, strtod(s, NULL)));
    }
    case T_OP:
        if (skip_op(P, "(")) {
            if (skip_op(P, ")")) {
                n = mk(P, N_TUPLE);
                return n;
            }
            jnode *e = expr(P, true);
            if (!is_op(P, ",")) {
                expect_op(P, ")");
                return e;
            }
            n = mk(P, N_TUPLE);
            add(P, n, e);
            while (skip_op(P, ",") && !is_op(P, ")")) add(P, n, expr(P, true));
            expect_op(P, ")");
            return n;
        }
        if (skip_op(P, "[")) {
            n = mk(P, N_LIST);
            while (!is_op(P, "]")) {
                add(P, n, expr(P, true));
                if (!skip_op(P, ",")) break;
            }
            expect_op(P, "]");
            return n;
        }
        if (skip_op(P, "{")) {
            n = mk(P, N_DICT);
            while (!is_op(P, "}")) {
                add(P, n, expr(P, true));
                expect_op(P, ":");
                add(P, n, expr(P, true));
                if (!skip_op(P, ",")) break;
            }
            expect_op(P, "}");
            return n;
        }
        break;
    default: break;
    }
    perr(P, "unexpected token");
}

static jnode *subscript(jparser *P, jnode *obj)
{
    if (skip_op(P, ".")) {
        jtok *t = cur(P);
        if (t->t == T_NAME) {
            adv(P);
            jnode *n = mk2(P, N_ATTR, 0, obj, NULL);
            n->s = ja_strdup(P->J, t->s, t->n);
            n->n = t->n;
            return n;
        }
        if (t->t == T_INT) return mk2(P, N_ITEM, 0, obj, primary(P));
        perr(P, "expected a name after '.'");
    }
    expect_op(P, "[");
    jnode *part[3] = { NULL, NULL, NULL };
    bool slice = false;
    if (!is_op(P, ":")) part[0] = expr(P, true);
    if (skip_op(P, ":")) {
        slice = true;
        if (!is_op(P, ":") && !is_op(P, "]")) part[1] = expr(P, true);
        if (skip_op(P, ":") && !is_op(P, "]")) part[2] = expr(P, true);
    }
    expect_op(P, "]");
    if (!slice) return mk2(P, N_ITEM, 0, obj, part[0]);
    jnode *n = mk2(P, N_SLICE, 0, obj, NULL);
    for (int i = 0; i < 3; i++) add(P, n, part[i]);
    return n;
}

static jnode *postfix(jparser *P, jnode *n)
{
    for (;;) {
        if (is_op(P, ".") || is_op(P, "["))
            n = subscript(P, n);
        else if (is_op(P, "(")) {
            jnode *c = mk2(P, N_CALL, 0, n, NULL);
            call_args(P, c);
            n = c;
        } else
            return n;
    }
}

/* | name(args) applied to operand (NULL: a filter block's chain). */
static jnode *filter(jparser *P, jnode *operand)
{
    jtok *t = cur(P);
    if (t->t != T_NAME) perr(P, "expected a filter name");
    adv(P);
    jnode *f = mk(P, N_FILTER);
    f->s = ja_strdup(P->J, t->s, t->n);
    f->n = t->n;
    add(P, f, operand);
    if (is_op(P, "(")) call_args(P, f);
    return f;
}

static jnode *filter_expr(jparser *P, jnode *n)
{
    for (;;) {
        if (skip_op(P, "|")) {
            n = filter(P, n);
        } else if (skip_name(P, "is")) {
            bool neg = skip_name(P, "not");
            jtok *t = cur(P);
            if (t->t != T_NAME) perr(P, "expected a test name");
            adv(P);
            jnode *x = mk2(P, N_TEST, neg, n, NULL);
            x->s = ja_strdup(P->J, t->s, t->n);
            x->n = t->n;
            jtok *c = cur(P);
            if (is_op(P, "(")) {
                call_args(P, x);
            } else if ((c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT ||
                        is_op(P, "[") || is_op(P, "{")) &&
                       !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
                if (is_name(P, "is")) perr(P, "cannot chain multiple tests with is");
                add(P, x, postfix(P, primary(P)));
            }
            n = x;
        } else if (is_op(P, "(")) {
            jnode *c = mk2(P, N_CALL, 0, n, NULL);
            call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *unary(jparser *P, bool with_filter)
{
    enter(P);
    jnode *n;
    if (skip_op(P, "-"))
        n = mk2(P, N_UNARY, OP_NEG, unary(P, false), NULL);
    else if (skip_op(P, "+"))
        n = mk2(P, N_UNARY, OP_POS, unary(P, false), NULL);
    else
        n = primary(P);
    n = postfix(P, n);
    if (with_filter) n = filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *power(jparser *P)
{
    jnode *n = unary(P, true);
    while (skip_op(P, "**")) n = mk2(P, N_BINARY, OP_POW, n, unary(P, true));
    return n;
}

static jnode *math2(jparser *P)
{
    jnode *n = power(P);
    for (;;) {
        int op = is_op(P, "*")    ? OP_MUL
                 : is_op(P, "/")  ? OP_DIV
                 : is_op(P, "//") ? OP_FLOORDIV
                 : is_op(P, "%")  ? OP_MOD
                                  : 0;
        if (!op) return n;
        adv(P);
        n = mk2(P, N_BINARY, op, n, power(P));
    }
}

static jnode *concat(jparser *P)
{
    jnode *n = math2(P);
    while (skip_op(P, "~")) n = mk2(P, N_BINARY, OP_CONCAT, n, math2(P));
    return n;
}

static jnode *math1(jparser *P)
{
    jnode *n = concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : 0;
        if (!op) return n;
        adv(P);
        n = mk2(P, N_BINARY, op, n, concat(P));
    }
}

static jnode *compare(jparser *P)
{
    jnode *n = math1(P);
    for (;;) {
        int op = is_op(P, "==")   ? OP_EQ
                 : is_op(P, "!=") ? OP_NE
                 : is_op(P, "<")  ? OP_LT
                 : is_op(P, "<=") ? OP_LE
                 : is_op(P, ">")  ? OP_GT
                 : is_op(P, ">=") ? OP_GE
                                  : 0;
        if (op) {
            adv(P);
        } else if (skip_name(P, "in")) {
            op = OP_IN;
        } else if (is_name(P, "not") && P->i + 1 < P->nt && tok_is(&P->t[P->i + 1], T_NAME, "in")) {
            adv(P);
            adv(P);
            op = OP_NOTIN;
        } else {
            return n;
        }
        n = mk2(P, N_BINARY, op, n, math1(P));
    }
}

static jnode *not_expr(jparser *P)
{
    if (!skip_name(P, "not")) return compare(P);
    enter(P);
    jnode *n = mk2(P, N_UNARY, OP_NOT, not_expr(P), NULL);
    P->depth--;
    return n;
}

static jnode *and_expr(jparser *P)
{
    jnode *n = not_expr(P);
    while (skip_name(P, "and")) n = mk2(P, N_BINARY, OP_AND, n, not_expr(P));
    return n;
}

static jnode *or_expr(jparser *P)
{
    jnode *n = and_expr(P);
    while (skip_name(P, "or")) n = mk2(P, N_BINARY, OP_OR, n, and_expr(P));
    return n;
}

static jnode *expr(jparser *P, bool condexpr)
{
    enter(P);
    jnode *n = or_expr(P);
    while (condexpr && skip_name(P, "if")) {
        jnode *c = mk(P, N_COND);
        add(P, c, or_expr(P));
        add(P, c, n);
        add(P, c, skip_name(P, "else") ? expr(P, true) : NULL);
        n = c;
    }
    P->depth--;
    return n;
}

/* expr [, expr ...]: a tuple when there is a comma (set x = a, b). */
static jnode *tuple_expr(jparser *P)
{
    jnode *e = expr(P, true);
    if (!is_op(P, ",")) return e;
    jnode *t = mk(P, N_TUPLE);
    add(P, t, e);
    while (skip_op(P, ",")) add(P, t, expr(P, true));
    return t;
}

/* name | name.attr | a, b | (a, b) */
static jnode *assign_target(jparser *P, bool allow_attr)
{
    bool paren = skip_op(P, "(");
    jnode *t = mk(P, N_TUPLE);
    do {
        jtok *n = cur(P);
        if (n->t != T_NAME) perr(P, "expected a name to assign to");
        adv(P);
        jnode *x = mk(P, N_NAME);
        x->s = ja_strdup(P->J, n->s, n->n);
        x->n = n->n;
        if (allow_attr && skip_op(P, ".")) {
            jtok *a = cur(P);
            if (a->t != T_NAME) perr(P, "expected an attribute name");
            adv(P);
            x = mk2(P, N_ATTR, 0, x, NULL);
            x->s = ja_strdup(P->J, a->s, a->n);
            x->n = a->n;
        }
        add(P, t, x);
    } while (skip_op(P, ","));
    if (paren) expect_op(P, ")");
    return t->nk == 1 && !paren ? t->kids[0] : t;
}

static jnode *body(jparser *P, const char *const *stops);
static jnode *statement(jparser *P);

/* A body up to {% STOP %} (one of stops): the cursor is then on STOP's name. */
static jnode *body(jparser *P, const char *const *stops)
{
    enter(P);
    jnode *b = mk(P, N_BODY);
    for (;;) {
        jtok *t = cur(P);
        if (t->t == T_EOF) {
            if (stops) {
                char m[64];
                snprintf(m, sizeof m, "expected '%s'", stops[0]);
                perr(P, m);
            }
            break;
        }
        if (t->t == T_DATA) {
            jnode *x = mk(P, N_TEXT);
            x->s = t->s;
            x->n = t->n;
            add(P, b, x);
            adv(P);
        } else if (t->t == T_VAR_BEGIN) {
            adv(P);
            jnode *x = mk(P, N_OUTPUT);
            add(P, x, tuple_expr(P));
            expect_type(P, T_VAR_END, "expected end of print statement");
            add(P, b, x);
        } else if (t->t == T_BLOCK_BEGIN) {
            adv(P);
            if (cur(P)->t != T_NAME) perr(P, "expected a statement name");
            for (size_t i = 0; stops && stops[i]; i++)
                if (is_name(P, stops[i])) {
                    P->depth--;
                    return b;
                }
            add(P, b, statement(P));
        } else {
            perr(P, "unexpected token");
        }
    }
    P->depth--;
    return b;
}

static jnode *if_rest(jparser *P)
{
    static const char *const stops[] = { "endif", "elif", "else", NULL };
    jnode *n = mk(P, N_IF);
    add(P, n, tuple_expr(P));
    block_end(P);
    add(P, n, body(P, stops));
    if (skip_name(P, "elif")) {
        add(P, n, if_rest(P));
        return n;
    }
    if (skip_name(P, "else")) {
        static const char *const end[] = { "endif", NULL };
        block_end(P);
        add(P, n, body(P, end));
    } else {
        add(P, n, NULL);
    }
    expect_type(P, T_NAME, "expected 'endif'");
    block_end(P);
    return n;
}

static jnode *for_stmt(jparser *P)
{
    static const char *const stops[] = { "endfor", "else", NULL }, *const end[] = { "endfor", NULL };
    jnode *n = mk(P, N_FOR);
    add(P, n, assign_target(P, false));
    if (!skip_name(P, "in")) perr(P, "expected 'in'");
    add(P, n, expr(P, false));
    add(P, n, skip_name(P, "if") ? expr(P, true) : NULL);
    if (is_name(P, "recursive")) perr(P, "recursive loops are not supported");
    block_end(P);
    add(P, n, body(P, stops));
    if (skip_name(P, "else")) {
        block_end(P);
        add(P, n, body(P, end));
    } else {
        add(P, n, NULL);
    }
    adv(P);
    block_end(P);
    return n;
}

static jnode *set_stmt(jparser *P)
{
    jnode *target = assign_target(P, true);
    if (skip_op(P, "=")) {
        jnode *n = mk2(P, N_SET, 0, target, tuple_expr(P));
        block_end(P);
        return n;
    }
    static const char *const end[] = { "endset", NULL };
    if (target->type != N_NAME) perr(P, "a block set assigns one name");
    jnode *chain = NULL;
    while (skip_op(P, "|")) chain = filter(P, chain ? chain : mk(P, N_BLOCKVAL));
    block_end(P);
    jnode *n = mk2(P, N_SETBLOCK, 0, target, body(P, end));
    add(P, n, chain);
    adv(P);
    block_end(P);
    return n;
}

/* (a, b=default, ...) of a macro or a call block. */
static jnode *params(jparser *P)
{
    jnode *ps = mk(P, N_TUPLE);
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        jtok *t = cur(P);
        if (t->t != T_NAME) perr(P, "expected a parameter name");
        adv(P);
        jnode *x = mk(P, N_NAME);
        x->s = ja_strdup(P->J, t->s, t->n);
        x->n = t->n;
        add(P, x, skip_op(P, "=") ? expr(P, true) : NULL);
        add(P, ps, x);
        if (!skip_op(P, ",")) break;
    }
    expect_op(P, ")");
    return ps;
}

static jnode *statement(jparser *P)
{
    jtok *t = adv(P);
    P->J->line = t->line;
    if (tok_is(t, T_NAME, "if")) return if_rest(P);
    if (tok_is(t, T_NAME, "for")) return for_stmt(P);
    if (tok_is(t, T_NAME, "set")) return set_stmt(P);
    if (tok_is(t, T_NAME, "break") || tok_is(t, T_NAME, "continue")) {
        jnode *n = mk(P, tok_is(t, T_NAME, "break") ? N_BREAK : N_CONTINUE);
        block_end(P);
        return n;
    }
    if (tok_is(t, T_NAME, "macro")) {
        static const char *const end[] = { "endmacro", NULL };
        jtok *name = cur(P);
        if (name->t != T_NAME) perr(P, "expected a macro name");
        adv(P);
        jnode *n = mk(P, N_MACRO);
        n->s = ja_strdup(P->J, name->s, name->n);
        n->n = name->n;
        add(P, n, params(P));
        block_end(P);
        add(P, n, body(P, end));
        adv(P);
        if (cur(P)->t == T_NAME) adv(P);
        block_end(P);
        return n;
    }
    if (tok_is(t, T_NAME, "call")) {
        static const char *const end[] = { "endcall", NULL };
        jnode *n = mk(P, N_CALLBLOCK);
        jnode *ps = is_op(P, "(") ? params(P) : mk(P, N_TUPLE);
        jnode *call = expr(P, true);
        if (call->type != N_CALL) perr(P, "expected a call");
        add(P, n, call);
        add(P, n, ps);
        block_end(P);
        add(P, n, body(P, end));
        adv(P);
        block_end(P);
        return n;
    }
    if (tok_is(t, T_NAME, "filter")) {
        static const char *const end[] = { "endfilter", NULL };
        jnode *chain = filter(P, mk(P, N_BLOCKVAL));
        while (skip_op(P, "|")) chain = filter(P, chain);
        block_end(P);
        jnode *n = mk2(P, N_FILTERBLOCK, 0, chain, body(P, end));
        adv(P);
        block_end(P);
        return n;
    }
    if (tok_is(t, T_NAME, "generation")) {
        static const char *const end[] = { "endgeneration", NULL };
        block_end(P);
        jnode *b = body(P, end);
        adv(P);
        block_end(P);
        return b;
    }
    P->i--;
    perr(P, "unknown statement");
}

jnode *jinja_parse(jctx *J, const char *src, size_t n)
{
    jparser P = { .J = J };
    P.t = jinja_lex(J, src, n, &P.nt);
    jnode *b = body(&P, NULL);
    if (cur(&P)->t != T_EOF) perr(&P, "unexpected tag");
    return b;
}
