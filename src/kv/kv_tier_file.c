/*
 * kv_tier_file.c — the file of one tiered KV block: encoder and checker (format
 * in kv_tier.h).
 *
 *     [0, 64)                 header (magic, version, sizes, layout id, key)
 *     [64, 64 + 4 * bs)       tokens of the block, int32 little-endian
 *     [.., .. + block_bytes)  the block's bytes as the pool holds them
 *     [file_bytes - 8, ..)    FNV-1a 64 of every byte before it, little-endian
 *
 * The checker trusts nothing: the size first (it must be exactly what the
 * loading layout implies, so no length read from the file sizes anything), then
 * every header field against the layout and the key, then the checksum, then
 * the tokens. A torn, truncated, foreign or corrupt file fails one of them.
 */
#include "kv/kv_tier.h"

#include "base/error.h"
#include "kv/kv_session.h"

#include <string.h>

static const uint8_t tier_magic[8] = { 'K', 'V', 'I', 'T', 'I', 'E', 'R', 0 };
#define TIER_VERSION 1u

size_t kv_tier_file_bytes(const kv_tier_layout *x)
{
    return KV_TIER_HEADER + (size_t)x->block_size * 4 + x->block_bytes + 8;
}

void kv_tier_file_encode(const kv_tier_layout *x, uint64_t key, const int32_t *tok, const uint8_t *data,
                         uint8_t *buf)
{
    const size_t fb = kv_tier_file_bytes(x);
    memset(buf, 0, KV_TIER_HEADER);
    memcpy(buf, tier_magic, sizeof tier_magic);
    kv_sess_put_u32(buf + 8, TIER_VERSION);
    kv_sess_put_u32(buf + 12, KV_TIER_HEADER);
    kv_sess_put_u64(buf + 16, x->layout_id);
    kv_sess_put_u64(buf + 24, key);
    kv_sess_put_u32(buf + 32, (uint32_t)x->block_size);
    kv_sess_put_u64(buf + 40, (uint64_t)x->block_bytes);
    kv_sess_put_u64(buf + 48, (uint64_t)fb);
    uint8_t *tp = buf + KV_TIER_HEADER;
    for (int32_t i = 0; i < x->block_size; i++) kv_sess_put_u32(tp + 4 * (size_t)i, (uint32_t)tok[i]);
    memcpy(tp + 4 * (size_t)x->block_size, data, x->block_bytes);
    kv_sess_put_u64(buf + fb - 8, kv_sess_fnv(KV_SESS_FNV0, buf, fb - 8));
}

int kv_tier_file_check(const kv_tier_layout *x, uint64_t key, const int32_t *tok, const uint8_t *buf,
                       size_t n, const uint8_t **data, kvi_error *err)
{
    const size_t fb = kv_tier_file_bytes(x);
    if (n != fb)
        return err_set(err, KVI_E_FORMAT,
                       "kv tier: block file of %zu bytes, the layout needs %zu (truncated?)", n, fb);
    if (memcmp(buf, tier_magic, sizeof tier_magic) != 0)
        return err_set(err, KVI_E_FORMAT, "kv tier: not a block file (bad magic)");
    if (kv_sess_get_u32(buf + 8) != TIER_VERSION || kv_sess_get_u32(buf + 12) != KV_TIER_HEADER)
        return err_set(err, KVI_E_FORMAT, "kv tier: block file version %u (header %u), expected %u (%u)",
                       kv_sess_get_u32(buf + 8), kv_sess_get_u32(buf + 12), TIER_VERSION, KV_TIER_HEADER);
    if (kv_sess_get_u64(buf + 16) != x->layout_id)
        return err_set(err, KVI_E_FORMAT, "kv tier: block file of another model or KV layout");
    if (kv_sess_get_u64(buf + 24) != key)
        return err_set(err, KVI_E_FORMAT, "kv tier: block file holds another block (key)");
    if (kv_sess_get_u32(buf + 32) != (uint32_t)x->block_size || kv_sess_get_u32(buf + 36) != 0 ||
        kv_sess_get_u64(buf + 40) != (uint64_t)x->block_bytes || kv_sess_get_u64(buf + 48) != (uint64_t)fb ||
        kv_sess_get_u64(buf + 56) != 0)
        return err_set(err, KVI_E_FORMAT, "kv tier: block file sizes differ from the layout's");
    if (kv_sess_get_u64(buf + fb - 8) != kv_sess_fnv(KV_SESS_FNV0, buf, fb - 8))
        return err_set(err, KVI_E_FORMAT, "kv tier: block file checksum mismatch (corrupt or torn)");
    const uint8_t *tp = buf + KV_TIER_HEADER;
    for (int32_t i = 0; tok && i < x->block_size; i++)
        if ((int32_t)kv_sess_get_u32(tp + 4 * (size_t)i) != tok[i])
            return err_set(err, KVI_E_FORMAT, "kv tier: block file holds other tokens (hash collision)");
    *data = tp + 4 * (size_t)x->block_size;
    return 0;
}
