/*
 * prof.c — the accumulators of prof.h: process-wide counters, relaxed atomic
 * adds, read all at once by prof_get (a snapshot that may mix two steps'
 * updates when read while the engine runs; the bench reads between steps).
 */
#include "base/prof.h"

#include <string.h>
#include <time.h>

int prof_enabled;
static prof_counts acc;

void prof_enable(bool on) { __atomic_store_n(&prof_enabled, on ? 1 : 0, __ATOMIC_RELAXED); }

uint64_t prof_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void add(uint64_t *p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

void prof_reset(void)
{
    uint64_t *p = (uint64_t *)&acc;
    for (size_t i = 0; i < sizeof acc / sizeof *p; i++) __atomic_store_n(&p[i], 0, __ATOMIC_RELAXED);
}

void prof_get(prof_counts *out)
{
    const uint64_t *p = (const uint64_t *)&acc;
    uint64_t *o = (uint64_t *)out;
    for (size_t i = 0; i < sizeof acc / sizeof *p; i++) o[i] = __atomic_load_n(&p[i], __ATOMIC_RELAXED);
}

int64_t prof_mm_bucket_rows(int b)
{
    static const int64_t lo[PROF_MM_BUCKETS] = { 1, 2, 5, 9, 17, 33, 65, 257 };
    return b >= 0 && b < PROF_MM_BUCKETS ? lo[b] : 0;
}

void prof_add_ns(prof_cat c, uint64_t ns)
{
    if (!__atomic_load_n(&prof_enabled, __ATOMIC_RELAXED)) return;
    add(&acc.ns[c], ns);
    add(&acc.calls[c], 1);
}

void prof_end(prof_cat c, uint64_t t0)
{
    if (t0) prof_add_ns(c, prof_now_ns() - t0);
}

void prof_end_mm(int64_t rows, uint64_t t0)
{
    if (!t0) return;
    const uint64_t ns = prof_now_ns() - t0;
    int b = PROF_MM_BUCKETS - 1;
    while (b > 0 && rows < prof_mm_bucket_rows(b)) b--;
    add(&acc.mm_ns[b], ns);
    add(&acc.mm_calls[b], 1);
    add(&acc.mm_rows[b], (uint64_t)rows);
}
