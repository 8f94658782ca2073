/*
 * test_golden.c — kvinfer's forward pass against independent implementations.
 *
 *  - ../shared/golden/stories260K, aidreams260K (llama2.c, fp32): prompt ids exact,
 *    logits at every prompt position within 5e-4, greedy continuation exact,
 *    from the GGUF and from the llama2.c checkpoint, with an f32 KV cache;
 *  - ../shared/golden/tinystories656K (llama2.c on the Hugging Face weights):
 *    same checks from the Hugging Face folder, prompt ids taken as given;
 *  - ../shared/golden/quant (llama.cpp): logits of the synthetic model in every
 *    weight type within the relative-error tolerances of golden/README.md.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int32_t *json_ids(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *v);
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

static kvi_engine *make_engine(kvi_model *m, kvi_type kv, int n_ctx, int threads)
{
    const kvi_engine_params p = engine_params(kv, threads, 0, n_ctx);
    return engine_create_checked(m, &p);
}

/* Prefill the prompt in one step, compare logits at every position, then decode
 * greedily and compare the continuation. */
static void check_case(kvi_model *m, const char *case_path, bool check_prompt_ids, const char *label)
{
    cJSON *j = load_json(case_path);
    CHECK(j != NULL, "%s: cannot read %s", label, case_path);
    if (!j) return;
    int n_prompt, n_greedy;
    int32_t *prompt = json_ids(cJSON_GetObjectItem(j, "prompt_tokens"), &n_prompt);
    int32_t *greedy = json_ids(cJSON_GetObjectItem(j, "greedy_tokens"), &n_greedy);
    const cJSON *plog = cJSON_GetObjectItem(j, "prompt_logits");
    const char *text = cJSON_GetObjectItem(j, "prompt")->valuestring;

    if (check_prompt_ids) {
        int32_t ids[512];
        int32_t n = kvi_tokenize(m, text, strlen(text), true, false, ids, 512);
        bool same = n == n_prompt;
        for (int i = 0; same && i < n; i++) same = ids[i] == prompt[i];
        CHECK(same, "%s: prompt ids differ (got %d tokens, want %d)", label, n, n_prompt);
    }

    kvi_engine *e = make_engine(m, KVI_TYPE_F32, 0, 2);
    if (!e) goto done;
    const int nv = kvi_n_vocab(m);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n_prompt + 1);
    for (int i = 0; i < n_prompt; i++) kvi_batch_add(b, s, prompt[i], i, true);
    kvi_error err = { 0 };
    int rc = kvi_step(e, b, &err);
    CHECK(rc == 0, "%s: prefill: %s", label, err.msg);
    double maxdiff = 0;
    for (int i = 0; rc == 0 && i < n_prompt; i++) {
        const float *lg = kvi_logits(e, i);
        const cJSON *ref = cJSON_GetArrayItem(plog, i);
        CHECK(cJSON_GetArraySize(ref) == nv, "%s: golden vocab %d vs %d", label, cJSON_GetArraySize(ref), nv);
        for (int k = 0; k < nv; k++) {
            double d = fabs(lg[k] - cJSON_GetArrayItem(ref, k)->valuedouble);
            if (d > maxdiff) maxdiff = d;
        }
    }
    CHECK(maxdiff <= 5e-4, "%s: prompt logits max abs diff %g > 5e-4", label, maxdiff);
    printf("%s: prompt logits max abs diff %.3g\n", label, maxdiff);

    /* greedy continuation, one row per step */
    int32_t tok = 0;
    {
        const float *lg = kvi_logits(e, n_prompt - 1);
        for (int k = 1; k < nv; k++)
            if (lg[k] > lg[tok]) tok = k;
    }
    int match = 0, pos = n_prompt;
    const int n_ctx = kvi_engine_n_ctx(e);
    for (int g = 0; g < n_greedy && pos < n_ctx; g++) {
        if (tok != greedy[g]) break;
        match++;
        if (tok == 2) break; /* EOS: the golden continuation goes on past it; stop comparing */
        kvi_batch_clear(b);
        kvi_batch_add(b, s, tok, pos++, true);
        if (kvi_step(e, b, &err) != 0) break;
        const float *lg = kvi_logits(e, 0);
        tok = 0;
        for (int k = 1; k < nv; k++)
            if (lg[k] > lg[tok]) tok = k;
    }
    const int want = n_greedy;
    bool stopped_at_eos = match > 0 && greedy[match - 1] == 2;
    CHECK(match == want || stopped_at_eos, "%s: greedy continuation matches %d of %d tokens", label, match,
          want);
    printf("%s: greedy tokens matching: %d of %d\n", label, match, want);
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
done:
    free(prompt);
    free(greedy);
    cJSON_Delete(j);
}

/* repack false: the file's layout kept (kvi_load_params.repack). */
static kvi_model *load_as(const char *rel, bool repack)
{
    kvi_error err = { 0 };
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.repack = repack;
    kvi_model *m = kvi_model_load(shared_path(rel), &lp, &err);
    CHECK(m != NULL, "load %s: %s", rel, err.msg);
    return m;
}

static kvi_model *load(const char *rel) { return load_as(rel, true); }

/* The logits of one prefill of toks[0..n) on m: [n][n_vocab], malloc'd; NULL on error. */
static float *prefill_logits(kvi_model *m, const int32_t *toks, int n, const char *what)
{
    kvi_engine *e = make_engine(m, KVI_TYPE_F32, 0, 2);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    for (int i = 0; i < n; i++) kvi_batch_add(b, s, toks[i], i, true);
    kvi_error err = { 0 };
    const int rc = kvi_step(e, b, &err);
    CHECK(rc == 0, "%s: %s", what, err.msg);
    const size_t nv = (size_t)kvi_n_vocab(m);
    float *out = rc == 0 ? malloc((size_t)n * nv * sizeof(float)) : NULL;
    for (int i = 0; out && i < n; i++) memcpy(out + (size_t)i * nv, kvi_logits(e, i), nv * sizeof(float));
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    return out;
}

static void check_quant(const char *type)
{
    char rel[256], grel[256];
    snprintf(rel, sizeof rel, "golden/quant/qtest-%s.gguf", type);
    snprintf(grel, sizeof grel, "golden/quant/qtest-%s.logits.json", type);
    kvi_model *m = load(rel);
    cJSON *j = load_json(shared_path(grel));
    CHECK(j != NULL, "read %s", grel);
    if (!m || !j) {
        kvi_model_free(m);
        cJSON_Delete(j);
        return;
    }
    int n;
    int32_t *toks = json_ids(cJSON_GetObjectItem(j, "tokens"), &n);
    const cJSON *ref = cJSON_GetObjectItem(j, "logits");
    const int nv = kvi_n_vocab(m);
    float *all = prefill_logits(m, toks, n, rel);
    /* the kernels' own layouts (R16) give the bits of the file's layout */
    kvi_model *plain = load_as(rel, false);
    float *all_plain = plain ? prefill_logits(plain, toks, n, rel) : NULL;
    CHECK(all && all_plain && memcmp(all, all_plain, (size_t)n * (size_t)nv * sizeof(float)) == 0,
          "qtest-%s: logits with the weights repacked differ from the file's layout", type);
    free(all_plain);
    kvi_model_free(plain);
    double num = 0, den = 0;
    for (int i = 0; all && i < n; i++) {
        const float *lg = all + (size_t)i * (size_t)nv;
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        for (int k = 0; k < nv; k++) {
            const double bv = cJSON_GetArrayItem(r, k)->valuedouble;
            num += (lg[k] - bv) * (lg[k] - bv);
            den += bv * bv;
        }
    }
    const double rel_err = sqrt(num / den);
    double tol = 0.03;
    if (!strcmp(type, "f32"))
        tol = 0.002;
    else if (!strcmp(type, "f16") || !strcmp(type, "bf16"))
        tol = 0.01;
    else if (strstr("iq1_s iq1_m tq1_0 tq2_0 nvfp4", type)) /* README-lowbit.md */
        tol = 0.06;
    CHECK(rel_err < tol, "qtest-%s: relative error %.4g >= %.3g", type, rel_err, tol);
    printf("qtest-%-6s relative error vs llama.cpp %.5f (tolerance %.3f)\n", type, rel_err, tol);
    free(all);
    free(toks);
    kvi_model_free(m);
    cJSON_Delete(j);
}

int main(void)
{
    const char *cases[] = { "golden/stories260K/case1.json", "golden/stories260K/case2.json",
                            "golden/stories260K/case3.json", "golden/stories260K/case4.json" };
    kvi_model *m = load("models/stories260K.gguf");
    if (m) {
        for (int i = 0; i < 4; i++) check_case(m, shared_path(cases[i]), true, cases[i] + 7);
        kvi_model_free(m);
    }
    m = load("models/stories260K.bin");
    if (m) {
        for (int i = 0; i < 4; i++) check_case(m, shared_path(cases[i]), true, "stories260K.bin");
        kvi_model_free(m);
    }
    m = load("models/aidreams260K/aidreams260K.bin");
    if (m) {
        check_case(m, shared_path("golden/aidreams260K/case1.json"), true, "aidreams260K");
        kvi_model_free(m);
    }
    m = load("models/TinyStories-656K");
    if (m) {
        check_case(m, shared_path("golden/tinystories656K/case1.json"), false, "tinystories656K case1");
        check_case(m, shared_path("golden/tinystories656K/case2.json"), false, "tinystories656K case2");
        kvi_model_free(m);
    }
    const char *types[] = { "f32",  "f16",  "bf16", "q8_0", "q4_0",   "q4_1",   "q5_0",   "q5_1", "q2_k",
                            "q3_k", "q4_k", "q5_k", "q6_k", "q4_k_m", "iq4_nl", "iq4_xs", "mxfp4",
                            "iq1_s", "iq1_m", "tq1_0", "tq2_0", "nvfp4" };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) check_quant(types[i]);
    return test_main_end();
}
