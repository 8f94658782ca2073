/*
 * kv_prefix.c — the prefix index of full KV blocks, and the LRU of cached ones.
 *
 * A full block of a sequence (block_size positions, all written) is named by
 *
 *     hash(block i) = H(hash(block i - 1), tokens of block i),  hash(-1) = SEED ^ salt
 *
 * (salt: the table's other inputs, e.g. its LoRA adapters; kv_cache.h)
 * so equal hashes mean (barring collisions) equal token prefixes and salts up to the end
 * of the block, and equal prefixes mean equal keys and values at those positions
 * (every row's K/V depends only on its sequence's tokens before it). The index is
 * a chained hash table: bucket[hash & (n_buckets - 1)] -> block -> hnext -> ...
 * Nothing is trusted to the hash alone: a lookup also checks the block's parent
 * (the block matched one step earlier) and compares its block_size tokens.
 *
 * Invariants:
 *  - indexed[b] == 1 exactly when b is on the chain of bucket[hash[b] & mask];
 *    its hash, parent and btok[b][...] describe its content, which no one writes
 *    while it is indexed (writers unindex or copy first: kv_cache.h);
 *  - an indexed block with refcount 0 is in the LRU (doubly linked, oldest at
 *    lru_head), counted in n_cached; every other block is not in the LRU.
 */
#include "kv/kv_cache.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t kv_prefix_block_hash(uint64_t parent_hash, const int32_t *tok, int n)
{
    uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)tok[i];
        h *= 0x100000001b3ull;
    }
    return mix64(h);
}

int kv_prefix_init(kv_pool *p, kvi_error *err)
{
    const size_t nb = (size_t)p->n_blocks_max;
    uint32_t nbk = 16;
    while (nbk < nb && nbk < (1u << 22)) nbk <<= 1;
    p->n_buckets = nbk;
    p->indexed = calloc(nb, 1);
    p->salted = calloc(nb, 1);
    p->hash = calloc(nb, sizeof *p->hash);
    p->parent = calloc(nb, sizeof *p->parent);
    p->btok = calloc(nb * (size_t)p->block_size, sizeof *p->btok);
    p->hnext = calloc(nb, sizeof *p->hnext);
    p->lru_prev = calloc(nb, sizeof *p->lru_prev);
    p->lru_next = calloc(nb, sizeof *p->lru_next);
    p->bucket = malloc((size_t)nbk * sizeof *p->bucket);
    if (!p->indexed || !p->salted || !p->hash || !p->parent || !p->btok || !p->hnext || !p->lru_prev ||
        !p->lru_next || !p->bucket)
        return err_set(err, KVI_E_NOMEM, "kv cache: cannot allocate the prefix index for %zu blocks", nb);
    for (uint32_t i = 0; i < nbk; i++) p->bucket[i] = -1;
    p->lru_head = p->lru_tail = -1;
    return 0;
}

void kv_prefix_free(kv_pool *p)
{
    free(p->indexed);
    free(p->salted);
    free(p->hash);
    free(p->parent);
    free(p->btok);
    free(p->hnext);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->bucket);
    p->indexed = p->salted = NULL;
    p->hash = NULL;
    p->parent = p->btok = p->hnext = p->lru_prev = p->lru_next = p->bucket = NULL;
}

void kv_lru_push(kv_pool *p, int32_t b)
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
}

void kv_lru_unlink(kv_pool *p, int32_t b)
{
    const int32_t pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0)
        p->lru_next[pr] = nx;
    else
        p->lru_head = nx;
    if (nx >= 0)
        p->lru_prev[nx] = pr;
    else
        p->lru_tail = pr;
    p->lru_prev[b] = p->lru_next[b] = -1;
}

void kv_prefix_remove(kv_pool *p, int32_t b)
{
    if (!p->indexed[b]) return;
    kv_snap_drop(p, b); /* first: b is then the last block freed (pool_take relies on it) */
    int32_t *link = &p->bucket[p->hash[b] & (p->n_buckets - 1)];
    while (*link >= 0 && *link != b) link = &p->hnext[*link];
    if (*link == b) *link = p->hnext[b];
    p->indexed[b] = 0;
    if (p->refcount[b] == 0) {
        kv_lru_unlink(p, b);
        p->n_cached--;
        kv_pool_free_block(p, b);
    }
}

/* The indexed block with this hash, parent and tokens, or -1. */
static int32_t lookup(const kv_pool *p, uint64_t h, int32_t parent, const int32_t *tok)
{
    for (int32_t b = p->bucket[h & (p->n_buckets - 1)]; b >= 0; b = p->hnext[b]) {
        if (p->hash[b] == h && p->parent[b] == parent &&
            memcmp(p->btok + (size_t)b * p->block_size, tok, (size_t)p->block_size * sizeof *tok) == 0)
            return b;
    }
    return -1;
}

void kv_prefix_index_table(kv_pool *p, kv_table *t, int32_t b0)
{
    if (t->no_index) return;
    const int bs = p->block_size;
    int32_t n_full = t->n_pos / bs;
    /* q4 keys re-read from codes (kv_cache.h): never offered as a cold prefix */
    if (t->lossy_block > 0 && n_full > t->lossy_block - 1) n_full = t->lossy_block - 1;
    if (b0 < 0) b0 = 0;
    for (int32_t i = b0; i < n_full; i++) {
        const int32_t b = t->blocks[i];
        if (p->indexed[b]) continue;
        int32_t par = -1;
        uint64_t ph = KV_PREFIX_SEED ^ t->salt;
        if (i > 0) {
            par = t->blocks[i - 1];
            if (!p->indexed[par]) return; /* its chain is not named: neither is b */
            ph = p->hash[par];
        }
        const int32_t *tok = t->tokens + (size_t)i * bs;
        const uint64_t h = kv_prefix_block_hash(ph, tok, bs);
        if (lookup(p, h, par, tok) >= 0) return; /* an equal block is indexed already */
        p->indexed[b] = 1;
        p->salted[b] = t->salt != 0;
        p->hash[b] = h;
        p->parent[b] = par;
        memcpy(p->btok + (size_t)b * bs, tok, (size_t)bs * sizeof *tok);
        int32_t *head = &p->bucket[h & (p->n_buckets - 1)];
        p->hnext[b] = *head;
        *head = b;
    }
}

int32_t kv_prefix_match(kv_pool *p, kv_table *t, const int32_t *tokens, int32_t n_max, kvi_error *err)
{
    const int bs = p->block_size;
    const int32_t max_blocks = n_max / bs;
    if (max_blocks <= 0) return 0;
    /* the chain's blocks, walked once; the table changes only once all is decided,
     * so a failed allocation leaves it as it was */
    int32_t *ids = malloc((size_t)max_blocks * sizeof *ids); /* [max_blocks] */
    if (!ids) return err_set(err, KVI_E_NOMEM, "kv cache: out of memory matching a prefix");
    int32_t par = -1, n = 0;
    uint64_t ph = KV_PREFIX_SEED ^ t->salt;
    for (; n < max_blocks; n++) {
        const int32_t *tok = tokens + (size_t)n * bs;
        const uint64_t h = kv_prefix_block_hash(ph, tok, bs);
        const int32_t b = lookup(p, h, par, tok);
        if (b < 0) break;
        ids[n] = par = b;
        ph = h;
    }
    /* recurrent layers: only up to the chain's last block holding a state snapshot */
    int32_t snap_b = -1;
    if (p->n_rlayers) {
        while (n > 0 && !(p->snap && p->snap[ids[n - 1]])) n--;
        if (n > 0) snap_b = ids[n - 1];
    }
    /* window layers: the blocks the new table's window reaches must still hold
     * their window parts (kv_cache.h); otherwise a shorter match */
    int32_t wdrop = 0;
    while (p->n_wlayers && n > 0) {
        const int64_t w = ((int64_t)n * bs - p->win_max + 1 - p->win_slack) / bs;
        wdrop = w > 0 ? (int32_t)w : 0;
        int32_t i = wdrop;
        while (i < n && p->wmem[ids[i]]) i++;
        if (i == n) break;
        n--;
    }
    int rc = 0;
    if (n > 0 && snap_b >= 0) rc = kv_table_state_take(p, t, err);
    if (rc == 0 && n > t->cap) {
        int32_t *nb = realloc(t->blocks, (size_t)n * sizeof *nb);
        if (nb) t->blocks = nb;
        int32_t *nt = nb ? realloc(t->tokens, (size_t)n * bs * sizeof *nt) : NULL;
        if (nt) {
            t->tokens = nt;
            t->cap = n;
        } else {
            rc = err_set(err, KVI_E_NOMEM, "kv cache: cannot grow a block table");
        }
    }
    if (rc || n == 0) {
        free(ids);
        return rc;
    }
    for (int32_t i = 0; i < n; i++) {
        kv_pool_ref(p, ids[i]);
        if (p->n_wlayers && i >= wdrop) p->wref[ids[i]]++;
        t->blocks[i] = ids[i];
    }
    free(ids);
    memcpy(t->tokens, tokens, (size_t)n * bs * sizeof *tokens);
    t->n_blocks = n;
    t->wdrop = wdrop;
    t->n_pos = n * bs;
    if (snap_b >= 0) {
        kv_snap_get(p, snap_b, t->state);
        p->n_snaps_restored++;
    }
    return t->n_pos;
}
