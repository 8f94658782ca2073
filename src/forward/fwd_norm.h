/*
 * fwd_norm.h — RMSNorm of activation rows, the same bits for a row alone or in
 * any batch (the forward pass's norms, q/k norms and latent attention's).
 */
#ifndef KVI_FWD_NORM_H
#define KVI_FWD_NORM_H

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for rows r < n of x [n][dim] (out may be x) */
void fwd_rmsnorm_rows(float *out, const float *x, const float *w, int n, int dim, float eps);
/* x[r] = x[r] / sqrt(mean(x[r]^2) + eps) for rows r < n of x [n][dim]: no weight */
void fwd_rms_rows(float *x, int n, int dim, float eps);

#endif
