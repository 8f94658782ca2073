/*
 * qgemm_amx.h — Q8_0 / Q4_0 products over many activation rows with
 * AMX-INT8 tiles (qgemm_amx.c), internal to the kernels. Same arguments and
 * bits as kern_qgemm_ref (q8.h contract).
 */
#ifndef KVI_KERNELS_AMX_Q8_H
#define KVI_KERNELS_AMX_Q8_H

#include "kernels/q8.h"

#include <stdbool.h>

/* Fewer activation rows than these take the VNNI kernels (bench_matmul, 2048 x
 * 2048 and 2048 x 8192, alternated: R16 Q8_0 ties at 10 rows and wins from 12;
 * packed weights (Q4_0, or rows layout) tie at 16 and win from 24). */
#define KVI_AMX_Q8_MIN_ROWS_DIRECT 12
#define KVI_AMX_Q8_MIN_ROWS 20

/* true when kern_qgemm_amx_q8 would take a product of n_rows rows of n_in inputs
 * with weights of type t (r16: in the R16 layout); the caller then builds a->xt
 * (q8.h). */
bool kern_qgemm_amx_q8_wanted(kvi_type t, bool r16, int64_t n_rows, int64_t n_in);

/* r16: a->w is in the R16 layout (r16_pack.h; n_in % 64 == 0, j0 and j1
 * multiples of 16), else rows. Needs a->scratch (KVI_QGEMM_SCRATCH(n_in) bytes,
 * 64-byte aligned) and a->xt (the activations as 16-row tiles). Returns 1 when computed, 0 (nothing written) when not handled:
 * another type, AMX off or missing (cpu.h), or arguments it does not take. */
int kern_qgemm_amx_q8(const kern_qgemm_args *a, bool r16);

#endif
