/*
 * kernels_avx2.c — the AVX2 + FMA + F16C table: dot product and fast
 * dequantisation of F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K rows.
 *
 * The integer products reuse q8_rows.h, compiled here for AVX2 + FMA.
 *
 * Every function carries __attribute__((target("avx2,fma,f16c"))) and is reached
 * only through the table after kern_isa_detect() saw those features.
 *
 * Dot reduction order (fixed by n alone): four 8-lane accumulators take elements
 * i mod 32; the remaining full 8-lane groups go into accumulator 0, the last n mod 8
 * elements (masked load) into accumulator 1; then (a0 + a1) + (a2 + a3) and a
 * fixed horizontal sum.
 *
 * Dequantisation gives exactly quant_dequant_row()'s floats: every value is an exact
 * product of a half (or its exact product with a small integer scale) and a small
 * integer, followed by at most one rounded subtraction, and the same per-sub-block
 * factors are computed with the same scalar expressions.
 */
#include "kernels/isa_target.h"
#include "kernels/kernels_int.h"
#include "kernels/q8_lowbit.h"
#include "kernels/r16_pack.h"
#include "formats/quant.h"

#include <immintrin.h>
#include <string.h>

#define AVX2 KVI_TARGET_AVX2

AVX2 static float hsum256(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);          /* 4 lanes */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s)); /* lanes 0+2, 1+3 */
    s = _mm_add_ss(s, _mm_movehdup_ps(s));  /* (0+2) + (1+3) */
    return _mm_cvtss_f32(s);
}

AVX2 static float dot_avx2(const float *a, const float *b, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    if (i < n) {
        int r = (int)(n - i);
        __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(r), idx);
        a1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), a1);
    }
    return hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* 8 unsigned bytes -> 8 floats */
AVX2 static __m256 u8x8_ps(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* 8 signed bytes -> 8 floats */
AVX2 static __m256 i8x8_ps(const void *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

AVX2 static void deq_f16(const uint8_t *p, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i))));
    for (; i < n; i++) {
        quant_f16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = quant_f16_to_f32(h);
    }
}

AVX2 static void deq_bf16(const uint8_t *p, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++) {
        quant_bf16 h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = quant_bf16_to_f32(h);
    }
}

/* F16C conversion: exact, so equal to quant_f16_to_f32(). Kept inside the target
 * region: calling plain SSE code from here costs an AVX/SSE transition per call. */
AVX2 static float half_at(const uint8_t *p)
{
    quant_f16 h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AVX2 static void deq_q8_0(const uint8_t *p, float *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, p += sizeof(block_q8_0), y += QK8_0) {
        __m256 d = _mm256_set1_ps(half_at(p + offsetof(block_q8_0, d)));
        const uint8_t *qs = p + offsetof(block_q8_0, qs);
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(i8x8_ps(qs + 8 * k), d));
    }
}

AVX2 static void deq_q4_0(const uint8_t *p, float *y, int64_t nb)
{
    const __m128i lowmask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++, p += sizeof(block_q4_0), y += QK4_0) {
        __m256 d = _mm256_set1_ps(half_at(p + offsetof(block_q4_0, d)));
        __m128i q = _mm_loadu_si128((const __m128i *)(p + offsetof(block_q4_0, qs)));
        __m128i lo = _mm_sub_epi8(_mm_and_si128(q, lowmask), eight);                    /* [16] */
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), lowmask), eight); /* [16] */
        int8_t v[32]; /* elements 0..15 then 16..31, minus 8 */
        _mm_storeu_si128((__m128i *)v, lo);
        _mm_storeu_si128((__m128i *)(v + 16), hi);
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(i8x8_ps(v + 8 * k), d));
    }
}

/* quant_scale_min_k4 (quant.h) as floats. */
AVX2 static void scale_min(int j, const uint8_t *q, float *sc, float *mn)
{
    uint8_t s, m;
    quant_scale_min_k4(j, q, &s, &m);
    *sc = (float)s;
    *mn = (float)m;
}

AVX2 static void deq_q4_k(const uint8_t *p, float *y, int64_t nb)
{
    const __m256i lowmask = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++, p += sizeof(block_q4_K), y += QK_K) {
        float d = half_at(p + offsetof(block_q4_K, d)), dmin = half_at(p + offsetof(block_q4_K, dmin));
        const uint8_t *scales = p + offsetof(block_q4_K, scales);
        const uint8_t *qs = p + offsetof(block_q4_K, qs);
        for (int c = 0; c < 4; c++) {
            float sc, mn;
            scale_min(2 * c, scales, &sc, &mn);
            __m256 d1 = _mm256_set1_ps(d * sc), m1 = _mm256_set1_ps(dmin * mn);
            scale_min(2 * c + 1, scales, &sc, &mn);
            __m256 d2 = _mm256_set1_ps(d * sc), m2 = _mm256_set1_ps(dmin * mn);
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            uint8_t v[64]; /* the chunk's 64 levels: low nibbles, then high nibbles */
            _mm256_storeu_si256((__m256i *)v, _mm256_and_si256(q, lowmask));
            _mm256_storeu_si256((__m256i *)(v + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), lowmask));
            float *yc = y + 64 * c;
            for (int k = 0; k < 4; k++) {
                _mm256_storeu_ps(yc + 8 * k, _mm256_fmsub_ps(d1, u8x8_ps(v + 8 * k), m1));
                _mm256_storeu_ps(yc + 32 + 8 * k, _mm256_fmsub_ps(d2, u8x8_ps(v + 32 + 8 * k), m2));
            }
        }
    }
}

AVX2 static void deq_q6_k(const uint8_t *p, float *y, int64_t nb)
{
    const __m256i m4 = _mm256_set1_epi32(0xf), m2 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    for (int64_t b = 0; b < nb; b++, p += sizeof(block_q6_K), y += QK_K) {
        float d = half_at(p + offsetof(block_q6_K, d));
        const int8_t *sc = (const int8_t *)(p + offsetof(block_q6_K, scales));
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = p + offsetof(block_q6_K, ql) + 64 * h;
            const uint8_t *qh = p + offsetof(block_q6_K, qh) + 32 * h;
            float *yy = y + 128 * h;
            for (int l = 0; l < 32; l += 8) {
                int is = 8 * h + l / 16;
                __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
                __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l + 32)));
                __m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                __m256i q1 =
                    _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi32(_mm256_and_si256(hb, m2), 4));
                __m256i q2 =
                    _mm256_or_si256(_mm256_and_si256(c, m4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2), m2), 4));
                __m256i q3 =
                    _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 4), m2), 4));
                __m256i q4 =
                    _mm256_or_si256(_mm256_srli_epi32(c, 4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 6), m2), 4));
                __m256 f1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(q1, k32));
                __m256 f2 = _mm256_cvtepi32_ps(_mm256_sub_epi32(q2, k32));
                __m256 f3 = _mm256_cvtepi32_ps(_mm256_sub_epi32(q3, k32));
                __m256 f4 = _mm256_cvtepi32_ps(_mm256_sub_epi32(q4, k32));
                _mm256_storeu_ps(yy + l, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is]), f1));
                _mm256_storeu_ps(yy + l + 32, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is + 2]), f2));
                _mm256_storeu_ps(yy + l + 64, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is + 4]), f3));
                _mm256_storeu_ps(yy + l + 96, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[is + 6]), f4));
            }
        }
    }
}

AVX2 int kern_dequant_avx2(kvi_type t, const void *src, float *dst, int64_t n)
{
    int64_t be = quant_block_elems(t);
    if (be == 0 || n <= 0 || n % be != 0) return 0;
    switch (t) {
    case KVI_TYPE_F16: deq_f16(src, dst, n); return 1;
    case KVI_TYPE_BF16: deq_bf16(src, dst, n); return 1;
    case KVI_TYPE_Q8_0: deq_q8_0(src, dst, n / be); return 1;
    case KVI_TYPE_Q4_0: deq_q4_0(src, dst, n / be); return 1;
    case KVI_TYPE_Q4_K: deq_q4_k(src, dst, n / be); return 1;
    case KVI_TYPE_Q6_K: deq_q6_k(src, dst, n / be); return 1;
    default: return 0;
    }
}

/* The integer products (q8.h): the scalar row code compiled for AVX2 + FMA
 * (clang ignores GCC's target pragma: its own attribute pragma there). */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
/* exact: int8 x int8 products summed in pairs as int16 x int16 -> int32 */
static inline int32_t q8_idot(const int8_t *a, const int8_t *b, int n)
{
    __m256i acc = _mm256_setzero_si256();
    for (int i = 0; i < n; i += 16) {
        const __m256i va = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + i)));
        const __m256i vb = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + i)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(va, vb));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}
#define Q8_IDOT_DEFINED
#include "kernels/q8_rows.h"
static int qgemm_avx2(const kern_qgemm_args *a)
{
    return kern_lowbit_type(a->type) ? kern_lowbit_gemm_avx2(a) : q8_rows(a); /* q8_lowbit_avx2.c */
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const kern_table kern_table_avx2 = {
    .isa = KVI_ISA_AVX2,
    .dot = dot_avx2,
    .dequant = kern_dequant_avx2,
    .qgemm = qgemm_avx2,
    .actq_a = kern_actq_a_avx2,
    .actq_k = kern_actq_k_avx2,
    .f16_row = kern_f16_row_avx2,
    .r16_to_rows = kern_r16_to_rows,
    .lora_bt = kern_lora_bt_avx2,
};
