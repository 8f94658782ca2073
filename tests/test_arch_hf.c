/*
 * test_arch_hf.c — Hugging Face folders of every dense architecture against
 * llama.cpp's logits (../shared/golden/arch, README there).
 *
 * For each F32 golden GGUF the test writes the folder a Hugging Face checkpoint
 * of those weights would be, undoing every transformation of llama.cpp's
 * converter: GGUF names back to PyTorch names (by the block's shape: which norm
 * is post_attention_layernorm differs between llama-like and gemma/olmo2
 * blocks), q/k rows of NORM-RoPE archs (granite) back to rotate-half order,
 * Gemma norms back to w (the converter stores 1 + w), LongRoPE factor tensors
 * back into config.json, the metadata into config.json keys; tokenizer.json
 * from the GGUF vocabulary. Each folder is written twice: one model.safetensors
 * (loaded into memory) and three shards with model.safetensors.index.json
 * (mapped), the second with transformers-5 style rope_parameters / layer_types
 * where an architecture has them, and Gemma 3 as Gemma3ForConditionalGeneration
 * (text_config, "language_model." names, a vision tensor left unread). Each
 * load must give the golden's 48 logit rows within the F32 tolerance (0.002
 * relative) and the same block fields as the GGUF load. Then refusals: an
 * unknown RoPE type or key, a stray tensor, sliding layers where the
 * architecture has none, an index naming a missing or outside file.
 */
#include "testutil.h"

#include "formats/gguf.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* one tensor of the folder */
typedef struct hf_t {
    char name[128];
    int n_dims;
    int64_t shape[2]; /* PyTorch order: [out][in] */
    float *data;      /* owned */
} hf_t;

typedef struct hf_set {
    hf_t *t;
    int n, cap;
} hf_set;

static hf_t *set_add(hf_set *s, const char *name, int n_dims, int64_t d0, int64_t d1)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->t = realloc(s->t, (size_t)s->cap * sizeof *s->t);
    }
    hf_t *t = &s->t[s->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->shape[0] = d0;
    t->shape[1] = n_dims == 2 ? d1 : 1;
    t->data = calloc((size_t)(d0 * t->shape[1]), sizeof(float));
    return t;
}

static void set_free(hf_set *s)
{
    for (int i = 0; i < s->n; i++) free(s->t[i].data);
    free(s->t);
    memset(s, 0, sizeof *s);
}

static size_t t_elems(const hf_t *t) { return (size_t)(t->shape[0] * t->shape[1]); }

/* ---- GGUF -> Hugging Face names and values -------------------------------- */

typedef struct arch_info {
    const char *arch;
    bool post_norms; /* gemma2/3, olmo2: post_attention_layernorm is the post-attention norm */
    bool gemma;      /* norms stored as w (GGUF: 1 + w) */
    bool norm_rope;  /* q/k rows interleaved in GGUF, rotate-half in HF */
} arch_info;

static const char *gguf_to_hf_part(const arch_info *a, const char *part)
{
    static const struct {
        const char *g, *h;
    } map[] = {
        { "attn_norm.weight", "input_layernorm.weight" },
        { "attn_q.weight", "self_attn.q_proj.weight" },
        { "attn_k.weight", "self_attn.k_proj.weight" },
        { "attn_v.weight", "self_attn.v_proj.weight" },
        { "attn_qkv.weight", "self_attn.qkv_proj.weight" },
        { "attn_output.weight", "self_attn.o_proj.weight" },
        { "attn_q_norm.weight", "self_attn.q_norm.weight" },
        { "attn_k_norm.weight", "self_attn.k_norm.weight" },
        { "post_attention_norm.weight", "post_attention_layernorm.weight" },
        { "post_ffw_norm.weight", "post_feedforward_layernorm.weight" },
        { "ffn_gate.weight", "mlp.gate_proj.weight" },
        { "ffn_down.weight", "mlp.down_proj.weight" },
    };
    if (strcmp(part, "ffn_norm.weight") == 0)
        return a->post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
    if (strcmp(part, "ffn_up.weight") == 0)
        return strcmp(a->arch, "phi3") == 0 ? "mlp.gate_up_proj.weight" : "mlp.up_proj.weight";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].g, part) == 0) return map[i].h;
    return NULL;
}

/* rotate-half rows from interleaved: hf row (h, j * half + i) = gguf row (h, 2i + j) */
static void unpermute(float *dst, const float *src, int64_t rows, int64_t hd, int64_t n_in)
{
    const int64_t half = hd / 2;
    for (int64_t h = 0; h < rows / hd; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(dst + (h * hd + j * half + i) * n_in, src + (h * hd + 2 * i + j) * n_in,
                       (size_t)n_in * sizeof *dst);
}

static int64_t gguf_i(const gguf_ctx *g, const char *arch, const char *key, int64_t def)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t v;
    return gguf_get_int(g, k, &v, NULL) == 0 ? v : def;
}

static double gguf_f(const gguf_ctx *g, const char *arch, const char *key, double def)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    double v;
    return gguf_get_float(g, k, &v, NULL) == 0 ? v : def;
}

/* The Hugging Face tensors of the golden g; *long_f / *short_f: LongRoPE factors. */
static bool hf_tensors(const gguf_ctx *g, const arch_info *a, const char *prefix, hf_set *s,
                       const float **long_f, const float **short_f, int64_t *n_factors)
{
    const int64_t n_heads = gguf_i(g, a->arch, "attention.head_count", 0),
                  n_kv = gguf_i(g, a->arch, "attention.head_count_kv", n_heads),
                  dim = gguf_i(g, a->arch, "embedding_length", 0),
                  hd = gguf_i(g, a->arch, "attention.key_length", dim / n_heads);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *gt = gguf_tensor_at(g, i);
        CHECK(gt->type == KVI_TYPE_F32, "%s: tensor %s is not F32", a->arch, gt->name);
        if (gt->type != KVI_TYPE_F32) return false;
        if (strcmp(gt->name, "rope_factors_long.weight") == 0 ||
            strcmp(gt->name, "rope_factors_short.weight") == 0) {
            *(gt->name[13] == 'l' ? long_f : short_f) = gt->data;
            *n_factors = gt->ne[0];
            continue;
        }
        char name[128];
        int layer;
        char part[64];
        if (strcmp(gt->name, "token_embd.weight") == 0)
            snprintf(name, sizeof name, "%sembed_tokens.weight", prefix);
        else if (strcmp(gt->name, "output_norm.weight") == 0)
            snprintf(name, sizeof name, "%snorm.weight", prefix);
        else if (strcmp(gt->name, "output.weight") == 0)
            snprintf(name, sizeof name, "lm_head.weight");
        else if (sscanf(gt->name, "blk.%d.%63s", &layer, part) == 2 && gguf_to_hf_part(a, part))
            snprintf(name, sizeof name, "%slayers.%d.%s", prefix, layer, gguf_to_hf_part(a, part));
        else {
            CHECK(0, "%s: no Hugging Face name for %s", a->arch, gt->name);
            return false;
        }
        hf_t *t = set_add(s, name, (int)gt->n_dims, gt->n_dims == 2 ? gt->ne[1] : gt->ne[0], gt->ne[0]);
        const float *src = gt->data;
        const size_t n = t_elems(t);
        const size_t len = strlen(gt->name);
        const bool is_norm = len > 11 && strcmp(gt->name + len - 11, "norm.weight") == 0;
        const bool q = strstr(gt->name, ".attn_q.weight") != NULL,
                   k = strstr(gt->name, ".attn_k.weight") != NULL;
        if (a->norm_rope && (q || k)) {
            CHECK(t->shape[0] == (q ? n_heads : n_kv) * hd, "%s: %s rows", a->arch, gt->name);
            unpermute(t->data, src, t->shape[0], hd, t->shape[1]);
        } else {
            memcpy(t->data, src, n * sizeof *src);
        }
        for (size_t j = 0; a->gemma && is_norm && j < n; j++) t->data[j] -= 1.0f;
    }
    return true;
}

/* ---- files ----------------------------------------------------------------- */

/* one safetensors file of the tensors idx[0..n) of s */
static bool write_safetensors(const char *path, const hf_set *s, const int *idx, int n)
{
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const hf_t *t = &s->t[idx[i]];
        cJSON *o = cJSON_AddObjectToObject(h, t->name);
        cJSON_AddStringToObject(o, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *dof = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)off));
        off += t_elems(t) * sizeof(float);
        cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)off));
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hl = strlen(js), pad = (8 - hl % 8) % 8;
    FILE *f = fopen(path, "wb");
    bool ok = f != NULL;
    if (f) {
        uint64_t n8 = hl + pad;
        uint8_t le[8];
        for (int i = 0; i < 8; i++) le[i] = (uint8_t)(n8 >> (8 * i));
        ok = fwrite(le, 1, 8, f) == 8 && fwrite(js, 1, hl, f) == hl && fwrite("        ", 1, pad, f) == pad;
        for (int i = 0; ok && i < n; i++) {
            const hf_t *t = &s->t[idx[i]];
            ok = fwrite(t->data, sizeof(float), t_elems(t), f) == t_elems(t);
        }
        ok = fclose(f) == 0 && ok;
    }
    free(js);
    CHECK(ok, "write %s", path);
    return ok;
}

static bool write_json(const char *path, const cJSON *j)
{
    char *s = cJSON_Print(j);
    const bool ok = s && write_file(path, s, strlen(s)) == 0;
    free(s);
    CHECK(ok, "write %s", path);
    return ok;
}

static char *join(const char *dir, const char *name)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* tokenizer.json: the GGUF vocabulary as a BPE model without merges */
static bool write_tokenizer(const char *dir, const gguf_ctx *g)
{
    gguf_vtype et;
    uint64_t n = 0;
    if (gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n, NULL) != 0) return false;
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON_AddArrayToObject(model, "merges");
    cJSON_AddArrayToObject(root, "added_tokens");
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &len);
        char tok[256];
        snprintf(tok, sizeof tok, "%.*s", (int)(len < 255 ? len : 255), s ? s : "");
        cJSON_AddNumberToObject(vocab, tok, (double)i);
    }
    const bool ok = write_json(join(dir, "tokenizer.json"), root);
    cJSON_Delete(root);
    return ok;
}

/* ---- config.json ----------------------------------------------------------- */

typedef enum variant {
    V_SINGLE = 0, /* one file, classic keys */
    V_SHARDED,    /* three shards, transformers-5 keys, Gemma 3 multimodal */
} variant;

static cJSON *make_config(const gguf_ctx *g, const arch_info *a, const char *hf_arch, variant v,
                          const float *long_f, const float *short_f, int64_t n_factors)
{
    const char *ar = a->arch;
    cJSON *c = cJSON_CreateObject();
    const int64_t n_heads = gguf_i(g, ar, "attention.head_count", 0),
                  dim = gguf_i(g, ar, "embedding_length", 0), layers = gguf_i(g, ar, "block_count", 0);
    const int64_t hd = gguf_i(g, ar, "attention.key_length", dim / n_heads);
    cJSON_AddNumberToObject(c, "hidden_size", (double)dim);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)gguf_i(g, ar, "feed_forward_length", 0));
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads",
                            (double)gguf_i(g, ar, "attention.head_count_kv", n_heads));
    if (hd != dim / n_heads) cJSON_AddNumberToObject(c, "head_dim", (double)hd);
    cJSON_AddNumberToObject(c, "vocab_size", (double)gguf_find_tensor(g, "token_embd.weight")->ne[1]);
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)gguf_i(g, ar, "context_length", 0));
    cJSON_AddNumberToObject(c, "rms_norm_eps", gguf_f(g, ar, "attention.layer_norm_rms_epsilon", 0));
    cJSON_AddBoolToObject(c, "tie_word_embeddings", gguf_find_tensor(g, "output.weight") == NULL);
    const double theta = gguf_f(g, ar, "rope.freq_base", 10000.0);
    const bool gemma3 = strcmp(ar, "gemma3") == 0, gemma2 = strcmp(ar, "gemma2") == 0;
    if (v == V_SHARDED && !gemma3) {
        cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
        cJSON_AddStringToObject(rp, "rope_type", "default");
        cJSON_AddNumberToObject(rp, "rope_theta", theta);
    } else if (!gemma3) {
        cJSON_AddNumberToObject(c, "rope_theta", theta);
    }
    if (a->gemma) {
        cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
        cJSON_AddNumberToObject(c, "query_pre_attn_scalar", (double)hd);
        cJSON_AddNumberToObject(c, "sliding_window", (double)gguf_i(g, ar, "attention.sliding_window", 0));
    } else {
        cJSON_AddStringToObject(c, "hidden_act", "silu");
    }
    if (gemma2) {
        cJSON_AddNumberToObject(c, "attn_logit_softcapping", gguf_f(g, ar, "attn_logit_softcapping", 50));
        cJSON_AddNumberToObject(c, "final_logit_softcapping", gguf_f(g, ar, "final_logit_softcapping", 30));
    }
    if (a->gemma && v == V_SHARDED) { /* gemma2: period 2, gemma3: period 6, llama.cpp's defaults */
        cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
        for (int64_t l = 0; l < layers; l++)
            cJSON_AddItemToArray(
                lt, cJSON_CreateString((l + 1) % (gemma2 ? 2 : 6) ? "sliding_attention" : "full_attention"));
    } else if (gemma3) {
        cJSON_AddNumberToObject(c, "sliding_window_pattern", 6);
    }
    if (gemma3) {
        const double f = gguf_f(g, ar, "rope.scaling.factor", 1.0);
        if (v == V_SHARDED) {
            cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
            cJSON *full = cJSON_AddObjectToObject(rp, "full_attention");
            cJSON_AddStringToObject(full, "rope_type", "linear");
            cJSON_AddNumberToObject(full, "factor", f);
            cJSON_AddNumberToObject(full, "rope_theta", theta);
            cJSON *sl = cJSON_AddObjectToObject(rp, "sliding_attention");
            cJSON_AddStringToObject(sl, "rope_type", "default");
            cJSON_AddNumberToObject(sl, "rope_theta", 10000.0);
        } else {
            cJSON_AddNumberToObject(c, "rope_theta", theta);
            cJSON_AddNumberToObject(c, "rope_local_base_freq", 10000.0);
            cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
            cJSON_AddStringToObject(rs, "rope_type", "linear");
            cJSON_AddNumberToObject(rs, "factor", f);
        }
    }
    if (strcmp(ar, "phi3") == 0) {
        const int64_t n_rot = gguf_i(g, ar, "rope.dimension_count", hd);
        if (n_rot != hd) cJSON_AddNumberToObject(c, "partial_rotary_factor", (double)n_rot / (double)hd);
        cJSON_AddNumberToObject(c, "sliding_window", (double)gguf_i(g, ar, "attention.sliding_window", 0));
        if (long_f) { /* transformers 5: everything in rope_parameters */
            const double orig = (double)gguf_i(g, ar, "rope.scaling.original_context_length", 0);
            cJSON *rs = cJSON_GetObjectItem(c, "rope_parameters");
            if (rs) {
                cJSON_ReplaceItemInObject(rs, "rope_type", cJSON_CreateString("longrope"));
                cJSON_AddNumberToObject(rs, "original_max_position_embeddings", orig);
            } else {
                cJSON_AddNumberToObject(c, "original_max_position_embeddings", orig);
                rs = cJSON_AddObjectToObject(c, "rope_scaling");
                cJSON_AddStringToObject(rs, "type", "longrope");
            }
            cJSON *lf = cJSON_AddArrayToObject(rs, "long_factor"),
                  *sf = cJSON_AddArrayToObject(rs, "short_factor");
            for (int64_t i = 0; i < n_factors; i++) {
                cJSON_AddItemToArray(lf, cJSON_CreateNumber(long_f[i]));
                cJSON_AddItemToArray(sf, cJSON_CreateNumber(short_f[i]));
            }
        }
    }
    if (strcmp(ar, "granite") == 0) {
        cJSON_AddNumberToObject(c, "embedding_multiplier", gguf_f(g, ar, "embedding_scale", 1));
        cJSON_AddNumberToObject(c, "residual_multiplier", gguf_f(g, ar, "residual_scale", 1));
        cJSON_AddNumberToObject(c, "attention_multiplier", gguf_f(g, ar, "attention.scale", 1));
        cJSON_AddNumberToObject(c, "logits_scaling", gguf_f(g, ar, "logit_scale", 1));
    }
    if (gemma3 && v == V_SHARDED) { /* the multimodal wrapper */
        cJSON *root = cJSON_CreateObject();
        cJSON *archs = cJSON_AddArrayToObject(root, "architectures");
        cJSON_AddItemToArray(archs, cJSON_CreateString("Gemma3ForConditionalGeneration"));
        cJSON_AddStringToObject(root, "model_type", "gemma3");
        cJSON_AddStringToObject(c, "model_type", "gemma3_text");
        cJSON_AddItemToObject(root, "text_config", c);
        cJSON *vc = cJSON_AddObjectToObject(root, "vision_config");
        cJSON_AddNumberToObject(vc, "hidden_size", 16);
        return root;
    }
    cJSON *archs = cJSON_CreateArray();
    cJSON_AddItemToArray(archs, cJSON_CreateString(hf_arch));
    cJSON_AddItemToObject(c, "architectures", archs);
    return c;
}

/* The folder of golden `name` in variant v; NULL on failure. */
static const char *write_folder(const char *name, const arch_info *a, const char *hf_arch, variant v)
{
    char rel[128];
    snprintf(rel, sizeof rel, "golden/arch/%s-f32.gguf", name);
    gguf_ctx *g = NULL;
    kvi_error err = { 0 };
    if (gguf_open(shared_path(rel), false, &g, &err) != 0) {
        CHECK(0, "open %s: %s", rel, err.msg);
        return NULL;
    }
    static char dir[4][512];
    static int k;
    k = (k + 1) % 4;
    char sub[96];
    snprintf(sub, sizeof sub, "hf_%s_%s", name, v == V_SINGLE ? "single" : "sharded");
    snprintf(dir[k], sizeof dir[k], "%s", tmp_path(sub));
    mkdir(dir[k], 0755);
    static const char *const old[] = { "model.safetensors", "model.safetensors.index.json",
                                       "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                       "model-00003-of-00003.safetensors" };
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) remove(join(dir[k], old[i]));

    const bool mm = v == V_SHARDED && strcmp(a->arch, "gemma3") == 0;
    hf_set s = { 0 };
    const float *long_f = NULL, *short_f = NULL;
    int64_t n_factors = 0;
    bool ok = hf_tensors(g, a, mm ? "language_model.model." : "model.", &s, &long_f, &short_f, &n_factors);
    if (ok && mm) { /* a vision tower the loader leaves unread */
        hf_t *t = set_add(&s, "vision_tower.vision_model.post_layernorm.weight", 1, 16, 1);
        for (int i = 0; i < 16; i++) t->data[i] = 1.0f;
    }
    cJSON *cfg = ok ? make_config(g, a, hf_arch, v, long_f, short_f, n_factors) : NULL;
    ok = ok && write_json(join(dir[k], "config.json"), cfg) && write_tokenizer(dir[k], g);
    cJSON_Delete(cfg);
    int *idx = malloc((size_t)s.n * sizeof *idx);
    if (ok && v == V_SINGLE) {
        for (int i = 0; i < s.n; i++) idx[i] = i;
        ok = write_safetensors(join(dir[k], "model.safetensors"), &s, idx, s.n);
    } else if (ok) { /* round robin over three shards */
        cJSON *ix = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(ix, "weight_map");
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(ix, "metadata"), "total_size", 0);
        for (int sh = 0; ok && sh < 3; sh++) {
            char fn[64];
            snprintf(fn, sizeof fn, "model-%05d-of-00003.safetensors", sh + 1);
            int n = 0;
            for (int i = sh; i < s.n; i += 3) {
                idx[n++] = i;
                cJSON_AddStringToObject(wm, s.t[i].name, fn);
            }
            ok = write_safetensors(join(dir[k], fn), &s, idx, n);
        }
        ok = ok && write_json(join(dir[k], "model.safetensors.index.json"), ix);
        cJSON_Delete(ix);
    }
    free(idx);
    set_free(&s);
    gguf_close(g);
    return ok ? dir[k] : NULL;
}

/* ---- checks ---------------------------------------------------------------- */

static double rel_err_vs_golden(const float *lg, const cJSON *ref, int n, int nv)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        for (int k = 0; k < nv && k < cJSON_GetArraySize(r); k++) {
            const double b = cJSON_GetArrayItem(r, k)->valuedouble;
            num += (lg[(size_t)i * nv + k] - b) * (lg[(size_t)i * nv + k] - b);
            den += b * b;
        }
    }
    return sqrt(num / den);
}

/* The block fields of the folder's model equal the GGUF's. */
static void check_same_block(const char *what, const struct kvi_model *h, const struct kvi_model *g)
{
    CHECK(h->n_vocab == g->n_vocab && h->dim == g->dim && h->n_layers == g->n_layers &&
              h->n_heads == g->n_heads && h->n_kv_heads == g->n_kv_heads && h->head_dim == g->head_dim &&
              h->ffn_dim == g->ffn_dim && h->n_rot == g->n_rot && h->n_ctx_train == g->n_ctx_train,
          "%s: widths differ from the GGUF's", what);
    CHECK(h->rms_eps == g->rms_eps && h->rope_neox == g->rope_neox && h->qk_norm == g->qk_norm &&
              h->act == g->act,
          "%s: eps / rope pairing / qk norm / activation differ", what);
    CHECK(h->emb_scale == g->emb_scale && h->residual_scale == g->residual_scale &&
              fabsf(h->kq_scale - g->kq_scale) <= 1e-7f * g->kq_scale && h->logit_scale == g->logit_scale &&
              h->attn_softcap == g->attn_softcap && h->final_softcap == g->final_softcap,
          "%s: scales differ (kq %g vs %g, emb %g vs %g)", what, (double)h->kq_scale, (double)g->kq_scale,
          (double)h->emb_scale, (double)g->emb_scale);
    CHECK(h->n_rope_sets == g->n_rope_sets && h->rope_orig_ctx == g->rope_orig_ctx &&
              !h->rope_long == !g->rope_long,
          "%s: RoPE sets differ", what);
    for (int i = 0; i < g->n_rope_sets && i < h->n_rope_sets; i++)
        CHECK(h->rope[i].theta == g->rope[i].theta && h->rope[i].freq_scale == g->rope[i].freq_scale &&
                  fabsf(h->rope[i].mscale - g->rope[i].mscale) <= 1e-6f && h->rope[i].yarn == g->rope[i].yarn,
              "%s: RoPE set %d: base %g / %g, scale %g / %g, attention factor %g / %g", what, i,
              (double)h->rope[i].theta, (double)g->rope[i].theta, (double)h->rope[i].freq_scale,
              (double)g->rope[i].freq_scale, (double)h->rope[i].mscale, (double)g->rope[i].mscale);
    for (int l = 0; l < g->n_layers && l < h->n_layers; l++)
        CHECK(h->layers[l].window == g->layers[l].window && h->layers[l].rope_set == g->layers[l].rope_set,
              "%s: layer %d window %d / %d, rope set %d / %d", what, l, h->layers[l].window,
              g->layers[l].window, h->layers[l].rope_set, g->layers[l].rope_set);
}

static void check_folder(const char *name, const char *dir, bool use_mmap, const kvi_model *gm,
                         const cJSON *j)
{
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.use_mmap = use_mmap;
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(dir, &lp, &err);
    CHECK(m != NULL, "%s: load %s: %s", name, dir, err.msg);
    if (!m) return;
    char what[96];
    snprintf(what, sizeof what, "%s (%s)", name, use_mmap ? "shards, mapped" : "one file");
    check_same_block(what, m, gm);
    const cJSON *tk = cJSON_GetObjectItem(j, "tokens");
    int32_t toks[64];
    const int n = json_token_ids(tk, toks, 64);
    CHECK(n == 48, "%s: %d golden tokens", name, n);
    const int nv = kvi_n_vocab(m);
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 1, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    float *lg = e ? seq_logits(e, toks, n, false) : NULL;
    if (lg) {
        const double re = rel_err_vs_golden(lg, cJSON_GetObjectItem(j, "logits"), n, nv);
        CHECK(re < 0.002, "%s: relative error %.4g >= 0.002", what, re);
        printf("%-40s relative error vs llama.cpp %.6f (tolerance 0.002)\n", what, re);
    }
    free(lg);
    kvi_engine_free(e);
    kvi_model_free(m);
}

static const arch_info infos[] = {
    { "qwen3", false, false, false }, { "gemma2", true, true, false },   { "gemma3", true, true, false },
    { "phi3", false, false, false },  { "granite", false, false, true }, { "olmo2", true, false, false },
};

static const arch_info *info_of(const char *arch)
{
    for (size_t i = 0; i < sizeof infos / sizeof infos[0]; i++)
        if (strcmp(infos[i].arch, arch) == 0) return &infos[i];
    return NULL;
}

static void check_golden(const char *name, const char *arch, const char *hf_arch)
{
    char rel[128], grel[128];
    snprintf(rel, sizeof rel, "golden/arch/%s-f32.gguf", name);
    snprintf(grel, sizeof grel, "golden/arch/%s-f32.logits.json", name);
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_error err = { 0 };
    kvi_model *gm = kvi_model_load(shared_path(rel), &lp, &err);
    CHECK(gm != NULL, "load %s: %s", rel, err.msg);
    cJSON *j = load_json(shared_path(grel));
    CHECK(j != NULL, "read %s", grel);
    const arch_info *a = info_of(arch);
    for (int v = 0; gm && j && v < 2; v++) {
        const char *dir = write_folder(name, a, hf_arch, (variant)v);
        if (dir) check_folder(name, dir, v == V_SHARDED, gm, j);
    }
    cJSON_Delete(j);
    kvi_model_free(gm);
}

/* ---- refusals --------------------------------------------------------------- */

/* config.json of dir with `edit` applied must fail to load with a message
 * containing `needle`; the original config is restored. */
static void expect_cfg_refused(const char *dir, const char *what, void (*edit)(cJSON *), const char *needle)
{
    const char *path = join(dir, "config.json");
    char *orig = read_file(path, NULL);
    cJSON *c = cJSON_Parse(orig);
    edit(c);
    write_json(path, c);
    cJSON_Delete(c);
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(dir, &lp, &err);
    CHECK(m == NULL && strstr(err.msg, needle) != NULL, "%s: loaded or message '%s' lacks '%s'", what,
          err.msg, needle);
    printf("refused (%s): %s\n", what, err.msg);
    kvi_model_free(m);
    write_file(path, orig, strlen(orig));
    free(orig);
}

static void edit_rope_dynamic(cJSON *c)
{
    cJSON *rs = cJSON_CreateObject();
    cJSON_AddStringToObject(rs, "rope_type", "dynamic");
    cJSON_AddNumberToObject(rs, "factor", 2);
    cJSON_ReplaceItemInObject(c, "rope_parameters", rs);
}

static void edit_rope_key(cJSON *c)
{
    cJSON *rs = cJSON_CreateObject();
    cJSON_AddStringToObject(rs, "rope_type", "linear");
    cJSON_AddNumberToObject(rs, "factor", 2);
    cJSON_AddNumberToObject(rs, "mscale_all_dim", 1);
    cJSON_ReplaceItemInObject(c, "rope_parameters", rs);
}

static void edit_sliding(cJSON *c)
{
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    const int n = cJSON_GetObjectItem(c, "num_hidden_layers")->valueint;
    for (int l = 0; l < n; l++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(l ? "full_attention" : "sliding_attention"));
}

static void edit_partial(cJSON *c) { cJSON_AddNumberToObject(c, "partial_rotary_factor", 0.5); }

static void expect_index_refused(const char *dir, const char *what, const char *from, const char *to)
{
    const char *path = join(dir, "model.safetensors.index.json");
    char *orig = read_file(path, NULL);
    char *at = orig ? strstr(orig, from) : NULL;
    CHECK(at != NULL, "%s: '%s' not in the index", what, from);
    if (!at) {
        free(orig);
        return;
    }
    const size_t pre = (size_t)(at - orig), fl = strlen(from), tl = strlen(to), n = strlen(orig);
    char *ed = malloc(n - fl + tl + 1);
    memcpy(ed, orig, pre);
    memcpy(ed + pre, to, tl);
    memcpy(ed + pre + tl, at + fl, n - pre - fl + 1);
    write_file(path, ed, strlen(ed));
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(dir, &lp, &err);
    CHECK(m == NULL && err.msg[0], "%s: loaded", what);
    printf("refused (%s): %s\n", what, err.msg);
    kvi_model_free(m);
    write_file(path, orig, n);
    free(ed);
    free(orig);
}

static void check_refusals(void)
{
    const char *dir = write_folder("qwen3", info_of("qwen3"), "Qwen3ForCausalLM", V_SHARDED);
    if (!dir) return;
    expect_cfg_refused(dir, "rope type dynamic", edit_rope_dynamic, "dynamic");
    expect_cfg_refused(dir, "unknown rope key", edit_rope_key, "mscale_all_dim");
    expect_cfg_refused(dir, "qwen3 sliding layer", edit_sliding, "sliding_attention");
    expect_cfg_refused(dir, "qwen3 partial rotary", edit_partial, "partial_rotary_factor");
    expect_index_refused(dir, "index names a missing shard", "\"model.norm.weight\":\t\"model-00001",
                         "\"model.norm.weight\":\t\"model-00009");
    expect_index_refused(dir, "index names a file outside the folder",
                         "\"model.norm.weight\":\t\"model-00001", "\"model.norm.weight\":\t\"../model-00001");
    expect_index_refused(dir, "index names the wrong shard", "\"model.norm.weight\":\t\"model-00001",
                         "\"model.norm.weight\":\t\"model-00002");

    /* a tensor no architecture part reads */
    const char *sdir = write_folder("olmo2", info_of("olmo2"), "Olmo2ForCausalLM", V_SINGLE);
    if (!sdir) return;
    hf_set s = { 0 };
    hf_t *t = set_add(&s, "model.layers.0.self_attn.extra.weight", 1, 4, 1);
    t->data[0] = 1;
    /* a second file beside is not read: append the tensor by rewriting the whole folder's file */
    size_t len = 0;
    char *st = read_file(join(sdir, "model.safetensors"), &len);
    uint64_t hl = 0;
    for (int i = 0; st && i < 8; i++) hl |= (uint64_t)(uint8_t)st[i] << (8 * i);
    /* the header gets one more entry at the end of the data section */
    char *hdr = st ? strndup(st + 8, hl) : NULL;
    cJSON *h = hdr ? cJSON_Parse(hdr) : NULL;
    CHECK(h != NULL, "re-read model.safetensors");
    if (h) {
        const size_t data_len = len - 8 - hl;
        cJSON *o = cJSON_AddObjectToObject(h, t->name);
        cJSON_AddStringToObject(o, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(4));
        cJSON *dof = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)data_len));
        cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)data_len + 16));
        char *js = cJSON_PrintUnformatted(h);
        size_t nl = strlen(js), pad = (8 - nl % 8) % 8;
        FILE *f = fopen(join(sdir, "model.safetensors"), "wb");
        uint8_t le[8];
        for (int i = 0; i < 8; i++) le[i] = (uint8_t)((nl + pad) >> (8 * i));
        fwrite(le, 1, 8, f);
        fwrite(js, 1, nl, f);
        fwrite("        ", 1, pad, f);
        fwrite(st + 8 + hl, 1, data_len, f);
        fwrite(t->data, sizeof(float), 4, f);
        fclose(f);
        free(js);
        kvi_load_params lp;
        kvi_load_params_default(&lp);
        kvi_error err = { 0 };
        kvi_model *m = kvi_model_load(sdir, &lp, &err);
        CHECK(m == NULL && strstr(err.msg, "self_attn.extra.weight"), "stray tensor: loaded or '%s'",
              err.msg);
        printf("refused (stray tensor): %s\n", err.msg);
        kvi_model_free(m);
        cJSON_Delete(h);
    }
    free(hdr);
    free(st);
    set_free(&s);
}

/* ---- RoPE scaling of Llama-family configs ----------------------------------- */

/* TinyStories-656K (a Llama folder) as MistralForCausalLM with rope_scaling rs */
static kvi_model *load_tinystories_with(cJSON *rs, kvi_error *err)
{
    const char *dir = tmp_path("hf_tinystories_rope");
    mkdir(dir, 0755);
    static const char *const files[] = { "model.safetensors", "tokenizer.json" };
    for (size_t i = 0; i < 2; i++) {
        char rel[128];
        size_t len = 0;
        snprintf(rel, sizeof rel, "models/TinyStories-656K/%s", files[i]);
        char *d = read_file(shared_path(rel), &len);
        CHECK(d && write_file(join(dir, files[i]), d, len) == 0, "copy %s", rel);
        free(d);
    }
    cJSON *c = load_json(shared_path("models/TinyStories-656K/config.json"));
    if (!c) return NULL;
    cJSON_ReplaceItemInObject(c, "architectures",
                              cJSON_CreateStringArray((const char *[]){ "MistralForCausalLM" }, 1));
    cJSON_ReplaceItemInObject(c, "rope_scaling", rs);
    write_json(join(dir, "config.json"), c);
    cJSON_Delete(c);
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    return kvi_model_load(dir, &lp, err);
}

/* llama3: the divisors against transformers' formulation (inverse frequencies
 * scaled, then smoothed in the medium band); yarn: ramp and attention factor. */
static void check_llama_rope(void)
{
    cJSON *rs = cJSON_CreateObject();
    cJSON_AddStringToObject(rs, "rope_type", "llama3");
    cJSON_AddNumberToObject(rs, "factor", 8);
    cJSON_AddNumberToObject(rs, "low_freq_factor", 1);
    cJSON_AddNumberToObject(rs, "high_freq_factor", 4);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", 512);
    kvi_error err = { 0 };
    kvi_model *m = load_tinystories_with(rs, &err);
    CHECK(m && m->rope_freqs && m->rope[0].factors == m->rope_freqs, "llama3 rope: %s", err.msg);
    for (int i = 0; m && m->rope_freqs && i < m->n_rot / 2; i++) {
        const double inv = 1.0 / pow(10000.0, 2.0 * i / m->n_rot), wave = 2 * M_PI / inv;
        double scaled = wave > 512.0 ? inv / 8 : inv;
        if (!(wave < 512.0 / 4) && !(wave > 512.0)) {
            const double sm = (512.0 / wave - 1) / (4 - 1);
            scaled = (1 - sm) * scaled / 8 + sm * scaled;
        }
        CHECK(fabs(m->rope_freqs[i] - inv / scaled) <= 1e-5 * (inv / scaled),
              "llama3 divisor %d: %g, want %g", i, (double)m->rope_freqs[i], inv / scaled);
    }
    CHECK(m && m->rope_freqs && m->rope_freqs[0] == 1.0f && m->rope_freqs[7] == 8.0f &&
              m->rope_freqs[3] > 1.0f && m->rope_freqs[3] < 8.0f,
          "llama3: high, medium and low frequency bands");
    kvi_model_free(m);

    rs = cJSON_CreateObject();
    cJSON_AddStringToObject(rs, "type", "yarn");
    cJSON_AddNumberToObject(rs, "factor", 4);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", 128);
    m = load_tinystories_with(rs, &err);
    CHECK(m != NULL, "yarn rope: %s", err.msg);
    if (m) {
        /* transformers' find_correction_range, beta_fast 32, beta_slow 1 */
        const double d = m->n_rot, lo = floor(d * log(128 / (32 * 2 * M_PI)) / (2 * log(10000.0))),
                     hi = ceil(d * log(128 / (1 * 2 * M_PI)) / (2 * log(10000.0)));
        CHECK(m->rope[0].yarn && m->rope[0].freq_scale == 0.25f &&
                  fabsf(m->rope[0].mscale - (float)(0.1 * log(4.0) + 1)) < 1e-6f &&
                  m->rope[0].yarn_lo == (float)(lo > 0 ? lo : 0) &&
                  m->rope[0].yarn_hi == (float)(hi < d - 1 ? hi : d - 1),
              "yarn: scale %g, attention factor %g, ramp %g..%g", (double)m->rope[0].freq_scale,
              (double)m->rope[0].mscale, (double)m->rope[0].yarn_lo, (double)m->rope[0].yarn_hi);
    }
    kvi_model_free(m);
}

int main(void)
{
    static const struct {
        const char *name, *arch, *hf;
    } goldens[] = {
        { "qwen3", "qwen3", "Qwen3ForCausalLM" },       { "gemma2", "gemma2", "Gemma2ForCausalLM" },
        { "gemma3", "gemma3", "Gemma3ForCausalLM" },    { "phi3", "phi3", "Phi3ForCausalLM" },
        { "phi3-longrope", "phi3", "Phi3ForCausalLM" }, { "granite", "granite", "GraniteForCausalLM" },
        { "olmo2", "olmo2", "Olmo2ForCausalLM" },
    };
    for (size_t i = 0; i < sizeof goldens / sizeof goldens[0]; i++)
        check_golden(goldens[i].name, goldens[i].arch, goldens[i].hf);
    check_refusals();
    check_llama_rope();
    return test_main_end();
}
