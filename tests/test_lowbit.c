/*
 * test_lowbit.c — the low-bit weight types IQ1_S, IQ1_M, TQ1_0, TQ2_0 and NVFP4
 * (formats/quant_iq1.h, quant_tq.h, quant_nvfp4.h; kernels/q8_lowbit.h).
 *
 * References, none of them kvinfer's own output:
 *   - iq1s_grid: an FNV-1a hash of its 16 KiB computed from gguf-py's packed copy
 *     (quants.py, IQ1_S.grid_hex, which equals ggml-common.h's table), plus
 *     properties (bytes -1/0/+1, entries ascending by their 2-bit codes);
 *   - blocks built from chosen values with README-lowbit.md's layouts and formulas
 *     (the TQ1_0 byte as ceil(256 V / 243), UE4M3 by its definition, subnormals
 *     included), dequantised by quant_dequant_row;
 *   - the integer products: the scalar reference against the f32 dot of the
 *     dequantised weights and activations (up to rounding), the AVX-512 and AVX2
 *     kernels and kern_matmul on every ISA against the scalar reference bit for bit, on random
 *     blocks and on extreme ones (largest levels and scales, +-127 activations);
 *   - llama.cpp's logits of ../shared/golden/quant/qtest-TYPE (tolerance 0.06,
 *     README-lowbit.md), by prefill and by token-by-token decode, which must also
 *     agree with each other bit for bit.
 */
#include "kvinfer.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "kernels/q8_lowbit.h"
#include "formats/quant.h"
#include "formats/quant_grid_iq1.h"
#include "formats/quant_iq1.h"
#include "formats/quant_nvfp4.h"
#include "formats/quant_tq.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kvi_type TYPES[] = { KVI_TYPE_IQ1_S, KVI_TYPE_IQ1_M, KVI_TYPE_TQ1_0, KVI_TYPE_TQ2_0,
                                  KVI_TYPE_NVFP4 };
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* ---- tables ------------------------------------------------------------- */

static void test_grid(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    bool bytes_ok = true, ascending = true;
    unsigned prev = 0;
    for (int k = 0; k < QUANT_IQ1S_NGRID; k++) {
        unsigned code = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t b = (uint8_t)(quant_iq1s_grid[k] >> (8 * j));
            h = (h ^ b) * 0x100000001b3ull;
            bytes_ok = bytes_ok && (b == 0xff || b == 0 || b == 1);
            code |= (unsigned)(((int8_t)b + 1) & 3) << (2 * j);
        }
        ascending = ascending && (k == 0 || code > prev);
        prev = code;
    }
    CHECK(h == 0x6703ed863501ae2eull, "iq1s_grid hash %016llx", (unsigned long long)h);
    CHECK(bytes_ok, "iq1s_grid: every byte is -1, 0 or +1");
    CHECK(ascending, "iq1s_grid: entries ascend by their packed codes");
    CHECK(quant_iq1s_grid[1] == 0xffffffffffffff01ull && quant_iq1s_grid[1000] == 0x00000000ffff00ffull &&
              quant_iq1s_grid[2047] == 0x0101010101010101ull,
          "iq1s_grid spot entries");
}

/* UE4M3 by its definition (bias 7, exponent field 0 subnormal), halved as ggml */
static double ue4m3_def(int x)
{
    if (x == 0x7f) return 0.0;
    const int e = (x >> 3) & 15, m = x & 7;
    return 0.5 * (e == 0 ? ldexp(m, -9) : ldexp(1.0 + m / 8.0, e - 7));
}

static void test_ue4m3(void)
{
    int bad = 0;
    for (int x = 0; x < 256; x++) bad += (double)quant_ue4m3_half((uint8_t)x) != ue4m3_def(x);
    CHECK(bad == 0, "UE4M3: %d bytes decode wrongly", bad);
    CHECK(quant_ue4m3_half(0x01) == 0x1p-10f && quant_ue4m3_half(0x07) == 7 * 0x1p-10f,
          "UE4M3 subnormals: m * 2^-9, halved");
    CHECK(quant_ue4m3_half(0x38) == 0.5f && quant_ue4m3_half(0x7e) == 224.0f &&
              quant_ue4m3_half(0x7f) == 0.0f,
          "UE4M3 1.0, 448 and 0x7f, halved");
}

/* ---- blocks from chosen values (README-lowbit.md layouts) -------------- */

static void put_f16(uint8_t *p, float v)
{
    const quant_f16 h = quant_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* t[i] in {0, 1, 2} for value i; returns the max |error| of the dequantised block */
static double tq_case(kvi_type ty, const int *t, float d)
{
    uint8_t blk[66] = { 0 };
    if (ty == KVI_TYPE_TQ2_0) {
        for (int i = 0; i < 256; i++) {
            const int c = i / 128, l = (i % 128) / 32, m = i % 32;
            blk[32 * c + m] |= (uint8_t)(t[i] << (2 * l));
        }
        put_f16(blk + 64, d);
    } else {
        /* byte = ceil(256 * V / 243), V the base-3 number of its digits, first most significant */
        for (int byte = 0; byte < 52; byte++) {
            int V = 0;
            for (int n = 0; n < 5; n++) {
                int v = -1;
                if (byte < 32)
                    v = 32 * n + byte;
                else if (byte < 48)
                    v = 160 + 16 * n + byte - 32;
                else if (n < 4)
                    v = 240 + 4 * n + byte - 48;
                V = 3 * V + (v >= 0 ? t[v] : 0);
            }
            blk[byte] = (uint8_t)((256 * V + 242) / 243);
        }
        put_f16(blk + 52, d);
    }
    float y[256];
    quant_dequant_row(ty, blk, y, 256);
    const float dq = quant_f16_to_f32(quant_f32_to_f16(d));
    double err = 0;
    for (int i = 0; i < 256; i++) err = fmax(err, fabs(y[i] - (t[i] - 1) * (double)dq));
    return err;
}

static void test_tq_blocks(void)
{
    uint64_t rs = 0x7a11u;
    int t[256];
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 256; i++) t[i] = k == 0 ? 2 : k == 1 ? 0 : (int)(trand_u64(&rs) % 3);
        CHECK(tq_case(KVI_TYPE_TQ1_0, t, 0.37f) == 0.0, "TQ1_0 block %d dequantises to its values", k);
        CHECK(tq_case(KVI_TYPE_TQ2_0, t, -1.5f) == 0.0, "TQ2_0 block %d dequantises to its values", k);
    }
}

/* IQ1_S / IQ1_M: random indices, scales and delta signs, packed by the layout */
static void test_iq1_blocks(void)
{
    uint64_t rs = 0x1a1u;
    for (int k = 0; k < 8; k++) {
        int idx[32], neg[32], s[16];
        for (int g = 0; g < 32; g++) {
            idx[g] = (int)(trand_u64(&rs) % 2048);
            neg[g] = (int)(trand_u64(&rs) & 1);
        }
        for (int h = 0; h < 16; h++) s[h] = (int)(trand_u64(&rs) % 8);
        const float d = 0.01f + 0.001f * (float)k;
        uint8_t b1[50] = { 0 }, b2[56] = { 0 };
        put_f16(b1, d);
        for (int ib = 0; ib < 8; ib++) {
            neg[4 * ib + 1] = neg[4 * ib + 2] = neg[4 * ib + 3] = neg[4 * ib]; /* IQ1_S: one sign per 32 */
            unsigned qh = (unsigned)s[2 * ib] << 12 | (unsigned)neg[4 * ib] << 15;
            for (int l = 0; l < 4; l++) {
                b1[2 + 4 * ib + l] = (uint8_t)idx[4 * ib + l];
                qh |= (unsigned)(idx[4 * ib + l] >> 8) << (3 * l);
            }
            b1[34 + 2 * ib] = (uint8_t)qh;
            b1[35 + 2 * ib] = (uint8_t)(qh >> 8);
        }
        /* IQ1_M: qh byte per 16 values, scales 3 bits per 16 values, d's bits on top */
        const quant_f16 dh = quant_f32_to_f16(d);
        unsigned sc[4] = { 0 };
        for (int g = 0; g < 32; g++) {
            b2[g] = (uint8_t)idx[g];
            b2[32 + g / 2] |= (uint8_t)(((idx[g] >> 8) | neg[g] << 3) << (4 * (g % 2)));
        }
        for (int ib = 0; ib < 8; ib++)
            sc[ib / 2] |= (unsigned)(s[2 * ib] | s[2 * ib + 1] << 3) << (6 * (ib % 2));
        for (int q = 0; q < 4; q++) {
            sc[q] |= (unsigned)((dh >> (4 * q)) & 15) << 12;
            b2[48 + 2 * q] = (uint8_t)sc[q];
            b2[49 + 2 * q] = (uint8_t)(sc[q] >> 8);
        }
        float y1[256], y2[256];
        quant_dequant_row(KVI_TYPE_IQ1_S, b1, y1, 256);
        quant_dequant_row(KVI_TYPE_IQ1_M, b2, y2, 256);
        const double dd = quant_f16_to_f32(dh);
        double e1 = 0, e2 = 0;
        for (int i = 0; i < 256; i++) {
            const int g = i / 8;
            const double v = (int8_t)(quant_iq1s_grid[idx[g]] >> (8 * (i % 8))) + (neg[g] ? -0.125 : 0.125);
            e1 = fmax(e1, fabs(y1[i] - dd * (2 * s[i / 32 * 2] + 1) * v));
            e2 = fmax(e2, fabs(y2[i] - dd * (2 * s[i / 16] + 1) * v));
        }
        CHECK(e1 == 0.0, "IQ1_S block %d: off by %g", k, e1);
        CHECK(e2 == 0.0, "IQ1_M block %d: off by %g", k, e2);
    }
}

static void test_nvfp4_blocks(void)
{
    static const double E2M1[8] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6 };
    uint64_t rs = 0xf4u;
    for (int k = 0; k < 8; k++) {
        uint8_t b[36];
        int code[64];
        for (int s = 0; s < 4; s++)
            b[s] = (uint8_t)(k == 0 ? (uint64_t)s + 1 : trand_u64(&rs) % 0x7f); /* k 0: subnormals */
        for (int i = 0; i < 64; i++) code[i] = (int)(trand_u64(&rs) & 15);
        for (int s = 0; s < 4; s++)
            for (int j = 0; j < 8; j++)
                b[4 + 8 * s + j] = (uint8_t)(code[16 * s + j] | code[16 * s + j + 8] << 4);
        float y[64];
        quant_dequant_row(KVI_TYPE_NVFP4, b, y, 64);
        double err = 0;
        for (int i = 0; i < 64; i++) {
            const double v = (code[i] & 8 ? -1 : 1) * E2M1[code[i] & 7] * 2.0 * ue4m3_def(b[i / 16]);
            err = fmax(err, fabs(y[i] - v));
        }
        CHECK(err == 0.0, "NVFP4 block %d: off by %g", k, err);
    }
}

/* ---- integer products ---------------------------------------------------- */

/* Random bytes with a small finite f16 scale where the type has one; extreme:
 * the largest levels and scales. */
static void fill_block(kvi_type t, uint8_t *p, uint64_t *rs, bool extreme)
{
    const size_t bb = quant_block_bytes(t);
    for (size_t i = 0; i < bb; i++) p[i] = extreme ? 0xff : (uint8_t)trand_u64(rs);
    const float d = 0.001f + trand_uniform(rs) * 0.05f;
    if (t == KVI_TYPE_IQ1_S) put_f16(p, d);
    if (t == KVI_TYPE_TQ1_0 || t == KVI_TYPE_TQ2_0) put_f16(p + bb - 2, d);
    if (t == KVI_TYPE_TQ2_0 && extreme) memset(p, 0xaa, 64); /* t = 2 everywhere */
    if (t == KVI_TYPE_TQ1_0 && extreme) memset(p, 0xf2, 52); /* 242 = digits 2 2 2 2 2 */
    if (t == KVI_TYPE_IQ1_M) {                               /* keep d's bits finite: exponent field < 31 */
        p[55] = (uint8_t)(p[55] & 0xbf);
        if (extreme) p[55] = 0x3f;
    }
    if (t == KVI_TYPE_IQ1_S && extreme) put_f16(p, 0.01f);
    if (t == KVI_TYPE_NVFP4 && !extreme)
        for (int s = 0; s < 4; s++) p[s] = (uint8_t)(p[s] % 0x78);
    if (t == KVI_TYPE_NVFP4 && extreme) {
        memset(p, 0x77, 4);
        memset(p + 4, 0xff, 32); /* level -12 */
    }
}

static uint8_t *make_w(kvi_type t, int64_t n_out, int64_t n_in, uint64_t *rs, bool extreme)
{
    const size_t rb = quant_row_bytes(t, n_in), bb = quant_block_bytes(t);
    uint8_t *w = malloc(rb * (size_t)n_out);
    for (size_t o = 0; o < rb * (size_t)n_out; o += bb) fill_block(t, w + o, rs, extreme);
    return w;
}

/* n_rows activation rows quantised for t; x kept [n_rows][n_in] */
static uint8_t *make_x(kvi_type t, int64_t n_rows, int64_t n_in, uint64_t *rs, bool extreme, float *x)
{
    const size_t xrb = kern_q8_act_row_bytes(t, n_in);
    uint8_t *xq = aligned_alloc(64, (xrb * (size_t)n_rows + 63) & ~(size_t)63);
    for (int64_t i = 0; i < n_rows * n_in; i++) x[i] = extreme ? ((i % 2) ? -1.0f : 1.0f) : trand_normal(rs);
    for (int64_t r = 0; r < n_rows; r++) kern_q8_quantize_act(t, x + r * n_in, xq + (size_t)r * xrb, n_in);
    return xq;
}

/* The activation row as floats: quants times their block's scale */
static void deq_act(kvi_type t, const uint8_t *xq, int64_t n, float *out)
{
    if (kern_q8_act_type(t) == KVI_TYPE_Q8_0) {
        const kern_q8a *a = (const kern_q8a *)xq;
        for (int64_t i = 0; i < n; i++) out[i] = a[i / 32].qs[i % 32] * a[i / 32].d;
    } else {
        const kern_q8k *k = (const kern_q8k *)xq;
        for (int64_t i = 0; i < n; i++) out[i] = k[i / 256].qs[i % 256] * k[i / 256].d;
    }
}

static void test_products(bool extreme)
{
    static const int64_t N_IN[] = { 256, 768, 2048 };
    uint64_t rs = extreme ? 0xe7u : 0x10b17u;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kvi_type t = TYPES[ti];
        for (int ni = 0; ni < 3; ni++) {
            const int64_t n_in = N_IN[ni], n_out = 37, n_rows = 5, ldy = n_out + 3;
            float *x = malloc(sizeof(float) * (size_t)(n_rows * n_in));
            float *wf = malloc(sizeof(float) * (size_t)n_in), *xf = malloc(sizeof(float) * (size_t)n_in);
            uint8_t *w = make_w(t, n_out, n_in, &rs, extreme), *xq = make_x(t, n_rows, n_in, &rs, extreme, x);
            const size_t rb = quant_row_bytes(t, n_in), xrb = kern_q8_act_row_bytes(t, n_in);
            /* the reference against the f32 math on the same quantised values */
            double worst = 0;
            for (int64_t j = 0; j < n_out; j++)
                for (int64_t r = 0; r < n_rows; r++) {
                    quant_dequant_row(t, w + (size_t)j * rb, wf, n_in);
                    deq_act(t, xq + (size_t)r * xrb, n_in, xf);
                    double e = 0;
                    for (int64_t i = 0; i < n_in; i++) e += (double)wf[i] * xf[i];
                    const float v = kern_q8_dot_ref(t, w + (size_t)j * rb, xq + (size_t)r * xrb, n_in);
                    worst = fmax(worst, fabs(v - e) / (abs_dot(wf, xf, n_in) + 1e-30));
                }
            CHECK(worst < 1e-5, "%s n_in %lld: reference off the f32 math by %g (relative)", kvi_type_name(t),
                  (long long)n_in, worst);
            /* the AVX-512 kernel against the reference, on a sub-range */
            float *y = malloc(sizeof(float) * (size_t)(n_rows * ldy)),
                  *yr = malloc(sizeof(float) * (size_t)(n_rows * ldy));
            for (int64_t i = 0; i < n_rows * ldy; i++) y[i] = yr[i] = -7.0f;
            const size_t sb = (KVI_QGEMM_SCRATCH(n_in) + 63) & ~(size_t)63;
            void *scr = aligned_alloc(64, sb);
            kern_qgemm_args a = { .type = t,
                                  .w = w,
                                  .w_rb = rb,
                                  .n_in = n_in,
                                  .j0 = 3,
                                  .j1 = n_out - 2,
                                  .xq = xq,
                                  .xq_rb = xrb,
                                  .n_rows = n_rows,
                                  .y = y,
                                  .ldy = ldy,
                                  .scratch = scr };
            const int done = kern_lowbit_gemm_avx512(&a);
            a.y = yr;
            kern_qgemm_ref(&a);
            if (done)
                CHECK(memcmp(y, yr, sizeof(float) * (size_t)(n_rows * ldy)) == 0,
                      "%s n_in %lld%s: AVX-512 bits differ from the reference", kvi_type_name(t),
                      (long long)n_in, extreme ? " (extreme)" : "");
            else
                printf("%s: no AVX-512 VNNI here, kernel not checked\n", kvi_type_name(t));
            for (int64_t nr = 1; done && nr <= 4; nr += 3) { /* decode: TQ2_0 reads the rows in place */
                kern_qgemm_args d1 = a;
                d1.n_rows = nr;
                for (int64_t i = 0; i < n_rows * ldy; i++) y[i] = -7.0f;
                d1.y = y;
                CHECK(kern_lowbit_gemm_avx512(&d1) == 1 &&
                          memcmp(y, yr, sizeof(float) * (size_t)(nr * ldy)) == 0,
                      "%s n_in %lld, %lld rows: AVX-512 bits differ from the reference", kvi_type_name(t),
                      (long long)n_in, (long long)nr);
            }
            if (kern_isa_detect() >= KVI_ISA_AVX2) {
                for (int64_t i = 0; i < n_rows * ldy; i++) y[i] = -7.0f;
                a.y = y;
                CHECK(kern_lowbit_gemm_avx2(&a) == 1 &&
                          memcmp(y, yr, sizeof(float) * (size_t)(n_rows * ldy)) == 0,
                      "%s n_in %lld%s: AVX2 bits differ from the reference", kvi_type_name(t),
                      (long long)n_in, extreme ? " (extreme)" : "");
            }
            /* kern_matmul on every ISA: the same bits */
            kern_tensor W = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
            float *ym[3];
            for (int isa = 0; isa < 3; isa++) {
                kern_isa_set((kern_isa)isa);
                ym[isa] = malloc(sizeof(float) * (size_t)(n_rows * n_out));
                CHECK(kern_matmul(NULL, &W, x, n_in, n_rows, ym[isa], n_out) == 0, "kern_matmul");
            }
            kern_isa_set(KVI_ISA_AVX512);
            for (int isa = 1; isa < 3; isa++)
                CHECK(memcmp(ym[0], ym[isa], sizeof(float) * (size_t)(n_rows * n_out)) == 0,
                      "%s n_in %lld: kern_matmul on %s differs from scalar", kvi_type_name(t),
                      (long long)n_in, kern_isa_str((kern_isa)isa));
            for (int isa = 0; isa < 3; isa++) free(ym[isa]);
            free(scr);
            free(y);
            free(yr);
            free(w);
            free(xq);
            free(x);
            free(wf);
            free(xf);
        }
    }
}

/* ---- llama.cpp's logits ---------------------------------------------------- */

static void test_golden(const char *type)
{
    char rel[128], grel[128];
    snprintf(rel, sizeof rel, "golden/quant/qtest-%s.gguf", type);
    snprintf(grel, sizeof grel, "golden/quant/qtest-%s.logits.json", type);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path(rel), NULL, &err);
    cJSON *j = load_json(shared_path(grel));
    CHECK(m && j, "load %s: %s", rel, err.msg);
    if (!m || !j) {
        kvi_model_free(m);
        cJSON_Delete(j);
        return;
    }
    const cJSON *jt = cJSON_GetObjectItem(j, "tokens");
    const int n = cJSON_GetArraySize(jt), nv = kvi_n_vocab(m);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) toks[i] = (int32_t)cJSON_GetArrayItem(jt, i)->valueint;
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 0, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    float *pre = e ? seq_logits(e, toks, n, false) : NULL, *dec = e ? seq_logits(e, toks, n, true) : NULL;
    if (pre && dec) {
        CHECK(memcmp(pre, dec, sizeof(float) * (size_t)n * (size_t)nv) == 0,
              "qtest-%s: token-by-token decode differs from prefill", type);
        const cJSON *ref = cJSON_GetObjectItem(j, "logits");
        const double ep = golden_rel_err(type, pre, ref, n, nv), ed = golden_rel_err(type, dec, ref, n, nv);
        CHECK(ep < 0.06 && ed < 0.06, "qtest-%s: relative error %g (prefill), %g (decode) >= 0.06", type, ep,
              ed);
        printf("qtest-%-6s vs llama.cpp: prefill %.5f, decode %.5f (tolerance 0.06)\n", type, ep, ed);
    }
    free(pre);
    free(dec);
    free(toks);
    kvi_engine_free(e);
    kvi_model_free(m);
    cJSON_Delete(j);
}

int main(void)
{
    test_grid();
    test_ue4m3();
    test_tq_blocks();
    test_iq1_blocks();
    test_nvfp4_blocks();
    test_products(false);
    test_products(true);
    const char *files[] = { "iq1_s", "iq1_m", "tq1_0", "tq2_0", "nvfp4" };
    for (int i = 0; i < 5; i++) test_golden(files[i]);
    return test_main_end();
}
