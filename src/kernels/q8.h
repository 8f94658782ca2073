/*
 * q8.h — matrix products with 8-bit activations (internal to the kernels).
 *
 * For the weight types listed by kern_q8_act_type(), kern_matmul quantises each input
 * row once per call into 8-bit blocks ("activation blocks") and multiplies them with
 * the weight blocks in integers, as llama.cpp does:
 *   - Q8_0 Q4_0 Q5_0 Q4_1 Q5_1 IQ4_NL MXFP4 weights: one kern_q8a block per 32
 *     inputs (d, and for the _1 types s = d * sum(qs), both rounded through f16 as
 *     ggml's Q8_0 / Q8_1);
 *   - Q4_K Q5_K Q6_K IQ4_XS weights: one kern_q8k block per 256 inputs (ggml's Q8_K);
 *   - IQ1_S IQ1_M TQ1_0 TQ2_0 (kern_q8k) and NVFP4 (kern_q8a): q8_lowbit.h's contract.
 *
 * The reduction order (the determinism contract, identical for every ISA): output
 * y[r][j] starts at 0.0f and takes, for weight block b = 0, 1, ... in order,
 *     acc = fmaf(dw_b * dx_b, (float)isum_b, acc)        (isum_b: exact int32 dot)
 * and for the types with a min term, right after it,
 *     Q4_1/Q5_1: acc = fmaf(m_b, s_b, acc)
 *     Q4_K/Q5_K: acc = fmaf(-(dmin_b * dx_b), (float)msum_b, acc)
 * where msum_b = sum over sub-blocks of min_s * (sum of the 32 activation quants).
 * isum_b of a K-quant is sum over sub-blocks of scale_s * (exact sub-block dot).
 * IQ4_NL / IQ4_XS are Q8_0 / Q6_K-like: their levels are the codebook's int8
 * values, IQ4_XS's scale_s is ls_s - 32 (signed) over sub-blocks of 32, no min term.
 * MXFP4 is IQ4_NL-like with the levels quant_kvalues_mxfp4 (-12..12) and
 * dw_b = 2^(e_b - 128) (quant_e8m0_half; as ggml, sum(level * q8) * (dx * dw)).
 * IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S (formats/quant_iq.h) are Q6_K-like: levels are
 * the signed grid bytes, scale_s = 2 s + 1 per 16 inputs, dw_b the block's factor.
 * Every integer is exact, so a SIMD kernel that computes the same integers and then
 * the same float operations gives the scalar reference's bits: whatever the ISA,
 * the batch size, the tile or the thread count.
 */
#ifndef KVI_KERNELS_Q8_H
#define KVI_KERNELS_Q8_H

#include "kernels/kernels.h"
#include "formats/quant.h"
#include "formats/quant_iq.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Activation block of 32 inputs (48 bytes). */
typedef struct kern_q8a {
    int8_t qs[32]; /* round(x / d), in [-127, 127] */
    float d;       /* scale, rounded through f16 */
    float s;       /* d * sum(qs) rounded through f16 (the _1 types' min term) */
    int32_t sum;   /* sum(qs), exact */
    int32_t pad;
} kern_q8a;
_Static_assert(sizeof(kern_q8a) == 48, "kern_q8a size");

/* Activation block of 256 inputs. */
typedef struct kern_q8k {
    int8_t qs[QK_K];   /* round(x / d), in [-127, 127] */
    float d;           /* scale (f32) */
    int32_t sum32[8];  /* sum of qs over each 32 inputs, exact */
    int32_t sum16[16]; /* sum of qs over each 16 inputs, exact */
    int32_t pad[3];
} kern_q8k;
_Static_assert(sizeof(kern_q8k) == 256 + 4 + 32 + 64 + 12, "kern_q8k size");

/* Inputs per sub-block scale of a Q8_K weight type: 16 (Q6_K, the grid types) or 32. */
static inline int kern_q8k_sub(kvi_type t) { return t == KVI_TYPE_Q6_K || quant_iq_is_grid(t) ? 16 : 32; }

/* The activation block type for weights of type t: KVI_TYPE_Q8_0 (kern_q8a),
 * KVI_TYPE_Q8_K (kern_q8k), or KVI_TYPE_F32 when t has no integer path. */
kvi_type kern_q8_act_type(kvi_type t);
/* Bytes of one quantised activation row of n inputs for weights of type t
 * (0 when t has no integer path or n is not a multiple of the block). */
size_t kern_q8_act_row_bytes(kvi_type t, int64_t n);
/* Quantises n floats into the activation blocks for weights of type t. */
void kern_q8_quantize_act(kvi_type t, const float *x, void *dst, int64_t n);

/* The scalar reference: dot of one weight row (type t, n inputs) with one quantised
 * activation row, in the contract's order. */
float kern_q8_dot_ref(kvi_type t, const void *w, const void *xq, int64_t n);

/* Arguments of one per-ISA integer product: outputs j in [j0, j1) of rows r < n_rows:
 * y[r * ldy + j] = dot(weight row j, activation row r). */
typedef struct kern_qgemm_args {
    kvi_type type;
    const uint8_t *w; /* weight row 0; row j at w + j * w_rb */
    size_t w_rb;
    int64_t n_in;
    int64_t j0, j1;
    const uint8_t *xq; /* activation row 0; row r at xq + r * xq_rb */
    size_t xq_rb;
    int64_t n_rows;
    float *y;
    int64_t ldy;
    void *scratch;     /* KVI_QGEMM_SCRATCH(n_in) bytes, 64-byte aligned, or NULL */
    const uint8_t *xt; /* NULL, or the same activations as 16-row tiles (kern_q8_tiles_row) */
} kern_qgemm_args;

/* The activations of kern_q8a rows as 16-row tiles, for the AMX kernels: tile t
 * (rows 16t .. 16t+15), block b at xt + (t * nb + b) * KVI_Q8_TILE_BLOCK
 * (nb = n_in / 32): the 16 rows' 32 quants (row m at byte 32m), then their 16 d
 * (f32, at byte 512 + 4m), then their 16 sums of quants (i32, at byte 576 + 4m).
 * Rows past the last are all zero (quants, d and sum). */
#define KVI_Q8_TILE_BLOCK 640
/* Bytes of the tiles of n_rows rows of n_in inputs (0 when it overflows). */
size_t kern_q8_tiles_bytes(int64_t n_rows, int64_t n_in);
/* Row r of the tiles from its kern_q8a row xq (n_in inputs); pad: also zero the
 * rows past r up to the end of its tile (the caller's last row). */
void kern_q8_tiles_row(const void *xq, int64_t n_in, int64_t r, bool pad, uint8_t *xt);

/* Scratch a kernel may use to hold a 16-row weight tile in its own layout
 * (832 bytes per 32 inputs). */
#define KVI_QGEMM_SCRATCH(n_in) ((size_t)((n_in) / 32 + 1) * 832)

/* Offset added to a weight level to make it an unsigned byte (Q8_0 IQ4_NL IQ4_XS
 * MXFP4 128, Q4_0 8, Q5_0 16, Q6_K 32, others 0). */
int kern_q8_level_offset(kvi_type t);

/* Scalar implementation of the above (every type of kern_q8_act_type). */
void kern_qgemm_ref(const kern_qgemm_args *a);

#endif
