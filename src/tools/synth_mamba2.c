/*
 * synth_mamba2.c — synthetic "granitehybrid", "nemotron_h" and "falcon-h1" files
 * (synth_int.h hooks): the keys and tensors llama.cpp loads for the Mamba-2 hybrids,
 * as their converters write them (../shared/golden/arch/README-state-t3.md).
 *
 * Layer kinds, from attn_interval I (kvi_synth_params):
 *  - granitehybrid: layer l is attention when l % I == I / 2, else Mamba-2; every
 *    layer's FFN the experts and an ungated shared expert; head_count_kv per layer
 *    (0: Mamba-2), granite's four scales, rope.scaling.finetuned false (no RoPE);
 *  - nemotron_h: odd layers an MLP alone (ffn_up, ffn_down), even layer 2k attention
 *    when k % I == I / 2, else Mamba-2; head_count_kv and feed_forward_length per
 *    layer; no rope.freq_base (no positional encoding);
 *  - falcon-h1: attention and Mamba-2 in every layer, no ssm_norm, the FFN norm named
 *    blk.N.ffn_norm.
 * A Mamba-2 mixer: ssm_in {dim, 2 d_inner + 2 G N + n_h}, ssm_conv1d {K, C} and its
 * bias {C} (C = d_inner + 2 G N), ssm_dt.bias {n_h}, ssm_a and ssm_d {1, n_h},
 * ssm_norm {d_inner / G, G}, ssm_out {d_inner, dim}; d_inner is ssm_inner (0: 2 dim).
 */
#include "tools/synth_int.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { M2_GRANITE, M2_NEMOTRON, M2_FALCON };

static int m2_kind(const kvi_synth_params *p)
{
    return !strcmp(p->arch, "granitehybrid") ? M2_GRANITE
           : !strcmp(p->arch, "nemotron_h")  ? M2_NEMOTRON
                                             : M2_FALCON;
}

/* attention (1), Mamba-2 (0) or, nemotron_h, an MLP alone (2) for layer l; falcon-h1: 1 (both) */
static int m2_layer(const kvi_synth_params *p, int l)
{
    const int I = p->attn_interval;
    switch (m2_kind(p)) {
    case M2_GRANITE: return l % I == I / 2;
    case M2_NEMOTRON: return l % 2 ? 2 : (l / 2) % I == I / 2;
    default: return 1;
    }
}

static void m2_resolve(kvi_synth_params *p)
{
    if (p->ssm_groups == 0) p->ssm_groups = 1;
    if (p->ssm_heads == 0) p->ssm_heads = p->ssm_groups * 4;
    if (p->ssm_state == 0) p->ssm_state = 16;
    if (p->ssm_conv == 0) p->ssm_conv = 4;
    if (p->ssm_inner == 0) p->ssm_inner = 2 * p->dim;
    if (p->attn_interval == 0) p->attn_interval = m2_kind(p) == M2_NEMOTRON ? 2 : 4;
    if (m2_kind(p) == M2_GRANITE && p->shared_ffn == 0) p->shared_ffn = 2 * p->expert_ffn;
}

static int m2_check(const kvi_synth_params *p, kvi_error *err)
{
    if (p->ssm_groups < 1 || p->ssm_heads < 1 || p->ssm_heads % p->ssm_groups || p->ssm_inner < 1 ||
        p->ssm_inner % p->ssm_heads || p->ssm_state < 1 || p->ssm_state > 1024 || p->ssm_conv < 2 ||
        p->ssm_conv > 64 || p->attn_interval < 1 || p->attn_interval > p->n_layers)
        return err_set(err, KVI_E_INVALID,
                       "synth: %s: Mamba-2 shape invalid (inner %d, %d heads, %d groups, state %d, conv %d, "
                       "attention interval %d)",
                       p->arch, p->ssm_inner, p->ssm_heads, p->ssm_groups, p->ssm_state, p->ssm_conv,
                       p->attn_interval);
    if ((m2_kind(p) == M2_GRANITE) != (p->n_expert > 0))
        return err_set(err, KVI_E_INVALID,
                       "synth: granitehybrid needs experts, nemotron_h and falcon-h1 have none");
    return 0;
}

static int m2_metadata(gguf_writer *w, const kvi_synth_params *p)
{
    char k[128];
    int bad = 0;
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", p->arch, s), k)
    bad |= gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)p->ssm_conv) < 0;
    bad |= gguf_writer_set_u32(w, KEY("ssm.inner_size"), (uint32_t)p->ssm_inner) < 0;
    bad |= gguf_writer_set_u32(w, KEY("ssm.state_size"), (uint32_t)p->ssm_state) < 0;
    bad |= gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)p->ssm_heads) < 0;
    bad |= gguf_writer_set_u32(w, KEY("ssm.group_count"), (uint32_t)p->ssm_groups) < 0;
    if (m2_kind(p) != M2_FALCON) {
        int32_t *kv = malloc((size_t)p->n_layers * 2 * sizeof *kv); /* [2][n_layers] KV heads, FFN widths */
        if (!kv) return KVI_E_NOMEM;
        for (int l = 0; l < p->n_layers; l++) {
            kv[l] = m2_layer(p, l) == 1 ? p->n_kv_heads : 0;
            kv[p->n_layers + l] = m2_layer(p, l) == 2 ? p->ffn_dim : 0;
        }
        bad |= gguf_writer_set_arr_i32(w, KEY("attention.head_count_kv"), kv, (uint64_t)p->n_layers) < 0;
        if (m2_kind(p) == M2_NEMOTRON)
            bad |= gguf_writer_set_arr_i32(w, KEY("feed_forward_length"), kv + p->n_layers,
                                           (uint64_t)p->n_layers) < 0;
        free(kv);
        bad |= gguf_writer_set_bool(w, KEY("rope.scaling.finetuned"), false) < 0;
    }
    if (m2_kind(p) == M2_GRANITE) { /* Granite 4.0-H's multipliers; attention 1 / head_dim */
        bad |= gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)p->shared_ffn) < 0;
        bad |= gguf_writer_set_f32(w, KEY("embedding_scale"), 12.0f) < 0;
        bad |= gguf_writer_set_f32(w, KEY("residual_scale"), 0.25f) < 0;
        bad |= gguf_writer_set_f32(w, KEY("attention.scale"), 1.0f / (float)p->head_dim) < 0;
        bad |= gguf_writer_set_f32(w, KEY("logit_scale"), 6.0f) < 0;
    }
#undef KEY
    return bad ? KVI_E_NOMEM : 0;
}

static size_t m2_cap(const kvi_synth_params *p) { return 4 + 20 * (size_t)p->n_layers; }

static void m2_table(const kvi_synth_params *p, int n_vocab, synth_table *tab)
{
    const int64_t dim = p->dim, hd = p->head_dim, qd = hd * p->n_heads, kvd = hd * p->n_kv_heads;
    const int64_t di = p->ssm_inner, G = p->ssm_groups, nh = p->ssm_heads, C = di + 2 * G * p->ssm_state;
    const int64_t E = p->n_expert, F = p->expert_ffn, S = p->shared_ffn;
    char nm[64];
#define BLK(part, ne0, ne1, kind, role)                                         \
    do {                                                                        \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, part);                          \
        synth_add(tab, nm, ne0, ne1, kind, synth_role_type(p, role, l, false)); \
    } while (0)
#define EXP(role, ne0, ne1)                                                                     \
    do {                                                                                        \
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, role);                                   \
        synth_add_experts(tab, nm, ne0, ne1, E, SK_MATRIX, synth_role_type(p, role, l, false)); \
    } while (0)
    synth_add(tab, "token_embd.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "token_embd", -1, false));
    for (int l = 0; l < p->n_layers; l++) {
        const int kind = m2_layer(p, l);
        BLK("attn_norm.weight", dim, 1, SK_NORM, "attn_norm");
        if (kind == 1) {
            BLK("attn_q.weight", dim, qd, SK_MATRIX, "attn_q");
            BLK("attn_k.weight", dim, kvd, SK_MATRIX, "attn_k");
            BLK("attn_v.weight", dim, kvd, SK_MATRIX, "attn_v");
            BLK("attn_output.weight", qd, dim, SK_MATRIX, "attn_output");
        }
        if (kind == 0 || m2_kind(p) == M2_FALCON) {
            BLK("ssm_in.weight", dim, 2 * di + 2 * G * p->ssm_state + nh, SK_MATRIX, "ssm_in");
            BLK("ssm_conv1d.weight", p->ssm_conv, C, SK_CONV, "ssm_conv1d");
            BLK("ssm_conv1d.bias", C, 1, SK_BIAS, "ssm_conv1d");
            BLK("ssm_dt.bias", nh, 1, SK_DT_BIAS, "ssm_dt");
            BLK("ssm_a", 1, nh, SK_SSM_A, "ssm_a");
            tab->t[tab->n - 1].n_dims = 2; /* {1, n_h} */
            BLK("ssm_d", 1, nh, SK_NORM, "ssm_d");
            tab->t[tab->n - 1].n_dims = 2;
            if (m2_kind(p) != M2_FALCON) {
                BLK("ssm_norm.weight", di / G, G, SK_NORM, "ssm_norm");
                tab->t[tab->n - 1].n_dims = 2; /* {d_inner / G, G} */
            }
            BLK("ssm_out.weight", di, dim, SK_MATRIX, "ssm_out");
        }
        if (m2_kind(p) == M2_NEMOTRON) {
            if (kind == 2) {
                BLK("ffn_up.weight", dim, p->ffn_dim, SK_MATRIX, "ffn_up");
                BLK("ffn_down.weight", p->ffn_dim, dim, SK_MATRIX, "ffn_down");
            }
            continue;
        }
        BLK(m2_kind(p) == M2_FALCON ? "ffn_norm" : "ffn_norm.weight", dim, 1, SK_NORM, "ffn_norm");
        if (m2_kind(p) == M2_FALCON) {
            BLK("ffn_gate.weight", dim, p->ffn_dim, SK_MATRIX, "ffn_gate");
            BLK("ffn_up.weight", dim, p->ffn_dim, SK_MATRIX, "ffn_up");
            BLK("ffn_down.weight", p->ffn_dim, dim, SK_MATRIX, "ffn_down");
            continue;
        }
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate_inp.weight", l);
        synth_add(tab, nm, dim, E, SK_ROUTER, KVI_TYPE_F32);
        EXP("ffn_gate_exps", dim, F);
        EXP("ffn_up_exps", dim, F);
        EXP("ffn_down_exps", F, dim);
        BLK("ffn_gate_shexp.weight", dim, S, SK_MATRIX, "ffn_gate_shexp");
        BLK("ffn_up_shexp.weight", dim, S, SK_MATRIX, "ffn_up_shexp");
        BLK("ffn_down_shexp.weight", S, dim, SK_MATRIX, "ffn_down");
    }
#undef BLK
#undef EXP
    synth_add(tab, "output_norm.weight", dim, 1, SK_NORM, p->type);
    synth_add(tab, "output.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "output", -1, true));
}

/* The golden files' shapes (README-state-t3.md). */
static int m2_preset(const char *name, kvi_synth_params *p)
{
    static const struct {
        const char *name, *arch;
        int dim, ffn, layers, heads, kvh, hd, inner, nh, state, groups, experts, used, eff, shared, interval;
    } t[] = {
        { "granitehybrid-tiny", "granitehybrid", 64, 32, 4, 4, 2, 16, 128, 4, 16, 2, 4, 2, 32, 64, 4 },
        { "nemotron_h-tiny", "nemotron_h", 64, 128, 6, 4, 2, 32, 96, 6, 16, 2, 0, 0, 0, 0, 2 },
        { "falcon-h1-tiny", "falcon-h1", 64, 128, 3, 4, 2, 16, 64, 4, 16, 1, 0, 0, 0, 0, 1 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcasecmp(name, t[i].name) != 0) continue;
        synth_preset_base(p, t[i].name, t[i].arch, t[i].dim, t[i].ffn, t[i].layers, t[i].heads, t[i].kvh,
                          t[i].hd, 512, 512);
        p->ssm_inner = t[i].inner;
        p->ssm_heads = t[i].nh;
        p->ssm_state = t[i].state;
        p->ssm_groups = t[i].groups;
        p->ssm_conv = 4;
        p->n_expert = t[i].experts;
        p->n_expert_used = t[i].used;
        p->expert_ffn = t[i].eff;
        p->shared_ffn = t[i].shared;
        p->attn_interval = t[i].interval;
        return 0;
    }
    return -1;
}

const synth_hooks synth_hooks_mamba2 = { m2_resolve, m2_check, m2_metadata, m2_cap, m2_table, m2_preset };
