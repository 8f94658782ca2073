/*
 * r16_pack.c — repacking Q8_0 / Q4_0 / IQ4_NL / MXFP4 / Q4_K / Q6_K matrices into the R16 layout and back
 * (the layout and its invariants: r16_pack.h).
 *
 * Plain byte moves, written for clarity; the repack of a model runs once at load,
 * split over threads by whole tiles (each thread owns tiles [T*i/n, T*(i+1)/n) and
 * one tile-sized buffer).
 */
#include "kernels/r16_pack.h"

#include "kernels/kernels_int.h"
#include "kernels/r16.h"
#include "kernels/vnni_avx512.h"
#include "formats/quant.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

bool kern_r16_preferred(void)
{
    const kern_table *t = kern_table_active();
    return t->r16_preferred && t->r16_preferred();
}

bool kern_r16_eligible(const kern_tensor *W)
{
    if (!W || !W->data || W->layout != KVI_LAYOUT_ROWS || W->n_out <= 0 || W->n_out % 16 || W->n_in <= 0)
        return false;
    if (W->type == KVI_TYPE_Q4_K || W->type == KVI_TYPE_Q6_K) return W->n_in % QK_K == 0;
    return (W->type == KVI_TYPE_Q8_0 || W->type == KVI_TYPE_Q4_0 || W->type == KVI_TYPE_IQ4_NL ||
            W->type == KVI_TYPE_MXFP4) &&
           W->n_in % 64 == 0;
}

/* ---- Q4_K: supers of 2304 bytes (r16_pack.h) ---- */

_Static_assert(KVI_R16_Q4K_SUPER == 16 * sizeof(block_q4_K), "Q4_K super");
_Static_assert(KVI_R16_Q6K_SUPER == 16 * sizeof(block_q6_K), "Q6_K super");

/* Value e (of E0..E3 as one 256-byte array: array e / 64, byte e % 64) of a super:
 * nibble (a % 2) of NL / NH byte i, bits 2a, 2a+1 of HB byte i. */
static uint8_t k4_get(const uint8_t *sup, int e)
{
    const int a = e / 64, i = e % 64;
    const uint8_t n = sup[KVI_R16_Q4K_NL + 64 * (a / 2) + i], h = sup[KVI_R16_Q4K_HB + i];
    return (uint8_t)(((n >> (4 * (a % 2))) & 15) | ((h >> (2 * a)) & 3) << 4);
}

static void k4_set(uint8_t *sup, int e, uint8_t v)
{
    const int a = e / 64, i = e % 64;
    uint8_t *n = &sup[KVI_R16_Q4K_NL + 64 * (a / 2) + i], *h = &sup[KVI_R16_Q4K_HB + i];
    const int ns = 4 * (a % 2), hs = 2 * a;
    *n = (uint8_t)((*n & ~(15 << ns)) | (v & 15) << ns);
    *h = (uint8_t)((*h & ~(3 << hs)) | (v >> 4) << hs);
}

/* One Q4_K row's blocks <-> its lane of the tile. */
static void k4_move_row(int64_t nb, int lane, uint8_t *row, uint8_t *tile, bool to_tile)
{
    for (int64_t b = 0; b < nb; b++) {
        block_q4_K *blk = (block_q4_K *)(row + (size_t)b * sizeof(block_q4_K));
        uint8_t *sup = tile + (size_t)b * KVI_R16_Q4K_SUPER;
        uint8_t sc[8], mn[8];
        if (to_tile) {
            memcpy(sup + 2 * lane, &blk->d, 2);
            memcpy(sup + KVI_R16_Q4K_DMIN + 2 * lane, &blk->dmin, 2);
            for (int s = 0; s < 8; s++) {
                quant_scale_min_k4(s, blk->scales, &sc[s], &mn[s]);
                k4_set(sup, kern_r16_q4_sc_at(s, lane), sc[s]);
                k4_set(sup, kern_r16_q4_mn_at(s, lane), mn[s]);
            }
            for (int v = 0; v < 32; v++) memcpy(sup + KVI_R16_Q4K_QS + 64 * v + 4 * lane, blk->qs + 4 * v, 4);
        } else {
            memcpy(&blk->d, sup + 2 * lane, 2);
            memcpy(&blk->dmin, sup + KVI_R16_Q4K_DMIN + 2 * lane, 2);
            for (int s = 0; s < 8; s++) {
                sc[s] = k4_get(sup, kern_r16_q4_sc_at(s, lane));
                mn[s] = k4_get(sup, kern_r16_q4_mn_at(s, lane));
            }
            quant_pack_scale_min_k4(sc, mn, blk->scales);
            for (int v = 0; v < 32; v++) memcpy(blk->qs + 4 * v, sup + KVI_R16_Q4K_QS + 64 * v + 4 * lane, 4);
        }
    }
}

/* Geometry of one type: block bytes, scale bytes, quant vectors, XOR mask. */
typedef struct r16_geom {
    size_t bb;    /* bytes of one block in rows layout (34, 18 or 17) */
    size_t sb;    /* bytes of its scale, at the block's start (f16: 2; MXFP4's e: 1) */
    int qv;       /* 64-byte quant vectors per block (8 or 4) */
    uint8_t flip; /* XOR applied to the quants (Q8_0: 0x80) */
    size_t pair;  /* bytes of one pair of blocks of the 16 rows */
} r16_geom;

static r16_geom geom(kvi_type t)
{
    r16_geom g;
    g.bb = quant_block_bytes(t);
    g.qv = t == KVI_TYPE_Q8_0 ? 8 : 4;
    g.sb = g.bb - 4 * (size_t)g.qv;
    g.flip = t == KVI_TYPE_Q8_0 ? 0x80 : 0x00;
    g.pair = 2 * 16 * g.bb;
    return g;
}

/* Where block b of row `lane` lives inside an R16 tile: its scale and the first
 * byte of its quants' lane in vector 0 (vector k is 64 * k further). */
static void locate(const r16_geom *g, int64_t b, int lane, size_t *scale, size_t *q0)
{
    const size_t base = (size_t)(b / 2) * g->pair;
    const int h = (int)(b % 2);
    *scale = base + 16 * g->sb * (size_t)h + g->sb * (size_t)lane;
    *q0 = base + 32 * g->sb + (size_t)h * (size_t)g->qv * 64 + 4 * (size_t)lane;
}

/* One row's blocks <-> its lane of the tile; to_tile selects the direction. */
static void move_row(const r16_geom *g, int64_t nb, int lane, uint8_t *row, uint8_t *tile, bool to_tile)
{
    for (int64_t b = 0; b < nb; b++) {
        size_t sc, q0;
        locate(g, b, lane, &sc, &q0);
        uint8_t *blk = row + (size_t)b * g->bb; /* [bb]: the scale (sb bytes), then the quants */
        for (int k = 0; k < g->qv; k++)
            for (int i = 0; i < 4; i++) {
                uint8_t *t = tile + q0 + 64 * (size_t)k + (size_t)i, *r = blk + g->sb + 4 * k + i;
                if (to_tile)
                    *t = (uint8_t)(*r ^ g->flip);
                else
                    *r = (uint8_t)(*t ^ g->flip);
            }
        if (to_tile)
            memcpy(tile + sc, blk, g->sb);
        else
            memcpy(blk, tile + sc, g->sb);
    }
}

/* ---- Q6_K: supers of 3360 bytes (r16_pack.h) ---- */

static void k6_move_row(int64_t nb, int lane, uint8_t *row, uint8_t *tile, bool to_tile)
{
    for (int64_t b = 0; b < nb; b++) {
        block_q6_K *blk = (block_q6_K *)(row + (size_t)b * sizeof(block_q6_K));
        uint8_t *sup = tile + (size_t)b * KVI_R16_Q6K_SUPER, *sc = sup + KVI_R16_Q6K_SC + lane;
        if (to_tile) {
            memcpy(sup + 2 * lane, &blk->d, 2);
            for (int s = 0; s < 16; s++) sc[16 * s] = (uint8_t)blk->scales[s];
            for (int v = 0; v < 32; v++) memcpy(sup + kern_r16_q6_ql(v) + 4 * lane, blk->ql + 4 * v, 4);
            for (int u = 0; u < 16; u++) memcpy(sup + kern_r16_q6_qh(u) + 4 * lane, blk->qh + 4 * u, 4);
        } else {
            memcpy(&blk->d, sup + 2 * lane, 2);
            for (int s = 0; s < 16; s++) blk->scales[s] = (int8_t)sc[16 * s];
            for (int v = 0; v < 32; v++) memcpy(blk->ql + 4 * v, sup + kern_r16_q6_ql(v) + 4 * lane, 4);
            for (int u = 0; u < 16; u++) memcpy(blk->qh + 4 * u, sup + kern_r16_q6_qh(u) + 4 * lane, 4);
        }
    }
}

/* One row of any R16 type <-> its lane of the tile. */
static void move_lane(kvi_type t, int64_t n_in, int lane, uint8_t *row, uint8_t *tile, bool to_tile)
{
    if (t == KVI_TYPE_Q4_K) {
        k4_move_row(n_in / QK_K, lane, row, tile, to_tile);
    } else if (t == KVI_TYPE_Q6_K) {
        k6_move_row(n_in / QK_K, lane, row, tile, to_tile);
    } else {
        const r16_geom g = geom(t);
        move_row(&g, n_in / 32, lane, row, tile, to_tile);
    }
}

void kern_r16_from_rows(kvi_type t, const uint8_t *src, int64_t n_in, uint8_t *dst)
{
    const size_t rb = quant_row_bytes(t, n_in);
    for (int l = 0; l < 16; l++) move_lane(t, n_in, l, (uint8_t *)src + (size_t)l * rb, dst, true);
}

void kern_r16_to_rows(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *dst)
{
    const size_t rb = quant_row_bytes(t, n_in);
    for (int l = 0; l < 16; l++) move_lane(t, n_in, l, dst + (size_t)l * rb, (uint8_t *)tile, false);
}

void kern_r16_row(kvi_type t, const uint8_t *tile, int64_t n_in, int lane, uint8_t *dst)
{
    move_lane(t, n_in, lane, dst, (uint8_t *)tile, false);
}

typedef struct repack_job {
    kern_tensor *const *W; /* [n_w] the matrices, their tiles taken in order */
    int n_w;
    int64_t t0, t1; /* tiles [t0, t1) of that concatenated order */
    uint8_t *buf;   /* [16 * largest row_bytes] */
    bool simd;      /* kern_r16_from_rows_avx512 (the same bytes) */
} repack_job;

static void *repack_run(void *v)
{
    repack_job *j = v;
    int64_t first = 0; /* the concatenated index of matrix i's tile 0 */
    for (int i = 0; i < j->n_w && first < j->t1; first += j->W[i]->n_out / 16, i++) {
        const kern_tensor *W = j->W[i];
        const int64_t nt = W->n_out / 16;
        const int64_t a = j->t0 > first ? j->t0 - first : 0, b = j->t1 - first < nt ? j->t1 - first : nt;
        const size_t tb = 16 * quant_row_bytes(W->type, W->n_in);
        uint8_t *base = (uint8_t *)W->data;
        for (int64_t t = a; t < b; t++) {
            memcpy(j->buf, base + (size_t)t * tb, tb);
            if (j->simd)
                kern_r16_from_rows_avx512(W->type, j->buf, W->n_in, base + (size_t)t * tb);
            else
                kern_r16_from_rows(W->type, j->buf, W->n_in, base + (size_t)t * tb);
        }
    }
    return NULL;
}

#define R16_THREADS_MAX 16

int kern_r16_repack_many(kern_tensor *const *W, int n_w, int n_threads)
{
    int64_t n_tiles = 0;
    size_t tb_max = 0;
    for (int i = 0; i < n_w; i++) {
        if (!kern_r16_eligible(W[i])) return KVI_E_INVALID;
        for (int k = 0; k < i; k++)
            if (W[k]->data == W[i]->data) return KVI_E_INVALID; /* the same bytes twice */
        n_tiles += W[i]->n_out / 16;
        const size_t tb = 16 * quant_row_bytes(W[i]->type, W[i]->n_in);
        if (tb > tb_max) tb_max = tb;
    }
    if (n_tiles == 0) return 0;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > R16_THREADS_MAX) n_threads = R16_THREADS_MAX;
    if (n_threads > n_tiles) n_threads = (int)n_tiles;
    const bool simd = kern_r16_preferred();
    repack_job job[R16_THREADS_MAX];
    int rc = 0;
    for (int i = 0; i < n_threads; i++) {
        job[i] = (repack_job){
            W, n_w, n_tiles * i / n_threads, n_tiles * (i + 1) / n_threads, malloc(tb_max), simd
        };
        if (!job[i].buf) rc = KVI_E_NOMEM;
    }
    if (rc == 0) {
        pthread_t th[R16_THREADS_MAX];
        bool started[R16_THREADS_MAX] = { false };
        for (int i = 1; i < n_threads; i++)
            started[i] = pthread_create(&th[i], NULL, repack_run, &job[i]) == 0;
        repack_run(&job[0]);
        for (int i = 1; i < n_threads; i++) {
            if (started[i])
                pthread_join(th[i], NULL);
            else
                repack_run(&job[i]); /* no thread: do its tiles here */
        }
        for (int i = 0; i < n_w; i++) W[i]->layout = KVI_LAYOUT_R16;
    }
    for (int i = 0; i < n_threads; i++) free(job[i].buf);
    return rc;
}

int kern_r16_repack(kern_tensor *W, int n_threads) { return kern_r16_repack_many(&W, 1, n_threads); }

bool kern_prepare_wanted(void) { return kern_r16_preferred(); }

int kern_prepare_weights(kern_tensor *const *W, int n, int n_threads)
{
    if (n < 0 || (n > 0 && !W)) return KVI_E_INVALID;
    if (!kern_r16_preferred() || n == 0) return KVI_OK;
    kern_tensor **pick = malloc((size_t)n * sizeof *pick); /* [n] the eligible ones */
    if (!pick) return KVI_E_NOMEM;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (kern_r16_eligible(W[i])) pick[k++] = W[i];
    const int rc = kern_r16_repack_many(pick, k, n_threads);
    free(pick);
    return rc;
}
