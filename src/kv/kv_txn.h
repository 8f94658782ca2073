/*
 * kv_txn.h — a KV transaction: the block changes one engine step makes to the
 * tables of several sequences, recorded so that they can be undone exactly.
 *
 * Data structure:
 *
 *     tab[n_tab]  per table that joined, in join order: the table, the positions
 *                 first..last the step will write, its block count before joining
 *     cow[n_cow]  per copy on write, in the order made: the table, the index of
 *                 the block copied and the original block id
 *
 * Life of a transaction:
 *   kv_txn_begin    room for n_tables tables writing n_rows positions in all;
 *   kv_txn_add      per table: a private copy of every shared block (refcount > 1)
 *                   among those positions first..last fall in, then new blocks so
 *                   that the table holds positions 0..last;
 *   then exactly one of
 *   kv_txn_rollback every table holds its blocks from before kv_txn_add again (same
 *                   ids in the same order, same count); the copies and the new
 *                   blocks go back to the pool, every refcount is as before;
 *   kv_txn_commit   the writes stand: each copied original drops the reference
 *                   its table kept, and every block of before that the positions
 *                   fall in leaves the prefix index (its contents have changed).
 * The engine writes the step's rows between kv_txn_add and the end (nothing reads
 * the prefix index meanwhile), so a failed pass can still be rolled back.
 *
 * Invariants while a transaction is open:
 *  - for a table of tab[], entries [0, blocks_before) are its old blocks except
 *    those listed in cow[], entries from blocks_before on are new;
 *  - the original block of every cow[] entry still holds the reference its table
 *    had (so it cannot be reused before the rollback or the commit);
 *  - n_tab <= tab_max <= tab_cap and n_cow <= cow_max <= cow_cap: kv_txn_begin
 *    sizes both, kv_txn_add never allocates (a table writing r positions copies
 *    at most r + 1 blocks) and refuses a table beyond them (KVI_E_INVALID).
 * Block ids and refcounts only: the step's positions, tokens and lengths are the
 * caller's. A rollback does not undo the pool's statistics (n_cow, n_alloc: a
 * block given memory during the transaction keeps it, on the free stack).
 */
#ifndef KVI_KV_TXN_H
#define KVI_KV_TXN_H

#include "kv/kv_cache.h"

typedef struct kv_txn_tab {
    kv_table *t;
    int32_t first, last;   /* positions the step writes */
    int32_t blocks_before; /* t->n_blocks when it joined */
} kv_txn_tab;

typedef struct kv_txn_cow {
    kv_table *t;
    int32_t idx; /* t->blocks[idx] is the private copy ... */
    int32_t old; /* ... of this block */
} kv_txn_cow;

typedef struct kv_txn {
    kv_pool *p;
    kv_txn_tab *tab; /* [tab_cap] */
    int32_t n_tab, tab_cap;
    kv_txn_cow *cow; /* [cow_cap] */
    int32_t n_cow, cow_cap;
    int32_t tab_max, cow_max; /* what kv_txn_begin allowed (<= the caps) */
} kv_txn;

/* An all-zero kv_txn is empty and valid; kv_txn_free releases its arrays. */
void kv_txn_free(kv_txn *x);
/* Opens a transaction on pool p for at most n_tables tables writing at most
 * n_rows positions in all. KVI_E_NOMEM without a message (the caller words it). */
int kv_txn_begin(kv_txn *x, kv_pool *p, int32_t n_tables, int32_t n_rows);
/* Table t joins: it will write positions first..last (first <= last, first <=
 * t->n_pos). KVI_E_NO_KV_SPACE or KVI_E_NOMEM: then call kv_txn_rollback. */
int kv_txn_add(kv_txn *x, kv_table *t, int32_t first, int32_t last, kvi_error *err);
/* Undoes every kv_txn_add (see above) and closes the transaction. */
void kv_txn_rollback(kv_txn *x);
/* Keeps every change (see above) and closes the transaction. */
void kv_txn_commit(kv_txn *x);

#endif
