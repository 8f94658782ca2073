/*
 * quant_iq1.h — the 1-bit IQ block formats (ggml's IQ1_S and IQ1_M) and their
 * unpacking into small integers, shared by the dequantiser and the kernels.
 *
 * IQ1_S (256 values, 50 bytes): d (f16); qs[32] = low 8 bits of 32 grid indices (one
 *   per 8 values); qh[8] (uint16, one per sub-block of 32): bits 3l..3l+2 = bits 8..10
 *   of index l of the sub-block, bits 12..14 = s, bit 15 = delta sign.
 * IQ1_M (256 values, 56 bytes): qs[32] as IQ1_S; qh[16], one byte per 16 values:
 *   bits 0..2 = bits 8..10 of the first index, bit 3 its delta sign, bits 4..6 and 7
 *   the same for the second; scales[8] read as 4 uint16 sc: sub-block ib's first 16
 *   values take bits 6(ib%2)+0..2 of sc[ib/2], its last 16 bits 6(ib%2)+3..5; bits
 *   12..15 of sc[0..3] are bits 0..3, 4..7, 8..11, 12..15 of the f16 d.
 * Value = d * (2s + 1) * (g + delta), g from quant_iq1s_grid, delta = -1/8 when its
 * sign bit is set, else +1/8.
 *
 * Unpacked (quant_iq1_unpack): lv[i] = 8 * (g_i + delta_i) (odd, in -9..9), ls[h] =
 * 2s + 1 of values 16h..16h+15 (odd, 1..15), so value i = d * ls[i/16] * lv[i] / 8
 * exactly. Invariant: every field is read with memcpy-free byte access (blocks may
 * lie unaligned in a file).
 */
#ifndef KVI_QUANT_IQ1_H
#define KVI_QUANT_IQ1_H

#include "formats/quant.h"

typedef struct {
    quant_f16 d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
} block_iq1_s;
typedef struct {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32];
} block_iq1_m;
_Static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s size");
_Static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m size");

/* One block of type t (KVI_TYPE_IQ1_S or KVI_TYPE_IQ1_M) at p: lv [256], ls [16],
 * the block scale d (IQ1_M: assembled from the scale bytes). */
void quant_iq1_unpack(kvi_type t, const uint8_t *p, int8_t lv[QK_K], uint8_t ls[QK_K / 16], float *d);
/* n values (n a multiple of 256) of type t from src into dst. */
void quant_iq1_dequant(kvi_type t, const void *src, float *dst, int64_t n);

#endif
