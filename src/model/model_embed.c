/*
 * model_embed.c — the public calls about a model's embeddings (kvinfer.h):
 * pooling names, the file's pooling and output widths, the query + document
 * sequence of a reranker as llama.cpp's server builds it, and llama.cpp's
 * embd_normalize. No state: everything is read from the model (model_enc.h).
 */
#include "model/model_enc.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const pooling_names[] = { "none", "mean", "cls", "last", "rank" };

const char *kvi_pooling_name(kvi_pooling p)
{
    return p >= KVI_POOLING_NONE && p <= KVI_POOLING_RANK ? pooling_names[p] : NULL;
}

int kvi_pooling_parse(const char *name, kvi_pooling *out)
{
    if (name && strcmp(name, "model") == 0) return *out = KVI_POOLING_MODEL, 0;
    for (int i = 0; name && i <= KVI_POOLING_RANK; i++)
        if (strcmp(name, pooling_names[i]) == 0) return *out = (kvi_pooling)i, 0;
    return KVI_E_INVALID;
}

kvi_pooling kvi_model_pooling(const kvi_model *m)
{
    return m && m->enc ? (kvi_pooling)m->enc->pooling : KVI_POOLING_NONE;
}

bool kvi_model_is_encoder(const kvi_model *m) { return m && m->enc && m->enc->encoder; }

int32_t kvi_n_embd_out(const kvi_model *m)
{
    return !m ? 0 : m->enc && m->enc->n_embd_out > 0 ? m->enc->n_embd_out : m->dim;
}

int32_t kvi_n_cls_out(const kvi_model *m) { return m && m->enc ? m->enc->n_cls_out : 0; }

/* text into out[n .. cap) (plain tokenisation, no BOS / EOS); the new count or a
 * negative KVI_E_* */
static int32_t append_text(const kvi_model *m, const char *s, size_t len, bool parse_special, int32_t *out,
                           int32_t n, int32_t cap)
{
    const int32_t room = cap > n ? cap - n : 0;
    const int32_t k = kvi_tokenize(m, s, len, false, parse_special, room ? out + n : NULL, room);
    return k < 0 ? k : n + k;
}

static int32_t append_tok(int32_t *out, int32_t n, int32_t cap, int32_t id)
{
    if (id >= 0 && n < cap) out[n] = id;
    return id >= 0 ? n + 1 : n;
}

static bool gguf_flag(const gguf_ctx *g, const char *key, bool def)
{
    bool v = def;
    return g && gguf_get_bool(g, key, &v, NULL) == 0 ? v : def;
}

/* The rerank template with every {query}, then every {document}, replaced (malloc'd). */
static char *fill_template(const char *t, const char *q, size_t ql, const char *d, size_t dl, size_t *len)
{
    const char *keys[2] = { "{query}", "{document}" };
    const char *vals[2] = { q, d };
    const size_t vl[2] = { ql, dl };
    char *cur = strdup(t);
    for (int k = 0; cur && k < 2; k++) {
        size_t n = 0, kl = strlen(keys[k]);
        for (const char *p = strstr(cur, keys[k]); p; p = strstr(p + kl, keys[k])) n++;
        char *next = malloc(strlen(cur) + n * vl[k] + 1), *o = next;
        for (const char *p = cur, *h; next && p; p = h ? h + kl : NULL) {
            h = strstr(p, keys[k]);
            const size_t seg = h ? (size_t)(h - p) : strlen(p);
            memcpy(o, p, seg), o += seg;
            if (h) memcpy(o, vals[k], vl[k]), o += vl[k];
        }
        if (next) *o = 0;
        free(cur);
        cur = next;
    }
    if (cur) *len = strlen(cur);
    return cur;
}

int32_t kvi_rerank_tokenize(const kvi_model *m, const char *query, size_t query_len, const char *doc,
                            size_t doc_len, int32_t *out, int32_t cap)
{
    if (!m || !m->tok || (!query && query_len) || (!doc && doc_len) || cap < 0) return KVI_E_INVALID;
    const gguf_ctx *g = m->gguf;
    const char *tmpl = g ? gguf_get_str(g, "tokenizer.chat_template.rerank") : NULL;
    if (tmpl) {
        size_t len = 0;
        char *text = fill_template(tmpl, query ? query : "", query_len, doc ? doc : "", doc_len, &len);
        if (!text) return KVI_E_NOMEM;
        const int32_t n = append_text(m, text, len, true, out, 0, cap);
        free(text);
        return n;
    }
    /* llama.cpp's defaults: WordPiece adds [SEP] between, SentencePiece and BPE do not */
    const char *model = g ? gguf_get_str(g, "tokenizer.ggml.model") : NULL;
    const bool add_eos = gguf_flag(g, "tokenizer.ggml.add_eos_token", false);
    const bool add_sep = gguf_flag(g, "tokenizer.ggml.add_sep_token", model && strcmp(model, "bert") == 0);
    int64_t sep = -1;
    if (!g || gguf_get_int(g, "tokenizer.ggml.seperator_token_id", &sep, NULL) != 0) sep = -1;
    const int32_t eos = kvi_token_eos(m) >= 0 ? kvi_token_eos(m) : (int32_t)sep;
    int32_t n = kvi_model_add_bos(m) ? append_tok(out, 0, cap, kvi_token_bos(m)) : 0;
    if ((n = append_text(m, query, query_len, false, out, n, cap)) < 0) return n;
    if (add_eos) n = append_tok(out, n, cap, eos);
    if (add_sep) n = append_tok(out, n, cap, (int32_t)sep);
    if ((n = append_text(m, doc, doc_len, false, out, n, cap)) < 0) return n;
    if (add_eos) n = append_tok(out, n, cap, eos);
    return n;
}

void kvi_embd_normalize(float *v, int32_t n, int mode)
{
    double sum = 0;
    if (!v || n <= 0 || mode < 0) return;
    if (mode == 0) { /* max |v| to 32760, the int16 range */
        for (int32_t i = 0; i < n; i++) sum = fabs(v[i]) > sum ? fabs(v[i]) : sum;
        sum /= 32760.0;
    } else if (mode == 2) {
        for (int32_t i = 0; i < n; i++) sum += (double)v[i] * v[i];
        sum = sqrt(sum);
    } else { /* the p-norm, 1: taxicab */
        for (int32_t i = 0; i < n; i++) sum += pow(fabs(v[i]), mode);
        sum = pow(sum, 1.0 / mode);
    }
    const float scale = sum > 0 ? (float)(1.0 / sum) : 0.0f;
    for (int32_t i = 0; i < n; i++) v[i] *= scale;
}
