/*
 * tokenizer_norm.c — Hugging Face normalizers: text -> normalized text, per fragment.
 *
 * A tok_norm is an ordered list of operations (tok_norm_op) read from a
 * tokenizer.json "normalizer" (Sequence flattened), plus the steps of the
 * pre-tokenizer that rewrite text rather than cut it (Metaspace's replacement and
 * prefix, ByteLevel's add_prefix_space). tok_norm_apply runs them in order on one
 * raw fragment (the text between added tokens), each op reading the previous op's
 * output from one buffer and writing the other:
 *   - NFC / NFD / NFKC / NFKD by utf8proc (Unicode normalization forms),
 *   - Lowercase (Unicode simple lower case, U+0130 to "i" + U+0307 as Rust does),
 *   - StripAccents (drops nonspacing marks, Mn), Strip (whitespace at either end),
 *   - Replace (every non-overlapping match of a literal or a PCRE2 regex, left to
 *     right), Prepend (before a non-empty text), the Metaspace prefix (first
 *     fragment only, or every one), ByteLevel's prefix space (when the text does
 *     not start with a space).
 * Invalid UTF-8 never fails: the Unicode steps leave its bytes as they are and
 * normalize the valid runs around them. Invariant: the output is a fresh buffer the
 * caller frees; the ops only read their own strings.
 */
#include "tokenizer/tokenizer_regex.h"
#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

typedef enum norm_kind {
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_LOWER,
    NORM_STRIP_ACCENTS,
    NORM_STRIP,
    NORM_REPLACE,       /* literal a -> b */
    NORM_REPLACE_RE,    /* regex re -> b */
    NORM_PREPEND,       /* a before a non-empty text */
    NORM_PREPEND_FIRST, /* a before the first fragment of the text */
    NORM_PREFIX_SPACE,  /* " " before a text that does not start with one */
} norm_kind;

typedef struct tok_norm_op {
    norm_kind kind;
    char *a, *b; /* NUL-terminated strings (pattern / content / prefix), may be NULL */
    size_t alen, blen;
    pcre2_code *re;   /* NORM_REPLACE_RE */
    bool left, right; /* NORM_STRIP */
} tok_norm_op;

struct tok_norm {
    tok_norm_op *ops; /* [n] */
    size_t n, cap;
};

/* A growable byte buffer. */
typedef struct nbuf {
    char *p;
    size_t n, cap;
} nbuf;

static int nbuf_put(nbuf *b, const void *s, size_t n)
{
    if (n > SIZE_MAX / 2 - b->n) return KVI_E_NOMEM;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) return KVI_E_NOMEM;
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tok_norm_create(tok_norm **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : KVI_E_NOMEM;
}

void tok_norm_free(tok_norm *nm)
{
    if (!nm) return;
    for (size_t i = 0; i < nm->n; i++) {
        free(nm->ops[i].a);
        free(nm->ops[i].b);
        pcre2_code_free(nm->ops[i].re);
    }
    free(nm->ops);
    free(nm);
}

size_t tok_norm_count(const tok_norm *nm) { return nm ? nm->n : 0; }

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        if (n) memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static tok_norm_op *push_op(tok_norm *nm, norm_kind kind)
{
    if (nm->n == nm->cap) {
        size_t cap = nm->cap ? nm->cap * 2 : 8;
        tok_norm_op *nv = realloc(nm->ops, cap * sizeof *nv);
        if (!nv) return NULL;
        nm->ops = nv;
        nm->cap = cap;
    }
    tok_norm_op *op = &nm->ops[nm->n++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

int tok_norm_add_form(tok_norm *nm, const char *form, kvi_error *err)
{
    static const struct {
        const char *name;
        norm_kind kind;
    } forms[] = {
        { "NFC", NORM_NFC },   { "NFD", NORM_NFD },         { "NFKC", NORM_NFKC },
        { "NFKD", NORM_NFKD }, { "Lowercase", NORM_LOWER }, { "StripAccents", NORM_STRIP_ACCENTS }
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (strcmp(form, forms[i].name) == 0)
            return push_op(nm, forms[i].kind) ? 0 : err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    return err_set(err, KVI_E_UNSUPPORTED, "tokenizer.json: normalizer \"%.40s\" is not supported", form);
}

int tok_norm_add_strip(tok_norm *nm, bool left, bool right, kvi_error *err)
{
    tok_norm_op *op = push_op(nm, NORM_STRIP);
    if (!op) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    op->left = left;
    op->right = right;
    return 0;
}

int tok_norm_add_replace(tok_norm *nm, const char *pattern, bool regex, const char *content, kvi_error *err)
{
    tok_norm_op *op = push_op(nm, regex ? NORM_REPLACE_RE : NORM_REPLACE);
    if (!op) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    op->alen = strlen(pattern);
    op->blen = strlen(content);
    op->a = dup_n(pattern, op->alen);
    op->b = dup_n(content, op->blen);
    if (!op->a || !op->b) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    if (!regex && op->alen == 0)
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: a Replace normalizer with an empty pattern");
    if (regex) {
        int ecode;
        PCRE2_SIZE eoff;
        bool nomem;
        op->re = tok_regex_compile(pattern, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ecode, &eoff,
                                   &nomem);
        if (!op->re && nomem) return err_set(err, KVI_E_NOMEM, "tokenizer.json: out of memory for a regex");
        if (!op->re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ecode, msg, sizeof msg);
            return err_set(err, KVI_E_FORMAT, "tokenizer.json: Replace regex at offset %zu: %s", (size_t)eoff,
                           (const char *)msg);
        }
    }
    return 0;
}

int tok_norm_add_prepend(tok_norm *nm, const char *prefix, int when, kvi_error *err)
{
    norm_kind k = when == TOK_NORM_PREPEND_FIRST  ? NORM_PREPEND_FIRST
                  : when == TOK_NORM_PREFIX_SPACE ? NORM_PREFIX_SPACE
                                                  : NORM_PREPEND;
    tok_norm_op *op = push_op(nm, k);
    if (!op) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    op->alen = strlen(prefix);
    if (!(op->a = dup_n(prefix, op->alen))) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    return 0;
}

/* ---- applying ------------------------------------------------------------ */

/* Length of the valid UTF-8 run at s (0 when s starts with an invalid byte). */
static size_t valid_run(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (l <= 0) break;
        i += (size_t)l;
    }
    return i;
}

/* Runs fn over each valid UTF-8 run of [s, s+n) into out; invalid bytes are copied. */
typedef int (*run_fn)(const tok_norm_op *op, const char *s, size_t n, nbuf *out);

static int each_valid_run(const tok_norm_op *op, const char *s, size_t n, nbuf *out, run_fn fn)
{
    size_t i = 0;
    while (i < n) {
        size_t r = valid_run(s + i, n - i);
        if (r > 0) {
            int rc = fn(op, s + i, r, out);
            if (rc) return rc;
            i += r;
        } else {
            if (nbuf_put(out, s + i, 1)) return KVI_E_NOMEM;
            i++;
        }
    }
    return 0;
}

static int run_form(const tok_norm_op *op, const char *s, size_t n, nbuf *out)
{
    int opts = UTF8PROC_STABLE;
    switch (op->kind) {
    case NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
    case NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)opts);
    if (r < 0) {
        free(dst);
        return r == UTF8PROC_ERROR_NOMEM ? KVI_E_NOMEM : nbuf_put(out, s, n); /* left as it is */
    }
    int rc = nbuf_put(out, dst, (size_t)r);
    free(dst);
    return rc;
}

static int put_cpt(nbuf *out, utf8proc_int32_t c)
{
    utf8proc_uint8_t enc[4];
    utf8proc_ssize_t l = utf8proc_encode_char(c, enc);
    return nbuf_put(out, enc, (size_t)l);
}

static int run_chars(const tok_norm_op *op, const char *s, size_t n, nbuf *out)
{
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        i += (size_t)l;
        int rc = 0;
        if (op->kind == NORM_STRIP_ACCENTS) {
            if (utf8proc_category(c) != UTF8PROC_CATEGORY_MN) rc = put_cpt(out, c);
        } else if (c == 0x130) { /* the one full lowering of more than one code point */
            rc = nbuf_put(out, "i\xCC\x87", 3);
        } else {
            rc = put_cpt(out, utf8proc_tolower(c));
        }
        if (rc) return rc;
    }
    return 0;
}

static bool is_space_at(const char *s, size_t n, size_t *len)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c);
    if (l <= 0) return false;
    *len = (size_t)l;
    return tok_cpt_is_space((uint32_t)c); /* Rust's char::is_whitespace */
}

static int apply_strip(const tok_norm_op *op, const char *s, size_t n, nbuf *out)
{
    size_t a = 0, b = n, l;
    while (op->left && a < b && is_space_at(s + a, b - a, &l)) a += l;
    while (op->right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        if (!is_space_at(s + k, b - k, &l) || k + l != b) break;
        b = k;
    }
    return nbuf_put(out, s + a, b - a);
}

static int apply_replace(const tok_norm_op *op, const char *s, size_t n, nbuf *out)
{
    size_t i = 0;
    while (i < n) {
        const char *hit = NULL;
        for (size_t k = i; k + op->alen <= n; k++)
            if (s[k] == op->a[0] && memcmp(s + k, op->a, op->alen) == 0) {
                hit = s + k;
                break;
            }
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if (nbuf_put(out, s + i, at - i) || nbuf_put(out, op->b, op->blen)) return KVI_E_NOMEM;
        i = at + op->alen;
    }
    return nbuf_put(out, s + i, n - i);
}

static int apply_replace_re(const tok_norm_op *op, const char *s, size_t n, nbuf *out)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(op->re, NULL);
    if (!md) return KVI_E_NOMEM;
    size_t i = 0, pos = 0;
    int rc = 0;
    while (pos <= n && rc == 0) {
        int m = pcre2_match(op->re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            rc = tok_regex_error(m);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* an empty match replaces nothing */
            if (ms >= n) break;
            pos = ms + tok_utf8_char(s + ms, n - ms);
            continue;
        }
        if (nbuf_put(out, s + i, ms - i) || nbuf_put(out, op->b, op->blen)) rc = KVI_E_NOMEM;
        i = pos = me;
    }
    pcre2_match_data_free(md);
    return rc ? rc : nbuf_put(out, s + i, n - i);
}

static int apply_op(const tok_norm_op *op, const char *s, size_t n, bool first, nbuf *out)
{
    switch (op->kind) {
    case NORM_NFC:
    case NORM_NFD:
    case NORM_NFKC:
    case NORM_NFKD: return each_valid_run(op, s, n, out, run_form);
    case NORM_LOWER:
    case NORM_STRIP_ACCENTS: return each_valid_run(op, s, n, out, run_chars);
    case NORM_STRIP: return apply_strip(op, s, n, out);
    case NORM_REPLACE: return apply_replace(op, s, n, out);
    case NORM_REPLACE_RE: return apply_replace_re(op, s, n, out);
    case NORM_PREPEND:
        if (n > 0 && nbuf_put(out, op->a, op->alen)) return KVI_E_NOMEM;
        return nbuf_put(out, s, n);
    case NORM_PREPEND_FIRST:
        if (n > 0 && first && nbuf_put(out, op->a, op->alen)) return KVI_E_NOMEM;
        return nbuf_put(out, s, n);
    case NORM_PREFIX_SPACE:
        if (n > 0 && s[0] != ' ' && nbuf_put(out, " ", 1)) return KVI_E_NOMEM;
        return nbuf_put(out, s, n);
    }
    return KVI_E_INVALID;
}

int tok_norm_apply(const tok_norm *nm, const char *text, size_t len, bool first, char **out, size_t *out_len)
{
    nbuf a = { 0 }, b = { 0 };
    int rc = nbuf_put(&a, text, len);
    for (size_t i = 0; rc == 0 && i < nm->n; i++) {
        b.n = 0;
        rc = nbuf_put(&b, "", 0);
        if (rc == 0) rc = apply_op(&nm->ops[i], a.p, a.n, first, &b);
        nbuf t = a;
        a = b;
        b = t;
    }
    free(b.p);
    if (rc) {
        free(a.p);
        return rc;
    }
    *out = a.p;
    *out_len = a.n;
    return 0;
}
