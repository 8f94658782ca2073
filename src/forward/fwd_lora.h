/*
 * fwd_lora.h — the LoRA terms of a batch of rows, each row with its own adapter set
 * (model/lora.h): y[i] += sum_k s_ik B_k (A_k x[i]) over the adapters k of row i's
 * set, in the set's order.
 *
 * Rows are gathered by adapter (Punica's segmented products): for slot k of the sets,
 * the rows whose k-th adapter is the same go through A and B together, in groups of
 * at most FWD_LORA_ROWS. Each product is kern_matmul, whose rows are independent of
 * the other rows in the call, and a row's terms add in its set's order: a row gives
 * the same bits alone or in any batch.
 */
#ifndef KVI_FWD_LORA_H
#define KVI_FWD_LORA_H

#include "model/lora.h"
#include "base/threadpool.h"

typedef struct fwd_lora fwd_lora;

/* Scratch for calls of up to n_rows_max rows on model m; *bytes grows by its size. */
fwd_lora *fwd_lora_create(const struct kvi_model *m, int n_rows_max, size_t *bytes);
void fwd_lora_free(fwd_lora *s);

/* y[i * ldy + j] += the LoRA terms of matrix w of layer l (expert e of an expert
 * matrix, else e ignored) for input rows x [n][ldx], row i with set sets[i] (NULL:
 * none); sets NULL: nothing to do. 0, or the product's error. */
int fwd_lora_add(fwd_lora *s, tpool *pool, const lora_set *const *sets, int l, lora_mat w, int e,
                 const float *x, int64_t ldx, int n, float *y, int64_t ldy);

#endif
