/*
 * policy_error.c — the default context policy: nothing is evicted; a
 * sequence that would pass its context size gets KVI_E_CONTEXT_FULL
 * ("context_length_exceeded").
 */
#include "kv/policy/policy.h"

#include "base/error.h"

static int32_t select_error(const kv_policy_params *pp, int32_t n_pos, int32_t n_needed, const float *recv,
                            int32_t *keep, kvi_error *err)
{
    return err_set(err, KVI_E_CONTEXT_FULL,
                   "context_length_exceeded: %d positions held + %d needed > context size %d "
                   "(policy error)",
                   n_pos, n_needed, pp->n_ctx);
}

const kv_policy kv_policy_error = { "error", false, select_error };
