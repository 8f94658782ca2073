/*
 * qgemm_r16_mid.h — Q8_0 products over R16 weights for 5..KVI_R16_STREAM_ROWS_MAX
 * input rows with AVX-512 VNNI (qgemm_r16_mid_avx512.c): every weight vector
 * loaded once per pass of up to 12 rows. Same arguments and bits as
 * kern_qgemm_ref (q8.h), with r16.h's conventions for a->w, a->w_rb, a->j0, a->j1.
 */
#ifndef KVI_KERNELS_QGEMM_R16_MID_H
#define KVI_KERNELS_QGEMM_R16_MID_H

#include "kernels/r16.h"

/* 1 when done; 0 (nothing written) for another type, row count or shape, or
 * without VNNI. */
int kern_qgemm_r16_mid_avx512(const kern_qgemm_args *a);

#endif
