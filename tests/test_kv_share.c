/*
 * test_kv_share.c — prefix sharing, fork and copy on write, the LRU of cached
 * prefixes, and KV accounting (DESIGN.md invariants 4 and 5) on stories260K.
 *
 * The reference for every logits comparison is a separate engine with the
 * prefix cache off that prefills the same tokens from scratch: sharing must
 * change nothing, bit for bit (rows are batch-invariant, so K/V computed once
 * and reused equal K/V computed again), for every KV type: f32, f16, q8_0, q4_0
 * and q4 (whose fork carries the newest key group's f16 tail).
 *
 * Accounting is checked against numbers computed here from the model's shape
 * and the documented layouts (kv_cache.h, kv_quant.h), and against the pool's
 * own byte counter, which is updated where memory is allocated and freed.
 */
#include "testutil.h"

#include "engine/engine_int.h"
#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static kvi_model *M;
static int NV;

static kvi_engine *engine(kvi_type kv, int n_seq, size_t budget, bool prefix)
{
    kvi_engine_params p = engine_params(kv, 2, n_seq, 512);
    p.kv_budget_bytes = budget;
    p.prefix_cache = prefix;
    return engine_create_checked(M, &p);
}

/* Runs toks[from..n) for s at positions from.., logits of every row into out[n][NV]
 * (rows before from untouched). */
static int run_rows(kvi_engine *e, kvi_seq *s, const int32_t *toks, int from, int n, float *out)
{
    kvi_batch *b = kvi_batch_create(n);
    for (int i = from; i < n; i++) kvi_batch_add(b, s, toks[i], i, true);
    kvi_error err = { 0 };
    int rc = kvi_step(e, b, &err);
    CHECK(rc == 0, "step: %s", err.msg);
    if (rc == 0 && out)
        for (int i = from; i < n; i++)
            memcpy(out + (size_t)i * NV, kvi_logits(e, i - from), NV * sizeof(float));
    kvi_batch_free(b);
    return rc;
}

/* logits [n][NV] of a cold prefill on a fresh reference engine */
static float *reference(kvi_type kv, const int32_t *toks, int n)
{
    kvi_engine *e = engine(kv, 1, 0, false);
    float *out = calloc((size_t)n * NV, sizeof(float));
    kvi_seq *s = kvi_seq_create(e);
    run_rows(e, s, toks, 0, n, out);
    kvi_engine_free(e);
    return out;
}

static bool same(const float *a, const float *b) { return memcmp(a, b, NV * sizeof(float)) == 0; }

/* Bytes of one block and of one q4 tail for stories260K (5 layers, 4 KV heads x
 * 8 = kv_dim 32) with blocks of 16, from the documented layouts alone. */
static size_t want_block_bytes(kvi_type kv)
{
    const size_t kvd = 32, bs = 16;
    size_t k = 0, v = 0;
    switch (kv) {
    case KVI_TYPE_F32: k = v = bs * kvd * 4; break;
    case KVI_TYPE_F16: k = v = bs * kvd * 2; break;
    case KVI_TYPE_Q8_0: k = v = bs * (kvd / 32) * 34; break;
    case KVI_TYPE_Q4_0: k = v = bs * (kvd / 32) * 18; break;
    default: /* q4: f16 scale + minimum per channel, 4-bit codes, padded to 16; values q4_0 */
        k = (4 * kvd + bs * kvd / 2 + 15) / 16 * 16;
        v = bs * (kvd / 32) * 18;
        break;
    }
    return 5 * (k + v);
}
static size_t want_tail_bytes(kvi_type kv) { return kv == KVI_TYPE_KV_Q4 ? 5 * (16 + 16 * 32 * 2) : 0; }

/* Invariant 5: what the stats report adds up, per sequence and for the pool, to
 * what the cache holds from the system. seqs: every live sequence. */
static void accounting_seqs(kvi_engine *e, kvi_type kv, kvi_seq *const *seqs, int n, const char *where)
{
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    const size_t sum =
        (size_t)(st.kv_blocks_used + st.kv_blocks_cached + st.kv_blocks_free) * st.kv_bytes_block;
    CHECK(st.kv_bytes_allocated == sum, "%s: allocated %zu != (used %d + cached %d + free %d) x %zu", where,
          st.kv_bytes_allocated, st.kv_blocks_used, st.kv_blocks_cached, st.kv_blocks_free,
          st.kv_bytes_block);
    CHECK(st.kv_bytes_per_token * (size_t)st.kv_block_size == st.kv_bytes_block, "%s: block bytes", where);
    CHECK(st.kv_bytes_block == want_block_bytes(kv), "%s: %s block of %zu bytes, layout says %zu", where,
          kvi_type_name(kv), st.kv_bytes_block, want_block_bytes(kv));
    const kv_pool *p = engine_kv_pool(e);
    CHECK(st.kv_bytes_allocated + st.kv_bytes_tail == p->bytes_sys,
          "%s: stats say %zu + %zu tail bytes, the cache holds %zu from the system", where,
          st.kv_bytes_allocated, st.kv_bytes_tail, p->bytes_sys);
    size_t tails = 0;
    for (int i = 0; i < n; i++) {
        if (!seqs[i]) continue;
        kvi_stats ss;
        kvi_stats_get(e, seqs[i], &ss);
        CHECK(ss.kv_bytes_tail == 0 || ss.kv_bytes_tail == want_tail_bytes(kv), "%s: seq %d tail %zu bytes",
              where, i, ss.kv_bytes_tail);
        CHECK(ss.kv_bytes == (size_t)ss.kv_blocks_used * want_block_bytes(kv), "%s: seq %d holds %zu bytes",
              where, i, ss.kv_bytes);
        if (kv == KVI_TYPE_KV_Q4 && ss.n_tokens > 0)
            CHECK(ss.kv_bytes_tail == want_tail_bytes(kv), "%s: q4 seq %d of %d tokens without a tail", where,
                  i, ss.n_tokens);
        tails += ss.kv_bytes_tail;
    }
    CHECK(tails == st.kv_bytes_tail, "%s: sequences hold %zu tail bytes, the pool reports %zu", where, tails,
          st.kv_bytes_tail);
}

static void accounting(kvi_engine *e, const char *where)
{
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    const size_t sum =
        (size_t)(st.kv_blocks_used + st.kv_blocks_cached + st.kv_blocks_free) * st.kv_bytes_block;
    CHECK(st.kv_bytes_allocated == sum, "%s: allocated %zu != (used %d + cached %d + free %d) x %zu", where,
          st.kv_bytes_allocated, st.kv_blocks_used, st.kv_blocks_cached, st.kv_blocks_free,
          st.kv_bytes_block);
    CHECK(st.kv_bytes_allocated + st.kv_bytes_tail == engine_kv_pool(e)->bytes_sys, "%s: bytes_sys", where);
}

static void share_and_cow(kvi_type kv)
{
    const char *tn = kvi_type_name(kv);
    uint64_t rs = 0x5eed + (uint64_t)kv;
    enum { NPR = 40 };
    int32_t P[NPR + 1];
    P[0] = 1;
    for (int i = 1; i <= NPR; i++) P[i] = 3 + (int32_t)(trand_u64(&rs) % (uint64_t)(NV - 3));
    float *ref = reference(kv, P, NPR);

    kvi_engine *e = engine(kv, 4, 0, true);
    float *la = calloc((size_t)(NPR + 1) * NV, sizeof(float));
    float *lb = calloc((size_t)(NPR + 1) * NV, sizeof(float));
    kvi_seq *a = kvi_seq_create(e), *b = kvi_seq_create(e);
    run_rows(e, a, P, 0, NPR, la);
    CHECK(same(la + (size_t)(NPR - 1) * NV, ref + (size_t)(NPR - 1) * NV), "%s: a differs from reference",
          tn);

    /* b reuses whole blocks: (40 - 1) / 16 = 2 blocks = 32 positions */
    int32_t held = kvi_seq_reuse_prefix(b, P, NPR);
    CHECK(held == 32, "%s: reuse_prefix held %d, want 32", tn, held);
    kvi_stats st;
    kvi_stats_get(e, b, &st);
    CHECK(st.kv_blocks_used == 2 && st.kv_blocks_shared == 2 && st.prefix_hit_tokens == 32 &&
              st.prefix_miss_tokens == 8,
          "%s: b holds %d blocks (%d shared), hits %llu misses %llu", tn, st.kv_blocks_used,
          st.kv_blocks_shared, (unsigned long long)st.prefix_hit_tokens,
          (unsigned long long)st.prefix_miss_tokens);
    run_rows(e, b, P, held, NPR, lb);
    int bad = 0;
    for (int i = held; i < NPR; i++) bad += !same(lb + (size_t)i * NV, ref + (size_t)i * NV);
    CHECK(bad == 0, "%s: %d rows of b differ from a cold prefill", tn, bad);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_blocks_used == 4 && st.kv_blocks_shared == 2,
          "%s: pool holds %d blocks (%d shared), want 3 of a + 1 of b, 2 shared", tn, st.kv_blocks_used,
          st.kv_blocks_shared);
    accounting(e, "after reuse");

    /* fork a (shares its partial last block too), then both continue differently */
    kvi_seq *c = kvi_seq_fork(a);
    CHECK(c != NULL && kvi_seq_len(c) == NPR, "%s: fork", tn);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_blocks_used == 4 && st.kv_blocks_shared == 3, "%s: after fork %d used, %d shared", tn,
          st.kv_blocks_used, st.kv_blocks_shared);
    int32_t PX[NPR + 1], PY[NPR + 1];
    memcpy(PX, P, sizeof P);
    memcpy(PY, P, sizeof P);
    PX[NPR] = 7;
    PY[NPR] = 9;
    float *rx = reference(kv, PX, NPR + 1), *ry = reference(kv, PY, NPR + 1);
    float *lx = calloc((size_t)(NPR + 1) * NV, sizeof(float)),
          *ly = calloc((size_t)(NPR + 1) * NV, sizeof(float));
    run_rows(e, a, PX, NPR, NPR + 1, lx); /* writes into the shared block: copy on write */
    kvi_stats_get(e, NULL, &st);
    CHECK(st.n_cow == 1 && st.kv_blocks_used == 5, "%s: a's write: %llu copies, %d blocks", tn,
          (unsigned long long)st.n_cow, st.kv_blocks_used);
    run_rows(e, c, PY, NPR, NPR + 1, ly); /* c is the last holder: writes in place */
    CHECK(same(lx + (size_t)NPR * NV, rx + (size_t)NPR * NV), "%s: a after copy on write differs", tn);
    CHECK(same(ly + (size_t)NPR * NV, ry + (size_t)NPR * NV), "%s: fork c was changed by a's write", tn);
    {
        kvi_seq *live[3] = { a, b, c };
        accounting_seqs(e, kv, live, 3, "after cow");
    }

    /* everything freed: indexed full blocks stay cached, the rest is free */
    kvi_seq_free(a);
    kvi_seq_free(b);
    kvi_seq_free(c);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_blocks_used == 0 && st.kv_blocks_cached == 2, "%s: after free %d used, %d cached", tn,
          st.kv_blocks_used, st.kv_blocks_cached);
    CHECK(st.kv_bytes_tail == 0, "%s: tails left after every sequence was freed: %zu bytes", tn,
          st.kv_bytes_tail);
    accounting_seqs(e, kv, NULL, 0, "after free");

    /* a cached prefix serves a new sequence; a write inside it (after a rollback)
     * must not poison the index. q4: position 20 lies in the complete group 1,
     * whose f16 rows are gone, so its rewrite re-reads rows 16..19 from 4-bit
     * codes (kv_cache.h): group 1 is lossy and must never be indexed */
    kvi_seq *d = kvi_seq_create(e);
    CHECK(kvi_seq_reuse_prefix(d, P, NPR) == 32, "%s: reuse from the LRU", tn);
    kvi_seq_truncate(d, 20);
    int32_t PZ[NPR];
    memcpy(PZ, P, sizeof PZ);
    for (int i = 20; i < NPR; i++) PZ[i] = 5 + i;
    run_rows(e, d, PZ, 20, NPR, NULL);
    kvi_seq *f = kvi_seq_create(e);
    held = kvi_seq_reuse_prefix(f, P, NPR);
    CHECK(held == 16, "%s: after the rewrite only block 0 is P's (held %d)", tn, held);
    run_rows(e, f, P, held, NPR, lb);
    CHECK(same(lb + (size_t)(NPR - 1) * NV, ref + (size_t)(NPR - 1) * NV), "%s: stale block served", tn);
    float *rz = reference(kv, PZ, NPR);
    kvi_seq *g = kvi_seq_create(e);
    held = kvi_seq_reuse_prefix(g, PZ, NPR);
    const int32_t want_held = kv == KVI_TYPE_KV_Q4 ? 16 : 32;
    CHECK(held == want_held, "%s: the rewritten chain: held %d, want %d", tn, held, want_held);
    run_rows(e, g, PZ, held, NPR, lb);
    CHECK(same(lb + (size_t)(NPR - 1) * NV, rz + (size_t)(NPR - 1) * NV), "%s: rewritten chain differs", tn);
    accounting(e, "after rewrite");
    kvi_seq_free(d);
    kvi_seq_free(f);
    kvi_seq_free(g);
    kvi_engine_free(e);

    /* no prefix cache: nothing reused */
    e = engine(kv, 2, 0, false);
    a = kvi_seq_create(e);
    run_rows(e, a, P, 0, NPR, NULL);
    b = kvi_seq_create(e);
    CHECK(kvi_seq_reuse_prefix(b, P, NPR) == 0, "%s: --no-prefix-cache reused blocks", tn);
    kvi_engine_free(e);

    free(ref);
    free(rx);
    free(ry);
    free(rz);
    free(la);
    free(lb);
    free(lx);
    free(ly);
}

/* q4 fork at every offset inside a key group: the child continues exactly like
 * the parent would (a second engine, prefix cache off, runs the parent's path). */
static void fork_mid_group(void)
{
    enum { N = 60 };
    int32_t T[N + 1];
    uint64_t rs = 0xf0f0;
    T[0] = 1;
    for (int i = 1; i <= N; i++) T[i] = 3 + (int32_t)(trand_u64(&rs) % (uint64_t)(NV - 3));
    float *ref = reference(KVI_TYPE_KV_Q4, T, N + 1);
    float *out = calloc((size_t)(N + 1) * NV, sizeof(float));
    kvi_engine *e = engine(KVI_TYPE_KV_Q4, 2, 0, true);
    int bad = 0;
    for (int at = 17; at < N; at += 7) {
        kvi_seq *a = kvi_seq_create(e);
        run_rows(e, a, T, 0, at, NULL);
        kvi_seq *c = kvi_seq_fork(a);
        kvi_seq_free(a); /* the child alone must hold everything it needs */
        for (int i = at; i <= N; i++) run_rows(e, c, T, i, i + 1, out);
        for (int i = at; i <= N; i++) bad += !same(out + (size_t)i * NV, ref + (size_t)i * NV);
        kvi_seq *live[1] = { c };
        accounting_seqs(e, KVI_TYPE_KV_Q4, live, 1, "fork_mid_group");
        kvi_seq_free(c);
    }
    CHECK(bad == 0, "q4: %d rows of forks decoded differently from the unforked sequence", bad);
    kvi_engine_free(e);
    free(ref);
    free(out);
}

/* A small pool: cached prefixes are evicted (least recently used first) only
 * when no free or fresh block is left; a failed step leaves the others intact. */
static void lru_pressure(void)
{
    kvi_engine *probe = engine(KVI_TYPE_F16, 1, 0, true);
    kvi_stats st;
    kvi_stats_get(probe, NULL, &st);
    const size_t blk = st.kv_bytes_block;
    kvi_engine_free(probe);
    kvi_engine *e = engine(KVI_TYPE_F16, 3, 4 * blk, true);
    int32_t A[33], B[33];
    for (int i = 0; i < 33; i++) {
        A[i] = 10 + i;
        B[i] = 100 + i;
    }
    kvi_seq *s = kvi_seq_create(e);
    run_rows(e, s, A, 0, 32, NULL); /* 2 full blocks, indexed */
    kvi_seq_free(s);
    s = kvi_seq_create(e);
    run_rows(e, s, B, 0, 32, NULL); /* 2 fresh blocks: A's stay cached */
    kvi_seq_free(s);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_blocks_cached == 4 && st.n_lru_evicted == 0, "cached %d, evicted %llu", st.kv_blocks_cached,
          (unsigned long long)st.n_lru_evicted);
    s = kvi_seq_create(e);
    CHECK(kvi_seq_reuse_prefix(s, B, 33) == 32, "B reused from the LRU");
    kvi_seq_free(s); /* B is now the most recent, A the oldest */
    kvi_seq *t = kvi_seq_create(e);
    int32_t C[20];
    for (int i = 0; i < 20; i++) C[i] = 200 + i;
    run_rows(e, t, C, 0, 20, NULL); /* 2 blocks: A's two are evicted */
    kvi_stats_get(e, NULL, &st);
    CHECK(st.n_lru_evicted == 2 && st.kv_blocks_cached == 2, "evicted %llu, cached %d",
          (unsigned long long)st.n_lru_evicted, st.kv_blocks_cached);
    s = kvi_seq_create(e);
    CHECK(kvi_seq_reuse_prefix(s, A, 33) == 0, "A must be gone");
    kvi_seq_free(s);
    s = kvi_seq_create(e);
    CHECK(kvi_seq_reuse_prefix(s, B, 33) == 32, "B must still be cached");
    /* the pool is now full (t: 2, s: 2): one more block fails cleanly */
    kvi_batch *b = kvi_batch_create(4);
    kvi_batch_add(b, t, 5, 20, false);
    kvi_batch_add(b, s, 5, 32, true);
    kvi_error err = { 0 };
    int rc = kvi_step(e, b, &err);
    CHECK(rc == KVI_E_NO_KV_SPACE && err.msg[0], "full pool: rc %d", rc);
    CHECK(kvi_seq_len(t) == 20 && kvi_seq_len(s) == 32, "failed step changed lengths");
    accounting(e, "lru");
    kvi_batch_free(b);
    kvi_engine_free(e);
}

/* The figure: 16 sequences forked from one 256-token prompt, each with its
 * own 16-token continuation, hold at most 1.25x one prompt's bytes plus theirs. */
static void sixteen_forks(void)
{
    kvi_engine *e = engine(KVI_TYPE_F16, 16, 0, true);
    int32_t P[256];
    uint64_t rs = 77;
    for (int i = 0; i < 256; i++) P[i] = 3 + (int32_t)(trand_u64(&rs) % 500);
    kvi_seq *s[16];
    s[0] = kvi_seq_create(e);
    run_rows(e, s[0], P, 0, 256, NULL);
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    const size_t one = st.kv_bytes;
    for (int k = 1; k < 16; k++) s[k] = kvi_seq_fork(s[0]);
    kvi_batch *b = kvi_batch_create(16);
    for (int step = 0; step < 16; step++) {
        kvi_batch_clear(b);
        for (int k = 0; k < 16; k++) kvi_batch_add(b, s[k], 3 + (k * 31 + step) % 500, 256 + step, true);
        kvi_error err = { 0 };
        CHECK(kvi_step(e, b, &err) == 0, "%s", err.msg);
    }
    kvi_stats_get(e, NULL, &st);
    const size_t cont = 16u * 16u * st.kv_bytes_per_token;
    CHECK((double)st.kv_bytes <= 1.25 * (double)one + (double)cont,
          "16 forks hold %zu bytes > 1.25 x %zu + %zu", st.kv_bytes, one, cont);
    accounting(e, "16 forks");
    kvi_batch_free(b);
    kvi_engine_free(e);
}

int main(void)
{
    M = load_stories260k(&NV);
    if (!M) return test_main_end();
    share_and_cow(KVI_TYPE_F32);
    share_and_cow(KVI_TYPE_F16);
    share_and_cow(KVI_TYPE_Q8_0);
    share_and_cow(KVI_TYPE_Q4_0);
    share_and_cow(KVI_TYPE_KV_Q4);
    fork_mid_group();
    lru_pressure();
    sixteen_forks();
    kvi_model_free(M);
    return test_main_end();
}
