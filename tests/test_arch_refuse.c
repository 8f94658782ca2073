/*
 * test_arch_refuse.c — what the architecture loader (model/model_gguf.c) refuses
 * and what it leaves unread, on copies of the golden files of ../shared/golden/arch
 * edited with the project's GGUF writer:
 *  - an unknown architecture, a tensor the architecture cannot use, a missing
 *    q/k norm, an unknown RoPE scaling type, value_length != key_length: each a
 *    one-line error naming it;
 *  - a multimodal Gemma 3's vision tensors (v.*, mm.*): left unread and counted,
 *    the text model's logits bit-identical to the plain file's;
 *  - a Qwen3.5 with a multi-token-prediction block: left unread the same way; an
 *    older converter's ssm_in and an inconsistent ssm.inner_size refused.
 */
#include "testutil.h"

#include "formats/gguf.h"
#include "formats/quant.h"
#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

typedef struct edit {
    const char *set_key, *set_str; /* a string key to set (or replace) */
    const char *set_u32_key;       /* a u32 key to set */
    uint32_t set_u32;
    const char *drop_tensor;  /* a tensor left out */
    const char *extra[2];     /* extra F32 tensors [64] */
    const char *set_u32_key2; /* a second u32 key to set */
    uint32_t set_u32b;
    int dup_from, dup_to; /* dup_to > 0: blk.<dup_from>.* copied as blk.<dup_to>.* */
} edit;

/* src (a golden file) with the edit, written to tmp_path(name) */
static const char *write_copy(const char *src_rel, const char *name, const edit *e)
{
    kvi_error err = { 0 };
    gguf_ctx *src = NULL;
    if (gguf_open(shared_path(src_rel), false, &src, &err)) {
        CHECK(0, "open %s: %s", src_rel, err.msg);
        return NULL;
    }
    gguf_writer *w = gguf_writer_create();
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < gguf_n_kv(src); i++) {
        const char *key = gguf_kv_key(src, i);
        if ((e->set_key && !strcmp(key, e->set_key)) || (e->set_u32_key && !strcmp(key, e->set_u32_key)) ||
            (e->set_u32_key2 && !strcmp(key, e->set_u32_key2)))
            continue;
        rc = gguf_writer_copy_kv(w, src, key);
    }
    if (rc == 0 && e->set_key) rc = gguf_writer_set_str(w, e->set_key, e->set_str);
    if (rc == 0 && e->set_u32_key) rc = gguf_writer_set_u32(w, e->set_u32_key, e->set_u32);
    if (rc == 0 && e->set_u32_key2) rc = gguf_writer_set_u32(w, e->set_u32_key2, e->set_u32b);
    const int64_t nt = gguf_n_tensors(src);
    const void **data = calloc(2 * (size_t)nt + 2, sizeof *data);
    static float extra_data[64];
    for (int i = 0; i < 64; i++) extra_data[i] = 0.25f * (float)(i % 7) - 0.5f;
    int64_t n = 0;
    for (int64_t i = 0; rc == 0 && i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) continue;
        data[n++] = t->data;
        rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    char pre[32], dup[96];
    snprintf(pre, sizeof pre, "blk.%d.", e->dup_from);
    for (int64_t i = 0; rc == 0 && e->dup_to > 0 && i < nt; i++) { /* a copy of block dup_from */
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (strncmp(t->name, pre, strlen(pre)) != 0) continue;
        snprintf(dup, sizeof dup, "blk.%d.%s", e->dup_to, t->name + strlen(pre));
        data[n++] = t->data;
        rc = gguf_writer_add_tensor(w, dup, t->type, t->n_dims, t->ne);
    }
    for (int k = 0; rc == 0 && k < 2 && e->extra[k]; k++) {
        const int64_t ne[1] = { 64 };
        data[n++] = extra_data;
        rc = gguf_writer_add_tensor(w, e->extra[k], KVI_TYPE_F32, 1, ne);
    }
    const char *path = tmp_path(name);
    FILE *f = rc == 0 ? fopen(path, "wb") : NULL;
    if (f) rc = gguf_writer_write_header(w, f, &err);
    for (int64_t i = 0; f && rc == 0 && i < n; i++) rc = gguf_writer_write_tensor(w, f, i, data[i], &err);
    if (f && fclose(f) != 0) rc = -1;
    CHECK(f && rc == 0, "%s: writing the copy failed: %s", name, err.msg);
    free(data);
    gguf_writer_free(w);
    gguf_close(src);
    return f && rc == 0 ? path : NULL;
}

/* loading path fails with an error that contains want */
static void refused(const char *path, const char *want, const char *what)
{
    if (!path) return;
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(path, NULL, &err);
    CHECK(m == NULL, "%s: loaded", what);
    CHECK(strstr(err.msg, want) != NULL, "%s: error '%s' does not name '%s'", what, err.msg, want);
    CHECK(strchr(err.msg, '\n') == NULL, "%s: error is not one line", what);
    printf("%-28s -> %s\n", what, err.msg);
    kvi_model_free(m);
}

/* logits of tokens 1, 5, 9 (all rows) */
static float *logits3(kvi_model *m)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 1, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    const int nv = kvi_n_vocab(m);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(3);
    const int32_t toks[3] = { 1, 5, 9 };
    for (int i = 0; i < 3; i++) kvi_batch_add(b, s, toks[i], i, true);
    kvi_error err = { 0 };
    float *out = malloc(3 * (size_t)nv * sizeof *out);
    CHECK(kvi_step(e, b, &err) == 0, "step: %s", err.msg);
    for (int i = 0; i < 3; i++) memcpy(out + (size_t)i * nv, kvi_logits(e, i), (size_t)nv * sizeof *out);
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    return out;
}

/* Hybrids (qwen35): a trailing multi-token-prediction block (nextn_predict_layers 1,
 * counted in block_count) is left unread with the logits unchanged; an older
 * converter's fused ssm_in, and a file without the ssm keys, are refused. */
static void check_hybrid_files(void)
{
    const char *mtp = write_copy("golden/arch/qwen35-f32.gguf", "arch_qwen35_mtp.gguf",
                                 &(edit){ .set_u32_key = "qwen35.block_count",
                                          .set_u32 = 9,
                                          .set_u32_key2 = "qwen35.nextn_predict_layers",
                                          .set_u32b = 1,
                                          .dup_from = 7,
                                          .dup_to = 8 });
    kvi_error err = { 0 };
    kvi_model *a = mtp ? kvi_model_load(mtp, NULL, &err) : NULL;
    CHECK(a != NULL, "qwen35 with an MTP block: %s", err.msg);
    kvi_model *b = kvi_model_load(shared_path("golden/arch/qwen35-f32.gguf"), NULL, &err);
    CHECK(b != NULL, "qwen35: %s", err.msg);
    if (a && b) {
        kvi_model_info ia;
        kvi_model_get_info(a, &ia);
        /* blk.7 is an attention layer: attn_norm, q, k, v, q/k norms, output,
         * post_attention_norm, ffn gate/up/down = 11 tensors */
        CHECK(ia.n_layers == 8 && ia.n_unread_tensors == 11, "MTP block: %d layers, %d tensors unread",
              ia.n_layers, ia.n_unread_tensors);
        float *la = logits3(a), *lb = logits3(b);
        CHECK(la && lb && memcmp(la, lb, 3 * (size_t)kvi_n_vocab(a) * sizeof *la) == 0,
              "qwen35 with an MTP block: logits differ");
        free(la);
        free(lb);
    }
    kvi_model_free(a);
    kvi_model_free(b);
    refused(write_copy("golden/arch/qwen35-f32.gguf", "arch_qwen35_ssm_in.gguf",
                       &(edit){ .extra = { "blk.0.ssm_in.weight" } }),
            "ssm_in", "an older converter's ssm_in");
    refused(write_copy("golden/arch/qwen35-f32.gguf", "arch_qwen35_nokeys.gguf",
                       &(edit){ .set_u32_key = "qwen35.ssm.inner_size", .set_u32 = 100 }),
            "inner_size", "ssm inner_size != value heads x head dim");
}

int main(void)
{
    check_hybrid_files();
    refused(write_copy("golden/arch/qwen3-f32.gguf", "arch_unknown.gguf",
                       &(edit){ .set_key = "general.architecture", .set_str = "mamba" }),
            "architecture 'mamba' is not supported", "unknown architecture");
    refused(write_copy("golden/arch/qwen3-f32.gguf", "arch_extra.gguf",
                       &(edit){ .extra = { "blk.0.ffn_gate_inp.weight" } }),
            "blk.0.ffn_gate_inp.weight", "a tensor qwen3 cannot use");
    refused(write_copy("golden/arch/qwen3-f32.gguf", "arch_no_knorm.gguf",
                       &(edit){ .drop_tensor = "blk.1.attn_k_norm.weight" }),
            "blk.1.attn_k_norm.weight", "a missing k norm");
    refused(write_copy("golden/arch/gemma3-f32.gguf", "arch_rope_type.gguf",
                       &(edit){ .set_key = "gemma3.rope.scaling.type", .set_str = "dynamic" }),
            "dynamic", "an unknown RoPE scaling");
    refused(write_copy("golden/arch/qwen3-f32.gguf", "arch_vlen.gguf",
                       &(edit){ .set_u32_key = "qwen3.attention.value_length", .set_u32 = 32 }),
            "value_length", "value_length != key_length");
    refused(write_copy("golden/arch/qwen3-f32.gguf", "arch_visionq.gguf",
                       &(edit){ .extra = { "v.patch_embd.weight" } }),
            "v.patch_embd.weight", "vision tensors on qwen3");

    /* a Gemma 3 with a vision part: the text model runs, the vision tensors unread */
    const char *mm = write_copy("golden/arch/gemma3-f32.gguf", "arch_gemma3_mm.gguf",
                                &(edit){ .extra = { "v.patch_embd.weight", "mm.input_projection.weight" } });
    kvi_error err = { 0 };
    kvi_model *a = mm ? kvi_model_load(mm, NULL, &err) : NULL;
    CHECK(a != NULL, "gemma3 with vision tensors: %s", err.msg);
    kvi_model *b = kvi_model_load(shared_path("golden/arch/gemma3-f32.gguf"), NULL, &err);
    CHECK(b != NULL, "gemma3: %s", err.msg);
    if (a && b) {
        kvi_model_info ia, ib;
        kvi_model_get_info(a, &ia);
        kvi_model_get_info(b, &ib);
        CHECK(ia.n_unread_tensors == 2 && ib.n_unread_tensors == 0, "unread tensors %d / %d",
              ia.n_unread_tensors, ib.n_unread_tensors);
        float *la = logits3(a), *lb = logits3(b);
        CHECK(la && lb && memcmp(la, lb, 3 * (size_t)kvi_n_vocab(a) * sizeof *la) == 0,
              "gemma3 with vision tensors: logits differ");
        free(la);
        free(lb);
    }
    kvi_model_free(a);
    kvi_model_free(b);
    return test_main_end();
}
