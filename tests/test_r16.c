/*
 * test_r16.c — the R16 weight layout (src/kernels/r16_pack.h): repacking loses nothing,
 * the SIMD repack writes the scalar reference's bytes, rows read back exactly, and
 * every matrix product over R16 weights gives the bits of the same product over
 * the rows layout on every ISA the CPU has, for 1..70 input rows and 1..3 threads
 * (up to 64 rows take the streaming kernel, more the tiled one).
 */
#include "kvinfer.h"
#include "kernels/kernels.h"
#include "kernels/r16.h"
#include "kernels/vnni_avx512.h"
#include "formats/quant.h"
#include "testutil.h"
#include "kernels/r16_pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_layout(kvi_type t, int64_t n_in, uint64_t *rs)
{
    const int64_t n_out = 48;
    const size_t rb = quant_row_bytes(t, n_in), tb = 16 * rb, bytes = rb * (size_t)n_out;
    uint8_t *w = trand_weights(t, n_out, n_in, rs);
    uint8_t *ref = malloc(bytes), *back = malloc(bytes), *row = malloc(rb);
    for (int64_t tt = 0; tt < n_out / 16; tt++) kern_r16_from_rows(t, w + tt * tb, n_in, ref + tt * tb);
    CHECK(memcmp(ref, w, bytes) != 0, "%s n_in %lld: R16 differs from rows", kvi_type_name(t),
          (long long)n_in);
    for (int64_t tt = 0; tt < n_out / 16; tt++) kern_r16_to_rows(t, ref + tt * tb, n_in, back + tt * tb);
    CHECK(memcmp(back, w, bytes) == 0, "%s n_in %lld: rows -> R16 -> rows changed bytes", kvi_type_name(t),
          (long long)n_in);
    int bad_rows = 0;
    for (int64_t j = 0; j < n_out; j++) {
        kern_r16_row(t, ref + (j / 16) * tb, n_in, (int)(j % 16), row);
        bad_rows += memcmp(row, w + (size_t)j * rb, rb) != 0;
    }
    CHECK(bad_rows == 0, "%s n_in %lld: %d rows read back wrong", kvi_type_name(t), (long long)n_in,
          bad_rows);
    if (t == KVI_TYPE_MXFP4) { /* r16_pack.h's MXFP4 pair of 544 bytes, by hand: tile 1, row 3 */
        const uint8_t *pr = ref + tb, *r3 = w + (size_t)(16 + 3) * rb;
        bool ok = true;
        for (int64_t b = 0; b < n_in / 32; b++) {
            const uint8_t *pp = pr + (size_t)(b / 2) * 544, *blk = r3 + (size_t)b * 17;
            ok = ok && pp[16 * (b % 2) + 3] == blk[0];
            for (int k = 0; k < 16; k++)
                ok = ok && pp[32 + 256 * (b % 2) + 64 * (k / 4) + 4 * 3 + k % 4] == blk[1 + k];
        }
        CHECK(ok, "mxfp4 n_in %lld: R16 bytes not where r16_pack.h puts them", (long long)n_in);
    }
    if (t == KVI_TYPE_Q4_K) { /* r16_pack.h's Q4_K super of 2304 bytes, by hand: tile 1, row 3 */
        const uint8_t *r3 = w + (size_t)(16 + 3) * rb;
        bool ok = true;
        for (int64_t b = 0; b < n_in / 256; b++) {
            const uint8_t *sup = ref + tb + (size_t)b * 2304, *blk = r3 + (size_t)b * 144;
            ok = ok && !memcmp(sup + 6, blk, 2) && !memcmp(sup + 32 + 6, blk + 2, 2);
            for (int sb = 0; sb < 8; sb++) {
                uint8_t sc, mn;
                quant_scale_min_k4(sb, blk + 4, &sc, &mn);
                /* sc_s: E0 (s < 4) / E1 byte 16 (s % 4) + 3; mn_s: E2 / E3 byte 32 ((s / 2) % 2) + 6 + s % 2 */
                const int ia = sb / 4, ii = 16 * (sb % 4) + 3, ma = 2 + sb / 4,
                          mi = 32 * ((sb / 2) % 2) + 6 + sb % 2;
                const uint8_t scv = (uint8_t)(((sup[64 + 64 * (ia / 2) + ii] >> (4 * (ia % 2))) & 15) |
                                              ((sup[192 + ii] >> (2 * ia)) & 3) << 4);
                const uint8_t mnv = (uint8_t)(((sup[64 + 64 * (ma / 2) + mi] >> (4 * (ma % 2))) & 15) |
                                              ((sup[192 + mi] >> (2 * ma)) & 3) << 4);
                ok = ok && scv == sc && mnv == mn;
            }
            for (int v = 0; v < 32; v++) ok = ok && !memcmp(sup + 256 + 64 * v + 12, blk + 16 + 4 * v, 4);
        }
        CHECK(ok, "q4_k n_in %lld: R16 bytes not where r16_pack.h puts them", (long long)n_in);
    }
    if (t == KVI_TYPE_Q6_K) { /* the Q6_K super of 3360 bytes, by hand: tile 1, row 3 */
        const uint8_t *r3 = w + (size_t)(16 + 3) * rb;
        bool ok = true;
        for (int64_t b = 0; b < n_in / 256; b++) {
            const uint8_t *sup = ref + tb + (size_t)b * 3360, *blk = r3 + (size_t)b * 210;
            ok = ok && !memcmp(sup + 6, blk + 208, 2); /* d */
            for (int sb = 0; sb < 16; sb++) ok = ok && sup[32 + 16 * sb + 3] == blk[192 + sb];
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 8; k++) { /* triplet 8h + k: ql 16h + k, ql 16h + 8 + k, qh 8h + k */
                    const uint8_t *tr = sup + 288 + 192 * (8 * h + k) + 12;
                    ok = ok && !memcmp(tr, blk + 4 * (16 * h + k), 4) &&
                         !memcmp(tr + 64, blk + 4 * (16 * h + 8 + k), 4) &&
                         !memcmp(tr + 128, blk + 128 + 4 * (8 * h + k), 4);
                }
        }
        CHECK(ok, "q6_k n_in %lld: R16 bytes not where r16_pack.h puts them", (long long)n_in);
    }
    if (kern_isa_detect() == KVI_ISA_AVX512 && kern_has_vnni()) {
        for (int64_t tt = 0; tt < n_out / 16; tt++)
            kern_r16_from_rows_avx512(t, w + tt * tb, n_in, back + tt * tb);
        CHECK(memcmp(back, ref, bytes) == 0, "%s n_in %lld: AVX-512 repack differs from the scalar one",
              kvi_type_name(t), (long long)n_in);
        memset(back, 0x5a, bytes);
        for (int64_t tt = 0; tt < n_out / 16; tt++)
            kern_r16_to_rows_avx512(t, ref + tt * tb, n_in, back + tt * tb);
        CHECK(memcmp(back, w, bytes) == 0, "%s n_in %lld: AVX-512 unpack differs from the rows",
              kvi_type_name(t), (long long)n_in);
    }
    /* in place, several threads: the reference's bytes, and the layout recorded */
    for (int threads = 1; threads <= 3; threads += 2) {
        memcpy(back, w, bytes);
        kern_tensor W = { .data = back, .type = t, .n_in = n_in, .n_out = n_out };
        CHECK(kern_r16_repack(&W, threads) == 0 && W.layout == KVI_LAYOUT_R16, "%s: repack failed",
              kvi_type_name(t));
        CHECK(memcmp(back, ref, bytes) == 0, "%s, %d threads: in-place repack differs", kvi_type_name(t),
              threads);
        float *g0 = malloc((size_t)n_in * sizeof(float)), *g1 = malloc((size_t)n_in * sizeof(float));
        kern_tensor R = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
        int bad = 0;
        for (int64_t j = 0; j < n_out; j += 7) {
            kern_tensor_get_row(&R, j, g0);
            kern_tensor_get_row(&W, j, g1);
            bad += memcmp(g0, g1, (size_t)n_in * sizeof(float)) != 0;
        }
        CHECK(bad == 0, "%s: %d rows of get_row differ between layouts", kvi_type_name(t), bad);
        free(g0);
        free(g1);
    }
    free(w);
    free(ref);
    free(back);
    free(row);
}

/* Products over R16 == products over rows, bit for bit. */
static void test_products(kvi_type t, int64_t n_out, int64_t n_in, uint64_t *rs)
{
    const int max_rows = 70;
    uint8_t *w = trand_weights(t, n_out, n_in, rs);
    const size_t bytes = quant_row_bytes(t, n_in) * (size_t)n_out;
    if (t == KVI_TYPE_MXFP4) /* every fifth row's scales the subnormal 2^-128 / 2^-127 */
        for (int64_t j = 0; j < n_out; j += 5)
            for (int64_t b = 0; b < n_in / 32; b++)
                w[(size_t)j * quant_row_bytes(t, n_in) + (size_t)b * 17] = (uint8_t)(trand_u64(rs) & 1);
    /* 32 bytes past a 64-byte boundary, as GGUF's default alignment allows */
    uint8_t *wr_buf = aligned_alloc(64, (bytes + 32 + 63) & ~(size_t)63), *wr = wr_buf + 32;
    memcpy(wr, w, bytes);
    kern_tensor rows = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
    kern_tensor r16 = { .data = wr, .type = t, .n_in = n_in, .n_out = n_out };
    CHECK(kern_r16_repack(&r16, 2) == 0, "repack");
    float *x = malloc((size_t)max_rows * (size_t)n_in * sizeof(float));
    float *y0 = malloc((size_t)max_rows * (size_t)n_out * sizeof(float));
    float *y1 = malloc((size_t)max_rows * (size_t)n_out * sizeof(float));
    for (int64_t i = 0; i < max_rows * n_in; i++) x[i] = trand_normal(rs);
    const kern_isa best = kern_isa_detect();
    const int row_counts[] = { 1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 65, 70 };
    for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        for (int threads = 1; threads <= 3; threads++) {
            tpool *pool = tpool_create(threads);
            int bad = 0, nan = 0;
            for (size_t k = 0; k < sizeof row_counts / sizeof row_counts[0]; k++) {
                const int nr = row_counts[k];
                kern_matmul(pool, &rows, x, n_in, nr, y0, n_out);
                for (int64_t i = 0; i < nr * n_out; i++) y1[i] = NAN;
                kern_matmul(pool, &r16, x, n_in, nr, y1, n_out);
                bad += memcmp(y0, y1, (size_t)nr * (size_t)n_out * sizeof(float)) != 0;
                for (int64_t i = 0; i < nr * n_out; i++) nan += isnan(y1[i]) || y1[i] == 0.0f;
            }
            CHECK(bad == 0 && nan == 0, "%s %lldx%lld isa %s %d threads: %d row counts differ, %d bad values",
                  kvi_type_name(t), (long long)n_out, (long long)n_in, kern_isa_str((kern_isa)isa), threads,
                  bad, nan);
            /* shared quantisation of Q/K/V-like groups: R16 beside rows */
            const kern_tensor *ws[2] = { &r16, &rows };
            float *ys[2] = { y1, y1 + 5 * n_out };
            const int64_t ldy[2] = { n_out, n_out };
            kern_matmul_multi(pool, 2, ws, x, n_in, 5, ys, ldy);
            kern_matmul(pool, &rows, x, n_in, 5, y0, n_out);
            CHECK(memcmp(y0, y1, (size_t)5 * (size_t)n_out * sizeof(float)) == 0 &&
                      memcmp(y0, y1 + 5 * n_out, (size_t)5 * (size_t)n_out * sizeof(float)) == 0,
                  "%s isa %s: kern_matmul_multi over R16 + rows differs", kvi_type_name(t),
                  kern_isa_str((kern_isa)isa));
            tpool_free(pool);
        }
    }
    kern_isa_set(best);
    free(w);
    free(wr_buf);
    free(x);
    free(y0);
    free(y1);
}

/* Several matrices in one call: each gets exactly kern_r16_repack's bytes; the same
 * data named twice is refused with nothing changed. */
static void test_repack_many(uint64_t *rs)
{
    uint8_t *a = trand_weights(KVI_TYPE_Q8_0, 48, 128, rs), *b = trand_weights(KVI_TYPE_Q4_0, 32, 256, rs);
    const size_t na = quant_row_bytes(KVI_TYPE_Q8_0, 128) * 48, nb = quant_row_bytes(KVI_TYPE_Q4_0, 256) * 32;
    uint8_t *a2 = malloc(na), *b2 = malloc(nb);
    memcpy(a2, a, na);
    memcpy(b2, b, nb);
    kern_tensor A = { .data = a, .type = KVI_TYPE_Q8_0, .n_in = 128, .n_out = 48 };
    kern_tensor B = { .data = b, .type = KVI_TYPE_Q4_0, .n_in = 256, .n_out = 32 };
    kern_tensor A2 = { .data = a2, .type = KVI_TYPE_Q8_0, .n_in = 128, .n_out = 48 };
    kern_tensor B2 = { .data = b2, .type = KVI_TYPE_Q4_0, .n_in = 256, .n_out = 32 };
    kern_tensor *dup[2] = { &A, &A };
    CHECK(kern_r16_repack_many(dup, 2, 2) < 0 && A.layout == KVI_LAYOUT_ROWS && memcmp(a, a2, na) == 0,
          "the same matrix twice must be refused untouched");
    kern_tensor *both[2] = { &A, &B };
    CHECK(kern_r16_repack_many(both, 2, 3) == 0 && A.layout == KVI_LAYOUT_R16 && B.layout == KVI_LAYOUT_R16,
          "repack of two matrices");
    CHECK(kern_r16_repack(&A2, 1) == 0 && kern_r16_repack(&B2, 1) == 0, "single repacks");
    CHECK(memcmp(a, a2, na) == 0 && memcmp(b, b2, nb) == 0,
          "one call over two matrices differs from one each");
    free(a);
    free(b);
    free(a2);
    free(b2);
}

static void test_eligibility(void)
{
    uint8_t buf[64];
    kern_tensor a = { .data = buf, .type = KVI_TYPE_Q8_0, .n_in = 64, .n_out = 40 };
    CHECK(!kern_r16_eligible(&a) && kern_r16_repack(&a, 1) < 0 && a.layout == KVI_LAYOUT_ROWS,
          "40 rows (not a multiple of 16) must be refused");
    kern_tensor b = { .data = buf, .type = KVI_TYPE_Q4_0, .n_in = 96, .n_out = 16 };
    CHECK(!kern_r16_eligible(&b), "n_in 96 (odd number of blocks) must be refused");
    kern_tensor c = { .data = buf, .type = KVI_TYPE_Q4_1, .n_in = 64, .n_out = 16 };
    CHECK(!kern_r16_eligible(&c), "Q4_1 has no R16 layout");
    kern_tensor d = { .data = buf, .type = KVI_TYPE_Q8_0, .n_in = 64, .n_out = 16, .layout = KVI_LAYOUT_R16 };
    CHECK(!kern_r16_eligible(&d), "an R16 tensor is not repacked twice");
    kern_tensor e = { .data = buf, .type = KVI_TYPE_Q5_K, .n_in = 256, .n_out = 16 };
    CHECK(!kern_r16_eligible(&e), "Q5_K has no R16 layout");
    kern_tensor f = { .data = buf, .type = KVI_TYPE_Q4_K, .n_in = 256, .n_out = 16 };
    kern_tensor g = { .data = buf, .type = KVI_TYPE_Q6_K, .n_in = 512, .n_out = 32 };
    CHECK(kern_r16_eligible(&f) && kern_r16_eligible(&g), "Q4_K / Q6_K with n_in %% 256 == 0 are eligible");
    kern_tensor h = { .data = buf, .type = KVI_TYPE_Q4_K, .n_in = 256, .n_out = 24 };
    CHECK(!kern_r16_eligible(&h), "24 Q4_K rows (not a multiple of 16) must be refused");
}

int main(void)
{
    uint64_t rs = 0x5eed16;
    const kvi_type types[6] = { KVI_TYPE_Q8_0,  KVI_TYPE_Q4_0, KVI_TYPE_IQ4_NL,
                                KVI_TYPE_MXFP4, KVI_TYPE_Q4_K, KVI_TYPE_Q6_K };
    for (int k = 0; k < 6; k++) {
        const bool kq = types[k] == KVI_TYPE_Q4_K || types[k] == KVI_TYPE_Q6_K;
        test_layout(types[k], kq ? 256 : 64, &rs);
        test_layout(types[k], 2048, &rs);
        test_products(types[k], 48, 256, &rs);
        test_products(types[k], 80, 768, &rs);
    }
    test_repack_many(&rs);
    test_eligibility();
    return test_main_end();
}
