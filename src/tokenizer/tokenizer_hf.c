/*
 * tokenizer_hf.c — loading a Hugging Face tokenizer.json (model.type "BPE" or
 * "WordPiece").
 *
 * The pipeline is read as Hugging Face tokenizers runs it:
 *  - normalizer -> t->norm (tokenizer_norm.c): NFC/NFD/NFKC/NFKD, Lowercase,
 *    StripAccents, Strip, Replace, Prepend, Sequence; anything else is refused;
 *  - pre-tokenizer -> cutting regexes (tokenizer_pretok.c) with their behaviour:
 *    Split (String or Regex; isolated / merged with previous / next), ByteLevel
 *    (GPT-2's regex unless use_regex is false; add_prefix_space as a normalizer
 *    step), Metaspace (replacement and prefix as normalizer steps, a cut before
 *    each U+2581 when split), Digits; anything else is refused;
 *  - model: model.vocab text -> id, added_tokens (control when "special", else
 *    user-defined; matched leftmost-longest), model.merges "a b" strings or
 *    ["a", "b"] pairs in rank order, byte fallback to <0xXX> tokens;
 *  - WordPiece (BERT): model.vocab, unk_token, continuing_subword_prefix ("##"),
 *    max_input_chars_per_word (100); BertNormalizer's clean_text,
 *    handle_chinese_chars, lowercase, strip_accents (null: as lowercase) become the
 *    encoder's own switches (tokenizer_wpm.c), another normalizer runs before it with
 *    those switches off; the pre-tokenizer must be BertPreTokenizer (or none);
 *  - post-processor: TemplateProcessing (alone or in a Sequence) or Roberta/Bert
 *    cls + sep give the ids added around the text; without one,
 *    tokenizer_config.json's add_bos_token / add_eos_token add bos_token /
 *    eos_token (as Python transformers does).
 * bos/eos/pad/chat_template come from tokenizer_config.json beside the file when
 * it exists. Every id is checked to lie in [0, n_vocab) and every id to have a text.
 */
#include "base/error.h"
#include "formats/json_util.h"
#include "base/file.h"
#include "tokenizer/tokenizer_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file as a NUL-terminated string, NULL when it cannot be read. */
/* The file's bytes (NUL-terminated), or NULL with *nomem telling an allocation
 * failure from a missing or unreadable file. */
static char *slurp(const char *path, bool *nomem)
{
    char *data;
    size_t n;
    const int r = file_read_all(path, 0, &data, &n);
    *nomem = r == FILE_NOMEM;
    return r == FILE_OK ? data : NULL;
}

static bool str_is(const cJSON *j, const char *s)
{
    return cJSON_IsString(j) && strcmp(j->valuestring, s) == 0;
}

/* A token named in tokenizer_config.json: a string or {"content": ...}. */
static int32_t config_token(const tok_tokenizer *t, const cJSON *v)
{
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItem(v, "content");
    if (!cJSON_IsString(v)) return -1;
    return tok_find(t, v->valuestring, strlen(v->valuestring));
}

/* Reads tokenizer_config.json beside json_path when there is one (a missing or
 * malformed one changes nothing). 0, or KVI_E_NOMEM. */
static int read_config(tok_tokenizer *t, const char *json_path)
{
    const char *slash = strrchr(json_path, '/');
    size_t dir = slash ? (size_t)(slash - json_path + 1) : 0;
    char *path = malloc(dir + 32);
    if (!path) return KVI_E_NOMEM;
    memcpy(path, json_path, dir);
    strcpy(path + dir, "tokenizer_config.json");
    bool oom = false;
    char *text = slurp(path, &oom);
    free(path);
    cJSON *c = text ? kvi_json_parse(text, strlen(text), &oom) : NULL;
    free(text);
    if (oom) return KVI_E_NOMEM;
    if (!c) return 0;
    int32_t id = config_token(t, cJSON_GetObjectItem(c, "bos_token"));
    if (id >= 0) t->bos = id;
    id = config_token(t, cJSON_GetObjectItem(c, "eos_token"));
    if (id >= 0) t->eos = id;
    id = config_token(t, cJSON_GetObjectItem(c, "pad_token"));
    if (id >= 0) t->pad = id;
    const cJSON *b = cJSON_GetObjectItem(c, "add_bos_token");
    if (cJSON_IsBool(b)) t->add_bos = cJSON_IsTrue(b);
    b = cJSON_GetObjectItem(c, "add_eos_token");
    if (cJSON_IsBool(b)) t->add_eos = cJSON_IsTrue(b);
    const cJSON *tmpl = cJSON_GetObjectItem(c, "chat_template");
    int rc = 0;
    if (cJSON_IsString(tmpl) && !t->chat_template && !(t->chat_template = strdup(tmpl->valuestring)))
        rc = KVI_E_NOMEM;
    cJSON_Delete(c);
    return rc;
}

/* The normalizer into t->norm (Sequence flattened); Prepend "▁" / Replace -> "▁"
 * also set the flags decoding uses (strip the dummy prefix, U+2581 is a space). */
static int read_normalizer(tok_tokenizer *t, const cJSON *node, int depth, kvi_error *err)
{
    if (!node || cJSON_IsNull(node)) return 0;
    const cJSON *type = cJSON_GetObjectItem(node, "type");
    if (!cJSON_IsString(type) || depth > 8)
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: a normalizer without a type");
    const char *ty = type->valuestring;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(node, "normalizers"))
        {
            int rc = read_normalizer(t, it, depth + 1, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (strcmp(ty, "Prepend") == 0) {
        const cJSON *pre = cJSON_GetObjectItem(node, "prepend");
        if (!cJSON_IsString(pre))
            return err_set(err, KVI_E_FORMAT, "tokenizer.json: Prepend without a string");
        if (strcmp(pre->valuestring, "\xE2\x96\x81") == 0) t->add_space_prefix = true;
        return tok_norm_add_prepend(t->norm, pre->valuestring, TOK_NORM_PREPEND_ALWAYS, err);
    }
    if (strcmp(ty, "Replace") == 0) {
        const cJSON *pat = cJSON_GetObjectItem(node, "pattern"),
                    *content = cJSON_GetObjectItem(node, "content");
        const cJSON *str = cJSON_GetObjectItem(pat, "String"), *re = cJSON_GetObjectItem(pat, "Regex");
        if (!cJSON_IsString(content) || (!cJSON_IsString(str) && !cJSON_IsString(re)))
            return err_set(err, KVI_E_FORMAT, "tokenizer.json: Replace without a pattern and content");
        if (strcmp(content->valuestring, "\xE2\x96\x81") == 0) t->escape_space = true;
        return tok_norm_add_replace(t->norm, cJSON_IsString(str) ? str->valuestring : re->valuestring,
                                    !cJSON_IsString(str), content->valuestring, err);
    }
    if (strcmp(ty, "Strip") == 0)
        return tok_norm_add_strip(t->norm, !cJSON_IsFalse(cJSON_GetObjectItem(node, "strip_left")),
                                  !cJSON_IsFalse(cJSON_GetObjectItem(node, "strip_right")), err);
    return tok_norm_add_form(t->norm, ty, err);
}

/* A literal as a PCRE2 regex: ASCII punctuation quoted character by character. */
static char *quote_literal(const char *lit)
{
    size_t n = strlen(lit);
    char *q = malloc(2 * n + 1), *o = q;
    if (!q) return NULL;
    for (const char *c = lit; *c; c++) {
        if ((unsigned char)*c < 0x80 &&
            !((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
            *o++ = '\\';
        *o++ = *c;
    }
    *o = 0;
    return q;
}

/* A Split pattern as a PCRE2 regex (a String pattern quoted); NULL when neither. */
static char *split_regex(const cJSON *pat)
{
    const cJSON *re = cJSON_GetObjectItem(pat, "Regex"), *str = cJSON_GetObjectItem(pat, "String");
    if (cJSON_IsString(re)) return strdup(re->valuestring);
    return cJSON_IsString(str) ? quote_literal(str->valuestring) : NULL;
}

/* The cutting steps of a pre-tokenizer, in order: Split regexes, ByteLevel's GPT-2
 * regex, Metaspace's cut before U+2581, Digits. */
typedef struct split_list {
    char *pat[16];
    uint8_t behavior[16];
    size_t n;
} split_list;

static int add_split(split_list *l, char *pat, uint8_t behavior, kvi_error *err)
{
    if (!pat) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    if (l->n == sizeof l->pat / sizeof l->pat[0]) {
        free(pat);
        return err_set(err, KVI_E_UNSUPPORTED, "tokenizer.json: more than 16 pre-tokenizer splits");
    }
    l->pat[l->n] = pat;
    l->behavior[l->n++] = behavior;
    return 0;
}

static int read_split(split_list *l, const cJSON *node, kvi_error *err)
{
    const cJSON *beh = cJSON_GetObjectItem(node, "behavior");
    uint8_t b = TOK_SPLIT_ISOLATED;
    if (cJSON_IsString(beh) && strcmp(beh->valuestring, "MergedWithPrevious") == 0)
        b = TOK_SPLIT_MERGED_PREVIOUS;
    else if (cJSON_IsString(beh) && strcmp(beh->valuestring, "MergedWithNext") == 0)
        b = TOK_SPLIT_MERGED_NEXT;
    else if (beh && !(cJSON_IsString(beh) && strcmp(beh->valuestring, "Isolated") == 0))
        return err_set(err, KVI_E_UNSUPPORTED, "tokenizer.json: Split behavior \"%.30s\" is not supported",
                       cJSON_IsString(beh) ? beh->valuestring : "?");
    if (cJSON_IsTrue(cJSON_GetObjectItem(node, "invert")))
        return err_set(err, KVI_E_UNSUPPORTED, "tokenizer.json: an inverted Split is not supported");
    const cJSON *pat = cJSON_GetObjectItem(node, "pattern");
    if (!cJSON_IsString(cJSON_GetObjectItem(pat, "Regex")) &&
        !cJSON_IsString(cJSON_GetObjectItem(pat, "String")))
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: Split without a String or Regex pattern");
    char *re = split_regex(pat);
    if (!re) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    return add_split(l, re, b, err);
}

static int read_metaspace(tok_tokenizer *t, split_list *l, const cJSON *node, kvi_error *err)
{
    const cJSON *rep = cJSON_GetObjectItem(node, "replacement");
    const char *r = cJSON_IsString(rep) ? rep->valuestring : "\xE2\x96\x81";
    const cJSON *sch = cJSON_GetObjectItem(node, "prepend_scheme");
    int when = TOK_NORM_PREPEND_ALWAYS;
    bool prepend = !cJSON_IsFalse(cJSON_GetObjectItem(node, "add_prefix_space"));
    if (cJSON_IsString(sch)) {
        prepend = strcmp(sch->valuestring, "never") != 0;
        if (strcmp(sch->valuestring, "first") == 0) when = TOK_NORM_PREPEND_FIRST;
    }
    t->escape_space = strcmp(r, "\xE2\x96\x81") == 0;
    t->add_space_prefix = prepend;
    int rc = tok_norm_add_replace(t->norm, " ", false, r, err);
    if (rc == 0 && prepend) rc = tok_norm_add_prepend(t->norm, r, when, err);
    if (rc == 0 && !cJSON_IsFalse(cJSON_GetObjectItem(node, "split")))
        rc = add_split(l, quote_literal(r), TOK_SPLIT_MERGED_NEXT, err);
    return rc;
}

static int read_pre_tokenizer(tok_tokenizer *t, split_list *l, const cJSON *node, int depth, kvi_error *err)
{
    if (!node || cJSON_IsNull(node)) return 0;
    const cJSON *type = cJSON_GetObjectItem(node, "type");
    if (!cJSON_IsString(type) || depth > 8)
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: a pre-tokenizer without a type");
    const char *ty = type->valuestring;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(node, "pretokenizers"))
        {
            int rc = read_pre_tokenizer(t, l, it, depth + 1, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        t->byte_level = true;
        int rc = 0;
        if (cJSON_IsTrue(cJSON_GetObjectItem(node, "add_prefix_space")))
            rc = tok_norm_add_prepend(t->norm, " ", TOK_NORM_PREFIX_SPACE, err);
        /* GPT-2's regex, tokenizer_pretok.c's "gpt-2" */
        if (rc == 0 && !cJSON_IsFalse(cJSON_GetObjectItem(node, "use_regex")))
            rc = add_split(
                l,
                strdup("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"),
                TOK_SPLIT_ISOLATED, err);
        return rc;
    }
    if (strcmp(ty, "Split") == 0) return read_split(l, node, err);
    if (strcmp(ty, "Metaspace") == 0) return read_metaspace(t, l, node, err);
    if (strcmp(ty, "Digits") == 0)
        return add_split(
            l, strdup(cJSON_IsTrue(cJSON_GetObjectItem(node, "individual_digits")) ? "\\p{N}" : "\\p{N}+"),
            TOK_SPLIT_ISOLATED, err);
    return err_set(err, KVI_E_UNSUPPORTED, "tokenizer.json: pre-tokenizer \"%.40s\" is not supported", ty);
}

static int set_id(tok_tokenizer *t, const char **texts, size_t *lens, double idv, const char *s,
                  kvi_error *err)
{
    if (!(idv >= 0 && idv < t->n_vocab) || idv != (double)(int32_t)idv)
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: token \"%.40s\" has id %g outside [0, %d)", s, idv,
                       (int)t->n_vocab);
    texts[(int32_t)idv] = s;
    lens[(int32_t)idv] = strlen(s);
    return 0;
}

/* The shapes this loader reads: model.type "BPE" with a model.vocab object and a
 * model.merges array, or "WordPiece" with a model.vocab object. */
static int check_model(const cJSON *model, const cJSON *vocab, const cJSON *merges, kvi_error *err)
{
    if (!cJSON_IsObject(model) || !cJSON_IsObject(vocab))
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: no model.vocab object");
    if (str_is(cJSON_GetObjectItem(model, "type"), "WordPiece")) return 0;
    if (!str_is(cJSON_GetObjectItem(model, "type"), "BPE"))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "tokenizer.json: only model.type \"BPE\" and \"WordPiece\" are supported");
    if (!cJSON_IsArray(merges)) return err_set(err, KVI_E_FORMAT, "tokenizer.json: no model.merges array");
    return 0;
}

/* *n_vocab = 1 + the largest id of model.vocab and added_tokens, checked
 * against the number of tokens listed. */
static int vocab_size(const cJSON *vocab, const cJSON *added, int32_t *n_vocab, kvi_error *err)
{
    double max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab)
    {
        if (!cJSON_IsNumber(it))
            return err_set(err, KVI_E_FORMAT, "tokenizer.json: vocab id is not a number");
        if (it->valuedouble > max_id) max_id = it->valuedouble;
    }
    cJSON_ArrayForEach(it, added)
    {
        const cJSON *id = cJSON_GetObjectItem(it, "id");
        if (cJSON_IsNumber(id) && id->valuedouble > max_id) max_id = id->valuedouble;
    }
    if (!(max_id >= 0 && max_id < (1 << 28)))
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: vocabulary ids out of range");
    /* Ids may leave a few holes, but one huge id among few entries would make us
     * allocate a table of max_id tokens for nothing (a memory bomb). */
    double n_entries = (double)cJSON_GetArraySize(vocab) + (double)cJSON_GetArraySize(added);
    if (max_id >= 2.0 * n_entries + 1024.0)
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: largest id %.0f but only %.0f tokens listed",
                       max_id, n_entries);
    *n_vocab = (int32_t)max_id + 1;
    return 0;
}

/* The text of every id: model.vocab, then added_tokens (control when "special",
 * else user-defined); an id nobody names is unused. */
static int load_vocab(tok_tokenizer *t, const cJSON *vocab, const cJSON *added, kvi_error *err)
{
    int rc = 0;
    const cJSON *it;
    const char **texts = calloc((size_t)t->n_vocab, sizeof *texts); /* [n_vocab] */
    size_t *lens = calloc((size_t)t->n_vocab, sizeof *lens);        /* [n_vocab] */
    if (!texts || !lens) rc = err_set(err, KVI_E_NOMEM, "tokenizer.json: out of memory");
    cJSON_ArrayForEach(it, vocab)
    {
        if (rc) break;
        rc = set_id(t, texts, lens, it->valuedouble, it->string, err);
    }
    cJSON_ArrayForEach(it, added)
    {
        if (rc) break;
        const cJSON *id = cJSON_GetObjectItem(it, "id"), *content = cJSON_GetObjectItem(it, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content)) {
            rc = err_set(err, KVI_E_FORMAT, "tokenizer.json: added token without id or content");
            break;
        }
        rc = set_id(t, texts, lens, id->valuedouble, content->valuestring, err);
        if (rc == 0)
            t->type[(int32_t)id->valuedouble] =
                cJSON_IsTrue(cJSON_GetObjectItem(it, "special")) ? KVI_TOKEN_CONTROL : KVI_TOKEN_USER_DEFINED;
    }
    for (int32_t i = 0; rc == 0 && i < t->n_vocab; i++) {
        if (!texts[i]) {
            texts[i] = ""; /* an id nobody names: unused */
            t->type[i] = KVI_TOKEN_UNUSED;
        }
    }
    if (rc == 0) rc = tok_set_texts(t, texts, lens, err);
    free(texts);
    free(lens);
    return rc;
}

/* model.merges: "a b" strings or ["a", "b"] pairs, joined as "a b" in one
 * buffer, in rank order. */
static int load_merges(tok_tokenizer *t, const cJSON *merges, kvi_error *err)
{
    int rc = 0;
    const cJSON *it;
    size_t nm = (size_t)cJSON_GetArraySize(merges), total = 0;
    cJSON_ArrayForEach(it, merges)
    {
        if (cJSON_IsString(it))
            total += strlen(it->valuestring) + 1;
        else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                 cJSON_IsString(cJSON_GetArrayItem(it, 0)) && cJSON_IsString(cJSON_GetArrayItem(it, 1)))
            total += strlen(cJSON_GetArrayItem(it, 0)->valuestring) +
                     strlen(cJSON_GetArrayItem(it, 1)->valuestring) + 2;
        else
            return err_set(err, KVI_E_FORMAT, "tokenizer.json: a merge is neither \"a b\" nor [a, b]");
    }
    char *joined = malloc(total ? total : 1);             /* [total] "a b\0" per merge */
    const char **ms = malloc((nm ? nm : 1) * sizeof *ms); /* [nm] start of each merge in joined */
    size_t *ml = malloc((nm ? nm : 1) * sizeof *ml);      /* [nm] its length */
    if (!joined || !ms || !ml) rc = err_set(err, KVI_E_NOMEM, "tokenizer.json: out of memory for merges");
    size_t k = 0, off = 0;
    cJSON_ArrayForEach(it, merges)
    {
        if (rc) break;
        if (cJSON_IsString(it)) {
            ml[k] = strlen(it->valuestring);
            memcpy(joined + off, it->valuestring, ml[k]);
        } else {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring,
                       *b = cJSON_GetArrayItem(it, 1)->valuestring;
            size_t la = strlen(a), lb = strlen(b);
            memcpy(joined + off, a, la);
            joined[off + la] = ' ';
            memcpy(joined + off + la + 1, b, lb);
            ml[k] = la + 1 + lb;
        }
        ms[k++] = joined + off;
        off += ml[k - 1] + 1;
    }
    if (rc == 0) rc = tok_merges_build(t, ms, ml, nm, err);
    free(joined);
    free(ms);
    free(ml);
    return rc;
}

/* The normalizer and pre-tokenizer (SentencePiece-style or byte-level, Split
 * regexes) and model.unk_token. */
static int load_pipeline(tok_tokenizer *t, const cJSON *root, const cJSON *model, kvi_error *err)
{
    t->algo = TOK_ALGO_BPE;
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItem(model, "ignore_merges"));
    if (tok_norm_create(&t->norm) != 0) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    split_list l = { .n = 0 };
    int rc = read_normalizer(t, cJSON_GetObjectItem(root, "normalizer"), 0, err);
    if (rc == 0) rc = read_pre_tokenizer(t, &l, cJSON_GetObjectItem(root, "pre_tokenizer"), 0, err);
    if (rc == 0 && l.n > 0)
        rc = tok_pretok_create_split((const char *const *)l.pat, l.behavior, l.n, &t->pretok, err);
    for (size_t i = 0; i < l.n; i++) free(l.pat[i]);
    if (rc) return rc;
    if (t->byte_level) t->escape_space = t->add_space_prefix = false;
    const cJSON *unk = cJSON_GetObjectItem(model, "unk_token");
    if (cJSON_IsString(unk)) t->unk = tok_find(t, unk->valuestring, strlen(unk->valuestring));
    return 0;
}

/* A boolean field of node; `dflt` when absent or null. */
static bool flag_or(const cJSON *node, const char *key, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItem(node, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* WordPiece: the model's fields, BertNormalizer's switches (another normalizer runs
 * through t->norm first), BertPreTokenizer. */
static int load_wordpiece(tok_tokenizer *t, const cJSON *root, const cJSON *model, kvi_error *err)
{
    const cJSON *prefix = cJSON_GetObjectItem(model, "continuing_subword_prefix");
    const char *cont = cJSON_IsString(prefix) ? prefix->valuestring : "##";
    if (strlen(cont) >= sizeof t->wpm_cont)
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: continuing_subword_prefix too long");
    tok_wpm_init(t, "", cont);
    t->wpm_hf = true;
    const cJSON *maxc = cJSON_GetObjectItem(model, "max_input_chars_per_word");
    t->wpm_max_chars = 100;
    if (cJSON_IsNumber(maxc))
        t->wpm_max_chars =
            maxc->valuedouble >= 1 && maxc->valuedouble < 1e9 ? (uint32_t)maxc->valuedouble : 0;
    const cJSON *norm = cJSON_GetObjectItem(root, "normalizer");
    if (str_is(cJSON_GetObjectItem(norm, "type"), "BertNormalizer")) {
        t->wpm_clean = flag_or(norm, "clean_text", true);
        t->wpm_chinese = flag_or(norm, "handle_chinese_chars", true);
        t->wpm_lower = flag_or(norm, "lowercase", true);
        t->wpm_strip_accents = flag_or(norm, "strip_accents", t->wpm_lower);
    } else {
        t->wpm_clean = t->wpm_chinese = t->wpm_lower = t->wpm_strip_accents = false;
        if (tok_norm_create(&t->norm) != 0) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
        int rc = read_normalizer(t, norm, 0, err);
        if (rc) return rc;
        t->escape_space = t->add_space_prefix = false;
    }
    const cJSON *pre = cJSON_GetObjectItem(root, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre) && !str_is(cJSON_GetObjectItem(pre, "type"), "BertPreTokenizer"))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "tokenizer.json: WordPiece with a pre-tokenizer other than "
                       "BertPreTokenizer is not supported");
    const cJSON *unk = cJSON_GetObjectItem(model, "unk_token");
    if (cJSON_IsString(unk)) t->unk = tok_find(t, unk->valuestring, strlen(unk->valuestring));
    t->sep = tok_find(t, "[SEP]", 5);
    return 0;
}

/* The id of a template's special token: special_tokens[name].ids (one id), else the
 * token of that text; -1 when neither. */
static int append_template_id(tok_tokenizer *t, const cJSON *specials, const char *name, int32_t **v,
                              size_t *n)
{
    const cJSON *ids = cJSON_GetObjectItem(cJSON_GetObjectItem(specials, name), "ids");
    int32_t one = tok_find(t, name, strlen(name));
    size_t k = cJSON_IsArray(ids) ? (size_t)cJSON_GetArraySize(ids) : 1;
    if (k > 64) return KVI_E_FORMAT;
    int32_t *nv = realloc(*v, (*n + k) * sizeof *nv);
    if (!nv) return KVI_E_NOMEM;
    *v = nv;
    for (size_t i = 0; i < k; i++) {
        const cJSON *id = cJSON_IsArray(ids) ? cJSON_GetArrayItem(ids, (int)i) : NULL;
        int32_t x = id ? (cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble < t->n_vocab
                              ? (int32_t)id->valuedouble
                              : -1)
                       : one;
        if (x < 0) return KVI_E_FORMAT;
        nv[(*n)++] = x;
    }
    return 0;
}

/* A TemplateProcessing's "single" template: the special tokens before $A and after. */
static int read_template(tok_tokenizer *t, const cJSON *proc, kvi_error *err)
{
    const cJSON *specials = cJSON_GetObjectItem(proc, "special_tokens"), *it;
    bool after = false;
    t->has_template = true;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(proc, "single"))
    {
        const cJSON *sp = cJSON_GetObjectItem(cJSON_GetObjectItem(it, "SpecialToken"), "id");
        if (cJSON_GetObjectItem(it, "Sequence")) {
            after = true;
            continue;
        }
        if (!cJSON_IsString(sp))
            return err_set(err, KVI_E_FORMAT, "tokenizer.json: a template item of no kind");
        int rc = after ? append_template_id(t, specials, sp->valuestring, &t->tmpl_post, &t->n_tmpl_post)
                       : append_template_id(t, specials, sp->valuestring, &t->tmpl_pre, &t->n_tmpl_pre);
        if (rc)
            return err_set(err, rc, "tokenizer.json: template token \"%.40s\" is not in the vocabulary",
                           sp->valuestring);
    }
    return 0;
}

/* [text, id] of RobertaProcessing / BertProcessing ("cls", "sep"). */
static int pair_id(const tok_tokenizer *t, const cJSON *pair)
{
    const cJSON *id = cJSON_GetArrayItem(pair, 1);
    if (!cJSON_IsNumber(id) || !(id->valuedouble >= 0 && id->valuedouble < t->n_vocab)) return -1;
    return (int32_t)id->valuedouble;
}

/* The post-processor: TemplateProcessing (alone or inside a Sequence), or
 * RobertaProcessing / BertProcessing (cls text sep); ByteLevel adds nothing. */
static int read_post_processor(tok_tokenizer *t, const cJSON *proc, int depth, kvi_error *err)
{
    const cJSON *type = cJSON_GetObjectItem(proc, "type"), *it;
    if (!cJSON_IsString(type) || depth > 8) return 0;
    if (strcmp(type->valuestring, "Sequence") == 0) {
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(proc, "processors"))
        {
            int rc = read_post_processor(t, it, depth + 1, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (strcmp(type->valuestring, "TemplateProcessing") == 0) return read_template(t, proc, err);
    if (strcmp(type->valuestring, "RobertaProcessing") == 0 ||
        strcmp(type->valuestring, "BertProcessing") == 0) {
        int32_t cls = pair_id(t, cJSON_GetObjectItem(proc, "cls")),
                sep = pair_id(t, cJSON_GetObjectItem(proc, "sep"));
        if (cls < 0 || sep < 0)
            return err_set(err, KVI_E_FORMAT, "tokenizer.json: cls / sep outside the vocabulary");
        free(t->tmpl_pre);
        free(t->tmpl_post);
        t->tmpl_pre = malloc(sizeof *t->tmpl_pre);
        t->tmpl_post = malloc(sizeof *t->tmpl_post);
        if (!t->tmpl_pre || !t->tmpl_post) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
        t->tmpl_pre[0] = cls;
        t->tmpl_post[0] = sep;
        t->n_tmpl_pre = t->n_tmpl_post = 1;
        t->has_template = true;
    }
    return 0;
}

/* tokenizer.json (parsed) into *out: vocabulary, merges, pipeline, BOS, then
 * tokenizer_config.json. *out is set as soon as it exists (the caller frees it
 * on failure). */
static int load(cJSON *root, const char *json_path, tok_tokenizer **out, kvi_error *err)
{
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItem(model, "merges");
    const cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
    int rc = check_model(model, vocab, merges, err);
    if (rc) return rc;
    int32_t n_vocab = 0;
    rc = vocab_size(vocab, added, &n_vocab, err);
    if (rc) return rc;
    tok_tokenizer *t;
    rc = tok_alloc(&t, n_vocab, err);
    if (rc) return rc;
    *out = t;
    rc = load_vocab(t, vocab, added, err);
    if (rc) return rc;
    if (str_is(cJSON_GetObjectItem(model, "type"), "WordPiece")) {
        rc = load_wordpiece(t, root, model, err);
    } else {
        rc = load_merges(t, merges, err);
        if (rc == 0) rc = load_pipeline(t, root, model, err);
    }
    if (rc) return rc;
    rc = read_post_processor(t, cJSON_GetObjectItem(root, "post_processor"), 0, err);
    if (rc) return rc;
    if (read_config(t, json_path) != 0) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    if (t->has_template) { /* the template decides; BOS / EOS report what it adds */
        t->add_bos = t->n_tmpl_pre > 0;
        t->add_eos = t->n_tmpl_post > 0;
        if (t->bos < 0 && t->n_tmpl_pre > 0) t->bos = t->tmpl_pre[0];
        if (t->algo == TOK_ALGO_WPM && t->n_tmpl_post > 0) t->sep = t->tmpl_post[t->n_tmpl_post - 1];
    }
    t->special_leftmost = true;
    return tok_finish(t, err);
}

int tokenizer_load_hf(const char *json_path, tok_tokenizer **out, kvi_error *err)
{
    if (!json_path || !out) return err_set(err, KVI_E_INVALID, "tokenizer: no path");
    *out = NULL;
    bool nomem = false;
    char *text = slurp(json_path, &nomem);
    if (!text && nomem) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory reading %s", json_path);
    if (!text) return err_set(err, KVI_E_IO, "tokenizer: cannot read %s", json_path);
    bool oom = false;
    cJSON *root = kvi_json_parse(text, strlen(text), &oom);
    free(text);
    if (oom) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory reading %s", json_path);
    if (!root) return err_set(err, KVI_E_FORMAT, "tokenizer: %s is not valid JSON", json_path);
    tok_tokenizer *t = NULL;
    int rc = load(root, json_path, &t, err);
    cJSON_Delete(root);
    if (rc) {
        tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
