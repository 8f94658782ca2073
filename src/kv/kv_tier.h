/*
 * kv_tier.h — the second and third tier of the prefix cache: host RAM and disk.
 *
 * The pool (kv_cache.h) keeps full prompt blocks in its prefix index until its
 * LRU hands them out again. With tiers, such an evicted block's bytes move to a
 * bounded host-RAM store (kv_tier.c), and blocks leaving that store (or flushed
 * at shutdown) to files in a directory (kv_tier_disk.c, one file per block, the
 * format in kv_tier_file.c). A prompt's prefix match walks its blocks through
 * pool -> RAM -> disk and loads hits into fresh pool blocks, indexed again.
 *
 * Key of a block (what vLLM and Mooncake do): the pool's chained prefix hash
 * (kv_prefix.c: H(parent block's hash, the block's tokens), seeded with the
 * table's salt) mixed with the layout id, itself a hash of the model's identity,
 * the KV layout and types, block size and byte sizes (kv_tier_layout):
 *
 *     key(block i) = mix(chain_hash(i) ^ layout_id)
 *
 * Nothing is trusted to the key alone: every entry and file also holds the
 * block's tokens, compared on every lookup, and a file its layout id, sizes and
 * checksum, all checked before a byte reaches the pool.
 *
 * What is tiered (kv_tier_supported): pools whose blocks hold every layer's rows
 * in one part — full attention with any KV type (f32, f16, q8_0, q4_0, KIVI q4:
 * a block is whole key groups, so its bytes are all a later match needs). Not
 * yet: window parts, latent (MLA) rows, recurrent-state snapshots, pipeline
 * stages (absent layers) and salted chains (LoRA sets, whose ids are not stable
 * across processes): those pools or blocks are skipped, never half-tiered.
 *
 * Invariants:
 *  - RAM: st[0].blocks entries, st[0].bytes == st[0].blocks * block_bytes <=
 *    bytes_max; an entry is in the hash table and the LRU exactly once; the
 *    RAM tier is exclusive of the pool (a loaded entry leaves it);
 *  - disk: st[1].bytes == the sum of the sizes of the files in the index (every
 *    file of this layout id in the directory), <= bytes_max; the disk tier is
 *    inclusive (a loaded file stays);
 *  - a lookup that loads counts one hit and load_bytes of its block bytes; a
 *    block looked up and not found counts one miss in each tier it walked.
 */
#ifndef KVI_KV_TIER_H
#define KVI_KV_TIER_H

#include "kvinfer.h"
#include "kv/kv_cache.h"

#include <stddef.h>
#include <stdint.h>

/* What a block's bytes depend on besides its tokens. */
typedef struct kv_tier_layout {
    uint64_t model_id;  /* the model's identity (weights and hyper-parameters) */
    int32_t block_size; /* positions per block */
    size_t block_bytes; /* bytes of one block (kv_pool gblock_bytes) */
    uint64_t layout_id; /* hash of all the above and the pool's shape and types */
} kv_tier_layout;

/* ---- block files (kv_tier_file.c) ----
 * file = header[64] | tokens[block_size] int32 LE | data[block_bytes] | fnv64 LE
 * header: "KVITIER\0", u32 version 1, u32 header bytes 64, u64 layout id, u64
 * key, u32 block size, u32 0, u64 data bytes, u64 file bytes, u64 0. */
#define KV_TIER_HEADER 64
size_t kv_tier_file_bytes(const kv_tier_layout *x);
/* Fills buf (kv_tier_file_bytes) with the file of block `key`. */
void kv_tier_file_encode(const kv_tier_layout *x, uint64_t key, const int32_t *tok, const uint8_t *data,
                         uint8_t *buf);
/* Checks the n bytes of buf as the file of block `key` of layout x, holding the
 * tokens tok (NULL: not compared); *data then points at the block's bytes.
 * 0, or KVI_E_FORMAT with a message naming what is wrong. */
int kv_tier_file_check(const kv_tier_layout *x, uint64_t key, const int32_t *tok, const uint8_t *buf,
                       size_t n, const uint8_t **data, kvi_error *err);

/* ---- the disk tier (kv_tier_disk.c) ---- */
typedef struct kv_tier_disk kv_tier_disk;
/* Opens dir (created when missing) and indexes its files of this layout, oldest
 * first, dropping the oldest beyond bytes_max. NULL with err on failure. */
kv_tier_disk *kv_tier_disk_open(const char *dir, size_t bytes_max, const kv_tier_layout *x,
                                kvi_tier_stats *st, kvi_error *err);
void kv_tier_disk_close(kv_tier_disk *d);
bool kv_tier_disk_has(const kv_tier_disk *d, uint64_t key);
/* Stores a block (nothing when the key is there: it becomes the most recent). 0 or an error. */
int kv_tier_disk_put(kv_tier_disk *d, uint64_t key, const int32_t *tok, const uint8_t *data);
/* Reads block key into dst (block_bytes) if its file is whole, of this layout and
 * holds tok: 0; otherwise the file is deleted (counted in dropped) and -1. */
int kv_tier_disk_get(kv_tier_disk *d, uint64_t key, const int32_t *tok, uint8_t *dst);

/* ---- the tiers (kv_tier.c) ---- */
typedef struct kv_tier kv_tier;
/* RAM tier of ram_bytes (0: none) and disk tier in dir (NULL: none) of
 * disk_bytes. 0 or an error; *out NULL when both are off or the pool cannot be
 * tiered (kv_tier_supported: the engine then runs without tiers). */
int kv_tier_create(const kv_pool *p, const kv_tier_layout *x, size_t ram_bytes, const char *dir,
                   size_t disk_bytes, kv_tier **out, kvi_error *err);
void kv_tier_free(kv_tier *t);
/* Whether pool p's blocks can be tiered at all (see above). */
bool kv_tier_supported(const kv_pool *p);
/* The pool evicts indexed block b: its bytes go to RAM (or disk without RAM). */
void kv_tier_put_block(kv_tier *tr, const kv_pool *p, int32_t b);
/* After kv_prefix_match on table t: loads the next whole blocks of
 * tokens[0..n_max) found in RAM or on disk into fresh indexed pool blocks, as
 * long as the pool has room; *n_ram, *n_disk: positions loaded from each. */
void kv_tier_extend(kv_tier *tr, kv_pool *p, kv_table *t, const int32_t *tokens, int32_t n_max,
                    int32_t *n_ram, int32_t *n_disk);
/* Every RAM entry and indexed pool block to disk (clean shutdown). 0 or the
 * first store error. */
int kv_tier_flush(kv_tier *tr, const kv_pool *p, kvi_error *err);
/* st[0] RAM, st[1] disk. */
void kv_tier_get_stats(const kv_tier *tr, kvi_tier_stats st[2]);

#endif
