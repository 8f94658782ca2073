/*
 * q8_lowbit_avx2.c — the low-bit integer products (q8_lowbit.h) on AVX2, with the
 * scalar reference's bits.
 *
 * Each weight row is unpacked once into the scratch by the formats layer's
 * unpackers (the reference's own integers): levels lv int8 [n_in] in value order,
 * then per block the 16 scales ls as int16 (IQ1; 1 for TQ) and the weight factors
 * dw f32 (d / 8, d, or NVFP4's four halved scales). Per activation row and block:
 * lv * ls (exact in int16: 9 * 15) widened against the int16 quants by vpmaddwd,
 * summed lane-wise in int32 (exact), one horizontal sum per block (NVFP4: per
 * 16-value sub-block), then the contract's fmaf in the reference's order.
 * Declines (0, nothing written) for other types or without a scratch.
 */
#include "kernels/q8_lowbit.h"
#include "kernels/isa_target.h"
#include "formats/quant_iq1.h"
#include "formats/quant_nvfp4.h"
#include "formats/quant_tq.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX2 KVI_TARGET_AVX2

/* sum of the 8 int32 lanes */
KVI_INLINE_AVX2 int32_t hsum8(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* int32 lanes of sum over 16 values of (a * scale) * b, a and b int8 */
KVI_INLINE_AVX2 __m256i madd16(const int8_t *a, int16_t scale, const int8_t *b)
{
    const __m256i wa = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a)),
                                          _mm256_set1_epi16(scale));
    return _mm256_madd_epi16(wa, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b)));
}

AVX2 static float dot_k(const int8_t *lv, const int16_t *ls, const float *dw, const kern_q8k *x, int64_t nb)
{
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        __m256i s = _mm256_setzero_si256();
        for (int h = 0; h < 16; h++)
            s = _mm256_add_epi32(s, madd16(lv + b * QK_K + 16 * h, ls[16 * b + h], x[b].qs + 16 * h));
        acc = fmaf(dw[b] * x[b].d, (float)hsum8(s), acc);
    }
    return acc;
}

AVX2 static float dot_nvfp4(const int8_t *lv, const float *dh, const kern_q8a *x, int64_t nb)
{
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++)
        for (int k = 0; k < 4; k++) {
            const kern_q8a *xb = &x[2 * b + k / 2];
            const int32_t isum = hsum8(madd16(lv + 64 * b + 16 * k, 1, xb->qs + 16 * (k % 2)));
            acc = fmaf(dh[4 * b + k] * xb->d, (float)isum, acc);
        }
    return acc;
}

/* Row w into lv [n_in], ls [nb][16], dw [nb] (NVFP4: dh [nb][4]) */
static void unpack_row(kvi_type t, const uint8_t *w, int64_t n_in, int8_t *lv, int16_t *ls, float *dw)
{
    const size_t bb = quant_block_bytes(t);
    if (t == KVI_TYPE_NVFP4) {
        for (int64_t b = 0; b < n_in / QK_NVFP4; b++)
            quant_nvfp4_unpack(w + (size_t)b * bb, lv + 64 * b, dw + 4 * b);
        return;
    }
    for (int64_t b = 0; b < n_in / QK_K; b++) {
        const uint8_t *p = w + (size_t)b * bb;
        if (t == KVI_TYPE_TQ1_0 || t == KVI_TYPE_TQ2_0) {
            quant_tq_unpack(t, p, lv + QK_K * b, &dw[b]);
            for (int h = 0; h < 16; h++) ls[16 * b + h] = 1;
            continue;
        }
        uint8_t l8[16];
        float d;
        quant_iq1_unpack(t, p, lv + QK_K * b, l8, &d);
        for (int h = 0; h < 16; h++) ls[16 * b + h] = l8[h];
        dw[b] = d * 0.125f;
    }
}

int kern_lowbit_gemm_avx2(const kern_qgemm_args *a)
{
    const kvi_type t = a->type;
    const int64_t n = a->n_in, nbk = n / QK_K, nb4 = n / QK_NVFP4;
    const size_t need = (size_t)n + (size_t)nbk * 32 + (size_t)nb4 * 16 + 64;
    if (!kern_lowbit_type(t) || !a->scratch || need > KVI_QGEMM_SCRATCH(n)) return 0;
    int8_t *lv = a->scratch;                                                  /* [n_in] */
    float *dw = (float *)((uint8_t *)a->scratch + ((n + 15) & ~(int64_t)15)); /* [nb4] (>= nbk) */
    int16_t *ls = (int16_t *)(dw + nb4);                                      /* [nbk][16] */
    for (int64_t j = a->j0; j < a->j1; j++) {
        unpack_row(t, a->w + (size_t)j * a->w_rb, n, lv, ls, dw);
        for (int64_t r = 0; r < a->n_rows; r++) {
            const uint8_t *xq = a->xq + (size_t)r * a->xq_rb;
            a->y[r * a->ldy + j] = t == KVI_TYPE_NVFP4 ? dot_nvfp4(lv, dw, (const kern_q8a *)xq, nb4)
                                                       : dot_k(lv, ls, dw, (const kern_q8k *)xq, nbk);
        }
    }
    return 1;
}
