/*
 * test_sampler_golden.c — the sampler chain against llama.cpp's
 * (../shared/golden/sampling: cases.json, expected.json, README.md), by the
 * README's comparison rules, for every case:
 *   - the chain: the same samplers (llama.cpp's names, "?" when switched off)
 *     in the same order;
 *   - the first draw's candidates (after the history is accepted): the same set
 *     of ids (finite logits) and |p - p_expected| <= 1e-5; where the array
 *     depends on XTC's coin, the set of the coin that fell in llama.cpp (one of
 *     "fired" / "not fired");
 *   - stateless cases: N_DRAWS draws tested against candidates.p (or
 *     draw_distribution) with a chi-square goodness-of-fit test (bins of
 *     expected count >= 5, the rest pooled), failing at p < 1e-4;
 *   - stateful cases: teacher forcing over the 200 steps (the expected draw
 *     accepted at each step): the number of finite candidates equals trace_n[i]
 *     and the probability of draws[i] is within 1e-5 of trace_p[i], the
 *     fragile_steps skipped;
 *   - DRY cases: the sequence breakers as token sequences of stories260K's
 *     vocabulary equal dry_breakers.
 * The request fields of a case are read by the server's reader
 * (srv_sampling_fields), as `kvinfer sampler` and the server read them.
 */
#include "testutil.h"

#include "kvinfer.h"
#include "sampling/sampler_int.h"
#include "server/server.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NV = 512, N_DRAWS = 20000, MAX_TAIL = 32 };

static int n_pass, n_fail_cases;

/* ---- chi-square survival function: Q(df / 2, x / 2), the regularized upper
 * incomplete gamma function (series below a + 1, continued fraction above) ---- */

static double gamma_q(double a, double x)
{
    if (x <= 0.0) return 1.0;
    const double lg = lgamma(a);
    if (x < a + 1.0) {
        double term = 1.0 / a, sum = term;
        for (int n = 1; n < 1000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - lg);
    }
    /* Lentz's method on the continued fraction of Gamma(a, x) */
    const double tiny = 1e-300;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        const double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

static double chi2_sf(double x, int df) { return df <= 0 ? 1.0 : gamma_q(0.5 * df, 0.5 * x); }

/* counts[id] of n draws against probabilities p[0 .. k) of ids[0 .. k):
 * the p-value; draws outside the ids make it 0. */
static double chi2_p(const int *counts, int n, const int32_t *ids, const double *p, int k)
{
    int in_set = 0;
    for (int i = 0; i < k; i++) in_set += counts[ids[i]];
    if (in_set != n) return 0.0;
    double chi = 0.0, pool_e = 0.0, pool_o = 0.0;
    int bins = 0;
    for (int i = 0; i < k; i++) {
        const double e = p[i] * n;
        if (e >= 5.0) {
            chi += (counts[ids[i]] - e) * (counts[ids[i]] - e) / e;
            bins++;
        } else {
            pool_e += e;
            pool_o += counts[ids[i]];
        }
    }
    if (pool_e > 0.0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    return chi2_sf(chi, bins - 1);
}

/* ---- one case ---- */

static kvi_sampler *make(const cJSON *params, const kvi_model *m, float xtc_prob_override, bool *ok)
{
    kvi_sampler_params sp;
    kvi_sampler_params_default(&sp);
    srv_dry_breakers dry;
    memset(&dry, 0, sizeof dry);
    srv_err er = { 0 };
    *ok = srv_sampling_fields(params, true, 4096, &sp, &dry, &er) == 0;
    CHECK(*ok, "params: %s", er.msg);
    if (xtc_prob_override >= 0.0f) sp.xtc_probability = xtc_prob_override;
    kvi_sampler *s = kvi_sampler_create(&sp, NV);
    CHECK(s != NULL, "create");
    if (s && sp.dry_multiplier != 0.0f) {
        kvi_error err = { 0 };
        const int rc = kvi_sampler_set_dry_breakers(s, m, dry.given ? dry.v : NULL, dry.n, &err);
        CHECK(rc == 0, "breakers: %s", err.msg);
    }
    return s;
}

static bool check_chain(const kvi_sampler *s, const cJSON *want, const char *name)
{
    char got[512], exp[512];
    size_t len = 0;
    exp[0] = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, want) len +=
        (size_t)snprintf(exp + len, sizeof exp - len, "%s%s", len ? " " : "", it->valuestring);
    kvi_sampler_chain_names(s, got, sizeof got);
    CHECK(strcmp(got, exp) == 0, "%s: chain \"%s\", want \"%s\"", name, got, exp);
    return strcmp(got, exp) == 0;
}

static bool check_breakers(const kvi_sampler *s, const cJSON *want, const char *name)
{
    int32_t n_want = 0;
    bool ok = true;
    const cJSON *head;
    cJSON_ArrayForEach(head, want)
    {
        const int32_t h = atoi(head->string);
        const cJSON *tail;
        cJSON_ArrayForEach(tail, head)
        {
            n_want++;
            int32_t wt[MAX_TAIL];
            const int32_t nw = json_token_ids(tail, wt, MAX_TAIL);
            bool found = false;
            const int32_t n = kvi_sampler_dry_breaker(s, -1, NULL, NULL, 0, NULL);
            for (int32_t i = 0; i < n && !found; i++) {
                int32_t gh, gt[MAX_TAIL], ng;
                kvi_sampler_dry_breaker(s, i, &gh, gt, MAX_TAIL, &ng);
                found = gh == h && ng == nw && !memcmp(gt, wt, (size_t)nw * sizeof *wt);
            }
            CHECK(found, "%s: breaker head %d with a tail of %d tokens missing", name, h, nw);
            ok = ok && found;
        }
    }
    const int32_t n = kvi_sampler_dry_breaker(s, -1, NULL, NULL, 0, NULL);
    CHECK(n == n_want, "%s: %d breakers, want %d", name, n, n_want);
    return ok && n == n_want;
}

/* The finite candidates after kvi_sampler_probs against want's ids and p. */
static bool candidates_match(kvi_sampler *s, const float *logits, const cJSON *want, bool report,
                             const char *name)
{
    float probs[NV];
    CHECK(kvi_sampler_probs(s, logits, probs) == 0, "probs");
    const cJSON *ids = cJSON_GetObjectItem(want, "ids"), *p = cJSON_GetObjectItem(want, "p");
    int32_t n_fin = 0;
    bool in_set[NV] = { false };
    for (int32_t i = 0; i < s->n_cand; i++)
        if (s->cand[i].logit > -INFINITY) in_set[s->cand[i].id] = true, n_fin++;
    const int k = cJSON_GetArraySize(ids);
    bool ok = n_fin == k;
    double worst = 0.0;
    for (int i = 0; i < k; i++) {
        const int id = cJSON_GetArrayItem(ids, i)->valueint;
        const double d = fabs(probs[id] - cJSON_GetArrayItem(p, i)->valuedouble);
        if (!in_set[id]) ok = false;
        if (d > worst) worst = d;
    }
    ok = ok && worst <= 1e-5;
    if (report) CHECK(ok, "%s: %d candidates, want %d; max |dp| %.3g", name, n_fin, k, worst);
    return ok;
}

static void stateless_draws(kvi_sampler *s, const float *logits, const cJSON *dist, const char *name)
{
    const cJSON *ids = cJSON_GetObjectItem(dist, "ids"), *p = cJSON_GetObjectItem(dist, "p");
    const int k = cJSON_GetArraySize(ids);
    int32_t *id = malloc((size_t)k * sizeof *id);
    double *pp = malloc((size_t)k * sizeof *pp);
    static int counts[NV];
    memset(counts, 0, sizeof counts);
    for (int i = 0; i < k; i++) {
        id[i] = cJSON_GetArrayItem(ids, i)->valueint;
        pp[i] = cJSON_GetArrayItem(p, i)->valuedouble;
    }
    for (int i = 0; i < N_DRAWS; i++) {
        const int32_t t = kvi_sampler_sample(s, logits);
        if (t >= 0 && t < NV) counts[t]++;
        kvi_sampler_accept_output(s, t);
    }
    const double pv = chi2_p(counts, N_DRAWS, id, pp, k);
    CHECK(pv >= 1e-4, "%s: chi-square p = %.3g over %d draws", name, pv, N_DRAWS);
    free(id);
    free(pp);
}

static void teacher_forcing(kvi_sampler *s, const float *logits, const cJSON *exp, const char *name)
{
    const cJSON *draws = cJSON_GetObjectItem(exp, "draws"), *tn = cJSON_GetObjectItem(exp, "trace_n"),
                *tp = cJSON_GetObjectItem(exp, "trace_p"),
                *fragile = cJSON_GetObjectItem(exp, "fragile_steps");
    const int n = cJSON_GetArraySize(draws);
    int bad_n = 0, bad_p = 0, first_bad = -1;
    double worst = 0.0;
    float probs[NV];
    for (int i = 0; i < n; i++) {
        bool skip = false;
        const cJSON *f;
        cJSON_ArrayForEach(f, fragile) skip = skip || f->valueint == i;
        const int32_t t = cJSON_GetArrayItem(draws, i)->valueint;
        kvi_sampler_probs(s, logits, probs);
        int32_t n_fin = 0;
        for (int32_t j = 0; j < s->n_cand; j++) n_fin += s->cand[j].logit > -INFINITY;
        const double d = fabs(probs[t] - cJSON_GetArrayItem(tp, i)->valuedouble);
        if (!skip) {
            if (n_fin != cJSON_GetArrayItem(tn, i)->valueint) bad_n++;
            if (d > 1e-5) bad_p++;
            if ((n_fin != cJSON_GetArrayItem(tn, i)->valueint || d > 1e-5) && first_bad < 0) first_bad = i;
            if (d > worst) worst = d;
        }
        kvi_sampler_accept_output(s, t);
    }
    CHECK(bad_n == 0 && bad_p == 0,
          "%s: trace: %d steps with another candidate count, %d with |dp| > 1e-5 "
          "(first at step %d; max |dp| %.3g)",
          name, bad_n, bad_p, first_bad, worst);
}

static void run_case(const cJSON *c, const cJSON *e, const kvi_model *m)
{
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    const int before = t_failed;
    const cJSON *params = cJSON_GetObjectItem(c, "params");
    float logits[NV];
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c, "logits")) == NV, "%s: logits", name);
    for (int i = 0; i < NV; i++)
        logits[i] = (float)cJSON_GetArrayItem(cJSON_GetObjectItem(c, "logits"), i)->valuedouble;
    const cJSON *hist = cJSON_GetObjectItem(c, "history");
    bool ok;
    kvi_sampler *s = make(params, m, -1.0f, &ok);
    if (!s || !ok) return;
    check_chain(s, cJSON_GetObjectItem(e, "chain"), name);
    const cJSON *brk = cJSON_GetObjectItem(e, "dry_breakers");
    if (brk) check_breakers(s, brk, name);
    const cJSON *it;
    cJSON_ArrayForEach(it, hist) kvi_sampler_accept(s, it->valueint);
    const cJSON *cand = cJSON_GetObjectItem(e, "candidates");
    if (cJSON_IsTrue(cJSON_GetObjectItem(e, "candidates_depend_on_rng"))) {
        /* the array of the coin that fell in llama.cpp: not fired, or fired */
        bool ok0, ok1;
        kvi_sampler *s0 = make(params, m, 0.0f, &ok0), *s1 = make(params, m, 1.0f, &ok1);
        cJSON_ArrayForEach(it, hist) kvi_sampler_accept(s0, it->valueint),
            kvi_sampler_accept(s1, it->valueint);
        const bool m0 = candidates_match(s0, logits, cand, false, name),
                   m1 = candidates_match(s1, logits, cand, false, name);
        CHECK(m0 || m1, "%s: the first candidates match neither XTC outcome", name);
        kvi_sampler_free(s0);
        kvi_sampler_free(s1);
    } else {
        candidates_match(s, logits, cand, true, name);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItem(e, "stateless"))) {
        const cJSON *dd = cJSON_GetObjectItem(e, "draw_distribution");
        stateless_draws(s, logits, dd ? dd : cand, name);
    } else {
        kvi_sampler_free(s);
        s = make(params, m, -1.0f, &ok);
        cJSON_ArrayForEach(it, hist) kvi_sampler_accept(s, it->valueint);
        teacher_forcing(s, logits, e, name);
    }
    kvi_sampler_free(s);
    if (t_failed == before)
        n_pass++;
    else
        n_fail_cases++;
}

int main(void)
{
    cJSON *cases = load_json(shared_path("golden/sampling/cases.json"));
    cJSON *exp = load_json(shared_path("golden/sampling/expected.json"));
    kvi_model *m = load_stories260k(NULL);
    CHECK(cases && exp && m, "goldens and stories260K");
    if (!cases || !exp || !m) return test_main_end();
    const cJSON *ecases = cJSON_GetObjectItem(exp, "cases");
    CHECK(cJSON_GetArraySize(cases) == 44 && cJSON_GetArraySize(ecases) == 44, "44 cases");
    CHECK(kvi_n_vocab(m) == NV && cJSON_GetObjectItem(exp, "n_vocab")->valueint == NV, "vocabulary of 512");
    for (int i = 0; i < cJSON_GetArraySize(cases); i++) {
        const cJSON *c = cJSON_GetArrayItem(cases, i), *e = cJSON_GetArrayItem(ecases, i);
        CHECK(
            !strcmp(cJSON_GetObjectItem(c, "name")->valuestring, cJSON_GetObjectItem(e, "name")->valuestring),
            "case %d: the files' orders differ", i);
        run_case(c, e, m);
    }
    printf("sampler goldens: %d of %d cases pass\n", n_pass, n_pass + n_fail_cases);
    kvi_model_free(m);
    cJSON_Delete(cases);
    cJSON_Delete(exp);
    return test_main_end();
}
