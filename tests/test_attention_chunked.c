/*
 * test_attention_chunked.c — chunked attention (attention.h attn_args.chunk, llama4's
 * RoPE layers): a row at position p sees only the keys of its own chunk,
 * [p - p % C, p], on a long sequence (8192 + 300 positions, llama4's chunk of 8192)
 * and on a short one with chunk 64 and blocks of 16 and 5 (chunks starting
 * mid-block), KV f32, f16 and q8_0, GQA 2:
 *   - rows at the chunk boundaries (0, C - 1, C, C + 1, ...) and random positions in
 *     one batch, against a double-precision softmax over [p - p % C, p] written here
 *     from kv_read_row (row types);
 *   - each row alone == the same row with a sliding window of p % C + 1 positions
 *     (the window path, tested on its own), bit for bit, and == its bits in the batch;
 *   - the keys before every row's chunk filled with NaN: the same bits (never read);
 *   - chunk combined with a window: the later of the two starts.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "attention/attention.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { HEADS = 4, KVH = 2, HD = 16, QD = HEADS * HD, KVD = KVH * HD, NR_MAX = 16 };

typedef struct seq {
    kv_pool kv;
    kv_table t;
    kv_stash stash;
    int n;
} seq;

static int seq_init(seq *s, kvi_type type, int n, int bs, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    kvi_error err = { 0 };
    int rc = kv_pool_init(&s->kv, 1, KVD, bs, type, type, (size_t)1 << 26, &err);
    CHECK(rc == 0, "pool %s: %s", kvi_type_name(type), err.msg);
    if (rc) return rc;
    CHECK(kv_table_reserve(&s->kv, &s->t, n, &err) == 0, "%s", err.msg);
    kv_stash_init(&s->stash);
    kv_stash_begin(&s->stash, 0);
    float row[KVD];
    for (int p = 0; p < n; p++) {
        s->t.n_pos = p + 1;
        trand_fill_normal(row, KVD, &seed);
        kv_write_row_batch(&s->kv, &s->t, 0, 0, p, row, &s->stash);
        trand_fill_normal(row, KVD, &seed);
        kv_write_row_batch(&s->kv, &s->t, 0, 1, p, row, &s->stash);
    }
    return 0;
}

static void seq_free(seq *s)
{
    kv_table_release(&s->kv, &s->t);
    kv_stash_free(&s->stash);
    kv_pool_free(&s->kv);
}

static attn_args args(const seq *s, const kv_table **tabs, const int32_t *pos, int nr, const float *q,
                      float *out, int window, int chunk)
{
    return (attn_args){ .kv = &s->kv,
                        .layer = 0,
                        .n_rows = nr,
                        .tables = tabs,
                        .pos = pos,
                        .q = q,
                        .out = out,
                        .n_heads = HEADS,
                        .n_kv_heads = KVH,
                        .head_dim = HD,
                        .stash = &s->stash,
                        .window = window,
                        .chunk = chunk };
}

/* max relative difference of out [QD] from a double softmax over positions [ws, p] */
static double ref_err(const seq *s, const float *q, int32_t p, int32_t ws, const float *out)
{
    double worst = 0;
    float k[KVD], v[KVD];
    for (int h = 0; h < HEADS; h++) {
        const int g = h / (HEADS / KVH);
        double mx = -INFINITY, *sc = malloc((size_t)(p - ws + 1) * sizeof *sc), tot = 0, acc[HD] = { 0 };
        for (int32_t t = ws; t <= p; t++) {
            kv_read_row(&s->kv, &s->t, 0, 0, t, k);
            double d = 0;
            for (int i = 0; i < HD; i++) d += (double)q[h * HD + i] * k[g * HD + i];
            sc[t - ws] = d / sqrt((double)HD);
            if (sc[t - ws] > mx) mx = sc[t - ws];
        }
        for (int32_t t = ws; t <= p; t++) tot += (sc[t - ws] = exp(sc[t - ws] - mx));
        for (int32_t t = ws; t <= p; t++) {
            kv_read_row(&s->kv, &s->t, 0, 1, t, v);
            for (int i = 0; i < HD; i++) acc[i] += sc[t - ws] / tot * v[g * HD + i];
        }
        for (int i = 0; i < HD; i++) {
            const double e = fabs(acc[i] - out[h * HD + i]) / (fabs(acc[i]) + 1e-3);
            if (e > worst) worst = e;
        }
        free(sc);
    }
    return worst;
}

static void check(kvi_type type, int n, int chunk, int bs, int window, tpool *pool)
{
    seq s;
    if (seq_init(&s, type, n, bs, 77 + (uint64_t)n + (uint64_t)bs)) return;
    int32_t pos[NR_MAX];
    const kv_table *tabs[NR_MAX];
    const int32_t fixed[8] = { 0, 1, chunk - 2, chunk - 1, chunk, chunk + 1, chunk + 5, n - 1 };
    uint64_t rng = 99;
    for (int r = 0; r < NR_MAX; r++) {
        pos[r] = r < 8 ? fixed[r] : (int32_t)(trand_u64(&rng) % (uint64_t)n);
        tabs[r] = &s.t;
    }
    float *q = malloc((size_t)NR_MAX * QD * sizeof *q), *out = malloc((size_t)NR_MAX * QD * sizeof *out);
    float one[QD];
    trand_fill_normal(q, (int64_t)NR_MAX * QD, &rng);
    attn_scratch *sc = attn_scratch_create(2, bs, HD, HEADS, KVH, KVD);
    attn_args a = args(&s, tabs, pos, NR_MAX, q, out, window, chunk);
    attention_rows(pool, sc, &a);
    double worst = 0;
    bool alone_same = true, win_same = true;
    for (int r = 0; r < NR_MAX; r++) {
        const int32_t p = pos[r], cs = p - p % chunk,
                      wsw = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
        const int32_t ws = cs > wsw ? cs : wsw;
        const double e = ref_err(&s, q + (size_t)r * QD, p, ws, out + (size_t)r * QD);
        if (type != KVI_TYPE_F16 && e > worst) worst = e;
        attn_args a1 = args(&s, tabs + r, pos + r, 1, q + (size_t)r * QD, one, window, chunk);
        attention_rows(pool, sc, &a1);
        alone_same &= !memcmp(one, out + (size_t)r * QD, sizeof one);
        attn_args aw = args(&s, tabs + r, pos + r, 1, q + (size_t)r * QD, one, p - ws + 1, 0);
        attention_rows(pool, sc, &aw);
        win_same &= !memcmp(one, out + (size_t)r * QD, sizeof one);
    }
    const double tol = type == KVI_TYPE_F32 ? 1e-4 : 0.05;
    CHECK(worst < tol, "chunk %d (%s, %d positions, blocks %d, window %d): %.3g from the double softmax",
          chunk, kvi_type_name(type), n, bs, window, worst);
    CHECK(alone_same, "chunk %d (%s): a row alone differs from the batch", chunk, kvi_type_name(type));
    CHECK(win_same, "chunk %d (%s): differs from the window of p %% C + 1", chunk, kvi_type_name(type));
    /* rows 4..7 sit in the second chunk or later: the blocks wholly before it hold NaN
     * keys and values, never read */
    if (type == KVI_TYPE_F32) {
        float nan_row[KVD];
        for (int i = 0; i < KVD; i++) nan_row[i] = NAN;
        for (int32_t t = 0; t < chunk / bs * bs; t++) { /* whole blocks: a block is read whole */
            kv_write_row(&s.kv, &s.t, 0, 0, t, nan_row);
            kv_write_row(&s.kv, &s.t, 0, 1, t, nan_row);
        }
        float out2[4 * QD];
        attn_args a2 = args(&s, tabs + 4, pos + 4, 4, q + 4 * QD, out2, window, chunk);
        attention_rows(pool, sc, &a2);
        CHECK(!memcmp(out + 4 * QD, out2, sizeof out2), "chunk %d: keys before the chunks changed the output",
              chunk);
    }
    attn_scratch_free(sc);
    free(q);
    free(out);
    seq_free(&s);
}

int main(void)
{
    tpool *pool = tpool_create(2);
    static const kvi_type types[3] = { KVI_TYPE_F32, KVI_TYPE_F16, KVI_TYPE_Q8_0 };
    for (int i = 0; i < 3; i++) {
        check(types[i], 8192 + 300, 8192, 16, 0, pool);
        check(types[i], 300, 64, 16, 0, pool);
        check(types[i], 300, 64, 5, 0, pool);
        check(types[i], 300, 64, 5, 20, pool); /* window inside the chunk */
    }
    tpool_free(pool);
    return test_main_end();
}
