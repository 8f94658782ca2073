/*
 * qgemm_r16_mid_avx512.c — Q8_0 over R16 weights (r16_pack.h) for the decode
 * batches of a busy server: 5..KVI_R16_STREAM_ROWS_MAX input rows, AVX-512 VNNI.
 *
 * The streaming kernel (qgemv_avx512.c) reads a tile once per group of 4 input
 * rows, so at 16 rows every weight vector is loaded four times, and the loads,
 * not the vpdpbusd, bound the step. Here each weight block (8 vectors of a
 * tile's 16 rows x 32 quants) is loaded once into registers and used by up to
 * MID_ROWS input rows, whose accumulators (one vector of 16 outputs each) stay
 * in registers for the whole tile; more rows take more passes over the tile
 * (from L1/L2 after the first).
 *
 * Data: a tile's pair p (blocks 2p, 2p + 1) is 64 bytes of f16 scales (16 per
 * block: lane l = weight row l) then 2 x 512 bytes of quants (block k: 8 vectors,
 * vector v holds inputs 4v..4v+3 of the 16 rows, flipped to unsigned, +128).
 *
 * Bits: for every output the steps of the contract (kernels.h, q8.h) and of
 * qgemv_avx512.c's r16_block, in the same order: isum = -128 * sum(x quants) +
 * the exact integer dot product (two exact partial chains added), then, block by
 * block in order, acc = fma(d_w * d_x, (float)isum, acc). So any row count, any
 * split into passes and any thread split give kern_qgemm_ref's bits.
 */
#include "kernels/qgemm_r16_mid.h"
#include "kernels/vnni_avx512.h"

#define MID_ROWS 12 /* accumulators per pass: with 8 weight vectors and temporaries, within 32 zmm */
#define MID_PF_BYTES 1024

/* One block of the tile (quants at q, scales dw) for nr input rows x[0..nr). */
VNNI_INLINE void mid_block(const uint8_t *q, __m512 dw, const kern_q8a *const *x, int64_t b, int nr,
                           __m512 *acc)
{
    __m512i W[8];
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) W[k] = _mm512_loadu_si512((const void *)(q + 64 * k));
    _Pragma("GCC unroll 12") for (int rr = 0; rr < nr; rr++)
    {
        const kern_q8a *xb = x[rr] + b;
        __m512i s = _mm512_set1_epi32(-128 * xb->sum), s2 = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        {
            s = _mm512_dpbusd_epi32(s, W[k], _mm512_set1_epi32(load_i32(xb->qs + 4 * k)));
            s2 = _mm512_dpbusd_epi32(s2, W[k + 4], _mm512_set1_epi32(load_i32(xb->qs + 16 + 4 * k)));
        }
        s = _mm512_add_epi32(s, s2);
        acc[rr] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(s), acc[rr]);
    }
}

/* The tile at `tile` for nr (a constant after inlining) rows x[0..nr), outputs at y (row rr at y + rr * ldy). */
VNNI_INLINE void mid_tile(const uint8_t *tile, int64_t n_in, const kern_q8a *const *x, int nr, float *y,
                          int64_t ldy)
{
    __m512 acc[MID_ROWS];
    _Pragma("GCC unroll 12") for (int rr = 0; rr < nr; rr++) acc[rr] = _mm512_setzero_ps();
    const size_t pair = 64 + 2 * 512;
    for (int64_t p = 0; p < n_in / 64; p++) {
        const uint8_t *q = tile + (size_t)p * pair;
        _Pragma("GCC unroll 17") for (size_t o = 0; o < pair; o += 64)
            _mm_prefetch((const char *)(q + MID_PF_BYTES + o), _MM_HINT_T0);
        const __m512 d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)q));
        const __m512 d1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + 32)));
        mid_block(q + 64, d0, x, 2 * p, nr, acc);
        mid_block(q + 64 + 512, d1, x, 2 * p + 1, nr, acc);
    }
    _Pragma("GCC unroll 12") for (int rr = 0; rr < nr; rr++) _mm512_storeu_ps(y + rr * ldy, acc[rr]);
}

#define MID_CASE(n) \
    case n: mid_tile(tile, a->n_in, x, n, y, a->ldy); break;

VNNI int kern_qgemm_r16_mid_avx512(const kern_qgemm_args *a)
{
    if (a->type != KVI_TYPE_Q8_0 || a->n_rows <= 4 || a->n_rows > KVI_R16_STREAM_ROWS_MAX) return 0;
    if (a->n_in % 64 != 0 || a->j0 % 16 || a->j1 % 16 || !kern_has_vnni()) return 0;
    const size_t tb = 16 * a->w_rb;
    /* passes of equal size: 16 rows are 8 + 8, not 12 + 4 */
    const int64_t n_pass = (a->n_rows + MID_ROWS - 1) / MID_ROWS, per = (a->n_rows + n_pass - 1) / n_pass;
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        const uint8_t *tile = a->w + (size_t)(jt / 16) * tb;
        for (int64_t r0 = 0; r0 < a->n_rows; r0 += per) {
            const int nr = a->n_rows - r0 < per ? (int)(a->n_rows - r0) : (int)per;
            const kern_q8a *x[MID_ROWS];
            for (int rr = 0; rr < MID_ROWS; rr++)
                x[rr] = (const kern_q8a *)(a->xq + (size_t)(r0 + (rr < nr ? rr : 0)) * a->xq_rb);
            float *y = a->y + r0 * a->ldy + jt;
            switch (nr) {
                MID_CASE(1)
                MID_CASE(2)
                MID_CASE(3)
                MID_CASE(4)
                MID_CASE(5)
                MID_CASE(6)
                MID_CASE(7)
                MID_CASE(8)
                MID_CASE(9)
                MID_CASE(10)
                MID_CASE(11)
            default: mid_tile(tile, a->n_in, x, MID_ROWS, y, a->ldy); break;
            }
        }
    }
    return 1;
}
