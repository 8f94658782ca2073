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

/* ---- the block's shape ---------------------------------------------------- */

void model_block_defaults(struct kvi_model *m)
{
    m->qk_norm = MODEL_QK_NONE;
    m->act = MODEL_ACT_SILU;
    m->emb_scale = 1.0f;
    m->residual_scale = 1.0f;
    m->kq_scale = m->head_dim > 0 ? 1.0f / sqrtf((float)m->head_dim) : 1.0f;
    m->attn_softcap = 0.0f;
    m->final_softcap = 0.0f;
    m->logit_scale = 1.0f;
    m->n_rope_sets = 1;
    m->rope[0] =
        (model_rope){ .theta = m->rope_theta, .freq_scale = 1.0f, .factors = m->rope_freqs, .mscale = 1.0f };
    m->rope_orig_ctx = m->n_ctx_train;
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = true; /* Mixtral's top-k renormalisation; OLMoE turns it off */
    m->expert_scale = 1.0f;
    m->n_expert_groups = m->n_groups_used = 1;
}

void model_rope_yarn(model_rope *r, int n_rot, int orig_ctx, double factor, double beta_fast,
                     double beta_slow, double attn_factor)
{
    /* llama.cpp's correction dims: the pairs that turn more than beta_fast (resp.
     * less than beta_slow) times over the original context */
    const double nr = n_rot, base = r->theta, two_pi = 6.283185307179586476925286766559;
    const double lo = floor(nr * log(orig_ctx / (beta_fast * two_pi)) / (2 * log(base)));
    const double hi = ceil(nr * log(orig_ctx / (beta_slow * two_pi)) / (2 * log(base)));
    r->yarn = true;
    r->yarn_lo = (float)(lo > 0 ? lo : 0);
    r->yarn_hi = (float)(hi < nr - 1 ? hi : nr - 1);
    r->freq_scale = (float)(1.0 / factor);
    r->mscale = (float)(attn_factor * (1.0 + 0.1 * log(factor)));
}

void model_rope_for_ctx(const struct kvi_model *m, int n_ctx, model_rope out[MODEL_MAX_ROPE_SETS])
{
    for (int i = 0; i < MODEL_MAX_ROPE_SETS; i++) out[i] = m->rope[i];
    if (!m->rope_long) return;
    /* llama.cpp sizes a context in multiples of 256 and decides once per context */
    const int64_t n_ctx_seq = ((int64_t)(n_ctx > 0 ? n_ctx : m->n_ctx_train) + 255) / 256 * 256;
    out[0].factors = n_ctx_seq > m->rope_orig_ctx ? m->rope_long : m->rope_short;
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
    if (m->n_rope_sets < 1 || m->n_rope_sets > MODEL_MAX_ROPE_SETS)
        return err_set(err, KVI_E_FORMAT, "model: %d RoPE sets", m->n_rope_sets);
    for (int i = 0; i < m->n_rope_sets; i++) {
        const model_rope *r = &m->rope[i];
        if (!(r->theta > 0.0f) || !isfinite(r->theta) || !(r->freq_scale >= 0.0f) ||
            !isfinite(r->freq_scale) || !(r->mscale > 0.0f) || !isfinite(r->mscale))
            return err_set(err, KVI_E_FORMAT,
                           "model: RoPE set %d invalid (base %g, scale %g, attention factor %g)", i,
                           (double)r->theta, (double)r->freq_scale, (double)r->mscale);
    }
    const float sc[5] = { m->emb_scale, m->residual_scale, m->kq_scale, m->logit_scale, 1.0f };
    for (int i = 0; i < 5; i++)
        if (!(sc[i] > 0.0f) || !isfinite(sc[i]))
            return err_set(err, KVI_E_FORMAT, "model: scale %g invalid", (double)sc[i]);
    if (!(m->attn_softcap >= 0.0f) || !isfinite(m->attn_softcap) || !(m->final_softcap >= 0.0f) ||
        !isfinite(m->final_softcap))
        return err_set(err, KVI_E_FORMAT, "model: soft-cap invalid");
    if (m->n_expert) {
        if (m->n_expert < 1 || m->n_expert > MODEL_MAX_EXPERTS || m->n_expert_used < 1 ||
            m->n_expert_used > m->n_expert || m->expert_ffn < 1 || m->expert_ffn > MODEL_MAX_FFN ||
            m->shared_ffn < 0 || m->shared_ffn > MODEL_MAX_FFN || m->n_dense_lead < 0 ||
            m->n_dense_lead > m->n_layers)
            return err_set(
                err, KVI_E_FORMAT,
                "model: experts invalid (%d experts, %d used, width %d, shared %d, %d dense layers)",
                m->n_expert, m->n_expert_used, m->expert_ffn, m->shared_ffn, m->n_dense_lead);
        if (m->n_expert_groups < 1 || m->n_expert % m->n_expert_groups != 0 || m->n_groups_used < 1 ||
            m->n_groups_used > m->n_expert_groups ||
            (int64_t)m->n_groups_used * (m->n_expert / m->n_expert_groups) < m->n_expert_used)
            return err_set(err, KVI_E_FORMAT,
                           "model: %d expert groups (%d used) do not fit %d experts, %d used",
                           m->n_expert_groups, m->n_groups_used, m->n_expert, m->n_expert_used);
        if (!(m->expert_scale > 0.0f) || !isfinite(m->expert_scale))
            return err_set(err, KVI_E_FORMAT, "model: expert weights scale %g invalid",
                           (double)m->expert_scale);
    }
    if (m->mla_kv_rank &&
        (m->mla_kv_rank < 1 || m->mla_q_rank < 0 || m->mla_q_rank > MODEL_MAX_DIM || m->mla_nope < 1 ||
         m->mla_nope > MODEL_MAX_HEAD_DIM || m->mla_v_dim < 1 || m->mla_v_dim > MODEL_MAX_HEAD_DIM ||
         m->n_kv_heads != 1 || m->head_dim != m->mla_kv_rank + m->n_rot || m->mla_v_dim > m->head_dim))
        return err_set(err, KVI_E_FORMAT,
                       "model: latent attention invalid (kv rank %d, q rank %d, %d + %d key dims, %d value "
                       "dims, %d KV heads, cache row %d)",
                       m->mla_kv_rank, m->mla_q_rank, m->mla_nope, m->n_rot, m->mla_v_dim, m->n_kv_heads,
                       m->head_dim);
    if (m->shortconv && (m->ssm_conv < 2 || m->ssm_conv > 64 || m->n_recurrent < 1 ||
                         m->n_recurrent >= m->n_layers || m->mla_kv_rank))
        return err_set(err, KVI_E_FORMAT, "model: short convolution invalid (%d taps, %d of %d layers)",
                       m->ssm_conv, m->n_recurrent, m->n_layers);
    if (m->ssm_conv && !m->shortconv &&
        (m->ssm_conv < 2 || m->ssm_conv > 64 || m->ssm_dk < 1 || m->ssm_dk > MODEL_MAX_HEAD_DIM ||
         m->ssm_hk < 1 || m->ssm_hv < 1 || m->ssm_hv > MODEL_MAX_HEADS || m->ssm_hv % m->ssm_hk != 0 ||
         m->n_recurrent < 0 || m->n_recurrent > m->n_layers - !m->ssm_both || (m->mla_kv_rank && !m->ssm_kda) ||
         (m->ssm_kda && (m->ssm_hk != m->ssm_hv || m->ssm_rank < 1 || m->ssm_rank > MODEL_MAX_DIM))))
        return err_set(
            err, KVI_E_FORMAT,
            "model: linear attention invalid (%d taps, head dims %d, %d key / %d value heads, %d of %d "
            "layers)",
            m->ssm_conv, m->ssm_dk, m->ssm_hk, m->ssm_hv, m->n_recurrent, m->n_layers);
    if (m->ssm_conv && m->ssm_kind == MODEL_SSM_MAMBA2 &&
        (m->ssm_inner < 1 || m->ssm_inner > MODEL_MAX_DIM || m->ssm_inner % m->ssm_hv != 0 ||
         m->ssm_inner % m->ssm_hk != 0))
        return err_set(err, KVI_E_FORMAT,
                       "model: Mamba-2 inner size %d does not split into %d heads and %d groups",
                       m->ssm_inner, m->ssm_hv, m->ssm_hk);
    for (int l = 0; m->layers && l < m->n_layers; l++)
        if (m->layers[l].recurrent && !m->ssm_conv)
            return err_set(err, KVI_E_FORMAT,
                           "model: layer %d is recurrent in a model without linear attention", l);
    for (int l = 0; m->layers && l < m->n_layers; l++)
        if (m->layers[l].window < 0 || m->layers[l].rope_set < 0 || m->layers[l].rope_set >= m->n_rope_sets)
            return err_set(err, KVI_E_FORMAT, "model: layer %d: window %d / RoPE set %d invalid", l,
                           m->layers[l].window, m->layers[l].rope_set);
    for (int l = 0; m->layers && l < m->n_layers; l++)
        if (m->layers[l].attn_chunk < 0 ||
            (m->layers[l].q_temp && (!isfinite(m->q_temp_beta) || (m->q_temp_beta != 0.0f && m->q_temp_len < 1))))
            return err_set(err, KVI_E_FORMAT, "model: layer %d: attention chunk %d / temperature invalid", l,
                           m->layers[l].attn_chunk);
    for (int l = 0; m->layers && l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const int hd = model_lhd(m, L), kvh = model_lkvh(m, L), sh = L->kv_share - 1;
        const int nr = m->rope[L->rope_set].n_rot ? m->rope[L->rope_set].n_rot : m->n_rot;
        if (hd < 1 || hd > m->head_dim || kvh < 1 || kvh > m->n_kv_heads || m->n_heads % kvh != 0 ||
            model_lffn(m, L) < 1 || model_lffn(m, L) > m->ffn_dim ||
            (m->rope[L->rope_set].n_rot && (nr < 2 || nr > hd || nr % 2 || nr > m->n_rot)) ||
            (L->kv_share && (sh < 0 || sh >= l || m->layers[sh].kv_share ||
                             model_lhd(m, &m->layers[sh]) != hd || model_lkvh(m, &m->layers[sh]) != kvh)))
            return err_set(err, KVI_E_FORMAT,
                           "model: layer %d: widths (head %d, %d KV heads, FFN %d, RoPE %d) or its K/V "
                           "source %d invalid",
                           l, hd, kvh, model_lffn(m, L), nr, sh);
    }
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

/* Layer l's latent-attention matrices and norms (model.h). */
static int check_mla(const struct kvi_model *m, const model_layer *L, int l, kvi_error *err)
{
    const int64_t dim = m->dim, nh = m->n_heads, kr = m->mla_kv_rank, qr = m->mla_q_rank;
    const int64_t qh = (int64_t)m->mla_nope + m->n_rot;
    char nm[64];
    int rc;
#define MLA_CHECK(t, name, in, out) \
    (snprintf(nm, sizeof nm, "blk.%d.%s", l, name), check_matrix(t, nm, in, out, err))
    if ((qr > 0 ? ((rc = MLA_CHECK(&L->wq_a, "attn_q_a", dim, qr)) ||
                   (rc = MLA_CHECK(&L->wq_b, "attn_q_b", qr, nh * qh)))
                : (rc = MLA_CHECK(&L->wq, "attn_q", dim, nh * qh))) ||
        (rc = MLA_CHECK(&L->wkv_a, "attn_kv_a_mqa", dim, kr + m->n_rot)) ||
        (rc = MLA_CHECK(&L->wk_b, "attn_k_b", m->mla_nope, nh * kr)) ||
        (rc = MLA_CHECK(&L->wv_b, "attn_v_b", kr, nh * m->mla_v_dim)))
        return rc;
#undef MLA_CHECK
    if (!L->kv_a_norm || (qr > 0 && !L->q_a_norm))
        return err_set(err, KVI_E_FORMAT, "model: blk.%d: a latent attention norm is missing", l);
    return 0;
}

size_t model_state_layer_floats(const struct kvi_model *m)
{
    if (m->ssm_conv <= 0) return 0;
    if (m->shortconv) return (size_t)(m->ssm_conv - 1) * (size_t)m->dim;
    if (m->ssm_kind == MODEL_SSM_MAMBA2) {
        const size_t inner = (size_t)m->ssm_inner, gn = 2 * (size_t)m->ssm_hk * (size_t)m->ssm_dk;
        return (size_t)(m->ssm_conv - 1) * (inner + gn) + (size_t)m->ssm_dk * inner;
    }
    const size_t dk = (size_t)m->ssm_dk, conv = 2 * (size_t)m->ssm_hk * dk + (size_t)m->ssm_hv * dk;
    return (size_t)(m->ssm_conv - 1) * conv + (size_t)m->ssm_hv * dk * dk;
}

/* Layer l's gated DeltaNet matrices and vectors (model.h). */
static int check_delta(const struct kvi_model *m, const model_layer *L, int l, kvi_error *err)
{
    const int64_t dim = m->dim, dk = m->ssm_dk, hv = m->ssm_hv, inner = hv * dk;
    const int64_t conv = 2 * (int64_t)m->ssm_hk * dk + inner;
    char nm[64];
    int rc;
#define DELTA_CHECK(t, name, in, out) \
    (snprintf(nm, sizeof nm, "blk.%d.%s", l, name), check_matrix(t, nm, in, out, err))
    const int64_t R = m->ssm_rank;
    if (m->ssm_kda && ((rc = DELTA_CHECK(&L->wq, "attn_q", dim, inner)) ||
                       (rc = DELTA_CHECK(&L->wk, "attn_k", dim, inner)) ||
                       (rc = DELTA_CHECK(&L->wv, "attn_v", dim, inner)) ||
                       (rc = DELTA_CHECK(&L->ssm_f_a, "ssm_f_a", dim, R)) ||
                       (rc = DELTA_CHECK(&L->ssm_f_b, "ssm_f_b", R, inner)) ||
                       (rc = DELTA_CHECK(&L->ssm_g_a, "ssm_g_a", dim, R)) ||
                       (rc = DELTA_CHECK(&L->ssm_g_b, "ssm_g_b", R, inner)) ||
                       (rc = DELTA_CHECK(&L->ssm_beta, "ssm_beta", dim, hv)) ||
                       (rc = DELTA_CHECK(&L->ssm_out, "ssm_out", inner, dim))))
        return rc;
    if (!m->ssm_kda && ((rc = DELTA_CHECK(&L->ssm_qkv, "attn_qkv", dim, conv)) ||
                        (rc = DELTA_CHECK(&L->ssm_z, "attn_gate", dim, inner)) ||
                        (rc = DELTA_CHECK(&L->ssm_out, "ssm_out", inner, dim)) ||
                        (L->ssm_ba.data ? (rc = DELTA_CHECK(&L->ssm_ba, "ssm_ba", dim, 2 * hv))
                                        : ((rc = DELTA_CHECK(&L->ssm_beta, "ssm_beta", dim, hv)) ||
                                           (rc = DELTA_CHECK(&L->ssm_alpha, "ssm_alpha", dim, hv))))))
        return rc;
#undef DELTA_CHECK
    if (!L->conv_w || !L->dt_bias || !L->ssm_a || !L->ssm_norm)
        return err_set(err, KVI_E_FORMAT, "model: blk.%d: a linear attention vector is missing", l);
    return 0;
}

/* Layer l's gated short convolution (model.h shortconv). */
static int check_shortconv(const struct kvi_model *m, const model_layer *L, int l, kvi_error *err)
{
    char nm[64];
    int rc;
    snprintf(nm, sizeof nm, "blk.%d.shortconv.in_proj", l);
    if ((rc = check_matrix(&L->ssm_qkv, nm, m->dim, 3 * (int64_t)m->dim, err))) return rc;
    snprintf(nm, sizeof nm, "blk.%d.shortconv.out_proj", l);
    if ((rc = check_matrix(&L->ssm_out, nm, m->dim, m->dim, err))) return rc;
    if (!L->conv_w)
        return err_set(err, KVI_E_FORMAT, "model: blk.%d: the short convolution's taps are missing", l);
    return 0;
}

/* Layer l's Mamba-2 matrices and vectors (model.h). */
static int check_mamba2(const struct kvi_model *m, const model_layer *L, int l, kvi_error *err)
{
    const int64_t dim = m->dim, di = m->ssm_inner, gn = 2 * (int64_t)m->ssm_hk * m->ssm_dk;
    char nm[64];
    int rc;
    snprintf(nm, sizeof nm, "blk.%d.ssm_in", l);
    if ((rc = check_matrix(&L->ssm_in, nm, dim, 2 * di + gn + m->ssm_hv, err))) return rc;
    snprintf(nm, sizeof nm, "blk.%d.ssm_out", l);
    if ((rc = check_matrix(&L->ssm_out, nm, di, dim, err))) return rc;
    if (!L->conv_w || !L->conv_b || !L->dt_bias || !L->ssm_a || !L->ssm_d)
        return err_set(err, KVI_E_FORMAT, "model: blk.%d: a Mamba-2 vector is missing", l);
    return 0;
}

/* gemma4's per-layer inputs: the model's tensors once (l == 0), the layer's branch. */
static int check_ple(const struct kvi_model *m, const model_layer *L, int l, kvi_error *err)
{
    if (m->ple_dim == 0) return 0;
    const int64_t P = m->ple_dim, NP = (int64_t)m->n_layers * m->ple_dim;
    int rc;
    char nm[64];
    if (l == 0 && ((rc = check_matrix(&m->ple_tok, "per_layer_token_embd", NP, m->n_vocab, err)) ||
                   (rc = check_matrix(&m->ple_model_proj, "per_layer_model_proj", m->dim, NP, err))))
        return rc;
    snprintf(nm, sizeof nm, "blk.%d.inp_gate", l);
    if ((rc = check_matrix(&L->ple_gate, nm, m->dim, P, err))) return rc;
    snprintf(nm, sizeof nm, "blk.%d.proj", l);
    if ((rc = check_matrix(&L->ple_proj, nm, P, m->dim, err))) return rc;
    if (!m->ple_proj_norm || !L->ple_norm)
        return err_set(err, KVI_E_FORMAT, "model: blk.%d: a per-layer input norm is missing", l);
    return 0;
}

int model_kv_dim(const struct kvi_model *m)
{
    int d = m->n_kv_heads * m->head_dim;
    if (!m->layers) return d;
    d = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const int ld = model_lkvh(m, L) * model_lhd(m, L);
        if (!L->recurrent && !L->kv_share && ld > d) d = ld;
    }
    return d > 0 ? d : m->n_kv_heads * m->head_dim;
}

int model_validate_vocab(const struct kvi_model *m, kvi_error *err)
{
    int rc = model_check_hparams(m, err);
    if (rc) return rc;
    if (!m->tok) return err_set(err, KVI_E_FORMAT, "model: no tokenizer");
    if (tokenizer_n_vocab(m->tok) > m->n_vocab)
        return err_set(err, KVI_E_FORMAT, "model: tokenizer has %d tokens but the embedding only %d rows",
                       (int)tokenizer_n_vocab(m->tok), m->n_vocab);
    return 0;
}

int model_validate(const struct kvi_model *m, kvi_error *err)
{
    int rc = model_validate_vocab(m, err);
    if (rc) return rc;
    const int64_t dim = m->dim;
    if ((rc = check_matrix(&m->tok_embd, "token_embd", dim, m->n_vocab, err)) ||
        (rc = check_matrix(&m->output, "output", dim, m->n_vocab, err)))
        return rc;
    if (!m->output_norm || !m->layers)
        return err_set(err, KVI_E_FORMAT, "model: %s is missing",
                       m->output_norm ? "the layer table" : "output_norm");
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const int64_t q_dim = (int64_t)m->n_heads * model_lhd(m, L),
                      kv_dim = (int64_t)model_lkvh(m, L) * model_lhd(m, L), ffn = model_lffn(m, L);
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
        const int64_t E = m->n_expert, F = m->expert_ffn, S = m->shared_ffn;
        struct {
            const kern_tensor *t;
            const char *n;
            int64_t in, out;
        } moe[] = {
            { &L->router, "ffn_gate_inp", dim, E },    { &L->exp_gate, "ffn_gate_exps", dim, E * F },
            { &L->exp_up, "ffn_up_exps", dim, E * F }, { &L->exp_down, "ffn_down_exps", F, E * dim },
            { &L->sh_gate, "ffn_gate_shexp", dim, S }, { &L->sh_up, "ffn_up_shexp", dim, S },
            { &L->sh_down, "ffn_down_shexp", S, dim },
        };
        /* latent attention: its own matrices instead of wq, wk, wv */
        if (m->mla_kv_rank > 0 && !L->recurrent) {
            if ((rc = check_mla(m, L, l, err))) return rc;
            mats[0].t = mats[1].t = mats[2].t = NULL;
            mats[3].in = (int64_t)m->n_heads * m->mla_v_dim;
        }
        if (m->attn_gated) mats[0].out = 2 * q_dim; /* per head [q | gate] */
        if (m->act == MODEL_ACT_XIELU || m->act == MODEL_ACT_RELU2) mats[4].t = NULL; /* ungated FFN */
        if (L->recurrent || m->ssm_both) { /* a DeltaNet, short-convolution or Mamba-2 mixer instead of (or beside) attention */
            if ((rc = m->shortconv                       ? check_shortconv(m, L, l, err)
                      : m->ssm_kind == MODEL_SSM_MAMBA2 ? check_mamba2(m, L, l, err)
                                                        : check_delta(m, L, l, err)))
                return rc;
            if (!m->ssm_both) mats[0].t = mats[1].t = mats[2].t = mats[3].t = NULL;
        }
        if (L->no_mixer) mats[0].t = mats[1].t = mats[2].t = mats[3].t = NULL;
        if (L->no_ffn) mats[4].t = mats[5].t = mats[6].t = NULL;
        if (L->kv_share) mats[1].t = mats[2].t = NULL; /* reads another layer's K/V */
        if (!L->wv.data && L->v_rms) mats[2].t = NULL; /* V is the K projection */
        if ((rc = check_ple(m, L, l, err))) return rc;
        if (L->moe != model_layer_moe(m, l))
            return err_set(err, KVI_E_FORMAT, "model: blk.%d: the FFN kind does not match the model", l);
        const size_t n_mats = sizeof mats / sizeof mats[0], n_moe = S > 0 ? 7 : 4;
        if (L->exp_gate_up) { /* ffn_gate_up_exps: [gate | up] of each expert in exp_gate */
            moe[1].n = "ffn_gate_up_exps";
            moe[1].out = 2 * E * F;
            moe[2].t = &L->exp_gate;
            moe[2].n = "ffn_gate_up_exps";
            moe[2].out = 2 * E * F;
        }
        for (size_t i = 0; L->moe && i < n_moe; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s", l, moe[i].n);
            if ((rc = check_matrix(moe[i].t, nm, moe[i].in, moe[i].out, err))) return rc;
        }
        for (size_t i = 0; i < (L->moe ? n_mats - 3 : n_mats); i++) {
            if (!mats[i].t) continue;
            snprintf(nm, sizeof nm, "blk.%d.%s", l, mats[i].n);
            if ((rc = check_matrix(mats[i].t, nm, mats[i].in, mats[i].out, err))) return rc;
        }
        if (!m->parallel_ffn && !L->no_ffn && !L->attn_norm != !L->ffn_norm)
            return err_set(err, KVI_E_FORMAT, "model: blk.%d.%s is missing", l,
                           L->attn_norm ? "ffn_norm" : "attn_norm");
        if (!L->attn_norm && !L->post_attn_norm)
            return err_set(err, KVI_E_FORMAT, "model: blk.%d has no norm at all", l);
        if (!L->recurrent && !L->no_mixer &&
            (m->qk_norm != MODEL_QK_NONE) != (L->q_norm && (L->k_norm || L->kv_share)))
            return err_set(err, KVI_E_FORMAT, "model: blk.%d: q/k norm weights do not match the block", l);
    }
    return 0;
}

void model_copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src && src[n] && n + 1 < cap; n++)
        dst[n] = (unsigned char)src[n] < 0x20 ? '?' : src[n]; /* one printable line */
    dst[n] = 0;
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
        const kern_tensor *mats[15] = { &L->wq,   &L->wk,     &L->wv,       &L->wo,     &L->w_gate,
                                        &L->w_up, &L->w_down, &L->exp_gate, &L->exp_up, &L->exp_down,
                                        &L->wq_a, &L->wq_b,   &L->wkv_a,    &L->wk_b,   &L->wv_b };
        for (int i = 0; i < 15; i++)
            if (mats[i]->data && (unsigned)mats[i]->type < KVI_TYPE_COUNT)
                count[mats[i]->type] += (uint64_t)mats[i]->n_in * (uint64_t)mats[i]->n_out;
    }
    int best = KVI_TYPE_F32;
    for (int t = 0; t < KVI_TYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    return (kvi_type)best;
}

void model_info_shape(const struct kvi_model *m, kvi_model_info *out)
{
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
    out->n_expert = m->n_expert;
    out->n_expert_used = m->n_expert_used;
    out->expert_ffn = m->expert_ffn;
    out->mla_kv_rank = m->mla_kv_rank;
    out->mla_k_head = m->mla_kv_rank ? m->mla_nope + m->n_rot : 0;
    out->mla_v_head = m->mla_v_dim;
    out->n_layers_window = 0;
    out->window = 0;
    out->n_layers_recurrent = m->layers ? m->n_recurrent : 0;
    out->state_bytes = m->layers ? (size_t)m->n_recurrent * model_state_layer_floats(m) * sizeof(float) : 0;
    for (int l = 0; m->layers && l < m->n_layers; l++)
        if (m->layers[l].window > 0) {
            out->n_layers_window++;
            if (m->layers[l].window > out->window) out->window = m->layers[l].window;
        }
}

void kvi_model_get_info(const kvi_model *m, kvi_model_info *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!m) return;
    model_info_shape(m, out);
    out->weight_type = model_main_type(m);
    out->weight_bytes = m->weight_bytes;
    out->has_weights = m->has_weights;
    out->n_unread_tensors = m->n_unread_tensors;
}

bool kvi_model_has_weights(const kvi_model *m) { return m && m->has_weights; }

/* ---- public: tokenizer --------------------------------------------------- */

int32_t kvi_tokenize(const kvi_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                     int32_t *out, int32_t n_max)
{
    if (!m || !m->tok || (!text && len > 0) || (!out && n_max > 0) || n_max < 0) return KVI_E_INVALID;
    return tokenizer_encode(m->tok, text ? text : "", len, add_special, parse_special, out, n_max);
}

int32_t kvi_tokenize_plain(const kvi_model *m, const char *text, size_t len, bool add_special,
                           const size_t *plain, size_t n_plain, int32_t *out, int32_t n_max)
{
    if (!m || !m->tok || (!text && len > 0) || (!out && n_max > 0) || n_max < 0 || (!plain && n_plain > 0))
        return KVI_E_INVALID;
    for (size_t k = 0; k < n_plain; k++)
        if (plain[2 * k] > plain[2 * k + 1] || plain[2 * k + 1] > len) return KVI_E_INVALID;
    return tokenizer_encode_plain(m->tok, text ? text : "", len, add_special, true, plain, n_plain, out,
                                  n_max);
}

int32_t kvi_tokenize_pair(const kvi_model *m, const char *query, size_t qlen, const char *doc, size_t dlen,
                          int32_t *out, int32_t *types, int32_t n_max)
{
    if (!m || !m->tok) return KVI_E_INVALID;
    return tokenizer_encode_pair(m->tok, query, qlen, doc, dlen, out, types, n_max);
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

int32_t kvi_token_fim(const kvi_model *m, kvi_fim_kind kind)
{
    return m && m->tok ? tokenizer_fim(m->tok, (int)kind) : -1;
}

bool kvi_token_is_eog(const kvi_model *m, int32_t token)
{
    return m && m->tok && tokenizer_is_eog(m->tok, token);
}

bool kvi_model_add_bos(const kvi_model *m) { return m && m->tok && tokenizer_add_bos(m->tok); }

const char *kvi_chat_family(const kvi_model *m)
{
    return m ? kvi_chat_family_of(tokenizer_chat_template(m->tok)) : "fallback";
}

const char *kvi_model_chat_template(const kvi_model *m)
{
    return m && m->tok ? tokenizer_chat_template(m->tok) : NULL;
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
