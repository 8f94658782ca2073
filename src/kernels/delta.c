/*
 * delta.c — the gated delta rule's step, reference (delta.h): 4-lane generic
 * vectors (SSE2 on any x86-64, no target flags, so nothing is contracted into a
 * fused multiply-add), four of them making the 16 lanes of the documented order.
 */
#include "kernels/delta.h"

#include "kernels/vec4.h"

#include <stddef.h>

float kern_delta_dot(const float *a, const float *b, int n)
{
    v4f a0 = { 0, 0, 0, 0 }, a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 += ld4(a + i) * ld4(b + i);
        a1 += ld4(a + i + 4) * ld4(b + i + 4);
        a2 += ld4(a + i + 8) * ld4(b + i + 8);
        a3 += ld4(a + i + 12) * ld4(b + i + 12);
    }
    const v4f s = (a0 + a1) + (a2 + a3);
    float r = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

void kern_delta_step_ref(float *S, const float *q, const float *k, const float *v, float decay,
                         const float *gk, float beta, float scale, int dk, float *o)
{
    const v4f dv = { decay, decay, decay, decay };
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dk; /* [dk] value dim i over the key dims */
        int c = 0;
        if (gk) {
            for (; c + 4 <= dk; c += 4) st4(row + c, ld4(row + c) * ld4(gk + c));
            for (; c < dk; c++) row[c] *= gk[c];
        } else {
            for (; c + 4 <= dk; c += 4) st4(row + c, ld4(row + c) * dv);
            for (; c < dk; c++) row[c] *= decay;
        }
        const float u = kern_delta_dot(row, k, dk);
        const float dl = beta * (v[i] - u);
        const v4f d4 = { dl, dl, dl, dl };
        for (c = 0; c + 4 <= dk; c += 4) st4(row + c, ld4(row + c) + d4 * ld4(k + c));
        for (; c < dk; c++) row[c] += dl * k[c];
        o[i] = kern_delta_dot(row, q, dk) * scale;
    }
}
