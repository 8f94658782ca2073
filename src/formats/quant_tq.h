/*
 * quant_tq.h — the ternary block formats (ggml's TQ1_0 and TQ2_0): 256 values
 * v = (t - 1) * d with t in {0, 1, 2}, d (f16) at the end of the block.
 *
 * TQ1_0 (54 bytes): qs[48] then qh[4] then d. Each byte holds base-3 digits, stored
 *   as ceil(256 * V / 243) for the number V of its digits (first digit most
 *   significant); digit n of byte b is ((uint8_t)(b * 3^n) * 3) >> 8. Digit n of
 *   qs[m] (m < 32) is value 32n + m; digit n of qs[32 + m] (m < 16) is value
 *   160 + 16n + m; digit n (< 4) of qh[j] is value 240 + 4n + j.
 * TQ2_0 (66 bytes): qs[64] then d. Bits 2l..2l+1 of qs[32c + m] are t of value
 *   128c + 32l + m (c < 2, l < 4, m < 32).
 *
 * Unpacked (quant_tq_unpack): lv[i] = t_i - 1 (-1, 0, +1) and d: value i = d * lv[i].
 */
#ifndef KVI_QUANT_TQ_H
#define KVI_QUANT_TQ_H

#include "formats/quant.h"

typedef struct {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];
    uint8_t qh[QK_K / 64];
    quant_f16 d;
} block_tq1_0;
typedef struct {
    uint8_t qs[QK_K / 4];
    quant_f16 d;
} block_tq2_0;
_Static_assert(sizeof(block_tq1_0) == 54, "block_tq1_0 size");
_Static_assert(sizeof(block_tq2_0) == 66, "block_tq2_0 size");

/* Digit n (0..4) of a TQ1_0 byte b: 0, 1 or 2. */
static inline int quant_tq1_digit(uint8_t b, int n)
{
    static const uint8_t POW3[5] = { 1, 3, 9, 27, 81 };
    return ((uint8_t)(b * POW3[n]) * 3) >> 8;
}

/* One block of type t (KVI_TYPE_TQ1_0 or KVI_TYPE_TQ2_0) at p: lv [256] and d. */
void quant_tq_unpack(kvi_type t, const uint8_t *p, int8_t lv[QK_K], float *d);
/* n values (n a multiple of 256) of type t from src into dst. */
void quant_tq_dequant(kvi_type t, const void *src, float *dst, int64_t n);

#endif
