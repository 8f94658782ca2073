/*
 * model.c — the parts of model loading shared by all formats, the GGUF binding,
 * and the public model / tokenizer functions of kvinfer.h.
 *
 * Data structure: struct kvi_model (model.h). Hyper-parameters are plain ints;
 * weight matrices are kern_tensor views, either into a file buffer (the GGUF
 * context, or the llama2.c / safetensors buffer held in `owned` or `map_addr`) or
 * into buffers the model owns (converted or permuted copies). Every buffer a model
 * points into is released by kvi_model_free() and by nothing else.
 *
 * Invariants after a successful load (checked by model_validate()):
 *  - model_check_hparams() holds: sizes positive and bounded, n_heads a multiple of
 *    n_kv_heads, n_rot even and <= head_dim;
 *  - every matrix is 2-D, of a known type, [n_out][n_in] exactly as model.h states,
 *    with quant_row_bytes(type, n_in) * n_out bytes of data;
 *  - every 1-D vector is a non-NULL f32 array of the stated length;
 *  - tok is not NULL and holds at most n_vocab tokens.
 * Dispatch: a directory is a Hugging Face folder, a file starting with "GGUF" is a
 * GGUF file, any other file is tried as a llama2.c checkpoint.
 */
#define _POSIX_C_SOURCE 200809L
#include "model/model.h"

#include "base/error.h"
#include "formats/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Upper bounds on hyper-parameters: far above any real model, low enough that
 * products of two of them cannot overflow 64 bits. */
#define MODEL_MAX_DIM (1 << 17)
#define MODEL_MAX_FFN (1 << 20)
#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_HEADS 4096
#define MODEL_MAX_HEAD_DIM 4096
#define MODEL_MAX_VOCAB (1 << 24)
#define MODEL_MAX_CTX (1 << 24)

/* ---- ownership ----------------------------------------------------------- */

void *model_own(struct kvi_model *m, void *buf)
{
    if (!buf) return NULL;
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? m->cap_owned * 2 : 16;
        void **p = realloc(m->owned, cap * sizeof *p);
        if (!p) {
            free(buf);
            return NULL;
        }
        m->owned = p;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = buf;
    return buf;
}

char *model_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    bool slash = a > 0 && dir[a - 1] != '/';
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    if (slash) s[a++] = '/';
    memcpy(s + a, name, b + 1);
    return s;
}

int model_read_file(struct kvi_model *m, const char *path, bool use_mmap, const uint8_t **data, size_t *size,
                    kvi_error *err)
{
    *data = NULL;
    *size = 0;
    /* O_NONBLOCK: a FIFO must not block the open (fstat below refuses it). */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return err_set(err, KVI_E_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, KVI_E_IO, "%s is not a readable regular file", path);
    }
    if (st.st_size <= 0) {
        close(fd);
        return err_set(err, KVI_E_FORMAT, "%s is empty", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)(SIZE_MAX / 2)) {
        close(fd);
        return err_set(err, KVI_E_NOMEM, "%s is too large for this machine", path);
    }
    size_t len = (size_t)st.st_size;

    if (use_mmap) {
        if (m->map_addr) {
            close(fd);
            return err_set(err, KVI_E_INVALID, "model: a file is already mapped");
        }
        void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (p == MAP_FAILED) return err_set(err, KVI_E_IO, "cannot map %s: %s", path, strerror(errno));
        m->map_addr = p;
        m->map_len = len;
        m->file_bytes += len;
        *data = p;
        *size = len;
        return 0;
    }

    size_t cap = (len + 63) & ~(size_t)63;
    uint8_t *buf = aligned_alloc(64, cap);
    if (!buf) {
        close(fd);
        return err_set(err, KVI_E_NOMEM, "out of memory reading %s (%zu bytes)", path, len);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            return err_set(err, KVI_E_IO, "read error on %s after %zu of %zu bytes%s%s", path, got, len,
                           r < 0 ? ": " : "", r < 0 ? strerror(e) : "");
        }
        got += (size_t)r;
    }
    close(fd);
    memset(buf + len, 0, cap - len);
    if (!model_own(m, buf)) return err_set(err, KVI_E_NOMEM, "out of memory");
    m->file_bytes += len;
    *data = buf;
    *size = len;
    return 0;
}

int model_vec_f32(struct kvi_model *m, const char *name, const void *data, kvi_type type, int64_t n,
                  const float **out, kvi_error *err)
{
    *out = NULL;
    if (n <= 0 || n > MODEL_MAX_FFN * 16)
        return err_set(err, KVI_E_FORMAT, "%s: bad vector length %lld", name, (long long)n);
    if (type == KVI_TYPE_F32 && ((uintptr_t)data % sizeof(float)) == 0) {
        *out = data;
        return 0;
    }
    if (type != KVI_TYPE_F32 && type != KVI_TYPE_F16 && type != KVI_TYPE_BF16)
        return err_set(err, KVI_E_UNSUPPORTED, "%s: 1-D tensor of type %s (need f32, f16 or bf16)", name,
                       kvi_type_name(type) ? kvi_type_name(type) : "unknown");
    float *f = model_own(m, malloc((size_t)n * sizeof *f));
    if (!f) return err_set(err, KVI_E_NOMEM, "%s: out of memory", name);
    const uint8_t *src = data;
    for (int64_t i = 0; i < n; i++) {
        if (type == KVI_TYPE_F32) {
            memcpy(&f[i], src + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            f[i] = type == KVI_TYPE_F16 ? quant_f16_to_f32(h) : quant_bf16_to_f32(h);
        }
    }
    *out = f;
    return 0;
}

/* ---- validation ---------------------------------------------------------- */

static int check_range(const char *what, int64_t v, int64_t lo, int64_t hi, kvi_error *err)
{
    if (v < lo || v > hi)
        return err_set(err, KVI_E_FORMAT, "model: %s = %lld out of range [%lld, %lld]", what, (long long)v,
                       (long long)lo, (long long)hi);
    return 0;
}

int model_check_hparams(const struct kvi_model *m, kvi_error *err)
{
    int rc;
    if ((rc = check_range("n_vocab", m->n_vocab, 1, MODEL_MAX_VOCAB, err)) ||
        (rc = check_range("dim", m->dim, 1, MODEL_MAX_DIM, err)) ||
        (rc = check_range("n_layers", m->n_layers, 1, MODEL_MAX_LAYERS, err)) ||
        (rc = check_range("n_heads", m->n_heads, 1, MODEL_MAX_HEADS, err)) ||
        (rc = check_range("n_kv_heads", m->n_kv_heads, 1, m->n_heads, err)) ||
        (rc = check_range("head_dim", m->head_dim, 1, MODEL_MAX_HEAD_DIM, err)) ||
        (rc = check_range("ffn_dim", m->ffn_dim, 1, MODEL_MAX_FFN, err)) ||
        (rc = check_range("n_ctx_train", m->n_ctx_train, 1, MODEL_MAX_CTX, err)) ||
        (rc = check_range("n_rot", m->n_rot, 2, m->head_dim, err)))
        return rc;
    if (m->n_heads % m->n_kv_heads != 0)
        return err_set(err, KVI_E_FORMAT, "model: n_heads %d is not a multiple of n_kv_heads %d", m->n_heads,
                       m->n_kv_heads);
    if (m->n_rot % 2 != 0) return err_set(err, KVI_E_FORMAT, "model: rotary dimension %d is odd", m->n_rot);
    if (!(m->rms_eps > 0.0f) || !isfinite(m->rms_eps) || m->rms_eps > 1.0f)
        return err_set(err, KVI_E_FORMAT, "model: rms_norm_eps %g invalid", (double)m->rms_eps);
    if (!(m->rope_theta > 0.0f) || !isfinite(m->rope_theta))
        return err_set(err, KVI_E_FORMAT, "model: rope theta %g invalid", (double)m->rope_theta);
    return 0;
}

static int check_matrix(const kern_tensor *t, const char *name, int64_t n_in, int64_t n_out, kvi_error *err)
{
    if (!t->data) return err_set(err, KVI_E_FORMAT, "model: tensor %s is missing", name);
    if (t->n_in != n_in || t->n_out != n_out)
        return err_set(err, KVI_E_FORMAT, "model: tensor %s is [%lld rows][%lld], expected [%lld][%lld]",
                       name, (long long)t->n_out, (long long)t->n_in, (long long)n_out, (long long)n_in);
    if (!quant_type_known(t->type) || quant_row_bytes(t->type, n_in) == 0)
        return err_set(err, KVI_E_FORMAT, "model: tensor %s: type %d cannot hold rows of %lld", name,
                       (int)t->type, (long long)n_in);
    return 0;
}

int model_validate(const struct kvi_model *m, kvi_error *err)
{
    int rc = model_check_hparams(m, err);
    if (rc) return rc;
    if (!m->tok) return err_set(err, KVI_E_FORMAT, "model: no tokenizer");
    if (tokenizer_n_vocab(m->tok) > m->n_vocab)
        return err_set(err, KVI_E_FORMAT, "model: tokenizer has %d tokens but the embedding only %d rows",
                       (int)tokenizer_n_vocab(m->tok), m->n_vocab);
    const int64_t dim = m->dim, q_dim = (int64_t)m->n_heads * m->head_dim,
                  kv_dim = (int64_t)m->n_kv_heads * m->head_dim, ffn = m->ffn_dim;
    if ((rc = check_matrix(&m->tok_embd, "token_embd", dim, m->n_vocab, err)) ||
        (rc = check_matrix(&m->output, "output", dim, m->n_vocab, err)))
        return rc;
    if (!m->output_norm || !m->layers)
        return err_set(err, KVI_E_FORMAT, "model: %s is missing",
                       m->output_norm ? "the layer table" : "output_norm");
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        char nm[64];
        struct {
            const kern_tensor *t;
            const char *n;
            int64_t in, out;
        } mats[] = {
            { &L->wq, "attn_q", dim, q_dim },     { &L->wk, "attn_k", dim, kv_dim },
            { &L->wv, "attn_v", dim, kv_dim },    { &L->wo, "attn_output", q_dim, dim },
            { &L->w_gate, "ffn_gate", dim, ffn }, { &L->w_up, "ffn_up", dim, ffn },
            { &L->w_down, "ffn_down", ffn, dim },
        };
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s", l, mats[i].n);
            if ((rc = check_matrix(mats[i].t, nm, mats[i].in, mats[i].out, err))) return rc;
        }
        if (!L->attn_norm || !L->ffn_norm)
            return err_set(err, KVI_E_FORMAT, "model: blk.%d.%s is missing", l,
                           L->attn_norm ? "ffn_norm" : "attn_norm");
    }
    return 0;
}

/* ---- GGUF binding -------------------------------------------------------- */

/* An integer hyper-parameter "<arch>.<key>"; def is used when absent and !required. */
static int gguf_hp_int(const gguf_ctx *g, const char *arch, const char *key, bool required, int64_t def,
                       int64_t lo, int64_t hi, int *out, kvi_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t v;
    int rc = gguf_get_int(g, full, &v, err);
    if (rc == -1) {
        if (required) return err_set(err, KVI_E_FORMAT, "gguf: missing metadata %s", full);
        v = def;
    } else if (rc < 0) {
        return rc;
    }
    if (v < lo || v > hi)
        return err_set(err, KVI_E_FORMAT, "gguf: %s = %lld out of range [%lld, %lld]", full, (long long)v,
                       (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

static int gguf_hp_float(const gguf_ctx *g, const char *arch, const char *key, bool required, double def,
                         float *out, kvi_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    double v;
    int rc = gguf_get_float(g, full, &v, err);
    if (rc == -1) {
        if (required) return err_set(err, KVI_E_FORMAT, "gguf: missing metadata %s", full);
        v = def;
    } else if (rc < 0) {
        return rc;
    }
    if (!isfinite(v) || v <= 0.0) return err_set(err, KVI_E_FORMAT, "gguf: %s = %g invalid", full, v);
    *out = (float)v;
    return 0;
}

/* Binds a 2-D tensor [n_out][n_in]; absent is an error only when required. */
static int gguf_bind_matrix(struct kvi_model *m, const char *name, int64_t n_in, int64_t n_out, bool required,
                            kern_tensor *out, kvi_error *err)
{
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) return required ? err_set(err, KVI_E_FORMAT, "gguf: missing tensor %s", name) : 0;
    if (t->n_dims < 1 || t->n_dims > 2 || t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] != n_in ||
        t->ne[1] != n_out)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)n_in, (long long)n_out);
    size_t row = quant_row_bytes(t->type, n_in);
    if (!quant_type_known(t->type) || row == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s: type %d cannot hold rows of %lld", name,
                       (int)t->type, (long long)n_in);
    if (t->nbytes != row * (size_t)n_out || !t->data)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s has %zu bytes, expected %zu", name, t->nbytes,
                       row * (size_t)n_out);
    out->data = t->data;
    out->type = t->type;
    out->n_in = n_in;
    out->n_out = n_out;
    m->weight_bytes += t->nbytes;
    return 0;
}

/* Binds a 1-D f32 vector of n elements (converted when stored as F16/BF16). */
static int gguf_bind_vector(struct kvi_model *m, const char *name, int64_t n, bool required,
                            const float **out, kvi_error *err)
{
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    *out = NULL;
    if (!t) return required ? err_set(err, KVI_E_FORMAT, "gguf: missing tensor %s", name) : 0;
    if (t->n_dims != 1 || t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: tensor %s has shape [%lld, %lld], expected the vector [%lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)n);
    size_t row = quant_row_bytes(t->type, n);
    if (row == 0 || t->nbytes != row || !t->data)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s has %zu bytes for %lld elements", name, t->nbytes,
                       (long long)n);
    m->weight_bytes += t->nbytes;
    return model_vec_f32(m, name, t->data, t->type, n, out, err);
}

void model_copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src && src[n] && n + 1 < cap; n++)
        dst[n] = (unsigned char)src[n] < 0x20 ? '?' : src[n]; /* one printable line */
    dst[n] = 0;
}

int model_hparams_gguf(struct kvi_model *m, const gguf_ctx *g, bool metadata_only, kvi_error *err)
{
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch || !arch[0]) return err_set(err, KVI_E_FORMAT, "gguf: no general.architecture");
    if (strlen(arch) >= sizeof m->arch)
        return err_set(err, KVI_E_FORMAT, "gguf: general.architecture is %zu bytes long", strlen(arch));
    model_copy_str(m->arch, sizeof m->arch, arch);
    model_copy_str(m->name, sizeof m->name, gguf_get_str(g, "general.name"));
    m->rope_neox = strcmp(arch, "qwen2") == 0;

    int rc;
    if ((rc = gguf_hp_int(g, arch, "context_length", true, 0, 1, MODEL_MAX_CTX, &m->n_ctx_train, err)) ||
        (rc = gguf_hp_int(g, arch, "embedding_length", true, 0, 1, MODEL_MAX_DIM, &m->dim, err)) ||
        (rc = gguf_hp_int(g, arch, "feed_forward_length", !metadata_only, 0, metadata_only ? 0 : 1,
                          MODEL_MAX_FFN, &m->ffn_dim, err)) ||
        (rc = gguf_hp_int(g, arch, "block_count", true, 0, 1, MODEL_MAX_LAYERS, &m->n_layers, err)) ||
        (rc = gguf_hp_int(g, arch, "attention.head_count", true, 0, 1, MODEL_MAX_HEADS, &m->n_heads, err)) ||
        (rc = gguf_hp_int(g, arch, "attention.head_count_kv", false, m->n_heads, 1, MODEL_MAX_HEADS,
                          &m->n_kv_heads, err)))
        return rc;
    if (m->n_heads % m->n_kv_heads != 0)
        return err_set(err, KVI_E_FORMAT, "gguf: head_count %d is not a multiple of head_count_kv %d",
                       m->n_heads, m->n_kv_heads);
    char key_len_name[96];
    snprintf(key_len_name, sizeof key_len_name, "%s.attention.key_length", arch);
    if (m->dim % m->n_heads != 0 && gguf_find_key(g, key_len_name) < 0)
        return err_set(err, KVI_E_FORMAT, "gguf: embedding_length %d is not a multiple of head_count %d",
                       m->dim, m->n_heads);
    if ((rc = gguf_hp_int(g, arch, "attention.key_length", false, m->dim / m->n_heads, 1, MODEL_MAX_HEAD_DIM,
                          &m->head_dim, err)))
        return rc;

    /* vocabulary: vocab_size, else the embedding's rows, else (metadata only) the token list */
    int64_t nv = 0;
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (te) {
        nv = te->ne[1];
    } else if (metadata_only) {
        gguf_vtype et;
        uint64_t n = 0;
        if ((rc = gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n, err)) == KVI_E_FORMAT) return rc;
        nv = n > MODEL_MAX_VOCAB ? MODEL_MAX_VOCAB + 1 : (int64_t)n;
    } else {
        return err_set(err, KVI_E_FORMAT, "gguf: missing tensor token_embd.weight");
    }
    if ((nv < 1 && !metadata_only) || nv > MODEL_MAX_VOCAB)
        return err_set(err, KVI_E_FORMAT, "gguf: token_embd.weight has %lld rows", (long long)nv);
    if ((rc = gguf_hp_int(g, arch, "vocab_size", false, nv, metadata_only ? 0 : 1, MODEL_MAX_VOCAB,
                          &m->n_vocab, err)))
        return rc;
    if (metadata_only) return 0;

    /* what the forward pass computes with */
    int v_len;
    if ((rc = gguf_hp_int(g, arch, "attention.value_length", false, m->head_dim, 1, MODEL_MAX_HEAD_DIM,
                          &v_len, err)) ||
        (rc = gguf_hp_int(g, arch, "rope.dimension_count", false, m->head_dim, 1, MODEL_MAX_HEAD_DIM,
                          &m->n_rot, err)) ||
        (rc = gguf_hp_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0, &m->rms_eps, err)) ||
        (rc = gguf_hp_float(g, arch, "rope.freq_base", false, 10000.0, &m->rope_theta, err)))
        return rc;
    if (v_len != m->head_dim)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: value_length %d differs from key_length %d", v_len,
                       m->head_dim);
    return model_check_hparams(m, err);
}

/* The layers' matrices and the output matrix laid out for the kernels, in place
 * (kern_prepare_weights decides which and how: R16 tiles for Q8_0 / Q4_0 on
 * AVX-512 VNNI), when the load parameters allow it (kvi_load_params.repack). A tied
 * output matrix is the token embedding too: both views get its layout. A prepare
 * that fails (memory) leaves the matrices as they were. One set of threads does
 * all (one start-up pass over the weights). */
static void model_prepare_weights(struct kvi_model *m)
{
    if (!kern_prepare_wanted() || !gguf_set_writable(m->gguf, true)) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    kern_tensor **mats = malloc(((size_t)m->n_layers * 7 + 1) * sizeof *mats); /* [7 * n_layers + 1] */
    int n = 0;
    for (int l = 0; mats && l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        kern_tensor *lm[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (int i = 0; i < 7; i++)
            if (lm[i]->data) mats[n++] = lm[i];
    }
    if (mats && m->output.data) mats[n++] = &m->output;
    if (mats && kern_prepare_weights(mats, n, cores > 1 ? (int)cores : 1) == 0 &&
        m->tok_embd.data == m->output.data)
        m->tok_embd.layout = m->output.layout;
    free(mats);
    (void)gguf_set_writable(m->gguf, false);
}

int model_load_gguf(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err)
{
    int rc = gguf_open(path, p->use_mmap, &m->gguf, err);
    if (rc) return rc;
    const gguf_ctx *g = m->gguf;
    gguf_prefault(g); /* a mapped file: no page faults in the first forward pass */
    m->file_bytes += gguf_file_size(g);
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch) return err_set(err, KVI_E_FORMAT, "gguf: %s has no general.architecture", path);
    if (strcmp(arch, "llama") != 0 && strcmp(arch, "qwen2") != 0)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: architecture '%.64s' is not supported (llama, qwen2)",
                       arch);
    if ((rc = model_hparams_gguf(m, g, false, err))) return rc;

    const int64_t dim = m->dim, q_dim = (int64_t)m->n_heads * m->head_dim,
                  kv_dim = (int64_t)m->n_kv_heads * m->head_dim, ffn = m->ffn_dim;
    if ((rc = gguf_bind_matrix(m, "token_embd.weight", dim, m->n_vocab, true, &m->tok_embd, err)) ||
        (rc = gguf_bind_vector(m, "output_norm.weight", dim, true, &m->output_norm, err)) ||
        (rc = gguf_bind_matrix(m, "output.weight", dim, m->n_vocab, false, &m->output, err)) ||
        (rc = gguf_bind_vector(m, "rope_freqs.weight", m->n_rot / 2, false, &m->rope_freqs, err)))
        return rc;
    if (!m->output.data) m->output = m->tok_embd;

    m->layers = model_own(m, calloc((size_t)m->n_layers, sizeof *m->layers));
    if (!m->layers) return err_set(err, KVI_E_NOMEM, "gguf: out of memory for %d layers", m->n_layers);
    for (int l = 0; l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        char n[12][64];
        static const char *const parts[12] = {
            "attn_norm.weight",   "attn_q.weight",   "attn_k.weight",   "attn_v.weight",
            "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
            "ffn_down.weight",    "attn_q.bias",     "attn_k.bias",     "attn_v.bias",
        };
        for (int i = 0; i < 12; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s", l, parts[i]);
        if ((rc = gguf_bind_vector(m, n[0], dim, true, &L->attn_norm, err)) ||
            (rc = gguf_bind_matrix(m, n[1], dim, q_dim, true, &L->wq, err)) ||
            (rc = gguf_bind_matrix(m, n[2], dim, kv_dim, true, &L->wk, err)) ||
            (rc = gguf_bind_matrix(m, n[3], dim, kv_dim, true, &L->wv, err)) ||
            (rc = gguf_bind_matrix(m, n[4], q_dim, dim, true, &L->wo, err)) ||
            (rc = gguf_bind_vector(m, n[5], dim, true, &L->ffn_norm, err)) ||
            (rc = gguf_bind_matrix(m, n[6], dim, ffn, true, &L->w_gate, err)) ||
            (rc = gguf_bind_matrix(m, n[7], dim, ffn, true, &L->w_up, err)) ||
            (rc = gguf_bind_matrix(m, n[8], ffn, dim, true, &L->w_down, err)) ||
            (rc = gguf_bind_vector(m, n[9], q_dim, false, &L->bq, err)) ||
            (rc = gguf_bind_vector(m, n[10], kv_dim, false, &L->bk, err)) ||
            (rc = gguf_bind_vector(m, n[11], kv_dim, false, &L->bv, err)))
            return rc;
    }

    if (!p->use_mmap && p->repack) model_prepare_weights(m);
    if ((rc = tokenizer_load_gguf(g, &m->tok, err))) return rc;
    m->has_weights = true;
    return model_validate(m, err);
}

/* ---- public: loading ----------------------------------------------------- */

void kvi_load_params_default(kvi_load_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->use_mmap = false;
    p->tokenizer_path = NULL;
    p->repack = true;
}

void kvi_model_free(kvi_model *m)
{
    if (!m) return;
    if (m->tok) tokenizer_free(m->tok);
    if (m->gguf) gguf_close(m->gguf);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    if (m->map_addr) munmap(m->map_addr, m->map_len);
    free(m);
}

/* 1 directory, 2 regular file starting with "GGUF", 3 other regular file; <0 error. */
static int model_path_kind(const char *path, kvi_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0) return err_set(err, KVI_E_IO, "cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return 1;
    if (!S_ISREG(st.st_mode))
        return err_set(err, KVI_E_IO, "%s is neither a regular file nor a directory", path);
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, KVI_E_IO, "cannot open %s: %s", path, strerror(errno));
    char magic[4] = { 0 };
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(magic, "GGUF", 4) == 0 ? 2 : 3;
}

kvi_model *kvi_model_load(const char *path, const kvi_load_params *p, kvi_error *err)
{
    kvi_load_params def;
    if (!p) {
        kvi_load_params_default(&def);
        p = &def;
    }
    if (!path || !*path) {
        err_set(err, KVI_E_INVALID, "model: no path given");
        return NULL;
    }
    int kind = model_path_kind(path, err);
    if (kind < 0) return NULL;
    kvi_model *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(err, KVI_E_NOMEM, "model: out of memory");
        return NULL;
    }
    int rc = kind == 1   ? model_load_hf(m, path, p, err)
             : kind == 2 ? model_load_gguf(m, path, p, err)
                         : model_load_llama2c(m, path, p, err);
    if (rc) {
        kvi_model_free(m);
        return NULL;
    }
    return m;
}

/* Number of entries of a llama2.c tokenizer.bin: int32 max_token_length, then
 * records {f32 score, int32 len, len bytes} up to the end of the file. */
static int llama2c_tokenizer_count(const char *path, int32_t *n_out, kvi_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, KVI_E_IO, "cannot open %s: %s", path, strerror(errno));
    int32_t max_len, n = 0;
    int rc = 0;
    if (fread(&max_len, 4, 1, f) != 1 || max_len <= 0 || max_len > (1 << 16)) {
        rc = err_set(err, KVI_E_FORMAT, "%s: not a GGUF file, a tokenizer.json or a llama2.c tokenizer.bin",
                     path);
        goto done;
    }
    for (;;) {
        unsigned char rec[8];
        size_t got = fread(rec, 1, 8, f);
        if (got == 0 && feof(f)) break;
        int32_t len;
        memcpy(&len, rec + 4, 4);
        if (got != 8 || len < 0 || len > max_len || fseek(f, len, SEEK_CUR) != 0 || n == MODEL_MAX_VOCAB) {
            rc = err_set(err, KVI_E_FORMAT, "%s: llama2.c tokenizer entry %d is malformed", path, n);
            goto done;
        }
        n++;
    }
    /* fseek past the end succeeds: make sure the last record really fits. */
    long pos = ftell(f);
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) != pos || n == 0)
        rc = err_set(err, KVI_E_FORMAT, "%s: llama2.c tokenizer is truncated or empty", path);
done:
    fclose(f);
    *n_out = n;
    return rc;
}

static bool file_starts_with_brace(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t' || c == 0xEF || c == 0xBB ||
           c == 0xBF)
        ;
    fclose(f);
    return c == '{';
}

static int vocab_load_into(kvi_model *m, const char *path, kvi_error *err)
{
    int kind = model_path_kind(path, err);
    if (kind < 0) return kind;
    int rc;
    if (kind == 1) {
        char *json = model_path_join(path, "tokenizer.json");
        if (!json) return err_set(err, KVI_E_NOMEM, "out of memory");
        rc = tokenizer_load_hf(json, &m->tok, err);
        free(json);
    } else if (kind == 2) {
        if ((rc = gguf_open(path, true, &m->gguf, err))) return rc;
        model_copy_str(m->arch, sizeof m->arch, gguf_get_str(m->gguf, "general.architecture"));
        model_copy_str(m->name, sizeof m->name, gguf_get_str(m->gguf, "general.name"));
        rc = tokenizer_load_gguf(m->gguf, &m->tok, err);
    } else if (file_starts_with_brace(path)) {
        rc = tokenizer_load_hf(path, &m->tok, err);
    } else {
        int32_t n = 0;
        if ((rc = llama2c_tokenizer_count(path, &n, err))) return rc;
        rc = tokenizer_load_llama2c(path, n, &m->tok, err);
    }
    if (rc) return rc;
    if (!m->tok) return err_set(err, KVI_E_FORMAT, "%s: no tokenizer loaded", path);
    m->n_vocab = tokenizer_n_vocab(m->tok);
    m->has_weights = false;
    return 0;
}

kvi_model *kvi_vocab_load(const char *path, kvi_error *err)
{
    if (!path || !*path) {
        err_set(err, KVI_E_INVALID, "vocab: no path given");
        return NULL;
    }
    kvi_model *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(err, KVI_E_NOMEM, "vocab: out of memory");
        return NULL;
    }
    if (vocab_load_into(m, path, err)) {
        kvi_model_free(m);
        return NULL;
    }
    return m;
}

/* ---- public: information ------------------------------------------------- */

/* The type holding the most elements among the layers' matrices. */
static kvi_type model_main_type(const kvi_model *m)
{
    uint64_t count[KVI_TYPE_COUNT] = { 0 };
    for (int l = 0; m->layers && l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const kern_tensor *mats[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (int i = 0; i < 7; i++)
            if ((unsigned)mats[i]->type < KVI_TYPE_COUNT)
                count[mats[i]->type] += (uint64_t)mats[i]->n_in * (uint64_t)mats[i]->n_out;
    }
    int best = KVI_TYPE_F32;
    for (int t = 0; t < KVI_TYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    return (kvi_type)best;
}

void kvi_model_get_info(const kvi_model *m, kvi_model_info *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!m) return;
    model_copy_str(out->arch, sizeof out->arch, m->arch);
    model_copy_str(out->name, sizeof out->name, m->name);
    out->n_vocab = m->n_vocab;
    out->n_ctx_train = m->n_ctx_train;
    out->dim = m->dim;
    out->n_layers = m->n_layers;
    out->n_heads = m->n_heads;
    out->n_kv_heads = m->n_kv_heads;
    out->head_dim = m->head_dim;
    out->ffn_dim = m->ffn_dim;
    out->weight_type = model_main_type(m);
    out->weight_bytes = m->weight_bytes;
    out->has_weights = m->has_weights;
}

bool kvi_model_has_weights(const kvi_model *m) { return m && m->has_weights; }

/* ---- public: tokenizer --------------------------------------------------- */

int32_t kvi_tokenize(const kvi_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                     int32_t *out, int32_t n_max)
{
    if (!m || !m->tok || (!text && len > 0) || (!out && n_max > 0) || n_max < 0) return KVI_E_INVALID;
    return tokenizer_encode(m->tok, text ? text : "", len, add_special, parse_special, out, n_max);
}

int32_t kvi_token_to_piece(const kvi_model *m, int32_t token, char *buf, size_t cap, bool render_special)
{
    if (!m || !m->tok || (!buf && cap > 0)) return KVI_E_INVALID;
    return tokenizer_token_to_piece(m->tok, token, buf, cap, render_special);
}

int32_t kvi_detokenize(const kvi_model *m, const int32_t *tokens, int32_t n, char *buf, size_t cap,
                       bool render_special, bool remove_leading_space)
{
    if (!m || !m->tok || n < 0 || (!tokens && n > 0) || (!buf && cap > 0)) return KVI_E_INVALID;
    return tokenizer_detokenize(m->tok, tokens, n, buf, cap, render_special, remove_leading_space);
}

int32_t kvi_token_bos(const kvi_model *m) { return m && m->tok ? tokenizer_bos(m->tok) : -1; }

int32_t kvi_token_eos(const kvi_model *m) { return m && m->tok ? tokenizer_eos(m->tok) : -1; }

bool kvi_token_is_eog(const kvi_model *m, int32_t token)
{
    return m && m->tok && tokenizer_is_eog(m->tok, token);
}

bool kvi_model_add_bos(const kvi_model *m) { return m && m->tok && tokenizer_add_bos(m->tok); }

const char *kvi_chat_family(const kvi_model *m)
{
    return m ? kvi_chat_family_of(tokenizer_chat_template(m->tok)) : "fallback";
}

int32_t kvi_chat_apply_family(const kvi_model *m, const char *family, const kvi_chat_msg *msgs, int n,
                              bool add_assistant, int32_t *out, int32_t n_max, kvi_error *err)
{
    if (!m || !m->tok) return err_set(err, KVI_E_INVALID, "chat template: bad arguments");
    return tokenizer_chat_apply(m->tok, family, msgs, n, add_assistant, out, n_max, err);
}

int32_t kvi_chat_apply(const kvi_model *m, const kvi_chat_msg *msgs, int n, bool add_assistant, int32_t *out,
                       int32_t n_max, kvi_error *err)
{
    return kvi_chat_apply_family(m, kvi_chat_family(m), msgs, n, add_assistant, out, n_max, err);
}

int32_t kvi_n_vocab(const kvi_model *m)
{
    if (!m) return 0;
    return m->n_vocab > 0 ? m->n_vocab : (m->tok ? tokenizer_n_vocab(m->tok) : 0);
}
