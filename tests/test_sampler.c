/*
 * test_sampler.c — the sampler against hand-computed expectations: argmax and its
 * ties, seed reproducibility, top-k = 1 as argmax, draw frequencies against
 * softmax probabilities computed here (chi-square), the exact token sets that
 * top-p and min-p keep, and the repetition penalty.
 */
#include "kvinfer.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Chi-square critical value at a false-alarm rate of 0.001 for 5 degrees of
 * freedom (6 categories): P(X > 20.515) = 0.001 under the null hypothesis. */
#define CHI2_CRIT_DF5_P001 20.515
/* ... and for 2 degrees of freedom (3 categories). */
#define CHI2_CRIT_DF2_P001 13.816

/* Draws n tokens and counts them; returns the number of out-of-range ids. */
static int draw_counts(kvi_sampler *s, const float *logits, int nv, long n, long *counts)
{
    int bad = 0;
    memset(counts, 0, (size_t)nv * sizeof *counts);
    for (long i = 0; i < n; i++) {
        int32_t t = kvi_sampler_sample(s, logits);
        if (t < 0 || t >= nv)
            bad++;
        else
            counts[t]++;
    }
    return bad;
}

/* Pearson chi-square of counts against probabilities (over ids with p > 0). */
static double chi_square(const long *counts, const double *prob, int nv, long n)
{
    double x2 = 0.0;
    for (int i = 0; i < nv; i++) {
        if (prob[i] <= 0.0) continue;
        double e = prob[i] * (double)n;
        double d = (double)counts[i] - e;
        x2 += d * d / e;
    }
    return x2;
}

static void softmax_ref(const float *logits, int nv, double temp, double *out)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < nv; i++) mx = fmax(mx, logits[i]);
    for (int i = 0; i < nv; i++) sum += (out[i] = exp((logits[i] - mx) / temp));
    for (int i = 0; i < nv; i++) out[i] /= sum;
}

static void test_defaults(void)
{
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    CHECK(fabsf(p.temp - 0.8f) < 1e-7f && p.top_k == 40, "temp %g top_k %d", p.temp, p.top_k);
    CHECK(fabsf(p.top_p - 0.95f) < 1e-7f && fabsf(p.min_p - 0.05f) < 1e-7f, "top_p %g min_p %g", p.top_p,
          p.min_p);
    CHECK(p.repeat_penalty == 1.0f && p.repeat_last_n == 64, "penalty %g last_n %d", p.repeat_penalty,
          p.repeat_last_n);
    CHECK(kvi_sampler_create(&p, 0) == NULL, "n_vocab 0 must be refused");
    kvi_sampler *s = kvi_sampler_create(&p, 4);
    CHECK(s != NULL, "create");
    CHECK(kvi_sampler_sample(s, NULL) < 0, "NULL logits must be an error");
    kvi_sampler_accept(s, -5);   /* ignored, not a crash */
    kvi_sampler_accept(s, 1000); /* ignored, not a crash */
    kvi_sampler_free(s);
    kvi_sampler_free(NULL);
}

static void test_argmax(void)
{
    kvi_sampler_params p = sampler_params(0.0f, 40, 0.5f, 0.5f, 1);
    p.repeat_penalty = 3.0f; /* temp 0: greedy over the penalised logits (llama.cpp) */
    kvi_sampler *s = kvi_sampler_create(&p, 8);
    const float a[8] = { -3.0f, 0.5f, 2.0f, 7.25f, -1.0f, 7.25f, 7.0f, 0.0f };
    CHECK(kvi_sampler_sample(s, a) == 3, "tie 3/5 must give the lower id, got %d", kvi_sampler_sample(s, a));
    kvi_sampler_accept(s, 3);
    /* 7.25 / 3 = 2.42 for token 3: token 5 (7.25) wins */
    CHECK(kvi_sampler_sample(s, a) == 5, "temp 0 with the penalty: want 5, got %d", kvi_sampler_sample(s, a));
    /* token 3: -7 * 3 = -21; the tie 2/4 at -2.5 gives 2 */
    const float b[8] = { -9.0f, -8.0f, -2.5f, -7.0f, -2.5f, -3.0f, -100.0f, -4.0f };
    CHECK(kvi_sampler_sample(s, b) == 2, "all negative with a tie: got %d", kvi_sampler_sample(s, b));
    /* token 3: 3 / 3 = 1 < 3 (token 4) */
    float c[8] = { NAN, 1.0f, NAN, 3.0f, 3.0f, NAN, -INFINITY, 0.0f };
    CHECK(kvi_sampler_sample(s, c) == 4, "NaN must never win: got %d", kvi_sampler_sample(s, c));
    kvi_sampler_free(s);
    /* without a penalty temp 0 is the argmax of the raw row */
    p.repeat_penalty = 1.0f;
    s = kvi_sampler_create(&p, 8);
    kvi_sampler_accept(s, 3);
    CHECK(kvi_sampler_sample(s, a) == 3, "temp 0 argmax: got %d", kvi_sampler_sample(s, a));
    CHECK(kvi_sampler_sample(s, c) == 3, "NaN must never win: got %d", kvi_sampler_sample(s, c));
    kvi_sampler_free(s);

    /* A row with no finite logit still gives a valid id when sampling. */
    p = sampler_params(1.0f, 0, 0.9f, 0.1f, 1);
    s = kvi_sampler_create(&p, 4);
    float d[4] = { NAN, -INFINITY, NAN, -INFINITY };
    int32_t t = kvi_sampler_sample(s, d);
    CHECK(t >= 0 && t < 4, "all -inf/NaN row gave %d", t);
    kvi_sampler_free(s);
}

static void test_seed(void)
{
    enum { NV = 1000, N = 500 };
    float *logits = malloc(NV * sizeof *logits);
    uint64_t st = 12345;
    for (int i = 0; i < NV; i++) logits[i] = 2.0f * trand_normal(&st);
    kvi_sampler_params p = sampler_params(1.0f, 0, 1.0f, 0.0f, 777);
    kvi_sampler *a = kvi_sampler_create(&p, NV), *b = kvi_sampler_create(&p, NV);
    p.seed = 778;
    kvi_sampler *c = kvi_sampler_create(&p, NV);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < N; i++) {
        int32_t ta = kvi_sampler_sample(a, logits), tb = kvi_sampler_sample(b, logits);
        int32_t tc = kvi_sampler_sample(c, logits);
        same_ab += ta == tb;
        same_ac += ta == tc;
    }
    CHECK(same_ab == N, "same seed: %d of %d tokens equal", same_ab, N);
    CHECK(same_ac < N / 2, "different seeds: %d of %d tokens equal", same_ac, N);
    kvi_sampler_free(a);
    kvi_sampler_free(b);
    kvi_sampler_free(c);
    free(logits);
}

static void test_top_k_1(void)
{
    enum { NV = 300 };
    float logits[NV];
    uint64_t st = 99;
    kvi_sampler_params p = sampler_params(1.5f, 1, 1.0f, 0.0f, 5);
    kvi_sampler *s = kvi_sampler_create(&p, NV);
    int agree = 0;
    for (int r = 0; r < 200; r++) {
        int32_t want = 0;
        for (int i = 0; i < NV; i++) {
            logits[i] = trand_normal(&st);
            if (logits[i] > logits[want]) want = i;
        }
        agree += kvi_sampler_sample(s, logits) == want;
    }
    CHECK(agree == 200, "top_k 1: %d of 200 rows equal the argmax", agree);
    kvi_sampler_free(s);
}

static void test_distribution(void)
{
    enum { NV = 6 };
    const long N = 200000;
    const float logits[NV] = { 1.0f, 0.5f, -0.25f, 2.0f, -1.0f, 0.0f };
    double prob[NV];
    long counts[NV];

    /* temp 1, nothing else: frequencies follow softmax(logits). */
    kvi_sampler_params p = sampler_params(1.0f, 0, 1.0f, 0.0f, 2024);
    kvi_sampler *s = kvi_sampler_create(&p, NV);
    softmax_ref(logits, NV, 1.0, prob);
    CHECK(draw_counts(s, logits, NV, N, counts) == 0, "out-of-range ids");
    double x2 = chi_square(counts, prob, NV, N);
    CHECK(x2 < CHI2_CRIT_DF5_P001, "temp 1: chi-square %.2f >= %.3f", x2, CHI2_CRIT_DF5_P001);
    kvi_sampler_free(s);

    /* temp 0.5: softmax(logits / 0.5). The temp-1 probabilities must fail this. */
    p = sampler_params(0.5f, 0, 1.0f, 0.0f, 31337);
    s = kvi_sampler_create(&p, NV);
    CHECK(draw_counts(s, logits, NV, N, counts) == 0, "out-of-range ids");
    x2 = chi_square(counts, prob, NV, N);
    CHECK(x2 > 1000.0, "temp 0.5 must not look like temp 1 (chi-square %.2f)", x2);
    softmax_ref(logits, NV, 0.5, prob);
    x2 = chi_square(counts, prob, NV, N);
    CHECK(x2 < CHI2_CRIT_DF5_P001, "temp 0.5: chi-square %.2f >= %.3f", x2, CHI2_CRIT_DF5_P001);
    kvi_sampler_free(s);

    /* top_k 3: only ids 3, 0, 1, renormalised. */
    p = sampler_params(1.0f, 3, 1.0f, 0.0f, 4);
    s = kvi_sampler_create(&p, NV);
    CHECK(draw_counts(s, logits, NV, N, counts) == 0, "out-of-range ids");
    double z = exp(2.0) + exp(1.0) + exp(0.5);
    double pk[NV] = { exp(1.0) / z, exp(0.5) / z, 0, exp(2.0) / z, 0, 0 };
    CHECK(counts[2] == 0 && counts[4] == 0 && counts[5] == 0, "top_k 3 drew ids 2/4/5: %ld %ld %ld",
          counts[2], counts[4], counts[5]);
    x2 = chi_square(counts, pk, NV, N);
    CHECK(x2 < CHI2_CRIT_DF2_P001, "top_k 3: chi-square %.2f >= %.3f", x2, CHI2_CRIT_DF2_P001);
    kvi_sampler_free(s);
}

/* Draws many tokens and checks that exactly the ids in `want` (a bit mask) occur. */
static void check_kept(kvi_sampler_params p, const float *logits, int nv, unsigned want, const char *what)
{
    long counts[16];
    kvi_sampler *s = kvi_sampler_create(&p, nv);
    CHECK(draw_counts(s, logits, nv, 20000, counts) == 0, "%s: out-of-range ids", what);
    unsigned got = 0;
    for (int i = 0; i < nv; i++)
        if (counts[i] > 0) got |= 1u << i;
    CHECK(got == want, "%s: kept set 0x%x, want 0x%x", what, got, want);
    kvi_sampler_free(s);
}

static void test_top_p_min_p(void)
{
    /* Probabilities (ids in shuffled order): id 2: 0.5, id 4: 0.25, id 0: 0.125,
     * id 5: 0.0625, id 1: 0.03125, id 3: 0.03125. Cumulative in rank order:
     * 0.5, 0.75, 0.875, 0.9375, 0.96875, 1. */
    const float lg[6] = {
        logf(0.125f), logf(0.03125f), logf(0.5f), logf(0.03125f), logf(0.25f), logf(0.0625f)
    };
    const unsigned ID2 = 1u << 2, ID4 = 1u << 4, ID0 = 1u << 0, ID5 = 1u << 5;

    check_kept(sampler_params(1.0f, 0, 0.4f, 0.0f, 1), lg, 6, ID2, "top_p 0.4");
    check_kept(sampler_params(1.0f, 0, 0.7f, 0.0f, 2), lg, 6, ID2 | ID4, "top_p 0.7");
    check_kept(sampler_params(1.0f, 0, 0.8f, 0.0f, 3), lg, 6, ID2 | ID4 | ID0, "top_p 0.8");
    check_kept(sampler_params(1.0f, 0, 0.9f, 0.0f, 4), lg, 6, ID2 | ID4 | ID0 | ID5, "top_p 0.9");
    check_kept(sampler_params(1.0f, 0, 1.0f, 0.0f, 5), lg, 6, 0x3f, "top_p 1 (off)");
    /* top_p after top_k renormalises over the k kept: top_k 2 leaves 2/3 and 1/3. */
    check_kept(sampler_params(1.0f, 2, 0.6f, 0.0f, 6), lg, 6, ID2, "top_k 2 + top_p 0.6 (2/3 >= 0.6)");
    check_kept(sampler_params(1.0f, 2, 0.7f, 0.0f, 6), lg, 6, ID2 | ID4, "top_k 2 + top_p 0.7");

    /* min_p: keep p >= min_p * 0.5. */
    check_kept(sampler_params(1.0f, 0, 1.0f, 0.3f, 7), lg, 6, ID2 | ID4, "min_p 0.3 (>= 0.15)");
    check_kept(sampler_params(1.0f, 0, 1.0f, 0.2f, 8), lg, 6, ID2 | ID4 | ID0, "min_p 0.2 (>= 0.1)");
    check_kept(sampler_params(1.0f, 0, 1.0f, 0.1f, 9), lg, 6, ID2 | ID4 | ID0 | ID5, "min_p 0.1 (>= 0.05)");
    check_kept(sampler_params(1.0f, 0, 1.0f, 0.9f, 10), lg, 6, ID2, "min_p 0.9");
    /* min_p is relative to the max before temperature: a high temperature does
     * not let token 0 back in. */
    check_kept(sampler_params(5.0f, 0, 1.0f, 0.3f, 11), lg, 6, ID2 | ID4, "min_p 0.3 at temp 5");
}

static void test_penalty(void)
{
    const float lg[4] = { 2.0f, 1.5f, -1.0f, -0.9f };
    kvi_sampler_params p = sampler_params(1.0f, 1, 1.0f, 0.0f, 1);
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 3;
    kvi_sampler *s = kvi_sampler_create(&p, 4);
    CHECK(kvi_sampler_sample(s, lg) == 0, "no history: argmax 0");
    kvi_sampler_accept(s, 0); /* 2.0 / 1.5 = 1.333 < 1.5 */
    CHECK(kvi_sampler_sample(s, lg) == 1, "penalised 0: want 1, got %d", kvi_sampler_sample(s, lg));
    kvi_sampler_accept(s, 1); /* 1.5 / 1.5 = 1.0 < 1.333 */
    CHECK(kvi_sampler_sample(s, lg) == 0, "both penalised: want 0, got %d", kvi_sampler_sample(s, lg));
    kvi_sampler_free(s);

    /* The window: after 0, 3, 3, 3 with repeat_last_n 3, token 0 is no longer penalised. */
    s = kvi_sampler_create(&p, 4);
    kvi_sampler_accept(s, 0);
    kvi_sampler_accept(s, 3);
    kvi_sampler_accept(s, 3);
    CHECK(kvi_sampler_sample(s, lg) == 1, "0 still in the window: want 1, got %d", kvi_sampler_sample(s, lg));
    kvi_sampler_accept(s, 3);
    CHECK(kvi_sampler_sample(s, lg) == 0, "0 left the window: want 0, got %d", kvi_sampler_sample(s, lg));
    kvi_sampler_free(s);

    /* Negative logits are multiplied: -0.9 * 1.5 = -1.35 < -1.0. */
    const float neg[2] = { -1.0f, -0.9f };
    s = kvi_sampler_create(&p, 2);
    CHECK(kvi_sampler_sample(s, neg) == 1, "no history: want 1");
    kvi_sampler_accept(s, 1);
    CHECK(kvi_sampler_sample(s, neg) == 0, "negative logit penalised: want 0, got %d",
          kvi_sampler_sample(s, neg));
    kvi_sampler_free(s);

    /* A token repeated in the window is penalised once: 2.0 / 1.5 = 1.333 > 1.0
     * (twice would be 0.889 < 1.0). */
    const float two[2] = { 2.0f, 1.0f };
    s = kvi_sampler_create(&p, 2);
    kvi_sampler_accept(s, 0);
    kvi_sampler_accept(s, 0);
    kvi_sampler_accept(s, 0);
    CHECK(kvi_sampler_sample(s, two) == 0, "repeated token penalised more than once");
    kvi_sampler_free(s);

    /* repeat_penalty 1 is off. */
    p.repeat_penalty = 1.0f;
    s = kvi_sampler_create(&p, 4);
    kvi_sampler_accept(s, 0);
    CHECK(kvi_sampler_sample(s, lg) == 0, "penalty 1 must change nothing");
    kvi_sampler_free(s);
}

int main(void)
{
    test_defaults();
    test_argmax();
    test_seed();
    test_top_k_1();
    test_distribution();
    test_top_p_min_p();
    test_penalty();
    return test_main_end();
}
