/*
 * test_neox.c — the NeoX ("rotate-half") RoPE path, as qwen2 uses it.
 *
 * TinyStories-656K is a Hugging Face Llama whose q/k rows are in rotate-half
 * order. Loaded as "llama", kvinfer permutes them to interleaved pairs; declared
 * as Qwen2ForCausalLM (same weights, no biases), nothing is permuted and the
 * NeoX rotation is used instead. Both must reproduce llama2.c's logits
 * (../shared/golden/tinystories656K), which checks the NeoX path against an
 * independent implementation.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void)
{
    const char *dir = tmp_path("qwen2_tinystories");
    mkdir(dir, 0755);
    char path[4096], target[4096];
    const char *links[] = { "model.safetensors", "tokenizer.json", "tokenizer_config.json" };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, links[i]);
        snprintf(target, sizeof target, "%s/models/TinyStories-656K/%s", KVI_SHARED_DIR, links[i]);
        unlink(path);
        CHECK(symlink(target, path) == 0, "symlink %s", path);
    }
    size_t len;
    char *cfg = read_file(shared_path("models/TinyStories-656K/config.json"), &len);
    CHECK(cfg != NULL, "config.json");
    if (!cfg) return test_main_end();
    cJSON *j = cJSON_Parse(cfg);
    free(cfg);
    cJSON_ReplaceItemInObject(j, "architectures",
                              cJSON_CreateStringArray((const char *[]){ "Qwen2ForCausalLM" }, 1));
    cJSON_ReplaceItemInObject(j, "model_type", cJSON_CreateString("qwen2"));
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(write_file(path, out, strlen(out)) == 0, "write config");
    free(out);

    kvi_error err = { 0 };
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_model *m = kvi_model_load(dir, &lp, &err);
    CHECK(m != NULL, "load as qwen2: %s", err.msg);
    if (!m) return test_main_end();
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    CHECK(strcmp(info.arch, "qwen2") == 0, "arch %s", info.arch);

    cJSON *g = load_json(shared_path("golden/tinystories656K/case1.json"));
    const cJSON *pt = cJSON_GetObjectItem(g, "prompt_tokens");
    const cJSON *pl = cJSON_GetObjectItem(g, "prompt_logits");
    const int n = cJSON_GetArraySize(pt), nv = kvi_n_vocab(m);
    kvi_engine_params ep;
    kvi_engine_params_default(&ep);
    ep.kv_type_k = ep.kv_type_v = KVI_TYPE_F32;
    ep.n_threads = 2;
    kvi_engine *e = kvi_engine_create(m, &ep, &err);
    CHECK(e != NULL, "%s", err.msg);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    for (int i = 0; i < n; i++) kvi_batch_add(b, s, (int32_t)cJSON_GetArrayItem(pt, i)->valuedouble, i, true);
    CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
    double md = 0;
    for (int i = 0; i < n; i++) {
        const float *lg = kvi_logits(e, i);
        const cJSON *r = cJSON_GetArrayItem(pl, i);
        for (int k = 0; k < nv; k++) md = fmax(md, fabs(lg[k] - cJSON_GetArrayItem(r, k)->valuedouble));
    }
    CHECK(md <= 5e-4, "neox path: max abs diff %g vs llama2.c", md);
    printf("qwen2/neox on TinyStories-656K: max abs diff %.3g\n", md);
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    kvi_model_free(m);
    cJSON_Delete(g);
    return test_main_end();
}
