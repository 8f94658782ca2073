/*
 * arch_apertus.c — "apertus" (Swiss AI Apertus 8B / 70B).
 *
 * What differs from llama:
 *  - q/k RMSNorm per head (weights [head_dim]) before RoPE; RoPE pairs NeoX-style
 *    (Llama 3 rope_freqs read generically);
 *  - an ungated FFN, ffn_down(xielu(ffn_up x)) (no ffn_gate), xIELU with per-layer
 *    parameters from four float arrays without the architecture prefix,
 *    xielu.alpha_p, xielu.alpha_n, xielu.beta, xielu.eps (one value per layer, the
 *    raw model parameters): alpha_p = softplus(alpha_p), alpha_n = beta +
 *    softplus(alpha_n) (model.h model_xielu), softplus as llama.cpp's (v itself
 *    above 20), in float.
 */
#include "model/arch.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>

static float softplus(float v) { return v > 20.0f ? v : logf(1.0f + expf(v)); }

static int apertus_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    static const char *const keys[4] = { "xielu.alpha_p", "xielu.alpha_n", "xielu.beta", "xielu.eps" };
    const size_t nl = (size_t)m->n_layers;
    float *v = malloc(4 * nl * sizeof *v); /* [4][n_layers] */
    if (!v) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    int rc = 0;
    for (int k = 0; k < 4 && rc == 0; k++) {
        gguf_vtype et;
        uint64_t n = 0;
        rc = gguf_get_arr_info(g, keys[k], &et, &n, err);
        if (rc == 0 && n != nl)
            rc = err_set(err, KVI_E_FORMAT, "gguf: %s has %llu values, want one per layer (%d)", keys[k],
                         (unsigned long long)n, m->n_layers);
        else if (rc == -1)
            rc = err_set(err, KVI_E_FORMAT, "gguf: missing metadata %s", keys[k]);
        if (rc == 0) rc = gguf_get_arr_f32(g, keys[k], v + k * nl, nl, err);
    }
    for (size_t l = 0; l < nl && rc == 0; l++) {
        const float ap = v[l], an = v[nl + l], beta = v[2 * nl + l], eps = v[3 * nl + l];
        if (!isfinite(ap) || !isfinite(an) || !isfinite(beta) || !isfinite(eps))
            rc = err_set(err, KVI_E_FORMAT, "gguf: layer %zu's xIELU parameters are not finite", l);
        else
            m->layers[l].xielu = (model_xielu){ softplus(ap), beta + softplus(an), beta, eps };
    }
    free(v);
    if (rc == 0) m->act = MODEL_ACT_XIELU;
    return rc;
}

const model_arch model_arch_apertus = { "apertus", ARCH_FFN_NO_GATE, MODEL_QK_HEAD, true, apertus_hparams };
