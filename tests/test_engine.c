/*
 * test_engine.c — the DESIGN.md invariants on a real model (stories260K):
 *  1. prefill logits == token-by-token decode logits, bit for bit, per KV type;
 *  2. KV-cached decode and full recompute (no cache) give the same tokens;
 *  3. a batch mixing several sequences gives each exactly what it gets alone,
 *     with 1 or 2 threads;
 *  5. KV accounting: what the stats report is what the pool allocated;
 *  6. bad batches and an exhausted pool get clean errors and change nothing.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static kvi_model *M;
static int NV;

static kvi_engine *engine(kvi_type kv, int threads, int n_seq, int n_batch, size_t budget)
{
    kvi_engine_params p = engine_params(kv, threads, n_seq, 256);
    p.n_batch_max = n_batch;
    p.kv_budget_bytes = budget;
    return engine_create_checked(M, &p);
}

static int32_t argmax(const float *v)
{
    int32_t b = 0;
    for (int i = 1; i < NV; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static const int32_t PROMPT[] = { 1,   403, 407, 261, 378, 432, 383, 286, 261, 376,
                                  298, 315, 421, 395, 317, 426, 338, 401, 396, 267 };
#define NP ((int)(sizeof PROMPT / sizeof *PROMPT))

static void invariant1(kvi_type kv, const char *name)
{
    kvi_engine *e = engine(kv, 2, 1, 512, 0);
    if (!e) return;
    float *a = seq_logits(e, PROMPT, NP, false);
    float *b = seq_logits(e, PROMPT, NP, true);
    CHECK(memcmp(a, b, (size_t)NP * NV * sizeof(float)) == 0, "kv %s: prefill and decode logits differ",
          name);
    /* a prefill split into chunks of 3 rows gives the same bits too */
    kvi_engine *e3 = engine(kv, 2, 1, 3, 0);
    float *c = seq_logits(e3, PROMPT, NP, false);
    CHECK(memcmp(a, c, (size_t)NP * NV * sizeof(float)) == 0, "kv %s: chunked prefill differs", name);
    free(a);
    free(b);
    free(c);
    kvi_engine_free(e);
    kvi_engine_free(e3);
}

static void invariant2(void)
{
    kvi_engine *e = engine(KVI_TYPE_F16, 2, 1, 512, 0);
    if (!e) return;
    const int n_gen = 40;
    int32_t cached[64], recomputed[64], seq[128];
    kvi_error err = { 0 };
    /* with the cache */
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(128);
    for (int i = 0; i < 5; i++) kvi_batch_add(b, s, PROMPT[i], i, i == 4);
    CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
    int32_t t = argmax(kvi_logits(e, 4));
    for (int g = 0; g < n_gen; g++) {
        cached[g] = t;
        kvi_batch_clear(b);
        kvi_batch_add(b, s, t, 5 + g, true);
        CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
        t = argmax(kvi_logits(e, 0));
    }
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    const uint64_t rows_cached = st.n_rows;
    /* recompute everything at each step */
    memcpy(seq, PROMPT, 5 * sizeof *seq);
    int n = 5;
    for (int g = 0; g < n_gen; g++) {
        kvi_seq_truncate(s, 0);
        kvi_batch_clear(b);
        for (int i = 0; i < n; i++) kvi_batch_add(b, s, seq[i], i, i == n - 1);
        CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
        recomputed[g] = argmax(kvi_logits(e, n - 1));
        seq[n++] = recomputed[g];
    }
    kvi_stats_get(e, NULL, &st);
    CHECK(memcmp(cached, recomputed, n_gen * sizeof(int32_t)) == 0, "no-cache decode gives other tokens");
    CHECK(st.n_rows - rows_cached > 10 * rows_cached, "recompute should cost far more rows (%llu vs %llu)",
          (unsigned long long)(st.n_rows - rows_cached), (unsigned long long)rows_cached);
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
}

/* Three sequences with different prompts, rows interleaved in one batch. */
static void invariant3(int threads)
{
    static const int32_t p2[] = { 1, 365, 301, 260, 261, 288, 341, 400 };
    static const int32_t p3[] = { 1, 411, 283, 285, 401, 307, 339, 314, 297, 266, 271, 301 };
    const int32_t *ps[3] = { PROMPT, p2, p3 };
    const int ns[3] = { NP, 8, 12 };
    kvi_engine *alone = engine(KVI_TYPE_F16, 1, 1, 512, 0);
    kvi_engine *e = engine(KVI_TYPE_F16, threads, 3, 512, 0);
    if (!alone || !e) return;
    float *ref[3];
    for (int k = 0; k < 3; k++) ref[k] = seq_logits(alone, ps[k], ns[k], false);
    kvi_seq *s[3];
    for (int k = 0; k < 3; k++) s[k] = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(64);
    int row_of[3][32];
    for (int i = 0; i < 20; i++)
        for (int k = 0; k < 3; k++)
            if (i < ns[k]) row_of[k][i] = kvi_batch_add(b, s[k], ps[k][i], i, true);
    kvi_error err = { 0 };
    CHECK(kvi_step(e, b, &err) == 0, "mixed batch: %s", err.msg);
    for (int k = 0; k < 3; k++) {
        bool same = true;
        for (int i = 0; i < ns[k]; i++)
            same =
                same && memcmp(kvi_logits(e, row_of[k][i]), ref[k] + (size_t)i * NV, NV * sizeof(float)) == 0;
        CHECK(same, "threads %d: sequence %d differs inside a mixed batch", threads, k);
    }
    { /* the pool's runs are counted, parallel or (a late worker) serial; none alone */
        kvi_stats es, as;
        kvi_stats_get(e, NULL, &es);
        kvi_stats_get(alone, NULL, &as);
        CHECK((es.pool_runs_parallel + es.pool_runs_serial > 0) == (threads > 1),
              "threads %d: %llu pool runs counted", threads,
              (unsigned long long)(es.pool_runs_parallel + es.pool_runs_serial));
        CHECK(as.pool_runs_parallel + as.pool_runs_serial == 0, "one thread: %llu pool runs counted",
              (unsigned long long)(as.pool_runs_parallel + as.pool_runs_serial));
    }
    /* then decode rows of all three in one batch vs. each alone */
    kvi_batch_clear(b);
    for (int k = 0; k < 3; k++) kvi_batch_add(b, s[k], 300 + k, ns[k], true);
    CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 3; k++) {
        int32_t toks[33];
        memcpy(toks, ps[k], ns[k] * sizeof(int32_t));
        toks[ns[k]] = 300 + k;
        float *r = seq_logits(alone, toks, ns[k] + 1, false);
        CHECK(memcmp(kvi_logits(e, k), r + (size_t)ns[k] * NV, NV * sizeof(float)) == 0,
              "threads %d: decode row of sequence %d differs in a batch", threads, k);
        free(r);
    }
    for (int k = 0; k < 3; k++) {
        free(ref[k]);
        kvi_seq_free(s[k]);
    }
    kvi_batch_free(b);
    kvi_engine_free(alone);
    kvi_engine_free(e);
}

static void accounting_and_errors(void)
{
    /* pool of 4 blocks of 16 tokens */
    kvi_engine *probe = engine(KVI_TYPE_F16, 1, 1, 512, 0);
    if (!probe) return;
    kvi_stats st;
    kvi_stats_get(probe, NULL, &st);
    const size_t bpt = st.kv_bytes_per_token;
    CHECK(bpt == 5u * 2u * 32u * 2u, "f16 bytes per token %zu, want 640 (5 layers x K,V x 32 x 2 B)", bpt);
    kvi_engine_free(probe);

    kvi_engine *e = engine(KVI_TYPE_F16, 2, 2, 512, 4 * 16 * bpt);
    if (!e) return;
    kvi_seq *a = kvi_seq_create(e), *b2 = kvi_seq_create(e);
    CHECK(kvi_seq_create(e) == NULL, "a third sequence must be refused (n_seq_max 2)");
    kvi_batch *b = kvi_batch_create(128);
    kvi_error err = { 0 };
    for (int i = 0; i < 20; i++) kvi_batch_add(b, a, PROMPT[i], i, i == 19);
    CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
    float *la = malloc(NV * sizeof(float));
    memcpy(la, kvi_logits(e, 19), NV * sizeof(float));
    kvi_stats_get(e, a, &st);
    CHECK(st.kv_blocks_used == 2 && st.n_tokens == 20, "seq a: %d blocks, %d tokens", st.kv_blocks_used,
          st.n_tokens);
    CHECK(st.kv_bytes == 2 * 16 * bpt, "seq a: %zu bytes", st.kv_bytes);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_bytes_allocated == 2 * 16 * bpt && st.kv_bytes == st.kv_bytes_allocated,
          "pool allocated %zu, used %zu", st.kv_bytes_allocated, st.kv_bytes);

    /* b2 wants 40 positions = 3 blocks, only 2 left: clean error, nothing changed */
    kvi_batch_clear(b);
    for (int i = 0; i < 40; i++) kvi_batch_add(b, b2, PROMPT[i % NP], i, false);
    int rc = kvi_step(e, b, &err);
    CHECK(rc == KVI_E_NO_KV_SPACE, "exhausted pool: rc %d", rc);
    CHECK(err.msg[0] != 0, "exhausted pool: no message");
    CHECK(kvi_seq_len(b2) == 0 && kvi_seq_len(a) == 20, "lengths changed: %d %d", kvi_seq_len(b2),
          kvi_seq_len(a));
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_blocks_used == 2, "failed step leaked blocks: %d used", st.kv_blocks_used);

    /* a mixed batch that fails must not grow a either */
    kvi_batch_clear(b);
    kvi_batch_add(b, a, 300, 20, true);
    for (int i = 0; i < 40; i++) kvi_batch_add(b, b2, PROMPT[i % NP], i, false);
    rc = kvi_step(e, b, &err);
    CHECK(rc == KVI_E_NO_KV_SPACE, "rc %d", rc);
    kvi_stats_get(e, a, &st);
    CHECK(st.kv_blocks_used == 2 && kvi_seq_len(a) == 20, "a changed by a failed batch");

    /* bad batches */
    kvi_batch_clear(b);
    kvi_batch_add(b, a, 300, 22, true);
    CHECK(kvi_step(e, b, &err) == KVI_E_BAD_BATCH, "gap must be refused");
    kvi_batch_clear(b);
    kvi_batch_add(b, a, NV, 20, true);
    CHECK(kvi_step(e, b, &err) == KVI_E_BAD_BATCH, "token out of range must be refused");
    kvi_batch_clear(b);
    kvi_batch_add(b, a, 300, 20, true);
    kvi_batch_add(b, a, 301, 20, true);
    CHECK(kvi_step(e, b, &err) == KVI_E_BAD_BATCH, "repeated position must be refused");
    kvi_batch_clear(b);
    kvi_batch_add(b, b2, 1, 256, true);
    CHECK(kvi_step(e, b, &err) != 0, "position past n_ctx must be refused");
    CHECK(kvi_seq_len(a) == 20, "a changed by bad batches");

    /* a is intact: continuing it gives what a fresh prefill gives */
    kvi_batch_clear(b);
    kvi_batch_add(b, a, PROMPT[19], 19, true); /* overwrite the last position */
    CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
    CHECK(memcmp(kvi_logits(e, 0), la, NV * sizeof(float)) == 0, "a's cache was disturbed");

    /* truncation returns blocks */
    kvi_seq_truncate(a, 5);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_blocks_used == 1, "after truncate: %d blocks used", st.kv_blocks_used);
    kvi_seq_free(a);
    kvi_stats_get(e, NULL, &st);
    /* the failed reservation above took the pool's last two blocks before giving them
     * back: all four now have memory, none is in use */
    CHECK(st.kv_blocks_used == 0 && st.kv_bytes_allocated == 4 * 16 * bpt,
          "after free: %d used, %zu allocated", st.kv_blocks_used, st.kv_bytes_allocated);
    free(la);
    kvi_batch_free(b);
    kvi_seq_free(b2);
    kvi_engine_free(e);
}

int main(void)
{
    M = load_stories260k(&NV);
    if (!M) return test_main_end();
    invariant1(KVI_TYPE_F32, "f32");
    invariant1(KVI_TYPE_F16, "f16");
    invariant1(KVI_TYPE_Q8_0, "q8_0");
    invariant1(KVI_TYPE_Q4_0, "q4_0");
    invariant1(KVI_TYPE_KV_Q4, "q4");
    invariant2();
    invariant3(1);
    invariant3(2);
    accounting_and_errors();
    kvi_model_free(M);
    return test_main_end();
}
