/*
 * sampler.c — picking the next token from a row of logits: the chain driver.
 *
 * The chain is llama.cpp's (common_sampler_init, see sampler_order.c): the
 * samplers of kvi_sampler_params.samplers in that order over an array of
 * candidates (sampler_int.h), then one draw from the softmax of what is left;
 * or, with mirostat, temperature then mirostat. The samplers live in
 * sampler_filters.c (stateless), sampler_repeat.c (penalties, DRY) and
 * sampler_order.c (mirostat). A kvi_sampler owns, sized once at create:
 *   cand, tmp (n_vocab) smp_cand — the working array and scratch
 *   seen (n_vocab) uint32_t — penalty stamps
 *   hist, counts, DRY scratch — sampler_repeat.c
 * and a xoshiro256** generator (base/rng.h). Optional, set after create:
 *   gm     kvi_grammar_matcher — owned; the tokens it disallows are -inf
 *   mask   ((n_vocab + 31) / 32) uint32_t — its mask for this draw
 *   bias_ids / bias_vals (n_bias) — OpenAI logit_bias, added to raw logits
 *   work   (n_vocab) float    — the caller's logits with bias and mask applied
 *                               (only when a bias or a grammar is set)
 *   brk    DRY's sequence breakers (kvi_sampler_set_dry_breakers)
 *
 * Invariants:
 *   - kvi_sampler_sample() never allocates and never modifies the caller's logits;
 *   - temp <= 0 (dynamic temperature off) is greedy. When no sampler of the chain
 *     can move the argmax (only top-k, top-p, min-p, top-n-sigma and the
 *     temperature are on, and no mirostat), it is pure argmax over the row (lowest
 *     id on ties) and the generator is not advanced; otherwise penalties, DRY,
 *     typical or XTC act first, as in llama.cpp. temp 0 with dynatemp_range > 0
 *     is not greedy;
 *   - the penalties and DRY count the accepted tokens, the prompt's included
 *     (llama.cpp's semantics; kvi_sampler_accept and _accept_output alike);
 *   - every filter keeps at least one candidate; NaN logits count as -inf; a row
 *     with no finite logit yields its first id rather than a NaN probability;
 *   - the same seed and the same sequence of calls give the same tokens;
 *   - when the first sampler that acts is top-k, top-k reads the logits directly
 *     (top_k_direct: no copy of the row into cand); it gives the same k
 *     candidates in the same order as the reference chain (every logit copied
 *     into cand, then top_k_cands), which sampler_set_reference() forces and
 *     tests/test_sampler_fast.c compares it with;
 *   - kvi_sampler_probs() returns exactly the distribution kvi_sampler_sample()
 *     draws from (one chain, chain_run(), serves both; one-hot when the outcome
 *     is certain; with XTC's coin (0 < probability < 1) the mixture of the chain
 *     where it fires and the one where it does not), and kvi_sampler_sample_probs()
 *     draws from any non-negative weights with the same generator (argmax when
 *     temp <= 0): speculative decoding needs both to stay lossless.
 */
#include "kvinfer.h"
#include "base/prof.h"
#include "base/rng.h"
#include "sampling/sampler_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The default seed, printed by the CLI's help. */
#define KVI_SAMPLER_DEFAULT_SEED 0xC0FFEEull

void sampler_set_reference(kvi_sampler *s, bool on)
{
    if (s) s->reference = on;
}

/* ---- parameters and lifetime ---- */

void kvi_sampler_params_default(kvi_sampler_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = KVI_SAMPLER_DEFAULT_SEED;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->typical_p = 1.0f;
    p->top_n_sigma = -1.0f;
    p->xtc_probability = 0.0f;
    p->xtc_threshold = 0.1f;
    p->dynatemp_range = 0.0f;
    p->dynatemp_exponent = 1.0f;
    p->min_keep = 0;
    p->mirostat = 0;
    p->mirostat_tau = 5.0f;
    p->mirostat_eta = 0.1f;
    p->dry_multiplier = 0.0f;
    p->dry_base = 1.75f;
    p->dry_allowed_length = 2;
    p->dry_penalty_last_n = 64;
}

/* x when finite, else off. */
static float finite_or(float x, float off) { return isfinite(x) ? x : off; }

/* Out-of-range parameters become their "off" value rather than undefined behaviour. */
static void params_sanitize(kvi_sampler_params *p)
{
    if (!(p->temp == p->temp)) p->temp = 0.0f;
    if (p->top_k < 0) p->top_k = 0;
    if (!(p->top_p > 0.0f) || p->top_p > 1.0f) p->top_p = 1.0f;
    if (!(p->min_p > 0.0f)) p->min_p = 0.0f;
    if (p->min_p > 1.0f) p->min_p = 1.0f;
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty)) p->repeat_penalty = 1.0f;
    if (p->repeat_last_n < 0) p->repeat_last_n = 0;
    p->presence_penalty = finite_or(p->presence_penalty, 0.0f);
    p->frequency_penalty = finite_or(p->frequency_penalty, 0.0f);
    if (!(p->typical_p > 0.0f) || p->typical_p > 1.0f) p->typical_p = 1.0f;
    p->top_n_sigma = finite_or(p->top_n_sigma, -1.0f);
    p->xtc_probability = finite_or(p->xtc_probability, 0.0f);
    if (!(p->xtc_threshold == p->xtc_threshold)) p->xtc_threshold = 1.0f;
    p->dynatemp_range = finite_or(p->dynatemp_range, 0.0f);
    p->dynatemp_exponent = finite_or(p->dynatemp_exponent, 1.0f);
    if (p->min_keep < 0) p->min_keep = 0;
    if (p->mirostat != 1 && p->mirostat != 2) p->mirostat = 0;
    p->mirostat_tau = finite_or(p->mirostat_tau, 5.0f);
    p->mirostat_eta = finite_or(p->mirostat_eta, 0.1f);
    p->dry_multiplier = finite_or(p->dry_multiplier, 0.0f);
    if (!(p->dry_base >= 1.0f) || !isfinite(p->dry_base)) p->dry_base = 1.75f;
    if (p->dry_allowed_length < 0) p->dry_allowed_length = 0;
    if (p->dry_penalty_last_n < 0) p->dry_penalty_last_n = 0;
    p->samplers[KVI_SAMPLERS_MAX] = 0;
    if (p->mirostat) { /* llama.cpp ignores them: they must not cost memory either */
        p->repeat_last_n = 0;
        p->dry_multiplier = 0.0f;
    }
}

kvi_sampler *kvi_sampler_create(const kvi_sampler_params *p, int32_t n_vocab)
{
    if (n_vocab <= 0) return NULL;
    kvi_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (p)
        s->p = *p;
    else
        kvi_sampler_params_default(&s->p);
    params_sanitize(&s->p);
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
    s->seen = calloc((size_t)n_vocab, sizeof *s->seen);
    if (!s->cand || !s->tmp || !s->seen || repeat_alloc(s) != 0) {
        kvi_sampler_free(s);
        return NULL;
    }
    chain_build(s);
    s->mu = 2.0f * s->p.mirostat_tau;
    rng_seed(&s->rng, s->p.seed);
    return s;
}

void kvi_sampler_free(kvi_sampler *s)
{
    if (!s) return;
    free(s->cand);
    free(s->tmp);
    free(s->seen);
    repeat_free(s);
    kvi_grammar_matcher_free(s->gm);
    free(s->mask);
    free(s->bias_ids);
    free(s->bias_vals);
    free(s->work);
    free(s);
}

void kvi_sampler_accept(kvi_sampler *s, int32_t token)
{
    if (!s || token < 0 || token >= s->n_vocab) return;
    hist_push(s, token);
}

void kvi_sampler_accept_output(kvi_sampler *s, int32_t token)
{
    if (!s || token < 0 || token >= s->n_vocab) return;
    kvi_sampler_accept(s, token);
    /* a token the mask allowed is always accepted; anything else leaves the state */
    if (s->gm) (void)kvi_grammar_matcher_accept_token(s->gm, token);
    mirostat_update(s, token);
}

bool kvi_sampler_params_stateful(const kvi_sampler_params *p)
{
    if (!p) return false;
    if (p->mirostat == 1 || p->mirostat == 2) return true;
    return dry_on(p) || (p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f);
}

/* ---- the chain ---- */

static int32_t argmax_raw(const float *logits, int32_t n)
{
    int32_t best = 0;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (v > bv) { /* strict: the lowest id wins ties; NaN never wins */
            bv = v;
            best = i;
        }
    }
    return best;
}

/* Whether sampler k acts on this call (on, and with something to act on). */
static bool entry_acts(const kvi_sampler *s, smp_kind k)
{
    if (k == SMP_PENALTIES) return penalties_active(s);
    if (k == SMP_DRY) return dry_active(s);
    return chain_entry_on(s, k);
}

/* temp <= 0 where nothing in the chain can move the argmax. */
static bool greedy_fast(const kvi_sampler *s)
{
    if (s->p.mirostat || !(s->p.temp <= 0.0f) || s->p.dynatemp_range > 0.0f) return false;
    bool has_temp = false;
    for (int i = 0; i + 1 < s->n_chain; i++) {
        const smp_kind k = (smp_kind)s->chain[i];
        if (k == SMP_TEMP_EXT) has_temp = true;
        if (!entry_acts(s, k)) continue;
        if (k != SMP_TOP_K && k != SMP_TOP_P && k != SMP_MIN_P && k != SMP_TOP_N_SIGMA && k != SMP_TEMP_EXT)
            return false;
    }
    return has_temp;
}

static void apply_entry(kvi_sampler *s, smp_kind k, smp_xtc_mode xm)
{
    const kvi_sampler_params *p = &s->p;
    switch (k) {
    case SMP_PENALTIES: penalties_cands(s); break;
    case SMP_DRY: dry_cands(s); break;
    case SMP_TOP_N_SIGMA: top_n_sigma_cands(s, p->top_n_sigma); break;
    case SMP_TOP_K: top_k_cands(s, p->top_k); break;
    case SMP_TYPICAL: typical_cands(s, p->typical_p, p->min_keep); break;
    case SMP_TOP_P: top_p_cands(s, p->top_p, p->min_keep); break;
    case SMP_MIN_P: min_p_cands(s, p->min_p, p->min_keep); break;
    case SMP_XTC: xtc_cands(s, xm); break;
    case SMP_TEMP_EXT: temp_ext_cands(s); break;
    case SMP_TEMP: temp_cands(s, p->temp); break;
    case SMP_MIROSTAT: mirostat_cands(s); break;
    case SMP_MIROSTAT_V2: mirostat_v2_cands(s); break;
    default: softmax_cands(s, false); break;
    }
}

/* Runs the chain on a row: cand[0 .. n_cand) with p the distribution to draw
 * from. Returns the token when the outcome is certain (one candidate with a
 * finite logit, or none: the first), else -1. */
static int32_t chain_run(kvi_sampler *s, const float *logits, smp_xtc_mode xm)
{
    const int32_t nv = s->n_vocab;
    s->mu_ready = false;
    if (greedy_fast(s)) {
        const int32_t t = argmax_raw(logits, nv);
        s->cand[0] = (smp_cand){ t, logits[t], 1.0f };
        s->n_cand = 1;
        return t;
    }
    int first = 0; /* the first entry that acts */
    while (first < s->n_chain - 1 && !entry_acts(s, (smp_kind)s->chain[first])) first++;
    if (!s->reference && s->chain[first] == SMP_TOP_K && s->p.top_k < nv) {
        top_k_direct(s, logits, s->p.top_k);
        first++;
    } else {
        for (int32_t i = 0; i < nv; i++) {
            const float v = logits[i];
            s->cand[i] = (smp_cand){ i, (v == v) ? v : -INFINITY, 0.0f };
        }
        s->n_cand = nv;
        s->sorted = false;
        s->ident = true;
    }
    for (int i = first; i < s->n_chain; i++) apply_entry(s, (smp_kind)s->chain[i], xm);
    int32_t n_fin = 0, fin = -1;
    for (int32_t i = 0; i < s->n_cand && n_fin < 2; i++)
        if (s->cand[i].logit > -INFINITY) n_fin++, fin = i;
    if (n_fin == 0) return argmax_raw(logits, nv);
    return n_fin == 1 ? s->cand[fin].id : -1;
}

/* XTC's coin can fall either way on this sampler's draws. */
static bool xtc_coin(const kvi_sampler *s)
{
    if (s->p.xtc_probability >= 1.0f) return false;
    for (int i = 0; i < s->n_chain; i++)
        if (s->chain[i] == SMP_XTC && chain_entry_on(s, SMP_XTC)) return true;
    return false;
}

/* ---- logit bias and grammar ---- */

int kvi_sampler_set_logit_bias(kvi_sampler *s, const int32_t *ids, const float *bias, int32_t n)
{
    if (!s || n < 0 || (n > 0 && (!ids || !bias))) return KVI_E_INVALID;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->n_vocab ||
            !((bias[i] >= -100.0f && bias[i] <= 100.0f) || bias[i] == -INFINITY))
            return KVI_E_INVALID;
    int32_t *ni = n ? malloc((size_t)n * sizeof *ni) : NULL;
    float *nb = n ? malloc((size_t)n * sizeof *nb) : NULL;
    if (n && (!ni || !nb || (!s->work && !(s->work = malloc((size_t)s->n_vocab * sizeof *s->work))))) {
        free(ni);
        free(nb);
        return KVI_E_NOMEM;
    }
    if (n) {
        memcpy(ni, ids, (size_t)n * sizeof *ni);
        memcpy(nb, bias, (size_t)n * sizeof *nb);
    }
    free(s->bias_ids);
    free(s->bias_vals);
    s->bias_ids = ni;
    s->bias_vals = nb;
    s->n_bias = n;
    return 0;
}

int kvi_sampler_set_grammar(kvi_sampler *s, kvi_grammar_matcher *m)
{
    if (!s) return KVI_E_INVALID;
    if (m) {
        if (!s->mask) s->mask = malloc(((size_t)s->n_vocab + 31) / 32 * sizeof *s->mask);
        if (!s->work) s->work = malloc((size_t)s->n_vocab * sizeof *s->work);
        if (!s->mask || !s->work) return KVI_E_NOMEM;
    }
    kvi_grammar_matcher_free(s->gm);
    s->gm = m;
    return 0;
}

/* The row the chain reads: the caller's, or work with the bias added and the
 * grammar's disallowed tokens at -inf. NULL when the grammar allows nothing. */
static const float *constrained_row(kvi_sampler *s, const float *logits)
{
    if (!s->gm && s->n_bias == 0) return logits;
    const int32_t nv = s->n_vocab;
    memcpy(s->work, logits, (size_t)nv * sizeof *s->work);
    for (int32_t i = 0; i < s->n_bias; i++) s->work[s->bias_ids[i]] += s->bias_vals[i];
    if (s->gm) {
        const uint64_t t0 = prof_begin();
        const int allowed = kvi_grammar_matcher_mask(s->gm, s->mask);
        prof_end(PROF_GRAMMAR, t0);
        if (allowed <= 0) return NULL;
        for (int32_t w = 0; w < (nv + 31) / 32; w++) {
            uint32_t m = s->mask[w];
            if (m == 0xFFFFFFFFu) continue;
            for (int32_t b = 0; b < 32 && w * 32 + b < nv; b++)
                if (!((m >> b) & 1)) s->work[w * 32 + b] = -INFINITY;
        }
        /* a disallowed NaN must not win either: NaN counts as -inf already */
    }
    return s->work;
}

int32_t kvi_sampler_sample(kvi_sampler *s, const float *logits)
{
    if (!s || !logits) return KVI_E_INVALID;
    logits = constrained_row(s, logits);
    if (!logits) return KVI_E_INVALID;
    const int32_t certain = chain_run(s, logits, XTC_COIN);
    if (certain >= 0) return certain;
    const double u = rng_uniform(&s->rng);
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < s->n_cand; i++) {
        if (!(s->cand[i].p > 0.0f)) continue;
        cum += s->cand[i].p;
        last = i;
        if (u < cum) return s->cand[i].id;
    }
    return s->cand[last].id; /* rounding at the very top of the range */
}

int32_t kvi_sampler_last_candidates(const kvi_sampler *s, int32_t *ids, float *p, int32_t cap)
{
    if (!s) return KVI_E_INVALID;
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_cand; i++) {
        if (!(s->cand[i].logit > -INFINITY)) continue;
        if (n < cap && ids) ids[n] = s->cand[i].id;
        if (n < cap && p) p[n] = s->cand[i].p;
        n++;
    }
    return n;
}

/* Adds w * the chain's distribution (after chain_run) to probs. */
static void probs_add(const kvi_sampler *s, int32_t certain, double w, float *probs)
{
    if (certain >= 0) {
        probs[certain] += (float)w;
        return;
    }
    for (int32_t i = 0; i < s->n_cand; i++) probs[s->cand[i].id] += (float)(w * s->cand[i].p);
}

int kvi_sampler_probs(kvi_sampler *s, const float *logits, float *probs)
{
    if (!s || !logits || !probs) return KVI_E_INVALID;
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    logits = constrained_row(s, logits);
    if (!logits) return KVI_E_INVALID;
    if (xtc_coin(s)) {
        const double pf = s->p.xtc_probability;
        probs_add(s, chain_run(s, logits, XTC_FIRE), pf, probs);
        probs_add(s, chain_run(s, logits, XTC_SKIP), 1.0 - pf, probs);
        return 0;
    }
    probs_add(s, chain_run(s, logits, XTC_COIN), 1.0, probs);
    return 0;
}

int32_t kvi_sampler_sample_probs(kvi_sampler *s, const float *weights)
{
    if (!s || !weights) return KVI_E_INVALID;
    const int32_t nv = s->n_vocab;
    if (!(s->p.temp > 0.0f) && !(s->p.dynatemp_range > 0.0f)) return argmax_raw(weights, nv);
    double sum = 0.0;
    for (int32_t i = 0; i < nv; i++)
        if (weights[i] > 0.0f) sum += weights[i];
    if (!(sum > 0.0) || !isfinite(sum)) return KVI_E_INVALID;
    const double u = rng_uniform(&s->rng) * sum;
    double cum = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < nv; i++) {
        if (!(weights[i] > 0.0f)) continue;
        cum += weights[i];
        last = i;
        if (u < cum) return i;
    }
    return last; /* rounding at the very top of the range */
}
