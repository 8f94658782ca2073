/*
 * tokenizer_wpm.c — WordPiece (BERT): one raw fragment -> token ids.
 *
 * As llama.cpp's llm_tokenizer_wpm and Hugging Face's BertNormalizer +
 * BertPreTokenizer + WordPiece model do it, code point by code point (utf8proc
 * for categories, decomposition and case):
 *   1. normalise: each code point is split into its canonical decomposition (NFD)
 *      when accents are stripped, and nonspacing marks (Mn) are dropped; U+0000,
 *      U+FFFD and control characters (C*, but not tab / newline / CR) are dropped
 *      when cleaning (before the white-space test for Hugging Face, after it for
 *      llama.cpp: VT, FF and NEL vanish or split words); the rest is lower-cased
 *      (simple mapping) when asked;
 *   2. cut words: at white space (Unicode White_Space); every punctuation
 *      character (P*), ASCII symbol (S* below 0x7F) and CJK ideograph is a word of
 *      its own; other symbols (emoji) stay inside their word;
 *   3. per word: a word longer than wpm_max_chars code points is [UNK]; else from
 *      its start, the longest token equal to prefix + the next bytes, where prefix
 *      is wpm_first for the first piece ("▁" in GGUF, "" in tokenizer.json) and
 *      wpm_cont for the others ("" in GGUF, "##" in tokenizer.json). If some
 *      position has no match the whole word becomes one [UNK] (t->unk; nothing
 *      when the vocabulary has none).
 * Invariants: the word buffer holds the current word's normalised UTF-8 only; the
 * piece buffer holds prefix + a slice of it, at most max_token_len bytes are
 * looked up. Invalid UTF-8 bytes are dropped (they cannot be in a valid token).
 */
#include <utf8proc.h>

#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

bool tok_cpt_is_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static void set_prefix(char *dst, size_t cap, uint8_t *len, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
    *len = (uint8_t)n;
}

void tok_wpm_init(tok_tokenizer *t, const char *first, const char *cont)
{
    t->algo = TOK_ALGO_WPM;
    t->wpm_clean = t->wpm_chinese = t->wpm_lower = t->wpm_strip_accents = true;
    set_prefix(t->wpm_first, sizeof t->wpm_first, &t->wpm_first_len, first);
    set_prefix(t->wpm_cont, sizeof t->wpm_cont, &t->wpm_cont_len, cont);
    uint32_t m = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->text_len[i] > m) m = t->text_len[i];
    t->max_token_len = m;
}

/* CJK Unified Ideographs and their extensions and compatibility blocks, as BERT's
 * _is_chinese_char; the Rust tokenizers crate (and llama.cpp after it) starts the
 * fifth range at 0x2B920 instead of 0x2B820. */
static bool is_cjk(uint32_t c, bool hf)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= (hf ? 0x2B820u : 0x2B920u) && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) ||
           (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool is_control(utf8proc_category_t cat)
{
    return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
           cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN;
}

static bool is_punct(utf8proc_category_t cat)
{
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

static bool is_symbol(utf8proc_category_t cat)
{
    return cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO;
}

/* A growable byte buffer (the current word, the piece being looked up). */
typedef struct wbuf {
    char *p;
    size_t n, cap;
} wbuf;

static int wbuf_reserve(wbuf *b, size_t extra)
{
    if (extra > SIZE_MAX / 4 - b->n) return KVI_E_NOMEM;
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) return KVI_E_NOMEM;
    b->p = np;
    b->cap = cap;
    return 0;
}

typedef struct wpm_state {
    const tok_tokenizer *t;
    tok_ids *out;
    wbuf word;      /* the current word, normalised UTF-8 */
    size_t n_chars; /* its code points */
    wbuf piece;     /* prefix + slice being looked up */
} wpm_state;

static int push_unk(wpm_state *s) { return s->t->unk >= 0 ? tok_ids_push(s->out, s->t->unk) : 0; }

/* The id of the longest token prefix + w[start..end) over end, -1 when none;
 * *end_out receives that end. `allow_empty`: prefix alone may match. */
static int32_t longest(wpm_state *s, size_t start, const char *prefix, size_t plen, bool allow_empty,
                       size_t *end_out)
{
    const tok_tokenizer *t = s->t;
    const char *w = s->word.p;
    size_t n = s->word.n;
    if (plen > t->max_token_len) return -1;
    size_t lim = t->max_token_len - plen, end = n - start > lim ? start + lim : n;
    while (end > start && (end < n && ((unsigned char)w[end] & 0xC0) == 0x80)) end--;
    memcpy(s->piece.p, prefix, plen);
    for (; end > start || (allow_empty && end == start); end--) {
        if (end < n && ((unsigned char)w[end] & 0xC0) == 0x80) continue; /* inside a character */
        memcpy(s->piece.p + plen, w + start, end - start);
        int32_t id = tok_find(t, s->piece.p, plen + (end - start));
        if (id >= 0) {
            *end_out = end;
            return id;
        }
        if (end == start) break;
    }
    return -1;
}

/* The pieces of the current word (then empties it). */
static int flush_word(wpm_state *s)
{
    const tok_tokenizer *t = s->t;
    if (s->word.n == 0) return 0;
    size_t n = s->word.n, mark = s->out->n;
    int rc = 0;
    if (t->wpm_max_chars && s->n_chars > t->wpm_max_chars) {
        rc = push_unk(s);
        s->word.n = s->n_chars = 0;
        return rc;
    }
    s->piece.n = 0;
    if (wbuf_reserve(&s->piece, n + sizeof t->wpm_cont + sizeof t->wpm_first)) return KVI_E_NOMEM;
    for (size_t start = 0; start < n && rc == 0;) {
        bool first = start == 0;
        size_t end = start;
        int32_t id = first ? longest(s, start, t->wpm_first, t->wpm_first_len, t->wpm_first_len > 0, &end)
                           : longest(s, start, t->wpm_cont, t->wpm_cont_len, false, &end);
        if (id < 0) { /* no piece here: the whole word is unknown */
            s->out->n = mark;
            rc = push_unk(s);
            break;
        }
        rc = tok_ids_push(s->out, id);
        start = end;
    }
    s->word.n = s->n_chars = 0;
    return rc;
}

static int add_char(wpm_state *s, utf8proc_int32_t c)
{
    if (wbuf_reserve(&s->word, 4)) return KVI_E_NOMEM;
    s->word.n += (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)s->word.p + s->word.n);
    s->n_chars++;
    return 0;
}

/* One code point of the normalised text: a word break, a word of its own, or part of the word. */
static int feed(wpm_state *s, utf8proc_int32_t c)
{
    const tok_tokenizer *t = s->t;
    utf8proc_category_t cat = utf8proc_category(c);
    /* Hugging Face drops control characters before it looks for white space (so VT,
     * FF and NEL vanish), llama.cpp the other way round (they split words) */
    bool drop =
        t->wpm_clean && (c == 0 || c == 0xFFFD || (is_control(cat) && c != '\t' && c != '\n' && c != '\r'));
    if (t->wpm_hf && drop) return 0;
    if (tok_cpt_is_space((uint32_t)c)) return flush_word(s);
    if (drop) return 0;
    if (t->wpm_strip_accents && cat == UTF8PROC_CATEGORY_MN) return 0;
    utf8proc_int32_t lc = t->wpm_lower ? utf8proc_tolower(c) : c;
    if (is_punct(cat) || (c < 0x7F && is_symbol(cat)) || (t->wpm_chinese && is_cjk((uint32_t)c, t->wpm_hf))) {
        int rc = flush_word(s);
        if (rc == 0) rc = add_char(s, lc);
        return rc ? rc : flush_word(s);
    }
    return add_char(s, lc);
}

int tok_wpm_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
    wpm_state s = { .t = t, .out = out };
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &c);
        if (l <= 0) { /* an invalid byte: dropped */
            i++;
            continue;
        }
        i += (size_t)l;
        if (!t->wpm_strip_accents) {
            rc = feed(&s, c);
            continue;
        }
        utf8proc_int32_t dec[8];
        int bound = 0;
        utf8proc_ssize_t nd = utf8proc_decompose_char(c, dec, 8, UTF8PROC_DECOMPOSE, &bound);
        if (nd < 0 || nd > 8) { /* no canonical decomposition to use */
            dec[0] = c;
            nd = 1;
        }
        for (utf8proc_ssize_t k = 0; k < nd && rc == 0; k++) rc = feed(&s, dec[k]);
    }
    if (rc == 0) rc = flush_word(&s);
    free(s.word.p);
    free(s.piece.p);
    return rc;
}
