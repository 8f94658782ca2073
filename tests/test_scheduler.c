/*
 * test_scheduler.c — continuous batching against llama2.c's greedy continuations
 * (../shared/golden/stories260K): each golden request must get exactly its
 * golden tokens while 44 other streams share every batch, with chunked prefill,
 * under preemption (a KV budget too small for all), and on the engine thread.
 * Also: queue limit, cancellation, stop from on_token, max_tokens, bad input,
 * and every KV block returned at the end.
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

/* 4 golden greedy requests among 48 streams; batch_tokens small so prompts are chunked. */
static void test_batch_invariance(kvi_model *m, const golden *g)
{
    enum { N = 48 };
    kvi_engine *e = make_engine(m, N, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, N, 56, 0); /* 48 decode rows + 8 prefill rows at most */
    kvi_error err = { 0 };
    static result res[N];
    memset(res, 0, sizeof res);
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
    for (int k = 0; k < N_GOLDEN; k++) check_golden(&g[k], &res[k * 12], "48 streams", k);
    kvi_sched_stats st;
    kvi_sched_stats_get(s, &st);
    CHECK(st.n_done == N && st.n_running == 0 && st.n_waiting == 0, "stats: done %llu running %d waiting %d",
          (unsigned long long)st.n_done, st.n_running, st.n_waiting);
    CHECK(st.engine.kv_blocks_used == 0, "%d KV blocks still held", st.engine.kv_blocks_used);
    /* decode rows are never starved: fewer steps than prompts+gens serially would take */
    CHECK(steps < 400, "%d steps for 48 streams of at most 200 tokens", steps);
    printf("48 streams: %d steps, %llu prefill rows, %llu decode rows\n", steps,
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
    CHECK(st.engine.kv_blocks_used == 0, "%d KV blocks still held", st.engine.kv_blocks_used);
    printf("preemption: %llu preemptions, golden tokens unchanged\n", (unsigned long long)st.n_preemptions);
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

int main(void)
{
    golden g[N_GOLDEN];
    kvi_model *m = load_goldens_and_model(g);
    if (!m) return test_main_end();
    test_batch_invariance(m, g);
    test_preemption(m, g);
    test_limits(m, g);
    test_thread(m, g);
    kvi_model_free(m);
    return test_main_end();
}
