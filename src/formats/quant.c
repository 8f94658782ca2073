/*
 * quant.c — the element types: their table (name, elements and bytes per block),
 * half-precision conversion, and the scalar reference code that turns blocks into
 * floats (every type) and floats into blocks (every type except Q8_1).
 *
 * Data structure: a row of n elements of type t is n / block_elems(t) consecutive
 * blocks (the block_* structs of quant.h, byte-exact ggml layouts, little endian).
 * Within a block, element order and bit packing follow ggml:
 *   Q4_0/Q4_1/Q5_x: qs[j] low nibble is element j, high nibble element j + 16;
 *                   Q5_x: bit j of the 32-bit qh is bit 4 of element j.
 *   Q2_K/Q3_K:      each 128-element half uses 32 bytes of qs; byte l, bits 2s..2s+1
 *                   hold element 32*s + l of that half; Q3_K's hmask[l] bit (4*half + s)
 *                   holds bit 2 (set: value - 0, clear: value - 4).
 *   Q4_K/Q5_K:      64-element chunks; qs byte l low nibble = element l, high = l + 32;
 *                   scale/min of sub-block i (32 elements) are 6 bits packed in 12 bytes.
 *   Q6_K:           128-element halves; ql carries low 4 bits, qh the high 2.
 *   IQ4_NL/IQ4_XS:  nibbles as Q4_0 (per 32 elements), each an index into the
 *                   16 levels quant_kvalues_iq4nl; IQ4_XS's sub-block scales are
 *                   6 bits (low 4 in scales_l, high 2 in scales_h), offset 32.
 *   MXFP4:          the E8M0 exponent byte e, then nibbles as Q4_0, each an index
 *                   into quant_kvalues_mxfp4 (E2M1 doubled); scale 2^(e - 128)
 *                   (quant_e8m0_half, exact for every e, subnormal for e = 0, 1).
 * Invariants: dequantisation never reads outside n / block_elems blocks and never
 * writes outside dst[0..n); for an unknown type or an n that is not a multiple of the
 * block size it writes NaN (the caller is expected to have validated with
 * quant_row_bytes()). Quantisation output is readable by llama.cpp. Everything here is
 * the plain scalar definition and calls no kernel; the SIMD F16 row conversion with
 * the same bytes is the kernels' kern_quantize_row (kernels/actq.h).
 */
#include "formats/quant.h"
#include "formats/quant_iq1.h"
#include "formats/quant_nvfp4.h"
#include "formats/quant_tq.h"

#include "formats/quant_iq.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

/* ---- type table --------------------------------------------------------- */

typedef struct type_info {
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
} type_info;

static const type_info TYPES[KVI_TYPE_COUNT] = {
    [KVI_TYPE_F32] = { "f32", 1, 4 },
    [KVI_TYPE_F16] = { "f16", 1, 2 },
    [KVI_TYPE_Q4_0] = { "q4_0", QK4_0, sizeof(block_q4_0) },
    [KVI_TYPE_Q4_1] = { "q4_1", QK4_1, sizeof(block_q4_1) },
    [KVI_TYPE_Q5_0] = { "q5_0", QK5_0, sizeof(block_q5_0) },
    [KVI_TYPE_Q5_1] = { "q5_1", QK5_1, sizeof(block_q5_1) },
    [KVI_TYPE_Q8_0] = { "q8_0", QK8_0, sizeof(block_q8_0) },
    [KVI_TYPE_Q8_1] = { "q8_1", QK8_1, sizeof(block_q8_1) },
    [KVI_TYPE_Q2_K] = { "q2_k", QK_K, sizeof(block_q2_K) },
    [KVI_TYPE_Q3_K] = { "q3_k", QK_K, sizeof(block_q3_K) },
    [KVI_TYPE_Q4_K] = { "q4_k", QK_K, sizeof(block_q4_K) },
    [KVI_TYPE_Q5_K] = { "q5_k", QK_K, sizeof(block_q5_K) },
    [KVI_TYPE_Q6_K] = { "q6_k", QK_K, sizeof(block_q6_K) },
    [KVI_TYPE_Q8_K] = { "q8_k", QK_K, sizeof(block_q8_K) },
    [KVI_TYPE_IQ2_XXS] = { "iq2_xxs", QK_K, sizeof(block_iq2_xxs) },
    [KVI_TYPE_IQ2_XS] = { "iq2_xs", QK_K, sizeof(block_iq2_xs) },
    [KVI_TYPE_IQ3_XXS] = { "iq3_xxs", QK_K, sizeof(block_iq3_xxs) },
    [KVI_TYPE_IQ4_NL] = { "iq4_nl", QK4_NL, sizeof(block_iq4_nl) },
    [KVI_TYPE_IQ3_S] = { "iq3_s", QK_K, sizeof(block_iq3_s) },
    [KVI_TYPE_IQ2_S] = { "iq2_s", QK_K, sizeof(block_iq2_s) },
    [KVI_TYPE_IQ4_XS] = { "iq4_xs", QK_K, sizeof(block_iq4_xs) },
    [KVI_TYPE_BF16] = { "bf16", 1, 2 },
    [KVI_TYPE_MXFP4] = { "mxfp4", QK_MXFP4, sizeof(block_mxfp4) },
    [KVI_TYPE_IQ1_S] = { "iq1_s", QK_K, sizeof(block_iq1_s) }, /* quant_iq1.h */
    [KVI_TYPE_IQ1_M] = { "iq1_m", QK_K, sizeof(block_iq1_m) },
    [KVI_TYPE_TQ1_0] = { "tq1_0", QK_K, sizeof(block_tq1_0) }, /* quant_tq.h */
    [KVI_TYPE_TQ2_0] = { "tq2_0", QK_K, sizeof(block_tq2_0) },
    [KVI_TYPE_NVFP4] = { "nvfp4", QK_NVFP4, sizeof(block_nvfp4) }, /* quant_nvfp4.h */
};

bool quant_type_known(kvi_type t) { return (int)t >= 0 && (int)t < KVI_TYPE_COUNT && TYPES[t].name != NULL; }

const char *kvi_type_name(kvi_type t)
{
    if (t == KVI_TYPE_KV_Q4) return "q4";         /* KV-cache-only type (KIVI) */
    if (t == KVI_TYPE_KV_LATENT) return "latent"; /* values inside the keys (MLA) */
    return quant_type_known(t) ? TYPES[t].name : NULL;
}

int kvi_type_from_name(const char *name, kvi_type *out)
{
    if (!name) return KVI_E_INVALID;
    for (int t = 0; t < KVI_TYPE_COUNT; t++) {
        const char *n = TYPES[t].name;
        if (!n) continue;
        size_t i = 0;
        while (n[i] && name[i] && tolower((unsigned char)name[i]) == n[i]) i++;
        if (n[i] == 0 && name[i] == 0) {
            if (out) *out = (kvi_type)t;
            return KVI_OK;
        }
    }
    if ((name[0] == 'q' || name[0] == 'Q') && name[1] == '4' && name[2] == 0) {
        if (out) *out = KVI_TYPE_KV_Q4;
        return KVI_OK;
    }
    return KVI_E_INVALID;
}

int64_t quant_block_elems(kvi_type t) { return quant_type_known(t) ? TYPES[t].block_elems : 0; }

size_t quant_block_bytes(kvi_type t) { return quant_type_known(t) ? TYPES[t].block_bytes : 0; }

size_t quant_row_bytes(kvi_type t, int64_t n)
{
    if (!quant_type_known(t) || n < 0) return 0;
    int64_t be = TYPES[t].block_elems;
    if (n % be != 0) return 0;
    uint64_t nb = (uint64_t)(n / be);
    if (nb > SIZE_MAX / TYPES[t].block_bytes) return 0;
    return (size_t)nb * TYPES[t].block_bytes;
}

/* ---- half precision ----------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_f16_to_f32(quant_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return bits_f32(f32_bits(v) | sign);
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Shifts v right by s (1..31) rounding to nearest, ties to even. */
static uint32_t shift_rne(uint32_t v, unsigned s)
{
    uint32_t r = v >> s;
    uint32_t rem = v & ((1u << s) - 1);
    uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return r;
}

quant_f16 quant_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {
        if (x == 0x7f800000u) return sign | 0x7c00u;
        /* NaN: keep the top payload bits, force quiet so it stays a NaN */
        return (quant_f16)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    }
    int32_t e = (int32_t)(x >> 23); /* biased f32 exponent */
    uint32_t man = (x & 0x7fffffu) | 0x800000u;
    if (e < 113) {
        /* below 2^-14: f16 subnormal (or zero) = man * 2^(e-150) / 2^-24 */
        if (e < 102) return sign; /* < 2^-25: rounds to zero */
        return (quant_f16)(sign | shift_rne(man, (unsigned)(126 - e)));
    }
    if (e > 142) return sign | 0x7c00u; /* >= 2^16: overflow */
    /* normal: exponent and mantissa together, so a rounding carry bumps the exponent */
    uint32_t v = ((uint32_t)(e - 112) << 23) | (x & 0x7fffffu);
    uint32_t r = shift_rne(v, 13);
    if (r >= 0x7c00u) return sign | 0x7c00u;
    return (quant_f16)(sign | r);
}

float quant_bf16_to_f32(quant_bf16 h) { return bits_f32((uint32_t)h << 16); }

quant_bf16 quant_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (quant_bf16)((x >> 16) | 0x40u); /* quiet NaN */
    return (quant_bf16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- dequantisation ----------------------------------------------------- */

#define F16(h) quant_f16_to_f32(h)

static uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 6-bit scale of sub-block i (0..15) of Q3_K, minus 32. */
static int q3k_scale(const uint8_t *s, int i)
{
    int lo = i < 8 ? (s[i] & 0xf) : (s[i - 8] >> 4);
    int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

static void deq_q4_0(const block_q4_0 *b, float *y)
{
    float d = F16(b->d);
    for (int j = 0; j < QK4_0 / 2; j++) {
        y[j] = (float)((b->qs[j] & 0xf) - 8) * d;
        y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const block_q4_1 *b, float *y)
{
    float d = F16(b->d), m = F16(b->m);
    for (int j = 0; j < QK4_1 / 2; j++) {
        y[j] = (float)(b->qs[j] & 0xf) * d + m;
        y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
    }
}

static void deq_q5_0(const block_q5_0 *b, float *y)
{
    float d = F16(b->d);
    uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < QK5_0 / 2; j++) {
        int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
        y[j] = (float)(((b->qs[j] & 0xf) | h0 << 4) - 16) * d;
        y[j + 16] = (float)(((b->qs[j] >> 4) | h1 << 4) - 16) * d;
    }
}

static void deq_q5_1(const block_q5_1 *b, float *y)
{
    float d = F16(b->d), m = F16(b->m);
    uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < QK5_1 / 2; j++) {
        int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
        y[j] = (float)((b->qs[j] & 0xf) | h0 << 4) * d + m;
        y[j + 16] = (float)((b->qs[j] >> 4) | h1 << 4) * d + m;
    }
}

static void deq_q8_0(const block_q8_0 *b, float *y)
{
    float d = F16(b->d);
    for (int j = 0; j < QK8_0; j++) y[j] = (float)b->qs[j] * d;
}

static void deq_q8_1(const block_q8_1 *b, float *y)
{
    float d = F16(b->d);
    for (int j = 0; j < QK8_1; j++) y[j] = (float)b->qs[j] * d;
}

static void deq_q2_k(const block_q2_K *b, float *y)
{
    float d = F16(b->d), dmin = F16(b->dmin);
    for (int h = 0; h < 2; h++) { /* 128-element halves */
        const uint8_t *q = b->qs + 32 * h;
        for (int s = 0; s < 4; s++) {     /* 2-bit planes */
            for (int k = 0; k < 2; k++) { /* 16-element sub-blocks */
                uint8_t sc = b->scales[8 * h + 2 * s + k];
                float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++)
                    y[128 * h + 32 * s + 16 * k + l] = dl * (float)((q[16 * k + l] >> (2 * s)) & 3) - ml;
            }
        }
    }
}

static void deq_q3_k(const block_q3_K *b, float *y)
{
    float d = F16(b->d);
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = b->qs + 32 * h;
        for (int s = 0; s < 4; s++) {
            uint8_t m = (uint8_t)(1u << (4 * h + s));
            for (int k = 0; k < 2; k++) {
                float dl = d * (float)q3k_scale(b->scales, 8 * h + 2 * s + k);
                for (int l = 16 * k; l < 16 * k + 16; l++) {
                    int v = ((q[l] >> (2 * s)) & 3) - ((b->hmask[l] & m) ? 0 : 4);
                    y[128 * h + 32 * s + l] = dl * (float)v;
                }
            }
        }
    }
}

/* The scales (dm[0], dm[2]) and mins (dm[1], dm[3]) of 64-element chunk c's two
 * sub-blocks in a Q4_K / Q5_K block. */
static void k4_chunk_scales(const uint8_t *scales, int c, float d, float dmin, float dm[4])
{
    for (int h = 0; h < 2; h++) {
        uint8_t sc, mn;
        quant_scale_min_k4(2 * c + h, scales, &sc, &mn);
        dm[2 * h] = d * (float)sc;
        dm[2 * h + 1] = dmin * (float)mn;
    }
}

static void deq_q4_k(const block_q4_K *b, float *y)
{
    float d = F16(b->d), dmin = F16(b->dmin);
    for (int c = 0; c < 4; c++) { /* 64-element chunks */
        const uint8_t *q = b->qs + 32 * c;
        float dm[4];
        k4_chunk_scales(b->scales, c, d, dmin, dm);
        const float d1 = dm[0], m1 = dm[1], d2 = dm[2], m2 = dm[3];
        for (int l = 0; l < 32; l++) {
            y[64 * c + l] = d1 * (float)(q[l] & 0xf) - m1;
            y[64 * c + 32 + l] = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void deq_q5_k(const block_q5_K *b, float *y)
{
    float d = F16(b->d), dmin = F16(b->dmin);
    for (int c = 0; c < 4; c++) {
        const uint8_t *q = b->qs + 32 * c;
        float dm[4];
        k4_chunk_scales(b->scales, c, d, dmin, dm);
        const float d1 = dm[0], m1 = dm[1], d2 = dm[2], m2 = dm[3];
        for (int l = 0; l < 32; l++) {
            int h0 = (b->qh[l] >> (2 * c)) & 1, h1 = (b->qh[l] >> (2 * c + 1)) & 1;
            y[64 * c + l] = d1 * (float)((q[l] & 0xf) | h0 << 4) - m1;
            y[64 * c + 32 + l] = d2 * (float)((q[l] >> 4) | h1 << 4) - m2;
        }
    }
}

static void deq_q6_k(const block_q6_K *b, float *y)
{
    float d = F16(b->d);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        const int8_t *sc = b->scales + 8 * h;
        float *yy = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = ((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            yy[l] = d * (float)sc[is] * (float)q1;
            yy[l + 32] = d * (float)sc[is + 2] * (float)q2;
            yy[l + 64] = d * (float)sc[is + 4] * (float)q3;
            yy[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

static void deq_q8_k(const block_q8_K *b, float *y)
{
    for (int j = 0; j < QK_K; j++) y[j] = b->d * (float)b->qs[j];
}

const int8_t quant_kvalues_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113 };

static void deq_iq4_nl(const block_iq4_nl *b, float *y)
{
    const float d = F16(b->d);
    for (int j = 0; j < QK4_NL / 2; j++) {
        y[j] = d * (float)quant_kvalues_iq4nl[b->qs[j] & 0xf];
        y[j + 16] = d * (float)quant_kvalues_iq4nl[b->qs[j] >> 4];
    }
}

/* ggml's order: dl = d * (ls - 32) (exact), then dl * level (rounded) */
static void deq_iq4_xs(const block_iq4_xs *b, float *y)
{
    const float d = F16(b->d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const float dl = d * (float)quant_iq4xs_scale(b, ib);
        const uint8_t *q = b->qs + 16 * ib;
        for (int j = 0; j < 16; j++) {
            y[32 * ib + j] = dl * (float)quant_kvalues_iq4nl[q[j] & 0xf];
            y[32 * ib + 16 + j] = dl * (float)quant_kvalues_iq4nl[q[j] >> 4];
        }
    }
}

const int8_t quant_kvalues_mxfp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

static void deq_mxfp4(const block_mxfp4 *b, float *y)
{
    const float d = quant_e8m0_half(b->e);
    for (int j = 0; j < QK_MXFP4 / 2; j++) {
        y[j] = (float)quant_kvalues_mxfp4[b->qs[j] & 0xf] * d;
        y[j + 16] = (float)quant_kvalues_mxfp4[b->qs[j] >> 4] * d;
    }
}

void quant_dequant_row(kvi_type t, const void *src, float *dst, int64_t n)
{
    if (n <= 0) return;
    int64_t be = quant_block_elems(t);
    if (be == 0 || n % be != 0) {
        for (int64_t i = 0; i < n; i++) dst[i] = NAN;
        return;
    }
    const uint8_t *p = src;
    int64_t nb = n / be;
    size_t bb = quant_block_bytes(t);
    switch (t) {
    case KVI_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case KVI_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            quant_f16 h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = quant_f16_to_f32(h);
        }
        return;
    case KVI_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            quant_bf16 h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = quant_bf16_to_f32(h);
        }
        return;
    case KVI_TYPE_IQ1_S:
    case KVI_TYPE_IQ1_M: quant_iq1_dequant(t, src, dst, n); return;
    case KVI_TYPE_TQ1_0:
    case KVI_TYPE_TQ2_0: quant_tq_dequant(t, src, dst, n); return;
    case KVI_TYPE_NVFP4: quant_nvfp4_dequant(src, dst, n); return;
    default: break;
    }
    if (quant_iq_dequant_row(t, p, dst, nb)) return; /* the grid types (quant_iq.c) */
    /* Block types: copy each block to an aligned local (rows may be unaligned). */
    for (int64_t i = 0; i < nb; i++, p += bb) {
        float *y = dst + i * be;
        switch (t) {
#define DQ(T, B, fn)                 \
    case T: {                        \
        B blk;                       \
        memcpy(&blk, p, sizeof blk); \
        fn(&blk, y);                 \
        break;                       \
    }
            DQ(KVI_TYPE_Q4_0, block_q4_0, deq_q4_0)
            DQ(KVI_TYPE_Q4_1, block_q4_1, deq_q4_1)
            DQ(KVI_TYPE_Q5_0, block_q5_0, deq_q5_0)
            DQ(KVI_TYPE_Q5_1, block_q5_1, deq_q5_1)
            DQ(KVI_TYPE_Q8_0, block_q8_0, deq_q8_0)
            DQ(KVI_TYPE_Q8_1, block_q8_1, deq_q8_1)
            DQ(KVI_TYPE_Q2_K, block_q2_K, deq_q2_k)
            DQ(KVI_TYPE_Q3_K, block_q3_K, deq_q3_k)
            DQ(KVI_TYPE_Q4_K, block_q4_K, deq_q4_k)
            DQ(KVI_TYPE_Q5_K, block_q5_K, deq_q5_k)
            DQ(KVI_TYPE_Q6_K, block_q6_K, deq_q6_k)
            DQ(KVI_TYPE_Q8_K, block_q8_K, deq_q8_k)
            DQ(KVI_TYPE_IQ4_NL, block_iq4_nl, deq_iq4_nl)
            DQ(KVI_TYPE_IQ4_XS, block_iq4_xs, deq_iq4_xs)
            DQ(KVI_TYPE_MXFP4, block_mxfp4, deq_mxfp4)
#undef DQ
        default:
            for (int64_t j = 0; j < be; j++) y[j] = NAN;
            break;
        }
    }
}

/* ---- quantisation ------------------------------------------------------- */

static int nearest_int(float f) { return (int)lrintf(f); }

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The element of largest magnitude, with its sign. */
static float signed_absmax(const float *x, int n)
{
    float m = 0.0f, am = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > am) {
            am = a;
            m = x[i];
        }
    }
    return m;
}

static void minmax(const float *x, int n, float *mn, float *mx)
{
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    *mn = lo;
    *mx = hi;
}

static void quant_q8_0(const float *x, block_q8_0 *b)
{
    float amax = fabsf(signed_absmax(x, QK8_0));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = quant_f32_to_f16(d);
    for (int j = 0; j < QK8_0; j++) b->qs[j] = (int8_t)clampi(nearest_int(x[j] * id), -127, 127);
}

/* Q4_0 / Q5_0: symmetric; the largest-magnitude element maps to -2^(bits-1). */
static void quant_q4_0(const float *x, block_q4_0 *b)
{
    float max = signed_absmax(x, QK4_0);
    float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = quant_f32_to_f16(d);
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(nearest_int(x[j] * id) + 8, 0, 15);
        int q1 = clampi(nearest_int(x[j + 16] * id) + 8, 0, 15);
        b->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

static void quant_q5_0(const float *x, block_q5_0 *b)
{
    float max = signed_absmax(x, QK5_0);
    float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    b->d = quant_f32_to_f16(d);
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(nearest_int(x[j] * id) + 16, 0, 31);
        int q1 = clampi(nearest_int(x[j + 16] * id) + 16, 0, 31);
        b->qs[j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) b->qh[k] = (uint8_t)(qh >> (8 * k));
}

/* Q4_1 / Q5_1: asymmetric, min and step from the block's range. */
static void quant_q4_1(const float *x, block_q4_1 *b)
{
    float mn, mx;
    minmax(x, QK4_1, &mn, &mx);
    float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = quant_f32_to_f16(d);
    b->m = quant_f32_to_f16(mn);
    float m = quant_f16_to_f32(b->m);
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(nearest_int((x[j] - m) * id), 0, 15);
        int q1 = clampi(nearest_int((x[j + 16] - m) * id), 0, 15);
        b->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

static void quant_q5_1(const float *x, block_q5_1 *b)
{
    float mn, mx;
    minmax(x, QK5_1, &mn, &mx);
    float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    b->d = quant_f32_to_f16(d);
    b->m = quant_f32_to_f16(mn);
    float m = quant_f16_to_f32(b->m);
    for (int j = 0; j < 16; j++) {
        int q0 = clampi(nearest_int((x[j] - m) * id), 0, 31);
        int q1 = clampi(nearest_int((x[j + 16] - m) * id), 0, 31);
        b->qs[j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) b->qh[k] = (uint8_t)(qh >> (8 * k));
}

static void quant_q8_k(const float *x, block_q8_K *b)
{
    float max = signed_absmax(x, QK_K);
    if (max == 0.0f) {
        memset(b, 0, sizeof *b);
        return;
    }
    float iscale = -128.0f / max;
    for (int j = 0; j < QK_K; j++) b->qs[j] = (int8_t)clampi(nearest_int(iscale * x[j]), -128, 127);
    for (int g = 0; g < QK_K / 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += b->qs[16 * g + l];
        b->bsums[g] = (int16_t)s;
    }
    b->d = 1.0f / iscale;
}

/* Per sub-block (min <= 0, step) of an asymmetric K-quant with levels 0..nmax. */
static void sub_range(const float *x, int n, int nmax, float *step, float *negmin)
{
    float mn, mx;
    minmax(x, n, &mn, &mx);
    if (mn > 0.0f) mn = 0.0f;
    *step = (mx - mn) / (float)nmax;
    *negmin = -mn;
}

/* Quantises `n` values to levels 0..nmax for value = d * q - m. */
static void levels_asym(const float *x, int n, float d, float m, int nmax, uint8_t *q)
{
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) q[i] = (uint8_t)clampi(nearest_int((x[i] + m) * id), 0, nmax);
}

static void quant_q2_k(const float *x, block_q2_K *b)
{
    float step[16], negmin[16], maxs = 0.0f, maxm = 0.0f;
    uint8_t L[QK_K];
    for (int i = 0; i < 16; i++) {
        sub_range(x + 16 * i, 16, 3, &step[i], &negmin[i]);
        if (step[i] > maxs) maxs = step[i];
        if (negmin[i] > maxm) maxm = negmin[i];
    }
    float d = maxs / 15.0f, dm = maxm / 15.0f;
    b->d = quant_f32_to_f16(d);
    b->dmin = quant_f32_to_f16(dm);
    d = quant_f16_to_f32(b->d);
    dm = quant_f16_to_f32(b->dmin);
    for (int i = 0; i < 16; i++) {
        int ls = d != 0.0f ? clampi(nearest_int(step[i] / d), 0, 15) : 0;
        int lm = dm != 0.0f ? clampi(nearest_int(negmin[i] / dm), 0, 15) : 0;
        b->scales[i] = (uint8_t)(ls | lm << 4);
        levels_asym(x + 16 * i, 16, d * (float)ls, dm * (float)lm, 3, L + 16 * i);
    }
    memset(b->qs, 0, sizeof b->qs);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++) b->qs[32 * h + l] |= (uint8_t)(L[128 * h + 32 * s + l] << (2 * s));
}

/* Q3_K and Q6_K: the scale of each of the 16 sub-blocks of 16 (signed abs-max over
 * the lowest level, div), the one of largest magnitude in *maxs; returns |*maxs|. */
static float subblock_scales(const float *x, float div, float sc[16], float *maxs)
{
    float amax = 0.0f;
    *maxs = 0.0f;
    for (int i = 0; i < 16; i++) {
        sc[i] = signed_absmax(x + 16 * i, 16) / div;
        if (fabsf(sc[i]) > amax) {
            amax = fabsf(sc[i]);
            *maxs = sc[i];
        }
    }
    return amax;
}

static void quant_q3_k(const float *x, block_q3_K *b)
{
    float sc[16], maxs;
    const float amax = subblock_scales(x, -4.0f, sc, &maxs);
    memset(b, 0, sizeof *b);
    if (amax == 0.0f) return;
    float iscale = -32.0f / maxs;
    int ls[16];
    for (int i = 0; i < 16; i++) {
        ls[i] = clampi(nearest_int(iscale * sc[i]), -32, 31);
        int l = ls[i] + 32;
        if (i < 8)
            b->scales[i] |= (uint8_t)(l & 0xf);
        else
            b->scales[i - 8] |= (uint8_t)((l & 0xf) << 4);
        b->scales[8 + (i & 3)] |= (uint8_t)((l >> 4) << (2 * (i >> 2)));
    }
    b->d = quant_f32_to_f16(1.0f / iscale);
    float d = quant_f16_to_f32(b->d);
    for (int h = 0; h < 2; h++) {
        for (int s = 0; s < 4; s++) {
            for (int l = 0; l < 32; l++) {
                int e = 128 * h + 32 * s + l;
                float dl = d * (float)ls[e / 16];
                int q = dl != 0.0f ? clampi(nearest_int(x[e] / dl), -4, 3) + 4 : 4;
                if (q > 3) {
                    b->hmask[l] |= (uint8_t)(1u << (4 * h + s));
                    q -= 4;
                }
                b->qs[32 * h + l] |= (uint8_t)(q << (2 * s));
            }
        }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fills d, dmin, scales and L. */
static void quant_k_asym(const float *x, int nmax, quant_f16 *dh, quant_f16 *dminh, uint8_t *scales,
                         uint8_t *L)
{
    float step[8], negmin[8], maxs = 0.0f, maxm = 0.0f;
    uint8_t ls[8], lm[8];
    for (int i = 0; i < 8; i++) {
        sub_range(x + 32 * i, 32, nmax, &step[i], &negmin[i]);
        if (step[i] > maxs) maxs = step[i];
        if (negmin[i] > maxm) maxm = negmin[i];
    }
    *dh = quant_f32_to_f16(maxs / 63.0f);
    *dminh = quant_f32_to_f16(maxm / 63.0f);
    float d = quant_f16_to_f32(*dh), dm = quant_f16_to_f32(*dminh);
    for (int i = 0; i < 8; i++) {
        ls[i] = (uint8_t)(d != 0.0f ? clampi(nearest_int(step[i] / d), 0, 63) : 0);
        lm[i] = (uint8_t)(dm != 0.0f ? clampi(nearest_int(negmin[i] / dm), 0, 63) : 0);
        levels_asym(x + 32 * i, 32, d * (float)ls[i], dm * (float)lm[i], nmax, L + 32 * i);
    }
    quant_pack_scale_min_k4(ls, lm, scales);
}

static void quant_q4_k(const float *x, block_q4_K *b)
{
    uint8_t L[QK_K];
    quant_k_asym(x, 15, &b->d, &b->dmin, b->scales, L);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

static void quant_q5_k(const float *x, block_q5_K *b)
{
    uint8_t L[QK_K];
    quant_k_asym(x, 31, &b->d, &b->dmin, b->scales, L);
    memset(b->qh, 0, sizeof b->qh);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int a = L[64 * c + l], h = L[64 * c + 32 + l];
            b->qs[32 * c + l] = (uint8_t)((a & 0xf) | (h & 0xf) << 4);
            b->qh[l] |= (uint8_t)((a >> 4) << (2 * c) | (h >> 4) << (2 * c + 1));
        }
    }
}

static void quant_q6_k(const float *x, block_q6_K *b)
{
    float sc[16], maxs;
    const float amax = subblock_scales(x, -32.0f, sc, &maxs);
    memset(b, 0, sizeof *b);
    if (amax == 0.0f) {
        memset(b->ql, 0x00, sizeof b->ql);
        /* value 0 is level 32: low nibble 0, high bits 2 */
        memset(b->qh, 0xaa, sizeof b->qh);
        return;
    }
    float iscale = -128.0f / maxs;
    for (int i = 0; i < 16; i++) b->scales[i] = (int8_t)clampi(nearest_int(iscale * sc[i]), -128, 127);
    b->d = quant_f32_to_f16(1.0f / iscale);
    float d = quant_f16_to_f32(b->d);
    uint8_t L[QK_K];
    for (int e = 0; e < QK_K; e++) {
        float dl = d * (float)b->scales[e / 16];
        L[e] = (uint8_t)(dl != 0.0f ? clampi(nearest_int(x[e] / dl), -32, 31) + 32 : 32);
    }
    for (int h = 0; h < 2; h++) {
        for (int l = 0; l < 32; l++) {
            const uint8_t *q = L + 128 * h;
            b->ql[64 * h + l] = (uint8_t)((q[l] & 0xf) | (q[l + 64] & 0xf) << 4);
            b->ql[64 * h + l + 32] = (uint8_t)((q[l + 32] & 0xf) | (q[l + 96] & 0xf) << 4);
            b->qh[32 * h + l] = (uint8_t)((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 |
                                          (q[l + 96] >> 4) << 6);
        }
    }
}

/* ---- IQ4_NL / IQ4_XS: a least-squares fit over the codebook ------------- */

/* The index of the codebook level nearest v (in level units): the count of the
 * midpoints between neighbouring levels that v exceeds. */
static int iq4_index(float v)
{
    static const float MID[15] = { -115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                   7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f };
    int i = 0;
    for (int k = 0; k < 15; k++) i += v > MID[k];
    return i;
}

/* Indices L of the n values x for the scale 1/id, and the scale that is best for
 * those indices (sum(x * level) / sum(level^2)) with its quality
 * sum(x * level)^2 / sum(level^2) (larger is better) in *score. */
static float iq4_try(const float *x, int n, float id, uint8_t *L, float *score)
{
    float sqx = 0.0f, sq2 = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)iq4_index(id * x[i]);
        const float q = (float)quant_kvalues_iq4nl[L[i]];
        sqx += q * x[i];
        sq2 += q * q;
    }
    *score = sq2 > 0.0f ? sqx * sqx / sq2 : 0.0f;
    return sq2 > 0.0f ? sqx / sq2 : 0.0f;
}

/* The scale of n (<= 32) values x over the codebook, their indices in L: the
 * largest magnitude mapped to the top level (113) or, over a few trial scales,
 * near the bottom one (-127), keeping the best least-squares fit. 0 (indices of
 * level 1) when x is all zero. */
static float iq4_fit(const float *x, int n, uint8_t *L)
{
    const float max = signed_absmax(x, n);
    if (max == 0.0f) {
        memset(L, 8, (size_t)n);
        return 0.0f;
    }
    uint8_t Lt[32];
    float best, score;
    float d = iq4_try(x, n, 113.0f / max, L, &best);
    for (int t = -6; t <= 6; t += 2) {
        const float dt = iq4_try(x, n, (-127.0f + (float)t) / max, Lt, &score);
        if (score > best) {
            best = score;
            d = dt;
            memcpy(L, Lt, (size_t)n);
        }
    }
    return d;
}

static void quant_iq4_nl(const float *x, block_iq4_nl *b)
{
    uint8_t L[QK4_NL];
    b->d = quant_f32_to_f16(iq4_fit(x, QK4_NL, L));
    for (int j = 0; j < QK4_NL / 2; j++) b->qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

/* Each sub-block's own best scale, then d so that the largest of them is -32 d,
 * the 6-bit scales of d, and the indices again for the scales as stored. */
static void quant_iq4_xs(const float *x, block_iq4_xs *b)
{
    float sc[8], amax = 0.0f, max = 0.0f;
    uint8_t L[QK_K];
    for (int ib = 0; ib < 8; ib++) {
        sc[ib] = iq4_fit(x + 32 * ib, 32, L + 32 * ib);
        if (fabsf(sc[ib]) > amax) {
            amax = fabsf(sc[ib]);
            max = sc[ib];
        }
    }
    memset(b, 0, sizeof *b);
    b->d = quant_f32_to_f16(-max / 32.0f);
    const float d = quant_f16_to_f32(b->d);
    for (int ib = 0; ib < 8; ib++) {
        const int l = d != 0.0f ? clampi(nearest_int(sc[ib] / d), -32, 31) : 0;
        const int ls = l + 32;
        b->scales_l[ib / 2] |= (uint8_t)((ls & 0xf) << (4 * (ib % 2)));
        b->scales_h |= (uint16_t)((ls >> 4) << (2 * ib));
        const float dl = d * (float)l;
        for (int j = 0; j < 32; j++) {
            const int q = dl != 0.0f ? iq4_index(x[32 * ib + j] / dl) : 8;
            L[32 * ib + j] = (uint8_t)q;
        }
        for (int j = 0; j < 16; j++)
            b->qs[16 * ib + j] = (uint8_t)(L[32 * ib + j] | L[32 * ib + 16 + j] << 4);
    }
}

/* ---- MXFP4: a power-of-two scale, nearest FP4 level --------------------- */

/* The nibble of the level nearest v (in level units, i.e. doubled E2M1): the
 * count of midpoints between neighbouring magnitudes that |v| exceeds, with the
 * sign in bit 3 (a magnitude of 0 keeps nibble 0). */
static int mxfp4_index(float v)
{
    static const float MID[7] = { 0.5f, 1.5f, 2.5f, 3.5f, 5.0f, 7.0f, 10.0f };
    const float a = fabsf(v);
    int i = 0;
    for (int k = 0; k < 7; k++) i += a > MID[k];
    return (v < 0.0f && i > 0) ? i | 8 : i;
}

/* Squared error of the 32 values x against exponent e (nibbles into L). */
static float mxfp4_try(const float *x, int e, uint8_t *L)
{
    const float d = quant_e8m0_half((uint8_t)e); /* 1 / d overflows for e < 2: divide */
    float err = 0.0f;
    for (int i = 0; i < QK_MXFP4; i++) {
        L[i] = (uint8_t)mxfp4_index(x[i] / d);
        const float r = x[i] - (float)quant_kvalues_mxfp4[L[i]] * d;
        err += r * r;
    }
    return err;
}

/* e0: the smallest exponent whose top level 12 * 2^(e - 128) reaches max |x|
 * (amax = m 2^k with m in [0.5, 1): 12 * 2^s >= amax exactly when s >= k - 4,
 * or s >= k - 3 for m > 0.75); e0 - 1 (the largest values clipped to 12, the rest
 * finer) is tried too and the smaller squared error kept. All zero: e = 0. */
static void quant_mxfp4(const float *x, block_mxfp4 *b)
{
    const float amax = fabsf(signed_absmax(x, QK_MXFP4));
    uint8_t L[QK_MXFP4], Lt[QK_MXFP4];
    int e = 0;
    if (amax > 0.0f && isfinite(amax)) {
        int k;
        const float m = frexpf(amax, &k);
        e = clampi(k - 4 + (m > 0.75f) + 128, 0, 254);
    }
    float best = mxfp4_try(x, e, L);
    if (e > 0 && mxfp4_try(x, e - 1, Lt) < best) {
        e--;
        memcpy(L, Lt, sizeof L);
    }
    b->e = (uint8_t)e;
    for (int j = 0; j < QK_MXFP4 / 2; j++) b->qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

int quant_quantize_row(kvi_type t, const float *src, void *dst, int64_t n)
{
    if (!quant_type_known(t)) return KVI_E_INVALID;
    int64_t be = quant_block_elems(t);
    if (n < 0 || n % be != 0 || (n > 0 && (!src || !dst))) return KVI_E_INVALID;
    uint8_t *p = dst;
    switch (t) {
    case KVI_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return KVI_OK;
    case KVI_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            quant_f16 h = quant_f32_to_f16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return KVI_OK;
    case KVI_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            quant_bf16 h = quant_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return KVI_OK;
    case KVI_TYPE_Q8_1: return KVI_E_UNSUPPORTED;
    default: break;
    }
    size_t bb = quant_block_bytes(t);
    for (int64_t i = 0; i < n / be; i++, p += bb) {
        const float *x = src + i * be;
        switch (t) {
#define QU(T, B, fn)                 \
    case T: {                        \
        B blk;                       \
        fn(x, &blk);                 \
        memcpy(p, &blk, sizeof blk); \
        break;                       \
    }
            QU(KVI_TYPE_Q4_0, block_q4_0, quant_q4_0)
            QU(KVI_TYPE_Q4_1, block_q4_1, quant_q4_1)
            QU(KVI_TYPE_Q5_0, block_q5_0, quant_q5_0)
            QU(KVI_TYPE_Q5_1, block_q5_1, quant_q5_1)
            QU(KVI_TYPE_Q8_0, block_q8_0, quant_q8_0)
            QU(KVI_TYPE_Q2_K, block_q2_K, quant_q2_k)
            QU(KVI_TYPE_Q3_K, block_q3_K, quant_q3_k)
            QU(KVI_TYPE_Q4_K, block_q4_K, quant_q4_k)
            QU(KVI_TYPE_Q5_K, block_q5_K, quant_q5_k)
            QU(KVI_TYPE_Q6_K, block_q6_K, quant_q6_k)
            QU(KVI_TYPE_Q8_K, block_q8_K, quant_q8_k)
            QU(KVI_TYPE_IQ4_NL, block_iq4_nl, quant_iq4_nl)
            QU(KVI_TYPE_IQ4_XS, block_iq4_xs, quant_iq4_xs)
            QU(KVI_TYPE_MXFP4, block_mxfp4, quant_mxfp4)
#undef QU
        default: return KVI_E_UNSUPPORTED;
        }
    }
    return KVI_OK;
}
