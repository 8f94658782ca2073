/*
 * sampler_filters.c — the stateless samplers of llama.cpp's chain on the
 * candidate array (sampler_int.h): softmax, top-k, top-p, min-p, typical,
 * top-n-sigma, XTC, temperature and dynamic temperature.
 *
 * Invariants: every filter keeps at least one candidate; a filter that sorts
 * leaves cand in descending logit order, lower id first on ties (`sorted`);
 * typical leaves its own score order (sorted false), min-p on an unsorted
 * array keeps the order it had; any filter that reorders or shortens the array
 * clears `ident`. p is written by softmax_cands only (and by the filters that
 * call it); nothing here allocates.
 */
#include "sampling/sampler_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a ranks before b: higher logit, then lower id. */
bool cand_before(const smp_cand *a, const smp_cand *b)
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

void sort_cands(kvi_sampler *s)
{
    if (s->sorted) return;
    qsort(s->cand, (size_t)s->n_cand, sizeof *s->cand, cand_cmp);
    s->sorted = true;
    s->ident = false;
}

/* p = exp(l - max) / sum over the array (-inf entries get 0). */
void softmax_cands(kvi_sampler *s, bool sort)
{
    if (sort) sort_cands(s);
    smp_cand *c = s->cand;
    float mx = c[0].logit;
    for (int32_t i = 1; i < s->n_cand; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    if (mx == -INFINITY) { /* nothing finite: all the mass on the first */
        for (int32_t i = 0; i < s->n_cand; i++) c[i].p = i == 0 ? 1.0f : 0.0f;
        return;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < s->n_cand; i++) {
        c[i].p = expf(c[i].logit - mx);
        sum += c[i].p;
    }
    const double inv = 1.0 / sum;
    for (int32_t i = 0; i < s->n_cand; i++) c[i].p = (float)((double)c[i].p * inv);
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

/* Keeps the k best candidates, sorted (k >= size: sorts only; k <= 0: nothing). */
void top_k_cands(kvi_sampler *s, int32_t k)
{
    if (k <= 0) return;
    if (k >= s->n_cand) {
        sort_cands(s);
        return;
    }
    smp_cand *h = s->tmp;
    for (int32_t i = 0; i < k; i++) h[i] = s->cand[i];
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_down(h, k, i);
    for (int32_t i = k; i < s->n_cand; i++) {
        if (cand_before(&s->cand[i], &h[0])) {
            h[0] = s->cand[i];
            heap_down(h, k, 0);
        }
    }
    memcpy(s->cand, h, (size_t)k * sizeof *h);
    qsort(s->cand, (size_t)k, sizeof *s->cand, cand_cmp);
    s->n_cand = k;
    s->sorted = true;
    s->ident = false;
}

/* Top-k of the raw logits into cand[0 .. k), sorted: the same heap operations
 * top_k_cands does on a cand filled with every (id, logit) in id order. Ids
 * only rise, so a logit equal to the heap's worst never ranks before it: only
 * a strictly larger logit enters. NaN reads as -inf and never enters. The scan
 * looks at 16 logits at a time for one above the threshold (no branch per
 * logit; with k << n_vocab almost every group has none). */
int32_t top_k_direct(kvi_sampler *s, const float *logits, int32_t k)
{
    const int32_t nv = s->n_vocab;
    smp_cand *h = s->tmp;
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
    s->n_cand = k;
    s->sorted = true;
    s->ident = false;
    return k;
}

/* The shortest sorted prefix whose mass is >= p and that has min_keep entries. */
void top_p_cands(kvi_sampler *s, float p, int32_t min_keep)
{
    if (p >= 1.0f) return;
    softmax_cands(s, true);
    double cum = 0.0;
    for (int32_t i = 0; i < s->n_cand; i++) {
        cum += s->cand[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            s->n_cand = i + 1;
            return;
        }
    }
}

/* Keeps the candidates with logit >= max + ln p: in place when the array is
 * unsorted and enough survive, else from the top of the sorted array. */
void min_p_cands(kvi_sampler *s, float p, int32_t min_keep)
{
    if (p <= 0.0f) return;
    smp_cand *c = s->cand;
    if (!s->sorted) {
        float mx = c[0].logit;
        for (int32_t i = 1; i < s->n_cand; i++)
            if (c[i].logit > mx) mx = c[i].logit;
        const float thr = mx + logf(p);
        int32_t kept = 0;
        for (int32_t i = 0; i < s->n_cand; i++) kept += c[i].logit >= thr;
        if (kept > 0 && kept >= min_keep) {
            int32_t m = 0;
            for (int32_t i = 0; i < s->n_cand; i++)
                if (c[i].logit >= thr) c[m++] = c[i];
            if (m < s->n_cand) s->ident = false;
            s->n_cand = m;
            return;
        }
    }
    sort_cands(s);
    const float thr = c[0].logit + logf(p);
    int32_t i = 1;
    for (; i < s->n_cand; i++)
        if (c[i].logit < thr && i >= min_keep) break;
    s->n_cand = i;
}

/* tmp entries in typical: logit holds the score, id the array index; ascending
 * score, lower index first on ties. */
static int score_cmp(const void *pa, const void *pb)
{
    const smp_cand *a = pa, *b = pb;
    if (a->logit < b->logit) return -1;
    if (a->logit > b->logit) return 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Locally typical sampling: candidates ordered by |-ln p - H|, the shortest
 * prefix of that order whose mass is > p and that has min_keep entries. */
void typical_cands(kvi_sampler *s, float p, int32_t min_keep)
{
    if (p >= 1.0f) return;
    softmax_cands(s, true);
    smp_cand *c = s->cand;
    const int32_t n = s->n_cand;
    float h = 0.0f;
    for (int32_t i = 0; i < n; i++) h += -c[i].p * logf(c[i].p);
    for (int32_t i = 0; i < n; i++) {
        s->tmp[i].logit = fabsf(-logf(c[i].p) - h);
        s->tmp[i].id = i;
    }
    qsort(s->tmp, (size_t)n, sizeof *s->tmp, score_cmp);
    int32_t last = n;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[s->tmp[i].id].p;
        if (cum > p && i + 1 >= min_keep) {
            last = i + 1;
            break;
        }
    }
    for (int32_t i = 0; i < last; i++) s->tmp[i] = c[s->tmp[i].id];
    memcpy(c, s->tmp, (size_t)last * sizeof *c);
    s->n_cand = last;
    s->sorted = false;
    s->ident = false;
}

/* Logits below max - n * sigma (over the finite ones) become -inf. */
void top_n_sigma_cands(kvi_sampler *s, float n)
{
    if (n <= 0.0f || s->n_cand <= 1) return;
    smp_cand *c = s->cand;
    float mx = c[0].logit;
    double sum = 0.0;
    int32_t cnt = 0;
    for (int32_t i = 0; i < s->n_cand; i++) {
        if (c[i].logit == -INFINITY) continue;
        if (c[i].logit > mx) mx = c[i].logit;
        sum += c[i].logit;
        cnt++;
    }
    const double mean = cnt > 0 ? sum / cnt : 0.0;
    double acc = 0.0;
    for (int32_t i = 0; i < s->n_cand; i++)
        if (c[i].logit != -INFINITY) acc += ((double)c[i].logit - mean) * ((double)c[i].logit - mean);
    const double sd = cnt > 0 ? sqrt(acc / cnt) : 0.0;
    const double thr = (double)mx - (double)n * sd;
    for (int32_t i = 0; i < s->n_cand; i++)
        if ((double)c[i].logit < thr) c[i].logit = -INFINITY;
}

/* Exclude top choices: when the coin falls, every candidate with p >= threshold
 * but the least likely of them goes. */
void xtc_cands(kvi_sampler *s, smp_xtc_mode mode)
{
    const kvi_sampler_params *p = &s->p;
    if (p->xtc_probability <= 0.0f || p->xtc_threshold > 0.5f || s->n_cand < 2) return;
    if (mode == XTC_SKIP) return;
    if (mode == XTC_COIN && p->xtc_probability < 1.0f && rng_uniform(&s->rng) > p->xtc_probability) return;
    softmax_cands(s, true);
    int32_t last = 0;
    for (int32_t i = 0; i < s->n_cand && s->cand[i].p >= p->xtc_threshold; i++) last = i;
    if (last > 0 && s->n_cand - last >= p->min_keep) {
        memmove(s->cand, s->cand + last, (size_t)(s->n_cand - last) * sizeof *s->cand);
        s->n_cand -= last;
    }
}

/* t <= 0: the first largest logit stays, every other one becomes -inf; else l / t. */
void temp_cands(kvi_sampler *s, float t)
{
    smp_cand *c = s->cand;
    if (t <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < s->n_cand; i++)
            if (c[i].logit > c[best].logit) best = i;
        for (int32_t i = 0; i < s->n_cand; i++)
            if (i != best) c[i].logit = -INFINITY;
        return;
    }
    if (t == 1.0f) return;
    for (int32_t i = 0; i < s->n_cand; i++) c[i].logit /= t;
}

/* Temperature, dynamic when dynatemp_range > 0: T = T_min + (T_max - T_min) *
 * (H / ln size)^exponent. A dynamic temperature of 0 is greedy. */
void temp_ext_cands(kvi_sampler *s)
{
    const kvi_sampler_params *p = &s->p;
    if (!(p->dynatemp_range > 0.0f)) {
        temp_cands(s, p->temp);
        return;
    }
    if (s->n_cand <= 1) return;
    const float t_min = fmaxf(0.0f, p->temp - p->dynatemp_range), t_max = p->temp + p->dynatemp_range;
    const float h_max = -logf(1.0f / (float)s->n_cand);
    softmax_cands(s, true);
    float h = 0.0f;
    for (int32_t i = 0; i < s->n_cand; i++)
        if (s->cand[i].p > 0.0f) h -= s->cand[i].p * logf(s->cand[i].p);
    const float t = t_min + (t_max - t_min) * powf(h / h_max, p->dynatemp_exponent);
    temp_cands(s, t == t ? t : 0.0f);
}
