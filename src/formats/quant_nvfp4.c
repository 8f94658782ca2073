/*
 * quant_nvfp4.c — NVFP4 blocks into integers and floats (layout in quant_nvfp4.h).
 * Invariant: values are level * (scale / 2), ggml's dequantize_row_nvfp4 bit for
 * bit: the halved scale is m * 2^-10 (subnormal) or (8 + m) * 2^(e - 11), exact,
 * and level * scale is one exact product (4-bit times 4-bit mantissas).
 */
#include "formats/quant_nvfp4.h"

void quant_nvfp4_unpack(const uint8_t *p, int8_t lv[QK_NVFP4], float dh[QK_NVFP4 / QK_NVFP4_SUB])
{
    const uint8_t *qs = p + 4;
    for (int k = 0; k < 4; k++) {
        dh[k] = quant_ue4m3_half(p[k]);
        for (int j = 0; j < 8; j++) {
            lv[16 * k + j] = quant_kvalues_mxfp4[qs[8 * k + j] & 0xf];
            lv[16 * k + j + 8] = quant_kvalues_mxfp4[qs[8 * k + j] >> 4];
        }
    }
}

void quant_nvfp4_dequant(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int8_t lv[QK_NVFP4];
    float dh[4];
    for (int64_t b = 0; b < n / QK_NVFP4; b++, p += sizeof(block_nvfp4), dst += QK_NVFP4) {
        quant_nvfp4_unpack(p, lv, dh);
        for (int i = 0; i < QK_NVFP4; i++) dst[i] = (float)lv[i] * dh[i / 16];
    }
}
