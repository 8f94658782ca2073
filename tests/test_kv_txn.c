/*
 * test_kv_txn.c — the KV transaction of a step (kv/kv_txn.h) alone, on a small
 * kv_pool and hand-made tables, no model.
 *
 * Setup: every block of the pool has memory (so blocks come from the free stack
 * and a rollback can give back exactly what was taken) and holds random
 * non-zero bytes. Tables: A (10 positions, 3 blocks), B a fork of A (all three
 * blocks shared, refcount 2), C (8 positions, 2 private blocks, both in the
 * prefix index). The transaction writes A at 6..13 (its shared blocks 1 and 2
 * are copied, one block is new), B at 0..3 (its shared block 0 is copied) and C
 * at 4..9 (block 1 is written in place, one block is new).
 *
 * Checked: after a rollback (requested, or forced by an exhausted pool in the
 * middle of the transaction) every table's blocks, block count, length and
 * tokens, every block's refcount and index flag, the bytes of every block a
 * table held, and the pool's free, used and cached counts and free-stack
 * contents equal a snapshot taken before begin; after a commit the copies hold
 * the originals' bytes, the originals lost exactly the writers' references, the
 * written block of C left the index, and the free count fell by the blocks
 * taken.
 */
#include "testutil.h"

#include "kv/kv_cache.h"
#include "kv/kv_txn.h"

#include <stdlib.h>
#include <string.h>

#define N_BLOCKS 16
#define BS 4

/* Everything a transaction may change, copied. */
typedef struct snap_table {
    int32_t n_blocks, n_pos;
    int32_t blocks[N_BLOCKS];
    int32_t tokens[N_BLOCKS * BS];
} snap_table;

typedef struct snap {
    snap_table tab[3];
    int32_t refcount[N_BLOCKS];
    uint8_t indexed[N_BLOCKS];
    int32_t free_sorted[N_BLOCKS]; /* free stack, sorted */
    int32_t n_free, n_used, n_cached, n_alloc;
    uint8_t *mem; /* [N_BLOCKS][block_bytes] every block's bytes */
} snap;

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void take(const kv_pool *p, kv_table *const *t, snap *s)
{
    for (int i = 0; i < 3; i++) {
        s->tab[i].n_blocks = t[i]->n_blocks;
        s->tab[i].n_pos = t[i]->n_pos;
        memcpy(s->tab[i].blocks, t[i]->blocks, (size_t)t[i]->n_blocks * sizeof(int32_t));
        memcpy(s->tab[i].tokens, t[i]->tokens, (size_t)t[i]->n_pos * sizeof(int32_t));
    }
    memcpy(s->refcount, p->refcount, sizeof s->refcount);
    memcpy(s->indexed, p->indexed, sizeof s->indexed);
    memcpy(s->free_sorted, p->free_ids, (size_t)p->n_free * sizeof(int32_t));
    qsort(s->free_sorted, (size_t)p->n_free, sizeof(int32_t), cmp_i32);
    s->n_free = p->n_free;
    s->n_used = p->n_used;
    s->n_cached = p->n_cached;
    s->n_alloc = p->n_alloc;
    for (int32_t b = 0; b < N_BLOCKS; b++)
        memcpy(s->mem + (size_t)b * p->block_bytes, p->mem[b], p->block_bytes);
}

/* Every field of a snapshot taken now equals `before`. */
static void check_same(const kv_pool *p, kv_table *const *t, const snap *before, snap *now, const char *what)
{
    take(p, t, now);
    for (int i = 0; i < 3; i++) {
        const snap_table *a = &before->tab[i], *b = &now->tab[i];
        CHECK(a->n_blocks == b->n_blocks, "%s: table %d holds %d blocks, before %d", what, i, b->n_blocks,
              a->n_blocks);
        CHECK(a->n_pos == b->n_pos, "%s: table %d length %d, before %d", what, i, b->n_pos, a->n_pos);
        CHECK(!memcmp(a->blocks, b->blocks, (size_t)a->n_blocks * sizeof(int32_t)), "%s: table %d block ids",
              what, i);
        CHECK(!memcmp(a->tokens, b->tokens, (size_t)a->n_pos * sizeof(int32_t)), "%s: table %d tokens", what,
              i);
    }
    CHECK(!memcmp(before->refcount, now->refcount, sizeof now->refcount), "%s: refcounts", what);
    CHECK(!memcmp(before->indexed, now->indexed, sizeof now->indexed), "%s: index flags", what);
    CHECK(before->n_free == now->n_free, "%s: %d free blocks, before %d", what, now->n_free, before->n_free);
    CHECK(!memcmp(before->free_sorted, now->free_sorted, (size_t)now->n_free * sizeof(int32_t)),
          "%s: free stack contents", what);
    CHECK(before->n_used == now->n_used && before->n_cached == now->n_cached &&
              before->n_alloc == now->n_alloc,
          "%s: used %d cached %d alloc %d, before %d %d %d", what, now->n_used, now->n_cached, now->n_alloc,
          before->n_used, before->n_cached, before->n_alloc);
    /* the bytes of every block a table held (a free block may have received a copy) */
    for (int32_t b = 0; b < N_BLOCKS; b++)
        if (before->refcount[b] > 0)
            CHECK(!memcmp(before->mem + (size_t)b * p->block_bytes, now->mem + (size_t)b * p->block_bytes,
                          p->block_bytes),
                  "%s: block %d bytes", what, b);
}

/* Sum of refcounts == table entries over all tables (kv_cache.h). */
static void check_refsum(const kv_pool *p, kv_table *const *t, int n_tables, const char *what)
{
    int64_t refs = 0, entries = 0;
    for (int32_t b = 0; b < p->n_alloc; b++) refs += p->refcount[b];
    for (int i = 0; i < n_tables; i++) entries += t[i]->n_blocks;
    CHECK(refs == entries, "%s: %lld references, %lld table entries", what, (long long)refs,
          (long long)entries);
    CHECK(p->n_used + p->n_free + p->n_cached == p->n_alloc, "%s: used %d + free %d + cached %d != alloc %d",
          what, p->n_used, p->n_free, p->n_cached, p->n_alloc);
}

static void fill_table(kv_pool *p, kv_table *t, int32_t n_pos, uint64_t *rng)
{
    kvi_error err = { 0 };
    CHECK(kv_table_reserve(p, t, n_pos, &err) == 0, "reserve %d: %s", n_pos, err.msg);
    for (int32_t i = 0; i < n_pos; i++) t->tokens[i] = (int32_t)(trand_u64(rng) % 1000);
    t->n_pos = n_pos;
}

/* Opens the transaction of the file comment; returns its result. */
static int run_txn(kv_txn *x, kv_pool *p, kv_table *a, kv_table *b, kv_table *c, kvi_error *err)
{
    CHECK(kv_txn_begin(x, p, 3, 8 + 4 + 6) == 0, "begin");
    int rc = kv_txn_add(x, a, 6, 13, err);
    if (rc == 0) rc = kv_txn_add(x, b, 0, 3, err);
    if (rc == 0) rc = kv_txn_add(x, c, 4, 9, err);
    return rc;
}

int main(void)
{
    kv_pool p;
    kvi_error err = { 0 };
    const size_t one = kv_layout_block_bytes(2, 32, BS, KVI_TYPE_F32, KVI_TYPE_F32);
    CHECK(kv_pool_init(&p, 2, 32, BS, KVI_TYPE_F32, KVI_TYPE_F32, one * N_BLOCKS, &err) == 0, "pool: %s",
          err.msg);
    CHECK(p.n_blocks_max == N_BLOCKS, "pool of %d blocks", p.n_blocks_max);
    uint64_t rng = 0x5eed1234abcdull;

    /* every block gets memory and random non-zero bytes, then goes back free */
    kv_table all = { 0 };
    CHECK(kv_table_reserve(&p, &all, N_BLOCKS * BS, &err) == 0, "reserve all: %s", err.msg);
    for (int32_t b = 0; b < N_BLOCKS; b++)
        for (size_t k = 0; k < p.block_bytes; k++) p.mem[b][k] = (uint8_t)(trand_u64(&rng) | 1);
    kv_table_release(&p, &all);
    CHECK(p.n_free == N_BLOCKS && p.n_alloc == N_BLOCKS, "all %d blocks free", p.n_free);

    kv_table A = { 0 }, B = { 0 }, C = { 0 };
    fill_table(&p, &A, 10, &rng);
    CHECK(kv_table_share(&p, &B, &A, &err) == 0, "fork: %s", err.msg);
    fill_table(&p, &C, 8, &rng);
    kv_prefix_index_table(&p, &C, 0);
    CHECK(p.indexed[C.blocks[0]] && p.indexed[C.blocks[1]], "C's two full blocks are indexed");
    CHECK(p.refcount[A.blocks[0]] == 2 && p.refcount[A.blocks[2]] == 2, "A and B share their blocks");
    kv_table *tabs[3] = { &A, &B, &C };
    check_refsum(&p, tabs, 3, "setup");

    snap before = { .mem = malloc((size_t)N_BLOCKS * p.block_bytes) };
    snap now = { .mem = malloc((size_t)N_BLOCKS * p.block_bytes) };
    CHECK(before.mem && now.mem, "snapshot memory");
    if (!before.mem || !now.mem) return test_main_end();
    take(&p, tabs, &before);

    /* 1. a full transaction, rolled back on request */
    kv_txn x = { 0 };
    CHECK(run_txn(&x, &p, &A, &B, &C, &err) == 0, "transaction: %s", err.msg);
    CHECK(A.n_blocks == 4 && B.n_blocks == 3 && C.n_blocks == 3, "blocks during: %d %d %d", A.n_blocks,
          B.n_blocks, C.n_blocks);
    CHECK(A.blocks[1] != before.tab[0].blocks[1] && A.blocks[2] != before.tab[0].blocks[2] &&
              B.blocks[0] != before.tab[1].blocks[0],
          "the shared blocks written were copied");
    CHECK(p.n_free == before.n_free - 5, "5 blocks taken (3 copies, 2 new), %d free of %d", p.n_free,
          before.n_free);
    kv_txn_rollback(&x);
    check_same(&p, tabs, &before, &now, "rollback");
    check_refsum(&p, tabs, 3, "rollback");

    /* 2. the pool runs out in the middle (B's copy): the rollback undoes A's
     * copies and new block too */
    kv_table hog = { 0 };
    CHECK(kv_table_reserve(&p, &hog, (before.n_free - 3) * BS, &err) == 0, "hog: %s", err.msg);
    kv_table *tabs_h[4] = { &A, &B, &C, &hog };
    snap before_h = { .mem = malloc((size_t)N_BLOCKS * p.block_bytes) };
    CHECK(before_h.mem != NULL, "snapshot memory");
    if (!before_h.mem) return test_main_end();
    take(&p, tabs, &before_h);
    const int rc = run_txn(&x, &p, &A, &B, &C, &err);
    CHECK(rc == KVI_E_NO_KV_SPACE, "exhausted pool: rc %d (%s)", rc, err.msg);
    CHECK(p.n_free == 0, "every free block was taken before the failure (%d left)", p.n_free);
    kv_txn_rollback(&x);
    check_same(&p, tabs, &before_h, &now, "rollback after failure");
    check_refsum(&p, tabs_h, 4, "rollback after failure");
    free(before_h.mem);
    kv_table_release(&p, &hog);
    check_same(&p, tabs, &before, &now, "hog released");

    /* 3. the same transaction, committed */
    CHECK(run_txn(&x, &p, &A, &B, &C, &err) == 0, "transaction: %s", err.msg);
    kv_txn_commit(&x);
    check_refsum(&p, tabs, 3, "commit");
    const int32_t *oa = before.tab[0].blocks, *ob = before.tab[1].blocks, *oc = before.tab[2].blocks;
    CHECK(A.n_blocks == 4 && B.n_blocks == 3 && C.n_blocks == 3, "blocks after: %d %d %d", A.n_blocks,
          B.n_blocks, C.n_blocks);
    CHECK(A.blocks[0] == oa[0] && B.blocks[1] == ob[1] && B.blocks[2] == ob[2] && C.blocks[0] == oc[0] &&
              C.blocks[1] == oc[1],
          "blocks not written keep their ids");
    for (int k = 1; k <= 2; k++) {
        CHECK(!memcmp(p.mem[A.blocks[k]], before.mem + (size_t)oa[k] * p.block_bytes, p.block_bytes),
              "A's copy of block %d holds the original's bytes", k);
        CHECK(p.refcount[A.blocks[k]] == 1 && p.refcount[oa[k]] == 1, "A block %d: copy %d, original %d refs",
              k, p.refcount[A.blocks[k]], p.refcount[oa[k]]);
    }
    CHECK(!memcmp(p.mem[B.blocks[0]], before.mem + (size_t)ob[0] * p.block_bytes, p.block_bytes),
          "B's copy of block 0 holds the original's bytes");
    CHECK(p.refcount[B.blocks[0]] == 1 && p.refcount[oa[0]] == 1, "B block 0: copy %d, original %d refs",
          p.refcount[B.blocks[0]], p.refcount[oa[0]]);
    CHECK(!p.indexed[oc[1]] && p.indexed[oc[0]], "C's written block left the index, the other stayed");
    CHECK(p.n_free == before.n_free - 5, "%d free after commit, before %d", p.n_free, before.n_free);
    CHECK(A.n_pos == 10 && B.n_pos == 10 && C.n_pos == 8, "lengths are the caller's");
    for (int32_t b = 0; b < N_BLOCKS; b++)
        if (before.refcount[b] > 0)
            CHECK(!memcmp(p.mem[b], before.mem + (size_t)b * p.block_bytes, p.block_bytes),
                  "block %d bytes unchanged by the commit", b);

    /* 4. the contract's bound: more tables than begin allowed is refused */
    CHECK(kv_txn_begin(&x, &p, 1, 1) == 0, "begin small");
    kv_table D = { 0 };
    CHECK(kv_txn_add(&x, &D, 0, 0, &err) == 0, "one table: %s", err.msg);
    CHECK(kv_txn_add(&x, &C, 10, 10, &err) == KVI_E_INVALID, "a second table is refused");
    kv_txn_rollback(&x);
    CHECK(D.n_blocks == 0, "D rolled back to no blocks");

    kv_txn_free(&x);
    kv_table_release(&p, &D);
    kv_table_release(&p, &A);
    kv_table_release(&p, &B);
    kv_table_release(&p, &C);
    CHECK(p.n_used == 0 && p.n_free + p.n_cached == N_BLOCKS, "all blocks back: used %d", p.n_used);
    free(before.mem);
    free(now.mem);
    kv_pool_free(&p);
    return test_main_end();
}
