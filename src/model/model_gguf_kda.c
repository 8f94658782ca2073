/*
 * model_gguf_kda.c — binds a KDA layer (Kimi Delta Attention, kimi-linear; model.h's
 * ssm_kda fields) from its GGUF tensors, in ggml order {ne0 = input, ne1 = output}:
 *
 *   attn_q, attn_k, attn_v {dim, Hv dk}  -> wq, wk, wv     [Hv dk][dim]
 *   ssm_conv1d_{q,k,v} {K, 1, Hv dk, 1}  -> conv_w         [3 Hv dk][K]: q | k | v
 *   ssm_f_a {dim, R}, ssm_g_a {dim, R}   -> ssm_f_a, _g_a  [R][dim]
 *   ssm_f_b {R, Hv dk}, ssm_g_b          -> ssm_f_b, _g_b  [Hv dk][R]
 *   ssm_beta {dim, Hv}                   -> ssm_beta       [Hv][dim]
 *   ssm_a {1, Hv, 1, 1}                  -> ssm_a          [Hv] (-exp(A_log))
 *   ssm_dt.bias {Hv dk}                  -> dt_bias        [Hv dk]
 *   ssm_norm {dk}, attn_output {Hv dk, dim} -> ssm_norm, ssm_out
 *
 * Invariant: conv_w is one buffer owned by the model whose channels follow the
 * conv input p = [q | k | v] of fwd_delta.c (the three convs side by side), so the
 * state layout and the conv are the gated DeltaNet's.
 */
#include "model/arch.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* The three conv taps {K, 1, Hv dk, 1} side by side into one owned [3 Hv dk][K]. */
static int bind_kda_conv(gbind *b, int l, kvi_error *err)
{
    struct kvi_model *m = model_gbind_model(b);
    const int64_t K = m->ssm_conv, inner = (int64_t)m->ssm_hv * m->ssm_dk;
    const int64_t ne[4] = { K, 1, inner, 1 };
    static const char *const part[3] = { "q", "k", "v" };
    float *w = model_own(m, malloc((size_t)(3 * inner * K) * sizeof *w)); /* [3 inner][K] */
    if (!w) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    for (int i = 0; i < 3; i++) {
        char n[64];
        const float *src = NULL;
        snprintf(n, sizeof n, "blk.%d.ssm_conv1d_%s.weight", l, part[i]);
        const int rc = model_gbind_f32(b, n, ne, &src, err);
        if (rc) return rc;
        memcpy(w + (size_t)(i * inner * K), src, (size_t)(inner * K) * sizeof *w);
    }
    m->layers[l].conv_w = w;
    return 0;
}

int model_bind_kda(gbind *b, int l, kvi_error *err)
{
    struct kvi_model *m = model_gbind_model(b);
    model_layer *L = &m->layers[l];
    const int64_t dim = m->dim, dk = m->ssm_dk, hv = m->ssm_hv, inner = hv * dk, R = m->ssm_rank;
    const int64_t ne_a[4] = { 1, hv, 1, 1 };
    char n[64];
#define NM(part) (snprintf(n, sizeof n, "blk.%d.%s", l, part), n)
    int rc;
    if ((rc = model_gbind_matrix(b, NM("attn_q.weight"), dim, inner, true, &L->wq, err)) ||
        (rc = model_gbind_matrix(b, NM("attn_k.weight"), dim, inner, true, &L->wk, err)) ||
        (rc = model_gbind_matrix(b, NM("attn_v.weight"), dim, inner, true, &L->wv, err)) ||
        (rc = bind_kda_conv(b, l, err)) ||
        (rc = model_gbind_matrix(b, NM("ssm_f_a.weight"), dim, R, true, &L->ssm_f_a, err)) ||
        (rc = model_gbind_matrix(b, NM("ssm_f_b.weight"), R, inner, true, &L->ssm_f_b, err)) ||
        (rc = model_gbind_matrix(b, NM("ssm_g_a.weight"), dim, R, true, &L->ssm_g_a, err)) ||
        (rc = model_gbind_matrix(b, NM("ssm_g_b.weight"), R, inner, true, &L->ssm_g_b, err)) ||
        (rc = model_gbind_matrix(b, NM("ssm_beta.weight"), dim, hv, true, &L->ssm_beta, err)) ||
        (rc = model_gbind_f32(b, NM("ssm_a"), ne_a, &L->ssm_a, err)) ||
        (rc = model_gbind_vector(b, NM("ssm_dt.bias"), inner, true, &L->dt_bias, err)) ||
        (rc = model_gbind_vector(b, NM("ssm_norm.weight"), dk, true, &L->ssm_norm, err)) ||
        (rc = model_gbind_matrix(b, NM("attn_output.weight"), inner, dim, true, &L->ssm_out, err)))
        return rc;
#undef NM
    return 0;
}
