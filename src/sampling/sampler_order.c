/*
 * sampler_order.c — which samplers a chain holds and in what order
 * (llama.cpp's common_sampler_init), their names, and mirostat 1 and 2.
 *
 * Data: kvi_sampler_params.samplers is the order as one-letter codes ("" the
 * default "edskypmxt", "-" none); chain_build turns it into s->chain, smp_kind
 * values, the last of which draws (dist, or mirostat / mirostat-v2 after a
 * plain temperature when p.mirostat is 1 or 2: then the order is ignored).
 *
 * Invariants: a code appears in the chain as often as in the string, in that
 * order; chain_entry_on says whether an entry's parameters switch it on (the
 * `?` of llama.cpp's names); mirostat's mu changes only in mirostat_update,
 * with the probability of the accepted token in the last chain run.
 */
#include "sampling/sampler_int.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define SMP_DEFAULT_ORDER "edskypmxt"

static const char *const kind_names[SMP_KIND_N] = {
    [SMP_PENALTIES] = "penalties", [SMP_DRY] = "dry",           [SMP_TOP_N_SIGMA] = "top-n-sigma",
    [SMP_TOP_K] = "top-k",         [SMP_TYPICAL] = "typical",   [SMP_TOP_P] = "top-p",
    [SMP_MIN_P] = "min-p",         [SMP_XTC] = "xtc",           [SMP_TEMP_EXT] = "temp-ext",
    [SMP_TEMP] = "temp",           [SMP_MIROSTAT] = "mirostat", [SMP_MIROSTAT_V2] = "mirostat-v2",
    [SMP_DIST] = "dist",
};

/* One-letter code -> kind; -1 for a letter kvinfer does not have. */
static int code_kind(char c)
{
    switch (c) {
    case 'e': return SMP_PENALTIES;
    case 'd': return SMP_DRY;
    case 's': return SMP_TOP_N_SIGMA;
    case 'k': return SMP_TOP_K;
    case 'y': return SMP_TYPICAL;
    case 'p': return SMP_TOP_P;
    case 'm': return SMP_MIN_P;
    case 'x': return SMP_XTC;
    case 't': return SMP_TEMP_EXT;
    default: return -1;
    }
}

/* llama.cpp's names and aliases (compared without case), with their codes. */
static const struct {
    const char *name;
    char code;
} name_codes[] = {
    { "penalties", 'e' },   { "dry", 'd' },       { "top_n_sigma", 's' }, { "top-n-sigma", 's' },
    { "topnsigma", 's' },   { "top_k", 'k' },     { "top-k", 'k' },       { "topk", 'k' },
    { "typ_p", 'y' },       { "typ-p", 'y' },     { "typp", 'y' },        { "typ", 'y' },
    { "typical_p", 'y' },   { "typical-p", 'y' }, { "typicalp", 'y' },    { "typical", 'y' },
    { "top_p", 'p' },       { "top-p", 'p' },     { "topp", 'p' },        { "nucleus", 'p' },
    { "min_p", 'm' },       { "min-p", 'm' },     { "minp", 'm' },        { "xtc", 'x' },
    { "temperature", 't' }, { "temp", 't' },
};

static char name_code(const char *name)
{
    for (size_t i = 0; i < sizeof name_codes / sizeof name_codes[0]; i++) {
        const char *a = name_codes[i].name, *b = name;
        while (*a && *b && *a == tolower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return name_codes[i].code;
    }
    return 0;
}

int kvi_sampler_order_parse(kvi_sampler_params *p, const char *const *names, int32_t n, const char *codes,
                            int32_t *n_unknown)
{
    if (!p || (names && n < 0) || (!names && !codes)) return KVI_E_INVALID;
    char out[KVI_SAMPLERS_MAX + 1];
    int32_t m = 0, unknown = 0;
    const int32_t count = names ? n : (int32_t)strlen(codes);
    for (int32_t i = 0; i < count; i++) {
        const char c = names ? (names[i] ? name_code(names[i]) : 0) : codes[i];
        if (code_kind(c) < 0) {
            unknown++;
            continue;
        }
        if (m == KVI_SAMPLERS_MAX) return KVI_E_INVALID;
        out[m++] = c;
    }
    out[m] = 0;
    if (m == 0) strcpy(out, "-");
    memcpy(p->samplers, out, sizeof out);
    if (n_unknown) *n_unknown = unknown;
    return 0;
}

void chain_build(kvi_sampler *s)
{
    s->n_chain = 0;
    if (s->p.mirostat == 1 || s->p.mirostat == 2) {
        s->chain[s->n_chain++] = SMP_TEMP;
        s->chain[s->n_chain++] = s->p.mirostat == 1 ? SMP_MIROSTAT : SMP_MIROSTAT_V2;
        return;
    }
    const char *order = s->p.samplers[0] ? s->p.samplers : SMP_DEFAULT_ORDER;
    for (int i = 0; order[i] && i < KVI_SAMPLERS_MAX; i++) {
        const int k = code_kind(order[i]);
        if (k >= 0) s->chain[s->n_chain++] = (uint8_t)k;
    }
    s->chain[s->n_chain++] = SMP_DIST;
}

bool chain_entry_on(const kvi_sampler *s, smp_kind k)
{
    const kvi_sampler_params *p = &s->p;
    switch (k) {
    case SMP_PENALTIES: return penalties_on(p);
    case SMP_DRY: return dry_on(p);
    case SMP_TOP_N_SIGMA: return p->top_n_sigma > 0.0f;
    case SMP_TOP_K: return p->top_k > 0;
    case SMP_TYPICAL: return p->typical_p < 1.0f;
    case SMP_TOP_P: return p->top_p < 1.0f;
    case SMP_MIN_P: return p->min_p > 0.0f;
    case SMP_XTC: return p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f;
    case SMP_TEMP_EXT: return p->temp != 1.0f || p->dynatemp_range > 0.0f;
    case SMP_TEMP: return p->temp != 1.0f;
    default: return true;
    }
}

int32_t kvi_sampler_chain_names(const kvi_sampler *s, char *buf, size_t cap)
{
    if (!s) return KVI_E_INVALID;
    size_t len = 0;
    for (int i = 0; i < s->n_chain; i++) {
        const smp_kind k = (smp_kind)s->chain[i];
        const int w = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, "%s%s%s",
                               i ? " " : "", chain_entry_on(s, k) ? "" : "?", kind_names[k]);
        if (w > 0) len += (size_t)w;
    }
    if (cap > 0 && len >= cap) buf[cap - 1] = 0;
    if (cap > 0 && s->n_chain == 0) buf[0] = 0;
    return (int32_t)len;
}

/* ---- mirostat ---- */

/* Mirostat 1: Zipf exponent s from the top m = 100 probabilities, then top-k with
 * k = (eps 2^mu / (1 - N^-eps))^(1/s), eps = s - 1, N = n_vocab; float as llama.cpp. */
void mirostat_cands(kvi_sampler *s)
{
    softmax_cands(s, true);
    const smp_cand *c = s->cand;
    float sum_tb = 0.0f, sum_tt = 0.0f;
    for (int32_t i = 0; i < 99 && i < s->n_cand - 1; i++) {
        const float t = logf((float)(i + 2) / (float)(i + 1));
        const float b = logf(c[i].p / c[i + 1].p);
        sum_tb += t * b;
        sum_tt += t * t;
    }
    const float sh = sum_tb / sum_tt, eps = sh - 1.0f;
    const float k = powf((eps * powf(2.0f, s->mu)) / (1.0f - powf((float)s->n_vocab, -eps)), 1.0f / sh);
    /* llama.cpp converts k to int: inf and NaN become INT_MIN on x86, so 1 */
    const int32_t ki = (k == k && k < 2147483520.0f && k >= 1.0f) ? (int32_t)k : 1;
    top_k_cands(s, ki);
    softmax_cands(s, true);
    s->mu_ready = true;
}

/* Mirostat 2: the leading candidates of surprise -log2 p <= mu (at least one). */
void mirostat_v2_cands(kvi_sampler *s)
{
    softmax_cands(s, true);
    int32_t n = 0;
    while (n < s->n_cand && !(-log2f(s->cand[n].p) > s->mu)) n++;
    s->n_cand = n > 0 ? n : 1;
    softmax_cands(s, true);
    s->mu_ready = true;
}

void mirostat_update(kvi_sampler *s, int32_t token)
{
    if (!s->mu_ready) return;
    s->mu_ready = false;
    for (int32_t i = 0; i < s->n_cand; i++) {
        if (s->cand[i].id != token) continue;
        const float e = -log2f(s->cand[i].p) - s->p.mirostat_tau;
        if (e == e && e < INFINITY) s->mu -= s->p.mirostat_eta * e;
        return;
    }
}
