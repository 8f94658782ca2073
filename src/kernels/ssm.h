/*
 * ssm.h — the steps of a Mamba-2 layer's recurrences (forward/fwd_mamba2.h): the
 * causal depthwise convolution of one row and one head's selective-scan step.
 *
 * conv: out[ch] = SiLU(sum_k w[ch][k] src[k][ch] (+ b[ch])), channels [c0, c1),
 *   w [C][K] with tap K - 1 on the current row; the taps summed in order k = 0..K-1
 *   from 0, the bias added after them, SiLU(s) = s / (1 + exp(-s)).
 * scan: S [P][N] (row p: channel p of the head over the N state dims),
 *   for each p:  S[p][n] = S[p][n] * decay + (dt x[p]) B[n]   (products rounded, no FMA)
 *                y[p]    = dot(S[p], C) + D x[p]
 *   dot as kern_delta_dot (kernels/delta.h), the fixed 16-lane order.
 * kern_ssm_scan_step_ref is the reference; kern_ssm_scan_step runs the pool's ISA path,
 * which must give the same bits.
 */
#ifndef KVI_KERNELS_SSM_H
#define KVI_KERNELS_SSM_H

#include "base/threadpool.h"

void kern_ssm_conv_ref(const float *const *src, const float *w, const float *b, int K, int c0, int c1,
                       float *out);
void kern_ssm_scan_step_ref(float *S, const float *x, const float *B, const float *C, float decay, float dt,
                            float D, int P, int N, float *y);
void kern_ssm_scan_step(const tpool *pool, float *S, const float *x, const float *B, const float *C,
                        float decay, float dt, float D, int P, int N, float *y);

#endif
