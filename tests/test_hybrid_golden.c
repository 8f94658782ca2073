/*
 * test_hybrid_golden.c — the hybrid architectures (qwen35, qwen3next, qwen35moe: gated DeltaNet
 * layers with a recurrent state, gated full attention every 4th layer; kimi-linear: KDA
 * layers and an MLA layer, README-state-t3.md) against
 * llama.cpp (../shared/golden/arch, README-hybrid.md there; F32 < 0.002, Q8_0 < 0.03),
 * each file:
 *  - all 48 positions in one prefill step, and token by token (the state carried
 *    between steps), both within the tolerance, and bit for bit equal;
 *  - 200 rows in one step (parts of 64 rows in the DeltaNet layers) == decode;
 *  - chunked prefill in a budget of 3 blocks and one snapshot (qwen35: 7 blocks; kimi-linear 14),
 *    where the pool must take back the blocks of state snapshots (4 each; kimi-linear 11) for the
 *    sequence's own: the same bits;
 *  - chunked prefill (chunks of 16 and 5, then decode), two sequences in one
 *    batch (one 5 behind), two prompts with their rows interleaved in one step,
 *    1 thread vs 2 and forward chunks of 3 rows: the same bits;
 *  - the memory: the state is 6 layers x (3 x 256 + 4 x 32 x 32) floats = 116736
 *    bytes (the README's 114 KiB; qwen35moe 3 x (3 x 128 + 4 x 16 x 16)), K/V only
 *    for the attention layers, and every
 *    byte accounted (state slots reserved in the budget, states held);
 *  - qwen35moe with its experts' gate and up fused (ffn_gate_up_exps): the same bits;
 *  - fork (the child continues from the parent's state), the prefix snapshot
 *    (a repeated prompt computes only its tail, with the same logits), a session
 *    file round trip, and the refusals: rewinding into the past, a context policy.
 * The same for the Mamba-2 hybrids (granitehybrid, nemotron_h, falcon-h1; README-state-t3.md),
 * their state bytes per sequence the README's table.
 */
#include "testutil.h"

#include "kvinfer.h"
#include "formats/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NV 512

/* logits [n][NV] of toks on one new sequence: prefill in steps of `step` rows (n: one
 * step; 1: token by token) with threads and forward chunk `chunk` (0: default); with
 * blocks > 0 in a budget of one state and that many blocks, blocks < 0 in one of a
 * state, 3 blocks and one snapshot's blocks (*evicted: the snapshots the pool took back) */
static float *run_budget(kvi_model *m, const int32_t *toks, int n, int step, int threads, int chunk,
                         int blocks, uint64_t *evicted)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, threads, 1, 0);
    p.fwd_chunk = chunk;
    if (blocks != 0) {
        kvi_engine *probe = engine_create_checked(m, &p);
        if (!probe) return NULL;
        kvi_stats st;
        kvi_stats_get(probe, NULL, &st);
        kvi_engine_free(probe);
        const size_t bb = st.kv_bytes_block, snap = (st.kv_bytes_state_seq + bb - 1) / bb;
        p.kv_budget_bytes = st.kv_bytes_state_seq + (blocks > 0 ? (size_t)blocks : 3 + snap) * bb;
    }
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    float *out = malloc((size_t)n * NV * sizeof *out);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    kvi_error err = { 0 };
    int rc = 0;
    for (int i0 = 0; rc == 0 && i0 < n; i0 += step) {
        const int i1 = i0 + step < n ? i0 + step : n;
        kvi_batch_clear(b);
        for (int i = i0; i < i1; i++) kvi_batch_add(b, s, toks[i], i, true);
        rc = kvi_step(e, b, &err);
        for (int i = i0; rc == 0 && i < i1; i++)
            memcpy(out + (size_t)i * NV, kvi_logits(e, i - i0), NV * sizeof *out);
    }
    CHECK(rc == 0, "step (budget of %d blocks): %s", blocks, err.msg);
    if (evicted) {
        kvi_stats st;
        kvi_stats_get(e, NULL, &st);
        *evicted = st.kv_snapshots_evicted;
        CHECK(st.kv_snapshots <= 2, "%d snapshots held by one sequence", st.kv_snapshots);
    }
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

static float *run(kvi_model *m, const int32_t *toks, int n, int step, int threads, int chunk)
{
    return run_budget(m, toks, n, step, threads, chunk, 0, NULL);
}

/* two sequences' prompts in one step, rows interleaved (a0 b0 a1 b1 ...; b runs the
 * tokens from the 7th on): a's logits */
static float *run_interleaved(kvi_model *m, const int32_t *toks, int n)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 2, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    float *out = malloc((size_t)n * NV * sizeof *out);
    kvi_seq *a = kvi_seq_create(e), *b = kvi_seq_create(e);
    kvi_batch *bt = kvi_batch_create(2 * n);
    for (int i = 0; i < n; i++) {
        kvi_batch_add(bt, a, toks[i], i, true);
        if (i + 6 < n) kvi_batch_add(bt, b, toks[i + 6], i, false);
    }
    kvi_error err = { 0 };
    const int rc = kvi_step(e, bt, &err);
    CHECK(rc == 0, "interleaved step: %s", err.msg);
    for (int i = 0, row = 0; rc == 0 && i < n; i++) {
        memcpy(out + (size_t)i * NV, kvi_logits(e, row), NV * sizeof *out);
        row += i + 6 < n ? 2 : 1;
    }
    kvi_batch_free(bt);
    kvi_seq_free(a);
    kvi_seq_free(b);
    kvi_engine_free(e);
    return out;
}

static bool same(const float *a, const float *b, int n)
{
    return a && b && memcmp(a, b, (size_t)n * NV * sizeof *a) == 0;
}

/* memory, fork, prefix snapshot, session, refusals on one engine; pre = prefill logits */
/* The README's shapes: recurrent layers, one layer's state floats (3 conv rows of C,
 * Hv dk x dk delta rule), attention layers and their K (= V) floats a token (latent:
 * the one MLA row, no V). */
typedef struct shape {
    int n_rec, state_floats, n_attn, kv_floats;
    bool latent;
    int tight; /* blocks that hold the sequence and one snapshot, not two (0: 3 + a snapshot's blocks) */
} shape;

static void check_state(kvi_model *m, const char *name, const int32_t *toks, int n, const float *pre,
                        const shape *sh)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 3, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return;
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    const size_t state = (size_t)sh->n_rec * sh->state_floats * sizeof(float);
    CHECK(st.kv_n_layers_recurrent == sh->n_rec && st.kv_bytes_state_seq == state,
          "%s: %d recurrent layers, state %zu", name, st.kv_n_layers_recurrent, st.kv_bytes_state_seq);
    CHECK(st.kv_bytes_per_token == (size_t)sh->n_attn * (sh->latent ? 1 : 2) * sh->kv_floats * sizeof(float),
          "%s: %zu KV bytes a token (%d layers of K, V)", name, st.kv_bytes_per_token, sh->n_attn);
    CHECK(st.kv_state_slots == 3 && st.kv_bytes_state == 0, "%s: %d slots, %zu state bytes before any step",
          name, st.kv_state_slots, st.kv_bytes_state);
    /* the budget holds every sequence at full length plus 3 states */
    const size_t blk = st.kv_bytes_block;
    CHECK(st.kv_bytes_budget >= 3 * state + (size_t)st.kv_blocks_total * blk &&
              st.kv_bytes_budget - 3 * state - (size_t)st.kv_blocks_total * blk < blk,
          "%s: budget %zu, %d blocks of %zu, 3 states", name, st.kv_bytes_budget, st.kv_blocks_total, blk);

    float *lg = malloc((size_t)NV * sizeof *lg);
    kvi_seq *a = kvi_seq_create(e);
    /* 40 tokens: a snapshot after position 31 (the last boundary the step crosses) */
    CHECK(step_rows(e, a, toks, 0, 40, lg) == 0, "%s: prefill 40", name);
    CHECK(memcmp(lg, pre + (size_t)39 * NV, NV * sizeof *lg) == 0, "%s: 40-row prefill differs", name);
    kvi_stats_get(e, a, &st);
    CHECK(st.kv_bytes_state == state, "%s: the sequence holds %zu state bytes", name, st.kv_bytes_state);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_snapshots == 1 && st.kv_snapshots_taken == 1, "%s: %d snapshots held, %llu taken", name,
          st.kv_snapshots, (unsigned long long)st.kv_snapshots_taken);
    CHECK(st.kv_blocks_snapshot == (int32_t)((state + blk - 1) / blk), "%s: the snapshot holds %d blocks",
          name, st.kv_blocks_snapshot);
    CHECK(st.kv_blocks_used == 3 + st.kv_blocks_snapshot, "%s: %d blocks used (3 + the snapshot's)", name,
          st.kv_blocks_used);
    CHECK(st.kv_bytes_allocated ==
              (size_t)(st.kv_blocks_used + st.kv_blocks_cached + st.kv_blocks_free) * blk,
          "%s: allocated bytes != blocks", name);

    /* refusals: into the past, and a rewind */
    CHECK(kvi_seq_truncate(a, 20) == KVI_E_UNSUPPORTED, "%s: truncating a recurrent sequence to 20", name);
    {
        kvi_batch *b = kvi_batch_create(1);
        kvi_error err = { 0 };
        kvi_batch_add(b, a, toks[30], 30, true);
        CHECK(kvi_step(e, b, &err) == KVI_E_BAD_BATCH && strstr(err.msg, "recurrent"),
              "%s: rewriting position 30: %s", name, err.msg);
        kvi_batch_free(b);
    }
    /* fork at 40: both continue alike */
    kvi_seq *c = kvi_seq_fork(a);
    CHECK(c != NULL, "%s: fork", name);
    if (c) {
        CHECK(step_rows(e, c, toks + 40, 40, n, lg) == 0 &&
                  memcmp(lg, pre + (size_t)(n - 1) * NV, NV * sizeof *lg) == 0,
              "%s: the fork's continuation differs", name);
        kvi_seq_free(c);
    }
    CHECK(step_rows(e, a, toks + 40, 40, n, lg) == 0 &&
              memcmp(lg, pre + (size_t)(n - 1) * NV, NV * sizeof *lg) == 0,
          "%s: the parent's continuation differs", name);

    /* a session file round trip */
    {
        const char *path = tmp_path("hybrid.session");
        kvi_error err = { 0 };
        CHECK(kvi_seq_save(a, path, &err) == 0, "%s: session save: %s", name, err.msg);
        kvi_seq *r = kvi_seq_create(e);
        CHECK(r && kvi_seq_load(r, path, NULL, &err) == 0, "%s: session load: %s", name, err.msg);
        if (r) {
            CHECK(kvi_seq_len(r) == n, "%s: the loaded session holds %d positions", name, kvi_seq_len(r));
            /* one more token on both: same logits */
            float *l2 = malloc((size_t)NV * sizeof *l2);
            int32_t t2[64];
            memcpy(t2, toks, (size_t)n * sizeof *t2);
            t2[n] = 7;
            CHECK(step_rows(e, a, t2 + n, n, n + 1, lg) == 0 && step_rows(e, r, t2 + n, n, n + 1, l2) == 0 &&
                      memcmp(lg, l2, NV * sizeof *lg) == 0,
                  "%s: the loaded session continues differently", name);
            free(l2);
            kvi_seq_free(r);
        }
    }
    kvi_seq_free(a);

    /* the same 40-token prompt again: the first 32 come from the snapshot */
    kvi_seq *d = kvi_seq_create(e);
    const int32_t held = kvi_seq_reuse_prefix(d, toks, 40);
    CHECK(held == 32, "%s: a repeated prompt reuses %d positions (expected 32)", name, held);
    CHECK(step_rows(e, d, toks + held, held, 40, lg) == 0 &&
              memcmp(lg, pre + (size_t)39 * NV, NV * sizeof *lg) == 0,
          "%s: the prompt resumed from the snapshot differs", name);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_snapshots_restored == 1, "%s: %llu snapshots restored", name,
          (unsigned long long)st.kv_snapshots_restored);
    kvi_seq_free(d);
    free(lg);
    kvi_engine_free(e);

    /* a context policy that drops positions is refused */
    p.ctx_policy = "shift";
    kvi_error err = { 0 };
    kvi_engine *bad = kvi_engine_create(m, &p, &err);
    CHECK(!bad && strstr(err.msg, "recurrent"), "%s: a shift context policy: %s", name, err.msg);
    kvi_engine_free(bad);
}

static void check_file(const char *name, double tol, const shape *sh)
{
    kvi_model *m;
    cJSON *j;
    if (!load_arch_golden(name, &m, &j)) return;
    int32_t toks[64];
    const int n = json_token_ids(cJSON_GetObjectItem(j, "tokens"), toks, 64);
    const cJSON *ref = cJSON_GetObjectItem(j, "logits");
    CHECK(n == 48 && kvi_n_vocab(m) == NV, "%s: %d tokens, vocabulary %d", name, n, kvi_n_vocab(m));
    float *pre = run(m, toks, n, n, 2, 0);
    float *dec = run(m, toks, n, 1, 2, 0);
    if (pre && dec) {
        const double ep = golden_rel_err(name, pre, ref, n, NV), ed = golden_rel_err(name, dec, ref, n, NV);
        CHECK(ep < tol && ed < tol, "%s: relative error %.4g (prefill) %.4g (decode) >= %.3g", name, ep, ed,
              tol);
        printf("%-16s relative error vs llama.cpp: prefill %.3g, token by token %.3g (tolerance %.3g)\n",
               name, ep, ed, tol);
    }
    CHECK(same(pre, dec, n), "%s: token-by-token decode differs from prefill", name);
    float *c16 = run(m, toks, n, 16, 2, 0), *c5 = run(m, toks, n, 5, 2, 0);
    float *t1 = run(m, toks, n, n, 1, 0), *fc3 = run(m, toks, n, n, 2, 3);
    float *pair = pair_logits(m, toks, n), *mixed = run_interleaved(m, toks, n);
    CHECK(same(pre, mixed, n), "%s: two prompts with their rows interleaved in one step differ", name);
    free(mixed);
    uint64_t ev = 0;
    const int tb = sh->tight ? sh->tight : -1; /* -1: 3 + a snapshot's blocks (qwen35: 7) */
    float *tight = run_budget(m, toks, n, 16, 2, 0, tb, &ev);
    CHECK(same(pre, tight, n) && ev > 0,
          "%s: chunked prefill in %d blocks (-1: 3 + a snapshot's): same %d, %llu snapshots evicted", name, tb,
          same(pre, tight, n), (unsigned long long)ev);
    free(tight);
    CHECK(same(pre, c16, n) && same(pre, c5, n), "%s: chunked prefill (16 / 5) differs", name);
    CHECK(same(pre, t1, n), "%s: 1 thread differs from 2", name);
    CHECK(same(pre, fc3, n), "%s: forward chunks of 3 rows differ", name);
    CHECK(same(pre, pair, n), "%s: batched decode differs", name);
    free(c16);
    free(c5);
    free(t1);
    free(fc3);
    free(pair);
    { /* 200 rows: the DeltaNet layers run a step's rows in parts of 64 */
        int32_t lt[200];
        for (int i = 0; i < 200; i++) lt[i] = i < n ? toks[i] : toks[(i * 7) % n];
        float *lp = run(m, lt, 200, 200, 2, 0), *ld = run(m, lt, 200, 1, 2, 0);
        CHECK(same(lp, ld, 200), "%s: 200 rows in one step differ from token-by-token decode", name);
        free(lp);
        free(ld);
    }
    if (pre) check_state(m, name, toks, n, pre, sh);
    free(pre);
    free(dec);
    kvi_model_free(m);
    cJSON_Delete(j);
}

/* qwen35moe-f32 rewritten with each layer's ffn_gate_exps and ffn_up_exps as one
 * ffn_gate_up_exps {dim, 2F, E} (the converter's --fuse-gate-up-exps: rows [0, F) of
 * an expert its gate, [F, 2F) its up projection) gives the original's logits, bit
 * for bit. */
static void check_fused_gate_up(void)
{
    kvi_error err = { 0 };
    gguf_ctx *g = NULL;
    CHECK(gguf_open(shared_path("golden/arch/qwen35moe-f32.gguf"), false, &g, &err) == 0, "open: %s", err.msg);
    if (!g) return;
    const char *path = tmp_path("qwen35moe-fused.gguf");
    gguf_writer *w = gguf_writer_create();
    FILE *f = fopen(path, "wb");
    bool ok = w && f;
    for (int64_t i = 0; ok && i < gguf_n_kv(g); i++) ok = gguf_writer_copy_kv(w, g, gguf_kv_key(g, i)) == 0;
    const int64_t nt = gguf_n_tensors(g);
    const gguf_tensor **src = calloc((size_t)nt, sizeof *src); /* [nt] declared order; gate: fused */
    int64_t nd = 0;
    for (int64_t i = 0; ok && i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (strstr(t->name, "ffn_up_exps")) continue;
        char name[96];
        const char *gate = strstr(t->name, "ffn_gate_exps");
        int64_t ne[4] = { t->ne[0], t->ne[1], t->ne[2], t->ne[3] };
        snprintf(name, sizeof name, "%.*s%s", gate ? (int)(gate - t->name) : 0, t->name,
                 gate ? "ffn_gate_up_exps.weight" : t->name);
        if (gate) ne[1] *= 2;
        ok = t->type == KVI_TYPE_F32 && gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne) == 0;
        src[nd++] = t;
    }
    ok = ok && gguf_writer_write_header(w, f, &err) == 0;
    for (int64_t i = 0; ok && i < nd; i++) {
        const gguf_tensor *t = src[i];
        if (!strstr(t->name, "ffn_gate_exps")) {
            ok = gguf_writer_write_tensor(w, f, i, t->data, &err) == 0;
            continue;
        }
        char up_name[96];
        snprintf(up_name, sizeof up_name, "%.*sffn_up_exps.weight", (int)(strstr(t->name, "ffn_gate_exps") - t->name),
                 t->name);
        const gguf_tensor *u = gguf_find_tensor(g, up_name);
        const size_t mat = (size_t)t->ne[0] * (size_t)t->ne[1] * sizeof(float); /* one expert's matrix */
        uint8_t *buf = malloc(2 * mat * (size_t)t->ne[2]);
        ok = u && buf;
        for (int64_t e = 0; ok && e < t->ne[2]; e++) {
            memcpy(buf + 2 * mat * (size_t)e, (const uint8_t *)t->data + mat * (size_t)e, mat);
            memcpy(buf + 2 * mat * (size_t)e + mat, (const uint8_t *)u->data + mat * (size_t)e, mat);
        }
        ok = ok && gguf_writer_write_tensor(w, f, i, buf, &err) == 0;
        free(buf);
    }
    if (f) ok = fclose(f) == 0 && ok;
    gguf_writer_free(w);
    free(src);
    CHECK(ok, "writing the fused file: %s", err.msg);
    kvi_model *a = NULL, *b = NULL;
    cJSON *j = NULL;
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    if (ok && load_arch_golden("qwen35moe-f32", &a, &j) && (b = kvi_model_load(path, &lp, &err))) {
        int32_t toks[64];
        const int n = json_token_ids(cJSON_GetObjectItem(j, "tokens"), toks, 64);
        float *pa = run(a, toks, n, n, 2, 0), *pb = run(b, toks, n, n, 2, 0), *db = run(b, toks, n, 1, 2, 0);
        CHECK(same(pa, pb, n) && same(pa, db, n), "fused ffn_gate_up_exps: logits differ from the separate file's");
        free(pa);
        free(pb);
        free(db);
    }
    CHECK(b != NULL, "load the fused file: %s", err.msg);
    kvi_model_free(a);
    kvi_model_free(b);
    cJSON_Delete(j);
    gguf_close(g);
}

int main(void)
{
    /* qwen35, qwen3next: 6 DeltaNet layers of 3 x 256 conv + 4 x 32 x 32 state floats,
     * 2 attention layers of 128 K floats; qwen35moe: 3 of 3 x 128 + 4 x 16 x 16, 1 of 64 */
    static const shape dense = { 6, 3 * 256 + 4 * 32 * 32, 2, 128, false, 7 },
                       moe = { 3, 3 * 128 + 4 * 16 * 16, 1, 64, false, 7 };
    check_file("qwen35-f32", 0.002, &dense);
    check_file("qwen35-q8_0", 0.03, &dense);
    check_file("qwen3next-f32", 0.002, &dense);
    check_file("qwen3next-q8_0", 0.03, &dense);
    check_file("qwen35moe-f32", 0.002, &moe);
    check_file("qwen35moe-q8_0", 0.03, &moe);
    check_fused_gate_up();
    /* lfm2, lfm2moe (README-state-t3.md): 3 short convolutions of 2 x 64 state floats
     * (1536 bytes a sequence), 1 attention layer of 2 x 16 K floats; a snapshot fits
     * one block, so a budget of 4 (3 for the sequence) takes them back */
    static const shape lfm2 = { 3, 2 * 64, 1, 32, false, 4 };
    CHECK(lfm2.n_rec * lfm2.state_floats * sizeof(float) == 1536, "lfm2: the README's 1536 state bytes");
    check_file("lfm2-f32", 0.002, &lfm2);
    check_file("lfm2-q8_0", 0.03, &lfm2);
    check_file("lfm2moe-f32", 0.002, &lfm2);
    check_file("lfm2moe-q8_0", 0.03, &lfm2);
    /* Mamba-2 hybrids (README-state-t3.md): per layer conv 3 x (d_inner + 2 G N) and
     * SSM N d_inner floats; granitehybrid 3 of 3 x 192 + 16 x 128 (31488 bytes) and one
     * attention layer of 32 K floats, nemotron_h 2 of 3 x 160 + 16 x 96 (16128 bytes)
     * and one of 64 */
    static const shape granite = { 3, 3 * 192 + 16 * 128, 1, 32, false, 0 },
                       nemo = { 2, 3 * 160 + 16 * 96, 1, 64, false, 0 };
    check_file("granitehybrid-f32", 0.002, &granite);
    check_file("granitehybrid-q8_0", 0.03, &granite);
    check_file("nemotron_h-f32", 0.002, &nemo);
    check_file("nemotron_h-q8_0", 0.03, &nemo);
    /* falcon-h1: every layer both, 3 x 96 + 16 x 64 state floats (15744 bytes) and 32 K floats */
    static const shape falcon = { 3, 3 * 96 + 16 * 64, 3, 32, false, 0 };
    check_file("falcon-h1-f32", 0.002, &falcon);
    check_file("falcon-h1-q8_0", 0.03, &falcon);
    /* kimi-linear (README-state-t3.md): 3 KDA layers of 3 x 192 conv + 2 x 32 x 32 state
     * floats (31488 bytes a sequence), 1 MLA layer of 48 floats a token (192 bytes): a
     * snapshot takes 11 blocks of 16 positions, so 14 blocks hold one and the sequence */
    static const shape kimi = { 3, 3 * 192 + 2 * 32 * 32, 1, 48, true, 14 };
    CHECK(3 * (3 * 192 + 2 * 32 * 32) * sizeof(float) == 31488, "kimi-linear: the README's state bytes");
    check_file("kimi-linear-f32", 0.002, &kimi);
    check_file("kimi-linear-q8_0", 0.03, &kimi);
    return test_main_end();
}
