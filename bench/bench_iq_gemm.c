/*
 * bench_iq_gemm.c — micro-benchmark of one quantised matrix product (kern_matmul,
 * no thread pool: one thread) for the grid types against Q4_K, the product alone:
 * shapes 2048 x 2048 and 1408 x 4096 (n_out x n_in), 1, 16 and 64 input rows.
 * Prints the best of N calls in process CPU time (the machine is shared: the best
 * call is the one least disturbed), ms per call and per row.
 *
 * Weights are random bytes (every byte pattern of these types is a valid block)
 * with each block's leading f16 factors set to 0.01; Q4_K is laid out as R16 tiles
 * when the kernels prefer them, as the model loader does.
 *
 * Run: BUILD/bench_iq_gemm [reps] [type ...]   (default 20 reps, all six types;
 * BENCH_ROWS=n times n rows instead of 1, 16 and 64)
 */
#include "kvinfer.h"
#include "kernels/kernels.h"
#include "formats/quant.h"
#include "kernels/r16_pack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* Best-of-reps ms of W (n_out x n_in) times rows random inputs. */
static double time_one(kvi_type t, int64_t n_out, int64_t n_in, int64_t rows, int reps)
{
    const size_t rb = quant_row_bytes(t, n_in), bb = quant_block_bytes(t), bytes = rb * (size_t)n_out;
    uint8_t *w = malloc(bytes);
    float *x = malloc((size_t)(rows * n_in) * sizeof(float)),
          *y = malloc((size_t)(rows * n_out) * sizeof(float));
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)next();
    for (size_t o = 0; o < bytes; o += bb) w[o] = 0x1f, w[o + 1] = 0x21, w[o + 2] = 0x1f, w[o + 3] = 0x21;
    for (int64_t i = 0; i < rows * n_in; i++)
        x[i] = (float)((double)(next() >> 11) / 9007199254740992.0 - 0.5);
    kern_tensor W = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
    if (kern_r16_preferred() && kern_r16_eligible(&W)) kern_r16_repack(&W, 1);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = cpu_ms();
        kern_matmul(NULL, &W, x, n_in, rows, y, n_out);
        const double dt = cpu_ms() - t0;
        if (dt < best) best = dt;
    }
    free(w);
    free(x);
    free(y);
    return best;
}

static int find_type(const char *name, kvi_type *out)
{
    for (int t = 0; t < KVI_TYPE_COUNT; t++)
        if (kvi_type_name((kvi_type)t) && strcmp(kvi_type_name((kvi_type)t), name) == 0) {
            *out = (kvi_type)t;
            return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    kvi_type types[16] = { KVI_TYPE_IQ2_XXS, KVI_TYPE_IQ3_XXS, KVI_TYPE_IQ2_XS,
                           KVI_TYPE_IQ2_S,   KVI_TYPE_IQ3_S,   KVI_TYPE_Q4_K };
    int n_types = 6;
    if (argc > 2) {
        n_types = 0;
        for (int i = 2; i < argc && n_types < 16; i++)
            if (find_type(argv[i], &types[n_types])) n_types++;
    }
    static const int64_t shapes[][2] = { { 2048, 2048 }, { 1408, 4096 } };
    int64_t rowsv[3] = { 1, 16, 64 };
    int n_rows = 3;
    if (getenv("BENCH_ROWS") && atoi(getenv("BENCH_ROWS")) > 0)
        rowsv[0] = atoi(getenv("BENCH_ROWS")), n_rows = 1;
    printf("isa %s, 1 thread, best of %d (CPU time)\n", kvi_isa_name(), reps);
    printf("%-8s %-10s %5s %10s %10s\n", "type", "n_out*n_in", "rows", "ms", "ms/row");
    for (int ti = 0; ti < n_types; ti++)
        for (int si = 0; si < 2; si++)
            for (int ri = 0; ri < n_rows; ri++) {
                const double ms = time_one(types[ti], shapes[si][0], shapes[si][1], rowsv[ri], reps);
                printf("%-8s %4lldx%-5lld %5lld %10.3f %10.4f\n", kvi_type_name(types[ti]),
                       (long long)shapes[si][0], (long long)shapes[si][1], (long long)rowsv[ri], ms,
                       ms / (double)rowsv[ri]);
            }
    return 0;
}
