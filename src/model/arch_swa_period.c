/*
 * arch_swa_period.c — sliding-window layers by a period alone (arch.h
 * model_swa_period), as llama.cpp reads them for exaone4 and cohere2: an integer
 * attention.sliding_window_pattern changes the period, an array there is ignored
 * (the converters write exaone4's as an array: llama.cpp keeps its default).
 *
 * Invariant: sets only window and no_rope of m's layers; global layers keep
 * window 0.
 */
#include "model/arch.h"

#include <stdio.h>

int model_swa_period(struct kvi_model *m, const gguf_ctx *g, int def_period, bool global_nope, kvi_error *err)
{
    int w, rc, period = def_period;
    if ((rc = model_gguf_int(g, m->arch, "attention.sliding_window", true, 0, 1, MODEL_MAX_CTX, &w, err)))
        return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch);
    const int64_t ki = gguf_find_key(g, key);
    if (ki >= 0 && gguf_kv_type(g, ki) != GGUF_T_ARRAY &&
        (rc = model_gguf_int(g, m->arch, "attention.sliding_window_pattern", true, def_period, 1,
                             MODEL_MAX_LAYERS, &period, err)))
        return rc;
    for (int l = 0; l < m->n_layers; l++) {
        const bool local = l % period < period - 1;
        m->layers[l].window = local ? w : 0;
        m->layers[l].no_rope = global_nope && !local;
    }
    return 0;
}
