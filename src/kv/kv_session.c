/*
 * kv_session.c — session files of the KV cache: header codec and the table's
 * blocks and key tail (layout and invariants in kv_session.h).
 *
 * The decoder trusts nothing: every field is checked against the pool it is
 * loaded into (same shape, KV types, block size and row sizes) and the caller's
 * model checksum and context, in the order of the fields, and the file's size
 * against the sizes the header implies. Loading reads the KV data twice: once
 * for the checksum (kv_sess_check_kv, nothing taken from the pool), and once
 * into the pool's blocks (kv_sess_restore), after the caller verified the sum.
 */
#include "kv/kv_session.h"

#include "base/error.h"
#include "kv/kv_quant.h"

#include <stdlib.h>
#include <string.h>

uint64_t kv_sess_fnv(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

bool kv_sess_write(FILE *f, const void *d, size_t n, uint64_t *sum)
{
    *sum = kv_sess_fnv(*sum, d, n);
    return fwrite(d, 1, n, f) == n;
}

bool kv_sess_read(FILE *f, void *d, size_t n, uint64_t *sum)
{
    if (fread(d, 1, n, f) != n) return false;
    *sum = kv_sess_fnv(*sum, d, n);
    return true;
}

/* ---- the header ---- */

void kv_sess_encode(const kv_pool *p, const kv_table *t, uint64_t model_sum, uint8_t h[KV_SESS_HEADER])
{
    memset(h, 0, KV_SESS_HEADER);
    memcpy(h, KV_SESS_MAGIC, 8);
    kv_sess_put_u32(h + 8, KV_SESS_VERSION);
    kv_sess_put_u32(h + 12, t->no_index ? 1u : 0u);
    kv_sess_put_u64(h + 16, model_sum);
    const int32_t ints[6] = { p->n_layers,        p->kv_dim,          p->block_size,
                              (int32_t)p->type_k, (int32_t)p->type_v, t->n_pos };
    for (int i = 0; i < 6; i++) kv_sess_put_u32(h + 24 + 4 * i, (uint32_t)ints[i]);
    kv_sess_put_u64(h + 48, p->block_bytes);
    kv_sess_put_u64(h + 56, p->row_bytes_k);
    kv_sess_put_u64(h + 64, p->row_bytes_v);
    kv_sess_put_u64(h + 72, (uint64_t)t->n_blocks);
    kv_sess_put_u64(h + 80, (uint64_t)(t->tail ? p->tail_bytes : 0));
    kv_sess_put_u32(h + 88, (uint32_t)t->lossy_block);
    kv_sess_put_u32(h + 92, t->state && p->state_bytes && t->n_pos > 0 ? 1u : 0u);
}

/* Magic, version, flags and model: is this a session file of this network? */
static int decode_identity(const uint8_t *h, const kv_sess_expect *x, const char *name, kv_sess_info *out,
                           kvi_error *err)
{
    if (memcmp(h, KV_SESS_MAGIC, 8) != 0)
        return err_set(err, KVI_E_FORMAT, "session: %s is not a kvinfer session file (bad magic)", name);
    const uint32_t version = kv_sess_get_u32(h + 8), flags = kv_sess_get_u32(h + 12);
    if (version != KV_SESS_VERSION && version != 2u)
        return err_set(err, KVI_E_FORMAT, "session: %s has version %u, this build reads 2 and %u", name,
                       version, KV_SESS_VERSION);
    if (flags > 1u) return err_set(err, KVI_E_FORMAT, "session: %s has unknown flags 0x%x", name, flags);
    if (kv_sess_get_u64(h + 16) != x->model_sum)
        return err_set(err, KVI_E_INVALID,
                       "session: %s was saved with another model (hyper-parameters differ)", name);
    out->flags = flags;
    return 0;
}

/* Shape, block size, KV types and sizes: does the data fit the pool? */
static int decode_layout(const uint8_t *h, const kv_sess_expect *x, const char *name, kv_sess_info *out,
                         kvi_error *err)
{
    const kv_pool *p = x->p;
    int32_t v[6];
    for (int i = 0; i < 6; i++) v[i] = (int32_t)kv_sess_get_u32(h + 24 + 4 * i);
    const int32_t n_pos = v[5];
    if (v[0] != p->n_layers || v[1] != p->kv_dim)
        return err_set(err, KVI_E_INVALID, "session: %s has %d layers x kv_dim %d, the engine %d x %d", name,
                       v[0], v[1], p->n_layers, p->kv_dim);
    if (v[2] != p->block_size)
        return err_set(err, KVI_E_INVALID,
                       "session: %s has KV blocks of %d tokens, the engine %d (--kv-block)", name, v[2],
                       p->block_size);
    if (v[3] != (int32_t)p->type_k || v[4] != (int32_t)p->type_v) {
        const char *a = kvi_type_name((kvi_type)v[3]), *b = kvi_type_name((kvi_type)v[4]);
        return err_set(err, KVI_E_INVALID, "session: %s has KV types %s/%s, the engine %s/%s (--kv-type)",
                       name, a ? a : "?", b ? b : "?", kvi_type_name(p->type_k), kvi_type_name(p->type_v));
    }
    if (kv_sess_get_u64(h + 48) != p->block_bytes || kv_sess_get_u64(h + 56) != p->row_bytes_k ||
        kv_sess_get_u64(h + 64) != p->row_bytes_v)
        return err_set(err, KVI_E_FORMAT, "session: %s: block or row sizes do not match its types and shape",
                       name);
    if (n_pos < 0 || n_pos > x->n_ctx)
        return err_set(err, KVI_E_INVALID, "session: %s holds %d positions, the context is %d", name, n_pos,
                       x->n_ctx);
    out->n_pos = n_pos;
    return 0;
}

/* Block count, tail, lossy block and the offsets, against the file's size. */
static int decode_extent(const uint8_t *h, int64_t file_bytes, const kv_sess_expect *x, const char *name,
                         kv_sess_info *out, kvi_error *err)
{
    const kv_pool *p = x->p;
    const int32_t n_pos = out->n_pos;
    const uint64_t n_blocks = kv_sess_get_u64(h + 72);
    if (n_blocks != ((uint64_t)n_pos + (uint64_t)p->block_size - 1) / (uint64_t)p->block_size)
        return err_set(err, KVI_E_FORMAT, "session: %s: %llu blocks for %d positions", name,
                       (unsigned long long)n_blocks, n_pos);
    const uint64_t tail_bytes = kv_sess_get_u64(h + 80);
    const int32_t lossy_block = (int32_t)kv_sess_get_u32(h + 88);
    if (tail_bytes != 0 && tail_bytes != p->tail_bytes)
        return err_set(err, KVI_E_FORMAT, "session: %s: key tail of %llu bytes, the engine's is %zu", name,
                       (unsigned long long)tail_bytes, p->tail_bytes);
    const uint32_t has_state = kv_sess_get_u32(h + 92);
    if (has_state > 1u || (has_state && (!p->state_bytes || n_pos == 0)))
        return err_set(err, KVI_E_FORMAT,
                       "session: %s: a recurrent state flag %u that the engine's model (%s) "
                       "cannot take",
                       name, has_state, p->state_bytes ? "hybrid" : "no recurrent layers");
    if (!has_state && p->state_bytes && n_pos > 0)
        return err_set(err, KVI_E_INVALID,
                       "session: %s holds no recurrent state, which this hybrid model's %d positions need",
                       name, n_pos);
    const uint64_t state_bytes = has_state ? p->state_bytes : 0;
    if (lossy_block < 0 || (uint64_t)lossy_block > n_blocks)
        return err_set(err, KVI_E_FORMAT, "session: %s: lossy block %d outside 0..%llu", name, lossy_block,
                       (unsigned long long)n_blocks);
    /* n_pos <= n_ctx <= 2^24, block_bytes and tail_bytes are the pool's: no overflow */
    const uint64_t want = (uint64_t)KV_SESS_HEADER + 4ull * (uint64_t)n_pos + n_blocks * p->block_bytes +
                          tail_bytes + state_bytes + 8;
    if ((uint64_t)file_bytes != want)
        return err_set(err, KVI_E_FORMAT, "session: %s has %lld bytes, its header implies %llu (%s)", name,
                       (long long)file_bytes, (unsigned long long)want,
                       (uint64_t)file_bytes < want ? "truncated" : "trailing bytes");
    out->n_blocks = n_blocks;
    out->tail_bytes = tail_bytes;
    out->lossy_block = lossy_block;
    out->tokens_at = KV_SESS_HEADER;
    out->blocks_at = out->tokens_at + 4ull * (uint64_t)n_pos;
    out->state_bytes = state_bytes;
    out->tail_at = out->blocks_at + n_blocks * p->block_bytes;
    out->state_at = out->tail_at + tail_bytes;
    out->sum_at = out->state_at + state_bytes;
    out->file_bytes = want;
    return 0;
}

int kv_sess_decode(const uint8_t h[KV_SESS_HEADER], int64_t file_bytes, const kv_sess_expect *x,
                   const char *name, kv_sess_info *out, kvi_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = decode_identity(h, x, name, out, err);
    if (rc == 0) rc = decode_layout(h, x, name, out, err);
    if (rc == 0) rc = decode_extent(h, file_bytes, x, name, out, err);
    return rc;
}

/* ---- blocks and tail ---- */

/* the recurrent state (kv_sess_encode flagged it) */
static bool write_state(FILE *f, const kv_pool *p, const kv_table *t, uint64_t *sum)
{
    if (!(t->state && p->state_bytes && t->n_pos > 0)) return true;
    return kv_sess_write(f, t->state, p->state_bytes, sum);
}

bool kv_sess_write_kv(FILE *f, const kv_pool *p, const kv_table *t, uint64_t *sum)
{
    bool ok = true;
    uint8_t *zero = p->wblock_bytes ? calloc(1, p->wblock_bytes) : NULL; /* [wblock_bytes] */
    if (p->wblock_bytes && !zero) return false;
    /* a block: its global part, then its window part (zeros once released: those
     * rows are never read again, kv_cache.h) */
    for (int32_t i = 0; ok && i < t->n_blocks; i++) {
        const int32_t b = t->blocks[i];
        if (p->gblock_bytes) ok = kv_sess_write(f, p->mem[b], p->gblock_bytes, sum);
        if (ok && p->wblock_bytes)
            ok = kv_sess_write(f, i >= t->wdrop && p->wmem[b] ? p->wmem[b] : zero, p->wblock_bytes, sum);
    }
    free(zero);
    const size_t tail_bytes = t->tail ? p->tail_bytes : 0;
    if (!ok) return false;
    if (!tail_bytes) return write_state(f, p, t, sum);
    /* a tail left past the table by a truncation is stale: saved as empty */
    uint8_t *tb = malloc(tail_bytes); /* [tail_bytes] */
    if (!tb) return false;
    memcpy(tb, t->tail, tail_bytes);
    const size_t part = tail_bytes / (size_t)p->n_layers;
    for (int l = 0; l < p->n_layers; l++) {
        kivi_tail_hdr th;
        memcpy(&th, tb + (size_t)l * part, sizeof th);
        if (th.group >= t->n_blocks) th.group = -1;
        if (th.group < 0) th.n_rows = 0;
        th.epoch = th.pad = 0;
        memcpy(tb + (size_t)l * part, &th, sizeof th);
    }
    ok = kv_sess_write(f, tb, tail_bytes, sum);
    free(tb);
    return ok && write_state(f, p, t, sum);
}

size_t kv_sess_scratch_bytes(const kv_pool *p)
{
    return p->block_bytes > p->tail_bytes ? p->block_bytes : p->tail_bytes;
}

int kv_sess_check_kv(FILE *f, const kv_pool *p, const kv_sess_info *in, uint8_t *scratch, uint64_t *sum,
                     const char *name, kvi_error *err)
{
    for (uint64_t i = 0; i < in->n_blocks; i++)
        if (!kv_sess_read(f, scratch, p->block_bytes, sum))
            return err_set(err, KVI_E_FORMAT, "session: %s is truncated in block %llu", name,
                           (unsigned long long)i);
    if (in->tail_bytes) {
        if (!kv_sess_read(f, scratch, (size_t)in->tail_bytes, sum))
            return err_set(err, KVI_E_FORMAT, "session: %s is truncated in its key tail", name);
        const size_t part = p->tail_bytes / (size_t)p->n_layers;
        for (int l = 0; l < p->n_layers; l++) {
            kivi_tail_hdr th;
            memcpy(&th, scratch + (size_t)l * part, sizeof th);
            if (th.group < -1 || (int64_t)th.group >= (int64_t)in->n_blocks || th.n_rows < 0 ||
                th.n_rows > p->block_size)
                return err_set(err, KVI_E_FORMAT,
                               "session: %s: key tail of layer %d names group %d with %d rows "
                               "(%llu blocks of %d)",
                               name, l, th.group, th.n_rows, (unsigned long long)in->n_blocks, p->block_size);
        }
    }
    for (uint64_t at = 0; at < in->state_bytes;) { /* the state, a block's bytes at a time */
        const size_t n =
            in->state_bytes - at < p->block_bytes ? (size_t)(in->state_bytes - at) : p->block_bytes;
        if (!kv_sess_read(f, scratch, n, sum))
            return err_set(err, KVI_E_FORMAT, "session: %s is truncated in its recurrent state", name);
        at += n;
    }
    return 0;
}

/* Reads the blocks and the tail into t (which holds them already). */
static int restore_bytes(FILE *f, kv_pool *p, kv_table *t, const kv_sess_info *in, const char *name,
                         kvi_error *err)
{
    if (fseek(f, (long)in->blocks_at, SEEK_SET) != 0)
        return err_set(err, KVI_E_IO, "session: cannot seek in %s", name);
    for (int32_t i = 0; i < t->n_blocks; i++) {
        const int32_t b = t->blocks[i];
        if ((p->gblock_bytes && fread(p->mem[b], 1, p->gblock_bytes, f) != p->gblock_bytes) ||
            (p->wblock_bytes && fread(p->wmem[b], 1, p->wblock_bytes, f) != p->wblock_bytes))
            return err_set(err, KVI_E_IO, "session: %s changed while being read", name);
    }
    if (in->tail_bytes) {
        if (fread(t->tail, 1, (size_t)in->tail_bytes, f) != (size_t)in->tail_bytes)
            return err_set(err, KVI_E_IO, "session: %s changed while being read", name);
        for (int l = 0; l < p->n_layers; l++) {
            kivi_tail_hdr *th = kivi_tail_part(p, t, l);
            th->epoch = 0;
            th->pad = 0;
        }
    }
    if (in->state_bytes && fread(t->state, 1, (size_t)in->state_bytes, f) != (size_t)in->state_bytes)
        return err_set(err, KVI_E_IO, "session: %s changed while being read", name);
    return 0;
}

int kv_sess_restore(FILE *f, kv_pool *p, kv_table *t, const kv_sess_info *in, const char *name,
                    kvi_error *err)
{
    int rc = kv_table_reserve(p, t, in->n_pos, err);
    if (rc) return rc;
    if (in->tail_bytes && kivi_tail_alloc(p, t) != 0) {
        rc = err_set(err, KVI_E_NOMEM, "session: cannot allocate a key tail of %zu bytes", p->tail_bytes);
        kv_table_release(p, t);
        return rc;
    }
    if (in->state_bytes && (rc = kv_table_state_take(p, t, err)) != 0) {
        kv_table_release(p, t);
        return rc;
    }
    rc = restore_bytes(f, p, t, in, name, err);
    if (rc) {
        kv_table_release(p, t);
        return rc;
    }
    t->lossy_block = in->lossy_block;
    return 0;
}
