/*
 * q8_rows.h — the scalar integer product, as static functions included by
 * q8.c (plain build) and kernels_avx2.c (compiled for AVX2 + FMA, where
 * the compiler vectorises the integer loops and fmaf is one instruction). Both
 * builds perform the q8.h contract's operations, so their bits agree.
 *
 * q8_rows: for each weight row j, the row is unpacked once into the scratch
 * (levels int8 [n_in], then per block a q8_blk: d, m, scales, mins), then dotted
 * with every activation row r. Returns 0 (nothing written) without scratch.
 */
#ifndef KVI_KERNELS_Q8_ROWS_H
#define KVI_KERNELS_Q8_ROWS_H

#include "kernels/q8.h"

#include <math.h>
#include <string.h>

/* ---- weight blocks as integers ------------------------------------------ */

static float F16(quant_f16 h) { return quant_f16_to_f32(h); }

static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
    uint8_t s, m;
    quant_scale_min_k4(j, q, &s, &m);
    *sc = s;
    *mn = m;
}

/* One 32-input block of a legacy type (or IQ4_NL / MXFP4): levels lv (offset
 * removed for _0 types; the codebook's values for IQ4_NL / MXFP4), scale d (MXFP4:
 * 2^(e - 128) from its E8M0 byte) and min m (0 but for the _1 types). */
static void unpack32(kvi_type t, const uint8_t *p, int8_t lv[32], float *d, float *m)
{
    uint32_t qh;
    *m = 0.0f;
    switch (t) {
    case KVI_TYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)p;
        *d = F16(b->d);
        memcpy(lv, b->qs, 32);
        break;
    }
    case KVI_TYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)p;
        *d = F16(b->d);
        for (int i = 0; i < 16; i++) {
            lv[i] = (int8_t)((b->qs[i] & 0xf) - 8);
            lv[i + 16] = (int8_t)((b->qs[i] >> 4) - 8);
        }
        break;
    }
    case KVI_TYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)p;
        *d = F16(b->d);
        *m = F16(b->m);
        for (int i = 0; i < 16; i++) {
            lv[i] = (int8_t)(b->qs[i] & 0xf);
            lv[i + 16] = (int8_t)(b->qs[i] >> 4);
        }
        break;
    }
    case KVI_TYPE_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)p;
        *d = F16(b->d);
        memcpy(&qh, b->qh, 4);
        for (int i = 0; i < 16; i++) {
            lv[i] = (int8_t)(((b->qs[i] & 0xf) | (int)((qh >> i) & 1) << 4) - 16);
            lv[i + 16] = (int8_t)(((b->qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4) - 16);
        }
        break;
    }
    case KVI_TYPE_IQ4_NL: {
        const block_iq4_nl *b = (const block_iq4_nl *)p;
        *d = F16(b->d);
        for (int i = 0; i < 16; i++) {
            lv[i] = quant_kvalues_iq4nl[b->qs[i] & 0xf];
            lv[i + 16] = quant_kvalues_iq4nl[b->qs[i] >> 4];
        }
        break;
    }
    case KVI_TYPE_MXFP4: {
        const block_mxfp4 *b = (const block_mxfp4 *)p;
        *d = quant_e8m0_half(b->e);
        for (int i = 0; i < 16; i++) {
            lv[i] = quant_kvalues_mxfp4[b->qs[i] & 0xf];
            lv[i + 16] = quant_kvalues_mxfp4[b->qs[i] >> 4];
        }
        break;
    }
    default: { /* KVI_TYPE_Q5_1 */
        const block_q5_1 *b = (const block_q5_1 *)p;
        *d = F16(b->d);
        *m = F16(b->m);
        memcpy(&qh, b->qh, 4);
        for (int i = 0; i < 16; i++) {
            lv[i] = (int8_t)((b->qs[i] & 0xf) | (int)((qh >> i) & 1) << 4);
            lv[i + 16] = (int8_t)((b->qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4);
        }
        break;
    }
    }
}

/* One 256-input K-quant block: levels lv, per-16 scales sc16 (Q6_K) or per-32
 * scales/mins sc32/mn32 (Q4_K/Q5_K; IQ4_XS: scales only, signed), d and dmin. */
static void unpack256(kvi_type t, const uint8_t *p, int8_t lv[QK_K], int sc[16], int mn[8], float *d,
                      float *dmin)
{
    if (quant_iq_is_grid(t)) { /* signed grid bytes, odd scales per 16 (quant_iq.h) */
        uint8_t mag[QK_K], sgn[QK_K / 8], s16[16];
        quant_iq_unpack(t, p, mag, sgn, s16, d);
        *dmin = 0.0f;
        for (int i = 0; i < QK_K; i++) lv[i] = (int8_t)((sgn[i / 8] >> (i % 8)) & 1 ? -mag[i] : mag[i]);
        for (int s = 0; s < 16; s++) sc[s] = s16[s];
        for (int s = 0; s < 8; s++) mn[s] = 0;
        return;
    }
    if (t == KVI_TYPE_IQ4_XS) {
        block_iq4_xs b;
        memcpy(&b, p, sizeof b); /* the uint16_t scales_h may lie unaligned */
        *d = F16(b.d);
        *dmin = 0.0f;
        for (int s = 0; s < 8; s++) {
            sc[s] = quant_iq4xs_scale(&b, s);
            mn[s] = 0;
            for (int i = 0; i < 16; i++) {
                lv[32 * s + i] = quant_kvalues_iq4nl[b.qs[16 * s + i] & 0xf];
                lv[32 * s + 16 + i] = quant_kvalues_iq4nl[b.qs[16 * s + i] >> 4];
            }
        }
        return;
    }
    if (t == KVI_TYPE_Q6_K) {
        const block_q6_K *b = (const block_q6_K *)p;
        *d = F16(b->d);
        *dmin = 0.0f;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            int8_t *o = lv + 128 * h;
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32);
                o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32);
                o[l + 64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
                o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
            }
        }
        for (int i = 0; i < 16; i++) sc[i] = b->scales[i];
        return;
    }
    /* Q4_K and Q5_K share the header layout (d, dmin, scales) */
    const block_q4_K *b4 = (const block_q4_K *)p;
    const block_q5_K *b5 = (const block_q5_K *)p;
    const uint8_t *scales = t == KVI_TYPE_Q4_K ? b4->scales : b5->scales;
    const uint8_t *qs = t == KVI_TYPE_Q4_K ? b4->qs : b5->qs;
    *d = F16(t == KVI_TYPE_Q4_K ? b4->d : b5->d);
    *dmin = F16(t == KVI_TYPE_Q4_K ? b4->dmin : b5->dmin);
    for (int c = 0; c < 4; c++) {
        const uint8_t *q = qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            lv[64 * c + l] = (int8_t)(q[l] & 0xf);
            lv[64 * c + 32 + l] = (int8_t)(q[l] >> 4);
        }
        if (t == KVI_TYPE_Q5_K)
            for (int l = 0; l < 32; l++) {
                lv[64 * c + l] = (int8_t)(lv[64 * c + l] | ((b5->qh[l] >> (2 * c)) & 1) << 4);
                lv[64 * c + 32 + l] = (int8_t)(lv[64 * c + 32 + l] | ((b5->qh[l] >> (2 * c + 1)) & 1) << 4);
            }
    }
    for (int j = 0; j < 8; j++) scale_min_k4(j, scales, &sc[j], &mn[j]);
}

typedef struct q8_blk {
    float d, m; /* scale; min (_1 types) or dmin (K-quants) */
    int sc[16]; /* sub-block scales (Q6_K 16, Q4_K/Q5_K 8) */
    int mn[8];  /* sub-block mins (Q4_K/Q5_K) */
} q8_blk;
_Static_assert(32 + sizeof(q8_blk) <= 832, "q8_rows fits KVI_QGEMM_SCRATCH");

/* An includer may supply its own exact q8_idot (n = 16 or 32) by defining
 * Q8_IDOT_DEFINED before the include. */
#ifndef Q8_IDOT_DEFINED
static int32_t q8_idot(const int8_t *a, const int8_t *b, int n)
{
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += (int32_t)a[i] * (int32_t)b[i];
    return s;
}
#endif

static int q8_rows(const kern_qgemm_args *a)
{
    if (!a->scratch) return 0;
    const kvi_type t = a->type;
    const bool kq = kern_q8_act_type(t) == KVI_TYPE_Q8_K;
    const int64_t be = kq ? QK_K : 32, nb = a->n_in / be;
    const size_t bb = quant_block_bytes(t);
    int8_t *lv8 = a->scratch;                                                          /* [n_in] levels */
    q8_blk *blk = (q8_blk *)((uint8_t *)a->scratch + ((a->n_in + 63) & ~(int64_t)63)); /* [nb] */
    for (int64_t j = a->j0; j < a->j1; j++) {
        const uint8_t *w = a->w + (size_t)j * a->w_rb;
        for (int64_t b = 0; b < nb; b++) {
            /* every field q8_rows reads below is written here */
            q8_blk *k = &blk[b];
            if (kq)
                unpack256(t, w + (size_t)b * bb, lv8 + b * be, k->sc, k->mn, &k->d, &k->m);
            else
                unpack32(t, w + (size_t)b * bb, lv8 + b * be, &k->d, &k->m);
        }
        for (int64_t r = 0; r < a->n_rows; r++) {
            float acc = 0.0f;
            if (!kq) {
                const kern_q8a *x = (const kern_q8a *)(a->xq + (size_t)r * a->xq_rb);
                const bool has_m = t == KVI_TYPE_Q4_1 || t == KVI_TYPE_Q5_1;
                for (int64_t b = 0; b < nb; b++) {
                    const int32_t isum = q8_idot(lv8 + b * 32, x[b].qs, 32);
                    acc = fmaf(blk[b].d * x[b].d, (float)isum, acc);
                    if (has_m) acc = fmaf(blk[b].m, x[b].s, acc);
                }
            } else {
                const kern_q8k *x = (const kern_q8k *)(a->xq + (size_t)r * a->xq_rb);
                const int sub = kern_q8k_sub(t);
                for (int64_t b = 0; b < nb; b++) {
                    int32_t isum = 0, msum = 0;
                    for (int s = 0; s < QK_K / sub; s++)
                        isum += blk[b].sc[s] * q8_idot(lv8 + b * QK_K + s * sub, x[b].qs + s * sub, sub);
                    acc = fmaf(blk[b].d * x[b].d, (float)isum, acc);
                    if (t == KVI_TYPE_Q4_K || t == KVI_TYPE_Q5_K) {
                        for (int s = 0; s < 8; s++) msum += blk[b].mn[s] * x[b].sum32[s];
                        acc = fmaf(-(blk[b].m * x[b].d), (float)msum, acc);
                    }
                }
            }
            a->y[r * a->ldy + j] = acc;
        }
    }
    return 1;
}

#endif
