/*
 * synth_bert.c — a random BERT encoder as llama.cpp's converter lays it out
 * (synth_bert.h): bert.* keys, token_embd, token_types, position_embd,
 * token_embd_norm, per layer attn_q/k/v/output with biases, attn_output_norm,
 * ffn_up / ffn_down with biases, layer_output_norm.
 *
 * Data: matrices and biases N(0, 0.02), norm weights 1 + N(0, 0.02), norm biases
 * N(0, 0.02); each tensor's stream seeded from the seed and the tensor's name, so a
 * tensor's values do not depend on the others. Invariant: every tensor declared in
 * the header is written, in the same order, with quant_row_bytes(type, ne0) * ne1
 * bytes.
 */
#include "tools/synth_bert.h"

#include "base/error.h"
#include "base/rng.h"
#include "formats/gguf.h"
#include "formats/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bert_preset {
    const char *name;
    int dim, ffn, layers, heads, pooling; /* pooling: llama.cpp's pooling_type */
} bert_preset;

/* sentence-transformers/all-MiniLM-L6-v2 (mean pooling), BAAI/bge-small-en-v1.5 and
 * bge-base-en-v1.5 (CLS pooling): hidden_size, intermediate_size, layers, heads of
 * their config.json; vocabulary 30522, 512 positions, 2 token types. */
static const bert_preset presets[] = {
    { "all-minilm-l6", 384, 1536, 6, 12, 1 },
    { "bge-small", 384, 1536, 12, 12, 2 },
    { "bge-base", 768, 3072, 12, 12, 2 },
};

int synth_bert_preset(const char *name, kvi_synth_params *p)
{
    for (size_t i = 0; name && i < sizeof presets / sizeof *presets; i++) {
        if (strcmp(name, presets[i].name) != 0) continue;
        memset(p, 0, sizeof *p);
        *p = (kvi_synth_params){ .arch = "bert",
                                 .dim = presets[i].dim,
                                 .ffn_dim = presets[i].ffn,
                                 .n_layers = presets[i].layers,
                                 .n_heads = presets[i].heads,
                                 .n_kv_heads = presets[i].heads,
                                 .n_vocab = 30522,
                                 .n_ctx = 512,
                                 .type = KVI_TYPE_F32,
                                 .name = presets[i].name,
                                 .window_pattern = presets[i].pooling };
        return 0;
    }
    return KVI_E_INVALID;
}

typedef enum { BK_MATRIX, BK_NORM, BK_BIAS } bert_kind;

typedef struct bert_tensor {
    char name[48];
    int64_t ne[2];
    kvi_type type;
    bert_kind kind;
} bert_tensor;

typedef struct bert_job {
    bert_tensor *t; /* [cap] */
    int n, cap;
} bert_job;

static void add(bert_job *j, const char *name, int64_t ne0, int64_t ne1, kvi_type type, bert_kind kind)
{
    if (j->n == j->cap) return;
    bert_tensor *t = &j->t[j->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne[0] = ne0, t->ne[1] = ne1, t->type = type, t->kind = kind;
}

static void build(bert_job *j, const kvi_synth_params *p, int n_vocab, int n_ctx)
{
    const int64_t d = p->dim, f = p->ffn_dim;
    char nm[48];
    add(j, "token_embd.weight", d, n_vocab, p->type, BK_MATRIX);
    add(j, "token_types.weight", d, 2, KVI_TYPE_F32, BK_MATRIX);
    add(j, "position_embd.weight", d, n_ctx, KVI_TYPE_F32, BK_MATRIX);
    add(j, "token_embd_norm.weight", d, 1, KVI_TYPE_F32, BK_NORM);
    add(j, "token_embd_norm.bias", d, 1, KVI_TYPE_F32, BK_BIAS);
    for (int l = 0; l < p->n_layers; l++) {
        static const struct {
            const char *role;
            int in, out; /* 0: dim, 1: ffn */
        } mats[] = { { "attn_q", 0, 0 },      { "attn_k", 0, 0 }, { "attn_v", 0, 0 },
                     { "attn_output", 0, 0 }, { "ffn_up", 0, 1 }, { "ffn_down", 1, 0 } };
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, mats[i].role);
            add(j, nm, mats[i].in ? f : d, mats[i].out ? f : d, p->type, BK_MATRIX);
            snprintf(nm, sizeof nm, "blk.%d.%s.bias", l, mats[i].role);
            add(j, nm, mats[i].out ? f : d, 1, KVI_TYPE_F32, BK_BIAS);
            if (i == 3 || i == 5) { /* the post-LN after attention and after the FFN */
                snprintf(nm, sizeof nm, "blk.%d.%s_norm.weight", l, i == 3 ? "attn_output" : "layer_output");
                add(j, nm, d, 1, KVI_TYPE_F32, BK_NORM);
                snprintf(nm, sizeof nm, "blk.%d.%s_norm.bias", l, i == 3 ? "attn_output" : "layer_output");
                add(j, nm, d, 1, KVI_TYPE_F32, BK_BIAS);
            }
        }
    }
}

static int metadata(gguf_writer *w, const kvi_synth_params *p, int n_ctx, const gguf_ctx *src)
{
    int bad = 0;
    bad |= gguf_writer_set_str(w, "general.architecture", "bert") < 0;
    bad |= gguf_writer_set_str(w, "general.name", p->name && p->name[0] ? p->name : "kvinfer-synth-bert") < 0;
    bad |= gguf_writer_set_u32(w, "bert.context_length", (uint32_t)n_ctx) < 0;
    bad |= gguf_writer_set_u32(w, "bert.embedding_length", (uint32_t)p->dim) < 0;
    bad |= gguf_writer_set_u32(w, "bert.feed_forward_length", (uint32_t)p->ffn_dim) < 0;
    bad |= gguf_writer_set_u32(w, "bert.block_count", (uint32_t)p->n_layers) < 0;
    bad |= gguf_writer_set_u32(w, "bert.attention.head_count", (uint32_t)p->n_heads) < 0;
    bad |=
        gguf_writer_set_f32(w, "bert.attention.layer_norm_epsilon", p->rms_eps > 0 ? p->rms_eps : 1e-12f) < 0;
    bad |= gguf_writer_set_bool(w, "bert.attention.causal", false) < 0;
    bad |= gguf_writer_set_u32(w, "bert.pooling_type", p->window_pattern == 2 ? 2u : 1u) < 0;
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *key = gguf_kv_key(src, i);
        if (key && strncmp(key, "tokenizer.", 10) == 0) bad |= gguf_writer_copy_kv(w, src, key) < 0;
    }
    return bad ? KVI_E_NOMEM : 0;
}

/* Normal deviates (Box-Muller), one stream per tensor name */
static void fill(float *dst, int64_t n, uint64_t seed, const char *name, int64_t row, float mean)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) h = (h ^ *c) * 0x100000001B3ull;
    uint64_t x = seed ^ h ^ ((uint64_t)row * 0x9E3779B97F4A7C15ull);
    rng_state r;
    rng_seed(&r, rng_splitmix64(&x));
    for (int64_t i = 0; i < n; i += 2) {
        const uint64_t u = rng_next(&r);
        const float u1 = (float)((u >> 40) + 1) * (1.0f / 16777216.0f);
        const float u2 = (float)((u >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
        const float rad = sqrtf(-2.0f * logf(u1)), th = 6.28318530718f * u2;
        dst[i] = mean + 0.02f * rad * cosf(th);
        if (i + 1 < n) dst[i + 1] = mean + 0.02f * rad * sinf(th);
    }
}

static int write_data(const bert_job *j, gguf_writer *w, FILE *f, uint64_t seed, kvi_error *err)
{
    int rc = 0;
    for (int i = 0; !rc && i < j->n; i++) {
        const bert_tensor *t = &j->t[i];
        const size_t rb = quant_row_bytes(t->type, t->ne[0]);
        uint8_t *buf = malloc(rb * (size_t)t->ne[1]);
        float *row = malloc((size_t)t->ne[0] * sizeof *row);
        rc = buf && row ? 0 : err_set(err, KVI_E_NOMEM, "synth: out of memory");
        for (int64_t r = 0; !rc && r < t->ne[1]; r++) {
            fill(row, t->ne[0], seed, t->name, r, t->kind == BK_NORM ? 1.0f : 0.0f);
            if (quant_quantize_row(t->type, row, buf + (size_t)r * rb, t->ne[0]) < 0)
                rc = err_set(err, KVI_E_INVALID, "synth: %s: cannot quantise to %s", t->name,
                             kvi_type_name(t->type));
        }
        if (!rc) rc = gguf_writer_write_tensor(w, f, i, buf, err);
        free(buf), free(row);
    }
    return rc;
}

int synth_bert_write(const kvi_synth_params *p, const char *path, kvi_error *err)
{
    if (!p->vocab_from)
        return err_set(err, KVI_E_INVALID,
                       "synth: --arch bert needs --vocab-from a GGUF with a WordPiece vocabulary "
                       "(../shared/golden/embed/ggml-vocab-bert-bge.gguf)");
    if (p->dim < 1 || p->ffn_dim < 1 || p->n_layers < 1 || p->n_heads < 1 || p->dim % p->n_heads ||
        p->n_layers > 1024)
        return err_set(err, KVI_E_INVALID,
                       "synth: bert needs dim, ffn, layers and heads (dim a multiple of heads)");
    gguf_ctx *src = NULL;
    int rc = gguf_open(p->vocab_from, true, &src, err);
    if (rc) return rc;
    gguf_vtype et;
    uint64_t nv = 0;
    if (gguf_get_arr_info(src, "tokenizer.ggml.tokens", &et, &nv, err) != 0 || nv == 0 || nv > (1u << 24)) {
        gguf_close(src);
        return err_set(err, KVI_E_FORMAT, "synth: %s has no vocabulary", p->vocab_from);
    }
    const int n_ctx = p->n_ctx > 0 ? p->n_ctx : 512;
    bert_job j = { .cap = 5 + 16 * p->n_layers };
    j.t = calloc((size_t)j.cap, sizeof *j.t);
    gguf_writer *w = gguf_writer_create();
    rc = j.t && w ? 0 : err_set(err, KVI_E_NOMEM, "synth: out of memory");
    if (!rc) {
        build(&j, p, (int)nv, n_ctx);
        rc = metadata(w, p, n_ctx, src) ? err_set(err, KVI_E_NOMEM, "synth: out of memory") : 0;
    }
    for (int i = 0; !rc && i < j.n; i++)
        if (gguf_writer_add_tensor(w, j.t[i].name, j.t[i].type, j.t[i].ne[1] > 1 ? 2 : 1, j.t[i].ne) < 0)
            rc = err_set(err, KVI_E_INVALID, "synth: tensor %s", j.t[i].name);
    FILE *f = rc ? NULL : fopen(path, "wb");
    if (!rc && !f) rc = err_set(err, KVI_E_IO, "synth: cannot create %s", path);
    if (!rc) rc = gguf_writer_write_header(w, f, err);
    if (!rc) rc = write_data(&j, w, f, p->seed, err);
    if (f && fclose(f) != 0 && !rc) rc = err_set(err, KVI_E_IO, "synth: writing %s failed", path);
    if (rc && f) remove(path);
    gguf_writer_free(w);
    gguf_close(src);
    free(j.t);
    return rc;
}
