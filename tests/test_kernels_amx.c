/*
 * test_kernels_amx.c — the AMX-INT8 product (src/kernels_amx_q8.c) gives exactly
 * the scalar reference's bits (q8.h contract) for Q8_0 and Q4_0 weights in
 * both layouts (rows, R16), on random weights and activations: 16 to 700 input
 * rows (partial last row tiles, several input chunks), outputs not a multiple of
 * 16 (rows layout), 1 to 3 threads through kern_matmul, and with the AMX kernels
 * turned off (the VNNI kernels) the same bits again. Also the 16-row activation
 * tiles (kern_q8_tiles_row) against the rows they come from.
 *
 * Where the CPU or the OS gives no AMX the kernel checks are reported as skipped
 * (this project's CI machines have AMX; the product tests still run on the VNNI
 * and scalar paths).
 */
#include "kvinfer.h"
#include "base/cpu.h"
#include "kernels/tiles_amx.h"
#include "kernels/kernels.h"
#include "kernels/qgemm_amx.h"
#include "kernels/q8.h"
#include "formats/quant.h"
#include "testutil.h"
#include "kernels/r16_pack.h"

#include <stdlib.h>
#include <string.h>

/* Q8_0 rows of raw random levels (all of -128 .. 127) and finite f16 scales. */
static uint8_t *raw_q8_weights(int64_t n_out, int64_t n_in, uint64_t *rs)
{
    const size_t rb = quant_row_bytes(KVI_TYPE_Q8_0, n_in), bytes = rb * (size_t)n_out;
    uint8_t *w = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)trand_u64(rs);
    for (int64_t j = 0; j < n_out; j++)
        for (int64_t b = 0; b < n_in / 32; b++) {
            const quant_f16 d = quant_f32_to_f16(0.001f + 0.05f * trand_uniform(rs));
            memcpy(w + (size_t)j * rb + (size_t)b * 34, &d, 2);
        }
    return w;
}

static float *random_acts(int64_t n_rows, int64_t n_in, uint64_t *rs)
{
    float *x = malloc((size_t)(n_rows * n_in) * sizeof(float));
    for (int64_t r = 0; r < n_rows; r++) {
        const float s = 0.1f + 3.0f * trand_uniform(rs);
        for (int64_t i = 0; i < n_in; i++) x[r * n_in + i] = s * trand_normal(rs);
    }
    return x;
}

/* The kernel called directly against kern_qgemm_ref, both on the same quantised
 * activations; r16: the weights repacked first. */
/* Whether the tile registers are back in their initial state (XINUSE bits 17, 18). */
__attribute__((target("xsave"))) static bool tiles_released(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return (lo & (3u << 17)) == 0;
}

/* Outputs [j0, j1) of the n_out (y rows ldy apart, the rest must stay as they
 * were); raw: Q8_0 weights of raw random levels. */
static void test_range(kvi_type t, int64_t n_out, int64_t n_in, int64_t n_rows, bool r16, int64_t j0,
                       int64_t j1, int64_t ldy, bool raw, uint64_t *rs)
{
    const size_t rb = quant_row_bytes(t, n_in), xq_rb = kern_q8_act_row_bytes(t, n_in);
    uint8_t *w = raw ? raw_q8_weights(n_out, n_in, rs) : trand_weights(t, n_out, n_in, rs);
    uint8_t *wr = NULL;
    if (r16) {
        wr = aligned_alloc(64, (rb * (size_t)n_out + 63) & ~(size_t)63);
        memcpy(wr, w, rb * (size_t)n_out);
        kern_tensor T = { wr, t, n_in, n_out, KVI_LAYOUT_ROWS };
        CHECK(kern_r16_repack(&T, 2) == 0 && T.layout == KVI_LAYOUT_R16, "repack %s %lld x %lld",
              kvi_type_name(t), (long long)n_out, (long long)n_in);
    }
    float *x = random_acts(n_rows, n_in, rs);
    uint8_t *xq = malloc(xq_rb * (size_t)n_rows);
    const size_t xt_bytes = kern_q8_tiles_bytes(n_rows, n_in);
    uint8_t *xt = aligned_alloc(64, (xt_bytes + 63) & ~(size_t)63);
    memset(xt, 0x77, xt_bytes); /* every byte must be written: pads included */
    for (int64_t r = 0; r < n_rows; r++) {
        kern_q8_quantize_act(t, x + r * n_in, xq + (size_t)r * xq_rb, n_in);
        kern_q8_tiles_row(xq + (size_t)r * xq_rb, n_in, r, r == n_rows - 1, xt);
    }
    const size_t scr_bytes = (KVI_QGEMM_SCRATCH(n_in) + 63) & ~(size_t)63;
    void *scr = aligned_alloc(64, scr_bytes);
    const int64_t n_y = n_rows * ldy;
    float *y = malloc((size_t)n_y * sizeof(float)), *yr = malloc((size_t)n_y * sizeof(float));
    for (int64_t i = 0; i < n_y; i++) y[i] = yr[i] = -12345.0f;
    kern_qgemm_args a = { .type = t,
                          .w = w,
                          .w_rb = rb,
                          .n_in = n_in,
                          .j0 = j0,
                          .j1 = j1,
                          .xq = xq,
                          .xq_rb = xq_rb,
                          .n_rows = n_rows,
                          .y = yr,
                          .ldy = ldy,
                          .scratch = scr,
                          .xt = NULL };
    kern_qgemm_ref(&a);
    a.w = r16 ? wr : w;
    a.y = y;
    a.xt = xt;
    const int done = kern_qgemm_amx_q8(&a, r16);
    CHECK(done == 1, "AMX kernel declined %s %lld x %lld, %lld rows, %s", kvi_type_name(t), (long long)n_out,
          (long long)n_in, (long long)n_rows, r16 ? "R16" : "rows");
    CHECK(tiles_released(), "the kernel returned with tiles in use");
    if (done) {
        int64_t bad = 0, stray = 0; /* stray: a write outside [j0, j1) */
        for (int64_t i = 0; i < n_y; i++) {
            bad += memcmp(&y[i], &yr[i], sizeof(float)) != 0;
            stray += (i % ldy < j0 || i % ldy >= j1) && y[i] != -12345.0f;
        }
        CHECK(bad == 0 && stray == 0,
              "%s %lld x %lld [%lld, %lld), %lld rows, %s%s: %lld outputs differ from the reference, %lld "
              "written outside",
              kvi_type_name(t), (long long)n_out, (long long)n_in, (long long)j0, (long long)j1,
              (long long)n_rows, r16 ? "R16" : "rows", raw ? ", raw levels" : "", (long long)bad,
              (long long)stray);
    }
    /* the activation tiles hold the rows' quants and scales, zero past the last row */
    const int64_t nb = n_in / 32, n_tiles = (n_rows + 15) / 16;
    int64_t bad_tiles = 0;
    for (int64_t tt = 0; tt < n_tiles; tt++)
        for (int64_t b = 0; b < nb; b++)
            for (int m = 0; m < 16; m++) {
                const uint8_t *blk = xt + (size_t)(tt * nb + b) * KVI_Q8_TILE_BLOCK;
                const int64_t r = 16 * tt + m;
                if (r < n_rows) {
                    const kern_q8a *q = (const kern_q8a *)(xq + (size_t)r * xq_rb) + b;
                    bad_tiles += memcmp(blk + 32 * m, q->qs, 32) != 0 ||
                                 memcmp(blk + 512 + 4 * m, &q->d, 4) != 0 ||
                                 memcmp(blk + 576 + 4 * m, &q->sum, 4) != 0;
                } else {
                    static const uint8_t zero[32];
                    bad_tiles += memcmp(blk + 32 * m, zero, 32) != 0 ||
                                 memcmp(blk + 512 + 4 * m, zero, 4) != 0 ||
                                 memcmp(blk + 576 + 4 * m, zero, 4) != 0;
                }
            }
    CHECK(bad_tiles == 0, "%lld rows: %lld tile rows differ from the activation rows", (long long)n_rows,
          (long long)bad_tiles);
    free(w);
    free(wr);
    free(x);
    free(xq);
    free(xt);
    free(scr);
    free(y);
    free(yr);
}

static void test_direct(kvi_type t, int64_t n_out, int64_t n_in, int64_t n_rows, bool r16, uint64_t *rs)
{
    test_range(t, n_out, n_in, n_rows, r16, 0, n_out, n_out, false, rs);
}

/* kern_matmul with AMX on (several thread counts) and off: the same bits as the
 * reference (kern_matmul single-threaded on the scalar ISA). */
static void test_matmul(kvi_type t, int64_t n_out, int64_t n_in, int64_t n_rows, bool r16, uint64_t *rs)
{
    const size_t rb = quant_row_bytes(t, n_in), n_y = (size_t)(n_rows * n_out);
    uint8_t *w = trand_weights(t, n_out, n_in, rs);
    kern_tensor W = { w, t, n_in, n_out, KVI_LAYOUT_ROWS };
    float *x = random_acts(n_rows, n_in, rs);
    float *yref = malloc(n_y * sizeof(float)), *y = malloc(n_y * sizeof(float));
    const kern_isa isa0 = kern_isa_active();
    kern_isa_set(KVI_ISA_SCALAR);
    kern_matmul(NULL, &W, x, n_in, n_rows, yref, n_out);
    kern_isa_set(isa0);
    if (r16) CHECK(kern_r16_repack(&W, 1) == 0, "repack %s", kvi_type_name(t));
    (void)rb;
    for (int amx = 1; amx >= 0; amx--) {
        cpu_amx_set(amx);
        for (int th = 1; th <= 3; th++) {
            tpool *pool = tpool_create(th);
            memset(y, 0x7f, n_y * sizeof(float));
            kern_matmul(pool, &W, x, n_in, n_rows, y, n_out);
            tpool_free(pool);
            CHECK(memcmp(y, yref, n_y * sizeof(float)) == 0,
                  "kern_matmul %s %lld x %lld, %lld rows, %s, AMX %s, %d threads: not the reference's bits",
                  kvi_type_name(t), (long long)n_out, (long long)n_in, (long long)n_rows,
                  r16 ? "R16" : "rows", amx ? "on" : "off", th);
        }
    }
    cpu_amx_set(1);
    free(w);
    free(x);
    free(yref);
    free(y);
}

int main(void)
{
    uint64_t rs = 0x5eed0a3cull;
    const kvi_type types[2] = { KVI_TYPE_Q8_0, KVI_TYPE_Q4_0 };
    const bool amx = kern_isa_detect() == KVI_ISA_AVX512 && cpu_amx_available();
    if (!amx) printf("note: no AMX here (CPU or OS); the direct kernel checks are skipped\n");
    for (int k = 0; k < 2; k++) {
        const kvi_type t = types[k];
        if (amx) {
            const int64_t rows[] = { 20, 21, 31, 33, 64, 100, 700 };
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
                test_direct(t, 48, 2048, rows[i], false, &rs); /* 700 rows: 3 input chunks */
                test_direct(t, 48, 256, rows[i], true, &rs);
            }
            if (t == KVI_TYPE_Q8_0) { /* R16 read in place from 12 rows */
                test_direct(t, 48, 256, 12, true, &rs);
                test_direct(t, 48, 256, 13, true, &rs);
            } else {
                CHECK(!kern_qgemm_amx_q8_wanted(t, true, 12, 256), "AMX wanted for Q4_0 at 12 rows");
            }
            test_direct(t, 40, 96, 20, false, &rs);    /* a short last output tile, odd block count */
            test_direct(t, 48, 2048, 700, true, &rs);  /* packed R16, several chunks */
            test_direct(t, 40, 2048, 700, false, &rs); /* short last output tile, several chunks */
            test_direct(t, 32, 128, 21, false, &rs);   /* 4 and 5 blocks */
            test_direct(t, 32, 160, 21, false, &rs);
            /* a range of the outputs, into rows of y wider than the matrix */
            test_range(t, 64, 256, 40, true, 16, 48, 72, false, &rs);
            if (t == KVI_TYPE_Q8_0) test_range(t, 64, 256, 13, true, 16, 48, 72, false, &rs); /* direct */
            test_range(t, 48, 256, 40, false, 16, 40, 56, false, &rs);
            if (t == KVI_TYPE_Q8_0) { /* every level, -128 included: direct, packed R16, packed rows */
                test_range(t, 48, 512, 12, true, 0, 48, 48, true, &rs);
                test_range(t, 48, 512, 40, true, 0, 48, 48, true, &rs);
                test_range(t, 48, 512, 40, false, 0, 48, 48, true, &rs);
            }
            test_direct(t, 16, 64, 24, true, &rs);
            test_direct(t, 32, 32, 22, false, &rs); /* one block */
            CHECK(!kern_qgemm_amx_q8_wanted(t, false, KVI_AMX_Q8_MIN_ROWS - 1, 256),
                  "AMX wanted below its row minimum");
            CHECK(kern_qgemm_amx_q8_wanted(t, false, KVI_AMX_Q8_MIN_ROWS, 256),
                  "AMX not wanted at its row minimum");
        }
        test_matmul(t, 80, 512, 37, false, &rs);
        test_matmul(t, 64, 512, 37, true, &rs);
        test_matmul(t, 96, 1024, 16, true, &rs);
        test_matmul(t, 96, 1024, 12, true, &rs);
        test_matmul(t, 96, 1024, 24, false, &rs);
    }
    cpu_amx_set(0);
    CHECK(!cpu_amx_on(), "cpu_amx_set(0) leaves AMX on");
    CHECK(!kern_qgemm_amx_q8_wanted(KVI_TYPE_Q8_0, true, 64, 256), "AMX wanted while turned off");
    cpu_amx_set(1);
    CHECK(!kern_qgemm_amx_q8_wanted(KVI_TYPE_Q6_K, false, 64, 256), "AMX wanted for Q6_K");
    return test_main_end();
}
