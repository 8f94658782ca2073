/*
 * tokenizer_int.h — the vocabulary shared by the tokenizer's files.
 *
 * A tok_tokenizer holds n_vocab tokens: text (NUL-terminated, in one arena),
 * score, type. `map` sends every token text to its id (the last id wins on a
 * duplicate text, as llama.cpp does). The loaders (GGUF, llama2.c, Hugging Face)
 * fill the vocabulary and call tok_finish(), which builds the map, the special
 * token list (control / user-defined / unknown ids, longest text first), the
 * byte-fallback table and the end-of-generation set (llama.cpp's rules: the EOS /
 * EOT / EOM / FIM ids and the tokens of known end texts). The encoders:
 *   - SPM (tokenizer_spm.c): score-ordered merges over UTF-8 characters, the
 *     llama.cpp algorithm; llama2.c's encode() is the same with a plain space.
 *   - BPE (tokenizer_bpe.c): rank-ordered merges (tok_merges) over the pieces the
 *     pre-tokenizer (tokenizer_pretok.c) cut, byte-level or with byte fallback.
 *   - WPM (tokenizer_wpm.c): WordPiece (BERT): normalised words, greedy longest
 *     match with wpm_first before a word's first piece and wpm_cont before the
 *     others ("▁" / "" in GGUF files, "" / "##" in tokenizer.json files).
 * Invariants: every id stored anywhere is in [0, n_vocab) or -1 for "none".
 */
#ifndef KVI_TOKENIZER_INTERNAL_H
#define KVI_TOKENIZER_INTERNAL_H

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_map.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tok_algo {
    TOK_ALGO_SPM = 0, /* SentencePiece BPE: merges by piece score */
    TOK_ALGO_BPE = 1, /* merges by rank from a merges list */
    TOK_ALGO_WPM = 2, /* WordPiece: greedy longest match per word (BERT) */
} tok_algo;

typedef struct tok_pretok tok_pretok; /* tokenizer_pretok.c */
typedef struct tok_norm tok_norm;     /* tokenizer_norm.c */

/* A growable list of token ids (the encoder's output). */
typedef struct tok_ids {
    int32_t *v; /* [cap] */
    size_t n, cap;
} tok_ids;

struct tok_tokenizer {
    tok_algo algo;
    int32_t n_vocab;
    char **text;        /* [n_vocab] NUL-terminated texts, pointers into text_arena */
    uint32_t *text_len; /* [n_vocab] bytes of each text */
    char *text_arena;   /* all texts back to back */
    float *score;       /* [n_vocab] SPM piece scores (0 when absent) */
    uint8_t *type;      /* [n_vocab] KVI_TOKEN_* */
    tok_map map;        /* text -> id */

    int32_t bos, eos, eot, eom, unk, pad; /* -1 when none */
    int32_t fim_pad, fim_rep, fim_sep;    /* fill-in-the-middle tokens that end generation, -1 when none */
    int32_t fim_pre, fim_suf, fim_mid;    /* fill-in-the-middle prefix / suffix / middle, -1 when none */
    bool eog_to_control; /* GGUF: tokens recognised by their text become control tokens (llama.cpp) */
    bool add_bos, add_eos;
    int32_t sep;  /* separator ([SEP]) ending a WordPiece text and a rerank pair's parts, -1 when none */
    bool add_sep; /* rerank pairs: [SEP] between query and document (llama.cpp's add_sep_token) */
    bool add_space_prefix;   /* SPM / HF: prepend one space to the text */
    bool escape_space;       /* SPM: spaces are written as U+2581 in pieces */
    bool byte_level;         /* BPE: GPT-2 byte-to-unicode mapping of the bytes */
    bool ignore_merges;      /* BPE (llama-bpe): a piece that is a token is kept whole */
    bool newline_runs_whole; /* BPE (gemma4): a piece of only newlines that is a token is kept whole */

    int32_t byte_id[256];      /* byte fallback token of each byte, -1 when none */
    char byte_enc[256][2];     /* byte level: UTF-8 of the code point standing for each byte */
    uint8_t byte_enc_len[256]; /* its length, 1 or 2 */
    int32_t *special;          /* [n_special] ids matched in text, longest text first */
    size_t n_special;
    int32_t *eog; /* [n_eog] end-of-generation ids */
    size_t n_eog;
    char *chat_template; /* NULL when absent */

    tok_norm *norm;        /* Hugging Face: normalizer of each raw fragment, NULL = escape_text's rules */
    bool special_leftmost; /* Hugging Face: added tokens matched leftmost-longest (else llama.cpp's
                            * longest-token-first over the whole text) */
    uint32_t
        special_first[257];   /* special_by_byte[special_first[b] .. special_first[b+1]) start with byte b */
    int32_t *special_by_byte; /* [n_special] the special list ordered by first byte, longest first */
    bool has_template;        /* Hugging Face post-processor: add tmpl_pre / tmpl_post instead of BOS/EOS */
    int32_t *tmpl_pre, *tmpl_post; /* [n_tmpl_pre], [n_tmpl_post] ids around the text */
    size_t n_tmpl_pre, n_tmpl_post;

    tok_map merges;     /* BPE: "left right" -> rank */
    char *merges_arena; /* the merge strings the keys of `merges` point into */
    tok_pretok *pretok; /* BPE: pre-tokenizer regexes, NULL = the whole text is one piece */

    /* WordPiece (tokenizer_wpm.c) */
    bool wpm_clean;         /* drop U+0000, U+FFFD and control characters */
    bool wpm_chinese;       /* every CJK ideograph is a word of its own */
    bool wpm_lower;         /* lower-case */
    bool wpm_strip_accents; /* NFD, then drop nonspacing marks (Mn) */
    bool wpm_hf;            /* Hugging Face: CJK from 0x2B820 (llama.cpp 0x2B920), controls before spaces */
    char wpm_first[8], wpm_cont[16]; /* prefixes of a word's first piece and of the others */
    uint8_t wpm_first_len, wpm_cont_len;
    uint32_t wpm_max_chars; /* a longer word (in code points) is one [UNK]; 0 = no limit */
    uint32_t max_token_len; /* longest token text in bytes (bounds the match) */
};

/* Allocates an empty tokenizer with n_vocab tokens (texts still unset). */
int tok_alloc(tok_tokenizer **out, int32_t n_vocab, kvi_error *err);
/* Sets all texts from one arena-building pass: texts[i] of lens[i] bytes. */
int tok_set_texts(tok_tokenizer *t, const char *const *texts, const size_t *lens, kvi_error *err);
/* Builds map, special list, byte table and EOG set once texts/types/ids are set. */
int tok_finish(tok_tokenizer *t, kvi_error *err);
int32_t tok_find(const tok_tokenizer *t, const char *s, size_t len); /* -1 when absent */

int tok_ids_push(tok_ids *ids, int32_t id);

/* Encoders of one raw-text fragment (no special tokens inside). 0 or KVI_E_NOMEM. */
int tok_spm_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out);
int tok_bpe_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out);
int tok_wpm_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out);
/* WordPiece defaults (BERT's normalisation, the given piece prefixes, max token length). */
void tok_wpm_init(tok_tokenizer *t, const char *first, const char *cont);
/* Unicode White_Space (Rust's char::is_whitespace, llama.cpp's whitespace flag). */
bool tok_cpt_is_space(uint32_t c);

/* BPE merges from "left right" strings, rank = index. */
int tok_merges_build(tok_tokenizer *t, const char *const *merges, const size_t *lens, size_t n,
                     kvi_error *err);

/* GPT-2 byte-to-unicode: the code point standing for byte b, and back (-1 if none). */
uint32_t tok_byte_to_cpt(uint8_t b);
void tok_byte_enc_init(tok_tokenizer *t); /* fills byte_enc / byte_enc_len */
int tok_cpt_to_byte(uint32_t cpt);

/* What llama.cpp sets with a tokenizer.ggml.pre name besides its regexes. */
enum {
    TOK_PRE_IGNORE_MERGES = 1, /* a piece that is a token is kept whole */
    TOK_PRE_ADD_BOS = 2,       /* add_bos defaults to true */
    TOK_PRE_RAW_BYTES = 4,     /* BPE over raw UTF-8 with spaces as U+2581 (no byte-level map) */
};
/* How a Split pre-tokenizer keeps its matches (Hugging Face's SplitDelimiterBehavior). */
enum { TOK_SPLIT_ISOLATED = 0, TOK_SPLIT_MERGED_PREVIOUS = 1, TOK_SPLIT_MERGED_NEXT = 2 };

/* Pre-tokenizer by llama.cpp's tokenizer.ggml.pre name (NULL or "": "default"; an
 * unknown name is KVI_E_UNSUPPORTED); *flags (may be NULL) receives its TOK_PRE_*. */
int tok_pretok_create_named(const char *pre_name, tok_pretok **out, unsigned *flags, kvi_error *err);
int tok_pretok_create(const char *pre_name, tok_pretok **out, kvi_error *err);
/* The i-th name the table knows, NULL past the last (for tests and listings). */
const char *tok_pretok_name_at(size_t i);
/* From explicit patterns (Hugging Face Split pre-tokenizers), applied in order;
 * behaviors[i] is TOK_SPLIT_* (NULL: all isolated). */
int tok_pretok_create_split(const char *const *patterns, const uint8_t *behaviors, size_t n, tok_pretok **out,
                            kvi_error *err);
int tok_pretok_create_patterns(const char *const *patterns, size_t n, tok_pretok **out, kvi_error *err);
void tok_pretok_free(tok_pretok *p);
/* Calls fn(piece) for each piece of text, in order. Returns 0, KVI_E_NOMEM or fn's
 * first non-zero result. */
typedef int (*tok_piece_fn)(void *ctx, const char *piece, size_t len);
int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_piece_fn fn, void *ctx);

/* Normalizers (tokenizer_norm.c): ops appended in the order they run. */
enum { TOK_NORM_PREPEND_ALWAYS = 0, TOK_NORM_PREPEND_FIRST = 1, TOK_NORM_PREFIX_SPACE = 2 };
int tok_norm_create(tok_norm **out);
void tok_norm_free(tok_norm *nm);
size_t tok_norm_count(const tok_norm *nm);
/* "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents"; others KVI_E_UNSUPPORTED. */
int tok_norm_add_form(tok_norm *nm, const char *form, kvi_error *err);
int tok_norm_add_strip(tok_norm *nm, bool left, bool right, kvi_error *err);
int tok_norm_add_replace(tok_norm *nm, const char *pattern, bool regex, const char *content, kvi_error *err);
/* `prefix` before the text: always (non-empty text), first fragment only, or (prefix " ")
 * when the text does not start with a space. */
int tok_norm_add_prepend(tok_norm *nm, const char *prefix, int when, kvi_error *err);
/* The normalized fragment into *out (malloc'd, NUL-terminated); `first`: it starts the text. */
int tok_norm_apply(const tok_norm *nm, const char *text, size_t len, bool first, char **out, size_t *out_len);

/* Length of the UTF-8 sequence that starts with byte c (1 for a stray byte). */
static inline size_t tok_utf8_len(unsigned char c)
{
    static const unsigned char lens[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return lens[c >> 4];
}

/* Bytes of the character at s (n bytes left): its UTF-8 length when the sequence is
 * complete (continuation bytes present), else 1, so a stray byte stands alone. */
static inline size_t tok_utf8_char(const char *s, size_t n)
{
    size_t l = tok_utf8_len((unsigned char)s[0]);
    if (l > n) return 1;
    for (size_t i = 1; i < l; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) return 1;
    return l;
}

#endif
