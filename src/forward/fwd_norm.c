/*
 * fwd_norm.c — RMSNorm and LayerNorm of rows (fwd_norm.h). The sum of squares of a row is one
 * chain in double, element by element in order; four rows run as four
 * independent chains (sumsq4), each with the one-row loop's sequence of
 * roundings, so a row's bits never depend on its neighbours or on n.
 */
#include "forward/fwd_norm.h"

#include "kernels/vec4.h"

#include <math.h>
#include <stddef.h>

/* ss[k] = sum over i in order of (double)x^2 of row k of x [4][dim]: four independent
 * chains, each the one-row loop's sequence of roundings (the latency of one chain,
 * not its arithmetic, bounds the one-row loop) */
static void sumsq4(const float *x, int dim, double ss[4])
{
    const float *x0 = x, *x1 = x + dim, *x2 = x + 2 * (size_t)dim, *x3 = x + 3 * (size_t)dim;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int i = 0; i < dim; i++) {
        s0 += (double)x0[i] * x0[i];
        s1 += (double)x1[i] * x1[i];
        s2 += (double)x2[i] * x2[i];
        s3 += (double)x3[i] * x3[i];
    }
    ss[0] = s0, ss[1] = s1, ss[2] = s2, ss[3] = s3;
}

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w (out may be x) */
void fwd_rmsnorm_rows(float *out, const float *x, const float *w, int n, int dim, float eps)
{
    double ss4[4];
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        double ss = 0;           /* in order: the sum's rounding fixes the bits */
        const int g = r - r % 4; /* first row of r's group of 4 */
        if (g + 4 <= n) {
            if (r == g) sumsq4(xr, dim, ss4); /* before any of the 4 rows is written */
            ss = ss4[r - g];
        } else {
            for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        }
        const float s = (float)(1.0 / sqrt(ss / dim + eps));
        int i = 0;
        for (; i + 4 <= dim; i += 4) st4(o + i, ld4(xr + i) * s * ld4(w + i));
        for (; i < dim; i++) o[i] = xr[i] * s * w[i];
    }
}

void fwd_layernorm_rows(float *out, const float *x, const float *w, int n, int dim, float eps)
{
    fwd_layernorm_bias_rows(out, x, w, NULL, n, dim, eps);
}

void fwd_norm_rows(model_norm kind, float *out, const float *x, const float *w, int n, int dim, float eps)
{
    if (kind == MODEL_NORM_LAYER)
        fwd_layernorm_rows(out, x, w, n, dim, eps);
    else
        fwd_rmsnorm_rows(out, x, w, n, dim, eps);
}

void fwd_layernorm_bias_rows(float *out, const float *x, const float *w, const float *b, int n, int dim,
                             float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        double sum = 0, var = 0;
        for (int i = 0; i < dim; i++) sum += xr[i];
        const float mean = (float)(sum / dim);
        for (int i = 0; i < dim; i++) var += (double)(xr[i] - mean) * (xr[i] - mean);
        const float s = (float)(1.0 / sqrt(var / dim + eps));
        for (int i = 0; i < dim; i++) o[i] = (xr[i] - mean) * s * w[i] + (b ? b[i] : 0.0f);
    }
}

void fwd_rms_rows(float *x, int n, int dim, float eps)
{
    for (int r = 0; r < n; r++) {
        float *xr = x + (size_t)r * dim;
        double ss = 0; /* in order, as fwd_rmsnorm_rows */
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        const float s = (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++) xr[i] *= s;
    }
}
