/*
 * model_hf.c — binding of a Hugging Face folder: config.json + model.safetensors
 * (one shard) + tokenizer.json.
 *
 * Architectures: LlamaForCausalLM ("llama") and Qwen2ForCausalLM ("qwen2").
 * Tensor names (N = layer):
 *   model.embed_tokens.weight [vocab][hidden]      lm_head.weight [vocab][hidden]
 *   model.norm.weight [hidden]
 *   model.layers.N.input_layernorm.weight [hidden]
 *   model.layers.N.self_attn.{q,k,v,o}_proj.weight  (q [heads*hd][hidden], k/v [kv*hd][hidden],
 *                                                    o [hidden][heads*hd])
 *   model.layers.N.self_attn.{q,k,v}_proj.bias      (qwen2)
 *   model.layers.N.post_attention_layernorm.weight [hidden]
 *   model.layers.N.mlp.{gate,up}_proj.weight [inter][hidden], mlp.down_proj.weight [hidden][inter]
 * PyTorch shapes are [out][in], which is exactly kern_tensor's [n_out][n_in].
 *
 * Invariants:
 *  - matrices keep their stored type (F32, F16, BF16) and point into the
 *    safetensors buffer owned by the model, except copies the model owns:
 *  - llama q_proj / k_proj rows are stored in "rotate-half" RoPE order (pairs
 *    (i, i + hd/2) in each head); they are copied with the rows of each head
 *    interleaved (new row 2i = old row i, new row 2i+1 = old row i + hd/2), so the
 *    forward pass applies the interleaved-pair RoPE of GGUF and llama2.c;
 *  - qwen2 keeps rotate-half order and sets rope_neox, as its GGUF files do;
 *  - tied embeddings (tie_word_embeddings): output == tok_embd; a file that stores
 *    only lm_head.weight then provides the embedding too.
 */
#define _POSIX_C_SOURCE 200809L
#include "model/model.h"
#include "base/file.h"

#include "base/error.h"
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HF_MAX_CONFIG (16u << 20)

/* A JSON object file (config.json) parsed into *out. */
static int hf_read_json(const char *path, cJSON **out, kvi_error *err)
{
    *out = NULL;
    char *buf;
    size_t n;
    switch (file_read_all(path, HF_MAX_CONFIG - 1, &buf, &n)) {
    case FILE_OK: break;
    case FILE_NOT_REGULAR: return err_set(err, KVI_E_IO, "hf: %s is not a regular file", path);
    case FILE_CANT_OPEN: return err_set(err, KVI_E_IO, "hf: cannot open %s", path);
    case FILE_NOMEM: return err_set(err, KVI_E_NOMEM, "hf: out of memory");
    case FILE_TOO_LARGE:
        return err_set(err, KVI_E_FORMAT, "hf: %s is larger than %u bytes", path, HF_MAX_CONFIG);
    default: return err_set(err, KVI_E_IO, "hf: read error on %s", path);
    }
    cJSON *j = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return err_set(err, KVI_E_FORMAT, "hf: %s is not a JSON object", path);
    }
    *out = j;
    return 0;
}

/* An integer field of config.json in [lo, hi]; def when absent and !required. */
static int hf_cfg_int(const cJSON *cfg, const char *key, bool required, int64_t def, int64_t lo, int64_t hi,
                      int *out, kvi_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    double d = (double)def;
    if (!v || cJSON_IsNull(v)) {
        if (required) return err_set(err, KVI_E_FORMAT, "hf: config.json: missing %s", key);
    } else if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
        return err_set(err, KVI_E_FORMAT, "hf: config.json: %s is not an integer", key);
    } else {
        d = v->valuedouble;
    }
    if (!(d >= (double)lo && d <= (double)hi))
        return err_set(err, KVI_E_FORMAT, "hf: config.json: %s = %g out of range [%lld, %lld]", key, d,
                       (long long)lo, (long long)hi);
    *out = (int)d;
    return 0;
}

static int hf_cfg_float(const cJSON *cfg, const char *key, bool required, double def, float *out,
                        kvi_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    double d = def;
    if (!v || cJSON_IsNull(v)) {
        if (required) return err_set(err, KVI_E_FORMAT, "hf: config.json: missing %s", key);
    } else if (!cJSON_IsNumber(v)) {
        return err_set(err, KVI_E_FORMAT, "hf: config.json: %s is not a number", key);
    } else {
        d = v->valuedouble;
    }
    if (!isfinite(d) || d <= 0.0)
        return err_set(err, KVI_E_FORMAT, "hf: config.json: %s = %g invalid", key, d);
    *out = (float)d;
    return 0;
}

/* Reads architecture and hyper-parameters from config.json into m; *tied set. */
static int hf_parse_config(struct kvi_model *m, const cJSON *cfg, bool *tied, kvi_error *err)
{
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    if (!cJSON_IsArray(archs) || cJSON_GetArraySize(archs) < 1)
        return err_set(err, KVI_E_FORMAT, "hf: config.json: missing architectures");
    const cJSON *a;
    const char *first = NULL;
    cJSON_ArrayForEach(a, archs)
    {
        if (!cJSON_IsString(a)) continue;
        if (!first) first = a->valuestring;
        if (strcmp(a->valuestring, "LlamaForCausalLM") == 0)
            snprintf(m->arch, sizeof m->arch, "llama");
        else if (strcmp(a->valuestring, "Qwen2ForCausalLM") == 0)
            snprintf(m->arch, sizeof m->arch, "qwen2");
    }
    if (!m->arch[0])
        return err_set(err, KVI_E_UNSUPPORTED,
                       "hf: architecture '%.64s' is not supported (LlamaForCausalLM, Qwen2ForCausalLM)",
                       first ? first : "?");
    m->rope_neox = strcmp(m->arch, "qwen2") == 0;

    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (scaling && !cJSON_IsNull(scaling))
        return err_set(err, KVI_E_UNSUPPORTED, "hf: config.json: rope_scaling is not supported");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return err_set(err, KVI_E_UNSUPPORTED, "hf: config.json: hidden_act must be \"silu\"");

    int rc;
    if ((rc = hf_cfg_int(cfg, "hidden_size", true, 0, 1, 1 << 17, &m->dim, err)) ||
        (rc = hf_cfg_int(cfg, "intermediate_size", true, 0, 1, 1 << 20, &m->ffn_dim, err)) ||
        (rc = hf_cfg_int(cfg, "num_hidden_layers", true, 0, 1, 4096, &m->n_layers, err)) ||
        (rc = hf_cfg_int(cfg, "num_attention_heads", true, 0, 1, 4096, &m->n_heads, err)) ||
        (rc = hf_cfg_int(cfg, "num_key_value_heads", false, m->n_heads, 1, 4096, &m->n_kv_heads, err)) ||
        (rc = hf_cfg_int(cfg, "vocab_size", true, 0, 1, 1 << 24, &m->n_vocab, err)) ||
        (rc = hf_cfg_int(cfg, "max_position_embeddings", false, 2048, 1, 1 << 24, &m->n_ctx_train, err)) ||
        (rc = hf_cfg_float(cfg, "rms_norm_eps", true, 0, &m->rms_eps, err)) ||
        (rc = hf_cfg_float(cfg, "rope_theta", false, 10000.0, &m->rope_theta, err)))
        return rc;
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(cfg, "head_dim");
    if ((!hd || cJSON_IsNull(hd)) && m->dim % m->n_heads != 0)
        return err_set(err, KVI_E_FORMAT,
                       "hf: config.json: hidden_size %d is not a multiple of num_attention_heads %d", m->dim,
                       m->n_heads);
    if ((rc = hf_cfg_int(cfg, "head_dim", false, m->dim / m->n_heads, 1, 4096, &m->head_dim, err))) return rc;
    m->n_rot = m->head_dim;
    model_block_defaults(m);

    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie) && !cJSON_IsNull(tie))
        return err_set(err, KVI_E_FORMAT, "hf: config.json: tie_word_embeddings is not a boolean");
    *tied = tie && cJSON_IsTrue(tie);
    return model_check_hparams(m, err);
}

/* Binds a [n_out][n_in] matrix. head_dim > 0: interleave the two halves of each
 * head's rows (rotate-half order -> interleaved pairs) into an owned copy. */
static int hf_matrix(struct kvi_model *m, const st_index *ix, const char *name, int64_t n_in, int64_t n_out,
                     bool required, int head_dim, kern_tensor *out, kvi_error *err)
{
    const st_tensor *t = st_find(ix, name);
    if (!t) return required ? err_set(err, KVI_E_FORMAT, "hf: missing tensor %s", name) : 0;
    if (!t->is_float)
        return err_set(err, KVI_E_UNSUPPORTED, "hf: tensor %s has dtype %s (need F32, F16 or BF16)", name,
                       t->dtype);
    if (t->n_dims != 2 || t->shape[0] != n_out || t->shape[1] != n_in)
        return err_set(
            err, KVI_E_FORMAT, "hf: tensor %s has shape [%lld, %lld] (%u dims), expected [%lld, %lld]", name,
            (long long)t->shape[0], (long long)t->shape[1], t->n_dims, (long long)n_out, (long long)n_in);
    const uint8_t *src = t->data;
    bool misaligned = ((uintptr_t)src % (uintptr_t)t->elem_size) != 0;
    if (head_dim > 0 && (n_out % head_dim != 0 || head_dim % 2 != 0))
        return err_set(err, KVI_E_FORMAT, "hf: tensor %s: %lld rows are not whole heads of %d", name,
                       (long long)n_out, head_dim);
    if (head_dim > 0 || misaligned) {
        size_t cap = (t->nbytes + 63) & ~(size_t)63;
        uint8_t *dst = model_own(m, aligned_alloc(64, cap ? cap : 64));
        if (!dst) return err_set(err, KVI_E_NOMEM, "hf: out of memory copying %s", name);
        size_t row = (size_t)n_in * (size_t)t->elem_size;
        if (head_dim > 0) {
            const int64_t half = head_dim / 2;
            for (int64_t h = 0; h < n_out / head_dim; h++)
                for (int64_t i = 0; i < half; i++) {
                    const int64_t base = h * head_dim;
                    memcpy(dst + (size_t)(base + 2 * i) * row, src + (size_t)(base + i) * row, row);
                    memcpy(dst + (size_t)(base + 2 * i + 1) * row, src + (size_t)(base + i + half) * row,
                           row);
                }
        } else {
            memcpy(dst, src, t->nbytes);
        }
        src = dst;
    }
    out->data = src;
    out->type = t->type;
    out->n_in = n_in;
    out->n_out = n_out;
    m->weight_bytes += t->nbytes;
    return 0;
}

static int hf_vector(struct kvi_model *m, const st_index *ix, const char *name, int64_t n, bool required,
                     const float **out, kvi_error *err)
{
    const st_tensor *t = st_find(ix, name);
    *out = NULL;
    if (!t) return required ? err_set(err, KVI_E_FORMAT, "hf: missing tensor %s", name) : 0;
    if (!t->is_float)
        return err_set(err, KVI_E_UNSUPPORTED, "hf: tensor %s has dtype %s (need F32, F16 or BF16)", name,
                       t->dtype);
    if (t->n_dims != 1 || t->shape[0] != n)
        return err_set(err, KVI_E_FORMAT, "hf: tensor %s has %u dims [%lld, ...], expected [%lld]", name,
                       t->n_dims, (long long)t->shape[0], (long long)n);
    m->weight_bytes += t->nbytes;
    return model_vec_f32(m, name, t->data, t->type, n, out, err);
}

static int hf_bind_tensors(struct kvi_model *m, const st_index *ix, bool tied, kvi_error *err)
{
    const int64_t dim = m->dim, q_dim = (int64_t)m->n_heads * m->head_dim,
                  kv_dim = (int64_t)m->n_kv_heads * m->head_dim, ffn = m->ffn_dim;
    const char *embd = "model.embed_tokens.weight";
    if (tied && !st_find(ix, embd)) embd = "lm_head.weight";
    int rc;
    if ((rc = hf_matrix(m, ix, embd, dim, m->n_vocab, true, 0, &m->tok_embd, err)) ||
        (rc = hf_vector(m, ix, "model.norm.weight", dim, true, &m->output_norm, err)))
        return rc;
    if (tied)
        m->output = m->tok_embd;
    else if ((rc = hf_matrix(m, ix, "lm_head.weight", dim, m->n_vocab, true, 0, &m->output, err)))
        return rc;

    m->layers = model_own(m, calloc((size_t)m->n_layers, sizeof *m->layers));
    if (!m->layers) return err_set(err, KVI_E_NOMEM, "hf: out of memory for %d layers", m->n_layers);
    /* Only llama's q/k need reordering; qwen2 uses the rotate-half RoPE itself. */
    const int perm = m->rope_neox ? 0 : m->head_dim;
    for (int l = 0; l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        static const char *const parts[12] = {
            "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
            "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
            "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
            "self_attn.q_proj.bias",   "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
        };
        char n[12][96];
        for (int i = 0; i < 12; i++) snprintf(n[i], sizeof n[i], "model.layers.%d.%s", l, parts[i]);
        if ((rc = hf_vector(m, ix, n[0], dim, true, &L->attn_norm, err)) ||
            (rc = hf_matrix(m, ix, n[1], dim, q_dim, true, perm, &L->wq, err)) ||
            (rc = hf_matrix(m, ix, n[2], dim, kv_dim, true, perm, &L->wk, err)) ||
            (rc = hf_matrix(m, ix, n[3], dim, kv_dim, true, 0, &L->wv, err)) ||
            (rc = hf_matrix(m, ix, n[4], q_dim, dim, true, 0, &L->wo, err)) ||
            (rc = hf_vector(m, ix, n[5], dim, true, &L->ffn_norm, err)) ||
            (rc = hf_matrix(m, ix, n[6], dim, ffn, true, 0, &L->w_gate, err)) ||
            (rc = hf_matrix(m, ix, n[7], dim, ffn, true, 0, &L->w_up, err)) ||
            (rc = hf_matrix(m, ix, n[8], ffn, dim, true, 0, &L->w_down, err)))
            return rc;
        /* Biases would need the same permutation as their rows; only qwen2 has them. */
        if (m->rope_neox && ((rc = hf_vector(m, ix, n[9], q_dim, false, &L->bq, err)) ||
                             (rc = hf_vector(m, ix, n[10], kv_dim, false, &L->bk, err)) ||
                             (rc = hf_vector(m, ix, n[11], kv_dim, false, &L->bv, err))))
            return rc;
        if (!m->rope_neox && (st_find(ix, n[9]) || st_find(ix, n[10]) || st_find(ix, n[11])))
            return err_set(err, KVI_E_UNSUPPORTED, "hf: llama attention biases (%s) are not supported", n[9]);
    }
    return 0;
}

/* The last path component of dir, without trailing slashes. */
static void hf_folder_name(const char *dir, char *out, size_t cap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), dir + b);
}

int model_load_hf(struct kvi_model *m, const char *dir, const kvi_load_params *p, kvi_error *err)
{
    char *cfg_path = model_path_join(dir, "config.json");
    char *st_path = model_path_join(dir, "model.safetensors");
    char *idx_path = model_path_join(dir, "model.safetensors.index.json");
    char *tok_path = model_path_join(dir, "tokenizer.json");
    cJSON *cfg = NULL;
    st_index *ix = NULL;
    int rc = 0;
    if (!cfg_path || !st_path || !idx_path || !tok_path) {
        rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
        goto done;
    }
    bool tied = false;
    if ((rc = hf_read_json(cfg_path, &cfg, err)) || (rc = hf_parse_config(m, cfg, &tied, err))) goto done;
    hf_folder_name(dir, m->name, sizeof m->name);

    struct stat st;
    if (stat(st_path, &st) != 0 && stat(idx_path, &st) == 0) {
        rc = err_set(err, KVI_E_UNSUPPORTED, "hf: %s: sharded safetensors are not supported", dir);
        goto done;
    }
    const uint8_t *buf;
    size_t size;
    if ((rc = model_read_file(m, st_path, p->use_mmap, &buf, &size, err)) ||
        (rc = st_parse(buf, size, &ix, err)) || (rc = hf_bind_tensors(m, ix, tied, err)) ||
        (rc = tokenizer_load_hf(tok_path, &m->tok, err)))
        goto done;
    m->has_weights = true;
    rc = model_validate(m, err);
done:
    st_free(ix);
    cJSON_Delete(cfg);
    free(cfg_path);
    free(st_path);
    free(idx_path);
    free(tok_path);
    return rc;
}
