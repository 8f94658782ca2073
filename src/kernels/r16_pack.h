/*
 * r16_pack.h — the "R16" weight layout: Q8_0 / Q4_0 / IQ4_NL / MXFP4 matrices
 * repacked at load time, in place, so that a 16-row tile is one contiguous stream laid out as the
 * VNNI kernels read it (vnni_avx512.h: lane l of every vector is weight row l of
 * the tile).
 *
 * Data structure. A matrix [n_out][n_in] of one of those types with n_out % 16 == 0
 * and n_in % 64 == 0 occupies exactly the bytes it occupies as rows
 * (n_out * row_bytes). Tile t (rows 16t .. 16t+15) starts at byte t * 16 * row_bytes
 * and holds, for each pair of 32-input blocks (2p, 2p+1), one "pair" of
 * 2 * 16 * block_bytes bytes; with S the bytes of a block's scale (the f16 d: 2;
 * MXFP4's E8M0 byte e: 1):
 *     [0, 16S)    the 16 scales of block 2p (row l at bytes S l .. S l + S - 1)
 *     [16S, 32S)  the 16 scales of block 2p+1
 *     [32S, ...)  the quants of block 2p, then those of block 2p+1, each as
 *                vectors of 64 bytes, vector k lane l (bytes 4l..4l+3) =
 *                  Q8_0: qs[4k..4k+3] of row l, each XOR 0x80 (q + 128, unsigned);
 *                        8 vectors (512 bytes) per block;
 *                  Q4_0: qs[4k..4k+3] of row l as stored (low nibbles = inputs
 *                        4k..4k+3, high nibbles = inputs 16+4k..16+4k+3);
 *                        4 vectors (256 bytes) per block. IQ4_NL: likewise (its
 *                        blocks have Q4_0's bytes; only their meaning differs);
 *                  MXFP4: likewise, its qs after the one byte e.
 * A pair is 1088 bytes (Q8_0), 576 bytes (Q4_0, IQ4_NL): a multiple of 64, so when
 * the tensor starts 64-byte aligned every vector is aligned; or 544 bytes (MXFP4:
 * its vectors start 32 bytes past a multiple of 64, read with unaligned loads).
 *
 * Invariants: the layout holds the same information as the rows, bit for bit
 * (kern_r16_to_rows(kern_r16_from_rows(x)) == x); a kern_tensor says which layout its
 * data has (kern_tensor.layout); every reader of weight bytes either handles R16 or
 * refuses it. Products over R16 give exactly the bits of the same product over the
 * rows (q8.h contract), on every ISA.
 */
#ifndef KVI_WEIGHT_R16_H
#define KVI_WEIGHT_R16_H

#include "kernels/kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* true when the active kernels read R16 faster than rows (AVX-512 with VNNI). */
bool kern_r16_preferred(void);

/* true when W (rows layout) can be repacked: Q8_0 / Q4_0 / IQ4_NL / MXFP4, n_out % 16 == 0,
 * n_in % 64 == 0, n_out > 0. */
bool kern_r16_eligible(const kern_tensor *W);

/* One tile (16 rows, rows layout, row_bytes apart) into R16 at dst (16 * row_bytes
 * bytes; dst must not overlap src). */
void kern_r16_from_rows(kvi_type t, const uint8_t *src, int64_t n_in, uint8_t *dst);
/* The inverse: one R16 tile into 16 rows at dst (16 * row_bytes bytes). */
void kern_r16_to_rows(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *dst);
/* Row `lane` (0..15) of an R16 tile into dst (row_bytes bytes, rows layout). */
void kern_r16_row(kvi_type t, const uint8_t *tile, int64_t n_in, int lane, uint8_t *dst);

/* Repacks W in place (its data must be writable) using n_threads threads
 * (tiles split between them), and sets W->layout. Returns 0, or a negative
 * KVI_E_* when W is not eligible or memory for the per-thread tile buffer is short
 * (W unchanged). */
int kern_r16_repack(kern_tensor *W, int n_threads);
/* The same for n_w matrices at once (distinct data, each eligible, else
 * KVI_E_INVALID and nothing changed): one set of threads splits all their tiles. */
int kern_r16_repack_many(kern_tensor *const *W, int n_w, int n_threads);

#endif
