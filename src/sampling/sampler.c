/*
 * sampler.c — picking the next token from a row of logits.
 *
 * Data structure: a kvi_sampler owns, sized once at create for n_vocab:
 *   cand   (n_vocab) smp_cand  — the surviving candidates (id, logit), compacted
 *                                in place by each filter; cand[0..n_cand)
 *   heap   (n_vocab) smp_cand  — scratch for top-k selection (min-heap of k)
 *   seen   (n_vocab) uint32_t  — stamp per token id: the penalty applies once
 *                                per distinct token however often it recurs
 *   recent (repeat_last_n) int32_t — ring buffer of the last accepted tokens
 *   counts (n_vocab) int32_t  — times each id was generated (accept_output);
 *                                allocated only when a presence or frequency
 *                                penalty is set, else NULL
 * and a xoshiro256** generator (base/rng.h). Optional, set after create:
 *   gm     kvi_grammar_matcher — owned; the tokens it disallows are -inf
 *   mask   ((n_vocab + 31) / 32) uint32_t — its mask for this draw
 *   bias_ids / bias_vals (n_bias) — OpenAI logit_bias, added to raw logits
 *   work   (n_vocab) float    — the caller's logits with bias and mask applied
 *                               (only when a bias or a grammar is set)
 *
 * Invariants:
 *   - kvi_sampler_sample() never allocates and never modifies the caller's logits;
 *   - temp <= 0 is pure argmax over the raw logits (lowest id on ties), nothing
 *     else is applied and the generator is not advanced — except OpenAI's
 *     presence/frequency penalties when set and a token was generated: argmax
 *     of the penalised logits then;
 *   - otherwise the order is llama.cpp's default chain: repetition penalty,
 *     presence/frequency penalties, top-k, top-p, min-p, temperature, softmax, one draw; every filter keeps at
 *     least one candidate; after top-k (or whenever sorting is needed) cand is in
 *     descending logit order with ties broken by the lower id;
 *   - NaN logits count as -inf; a row that is entirely -inf/NaN yields token 0
 *     via argmax rather than a NaN probability;
 *   - the same seed and the same sequence of calls give the same tokens;
 *   - with top-k set and no penalty to apply, top-k reads the logits directly
 *     (top_k_direct: no copy of the row into cand); it gives the same k
 *     candidates in the same order as the reference chain (every logit copied
 *     into cand, then apply_top_k), which sampler_set_reference() forces and
 *     tests/test_sampler_fast.c compares it with;
 *   - kvi_sampler_probs() returns exactly the distribution kvi_sampler_sample()
 *     draws from (one chain, sampler_chain(), serves both; one-hot when the
 *     outcome is certain), and kvi_sampler_sample_probs() draws from any
 *     non-negative weights with the same generator (argmax when temp <= 0):
 *     speculative decoding needs both to stay lossless.
 */
#include "kvinfer.h"
#include "base/rng.h"
#include "sampling/sampler_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The default seed, printed by the CLI's help. */
#define KVI_SAMPLER_DEFAULT_SEED 0xC0FFEEull

typedef struct smp_cand {
    int32_t id;
    float logit;
} smp_cand;

struct kvi_sampler {
    kvi_sampler_params p;
    int32_t n_vocab;
    smp_cand *cand;          /* (n_vocab) working candidates */
    smp_cand *heap;          /* (n_vocab) top-k min-heap scratch */
    uint32_t *seen;          /* (n_vocab) penalty stamps */
    uint32_t stamp;          /* current stamp value for seen[] */
    int32_t *recent;         /* (repeat_last_n) ring of accepted tokens */
    int32_t n_recent;        /* entries filled, <= repeat_last_n */
    int32_t recent_pos;      /* next write index in recent */
    int32_t *counts;         /* (n_vocab) generated-token counts, NULL when no such penalty */
    int32_t n_output;        /* tokens given to accept_output */
    bool reference;          /* always the reference chain (tests) */
    kvi_grammar_matcher *gm; /* owned; NULL: unconstrained */
    uint32_t *mask;          /* [(n_vocab + 31) / 32] */
    int32_t *bias_ids;       /* [n_bias] */
    float *bias_vals;        /* [n_bias] */
    int32_t n_bias;
    float *work;   /* [n_vocab] biased, masked logits */
    rng_state rng; /* seeded from p.seed at create */
};

void sampler_set_reference(kvi_sampler *s, bool on)
{
    if (s) s->reference = on;
}

/* ---- parameters and lifetime ---- */

void kvi_sampler_params_default(kvi_sampler_params *p)
{
    if (!p) return;
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = KVI_SAMPLER_DEFAULT_SEED;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
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
    /* Out-of-range parameters become their "off" value rather than undefined behaviour. */
    if (!(s->p.temp == s->p.temp)) s->p.temp = 0.0f;
    if (s->p.top_k < 0) s->p.top_k = 0;
    if (!(s->p.top_p > 0.0f) || s->p.top_p > 1.0f) s->p.top_p = 1.0f;
    if (!(s->p.min_p > 0.0f)) s->p.min_p = 0.0f;
    if (s->p.min_p > 1.0f) s->p.min_p = 1.0f;
    if (!(s->p.repeat_penalty > 0.0f) || !isfinite(s->p.repeat_penalty)) s->p.repeat_penalty = 1.0f;
    if (s->p.repeat_last_n < 0) s->p.repeat_last_n = 0;
    if (!isfinite(s->p.presence_penalty)) s->p.presence_penalty = 0.0f;
    if (!isfinite(s->p.frequency_penalty)) s->p.frequency_penalty = 0.0f;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->heap = malloc((size_t)n_vocab * sizeof *s->heap);
    s->seen = calloc((size_t)n_vocab, sizeof *s->seen);
    s->recent = malloc((size_t)(s->p.repeat_last_n > 0 ? s->p.repeat_last_n : 1) * sizeof *s->recent);
    if (s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f)
        s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    if (!s->cand || !s->heap || !s->seen || !s->recent ||
        ((s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f) && !s->counts)) {
        kvi_sampler_free(s);
        return NULL;
    }
    rng_seed(&s->rng, s->p.seed);
    return s;
}

void kvi_sampler_free(kvi_sampler *s)
{
    if (!s) return;
    free(s->cand);
    free(s->heap);
    free(s->seen);
    free(s->recent);
    free(s->counts);
    kvi_grammar_matcher_free(s->gm);
    free(s->mask);
    free(s->bias_ids);
    free(s->bias_vals);
    free(s->work);
    free(s);
}

void kvi_sampler_accept(kvi_sampler *s, int32_t token)
{
    if (!s || s->p.repeat_last_n <= 0 || token < 0 || token >= s->n_vocab) return;
    s->recent[s->recent_pos] = token;
    s->recent_pos = (s->recent_pos + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

void kvi_sampler_accept_output(kvi_sampler *s, int32_t token)
{
    if (!s || token < 0 || token >= s->n_vocab) return;
    kvi_sampler_accept(s, token);
    /* a token the mask allowed is always accepted; anything else leaves the state */
    if (s->gm) (void)kvi_grammar_matcher_accept_token(s->gm, token);
    if (s->counts && s->counts[token] < INT32_MAX) s->counts[token]++;
    s->n_output++;
}

/* ---- the filters ---- */

/* a ranks before b: higher logit, then lower id. */
static inline bool cand_before(const smp_cand *a, const smp_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const smp_cand *a = pa, *b = pb;
    if (cand_before(a, b)) return -1;
    if (cand_before(b, a)) return 1;
    return 0;
}

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

static void apply_penalty(kvi_sampler *s)
{
    if (s->p.repeat_penalty == 1.0f || s->n_recent == 0) return;
    if (++s->stamp == 0) { /* wrapped: clear stamps once every 2^32 calls */
        memset(s->seen, 0, (size_t)s->n_vocab * sizeof *s->seen);
        s->stamp = 1;
    }
    for (int32_t i = 0; i < s->n_recent; i++) s->seen[s->recent[i]] = s->stamp;
    /* cand still holds every id at index id here (penalty runs first). */
    const float pen = s->p.repeat_penalty;
    for (int32_t i = 0; i < s->n_recent; i++) {
        int32_t t = s->recent[i];
        if (s->seen[t] != s->stamp) continue;
        s->seen[t] = 0; /* once per distinct token */
        float *l = &s->cand[t].logit;
        *l = (*l > 0.0f) ? *l / pen : *l * pen;
    }
}

/* OpenAI's penalties on cand (still indexed by id): presence once per generated
 * token, frequency per occurrence. */
static void apply_output_penalties(kvi_sampler *s)
{
    const float pres = s->p.presence_penalty, freq = s->p.frequency_penalty;
    for (int32_t t = 0; t < s->n_vocab; t++) {
        const int32_t c = s->counts[t];
        if (c > 0) s->cand[t].logit -= pres + freq * (float)c;
    }
}

/* Sift-down in a min-heap ordered so that the "worst" candidate is at the root. */
static void heap_down(smp_cand *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_before(&h[w], &h[l])) w = l;
        if (r < n && cand_before(&h[w], &h[r])) w = r;
        if (w == i) return;
        smp_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Keeps the k best candidates, sorted. */
static int32_t apply_top_k(kvi_sampler *s, int32_t n, int32_t k)
{
    smp_cand *h = s->heap;
    for (int32_t i = 0; i < k; i++) h[i] = s->cand[i];
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_down(h, k, i);
    for (int32_t i = k; i < n; i++) {
        if (cand_before(&s->cand[i], &h[0])) {
            h[0] = s->cand[i];
            heap_down(h, k, 0);
        }
    }
    memcpy(s->cand, h, (size_t)k * sizeof *h);
    qsort(s->cand, (size_t)k, sizeof *s->cand, cand_cmp);
    return k;
}

/* Top-k of the raw logits into cand[0 .. k), sorted: the same heap operations
 * apply_top_k does on a cand filled with every (id, logit) in id order. Ids
 * only rise, so a logit equal to the heap's worst never ranks before it: only
 * a strictly larger logit enters. NaN reads as -inf and never enters. The scan
 * looks at 16 logits at a time for one above the threshold (no branch per
 * logit; with k << n_vocab almost every group has none). */
static int32_t top_k_direct(kvi_sampler *s, const float *logits, int32_t k)
{
    const int32_t nv = s->n_vocab;
    smp_cand *h = s->heap;
    for (int32_t i = 0; i < k; i++) {
        const float v = logits[i];
        h[i].id = i;
        h[i].logit = (v == v) ? v : -INFINITY;
    }
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_down(h, k, i);
    float thr = h[0].logit;
    int32_t i = k;
    for (; i + 16 <= nv; i += 16) {
        int any = 0;
        for (int j = 0; j < 16; j++) any |= logits[i + j] > thr;
        if (!any) continue;
        for (int j = 0; j < 16; j++) {
            if (!(logits[i + j] > thr)) continue;
            h[0].id = i + j;
            h[0].logit = logits[i + j];
            heap_down(h, k, 0);
            thr = h[0].logit;
        }
    }
    for (; i < nv; i++) {
        if (!(logits[i] > thr)) continue;
        h[0].id = i;
        h[0].logit = logits[i];
        heap_down(h, k, 0);
        thr = h[0].logit;
    }
    memcpy(s->cand, h, (size_t)k * sizeof *h);
    qsort(s->cand, (size_t)k, sizeof *s->cand, cand_cmp);
    return k;
}

/* cand sorted descending: keeps the smallest prefix whose probability mass >= p. */
static int32_t apply_top_p(const kvi_sampler *s, int32_t n, float p)
{
    const smp_cand *c = s->cand;
    const float mx = c[0].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)c[i].logit - mx);
    double cum = 0.0, target = (double)p * sum;
    for (int32_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - mx);
        if (cum >= target) return i + 1;
    }
    return n;
}

/* Keeps the candidates with p >= min_p * p_max, i.e. logit >= max + log(min_p).
 * Order is preserved, so a sorted cand stays sorted. */
static int32_t apply_min_p(kvi_sampler *s, int32_t n, float min_p)
{
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (s->cand[i].logit > mx) mx = s->cand[i].logit;
    const double thr = (double)mx + log((double)min_p);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if ((double)s->cand[i].logit >= thr) s->cand[m++] = s->cand[i];
    return m > 0 ? m : 1; /* cannot happen (the max passes), kept for safety */
}

/* The filter chain shared by sampling and by kvi_sampler_probs. Returns a token id
 * when the outcome is certain (argmax, a single survivor, an all -inf row);
 * otherwise returns -1 with cand[0 .. *n_out) holding (id, weight) where weight is
 * the unnormalised probability after temperature, and *sum_out their sum. */
static int32_t sampler_chain(kvi_sampler *s, const float *logits, int32_t *n_out, double *sum_out)
{
    const int32_t nv = s->n_vocab;
    const bool out_pen = s->counts && s->n_output > 0;
    if (!(s->p.temp > 0.0f) && !out_pen) return argmax_raw(logits, nv);

    int32_t n = nv;
    bool sorted = false;
    const bool rep_pen = s->p.repeat_penalty != 1.0f && s->n_recent > 0;
    if (!s->reference && s->p.temp > 0.0f && !rep_pen && !out_pen && s->p.top_k > 0 && s->p.top_k < nv) {
        n = top_k_direct(s, logits, s->p.top_k);
        sorted = true;
    } else {
        for (int32_t i = 0; i < nv; i++) {
            float v = logits[i];
            s->cand[i].id = i;
            s->cand[i].logit = (v == v) ? v : -INFINITY;
        }
        if (!(s->p.temp > 0.0f)) {
            /* greedy with OpenAI penalties: argmax of the penalised logits */
            apply_output_penalties(s);
            int32_t best = 0;
            for (int32_t i = 1; i < nv; i++)
                if (s->cand[i].logit > s->cand[best].logit) best = i;
            return best;
        }
        apply_penalty(s);
        if (out_pen) apply_output_penalties(s);
        if (s->p.top_k > 0 && s->p.top_k < n) {
            n = apply_top_k(s, n, s->p.top_k);
            sorted = true;
        }
    }
    if (s->p.top_p < 1.0f) {
        if (!sorted) {
            qsort(s->cand, (size_t)n, sizeof *s->cand, cand_cmp);
            sorted = true;
        }
        if (s->cand[0].logit == -INFINITY) return s->cand[0].id;
        n = apply_top_p(s, n, s->p.top_p);
    }

    /* Find the best survivor; an all -inf row has no distribution. */
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (cand_before(&s->cand[i], &s->cand[best])) best = i;
    if (s->cand[best].logit == -INFINITY) return s->cand[best].id;

    if (s->p.min_p > 0.0f) n = apply_min_p(s, n, s->p.min_p);
    if (n == 1) return s->cand[0].id;

    /* Temperature, then softmax weights over the survivors (max subtracted). */
    const double inv_t = 1.0 / (double)s->p.temp;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (s->cand[i].logit > mx) mx = s->cand[i].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float w = (float)exp(((double)s->cand[i].logit - mx) * inv_t);
        s->cand[i].logit = w; /* reuse as an unnormalised probability */
        sum += w;
    }
    *n_out = n;
    *sum_out = sum;
    return -1;
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
        if (kvi_grammar_matcher_mask(s->gm, s->mask) <= 0) return NULL;
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
    int32_t n = 0;
    double sum = 0.0;
    int32_t certain = sampler_chain(s, logits, &n, &sum);
    if (certain >= 0) return certain;
    const double u = rng_uniform(&s->rng) * sum;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (s->cand[i].logit <= 0.0f) continue;
        cum += s->cand[i].logit;
        last = i;
        if (u < cum) return s->cand[i].id;
    }
    return s->cand[last].id; /* rounding at the very top of the range */
}

int kvi_sampler_probs(kvi_sampler *s, const float *logits, float *probs)
{
    if (!s || !logits || !probs) return KVI_E_INVALID;
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    logits = constrained_row(s, logits);
    if (!logits) return KVI_E_INVALID;
    int32_t n = 0;
    double sum = 0.0;
    int32_t certain = sampler_chain(s, logits, &n, &sum);
    if (certain >= 0) {
        probs[certain] = 1.0f;
        return 0;
    }
    const double inv = 1.0 / sum; /* sum >= 1: the best survivor has weight 1 */
    for (int32_t i = 0; i < n; i++) probs[s->cand[i].id] = (float)((double)s->cand[i].logit * inv);
    return 0;
}

int32_t kvi_sampler_sample_probs(kvi_sampler *s, const float *weights)
{
    if (!s || !weights) return KVI_E_INVALID;
    const int32_t nv = s->n_vocab;
    if (!(s->p.temp > 0.0f)) return argmax_raw(weights, nv);
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
