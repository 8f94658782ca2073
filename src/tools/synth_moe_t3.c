/*
 * synth_moe_t3.c — synth's part for glm4moe, minimax-m2, hunyuan-moe, ernie4_5-moe,
 * bailingmoe2, afmoe and qwen35moe (synth_moe_t3.h).
 *
 * Data structure: one row per architecture (t3_arch) saying what its converter
 * writes: the gating key, the normalisation and scale keys, expert groups, a
 * leading dense block, the selection bias, the shared expert's keys, afmoe's
 * output gate, MTP blocks. Invariant: the keys written are exactly those the
 * golden files of ../shared/golden/arch carry for the architecture (checked by
 * tests/test_synth_arch.c), and the loader reads back the routing written here.
 */
#include "tools/synth_moe_t3.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct t3_arch {
    const char *name;
    int gating;          /* expert_gating_func written (0: none, hard-coded softmax) */
    bool norm_key;       /* expert_weights_norm true */
    float scale;         /* expert_weights_scale (0: not written) */
    bool groups;         /* expert_group_count / _used_count */
    int lead;            /* leading dense blocks (when the model has more layers) */
    int nextn;           /* trailing MTP blocks */
    bool sel_bias;       /* exp_probs_b */
    int shared;          /* expert_shared_count (0: none, or qwen35moe's gated one) */
    bool shared_len_key; /* expert_shared_feed_forward_length */
    bool out_gate;       /* attn_gate (afmoe) */
} t3_arch;

/* GLM-4.5's routed_scaling_factor 2.5 (Air: 1), Ling 2.0's 2.5, Trinity's 2.826 */
static const t3_arch k_t3[] = {
    { "glm4moe", 2, true, 2.5f, true, 1, 1, true, 1, false, false },
    { "minimax-m2", 2, false, 0.0f, false, 0, 0, true, 0, false, false },
    { "hunyuan-moe", 0, false, 0.0f, false, 0, 0, false, 1, true, false },
    { "ernie4_5-moe", 0, false, 0.0f, false, 1, 0, true, 2, true, false },
    { "bailingmoe2", 2, true, 2.5f, true, 1, 0, true, 1, true, false },
    { "afmoe", 2, true, 2.826f, false, 1, 0, true, 1, false, true },
    { "qwen35moe", 0, false, 0.0f, false, 0, 1, false, 0, false, false },
};

static const t3_arch *t3_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof k_t3 / sizeof k_t3[0]; i++)
        if (!strcmp(k_t3[i].name, name)) return &k_t3[i];
    return NULL;
}

int synth_t3_dense_lead(const kvi_synth_params *p)
{
    const t3_arch *a = t3_find(p->arch);
    return a && p->n_layers > a->lead ? a->lead : 0;
}

int synth_t3_nextn(const kvi_synth_params *p)
{
    const t3_arch *a = t3_find(p->arch);
    return a ? a->nextn : 0;
}

/* Expert groups: 4 when the experts split evenly and 2 kept groups can hold the
 * chosen ones (Ling 2.0: 8 groups of 32, 4 kept), else none. */
static int t3_groups(const kvi_synth_params *p)
{
    return p->n_expert % 4 == 0 && p->n_expert_used <= 2 * (p->n_expert / 4) ? 4 : 1;
}

void synth_t3_resolve(kvi_synth_params *p)
{
    const t3_arch *a = t3_find(p->arch);
    if (!a) return;
    /* minimax-m2 and hunyuan-moe size the experts by feed_forward_length */
    if (!strcmp(a->name, "minimax-m2") || !strcmp(a->name, "hunyuan-moe")) p->expert_ffn = p->ffn_dim;
    if (a->shared > 0 && p->shared_ffn == 0) p->shared_ffn = a->shared * p->expert_ffn;
}

void synth_t3_block(const kvi_synth_params *p, int l, synth_t3_emit emit, void *ctx)
{
    const t3_arch *a = t3_find(p->arch);
    if (!a) return;
    const int64_t dim = p->dim, qd = (int64_t)p->n_heads * p->head_dim, S = p->shared_ffn;
    if (a->out_gate) emit(ctx, l, "attn_gate.weight", dim, qd, T3_MATRIX, "attn_gate");
    if (l >= synth_t3_dense_lead(p)) {
        if (a->sel_bias) emit(ctx, l, "exp_probs_b.bias", p->n_expert, 1, T3_BIAS, "exp_probs_b");
        if (a->shared > 0) {
            emit(ctx, l, "ffn_gate_shexp.weight", dim, S, T3_MATRIX, "ffn_gate_shexp");
            emit(ctx, l, "ffn_up_shexp.weight", dim, S, T3_MATRIX, "ffn_up_shexp");
            emit(ctx, l, "ffn_down_shexp.weight", S, dim, T3_MATRIX, "ffn_down");
        }
    }
    if (l >= p->n_layers) { /* the MTP block's own tensors */
        emit(ctx, l, "nextn.eh_proj.weight", 2 * dim, dim, T3_MATRIX, "nextn.eh_proj");
        emit(ctx, l, "nextn.enorm.weight", dim, 1, T3_NORM, "nextn.enorm");
        emit(ctx, l, "nextn.hnorm.weight", dim, 1, T3_NORM, "nextn.hnorm");
        emit(ctx, l, "nextn.shared_head_norm.weight", dim, 1, T3_NORM, "nextn.shared_head_norm");
    }
}

int synth_t3_keys(gguf_writer *w, const kvi_synth_params *p)
{
    const t3_arch *a = t3_find(p->arch);
    if (!a) return 0;
    char k[128];
    int bad = 0;
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", p->arch, s), k)
    if (synth_t3_dense_lead(p) > 0)
        bad |= gguf_writer_set_u32(w, KEY("leading_dense_block_count"), (uint32_t)synth_t3_dense_lead(p));
    if (!strcmp(a->name, "ernie4_5-moe")) bad |= gguf_writer_set_u32(w, KEY("interleave_moe_layer_step"), 1);
    if (a->shared > 0) bad |= gguf_writer_set_u32(w, KEY("expert_shared_count"), (uint32_t)a->shared);
    if (a->shared_len_key)
        bad |= gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)p->shared_ffn);
    if (a->gating) bad |= gguf_writer_set_u32(w, KEY("expert_gating_func"), (uint32_t)a->gating);
    if (a->scale > 0.0f) bad |= gguf_writer_set_f32(w, KEY("expert_weights_scale"), a->scale);
    if (a->norm_key) bad |= gguf_writer_set_bool(w, KEY("expert_weights_norm"), true);
    if (a->groups) {
        const int g = !strcmp(a->name, "bailingmoe2") ? t3_groups(p) : 1;
        bad |= gguf_writer_set_u32(w, KEY("expert_group_count"), (uint32_t)g);
        bad |= gguf_writer_set_u32(w, KEY("expert_group_used_count"), (uint32_t)(g > 1 ? g / 2 : 1));
    }
    if (a->nextn > 0) bad |= gguf_writer_set_u32(w, KEY("nextn_predict_layers"), (uint32_t)a->nextn);
    if (!strcmp(a->name, "hunyuan-moe")) { /* Hunyuan-A13B's NTK-alpha context, as its converter */
        bad |= gguf_writer_set_str(w, KEY("rope.scaling.type"), "none");
        bad |= gguf_writer_set_f32(w, KEY("rope.scaling.factor"), 1.0f);
        bad |= gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), 262144);
    }
#undef KEY
    return bad ? -1 : 0;
}
