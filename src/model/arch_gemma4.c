/*
 * arch_gemma4.c — "gemma4" (Gemma 4 text models: E2B / E4B with per-layer inputs and
 * KV sharing, 31B with K = V on global layers; dense).
 *
 * What differs from gemma3 (tanh GeGLU, embedding times sqrt(dim), post-norms,
 * per-head q/k norms, sliding and global layers, NeoX RoPE):
 *  - per-layer widths: sliding layers have head dim key_length_swa, global layers
 *    key_length; head_count_kv and feed_forward_length may be per-layer arrays;
 *  - the sliding pattern is a per-layer bool array; sliding layers rotate with
 *    rope.freq_base_swa (default 1e4) over rope.dimension_count_swa dims, global
 *    layers with rope.freq_base over rope.dimension_count with rope_freqs factors
 *    ("proportional" RoPE: factors of 1e30 leave the upper pairs unrotated);
 *  - KQ scale 1; V RMS-normed per head without weight; where attn_v is absent
 *    (global layers of 31B) V is the raw K projection;
 *  - the last attention.shared_kv_layers layers compute no K/V: with n_kv the
 *    layers before them, a sliding one reads layer n_kv - 2's cache, a global one
 *    layer n_kv - 1's (llama.cpp's rule), and the cache holds nothing for them;
 *  - per-layer inputs (embedding_length_per_layer_input, fwd_ple.h) and a scalar
 *    layer_output_scale per layer; final logit soft-cap (default 30).
 */
#include "model/arch.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>

/* Per-layer arrays into the layers (a plain integer leaves the model's value). */
static int layer_widths(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int32_t *v = malloc((size_t)m->n_layers * sizeof *v); /* [n_layers] */
    if (!v) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    bool arr;
    int rc = model_gguf_layer_ints(g, m->arch, "attention.head_count_kv", m->n_layers, 1, MODEL_MAX_HEADS, v,
                                   &arr, err);
    for (int l = 0; rc <= 0 && arr && l < m->n_layers; l++) m->layers[l].n_kv_heads = v[l];
    if (rc <= 0)
        rc = model_gguf_layer_ints(g, m->arch, "feed_forward_length", m->n_layers, 1, MODEL_MAX_FFN, v, &arr,
                                   err);
    for (int l = 0; rc <= 0 && arr && l < m->n_layers; l++) m->layers[l].ffn_dim = v[l];
    free(v);
    return rc > 0 || rc < -1 ? rc : 0;
}

/* The shared layers' K/V sources (see the top of this file). */
static int kv_sharing(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int shared;
    int rc =
        model_gguf_int(g, m->arch, "attention.shared_kv_layers", false, 0, 0, m->n_layers - 1, &shared, err);
    if (rc) return rc;
    const int n_kv = m->n_layers - shared;
    for (int l = n_kv; l < m->n_layers; l++) {
        const int src = m->layers[l].window > 0 ? n_kv - 2 : n_kv - 1;
        if (src < 0 || (m->layers[src].window > 0) != (m->layers[l].window > 0))
            return err_set(err, KVI_E_FORMAT,
                           "gguf: gemma4 layer %d would share the K/V of layer %d, not of its kind", l, src);
        m->layers[l].kv_share = src + 1;
    }
    return 0;
}

static int gemma4_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc, hd_swa, rot_swa;
    m->act = MODEL_ACT_GELU_TANH;
    m->emb_scale = sqrtf((float)m->dim);
    m->kq_scale = 1.0f;
    if ((rc = model_gguf_float(g, m->arch, "final_logit_softcapping", false, 30.0, &m->final_softcap, err)) ||
        (rc = model_gguf_int(g, m->arch, "attention.key_length_swa", false, m->head_dim, 1,
                             MODEL_MAX_HEAD_DIM, &hd_swa, err)) ||
        (rc = model_gguf_int(g, m->arch, "rope.dimension_count_swa", false, hd_swa, 2, hd_swa, &rot_swa,
                             err)) ||
        (rc = model_gguf_int(g, m->arch, "embedding_length_per_layer_input", false, 0, 0, MODEL_MAX_DIM,
                             &m->ple_dim, err)))
        return rc;
    m->n_rope_sets = 2;
    m->rope[1] = (model_rope){ .theta = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f, .n_rot = rot_swa };
    if ((rc = model_gguf_float(g, m->arch, "rope.freq_base_swa", false, 10000.0, &m->rope[1].theta, err)) ||
        (rc = model_swa_layers(m, g, 6, 1, err)) || (rc = layer_widths(m, g, err)))
        return rc;
    const int hd = m->head_dim;
    if (hd_swa > m->head_dim || m->n_rot > hd)
        return err_set(err, KVI_E_FORMAT, "gguf: gemma4 sliding head dim %d above the global %d", hd_swa, hd);
    for (int l = 0; l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        L->head_dim = L->window > 0 ? hd_swa : hd;
        L->v_rms = true;
    }
    return kv_sharing(m, g, err);
}

const model_arch model_arch_gemma4 = { "gemma4", ARCH_POST_NORMS | ARCH_VISION_PART | ARCH_V_FROM_K,
                                       MODEL_QK_HEAD, true, gemma4_hparams };
