/*
 * tokenizer_pretok.c — BPE pre-tokenization: cutting text into pieces by regex.
 *
 * A tok_pretok is an ordered list of compiled PCRE2 patterns (UTF + UCP, JIT when
 * available, PCRE2_MATCH_INVALID_UTF so that invalid UTF-8 never fails a match: its
 * bytes simply match nothing and end up in the gaps). Splitting applies pattern 0
 * to the whole text, then pattern 1 to each piece of that, and so on, as llama.cpp
 * does; at every stage the matches and the unmatched gaps between them are both
 * kept as pieces, in order, so the pieces always tile the text exactly.
 * The patterns per tokenizer.ggml.pre name are those of llama.cpp's llama-vocab.cpp
 * (the originals from each model's tokenizer.json, case-insensitive groups spelled
 * out); they are data here, run by PCRE2.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/error.h"
#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

struct tok_pretok {
    pcre2_code **re; /* [n] compiled patterns, applied in order */
    size_t n;
};

/* GPT-2's pattern, with the final \s+ alternative the original has. */
#define PAT_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define PAT_LLAMA3                                                                                        \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_QWEN2                                                                                    \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const pats_gpt2[] = { PAT_GPT2 };
static const char *const pats_llama3[] = { PAT_LLAMA3 };
static const char *const pats_qwen2[] = { PAT_QWEN2 };
static const char *const pats_falcon[] = { "[\\p{P}\\$\\+<=>\\^~\\|`]+", PAT_GPT2, "[0-9][0-9][0-9]" };
static const char *const pats_starcoder[] = { "\\p{N}", PAT_GPT2 };
static const char *const pats_deepseek_coder[] = { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                                   "[一-龥ࠀ-一가-퟿]+", "\\p{N}" };
static const char *const pats_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-"
    "Ἕἠ-ὅὈ-Ὅὐ-"
    "ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-"
    "ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-"
    "ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct pre_entry {
    const char *name;
    const char *const *pats;
    size_t n;
} pre_entry;

static const pre_entry pre_table[] = {
    { "gpt-2", pats_gpt2, N_OF(pats_gpt2) },
    { "mpt", pats_gpt2, N_OF(pats_gpt2) },
    { "olmo", pats_gpt2, N_OF(pats_gpt2) },
    { "jais", pats_gpt2, N_OF(pats_gpt2) },
    { "llama-bpe", pats_llama3, N_OF(pats_llama3) },
    { "llama3", pats_llama3, N_OF(pats_llama3) },
    { "dbrx", pats_llama3, N_OF(pats_llama3) },
    { "smaug-bpe", pats_llama3, N_OF(pats_llama3) },
    { "qwen2", pats_qwen2, N_OF(pats_qwen2) },
    { "stablelm2", pats_qwen2, N_OF(pats_qwen2) },
    { "falcon", pats_falcon, N_OF(pats_falcon) },
    { "starcoder", pats_starcoder, N_OF(pats_starcoder) },
    { "refact", pats_starcoder, N_OF(pats_starcoder) },
    { "command-r", pats_starcoder, N_OF(pats_starcoder) },
    { "smollm", pats_starcoder, N_OF(pats_starcoder) },
    { "codeshell", pats_starcoder, N_OF(pats_starcoder) },
    { "deepseek-coder", pats_deepseek_coder, N_OF(pats_deepseek_coder) },
    { "deepseek-llm", pats_deepseek_llm, N_OF(pats_deepseek_llm) },
};

int tok_pretok_create_patterns(const char *const *patterns, size_t n, tok_pretok **out, kvi_error *err)
{
    *out = NULL;
    tok_pretok *p = calloc(1, sizeof *p);
    if (!p || !(p->re = calloc(n ? n : 1, sizeof *p->re))) {
        free(p);
        return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory for the pre-tokenizer");
    }
    for (size_t i = 0; i < n; i++) {
        int ecode;
        PCRE2_SIZE eoff;
        p->re[i] = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                                 &ecode, &eoff, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ecode, msg, sizeof msg);
            p->n = i;
            tok_pretok_free(p);
            return err_set(err, KVI_E_FORMAT, "tokenizer: pre-tokenizer regex %zu at offset %zu: %s", i,
                           (size_t)eoff, (const char *)msg);
        }
        pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE); /* optional: interpreted if it fails */
        p->n = i + 1;
    }
    *out = p;
    return 0;
}

int tok_pretok_create(const char *pre_name, tok_pretok **out, kvi_error *err)
{
    /* No name or "default": GPT-2's split. An unknown name is refused, as llama.cpp
     * does: a wrong pre-split gives plausible-looking but wrong ids, silently. */
    const pre_entry *e = NULL;
    if (!pre_name || !pre_name[0] || strcmp(pre_name, "default") == 0) e = &pre_table[0];
    for (size_t i = 0; !e && i < N_OF(pre_table); i++)
        if (strcmp(pre_name, pre_table[i].name) == 0) e = &pre_table[i];
    if (!e) {
        *out = NULL;
        return err_set(err, KVI_E_UNSUPPORTED,
                       "tokenizer: pre-tokenizer '%.64s' (tokenizer.ggml.pre) is not supported", pre_name);
    }
    return tok_pretok_create_patterns(e->pats, e->n, out, err);
}

void tok_pretok_free(tok_pretok *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p->re);
    free(p);
}

/* Piece boundaries: a growable list of offsets into the text (ends of pieces). */
typedef struct cuts {
    size_t *v; /* [cap] piece end offsets, increasing, last == text length */
    size_t n, cap;
} cuts;

static int cuts_push(cuts *c, size_t end)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        size_t *nv = realloc(c->v, cap * sizeof *nv);
        if (!nv) return KVI_E_NOMEM;
        c->v = nv;
        c->cap = cap;
    }
    c->v[c->n++] = end;
    return 0;
}

/* Splits [start, end) by `re` into matches and gaps, appending their ends to out. */
static int split_one(const pcre2_code *re, pcre2_match_data *md, const char *text, size_t start, size_t end,
                     cuts *out)
{
    size_t pos = start, last = start;
    while (pos < end) {
        int rc = pcre2_match(re, (PCRE2_SPTR)text, end, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return KVI_E_INVALID;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: step over one character */
            size_t step = tok_utf8_len((unsigned char)text[ms < end ? ms : end - 1]);
            pos = ms + (step ? step : 1);
            if (pos > end) pos = end;
            continue;
        }
        if (ms > last && cuts_push(out, ms) != 0) return KVI_E_NOMEM;
        if (cuts_push(out, me) != 0) return KVI_E_NOMEM;
        last = pos = me;
    }
    if (end > last && cuts_push(out, end) != 0) return KVI_E_NOMEM;
    return 0;
}

int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_piece_fn fn, void *ctx)
{
    if (len == 0) return 0;
    cuts a = { 0 }, b = { 0 };
    int rc = cuts_push(&a, len);
    pcre2_match_data *md = NULL;
    for (size_t k = 0; rc == 0 && k < p->n; k++) {
        pcre2_match_data_free(md);
        md = pcre2_match_data_create_from_pattern(p->re[k], NULL);
        if (!md) {
            rc = KVI_E_NOMEM;
            break;
        }
        b.n = 0;
        size_t start = 0;
        for (size_t i = 0; rc == 0 && i < a.n; i++) {
            rc = split_one(p->re[k], md, text, start, a.v[i], &b);
            start = a.v[i];
        }
        cuts tmp = a;
        a = b;
        b = tmp;
    }
    size_t start = 0;
    for (size_t i = 0; rc == 0 && i < a.n; i++) {
        rc = fn(ctx, text + start, a.v[i] - start);
        start = a.v[i];
    }
    pcre2_match_data_free(md);
    free(a.v);
    free(b.v);
    return rc;
}
