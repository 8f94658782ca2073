/*
 * test_attention_chunk.c — the chunked prefill path of attention_rows (row tiles
 * of up to 512 query vectors sharing each chunk's converted K/V, run in sub-tiles
 * of 32 lanes) against the reference and against the same rows computed one at a
 * time, on random data (never zeros):
 *   - a prefill chunk over a filled cache whose first row sits mid-block (the
 *     diagonal blocks are partly visible, the earlier ones wholly), crossing
 *     several chunks of K/V;
 *   - the rows of the batch in a shuffled order (sub-tiles with unsorted
 *     positions: a sub-tile skips only the blocks none of its rows sees);
 *   - GQA 4 (8 lanes per row, sub-tiles aligned to rows), 12 (rows straddle
 *     sub-tiles, several tiles per sequence) and 1;
 *   - every row alone == the row inside the batch, bit for bit; shuffled batch ==
 *     sorted batch; every ISA the CPU has; 1 vs 2 threads.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "attention/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "formats/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    int heads, kvh, hd, bs, depth, rows;
    kvi_type type;
} shape;

static void chunk_case(shape sh)
{
    const int kvd = sh.kvh * sh.hd, qd = sh.heads * sh.hd, n = sh.rows, npos = sh.depth + sh.rows;
    kv_pool kv;
    kvi_error err = { 0 };
    int rc = kv_pool_init(&kv, 1, kvd, sh.bs, sh.type, sh.type, (size_t)1 << 25, &err);
    CHECK(rc == 0, "pool: %s", err.msg);
    if (rc) return;
    uint64_t rng = 4242 + (uint64_t)sh.heads * 7 + (uint64_t)sh.depth;
    kv_table t;
    memset(&t, 0, sizeof t);
    CHECK(kv_table_reserve(&kv, &t, npos, &err) == 0, "%s", err.msg);
    t.n_pos = npos;
    for (int p = 0; p < npos; p++) {
        trand_quant_row(sh.type, kv_k_row(&kv, &t, 0, p), kvd, &rng);
        trand_quant_row(sh.type, kv_v_row(&kv, &t, 0, p), kvd, &rng);
    }
    const kv_table **tabs = malloc((size_t)n * sizeof *tabs);
    int32_t *pos = malloc((size_t)n * sizeof *pos), *spos = malloc((size_t)n * sizeof *spos);
    int *perm = malloc((size_t)n * sizeof *perm);
    float *q = malloc((size_t)n * qd * sizeof(float)), *sq = malloc((size_t)n * qd * sizeof(float));
    float *out = malloc((size_t)n * qd * sizeof(float)), *out2 = malloc((size_t)n * qd * sizeof(float));
    float *ref = malloc((size_t)n * qd * sizeof(float)), *one = malloc((size_t)qd * sizeof(float));
    for (int r = 0; r < n; r++) {
        tabs[r] = &t;
        pos[r] = sh.depth + r;
        perm[r] = r;
    }
    for (int i = 0; i < n * qd; i++) q[i] = 2.0f * trand_normal(&rng);
    tpool *pool = tpool_create(2);
    attn_scratch *sc = attn_scratch_create(tpool_size(pool), sh.bs, sh.hd, sh.heads, sh.kvh, kvd);
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
                    .head_dim = sh.hd };
    attention_rows(pool, sc, &a);
    a.out = ref;
    attention_rows_ref(&a);
    const double md = max_abs_diff(out, ref, (size_t)n * qd);
    CHECK(md < 2e-5, "h%d/%d d%d: chunked vs reference %g", sh.heads, sh.kvh, sh.depth, md);

    /* every row alone (position lanes or a one-row tile) */
    int bad = 0;
    for (int r = 0; r < n; r++) {
        attn_rows_part(pool, sc, &a, r, 1, one);
        if (memcmp(one, out + (size_t)r * qd, (size_t)qd * sizeof(float)) != 0) bad++;
    }
    CHECK(bad == 0, "h%d/%d: %d rows alone differ from the rows in the batch", sh.heads, sh.kvh, bad);

    /* the batch shuffled: each row keeps its bits */
    for (int r = n - 1; r > 0; r--) {
        const int j = (int)(trand_u64(&rng) % (uint64_t)(r + 1)), x = perm[r];
        perm[r] = perm[j];
        perm[j] = x;
    }
    for (int r = 0; r < n; r++) {
        spos[r] = pos[perm[r]];
        memcpy(sq + (size_t)r * qd, q + (size_t)perm[r] * qd, (size_t)qd * sizeof(float));
    }
    attn_args c = a;
    c.pos = spos;
    c.q = sq;
    c.out = out2;
    attention_rows(pool, sc, &c);
    bad = 0;
    for (int r = 0; r < n; r++)
        if (memcmp(out2 + (size_t)r * qd, out + (size_t)perm[r] * qd, (size_t)qd * sizeof(float)) != 0) bad++;
    CHECK(bad == 0, "h%d/%d: %d rows of the shuffled batch differ", sh.heads, sh.kvh, bad);

    /* every ISA, and one thread */
    a.out = out2;
    const kern_isa best = kern_isa_detect(), was = kern_isa_active();
    for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        attention_rows(pool, sc, &a);
        CHECK(memcmp(out2, out, (size_t)n * qd * sizeof(float)) == 0, "h%d/%d: ISA %s differs", sh.heads,
              sh.kvh, kern_isa_str((kern_isa)isa));
    }
    kern_isa_set(was);
    tpool *pool1 = tpool_create(1);
    attn_scratch *sc1 = attn_scratch_create(tpool_size(pool1), sh.bs, sh.hd, sh.heads, sh.kvh, kvd);
    memset(out2, 0, (size_t)n * qd * sizeof(float));
    attention_rows(pool1, sc1, &a);
    CHECK(memcmp(out2, out, (size_t)n * qd * sizeof(float)) == 0, "h%d/%d: 1 thread differs", sh.heads,
          sh.kvh);
    attn_scratch_free(sc1);
    tpool_free(pool1);

    attn_scratch_free(sc);
    tpool_free(pool);
    kv_table_release(&kv, &t);
    kv_pool_free(&kv);
    free(tabs);
    free(pos);
    free(spos);
    free(perm);
    free(q);
    free(sq);
    free(out);
    free(out2);
    free(ref);
    free(one);
}

int main(void)
{
    /* depth 300: the first row at 300 = 18 * 16 + 12, mid-block; 200 rows cross chunks of 128 */
    chunk_case((shape){ 8, 2, 64, 16, 300, 200, KVI_TYPE_F16 });
    /* GQA 12: 12 lanes per row straddle the 32-lane sub-tiles; 60 rows = two tiles */
    chunk_case((shape){ 12, 1, 32, 16, 77, 60, KVI_TYPE_F32 });
    /* no GQA, q8_0 slices, blocks of 5 (chunks of 125 positions) */
    chunk_case((shape){ 4, 4, 32, 5, 131, 90, KVI_TYPE_Q8_0 });
    return test_main_end();
}
