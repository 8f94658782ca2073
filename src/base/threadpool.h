/*
 * threadpool.h — one worker pool shared by all kernels.
 *
 * The pool owns n_threads - 1 workers (the caller is thread 0). tpool_run()
 * calls fn(ctx, ith, nth) once on each of nth threads and returns when all are
 * done; workers wait between runs, so no thread is created per token. A kernel
 * splits its output between threads by ith/nth and must give every output the
 * same reduction order whatever nth is (batch- and thread-invariance). When the
 * workers are late (a CPU shared with other processes) the pool may run all parts
 * on the caller instead, still as fn(ctx, ith, nth) once per ith: fn must not
 * assume that two parts run on different threads or at the same time.
 */
#ifndef KVI_THREADS_H
#define KVI_THREADS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tpool tpool;
typedef void (*tpool_fn)(void *ctx, int ith, int nth);

tpool *tpool_create(int n_threads); /* n_threads <= 0: number of cores */
void tpool_free(tpool *p);
int tpool_size(const tpool *p);
/* [*i0, *i1): part ith of nth of n items, as even as integer division makes it
 * (the split a run's function uses for rows or channels) */
static inline void tpool_share(int n, int ith, int nth, int *i0, int *i1)
{
    *i0 = (int)((int64_t)n * ith / nth);
    *i1 = (int)((int64_t)n * (ith + 1) / nth);
}
/* Runs fn on all threads of the pool (a NULL pool runs fn(ctx, 0, 1)). */
void tpool_run(tpool *p, tpool_fn fn, void *ctx);
int tpool_n_cores(void);
/* What the pool did on a shared CPU (threadpool.c: the serial fallback): runs it
 * ran in parallel, runs the caller ran alone because workers were late, and how
 * often it turned serial. */
typedef struct tpool_stats {
    unsigned long long runs_parallel, runs_serial, to_serial;
} tpool_stats;
void tpool_get_stats(const tpool *p, tpool_stats *st);
/* Scratch memory of part ith (64-byte aligned, at least `bytes`), owned by the pool
 * and kept between runs; growing it does not preserve the contents. Call it only
 * from part ith inside a run (or outside runs). NULL when p is NULL, ith is out of
 * range or memory is short. */
void *tpool_scratch(tpool *p, int ith, size_t bytes);
/* Bytes of per-thread scratch held now, all threads together (memory accounting). */
size_t tpool_scratch_bytes(const tpool *p);
/* An opaque pointer the pool's owner attaches for the work run on it (the engine:
 * its kernel configuration, kernels.h); NULL until set. */
void tpool_set_user(tpool *p, const void *user);
const void *tpool_user(const tpool *p);

#endif
