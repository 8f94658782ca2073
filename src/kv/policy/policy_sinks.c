/*
 * policy_sinks.c — StreamingLLM: the first n_sink positions ("attention
 * sinks") plus a sliding window of the most recent positions. The window is
 * n_window when given, else everything that fits; it is never larger than
 * n_ctx - n_sink - n_needed. Memory stays constant once the window is full.
 */
#include "kv/policy/policy.h"

#include "base/error.h"

static int32_t select_sinks(const kv_policy_params *pp, int32_t n_pos, int32_t n_needed, const float *recv,
                            int32_t *keep, kvi_error *err)
{
    const int32_t n_sink = pp->n_sink < n_pos ? pp->n_sink : n_pos;
    int32_t win = pp->n_ctx - n_sink - n_needed;
    if (pp->n_window > 0 && pp->n_window < win) win = pp->n_window;
    if (win < 0 || n_sink + n_needed > pp->n_ctx)
        return err_set(err, KVI_E_CONTEXT_FULL,
                       "context_length_exceeded: sinks cannot make room for %d positions "
                       "(%d sinks, context %d)",
                       n_needed, pp->n_sink, pp->n_ctx);
    if (win > n_pos - n_sink) win = n_pos - n_sink;
    int32_t n = 0;
    for (int32_t i = 0; i < n_sink; i++) keep[n++] = i;
    for (int32_t i = n_pos - win; i < n_pos; i++) keep[n++] = i;
    return n;
}

const kv_policy kv_policy_sinks = { "sinks", false, select_sinks };
