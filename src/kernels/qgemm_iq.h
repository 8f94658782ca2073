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

/* Bytes of one block decoded by kern_iq_decode_block: mag [256] (grid bytes) at 0,
 * sgn [32] (bit i % 8 of byte i / 8: input i negative) at 256, sc [16] (odd scales
 * per 16 inputs) at 288, dw (f32) at 304: quant_iq_unpack's values. */
#define IQ_BLK 320
/* One block of grid type t at blk (any alignment) into o [IQ_BLK], 64-byte aligned.
 * Needs AVX-512 VNNI. */
void kern_iq_decode_block(kvi_type t, const uint8_t *blk, uint8_t *o);

/* From this many activation rows on, kern_qgemm_iq_avx512 runs the tiled kernel
 * (measured: below it the tile transposes cost more than the row path's dots). */
#define KVI_IQ_TILE_MIN_ROWS 12
/* The tiled kernel (qgemm_iq_tile_avx512.c): 16 weight rows decoded once per call
 * into int8 tiles, every activation row against them; the same contract and bits. */
int kern_qgemm_iq_tile_avx512(const kern_qgemm_args *a);

#endif
