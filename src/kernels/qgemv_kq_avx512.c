/*
 * qgemv_kq_avx512.c — K-quant (Q4_K Q5_K Q6_K) and IQ4_XS products with few input rows
 * (decode), with AVX-512 VNNI; the bits of q8.h's contract.
 *
 * With 1..KQ_ROWS activation rows, each weight row is read as it lies (contiguous
 * loads of its 256-input blocks) and dotted
 * with vpdpbusd against the activation, arranged once per call in the scratch so
 * that the bytes of a weight load meet their inputs with no shuffle:
 *
 *   Q4_K/Q5_K  qs[0..63] and qs[64..127] are two 64-byte loads; their low nibbles
 *              are sub-blocks 0|2 and 4|6 (bytes 0..31 | 32..63), their high
 *              nibbles 1|3 and 5|7. Q5_K's fifth bit comes from qh[0..31] (bit
 *              2c / 2c+1 of qh[l] for inputs 64c+l / 64c+32+l).
 *              X[k] (k = 0..3): x of sub-blocks 0|2, 1|3, 4|6, 5|7.
 *   Q6_K       ql[0..63] and ql[64..127] with qh[0..31], qh[32..63] give the
 *              levels (0..63) of inputs 0..63, 64..127, 128..191, 192..255 in
 *              order. X[k]: x[64k .. 64k+63]; C[k]: per dword lane, -32 times the
 *              sum of its four x quants (the level offset), the dpbusd start.
 *   IQ4_XS     qs[0..63] (sub-blocks 0..3, 16 bytes each) and qs[64..127] (4..7)
 *              are two 64-byte loads A, B; their nibbles, looked up (vpshufb) as
 *              codebook level + 128, are inputs 0..15 (low) and 16..31 (high) of
 *              each sub-block. X[0], X[1]: x of sub-blocks 0..3, inputs 0..15 and
 *              16..31; X[2], X[3] likewise for 4..7; C[0], C[1]: per dword lane,
 *              -128 times the sum of its eight x quants (of X[0]+X[1], X[2]+X[3]).
 *              D_A = dpbusd(dpbusd(C[0], A_lo, X[0]), A_hi, X[1]) (D_B likewise)
 *              holds lane sums of one sub-block each (lanes 4s..4s+3: sub-block
 *              s); these can pass int16 (8 * 127 * 127), so they are multiplied by
 *              the signed scale ls - 32 with vpmulld: Q_l = D_A * SC_A + D_B * SC_B.
 *
 * D_k = dpbusd(start, W_k, X_k) holds partial dots of four inputs of one
 * sub-block per dword lane; every one fits int16 (|D| <= 4 * 32 * 127: Q4_K
 * levels 0..15, Q5_K 0..31, Q6_K -32..31 with C), so vpdpwssd against the sub-block scale (low word, high word 0)
 * multiplies each exactly: T = sum_k D_k * scale(lane), lane sum = isum. For
 * Q4_K/Q5_K, Q_l takes T's 8-lane half sum in lanes 0..7 and min_s * sum32_s in
 * lanes 8..15 (lane sum = msum); Q6_K: Q_l = T. A fixed unpack/shuffle/add tree
 * folds Q_0..Q_15 of the 16 rows of a tile into ISUM (and MSUM), lane l = row l;
 * every integer is exact (the wrap-around int32 sum of exact terms whose total
 * fits int32, q8.c). The float steps then run lane by lane, block by block
 * in order: acc = fma(d * dx, (float)isum, acc), and for Q4_K/Q5_K
 * acc = fma(-(dmin * dx), (float)msum, acc): the reference's operations, hence
 * kern_qgemm_ref's bits whatever the tile, the row range or the thread count.
 *
 * Tiles: a thread's rows [j0, j1) are read as KQ_STREAMS long streams: tile k
 * holds rows j0 + s * part + k + r in lane KQ_STREAM_ROWS * s + r (r <
 * KQ_STREAM_ROWS), so each stream runs on through consecutive rows (the memory
 * system serves a few long streams faster than 16 rows a tile apart: Q4_K
 * llama-1b tg 40-41 -> 43.5-45 tok/s); the outputs are scattered to their rows.
 * The last (j1 - j0) % (KQ_STREAMS * KQ_STREAM_ROWS) rows (or all, when the
 * streams span more than int32 gather offsets reach) go as tiles of 16
 * consecutive rows. Lanes never mix, so the bits are the same either way.
 * Prefetch: each lane's row runs on into the same lane's row of the next tile;
 * every block prefetches, into L2, the lines KQ_PREFETCH bytes ahead in it.
 *
 * Scratch per activation row (kq_act): blk [nb][512] (X[0..3], then C[0..3] or
 * the sum32 vector S: dword lanes 8..15 = sum32[0..7], lanes 0..7 zero), then
 * dx [nb] f32. Declines (returns 0, nothing written) for other types, more than
 * KQ_ROWS rows, n_in not a positive multiple of 256, or scratch that is missing,
 * too small or not 64-byte aligned.
 */
#include "kernels/vnni_avx512.h"
#include "kernels/q8.h"

#define KQ_ROWS 4 /* activation rows handled */
#define KQ_STREAMS \
    8 /* a thread's rows as this many long streams (4 x 4 rows, 2 x 8, 16 x 1: slower or equal) */
#define KQ_STREAM_ROWS 2 /* consecutive rows of one stream in a tile */
#define KQ_BLK 512       /* scratch bytes per activation block */
#ifndef KQ_PREFETCH
#define KQ_PREFETCH 1024 /* bytes ahead in each row's stream (see kq_tile) */
#endif

typedef struct kq_act {
    const uint8_t *blk; /* [nb][KQ_BLK] */
    const float *dx;    /* [nb] */
} kq_act;

static size_t kq_act_bytes(int64_t nb)
{
    return (size_t)nb * KQ_BLK + (((size_t)nb * sizeof(float) + 63) & ~(size_t)63);
}

/* One activation row (nb kern_q8k blocks) into dst in the layout above. */
static void kq_act_build(kvi_type t, const kern_q8k *x, int64_t nb, uint8_t *dst, kq_act *ka)
{
    float *dx = (float *)(dst + (size_t)nb * KQ_BLK);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = dst + (size_t)b * KQ_BLK;
        const int8_t *q = x[b].qs;
        if (t == KVI_TYPE_IQ4_XS) {
            int32_t c[32]; /* [2][16] dword lanes of C */
            for (int h = 0; h < 2; h++)
                for (int s = 0; s < 4; s++) {
                    const int8_t *xs = q + 32 * (4 * h + s);
                    memcpy(o + 128 * h + 16 * s, xs, 16);
                    memcpy(o + 128 * h + 64 + 16 * s, xs + 16, 16);
                    for (int i = 0; i < 4; i++) {
                        int32_t v = 0;
                        for (int e = 0; e < 4; e++) v += (int32_t)xs[4 * i + e] + xs[16 + 4 * i + e];
                        c[16 * h + 4 * s + i] = -128 * v;
                    }
                }
            memset(o + 256, 0, 256);
            memcpy(o + 256, c, sizeof c);
        } else if (t == KVI_TYPE_Q6_K) {
            int32_t c[64]; /* [4][16] dword lanes of C */
            memcpy(o, q, 256);
            for (int i = 0; i < 64; i++)
                c[i] = -32 * ((int32_t)q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
            memcpy(o + 256, c, sizeof c);
        } else {
            int32_t s[16] = { 0 };
            static const int sub[4][2] = { { 0, 2 }, { 1, 3 }, { 4, 6 }, { 5, 7 } };
            for (int k = 0; k < 4; k++) {
                memcpy(o + 64 * k, q + 32 * sub[k][0], 32);
                memcpy(o + 64 * k + 32, q + 32 * sub[k][1], 32);
            }
            for (int j = 0; j < 8; j++) s[8 + j] = x[b].sum32[j];
            memset(o + 256, 0, 256);
            memcpy(o + 256, s, sizeof s);
        }
        dx[b] = x[b].d;
    }
    ka->blk = dst;
    ka->dx = dx;
}

/* Q4_K/Q5_K: chunks 0, 1 of Q_l hold isum parts, chunks 2, 3 msum parts. */
VNNI_INLINE void kq_sums_min(const __m512i *Q, __m512i *isum, __m512i *msum)
{
    __m512i V[4];
    vnni_fold16(Q, V);
    const __m512i A =
        _mm512_add_epi32(_mm512_shuffle_i32x4(V[0], V[1], 0x88), _mm512_shuffle_i32x4(V[0], V[1], 0xDD));
    const __m512i B =
        _mm512_add_epi32(_mm512_shuffle_i32x4(V[2], V[3], 0x88), _mm512_shuffle_i32x4(V[2], V[3], 0xDD));
    *isum = _mm512_shuffle_i32x4(A, B, 0x88);
    *msum = _mm512_shuffle_i32x4(A, B, 0xDD);
}

/* pshufb controls taking, in every dword, byte i of the decoded scales (zero
 * extended): sub-block scales for D_0..D_3, then the mins into lanes 8..15. */
VNNI_INLINE __m512i kq_pick(int i0, int i1)
{
    const int32_t a = (int32_t)(0xffffff00u | (uint32_t)i0), b = (int32_t)(0xffffff00u | (uint32_t)i1);
    return _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
}

/* Q4_K (five = 0) or Q5_K (five = 1) row at p (one block) against nr activation
 * blocks xb[r]: Q[r] as described in the header. */
VNNI_INLINE void kq_row_q4k(const uint8_t *p, int five, const uint8_t *const *xb, int nr, __m512i *Q,
                            int qstride)
{
    const __m512i lo = _mm512_set1_epi8(0x0f);
    const size_t qs = five ? 48 : 16;
    __m512i A = _mm512_loadu_si512((const void *)(p + qs)),
            B = _mm512_loadu_si512((const void *)(p + qs + 64));
    __m512i W[4];
    W[0] = _mm512_and_si512(A, lo);
    W[1] = _mm512_and_si512(_mm512_srli_epi16(A, 4), lo);
    W[2] = _mm512_and_si512(B, lo);
    W[3] = _mm512_and_si512(_mm512_srli_epi16(B, 4), lo);
    if (five) {
        /* QHd bytes 0..31: qh, 32..63: qh >> 2; bit 0, 1, 4, 5 of QHd feed W0..W3 */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
        const __m512i H = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        const __m512i b4 = _mm512_set1_epi8(0x10);
        W[0] = _mm512_or_si512(W[0], _mm512_and_si512(_mm512_slli_epi16(H, 4), b4));
        W[1] = _mm512_or_si512(W[1], _mm512_and_si512(_mm512_slli_epi16(H, 3), b4));
        W[2] = _mm512_or_si512(W[2], _mm512_and_si512(H, b4));
        W[3] = _mm512_or_si512(W[3], _mm512_and_si512(_mm512_srli_epi16(H, 1), b4));
    }
    /* Header: dword 1 = q0..3 (L), 2 = q4..7 (M), 3 = q8..11 (H) of the 6-bit
     * scales; R bytes 0..7 = sc0..7, 8..15 = mn0..7 in every chunk:
     * sc0..3 = L & 63, sc4..7 = (H & 15) | (L >> 6) << 4,
     * mn0..3 = M & 63, mn4..7 = (H >> 4) | (M >> 6) << 4. */
    const __m512i hd = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
    const __m512i P =
        _mm512_srlv_epi32(_mm512_shuffle_epi32(hd, (_MM_PERM_ENUM)0xED), _mm512_set4_epi32(4, 0, 0, 0));
    const __m512i low =
        _mm512_and_si512(P, _mm512_set4_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f));
    const __m512i hq = _mm512_srli_epi32(_mm512_shuffle_epi32(hd, (_MM_PERM_ENUM)0xA5), 2);
    const __m512i R =
        _mm512_ternarylogic_epi32(low, hq, _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0), 0xF8);
    __m512i SC[4];
    SC[0] = _mm512_shuffle_epi8(R, kq_pick(0, 2));
    SC[1] = _mm512_shuffle_epi8(R, kq_pick(1, 3));
    SC[2] = _mm512_shuffle_epi8(R, kq_pick(4, 6));
    SC[3] = _mm512_shuffle_epi8(R, kq_pick(5, 7));
    const int32_t z = (int32_t)0xffffffffu;
    const __m512i MN = _mm512_shuffle_epi8(
        R, _mm512_setr_epi32(z, z, z, z, z, z, z, z, (int32_t)0xffffff08, (int32_t)0xffffff09,
                             (int32_t)0xffffff0a, (int32_t)0xffffff0b, (int32_t)0xffffff0c,
                             (int32_t)0xffffff0d, (int32_t)0xffffff0e, (int32_t)0xffffff0f));
    for (int r = 0; r < nr; r++) {
        const uint8_t *x = xb[r];
        __m512i T = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i D = _mm512_dpbusd_epi32(_mm512_setzero_si512(), W[k],
                                                  _mm512_load_si512((const void *)(x + 64 * k)));
            T = _mm512_dpwssd_epi32(T, D, SC[k]);
        }
        const __m512i U = _mm512_maskz_add_epi32(0x00ff, T, _mm512_shuffle_i32x4(T, T, 0x4E));
        Q[r * qstride] = _mm512_dpwssd_epi32(U, MN, _mm512_load_si512((const void *)(x + 256)));
    }
}

/* Q6_K row at p (one block) against nr activation blocks xb[r]: Q[r] = T. */
VNNI_INLINE void kq_row_q6k(const uint8_t *p, const uint8_t *const *xb, int nr, __m512i *Q, int qstride)
{
    const __m512i lo = _mm512_set1_epi8(0x0f), b45 = _mm512_set1_epi8(0x30);
    const __m512i L0 = _mm512_loadu_si512((const void *)p), L1 = _mm512_loadu_si512((const void *)(p + 64));
    const __m512i H = _mm512_loadu_si512((const void *)(p + 128)), Hs = _mm512_srli_epi16(H, 2);
    /* H0 bytes 0..31: qh[0..31], 32..63: qh[0..31] >> 2 (H1 likewise for qh[32..63]):
     * bits 0..1 complete the low nibbles, bits 4..5 the high ones */
    const __m512i H0 = _mm512_shuffle_i64x2(H, Hs, 0x44), H1 = _mm512_shuffle_i64x2(H, Hs, 0xEE);
    __m512i W[4];
    W[0] = _mm512_or_si512(_mm512_and_si512(L0, lo), _mm512_and_si512(_mm512_slli_epi16(H0, 4), b45));
    W[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L0, 4), lo), _mm512_and_si512(H0, b45));
    W[2] = _mm512_or_si512(_mm512_and_si512(L1, lo), _mm512_and_si512(_mm512_slli_epi16(H1, 4), b45));
    W[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L1, 4), lo), _mm512_and_si512(H1, b45));
    /* 16 signed scales as int16 in the low word of each dword (high word 0); SC[k]
     * lane 4c + t = scale 4k + c */
    const __m512i S =
        _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192))));
    __m512i SC[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        SC[k] =
            _mm512_permutexvar_epi32(_mm512_setr_epi32(4 * k, 4 * k, 4 * k, 4 * k, 4 * k + 1, 4 * k + 1,
                                                       4 * k + 1, 4 * k + 1, 4 * k + 2, 4 * k + 2, 4 * k + 2,
                                                       4 * k + 2, 4 * k + 3, 4 * k + 3, 4 * k + 3, 4 * k + 3),
                                     S);
    for (int r = 0; r < nr; r++) {
        const uint8_t *x = xb[r];
        __m512i T = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i D = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)(x + 256 + 64 * k)), W[k],
                                                  _mm512_load_si512((const void *)(x + 64 * k)));
            T = _mm512_dpwssd_epi32(T, D, SC[k]);
        }
        Q[r * qstride] = T;
    }
}

/* IQ4_XS row at p (one block) against nr activation blocks xb[r]: Q[r] as described
 * in the header. */
VNNI_INLINE void kq_row_iq4xs(const uint8_t *p, const uint8_t *const *xb, int nr, __m512i *Q, int qstride)
{
    const __m512i lo = _mm512_set1_epi8(0x0f), lut = kern_iq4nl_lut();
    const __m512i A = _mm512_loadu_si512((const void *)(p + 8)),
                  B = _mm512_loadu_si512((const void *)(p + 72));
    const __m512i AL = _mm512_shuffle_epi8(lut, _mm512_and_si512(A, lo)),
                  AH = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(A, 4), lo)),
                  BL = _mm512_shuffle_epi8(lut, _mm512_and_si512(B, lo)),
                  BH = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(B, 4), lo));
    /* lane 4s + i of SC_A: scale of sub-block s, of SC_B: of sub-block 4 + s */
    uint32_t sl32;
    uint16_t sh16;
    memcpy(&sl32, p + 4, 4);
    memcpy(&sh16, p + 2, 2);
    const __m512i sl = _mm512_set1_epi32((int32_t)sl32), sh = _mm512_set1_epi32(sh16);
    const __m512i m4 = _mm512_set1_epi32(0xf), m2 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
    const __m512i s4 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m512i s2 = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m512i SCA = _mm512_sub_epi32(
        _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi32(sl, s4), m4),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(sh, s2), m2), 4)),
        k32);
    const __m512i SCB = _mm512_sub_epi32(
        _mm512_or_si512(
            _mm512_and_si512(_mm512_srlv_epi32(sl, _mm512_add_epi32(s4, _mm512_set1_epi32(16))), m4),
            _mm512_slli_epi32(
                _mm512_and_si512(_mm512_srlv_epi32(sh, _mm512_add_epi32(s2, _mm512_set1_epi32(8))), m2), 4)),
        k32);
    for (int r = 0; r < nr; r++) {
        const uint8_t *x = xb[r];
        __m512i DA = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)(x + 256)), AL,
                                         _mm512_load_si512((const void *)x));
        DA = _mm512_dpbusd_epi32(DA, AH, _mm512_load_si512((const void *)(x + 64)));
        __m512i DB = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)(x + 320)), BL,
                                         _mm512_load_si512((const void *)(x + 128)));
        DB = _mm512_dpbusd_epi32(DB, BH, _mm512_load_si512((const void *)(x + 192)));
        Q[r * qstride] = _mm512_add_epi32(_mm512_mullo_epi32(DA, SCA), _mm512_mullo_epi32(DB, SCB));
    }
}

/* One tile of rows jt.. (mask m of valid lanes) for nr activation rows; t is a
 * constant in each inlined copy. */
VNNI_INLINE void kq_tile(kvi_type t, const kern_qgemm_args *a, const tile16 *tl, const kq_act *x, int nr,
                         float *out, int64_t ldo, __mmask16 m, size_t next_rows)
{
    const int64_t nb = a->n_in / QK_K;
    const size_t bb = t == KVI_TYPE_Q6_K     ? sizeof(block_q6_K)
                      : t == KVI_TYPE_Q5_K   ? sizeof(block_q5_K)
                      : t == KVI_TYPE_IQ4_XS ? sizeof(block_iq4_xs)
                                             : sizeof(block_q4_K);
    const size_t rbytes = (size_t)nb * bb; /* one row's blocks */
    const int five = t == KVI_TYPE_Q5_K;
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 acc[KQ_ROWS];
    __m512i Q[KQ_ROWS * 16]; /* [r][l] */
    for (int r = 0; r < KQ_ROWS; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * bb;
        const uint8_t *xb[KQ_ROWS];
        for (int r = 0; r < nr; r++) xb[r] = x[r].blk + (size_t)b * KQ_BLK;
        /* Row l's stream is this tile's row l, then the next tile's (16 rows on):
         * rows are short (768 inputs: 432 bytes), so prefetching only within the
         * row would leave every tile start to a cold miss. */
        const size_t e = o + KQ_PREFETCH, pf = (e / rbytes) * next_rows * a->w_rb + e % rbytes;
        for (int l = 0; l < 16; l++) {
            const uint8_t *p = tl->p[l] + o;
#pragma GCC unroll 4
            for (size_t f = 0; f < bb; f += 64) _mm_prefetch((const char *)(tl->p[l] + pf + f), _MM_HINT_T1);
            if (t == KVI_TYPE_Q6_K)
                kq_row_q6k(p, xb, nr, Q + l, 16);
            else if (t == KVI_TYPE_IQ4_XS)
                kq_row_iq4xs(p, xb, nr, Q + l, 16);
            else
                kq_row_q4k(p, five, xb, nr, Q + l, 16);
        }
        if (t == KVI_TYPE_Q6_K || t == KVI_TYPE_IQ4_XS) {
            const __m512 d = t == KVI_TYPE_Q6_K ? scales16(tl, o + 208, 1) : scales16(tl, o, 0);
            for (int r = 0; r < nr; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[r].dx[b])),
                                         _mm512_cvtepi32_ps(vnni_sum16(Q + 16 * r)), acc[r]);
        } else {
            const __m512i g = gather16_u32(tl, o); /* d | dmin << 16 */
            const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
            const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
            for (int r = 0; r < nr; r++) {
                __m512i isum, msum;
                kq_sums_min(Q + 16 * r, &isum, &msum);
                const __m512 dx = _mm512_set1_ps(x[r].dx[b]);
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum), acc[r]);
                const __m512 nm =
                    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dmin, dx)), sign));
                acc[r] = _mm512_fmadd_ps(nm, _mm512_cvtepi32_ps(msum), acc[r]);
            }
        }
    }
    for (int r = 0; r < nr; r++) _mm512_mask_storeu_ps(out + r * ldo, m, acc[r]);
}

#define KQ_TILE_FN(name, T, NR)                                                                    \
    VNNI static void name(const kern_qgemm_args *a, const tile16 *tl, const kq_act *x, float *out, \
                          int64_t ldo, __mmask16 m, size_t next_rows)                              \
    {                                                                                              \
        kq_tile(T, a, tl, x, NR, out, ldo, m, next_rows);                                          \
    }
KQ_TILE_FN(kq_tile_q4k_1, KVI_TYPE_Q4_K, 1)
KQ_TILE_FN(kq_tile_q4k_2, KVI_TYPE_Q4_K, 2)
KQ_TILE_FN(kq_tile_q4k_3, KVI_TYPE_Q4_K, 3)
KQ_TILE_FN(kq_tile_q4k_4, KVI_TYPE_Q4_K, 4)
KQ_TILE_FN(kq_tile_q5k_1, KVI_TYPE_Q5_K, 1)
KQ_TILE_FN(kq_tile_q5k_2, KVI_TYPE_Q5_K, 2)
KQ_TILE_FN(kq_tile_q5k_3, KVI_TYPE_Q5_K, 3)
KQ_TILE_FN(kq_tile_q5k_4, KVI_TYPE_Q5_K, 4)
KQ_TILE_FN(kq_tile_q6k_1, KVI_TYPE_Q6_K, 1)
KQ_TILE_FN(kq_tile_q6k_2, KVI_TYPE_Q6_K, 2)
KQ_TILE_FN(kq_tile_q6k_3, KVI_TYPE_Q6_K, 3)
KQ_TILE_FN(kq_tile_q6k_4, KVI_TYPE_Q6_K, 4)
KQ_TILE_FN(kq_tile_iq4xs_1, KVI_TYPE_IQ4_XS, 1)
KQ_TILE_FN(kq_tile_iq4xs_2, KVI_TYPE_IQ4_XS, 2)
KQ_TILE_FN(kq_tile_iq4xs_3, KVI_TYPE_IQ4_XS, 3)
KQ_TILE_FN(kq_tile_iq4xs_4, KVI_TYPE_IQ4_XS, 4)

typedef void (*kq_tile_fn)(const kern_qgemm_args *, const tile16 *, const kq_act *, float *, int64_t,
                           __mmask16, size_t);

/* Q4_K / Q5_K / Q6_K / IQ4_XS with 1..KQ_ROWS input rows; 0 when not handled
 * (nothing written). */
VNNI int kern_qgemv_kq_avx512(const kern_qgemm_args *a)
{
    int ti;
    switch (a->type) {
    case KVI_TYPE_Q4_K: ti = 0; break;
    case KVI_TYPE_Q5_K: ti = 1; break;
    case KVI_TYPE_Q6_K: ti = 2; break;
    case KVI_TYPE_IQ4_XS: ti = 3; break;
    default: return 0;
    }
    if (a->n_rows < 1 || a->n_rows > KQ_ROWS || !a->scratch || ((uintptr_t)a->scratch & 63)) return 0;
    if (a->n_in <= 0 || a->n_in % QK_K || a->j0 < 0 || a->j1 <= a->j0) return 0;
    if (a->w_rb > (size_t)INT32_MAX / 16) return 0; /* gather offsets are int32 */
    const int64_t nb = a->n_in / QK_K;
    const int nr = (int)a->n_rows;
    const size_t ab = kq_act_bytes(nb);
    if ((size_t)nr * ab > KVI_QGEMM_SCRATCH(a->n_in)) return 0;
    static const kq_tile_fn fns[4][KQ_ROWS] = {
        { kq_tile_q4k_1, kq_tile_q4k_2, kq_tile_q4k_3, kq_tile_q4k_4 },
        { kq_tile_q5k_1, kq_tile_q5k_2, kq_tile_q5k_3, kq_tile_q5k_4 },
        { kq_tile_q6k_1, kq_tile_q6k_2, kq_tile_q6k_3, kq_tile_q6k_4 },
        { kq_tile_iq4xs_1, kq_tile_iq4xs_2, kq_tile_iq4xs_3, kq_tile_iq4xs_4 }
    };
    kq_act x[KQ_ROWS];
    for (int r = 0; r < nr; r++)
        kq_act_build(a->type, (const kern_q8k *)(a->xq + (size_t)r * a->xq_rb), nb,
                     (uint8_t *)a->scratch + (size_t)r * ab, &x[r]);
    const kq_tile_fn fn = fns[ti][nr - 1];
    int64_t jt = a->j0;
    /* streamed tiles: lane KQ_STREAM_ROWS * s + r = row j0 + s * part + k + r (see the file comment) */
    const int64_t part = (a->j1 - a->j0) / (KQ_STREAMS * KQ_STREAM_ROWS) * KQ_STREAM_ROWS;
    if (part > 0 && (size_t)(KQ_STREAMS * part) * a->w_rb <= (size_t)INT32_MAX) {
        _Alignas(64) float out[KQ_ROWS][16];
        for (int64_t k = 0; k < part; k += KQ_STREAM_ROWS) {
            tile16 tl;
            int64_t row[16];
            for (int l = 0; l < 16; l++)
                row[l] = a->j0 + (l / KQ_STREAM_ROWS) * part + k + l % KQ_STREAM_ROWS;
            tile_init_rows(&tl, a, row);
            fn(a, &tl, x, &out[0][0], 16, (__mmask16)0xFFFF, KQ_STREAM_ROWS);
            for (int r = 0; r < nr; r++)
                for (int l = 0; l < 16; l++) a->y[r * a->ldy + row[l]] = out[r][l];
        }
        jt = a->j0 + KQ_STREAMS * part;
    }
    for (; jt < a->j1; jt += 16) { /* the rest as tiles of consecutive rows */
        const int nv = a->j1 - jt < 16 ? (int)(a->j1 - jt) : 16;
        tile16 tl;
        tile_init(&tl, a, jt, nv);
        fn(a, &tl, x, a->y + jt, a->ldy, (__mmask16)((1u << nv) - 1), 16);
    }
    return 1;
}
