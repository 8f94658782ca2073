/*
 * policy_heavy.c — H2O ("heavy hitters"): keep the first n_sink positions,
 * a recent window (n_window, default a quarter of the context), and fill the
 * rest of n_ctx - n_needed with the middle positions that received the most
 * attention so far (recv, accumulated over decode steps, layers and heads;
 * ties go to the more recent position). Without scores it keeps the newest.
 */
#include "kv/policy/policy.h"

#include "base/error.h"

#include <stdlib.h>

typedef struct scored {
    float score;
    int32_t pos;
} scored;

static int by_score_desc(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->pos > y->pos ? -1 : (x->pos < y->pos);
}

static int by_pos(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int32_t select_heavy(const kv_policy_params *pp, int32_t n_pos, int32_t n_needed, const float *recv,
                            int32_t *keep, kvi_error *err)
{
    const int32_t budget = pp->n_ctx - n_needed;
    const int32_t n_sink = pp->n_sink < n_pos ? pp->n_sink : n_pos;
    int32_t win = pp->n_window > 0 ? pp->n_window : pp->n_ctx / 4;
    if (win > budget - n_sink) win = budget - n_sink;
    if (budget < n_sink || win < 0)
        return err_set(err, KVI_E_CONTEXT_FULL,
                       "context_length_exceeded: heavy cannot make room for %d positions "
                       "(%d sinks, context %d)",
                       n_needed, pp->n_sink, pp->n_ctx);
    if (win > n_pos - n_sink) win = n_pos - n_sink;
    const int32_t mid0 = n_sink, mid1 = n_pos - win; /* candidates [mid0, mid1) */
    int32_t n_heavy = budget - n_sink - win;
    if (n_heavy > mid1 - mid0) n_heavy = mid1 - mid0;
    int32_t n = 0;
    for (int32_t i = 0; i < n_sink; i++) keep[n++] = i;
    if (n_heavy > 0) {
        scored *c = malloc((size_t)(mid1 - mid0) * sizeof *c); /* [mid1 - mid0] */
        if (!c) return err_set(err, KVI_E_NOMEM, "heavy policy: out of memory");
        for (int32_t i = mid0; i < mid1; i++) c[i - mid0] = (scored){ recv ? recv[i] : 0.0f, i };
        qsort(c, (size_t)(mid1 - mid0), sizeof *c, by_score_desc);
        for (int32_t i = 0; i < n_heavy; i++) keep[n + i] = c[i].pos;
        qsort(keep + n, (size_t)n_heavy, sizeof *keep, by_pos);
        n += n_heavy;
        free(c);
    }
    for (int32_t i = mid1; i < n_pos; i++) keep[n++] = i;
    return n;
}

const kv_policy kv_policy_heavy = { "heavy", true, select_heavy };
