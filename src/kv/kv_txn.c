/*
 * kv_txn.c — the KV transaction of one step (data structure, life and
 * invariants in kv_txn.h).
 *
 * The undo is the exact inverse of the changes: kv_table_reserve only appends
 * blocks (so dropping back to blocks_before removes what it added, and only that),
 * and kv_table_cow only swaps one entry while the original keeps its reference
 * (so putting the original back and unreferencing the copy restores the entry
 * and both refcounts). Tables are dropped first, then the copies undone newest
 * first.
 */
#include "kv/kv_txn.h"

#include "base/error.h"

#include <stdlib.h>

void kv_txn_free(kv_txn *x)
{
    free(x->tab);
    free(x->cow);
    x->tab = NULL;
    x->cow = NULL;
    x->n_tab = x->tab_cap = x->n_cow = x->cow_cap = x->tab_max = x->cow_max = 0;
}

int kv_txn_begin(kv_txn *x, kv_pool *p, int32_t n_tables, int32_t n_rows)
{
    /* a table writing r positions spans at most r + 1 blocks */
    const int32_t need_cow = n_rows + n_tables + 2;
    if (x->cow_cap < need_cow) {
        kv_txn_cow *nc = realloc(x->cow, (size_t)need_cow * sizeof *nc);
        if (!nc) return KVI_E_NOMEM;
        x->cow = nc;
        x->cow_cap = need_cow;
    }
    if (x->tab_cap < n_tables) {
        kv_txn_tab *nt = realloc(x->tab, (size_t)n_tables * sizeof *nt);
        if (!nt) return KVI_E_NOMEM;
        x->tab = nt;
        x->tab_cap = n_tables;
    }
    x->p = p;
    x->tab_max = n_tables;
    x->cow_max = need_cow;
    x->n_tab = 0;
    x->n_cow = 0;
    return 0;
}

/* Index of the last block of t, among its first n_blocks, that positions up to
 * last fall in (-1 when none). */
static int32_t last_block(const kv_pool *p, int32_t last, int32_t n_blocks)
{
    return last / p->block_size < n_blocks ? last / p->block_size : n_blocks - 1;
}

int kv_txn_add(kv_txn *x, kv_table *t, int32_t first, int32_t last, kvi_error *err)
{
    kv_pool *p = x->p;
    const int32_t bs = p->block_size;
    if (x->n_tab >= x->tab_max || x->n_cow + (last / bs - first / bs + 1) > x->cow_max)
        return err_set(err, KVI_E_INVALID, "kv txn: more tables or rows than kv_txn_begin allowed");
    x->tab[x->n_tab++] = (kv_txn_tab){ .t = t, .first = first, .last = last, .blocks_before = t->n_blocks };
    const int32_t w1 = last_block(p, last, t->n_blocks);
    for (int32_t k = first / bs; k <= w1; k++) {
        if (p->refcount[t->blocks[k]] <= 1) continue;
        kv_txn_cow *c = &x->cow[x->n_cow];
        const int rc = kv_table_cow(p, t, k, &c->old, err);
        if (rc) return rc;
        c->t = t;
        c->idx = k;
        x->n_cow++;
    }
    return kv_table_reserve(p, t, last + 1, err);
}

void kv_txn_rollback(kv_txn *x)
{
    kv_pool *p = x->p;
    for (int32_t j = 0; j < x->n_tab; j++) kv_table_drop_blocks(p, x->tab[j].t, x->tab[j].blocks_before);
    for (int32_t c = x->n_cow - 1; c >= 0; c--) {
        kv_table_cow_undo(p, x->cow[c].t, x->cow[c].idx, x->cow[c].old);
    }
    x->n_tab = 0;
    x->n_cow = 0;
}

void kv_txn_commit(kv_txn *x)
{
    kv_pool *p = x->p;
    for (int32_t c = 0; c < x->n_cow; c++) kv_table_cow_unref(p, x->cow[c].t, x->cow[c].idx, x->cow[c].old);
    for (int32_t j = 0; j < x->n_tab; j++) {
        const kv_txn_tab *e = &x->tab[j];
        const int32_t w1 = last_block(p, e->last, e->blocks_before);
        for (int32_t k = e->first / p->block_size; k <= w1; k++) kv_prefix_remove(p, e->t->blocks[k]);
    }
    x->n_tab = 0;
    x->n_cow = 0;
}
