/*
 * quant_nvfp4.h — NVIDIA's NVFP4 block format (ggml's NVFP4): 64 values, 36 bytes,
 * d[4] = one UE4M3 scale per 16 values, then qs[32]: for sub-block k (16 values),
 * bytes 8k..8k+7, low nibble of byte 8k + j = value 16k + j, high nibble = value
 * 16k + j + 8. A nibble is an E2M1 code; quant_kvalues_mxfp4 holds twice its value.
 *
 * UE4M3 (unsigned; 4 exponent bits, bias 7; 3 mantissa bits): exponent field 0 is
 * subnormal, m * 2^-9 (the trap: not (1 + m/8) * 2^-7); bytes 0x00 and 0x7F are 0;
 * bit 7 is ignored (as ggml). quant_ue4m3_half returns half the scale (ggml's
 * ggml_ue4m3_to_fp32), so value = quant_kvalues_mxfp4[code] * quant_ue4m3_half(d).
 * Unpacked (quant_nvfp4_unpack): lv[i] = quant_kvalues_mxfp4[code i] (-12..12), and
 * the 4 halved scales.
 */
#ifndef KVI_QUANT_NVFP4_H
#define KVI_QUANT_NVFP4_H

#include "formats/quant.h"

#define QK_NVFP4 64
#define QK_NVFP4_SUB 16

typedef struct {
    uint8_t d[QK_NVFP4 / QK_NVFP4_SUB];
    uint8_t qs[QK_NVFP4 / 2];
} block_nvfp4;
_Static_assert(sizeof(block_nvfp4) == 36, "block_nvfp4 size");

/* Half the UE4M3 scale x, exactly: m * 2^-10 for exponent field 0, else
 * (1 + m/8) * 2^(e - 8) built from the float's bits (no libm call). */
static inline float quant_ue4m3_half(uint8_t x)
{
    const uint32_t e = (x >> 3) & 0xfu, m = x & 7u;
    if (x == 0x7f || e == 0) return x == 0x7f ? 0.0f : (float)m * 0x1p-10f;
    union {
        uint32_t u;
        float f;
    } c = { (e + 119u) << 23 | m << 20 };
    return c.f;
}
/* One block at p: lv [64] and dh [4] = quant_ue4m3_half of each sub-block's scale. */
void quant_nvfp4_unpack(const uint8_t *p, int8_t lv[QK_NVFP4], float dh[QK_NVFP4 / QK_NVFP4_SUB]);
/* n values (n a multiple of 64) from src into dst. */
void quant_nvfp4_dequant(const void *src, float *dst, int64_t n);

#endif
