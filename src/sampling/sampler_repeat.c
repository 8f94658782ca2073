/*
 * sampler_repeat.c — the samplers that look back over the accepted tokens:
 * llama.cpp's penalties (repetition, frequency, presence) and DRY, and the
 * history they share (sampler_int.h: the ring hist, counts).
 *
 * DRY data: brk[0 .. n_brk) the sequence breakers as token sequences, sorted by
 * head; per call, over the window w[0 .. n) (the last dry_penalty_last_n
 * accepted tokens, oldest first): dry_z[k] = the length of the longest common
 * suffix of w and w[0 .. n - k) (a Z-array of the reversed window), and dry_len[t]
 * = 1 + the longest repeat (>= allowed_length, capped by the breaker limit)
 * that token t would extend (0: none); dry_touched lists the t set, so clearing is O(window).
 *
 * Invariants: counts[t] is exactly the occurrences of t among the last
 * repeat_last_n tokens pushed; the penalties touch each distinct token once;
 * DRY never penalises a single-token breaker; nothing here allocates after
 * repeat_alloc (kvi_sampler_create) and kvi_sampler_set_dry_breakers.
 */
#include "base/error.h"
#include "sampling/sampler_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool penalties_on(const kvi_sampler_params *p)
{
    return p->repeat_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

bool dry_on(const kvi_sampler_params *p) { return p->dry_multiplier != 0.0f && p->dry_penalty_last_n > 0; }

int repeat_alloc(kvi_sampler *s)
{
    const kvi_sampler_params *p = &s->p;
    const int32_t nv = s->n_vocab;
    int32_t cap = 1;
    if (penalties_on(p)) cap = p->repeat_last_n < INT32_MAX ? p->repeat_last_n + 1 : INT32_MAX;
    if (dry_on(p) && p->dry_penalty_last_n > cap) cap = p->dry_penalty_last_n;
    s->hist_cap = cap;
    s->hist = malloc((size_t)cap * sizeof *s->hist);
    if (!s->hist) return KVI_E_NOMEM;
    if (penalties_on(p) && !(s->counts = calloc((size_t)nv, sizeof *s->counts))) return KVI_E_NOMEM;
    if (dry_on(p)) {
        const size_t w = (size_t)p->dry_penalty_last_n;
        s->dry_win = malloc(w * sizeof *s->dry_win);
        s->dry_z = malloc(w * sizeof *s->dry_z);
        s->dry_touched = malloc(w * sizeof *s->dry_touched);
        s->dry_len = calloc((size_t)nv, sizeof *s->dry_len);
        if (!s->dry_win || !s->dry_z || !s->dry_touched || !s->dry_len) return KVI_E_NOMEM;
    }
    return 0;
}

void repeat_free(kvi_sampler *s)
{
    free(s->hist);
    free(s->counts);
    free(s->brk);
    free(s->dry_win);
    free(s->dry_z);
    free(s->dry_touched);
    free(s->dry_len);
}

/* The k-th most recent accepted token (k < min(n_hist, hist_cap)). */
static int32_t hist_back(const kvi_sampler *s, int64_t k)
{
    return s->hist[(s->n_hist - 1 - k) % s->hist_cap];
}

void hist_push(kvi_sampler *s, int32_t token)
{
    if (s->counts) {
        const int32_t n = s->p.repeat_last_n;
        /* the token pushed n ago leaves the penalties' window (cap >= n + 1 keeps it) */
        if (s->n_hist >= n) s->counts[hist_back(s, n - 1)]--;
        s->counts[token]++;
    }
    s->hist[s->n_hist % s->hist_cap] = token;
    s->n_hist++;
}

bool penalties_active(const kvi_sampler *s) { return s->counts && s->n_hist > 0; }

static void penalise(const kvi_sampler_params *p, smp_cand *c, int32_t count)
{
    float l = c->logit;
    if (p->repeat_penalty != 1.0f) l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
    c->logit = l - (float)count * p->frequency_penalty - p->presence_penalty;
}

void penalties_cands(kvi_sampler *s)
{
    if (!penalties_active(s)) return;
    const kvi_sampler_params *p = &s->p;
    if (!s->ident) {
        for (int32_t i = 0; i < s->n_cand; i++)
            if (s->counts[s->cand[i].id] > 0) penalise(p, &s->cand[i], s->counts[s->cand[i].id]);
        return;
    }
    /* cand[t] is token t: visit the window's distinct tokens only */
    if (++s->stamp == 0) {
        memset(s->seen, 0, (size_t)s->n_vocab * sizeof *s->seen);
        s->stamp = 1;
    }
    const int64_t n = s->n_hist < p->repeat_last_n ? s->n_hist : p->repeat_last_n;
    for (int64_t k = 0; k < n; k++) {
        const int32_t t = hist_back(s, k);
        if (s->seen[t] == s->stamp) continue;
        s->seen[t] = s->stamp;
        penalise(p, &s->cand[t], s->counts[t]);
    }
}

/* ---- DRY ---- */

/* The first breaker whose head is t, or n_brk. */
static int32_t brk_lower(const kvi_sampler *s, int32_t t)
{
    int32_t lo = 0, hi = s->n_brk;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (s->brk[mid].head < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool single_breaker(const kvi_sampler *s, int32_t t)
{
    for (int32_t i = brk_lower(s, t); i < s->n_brk && s->brk[i].head == t; i++)
        if (s->brk[i].n_tail == 0) return true;
    return false;
}

/* Scanning w[0 .. n) from its end: the tokens after the last breaker occurrence
 * (a head followed by its longest matching tail); n when there is none. */
static int32_t breaker_limit(const kvi_sampler *s, const int32_t *w, int32_t n)
{
    for (int32_t i = 0; i < n; i++) { /* w[n - 1 - i]: i tokens after it */
        const int32_t t = w[n - 1 - i];
        int32_t longest = -1;
        for (int32_t b = brk_lower(s, t); b < s->n_brk && s->brk[b].head == t; b++) {
            const smp_breaker *br = &s->brk[b];
            if (br->n_tail <= longest || br->n_tail > i) continue;
            bool match = true;
            for (int32_t o = 0; o < br->n_tail && match; o++) match = br->tail[o] == w[n - i + o];
            if (match) longest = br->n_tail;
        }
        if (longest >= 0) return i - longest;
    }
    return n;
}

/* z[k], k in [1, n): the longest common prefix of r and r[k ..], r[j] = w[n - 1 - j]. */
static void z_reversed(const int32_t *w, int32_t n, int32_t *z)
{
#define R(j) w[n - 1 - (j)]
    int32_t l = 0, r = 0; /* [l, r) the rightmost match window */
    z[0] = n;
    for (int32_t k = 1; k < n; k++) {
        int32_t len = 0;
        if (k < r) len = z[k - l] < r - k ? z[k - l] : r - k;
        while (k + len < n && R(len) == R(k + len)) len++;
        z[k] = len;
        if (k + len > r) {
            l = k;
            r = k + len;
        }
    }
#undef R
}

bool dry_active(const kvi_sampler *s)
{
    if (!s->dry_len) return false;
    const int64_t n = s->n_hist < s->p.dry_penalty_last_n ? s->n_hist : s->p.dry_penalty_last_n;
    return n > s->p.dry_allowed_length;
}

void dry_cands(kvi_sampler *s)
{
    if (!dry_active(s)) return;
    const kvi_sampler_params *p = &s->p;
    const int32_t n = (int32_t)(s->n_hist < p->dry_penalty_last_n ? s->n_hist : p->dry_penalty_last_n);
    const int32_t A = p->dry_allowed_length;
    int32_t *w = s->dry_win;
    for (int32_t i = 0; i < n; i++) w[i] = hist_back(s, n - 1 - i);
    const int32_t limit = breaker_limit(s, w, n);
    if (limit < A) return;
    z_reversed(w, n, s->dry_z);
    /* position j = n - 1 - k of w ends a repeat of z[k] tokens; w[j + 1] extends it */
    int32_t n_touched = 0;
    for (int32_t k = 1; k < n; k++) {
        const int32_t len = s->dry_z[k] < limit ? s->dry_z[k] : limit;
        if (len < A) continue;
        const int32_t t = w[n - k];
        if (s->dry_len[t] == 0) s->dry_touched[n_touched++] = t;
        if (len + 1 > s->dry_len[t]) s->dry_len[t] = len + 1; /* stored + 1: 0 is "none" */
    }
    if (n_touched > 0) {
        const float base = p->dry_base;
        const double max_exp = base > 1.000001f ? 88.7228391 / log(base) : 0.0;
        for (int32_t i = 0; i < s->n_cand; i++) {
            const int32_t t = s->cand[i].id, len = s->dry_len[t] - 1;
            if (len < 0 || single_breaker(s, t)) continue;
            int32_t e = len - A;
            if (max_exp > 0.0 && e > max_exp) e = (int32_t)max_exp;
            s->cand[i].logit -= (float)((double)p->dry_multiplier * pow((double)base, e));
        }
    }
    for (int32_t i = 0; i < n_touched; i++) s->dry_len[s->dry_touched[i]] = 0;
}

/* ---- breakers from strings ---- */

static int brk_cmp(const void *pa, const void *pb)
{
    const smp_breaker *a = pa, *b = pb;
    if (a->head != b->head) return (a->head > b->head) - (a->head < b->head);
    return (a->n_tail > b->n_tail) - (a->n_tail < b->n_tail);
}

typedef struct brk_list {
    smp_breaker *v;
    int32_t n, cap;
} brk_list;

static int brk_add(brk_list *l, int32_t head, const int32_t *tail, int32_t n_tail)
{
    for (int32_t i = l->n - 1; i >= 0 && l->v[i].head == head; i--) /* same token: adjacent */
        if (l->v[i].n_tail == n_tail && !memcmp(l->v[i].tail, tail, (size_t)n_tail * sizeof *tail)) return 0;
    if (l->n == l->cap) {
        const int32_t cap = l->cap ? 2 * l->cap : 64;
        smp_breaker *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return KVI_E_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    smp_breaker *b = &l->v[l->n++];
    memset(b, 0, sizeof *b);
    b->head = head;
    b->n_tail = n_tail;
    if (n_tail) memcpy(b->tail, tail, (size_t)n_tail * sizeof *tail);
    return 0;
}

/* The breakers one string makes with token `head` whose text is word[0 .. wn). */
static int brk_from_word(brk_list *l, const kvi_model *m, int32_t head, const char *word, size_t wn,
                         const char *str, size_t sn, kvi_error *err)
{
    for (size_t pos = 0; pos + sn <= wn; pos++) /* contains the whole string */
        if (!memcmp(word + pos, str, sn)) return brk_add(l, head, NULL, 0);
    for (size_t pos = 0; pos < wn; pos++) {
        if (word[pos] != str[0]) continue;
        size_t i = 1;
        while (i < sn && pos + i < wn && word[pos + i] == str[i]) i++;
        if (pos + i < wn || i >= sn) continue; /* a mismatch before the word ended */
        int32_t tail[64];
        int32_t nt = kvi_tokenize(m, str + i, sn - i, false, false, tail, 64);
        if (nt < 0)
            return err_set(err, nt, "sampler: DRY breaker \"%.*s\" cannot be tokenized", (int)sn, str);
        if (nt > SMP_BREAKER_TAIL_MAX) nt = SMP_BREAKER_TAIL_MAX;
        int rc = brk_add(l, head, tail, nt);
        if (rc) return rc;
    }
    return 0;
}

int kvi_sampler_set_dry_breakers(kvi_sampler *s, const kvi_model *m, const char *const *breakers, int32_t n,
                                 kvi_error *err)
{
    static const char *const defaults[] = { "\n", ":", "\"", "*" };
    if (!s || !m || n < 0 || (breakers && n > 0 && !breakers[0]))
        return err_set(err, KVI_E_INVALID, "sampler: bad DRY breakers");
    if (kvi_n_vocab(m) != s->n_vocab)
        return err_set(err, KVI_E_INVALID, "sampler: DRY breakers from a model of another vocabulary");
    if (!breakers) {
        breakers = defaults;
        n = 4;
    }
    brk_list l = { 0 };
    char word[256];
    int rc = 0;
    for (int32_t t = 0; t < s->n_vocab && rc == 0; t++) {
        const int32_t wn = kvi_detokenize(m, &t, 1, word, sizeof word, true, true);
        if (wn < 0 || wn >= (int32_t)sizeof word) continue; /* no breaker text is that long */
        for (int32_t b = 0; b < n && rc == 0; b++) {
            if (!breakers[b]) {
                rc = err_set(err, KVI_E_INVALID, "sampler: DRY breaker %d is NULL", b);
                break;
            }
            size_t sn = strlen(breakers[b]);
            if (sn == 0) continue;
            if (sn > SMP_BREAKER_CHARS) sn = SMP_BREAKER_CHARS;
            rc = brk_from_word(&l, m, t, word, (size_t)wn, breakers[b], sn, err);
        }
    }
    if (rc) {
        free(l.v);
        return rc == KVI_E_NOMEM ? err_set(err, rc, "sampler: out of memory for DRY breakers") : rc;
    }
    qsort(l.v, (size_t)l.n, sizeof *l.v, brk_cmp);
    free(s->brk);
    s->brk = l.v;
    s->n_brk = l.n;
    return 0;
}

int32_t kvi_sampler_dry_breaker(const kvi_sampler *s, int32_t i, int32_t *head, int32_t *tail, int32_t cap,
                                int32_t *n_tail)
{
    if (!s) return 0;
    if (i >= 0 && i < s->n_brk) {
        const smp_breaker *b = &s->brk[i];
        if (head) *head = b->head;
        if (n_tail) *n_tail = b->n_tail;
        for (int32_t j = 0; tail && j < b->n_tail && j < cap; j++) tail[j] = b->tail[j];
    }
    return s->n_brk;
}
