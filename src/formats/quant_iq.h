/*
 * quant_iq.h — ggml's grid-based low-bit weight types IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS and IQ3_S: block layouts, the one decoder of their blocks, and their
 * reference dequantisation (called by quant_dequant_row).
 *
 * Every block holds 256 values: an f16 scale d, then grid indices (one per 8 values
 * for IQ2, one per 4 for IQ3; entries in quant_grids.h), signs, and 4-bit sub-block
 * scales s. Byte offsets (all little endian; "sub-block" = 32 values):
 *   IQ2_XXS  66 B: d; at 2 + 8 ib: 4 index bytes, then a u32 (bits 7l..7l+6 the
 *            sign index of group l into quant_ksigns_iq2xs, bits 28..31 s)
 *   IQ2_XS   74 B: d; 32 u16 at 2 (bits 0..8 index, 9..15 sign index); 8 scale
 *            bytes at 66 (low nibble: first 16 values of the sub-block, high: last 16)
 *   IQ2_S    82 B: d; 32 index low bytes at 2; 32 sign bytes at 34 (bit j = value
 *            j of the group); 8 qh at 66 (bits 2l..2l+1 = index bits 8..9 of group
 *            l); 8 scale bytes at 74 as IQ2_XS
 *   IQ3_XXS  98 B: d; 64 index bytes at 2 (one per 4 values); at 66 + 4 ib a u32
 *            as IQ2_XXS's (sign byte bits 0..3 for the first entry of the group)
 *   IQ3_S   110 B: d; 64 index low bytes at 2; 8 qh at 66 (bit k = index bit 8 of
 *            entry k of the sub-block); 32 sign bytes at 74; 4 scale bytes at 106
 *            (byte k: low nibble sub-block 2k, high 2k + 1)
 *
 * The decoded form (quant_iq_unpack): value i = dw * sc[i / 16] * (sign ? -mag : mag)
 * with mag[i] the grid byte, bit i % 8 of sgn[i / 8] the sign, sc = 2 s + 1 and
 * dw = d / 8 (IQ2), d / 4 (IQ3_XXS), d (IQ3_S). Every such product is exact in
 * f32, so this equals ggml's d * (0.5 + s) * 0.25 * g (IQ2), d * (0.5 + s) * 0.5 * g
 * (IQ3_XXS), d * (1 + 2 s) * g (IQ3_S) bit for bit.
 */
#ifndef KVI_QUANT_IQ_H
#define KVI_QUANT_IQ_H

#include "formats/quant.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    quant_f16 d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs;
typedef struct {
    quant_f16 d;
    uint16_t qs[QK_K / 8];
    uint8_t scales[QK_K / 32];
} block_iq2_xs;
typedef struct {
    quant_f16 d;
    uint8_t qs[QK_K / 4]; /* 32 index bytes, then 32 sign bytes */
    uint8_t qh[QK_K / 32];
    uint8_t scales[QK_K / 32];
} block_iq2_s;
typedef struct {
    quant_f16 d;
    uint8_t qs[3 * QK_K / 8]; /* 64 index bytes, then 8 u32 of signs and scale */
} block_iq3_xxs;
typedef struct {
    quant_f16 d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} block_iq3_s;

_Static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs size");
_Static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs size");
_Static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s size");
_Static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs size");
_Static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s size");

/* Whether t is one of the five grid types above. */
static inline bool quant_iq_is_grid(kvi_type t)
{
    return t == KVI_TYPE_IQ2_XXS || t == KVI_TYPE_IQ2_XS || t == KVI_TYPE_IQ2_S || t == KVI_TYPE_IQ3_XXS ||
           t == KVI_TYPE_IQ3_S;
}

/* One block of a grid type t at p (any alignment) decoded: mag [256] grid bytes,
 * sgn [32] sign bits (bit j of sgn[g]: value 8 g + j is negative), sc [16] the
 * odd scale 2 s + 1 of each 16 values, *dw the block factor (see above). */
void quant_iq_unpack(kvi_type t, const uint8_t *p, uint8_t mag[QK_K], uint8_t sgn[QK_K / 8], uint8_t sc[16],
                     float *dw);

/* Dequantises nb blocks of a grid type into dst [nb * 256]; false (nothing
 * written) when t is not a grid type. */
bool quant_iq_dequant_row(kvi_type t, const uint8_t *src, float *dst, int64_t nb);

#endif
