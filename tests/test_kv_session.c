/*
 * test_kv_session.c — the session header decoder (kv/kv_session.h) alone, on a
 * buffer: no file, no model.
 *
 * A header encoded from a pool and a table decodes back to the table's length,
 * flags, block count, tail size and lossy block, with offsets that add up to
 * the file size the layout implies; then each field is spoilt in turn and the
 * decoder must refuse it with the documented code, writing nothing but its
 * output struct. (End-to-end save/load on a real model: test_session.)
 */
#include "testutil.h"

#include "kv/kv_cache.h"
#include "kv/kv_session.h"

#include <string.h>

#define BS 16

static kv_pool P;
static kv_sess_expect X;
static int64_t SIZE; /* the file size the header implies */

/* Decodes h (a copy) with file size size; returns the code. */
static int decode(const uint8_t *h, int64_t size, kv_sess_info *out)
{
    kvi_error err = { 0 };
    uint8_t c[KV_SESS_HEADER];
    memcpy(c, h, sizeof c);
    int rc = kv_sess_decode(c, size, &X, "buf", out, &err);
    CHECK(!memcmp(c, h, sizeof c), "the decoder does not write its input");
    CHECK((rc == 0) == (err.msg[0] == 0), "a message exactly on failure (rc %d, '%s')", rc, err.msg);
    CHECK(rc == 0 || strstr(err.msg, "session: ") == err.msg, "message '%s'", err.msg);
    return rc;
}

static void spoil32(const uint8_t *h, int off, uint32_t v, int want, const char *what)
{
    uint8_t c[KV_SESS_HEADER];
    memcpy(c, h, sizeof c);
    kv_sess_put_u32(c + off, v);
    kv_sess_info in;
    const int rc = decode(c, SIZE, &in);
    CHECK(rc == want, "%s: rc %d, want %d", what, rc, want);
}

static void spoil64(const uint8_t *h, int off, uint64_t v, int want, const char *what)
{
    uint8_t c[KV_SESS_HEADER];
    memcpy(c, h, sizeof c);
    kv_sess_put_u64(c + off, v);
    kv_sess_info in;
    const int rc = decode(c, SIZE, &in);
    CHECK(rc == want, "%s: rc %d, want %d", what, rc, want);
}

int main(void)
{
    kvi_error err = { 0 };
    const int n_layers = 3, kv_dim = 64;
    const size_t one = kv_layout_block_bytes(n_layers, kv_dim, BS, KVI_TYPE_F16, KVI_TYPE_Q8_0);
    CHECK(kv_pool_init(&P, n_layers, kv_dim, BS, KVI_TYPE_F16, KVI_TYPE_Q8_0, one * 8, &err) == 0, "pool: %s",
          err.msg);
    X = (kv_sess_expect){ .p = &P, .model_sum = 0x0123456789abcdefull, .n_ctx = 100 };

    kv_table t = { 0 };
    const int32_t n_pos = 37;
    CHECK(kv_table_reserve(&P, &t, n_pos, &err) == 0, "reserve: %s", err.msg);
    t.n_pos = n_pos;
    t.no_index = true;
    uint8_t h[KV_SESS_HEADER];
    kv_sess_encode(&P, &t, X.model_sum, h);
    SIZE = KV_SESS_HEADER + 4 * (int64_t)n_pos + (int64_t)t.n_blocks * (int64_t)P.block_bytes + 8;

    kv_sess_info in;
    CHECK(decode(h, SIZE, &in) == 0, "a saved header decodes");
    CHECK(in.n_pos == n_pos && in.flags == 1u && in.n_blocks == (uint64_t)t.n_blocks && in.tail_bytes == 0 &&
              in.lossy_block == 0,
          "fields: n_pos %d flags %u blocks %llu tail %llu lossy %d", in.n_pos, in.flags,
          (unsigned long long)in.n_blocks, (unsigned long long)in.tail_bytes, in.lossy_block);
    CHECK(in.tokens_at == KV_SESS_HEADER && in.blocks_at == in.tokens_at + 4u * (uint64_t)n_pos &&
              in.tail_at == in.blocks_at + in.n_blocks * P.block_bytes && in.sum_at == in.tail_at &&
              in.file_bytes == in.sum_at + 8 && in.file_bytes == (uint64_t)SIZE,
          "offsets add up to the file size");

    CHECK(decode(h, SIZE - 1, &in) == KVI_E_FORMAT, "one byte short");
    CHECK(decode(h, SIZE + 1, &in) == KVI_E_FORMAT, "a trailing byte");
    uint8_t c[KV_SESS_HEADER];
    memcpy(c, h, sizeof c);
    c[3] ^= 0x20;
    CHECK(decode(c, SIZE, &in) == KVI_E_FORMAT, "bad magic");
    spoil32(h, 8, 1, KVI_E_FORMAT, "version 1");
    spoil32(h, 12, 2, KVI_E_FORMAT, "unknown flag");
    spoil64(h, 16, X.model_sum + 1, KVI_E_INVALID, "another model");
    spoil32(h, 24, (uint32_t)n_layers + 1, KVI_E_INVALID, "layers");
    spoil32(h, 28, (uint32_t)kv_dim * 2, KVI_E_INVALID, "kv_dim");
    spoil32(h, 32, BS * 2, KVI_E_INVALID, "block size");
    spoil32(h, 36, (uint32_t)KVI_TYPE_F32, KVI_E_INVALID, "key type");
    spoil32(h, 40, (uint32_t)KVI_TYPE_F16, KVI_E_INVALID, "value type");
    spoil64(h, 48, P.block_bytes + 1, KVI_E_FORMAT, "block bytes");
    spoil64(h, 56, P.row_bytes_k + 2, KVI_E_FORMAT, "row bytes k");
    spoil64(h, 64, 0, KVI_E_FORMAT, "row bytes v");
    spoil32(h, 44, (uint32_t)X.n_ctx + 1, KVI_E_INVALID, "past the context");
    spoil32(h, 44, (uint32_t)-1, KVI_E_INVALID, "negative length");
    spoil64(h, 72, (uint64_t)t.n_blocks + 1, KVI_E_FORMAT, "block count");
    spoil64(h, 80, 16, KVI_E_FORMAT, "a tail the pool has not");
    spoil32(h, 92, 1, KVI_E_FORMAT, "reserved word");
    spoil32(h, 88, (uint32_t)t.n_blocks + 1, KVI_E_FORMAT, "lossy block past the blocks");
    spoil32(h, 88, (uint32_t)-1, KVI_E_FORMAT, "negative lossy block");

    /* an empty sequence: no tokens, no blocks */
    kv_table e = { 0 };
    kv_sess_encode(&P, &e, X.model_sum, h);
    CHECK(decode(h, KV_SESS_HEADER + 8, &in) == 0 && in.n_pos == 0 && in.n_blocks == 0 && in.flags == 0,
          "empty sequence");

    kv_table_release(&P, &t);
    kv_pool_free(&P);
    return test_main_end();
}
