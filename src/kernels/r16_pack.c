/*
 * r16_pack.c — repacking Q8_0 / Q4_0 / IQ4_NL / MXFP4 matrices into the R16 layout and back
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
    return W && W->data && W->layout == KVI_LAYOUT_ROWS &&
           (W->type == KVI_TYPE_Q8_0 || W->type == KVI_TYPE_Q4_0 || W->type == KVI_TYPE_IQ4_NL ||
            W->type == KVI_TYPE_MXFP4) &&
           W->n_out > 0 && W->n_out % 16 == 0 && W->n_in > 0 && W->n_in % 64 == 0;
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

void kern_r16_from_rows(kvi_type t, const uint8_t *src, int64_t n_in, uint8_t *dst)
{
    const r16_geom g = geom(t);
    const size_t rb = quant_row_bytes(t, n_in);
    for (int l = 0; l < 16; l++) move_row(&g, n_in / 32, l, (uint8_t *)src + (size_t)l * rb, dst, true);
}

void kern_r16_to_rows(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *dst)
{
    const r16_geom g = geom(t);
    const size_t rb = quant_row_bytes(t, n_in);
    for (int l = 0; l < 16; l++) move_row(&g, n_in / 32, l, dst + (size_t)l * rb, (uint8_t *)tile, false);
}

void kern_r16_row(kvi_type t, const uint8_t *tile, int64_t n_in, int lane, uint8_t *dst)
{
    const r16_geom g = geom(t);
    move_row(&g, n_in / 32, lane, dst, (uint8_t *)tile, false);
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
