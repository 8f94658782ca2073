/*
 * kv_session.h — the session file of one sequence's KV cache: its layout, a
 * pure decoder of its header, and the (de)serialisation of the table's blocks
 * and q4 key tail. What needs the model or the engine (the model's checksum, the
 * context size, the vocabulary check of the tokens, the prefix index) is
 * engine/session.c's: it passes the values in.
 *
 * File layout (version 3, little-endian, no padding):
 *
 *   off  size  field
 *     0     8  magic "KVISESS\0"
 *     8     4  u32 version (2)
 *    12     4  u32 flags (bit 0: positions re-assigned by a context policy)
 *    16     8  u64 checksum of the model's hyper-parameters (engine/session.c)
 *    24    4*6 i32 n_layers, kv_dim, block_size, type_k, type_v, n_pos
 *    48     8  u64 block_bytes
 *    56     8  u64 row_bytes_k
 *    64     8  u64 row_bytes_v
 *    72     8  u64 n_blocks (= ceil(n_pos / block_size))
 *    80     8  u64 tail_bytes: 0, or the pool's tail_bytes when the table has a q4
 *              key tail (kv_quant.h: per layer kivi_tail_hdr + f16 rows)
 *    88     4  i32 lossy_block (kv_cache.h), 0 .. n_blocks
 *    92     4  u32 1: a recurrent state follows the tail (hybrid models, n_pos > 0), else 0
 *    96   4*n  i32 tokens[n_pos]
 *     .     .  blocks[n_blocks][block_bytes], opaque, in the pool's own layout
 *     .     .  tail[tail_bytes]
 *     .     .  state[the pool's state_bytes] when flagged at 92 (kv_cache.h: the
 *              recurrent layers' state after position n_pos - 1, f32)
 *   end     8  u64 FNV-1a 64 of every byte before it
 *
 * Version 3 added the recurrent state (a version 2 file, which has none, still
 * loads into a pool without recurrent layers). Version 2 added the tail: without it a restored q4 sequence would read its
 * newest keys quantised and not continue bit for bit. Each tail part's header is
 * validated (group -1 .. n_blocks - 1, n_rows 0 .. block_size); its stash epoch
 * is reset on load. A block holds block_size positions, so the bytes of
 * positions past n_pos in the last block are saved too (they are never read).
 *
 * Invariant of a decoded header (kv_sess_info): every field was checked against
 * the pool it is to be loaded into and the caller's expectations, and the
 * offsets add up to exactly the file's size; nothing is taken from the pool
 * before the whole file's checksum was verified (kv_sess_check_kv first, then
 * kv_sess_restore).
 */
#ifndef KVI_KV_SESSION_H
#define KVI_KV_SESSION_H

#include "kv/kv_cache.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define KV_SESS_MAGIC "KVISESS"
#define KV_SESS_VERSION 3u
#define KV_SESS_HEADER 96
#define KV_SESS_FNV0 0xcbf29ce484222325ull

/* What the header must match besides the pool: the caller's values. */
typedef struct kv_sess_expect {
    const kv_pool *p;   /* shape, KV types, block and row sizes, tail size */
    uint64_t model_sum; /* checksum of the model's hyper-parameters */
    int32_t n_ctx;      /* n_pos may not exceed it */
} kv_sess_expect;

/* A decoded, checked header: the file described. */
typedef struct kv_sess_info {
    uint32_t flags;       /* bit 0: positions re-assigned by a context policy */
    int32_t n_pos;        /* 0 .. n_ctx */
    int32_t lossy_block;  /* 0 .. n_blocks */
    uint64_t n_blocks;    /* ceil(n_pos / block_size) */
    uint64_t tail_bytes;  /* 0 or the pool's tail_bytes */
    uint64_t state_bytes; /* 0 or the pool's state_bytes */
    /* byte offsets of the parts; sum_at + 8 == file_bytes */
    uint64_t tokens_at, blocks_at, tail_at, state_at, sum_at, file_bytes;
} kv_sess_info;

/* FNV-1a 64 of n bytes, continuing from h (KV_SESS_FNV0 to start). */
uint64_t kv_sess_fnv(uint64_t h, const void *data, size_t n);
/* Writes / reads exactly n bytes, adding them to *sum; false on a write error
 * or a short file. */
bool kv_sess_write(FILE *f, const void *d, size_t n, uint64_t *sum);
bool kv_sess_read(FILE *f, void *d, size_t n, uint64_t *sum);

static inline void kv_sess_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void kv_sess_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t kv_sess_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t kv_sess_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The header of table t of pool p, for a model of checksum model_sum. */
void kv_sess_encode(const kv_pool *p, const kv_table *t, uint64_t model_sum, uint8_t h[KV_SESS_HEADER]);
/* Decodes and checks the header h of a file of file_bytes bytes named name (for
 * messages) against x; no side effects. KVI_E_FORMAT (not a session file, or
 * inconsistent) or KVI_E_INVALID (another model, shape, block size, KV types or
 * too long for the context). */
int kv_sess_decode(const uint8_t h[KV_SESS_HEADER], int64_t file_bytes, const kv_sess_expect *x,
                   const char *name, kv_sess_info *out, kvi_error *err);

/* Writes t's blocks, then its tail (a tail group left past the table by a
 * truncation is saved as empty, epochs as 0), adding to *sum; false on failure. */
bool kv_sess_write_kv(FILE *f, const kv_pool *p, const kv_table *t, uint64_t *sum);
/* Bytes of the scratch buffer kv_sess_check_kv needs. */
size_t kv_sess_scratch_bytes(const kv_pool *p);
/* Reads the blocks and the tail at f's position (in->blocks_at) into scratch,
 * adding them to *sum, and checks every tail part's header; takes nothing from
 * the pool. KVI_E_FORMAT. */
int kv_sess_check_kv(FILE *f, const kv_pool *p, const kv_sess_info *in, uint8_t *scratch, uint64_t *sum,
                     const char *name, kvi_error *err);
/* Into the empty table t: blocks for in->n_pos positions, their bytes read again
 * from in->blocks_at, the tail (epochs reset) and lossy_block. On failure t is
 * empty again. KVI_E_NO_KV_SPACE, KVI_E_NOMEM, KVI_E_IO (file changed). */
int kv_sess_restore(FILE *f, kv_pool *p, kv_table *t, const kv_sess_info *in, const char *name,
                    kvi_error *err);

#endif
