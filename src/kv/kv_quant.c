/*
 * kv_quant.c — KV element formats: region sizes, row slices, KIVI key groups,
 * the per-table f16 tail and the per-batch stash (layout and invariants in
 * kv_quant.h).
 */
#include "kv/kv_quant.h"

#include "base/error.h"
#include "kernels/actq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_row_type(kvi_type t)
{
    return t == KVI_TYPE_F32 || t == KVI_TYPE_F16 || t == KVI_TYPE_Q8_0 || t == KVI_TYPE_Q4_0;
}

size_t kvq_k_region_bytes(kvi_type tk, int kv_dim, int block_size)
{
    if (kv_dim <= 0 || block_size <= 0) return 0;
    if (tk == KVI_TYPE_KV_Q4) {
        if (kv_dim % 2) return 0;
        const size_t b = 4 * (size_t)kv_dim + (size_t)block_size * (size_t)kv_dim / 2;
        return (b + 15) & ~(size_t)15;
    }
    if (!is_row_type(tk)) return 0;
    return (size_t)block_size * quant_row_bytes(tk, kv_dim);
}

size_t kvq_v_region_bytes(kvi_type tv, int kv_dim, int block_size)
{
    if (tv == KVI_TYPE_KV_Q4) tv = KVI_TYPE_Q4_0;
    if (!is_row_type(tv) || kv_dim <= 0 || block_size <= 0) return 0;
    return (size_t)block_size * quant_row_bytes(tv, kv_dim);
}

size_t kvq_tail_bytes(kvi_type tk, int n_layers, int kv_dim, int block_size)
{
    if (tk != KVI_TYPE_KV_Q4 || n_layers <= 0) return 0;
    return (size_t)n_layers *
           (sizeof(kivi_tail_hdr) + (size_t)block_size * (size_t)kv_dim * sizeof(quant_f16));
}

void kvq_row_slice(kvi_type t, const uint8_t *row, int off, int n, float *dst)
{
    switch (t) {
    case KVI_TYPE_F32: memcpy(dst, (const float *)row + off, (size_t)n * sizeof(float)); break;
    case KVI_TYPE_F16: {
        const quant_f16 *h = (const quant_f16 *)row + off;
        for (int i = 0; i < n; i++) dst[i] = quant_f16_to_f32(h[i]);
        break;
    }
    case KVI_TYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)row;
        for (int i = 0; i < n; i++) {
            const int e = off + i;
            const block_q8_0 *x = b + e / QK8_0;
            dst[i] = (float)x->qs[e % QK8_0] * quant_f16_to_f32(x->d);
        }
        break;
    }
    case KVI_TYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)row;
        for (int i = 0; i < n; i++) {
            const int e = off + i, j = e % QK4_0;
            const block_q4_0 *x = b + e / QK4_0;
            const int q = j < QK4_0 / 2 ? (x->qs[j] & 0x0F) : (x->qs[j - QK4_0 / 2] >> 4);
            dst[i] = (float)(q - 8) * quant_f16_to_f32(x->d);
        }
        break;
    }
    default: memset(dst, 0, (size_t)n * sizeof(float)); break;
    }
}

/* ---- KIVI key groups ---------------------------------------------------- */

void kivi_group_slice(const uint8_t *region, int kv_dim, int i, int off, int n, float *dst)
{
    const quant_f16 *d = (const quant_f16 *)region;
    const quant_f16 *mn = d + kv_dim;
    const uint8_t *q = region + 4 * (size_t)kv_dim + (size_t)i * (size_t)(kv_dim / 2);
    for (int k = 0; k < n; k++) {
        const int c = off + k;
        const int code = (c & 1) ? (q[c >> 1] >> 4) : (q[c >> 1] & 0x0F);
        dst[k] = (float)code * quant_f16_to_f32(d[c]) + quant_f16_to_f32(mn[c]);
    }
}

/* One channel's 4-bit code of x given the stored (rounded) scale and minimum. */
static inline int kivi_code(float x, float mn, float inv_d)
{
    int q = (int)floorf((x - mn) * inv_d + 0.5f);
    return q < 0 ? 0 : (q > 15 ? 15 : q);
}

/* Quantises rows [n_rows][kv_dim]; codes of rows n_rows..block_size-1 are zero. */
static void group_quantize(const quant_f16 *rows, int n_rows, int kv_dim, int block_size, uint8_t *region)
{
    quant_f16 *d = (quant_f16 *)region;
    quant_f16 *mn = d + kv_dim;
    uint8_t *q = region + 4 * (size_t)kv_dim;
    const size_t rb = (size_t)kv_dim / 2;
    for (int c = 0; c < kv_dim; c += 2) {
        float lo[2] = { INFINITY, INFINITY }, hi[2] = { -INFINITY, -INFINITY };
        for (int i = 0; i < n_rows; i++)
            for (int k = 0; k < 2; k++) {
                const float x = quant_f16_to_f32(rows[(size_t)i * kv_dim + c + k]);
                if (x < lo[k]) lo[k] = x;
                if (x > hi[k]) hi[k] = x;
            }
        float mf[2], inv[2];
        for (int k = 0; k < 2; k++) {
            if (n_rows <= 0 || !(hi[k] >= lo[k])) lo[k] = hi[k] = 0.0f;
            d[c + k] = quant_f32_to_f16((hi[k] - lo[k]) / 15.0f);
            mn[c + k] = quant_f32_to_f16(lo[k]);
            const float df = quant_f16_to_f32(d[c + k]);
            mf[k] = quant_f16_to_f32(mn[c + k]);
            inv[k] = df > 0.0f && isfinite(df) ? 1.0f / df : 0.0f;
        }
        for (int i = 0; i < n_rows; i++) {
            const quant_f16 *r = rows + (size_t)i * kv_dim + c;
            const int q0 = kivi_code(quant_f16_to_f32(r[0]), mf[0], inv[0]);
            const int q1 = kivi_code(quant_f16_to_f32(r[1]), mf[1], inv[1]);
            q[(size_t)i * rb + (size_t)(c >> 1)] = (uint8_t)(q0 | (q1 << 4));
        }
    }
    for (int i = n_rows < 0 ? 0 : n_rows; i < block_size; i++) memset(q + (size_t)i * rb, 0, rb);
}

void kivi_group_quantize(const quant_f16 *rows, int n_rows, int kv_dim, uint8_t *region)
{
    group_quantize(rows, n_rows, kv_dim, n_rows, region);
}

/* ---- per-batch stash ---------------------------------------------------- */

void kv_stash_init(kv_stash *s) { memset(s, 0, sizeof *s); }

void kv_stash_free(kv_stash *s)
{
    free(s->tables);
    free(s->groups);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

void kv_stash_begin(kv_stash *s, int layer)
{
    s->epoch = s->epoch == INT32_MAX ? 1 : s->epoch + 1;
    s->layer = layer;
    s->n = 0;
}

/* Keeps a copy of group g's f16 rows; on out of memory the group is simply not
 * kept and its rows read the quantised group (never a crash). */
static void stash_push(kv_stash *s, const kv_pool *p, const kv_table *t, int32_t g, const quant_f16 *rows)
{
    const size_t ge = (size_t)p->block_size * (size_t)p->kv_dim;
    if (s->group_elems != ge) {
        free(s->rows);
        s->rows = NULL;
        s->cap = 0;
        s->n = 0;
        s->group_elems = ge;
    }
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 4;
        const kv_table **nt = realloc(s->tables, (size_t)cap * sizeof *nt);
        if (!nt) return;
        s->tables = nt;
        int32_t *ng = realloc(s->groups, (size_t)cap * sizeof *ng);
        if (!ng) return;
        s->groups = ng;
        quant_f16 *nr = realloc(s->rows, (size_t)cap * ge * sizeof *nr);
        if (!nr) return;
        s->rows = nr;
        s->cap = cap;
    }
    s->tables[s->n] = t;
    s->groups[s->n] = g;
    memcpy(s->rows + (size_t)s->n * ge, rows, ge * sizeof *rows);
    s->n++;
}

const quant_f16 *kivi_group_f16(const kv_pool *p, const kv_table *t, int l, int32_t g, const kv_stash *s)
{
    if (t->tail) {
        kivi_tail_hdr *h = kivi_tail_part(p, t, l);
        if (h->group == g) return kivi_tail_rows(h);
    }
    if (s && s->epoch > 0 && s->layer == l)
        for (int i = s->n - 1; i >= 0; i--)
            if (s->tables[i] == t && s->groups[i] == g) return s->rows + (size_t)i * s->group_elems;
    return NULL;
}

/* ---- per-table tail ----------------------------------------------------- */

static int tail_alloc(kv_pool *p, kv_table *t)
{
    if (t->tail) return 0;
    t->tail = calloc(1, p->tail_bytes);
    if (!t->tail) return KVI_E_NOMEM;
    p->n_tails++;
    p->bytes_sys += p->tail_bytes;
    for (int l = 0; l < p->n_layers; l++) kivi_tail_part(p, t, l)->group = -1;
    return 0;
}

int kivi_tail_alloc(kv_pool *p, kv_table *t) { return tail_alloc(p, t); }

void kivi_tail_fit(const kv_pool *p, kv_table *t, int32_t n_pos)
{
    if (p->tail_bytes == 0 || !t->tail || n_pos <= 0) return;
    const int bs = p->block_size;
    const int32_t g = (n_pos - 1) / bs;
    const int n = (int)(n_pos - g * bs);
    for (int l = 0; l < p->n_layers; l++) {
        kivi_tail_hdr *h = kivi_tail_part(p, t, l);
        if (h->group != g) continue;
        if (h->n_rows > n) h->n_rows = n;
        h->epoch = 0;
        group_quantize(kivi_tail_rows(h), h->n_rows, p->kv_dim, bs, kv_k_group(p, t, l, g));
    }
}

int kv_table_copy_tail(kv_pool *p, kv_table *dst, const kv_table *src, kvi_error *err)
{
    if (p->tail_bytes == 0 || !src->tail) return 0;
    if (tail_alloc(p, dst) != 0)
        return err_set(err, KVI_E_NOMEM, "kv cache: cannot allocate a key tail of %zu bytes", p->tail_bytes);
    memcpy(dst->tail, src->tail, p->tail_bytes);
    for (int l = 0; l < p->n_layers; l++) kivi_tail_part(p, dst, l)->epoch = 0;
    return 0;
}

void kivi_write_key(kv_pool *p, kv_table *t, int l, int32_t pos, const float *in, kv_stash *s)
{
    const int bs = p->block_size, kvd = p->kv_dim;
    const int32_t g = pos / bs;
    const int off = (int)(pos % bs);
    uint8_t *region = kv_k_group(p, t, l, g);
    if (tail_alloc(p, t) != 0) {
        /* out of memory: quantise this row alone into its slot (lossy, never a crash) */
        if (t->lossy_block == 0 || t->lossy_block > g + 1) t->lossy_block = g + 1;
        quant_f16 h[2];
        for (int c = 0; c + 1 < kvd; c += 2) {
            h[0] = quant_f32_to_f16(in[c]);
            h[1] = quant_f32_to_f16(in[c + 1]);
            uint8_t *q = region + 4 * (size_t)kvd + (size_t)off * (size_t)(kvd / 2) + (size_t)(c >> 1);
            quant_f16 *d = (quant_f16 *)region, *mn = d + kvd;
            const float x0 = quant_f16_to_f32(h[0]), x1 = quant_f16_to_f32(h[1]);
            const float i0 = quant_f16_to_f32(d[c]) > 0 ? 1.0f / quant_f16_to_f32(d[c]) : 0.0f;
            const float i1 = quant_f16_to_f32(d[c + 1]) > 0 ? 1.0f / quant_f16_to_f32(d[c + 1]) : 0.0f;
            *q = (uint8_t)(kivi_code(x0, quant_f16_to_f32(mn[c]), i0) |
                           (kivi_code(x1, quant_f16_to_f32(mn[c + 1]), i1) << 4));
        }
        return;
    }
    kivi_tail_hdr *h = kivi_tail_part(p, t, l);
    quant_f16 *rows = kivi_tail_rows(h);
    int32_t have = t->n_pos - g * bs; /* rows of group g already in the cache */
    if (have < 0) have = 0;
    if (have > bs) have = bs;
    if (h->group != g) {
        /* the tail moves on: keep the old group's exact keys while this batch needs them */
        if (s && s->epoch > 0 && s->layer == l && h->group >= 0 && h->epoch == s->epoch)
            stash_push(s, p, t, h->group, rows);
        /* rows of g that exist only as codes come back rounded: g is lossy from now on */
        if (have > 0 && (t->lossy_block == 0 || t->lossy_block > g + 1)) t->lossy_block = g + 1;
        float tmp[64];
        for (int i = 0; i < have; i++)
            for (int c0 = 0; c0 < kvd; c0 += 64) {
                const int n = kvd - c0 < 64 ? kvd - c0 : 64;
                kivi_group_slice(region, kvd, i, c0, n, tmp);
                kern_f32_to_f16_row(tmp, rows + (size_t)i * kvd + c0, n);
            }
        h->group = g;
        h->n_rows = have;
        h->epoch = 0;
    } else if (h->n_rows > have) {
        /* rows past the table's length that this batch has not written are stale */
        h->n_rows = have > off ? have : off;
    }
    kern_f32_to_f16_row(in, rows + (size_t)off * kvd, kvd); /* = quant_f32_to_f16 each */
    if (h->n_rows < off + 1) h->n_rows = off + 1;
    if (s && s->epoch > 0 && s->layer == l && off < bs - 1) h->epoch = s->epoch;
    group_quantize(rows, h->n_rows, kvd, bs, region);
}

void kivi_read_key(const kv_pool *p, const kv_table *t, int l, int32_t pos, float *out)
{
    const int bs = p->block_size, kvd = p->kv_dim;
    const int32_t g = pos / bs;
    const int off = (int)(pos % bs);
    if (t->tail) {
        kivi_tail_hdr *h = kivi_tail_part(p, t, l);
        if (h->group == g && off < h->n_rows) {
            const quant_f16 *r = kivi_tail_rows(h) + (size_t)off * kvd;
            for (int c = 0; c < kvd; c++) out[c] = quant_f16_to_f32(r[c]);
            return;
        }
    }
    kivi_group_slice(kv_k_group(p, t, l, g), kvd, off, 0, kvd, out);
}
