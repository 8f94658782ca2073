/*
 * test_speculative.c — speculative decoding is lossless.
 *
 *  1. Greedy identity: with temp 0, n-gram lookup and a draft model (the target
 *     itself, and a random-weight model of the same vocabulary that is almost
 *     always wrong) return exactly llama2.c's greedy continuation of the golden
 *     cases (../shared/golden/stories260K), at several K, adaptive or not.
 *  2. The target as its own draft accepts every draft, greedy and sampled (p == q
 *     bit for bit by batch invariance, so min(1, p/q) is 1).
 *  3. Distribution: the first token of a verified round follows the target's
 *     distribution computed here from its logits (softmax with temperature and
 *     top-p written independently of the sampler): Pearson chi-square; and the
 *     third generated token of speculative runs against plain sampling runs:
 *     two-sample chi-square. Each statistical check has a false-alarm rate of
 *     0.001 (critical value from the Wilson–Hilferty approximation, z = 3.0902);
 *     the seeds are fixed, so the outcome is reproducible.
 *     With the penalties on (counted over every accepted token), greedy
 *     speculative tokens equal plain decoding's.
 *  4. A draft model of another vocabulary is refused with a clear error; bad
 *     arguments are rejected.
 *  5. `kvinfer run --spec ngram / --draft`: llama2.c's greedy tokens and the
 *     spec_* statistics in --json.
 */
#include "kvinfer.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GEN 256
#define Z_P001 3.0902

static kvi_model *load(const char *path)
{
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(path, NULL, &err);
    CHECK(m != NULL, "load %s: %s", path, err.msg);
    return m;
}

static kvi_engine *engine_for(kvi_model *m, int n_ctx)
{
    const kvi_engine_params ep = engine_params(KVI_TYPE_F32, 1, 2, n_ctx);
    return engine_create_checked(m, &ep);
}

/* Speculative generation of n_gen tokens through the public API, exactly as the
 * header describes a round. The target holds the prompt minus its last token,
 * which is the newest token of the history. Returns tokens generated or -1. */
static int spec_generate(kvi_engine *e, kvi_seq *seq, int32_t cached, kvi_spec *sp, kvi_sampler *smp,
                         const int32_t *prompt, int32_t np, int32_t n_gen, int32_t *out)
{
    kvi_error err = { 0 };
    kvi_batch *b = kvi_batch_create(np + 300);
    if (!b) return -1;
    if (cached > np - 1) cached = np - 1;
    kvi_seq_truncate(seq, cached);
    for (int32_t i = cached; i + 1 < np; i++) kvi_batch_add(b, seq, prompt[i], i, false);
    int rc = kvi_batch_n_rows(b) > 0 ? kvi_step(e, b, &err) : 0;
    if (rc == 0) rc = kvi_spec_begin(sp, prompt, np, &err);
    for (int32_t i = 0; i < np; i++) kvi_sampler_accept(smp, prompt[i]);
    int32_t newest = prompt[np - 1], n = 0;
    int32_t drafts[64], got[65];
    const float *lg[65];
    while (rc == 0 && n < n_gen) {
        const int32_t L = kvi_seq_len(seq);
        int32_t k = kvi_spec_draft(sp, 16, drafts, &err);
        if (k < 0) {
            rc = k;
            break;
        }
        kvi_batch_clear(b);
        kvi_batch_add(b, seq, newest, L, true);
        for (int32_t i = 0; i < k; i++) kvi_batch_add(b, seq, drafts[i], L + 1 + i, true);
        if ((rc = kvi_step(e, b, &err)) != 0) break;
        for (int32_t i = 0; i <= k; i++) lg[i] = kvi_logits(e, i);
        int32_t m = kvi_spec_verify(sp, smp, lg, k, got, &err);
        if (m < 1 || m > k + 1) {
            rc = -1;
            break;
        }
        kvi_seq_truncate(seq, L + m);
        for (int32_t i = 0; i < m && n < n_gen; i++) out[n++] = got[i];
        newest = got[m - 1];
    }
    if (rc != 0) fprintf(stderr, "spec_generate: %d %s\n", rc, err.msg);
    kvi_batch_free(b);
    return rc == 0 ? n : -1;
}

/* Plain decoding: prefill (of what the cache does not hold yet), then one row
 * per step, kvi_sampler_sample each time. */
static int plain_generate(kvi_engine *e, kvi_seq *seq, int32_t cached, kvi_sampler *smp,
                          const int32_t *prompt, int32_t np, int32_t n_gen, int32_t *out)
{
    kvi_error err = { 0 };
    kvi_batch *b = kvi_batch_create(np + 1);
    if (!b) return -1;
    if (cached > np - 1) cached = np - 1;
    kvi_seq_truncate(seq, cached);
    for (int32_t i = cached; i < np; i++) kvi_batch_add(b, seq, prompt[i], i, i == np - 1);
    int rc = kvi_step(e, b, &err);
    for (int32_t i = 0; i < np; i++) kvi_sampler_accept(smp, prompt[i]);
    int32_t n = 0, row = kvi_batch_n_rows(b) - 1;
    while (rc == 0 && n < n_gen) {
        int32_t t = kvi_sampler_sample(smp, kvi_logits(e, row));
        row = 0;
        kvi_sampler_accept(smp, t);
        out[n++] = t;
        if (n == n_gen) break;
        kvi_batch_clear(b);
        kvi_batch_add(b, seq, t, np + n - 1, true);
        rc = kvi_step(e, b, &err);
    }
    kvi_batch_free(b);
    return rc == 0 ? n : -1;
}

static kvi_sampler_params greedy_params(void)
{
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    p.temp = 0.0f;
    return p;
}

/* Sampling parameters of the distribution tests: broad, with a top-p cut so the
 * target gives zero probability to tokens the draft may propose. */
static kvi_sampler_params sampled_params(uint64_t seed) { return sampler_params(1.0f, 0, 0.9f, 0.0f, seed); }

/* json_token_ids, the count cut to cap. */
static int32_t json_ids(const cJSON *a, int32_t *out, int32_t cap)
{
    const int32_t n = json_token_ids(a, out, cap);
    return n < cap ? n : cap;
}

/* ---- 1 and 2: greedy identity, self-draft acceptance ---- */

static void test_greedy(kvi_model *m, kvi_model *junk)
{
    kvi_engine *e = engine_for(m, 512), *de_self = engine_for(m, 512), *de_junk = engine_for(junk, 512);
    if (!e || !de_self || !de_junk) goto out;
    kvi_seq *seq = kvi_seq_create(e);
    kvi_sampler_params gp = greedy_params();
    for (int c = 1; c <= 4; c++) {
        char rel[64];
        snprintf(rel, sizeof rel, "golden/stories260K/case%d.json", c);
        cJSON *j = load_json(shared_path(rel));
        CHECK(j != NULL, "read %s", rel);
        if (!j) continue;
        int32_t prompt[64], want[MAX_GEN], got[MAX_GEN];
        int32_t np = json_ids(cJSON_GetObjectItem(j, "prompt_tokens"), prompt, 64);
        int32_t nw = json_ids(cJSON_GetObjectItem(j, "greedy_tokens"), want, 100);
        cJSON_Delete(j);
        struct {
            const char *name;
            kvi_engine *draft;
            int32_t k;
            bool adapt;
        } cfg[] = {
            { "ngram K=4", NULL, 4, true },
            { "ngram K=8 fixed", NULL, 8, false },
            { "self K=5", de_self, 5, false },
            { "junk K=3 fixed", de_junk, 3, false },
            { "junk K=8 adaptive", de_junk, 8, true },
        };
        for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
            if (c > 2 && cfg[i].draft != NULL) continue; /* keep the test fast */
            kvi_spec_params pp;
            kvi_spec_params_default(&pp);
            pp.draft_max = cfg[i].k;
            pp.ngram_max = 3;
            pp.adapt = cfg[i].adapt;
            kvi_error err = { 0 };
            kvi_spec *sp = kvi_spec_create(&pp, m, cfg[i].draft, &gp, &err);
            kvi_sampler *smp = kvi_sampler_create(&gp, kvi_n_vocab(m));
            CHECK(sp && smp, "create %s: %s", cfg[i].name, err.msg);
            if (!sp || !smp) {
                kvi_spec_free(sp);
                kvi_sampler_free(smp);
                continue;
            }
            int32_t n = spec_generate(e, seq, 0, sp, smp, prompt, np, nw, got);
            CHECK(n == nw, "case %d %s: generated %d of %d", c, cfg[i].name, (int)n, (int)nw);
            int32_t first_diff = -1;
            for (int32_t t = 0; t < n && t < nw; t++)
                if (got[t] != want[t]) {
                    first_diff = t;
                    break;
                }
            CHECK(first_diff < 0, "case %d %s: token %d is %d, llama2.c greedy says %d", c, cfg[i].name,
                  (int)first_diff, first_diff >= 0 ? (int)got[first_diff] : 0,
                  first_diff >= 0 ? (int)want[first_diff] : 0);
            kvi_spec_stats st;
            kvi_spec_stats_get(sp, &st);
            CHECK(st.n_accepted <= st.n_drafted, "%s: accepted > drafted", cfg[i].name);
            if (cfg[i].draft == de_self)
                CHECK(st.n_drafted > 0 && st.n_accepted == st.n_drafted,
                      "case %d self-draft greedy: accepted %llu of %llu", c,
                      (unsigned long long)st.n_accepted, (unsigned long long)st.n_drafted);
            if (cfg[i].draft == NULL && !cfg[i].adapt)
                CHECK(st.n_drafted > 0, "case %d %s: the stories repeat themselves, yet nothing was drafted",
                      c, cfg[i].name);
            kvi_spec_free(sp);
            kvi_sampler_free(smp);
        }
    }
    kvi_seq_free(seq);
out:
    kvi_engine_free(e);
    kvi_engine_free(de_self);
    kvi_engine_free(de_junk);
}

/* Penalties (llama.cpp's: counted over every accepted token, which
 * kvi_spec_verify records): greedy speculative decoding with n-gram drafts gives
 * exactly plain decoding's tokens, which differ from the unpenalised golden. */
static void test_penalties_greedy(kvi_model *m)
{
    kvi_engine *e = engine_for(m, 512);
    if (!e) return;
    kvi_seq *seq = kvi_seq_create(e);
    kvi_sampler_params gp = greedy_params();
    gp.repeat_penalty = 1.2f;
    gp.presence_penalty = 0.4f;
    gp.frequency_penalty = 0.2f;
    for (int c = 1; c <= 2; c++) {
        char rel[64];
        snprintf(rel, sizeof rel, "golden/stories260K/case%d.json", c);
        cJSON *j = load_json(shared_path(rel));
        if (!j) continue;
        int32_t prompt[64], golden[MAX_GEN], plain[MAX_GEN], spec[MAX_GEN];
        const int32_t np = json_ids(cJSON_GetObjectItem(j, "prompt_tokens"), prompt, 64);
        const int32_t nw = json_ids(cJSON_GetObjectItem(j, "greedy_tokens"), golden, 100);
        cJSON_Delete(j);
        kvi_spec_params pp;
        kvi_spec_params_default(&pp);
        pp.draft_max = 8;
        pp.adapt = false;
        kvi_error err = { 0 };
        kvi_spec *sp = kvi_spec_create(&pp, m, NULL, &gp, &err);
        kvi_sampler *a = kvi_sampler_create(&gp, kvi_n_vocab(m)),
                    *b = kvi_sampler_create(&gp, kvi_n_vocab(m));
        const int32_t n1 = plain_generate(e, seq, 0, a, prompt, np, nw, plain);
        const int32_t n2 = sp ? spec_generate(e, seq, 0, sp, b, prompt, np, nw, spec) : -1;
        CHECK(n1 == nw && n2 == nw && !memcmp(plain, spec, (size_t)nw * sizeof *plain),
              "case %d: penalised speculative tokens differ from plain decoding", c);
        CHECK(memcmp(plain, golden, (size_t)nw * sizeof *plain) != 0,
              "case %d: the penalties changed nothing", c);
        kvi_spec_stats st;
        kvi_spec_stats_get(sp, &st);
        CHECK(st.n_drafted > 0, "case %d: nothing drafted", c);
        kvi_spec_free(sp);
        kvi_sampler_free(a);
        kvi_sampler_free(b);
    }
    kvi_seq_free(seq);
    kvi_engine_free(e);
}

static void test_self_draft_sampled(kvi_model *m)
{
    kvi_engine *e = engine_for(m, 512), *de = engine_for(m, 512);
    if (!e || !de) goto out;
    kvi_seq *seq = kvi_seq_create(e);
    const int32_t prompt[] = { 1, 403, 407, 261, 378 };
    kvi_sampler_params sp = sampled_params(11);
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.draft_max = 6;
    pp.adapt = false;
    kvi_spec *s = kvi_spec_create(&pp, m, de, &sp, NULL);
    kvi_sampler *smp = kvi_sampler_create(&sp, kvi_n_vocab(m));
    int32_t got[MAX_GEN];
    int32_t n = s && smp ? spec_generate(e, seq, 0, s, smp, prompt, 5, 150, got) : -1;
    CHECK(n == 150, "self-draft sampled: generated %d", (int)n);
    kvi_spec_stats st;
    kvi_spec_stats_get(s, &st);
    CHECK(st.n_drafted > 100 && st.n_accepted == st.n_drafted && st.acceptance == 1.0,
          "self-draft sampled: accepted %llu of %llu (p == q must always accept)",
          (unsigned long long)st.n_accepted, (unsigned long long)st.n_drafted);
    kvi_spec_free(s);
    kvi_sampler_free(smp);
    kvi_seq_free(seq);
out:
    kvi_engine_free(e);
    kvi_engine_free(de);
}

/* ---- 3: distributions ---- */

/* Chi-square quantile at false-alarm 0.001 (Wilson–Hilferty). */
static double chi2_crit(int df)
{
    double a = 2.0 / (9.0 * df);
    double x = 1.0 - a + Z_P001 * sqrt(a);
    return df * x * x * x;
}

/* Target distribution written here, in the sampler's documented order: the
 * smallest set of most likely tokens whose softmax(logits) mass reaches top_p,
 * then softmax(logits / T) over that set. */
static void ref_dist(const float *logits, int nv, double temp, double top_p, double *out)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < nv; i++) mx = fmax(mx, logits[i]);
    for (int i = 0; i < nv; i++) sum += out[i] = exp(logits[i] - mx);
    int *idx = malloc((size_t)nv * sizeof *idx);
    for (int i = 0; i < nv; i++) idx[i] = i;
    for (int i = 1; i < nv; i++) { /* insertion sort, descending */
        int v = idx[i], j = i - 1;
        while (j >= 0 && logits[idx[j]] < logits[v]) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
    double cum = 0.0, kept = 0.0;
    int n_keep = nv;
    for (int i = 0; i < nv; i++) {
        cum += out[idx[i]] / sum;
        if (cum >= top_p) {
            n_keep = i + 1;
            break;
        }
    }
    for (int i = 0; i < nv; i++) out[i] = 0.0;
    for (int i = 0; i < n_keep; i++) kept += out[idx[i]] = exp((logits[idx[i]] - mx) / temp);
    for (int i = 0; i < n_keep; i++) out[idx[i]] /= kept;
    free(idx);
}

/* Pearson chi-square of counts against probabilities; categories with expected
 * count < 5 are pooled. Returns the statistic, *df its degrees of freedom. */
static double chi2_one(const long *cnt, const double *prob, int nv, long n, int *df)
{
    double x2 = 0.0, pe = 0.0, po = 0.0;
    int cats = 0;
    for (int i = 0; i < nv; i++) {
        double e = prob[i] * (double)n;
        if (e < 5.0) {
            pe += e;
            po += (double)cnt[i];
            continue;
        }
        x2 += (cnt[i] - e) * (cnt[i] - e) / e;
        cats++;
    }
    if (pe >= 5.0) {
        x2 += (po - pe) * (po - pe) / pe;
        cats++;
    } else if (po > 0.0) {
        x2 += 1e9; /* tokens observed where the target gives (almost) no mass */
    }
    *df = cats - 1;
    return x2;
}

/* Two-sample chi-square for equal sample sizes: sum (a - b)^2 / (a + b) over
 * categories, those with a + b < 10 pooled. */
static double chi2_two(const long *a, const long *b, int nv, int *df)
{
    double x2 = 0.0, pa = 0.0, pb = 0.0;
    int cats = 0;
    for (int i = 0; i < nv; i++) {
        double s = (double)(a[i] + b[i]);
        if (s < 10.0) {
            pa += a[i];
            pb += b[i];
            continue;
        }
        x2 += (a[i] - b[i]) * (double)(a[i] - b[i]) / s;
        cats++;
    }
    if (pa + pb > 0.0) {
        x2 += (pa - pb) * (pa - pb) / (pa + pb);
        cats++;
    }
    *df = cats - 1;
    return x2;
}

static void test_distribution(kvi_model *m, kvi_model *junk, const char *label, bool use_draft, long trials)
{
    const int nv = kvi_n_vocab(m);
    kvi_engine *e = engine_for(m, 128), *de = use_draft ? engine_for(junk, 128) : NULL;
    if (!e || (use_draft && !de)) goto out;
    kvi_seq *seq = kvi_seq_create(e);
    /* "Once upon a time, ... One day, she saw a": the next tokens are uncertain, and
     * " a" occurred before, so n-gram lookup always has a proposal */
    const int32_t prompt[] = { 1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421,
                               395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411,
                               322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261 };
    const int32_t np = (int32_t)(sizeof prompt / sizeof prompt[0]);
    long *first = calloc((size_t)nv, sizeof *first), *third_s = calloc((size_t)nv, sizeof *third_s),
         *third_p = calloc((size_t)nv, sizeof *third_p);
    double *ref = malloc((size_t)nv * sizeof *ref);
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.draft_max = 3;
    pp.adapt = false;
    kvi_sampler_params base = sampled_params(1);
    kvi_spec *sp = kvi_spec_create(&pp, m, de, &base, NULL);
    CHECK(sp != NULL, "%s: create", label);
    if (!sp || !first || !third_s || !third_p || !ref) goto done;

    /* the reference distribution of the first token: logits after the prompt */
    {
        kvi_batch *b = kvi_batch_create(np);
        for (int32_t i = 0; i < np; i++) kvi_batch_add(b, seq, prompt[i], i, i == np - 1);
        CHECK(kvi_step(e, b, NULL) == 0, "%s: prefill", label);
        ref_dist(kvi_logits(e, np - 1), nv, base.temp, base.top_p, ref);
        kvi_batch_free(b);
    }
    uint64_t drafted = 0, accepted = 0;
    for (long t = 0; t < trials; t++) {
        int32_t got[8];
        kvi_sampler_params a = sampled_params(1000 + (uint64_t)t), b = sampled_params(900000 + (uint64_t)t);
        kvi_sampler *sa = kvi_sampler_create(&a, nv), *sb = kvi_sampler_create(&b, nv);
        int32_t n1 = spec_generate(e, seq, np - 1, sp, sa, prompt, np, 3, got);
        kvi_spec_stats one;
        kvi_spec_stats_get(sp, &one);
        drafted += one.n_drafted;
        accepted += one.n_accepted;
        if (n1 == 3) {
            first[got[0]]++;
            third_s[got[2]]++;
        }
        int32_t n2 = plain_generate(e, seq, np - 1, sb, prompt, np, 3, got);
        if (n2 == 3) third_p[got[2]]++;
        if (n1 != 3 || n2 != 3) {
            CHECK(false, "%s: trial %ld generated %d / %d", label, t, (int)n1, (int)n2);
            kvi_sampler_free(sa);
            kvi_sampler_free(sb);
            break;
        }
        kvi_sampler_free(sa);
        kvi_sampler_free(sb);
    }
    CHECK(drafted >= (uint64_t)trials, "%s: only %llu drafts in %ld trials", label,
          (unsigned long long)drafted, trials);
    CHECK(accepted > 0 && accepted < drafted, "%s: accepted %llu of %llu: both paths must run", label,
          (unsigned long long)accepted, (unsigned long long)drafted);
    int df1 = 0, df2 = 0;
    double x1 = chi2_one(first, ref, nv, trials, &df1);
    double x2 = chi2_two(third_s, third_p, nv, &df2);
    fprintf(stderr,
            "%s: acceptance %.3f; first token chi2 %.1f (df %d, crit %.1f); third token chi2 %.1f "
            "(df %d, crit %.1f)\n",
            label, drafted ? (double)accepted / (double)drafted : 0.0, x1, df1, chi2_crit(df1), x2, df2,
            chi2_crit(df2));
    CHECK(df1 >= 2 && x1 < chi2_crit(df1), "%s: first token chi2 %.1f >= %.1f (df %d)", label, x1,
          chi2_crit(df1), df1);
    CHECK(df2 >= 2 && x2 < chi2_crit(df2), "%s: third token chi2 %.1f >= %.1f (df %d)", label, x2,
          chi2_crit(df2), df2);
done:
    kvi_spec_free(sp);
    free(first);
    free(third_s);
    free(third_p);
    free(ref);
    kvi_seq_free(seq);
out:
    kvi_engine_free(e);
    kvi_engine_free(de);
}

/* ---- 4: refusals ---- */

static void test_refusals(kvi_model *m)
{
    kvi_model *other = load(shared_path("models/aidreams260K/aidreams260K.bin"));
    kvi_model *big = load(shared_path("models/TinyStories-656K"));
    kvi_error err = { 0 };
    if (other) {
        int rc = kvi_spec_check_vocab(m, other, &err);
        CHECK(rc == KVI_E_INVALID && strstr(err.msg, "differ"), "other vocabulary: rc %d '%s'", rc, err.msg);
        kvi_engine *de = engine_for(other, 128);
        memset(&err, 0, sizeof err);
        kvi_spec *s = de ? kvi_spec_create(NULL, m, de, NULL, &err) : NULL;
        CHECK(s == NULL && err.code == KVI_E_INVALID, "a draft of another vocabulary is refused: '%s'",
              err.msg);
        kvi_spec_free(s);
        kvi_engine_free(de);
    }
    if (big) {
        memset(&err, 0, sizeof err);
        int rc = kvi_spec_check_vocab(m, big, &err);
        CHECK(rc == KVI_E_INVALID && strstr(err.msg, "2048") && strstr(err.msg, "512"), "vocab size: '%s'",
              err.msg);
    }
    CHECK(kvi_spec_check_vocab(m, m, NULL) == 0, "a vocabulary matches itself");
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.draft_max = 0;
    memset(&err, 0, sizeof err);
    CHECK(kvi_spec_create(&pp, m, NULL, NULL, &err) == NULL && err.code == KVI_E_INVALID, "draft_max 0");
    kvi_spec_params_default(&pp);
    kvi_spec *s = kvi_spec_create(&pp, m, NULL, NULL, NULL);
    int32_t d[8], out[9];
    const float *lg[1] = { NULL };
    CHECK(kvi_spec_draft(s, 4, d, NULL) < 0, "draft before begin");
    const int32_t bad[] = { 1, 99999 };
    CHECK(kvi_spec_begin(s, bad, 2, NULL) == KVI_E_INVALID, "prompt token outside the vocabulary");
    const int32_t ok[] = { 1, 403, 403, 403 };
    CHECK(kvi_spec_begin(s, ok, 4, NULL) == 0, "begin");
    CHECK(kvi_spec_verify(s, NULL, lg, 0, out, NULL) < 0, "verify without a sampler");
    kvi_sampler *smp = kvi_sampler_create(NULL, kvi_n_vocab(m));
    CHECK(kvi_spec_verify(s, smp, lg, 3, out, NULL) < 0, "verify more drafts than proposed");
    CHECK(kvi_spec_verify(s, smp, lg, 0, out, NULL) < 0, "verify without logits");
    int32_t k = kvi_spec_draft(s, 4, d, NULL);
    CHECK(k == 4 && d[0] == 403 && d[3] == 403, "n-gram proposes the repeated token: k %d d0 %d", (int)k,
          (int)d[0]);
    kvi_sampler_free(smp);
    kvi_spec_free(s);
    kvi_model_free(other);
    kvi_model_free(big);
}

/* kvi_sampler_probs is the distribution kvi_sampler_sample draws from: compare
 * with the reference written here. */
static void test_sampler_probs(void)
{
    const int nv = 40;
    float logits[40], probs[40];
    double ref[40];
    uint64_t st = 77;
    for (int i = 0; i < nv; i++) logits[i] = 3.0f * trand_normal(&st);
    kvi_sampler_params p = sampled_params(5);
    p.temp = 0.7f;
    kvi_sampler *s = kvi_sampler_create(&p, nv);
    kvi_sampler_probs(s, logits, probs);
    ref_dist(logits, nv, 0.7, 0.9, ref);
    double maxerr = 0.0;
    for (int i = 0; i < nv; i++) maxerr = fmax(maxerr, fabs(probs[i] - ref[i]));
    CHECK(maxerr < 1e-5, "kvi_sampler_probs vs reference: max error %g", maxerr);
    kvi_sampler_free(s);
    p.temp = 0.0f;
    s = kvi_sampler_create(&p, nv);
    kvi_sampler_probs(s, logits, probs);
    int am = 0;
    for (int i = 1; i < nv; i++)
        if (logits[i] > logits[am]) am = i;
    CHECK(probs[am] == 1.0f, "greedy probs one-hot at the argmax");
    float w[40] = { 0 };
    w[7] = 2.0f;
    w[9] = 2.0f;
    CHECK(kvi_sampler_sample_probs(s, w) == 7, "greedy sample_probs: lowest id of the ties");
    memset(w, 0, sizeof w);
    CHECK(kvi_sampler_sample_probs(s, w) == 0, "greedy on all-zero weights gives argmax 0");
    kvi_sampler_free(s);
    p.temp = 1.0f;
    s = kvi_sampler_create(&p, nv);
    CHECK(kvi_sampler_sample_probs(s, w) == KVI_E_INVALID, "no positive weight");
    w[3] = 1.0f;
    CHECK(kvi_sampler_sample_probs(s, w) == 3, "single weight");
    kvi_sampler_free(s);
}

/* ---- 5: the CLI: same tokens as llama2.c, spec_* stats, a refused draft ---- */

static void test_cli(void)
{
    cJSON *g = load_json(shared_path("golden/stories260K/case1.json"));
    int32_t want[64];
    int32_t nw = g ? json_ids(cJSON_GetObjectItem(g, "greedy_tokens"), want, 60) : 0;
    cJSON_Delete(g);
    const char *modes[] = { "--spec ngram --draft-max 4", "--spec ngram --no-spec-adapt --ngram 2",
                            "--draft %s --draft-max 3" };
    for (int i = 0; i < 3; i++) {
        char mode[512], args[1024];
        snprintf(mode, sizeof mode, modes[i], shared_path("models/stories260K.gguf"));
        snprintf(args, sizeof args,
                 "run -m %s --tokens 1,403,407,261,378 -n 60 --temp 0 --ignore-eos -t 1 --json %s",
                 shared_path("models/stories260K.gguf"), mode);
        char *out = NULL, *err = NULL;
        int rc = run_kvinfer(args, &out, &err);
        cJSON *j = out ? cJSON_Parse(out) : NULL;
        CHECK(rc == 0 && j, "kvinfer %s: rc %d, stderr %s", args, rc, err ? err : "");
        if (j) {
            int32_t got[64];
            int32_t n = json_ids(cJSON_GetObjectItem(j, "tokens"), got, 60);
            CHECK(n == nw && memcmp(got, want, (size_t)n * sizeof *got) == 0,
                  "%s: tokens differ from llama2.c's", mode);
            const cJSON *st = cJSON_GetObjectItem(j, "stats");
            const cJSON *dr = cJSON_GetObjectItem(st, "spec_drafted"),
                        *ac = cJSON_GetObjectItem(st, "spec_accepted"),
                        *ar = cJSON_GetObjectItem(st, "spec_acceptance");
            CHECK(cJSON_IsNumber(dr) && cJSON_IsNumber(ac) && cJSON_IsNumber(ar), "%s: spec_* stats missing",
                  mode);
            if (cJSON_IsNumber(dr) && cJSON_IsNumber(ac) && cJSON_IsNumber(ar))
                CHECK(dr->valuedouble > 0 ? fabs(ar->valuedouble - ac->valuedouble / dr->valuedouble) < 1e-9
                                          : ar->valuedouble == 0.0,
                      "%s: spec_acceptance is not accepted / drafted", mode);
            if (i == 2)
                CHECK(cJSON_IsNumber(ac) && ac->valuedouble == dr->valuedouble && dr->valuedouble > 0,
                      "the model as its own draft accepts everything");
        }
        cJSON_Delete(j);
        free(out);
        free(err);
    }
    char args[1024];
    snprintf(args, sizeof args, "run -m %s -p Once -n 4 --draft %s", shared_path("models/stories260K.gguf"),
             shared_path("models/aidreams260K/aidreams260K.bin"));
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 1 && err && strstr(err, "vocabularies differ"), "other-vocabulary draft refused: rc %d '%s'",
          rc, err ? err : "");
    free(out);
    free(err);
}

int main(void)
{
    kvi_model *m = load(shared_path("models/stories260K.gguf"));
    if (!m) return test_main_end();
    /* a draft of the same vocabulary but random weights: wrong almost always */
    kvi_synth_params sp;
    kvi_synth_preset("tiny", &sp);
    sp.type = KVI_TYPE_F32;
    sp.seed = 7;
    sp.n_layers = 2;
    sp.vocab_from = shared_path("models/stories260K.gguf");
    kvi_error err = { 0 };
    const char *junk_path = tmp_path("spec_junk_draft.gguf");
    CHECK(kvi_synth_write(&sp, junk_path, &err) == 0, "synth draft: %s", err.msg);
    kvi_model *junk = load(junk_path);
    if (junk) {
        double t0 = kvi_time_ms();
        test_sampler_probs();
        test_greedy(m, junk);
        test_penalties_greedy(m);
        double t1 = kvi_time_ms();
        test_self_draft_sampled(m);
        double t2 = kvi_time_ms();
        test_distribution(m, junk, "ngram", false, 2000);
        double t3 = kvi_time_ms();
        test_distribution(m, junk, "draft model", true, 2000);
        double t4 = kvi_time_ms();
        test_refusals(m);
        test_cli();
        fprintf(stderr,
                "times (ms): greedy %.0f, self-draft %.0f, ngram distribution %.0f, draft distribution "
                "%.0f, refusals %.0f\n",
                t1 - t0, t2 - t1, t3 - t2, t4 - t3, kvi_time_ms() - t4);
    }
    kvi_model_free(junk);
    kvi_model_free(m);
    return test_main_end();
}
