/*
 * test_actq.c — the SIMD activation quantisers and F32 -> F16 rows
 * (actq.h) give the scalar reference's bytes exactly, on every ISA the
 * CPU has: random rows of many magnitudes and the edge cases (all equal, ties of
 * rounding and of the largest magnitude, subnormal, huge, negative zero, zero
 * blocks, infinities, NaN); F16 rows over random bit patterns, every exponent with
 * the rounding-boundary mantissas, every tail length and a misaligned destination.
 *
 * KVI_ACTQ_EXHAUSTIVE=1 also checks the row conversion on all 2^32 bit patterns
 * (about a minute per ISA in a Release build).
 */
#include "kvinfer.h"
#include "kernels/kernels.h"
#include "kernels/actq.h"
#include "kernels/q8.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_ACT 1024 /* inputs per case: 32 kern_q8a blocks or 4 kern_q8k blocks */

/* Fills x [N_ACT] with case c; returns its name. */
static const char *fill_case(int c, float *x, uint64_t *rs)
{
    static const float scales[] = { 1.0f, 1e-3f, 1e3f, 1e-20f, 1e20f };
    switch (c) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
        for (int i = 0; i < N_ACT; i++) x[i] = trand_normal(rs) * scales[c];
        return "normal * scale";
    case 5:
        for (int i = 0; i < N_ACT; i++) x[i] = ldexpf(trand_normal(rs), (int)(trand_u64(rs) % 61) - 30);
        return "mixed magnitudes";
    case 6:
        for (int i = 0; i < N_ACT; i++) x[i] = (i / 32) % 2 ? -0.37f : 0.37f;
        return "all equal";
    case 7: /* amax 127: d = 1, levels x exactly, halves are ties */
        for (int i = 0; i < N_ACT; i++) x[i] = (float)((int)(trand_u64(rs) % 253) - 126) + 0.5f;
        for (int i = 0; i < N_ACT; i += 32) x[i + (int)(trand_u64(rs) % 32)] = 127.0f;
        return "rounding ties";
    case 8: /* +v and -v both of the largest magnitude: the first one sets the sign */
        for (int i = 0; i < N_ACT; i++) x[i] = trand_normal(rs);
        for (int b = 0; b < N_ACT; b += 256) {
            const float v = (b / 256) % 2 ? 9.0f : -9.0f;
            const int p = b + 3 + (int)(trand_u64(rs) % 100);
            x[p] = v;
            x[b + 130 + (int)(trand_u64(rs) % 100)] = -v;
            /* and one within the same 8 or 16 lanes */
            x[(b / 256) % 2 ? p + 1 + (int)(trand_u64(rs) % 4) : p - 1 - (int)(trand_u64(rs) % 3)] = -v;
        }
        return "largest-magnitude ties";
    case 9:
        for (int i = 0; i < N_ACT; i++) x[i] = trand_normal(rs) * 1e-41f;
        return "subnormal";
    case 10:
        for (int i = 0; i < N_ACT; i++)
            x[i] = f32_of_bits((uint32_t)(trand_u64(rs) % 200) | (trand_u64(rs) % 2) << 31);
        return "a few subnormal steps";
    case 11:
        for (int i = 0; i < N_ACT; i++) x[i] = trand_normal(rs) * 1e-37f;
        return "around FLT_MIN";
    case 12:
        for (int i = 0; i < N_ACT; i++)
            x[i] = (trand_u64(rs) % 2 ? 1.0f : -1.0f) * (3.0e38f + trand_uniform(rs) * 3e37f);
        return "huge";
    case 13:
        for (int i = 0; i < N_ACT; i++) x[i] = i % 3 ? -0.0f : 0.0f;
        return "signed zeros";
    case 14: /* zero blocks among random ones */
        for (int i = 0; i < N_ACT; i++) x[i] = (i / 256) % 2 || (i / 32) % 3 == 0 ? -0.0f : trand_normal(rs);
        return "zero blocks";
    case 15:
        for (int i = 0; i < N_ACT; i++) x[i] = trand_normal(rs);
        for (int i = 0; i < N_ACT; i += 37) x[i] = i % 2 ? INFINITY : -INFINITY;
        return "infinities";
    case 16:
        for (int i = 0; i < N_ACT; i++) x[i] = trand_normal(rs);
        for (int i = 5; i < N_ACT; i += 41)
            x[i] = f32_of_bits(0x7fc00000u | (uint32_t)(trand_u64(rs) % 0x400000u) | (uint32_t)(i % 2) << 31);
        return "NaN";
    case 17:
        for (int i = 0; i < N_ACT; i++) x[i] = i % 7 ? 1.0f / 3.0f : 2.0f / 3.0f;
        return "repeating";
    default: return NULL;
    }
}

static void quant_at(kern_isa isa, kvi_type wt, const float *x, void *dst)
{
    kern_isa_set(isa);
    kern_q8_quantize_act(wt, x, dst, N_ACT);
}

static void test_act(void)
{
    const kern_isa best = kern_isa_detect();
    float *x = malloc(N_ACT * sizeof(float));
    const size_t rb = sizeof(kern_q8a) * (N_ACT / 32) > sizeof(kern_q8k) * (N_ACT / QK_K)
                          ? sizeof(kern_q8a) * (N_ACT / 32)
                          : sizeof(kern_q8k) * (N_ACT / QK_K);
    uint8_t *ref = malloc(rb), *got = malloc(rb);
    uint64_t rs = 0x5eed;
    int cases = 0;
    for (int c = 0;; c++) {
        const char *name = fill_case(c, x, &rs);
        if (!name) break;
        cases++;
        const kvi_type wts[2] = { KVI_TYPE_Q8_0, KVI_TYPE_Q6_K };
        for (int w = 0; w < 2; w++) {
            const size_t bytes = kern_q8_act_row_bytes(wts[w], N_ACT);
            memset(ref, 0xAB, rb);
            quant_at(KVI_ISA_SCALAR, wts[w], x, ref);
            for (int isa = 1; isa <= (int)best; isa++) {
                memset(got, 0xCD, rb);
                quant_at((kern_isa)isa, wts[w], x, got);
                CHECK(memcmp(ref, got, bytes) == 0, "case %d (%s), %s blocks, %s: bytes differ from scalar",
                      c, name, w ? "q8k" : "q8a", kern_isa_str((kern_isa)isa));
                /* the per-ISA function itself, not only through the dispatch */
                memset(got, 0xEF, rb);
                if (isa == KVI_ISA_AVX512 && w == 0) kern_actq_a_avx512(x, (kern_q8a *)got, N_ACT / 32);
                if (isa == KVI_ISA_AVX512 && w == 1) kern_actq_k_avx512(x, (kern_q8k *)got, N_ACT / QK_K);
                if (isa == KVI_ISA_AVX2 && w == 0) kern_actq_a_avx2(x, (kern_q8a *)got, N_ACT / 32);
                if (isa == KVI_ISA_AVX2 && w == 1) kern_actq_k_avx2(x, (kern_q8k *)got, N_ACT / QK_K);
                CHECK(memcmp(ref, got, bytes) == 0, "case %d (%s), %s blocks, direct %s: bytes differ", c,
                      name, w ? "q8k" : "q8a", kern_isa_str((kern_isa)isa));
            }
        }
    }
    /* bulk: 2^20 random blocks, so that even rare one-ulp slips of a scale (amax * (1 / 127)
     * for amax / 127 changes about 13 blocks in a million) show */
    enum { CHUNK = 1 << 15 };
    float *bx = malloc(CHUNK * sizeof(float));
    uint8_t *br = malloc(sizeof(kern_q8a) * (CHUNK / 32)), *bg = malloc(sizeof(kern_q8a) * (CHUNK / 32));
    int bulk_bad[3] = { 0, 0, 0 };
    for (int ch = 0; ch < (1 << 20) / (CHUNK / 32); ch++) {
        const float sc = ldexpf(1.0f, (int)(trand_u64(&rs) % 41) - 20);
        for (int i = 0; i < CHUNK; i++) bx[i] = (trand_uniform(&rs) - 0.5f) * sc;
        for (int w = 0; w < 2; w++) {
            const kvi_type wt = w ? KVI_TYPE_Q6_K : KVI_TYPE_Q8_0;
            const size_t bytes = kern_q8_act_row_bytes(wt, CHUNK);
            kern_isa_set(KVI_ISA_SCALAR);
            kern_q8_quantize_act(wt, bx, br, CHUNK);
            for (int isa = 1; isa <= (int)best; isa++) {
                kern_isa_set((kern_isa)isa);
                kern_q8_quantize_act(wt, bx, bg, CHUNK);
                bulk_bad[isa] += memcmp(br, bg, bytes) != 0;
            }
        }
    }
    for (int isa = 1; isa <= (int)best; isa++)
        CHECK(bulk_bad[isa] == 0, "%s: bulk random, %d chunks differ", kern_isa_str((kern_isa)isa),
              bulk_bad[isa]);
    free(bx);
    free(br);
    free(bg);

    /* the cases are not degenerate: the random one has levels of both signs near +-127 */
    fill_case(0, x, &rs);
    quant_at(KVI_ISA_SCALAR, KVI_TYPE_Q8_0, x, ref);
    const kern_q8a *a = (const kern_q8a *)ref;
    int lo = 0, hi = 0;
    for (int i = 0; i < 32; i++) {
        lo += a->qs[i] <= -60;
        hi += a->qs[i] >= 60;
    }
    CHECK(cases == 18 && lo > 0 && hi > 0 && a->d > 0.0f, "cases %d, levels %d %d", cases, lo, hi);
    kern_isa_set(best);
    free(x);
    free(ref);
    free(got);
}

/* src [n] through the dispatch at isa and directly, both against the scalar. */
static int f16_rows_differ(kern_isa isa, const float *src, int64_t n, uint8_t *buf, int misalign)
{
    uint8_t *dst = buf + misalign;
    int bad = 0;
    for (int way = 0; way < 2; way++) {
        memset(buf, 0x5A, (size_t)(2 * n + 4));
        if (way == 0) {
            kern_isa_set(isa);
            kern_f32_to_f16_row(src, dst, n);
        } else if (isa == KVI_ISA_AVX512) {
            kern_f16_row_avx512(src, dst, n);
        } else if (isa == KVI_ISA_AVX2) {
            kern_f16_row_avx2(src, dst, n);
        } else {
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            const quant_f16 want = quant_f32_to_f16(src[i]);
            quant_f16 h;
            memcpy(&h, dst + 2 * i, 2);
            if (h != want && bad++ < 3) {
                uint32_t u;
                memcpy(&u, &src[i], 4);
                fprintf(stderr, "  %s: f32 %08x -> %04x, scalar %04x\n", kern_isa_str(isa), u, h, want);
            }
        }
        /* nothing written past the row */
        for (int64_t i = 2 * n + misalign; i < 2 * n + 4; i++) bad += buf[i] != 0x5A;
        for (int i = 0; i < misalign; i++) bad += buf[i] != 0x5A;
    }
    return bad;
}

static void test_f16_rows(void)
{
    const kern_isa best = kern_isa_detect();
    enum { N = 4096 };
    float *src = malloc(N * sizeof(float));
    uint8_t *buf = malloc(2 * N + 4);
    uint64_t rs = 0xf16;
    static const uint32_t low[] = {
        0,      1,      0xfff,    0x1000,   0x1001,   0x1fff,   0x2000,   0x2fff,
        0x3000, 0x3001, 0x7fffff, 0x7fe000, 0x7ff000, 0x7fefff, 0x400000, 0x401000
    };
    for (int isa = 0; isa <= (int)best; isa++) {
        /* uniformly random bit patterns: every class, NaN payloads included */
        int bad = 0;
        for (int rep = 0; rep < 64; rep++) {
            for (int i = 0; i < N; i++) src[i] = f32_of_bits((uint32_t)trand_u64(&rs));
            bad += f16_rows_differ((kern_isa)isa, src, N, buf, rep % 2);
        }
        CHECK(bad == 0, "%s: random bit patterns, %d differ", kern_isa_str((kern_isa)isa), bad);
        /* every exponent and sign, with the tie / carry mantissas and random ones */
        bad = 0;
        for (uint32_t e = 0; e < 256; e++) {
            int i = 0;
            for (uint32_t s = 0; s < 2; s++)
                for (int k = 0; k < (int)(sizeof low / sizeof low[0]); k++)
                    src[i++] = f32_of_bits(s << 31 | e << 23 | low[k]);
            while (i < N) src[i++] = f32_of_bits((uint32_t)(trand_u64(&rs) & 0x807fffffu) | e << 23);
            bad += f16_rows_differ((kern_isa)isa, src, N, buf, (int)(e % 2));
        }
        CHECK(bad == 0, "%s: per-exponent patterns, %d differ", kern_isa_str((kern_isa)isa), bad);
        /* every tail length */
        bad = 0;
        for (int n = 0; n <= 70; n++) {
            for (int i = 0; i < n; i++) src[i] = trand_normal(&rs) * 1e3f;
            bad += f16_rows_differ((kern_isa)isa, src, n, buf, n % 2);
        }
        CHECK(bad == 0, "%s: tails, %d differ", kern_isa_str((kern_isa)isa), bad);
        /* the KV cache's F16 write (quant_quantize_row) gives the same bytes */
        for (int i = 0; i < 768; i++) src[i] = trand_normal(&rs);
        kern_isa_set((kern_isa)isa);
        CHECK(quant_quantize_row(KVI_TYPE_F16, src, buf, 768) == KVI_OK, "quantize_row");
        bad = 0;
        for (int i = 0; i < 768; i++) {
            const quant_f16 want = quant_f32_to_f16(src[i]);
            bad += memcmp(buf + 2 * i, &want, 2) != 0;
        }
        CHECK(bad == 0, "%s: quant_quantize_row F16, %d differ", kern_isa_str((kern_isa)isa), bad);
    }
    /* NaN payloads: quiet NaN, sign and top 10 payload bits kept (as the scalar) */
    const float nan_in[2] = { f32_of_bits(0xff812345u), f32_of_bits(0x7fc02000u) };
    for (int isa = 0; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        kern_f32_to_f16_row(nan_in, buf, 2);
        quant_f16 h[2];
        memcpy(h, buf, 4);
        CHECK(h[0] == 0xfe09 && h[1] == 0x7e01, "%s: NaN payloads %04x %04x", kern_isa_str((kern_isa)isa),
              h[0], h[1]);
    }
    if (getenv("KVI_ACTQ_EXHAUSTIVE")) {
        for (int isa = 1; isa <= (int)best; isa++) {
            int64_t bad = 0;
            for (uint64_t b = 0; b < (1ull << 32); b += N) {
                for (int i = 0; i < N; i++) src[i] = f32_of_bits((uint32_t)(b + (uint64_t)i));
                bad += f16_rows_differ((kern_isa)isa, src, N, buf, 0);
            }
            printf("exhaustive %s: %lld of 2^32 differ\n", kern_isa_str((kern_isa)isa), (long long)bad);
            CHECK(bad == 0, "%s: exhaustive, %lld differ", kern_isa_str((kern_isa)isa), (long long)bad);
        }
    }
    kern_isa_set(best);
    free(src);
    free(buf);
}

int main(void)
{
    printf("detected ISA: %s\n", kern_isa_str(kern_isa_detect()));
    test_act();
    test_f16_rows();
    return test_main_end();
}
