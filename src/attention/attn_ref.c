/*
 * attn_ref.c — the scalar reference of the attention block kernels
 * (semantics in attn_kernels.h) and the choice of the build to use.
 *
 * The reference spells out the exact operation sequence of every lane; the SIMD
 * builds (attn_avx2.c, attn_avx512.c) perform the same operations lane
 * by lane, and floating-point contraction is off in all of them (-ffp-contract=off,
 * the attention library's build flag in CMakeLists.txt), so every build
 * gives identical bits (tests/test_attention.c checks it).
 */
#include "attention/attn_kernels.h"

#include "kernels/kernels.h"
#include "kv/kv_quant.h"
#include "formats/quant.h"

static void scores_scalar(const attn_blk *b)
{
    const int nqp = b->nqp, hd = b->hd;
    for (int t = 0; t < b->nt; t++) {
        const float *kt = b->k + (size_t)t * hd;
        float *st = b->s + (size_t)t * nqp;
        for (int i = 0; i < nqp; i++) {
            float a = 0.0f;
            for (int d = 0; d < hd; d++) a = fmaf(b->qt[(size_t)d * nqp + i], kt[d], a);
            st[i] = a * b->scale;
        }
    }
}

static void update_scalar(const attn_blk *b)
{
    const int nqp = b->nqp, hd = b->hd, nt = b->nt;
    for (int i = 0; i < nqp; i++) {
        const int lim = b->lim[i];
        float bmax = -INFINITY;
        for (int t = 0; t < lim; t++) {
            const float s = b->s[(size_t)t * nqp + i];
            if (s > bmax) bmax = s;
        }
        if (bmax > b->m[i]) {
            const float c = attn_exp(b->m[i] - bmax);
            b->l[i] *= c;
            for (int d = 0; d < hd; d++) b->acc[(size_t)d * nqp + i] *= c;
            b->m[i] = bmax;
        }
        for (int t = 0; t < nt; t++) {
            float *s = b->s + (size_t)t * nqp + i;
            const float e = t < lim ? attn_exp(*s - b->m[i]) : 0.0f;
            *s = e;
            b->l[i] += e;
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *e = b->s + (size_t)t * nqp;
        const float *vt = b->v + (size_t)t * hd;
        for (int d = 0; d < hd; d++) {
            float *a = b->acc + (size_t)d * nqp;
            for (int i = 0; i < nqp; i++) a[i] = fmaf(e[i], vt[d], a[i]);
        }
    }
}

static void f16_scalar(const uint16_t *src, float *dst, int n)
{
    for (int i = 0; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}

static void ptrans_scalar(const float *k, int n, int hd, float *kt, int ld)
{
    const int np = (n + 15) & ~15;
    for (int d = 0; d < hd; d++)
        for (int t = 0; t < np; t++) kt[(size_t)d * ld + t] = t < n ? k[(size_t)t * hd + d] : 0.0f;
}

static void pscores_scalar(const float *q, int nq, int hd, const float *kt, int ld, int np, float scale,
                           float *s)
{
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < np; t++) {
            float a = 0.0f;
            for (int d = 0; d < hd; d++) a = fmaf(q[(size_t)i * hd + d], kt[(size_t)d * ld + t], a);
            s[(size_t)i * ld + t] = a * scale;
        }
}

static void pupdate_scalar(const attn_pblk *b)
{
    const int hd = b->hd, nt = b->nt;
    for (int i = 0; i < b->nq; i++) {
        float *s = b->s + (size_t)i * b->ld, *acc = b->acc + (size_t)i * hd;
        const int lim = b->lim[i];
        float bmax = -INFINITY;
        for (int t = 0; t < lim; t++)
            if (s[t] > bmax) bmax = s[t];
        if (bmax > b->m[i]) {
            const float c = attn_exp(b->m[i] - bmax);
            b->l[i] *= c;
            for (int d = 0; d < hd; d++) acc[d] *= c;
            b->m[i] = bmax;
        }
        for (int t = 0; t < nt; t++) {
            s[t] = t < lim ? attn_exp(s[t] - b->m[i]) : 0.0f;
            b->l[i] += s[t];
        }
        for (int t = 0; t < nt; t++)
            for (int d = 0; d < hd; d++) {
                const float v =
                    b->vh ? quant_f16_to_f32(b->vh[(size_t)t * b->vh_stride + d]) : b->v[(size_t)t * hd + d];
                acc[d] = fmaf(s[t], v, acc[d]);
            }
    }
}

static void ptrans_f16_scalar(const uint16_t *src, size_t src_stride, int nt, int hd, float *kt, int ld)
{
    for (int d = 0; d < hd; d++)
        for (int t = 0; t < nt; t++)
            kt[(size_t)d * ld + t] = quant_f16_to_f32(src[(size_t)t * src_stride + d]);
}

const attn_kernels attn_kernels_scalar = { scores_scalar,  update_scalar,    f16_scalar,    ptrans_scalar,
                                           pscores_scalar, pupdate_scalar,   kvq_row_slice, kivi_group_slice,
                                           NULL,           ptrans_f16_scalar };

static const attn_kernels *attn_kernels_for(kern_isa isa)
{
    switch (isa) {
    case KVI_ISA_AVX512: return &attn_kernels_avx512;
    case KVI_ISA_AVX2: return &attn_kernels_avx2;
    default: return &attn_kernels_scalar;
    }
}

const attn_kernels *attn_kernels_active(void) { return attn_kernels_for(kern_isa_active()); }

const attn_kernels *attn_kernels_of(const tpool *pool) { return attn_kernels_for(kern_isa_of(pool)); }
