/*
 * quant_iq1.c — IQ1_S and IQ1_M blocks into integers and floats (layouts in
 * quant_iq1.h; the grid in quant_grid_iq1.c).
 *
 * Invariant: quant_iq1_dequant gives ggml's dequantize_row_iq1_s / _m values
 * exactly: d * (2s + 1) and (g +- 1/8) are exact in f32 (an 11-bit mantissa times
 * 4 bits, a 5-bit fraction), so is their product, whatever the order.
 */
#include "formats/quant_iq1.h"
#include "formats/quant_grid_iq1.h"

/* lv[0..8) = 8 * (entry idx of the grid + delta), delta's sign from neg */
static void iq1_group(unsigned idx, int neg, int8_t *lv)
{
    const uint64_t g = quant_iq1s_grid[idx & (QUANT_IQ1S_NGRID - 1)];
    for (int j = 0; j < 8; j++) lv[j] = (int8_t)(8 * (int8_t)(uint8_t)(g >> (8 * j)) + (neg ? -1 : 1));
}

static unsigned u16_at(const uint8_t *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }

static void unpack_iq1_s(const uint8_t *p, int8_t *lv, uint8_t *ls, float *d)
{
    const uint8_t *qs = p + 2, *qh = p + 34;
    *d = quant_f16_to_f32((quant_f16)u16_at(p));
    for (int ib = 0; ib < 8; ib++) {
        const unsigned h = u16_at(qh + 2 * ib);
        ls[2 * ib] = ls[2 * ib + 1] = (uint8_t)(2 * ((h >> 12) & 7) + 1);
        for (int l = 0; l < 4; l++)
            iq1_group(qs[4 * ib + l] | ((h >> (3 * l)) & 7) << 8, (int)(h >> 15), lv + 32 * ib + 8 * l);
    }
}

static void unpack_iq1_m(const uint8_t *p, int8_t *lv, uint8_t *ls, float *d)
{
    const uint8_t *qs = p, *qh = p + 32, *sc = p + 48;
    unsigned s[4];
    for (int k = 0; k < 4; k++) s[k] = u16_at(sc + 2 * k);
    *d = quant_f16_to_f32(
        (quant_f16)((s[0] >> 12) | (s[1] >> 8 & 0xf0) | (s[2] >> 4 & 0xf00) | (s[3] & 0xf000)));
    for (int ib = 0; ib < 8; ib++) {
        ls[2 * ib] = (uint8_t)(2 * ((s[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
        ls[2 * ib + 1] = (uint8_t)(2 * ((s[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
        for (int l = 0; l < 4; l++) {
            const unsigned h = qh[2 * ib + l / 2] >> (4 * (l % 2)); /* this group's 4 bits */
            iq1_group(qs[4 * ib + l] | (h & 7) << 8, (int)(h >> 3 & 1), lv + 32 * ib + 8 * l);
        }
    }
}

void quant_iq1_unpack(kvi_type t, const uint8_t *p, int8_t lv[QK_K], uint8_t ls[QK_K / 16], float *d)
{
    if (t == KVI_TYPE_IQ1_M)
        unpack_iq1_m(p, lv, ls, d);
    else
        unpack_iq1_s(p, lv, ls, d);
}

void quant_iq1_dequant(kvi_type t, const void *src, float *dst, int64_t n)
{
    const size_t bb = t == KVI_TYPE_IQ1_M ? sizeof(block_iq1_m) : sizeof(block_iq1_s);
    const uint8_t *p = src;
    int8_t lv[QK_K];
    uint8_t ls[QK_K / 16];
    float d;
    for (int64_t b = 0; b < n / QK_K; b++, p += bb, dst += QK_K) {
        quant_iq1_unpack(t, p, lv, ls, &d);
        for (int i = 0; i < QK_K; i++) dst[i] = d * (float)ls[i / 16] * ((float)lv[i] * 0.125f);
    }
}
