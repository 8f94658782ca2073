/*
 * sched_util.c — golden requests, callbacks, engines and the step loop shared by
 * the scheduler tests (see sched_util.h).
 */
#include "sched_util.h"

#include "testutil.h"

#include <string.h>
#include <unistd.h>

pthread_mutex_t sched_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t sched_cv = PTHREAD_COND_INITIALIZER;

bool sched_on_token(void *user, int32_t tok)
{
    result *r = user;
    if (r->n < GEN_MAX + 16) r->toks[r->n] = tok;
    r->n++;
    return !(r->stop_after > 0 && r->n >= r->stop_after);
}

void sched_on_done(void *user, kvi_finish f, const kvi_usage *u, const kvi_error *err)
{
    result *r = user;
    pthread_mutex_lock(&sched_mu);
    r->finish = f;
    r->usage = *u;
    r->err_code = err ? err->code : 0;
    r->done = true;
    pthread_cond_broadcast(&sched_cv);
    pthread_mutex_unlock(&sched_mu);
}

bool load_golden(golden *g, int i)
{
    char rel[64];
    snprintf(rel, sizeof rel, "golden/stories260K/case%d.json", i + 1);
    cJSON *j = load_json(shared_path(rel));
    if (!j) return false;
    const cJSON *p = cJSON_GetObjectItem(j, "prompt_tokens"), *t = cJSON_GetObjectItem(j, "greedy_tokens");
    g->n_prompt = cJSON_GetArraySize(p);
    g->n_greedy = cJSON_GetArraySize(t);
    if (g->n_prompt > 64) g->n_prompt = 64;
    if (g->n_greedy > GEN_MAX) g->n_greedy = GEN_MAX;
    for (int k = 0; k < g->n_prompt; k++) g->prompt[k] = cJSON_GetArrayItem(p, k)->valueint;
    for (int k = 0; k < g->n_greedy; k++) g->greedy[k] = cJSON_GetArrayItem(t, k)->valueint;
    cJSON_Delete(j);
    return true;
}

kvi_model *load_goldens_and_model(golden *g)
{
    for (int k = 0; k < N_GOLDEN; k++) CHECK(load_golden(&g[k], k), "golden case %d", k + 1);
    return load_stories260k(NULL);
}

kvi_engine *make_engine(kvi_model *m, int n_seq, size_t budget)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, n_seq, 512); /* the golden run is fp32 throughout */
    p.kv_budget_bytes = budget;
    return engine_create_checked(m, &p);
}

void greedy_request(kvi_request *rq, const int32_t *prompt, int n, int max_tokens, result *r)
{
    memset(rq, 0, sizeof *rq);
    rq->prompt = prompt;
    rq->n_prompt = n;
    kvi_sampler_params_default(&rq->sampling);
    rq->sampling.temp = 0.0f;
    rq->max_tokens = max_tokens;
    rq->ignore_eos = true; /* the golden continuations run past EOS */
    rq->on_token = sched_on_token;
    rq->on_done = sched_on_done;
    rq->user = r;
}

int run_until_done(kvi_sched *s, int max_steps)
{
    int steps = 0, alive;
    kvi_error err = { 0 };
    while ((alive = kvi_sched_step(s, &err)) > 0 && steps < max_steps) steps++;
    CHECK(alive == 0, "scheduler still has %d requests after %d steps", alive, steps);
    return steps;
}

kvi_engine *make_engine_blocks(kvi_model *m, int n_seq, int blocks)
{
    kvi_stats ks;
    kvi_engine *probe = make_engine(m, 1, 0);
    if (!probe) return NULL;
    kvi_stats_get(probe, NULL, &ks);
    kvi_engine_free(probe);
    const size_t block_bytes = ks.kv_bytes_per_token * (size_t)ks.kv_block_size;
    /* hybrid models: the recurrent states of n_seq sequences are reserved beside the blocks */
    return make_engine(m, n_seq, block_bytes * (size_t)blocks + ks.kv_bytes_state_seq * (size_t)n_seq);
}

int sched_lanes = 0;

kvi_sched *make_sched(kvi_engine *e, int n_parallel, int batch_tokens, int queue_max)
{
    kvi_sched_params sp;
    kvi_sched_params_default(&sp);
    sp.n_lanes = sched_lanes;
    sp.n_parallel = n_parallel;
    if (batch_tokens > 0) sp.batch_tokens = batch_tokens;
    if (queue_max > 0) sp.queue_max = queue_max;
    kvi_error err = { 0 };
    kvi_sched *s = kvi_sched_create(e, &sp, &err);
    CHECK(s != NULL, "sched: %s", err.msg);
    return s;
}

void submit_goldens(kvi_sched *s, const golden *g, result *res, unsigned gap_us)
{
    kvi_error err = { 0 };
    for (int k = 0; k < N_GOLDEN; k++) {
        kvi_request rq;
        greedy_request(&rq, g[k].prompt, g[k].n_prompt, g[k].n_greedy, &res[k]);
        CHECK(kvi_sched_submit(s, &rq, NULL, &err) == 0, "submit: %s", err.msg);
        if (gap_us > 0) usleep(gap_us);
    }
}

void wait_all_done(const result *res, int n)
{
    pthread_mutex_lock(&sched_mu);
    for (int k = 0; k < n; k++)
        while (!res[k].done) pthread_cond_wait(&sched_cv, &sched_mu);
    pthread_mutex_unlock(&sched_mu);
}
