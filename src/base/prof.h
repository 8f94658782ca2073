/*
 * prof.h — the engine's own cheap timers, for `kvinfer bench --parallel`'s
 * per-step breakdown and for profiling a server: where a step's wall time goes
 * (matrix products by row count, attention, the pool's hand-offs, sampling,
 * grammar masks, callbacks, detokenization, the scheduler's bookkeeping, idle).
 *
 * Data structure: process-wide accumulators of nanoseconds and calls per
 * category (prof_cat), and per matrix-product row bucket (rows 1, 2-4, 5-8,
 * 9-16, 17-32, 33-64, 65-256, 257+: PROF_MM_BUCKETS) nanoseconds, calls and
 * rows; updated with relaxed atomic adds (sampling and grammar masks run on the
 * pool's workers).
 *
 * Invariants: off by default, and then each timer costs one relaxed load and a
 * branch; on or off, nothing measured changes what any kernel computes (the
 * timers only read the clock). Categories nest as the breakdown says: matrix
 * products and attention run inside PROF_FORWARD, PROF_POOL_WAIT inside those,
 * PROF_GRAMMAR inside PROF_SAMPLING, PROF_DETOK inside PROF_CALLBACKS, and
 * PROF_FORWARD, PROF_SAMPLING and PROF_CALLBACKS inside PROF_SCHED_STEP.
 */
#ifndef KVI_PROF_H
#define KVI_PROF_H

#include <stdbool.h>
#include <stdint.h>

typedef enum prof_cat {
    PROF_ATTENTION,  /* attention_rows */
    PROF_POOL_WAIT,  /* the calling thread waiting for the pool's workers after its own part */
    PROF_FORWARD,    /* kvi_step as the scheduler calls it */
    PROF_SAMPLING,   /* the scheduler drawing this step's tokens */
    PROF_GRAMMAR,    /* grammar masks (inside sampling, summed over threads) */
    PROF_CALLBACKS,  /* on_token / on_logprobs / on_done of the requests */
    PROF_DETOK,      /* token ids to text in the callbacks (the server's, the bench's) */
    PROF_SCHED_STEP, /* kvi_sched_step, all of it */
    PROF_IDLE,       /* the scheduler's thread waiting for requests */
    PROF_N
} prof_cat;

#define PROF_MM_BUCKETS 8

typedef struct prof_counts {
    uint64_t ns[PROF_N], calls[PROF_N];
    uint64_t mm_ns[PROF_MM_BUCKETS], mm_calls[PROF_MM_BUCKETS], mm_rows[PROF_MM_BUCKETS];
} prof_counts;

extern int prof_enabled; /* read relaxed; set by prof_enable */

void prof_enable(bool on);
void prof_reset(void);
void prof_get(prof_counts *out);
/* The smallest row count of bucket b (1, 2, 5, 9, 17, 33, 65, 257). */
int64_t prof_mm_bucket_rows(int b);
uint64_t prof_now_ns(void);

/* 0 when off (then prof_end and prof_end_mm do nothing), else the time now. */
static inline uint64_t prof_begin(void)
{
    return __atomic_load_n(&prof_enabled, __ATOMIC_RELAXED) ? prof_now_ns() : 0;
}
void prof_end(prof_cat c, uint64_t t0);
void prof_add_ns(prof_cat c, uint64_t ns); /* when on */
void prof_end_mm(int64_t rows, uint64_t t0);

#endif
