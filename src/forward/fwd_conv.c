/*
 * fwd_conv.c — the causal depthwise conv of a recurrent layer over a pass's rows
 * (fwd_conv.h). The states are read through prev / last only: a row's taps read the
 * raw inputs of earlier rows of its sequence in this pass, then its conv state; the
 * new state is written once every output of the thread's channels is computed.
 */
#include "forward/fwd_conv.h"

#include "kernels/ssm.h"

#include <string.h>

void fwd_conv_link(float *const *state, const int32_t *pos, int n, size_t state_floats, int *prev,
                   uint8_t *last)
{
    for (int r = 0; r < n; r++) {
        if (pos[r] == 0) memset(state[r], 0, state_floats * sizeof(float));
        prev[r] = -1;
        last[r] = 1;
        for (int j = r - 1; j >= 0; j--) /* rows of one sequence usually follow each other */
            if (state[j] == state[r]) {
                prev[r] = j;
                last[j] = 0;
                break;
            }
    }
}

/* Where row r's input from `back` positions earlier is (0 <= back < K): the input
 * of an earlier row of its sequence in this pass, or (before its first row here) a
 * row of its conv state, which holds the K - 1 positions before that row. */
static const float *conv_src(const fwd_conv_rows *t, int r, int back)
{
    int j = r;
    for (int b = 0; b < back; b++) {
        if (t->prev[j] < 0) return t->state[r] + (size_t)(t->K - 1 - (back - b)) * t->C;
        j = t->prev[j];
    }
    return t->p + (size_t)j * t->ldp;
}

void fwd_conv_part(const fwd_conv_rows *t, int ith, int nth)
{
    const int K = t->K, C = t->C;
    const float *src[64]; /* [K] (K <= 64: model_check_hparams) */
    int c0, c1;
    tpool_share(C, ith, nth, &c0, &c1);
    for (int r = 0; r < t->n; r++) {
        for (int k = 0; k < K; k++) src[k] = conv_src(t, r, K - 1 - k);
        kern_ssm_conv_ref(src, t->w, t->b, K, c0, c1, t->out + (size_t)r * C);
        if (t->snap && t->snap[r]) /* the state as it is after row r */
            for (int i = 0; i < K - 1; i++)
                memcpy(t->snap[r] + (size_t)i * C + c0, src[i + 1] + c0, (size_t)(c1 - c0) * sizeof(float));
    }
    /* the new states, from each sequence's last row (read before any is written:
     * a state row may be the source of another) */
    for (int r = 0; r < t->n; r++) {
        if (!t->last[r]) continue;
        for (int k = 0; k < K - 1; k++) src[k] = conv_src(t, r, K - 2 - k);
        for (int k = 0; k < K - 1; k++) /* oldest first: a source is never a row already written */
            if (src[k] != t->state[r] + (size_t)k * C)
                memcpy(t->state[r] + (size_t)k * C + c0, src[k] + c0, (size_t)(c1 - c0) * sizeof(float));
    }
}
