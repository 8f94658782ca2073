/*
 * rope.h — rotary position embedding (RoPE), one definition for the forward pass
 * (rotating new queries and keys) and the KV context policies (moving cached keys
 * by a position delta).
 *
 * Pairs of a head: (i, i + n_rot/2) for NeoX-style models, (2i, 2i + 1) otherwise;
 * pair i turns by angle pos * freq[i], freq[i] = theta^(-2i / n_rot) / divisor[i].
 * Invariant: every result is the plain sequence of IEEE float operations written
 * below (no fused multiply-add: the file is built without an FMA target), so the
 * bits do not depend on which caller, row or batch applies it.
 */
#ifndef KVI_ROPE_H
#define KVI_ROPE_H

#include <stdbool.h>

/* freq[i] for i < n_rot/2, in double (divisors NULL: none). */
double kern_rope_freq(float theta, int n_rot, const float *divisors, int i);
/* c[i] = (float)cos(pos * freq[i]), s[i] = (float)sin(pos * freq[i]), i < half;
 * the angle is taken in double. */
void kern_rope_cos_sin(double pos, const double *freq, int half, float *c, float *s);
/* Rotates the pairs of one head v [head_dim] by (c[i], s[i]), i < half. */
void kern_rope_head(float *v, const float *c, const float *s, int half, bool neox);

#endif
