/*
 * model_gguf.c — a model from a GGUF file: the common hyper-parameters, the RoPE
 * scaling keys, and the binding of every tensor by the architecture's flags
 * (arch.h). The architecture's own keys are read by its file (arch_*.c).
 *
 * Data structure: a binder (gbind) over the file's tensors, one `used` mark per
 * tensor. Invariants: a tensor is bound at most once, with its shape and byte size
 * checked against the hyper-parameters; after binding, every tensor of the file is
 * marked or belongs to a part the architecture declares unread (a multimodal
 * file's vision tower): any other tensor is refused by name, so a file is never
 * run with a part silently left out. Fused matrices (attn_qkv, phi3's ffn_up) are
 * bound once and exposed as row views (wq | wk | wv, w_gate | w_up): the views are
 * disjoint byte ranges of the one tensor, in its row order.
 */
#include "model/arch.h"
#include "model/model_enc.h"

#include "base/error.h"
#include "formats/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct gbind {
    struct kvi_model *m;
    uint8_t *used; /* [gguf_n_tensors] */
};

static const gguf_tensor *bind_find(gbind *b, const char *name)
{
    const gguf_tensor *t = gguf_find_tensor(b->m->gguf, name);
    if (t) b->used[t - gguf_tensor_at(b->m->gguf, 0)] = 1; /* one table of all tensors */
    return t;
}

int model_gguf_int(const gguf_ctx *g, const char *arch, const char *key, bool required, int64_t def,
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

int model_gguf_float(const gguf_ctx *g, const char *arch, const char *key, bool required, double def,
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
static int bind_matrix(gbind *b, const char *name, int64_t n_in, int64_t n_out, bool required,
                       kern_tensor *out, kvi_error *err)
{
    struct kvi_model *m = b->m;
    const gguf_tensor *t = bind_find(b, name);
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
static int bind_vector(gbind *b, const char *name, int64_t n, bool required, const float **out,
                       kvi_error *err)
{
    struct kvi_model *m = b->m;
    const gguf_tensor *t = bind_find(b, name);
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

/* Binds a 3-D expert tensor {n_in, n_out, n_exp} (GGUF order) as one matrix of
 * n_exp * n_out rows: expert e's matrix is rows [e * n_out, (e + 1) * n_out).
 * (Latent attention's per-head attn_k_b / attn_v_b {n_in, n_out, n_heads} too.) */
static int bind_experts(gbind *b, const char *name, int64_t n_in, int64_t n_out, int64_t n_exp,
                        kern_tensor *out, kvi_error *err)
{
    const gguf_tensor *t = bind_find(b, name);
    if (!t) return err_set(err, KVI_E_FORMAT, "gguf: missing tensor %s", name);
    if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_exp || t->ne[3] != 1)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)n_in, (long long)n_out, (long long)n_exp);
    const size_t row = quant_row_bytes(t->type, n_in);
    if (!quant_type_known(t->type) || row == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s: type %d cannot hold rows of %lld", name,
                       (int)t->type, (long long)n_in);
    if (t->nbytes != row * (size_t)(n_out * n_exp) || !t->data)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s has %zu bytes, expected %zu", name, t->nbytes,
                       row * (size_t)(n_out * n_exp));
    *out = (kern_tensor){ .data = t->data, .type = t->type, .n_in = n_in, .n_out = n_out * n_exp };
    b->m->weight_bytes += t->nbytes;
    return 0;
}

/* Binds n_exp vectors of n {n, n_exp} (F32/F16/BF16: per-expert biases, conv taps)
 * as n_exp * n floats, or leaves *out NULL when absent. */
static int bind_expert_bias(gbind *b, const char *name, int64_t n, int64_t n_exp, const float **out,
                            kvi_error *err)
{
    const gguf_tensor *t = bind_find(b, name);
    *out = NULL;
    if (!t) return 0;
    if (t->n_dims != 2 || t->ne[0] != n || t->ne[1] != n_exp || t->ne[2] != 1 || t->ne[3] != 1)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s has shape [%lld, %lld], expected [%lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)n, (long long)n_exp);
    const size_t bytes = quant_row_bytes(t->type, n) * (size_t)n_exp;
    if (quant_row_bytes(t->type, n) == 0 || t->nbytes != bytes || !t->data)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s has %zu bytes, expected %zu", name, t->nbytes,
                       bytes);
    b->m->weight_bytes += t->nbytes;
    return model_vec_f32(b->m, name, t->data, t->type, n * n_exp, out, err);
}

/* The RoPE scaling keys every architecture may carry, into rope[0]:
 * rope.scaling.type none / linear / yarn (factor, original_context_length,
 * yarn_beta_fast / yarn_beta_slow: llama.cpp's 32 and 1 when absent),
 * rope.scaling.attn_factor (multiplies cos and sin; LongRoPE files carry it). */
static int rope_scaling(struct kvi_model *m, const gguf_ctx *g, const char *arch, kvi_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *type = gguf_get_str(g, key);
    float factor = 1.0f, attn = 1.0f, beta_fast = 32.0f, beta_slow = 1.0f;
    int rc;
    if ((rc = model_gguf_float(g, arch, "rope.scaling.factor", false, 1.0, &factor, err)) ||
        (rc = model_gguf_float(g, arch, "rope.scaling.attn_factor", false, 1.0, &attn, err)) ||
        (rc = model_gguf_float(g, arch, "rope.scaling.yarn_beta_fast", false, 32.0, &beta_fast, err)) ||
        (rc = model_gguf_float(g, arch, "rope.scaling.yarn_beta_slow", false, 1.0, &beta_slow, err)) ||
        (rc = model_gguf_int(g, arch, "rope.scaling.original_context_length", false, m->n_ctx_train, 1,
                             MODEL_MAX_CTX, &m->rope_orig_ctx, err)))
        return rc;
    model_rope *r = &m->rope[0];
    r->mscale = attn;
    if (!type || strcmp(type, "none") == 0 || strcmp(type, "longrope") == 0) return 0;
    if (strcmp(type, "linear") == 0) {
        r->freq_scale = 1.0f / factor;
        return 0;
    }
    if (strcmp(type, "yarn") != 0)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: %s '%.32s' is not supported (linear, yarn)", key, type);
    model_rope_yarn(r, m->n_rot, m->rope_orig_ctx, factor, beta_fast, beta_slow, attn);
    return 0;
}

/* "<arch>.<what>" as per-layer flags when it is an array of booleans: *flags points at
 * its n_layers elements (the first, when the file lists more: trailing MTP blocks),
 * NULL when the key is absent or not an array; n_more: how many more elements it may have. */
static int layer_flags(struct kvi_model *m, const gguf_ctx *g, const char *what, int64_t n_more,
                       const uint8_t **flags, kvi_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, what);
    const int64_t ki = gguf_find_key(g, key);
    *flags = NULL;
    if (ki < 0 || gguf_kv_type(g, ki) != GGUF_T_ARRAY) return 0;
    gguf_vtype et, vt;
    uint64_t n;
    const void *raw;
    size_t len;
    const int rc = gguf_get_arr_info(g, key, &et, &n, err);
    if (rc) return rc;
    if (et != GGUF_T_BOOL || n < (uint64_t)m->n_layers || n > (uint64_t)(m->n_layers + n_more) ||
        gguf_kv_raw(g, ki, &vt, &raw, &len) != 0 || len < 8 + (size_t)n)
        return err_set(err, KVI_E_FORMAT, "gguf: %s must be %d booleans (one per layer)", key, m->n_layers);
    *flags = (const uint8_t *)raw + len - (size_t)n; /* the elements end the value */
    return 0;
}

int model_swa_layers(struct kvi_model *m, const gguf_ctx *g, int def_period, int local_rope, kvi_error *err)
{
    int w, rc;
    if ((rc = model_gguf_int(g, m->arch, "attention.sliding_window", true, 0, 1, MODEL_MAX_CTX, &w, err)))
        return rc;
    const uint8_t *flags = NULL; /* [n_layers] */
    if ((rc = layer_flags(m, g, "attention.sliding_window_pattern", 0, &flags, err))) return rc;
    int period = def_period;
    if (!flags && (rc = model_gguf_int(g, m->arch, "attention.sliding_window_pattern", false, def_period, 0,
                                       MODEL_MAX_LAYERS, &period, err)))
        return rc;
    for (int l = 0; l < m->n_layers; l++) {
        const bool local = flags ? flags[l] != 0 : period == 0 || l % period < period - 1;
        m->layers[l].window = local ? w : 0;
        m->layers[l].rope_set = local ? local_rope : 0;
    }
    return 0;
}
int model_hybrid_layers(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc, interval;
    if ((rc = model_ssm_keys(m, g, err)) || (rc = model_gguf_int(g, m->arch, "full_attention_interval", false,
                                                                 4, 1, MODEL_MAX_LAYERS, &interval, err)))
        return rc;
    const int inner = m->ssm_inner;
    if (m->ssm_hv % m->ssm_hk != 0 || (int64_t)m->ssm_hv * m->ssm_dk != inner)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: linear attention: %d value heads are not a multiple of %d key heads, or "
                       "inner_size %d is not %d x %d",
                       m->ssm_hv, m->ssm_hk, inner, m->ssm_hv, m->ssm_dk);
    const uint8_t *flags = NULL; /* [n_layers] */
    if ((rc = layer_flags(m, g, "attention.recurrent_layers", m->n_nextn, &flags, err))) return rc;
    m->n_recurrent = 0;
    for (int l = 0; l < m->n_layers; l++) {
        m->layers[l].recurrent = flags ? flags[l] != 0 : (l + 1) % interval != 0;
        m->n_recurrent += m->layers[l].recurrent;
    }
    if (m->n_recurrent == m->n_layers)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: every layer is linear attention (no attention layer)");
    return 0;
}

/* The mixture-of-experts keys any architecture may carry (arch.h's hparams
 * functions set the routing rules): expert_count (absent: dense), expert_used_count,
 * the expert width expert_feed_forward_length (absent: feed_forward_length, as
 * Mixtral and OLMoE files have it), a shared expert of expert_shared_count experts'
 * width, leading_dense_block_count dense layers first. */
static int expert_hparams(struct kvi_model *m, const gguf_ctx *g, const char *arch, kvi_error *err)
{
    int rc, n_shared = 0;
    if ((rc = model_gguf_int(g, arch, "expert_count", false, 0, 0, MODEL_MAX_EXPERTS, &m->n_expert, err)))
        return rc;
    if (m->n_expert == 0) return 0;
    if ((rc =
             model_gguf_int(g, arch, "expert_used_count", true, 0, 1, m->n_expert, &m->n_expert_used, err)) ||
        (rc = model_gguf_int(g, arch, "expert_feed_forward_length", false, m->ffn_dim, 1, MODEL_MAX_FFN,
                             &m->expert_ffn, err)) ||
        (rc = model_gguf_int(g, arch, "expert_shared_count", false, 0, 0, 64, &n_shared, err)) ||
        (rc = model_gguf_int(g, arch, "leading_dense_block_count", false, 0, 0, m->n_layers, &m->n_dense_lead,
                             err)))
        return rc;
    m->shared_ffn = n_shared * m->expert_ffn;
    /* Qwen2-MoE / Qwen3-Next: one shared expert of its own width */
    return model_gguf_int(g, arch, "expert_shared_feed_forward_length", false, m->shared_ffn, 0,
                          MODEL_MAX_FFN, &m->shared_ffn, err);
}

/* Multi-head latent attention (DeepSeek-V2/V3 as the converter writes it, model.h):
 * attention.kv_lora_rank > 0 turns it on; key_length is then the cache row
 * (kv rank + RoPE dims), key_length_mla / value_length_mla a head's query-key and
 * value dims, q_lora_rank 0 when queries come from attn_q directly. */
static int mla_hparams(struct kvi_model *m, const gguf_ctx *g, const char *arch, kvi_error *err)
{
    int rc, k_mla = 0;
    if ((rc = model_gguf_int(g, arch, "attention.kv_lora_rank", false, 0, 0, MODEL_MAX_HEAD_DIM,
                             &m->mla_kv_rank, err)))
        return rc;
    if (m->mla_kv_rank == 0) return 0;
    if ((rc = model_gguf_int(g, arch, "attention.q_lora_rank", false, 0, 0, MODEL_MAX_DIM, &m->mla_q_rank,
                             err)) ||
        (rc = model_gguf_int(g, arch, "attention.key_length_mla", true, 0, 2, MODEL_MAX_HEAD_DIM, &k_mla,
                             err)) ||
        (rc = model_gguf_int(g, arch, "attention.value_length_mla", true, 0, 1, MODEL_MAX_HEAD_DIM,
                             &m->mla_v_dim, err)) ||
        (rc =
             model_gguf_int(g, arch, "rope.dimension_count", true, 0, 2, MODEL_MAX_HEAD_DIM, &m->n_rot, err)))
        return rc;
    m->mla_nope = k_mla - m->n_rot;
    if (m->n_kv_heads != 1 || m->head_dim != m->mla_kv_rank + m->n_rot || m->mla_nope < 1)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: latent attention: key_length %d must be kv_lora_rank %d + rope dims %d, "
                       "key_length_mla %d exceed them, head_count_kv %d be 1 (a file converted without "
                       "MLA? re-convert it with a recent convert_hf_to_gguf.py)",
                       m->head_dim, m->mla_kv_rank, m->n_rot, k_mla, m->n_kv_heads);
    return 0;
}

int model_hparams_gguf(struct kvi_model *m, const gguf_ctx *g, bool metadata_only, kvi_error *err)
{
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch || !arch[0]) return err_set(err, KVI_E_FORMAT, "gguf: no general.architecture");
    if (strlen(arch) >= sizeof m->arch)
        return err_set(err, KVI_E_FORMAT, "gguf: general.architecture is %zu bytes long", strlen(arch));
    model_copy_str(m->arch, sizeof m->arch, arch);
    model_copy_str(m->name, sizeof m->name, gguf_get_str(g, "general.name"));

    int rc;
    if ((rc = model_gguf_int(g, arch, "context_length", true, 0, 1, MODEL_MAX_CTX, &m->n_ctx_train, err)) ||
        (rc = model_gguf_int(g, arch, "embedding_length", true, 0, 1, MODEL_MAX_DIM, &m->dim, err)) ||
        (rc = model_gguf_int(g, arch, "block_count", true, 0, 1, MODEL_MAX_LAYERS, &m->n_layers, err)) ||
        (rc = model_gguf_int_max(g, arch, "feed_forward_length", !metadata_only, 0, metadata_only ? 0 : 1,
                                 MODEL_MAX_FFN, m->n_layers, &m->ffn_dim, err)) ||
        /* multi-token-prediction blocks (a draft head) end the block list: not run */
        (rc = model_gguf_int(g, arch, "nextn_predict_layers", false, 0, 0, m->n_layers - 1, &m->n_nextn,
                             err)) ||
        (rc = model_gguf_int(g, arch, "attention.head_count", true, 0, 1, MODEL_MAX_HEADS, &m->n_heads,
                             err)) ||
        /* per-layer arrays may hold 0 for layers without attention (lfm2, kimi-linear) */
        (rc = model_gguf_int_max(g, arch, "attention.head_count_kv", false, m->n_heads, 0, MODEL_MAX_HEADS,
                                 m->n_layers, &m->n_kv_heads, err)))
        return rc;
    if (m->n_kv_heads < 1) return err_set(err, KVI_E_FORMAT, "gguf: %s.attention.head_count_kv is 0", arch);
    m->n_layers -= m->n_nextn;
    if (m->n_heads % m->n_kv_heads != 0)
        return err_set(err, KVI_E_FORMAT, "gguf: head_count %d is not a multiple of head_count_kv %d",
                       m->n_heads, m->n_kv_heads);
    char key_len_name[96];
    snprintf(key_len_name, sizeof key_len_name, "%s.attention.key_length", arch);
    if (m->dim % m->n_heads != 0 && gguf_find_key(g, key_len_name) < 0)
        return err_set(err, KVI_E_FORMAT, "gguf: embedding_length %d is not a multiple of head_count %d",
                       m->dim, m->n_heads);
    if ((rc = model_gguf_int(g, arch, "attention.key_length", false, m->dim / m->n_heads, 1,
                             MODEL_MAX_HEAD_DIM, &m->head_dim, err)) ||
        (rc = mla_hparams(m, g, arch, err)))
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
    if ((rc = model_gguf_int(g, arch, "vocab_size", false, nv, metadata_only ? 0 : 1, MODEL_MAX_VOCAB,
                             &m->n_vocab, err)))
        return rc;
    if (metadata_only) return 0;

    /* what the forward pass computes with */
    snprintf(key_len_name, sizeof key_len_name, "%s.attention.layer_norm_epsilon", arch);
    const bool has_ln_eps = gguf_find_key(g, key_len_name) >= 0;
    int v_len;
    float ln_eps = 0.0f; /* LayerNorm models (cohere2, encoders) name their epsilon so */
    if ((has_ln_eps &&
         (rc = model_gguf_float(g, arch, "attention.layer_norm_epsilon", true, 0.0, &ln_eps, err))) ||
        (rc = model_gguf_int(g, arch, "attention.value_length", false,
                             m->mla_kv_rank > 0 ? m->mla_kv_rank : m->head_dim, 1, MODEL_MAX_HEAD_DIM, &v_len,
                             err)) ||
        (rc = model_gguf_int(g, arch, "rope.dimension_count", false, m->head_dim, 1, MODEL_MAX_HEAD_DIM,
                             &m->n_rot, err)) ||
        /* encoders: their arch reads attention.layer_norm_epsilon again */
        (rc = model_gguf_float(g, arch, "attention.layer_norm_rms_epsilon", !has_ln_eps, ln_eps, &m->rms_eps,
                               err)) ||
        (rc = model_gguf_float(g, arch, "rope.freq_base", false, 10000.0, &m->rope_theta, err)))
        return rc;
    model_block_defaults(m);
    if ((rc = rope_scaling(m, g, arch, err))) return rc;
    if ((rc = expert_hparams(m, g, arch, err))) return rc;
    if (m->mla_kv_rank > 0 ? v_len != m->mla_kv_rank : v_len != m->head_dim)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: value_length %d differs from %s %d", v_len,
                       m->mla_kv_rank > 0 ? "kv_lora_rank" : "key_length",
                       m->mla_kv_rank > 0 ? m->mla_kv_rank : m->head_dim);
    if (m->mla_kv_rank > 0) m->kq_scale = 1.0f / sqrtf((float)(m->mla_nope + m->n_rot));
    return model_check_hparams(m, err);
}

bool model_stage_keeps(const gguf_ctx *g, const gguf_tensor *t, int l0, int l1, int n_layers)
{
    int l, end = 0;
    if (sscanf(t->name, "blk.%d.%n", &l, &end) == 1 && end > 0) return l >= l0 && l < l1;
    if (!strcmp(t->name, "token_embd.weight"))
        return l0 == 0 || (l1 >= n_layers && !gguf_find_tensor(g, "output.weight"));
    if (!strcmp(t->name, "output.weight")) return l1 >= n_layers;
    return true;
}

size_t model_release_layers(const struct kvi_model *m, int l0, int l1)
{
    if (!m->gguf) return 0;
    size_t n = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if (t->data && !model_stage_keeps(m->gguf, t, l0, l1, m->n_layers))
            n += gguf_release(m->gguf, t->data, t->nbytes);
    }
    return n;
}

int model_gguf_n_layers(const gguf_ctx *g)
{
    const char *arch = gguf_get_str(g, "general.architecture");
    char key[96];
    int64_t blocks = 0, nextn = 0;
    if (!arch) return 0;
    snprintf(key, sizeof key, "%.64s.block_count", arch);
    if (gguf_get_int(g, key, &blocks, NULL) != 0) return 0;
    snprintf(key, sizeof key, "%.64s.nextn_predict_layers", arch);
    if (gguf_get_int(g, key, &nextn, NULL) != 0) nextn = 0;
    return blocks > nextn && nextn >= 0 && blocks <= MODEL_MAX_LAYERS ? (int)(blocks - nextn) : 0;
}

/* A staged load's range, and the layers the model runs (block_count less the
 * trailing multi-token-prediction blocks), for gguf_open_filtered. */
typedef struct stage_keep {
    int l0, l1, n_layers;
} stage_keep;

static bool stage_keep_fn(const gguf_ctx *g, const gguf_tensor *t, void *user)
{
    stage_keep *k = user;
    if (k->n_layers < 0) k->n_layers = model_gguf_n_layers(g); /* first call */
    return k->n_layers <= 0 || model_stage_keeps(g, t, k->l0, k->l1, k->n_layers);
}

/* The layers' matrices and the output matrix laid out for the kernels, in place
 * (kern_prepare_weights decides which and how: R16 tiles for Q8_0 / Q4_0 / IQ4_NL /
 * MXFP4 / Q4_K / Q6_K on AVX-512 VNNI), when the load parameters allow it (kvi_load_params.repack). A tied
 * output matrix is the token embedding too: both views get its layout. A prepare
 * that fails (memory) leaves the matrices as they were. One set of threads does
 * all (one start-up pass over the weights). */
static void model_prepare_weights(struct kvi_model *m)
{
    if (!kern_prepare_wanted() || !gguf_set_writable(m->gguf, true)) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    kern_tensor **mats = malloc(((size_t)m->n_layers * 26 + 1) * sizeof *mats); /* [26 * n_layers + 1] */
    int n = 0;
    /* expert (head) views stay whole R16 tiles only when every expert's (head's)
     * rows start a tile */
    const bool exp_ok = m->expert_ffn % 16 == 0 && m->dim % 16 == 0;
    const bool head_ok = m->mla_kv_rank % 16 == 0 && m->mla_v_dim % 16 == 0;
    for (int l = m->stage_l0; mats && l < m->stage_l1; l++) { /* a stage's layers only */
        model_layer *L = &m->layers[l];
        kern_tensor *lm[24] = { &L->wq,       &L->wk,        &L->wv,      &L->wo,       &L->w_gate,
                                &L->w_up,     &L->w_down,    &L->sh_gate, &L->sh_up,    &L->sh_down,
                                &L->wq_a,     &L->wq_b,      &L->wkv_a,   &L->exp_gate, &L->exp_up,
                                &L->exp_down, &L->wk_b,      &L->wv_b,    &L->ssm_qkv,  &L->ssm_z,
                                &L->ssm_beta, &L->ssm_alpha, &L->ssm_ba,  &L->ssm_out };
        for (int i = 0; i < 24; i++)
            if (lm[i]->data && (i < 13 || i >= 18 || (i < 16 ? exp_ok : head_ok))) mats[n++] = lm[i];
        if (L->wo_gate.data) mats[n++] = &L->wo_gate;
        if (L->ssm_in.data) mats[n++] = &L->ssm_in;
    }
    if (mats && m->output.data && m->stage_l1 == m->n_layers) mats[n++] = &m->output;
    if (mats && kern_prepare_weights(mats, n, cores > 1 ? (int)cores : 1) == 0 &&
        m->tok_embd.data == m->output.data)
        m->tok_embd.layout = m->output.layout;
    free(mats);
    (void)gguf_set_writable(m->gguf, false);
}

/* Layer l's latent attention (model.h): the query path (attn_q_a, its norm, attn_q_b;
 * or attn_q), attn_kv_a_mqa and its norm, and the per-head attn_k_b / attn_v_b. */
static int bind_mla(gbind *b, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, nh = m->n_heads, kr = m->mla_kv_rank, qr = m->mla_q_rank;
    const int64_t qh = (int64_t)m->mla_nope + m->n_rot;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if (qr > 0 ? ((rc = bind_matrix(b, NM("attn_q_a.weight"), dim, qr, true, &L->wq_a, err)) ||
                  (rc = bind_vector(b, NM("attn_q_a_norm.weight"), qr, true, &L->q_a_norm, err)) ||
                  (rc = bind_matrix(b, NM("attn_q_b.weight"), qr, nh * qh, true, &L->wq_b, err)))
               : (rc = bind_matrix(b, NM("attn_q.weight"), dim, nh * qh, true, &L->wq, err)))
        return rc;
    if (bind_find(b, NM("attn_kv_b.weight")) && !gguf_find_tensor(m->gguf, NM("attn_k_b.weight")))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "gguf: blk.%d has attn_kv_b but no attn_k_b / attn_v_b: a file converted before "
                       "llama.cpp's MLA split; re-convert it with a recent convert_hf_to_gguf.py",
                       l);
    if ((rc = bind_matrix(b, NM("attn_kv_a_mqa.weight"), dim, kr + m->n_rot, true, &L->wkv_a, err)) ||
        (rc = bind_vector(b, NM("attn_kv_a_norm.weight"), kr, true, &L->kv_a_norm, err)) ||
        (rc = bind_experts(b, NM("attn_k_b.weight"), m->mla_nope, kr, nh, &L->wk_b, err)) ||
        (rc = bind_experts(b, NM("attn_v_b.weight"), kr, m->mla_v_dim, nh, &L->wv_b, err)))
        return rc;
    /* DeepSeek V3.2's lightning indexer (model.h idx_*) */
    const int64_t ih = m->idx_heads, id = m->idx_dim;
    if (ih > 0 &&
        ((rc = bind_matrix(b, NM("indexer.attn_q_b.weight"), qr, ih * id, true, &L->idx_wq_b, err)) ||
         (rc = bind_matrix(b, NM("indexer.attn_k.weight"), dim, id, true, &L->idx_wk, err)) ||
         (rc = bind_vector(b, NM("indexer.k_norm.weight"), id, true, &L->idx_k_norm, err)) ||
         (rc = bind_vector(b, NM("indexer.k_norm.bias"), id, true, &L->idx_k_bias, err)) ||
         (rc = bind_matrix(b, NM("indexer.proj.weight"), dim, ih, true, &L->idx_proj, err))))
        return rc;
#undef NM
    return 0;
}

/* Layer l's gated DeltaNet mixer (model.h): the fused q/k/v and z projections, the
 * beta / alpha projections (two, or one fused ssm_ba), the conv taps, the gates'
 * vectors, the output norm and projection. Older converters' single ssm_in is
 * refused with a message. */
static int bind_delta(gbind *b, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, dk = m->ssm_dk, hk = m->ssm_hk, hv = m->ssm_hv;
    const int64_t conv = 2 * hk * dk + hv * dk, inner = hv * dk;
    char n[64];
    if (m->ssm_kda) return model_bind_kda(b, l, err); /* KDA's own tensors (model_gguf_kda.c) */
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    if (bind_find(b, NM("ssm_in.weight")))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "gguf: blk.%d has ssm_in (an older converter's fused projection) instead of "
                       "attn_qkv + attn_gate: re-convert it with a recent convert_hf_to_gguf.py",
                       l);
    int rc;
    if ((rc = bind_matrix(b, NM("attn_qkv.weight"), dim, conv, true, &L->ssm_qkv, err)) ||
        (rc = bind_matrix(b, NM("attn_gate.weight"), dim, inner, true, &L->ssm_z, err)) ||
        (rc = bind_matrix(b, NM("ssm_ba.weight"), dim, 2 * hv, false, &L->ssm_ba, err)))
        return rc;
    if (!L->ssm_ba.data && ((rc = bind_matrix(b, NM("ssm_beta.weight"), dim, hv, true, &L->ssm_beta, err)) ||
                            (rc = bind_matrix(b, NM("ssm_alpha.weight"), dim, hv, true, &L->ssm_alpha, err))))
        return rc;
    /* conv taps {K, C}: one f32 row of K per channel */
    if ((rc = bind_expert_bias(b, NM("ssm_conv1d.weight"), m->ssm_conv, conv, &L->conv_w, err))) return rc;
    if (!L->conv_w) return err_set(err, KVI_E_FORMAT, "gguf: missing tensor %s", n);
    if ((rc = bind_vector(b, NM("ssm_dt.bias"), hv, true, &L->dt_bias, err)) ||
        (rc = bind_vector(b, NM("ssm_a"), hv, true, &L->ssm_a, err)) ||
        (rc = bind_vector(b, NM("ssm_norm.weight"), dk, true, &L->ssm_norm, err)) ||
        (rc = bind_matrix(b, NM("ssm_out.weight"), inner, dim, true, &L->ssm_out, err)))
        return rc;
#undef NM
    return 0;
}

/* Layer l's gated short convolution (lfm2, model.h shortconv): in_proj, the taps
 * {K, dim} (one f32 row of K per channel), out_proj. */
static int bind_shortconv(gbind *b, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if ((rc = bind_matrix(b, NM("shortconv.in_proj.weight"), dim, 3 * dim, true, &L->ssm_qkv, err)) ||
        (rc = bind_expert_bias(b, NM("shortconv.conv.weight"), m->ssm_conv, dim, &L->conv_w, err)))
        return rc;
    if (!L->conv_w) return err_set(err, KVI_E_FORMAT, "gguf: missing tensor %s", n);
    if ((rc = bind_matrix(b, NM("shortconv.out_proj.weight"), dim, dim, true, &L->ssm_out, err))) return rc;
#undef NM
    return 0;
}

/* Layer l's Mamba-2 mixer (model.h): ssm_in, the conv taps {K, C} and bias, dt bias,
 * A and D {1, n_h}, the grouped norm {d_inner / G, G} (absent: none), ssm_out. */
static int bind_mamba2(gbind *b, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, di = m->ssm_inner, g = m->ssm_hk, nh = m->ssm_hv;
    const int64_t conv = di + 2 * g * m->ssm_dk;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if ((rc = bind_matrix(b, NM("ssm_in.weight"), dim, di + conv + nh, true, &L->ssm_in, err)) ||
        (rc = bind_expert_bias(b, NM("ssm_conv1d.weight"), m->ssm_conv, conv, &L->conv_w, err)) ||
        (rc = bind_vector(b, NM("ssm_conv1d.bias"), conv, true, &L->conv_b, err)) ||
        (rc = bind_vector(b, NM("ssm_dt.bias"), nh, true, &L->dt_bias, err)) ||
        (rc = bind_expert_bias(b, NM("ssm_a"), 1, nh, &L->ssm_a, err)) ||
        (rc = bind_expert_bias(b, NM("ssm_d"), 1, nh, &L->ssm_d, err)) ||
        (rc = bind_expert_bias(b, NM("ssm_norm.weight"), di / g, g, &L->ssm_norm, err)) ||
        (rc = bind_matrix(b, NM("ssm_out.weight"), di, dim, true, &L->ssm_out, err)))
        return rc;
    if (!L->conv_w || !L->ssm_a || !L->ssm_d)
        return err_set(err, KVI_E_FORMAT, "gguf: blk.%d: ssm_conv1d.weight, ssm_a or ssm_d is missing", l);
#undef NM
    return 0;
}

/* Layer l's attention of the gemma4 kind (ARCH_V_FROM_K): attn_q, and attn_k with an
 * optional attn_v (absent: V is K's projection) unless the layer reads another
 * layer's K/V (kv_share: its attn_k / attn_v / attn_k_norm, if the file has them,
 * are ignored as llama.cpp does); per-head q/k norms; attn_output. */
static int bind_attention_shared(gbind *b, const model_arch *a, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, hd = model_lhd(m, L), qd = (int64_t)m->n_heads * hd,
                  kvd = (int64_t)model_lkvh(m, L) * hd;
    const bool own = !L->kv_share, head = a->qk_norm == MODEL_QK_HEAD;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if (!own) { /* marked as read, never bound */
        bind_find(b, NM("attn_k.weight"));
        bind_find(b, NM("attn_v.weight"));
        bind_find(b, NM("attn_k_norm.weight"));
    }
    if ((rc = bind_matrix(b, NM("attn_q.weight"), dim, qd, true, &L->wq, err)) ||
        (own && (rc = bind_matrix(b, NM("attn_k.weight"), dim, kvd, true, &L->wk, err))) ||
        (own && (rc = bind_matrix(b, NM("attn_v.weight"), dim, kvd, false, &L->wv, err))) ||
        (a->qk_norm != MODEL_QK_NONE &&
         ((rc = bind_vector(b, NM("attn_q_norm.weight"), head ? hd : qd, true, &L->q_norm, err)) ||
          (own &&
           (rc = bind_vector(b, NM("attn_k_norm.weight"), head ? hd : kvd, true, &L->k_norm, err))))) ||
        (rc = bind_matrix(b, NM("attn_output.weight"), qd, dim, true, &L->wo, err)))
        return rc;
#undef NM
    return 0;
}

/* Layer l's attention mixer as the architecture's flags say. */
static int bind_attention(gbind *b, const model_arch *a, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, hd = model_lhd(m, L), qd = (int64_t)m->n_heads * hd,
                  kvd = (int64_t)model_lkvh(m, L) * hd;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if (L->kv_share || (a->flags & ARCH_V_FROM_K)) return bind_attention_shared(b, a, l, err);
    if (m->mla_kv_rank > 0) {
        if ((rc = bind_mla(b, l, err))) return rc;
    } else if (a->flags & ARCH_FUSED_QKV) {
        kern_tensor qkv = { 0 };
        if ((rc = bind_matrix(b, NM("attn_qkv.weight"), dim, qd + 2 * kvd, true, &qkv, err))) return rc;
        L->wq = kern_tensor_rows(&qkv, 0, qd);
        L->wk = kern_tensor_rows(&qkv, qd, kvd);
        L->wv = kern_tensor_rows(&qkv, qd + kvd, kvd);
    } else if ((rc = bind_matrix(b, NM("attn_q.weight"), dim, m->attn_gated ? 2 * qd : qd, true, &L->wq,
                                 err)) ||
               (rc = bind_matrix(b, NM("attn_k.weight"), dim, kvd, true, &L->wk, err)) ||
               (rc = bind_matrix(b, NM("attn_v.weight"), dim, kvd, true, &L->wv, err)) ||
               (rc = bind_vector(b, NM("attn_q.bias"), qd, false, &L->bq, err)) ||
               (rc = bind_vector(b, NM("attn_k.bias"), kvd, false, &L->bk, err)) ||
               (rc = bind_vector(b, NM("attn_v.bias"), kvd, false, &L->bv, err))) {
        return rc;
    }
    if (m->qk_norm != MODEL_QK_NONE) { /* the architecture's, unless its hparams turned it off */
        const bool head = m->qk_norm == MODEL_QK_HEAD;
        if ((rc = bind_vector(b, NM("attn_q_norm.weight"), head ? m->head_dim : qd, true, &L->q_norm, err)) ||
            (rc = bind_vector(b, NM("attn_k_norm.weight"), head ? m->head_dim : kvd, true, &L->k_norm, err)))
            return rc;
    }
    if ((a->flags & ARCH_ATTN_OUT_GATE) &&
        (rc = bind_matrix(b, NM("attn_gate.weight"), dim, qd, true, &L->wo_gate, err)))
        return rc;
    if ((rc = bind_matrix(b, NM("attn_output.weight"), m->mla_kv_rank ? m->n_heads * m->mla_v_dim : qd, dim,
                          true, &L->wo, err)) ||
        (rc = bind_vector(b, NM("attn_output.bias"), dim, false, &L->bo, err)) ||
        (rc = bind_vector(b, NM("attn_sinks.weight"), m->n_heads, false, &L->sinks, err)))
        return rc;
#undef NM
    return 0;
}

/* Binds layer l's tensors as the architecture's flags say. */
static int bind_layer(gbind *b, const model_arch *a, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, ffn = model_lffn(m, L);
    const bool pre = !(a->flags & ARCH_NO_PRE_NORM), post = (a->flags & ARCH_POST_NORMS) != 0;
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    const bool mamba2 = m->ssm_kind == MODEL_SSM_MAMBA2;
    if ((rc = bind_vector(b, NM("attn_norm.weight"), dim, pre, &L->attn_norm, err)) ||
        (!L->no_mixer && (rc = !L->recurrent  ? bind_attention(b, a, l, err)
                               : m->shortconv ? bind_shortconv(b, l, err)
                               : mamba2       ? bind_mamba2(b, l, err)
                                              : bind_delta(b, l, err))) ||
        (m->ssm_both && (rc = bind_mamba2(b, l, err))))
        return rc;
    L->moe = model_layer_moe(m, l);
    if (L->no_ffn) return 0; /* the mixer alone (nemotron_h) */
    if (L->no_mixer) {       /* the FFN alone, normed by attn_norm */
        L->ffn_norm = L->attn_norm;
    } else if (a->flags & ARCH_FFN_NORM_BARE) {
        if ((rc = bind_vector(b, NM("ffn_norm"), dim, true, &L->ffn_norm, err))) return rc;
    } else if (a->flags & ARCH_FFN_NORM_POST_ATTN) {
        if ((rc = bind_vector(b, NM("post_attention_norm.weight"), dim, true, &L->ffn_norm, err))) return rc;
    } else if ((rc = bind_vector(b, NM("post_attention_norm.weight"), dim, post, &L->post_attn_norm, err)) ||
               (rc = bind_vector(b, NM("ffn_norm.weight"), dim, pre && !(a->flags & ARCH_PARALLEL),
                                 &L->ffn_norm, err))) {
        return rc;
    }
    if (L->moe) {
        const int64_t E = m->n_expert, F = m->expert_ffn, S = m->shared_ffn;
        if ((rc = bind_matrix(b, NM("ffn_gate_inp.weight"), dim, E, true, &L->router, err)) ||
            (rc = bind_vector(b, NM("ffn_gate_inp.bias"), E, false, &L->router_b, err)) ||
            (rc = bind_vector(b, NM("exp_probs_b.bias"), E, false, &L->sel_bias, err)) ||
            (rc = (L->exp_gate_up = gguf_find_tensor(m->gguf, NM("ffn_gate_up_exps.weight")) != NULL)
                      ? bind_experts(b, n, dim, 2 * F, E, &L->exp_gate, err) /* fused: [gate | up] per expert */
                      : bind_experts(b, NM("ffn_gate_exps.weight"), dim, F, E, &L->exp_gate, err)) ||
            (rc = L->exp_gate_up ? 0 : bind_experts(b, NM("ffn_up_exps.weight"), dim, F, E, &L->exp_up, err)) ||
            (rc = bind_experts(b, NM("ffn_down_exps.weight"), F, dim, E, &L->exp_down, err)) ||
            (rc = bind_expert_bias(b, NM("ffn_gate_exps.bias"), F, E, &L->exp_b_gate, err)) ||
            (rc = bind_expert_bias(b, NM("ffn_up_exps.bias"), F, E, &L->exp_b_up, err)) ||
            (rc = bind_expert_bias(b, NM("ffn_down_exps.bias"), dim, E, &L->exp_b_down, err)))
            return rc;
        if (S > 0 &&
            ((rc = bind_matrix(b, NM("ffn_gate_shexp.weight"), dim, S, true, &L->sh_gate, err)) ||
             (rc = bind_matrix(b, NM("ffn_up_shexp.weight"), dim, S, true, &L->sh_up, err)) ||
             (rc = bind_matrix(b, NM("ffn_down_shexp.weight"), S, dim, true, &L->sh_down, err)) ||
             (rc = bind_vector(b, NM("ffn_gate_inp_shexp.weight"), dim, false, &L->sh_gate_inp, err))))
            return rc;
        if (m->gating == MODEL_GATE_SOFTMAX_CHOSEN && L->sel_bias != NULL)
            return err_set(err, KVI_E_UNSUPPORTED, "gguf: blk.%d.exp_probs_b needs sigmoid or softmax gating", l);
    } else if (a->flags & ARCH_FUSED_GATE_UP) {
        kern_tensor gu = { 0 };
        if ((rc = bind_matrix(b, NM("ffn_up.weight"), dim, 2 * ffn, true, &gu, err))) return rc;
        L->w_gate = kern_tensor_rows(&gu, 0, ffn);
        L->w_up = kern_tensor_rows(&gu, ffn, ffn);
    } else if (a->flags & ARCH_FFN_NO_GATE) {
        if ((rc = bind_matrix(b, NM("ffn_up.weight"), dim, ffn, true, &L->w_up, err)) ||
            (rc = bind_vector(b, NM("ffn_up.bias"), ffn, false, &L->b_up, err)))
            return rc;
    } else if ((rc = bind_matrix(b, NM("ffn_gate.weight"), dim, ffn, true, &L->w_gate, err)) ||
               (rc = bind_matrix(b, NM("ffn_up.weight"), dim, ffn, true, &L->w_up, err)) ||
               (rc = bind_vector(b, NM("ffn_gate.bias"), ffn, false, &L->b_gate, err)) ||
               (rc = bind_vector(b, NM("ffn_up.bias"), ffn, false, &L->b_up, err))) {
        return rc;
    }
    if ((!L->moe && ((rc = bind_matrix(b, NM("ffn_down.weight"), ffn, dim, true, &L->w_down, err)) ||
                     (rc = bind_vector(b, NM("ffn_down.bias"), dim, false, &L->b_down, err)))) ||
        (rc = bind_vector(b, NM("post_ffw_norm.weight"), dim, post, &L->post_ffn_norm, err)) ||
        (rc = bind_vector(b, NM("layer_output_scale.weight"), 1, false, &L->out_scale, err)))
        return rc;
    if (m->ple_dim &&
        ((rc = bind_matrix(b, NM("inp_gate.weight"), dim, m->ple_dim, true, &L->ple_gate, err)) ||
         (rc = bind_matrix(b, NM("proj.weight"), m->ple_dim, dim, true, &L->ple_proj, err)) ||
         (rc = bind_vector(b, NM("post_norm.weight"), dim, true, &L->ple_norm, err))))
        return rc;
#undef NM
    return 0;
}

/* Every tensor of the file bound, or of a part the architecture leaves unread. */
static int check_all_used(gbind *b, const model_arch *a, kvi_error *err)
{
    const int64_t n = gguf_n_tensors(b->m->gguf);
    for (int64_t i = 0; i < n; i++) {
        if (b->used[i]) continue;
        const char *name = gguf_tensor_at(b->m->gguf, i)->name;
        int blk = -1;
        const bool mtp = b->m->n_nextn > 0 && sscanf(name, "blk.%d.", &blk) == 1 && blk >= b->m->n_layers &&
                         blk < b->m->n_layers + b->m->n_nextn;
        if (mtp || ((a->flags & ARCH_VISION_PART) &&
                    (strncmp(name, "v.", 2) == 0 || strncmp(name, "mm.", 3) == 0))) {
            b->m->n_unread_tensors++;
            continue;
        }
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: tensor %.64s is not used by architecture %s", name,
                       a->name);
    }
    return 0;
}

static int bind_model(gbind *b, const model_arch *a, kvi_error *err)
{
    struct kvi_model *m = b->m;
    const int64_t dim = m->dim, half = m->n_rot / 2;
    int rc;
    if (a->flags & ARCH_ENCODER_TENSORS)
        return (rc = model_enc_bind_encoder(b, m, a->flags, err)) ||
                       (rc = model_enc_bind_heads(b, m, m->gguf, err))
                   ? rc
                   : check_all_used(b, a, err);
    if ((rc = bind_matrix(b, "token_embd.weight", dim, m->n_vocab, true, &m->tok_embd, err)) ||
        (rc =
             bind_vector(b, (a->flags & ARCH_OUT_NORM_EMBD) ? "token_embd_norm.weight" : "output_norm.weight",
                         dim, true, &m->output_norm, err)) ||
        (rc = bind_matrix(b, "output.weight", dim, m->n_vocab, false, &m->output, err)) ||
        (rc = bind_vector(b, "rope_freqs.weight", half, false, &m->rope_freqs, err)) ||
        (rc = bind_vector(b, "rope_factors_long.weight", half, false, &m->rope_long, err)) ||
        (rc = bind_vector(b, "rope_factors_short.weight", half, false, &m->rope_short, err)))
        return rc;
    if (!m->output.data) m->output = m->tok_embd;
    const int64_t np = (int64_t)m->n_layers * m->ple_dim; /* gemma4's per-layer inputs */
    if (m->ple_dim &&
        ((rc = bind_matrix(b, "per_layer_token_embd.weight", np, m->n_vocab, true, &m->ple_tok, err)) ||
         (rc = bind_matrix(b, "per_layer_model_proj.weight", dim, np, true, &m->ple_model_proj, err)) ||
         (rc = bind_vector(b, "per_layer_proj_norm.weight", m->ple_dim, true, &m->ple_proj_norm, err))))
        return rc;
    if (!m->rope_long != !m->rope_short)
        return err_set(err, KVI_E_FORMAT, "gguf: rope_factors_long and rope_factors_short come in pairs");
    if (m->rope_freqs) m->rope[0].factors = m->rope_freqs;
    for (int l = 0; l < m->n_layers; l++)
        if ((rc = bind_layer(b, a, l, err))) return rc;
    if ((rc = model_enc_bind_heads(b, m, m->gguf, err))) return rc;
    return check_all_used(b, a, err);
}

/* Binds the model of an opened m->gguf (path names it in messages). */
static int model_bind_gguf(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err)
{
    int rc;
    const gguf_ctx *g = m->gguf;
    const bool staged = p->stage_end > 0;
    if (!staged) gguf_prefault(g); /* a mapped file: no page faults in the first forward pass */
    m->file_bytes += gguf_file_size(g);
    const char *arch = gguf_get_str(g, "general.architecture");
    if (!arch) return err_set(err, KVI_E_FORMAT, "gguf: %s has no general.architecture", path);
    const model_arch *a = model_arch_find(arch);
    if (!a) {
        char list[256];
        model_arch_list(list, sizeof list);
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: architecture '%.64s' is not supported (%s)", arch,
                       list);
    }
    if ((rc = model_hparams_gguf(m, g, false, err))) return rc;
    m->layers = model_own(m, calloc((size_t)m->n_layers, sizeof *m->layers));
    if (!m->layers) return err_set(err, KVI_E_NOMEM, "gguf: out of memory for %d layers", m->n_layers);
    m->rope_neox = a->rope_neox;
    m->qk_norm = a->qk_norm;
    if (a->hparams && (rc = a->hparams(m, g, err))) return rc;
    if ((rc = model_check_hparams(m, err))) return rc;
    if (staged && p->stage_end > m->n_layers)
        return err_set(err, KVI_E_INVALID, "load: stage layers [%d, %d) beyond the model's %d", p->stage_first,
                       p->stage_end, m->n_layers);
    m->stage_l0 = staged ? p->stage_first : 0;
    m->stage_l1 = staged ? p->stage_end : m->n_layers;

    gbind b = { .m = m, .used = calloc((size_t)gguf_n_tensors(g) + 1, 1) };
    if (!b.used) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    rc = bind_model(&b, a, err);
    free(b.used);
    if (rc) return rc;

    if (!p->use_mmap && p->repack) model_prepare_weights(m);
    if ((rc = tokenizer_load_gguf(g, &m->tok, err))) return rc;
    m->has_weights = true;
    return (a->flags & ARCH_ENCODER_TENSORS) ? model_enc_validate(m, err) : model_validate(m, err);
}

int model_load_gguf(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err)
{
    const bool staged = p->stage_end > 0;
    if (staged && (p->stage_first < 0 || p->stage_first >= p->stage_end))
        return err_set(err, KVI_E_INVALID, "load: stage layers [%d, %d) are not a range", p->stage_first,
                       p->stage_end);
    stage_keep k = { p->stage_first, p->stage_end, -1 };
    int rc = staged ? gguf_open_filtered(path, p->use_mmap, stage_keep_fn, &k, &m->gguf, err)
                    : gguf_open(path, p->use_mmap, &m->gguf, err);
    return rc ? rc : model_bind_gguf(m, path, p, err);
}

int model_load_gguf_mem(struct kvi_model *m, const void *buf, size_t len, const kvi_load_params *p,
                        kvi_error *err)
{
    int rc = gguf_open_mem(buf, len, &m->gguf, err);
    return rc ? rc : model_bind_gguf(m, "<memory>", p, err);
}

int model_gbind_matrix(gbind *b, const char *name, int64_t n_in, int64_t n_out, bool required,
                       kern_tensor *out, kvi_error *err)
{
    return bind_matrix(b, name, n_in, n_out, required, out, err);
}

int model_gbind_vector(gbind *b, const char *name, int64_t n, bool required, const float **out,
                       kvi_error *err)
{
    return bind_vector(b, name, n, required, out, err);
}

int model_gbind_f32(gbind *b, const char *name, const int64_t ne[4], const float **out, kvi_error *err)
{
    const gguf_tensor *t = bind_find(b, name);
    *out = NULL;
    if (!t) return err_set(err, KVI_E_FORMAT, "gguf: missing tensor %s", name);
    if (t->ne[0] != ne[0] || t->ne[1] != ne[1] || t->ne[2] != ne[2] || t->ne[3] != ne[3])
        return err_set(
            err, KVI_E_FORMAT,
            "gguf: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]", name,
            (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
            (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]);
    const int64_t rows = ne[1] * ne[2] * ne[3];
    const size_t row = quant_row_bytes(t->type, ne[0]);
    if (row == 0 || t->nbytes != row * (size_t)rows || !t->data)
        return err_set(err, KVI_E_FORMAT, "gguf: tensor %s has %zu bytes for %lld elements", name, t->nbytes,
                       (long long)(ne[0] * rows));
    b->m->weight_bytes += t->nbytes;
    return model_vec_f32(b->m, name, t->data, t->type, ne[0] * rows, out, err);
}

struct kvi_model *model_gbind_model(gbind *b) { return b->m; }

int model_gbind_experts(gbind *b, const char *name, int64_t n_in, int64_t n_out, int64_t n_exp,
                        kern_tensor *out, kvi_error *err)
{
    return bind_experts(b, name, n_in, n_out, n_exp, out, err);
}
