/*
 * fwd_ple.h — gemma4's per-layer inputs (model.h ple_*): a second, small input per
 * layer computed once per batch from the token and its embedding, and the branch
 * each layer adds to the residual stream with it.
 *
 * With N layers of P values (P = ple_dim), for a row with token t and scaled
 * embedding x [dim]:
 *   tok  = per_layer_token_embd[t] * sqrt(P)                        [N * P]
 *   p    = (per_layer_model_proj x) / sqrt(dim), each of the N slices RMS-normed
 *          by per_layer_proj_norm                                   [N * P]
 *   pl   = (p + tok) / sqrt(2)                                      [N * P]
 * and after layer l's FFN (x the residual):
 *   x   += rmsnorm(proj_l (gelu(inp_gate_l x) * pl[l])) * post_norm_l
 * Every row is computed alone in a fixed order: a row's bits do not depend on the
 * batch.
 */
#ifndef KVI_FWD_PLE_H
#define KVI_FWD_PLE_H

#include "base/threadpool.h"
#include "model/model.h"

typedef struct fwd_ple fwd_ple;

/* Scratch for batches of up to n_rows rows, layers run in chunks of up to chunk
 * rows; its bytes added to *bytes. NULL on allocation failure. */
fwd_ple *fwd_ple_create(const struct kvi_model *m, int n_rows, int chunk, size_t *bytes);
void fwd_ple_free(fwd_ple *s);

/* pl of rows [0, n) from tokens [n] and their scaled embeddings x [n][dim]. */
int fwd_ple_inputs(fwd_ple *s, tpool *pool, const struct kvi_model *m, const int32_t *tokens, const float *x,
                   int n);
/* Layer l's branch over rows [r0, r0 + n) (a chunk): x [n][dim] += the branch;
 * y [n][dim] is scratch; gelu: the GELU table (fwd_act.h). */
int fwd_ple_layer(fwd_ple *s, tpool *pool, const struct kvi_model *m, int l, const uint16_t *gelu, float *x,
                  int r0, int n, float *y);

#endif
