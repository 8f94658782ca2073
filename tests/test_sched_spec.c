/*
 * test_sched_spec.c — speculative decoding inside the continuous-batching
 * scheduler (kvi_sched_set_spec) is lossless and visible.
 *
 *  1. n-gram lookup: the four golden greedy requests (llama2.c's continuations,
 *     ../shared/golden/stories260K) get exactly their golden tokens while 12
 *     other streams (greedy and sampled, some opted out with no_spec, one with
 *     mirostat 2, whose mu verification cannot replay) share every batch, with
 *     small prefill chunks; drafts were verified and some accepted; the
 *     per-request usage sums to the scheduler's counters; opted-out and mirostat
 *     requests never drafted.
 *  2. stories260K as its own draft (a shared draft engine, n_seq_max = parallel):
 *     the same golden identity, and every draft accepted (p == q bit for bit by
 *     batch invariance), greedy and sampled.
 *  3. Under preemption (a KV budget that holds about two golden sequences) and
 *     with max_tokens shorter than a round: golden tokens unchanged, the count
 *     exact, every KV block returned.
 *  4. Bad settings are refused; the engine thread path works.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "sched_util.h"

#include <stdlib.h>
#include <string.h>

static void check_golden(const golden *g, const result *r, int n_expect, const char *what, int gi)
{
    int match = 0;
    while (match < n_expect && match < r->n && r->toks[match] == g->greedy[match]) match++;
    CHECK(r->done && r->finish == KVI_FINISH_LENGTH, "%s case %d: finish %d (done %d)", what, gi + 1,
          (int)r->finish, r->done);
    CHECK(match == n_expect && r->n == n_expect, "%s case %d: %d of %d golden tokens (got %d)", what, gi + 1,
          match, n_expect, r->n);
    CHECK(r->usage.completion_tokens == n_expect, "%s case %d: usage completion %d", what, gi + 1,
          r->usage.completion_tokens);
}

/* 4 golden requests among 16 streams, chunked prefill; draft == NULL: n-gram. */
static void test_mixed(kvi_model *m, const golden *g, kvi_engine *draft, const char *what)
{
    enum { N = 16 };
    kvi_engine *e = make_engine(m, N, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, N, 40, 0); /* drafts and prefill chunks compete for the rows */
    kvi_error err = { 0 };
    if (!s) {
        kvi_engine_free(e);
        return;
    }
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.draft_max = 6;
    CHECK(kvi_sched_set_spec(s, &pp, draft, &err) == 0, "%s: set_spec: %s", what, err.msg);
    static result res[N];
    memset(res, 0, sizeof res);
    static int32_t other[N][48];
    uint64_t rng = 0x5eed;
    bool opted_out[N] = { false }, stateful[N] = { false }, sampled[N] = { false };
    for (int i = 0; i < N; i++) {
        kvi_request rq;
        if (i % 4 == 0) {
            const golden *gg = &g[i / 4];
            greedy_request(&rq, gg->prompt, gg->n_prompt, gg->n_greedy, &res[i]);
        } else {
            /* a repeated phrase, so that prompt lookup finds something */
            const int n = 8 + (int)(trand_u64(&rng) % 30);
            other[i][0] = 1;
            for (int k = 1; k < n; k++)
                other[i][k] = k < 6 ? 3 + (int32_t)(trand_u64(&rng) % 500) : other[i][1 + (k - 1) % 5];
            greedy_request(&rq, other[i], n, 10 + (int)(trand_u64(&rng) % 80), &res[i]);
            if (i % 2) {
                rq.sampling.temp = 0.9f;
                rq.sampling.seed = (uint64_t)i;
                sampled[i] = true;
            }
            if (i == 5 || i == 10) rq.no_spec = opted_out[i] = true;
            if (i == 7) {
                rq.sampling.mirostat = 2;
                stateful[i] = true;
            }
        }
        CHECK(kvi_sched_submit(s, &rq, NULL, &err) == 0, "%s: submit %d: %s", what, i, err.msg);
    }
    run_until_done(s, 4000);
    for (int k = 0; k < N_GOLDEN; k++) check_golden(&g[k], &res[k * 4], g[k].n_greedy, what, k);
    kvi_sched_stats st;
    kvi_sched_stats_get(s, &st);
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < N; i++) {
        drafted += (uint64_t)res[i].usage.spec_drafted;
        accepted += (uint64_t)res[i].usage.spec_accepted;
        CHECK(res[i].usage.spec_accepted <= res[i].usage.spec_drafted, "%s: request %d accepted %d of %d",
              what, i, res[i].usage.spec_accepted, res[i].usage.spec_drafted);
        if (opted_out[i] || stateful[i])
            CHECK(res[i].usage.spec_drafted == 0, "%s: request %d (no_spec %d, mirostat %d) drafted %d", what,
                  i, opted_out[i], stateful[i], res[i].usage.spec_drafted);
        if (draft && !opted_out[i] && !stateful[i])
            CHECK(res[i].usage.spec_accepted == res[i].usage.spec_drafted,
                  "%s: request %d (sampled %d): its own draft accepted %d of %d", what, i, sampled[i],
                  res[i].usage.spec_accepted, res[i].usage.spec_drafted);
        CHECK(res[i].done, "%s: request %d done", what, i);
    }
    CHECK(drafted == st.n_spec_drafted && accepted == st.n_spec_accepted,
          "%s: usage sums %llu/%llu, scheduler counters %llu/%llu", what, (unsigned long long)accepted,
          (unsigned long long)drafted, (unsigned long long)st.n_spec_accepted,
          (unsigned long long)st.n_spec_drafted);
    CHECK(st.n_spec_drafted > 0 && st.n_spec_accepted > 0, "%s: drafted %llu accepted %llu", what,
          (unsigned long long)st.n_spec_drafted, (unsigned long long)st.n_spec_accepted);
    for (int k = 0; k < N_GOLDEN; k++)
        CHECK(res[k * 4].usage.spec_drafted > 0, "%s: golden case %d drafted nothing", what, k + 1);
    CHECK(st.spec_cost_row >= 0.0 && st.spec_cost_row <= 2.0, "%s: cost_row %g", what, st.spec_cost_row);
    CHECK(st.engine.kv_blocks_used == 0, "%s: %d KV blocks still held", what, st.engine.kv_blocks_used);
    printf("%s: %llu steps, drafted %llu, accepted %llu, cost_row now %.3f\n", what,
           (unsigned long long)st.n_steps, (unsigned long long)st.n_spec_drafted,
           (unsigned long long)st.n_spec_accepted, st.spec_cost_row);
    kvi_sched_free(s);
    kvi_engine_free(e);
}

/* A KV budget for about two golden sequences; max_tokens not a round's multiple. */
static void test_preemption(kvi_model *m, const golden *g)
{
    kvi_engine *e = make_engine_blocks(m, 4, 34);
    if (!e) return;
    kvi_sched *s = make_sched(e, 4, 16, 0);
    kvi_error err = { 0 };
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.adapt = false; /* always draft K: the most rows the pool must hold */
    CHECK(kvi_sched_set_spec(s, &pp, NULL, &err) == 0, "set_spec: %s", err.msg);
    static result res[N_GOLDEN + 1];
    memset(res, 0, sizeof res);
    submit_goldens(s, g, res, 0);
    kvi_request rq;
    greedy_request(&rq, g[0].prompt, g[0].n_prompt, 7, &res[N_GOLDEN]);
    CHECK(kvi_sched_submit(s, &rq, NULL, &err) == 0, "submit: %s", err.msg);
    run_until_done(s, 5000);
    for (int k = 0; k < N_GOLDEN; k++) check_golden(&g[k], &res[k], g[k].n_greedy, "spec preemption", k);
    check_golden(&g[0], &res[N_GOLDEN], 7, "spec max_tokens 7", 0);
    kvi_sched_stats st;
    kvi_sched_stats_get(s, &st);
    CHECK(st.n_preemptions > 0, "no preemption happened (budget too large for the test)");
    CHECK(st.n_spec_drafted > 0, "nothing drafted under preemption");
    CHECK(st.engine.kv_blocks_used == 0, "%d KV blocks still held", st.engine.kv_blocks_used);
    printf("spec preemption: %llu preemptions, drafted %llu accepted %llu\n",
           (unsigned long long)st.n_preemptions, (unsigned long long)st.n_spec_drafted,
           (unsigned long long)st.n_spec_accepted);
    kvi_sched_free(s);
    kvi_engine_free(e);
}

/* Bad settings refused; the engine thread with its own draft. */
static void test_settings_and_thread(kvi_model *m, const golden *g)
{
    kvi_engine *e = make_engine(m, 4, 0);
    kvi_engine *de = make_engine(m, 4, 0);
    if (!e || !de) {
        kvi_engine_free(e);
        kvi_engine_free(de);
        return;
    }
    kvi_sched *s = make_sched(e, 4, 0, 0);
    kvi_error err = { 0 };
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.draft_max = 0;
    CHECK(kvi_sched_set_spec(s, &pp, NULL, &err) == KVI_E_INVALID && strstr(err.msg, "draft_max"),
          "draft_max 0 refused: '%s'", err.msg);
    kvi_spec_params_default(&pp);
    pp.draft_max = 4;
    CHECK(kvi_sched_set_spec(s, &pp, de, &err) == 0, "set_spec: %s", err.msg);
    CHECK(kvi_sched_start(s, &err) == 0, "start: %s", err.msg);
    CHECK(kvi_sched_set_spec(s, &pp, NULL, &err) == KVI_E_INVALID, "set_spec after start refused");
    static result res[N_GOLDEN];
    memset(res, 0, sizeof res);
    submit_goldens(s, g, res, 0);
    wait_all_done(res, N_GOLDEN);
    for (int k = 0; k < N_GOLDEN; k++) {
        check_golden(&g[k], &res[k], g[k].n_greedy, "spec engine thread", k);
        CHECK(res[k].usage.spec_drafted > 0 && res[k].usage.spec_accepted == res[k].usage.spec_drafted,
              "own draft on the engine thread: accepted %d of %d", res[k].usage.spec_accepted,
              res[k].usage.spec_drafted);
    }
    kvi_sched_free(s);
    kvi_stats ks;
    kvi_stats_get(de, NULL, &ks);
    CHECK(ks.kv_blocks_used == 0, "draft engine: %d KV blocks still held", ks.kv_blocks_used);
    kvi_engine_free(de);
    kvi_engine_free(e);
}

int main(void)
{
    golden g[N_GOLDEN];
    kvi_model *m = load_goldens_and_model(g);
    if (!m) return test_main_end();
    test_mixed(m, g, NULL, "ngram, 16 streams");
    kvi_engine *de = make_engine(m, 16, 0);
    if (de) test_mixed(m, g, de, "own draft, 16 streams");
    if (de) {
        kvi_stats ks;
        kvi_stats_get(de, NULL, &ks);
        CHECK(ks.kv_blocks_used == 0, "draft engine: %d KV blocks still held", ks.kv_blocks_used);
    }
    kvi_engine_free(de);
    test_preemption(m, g);
    test_settings_and_thread(m, g);
    kvi_model_free(m);
    return test_main_end();
}
