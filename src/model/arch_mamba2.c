/*
 * arch_mamba2.c — the layer kinds and ssm.* keys of the Mamba-2 hybrids (arch.h
 * model_mamba2_layers): granitehybrid, nemotron_h, falcon-h1.
 *
 * Invariant: sets only the model's ssm_* fields, n_recurrent and the layers'
 * recurrent / no_mixer / no_ffn flags; at least one layer keeps attention.
 */
#include "model/arch.h"

#include "base/error.h"

#include <stdlib.h>

int model_ssm_keys(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc;
    if ((rc = model_gguf_int(g, m->arch, "ssm.conv_kernel", true, 0, 2, 64, &m->ssm_conv, err)) ||
        (rc =
             model_gguf_int(g, m->arch, "ssm.state_size", true, 0, 1, MODEL_MAX_HEAD_DIM, &m->ssm_dk, err)) ||
        (rc = model_gguf_int(g, m->arch, "ssm.group_count", true, 0, 1, MODEL_MAX_HEADS, &m->ssm_hk, err)) ||
        (rc = model_gguf_int(g, m->arch, "ssm.time_step_rank", true, 0, 1, MODEL_MAX_HEADS, &m->ssm_hv,
                             err)) ||
        (rc = model_gguf_int(g, m->arch, "ssm.inner_size", true, 0, 1, MODEL_MAX_DIM, &m->ssm_inner, err)))
        return rc;
    return 0;
}

int model_mamba2_keys(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    const int rc = model_ssm_keys(m, g, err);
    if (rc) return rc;
    m->ssm_kind = MODEL_SSM_MAMBA2;
    if (m->ssm_hv % m->ssm_hk != 0 || m->ssm_inner % m->ssm_hv != 0)
        return err_set(
            err, KVI_E_FORMAT,
            "gguf: Mamba-2: %d heads are not a multiple of %d groups, or inner_size %d does not split "
            "into them",
            m->ssm_hv, m->ssm_hk, m->ssm_inner);
    return 0;
}

int model_mamba2_layers(struct kvi_model *m, const gguf_ctx *g, bool mlp_layers, kvi_error *err)
{
    int rc = model_mamba2_keys(m, g, err);
    if (rc) return rc;
    const int n = m->n_layers;
    int32_t *kv = malloc((size_t)n * 2 * sizeof *kv); /* [2][n_layers] KV heads, FFN widths */
    if (!kv) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    int32_t *ffn = kv + n;
    bool kv_arr = false, ffn_arr = false;
    rc = model_gguf_layer_ints(g, m->arch, "attention.head_count_kv", n, 0, m->n_heads, kv, &kv_arr, err);
    if (rc != 0 && rc != -1) goto done; /* -1: absent or one integer */
    rc = 0;
    if (mlp_layers) {
        rc =
            model_gguf_layer_ints(g, m->arch, "feed_forward_length", n, 0, MODEL_MAX_FFN, ffn, &ffn_arr, err);
        if (rc != -1 && rc != 0) goto done;
        rc = 0;
    }
    if (!kv_arr) {
        rc = err_set(err, KVI_E_FORMAT,
                     "gguf: %s.attention.head_count_kv must list every layer's KV heads (0: "
                     "Mamba-2)",
                     m->arch);
        goto done;
    }
    m->n_recurrent = 0;
    for (int l = 0; l < n; l++) {
        model_layer *L = &m->layers[l];
        const bool has_ffn = ffn_arr && ffn[l] > 0;
        L->recurrent = kv[l] == 0 && !has_ffn;
        L->no_mixer = kv[l] == 0 && has_ffn;
        L->no_ffn = mlp_layers && !has_ffn;
        if (has_ffn) L->ffn_dim = ffn[l];
        if (kv[l] > 0 && kv[l] != m->n_kv_heads) L->n_kv_heads = kv[l];
        m->n_recurrent += L->recurrent;
    }
    if (m->n_recurrent == n)
        rc = err_set(err, KVI_E_UNSUPPORTED, "gguf: every layer is Mamba-2 (no attention layer)");
done:
    free(kv);
    return rc;
}
