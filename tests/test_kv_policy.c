/*
 * test_kv_policy.c — context policies (error, shift, sinks, heavy) on stories260K,
 * with every KV type (f32, f16, q8_0, q4_0, q4).
 *
 * Independent check of the moving and re-rotation: layer 0's keys and values
 * depend only on (token, position), so after a policy kept the positions
 * keep[0..n), layer 0 of the sequence must equal layer 0 of a fresh prefill of
 * the kept tokens at positions 0..n-1 (RoPE at j rotated by i - j equals RoPE at
 * i, up to rounding: a tolerance; for quantised types, up to twice the type's
 * rounding, since a moved key is dequantised, rotated and quantised again).
 *
 * heavy: the attention each position received is read back (engine_seq_recv)
 * and checked two ways: its sum over positions equals decode rows x layers x
 * heads (each head's softmax sums to 1), and the kept set is recomputed here
 * from those scores (sinks, window, the highest-scored middle positions).
 */
#include "testutil.h"

#include "kvinfer.h"

#include "engine/engine_int.h"
#include "kv/kv_quant.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kvi_model *M;
static int NV;

static kvi_engine *engine(kvi_type kv, const char *policy, int n_ctx, int n_seq)
{
    kvi_engine_params p = engine_params(kv, 2, n_seq, n_ctx);
    p.ctx_policy = policy;
    p.n_keep = 4;
    p.n_sink = 4;
    p.n_window = 0;
    return engine_create_checked(M, &p);
}

/* Fills a sequence to n_ctx, makes room for one, then runs token 42 and compares
 * with a fresh prefill of the kept tokens + 42. Returns the kept length. */
static int32_t check_policy(kvi_type kv, const char *policy, float tol)
{
    enum { CTX = 64 };
    kvi_engine *e = engine(kv, policy, CTX, 2);
    if (!e) return -1;
    int32_t P[CTX];
    uint64_t rs = 0xabc;
    P[0] = 1;
    for (int i = 1; i < CTX; i++) P[i] = 3 + (int32_t)(trand_u64(&rs) % (uint64_t)(NV - 3));
    kvi_seq *s = kvi_seq_create(e);
    float *got = malloc(NV * sizeof(float)), *want = malloc(NV * sizeof(float));
    /* heavy: a prefill then decode rows, so that received attention accumulates */
    step_rows(e, s, P, 0, CTX / 2, NULL);
    for (int i = CTX / 2; i < CTX; i++) step_rows(e, s, P + i, i, i + 1, NULL);
    kvi_error err = { 0 };
    const int32_t n = kvi_seq_make_room(s, 1, &err);
    CHECK(n > 0 && n < CTX, "%s/%s: make_room returned %d (%s)", policy, kvi_type_name(kv), n, err.msg);
    if (n <= 0) {
        kvi_engine_free(e);
        free(got);
        free(want);
        return n;
    }
    CHECK(kvi_seq_len(s) == n, "%s: length %d after make_room, want %d", policy, kvi_seq_len(s), n);
    int32_t kept[CTX + 1];
    memcpy(kept, kvi_seq_tokens(s), (size_t)n * sizeof *kept);
    if (kv == KVI_TYPE_KV_Q4) {
        /* the tail holds the new last group's rows, exactly those below n */
        const kv_pool *pq = engine_kv_pool(e);
        const kv_table *tq = engine_seq_table(s);
        const int32_t g = (n - 1) / pq->block_size;
        int bad = 0;
        for (int l = 0; l < pq->n_layers; l++) {
            const kivi_tail_hdr *h = kivi_tail_part(pq, tq, l);
            bad += h->group != g || h->n_rows != n - g * pq->block_size;
        }
        CHECK(tq->tail && bad == 0, "%s/q4: %d layers' tails do not hold group %d with %d rows", policy, bad,
              g, n - g * pq->block_size);
    }
    kvi_stats st;
    kvi_stats_get(e, s, &st);
    CHECK(st.n_evicted == (uint64_t)(CTX - n), "%s: evicted %llu, want %d", policy,
          (unsigned long long)st.n_evicted, CTX - n);

    kvi_engine *fresh = engine(kv, "error", CTX, 1);
    kvi_seq *f = kvi_seq_create(fresh);
    step_rows(fresh, f, kept, 0, n, want);
    const kv_pool *pe = engine_kv_pool(e), *pf = engine_kv_pool(fresh);
    const kv_table *te = engine_seq_table(s), *tf = engine_seq_table(f);
    const int kvd = pe->kv_dim;
    const bool quant = kv != KVI_TYPE_F32 && kv != KVI_TYPE_F16;
    float *ra = malloc((size_t)kvd * sizeof(float)), *rb = malloc((size_t)kvd * sizeof(float));
    float dk = 0, dv = 0;
    /* q4 keys are quantised per channel over a group of tokens: their scale is
     * that of the largest fresh key anywhere, not of the row */
    float kmax = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        kv_read_row(pf, tf, 0, 0, i, rb);
        for (int j = 0; j < kvd; j++) kmax = fmaxf(kmax, fabsf(rb[j]));
    }
    for (int32_t i = 0; i < n; i++) {
        for (int w = 0; w < 2; w++) {
            kv_read_row(pe, te, 0, w, i, ra);
            kv_read_row(pf, tf, 0, w, i, rb);
            /* quantised types: errors relative to the row's largest element */
            float amax = kv == KVI_TYPE_KV_Q4 && w == 0 ? kmax : 0.0f;
            for (int j = 0; j < kvd; j++) amax = fmaxf(amax, fabsf(rb[j]));
            for (int j = 0; j < kvd; j++) {
                const float d = quant ? fabsf(ra[j] - rb[j]) / (amax > 0 ? amax : 1.0f)
                                      : fabsf(ra[j] - rb[j]) / (1.0f + fabsf(rb[j]));
                if (w == 0)
                    dk = fmaxf(dk, d);
                else
                    dv = fmaxf(dv, d);
            }
        }
    }
    CHECK(dk < tol, "%s/%s: re-rotated layer-0 keys differ from fresh ones by %g (tol %g)", policy,
          kvi_type_name(kv), (double)dk, (double)tol);
    CHECK(dv < tol, "%s/%s: moved layer-0 values differ from fresh ones by %g", policy, kvi_type_name(kv),
          (double)dv);
    free(ra);
    free(rb);
    kvi_engine_free(fresh);
    /* keys of the rebuilt tail group are read exactly as stored (f16 tail) */
    /* and the sequence goes on */
    int32_t t42 = 42;
    step_rows(e, s, &t42, n, n + 1, got);
    CHECK(isfinite(got[0]) && kvi_seq_len(s) == n + 1, "%s: no step after eviction", policy);
    kvi_engine_free(e);
    free(got);
    free(want);
    return n;
}

/* The kept positions: every policy keeps its sinks / keep prefix and the newest. */
static void kept_sets(kvi_type kv)
{
    /* f32/f16: relative to 1 + |x| (f16 rounding 2^-11). Quantised: relative to
     * the row's largest element, a moved element carries two roundings of half a
     * step each, rotated (x sqrt 2): q8_0 step amax/127 -> 0.012; q4_0 amax/8 ->
     * 0.09 (one q4_0 block spans the whole 32-element row here); q4 (max - min)/15
     * per channel, max - min <= 2 amax of all keys -> 0.1. The bounds below are ~2x those. */
    float tol = 2e-3f;
    if (kv == KVI_TYPE_F32)
        tol = 1e-5f;
    else if (kv == KVI_TYPE_Q8_0)
        tol = 0.025f;
    else if (kv == KVI_TYPE_Q4_0)
        tol = 0.2f;
    else if (kv == KVI_TYPE_KV_Q4)
        tol = 0.2f;
    int32_t n = check_policy(kv, "shift", tol);
    CHECK(n == 4 + 30, "shift kept %d, want 4 + (60 - 30)", n);
    n = check_policy(kv, "sinks", tol);
    CHECK(n == 63, "sinks kept %d, want 63 (sinks + the window that fits)", n);
    n = check_policy(kv, "heavy", tol);
    CHECK(n == 63, "heavy kept %d, want 63", n);

    kvi_engine *e = engine(kv, "error", 16, 1);
    kvi_seq *s = kvi_seq_create(e);
    int32_t T[16];
    for (int i = 0; i < 16; i++) T[i] = 5 + i;
    step_rows(e, s, T, 0, 16, NULL);
    kvi_error err = { 0 };
    int32_t rc = kvi_seq_make_room(s, 1, &err);
    CHECK(rc == KVI_E_CONTEXT_FULL && strstr(err.msg, "context_length_exceeded"), "error policy: %d '%s'", rc,
          err.msg);
    CHECK(kvi_seq_make_room(s, 0, &err) == 16, "no room needed: unchanged");
    kvi_engine_free(e);
}

static int by_desc(const void *a, const void *b)
{
    const float *x = a, *y = b;
    return (x[0] < y[0]) - (x[0] > y[0]);
}

/* heavy keeps what drew attention: the recv scores the engine accumulated are
 * read back, checked for their sum, and the kept tokens are recomputed here. */
static void heavy_uses_attention(kvi_type kv)
{
    enum { CTX = 64, NS = 4, WIN = 16 };
    kvi_engine_params p = engine_params(kv, 2, 0, CTX);
    p.ctx_policy = "heavy";
    p.n_sink = NS;
    p.n_window = WIN;
    kvi_engine *e = engine_create_checked(M, &p);
    if (!e) return;
    /* distinct tokens, so a kept token names its position */
    int32_t P[CTX];
    P[0] = 1;
    for (int i = 1; i < CTX; i++) P[i] = 3 + (i * 7) % (NV - 3);
    kvi_seq *s = kvi_seq_create(e);
    const int n_pre = 20;
    step_rows(e, s, P, 0, n_pre, NULL); /* a prefill row records nothing */
    for (int i = n_pre; i < CTX; i++) step_rows(e, s, P + i, i, i + 1, NULL);
    const float *recv = engine_seq_recv(s);
    CHECK(recv != NULL, "heavy: no received attention recorded");
    if (!recv) {
        kvi_engine_free(e);
        return;
    }
    double sum = 0;
    float sc[CTX][2]; /* (score, position) of the middle candidates */
    for (int i = 0; i < CTX; i++) sum += recv[i];
    const double want = (double)(CTX - n_pre) * M->n_layers * M->n_heads;
    CHECK(fabs(sum - want) < 1e-3 * want,
          "%s: received attention sums to %g, want %g (rows x layers x heads)", kvi_type_name(kv), sum, want);
    /* independent selection: budget CTX - 1 = sinks + window + heavy hitters */
    const int mid0 = NS, mid1 = CTX - WIN, n_heavy = CTX - 1 - NS - WIN;
    int nc = 0;
    for (int i = mid0; i < mid1; i++) {
        sc[nc][0] = recv[i];
        sc[nc][1] = (float)i;
        nc++;
    }
    qsort(sc, (size_t)nc, sizeof sc[0], by_desc);
    bool want_keep[CTX] = { false };
    for (int i = 0; i < NS; i++) want_keep[i] = true;
    for (int i = mid1; i < CTX; i++) want_keep[i] = true;
    for (int i = 0; i < n_heavy; i++) want_keep[(int)sc[i][1]] = true;
    /* the most-attended middle position is one sinks/shift with the same budget
     * would drop when it lies before the window: make the test about that */
    const int top = (int)sc[0][1];
    kvi_error err = { 0 };
    const int32_t n = kvi_seq_make_room(s, 1, &err);
    CHECK(n == CTX - 1, "heavy kept %d, want %d", n, CTX - 1);
    const int32_t *kt = kvi_seq_tokens(s);
    int j = 0, bad = 0;
    for (int i = 0; i < CTX; i++)
        if (want_keep[i]) bad += j >= n || kt[j++] != P[i];
    CHECK(bad == 0 && j == n, "%s: heavy kept other positions than the highest-scored (%d differ)",
          kvi_type_name(kv), bad);
    bool has_top = false;
    for (int i = 0; i < n; i++) has_top |= kt[i] == P[top];
    CHECK(has_top && top >= NS && top < mid1,
          "%s: the most attended middle position %d (score %g) was dropped", kvi_type_name(kv), top,
          (double)sc[0][0]);
    /* the dropped one had the lowest score of the middle */
    const int low = (int)sc[nc - 1][1];
    bool has_low = false;
    for (int i = 0; i < n; i++) has_low |= kt[i] == P[low];
    CHECK(!has_low && sc[nc - 1][0] < sc[0][0], "%s: position %d with the lowest score was kept",
          kvi_type_name(kv), low);
    kvi_engine_free(e);
}

/* A policy never changes a block another sequence holds. */
static void shared_untouched(kvi_type kv)
{
    enum { CTX = 48 };
    kvi_engine *e = engine(kv, "shift", CTX, 2);
    int32_t P[CTX];
    for (int i = 0; i < CTX; i++) P[i] = 3 + (i * 37) % 500;
    kvi_seq *a = kvi_seq_create(e);
    step_rows(e, a, P, 0, CTX, NULL);
    kvi_seq *b = kvi_seq_fork(a);
    float *before = malloc(NV * sizeof(float)), *after = malloc(NV * sizeof(float));
    int32_t t = 77;
    /* b's next-token logits at position CTX - 1 (overwrite the last position) */
    step_rows(e, b, &P[CTX - 1], CTX - 1, CTX, before);
    kvi_error err = { 0 };
    CHECK(kvi_seq_make_room(a, 1, &err) > 0, "shift: %s", err.msg);
    step_rows(e, a, &t, kvi_seq_len(a), kvi_seq_len(a) + 1, NULL);
    step_rows(e, b, &P[CTX - 1], CTX - 1, CTX, after);
    CHECK(memcmp(before, after, NV * sizeof(float)) == 0, "%s: shifting a changed its fork b",
          kvi_type_name(kv));
    kvi_seq_free(b);
    kvi_seq_free(a);
    kvi_engine_free(e);
    free(before);
    free(after);
}

/* sinks: 4x the context of generation (512 for f16, the trained context; 64 for
 * q4, whose every compaction re-quantises groups), KV memory, q4 tails included,
 * constant once full. */
static void sinks_long(kvi_type kv, const int CTX)
{
    const int N = 4 * CTX;
    kvi_engine *e = engine(kv, "sinks", CTX, 1);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(1);
    int32_t tok = 1;
    size_t bytes_full = 0;
    bool constant = true, ok = true;
    for (int i = 0; i < N && ok; i++) {
        kvi_error err = { 0 };
        int32_t pos = kvi_seq_make_room(s, 1, &err);
        if (pos < 0) {
            CHECK(false, "make_room at step %d: %s", i, err.msg);
            break;
        }
        kvi_batch_clear(b);
        kvi_batch_add(b, s, tok, pos, true);
        if (kvi_step(e, b, &err) != 0) {
            CHECK(false, "step %d: %s", i, err.msg);
            break;
        }
        const float *l = kvi_logits(e, 0);
        int32_t best = 0;
        for (int v = 1; v < NV; v++)
            if (l[v] > l[best]) best = v;
        tok = best;
        kvi_stats st;
        kvi_stats_get(e, NULL, &st);
        if (i == CTX) bytes_full = st.kv_bytes_allocated + st.kv_bytes_tail;
        if (i > CTX && st.kv_bytes_allocated + st.kv_bytes_tail != bytes_full) constant = false;
        if (i == N - 1) {
            kvi_stats_get(e, s, &st);
            CHECK(st.n_evicted >= (uint64_t)(N - CTX), "evicted %llu", (unsigned long long)st.n_evicted);
        }
    }
    CHECK(constant && bytes_full > 0, "KV memory grew after the window filled");
    CHECK(kvi_seq_len(s) <= CTX, "length %d past the context", kvi_seq_len(s));
    kvi_batch_free(b);
    kvi_engine_free(e);
}

int main(void)
{
    kvi_error err = { 0 };
    M = load_stories260k(&NV);
    if (!M) return test_main_end();
    const kvi_type types[] = { KVI_TYPE_F32, KVI_TYPE_F16, KVI_TYPE_Q8_0, KVI_TYPE_Q4_0, KVI_TYPE_KV_Q4 };
    for (int i = 0; i < 5; i++) {
        kept_sets(types[i]);
        shared_untouched(types[i]);
        heavy_uses_attention(types[i]);
    }
    sinks_long(KVI_TYPE_F16, 512);
    sinks_long(KVI_TYPE_KV_Q4, 64);
    kvi_engine_params p;
    kvi_engine_params_default(&p);
    p.ctx_policy = "nonsense";
    CHECK(kvi_engine_create(M, &p, &err) == NULL && err.code == KVI_E_INVALID, "unknown policy accepted");
    kvi_model_free(M);
    return test_main_end();
}
