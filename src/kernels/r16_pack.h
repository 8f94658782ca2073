/*
 * r16_pack.h — the "R16" weight layout: Q8_0 / Q4_0 / IQ4_NL / MXFP4 / Q4_K / Q6_K matrices
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
 * Q4_K (n_in % 256 == 0): tile t holds, for each 256-input block b, a "super" of
 * 16 * 144 = 2304 bytes at b * 2304 (a multiple of 64):
 *     [0, 32)      d of rows 0..15 (f16, row l at bytes 2l, 2l+1)
 *     [32, 64)     dmin of rows 0..15
 *     [64, 256)    the 16 rows' 6-bit sub-block scales sc_s and mins mn_s (s < 8),
 *                  decoded from the 12 packed bytes, as four 64-byte arrays E0..E3
 *                  of 6-bit values stored in 192 bytes: NL [64..128), NH [128..192)
 *                  and HB [192..256), byte i of each:
 *                    NL[i] = E0[i] & 15 | (E1[i] & 15) << 4
 *                    NH[i] = E2[i] & 15 | (E3[i] & 15) << 4
 *                    HB[i] = E0[i] >> 4 | (E1[i] >> 4) << 2 | (E2[i] >> 4) << 4
 *                            | (E3[i] >> 4) << 6
 *                  with E0[16s + l] = sc_s of row l (s < 4), E1[16(s-4) + l] = sc_s
 *                  (s >= 4), E2[32p + 2l + e] = mn_{2p+e} (p < 2), E3[32(p-2) + 2l +
 *                  e] = mn_{2p+e} (p >= 2): so each sc_s of the 16 rows is one 16-byte
 *                  chunk, and each pair of mins one 32-byte half, row-interleaved;
 *     [256, 2304)  the quants as 32 vectors of 64 bytes, vector v lane l = qs[4v ..
 *                  4v+3] of row l as stored (low nibbles: inputs 64j + 4k .. +3 of
 *                  sub-block 2j, high nibbles: inputs 64j + 32 + 4k .. of sub-block
 *                  2j+1, for v = 8j + k).
 *
 * Q6_K (n_in % 256 == 0): a super of 16 * 210 = 3360 bytes per block b, at b * 3360:
 *     [0, 32)       d of rows 0..15 (f16)
 *     [32, 288)     the int8 sub-block scales, byte 16s + l = scales[s] of row l
 *     [288, 3360)   the quants as 16 triplets of 64-byte vectors, triplet t = 8h + k
 *                   (h < 2, k < 8) at 288 + 192t: ql vector 16h + k, ql vector
 *                   16h + 8 + k, qh vector 8h + k, where ql vector v lane l = ql[4v ..
 *                   4v+3] of row l and qh vector u lane l = qh[4u .. 4u+3]: the three
 *                   vectors that make the levels of inputs 128h + 4k + 32q (q < 4), so
 *                   the kernel reads each super front to back (kern_r16_q6_ql / _qh)
 * A Q6_K super is 52.5 x 64 bytes, so supers alternate between 64-byte aligned and 32
 * bytes off (and GGUF aligns tensors to 32 only): its vectors are read with unaligned loads.
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

/* The supers' byte offsets (the layout above). */
#define KVI_R16_Q4K_SUPER 2304 /* 16 * sizeof(block_q4_K) */
#define KVI_R16_Q4K_DMIN 32
#define KVI_R16_Q4K_NL 64
#define KVI_R16_Q4K_NH 128
#define KVI_R16_Q4K_HB 192
#define KVI_R16_Q4K_QS 256
#define KVI_R16_Q6K_SUPER 3360 /* 16 * sizeof(block_q6_K) */
#define KVI_R16_Q6K_SC 32
#define KVI_R16_Q6K_Q 288

/* Q4_K: where sub-block s's scale / min of row l sits in E0..E3 taken as one array of
 * 256 bytes (E_a[i] at 64a + i): 16s + l (E0, E1), 128 + 32 (s / 2) + 2l + s % 2 (E2, E3). */
static inline int kern_r16_q4_sc_at(int s, int l) { return 16 * s + l; }
static inline int kern_r16_q4_mn_at(int s, int l) { return 128 + 32 * (s / 2) + 2 * l + s % 2; }

/* Byte offsets inside a Q6_K super of ql vector v (0..31) and qh vector u (0..15). */
static inline size_t kern_r16_q6_ql(int v)
{
    return KVI_R16_Q6K_Q + 192 * (size_t)(8 * (v / 16) + v % 8) + 64 * (size_t)((v % 16) / 8);
}
static inline size_t kern_r16_q6_qh(int u) { return KVI_R16_Q6K_Q + 192 * (size_t)u + 128; }

/* true when the active kernels read R16 faster than rows (AVX-512 with VNNI). */
bool kern_r16_preferred(void);

/* true when W (rows layout) can be repacked: Q8_0 / Q4_0 / IQ4_NL / MXFP4 with n_in % 64 == 0,
 * or Q4_K / Q6_K (n_in % 256 == 0); n_out % 16 == 0, n_out > 0. */
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
