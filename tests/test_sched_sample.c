/*
 * test_sched_sample.c — sampled requests (temperature, top-k, top-p, min-p, each
 * with its own seed) running together get exactly the tokens each gets alone.
 * Together, the scheduler draws their tokens on the engine's two worker threads
 * (sample_rows); alone, one request draws on the engine thread. Also the mix:
 * greedy and penalised requests beside them, and a request that stops from
 * on_token while others keep drawing.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "sched_util.h"

#include <stdlib.h>
#include <string.h>

enum { N = 16, GEN = 40 };

static void make_request(kvi_request *rq, const int32_t *prompt, int n, int i, result *r)
{
    greedy_request(rq, prompt, n, GEN, r);
    if (i % 4 == 3) return; /* greedy */
    kvi_sampler_params_default(&rq->sampling);
    rq->sampling.temp = i % 4 == 2 ? 1.3f : 0.8f;
    rq->sampling.seed = 1000 + (uint64_t)i;
    if (i % 8 == 1) rq->sampling.top_k = 0;             /* top-p over the whole row */
    if (i % 8 == 5) rq->sampling.repeat_penalty = 1.1f; /* the reference chain */
}

static void run(kvi_model *m, int n_req, int32_t prompts[N][24], const int *lens, const int *which,
                result *res)
{
    kvi_engine *e = make_engine(m, N, 0);
    if (!e) return;
    kvi_sched *s = make_sched(e, N, 0, 0);
    kvi_error err = { 0 };
    if (!s) {
        kvi_engine_free(e);
        return;
    }
    for (int k = 0; k < n_req; k++) {
        const int i = which[k];
        kvi_request rq;
        make_request(&rq, prompts[i], lens[i], i, &res[i]);
        CHECK(kvi_sched_submit(s, &rq, NULL, &err) == 0, "submit %d: %s", i, err.msg);
    }
    run_until_done(s, 2000);
    kvi_sched_free(s);
    kvi_engine_free(e);
}

int main(void)
{
    kvi_model *m = load_stories260k(NULL);
    if (!m) return test_main_end();
    static int32_t prompts[N][24];
    int lens[N], all[N];
    uint64_t rng = 0x5A3B1E;
    for (int i = 0; i < N; i++) {
        lens[i] = 4 + (int)(trand_u64(&rng) % 20);
        prompts[i][0] = 1;
        for (int k = 1; k < lens[i]; k++) prompts[i][k] = 3 + (int32_t)(trand_u64(&rng) % 500);
        all[i] = i;
    }
    static result together[N], alone[N];
    memset(together, 0, sizeof together);
    memset(alone, 0, sizeof alone);
    together[6].stop_after = 7; /* stops early while the others go on */
    alone[6].stop_after = 7;
    run(m, N, prompts, lens, all, together);
    for (int i = 0; i < N; i++) run(m, 1, prompts, lens, &all[i], alone);
    int sampled_differ = 0;
    for (int i = 0; i < N; i++) {
        const int want = i == 6 ? 7 : GEN;
        CHECK(together[i].done && alone[i].done && together[i].n == want && alone[i].n == want,
              "request %d: %d and %d tokens, want %d", i, together[i].n, alone[i].n, want);
        CHECK(!memcmp(together[i].toks, alone[i].toks, (size_t)want * sizeof(int32_t)),
              "request %d: tokens together differ from alone", i);
        if (i % 4 != 3 && i > 0 && memcmp(together[i].toks, together[0].toks, (size_t)GEN * sizeof(int32_t)))
            sampled_differ++;
    }
    /* the draws are real: the sampled requests do not all repeat one sequence */
    CHECK(sampled_differ > 0, "every sampled request gave request 0's tokens");
    kvi_model_free(m);
    return test_main_end();
}
