/*
 * arch_kimi_linear.c — "kimi-linear" (Moonshot Kimi Linear): KDA layers (Kimi Delta
 * Attention, a recurrent state per sequence) next to latent-attention (MLA) layers.
 *
 * What differs from llama:
 *  - a layer is KDA exactly when its entry of the per-layer attention.head_count_kv
 *    array is 0: the gated delta rule of fwd_delta.h with q, k, v from their own
 *    matrices and causal convs (ssm.conv_kernel taps), head_count heads of
 *    kda.head_dim on both sides, a decay per key channel from a low-rank projection
 *    (rank kda.head_dim, as llama.cpp shapes ssm_f_a), a sigmoid output gate from
 *    another (model.h ssm_kda; tensors in model_gguf_kda.c);
 *  - the other layers are MLA as deepseek2's (attn_q without a q rank) but without
 *    RoPE: llama.cpp's rope type for this arch is none, the k_pe / q_pe dims are used
 *    as they are;
 *  - leading_dense_block_count dense FFN layers, then experts with sigmoid gating, a
 *    selection bias, the chosen weights divided by their sum (hard-coded, no key) and
 *    times expert_weights_scale, plus expert_shared_count shared experts.
 */
#include "model/arch.h"

#include "base/error.h"

#include <stdlib.h>

static int kimi_linear_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc;
    bool arr = false;
    if (m->mla_kv_rank == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: kimi-linear without attention.kv_lora_rank");
    if ((rc = model_gguf_int(g, m->arch, "ssm.conv_kernel", true, 0, 2, 64, &m->ssm_conv, err)) ||
        (rc = model_gguf_int(g, m->arch, "kda.head_dim", true, 0, 1, MODEL_MAX_HEAD_DIM, &m->ssm_dk, err)))
        return rc;
    int32_t *kvh = malloc((size_t)m->n_layers * sizeof *kvh); /* [n_layers] */
    if (!kvh) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    rc = model_gguf_layer_ints(g, m->arch, "attention.head_count_kv", m->n_layers, 0, 1, kvh, &arr, err);
    if (rc != 0 && rc != -1) {
        free(kvh);
        return rc;
    }
    if (!arr) {
        free(kvh);
        return err_set(err, KVI_E_FORMAT,
                       "gguf: kimi-linear needs attention.head_count_kv per layer (0: KDA, 1: MLA)");
    }
    m->ssm_hk = m->ssm_hv = m->n_heads;
    m->ssm_rank = m->ssm_dk;
    m->ssm_kda = true;
    m->n_recurrent = 0;
    for (int l = 0; l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        L->recurrent = kvh[l] == 0;
        L->no_rope = !L->recurrent;
        m->n_recurrent += L->recurrent;
    }
    free(kvh);
    if (m->n_recurrent == m->n_layers)
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: every layer is KDA (no attention layer)");
    if ((rc = model_moe_keys(m, g, MOE_KEY_GATING | MOE_KEY_SCALE, 2, err))) return rc;
    m->expert_norm = true;
    return 0;
}

const model_arch model_arch_kimi_linear = { "kimi-linear", 0, MODEL_QK_NONE, false, kimi_linear_hparams };
