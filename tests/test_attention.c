/*
 * test_attention.c — tiled online-softmax attention over paged KV against the
 * plain full-softmax reference, on random data: several sequences of different
 * lengths, GQA (8 query heads over 2 KV heads), blocks of 4 positions (so rows
 * cross many blocks), f32 and f16 caches, 1 and 2 threads; plus the block pool's
 * accounting invariants.
 */
#include "testutil.h"

#include "attention.h"
#include "kv_cache.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 2, HEADS = 8, KVH = 2, HD = 16, KVD = KVH * HD, QD = HEADS * HD, BS = 4 };

static void run(kvi_type type, int threads)
{
    kv_pool kv;
    kvi_error err = {0};
    int rc = kv_pool_init(&kv, LAYERS, KVD, BS, type, type, (size_t)1 << 22, &err);
    CHECK(rc == 0, "pool: %s", err.msg);
    if (rc) return;
    uint64_t rng = 12345 + (uint64_t)type;
    const int lens[3] = {1, 13, 37};
    kv_table t[3];
    memset(t, 0, sizeof t);
    float row[KVD];
    for (int s = 0; s < 3; s++) {
        CHECK(kv_table_reserve(&kv, &t[s], lens[s], &err) == 0, "%s", err.msg);
        t[s].n_pos = lens[s];
        CHECK(t[s].n_blocks == (lens[s] + BS - 1) / BS, "seq %d holds %d blocks", s, t[s].n_blocks);
        for (int l = 0; l < LAYERS; l++)
            for (int p = 0; p < lens[s]; p++) {
                for (int i = 0; i < KVD; i++) row[i] = trand_normal(&rng);
                kvi_quantize_row(type, row, kv_k_row(&kv, &t[s], l, p), KVD);
                for (int i = 0; i < KVD; i++) row[i] = trand_normal(&rng);
                kvi_quantize_row(type, row, kv_v_row(&kv, &t[s], l, p), KVD);
            }
    }
    /* every position of every sequence as a query row, in one batch */
    int n = lens[0] + lens[1] + lens[2];
    const kv_table **tabs = malloc((size_t)n * sizeof *tabs);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    float *q = malloc((size_t)n * QD * sizeof(float));
    float *out = malloc((size_t)n * QD * sizeof(float));
    float *ref = malloc((size_t)n * QD * sizeof(float));
    int r = 0;
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < lens[s]; p++, r++) {
            tabs[r] = &t[s];
            pos[r] = p;
        }
    for (int i = 0; i < n * QD; i++) q[i] = 2.0f * trand_normal(&rng);
    kvi_pool *pool = kvi_pool_create(threads);
    attn_scratch *sc = attn_scratch_create(kvi_pool_size(pool), BS, HD, HEADS, KVH, KVD);
    for (int l = 0; l < LAYERS; l++) {
        attn_args a = {.kv = &kv, .layer = l, .n_rows = n, .tables = tabs, .pos = pos, .q = q,
                       .out = out, .n_heads = HEADS, .n_kv_heads = KVH, .head_dim = HD};
        attention_rows(pool, sc, &a);
        a.out = ref;
        attention_rows_ref(&a);
        double md = 0;
        for (int i = 0; i < n * QD; i++) md = fmax(md, fabs(out[i] - ref[i]));
        CHECK(md < 2e-5, "%s threads %d layer %d: max diff vs reference %g", kvi_type_name(type), threads, l, md);
        /* a row computed alone gives the same bits as inside the batch */
        float one[QD];
        attn_args b = a;
        b.n_rows = 1;
        b.tables = tabs + (n - 1);
        b.pos = pos + (n - 1);
        b.q = q + (size_t)(n - 1) * QD;
        b.out = one;
        attention_rows(pool, sc, &b);
        CHECK(memcmp(one, out + (size_t)(n - 1) * QD, sizeof one) == 0, "row alone differs from row in batch");
    }
    /* the last query row at position 0 attends only to itself: out == v of head group */
    attn_scratch_free(sc);
    kvi_pool_free(pool);

    /* accounting */
    int32_t refs = 0;
    for (int b = 0; b < kv.n_alloc; b++) refs += kv.refcount[b];
    CHECK(refs == t[0].n_blocks + t[1].n_blocks + t[2].n_blocks, "refcounts %d", refs);
    CHECK(kv.n_used + kv.n_free == kv.n_alloc, "used %d + free %d != alloc %d", kv.n_used, kv.n_free, kv.n_alloc);
    kv_table_truncate(&kv, &t[2], 5);
    CHECK(t[2].n_blocks == 2 && t[2].n_pos == 5, "truncate: %d blocks, %d pos", t[2].n_blocks, t[2].n_pos);
    CHECK(kv.n_used + kv.n_free == kv.n_alloc && kv.n_free == 8, "after truncate: used %d free %d", kv.n_used, kv.n_free);
    for (int s = 0; s < 3; s++) kv_table_release(&kv, &t[s]);
    CHECK(kv.n_used == 0, "all released: %d used", kv.n_used);
    free(tabs);
    free(pos);
    free(q);
    free(out);
    free(ref);
    kv_pool_free(&kv);
}

static void exhaustion(void)
{
    kv_pool kv;
    kvi_error err = {0};
    const size_t block = (size_t)LAYERS * BS * 2 * KVD * 2;
    CHECK(kv_pool_init(&kv, LAYERS, KVD, BS, KVI_TYPE_F16, KVI_TYPE_F16, 3 * block, &err) == 0, "%s", err.msg);
    CHECK(kv.block_bytes == block && kv.n_blocks_max == 3, "block %zu, max %d", kv.block_bytes, kv.n_blocks_max);
    kv_table a = {0}, b = {0};
    CHECK(kv_table_reserve(&kv, &a, 8, &err) == 0, "%s", err.msg);
    int rc = kv_table_reserve(&kv, &b, 9, &err);
    CHECK(rc == KVI_E_NO_KV_SPACE && b.n_blocks == 0 && kv.n_used == 2, "rc %d, b %d blocks, used %d", rc, b.n_blocks, kv.n_used);
    CHECK(kv_table_reserve(&kv, &b, 4, &err) == 0 && kv.n_used == 3, "one block left");
    kv_table_release(&kv, &a);
    kv_table_release(&kv, &b);
    CHECK(kv_pool_bytes_allocated(&kv) == 3 * block, "allocated %zu", kv_pool_bytes_allocated(&kv));
    kv_pool_free(&kv);
}

int main(void)
{
    run(KVI_TYPE_F32, 1);
    run(KVI_TYPE_F32, 2);
    run(KVI_TYPE_F16, 2);
    exhaustion();
    return test_main_end();
}
