/*
 * test_lora_bt.c — the LoRA B product from B transposed (kernels/lora_bt.h):
 *  - the reference against a float64 loop (y += s * sum_k t[k] bt[k][j]) within 1e-5
 *    relative, on random inputs, ranks 1, 4, 16, 33 and column counts with and
 *    without a tail (1, 15, 16, 37, 300), 1..7 rows;
 *  - the reference against its own contract written out (one fmaf per k from 0,
 *    then y + acc * s): the same bits;
 *  - the AVX2 and AVX-512 paths (where the CPU has them) give the reference's bits;
 *  - a column range computed as two calls (split at any panel boundary) gives the
 *    bits of one.
 * B transposed is given in the panel layout (kern_lora_bt_at), padded with zeros.
 */
#include "testutil.h"

#include "kernels/kernels_int.h"
#include "kernels/lora_bt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef void (*lbt_fn)(const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n,
                       const float *s, float *const *y);

/* y rows [cnt][n] (stride ldy) from y0, through fn over columns [0, n) split at cut
 * (a multiple of 16, or n) */
static void run(lbt_fn fn, const float *t, int ldt, int cnt, int r, const float *pan, int n, const float *s,
                const float *y0, float *y, int ldy, int cut)
{
    memcpy(y, y0, (size_t)cnt * ldy * sizeof *y);
    float *rows[8] = { 0 };
    for (int i = 0; i < cnt; i++) rows[i] = y + (size_t)i * ldy;
    fn(t, ldt, cnt, r, pan, cut, s, rows);
    for (int i = 0; i < cnt; i++) rows[i] += cut;
    if (cut < n) fn(t, ldt, cnt, r, pan + kern_lora_bt_at(r, cut, 0), n - cut, s, rows);
}

int main(void)
{
    uint64_t rng = 11;
    const int ranks[] = { 1, 4, 16, 33 }, cols[] = { 1, 15, 16, 37, 300 };
    const kern_isa isa = kern_isa_detect();
    int n_simd = 0;
    for (size_t ri = 0; ri < sizeof ranks / sizeof *ranks; ri++)
        for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++)
            for (int cnt = 1; cnt <= 7; cnt += 3) {
                const int r = ranks[ri], n = cols[ci], ldt = r + 3, ldb = n + 5, ldy = n + 2;
                float *t = malloc((size_t)cnt * ldt * sizeof *t), *bt = malloc((size_t)r * ldb * sizeof *bt);
                float *y0 = malloc((size_t)cnt * ldy * sizeof *y0),
                      *yr = malloc((size_t)cnt * ldy * sizeof *yr);
                float *yx = malloc((size_t)cnt * ldy * sizeof *yx), s[8];
                trand_fill_normal(t, (int64_t)cnt * ldt, &rng);
                trand_fill_normal(bt, (int64_t)r * ldb, &rng);
                trand_fill_normal(y0, (int64_t)cnt * ldy, &rng);
                trand_fill_normal(s, cnt, &rng);
                float *pan = calloc(kern_lora_bt_floats(r, n), sizeof *pan); /* panels, zero padded */
                for (int k = 0; k < r; k++)
                    for (int j = 0; j < n; j++) pan[kern_lora_bt_at(r, j, k)] = bt[(size_t)k * ldb + j];
                run(kern_lora_bt_ref, t, ldt, cnt, r, pan, n, s, y0, yr, ldy, n);
                double worst = 0;
                bool contract = true;
                for (int i = 0; i < cnt; i++)
                    for (int j = 0; j < n; j++) {
                        double d = 0, mag = 0;
                        float acc = 0.0f;
                        for (int k = 0; k < r; k++) {
                            const float a = t[(size_t)i * ldt + k], b = bt[(size_t)k * ldb + j];
                            d += (double)a * b;
                            mag += fabs((double)a * b);
                            acc = fmaf(a, b, acc);
                        }
                        const float p = acc * s[i], want = y0[(size_t)i * ldy + j] + p;
                        const double e = fabs(yr[(size_t)i * ldy + j] - (y0[(size_t)i * ldy + j] + d * s[i]));
                        const double rel = e / (fabs(y0[(size_t)i * ldy + j]) + mag * fabs(s[i]) + 1e-30);
                        worst = rel > worst ? rel : worst;
                        contract &= memcmp(&want, &yr[(size_t)i * ldy + j], sizeof want) == 0;
                    }
                CHECK(worst < 1e-5, "r %d n %d rows %d: reference off float64 by %.3g", r, n, cnt, worst);
                CHECK(contract, "r %d n %d rows %d: reference differs from its contract", r, n, cnt);
                const lbt_fn paths[2] = { isa >= KVI_ISA_AVX2 ? kern_lora_bt_avx2 : NULL,
                                          isa >= KVI_ISA_AVX512 ? kern_lora_bt_avx512 : NULL };
                for (int p = 0; p < 2; p++) {
                    if (!paths[p]) continue;
                    n_simd++;
                    for (int cut = 0; cut <= n + 15; cut += 16) {
                        run(paths[p], t, ldt, cnt, r, pan, n, s, y0, yx, ldy, cut < n ? cut : n);
                        CHECK(memcmp(yr, yx, (size_t)cnt * ldy * sizeof *yr) == 0,
                              "r %d n %d rows %d: %s path (split at %d) differs from the reference", r, n,
                              cnt, p ? "AVX-512" : "AVX2", cut);
                    }
                }
                free(t), free(bt), free(pan), free(y0), free(yr), free(yx);
            }
    printf(
        "lora_bt: reference within 1e-5 of float64 and equal to its contract; %d SIMD cases bit-identical\n",
        n_simd);
    return test_main_end();
}
