/*
 * arch_granite.c — "granite" (IBM Granite 3.x dense).
 *
 * What differs from llama: four scales from the metadata — embedding rows times
 * embedding_scale, the attention and FFN outputs times residual_scale before each
 * residual add, attention.scale as the KQ scale (instead of 1/sqrt(head_dim)), and
 * the logits divided by logit_scale. rope.scaling.finetuned switches RoPE (as
 * llama.cpp reads it for granite: absent means on).
 */
#include "model/arch.h"

int model_granite_scales(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc;
    if ((rc = model_gguf_float(g, m->arch, "embedding_scale", false, 1.0, &m->emb_scale, err)) ||
        (rc = model_gguf_float(g, m->arch, "residual_scale", false, 1.0, &m->residual_scale, err)) ||
        (rc = model_gguf_float(g, m->arch, "attention.scale", false, m->kq_scale, &m->kq_scale, err)) ||
        (rc = model_gguf_float(g, m->arch, "logit_scale", false, 1.0, &m->logit_scale, err)))
        return rc;
    int rope_on = 1;
    if ((rc = model_gguf_int(g, m->arch, "rope.scaling.finetuned", false, 1, 0, 1, &rope_on, err))) return rc;
    if (!rope_on) m->rope[0].freq_scale = 0.0f; /* every angle 0: no rotation */
    return 0;
}

const model_arch model_arch_granite = { "granite", 0, MODEL_QK_NONE, false, model_granite_scales };
