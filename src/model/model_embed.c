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
        const int32_t n = kvi_tokenize(m, text, len, false, true, cap ? out : NULL, cap);
        free(text);
        return n;
    }
    /* [BOS] query [EOS] [SEP] document [EOS] by the vocabulary's flags */
    return tokenizer_encode_pair(m->tok, query ? query : "", query_len, doc ? doc : "", doc_len, out, NULL,
                                 cap);
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
