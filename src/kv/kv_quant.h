/*
 * kv_quant.h — element formats of the KV cache and how a block's rows are
 * stored, read and written for each of them.
 *
 * Row types (f32, f16, q8_0, q4_0): each position's K (or V) vector of one layer,
 * kv_dim elements, is one row of quant_row_bytes(type, kv_dim) bytes; q8_0/q4_0 use
 * ggml's 32-element blocks over the whole row, so a head smaller than 32 elements
 * shares a block with its neighbours (kv_dim must be a multiple of 32).
 *
 * KIVI keys (KVI_TYPE_KV_Q4): the keys of one KV block (block_size tokens, one
 * layer) form one group, quantised per channel over the group's tokens:
 *
 *     K region of a block, one layer (kivi_k_bytes):
 *       d    [kv_dim] f16    scale of each channel  = (max - min) / 15
 *       mn   [kv_dim] f16    minimum of each channel
 *       q    [block_size][kv_dim / 2] bytes: token i, channel c in byte
 *            i * kv_dim / 2 + c / 2, low nibble for even c, high nibble for odd c
 *       (padded to a multiple of 16 bytes)
 *     x = q * d + mn
 *
 * The newest group of a sequence is kept exact, in f16, in the sequence's table
 * (kv_table.tail, tail_bytes bytes, one part per layer):
 *
 *     tail part of layer l: kivi_tail_hdr { group, n_rows, epoch }
 *                           rows [block_size][kv_dim] f16
 *
 * Invariants:
 *  - hdr.group >= 0 names the group whose f16 rows 0..n_rows-1 the part holds;
 *    every key write goes to the tail first and then re-quantises the group's
 *    codes from rows 0..n_rows-1 (write-through), so the block always holds a
 *    valid quantisation of the rows written so far: a table without a tail
 *    (fork, session, out of memory) still reads sensible keys;
 *  - a key at position t, read for a query at position p >= t, is the f16 value
 *    when t's group is still incomplete at p (p < the group's last position), and
 *    the quantised value once the group is complete. Decode at p sees exactly
 *    that, and so must prefill: when a write moves the tail to another group
 *    while rows of the abandoned group (written in the same batch at an offset
 *    other than the group's last) still have to attend, the abandoned group's f16
 *    rows are copied into a kv_stash, which attention reads until the layer is
 *    done. So prefill == decode bit for bit holds for KIVI too.
 */
#ifndef KVI_KV_QUANT_H
#define KVI_KV_QUANT_H

#include "kv/kv_cache.h"
#include "formats/quant.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kivi_tail_hdr {
    int32_t group;  /* logical block index held, -1 none */
    int32_t n_rows; /* rows 0..n_rows-1 are valid */
    int32_t epoch;  /* stash epoch of the last mid-group write (0: none) */
    int32_t pad;
} kivi_tail_hdr;
_Static_assert(sizeof(kivi_tail_hdr) == 16, "kivi_tail_hdr size");

/* Bytes of one layer's K region of a block for type tk; 0 when tk cannot hold
 * rows of kv_dim elements. */
size_t kvq_k_region_bytes(kvi_type tk, int kv_dim, int block_size);
/* Bytes of one layer's V region of a block (q4 values are q4_0); 0 if impossible. */
size_t kvq_v_region_bytes(kvi_type tv, int kv_dim, int block_size);
/* Per-table state bytes (the KIVI tail), 0 for row types. */
size_t kvq_tail_bytes(kvi_type tk, int n_layers, int kv_dim, int block_size);

/* Elements [off, off + n) of a row of a row type, as f32. */
void kvq_row_slice(kvi_type t, const uint8_t *row, int off, int n, float *dst);

/* KIVI: elements [off, off + n) of token i of a group region, as f32. */
void kivi_group_slice(const uint8_t *region, int kv_dim, int i, int off, int n, float *dst);
/* KIVI: quantises rows [n_rows][kv_dim] f16 (channel stats over those rows). */
void kivi_group_quantize(const quant_f16 *rows, int n_rows, int kv_dim, uint8_t *region);

/* The layer-l part of a table's tail: header, then rows [block_size][kv_dim]. */
static inline kivi_tail_hdr *kivi_tail_part(const kv_pool *p, const kv_table *t, int l)
{
    const size_t part = p->tail_bytes / (size_t)p->n_layers;
    return (kivi_tail_hdr *)(t->tail + (size_t)l * part);
}
static inline quant_f16 *kivi_tail_rows(kivi_tail_hdr *h) { return (quant_f16 *)(h + 1); }

/* Groups whose f16 keys a batch still needs after the tail moved on (one layer). */
typedef struct kv_stash {
    int32_t epoch; /* > 0 while a layer's batch is being written */
    int layer;
    int n, cap;
    const kv_table **tables; /* [cap] */
    int32_t *groups;         /* [cap] */
    quant_f16 *rows;         /* [cap][block_size][kv_dim] */
    size_t group_elems;      /* block_size * kv_dim */
} kv_stash;

void kv_stash_init(kv_stash *s);
void kv_stash_free(kv_stash *s);
/* Starts the writes of layer l of a new batch (empties the stash). */
void kv_stash_begin(kv_stash *s, int layer);

/* The f16 rows [block_size][kv_dim] of group g of table t in layer l when they
 * are kept (tail or stash), else NULL (read the quantised group). */
const quant_f16 *kivi_group_f16(const kv_pool *p, const kv_table *t, int l, int32_t g, const kv_stash *s);

/* Copies src's tail into dst (fork: without it the child reads its newest key
 * group quantised, not bit-identical to the parent). 0 or KVI_E_NOMEM. */
int kv_table_copy_tail(kv_pool *p, kv_table *dst, const kv_table *src, kvi_error *err);
/* After a context policy rewrote the table's keys up to n_pos (t->n_pos may still
 * be the old length): each layer's tail, when it holds the group of position
 * n_pos - 1, keeps exactly the rows below n_pos, and that group's codes are
 * quantised again from them (the write-through invariant for the new length).
 * The group's block must be private. */
void kivi_tail_fit(const kv_pool *p, kv_table *t, int32_t n_pos);
/* Allocates t's tail (all groups -1) if it has none: 0 or KVI_E_NOMEM (counted in
 * the pool's n_tails / bytes_sys). Session restore fills it afterwards. */
int kivi_tail_alloc(kv_pool *p, kv_table *t);

/* Key writes and reads of KIVI (kv_write_row / kv_read_row dispatch here). */
void kivi_write_key(kv_pool *p, kv_table *t, int l, int32_t pos, const float *in, kv_stash *s);
void kivi_read_key(const kv_pool *p, const kv_table *t, int l, int32_t pos, float *out);

#endif
