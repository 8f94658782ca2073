/*
 * bench_matmul.c — micro-benchmark of kern_matmul: GOP/s (2 * n_in * n_out * rows
 * per call) for each weight type on 2048x2048 and 2048x8192 matrices, 1 and 512
 * input rows, with a pool of T threads (default 2); median of R timed calls.
 *
 * Build: built with kvinfer (CMake target of the same name, BUILD/bench_matmul).
 * Run: BUILD/bench_matmul [threads] [reps] [type ...]   (KVINFER_ISA forces a path)
 *
 * Decode mode: BUILD/bench_matmul gemv [threads] [reps] [MiB] [type ...] times one
 * input row against 2048x2048, 8192x2048 and 2048x8192 (n_out x n_in) matrices and
 * prints GB/s of weights read. Each timed repetition walks copies of the matrix
 * that together hold MiB (default 1024) MiB, more than the last-level cache, so the
 * weights come from memory as in a real decode step. BENCH_R16=1 repacks the Q8_0 /
 * Q4_0 copies into the R16 layout first, as the model loader does.
 */
#include "kvinfer.h"
#include "kernels/kernels.h"
#include "formats/quant.h"
#include "kernels/r16_pack.h"

#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What both modes share: a pool of threads, inputs x[n_x] (fixed xorshift seed,
 * in [-0.5, 0.5)), outputs y[n_y], a row buffer row[n_row]. */
typedef struct bufs {
    tpool *pool;
    float *x, *y, *row;
} bufs;

static bufs bufs_make(int threads, int64_t n_x, int64_t n_y, int64_t n_row)
{
    bufs b = { tpool_create(threads), malloc((size_t)n_x * sizeof(float)),
               malloc((size_t)n_y * sizeof(float)), malloc((size_t)n_row * sizeof(float)) };
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n_x; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        b.x[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    return b;
}

/* Frees what bufs_make made; returns 0 (main's exit status). */
static int bufs_free(bufs *b)
{
    tpool_free(b->pool);
    free(b->x);
    free(b->y);
    free(b->row);
    return 0;
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

static int bench_gemv(int argc, char **argv)
{
    int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 5;
    size_t mib = argc > 4 ? (size_t)atol(argv[4]) : 1024;
    const char *deflt[] = { "q8_0", "q4_0", "q4_k", "q6_k" };
    const char **types = argc > 5 ? (const char **)argv + 5 : deflt;
    int n_types = argc > 5 ? argc - 5 : (int)(sizeof deflt / sizeof deflt[0]);
    const int64_t shapes[3][2] = { { 2048, 2048 }, { 8192, 2048 }, { 2048, 8192 } }; /* n_out, n_in */
    bufs b = bufs_make(threads, 8192, 8192, 8192);
    float *x = b.x, *y = b.y, *row = b.row;
    if (reps > 64) reps = 64;
    const int r16 = getenv("BENCH_R16") && strcmp(getenv("BENCH_R16"), "1") == 0;
    printf("gemv: isa %s threads %d reps %d, %zu MiB of copies, %s layout (median GB/s of weights)\n",
           kvi_isa_name(), threads, reps, mib, r16 ? "R16 where possible" : "rows");
    printf("%-6s %14s %14s %14s\n", "type", "2048x2048", "8192x2048", "2048x8192");
    for (int k = 0; k < n_types; k++) {
        kvi_type t;
        if (!find_type(types[k], &t)) continue;
        printf("%-6s", types[k]);
        for (int o = 0; o < 3; o++) {
            const int64_t n_out = shapes[o][0], n_in = shapes[o][1];
            const size_t rb = quant_row_bytes(t, n_in), mb = rb * (size_t)n_out;
            const size_t copies = mb ? (mib << 20) / mb + 1 : 0;
            uint8_t *w = mb ? malloc(mb * copies) : NULL;
            if (!w) {
                printf(" %14s", "-");
                continue;
            }
            for (int64_t j = 0; j < n_out; j++) {
                for (int64_t i = 0; i < n_in; i++) row[i] = x[(j * 7 + i) % 8192];
                quant_quantize_row(t, row, w + (size_t)j * rb, n_in);
            }
            int layout = KVI_LAYOUT_ROWS; /* R16 (as the loader does) when asked and possible */
            if (r16) {
                kern_tensor T = { .data = w, .type = t, .n_in = n_in, .n_out = n_out };
                if (kern_r16_eligible(&T) && kern_r16_repack(&T, threads) == 0) layout = T.layout;
            }
            /* every copy holds copy 0's bytes, in the one layout they are all read with */
            for (size_t c = 1; c < copies; c++) memcpy(w + c * mb, w, mb);
            double ts[64];
            for (int i = -1; i < reps; i++) { /* i = -1: warm-up */
                double t0 = bench_now(CLOCK_MONOTONIC);
                for (size_t c = 0; c < copies; c++) {
                    kern_tensor W = { w + c * mb, t, n_in, n_out, layout };
                    kern_matmul(b.pool, &W, x, n_in, 1, y, n_out);
                }
                if (i >= 0) ts[i] = (bench_now(CLOCK_MONOTONIC) - t0) / (double)copies;
            }
            qsort(ts, (size_t)reps, sizeof ts[0], bench_cmp_d);
            printf(" %14.1f", (double)mb / ts[reps / 2] * 1e-9);
            fflush(stdout);
            free(w);
        }
        printf("\n");
    }
    return bufs_free(&b);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "gemv") == 0) return bench_gemv(argc, argv);
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    const char *deflt[] = { "f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",
                            "q5_0", "q5_1", "q4_k", "q5_k", "q6_k" };
    const char **types = argc > 3 ? (const char **)argv + 3 : deflt;
    int n_types = argc > 3 ? argc - 3 : (int)(sizeof deflt / sizeof deflt[0]);
    const int64_t n_in = 2048, outs[2] = { 2048, 8192 };
    int64_t rows[2] = { 1, 512 };
    if (getenv("BENCH_ROWS") && atoi(getenv("BENCH_ROWS")) >= 1 && atoi(getenv("BENCH_ROWS")) <= 512)
        rows[1] = atoi(getenv("BENCH_ROWS"));
    const int r16 = getenv("BENCH_R16") && strcmp(getenv("BENCH_R16"), "1") == 0;
    bufs b = bufs_make(threads, 512 * n_in, 512 * 8192, n_in);
    float *x = b.x, *y = b.y, *row = b.row;
    printf("isa %s threads %d reps %d, %s layout (median GOP/s)\n", kvi_isa_name(), threads, reps,
           r16 ? "R16 where possible" : "rows");
    printf("%-6s %14s %11s%-3d %14s %11s%-3d\n", "type", "2048x2048 r1", "2048x2048 r", (int)rows[1],
           "2048x8192 r1", "2048x8192 r", (int)rows[1]);
    for (int k = 0; k < n_types; k++) {
        kvi_type t;
        if (!find_type(types[k], &t)) continue;
        printf("%-6s", types[k]);
        for (int o = 0; o < 2; o++) {
            size_t rb = quant_row_bytes(t, n_in);
            uint8_t *w = malloc(rb * (size_t)outs[o]);
            for (int64_t j = 0; j < outs[o]; j++) {
                for (int64_t i = 0; i < n_in; i++) row[i] = x[(j * 7 + i) % (512 * n_in)];
                quant_quantize_row(t, row, w + (size_t)j * rb, n_in);
            }
            kern_tensor W = { w, t, n_in, outs[o], KVI_LAYOUT_ROWS };
            if (r16 && kern_r16_eligible(&W) && kern_r16_repack(&W, threads) != 0) printf(" (repack failed)");
            for (int r = 0; r < 2; r++) {
                double ts[64];
                int n = reps < 64 ? reps : 64, calls = rows[r] == 1 ? 20 : 1;
                kern_matmul(b.pool, &W, x, n_in, rows[r], y, outs[o]); /* warm-up */
                for (int i = 0; i < n; i++) {
                    double t0 = bench_now(CLOCK_MONOTONIC);
                    for (int c = 0; c < calls; c++) kern_matmul(b.pool, &W, x, n_in, rows[r], y, outs[o]);
                    ts[i] = (bench_now(CLOCK_MONOTONIC) - t0) / calls;
                }
                qsort(ts, (size_t)n, sizeof ts[0], bench_cmp_d);
                printf(" %14.1f", 2.0 * (double)n_in * (double)outs[o] * (double)rows[r] / ts[n / 2] * 1e-9);
                fflush(stdout);
            }
            free(w);
        }
        printf("\n");
    }
    return bufs_free(&b);
}
