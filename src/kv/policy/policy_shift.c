/*
 * policy_shift.c — context shift (llama.cpp's "context shift"): keep the
 * first n_keep positions, drop the oldest half of the rest (more if n_needed
 * demands it), keep everything after.
 */
#include "kv/policy/policy.h"

#include "base/error.h"

static int32_t select_shift(const kv_policy_params *pp, int32_t n_pos, int32_t n_needed, const float *recv,
                            int32_t *keep, kvi_error *err)
{
    const int32_t n_keep = pp->n_keep < n_pos ? pp->n_keep : n_pos;
    const int32_t rest = n_pos - n_keep;
    int32_t drop = rest / 2;
    if (n_pos - drop + n_needed > pp->n_ctx) drop = n_pos + n_needed - pp->n_ctx;
    if (drop <= 0 || drop > rest)
        return err_set(err, KVI_E_CONTEXT_FULL,
                       "context_length_exceeded: shift cannot make room for %d positions "
                       "(keep %d of context %d)",
                       n_needed, pp->n_keep, pp->n_ctx);
    int32_t n = 0;
    for (int32_t i = 0; i < n_keep; i++) keep[n++] = i;
    for (int32_t i = n_keep + drop; i < n_pos; i++) keep[n++] = i;
    return n;
}

const kv_policy kv_policy_shift = { "shift", false, select_shift };
