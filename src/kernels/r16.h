/*
 * r16.h — integer products over R16 weights (r16_pack.h), internal to
 * the kernels. Same arguments and bits as kern_qgemm_ref (q8.h), with
 * a->w the first byte of the matrix in R16 layout, a->w_rb its row bytes (a tile
 * is 16 * w_rb bytes) and a->j0, a->j1 multiples of 16.
 */
#ifndef KVI_KERNELS_R16_H
#define KVI_KERNELS_R16_H

#include "kernels/kernels_int.h"

/* Any ISA: the table's own kernels where one reads R16 directly, else each tile
 * unpacked into rows (the 16 * w_rb bytes at `rows`, 64-byte aligned) and given to
 * the table's qgemm or kern_qgemm_ref. */
void kern_qgemm_r16(const kern_table *tab, const kern_qgemm_args *a, uint8_t *rows);

/* AVX-512 VNNI, up to KVI_R16_STREAM_ROWS_MAX input rows (qgemv_avx512.c; Q4_K / Q6_K:
 * qgemv_r16k_avx512.c); 0 when not handled. */
int kern_qgemv_r16_avx512(const kern_qgemm_args *a);
int kern_qgemv_r16k_avx512(const kern_qgemm_args *a);

/* kern_r16_from_rows / kern_r16_to_rows (r16_pack.h) with AVX-512; callers check
 * kern_has_vnni(). */
void kern_r16_from_rows_avx512(kvi_type t, const uint8_t *src, int64_t n_in, uint8_t *dst);
void kern_r16_to_rows_avx512(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *dst);
/* The Q4_K / Q6_K versions (qgemv_r16k_avx512.c), which the two above call for those. */
void kern_r16k_from_rows_avx512(kvi_type t, const uint8_t *src, int64_t n_in, uint8_t *dst);
void kern_r16k_to_rows_avx512(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *dst);

/* Above this many input rows, R16 tiles go to the many-row kernels (kernels_avx512.c:
 * Q8_0 / Q4_0 / IQ4_NL / MXFP4 tiles transposed, Q4_K / Q6_K supers packed as they
 * lie) instead of the streaming ones. */
#define KVI_R16_STREAM_ROWS_MAX 64

#endif
