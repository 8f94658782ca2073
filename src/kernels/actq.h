/*
 * actq.h — SIMD conversions of activation rows with the scalar reference's
 * exact bits (internal to the kernels and the KV cache):
 *   - the 8-bit activation blocks of q8.h (kern_q8a, kern_q8k): per-ISA
 *     versions of q8.c's quant_a / quant_k, reached through
 *     kern_q8_quantize_act();
 *   - F32 -> F16 rows (the F16 KV cache write), equal to quant_f32_to_f16() per
 *     element.
 *
 * Invariant (tests/test_actq.c): every output byte equals the scalar reference's
 * for every input, NaN and infinities included (NaN -> quiet NaN keeping the top 10
 * payload bits and the sign, as quant_f32_to_f16; an 8-bit level of NaN is -127).
 * Why the bits can match: each scale is computed with the same scalar float
 * operations (amax / 127, 1 / d, -127 / max); the per-element product is one
 * correctly rounded multiply; vcvtps2dq rounds with MXCSR like lrintf (nearest
 * even, the mode the process never changes) and gives INT_MIN where lrintf gives
 * LONG_MIN (both clamp to -127; no level in range can exceed about 190); and
 * vcvtps2ph with an explicit nearest-even immediate rounds, overflows to infinity
 * and makes subnormals as quant_f32_to_f16 does (MXCSR DAZ/FTZ are never set).
 *
 * Callers pick a function only for an ISA kern_isa_detect() reported.
 */
#ifndef KVI_KERNELS_ACTQ_H
#define KVI_KERNELS_ACTQ_H

#include "kernels/q8.h"
#include "formats/quant.h"

#include <stdint.h>

/* nb consecutive blocks: x [nb][32] -> b [nb] (kern_q8a), x [nb][256] -> b [nb] (kern_q8k) */
void kern_actq_a_avx512(const float *x, kern_q8a *b, int64_t nb);
void kern_actq_k_avx512(const float *x, kern_q8k *b, int64_t nb);
void kern_actq_a_avx2(const float *x, kern_q8a *b, int64_t nb);
void kern_actq_k_avx2(const float *x, kern_q8k *b, int64_t nb);

/* dst [n] halves (any alignment) = quant_f32_to_f16(src[i]) */
void kern_f16_row_avx512(const float *src, void *dst, int64_t n);
void kern_f16_row_avx2(const float *src, void *dst, int64_t n);
/* The dispatcher: the active ISA's row conversion, or the scalar loop. */
void kern_f32_to_f16_row(const float *src, void *dst, int64_t n);
/* quant_quantize_row (formats/quant.h) with the same bytes, F16 rows through the
 * SIMD conversion above: what the KV cache writes with. */
int kern_quantize_row(kvi_type t, const float *src, void *dst, int64_t n);

#endif
