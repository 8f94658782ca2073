/*
 * tokenizer.c — the vocabulary, special tokens, encode dispatch and decoding.
 *
 * Data (struct tok_tokenizer in tokenizer_int.h): n_vocab texts in one arena,
 * scores, types, a text -> id map. Encoding first cuts the text into fragments:
 * every occurrence of a special token's text (control and unknown tokens only when
 * parse_special; user-defined tokens always, as llama.cpp and Hugging Face do)
 * becomes its id, tokens taken longest text first over the whole text (llama.cpp)
 * or leftmost-longest (Hugging Face's added vocabulary); the raw text between goes,
 * through the normalizer when the tokenizer.json has one, to the SPM or BPE encoder.
 * SPM adds the dummy-prefix space to a raw fragment that starts the text or follows
 * a special token; WordPiece (tokenizer_wpm.c) normalises on its own. add_special
 * adds the post-processor's template ids around the text when there is one, else
 * BOS / EOS as add_bos / add_eos say; a WordPiece text without a template gets
 * [BOS] ... [SEP] as llama.cpp builds it. tokenizer_encode_pair builds a rerank
 * pair from two such encodings.
 * Decoding maps each id to its bytes: U+2581 -> space and <0xXX> -> byte for SPM
 * and GGUF WordPiece, the reverse byte-to-unicode map for byte-level BPE, "##s" ->
 * "s" and "the" -> " the" for tokenizer.json WordPiece, control tokens only when
 * render_special.
 */
#include "base/error.h"
#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- construction -------------------------------------------------------- */

int tok_alloc(tok_tokenizer **out, int32_t n_vocab, kvi_error *err)
{
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > (1 << 28))
        return err_set(err, KVI_E_FORMAT, "tokenizer: vocabulary size %d out of range", (int)n_vocab);
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    t->n_vocab = n_vocab;
    t->text = calloc((size_t)n_vocab, sizeof *t->text);
    t->text_len = calloc((size_t)n_vocab, sizeof *t->text_len);
    t->score = calloc((size_t)n_vocab, sizeof *t->score);
    t->type = malloc((size_t)n_vocab);
    if (!t->text || !t->text_len || !t->score || !t->type) {
        tokenizer_free(t);
        return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory for %d tokens", (int)n_vocab);
    }
    memset(t->type, KVI_TOKEN_NORMAL, (size_t)n_vocab);
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = t->sep = -1;
    t->fim_pad = t->fim_rep = t->fim_sep = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    tok_byte_enc_init(t);
    *out = t;
    return 0;
}

int tok_set_texts(tok_tokenizer *t, const char *const *texts, const size_t *lens, kvi_error *err)
{
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (lens[i] > UINT32_MAX / 2 || total > SIZE_MAX / 2)
            return err_set(err, KVI_E_FORMAT, "tokenizer: token %d text too long", (int)i);
        total += lens[i] + 1;
    }
    free(t->text_arena);
    t->text_arena = malloc(total ? total : 1);
    if (!t->text_arena) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory for texts");
    char *p = t->text_arena;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (lens[i]) memcpy(p, texts[i], lens[i]);
        p[lens[i]] = 0;
        t->text[i] = p;
        t->text_len[i] = (uint32_t)lens[i];
        p += lens[i] + 1;
    }
    tok_map_free(&t->map);
    if (tok_map_init(&t->map, (size_t)t->n_vocab) != 0)
        return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory for the token map");
    for (int32_t i = 0; i < t->n_vocab; i++) tok_map_put(&t->map, t->text[i], t->text_len[i], i, true);
    return 0;
}

int32_t tok_find(const tok_tokenizer *t, const char *s, size_t len) { return tok_map_get(&t->map, s, len); }

static bool is_special_type(uint8_t ty)
{
    return ty == KVI_TOKEN_CONTROL || ty == KVI_TOKEN_USER_DEFINED || ty == KVI_TOKEN_UNKNOWN;
}

/* (text length, id) pairs sort longest text first, then by id: no shared state. */
typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_special(const void *a, const void *b)
{
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static int eog_add(tok_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab) return 0;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 0;
    int32_t *nv = realloc(t->eog, (t->n_eog + 1) * sizeof *nv);
    if (!nv) return KVI_E_NOMEM;
    t->eog = nv;
    t->eog[t->n_eog++] = id;
    return 0;
}

static void eog_remove(tok_tokenizer *t, int32_t id)
{
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) {
            memmove(t->eog + i, t->eog + i + 1, (t->n_eog - i - 1) * sizeof *t->eog);
            t->n_eog--;
            return;
        }
}

/* The id of the first of `texts` in the vocabulary, -1 when none is. */
static int32_t find_first(const tok_tokenizer *t, const char *const *texts, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        int32_t id = tok_find(t, texts[k], strlen(texts[k]));
        if (id >= 0) return id;
    }
    return -1;
}

/* A token llama.cpp's loader recognises by its text: made a control token (GGUF). */
static void mark_control(tok_tokenizer *t, int32_t id)
{
    if (id >= 0 && t->eog_to_control) t->type[id] = KVI_TOKEN_CONTROL;
}

#define N_TEXTS(a) (sizeof(a) / sizeof((a)[0]))

/* The texts by which llama.cpp's vocabulary loader (llama-vocab.cpp) recognises an
 * end-of-turn token when no tokenizer.ggml.eot_token_id names one ... */
static const char *const eot_texts[] = { "<|eot_id|>",
                                         "<|im_end|>",
                                         "<|end|>",
                                         "<end_of_turn>",
                                         "<|endoftext|>",
                                         "<|end_of_text|>",
                                         "<EOT>",
                                         "_<EOT>",
                                         "[EOT]",
                                         "<｜end▁of▁sentence｜>",
                                         "<end_of_utterance>" };
/* ... the fill-in-the-middle pad / repository / file-separator tokens, which end
 * generation too ... */
static const char *const fim_pad_texts[] = { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]" };
static const char *const fim_rep_texts[] = { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                             "<reponame>" };
static const char *const fim_sep_texts[] = { "<|file_sep|>" };
/* ... and, not ending generation, the prefix / suffix / middle tokens. */
static const char *const fim_pre_texts[] = { "<|fim_prefix|>", "<fim-prefix>",    "<fim_prefix>",
                                             "<PRE>",          "<|code_prefix|>", "<|prefix|>" };
static const char *const fim_suf_texts[] = { "<|fim_suffix|>", "<fim-suffix>",    "<fim_suffix>",
                                             "<SUF>",          "<|code_suffix|>", "<|suffix|>" };
static const char *const fim_mid_texts[] = { "<|fim_middle|>", "<fim-middle>",    "<fim_middle>",
                                             "<MID>",          "<|code_middle|>", "<|middle|>" };
/* ... and every token with one of these texts. */
static const char *const eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
};

/* The end-of-generation set as llama.cpp derives it: EOT / EOM found by text when
 * the metadata names none, the FIM pad/repo/separator tokens, every token of
 * eog_texts, EOS, EOT and EOM; then <|end|> leaves the set when <|return|> and
 * <|call|> (gpt-oss) or <|calls|> and <|flush|> are in it, and </s> leaves it
 * when <|tool_response> is in it (Gemma 4). */
static int build_eog(tok_tokenizer *t)
{
    if (t->eot < 0) t->eot = find_first(t, eot_texts, N_TEXTS(eot_texts));
    mark_control(t, t->eot);
    if (t->eom < 0) t->eom = tok_find(t, "<|eom_id|>", 10);
    mark_control(t, t->eom);
    /* the first three end generation */
    int32_t *fim[6] = { &t->fim_pad, &t->fim_rep, &t->fim_sep, &t->fim_pre, &t->fim_suf, &t->fim_mid };
    const char *const *fim_texts[6] = { fim_pad_texts, fim_rep_texts, fim_sep_texts,
                                        fim_pre_texts, fim_suf_texts, fim_mid_texts };
    const size_t fim_n[6] = { N_TEXTS(fim_pad_texts), N_TEXTS(fim_rep_texts), N_TEXTS(fim_sep_texts),
                              N_TEXTS(fim_pre_texts), N_TEXTS(fim_suf_texts), N_TEXTS(fim_mid_texts) };
    free(t->eog);
    t->eog = NULL;
    t->n_eog = 0;
    int rc = 0;
    for (int k = 0; k < 6; k++) {
        if (*fim[k] < 0) *fim[k] = find_first(t, fim_texts[k], fim_n[k]);
        mark_control(t, *fim[k]);
        if (k < 3) rc |= eog_add(t, *fim[k]);
    }
    for (size_t k = 0; k < N_TEXTS(eog_texts); k++) {
        int32_t id = tok_find(t, eog_texts[k], strlen(eog_texts[k]));
        mark_control(t, id);
        rc |= eog_add(t, id);
    }
    rc |= eog_add(t, t->eos);
    rc |= eog_add(t, t->eot);
    rc |= eog_add(t, t->eom);
    if (rc) return KVI_E_NOMEM;
    int32_t end = tok_find(t, "<|end|>", 7);
    bool ret = tokenizer_is_eog(t, tok_find(t, "<|return|>", 10));
    bool call =
        tokenizer_is_eog(t, tok_find(t, "<|call|>", 8)) || tokenizer_is_eog(t, tok_find(t, "<|calls|>", 9));
    bool flush = tokenizer_is_eog(t, tok_find(t, "<|flush|>", 9));
    if (end >= 0 && tokenizer_is_eog(t, end) && call && (ret || flush)) {
        eog_remove(t, end);
        if (t->eog_to_control) t->type[end] = KVI_TOKEN_USER_DEFINED;
    }
    int32_t s = tok_find(t, "</s>", 4);
    if (s >= 0 && tokenizer_is_eog(t, s) && tokenizer_is_eog(t, tok_find(t, "<|tool_response>", 16))) {
        eog_remove(t, s);
        if (t->eog_to_control) t->type[s] = KVI_TOKEN_NORMAL;
    }
    return 0;
}

/* special_by_byte: the special list bucketed by first byte (a counting sort, so each
 * bucket keeps the list's longest-first order). */
static int index_special(tok_tokenizer *t)
{
    free(t->special_by_byte);
    t->special_by_byte = malloc((t->n_special ? t->n_special : 1) * sizeof *t->special_by_byte);
    if (!t->special_by_byte) return KVI_E_NOMEM;
    uint32_t count[257] = { 0 };
    for (size_t k = 0; k < t->n_special; k++) count[(unsigned char)t->text[t->special[k]][0] + 1]++;
    for (int b = 0; b < 256; b++) count[b + 1] += count[b];
    memcpy(t->special_first, count, sizeof count);
    for (size_t k = 0; k < t->n_special; k++)
        t->special_by_byte[count[(unsigned char)t->text[t->special[k]][0]]++] = t->special[k];
    return 0;
}

int tok_finish(tok_tokenizer *t, kvi_error *err)
{
    if (!t->text_arena) return err_set(err, KVI_E_FORMAT, "tokenizer: token texts not set");
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] < KVI_TOKEN_NORMAL || t->type[i] > KVI_TOKEN_BYTE) t->type[i] = KVI_TOKEN_NORMAL;

    int32_t *ids[] = { &t->bos, &t->eos,     &t->eot,     &t->eom,     &t->unk,
                       &t->pad, &t->fim_pad, &t->fim_rep, &t->fim_sep, &t->sep };
    for (size_t k = 0; k < N_TEXTS(ids); k++)
        if (*ids[k] >= t->n_vocab || *ids[k] < -1)
            return err_set(err, KVI_E_FORMAT, "tokenizer: special token id %d out of range [0, %d)",
                           (int)*ids[k], (int)t->n_vocab);
    /* before the special list: it may turn tokens into control tokens */
    if (build_eog(t) != 0) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");

    /* Byte fallback: <0xXX> tokens, else a single-byte token of that byte (SPM). */
    for (int b = 0; b < 256; b++) {
        static const char hex[] = "0123456789ABCDEF";
        char buf[7] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0 };
        int32_t id = tok_find(t, buf, 6);
        if (id < 0 && !t->byte_level) {
            char c = (char)b;
            id = tok_find(t, &c, 1);
        }
        if (t->byte_id[b] < 0) t->byte_id[b] = id;
    }

    free(t->special);
    t->special = NULL;
    t->n_special = 0;
    size_t ns = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->type[i]) && t->text_len[i] > 0) ns++;
    if (ns) {
        len_id *tmp = malloc(ns * sizeof *tmp);
        t->special = malloc(ns * sizeof *t->special);
        if (!tmp || !t->special) {
            free(tmp);
            return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
        }
        for (int32_t i = 0; i < t->n_vocab; i++)
            if (is_special_type(t->type[i]) && t->text_len[i] > 0)
                tmp[t->n_special++] = (len_id){ t->text_len[i], i };
        qsort(tmp, t->n_special, sizeof *tmp, cmp_special);
        for (size_t k = 0; k < t->n_special; k++) t->special[k] = tmp[k].id;
        free(tmp);
    }
    return index_special(t) ? err_set(err, KVI_E_NOMEM, "tokenizer: out of memory") : 0;

    return 0;
}

void tokenizer_free(tok_tokenizer *t)
{
    if (!t) return;
    free(t->text);
    free(t->text_len);
    free(t->text_arena);
    free(t->score);
    free(t->type);
    tok_map_free(&t->map);
    free(t->special);
    free(t->special_by_byte);
    free(t->tmpl_pre);
    free(t->tmpl_post);
    tok_norm_free(t->norm);
    free(t->eog);
    free(t->chat_template);
    tok_map_free(&t->merges);
    free(t->merges_arena);
    tok_pretok_free(t->pretok);
    free(t);
}

int tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *nv = realloc(ids->v, cap * sizeof *nv);
        if (!nv) return KVI_E_NOMEM;
        ids->v = nv;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

/* ---- encoding ------------------------------------------------------------ */

/* A piece of the input: raw text [off, off+len) when id < 0, else a special token. */
typedef struct frag {
    size_t off, len;
    int32_t id;
} frag;

typedef struct frag_list {
    frag *v; /* [cap] in text order */
    size_t n, cap;
} frag_list;

static int frag_insert(frag_list *f, size_t at, size_t count)
{
    if (f->n + count > f->cap) {
        size_t cap = f->cap * 2 + count + 8;
        frag *nv = realloc(f->v, cap * sizeof *nv);
        if (!nv) return KVI_E_NOMEM;
        f->v = nv;
        f->cap = cap;
    }
    memmove(f->v + at + count, f->v + at, (f->n - at) * sizeof *f->v);
    f->n += count;
    return 0;
}

/* First occurrence of needle in hay (no memmem: it is a GNU extension). */
static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m == 0 || m > n) return NULL;
    const char *end = hay + (n - m) + 1;
    for (const char *p = hay; p < end;) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (!p) return NULL;
        if (memcmp(p, needle, m) == 0) return p;
        p++;
    }
    return NULL;
}

/* Byte ranges where special tokens other than user-defined ones are not
 * recognised: [v[2k], v[2k+1]) for k < n (text that came from a chat message). */
typedef struct plain_ranges {
    const size_t *v;
    size_t n;
} plain_ranges;

/* May the token of type ty match bytes [at, at + n)? */
static bool special_allowed(uint8_t ty, bool parse_special, const plain_ranges *pl, size_t at, size_t n)
{
    if (ty == KVI_TOKEN_USER_DEFINED) return true;
    if (!parse_special) return false;
    for (size_t k = 0; pl && k < pl->n; k++)
        if (pl->v[2 * k] < at + n && at < pl->v[2 * k + 1]) return false;
    return true;
}

/* Cuts the raw fragments at every occurrence of each special token's text. */
static int partition_special(const tok_tokenizer *t, const char *text, size_t len, bool parse_special,
                             const plain_ranges *pl, frag_list *f)
{
    bool present[256] = { false };
    for (size_t i = 0; i < len; i++) present[(unsigned char)text[i]] = true;
    for (size_t s = 0; s < t->n_special; s++) {
        int32_t id = t->special[s];
        uint8_t ty = t->type[id];
        if (!parse_special && ty != KVI_TOKEN_USER_DEFINED) continue;
        const char *st = t->text[id];
        size_t sl = t->text_len[id];
        if (sl > len || !present[(unsigned char)st[0]]) continue;
        for (size_t i = 0; i < f->n; i++) {
            if (f->v[i].id >= 0 || f->v[i].len < sl) continue;
            const char *base = text + f->v[i].off;
            const char *hit = find_bytes(base, f->v[i].len, st, sl);
            while (hit && !special_allowed(ty, parse_special, pl, (size_t)(hit - text), sl)) {
                size_t from = (size_t)(hit - base) + 1;
                hit = find_bytes(base + from, f->v[i].len - from, st, sl);
            }
            if (!hit) continue;
            size_t pre = (size_t)(hit - base), off = f->v[i].off, flen = f->v[i].len;
            size_t post = flen - pre - sl;
            /* [pre raw] [special] [post raw], empty raw parts dropped */
            size_t extra = (pre > 0) + (post > 0);
            if (frag_insert(f, i + 1, extra) != 0) return KVI_E_NOMEM;
            size_t k = i;
            if (pre > 0) f->v[k++] = (frag){ off, pre, -1 };
            f->v[k++] = (frag){ off + pre, sl, id };
            if (post > 0) f->v[k] = (frag){ off + pre + sl, post, -1 };
            /* continue the scan in the remainder, which is at index k when post > 0 */
            i = k - 1;
        }
    }
    return 0;
}

/* Hugging Face's added-token split: scanning left to right, the longest eligible token
 * that starts at each position is taken (leftmost-longest); the text between is raw. */
static int partition_leftmost(const tok_tokenizer *t, const char *text, size_t len, bool parse_special,
                              const plain_ranges *pl, frag_list *f)
{
    f->n = 0;
    size_t raw = 0;
    for (size_t i = 0; i < len;) {
        unsigned char b = (unsigned char)text[i];
        int32_t hit = -1;
        for (uint32_t k = t->special_first[b]; k < t->special_first[b + 1] && hit < 0; k++) {
            int32_t id = t->special_by_byte[k];
            size_t sl = t->text_len[id];
            if (sl <= len - i && special_allowed(t->type[id], parse_special, pl, i, sl) &&
                memcmp(text + i, t->text[id], sl) == 0)
                hit = id;
        }
        if (hit < 0) {
            i++;
            continue;
        }
        size_t extra = 1 + (i > raw);
        if (frag_insert(f, f->n, extra) != 0) return KVI_E_NOMEM;
        if (i > raw) f->v[f->n - 2] = (frag){ raw, i - raw, -1 };
        f->v[f->n - 1] = (frag){ i, t->text_len[hit], hit };
        i += t->text_len[hit];
        raw = i;
    }
    if (len > raw) {
        if (frag_insert(f, f->n, 1) != 0) return KVI_E_NOMEM;
        f->v[f->n - 1] = (frag){ raw, len - raw, -1 };
    }
    return 0;
}

static int push_ids(tok_ids *ids, const int32_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tok_ids_push(ids, v[i]) != 0) return KVI_E_NOMEM;
    return 0;
}

/* The text with the dummy-prefix space when `prefix`, and spaces as U+2581 when
 * the vocabulary escapes them: into *buf (reallocated), *n its length. */
static int escape_text(const tok_tokenizer *t, const char *p, size_t len, bool prefix, char **buf, size_t *n)
{
    size_t spaces = prefix;
    for (size_t i = 0; i < len; i++) spaces += p[i] == ' ';
    size_t per = t->escape_space ? 3 : 1;
    if (len > SIZE_MAX / 4) return KVI_E_NOMEM;
    char *nb = realloc(*buf, len + spaces * per + 1);
    if (!nb) return KVI_E_NOMEM;
    *buf = nb;
    size_t k = 0;
    for (size_t i = 0; i < len + prefix; i++) {
        char c = (prefix && i == 0) ? ' ' : p[i - prefix];
        if (c == ' ' && t->escape_space) {
            memcpy(nb + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            nb[k++] = c;
        }
    }
    *n = k;
    return 0;
}

int32_t tokenizer_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t *out, int32_t n_max)
{
    return tokenizer_encode_plain(t, text, len, add_special, parse_special, NULL, 0, out, n_max);
}

int32_t tokenizer_encode_plain(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
                               bool parse_special, const size_t *plain, size_t n_plain, int32_t *out,
                               int32_t n_max)
{
    const plain_ranges pr = { plain, n_plain }, *pl = n_plain ? &pr : NULL;
    if (!t || (!text && len > 0) || n_max < 0 || (!out && n_max > 0)) return KVI_E_INVALID;
    tok_ids ids = { 0 };
    frag_list f = { 0 };
    int rc = 0;
    if (add_special && t->has_template)
        rc = push_ids(&ids, t->tmpl_pre, t->n_tmpl_pre);
    else if (add_special && t->add_bos && t->bos >= 0)
        rc = tok_ids_push(&ids, t->bos);
    if (rc == 0 && len > 0 && t->special_leftmost) {
        rc = partition_leftmost(t, text, len, parse_special, pl, &f);
    } else if (rc == 0 && len > 0) {
        rc = frag_insert(&f, 0, 1);
        if (rc == 0) {
            f.v[0] = (frag){ 0, len, -1 };
            rc = partition_special(t, text, len, parse_special, pl, &f);
        }
    }
    char *buf = NULL;
    bool prev_special = true;
    for (size_t i = 0; rc == 0 && i < f.n; i++) {
        if (f.v[i].id >= 0) {
            rc = tok_ids_push(&ids, f.v[i].id);
            prev_special = true;
            continue;
        }
        const char *p = text + f.v[i].off;
        size_t n = f.v[i].len;
        bool prefix = t->add_space_prefix && prev_special;
        if (t->norm) {
            free(buf);
            buf = NULL;
            rc = tok_norm_apply(t->norm, p, n, f.v[i].off == 0, &buf, &n);
            if (rc != 0) break;
            p = buf;
        } else if (t->algo != TOK_ALGO_WPM && (prefix || t->escape_space)) {
            rc = escape_text(t, p, n, prefix, &buf, &n);
            if (rc != 0) break;
            p = buf;
        }
        rc = t->algo == TOK_ALGO_SPM   ? tok_spm_encode(t, p, n, &ids)
             : t->algo == TOK_ALGO_WPM ? tok_wpm_encode(t, p, n, &ids)
                                       : tok_bpe_encode(t, p, n, &ids);
        prev_special = false;
    }
    if (rc == 0 && add_special && t->has_template)
        rc = push_ids(&ids, t->tmpl_post, t->n_tmpl_post);
    else if (rc == 0 && add_special && t->algo == TOK_ALGO_WPM)
        rc = t->sep >= 0 ? tok_ids_push(&ids, t->sep) : 0; /* whatever add_eos / add_sep say */
    else if (rc == 0 && add_special && t->add_eos && t->eos >= 0)
        rc = tok_ids_push(&ids, t->eos);
    free(buf);
    free(f.v);
    if (rc != 0) {
        free(ids.v);
        return rc;
    }
    if (ids.n > INT32_MAX) {
        free(ids.v);
        return KVI_E_INVALID;
    }
    size_t ncopy = ids.n < (size_t)n_max ? ids.n : (size_t)n_max;
    if (ncopy) memcpy(out, ids.v, ncopy * sizeof *out);
    free(ids.v);
    return (int32_t)ids.n;
}

/* ---- decoding ------------------------------------------------------------ */

/* Writes the bytes of [src, src+n) at dst[pos..], never past cap; returns pos + n. */
static size_t put(char *dst, size_t cap, size_t pos, const char *src, size_t n)
{
    if (pos < cap) memcpy(dst + pos, src, (cap - pos) < n ? (cap - pos) : n);
    return pos + n;
}

static uint32_t utf8_decode(const char *s, size_t n, size_t *used)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t l = tok_utf8_len(u[0]);
    if (l > n || l == 1) {
        *used = 1;
        return u[0];
    }
    uint32_t c = u[0] & (0x7F >> l);
    for (size_t i = 1; i < l; i++) {
        if ((u[i] & 0xC0) != 0x80) {
            *used = 1;
            return 0xFFFFFFFFu;
        }
        c = (c << 6) | (u[i] & 0x3F);
    }
    *used = l;
    return c;
}

/* The bytes of one token into buf (may be truncated); returns its full length,
 * skipping up to `lstrip` leading spaces. */
static size_t piece_of(const tok_tokenizer *t, int32_t id, char *buf, size_t cap, bool render_special,
                       int lstrip)
{
    uint8_t ty = t->type[id];
    const char *s = t->text[id];
    size_t n = t->text_len[id], pos = 0;
    if (ty == KVI_TOKEN_CONTROL || ty == KVI_TOKEN_UNKNOWN || ty == KVI_TOKEN_UNUSED) {
        if (!render_special) return 0;
        return put(buf, cap, 0, s, n);
    }
    if (ty == KVI_TOKEN_USER_DEFINED) {
        while (lstrip > 0 && n > 0 && s[0] == ' ') {
            s++;
            n--;
            lstrip--;
        }
        return put(buf, cap, 0, s, n);
    }
    if (ty == KVI_TOKEN_BYTE && n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
        char b = (char)strtol((char[]){ s[3], s[4], 0 }, NULL, 16);
        if (lstrip > 0 && b == ' ') return 0;
        return put(buf, cap, 0, &b, 1);
    }
    if (t->algo == TOK_ALGO_WPM && t->wpm_cont_len > 0) { /* "##s" joins its word, "the" starts one */
        if (n >= t->wpm_cont_len && memcmp(s, t->wpm_cont, t->wpm_cont_len) == 0)
            return put(buf, cap, 0, s + t->wpm_cont_len, n - t->wpm_cont_len);
        if (lstrip == 0) pos = put(buf, cap, 0, " ", 1);
        return put(buf, cap, pos, s, n);
    }
    if (t->byte_level) {
        for (size_t i = 0; i < n;) {
            size_t used;
            uint32_t c = utf8_decode(s + i, n - i, &used);
            int b = tok_cpt_to_byte(c);
            if (b >= 0) {
                char ch = (char)b;
                if (!(lstrip > 0 && ch == ' ')) pos = put(buf, cap, pos, &ch, 1);
            } else {
                pos = put(buf, cap, pos, s + i, used);
            }
            if (lstrip > 0) lstrip = b == ' ' ? lstrip - 1 : 0;
            i += used;
        }
        return pos;
    }
    for (size_t i = 0; i < n;) {
        bool space = (t->escape_space && i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) || s[i] == ' ';
        if (space) {
            if (lstrip > 0)
                lstrip--;
            else
                pos = put(buf, cap, pos, " ", 1);
            i += s[i] == ' ' ? 1 : 3;
            continue;
        }
        lstrip = 0;
        pos = put(buf, cap, pos, s + i, 1);
        i++;
    }
    return pos;
}

int32_t tokenizer_token_to_piece(const tok_tokenizer *t, int32_t id, char *buf, size_t cap,
                                 bool render_special)
{
    if (!t || id < 0 || id >= t->n_vocab || (!buf && cap > 0)) return KVI_E_INVALID;
    size_t n = piece_of(t, id, buf, cap, render_special, 0);
    return n > INT32_MAX ? KVI_E_INVALID : (int32_t)n;
}

/* Hugging Face's clean_up_tokenization (WordPiece decoder's cleanup, llama.cpp's
 * clean_spaces): each rule replaces every occurrence, left to right, in turn. In place;
 * returns the new length. */
static size_t wpm_cleanup(char *s, size_t n)
{
    static const char *const from[] = { " .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're" };
    static const char *const to[] = { ".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re" };
    for (size_t r = 0; r < sizeof from / sizeof from[0]; r++) {
        size_t fl = strlen(from[r]), tl = strlen(to[r]), k = 0;
        for (size_t i = 0; i < n;) {
            if (i + fl <= n && memcmp(s + i, from[r], fl) == 0) {
                memmove(s + k, to[r], tl);
                k += tl;
                i += fl;
            } else {
                s[k++] = s[i++];
            }
        }
        n = k;
    }
    return n;
}

static int32_t detokenize_raw(const tok_tokenizer *t, const int32_t *ids, int32_t n, char *buf, size_t cap,
                              bool render_special, bool remove_leading_space);

/* WordPiece: the whole text decoded into a scratch buffer, cleaned up, then copied. */
static int32_t wpm_detokenize(const tok_tokenizer *t, const int32_t *ids, int32_t n, char *buf, size_t cap,
                              bool render_special, bool remove_leading_space)
{
    int32_t full = detokenize_raw(t, ids, n, NULL, 0, render_special, remove_leading_space);
    if (full < 0) return full;
    char *tmp = malloc((size_t)full + 1);
    if (!tmp) return KVI_E_NOMEM;
    detokenize_raw(t, ids, n, tmp, (size_t)full + 1, render_special, remove_leading_space);
    size_t m = wpm_cleanup(tmp, (size_t)full);
    if (cap > 0) {
        size_t c = m < cap - 1 ? m : cap - 1;
        memcpy(buf, tmp, c);
        buf[c] = 0;
    }
    free(tmp);
    return (int32_t)m;
}

int32_t tokenizer_detokenize(const tok_tokenizer *t, const int32_t *ids, int32_t n, char *buf, size_t cap,
                             bool render_special, bool remove_leading_space)
{
    if (!t || n < 0 || (!ids && n > 0) || (!buf && cap > 0)) return KVI_E_INVALID;
    if (t->algo == TOK_ALGO_WPM)
        return wpm_detokenize(t, ids, n, buf, cap, render_special, remove_leading_space);
    return detokenize_raw(t, ids, n, buf, cap, render_special, remove_leading_space);
}

/* The pieces back to back (the caller checked the arguments). */
static int32_t detokenize_raw(const tok_tokenizer *t, const int32_t *ids, int32_t n, char *buf, size_t cap,
                              bool render_special, bool remove_leading_space)
{
    size_t lim = cap > 0 ? cap - 1 : 0, pos = 0;
    /* The dummy-prefix space starts the text and every text after a BOS (llama2.c);
     * WordPiece: the space before the first word. */
    bool wpm = t->algo == TOK_ALGO_WPM;
    bool strip_on = remove_leading_space && (t->add_space_prefix || wpm);
    bool strip = strip_on;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) return KVI_E_INVALID;
        size_t w = piece_of(t, ids[i], pos < lim ? buf + pos : NULL, pos < lim ? lim - pos : 0,
                            render_special, strip ? 1 : 0);
        pos += w;
        strip = strip_on && (wpm ? pos == 0 : ids[i] == t->bos);
        if (pos > INT32_MAX) return KVI_E_INVALID;
    }
    if (cap > 0) buf[pos < lim ? pos : lim] = 0;
    return (int32_t)pos;
}

/* ---- accessors ----------------------------------------------------------- */

int32_t tokenizer_n_vocab(const tok_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t tokenizer_bos(const tok_tokenizer *t) { return t ? t->bos : -1; }
int32_t tokenizer_eos(const tok_tokenizer *t) { return t ? t->eos : -1; }

int32_t tokenizer_fim(const tok_tokenizer *t, int kind)
{
    if (!t) return -1;
    const int32_t ids[6] = { t->fim_pre, t->fim_suf, t->fim_mid, t->fim_pad, t->fim_rep, t->fim_sep };
    return kind >= 0 && kind < 6 ? ids[kind] : -1;
}
bool tokenizer_add_bos(const tok_tokenizer *t) { return t && t->add_bos && t->bos >= 0; }
const char *tokenizer_chat_template(const tok_tokenizer *t) { return t ? t->chat_template : NULL; }

bool tokenizer_is_eog(const tok_tokenizer *t, int32_t id)
{
    if (!t) return false;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

const char *tokenizer_token_text(const tok_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    return t->text[id];
}

/* ---- pairs (rerank) ------------------------------------------------------ */

/* ids of text without special tokens into *ids (malloc'd), count or a negative code. */
static int32_t encode_bare(const tok_tokenizer *t, const char *s, size_t len, int32_t **ids)
{
    *ids = NULL;
    bool parse = t->special_leftmost; /* Hugging Face splits added tokens in both texts */
    int32_t n = tokenizer_encode(t, s, len, false, parse, NULL, 0);
    if (n < 0) return n;
    *ids = malloc(((size_t)n + 1) * sizeof **ids);
    if (!*ids) return KVI_E_NOMEM;
    return tokenizer_encode(t, s, len, false, parse, *ids, n);
}

/* Appends v[0..n) of token type `type` at out[*k], never past n_max (*k still counts). */
static void pair_put(const int32_t *v, size_t n, int32_t type, int32_t *out, int32_t *types, int32_t n_max,
                     size_t *k)
{
    for (size_t i = 0; i < n; i++, (*k)++) {
        if (*k >= (size_t)n_max) continue;
        out[*k] = v[i];
        if (types) types[*k] = type;
    }
}

int32_t tokenizer_encode_pair(const tok_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                              int32_t *out, int32_t *types, int32_t n_max)
{
    if (!t || (!a && alen > 0) || (!b && blen > 0) || n_max < 0 || (!out && n_max > 0)) return KVI_E_INVALID;
    int32_t *ia, *ib;
    int32_t na = encode_bare(t, a, alen, &ia);
    int32_t nb = na < 0 ? 0 : encode_bare(t, b, blen, &ib);
    if (na < 0 || nb < 0) {
        if (na >= 0) free(ia);
        return na < 0 ? na : nb;
    }
    size_t k = 0;
    if (t->has_template) { /* Hugging Face: pre A post B post, B of type 1 */
        pair_put(t->tmpl_pre, t->n_tmpl_pre, 0, out, types, n_max, &k);
        pair_put(ia, (size_t)na, 0, out, types, n_max, &k);
        pair_put(t->tmpl_post, t->n_tmpl_post, 0, out, types, n_max, &k);
        pair_put(ib, (size_t)nb, 1, out, types, n_max, &k);
        pair_put(t->tmpl_post, t->n_tmpl_post, 1, out, types, n_max, &k);
    } else { /* llama.cpp's server: EOS falls back to SEP */
        int32_t eos = t->eos >= 0 ? t->eos : t->sep;
        bool bos = t->add_bos && t->bos >= 0, e = t->add_eos && eos >= 0, sep = t->add_sep && t->sep >= 0;
        pair_put(&t->bos, bos, 0, out, types, n_max, &k);
        pair_put(ia, (size_t)na, 0, out, types, n_max, &k);
        pair_put(&eos, e, 0, out, types, n_max, &k);
        pair_put(&t->sep, sep, 0, out, types, n_max, &k);
        pair_put(ib, (size_t)nb, 1, out, types, n_max, &k);
        pair_put(&eos, e, 1, out, types, n_max, &k);
    }
    free(ia);
    free(ib);
    return k > INT32_MAX ? KVI_E_INVALID : (int32_t)k;
}

int32_t tokenizer_sep(const tok_tokenizer *t) { return t ? t->sep : -1; }
