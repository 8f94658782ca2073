/*
 * arch_qwen35.c — "qwen35" (Qwen3.5, dense): a hybrid of gated DeltaNet layers and
 * gated full attention.
 *
 * What differs from llama:
 *  - most layers are gated DeltaNet (linear attention, fwd_delta.h) with a fixed-size
 *    state instead of KV: every full_attention_interval-th layer (the last of each
 *    group) keeps attention, or the layers attention.recurrent_layers leaves;
 *    value head j reads key head j % Hk (the converter tiled the heads);
 *  - the attention layers: q rows per head [q | gate] (the output times
 *    sigmoid(gate)), per-head q/k RMSNorm, partial NeoX RoPE (rope.dimension_count
 *    of the head's dims) as interleaved M-RoPE: for text every position component
 *    is the token's position, so a pair turns like NeoX's unless its sector falls
 *    to the fourth (extra) component, which text leaves at 0: such a pair is not
 *    rotated;
 *  - the pre-FFN norm stored as post_attention_norm;
 *  - trailing multi-token-prediction blocks (nextn_predict_layers) are not run.
 * "qwen35moe" is the same with a mixture of experts in every layer (below).
 */
#include "model/arch.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>

/* Interleaved M-RoPE sections [t, h, w, e] (rope.dimension_sections): pair i's
 * sector s = i mod (sum); it takes t, h or w (all the position, for text) when
 * s % 3 selects that component within 3 x its section, else e (0: not rotated). */
static int imrope_pairs(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    char key[96];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch);
    gguf_vtype et;
    uint64_t n = 0;
    if (gguf_find_key(g, key) < 0) return 0;
    int rc = gguf_get_arr_info(g, key, &et, &n, err);
    if (rc) return rc;
    int32_t sec[4] = { 0 };
    if (n != 4 || gguf_get_arr_i32(g, key, sec, 4, err) != 0)
        return err_set(err, KVI_E_FORMAT, "gguf: %s must hold 4 integers", key);
    const int64_t sum = (int64_t)sec[0] + sec[1] + sec[2] + sec[3];
    if (sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[3] < 0 || sum <= 0)
        return err_set(err, KVI_E_FORMAT, "gguf: %s [%d, %d, %d, %d] invalid", key, sec[0], sec[1], sec[2],
                       sec[3]);
    const int half = m->n_rot / 2;
    float *f = NULL; /* [half] frequency divisors: 1, or infinity for a pair left unrotated */
    for (int i = 0; i < half; i++) {
        const int64_t s = i % sum;
        const bool pos = (s % 3 == 1 && s < 3 * (int64_t)sec[1]) || (s % 3 == 2 && s < 3 * (int64_t)sec[2]) ||
                         (s % 3 == 0 && s < 3 * (int64_t)sec[0]);
        if (pos) continue;
        if (!f) {
            f = model_own(m, malloc((size_t)half * sizeof *f));
            if (!f) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
            for (int k = 0; k < half; k++) f[k] = 1.0f;
        }
        f[i] = INFINITY;
    }
    if (f) m->rope[0].factors = m->rope_freqs = f;
    return 0;
}

static int qwen35_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    m->ssm_tiled = true;
    m->attn_gated = true;
    const int rc = model_hybrid_layers(m, g, err);
    return rc ? rc : imrope_pairs(m, g, err);
}

/* qwen35moe (Qwen3.5 / 3.6 MoE): the same hybrid with qwen3next's FFN in every layer:
 * softmax over all router logits, the top expert_used_count renormalised (llama.cpp
 * hard-codes both), plus the shared expert scaled by sigmoid(ffn_gate_inp_shexp . x). */
static int qwen35moe_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    if (m->n_expert == 0) return err_set(err, KVI_E_FORMAT, "gguf: qwen35moe without qwen35moe.expert_count");
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = true;
    return qwen35_hparams(m, g, err);
}

const model_arch model_arch_qwen35moe = { "qwen35moe", ARCH_FFN_NORM_POST_ATTN, MODEL_QK_HEAD, true,
                                          qwen35moe_hparams };

const model_arch model_arch_qwen35 = { "qwen35", ARCH_FFN_NORM_POST_ATTN, MODEL_QK_HEAD, true,
                                       qwen35_hparams };
