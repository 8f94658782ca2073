/*
 * test_kv_quant.c — quantised KV cache types (f32, f16, q8_0, q4_0, q4 = KIVI):
 *  - every type round-trips through kv_write_row / kv_read_row within the bound
 *    its format implies (computed here from the written values, not from our
 *    own quantiser), and the newest q4 key group reads back exactly in f16;
 *  - tiled attention over every type equals the full-softmax reference on the
 *    same dequantised data (1 and 2 threads, GQA, blocks of 4, heads of 8);
 *  - received attention (H2O): recv equals a double-precision softmax computed
 *    here, each head's weights sum to one, and recording it changes no output;
 *  - on stories260K: prefill == decode bit for bit for q8_0, q4_0 and q4 with
 *    small blocks (many KIVI groups completing inside one prefill), and the
 *    logits with a q8_0 or q4 cache stay close to those with an f32 cache;
 *  - bad shapes (kv_dim not a multiple of 32) get a clear error.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "attention/attention.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"
#include "formats/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 2, HEADS = 8, KVH = 4, HD = 8, KVD = KVH * HD, QD = HEADS * HD, BS = 4 };

static const kvi_type TYPES[] = { KVI_TYPE_F32, KVI_TYPE_F16, KVI_TYPE_Q8_0, KVI_TYPE_Q4_0, KVI_TYPE_KV_Q4 };
#define NTYPES ((int)(sizeof TYPES / sizeof *TYPES))

/* Largest error the format allows for element i of row x (row types). */
static double row_bound(kvi_type t, const float *x, int i)
{
    const int b0 = i / 32 * 32;
    double amax = 0;
    for (int k = b0; k < b0 + 32; k++) amax = fmax(amax, fabs(x[k]));
    switch (t) {
    case KVI_TYPE_F32: return 0;
    case KVI_TYPE_F16: return fabs(x[i]) / 2048.0 + 1e-7;
    case KVI_TYPE_Q8_0: return 0.57 * amax / 127.0 + 1e-6; /* half a step + f16 scale */
    case KVI_TYPE_Q4_0: return 1.01 * amax / 8.0 + 1e-6;   /* a full step at the clamped end */
    default: return 0;
    }
}

static void roundtrip(kvi_type type)
{
    const char *name = kvi_type_name(type);
    kv_pool kv;
    kvi_error err = { 0 };
    int rc = kv_pool_init(&kv, LAYERS, KVD, BS, type, type, (size_t)1 << 20, &err);
    CHECK(rc == 0, "%s pool: %s", name, err.msg);
    if (rc) return;
    enum { N = 11 }; /* groups 0, 1 complete; group 2 holds 3 rows */
    static float in[LAYERS][2][N][KVD];
    uint64_t rng = 99 + (uint64_t)type;
    kv_table t = { 0 };
    CHECK(kv_table_reserve(&kv, &t, N, &err) == 0, "%s", err.msg);
    for (int p = 0; p < N; p++) {
        for (int l = 0; l < LAYERS; l++)
            for (int w = 0; w < 2; w++) {
                for (int i = 0; i < KVD; i++)
                    in[l][w][p][i] = trand_normal(&rng) * (i % 5 == 0 ? 6.0f : 1.0f); /* outlier channels */
                kv_write_row(&kv, &t, l, w, p, in[l][w][p]);
            }
        t.n_pos = p + 1;
    }
    float out[KVD];
    double worst = 0;
    int exact_tail = 1, lossy = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int w = 0; w < 2; w++)
            for (int p = 0; p < N; p++) {
                kv_read_row(&kv, &t, l, w, p, out);
                const float *x = in[l][w][p];
                const kvi_type et = (type == KVI_TYPE_KV_Q4 && w == 1) ? KVI_TYPE_Q4_0 : type;
                for (int i = 0; i < KVD; i++) {
                    double bound;
                    if (et == KVI_TYPE_KV_Q4) {
                        const int g0 = p / BS * BS, g1 = g0 + BS <= N ? g0 + BS : N;
                        if (g0 + BS > N) {
                            /* newest, incomplete group: f16 exactly */
                            if (out[i] != quant_f16_to_f32(quant_f32_to_f16(x[i]))) exact_tail = 0;
                            continue;
                        }
                        double lo = INFINITY, hi = -INFINITY;
                        for (int q = g0; q < g1; q++) {
                            lo = fmin(lo, in[l][w][q][i]);
                            hi = fmax(hi, in[l][w][q][i]);
                        }
                        bound = 0.55 * (hi - lo) / 15.0 + (fabs(lo) + fabs(hi)) / 1024.0 + 1e-6;
                    } else {
                        bound = row_bound(et, x, i);
                    }
                    const double e = fabs((double)out[i] - x[i]);
                    if (e > 0) lossy = 1;
                    if (bound > 0)
                        worst = fmax(worst, e / bound);
                    else if (e != 0)
                        worst = INFINITY;
                }
            }
    CHECK(worst <= 1.0, "%s: round trip error %.3g x its bound", name, worst);
    CHECK(exact_tail, "%s: the newest key group is not kept in f16", name);
    CHECK(type == KVI_TYPE_F32 || lossy, "%s: nothing was quantised?", name);
    /* the pool's size is the layout's, and q4 keys take about a quarter of f16 */
    const size_t bb = kv_layout_block_bytes(LAYERS, KVD, BS, type, type);
    CHECK(kv.block_bytes == bb && bb > 0, "%s: block %zu bytes, layout says %zu", name, kv.block_bytes, bb);
    if (type == KVI_TYPE_KV_Q4)
        CHECK(kv.k_bytes <= (size_t)(4 * KVD + BS * KVD / 2 + 15) && kv.tail_bytes > 0 &&
                  kv.type_v == KVI_TYPE_Q4_0,
              "q4: K region %zu bytes, tail %zu, values %d", kv.k_bytes, kv.tail_bytes, kv.type_v);
    kv_table_release(&kv, &t);
    CHECK(t.tail == NULL && kv.n_used == 0, "%s: release", name);
    kv_pool_free(&kv);
}

/* Reference of recv for row r: full softmax in double over what kv_read_row gives. */
static void recv_ref(const kv_pool *kv, const kv_table *t, int l, const float *q, int32_t pos, double *ref)
{
    float *kr = malloc((size_t)(pos + 1) * KVD * sizeof(float));
    for (int32_t p = 0; p <= pos; p++) kv_read_row(kv, t, l, 0, p, kr + (size_t)p * KVD);
    for (int32_t p = 0; p <= pos; p++) ref[p] = 0;
    double *s = malloc((size_t)(pos + 1) * sizeof(double));
    for (int h = 0; h < HEADS; h++) {
        const int g = h / (HEADS / KVH);
        double mx = -INFINITY, tot = 0;
        for (int32_t p = 0; p <= pos; p++) {
            double d = 0;
            for (int i = 0; i < HD; i++) d += (double)q[h * HD + i] * kr[(size_t)p * KVD + g * HD + i];
            s[p] = d / sqrt((double)HD);
            mx = fmax(mx, s[p]);
        }
        for (int32_t p = 0; p <= pos; p++) tot += exp(s[p] - mx);
        for (int32_t p = 0; p <= pos; p++) ref[p] += exp(s[p] - mx) / tot;
    }
    free(s);
    free(kr);
}

static void attention_types(kvi_type type, int threads)
{
    const char *name = kvi_type_name(type);
    kv_pool kv;
    kvi_error err = { 0 };
    int rc = kv_pool_init(&kv, LAYERS, KVD, BS, type, type, (size_t)1 << 22, &err);
    CHECK(rc == 0, "%s pool: %s", name, err.msg);
    if (rc) return;
    uint64_t rng = 777 + (uint64_t)type;
    const int lens[3] = { 1, 14, 37 };
    kv_table t[3];
    kv_reserve_seqs(&kv, t, lens, 3);
    float row[KVD];
    for (int s = 0; s < 3; s++) {
        for (int p = 0; p < lens[s]; p++) {
            for (int l = 0; l < LAYERS; l++)
                for (int w = 0; w < 2; w++) {
                    trand_fill_normal(row, KVD, &rng);
                    kv_write_row(&kv, &t[s], l, w, p, row);
                }
            t[s].n_pos = p + 1;
        }
    }
    /* every position of every sequence as a query row, in one batch */
    const kv_table *tabs[64];
    int32_t pos[64];
    const int n = batch_all_positions(t, lens, 3, tabs, pos);
    float *q = malloc((size_t)n * QD * sizeof(float));
    float *out = malloc((size_t)n * QD * sizeof(float));
    float *out2 = malloc((size_t)n * QD * sizeof(float));
    float *ref = malloc((size_t)n * QD * sizeof(float));
    for (int i = 0; i < n * QD; i++) q[i] = 2.0f * trand_normal(&rng);
    tpool *pool = tpool_create(threads);
    attn_scratch *sc = attn_scratch_create(tpool_size(pool), BS, HD, HEADS, KVH, KVD);
    for (int l = 0; l < LAYERS; l++) {
        attn_args a = { .kv = &kv,
                        .layer = l,
                        .n_rows = n,
                        .tables = tabs,
                        .pos = pos,
                        .q = q,
                        .out = out,
                        .n_heads = HEADS,
                        .n_kv_heads = KVH,
                        .head_dim = HD };
        attention_rows(pool, sc, &a);
        a.out = ref;
        attention_rows_ref(&a);
        double md = 0;
        for (int i = 0; i < n * QD; i++) md = fmax(md, fabs(out[i] - ref[i]));
        CHECK(md < 2e-5, "%s threads %d layer %d: max diff vs reference %g", name, threads, l, md);

        /* H2O: recv on the last row of each sequence */
        float *recv_mem = calloc(3 * 64, sizeof(float));
        float *recv[64] = { 0 };
        for (int r = 0, s = 0; r < n; r++)
            if (r == n - 1 || tabs[r + 1] != tabs[r]) recv[r] = recv_mem + 64 * s++;
        a.out = out2;
        a.recv = recv;
        attention_rows(pool, sc, &a);
        CHECK(memcmp(out, out2, (size_t)n * QD * sizeof(float)) == 0,
              "%s: recording received attention changed the output", name);
        for (int r = 0; r < n; r++) {
            if (!recv[r]) continue;
            double *rr = malloc((size_t)(pos[r] + 1) * sizeof(double));
            double tot = 0, md2 = 0;
            if (type != KVI_TYPE_KV_Q4) {
                recv_ref(&kv, tabs[r], l, q + (size_t)r * QD, pos[r], rr);
                for (int32_t p = 0; p <= pos[r]; p++) md2 = fmax(md2, fabs(recv[r][p] - rr[p]));
            }
            for (int32_t p = 0; p <= pos[r]; p++) tot += recv[r][p];
            CHECK(md2 < 1e-5, "%s: recv differs from the reference by %g", name, md2);
            CHECK(fabs(tot - HEADS) < 1e-4, "%s: recv sums to %g, not %d heads", name, tot, HEADS);
            CHECK(pos[r] + 1 >= 64 || recv[r][pos[r] + 1] == 0.0f, "%s: recv written past pos", name);
            free(rr);
        }
        free(recv_mem);
    }
    attn_scratch_free(sc);
    tpool_free(pool);
    for (int s = 0; s < 3; s++) kv_table_release(&kv, &t[s]);
    free(q);
    free(out);
    free(out2);
    free(ref);
    kv_pool_free(&kv);
}

static void bad_shapes(void)
{
    kv_pool kv;
    kvi_error err = { 0 };
    int rc = kv_pool_init(&kv, 2, 24, 4, KVI_TYPE_Q8_0, KVI_TYPE_F16, 1 << 20, &err);
    CHECK(rc == KVI_E_UNSUPPORTED && strstr(err.msg, "multiple of 32"), "q8_0 kv_dim 24: rc %d '%s'", rc,
          err.msg);
    rc = kv_pool_init(&kv, 2, 31, 4, KVI_TYPE_KV_Q4, KVI_TYPE_F16, 1 << 20, &err);
    CHECK(rc == KVI_E_UNSUPPORTED, "q4 odd kv_dim: rc %d", rc);
    rc = kv_pool_init(&kv, 2, 32, 4, KVI_TYPE_Q4_K, KVI_TYPE_F16, 1 << 20, &err);
    CHECK(rc == KVI_E_UNSUPPORTED, "q4_k is not a KV type: rc %d", rc);
    kvi_type t;
    CHECK(kvi_type_from_name("q4", &t) == 0 && t == KVI_TYPE_KV_Q4 && !strcmp(kvi_type_name(t), "q4"),
          "q4 name");
    CHECK(kvi_type_from_name("Q4", &t) == 0 && t == KVI_TYPE_KV_Q4, "Q4 name");
    CHECK(kvi_type_from_name("q4_0", &t) == 0 && t == KVI_TYPE_Q4_0, "q4_0 still parses");
}

/* ---- stories260K ---------------------------------------------------------- */

static kvi_model *M;
static int NV;
static const int32_t PROMPT[] = { 1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421,
                                  395, 317, 426, 338, 401, 396, 267, 261, 374, 306, 438, 319, 260 };
#define NP ((int)(sizeof PROMPT / sizeof *PROMPT))

static kvi_engine *engine(kvi_type tk, kvi_type tv, int block, int n_batch)
{
    kvi_engine_params p = engine_params(tk, 2, 0, 128);
    p.kv_type_v = tv;
    p.kv_block_size = block;
    p.n_batch_max = n_batch;
    return engine_create_checked(M, &p);
}

static void model_invariant1(kvi_type tk, kvi_type tv, int block)
{
    kvi_engine *e = engine(tk, tv, block, 512), *e3 = engine(tk, tv, block, 5);
    if (!e || !e3) return;
    float *a = seq_logits(e, PROMPT, NP, false), *b = seq_logits(e, PROMPT, NP, true);
    float *c = seq_logits(e3, PROMPT, NP, false);
    CHECK(memcmp(a, b, (size_t)NP * NV * sizeof(float)) == 0, "kv %s/%s block %d: prefill != decode",
          kvi_type_name(tk), kvi_type_name(tv), block);
    CHECK(memcmp(a, c, (size_t)NP * NV * sizeof(float)) == 0, "kv %s/%s block %d: chunked prefill differs",
          kvi_type_name(tk), kvi_type_name(tv), block);
    free(a);
    free(b);
    free(c);
    kvi_engine_free(e);
    kvi_engine_free(e3);
}

/* max |logit - base| over positions, relative to the base logits' spread, and the
 * share of positions whose argmax agrees */
static double closeness(kvi_type tk, kvi_type tv, double max_rel, double min_agree)
{
    kvi_engine *e0 = engine(KVI_TYPE_F32, KVI_TYPE_F32, 16, 512), *e = engine(tk, tv, 16, 512);
    if (!e0 || !e) return INFINITY;
    float *a = seq_logits(e0, PROMPT, NP, false), *b = seq_logits(e, PROMPT, NP, false);
    double md = 0, spread = 0;
    int agree = 0;
    for (int i = 0; i < NP; i++) {
        const float *x = a + (size_t)i * NV, *y = b + (size_t)i * NV;
        int ax = 0, ay = 0;
        float lo = x[0], hi = x[0];
        for (int v = 0; v < NV; v++) {
            md = fmax(md, fabs(x[v] - y[v]));
            lo = fminf(lo, x[v]);
            hi = fmaxf(hi, x[v]);
            if (x[v] > x[ax]) ax = v;
            if (y[v] > y[ay]) ay = v;
        }
        spread = fmax(spread, hi - lo);
        agree += ax == ay;
    }
    printf("kv %s/%s vs f32: max |dlogit| %.4f (spread %.2f), argmax agrees %d/%d\n", kvi_type_name(tk),
           kvi_type_name(tv), md, spread, agree, NP);
    CHECK(md > 0, "kv %s/%s: identical to f32?", kvi_type_name(tk), kvi_type_name(tv));
    CHECK(md / spread < max_rel, "kv %s/%s: logits differ by %.4f of their spread", kvi_type_name(tk),
          kvi_type_name(tv), md / spread);
    CHECK(agree >= min_agree * NP, "kv %s/%s: argmax agrees at %d of %d positions", kvi_type_name(tk),
          kvi_type_name(tv), agree, NP);
    free(a);
    free(b);
    kvi_engine_free(e0);
    kvi_engine_free(e);
    return md;
}

int main(void)
{
    for (int i = 0; i < NTYPES; i++) roundtrip(TYPES[i]);
    for (int i = 0; i < NTYPES; i++) {
        attention_types(TYPES[i], 1);
        attention_types(TYPES[i], 2);
    }
    bad_shapes();

    M = load_stories260k(&NV);
    if (!M) return test_main_end();
    for (int i = 2; i < NTYPES; i++) {
        model_invariant1(TYPES[i], TYPES[i], 16);
        model_invariant1(TYPES[i], TYPES[i], 4);
    }
    model_invariant1(KVI_TYPE_KV_Q4, KVI_TYPE_F16, 8);
    model_invariant1(KVI_TYPE_F16, KVI_TYPE_Q8_0, 16);
    closeness(KVI_TYPE_F16, KVI_TYPE_F16, 0.01, 0.95);
    closeness(KVI_TYPE_Q8_0, KVI_TYPE_Q8_0, 0.04, 0.95);
    /* plain 4-bit keys lose much (outlier channels); KIVI keys far less */
    const double q40k = closeness(KVI_TYPE_Q4_0, KVI_TYPE_F16, 0.5, 0.5);
    closeness(KVI_TYPE_F16, KVI_TYPE_Q4_0, 0.05, 0.9);
    const double kivi = closeness(KVI_TYPE_KV_Q4, KVI_TYPE_KV_Q4, 0.06, 0.9);
    CHECK(kivi * 4 < q40k, "q4 (KIVI) logits error %.3f is not far below q4_0 keys' %.3f", kivi, q40k);
    kvi_model_free(M);
    return test_main_end();
}
