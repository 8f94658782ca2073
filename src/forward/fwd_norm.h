/*
 * fwd_norm.h — RMSNorm of activation rows, the same bits for a row alone or in
 * any batch (the forward pass's norms, q/k norms and latent attention's), and
 * LayerNorm (cohere2's block and output norms).
 */
#ifndef KVI_FWD_NORM_H
#define KVI_FWD_NORM_H

#include "model/model.h"

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for rows r < n of x [n][dim] (out may be x) */
void fwd_rmsnorm_rows(float *out, const float *x, const float *w, int n, int dim, float eps);
/* x[r] = x[r] / sqrt(mean(x[r]^2) + eps) for rows r < n of x [n][dim]: no weight */
void fwd_rms_rows(float *x, int n, int dim, float eps);

/* fwd_layernorm_bias_rows without a bias (cohere2's LayerNorm) */
void fwd_layernorm_rows(float *out, const float *x, const float *w, int n, int dim, float eps);

/* the norm of kind (model.h model_norm): fwd_rmsnorm_rows or fwd_layernorm_rows */
void fwd_norm_rows(model_norm kind, float *out, const float *x, const float *w, int n, int dim, float eps);

/* out[r] = (x[r] - mean) / sqrt(var + eps) * w (+ b) for rows r < n of x [n][dim],
 * var the biased variance, both sums in double in order (out may be x; b may be NULL) */
void fwd_layernorm_bias_rows(float *out, const float *x, const float *w, const float *b, int n, int dim,
                             float eps);

#endif
