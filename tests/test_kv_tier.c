/*
 * test_kv_tier.c — the prefix cache's RAM and disk tiers (kv/kv_tier.h) on
 * stories260K.
 *
 * Reference: the logits of a prompt P (80 tokens, 5 blocks of 16) prefilled cold
 * by an engine without tiers. Then, for f16, q8_0 and q4 (KIVI) keys:
 *  - RAM: P prefilled and freed, an unrelated prompt Q fills the small pool so P's
 *    blocks are evicted into the RAM tier; P again takes its first 4 blocks from
 *    RAM (64 positions), computes the rest, and its logits equal the reference
 *    bit for bit; hits, load bytes, blocks and bytes exact;
 *  - disk: P prefilled by an engine with a disk tier, which flushes at
 *    kvi_engine_free; a new engine on the same directory takes 64 positions of P
 *    from disk, logits bit-identical; files on disk == blocks counted, bytes ==
 *    blocks * file bytes;
 *  - RAM bounded to 2 blocks in front of disk: evictions go to disk, exact counts;
 *  - damage: the files truncated, lengthened, a data byte flipped, the checksum
 *    flipped, a leftover .tmp and a foreign layout's file: opening drops the
 *    wrong-sized files and the .tmp, ignores the foreign one, a match drops the
 *    corrupt file it meets and recomputes: logits still equal the reference.
 */
#include "testutil.h"

#include "kv/kv_tier.h"

/* paths are built from the test folder and names of at most 127 bytes */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NP 80  /* prompt P */
#define NQ 128 /* prompt Q, unrelated */
#define BS 16

static kvi_model *M;
static int32_t P[NP], Q[NQ];
static float *REF; /* [n_vocab] P's last logits, cold */
static int32_t NV;

static kvi_engine *engine(kvi_type tk, size_t budget, size_t ram, const char *dir, size_t disk)
{
    kvi_engine_params p;
    kvi_engine_params_default(&p);
    p.n_threads = 1;
    p.n_ctx = 256;
    p.kv_type_k = tk;
    p.kv_block_size = BS;
    p.kv_budget_bytes = budget;
    p.kv_cache_ram = ram;
    p.kv_cache_dir = dir;
    p.kv_cache_disk = disk;
    kvi_error err = { 0 };
    kvi_engine *e = kvi_engine_create(M, &p, &err);
    CHECK(e != NULL, "engine: %s", err.msg);
    return e;
}

/* Runs tokens[0..n) on a new sequence after its prefix reuse; *held: positions
 * reused; the last logits into out (NULL: none); the sequence is freed. */
static void run(kvi_engine *e, const int32_t *tok, int32_t n, int32_t *held, float *out)
{
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    const int32_t h = kvi_seq_reuse_prefix(s, tok, n);
    CHECK(h >= 0 && h < n, "reuse %d", h);
    for (int32_t i = h; i < n; i++) kvi_batch_add(b, s, tok[i], i, i == n - 1);
    kvi_error err = { 0 };
    CHECK(kvi_step(e, b, &err) == 0, "step: %s", err.msg);
    if (out) memcpy(out, kvi_logits(e, n - 1 - h), (size_t)NV * sizeof *out);
    if (held) *held = h;
    kvi_batch_free(b);
    kvi_seq_free(s);
}

static bool same_logits(const float *x) { return memcmp(x, REF, (size_t)NV * sizeof *x) == 0; }

static size_t block_bytes(kvi_engine *e)
{
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    return st.kv_bytes_block;
}

static void test_ram(kvi_type tk, const char *name)
{
    kvi_engine *probe = engine(tk, 0, 0, NULL, 0);
    if (!probe) return;
    const size_t bb = block_bytes(probe);
    kvi_engine_free(probe);
    /* a pool of 8 blocks: Q (8 blocks) pushes all of P out */
    kvi_engine *e = engine(tk, 8 * bb, 1 << 20, NULL, 0);
    float *x = malloc((size_t)NV * sizeof *x);
    int32_t held = -1;
    run(e, P, NP, &held, x);
    CHECK(held == 0 && same_logits(x), "%s: cold P with tiers", name);
    run(e, Q, NQ, NULL, NULL);
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_tier_ram.blocks >= 4 && st.kv_tier_ram.bytes == (size_t)st.kv_tier_ram.blocks * bb,
          "%s: RAM tier %lld blocks, %zu bytes (block %zu)", name, (long long)st.kv_tier_ram.blocks,
          st.kv_tier_ram.bytes, bb);
    CHECK(st.kv_tier_ram.store_bytes == (uint64_t)st.kv_tier_ram.blocks * bb, "%s: store bytes %llu", name,
          (unsigned long long)st.kv_tier_ram.store_bytes);
    const int64_t before = st.kv_tier_ram.blocks;
    run(e, P, NP, &held, x);
    kvi_stats_get(e, NULL, &st);
    CHECK(held == 64, "%s: P again holds %d positions (want 64 from RAM)", name, held);
    CHECK(st.prefix_ram_tokens == 64 && st.kv_tier_ram.hits == 4 && st.kv_tier_ram.load_bytes == 4 * bb,
          "%s: ram tokens %llu, hits %llu, load %llu", name, (unsigned long long)st.prefix_ram_tokens,
          (unsigned long long)st.kv_tier_ram.hits, (unsigned long long)st.kv_tier_ram.load_bytes);
    CHECK(st.kv_tier_ram.bytes == (size_t)st.kv_tier_ram.blocks * bb && st.kv_tier_ram.blocks >= before - 4,
          "%s: RAM accounting after the load", name);
    CHECK(same_logits(x), "%s: logits of P with 4 blocks from RAM equal the cold ones", name);
    kvi_engine_free(e);
    free(x);
}

/* Files of dir whose names end in ext, sorted; returns the count (at most 64). */
static int list_files(const char *dir, const char *ext, char names[64][128])
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        const size_t l = strlen(de->d_name), le = strlen(ext);
        if (l > le && l < 128 && !strcmp(de->d_name + l - le, ext) && n < 64) strcpy(names[n++], de->d_name);
    }
    if (d) closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[128];
            strcpy(t, names[j]);
            strcpy(names[j], names[j - 1]);
            strcpy(names[j - 1], t);
        }
    return n;
}

static void clear_dir(const char *dir)
{
    char names[64][128];
    static char path[8400];
    const int n = list_files(dir, "", names);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
}

static void test_disk(void)
{
    static char dir[8192];
    memcpy(dir, tmp_path("kv_tier_dir"), sizeof dir - 1);
    kvi_engine *e = engine(KVI_TYPE_F16, 0, 0, dir, 1 << 20); /* (creates the folder) */
    if (!e) return;
    kvi_engine_free(e);
    clear_dir(dir);
    e = engine(KVI_TYPE_F16, 0, 0, dir, 1 << 20);
    const size_t bb = block_bytes(e);
    const size_t fb = KV_TIER_HEADER + BS * 4 + bb + 8;
    float *x = malloc((size_t)NV * sizeof *x);
    int32_t held = -1;
    run(e, P, NP, &held, x);
    CHECK(held == 0 && same_logits(x), "disk: cold P");
    kvi_engine_free(e); /* flushes P's 5 indexed blocks */
    char names[64][128];
    CHECK(list_files(dir, ".kvb", names) == 5, "disk: 5 block files after the flush");

    e = engine(KVI_TYPE_F16, 0, 0, dir, 1 << 20);
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_tier_disk.blocks == 5 && st.kv_tier_disk.bytes == 5 * fb &&
              st.kv_tier_disk.bytes_max == 1 << 20,
          "disk: reopened with %lld blocks, %zu bytes", (long long)st.kv_tier_disk.blocks,
          st.kv_tier_disk.bytes);
    run(e, P, NP, &held, x);
    kvi_stats_get(e, NULL, &st);
    CHECK(held == 64 && st.prefix_disk_tokens == 64 && st.kv_tier_disk.hits == 4 &&
              st.kv_tier_disk.load_bytes == 4 * fb,
          "disk: P after a restart holds %d positions, %llu hits", held,
          (unsigned long long)st.kv_tier_disk.hits);
    CHECK(same_logits(x), "disk: logits of P with 4 blocks from disk equal the cold ones");
    kvi_engine_free(e);

    /* RAM of 2 blocks in front of the disk: a small pool pushes P through both */
    clear_dir(dir);
    e = engine(KVI_TYPE_F16, 8 * bb, 2 * bb, dir, 1 << 20);
    run(e, P, NP, NULL, NULL);
    run(e, Q, NQ, NULL, NULL);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_tier_ram.blocks == 2 && st.kv_tier_ram.bytes == 2 * bb, "ram+disk: RAM holds 2 blocks (%lld)",
          (long long)st.kv_tier_ram.blocks);
    CHECK((uint64_t)st.kv_tier_ram.evictions == (uint64_t)st.kv_tier_disk.blocks &&
              st.kv_tier_disk.store_bytes == (uint64_t)st.kv_tier_disk.blocks * fb &&
              st.kv_tier_disk.bytes == (size_t)st.kv_tier_disk.blocks * fb,
          "ram+disk: %llu RAM evictions, %lld disk blocks", (unsigned long long)st.kv_tier_ram.evictions,
          (long long)st.kv_tier_disk.blocks);
    run(e, P, NP, &held, x);
    kvi_stats_get(e, NULL, &st);
    CHECK(held == 64 && st.prefix_ram_tokens + st.prefix_disk_tokens == 64 && st.prefix_disk_tokens > 0,
          "ram+disk: P holds %d (ram %llu, disk %llu)", held, (unsigned long long)st.prefix_ram_tokens,
          (unsigned long long)st.prefix_disk_tokens);
    CHECK(same_logits(x), "ram+disk: logits equal the cold ones");
    kvi_engine_free(e);

    /* damage every file of P, a leftover .tmp, a foreign layout's file */
    clear_dir(dir); /* (before an engine indexes the folder) */
    e = engine(KVI_TYPE_F16, 0, 0, dir, 1 << 20);
    run(e, P, NP, NULL, NULL);
    kvi_engine_free(e);
    const int n = list_files(dir, ".kvb", names);
    CHECK(n == 5, "damage: 5 files (%d)", n);
    static char path[8400], foreign[8400];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        uint8_t *d = (uint8_t *)read_file(path, &len);
        if (!d) continue;
        if (i == 0) write_file(path, d, len - 1); /* truncated */
        if (i == 1) write_file(path, d, len + 1); /* (the NUL read_file adds) */
        if (i == 2) d[KV_TIER_HEADER + BS * 4 + 7] ^= 1, write_file(path, d, len); /* data */
        if (i == 3) d[len - 1] ^= 0x80, write_file(path, d, len);                  /* checksum */
        if (i == 4) {
            d[20] ^= 1;
            write_file(path, d, len); /* layout id in the header */
            snprintf(path, sizeof path, "%s/%.33s.tmp", dir, names[i]);
            write_file(path, d, len / 2); /* an interrupted store */
            snprintf(foreign, sizeof foreign, "%s/0000000000000001-%.16s.kvb", dir, names[i] + 17);
            write_file(foreign, d, len);
        }
        free(d);
    }
    e = engine(KVI_TYPE_F16, 0, 0, dir, 1 << 20);
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_tier_disk.dropped == 3 && st.kv_tier_disk.blocks == 3,
          "damage: opening dropped %llu files (want 3), kept %lld",
          (unsigned long long)st.kv_tier_disk.dropped, (long long)st.kv_tier_disk.blocks);
    CHECK(access(foreign, F_OK) == 0, "damage: a foreign layout's file is left alone");
    run(e, P, NP, &held, x);
    run(e, P, NP, &held, x); /* (whatever the first walk met, the second finds P in the pool) */
    kvi_stats_get(e, NULL, &st);
    /* the first walk meets block 0's file: dropped at opening, or now */
    CHECK(st.prefix_disk_tokens == 0 && st.kv_tier_disk.dropped >= 3 && st.kv_tier_disk.dropped <= 4,
          "damage: nothing loaded from damaged files (disk tokens %llu, dropped %llu)",
          (unsigned long long)st.prefix_disk_tokens, (unsigned long long)st.kv_tier_disk.dropped);
    CHECK(same_logits(x), "damage: the recomputed logits equal the cold ones");
    kvi_engine_free(e);
    clear_dir(dir);
    free(x);
}

int main(void)
{
    kvi_error err = { 0 };
    M = kvi_model_load(shared_path("models/stories260K.gguf"), NULL, &err);
    CHECK(M != NULL, "model: %s", err.msg);
    if (!M) return test_main_end();
    NV = kvi_n_vocab(M);
    uint64_t r = 7;
    for (int i = 0; i < NP; i++) P[i] = 1 + (int32_t)(trand_u64(&r) % (uint64_t)(NV - 1));
    for (int i = 0; i < NQ; i++) Q[i] = 1 + (int32_t)(trand_u64(&r) % (uint64_t)(NV - 1));
    REF = malloc((size_t)NV * sizeof *REF);
    const kvi_type types[3] = { KVI_TYPE_F16, KVI_TYPE_Q8_0, KVI_TYPE_KV_Q4 };
    const char *names[3] = { "f16", "q8_0", "q4 (KIVI)" };
    for (int t = 0; t < 3; t++) {
        kvi_engine *e = engine(types[t], 0, 0, NULL, 0);
        if (!e) continue;
        run(e, P, NP, NULL, REF); /* the reference: cold, no tiers */
        kvi_engine_free(e);
        test_ram(types[t], names[t]);
        if (t == 0) test_disk();
    }
    free(REF);
    kvi_model_free(M);
    return test_main_end();
}
