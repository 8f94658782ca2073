/*
 * session.c — a sequence's tokens and KV blocks saved to a file and restored.
 *
 * File layout (version 2, little-endian, no padding):
 *
 *   off  size  field
 *     0     8  magic "KVISESS\0"
 *     8     4  u32 version (1)
 *    12     4  u32 flags (bit 0: positions re-assigned by a context policy)
 *    16     8  u64 checksum of the model's hyper-parameters (see hparams_sum)
 *    24    4*6 i32 n_layers, kv_dim, block_size, type_k, type_v, n_pos
 *    48     8  u64 block_bytes
 *    56     8  u64 row_bytes_k
 *    64     8  u64 row_bytes_v
 *    72     8  u64 n_blocks (= ceil(n_pos / block_size))
 *    80     8  u64 tail_bytes: 0, or the pool's tail_bytes when the table has a q4
 *              key tail (kv_quant.h: per layer kivi_tail_hdr + f16 rows)
 *    88     4  i32 lossy_block (kv_cache.h), 0 .. n_blocks
 *    92     4  u32 0
 *    96   4*n  i32 tokens[n_pos]
 *     .     .  blocks[n_blocks][block_bytes], opaque, in the pool's own layout
 *     .     .  tail[tail_bytes]
 *   end     8  u64 FNV-1a 64 of every byte before it
 *
 * Version 2 added the tail: without it a restored q4 sequence would read its
 * newest keys quantised and not continue bit for bit. Each tail part's header is
 * validated (group -1 .. n_blocks - 1, n_rows 0 .. block_size); its stash epoch
 * is reset on load.
 *
 * Loading trusts nothing: every field is checked against the engine it is loaded
 * into (same model shape, KV types, block size and row sizes), n_pos against the
 * context, each token against the vocabulary, the file size against the sizes
 * the header implies, and the final checksum against the content, before any
 * block is taken from the pool. A block holds block_size positions, so the bytes
 * of positions past n_pos in the last block are saved too (they are never read).
 */
#include "kvinfer.h"

#include "engine/engine_int.h"
#include "base/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"
#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SESS_MAGIC "KVISESS"
#define SESS_VERSION 2u
#define SESS_HEADER 96

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV0 0xcbf29ce484222325ull

/* Names the model: a restored cache is only valid for the same network. */
static uint64_t hparams_sum(const kvi_model *m)
{
    const int32_t v[] = {m->n_vocab, m->dim, m->n_layers, m->n_heads, m->n_kv_heads,
                         m->head_dim, m->ffn_dim, m->n_rot, m->rope_neox ? 1 : 0};
    uint64_t h = fnv(FNV0, v, sizeof v);
    h = fnv(h, &m->rope_theta, sizeof m->rope_theta);
    h = fnv(h, &m->rms_eps, sizeof m->rms_eps);
    h = fnv(h, m->arch, strnlen(m->arch, sizeof m->arch));
    return h;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool write_all(FILE *f, const void *d, size_t n, uint64_t *sum)
{
    *sum = fnv(*sum, d, n);
    return fwrite(d, 1, n, f) == n;
}

int kvi_seq_save(const kvi_seq *s, const char *path, kvi_error *err)
{
    if (!s || !path) return kvi_err_set(err, KVI_E_INVALID, "session: no sequence or path");
    kvi_engine *e = engine_seq_engine(s);
    const kv_pool *p = engine_kv_pool(e);
    const kv_table *t = engine_seq_table((kvi_seq *)s);
    const kvi_model *m = kvi_engine_model(e);
    uint8_t h[SESS_HEADER];
    memset(h, 0, sizeof h);
    memcpy(h, SESS_MAGIC, 8);
    put_u32(h + 8, SESS_VERSION);
    put_u32(h + 12, t->no_index ? 1u : 0u);
    put_u64(h + 16, hparams_sum(m));
    const int32_t ints[6] = {p->n_layers, p->kv_dim, p->block_size, (int32_t)p->type_k,
                             (int32_t)p->type_v, t->n_pos};
    for (int i = 0; i < 6; i++) put_u32(h + 24 + 4 * i, (uint32_t)ints[i]);
    put_u64(h + 48, p->block_bytes);
    put_u64(h + 56, p->row_bytes_k);
    put_u64(h + 64, p->row_bytes_v);
    put_u64(h + 72, (uint64_t)t->n_blocks);
    const size_t tail_bytes = t->tail ? p->tail_bytes : 0;
    put_u64(h + 80, (uint64_t)tail_bytes);
    put_u32(h + 88, (uint32_t)t->lossy_block);

    FILE *f = fopen(path, "wb");
    if (!f) return kvi_err_set(err, KVI_E_IO, "session: cannot create %s: %s", path, strerror(errno));
    uint64_t sum = FNV0;
    bool ok = write_all(f, h, sizeof h, &sum);
    uint8_t tb[4];
    for (int32_t i = 0; ok && i < t->n_pos; i++) {
        put_u32(tb, (uint32_t)t->tokens[i]);
        ok = write_all(f, tb, 4, &sum);
    }
    for (int32_t i = 0; ok && i < t->n_blocks; i++) ok = write_all(f, p->mem[t->blocks[i]], p->block_bytes, &sum);
    if (ok && tail_bytes) {
        /* a tail left past the table by a truncation is stale: saved as empty */
        uint8_t *tb2 = malloc(tail_bytes);   /* [tail_bytes] */
        ok = tb2 != NULL;
        if (ok) {
            memcpy(tb2, t->tail, tail_bytes);
            const size_t part = tail_bytes / (size_t)p->n_layers;
            for (int l = 0; l < p->n_layers; l++) {
                kivi_tail_hdr th;
                memcpy(&th, tb2 + (size_t)l * part, sizeof th);
                if (th.group >= t->n_blocks) th.group = -1;
                if (th.group < 0) th.n_rows = 0;
                th.epoch = th.pad = 0;
                memcpy(tb2 + (size_t)l * part, &th, sizeof th);
            }
            ok = write_all(f, tb2, tail_bytes, &sum);
        }
        free(tb2);
    }
    uint8_t tail[8];
    put_u64(tail, sum);
    ok = ok && fwrite(tail, 1, 8, f) == 8;
    if (fclose(f) != 0) ok = false;
    if (!ok) return kvi_err_set(err, KVI_E_IO, "session: cannot write %s", path);
    return 0;
}

/* Reads exactly n bytes; false on a short file. */
static bool read_all(FILE *f, void *d, size_t n, uint64_t *sum)
{
    if (fread(d, 1, n, f) != n) return false;
    *sum = fnv(*sum, d, n);
    return true;
}

int kvi_seq_load(kvi_seq *s, const char *path, bool *shifted, kvi_error *err)
{
    if (!s || !path) return kvi_err_set(err, KVI_E_INVALID, "session: no sequence or path");
    kvi_engine *e = engine_seq_engine(s);
    kv_pool *p = engine_kv_pool(e);
    kv_table *t = engine_seq_table(s);
    const kvi_model *m = kvi_engine_model(e);
    if (t->n_pos != 0 || t->n_blocks != 0)
        return kvi_err_set(err, KVI_E_INVALID, "session: the sequence to restore into is not empty");

    FILE *f = fopen(path, "rb");
    if (!f) return kvi_err_set(err, KVI_E_IO, "session: cannot open %s: %s", path, strerror(errno));
    int rc = 0;
    int32_t *tokens = NULL;   /* [n_pos] */
    uint8_t *blk = NULL;      /* [block_bytes] one block being read */
    uint64_t sum = FNV0;
    uint8_t h[SESS_HEADER];
    if (fseek(f, 0, SEEK_END) != 0) {
        rc = kvi_err_set(err, KVI_E_IO, "session: cannot seek in %s", path);
        goto done;
    }
    const long fsize = ftell(f);
    rewind(f);
    if (fsize < 0 || !read_all(f, h, sizeof h, &sum)) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s is truncated (no %d-byte header)", path, SESS_HEADER);
        goto done;
    }
    if (memcmp(h, SESS_MAGIC, 8) != 0) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s is not a kvinfer session file (bad magic)", path);
        goto done;
    }
    const uint32_t version = get_u32(h + 8), flags = get_u32(h + 12);
    if (version != SESS_VERSION) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s has version %u, this build reads %u", path, version,
                         SESS_VERSION);
        goto done;
    }
    if (flags > 1u) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s has unknown flags 0x%x", path, flags);
        goto done;
    }
    if (get_u64(h + 16) != hparams_sum(m)) {
        rc = kvi_err_set(err, KVI_E_INVALID, "session: %s was saved with another model (hyper-parameters differ)",
                         path);
        goto done;
    }
    int32_t v[6];
    for (int i = 0; i < 6; i++) v[i] = (int32_t)get_u32(h + 24 + 4 * i);
    const int32_t n_pos = v[5];
    if (v[0] != p->n_layers || v[1] != p->kv_dim) {
        rc = kvi_err_set(err, KVI_E_INVALID, "session: %s has %d layers x kv_dim %d, the engine %d x %d", path,
                         v[0], v[1], p->n_layers, p->kv_dim);
        goto done;
    }
    if (v[2] != p->block_size) {
        rc = kvi_err_set(err, KVI_E_INVALID, "session: %s has KV blocks of %d tokens, the engine %d (--kv-block)",
                         path, v[2], p->block_size);
        goto done;
    }
    if (v[3] != (int32_t)p->type_k || v[4] != (int32_t)p->type_v) {
        const char *a = kvi_type_name((kvi_type)v[3]), *b = kvi_type_name((kvi_type)v[4]);
        rc = kvi_err_set(err, KVI_E_INVALID, "session: %s has KV types %s/%s, the engine %s/%s (--kv-type)", path,
                         a ? a : "?", b ? b : "?", kvi_type_name(p->type_k), kvi_type_name(p->type_v));
        goto done;
    }
    if (get_u64(h + 48) != p->block_bytes || get_u64(h + 56) != p->row_bytes_k ||
        get_u64(h + 64) != p->row_bytes_v) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s: block or row sizes do not match its types and shape",
                         path);
        goto done;
    }
    if (n_pos < 0 || n_pos > kvi_engine_n_ctx(e)) {
        rc = kvi_err_set(err, KVI_E_INVALID, "session: %s holds %d positions, the context is %d", path, n_pos,
                         kvi_engine_n_ctx(e));
        goto done;
    }
    const uint64_t n_blocks = get_u64(h + 72);
    if (n_blocks != ((uint64_t)n_pos + (uint64_t)p->block_size - 1) / (uint64_t)p->block_size) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s: %llu blocks for %d positions", path,
                         (unsigned long long)n_blocks, n_pos);
        goto done;
    }
    const uint64_t tail_bytes = get_u64(h + 80);
    const int32_t lossy_block = (int32_t)get_u32(h + 88);
    if ((tail_bytes != 0 && tail_bytes != p->tail_bytes) || get_u32(h + 92) != 0) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s: key tail of %llu bytes, the engine's is %zu", path,
                         (unsigned long long)tail_bytes, p->tail_bytes);
        goto done;
    }
    if (lossy_block < 0 || (uint64_t)lossy_block > n_blocks) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s: lossy block %d outside 0..%llu", path, lossy_block,
                         (unsigned long long)n_blocks);
        goto done;
    }
    /* n_pos <= n_ctx <= 2^24, block_bytes and tail_bytes are the pool's: no overflow */
    const uint64_t want =
        (uint64_t)SESS_HEADER + 4ull * (uint64_t)n_pos + n_blocks * p->block_bytes + tail_bytes + 8;
    if ((uint64_t)fsize != want) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s has %ld bytes, its header implies %llu (%s)", path, fsize,
                         (unsigned long long)want, (uint64_t)fsize < want ? "truncated" : "trailing bytes");
        goto done;
    }
    tokens = malloc(((size_t)n_pos + 1) * sizeof *tokens);
    blk = malloc(p->block_bytes > p->tail_bytes ? p->block_bytes : p->tail_bytes);
    if (!tokens || !blk) {
        rc = kvi_err_set(err, KVI_E_NOMEM, "session: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n_pos; i++) {
        uint8_t tb[4];
        if (!read_all(f, tb, 4, &sum)) {
            rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s is truncated in its tokens", path);
            goto done;
        }
        tokens[i] = (int32_t)get_u32(tb);
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab) {
            rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s: token %d at position %d is outside the vocabulary",
                             path, tokens[i], i);
            goto done;
        }
    }
    /* checksum pass over the blocks before anything is taken from the pool */
    const long blocks_at = ftell(f);
    for (uint64_t i = 0; i < n_blocks; i++) {
        if (!read_all(f, blk, p->block_bytes, &sum)) {
            rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s is truncated in block %llu", path,
                             (unsigned long long)i);
            goto done;
        }
    }
    if (tail_bytes) {
        if (!read_all(f, blk, (size_t)tail_bytes, &sum)) {
            rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s is truncated in its key tail", path);
            goto done;
        }
        const size_t part = p->tail_bytes / (size_t)p->n_layers;
        for (int l = 0; l < p->n_layers; l++) {
            kivi_tail_hdr th;
            memcpy(&th, blk + (size_t)l * part, sizeof th);
            if (th.group < -1 || (int64_t)th.group >= (int64_t)n_blocks || th.n_rows < 0 ||
                th.n_rows > p->block_size) {
                rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s: key tail of layer %d names group %d with %d rows "
                                 "(%llu blocks of %d)", path, l, th.group, th.n_rows,
                                 (unsigned long long)n_blocks, p->block_size);
                goto done;
            }
        }
    }
    uint8_t tail[8];
    if (fread(tail, 1, 8, f) != 8 || get_u64(tail) != sum) {
        rc = kvi_err_set(err, KVI_E_FORMAT, "session: %s: checksum mismatch (corrupted file)", path);
        goto done;
    }
    rc = kv_table_reserve(p, t, n_pos, err);
    if (rc) goto done;
    if (tail_bytes && kivi_tail_alloc(p, t) != 0) {
        rc = kvi_err_set(err, KVI_E_NOMEM, "session: cannot allocate a key tail of %zu bytes", p->tail_bytes);
        kv_table_release(p, t);
        goto done;
    }
    if (blocks_at < 0 || fseek(f, blocks_at, SEEK_SET) != 0) {
        rc = kvi_err_set(err, KVI_E_IO, "session: cannot seek in %s", path);
        kv_table_release(p, t);
        goto done;
    }
    for (int32_t i = 0; i < t->n_blocks; i++) {
        if (fread(p->mem[t->blocks[i]], 1, p->block_bytes, f) != p->block_bytes) {
            rc = kvi_err_set(err, KVI_E_IO, "session: %s changed while being read", path);
            kv_table_release(p, t);
            goto done;
        }
    }
    if (tail_bytes) {
        if (fread(t->tail, 1, (size_t)tail_bytes, f) != (size_t)tail_bytes) {
            rc = kvi_err_set(err, KVI_E_IO, "session: %s changed while being read", path);
            kv_table_release(p, t);
            goto done;
        }
        for (int l = 0; l < p->n_layers; l++) {
            kivi_tail_hdr *th = kivi_tail_part(p, t, l);
            th->epoch = 0;
            th->pad = 0;
        }
    }
    t->lossy_block = lossy_block;
    if (n_pos > 0) memcpy(t->tokens, tokens, (size_t)n_pos * sizeof *tokens);
    t->n_pos = n_pos;
    t->no_index = (flags & 1u) != 0;
    if (shifted) *shifted = t->no_index;
    if (engine_prefix_cache_on(e)) kv_prefix_index_table(p, t, 0);
done:
    free(tokens);
    free(blk);
    fclose(f);
    return rc;
}
