/*
 * test_lora_peft.c — Hugging Face PEFT adapter folders (model/lora_peft.c).
 * Each golden GGUF adapter of ../shared/golden/lora is written back as the PEFT folder
 * it comes from (adapter_config.json with r and lora_alpha, adapter_model.safetensors
 * with base_model.model.model.layers.L.{self_attn,mlp}.X_proj.lora_{A,B}.weight in
 * torch order; for a model whose RoPE is not NeoX, q_proj / k_proj B rows put back in
 * Hugging Face's rotate-half order, undoing llama.cpp's converter's interleave). Loaded
 * as a folder, the adapter must give, bit for bit, the logits of the GGUF file (prefill
 * and token-by-token decode), and those logits must match llama.cpp's golden:
 *  - qwen3 (NeoX RoPE), all seven matrices, rank 8: qwen3.B-f32.s1;
 *  - llama-moe (llama: interleaved q / k rows), attention, rank 4: llama-moe.A-f32.s1.
 * Refused with an error naming the feature: DoRA, modules_to_save, a missing config.
 */
#include "testutil.h"

#include "formats/gguf.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const gguf_mats[7] = { "attn_q",   "attn_k", "attn_v",  "attn_output",
                                          "ffn_gate", "ffn_up", "ffn_down" };
static const char *const hf_mats[7] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                        "mlp.down_proj" };

/* dst rows in rotate-half order from interleaved src (each head of hd rows: old 2i -> i,
 * old 2i + 1 -> i + hd / 2) */
static void deinterleave(uint8_t *dst, const uint8_t *src, int64_t n_rows, int64_t hd, size_t row)
{
    for (int64_t h = 0; h < n_rows / hd; h++)
        for (int64_t i = 0; i < hd / 2; i++) {
            memcpy(dst + (size_t)(h * hd + i) * row, src + (size_t)(h * hd + 2 * i) * row, row);
            memcpy(dst + (size_t)(h * hd + i + hd / 2) * row, src + (size_t)(h * hd + 2 * i + 1) * row, row);
        }
}

/* Writes dir/adapter_config.json and dir/adapter_model.safetensors from GGUF adapter
 * gguf_rel (F32 tensors), q / k B rows de-interleaved by head_dim hd when hd > 0;
 * extra: more config fields (JSON members, "" for none). */
static bool write_peft(const char *gguf_rel, const char *dir, int hd, const char *extra)
{
    gguf_ctx *g = NULL;
    kvi_error err = { 0 };
    if (gguf_open(shared_path(gguf_rel), false, &g, &err)) return false;
    double alpha = 0;
    gguf_get_float(g, "adapter.lora.alpha", &alpha, &err);
    cJSON *hdr = cJSON_CreateObject();
    size_t off = 0, cap = 0;
    uint8_t *data = NULL;
    int rank = 0;
    bool ok = true;
    for (int64_t i = 0; ok && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int l, w = -1;
        char mat[32], ab;
        if (sscanf(t->name, "blk.%d.%31[a-z_].weight.lora_%c", &l, mat, &ab) != 3) continue;
        for (int k = 0; k < 7; k++)
            if (!strcmp(mat, gguf_mats[k])) w = k;
        ok = w >= 0 && t->type == KVI_TYPE_F32;
        if (!ok) break;
        if (ab == 'b') rank = (int)t->ne[0];
        if (off + t->nbytes > cap) {
            cap = 2 * (off + t->nbytes);
            data = realloc(data, cap);
        }
        if (ab == 'b' && hd > 0 && w <= 1)
            deinterleave(data + off, t->data, t->ne[1], hd, (size_t)t->ne[0] * sizeof(float));
        else
            memcpy(data + off, t->data, t->nbytes);
        char name[160];
        snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight", l, hf_mats[w],
                 ab == 'a' ? 'A' : 'B');
        cJSON *e = cJSON_AddObjectToObject(hdr, name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->ne[1]));
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->ne[0]));
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + t->nbytes)));
        off += t->nbytes;
    }
    gguf_close(g);
    char path[1024], *h = cJSON_PrintUnformatted(hdr);
    cJSON_Delete(hdr);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    FILE *f = ok && h ? fopen(path, "wb") : NULL;
    if (f) {
        const uint64_t hl = strlen(h);
        ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(h, 1, hl, f) == hl && fwrite(data, 1, off, f) == off;
        ok &= fclose(f) == 0;
    } else {
        ok = false;
    }
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    f = ok ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "{\"peft_type\": \"LORA\", \"r\": %d, \"lora_alpha\": %g, \"bias\": \"none\"%s%s}\n", rank,
                alpha != 0 ? alpha : (double)rank, extra[0] ? ", " : "", extra);
        ok &= fclose(f) == 0;
    }
    free(h);
    free(data);
    return ok && rank > 0;
}

/* The logits of the golden's tokens with adapter `ad` (file or folder) at scale 1 */
static float *adapted(kvi_model *m, const char *ad, const int32_t *toks, int n, bool decode)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 1, 64);
    kvi_engine *e = engine_create_checked(m, &p);
    kvi_error err = { 0 };
    const int id = e ? kvi_engine_lora_load(e, ad, 1.0f, &err) : -1;
    CHECK(id == 0, "load %s: %s", ad, err.msg);
    float *lg = id == 0 ? seq_logits(e, toks, n, decode) : NULL;
    kvi_engine_free(e);
    return lg;
}

/* neox: whether the model's RoPE is NeoX (no q / k interleave to undo) */
static void check_one(const char *model, const char *gguf_rel, const char *golden, bool neox)
{
    char dir[512], gj[256];
    kvi_model *m = NULL;
    cJSON *j = NULL;
    char an[64];
    snprintf(an, sizeof an, "%s-f32", model);
    if (!load_arch_golden(an, &m, &j)) return;
    cJSON_Delete(j);
    CHECK(m->rope_neox == neox, "%s: RoPE %s expected", model, neox ? "NeoX" : "interleaved");
    const int hd = neox ? 0 : m->head_dim;
    snprintf(dir, sizeof dir, "%s", tmp_path(model));
    CHECK(write_peft(gguf_rel, dir, hd, ""), "%s: cannot write the PEFT folder", model);
    snprintf(gj, sizeof gj, "golden/lora/%s.logits.json", golden);
    cJSON *ref = load_json(shared_path(gj));
    int32_t toks[64];
    const int n = json_token_ids(cJSON_GetObjectItem(ref, "tokens"), toks, 64);
    const int nv = kvi_n_vocab(m);
    float *want = adapted(m, shared_path(gguf_rel), toks, n, false);
    float *pre = adapted(m, dir, toks, n, false), *dec = adapted(m, dir, toks, n, true);
    CHECK(want && pre && !memcmp(want, pre, (size_t)n * nv * sizeof *pre),
          "%s: the PEFT folder's logits differ from the GGUF adapter's", model);
    CHECK(pre && dec && !memcmp(pre, dec, (size_t)n * nv * sizeof *pre),
          "%s: PEFT decode differs from prefill", model);
    if (pre) {
        const double e = golden_rel_err(golden, pre, cJSON_GetObjectItem(ref, "logits"), n, nv);
        CHECK(e < 0.002, "%s: PEFT folder vs llama.cpp %.4g", golden, e);
        printf("%-22s PEFT folder: == GGUF adapter bit for bit, vs llama.cpp %.6f (tolerance 0.002)\n",
               golden, e);
    }
    /* refusals name the feature */
    static const char *const bad[][2] = { { "\"use_dora\": true", "DoRA" },
                                          { "\"modules_to_save\": [\"lm_head\"]", "modules_to_save" } };
    for (int b = 0; b < 2; b++) {
        char d2[600];
        snprintf(d2, sizeof d2, "%s-bad%d", dir, b);
        CHECK(write_peft(gguf_rel, d2, hd, bad[b][0]), "cannot write %s", d2);
        kvi_error err = { 0 };
        kvi_lora *a = kvi_lora_load(m, d2, &err);
        CHECK(!a && strstr(err.msg, bad[b][1]), "%s: %s refused naming it: '%s'", model, bad[b][1], err.msg);
        kvi_lora_free(a);
    }
    kvi_error err = { 0 };
    kvi_lora *a = kvi_lora_load(m, tmp_path(""), &err);
    CHECK(!a && strstr(err.msg, "adapter_config.json"), "a folder without a config: '%s'", err.msg);
    kvi_lora_free(a);
    free(want), free(pre), free(dec);
    cJSON_Delete(ref);
    kvi_model_free(m);
}

int main(void)
{
    check_one("qwen3", "golden/lora/qwen3-lora-all-r8-f32.gguf", "qwen3.B-f32.s1", true);
    check_one("llama-moe", "golden/lora/llama-moe-lora-attn-r4-f32.gguf", "llama-moe.A-f32.s1", false);
    return test_main_end();
}
