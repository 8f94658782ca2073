/*
 * quant_tq.c — TQ1_0 and TQ2_0 blocks into integers and floats (layouts in
 * quant_tq.h). Invariant: values are (t - 1) * d, ggml's dequantize_row_tq1_0 /
 * _tq2_0 bit for bit (one exact product each).
 */
#include "formats/quant_tq.h"

static void unpack_tq1(const uint8_t *p, int8_t *lv)
{
    const uint8_t *qs = p, *qh = p + 48;
    for (int n = 0; n < 5; n++) {
        for (int m = 0; m < 32; m++) lv[32 * n + m] = (int8_t)(quant_tq1_digit(qs[m], n) - 1);
        for (int m = 0; m < 16; m++) lv[160 + 16 * n + m] = (int8_t)(quant_tq1_digit(qs[32 + m], n) - 1);
    }
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < 4; j++) lv[240 + 4 * n + j] = (int8_t)(quant_tq1_digit(qh[j], n) - 1);
}

static void unpack_tq2(const uint8_t *p, int8_t *lv)
{
    for (int c = 0; c < 2; c++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++)
                lv[128 * c + 32 * l + m] = (int8_t)(((p[32 * c + m] >> (2 * l)) & 3) - 1);
}

void quant_tq_unpack(kvi_type t, const uint8_t *p, int8_t lv[QK_K], float *d)
{
    const size_t off = t == KVI_TYPE_TQ1_0 ? 52 : 64; /* d: the block's last 2 bytes */
    *d = quant_f16_to_f32((quant_f16)(p[off] | p[off + 1] << 8));
    if (t == KVI_TYPE_TQ1_0)
        unpack_tq1(p, lv);
    else
        unpack_tq2(p, lv);
}

void quant_tq_dequant(kvi_type t, const void *src, float *dst, int64_t n)
{
    const size_t bb = t == KVI_TYPE_TQ1_0 ? sizeof(block_tq1_0) : sizeof(block_tq2_0);
    const uint8_t *p = src;
    int8_t lv[QK_K];
    float d;
    for (int64_t b = 0; b < n / QK_K; b++, p += bb, dst += QK_K) {
        quant_tq_unpack(t, p, lv, &d);
        for (int i = 0; i < QK_K; i++) dst[i] = (float)lv[i] * d;
    }
}
