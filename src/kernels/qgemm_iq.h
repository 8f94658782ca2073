/*
 * qgemm_iq.h — the integer products of the grid-based low-bit weights (IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S; formats/quant_iq.h) with Q8_K activations on
 * AVX-512 VNNI, any number of input rows, with kern_qgemm_ref's bits (q8.h
 * contract). Internal to the kernels.
 */
#ifndef KVI_KERNELS_QGEMM_IQ_H
#define KVI_KERNELS_QGEMM_IQ_H

#include "kernels/q8.h"

/* 1 when done; 0 (nothing written) for another type, no or unaligned scratch,
 * n_in not a positive multiple of 256, or a CPU without AVX-512 VNNI. */
int kern_qgemm_iq_avx512(const kern_qgemm_args *a);

#endif
