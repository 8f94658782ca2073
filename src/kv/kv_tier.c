/*
 * kv_tier.c — the host-RAM tier of evicted prefix blocks, and the walk that
 * brings tiered blocks back into the pool (keys, formats and invariants in
 * kv_tier.h).
 *
 * RAM entries: one allocation each, ram_ent followed by tokens[block_size] and
 * the block's bytes[block_bytes]; a hash table on the key (chains through
 * hnext) and an LRU list (head oldest). Putting past bytes_max pushes the oldest
 * entries out, to the disk tier when there is one. A walk (kv_tier_extend) loads
 * a RAM hit into a fresh pool block and frees the entry; a disk hit is read into
 * the fresh block, its file kept.
 */
#include "kv/kv_tier.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct ram_ent {
    uint64_t key;
    struct ram_ent *hnext, *prev, *next;
    /* followed by int32_t tok[block_size], uint8_t data[block_bytes] */
} ram_ent;

struct kv_tier {
    kv_tier_layout x;
    kvi_tier_stats st[2]; /* RAM, disk */
    ram_ent **bucket;     /* [n_buckets] */
    uint32_t n_buckets;
    ram_ent *lru_head, *lru_tail;
    kv_tier_disk *disk; /* NULL: no disk tier */
};

static int32_t *ent_tok(ram_ent *e) { return (int32_t *)(e + 1); }
static uint8_t *ent_data(ram_ent *e, int32_t bs) { return (uint8_t *)(ent_tok(e) + bs); }

static uint64_t tier_key(const kv_tier *tr, uint64_t chain_hash)
{
    uint64_t x = chain_hash ^ tr->x.layout_id;
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

bool kv_tier_supported(const kv_pool *p)
{
    if (p->n_wlayers || p->n_rlayers || p->v_in_k) return false;
    for (int l = 0; l < p->n_layers; l++)
        if (p->layer_slot[l] < 0) return false;
    return true;
}

int kv_tier_create(const kv_pool *p, const kv_tier_layout *x, size_t ram_bytes, const char *dir,
                   size_t disk_bytes, kv_tier **out, kvi_error *err)
{
    *out = NULL;
    if (ram_bytes == 0 && !dir) return 0;
    if (!kv_tier_supported(p)) return 0; /* skipped, not an error: see kv_tier.h */
    kv_tier *tr = calloc(1, sizeof *tr);
    if (!tr) return err_set(err, KVI_E_NOMEM, "kv tier: out of memory");
    tr->x = *x;
    tr->st[0].bytes_max = ram_bytes;
    const size_t want = x->block_bytes ? ram_bytes / x->block_bytes : 0;
    tr->n_buckets = 64;
    while (tr->n_buckets < want && tr->n_buckets < (1u << 20)) tr->n_buckets <<= 1;
    tr->bucket = calloc(tr->n_buckets, sizeof *tr->bucket);
    if (!tr->bucket) {
        kv_tier_free(tr);
        return err_set(err, KVI_E_NOMEM, "kv tier: out of memory");
    }
    if (dir && !(tr->disk = kv_tier_disk_open(dir, disk_bytes, x, &tr->st[1], err))) {
        kv_tier_free(tr);
        return err ? err->code : KVI_E_IO;
    }
    *out = tr;
    return 0;
}

/* Unlinks e from its bucket and the LRU; the caller frees it. */
static void ram_unlink(kv_tier *tr, ram_ent *e)
{
    ram_ent **link = &tr->bucket[e->key & (tr->n_buckets - 1)];
    while (*link != e) link = &(*link)->hnext;
    *link = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        tr->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        tr->lru_tail = e->prev;
    tr->st[0].blocks--;
    tr->st[0].bytes -= tr->x.block_bytes;
}

void kv_tier_free(kv_tier *tr)
{
    if (!tr) return;
    while (tr->lru_head) {
        ram_ent *e = tr->lru_head;
        ram_unlink(tr, e);
        free(e);
    }
    free(tr->bucket);
    kv_tier_disk_close(tr->disk);
    free(tr);
}

static ram_ent *ram_find(const kv_tier *tr, uint64_t key, const int32_t *tok)
{
    for (ram_ent *e = tr->bucket[key & (tr->n_buckets - 1)]; e; e = e->hnext)
        if (e->key == key && memcmp(ent_tok(e), tok, (size_t)tr->x.block_size * sizeof *tok) == 0) return e;
    return NULL;
}

static void ram_push(kv_tier *tr, ram_ent *e)
{
    e->prev = tr->lru_tail;
    e->next = NULL;
    if (tr->lru_tail)
        tr->lru_tail->next = e;
    else
        tr->lru_head = e;
    tr->lru_tail = e;
}

/* One block into the RAM tier, the oldest entries out to disk past the bound. */
static void ram_put(kv_tier *tr, uint64_t key, const int32_t *tok, const uint8_t *data)
{
    const int32_t bs = tr->x.block_size;
    ram_ent *e = ram_find(tr, key, tok);
    if (e) { /* already here: now the most recent */
        if (e != tr->lru_tail) {
            if (e->prev)
                e->prev->next = e->next;
            else
                tr->lru_head = e->next;
            e->next->prev = e->prev;
            ram_push(tr, e);
        }
        return;
    }
    if (tr->x.block_bytes > tr->st[0].bytes_max) {
        if (tr->disk) (void)kv_tier_disk_put(tr->disk, key, tok, data);
        return;
    }
    while (tr->st[0].bytes + tr->x.block_bytes > tr->st[0].bytes_max && tr->lru_head) {
        ram_ent *old = tr->lru_head;
        ram_unlink(tr, old);
        if (tr->disk) (void)kv_tier_disk_put(tr->disk, old->key, ent_tok(old), ent_data(old, bs));
        tr->st[0].evictions++;
        free(old);
    }
    e = malloc(sizeof *e + (size_t)bs * sizeof(int32_t) + tr->x.block_bytes);
    if (!e) return; /* a cache: losing the block costs a recomputation only */
    e->key = key;
    memcpy(ent_tok(e), tok, (size_t)bs * sizeof *tok);
    memcpy(ent_data(e, bs), data, tr->x.block_bytes);
    ram_ent **head = &tr->bucket[key & (tr->n_buckets - 1)];
    e->hnext = *head;
    *head = e;
    ram_push(tr, e);
    tr->st[0].blocks++;
    tr->st[0].bytes += tr->x.block_bytes;
    tr->st[0].store_bytes += tr->x.block_bytes;
}

void kv_tier_put_block(kv_tier *tr, const kv_pool *p, int32_t b)
{
    if (!p->indexed[b] || p->salted[b]) return;
    const int32_t *tok = p->btok + (size_t)b * p->block_size;
    ram_put(tr, tier_key(tr, p->hash[b]), tok, p->mem[b]);
}

/* Loads the block of key and tokens tok into dst from RAM (entry freed) or
 * disk: 1 RAM, 2 disk, 0 neither. */
static int tier_load(kv_tier *tr, uint64_t key, const int32_t *tok, uint8_t *dst)
{
    ram_ent *e = ram_find(tr, key, tok);
    if (e) {
        memcpy(dst, ent_data(e, tr->x.block_size), tr->x.block_bytes);
        ram_unlink(tr, e);
        free(e);
        tr->st[0].hits++;
        tr->st[0].load_bytes += tr->x.block_bytes;
        return 1;
    }
    tr->st[0].misses++;
    return tr->disk && kv_tier_disk_get(tr->disk, key, tok, dst) == 0 ? 2 : 0;
}

void kv_tier_extend(kv_tier *tr, kv_pool *p, kv_table *t, const int32_t *tokens, int32_t n_max,
                    int32_t *n_ram, int32_t *n_disk)
{
    *n_ram = *n_disk = 0;
    const int32_t bs = p->block_size;
    int32_t n = t->n_blocks;
    if (!tr || t->salt || t->no_index || t->n_pos != n * bs) return;
    uint64_t ph = n > 0 ? p->hash[t->blocks[n - 1]] : KV_PREFIX_SEED;
    if (n > 0 && !p->indexed[t->blocks[n - 1]]) return;
    for (; (int64_t)(n + 1) * bs <= n_max; n++) {
        const int32_t *tok = tokens + (size_t)n * bs;
        const uint64_t h = kv_prefix_block_hash(ph, tok, bs);
        const uint64_t key = tier_key(tr, h);
        if (!ram_find(tr, key, tok) && !(tr->disk && kv_tier_disk_has(tr->disk, key))) {
            tr->st[0].misses++;
            if (tr->disk) tr->st[1].misses++;
            break;
        }
        /* the fresh block first: taking it may push a pool block into RAM, and
         * that may move the block looked for from RAM to disk */
        if (kv_table_reserve(p, t, (n + 1) * bs, NULL) != 0) break;
        const int src = tier_load(tr, key, tok, p->mem[t->blocks[n]]);
        if (src == 0) {
            kv_table_drop_blocks(p, t, n);
            break;
        }
        memcpy(t->tokens + (size_t)n * bs, tok, (size_t)bs * sizeof *tok);
        t->n_pos = (n + 1) * bs;
        kv_prefix_index_table(p, t, n);
        *(src == 1 ? n_ram : n_disk) += bs;
        ph = h;
        if (!p->indexed[t->blocks[n]]) { /* (an equal block is indexed: the chain ends here) */
            n++;
            break;
        }
    }
}

int kv_tier_flush(kv_tier *tr, const kv_pool *p, kvi_error *err)
{
    if (!tr || !tr->disk) return 0;
    int rc = 0;
    const int32_t bs = tr->x.block_size;
    for (ram_ent *e = tr->lru_head; e && rc == 0; e = e->next)
        rc = kv_tier_disk_put(tr->disk, e->key, ent_tok(e), ent_data(e, bs));
    for (int32_t b = 0; b < p->n_alloc && rc == 0; b++)
        if (p->indexed[b] && !p->salted[b])
            rc = kv_tier_disk_put(tr->disk, tier_key(tr, p->hash[b]), p->btok + (size_t)b * bs, p->mem[b]);
    if (rc) return err_set(err, rc, "kv tier: cannot write a block file to the cache directory");
    return 0;
}

void kv_tier_get_stats(const kv_tier *tr, kvi_tier_stats st[2])
{
    if (tr) {
        st[0] = tr->st[0];
        st[1] = tr->st[1];
    } else {
        memset(st, 0, 2 * sizeof *st);
    }
}
