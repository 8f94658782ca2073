/*
 * test_fwd_dense_ops.c — the forward pass's operations of the dense variants
 * (forward/fwd_act.h fwd_xielu, forward/fwd_norm.h fwd_layernorm_rows) against
 * independent double-precision references written here from their definitions
 * (apertus's xIELU as the ../shared/golden/arch README states it; LayerNorm without
 * bias), on random inputs:
 *  - xIELU: error < 1e-5 of (1 + |x| + x^2) (float arithmetic vs double), both branches and
 *    the eps clamp hit; alpha_p / alpha_n are the softplus'd values (model_xielu);
 *  - LayerNorm: < 1e-5 relative per row, mean ~0 and variance ~1 with unit weights;
 *    a row's bits the same alone and inside a batch of 7 (any position).
 */
#include "testutil.h"

#include "forward/fwd_act.h"
#include "forward/fwd_norm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double softplus_ref(double v) { return log1p(exp(v)); }

static double xielu_ref(double x, double ap_raw, double an_raw, double beta, double eps)
{
    const double ap = softplus_ref(ap_raw), an = beta + softplus_ref(an_raw);
    if (x > 0) return ap * x * x + beta * x;
    return (expm1(x < eps ? x : eps) - x) * an + beta * x;
}

static void test_xielu(void)
{
    uint64_t st = 7;
    enum { N = 4096 };
    /* the raw parameters of the golden's layers (README: apertus) and one more */
    const double raw[5][2] = {
        { -0.0619, 0.8926 }, { 0.2958, 0.8502 }, { 0.4486, -0.7131 }, { -0.5844, 0.0331 }, { 1.5, -2.0 }
    };
    float *x = malloc(N * sizeof *x), *in = malloc(N * sizeof *in);
    for (int c = 0; c < 5; c++) {
        const double beta = 0.5, eps = -1e-6;
        const model_xielu p = { (float)softplus_ref(raw[c][0]), (float)(beta + softplus_ref(raw[c][1])),
                                (float)beta, (float)eps };
        int pos = 0, neg = 0, clamp = 0;
        for (int i = 0; i < N; i++) {
            in[i] = trand_normal(&st) * (i % 3 == 0 ? 4.0f : 1.0f);
            if (i % 97 == 0) in[i] = (float)(-1e-7 * (i % 5)); /* inside (eps, 0]: the clamp */
            x[i] = in[i];
        }
        fwd_xielu(&p, x, N);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const double r = xielu_ref(in[i], raw[c][0], raw[c][1], beta, eps);
            /* relative to the terms' size (the branches cancel near their roots) */
            const double e = fabs(x[i] - r) / (1.0 + fabs(in[i]) + (double)in[i] * in[i]);
            if (e > worst) worst = e;
            pos += in[i] > 0;
            neg += in[i] <= eps;
            clamp += in[i] <= 0 && in[i] > eps;
        }
        CHECK(worst < 1e-5, "xielu set %d: relative error %.3g", c, worst);
        CHECK(pos > 100 && neg > 100 && clamp > 10, "xielu set %d: branches %d %d %d", c, pos, neg, clamp);
    }
    free(x);
    free(in);
}

static void test_layernorm(void)
{
    uint64_t st = 11;
    enum { R = 7, D = 96 };
    float *x = malloc(R * D * sizeof *x), *y = malloc(R * D * sizeof *y), *w = malloc(D * sizeof *w);
    float *one = malloc(D * sizeof *one), *u = malloc(D * sizeof *u);
    for (int i = 0; i < D; i++) {
        w[i] = 1.0f + 0.1f * trand_normal(&st);
        u[i] = 1.0f;
    }
    for (int i = 0; i < R * D; i++) x[i] = 3.0f + 2.0f * trand_normal(&st); /* a large mean */
    const float eps = 1e-5f;
    fwd_layernorm_rows(y, x, w, R, D, eps);
    for (int r = 0; r < R; r++) {
        const float *xr = x + r * D;
        double mean = 0, var = 0, num = 0, den = 0;
        for (int i = 0; i < D; i++) mean += xr[i];
        mean /= D;
        for (int i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= D;
        for (int i = 0; i < D; i++) {
            const double ref = (xr[i] - mean) / sqrt(var + eps) * w[i];
            num += (y[r * D + i] - ref) * (y[r * D + i] - ref);
            den += ref * ref;
        }
        CHECK(sqrt(num / den) < 1e-5, "layernorm row %d: relative error %.3g", r, sqrt(num / den));
        fwd_layernorm_rows(one, xr, w, 1, D, eps);
        CHECK(!memcmp(one, y + r * D, D * sizeof *one), "layernorm row %d: bits differ alone and in a batch",
              r);
        fwd_norm_rows(MODEL_NORM_LAYER, one, xr, u, 1, D, eps);
        double m2 = 0, v2 = 0;
        for (int i = 0; i < D; i++) m2 += one[i];
        m2 /= D;
        for (int i = 0; i < D; i++) v2 += (one[i] - m2) * (one[i] - m2);
        v2 /= D;
        CHECK(fabs(m2) < 1e-5 && fabs(v2 - 1.0) < 1e-3, "layernorm row %d: mean %.3g variance %.6f", r, m2,
              v2);
    }
    free(x);
    free(y);
    free(w);
    free(one);
    free(u);
}

int main(void)
{
    test_xielu();
    test_layernorm();
    return test_main_end();
}
