/*
 * fwd_dsa.h — DeepSeek Sparse Attention (DeepSeek V3.2, model.h idx_*) of one layer
 * over a chunk of rows: the lightning indexer chooses, for each query, the top_k past
 * positions of its sequence, and the latent attention (fwd_mla.h) reads only those.
 *
 * With IH indexer heads of ID dims ([rope R | nope ID - R]), qa the query's normed
 * q_a row [q_rank] (fwd_mla.h) and xb the layer's normed input:
 *   iq = Wq_b qa                       [IH][ID]   NeoX RoPE on each head's first R dims
 *   ik = LayerNorm(Wk xb) * w + b      [ID]       NeoX RoPE on its first R dims; stored
 *                                                 in the KV pool's indexer rows
 *   wt = Wproj xb / sqrt(ID IH)        [IH]
 *   I(s) = sum_j wt[j] relu(iq[j] . ik(s)),  s = 0..pos (kernels/dsa.h)
 *   sel = the top_k positions of I, ties as llama.cpp's TOP_K (all when pos < top_k)
 *   attention of each head over the latent rows of sel only, in increasing position
 *
 * Every row's result depends only on its own inputs and its sequence's cached rows,
 * through per-row operations in a fixed order (threads split the rows), so a row has
 * the same bits alone or in any batch, and prefill those of token-by-token decode.
 */
#ifndef KVI_FWD_DSA_H
#define KVI_FWD_DSA_H

#include "base/threadpool.h"
#include "kv/kv_cache.h"
#include "model/model.h"

#include <stddef.h>

typedef struct fwd_dsa fwd_dsa;

/* Scratch for chunks of up to `chunk` rows; its bytes are added to *bytes. NULL on
 * allocation failure. */
fwd_dsa *fwd_dsa_create(const struct kvi_model *m, int chunk, size_t *bytes);
void fwd_dsa_free(fwd_dsa *s);

/* The indexer of layer l for rows [n] (xb [n][dim], qa [n][q_rank], RoPE tables rc, rs
 * [n][R / 2]): queries and weights kept for fwd_dsa_attend, each row's key written at
 * its position. 0 or a matrix product's error. */
int fwd_dsa_index(fwd_dsa *s, tpool *pool, const struct kvi_model *m, const model_layer *L, const float *xb,
                  const float *qa, int n, const float *rc, const float *rs, kv_pool *kv, int l,
                  const kv_table *const *tables, const int32_t *pos);
/* The sparse latent attention of layer l: att [n][NH * head_dim] from the queries in
 * cache space q [n][NH * head_dim] (after fwd_dsa_index of the same rows, whose keys
 * and latent rows are written). 0, or KVI_E_NOMEM. */
int fwd_dsa_attend(fwd_dsa *s, tpool *pool, const struct kvi_model *m, const kv_pool *kv, int l,
                   const kv_table *const *tables, const int32_t *pos, int n, const float *q, float *att);

#endif
