/*
 * sampler_int.h — the sampler's layout, shared by its files (sampler.c: the
 * chain driver; sampler_filters.c: the stateless filters; sampler_repeat.c:
 * penalties and DRY; sampler_order.c: chain order, names and mirostat) and what
 * tests may reach beyond kvinfer.h.
 *
 * The chain works, like llama.cpp's, on an array of candidates (id, logit, p):
 * cand[0 .. n_cand), at first every token in id order. Filters either shorten
 * the array or set a logit to -inf (the entry stays, with p 0). `sorted` says
 * cand is in descending logit order (ties: lower id first); `ident` says
 * cand[i].id == i for every i < n_cand == n_vocab (nothing reordered yet).
 * p is valid only right after a softmax (softmax_cands); later filters leave it
 * stale, the final one recomputes it.
 *
 * History: hist is a ring of the last hist_cap accepted tokens (n_hist pushed
 * in all): the k-th most recent is hist[(n_hist - 1 - k) % hist_cap]. counts[t]
 * (when the penalties are on) is the occurrences of t among the last
 * repeat_last_n of them.
 *
 * sampler_set_reference(s, true) makes every later call take the reference
 * chain (the whole row copied into the candidates, then each filter), so a test
 * can compare the fast paths with it on the same logits and seed.
 */
#ifndef KVI_SAMPLER_INTERNAL_H
#define KVI_SAMPLER_INTERNAL_H

#include "base/rng.h"
#include "kvinfer.h"

#include <stdbool.h>
#include <stdint.h>

/* The kinds of sampler in a chain, llama.cpp's set. */
typedef enum smp_kind {
    SMP_PENALTIES,
    SMP_DRY,
    SMP_TOP_N_SIGMA,
    SMP_TOP_K,
    SMP_TYPICAL,
    SMP_TOP_P,
    SMP_MIN_P,
    SMP_XTC,
    SMP_TEMP_EXT, /* temperature with dynamic temperature */
    SMP_TEMP,     /* plain temperature (mirostat chains) */
    SMP_MIROSTAT,
    SMP_MIROSTAT_V2,
    SMP_DIST,
    SMP_KIND_N
} smp_kind;

/* What XTC does about its coin in one run of the chain. */
typedef enum smp_xtc_mode { XTC_COIN, XTC_FIRE, XTC_SKIP } smp_xtc_mode;

#define SMP_CHAIN_MAX (KVI_SAMPLERS_MAX + 2)
#define SMP_BREAKER_TAIL_MAX 20 /* llama.cpp's MAX_SEQ_LEN */
#define SMP_BREAKER_CHARS 40    /* llama.cpp's MAX_CHAR_LEN */

typedef struct smp_cand {
    int32_t id;
    float logit;
    float p;
} smp_cand;

/* One DRY sequence breaker: head token, then n_tail tokens (0: the head alone). */
typedef struct smp_breaker {
    int32_t head;
    int32_t n_tail;
    int32_t tail[SMP_BREAKER_TAIL_MAX];
} smp_breaker;

struct kvi_sampler {
    kvi_sampler_params p;
    int32_t n_vocab;
    uint8_t chain[SMP_CHAIN_MAX]; /* smp_kind, the last one dist or mirostat */
    int n_chain;
    smp_cand *cand; /* (n_vocab) the working array */
    int32_t n_cand;
    bool sorted, ident;
    smp_cand *tmp;  /* (n_vocab) top-k heap, typical's reordering */
    uint32_t *seen; /* (n_vocab) stamps: a penalty once per distinct token */
    uint32_t stamp;
    int32_t *hist;    /* (hist_cap) ring of accepted tokens */
    int32_t hist_cap; /* max(repeat_last_n + 1, dry_penalty_last_n, 1) */
    int64_t n_hist;
    int32_t *counts; /* (n_vocab) over the last repeat_last_n; NULL: penalties off */
    /* DRY: breakers sorted by head; window scratch (dry_penalty_last_n each) */
    smp_breaker *brk;
    int32_t n_brk;
    int32_t *dry_win, *dry_z, *dry_touched;
    int32_t *dry_len;        /* (n_vocab) 1 + longest repeat a token would extend; 0: none */
    float mu;                /* mirostat */
    bool mu_ready;           /* the last chain run was mirostat's: cand holds its p */
    bool reference;          /* always the reference chain (tests) */
    kvi_grammar_matcher *gm; /* owned; NULL: unconstrained */
    uint32_t *mask;          /* [(n_vocab + 31) / 32] */
    int32_t *bias_ids;       /* [n_bias] */
    float *bias_vals;        /* [n_bias] */
    int32_t n_bias;
    float *work;   /* [n_vocab] biased, masked logits */
    rng_state rng; /* seeded from p.seed at create */
};

void sampler_set_reference(kvi_sampler *s, bool on);

/* sampler_filters.c: each works on s->cand[0 .. s->n_cand). */
bool cand_before(const smp_cand *a, const smp_cand *b);
void sort_cands(kvi_sampler *s);
void softmax_cands(kvi_sampler *s, bool sort);
void top_k_cands(kvi_sampler *s, int32_t k);
int32_t top_k_direct(kvi_sampler *s, const float *logits, int32_t k);
void top_p_cands(kvi_sampler *s, float p, int32_t min_keep);
void min_p_cands(kvi_sampler *s, float p, int32_t min_keep);
void typical_cands(kvi_sampler *s, float p, int32_t min_keep);
void top_n_sigma_cands(kvi_sampler *s, float n);
void xtc_cands(kvi_sampler *s, smp_xtc_mode mode);
void temp_cands(kvi_sampler *s, float t);
void temp_ext_cands(kvi_sampler *s);

/* sampler_repeat.c: penalties and DRY over the history. */
bool penalties_on(const kvi_sampler_params *p);
bool dry_on(const kvi_sampler_params *p);
int repeat_alloc(kvi_sampler *s);
void repeat_free(kvi_sampler *s);
void hist_push(kvi_sampler *s, int32_t token);
bool penalties_active(const kvi_sampler *s);
bool dry_active(const kvi_sampler *s);
void penalties_cands(kvi_sampler *s);
void dry_cands(kvi_sampler *s);

/* sampler_order.c: the chain's order and names, mirostat. */
void chain_build(kvi_sampler *s);
bool chain_entry_on(const kvi_sampler *s, smp_kind k);
void mirostat_cands(kvi_sampler *s);
void mirostat_v2_cands(kvi_sampler *s);
void mirostat_update(kvi_sampler *s, int32_t token);

#endif
