/*
 * lora_peft.c — LoRA adapters saved by Hugging Face PEFT: a folder with
 * adapter_config.json and adapter_model.safetensors.
 *
 *   adapter_config.json   peft_type "LORA", r, lora_alpha, use_rslora (scale
 *                         lora_alpha / sqrt(r) instead of lora_alpha / r), and the
 *                         features refused by name: use_dora, fan_in_fan_out,
 *                         rank_pattern / alpha_pattern, modules_to_save, bias
 *                         other than "none"
 *   safetensors           "<prefix>layers.<L>.<self_attn|mlp>.<module>.lora_<A|B>[.<name>].weight"
 *                         A [r][n_in] (torch order), B [n_out][r]; F32, F16 or BF16
 * Modules: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, onto attn_q ..
 * ffn_down (model/lora.h). Each pair is bound through lora_bind_pair, so the checks
 * against the model are those of a GGUF adapter. Where the model's RoPE is not NeoX
 * (llama, granite, ...), its q / k rows are interleaved per head relative to the
 * Hugging Face checkpoint (llama.cpp's converter and model_hf.c both permute them):
 * B of q_proj and k_proj is copied with each head's rows interleaved the same way
 * (new row 2i = old i, 2i + 1 = old i + hd / 2), as llama.cpp's LoRA converter does.
 *
 * Invariant: the adapter owns one buffer (a->own): the safetensors bytes followed by
 * the permuted copies; every bound tensor points into it.
 */
#include "model/lora.h"

#include "base/error.h"
#include "base/file.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "model/rope_perm.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEFT_MAX_FILE ((size_t)64 << 30)

/* HF module names, in lora_mat order (dense matrices only) */
static const char *const peft_modules[LORA_EXP_GATE] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};

/* "....layers.L.<module>.lora_A[.x].weight" into (l, w, is_a); false otherwise */
static bool peft_name(const char *name, int n_layers, int *l, lora_mat *w, bool *is_a)
{
    const char *p = strstr(name, "layers.");
    int layer = -1, used = 0;
    if (!p || sscanf(p, "layers.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0 || layer >= n_layers)
        return false;
    const char *rest = p + used;
    for (int i = 0; i < LORA_EXP_GATE; i++) {
        const size_t k = strlen(peft_modules[i]);
        if (strncmp(rest, peft_modules[i], k) || strncmp(rest + k, ".lora_", 6)) continue;
        const char ab = rest[k + 6];
        if ((ab != 'A' && ab != 'B') || rest[k + 7] != '.' || strcmp(name + strlen(name) - 7, ".weight"))
            return false;
        *l = layer;
        *w = (lora_mat)i;
        *is_a = ab == 'A';
        return true;
    }
    return false;
}

/* The config's checks; *alpha the GGUF-style alpha (scale = alpha / r), *r the rank */
static int peft_config(const char *dir, float *alpha, int *r, kvi_error *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/adapter_config.json", dir) >= (int)sizeof path)
        return err_set(err, KVI_E_INVALID, "lora: folder name too long");
    char *txt = NULL;
    size_t len = 0;
    if (file_read_all(path, (size_t)16 << 20, &txt, &len) != FILE_OK)
        return err_set(err, KVI_E_IO, "lora: cannot read %s (a PEFT folder has adapter_config.json)", path);
    cJSON *c = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!cJSON_IsObject(c)) {
        cJSON_Delete(c);
        return err_set(err, KVI_E_FORMAT, "lora: %s is not a JSON object", path);
    }
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(c, "peft_type");
    const cJSON *rr = cJSON_GetObjectItemCaseSensitive(c, "r"),
                *la = cJSON_GetObjectItemCaseSensitive(c, "lora_alpha");
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(c, "bias");
    int rc = 0;
    if (cJSON_IsString(pt) && strcmp(pt->valuestring, "LORA"))
        rc = err_set(err, KVI_E_UNSUPPORTED, "lora: PEFT type '%s' (only LORA)", pt->valuestring);
    else if (!cJSON_IsNumber(rr) || rr->valuedouble < 1 || rr->valuedouble > LORA_MAX_RANK ||
             rr->valuedouble != (double)rr->valueint)
        rc = err_set(err, KVI_E_FORMAT, "lora: adapter_config.json: r must be an integer in [1, %d]",
                     LORA_MAX_RANK);
    else if (la && !cJSON_IsNumber(la))
        rc = err_set(err, KVI_E_FORMAT, "lora: adapter_config.json: lora_alpha is not a number");
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_dora")))
        rc = err_set(err, KVI_E_UNSUPPORTED, "lora: DoRA adapters (use_dora) are not supported");
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "fan_in_fan_out")))
        rc = err_set(err, KVI_E_UNSUPPORTED, "lora: fan_in_fan_out (Conv1D) adapters are not supported");
    else if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "rank_pattern")) > 0 ||
             cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "alpha_pattern")) > 0)
        rc =
            err_set(err, KVI_E_UNSUPPORTED, "lora: per-module ranks or alphas (rank_pattern, alpha_pattern)");
    else if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "modules_to_save")) > 0)
        rc = err_set(err, KVI_E_UNSUPPORTED, "lora: modules_to_save (whole modules saved with the adapter)");
    else if (cJSON_IsString(bias) && strcmp(bias->valuestring, "none"))
        rc = err_set(err, KVI_E_UNSUPPORTED, "lora: trained biases (bias '%s')", bias->valuestring);
    if (!rc) {
        *r = rr->valueint;
        const double a = la ? la->valuedouble : 8.0; /* PEFT's default lora_alpha */
        const bool rs = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_rslora"));
        *alpha = (float)(rs ? a * sqrt((double)*r) : a); /* scale = alpha / r */
        if (!(*alpha > -1e30f && *alpha < 1e30f) || *alpha == 0.0f)
            rc =
                err_set(err, KVI_E_FORMAT, "lora: adapter_config.json: lora_alpha must be a non-zero number");
    }
    cJSON_Delete(c);
    return rc;
}

/* A safetensors tensor as a 2-D gguf_tensor (ne {cols, rows}) */
static int as_gguf(const st_tensor *t, gguf_tensor *g, kvi_error *err)
{
    if (t->n_dims != 2 || !t->is_float)
        return err_set(err, KVI_E_FORMAT, "lora: tensor '%s': want a 2-D F32, F16 or BF16 matrix", t->name);
    memset(g, 0, sizeof *g);
    g->name = t->name;
    g->n_dims = 2;
    g->ne[0] = t->shape[1];
    g->ne[1] = t->shape[0];
    g->ne[2] = g->ne[3] = 1;
    g->type = t->type;
    g->nbytes = t->nbytes;
    g->data = t->data;
    return 0;
}

int lora_load_peft(const struct kvi_model *m, const char *dir, struct kvi_lora **out, kvi_error *err)
{
    *out = NULL;
    float alpha = 0.0f;
    int r = 0, rc = peft_config(dir, &alpha, &r, err);
    if (rc) return rc;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir) >= (int)sizeof path)
        return err_set(err, KVI_E_INVALID, "lora: folder name too long");
    char *buf = NULL;
    size_t len = 0;
    const file_status fs = file_read_all(path, PEFT_MAX_FILE, &buf, &len);
    if (fs != FILE_OK)
        return err_set(err, fs == FILE_NOMEM ? KVI_E_NOMEM : KVI_E_IO,
                       "lora: cannot read %s (adapter_model.bin is not read: convert it to safetensors)",
                       path);
    st_index *ix = NULL;
    if ((rc = st_parse(buf, len, &ix, err))) {
        free(buf);
        return rc;
    }
    /* the q / k B copies go after the file's bytes in one owned buffer */
    const bool perm = !m->rope_neox;
    size_t extra = 0;
    for (size_t i = 0; perm && i < ix->n_tensors; i++) {
        int l;
        lora_mat w;
        bool is_a;
        if (peft_name(ix->tensors[i].name, m->n_layers, &l, &w, &is_a) && !is_a &&
            (w == LORA_WQ || w == LORA_WK))
            extra += (ix->tensors[i].nbytes + 63) & ~(size_t)63;
    }
    struct kvi_lora *a = lora_alloc(m, dir);
    uint8_t *own = a ? malloc(len + extra + 64) : NULL;
    if (!a || !own) {
        free(own);
        if (a) lora_free(a);
        st_free(ix);
        free(buf);
        return err_set(err, KVI_E_NOMEM, "lora: out of memory");
    }
    /* re-point the index into the owned copy (same offsets) */
    memcpy(own, buf, len);
    for (size_t i = 0; i < ix->n_tensors; i++)
        ix->tensors[i].data = own + ((const char *)ix->tensors[i].data - buf);
    free(buf);
    a->own = own;
    a->alpha = alpha;
    size_t at = (len + 63) & ~(size_t)63;
    for (size_t i = 0; !rc && i < ix->n_tensors; i++) {
        const st_tensor *t = &ix->tensors[i];
        int l;
        lora_mat w;
        bool is_a;
        if (!peft_name(t->name, m->n_layers, &l, &w, &is_a)) {
            rc = err_set(
                err, KVI_E_UNSUPPORTED,
                "lora: tensor '%s' adapts no matrix kvinfer adapts (layers.N.{self_attn.{q,k,v,o}_proj,"
                "mlp.{gate,up,down}_proj}.lora_{A,B}.weight)",
                t->name);
            break;
        }
        if (!is_a) continue; /* bound from its A */
        char other[512];
        const size_t nl = strlen(t->name);
        const char *ap = strstr(t->name, ".lora_A");
        if (nl >= sizeof other || !ap) {
            rc = err_set(err, KVI_E_FORMAT, "lora: tensor name '%s' too long", t->name);
            break;
        }
        memcpy(other, t->name, nl + 1);
        other[ap - t->name + 6] = 'B';
        const st_tensor *tb = st_find(ix, other);
        if (!tb) {
            rc = err_set(err, KVI_E_FORMAT, "lora: tensor '%s' has no %s", t->name, other);
            break;
        }
        if (a->pairs[(size_t)l * LORA_N_MAT + w].a.data) {
            rc = err_set(err, KVI_E_FORMAT, "lora: two adapters of layer %d's %s in the folder", l,
                         lora_mat_name(w));
            break;
        }
        gguf_tensor ga, gb;
        if ((rc = as_gguf(t, &ga, err)) || (rc = as_gguf(tb, &gb, err))) break;
        if (ga.ne[1] != r || gb.ne[0] != r) {
            rc = err_set(err, KVI_E_FORMAT, "lora: tensor '%s': rank %lld, adapter_config.json says %d",
                         t->name, (long long)ga.ne[1], r);
            break;
        }
        if (perm && (w == LORA_WQ || w == LORA_WK)) {
            const int64_t hd = m->head_dim;
            if (hd < 2 || hd % 2 || gb.ne[1] % hd) {
                rc = err_set(err, KVI_E_FORMAT, "lora: tensor '%s': %lld rows are not whole heads of %lld",
                             tb->name, (long long)gb.ne[1], (long long)hd);
                break;
            }
            rope_interleave_rows(own + at, gb.data, gb.ne[1], hd, tb->nbytes / (size_t)gb.ne[1]);
            gb.data = own + at;
            at += (tb->nbytes + 63) & ~(size_t)63;
        }
        rc = lora_bind_pair(a, l, w, &ga, &gb, err);
    }
    st_free(ix);
    if (!rc && a->n_pairs == 0) rc = err_set(err, KVI_E_FORMAT, "lora: the PEFT adapter adapts no matrix");
    if (rc) {
        lora_free(a);
        return rc;
    }
    *out = a;
    return 0;
}
