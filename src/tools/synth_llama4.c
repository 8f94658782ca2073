/*
 * synth_llama4.c — synthetic "llama4" files (synth_int.h hooks): the keys and
 * tensors llama.cpp's llama4 loader reads, as its converter writes them.
 *
 * Keys beyond the common ones: interleave_moe_layer_step (moe_step), expert_count,
 * expert_used_count, expert_feed_forward_length, vocab_size,
 * rope.dimension_count, key_length / value_length. Tensors in file order:
 * token_embd, rope_freqs {n_rot / 2} (Llama 3 factors, with an original context),
 * then per block attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, and either the dense ffn_gate / ffn_up {dim, ffn} and ffn_down, or
 * (layer l with (l + 1) % moe_step == 0) the router ffn_gate_inp {dim, E} in F32,
 * ffn_{gate,up}_exps {dim, F, E}, ffn_down_exps {F, dim, E} and the shared expert
 * ffn_{gate,up}_shexp {dim, F}, ffn_down_shexp {F, dim}; then output_norm, output.
 * No q/k norm tensors (llama4's q/k norm has no weight).
 */
#include "tools/synth_int.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

float synth_llama3_factor(double base, int64_t n_rot, int64_t i, double factor, double orig)
{
    const double low = 1.0, high = 4.0;
    const double freq = pow(base, -(double)(2 * i) / (double)n_rot);
    const double wavelen = 2.0 * 3.14159265358979323846 / freq;
    if (wavelen < orig / high) return 1.0f;
    if (wavelen > orig / low) return (float)factor;
    const double smooth = (orig / wavelen - low) / (high - low);
    return (float)(1.0 / ((1.0 - smooth) / factor + smooth));
}

static void llama4_resolve(kvi_synth_params *p)
{
    if (p->moe_step == 0) p->moe_step = 1;
}

static int llama4_check(const kvi_synth_params *p, kvi_error *err)
{
    if (p->moe_step < 1 || p->moe_step > p->n_layers)
        return err_set(err, KVI_E_INVALID, "synth: llama4 moe step %d out of range 1..layers %d", p->moe_step,
                       p->n_layers);
    return 0;
}

static int llama4_metadata(gguf_writer *w, const kvi_synth_params *p)
{
    char k[128];
    snprintf(k, sizeof k, "%s.interleave_moe_layer_step", p->arch);
    return gguf_writer_set_u32(w, k, (uint32_t)p->moe_step) < 0 ? KVI_E_NOMEM : 0;
}

static size_t llama4_cap(const kvi_synth_params *p) { return 4 + 13 * (size_t)p->n_layers; }

static void llama4_table(const kvi_synth_params *p, int n_vocab, synth_table *tab)
{
    const int64_t dim = p->dim, hd = p->head_dim, qd = hd * p->n_heads, kvd = hd * p->n_kv_heads;
    const int64_t E = p->n_expert, F = p->expert_ffn;
    char nm[64];
#define ADD(role, ne0, ne1, kind) synth_add_block(tab, p, l, role, ne0, ne1, kind, 0)
#define EXP(role, ne0, ne1) synth_add_block(tab, p, l, role, ne0, ne1, SK_MATRIX, E)
    synth_add(tab, "token_embd.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "token_embd", -1, false));
    if (p->rope_orig_ctx > 0)
        synth_add(tab, "rope_freqs.weight", p->n_rot / 2, 1, SK_ROPE_LLAMA3, KVI_TYPE_F32);
    for (int l = 0; l < p->n_layers; l++) {
        ADD("attn_norm", dim, 1, SK_NORM);
        ADD("attn_q", dim, qd, SK_MATRIX);
        ADD("attn_k", dim, kvd, SK_MATRIX);
        ADD("attn_v", dim, kvd, SK_MATRIX);
        ADD("attn_output", qd, dim, SK_MATRIX);
        ADD("ffn_norm", dim, 1, SK_NORM);
        if ((l + 1) % p->moe_step == 0) {
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate_inp.weight", l);
            synth_add(tab, nm, dim, E, SK_ROUTER, KVI_TYPE_F32);
            EXP("ffn_gate_exps", dim, F);
            EXP("ffn_up_exps", dim, F);
            EXP("ffn_down_exps", F, dim);
            ADD("ffn_gate_shexp", dim, F, SK_MATRIX);
            ADD("ffn_up_shexp", dim, F, SK_MATRIX);
            ADD("ffn_down_shexp", F, dim, SK_MATRIX);
        } else {
            ADD("ffn_gate", dim, p->ffn_dim, SK_MATRIX);
            ADD("ffn_up", dim, p->ffn_dim, SK_MATRIX);
            ADD("ffn_down", p->ffn_dim, dim, SK_MATRIX);
        }
    }
#undef ADD
#undef EXP
    synth_add(tab, "output_norm.weight", dim, 1, SK_NORM, p->type);
    synth_add(tab, "output.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "output", -1, true));
}

/* meta-llama/Llama-4-Scout-17B-16E (config.json: hidden 5120, expert width 8192,
 * dense width intermediate_size_mlp 16384, 48 layers, 40 heads of 128, 8 KV heads,
 * 16 experts, 1 used, every layer experts, vocab 202048, 10485760 positions, Llama 3
 * RoPE factors over 8192) with 4
 * of its layers (one NoPE layer); llama4-tiny: ../shared/golden/arch/llama4's shape. */
static int llama4_preset(const char *name, kvi_synth_params *p)
{
    static const struct {
        const char *name;
        int dim, ffn, layers, heads, kvh, hd, vocab, ctx, experts, used, eff, step, orig;
    } t[] = {
        { "llama-4-scout-4l", 5120, 16384, 4, 40, 8, 128, 202048, 10485760, 16, 1, 8192, 1, 8192 },
        { "llama4-tiny", 64, 96, 4, 4, 2, 32, 512, 512, 4, 1, 32, 2, 16 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcasecmp(name, t[i].name) != 0) continue;
        synth_preset_base(p, t[i].name, "llama4", t[i].dim, t[i].ffn, t[i].layers, t[i].heads, t[i].kvh,
                          t[i].hd, t[i].vocab, t[i].ctx);
        p->n_expert = t[i].experts;
        p->n_expert_used = t[i].used;
        p->expert_ffn = t[i].eff;
        p->moe_step = t[i].step;
        p->rope_orig_ctx = t[i].orig;
        return 0;
    }
    return -1;
}

const synth_hooks synth_hooks_llama4 = { llama4_resolve, llama4_check, llama4_metadata,
                                         llama4_cap,     llama4_table, llama4_preset };
