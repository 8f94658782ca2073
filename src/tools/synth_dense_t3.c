/*
 * synth_dense_t3.c — synth's keys and tensor values of mistral3, apertus, exaone4
 * and cohere2 beyond the common ones (synth_dense_t3.h). smollm3 and seed_oss need
 * nothing here: their differences are flags of synth.c's architecture table
 * (vocab_size / rope.dimension_count keys, q/k/v biases) and of the loader
 * (model/arch.h: the pre-FFN norm stored as post_attention_norm).
 *
 *  - mistral3 (Ministral 3): attention.temperature_scale 0.1 (llama_4_scaling_beta)
 *    and, with an original context (rope_orig_ctx > 0), YaRN: rope.scaling.type yarn,
 *    factor (rope_linear, else ctx / original context), original_context_length,
 *    yarn_beta_fast 32, yarn_beta_slow 1, yarn_log_multiplier 1 (mscale_all_dim);
 *  - apertus: xielu.alpha_p, xielu.alpha_n, xielu.beta, xielu.eps, one float per
 *    layer, without the architecture prefix; raw values (before softplus) vary by
 *    layer: alpha_p -0.5 + 0.25 (l % 5), alpha_n 0.8 - 0.2 (l % 4), beta 0.5, eps -1e-6;
 *  - exaone4: attention.sliding_window and attention.sliding_window_pattern as the
 *    converter writes it, one bool per layer (l % 4 < 3: sliding; llama.cpp reads
 *    the window only for 64 layers and takes the period 4 itself);
 *  - cohere2: logit_scale 0.25 (Command R7B's) and rope.scaling.type none.
 */
#include "tools/synth_dense_t3.h"
#include "tools/synth_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is(const kvi_synth_params *p, const char *arch) { return p->arch && !strcmp(p->arch, arch); }

void synth_dt3_resolve(kvi_synth_params *out)
{
    if (is(out, "exaone4") && out->window == 0) out->window = 4096; /* EXAONE 4.0 32B's */
}

static int set_f32(gguf_writer *w, const char *arch, const char *key, float v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_writer_set_f32(w, k, v) < 0;
}

static int set_u32(gguf_writer *w, const char *arch, const char *key, uint32_t v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_writer_set_u32(w, k, v) < 0;
}

static int set_str(gguf_writer *w, const char *arch, const char *key, const char *v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_writer_set_str(w, k, v) < 0;
}

/* apertus's four per-layer arrays */
static int xielu_arrays(gguf_writer *w, const kvi_synth_params *p)
{
    const size_t n = (size_t)p->n_layers;
    float *v = malloc(4 * n * sizeof *v); /* [4][n_layers]: alpha_p, alpha_n, beta, eps */
    if (!v) return 1;
    for (size_t l = 0; l < n; l++) {
        v[l] = -0.5f + 0.25f * (float)(l % 5);
        v[n + l] = 0.8f - 0.2f * (float)(l % 4);
        v[2 * n + l] = 0.5f;
        v[3 * n + l] = -1e-6f;
    }
    static const char *const keys[4] = { "xielu.alpha_p", "xielu.alpha_n", "xielu.beta", "xielu.eps" };
    int bad = 0;
    for (int k = 0; k < 4; k++) bad |= gguf_writer_set_arr_f32(w, keys[k], v + k * n, n) < 0;
    free(v);
    return bad;
}

int synth_dt3_metadata(gguf_writer *w, const kvi_synth_params *p)
{
    const char *ar = p->arch;
    int bad = 0;
    if (is(p, "mistral3")) {
        if (p->rope_orig_ctx > 0) {
            const double factor =
                p->rope_linear > 0.0f ? p->rope_linear : (double)p->n_ctx / p->rope_orig_ctx;
            bad |= set_str(w, ar, "rope.scaling.type", "yarn");
            bad |= set_f32(w, ar, "rope.scaling.factor", (float)factor);
            bad |= set_u32(w, ar, "rope.scaling.original_context_length", (uint32_t)p->rope_orig_ctx);
            bad |= set_f32(w, ar, "rope.scaling.yarn_beta_fast", 32.0f);
            bad |= set_f32(w, ar, "rope.scaling.yarn_beta_slow", 1.0f);
            bad |= set_f32(w, ar, "rope.scaling.yarn_log_multiplier", 1.0f);
        }
        bad |= set_f32(w, ar, "attention.temperature_scale", 0.1f);
    } else if (is(p, "apertus")) {
        bad |= xielu_arrays(w, p);
    } else if (is(p, "exaone4")) {
        bad |= set_u32(w, ar, "attention.sliding_window", (uint32_t)p->window);
        uint8_t *pat = malloc((size_t)p->n_layers); /* [n_layers] */
        if (!pat) return KVI_E_NOMEM;
        for (int l = 0; l < p->n_layers; l++) pat[l] = l % 4 < 3;
        char k[128];
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", ar);
        bad |= gguf_writer_set_arr(w, k, GGUF_T_BOOL, pat, (uint64_t)p->n_layers) < 0;
        free(pat);
    } else if (is(p, "cohere2")) {
        bad |= set_f32(w, ar, "logit_scale", 0.25f);
        bad |= set_str(w, ar, "rope.scaling.type", "none");
    }
    return bad ? KVI_E_NOMEM : KVI_OK;
}

bool synth_dt3_has_rope_freqs(const kvi_synth_params *p) { return is(p, "apertus") || is(p, "exaone4"); }

float synth_dt3_rope_freq(const kvi_synth_params *p, int64_t i)
{
    return synth_llama3_factor(p->rope_base, p->n_rot, i, is(p, "exaone4") ? 16.0 : 8.0, 8192.0);
}
