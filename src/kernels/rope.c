/*
 * rope.c — RoPE (rope.h). The rotation works 4 pairs at a time with GCC/Clang
 * vector types (SSE2 on any x86-64, no target flags; odd/even lanes split and
 * merged back for the interleaved layout): each lane computes exactly the scalar
 * tail's expression, so the vector and scalar parts give the same bits.
 */
#include "kernels/rope.h"

#include "kernels/vec4.h"

#include <math.h>

double kern_rope_freq(float theta, int n_rot, const float *divisors, int i)
{
    double fr = pow((double)theta, -2.0 * i / (double)n_rot);
    if (divisors) fr /= divisors[i];
    return fr;
}

void kern_rope_cos_sin(double pos, const double *freq, int half, float *c, float *s)
{
    for (int i = 0; i < half; i++) {
        const double ang = pos * freq[i];
        c[i] = (float)cos(ang);
        s[i] = (float)sin(ang);
    }
}

void kern_rope_head(float *v, const float *c, const float *s, int half, bool neox)
{
    int i = 0;
    if (neox) {
        for (; i + 4 <= half; i += 4) {
            const v4f v0 = ld4(v + i), v1 = ld4(v + i + half), ci = ld4(c + i), si = ld4(s + i);
            st4(v + i, v0 * ci - v1 * si);
            st4(v + i + half, v0 * si + v1 * ci);
        }
    } else {
        for (; i + 4 <= half; i += 4) {
            const v4f p0 = ld4(v + 2 * i), p1 = ld4(v + 2 * i + 4), ci = ld4(c + i), si = ld4(s + i);
            const v4f v0 = __builtin_shufflevector(p0, p1, 0, 2, 4, 6);
            const v4f v1 = __builtin_shufflevector(p0, p1, 1, 3, 5, 7);
            const v4f r0 = v0 * ci - v1 * si, r1 = v0 * si + v1 * ci;
            st4(v + 2 * i, __builtin_shufflevector(r0, r1, 0, 4, 1, 5));
            st4(v + 2 * i + 4, __builtin_shufflevector(r0, r1, 2, 6, 3, 7));
        }
    }
    for (; i < half; i++) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float v0 = v[a], v1 = v[b];
        v[a] = v0 * c[i] - v1 * s[i];
        v[b] = v0 * s[i] + v1 * c[i];
    }
}
