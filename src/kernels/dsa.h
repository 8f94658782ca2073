/*
 * dsa.h — DeepSeek Sparse Attention's kernels (forward/fwd_dsa.h): the lightning
 * indexer's scores, the top-k choice of positions as llama.cpp's TOP_K makes it, and
 * softmax attention over a gathered set of cache rows.
 *
 *   scores:  I(s) = sum_j w[j] relu(q[j] . k[s])   q [IH][ID], w [IH], k [n][ID]
 *            heads summed in order j = 0..IH-1, each dot by kern_delta_dot (its fixed
 *            order of operations), so one query's scores have the same bits whatever
 *            the batch.
 *   top-k:   ggml's CPU TOP_K (Aug 2026) runs std::partial_sort over the indices
 *            0..n-1 with "a before b when v[a] > v[b]"; libstdc++ implements it as a
 *            heap selection (make_heap over the first k indices, then each later index
 *            i replaces the heap's top when v[i] > v[top]). Which of equal scores
 *            survive follows from that heap's exact moves, so kern_dsa_topk performs
 *            the same moves (libstdc++'s __make_heap, __adjust_heap, __push_heap,
 *            __pop_heap) to keep the same set, ties included.
 *   attend:  one head: s_i = (q . row_i) scale, p = softmax(s) (max subtracted, sums in
 *            order i = 0..n-1), out = sum_i p_i row_i; rows in the order given.
 */
#ifndef KVI_KERNELS_DSA_H
#define KVI_KERNELS_DSA_H

#include <stdint.h>

/* out [n] = the indexer scores of query q [ih][id] with head weights w [ih] over keys
 * k [n][id] (rows ld floats apart). */
void kern_dsa_scores(const float *q, const float *w, int ih, int id, const float *k, int64_t ld, int n,
                     float *out);
/* The k largest of v [n] as ggml's TOP_K chooses them (ties as it breaks them) into
 * sel [k] (in no useful order); all n indices when n <= k. Returns how many. */
int kern_dsa_topk(const float *v, int n, int k, int32_t *sel);
/* One head's attention over rows [n][hd] (ld floats apart): out [hd]. */
void kern_dsa_attend(const float *q, const float *rows, int64_t ld, int n, int hd, float scale, float *out);

#endif
