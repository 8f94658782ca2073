/*
 * quant_iq.c — decoding of the grid-based low-bit blocks (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S; layouts and the decoded form in quant_iq.h).
 *
 * quant_iq_unpack is the reference reader of these blocks: the dequantisation
 * below and the scalar / AVX2 integer products (kernels/q8_rows.h) start from its
 * mag / sgn / sc / dw; the AVX-512 kernel (kernels/qgemm_iq_avx512.c) decodes the
 * same bytes with vectors and is tested against it. It reads exactly one block.
 */
#include "formats/quant_iq.h"

#include "formats/quant_grids.h"

#include <string.h>

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* The grid entries' bytes in value order: on a little-endian host that is their
 * memory order, one store; elsewhere byte by byte. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static void put8(uint8_t *m, uint64_t g) { memcpy(m, &g, 8); }
static void put4(uint8_t *m, uint32_t g) { memcpy(m, &g, 4); }
#else
static void put8(uint8_t *m, uint64_t g)
{
    for (int j = 0; j < 8; j++) m[j] = (uint8_t)(g >> (8 * j));
}
static void put4(uint8_t *m, uint32_t g)
{
    for (int j = 0; j < 4; j++) m[j] = (uint8_t)(g >> (8 * j));
}
#endif

/* the two nibble scales of a byte as the odd scales of 16 values each */
static void scales_nibbles(uint8_t b, uint8_t *sc)
{
    sc[0] = (uint8_t)(2 * (b & 0xf) + 1);
    sc[1] = (uint8_t)(2 * (b >> 4) + 1);
}

static void unpack_iq2_xxs(const uint8_t *p, uint8_t *mag, uint8_t *sgn, uint8_t *sc)
{
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = p + 2 + 8 * ib;
        const uint32_t aux = le32(q + 4);
        for (int l = 0; l < 4; l++) {
            put8(mag + 32 * ib + 8 * l, quant_iq2xxs_grid[q[l]]);
            sgn[4 * ib + l] = quant_ksigns_iq2xs[(aux >> (7 * l)) & 127];
        }
        sc[2 * ib] = sc[2 * ib + 1] = (uint8_t)(2 * (aux >> 28) + 1);
    }
}

static void unpack_iq2_xs(const uint8_t *p, uint8_t *mag, uint8_t *sgn, uint8_t *sc)
{
    for (int g = 0; g < 32; g++) {
        const uint16_t v = le16(p + 2 + 2 * g);
        put8(mag + 8 * g, quant_iq2xs_grid[v & 511]);
        sgn[g] = quant_ksigns_iq2xs[v >> 9];
    }
    for (int ib = 0; ib < 8; ib++) scales_nibbles(p[66 + ib], sc + 2 * ib);
}

static void unpack_iq2_s(const uint8_t *p, uint8_t *mag, uint8_t *sgn, uint8_t *sc)
{
    for (int g = 0; g < 32; g++) {
        const int ib = g / 4, l = g % 4;
        const int idx = p[2 + g] | ((p[66 + ib] >> (2 * l)) & 3) << 8;
        put8(mag + 8 * g, quant_iq2s_grid[idx]);
        sgn[g] = p[34 + g];
    }
    for (int ib = 0; ib < 8; ib++) scales_nibbles(p[74 + ib], sc + 2 * ib);
}

static void unpack_iq3_xxs(const uint8_t *p, uint8_t *mag, uint8_t *sgn, uint8_t *sc)
{
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t aux = le32(p + 66 + 4 * ib);
        for (int e = 0; e < 8; e++) put4(mag + 32 * ib + 4 * e, quant_iq3xxs_grid[p[2 + 8 * ib + e]]);
        for (int l = 0; l < 4; l++) sgn[4 * ib + l] = quant_ksigns_iq2xs[(aux >> (7 * l)) & 127];
        sc[2 * ib] = sc[2 * ib + 1] = (uint8_t)(2 * (aux >> 28) + 1);
    }
}

static void unpack_iq3_s(const uint8_t *p, uint8_t *mag, uint8_t *sgn, uint8_t *sc)
{
    for (int ib = 0; ib < 8; ib++)
        for (int e = 0; e < 8; e++) {
            const int idx = p[2 + 8 * ib + e] | ((p[66 + ib] >> e) & 1) << 8;
            put4(mag + 32 * ib + 4 * e, quant_iq3s_grid[idx]);
        }
    memcpy(sgn, p + 74, 32);
    for (int k = 0; k < 4; k++) {
        const uint8_t b = p[106 + k];
        sc[4 * k] = sc[4 * k + 1] = (uint8_t)(2 * (b & 0xf) + 1);
        sc[4 * k + 2] = sc[4 * k + 3] = (uint8_t)(2 * (b >> 4) + 1);
    }
}

void quant_iq_unpack(kvi_type t, const uint8_t *p, uint8_t mag[QK_K], uint8_t sgn[QK_K / 8], uint8_t sc[16],
                     float *dw)
{
    const float d = quant_f16_to_f32(le16(p));
    switch (t) {
    case KVI_TYPE_IQ2_XXS:
        unpack_iq2_xxs(p, mag, sgn, sc);
        *dw = d * 0.125f;
        break;
    case KVI_TYPE_IQ2_XS:
        unpack_iq2_xs(p, mag, sgn, sc);
        *dw = d * 0.125f;
        break;
    case KVI_TYPE_IQ2_S:
        unpack_iq2_s(p, mag, sgn, sc);
        *dw = d * 0.125f;
        break;
    case KVI_TYPE_IQ3_XXS:
        unpack_iq3_xxs(p, mag, sgn, sc);
        *dw = d * 0.25f;
        break;
    default:
        unpack_iq3_s(p, mag, sgn, sc);
        *dw = d;
        break;
    }
}

bool quant_iq_dequant_row(kvi_type t, const uint8_t *src, float *dst, int64_t nb)
{
    if (!quant_iq_is_grid(t)) return false;
    const size_t bb = quant_block_bytes(t);
    uint8_t mag[QK_K], sgn[QK_K / 8], sc[16];
    float dw;
    for (int64_t b = 0; b < nb; b++) {
        quant_iq_unpack(t, src + (size_t)b * bb, mag, sgn, sc, &dw);
        float *y = dst + b * QK_K;
        for (int i = 0; i < QK_K; i++) {
            const float v = (dw * (float)sc[i / 16]) * (float)mag[i];
            y[i] = (sgn[i / 8] >> (i % 8)) & 1 ? -v : v;
        }
    }
    return true;
}
