/*
 * test_attention.c — tiled online-softmax attention over paged KV against the
 * plain full-softmax reference, on random data: several sequences of different
 * lengths, GQA (8 query heads over 2 KV heads), blocks of 4 positions (so rows
 * cross many blocks), f32 and f16 caches, 1 and 2 threads; plus the block pool's
 * accounting invariants. The tiled path (row tiles of one sequence sharing each
 * converted K/V block): every KV type (f32, f16, q8_0, q4_0, KIVI q4 keys with the
 * batch stash), GQA groups 4, 1 and 12, head dims 16, 20, 32, odd tile sizes, long
 * rows over many blocks; row alone == row in the batch, every ISA the same bits,
 * 1 vs 2 threads; and the softmax exponential against libm.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "attention/attention.h"
#include "attention/attn_kernels.h"
#include "kernels/kernels.h"
#include "kv/kv_quant.h"
#include "kv/kv_cache.h"
#include "formats/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 2, HEADS = 8, KVH = 2, HD = 16, KVD = KVH * HD, QD = HEADS * HD, BS = 4 };

static void run(kvi_type type, int threads)
{
    kv_pool kv;
    kvi_error err = { 0 };
    int rc = kv_pool_init(&kv, LAYERS, KVD, BS, type, type, (size_t)1 << 22, &err);
    CHECK(rc == 0, "pool: %s", err.msg);
    if (rc) return;
    uint64_t rng = 12345 + (uint64_t)type;
    const int lens[3] = { 1, 13, 37 };
    kv_table t[3];
    kv_reserve_seqs(&kv, t, lens, 3);
    for (int s = 0; s < 3; s++) {
        t[s].n_pos = lens[s];
        CHECK(t[s].n_blocks == (lens[s] + BS - 1) / BS, "seq %d holds %d blocks", s, t[s].n_blocks);
        for (int l = 0; l < LAYERS; l++)
            for (int p = 0; p < lens[s]; p++) {
                trand_quant_row(type, kv_k_row(&kv, &t[s], l, p), KVD, &rng);
                trand_quant_row(type, kv_v_row(&kv, &t[s], l, p), KVD, &rng);
            }
    }
    /* every position of every sequence as a query row, in one batch */
    int n = lens[0] + lens[1] + lens[2];
    const kv_table **tabs = malloc((size_t)n * sizeof *tabs);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    float *q = malloc((size_t)n * QD * sizeof(float));
    float *out = malloc((size_t)n * QD * sizeof(float));
    float *ref = malloc((size_t)n * QD * sizeof(float));
    batch_all_positions(t, lens, 3, tabs, pos);
    for (int i = 0; i < n * QD; i++) q[i] = 2.0f * trand_normal(&rng);
    tpool *pool = tpool_create(threads);
    attn_scratch *sc = attn_scratch_create(tpool_size(pool), BS, HD, HEADS, KVH, KVD);
    attn_args a = { .kv = &kv,
                    .n_rows = n,
                    .tables = tabs,
                    .pos = pos,
                    .q = q,
                    .n_heads = HEADS,
                    .n_kv_heads = KVH,
                    .head_dim = HD };
    for (int l = 0; l < LAYERS; l++) {
        a.layer = l;
        a.out = out;
        attention_rows(pool, sc, &a);
        a.out = ref;
        attention_rows_ref(&a);
        double md = 0;
        for (int i = 0; i < n * QD; i++) md = fmax(md, fabs(out[i] - ref[i]));
        CHECK(md < 2e-5, "%s threads %d layer %d: max diff vs reference %g", kvi_type_name(type), threads, l,
              md);
        /* a row computed alone gives the same bits as inside the batch */
        float one[QD];
        attn_rows_part(pool, sc, &a, n - 1, 1, one);
        CHECK(memcmp(one, out + (size_t)(n - 1) * QD, sizeof one) == 0,
              "row alone differs from row in batch");
    }
    /* the last query row at position 0 attends only to itself: out == v of head group */
    attn_scratch_free(sc);
    tpool_free(pool);

    /* accounting */
    int32_t refs = 0;
    for (int b = 0; b < kv.n_alloc; b++) refs += kv.refcount[b];
    CHECK(refs == t[0].n_blocks + t[1].n_blocks + t[2].n_blocks, "refcounts %d", refs);
    CHECK(kv.n_used + kv.n_free == kv.n_alloc, "used %d + free %d != alloc %d", kv.n_used, kv.n_free,
          kv.n_alloc);
    kv_table_truncate(&kv, &t[2], 5);
    CHECK(t[2].n_blocks == 2 && t[2].n_pos == 5, "truncate: %d blocks, %d pos", t[2].n_blocks, t[2].n_pos);
    CHECK(kv.n_used + kv.n_free == kv.n_alloc && kv.n_free == 8, "after truncate: used %d free %d", kv.n_used,
          kv.n_free);
    for (int s = 0; s < 3; s++) kv_table_release(&kv, &t[s]);
    CHECK(kv.n_used == 0, "all released: %d used", kv.n_used);
    free(tabs);
    free(pos);
    free(q);
    free(out);
    free(ref);
    kv_pool_free(&kv);
}

/* ---- tiled path (work items of up to 128 / group rows of one sequence) ---- */

typedef struct shape {
    int heads, kvh, hd, bs;
} shape;

/* Sequences of 1, 29 and 150 positions (150 rows: tiles of 32 and 22 rows under
 * GQA 4, rows crossing up to 38 blocks); the whole batch (two sequences
 * interleaved, so tiles break) against the reference; every row of the long
 * sequence alone == inside the batch; every ISA the CPU has gives the same bits;
 * 1 vs 2 threads. KIVI keys go through the batch write path with a stash, so the
 * blocks that some rows of a tile see in f16 and others quantised are exercised. */
static void tiled(kvi_type type, shape sh, int threads)
{
    const int kvd = sh.kvh * sh.hd, qd = sh.heads * sh.hd, bs = sh.bs;
    kv_pool kv;
    kvi_error err = { 0 };
    const kvi_type tv = type == KVI_TYPE_KV_Q4 ? KVI_TYPE_Q4_0 : type;
    int rc = kv_pool_init(&kv, 1, kvd, bs, type, tv, (size_t)1 << 24, &err);
    CHECK(rc == 0, "pool %s: %s", kvi_type_name(type), err.msg);
    if (rc) return;
    uint64_t rng = 777 + (uint64_t)type * 31 + (uint64_t)sh.hd;
    enum { NS = 3 };
    const int lens[NS] = { 1, 29, 150 };
    kv_table t[NS];
    memset(t, 0, sizeof t);
    kv_stash stash;
    kv_stash_init(&stash);
    kv_stash_begin(&stash, 0);
    float *row = malloc((size_t)kvd * sizeof(float));
    for (int sq = 0; sq < NS; sq++) {
        CHECK(kv_table_reserve(&kv, &t[sq], lens[sq], &err) == 0, "%s", err.msg);
        for (int p = 0; p < lens[sq]; p++) {
            t[sq].n_pos = p + 1;
            trand_fill_normal(row, kvd, &rng);
            kv_write_row_batch(&kv, &t[sq], 0, 0, p, row, &stash);
            trand_fill_normal(row, kvd, &rng);
            kv_write_row_batch(&kv, &t[sq], 0, 1, p, row, &stash);
        }
    }
    /* batch: seq 0, then seq 1 and seq 2 interleaved in runs of 7, then the rest of seq 2 */
    const int n = lens[0] + lens[1] + lens[2];
    const kv_table **tabs = malloc((size_t)n * sizeof *tabs);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    int r = 0, p1 = 0, p2 = 0;
    tabs[r] = &t[0];
    pos[r++] = 0;
    while (p1 < lens[1] || p2 < lens[2]) {
        for (int k = 0; k < 7 && p1 < lens[1]; k++, r++) {
            tabs[r] = &t[1];
            pos[r] = p1++;
        }
        for (int k = 0; k < 7 && p2 < lens[2]; k++, r++) {
            tabs[r] = &t[2];
            pos[r] = p2++;
        }
        if (p1 == lens[1])
            for (; p2 < lens[2]; r++) {
                tabs[r] = &t[2];
                pos[r] = p2++;
            }
    }
    CHECK(r == n, "batch of %d rows", r);
    float *q = malloc((size_t)n * qd * sizeof(float));
    float *out = malloc((size_t)n * qd * sizeof(float));
    float *out2 = malloc((size_t)n * qd * sizeof(float));
    float *ref = malloc((size_t)n * qd * sizeof(float));
    float *one = malloc((size_t)qd * sizeof(float));
    for (int i = 0; i < n * qd; i++) q[i] = 2.0f * trand_normal(&rng);
    tpool *pool = tpool_create(threads);
    attn_scratch *sc = attn_scratch_create(tpool_size(pool), bs, sh.hd, sh.heads, sh.kvh, kvd);
    CHECK(sc != NULL, "scratch");
    attn_args a = { .kv = &kv,
                    .layer = 0,
                    .n_rows = n,
                    .tables = tabs,
                    .pos = pos,
                    .q = q,
                    .out = out,
                    .n_heads = sh.heads,
                    .n_kv_heads = sh.kvh,
                    .head_dim = sh.hd,
                    .stash = &stash };
    attention_rows(pool, sc, &a);
    a.out = ref;
    attention_rows_ref(&a);
    double md = max_abs_diff(out, ref, (size_t)n * qd);
    CHECK(md < 2e-5, "%s h%d/%d hd%d: tiled vs reference %g", kvi_type_name(type), sh.heads, sh.kvh, sh.hd,
          md);

    /* each row of the long sequence alone, and the tail of the batch as its own call */
    int bad = 0;
    for (int rr = 0; rr < n; rr++) {
        if (tabs[rr] != &t[2] && rr != n - 1) continue;
        attn_rows_part(pool, sc, &a, rr, 1, one);
        if (memcmp(one, out + (size_t)rr * qd, (size_t)qd * sizeof(float)) != 0) bad++;
    }
    CHECK(bad == 0, "%s hd%d: %d rows alone differ from the rows in the batch", kvi_type_name(type), sh.hd,
          bad);
    attn_rows_part(pool, sc, &a, n - 45, 45, out2);
    CHECK(memcmp(out2, out + (size_t)(n - 45) * qd, (size_t)45 * qd * sizeof(float)) == 0,
          "%s: rows in a batch of 45 differ from the full batch", kvi_type_name(type));

    /* every ISA path gives the same bits (the kernels share one exact definition) */
    const kern_isa best = kern_isa_detect(), was = kern_isa_active();
    for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        a.out = out2;
        attention_rows(pool, sc, &a);
        CHECK(memcmp(out2, out, (size_t)n * qd * sizeof(float)) == 0, "%s: ISA %s differs from %s",
              kvi_type_name(type), kern_isa_str((kern_isa)isa), kern_isa_str(kern_isa_active()));
    }
    kern_isa_set(was);
    attn_scratch_free(sc);
    tpool_free(pool);

    /* other thread count, same bits */
    tpool *pool3 = tpool_create(3 - threads);
    attn_scratch *sc3 = attn_scratch_create(tpool_size(pool3), bs, sh.hd, sh.heads, sh.kvh, kvd);
    a.out = out2;
    attention_rows(pool3, sc3, &a);
    CHECK(memcmp(out2, out, (size_t)n * qd * sizeof(float)) == 0, "%s: %d threads differ",
          kvi_type_name(type), 3 - threads);
    attn_scratch_free(sc3);
    tpool_free(pool3);

    for (int sq = 0; sq < NS; sq++) kv_table_release(&kv, &t[sq]);
    kv_stash_free(&stash);
    kv_pool_free(&kv);
    free(row);
    free(tabs);
    free(pos);
    free(q);
    free(out);
    free(out2);
    free(ref);
    free(one);
}

/* attn_exp against libm's expf on a sweep of arguments (relative error, 0 below -87). */
static void exp_check(void)
{
    double worst = 0;
    for (float x = -90.0f; x <= 0.5f; x += 0.0137f) {
        const float e = attn_exp(x), ref = expf(x);
        if (x < -87.0f) {
            CHECK(e == 0.0f, "attn_exp(%g) = %g, want 0", x, e);
            continue;
        }
        if (ref > 1e-37f) worst = fmax(worst, fabs((double)e - ref) / ref);
    }
    CHECK(worst < 4e-7, "attn_exp relative error %g", worst);
    CHECK(attn_exp(-INFINITY) == 0.0f && attn_exp(NAN) == 0.0f && attn_exp(0.0f) == 1.0f,
          "attn_exp special values");
}

static void exhaustion(void)
{
    kv_pool kv;
    kvi_error err = { 0 };
    const size_t block = (size_t)LAYERS * BS * 2 * KVD * 2;
    CHECK(kv_pool_init(&kv, LAYERS, KVD, BS, KVI_TYPE_F16, KVI_TYPE_F16, 3 * block, &err) == 0, "%s",
          err.msg);
    CHECK(kv.block_bytes == block && kv.n_blocks_max == 3, "block %zu, max %d", kv.block_bytes,
          kv.n_blocks_max);
    kv_table a = { 0 }, b = { 0 };
    CHECK(kv_table_reserve(&kv, &a, 8, &err) == 0, "%s", err.msg);
    int rc = kv_table_reserve(&kv, &b, 9, &err);
    CHECK(rc == KVI_E_NO_KV_SPACE && b.n_blocks == 0 && kv.n_used == 2, "rc %d, b %d blocks, used %d", rc,
          b.n_blocks, kv.n_used);
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
    /* tiled path: every KV type, GQA shapes, head dims off the SIMD width, ISAs */
    const kvi_type types[5] = { KVI_TYPE_F32, KVI_TYPE_F16, KVI_TYPE_Q8_0, KVI_TYPE_Q4_0, KVI_TYPE_KV_Q4 };
    const shape shapes[3] = { { 8, 2, 16, 4 }, { 6, 6, 20, 5 }, { 12, 1, 32, 16 } };
    for (int ti = 0; ti < 5; ti++)
        for (int si = 0; si < 3; si++)
            if (types[ti] == KVI_TYPE_F32 || types[ti] == KVI_TYPE_F16 ||
                shapes[si].kvh * shapes[si].hd % 32 == 0)
                tiled(types[ti], shapes[si], si == 2 ? 1 : 2);
    exp_check();
    exhaustion();
    return test_main_end();
}
