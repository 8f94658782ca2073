/*
 * model_hf.c — a model from a Hugging Face folder: config.json, the weights in
 * model.safetensors or in shards listed by model.safetensors.index.json, and
 * tokenizer.json; the same struct kvi_model as the GGUF of the same weights gives
 * (llama.cpp's convert_hf_to_gguf.py undone at load time).
 *
 * Architectures (architectures[] -> arch.h name): LlamaForCausalLM and
 * MistralForCausalLM -> llama, Qwen2ForCausalLM -> qwen2, Qwen3ForCausalLM -> qwen3,
 * Gemma2ForCausalLM -> gemma2, Gemma3ForCausalLM and Gemma3ForConditionalGeneration
 * (its text_config; the vision tower is left unread) -> gemma3, Phi3ForCausalLM ->
 * phi3, GraniteForCausalLM -> granite, Olmo2ForCausalLM -> olmo2. The block's shape
 * comes from the arch.h entry (fused matrices, pre/post norms, q/k norm, RoPE
 * pairing); this file maps the names and reads the config keys.
 *
 * Tensor names (N = layer), PyTorch [out][in] = kern_tensor's [n_out][n_in]:
 *   model.embed_tokens.weight, model.norm.weight, lm_head.weight (absent when tied)
 *   model.layers.N.input_layernorm.weight           attn_norm (absent: olmo2)
 *   model.layers.N.self_attn.{q,k,v}_proj.{weight,bias}, o_proj (phi3: qkv_proj = Q|K|V)
 *   model.layers.N.self_attn.{q,k}_norm.weight      (qwen3, gemma3: [head_dim]; olmo2: whole row)
 *   model.layers.N.post_attention_layernorm.weight  the pre-FFN norm of llama-like blocks,
 *                                                   but the post-attention norm where the
 *                                                   block has post-norms (gemma2/3, olmo2)
 *   model.layers.N.pre_feedforward_layernorm.weight, post_feedforward_layernorm.weight
 *   model.layers.N.mlp.{gate,up,down}_proj.{weight,bias} (phi3: gate_up_proj = gate|up)
 * A multimodal wrapper's "language_model." (leading, or after "model.") is dropped.
 *
 * Config keys: hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, vocab_size,
 * max_position_embeddings, rms_norm_eps, rope_theta, tie_word_embeddings,
 * hidden_act / hidden_activation, rope_scaling or rope_parameters ({rope_type|type:
 * linear, llama3, yarn, longrope|su}, Gemma 3's {full_attention, sliding_attention}),
 * partial_rotary_factor and original_max_position_embeddings (phi3),
 * query_pre_attn_scalar, attn_logit_softcapping, final_logit_softcapping,
 * sliding_window, sliding_window_pattern, layer_types, rope_local_base_freq (gemma),
 * embedding_multiplier, residual_multiplier, attention_multiplier, logits_scaling
 * (granite). Absent keys take the transformers config class's default (Gemma 3's
 * text config lists few). A value kvinfer cannot run is refused with one line
 * naming the key. As llama.cpp does, sliding_window is ignored for llama/Mistral
 * and phi3 files.
 *
 * Data structure: an hf_src, the tensors of every shard sorted by name (names
 * without the multimodal prefix), each with a `used` mark.
 * Invariants:
 *  - names are unique over all shards; a sharded folder's index lists exactly the
 *    tensors its shards hold, each in the shard it names (a plain file name);
 *  - after binding every tensor is used, or is a vision-tower tensor of
 *    Gemma3ForConditionalGeneration, a rotary_emb.inv_freq buffer, or the
 *    lm_head.weight of a tied model: any other tensor is refused by name;
 *  - matrices keep their stored type (F32, F16, BF16) and point into the files'
 *    buffers (read or mapped, owned by the model), except owned copies:
 *  - llama / granite (NORM RoPE) q_proj / k_proj rows, and their biases and q/k
 *    norms, are stored in "rotate-half" order (pairs (i, i + hd/2) in each head);
 *    they are copied with each head's rows interleaved (new 2i = old i, new 2i+1 =
 *    old i + hd/2), the inverse of the converter's permute; NEOX archs keep them;
 *  - Gemma's norms (every *norm.weight) are stored as w and applied as (1 + w):
 *    the copies hold 1 + w, as the converter writes them;
 *  - fused matrices are bound once and exposed as disjoint row views.
 */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include "model/arch.h"
#include "model/rope_perm.h"
#include "formats/json_util.h"

#include "base/error.h"
#include "base/file.h"
#include "formats/quant.h"
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_MAX_CONFIG (16u << 20)
#define HF_MAX_SHARDS 4096

/* ---- config.json ---------------------------------------------------------- */

enum {
    HF_NORM_SHIFT = 1 << 0,  /* norms stored as w, applied as 1 + w (gemma) */
    HF_TEXT_CONFIG = 1 << 1, /* hyper-parameters in text_config; a vision part beside */
    HF_TIED = 1 << 2,        /* tie_word_embeddings defaults to true */
};

typedef struct hf_arch {
    const char *hf;   /* an architectures[] entry */
    const char *arch; /* model_arch name */
    unsigned flags;
} hf_arch;

static const hf_arch hf_archs[] = {
    { "LlamaForCausalLM", "llama", 0 },
    { "MistralForCausalLM", "llama", 0 },
    { "Qwen2ForCausalLM", "qwen2", 0 },
    { "Qwen3ForCausalLM", "qwen3", 0 },
    { "Gemma2ForCausalLM", "gemma2", HF_NORM_SHIFT | HF_TIED },
    { "Gemma3ForCausalLM", "gemma3", HF_NORM_SHIFT | HF_TIED },
    { "Gemma3ForConditionalGeneration", "gemma3", HF_NORM_SHIFT | HF_TIED | HF_TEXT_CONFIG },
    { "Phi3ForCausalLM", "phi3", 0 },
    { "GraniteForCausalLM", "granite", 0 },
    { "Olmo2ForCausalLM", "olmo2", 0 },
};

/* What the config decided beyond the model's fields. */
typedef struct hf_cfg {
    const hf_arch *ha;
    const model_arch *a;
    bool tied;
} hf_cfg;

/* A JSON object file (config.json, the shard index) parsed into *out. */
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
    bool oom = false;
    cJSON *j = kvi_json_parse(buf, n, &oom);
    free(buf);
    if (oom) return err_set(err, KVI_E_NOMEM, "hf: out of memory reading %s", path);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return err_set(err, KVI_E_FORMAT, "hf: %s is not a JSON object", path);
    }
    *out = j;
    return 0;
}

/* obj[key] unless absent or null */
static const cJSON *hf_item(const cJSON *obj, const char *key)
{
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An integer field of config.json in [lo, hi]; def when absent and !required. */
static int hf_cfg_int(const cJSON *cfg, const char *key, bool required, int64_t def, int64_t lo, int64_t hi,
                      int *out, kvi_error *err)
{
    const cJSON *v = hf_item(cfg, key);
    double d = (double)def;
    if (!v) {
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

/* A number > 0 (>= 0 when zero_ok); def when absent (or null) and !required. */
static int hf_cfg_num(const cJSON *cfg, const char *key, bool required, double def, bool zero_ok, double *out,
                      kvi_error *err)
{
    const cJSON *v = hf_item(cfg, key);
    double d = def;
    if (!v) {
        if (required) return err_set(err, KVI_E_FORMAT, "hf: config.json: missing %s", key);
    } else if (!cJSON_IsNumber(v)) {
        return err_set(err, KVI_E_FORMAT, "hf: config.json: %s is not a number", key);
    } else {
        d = v->valuedouble;
    }
    if (!isfinite(d) || d < 0.0 || (d == 0.0 && !zero_ok) || d > 1e30)
        return err_set(err, KVI_E_FORMAT, "hf: config.json: %s = %g invalid", key, d);
    *out = d;
    return 0;
}

static int hf_cfg_float(const cJSON *cfg, const char *key, bool required, double def, float *out,
                        kvi_error *err)
{
    double d;
    int rc = hf_cfg_num(cfg, key, required, def, false, &d, err);
    if (rc == 0) *out = (float)d;
    return rc;
}

/* A soft-cap: absent -> def, null -> 0 (none), else a number >= 0. */
static int hf_cfg_cap(const cJSON *cfg, const char *key, double def, float *out, kvi_error *err)
{
    const cJSON *v = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, key) : NULL;
    double d = 0.0;
    int rc = cJSON_IsNull(v) ? 0 : hf_cfg_num(cfg, key, false, def, true, &d, err);
    if (rc == 0) *out = (float)d;
    return rc;
}

/* A string field equal to one of want[] (NULL-terminated), or absent. */
static int hf_cfg_enum(const cJSON *cfg, const char *key, const char *const *want, kvi_error *err)
{
    const cJSON *v = hf_item(cfg, key);
    if (!v) return 0;
    for (int i = 0; want[i]; i++)
        if (cJSON_IsString(v) && strcmp(v->valuestring, want[i]) == 0) return 0;
    return err_set(err, KVI_E_UNSUPPORTED, "hf: config.json: %s %s%.48s%s is not supported (%s)", key,
                   cJSON_IsString(v) ? "'" : "", cJSON_IsString(v) ? v->valuestring : "(not a string)",
                   cJSON_IsString(v) ? "'" : "", want[0]);
}

/* n floats of a JSON array into a buffer owned by the model. */
static int hf_cfg_floats(struct kvi_model *m, const cJSON *arr, const char *key, int n, const float **out,
                         kvi_error *err)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
        return err_set(err, KVI_E_FORMAT, "hf: config.json: %s must be an array of %d numbers", key, n);
    float *f = model_own(m, malloc((size_t)n * sizeof *f));
    if (!f) return err_set(err, KVI_E_NOMEM, "hf: out of memory");
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0.0) ||
            v->valuedouble > 1e30)
            return err_set(err, KVI_E_FORMAT, "hf: config.json: %s[%d] is not a number > 0", key, i);
        f[i++] = (float)v->valuedouble;
    }
    *out = f;
    return 0;
}

/* Llama 3's frequency divisors (as the converter computes rope_freqs). */
static int hf_llama3(struct kvi_model *m, const cJSON *rs, model_rope *r, kvi_error *err)
{
    double factor, lo_f, hi_f, old;
    int rc;
    if ((rc = hf_cfg_num(rs, "factor", false, 8.0, false, &factor, err)) ||
        (rc = hf_cfg_num(rs, "low_freq_factor", false, 1.0, false, &lo_f, err)) ||
        (rc = hf_cfg_num(rs, "high_freq_factor", false, 4.0, false, &hi_f, err)) ||
        (rc = hf_cfg_num(rs, "original_max_position_embeddings", false, 8192.0, false, &old, err)))
        return rc;
    if (!(hi_f > lo_f))
        return err_set(err, KVI_E_FORMAT,
                       "hf: config.json: rope_scaling high_freq_factor <= low_freq_factor");
    const int half = m->n_rot / 2;
    float *f = model_own(m, malloc((size_t)half * sizeof *f));
    if (!f) return err_set(err, KVI_E_NOMEM, "hf: out of memory");
    const double lo_wave = old / lo_f, hi_wave = old / hi_f;
    for (int i = 0; i < half; i++) {
        const float freq = 1.0f / powf(r->theta, (float)(2 * i) / (float)m->n_rot);
        const double wave = 2 * M_PI / freq;
        if (wave < hi_wave) {
            f[i] = 1.0f;
        } else if (wave > lo_wave) {
            f[i] = (float)factor;
        } else {
            const double s = (old / wave - lo_f) / (hi_f - lo_f);
            f[i] = (float)(1.0 / ((1 - s) / factor + s));
        }
    }
    m->rope_freqs = f;
    r->factors = f;
    return 0;
}

/* LongRoPE (Phi-3.5, Phi-4-mini): both factor sets; which one is used is decided
 * per engine context (model_rope_for_ctx). The attention factor is the config's,
 * else sqrt(1 + ln(s) / ln(orig)), s = max_position_embeddings / orig (as the
 * converter writes rope.scaling.attn_factor). */
static int hf_longrope(struct kvi_model *m, const cJSON *cfg, const cJSON *rs, model_rope *r, kvi_error *err)
{
    int rc, orig;
    const cJSON *src = hf_item(rs, "original_max_position_embeddings") ? rs : cfg;
    if ((rc = hf_cfg_int(src, "original_max_position_embeddings", true, 0, 1, MODEL_MAX_CTX, &orig, err)) ||
        (rc = hf_cfg_floats(m, hf_item(rs, "long_factor"), "rope_scaling.long_factor", m->n_rot / 2,
                            &m->rope_long, err)) ||
        (rc = hf_cfg_floats(m, hf_item(rs, "short_factor"), "rope_scaling.short_factor", m->n_rot / 2,
                            &m->rope_short, err)))
        return rc;
    m->rope_orig_ctx = orig;
    double scale = (double)m->n_ctx_train / orig, attn;
    if ((rc = hf_cfg_num(rs, "factor", false, scale, false, &scale, err))) return rc;
    const double def = scale > 1.0 && orig > 1 ? sqrt(1.0 + log(scale) / log((double)orig)) : 1.0;
    if ((rc = hf_cfg_num(rs, "attention_factor", false, def, false, &attn, err))) return rc;
    r->mscale = (float)attn;
    return 0;
}

/* One RoPE object (rope_scaling, rope_parameters or one of its per-layer-type
 * parts) into r: its base when it names one, and its scaling. */
static int hf_rope_one(struct kvi_model *m, const cJSON *cfg, const cJSON *rs, model_rope *r, bool global,
                       kvi_error *err)
{
    static const char *const known[] = { "rope_type",
                                         "type",
                                         "factor",
                                         "rope_theta",
                                         "partial_rotary_factor",
                                         "original_max_position_embeddings",
                                         "low_freq_factor",
                                         "high_freq_factor",
                                         "beta_fast",
                                         "beta_slow",
                                         "long_factor",
                                         "short_factor",
                                         "attention_factor",
                                         NULL };
    if (!cJSON_IsObject(rs))
        return err_set(err, KVI_E_FORMAT, "hf: config.json: rope_scaling is not an object");
    const cJSON *it;
    cJSON_ArrayForEach(it, rs)
    {
        int k = 0;
        while (known[k] && strcmp(known[k], it->string) != 0) k++;
        if (!known[k] && !cJSON_IsNull(it))
            return err_set(err, KVI_E_UNSUPPORTED,
                           "hf: config.json: rope_scaling key '%.48s' is not supported", it->string);
    }
    int rc;
    if (hf_item(rs, "rope_theta") && (rc = hf_cfg_float(rs, "rope_theta", true, 0, &r->theta, err)))
        return rc;
    const cJSON *t = hf_item(rs, "rope_type");
    if (!t) t = hf_item(rs, "type");
    if (t && !cJSON_IsString(t))
        return err_set(err, KVI_E_FORMAT, "hf: config.json: rope_scaling type is not a string");
    const char *type = t ? t->valuestring : "default";
    if (strcmp(type, "default") == 0) return 0;
    if (!global)
        return err_set(err, KVI_E_UNSUPPORTED, "hf: config.json: rope type '%.32s' on sliding layers", type);
    double factor, bf, bs;
    if (strcmp(type, "linear") == 0) {
        if ((rc = hf_cfg_num(rs, "factor", true, 0, false, &factor, err))) return rc;
        r->freq_scale = (float)(1.0 / factor);
        return 0;
    }
    if (strcmp(type, "llama3") == 0) return hf_llama3(m, rs, r, err);
    if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) {
        if (strcmp(m->arch, "phi3") != 0)
            return err_set(err, KVI_E_UNSUPPORTED,
                           "hf: config.json: rope type '%s' is supported for phi3 only", type);
        return hf_longrope(m, cfg, rs, r, err);
    }
    if (strcmp(type, "yarn") != 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "hf: config.json: rope type '%.32s' is not supported (linear, llama3, yarn, longrope)",
                       type);
    if (hf_item(rs, "attention_factor"))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "hf: config.json: rope_scaling.attention_factor is not supported");
    const cJSON *src = hf_item(rs, "original_max_position_embeddings") ? rs : cfg;
    if ((rc = hf_cfg_num(rs, "factor", true, 0, false, &factor, err)) ||
        (rc = hf_cfg_num(rs, "beta_fast", false, 32.0, false, &bf, err)) ||
        (rc = hf_cfg_num(rs, "beta_slow", false, 1.0, false, &bs, err)) ||
        (rc = hf_cfg_int(src, "original_max_position_embeddings", false, m->n_ctx_train, 1, MODEL_MAX_CTX,
                         &m->rope_orig_ctx, err)))
        return rc;
    model_rope_yarn(r, m->n_rot, m->rope_orig_ctx, factor, bf, bs, 1.0);
    return 0;
}

/* rope_parameters (transformers 5) or rope_scaling into rope[0] (and Gemma 3's
 * local set rope[1]: rope_local_base_freq, no scaling). */
static int hf_rope(struct kvi_model *m, const cJSON *cfg, bool gemma3, kvi_error *err)
{
    const cJSON *rs = hf_item(cfg, "rope_parameters");
    if (rs && hf_item(cfg, "rope_scaling"))
        return err_set(err, KVI_E_FORMAT, "hf: config.json: both rope_parameters and rope_scaling");
    if (!rs) rs = hf_item(cfg, "rope_scaling");
    const cJSON *global = rs, *local = NULL;
    if (rs && (cJSON_GetObjectItemCaseSensitive(rs, "full_attention") ||
               cJSON_GetObjectItemCaseSensitive(rs, "sliding_attention"))) {
        if (!gemma3)
            return err_set(err, KVI_E_UNSUPPORTED,
                           "hf: config.json: RoPE parameters per layer type are supported for Gemma 3 only");
        global = hf_item(rs, "full_attention");
        local = hf_item(rs, "sliding_attention");
    }
    int rc;
    if (gemma3) {
        m->n_rope_sets = 2;
        m->rope[1] = (model_rope){ .theta = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f };
        if ((rc = hf_cfg_float(cfg, "rope_local_base_freq", false, 10000.0, &m->rope[1].theta, err)) ||
            (local && (rc = hf_rope_one(m, cfg, local, &m->rope[1], false, err))))
            return rc;
    }
    if (global && (rc = hf_rope_one(m, cfg, global, &m->rope[0], true, err))) return rc;
    m->rope_theta = m->rope[0].theta;
    return 0;
}

/* Sliding-window layers: layer_types ("sliding_attention" / "full_attention")
 * when given, else gemma2's even layers, gemma3's sliding_window_pattern P (layer
 * l local unless (l + 1) % P == 0). Other architectures: refused when a layer
 * would slide (as llama.cpp, llama/Mistral and phi3's sliding_window is ignored). */
static int hf_windows(struct kvi_model *m, const cJSON *cfg, bool gemma2, bool gemma3, kvi_error *err)
{
    const cJSON *types = hf_item(cfg, "layer_types");
    if (types && (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != m->n_layers))
        return err_set(err, KVI_E_FORMAT, "hf: config.json: layer_types must list %d layers", m->n_layers);
    const cJSON *use = hf_item(cfg, "use_sliding_window");
    if (use && cJSON_IsTrue(use))
        return err_set(err, KVI_E_UNSUPPORTED, "hf: config.json: use_sliding_window true is not supported");
    int w = 0, period = gemma2 ? 2 : 6, rc;
    if ((gemma2 || gemma3) &&
        ((rc = hf_cfg_int(cfg, "sliding_window", false, 4096, 1, MODEL_MAX_CTX, &w, err)) ||
         (rc = hf_cfg_int(cfg, "sliding_window_pattern", false, period, 1, MODEL_MAX_LAYERS, &period, err))))
        return rc;
    for (int l = 0; l < m->n_layers; l++) {
        bool local = (gemma2 || gemma3) && (l + 1) % period != 0;
        if (types) {
            const cJSON *t = cJSON_GetArrayItem(types, l);
            const bool s = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
            if (!s && !(cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0))
                return err_set(err, KVI_E_UNSUPPORTED, "hf: config.json: layer_types[%d] is not supported",
                               l);
            local = s;
        }
        if (local && !(gemma2 || gemma3))
            return err_set(err, KVI_E_UNSUPPORTED,
                           "hf: config.json: sliding_attention layers are not supported for %s", m->arch);
        m->layers[l].window = local ? w : 0;
        m->layers[l].rope_set = local && gemma3 ? 1 : 0;
    }
    return 0;
}

/* Gemma 2 / 3: GeGLU, embedding x sqrt(dim), KQ scale 1/sqrt(query_pre_attn_scalar),
 * the soft-caps (gemma2: 50 and 30 when absent; null: none). */
static int hf_gemma(struct kvi_model *m, const cJSON *cfg, bool gemma3, kvi_error *err)
{
    static const char *const acts[] = { "gelu_pytorch_tanh", NULL };
    double q;
    int rc;
    if ((rc = hf_cfg_enum(cfg, "hidden_activation", acts, err)) ||
        (!hf_item(cfg, "hidden_activation") && (rc = hf_cfg_enum(cfg, "hidden_act", acts, err))) ||
        (rc = hf_cfg_num(cfg, "query_pre_attn_scalar", false, 256.0, false, &q, err)) ||
        (rc = hf_cfg_cap(cfg, "final_logit_softcapping", gemma3 ? 0.0 : 30.0, &m->final_softcap, err)) ||
        (rc = hf_cfg_cap(cfg, "attn_logit_softcapping", gemma3 ? 0.0 : 50.0, &m->attn_softcap, err)))
        return rc;
    if (gemma3 && m->attn_softcap != 0.0f)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "hf: config.json: attn_logit_softcapping is not supported for gemma3");
    m->act = MODEL_ACT_GELU_TANH;
    m->emb_scale = sqrtf((float)m->dim);
    m->kq_scale = (float)(1.0 / sqrt(q));
    return 0;
}

/* Granite's four multipliers (transformers' defaults 1). */
static int hf_granite(struct kvi_model *m, const cJSON *cfg, kvi_error *err)
{
    int rc;
    if ((rc = hf_cfg_float(cfg, "embedding_multiplier", false, 1.0, &m->emb_scale, err)) ||
        (rc = hf_cfg_float(cfg, "residual_multiplier", false, 1.0, &m->residual_scale, err)) ||
        (rc = hf_cfg_float(cfg, "attention_multiplier", false, 1.0, &m->kq_scale, err)) ||
        (rc = hf_cfg_float(cfg, "logits_scaling", false, 1.0, &m->logit_scale, err)))
        return rc;
    return 0;
}

/* The architecture: the first known architectures[] entry. */
static int hf_find_arch(struct kvi_model *m, const cJSON *root, hf_cfg *c, kvi_error *err)
{
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (!cJSON_IsArray(archs) || cJSON_GetArraySize(archs) < 1)
        return err_set(err, KVI_E_FORMAT, "hf: config.json: missing architectures");
    const cJSON *a;
    const char *first = NULL;
    cJSON_ArrayForEach(a, archs)
    {
        if (!cJSON_IsString(a)) continue;
        if (!first) first = a->valuestring;
        for (size_t i = 0; !c->ha && i < sizeof hf_archs / sizeof hf_archs[0]; i++)
            if (strcmp(a->valuestring, hf_archs[i].hf) == 0) c->ha = &hf_archs[i];
    }
    if (!c->ha) {
        char list[512];
        size_t n = 0;
        for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0] && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", hf_archs[i].hf);
        return err_set(err, KVI_E_UNSUPPORTED, "hf: architecture '%.64s' is not supported (%s)",
                       first ? first : "?", list);
    }
    c->a = model_arch_find(c->ha->arch);
    if (!c->a) return err_set(err, KVI_E_UNSUPPORTED, "hf: architecture %s is not built in", c->ha->arch);
    snprintf(m->arch, sizeof m->arch, "%s", c->ha->arch);
    return 0;
}

/* Keys that change the computation in ways kvinfer does not run. */
static int hf_refuse_keys(const cJSON *cfg, kvi_error *err)
{
    static const char *const keys[] = { "quantization_config", "num_experts", "num_local_experts", NULL };
    for (int i = 0; keys[i]; i++) {
        const cJSON *v = hf_item(cfg, keys[i]);
        if (v && !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return err_set(err, KVI_E_UNSUPPORTED, "hf: config.json: %s is not supported", keys[i]);
    }
    return 0;
}

/* Widths, heads, vocabulary, context, epsilon, base and partial rotary. */
static int hf_widths(struct kvi_model *m, const cJSON *cfg, bool gemma3, kvi_error *err)
{
    /* Gemma 3's text config leaves out what its class defaults */
    int rc;
    if ((rc = hf_cfg_int(cfg, "hidden_size", true, 0, 1, MODEL_MAX_DIM, &m->dim, err)) ||
        (rc = hf_cfg_int(cfg, "intermediate_size", true, 0, 1, MODEL_MAX_FFN, &m->ffn_dim, err)) ||
        (rc = hf_cfg_int(cfg, "num_hidden_layers", true, 0, 1, MODEL_MAX_LAYERS, &m->n_layers, err)) ||
        (rc = hf_cfg_int(cfg, "num_attention_heads", !gemma3, 8, 1, MODEL_MAX_HEADS, &m->n_heads, err)) ||
        (rc = hf_cfg_int(cfg, "num_key_value_heads", false, gemma3 ? 4 : m->n_heads, 1, MODEL_MAX_HEADS,
                         &m->n_kv_heads, err)) ||
        (rc = hf_cfg_int(cfg, "vocab_size", !gemma3, 262208, 1, MODEL_MAX_VOCAB, &m->n_vocab, err)) ||
        (rc = hf_cfg_int(cfg, "max_position_embeddings", false, gemma3 ? 131072 : 2048, 1, MODEL_MAX_CTX,
                         &m->n_ctx_train, err)) ||
        (rc = hf_cfg_float(cfg, "rms_norm_eps", !gemma3, 1e-6, &m->rms_eps, err)) ||
        (rc = hf_cfg_float(cfg, "rope_theta", false, gemma3 ? 1e6 : 10000.0, &m->rope_theta, err)))
        return rc;
    if (!hf_item(cfg, "head_dim") && !gemma3 && m->dim % m->n_heads != 0)
        return err_set(err, KVI_E_FORMAT,
                       "hf: config.json: hidden_size %d is not a multiple of num_attention_heads %d", m->dim,
                       m->n_heads);
    if ((rc = hf_cfg_int(cfg, "head_dim", false, gemma3 ? 256 : m->dim / m->n_heads, 1, MODEL_MAX_HEAD_DIM,
                         &m->head_dim, err)))
        return rc;
    /* partial rotary (Phi-4-mini): top level or inside rope_parameters */
    const cJSON *rp = hf_item(cfg, "rope_parameters");
    double prf = 1.0;
    if ((rc = hf_cfg_num(hf_item(rp, "partial_rotary_factor") ? rp : cfg, "partial_rotary_factor", false, 1.0,
                         false, &prf, err)))
        return rc;
    if (prf > 1.0) return err_set(err, KVI_E_FORMAT, "hf: config.json: partial_rotary_factor %g > 1", prf);
    if (prf != 1.0 && strcmp(m->arch, "phi3") != 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "hf: config.json: partial_rotary_factor is supported for phi3 only");
    m->n_rot = (int)(m->head_dim * prf);
    return 0;
}

/* Reads architecture and hyper-parameters from config.json into m (layers
 * allocated: their windows and RoPE sets are hyper-parameters too). */
static int hf_parse_config(struct kvi_model *m, const cJSON *root, hf_cfg *c, kvi_error *err)
{
    int rc;
    if ((rc = hf_find_arch(m, root, c, err))) return rc;
    const cJSON *cfg = root;
    if (c->ha->flags & HF_TEXT_CONFIG) {
        cfg = hf_item(root, "text_config");
        if (!cJSON_IsObject(cfg))
            return err_set(err, KVI_E_FORMAT, "hf: config.json: %s without a text_config object", c->ha->hf);
    }
    const bool gemma2 = strcmp(m->arch, "gemma2") == 0, gemma3 = strcmp(m->arch, "gemma3") == 0;
    static const char *const silu[] = { "silu", NULL };
    if ((rc = hf_refuse_keys(cfg, err)) ||
        (!(gemma2 || gemma3) && (rc = hf_cfg_enum(cfg, "hidden_act", silu, err))) ||
        (rc = hf_widths(m, cfg, gemma3, err)))
        return rc;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
    if (!tie && cfg != root) tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie) && !cJSON_IsNull(tie))
        return err_set(err, KVI_E_FORMAT, "hf: config.json: tie_word_embeddings is not a boolean");
    c->tied = tie && cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : (c->ha->flags & HF_TIED) != 0;
    model_block_defaults(m);
    if ((rc = model_check_hparams(m, err))) return rc; /* widths sane before anything is sized by them */

    m->layers = model_own(m, calloc((size_t)m->n_layers, sizeof *m->layers));
    if (!m->layers) return err_set(err, KVI_E_NOMEM, "hf: out of memory for %d layers", m->n_layers);
    m->qk_norm = c->a->qk_norm;
    m->rope_neox = c->a->rope_neox;
    if ((rc = hf_rope(m, cfg, gemma3, err)) || (rc = hf_windows(m, cfg, gemma2, gemma3, err))) return rc;
    if ((gemma2 || gemma3) && (rc = hf_gemma(m, cfg, gemma3, err))) return rc;
    if (strcmp(m->arch, "granite") == 0 && (rc = hf_granite(m, cfg, err))) return rc;
    return model_check_hparams(m, err);
}

/* ---- tensors of all shards ------------------------------------------------ */

typedef struct hf_ent {
    char *name; /* without a multimodal "language_model." part; owned */
    const st_tensor *t;
    int shard;
    bool used;
} hf_ent;

typedef struct hf_src {
    st_index **ix; /* [n_ix] */
    size_t n_ix;
    hf_ent *ent; /* [n_ent], sorted by name, names unique */
    size_t n_ent;
} hf_src;

static void hf_src_free(hf_src *s)
{
    for (size_t i = 0; i < s->n_ix; i++) st_free(s->ix[i]);
    free(s->ix);
    for (size_t i = 0; i < s->n_ent; i++) free(s->ent[i].name);
    free(s->ent);
    memset(s, 0, sizeof *s);
}

static int hf_ent_cmp(const void *a, const void *b)
{
    return strcmp(((const hf_ent *)a)->name, ((const hf_ent *)b)->name);
}

/* name without "language_model." (leading, or right after a leading "model."), malloc'd */
static char *hf_canon(const char *name)
{
    const char *lm = "language_model.";
    size_t n = strlen(name), k = strlen(lm), at = n;
    if (strncmp(name, lm, k) == 0)
        at = 0;
    else if (strncmp(name, "model.", 6) == 0 && strncmp(name + 6, lm, k) == 0)
        at = 6;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (at == n) {
        memcpy(s, name, n + 1);
    } else {
        memcpy(s, name, at);
        memcpy(s + at, name + at + k, n - at - k + 1);
    }
    return s;
}

/* The entries of every parsed shard, sorted; duplicates refused. */
static int hf_src_index(hf_src *s, kvi_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_ix; i++) n += s->ix[i]->n_tensors;
    s->ent = calloc(n ? n : 1, sizeof *s->ent);
    if (!s->ent) return err_set(err, KVI_E_NOMEM, "hf: out of memory");
    for (size_t i = 0; i < s->n_ix; i++)
        for (size_t j = 0; j < s->ix[i]->n_tensors; j++) {
            hf_ent *e = &s->ent[s->n_ent];
            e->t = &s->ix[i]->tensors[j];
            e->shard = (int)i;
            if (!(e->name = hf_canon(e->t->name))) return err_set(err, KVI_E_NOMEM, "hf: out of memory");
            s->n_ent++;
        }
    qsort(s->ent, s->n_ent, sizeof *s->ent, hf_ent_cmp);
    for (size_t i = 1; i < s->n_ent; i++)
        if (strcmp(s->ent[i - 1].name, s->ent[i].name) == 0)
            return err_set(err, KVI_E_FORMAT, "hf: tensor %.96s is stored twice", s->ent[i].t->name);
    return 0;
}

static hf_ent *hf_lookup(const hf_src *s, const char *name)
{
    const hf_ent key = { .name = (char *)name };
    return bsearch(&key, s->ent, s->n_ent, sizeof *s->ent, hf_ent_cmp);
}

/* The tensor named name, marked used; NULL when absent. */
static const st_tensor *hf_take(hf_src *s, const char *name)
{
    hf_ent *e = hf_lookup(s, name);
    if (!e) return NULL;
    e->used = true;
    return e->t;
}

/* ---- binding ------------------------------------------------------------- */

typedef struct hf_bind {
    struct kvi_model *m;
    hf_src *src;
    bool shift; /* norms + 1 */
} hf_bind;

/* Binds a [n_out][n_in] matrix. perm_hd > 0: an owned copy with each head's rows
 * interleaved (rope_interleave_rows); a misaligned one is copied too. */
static int hf_matrix(hf_bind *b, const char *name, int64_t n_in, int64_t n_out, bool required, int perm_hd,
                     kern_tensor *out, kvi_error *err)
{
    struct kvi_model *m = b->m;
    const st_tensor *t = hf_take(b->src, name);
    if (!t) return required ? err_set(err, KVI_E_FORMAT, "hf: missing tensor %s", name) : 0;
    if (!t->is_float)
        return err_set(err, KVI_E_UNSUPPORTED, "hf: tensor %s has dtype %s (need F32, F16 or BF16)", name,
                       t->dtype);
    if (t->n_dims != 2 || t->shape[0] != n_out || t->shape[1] != n_in)
        return err_set(
            err, KVI_E_FORMAT, "hf: tensor %s has shape [%lld, %lld] (%u dims), expected [%lld, %lld]", name,
            (long long)t->shape[0], (long long)t->shape[1], t->n_dims, (long long)n_out, (long long)n_in);
    const uint8_t *src = t->data;
    const bool misaligned = ((uintptr_t)src % (uintptr_t)t->elem_size) != 0;
    if (perm_hd > 0 && (n_out % perm_hd != 0 || perm_hd % 2 != 0))
        return err_set(err, KVI_E_FORMAT, "hf: tensor %s: %lld rows are not whole heads of %d", name,
                       (long long)n_out, perm_hd);
    if (perm_hd > 0 || misaligned) {
        size_t cap = (t->nbytes + 63) & ~(size_t)63;
        uint8_t *dst = model_own(m, aligned_alloc(64, cap ? cap : 64));
        if (!dst) return err_set(err, KVI_E_NOMEM, "hf: out of memory copying %s", name);
        if (perm_hd > 0)
            rope_interleave_rows(dst, src, n_out, perm_hd, (size_t)n_in * (size_t)t->elem_size);
        else
            memcpy(dst, src, t->nbytes);
        src = dst;
    }
    out->data = src;
    out->type = t->type;
    out->n_in = n_in;
    out->n_out = n_out;
    m->weight_bytes += t->nbytes;
    return 0;
}

/* Binds a vector of n as f32; shift: 1 + w (Gemma's norms); perm_hd > 0: heads
 * interleaved as q/k rows are. */
static int hf_vector(hf_bind *b, const char *name, int64_t n, bool required, bool shift, int perm_hd,
                     const float **out, kvi_error *err)
{
    struct kvi_model *m = b->m;
    const st_tensor *t = hf_take(b->src, name);
    *out = NULL;
    if (!t) return required ? err_set(err, KVI_E_FORMAT, "hf: missing tensor %s", name) : 0;
    if (!t->is_float)
        return err_set(err, KVI_E_UNSUPPORTED, "hf: tensor %s has dtype %s (need F32, F16 or BF16)", name,
                       t->dtype);
    if (t->n_dims != 1 || t->shape[0] != n)
        return err_set(err, KVI_E_FORMAT, "hf: tensor %s has %u dims [%lld, ...], expected [%lld]", name,
                       t->n_dims, (long long)t->shape[0], (long long)n);
    if (perm_hd > 0 && (n % perm_hd != 0 || perm_hd % 2 != 0))
        return err_set(err, KVI_E_FORMAT, "hf: tensor %s: %lld values are not whole heads of %d", name,
                       (long long)n, perm_hd);
    m->weight_bytes += t->nbytes;
    const float *v;
    int rc = model_vec_f32(m, name, t->data, t->type, n, &v, err);
    if (rc || (!shift && perm_hd <= 0)) {
        *out = v;
        return rc;
    }
    float *c = model_own(m, malloc((size_t)n * sizeof *c));
    if (!c) return err_set(err, KVI_E_NOMEM, "hf: out of memory copying %s", name);
    if (perm_hd > 0)
        rope_interleave_rows((uint8_t *)c, (const uint8_t *)v, n, perm_hd, sizeof *c);
    else
        memcpy(c, v, (size_t)n * sizeof *c);
    for (int64_t i = 0; shift && i < n; i++) c[i] += 1.0f;
    *out = c;
    return 0;
}

/* rows [r0, r0 + n) of the bound matrix `whole` as a matrix of its own */
static kern_tensor hf_rows(const kern_tensor *whole, int64_t r0, int64_t n)
{
    kern_tensor v = *whole;
    v.data = (const uint8_t *)whole->data + (size_t)r0 * quant_row_bytes(whole->type, whole->n_in);
    v.n_out = n;
    return v;
}

static int hf_bind_attn(hf_bind *b, const model_arch *a, int l, int perm, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, qd = (int64_t)m->n_heads * m->head_dim,
                  kvd = (int64_t)m->n_kv_heads * m->head_dim;
    char n[128];
#define NM(part) (snprintf(n, sizeof n, "model.layers.%d.self_attn.%s", l, part), n)
    int rc;
    if (a->flags & ARCH_FUSED_QKV) {
        if (perm) return err_set(err, KVI_E_UNSUPPORTED, "hf: fused qkv_proj with interleaved RoPE");
        kern_tensor qkv = { 0 };
        if ((rc = hf_matrix(b, NM("qkv_proj.weight"), dim, qd + 2 * kvd, true, 0, &qkv, err))) return rc;
        L->wq = hf_rows(&qkv, 0, qd);
        L->wk = hf_rows(&qkv, qd, kvd);
        L->wv = hf_rows(&qkv, qd + kvd, kvd);
    } else if ((rc = hf_matrix(b, NM("q_proj.weight"), dim, qd, true, perm, &L->wq, err)) ||
               (rc = hf_matrix(b, NM("k_proj.weight"), dim, kvd, true, perm, &L->wk, err)) ||
               (rc = hf_matrix(b, NM("v_proj.weight"), dim, kvd, true, 0, &L->wv, err)) ||
               (rc = hf_vector(b, NM("q_proj.bias"), qd, false, false, perm, &L->bq, err)) ||
               (rc = hf_vector(b, NM("k_proj.bias"), kvd, false, false, perm, &L->bk, err)) ||
               (rc = hf_vector(b, NM("v_proj.bias"), kvd, false, false, 0, &L->bv, err))) {
        return rc;
    }
    if (a->qk_norm != MODEL_QK_NONE) {
        const bool head = a->qk_norm == MODEL_QK_HEAD;
        if ((rc = hf_vector(b, NM("q_norm.weight"), head ? m->head_dim : qd, true, b->shift, perm, &L->q_norm,
                            err)) ||
            (rc = hf_vector(b, NM("k_norm.weight"), head ? m->head_dim : kvd, true, b->shift, perm,
                            &L->k_norm, err)))
            return rc;
    }
    if ((rc = hf_matrix(b, NM("o_proj.weight"), qd, dim, true, 0, &L->wo, err)) ||
        (rc = hf_vector(b, NM("o_proj.bias"), dim, false, false, 0, &L->bo, err)))
        return rc;
#undef NM
    return 0;
}

static int hf_bind_ffn(hf_bind *b, const model_arch *a, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, ffn = m->ffn_dim;
    char n[128];
#define NM(part) (snprintf(n, sizeof n, "model.layers.%d.mlp.%s", l, part), n)
    int rc;
    if (a->flags & ARCH_FUSED_GATE_UP) {
        kern_tensor gu = { 0 };
        if ((rc = hf_matrix(b, NM("gate_up_proj.weight"), dim, 2 * ffn, true, 0, &gu, err))) return rc;
        L->w_gate = hf_rows(&gu, 0, ffn);
        L->w_up = hf_rows(&gu, ffn, ffn);
    } else if ((rc = hf_matrix(b, NM("gate_proj.weight"), dim, ffn, true, 0, &L->w_gate, err)) ||
               (rc = hf_matrix(b, NM("up_proj.weight"), dim, ffn, true, 0, &L->w_up, err)) ||
               (rc = hf_vector(b, NM("gate_proj.bias"), ffn, false, false, 0, &L->b_gate, err)) ||
               (rc = hf_vector(b, NM("up_proj.bias"), ffn, false, false, 0, &L->b_up, err))) {
        return rc;
    }
    if ((rc = hf_matrix(b, NM("down_proj.weight"), ffn, dim, true, 0, &L->w_down, err)) ||
        (rc = hf_vector(b, NM("down_proj.bias"), dim, false, false, 0, &L->b_down, err)))
        return rc;
#undef NM
    return 0;
}

/* Layer l: the norms by the block's flags (see the file comment for which HF
 * norm is which), attention, FFN. */
static int hf_bind_layer(hf_bind *b, const model_arch *a, int l, kvi_error *err)
{
    struct kvi_model *m = b->m;
    model_layer *L = &m->layers[l];
    const bool pre = !(a->flags & ARCH_NO_PRE_NORM), post = (a->flags & ARCH_POST_NORMS) != 0;
    const int perm = m->rope_neox ? 0 : m->head_dim;
    char n[128];
#define NM(part) (snprintf(n, sizeof n, "model.layers.%d.%s", l, part), n)
    int rc;
    if ((rc = hf_vector(b, NM("input_layernorm.weight"), m->dim, pre, b->shift, 0, &L->attn_norm, err)) ||
        (rc = hf_bind_attn(b, a, l, perm, err)))
        return rc;
    if (post) {
        if ((rc = hf_vector(b, NM("post_attention_layernorm.weight"), m->dim, true, b->shift, 0,
                            &L->post_attn_norm, err)) ||
            (rc = hf_vector(b, NM("pre_feedforward_layernorm.weight"), m->dim, pre, b->shift, 0, &L->ffn_norm,
                            err)) ||
            (rc = hf_vector(b, NM("post_feedforward_layernorm.weight"), m->dim, true, b->shift, 0,
                            &L->post_ffn_norm, err)))
            return rc;
    } else if ((rc = hf_vector(b, NM("post_attention_layernorm.weight"), m->dim, pre, b->shift, 0,
                               &L->ffn_norm, err))) {
        return rc;
    }
#undef NM
    return hf_bind_ffn(b, a, l, err);
}

static bool hf_is_vision(const char *name)
{
    static const char *const pre[] = { "vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                       "model.multi_modal_projector.", NULL };
    for (int i = 0; pre[i]; i++)
        if (strncmp(name, pre[i], strlen(pre[i])) == 0) return true;
    return false;
}

/* Every tensor bound, or one the file comment lists as left unread. */
static int hf_check_all_used(struct kvi_model *m, const hf_src *s, const hf_cfg *c, kvi_error *err)
{
    static const char inv[] = ".rotary_emb.inv_freq";
    for (size_t i = 0; i < s->n_ent; i++) {
        const hf_ent *e = &s->ent[i];
        const size_t n = strlen(e->name);
        if (e->used || (n >= sizeof inv - 1 && strcmp(e->name + n - (sizeof inv - 1), inv) == 0) ||
            (c->tied && strcmp(e->name, "lm_head.weight") == 0))
            continue;
        if ((c->ha->flags & HF_TEXT_CONFIG) && hf_is_vision(e->t->name)) {
            m->n_unread_tensors++;
            continue;
        }
        return err_set(err, KVI_E_UNSUPPORTED, "hf: tensor %.96s is not used by %s", e->t->name, c->ha->hf);
    }
    return 0;
}

static int hf_bind_tensors(struct kvi_model *m, hf_src *src, const hf_cfg *c, kvi_error *err)
{
    hf_bind b = { .m = m, .src = src, .shift = (c->ha->flags & HF_NORM_SHIFT) != 0 };
    const char *embd = "model.embed_tokens.weight";
    if (c->tied && !hf_lookup(src, embd)) embd = "lm_head.weight";
    int rc;
    if ((rc = hf_matrix(&b, embd, m->dim, m->n_vocab, true, 0, &m->tok_embd, err)) ||
        (rc = hf_vector(&b, "model.norm.weight", m->dim, true, b.shift, 0, &m->output_norm, err)))
        return rc;
    if (c->tied)
        m->output = m->tok_embd;
    else if ((rc = hf_matrix(&b, "lm_head.weight", m->dim, m->n_vocab, true, 0, &m->output, err)))
        return rc;
    for (int l = 0; l < m->n_layers; l++)
        if ((rc = hf_bind_layer(&b, c->a, l, err))) return rc;
    return hf_check_all_used(m, src, c, err);
}

/* ---- files --------------------------------------------------------------- */

/* The shards at paths[0..n) mapped read-only into one reserved range (so the
 * model's single map_addr / map_len releases them all). */
static int hf_map_files(struct kvi_model *m, char **paths, size_t n, const uint8_t **data, size_t *sizes,
                        kvi_error *err)
{
    if (m->map_addr) return err_set(err, KVI_E_INVALID, "model: a file is already mapped");
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int *fds = malloc(n * sizeof *fds);
    if (!fds) return err_set(err, KVI_E_NOMEM, "hf: out of memory");
    size_t total = 0, opened = 0;
    int rc = 0;
    for (; opened < n && rc == 0; opened++) {
        fds[opened] = open(paths[opened], O_RDONLY | O_NONBLOCK);
        struct stat st;
        if (fds[opened] < 0) {
            rc = err_set(err, KVI_E_IO, "cannot open %s: %s", paths[opened], strerror(errno));
            break;
        }
        if (fstat(fds[opened], &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
            (uint64_t)st.st_size > (uint64_t)(SIZE_MAX / 4)) {
            rc = err_set(err, KVI_E_IO, "%s is not a readable non-empty regular file", paths[opened]);
            opened++;
            break;
        }
        sizes[opened] = (size_t)st.st_size;
        const size_t span = (sizes[opened] + page - 1) / page * page;
        if (total > SIZE_MAX / 4 - span) {
            rc = err_set(err, KVI_E_NOMEM, "hf: the shards are too large for this machine");
            opened++;
            break;
        }
        total += span;
    }
    uint8_t *base = NULL;
    if (rc == 0) {
        void *p = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            rc = err_set(err, KVI_E_NOMEM, "hf: cannot reserve %zu bytes: %s", total, strerror(errno));
        else
            base = p;
    }
    for (size_t i = 0, off = 0; rc == 0 && i < n; i++) {
        void *p = mmap(base + off, sizes[i], PROT_READ, MAP_PRIVATE | MAP_FIXED, fds[i], 0);
        if (p == MAP_FAILED) {
            rc = err_set(err, KVI_E_IO, "cannot map %s: %s", paths[i], strerror(errno));
            munmap(base, total);
            break;
        }
        data[i] = p;
        off += (sizes[i] + page - 1) / page * page;
    }
    for (size_t i = 0; i < opened; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    if (rc) return rc;
    m->map_addr = base;
    m->map_len = total;
    for (size_t i = 0; i < n; i++) m->file_bytes += sizes[i];
    return 0;
}

/* A shard's file name from the index: a plain name in the folder. */
static bool hf_shard_name_ok(const char *s)
{
    return s[0] && strlen(s) < 256 && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* The shards model.safetensors.index.json lists (weight_map: tensor -> file),
 * read or mapped and parsed; each tensor must be where the index says, and each
 * stored tensor listed. */
static int hf_load_sharded(struct kvi_model *m, const char *dir, const char *idx_path, bool use_mmap,
                           hf_src *src, kvi_error *err)
{
    cJSON *idx = NULL;
    int rc = hf_read_json(idx_path, &idx, err);
    if (rc) return rc;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *it;
    char **files = NULL, **paths = NULL;
    size_t nf = 0, nw = 0;
    if (!cJSON_IsObject(wm)) rc = err_set(err, KVI_E_FORMAT, "hf: %s has no weight_map object", idx_path);
    if (rc == 0) files = calloc(HF_MAX_SHARDS, sizeof *files);
    const cJSON *walk = rc == 0 ? wm : NULL;
    if (rc == 0 && !files) rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
    cJSON_ArrayForEach(it, walk)
    {
        if (!cJSON_IsString(it) || !hf_shard_name_ok(it->valuestring)) {
            rc = err_set(err, KVI_E_FORMAT, "hf: weight_map entry %.64s does not name a file in the folder",
                         it->string);
            break;
        }
        nw++;
        size_t k = 0;
        while (k < nf && strcmp(files[k], it->valuestring) != 0) k++;
        if (k < nf) continue;
        if (nf == HF_MAX_SHARDS) {
            rc = err_set(err, KVI_E_FORMAT, "hf: more than %d shards", HF_MAX_SHARDS);
            break;
        }
        files[nf++] = it->valuestring;
    }
    walk = rc == 0 ? wm : NULL;
    if (rc == 0 && nf == 0) rc = err_set(err, KVI_E_FORMAT, "hf: %s lists no tensors", idx_path);
    if (rc == 0) {
        paths = calloc(nf, sizeof *paths);
        src->ix = calloc(nf, sizeof *src->ix);
        if (!paths || !src->ix) rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
    }
    for (size_t i = 0; rc == 0 && i < nf; i++)
        if (!(paths[i] = model_path_join(dir, files[i]))) rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
    const uint8_t **data = rc == 0 ? calloc(nf, sizeof *data) : NULL;
    size_t *sizes = rc == 0 ? calloc(nf, sizeof *sizes) : NULL;
    if (rc == 0 && (!data || !sizes)) rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
    if (rc == 0 && use_mmap) rc = hf_map_files(m, paths, nf, data, sizes, err);
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        if (!use_mmap) rc = model_read_file(m, paths[i], false, &data[i], &sizes[i], err);
        if (rc == 0) rc = st_parse(data[i], sizes[i], &src->ix[i], err);
        if (rc == 0) src->n_ix++;
    }
    if (rc == 0) rc = hf_src_index(src, err);
    /* the index and the shards agree */
    size_t stored = src->n_ent;
    walk = rc == 0 ? wm : NULL;
    cJSON_ArrayForEach(it, walk)
    {
        char *canon = hf_canon(it->string);
        const hf_ent *e = canon ? hf_lookup(src, canon) : NULL;
        free(canon);
        if (!e || strcmp(e->t->name, it->string) != 0 || strcmp(files[e->shard], it->valuestring) != 0) {
            rc = err_set(err, KVI_E_FORMAT, "hf: tensor %.96s is not in %.64s as the index says", it->string,
                         it->valuestring);
            break;
        }
    }
    if (rc == 0 && stored != nw)
        rc = err_set(err, KVI_E_FORMAT, "hf: the shards hold %zu tensors, the index lists %zu", stored, nw);
    for (size_t i = 0; paths && i < nf; i++) free(paths[i]);
    free(paths);
    free(files);
    free(data);
    free(sizes);
    cJSON_Delete(idx);
    return rc;
}

/* model.safetensors, else the shards of model.safetensors.index.json. */
static int hf_load_weights(struct kvi_model *m, const char *dir, const kvi_load_params *p, hf_src *src,
                           kvi_error *err)
{
    char *st_path = model_path_join(dir, "model.safetensors");
    char *idx_path = model_path_join(dir, "model.safetensors.index.json");
    int rc = 0;
    struct stat st;
    if (!st_path || !idx_path) {
        rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
    } else if (stat(st_path, &st) != 0 && stat(idx_path, &st) == 0) {
        rc = hf_load_sharded(m, dir, idx_path, p->use_mmap, src, err);
    } else {
        const uint8_t *buf;
        size_t size;
        src->ix = calloc(1, sizeof *src->ix);
        if (!src->ix) rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
        if (rc == 0 && (rc = model_read_file(m, st_path, p->use_mmap, &buf, &size, err)) == 0 &&
            (rc = st_parse(buf, size, &src->ix[0], err)) == 0)
            src->n_ix = 1;
        if (rc == 0) rc = hf_src_index(src, err);
    }
    free(st_path);
    free(idx_path);
    return rc;
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
    char *tok_path = model_path_join(dir, "tokenizer.json");
    cJSON *cfg = NULL;
    hf_src src = { 0 };
    hf_cfg c = { 0 };
    int rc = 0;
    if (!cfg_path || !tok_path) {
        rc = err_set(err, KVI_E_NOMEM, "hf: out of memory");
        goto done;
    }
    if ((rc = hf_read_json(cfg_path, &cfg, err)) || (rc = hf_parse_config(m, cfg, &c, err))) goto done;
    hf_folder_name(dir, m->name, sizeof m->name);
    if ((rc = hf_load_weights(m, dir, p, &src, err)) || (rc = hf_bind_tensors(m, &src, &c, err)) ||
        (rc = tokenizer_load_hf(tok_path, &m->tok, err)))
        goto done;
    m->has_weights = true;
    rc = model_validate(m, err);
done:
    hf_src_free(&src);
    cJSON_Delete(cfg);
    free(cfg_path);
    free(tok_path);
    return rc;
}
