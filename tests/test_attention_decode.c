/*
 * test_attention_decode.c — the position-lane path of attention (tiles of at most
 * ATTN_POS_MAXQ query vectors: decode rows) against the query-lane path and the
 * plain reference, on random data over long rows (up to ~700 positions, many
 * chunks of scores): every KV cache type (f32, f16, q8_0, q4_0, KIVI q4 keys
 * with q4_0 values; KIVI's last group in f16, the others quantised), GQA groups
 * 1, 4 and 8, head dims 64, 40 and 72 (off the 16-lane width), block sizes 16, 7
 * and 160 (a block longer than a chunk).
 *   - a decode row alone, and two rows of one sequence as one tile, give the same
 *     bits as the same rows inside a 20-row tile (query lanes, which the test of
 *     tiled attention checks across ISAs);
 *   - every ISA the CPU has gives the same bits for the decode rows;
 *   - the decode rows agree with the double-precision reference (2e-5);
 *   - the kernels' f16 conversion equals quant_f16_to_f32 for all 65536 halves
 *     (NaNs compared as NaN) on every ISA;
 *   - the f16 kernels of position lanes (ptrans_f16, pupdate reading f16 values)
 *     give, on random halves, the bits of f16_rows + ptrans and of pupdate over
 *     the converted values, on every ISA that has them (row counts off 16, head
 *     dims off 16, strided rows, columns past nt left untouched).
 */
#include "kvinfer.h"
#include "testutil.h"

#include "attention/attention.h"
#include "attention/attn_kernels.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "formats/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    int heads, kvh, hd, bs;
} shape;

static void decode(kvi_type type, shape sh, int len)
{
    const int kvd = sh.kvh * sh.hd, qd = sh.heads * sh.hd;
    kv_pool kv;
    kvi_error err = { 0 };
    const kvi_type tv = type == KVI_TYPE_KV_Q4 ? KVI_TYPE_Q4_0 : type;
    int rc = kv_pool_init(&kv, 1, kvd, sh.bs, type, tv, (size_t)1 << 25, &err);
    CHECK(rc == 0, "pool %s: %s", kvi_type_name(type), err.msg);
    if (rc) return;
    uint64_t rng = 99 + (uint64_t)type * 7 + (uint64_t)sh.hd * 131 + (uint64_t)sh.bs;
    kv_table t;
    memset(&t, 0, sizeof t);
    CHECK(kv_table_reserve(&kv, &t, len, &err) == 0, "%s", err.msg);
    float *row = malloc((size_t)kvd * sizeof(float));
    for (int p = 0; p < len; p++) {
        t.n_pos = p + 1;
        trand_fill_normal(row, kvd, &rng);
        kv_write_row(&kv, &t, 0, 0, p, row);
        trand_fill_normal(row, kvd, &rng);
        kv_write_row(&kv, &t, 0, 1, p, row);
    }
    /* the last 20 positions of the sequence as one batch (one query-lane tile) */
    enum { N = 20 };
    const kv_table *tabs[N];
    int32_t pos[N];
    for (int r = 0; r < N; r++) {
        tabs[r] = &t;
        pos[r] = len - N + r;
    }
    float *q = malloc((size_t)N * qd * sizeof(float));
    float *tile = malloc((size_t)N * qd * sizeof(float));
    float *ref = malloc((size_t)N * qd * sizeof(float));
    float *one = malloc((size_t)2 * qd * sizeof(float));
    float *isa_out = malloc((size_t)2 * qd * sizeof(float));
    for (int i = 0; i < N * qd; i++) q[i] = 2.0f * trand_normal(&rng);
    tpool *pool = tpool_create(2);
    attn_scratch *sc = attn_scratch_create(tpool_size(pool), sh.bs, sh.hd, sh.heads, sh.kvh, kvd);
    CHECK(sc != NULL, "scratch");
    attn_args a = { .kv = &kv,
                    .layer = 0,
                    .n_rows = N,
                    .tables = tabs,
                    .pos = pos,
                    .q = q,
                    .out = tile,
                    .n_heads = sh.heads,
                    .n_kv_heads = sh.kvh,
                    .head_dim = sh.hd };
    const int group = sh.heads / sh.kvh;
    CHECK(N * group > ATTN_POS_MAXQ, "the batch is a query-lane tile");
    attention_rows(pool, sc, &a);
    a.out = ref;
    attention_rows_ref(&a);
    CHECK(max_abs_diff(tile, ref, (size_t)N * qd) < 2e-5, "%s h%d/%d hd%d bs%d: tile vs reference %g",
          kvi_type_name(type), sh.heads, sh.kvh, sh.hd, sh.bs, max_abs_diff(tile, ref, (size_t)N * qd));

    const kern_isa best = kern_isa_detect(), was = kern_isa_active();
    for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        int bad = 0;
        for (int r = 0; r < N; r++) {
            attn_rows_part(pool, sc, &a, r, 1, one);
            if (memcmp(one, tile + (size_t)r * qd, (size_t)qd * sizeof(float)) != 0) bad++;
        }
        CHECK(bad == 0, "%s h%d/%d hd%d bs%d ISA %s: %d decode rows differ from the tile",
              kvi_type_name(type), sh.heads, sh.kvh, sh.hd, sh.bs, kern_isa_str(kern_isa_active()), bad);
        /* two rows of one sequence: one position-lane tile when 2 * group fits */
        attn_rows_part(pool, sc, &a, N - 2, 2, isa_out);
        CHECK(memcmp(isa_out, tile + (size_t)(N - 2) * qd, (size_t)2 * qd * sizeof(float)) == 0,
              "%s h%d/%d hd%d bs%d ISA %s: a 2-row tile differs", kvi_type_name(type), sh.heads, sh.kvh,
              sh.hd, sh.bs, kern_isa_str(kern_isa_active()));
    }
    kern_isa_set(was);

    attn_scratch_free(sc);
    tpool_free(pool);
    kv_table_release(&kv, &t);
    kv_pool_free(&kv);
    free(row);
    free(q);
    free(tile);
    free(ref);
    free(one);
    free(isa_out);
}

static void f16_all(void)
{
    uint16_t *h = malloc(65536 * sizeof *h);
    float *f = malloc(65536 * sizeof *f);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    const kern_isa best = kern_isa_detect(), was = kern_isa_active();
    for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        /* odd start and length: the vector body and the scalar tail both run */
        attn_kernels_active()->f16_to_f32(h + 1, f + 1, 65535);
        attn_kernels_active()->f16_to_f32(h, f, 1);
        int bad = 0;
        for (int i = 0; i < 65536; i++) {
            const float want = quant_f16_to_f32((quant_f16)i);
            if (isnan(want) ? !isnan(f[i]) : memcmp(&want, &f[i], sizeof want) != 0) bad++;
        }
        CHECK(bad == 0, "ISA %s: %d halves convert differently", kern_isa_str(kern_isa_active()), bad);
    }
    kern_isa_set(was);
    free(h);
    free(f);
}

static uint16_t rand_half(uint64_t *rng)
{
    /* finite halves of every exponent: sign, exponent 0..30, mantissa */
    const uint32_t r = (uint32_t)(trand_u64(rng) >> 11);
    return (uint16_t)((r & 0x8000u) | ((r >> 16) % 31u) << 10 | (r & 0x3FFu));
}

static void f16_kernels(void)
{
    enum { LD = 48, Q = 3, SRC = 96 };
    const int nts[] = { 16, 5, 23, 32 }, hds[] = { 64, 40, 72 };
    uint64_t rng = 4242;
    uint16_t *src = malloc((size_t)32 * SRC * sizeof *src);
    float *rows = malloc((size_t)32 * 80 * sizeof *rows);
    float *want = malloc((size_t)80 * LD * sizeof *want), *got = malloc((size_t)80 * LD * sizeof *got);
    float s0[Q * LD], s1[Q * LD], a0[Q * 80], a1[Q * 80], m0[Q], m1[Q], l0[Q], l1[Q];
    int32_t lim[Q];
    const kern_isa best = kern_isa_detect(), was = kern_isa_active();
    for (int isa = KVI_ISA_SCALAR; isa <= (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        const attn_kernels *kn = attn_kernels_active();
        if (!kn->ptrans_f16 || !kn->pupdate) continue;
        for (size_t a = 0; a < sizeof nts / sizeof nts[0]; a++)
            for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
                const int nt = nts[a], hd = hds[h];
                for (int i = 0; i < 32 * SRC; i++) src[i] = rand_half(&rng);
                for (int t = 0; t < nt; t++)
                    attn_kernels_scalar.f16_to_f32(src + (size_t)t * SRC + 3, rows + (size_t)t * hd, hd);
                for (int i = 0; i < 80 * LD; i++) want[i] = got[i] = -7.0f;
                attn_kernels_scalar.ptrans(rows, nt, hd, want, LD);
                for (int d = 0; d < hd; d++) /* ptrans pads to 16; ptrans_f16 leaves those columns */
                    for (int t = nt; t < LD; t++) want[(size_t)d * LD + t] = -7.0f;
                kn->ptrans_f16(src + 3, SRC, nt, hd, got, LD);
                CHECK(memcmp(want, got, (size_t)80 * LD * sizeof *got) == 0, "ISA %s: ptrans_f16 nt %d hd %d",
                      kern_isa_str(kern_isa_active()), nt, hd);
                /* one block's update: f32 values vs the same values as f16 rows */
                for (int i = 0; i < Q * LD; i++) s0[i] = s1[i] = 3.0f * trand_normal(&rng);
                for (int i = 0; i < Q * hd; i++) a0[i] = a1[i] = trand_normal(&rng);
                for (int i = 0; i < Q; i++) {
                    m0[i] = m1[i] = i == 0 ? -INFINITY : 0.5f;
                    l0[i] = l1[i] = i == 0 ? 0.0f : 1.5f;
                    lim[i] = i == 2 ? nt / 2 : nt;
                }
                attn_pblk b = { .nq = Q,
                                .hd = hd,
                                .nt = nt,
                                .ld = LD,
                                .v = rows,
                                .lim = lim,
                                .s = s0,
                                .m = m0,
                                .l = l0,
                                .acc = a0 };
                attn_kernels_scalar.pupdate(&b);
                b.v = NULL;
                b.vh = src + 3;
                b.vh_stride = SRC;
                b.s = s1;
                b.m = m1;
                b.l = l1;
                b.acc = a1;
                kn->pupdate(&b);
                CHECK(memcmp(a0, a1, (size_t)Q * hd * sizeof *a0) == 0 && memcmp(l0, l1, sizeof l0) == 0 &&
                          memcmp(m0, m1, sizeof m0) == 0,
                      "ISA %s: pupdate from f16 values nt %d hd %d", kern_isa_str(kern_isa_active()), nt, hd);
            }
    }
    kern_isa_set(was);
    free(src);
    free(rows);
    free(want);
    free(got);
}

int main(void)
{
    const kvi_type types[] = { KVI_TYPE_F32, KVI_TYPE_F16, KVI_TYPE_Q8_0, KVI_TYPE_Q4_0, KVI_TYPE_KV_Q4 };
    const shape shapes[] = { { 32, 8, 64, 16 }, { 8, 8, 40, 7 }, { 32, 4, 72, 160 }, { 4, 1, 64, 16 } };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++)
            decode(types[i], shapes[j], j == 2 ? 700 : 300 + 37 * (int)j);
    f16_all();
    f16_kernels();
    return test_main_end();
}
