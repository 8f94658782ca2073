/*
 * kv_cache.c — block pool and block tables (layout and invariants in kv_cache.h).
 *
 * Allocation is lazy: a block gets its memory the first time it is handed out,
 * so a pool sized for 64 long sequences costs nothing until they exist. Freed
 * blocks keep their memory on a free stack and are reused first. Every block and
 * tail allocation and free updates bytes_sys where it happens (invariant 5).
 */
#include "kv/kv_cache.h"

#include "base/error.h"
#include "kernels/actq.h"
#include "kv/kv_quant.h"
#include "kv/kv_tier.h"
#include "formats/quant.h"

#include <stdlib.h>
#include <string.h>

int kv_pool_init(kv_pool *p, int n_layers, int kv_dim, int block_size, kvi_type type_k, kvi_type type_v,
                 size_t budget_bytes, kvi_error *err)
{
    return kv_pool_init_layers(p, n_layers, NULL, 0, kv_dim, block_size, type_k, type_v, budget_bytes, err);
}

/* Window parts a table may hold at once: the blocks its largest window and the
 * slack can span, the block being written, and one more for a block boundary. */
static int64_t win_blocks(int win_max, int slack, int block_size)
{
    return ((int64_t)win_max + slack + block_size - 1) / block_size + 2;
}

size_t kv_layout_seq_bytes(int n_layers, const int *window, int slack, int kv_dim, int block_size,
                           kvi_type type_k, kvi_type type_v, int64_t n_ctx)
{
    const size_t lb = kv_layout_block_bytes(1, kv_dim, block_size, type_k, type_v);
    if (lb == 0 || block_size <= 0 || n_ctx <= 0) return 0;
    int nw = 0, nr = 0, wmax = 0; /* window layers; recurrent and absent layers (no KV rows) */
    for (int l = 0; window && l < n_layers; l++)
        if (window[l] > 0) {
            nw++;
            if (window[l] > wmax) wmax = window[l];
        } else if (window[l] == KV_LAYER_RECURRENT || window[l] == KV_LAYER_ABSENT) {
            nr++;
        }
    const int64_t nb = (n_ctx + block_size - 1) / block_size, wb = win_blocks(wmax, slack, block_size);
    return (size_t)nb * (size_t)(n_layers - nw - nr) * lb + (size_t)(nb < wb ? nb : wb) * (size_t)nw * lb;
}

int kv_pool_init_layers(kv_pool *p, int n_layers, const int *window, int slack, int kv_dim, int block_size,
                        kvi_type type_k, kvi_type type_v, size_t budget_bytes, kvi_error *err)
{
    memset(p, 0, sizeof *p);
    if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0 || block_size > 4096)
        return err_set(err, KVI_E_INVALID, "kv cache: bad shape (layers %d, kv_dim %d, block %d)", n_layers,
                       kv_dim, block_size);
    /* layout (kv_quant.h): a q4 value cache is q4_0; latent values live in the keys */
    if (type_v == KVI_TYPE_KV_Q4) type_v = KVI_TYPE_Q4_0;
    const bool latent = type_v == KVI_TYPE_KV_LATENT;
    if (latent && type_k == KVI_TYPE_KV_Q4)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "kv cache: latent attention keeps its values inside the keys: q4 (KIVI) keys, "
                       "quantised per channel, cannot hold them (use f32, f16, q8_0 or q4_0)");
    p->k_bytes = kvq_k_region_bytes(type_k, kv_dim, block_size);
    const size_t v_bytes = latent ? 0 : kvq_v_region_bytes(type_v, kv_dim, block_size);
    if (p->k_bytes == 0 || (v_bytes == 0 && !latent))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "kv cache: types %s/%s cannot hold rows of %d elements (KV types: f32, "
                       "f16, q8_0 and q4_0 need a multiple of 32, q4 an even number)",
                       kvi_type_name(type_k) ? kvi_type_name(type_k) : "?",
                       kvi_type_name(type_v) ? kvi_type_name(type_v) : "?", kv_dim);
    p->row_bytes_k = type_k == KVI_TYPE_KV_Q4 ? 0 : quant_row_bytes(type_k, kv_dim);
    /* latent: value rows are the key rows (kv_v_row), read with the key's type */
    p->v_in_k = latent;
    if (latent) type_v = type_k;
    p->row_bytes_v = quant_row_bytes(type_v, kv_dim);
    p->tail_bytes = kvq_tail_bytes(type_k, n_layers, kv_dim, block_size);
    p->n_layers = n_layers;
    p->kv_dim = kv_dim;
    p->block_size = block_size;
    p->type_k = type_k;
    p->type_v = type_v;
    p->layer_bytes = p->k_bytes + v_bytes;
    p->budget = budget_bytes;
    p->layer_slot = malloc((size_t)n_layers * sizeof *p->layer_slot);
    p->layer_win = calloc((size_t)n_layers, 1);
    p->layer_rec = calloc((size_t)n_layers, 1);
    p->state_slot = malloc((size_t)n_layers * sizeof *p->state_slot);
    if (!p->layer_slot || !p->layer_win || !p->layer_rec || !p->state_slot) {
        kv_pool_free(p);
        return err_set(err, KVI_E_NOMEM, "kv cache: out of memory");
    }
    int ng = 0, nw = 0, nr = 0;
    for (int l = 0; l < n_layers; l++) {
        const int w = window ? window[l] : 0;
        p->state_slot[l] = -1;
        if (w == KV_LAYER_GLOBAL_STATE) { /* rows in the global part, and a state */
            p->state_slot[l] = nr++;
            p->layer_slot[l] = ng++;
            continue;
        }
        if (w == KV_LAYER_ABSENT) {
            p->layer_slot[l] = -1;
            continue;
        }
        if (w == KV_LAYER_RECURRENT) {
            p->layer_rec[l] = 1;
            p->state_slot[l] = p->layer_slot[l] = nr++;
            continue;
        }
        if (w < 0) {
            kv_pool_free(p);
            return err_set(err, KVI_E_INVALID, "kv cache: layer %d has window %d", l, w);
        }
        p->layer_win[l] = w > 0;
        p->layer_slot[l] = w > 0 ? nw++ : ng++;
        if (w > p->win_max) p->win_max = w;
    }
    if (ng + nw == 0) {
        kv_pool_free(p);
        return err_set(err, KVI_E_INVALID, "kv cache: no attention layer");
    }
    p->n_rlayers = nr;
    p->block_bytes = (size_t)(ng + nw) * p->layer_bytes;
    p->n_wlayers = nw;
    p->win_slack = nw ? (slack > 0 ? slack : 0) : 0;
    p->gblock_bytes = (size_t)ng * p->layer_bytes;
    p->wblock_bytes = (size_t)nw * p->layer_bytes;
    /* block ids: as many as the budget holds global parts (all of a block without
     * window layers; with them, at least one window part must fit beside) */
    const size_t first = p->gblock_bytes + p->wblock_bytes;
    if (budget_bytes < first)
        return err_set(err, KVI_E_INVALID,
                       "kv cache: budget of %zu bytes is smaller than one block (%zu bytes)", budget_bytes,
                       first);
    size_t nb = p->gblock_bytes ? (budget_bytes - p->wblock_bytes) / p->gblock_bytes : budget_bytes / first;
    if (nb > (size_t)INT32_MAX / 2) nb = (size_t)INT32_MAX / 2;
    p->n_blocks_max = (int32_t)nb;
    p->mem = calloc(nb, sizeof *p->mem);
    p->refcount = calloc(nb, sizeof *p->refcount);
    p->free_ids = malloc(nb * sizeof *p->free_ids);
    if (nw) {
        p->wmem = calloc(nb, sizeof *p->wmem);
        p->wref = calloc(nb, sizeof *p->wref);
        p->wfree = malloc(nb * sizeof *p->wfree);
    }
    if (!p->mem || !p->refcount || !p->free_ids || (nw && (!p->wmem || !p->wref || !p->wfree))) {
        kv_pool_free(p);
        return err_set(err, KVI_E_NOMEM, "kv cache: cannot allocate tables for %zu blocks", nb);
    }
    if (kv_prefix_init(p, err) != 0) {
        kv_pool_free(p);
        return err ? err->code : KVI_E_NOMEM;
    }
    return 0;
}

int kv_pool_indexer_init(kv_pool *p, int idx_dim, kvi_error *err)
{
    if (idx_dim <= 0 || idx_dim > 65536 || p->n_alloc > 0)
        return err_set(err, KVI_E_INVALID,
                       "kv cache: indexer rows of %d elements on a pool in use (%d blocks)", idx_dim,
                       p->n_alloc);
    int ng = 0, nw = 0; /* the layers with rows: global and window */
    for (int l = 0; l < p->n_layers; l++)
        if (p->layer_slot[l] >= 0 && !p->layer_rec[l]) {
            if (p->layer_win[l])
                nw++;
            else
                ng++;
        }
    p->idx_dim = idx_dim;
    p->idx_bytes = (size_t)p->block_size * (size_t)idx_dim * sizeof(float);
    p->layer_bytes += p->idx_bytes;
    p->block_bytes = (size_t)(ng + nw) * p->layer_bytes;
    p->gblock_bytes = (size_t)ng * p->layer_bytes;
    p->wblock_bytes = (size_t)nw * p->layer_bytes;
    if (p->budget < p->gblock_bytes + p->wblock_bytes)
        return err_set(err, KVI_E_INVALID,
                       "kv cache: budget of %zu bytes is smaller than one block (%zu bytes)", p->budget,
                       p->gblock_bytes + p->wblock_bytes);
    /* fewer, larger blocks: the tables sized for the old count stay valid */
    const size_t nb = p->gblock_bytes ? (p->budget - p->wblock_bytes) / p->gblock_bytes
                                      : p->budget / (p->gblock_bytes + p->wblock_bytes);
    if (nb < (size_t)p->n_blocks_max) p->n_blocks_max = (int32_t)nb;
    return 0;
}

size_t kv_pool_bytes_per_token_indexer(const kv_pool *p)
{
    if (!p->idx_dim || p->block_size <= 0) return 0;
    return (p->block_bytes / p->layer_bytes) * (size_t)p->idx_dim * sizeof(float);
}

size_t kv_layout_indexer_seq_bytes(int n_attn, int idx_dim, int block_size, int64_t n_ctx)
{
    if (n_attn <= 0 || idx_dim <= 0 || block_size <= 0 || n_ctx <= 0) return 0;
    const int64_t nb = (n_ctx + block_size - 1) / block_size;
    return (size_t)nb * (size_t)block_size * (size_t)n_attn * (size_t)idx_dim * sizeof(float);
}

void kv_pool_free(kv_pool *p)
{
    if (p->mem)
        for (int32_t i = 0; i < p->n_alloc; i++) free(p->mem[i]);
    if (p->wmem)
        for (int32_t i = 0; i < p->n_blocks_max; i++) free(p->wmem[i]);
    for (int32_t i = 0; i < p->n_wfree; i++) free(p->wfree[i]);
    free(p->wmem);
    free(p->wref);
    free(p->wfree);
    free(p->layer_slot);
    free(p->layer_win);
    free(p->layer_rec);
    free(p->state_slot);
    if (p->snap)
        for (int32_t i = 0; i < p->n_blocks_max; i++) free(p->snap[i]);
    free(p->snap);
    free(p->mem);
    free(p->refcount);
    free(p->free_ids);
    kv_prefix_free(p);
    memset(p, 0, sizeof *p);
}

size_t kv_pool_bytes_per_token(const kv_pool *p)
{
    return p->block_size > 0 ? p->block_bytes / (size_t)p->block_size : 0;
}

bool kv_layout_type_ok(kvi_type t)
{
    return t == KVI_TYPE_F32 || t == KVI_TYPE_F16 || t == KVI_TYPE_Q8_0 || t == KVI_TYPE_Q4_0 ||
           t == KVI_TYPE_KV_Q4;
}

size_t kv_layout_block_bytes(int n_layers, int kv_dim, int block_size, kvi_type type_k, kvi_type type_v)
{
    const bool latent = type_v == KVI_TYPE_KV_LATENT;
    const size_t k = latent && type_k == KVI_TYPE_KV_Q4 ? 0 : kvq_k_region_bytes(type_k, kv_dim, block_size);
    const size_t v = latent ? 0 : kvq_v_region_bytes(type_v, kv_dim, block_size);
    if (n_layers <= 0 || k == 0 || (v == 0 && !latent)) return 0;
    return (size_t)n_layers * (k + v);
}

size_t kv_pool_bytes_allocated(const kv_pool *p)
{
    return (size_t)p->n_alloc * p->gblock_bytes + (size_t)p->n_walloc * p->wblock_bytes;
}

/* The budget's part for blocks: all of it but the reserved states. */
static size_t block_budget(const kv_pool *p) { return p->budget - (size_t)p->n_state_slots * p->state_bytes; }

size_t kv_pool_bytes_states(const kv_pool *p) { return (size_t)p->n_states * p->state_bytes; }

int kv_pool_state_init(kv_pool *p, size_t state_layer_bytes, int32_t n_slots, kvi_error *err)
{
    if (!p->n_rlayers) return 0;
    if (state_layer_bytes == 0 || n_slots <= 0 || state_layer_bytes % sizeof(float) != 0)
        return err_set(err, KVI_E_INVALID, "kv cache: bad recurrent state (%zu bytes, %d slots)",
                       state_layer_bytes, n_slots);
    const size_t sb = (size_t)p->n_rlayers * state_layer_bytes, res = sb * (size_t)n_slots;
    if (res / (size_t)n_slots != sb || p->budget < res || p->budget - res < p->gblock_bytes + p->wblock_bytes)
        return err_set(
            err, KVI_E_INVALID,
            "kv cache: budget of %zu bytes cannot hold the recurrent states of %d sequences (%zu bytes "
            "each) and one block (%zu bytes)",
            p->budget, n_slots, sb, p->gblock_bytes + p->wblock_bytes);
    p->state_layer_bytes = state_layer_bytes;
    p->state_bytes = sb;
    p->n_state_slots = n_slots;
    size_t nb =
        p->gblock_bytes ? (p->budget - res - p->wblock_bytes) / p->gblock_bytes : (size_t)p->n_blocks_max;
    if (nb < (size_t)p->n_blocks_max) p->n_blocks_max = (int32_t)nb;
    p->snap_blocks = p->gblock_bytes ? (int32_t)((sb + p->gblock_bytes - 1) / p->gblock_bytes) : 0;
    p->snap = calloc((size_t)p->n_blocks_max, sizeof *p->snap);
    if (!p->snap) return err_set(err, KVI_E_NOMEM, "kv cache: out of memory");
    return 0;
}

int kv_table_state_take(kv_pool *p, kv_table *t, kvi_error *err)
{
    if (!p->state_bytes || t->state) return 0;
    if (p->n_states >= p->n_state_slots)
        return err_set(err, KVI_E_NO_KV_SPACE, "kv cache: all %d recurrent state slots are in use",
                       p->n_state_slots);
    void *mem = NULL;
    if (posix_memalign(&mem, 64, p->state_bytes) != 0)
        return err_set(err, KVI_E_NOMEM, "kv cache: cannot allocate a recurrent state of %zu bytes",
                       p->state_bytes);
    t->state = mem;
    p->n_states++;
    p->bytes_sys += p->state_bytes;
    return 0;
}

/* ---- window parts ---- */

/* Block b gives up its window part (to the free list). */
static void wpart_drop(kv_pool *p, int32_t b)
{
    if (!p->n_wlayers || !p->wmem[b]) return;
    p->wfree[p->n_wfree++] = p->wmem[b];
    p->wmem[b] = NULL;
}

/* Unused window parts go back to the system until `need` more bytes fit the budget. */
/* (the budget bounds the blocks' parts; q4 key tails are per table, outside it) */
static bool wpart_make_room(kv_pool *p, size_t need)
{
    if (!p->n_wlayers) return true; /* n_blocks_max is the bound */
    while (kv_pool_bytes_allocated(p) + need > block_budget(p) && p->n_wfree > 0) {
        free(p->wfree[--p->n_wfree]);
        p->n_walloc--;
        p->bytes_sys -= p->wblock_bytes;
    }
    return kv_pool_bytes_allocated(p) + need <= block_budget(p);
}

int kv_pool_wpart_take(kv_pool *p, int32_t b)
{
    if (!p->n_wlayers || p->wmem[b]) return 0;
    if (p->n_wfree > 0) {
        p->wmem[b] = p->wfree[--p->n_wfree];
        return 0;
    }
    if (kv_pool_bytes_allocated(p) + p->wblock_bytes <= block_budget(p)) {
        void *mem = NULL;
        if (posix_memalign(&mem, 64, p->wblock_bytes) != 0) return -1;
        p->wmem[b] = mem;
        p->n_walloc++;
        p->bytes_sys += p->wblock_bytes;
        return 0;
    }
    /* a cached prefix block's part, least recently used first */
    for (int32_t c = p->lru_head; c >= 0; c = p->lru_next[c])
        if (p->wmem[c]) {
            p->wmem[b] = p->wmem[c];
            p->wmem[c] = NULL;
            return 0;
        }
    return -1;
}

/* One table reference that needed b's window part is gone: with no other, a
 * referenced block gives the part up (an unreferenced one is handled by unref). */
static void wref_dec(kv_pool *p, int32_t b)
{
    if (--p->wref[b] == 0 && p->refcount[b] > 0) wpart_drop(p, b);
}

/* Drops table t's reference to block b at logical index i. */
static void table_unref_at(kv_pool *p, const kv_table *t, int32_t i, int32_t b)
{
    if (p->n_wlayers && i >= t->wdrop) p->wref[b]--;
    kv_pool_unref(p, b);
    if (p->n_wlayers && p->refcount[b] > 0 && p->wref[b] == 0) wpart_drop(p, b);
}

void kv_table_window_release(kv_pool *p, kv_table *t)
{
    if (!p->n_wlayers) return;
    int64_t target = ((int64_t)t->n_pos - p->win_max + 1 - p->win_slack) / p->block_size;
    if (target > t->n_blocks) target = t->n_blocks;
    for (int32_t i = t->wdrop; i < target; i++) {
        wref_dec(p, t->blocks[i]);
        p->n_wreleased++;
    }
    if (target > t->wdrop) t->wdrop = (int32_t)target;
}

int32_t kv_table_rewind_min(const kv_pool *p, const kv_table *t)
{
    if (!p->n_wlayers || t->wdrop == 0) return 0;
    return t->wdrop * p->block_size + p->win_max - 1;
}

size_t kv_pool_bytes_tails(const kv_pool *p) { return (size_t)p->n_tails * p->tail_bytes; }

/* Drops one prefix snapshot (the first from a rotating cursor), its blocks back to
 * the free stack; false when none is held. */
static bool snap_evict_one(kv_pool *p)
{
    if (p->n_snaps <= 0) return false;
    for (int32_t i = 0; i < p->n_blocks_max; i++) {
        const int32_t b = (p->snap_cursor + i) % p->n_blocks_max;
        if (p->snap[b]) {
            kv_snap_drop(p, b);
            p->snap_cursor = (b + 1) % p->n_blocks_max;
            p->n_snaps_evicted++;
            return true;
        }
    }
    return false;
}

/* A block with refcount 1, or -1 when the budget is spent. Order: a free block,
 * then fresh memory, then the least recently used cached prefix, and only then
 * the blocks of a state snapshot. */
static int32_t pool_take(kv_pool *p)
{
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_ids[--p->n_free];
    } else if (p->n_alloc < p->n_blocks_max && wpart_make_room(p, p->gblock_bytes + p->wblock_bytes)) {
        void *mem = NULL;
        if (p->gblock_bytes && posix_memalign(&mem, 64, p->gblock_bytes) != 0) return -1;
        b = p->n_alloc++;
        p->mem[b] = mem;
        p->bytes_sys += p->gblock_bytes;
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        if (p->tier) kv_tier_put_block(p->tier, p, b); /* its bytes to the next tier */
        kv_prefix_remove(p, b);                        /* moves it to the free stack */
        b = p->free_ids[--p->n_free];
        p->n_lru_evicted++;
    } else if (snap_evict_one(p)) { /* a recurrent state snapshot's blocks: the last resort */
        return pool_take(p);
    } else {
        return -1;
    }
    if (kv_pool_wpart_take(p, b) != 0) { /* a fresh block is written: window layers too */
        p->free_ids[p->n_free++] = b;
        return -1;
    }
    p->refcount[b] = 1;
    p->n_used++;
    if (p->n_wlayers) p->wref[b] = 1;
    return b;
}

void kv_pool_ref(kv_pool *p, int32_t b)
{
    if (p->refcount[b] == 0) {
        kv_lru_unlink(p, b);
        p->n_cached--;
        p->n_used++;
    }
    p->refcount[b]++;
}

void kv_pool_unref(kv_pool *p, int32_t b)
{
    if (--p->refcount[b] == 0) {
        p->n_used--;
        if (p->indexed[b]) { /* keeps its window part for a later prefix match */
            kv_lru_push(p, b);
            p->n_cached++;
        } else {
            wpart_drop(p, b);
            p->free_ids[p->n_free++] = b;
        }
    }
}

void kv_pool_free_block(kv_pool *p, int32_t b)
{
    wpart_drop(p, b);
    p->free_ids[p->n_free++] = b;
}

/* Grows the table's arrays to hold at least need blocks. */
static int table_grow(kv_pool *p, kv_table *t, int32_t need, kvi_error *err)
{
    if (need <= t->cap) return 0;
    int32_t cap = t->cap ? t->cap : 8;
    while (cap < need) cap *= 2;
    int32_t *nb = realloc(t->blocks, (size_t)cap * sizeof *nb);
    if (!nb) return err_set(err, KVI_E_NOMEM, "kv cache: cannot grow a block table");
    t->blocks = nb;
    int32_t *nt = realloc(t->tokens, (size_t)cap * p->block_size * sizeof *nt);
    if (!nt) return err_set(err, KVI_E_NOMEM, "kv cache: cannot grow a block table");
    t->tokens = nt;
    t->cap = cap;
    return 0;
}

int kv_table_reserve(kv_pool *p, kv_table *t, int32_t n_pos, kvi_error *err)
{
    const int32_t need = (int32_t)(((int64_t)n_pos + p->block_size - 1) / p->block_size);
    if (need <= t->n_blocks) return 0;
    if (table_grow(p, t, need, err) != 0) return KVI_E_NOMEM;
    const int32_t had = t->n_blocks;
    while (t->n_blocks < need) {
        const int32_t b = pool_take(p);
        if (b < 0) {
            while (t->n_blocks > had) {
                t->n_blocks--;
                table_unref_at(p, t, t->n_blocks, t->blocks[t->n_blocks]);
            }
            return err_set(err, KVI_E_NO_KV_SPACE,
                           "kv cache: pool exhausted (%d of %d blocks of %d tokens in use)", p->n_used,
                           p->n_blocks_max, p->block_size);
        }
        t->blocks[t->n_blocks++] = b;
    }
    return 0;
}

void kv_table_truncate(kv_pool *p, kv_table *t, int32_t n_pos)
{
    if (n_pos < 0) n_pos = 0;
    const int32_t keep = (int32_t)(((int64_t)n_pos + p->block_size - 1) / p->block_size);
    kv_table_drop_blocks(p, t, keep);
    if (t->n_pos > n_pos) t->n_pos = n_pos;
    /* the lossy keys are gone with their positions */
    if (t->lossy_block > 0 && (int64_t)n_pos <= (int64_t)(t->lossy_block - 1) * p->block_size)
        t->lossy_block = 0;
}

void kv_table_release(kv_pool *p, kv_table *t)
{
    kv_table_truncate(p, t, 0);
    if (t->state) {
        p->n_states--;
        p->bytes_sys -= p->state_bytes;
    }
    free(t->state);
    free(t->blocks);
    if (t->tail) {
        p->n_tails--;
        p->bytes_sys -= p->tail_bytes;
    }
    free(t->tail);
    free(t->tokens);
    memset(t, 0, sizeof *t);
}

void kv_table_drop_blocks(kv_pool *p, kv_table *t, int32_t n_blocks)
{
    if (n_blocks < 0) n_blocks = 0;
    while (t->n_blocks > n_blocks) {
        t->n_blocks--;
        table_unref_at(p, t, t->n_blocks, t->blocks[t->n_blocks]);
    }
    if (t->wdrop > t->n_blocks) t->wdrop = t->n_blocks;
    if (t->n_pos > t->n_blocks * p->block_size) t->n_pos = t->n_blocks * p->block_size;
}

int kv_table_cow(kv_pool *p, kv_table *t, int32_t i, int32_t *old, kvi_error *err)
{
    const int32_t b = pool_take(p);
    if (b < 0)
        return err_set(err, KVI_E_NO_KV_SPACE,
                       "kv cache: pool exhausted copying a shared block (%d of %d blocks in use)", p->n_used,
                       p->n_blocks_max);
    *old = t->blocks[i];
    if (p->gblock_bytes) memcpy(p->mem[b], p->mem[*old], p->gblock_bytes);
    if (p->n_wlayers) {
        if (i >= t->wdrop && p->wmem[*old]) {
            memcpy(p->wmem[b], p->wmem[*old], p->wblock_bytes);
        } else { /* the table no longer reads this block's window layers */
            p->wref[b] = 0;
            wpart_drop(p, b);
        }
    }
    t->blocks[i] = b;
    p->n_cow++;
    return 0;
}

int kv_table_make_private(kv_pool *p, kv_table *t, int32_t b0, int32_t b1, kvi_error *err)
{
    if (b0 < 0) b0 = 0;
    if (b1 >= t->n_blocks) b1 = t->n_blocks - 1;
    for (int32_t i = b0; i <= b1; i++) {
        const int32_t b = t->blocks[i];
        if (p->refcount[b] > 1) {
            int32_t old;
            /* the copy has the same content: nothing to undo if a later one fails */
            if (kv_table_cow(p, t, i, &old, err) != 0) return KVI_E_NO_KV_SPACE;
            kv_table_cow_unref(p, t, i, old);
        } else if (p->indexed[b]) {
            kv_prefix_remove(p, b);
        }
    }
    return 0;
}

int kv_table_share(kv_pool *p, kv_table *dst, const kv_table *src, kvi_error *err)
{
    if (table_grow(p, dst, src->n_blocks, err) != 0) return KVI_E_NOMEM;
    for (int32_t i = 0; i < src->n_blocks; i++) {
        kv_pool_ref(p, src->blocks[i]);
        if (p->n_wlayers && i >= src->wdrop) p->wref[src->blocks[i]]++;
        dst->blocks[i] = src->blocks[i];
    }
    dst->wdrop = src->wdrop;
    if (src->n_pos > 0) memcpy(dst->tokens, src->tokens, (size_t)src->n_pos * sizeof *dst->tokens);
    dst->n_blocks = src->n_blocks;
    dst->n_pos = src->n_pos;
    dst->no_index = src->no_index;
    dst->salt = src->salt;
    dst->lossy_block = src->lossy_block;
    /* q4 keys: the newest group's exact keys, or the child reads them quantised */
    if (kv_table_copy_tail(p, dst, src, err) != 0) {
        kv_table_truncate(p, dst, 0);
        return KVI_E_NOMEM;
    }
    /* recurrent layers: the child continues from the parent's state */
    if (src->state) {
        const int rc = kv_table_state_take(p, dst, err);
        if (rc) {
            kv_table_truncate(p, dst, 0);
            return rc;
        }
        memcpy(dst->state, src->state, p->state_bytes);
    }
    return 0;
}

void kv_table_cow_unref(kv_pool *p, const kv_table *t, int32_t i, int32_t old)
{
    table_unref_at(p, t, i, old);
}

void kv_table_cow_undo(kv_pool *p, kv_table *t, int32_t i, int32_t old)
{
    const int32_t copy = t->blocks[i];
    t->blocks[i] = old;
    if (p->n_wlayers && i >= t->wdrop) p->wref[copy]--;
    kv_pool_unref(p, copy);
}

void kv_read_row(const kv_pool *p, const kv_table *t, int l, int which, int32_t pos, float *out)
{
    if (!which && p->type_k == KVI_TYPE_KV_Q4) {
        kivi_read_key(p, t, l, pos, out);
        return;
    }
    const kvi_type ty = which ? p->type_v : p->type_k;
    const uint8_t *row = which ? kv_v_row(p, t, l, pos) : kv_k_row(p, t, l, pos);
    quant_dequant_row(ty, row, out, p->kv_dim);
}

void kv_write_row_batch(kv_pool *p, kv_table *t, int l, int which, int32_t pos, const float *in,
                        struct kv_stash *stash)
{
    if (!which && p->type_k == KVI_TYPE_KV_Q4) {
        kivi_write_key(p, t, l, pos, in, stash);
        return;
    }
    if (which && p->v_in_k) return; /* latent: the value is part of the key written */
    const kvi_type ty = which ? p->type_v : p->type_k;
    uint8_t *row = which ? kv_v_row(p, t, l, pos) : kv_k_row(p, t, l, pos);
    kern_quantize_row(ty, in, row, p->kv_dim);
}

void kv_write_row(kv_pool *p, kv_table *t, int l, int which, int32_t pos, const float *in)
{
    kv_write_row_batch(p, t, l, which, pos, in, NULL);
}

/* ---- prefix snapshots of the recurrent state (see kv_cache.h) ---- */

int kv_snap_put(kv_pool *p, int32_t b, const float *src)
{
    if (!p->snap || p->snap[b] || !p->indexed[b] || p->snap_blocks <= 0) return -1;
    int32_t *ids = malloc((size_t)p->snap_blocks * sizeof *ids);
    if (!ids) return -1;
    for (int32_t i = 0; i < p->snap_blocks; i++) {
        ids[i] = pool_take(p);
        if (ids[i] < 0 || !p->indexed[b]) { /* (taking may evict b's chain: then give up) */
            for (int32_t k = 0; k < i + (ids[i] >= 0); k++) kv_pool_unref(p, ids[k]);
            free(ids);
            return -1;
        }
        if (p->n_wlayers) { /* a snapshot uses the global part only */
            p->wref[ids[i]] = 0;
            wpart_drop(p, ids[i]);
        }
    }
    const uint8_t *s8 = (const uint8_t *)src;
    for (int32_t i = 0; i < p->snap_blocks; i++) {
        const size_t off = (size_t)i * p->gblock_bytes;
        const size_t n = p->state_bytes - off < p->gblock_bytes ? p->state_bytes - off : p->gblock_bytes;
        memcpy(p->mem[ids[i]], s8 + off, n);
    }
    p->snap[b] = ids;
    p->n_snaps++;
    p->n_snaps_taken++;
    return 0;
}

void kv_snap_drop(kv_pool *p, int32_t b)
{
    if (!p->snap || !p->snap[b]) return;
    int32_t *ids = p->snap[b];
    p->snap[b] = NULL;
    p->n_snaps--;
    for (int32_t i = 0; i < p->snap_blocks; i++) kv_pool_unref(p, ids[i]);
    free(ids);
}

void kv_snap_get(const kv_pool *p, int32_t b, float *dst)
{
    uint8_t *d8 = (uint8_t *)dst;
    for (int32_t i = 0; i < p->snap_blocks; i++) {
        const size_t off = (size_t)i * p->gblock_bytes;
        const size_t n = p->state_bytes - off < p->gblock_bytes ? p->state_bytes - off : p->gblock_bytes;
        memcpy(d8 + off, p->mem[p->snap[b][i]], n);
    }
}
