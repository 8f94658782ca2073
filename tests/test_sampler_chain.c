/*
 * test_sampler_chain.c — llama.cpp's samplers in kvinfer against tiny scalar
 * references written here from the definitions in
 * ../shared/golden/sampling/README.md, on random inputs:
 *   - DRY (alone in the chain, temperature 1; allowed length 0, 2 and 4) over
 *     random histories drawn from a
 *     few tokens of stories260K (so repeats are common), with the default
 *     breakers: the distribution equals softmax(logit - m * b^(L - A)) with L
 *     found by brute force (every earlier position, its common suffix with the
 *     window's end, capped by the breaker limit);
 *   - top-n-sigma and typical (alone) on random rows: the surviving set and its
 *     probabilities;
 *   - XTC with probability 0.5: kvi_sampler_probs is the mixture of "fired" and
 *     "not fired", and draws follow it (chi-square-free check: every bin within
 *     5 standard deviations);
 *   - the order parser: llama.cpp's names and aliases, unknown names skipped,
 *     letters, the empty list; kvi_sampler_params_stateful.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NV = 512 };

static kvi_sampler_params only(const char *codes)
{
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    p.temp = 1.0f;
    kvi_sampler_order_parse(&p, NULL, 0, codes, NULL);
    return p;
}

/* softmax of l[0 .. n) over the finite entries into p (double). */
static void softmax_ref(const double *l, int n, double *p)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) sum += p[i] = isfinite(l[i]) ? exp(l[i] - mx) : 0.0;
    for (int i = 0; i < n; i++) p[i] /= sum;
}

/* ---- DRY ---- */

typedef struct brk_ref {
    int32_t head, n_tail, tail[32];
} brk_ref;

/* The repeat limit by the README: from the window's end backwards, the first
 * breaker occurrence (longest tail) leaves the tokens after it. */
static int ref_limit(const int32_t *w, int n, const brk_ref *b, int nb)
{
    for (int i = 0; i < n; i++) {
        int longest = -1;
        for (int k = 0; k < nb; k++) {
            if (b[k].head != w[n - 1 - i] || b[k].n_tail > i || b[k].n_tail <= longest) continue;
            bool ok = true;
            for (int o = 0; o < b[k].n_tail; o++) ok = ok && b[k].tail[o] == w[n - i + o];
            if (ok) longest = b[k].n_tail;
        }
        if (longest >= 0) return i - longest;
    }
    return n;
}

static void test_dry(const kvi_model *m, int32_t allowed)
{
    kvi_sampler_params p = only("d");
    p.dry_multiplier = 0.8f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = allowed;
    p.dry_penalty_last_n = 40;
    uint64_t rs = 4242;
    int bad = 0, penalised_rows = 0;
    brk_ref brk[256];
    int nb = 0;
    {
        kvi_sampler *s = kvi_sampler_create(&p, NV);
        kvi_error err = { 0 };
        CHECK(kvi_sampler_set_dry_breakers(s, m, NULL, 0, &err) == 0, "breakers: %s", err.msg);
        const int32_t n = kvi_sampler_dry_breaker(s, -1, NULL, NULL, 0, NULL);
        for (int32_t i = 0; i < n && nb < 256; i++, nb++)
            kvi_sampler_dry_breaker(s, i, &brk[nb].head, brk[nb].tail, 32, &brk[nb].n_tail);
        kvi_sampler_free(s);
    }
    /* a small alphabet with one breaker token (13, "\n" in stories260K) */
    const int32_t alpha[6] = { 300, 301, 302, 303, 304, 13 };
    for (int round = 0; round < 300; round++) {
        kvi_sampler *s = kvi_sampler_create(&p, NV);
        kvi_error err = { 0 };
        kvi_sampler_set_dry_breakers(s, m, NULL, 0, &err);
        const int len = 1 + (int)(trand_u64(&rs) % 70);
        int32_t hist[80];
        for (int i = 0; i < len; i++) {
            hist[i] = alpha[trand_u64(&rs) % (round % 3 == 0 ? 6 : 3)];
            kvi_sampler_accept(s, hist[i]);
        }
        float lg[NV];
        double l[NV], want[NV];
        for (int i = 0; i < NV; i++) l[i] = lg[i] = trand_normal(&rs);
        /* the reference */
        const int n = len < p.dry_penalty_last_n ? len : p.dry_penalty_last_n;
        const int32_t *w = hist + len - n;
        int best[NV];
        for (int t = 0; t < NV; t++) best[t] = -1;
        const int lim = ref_limit(w, n, brk, nb);
        if (n > p.dry_allowed_length && lim >= p.dry_allowed_length) {
            for (int j = 0; j + 1 < n; j++) {
                int L = 0;
                while (L <= j && w[j - L] == w[n - 1 - L]) L++;
                if (L > lim) L = lim;
                if (L >= p.dry_allowed_length && L > best[w[j + 1]]) best[w[j + 1]] = L;
            }
        }
        bool any = false;
        for (int t = 0; t < NV; t++) {
            bool single = false;
            for (int k = 0; k < nb; k++) single = single || (brk[k].head == t && brk[k].n_tail == 0);
            if (best[t] >= p.dry_allowed_length && !single) {
                l[t] -= 0.8 * pow(1.75, best[t] - p.dry_allowed_length);
                any = true;
            }
        }
        penalised_rows += any;
        softmax_ref(l, NV, want);
        float got[NV];
        kvi_sampler_probs(s, lg, got);
        double worst = 0.0;
        for (int t = 0; t < NV; t++) worst = fmax(worst, fabs(got[t] - want[t]));
        if (worst > 1e-6) bad++;
        kvi_sampler_free(s);
    }
    CHECK(bad == 0, "DRY (allowed length %d): %d of 300 rows off the reference", allowed, bad);
    CHECK(penalised_rows > 30, "DRY (allowed length %d): only %d of 300 rows had a penalty", allowed,
          penalised_rows);
}

/* ---- top-n-sigma, typical ---- */

static void test_top_n_sigma_typical(void)
{
    uint64_t rs = 99;
    int bad_s = 0, bad_t = 0;
    for (int round = 0; round < 200; round++) {
        float lg[NV];
        double l[NV], want[NV];
        for (int i = 0; i < NV; i++) l[i] = lg[i] = 2.0f * trand_normal(&rs);
        /* top-n-sigma 1.5 */
        double mx = -INFINITY, mean = 0.0, var = 0.0;
        for (int i = 0; i < NV; i++) mx = fmax(mx, l[i]), mean += l[i] / NV;
        for (int i = 0; i < NV; i++) var += (l[i] - mean) * (l[i] - mean) / NV;
        double ls[NV];
        for (int i = 0; i < NV; i++) ls[i] = l[i] < mx - 1.5 * sqrt(var) ? -INFINITY : l[i];
        softmax_ref(ls, NV, want);
        kvi_sampler_params p = only("s");
        p.top_n_sigma = 1.5f;
        kvi_sampler *s = kvi_sampler_create(&p, NV);
        float got[NV];
        kvi_sampler_probs(s, lg, got);
        for (int i = 0; i < NV; i++) bad_s += fabs(got[i] - want[i]) > 1e-6;
        kvi_sampler_free(s);
        /* typical 0.7: order by |-ln p - H|, shortest prefix with mass > 0.7 */
        double pr[NV], h = 0.0;
        softmax_ref(l, NV, pr);
        for (int i = 0; i < NV; i++) h -= pr[i] * log(pr[i]);
        int idx[NV];
        for (int i = 0; i < NV; i++) idx[i] = i;
        for (int i = 1; i < NV; i++) /* insertion sort by score */
            for (int j = i; j > 0 && fabs(-log(pr[idx[j]]) - h) < fabs(-log(pr[idx[j - 1]]) - h); j--) {
                const int t = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = t;
            }
        double cum = 0.0, lt[NV];
        for (int i = 0; i < NV; i++) lt[i] = -INFINITY;
        for (int i = 0; i < NV; i++) {
            cum += pr[idx[i]];
            lt[idx[i]] = l[idx[i]];
            if (cum > 0.7) break;
        }
        softmax_ref(lt, NV, want);
        p = only("y");
        p.typical_p = 0.7f;
        s = kvi_sampler_create(&p, NV);
        kvi_sampler_probs(s, lg, got);
        for (int i = 0; i < NV; i++) bad_t += fabs(got[i] - want[i]) > 1e-5;
        kvi_sampler_free(s);
    }
    CHECK(bad_s == 0, "top-n-sigma: %d probabilities off the reference", bad_s);
    CHECK(bad_t == 0, "typical: %d probabilities off the reference", bad_t);
}

/* ---- XTC's coin ---- */

static void test_xtc_mixture(void)
{
    float lg[8] = { 3.0f, 2.8f, 2.5f, 1.0f, 0.5f, 0.0f, -1.0f, -2.0f };
    double l[8], fired[8], none[8];
    for (int i = 0; i < 8; i++) l[i] = lg[i];
    softmax_ref(l, 8, none);
    /* threshold 0.1: every token with p >= 0.1 but the last of them goes */
    int last = 0;
    while (last + 1 < 8 && none[last + 1] >= 0.1) last++;
    double lf[8];
    for (int i = 0; i < 8; i++) lf[i] = i < last ? -INFINITY : l[i];
    softmax_ref(lf, 8, fired);
    kvi_sampler_params p = only("x");
    p.xtc_probability = 0.5f;
    p.xtc_threshold = 0.1f;
    p.seed = 7;
    kvi_sampler *s = kvi_sampler_create(&p, 8);
    float got[8];
    kvi_sampler_probs(s, lg, got);
    double worst = 0.0;
    for (int i = 0; i < 8; i++) worst = fmax(worst, fabs(got[i] - (0.5 * fired[i] + 0.5 * none[i])));
    CHECK(last >= 1 && worst < 1e-6, "XTC probs: max |dp| %.3g from the mixture (%d removed)", worst, last);
    enum { N = 40000 };
    int counts[8] = { 0 };
    for (int i = 0; i < N; i++) counts[kvi_sampler_sample(s, lg)]++;
    int off = 0;
    for (int i = 0; i < 8; i++) {
        const double e = N * (0.5 * fired[i] + 0.5 * none[i]), sd = sqrt(e + 1.0);
        off += fabs(counts[i] - e) > 5.0 * sd;
    }
    CHECK(off == 0, "XTC draws: %d bins off the mixture", off);
    kvi_sampler_free(s);
}

/* ---- order and names ---- */

static void test_order(void)
{
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    const char *names[] = { "Top-K", "nucleus",     "foo",       "temp", "TYP",
                            "min_p", "top_n_sigma", "penalties", "dry",  "xtc" };
    int32_t unknown = -1;
    CHECK(kvi_sampler_order_parse(&p, names, 10, NULL, &unknown) == 0 && unknown == 1, "names: %d unknown",
          unknown);
    CHECK(!strcmp(p.samplers, "kptymsedx"), "names give \"%s\"", p.samplers);
    kvi_sampler *s = kvi_sampler_create(&p, 16);
    char buf[256];
    kvi_sampler_chain_names(s, buf, sizeof buf);
    CHECK(!strcmp(buf, "top-k top-p temp-ext ?typical min-p ?top-n-sigma ?penalties ?dry ?xtc dist"),
          "chain \"%s\"", buf);
    kvi_sampler_free(s);
    CHECK(kvi_sampler_order_parse(&p, names, 0, NULL, NULL) == 0 && !strcmp(p.samplers, "-"), "[] is \"-\"");
    s = kvi_sampler_create(&p, 16);
    kvi_sampler_chain_names(s, buf, sizeof buf);
    CHECK(!strcmp(buf, "dist"), "empty chain \"%s\"", buf);
    kvi_sampler_free(s);
    CHECK(kvi_sampler_order_parse(&p, NULL, 0, "mtkz", &unknown) == 0 && unknown == 1 &&
              !strcmp(p.samplers, "mtk"),
          "letters \"%s\"", p.samplers);
    CHECK(kvi_sampler_order_parse(&p, NULL, 0, "kkkkkkkkkkkkkkkkk", NULL) == KVI_E_INVALID,
          "17 samplers refused");
    kvi_sampler_params_default(&p);
    p.mirostat = 2;
    s = kvi_sampler_create(&p, 16);
    kvi_sampler_chain_names(s, buf, sizeof buf);
    CHECK(!strcmp(buf, "temp mirostat-v2"), "mirostat chain \"%s\"", buf);
    kvi_sampler_free(s);
    CHECK(kvi_sampler_params_stateful(&p), "mirostat is stateful");
    kvi_sampler_params_default(&p);
    CHECK(!kvi_sampler_params_stateful(&p), "defaults are not stateful");
    p.presence_penalty = 0.5f;
    CHECK(!kvi_sampler_params_stateful(&p), "penalties replay");
    p.dry_multiplier = 0.5f;
    CHECK(kvi_sampler_params_stateful(&p), "DRY is stateful");
}

int main(void)
{
    kvi_model *m = load_stories260k(NULL);
    if (m) {
        test_dry(m, 2);
        test_dry(m, 0);
        test_dry(m, 4);
    }
    test_top_n_sigma_typical();
    test_xtc_mixture();
    test_order();
    kvi_model_free(m);
    return test_main_end();
}
