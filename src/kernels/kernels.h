/*
 * kernels.h — dot products and matrix products over any weight type, with a
 * scalar reference for each and SIMD paths chosen at run time.
 *
 * Determinism: every output element is reduced in an order that depends only on
 * the vector length and the ISA, never on how many rows share the call or how
 * many threads run it. So a row computed alone equals the same row inside any
 * batch, bit for bit.
 */
#ifndef KVI_KERNELS_H
#define KVI_KERNELS_H

#include "kvinfer_types.h"
#include "base/threadpool.h"
#include <stdint.h>

typedef enum kern_isa { KVI_ISA_SCALAR = 0, KVI_ISA_AVX2 = 1, KVI_ISA_AVX512 = 2 } kern_isa;

kern_isa kern_isa_detect(void);  /* the best the CPU supports */
kern_isa kern_isa_active(void);  /* detect, lowered by kern_isa_set */
void kern_isa_set(kern_isa isa); /* tests: force a path (capped at detect) */
const char *kern_isa_str(kern_isa isa);

/* The kernels one engine uses, attached to its pool (tpool_set_user): the products
 * run on that pool take this ISA's table (capped at what the CPU has) and the AMX
 * tiles only where amx / amx_f16 allow them. A pool without one (NULL, or no pool)
 * takes the process-wide choice (kern_isa_set, cpu_amx_set, kern_amx_f16_set).
 * Only the choice differs: every path gives the bits its ISA's contract says. */
typedef struct kern_cfg {
    kern_isa isa;
    bool amx;     /* Q8_0 / Q4_0 products on AMX-INT8 */
    bool amx_f16; /* F16 / BF16 products on AMX-BF16 (with amx) */
} kern_cfg;

/* The ISA that products run on this pool take. */
kern_isa kern_isa_of(const tpool *pool);
/* "avx512", "avx2" or "scalar" (any case, kern_isa_str's names) into *out; false
 * for any other name. */
bool kern_isa_parse(const char *name, kern_isa *out);
/* A kern_cfg for these choices, its ISA lowered once to what the CPU has. */
kern_cfg kern_cfg_make(kern_isa isa, bool amx, bool amx_f16);

/* A weight matrix [n_out][n_in] of type `type`: row j holds n_in elements,
 * quant_row_bytes(type, n_in) bytes apart. 1-D vectors have n_out = 1. */
typedef struct kern_tensor {
    const void *data;
    kvi_type type;
    int64_t n_in;  /* row length (GGUF ne[0]) */
    int64_t n_out; /* number of rows (GGUF ne[1]) */
    int layout;    /* KVI_LAYOUT_*: how the bytes are arranged (0: rows) */
} kern_tensor;

/* KVI_LAYOUT_ROWS: row j at data + j * quant_row_bytes(type, n_in) (GGUF's layout).
 * KVI_LAYOUT_R16: Q8_0 / Q4_0 / IQ4_NL / MXFP4 / Q4_K / Q6_K tiles of 16 rows interleaved
 * (r16_pack.h). */
#define KVI_LAYOUT_ROWS 0
#define KVI_LAYOUT_R16 1

/* sum_i a[i] * b[i] */
float kern_dot_f32(const float *a, const float *b, int64_t n);
float kern_dot_f32_ref(const float *a, const float *b, int64_t n);

/* y[r * ldy + j] = sum_i x[r * ldx + i] * W[j][i]   for r < n_rows, j < W->n_out.
 * x: [n_rows][ldx] f32 with ldx >= W->n_in; y: [n_rows][ldy] f32 with ldy >= W->n_out.
 * Work is split over output columns j between the pool's threads.
 * For Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL MXFP4 Q4_K Q5_K Q6_K IQ4_XS weights, the grid types
 * IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S and the low-bit IQ1_S IQ1_M TQ1_0 TQ2_0 NVFP4
 * (q8_lowbit.h) the rows of x are first
 * quantised to 8 bits (as llama.cpp does) and multiplied in integers, with the
 * same bits on every ISA (q8.h); other types multiply in f32. */
/* Returns 0, KVI_E_INVALID for bad arguments (y untouched), or KVI_E_NOMEM. */
int kern_matmul(tpool *pool, const kern_tensor *W, const float *x, int64_t ldx, int64_t n_rows, float *y,
                int64_t ldy);
/* The same as kern_matmul(pool, W[i], x, ldx, n_rows, y[i], ldy[i]) for i < n_w,
 * bit for bit, with x quantised once and one pool run over all the outputs when
 * every W[i] has the same n_in and activation type (else one kern_matmul each). */
#define KVI_MATMUL_MULTI_MAX 32
int kern_matmul_multi(tpool *pool, int n_w, const kern_tensor *const W[], const float *x, int64_t ldx,
                      int64_t n_rows, float *const y[], const int64_t ldy[]);
/* Each matrix over its own rows of x (a mixture of experts: the rows routed to each
 * expert, grouped): the same as kern_matmul(pool, W[i], x + row0[i] * ldx, ldx,
 * rows[i], y[i], ldy[i]) for i < n_w (<= KVI_MATMUL_MULTI_MAX), bit for bit, with
 * the n_rows rows of x quantised once and one pool run whose threads split the
 * tiles by their rows, when every W[i] has the same n_in and activation type (else
 * one kern_matmul each). rows[i] may be 0 (nothing computed for W[i]). */
int kern_matmul_grouped(tpool *pool, int n_w, const kern_tensor *const W[], const float *x, int64_t ldx,
                        int64_t n_rows, const int64_t row0[], const int64_t rows[], float *const y[],
                        const int64_t ldy[]);
/* The f32 math reference, single thread (tests): dequantised weights times the
 * unquantised x, accumulated in double. */
int kern_matmul_ref(const kern_tensor *W, const float *x, int64_t ldx, int64_t n_rows, float *y, int64_t ldy);

/* Row `row` of W as floats (embedding lookup): dst has W->n_in floats. 0, or
 * KVI_E_INVALID (bad tensor, row out of range: dst untouched), KVI_E_NOMEM. */
int kern_tensor_get_row(const kern_tensor *W, int64_t row, float *dst);
/* Rows [r0, r0 + n) of W as a matrix of its own (an expert's or a head's slice of
 * a 3-D tensor). In the R16 layout r0 must start a tile (r0 % 16 == 0). */
kern_tensor kern_tensor_rows(const kern_tensor *W, int64_t r0, int64_t n);

/* ---- weights laid out for the kernels ---------------------------------- */

/* true when the active kernels want some weights in a layout of their own (then
 * kern_prepare_weights writes into the weights' bytes: make them writable). */
bool kern_prepare_wanted(void);
/* Lays the n matrices of W (distinct data) out for the active kernels, in place,
 * using n_threads threads: today the Q8_0 / Q4_0 / IQ4_NL / MXFP4 / Q4_K / Q6_K ones whose shape allows it go to
 * R16 tiles (r16_pack.h) when the kernels read those faster; every other matrix is
 * left as it is. Returns 0, or a negative KVI_E_* with every matrix unchanged. */
int kern_prepare_weights(kern_tensor *const *W, int n, int n_threads);

#endif
