/*
 * grammar_parse.c — GBNF text to a compiled kvi_grammar (layout: grammar_int.h).
 *
 * Data structure while parsing: one gp_rule per rule name or generated rule, each
 * with a growing body of elements (its alternatives, each closed by GR_END), and
 * the shared growing arrays of character sets and their ranges. A rule is created
 * on its first mention (definition or reference); `defined` records whether its
 * `::=` was seen, `at` where it was first mentioned (for "undefined rule").
 *
 * Desugaring (so the matcher sees only CHAR, REF and END):
 *   ( a | b )  -> a new rule G ::= a | b, element REF G
 *   x*         -> S ::= x S | (empty)          x+ -> x S
 *   x?         -> O ::= x | (empty)
 *   x{m,n}     -> x repeated m times, then S (n unbounded) or nested optionals
 *                 O1 ::= x | (empty), Ok ::= x O(k-1) | (empty), O(n-m)
 *   "ab"       -> two CHAR elements (a multi-element x is first wrapped in a rule)
 *
 * Invariants: the text is read once, left to right, with a position that only
 * grows; nesting is bounded by GR_MAX_NEST and every array by the GR_MAX_* limits
 * before it grows, so hostile text ends in an error, never a crash. A rule ends
 * where the next `name ::=` starts (newlines inside a rule are allowed). After
 * the text: every referenced rule must be defined, `root` must exist, and no rule
 * may be left-recursive (a rule reaching itself through nullable prefixes).
 */
#include "kvinfer.h"
#include "base/error.h"
#include "sampling/grammar_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gp_rule {
    char *name;
    gr_elem *body;
    size_t n, cap;
    bool defined;
    int64_t parent; /* the named rule a generated rule serves, -1 for a named one */
    size_t at;      /* text offset of the first mention */
} gp_rule;

typedef struct gp {
    const char *s;
    size_t n, i;
    gp_rule *rules;
    uint32_t n_rules, cap_rules;
    gr_set *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *ranges; /* pairs */
    uint32_t n_ranges, cap_ranges;
    size_t n_elems;
    int depth;
    bool failed;
    kvi_error *err;
} gp;

static void gp_error_at(gp *p, size_t at, const char *what)
{
    if (p->failed) return;
    p->failed = true;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)p->s[k] & 0xC0) != 0x80) {
            col++;
        }
    }
    err_set(p->err, KVI_E_INVALID, "grammar: line %zu, column %zu: %s", line, col, what);
}

static void gp_error(gp *p, const char *what) { gp_error_at(p, p->i, what); }

static bool grow(void **arr, size_t need, size_t *cap, size_t elem)
{
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *a = realloc(*arr, nc * elem);
    if (!a) return false;
    *arr = a;
    *cap = nc;
    return true;
}

/* ---- rules and elements ---- */

static int64_t rule_new(gp *p, const char *name, size_t len, size_t at)
{
    if (p->n_rules >= GR_MAX_RULES) {
        gp_error_at(p, at, "too many rules");
        return -1;
    }
    size_t cap = p->cap_rules;
    if (!grow((void **)&p->rules, (size_t)p->n_rules + 1, &cap, sizeof *p->rules)) {
        gp_error_at(p, at, "out of memory");
        return -1;
    }
    p->cap_rules = (uint32_t)cap;
    gp_rule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(len + 1);
    if (!r->name) {
        gp_error_at(p, at, "out of memory");
        return -1;
    }
    memcpy(r->name, name, len);
    r->name[len] = 0;
    r->at = at;
    r->parent = -1;
    return p->n_rules++;
}

/* A generated rule, named after the rule it serves ('~' is no name character,
 * so no reference can find it). */
static int64_t rule_gen(gp *p, uint32_t parent)
{
    char nm[96];
    int k = snprintf(nm, sizeof nm, "%.64s~%u", p->rules[parent].name, p->n_rules);
    int64_t r = rule_new(p, nm, (size_t)(k > 0 ? k : 0), p->i);
    if (r >= 0) {
        p->rules[r].defined = true;
        p->rules[r].parent = p->rules[parent].parent >= 0 ? p->rules[parent].parent : parent;
    }
    return r;
}

static int64_t rule_find(gp *p, const char *name, size_t len, size_t at)
{
    for (uint32_t r = 0; r < p->n_rules; r++)
        if (p->rules[r].parent < 0 && strlen(p->rules[r].name) == len &&
            memcmp(p->rules[r].name, name, len) == 0)
            return r;
    return rule_new(p, name, len, at);
}

static bool push_elem(gp *p, uint32_t rid, uint32_t kind, uint32_t arg)
{
    if (p->n_elems >= GR_MAX_ELEMS) {
        gp_error(p, "grammar too large (elements)");
        return false;
    }
    gp_rule *r = &p->rules[rid];
    if (!grow((void **)&r->body, r->n + 1, &r->cap, sizeof *r->body)) {
        gp_error(p, "out of memory");
        return false;
    }
    r->body[r->n].kind = kind;
    r->body[r->n].arg = arg;
    r->n++;
    p->n_elems++;
    return true;
}

/* ---- character sets ---- */

static int range_cmp(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* A set from raw pairs tmp[0 .. 2*n): sorted, merged, complemented when neg. */
static int64_t set_add(gp *p, uint32_t *tmp, uint32_t n, bool neg)
{
    qsort(tmp, n, 2 * sizeof *tmp, range_cmp);
    uint32_t m = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (m > 0 && tmp[2 * k] <= tmp[2 * (m - 1) + 1] + 1) {
            if (tmp[2 * k + 1] > tmp[2 * (m - 1) + 1]) tmp[2 * (m - 1) + 1] = tmp[2 * k + 1];
        } else {
            tmp[2 * m] = tmp[2 * k];
            tmp[2 * m + 1] = tmp[2 * k + 1];
            m++;
        }
    }
    uint32_t need = neg ? m + 1 : m;
    if ((size_t)p->n_ranges + need > GR_MAX_RANGES || p->n_sets >= GR_MAX_ELEMS) {
        gp_error(p, "grammar too large (character sets)");
        return -1;
    }
    size_t cr = p->cap_ranges, cs = p->cap_sets;
    /* at least one range's room, so that the array exists even for an empty
     * set such as [] (out + 0 on a NULL array is undefined) */
    if (!grow((void **)&p->ranges, 2 * ((size_t)p->n_ranges + (need ? need : 1)), &cr, sizeof *p->ranges) ||
        !grow((void **)&p->sets, (size_t)p->n_sets + 1, &cs, sizeof *p->sets)) {
        gp_error(p, "out of memory");
        return -1;
    }
    p->cap_ranges = (uint32_t)cr;
    p->cap_sets = (uint32_t)cs;
    gr_set *st = &p->sets[p->n_sets];
    memset(st, 0, sizeof *st);
    st->first = p->n_ranges;
    uint32_t *out = p->ranges + 2 * (size_t)p->n_ranges;
    uint32_t k = 0;
    if (!neg) {
        memcpy(out, tmp, 2 * (size_t)m * sizeof *tmp);
        k = m;
    } else {
        uint32_t lo = 0;
        for (uint32_t j = 0; j < m; j++) {
            if (tmp[2 * j] > lo) {
                out[2 * k] = lo;
                out[2 * k + 1] = tmp[2 * j] - 1;
                k++;
            }
            lo = tmp[2 * j + 1] + 1;
        }
        if (lo <= 0x10FFFF) {
            out[2 * k] = lo;
            out[2 * k + 1] = 0x10FFFF;
            k++;
        }
    }
    st->n = k;
    for (uint32_t j = 0; j < k; j++)
        for (uint32_t c = out[2 * j]; c <= out[2 * j + 1] && c < 128; c++)
            st->ascii[c >> 6] |= 1ull << (c & 63);
    p->n_ranges += k;
    return p->n_sets++;
}

/* ---- lexing ---- */

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static size_t skip_ws_from(const gp *p, size_t i)
{
    while (i < p->n) {
        char c = p->s[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            i++;
        } else if (c == '#') {
            while (i < p->n && p->s[i] != '\n') i++;
        } else {
            break;
        }
    }
    return i;
}

static void skip_ws(gp *p) { p->i = skip_ws_from(p, p->i); }

/* `name ::=` starts at i. */
static bool rule_starts(const gp *p, size_t i)
{
    size_t j = i;
    while (j < p->n && is_name_char(p->s[j])) j++;
    if (j == i) return false;
    j = skip_ws_from(p, j);
    return j + 3 <= p->n && memcmp(p->s + j, "::=", 3) == 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One code point of a literal or class, escapes decoded; -1 on error. */
static int64_t read_char(gp *p)
{
    if (p->i >= p->n) {
        gp_error(p, "unexpected end of grammar");
        return -1;
    }
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        if (p->i + 1 >= p->n) {
            gp_error(p, "unfinished escape");
            return -1;
        }
        char e = p->s[p->i + 1];
        p->i += 2;
        int digits = 0;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '\'':
        case '/': return e;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            p->i -= 2;
            gp_error(p, "unknown escape");
            return -1;
        }
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) {
                gp_error(p, "bad hexadecimal escape");
                return -1;
            }
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v > 0x10FFFF) {
            gp_error(p, "code point beyond U+10FFFF");
            return -1;
        }
        return v;
    }
    /* UTF-8 */
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || p->i + (size_t)len > p->n) {
        gp_error(p, "invalid UTF-8");
        return -1;
    }
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; k++) {
        unsigned char d = (unsigned char)p->s[p->i + (size_t)k];
        if ((d & 0xC0) != 0x80) {
            gp_error(p, "invalid UTF-8");
            return -1;
        }
        v = (v << 6) | (d & 0x3F);
    }
    p->i += (size_t)len;
    return v;
}

/* ---- the grammar of GBNF ---- */

static bool parse_alternates(gp *p, uint32_t rid);

/* Appends CHAR elements of a literal "..." to rid. */
static bool parse_literal(gp *p, uint32_t rid)
{
    p->i++; /* " */
    for (;;) {
        if (p->i >= p->n) {
            gp_error(p, "unterminated string literal");
            return false;
        }
        if (p->s[p->i] == '"') {
            p->i++;
            return true;
        }
        int64_t c = read_char(p);
        if (c < 0) return false;
        uint32_t pr[2] = { (uint32_t)c, (uint32_t)c };
        int64_t set = set_add(p, pr, 1, false);
        if (set < 0 || !push_elem(p, rid, GR_CHAR, (uint32_t)set)) return false;
    }
}

static bool parse_class(gp *p, uint32_t rid)
{
    p->i++; /* [ */
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    uint32_t *tmp = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (p->i >= p->n) {
            gp_error(p, "unterminated character class");
            free(tmp);
            return false;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        int64_t lo = read_char(p), hi = lo;
        if (lo < 0) break;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = read_char(p);
            if (hi < 0) break;
            if (hi < lo) {
                gp_error(p, "character range out of order");
                break;
            }
        }
        if (n >= GR_MAX_RANGES || !grow((void **)&tmp, 2 * (n + 1), &cap, sizeof *tmp)) {
            gp_error(p, "character class too large");
            break;
        }
        tmp[2 * n] = (uint32_t)lo;
        tmp[2 * n + 1] = (uint32_t)hi;
        n++;
    }
    if (p->failed) {
        free(tmp);
        return false;
    }
    int64_t set = set_add(p, tmp ? tmp : (uint32_t[2]){ 0, 0 }, (uint32_t)n, neg);
    free(tmp);
    return set >= 0 && push_elem(p, rid, GR_CHAR, (uint32_t)set);
}

/* One primary's elements appended to tmp (groups become rules named after parent). */
static bool parse_primary(gp *p, uint32_t parent, uint32_t tmp)
{
    char c = p->s[p->i];
    if (c == '"') return parse_literal(p, tmp);
    if (c == '[') return parse_class(p, tmp);
    if (c == '.') {
        p->i++;
        uint32_t pr[2] = { 0, 0x10FFFF };
        int64_t set = set_add(p, pr, 1, false);
        return set >= 0 && push_elem(p, tmp, GR_CHAR, (uint32_t)set);
    }
    if (c == '(') {
        if (++p->depth > GR_MAX_NEST) {
            gp_error(p, "groups nested too deeply");
            return false;
        }
        p->i++;
        int64_t g = rule_gen(p, parent);
        if (g < 0 || !parse_alternates(p, (uint32_t)g)) return false;
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ')') {
            gp_error(p, "expected ')'");
            return false;
        }
        p->i++;
        p->depth--;
        return push_elem(p, tmp, GR_REF, (uint32_t)g);
    }
    if (is_name_char(c)) {
        size_t j = p->i;
        while (j < p->n && is_name_char(p->s[j])) j++;
        int64_t r = rule_find(p, p->s + p->i, j - p->i, p->i);
        p->i = j;
        return r >= 0 && push_elem(p, tmp, GR_REF, (uint32_t)r);
    }
    gp_error(p, "expected a rule name, \"literal\", [class], '.' or '('");
    return false;
}

static bool read_uint(gp *p, uint32_t *out)
{
    uint32_t v = 0;
    size_t j = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (uint32_t)(p->s[p->i] - '0');
        if (v > GR_MAX_REPEAT) {
            gp_error_at(p, j, "repetition count too large");
            return false;
        }
        p->i++;
    }
    *out = v;
    return p->i > j;
}

/* S ::= x S | (empty); returns S. */
static int64_t star_rule(gp *p, uint32_t parent, gr_elem x)
{
    int64_t s = rule_gen(p, parent);
    if (s < 0) return -1;
    if (!push_elem(p, (uint32_t)s, x.kind, x.arg) || !push_elem(p, (uint32_t)s, GR_REF, (uint32_t)s) ||
        !push_elem(p, (uint32_t)s, GR_END, 0) || !push_elem(p, (uint32_t)s, GR_END, 0))
        return -1;
    return s;
}

/* Appends x{lo,hi} to rid (hi = UINT32_MAX: unbounded). */
static bool emit_repeat(gp *p, uint32_t rid, gr_elem x, uint32_t lo, uint32_t hi)
{
    for (uint32_t k = 0; k < lo; k++)
        if (!push_elem(p, rid, x.kind, x.arg)) return false;
    if (hi == UINT32_MAX) {
        int64_t s = star_rule(p, rid, x);
        return s >= 0 && push_elem(p, rid, GR_REF, (uint32_t)s);
    }
    int64_t prev = -1;
    for (uint32_t k = lo; k < hi; k++) {
        int64_t o = rule_gen(p, rid);
        if (o < 0 || !push_elem(p, (uint32_t)o, x.kind, x.arg)) return false;
        if (prev >= 0 && !push_elem(p, (uint32_t)o, GR_REF, (uint32_t)prev)) return false;
        if (!push_elem(p, (uint32_t)o, GR_END, 0) || !push_elem(p, (uint32_t)o, GR_END, 0)) return false;
        prev = o;
    }
    return prev < 0 || push_elem(p, rid, GR_REF, (uint32_t)prev);
}

/* One item (primary and optional repetition) appended to rid. */
static bool parse_item(gp *p, uint32_t rid)
{
    const size_t start = p->rules[rid].n;
    if (!parse_primary(p, rid, rid)) return false;
    char op = p->i < p->n ? p->s[p->i] : 0;
    if (op != '*' && op != '+' && op != '?' && op != '{') return true;
    /* the primary's elements become x: itself when one, else a rule of them */
    gp_rule *r = &p->rules[rid];
    const size_t cnt = r->n - start;
    gr_elem x;
    if (cnt == 1) {
        x = r->body[start];
    } else {
        int64_t t = rule_gen(p, rid);
        if (t < 0) return false;
        for (size_t k = 0; k < cnt; k++) {
            gr_elem e = p->rules[rid].body[start + k];
            if (!push_elem(p, (uint32_t)t, e.kind, e.arg)) return false;
        }
        if (!push_elem(p, (uint32_t)t, GR_END, 0)) return false;
        x.kind = GR_REF;
        x.arg = (uint32_t)t;
    }
    p->n_elems -= cnt;
    p->rules[rid].n = start;
    size_t at = p->i;
    p->i++;
    uint32_t lo = 0, hi = UINT32_MAX;
    if (op == '+') lo = 1;
    if (op == '?') hi = 1;
    if (op == '{') {
        skip_ws(p);
        if (!read_uint(p, &lo)) {
            if (!p->failed) gp_error(p, "expected a count after '{'");
            return false;
        }
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            skip_ws(p);
            if (p->i < p->n && p->s[p->i] != '}' && !read_uint(p, &hi)) {
                if (!p->failed) gp_error(p, "expected a count or '}'");
                return false;
            }
        } else {
            hi = lo;
        }
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != '}') {
            gp_error(p, "expected '}'");
            return false;
        }
        p->i++;
        if (hi < lo) {
            gp_error_at(p, at, "repetition {m,n} with n < m");
            return false;
        }
    }
    return emit_repeat(p, rid, x, lo, hi);
}

/* Items until '|', ')', the next rule or the end; closed by END. */
static bool parse_sequence(gp *p, uint32_t rid)
{
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        if (c == '|' || c == ')' || rule_starts(p, p->i)) break;
        if (!parse_item(p, rid)) return false;
    }
    return push_elem(p, rid, GR_END, 0);
}

static bool parse_alternates(gp *p, uint32_t rid)
{
    if (!parse_sequence(p, rid)) return false;
    while (p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        if (!parse_sequence(p, rid)) return false;
    }
    return true;
}

static bool parse_rule(gp *p)
{
    size_t j = p->i;
    while (j < p->n && is_name_char(p->s[j])) j++;
    if (j == p->i) {
        gp_error(p, "expected a rule name");
        return false;
    }
    size_t at = p->i;
    int64_t r = rule_find(p, p->s + p->i, j - p->i, at);
    if (r < 0) return false;
    if (p->rules[r].defined) {
        gp_error_at(p, at, "rule defined twice");
        return false;
    }
    p->rules[r].defined = true;
    p->i = skip_ws_from(p, j);
    if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3) != 0) {
        gp_error(p, "expected '::='");
        return false;
    }
    p->i += 3;
    return parse_alternates(p, (uint32_t)r);
}

/* ---- checks and compilation ---- */

static kvi_grammar *compile(gp *p)
{
    kvi_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->n_rules = p->n_rules;
    g->rules = calloc(p->n_rules, sizeof *g->rules);
    size_t n_alts = 0;
    for (uint32_t r = 0; r < p->n_rules; r++)
        for (size_t k = 0; k < p->rules[r].n; k++) n_alts += p->rules[r].body[k].kind == GR_END;
    g->elems = malloc((p->n_elems + 1) * sizeof *g->elems);
    g->alts = malloc((n_alts + 1) * sizeof *g->alts);
    if (!g->rules || !g->elems || !g->alts) {
        kvi_grammar_free(g);
        return NULL;
    }
    uint32_t ne = 0, na = 0;
    for (uint32_t r = 0; r < p->n_rules; r++) {
        const gp_rule *pr = &p->rules[r];
        g->rules[r].alt_first = na;
        bool start = true;
        for (size_t k = 0; k < pr->n; k++) {
            if (start) g->alts[na++] = ne;
            g->elems[ne++] = pr->body[k];
            start = pr->body[k].kind == GR_END;
        }
        g->rules[r].n_alts = na - g->rules[r].alt_first;
    }
    g->n_elems = ne;
    g->n_alts = na;
    g->sets = p->sets;
    g->n_sets = p->n_sets;
    g->ranges = p->ranges;
    g->n_ranges = p->n_ranges;
    p->sets = NULL;
    p->ranges = NULL;
    return g;
}

/* Nullable rules by fixpoint, then a depth-first search for a rule that reaches
 * itself through references at nullable prefixes. Returns the offending rule or -1. */
static int64_t left_recursive(const kvi_grammar *g)
{
    const uint32_t nr = g->n_rules;
    uint8_t *nullable = calloc(nr, 1), *color = calloc(nr, 1);
    uint32_t *stack = malloc(2 * (size_t)nr * sizeof *stack); /* (rule, next alt-element cursor) */
    int64_t bad = -2;
    if (!nullable || !color || !stack) goto done;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < nr; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = 0; a < g->rules[r].n_alts && !nullable[r]; a++) {
                uint32_t e = g->alts[g->rules[r].alt_first + a];
                while (g->elems[e].kind == GR_REF && nullable[g->elems[e].arg]) e++;
                if (g->elems[e].kind == GR_END) nullable[r] = changed = true;
            }
        }
    }
    /* cursor k over the alternatives' left-reachable references: k = alt index,
     * each step scans that alternative's nullable prefix */
    bad = -1;
    for (uint32_t r0 = 0; r0 < nr && bad < 0; r0++) {
        if (color[r0]) continue;
        uint32_t sp = 0;
        stack[0] = r0;
        stack[1] = 0;
        sp = 1;
        color[r0] = 1;
        while (sp > 0 && bad < 0) {
            uint32_t r = stack[2 * (sp - 1)], k = stack[2 * (sp - 1) + 1];
            /* flatten (alt, offset) as a running index over left-reachable refs */
            uint32_t alt = k >> 16, off = k & 0xFFFF;
            if (alt >= g->rules[r].n_alts) {
                color[r] = 2;
                sp--;
                continue;
            }
            uint32_t e = g->alts[g->rules[r].alt_first + alt] + off;
            if (g->elems[e].kind != GR_REF || off >= 0xFFFF) {
                stack[2 * (sp - 1) + 1] = (alt + 1) << 16;
                continue;
            }
            uint32_t t = g->elems[e].arg;
            stack[2 * (sp - 1) + 1] = nullable[t] ? k + 1 : (alt + 1) << 16;
            if (color[t] == 1) {
                bad = t;
            } else if (color[t] == 0) {
                color[t] = 1;
                stack[2 * sp] = t;
                stack[2 * sp + 1] = 0;
                sp++;
            }
        }
    }
done:
    free(nullable);
    free(color);
    free(stack);
    return bad;
}

static void gp_free(gp *p)
{
    for (uint32_t r = 0; r < p->n_rules; r++) {
        free(p->rules[r].name);
        free(p->rules[r].body);
    }
    free(p->rules);
    free(p->sets);
    free(p->ranges);
}

kvi_grammar *kvi_grammar_parse(const char *text, size_t len, kvi_error *err)
{
    gp p;
    memset(&p, 0, sizeof p);
    p.s = text;
    p.n = len;
    p.err = err;
    if (!text) {
        err_set(err, KVI_E_INVALID, "grammar: no text");
        return NULL;
    }
    if (len > GR_MAX_TEXT) {
        err_set(err, KVI_E_INVALID, "grammar: %zu bytes, more than the %u allowed", len, GR_MAX_TEXT);
        return NULL;
    }
    for (;;) {
        skip_ws(&p);
        if (p.i >= p.n) break;
        if (!parse_rule(&p)) break;
    }
    kvi_grammar *g = NULL;
    int64_t root = -1;
    for (uint32_t r = 0; !p.failed && r < p.n_rules; r++) {
        if (!p.rules[r].defined) {
            char msg[160];
            snprintf(msg, sizeof msg, "undefined rule '%.64s'", p.rules[r].name);
            gp_error_at(&p, p.rules[r].at, msg);
        }
        if (strcmp(p.rules[r].name, "root") == 0) root = r;
    }
    if (!p.failed && root < 0) gp_error_at(&p, p.n, "no rule named 'root'");
    if (!p.failed) {
        g = compile(&p);
        if (!g) {
            gp_error(&p, "out of memory");
        } else {
            g->root = (uint32_t)root;
            int64_t bad = left_recursive(g);
            if (bad != -1) {
                char msg[256];
                if (bad == -2)
                    snprintf(msg, sizeof msg, "out of memory");
                else if (p.rules[bad].parent >= 0)
                    snprintf(msg, sizeof msg,
                             "a group or repetition in rule '%.64s' is left-recursive (a repeated part that "
                             "can match the empty string?)",
                             p.rules[p.rules[bad].parent].name);
                else
                    snprintf(msg, sizeof msg, "rule '%.64s' is left-recursive", p.rules[bad].name);
                gp_error_at(&p, bad >= 0 ? p.rules[bad].at : 0, msg);
                kvi_grammar_free(g);
                g = NULL;
            }
        }
    }
    gp_free(&p);
    return g;
}

void kvi_grammar_free(kvi_grammar *g)
{
    if (!g) return;
    free(g->elems);
    free(g->alts);
    free(g->rules);
    free(g->sets);
    free(g->ranges);
    free(g);
}
