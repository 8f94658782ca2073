/*
 * test_scheduler.c — continuous batching against llama2.c's greedy continuations
 * (../shared/golden/stories260K): each golden request must get exactly its
 * golden tokens while 44 other streams share every batch, with chunked prefill,
 * under preemption (a KV budget too small for all), and on the engine thread.
 * Also: queue limit, cancellation, stop from on_token, max_tokens, bad input,
 * and every KV block returned at the end. Lanes (batches in flight, as a
 * pipeline's root keeps them): the same tokens for every stream with 2 and 3
 * lanes as with one, under preemption, cancellation and free while batches are
 * in flight; and the engine's launch/finish against kvi_step.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "sched_util.h"

#include <stdlib.h>
#include <string.h>

static void check_golden(const golden *g, const result *r, const char *what, int gi)
{
    int match = 0;
    while (match < g->n_greedy && match < r->n && r->toks[match] == g->greedy[match]) match++;
    CHECK(r->done && r->finish == KVI_FINISH_LENGTH, "%s case %d: finish %d (done %d)", what, gi + 1,
          (int)r->finish, r->done);
    CHECK(match == g->n_greedy && r->n == g->n_greedy, "%s case %d: %d of %d golden tokens (got %d)", what,
          gi + 1, match, g->n_greedy, r->n);
    CHECK(r->usage.prompt_tokens == g->n_prompt && r->usage.completion_tokens == g->n_greedy,
          "%s case %d: usage %d+%d", what, gi + 1, r->usage.prompt_tokens, r->usage.completion_tokens);
}

enum { N_STREAMS = 48 };

/* 4 golden greedy requests among 48 streams; batch_tokens small so prompts are
 * chunked. Each stream's result in res[N_STREAMS]. */
static void test_batch_invariance(kvi_model *m, const golden *g, result *res)
{
    enum { N = N_STREAMS };
    kvi_engine *e = make_engine(m, N, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, N, 56, 0); /* 48 decode rows + 8 prefill rows at most */
    kvi_error err = { 0 };
    memset(res, 0, N * sizeof *res);
    int32_t other[N][40];
    uint64_t rng = 0x5eed;
    for (int i = 0; i < N; i++) {
        kvi_request rq;
        if (i % 12 == 0 && i / 12 < N_GOLDEN) {
            const golden *gg = &g[i / 12];
            greedy_request(&rq, gg->prompt, gg->n_prompt, gg->n_greedy, &res[i]);
        } else {
            const int n = 3 + (int)(trand_u64(&rng) % 37);
            other[i][0] = 1;
            for (int k = 1; k < n; k++) other[i][k] = 3 + (int32_t)(trand_u64(&rng) % 500);
            greedy_request(&rq, other[i], n, 20 + (int)(trand_u64(&rng) % 150), &res[i]);
            if (i % 2) { /* sampled streams too */
                rq.sampling.temp = 0.9f;
                rq.sampling.seed = (uint64_t)i;
            }
        }
        uint64_t id = 0;
        int rc = kvi_sched_submit(s, &rq, &id, &err);
        CHECK(rc == 0 && id > 0, "submit %d: %s", i, err.msg);
    }
    int steps = run_until_done(s, 5000);
    char what[32];
    snprintf(what, sizeof what, "48 streams, %d lanes", sched_lanes);
    for (int k = 0; k < N_GOLDEN; k++) check_golden(&g[k], &res[k * 12], what, k);
    kvi_sched_stats st;
    kvi_sched_stats_get(s, &st);
    CHECK(st.n_done == N && st.n_running == 0 && st.n_waiting == 0, "stats: done %llu running %d waiting %d",
          (unsigned long long)st.n_done, st.n_running, st.n_waiting);
    CHECK(st.engine.kv_blocks_used == 0, "%d KV blocks still held", st.engine.kv_blocks_used);
    /* decode rows are never starved: fewer steps than prompts+gens serially would
     * take (each step launches one lane's batch) */
    const int lanes = sched_lanes > 0 ? sched_lanes : 1;
    CHECK(steps < 400 * lanes, "%d steps for 48 streams of at most 200 tokens, %d lanes", steps, lanes);
    printf("48 streams, %d lanes: %d steps, %llu prefill rows, %llu decode rows\n", lanes, steps,
           (unsigned long long)st.n_prefill_tokens, (unsigned long long)st.n_decode_tokens);
    kvi_sched_free(s);
    kvi_engine_free(e);
}

/* A KV budget that holds about two full golden sequences: four requests run and
 * the youngest are preempted and recomputed; the tokens do not change. */
static void test_preemption(kvi_model *m, const golden *g)
{
    kvi_engine *e = make_engine_blocks(m, 4, 34); /* 244 tokens need 16 blocks */
    if (!e) return;
    kvi_sched *s = make_sched(e, 4, 16, 0);
    static result res[N_GOLDEN];
    memset(res, 0, sizeof res);
    submit_goldens(s, g, res, 0);
    run_until_done(s, 5000);
    for (int k = 0; k < N_GOLDEN; k++) check_golden(&g[k], &res[k], "preemption", k);
    kvi_sched_stats st;
    kvi_sched_stats_get(s, &st);
    int n_pre = 0;
    for (int k = 0; k < N_GOLDEN; k++) n_pre += res[k].usage.n_preempted;
    CHECK(st.n_preemptions > 0 && n_pre == (int)st.n_preemptions, "preemptions: %llu (per request %d)",
          (unsigned long long)st.n_preemptions, n_pre);
    /* the youngest gives way (with lanes too, where the youngest may be in a lane in
     * flight): the two admitted first fit the budget together, so they never do */
    CHECK(res[0].usage.n_preempted == 0 && res[1].usage.n_preempted == 0,
          "%d lanes: the two oldest requests were preempted %d and %d times", sched_lanes,
          res[0].usage.n_preempted, res[1].usage.n_preempted);
    CHECK(st.engine.kv_blocks_used == 0, "%d KV blocks still held", st.engine.kv_blocks_used);
    printf("preemption: %llu preemptions (per request %d %d %d %d), golden tokens unchanged\n",
           (unsigned long long)st.n_preemptions, res[0].usage.n_preempted, res[1].usage.n_preempted,
           res[2].usage.n_preempted, res[3].usage.n_preempted);
    kvi_sched_free(s);
    kvi_engine_free(e);
}

static void test_limits(kvi_model *m, const golden *g)
{
    kvi_engine *e = make_engine(m, 2, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, 1, 0, 2);
    kvi_error err = { 0 };
    static result res[4];
    memset(res, 0, sizeof res);
    kvi_request rq;
    uint64_t ids[3] = { 0 };
    for (int k = 0; k < 2; k++) {
        greedy_request(&rq, g[0].prompt, g[0].n_prompt, k == 0 ? 5 : 50, &res[k]);
        CHECK(kvi_sched_submit(s, &rq, &ids[k], &err) == 0, "submit %d: %s", k, err.msg);
    }
    greedy_request(&rq, g[0].prompt, g[0].n_prompt, 5, &res[2]);
    int rc = kvi_sched_submit(s, &rq, &ids[2], &err);
    CHECK(rc == KVI_E_QUEUE_FULL, "third request past queue_max 2: rc %d", rc);
    /* bad input */
    int32_t bad[3] = { 1, 99999, 5 };
    greedy_request(&rq, bad, 3, 5, &res[3]);
    rc = kvi_sched_submit(s, &rq, NULL, &err);
    CHECK(rc == KVI_E_INVALID && strstr(err.msg, "99999"), "bad token: rc %d '%s'", rc, err.msg);
    int32_t *longp = calloc(600, sizeof *longp);
    greedy_request(&rq, longp, 600, 5, &res[3]);
    rc = kvi_sched_submit(s, &rq, NULL, &err);
    CHECK(rc == KVI_E_CONTEXT_FULL && strstr(err.msg, "context_length_exceeded"), "long prompt: rc %d '%s'",
          rc, err.msg);
    free(longp);
    greedy_request(&rq, bad, 0, 5, &res[3]);
    CHECK(kvi_sched_submit(s, &rq, NULL, &err) == KVI_E_INVALID, "empty prompt accepted");

    /* first finishes by max_tokens; the second is cancelled mid-decode */
    for (int i = 0; i < 12; i++) kvi_sched_step(s, &err);
    CHECK(res[0].done && res[0].finish == KVI_FINISH_LENGTH && res[0].n == 5, "max_tokens 5: done %d n %d",
          res[0].done, res[0].n);
    CHECK(res[0].n == 5 && !memcmp(res[0].toks, g[0].greedy, 5 * sizeof(int32_t)), "first 5 golden tokens");
    CHECK(!res[1].done && res[1].n > 0, "second request running (%d tokens)", res[1].n);
    kvi_stats ks;
    kvi_stats_get(e, NULL, &ks);
    CHECK(ks.kv_blocks_used > 0, "the running request holds blocks");
    kvi_sched_cancel(s, ids[1]);
    kvi_sched_step(s, &err);
    CHECK(res[1].done && res[1].finish == KVI_FINISH_CANCELLED, "cancelled within one step");
    kvi_stats_get(e, NULL, &ks);
    CHECK(ks.kv_blocks_used == 0, "cancel freed every block (%d held)", ks.kv_blocks_used);

    /* on_token returning false stops the request */
    memset(&res[2], 0, sizeof res[2]);
    res[2].stop_after = 3;
    greedy_request(&rq, g[1].prompt, g[1].n_prompt, 0, &res[2]);
    CHECK(kvi_sched_submit(s, &rq, NULL, &err) == 0, "submit: %s", err.msg);
    run_until_done(s, 100);
    CHECK(res[2].finish == KVI_FINISH_STOP && res[2].n == 3 && res[2].usage.completion_tokens == 3,
          "stop from on_token: finish %d n %d", (int)res[2].finish, res[2].n);
    CHECK(res[2].usage.ttft_ms > 0 && res[2].usage.kv_bytes > 0, "usage: ttft %g kv %zu",
          res[2].usage.ttft_ms, res[2].usage.kv_bytes);

    /* free with a request still queued: on_done(CANCELLED) */
    memset(&res[3], 0, sizeof res[3]);
    greedy_request(&rq, g[2].prompt, g[2].n_prompt, 10, &res[3]);
    CHECK(kvi_sched_submit(s, &rq, NULL, &err) == 0, "submit: %s", err.msg);
    kvi_sched_free(s);
    CHECK(res[3].done && res[3].finish == KVI_FINISH_CANCELLED, "queued request cancelled by free");
    kvi_engine_free(e);
}

/* The engine thread: requests submitted from this thread, completion awaited. */
static void test_thread(kvi_model *m, const golden *g)
{
    kvi_engine *e = make_engine(m, 8, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, 8, 0, 0);
    kvi_error err = { 0 };
    CHECK(kvi_sched_start(s, &err) == 0, "start: %s", err.msg);
    static result res[N_GOLDEN];
    memset(res, 0, sizeof res);
    submit_goldens(s, g, res, 2000);
    wait_all_done(res, N_GOLDEN);
    for (int k = 0; k < N_GOLDEN; k++) check_golden(&g[k], &res[k], "engine thread", k);
    kvi_sched_free(s);
    kvi_engine_free(e);
}

/* Lanes: a cancel and a free while batches are in flight. */
static void test_lanes_in_flight(kvi_model *m, const golden *g)
{
    kvi_engine *e = make_engine(m, 4, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, 4, 16, 0);
    kvi_error err = { 0 };
    static result res[N_GOLDEN];
    memset(res, 0, sizeof res);
    uint64_t ids[N_GOLDEN] = { 0 };
    for (int k = 0; k < N_GOLDEN; k++) {
        kvi_request rq;
        greedy_request(&rq, g[k].prompt, g[k].n_prompt, g[k].n_greedy, &res[k]);
        CHECK(kvi_sched_submit(s, &rq, &ids[k], &err) == 0, "submit: %s", err.msg);
    }
    /* past the prefill chunks: every lane has a decode batch in flight after each step */
    for (int i = 0; i < 40; i++) kvi_sched_step(s, &err);
    CHECK(!res[1].done && res[1].n > 0, "%d lanes: request 2 decoding (%d tokens)", sched_lanes, res[1].n);
    kvi_sched_cancel(s, ids[1]);
    kvi_sched_step(s, &err);
    CHECK(res[1].done && res[1].finish == KVI_FINISH_CANCELLED, "%d lanes: cancelled within one step",
          sched_lanes);
    run_until_done(s, 5000);
    for (int k = 0; k < N_GOLDEN; k++)
        if (k != 1) check_golden(&g[k], &res[k], "lanes, one cancelled", k);
    kvi_stats ks;
    kvi_stats_get(e, NULL, &ks);
    CHECK(ks.kv_blocks_used == 0, "%d lanes, after a cancel: %d KV blocks still held", sched_lanes,
          ks.kv_blocks_used);
    /* free with batches in flight: every request ends, the engine has no launched step left */
    memset(res, 0, sizeof res);
    submit_goldens(s, g, res, 0);
    for (int i = 0; i < 30; i++) kvi_sched_step(s, &err);
    kvi_sched_free(s);
    for (int k = 0; k < N_GOLDEN; k++)
        CHECK(res[k].done && res[k].finish == KVI_FINISH_CANCELLED, "%d lanes, free: request %d finish %d",
              sched_lanes, k + 1, (int)res[k].finish);
    kvi_stats_get(e, NULL, &ks);
    CHECK(ks.kv_blocks_used == 0, "%d lanes, after free: %d KV blocks held", sched_lanes, ks.kv_blocks_used);
    kvi_seq *q = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(4);
    if (q && b) {
        kvi_batch_add(b, q, g[0].prompt[0], 0, true);
        CHECK(kvi_step(e, b, &err) == 0 && kvi_logits(e, 0), "kvi_step after free with lanes: %s", err.msg);
    }
    kvi_batch_free(b);
    kvi_seq_free(q);
    kvi_engine_free(e);
}

/* The engine's launch/finish: launched steps finish in order, each finish shows
 * its own step's logits (the bits of kvi_step on the same rows), and the limits. */
static void test_launch_finish(kvi_model *m, const golden *g)
{
    const int32_t nv = kvi_n_vocab(m);
    float *ref = malloc((size_t)3 * nv * sizeof *ref);
    kvi_engine *e = make_engine(m, KVI_STEP_DEPTH_MAX + 2, 0);
    kvi_batch *b = kvi_batch_create(64);
    if (!ref || !e || !b) goto out;
    kvi_error err = { 0 };
    kvi_seq *sq[KVI_STEP_DEPTH_MAX + 1];
    for (int i = 0; i <= KVI_STEP_DEPTH_MAX; i++) sq[i] = kvi_seq_create(e);
    /* reference: each golden prompt by kvi_step, its last row's logits */
    for (int k = 0; k < 3; k++) {
        kvi_batch_clear(b);
        for (int32_t p = 0; p < g[k].n_prompt; p++)
            kvi_batch_add(b, sq[k], g[k].prompt[p], p, p == g[k].n_prompt - 1);
        CHECK(kvi_step(e, b, &err) == 0, "reference step %d: %s", k, err.msg);
        const float *lg = kvi_logits(e, g[k].n_prompt - 1);
        if (lg) memcpy(ref + (size_t)k * nv, lg, (size_t)nv * sizeof *lg);
        kvi_seq_truncate(sq[k], 0);
    }
    CHECK(kvi_step_finish(e, &err) == KVI_E_INVALID, "finish with no launched step");
    CHECK(kvi_step_depth(e) == 1, "depth of a single process: %d", kvi_step_depth(e));
    /* three launched steps, batch reused between launches */
    for (int k = 0; k < 3; k++) {
        kvi_batch_clear(b);
        for (int32_t p = 0; p < g[k].n_prompt; p++)
            kvi_batch_add(b, sq[k], g[k].prompt[p], p, p == g[k].n_prompt - 1);
        CHECK(kvi_step_launch(e, b, &err) == 0, "launch %d: %s", k, err.msg);
        CHECK(kvi_seq_len(sq[k]) == g[k].n_prompt, "launch %d: length %d at launch", k, kvi_seq_len(sq[k]));
    }
    kvi_batch_clear(b);
    kvi_batch_add(b, sq[3], 1, 0, true);
    CHECK(kvi_step(e, b, &err) == KVI_E_INVALID, "kvi_step with launched steps unfinished");
    for (int k = 0; k < 3; k++) {
        CHECK(kvi_step_finish(e, &err) == 0, "finish %d: %s", k, err.msg);
        const float *lg = kvi_logits(e, g[k].n_prompt - 1);
        CHECK(lg && !memcmp(lg, ref + (size_t)k * nv, (size_t)nv * sizeof *lg),
              "finish %d: the logits are not those of kvi_step on the same rows", k);
        CHECK(kvi_logits(e, g[k].n_prompt) == NULL, "finish %d: a row past the step has logits", k);
    }
    /* the depth bound */
    int launched = 0;
    for (int k = 0; k <= KVI_STEP_DEPTH_MAX; k++) {
        kvi_batch_clear(b);
        kvi_batch_add(b, sq[k], 1, kvi_seq_len(sq[k]), true);
        const int rc = kvi_step_launch(e, b, &err);
        launched += rc == 0;
        if (k == KVI_STEP_DEPTH_MAX) CHECK(rc == KVI_E_INVALID, "launch past KVI_STEP_DEPTH_MAX: rc %d", rc);
    }
    CHECK(launched == KVI_STEP_DEPTH_MAX, "%d launches in flight, want %d", launched, KVI_STEP_DEPTH_MAX);
    for (int k = 0; k < launched; k++) CHECK(kvi_step_finish(e, &err) == 0, "finish: %s", err.msg);
    for (int i = 0; i <= KVI_STEP_DEPTH_MAX; i++) kvi_seq_free(sq[i]);
out:
    kvi_batch_free(b);
    kvi_engine_free(e);
    free(ref);
}

int main(void)
{
    golden g[N_GOLDEN];
    kvi_model *m = load_goldens_and_model(g);
    if (!m) return test_main_end();
    static result one[N_STREAMS], many[N_STREAMS];
    test_batch_invariance(m, g, one);
    test_preemption(m, g);
    test_limits(m, g);
    test_thread(m, g);
    test_launch_finish(m, g);
    for (sched_lanes = 2; sched_lanes <= 3; sched_lanes++) {
        test_batch_invariance(m, g, many);
        int same = 0;
        for (int i = 0; i < N_STREAMS; i++)
            same += many[i].n == one[i].n &&
                    !memcmp(many[i].toks, one[i].toks,
                            (size_t)(one[i].n < GEN_MAX + 16 ? one[i].n : GEN_MAX + 16) * sizeof(int32_t));
        CHECK(same == N_STREAMS, "%d lanes: %d of %d streams got the tokens of one lane", sched_lanes, same,
              N_STREAMS);
        test_preemption(m, g);
        test_thread(m, g);
        test_lanes_in_flight(m, g);
    }
    sched_lanes = 0;
    kvi_model_free(m);
    return test_main_end();
}
