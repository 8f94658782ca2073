/*
 * model_info.c — what a model costs, without running it: hyper-parameters read
 * from a file's metadata alone, parameter counts and the weight bytes one decode
 * step streams.
 *
 * kvi_model_info_from_file() maps a GGUF file read-only and parses only its
 * header (gguf_open with use_mmap: key/values and tensor infos are validated, the
 * pages of the data section are never touched), so a 40 GB file costs a few
 * page reads. Other formats (llama2.c, Hugging Face folders) are loaded in full.
 *
 * Invariants: every hyper-parameter taken from a file is range-checked here
 * (1 .. INFO_MAX_*) before it is stored; head_dim is the key length, or
 * dim / n_heads only when that division is exact; n_heads is a multiple of
 * n_kv_heads. Counts use uint64_t so a 400B model does not overflow.
 */
#include "error.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"

#include <stdio.h>
#include <string.h>

#define INFO_MAX_DIM (1 << 20)
#define INFO_MAX_LAYERS 4096
#define INFO_MAX_HEADS 65536
#define INFO_MAX_CTX (1 << 30)
#define INFO_MAX_VOCAB (1 << 24)

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src && src[n] && n + 1 < cap; n++)
        dst[n] = (unsigned char)src[n] < 0x20 ? '?' : src[n];   /* one printable line */
    dst[n] = 0;
}

/* "<arch>.<key>" as an integer in [lo, hi]; def when absent and not required. */
static int meta_int(const gguf_ctx *g, const char *file, const char *arch, const char *key,
                    bool required, int64_t def, int64_t lo, int64_t hi, int *out, kvi_error *err)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t v = def;
    int rc = gguf_get_int(g, full, &v, err);
    if (rc == KVI_E_FORMAT) return rc;
    if (rc != 0) {
        if (required)
            return kvi_err_set(err, KVI_E_FORMAT, "model info: %s: metadata key %s is missing", file, full);
        v = def;
    }
    if (v < lo || v > hi)
        return kvi_err_set(err, KVI_E_FORMAT, "model info: %s: %s = %lld is outside [%lld, %lld]", file,
                           full, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

/* Fills out from a parsed GGUF header. */
static int info_from_gguf(const gguf_ctx *g, const char *file, kvi_model_info *out, kvi_error *err)
{
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch || !arch[0])
        return kvi_err_set(err, KVI_E_FORMAT, "model info: %s: general.architecture is missing", file);
    if (strlen(arch) > 64)
        return kvi_err_set(err, KVI_E_FORMAT, "model info: %s: general.architecture is %zu bytes long",
                           file, strlen(arch));
    copy_str(out->arch, sizeof out->arch, arch);
    copy_str(out->name, sizeof out->name, gguf_get_str(g, "general.name"));

    int rc;
    if ((rc = meta_int(g, file, arch, "context_length", true, 0, 1, INFO_MAX_CTX, &out->n_ctx_train, err)) ||
        (rc = meta_int(g, file, arch, "embedding_length", true, 0, 1, INFO_MAX_DIM, &out->dim, err)) ||
        (rc = meta_int(g, file, arch, "block_count", true, 0, 1, INFO_MAX_LAYERS, &out->n_layers, err)) ||
        (rc = meta_int(g, file, arch, "feed_forward_length", false, 0, 0, INFO_MAX_DIM, &out->ffn_dim, err)) ||
        (rc = meta_int(g, file, arch, "attention.head_count", true, 0, 1, INFO_MAX_HEADS, &out->n_heads, err)) ||
        (rc = meta_int(g, file, arch, "attention.head_count_kv", false, out->n_heads, 1, out->n_heads,
                       &out->n_kv_heads, err)))
        return rc;
    if (out->n_heads % out->n_kv_heads != 0)
        return kvi_err_set(err, KVI_E_FORMAT, "model info: %s: head_count %d is not a multiple of head_count_kv %d",
                           file, out->n_heads, out->n_kv_heads);
    int def_hd = out->dim % out->n_heads == 0 ? out->dim / out->n_heads : 0;
    char key_len[160];
    snprintf(key_len, sizeof key_len, "%s.attention.key_length", arch);
    if (def_hd == 0 && gguf_find_key(g, key_len) < 0)
        return kvi_err_set(err, KVI_E_FORMAT,
                           "model info: %s: embedding_length %d is not a multiple of head_count %d and %s is missing",
                           file, out->dim, out->n_heads, key_len);
    if ((rc = meta_int(g, file, arch, "attention.key_length", false, def_hd, 1, INFO_MAX_DIM, &out->head_dim, err)))
        return rc;

    /* Vocabulary: the tokenizer's token list, else the embedding matrix's rows. */
    gguf_vtype et;
    uint64_t nv = 0;
    rc = gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &nv, err);
    if (rc == KVI_E_FORMAT) return rc;
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (te && te->n_dims >= 2 && te->ne[1] > 0) nv = (uint64_t)te->ne[1];
    if (nv > INFO_MAX_VOCAB)
        return kvi_err_set(err, KVI_E_FORMAT, "model info: %s: vocabulary of %llu tokens is too large", file,
                           (unsigned long long)nv);
    out->n_vocab = (int)nv;

    /* Weight bytes (validated by the reader) and the type of most layer-matrix elements. */
    uint64_t count[KVI_TYPE_COUNT] = {0};
    size_t bytes = 0;
    int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        bytes += t->nbytes;   /* each lies inside the file: the sum is at most its size */
        if (t->n_dims >= 2 && strncmp(t->name, "blk.", 4) == 0 && (unsigned)t->type < KVI_TYPE_COUNT)
            count[t->type] += (uint64_t)t->ne[0] * (uint64_t)t->ne[1];
    }
    int best = KVI_TYPE_F32;
    for (int t = 0; t < KVI_TYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    out->weight_type = (kvi_type)best;
    out->weight_bytes = bytes;
    out->has_weights = nt > 0;
    return 0;
}

int kvi_model_info_from_file(const char *path, kvi_model_info *out, kvi_error *err)
{
    if (!path || !out) return kvi_err_set(err, KVI_E_INVALID, "model info: no path or output");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    bool is_gguf = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    if (!is_gguf) {
        /* llama2.c checkpoints and Hugging Face folders: the loader knows them. */
        kvi_load_params lp;
        kvi_load_params_default(&lp);
        lp.use_mmap = true;
        kvi_model *m = kvi_model_load(path, &lp, err);
        if (!m) return err && err->code ? err->code : KVI_E_FORMAT;
        kvi_model_get_info(m, out);
        kvi_model_free(m);
        return 0;
    }
    gguf_ctx *g = NULL;
    int rc = gguf_open(path, true, &g, err);
    if (rc) return rc;
    rc = info_from_gguf(g, path, out, err);
    gguf_close(g);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

static uint64_t mat_elems(const kvi_tensor *t)
{
    return t->data ? (uint64_t)t->n_in * (uint64_t)t->n_out : 0;
}

static size_t mat_bytes(const kvi_tensor *t)
{
    return t->data ? kvi_row_bytes(t->type, t->n_in) * (size_t)t->n_out : 0;
}

uint64_t kvi_model_matmul_params(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    uint64_t n = mat_elems(&m->output);
    for (int l = 0; l < m->n_layers; l++) {
        const kvi_layer *L = &m->layers[l];
        n += mat_elems(&L->wq) + mat_elems(&L->wk) + mat_elems(&L->wv) + mat_elems(&L->wo) +
             mat_elems(&L->w_gate) + mat_elems(&L->w_up) + mat_elems(&L->w_down);
    }
    return n;
}

/* Elements of the 1-D vectors: norms and attention biases. */
static uint64_t vector_elems(const kvi_model *m)
{
    uint64_t qd = (uint64_t)m->n_heads * (uint64_t)m->head_dim;
    uint64_t kd = (uint64_t)m->n_kv_heads * (uint64_t)m->head_dim;
    uint64_t n = (uint64_t)m->dim;   /* output_norm */
    for (int l = 0; l < m->n_layers; l++) {
        const kvi_layer *L = &m->layers[l];
        n += 2 * (uint64_t)m->dim + (L->bq ? qd : 0) + (L->bk ? kd : 0) + (L->bv ? kd : 0);
    }
    return n;
}

uint64_t kvi_model_n_params(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    uint64_t n = kvi_model_matmul_params(m) + vector_elems(m);
    if (m->tok_embd.data != m->output.data) n += mat_elems(&m->tok_embd);
    return n;
}

size_t kvi_model_decode_bytes(const kvi_model *m)
{
    if (!m || !m->has_weights || !m->layers) return 0;
    size_t b = mat_bytes(&m->output) + (size_t)vector_elems(m) * sizeof(float);
    for (int l = 0; l < m->n_layers; l++) {
        const kvi_layer *L = &m->layers[l];
        b += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
             mat_bytes(&L->w_gate) + mat_bytes(&L->w_up) + mat_bytes(&L->w_down);
    }
    if (m->tok_embd.data && m->tok_embd.data != m->output.data)
        b += kvi_row_bytes(m->tok_embd.type, m->tok_embd.n_in);   /* one embedding row */
    return b;
}
