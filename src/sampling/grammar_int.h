/*
 * grammar_int.h — the compiled GBNF grammar and the matcher's state, shared by
 * grammar_parse.c (text -> kvi_grammar), grammar_match.c (stack sets over code
 * points and bytes) and grammar_mask.c (token masks). Tests may include it.
 *
 * A compiled grammar is flat:
 *   elems  [n_elems]  gr_elem   every alternative of every rule, each a run of
 *                               GR_CHAR / GR_REF elements closed by one GR_END
 *   alts   [n_alts]   uint32    index in elems of each alternative's first element
 *   rules  [n_rules]  gr_rule   alts[alt_first .. alt_first + n_alts) are its alternatives
 *   sets   [n_sets]   gr_set    a GR_CHAR's arg: code point ranges ranges[2*first ..
 *                               2*(first+n)) as sorted, disjoint, non-adjacent [lo, hi]
 *                               pairs (negation resolved at parse), plus an ASCII bitmap
 * Invariants: every GR_REF's arg < n_rules and that rule has >= 1 alternative; no
 * rule is left-recursive (checked at parse), so expanding a stack terminates;
 * groups and repetitions are desugared into generated rules, so a matcher sees
 * only these three kinds.
 *
 * A matcher state (gm_state) is a set of stacks of element positions. Each stack is
 * stored as [n, p0 .. p(n-1)] in buf (p(n-1) the top); a non-empty stack's top is a
 * GR_CHAR; the empty stack (n = 0) means "the grammar is complete here". Stacks are
 * distinct within a state and kept in the order they were produced. `need` > 0 when
 * a UTF-8 sequence of `slen` bytes is half read: `cp` holds its bits so far (only
 * shortest forms of scalar values are taken: no overlong forms, no surrogates). `dead`: no stack left
 * (or a bound was exceeded): nothing more can be accepted.
 */
#ifndef KVI_GRAMMAR_INT_H
#define KVI_GRAMMAR_INT_H

#include "kvinfer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { GR_END = 0, GR_CHAR = 1, GR_REF = 2 };

/* Bounds on untrusted grammars and on a matcher's growth. */
#define GR_MAX_TEXT (1u << 20)   /* bytes of GBNF text */
#define GR_MAX_RULES 20000u      /* rules, generated ones included */
#define GR_MAX_ELEMS (1u << 20)  /* elements over all rules */
#define GR_MAX_RANGES (1u << 20) /* code point ranges over all sets */
#define GR_MAX_NEST 64           /* ( ) nesting in the text */
#define GR_MAX_REPEAT 1000       /* m and n of {m,n} */
#define GM_MAX_STACKS 4096       /* stacks in one state */
#define GM_MAX_DEPTH 1024        /* positions in one stack */
#define GM_MAX_LEVEL 1024        /* rule references followed without consuming */
#define GM_MAX_EXPAND (1u << 18) /* expansion steps in one advance */

typedef struct gr_elem {
    uint32_t kind; /* GR_END, GR_CHAR, GR_REF */
    uint32_t arg;  /* set index (GR_CHAR), rule id (GR_REF) */
} gr_elem;

typedef struct gr_set {
    uint32_t first, n; /* ranges[2*first .. 2*(first+n)) */
    uint64_t ascii[2]; /* bit c set when code point c < 128 is in the set */
} gr_set;

typedef struct gr_rule {
    uint32_t alt_first, n_alts;
} gr_rule;

struct kvi_grammar {
    gr_elem *elems;
    uint32_t n_elems;
    uint32_t *alts;
    uint32_t n_alts;
    gr_rule *rules;
    uint32_t n_rules;
    gr_set *sets;
    uint32_t n_sets;
    uint32_t *ranges; /* [2 * n_ranges] */
    uint32_t n_ranges;
    uint32_t root;
};

typedef struct gm_state {
    uint32_t *buf; /* [len] stacks as [n, p0 .. p(n-1)] */
    size_t len, cap;
    uint32_t n_stacks;
    uint32_t cp;  /* bits of a half-read UTF-8 sequence */
    uint8_t need; /* continuation bytes still expected */
    uint8_t slen; /* length of the half-read sequence (2 .. 4), 0 when none */
    bool dead;
} gm_state;

/* Scratch of one thread advancing states: the stack being emitted, and a hash
 * set of the stacks emitted into the current output (entries stamped with the
 * advance they belong to, so it is never cleared between advances). */
#define GM_HASH_CAP (4 * GM_MAX_STACKS)
typedef struct gm_scratch {
    uint32_t *stk;  /* [GM_MAX_DEPTH + 1] */
    uint64_t *hash; /* [GM_HASH_CAP] (stamp << 32) | offset into the output buf */
    uint32_t stamp;
    uint32_t n_expand; /* expansions in this advance (bounded) */
} gm_scratch;

/* Set membership of code point c. */
bool gr_set_has(const kvi_grammar *g, uint32_t set, uint32_t c);
/* Whether the set meets [lo, hi]. */
bool gr_set_meets(const kvi_grammar *g, uint32_t set, uint32_t lo, uint32_t hi);

int gm_scratch_init(gm_scratch *sc);
void gm_scratch_free(gm_scratch *sc);
void gm_state_free(gm_state *st);
/* dst = src (dst's buffer reused). 0 or KVI_E_NOMEM. */
int gm_state_copy(gm_state *dst, const gm_state *src);
bool gm_state_equal(const gm_state *a, const gm_state *b);
uint64_t gm_state_hash(const gm_state *st);
/* The state before any input: the root rule's alternatives expanded. */
int gm_state_init(const kvi_grammar *g, gm_state *st, gm_scratch *sc);
/* out = in after one byte; returns true when out is alive (not dead). */
bool gm_advance_byte(const kvi_grammar *g, const gm_state *in, uint8_t b, gm_state *out, gm_scratch *sc);
/* The grammar is complete: an empty stack and no half-read code point. */
bool gm_state_accepting(const gm_state *st);

/* The token trie of a vocabulary: node 0 is the root (the empty string). */
typedef struct gv_node {
    uint32_t first_child; /* 0: none (the root is never a child) */
    uint32_t next_sibling;
    uint32_t tok_first, n_tok; /* tokens ending here: toks[tok_first ..) */
    uint8_t byte;
} gv_node;

struct kvi_grammar_vocab {
    int32_t n_vocab;
    uint8_t *bytes;  /* concatenated token strings */
    uint32_t *off;   /* [n_vocab + 1] token t is bytes[off[t] .. off[t+1]) */
    uint8_t *is_eog; /* [n_vocab] */
    gv_node *nodes;  /* [n_nodes] */
    uint32_t n_nodes;
    int32_t *toks;    /* [n_vocab] token ids grouped by trie node */
    uint32_t max_len; /* longest token in bytes */
};

#define GM_CACHE 8 /* masks kept per matcher, keyed by state */
typedef struct gm_cache_entry {
    gm_state key;
    uint64_t hash, used; /* used: 0 when empty, else the tick of the last hit */
    uint32_t *bits;
    int32_t count;
} gm_cache_entry;

/* What one byte does to a state object during one trie walk (bit b of each). */
typedef struct gm_memo {
    uint64_t known[4]; /* the transition on b was computed */
    uint64_t loop[4];  /* ... and gave back the same state */
    uint64_t dead[4];  /* ... and gave no state */
} gm_memo;

struct kvi_grammar_matcher {
    const kvi_grammar *g;
    const kvi_grammar_vocab *v;
    gm_state cur, tmp, tmp2;
    gm_scratch sc;
    gm_state *walk; /* [v->max_len + 2] trie walk: the state after depth d's node */
    uint32_t *it;   /* [v->max_len + 2] trie walk: next child to try at depth d */
    uint32_t *obj;  /* [v->max_len + 2] trie walk: whose state depth d has (0: cur, k: walk[k]) */
    gm_memo *memo;  /* [v->max_len + 2] per state object: its byte transitions seen so far */
    gm_cache_entry cache[GM_CACHE];
    bool cache_on;
    uint64_t tick;
};

/* The mask by brute force: every token's bytes run through the matcher from st
 * (the reference grammar_mask.c's trie walk is tested against). */
int32_t grammar_mask_reference(const kvi_grammar *g, const kvi_grammar_vocab *v, const gm_state *st,
                               uint32_t *bits);
/* The matcher's current state (tests). */
const gm_state *grammar_matcher_state(const kvi_grammar_matcher *m);
/* Turn the per-state mask cache off or on (tests, benchmarks). */
void grammar_matcher_set_cache(kvi_grammar_matcher *m, bool on);

#endif
