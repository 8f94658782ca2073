/*
 * tokenizer_hf.c — loading a Hugging Face tokenizer.json (model.type "BPE").
 *
 * Two shapes are understood:
 *  - SentencePiece-style BPE: normalizer Prepend "▁" (dummy prefix) and Replace
 *    " " -> "▁" (or a Metaspace pre-tokenizer), byte_fallback to <0xXX> tokens, no
 *    pre-tokenizer: the whole text is one piece merged by rank;
 *  - byte-level BPE: a ByteLevel pre-tokenizer (GPT-2 regex unless use_regex is
 *    false), optionally after Split pre-tokenizers whose regexes run first.
 * model.vocab gives text -> id, added_tokens are special (control when "special",
 * else user-defined), model.merges are "a b" strings or ["a", "b"] pairs in rank
 * order. bos/eos/add_bos_token/add_eos_token/chat_template come from
 * tokenizer_config.json beside the file when it exists. Every id is checked to lie
 * in [0, n_vocab) and every id to have a text.
 */
#include "base/error.h"
#include "base/file.h"
#include "tokenizer/tokenizer_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file as a NUL-terminated string, NULL when it cannot be read. */
static char *slurp(const char *path)
{
    char *data;
    size_t n;
    return file_read_all(path, 0, &data, &n) == FILE_OK ? data : NULL;
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

static void read_config(tok_tokenizer *t, const char *json_path)
{
    const char *slash = strrchr(json_path, '/');
    size_t dir = slash ? (size_t)(slash - json_path + 1) : 0;
    char *path = malloc(dir + 32);
    if (!path) return;
    memcpy(path, json_path, dir);
    strcpy(path + dir, "tokenizer_config.json");
    char *text = slurp(path);
    free(path);
    cJSON *c = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!c) return;
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
    if (cJSON_IsString(tmpl) && !t->chat_template) t->chat_template = strdup(tmpl->valuestring);
    cJSON_Delete(c);
}

/* Looks at the normalizer / pre-tokenizer and sets the SPM-style or byte-level flags;
 * collects Split regexes into pats (up to 8). */
static void scan_pipeline(tok_tokenizer *t, const cJSON *node, const char **pats, size_t *n_pats, bool *regex)
{
    if (!cJSON_IsObject(node)) return;
    const cJSON *type = cJSON_GetObjectItem(node, "type");
    if (str_is(type, "Sequence")) {
        const cJSON *it;
        const cJSON *list = cJSON_GetObjectItem(node, "normalizers");
        if (!list) list = cJSON_GetObjectItem(node, "pretokenizers");
        cJSON_ArrayForEach(it, list) scan_pipeline(t, it, pats, n_pats, regex);
    } else if (str_is(type, "Prepend") && str_is(cJSON_GetObjectItem(node, "prepend"), "\xE2\x96\x81")) {
        t->add_space_prefix = true;
    } else if (str_is(type, "Replace") && str_is(cJSON_GetObjectItem(node, "content"), "\xE2\x96\x81")) {
        t->escape_space = true;
    } else if (str_is(type, "Metaspace")) {
        t->escape_space = true;
        const cJSON *sch = cJSON_GetObjectItem(node, "prepend_scheme");
        const cJSON *aps = cJSON_GetObjectItem(node, "add_prefix_space");
        t->add_space_prefix = sch ? !str_is(sch, "never") : !cJSON_IsFalse(aps);
    } else if (str_is(type, "ByteLevel")) {
        t->byte_level = true;
        if (cJSON_IsFalse(cJSON_GetObjectItem(node, "use_regex"))) *regex = false;
    } else if (str_is(type, "Split")) {
        const cJSON *re = cJSON_GetObjectItem(cJSON_GetObjectItem(node, "pattern"), "Regex");
        if (cJSON_IsString(re) && *n_pats < 8) pats[(*n_pats)++] = re->valuestring;
    }
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

/* The shape this loader reads: model.type "BPE" with a model.vocab object and a
 * model.merges array. */
static int check_model(const cJSON *model, const cJSON *vocab, const cJSON *merges, kvi_error *err)
{
    if (!cJSON_IsObject(model) || !cJSON_IsObject(vocab))
        return err_set(err, KVI_E_FORMAT, "tokenizer.json: no model.vocab object");
    if (!str_is(cJSON_GetObjectItem(model, "type"), "BPE"))
        return err_set(err, KVI_E_UNSUPPORTED, "tokenizer.json: only model.type \"BPE\" is supported");
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
    const char *pats[8];
    size_t n_pats = 0;
    bool regex = true;
    scan_pipeline(t, cJSON_GetObjectItem(root, "normalizer"), pats, &n_pats, &regex);
    scan_pipeline(t, cJSON_GetObjectItem(root, "pre_tokenizer"), pats, &n_pats, &regex);
    if (t->byte_level) {
        int rc = 0;
        t->escape_space = t->add_space_prefix = false;
        if (n_pats > 0)
            rc = tok_pretok_create_patterns(pats, n_pats, &t->pretok, err);
        else if (regex)
            rc = tok_pretok_create("gpt-2", &t->pretok, err);
        if (rc) return rc;
    }
    const cJSON *unk = cJSON_GetObjectItem(model, "unk_token");
    if (cJSON_IsString(unk)) t->unk = tok_find(t, unk->valuestring, strlen(unk->valuestring));
    return 0;
}

/* BOS from the post-processor template (tokenizer_config.json may override it). */
static void read_post_processor(tok_tokenizer *t, const cJSON *root)
{
    const cJSON *single = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "post_processor"), "single");
    const cJSON *first = cJSON_GetObjectItem(cJSON_GetArrayItem(single, 0), "SpecialToken");
    const cJSON *first_id = cJSON_GetObjectItem(first, "id");
    if (cJSON_IsString(first_id)) {
        int32_t id = tok_find(t, first_id->valuestring, strlen(first_id->valuestring));
        if (id >= 0) {
            t->bos = id;
            t->add_bos = true;
        }
    }
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
    rc = load_merges(t, merges, err);
    if (rc) return rc;
    rc = load_pipeline(t, root, model, err);
    if (rc) return rc;
    read_post_processor(t, root);
    read_config(t, json_path);
    return tok_finish(t, err);
}

int tokenizer_load_hf(const char *json_path, tok_tokenizer **out, kvi_error *err)
{
    if (!json_path || !out) return err_set(err, KVI_E_INVALID, "tokenizer: no path");
    *out = NULL;
    char *text = slurp(json_path);
    if (!text) return err_set(err, KVI_E_IO, "tokenizer: cannot read %s", json_path);
    cJSON *root = cJSON_Parse(text);
    free(text);
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
