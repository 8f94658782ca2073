/*
 * test_arch_golden.c — every architecture (dense and mixture-of-experts) against llama.cpp
 * (../shared/golden/arch, README there): for each file, the logits of all 48
 * positions in one prefill step within the README's relative-error tolerance
 * (F32 < 0.002, quantised < 0.03), and the invariants on the same model:
 *  1. prefill == token-by-token decode (bit for bit),
 *  2. batched decode (two sequences in one step, one of them offset) == alone,
 * and with a small KV block (4 positions: windows of 8 span blocks; the online
 * softmax then rescales at other points, so only within the tolerance).
 * deepseek2's latent attention: its cache bytes, and fork, session file and prefix
 * reuse on the latent cache (check_latent).
 * gpt-oss also as published, its experts in MXFP4 (gpt-oss-mxfp4, tolerance 0.03).
 * Sliding-window models (gemma2, gemma3, gemma4, gpt-oss, cohere2, exaone4, afmoe) also
 * over 400 positions, long enough
 * that decode releases window parts (kv_cache.h): token-by-token decode gives the
 * bits of one prefill step, and the KV bytes held stay far below a full cache.
 */
#include "testutil.h"

#include "kvinfer.h"
#include "formats/gguf.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* deepseek32-q8_0 (README-state-t3.md): its indexer's top-k follows the 8-bit rounding
 * of activations, so < 0.03 holds only with llama.cpp's exact activation quantisation
 * (measured 0.0104, the README's value for it); activations rounded otherwise land at
 * 0.14-0.17. */
#define DSA_Q8_TOL 0.03

static int32_t *json_ids(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = calloc((size_t)(*n > 0 ? *n : 1), sizeof *v);
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

/* Logits of tokens [from, to) of s, one decode row per step, into out [to - from][nv]. */
static bool decode_span(kvi_engine *e, kvi_seq *s, const int32_t *toks, int from, int to, float *out)
{
    const int nv = kvi_n_vocab(kvi_engine_model(e));
    kvi_batch *b = kvi_batch_create(1);
    kvi_error err = { 0 };
    bool ok = b != NULL;
    for (int i = from; ok && i < to; i++) {
        kvi_batch_clear(b);
        kvi_batch_add(b, s, toks[i], i, true);
        ok = kvi_step(e, b, &err) == 0;
        if (ok) memcpy(out + (size_t)(i - from) * nv, kvi_logits(e, 0), (size_t)nv * sizeof *out);
    }
    CHECK(ok, "decode: %s", err.msg);
    kvi_batch_free(b);
    return ok;
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
    } else if (!decode_span(e, s, toks, 0, n, out)) {
        rc = KVI_E_INVALID;
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
static void check_long(kvi_model *m, const char *name, int n_kvt)
{
    enum { N = 400 };
    int32_t toks[N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        toks[i] = i == 0 ? 1 : 3 + (int32_t)((x >> 8) % 509);
    }
    const int nv = kvi_n_vocab(m);
    /* every KV type, KIVI q4 keys (per-table tail, groups) included (the first n_kvt:
     * rows of 16 fit f32 only) */
    static const kvi_type kvt[3] = { KVI_TYPE_F32, KVI_TYPE_Q8_0, KVI_TYPE_KV_Q4 };
    float *pre = NULL, *dec = NULL;
    for (int k = 0; k < n_kvt; k++) {
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

/* Parameter and byte counts against the file's own tensor list (gguf reader, not
 * the model): every tensor's elements == kvi_model_n_params; one token's share ==
 * kvi_model_active_params / kvi_model_decode_bytes, where a tensor named *_exps
 * counts used / n_expert of itself and an untied token_embd (gemma4's
 * per_layer_token_embd too) one row. n_expert and
 * used are the README's, checked against kvi_model_info. */
static void check_counts(kvi_model *m, const char *rel, int n_expert, int used)
{
    kvi_error err = { 0 };
    gguf_ctx *g = NULL;
    CHECK(gguf_open(shared_path(rel), false, &g, &err) == 0, "open %s: %s", rel, err.msg);
    if (!g) return;
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    CHECK(info.n_expert == n_expert && info.n_expert_used == used, "%s: experts %d used %d, want %d / %d",
          rel, info.n_expert, info.n_expert_used, n_expert, used);
    const bool tied = gguf_find_tensor(g, "output.weight") == NULL;
    uint64_t all = 0, active = 0, bytes = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int blk = -1;
        if (sscanf(t->name, "blk.%d.", &blk) == 1 && blk >= info.n_layers) continue; /* MTP: not run */
        uint64_t el = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) el *= (uint64_t)t->ne[d];
        all += el;
        if (strstr(t->name, "_exps")) {
            active += el / (uint64_t)n_expert * (uint64_t)used;
            bytes += t->nbytes / (size_t)n_expert * (size_t)used;
        } else if ((!tied && !strcmp(t->name, "token_embd.weight")) ||
                   !strcmp(t->name, "per_layer_token_embd.weight")) { /* a token reads one row */
            active += (uint64_t)t->ne[0];
            bytes += t->nbytes / (size_t)t->ne[1];
        } else {
            active += el;
            bytes += t->nbytes;
        }
    }
    CHECK(kvi_model_n_params(m) == all, "%s: n_params %llu, file %llu", rel,
          (unsigned long long)kvi_model_n_params(m), (unsigned long long)all);
    CHECK(kvi_model_active_params(m) == active, "%s: active params %llu, file's share %llu", rel,
          (unsigned long long)kvi_model_active_params(m), (unsigned long long)active);
    CHECK(kvi_model_decode_bytes(m) == bytes, "%s: active bytes %zu, file's share %llu", rel,
          kvi_model_decode_bytes(m), (unsigned long long)bytes);
    CHECK(n_expert == 0 || active < all, "%s: active %llu of %llu", rel, (unsigned long long)active,
          (unsigned long long)all);
    gguf_close(g);
}

/* Rows routed to each expert after one prefill of n rows: every moe layer's counts
 * sum to n * used, no expert above n; dense layers count nothing. */
static void check_routed(kvi_model *m, const char *name, const int32_t *toks, int n, int used)
{
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    if (info.n_expert <= 0) return;
    kvi_engine_params ep = engine_params(KVI_TYPE_F16, 2, 1, 0);
    kvi_error err = { 0 };
    kvi_engine *e = engine_create_checked(m, &ep);
    kvi_seq *s = e ? kvi_seq_create(e) : NULL;
    kvi_batch *b = kvi_batch_create(n);
    CHECK(e && s && b, "%s: engine", name);
    if (e && s && b) {
        for (int i = 0; i < n; i++) kvi_batch_add(b, s, toks[i], i, i == n - 1);
        CHECK(kvi_step(e, b, &err) == 0, "%s: step: %s", name, err.msg);
        const int nc = kvi_engine_expert_counts(e, NULL, 0);
        CHECK(nc == info.n_layers * info.n_expert, "%s: %d counts", name, nc);
        uint64_t *c = calloc((size_t)nc, sizeof *c);
        kvi_engine_expert_counts(e, c, (size_t)nc);
        int moe_layers = 0;
        for (int l = 0; c && l < info.n_layers; l++) {
            uint64_t sum = 0, mx = 0;
            for (int x = 0; x < info.n_expert; x++) {
                sum += c[(size_t)l * info.n_expert + x];
                if (c[(size_t)l * info.n_expert + x] > mx) mx = c[(size_t)l * info.n_expert + x];
            }
            CHECK(sum == 0 || sum == (uint64_t)n * used, "%s: layer %d routed %llu rows, want %d", name, l,
                  (unsigned long long)sum, n * used);
            CHECK(mx <= (uint64_t)n, "%s: layer %d: an expert got %llu of %d rows", name, l,
                  (unsigned long long)mx, n);
            moe_layers += sum > 0;
        }
        CHECK(moe_layers > 0, "%s: no layer routed anything", name);
        free(c);
    }
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
}

/* Latent attention (deepseek2: 4 layers, cache rows of 64 + 16): the cache holds
 * 80 values per token and layer (640 bytes in f16, 1280 in f32; per-head keys and
 * values would be 8 x (48 + 32) = 640 values), and every way a sequence gets its
 * cache (one prefill, decode after a fork, after a session file, after a reused
 * prefix) gives the one-pass prefill's bits (pre [n][nv]); key types that cannot
 * hold a latent row are refused with a message. */
static void check_latent(kvi_model *m, const int32_t *toks, int n, const float *pre,
                         const size_t tok_bytes[2], size_t idx_bytes)
{
    const int nv = kvi_n_vocab(m), half = 32;
    for (int f32 = 0; f32 < 2; f32++) {
        kvi_engine_params p = engine_params(f32 ? KVI_TYPE_F32 : KVI_TYPE_F16, 2, 4, 0);
        kvi_engine *e = engine_create_checked(m, &p);
        if (!e) return;
        kvi_stats st;
        kvi_stats_get(e, NULL, &st);
        CHECK(st.kv_bytes_per_token == tok_bytes[f32] && st.kv_bytes_per_token_indexer == idx_bytes,
              "latent: %zu KV bytes a token (%zu of them the indexer's), want %zu (%zu)",
              st.kv_bytes_per_token, st.kv_bytes_per_token_indexer, tok_bytes[f32], idx_bytes);
        kvi_engine_free(e);
    }
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 4, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return;
    kvi_seq *a = kvi_seq_create(e), *c = kvi_seq_create(e), *d = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    float *got = malloc((size_t)n * nv * sizeof *got);
    kvi_error err = { 0 };
    for (int i = 0; i < half; i++) kvi_batch_add(b, a, toks[i], i, false);
    CHECK(kvi_step(e, b, &err) == 0, "latent prefill: %s", err.msg);
    const size_t rest = (size_t)(n - half) * nv * sizeof *got;
    /* fork: the child decodes the rest */
    kvi_seq *fk = kvi_seq_fork(a);
    CHECK(fk && decode_span(e, fk, toks, half, n, got) && !memcmp(got, pre + (size_t)half * nv, rest),
          "latent: decode after a fork differs from the prefill");
    kvi_seq_free(fk);
    /* session file: saved, loaded into another sequence, decoded on */
    const char *path = tmp_path("latent.session");
    CHECK(kvi_seq_save(a, path, &err) == 0, "latent: save: %s", err.msg);
    CHECK(kvi_seq_load(c, path, NULL, &err) == 0 && kvi_seq_len(c) == half, "latent: load: %s", err.msg);
    CHECK(decode_span(e, c, toks, half, n, got) && !memcmp(got, pre + (size_t)half * nv, rest),
          "latent: decode after a session load differs from the prefill");
    /* prefix cache: a's two full blocks reused, the rest prefilled */
    const int32_t held = kvi_seq_reuse_prefix(d, toks, n);
    CHECK(held == half, "latent: %d positions reused, want %d", held, half);
    kvi_batch_clear(b);
    for (int i = held > 0 ? held : 0; i < n; i++) kvi_batch_add(b, d, toks[i], i, true);
    CHECK(kvi_step(e, b, &err) == 0, "latent: prefill after the prefix: %s", err.msg);
    bool same = held > 0;
    for (int i = held; same && i < n; i++)
        same = !memcmp(kvi_logits(e, i - held), pre + (size_t)i * nv, (size_t)nv * sizeof *got);
    CHECK(same, "latent: prefill after a reused prefix differs");
    free(got);
    kvi_batch_free(b);
    kvi_seq_free(a);
    kvi_seq_free(c);
    kvi_seq_free(d);
    kvi_engine_free(e);
    /* q4 keys cannot hold values, q8_0 rows need a multiple of 32 (deepseek2's 80 is not) */
    const kvi_type bad[2] = { KVI_TYPE_KV_Q4, KVI_TYPE_Q8_0 };
    for (int i = 0; i < (m->head_dim % 32 ? 2 : 1); i++) {
        kvi_engine_params q = engine_params(bad[i], 1, 1, 0);
        kvi_error qe = { 0 };
        kvi_engine *x = kvi_engine_create(m, &q, &qe);
        CHECK(!x && qe.msg[0] && strstr(qe.msg, "kv cache"), "latent with %s keys: %s", kvi_type_name(bad[i]),
              x ? "accepted" : qe.msg);
        kvi_engine_free(x);
    }
}

/* gemma4 (5 layers, the last 2 reading layers 1 and 2's K/V): the cache holds K
 * and V rows of 64 values for the 3 layers with their own K/V only. */
static void check_shared_kv(kvi_model *m)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 1, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return;
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_bytes_per_token == (size_t)3 * 2 * 64 * 4, "gemma4: %zu KV bytes a token, want 3 layers' %d",
          st.kv_bytes_per_token, 3 * 2 * 64 * 4);
    kvi_engine_free(e);
}

/* llama4's NoPE-layer Q temperature (inert at 48 positions with llama.cpp's floor
 * of 8192): with a floor of 16 the README's numpy implementation moves the logits
 * by 0.019 relative; rows below position 15 keep their bits; prefill == decode. */
static void check_temp(kvi_model *m, const int32_t *toks, int n, const float *pre, const cJSON *ref)
{
    const int nv = kvi_n_vocab(m), len = m->q_temp_len;
    m->q_temp_len = 16;
    float *t = run_seq(m, toks, n, false, 0), *d = run_seq(m, toks, n, true, 0);
    m->q_temp_len = len;
    if (!t || !d) {
        free(t);
        free(d);
        return;
    }
    const double moved = golden_rel_err("llama4 floor 16", t, ref, n, nv);
    CHECK(moved > 0.017 && moved < 0.021, "llama4: temperature floor 16 moves the logits by %.4f, numpy 0.019",
          moved);
    CHECK(!memcmp(t, pre, (size_t)15 * nv * sizeof *t), "llama4: rows below 15 changed with the temperature");
    CHECK(!memcmp(t, d, (size_t)n * nv * sizeof *t), "llama4: temperature: decode differs from prefill");
    printf("%-20s Q temperature floor 16: %.4f from llama.cpp's logits (numpy: 0.019)\n", "llama4", moved);
    free(t);
    free(d);
}

/* deepseek32 (3 layers, latent rows [c 64 | k_pe 32], indexer keys of 64 f32, top_k
 * 8): per token 3 x (96 + 64) floats in f32 (README: 1920 B), 3 x (192 + 256) B with
 * f16 latent rows; fork, session file and prefix reuse carry the indexer keys; and the
 * selection matters: with top_k 512 (dense) the logits move from llama.cpp's by about
 * the README's 0.63, while the rows that see at most 8 positions keep their bits. */
static void check_dsa(kvi_model *m, const int32_t *toks, int n, const float *pre, const cJSON *ref)
{
    check_latent(m, toks, n, pre, (const size_t[2]){ 1344, 1920 }, 768);
    const int nv = kvi_n_vocab(m), top = m->idx_top_k;
    m->idx_top_k = 512;
    float *dense = run_seq(m, toks, n, false, 0);
    m->idx_top_k = top;
    if (!dense) return;
    const double moved = golden_rel_err("deepseek32 dense", dense, ref, n, nv);
    CHECK(moved > 0.5 && moved < 0.8, "deepseek32: dense attention moves the logits by %.3f, README 0.63",
          moved);
    CHECK(!memcmp(dense, pre, (size_t)top * nv * sizeof *pre),
          "deepseek32: rows that see at most top_k positions differ between sparse and dense");
    printf("%-20s dense attention (top_k 512): %.3f from llama.cpp's logits (README: 0.63)\n", "deepseek32",
           moved);
    free(dense);
}

static void check_file(const char *name, double tol, int n_expert, int used)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/arch/%s.gguf", name);
    kvi_model *m;
    cJSON *j;
    if (!load_arch_golden(name, &m, &j)) return;
    int n;
    int32_t *toks = json_ids(cJSON_GetObjectItem(j, "tokens"), &n);
    const cJSON *ref = cJSON_GetObjectItem(j, "logits");
    const int nv = kvi_n_vocab(m);
    check_counts(m, rel, n_expert, used);
    check_routed(m, name, toks, n, used);
    float *pre = run_seq(m, toks, n, false, 0);
    float *blk = run_seq(m, toks, n, false, 4);
    for (int pass = 0; pass < 2; pass++) {
        const float *lg = pass ? blk : pre;
        if (!lg) continue;
        const double rel_err = golden_rel_err(name, lg, ref, n, nv);
        CHECK(rel_err < tol, "%s%s: relative error %.4g >= %.3g", name, pass ? " (blocks of 4)" : "", rel_err,
              tol);
        printf("%-20s relative error vs llama.cpp %.6f (tolerance %.3f)%s\n", name, rel_err, tol,
               pass ? ", KV blocks of 4" : "");
    }
    if (pre) {
        float *dec = run_seq(m, toks, n, true, 0);
        float *pair = pair_logits(m, toks, n);
        const size_t bytes = (size_t)n * nv * sizeof *pre;
        CHECK(dec && memcmp(pre, dec, bytes) == 0, "%s: token-by-token decode differs from prefill", name);
        CHECK(pair && memcmp(pre, pair, bytes) == 0, "%s: batched decode differs from prefill", name);
        free(dec);
        free(pair);
        if (!strncmp(name, "deepseek2", 9)) check_latent(m, toks, n, pre, (const size_t[2]){ 640, 1280 }, 0);
        if (!strncmp(name, "deepseek32", 10)) check_dsa(m, toks, n, pre, ref);
        if (!strncmp(name, "gemma4", 6)) check_shared_kv(m);
        if (!strcmp(name, "llama4-f32")) check_temp(m, toks, n, pre, ref);
    }
    free(pre);
    free(blk);
    if (!strncmp(name, "gemma", 5) || !strncmp(name, "gpt-oss", 7) || !strncmp(name, "cohere2", 7) ||
        !strncmp(name, "afmoe", 5))
        check_long(m, name, 3);
    if (!strncmp(name, "exaone4", 7)) check_long(m, name, 1); /* head_dim 16 */
    free(toks);
    kvi_model_free(m);
    cJSON_Delete(j);
}

/* name-f32 within 0.002 and name-<second> (a quantised file) within 0.03 */
static void check_pair(const char *name, const char *second, int n_expert, int used)
{
    char f32[64], q[64];
    snprintf(f32, sizeof f32, "%s-f32", name);
    snprintf(q, sizeof q, "%s-%s", name, second);
    check_file(f32, 0.002, n_expert, used);
    check_file(q, 0.03, n_expert, used);
}

int main(void)
{
    static const char *const dense[] = { "qwen3",   "gemma2",  "gemma3",   "phi3",    "phi3-longrope",
                                         "granite", "olmo2",   "mistral3", "smollm3", "seed_oss",
                                         "apertus", "exaone4", "cohere2" };
    for (size_t i = 0; i < sizeof dense / sizeof *dense; i++) check_pair(dense[i], "q8_0", 0, 0);
    /* mixtures of experts (issue 15): F32 and a llama-quantize Q4_K_M mix each */
    static const struct {
        const char *name;
        int n_expert, used; /* README */
    } moe[] = { { "llama-moe", 8, 2 },
                { "qwen3moe", 8, 2 },
                { "olmoe", 16, 4 },
                { "gpt-oss", 8, 4 },
                { "deepseek2", 8, 2 } };
    for (size_t i = 0; i < sizeof moe / sizeof *moe; i++) check_pair(moe[i].name, "q4_k_m", moe[i].n_expert, moe[i].used);
    /* gpt-oss as published: its experts in MXFP4 (the other matrices Q8_0) */
    check_file("gpt-oss-mxfp4", 0.03, 8, 4);
    /* more mixtures of experts (issue 36, README-moe-t3.md): F32 and Q8_0 each */
    static const struct {
        const char *name;
        int n_expert, used;
    } moe_t3[] = { { "glm4moe", 8, 3 },      { "minimax-m2", 8, 2 },  { "hunyuan-moe", 8, 2 },
                   { "ernie4_5-moe", 8, 3 }, { "bailingmoe2", 8, 2 }, { "afmoe", 8, 2 } };
    for (size_t i = 0; i < sizeof moe_t3 / sizeof *moe_t3; i++)
        check_pair(moe_t3[i].name, "q8_0", moe_t3[i].n_expert, moe_t3[i].used);
    /* issue 36 (README-dense-t3.md): llama4, F32 and Q8_0 */
    check_pair("llama4", "q8_0", 4, 1);
    check_pair("gemma4", "q8_0", 0, 0);
    /* issue 41 (README-state-t3.md): deepseek32's sparse attention; its Q8_0 file
     * only as the README says (the choice follows activation rounding) */
    check_file("deepseek32-f32", 0.002, 4, 2);
    check_file("deepseek32-q8_0", DSA_Q8_TOL, 4, 2);
    /* issue 41 (README-state-t3.md): short-convolution hybrids */
    check_pair("lfm2", "q8_0", 0, 0);
    check_pair("lfm2moe", "q8_0", 4, 2);
    /* issue 41 (README-state-t3.md): kimi-linear (its state: test_hybrid_golden) */
    check_pair("kimi-linear", "q8_0", 4, 2);
    return test_main_end();
}
