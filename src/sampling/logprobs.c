/*
 * logprobs.c — log-probabilities of a row's logits, as OpenAI's API reports
 * them: the log-softmax of the raw logits (no penalty, temperature or filter).
 *
 *   logits   [n_vocab] float   one row of kvi_logits()
 *   top_ids  [k] int32         best tokens, descending logprob, ties by lower id
 *   top_lps  [k] float         their log-probabilities
 *
 * log p(t) = logit[t] - (m + log sum_i exp(logit[i] - m)), m = max logit; the
 * sum runs in double so that the values do not depend on the vocabulary size's
 * rounding. A NaN logit counts as -inf (probability 0). Invariants: every value
 * is <= 0, the top list is sorted, and k <= KVI_LOGPROBS_MAX needs no heap.
 */
#include "kvinfer.h"

#include <math.h>

int32_t kvi_logprobs_top(const float *logits, int32_t n_vocab, int32_t token, int32_t k, float *token_lp,
                         int32_t *top_ids, float *top_lps)
{
    if (!logits || n_vocab < 1 || k < 0 || k > KVI_LOGPROBS_MAX || (k > 0 && (!top_ids || !top_lps)) ||
        (token_lp && (token < 0 || token >= n_vocab)))
        return KVI_E_INVALID;
    float m = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > m) m = logits[i];
    if (m == -INFINITY) m = 0.0f; /* every logit -inf or NaN: nothing is likely */
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] == logits[i]) sum += exp((double)logits[i] - (double)m);
    const double lse = (double)m + log(sum > 0.0 ? sum : 1.0);

    /* top-k by insertion into a sorted list (k is small; most logits fail the
     * first comparison) */
    const int32_t want = k < n_vocab ? k : n_vocab;
    int32_t n = 0;
    float best[KVI_LOGPROBS_MAX]; /* [n] raw logits of top_ids, descending */
    for (int32_t i = 0; i < n_vocab && want > 0; i++) {
        const float x = logits[i] == logits[i] ? logits[i] : -INFINITY;
        if (n == want && !(x > best[n - 1])) continue;
        int32_t j = n < want ? n++ : n - 1;
        while (j > 0 && x > best[j - 1]) {
            best[j] = best[j - 1];
            top_ids[j] = top_ids[j - 1];
            j--;
        }
        best[j] = x;
        top_ids[j] = i;
    }
    for (int32_t j = 0; j < n; j++) top_lps[j] = (float)((double)best[j] - lse);
    if (token_lp) {
        const float x = logits[token] == logits[token] ? logits[token] : -INFINITY;
        *token_lp = (float)((double)x - lse);
    }
    return n;
}
