/*
 * fwd_delta.h — the gated DeltaNet mixer of a recurrent layer (qwen35, qwen3next)
 * over a chunk of rows, and the state layout it keeps per sequence and layer.
 *
 * State of one sequence in one recurrent layer (f32, FWD_DELTA_* below):
 *
 *     conv [K - 1][C]        the last K - 1 raw projections p (before the conv)
 *     S    [Hv][dk][dk]      per value head j, row i (value dim) holds dk key dims:
 *                            S_j^T stored with the key index fastest
 *
 * with C = 2 Hk dk + Hv dk, K = ssm_conv. A row at position 0 starts from zeros
 * (nothing is read from the state), any other row continues the state its
 * sequence's previous position left.
 */
#ifndef KVI_FWD_DELTA_H
#define KVI_FWD_DELTA_H

#include "base/threadpool.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* (one layer's state holds model_state_layer_floats(m) floats, model.h) */

typedef struct fwd_delta fwd_delta;

/* Scratch for parts of up to `chunk` rows (fwd_delta_run takes any n, a part at a
 * time: the same bits). */
fwd_delta *fwd_delta_create(const struct kvi_model *m, int chunk, size_t *bytes);
void fwd_delta_free(fwd_delta *d);

/* The mixer of recurrent layer L for rows xb [n][dim] (the normed input) into
 * y [n][dim]. state[r]: row r's sequence's state of this layer (layout above);
 * pos[r] its position; snap[r] (NULL, or NULL entries: none): where to copy the
 * state as it is right after row r, for prefix snapshots. Rows of one sequence
 * come in position order; each row's result depends only on its own input and
 * its sequence's state, computed in a fixed order (the same bits alone or in any
 * batch, with any thread count). y may be xb (each part's rows are read before
 * they are written). 0 or the first matrix product's error. */
int fwd_delta_run(fwd_delta *d, tpool *pool, const struct kvi_model *m, const model_layer *L, const float *xb,
                  int n, float *const *state, const int32_t *pos, float *const *snap, float *y);

#endif
