/*
 * test_ssm_kernel.c — the Mamba-2 steps (kernels/ssm.h) against plain double-precision
 * loops on random inputs (never zeros):
 *  - the scan step over 6 consecutive tokens, head shapes (P, N) = (32, 16), (16, 128)
 *    and (7, 37) (a tail after the 16-lane dot): state and outputs within 2e-6
 *    relative; kern_ssm_scan_step (the pool's path) gives the reference's bits;
 *  - decay 1 and dt 0 leave S unchanged, and y = S C + D x;
 *  - the conv of 3 rows with K = 4 taps, with and without bias, within 1e-6.
 */
#include "testutil.h"

#include "kernels/ssm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double rel(double num, double den) { return den > 0 ? sqrt(num / den) : sqrt(num); }

static void check_scan(int P, int N, uint64_t *rng)
{
    const size_t hs = (size_t)P * N;
    float *S = malloc(hs * sizeof *S), *S2 = malloc(hs * sizeof *S2), *x = malloc((size_t)P * sizeof *x);
    float *B = malloc((size_t)N * sizeof *B), *C = malloc((size_t)N * sizeof *C);
    float *y = malloc((size_t)P * sizeof *y), *y2 = malloc((size_t)P * sizeof *y2);
    double *R = malloc(hs * sizeof *R), *ry = malloc((size_t)P * sizeof *ry);
    trand_fill_normal(S, (int64_t)hs, rng);
    memcpy(S2, S, hs * sizeof *S);
    for (size_t i = 0; i < hs; i++) R[i] = S[i];
    double worst_s = 0, worst_y = 0;
    for (int t = 0; t < 6; t++) {
        trand_fill_normal(x, P, rng);
        trand_fill_normal(B, N, rng);
        trand_fill_normal(C, N, rng);
        const float decay = 0.05f + 0.9f * trand_uniform(rng), dt = 0.01f + 2.0f * trand_uniform(rng);
        const float D = 0.5f + trand_uniform(rng);
        kern_ssm_scan_step_ref(S, x, B, C, decay, dt, D, P, N, y);
        kern_ssm_scan_step(NULL, S2, x, B, C, decay, dt, D, P, N, y2);
        CHECK(!memcmp(S, S2, hs * sizeof *S) && !memcmp(y, y2, (size_t)P * sizeof *y),
              "scan %dx%d: the pool's path differs from the reference", P, N);
        for (int p = 0; p < P; p++) {
            double *row = R + (size_t)p * N, acc = 0;
            for (int n = 0; n < N; n++) row[n] = row[n] * decay + (double)dt * x[p] * B[n];
            for (int n = 0; n < N; n++) acc += row[n] * C[n];
            ry[p] = acc + (double)D * x[p];
        }
        double ns = 0, ds = 0, ny = 0, dy = 0;
        for (size_t i = 0; i < hs; i++) {
            ns += (S[i] - R[i]) * (S[i] - R[i]);
            ds += R[i] * R[i];
        }
        for (int p = 0; p < P; p++) {
            ny += (y[p] - ry[p]) * (y[p] - ry[p]);
            dy += ry[p] * ry[p];
        }
        if (rel(ns, ds) > worst_s) worst_s = rel(ns, ds);
        if (rel(ny, dy) > worst_y) worst_y = rel(ny, dy);
    }
    CHECK(worst_s < 2e-6 && worst_y < 2e-6, "scan %dx%d: state %.3g, output %.3g from float64", P, N, worst_s,
          worst_y);
    /* no decay, no input: the state stays, y = S C + D x */
    memcpy(S2, S, hs * sizeof *S);
    kern_ssm_scan_step_ref(S, x, B, C, 1.0f, 0.0f, 0.5f, P, N, y);
    CHECK(!memcmp(S, S2, hs * sizeof *S), "scan %dx%d: decay 1, dt 0 changed the state", P, N);
    double ny = 0, dy = 0;
    for (int p = 0; p < P; p++) {
        double acc = 0.5 * x[p];
        for (int n = 0; n < N; n++) acc += (double)S[(size_t)p * N + n] * C[n];
        ny += (y[p] - acc) * (y[p] - acc);
        dy += acc * acc;
    }
    CHECK(rel(ny, dy) < 2e-6, "scan %dx%d: y with a frozen state off by %.3g", P, N, rel(ny, dy));
    free(S);
    free(S2);
    free(x);
    free(B);
    free(C);
    free(y);
    free(y2);
    free(R);
    free(ry);
}

static void check_conv(uint64_t *rng)
{
    enum { K = 4, CH = 37 };
    float rows[K][CH], w[CH * K], b[CH], out[CH];
    const float *src[K];
    for (int k = 0; k < K; k++) {
        trand_fill_normal(rows[k], CH, rng);
        src[k] = rows[k];
    }
    trand_fill_normal(w, CH * K, rng);
    trand_fill_normal(b, CH, rng);
    for (int bias = 0; bias < 2; bias++) {
        kern_ssm_conv_ref(src, w, bias ? b : NULL, K, 0, CH, out);
        double worst = 0;
        for (int ch = 0; ch < CH; ch++) {
            double s = bias ? b[ch] : 0.0;
            for (int k = 0; k < K; k++) s += (double)w[ch * K + k] * rows[k][ch];
            const double want = s / (1.0 + exp(-s)), d = fabs(out[ch] - want) / (fabs(want) + 1e-3);
            if (d > worst) worst = d;
        }
        CHECK(worst < 1e-5, "conv (bias %d): %.3g from float64", bias, worst);
    }
}

int main(void)
{
    uint64_t rng = 0x5eed55a2u;
    check_scan(32, 16, &rng);
    check_scan(16, 128, &rng);
    check_scan(7, 37, &rng);
    check_conv(&rng);
    return test_main_end();
}
