/*
 * shortconv.h — one row's step of LFM2's gated short convolution (the recurrent
 * layer of lfm2 / lfm2moe, forward/fwd_shortconv.h) over a range of channels.
 *
 *   w  [C][K]      the causal depthwise taps of each channel, w[ch][K - 1] the current row
 *   st [K - 1][ld] the last K - 1 gated inputs of the row's sequence, oldest first
 *   for each channel ch in [c0, c1):
 *     u      = b[ch] * x[ch]                                   (input gate)
 *     s      = ((w[0] st[0][ch] + w[1] st[1][ch]) + ...) + w[K-1] u    (tap order)
 *     st     <- st[1..K-2], u                                  (one row older)
 *     y[ch]  = c[ch] * s                                       (output gate)
 *
 * Each product is rounded, then added (no fused multiply-add), in tap order, so
 * every ISA path gives the reference's bits (kern_shortconv_row_ref).
 */
#ifndef KVI_KERNELS_SHORTCONV_H
#define KVI_KERNELS_SHORTCONV_H

#include "base/threadpool.h"

#include <stddef.h>

void kern_shortconv_row_ref(const float *w, int K, float *st, size_t ld, const float *b, const float *c,
                            const float *x, int c0, int c1, float *y);
/* The step on the pool's ISA path (the same bits as the reference; kernels.c). */
void kern_shortconv_row(const tpool *pool, const float *w, int K, float *st, size_t ld, const float *b,
                        const float *c, const float *x, int c0, int c1, float *y);

#endif
