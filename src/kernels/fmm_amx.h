/*
 * fmm_amx.h — the matrix product for F16 and BF16 weights through AMX
 * (TDPBF16PS), internal to the kernels: kern_matmul() calls it first for those
 * types when the active ISA is AVX-512 and the path is on (below); it is then
 * the only path for them (decode rows included), so every row gets the same bits.
 *
 * Split into BF16 parts: an F16 weight w is exactly hi + lo with hi = w cut to
 * BF16 (truncation: the upper 16 bits of its f32) and lo = w - hi (the 3 low bits
 * of the 11 significant ones, exact in BF16); a BF16 weight is
 * hi with lo = 0. An input x is xh + xl with xh = bf16(x), xl = bf16(x - xh)
 * (round to nearest even; 16 significant bits, x - xh - xl <= 2^-16 |x|).
 *
 * Reduction order (the contract, fixed by n_in and the weight type alone): each
 * output y[r][j] is one FP32 accumulator c, starting at +0. n_in is cut into K
 * tiles of 32 (the last one padded with zeros on both sides). For each K tile in
 * increasing order: c = TDPBF16PS(c, hi, xh), then c = TDPBF16PS(c, hi, xl), then
 * (F16 only) c = TDPBF16PS(c, lo, xh), each one the hardware's step over the 16
 * pairs of the tile (products of BF16 exact, FP32 accumulation, round to nearest
 * even, denormals flushed). Which rows share a tile, which outputs share a tile,
 * how many rows or threads a call has and whether K is cut into blocks (the
 * accumulator is parked in FP32 memory, exactly) never change it: AMX computes
 * each element of a tile from its own row and column only.
 *
 * Accuracy: the dropped term lo * xl and the split of x cost about 2^-16 of each
 * product (llama.cpp rounds the inputs to F16: 2^-11); tested within
 * 2^-14 * sum |x w| of the double-precision kern_matmul_ref.
 */
#ifndef KVI_KERNELS_AMX_F16_H
#define KVI_KERNELS_AMX_F16_H

#include "kernels/kernels.h"

#include <stdint.h>

/* The path is opt-in for now (decode through it is ~2x slower than the FP32
 * path, see bench/RESULTS-f16amx.md): on after kern_amx_f16_set(1)
 * (kvi_cpu_configure with amx_f16; the CLI's KVINFER_AMX_F16=1), and only while
 * cpu_amx_on(). Switch it only between products, never while one runs. */
void kern_amx_f16_set(int on);
/* 1 when F16 / BF16 products take this path now (on, and cpu_amx_on()). */
int kern_amx_f16_on(void);

/* y[r * ldy + j] = sum_i x[r * ldx + i] * W[j][i] in the order above, for F16 or
 * BF16 weights in rows (KVI_LAYOUT_ROWS). The caller has checked the arguments
 * (kern_matmul's checks) and that the CPU runs AVX-512. Returns 1 when done, 0
 * (nothing written) when AMX is off or the weights are of another type or
 * layout, or memory for the converted inputs is short. */
int kern_fmm_amx(tpool *pool, const kern_tensor *W, const float *x, int64_t ldx, int64_t n_rows, float *y,
                 int64_t ldy);

#endif
