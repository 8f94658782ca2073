/*
 * test_threadpool.c — the worker pool's contract under scheduling it does not
 * control: pools of 1 to 8 threads on this machine's cores (oversubscribed, so
 * workers often wake late), with and without two busy threads competing for
 * the cores:
 *  - every run calls fn exactly once per part k = 0 .. n-1, with nth = n;
 *  - a part's writes are visible to the caller when tpool_run returns;
 *  - per-thread scratch keeps its address between runs;
 *  - the result of a computation split by (k, n) equals the sequential one bit
 *    for bit, run after run.
 */
#include "testutil.h"

#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { N_RUNS = 3000, LEN = 4096 };

typedef struct {
    tpool *p;
    atomic_int calls[8];
    atomic_int bad_nth;
    int n;
    float *out;
    const float *in;
    void *scratch_seen[8];
    atomic_int scratch_bad;
} job;

static void work(void *ctx, int k, int nth)
{
    job *j = ctx;
    if (nth != j->n) atomic_fetch_add(&j->bad_nth, 1);
    atomic_fetch_add(&j->calls[k], 1);
    float *sc = tpool_scratch(j->p, k, 256);
    if (!sc || (j->scratch_seen[k] && j->scratch_seen[k] != sc)) atomic_fetch_add(&j->scratch_bad, 1);
    j->scratch_seen[k] = sc;
    /* rows [k * LEN / nth, (k + 1) * LEN / nth): a fixed order per row */
    for (int i = k * LEN / nth; i < (k + 1) * LEN / nth; i++) {
        float acc = 0.0f;
        for (int t = 0; t < 16; t++) acc = acc * 0.5f + j->in[(i * 7 + t) % LEN];
        sc[i % 64] = acc;
        j->out[i] = acc + sc[i % 64] * 0.25f;
    }
}

static atomic_bool g_stop;

static void *hog(void *arg)
{
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load(&g_stop)) x++;
    return NULL;
}

static void run_pools(const char *what)
{
    float *in = malloc(sizeof(float) * LEN), *ref = malloc(sizeof(float) * LEN);
    for (int i = 0; i < LEN; i++) in[i] = (float)((i * 2654435761u) % 1000) / 997.0f - 0.5f;
    for (int i = 0; i < LEN; i++) {
        float acc = 0.0f;
        for (int t = 0; t < 16; t++) acc = acc * 0.5f + in[(i * 7 + t) % LEN];
        ref[i] = acc + acc * 0.25f;
    }
    for (int n = 1; n <= 8; n++) {
        job *j = calloc(1, sizeof *j);
        j->p = tpool_create(n);
        j->n = tpool_size(j->p);
        j->in = in;
        j->out = malloc(sizeof(float) * LEN);
        int wrong_calls = 0, wrong_bits = 0;
        for (int r = 0; r < N_RUNS; r++) {
            for (int k = 0; k < 8; k++) atomic_store(&j->calls[k], 0);
            memset(j->out, 0, sizeof(float) * LEN);
            tpool_run(j->p, work, j);
            for (int k = 0; k < 8; k++) wrong_calls += atomic_load(&j->calls[k]) != (k < j->n ? 1 : 0);
            wrong_bits += memcmp(j->out, ref, sizeof(float) * LEN) != 0;
        }
        CHECK(j->n == n, "%s: pool of %d has %d threads", what, n, j->n);
        CHECK(wrong_calls == 0, "%s, %d threads: %d slot counts other than once per run", what, n,
              wrong_calls);
        CHECK(wrong_bits == 0, "%s, %d threads: %d of %d runs differ from the sequential result", what, n,
              wrong_bits, N_RUNS);
        CHECK(atomic_load(&j->bad_nth) == 0, "%s, %d threads: nth != pool size", what, n);
        CHECK(atomic_load(&j->scratch_bad) == 0, "%s, %d threads: a slot's scratch moved or was missing",
              what, n);
        tpool_free(j->p);
        free(j->out);
        free(j);
    }
    free(in);
    free(ref);
}

int main(void)
{
    run_pools("quiet");
    atomic_store(&g_stop, false);
    pthread_t h[2];
    for (int i = 0; i < 2; i++) pthread_create(&h[i], NULL, hog, NULL);
    run_pools("two busy threads");
    atomic_store(&g_stop, true);
    for (int i = 0; i < 2; i++) pthread_join(h[i], NULL);
    return test_main_end();
}
