/*
 * fmm_avx512.h — the AVX-512 matrix product for float weights (F32, F16,
 * BF16), internal to the kernels (kernels.c calls it from its float path).
 *
 * Reduction order (the contract, fixed by n_in alone): output y[r][j] keeps one
 * 16-lane accumulator; lane l takes the products x[i] * w_j[i] for i = l mod 16
 * in increasing i, each by one fused multiply-add (a last partial group of 16 is
 * padded with zeros on both sides, i.e. fma(0, 0, lane)). The 16 lanes are then
 * summed as s1[l] = v[l] + v[l+8], s2[l] = s1[l] + s1[l+4], s3[l] = s2[l] + s2[l+2],
 * y = s3[0] + s3[1]. kern_fdot_lanes16_ref() is that order in plain C; the decode
 * kernel (few rows, weights streamed) and the tiled one (many rows) both follow
 * it, so a row alone and the same row in any batch, on any thread count, give the
 * same bits.
 */
#ifndef KVI_KERNELS_F16_AVX512_H
#define KVI_KERNELS_F16_AVX512_H

#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kern_fmm_args {
    kvi_type type;    /* F32, F16 or BF16 */
    const uint8_t *w; /* [n_out][w_rb bytes]: row j at w + j * w_rb */
    size_t w_rb;
    int64_t n_in;
    int64_t j0, j1; /* the output columns to compute */
    const float *x; /* [n_rows][ldx] */
    int64_t ldx, n_rows;
    float *y; /* [n_rows][ldy]: only columns [j0, j1) are written */
    int64_t ldy;
    float *scratch; /* [KVI_FMM_TILE][n_in] f32 for many rows, or NULL */
} kern_fmm_args;

#define KVI_FMM_TILE 16    /* weight rows per tile */
#define KVI_FMM_MIN_ROWS 6 /* fewer rows never use the scratch */
#define KVI_FMM_SCRATCH(n_in) ((size_t)KVI_FMM_TILE * (size_t)(n_in) * sizeof(float))

/* 1 when computed (type handled and the CPU has AVX-512 F/BW/VL), 0 otherwise
 * with nothing written. With scratch NULL every row takes the streaming path:
 * slower for many rows, same bits. */
int kern_fmm_avx512(const kern_fmm_args *a);

/* The contract's order in scalar C (tests): one output, w one row of type t. */
float kern_fdot_lanes16_ref(kvi_type t, const void *w, const float *x, int64_t n);

#endif
