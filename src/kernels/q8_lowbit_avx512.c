/*
 * q8_lowbit_avx512.c — the low-bit integer products (IQ1_S, IQ1_M, TQ1_0, TQ2_0 with
 * Q8_K activations, NVFP4 with Q8_0) on AVX-512 VNNI, with the bits of q8_lowbit.h's
 * contract (the scalar reference q8_lowbit.c).
 *
 * Each output y[r][j] is one pass over weight row j and activation row r, block by
 * block in order: vpdpbusd (unsigned weight byte times signed activation byte, four
 * products per dword lane) forms exact integer partial sums, a fixed reduction gives
 * the block's isum, and the float step is the reference's scalar fmaf. Weights are
 * made unsigned by an offset whose term is subtracted exactly:
 *   TQ2_0  64 bytes of qs, (qs >> 2l) & 3 = t (0..2) of values 128c + 32l + m at
 *          byte 32c + m; against q[32l..32l+31] | q[128+32l..]; isum = sum t*q -
 *          sum q (the activation block's sum16, summed lane-wise).
 *   TQ1_0  the 52 digit bytes (masked load), digit n by 16-bit multiplies of the
 *          even and odd bytes ((b * 3^n) mod 256 * 3 >> 8); byte i < 32 is value
 *          32n + i, 32 <= i < 48 value 160 + 16n + i - 32, 48 <= i < 52 value 240 +
 *          4n + i - 48 (n < 4); the activation bytes are gathered to match (zero
 *          elsewhere); isum = sum t*q - sum q.
 *   IQ1    each weight row is unpacked once (quant_iq1_unpack) into the scratch as
 *          u = lv + 9 (0..18) in order, with each block's 16 scales ls as dword
 *          lanes and its factor d / 8; per 64 values D = dpbusd(u, q) (|D| <= 4 *
 *          18 * 127 fits int16) is scaled by vpdpwssd against ls (high word 0);
 *          isum = that sum - 9 * sum_h ls_h * sum16_h.
 *   NVFP4  the 32 nibble bytes into codes in value order, looked up (vpshufb) as
 *          level + 12 (0..24); against the two Q8_0 blocks' quants; each 128-bit
 *          lane is one 16-value sub-block: its sum minus 12 * (its quants' sum, also
 *          by vpdpbusd) is isum_s.
 * Declines (0, nothing written) for other types, without VNNI, and for IQ1 without
 * scratch (KVI_QGEMM_SCRATCH(n_in) holds n_in + n_in / 256 * 72 bytes).
 */
#include "kernels/q8_lowbit.h"
#include "kernels/vnni_avx512.h"
#include "formats/quant_iq1.h"
#include "formats/quant_nvfp4.h"
#include "formats/quant_tq.h"

#include <math.h>

/* 64 bytes: q[a..a+31] then q[b..b+31] */
VNNI_INLINE __m512i q2x32(const int8_t *qa, const int8_t *qb)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)qa)),
                              _mm256_loadu_si256((const __m256i *)qb), 1);
}

VNNI static int32_t isum_tq2(const uint8_t *p, const kern_q8k *x)
{
    const __m512i qs = _mm512_loadu_si512((const void *)p), m3 = _mm512_set1_epi8(3);
    __m512i acc = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)x->sum16));
    for (int l = 0; l < 4; l++) {
        const __m512i t = _mm512_and_si512(_mm512_srli_epi16(qs, 2 * l), m3);
        acc = _mm512_dpbusd_epi32(acc, t, q2x32(x->qs + 32 * l, x->qs + 128 + 32 * l));
    }
    return _mm512_reduce_add_epi32(acc);
}

/* digit n (pow = 3^n) of every byte of b, as bytes */
VNNI_INLINE __m512i tq1_digits(__m512i ev, __m512i od, int pow)
{
    const __m512i p = _mm512_set1_epi16((short)pow), ff = _mm512_set1_epi16(0xff),
                  three = _mm512_set1_epi16(3);
    __m512i e = _mm512_and_si512(_mm512_mullo_epi16(ev, p), ff);
    __m512i o = _mm512_and_si512(_mm512_mullo_epi16(od, p), ff);
    e = _mm512_srli_epi16(_mm512_mullo_epi16(e, three), 8);
    o = _mm512_srli_epi16(_mm512_mullo_epi16(o, three), 8);
    return _mm512_or_si512(e, _mm512_slli_epi16(o, 8));
}

VNNI static int32_t isum_tq1(const uint8_t *p, const kern_q8k *x)
{
    static const int POW3[5] = { 1, 3, 9, 27, 81 };
    const __m512i b = _mm512_maskz_loadu_epi8((__mmask64)0x000fffffffffffffull, p); /* qs[48], qh[4] */
    const __m512i ev = _mm512_and_si512(b, _mm512_set1_epi16(0xff)), od = _mm512_srli_epi16(b, 8);
    __m512i acc = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)x->sum16));
    for (int n = 0; n < 5; n++) {
        __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * n)));
        q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(x->qs + 160 + 16 * n)), 2);
        if (n < 4) {
            int32_t w;
            memcpy(&w, x->qs + 240 + 4 * n, 4);
            q = _mm512_inserti32x4(q, _mm_cvtsi32_si128(w), 3);
        } else {
            q = _mm512_inserti32x4(q, _mm_setzero_si128(), 3);
        }
        acc = _mm512_dpbusd_epi32(acc, tq1_digits(ev, od, POW3[n]), q);
    }
    return _mm512_reduce_add_epi32(acc);
}

VNNI static float dot_tq(kvi_type t, const uint8_t *w, const kern_q8k *x, int64_t nb)
{
    const size_t bb = t == KVI_TYPE_TQ1_0 ? sizeof(block_tq1_0) : sizeof(block_tq2_0);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += bb) {
        const int32_t isum = t == KVI_TYPE_TQ1_0 ? isum_tq1(w, &x[b]) : isum_tq2(w, &x[b]);
        const float d = quant_f16_to_f32((quant_f16)(w[bb - 2] | w[bb - 1] << 8));
        acc = fmaf(d * x[b].d, (float)isum, acc);
    }
    return acc;
}

/* ---- IQ1: one row unpacked, then dotted with every activation row -------- */

typedef struct iq1_blk {
    int32_t ls[16]; /* 2s + 1 of values 16h..16h+15 */
    float dw;       /* d / 8 */
    int32_t pad[15];
} iq1_blk;
_Static_assert(sizeof(iq1_blk) == 128, "iq1_blk size");

static void iq1_unpack_row(kvi_type t, const uint8_t *w, int64_t nb, uint8_t *u, iq1_blk *blk)
{
    const size_t bb = quant_block_bytes(t);
    int8_t lv[QK_K];
    uint8_t ls[16];
    for (int64_t b = 0; b < nb; b++) {
        float d;
        quant_iq1_unpack(t, w + (size_t)b * bb, lv, ls, &d);
        for (int i = 0; i < QK_K; i++) u[b * QK_K + i] = (uint8_t)(lv[i] + 9);
        for (int h = 0; h < 16; h++) blk[b].ls[h] = ls[h];
        blk[b].dw = d * 0.125f;
    }
}

VNNI static float dot_iq1(const uint8_t *u, const iq1_blk *blk, const kern_q8k *x, int64_t nb)
{
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, u += QK_K) {
        const __m512i ls = _mm512_loadu_si512((const void *)blk[b].ls);
        /* -9 * ls_h * sum16_h per lane h: the offset's term */
        __m512i t = _mm512_mullo_epi32(_mm512_mullo_epi32(ls, _mm512_loadu_si512((const void *)x[b].sum16)),
                                       _mm512_set1_epi32(-9));
        for (int k = 0; k < 4; k++) {
            const __m512i d =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512((const void *)(u + 64 * k)),
                                    _mm512_loadu_si512((const void *)(x[b].qs + 64 * k)));
            /* lane l of this 64 belongs to group 4k + l/4 */
            const __m512i idx = _mm512_add_epi32(
                _mm512_set1_epi32(4 * k),
                _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2));
            t = _mm512_dpwssd_epi32(t, d, _mm512_permutexvar_epi32(idx, ls));
        }
        acc = fmaf(blk[b].dw * x[b].d, (float)_mm512_reduce_add_epi32(t), acc);
    }
    return acc;
}

/* ---- NVFP4 -------------------------------------------------------------- */

VNNI static float dot_nvfp4(const uint8_t *w, const kern_q8a *x, int64_t nb)
{
    int8_t lv12[16];
    for (int i = 0; i < 16; i++) lv12[i] = (int8_t)(quant_kvalues_mxfp4[i] + 12);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lv12));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m512i c12 = _mm512_set1_epi8(12);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += sizeof(block_nvfp4)) {
        const __m256i qs = _mm256_loadu_si256((const __m256i *)(w + 4));
        const __m256i lo = _mm256_and_si256(qs, m4), hi = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m4);
        /* [sub 0 | sub 2], [sub 1 | sub 3] in value order, then sub-blocks 0..3 */
        const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi64(lo, hi)),
                                             _mm256_unpackhi_epi64(lo, hi), 1);
        const __m512i codes = _mm512_shuffle_i64x2(c, c, _MM_SHUFFLE(3, 1, 2, 0));
        const __m512i q = q2x32(x[2 * b].qs, x[2 * b + 1].qs);
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi8(tab, codes), q);
        s = _mm512_sub_epi32(s, _mm512_dpbusd_epi32(_mm512_setzero_si512(), c12, q));
        s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
        s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_CDAB));
        int32_t is[16];
        _mm512_storeu_si512((void *)is, s);
        for (int k = 0; k < 4; k++)
            acc = fmaf(quant_ue4m3_half(w[k]) * x[2 * b + k / 2].d, (float)is[4 * k], acc);
    }
    return acc;
}

int kern_lowbit_gemm_avx512(const kern_qgemm_args *a)
{
    if (!kern_lowbit_type(a->type) || !kern_has_vnni()) return 0;
    const kvi_type t = a->type;
    const bool iq1 = t == KVI_TYPE_IQ1_S || t == KVI_TYPE_IQ1_M;
    const int64_t nb = a->n_in / (t == KVI_TYPE_NVFP4 ? QK_NVFP4 : QK_K);
    uint8_t *u = a->scratch; /* IQ1: [n_in] unsigned levels, then [nb] iq1_blk */
    iq1_blk *blk = (iq1_blk *)(u + ((a->n_in + 127) & ~(int64_t)127));
    if (iq1 && (!a->scratch || (uintptr_t)a->scratch % 64)) return 0;
    for (int64_t j = a->j0; j < a->j1; j++) {
        const uint8_t *w = a->w + (size_t)j * a->w_rb;
        if (iq1) iq1_unpack_row(t, w, nb, u, blk);
        for (int64_t r = 0; r < a->n_rows; r++) {
            const uint8_t *xq = a->xq + (size_t)r * a->xq_rb;
            float v;
            if (iq1)
                v = dot_iq1(u, blk, (const kern_q8k *)xq, nb);
            else if (t == KVI_TYPE_NVFP4)
                v = dot_nvfp4(w, (const kern_q8a *)xq, nb);
            else
                v = dot_tq(t, w, (const kern_q8k *)xq, nb);
            a->y[r * a->ldy + j] = v;
        }
    }
    return 1;
}
