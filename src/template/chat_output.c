/*
 * chat_output.c — a streaming parser of one generated assistant message: it
 * splits the text into reasoning, content and tool calls in the wire form of a
 * kvi_tool_format (tool_format.c names the forms and their markers).
 *
 * Data: `raw` holds the text fed so far (its classified prefix dropped now and
 * then); raw[0 .. pos) is classified (gone to content, reasoning or a call, or
 * dropped as a marker), raw[pos .. raw_n) is held back. `content` and
 * `reasoning` are append-only byte buffers; `calls` an append-only array of
 * (name, compact JSON arguments) pairs. `st` is every scalar of the parse: the
 * mode (plain text, inside a reasoning block, or Harmony's outside / inside a
 * message), the flags that drop whitespace after a think tag or between calls,
 * and the lengths of raw and of the outputs.
 *
 * A call unit runs from its format's opening marker (Llama 3: the '{' that
 * starts the message; Harmony: a message header naming functions.N) through
 * its closing one; it is parsed whole, so its calls appear together.
 *
 * Invariants:
 * - Every step decides only what no continuation of the held text could
 *   change: a marker is acted on once it is whole, text is released once no
 *   marker can start in it, a call unit (from its opening marker to its closing
 *   one) is taken once it is complete and well formed, and refused (its opening
 *   marker becomes content, the rest is read again as text; a Harmony
 *   message becomes content through its end marker) once no continuation
 *   could make it so. So the outputs depend on the text alone,
 *   never on how it was split between feeds. kvi_chat_output_finish reads the
 *   end of the text as final: held text is content, a unit that is still open
 *   is taken when everything but its closing marker is there, else refused.
 * - Content released at the end of the held text never ends inside a UTF-8
 *   sequence (the partial character waits for its last bytes).
 * - A feed or finish either completes or, on a failed allocation, restores
 *   `st` (the outputs shrink back to their old lengths, new calls are freed)
 *   and takes nothing: the caller may feed the same bytes again.
 * - A held unit is parsed again from its start on each feed, so a call costs
 *   O(size x feeds); units are bounded only by memory, names and headers by
 *   MAX_NAME.
 */
#include "kvinfer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME 1024   /* bytes of a function name, a call id or a Harmony header */
#define MAX_DEPTH 128   /* nesting of JSON values */
#define COMPACT_AT 4096 /* raw's classified prefix is dropped past this size */
#define UNIT_SMALL 2048 /* a held unit this short is parsed again on every feed */

typedef struct sbuf {
    char *p;
    size_t n, cap; /* p[n] == 0 whenever p != NULL */
} sbuf;

typedef struct call {
    char *name, *args; /* NUL-terminated, malloc'd */
} call;

typedef struct callv {
    call *v;
    int n, cap;
} callv;

typedef enum mode {
    M_TEXT,   /* content; markers open calls or reasoning */
    M_THINK,  /* reasoning until think_end */
    M_H_OUT,  /* Harmony: between messages */
    M_H_BODY, /* Harmony: inside a message's body (h_reasoning says where it goes) */
} mode;

typedef struct state {
    size_t raw_n, pos; /* raw: bytes fed, bytes classified */
    size_t content_n, reasoning_n;
    int n_calls;
    uint8_t mode;
    bool skip_ws;       /* drop whitespace at the start of what follows (after a think tag) */
    bool after_call;    /* whitespace before another call (or the end) is dropped */
    bool llama_checked; /* Llama 3: the message's start was found not to be a call */
    bool h_started;     /* Harmony: the first bytes were looked at */
    bool h_reasoning;   /* Harmony: the open body is analysis */
    bool finished;
    const char *think_end;   /* M_THINK's closing marker */
    size_t wait_pos, wait_n; /* the unit at wait_pos was parsed with wait_n bytes held and waited */
} state;

struct kvi_chat_output {
    kvi_chat_output_params p;
    sbuf raw, content, reasoning;
    callv calls; /* calls.n mirrors st.n_calls */
    state st;
};

/* ---- buffers ---- */

static int sb_reserve(sbuf *b, size_t extra)
{
    if (b->p && b->n + extra < b->cap) return 0;
    if (extra > SIZE_MAX / 4 - b->n) return KVI_E_NOMEM;
    size_t cap = b->cap ? b->cap : 64;
    while (cap <= b->n + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return KVI_E_NOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int sb_put(sbuf *b, const char *s, size_t n)
{
    if (sb_reserve(b, n)) return KVI_E_NOMEM;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int sb_putc(sbuf *b, char c) { return sb_put(b, &c, 1); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t ws_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* ---- JSON: validation, compaction, strings ---- */

enum { J_OK, J_MORE, J_BAD }; /* a value whole / cut short by the end of the text / not JSON */

static int j_value(const char *s, size_t n, size_t *i, bool final, int depth);

static int j_string(const char *s, size_t n, size_t *i)
{
    size_t k = *i + 1;
    for (; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"') {
            *i = k + 1;
            return J_OK;
        }
        if (c < 0x20) return J_BAD;
        if (c != '\\') continue;
        if (++k >= n) return J_MORE;
        if (s[k] == 'u') {
            for (int h = 1; h <= 4; h++) {
                if (k + h >= n) return J_MORE;
                char x = s[k + h];
                if (!((x >= '0' && x <= '9') || (x >= 'a' && x <= 'f') || (x >= 'A' && x <= 'F')))
                    return J_BAD;
            }
            k += 4;
        } else if (!strchr("\"\\/bfnrt", s[k])) {
            return J_BAD;
        }
    }
    return J_MORE;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?; a number that reaches the end of the text is whole only when final. */
static int j_number(const char *s, size_t n, size_t *i, bool final)
{
    size_t k = *i;
    if (k < n && s[k] == '-') k++;
    if (k >= n) return final ? J_BAD : J_MORE;
    if (s[k] == '0')
        k++;
    else if (is_digit(s[k]))
        while (k < n && is_digit(s[k])) k++;
    else
        return J_BAD;
    if (k < n && s[k] == '.') {
        if (++k >= n) return final ? J_BAD : J_MORE;
        if (!is_digit(s[k])) return J_BAD;
        while (k < n && is_digit(s[k])) k++;
    }
    if (k < n && (s[k] == 'e' || s[k] == 'E')) {
        if (++k < n && (s[k] == '+' || s[k] == '-')) k++;
        if (k >= n) return final ? J_BAD : J_MORE;
        if (!is_digit(s[k])) return J_BAD;
        while (k < n && is_digit(s[k])) k++;
    }
    if (k >= n && !final) return J_MORE;
    *i = k;
    return J_OK;
}

static int j_word(const char *s, size_t n, size_t *i, const char *w)
{
    size_t wl = strlen(w), have = n - *i < wl ? n - *i : wl;
    if (memcmp(s + *i, w, have)) return J_BAD;
    if (have < wl) return J_MORE;
    *i += wl;
    return J_OK;
}

/* items of an array (close ']') or members of an object (close '}') after the opening bracket */
static int j_items(const char *s, size_t n, size_t *i, bool final, int depth, char close)
{
    size_t k = *i + 1;
    k += ws_len(s + k, n - k);
    if (k >= n) return J_MORE;
    if (s[k] == close) {
        *i = k + 1;
        return J_OK;
    }
    for (;;) {
        k += ws_len(s + k, n - k);
        if (k >= n) return J_MORE;
        int r;
        if (close == '}') {
            if (s[k] != '"') return J_BAD;
            if ((r = j_string(s, n, &k)) != J_OK) return r;
            k += ws_len(s + k, n - k);
            if (k >= n) return J_MORE;
            if (s[k++] != ':') return J_BAD;
        }
        if ((r = j_value(s, n, &k, final, depth + 1)) != J_OK) return r;
        k += ws_len(s + k, n - k);
        if (k >= n) return J_MORE;
        if (s[k] == close) {
            *i = k + 1;
            return J_OK;
        }
        if (s[k++] != ',') return J_BAD;
    }
}

/* One JSON value at s[*i] (leading whitespace skipped); *i past it on J_OK. */
static int j_value(const char *s, size_t n, size_t *i, bool final, int depth)
{
    *i += ws_len(s + *i, n - *i);
    if (*i >= n) return J_MORE;
    if (depth > MAX_DEPTH) return J_BAD;
    switch (s[*i]) {
    case '{': return j_items(s, n, i, final, depth, '}');
    case '[': return j_items(s, n, i, final, depth, ']');
    case '"': return j_string(s, n, i);
    case 't': return j_word(s, n, i, "true");
    case 'f': return j_word(s, n, i, "false");
    case 'n': return j_word(s, n, i, "null");
    default: return j_number(s, n, i, final);
    }
}

/* Whether s[0 .. n) is exactly one JSON value (whitespace around allowed). */
static bool j_whole(const char *s, size_t n)
{
    size_t i = 0;
    if (j_value(s, n, &i, true, 0) != J_OK) return false;
    return i + ws_len(s + i, n - i) == n;
}

/* Appends valid JSON s[0 .. n) without the whitespace outside its strings. */
static int j_compact(sbuf *out, const char *s, size_t n)
{
    size_t from = 0;
    bool in_str = false;
    for (size_t k = 0; k < n; k++) {
        char c = s[k];
        if (in_str) {
            if (c == '\\')
                k++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (is_ws(c)) {
            if (sb_put(out, s + from, k - from)) return KVI_E_NOMEM;
            from = k + 1;
        }
    }
    return sb_put(out, s + from, n - from);
}

/* Appends s[0 .. n) as a JSON string literal. */
static int j_quote(sbuf *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (sb_putc(out, '"')) return KVI_E_NOMEM;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        char e[7] = { '\\', 0 };
        size_t en = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            if (c >= 0x20) {
                e[0] = (char)c;
                en = 1;
            } else {
                memcpy(e + 1, "u00", 3);
                e[4] = hex[c >> 4];
                e[5] = hex[c & 15];
                en = 6;
            }
        }
        if (sb_put(out, e, en)) return KVI_E_NOMEM;
    }
    return sb_putc(out, '"');
}

static unsigned hex4(const char *s)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

static int put_utf8(sbuf *out, unsigned cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return sb_put(out, b, n);
}

/* Appends the text of a valid JSON string literal s[0 .. n) (quotes included). */
static int j_unquote(sbuf *out, const char *s, size_t n)
{
    for (size_t k = 1; k + 1 < n; k++) {
        int r;
        if (s[k] != '\\') {
            r = sb_putc(out, s[k]);
        } else {
            char c = s[++k];
            if (c == 'u') {
                unsigned cp = hex4(s + k + 1);
                k += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && k + 6 < n && s[k + 1] == '\\' && s[k + 2] == 'u') {
                    unsigned lo = hex4(s + k + 3);
                    if (lo >= 0xDC00 && lo < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        k += 6;
                    }
                }
                r = put_utf8(out, cp);
            } else {
                const char *m = strchr("b\bf\fn\nr\rt\t", c);
                r = sb_putc(out, m ? m[1] : c);
            }
        }
        if (r) return r;
    }
    return 0;
}

typedef struct span {
    const char *s;
    size_t n;
} span;

/* The next member of a valid JSON object: *i starts just inside '{' and moves
 * past the member and its ','. false at '}'. */
static bool j_member(const char *s, size_t n, size_t *i, span *key, span *val)
{
    size_t k = *i + ws_len(s + *i, n - *i);
    if (k >= n || s[k] == '}') return false;
    size_t k0 = k;
    j_string(s, n, &k);
    *key = (span){ s + k0, k - k0 };
    k += ws_len(s + k, n - k) + 1; /* ':' */
    k += ws_len(s + k, n - k);
    k0 = k;
    j_value(s, n, &k, true, 0);
    *val = (span){ s + k0, k - k0 };
    k += ws_len(s + k, n - k);
    if (k < n && s[k] == ',') k++;
    *i = k;
    return true;
}

static bool span_is(span x, const char *lit) { return x.n == strlen(lit) && !memcmp(x.s, lit, x.n); }

/* ---- calls ---- */

static void callv_free(callv *cv, int from)
{
    for (int i = from; i < cv->n; i++) {
        free(cv->v[i].name);
        free(cv->v[i].args);
    }
    cv->n = from;
}

static int callv_reserve(callv *cv, int extra)
{
    if (cv->n + extra <= cv->cap) return 0;
    int cap = cv->cap ? cv->cap : 4;
    while (cap < cv->n + extra) cap *= 2;
    call *v = realloc(cv->v, (size_t)cap * sizeof *v);
    if (!v) return KVI_E_NOMEM;
    cv->v = v;
    cv->cap = cap;
    return 0;
}

/* Adds a call named name[0 .. nn) whose arguments are the finished text in args (taken over). */
static int callv_add(callv *cv, const char *name, size_t nn, sbuf *args)
{
    char *nm = malloc(nn + 1);
    if (!nm || callv_reserve(cv, 1)) {
        free(nm);
        return KVI_E_NOMEM;
    }
    memcpy(nm, name, nn);
    nm[nn] = 0;
    cv->v[cv->n++] = (call){ nm, args->p };
    *args = (sbuf){ 0 };
    return 0;
}

/* Adds a call from a valid JSON object with its name (a string) under name_key
 * and its arguments (an object, or a string holding one) under args_key.
 * 1 when the object has that shape, 0 when not, or KVI_E_NOMEM. */
static int call_from_object(callv *cv, span obj, const char *name_key, const char *args_key)
{
    span k, v, name = { 0 }, args = { 0 };
    size_t i = 1;
    while (j_member(obj.s, obj.n, &i, &k, &v)) {
        if (span_is(k, name_key) && !name.s) name = v;
        if (span_is(k, args_key) && !args.s) args = v;
    }
    if (!name.s || name.s[0] != '"' || !args.s) return 0;
    sbuf nm = { 0 }, a = { 0 }, inner = { 0 };
    int r = 1;
    if (j_unquote(&nm, name.s, name.n) || sb_put(&nm, "", 0)) r = KVI_E_NOMEM;
    if (r == 1 && args.s[0] == '"') {
        /* arguments written as a JSON string holding the object */
        if (j_unquote(&inner, args.s, args.n) || sb_put(&inner, "", 0))
            r = KVI_E_NOMEM;
        else if (inner.n && j_whole(inner.p, inner.n) && inner.p[ws_len(inner.p, inner.n)] == '{')
            args = (span){ inner.p, inner.n };
        else
            r = 0;
    } else if (r == 1 && args.s[0] != '{') {
        r = 0;
    }
    if (r == 1 && nm.n == 0) r = 0;
    if (r == 1 && j_compact(&a, args.s, args.n)) r = KVI_E_NOMEM;
    if (r == 1 && callv_add(cv, nm.p, nm.n, &a)) r = KVI_E_NOMEM;
    free(nm.p);
    free(a.p);
    free(inner.p);
    return r;
}

/* ---- a cursor over a held call unit ---- */

enum { U_OK, U_MORE, U_BAD, U_NOMEM };

typedef struct cur {
    const char *s;
    size_t n, i;
    bool final; /* the text ends at n */
} cur;

static void c_ws(cur *c) { c->i += ws_len(c->s + c->i, c->n - c->i); }

static bool c_end(const cur *c) { return c->i >= c->n; }

/* The literal lit at the cursor (moved past it). */
static int c_lit(cur *c, const char *lit)
{
    size_t l = strlen(lit), have = c->n - c->i < l ? c->n - c->i : l;
    if (memcmp(c->s + c->i, lit, have)) return U_BAD;
    if (have < l) return c->final ? U_BAD : U_MORE;
    c->i += l;
    return U_OK;
}

/* Whether the literal is at the cursor (moved past it when so); U_MORE when the text ends in a prefix of it. */
static int c_opt(cur *c, const char *lit, bool *got)
{
    int r = c_lit(c, lit);
    *got = r == U_OK;
    return r == U_BAD ? U_OK : r;
}

/* The text up to the first of stops[0 .. ns) (out, which); the cursor moves to that stop. */
static int c_until(cur *c, const char *const *stops, int ns, size_t max, span *out, int *which)
{
    size_t best = SIZE_MAX, lmax = 0;
    for (int k = 0; k < ns; k++) {
        size_t l = strlen(stops[k]);
        if (l > lmax) lmax = l;
        for (size_t j = c->i; j + l <= c->n; j++) {
            if (j >= best) break;
            if (!memcmp(c->s + j, stops[k], l)) {
                best = j;
                *which = k;
                break;
            }
        }
    }
    if (best == SIZE_MAX) return c->final || c->n - c->i > max + lmax ? U_BAD : U_MORE;
    if (best - c->i > max) return U_BAD;
    *out = (span){ c->s + c->i, best - c->i };
    c->i = best;
    return U_OK;
}

/* One JSON value at the cursor (whitespace before it skipped). */
static int c_json(cur *c, span *out)
{
    c_ws(c);
    size_t k = c->i;
    int r = j_value(c->s, c->n, &k, c->final, 0);
    if (r == J_MORE) return c->final ? U_BAD : U_MORE;
    if (r == J_BAD) return U_BAD;
    *out = (span){ c->s + c->i, k - c->i };
    c->i = k;
    return U_OK;
}

static int c_object(cur *c, span *out)
{
    c_ws(c);
    if (c_end(c)) return c->final ? U_BAD : U_MORE;
    if (c->s[c->i] != '{') return U_BAD;
    return c_json(c, out);
}

/* The closing marker, or (at the end of the text) none: a unit may end without it. */
static int c_close(cur *c, const char *lit)
{
    c_ws(c);
    if (c_end(c)) return c->final ? U_OK : U_MORE;
    return c_lit(c, lit);
}

static span trim(span x)
{
    while (x.n && is_ws(x.s[0])) x.s++, x.n--;
    while (x.n && is_ws(x.s[x.n - 1])) x.n--;
    return x;
}

/* r from call_from_object as a unit status */
static int shape(int r) { return r < 0 ? U_NOMEM : r ? U_OK : U_BAD; }

#define TRY(x)                     \
    do {                           \
        int r_ = (x);              \
        if (r_ != U_OK) return r_; \
    } while (0)

/* ---- the formats' call units: c starts after the opening marker ---- */

/* A name or id: no whitespace, brackets or quotes. */
static bool plain_name(span x)
{
    if (!x.n) return false;
    for (size_t i = 0; i < x.n; i++)
        if (is_ws(x.s[i]) || strchr("[]{}<>\"", x.s[i])) return false;
    return true;
}

/* <tool_call> {"name": N, "arguments": {...}} </tool_call> */
static int u_hermes(cur *c, callv *cv)
{
    span o;
    TRY(c_object(c, &o));
    TRY(c_close(c, "</tool_call>"));
    return shape(call_from_object(cv, o, "\"name\"", "\"arguments\""));
}

/* A parameter value as written: JSON when it is, else a string; with python,
 * Python's True / False / None too (Qwen3-Coder's template writes `value | string`). */
static int put_value(sbuf *a, span v, bool python)
{
    static const char *const py[3][2] = { { "True", "true" }, { "False", "false" }, { "None", "null" } };
    span t = trim(v);
    if (t.n && j_whole(t.s, t.n)) return j_compact(a, t.s, t.n);
    for (int k = 0; k < 3 && python; k++)
        if (span_is(t, py[k][0])) return sb_put(a, py[k][1], strlen(py[k][1]));
    return j_quote(a, v.s, v.n);
}

/* <tool_call> <function=N> (<parameter=P> V </parameter>)* </function> </tool_call> */
static int u_qwen3_coder(cur *c, callv *cv, sbuf *a)
{
    static const char *const gt[] = { ">" }, *const endp[] = { "</parameter>" };
    span name, key, val;
    int w;
    c_ws(c);
    TRY(c_lit(c, "<function="));
    TRY(c_until(c, gt, 1, MAX_NAME, &name, &w));
    c->i++;
    if (sb_putc(a, '{')) return U_NOMEM;
    for (;;) {
        bool got;
        c_ws(c);
        TRY(c_opt(c, "<parameter=", &got));
        if (!got) break;
        TRY(c_until(c, gt, 1, MAX_NAME, &key, &w));
        c->i++;
        TRY(c_until(c, endp, 1, SIZE_MAX / 2, &val, &w));
        c->i += strlen(endp[0]);
        /* the template writes each value between newlines */
        if (val.n && val.s[0] == '\n') val.s++, val.n--;
        if (val.n && val.s[val.n - 1] == '\n') val.n--;
        if (a->n > 1 && sb_putc(a, ',')) return U_NOMEM;
        if (j_quote(a, key.s, key.n) || sb_putc(a, ':') || put_value(a, val, true)) return U_NOMEM;
    }
    TRY(c_lit(c, "</function>"));
    TRY(c_close(c, "</tool_call>"));
    name = trim(name);
    if (!plain_name(name)) return U_BAD;
    if (sb_putc(a, '}')) return U_NOMEM;
    return callv_add(cv, name.s, name.n, a) ? U_NOMEM : U_OK;
}

/* <tool_call> N (<arg_key>P</arg_key> <arg_value>V</arg_value>)* </tool_call> */
static int u_glm(cur *c, callv *cv, sbuf *a)
{
    static const char *const head[] = { "<arg_key>", "</tool_call>" }, *const endk[] = { "</arg_key>" },
                             *const endv[] = { "</arg_value>" };
    span name, key, val;
    int w;
    TRY(c_until(c, head, 2, MAX_NAME, &name, &w));
    name = trim(name);
    if (!plain_name(name)) return U_BAD;
    if (sb_putc(a, '{')) return U_NOMEM;
    for (;;) {
        bool got;
        c_ws(c);
        TRY(c_opt(c, "<arg_key>", &got));
        if (!got) break;
        TRY(c_until(c, endk, 1, MAX_NAME, &key, &w));
        c->i += strlen(endk[0]);
        c_ws(c);
        TRY(c_lit(c, "<arg_value>"));
        TRY(c_until(c, endv, 1, SIZE_MAX / 2, &val, &w));
        c->i += strlen(endv[0]);
        if (a->n > 1 && sb_putc(a, ',')) return U_NOMEM;
        if (j_quote(a, key.s, key.n) || sb_putc(a, ':') || put_value(a, val, false)) return U_NOMEM;
    }
    TRY(c_close(c, "</tool_call>"));
    if (sb_putc(a, '}')) return U_NOMEM;
    return callv_add(cv, name.s, name.n, a) ? U_NOMEM : U_OK;
}

/* (<|python_tag|>) {"name": N, "parameters": {...}} as the whole message */
static int u_llama3(cur *c, callv *cv)
{
    span o;
    TRY(c_object(c, &o));
    int r = call_from_object(cv, o, "\"name\"", "\"parameters\"");
    if (r == 0) r = call_from_object(cv, o, "\"name\"", "\"arguments\"");
    if (r != 1) return shape(r);
    c_ws(c);
    /* only the whole message is a call: wait for its end */
    if (!c_end(c)) return U_BAD;
    return c->final ? U_OK : U_MORE;
}

/* A JSON array of call objects (name_key, args_key). */
static int call_array(cur *c, callv *cv, const char *name_key, const char *args_key)
{
    span arr;
    c_ws(c);
    if (c_end(c)) return c->final ? U_BAD : U_MORE;
    if (c->s[c->i] != '[') return U_BAD;
    TRY(c_json(c, &arr));
    size_t k = 1;
    int n = 0;
    for (;;) {
        k += ws_len(arr.s + k, arr.n - k);
        if (arr.s[k] == ']') break;
        size_t k0 = k;
        j_value(arr.s, arr.n, &k, true, 0);
        if (arr.s[k0] != '{') return U_BAD;
        int r = call_from_object(cv, (span){ arr.s + k0, k - k0 }, name_key, args_key);
        if (r != 1) return shape(r);
        n++;
        k += ws_len(arr.s + k, arr.n - k);
        if (arr.s[k] == ',') k++;
    }
    return n ? U_OK : U_BAD;
}

/* [TOOL_CALLS] [{"name": N, "arguments": {...}, "id": I}, ...] */
static int u_mistral(cur *c, callv *cv) { return call_array(c, cv, "\"name\"", "\"arguments\""); }

/* <|tool_call|> [{"name": N, "arguments": {...}}, ...] */
static int u_granite(cur *c, callv *cv) { return call_array(c, cv, "\"name\"", "\"arguments\""); }

/* <|START_ACTION|> [{"tool_call_id": I, "tool_name": N, "parameters": {...}}, ...] <|END_ACTION|> */
static int u_command_r(cur *c, callv *cv)
{
    TRY(call_array(c, cv, "\"tool_name\"", "\"parameters\""));
    return c_close(c, "<|END_ACTION|>");
}

/* [TOOL_CALLS] N ([CALL_ID] I) [ARGS] {...} */
static int u_mistral_args(cur *c, callv *cv, sbuf *a)
{
    static const char *const stops[] = { "[ARGS]", "[CALL_ID]" }, *const args[] = { "[ARGS]" };
    span name, id, o;
    int w;
    TRY(c_until(c, stops, 2, MAX_NAME, &name, &w));
    if (!plain_name(name)) return U_BAD;
    c->i += strlen(stops[w]);
    if (w == 1) {
        TRY(c_until(c, args, 1, MAX_NAME, &id, &w));
        c->i += strlen(args[0]);
    }
    TRY(c_object(c, &o));
    if (j_compact(a, o.s, o.n)) return U_NOMEM;
    return callv_add(cv, name.s, name.n, a) ? U_NOMEM : U_OK;
}

/* <｜tool▁calls▁begin｜> (<｜tool▁call▁begin｜> [function<｜tool▁sep｜>N ```json {...} ```] or
 * [N<｜tool▁sep｜>{...}] <｜tool▁call▁end｜>)+ <｜tool▁calls▁end｜> */
static int u_deepseek(cur *c, callv *cv, sbuf *a, bool r1)
{
    static const char *const sep[] = { "<｜tool▁sep｜>" }, *const nl[] = { "\n", "```" };
    int n = 0, w;
    for (;;) {
        bool got;
        c_ws(c);
        if (n && c_end(c) && c->final) return U_OK;
        TRY(c_opt(c, "<｜tool▁call▁begin｜>", &got));
        if (!got) break;
        span name, o;
        TRY(c_until(c, sep, 1, MAX_NAME, &name, &w));
        c->i += strlen(sep[0]);
        if (r1) {
            /* name's line, then the arguments, most often fenced as ```json */
            TRY(c_until(c, nl, 2, MAX_NAME, &name, &w));
            c_ws(c);
            bool fence;
            TRY(c_opt(c, "```", &fence));
            if (fence) TRY(c_opt(c, "json", &got));
            TRY(c_object(c, &o));
            c_ws(c);
            if (fence) TRY(c_lit(c, "```"));
        } else {
            TRY(c_object(c, &o));
        }
        name = trim(name);
        if (!plain_name(name)) return U_BAD;
        c_ws(c);
        if (!(c_end(c) && c->final)) TRY(c_lit(c, "<｜tool▁call▁end｜>"));
        a->n = 0;
        if (j_compact(a, o.s, o.n) || callv_add(cv, name.s, name.n, a)) return U_NOMEM;
        n++;
    }
    if (!n) return U_BAD;
    return c_lit(c, "<｜tool▁calls▁end｜>");
}

/* <|tool_calls_section_begin|> (<|tool_call_begin|> functions.N:K <|tool_call_argument_begin|> {...}
 * <|tool_call_end|>)+ <|tool_calls_section_end|> */
static int u_kimi(cur *c, callv *cv, sbuf *a)
{
    static const char *const argb[] = { "<|tool_call_argument_begin|>" };
    int n = 0, w;
    for (;;) {
        bool got;
        c_ws(c);
        if (n && c_end(c) && c->final) return U_OK;
        TRY(c_opt(c, "<|tool_call_begin|>", &got));
        if (!got) break;
        span id, o;
        TRY(c_until(c, argb, 1, MAX_NAME, &id, &w));
        c->i += strlen(argb[0]);
        TRY(c_object(c, &o));
        c_ws(c);
        if (!(c_end(c) && c->final)) TRY(c_lit(c, "<|tool_call_end|>"));
        id = trim(id);
        if (id.n > 10 && !memcmp(id.s, "functions.", 10)) id.s += 10, id.n -= 10;
        for (size_t k = id.n; k-- > 0;)
            if (id.s[k] == ':') {
                id.n = k;
                break;
            }
        if (!plain_name(id)) return U_BAD;
        a->n = 0;
        if (j_compact(a, o.s, o.n) || callv_add(cv, id.s, id.n, a)) return U_NOMEM;
        n++;
    }
    if (!n) return U_BAD;
    return c_lit(c, "<|tool_calls_section_end|>");
}

/* Parses the unit at s[0 .. n) that starts after its marker; on U_OK *used is
 * its length and cv holds its calls (cv is emptied and released otherwise). */
static int unit_parse(kvi_tool_format f, const char *s, size_t n, bool final, size_t *used, callv *cv)
{
    cur c = { s, n, 0, final };
    sbuf a = { 0 };
    int r;
    switch (f) {
    case KVI_TOOLS_HERMES: r = u_hermes(&c, cv); break;
    case KVI_TOOLS_QWEN3_CODER: r = u_qwen3_coder(&c, cv, &a); break;
    case KVI_TOOLS_GLM: r = u_glm(&c, cv, &a); break;
    case KVI_TOOLS_LLAMA3: r = u_llama3(&c, cv); break;
    case KVI_TOOLS_MISTRAL: r = u_mistral(&c, cv); break;
    case KVI_TOOLS_MISTRAL_ARGS: r = u_mistral_args(&c, cv, &a); break;
    case KVI_TOOLS_DEEPSEEK_R1: r = u_deepseek(&c, cv, &a, true); break;
    case KVI_TOOLS_DEEPSEEK_V31: r = u_deepseek(&c, cv, &a, false); break;
    case KVI_TOOLS_GRANITE: r = u_granite(&c, cv); break;
    case KVI_TOOLS_COMMAND_R: r = u_command_r(&c, cv); break;
    case KVI_TOOLS_KIMI_K2: r = u_kimi(&c, cv, &a); break;
    default: r = U_BAD;
    }
    free(a.p);
    if (r != U_OK) {
        callv_free(cv, 0);
        free(cv->v);
        *cv = (callv){ 0 };
    }
    *used = c.i;
    return r;
}

/* ---- markers ---- */

typedef enum act {
    A_UNIT,    /* opens a call unit */
    A_THINK,   /* opens reasoning closed by the row's `arg` */
    A_DROP,    /* a marker that is only dropped */
    A_H_START, /* Harmony: a message's header starts */
    A_H_END,   /* Harmony: a message ends */
} act;

typedef struct marker {
    const char *text;
    uint8_t act;
    const char *arg;
} marker;

typedef struct markers {
    marker m[8];
    int n;
} markers;

/* The markers plain text is scanned for under params p. */
static void text_markers(const kvi_chat_output_params *p, markers *ms)
{
    static const char *const open[KVI_TOOLS_COUNT_] = {
        [KVI_TOOLS_HERMES] = "<tool_call>",
        [KVI_TOOLS_QWEN3_CODER] = "<tool_call>",
        [KVI_TOOLS_GLM] = "<tool_call>",
        [KVI_TOOLS_LLAMA3] = "<|python_tag|>",
        [KVI_TOOLS_MISTRAL] = "[TOOL_CALLS]",
        [KVI_TOOLS_MISTRAL_ARGS] = "[TOOL_CALLS]",
        [KVI_TOOLS_DEEPSEEK_R1] = "<｜tool▁calls▁begin｜>",
        [KVI_TOOLS_DEEPSEEK_V31] = "<｜tool▁calls▁begin｜>",
        [KVI_TOOLS_GRANITE] = "<|tool_call|>",
        [KVI_TOOLS_COMMAND_R] = "<|START_ACTION|>",
        [KVI_TOOLS_KIMI_K2] = "<|tool_calls_section_begin|>",
    };
    ms->n = 0;
    if ((unsigned)p->tools < KVI_TOOLS_COUNT_ && open[p->tools])
        ms->m[ms->n++] = (marker){ open[p->tools], A_UNIT, NULL };
    if (p->reasoning) ms->m[ms->n++] = (marker){ "<think>", A_THINK, "</think>" };
    if (p->tools == KVI_TOOLS_COMMAND_R) {
        ms->m[ms->n++] = (marker){ "<|START_THINKING|>", A_THINK, "<|END_THINKING|>" };
        ms->m[ms->n++] = (marker){ "<|START_RESPONSE|>", A_DROP, NULL };
        ms->m[ms->n++] = (marker){ "<|END_RESPONSE|>", A_DROP, NULL };
    }
}

static const markers harmony_out = { { { "<|start|>", A_H_START, NULL },
                                       { "<|channel|>", A_H_START, NULL },
                                       { "<|end|>", A_DROP, NULL },
                                       { "<|return|>", A_DROP, NULL },
                                       { "<|call|>", A_DROP, NULL } },
                                     5 };
static const markers harmony_body = { { { "<|start|>", A_H_START, NULL },
                                        { "<|channel|>", A_H_START, NULL },
                                        { "<|end|>", A_H_END, NULL },
                                        { "<|return|>", A_H_END, NULL },
                                        { "<|call|>", A_H_END, NULL } },
                                      5 };

/* The first i in s[0 .. n) where a marker is whole (*hit its row) or, unless
 * final, where the rest of the text is a proper prefix of one (*hit -1); n
 * (*hit -1) when neither. */
static size_t scan(const char *s, size_t n, const markers *ms, bool final, int *hit)
{
    *hit = -1;
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < ms->n; k++) {
            const char *t = ms->m[k].text;
            if (s[i] != t[0]) continue;
            size_t l = strlen(t), have = n - i < l ? n - i : l;
            if (memcmp(s + i, t, have)) continue;
            if (have == l) {
                *hit = k;
                return i;
            }
            if (!final) return i;
        }
    }
    return n;
}

/* The bytes of s[0 .. n) that end on a whole UTF-8 character. */
static size_t utf8_whole(const char *s, size_t n)
{
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* ---- the parse ---- */

static const char *held(const kvi_chat_output *o, size_t *n)
{
    *n = o->st.raw_n - o->st.pos;
    return o->raw.p ? o->raw.p + o->st.pos : ""; /* nothing fed yet: no buffer */
}

/* Appends s[0 .. n) to content or reasoning (leading whitespace dropped while
 * skip_ws) and classifies it. */
static int emit(kvi_chat_output *o, bool reasoning, const char *s, size_t n, size_t consumed)
{
    size_t w = o->st.skip_ws ? ws_len(s, n) : 0;
    sbuf *b = reasoning ? &o->reasoning : &o->content;
    if (sb_put(b, s + w, n - w)) return KVI_E_NOMEM;
    if (n > w) o->st.skip_ws = false;
    *(reasoning ? &o->st.reasoning_n : &o->st.content_n) = b->n;
    o->st.pos += consumed;
    return 0;
}

/* Takes the calls of a parsed unit of `used` bytes. */
static int take_calls(kvi_chat_output *o, callv *cv, size_t used)
{
    if (callv_reserve(&o->calls, cv->n)) {
        callv_free(cv, 0);
        return KVI_E_NOMEM;
    }
    memcpy(o->calls.v + o->calls.n, cv->v, (size_t)cv->n * sizeof *cv->v);
    o->calls.n += cv->n;
    o->st.n_calls = o->calls.n;
    cv->n = 0;
    o->st.pos += used;
    o->st.after_call = true;
    o->st.skip_ws = false;
    return 0;
}

/* A text the unit must end with when it completes before the end of the
 * message (NULL: it never does). */
static const char *unit_hint(kvi_tool_format f)
{
    switch (f) {
    case KVI_TOOLS_HERMES:
    case KVI_TOOLS_QWEN3_CODER:
    case KVI_TOOLS_GLM: return "</tool_call>";
    case KVI_TOOLS_MISTRAL:
    case KVI_TOOLS_GRANITE: return "]";
    case KVI_TOOLS_MISTRAL_ARGS: return "}";
    case KVI_TOOLS_DEEPSEEK_R1:
    case KVI_TOOLS_DEEPSEEK_V31: return "<｜tool▁calls▁end｜>";
    case KVI_TOOLS_COMMAND_R: return "<|END_ACTION|>";
    case KVI_TOOLS_KIMI_K2: return "<|tool_calls_section_end|>";
    case KVI_TOOLS_HARMONY: return "|>"; /* <|call|>, <|end|>, <|return|> */
    default: return NULL;
    }
}

/* Whether the held unit (n bytes held) is worth parsing again: a short one
 * always, a long one that waited once it grew by an eighth or its new bytes
 * hold the hint. Parsing later changes when a unit is decided, never how (what
 * a unit's text decides, more text keeps), and keeps a long call linear. */
static bool unit_due(const kvi_chat_output *o, size_t n, const char *hint, bool final)
{
    const state *st = &o->st;
    if (final || st->wait_n == 0 || st->wait_pos != st->pos || n < UNIT_SMALL) return true;
    if (n - st->wait_n >= st->wait_n / 8) return true;
    if (!hint) return false;
    size_t hl = strlen(hint), from = st->wait_n >= hl ? st->wait_n - hl + 1 : 0;
    const char *s = o->raw.p + st->pos;
    for (size_t i = from; i + hl <= n; i++)
        if (s[i] == hint[0] && !memcmp(s + i, hint, hl)) return true;
    return false;
}

/* Records that the unit at pos waits with n bytes held (0: decided). */
static void unit_wait(kvi_chat_output *o, size_t n)
{
    o->st.wait_pos = o->st.pos;
    o->st.wait_n = n;
}

/* A unit whose opening marker of `mlen` bytes follows `lead` bytes of
 * whitespace after a call at the held text's start: 1 when classified (taken
 * with the whitespace, or the whitespace and marker gone to content), 0 when
 * it waits. */
static int do_unit(kvi_chat_output *o, size_t lead, size_t mlen, bool final)
{
    size_t n, used, head = lead + mlen;
    const char *s = held(o, &n);
    callv cv = { 0 };
    if (!unit_due(o, n, unit_hint(o->p.tools), final)) return 0;
    int r = unit_parse(o->p.tools, s + head, n - head, final, &used, &cv);
    if (r == U_NOMEM) return KVI_E_NOMEM;
    unit_wait(o, r == U_MORE ? n : 0);
    if (r == U_MORE) return 0;
    if (r == U_OK) {
        r = take_calls(o, &cv, head + used);
        free(cv.v);
        return r ? r : 1;
    }
    free(cv.v);
    if (!head) {
        o->st.llama_checked = true;
        return 1;
    }
    if (emit(o, false, s, head, head)) return KVI_E_NOMEM;
    o->st.after_call = false;
    return 1;
}

/* Whether the text at s could still open a unit (Llama 3: a message starting with '{'). */
static bool llama_start(const kvi_chat_output *o)
{
    return o->p.tools == KVI_TOOLS_LLAMA3 && !o->st.llama_checked && o->st.content_n == 0 &&
           o->st.n_calls == 0;
}

/* One step of M_TEXT: 1 progress, 0 waits for more text, or an error. */
static int step_text(kvi_chat_output *o, bool final)
{
    size_t n;
    const char *s = held(o, &n);
    markers ms;
    text_markers(&o->p, &ms);
    if (llama_start(o)) {
        size_t w = ws_len(s, n);
        if (w == n && !final) return 0;
        if (w < n && s[w] == '{') return do_unit(o, 0, 0, final);
        o->st.llama_checked = true;
    }
    if (o->st.after_call) {
        /* whitespace between calls, or after the last one, is no content */
        size_t w = ws_len(s, n);
        int hit;
        if (w == n) {
            if (!final) return 0;
            o->st.pos += w;
            return w > 0;
        }
        size_t at = scan(s + w, n - w, &ms, final, &hit);
        if (at == 0 && hit < 0) return 0;
        if (at == 0 && ms.m[hit].act == A_UNIT) return do_unit(o, w, strlen(ms.m[hit].text), final);
        o->st.after_call = false;
        return 1;
    }
    int hit;
    size_t at = scan(s, n, &ms, final, &hit);
    size_t out = at == n && !final ? utf8_whole(s, n) : at;
    if (out && emit(o, false, s, out, out)) return KVI_E_NOMEM;
    if (hit < 0) return out > 0;
    if (out < at) return 1;
    const marker *m = &ms.m[hit];
    size_t ml = strlen(m->text);
    switch (m->act) {
    case A_UNIT: return do_unit(o, 0, ml, final);
    case A_THINK:
        o->st.mode = M_THINK;
        o->st.think_end = m->arg;
        o->st.skip_ws = true;
        o->st.pos += ml;
        return 1;
    default: o->st.pos += ml; return 1;
    }
}

/* One step of M_THINK. */
static int step_think(kvi_chat_output *o, bool final)
{
    size_t n;
    const char *s = held(o, &n);
    markers ms = { { { o->st.think_end, A_DROP, NULL } }, 1 };
    int hit;
    size_t at = scan(s, n, &ms, final, &hit);
    size_t out = at == n && !final ? utf8_whole(s, n) : at;
    if (out && emit(o, true, s, out, out)) return KVI_E_NOMEM;
    if (hit < 0) return out > 0;
    o->st.pos += strlen(o->st.think_end);
    o->st.mode = M_TEXT;
    o->st.skip_ws = true;
    return 1;
}

/* The value of `key` (up to whitespace or '<') in a Harmony header. */
static span header_word(span h, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl <= h.n; i++) {
        if (memcmp(h.s + i, key, kl)) continue;
        size_t j = i + kl;
        while (j < h.n && is_ws(h.s[j])) j++;
        size_t k = j;
        while (k < h.n && !is_ws(h.s[k]) && h.s[k] != '<') k++;
        return (span){ h.s + j, k - j };
    }
    return (span){ NULL, 0 };
}

/* A Harmony call message s[0 .. n), header h: the JSON body and its end marker. */
static int harmony_call(kvi_chat_output *o, const char *s, size_t n, size_t body, span to, bool final)
{
    static const char *const ends[] = { "<|call|>", "<|end|>", "<|return|>" };
    cur c = { s, n, body, final };
    span obj;
    callv cv = { 0 };
    if (!unit_due(o, n, unit_hint(KVI_TOOLS_HARMONY), final)) return 0;
    int r = c_object(&c, &obj);
    if (r == U_OK) {
        c_ws(&c);
        if (c_end(&c)) {
            r = final ? U_OK : U_MORE;
        } else {
            r = U_BAD;
            for (int k = 0; k < 3 && r == U_BAD; k++) r = c_lit(&c, ends[k]);
        }
    }
    if (r == U_MORE) {
        unit_wait(o, n);
        return 0;
    }
    if (r == U_OK) {
        sbuf a = { 0 };
        if (j_compact(&a, obj.s, obj.n) || callv_add(&cv, to.s + 10, to.n - 10, &a)) {
            free(a.p);
            callv_free(&cv, 0);
            free(cv.v);
            return KVI_E_NOMEM;
        }
        r = take_calls(o, &cv, c.i);
        free(cv.v);
        return r ? r : 1;
    }
    /* not a call: the whole message, up to its end marker, is content */
    int w;
    span skip;
    c.i = body;
    r = c_until(&c, ends, 3, SIZE_MAX / 2, &skip, &w);
    size_t upto = r == U_OK ? c.i + strlen(ends[w]) : n;
    if (r != U_OK && !final) {
        unit_wait(o, n);
        return 0;
    }
    return emit(o, false, s, upto, upto) ? KVI_E_NOMEM : 1;
}

/* A Harmony message whose header starts the held text. */
static int harmony_message(kvi_chat_output *o, size_t mlen, bool final)
{
    static const char *const msg[] = { "<|message|>" };
    size_t n;
    const char *s = held(o, &n);
    cur c = { s, n, 0, final };
    span h;
    int w;
    int r = c_until(&c, msg, 1, MAX_NAME, &h, &w);
    if (r == U_MORE) return 0;
    if (r == U_BAD) {
        /* no header after all: the marker (or the first byte) is content */
        size_t k = mlen ? mlen : 1;
        o->st.h_started = true;
        return emit(o, false, s, k, k) ? KVI_E_NOMEM : 1;
    }
    size_t body = c.i + strlen(msg[0]);
    span to = header_word(h, "to=");
    if (to.n > 10 && !memcmp(to.s, "functions.", 10)) return harmony_call(o, s, n, body, to, final);
    span ch = header_word(h, "<|channel|>");
    o->st.h_reasoning = span_is(ch, "analysis");
    o->st.mode = M_H_BODY;
    o->st.h_started = true;
    o->st.pos += body;
    return 1;
}

/* One step of M_H_OUT or M_H_BODY. */
static int step_harmony(kvi_chat_output *o, bool final)
{
    size_t n;
    const char *s = held(o, &n);
    bool body = o->st.mode == M_H_BODY;
    if (!body && !o->st.h_started) {
        /* the prompt's "<|start|>assistant" may be followed by " to=functions.N" */
        size_t w = ws_len(s, n), rest = n - w;
        if (rest < 3 && !final && !memcmp(s + w, "to=", rest)) return 0;
        if (rest >= 3 && !memcmp(s + w, "to=", 3)) return harmony_message(o, 0, final);
        o->st.h_started = true;
    }
    int hit;
    const markers *ms = body ? &harmony_body : &harmony_out;
    size_t at = scan(s, n, ms, final, &hit);
    size_t out = at == n && !final ? utf8_whole(s, n) : at;
    if (out && emit(o, body && o->st.h_reasoning, s, out, out)) return KVI_E_NOMEM;
    if (hit < 0) return out > 0;
    if (out < at) return 1;
    const marker *m = &ms->m[hit];
    o->st.h_started = true;
    if (m->act == A_H_START) {
        o->st.mode = M_H_OUT;
        return harmony_message(o, strlen(m->text), final);
    }
    o->st.pos += strlen(m->text);
    o->st.mode = M_H_OUT;
    return 1;
}

static int step(kvi_chat_output *o, bool final)
{
    switch (o->st.mode) {
    case M_THINK: return step_think(o, final);
    case M_H_OUT:
    case M_H_BODY: return step_harmony(o, final);
    default: return step_text(o, final);
    }
}

/* Steps until the text waits; on failure the state of before is restored. */
static int run(kvi_chat_output *o, bool final)
{
    state saved = o->st;
    int r;
    while ((r = step(o, final)) > 0) {}
    if (r < 0) {
        callv_free(&o->calls, saved.n_calls);
        o->st = saved;
        o->content.n = saved.content_n;
        o->reasoning.n = saved.reasoning_n;
        if (o->content.p) o->content.p[o->content.n] = 0;
        if (o->reasoning.p) o->reasoning.p[o->reasoning.n] = 0;
        return r;
    }
    return 0;
}

/* ---- the API ---- */

kvi_chat_output *kvi_chat_output_create(const kvi_chat_output_params *p)
{
    kvi_chat_output *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    if (p) o->p = *p;
    if ((unsigned)o->p.tools >= KVI_TOOLS_COUNT_) o->p.tools = KVI_TOOLS_NONE;
    if (o->p.tools == KVI_TOOLS_HARMONY) {
        o->st.mode = M_H_OUT;
    } else if (o->p.reasoning && o->p.in_reasoning) {
        o->st.mode = M_THINK;
        o->st.think_end = "</think>";
        o->st.skip_ws = true;
    }
    return o;
}

void kvi_chat_output_free(kvi_chat_output *o)
{
    if (!o) return;
    callv_free(&o->calls, 0);
    free(o->calls.v);
    free(o->raw.p);
    free(o->content.p);
    free(o->reasoning.p);
    free(o);
}

int kvi_chat_output_feed(kvi_chat_output *o, const char *text, size_t n)
{
    if (!o || (!text && n) || o->st.finished) return KVI_E_INVALID;
    if (o->st.pos > COMPACT_AT && o->st.pos * 2 > o->st.raw_n) {
        memmove(o->raw.p, o->raw.p + o->st.pos, o->st.raw_n - o->st.pos);
        o->st.raw_n -= o->st.pos;
        o->st.pos = 0;
        o->raw.n = o->st.raw_n;
    }
    size_t before = o->st.raw_n;
    if (sb_put(&o->raw, text, n)) return KVI_E_NOMEM;
    o->st.raw_n = o->raw.n;
    int r = run(o, false);
    if (r) o->raw.n = o->st.raw_n = before;
    return r;
}

int kvi_chat_output_finish(kvi_chat_output *o)
{
    if (!o) return KVI_E_INVALID;
    if (o->st.finished) return 0;
    int r = run(o, true);
    if (!r) o->st.finished = true;
    return r;
}

const char *kvi_chat_output_content(const kvi_chat_output *o, size_t *n)
{
    *n = o ? o->st.content_n : 0;
    return o && o->content.p ? o->content.p : "";
}

const char *kvi_chat_output_reasoning(const kvi_chat_output *o, size_t *n)
{
    *n = o ? o->st.reasoning_n : 0;
    return o && o->reasoning.p ? o->reasoning.p : "";
}

int kvi_chat_output_n_calls(const kvi_chat_output *o) { return o ? o->st.n_calls : 0; }

int kvi_chat_output_call(const kvi_chat_output *o, int i, const char **name, const char **arguments)
{
    if (!o || i < 0 || i >= o->st.n_calls) return KVI_E_INVALID;
    if (name) *name = o->calls.v[i].name;
    if (arguments) *arguments = o->calls.v[i].args;
    return 0;
}
