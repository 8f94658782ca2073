/*
 * kv_cache.h — the paged KV cache: a pool of fixed-size blocks shared by all
 * sequences, and a block table per sequence.
 *
 * One block holds block_size consecutive positions of one sequence, for every
 * layer, keys and values:
 *
 *     block = [n_layers][ K region: k_bytes | V: block_size rows of row_bytes_v ]
 *     K region = block_size rows of row_bytes_k = quant_row_bytes(type_k, kv_dim)
 *                (f32, f16, q8_0, q4_0), or one KIVI key group (type q4, see
 *                kv_quant.h: per-channel scales, then 4-bit codes), kv_dim =
 *                n_kv_heads * head_dim
 *
 * so position p of a sequence lives in block table[p / block_size], row
 * p % block_size.
 *
 * Latent attention (type_v KVI_TYPE_KV_LATENT at init: DeepSeek's MLA): a layer
 * holds only its K region, one row per position [c | rope part]; v_in_k is set,
 * type_v / row_bytes_v equal the key's, and kv_v_row returns the key row, whose
 * first elements are the value. Writing a value row is a no-op (the key write
 * stored it), reading one reads the key row.
 *
 * Layer kinds (models with sliding-window layers, kv_pool_init_layers): a block's
 * layers are split in two parts allocated separately, mem[b] = the global layers
 * [n_glayers][K | V] and wmem[b] = the window layers [n_wlayers][K | V] (layer l at
 * slot layer_slot[l] of its part). A window layer at position p reads positions
 * > p - win_max only, so once a table's next position n_pos is past a block by
 * win_max + win_slack, the table no longer needs that block's window part: it
 * advances its cursor wdrop (blocks [0, wdrop) released, kv_table_window_release,
 * called when a step commits) and the part returns to the window free list when
 * no other table needs it (wref[b] counts the table references at or after their
 * tables' cursors). The global part stays with the block as before. win_slack
 * positions are kept for rewinds (speculative decoding); a rewind below
 * kv_table_rewind_min is refused by the engine. Blocks get memory from the system lazily, the first time the
 * pool hands them out, and return to a free list (keeping their memory) when no
 * table refers to them any more.
 *
 * Invariants:
 *  - n_used + n_free + n_cached == n_alloc <= n_blocks_max, and n_alloc * block_bytes
 *    is exactly the memory the pool holds (kv_pool_bytes_allocated);
 *  - refcount[b] > 0 exactly when some table holds b; the sum of refcounts equals
 *    the number of table entries over all tables;
 *  - a table with n_pos positions holds exactly ceil(n_pos / block_size) blocks;
 *  - sharing: a block with refcount > 1 (shared by prefix reuse or fork) or an
 *    indexed block is never written; a writer first takes a private copy (copy on
 *    write) or drops the block from the index. Unreferenced indexed blocks wait in
 *    an LRU and are the last blocks the pool hands out again;
 *  - accounting (invariant 5): bytes_sys is every byte of KV data the cache holds
 *    from the system, counted where it is allocated and freed: n_alloc *
 *    gblock_bytes of block (global) parts, n_walloc * wblock_bytes of window parts
 *    and n_tails * tail_bytes of per-table q4 key tails; the parts stay within
 *    budget (the tails, per table, outside it).
 *    Without window layers gblock_bytes == block_bytes and wblock_bytes == 0;
 *    plus n_states * state_bytes of table states, within the budget's reservation
 *    of n_state_slots states (snapshots live in blocks: counted as blocks);
 *  - window parts: wmem[b] != NULL whenever wref[b] > 0; a table reads the window
 *    layers of its blocks [wdrop, n_blocks) only; n_walloc == blocks holding a
 *    part + n_wfree.
 *
 * Recurrent layers (hybrid models: window[l] == KV_LAYER_RECURRENT at init) hold no
 * rows in blocks: layer_rec[l] is set and state_slot[l] (== layer_slot[l]) is the
 * layer's slot in the table's state instead; a KV_LAYER_GLOBAL_STATE layer has both,
 * its rows in the global part (layer_slot) and a state slot (state_slot). A table's state (state, state_bytes = n_rlayers *
 * state_layer_bytes, allocated at its first step: kv_table_state_take) holds what
 * the recurrent layers keep of the sequence so far, after position n_pos - 1 (the
 * forward pass's layout, fwd_delta.h); it cannot be rewound, only restarted at
 * position 0 (the engine refuses anything else). The budget reserves n_state_slots
 * states beside the blocks, so a state never competes with blocks for room.
 * Prefix snapshots: an indexed block b may carry the state after its last position
 * (snap[b]: snap_blocks block ids of the pool, the state copied across them in
 * order, each held by the snapshot with refcount 1); kv_prefix_match takes a chain
 * only up to its last block with a snapshot, and copies that snapshot into the new
 * table's state. A snapshot's blocks go back when its block leaves the index, and
 * are the pool's last resort when it has no other block to hand out (a snapshot is
 * a cache: losing it only costs a recomputation). A table keeps at most its two
 * newest snapshots (snap_at): a long prompt prefilled in chunks, or a long decode,
 * leaves two, not one a chunk or block.
 *
 * Indexer rows (DeepSeek V3.2's lightning indexer, kv_pool_indexer_init): a second
 * per-position row of idx_dim f32 beside each attention layer's K (and V) rows, at the
 * end of the layer's region of a block: layer region = [K | V | block_size indexer
 * rows]. Being part of the block, the rows are shared by the prefix index, copied on
 * write, forked and saved with it; idx_bytes (one layer's rows of a block) is counted
 * inside layer_bytes and reported apart (kv_pool_bytes_per_token_indexer).
 *
 * KIVI (q4) keys and the per-table f16 tail (kv_quant.h), for every feature:
 *  - fork (kv_table_share) copies the tail: the child reads exactly the keys the
 *    parent reads, bit for bit;
 *  - prefix reuse takes whole indexed blocks only (kv_prefix_match), i.e. whole,
 *    complete key groups, which a fresh prefill quantises the same way; the new
 *    sequence starts writing at a group boundary, so it never needs a tail for
 *    reused positions;
 *  - session files save and restore the tail (session.c, version 2);
 *  - context policies rebuild the tail of every group they write (policy.c);
 *  - a write into a complete group whose f16 rows are gone (truncation into an
 *    earlier group, or rewriting positions before n_pos) re-reads the group's
 *    rows from its 4-bit codes: that is lossy, so the table records the first
 *    such group in lossy_block and never offers it or later blocks to the prefix
 *    index (a cold prefill would quantise different values). Truncation to a
 *    group boundary or inside the tail's group stays exact.
 */
#ifndef KVI_KV_CACHE_H
#define KVI_KV_CACHE_H

#include "kvinfer_types.h"
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

typedef struct kv_pool {
    int n_layers;
    int kv_dim;     /* n_kv_heads * head_dim: elements of one K (or V) row */
    int block_size; /* positions per block */
    kvi_type type_k, type_v;
    size_t row_bytes_k, row_bytes_v; /* row_bytes_k is 0 for q4 keys (no K rows) */
    bool v_in_k;                     /* latent: values are the key rows (see above) */
    size_t layer_bytes;              /* k_bytes + block_size * row_bytes_v */
    size_t block_bytes;              /* n_layers * layer_bytes (both parts) */
    /* layer kinds (see above); without window layers n_wlayers == 0 */
    int32_t *layer_slot; /* [n_layers] index of the layer within its part */
    uint8_t *layer_win;  /* [n_layers] 1: the layer lives in the window part */
    int n_wlayers;       /* window layers */
    int win_max;         /* largest window (positions), 0 when none */
    int win_slack;       /* positions kept past the window for rewinds */
    size_t gblock_bytes; /* global part of a block: (n_layers - n_wlayers) * layer_bytes */
    size_t wblock_bytes; /* window part: n_wlayers * layer_bytes */
    uint8_t **wmem;      /* [n_blocks_max] window part of each block, NULL: none held */
    int32_t *wref;       /* [n_blocks_max] table references that need the window part */
    uint8_t **wfree;     /* [n_blocks_max] window parts with memory, unused */
    int32_t n_wfree;
    /* recurrent layers (see above); n_rlayers 0: none */
    uint8_t *layer_rec; /* [n_layers] 1: recurrent (no KV rows) */
    int32_t *state_slot; /* [n_layers] the layer's slot in a table's state, -1: none */
    int n_rlayers;
    size_t state_layer_bytes; /* one recurrent layer's state */
    size_t state_bytes;       /* one table's state: n_rlayers * state_layer_bytes */
    int32_t n_state_slots;    /* states the budget reserves */
    int32_t n_states;         /* tables holding a state */
    int32_t snap_blocks;      /* blocks one snapshot spans: ceil(state_bytes / gblock_bytes) */
    int32_t **snap;           /* [n_blocks_max] the snapshot's block ids, or NULL */
    int32_t n_snaps;          /* snapshots held */
    int32_t snap_cursor;      /* where the next eviction of a snapshot starts looking */
    uint64_t n_snaps_taken, n_snaps_restored, n_snaps_evicted;
    int32_t n_walloc;     /* window parts with memory (held by blocks or free) */
    uint64_t n_wreleased; /* window parts given up by tables (statistics) */
    size_t budget;        /* bound on the blocks' parts (kv_pool_bytes_allocated) */
    int32_t n_blocks_max; /* what the budget allows */
    int32_t n_alloc;      /* blocks that have memory */
    int32_t n_used;       /* blocks held by at least one table */
    uint8_t **mem;        /* [n_blocks_max] block memory, NULL until first use */
    int32_t *refcount;    /* [n_blocks_max] */
    int32_t *free_ids;    /* [n_blocks_max] stack of allocated, unreferenced blocks */
    int32_t n_free;
    /* indexer rows (see above); idx_dim 0: none */
    int idx_dim;      /* f32 elements of one indexer row */
    size_t idx_bytes; /* one layer's indexer rows of a block: block_size * idx_dim * 4 */
    /* layout (kv_quant.h) */
    size_t k_bytes;    /* one layer's K region of a block */
    size_t tail_bytes; /* per-table state (q4 keys: the newest group in f16), else 0 */
    /* prefix index and LRU of reusable blocks (kv_prefix.c). An indexed block is
     * full, its content is fixed, and (hash, parent, tokens) name it; an indexed
     * block that no table holds sits in the LRU instead of the free stack. */
    int32_t n_cached;             /* unreferenced indexed blocks (in the LRU) */
    uint8_t *indexed;             /* [n_blocks_max] 1 when in the prefix index */
    uint8_t *salted;              /* [n_blocks_max] 1: indexed with a nonzero table salt */
    uint64_t *hash;               /* [n_blocks_max] chain hash of an indexed block */
    int32_t *parent;              /* [n_blocks_max] indexed block before it, -1 for a first block */
    int32_t *btok;                /* [n_blocks_max][block_size] tokens of an indexed block */
    int32_t *hnext;               /* [n_blocks_max] next block of the same hash bucket, -1 */
    int32_t *bucket;              /* [n_buckets] first block of each hash bucket, -1 */
    uint32_t n_buckets;           /* power of two */
    int32_t *lru_prev, *lru_next; /* [n_blocks_max] LRU links, -1 at the ends */
    int32_t lru_head, lru_tail;   /* least / most recently freed cached block, -1 */
    uint64_t n_lru_evicted;       /* cached blocks taken back for new data */
    uint64_t n_cow;               /* copy-on-write block copies */
    struct kv_tier *tier;         /* RAM / disk tiers an evicted indexed block goes to, or NULL (kv_tier.h) */
    /* accounting */
    int32_t n_tails;  /* tables holding an allocated tail (tail_bytes each) */
    size_t bytes_sys; /* KV bytes held from the system: blocks and tails */
} kv_pool;

typedef struct kv_table {
    int32_t *blocks; /* [cap] physical block ids, logical order */
    int32_t n_blocks;
    int32_t cap;
    int32_t n_pos;       /* positions whose K/V are valid: 0..n_pos-1 */
    uint8_t *tail;       /* [pool tail_bytes] q4 keys only: f16 keys of the newest
                                group (kv_quant.h); NULL until the first key write.
                                Fork: kv_table_copy_tail; freed by kv_table_release */
    int32_t *tokens;     /* [cap * block_size] token of each position (prefix index) */
    bool no_index;       /* positions re-assigned by a context policy: never indexed */
    uint64_t salt;       /* the K/V's inputs besides the tokens (a LoRA set), mixed into
                            the first block's prefix hash; 0: none */
    int32_t wdrop;       /* window layers: blocks [0, wdrop) no longer needed (released) */
    float *state;        /* [pool state_bytes / 4] recurrent layers' state, or NULL */
    int32_t snap_at[2];  /* 1 + the blocks holding this table's two newest snapshots, 0: none */
    int32_t lossy_block; /* q4 keys: 1 + the first block whose keys were re-read
                                from 4-bit codes (see above), 0 when none; blocks from
                                it on are never indexed */
} kv_table;

int kv_pool_init(kv_pool *p, int n_layers, int kv_dim, int block_size, kvi_type type_k, kvi_type type_v,
                 size_t budget_bytes, kvi_error *err);
/* The same with layer kinds: window[l] is 0 (global) or the window W of layer l
 * (NULL: all global); slack: positions kept past the window for rewinds. */
int kv_pool_init_layers(kv_pool *p, int n_layers, const int *window, int slack, int kv_dim, int block_size,
                        kvi_type type_k, kvi_type type_v, size_t budget_bytes, kvi_error *err);
/* Value of window[l] (kv_pool_init_layers) for a recurrent layer: no KV rows. */
#define KV_LAYER_RECURRENT (-1)
/* Value of window[l] for a layer another process holds (a pipeline stage's pool,
 * engine_pipe.h): no memory here, layer_slot[l] -1; never read or written. */
#define KV_LAYER_ABSENT (-2)
/* Indexer rows of idx_dim f32 per position and attention layer (see above). Call right
 * after kv_pool_init_layers, before any block is handed out: the blocks grow by the
 * rows and the pool holds as many blocks as the same budget allows. */
int kv_pool_indexer_init(kv_pool *p, int idx_dim, kvi_error *err);
/* Bytes per position of the indexer rows (all layers), 0 without them. */
size_t kv_pool_bytes_per_token_indexer(const kv_pool *p);
/* Bytes of the indexer rows of a sequence of n_ctx positions (attention layers
 * n_attn, blocks of block_size positions), for budgets. */
size_t kv_layout_indexer_seq_bytes(int n_attn, int idx_dim, int block_size, int64_t n_ctx);
/* Value of window[l] for a global attention layer that keeps a recurrent state too
 * (falcon-h1: attention and Mamba-2 in parallel): KV rows and a state slot. */
#define KV_LAYER_GLOBAL_STATE (-3)
/* Recurrent layers' state (see above): state_layer_bytes per recurrent layer and
 * table, n_slots tables at once, reserved from the budget. Call right after
 * kv_pool_init_layers with a window array marking recurrent layers. */
int kv_pool_state_init(kv_pool *p, size_t state_layer_bytes, int32_t n_slots, kvi_error *err);
/* The table's state memory (contents undefined: a row at position 0 starts from
 * zeros). 0, KVI_E_NO_KV_SPACE (every slot taken) or KVI_E_NOMEM. */
int kv_table_state_take(kv_pool *p, kv_table *t, kvi_error *err);
size_t kv_pool_bytes_states(const kv_pool *p); /* n_states * state_bytes */
/* Layer l's part of the table's state (recurrent layers only). */
static inline float *kv_state(const kv_pool *p, const kv_table *t, int l)
{
    return t->state + (size_t)p->state_slot[l] * (p->state_layer_bytes / sizeof(float));
}
/* Attaches the state src (state_bytes) to indexed block b as its snapshot (no-op
 * when b has one, is not indexed, or the pool has no room). 0, or -1: not taken. */
int kv_snap_put(kv_pool *p, int32_t b, const float *src);
/* Drops b's snapshot, its blocks back to the pool. */
void kv_snap_drop(kv_pool *p, int32_t b);
/* Copies b's snapshot into dst (state_bytes). */
void kv_snap_get(const kv_pool *p, int32_t b, float *dst);
/* Bytes one sequence of n_ctx positions can hold at most (both parts; a window
 * part only for the blocks its window and slack can span, plus the block being
 * written). window, slack as kv_pool_init_layers. 0 when the types do not fit. */
size_t kv_layout_seq_bytes(int n_layers, const int *window, int slack, int kv_dim, int block_size,
                           kvi_type type_k, kvi_type type_v, int64_t n_ctx);
/* Releases the window parts table t no longer needs (positions before
 * n_pos - win_max - win_slack): call once its positions are committed. */
void kv_table_window_release(kv_pool *p, kv_table *t);
/* The lowest length t may be truncated to and continue (window layers keep only
 * what follows it); 0 without window layers. */
int32_t kv_table_rewind_min(const kv_pool *p, const kv_table *t);
/* A window part for block b of t (fresh blocks and copies). 0, or -1 when the budget is spent. */
int kv_pool_wpart_take(kv_pool *p, int32_t b);
void kv_pool_free(kv_pool *p);
size_t kv_pool_bytes_per_token(const kv_pool *p);
size_t kv_pool_bytes_allocated(const kv_pool *p); /* blocks: both parts */
size_t kv_pool_bytes_tails(const kv_pool *p);     /* tails: n_tails * tail_bytes */

/* Makes the table hold blocks for positions 0..n_pos-1 (does not change t->n_pos).
 * KVI_E_NO_KV_SPACE when the pool is exhausted: then the table is unchanged. */
int kv_table_reserve(kv_pool *p, kv_table *t, int32_t n_pos, kvi_error *err);
/* Keeps positions 0..n_pos-1; blocks past them go back to the pool. */
void kv_table_truncate(kv_pool *p, kv_table *t, int32_t n_pos);
void kv_table_release(kv_pool *p, kv_table *t); /* truncate to 0 and free the array */

/* ---- sharing (kv_cache.c) ---- */
/* One more reference to block b (taking it out of the LRU when it was cached). */
void kv_pool_ref(kv_pool *p, int32_t b);
/* Drops one reference; at zero the block goes to the LRU (indexed) or the free stack. */
void kv_pool_unref(kv_pool *p, int32_t b);
/* Drops the table's blocks past its first n_blocks (n_pos is clamped to them). */
void kv_table_drop_blocks(kv_pool *p, kv_table *t, int32_t n_blocks);
/* Replaces table block i by a private copy (copy on write). The old block keeps
 * the table's reference, returned in *old: the caller drops it once the step
 * commits (kv_table_cow_unref), or undoes the copy (kv_table_cow_undo: the old
 * block back at i, the copy unreferenced). KVI_E_NO_KV_SPACE. */
int kv_table_cow(kv_pool *p, kv_table *t, int32_t i, int32_t *old, kvi_error *err);
void kv_table_cow_unref(kv_pool *p, const kv_table *t, int32_t i, int32_t old);
void kv_table_cow_undo(kv_pool *p, kv_table *t, int32_t i, int32_t old);
/* An unreferenced, unindexed block back to the free stack (its window part freed). */
void kv_pool_free_block(kv_pool *p, int32_t b);
/* Gives the table its own unindexed copy of every block in [b0, b1] that is
 * shared or indexed, so that those blocks may be written (context policies). */
int kv_table_make_private(kv_pool *p, kv_table *t, int32_t b0, int32_t b1, kvi_error *err);
/* Copies src's blocks (shared, refcounted), tokens, length and q4 key tail into
 * the empty dst. KVI_E_NOMEM (dst then holds nothing). */
int kv_table_share(kv_pool *p, kv_table *dst, const kv_table *src, kvi_error *err);

/* ---- prefix index and LRU (kv_prefix.c) ---- */
int kv_prefix_init(kv_pool *p, kvi_error *err);
void kv_prefix_free(kv_pool *p);
/* Indexes every full block of t in [b0, t->n_pos / block_size) whose predecessor
 * is indexed (nothing when t->no_index). */
void kv_prefix_index_table(kv_pool *p, kv_table *t, int32_t b0);
/* Removes block b from the index (an unreferenced one moves to the free stack). */
void kv_prefix_remove(kv_pool *p, int32_t b);
/* For the empty table t: takes the longest chain of indexed blocks equal to the
 * first whole blocks of tokens[0..n_max), at most n_max / block_size blocks;
 * returns the number of positions now held. KVI_E_NOMEM (table unchanged). */
int32_t kv_prefix_match(kv_pool *p, kv_table *t, const int32_t *tokens, int32_t n_max, kvi_error *err);
/* The chain hash of a block of n tokens after a block of hash parent_hash (the
 * first block's parent hash is KV_PREFIX_SEED ^ salt). */
#define KV_PREFIX_SEED 0xcbf29ce484222325ull
uint64_t kv_prefix_block_hash(uint64_t parent_hash, const int32_t *tok, int n);
/* LRU links (used by the pool): push as most recent / unlink. */
void kv_lru_push(kv_pool *p, int32_t b);
void kv_lru_unlink(kv_pool *p, int32_t b);

/* Address of the K (or V) row of position pos in layer l; pos must be reserved.
 * kv_k_row only for row key types (not q4: use kv_read_row / kv_k_group). */
/* Layer l's region of physical block b (its part: global or window); not for
 * recurrent layers. */
static inline uint8_t *kv_layer_mem(const kv_pool *p, int32_t b, int l)
{
    return (p->n_wlayers && p->layer_win[l] ? p->wmem[b] : p->mem[b]) +
           (size_t)p->layer_slot[l] * p->layer_bytes;
}
static inline uint8_t *kv_k_row(const kv_pool *p, const kv_table *t, int l, int32_t pos)
{
    const int32_t b = t->blocks[pos / p->block_size];
    return kv_layer_mem(p, b, l) + (size_t)(pos % p->block_size) * p->row_bytes_k;
}
static inline uint8_t *kv_v_row(const kv_pool *p, const kv_table *t, int l, int32_t pos)
{
    if (p->v_in_k) return kv_k_row(p, t, l, pos);
    const int32_t b = t->blocks[pos / p->block_size];
    return kv_layer_mem(p, b, l) + p->k_bytes + (size_t)(pos % p->block_size) * p->row_bytes_v;
}
/* The indexer row (idx_dim f32) of position pos in layer l; pos must be reserved. */
static inline float *kv_idx_row(const kv_pool *p, const kv_table *t, int l, int32_t pos)
{
    const int32_t b = t->blocks[pos / p->block_size];
    return (float *)(kv_layer_mem(p, b, l) + (p->layer_bytes - p->idx_bytes)) +
           (size_t)(pos % p->block_size) * (size_t)p->idx_dim;
}
/* K region of layer l of the table's block g (logical index). */
static inline uint8_t *kv_k_group(const kv_pool *p, const kv_table *t, int l, int32_t g)
{
    return kv_layer_mem(p, t->blocks[g], l);
}
/* Bytes of one block for this shape and these types (what kv_pool_init would use;
 * type_v KVI_TYPE_KV_LATENT: keys only), 0 when the types cannot hold rows of
 * kv_dim elements. Budgets: per token it is
 * this / block_size. */
size_t kv_layout_block_bytes(int n_layers, int kv_dim, int block_size, kvi_type type_k, kvi_type type_v);
/* A type the cache can hold: f32, f16, q8_0, q4_0, q4 (KVI_TYPE_KV_Q4). */
bool kv_layout_type_ok(kvi_type t);

/* Type-independent access to one cached row (K when which == 0, V when 1) of
 * position pos in layer l, as f32 (kv_dim floats). Every KV element type, block
 * quantised or grouped, must support both: policies that move or re-rotate keys,
 * session files and tests go through these, never through the raw layout. */
void kv_read_row(const kv_pool *p, const kv_table *t, int l, int which, int32_t pos, float *out);
void kv_write_row(kv_pool *p, kv_table *t, int l, int which, int32_t pos, const float *in);
/* kv_write_row inside a forward pass: q4 keys of groups this batch still reads in
 * f16 are kept in the stash (kv_quant.h) until the layer's attention is done. */
struct kv_stash;
void kv_write_row_batch(kv_pool *p, kv_table *t, int l, int which, int32_t pos, const float *in,
                        struct kv_stash *stash);

#endif
