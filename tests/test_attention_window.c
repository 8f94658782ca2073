/*
 * test_attention_window.c — the per-layer attention options (attention.h: sliding
 * window, softcap, KQ scale, sink logits) on every path and ISA, on random data
 * (never zeros): one sequence of 150 positions, every KV type (f32, f16, q8_0,
 * q4_0, KIVI q4 keys through the batch stash), GQA 4 (blocks of 4), 12 (blocks of
 * 16) and 1 (blocks of 5), windows of 1, 5, 16, 40 and 1000 positions (smaller
 * than, equal to and larger than a block, starting mid-block, larger than the
 * sequence), softcap and sinks on and off, scales 0 (1/sqrt(hd)) and others.
 *   - the whole prefill batch (chunked path for row types, query-lane tiles for
 *     KIVI) against a double-precision softmax written here from kv_read_row (row
 *     types) and against attention_rows_ref (all types);
 *   - the batch cut in calls of 1 (position lanes, or query lanes under GQA 12),
 *     2, 3 (small query-lane tiles) and 45 rows: the same bits; every ISA the CPU
 *     has (rows alone, pairs, the whole batch): the same bits; 1 vs 2 threads;
 *   - a window longer than the sequence gives the bits of no window; a window of
 *     one position gives the row's own value scaled by the sink's share;
 *   - received attention (H2O) with the options: the output keeps its bits, recv
 *     equals the weights of the softmax written here, positions outside the
 *     window stay untouched;
 *   - blocks wholly before every window of a batch are never read: their memory
 *     filled with NaN, the batch, the rows alone, every ISA and the reference give
 *     the bits they gave before (finite); then their table entries set to -1 (any
 *     address computed from them reads outside the pool's block array: ASan
 *     reports it, a plain build reads a wild pointer), the same bits again.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "attention/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"
#include "formats/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { L = 150 };

typedef struct shape {
    int heads, kvh, hd, bs;
} shape;

typedef struct opts {
    int window;
    float softcap, scale;
    int sinks;
} opts;

/* One filled sequence, the batch of all its positions, queries and sink logits. */
typedef struct fix {
    kvi_type type;
    shape sh;
    int kvd, qd, group;
    kv_pool kv;
    kv_table t;
    kv_stash stash;
    const kv_table *tabs[L];
    int32_t pos[L];
    float *q;     /* [L][qd] */
    float *sinks; /* [heads] */
} fix;

static int fix_init(fix *f, kvi_type type, shape sh)
{
    memset(f, 0, sizeof *f);
    f->type = type;
    f->sh = sh;
    f->kvd = sh.kvh * sh.hd;
    f->qd = sh.heads * sh.hd;
    f->group = sh.heads / sh.kvh;
    kvi_error err = { 0 };
    const kvi_type tv = type == KVI_TYPE_KV_Q4 ? KVI_TYPE_Q4_0 : type;
    int rc = kv_pool_init(&f->kv, 1, f->kvd, sh.bs, type, tv, (size_t)1 << 24, &err);
    CHECK(rc == 0, "pool %s: %s", kvi_type_name(type), err.msg);
    if (rc) return rc;
    CHECK(kv_table_reserve(&f->kv, &f->t, L, &err) == 0, "%s", err.msg);
    kv_stash_init(&f->stash);
    kv_stash_begin(&f->stash, 0);
    uint64_t rng = 5150 + (uint64_t)type * 17 + (uint64_t)sh.hd * 3 + (uint64_t)sh.bs;
    float *row = malloc((size_t)f->kvd * sizeof(float));
    for (int p = 0; p < L; p++) {
        f->t.n_pos = p + 1;
        trand_fill_normal(row, f->kvd, &rng);
        kv_write_row_batch(&f->kv, &f->t, 0, 0, p, row, &f->stash);
        trand_fill_normal(row, f->kvd, &rng);
        kv_write_row_batch(&f->kv, &f->t, 0, 1, p, row, &f->stash);
        f->tabs[p] = &f->t;
        f->pos[p] = p;
    }
    free(row);
    f->q = malloc((size_t)L * f->qd * sizeof(float));
    f->sinks = malloc((size_t)sh.heads * sizeof(float));
    for (int i = 0; i < L * f->qd; i++) f->q[i] = 2.0f * trand_normal(&rng);
    /* sinks around the scores' range: some above a head's max, some below */
    for (int h = 0; h < sh.heads; h++) f->sinks[h] = 1.0f + 2.0f * trand_normal(&rng);
    return 0;
}

static void fix_free(fix *f)
{
    kv_table_release(&f->kv, &f->t);
    kv_stash_free(&f->stash);
    kv_pool_free(&f->kv);
    free(f->q);
    free(f->sinks);
}

static attn_args fix_args(const fix *f, opts o, float *out)
{
    return (attn_args){ .kv = &f->kv,
                        .layer = 0,
                        .n_rows = L,
                        .tables = f->tabs,
                        .pos = f->pos,
                        .q = f->q,
                        .out = out,
                        .n_heads = f->sh.heads,
                        .n_kv_heads = f->sh.kvh,
                        .head_dim = f->sh.hd,
                        .stash = &f->stash,
                        .window = o.window,
                        .softcap = o.softcap,
                        .scale = o.scale,
                        .sinks = o.sinks ? f->sinks : NULL };
}

static int32_t wstart(opts o, int32_t p)
{
    return o.window > 0 && p - o.window + 1 > 0 ? p - o.window + 1 : 0;
}

/* The weights w[t] (t in the window of row r) of head h, in double, from the keys
 * kv_read_row gives (row types): the options as llama.cpp / the model papers
 * state them; returns the sink's share of the denominator. */
static double weights(const fix *f, opts o, int r, int h, double *w)
{
    const int hd = f->sh.hd, g = h / f->group;
    const int32_t p = f->pos[r], ws = wstart(o, p);
    float *k = malloc((size_t)f->kvd * sizeof(float));
    const float *qh = f->q + (size_t)r * f->qd + (size_t)h * hd;
    double mx = -INFINITY;
    for (int32_t t = ws; t <= p; t++) {
        kv_read_row(&f->kv, &f->t, 0, 0, t, k);
        double d = 0;
        for (int i = 0; i < hd; i++) d += (double)qh[i] * k[g * hd + i];
        d *= o.scale != 0.0f ? (double)o.scale : 1.0 / sqrt((double)hd);
        if (o.softcap != 0.0f) d = o.softcap * tanh(d / o.softcap);
        w[t] = d;
        mx = fmax(mx, d);
    }
    const double sink = o.sinks ? f->sinks[h] : -INFINITY;
    mx = fmax(mx, sink);
    double tot = exp(sink - mx);
    for (int32_t t = ws; t <= p; t++) tot += (w[t] = exp(w[t] - mx));
    for (int32_t t = ws; t <= p; t++) w[t] /= tot;
    free(k);
    return exp(sink - mx) / tot;
}

/* Max abs difference of the batch output from the softmax of `weights` over V. */
static double vs_weights(const fix *f, opts o, const float *out)
{
    double md = 0, w[L];
    float *v = malloc((size_t)f->kvd * sizeof(float));
    double *acc = malloc((size_t)f->sh.hd * sizeof(double));
    for (int r = 0; r < L; r++)
        for (int h = 0; h < f->sh.heads; h++) {
            const int hd = f->sh.hd, g = h / f->group;
            weights(f, o, r, h, w);
            for (int i = 0; i < hd; i++) acc[i] = 0;
            for (int32_t t = wstart(o, f->pos[r]); t <= f->pos[r]; t++) {
                kv_read_row(&f->kv, &f->t, 0, 1, t, v);
                for (int i = 0; i < hd; i++) acc[i] += w[t] * v[g * hd + i];
            }
            for (int i = 0; i < hd; i++)
                md = fmax(md, fabs(acc[i] - out[(size_t)r * f->qd + (size_t)h * hd + i]));
        }
    free(v);
    free(acc);
    return md;
}

static bool same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* Rows [r0, r0 + n) in calls of `each` rows == out; the number of differing calls. */
static int cut_differs(tpool *pool, attn_scratch *sc, const attn_args *a, const float *out, int r0, int n,
                       int each, int qd, float *buf)
{
    int bad = 0;
    for (int r = r0; r < r0 + n; r += each) {
        const int k = r + each <= r0 + n ? each : r0 + n - r;
        attn_rows_part(pool, sc, a, r, k, buf);
        if (!same(buf, out + (size_t)r * qd, (size_t)k * qd)) bad++;
    }
    return bad;
}

#define NAME "%s h%d/%d hd%d bs%d w%d cap%g sc%g sink%d"
#define ARGS(f, o)                                                                                         \
    kvi_type_name((f)->type), (f)->sh.heads, (f)->sh.kvh, (f)->sh.hd, (f)->sh.bs, (o).window, (o).softcap, \
        (o).scale, (o).sinks

static void check_case(fix *f, opts o, tpool *pool, attn_scratch *sc)
{
    const int qd = f->qd;
    const size_t nout = (size_t)L * qd;
    float *out = malloc(nout * sizeof(float)), *ref = malloc(nout * sizeof(float));
    float *buf = malloc(nout * sizeof(float));
    attn_args a = fix_args(f, o, out);
    attention_rows(pool, sc, &a);
    attn_args ar = fix_args(f, o, ref);
    attention_rows_ref(&ar);
    const bool rowtype = f->type != KVI_TYPE_KV_Q4;
    double md = max_abs_diff(out, ref, nout);
    CHECK(md < 3e-5, NAME ": batch vs attention_rows_ref %g", ARGS(f, o), md);
    if (rowtype) {
        md = vs_weights(f, o, out);
        CHECK(md < 3e-5, NAME ": batch vs the softmax of the test %g", ARGS(f, o), md);
    }

    /* the batch cut in calls of 1, 2, 3 and 45 rows */
    const int cuts[4] = { 1, 2, 3, 45 };
    for (int c = 0; c < 4; c++) {
        const int bad = cut_differs(pool, sc, &a, out, 0, L, cuts[c], qd, buf);
        CHECK(bad == 0, NAME ": %d calls of %d rows differ from the batch", ARGS(f, o), bad, cuts[c]);
    }
    /* every ISA: the whole batch, rows alone at the end (depth), a pair, a triple */
    const kern_isa best = kern_isa_detect(), was = kern_isa_active();
    for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        attn_args ai = a;
        ai.out = buf;
        attention_rows(pool, sc, &ai);
        CHECK(same(buf, out, nout), NAME ": ISA %s batch differs", ARGS(f, o), kern_isa_str((kern_isa)isa));
        int bad = cut_differs(pool, sc, &a, out, L - 20, 20, 1, qd, buf);
        bad += cut_differs(pool, sc, &a, out, L - 31, 6, 2, qd, buf);
        bad += cut_differs(pool, sc, &a, out, 61, 9, 3, qd, buf);
        CHECK(bad == 0, NAME ": ISA %s: %d small calls differ", ARGS(f, o), kern_isa_str((kern_isa)isa), bad);
    }
    kern_isa_set(was);
    /* one thread */
    tpool *p1 = tpool_create(1);
    attn_scratch *s1 = attn_scratch_create(1, f->sh.bs, f->sh.hd, f->sh.heads, f->sh.kvh, f->kvd);
    a.out = buf;
    attention_rows(p1, s1, &a);
    a.out = out;
    CHECK(same(buf, out, nout), NAME ": 1 thread differs", ARGS(f, o));
    attn_scratch_free(s1);
    tpool_free(p1);

    /* a window past the sequence is no window */
    if (o.window >= L) {
        opts o0 = o;
        o0.window = 0;
        attn_args a0 = fix_args(f, o0, buf);
        attention_rows(pool, sc, &a0);
        CHECK(same(buf, out, nout), NAME ": differs from no window", ARGS(f, o));
    }
    /* one position: the row's own value times 1 - the sink's share */
    if (o.window == 1 && rowtype) {
        double w[L], worst = 0;
        float *v = malloc((size_t)f->kvd * sizeof(float));
        for (int r = 0; r < L; r++) {
            kv_read_row(&f->kv, &f->t, 0, 1, r, v);
            for (int h = 0; h < f->sh.heads; h++) {
                const double keep = 1.0 - weights(f, o, r, h, w);
                for (int i = 0; i < f->sh.hd; i++)
                    worst = fmax(worst, fabs(out[(size_t)r * qd + (size_t)h * f->sh.hd + i] -
                                             keep * v[(h / f->group) * f->sh.hd + i]));
            }
        }
        CHECK(worst < 1e-5, NAME ": window 1 is not the own value (%g)", ARGS(f, o), worst);
        free(v);
    }

    /* H2O: rows 100..129 with recv on rows 105 and 129 */
    if (rowtype) {
        float *recv_mem = calloc(2 * L, sizeof(float));
        float *recv[L] = { 0 };
        recv[105] = recv_mem;
        recv[129] = recv_mem + L;
        attn_args b = a;
        b.n_rows = 30;
        b.tables = a.tables + 100;
        b.pos = a.pos + 100;
        b.q = a.q + (size_t)100 * qd;
        b.recv = recv + 100;
        b.out = buf;
        attention_rows(pool, sc, &b);
        CHECK(same(buf, out + (size_t)100 * qd, (size_t)30 * qd), NAME ": recv changed the output",
              ARGS(f, o));
        double worst = 0;
        int outside = 0;
        for (int k = 0; k < 2; k++) {
            const int r = k ? 129 : 105;
            double want[L] = { 0 }, w[L];
            for (int h = 0; h < f->sh.heads; h++) {
                weights(f, o, r, h, w);
                for (int32_t t = wstart(o, r); t <= r; t++) want[t] += w[t];
            }
            for (int t = 0; t < L; t++) {
                if (t < wstart(o, r) || t > r)
                    outside += recv[r][t] != 0.0f;
                else
                    worst = fmax(worst, fabs(recv[r][t] - want[t]));
            }
        }
        CHECK(worst < 1e-5 && outside == 0, NAME ": recv off by %g, %d positions outside the window written",
              ARGS(f, o), worst, outside);
        free(recv_mem);
    }
    free(out);
    free(ref);
    free(buf);
}

/* The last 30 rows with a window of 40: the blocks before position 81 are never
 * read (NaN-filled, then table entries -1); the results keep their bits. */
static void poison_case(fix *f, opts o, tpool *pool, attn_scratch *sc)
{
    enum { N = 30 };
    const int qd = f->qd, bs = f->sh.bs;
    const size_t nout = (size_t)N * qd;
    float *out = malloc(nout * sizeof(float)), *ref = malloc(nout * sizeof(float));
    float *buf = malloc(nout * sizeof(float)), *ref2 = malloc(nout * sizeof(float));
    float *recv_mem = calloc(L, sizeof(float)), *recv_mem2 = calloc(L, sizeof(float));
    float *recv[N] = { 0 };
    attn_args a = fix_args(f, o, out);
    a.n_rows = N;
    a.tables += L - N;
    a.pos += L - N;
    a.q += (size_t)(L - N) * qd;
    attention_rows(pool, sc, &a);
    attn_args ar = a;
    ar.out = ref;
    attention_rows_ref(&ar);
    const bool rowtype = f->type != KVI_TYPE_KV_Q4;
    if (rowtype) {
        recv[N - 1] = recv_mem;
        a.recv = recv;
        a.out = buf;
        attention_rows(pool, sc, &a);
        a.recv = NULL;
        a.out = out;
    }
    const int32_t w0 = wstart(o, L - N);
    const int nb = w0 / bs; /* blocks wholly before every window */
    CHECK(nb >= 2, "poison: %d blocks before the windows", nb);
    int32_t ids[L];
    for (int j = 0; j < nb; j++) {
        ids[j] = f->t.blocks[j];
        memset(f->kv.mem[ids[j]], 0xFF, f->kv.block_bytes);
    }
    for (int stage = 0; stage < 2; stage++) {
        if (stage == 1)
            for (int j = 0; j < nb; j++) f->t.blocks[j] = -1;
        const kern_isa best = kern_isa_detect(), was = kern_isa_active();
        for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
            kern_isa_set((kern_isa)isa);
            a.out = buf;
            attention_rows(pool, sc, &a);
            a.out = out;
            int bad = !same(buf, out, nout);
            bad += cut_differs(pool, sc, &a, out, 0, N, 1, qd, buf);
            bad += cut_differs(pool, sc, &a, out, 0, N, 3, qd, buf);
            CHECK(bad == 0, NAME ": poison stage %d ISA %s: %d calls differ", ARGS(f, o), stage,
                  kern_isa_str((kern_isa)isa), bad);
            if (rowtype) {
                memset(recv_mem2, 0, L * sizeof(float));
                recv[N - 1] = recv_mem2;
                a.recv = recv;
                a.out = buf;
                attention_rows(pool, sc, &a);
                CHECK(same(buf, out, nout) && same(recv_mem2, recv_mem, L),
                      NAME ": poison stage %d ISA %s: recv path differs", ARGS(f, o), stage,
                      kern_isa_str((kern_isa)isa));
                a.recv = NULL;
                a.out = out;
            }
        }
        kern_isa_set(was);
        ar.out = ref2;
        attention_rows_ref(&ar);
        CHECK(same(ref2, ref, nout), NAME ": poison stage %d: the reference read a poisoned block",
              ARGS(f, o), stage);
    }
    for (int j = 0; j < nb; j++) f->t.blocks[j] = ids[j];
    int finite = 1;
    for (size_t i = 0; i < nout; i++) finite &= isfinite(out[i]) != 0;
    CHECK(finite, NAME ": poison: non-finite output", ARGS(f, o));
    free(out);
    free(ref);
    free(buf);
    free(ref2);
    free(recv_mem);
    free(recv_mem2);
}

int main(void)
{
    const kvi_type types[5] = { KVI_TYPE_F32, KVI_TYPE_F16, KVI_TYPE_Q8_0, KVI_TYPE_Q4_0, KVI_TYPE_KV_Q4 };
    const shape shapes[3] = { { 8, 2, 16, 4 }, { 12, 1, 32, 16 }, { 4, 4, 32, 5 } };
    const opts cases[] = {
        { 5, 0.0f, 0.0f, 0 },   { 16, 0.0f, 0.0f, 0 },   { 40, 0.0f, 0.0f, 1 },   { 1, 0.0f, 0.0f, 0 },
        { 1, 0.0f, 0.0f, 1 },   { 16, 4.0f, 0.0f, 1 },   { 0, 5.0f, 0.3f, 1 },    { 0, 0.0f, 0.0f, 1 },
        { 40, 3.0f, 0.09f, 0 }, { 1000, 0.0f, 0.0f, 0 }, { 1000, 2.5f, 0.0f, 1 },
    };
    const int nc = (int)(sizeof cases / sizeof cases[0]);
    tpool *pool = tpool_create(2);
    for (int si = 0; si < 3; si++) {
        const shape sh = shapes[si];
        attn_scratch *sc =
            attn_scratch_create(tpool_size(pool), sh.bs, sh.hd, sh.heads, sh.kvh, sh.kvh * sh.hd);
        CHECK(sc != NULL, "scratch");
        for (int ti = 0; ti < 5; ti++) {
            if (types[ti] != KVI_TYPE_F32 && types[ti] != KVI_TYPE_F16 && sh.kvh * sh.hd % 32 != 0) continue;
            fix f;
            if (fix_init(&f, types[ti], sh)) continue;
            /* every case on f32 and KIVI; the others on a few */
            for (int c = 0; c < nc; c++)
                if (types[ti] == KVI_TYPE_F32 || types[ti] == KVI_TYPE_KV_Q4 || c % 3 == ti % 3)
                    check_case(&f, cases[c], pool, sc);
            poison_case(&f, (opts){ 40, 0.0f, 0.0f, 0 }, pool, sc);
            poison_case(&f, (opts){ 40, 4.0f, 0.0f, 1 }, pool, sc);
            fix_free(&f);
        }
        attn_scratch_free(sc);
    }
    tpool_free(pool);
    return test_main_end();
}
