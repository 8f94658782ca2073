/*
 * synth_gemma4.c — synthetic "gemma4" files (synth_int.h hooks): the keys and
 * tensors llama.cpp's gemma4 loader reads, as its converter writes them
 * (../shared/golden/arch/README-dense-t3.md).
 *
 * Layers: sliding (l % P < P - 1 for the window pattern P) with head_dim and
 * n_kv_heads, global with head_dim_global and n_kv_heads_global; the last
 * shared_kv_layers layers have no K/V tensors. Keys beyond the common ones:
 * per-layer arrays feed_forward_length, attention.head_count_kv and the bool
 * attention.sliding_window_pattern; key_length / value_length (global),
 * key_length_swa / value_length_swa, rope.dimension_count (global head) and
 * _swa, rope.freq_base_swa 1e4, sliding_window, shared_kv_layers,
 * embedding_length_per_layer_input, final_logit_softcapping 30.
 * Tensors: token_embd, [per_layer_token_embd {N P, vocab}, per_layer_model_proj
 * {dim, N P} in F32, per_layer_proj_norm {P}], rope_freqs {global head / 2} (the
 * proportional RoPE: the first quarter of the pairs rotate), then per block
 * attn_norm, attn_q, [attn_k, attn_v unless k_eq_v on a global layer], attn_q_norm,
 * [attn_k_norm], attn_output, post_attention_norm, ffn_norm, ffn_gate, ffn_up,
 * ffn_down, post_ffw_norm, [inp_gate, proj, post_norm], layer_output_scale {1};
 * output_norm. Tied.
 */
#include "tools/synth_int.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void gemma4_resolve(kvi_synth_params *p)
{
    if (p->head_dim_global == 0) p->head_dim_global = 2 * p->head_dim;
    if (p->n_kv_heads_global == 0) p->n_kv_heads_global = p->n_kv_heads;
    if (p->ffn_dim_shared == 0) p->ffn_dim_shared = p->ffn_dim;
    if (p->rope_base_local == 0.0f) p->rope_base_local = 10000.0f;
    if (p->window == 0) p->window = 512;
    if (p->window_pattern == 0) p->window_pattern = 6;
    p->tie = 1;
}

static int gemma4_check(const kvi_synth_params *p, kvi_error *err)
{
    const int P = p->window_pattern;
    if (p->head_dim_global < p->head_dim || p->head_dim_global > 4096 || p->head_dim_global % 8 ||
        p->n_kv_heads_global < 1 || p->n_heads % p->n_kv_heads_global || p->n_heads % p->n_kv_heads ||
        p->ple_dim < 0 || p->ple_dim > 65536 || p->ffn_dim_shared < 1 || p->ffn_dim_shared > 262144 ||
        P < 2 || p->window < 1)
        return err_set(err, KVI_E_INVALID,
                       "synth: gemma4 global head %d (>= %d, a multiple of 8), global KV heads %d, per-layer "
                       "input %d, window %d, pattern %d invalid",
                       p->head_dim_global, p->head_dim, p->n_kv_heads_global, p->ple_dim, p->window, P);
    /* a shared layer reads the last sliding / global layer before the shared ones */
    const int n_kv = p->n_layers - p->shared_kv_layers;
    bool has_s = false, has_g = false;
    for (int l = 0; l < n_kv; l++) {
        if (l == n_kv - 2) has_s = l % P < P - 1;
        if (l == n_kv - 1) has_g = l % P == P - 1;
    }
    if (p->shared_kv_layers < 0 || n_kv < 2 || (p->shared_kv_layers > 0 && (!has_s || !has_g)))
        return err_set(err, KVI_E_INVALID,
                       "synth: gemma4 %d shared KV layers of %d: layers %d and %d must be sliding and global",
                       p->shared_kv_layers, p->n_layers, n_kv - 2, n_kv - 1);
    return 0;
}

static bool sliding(const kvi_synth_params *p, int l)
{
    return l % p->window_pattern < p->window_pattern - 1;
}

static int gemma4_metadata(gguf_writer *w, const kvi_synth_params *p)
{
    const char *ar = p->arch;
    const int n = p->n_layers, n_kv = n - p->shared_kv_layers;
    char k[128];
    int bad = 0;
    int32_t *ffn = malloc((size_t)n * sizeof *ffn), *kvh = malloc((size_t)n * sizeof *kvh); /* [n] */
    uint8_t *swa = malloc((size_t)n);                                                       /* [n] */
    if (!ffn || !kvh || !swa) bad = 1;
    for (int l = 0; !bad && l < n; l++) {
        swa[l] = sliding(p, l);
        ffn[l] = l >= n_kv ? p->ffn_dim_shared : p->ffn_dim;
        kvh[l] = swa[l] ? p->n_kv_heads : p->n_kv_heads_global;
    }
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", ar, s), k)
#define U32(s, v) (bad |= gguf_writer_set_u32(w, KEY(s), (uint32_t)(v)) < 0)
#define F32(s, v) (bad |= gguf_writer_set_f32(w, KEY(s), (float)(v)) < 0)
    if (!bad) {
        bad |= gguf_writer_set_arr_i32(w, KEY("feed_forward_length"), ffn, (uint64_t)n) < 0;
        bad |= gguf_writer_set_arr_i32(w, KEY("attention.head_count_kv"), kvh, (uint64_t)n) < 0;
        bad |= gguf_writer_set_arr(w, KEY("attention.sliding_window_pattern"), GGUF_T_BOOL, swa,
                                   (uint64_t)n) < 0;
    }
    U32("attention.key_length", p->head_dim_global);
    U32("attention.value_length", p->head_dim_global);
    U32("attention.key_length_swa", p->head_dim);
    U32("attention.value_length_swa", p->head_dim);
    U32("rope.dimension_count", p->head_dim_global);
    U32("rope.dimension_count_swa", p->head_dim);
    F32("rope.freq_base_swa", p->rope_base_local);
    U32("attention.sliding_window", p->window);
    U32("attention.shared_kv_layers", p->shared_kv_layers);
    if (p->ple_dim) U32("embedding_length_per_layer_input", p->ple_dim);
    F32("final_logit_softcapping", 30.0f);
#undef KEY
#undef U32
#undef F32
    free(ffn);
    free(kvh);
    free(swa);
    return bad ? KVI_E_NOMEM : 0;
}

static size_t gemma4_cap(const kvi_synth_params *p) { return 8 + 22 * (size_t)p->n_layers; }

static void gemma4_table(const kvi_synth_params *p, int n_vocab, synth_table *tab)
{
    const int64_t dim = p->dim, P = p->ple_dim, NP = (int64_t)p->n_layers * p->ple_dim;
    const int n_kv = p->n_layers - p->shared_kv_layers;
#define ADD(role, ne0, ne1, kind) synth_add_block(tab, p, l, role, ne0, ne1, kind, 0)
    synth_add(tab, "token_embd.weight", dim, n_vocab, SK_MATRIX, synth_role_type(p, "token_embd", -1, true));
    if (P) {
        synth_add(tab, "per_layer_token_embd.weight", NP, n_vocab, SK_MATRIX, p->type);
        synth_add(tab, "per_layer_model_proj.weight", dim, NP, SK_ROUTER, KVI_TYPE_F32); /* kept F32 */
        synth_add(tab, "per_layer_proj_norm.weight", P, 1, SK_NORM, KVI_TYPE_F32);
    }
    synth_add(tab, "rope_freqs.weight", p->head_dim_global / 2, 1, SK_PROP_ROPE, KVI_TYPE_F32);
    for (int l = 0; l < p->n_layers; l++) {
        const bool swa = sliding(p, l), own = l < n_kv;
        const int64_t hd = swa ? p->head_dim : p->head_dim_global;
        const int64_t kvd = hd * (swa ? p->n_kv_heads : p->n_kv_heads_global), qd = hd * p->n_heads;
        const int64_t ffn = own ? p->ffn_dim : p->ffn_dim_shared;
        ADD("attn_norm", dim, 1, SK_NORM);
        ADD("attn_q", dim, qd, SK_MATRIX);
        if (own) ADD("attn_k", dim, kvd, SK_MATRIX);
        if (own && (swa || !p->k_eq_v)) ADD("attn_v", dim, kvd, SK_MATRIX);
        ADD("attn_q_norm", hd, 1, SK_NORM);
        if (own) ADD("attn_k_norm", hd, 1, SK_NORM);
        ADD("attn_output", qd, dim, SK_MATRIX);
        ADD("post_attention_norm", dim, 1, SK_NORM);
        ADD("ffn_norm", dim, 1, SK_NORM);
        ADD("ffn_gate", dim, ffn, SK_MATRIX);
        ADD("ffn_up", dim, ffn, SK_MATRIX);
        ADD("ffn_down", ffn, dim, SK_MATRIX);
        ADD("post_ffw_norm", dim, 1, SK_NORM);
        if (P) {
            ADD("inp_gate", dim, P, SK_MATRIX);
            ADD("proj", P, dim, SK_MATRIX);
            ADD("post_norm", dim, 1, SK_NORM);
        }
        ADD("layer_output_scale", 1, 1, SK_ONE);
    }
#undef ADD
    synth_add(tab, "output_norm.weight", dim, 1, SK_NORM, p->type);
}

/* google/gemma-4-E4B (text config: hidden 2560, FFN 10240, 42 layers, 8 heads of 256,
 * global 512, 2 KV heads, per-layer inputs of 256, the last 18 layers sharing KV,
 * window 512 on 5 of every 6 layers, vocab 262144, 131072 positions) and
 * google/gemma-4-31B (hidden 5376, FFN 21504, 32 heads of 256 / 512, 16 KV heads on
 * sliding and 4 on global layers, K = V on global layers, window 1024, 262144
 * positions) with 6 of its 60 layers; gemma4-tiny: every feature at golden size
 * (6 layers, period 3, the last 3 sharing KV, double-wide FFN there). */
static int gemma4_preset(const char *name, kvi_synth_params *p)
{
    static const struct {
        const char *name;
        int dim, ffn, layers, heads, kvh, hd, vocab, ctx, win, pat, hdg, kvhg, keqv, ple, shared, ffn_sh;
    } t[] = {
        { "gemma-4-e4b", 2560, 10240, 42, 8, 2, 256, 262144, 131072, 512, 6, 512, 2, 0, 256, 18, 0 },
        { "gemma-4-31b-6l", 5376, 21504, 6, 32, 16, 256, 262144, 262144, 1024, 6, 512, 4, 1, 0, 0, 0 },
        { "gemma4-tiny", 64, 64, 6, 4, 2, 32, 512, 512, 8, 3, 64, 1, 1, 32, 3, 128 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcasecmp(name, t[i].name) != 0) continue;
        synth_preset_base(p, t[i].name, "gemma4", t[i].dim, t[i].ffn, t[i].layers, t[i].heads, t[i].kvh,
                          t[i].hd, t[i].vocab, t[i].ctx);
        p->window = t[i].win;
        p->window_pattern = t[i].pat;
        p->tie = 1;
        p->head_dim_global = t[i].hdg;
        p->n_kv_heads_global = t[i].kvhg;
        p->k_eq_v = t[i].keqv;
        p->ple_dim = t[i].ple;
        p->shared_kv_layers = t[i].shared;
        p->ffn_dim_shared = t[i].ffn_sh;
        return 0;
    }
    return -1;
}

const synth_hooks synth_hooks_gemma4 = { gemma4_resolve, gemma4_check, gemma4_metadata,
                                         gemma4_cap,     gemma4_table, gemma4_preset };
