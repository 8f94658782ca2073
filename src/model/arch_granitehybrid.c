/*
 * arch_granitehybrid.c — "granitehybrid" (IBM Granite 4.0-H): Mamba-2 layers and
 * attention layers, each followed by a mixture of experts with a shared expert.
 *
 * What differs from llama:
 *  - a layer whose attention.head_count_kv entry is 0 runs a Mamba-2 mixer
 *    (fwd_mamba2.h) instead of attention, keeping a fixed-size state per sequence;
 *  - granite's four scales (arch_granite.c) and its RoPE switch
 *    rope.scaling.finetuned (the converter writes false: no RoPE);
 *  - every FFN: softmax over the router logits, the top expert_used_count divided by
 *    their sum, plus an ungated shared expert (expert_shared_feed_forward_length).
 */
#include "model/arch.h"

#include "base/error.h"

static int granitehybrid_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc = model_granite_scales(m, g, err);
    if (rc) return rc;
    m->gating = MODEL_GATE_SOFTMAX;
    m->expert_norm = true;
    return model_mamba2_layers(m, g, false, err);
}

const model_arch model_arch_granitehybrid = { "granitehybrid", 0, MODEL_QK_NONE, false,
                                              granitehybrid_hparams };
