/*
 * quant_ggml.c — llama.cpp's quantisation algorithms (ggml-quants.c), written
 * again so that every block is byte-identical to ggml's (quant_ggml.h).
 *
 * Data: blocks of quant.h. Per type, the search ggml runs:
 *   Q4_0/Q5_0   no imatrix: scale = signed abs-max / -8 (-16), levels truncated from
 *               x / d + 8.5 (16.5); with one: make_qx weighted (nmax 8 / 16)
 *   Q4_1/Q5_1   no imatrix: (max - min) / 15 (31), truncated from + 0.5; with one:
 *               make_qkx3 (min and scale over 37 trial scales)
 *   Q8_0        abs-max / 127, roundf (half away from zero); never an imatrix
 *   Q2_K        per 16: make_qkx2 with |x| weights, 4-bit scales and mins from
 *               their maxima; imatrix: make_qkx3, make_qp for the scales
 *   Q3_K        per 16: make_q3 (5 refinement passes), 6-bit signed scales;
 *               imatrix: make_qx weighted for values and scales
 *   Q4_K/Q5_K   per 32: make_qkx2 with av + |x| weights, 6-bit scales and mins;
 *               imatrix: make_qkx3 + make_qp
 *   Q6_K        per 16: make_qx (rmse 1, imatrix as weights), 8-bit scales
 *   IQ4_NL/XS   per 32: best codebook scale over 15 trials (weights x^2 or imatrix)
 *   MXFP4       exponent floor(log2 amax) - 2, nearest E2M1 level
 * Invariants: the float operations are ggml's, in ggml's order (this file is built
 * without contraction into fused multiply-adds, as ggml-base is); nearest_int is
 * round-half-even through the 1.5 * 2^23 trick, valid for |x| < 2^22.
 */
#include "formats/quant_ggml.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define GROUP_MAX_EPS 1e-15f
#define F16(h) quant_f16_to_f32(h)
#define TO_F16(f) quant_f32_to_f16(f)

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

static int nearest_int(float f)
{
    const float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- the scale searches ------------------------------------------------- */

/* The weight of value x in make_qx's fit: qw when given, else by rmse_type. */
static float qx_weight(const float *qw, int i, float x, int rmse_type)
{
    if (qw) return qw[i];
    return rmse_type == 1 ? x * x : rmse_type == 2 ? 1 : rmse_type == 3 ? fabsf(x) : sqrtf(fabsf(x));
}

/* The value of largest magnitude (the first such, with its sign); *amax its magnitude. */
static float signed_absmax(const float *x, int n, float *amax)
{
    float max = 0;
    *amax = 0;
    for (int i = 0; i < n; ++i)
        if (fabsf(x[i]) > *amax) {
            *amax = fabsf(x[i]);
            max = x[i];
        }
    return max;
}

/* Symmetric levels L [n] in 0..2 nmax - 1 (value = scale * (L - nmax)): the scale
 * maximising the weighted fit over 19 trial scales (rmse_type 0: abs-max only). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type, const float *qw)
{
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i)
            L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
        return 1 / iscale;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = qx_weight(qw, i, x[i], rmse_type);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            const float w = qx_weight(qw, i, x[i], rmse_type);
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's levels: make_qx's start, then up to 5 passes moving single levels. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx <= 0) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            const int new_l = imax(-nmax, imin(nmax - 1, nearest_int(x[i] * sl2 / slx)));
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                ++n_changed;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric levels L [n] in 0..nmax (value = scale * L - *the_min) minimising the
 * weighted error (|.| when use_mad) over nstep + 1 trial scales. make_qkx2 takes
 * weights always; make_qkx3 (weights NULL: x^2) differs only in its all-equal test
 * (max <= min instead of max == min). */
static float make_qkx_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                             float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad,
                             bool v3)
{
    float min = x[0], max = x[0];
    float sum_w = weights ? weights[0] : x[0] * x[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights ? weights[i] : x[i] * x[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (v3 ? max <= min : max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        const float w = weights ? weights[i] : x[i] * x[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            const float w = weights ? weights[i] : x[i] * x[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur_error = 0;
        for (int i = 0; i < n; ++i) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            const float w = weights ? weights[i] : x[i] * x[i];
            cur_error += w * diff;
        }
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* Non-negative levels L [n] in 0..nmax of the positive values x (scales, mins) for
 * one common scale, fitted with weights qw over 9 trials and 5 refinement passes. */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw)
{
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = imin(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = imin(nmax, nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            const int new_l = imin(nmax, nearest_int(x[i] * sl2 / slx));
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                ++n_changed;
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The imatrix weights of one block: qw[j] * sqrt(sigma2 + x[j]^2). */
static void imatrix_weights(const float *qw, const float *x, int n, float sigma2, float *w)
{
    for (int j = 0; j < n; ++j) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

/* sum of x[j]^2 over n values, in order */
static float sum_sq(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
    return s;
}

/* ---- 32-element types ---------------------------------------------------- */

/* 32 levels (bits each) into Q5_x's nibbles qs [16] and high bits qh. */
static void pack_q5(const uint8_t *L, uint8_t *qs, uint8_t qh_out[4])
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        qh |= ((L[j] & 0x10u) >> 4) << j;
        qh |= ((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh_out[k] = (uint8_t)(qh >> (8 * k));
}

/* Q4_0 (nmax 8) / Q5_0 (nmax 16) reference levels of one block into L [32]. */
static float q_0_ref(const float *x, int nmax, uint8_t *L)
{
    float amax;
    const float d = signed_absmax(x, 32, &amax) / -nmax;
    const float id = d ? 1.0f / d : 0.0f;
    const float off = (float)nmax + 0.5f;
    for (int j = 0; j < 32; ++j) L[j] = (uint8_t)imin(2 * nmax - 1, (int)(x[j] * id + off));
    return d;
}

/* Q4_1 (nmax 15) / Q5_1 (31) reference levels into L [32]; *m the block minimum. */
static float q_1_ref(const float *x, int nmax, uint8_t *L, float *m)
{
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / nmax;
    const float id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = (uint8_t)imin(nmax, (int)((x[j] - min) * id + 0.5f));
    *m = min;
    return d;
}

/* One row of Q4_0/Q4_1/Q5_0/Q5_1 (t), with or without importance weights qw. */
static void row_q45(kvi_type t, const float *x, uint8_t *y, int64_t n, const float *qw)
{
    const bool q5 = t == KVI_TYPE_Q5_0 || t == KVI_TYPE_Q5_1,
               has_min = t == KVI_TYPE_Q4_1 || t == KVI_TYPE_Q5_1;
    const int nmax = q5 ? 16 : 8;
    const float sigma2 = qw ? sum_sq(x, n) / n : 0;
    const size_t bb = quant_block_bytes(t);
    for (int64_t ib = 0; ib < n / 32; ++ib, y += bb) {
        const float *xb = x + 32 * ib;
        uint8_t L[32], Laux[32];
        float d, m = 0;
        if (!qw && has_min)
            d = q_1_ref(xb, 2 * nmax - 1, L, &m);
        else if (!qw)
            d = q_0_ref(xb, nmax, L);
        else {
            float w[32];
            imatrix_weights(qw + 32 * ib, xb, 32, sigma2, w);
            if (has_min) {
                d = make_qkx_quants(32, 2 * nmax - 1, xb, w, L, &m, Laux, -0.9f, 0.05f, 36, false, true);
                m = -m;
            } else
                d = make_qx_quants(32, nmax, xb, (int8_t *)L, 1, w);
        }
        const quant_f16 dh = TO_F16(d), mh = TO_F16(m);
        memcpy(y, &dh, 2);
        if (has_min) memcpy(y + 2, &mh, 2);
        uint8_t *q = y + (has_min ? 4 : 2);
        if (q5)
            pack_q5(L, q + 4, q);
        else
            for (int j = 0; j < 16; ++j) q[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void row_q8_0(const float *x, block_q8_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = TO_F16(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static int best_index_mxfp4(float x, float e)
{
    int best = 0;
    float best_err = fabsf(quant_kvalues_mxfp4[0] * e - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(quant_kvalues_mxfp4[i] * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static void row_mxfp4(const float *x, block_mxfp4 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = quant_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; ++j)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[j + 16], d) << 4);
    }
}

/* ---- IQ4_NL / IQ4_XS ----------------------------------------------------- */

/* The codebook index nearest x (ties to the upper level unless strictly closer). */
static int best_index_iq4(float x)
{
    const int8_t *val = quant_kvalues_iq4nl;
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* The best scale of the 32 values xb (weights w) over the codebook with 15 trials;
 * indices into Lb. 0 for an all-zero block. */
static float iq4_block_scale(const float *xb, const float *w, uint8_t *Lb)
{
    const int8_t *values = quant_kvalues_iq4nl;
    const int ntry = 7;
    float amax;
    const float max = signed_absmax(xb, 32, &amax);
    if (amax < GROUP_MAX_EPS) return 0;
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
        const int l = best_index_iq4(id * xb[j]);
        Lb[j] = (uint8_t)l;
        const float q = values[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const float q = values[best_index_iq4(id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* One super-block of sb values (32: IQ4_NL, 256: IQ4_XS) at x into dh, the nibbles
 * q4 [sb/2] and (IQ4_XS) the 6-bit scales; qw NULL or [sb]. */
static void iq4_superblock(int sb, const float *x, quant_f16 *dh, uint8_t *q4, uint16_t *scales_h,
                           uint8_t *scales_l, const float *qw)
{
    float sigma2 = 0, scales[QK_K / 32], w[32], max_scale = 0, amax_scale = 0;
    uint8_t L[QK_K];
    for (int j = 0; j < sb; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / sb;
    memset(q4, 0, (size_t)sb / 2);
    memset(L, 0, sizeof L);
    *dh = TO_F16(0.f);
    for (int ib = 0; ib < sb / 32; ++ib) {
        const float *xb = x + 32 * ib;
        if (qw)
            imatrix_weights(qw + 32 * ib, xb, 32, sigma2, w);
        else
            for (int j = 0; j < 32; ++j) w[j] = xb[j] * xb[j];
        scales[ib] = iq4_block_scale(xb, w, L + 32 * ib);
        if (fabsf(scales[ib]) > amax_scale) {
            amax_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (sb > 32) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = TO_F16(d);
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sb / 32; ++ib) {
            const int l = imax(-32, imin(31, nearest_int(id * scales[ib])));
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j) L[32 * ib + j] = (uint8_t)best_index_iq4(idl * x[32 * ib + j]);
            const int lu = l + 32;
            if (ib % 2 == 0)
                scales_l[ib / 2] = (uint8_t)(lu & 0xf);
            else
                scales_l[ib / 2] |= (uint8_t)((lu & 0xf) << 4);
            *scales_h |= (uint16_t)((lu >> 4) << 2 * (ib % 8));
        }
    } else {
        *dh = TO_F16(scales[0]);
        const float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < sb; ++j) L[j] = (uint8_t)best_index_iq4(id * x[j]);
    }
    for (int i = 0; i < sb / 32; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

static void row_iq4(kvi_type t, const float *x, uint8_t *y, int64_t n, const float *qw)
{
    if (t == KVI_TYPE_IQ4_NL) {
        block_iq4_nl *b = (block_iq4_nl *)y;
        for (int64_t i = 0; i < n / 32; i++)
            iq4_superblock(32, x + 32 * i, &b[i].d, b[i].qs, NULL, NULL, qw ? qw + 32 * i : NULL);
        return;
    }
    block_iq4_xs *b = (block_iq4_xs *)y;
    for (int64_t i = 0; i < n / QK_K; i++)
        iq4_superblock(QK_K, x + QK_K * i, &b[i].d, b[i].qs, &b[i].scales_h, b[i].scales_l,
                       qw ? qw + QK_K * i : NULL);
}

/* ---- K types ------------------------------------------------------------- */

/* The 2-bit levels L [256] into Q2_K's / Q3_K's qs [64]. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] =
                (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* Q2_K: the levels again for the stored scales and mins (scales[j] low nibble:
 * scale, high: min), then packed. */
static void q2k_finish(const float *x, block_q2_K *y, uint8_t *L)
{
    const float dd = F16(y->d), dmn = F16(y->dmin);
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = dd * (y->scales[j] & 0xF);
        if (!d) continue;
        const float dm = dmn * (y->scales[j] >> 4);
        for (int ii = 0; ii < 16; ++ii)
            L[16 * j + ii] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * j + ii] + dm) / d)));
    }
    pack_2bit(L, y->qs);
}

static void block_q2k_ref(const float *x, block_q2_K *y)
{
    uint8_t L[QK_K], Laux[16];
    float w[16], mins[QK_K / 16], scales[QK_K / 16], max_scale = 0, max_min = 0;
    const float q4scale = 15.f;
    for (int j = 0; j < QK_K / 16; ++j) {
        for (int l = 0; l < 16; ++l) w[l] = fabsf(x[16 * j + l]);
        scales[j] =
            make_qkx_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = q4scale / max_scale;
        for (int j = 0; j < QK_K / 16; ++j) y->scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
        y->d = TO_F16(max_scale / q4scale);
    } else {
        memset(y->scales, 0, sizeof y->scales);
        y->d = TO_F16(0.f);
    }
    if (max_min > 0) {
        const float iscale = q4scale / max_min;
        for (int j = 0; j < QK_K / 16; ++j) y->scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
        y->dmin = TO_F16(max_min / q4scale);
    } else
        y->dmin = TO_F16(0.f);
    q2k_finish(x, y, L);
}

static void block_q2k_imatrix(const float *x, block_q2_K *y, const float *qw)
{
    uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float w[16], mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16];
    const float sigma2 = sum_sq(x, QK_K) / QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
        imatrix_weights(qw + 16 * j, x + 16 * j, 16, sigma2, w);
        sw[j] = 0;
        for (int l = 0; l < 16; ++l) sw[j] += w[l];
        scales[j] =
            make_qkx_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false, true);
    }
    y->d = TO_F16(make_qp_quants(QK_K / 16, 15, scales, Ls, sw));
    y->dmin = TO_F16(make_qp_quants(QK_K / 16, 15, mins, Lm, sw));
    for (int j = 0; j < QK_K / 16; ++j) y->scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    q2k_finish(x, y, L);
}

/* Q3_K: the 6-bit scale l (0..63, stored + 32) of sub-block j into scales[12]. */
static void q3k_put_scale(uint8_t *s, int j, int l)
{
    if (j < 8)
        s[j] = (uint8_t)(l & 0xF);
    else
        s[j - 8] |= (uint8_t)((l & 0xF) << 4);
    s[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
}

/* Q3_K: the levels again for the stored scales, the high bits and the packing. */
static void q3k_finish(const float *x, block_q3_K *y, int8_t *L)
{
    for (int j = 0; j < QK_K / 16; ++j) {
        int sc = j < 8 ? y->scales[j] & 0xF : y->scales[j - 8] >> 4;
        sc = (sc | (((y->scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        const float d = F16(y->d) * (int8_t)sc;
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii)
            L[16 * j + ii] = (int8_t)(imax(-4, imin(3, nearest_int(x[16 * j + ii] / d))) + 4);
    }
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t U[QK_K];
    for (int j = 0; j < QK_K; ++j) {
        U[j] = (uint8_t)L[j];
        if (U[j] > 3) {
            y->hmask[j % (QK_K / 8)] |= (uint8_t)(1u << (j / (QK_K / 8)));
            U[j] -= 4;
        }
    }
    pack_2bit(U, y->qs);
}

static void block_q3k(const float *x, block_q3_K *y, const float *qw)
{
    int8_t L[QK_K];
    float scales[QK_K / 16];
    memset(y->scales, 0, 12);
    if (!qw) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                q3k_put_scale(y->scales, j, imax(-32, imin(31, l)) + 32);
            }
            y->d = TO_F16(1 / iscale);
        } else
            y->d = TO_F16(0.f);
    } else {
        float w[16], sw[QK_K / 16];
        int8_t Ls[QK_K / 16];
        const float sigma2 = 2 * sum_sq(x, QK_K) / QK_K;
        for (int j = 0; j < QK_K / 16; ++j) {
            imatrix_weights(qw + 16 * j, x + 16 * j, 16, sigma2, w);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += w[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, 1, w);
        }
        const float d_block = make_qx_quants(QK_K / 16, 32, scales, Ls, 1, sw);
        for (int j = 0; j < QK_K / 16; ++j) q3k_put_scale(y->scales, j, Ls[j]);
        y->d = TO_F16(d_block);
    }
    q3k_finish(x, y, L);
}

/* Q4_K / Q5_K (nmax 15 / 31): 8 scales and mins of 32 values, the 6-bit packed
 * scales, d and dmin into sc12 / dh / dmh, and the levels L [256]. */
static void block_k45(const float *x, int nmax, const float *qw, uint8_t *sc12, quant_f16 *dh, quant_f16 *dmh,
                      uint8_t *L)
{
    uint8_t Laux[32], ls[QK_K / 32], lm[QK_K / 32];
    float w[32], mins[QK_K / 32], scales[QK_K / 32];
    if (!qw) {
        float max_scale = 0, max_min = 0;
        const bool q4 = nmax == 15;
        for (int j = 0; j < QK_K / 32; ++j) {
            const float av_x = sqrtf(sum_sq(x + 32 * j, 32) / 32);
            for (int l = 0; l < 32; ++l) w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = make_qkx_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux,
                                        q4 ? -1.f : -0.5f, 0.1f, q4 ? 20 : 15, false, false);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < QK_K / 32; ++j) {
            ls[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j]));
            lm[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j]));
        }
        *dh = TO_F16(max_scale / 63.f);
        *dmh = TO_F16(max_min / 63.f);
    } else {
        float sw[QK_K / 32];
        const float sigma2 = 2 * sum_sq(x, QK_K) / QK_K;
        for (int j = 0; j < QK_K / 32; ++j) {
            imatrix_weights(qw + 32 * j, x + 32 * j, 32, sigma2, w);
            float sumw = 0;
            for (int l = 0; l < 32; ++l) sumw += w[l];
            sw[j] = sumw;
            scales[j] = make_qkx_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36,
                                        false, true);
        }
        *dh = TO_F16(make_qp_quants(QK_K / 32, 63, scales, ls, sw));
        *dmh = TO_F16(make_qp_quants(QK_K / 32, 63, mins, lm, sw));
    }
    quant_pack_scale_min_k4(ls, lm, sc12);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        quant_scale_min_k4(j, sc12, &sc, &m);
        const float d = F16(*dh) * sc;
        if (!d) continue;
        const float dm = F16(*dmh) * m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + ii] + dm) / d)));
    }
}

static void block_q4k(const float *x, block_q4_K *y, const float *qw)
{
    uint8_t L[QK_K];
    block_k45(x, 15, qw, y->scales, &y->d, &y->dmin, L);
    uint8_t *q = y->qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

static void block_q5k(const float *x, block_q5_K *y, const float *qw)
{
    uint8_t L[QK_K];
    block_k45(x, 31, qw, y->scales, &y->d, &y->dmin, L);
    uint8_t *ql = y->qs, m1 = 1, m2 = 2;
    memset(y->qh, 0, sizeof y->qh);
    for (int n = 0; n < QK_K; n += 64, ql += 32, m1 = (uint8_t)(m1 << 2), m2 = (uint8_t)(m2 << 2))
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                y->qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                y->qh[j] |= m2;
            }
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
}

static void block_q6k(const float *x, block_q6_K *y, const float *qw)
{
    int8_t L[QK_K];
    float scales[QK_K / 16], max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, qw ? qw + 16 * ib : NULL);
        if (fabsf(scales[ib]) > max_abs_scale) {
            max_abs_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -128.f / max_scale;
    y->d = TO_F16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib)
        y->scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = F16(y->d) * y->scales[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii)
            L[16 * j + ii] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + ii] / d))) + 32);
    }
    uint8_t *ql = y->ql, *qh = y->qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
            ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
            ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
            qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
}

/* One row of a K type; qw NULL or [n]. */
static void row_k(kvi_type t, const float *x, uint8_t *y, int64_t n, const float *qw)
{
    const size_t bb = quant_block_bytes(t);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, y += bb) {
        const float *w = qw ? qw + QK_K * i : NULL;
        switch (t) {
        case KVI_TYPE_Q2_K:
            if (w)
                block_q2k_imatrix(x, (block_q2_K *)y, w);
            else
                block_q2k_ref(x, (block_q2_K *)y);
            break;
        case KVI_TYPE_Q3_K: block_q3k(x, (block_q3_K *)y, w); break;
        case KVI_TYPE_Q4_K: block_q4k(x, (block_q4_K *)y, w); break;
        case KVI_TYPE_Q5_K: block_q5k(x, (block_q5_K *)y, w); break;
        default: block_q6k(x, (block_q6_K *)y, w); break;
        }
    }
}

/* ---- dispatch -------------------------------------------------------------- */

bool quant_ggml_supported(kvi_type t)
{
    switch (t) {
    case KVI_TYPE_F32:
    case KVI_TYPE_F16:
    case KVI_TYPE_BF16:
    case KVI_TYPE_Q4_0:
    case KVI_TYPE_Q4_1:
    case KVI_TYPE_Q5_0:
    case KVI_TYPE_Q5_1:
    case KVI_TYPE_Q8_0:
    case KVI_TYPE_Q2_K:
    case KVI_TYPE_Q3_K:
    case KVI_TYPE_Q4_K:
    case KVI_TYPE_Q5_K:
    case KVI_TYPE_Q6_K:
    case KVI_TYPE_IQ4_NL:
    case KVI_TYPE_IQ4_XS:
    case KVI_TYPE_MXFP4: return true;
    default: return false;
    }
}

static void one_row(kvi_type t, const float *x, uint8_t *y, int64_t n, const float *qw)
{
    switch (t) {
    case KVI_TYPE_F32: memcpy(y, x, (size_t)n * 4); break;
    case KVI_TYPE_F16:
        for (int64_t j = 0; j < n; j++) {
            const quant_f16 h = TO_F16(x[j]);
            memcpy(y + 2 * j, &h, 2);
        }
        break;
    case KVI_TYPE_BF16:
        for (int64_t j = 0; j < n; j++) {
            const quant_bf16 h = quant_f32_to_bf16(x[j]);
            memcpy(y + 2 * j, &h, 2);
        }
        break;
    case KVI_TYPE_Q8_0: row_q8_0(x, (block_q8_0 *)y, n); break;
    case KVI_TYPE_MXFP4: row_mxfp4(x, (block_mxfp4 *)y, n); break;
    case KVI_TYPE_IQ4_NL:
    case KVI_TYPE_IQ4_XS: row_iq4(t, x, y, n, qw); break;
    case KVI_TYPE_Q4_0:
    case KVI_TYPE_Q4_1:
    case KVI_TYPE_Q5_0:
    case KVI_TYPE_Q5_1: row_q45(t, x, y, n, qw); break;
    default: row_k(t, x, y, n, qw); break;
    }
}

size_t quant_ggml_rows(kvi_type t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                       const float *imatrix)
{
    const size_t rb = quant_row_bytes(t, n_per_row);
    if (!quant_ggml_supported(t) || rb == 0 || nrows < 0) return 0;
    for (int64_t r = 0; r < nrows; r++)
        one_row(t, src + r * n_per_row, (uint8_t *)dst + (size_t)r * rb, n_per_row, imatrix);
    return (size_t)nrows * rb;
}
