/*
 * q8_lowbit.h — the integer products of the low-bit weight types IQ1_S, IQ1_M,
 * TQ1_0, TQ2_0 (Q8_K activations, kern_q8k) and NVFP4 (Q8_0 activations, kern_q8a),
 * as llama.cpp's CPU type traits pair them (internal to the kernels).
 *
 * Contract (extends q8.h's; the same bits on every ISA): y[r][j] starts at 0.0f and
 * takes, for weight block b = 0, 1, ... in order,
 *   IQ1_S/IQ1_M: acc = fmaf((d_b * 0.125f) * dx_b, (float)isum_b, acc),
 *                isum_b = sum over h < 16 of ls_h * sum_{i in 16h..16h+15} lv_i * q_i
 *                with lv_i = 8 * (grid value + delta) (odd, -9..9) and ls_h = 2s + 1
 *                (quant_iq1_unpack), so the delta term is inside the exact integer;
 *   TQ1_0/TQ2_0: acc = fmaf(d_b * dx_b, (float)isum_b, acc), isum_b = sum lv_i * q_i,
 *                lv_i = t_i - 1 (quant_tq_unpack);
 *   NVFP4:       for each 16-value sub-block s = 0..3 of the 64-value block in order,
 *                acc = fmaf(dh_s * dx_(2b + s/2), (float)isum_s, acc), isum_s = sum of
 *                the 16 lv_i * q_i, lv = quant_kvalues_mxfp4 level, dh_s the halved
 *                UE4M3 scale (quant_ue4m3_half), dx the f16-rounded Q8_0 scale.
 * dx is the activation block's d. Every integer is exact in int32.
 */
#ifndef KVI_KERNELS_Q8_LOWBIT_H
#define KVI_KERNELS_Q8_LOWBIT_H

#include "kernels/q8.h"

/* Whether t is one of these five types. */
bool kern_lowbit_type(kvi_type t);
/* The scalar reference: one weight row (n inputs) with one quantised activation row. */
float kern_lowbit_dot_ref(kvi_type t, const void *w, const void *xq, int64_t n);
/* kern_qgemm_ref for these types (the same bits). */
void kern_lowbit_gemm_ref(const kern_qgemm_args *a);
/* The AVX-512 VNNI kernel (q8_lowbit_avx512.c): 1 when done (the reference's bits),
 * 0 (nothing written) for another type or without VNNI. */
int kern_lowbit_gemm_avx512(const kern_qgemm_args *a);
/* The AVX2 kernel (q8_lowbit_avx2.c): the same, 0 without scratch. */
int kern_lowbit_gemm_avx2(const kern_qgemm_args *a);

#endif
