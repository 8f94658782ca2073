/*
 * test_quant.c — block formats: hand-made blocks of every type checked against
 * values computed here from the documented ggml formulas, f16/bf16 conversion edge
 * cases, the type table, and quantise -> dequantise error bounds on N(0,1) data.
 */
#include "kvinfer.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check_row(const char *what, const float *got, const float *want, int n)
{
    int bad = 0;
    for (int i = 0; i < n && bad < 5; i++) {
        if (got[i] != want[i]) {
            bad++;
            CHECK(got[i] == want[i], "%s: element %d is %.9g, want %.9g", what, i, got[i], want[i]);
        }
    }
    if (!bad) CHECK(1, "%s", what);
}

static void test_half(void)
{
    /* f16 -> f32, literal values */
    CHECK(quant_f16_to_f32(0x3c00) == 1.0f, "1.0");
    CHECK(quant_f16_to_f32(0xc000) == -2.0f, "-2");
    CHECK(quant_f16_to_f32(0x3555) == 0.333251953125f, "1/3");
    CHECK(quant_f16_to_f32(0x7bff) == 65504.0f, "max");
    CHECK(quant_f16_to_f32(0x0400) == 0x1p-14f, "min normal");
    CHECK(quant_f16_to_f32(0x0001) == 0x1p-24f, "min subnormal");
    CHECK(quant_f16_to_f32(0x03ff) == 1023 * 0x1p-24f, "max subnormal");
    CHECK(bits_of_f32(quant_f16_to_f32(0x8000)) == 0x80000000u, "-0");
    CHECK(isinf(quant_f16_to_f32(0x7c00)) && quant_f16_to_f32(0x7c00) > 0, "+inf");
    CHECK(isinf(quant_f16_to_f32(0xfc00)) && quant_f16_to_f32(0xfc00) < 0, "-inf");
    CHECK(isnan(quant_f16_to_f32(0x7e00)) && isnan(quant_f16_to_f32(0x7c01)), "nan");

    /* f32 -> f16, round to nearest even */
    CHECK(quant_f32_to_f16(1.0f) == 0x3c00, "1.0");
    CHECK(quant_f32_to_f16(0.1f) == 0x2e66, "0.1 -> %04x", quant_f32_to_f16(0.1f));
    CHECK(quant_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "tie to even (down)");
    CHECK(quant_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02, "tie to even (up)");
    CHECK(quant_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01, "above tie");
    CHECK(quant_f32_to_f16(65504.0f) == 0x7bff, "max");
    CHECK(quant_f32_to_f16(65519.0f) == 0x7bff, "below overflow tie");
    CHECK(quant_f32_to_f16(65520.0f) == 0x7c00, "overflow tie -> inf");
    CHECK(quant_f32_to_f16(1e10f) == 0x7c00, "large -> inf");
    CHECK(quant_f32_to_f16(-1e10f) == 0xfc00, "-large -> -inf");
    CHECK(quant_f32_to_f16(INFINITY) == 0x7c00 && quant_f32_to_f16(-INFINITY) == 0xfc00, "inf");
    quant_f16 hn = quant_f32_to_f16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0, "nan -> %04x", hn);
    CHECK(quant_f32_to_f16(f32_of_bits(0x7f800001u)) != 0x7c00, "signalling nan payload stays nan");
    CHECK(quant_f32_to_f16(0x1p-14f) == 0x0400, "min normal");
    CHECK(quant_f32_to_f16(0x1p-24f) == 0x0001, "min subnormal");
    CHECK(quant_f32_to_f16(0x1p-25f) == 0x0000, "half of min subnormal ties to 0");
    CHECK(quant_f32_to_f16(0x1p-25f * 1.0000001f) == 0x0001, "just above half rounds up");
    CHECK(quant_f32_to_f16(3 * 0x1p-25f) == 0x0002, "1.5 ulp subnormal ties to even");
    CHECK(quant_f32_to_f16(5 * 0x1p-25f) == 0x0002, "2.5 ulp subnormal ties to even");
    CHECK(quant_f32_to_f16(0x1p-14f - 0x1p-25f) == 0x0400, "rounds up into normal");
    CHECK(quant_f32_to_f16(-1e-10f) == 0x8000, "tiny negative -> -0");
    CHECK(quant_f32_to_f16(1e-30f) == 0x0000, "f32 tiny -> 0");
    CHECK(quant_f32_to_f16(f32_of_bits(0x00000001u)) == 0, "f32 subnormal -> 0");

    /* every finite f16 survives f16 -> f32 -> f16 */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        if (quant_f32_to_f16(quant_f16_to_f32((quant_f16)h)) != h) bad++;
    }
    CHECK(bad == 0, "%d f16 values do not round-trip", bad);
    /* midpoints between neighbouring positive f16 values round to the even one */
    bad = 0;
    for (uint32_t h = 1; h < 0x7bff; h++) {
        double a = quant_f16_to_f32((quant_f16)h), b = quant_f16_to_f32((quant_f16)(h + 1));
        float mid = (float)((a + b) / 2);
        quant_f16 want = (h & 1) ? (quant_f16)(h + 1) : (quant_f16)h;
        if (quant_f32_to_f16(mid) != want) bad++;
    }
    CHECK(bad == 0, "%d midpoints not rounded to even", bad);

    /* bf16 */
    CHECK(quant_bf16_to_f32(0x3f80) == 1.0f, "bf16 1");
    CHECK(quant_bf16_to_f32(0xc0a0) == -5.0f, "bf16 -5");
    CHECK(quant_f32_to_bf16(1.0f) == 0x3f80, "1 -> bf16");
    CHECK(quant_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "tie to even (down)");
    CHECK(quant_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "tie to even (up)");
    CHECK(quant_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81, "above tie");
    CHECK(quant_f32_to_bf16(INFINITY) == 0x7f80 && quant_f32_to_bf16(-INFINITY) == 0xff80, "inf");
    CHECK(quant_f32_to_bf16(3.4028235e38f) == 0x7f80, "FLT_MAX rounds to inf");
    CHECK(isnan(quant_bf16_to_f32(quant_f32_to_bf16(NAN))), "nan stays nan");
    CHECK(isnan(quant_bf16_to_f32(quant_f32_to_bf16(f32_of_bits(0x7f800001u)))), "low-payload nan stays nan");
    CHECK(quant_f32_to_bf16(f32_of_bits(0x00010000u)) == 0x0001, "subnormal kept");
}

static void test_types(void)
{
    static const struct {
        const char *name;
        kvi_type t;
        int64_t be;
        size_t bb;
    } T[] = {
        { "f32", KVI_TYPE_F32, 1, 4 },           { "f16", KVI_TYPE_F16, 1, 2 },
        { "bf16", KVI_TYPE_BF16, 1, 2 },         { "q8_0", KVI_TYPE_Q8_0, 32, 34 },
        { "q8_1", KVI_TYPE_Q8_1, 32, 36 },       { "q4_0", KVI_TYPE_Q4_0, 32, 18 },
        { "q4_1", KVI_TYPE_Q4_1, 32, 20 },       { "q5_0", KVI_TYPE_Q5_0, 32, 22 },
        { "q5_1", KVI_TYPE_Q5_1, 32, 24 },       { "q2_k", KVI_TYPE_Q2_K, 256, 84 },
        { "q3_k", KVI_TYPE_Q3_K, 256, 110 },     { "q4_k", KVI_TYPE_Q4_K, 256, 144 },
        { "q5_k", KVI_TYPE_Q5_K, 256, 176 },     { "q6_k", KVI_TYPE_Q6_K, 256, 210 },
        { "q8_k", KVI_TYPE_Q8_K, 256, 292 },     { "iq4_nl", KVI_TYPE_IQ4_NL, 32, 18 },
        { "iq4_xs", KVI_TYPE_IQ4_XS, 256, 136 }, { "mxfp4", KVI_TYPE_MXFP4, 32, 17 },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        kvi_type t = KVI_TYPE_COUNT;
        CHECK(kvi_type_name(T[i].t) && strcmp(kvi_type_name(T[i].t), T[i].name) == 0, "name %s", T[i].name);
        CHECK(kvi_type_from_name(T[i].name, &t) == 0 && t == T[i].t, "parse %s", T[i].name);
        char up[16];
        for (size_t k = 0; k <= strlen(T[i].name); k++)
            up[k] = (char)((T[i].name[k] >= 'a' && T[i].name[k] <= 'z') ? T[i].name[k] - 32 : T[i].name[k]);
        t = KVI_TYPE_COUNT;
        CHECK(kvi_type_from_name(up, &t) == 0 && t == T[i].t, "parse %s", up);
        CHECK(quant_block_elems(T[i].t) == T[i].be, "%s block elems", T[i].name);
        CHECK(quant_block_bytes(T[i].t) == T[i].bb, "%s block bytes", T[i].name);
        CHECK(quant_row_bytes(T[i].t, T[i].be * 3) == T[i].bb * 3, "%s row bytes", T[i].name);
        if (T[i].be > 1) CHECK(quant_row_bytes(T[i].t, T[i].be + 1) == 0, "%s partial block", T[i].name);
    }
    kvi_type t;
    /* "q4" names the KV-cache-only type (KIVI), never a tensor type of a file */
    CHECK(kvi_type_from_name("q4", &t) == 0 && t == KVI_TYPE_KV_Q4 && !quant_type_known(t) &&
              quant_row_bytes(t, 32) == 0 && quant_block_bytes(t) == 0,
          "q4 is the KV-only type");
    CHECK(kvi_type_from_name("q4x", &t) == KVI_E_INVALID && kvi_type_from_name("q", &t) == KVI_E_INVALID,
          "q4x, q unknown");
    CHECK(kvi_type_from_name("q4_k_m", &t) == KVI_E_INVALID, "q4_k_m is a file type, not a tensor type");
    CHECK(kvi_type_from_name("", &t) == KVI_E_INVALID && kvi_type_from_name(NULL, &t) == KVI_E_INVALID,
          "empty");
    CHECK(kvi_type_name((kvi_type)4) == NULL && kvi_type_name((kvi_type)99) == NULL &&
              kvi_type_name((kvi_type)-1) == NULL,
          "unknown numbers");
    CHECK(quant_row_bytes((kvi_type)5, 32) == 0 && quant_block_bytes((kvi_type)31) == 0, "unknown sizes");
    CHECK(quant_row_bytes(KVI_TYPE_Q4_0, -32) == 0, "negative n");
}

static void put16(quant_f16 *dst, quant_f16 v) { memcpy(dst, &v, 2); }

/* ---- hand-made blocks ---------------------------------------------------- */

static void test_simple_blocks(void)
{
    float y[256], want[256];

    /* F32 / F16 / BF16 rows */
    {
        float f[3] = { 1.5f, -2.25f, 1e-3f };
        quant_dequant_row(KVI_TYPE_F32, f, y, 3);
        check_row("f32 row", y, f, 3);
        uint16_t h[3] = { 0x3e00, 0xc100, 0x0001 }; /* 1.5, -2.5, 2^-24 */
        float wh[3] = { 1.5f, -2.5f, 0x1p-24f };
        quant_dequant_row(KVI_TYPE_F16, h, y, 3);
        check_row("f16 row", y, wh, 3);
        uint16_t b[3] = { 0x3fc0, 0xc020, 0x4049 }; /* 1.5, -2.5, 3.140625 */
        float wb[3] = { 1.5f, -2.5f, 3.140625f };
        quant_dequant_row(KVI_TYPE_BF16, b, y, 3);
        check_row("bf16 row", y, wb, 3);
    }
    /* Q4_0: d = 0.5, qs[j] = j | (15-j) << 4: element j = (j-8)/2, element j+16 = (7-j)/2 */
    {
        block_q4_0 b;
        put16(&b.d, 0x3800);
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
        for (int j = 0; j < 16; j++) {
            want[j] = (j - 8) * 0.5f;
            want[j + 16] = (7 - j) * 0.5f;
        }
        quant_dequant_row(KVI_TYPE_Q4_0, &b, y, 32);
        check_row("q4_0 block", y, want, 32);
        CHECK(y[0] == -4.0f && y[15] == 3.5f && y[16] == 3.5f && y[31] == -4.0f, "q4_0 corners");
    }
    /* Q4_1: d = 0.25, m = -1: value = q/4 - 1; low nibble j, high nibble (7j) mod 16 */
    {
        block_q4_1 b;
        put16(&b.d, 0x3400);
        put16(&b.m, 0xbc00);
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((7 * j) % 16) << 4);
        for (int j = 0; j < 16; j++) {
            want[j] = j * 0.25f - 1.0f;
            want[j + 16] = ((7 * j) % 16) * 0.25f - 1.0f;
        }
        quant_dequant_row(KVI_TYPE_Q4_1, &b, y, 32);
        check_row("q4_1 block", y, want, 32);
        CHECK(y[15] == 2.75f && y[17] == 0.75f, "q4_1 literal");
    }
    /* Q5_0: d = 0.5, qh = 0xA5C3F00F (little endian); element j takes bit j, j+16 bit j+16 */
    {
        block_q5_0 b;
        uint32_t qh = 0xA5C3F00Fu;
        put16(&b.d, 0x3800);
        b.qh[0] = 0x0F;
        b.qh[1] = 0xF0;
        b.qh[2] = 0xC3;
        b.qh[3] = 0xA5;
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(((3 * j + 1) % 16) | ((5 * j + 2) % 16) << 4);
        for (int j = 0; j < 16; j++) {
            int lo = (3 * j + 1) % 16 + 16 * (int)((qh >> j) & 1);
            int hi = (5 * j + 2) % 16 + 16 * (int)((qh >> (j + 16)) & 1);
            want[j] = (lo - 16) * 0.5f;
            want[j + 16] = (hi - 16) * 0.5f;
        }
        quant_dequant_row(KVI_TYPE_Q5_0, &b, y, 32);
        check_row("q5_0 block", y, want, 32);
        /* element 0: nibble 1, bit 0 set -> 17 - 16 = 1 -> 0.5; element 16: nibble 2, bit 16 (0xC3 bit 0) set -> 18-16 = 2 -> 1.0 */
        CHECK(y[0] == 0.5f && y[16] == 1.0f && y[4] == (13 - 16) * 0.5f, "q5_0 literal");
    }
    /* Q5_1: d = 0.125, m = 2 */
    {
        block_q5_1 b;
        uint32_t qh = 0x12345678u;
        put16(&b.d, 0x3000);
        put16(&b.m, 0x4000);
        b.qh[0] = 0x78;
        b.qh[1] = 0x56;
        b.qh[2] = 0x34;
        b.qh[3] = 0x12;
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)((15 - j) | ((j * 9) % 16) << 4);
        for (int j = 0; j < 16; j++) {
            int lo = (15 - j) + 16 * (int)((qh >> j) & 1);
            int hi = (j * 9) % 16 + 16 * (int)((qh >> (j + 16)) & 1);
            want[j] = lo * 0.125f + 2.0f;
            want[j + 16] = hi * 0.125f + 2.0f;
        }
        quant_dequant_row(KVI_TYPE_Q5_1, &b, y, 32);
        check_row("q5_1 block", y, want, 32);
        /* element 3: nibble 12, bit 3 of 0x78 set -> 28 * 0.125 + 2 = 5.5 */
        CHECK(y[3] == 5.5f, "q5_1 literal %g", y[3]);
    }
    /* Q8_0 / Q8_1: value = d * q */
    {
        block_q8_0 b;
        block_q8_1 c;
        put16(&b.d, 0x2c00); /* 1/16 */
        put16(&c.d, 0x3800); /* 0.5 */
        put16(&c.s, 0x4000);
        for (int j = 0; j < 32; j++) b.qs[j] = c.qs[j] = (int8_t)(j * 8 - 127);
        for (int j = 0; j < 32; j++) want[j] = (j * 8 - 127) / 16.0f;
        quant_dequant_row(KVI_TYPE_Q8_0, &b, y, 32);
        check_row("q8_0 block", y, want, 32);
        for (int j = 0; j < 32; j++) want[j] = (j * 8 - 127) * 0.5f;
        quant_dequant_row(KVI_TYPE_Q8_1, &c, y, 32);
        check_row("q8_1 block", y, want, 32);
    }
    /* Q8_K: float d */
    {
        block_q8_K b;
        memset(&b, 0, sizeof b);
        b.d = 0.25f;
        for (int j = 0; j < 256; j++) b.qs[j] = (int8_t)((j * 37) % 256 - 128);
        for (int j = 0; j < 256; j++) want[j] = ((j * 37) % 256 - 128) * 0.25f;
        quant_dequant_row(KVI_TYPE_Q8_K, &b, y, 256);
        check_row("q8_k block", y, want, 256);
    }
}

/* Level patterns used by the K-quant blocks. */
static int level(int e, int nlev) { return (e * 7 + e / 16 * 3 + 1) % nlev; }

static void test_kquant_blocks(void)
{
    float y[256], want[256];
    /* Q2_K: 16 sub-blocks of 16; scales[i] = scale (low nibble) | min (high nibble);
     * element e = 128h + 32s + l sits in qs[32h + l] bits 2s..2s+1. */
    {
        block_q2_K b;
        memset(&b, 0, sizeof b);
        put16(&b.d, 0x3800);    /* 0.5 */
        put16(&b.dmin, 0x3400); /* 0.25 */
        for (int i = 0; i < 16; i++) b.scales[i] = (uint8_t)(((i * 5 + 3) % 16) | ((15 - i) << 4));
        for (int e = 0; e < 256; e++) {
            int L = level(e, 4);
            b.qs[32 * (e / 128) + e % 32] |= (uint8_t)(L << (2 * ((e % 128) / 32)));
            int i = e / 16;
            want[e] = 0.5f * (float)((i * 5 + 3) % 16) * (float)L - 0.25f * (float)(15 - i);
        }
        quant_dequant_row(KVI_TYPE_Q2_K, &b, y, 256);
        check_row("q2_k block", y, want, 256);
        /* element 0: level 1, scale 3, min 15 -> 0.5*3*1 - 0.25*15 = -2.25 */
        CHECK(y[0] == -2.25f, "q2_k literal %g", y[0]);
    }
    /* Q3_K: 6-bit scales (minus 32): low 4 bits in scales[i % 8] (low nibble for i < 8,
     * high for i >= 8), high 2 bits in scales[8 + i % 4] at bit 2*(i / 4); level L
     * (value L - 4): low 2 bits like Q2_K, bit 2 in hmask[e % 32] bit e / 32. */
    {
        block_q3_K b;
        memset(&b, 0, sizeof b);
        put16(&b.d, 0x3c00); /* 1 */
        int ls[16];
        for (int i = 0; i < 16; i++) {
            ls[i] = (i * 13 + 5) % 64;
            if (i < 8)
                b.scales[i] |= (uint8_t)(ls[i] & 15);
            else
                b.scales[i - 8] |= (uint8_t)((ls[i] & 15) << 4);
            b.scales[8 + i % 4] |= (uint8_t)((ls[i] >> 4) << (2 * (i / 4)));
        }
        for (int e = 0; e < 256; e++) {
            int L = level(e, 8);
            b.qs[32 * (e / 128) + e % 32] |= (uint8_t)((L & 3) << (2 * ((e % 128) / 32)));
            if (L & 4) b.hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            want[e] = 1.0f * (float)(ls[e / 16] - 32) * (float)(L - 4);
        }
        quant_dequant_row(KVI_TYPE_Q3_K, &b, y, 256);
        check_row("q3_k block", y, want, 256);
        /* element 0: level 1 -> -3, scale 5 - 32 = -27 -> 81 */
        CHECK(y[0] == 81.0f, "q3_k literal %g", y[0]);
    }
    /* Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scale sc and min mn:
     * i < 4: scales[i] = sc | (sc[i+4] >> 4) << 6, scales[i+4] = mn | (mn[i+4] >> 4) << 6,
     *        scales[i+8] = (sc[i+4] & 15) | (mn[i+4] & 15) << 4.
     * element e: qs[32(e/64) + e%32], low nibble when (e%64) < 32; Q5_K bit 4 in qh[e%32] bit e/32. */
    for (int five = 0; five < 2; five++) {
        uint8_t sc[8], mn[8], scales[12] = { 0 }, qs[128] = { 0 }, qh[32] = { 0 };
        for (int i = 0; i < 8; i++) {
            sc[i] = (uint8_t)((i * 19 + 7) % 64);
            mn[i] = (uint8_t)((i * 23 + 50) % 64);
        }
        for (int i = 0; i < 4; i++) {
            scales[i] = (uint8_t)(sc[i] | (sc[i + 4] >> 4) << 6);
            scales[i + 4] = (uint8_t)(mn[i] | (mn[i + 4] >> 4) << 6);
            scales[i + 8] = (uint8_t)((sc[i + 4] & 15) | (mn[i + 4] & 15) << 4);
        }
        for (int e = 0; e < 256; e++) {
            int L = level(e, five ? 32 : 16);
            qs[32 * (e / 64) + e % 32] |= (uint8_t)((L & 15) << ((e % 64) < 32 ? 0 : 4));
            if (L & 16) qh[e % 32] |= (uint8_t)(1u << (e / 32));
            want[e] = 2.0f * (float)sc[e / 32] * (float)L - 0.5f * (float)mn[e / 32];
        }
        if (five) {
            block_q5_K b;
            put16(&b.d, 0x4000);    /* 2 */
            put16(&b.dmin, 0x3800); /* 0.5 */
            memcpy(b.scales, scales, 12);
            memcpy(b.qs, qs, 128);
            memcpy(b.qh, qh, 32);
            quant_dequant_row(KVI_TYPE_Q5_K, &b, y, 256);
            check_row("q5_k block", y, want, 256);
        } else {
            block_q4_K b;
            put16(&b.d, 0x4000);
            put16(&b.dmin, 0x3800);
            memcpy(b.scales, scales, 12);
            memcpy(b.qs, qs, 128);
            quant_dequant_row(KVI_TYPE_Q4_K, &b, y, 256);
            check_row("q4_k block", y, want, 256);
        }
        /* element 255: sub-block 7: sc = 140 % 64 = 12, mn = 211 % 64 = 19;
         * level (1785 + 45 + 1) % n = 1831 % 16 = 7 (Q4) or 1831 % 32 = 7 (Q5) -> 2*12*7 - 9.5 */
        CHECK(y[255] == 158.5f, "q%d_k literal %g", five ? 5 : 4, y[255]);
    }
    /* Q6_K: level L (value L - 32), element e = 128h + 32k + l: low nibble in
     * ql[64h + l + 32*(k&1)] (low nibble for k < 2, high for k >= 2), high 2 bits in
     * qh[32h + l] bits 2k..2k+1; int8 scale per 16 elements. */
    {
        block_q6_K b;
        memset(&b, 0, sizeof b);
        put16(&b.d, 0x3400); /* 0.25 */
        for (int i = 0; i < 16; i++) b.scales[i] = (int8_t)(i * 17 - 128);
        for (int e = 0; e < 256; e++) {
            int L = level(e, 64), h = e / 128, k = (e % 128) / 32, l = e % 32;
            b.ql[64 * h + l + 32 * (k & 1)] |= (uint8_t)((L & 15) << (k >= 2 ? 4 : 0));
            b.qh[32 * h + l] |= (uint8_t)((L >> 4) << (2 * k));
            want[e] = 0.25f * (float)(e / 16 * 17 - 128) * (float)(L - 32);
        }
        quant_dequant_row(KVI_TYPE_Q6_K, &b, y, 256);
        check_row("q6_k block", y, want, 256);
        /* element 0: level 1 -> -31, scale -128 -> 0.25 * -128 * -31 = 992 */
        CHECK(y[0] == 992.0f, "q6_k literal %g", y[0]);
    }
}

/* IQ4_NL / IQ4_XS blocks written byte by byte from ggml's layout (ggml-common.h):
 * the codebook kvalues_iq4nl, typed in here again rather than taken from quant.c. */
static const int KV[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

static void test_iq4_blocks(void)
{
    /* IQ4_NL: d (f16 0.5) at bytes 0..1, qs[j] low nibble j, high nibble 15 - j */
    uint8_t nl[18];
    const quant_f16 half = quant_f32_to_f16(0.5f);
    memcpy(nl, &half, 2);
    for (int j = 0; j < 16; j++) nl[2 + j] = (uint8_t)(j | (15 - j) << 4);
    float y[256], want[256];
    for (int j = 0; j < 16; j++) {
        want[j] = 0.5f * (float)KV[j];
        want[j + 16] = 0.5f * (float)KV[15 - j];
    }
    quant_dequant_row(KVI_TYPE_IQ4_NL, nl, y, 32);
    check_row("iq4_nl block", y, want, 32);
    CHECK(y[0] == -63.5f && y[16] == 56.5f && y[31] == -63.5f, "iq4_nl literals %g %g %g", y[0], y[16],
          y[31]);

    /* IQ4_XS: d (f16 0.25), scales_h (u16 LE, 2 bits per sub-block), scales_l (4 bytes,
     * 4 bits per sub-block, even sub-blocks in the low nibble), qs[128] */
    static const int ls[8] = { 0, 63, 32, 33, 1, 40, 31, 17 };
    uint8_t xs[136];
    memset(xs, 0, sizeof xs);
    const quant_f16 quarter = quant_f32_to_f16(0.25f);
    memcpy(xs, &quarter, 2);
    unsigned sh = 0;
    for (int ib = 0; ib < 8; ib++) {
        sh |= (unsigned)(ls[ib] >> 4) << (2 * ib);
        xs[4 + ib / 2] |= (uint8_t)((ls[ib] & 15) << (4 * (ib % 2)));
    }
    xs[2] = (uint8_t)(sh & 0xff);
    xs[3] = (uint8_t)(sh >> 8);
    for (int ib = 0; ib < 8; ib++)
        for (int j = 0; j < 16; j++) {
            const int lo = (j + ib) & 15, hi = (3 * j + ib) & 15;
            xs[8 + 16 * ib + j] = (uint8_t)(lo | hi << 4);
            const float dl = 0.25f * (float)(ls[ib] - 32);
            want[32 * ib + j] = dl * (float)KV[lo];
            want[32 * ib + 16 + j] = dl * (float)KV[hi];
        }
    quant_dequant_row(KVI_TYPE_IQ4_XS, xs, y, 256);
    check_row("iq4_xs block", y, want, 256);
    /* sub-block 0: scale 0 - 32, level -127: 0.25 * -32 * -127 = 1016; sub-block 1:
     * scale 63 - 32, index 1 (-104): -806; sub-block 2: scale 0 */
    CHECK(y[0] == 1016.0f && y[32] == -806.0f && y[64] == 0.0f, "iq4_xs literals %g %g %g", y[0], y[32],
          y[64]);
}

/* MXFP4 blocks written byte by byte from ggml's layout (block_mxfp4: the E8M0
 * byte e, then 16 bytes of nibbles as Q4_0): the levels kvalues_mxfp4 typed in here
 * again, the scale 2^(e - 128) from hex float literals and ldexpf (exact), not
 * from quant.c. */
static const int KVM[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

static void mxfp4_block(uint8_t blk[17], int e, int lo_add, int hi_mul)
{
    blk[0] = (uint8_t)e;
    for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)(((j + lo_add) & 15) | ((hi_mul * j + 5) & 15) << 4);
}

static void test_mxfp4_blocks(void)
{
    /* every exponent: 2^(e - 128), including the subnormals 2^-128 (e = 0) and
     * 2^-127 (e = 1) and 2^127 (e = 255) */
    int bad = 0;
    for (int e = 0; e < 256; e++) bad += quant_e8m0_half((uint8_t)e) != ldexpf(1.0f, e - 128);
    CHECK(bad == 0, "mxfp4: %d exponents differ from 2^(e - 128)", bad);
    CHECK(quant_e8m0_half(0) == 0x1p-128f && quant_e8m0_half(1) == 0x1p-127f &&
              quant_e8m0_half(128) == 1.0f && quant_e8m0_half(255) == 0x1p127f,
          "mxfp4 exponent literals");

    /* a block per exponent 130 (d = 4), 127 (d = 1/2: the plain E2M1 values),
     * 0, 1 (subnormal scales) and 255; elements j and j + 16 from byte j */
    static const int ES[5] = { 130, 127, 0, 1, 255 };
    uint8_t row[5 * 17];
    float want[5 * 32], y[5 * 32];
    for (int b = 0; b < 5; b++) {
        mxfp4_block(row + 17 * b, ES[b], b, 3 + 2 * b);
        const float d = ldexpf(1.0f, ES[b] - 128);
        for (int j = 0; j < 16; j++) {
            want[32 * b + j] = (float)KVM[(j + b) & 15] * d;
            want[32 * b + 16 + j] = (float)KVM[((3 + 2 * b) * j + 5) & 15] * d;
        }
    }
    quant_dequant_row(KVI_TYPE_MXFP4, row, y, 5 * 32);
    bad = 0;
    for (int i = 0; i < 5 * 32; i++) bad += !(y[i] == want[i]); /* inf == inf; no NaN expected */
    CHECK(bad == 0, "mxfp4 blocks: %d of 160 elements differ", bad);
    /* block 0 (e 130, d 4): byte 7 low nibble 7 (12) -> 48, byte 0 high nibble 5 (6) -> 24,
     * byte 15 low nibble 15 (-12) -> -48; block 1 (e 127): byte 0 low nibble 1 -> 0.5,
     * byte 2 low nibble 3 (3) -> 1.5, byte 14 low nibble 15 -> -6 */
    CHECK(y[7] == 48.0f && y[16] == 24.0f && y[15] == -48.0f, "mxfp4 e=130 literals %g %g %g", y[7], y[16],
          y[15]);
    CHECK(y[32] == 0.5f && y[34] == 1.5f && y[46] == -6.0f, "mxfp4 e=127 literals %g %g %g", y[32], y[34],
          y[46]);
    /* block 2 (e 0): byte 0 low nibble 2 (2) -> 2^-127, byte 7 low nibble 9 (-1) -> -2^-128;
     * block 3 (e 1): byte 0 low nibble 3 (3) -> 3 * 2^-127; byte 5 low nibble 8 (-0) -> 0 */
    CHECK(y[64] == 0x1p-127f && y[71] == -0x1p-128f, "mxfp4 e=0 literals %a %a", (double)y[64],
          (double)y[71]);
    CHECK(y[96] == 0x1.8p-126f && y[101] == 0.0f, "mxfp4 e=1 literals %a %a", (double)y[96], (double)y[101]);
    /* block 4 (e 255): byte 12 low nibble 0 -> 0, byte 13 low nibble 1 -> 2^127, byte 14 low
     * nibble 2 -> 2^128 = inf (ggml's float product overflows the same way) */
    CHECK(y[140] == 0.0f && y[141] == 0x1p127f && isinf(y[142]) && y[142] > 0,
          "mxfp4 e=255 literals %g %g %g", y[140], y[141], y[142]);

    /* the quantiser: values on the grid of d = 1/8 with largest magnitude 12 d come
     * back exactly, with e = 125 */
    float x[32], xr[32];
    for (int i = 0; i < 32; i++) x[i] = (float)KVM[(5 * i + 3) & 15] * 0.125f;
    x[9] = -1.5f;
    uint8_t q[17];
    CHECK(quant_quantize_row(KVI_TYPE_MXFP4, x, q, 32) == 0, "mxfp4 quantize");
    quant_dequant_row(KVI_TYPE_MXFP4, q, xr, 32);
    CHECK(q[0] == 125 && memcmp(x, xr, sizeof x) == 0, "mxfp4 grid round trip (e %d)", q[0]);
    /* tiny values: the scale clamps at e = 0; 2^-128 comes back exactly */
    for (int i = 0; i < 32; i++) x[i] = i == 3 ? 0x1p-128f : 0.0f;
    CHECK(quant_quantize_row(KVI_TYPE_MXFP4, x, q, 32) == 0, "mxfp4 quantize tiny");
    quant_dequant_row(KVI_TYPE_MXFP4, q, xr, 32);
    CHECK(q[0] == 0 && xr[3] == 0x1p-128f && xr[4] == 0.0f, "mxfp4 tiny round trip (e %d, %a)", q[0],
          (double)xr[3]);
}

/* ---- quantise -> dequantise ----------------------------------------------- */

static void test_roundtrip(void)
{
    static const struct {
        kvi_type t;
        double bound;
    } T[] = {
        { KVI_TYPE_F32, 0.0 },     { KVI_TYPE_F16, 0.001 },  { KVI_TYPE_BF16, 0.005 },
        { KVI_TYPE_Q8_0, 0.01 },   { KVI_TYPE_Q8_K, 0.01 },  { KVI_TYPE_Q6_K, 0.03 },
        { KVI_TYPE_Q5_0, 0.06 },   { KVI_TYPE_Q5_1, 0.06 },  { KVI_TYPE_Q5_K, 0.06 },
        { KVI_TYPE_Q4_0, 0.12 },   { KVI_TYPE_Q4_1, 0.12 },  { KVI_TYPE_Q4_K, 0.12 },
        { KVI_TYPE_Q3_K, 0.25 },   { KVI_TYPE_Q2_K, 0.5 },   { KVI_TYPE_IQ4_NL, 0.09 },
        { KVI_TYPE_IQ4_XS, 0.09 }, { KVI_TYPE_MXFP4, 0.13 },
    };
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * 4);
    uint64_t rs = 12345;
    for (int i = 0; i < N; i++) x[i] = trand_normal(&rs) * (i < N / 2 ? 1.0f : 0.01f);
    for (size_t k = 0; k < sizeof T / sizeof T[0]; k++) {
        const char *name = kvi_type_name(T[k].t);
        memset(q, 0xee, N * 4);
        int rc = quant_quantize_row(T[k].t, x, q, N);
        CHECK(rc == 0, "%s quantize rc %d", name, rc);
        quant_dequant_row(T[k].t, q, y, N);
        /* error relative to each half's own scale (the halves differ 100x) */
        for (int half = 0; half < 2; half++) {
            double se = 0, sx = 0;
            for (int i = half * N / 2; i < (half + 1) * N / 2; i++) {
                se += (double)(y[i] - x[i]) * (y[i] - x[i]);
                sx += (double)x[i] * x[i];
            }
            double rel = sqrt(se / sx);
            printf("%-5s half %d: relative rms error %.5f (bound %.3f)\n", name, half, rel, T[k].bound);
            CHECK(rel <= T[k].bound, "%s: relative rms error %.5f > %.3f", name, rel, T[k].bound);
            if (T[k].t != KVI_TYPE_F32) CHECK(rel > 0.0, "%s: suspiciously exact", name);
        }
        /* zeros quantise to exact zeros */
        float z[256] = { 0 }, zy[256];
        uint8_t zq[1024]; /* 256 elements of any type (f32 is the widest) */
        memset(zy, 0x55, sizeof zy);
        CHECK(quant_quantize_row(T[k].t, z, zq, 256) == 0, "%s zeros", name);
        quant_dequant_row(T[k].t, zq, zy, 256);
        int nz = 0;
        for (int i = 0; i < 256; i++) nz += zy[i] != 0.0f;
        CHECK(nz == 0, "%s: %d zeros not reproduced", name, nz);
    }
    /* Q8_K bsums are the sums of 16 quants */
    {
        block_q8_K b;
        CHECK(quant_quantize_row(KVI_TYPE_Q8_K, x, &b, 256) == 0, "q8_k");
        int bad = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b.qs[16 * g + l];
            bad += s != b.bsums[g];
        }
        CHECK(bad == 0, "q8_k bsums");
    }
    CHECK(quant_quantize_row(KVI_TYPE_Q8_1, x, q, 32) == KVI_E_UNSUPPORTED, "q8_1 unsupported");
    CHECK(quant_quantize_row(KVI_TYPE_Q4_0, x, q, 33) == KVI_E_INVALID, "partial block");
    CHECK(quant_quantize_row((kvi_type)4, x, q, 32) == KVI_E_INVALID, "unknown type");
    /* unknown type / partial block: NaN out, nothing read */
    quant_dequant_row((kvi_type)4, NULL, y, 8);
    CHECK(isnan(y[0]) && isnan(y[7]), "unknown type dequantises to NaN");
    free(x);
    free(y);
    free(q);
}

int main(void)
{
    test_half();
    test_types();
    test_simple_blocks();
    test_kquant_blocks();
    test_iq4_blocks();
    test_mxfp4_blocks();
    test_roundtrip();
    return test_main_end();
}
