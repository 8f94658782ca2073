/*
 * fwd_mla.c — multi-head latent attention's projections (fwd_mla.h).
 *
 * Data (one chunk of n rows; NH heads, QH = nope + R query dims per head,
 * KR latent width, R RoPE dims, HD = KR + R):
 *   qa  [n][q_rank]    xb Wq_a^T, then RMSNorm (q_a_norm)
 *   qr  [n][NH * QH]   qa Wq_b^T (or xb Wq^T): head h at h * QH, [q_nope | q_pe]
 *   kva [n][KR + R]    xb Wkv_a^T: [c | k_pe] before the norm and RoPE
 * Head h's products with wk_b / wv_b read and write strided slices of the rows
 * (kern_matmul's ldx / ldy), one product per head over all n rows.
 */
#include "forward/fwd_mla.h"

#include "forward/fwd_alloc.h"
#include "forward/fwd_norm.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

#include <stdlib.h>
#include <string.h>

struct fwd_mla {
    float *qa;  /* [chunk][q_rank] */
    float *qr;  /* [chunk][NH * QH] */
    float *kva; /* [chunk][KR + R] */
};

void fwd_mla_free(fwd_mla *s)
{
    if (!s) return;
    free(s->qa);
    free(s->qr);
    free(s->kva);
    free(s);
}

fwd_mla *fwd_mla_create(const struct kvi_model *m, int chunk, size_t *bytes)
{
    fwd_mla *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const size_t c = (size_t)chunk, qh = (size_t)m->mla_nope + (size_t)m->n_rot;
    bool ok = true;
    s->qa = fwd_alloc64((c * (size_t)m->mla_q_rank) * sizeof(float), bytes, &ok);
    s->qr = fwd_alloc64((c * (size_t)m->n_heads * qh) * sizeof(float), bytes, &ok);
    s->kva = fwd_alloc64((c * ((size_t)m->mla_kv_rank + (size_t)m->n_rot)) * sizeof(float), bytes, &ok);
    if (!ok) {
        fwd_mla_free(s);
        return NULL;
    }
    return s;
}

int fwd_mla_qk(fwd_mla *s, tpool *pool, const struct kvi_model *m, const model_layer *L, const float *xb,
               int n, const float *rc, const float *rs, float *q, float *k)
{
    const int nh = m->n_heads, kr = m->mla_kv_rank, R = m->n_rot, half = R / 2, nope = m->mla_nope;
    const int qh = nope + R, hd = m->head_dim, qrank = m->mla_q_rank;
    int rc_ = 0;
    /* one quantisation of xb for both products that read it */
    if (qrank > 0) {
        const kern_tensor *w2[2] = { &L->wq_a, &L->wkv_a };
        float *const y2[2] = { s->qa, s->kva };
        const int64_t ld2[2] = { qrank, kr + R };
        if ((rc_ = kern_matmul_multi(pool, 2, w2, xb, m->dim, n, y2, ld2))) return rc_;
        fwd_rmsnorm_rows(s->qa, s->qa, L->q_a_norm, n, qrank, m->rms_eps);
        if ((rc_ = kern_matmul(pool, &L->wq_b, s->qa, qrank, n, s->qr, (int64_t)nh * qh))) return rc_;
    } else {
        const kern_tensor *w2[2] = { &L->wq, &L->wkv_a };
        float *const y2[2] = { s->qr, s->kva };
        const int64_t ld2[2] = { (int64_t)nh * qh, kr + R };
        if ((rc_ = kern_matmul_multi(pool, 2, w2, xb, m->dim, n, y2, ld2))) return rc_;
    }
    /* cache rows: [rmsnorm(c) | rope(k_pe)]; the queries' RoPE parts (as they are on a no_rope layer) */
    for (int r = 0; r < n; r++) {
        const float *kv = s->kva + (size_t)r * (kr + R), *c = rc + (size_t)r * half,
                    *sn = rs + (size_t)r * half;
        float *kr_row = k + (size_t)r * hd;
        fwd_rmsnorm_rows(kr_row, kv, L->kv_a_norm, 1, kr, m->rms_eps);
        memcpy(kr_row + kr, kv + kr, (size_t)R * sizeof(float));
        if (!L->no_rope) kern_rope_head(kr_row + kr, c, sn, half, m->rope_neox);
        for (int h = 0; h < nh; h++) {
            float *qp = s->qr + (size_t)r * nh * qh + (size_t)h * qh + nope;
            if (!L->no_rope) kern_rope_head(qp, c, sn, half, m->rope_neox);
            memcpy(q + (size_t)r * nh * hd + (size_t)h * hd + kr, qp, (size_t)R * sizeof(float));
        }
    }
    /* each head's q_nope into the latent space: q[h][0..KR) = k_b[h] q_nope */
    for (int h = 0; h < nh; h++) {
        const kern_tensor kb = kern_tensor_rows(&L->wk_b, (int64_t)h * kr, kr);
        if ((rc_ = kern_matmul(pool, &kb, s->qr + (size_t)h * qh, (int64_t)nh * qh, n, q + (size_t)h * hd,
                               (int64_t)nh * hd)))
            return rc_;
    }
    return 0;
}

const float *fwd_mla_qa(const fwd_mla *s) { return s->qa; }

int fwd_mla_values(tpool *pool, const struct kvi_model *m, const model_layer *L, const float *att, int n,
                   float *out)
{
    const int nh = m->n_heads, hd = m->head_dim, vh = m->mla_v_dim;
    for (int h = 0; h < nh; h++) {
        const kern_tensor vb = kern_tensor_rows(&L->wv_b, (int64_t)h * vh, vh);
        const int rc = kern_matmul(pool, &vb, att + (size_t)h * hd, (int64_t)nh * hd, n, out + (size_t)h * vh,
                                   (int64_t)nh * vh);
        if (rc) return rc;
    }
    return 0;
}
