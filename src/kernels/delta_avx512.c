/*
 * delta_avx512.c — the gated delta rule's step on AVX-512 (delta.h) for head dims
 * that are a multiple of 16 (up to 256): k and q held in registers, each state row
 * read and written once, the 16 lanes of the documented dot order one zmm
 * accumulator; the decay (one per head, or per key channel) held likewise. Built without FMA in the target, so every product is rounded before
 * its sum as in the reference: the same bits. Other head dims: the reference.
 */
#include "kernels/delta.h"

#include "kernels/isa_target.h"
#include "kernels/kernels_int.h"

#include <immintrin.h>
#include <stddef.h>

#define AVX512 KVI_TARGET_AVX512_NOFMA

/* (acc[l] + acc[4 + l]) + (acc[8 + l] + acc[12 + l]), then (s0 + s1) + (s2 + s3) */
AVX512 static float fold16(__m512 acc)
{
    const __m128 a0 = _mm512_extractf32x4_ps(acc, 0), a1 = _mm512_extractf32x4_ps(acc, 1);
    const __m128 a2 = _mm512_extractf32x4_ps(acc, 2), a3 = _mm512_extractf32x4_ps(acc, 3);
    const __m128 s = _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3));
    float f[4];
    _mm_storeu_ps(f, s);
    return (f[0] + f[1]) + (f[2] + f[3]);
}

AVX512 void kern_delta_step_avx512(float *S, const float *q, const float *k, const float *v, float decay,
                                   const float *gk, float beta, float scale, int dk, float *o)
{
    if (dk % 16 != 0 || dk > 256) {
        kern_delta_step_ref(S, q, k, v, decay, gk, beta, scale, dk, o);
        return;
    }
    const int nv = dk / 16;
    __m512 K[16], Q[16], G[16]; /* G: the decay of each key channel (the scalar in every lane without gk) */
    for (int j = 0; j < nv; j++) {
        K[j] = _mm512_loadu_ps(k + 16 * j);
        Q[j] = _mm512_loadu_ps(q + 16 * j);
        G[j] = gk ? _mm512_loadu_ps(gk + 16 * j) : _mm512_set1_ps(decay);
    }
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dk;
        __m512 R[16];
        __m512 acc = _mm512_setzero_ps();
        for (int j = 0; j < nv; j++) {
            R[j] = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * j), G[j]);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(R[j], K[j]));
        }
        const float u = fold16(acc);
        const __m512 d = _mm512_set1_ps(beta * (v[i] - u));
        acc = _mm512_setzero_ps();
        for (int j = 0; j < nv; j++) {
            R[j] = _mm512_add_ps(R[j], _mm512_mul_ps(d, K[j]));
            _mm512_storeu_ps(row + 16 * j, R[j]);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(R[j], Q[j]));
        }
        o[i] = fold16(acc) * scale;
    }
}
