/*
 * test_quant_iq.c — the grid-based low-bit types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S): their tables, block decoding and integer products.
 *
 *  - the grids and sign tables (formats/quant_grids.c) against properties of
 *    ggml's tables (value sets, sizes, distinct entries, even sign counts) and
 *    entries as printed in ggml-common.h (first, some inner, last);
 *  - type names, block sizes, the Q8_K activation type;
 *  - dequantisation of hand-built blocks against values worked out by hand from
 *    the layouts of ../shared/golden/quant/README-lowbit.md;
 *  - kern_q8_dot_ref against a double-precision dot of the dequantised weights and
 *    activations (it is exact up to the f32 steps of the contract);
 *  - the AVX-512 kernel (kern_qgemm_iq_avx512, sub-ranges, 1..18, 33, 48, 63 rows:
 *    the one-row path below KVI_IQ_TILE_MIN_ROWS, the 16-row tiles from there,
 *    outputs outside untouched) and kern_matmul on every ISA the CPU has, 1..64
 *    rows, on 1, 2 and 3 threads, against kern_qgemm_ref, bit for bit, on random
 *    blocks (every byte pattern is valid).
 */
#include "testutil.h"

#include "formats/quant.h"
#include "formats/quant_grids.h"
#include "formats/quant_iq.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "kernels/qgemm_iq.h"
#include "base/cpu.h"
#include "base/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kvi_type TYPES[] = { KVI_TYPE_IQ2_XXS, KVI_TYPE_IQ2_XS, KVI_TYPE_IQ2_S, KVI_TYPE_IQ3_XXS,
                                  KVI_TYPE_IQ3_S };
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

static bool byte_in(uint8_t b, const uint8_t *set, int n)
{
    for (int i = 0; i < n; i++)
        if (b == set[i]) return true;
    return false;
}

/* entry e of a grid of width-byte entries (8: uint64, 4: uint32) */
static uint64_t entry(const void *g, int width, int e)
{
    return width == 8 ? ((const uint64_t *)g)[e] : ((const uint32_t *)g)[e];
}

/* every byte of every entry in set; entries pairwise distinct */
static bool grid_ok(const void *g, int width, int n, const uint8_t *set, int ns)
{
    for (int e = 0; e < n; e++) {
        const uint64_t v = entry(g, width, e);
        for (int j = 0; j < width; j++)
            if (!byte_in((uint8_t)(v >> (8 * j)), set, ns)) return false;
        for (int f = 0; f < e; f++)
            if (entry(g, width, f) == v) return false;
    }
    return true;
}

static void test_tables(void)
{
    static const uint8_t iq2[] = { 8, 25, 43 }, iq3xxs[] = { 4, 12, 20, 28, 36, 44, 52, 62 },
                         iq3s[] = { 1, 3, 5, 7, 9, 11, 13, 15 };
    CHECK(grid_ok(quant_iq2xxs_grid, 8, 256, iq2, 3), "iq2xxs_grid: bytes or distinctness");
    CHECK(grid_ok(quant_iq2xs_grid, 8, 512, iq2, 3), "iq2xs_grid: bytes or distinctness");
    CHECK(grid_ok(quant_iq2s_grid, 8, 1024, iq2, 3), "iq2s_grid: bytes or distinctness");
    CHECK(grid_ok(quant_iq3xxs_grid, 4, 256, iq3xxs, 8), "iq3xxs_grid: bytes or distinctness");
    CHECK(grid_ok(quant_iq3s_grid, 4, 512, iq3s, 8), "iq3s_grid: bytes or distinctness");
    /* entries as ggml-common.h prints them */
    static const uint64_t first_iq2[4] = { 0x0808080808080808, 0x080808080808082b, 0x0808080808081919,
                                           0x0808080808082b08 };
    for (int i = 0; i < 4; i++)
        CHECK(quant_iq2xxs_grid[i] == first_iq2[i] && quant_iq2xs_grid[i] == first_iq2[i] &&
                  quant_iq2s_grid[i] == first_iq2[i],
              "iq2 grids: entry %d", i);
    CHECK(quant_iq2xxs_grid[254] == 0x2b2b2b0819190808 && quant_iq2xxs_grid[255] == 0x2b2b2b1908081908,
          "iq2xxs_grid: last entries");
    CHECK(quant_iq2xs_grid[508] == 0x2b2b2b2b082b2b08 && quant_iq2xs_grid[510] == 0x2b2b2b2b2b190819 &&
              quant_iq2xs_grid[511] == 0x2b2b2b2b2b2b2b2b,
          "iq2xs_grid: last entries");
    CHECK(quant_iq2s_grid[7] == 0x080808080819192b && quant_iq2s_grid[27] == 0x080808082b081919 &&
              quant_iq2s_grid[1023] == 0x2b2b2b2b2b2b2b2b,
          "iq2s_grid: entries 7, 27, 1023");
    CHECK(quant_iq3xxs_grid[0] == 0x04040404 && quant_iq3xxs_grid[17] == 0x040c142c &&
              quant_iq3xxs_grid[63] == 0x0c04141c && quant_iq3xxs_grid[127] == 0x141c0c24 &&
              quant_iq3xxs_grid[255] == 0x3e341c04,
          "iq3xxs_grid: entries 0, 17, 63, 127, 255");
    CHECK(quant_iq3s_grid[3] == 0x0101010b && quant_iq3s_grid[4] == 0x0101010f &&
              quant_iq3s_grid[510] == 0x0f0d0703 && quant_iq3s_grid[511] == 0x0f0f0101,
          "iq3s_grid: entries 3, 4, 510, 511");
    bool ks = true;
    for (int i = 0; i < 128; i++) {
        const uint8_t v = quant_ksigns_iq2xs[i];
        ks = ks && (v & 127) == i && __builtin_popcount(v) % 2 == 0;
    }
    CHECK(ks && quant_ksigns_iq2xs[1] == 129 && quant_ksigns_iq2xs[127] == 255, "ksigns_iq2xs");
    for (int j = 0; j < 8; j++) CHECK(quant_kmask_iq2xs[j] == 1u << j, "kmask_iq2xs[%d]", j);
}

static void test_types(void)
{
    static const struct {
        const char *name;
        kvi_type t;
        int id;
        size_t bytes;
    } want[] = { { "iq2_xxs", KVI_TYPE_IQ2_XXS, 16, 66 },
                 { "iq2_xs", KVI_TYPE_IQ2_XS, 17, 74 },
                 { "iq3_xxs", KVI_TYPE_IQ3_XXS, 18, 98 },
                 { "iq3_s", KVI_TYPE_IQ3_S, 21, 110 },
                 { "iq2_s", KVI_TYPE_IQ2_S, 22, 82 } };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        kvi_type t = KVI_TYPE_F32;
        CHECK((int)want[i].t == want[i].id, "%s: ggml id %d", want[i].name, (int)want[i].t);
        CHECK(kvi_type_from_name(want[i].name, &t) == 0 && t == want[i].t, "%s: parse", want[i].name);
        CHECK(!strcmp(kvi_type_name(want[i].t), want[i].name), "%s: name", want[i].name);
        CHECK(quant_block_elems(want[i].t) == 256 && quant_block_bytes(want[i].t) == want[i].bytes,
              "%s: block size", want[i].name);
        CHECK(quant_row_bytes(want[i].t, 768) == 3 * want[i].bytes && quant_row_bytes(want[i].t, 100) == 0,
              "%s: row bytes", want[i].name);
        CHECK(kern_q8_act_type(want[i].t) == KVI_TYPE_Q8_K, "%s: activations Q8_K", want[i].name);
    }
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f16(uint8_t *p, float v)
{
    const quant_f16 h = quant_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* y [0..n) against want, with the remaining values of the block all `rest` */
static void expect(const char *what, const float *y, const float *want, int n, int from, float rest)
{
    bool ok = true;
    for (int i = 0; i < n; i++)
        if (y[i] != want[i]) {
            CHECK(false, "%s: value %d is %g, want %g", what, i, y[i], want[i]);
            ok = false;
        }
    for (int i = from; ok && i < 256; i++)
        if (y[i] != rest) {
            CHECK(false, "%s: value %d is %g, want %g", what, i, y[i], rest);
            ok = false;
        }
    CHECK(ok, "%s", what);
}

/* Blocks written byte by byte after README-lowbit.md; values worked out by hand. */
static void test_dequant_known(void)
{
    uint8_t b[128];
    float y[256];

    /* IQ2_XXS: d 1; sub-block 0: indices 0, 1, 255, 2; sign indices 1, 0, 0, 127; s 3
     * (scale 3.5 / 4 = 0.875); the other sub-blocks index 0, s 0 (scale 0.125) */
    memset(b, 0, sizeof b);
    put_f16(b, 1.0f);
    b[2] = 0, b[3] = 1, b[4] = 255, b[5] = 2;
    put_u32(b + 6, 1u | 127u << 21 | 3u << 28);
    quant_dequant_row(KVI_TYPE_IQ2_XXS, b, y, 256);
    const float xxs[32] = { -7,     7,      7,       7,       7,  7,  7,      -7, 37.625, 7,      7,
                            7,      7,      7,       7,       7,  7,  21.875, 7,  7,      21.875, 37.625,
                            37.625, 37.625, -21.875, -21.875, -7, -7, -7,     -7, -7,     -7 };
    expect("iq2_xxs block", y, xxs, 32, 32, 1.0f);

    /* IQ2_XS: d 2; group 0: index 3, sign index 1; scales byte 0x52 (2.5 / 4 * 2 =
     * 1.25 for inputs 0..15, 5.5 / 4 * 2 = 2.75 for 16..31) */
    memset(b, 0, sizeof b);
    put_f16(b, 2.0f);
    b[2] = 3, b[3] = 1 << 1; /* u16: 3 | 1 << 9 */
    b[66] = 0x52;
    quant_dequant_row(KVI_TYPE_IQ2_XS, b, y, 256);
    float xs[32];
    for (int i = 0; i < 32; i++) xs[i] = i < 16 ? 10.0f : 22.0f;
    xs[0] = -10.0f, xs[1] = 53.75f, xs[7] = -10.0f;
    expect("iq2_xs block", y, xs, 32, 32, 2.0f);

    /* IQ2_S: d 1; group 0 index 7, group 1 index 1023 (low byte 255, qh bits 2..3 = 3);
     * sign bytes 0x01, 0x80; scales byte 0x10 (0.125 | 0.375) */
    memset(b, 0, sizeof b);
    put_f16(b, 1.0f);
    b[2] = 7, b[3] = 255, b[34] = 0x01, b[35] = 0x80, b[66] = 0x0c, b[74] = 0x10;
    quant_dequant_row(KVI_TYPE_IQ2_S, b, y, 256);
    float s2[32];
    for (int i = 0; i < 32; i++) s2[i] = i < 8 ? 1.0f : i < 16 ? 5.375f : 3.0f;
    s2[0] = -5.375f, s2[1] = 3.125f, s2[2] = 3.125f, s2[15] = -5.375f;
    expect("iq2_s block", y, s2, 32, 32, 1.0f);

    /* IQ3_XXS: d 1; entries 1 (20 4 4 4) and 255 (4 28 52 62), then 0; sign index 1;
     * s 2 (2.5 / 2 = 1.25); the other sub-blocks s 0 (0.25) */
    memset(b, 0, sizeof b);
    put_f16(b, 1.0f);
    b[2] = 1, b[3] = 255;
    put_u32(b + 66, 1u | 2u << 28);
    quant_dequant_row(KVI_TYPE_IQ3_XXS, b, y, 256);
    float x3[32];
    for (int i = 0; i < 32; i++) x3[i] = 5.0f;
    x3[0] = -25.0f, x3[5] = 35.0f, x3[6] = 65.0f, x3[7] = -77.5f;
    expect("iq3_xxs block", y, x3, 32, 32, 1.0f);

    /* IQ3_S: d 0.5; entries 4 (15 1 1 1) and 511 (low byte 255, qh bit 1: 1 1 15 15);
     * sign byte 0x02; scales byte 0x31 (sub-block 0: 3, sub-block 1: 7, others 1) */
    memset(b, 0, sizeof b);
    put_f16(b, 0.5f);
    b[2] = 4, b[3] = 255, b[66] = 0x02, b[74] = 0x02, b[106] = 0x31;
    quant_dequant_row(KVI_TYPE_IQ3_S, b, y, 256);
    float s3[64];
    for (int i = 0; i < 64; i++) s3[i] = i < 32 ? 1.5f : 3.5f;
    s3[0] = 22.5f, s3[1] = -1.5f, s3[6] = 22.5f, s3[7] = 22.5f;
    expect("iq3_s block", y, s3, 64, 64, 0.5f);
}

/* [n_out][n_in] random blocks (any byte pattern is valid) with finite f16 d. */
static uint8_t *random_matrix(kvi_type t, int64_t n_out, int64_t n_in, uint64_t *rs)
{
    const size_t rb = quant_row_bytes(t, n_in), bb = quant_block_bytes(t);
    uint8_t *w = malloc(rb * (size_t)n_out);
    for (size_t i = 0; i < rb * (size_t)n_out; i++) w[i] = (uint8_t)trand_u64(rs);
    for (size_t o = 0; o < rb * (size_t)n_out; o += bb)
        put_f16(w + o, (0.0005f + 0.01f * trand_uniform(rs)) * (trand_u64(rs) & 1 ? 1.0f : -1.0f));
    return w;
}

static float *random_x(int64_t n, uint64_t *rs)
{
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = trand_normal(rs);
    return x;
}

/* kern_q8_dot_ref against sum_i w_i * (dx_b * q_i) in double */
static void test_ref_vs_double(void)
{
    uint64_t rs = 0x1a2b;
    const int64_t n = 1024;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kvi_type t = TYPES[ti];
        uint8_t *w = random_matrix(t, 1, n, &rs);
        float *x = random_x(n, &rs), *wd = malloc((size_t)n * sizeof(float));
        kern_q8k *xq = malloc(kern_q8_act_row_bytes(t, n));
        kern_q8_quantize_act(t, x, xq, n);
        quant_dequant_row(t, w, wd, n);
        double s = 0, a = 0;
        for (int64_t i = 0; i < n; i++) {
            const double xv = (double)xq[i / QK_K].d * xq[i / QK_K].qs[i % QK_K];
            s += (double)wd[i] * xv;
            a += fabs((double)wd[i] * xv);
        }
        const float r = kern_q8_dot_ref(t, w, xq, n);
        CHECK(fabs(r - s) <= 1e-5 * a, "%s: reference dot %.9g, double %.9g", kvi_type_name(t), r, s);
        free(w);
        free(x);
        free(wd);
        free(xq);
    }
}

/* The AVX-512 kernel called directly, sub-ranges and row counts, sentinels around. */
static void test_avx512_direct(void)
{
    if (!cpu_features()->avx512_vnni) {
        CHECK(true, "no AVX-512 VNNI: kernel not run");
        return;
    }
    uint64_t rs = 0x5eed;
    const int64_t n_in = 768, n_out = 37, ldy = n_out + 3;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kvi_type t = TYPES[ti];
        uint8_t *w = random_matrix(t, n_out, n_in, &rs);
        const size_t xrb = kern_q8_act_row_bytes(t, n_in);
        uint8_t *xq = malloc(xrb * 64);
        for (int r = 0; r < 64; r++) {
            float *x = random_x(n_in, &rs);
            kern_q8_quantize_act(t, x, xq + (size_t)r * xrb, n_in);
            free(x);
        }
        const size_t sb = (KVI_QGEMM_SCRATCH(n_in) + 63) & ~(size_t)63;
        void *s1 = aligned_alloc(64, sb), *s2 = aligned_alloc(64, sb);
        const int64_t ranges[][2] = { { 0, n_out }, { 5, 21 }, { n_out - 1, n_out } };
        for (int ri = 0; ri < 3; ri++)
            for (int64_t nr = 1; nr <= 64; nr += nr < 18 ? 1 : 15) { /* 1..18, 33, 48, 63 */
                const size_t ny = (size_t)(nr + 1) * (size_t)ldy;
                float *y = malloc(ny * sizeof(float)), *yr = malloc(ny * sizeof(float));
                for (size_t i = 0; i < ny; i++) y[i] = yr[i] = -12345.0f;
                kern_qgemm_args a = { .type = t,
                                      .w = w,
                                      .w_rb = quant_row_bytes(t, n_in),
                                      .n_in = n_in,
                                      .j0 = ranges[ri][0],
                                      .j1 = ranges[ri][1],
                                      .xq = xq,
                                      .xq_rb = xrb,
                                      .n_rows = nr,
                                      .y = y,
                                      .ldy = ldy,
                                      .scratch = s1 };
                const int done = kern_qgemm_iq_avx512(&a);
                a.y = yr;
                a.scratch = s2;
                kern_qgemm_ref(&a);
                CHECK(done == 1 && memcmp(y, yr, ny * sizeof(float)) == 0,
                      "%s rows %lld range %d: AVX-512 bits differ from kern_qgemm_ref", kvi_type_name(t),
                      (long long)nr, ri);
                free(y);
                free(yr);
            }
        kern_qgemm_args bad = { .type = KVI_TYPE_Q4_K, .n_in = n_in, .scratch = s1 };
        CHECK(kern_qgemm_iq_avx512(&bad) == 0, "the IQ kernel declines Q4_K");
        free(s1);
        free(s2);
        free(w);
        free(xq);
    }
}

/* kern_matmul on every ISA the CPU has, without a pool and on 2 or 3 threads (an odd
 * split of the 16-output tiles), against kern_q8_dot_ref per output. */
static void test_matmul_isas(tpool *pool)
{
    uint64_t rs = 0x77;
    const int64_t n_in = 512, n_out = 45, n_rows = 64;
    const kern_isa best = kern_isa_detect();
    for (int ti = 0; ti < N_TYPES; ti++) {
        const kvi_type t = TYPES[ti];
        uint8_t *w = random_matrix(t, n_out, n_in, &rs);
        float *x = random_x(n_in * n_rows, &rs);
        const size_t xrb = kern_q8_act_row_bytes(t, n_in), rb = quant_row_bytes(t, n_in);
        uint8_t *xq = malloc(xrb * (size_t)n_rows);
        for (int64_t r = 0; r < n_rows; r++)
            kern_q8_quantize_act(t, x + r * n_in, xq + (size_t)r * xrb, n_in);
        float *want = malloc((size_t)(n_rows * n_out) * sizeof(float));
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t j = 0; j < n_out; j++)
                want[r * n_out + j] = kern_q8_dot_ref(t, w + (size_t)j * rb, xq + (size_t)r * xrb, n_in);
        const kern_tensor W = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
        float *y = malloc((size_t)(n_rows * n_out) * sizeof(float));
        for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
            kern_isa_set((kern_isa)isa);
            static const int64_t NR[] = { 1, 3, 4, 11, 12, 16, 21, 64 }; /* the row path and the tiles */
            for (int k = 0; k < 8; k++) {
                const int64_t nr = NR[k];
                memset(y, 0, (size_t)(n_rows * n_out) * sizeof(float));
                CHECK(kern_matmul(pool, &W, x, n_in, nr, y, n_out) == 0, "kern_matmul");
                CHECK(memcmp(y, want, (size_t)(nr * n_out) * sizeof(float)) == 0,
                      "%s on %s, %lld rows: kern_matmul differs from kern_q8_dot_ref", kvi_type_name(t),
                      kern_isa_str((kern_isa)isa), (long long)nr);
            }
        }
        kern_isa_set(best);
        free(w);
        free(x);
        free(xq);
        free(want);
        free(y);
    }
}

int main(void)
{
    test_tables();
    test_types();
    test_dequant_known();
    test_ref_vs_double();
    test_avx512_direct();
    test_matmul_isas(NULL);
    for (int th = 2; th <= 3; th++) {
        tpool *pool = tpool_create(th);
        CHECK(pool != NULL, "tpool_create");
        if (pool) test_matmul_isas(pool);
        tpool_free(pool);
    }
    return test_main_end();
}
