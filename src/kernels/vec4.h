/*
 * vec4.h — 4-lane float vectors for the elementwise code outside the per-ISA
 * kernels (RoPE, the forward pass's norms and residuals): GCC/Clang vector
 * types, SSE2 on any x86-64, no target flags, unaligned loads and stores.
 *
 * Invariant: a lane computes exactly the scalar expression written for it (the
 * files using these are built without an FMA target, so nothing is contracted).
 */
#ifndef KVI_VEC4_H
#define KVI_VEC4_H

#include <string.h>

typedef float v4f __attribute__((vector_size(16)));

static inline v4f ld4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

#endif
