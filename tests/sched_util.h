/*
 * sched_util.h — what the scheduler tests share: llama2.c's greedy golden
 * requests on stories260K (../shared/golden/stories260K/case<N>.json), a result
 * record filled by the request callbacks, fp32-KV engines and stepping to the end.
 *
 * Invariants: result.toks holds the first GEN_MAX + 16 tokens, result.n counts
 * all of them; on_done sets done/finish/usage/err_code under sched_mu and
 * broadcasts sched_cv (engine-thread tests wait on it).
 */
#ifndef KVI_TEST_SCHED_UTIL_H
#define KVI_TEST_SCHED_UTIL_H

#include "kvinfer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define N_GOLDEN 4
#define GEN_MAX 200

typedef struct golden {
    int32_t prompt[64]; /* [n_prompt] token ids */
    int n_prompt;
    int32_t greedy[GEN_MAX]; /* [n_greedy] llama2.c's greedy continuation */
    int n_greedy;
} golden;

typedef struct result {
    int32_t toks[GEN_MAX + 16]; /* first tokens received */
    int n;                      /* tokens received */
    int stop_after;             /* on_token returns false after this many (0: never) */
    bool done;
    kvi_finish finish;
    kvi_usage usage;
    int err_code;
} result;

extern pthread_mutex_t sched_mu;
extern pthread_cond_t sched_cv;

bool sched_on_token(void *user, int32_t tok);
void sched_on_done(void *user, kvi_finish f, const kvi_usage *u, const kvi_error *err);

/* Golden case i (0-based) into g; false when the file is missing. */
bool load_golden(golden *g, int i);
/* The N_GOLDEN golden cases into g[] (each CHECKed) and stories260K (CHECKed);
 * the model, NULL when it did not load. */
kvi_model *load_goldens_and_model(golden *g);
/* fp32 K/V (as the golden run), n_ctx 512, 2 threads, n_seq sequences, KV
 * budget in bytes (0: none); CHECKs the creation. */
kvi_engine *make_engine(kvi_model *m, int n_seq, size_t budget);
/* make_engine with a KV budget of `blocks` KV blocks (their size read from a probe
 * engine), plus n_seq recurrent states for a hybrid model. */
kvi_engine *make_engine_blocks(kvi_model *m, int n_seq, int blocks);
/* A scheduler on e: n_parallel running, batch_tokens rows a step and queue_max
 * waiting where > 0 (else the defaults), sched_lanes lanes (0: the default);
 * CHECKs the creation. */
extern int sched_lanes;
kvi_sched *make_sched(kvi_engine *e, int n_parallel, int batch_tokens, int queue_max);
/* A greedy request (ignore_eos: the golden runs pass EOS) reporting into r. */
void greedy_request(kvi_request *rq, const int32_t *prompt, int n, int max_tokens, result *r);
/* Steps until nothing is alive or max_steps; CHECKs that all finished; the steps taken. */
int run_until_done(kvi_sched *s, int max_steps);
/* Submits golden case k's greedy request (all its golden tokens) into res[k] for
 * every k, CHECKing each submission; sleeps gap_us after each when > 0. */
void submit_goldens(kvi_sched *s, const golden *g, result *res, unsigned gap_us);
/* Waits on sched_cv until res[0..n) are all done (a scheduler on its engine thread). */
void wait_all_done(const result *res, int n);

#endif
