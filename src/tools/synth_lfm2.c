/*
 * synth_lfm2.c — synthetic "lfm2" and "lfm2moe" files (synth_int.h hooks): the keys
 * and tensors llama.cpp's lfm2 / lfm2moe loaders read, as the converter writes them.
 *
 * Keys beyond the common ones: shortconv.l_cache (ssm_conv, default 3), vocab_size,
 * attention.head_count_kv as one int32 per layer (0: a convolution layer); lfm2moe
 * also leading_dense_block_count, expert_count, expert_used_count,
 * expert_feed_forward_length and expert_gating_func 2 (sigmoid).
 * Which layers keep attention: every attn_interval-th when it is set, else LFM2's
 * published layouts (16 layers: 2, 5, 8, 10, 12, 14 as LFM2-350M / 1.2B; 24 layers:
 * 2, 6, 10, 14, 18, 21 as LFM2-8B-A1B), else every third from layer 2.
 * Tensors in file order: token_embd, then per block attn_norm; a convolution layer's
 * shortconv.in_proj {dim, 3 dim}, shortconv.conv {l_cache, dim} (F32),
 * shortconv.out_proj {dim, dim}, or attention's attn_q, attn_k, attn_v,
 * attn_q_norm / attn_k_norm {head_dim}, attn_output; ffn_norm; the dense
 * ffn_gate / ffn_up {dim, ffn} and ffn_down, or (lfm2moe past its leading dense
 * blocks: 2 at 24 layers or more, else 1) the router ffn_gate_inp {dim, E} (F32),
 * exp_probs_b.bias {E}, ffn_{gate,up}_exps {dim, F, E}, ffn_down_exps {F, dim, E};
 * then the output norm as token_embd_norm; the output is tied.
 */
#include "tools/synth_int.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool lfm2_moe(const kvi_synth_params *p) { return !strcmp(p->arch, "lfm2moe"); }

static int lfm2_dense_lead(const kvi_synth_params *p) { return p->n_layers >= 24 ? 2 : 1; }

/* Whether layer l keeps attention (the file comment's layouts). */
static bool lfm2_attn(const kvi_synth_params *p, int l)
{
    static const int l16[] = { 2, 5, 8, 10, 12, 14 }, l24[] = { 2, 6, 10, 14, 18, 21 };
    if (p->attn_interval > 0) return (l + 1) % p->attn_interval == 0;
    const int *t = p->n_layers == 16 ? l16 : p->n_layers == 24 ? l24 : NULL;
    if (!t) return l % 3 == 2;
    for (int i = 0; i < 6; i++)
        if (t[i] == l) return true;
    return false;
}

static void lfm2_resolve(kvi_synth_params *p)
{
    if (p->ssm_conv == 0) p->ssm_conv = 3;
}

static int lfm2_check(const kvi_synth_params *p, kvi_error *err)
{
    if (p->ssm_conv < 2 || p->ssm_conv > 64)
        return err_set(err, KVI_E_INVALID, "synth: %s conv taps %d out of range 2..64", p->arch, p->ssm_conv);
    if (p->attn_interval < 0 || p->attn_interval > p->n_layers)
        return err_set(err, KVI_E_INVALID, "synth: %s attention interval %d out of range 0..layers %d",
                       p->arch, p->attn_interval, p->n_layers);
    if (lfm2_moe(p) ? p->n_expert == 0 || p->n_layers < 2 : p->n_expert != 0)
        return err_set(err, KVI_E_INVALID,
                       "synth: lfm2 is dense, lfm2moe needs experts and 2 layers or more");
    int n_attn = 0;
    for (int l = 0; l < p->n_layers; l++) n_attn += lfm2_attn(p, l);
    if (n_attn == 0 || n_attn == p->n_layers)
        return err_set(err, KVI_E_INVALID,
                       "synth: %s needs attention and convolution layers (%d of %d attention)", p->arch,
                       n_attn, p->n_layers);
    return 0;
}

static int lfm2_metadata(gguf_writer *w, const kvi_synth_params *p)
{
    char k[128];
    int32_t *kvh = malloc((size_t)p->n_layers * sizeof *kvh); /* [n_layers] */
    if (!kvh) return KVI_E_NOMEM;
    for (int l = 0; l < p->n_layers; l++) kvh[l] = lfm2_attn(p, l) ? p->n_kv_heads : 0;
    snprintf(k, sizeof k, "%s.attention.head_count_kv", p->arch);
    int bad = gguf_writer_set_arr_i32(w, k, kvh, (uint64_t)p->n_layers) < 0;
    free(kvh);
    snprintf(k, sizeof k, "%s.shortconv.l_cache", p->arch);
    bad |= gguf_writer_set_u32(w, k, (uint32_t)p->ssm_conv) < 0;
    if (lfm2_moe(p)) {
        snprintf(k, sizeof k, "%s.leading_dense_block_count", p->arch);
        bad |= gguf_writer_set_u32(w, k, (uint32_t)lfm2_dense_lead(p)) < 0;
        snprintf(k, sizeof k, "%s.expert_gating_func", p->arch);
        bad |= gguf_writer_set_u32(w, k, 2) < 0;
    }
    return bad ? KVI_E_NOMEM : 0;
}

static size_t lfm2_cap(const kvi_synth_params *p) { return 2 + 12 * (size_t)p->n_layers; }

static void lfm2_table(const kvi_synth_params *p, int n_vocab, synth_table *tab)
{
    const int64_t dim = p->dim, hd = p->head_dim, qd = hd * p->n_heads, kvd = hd * p->n_kv_heads;
    const int64_t E = p->n_expert, F = p->expert_ffn;
    char nm[64];
#define ADD(role, ne0, ne1, kind) synth_add_block(tab, p, l, role, ne0, ne1, kind, 0)
#define EXP(role, ne0, ne1) synth_add_block(tab, p, l, role, ne0, ne1, SK_MATRIX, E)
    synth_add(tab, "token_embd.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "token_embd", -1, false));
    for (int l = 0; l < p->n_layers; l++) {
        ADD("attn_norm", dim, 1, SK_NORM);
        if (!lfm2_attn(p, l)) {
            ADD("shortconv.in_proj", dim, 3 * dim, SK_MATRIX);
            snprintf(nm, sizeof nm, "blk.%d.shortconv.conv.weight", l);
            synth_add(tab, nm, p->ssm_conv, dim, SK_CONV, KVI_TYPE_F32);
            ADD("shortconv.out_proj", dim, dim, SK_MATRIX);
        } else {
            ADD("attn_q", dim, qd, SK_MATRIX);
            ADD("attn_k", dim, kvd, SK_MATRIX);
            ADD("attn_v", dim, kvd, SK_MATRIX);
            ADD("attn_q_norm", hd, 1, SK_NORM);
            ADD("attn_k_norm", hd, 1, SK_NORM);
            ADD("attn_output", qd, dim, SK_MATRIX);
        }
        ADD("ffn_norm", dim, 1, SK_NORM);
        if (lfm2_moe(p) && l >= lfm2_dense_lead(p)) {
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate_inp.weight", l);
            synth_add(tab, nm, dim, E, SK_ROUTER, KVI_TYPE_F32);
            snprintf(nm, sizeof nm, "blk.%d.exp_probs_b.bias", l);
            synth_add(tab, nm, E, 1, SK_BIAS, KVI_TYPE_F32);
            EXP("ffn_gate_exps", dim, F);
            EXP("ffn_up_exps", dim, F);
            EXP("ffn_down_exps", F, dim);
        } else {
            ADD("ffn_gate", dim, p->ffn_dim, SK_MATRIX);
            ADD("ffn_up", dim, p->ffn_dim, SK_MATRIX);
            ADD("ffn_down", p->ffn_dim, dim, SK_MATRIX);
        }
    }
#undef ADD
#undef EXP
    synth_add(tab, "token_embd_norm.weight", dim, 1, SK_NORM, p->type);
}

/* LiquidAI/LFM2-1.2B (config.json: hidden 2048, 16 layers, 32 heads, 8 KV heads,
 * vocab 65536, 128000 positions, conv_L_cache 3; the FFN width the converter writes
 * after block_auto_adjust_ff_dim: 12288 * 2/3 = 8192) and LiquidAI/LFM2-8B-A1B
 * (hidden 2048, dense width 7168, 24 layers, 32 heads, 8 KV heads, 32 experts of
 * 1792, 4 used, 2 dense layers); lfm2-tiny / lfm2moe-tiny: ../shared/golden/arch's
 * lfm2 and lfm2moe shapes. */
static int lfm2_preset(const char *name, kvi_synth_params *p)
{
    static const struct {
        const char *name, *arch;
        int dim, ffn, layers, heads, kvh, vocab, ctx, experts, used, eff;
    } t[] = {
        { "lfm2-1.2b", "lfm2", 2048, 8192, 16, 32, 8, 65536, 128000, 0, 0, 0 },
        { "lfm2-8b-a1b", "lfm2moe", 2048, 7168, 24, 32, 8, 65536, 128000, 32, 4, 1792 },
        { "lfm2-tiny", "lfm2", 64, 128, 4, 4, 2, 512, 512, 0, 0, 0 },
        { "lfm2moe-tiny", "lfm2moe", 64, 128, 4, 4, 2, 512, 512, 4, 2, 32 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcasecmp(name, t[i].name) != 0) continue;
        synth_preset_base(p, t[i].name, t[i].arch, t[i].dim, t[i].ffn, t[i].layers, t[i].heads, t[i].kvh, 0,
                          t[i].vocab, t[i].ctx);
        p->n_expert = t[i].experts;
        p->n_expert_used = t[i].used;
        p->expert_ffn = t[i].eff;
        return 0;
    }
    return -1;
}

const synth_hooks synth_hooks_lfm2 = { lfm2_resolve, lfm2_check, lfm2_metadata,
                                       lfm2_cap,     lfm2_table, lfm2_preset };
