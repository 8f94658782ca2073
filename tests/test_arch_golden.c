/*
 * test_arch_golden.c — every architecture (dense and mixture-of-experts) against llama.cpp
 * (../shared/golden/arch, README there): for each file, the logits of all 48
 * positions in one prefill step within the README's relative-error tolerance
 * (F32 < 0.002, quantised < 0.03), and the invariants on the same model:
 *  1. prefill == token-by-token decode (bit for bit),
 *  2. batched decode (two sequences in one step, one of them offset) == alone,
 * and with a small KV block (4 positions: windows of 8 span blocks; the online
 * softmax then rescales at other points, so only within the tolerance).
 * gpt-oss also as published, its experts in MXFP4 (gpt-oss-mxfp4, tolerance 0.03).
 * Sliding-window models (gemma2, gemma3, gpt-oss) also over 400 positions, long enough
 * that decode releases window parts (kv_cache.h): token-by-token decode gives the
 * bits of one prefill step, and the KV bytes held stay far below a full cache.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int32_t *json_ids(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = calloc((size_t)(*n > 0 ? *n : 1), sizeof *v);
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

/* logits of every position [n][nv]: one prefill step (decode: one row per step) */
static float *run_seq_kv(kvi_model *m, const int32_t *toks, int n, bool decode, int block, kvi_type kv)
{
    kvi_engine_params p = engine_params(kv, 2, 1, 0);
    if (block) p.kv_block_size = block;
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    const int nv = kvi_n_vocab(m);
    float *out = malloc((size_t)n * nv * sizeof *out);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    kvi_error err = { 0 };
    int rc = 0;
    if (!decode) {
        for (int i = 0; i < n; i++) kvi_batch_add(b, s, toks[i], i, true);
        rc = kvi_step(e, b, &err);
        for (int i = 0; rc == 0 && i < n; i++)
            memcpy(out + (size_t)i * nv, kvi_logits(e, i), nv * sizeof *out);
    } else {
        for (int i = 0; rc == 0 && i < n; i++) {
            kvi_batch_clear(b);
            kvi_batch_add(b, s, toks[i], i, true);
            rc = kvi_step(e, b, &err);
            if (rc == 0) memcpy(out + (size_t)i * nv, kvi_logits(e, 0), nv * sizeof *out);
        }
    }
    CHECK(rc == 0, "step: %s", err.msg);
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

/* 400 pseudo-random tokens: decode (releasing window parts as it goes) == one
 * prefill step, bit for bit; the bytes held at the end well below a full cache */
static void check_long(kvi_model *m, const char *name)
{
    enum { N = 400 };
    int32_t toks[N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        toks[i] = i == 0 ? 1 : 3 + (int32_t)((x >> 8) % 509);
    }
    const int nv = kvi_n_vocab(m);
    /* every KV type, KIVI q4 keys (per-table tail, groups) included */
    static const kvi_type kvt[3] = { KVI_TYPE_F32, KVI_TYPE_Q8_0, KVI_TYPE_KV_Q4 };
    float *pre = NULL, *dec = NULL;
    for (int k = 0; k < 3; k++) {
        free(pre);
        free(dec);
        pre = run_seq_kv(m, toks, N, false, 0, kvt[k]);
        dec = run_seq_kv(m, toks, N, true, 0, kvt[k]);
        CHECK(pre && dec && memcmp(pre, dec, (size_t)N * nv * sizeof *pre) == 0,
              "%s: 400 positions, KV %s: decode with released window parts differs from prefill", name,
              kvi_type_name(kvt[k]));
    }
    /* the bytes one sequence holds after N positions: gemma2 half its layers
     * global (0.5 + 0.5 * 5 blocks of 16 / 400 = 0.6), gemma3 one in 7 (0.31) */
    kvi_engine_params p = engine_params(KVI_TYPE_F16, 2, 1, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    kvi_seq *s = e ? kvi_seq_create(e) : NULL;
    kvi_batch *b = kvi_batch_create(1);
    kvi_error err = { 0 };
    for (int i = 0; s && i < N; i++) {
        kvi_batch_clear(b);
        kvi_batch_add(b, s, toks[i], i, i == N - 1);
        if (kvi_step(e, b, &err) != 0) break;
    }
    if (s) {
        kvi_stats st;
        kvi_stats_get(e, s, &st);
        const double full = (double)N * st.kv_bytes_per_token;
        CHECK(st.n_tokens == N && st.kv_bytes < 0.65 * full,
              "%s: %zu KV bytes held for %d positions (full %.0f)", name, st.kv_bytes, N, full);
        printf("%-20s 400 positions: %zu KV bytes held, a full cache %.0f (%.2f)\n", name, st.kv_bytes, full,
               st.kv_bytes / full);
        CHECK(kvi_seq_truncate(s, 10) != 0, "%s: a rewind past the released window parts was accepted", name);
        CHECK(kvi_seq_truncate(s, N - 20) == 0, "%s: a rewind inside the window's slack was refused", name);
        CHECK(kvi_seq_truncate(s, 0) == 0 && kvi_seq_len(s) == 0, "%s: starting over was refused", name);
    }
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    free(pre);
    free(dec);
}

static float *run_seq(kvi_model *m, const int32_t *toks, int n, bool decode, int block)
{
    return run_seq_kv(m, toks, n, decode, block, KVI_TYPE_F32);
}

/* two sequences decoded together, the second 5 tokens behind: row logits of seq 0 */
static float *run_pair(kvi_model *m, const int32_t *toks, int n)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 2, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    const int nv = kvi_n_vocab(m);
    float *out = malloc((size_t)n * nv * sizeof *out);
    kvi_seq *s0 = kvi_seq_create(e), *s1 = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(2);
    kvi_error err = { 0 };
    int rc = 0;
    for (int i = 0; rc == 0 && i < n + 5; i++) {
        kvi_batch_clear(b);
        if (i >= 5) kvi_batch_add(b, s1, toks[i - 5], i - 5, false);
        if (i < n) kvi_batch_add(b, s0, toks[i], i, true);
        rc = kvi_step(e, b, &err);
        if (rc == 0 && i < n) memcpy(out + (size_t)i * nv, kvi_logits(e, i >= 5 ? 1 : 0), nv * sizeof *out);
    }
    CHECK(rc == 0, "pair step: %s", err.msg);
    kvi_batch_free(b);
    kvi_seq_free(s0);
    kvi_seq_free(s1);
    kvi_engine_free(e);
    return out;
}

static void check_file(const char *name, double tol)
{
    char rel[256], grel[256];
    snprintf(rel, sizeof rel, "golden/arch/%s.gguf", name);
    snprintf(grel, sizeof grel, "golden/arch/%s.logits.json", name);
    kvi_error err = { 0 };
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_model *m = kvi_model_load(shared_path(rel), &lp, &err);
    CHECK(m != NULL, "load %s: %s", rel, err.msg);
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
    float *pre = run_seq(m, toks, n, false, 0);
    float *blk = run_seq(m, toks, n, false, 4);
    for (int pass = 0; pass < 2; pass++) {
        const float *lg = pass ? blk : pre;
        if (!lg) continue;
        double num = 0, den = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *r = cJSON_GetArrayItem(ref, i);
            CHECK(cJSON_GetArraySize(r) == nv, "%s: golden row of %d, vocab %d", name, cJSON_GetArraySize(r),
                  nv);
            for (int k = 0; k < nv && k < cJSON_GetArraySize(r); k++) {
                const double bv = cJSON_GetArrayItem(r, k)->valuedouble;
                num += (lg[(size_t)i * nv + k] - bv) * (lg[(size_t)i * nv + k] - bv);
                den += bv * bv;
            }
        }
        const double rel_err = sqrt(num / den);
        CHECK(rel_err < tol, "%s%s: relative error %.4g >= %.3g", name, pass ? " (blocks of 4)" : "", rel_err,
              tol);
        printf("%-20s relative error vs llama.cpp %.6f (tolerance %.3f)%s\n", name, rel_err, tol,
               pass ? ", KV blocks of 4" : "");
    }
    if (pre) {
        float *dec = run_seq(m, toks, n, true, 0);
        float *pair = run_pair(m, toks, n);
        const size_t bytes = (size_t)n * nv * sizeof *pre;
        CHECK(dec && memcmp(pre, dec, bytes) == 0, "%s: token-by-token decode differs from prefill", name);
        CHECK(pair && memcmp(pre, pair, bytes) == 0, "%s: batched decode differs from prefill", name);
        free(dec);
        free(pair);
    }
    free(pre);
    free(blk);
    if (!strncmp(name, "gemma", 5) || !strncmp(name, "gpt-oss", 7)) check_long(m, name);
    free(toks);
    kvi_model_free(m);
    cJSON_Delete(j);
}

int main(void)
{
    static const char *const dense[] = { "qwen3",         "gemma2",  "gemma3", "phi3",
                                         "phi3-longrope", "granite", "olmo2" };
    for (size_t i = 0; i < sizeof dense / sizeof *dense; i++) {
        char f32[64], q8[64];
        snprintf(f32, sizeof f32, "%s-f32", dense[i]);
        snprintf(q8, sizeof q8, "%s-q8_0", dense[i]);
        check_file(f32, 0.002);
        check_file(q8, 0.03);
    }
    /* mixtures of experts (issue 15): F32 and a llama-quantize Q4_K_M mix each */
    static const char *const moe[] = { "llama-moe", "qwen3moe", "olmoe", "gpt-oss" };
    for (size_t i = 0; i < sizeof moe / sizeof *moe; i++) {
        char f32[64], q4[64];
        snprintf(f32, sizeof f32, "%s-f32", moe[i]);
        snprintf(q4, sizeof q4, "%s-q4_k_m", moe[i]);
        check_file(f32, 0.002);
        check_file(q4, 0.03);
    }
    /* gpt-oss as published: its experts in MXFP4 (the other matrices Q8_0) */
    check_file("gpt-oss-mxfp4", 0.03);
    return test_main_end();
}
