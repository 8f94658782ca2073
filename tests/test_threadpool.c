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
 * And the serial fallback: workers made late on purpose (a part run off the
 * caller's thread sleeps 3 ms, as a worker the OS descheduled would stall) turn
 * the pool serial — every part on the caller, each still once with nth = n, the
 * same bits — and once the workers are prompt again a probe turns it parallel.
 * On a full CPU (a spinning thread per core beside the pool, so /proc/loadavg
 * counts more runnable threads than cores) the first slow window turns the pool
 * serial at once, and it does not wake its workers to probe while the CPU stays
 * full (within the 2.56 s between forced probes, counted from the trial: a pool
 * created seconds before behaves as a new one). Where /proc/loadavg does not
 * show the spinning threads (a sandbox) only the measured fallback is checked.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "testutil.h"

#include "base/clock.h"
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

typedef struct {
    pthread_t caller;
    atomic_int off_caller; /* parts of this run that ran on another thread */
    atomic_int calls[2];
    atomic_int bad_nth;
    int stall;     /* a part off the caller's thread sleeps 3 ms */
    double out[2]; /* part k's sum */
} lag_job;

static void lag_work(void *ctx, int k, int nth)
{
    lag_job *j = ctx;
    if (nth != 2) atomic_fetch_add(&j->bad_nth, 1);
    atomic_fetch_add(&j->calls[k], 1);
    if (!pthread_equal(pthread_self(), j->caller)) {
        atomic_fetch_add(&j->off_caller, 1);
        if (j->stall) nanosleep(&(struct timespec){ .tv_nsec = 3000000 }, NULL);
    }
    double acc = 0.0; /* about 0.2 ms of work, the same numbers for a part wherever it runs */
    for (int i = 0; i < 200000; i++) acc += (double)((i * (k + 3)) % 1009) * 1e-3;
    j->out[k] = acc;
}

static int lag_run(tpool *p, lag_job *j, const double ref[2], int *wrong)
{
    atomic_store(&j->off_caller, 0);
    atomic_store(&j->calls[0], 0);
    atomic_store(&j->calls[1], 0);
    j->out[0] = j->out[1] = -1.0;
    tpool_run(p, lag_work, j);
    *wrong += atomic_load(&j->calls[0]) != 1 || atomic_load(&j->calls[1]) != 1 || j->out[0] != ref[0] ||
              j->out[1] != ref[1];
    return atomic_load(&j->off_caller);
}

static double now_s(void) { return kvi_time_ms() / 1000.0; }

static void serial_fallback(void)
{
    tpool *p = tpool_create(2);
    lag_job *j = calloc(1, sizeof *j);
    j->caller = pthread_self();
    double ref[2];
    for (int k = 0; k < 2; k++) { /* the parts computed here, sequentially */
        j->out[k] = -1.0;
        lag_work(j, k, 2);
        ref[k] = j->out[k];
    }
    int wrong = 0, serial_runs = 0;
    j->stall = 1;
    /* 800 runs: the first three windows (96 runs of 3.2 ms) are late before the
     * trial, and each probe's wake-up and budget cost some 10 parallel runs */
    for (int r = 0; r < 800; r++) serial_runs += lag_run(p, j, ref, &wrong) == 0;
    tpool_stats st;
    tpool_get_stats(p, &st);
    CHECK(st.to_serial >= 1 && st.runs_serial >= 1,
          "late workers: the pool never turned serial (%llu switches, %llu serial runs)", st.to_serial,
          st.runs_serial);
    CHECK(serial_runs >= 480, "late workers: only %d of 800 runs kept every part on the caller", serial_runs);
    printf("late workers: %d of 800 runs on the caller alone\n", serial_runs);
    j->stall = 0; /* prompt workers: a probe within the back-off cap turns it parallel (on a CPU
                     a neighbouring test fills, within the 2.56 s of a forced probe) */
    int parallel = 0;
    for (const double t0 = now_s(); now_s() - t0 < 12.0 && parallel < 50;)
        parallel += lag_run(p, j, ref, &wrong) > 0;
    CHECK(parallel >= 50, "prompt workers again: the pool stayed serial (%d parallel runs)", parallel);
    CHECK(wrong == 0, "serial fallback: %d runs with a part called other than once or other bits", wrong);
    CHECK(atomic_load(&j->bad_nth) == 0, "serial fallback: a part saw nth != 2");
    tpool_free(p);
    free(j);
}

/* The running count of /proc/loadavg ("0.00 0.01 0.05 RUNNING/TOTAL ..."), or -1. */
static long loadavg_running(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return -1;
    double a, b, c;
    long running = -1, total;
    if (fscanf(f, "%lf %lf %lf %ld/%ld", &a, &b, &c, &running, &total) != 5) running = -1;
    fclose(f);
    return running;
}

/* p: a pool of 2, `age` s old (created with the test or long before: the gate's
 * probe timer must start with the trial, not with the pool). */
static void full_cpu(tpool *p, const char *age)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    if (ncpu > 1024) ncpu = 1024;
    pthread_t *h = calloc((size_t)ncpu, sizeof *h);
    atomic_store(&g_stop, false);
    for (long i = 0; i < ncpu; i++) pthread_create(&h[i], NULL, hog, NULL);
    /* whether this system's /proc/loadavg counts them (a sandbox may fake it; a
     * process confined to fewer CPUs than are online keeps the gate off) */
    long running = -1;
    for (int i = 0; i < 50 && running <= ncpu; i++) {
        nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
        running = loadavg_running();
    }
    cpu_set_t aff;
    const bool confined = sched_getaffinity(0, sizeof aff, &aff) == 0 && CPU_COUNT(&aff) < ncpu;
    const bool visible = running > ncpu && !confined;
    lag_job *j = calloc(1, sizeof *j);
    j->caller = pthread_self();
    double ref[2];
    for (int k = 0; k < 2; k++) {
        j->out[k] = -1.0;
        lag_work(j, k, 2);
        ref[k] = j->out[k];
    }
    j->stall = 1;
    int wrong = 0, first_serial = -1, parallel_after = 0, runs = 0;
    /* up to 400 runs of about 0.5 ms, at most 2 s: inside the 2.56 s before a
     * forced probe, however slow the machine */
    for (const double t0 = now_s(); runs < 400 && now_s() - t0 < 2.0; runs++) {
        const bool par = lag_run(p, j, ref, &wrong) > 0;
        if (!par && first_serial < 0) first_serial = runs;
        if (par && first_serial >= 0) parallel_after++;
    }
    atomic_store(&g_stop, true);
    for (long i = 0; i < ncpu; i++) pthread_join(h[i], NULL);
    if (visible) {
        /* 3 ms late per run: the window has lost half of its 8 ms after 2-3 runs */
        CHECK(first_serial >= 0 && first_serial <= 10,
              "full CPU, %s pool: the first run on the caller alone was run %d (the measurement alone "
              "takes ~96)",
              age, first_serial);
        CHECK(parallel_after == 0, "full CPU, %s pool: %d runs woke the workers after the pool turned serial",
              age, parallel_after);
    } else { /* the gate cannot see the load here: the measurements alone still turn it serial */
        CHECK(first_serial >= 0, "full CPU (not visible in /proc/loadavg), %s pool: never serial in %d runs",
              age, runs);
    }
    CHECK(wrong == 0, "full CPU: %d runs with a part called other than once or other bits", wrong);
    printf("full CPU, %s pool (%ld spinning threads, %ld runnable%s): serial from run %d, %d parallel runs "
           "after, of %d\n",
           age, ncpu, running, visible ? "" : ": the gate cannot see them, not checked", first_serial,
           parallel_after, runs);
    free(j);
    free(h);
}

int main(void)
{
    tpool *old = tpool_create(2); /* used once it is 2.7 s old */
    const double t_old = now_s();
    serial_fallback();
    tpool *young = tpool_create(2);
    full_cpu(young, "new");
    tpool_free(young);
    /* older than GATED_PROBE_NS (2.56 s), however fast the phases above ran */
    while (now_s() - t_old < 2.7) nanosleep(&(struct timespec){ .tv_nsec = 50000000 }, NULL);
    full_cpu(old, "old");
    tpool_free(old);
    run_pools("quiet");
    atomic_store(&g_stop, false);
    pthread_t h[2];
    for (int i = 0; i < 2; i++) pthread_create(&h[i], NULL, hog, NULL);
    run_pools("two busy threads");
    atomic_store(&g_stop, true);
    for (int i = 0; i < 2; i++) pthread_join(h[i], NULL);
    return test_main_end();
}
