/*
 * fuzz_kv_tier.c — a block file of the prefix cache's disk tier (kv/kv_tier.h):
 * the bytes are checked as a block file (kv_tier_file_check, the key taken from
 * the bytes so that mutations reach the checks after it), then written under a
 * block file's name into a private temporary folder, which a disk tier opens
 * (the directory scan) and reads the block from (kv_tier_disk_get), as a
 * restarted server would. Layout: 4 positions a block, 64 bytes of KV data,
 * layout id 0x1234, the file's block key 0xaa.
 */
#include "fuzz_util.h"

#include "kv/kv_tier.h"

#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_KEY 0xaaull

static const kv_tier_layout X = { .model_id = 1, .block_size = 4, .block_bytes = 64, .layout_id = 0x1234 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t key = 0;
    for (size_t i = 0; i < 8 && 24 + i < size; i++) key |= (uint64_t)data[24 + i] << (8 * i);
    const uint8_t *blk = NULL;
    volatile uint8_t sink = 0;
    if (kv_tier_file_check(&X, key, NULL, data, size, &blk, NULL) == 0)
        for (size_t i = 0; i < X.block_bytes; i++) sink ^= blk[i];
    const char *p = fuzz_input_file("0000000000001234-00000000000000aa.kvb", data, size);
    if (!p) return 0;
    char *dir = strdup(p);
    if (!dir) return 0;
    kvi_tier_stats st = { 0 };
    kv_tier_disk *d = kv_tier_disk_open(dirname(dir), 1 << 20, &X, &st, NULL);
    uint8_t out[64];
    if (d && kv_tier_disk_get(d, FUZZ_KEY, NULL, out) == 0)
        for (size_t i = 0; i < sizeof out; i++) sink ^= out[i];
    kv_tier_disk_close(d);
    free(dir);
    (void)sink;
    return 0;
}
