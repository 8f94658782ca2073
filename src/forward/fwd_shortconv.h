/*
 * fwd_shortconv.h — LFM2's gated short convolution (lfm2, lfm2moe; model.h
 * shortconv) over a chunk of rows, the mixer of its recurrent layers, and the state
 * it keeps per sequence and layer.
 *
 * State of one sequence in one such layer (f32, model_state_layer_floats floats):
 *
 *     conv [K - 1][dim]    the last K - 1 gated inputs B * x (after the input gate,
 *                          before the convolution), oldest first
 *
 * with K = ssm_conv. A row at position 0 starts from zeros (nothing is read from the
 * state), any other row continues the state its sequence's previous position left.
 */
#ifndef KVI_FWD_SHORTCONV_H
#define KVI_FWD_SHORTCONV_H

#include "base/threadpool.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fwd_shortconv fwd_shortconv;

/* Scratch for parts of up to `chunk` rows (fwd_shortconv_run takes any n, a part at
 * a time: the same bits). */
fwd_shortconv *fwd_shortconv_create(const struct kvi_model *m, int chunk, size_t *bytes);
void fwd_shortconv_free(fwd_shortconv *s);

/* The mixer of recurrent layer L for rows xb [n][dim] (the normed input) into
 * y [n][dim]: [B | C | x] = xb in_proj^T, y = (C * conv(B * x)) out_proj^T.
 * state[r]: row r's sequence's state of this layer (layout above); pos[r] its
 * position; snap[r] (NULL, or NULL entries: none): where to copy the state as it is
 * right after row r (prefix snapshots). Rows of one sequence come in position order;
 * each row's result depends only on its own input and its sequence's state, in a
 * fixed order (the same bits alone or in any batch, with any thread count). y may be
 * xb. 0 or the first matrix product's error. */
int fwd_shortconv_run(fwd_shortconv *s, tpool *pool, const struct kvi_model *m, const model_layer *L,
                      const float *xb, int n, float *const *state, const int32_t *pos, float *const *snap,
                      float *y);

#endif
