/*
 * q8.c — activation quantisation and the scalar reference of the integer
 * matrix products (contract in q8.h).
 *
 * Data: a quantised activation row is n/32 kern_q8a blocks or n/256 kern_q8k blocks,
 * contiguous. The reference unpacks each weight block into small integer levels
 * (lv, one per input, with the type's offset already removed for the symmetric
 * types), integer sub-block scales and mins, and float factors; it then forms the
 * exact integer sums and applies the contract's float steps with fmaf, so the
 * rounding is fixed by the contract and not by the compiler's contraction choices.
 *
 * kern_qgemm_ref unpacks each weight row once (q8_rows, q8_rows.h) and
 * reuses it for every activation row; kern_q8_dot_ref unpacks per call.
 *
 * quant_a / quant_k are the scalar references of the activation quantisation;
 * kern_q8_quantize_act hands the row to the active ISA's copy (kernels_actq_*.c,
 * the same bytes, tests/test_actq.c) when there is one.
 *
 * Invariants: every integer sum fits int32 (largest: IQ4_XS, 256 * 32 * 127 * 127);
 * nothing here allocates.
 */
#include "kernels/q8.h"
#include "kernels/kernels_int.h"
#include "kernels/actq.h"
#include "kernels/q8_rows.h"
#include "kernels/q8_lowbit.h"

#include <math.h>
#include <string.h>

kvi_type kern_q8_act_type(kvi_type t)
{
    switch (t) {
    case KVI_TYPE_Q8_0:
    case KVI_TYPE_Q4_0:
    case KVI_TYPE_Q4_1:
    case KVI_TYPE_Q5_0:
    case KVI_TYPE_Q5_1:
    case KVI_TYPE_IQ4_NL:
    case KVI_TYPE_MXFP4:
    case KVI_TYPE_NVFP4: return KVI_TYPE_Q8_0;
    case KVI_TYPE_Q4_K:
    case KVI_TYPE_Q5_K:
    case KVI_TYPE_Q6_K:
    case KVI_TYPE_IQ4_XS:
    case KVI_TYPE_IQ1_S: /* q8_lowbit.h */
    case KVI_TYPE_IQ1_M:
    case KVI_TYPE_TQ1_0:
    case KVI_TYPE_TQ2_0: return KVI_TYPE_Q8_K;
    default: return quant_iq_is_grid(t) ? KVI_TYPE_Q8_K : KVI_TYPE_F32;
    }
}

size_t kern_q8_act_row_bytes(kvi_type t, int64_t n)
{
    kvi_type a = kern_q8_act_type(t);
    if (n <= 0) return 0;
    if (a == KVI_TYPE_Q8_0) return n % 32 ? 0 : (size_t)(n / 32) * sizeof(kern_q8a);
    if (a == KVI_TYPE_Q8_K) return n % QK_K ? 0 : (size_t)(n / QK_K) * sizeof(kern_q8k);
    return 0;
}

static float f16_round(float v) { return quant_f16_to_f32(quant_f32_to_f16(v)); }

/* ggml's Q8_0 / Q8_1: d = amax / 127, q = round(x / d) (ties to even). */
static void quant_a(const float *x, kern_q8a *b)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        long q = lrintf(x[i] * id);
        if (q > 127) q = 127;
        if (q < -127) q = -127;
        b->qs[i] = (int8_t)q;
        sum += (int)q;
    }
    b->d = f16_round(d);
    b->s = f16_round(d * (float)sum);
    b->sum = sum;
    b->pad = 0;
}

/* ggml's Q8_K: scale from the signed element of largest magnitude, -127 levels. */
static void quant_k(const float *x, kern_q8k *b)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < QK_K; i++) {
        float a = fabsf(x[i]);
        if (a > amax) {
            amax = a;
            max = x[i];
        }
    }
    memset(b, 0, sizeof *b);
    if (amax == 0.0f) return;
    const float iscale = -127.0f / max;
    for (int i = 0; i < QK_K; i++) {
        long q = lrintf(iscale * x[i]);
        if (q > 127) q = 127;
        if (q < -127) q = -127;
        b->qs[i] = (int8_t)q;
        b->sum16[i / 16] += (int32_t)q;
        b->sum32[i / 32] += (int32_t)q;
    }
    b->d = 1.0f / iscale;
}

void kern_actq_a_ref(const float *x, kern_q8a *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) quant_a(x + 32 * i, b + i);
}

void kern_actq_k_ref(const float *x, kern_q8k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) quant_k(x + QK_K * i, b + i);
}

/* The active table's quantisation; the SIMD versions (actq_*.c) give the bytes of
 * the reference loops above exactly. */
void kern_q8_quantize_act(kvi_type t, const float *x, void *dst, int64_t n)
{
    const kvi_type a = kern_q8_act_type(t);
    if (a == KVI_TYPE_Q8_0)
        kern_table_active()->actq_a(x, dst, n / 32);
    else if (a == KVI_TYPE_Q8_K)
        kern_table_active()->actq_k(x, dst, n / QK_K);
}

size_t kern_q8_tiles_bytes(int64_t n_rows, int64_t n_in)
{
    if (n_rows < 1 || n_in < 32) return 0;
    const uint64_t tiles = ((uint64_t)n_rows + 15) / 16, nb = (uint64_t)n_in / 32;
    if (nb > SIZE_MAX / KVI_Q8_TILE_BLOCK / tiles) return 0;
    return (size_t)(tiles * nb * KVI_Q8_TILE_BLOCK);
}

void kern_q8_tiles_row(const void *xq, int64_t n_in, int64_t r, bool pad, uint8_t *xt)
{
    const kern_q8a *x = xq;
    const int64_t nb = n_in / 32, t = r / 16;
    const int m = (int)(r % 16), m_end = pad ? 16 : m + 1;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = xt + (size_t)(t * nb + b) * KVI_Q8_TILE_BLOCK;
        memcpy(blk + 32 * m, x[b].qs, 32);
        memcpy(blk + 512 + 4 * m, &x[b].d, 4);
        memcpy(blk + 576 + 4 * m, &x[b].sum, 4);
        if (m_end > m + 1) {
            memset(blk + 32 * (m + 1), 0, 32 * (size_t)(m_end - m - 1));
            memset(blk + 512 + 4 * (m + 1), 0, 4 * (size_t)(m_end - m - 1));
            memset(blk + 576 + 4 * (m + 1), 0, 4 * (size_t)(m_end - m - 1));
        }
    }
}

int kern_q8_level_offset(kvi_type t)
{
    switch (t) {
    case KVI_TYPE_Q8_0:
    case KVI_TYPE_IQ4_NL:
    case KVI_TYPE_IQ4_XS:
    case KVI_TYPE_MXFP4: return 128;
    case KVI_TYPE_Q4_0: return 8;
    case KVI_TYPE_Q5_0: return 16;
    case KVI_TYPE_Q6_K: return 32;
    default: return 0;
    }
}

float kern_q8_dot_ref(kvi_type t, const void *w, const void *xq, int64_t n)
{
    if (kern_lowbit_type(t)) return kern_lowbit_dot_ref(t, w, xq, n);
    const uint8_t *wp = w;
    float acc = 0.0f;
    if (kern_q8_act_type(t) == KVI_TYPE_Q8_0) {
        const size_t bb = quant_block_bytes(t);
        const kern_q8a *x = xq;
        int8_t lv[32];
        for (int64_t b = 0; b < n / 32; b++) {
            float d, m;
            unpack32(t, wp + (size_t)b * bb, lv, &d, &m);
            int32_t isum = 0;
            for (int i = 0; i < 32; i++) isum += lv[i] * x[b].qs[i];
            acc = fmaf(d * x[b].d, (float)isum, acc);
            if (t == KVI_TYPE_Q4_1 || t == KVI_TYPE_Q5_1) acc = fmaf(m, x[b].s, acc);
        }
        return acc;
    }
    if (kern_q8_act_type(t) != KVI_TYPE_Q8_K) return NAN;
    const size_t bb = quant_block_bytes(t);
    const kern_q8k *x = xq;
    int8_t lv[QK_K];
    int sc[16], mn[8];
    for (int64_t b = 0; b < n / QK_K; b++) {
        float d, dmin;
        unpack256(t, wp + (size_t)b * bb, lv, sc, mn, &d, &dmin);
        int32_t isum = 0, msum = 0;
        const int sub = kern_q8k_sub(t);
        for (int s = 0; s < QK_K / sub; s++) {
            int32_t si = 0;
            for (int i = s * sub; i < (s + 1) * sub; i++) si += lv[i] * x[b].qs[i];
            isum += sc[s] * si;
        }
        acc = fmaf(d * x[b].d, (float)isum, acc);
        if (t == KVI_TYPE_Q4_K || t == KVI_TYPE_Q5_K) {
            for (int s = 0; s < 8; s++) msum += mn[s] * x[b].sum32[s];
            acc = fmaf(-(dmin * x[b].d), (float)msum, acc);
        }
    }
    return acc;
}

void kern_qgemm_ref(const kern_qgemm_args *a)
{
    if (kern_lowbit_type(a->type)) {
        kern_lowbit_gemm_ref(a);
        return;
    }
    if (q8_rows(a)) return;
    for (int64_t j = a->j0; j < a->j1; j++)
        for (int64_t r = 0; r < a->n_rows; r++)
            a->y[r * a->ldy + j] =
                kern_q8_dot_ref(a->type, a->w + (size_t)j * a->w_rb, a->xq + (size_t)r * a->xq_rb, a->n_in);
}
