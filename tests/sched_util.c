/*
 * sched_util.c — golden requests, callbacks, engines and the step loop shared by
 * the scheduler tests (see sched_util.h).
 */
#include "sched_util.h"

#include "testutil.h"

#include <string.h>

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

kvi_engine *make_engine(kvi_model *m, int n_seq, size_t budget)
{
    kvi_engine_params p;
    kvi_engine_params_default(&p);
    p.kv_type_k = p.kv_type_v = KVI_TYPE_F32;   /* the golden run is fp32 throughout */
    p.n_ctx = 512;
    p.n_threads = 2;
    p.n_seq_max = n_seq;
    p.kv_budget_bytes = budget;
    kvi_error err = {0};
    kvi_engine *e = kvi_engine_create(m, &p, &err);
    CHECK(e != NULL, "engine: %s", err.msg);
    return e;
}

void greedy_request(kvi_request *rq, const int32_t *prompt, int n, int max_tokens, result *r)
{
    memset(rq, 0, sizeof *rq);
    rq->prompt = prompt;
    rq->n_prompt = n;
    kvi_sampler_params_default(&rq->sampling);
    rq->sampling.temp = 0.0f;
    rq->max_tokens = max_tokens;
    rq->ignore_eos = true;   /* the golden continuations run past EOS */
    rq->on_token = sched_on_token;
    rq->on_done = sched_on_done;
    rq->user = r;
}

int run_until_done(kvi_sched *s, int max_steps)
{
    int steps = 0, alive;
    kvi_error err = {0};
    while ((alive = kvi_sched_step(s, &err)) > 0 && steps < max_steps) steps++;
    CHECK(alive == 0, "scheduler still has %d requests after %d steps", alive, steps);
    return steps;
}
