/*
 * threadpool.c — the worker pool (see threadpool.h).
 *
 * Data structure: n threads; thread 0 is the caller of tpool_run(), threads
 * 1..n-1 are workers created once in tpool_create(). A run is published by
 * storing fn/ctx, setting `pending` to n-1 and then incrementing the atomic
 * generation counter `gen` under the mutex, with a broadcast on `cv_work`.
 * A worker that sees a new generation (after a short spin, then sleeping on the
 * condition variable) runs fn(ctx, ith, n) and decrements `pending`; the one that
 * brings it to zero signals `cv_done` under the mutex.
 *
 * Invariants:
 *  - fn/ctx are written only by the caller while no run is in flight, and read by
 *    workers only after an acquire load of a gen that was stored (release) after
 *    them, so they are never raced.
 *  - gen changes only under `mu`, and a sleeping worker re-checks it under `mu`
 *    before waiting, so no wake-up is lost; the caller checks `pending` under `mu`
 *    before waiting on cv_done for the same reason.
 *  - tpool_run() returns only when pending == 0: every fn call has returned and
 *    its writes are visible to the caller (acq_rel decrement, acquire load).
 *  - Idle workers sleep on a condition variable after spinning SPIN_ITERS pauses
 *    (about a millisecond) for the next run: long enough to bridge the serial
 *    work between two matrix products and between two serving steps.
 *  - tpool_run() must not be called from inside fn, nor from two threads at once.
 *  - Serial fallback (a shared CPU), decided by measuring both modes. Every run
 *    is fn(ctx, k, n) once per part k either way, so the results are the same
 *    bits: only the thread that runs a part changes. Windows of at least
 *    WINDOW_RUNS runs and WINDOW_NS give each mode's ratio: the window's time
 *    over the time part 0 took in it (the caller's own part in parallel, part 0
 *    of the caller's sequence serially), which compares windows whatever runs
 *    fell into them.
 *    Every comparison asks the caller alone to win by MARGIN (25%): on a
 *    virtual machine the host's own hiccups make the modes look alike for a
 *    while, and a needless serial spell costs more than it saves (an idle vCPU
 *    the host let go answers slowly for some milliseconds when woken).
 *    - Parallel: the caller also times its own part (own) and its wait for the
 *      workers after it (wait). own + wait > n * MARGIN * own in LATE_WINDOWS
 *      windows in a row (fewer are a hiccup of the host: stalls of 4-30 ms are
 *      seen on an idle machine) means the workers are late by more than their
 *      parts would cost the caller, a worker the OS descheduled for another
 *      process: a serial trial window follows, the caller running all n parts
 *      itself while the workers fall asleep.
 *    - The trial stays serial only when its ratio times MARGIN beats the parallel
 *      window's before it; otherwise the pool turns parallel again and the next
 *      trial waits a back-off (TRIAL_MIN_NS doubling to BACKOFF_MAX_NS): a
 *      machine where late workers still pay (a slow sibling core) stays parallel.
 *    - Serial: after a back-off (PROBE_MIN_NS doubling on each failed probe to
 *      BACKOFF_MAX_NS) a probe window of PROBE_RUNS parallel runs (the runs of
 *      its first PROBE_WARM_NS, the workers' wake-up, not counted) turns the
 *      pool parallel unless it lost to the last serial window's ratio by MARGIN;
 *      it ends early, failed, once it has lost against that ratio more than
 *      probe_budget() (PROBE_RUNS serial runs' time, at least half a window).
 *    - A full CPU (cpu_full: more runnable threads in the system, at the
 *      instant /proc/loadavg is read, than online CPUs) tells a neighbour's
 *      load from the host's hiccups, which the measurements alone cannot:
 *      a parallel window slower than n (no MARGIN) on a full CPU starts the
 *      trial at once (no LATE_WINDOWS), and the trial then wins without
 *      MARGIN too; a parallel window that has already lost WINDOW_NS / 2
 *      against n * MARGIN times part 0 (a late window's bound) ends early to
 *      ask (its answer then stands for the window); and a probe that would
 *      wake the workers onto a full CPU is put off by GATE_RECHECK_NS unless
 *      GATED_PROBE_NS have passed since the last probe or trial (a niced
 *      neighbour leaves the workers room, which only a probe shows). The gate
 *      only hastens or spares what the measurements decide: a trial still has
 *      to win. It is off (the measurements alone) without /proc and in a
 *      process confined to fewer CPUs than are online (the count is the
 *      host's, not its own); CPU quotas (cgroup cpu.max) are not seen.
 *    The window state is the caller's alone (tpool_run is never concurrent);
 *    the counters read by tpool_get_stats are relaxed atomics.
 *  - scratch[k] is touched only by whoever runs part k, one thread at a time (or
 *    by the owner outside runs).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "base/threadpool.h"
#include "base/prof.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000
#define MAX_THREADS 256

#define WINDOW_NS 8000000LL         /* a window covers at least 8 ms ... */
#define WINDOW_RUNS 32              /* ... and 32 runs */
#define PROBE_RUNS 64               /* a probe of the parallel mode from serial */
#define PROBE_MIN_NS 10000000LL     /* first probe 10 ms after turning serial */
#define PROBE_WARM_NS 6000000LL     /* a probe's first 6 ms are the workers' wake-up */
#define TRIAL_MIN_NS 40000000LL     /* a failed serial trial: the next after 40 ms */
#define BACKOFF_MAX_NS 640000000LL  /* back-off cap: a probe or trial every 0.64 s */
#define LATE_WINDOWS 3              /* late parallel windows in a row before a serial trial */
#define MARGIN 1.25                 /* the ratio by which the caller alone must win to be chosen */
#define GATE_RECHECK_NS 10000000LL  /* serial on a full CPU: look again for a free core every 10 ms ... */
#define GATED_PROBE_NS 2560000000LL /* ... and probe anyway every 2.56 s (a niced neighbour) */

typedef struct scratch_slot {
    void *p; /* 64-byte aligned, cap bytes */
    size_t cap;
    char pad[64 - sizeof(void *) - sizeof(size_t)]; /* one cache line per thread */
} scratch_slot;

typedef struct worker {
    struct tpool *pool;
    int ith;
} worker;

struct tpool {
    int n;                 /* threads including the caller */
    pthread_t *th;         /* [n - 1] worker handles */
    worker *wk;            /* [n - 1] worker arguments */
    scratch_slot *scratch; /* [n] per-thread scratch */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    _Alignas(64) atomic_uint_fast64_t gen; /* run counter; written under mu; this line (gen,
                                               pending, fn, ctx) is what the threads share in a run */
    atomic_int pending;                    /* workers still inside the current run */
    atomic_bool stop;
    tpool_fn fn; /* current run, see invariants */
    void *ctx;
    const void *user; /* the owner's, tpool_set_user */
    /* serial fallback, the caller's alone (see invariants) */
    _Alignas(64) bool serial, probing, probe_first, trial;
    bool trial_full;                    /* the trial began on a full CPU: it needs no margin to win */
    int win_gate;                       /* this parallel window's cpu_full(): 0 not asked, 1 free, 2 full */
    int strikes;                        /* late parallel windows in a row */
    int64_t win_start, win_tot, win_p0; /* ns: the window's runs, and part 0 of them */
    int win_runs;
    double r_par, r_ser;               /* win_tot / win_p0 of the last parallel / serial window */
    int64_t m_ser;                     /* ns per run of the last serial window */
    int64_t next_probe, backoff;       /* serial -> parallel probes */
    int64_t next_trial, trial_backoff; /* parallel -> serial trials */
    int64_t gate_since;                /* the last probe or trial: a gated probe waits GATED_PROBE_NS */
    int ncpu;                          /* online CPUs, for cpu_full() */
    atomic_uint_fast64_t n_parallel, n_serial, n_to_serial; /* runs, runs, switches */
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Whether the CPUs are all taken: the system's runnable threads (the fourth
 * field of /proc/loadavg, "running/total", counted at this instant and the
 * calling thread among them) plus `extra` more would exceed the online CPUs.
 * Unknown (no /proc) reads as not full, which leaves the decision to the
 * measurements alone. A few microseconds: read at most once per window or
 * per recheck. */
static bool cpu_full(const tpool *p, int extra)
{
    if (p->ncpu == 0) return false; /* the gate is off (tpool_create) */
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0) return false;
    buf[got] = '\0';
    /* "0.00 0.01 0.05 2/110 9275" */
    const char *q = buf;
    for (int field = 0; field < 3 && q; field++) {
        q = strchr(q, ' ');
        if (q) q++;
    }
    if (!q) return false;
    char *end = NULL;
    long running = strtol(q, &end, 10);
    if (end == q || *end != '/' || running < 1 || running > 1L << 30) return false;
    return running + extra > p->ncpu;
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1 << 20 ? 1 << 20 : (int)n;
}

int tpool_n_cores(void)
{
    const int n = online_cpus();
    return n > MAX_THREADS ? MAX_THREADS : n;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    tpool *p = w->pool;
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; i < SPIN_ITERS && g == seen && !atomic_load(&p->stop); i++) {
            CPU_RELAX();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
                   !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (g == seen) break; /* stop requested and no run pending */
        seen = g;
        p->fn(p->ctx, w->ith, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

tpool *tpool_create(int n_threads)
{
    if (n_threads <= 0) n_threads = tpool_n_cores();
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    tpool *p = NULL; /* 64-byte aligned: the shared line apart from the caller's own */
    if (posix_memalign((void **)&p, 64, sizeof *p) != 0) return NULL;
    memset(p, 0, sizeof *p);
    p->scratch = calloc((size_t)n_threads, sizeof *p->scratch);
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    p->wk = calloc((size_t)n_threads, sizeof *p->wk);
    if (!p->scratch || !p->th || !p->wk) goto fail;
    if (pthread_mutex_init(&p->mu, NULL) != 0) goto fail;
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, false);
    p->backoff = PROBE_MIN_NS;
    p->trial_backoff = TRIAL_MIN_NS;
    p->gate_since = now_ns(); /* on a full CPU, the first probe too waits GATED_PROBE_NS */
    p->ncpu = online_cpus();
    cpu_set_t aff; /* confined to fewer CPUs than the host's (taskset, a cpuset): the host's
                      runnable count says nothing about ours, so the gate stays off */
    if (sched_getaffinity(0, sizeof aff, &aff) == 0 && CPU_COUNT(&aff) < p->ncpu) p->ncpu = 0;
    p->n = 1;
    for (int i = 1; i < n_threads; i++) {
        p->wk[i - 1].pool = p;
        p->wk[i - 1].ith = i;
        if (pthread_create(&p->th[i - 1], NULL, worker_main, &p->wk[i - 1]) != 0) break;
        p->n = i + 1; /* fewer threads than asked when the system refuses more */
    }
    return p;
fail:
    free(p->scratch);
    free(p->th);
    free(p->wk);
    free(p);
    return NULL;
}

void tpool_free(tpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i - 1], NULL);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    for (int i = 0; i < p->n; i++) free(p->scratch[i].p);
    free(p->scratch);
    free(p->th);
    free(p->wk);
    free(p);
}

int tpool_size(const tpool *p) { return p ? p->n : 1; }

static int64_t doubled(int64_t b) { return b * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : b * 2; }

/* A window's time per unit of part 0's time: (own + wait) / own in parallel,
 * (part 0 + ... + part n-1) / part 0 serially. Unlike the time per run it does
 * not depend on which runs (a small product, the output head) fell into the
 * window, so windows of different runs compare. */
static double ratio(const tpool *p) { return (double)p->win_tot / (double)(p->win_p0 > 0 ? p->win_p0 : 1); }

static void window_reset(tpool *p, int64_t now)
{
    p->win_start = now;
    p->win_tot = p->win_p0 = 0;
    p->win_runs = 0;
    p->win_gate = 0;
}

/* cpu_full(p, 0), asked at most once per parallel window (win_gate keeps the answer). */
static bool window_cpu_full(tpool *p)
{
    if (!p->win_gate) p->win_gate = cpu_full(p, 0) ? 2 : 1;
    return p->win_gate == 2;
}

/* Ends a window of parallel runs (see the invariants). */
static void par_window_end(tpool *p, int64_t now)
{
    const double r = ratio(p);
    if (p->probing) {
        p->probing = false;
        if (p->win_runs >= PROBE_RUNS && r < p->r_ser * MARGIN) {
            p->backoff = PROBE_MIN_NS; /* parallel pays again (not a probe ended early) */
        } else {
            p->serial = true;
            p->backoff = doubled(p->backoff);
            p->next_probe = now + p->backoff;
        }
    } else {
        const bool late = r > (double)p->n * MARGIN; /* the caller alone would be faster by the margin */
        p->strikes = late ? p->strikes + 1 : 0;
        /* a window slower than the caller alone on a full CPU (more runnable
         * threads than cores, ours included) is a neighbour's load, not the
         * host's hiccup, so no margin and no wait for more windows: try at once */
        const bool full = r > (double)p->n && window_cpu_full(p);
        if (full) p->strikes = LATE_WINDOWS;
        if (p->strikes >= LATE_WINDOWS && now >= p->next_trial) {
            p->serial = p->trial = true; /* try the caller alone */
            p->gate_since = now;
            p->trial_full = full;
            p->strikes = 0;
            atomic_fetch_add_explicit(&p->n_to_serial, 1, memory_order_relaxed);
        }
    }
    p->r_par = r;
    window_reset(p, now);
}

/* Ends a window of serial runs (see the invariants). */
static void ser_window_end(tpool *p, int64_t now)
{
    p->r_ser = ratio(p);
    p->m_ser = p->win_tot / p->win_runs;
    if (p->trial) {
        p->trial = false;
        /* the caller alone is faster by the margin (on a full CPU, faster): stay serial */
        if (p->r_ser * (p->trial_full ? 1.0 : MARGIN) < p->r_par) {
            p->trial_backoff = TRIAL_MIN_NS;
            p->backoff = PROBE_MIN_NS;
            p->next_probe = now + p->backoff;
        } else {
            p->serial = false;
            p->trial_backoff = doubled(p->trial_backoff);
            p->next_trial = now + p->trial_backoff;
        }
    }
    window_reset(p, now);
}

/* What a probe may lose against the serial mode before it ends, failed: the
 * time of PROBE_RUNS serial runs, at least half a window. */
static double probe_budget(const tpool *p)
{
    const int64_t b = p->m_ser * PROBE_RUNS;
    return (double)(b > WINDOW_NS / 2 ? b : WINDOW_NS / 2);
}

/* A parallel window that has already lost half a window's time against the
 * caller alone ends early when the CPU is full (asked once per window). */
static bool lost_on_full_cpu(tpool *p)
{
    return !p->win_gate && (double)p->win_tot - (double)p->n * MARGIN * (double)p->win_p0 > WINDOW_NS / 2 &&
           window_cpu_full(p);
}

static bool window_full(const tpool *p, int64_t now)
{
    return p->win_runs >= WINDOW_RUNS && now - p->win_start >= WINDOW_NS;
}

void tpool_run(tpool *p, tpool_fn fn, void *ctx)
{
    if (!fn) return;
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    const int64_t t0 = now_ns();
    if (p->serial && !p->trial && t0 >= p->next_probe && t0 - p->gate_since < GATED_PROBE_NS &&
        cpu_full(p, p->n - 1)) /* waking the workers would only queue them behind a neighbour */
        p->next_probe = t0 + GATE_RECHECK_NS;
    if (p->serial && (p->trial || t0 < p->next_probe)) {
        fn(ctx, 0, p->n);
        const int64_t ta = now_ns();
        for (int k = 1; k < p->n; k++) fn(ctx, k, p->n);
        const int64_t t1 = now_ns();
        atomic_fetch_add_explicit(&p->n_serial, 1, memory_order_relaxed);
        p->win_tot += t1 - t0;
        p->win_p0 += ta - t0;
        p->win_runs++;
        if (window_full(p, t1)) ser_window_end(p, t1);
        return;
    }
    if (p->serial) { /* probe the parallel mode again */
        p->serial = false;
        p->gate_since = t0;
        p->probing = p->probe_first = true;
        window_reset(p, t0);
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    fn(ctx, 0, p->n);
    const int64_t t1 = now_ns();

    bool done = false;
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) {
            done = true;
            break;
        }
        CPU_RELAX();
    }
    if (!done) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    const int64_t t2 = now_ns();
    prof_add_ns(PROF_POOL_WAIT, (uint64_t)(t2 - t1));
    atomic_fetch_add_explicit(&p->n_parallel, 1, memory_order_relaxed);
    if (p->probing && p->probe_first) {
        /* the workers' wake-up from a long sleep (a vCPU the host let idle
         * answers slowly for a millisecond or two): not what the probe asks */
        if (t2 - p->win_start >= PROBE_WARM_NS) {
            p->probe_first = false;
            window_reset(p, t2);
        }
        return;
    }
    p->win_tot += t2 - t0;
    p->win_p0 += t1 - t0;
    p->win_runs++;
    /* a probe fails early once it lost, against the serial mode's ratio, more
     * than PROBE_RUNS serial runs' time */
    if (p->probing ? (p->win_runs >= PROBE_RUNS && t2 - p->win_start >= WINDOW_NS / 2) ||
                         (double)p->win_tot - p->r_ser * MARGIN * (double)p->win_p0 > probe_budget(p)
                   : window_full(p, t2) || lost_on_full_cpu(p))
        par_window_end(p, t2);
}

void tpool_get_stats(const tpool *p, tpool_stats *st)
{
    st->runs_parallel = p ? atomic_load_explicit(&p->n_parallel, memory_order_relaxed) : 0;
    st->runs_serial = p ? atomic_load_explicit(&p->n_serial, memory_order_relaxed) : 0;
    st->to_serial = p ? atomic_load_explicit(&p->n_to_serial, memory_order_relaxed) : 0;
}

void *tpool_scratch(tpool *p, int ith, size_t bytes)
{
    if (!p || ith < 0 || ith >= p->n) return NULL;
    scratch_slot *s = &p->scratch[ith];
    if (s->p && s->cap >= bytes) return s->p;
    size_t cap = (bytes + 63) & ~(size_t)63;
    if (cap < bytes) return NULL;
    if (cap == 0) cap = 64;
    void *np = NULL;
    if (posix_memalign(&np, 64, cap) != 0) return NULL;
    free(s->p);
    s->p = np;
    s->cap = cap;
    return np;
}

size_t tpool_scratch_bytes(const tpool *p)
{
    size_t total = 0;
    for (int i = 0; p && i < p->n; i++) total += p->scratch[i].cap;
    return total;
}

void tpool_set_user(tpool *p, const void *user)
{
    if (p) p->user = user;
}

const void *tpool_user(const tpool *p) { return p ? p->user : NULL; }
