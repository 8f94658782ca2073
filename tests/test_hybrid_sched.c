/*
 * test_hybrid_sched.c — continuous batching of a hybrid model (qwen35 and qwen3next
 * goldens, ../shared/golden/arch): greedy requests of different prompt lengths give
 * the same tokens
 *  - each alone (one running sequence),
 *  - four at once, prefill chunks of 7 rows mixed with decode rows,
 *  - four at once in a KV budget so small that sequences are preempted (their
 *    blocks and recurrent state freed, recomputed later),
 *  - and a repeated prompt served from the prefix cache's state snapshot (fewer
 *    positions computed, cached_tokens > 0);
 * the state bytes held return to 0 once every request is done.
 */
#include "sched_util.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define N_REQ 4
#define GEN 24

static void run_set(kvi_model *m, int n_parallel, int batch, int blocks, int32_t prompts[N_REQ][64],
                    const int *lens, result *res, uint64_t *preempted)
{
    kvi_engine *e = blocks ? make_engine_blocks(m, n_parallel, blocks) : make_engine(m, n_parallel, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, n_parallel, batch, 0);
    if (!s) {
        kvi_engine_free(e);
        return;
    }
    kvi_request rq[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        memset(&res[i], 0, sizeof res[i]);
        greedy_request(&rq[i], prompts[i], lens[i], GEN, &res[i]);
        kvi_error err = { 0 };
        uint64_t id;
        CHECK(kvi_sched_submit(s, &rq[i], &id, &err) == 0, "submit %d: %s", i, err.msg);
    }
    run_until_done(s, 10000);
    kvi_sched_stats st;
    kvi_sched_stats_get(s, &st);
    if (preempted) *preempted = st.n_preemptions;
    kvi_sched_free(s);
    kvi_stats ks;
    kvi_stats_get(e, NULL, &ks);
    CHECK(ks.kv_bytes_state == 0, "%zu state bytes still held after every request", ks.kv_bytes_state);
    kvi_engine_free(e);
}

static void check_model(const char *rel)
{
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path(rel), &lp, &err);
    CHECK(m != NULL, "load %s: %s", rel, err.msg);
    if (!m) return;
    /* prompts from a fixed generator over the 512-token vocabulary, BOS first */
    int32_t prompts[N_REQ][64];
    const int lens[N_REQ] = { 5, 21, 37, 50 };
    uint64_t rng = 42;
    for (int i = 0; i < N_REQ; i++) {
        prompts[i][0] = 1;
        for (int k = 1; k < lens[i]; k++) prompts[i][k] = 3 + (int32_t)(trand_u64(&rng) % 509);
    }
    result alone[N_REQ], together[N_REQ], tight[N_REQ];
    for (int i = 0; i < N_REQ; i++) { /* each alone: its own engine */
        memset(&alone[i], 0, sizeof alone[i]);
        kvi_engine *e = make_engine(m, 1, 0);
        kvi_sched *s = e ? make_sched(e, 1, 0, 0) : NULL;
        if (s) {
            kvi_request rq;
            greedy_request(&rq, prompts[i], lens[i], GEN, &alone[i]);
            uint64_t id;
            CHECK(kvi_sched_submit(s, &rq, &id, &err) == 0, "submit: %s", err.msg);
            run_until_done(s, 10000);
        }
        kvi_sched_free(s);
        kvi_engine_free(e);
        CHECK(alone[i].n == GEN, "%s: request %d alone gave %d tokens", rel, i, alone[i].n);
    }
    uint64_t pre_tight = 0;
    run_set(m, N_REQ, 7, 0, prompts, lens, together, NULL);
    /* 12 blocks of 16 positions: the four (at most 74 positions, 5 blocks each) cannot all run */
    run_set(m, N_REQ, 7, 12, prompts, lens, tight, &pre_tight);
    CHECK(pre_tight > 0, "%s: no preemption in a budget of 12 blocks", rel);
    for (int i = 0; i < N_REQ; i++) {
        CHECK(together[i].n == GEN && memcmp(together[i].toks, alone[i].toks, GEN * sizeof(int32_t)) == 0,
              "%s: request %d differs when batched with others", rel, i);
        CHECK(tight[i].n == GEN && memcmp(tight[i].toks, alone[i].toks, GEN * sizeof(int32_t)) == 0,
              "%s: request %d differs under preemption", rel, i);
    }
    printf("%s: %d requests alone == batched (chunks of 7) == preempted (%llu preemptions)\n", rel, N_REQ,
           (unsigned long long)pre_tight);

    /* the same prompt twice on one engine: the second resumes from the snapshot */
    kvi_engine *e = make_engine(m, 2, 0);
    kvi_sched *s = e ? make_sched(e, 2, 0, 0) : NULL;
    if (s) {
        result r1 = { 0 }, r2 = { 0 };
        kvi_request q1, q2;
        uint64_t id;
        greedy_request(&q1, prompts[3], lens[3], GEN, &r1);
        CHECK(kvi_sched_submit(s, &q1, &id, &err) == 0, "submit: %s", err.msg);
        run_until_done(s, 10000);
        greedy_request(&q2, prompts[3], lens[3], GEN, &r2);
        CHECK(kvi_sched_submit(s, &q2, &id, &err) == 0, "submit: %s", err.msg);
        run_until_done(s, 10000);
        CHECK(r2.usage.cached_tokens == 48, "%s: the repeated prompt of 50 reused %d positions (expected 48)",
              rel, r2.usage.cached_tokens);
        CHECK(r1.n == GEN && r2.n == GEN && memcmp(r1.toks, alone[3].toks, GEN * sizeof(int32_t)) == 0 &&
                  memcmp(r2.toks, alone[3].toks, GEN * sizeof(int32_t)) == 0,
              "%s: the repeated prompt's tokens differ", rel);
    }
    kvi_sched_free(s);
    kvi_engine_free(e);
    kvi_model_free(m);
}

int main(void)
{
    check_model("golden/arch/qwen35-f32.gguf");
    check_model("golden/arch/qwen3next-q8_0.gguf");
    return test_main_end();
}
