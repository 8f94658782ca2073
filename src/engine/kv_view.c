/*
 * kv_view.c — read-only views of a sequence's KV block table for displays (the
 * server's web page): which physical pool blocks hold its positions.
 *
 *   table.blocks [n_blocks] int32   physical block ids, logical order
 *
 * Invariant: nothing here changes the pool or the table; the caller owns the
 * thread that drives the engine (the scheduler's engine thread).
 */
#include "kvinfer.h"

#include "engine/engine_int.h"

#include <string.h>

int32_t kvi_seq_block_ids(const kvi_seq *s, int32_t *ids, int32_t cap)
{
    if (!s) return 0;
    /* engine_seq_table takes a mutable sequence; only read here */
    const kv_table *t = engine_seq_table((kvi_seq *)s);
    const int32_t n = t->n_blocks;
    const int32_t k = cap < 0 || !ids ? 0 : n < cap ? n : cap;
    if (k > 0) memcpy(ids, t->blocks, (size_t)k * sizeof *ids);
    return n;
}
