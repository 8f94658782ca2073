/*
 * jinja_lex.c — template text to tokens, as jinja2's lexer cuts it with
 * trim_blocks and lstrip_blocks on.
 *
 * The source is first normalised as jinja2 does: "\r\n" and "\r" become "\n",
 * and one trailing newline is dropped (keep_trailing_newline off). Then, outside
 * tags, text runs to the next "{{", "{%" or "{#":
 *   - a tag opened with '-' strips all whitespace before it;
 *   - else a block or comment tag (not '+') strips the spaces and tabs between
 *     the start of its line and itself (lstrip_blocks), "the start of its line"
 *     also being the end of a previous tag that ended with a newline;
 *   - a tag closed with '-' strips all whitespace after it; a block or comment
 *     closed without '+' drops one newline after it (trim_blocks).
 * Inside a tag, "}}" or "%}" closes it only outside brackets. {% raw %} bodies are
 * one T_DATA token. Tokens point into the normalised copy or the arena.
 */
#include "template/jinja_int.h"

#include <string.h>

typedef struct lexer {
    jctx *J;
    const char *s;
    size_t n, pos;
    int line;
    jtok *t;
    size_t nt, cap;
    bool line_starting; /* the last match ended with a newline */
} lexer;

static void emit(lexer *L, int type, const char *s, size_t n)
{
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *t = ja_alloc(L->J, cap * sizeof *t);
        if (L->nt) memcpy(t, L->t, L->nt * sizeof *t);
        L->t = t;
        L->cap = cap;
    }
    L->t[L->nt++] = (jtok){ .t = (uint8_t)type, .line = L->line, .s = s, .n = n };
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void count_lines(lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) L->line += L->s[i] == '\n';
}

static void skip_ws(lexer *L)
{
    size_t p = L->pos;
    while (p < L->n && is_ws(L->s[p])) p++;
    count_lines(L, L->pos, p);
    L->pos = p;
}

static bool at(const lexer *L, size_t p, const char *w)
{
    size_t n = strlen(w);
    return p + n <= L->n && !memcmp(L->s + p, w, n);
}

/* A quoted string at L->pos, decoded as Python decodes its escapes. */
static void lex_string(lexer *L)
{
    char q = L->s[L->pos];
    size_t p = L->pos + 1, start = p;
    while (p < L->n && L->s[p] != q) p += L->s[p] == '\\' ? 2 : 1;
    if (p >= L->n) {
        L->J->line = L->line;
        jinja_fail(L->J, "unexpected end of string");
    }
    size_t raw = p - start;
    char *o = ja_alloc(L->J, raw + 1);
    size_t k = 0;
    for (size_t i = start; i < p; i++) {
        char c = L->s[i];
        if (c != '\\' || i + 1 >= p) {
            o[k++] = c;
            continue;
        }
        char e = L->s[++i];
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case '0': o[k++] = '\0'; break;
        case '\\':
        case '\'':
        case '"': o[k++] = e; break;
        case '\n': break;
        default: o[k++] = '\\'; o[k++] = e;
        }
    }
    o[k] = 0;
    count_lines(L, L->pos, p + 1);
    emit(L, T_STRING, o, k);
    L->pos = p + 1;
}

static void lex_number(lexer *L)
{
    size_t p = L->pos;
    bool is_float = false;
    while (p < L->n && (is_digit(L->s[p]) || L->s[p] == '_')) p++;
    bool after_dot = L->nt && L->t[L->nt - 1].t == T_OP && L->t[L->nt - 1].s[0] == '.';
    if (!after_dot && p + 1 < L->n && L->s[p] == '.' && is_digit(L->s[p + 1])) {
        is_float = true;
        p++;
        while (p < L->n && (is_digit(L->s[p]) || L->s[p] == '_')) p++;
    }
    if (!after_dot && p < L->n && (L->s[p] == 'e' || L->s[p] == 'E')) {
        size_t q = p + 1;
        if (q < L->n && (L->s[q] == '+' || L->s[q] == '-')) q++;
        if (q < L->n && is_digit(L->s[q])) {
            is_float = true;
            p = q;
            while (p < L->n && is_digit(L->s[p])) p++;
        }
    }
    emit(L, is_float ? T_FLOAT : T_INT, L->s + L->pos, p - L->pos);
    L->pos = p;
}

static const char *const ops2[] = { "//", "**", "==", "!=", "<=", ">=" };

/* The tokens of one tag up to its end ("}}" or "%}"); applies the end's whitespace control. */
static void lex_tag(lexer *L, bool block)
{
    int depth = 0;
    for (;;) {
        skip_ws(L);
        if (L->pos >= L->n) {
            L->J->line = L->line;
            jinja_fail(L->J, "unexpected end of template, expected '%s'",
                       block ? "end of statement block" : "end of print statement");
        }
        const char *end = block ? "%}" : "}}";
        size_t p = L->pos;
        if (depth == 0) {
            int sign = (L->s[p] == '-' || (block && L->s[p] == '+')) && at(L, p + 1, end) ? L->s[p] : 0;
            if (sign || at(L, p, end)) {
                emit(L, block ? T_BLOCK_END : T_VAR_END, L->s + p, 0);
                L->pos = p + 2 + (sign ? 1 : 0);
                if (sign == '-')
                    skip_ws(L);
                else if (block && sign != '+' && L->pos < L->n && L->s[L->pos] == '\n') {
                    L->pos++;
                    L->line++;
                }
                L->line_starting = L->s[L->pos - 1] == '\n';
                return;
            }
        }
        char c = L->s[p];
        if (c == '\'' || c == '"') {
            lex_string(L);
        } else if (is_digit(c)) {
            lex_number(L);
        } else if (is_alpha(c)) {
            while (p < L->n && (is_alpha(L->s[p]) || is_digit(L->s[p]))) p++;
            emit(L, T_NAME, L->s + L->pos, p - L->pos);
            L->pos = p;
        } else {
            size_t len = 0;
            for (size_t i = 0; i < sizeof ops2 / sizeof ops2[0]; i++)
                if (at(L, p, ops2[i])) len = 2;
            if (!len && strchr("+-*/%~<>=()[]{},.:|;!", c)) len = 1;
            if (!len) {
                L->J->line = L->line;
                jinja_fail(L->J, "unexpected char '%c'", c);
            }
            if (c == '(' || c == '[' || c == '{') depth++;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
            emit(L, T_OP, L->s + p, len);
            L->pos = p + len;
        }
    }
}

/* {% raw %}: at L->pos just past "{%" (and its sign); true when this is one. */
static bool lex_raw(lexer *L)
{
    size_t p = L->pos;
    while (p < L->n && is_ws(L->s[p])) p++;
    if (!at(L, p, "raw")) return false;
    p += 3;
    while (p < L->n && is_ws(L->s[p])) p++;
    bool strip = false;
    if (at(L, p, "-%}"))
        strip = true, p += 3;
    else if (at(L, p, "%}"))
        p += 2;
    else
        return false;
    if (strip)
        while (p < L->n && is_ws(L->s[p])) p++;
    for (size_t q = p; q + 1 < L->n; q++) {
        if (!at(L, q, "{%")) continue;
        size_t r = q + 2;
        bool lstrip = r < L->n && L->s[r] == '-';
        if (lstrip) r++;
        while (r < L->n && is_ws(L->s[r])) r++;
        if (!at(L, r, "endraw")) continue;
        r += 6;
        while (r < L->n && is_ws(L->s[r])) r++;
        int sign = (L->s[r] == '-' || L->s[r] == '+') ? L->s[r] : 0;
        if (!at(L, r + (sign ? 1 : 0), "%}")) continue;
        size_t e = q;
        if (lstrip)
            while (e > p && is_ws(L->s[e - 1])) e--;
        count_lines(L, L->pos, p);
        if (e > p) emit(L, T_DATA, L->s + p, e - p);
        count_lines(L, p, r);
        L->pos = r + 2 + (sign ? 1 : 0);
        if (sign == '-')
            skip_ws(L);
        else if (sign != '+' && L->pos < L->n && L->s[L->pos] == '\n') {
            L->pos++;
            L->line++;
        }
        L->line_starting = L->s[L->pos - 1] == '\n';
        return true;
    }
    L->J->line = L->line;
    jinja_fail(L->J, "missing end of raw directive");
}

/* "\r\n" and "\r" to "\n", one trailing newline dropped. */
static char *normalise(jctx *J, const char *src, size_t n, size_t *out_n)
{
    char *o = ja_alloc(J, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            o[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            o[k++] = src[i];
        }
    }
    if (k && o[k - 1] == '\n') k--;
    o[k] = 0;
    *out_n = k;
    return o;
}

jtok *jinja_lex(jctx *J, const char *src, size_t n, size_t *n_tok)
{
    lexer L = { .J = J, .line = 1, .line_starting = true };
    L.s = normalise(J, src, n, &L.n);
    while (L.pos < L.n) {
        const char *hit = NULL;
        for (const char *q = L.s + L.pos; (q = memchr(q, '{', (size_t)(L.s + L.n - q))) != NULL; q++)
            if (q + 1 < L.s + L.n && (q[1] == '{' || q[1] == '%' || q[1] == '#')) {
                hit = q;
                break;
            }
        size_t idx = hit ? (size_t)(hit - L.s) : L.n;
        const char *text = L.s + L.pos;
        size_t tn = idx - L.pos;
        if (!hit) {
            if (tn) emit(&L, T_DATA, text, tn);
            count_lines(&L, L.pos, idx);
            break;
        }
        char kind = hit[1];
        char sign = idx + 2 < L.n && (hit[2] == '-' || hit[2] == '+') ? hit[2] : 0;
        if (sign == '-') {
            while (tn && is_ws(text[tn - 1])) tn--;
        } else if (sign != '+' && kind != '{') {
            size_t lp = tn;
            while (lp && text[lp - 1] != '\n') lp--;
            if (lp > 0 || L.line_starting) {
                size_t i = lp;
                while (i < tn && is_ws(text[i])) i++;
                if (i == tn && tn > lp) tn = lp;
            }
        }
        if (tn) emit(&L, T_DATA, text, tn);
        count_lines(&L, L.pos, idx);
        L.pos = idx + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *e = NULL;
            for (size_t q = L.pos; q + 1 < L.n; q++)
                if (L.s[q] == '#' && L.s[q + 1] == '}') {
                    e = L.s + q;
                    break;
                }
            if (!e) {
                J->line = L.line;
                jinja_fail(J, "missing end of comment tag");
            }
            size_t ei = (size_t)(e - L.s);
            char esign = ei > L.pos && (e[-1] == '-' || e[-1] == '+') ? e[-1] : 0;
            count_lines(&L, L.pos, ei);
            L.pos = ei + 2;
            if (esign == '-')
                skip_ws(&L);
            else if (esign != '+' && L.pos < L.n && L.s[L.pos] == '\n') {
                L.pos++;
                L.line++;
            }
            L.line_starting = L.s[L.pos - 1] == '\n';
            continue;
        }
        if (kind == '%' && lex_raw(&L)) continue;
        emit(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, hit, 2);
        lex_tag(&L, kind == '%');
    }
    emit(&L, T_EOF, L.s + L.n, 0);
    *n_tok = L.nt;
    return L.t;
}
