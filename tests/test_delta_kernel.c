/*
 * test_delta_kernel.c — the gated delta rule's step (kernels/delta.h) against plain
 * double-precision loops on random inputs (never zeros), head sizes 128, 64 and
 * 37 (a tail after the 16-lane loop), over 6 consecutive tokens, every other one
 * with a decay per key channel (gk, KDA) instead of the head's scalar:
 *  - the state and the outputs within 2e-6 relative of the reference;
 *  - kern_delta_dot equal, bit for bit, to its documented order written out in
 *    scalar code (lane i % 16 in index order, lanes l, 4 + l, 8 + l, 12 + l
 *    pairwise, then the four, then the tail), so the result cannot depend on the ISA;
 *  - the AVX-512 path (where the CPU has it) gives the reference's bits, state and
 *    outputs, on every size;
 *  - decay 1, beta 0 leaves S unchanged; beta 1 with a unit key makes S k == v.
 */
#include "testutil.h"

#include "kernels/delta.h"
#include "kernels/kernels_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float dot_order(const float *a, const float *b, int n)
{
    float lane[16] = { 0 };
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) lane[l] += a[i + l] * b[i + l];
    float v[4];
    for (int l = 0; l < 4; l++) v[l] = (lane[l] + lane[4 + l]) + (lane[8 + l] + lane[12 + l]);
    float r = (v[0] + v[1]) + (v[2] + v[3]);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

static void unit(float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] / sqrt(s));
}

static void check_size(int dk, uint64_t *rng)
{
    const size_t hs = (size_t)dk * dk;
    float *S = malloc(hs * sizeof *S), *q = malloc((size_t)dk * sizeof *q),
          *k = malloc((size_t)dk * sizeof *k);
    float *v = malloc((size_t)dk * sizeof *v), *o = malloc((size_t)dk * sizeof *o);
    float *gk = malloc((size_t)dk * sizeof *gk); /* [dk] a decay per key channel */
    double *R = malloc(hs * sizeof *R), *ro = malloc((size_t)dk * sizeof *ro);
    trand_fill_normal(S, (int64_t)hs, rng);
    for (size_t i = 0; i < hs; i++) R[i] = S[i];
    const float scale = 1.0f / sqrtf((float)dk);
    double worst_s = 0, worst_o = 0;
    for (int t = 0; t < 6; t++) {
        trand_fill_normal(q, dk, rng);
        trand_fill_normal(k, dk, rng);
        trand_fill_normal(v, dk, rng);
        unit(q, dk);
        unit(k, dk);
        const float decay = 0.3f + 0.7f * trand_uniform(rng), beta = 0.05f + 0.9f * trand_uniform(rng);
        for (int c = 0; c < dk; c++) gk[c] = 0.3f + 0.7f * trand_uniform(rng);
        const bool per_key = t % 2 == 1;
        kern_delta_step_ref(S, q, k, v, decay, per_key ? gk : NULL, beta, scale, dk, o);
        /* reference: decay, u = S k, S += k (beta (v - u)), o = S q scale (row i = value dim i) */
        for (int i = 0; i < dk; i++) {
            double *row = R + (size_t)i * dk, u = 0, oo = 0;
            for (int c = 0; c < dk; c++) row[c] *= per_key ? gk[c] : decay;
            for (int c = 0; c < dk; c++) u += row[c] * k[c];
            const double d = beta * (v[i] - u);
            for (int c = 0; c < dk; c++) row[c] += d * k[c];
            for (int c = 0; c < dk; c++) oo += row[c] * q[c];
            ro[i] = oo * scale;
        }
        double ns = 0, ds = 0, no = 0, dd = 0;
        for (size_t i = 0; i < hs; i++) {
            ns += (S[i] - R[i]) * (S[i] - R[i]);
            ds += R[i] * R[i];
        }
        for (int i = 0; i < dk; i++) {
            no += (o[i] - ro[i]) * (o[i] - ro[i]);
            dd += ro[i] * ro[i];
        }
        if (sqrt(ns / ds) > worst_s) worst_s = sqrt(ns / ds);
        if (sqrt(no / dd) > worst_o) worst_o = sqrt(no / dd);
    }
    CHECK(worst_s < 2e-6 && worst_o < 2e-6, "dk %d: state %.3g, output %.3g relative to the reference", dk,
          worst_s, worst_o);
    /* the dot product's order */
    for (int t = 0; t < 20; t++) {
        trand_fill_normal(q, dk, rng);
        trand_fill_normal(v, dk, rng);
        const float a = kern_delta_dot(q, v, dk), b = dot_order(q, v, dk);
        CHECK(memcmp(&a, &b, sizeof a) == 0, "dk %d: fwd_delta_dot %.9g != its order %.9g", dk, a, b);
    }
    /* decay 1, beta 0: nothing written */
    float *S0 = malloc(hs * sizeof *S0);
    memcpy(S0, S, hs * sizeof *S);
    kern_delta_step_ref(S, q, k, v, 1.0f, NULL, 0.0f, scale, dk, o);
    CHECK(memcmp(S0, S, hs * sizeof *S) == 0, "dk %d: decay 1 and beta 0 changed the state", dk);
    /* beta 1, unit key: the state now maps k to v */
    kern_delta_step_ref(S, q, k, v, 0.5f, NULL, 1.0f, scale, dk, o);
    double err = 0, den = 0;
    for (int i = 0; i < dk; i++) {
        double u = 0;
        for (int c = 0; c < dk; c++) u += (double)S[(size_t)i * dk + c] * k[c];
        err += (u - v[i]) * (u - v[i]);
        den += (double)v[i] * v[i];
    }
    CHECK(sqrt(err / den) < 1e-5, "dk %d: after beta 1, S k differs from v by %.3g", dk, sqrt(err / den));
    /* the AVX-512 path: the same bits */
    if (kern_isa_detect() == KVI_ISA_AVX512) {
        float *A = malloc(hs * sizeof *A), *B = malloc(hs * sizeof *B), *oa = malloc((size_t)dk * sizeof *oa);
        trand_fill_normal(A, (int64_t)hs, rng);
        memcpy(B, A, hs * sizeof *A);
        bool same = true;
        for (int t = 0; t < 4; t++) {
            trand_fill_normal(q, dk, rng);
            trand_fill_normal(k, dk, rng);
            trand_fill_normal(v, dk, rng);
            unit(k, dk);
            for (int c = 0; c < dk; c++) gk[c] = 0.3f + 0.7f * trand_uniform(rng);
            const float *g = t % 2 ? gk : NULL;
            kern_delta_step_ref(A, q, k, v, 0.9f, g, 0.4f, scale, dk, o);
            kern_delta_step_avx512(B, q, k, v, 0.9f, g, 0.4f, scale, dk, oa);
            same &= memcmp(A, B, hs * sizeof *A) == 0 && memcmp(o, oa, (size_t)dk * sizeof *o) == 0;
        }
        CHECK(same, "dk %d: the AVX-512 step differs from the reference", dk);
        free(A);
        free(B);
        free(oa);
    }
    printf("dk %3d: state %.2g, output %.2g relative to float64\n", dk, worst_s, worst_o);
    free(S0);
    free(gk);
    free(S);
    free(q);
    free(k);
    free(v);
    free(o);
    free(R);
    free(ro);
}

int main(void)
{
    uint64_t rng = 7;
    check_size(128, &rng);
    check_size(64, &rng);
    check_size(37, &rng);
    check_size(256, &rng);
    check_size(16, &rng);
    return test_main_end();
}
