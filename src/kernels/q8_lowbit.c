/*
 * q8_lowbit.c — the scalar reference of the low-bit integer products (contract in
 * q8_lowbit.h): each weight block unpacked to int8 levels by the formats layer
 * (quant_iq1_unpack, quant_tq_unpack, quant_nvfp4_unpack), exact integer sums, then
 * the contract's float steps with fmaf, so the rounding does not depend on the
 * compiler's contraction choices.
 *
 * Invariants: integer sums fit int32 (largest: IQ1, 256 * 15 * 9 * 127); nothing
 * here allocates; only whole blocks are read (n a multiple of the block size, as
 * kern_matmul has checked).
 */
#include "kernels/q8_lowbit.h"
#include "formats/quant_iq1.h"
#include "formats/quant_nvfp4.h"
#include "formats/quant_tq.h"

#include <math.h>

bool kern_lowbit_type(kvi_type t)
{
    return t == KVI_TYPE_IQ1_S || t == KVI_TYPE_IQ1_M || t == KVI_TYPE_TQ1_0 || t == KVI_TYPE_TQ2_0 ||
           t == KVI_TYPE_NVFP4;
}

static int32_t idot(const int8_t *a, const int8_t *b, int n)
{
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += (int32_t)a[i] * (int32_t)b[i];
    return s;
}

static float dot_nvfp4(const uint8_t *w, const kern_q8a *x, int64_t n)
{
    int8_t lv[QK_NVFP4];
    float dh[4], acc = 0.0f;
    for (int64_t b = 0; b < n / QK_NVFP4; b++, w += sizeof(block_nvfp4)) {
        quant_nvfp4_unpack(w, lv, dh);
        for (int s = 0; s < 4; s++) {
            const kern_q8a *xb = &x[2 * b + s / 2];
            const int32_t isum = idot(lv + 16 * s, xb->qs + 16 * (s % 2), 16);
            acc = fmaf(dh[s] * xb->d, (float)isum, acc);
        }
    }
    return acc;
}

/* One 256-value block of an IQ1 or TQ type: isum and the weight factor dw. */
static int32_t block_k(kvi_type t, const uint8_t *w, const kern_q8k *x, float *dw)
{
    int8_t lv[QK_K];
    if (t == KVI_TYPE_TQ1_0 || t == KVI_TYPE_TQ2_0) {
        quant_tq_unpack(t, w, lv, dw);
        return idot(lv, x->qs, QK_K);
    }
    uint8_t ls[QK_K / 16];
    float d;
    quant_iq1_unpack(t, w, lv, ls, &d);
    *dw = d * 0.125f;
    int32_t isum = 0;
    for (int h = 0; h < QK_K / 16; h++) isum += ls[h] * idot(lv + 16 * h, x->qs + 16 * h, 16);
    return isum;
}

float kern_lowbit_dot_ref(kvi_type t, const void *w, const void *xq, int64_t n)
{
    if (t == KVI_TYPE_NVFP4) return dot_nvfp4(w, xq, n);
    const uint8_t *p = w;
    const kern_q8k *x = xq;
    const size_t bb = quant_block_bytes(t);
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        float dw;
        const int32_t isum = block_k(t, p + (size_t)b * bb, &x[b], &dw);
        acc = fmaf(dw * x[b].d, (float)isum, acc);
    }
    return acc;
}

void kern_lowbit_gemm_ref(const kern_qgemm_args *a)
{
    for (int64_t j = a->j0; j < a->j1; j++)
        for (int64_t r = 0; r < a->n_rows; r++)
            a->y[r * a->ldy + j] = kern_lowbit_dot_ref(a->type, a->w + (size_t)j * a->w_rb,
                                                       a->xq + (size_t)r * a->xq_rb, a->n_in);
}
