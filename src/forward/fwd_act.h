/*
 * fwd_act.h — the gated activations of the feed-forward blocks (dense and experts).
 *
 * g [n] holds the gate projection, u [n] the up projection; afterwards g holds
 * act(g) * u (model.h model_act). Each element is computed alone, in a fixed
 * expression, so the bits never depend on n or on a row's place in a batch.
 */
#ifndef KVI_FWD_ACT_H
#define KVI_FWD_ACT_H

#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* The f16 GELU table [65536] the tanh-GELU path reads (llama.cpp's CPU evaluates
 * GELU through one), or NULL when act does not need it / on allocation failure
 * (*needed then says whether NULL is an error). Free with free(). */
uint16_t *fwd_act_table(model_act act, bool *needed);

/* g[i] = act(g[i]) * u[i] for i < n; gelu: the table of fwd_act_table (GELU only) */
void fwd_glu(model_act act, const uint16_t *gelu, float *g, const float *u, size_t n);

/* x[i] = xielu(x[i]) for i < n with one layer's parameters (model.h model_xielu; the
 * ungated FFN of apertus), in float as llama.cpp's CPU computes it */
void fwd_xielu(const model_xielu *p, float *x, size_t n);

/* x[i] = max(x[i], 0)^2 for i < n (the ungated FFN of nemotron_h) */
void fwd_relu2(float *x, size_t n);

/* The table of fwd_act_table widened to f32 [65536] (malloc'd; NULL on allocation
 * failure), for fwd_gelu. */
float *fwd_gelu_table_f32(const uint16_t *gelu);
/* x[i] = gelu(x[i]) for i < n, the same bits as the GeGLU path's lookup, through the
 * f32 table of fwd_gelu_table_f32 (BERT's ungated FFN) */
void fwd_gelu(const float *gelu32, float *x, size_t n);

#endif
