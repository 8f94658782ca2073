/*
 * arch_moe_keys.c — the routing keys the mixture-of-experts architectures share
 * (arch.h model_moe_keys): which of them an architecture reads, and its default
 * gating, are its own; how each key is read and checked is here, once.
 *
 * Sets only kvi_model's gating, expert_norm, expert_scale, n_expert_groups and
 * n_groups_used; model_check_hparams checks that the groups fit the experts.
 */
#include "model/arch.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>

int model_moe_keys(struct kvi_model *m, const gguf_ctx *g, unsigned keys, int def_gating, kvi_error *err)
{
    int rc;
    if (keys & MOE_KEY_GATING) {
        int func = def_gating;
        if ((rc = model_gguf_int(g, m->arch, "expert_gating_func", def_gating < 0, def_gating, 1, 2, &func,
                                 err)))
            return rc;
        m->gating = func == 2 ? MODEL_GATE_SIGMOID : MODEL_GATE_SOFTMAX;
    }
    if (keys & MOE_KEY_NORM) {
        char key[96];
        snprintf(key, sizeof key, "%s.expert_weights_norm", m->arch);
        bool norm = false;
        if ((rc = gguf_get_bool(g, key, &norm, err)) == KVI_E_FORMAT) return rc;
        m->expert_norm = norm;
    }
    if (keys & MOE_KEY_SCALE) {
        char key[96];
        snprintf(key, sizeof key, "%s.expert_weights_scale", m->arch);
        double v = 1.0;
        if ((rc = gguf_get_float(g, key, &v, err)) == KVI_E_FORMAT) return rc;
        if (rc == -1 || v == 0.0) v = 1.0; /* llama.cpp: 0 means no scale */
        if (!isfinite(v) || v < 0.0) return err_set(err, KVI_E_FORMAT, "gguf: %s = %g invalid", key, v);
        m->expert_scale = (float)v;
    }
    if (keys & MOE_KEY_GROUPS) {
        if ((rc = model_gguf_int(g, m->arch, "expert_group_count", false, 1, 1, MODEL_MAX_EXPERTS,
                                 &m->n_expert_groups, err)) ||
            (rc = model_gguf_int(g, m->arch, "expert_group_used_count", false, m->n_expert_groups, 1,
                                 MODEL_MAX_EXPERTS, &m->n_groups_used, err)))
            return rc;
    }
    return 0;
}
