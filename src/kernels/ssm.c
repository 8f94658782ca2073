/*
 * ssm.c — a Mamba-2 layer's conv and scan steps, reference (ssm.h): 4-lane generic
 * vectors (SSE2 on any x86-64, no target flags, so nothing is contracted into a
 * fused multiply-add); the dot product is kern_delta_dot's fixed order.
 */
#include "kernels/ssm.h"

#include "kernels/delta.h"
#include "kernels/vec4.h"

#include <math.h>
#include <stddef.h>

void kern_ssm_conv_ref(const float *const *src, const float *w, const float *b, int K, int c0, int c1,
                       float *out)
{
    for (int ch = c0; ch < c1; ch++) {
        const float *wc = w + (size_t)ch * K; /* [K] this channel's taps */
        float s = 0.0f;
        for (int k = 0; k < K; k++) s += wc[k] * src[k][ch];
        if (b) s += b[ch];
        out[ch] = s / (1.0f + expf(-s));
    }
}

void kern_ssm_scan_step_ref(float *S, const float *x, const float *B, const float *C, float decay, float dt,
                            float D, int P, int N, float *y)
{
    const v4f dv = { decay, decay, decay, decay };
    for (int p = 0; p < P; p++) {
        float *row = S + (size_t)p * N; /* [N] channel p over the state dims */
        const float u = dt * x[p];
        const v4f u4 = { u, u, u, u };
        int n = 0;
        for (; n + 4 <= N; n += 4) st4(row + n, ld4(row + n) * dv + u4 * ld4(B + n));
        for (; n < N; n++) row[n] = row[n] * decay + u * B[n];
        y[p] = kern_delta_dot(row, C, N) + D * x[p];
    }
}

/* No ISA path yet: every pool runs the reference. */
void kern_ssm_scan_step(const tpool *pool, float *S, const float *x, const float *B, const float *C,
                        float decay, float dt, float D, int P, int N, float *y)
{
    (void)pool;
    kern_ssm_scan_step_ref(S, x, B, C, decay, dt, D, P, N, y);
}
