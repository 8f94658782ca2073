/*
 * fwd_mamba2.h — the Mamba-2 mixer of a recurrent layer (granitehybrid, nemotron_h,
 * falcon-h1) over a chunk of rows, and the state it keeps per sequence and layer.
 *
 * State of one sequence in one Mamba-2 layer (f32, model_state_layer_floats):
 *
 *     conv [K - 1][C]        the last K - 1 raw x B C inputs (before the conv),
 *                            C = d_inner + 2 G N
 *     S    [n_h][P][N]       per head h, channel p, the N state dims (N fastest)
 *
 * with P = d_inner / n_h. A row at position 0 starts from zeros, any other row
 * continues the state its sequence's previous position left.
 */
#ifndef KVI_FWD_MAMBA2_H
#define KVI_FWD_MAMBA2_H

#include "base/threadpool.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fwd_mamba2 fwd_mamba2;

/* Scratch for parts of up to `chunk` rows (fwd_mamba2_run takes any n, a part at a
 * time: the same bits). */
fwd_mamba2 *fwd_mamba2_create(const struct kvi_model *m, int chunk, size_t *bytes);
void fwd_mamba2_free(fwd_mamba2 *d);

/* The mixer of layer L for rows xb [n][dim] (the normed input) into y [n][dim], as
 * fwd_delta_run (fwd_delta.h): state[r] row r's sequence's layer state, pos[r] its
 * position, snap[r] where the state after row r goes (NULL: none). Every value is
 * computed in a fixed order whatever the batch and thread count. y may be xb. */
int fwd_mamba2_run(fwd_mamba2 *d, tpool *pool, const struct kvi_model *m, const model_layer *L,
                   const float *xb, int n, float *const *state, const int32_t *pos, float *const *snap,
                   float *y);

#endif
