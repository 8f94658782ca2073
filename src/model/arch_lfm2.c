/*
 * arch_lfm2.c — "lfm2" (Liquid LFM2 / LFM2.5): a hybrid of gated short
 * convolutions and attention; "lfm2moe" (LFM2-8B-A1B) the same with experts.
 *
 * What differs from llama:
 *  - layers whose attention.head_count_kv entry is 0 are gated short convolutions
 *    (model.h shortconv, fwd_shortconv.h) with shortconv.l_cache taps: a recurrent
 *    layer whose state per sequence is the last l_cache - 1 gated inputs (dim floats
 *    each); the others keep attention with per-head q/k RMSNorm and NeoX RoPE;
 *  - the output norm is stored as token_embd_norm (ARCH_OUT_NORM_EMBD), the output
 *    tied to token_embd.
 * lfm2moe: leading_dense_block_count dense FFNs, then experts chosen as
 * expert_gating_func says (sigmoid: top-k of sigmoid + exp_probs_b), the chosen
 * weights divided by their sum, no scale, no shared expert (llama.cpp reads neither
 * expert_weights_norm nor expert_weights_scale for it).
 *
 * Invariant: n_recurrent counts the layers marked recurrent; at least one layer
 * keeps attention.
 */
#include "model/arch.h"

#include "base/error.h"

#include <stdlib.h>

static int lfm2_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc;
    if ((rc = model_gguf_int(g, m->arch, "shortconv.l_cache", true, 0, 2, 64, &m->ssm_conv, err))) return rc;
    int32_t *kvh = malloc((size_t)m->n_layers * sizeof *kvh); /* [n_layers] */
    if (!kvh) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    bool arr = false;
    rc = model_gguf_layer_ints(g, m->arch, "attention.head_count_kv", m->n_layers, 0, MODEL_MAX_HEADS, kvh,
                               &arr, err);
    if (rc > 0 || rc < -1) {
        free(kvh);
        return rc;
    }
    m->shortconv = true;
    m->n_recurrent = 0;
    for (int l = 0; l < m->n_layers; l++) {
        m->layers[l].recurrent = arr && kvh[l] == 0;
        m->n_recurrent += m->layers[l].recurrent;
        if (arr && kvh[l] != 0 && kvh[l] != m->n_kv_heads) rc = l + 1;
    }
    free(kvh);
    if (rc > 0)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: %s layer %d has other KV heads than the others",
                       m->arch, rc - 1);
    if (m->n_recurrent == 0)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: %s without convolution layers (attention.head_count_kv "
                       "holds no 0)",
                       m->arch);
    if (m->n_recurrent == m->n_layers)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: every %s layer is a convolution (no attention layer)",
                       m->arch);
    return 0;
}

static int lfm2moe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    /* read here too: a metadata-only read (kv-plan -m) has no expert fields */
    int n_expert = 0;
    int rc = model_gguf_int(g, m->arch, "expert_count", true, 0, 1, MODEL_MAX_EXPERTS, &n_expert, err);
    if (rc || (rc = model_moe_keys(m, g, MOE_KEY_GATING, 2, err))) return rc;
    m->expert_norm = true;
    return lfm2_hparams(m, g, err);
}

const model_arch model_arch_lfm2 = { "lfm2", ARCH_OUT_NORM_EMBD, MODEL_QK_HEAD, true, lfm2_hparams };

const model_arch model_arch_lfm2moe = { "lfm2moe", ARCH_OUT_NORM_EMBD, MODEL_QK_HEAD, true, lfm2moe_hparams };
