/*
 * model_llama2c.c — binding of a llama2.c checkpoint (Karpathy's legacy export).
 *
 * File layout (all little-endian):
 *   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 *     (vocab_size < 0: the classifier is not shared and follows at the end)
 *   f32 token_embedding [vocab][dim]
 *   f32 rms_att         [layers][dim]
 *   f32 wq              [layers][dim][dim]        (n_heads * head_dim == dim)
 *   f32 wk, wv          [layers][kv_dim][dim]     (kv_dim = n_kv_heads * head_dim)
 *   f32 wo              [layers][dim][dim]
 *   f32 rms_ffn         [layers][dim]
 *   f32 w1 (gate)       [layers][hidden][dim]
 *   f32 w2 (down)       [layers][dim][hidden]
 *   f32 w3 (up)         [layers][hidden][dim]
 *   f32 rms_final       [dim]
 *   f32 freq_cis_real, freq_cis_imag [seq_len][head_dim / 2]  (skipped)
 *   f32 wcls            [vocab][dim]              (only when vocab_size < 0)
 *
 * Invariants: the header is validated before any array is touched, and the file
 * size must equal the size the header implies exactly, so every pointer below
 * stays inside the buffer. The buffer (read into memory, or mapped) is owned by
 * the model; all tensors are F32 views into it. q/k rows are already in the
 * interleaved-pair RoPE order (llama2.c's own RoPE), so nothing is permuted.
 * Fixed by the format: rms_eps 1e-5, rope theta 10000, n_rot = head_dim.
 */
#define _POSIX_C_SOURCE 200809L
#include "model/model.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define L2C_HEADER_BYTES 28
/* Magic of llama2.c's newer export formats ("ak42"), which this loader does not read. */
#define L2C_MAGIC_V1 0x616b3432u

typedef struct l2c_header {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} l2c_header;

static bool l2c_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The folder part of path ("." when there is none), malloc'd. */
static char *l2c_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 1;
    if (slash && n == 0) n = 1; /* "/model.bin" */
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (slash)
        memcpy(d, path, n);
    else
        d[0] = '.';
    d[n] = '\0';
    return d;
}

/* tokenizer_path, else tokenizer.bin next to the checkpoint, else tok<vocab>.bin. */
static int l2c_load_tokenizer(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err)
{
    if (p->tokenizer_path) return tokenizer_load_llama2c(p->tokenizer_path, m->n_vocab, &m->tok, err);
    char *dir = l2c_dirname(path);
    char name[32];
    snprintf(name, sizeof name, "tok%d.bin", m->n_vocab);
    char *a = dir ? model_path_join(dir, "tokenizer.bin") : NULL;
    char *b = dir ? model_path_join(dir, name) : NULL;
    int rc;
    if (!a || !b)
        rc = err_set(err, KVI_E_NOMEM, "out of memory");
    else if (l2c_file_exists(a))
        rc = tokenizer_load_llama2c(a, m->n_vocab, &m->tok, err);
    else if (l2c_file_exists(b))
        rc = tokenizer_load_llama2c(b, m->n_vocab, &m->tok, err);
    else
        rc = err_set(err, KVI_E_IO,
                     "llama2.c checkpoint %s: no tokenizer found (tried %s and %s); give tokenizer_path",
                     path, a, b);
    free(a);
    free(b);
    free(dir);
    return rc;
}

static int l2c_check_header(const l2c_header *h, const char *path, size_t file_size, uint64_t *n_floats,
                            kvi_error *err)
{
    const struct {
        const char *n;
        int32_t v;
        int32_t hi;
    } f[] = {
        { "dim", h->dim, 1 << 17 },
        { "hidden_dim", h->hidden_dim, 1 << 20 },
        { "n_layers", h->n_layers, 4096 },
        { "n_heads", h->n_heads, 4096 },
        { "n_kv_heads", h->n_kv_heads, 4096 },
        { "seq_len", h->seq_len, 1 << 24 },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v <= 0 || f[i].v > f[i].hi)
            return err_set(err, KVI_E_FORMAT,
                           "llama2.c checkpoint %s: header %s = %d out of range [1, %d] "
                           "(and the file is neither GGUF nor a folder)",
                           path, f[i].n, f[i].v, f[i].hi);
    if (h->vocab_size == 0 || h->vocab_size < -(1 << 24) || h->vocab_size > (1 << 24))
        return err_set(err, KVI_E_FORMAT, "llama2.c checkpoint %s: header vocab_size = %d invalid", path,
                       h->vocab_size);
    if (h->dim % h->n_heads != 0 || h->n_heads % h->n_kv_heads != 0 || (h->dim / h->n_heads) % 2 != 0)
        return err_set(err, KVI_E_FORMAT,
                       "llama2.c checkpoint %s: dim %d, n_heads %d, n_kv_heads %d do not divide "
                       "into even heads",
                       path, h->dim, h->n_heads, h->n_kv_heads);

    /* The bounds above keep every product below 2^50. */
    const uint64_t dim = (uint64_t)h->dim, hid = (uint64_t)h->hidden_dim, nl = (uint64_t)h->n_layers;
    const uint64_t vocab = (uint64_t)(h->vocab_size < 0 ? -(int64_t)h->vocab_size : h->vocab_size);
    const uint64_t head = dim / (uint64_t)h->n_heads, kv_dim = head * (uint64_t)h->n_kv_heads;
    uint64_t n = vocab * dim                    /* token_embedding */
                 + nl * dim                     /* rms_att */
                 + nl * dim * dim * 2           /* wq, wo */
                 + nl * kv_dim * dim * 2        /* wk, wv */
                 + nl * dim                     /* rms_ffn */
                 + nl * hid * dim * 3           /* w1, w2, w3 */
                 + dim                          /* rms_final */
                 + (uint64_t)h->seq_len * head; /* freq_cis_real + imag */
    if (h->vocab_size < 0) n += vocab * dim;    /* wcls */
    if ((uint64_t)(file_size - L2C_HEADER_BYTES) != n * 4)
        return err_set(err, KVI_E_FORMAT,
                       "llama2.c checkpoint %s: header (dim %d, hidden %d, layers %d, heads %d/%d, "
                       "vocab %d, seq_len %d) needs %llu bytes but the file has %zu",
                       path, h->dim, h->hidden_dim, h->n_layers, h->n_heads, h->n_kv_heads, h->vocab_size,
                       h->seq_len, (unsigned long long)(n * 4 + L2C_HEADER_BYTES), file_size);
    *n_floats = n;
    return 0;
}

static kern_tensor l2c_matrix(const float *data, int64_t n_in, int64_t n_out)
{
    kern_tensor t = { .data = data, .type = KVI_TYPE_F32, .n_in = n_in, .n_out = n_out };
    return t;
}

int model_load_llama2c(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err)
{
    const uint8_t *buf;
    size_t size;
    int rc = model_read_file(m, path, p->use_mmap, &buf, &size, err);
    if (rc) return rc;
    if (size < L2C_HEADER_BYTES)
        return err_set(err, KVI_E_FORMAT,
                       "%s: %zu bytes is neither a GGUF file, a llama2.c checkpoint nor a folder", path,
                       size);
    uint32_t magic;
    memcpy(&magic, buf, 4);
    if (magic == L2C_MAGIC_V1) {
        int32_t version;
        memcpy(&version, buf + 4, 4);
        return err_set(err, KVI_E_UNSUPPORTED,
                       "llama2.c checkpoint %s: export version %d ('ak42') is not supported, "
                       "only the legacy export",
                       path, version);
    }
    l2c_header h;
    memcpy(&h, buf, sizeof h);
    uint64_t n_floats = 0;
    if ((rc = l2c_check_header(&h, path, size, &n_floats, err))) return rc;

    bool shared = h.vocab_size > 0;
    snprintf(m->arch, sizeof m->arch, "llama");
    snprintf(m->name, sizeof m->name, "llama2.c");
    m->dim = h.dim;
    m->ffn_dim = h.hidden_dim;
    m->n_layers = h.n_layers;
    m->n_heads = h.n_heads;
    m->n_kv_heads = h.n_kv_heads;
    m->head_dim = h.dim / h.n_heads;
    m->n_vocab = shared ? h.vocab_size : -h.vocab_size;
    m->n_ctx_train = h.seq_len;
    m->n_rot = m->head_dim;
    m->rms_eps = 1e-5f;
    m->rope_theta = 10000.0f;
    m->rope_neox = false;
    m->rope_freqs = NULL;
    model_block_defaults(m);
    if ((rc = model_check_hparams(m, err))) return rc;

    m->layers = model_own(m, calloc((size_t)m->n_layers, sizeof *m->layers));
    if (!m->layers) return err_set(err, KVI_E_NOMEM, "llama2.c: out of memory for %d layers", m->n_layers);

    /* The buffer is 64-byte aligned (or page aligned) and the header is 28 bytes,
     * so every f32 array below is 4-byte aligned. */
    const float *w = (const float *)(const void *)(buf + L2C_HEADER_BYTES);
    const int64_t dim = m->dim, hid = m->ffn_dim, nl = m->n_layers;
    const int64_t kv_dim = (int64_t)m->n_kv_heads * m->head_dim;
    const float *tok = w;
    w += (size_t)(m->n_vocab * dim);
    const float *rms_att = w;
    w += (size_t)(nl * dim);
    const float *wq = w;
    w += (size_t)(nl * dim * dim);
    const float *wk = w;
    w += (size_t)(nl * kv_dim * dim);
    const float *wv = w;
    w += (size_t)(nl * kv_dim * dim);
    const float *wo = w;
    w += (size_t)(nl * dim * dim);
    const float *rms_ffn = w;
    w += (size_t)(nl * dim);
    const float *w1 = w;
    w += (size_t)(nl * hid * dim);
    const float *w2 = w;
    w += (size_t)(nl * dim * hid);
    const float *w3 = w;
    w += (size_t)(nl * hid * dim);
    const float *rms_final = w;
    w += (size_t)dim;
    w += (size_t)((int64_t)h.seq_len * m->head_dim); /* freq_cis_real, freq_cis_imag */
    const float *wcls = shared ? tok : w;

    m->tok_embd = l2c_matrix(tok, dim, m->n_vocab);
    m->output = l2c_matrix(wcls, dim, m->n_vocab);
    m->output_norm = rms_final;
    for (int64_t l = 0; l < nl; l++) {
        model_layer *L = &m->layers[l];
        L->attn_norm = rms_att + l * dim;
        L->wq = l2c_matrix(wq + l * dim * dim, dim, dim);
        L->wk = l2c_matrix(wk + l * kv_dim * dim, dim, kv_dim);
        L->wv = l2c_matrix(wv + l * kv_dim * dim, dim, kv_dim);
        L->wo = l2c_matrix(wo + l * dim * dim, dim, dim);
        L->ffn_norm = rms_ffn + l * dim;
        L->w_gate = l2c_matrix(w1 + l * hid * dim, dim, hid);
        L->w_down = l2c_matrix(w2 + l * dim * hid, hid, dim);
        L->w_up = l2c_matrix(w3 + l * hid * dim, dim, hid);
    }
    /* All arrays except the RoPE tables. */
    m->weight_bytes = (size_t)(n_floats - (uint64_t)h.seq_len * (uint64_t)m->head_dim) * sizeof(float);

    if ((rc = l2c_load_tokenizer(m, path, p, err))) return rc;
    m->has_weights = true;
    return model_validate(m, err);
}
