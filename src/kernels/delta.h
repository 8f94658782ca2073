/*
 * delta.h — one value head's step of the gated delta rule (linear attention of the
 * hybrid models, forward/fwd_delta.h), and the dot product whose order it fixes.
 *
 *   S [dk][dk], row i = value dim i over the dk key dims (S^T, key index fastest):
 *   for each row i:  row *= decay        (gk [dk] given: row[c] *= gk[c], a decay
 *                                         per key channel (KDA); gk NULL: the scalar)
 *                    u = dot(row, k)
 *                    row += (beta (v[i] - u)) k
 *                    o[i] = dot(row, q) * scale
 *
 * dot(a, b, n): lane l (0..15) sums a[j] b[j] over j = l mod 16 in index order
 * (products rounded, then added: no fused multiply-add), for the j below
 * n - n mod 16; s[l] = (lane[l] + lane[4 + l]) + (lane[8 + l] + lane[12 + l]) for
 * l < 4; r = (s0 + s1) + (s2 + s3); then the last n mod 16 products added in
 * index order. Every ISA path computes exactly these operations, so the state and
 * the outputs have the same bits on each (kern_delta_step_ref is the reference).
 */
#ifndef KVI_KERNELS_DELTA_H
#define KVI_KERNELS_DELTA_H

#include "base/threadpool.h"

float kern_delta_dot(const float *a, const float *b, int n);
void kern_delta_step_ref(float *S, const float *q, const float *k, const float *v, float decay,
                         const float *gk, float beta, float scale, int dk, float *o);
/* The step on the pool's ISA path (the same bits as the reference). */
void kern_delta_step(const tpool *pool, float *S, const float *q, const float *k, const float *v, float decay,
                     const float *gk, float beta, float scale, int dk, float *o);

#endif
