/*
 * policy.h — what a sequence keeps when it reaches its context size.
 *
 * A policy only CHOOSES: given a sequence of n_pos cached positions that needs
 * n_needed more within n_ctx, it writes the positions to keep (strictly
 * increasing) into keep[], or refuses. kv_policy_apply() then does the moving,
 * the same for every policy: kept position keep[i] becomes position i, its keys
 * re-rotated by RoPE for the delta i - keep[i], so that "RoPE position == cache
 * index" and "a row at position p attends to 0..p" stay true. Blocks other
 * sequences share are copied before anything in them moves; positions before
 * the first moved one keep their blocks (shared prefixes count as kept).
 *
 * Adding a policy: one file kv_policy_<name>.c defining a kv_policy, and one
 * line in the registry of policy.c.
 */
#ifndef KVI_KV_POLICY_H
#define KVI_KV_POLICY_H

#include "kv/kv_cache.h"

struct kvi_model;

typedef struct kv_policy_params {
    int32_t n_ctx;    /* positions the sequence may hold */
    int32_t n_keep;   /* shift: first tokens never dropped */
    int32_t n_sink;   /* sinks, heavy: first tokens never dropped */
    int32_t n_window; /* sinks: recent tokens kept (0: all that fit); heavy: recent window (0: a quarter) */
    int32_t block_size;
} kv_policy_params;

typedef struct kv_policy {
    const char *name;
    bool needs_recv; /* wants the attention each position received, accumulated */
    /* Writes the positions to keep into keep[] (room for n_pos) and returns how
     * many, at most n_ctx - n_needed; or a negative KVI_E_* code with err set.
     * recv: [n_pos] accumulated received attention, or NULL. */
    int32_t (*select)(const kv_policy_params *pp, int32_t n_pos, int32_t n_needed, const float *recv,
                      int32_t *keep, kvi_error *err);
} kv_policy;

extern const kv_policy kv_policy_error, kv_policy_shift, kv_policy_sinks, kv_policy_heavy;

/* The policy of that name, NULL when unknown. */
const kv_policy *kv_policy_find(const char *name);
/* "error, shift, sinks, heavy" (for messages). */
const char *kv_policy_names(void);

/* The rotary embedding the cached keys carry (the model's, as the engine reads it):
 * moving a key by delta positions rotates it by delta more. */
typedef struct kv_rope {
    int n_rot;          /* rotated dimensions per head (<= head_dim, even) */
    int head_dim;       /* floats per head in a kv_dim row */
    int n_kv_heads;     /* heads per row: kv_dim = n_kv_heads * head_dim */
    float theta;        /* frequency base */
    bool neox;          /* pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    const float *freqs; /* [n_rot/2] frequency divisors, or NULL */
} kv_rope;

/* Moves keep[i] -> i for i < n_keep (see above), truncates the table to n_keep
 * and marks it no_index. tokens follow their rows; recv ([n_pos] or NULL) too.
 * KVI_E_NO_KV_SPACE when a shared block cannot be copied (the sequence is then
 * unchanged apart from blocks made private). */
int kv_policy_apply(kv_pool *p, kv_table *t, const kv_rope *m, const int32_t *keep, int32_t n_keep,
                    float *recv, kvi_error *err);

#endif
