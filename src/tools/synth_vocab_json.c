/*
 * synth_vocab_json.c — tokenizer.json (byte-level BPE) to GGUF tokenizer keys.
 *
 * Data: tok[n] the token texts by id (model.vocab and added_tokens; an id no
 * entry names is an error, so the table has no holes), type[n] their GGUF token
 * types (1 normal, 3 control for special added tokens, 4 user-defined for other
 * added tokens), merges[m] "a b" in rank order. The pre-tokenizer's regex is
 * mapped to the tokenizer.ggml.pre name llama.cpp uses for it (llama-bpe,
 * qwen2); BOS/EOS and add_bos come from loading the file itself
 * (kvi_vocab_load, which reads tokenizer_config.json beside it), so the GGUF
 * tokenizes as the tokenizer.json does.
 */
#include "tools/synth_vocab_json.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"
#include "formats/json_util.h"

enum { VJ_MAX_TOKENS = 1 << 22 };

typedef struct synth_json_vocab {
    char **tok;
    int32_t *type;
    int n;
    char **merges;
    int n_merges;
    const char *pre;  /* tokenizer.ggml.pre */
    int32_t bos, eos; /* -1: none */
    bool add_bos;
} vj;

void synth_vocab_json_free(vj *v)
{
    if (!v) return;
    if (v->tok)
        for (int i = 0; i < v->n; i++) free(v->tok[i]);
    if (v->merges)
        for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tok);
    free(v->type);
    free(v->merges);
    free(v);
}

int synth_vocab_json_n(const vj *v) { return v->n; }

/* The tokenizer.ggml.pre name of the pre-tokenizer's Split regex, or NULL. */
static const char *pre_name(const cJSON *pre)
{
    char *text = cJSON_PrintUnformatted(pre);
    const char *name = NULL;
    if (text) {
        /* the number rule tells the two families apart: Llama 3 groups up to
         * three digits, Qwen2 splits every digit */
        if (strstr(text,
                   "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}"))
            name = "llama-bpe";
        else if (strstr(text,
                        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?"))
            name = "qwen2";
    }
    free(text);
    return name;
}

static int put_token(vj *v, int id, const char *text, int32_t type, const char *path, kvi_error *err)
{
    if (id < 0 || id >= v->n)
        return err_set(err, KVI_E_FORMAT, "synth: %s: token id %d out of range", path, id);
    free(v->tok[id]);
    if (!(v->tok[id] = strdup(text))) return err_set(err, KVI_E_NOMEM, "synth: out of memory");
    v->type[id] = type;
    return 0;
}

static int read_json(const cJSON *root, const char *path, vj *v, kvi_error *err)
{
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    const cJSON *type = cJSON_GetObjectItem(model, "type");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItem(model, "merges");
    const cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
    const cJSON *dec = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "decoder"), "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0 || !cJSON_IsString(dec) ||
        strcmp(dec->valuestring, "ByteLevel") != 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "synth: %s: only byte-level BPE tokenizers (Llama 3, Qwen) can be "
                       "written as GGUF metadata",
                       path);
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return err_set(err, KVI_E_FORMAT, "synth: %s: model.vocab / model.merges missing", path);
    int max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= VJ_MAX_TOKENS)
            return err_set(err, KVI_E_FORMAT, "synth: %s: a vocab id is not in 0..2^22", path);
        if (e->valueint > max_id) max_id = e->valueint;
    }
    cJSON_ArrayForEach(e, added)
    {
        const cJSON *id = cJSON_GetObjectItem(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= VJ_MAX_TOKENS)
            return err_set(err, KVI_E_FORMAT, "synth: %s: an added token's id is not in 0..2^22", path);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) return err_set(err, KVI_E_FORMAT, "synth: %s: an empty vocabulary", path);
    v->n = max_id + 1;
    v->tok = calloc((size_t)v->n, sizeof *v->tok);
    v->type = calloc((size_t)v->n, sizeof *v->type);
    v->n_merges = cJSON_GetArraySize(merges);
    v->merges = calloc((size_t)v->n_merges + 1, sizeof *v->merges);
    if (!v->tok || !v->type || !v->merges) return err_set(err, KVI_E_NOMEM, "synth: out of memory");
    int rc = 0;
    cJSON_ArrayForEach(e, vocab)
    {
        if ((rc = put_token(v, e->valueint, e->string, 1, path, err))) return rc;
    }
    cJSON_ArrayForEach(e, added)
    {
        const cJSON *c = cJSON_GetObjectItem(e, "content");
        if (!cJSON_IsString(c))
            return err_set(err, KVI_E_FORMAT, "synth: %s: an added token has no content", path);
        const int32_t t = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) ? 3 : 4;
        if ((rc = put_token(v, cJSON_GetObjectItem(e, "id")->valueint, c->valuestring, t, path, err)))
            return rc;
    }
    for (int i = 0; i < v->n; i++)
        if (!v->tok[i]) return err_set(err, KVI_E_FORMAT, "synth: %s: no token has id %d", path, i);
    int k = 0;
    cJSON_ArrayForEach(e, merges)
    {
        /* "a b", or ["a", "b"] in newer files */
        const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);
        char *m = NULL;
        if (cJSON_IsString(e)) {
            m = strdup(e->valuestring);
        } else if (cJSON_IsString(a) && cJSON_IsString(b)) {
            const size_t la = strlen(a->valuestring), lb = strlen(b->valuestring);
            if ((m = malloc(la + lb + 2))) {
                memcpy(m, a->valuestring, la);
                m[la] = ' ';
                memcpy(m + la + 1, b->valuestring, lb + 1);
            }
        } else {
            return err_set(err, KVI_E_FORMAT, "synth: %s: merge %d is neither \"a b\" nor [a, b]", path, k);
        }
        if (!m) return err_set(err, KVI_E_NOMEM, "synth: out of memory");
        v->merges[k++] = m;
    }
    return 0;
}

vj *synth_vocab_json_load(const char *path, kvi_error *err)
{
    char *text = NULL;
    size_t len = 0;
    const int fr = file_read_all(path, 0, &text, &len);
    if (fr == FILE_NOMEM) {
        err_set(err, KVI_E_NOMEM, "synth: out of memory reading %s", path);
        return NULL;
    }
    if (fr != FILE_OK) {
        err_set(err, KVI_E_IO, "synth: cannot read %s", path);
        return NULL;
    }
    bool oom = false;
    cJSON *root = kvi_json_parse(text, len, &oom);
    free(text);
    if (!root) {
        if (oom)
            err_set(err, KVI_E_NOMEM, "synth: out of memory reading %s", path);
        else
            err_set(err, KVI_E_FORMAT, "synth: %s is not valid JSON", path);
        return NULL;
    }
    vj *v = calloc(1, sizeof *v);
    int rc = v ? read_json(root, path, v, err) : err_set(err, KVI_E_NOMEM, "synth: out of memory");
    if (!rc && !(v->pre = pre_name(cJSON_GetObjectItem(root, "pre_tokenizer"))))
        rc = err_set(
            err, KVI_E_UNSUPPORTED,
            "synth: %s: its pre-tokenizer regex is neither Llama 3's nor Qwen2's; kvinfer cannot name "
            "it in GGUF metadata",
            path);
    cJSON_Delete(root);
    /* BOS / EOS as the tokenizer itself has them (tokenizer_config.json included) */
    kvi_model *t = rc ? NULL : kvi_vocab_load(path, err);
    if (!rc && !t) rc = err->code ? err->code : KVI_E_FORMAT;
    if (t) {
        v->bos = kvi_token_bos(t);
        v->eos = kvi_token_eos(t);
        v->add_bos = kvi_model_add_bos(t);
        kvi_model_free(t);
    }
    if (rc) {
        synth_vocab_json_free(v);
        return NULL;
    }
    return v;
}

int synth_vocab_json_write(gguf_writer *w, const vj *v, kvi_error *err)
{
    if (gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") < 0 ||
        gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre) < 0 ||
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (uint64_t)v->n) <
            0 ||
        gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v->type, (uint64_t)v->n) < 0 ||
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                (uint64_t)v->n_merges) < 0 ||
        (v->bos >= 0 && gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos) < 0) ||
        (v->eos >= 0 && gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos) < 0) ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos) < 0 ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false) < 0)
        return err_set(err, KVI_E_NOMEM, "synth: could not add the tokenizer metadata");
    return 0;
}
