/*
 * quant.h — block formats of the weight and cache types, conversion to and from
 * f32 (scalar reference code), and the half-precision helpers.
 *
 * Layouts follow GGUF/ggml exactly; each block struct has a size assertion.
 * A row of n elements of type t occupies quant_row_bytes(t, n) bytes, which is only
 * defined when n is a multiple of the type's block size.
 */
#ifndef KVI_QUANT_H
#define KVI_QUANT_H

#include "kvinfer_types.h"
#include <stdint.h>
#include <stddef.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define QK4_NL 32
#define QK_MXFP4 32
#define K_SCALE_SIZE 12

typedef uint16_t quant_f16;  /* IEEE half, stored */
typedef uint16_t quant_bf16; /* bfloat16, stored */

typedef struct {
    quant_f16 d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
typedef struct {
    quant_f16 d, m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
typedef struct {
    quant_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
typedef struct {
    quant_f16 d, m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
typedef struct {
    quant_f16 d;
    int8_t qs[QK8_0];
} block_q8_0;
typedef struct {
    quant_f16 d, s;
    int8_t qs[QK8_1];
} block_q8_1;
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    quant_f16 d, dmin;
} block_q2_K;
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    quant_f16 d;
} block_q3_K;
typedef struct {
    quant_f16 d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
typedef struct {
    quant_f16 d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block, from its
 * 12 packed scale bytes q (the one definition every dequantiser and kernel uses). */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
    if (j < 4) {
        *sc = (uint8_t)(q[j] & 63);
        *mn = (uint8_t)(q[j + 4] & 63);
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* The inverse: 8 six-bit scales ls and mins lm into the 12 packed bytes q. */
static inline void quant_pack_scale_min_k4(const uint8_t *ls, const uint8_t *lm, uint8_t *q)
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((ls[j] & 63) | (ls[j + 4] >> 4) << 6);
        q[j + 4] = (uint8_t)((lm[j] & 63) | (lm[j + 4] >> 4) << 6);
        q[j + 8] = (uint8_t)((ls[j + 4] & 0xf) | (lm[j + 4] & 0xf) << 4);
    }
}
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    quant_f16 d;
} block_q6_K;
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;

/* IQ4_NL and IQ4_XS: each 4-bit index selects one of the 16 int8 levels of
 * quant_kvalues_iq4nl (ggml's kvalues_iq4nl), times the block's scale.
 * IQ4_NL: qs[j] low nibble = element j, high nibble = element j + 16 (as Q4_0).
 * IQ4_XS: sub-block ib (0..7, 32 elements) has the 6-bit scale
 *   ls = ((scales_l[ib/2] >> 4*(ib%2)) & 0xf) | ((scales_h >> 2*ib) & 3) << 4
 * and its elements are (d * (ls - 32)) * level, with qs[16*ib + j] low nibble =
 * element 32*ib + j, high nibble = element 32*ib + 16 + j. */
typedef struct {
    quant_f16 d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
typedef struct {
    quant_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;

/* The codebook, ascending (-127 .. 113). */
extern const int8_t quant_kvalues_iq4nl[16];

/* The 6-bit scale of sub-block ib (0..7) of an IQ4_XS block, minus 32 (-32..31). */
static inline int quant_iq4xs_scale(const block_iq4_xs *b, int ib)
{
    const int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf, hi = (b->scales_h >> (2 * ib)) & 3;
    return (lo | hi << 4) - 32;
}

/* MXFP4 (OCP microscaling FP4): one E8M0 exponent e, then qs[j] low nibble =
 * element j, high nibble = element j + 16 (as Q4_0). Element = level * 2^(e - 128)
 * with level = quant_kvalues_mxfp4[nibble] (the E2M1 values doubled, so that they
 * are integers; ggml's kvalues_mxfp4), which is why the scale is 2^(e - 127) / 2. */
typedef struct {
    uint8_t e;
    uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;

/* The levels, by nibble: 0 1 2 3 4 6 8 12 and their negatives (nibble 8 is -0). */
extern const int8_t quant_kvalues_mxfp4[16];

/* 2^(e - 128) exactly, for every byte e (0 and 1 give the subnormals 2^-128 and
 * 2^-127, 255 gives 2^127): built from the float's bits, no pow. */
static inline float quant_e8m0_half(uint8_t e)
{
    const uint32_t u = e < 2 ? (uint32_t)0x00200000u << e : (uint32_t)(e - 1) << 23;
    union {
        uint32_t u;
        float f;
    } c = { u };
    return c.f;
}

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");
_Static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

/* Elements per block (1 for F32/F16/BF16); 0 for an unknown type. */
int64_t quant_block_elems(kvi_type t);
/* Bytes per block; 0 for an unknown type. */
size_t quant_block_bytes(kvi_type t);
bool quant_type_known(kvi_type t);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block size. */
size_t quant_row_bytes(kvi_type t, int64_t n);

float quant_f16_to_f32(quant_f16 h);
quant_f16 quant_f32_to_f16(float f); /* round to nearest even */
float quant_bf16_to_f32(quant_bf16 h);
quant_bf16 quant_f32_to_bf16(float f); /* round to nearest even */

/* Reference dequantisation of n elements (n a multiple of the block size). */
void quant_dequant_row(kvi_type t, const void *src, float *dst, int64_t n);
/* Quantises n floats. Supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q8_K
 * Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4. Returns 0 or KVI_E_UNSUPPORTED / KVI_E_INVALID. */
int quant_quantize_row(kvi_type t, const float *src, void *dst, int64_t n);

#endif
