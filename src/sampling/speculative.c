/*
 * speculative.c — speculative decoding for one sequence: guess ahead, verify in
 * one batched pass, keep exactly what the target would have produced.
 *
 * Data structure: a kvi_spec owns
 *   hist   (cap_hist) int32_t   — the sequence's tokens: prompt, then every token
 *                                 kvi_spec_verify returned; hist[n_hist - 1] is the
 *                                 newest token, not yet run by the target;
 *   cur    (draft_max) int32_t  — the tokens proposed by the last kvi_spec_draft;
 *   q      (draft_max, n_vocab) — the draft model's sampling distribution for each
 *                                 proposed token (draft model only);
 *   pt, r  (n_vocab) float      — the target's distribution p / the residual;
 *   for a draft model: its engine (not owned), one sequence of it (owned), a batch
 *   and a sampler with the request's parameters (penalty off);
 *   the adaptive state (EMA of acceptance events, K, pause) and counters.
 *
 * Invariants:
 *   - the draft sequence caches a prefix of hist: kvi_seq_len(draft) <= n_hist - 1
 *     between rounds (kvi_spec_draft feeds what is missing, kvi_spec_verify cuts
 *     back to the accepted prefix);
 *   - acceptance (lossless): draft token d drawn from q is kept when u * q(d) <
 *     p(d) with u ~ U[0,1) (probability min(1, p/q)); on rejection the token is
 *     drawn from max(0, p - q); when every draft is kept one more token is drawn
 *     from the last row. N-gram proposals are deterministic: q is one-hot at d.
 *     p is the target sampler's whole chain (kvi_sampler_probs), computed row by
 *     row after the previous tokens were given to kvi_sampler_accept, so penalties
 *     see exactly the history plain decoding would. With temp 0 every
 *     distribution is one-hot and the rule reduces to "keep while the draft equals
 *     the target's argmax, then take the target's argmax";
 *   - adaptation changes only how many tokens are drafted, never which tokens
 *     are output.
 */
#include "kvinfer.h"
#include "base/stats.h"

#include "base/error.h"
#include "base/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Weight of the past in the acceptance estimate, per round. */
#define SPEC_EMA_DECAY 0.85
/* Rounds spent without drafting after speculation stopped paying (doubles up to
 * SPEC_PAUSE_MAX while it keeps not paying). */
#define SPEC_PAUSE_MIN 8
#define SPEC_PAUSE_MAX 256

struct kvi_spec {
    kvi_spec_params p;
    kvi_sampler_params sp; /* the request's sampling parameters */
    int32_t n_vocab;
    rng_state rng; /* acceptance draws */
    int32_t *hist; /* (cap_hist) token history */
    int32_t n_hist, cap_hist;
    int32_t *cur; /* (draft_max) last proposal */
    int32_t n_cur;
    float *q;  /* (draft_max, n_vocab) draft distributions; NULL for n-gram */
    float *pt; /* (n_vocab) target distribution of one row */
    float *r;  /* (n_vocab) residual max(0, p - q) */
    /* draft model */
    kvi_engine *de;    /* not owned */
    kvi_seq *dseq;     /* owned sequence of de */
    kvi_batch *dbatch; /* (dbatch_cap) rows */
    int32_t dbatch_cap;
    kvi_sampler *dsmp;
    /* adaptation */
    double acc_w, trial_w; /* EMA of accepted tokens / acceptance trials */
    int32_t k_now;         /* K for the next round, 0 while paused */
    int32_t pause_left, pause_len;
    int32_t shadow; /* n-gram guess while paused, checked for free; -1: none */
    double cost_row, cost_draft;
    /* counters */
    uint64_t n_rounds, n_spec_rounds, n_drafted, n_accepted, n_generated;
};

void kvi_spec_params_default(kvi_spec_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->draft_max = 8;
    p->draft_min = 1;
    p->ngram_max = 3;
    p->adapt = true;
    p->seed = 0x5EECull;
}

/* ---- vocabulary check ---- */

/* Piece of token t into buf (grown as needed); returns its length or a negative code. */
static int32_t piece_of(const kvi_model *m, int32_t t, char **buf, size_t *cap)
{
    int32_t l = kvi_token_to_piece(m, t, *buf, *cap, true);
    if (l < 0 || (size_t)l <= *cap) return l;
    char *nb = realloc(*buf, (size_t)l);
    if (!nb) return KVI_E_NOMEM;
    *buf = nb;
    *cap = (size_t)l;
    return kvi_token_to_piece(m, t, *buf, *cap, true);
}

int kvi_spec_check_vocab(const kvi_model *target, const kvi_model *draft, kvi_error *err)
{
    if (!target || !draft) return err_set(err, KVI_E_INVALID, "speculative: no model given");
    const int32_t nt = kvi_n_vocab(target), nd = kvi_n_vocab(draft);
    if (nt != nd)
        return err_set(err, KVI_E_INVALID, "draft model vocabulary has %d tokens, the target's has %d",
                       (int)nd, (int)nt);
    if (kvi_token_bos(target) != kvi_token_bos(draft) || kvi_token_eos(target) != kvi_token_eos(draft))
        return err_set(err, KVI_E_INVALID, "draft model BOS/EOS (%d/%d) differ from the target's (%d/%d)",
                       (int)kvi_token_bos(draft), (int)kvi_token_eos(draft), (int)kvi_token_bos(target),
                       (int)kvi_token_eos(target));
    size_t ca = 64, cb = 64;
    char *a = malloc(ca), *b = malloc(cb);
    int rc = 0;
    if (!a || !b) rc = err_set(err, KVI_E_NOMEM, "out of memory comparing vocabularies");
    for (int32_t t = 0; rc == 0 && t < nt; t++) {
        int32_t la = piece_of(target, t, &a, &ca), lb = piece_of(draft, t, &b, &cb);
        if (la < 0 || lb < 0) {
            rc = err_set(err, la == KVI_E_NOMEM || lb == KVI_E_NOMEM ? KVI_E_NOMEM : KVI_E_INVALID,
                         "cannot read token %d of the %s vocabulary", (int)t, la < 0 ? "target" : "draft");
        } else if (la != lb || memcmp(a, b, (size_t)la) != 0) {
            rc = err_set(err, KVI_E_INVALID, "draft and target vocabularies differ at token %d", (int)t);
        }
    }
    free(a);
    free(b);
    return rc;
}

/* ---- lifetime ---- */

void kvi_spec_free(kvi_spec *s)
{
    if (!s) return;
    free(s->hist);
    free(s->cur);
    free(s->q);
    free(s->pt);
    free(s->r);
    if (s->dseq) kvi_seq_free(s->dseq);
    kvi_batch_free(s->dbatch);
    kvi_sampler_free(s->dsmp);
    free(s);
}

static void adapt_reset(kvi_spec *s)
{
    /* A weak prior of one accepted token in two trials. */
    s->acc_w = 1.0;
    s->trial_w = 2.0;
    s->k_now = s->p.draft_max;
    s->pause_left = 0;
    s->pause_len = SPEC_PAUSE_MIN;
    s->shadow = -1;
}

kvi_spec *kvi_spec_create(const kvi_spec_params *p, const kvi_model *target, kvi_engine *draft,
                          const kvi_sampler_params *sp, kvi_error *err)
{
    if (!target) {
        err_set(err, KVI_E_INVALID, "speculative: no target model");
        return NULL;
    }
    kvi_model_info ti, di;
    kvi_model_get_info(target, &ti);
    kvi_model_get_info(draft ? kvi_engine_model(draft) : NULL, &di);
    if (ti.n_layers_recurrent > 0 || di.n_layers_recurrent > 0) {
        err_set(err, KVI_E_UNSUPPORTED,
                "speculative: the %s model has recurrent layers (%s), whose state cannot be rewound past "
                "rejected drafts: speculative decoding is not supported for it",
                ti.n_layers_recurrent > 0 ? "target" : "draft",
                ti.n_layers_recurrent > 0 ? ti.arch : di.arch);
        return NULL;
    }
    kvi_spec_params pp;
    if (p)
        pp = *p;
    else
        kvi_spec_params_default(&pp);
    if (pp.draft_max < 1 || pp.draft_max > 256) {
        err_set(err, KVI_E_INVALID, "speculative: draft_max %d is outside [1, 256]", (int)pp.draft_max);
        return NULL;
    }
    if (pp.draft_min < 0 || pp.draft_min > pp.draft_max) {
        err_set(err, KVI_E_INVALID, "speculative: draft_min %d is outside [0, draft_max %d]",
                (int)pp.draft_min, (int)pp.draft_max);
        return NULL;
    }
    if (pp.ngram_max < 1 || pp.ngram_max > 64) {
        err_set(err, KVI_E_INVALID, "speculative: ngram %d is outside [1, 64]", (int)pp.ngram_max);
        return NULL;
    }
    if (pp.draft_min < 1) pp.draft_min = 1;
    if (draft && kvi_spec_check_vocab(target, kvi_engine_model(draft), err) != 0) return NULL;

    kvi_spec *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, KVI_E_NOMEM, "out of memory for the speculative state");
        return NULL;
    }
    s->p = pp;
    if (sp)
        s->sp = *sp;
    else
        kvi_sampler_params_default(&s->sp);
    s->n_vocab = kvi_n_vocab(target);
    rng_seed(&s->rng, pp.seed);
    s->cap_hist = 256;
    s->hist = malloc((size_t)s->cap_hist * sizeof *s->hist);
    s->cur = malloc((size_t)pp.draft_max * sizeof *s->cur);
    s->pt = malloc((size_t)s->n_vocab * sizeof *s->pt);
    s->r = malloc((size_t)s->n_vocab * sizeof *s->r);
    bool ok = s->hist && s->cur && s->pt && s->r;
    if (ok && draft) {
        s->de = draft;
        s->q = malloc((size_t)pp.draft_max * (size_t)s->n_vocab * sizeof *s->q);
        kvi_sampler_params dp = s->sp;
        dp.repeat_penalty = 1.0f; /* the draft's history is rolled back; q may be any distribution */
        dp.seed = pp.seed ^ 0x9E3779B97F4A7C15ull;
        s->dsmp = kvi_sampler_create(&dp, s->n_vocab);
        s->dbatch_cap = 64;
        s->dbatch = kvi_batch_create(s->dbatch_cap);
        ok = s->q && s->dsmp && s->dbatch;
        if (ok && !(s->dseq = kvi_seq_create(draft))) {
            err_set(err, KVI_E_INVALID, "speculative: the draft engine has no free sequence");
            kvi_spec_free(s);
            return NULL;
        }
    }
    if (!ok) {
        err_set(err, KVI_E_NOMEM, "out of memory for the speculative state");
        kvi_spec_free(s);
        return NULL;
    }
    /* Priors until calibrated: a verified row costs a tenth of a step, a draft
     * token a fifth (a draft model several times smaller than the target). */
    s->cost_row = 0.1;
    s->cost_draft = draft ? 0.2 : 0.0;
    adapt_reset(s);
    return s;
}

static int hist_push(kvi_spec *s, int32_t t)
{
    if (s->n_hist == s->cap_hist) {
        if (s->cap_hist > INT32_MAX / 2) return KVI_E_NOMEM;
        int32_t nc = s->cap_hist * 2;
        int32_t *nh = realloc(s->hist, (size_t)nc * sizeof *nh);
        if (!nh) return KVI_E_NOMEM;
        s->hist = nh;
        s->cap_hist = nc;
    }
    s->hist[s->n_hist++] = t;
    return 0;
}

int kvi_spec_begin(kvi_spec *s, const int32_t *prompt, int32_t n, kvi_error *err)
{
    if (!s || (n > 0 && !prompt) || n < 1) return err_set(err, KVI_E_INVALID, "speculative: empty prompt");
    /* The draft keeps what it cached of a common prefix with the previous history. */
    int32_t common = 0;
    while (common < n && common < s->n_hist && s->hist[common] == prompt[common]) common++;
    s->n_hist = 0;
    s->n_cur = 0;
    for (int32_t i = 0; i < n; i++) {
        if (prompt[i] < 0 || prompt[i] >= s->n_vocab)
            return err_set(err, KVI_E_INVALID, "speculative: prompt token %d at %d is outside the vocabulary",
                           (int)prompt[i], (int)i);
        if (hist_push(s, prompt[i]) != 0)
            return err_set(err, KVI_E_NOMEM, "out of memory for the token history");
    }
    if (s->dseq && kvi_seq_len(s->dseq) > common) kvi_seq_truncate(s->dseq, common);
    s->n_rounds = s->n_spec_rounds = s->n_drafted = s->n_accepted = s->n_generated = 0;
    adapt_reset(s);
    return 0;
}

/* ---- proposals ---- */

/* Prompt lookup: the continuation of the latest earlier occurrence of the longest
 * suffix (ngram_max tokens down to 1) of the history. The copy may overlap its own
 * output (period shorter than k), as in LZ77. */
static int32_t ngram_propose(const kvi_spec *s, int32_t k, int32_t *out)
{
    const int32_t *h = s->hist;
    const int32_t H = s->n_hist;
    for (int32_t n = s->p.ngram_max < H ? s->p.ngram_max : H - 1; n >= 1; n--) {
        const int32_t *suf = h + H - n;
        for (int32_t j = H - n - 1; j >= 0; j--) {
            if (h[j] != suf[0] || memcmp(h + j, suf, (size_t)n * sizeof *h) != 0) continue;
            int32_t src = j + n; /* < H */
            for (int32_t i = 0; i < k; i++, src++) out[i] = src < H ? h[src] : out[src - H];
            return k;
        }
    }
    return 0;
}

static int draft_batch_reserve(kvi_spec *s, int32_t rows)
{
    if (rows <= s->dbatch_cap) return 0;
    kvi_batch *nb = kvi_batch_create(rows);
    if (!nb) return KVI_E_NOMEM;
    kvi_batch_free(s->dbatch);
    s->dbatch = nb;
    s->dbatch_cap = rows;
    return 0;
}

/* Runs the draft model k tokens ahead, sampling each from its distribution. */
static int32_t draft_propose(kvi_spec *s, int32_t k, int32_t *out, kvi_error *err)
{
    const int32_t H = s->n_hist;
    const int32_t n_ctx = kvi_engine_n_ctx(s->de);
    /* positions fed: the history up to H - 1, then drafts at H .. H + k - 2 */
    if (H + k - 1 > n_ctx) k = n_ctx - H + 1;
    if (k < s->p.draft_min) return 0;
    int32_t D = kvi_seq_len(s->dseq);
    if (D > H - 1) { /* cannot happen through this API; resynchronise rather than fail */
        kvi_seq_truncate(s->dseq, H - 1);
        D = H - 1;
    }
    if (draft_batch_reserve(s, H - D) != 0)
        return err_set(err, KVI_E_NOMEM, "out of memory for the draft batch");
    kvi_batch_clear(s->dbatch);
    for (int32_t i = D; i < H; i++) kvi_batch_add(s->dbatch, s->dseq, s->hist[i], i, i == H - 1);
    for (int32_t i = 0; i < k; i++) {
        int rc = kvi_step(s->de, s->dbatch, err);
        if (rc != 0) return rc;
        const float *lg = kvi_logits(s->de, kvi_batch_n_rows(s->dbatch) - 1);
        float *q = s->q + (size_t)i * (size_t)s->n_vocab;
        if (!lg) return err_set(err, KVI_E_INVALID, "speculative: the draft step returned no logits");
        kvi_sampler_probs(s->dsmp, lg, q);
        int32_t d = kvi_sampler_sample_probs(s->dsmp, q);
        if (d < 0) return err_set(err, KVI_E_INVALID, "speculative: the draft distribution is empty");
        out[i] = d;
        if (i + 1 < k) {
            kvi_batch_clear(s->dbatch);
            kvi_batch_add(s->dbatch, s->dseq, d, H + i, true);
        }
    }
    return k;
}

int32_t kvi_spec_draft(kvi_spec *s, int32_t k_max, int32_t *drafts, kvi_error *err)
{
    if (!s || !drafts || s->n_hist < 1) return err_set(err, KVI_E_INVALID, "speculative: draft before begin");
    s->n_cur = 0;
    s->shadow = -1;
    int32_t k = k_max < s->k_now ? k_max : s->k_now;
    if (k > s->p.draft_max) k = s->p.draft_max;
    if (s->k_now == 0) {
        /* paused: an n-gram guess is checked against the next token for free */
        int32_t g;
        if (!s->de && k_max >= 1 && ngram_propose(s, 1, &g) == 1) s->shadow = g;
        return 0;
    }
    if (k < s->p.draft_min) return 0;
    int32_t n = s->de ? draft_propose(s, k, s->cur, err) : ngram_propose(s, k, s->cur);
    if (n < 0) return n;
    if (n < s->p.draft_min) return 0;
    s->n_cur = n;
    memcpy(drafts, s->cur, (size_t)n * sizeof *drafts);
    return n;
}

/* ---- adaptation ---- */

/* Expected tokens per round with per-token acceptance a and k drafts. */
static double expected_tokens(double a, int32_t k)
{
    if (a >= 1.0) return (double)k + 1.0;
    return (1.0 - pow(a, (double)k + 1.0)) / (1.0 - a);
}

static double round_cost(const kvi_spec *s, int32_t k)
{
    return 1.0 + (double)k * (s->cost_row + s->cost_draft);
}

/* Acceptance at which k drafts per round give exactly the plain speed. */
static double break_even(const kvi_spec *s, int32_t k)
{
    const double c = round_cost(s, k);
    if (expected_tokens(1.0, k) <= c) return 1.0;
    double lo = 0.0, hi = 1.0;
    for (int it = 0; it < 50; it++) {
        double mid = 0.5 * (lo + hi);
        if (expected_tokens(mid, k) < c)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

static void adapt_observe(kvi_spec *s, int32_t accepted, int32_t trials)
{
    s->acc_w = SPEC_EMA_DECAY * s->acc_w + (double)accepted;
    s->trial_w = SPEC_EMA_DECAY * s->trial_w + (double)trials;
}

/* Picks K for the next round: the k maximising tokens per unit cost, or a pause. */
static void adapt_choose(kvi_spec *s, bool observed)
{
    if (!s->p.adapt) {
        s->k_now = s->p.draft_max;
        return;
    }
    if (s->k_now == 0 && !observed) {
        /* paused without news: count down, then probe with a short draft */
        if (s->pause_left > 0) s->pause_left--;
        if (s->pause_left == 0) s->k_now = s->p.draft_min > 2 ? s->p.draft_min : 2;
        return;
    }
    if (!observed) return;
    const double a = s->acc_w / s->trial_w;
    int32_t best_k = 0;
    double best = 1.0;
    for (int32_t k = s->p.draft_min; k <= s->p.draft_max; k++) {
        double v = expected_tokens(a, k) / round_cost(s, k);
        if (v > best * (1.0 + 1e-9)) {
            best = v;
            best_k = k;
        }
    }
    if (best_k > 0) {
        s->k_now = best_k;
        s->pause_len = SPEC_PAUSE_MIN;
    } else if (s->k_now > 0) {
        s->k_now = 0;
        s->pause_left = s->pause_len;
        if (s->pause_len < SPEC_PAUSE_MAX) s->pause_len *= 2;
    }
}

/* ---- verification ---- */

static int emit(kvi_spec *s, kvi_sampler *smp, int32_t t, int32_t *out, int32_t *m)
{
    out[(*m)++] = t;
    kvi_sampler_accept(smp, t);
    s->n_generated++;
    return hist_push(s, t);
}

int32_t kvi_spec_verify(kvi_spec *s, kvi_sampler *smp, const float *const *logits, int32_t n_draft,
                        int32_t *out, kvi_error *err)
{
    if (!s || !smp || !logits || !out) return err_set(err, KVI_E_INVALID, "speculative: missing argument");
    if (n_draft < 0 || n_draft > s->n_cur)
        return err_set(err, KVI_E_INVALID, "speculative: %d drafts verified but %d were proposed",
                       (int)n_draft, (int)s->n_cur);
    for (int32_t i = 0; i <= n_draft; i++)
        if (!logits[i]) return err_set(err, KVI_E_INVALID, "speculative: no logits for row %d", (int)i);
    const int32_t H0 = s->n_hist;
    const int32_t nv = s->n_vocab;
    int32_t m = 0, accepted = 0;
    bool rejected = false;
    for (int32_t i = 0; i < n_draft && !rejected; i++) {
        if (kvi_sampler_probs(smp, logits[i], s->pt) != 0)
            return err_set(err, KVI_E_INVALID, "speculative: no target distribution");
        const int32_t d = s->cur[i];
        const float *q = s->q ? s->q + (size_t)i * (size_t)nv : NULL;
        const double qd = q ? (double)q[d] : 1.0;
        const double u = rng_uniform(&s->rng);
        int32_t t;
        if (u * qd < (double)s->pt[d]) {
            t = d;
            accepted++;
        } else {
            /* residual max(0, p - q), normalised by the draw */
            if (q) {
                for (int32_t v = 0; v < nv; v++) {
                    float x = s->pt[v] - q[v];
                    s->r[v] = x > 0.0f ? x : 0.0f;
                }
            } else {
                memcpy(s->r, s->pt, (size_t)nv * sizeof *s->r);
                s->r[d] = 0.0f;
            }
            t = kvi_sampler_sample_probs(smp, s->r);
            /* only rounding can empty the residual (p == q is always accepted) */
            if (t < 0) t = kvi_sampler_sample_probs(smp, s->pt);
            if (t < 0) return err_set(err, KVI_E_INVALID, "speculative: empty target distribution");
            rejected = true;
        }
        if (emit(s, smp, t, out, &m) != 0)
            return err_set(err, KVI_E_NOMEM, "out of memory for the token history");
    }
    if (!rejected) {
        int32_t t = kvi_sampler_sample(smp, logits[n_draft]);
        if (t < 0 || t >= nv)
            return err_set(err, KVI_E_INVALID, "speculative: the sampler returned %d", (int)t);
        if (n_draft == 0 && s->shadow >= 0) {
            adapt_observe(s, t == s->shadow, 1);
            s->shadow = -1;
            adapt_choose(s, true);
        } else if (n_draft == 0) {
            adapt_choose(s, false);
        }
        if (emit(s, smp, t, out, &m) != 0)
            return err_set(err, KVI_E_NOMEM, "out of memory for the token history");
    }
    if (n_draft > 0) {
        s->n_spec_rounds++;
        s->n_drafted += (uint64_t)n_draft;
        s->n_accepted += (uint64_t)accepted;
        adapt_observe(s, accepted, accepted + (rejected ? 1 : 0));
        adapt_choose(s, true);
    }
    s->n_rounds++;
    s->n_cur = 0;
    /* the draft keeps the history token it was fed and the accepted drafts */
    if (s->dseq && kvi_seq_len(s->dseq) > H0 + accepted) kvi_seq_truncate(s->dseq, H0 + accepted);
    return m;
}

/* ---- costs ---- */

void kvi_spec_set_costs(kvi_spec *s, double cost_row, double cost_draft)
{
    if (!s) return;
    if (cost_row >= 0.0 && isfinite(cost_row)) s->cost_row = cost_row;
    if (cost_draft >= 0.0 && isfinite(cost_draft)) s->cost_draft = cost_draft;
}

#define SPEC_CAL_REPS_MAX 15

/* Times one step of `rows` rows at the end of seq (token t repeated) plus the
 * per-row sampling work of a verification, then rolls it back. */
static int time_rows(kvi_engine *e, kvi_seq *seq, kvi_batch *b, kvi_sampler *smp, float *probs, int32_t t,
                     int32_t rows, double *ms, kvi_error *err)
{
    const int32_t L = kvi_seq_len(seq);
    kvi_batch_clear(b);
    for (int32_t i = 0; i < rows; i++) kvi_batch_add(b, seq, t, L + i, true);
    double t0 = kvi_time_ms();
    int rc = kvi_step(e, b, err);
    if (rc == 0 && smp) {
        for (int32_t i = 0; i + 1 < rows; i++) kvi_sampler_probs(smp, kvi_logits(e, i), probs);
        kvi_sampler_sample(smp, kvi_logits(e, rows - 1));
    }
    *ms = kvi_time_ms() - t0;
    kvi_seq_truncate(seq, L);
    return rc;
}

int kvi_spec_calibrate(kvi_spec *s, kvi_engine *target, kvi_seq *seq, int reps, kvi_error *err)
{
    if (!s || !target || !seq)
        return err_set(err, KVI_E_INVALID, "speculative: calibrate needs an engine and a sequence");
    if (reps < 1) reps = 1;
    if (reps > SPEC_CAL_REPS_MAX) reps = SPEC_CAL_REPS_MAX;
    const int32_t K = s->p.draft_max;
    const int32_t L = kvi_seq_len(seq);
    if (L < 1 || L + K + 1 > kvi_engine_n_ctx(target))
        return err_set(err, KVI_E_CONTEXT_FULL, "speculative: no room to calibrate %d rows after position %d",
                       (int)(K + 1), (int)L);
    const int32_t t = s->n_hist > 0 ? s->hist[s->n_hist - 1] : 0;
    kvi_batch *b = kvi_batch_create(K + 1);
    kvi_sampler_params sp = s->sp;
    sp.repeat_penalty = 1.0f;
    kvi_sampler *smp = kvi_sampler_create(&sp, s->n_vocab);
    if (!b || !smp) {
        kvi_batch_free(b);
        kvi_sampler_free(smp);
        return err_set(err, KVI_E_NOMEM, "out of memory for calibration");
    }
    double t1[SPEC_CAL_REPS_MAX], tk[SPEC_CAL_REPS_MAX], td[SPEC_CAL_REPS_MAX], warm;
    int rc = time_rows(target, seq, b, smp, s->pt, t, 1, &warm, err); /* warm-up */
    for (int i = 0; rc == 0 && i < reps; i++) {
        rc = time_rows(target, seq, b, smp, s->pt, t, 1, &t1[i], err);
        if (rc == 0) rc = time_rows(target, seq, b, smp, s->pt, t, K + 1, &tk[i], err);
        td[i] = 0.0;
        if (rc == 0 && s->de && kvi_seq_len(s->dseq) < kvi_engine_n_ctx(s->de))
            rc = time_rows(s->de, s->dseq, s->dbatch, s->dsmp, s->r, t, 1, &td[i], err);
    }
    if (rc == 0) {
        double m1 = stats_median(t1, reps), mk = stats_median(tk, reps), md = stats_median(td, reps);
        if (m1 > 0.0) {
            double row = (mk / m1 - 1.0) / (double)K;
            s->cost_row = row > 0.0 ? row : 0.0;
            s->cost_draft = s->de ? md / m1 : 0.0;
        }
    }
    kvi_batch_free(b);
    kvi_sampler_free(smp);
    return rc;
}

void kvi_spec_stats_get(const kvi_spec *s, kvi_spec_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!s) return;
    out->n_rounds = s->n_rounds;
    out->n_spec_rounds = s->n_spec_rounds;
    out->n_drafted = s->n_drafted;
    out->n_accepted = s->n_accepted;
    out->n_generated = s->n_generated;
    out->acceptance = s->n_drafted > 0 ? (double)s->n_accepted / (double)s->n_drafted : 0.0;
    out->alpha = s->acc_w / s->trial_w;
    out->k_now = s->k_now;
    out->k_max = s->p.draft_max;
    out->cost_row = s->cost_row;
    out->cost_draft = s->cost_draft;
    out->break_even = break_even(s, s->p.draft_max);
    const int32_t k = s->k_now;
    out->est_speedup = expected_tokens(out->alpha, k) / round_cost(s, k);
}
