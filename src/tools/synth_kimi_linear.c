/*
 * synth_kimi_linear.c — synthetic "kimi-linear" files (synth_int.h hooks): the keys
 * and tensors llama.cpp's kimi-linear loader reads (../shared/golden/arch/
 * README-state-t3.md lists them), with H = n_heads, d = head_dim (the KDA heads),
 * C = H d, K = ssm_conv, R = kv_lora_rank, P = n_rot, N = mla_nope, V = mla_v_dim.
 *
 * Keys beyond the common ones: attention.head_count_kv as one value per layer (0 for a
 * KDA layer, 1 for MLA: every attn_interval-th layer), kda.head_dim, ssm.conv_kernel,
 * attention.kv_lora_rank, rope.dimension_count P, attention.key_length R + P,
 * key_length_mla N + P, value_length_mla V, expert_shared_count,
 * leading_dense_block_count 1, expert_weights_scale 2.446, expert_gating_func 2
 * (sigmoid). No rope.freq_base, no value_length. Tensors in file order:
 * token_embd; per block attn_norm, then
 *   KDA: attn_q, attn_k, attn_v {dim, C}, ssm_conv1d_{q,k,v} {K, 1, C, 1} (F32),
 *        ssm_f_a {dim, d}, ssm_f_b {d, C}, ssm_beta {dim, H}, ssm_a {1, H, 1, 1},
 *        ssm_dt.bias {C}, ssm_g_a {dim, d}, ssm_g_b {d, C}, ssm_norm {d},
 *        attn_output {C, dim};
 *   MLA: attn_q {dim, H (N + P)}, attn_kv_a_mqa {dim, R + P}, attn_kv_a_norm {R},
 *        attn_k_b {N, R, H}, attn_v_b {R, V, H}, attn_output {H V, dim};
 * ffn_norm, and the dense ffn_gate / ffn_up / ffn_down (layer 0) or the router
 * ffn_gate_inp {dim, E} (F32), exp_probs_b.bias {E}, ffn_{gate,up}_exps {dim, F, E},
 * ffn_down_exps {F, dim, E}, ffn_{gate,up}_shexp {dim, S}, ffn_down_shexp {S, dim};
 * then output_norm, output.
 */
#include "tools/synth_int.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool kimi_is_mla(const kvi_synth_params *p, int l) { return (l + 1) % p->attn_interval == 0; }

static void kimi_resolve(kvi_synth_params *p)
{
    if (p->ssm_conv == 0) p->ssm_conv = 4;
    if (p->attn_interval == 0) p->attn_interval = 4;
    if (p->kv_lora_rank == 0) p->kv_lora_rank = 512;
    if (p->mla_nope == 0) p->mla_nope = 128;
    if (p->mla_v_dim == 0) p->mla_v_dim = 128;
    if (p->n_rot == p->head_dim) p->n_rot = 64; /* left at the common default */
    if (p->shared_ffn == 0) p->shared_ffn = p->expert_ffn;
}

static int kimi_check(const kvi_synth_params *p, kvi_error *err)
{
    if (p->ssm_conv < 2 || p->ssm_conv > 64 || p->attn_interval < 1 || p->attn_interval > p->n_layers ||
        p->n_layers < 2 || p->n_layers > 512 || p->kv_lora_rank < 1 || p->mla_nope < 1 || p->mla_v_dim < 1 ||
        p->n_rot < 1 || p->n_expert < 1 || p->expert_ffn < 1 || p->shared_ffn % p->expert_ffn != 0)
        return err_set(err, KVI_E_INVALID,
                       "synth: kimi-linear: conv taps %d, MLA every %d of %d layers, latent %d, key dims "
                       "%d + %d, value dims %d, %d experts, shared width %d (a multiple of %d) invalid",
                       p->ssm_conv, p->attn_interval, p->n_layers, p->kv_lora_rank, p->mla_nope, p->n_rot,
                       p->mla_v_dim, p->n_expert, p->shared_ffn, p->expert_ffn);
    return 0;
}

static int kimi_metadata(gguf_writer *w, const kvi_synth_params *p)
{
    char k[128];
    int bad = 0;
#define U32(key, v) \
    (snprintf(k, sizeof k, "%s.%s", p->arch, key), bad |= gguf_writer_set_u32(w, k, (uint32_t)(v)) < 0)
    int32_t kvh[512]; /* [n_layers] (kimi_check: at most 512) */
    for (int l = 0; l < p->n_layers; l++) kvh[l] = kimi_is_mla(p, l) ? 1 : 0;
    U32("attention.kv_lora_rank", p->kv_lora_rank);
    U32("rope.dimension_count", p->n_rot);
    U32("attention.key_length", p->kv_lora_rank + p->n_rot);
    U32("attention.key_length_mla", p->mla_nope + p->n_rot);
    U32("attention.value_length_mla", p->mla_v_dim);
    U32("ssm.conv_kernel", p->ssm_conv);
    U32("kda.head_dim", p->head_dim);
    U32("expert_shared_count", p->shared_ffn / p->expert_ffn);
    U32("leading_dense_block_count", 1);
    snprintf(k, sizeof k, "%s.expert_weights_scale", p->arch);
    bad |= gguf_writer_set_f32(w, k, 2.446f) < 0; /* Kimi Linear's routed_scaling_factor */
    U32("expert_gating_func", 2);
    snprintf(k, sizeof k, "%s.attention.head_count_kv", p->arch);
    bad |= gguf_writer_set_arr_i32(w, k, kvh, (uint64_t)p->n_layers) < 0;
#undef U32
    return bad ? KVI_E_NOMEM : 0;
}

static size_t kimi_cap(const kvi_synth_params *p) { return 3 + 24 * (size_t)p->n_layers; }

/* The last tensor added as 4 dims {ne0, ne1, ne2, 1}. */
static void dims4(synth_table *tab, int64_t ne1, int64_t ne2)
{
    synth_tensor *d = &tab->t[tab->n - 1];
    d->ne[1] = ne1;
    d->ne[2] = ne2;
    d->ne[3] = 1;
    d->n_dims = 4;
}

static void kimi_table(const kvi_synth_params *p, int n_vocab, synth_table *tab)
{
    const int64_t dim = p->dim, H = p->n_heads, d = p->head_dim, C = H * d, K = p->ssm_conv;
    const int64_t R = p->kv_lora_rank, P = p->n_rot, N = p->mla_nope, V = p->mla_v_dim;
    const int64_t E = p->n_expert, F = p->expert_ffn;
    char nm[64];
#define NAME(role) snprintf(nm, sizeof nm, "blk.%d.%s", l, role)
#define ADD(role, ne0, ne1, kind) \
    (NAME(role ".weight"), synth_add(tab, nm, ne0, ne1, kind, synth_role_type(p, role, l, false)))
#define EXP(role, ne0, ne1, n) \
    (NAME(role ".weight"),     \
     synth_add_experts(tab, nm, ne0, ne1, n, SK_MATRIX, synth_role_type(p, role, l, false)))
    synth_add(tab, "token_embd.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "token_embd", -1, false));
    for (int l = 0; l < p->n_layers; l++) {
        ADD("attn_norm", dim, 1, SK_NORM);
        if (kimi_is_mla(p, l)) {
            ADD("attn_q", dim, H * (N + P), SK_MATRIX);
            ADD("attn_kv_a_mqa", dim, R + P, SK_MATRIX);
            ADD("attn_kv_a_norm", R, 1, SK_NORM);
            EXP("attn_k_b", N, R, H);
            EXP("attn_v_b", R, V, H);
            ADD("attn_output", H * V, dim, SK_MATRIX);
        } else {
            static const char *const conv[3] = { "ssm_conv1d_q.weight", "ssm_conv1d_k.weight",
                                                 "ssm_conv1d_v.weight" };
            ADD("attn_q", dim, C, SK_MATRIX);
            ADD("attn_k", dim, C, SK_MATRIX);
            ADD("attn_v", dim, C, SK_MATRIX);
            for (int i = 0; i < 3; i++) {
                NAME(conv[i]);
                synth_add(tab, nm, K, 1, SK_CONV, KVI_TYPE_F32);
                dims4(tab, 1, C);
            }
            ADD("ssm_f_a", dim, d, SK_MATRIX);
            ADD("ssm_f_b", d, C, SK_MATRIX);
            ADD("ssm_beta", dim, H, SK_MATRIX);
            NAME("ssm_a");
            synth_add(tab, nm, 1, H, SK_SSM_A, KVI_TYPE_F32);
            dims4(tab, H, 1);
            NAME("ssm_dt.bias");
            synth_add(tab, nm, C, 1, SK_DT_BIAS, KVI_TYPE_F32);
            ADD("ssm_g_a", dim, d, SK_MATRIX);
            ADD("ssm_g_b", d, C, SK_MATRIX);
            ADD("ssm_norm", d, 1, SK_NORM);
            ADD("attn_output", C, dim, SK_MATRIX);
        }
        ADD("ffn_norm", dim, 1, SK_NORM);
        if (l == 0) { /* leading_dense_block_count 1 */
            ADD("ffn_gate", dim, p->ffn_dim, SK_MATRIX);
            ADD("ffn_up", dim, p->ffn_dim, SK_MATRIX);
            ADD("ffn_down", p->ffn_dim, dim, SK_MATRIX);
            continue;
        }
        NAME("ffn_gate_inp.weight");
        synth_add(tab, nm, dim, E, SK_ROUTER, KVI_TYPE_F32);
        NAME("exp_probs_b.bias");
        synth_add(tab, nm, E, 1, SK_BIAS, KVI_TYPE_F32);
        EXP("ffn_gate_exps", dim, F, E);
        EXP("ffn_up_exps", dim, F, E);
        EXP("ffn_down_exps", F, dim, E);
        ADD("ffn_gate_shexp", dim, p->shared_ffn, SK_MATRIX);
        ADD("ffn_up_shexp", dim, p->shared_ffn, SK_MATRIX);
        ADD("ffn_down_shexp", p->shared_ffn, dim, SK_MATRIX);
    }
#undef ADD
#undef EXP
#undef NAME
    synth_add(tab, "output_norm.weight", dim, 1, SK_NORM, p->type);
    synth_add(tab, "output.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "output", -1, true));
}

/* kimi-linear-tiny: ../shared/golden/arch/kimi-linear's shape. */
static int kimi_preset(const char *name, kvi_synth_params *p)
{
    if (strcasecmp(name, "kimi-linear-tiny") != 0) return -1;
    synth_preset_base(p, "kimi-linear-tiny", "kimi-linear", 64, 64, 4, 2, 1, 32, 512, 512);
    p->n_expert = 4;
    p->n_expert_used = 2;
    p->expert_ffn = 32;
    p->kv_lora_rank = 32;
    p->mla_nope = 32;
    p->mla_v_dim = 32;
    p->n_rot = 16;
    return 0;
}

const synth_hooks synth_hooks_kimi_linear = { kimi_resolve, kimi_check, kimi_metadata,
                                              kimi_cap,     kimi_table, kimi_preset };
