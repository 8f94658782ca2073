/*
 * kv_cache.h — the paged KV cache: a pool of fixed-size blocks shared by all
 * sequences, and a block table per sequence.
 *
 * One block holds block_size consecutive positions of one sequence, for every
 * layer, keys and values:
 *
 *     block = [n_layers][ K: block_size rows of row_bytes_k | V: block_size rows of row_bytes_v ]
 *     row_bytes_k = kvi_row_bytes(type_k, kv_dim), kv_dim = n_kv_heads * head_dim
 *
 * so position p of a sequence lives in block table[p / block_size], row
 * p % block_size. Blocks get memory from the system lazily, the first time the
 * pool hands them out, and return to a free list (keeping their memory) when no
 * table refers to them any more.
 *
 * Invariants:
 *  - n_used + n_free == n_alloc <= n_blocks_max, and n_alloc * block_bytes is
 *    exactly the memory the pool holds (kv_pool_bytes_allocated);
 *  - refcount[b] > 0 exactly when some table holds b; the sum of refcounts equals
 *    the number of table entries over all tables;
 *  - a table with n_pos positions holds exactly ceil(n_pos / block_size) blocks.
 */
#ifndef KVI_KV_CACHE_H
#define KVI_KV_CACHE_H

#include "kvinfer.h"
#include <stdint.h>
#include <stddef.h>

typedef struct kv_pool {
    int n_layers;
    int kv_dim;              /* n_kv_heads * head_dim: elements of one K (or V) row */
    int block_size;          /* positions per block */
    kvi_type type_k, type_v;
    size_t row_bytes_k, row_bytes_v;
    size_t layer_bytes;      /* block_size * (row_bytes_k + row_bytes_v) */
    size_t block_bytes;      /* n_layers * layer_bytes */
    int32_t n_blocks_max;    /* what the budget allows */
    int32_t n_alloc;         /* blocks that have memory */
    int32_t n_used;          /* blocks held by at least one table */
    uint8_t **mem;           /* [n_blocks_max] block memory, NULL until first use */
    int32_t *refcount;       /* [n_blocks_max] */
    int32_t *free_ids;       /* [n_blocks_max] stack of allocated, unreferenced blocks */
    int32_t n_free;
} kv_pool;

typedef struct kv_table {
    int32_t *blocks;         /* [cap] physical block ids, logical order */
    int32_t n_blocks;
    int32_t cap;
    int32_t n_pos;           /* positions whose K/V are valid: 0..n_pos-1 */
} kv_table;

int kv_pool_init(kv_pool *p, int n_layers, int kv_dim, int block_size, kvi_type type_k,
                 kvi_type type_v, size_t budget_bytes, kvi_error *err);
void kv_pool_free(kv_pool *p);
size_t kv_pool_bytes_per_token(const kv_pool *p);
size_t kv_pool_bytes_allocated(const kv_pool *p);

/* Makes the table hold blocks for positions 0..n_pos-1 (does not change t->n_pos).
 * KVI_E_NO_KV_SPACE when the pool is exhausted: then the table is unchanged. */
int kv_table_reserve(kv_pool *p, kv_table *t, int32_t n_pos, kvi_error *err);
/* Keeps positions 0..n_pos-1; blocks past them go back to the pool. */
void kv_table_truncate(kv_pool *p, kv_table *t, int32_t n_pos);
void kv_table_release(kv_pool *p, kv_table *t);   /* truncate to 0 and free the array */

/* Address of the K (or V) row of position pos in layer l; pos must be reserved. */
static inline uint8_t *kv_k_row(const kv_pool *p, const kv_table *t, int l, int32_t pos)
{
    const int32_t b = t->blocks[pos / p->block_size];
    return p->mem[b] + (size_t)l * p->layer_bytes + (size_t)(pos % p->block_size) * p->row_bytes_k;
}
static inline uint8_t *kv_v_row(const kv_pool *p, const kv_table *t, int l, int32_t pos)
{
    const int32_t b = t->blocks[pos / p->block_size];
    return p->mem[b] + (size_t)l * p->layer_bytes + (size_t)p->block_size * p->row_bytes_k +
           (size_t)(pos % p->block_size) * p->row_bytes_v;
}

/* Type-independent access to one cached row (K when which == 0, V when 1) of
 * position pos in layer l, as f32 (kv_dim floats). Every KV element type, block
 * quantised or grouped, must support both: policies that move or re-rotate keys,
 * session files and tests go through these, never through the raw layout. */
void kv_read_row(const kv_pool *p, const kv_table *t, int l, int which, int32_t pos, float *out);
void kv_write_row(kv_pool *p, kv_table *t, int l, int which, int32_t pos, const float *in);

#endif
