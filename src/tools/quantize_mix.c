/*
 * quantize_mix.c — which type each tensor gets (quantize_mix.h): llama.cpp's rules
 * by tensor category, file type and layer position, as data and small predicates.
 *
 * Invariants: a tensor that is not quantisable keeps its type; the counters
 * (i_attention_wv, i_ffn_*) advance exactly where llama.cpp's do, so the
 * "first eighth" / "use more bits" choices fall on the same layers.
 */
#include "tools/quantize_mix.h"

#include "base/error.h"
#include "formats/quant.h"

#include <stdio.h>
#include <string.h>

typedef enum qcat {
    QC_OTHER,
    QC_OUTPUT,
    QC_TOKEN_EMBD,
    QC_ATTN_QKV,
    QC_ATTN_KV_B,
    QC_ATTN_V,
    QC_ATTN_K,
    QC_ATTN_Q,
    QC_ATTN_OUTPUT,
    QC_FFN_UP,
    QC_FFN_GATE,
    QC_FFN_DOWN,
} qcat;

static bool is_token_embd(const char *n)
{
    return !strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight");
}

static qcat category(const char *n)
{
    static const struct {
        const char *sub;
        qcat c;
    } subs[] = {
        { "attn_qkv.weight", QC_ATTN_QKV },
        { "attn_kv_b.weight", QC_ATTN_KV_B },
        { "attn_v.weight", QC_ATTN_V },
        { "attn_k.weight", QC_ATTN_K },
        { "attn_q.weight", QC_ATTN_Q },
        { "attn_output.weight", QC_ATTN_OUTPUT },
        { "ffn_up", QC_FFN_UP },
        { "ffn_gate", QC_FFN_GATE },
        { "ffn_down", QC_FFN_DOWN },
    };
    if (!strcmp(n, "output.weight")) return QC_OUTPUT;
    if (is_token_embd(n)) return QC_TOKEN_EMBD;
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strstr(n, subs[i].sub)) return subs[i].c;
    return QC_OTHER;
}

static bool is_attn_v(qcat c) { return c == QC_ATTN_V || c == QC_ATTN_QKV || c == QC_ATTN_KV_B; }

void qmix_note(qmix_state *s, const char *name)
{
    const qcat c = category(name);
    if (is_attn_v(c)) s->n_attention_wv++;
    if (c == QC_OUTPUT) s->tied = false;
}

bool qmix_allows(const quantize_params *p, const char *name, uint32_t n_dims)
{
    /* substrings that keep a tensor as it is (norms, routers, tiny or positional tensors) */
    static const char *const keep[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    };
    if (n_dims < 2) return false;
    const size_t n = strlen(name);
    if (n < 6 || strcmp(name + n - 6, "weight")) return false;
    if (p->leave_output && !strcmp(name, "output.weight")) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(name, keep[i])) return false;
    return true;
}

bool qmix_requires_imatrix(const char *name, kvi_type t, int ftype)
{
    if (is_token_embd(name) || !strcmp(name, "output.weight")) return false;
    switch (t) {
    case KVI_TYPE_IQ3_XXS:
    case KVI_TYPE_IQ2_XXS:
    case KVI_TYPE_IQ2_XS:
    case KVI_TYPE_IQ2_S:
    case KVI_TYPE_IQ1_M:
    case KVI_TYPE_IQ1_S: return true;
    case KVI_TYPE_Q2_K: return ftype == QFT_Q2_K_S;
    default: return false;
    }
}

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The layer of a tensor: the counter of a dense model, the name's "blk.N." with experts. */
static int layer_of(const qmix_state *s, int counter, const char *name, kvi_error *err)
{
    if (s->n_expert <= 1) return counter;
    int il;
    if (sscanf(name, "blk.%d.", &il) != 1 || il < 0 || il >= s->n_layer)
        return err_set(err, KVI_E_FORMAT, "quantize: cannot place tensor %s in a layer", name);
    return il;
}

static bool ft_in(int ft, const int *set, int n)
{
    for (int i = 0; i < n; i++)
        if (ft == set[i]) return true;
    return false;
}
#define FT_IN(ft, ...) \
    ft_in(ft, (const int[]){ __VA_ARGS__ }, (int)(sizeof((const int[]){ __VA_ARGS__ }) / sizeof(int)))

/* output.weight (and a tied token_embd) */
static kvi_type mix_output(const qmix_state *s, kvi_type t, const int64_t *ne)
{
    const int ft = s->p->ftype;
    if (s->p->output_type != KVI_TYPE_COUNT) return s->p->output_type;
    if (ft == QFT_MXFP4_MOE || s->falcon || ne[0] % quant_block_elems(t)) return KVI_TYPE_Q8_0;
    if (FT_IN(ft, QFT_IQ2_XXS, QFT_IQ2_XS, QFT_IQ3_XXS, QFT_IQ1_S, QFT_IQ2_S, QFT_IQ2_M, QFT_IQ1_M))
        return KVI_TYPE_Q5_K;
    return t != KVI_TYPE_Q8_0 ? KVI_TYPE_Q6_K : t;
}

static kvi_type mix_token_embd(const qmix_state *s, kvi_type t)
{
    const int ft = s->p->ftype;
    if (s->p->embd_type != KVI_TYPE_COUNT) return s->p->embd_type;
    if (FT_IN(ft, QFT_IQ2_XXS, QFT_IQ2_XS, QFT_IQ1_S, QFT_IQ1_M)) return KVI_TYPE_Q2_K;
    if (FT_IN(ft, QFT_IQ2_S, QFT_IQ2_M, QFT_IQ3_XXS)) return KVI_TYPE_IQ3_S;
    if (FT_IN(ft, QFT_TQ1_0, QFT_TQ2_0)) return KVI_TYPE_Q4_K;
    return t;
}

/* The 1-2 bit IQ file types' own rules for the matrices of the layers. */
static kvi_type mix_iq_low(qmix_state *s, kvi_type t, qcat c)
{
    const int ft = s->p->ftype;
    const bool s_or_m = ft == QFT_IQ2_S || ft == QFT_IQ2_M;
    if (is_attn_v(c)) {
        if (s->n_gqa >= 4 || s->n_expert >= 4)
            t = KVI_TYPE_Q4_K;
        else
            t = s_or_m ? KVI_TYPE_IQ3_S : KVI_TYPE_Q2_K;
        ++s->i_attention_wv;
    } else if (s->n_expert == 8 && c == QC_ATTN_K)
        t = KVI_TYPE_Q4_K;
    else if (c == QC_FFN_DOWN) {
        if (s->i_ffn_down < s->n_layer / 8) t = s_or_m ? KVI_TYPE_IQ3_S : KVI_TYPE_Q2_K;
        ++s->i_ffn_down;
    } else if (c == QC_ATTN_OUTPUT) {
        if (s->n_expert == 8)
            t = KVI_TYPE_Q5_K;
        else if (ft == QFT_IQ1_S || ft == QFT_IQ1_M)
            t = KVI_TYPE_IQ2_XXS;
        else if (s_or_m)
            t = KVI_TYPE_IQ3_S;
    }
    return t;
}

static kvi_type mix_attn_v(qmix_state *s, kvi_type t)
{
    const int ft = s->p->ftype, gqa = s->n_gqa;
    if (ft == QFT_Q2_K)
        t = gqa >= 4 ? KVI_TYPE_Q4_K : KVI_TYPE_Q3_K;
    else if (ft == QFT_Q2_K_S && gqa >= 4)
        t = KVI_TYPE_Q4_K;
    else if (ft == QFT_IQ3_XXS)
        t = gqa >= 4 ? KVI_TYPE_Q4_K : !s->has_imatrix ? KVI_TYPE_IQ3_S : KVI_TYPE_IQ3_XXS;
    else if ((ft == QFT_IQ3_XS || ft == QFT_IQ3_S) && gqa >= 4)
        t = KVI_TYPE_Q4_K;
    else if (ft == QFT_IQ3_M)
        t = KVI_TYPE_Q4_K;
    else if (ft == QFT_Q3_K_M)
        t = s->i_attention_wv < 2 ? KVI_TYPE_Q5_K : KVI_TYPE_Q4_K;
    else if (ft == QFT_Q3_K_L)
        t = KVI_TYPE_Q5_K;
    else if ((ft == QFT_IQ4_NL || ft == QFT_IQ4_XS) && gqa >= 4)
        t = KVI_TYPE_Q5_K;
    else if ((ft == QFT_Q4_K_M || ft == QFT_Q5_K_M) && use_more_bits(s->i_attention_wv, s->n_attention_wv))
        t = KVI_TYPE_Q6_K;
    else if (ft == QFT_Q4_K_S && s->i_attention_wv < 4)
        t = KVI_TYPE_Q5_K;
    if (s->is_70b && (t == KVI_TYPE_Q3_K || t == KVI_TYPE_Q4_K)) t = KVI_TYPE_Q5_K;
    if (s->n_expert == 8) t = KVI_TYPE_Q8_0;
    ++s->i_attention_wv;
    return t;
}

static kvi_type mix_ffn_down(qmix_state *s, kvi_type t, int il)
{
    const int ft = s->p->ftype, n = s->n_layer;
    const bool falcon = s->falcon;
    if (ft == QFT_Q2_K)
        t = KVI_TYPE_Q3_K;
    else if (ft == QFT_Q2_K_S) {
        if (il < n / 8) t = KVI_TYPE_Q4_K;
    } else if (ft == QFT_IQ3_XXS && !s->has_imatrix)
        t = il < n / 8 ? KVI_TYPE_Q4_K : KVI_TYPE_Q3_K;
    else if (ft == QFT_Q3_K_M)
        t = il < n / 16 ? KVI_TYPE_Q5_K : !falcon || use_more_bits(il, n) ? KVI_TYPE_Q4_K : KVI_TYPE_Q3_K;
    else if (ft == QFT_IQ3_M && (il < n / 8 || (s->n_expert == 8 && use_more_bits(il, n))))
        t = KVI_TYPE_Q4_K;
    else if (ft == QFT_Q3_K_L)
        t = falcon ? KVI_TYPE_Q4_K : KVI_TYPE_Q5_K;
    else if (ft == QFT_Q4_K_M) {
        if (falcon)
            t = il < n / 16 ? KVI_TYPE_Q6_K : use_more_bits(il, n) ? KVI_TYPE_Q5_K : KVI_TYPE_Q4_K;
        else if (use_more_bits(il, n))
            t = KVI_TYPE_Q6_K;
    } else if (il < n / 8 && (ft == QFT_IQ4_NL || ft == QFT_IQ4_XS) && !s->has_imatrix)
        t = KVI_TYPE_Q5_K;
    else if (ft == QFT_Q5_K_M && use_more_bits(il, n))
        t = KVI_TYPE_Q6_K;
    else if (ft == QFT_Q4_K_S && !falcon && il < n / 8)
        t = KVI_TYPE_Q5_K;
    else if ((ft == QFT_Q4_0 || ft == QFT_Q5_0) && s->has_imatrix && il < n / 8)
        t = ft == QFT_Q4_0 ? KVI_TYPE_Q4_1 : KVI_TYPE_Q5_1;
    ++s->i_ffn_down;
    return t;
}

static kvi_type mix_attn_output(const qmix_state *s, kvi_type t)
{
    const int ft = s->p->ftype;
    if (s->falcon) return ft == QFT_Q3_K_L ? KVI_TYPE_Q4_K : t;
    if (s->n_expert == 8)
        return FT_IN(ft, QFT_Q2_K, QFT_IQ3_XS, QFT_IQ3_XXS, QFT_Q3_K_S, QFT_Q3_K_M, QFT_IQ4_NL, QFT_Q4_K_S,
                     QFT_Q4_K_M, QFT_IQ3_S, QFT_IQ3_M, QFT_IQ4_XS)
                   ? KVI_TYPE_Q5_K
                   : t;
    if (ft == QFT_Q2_K) return KVI_TYPE_Q3_K;
    if (ft == QFT_IQ3_XXS) return KVI_TYPE_IQ3_S;
    if (ft == QFT_Q3_K_M || ft == QFT_IQ3_M) return KVI_TYPE_Q4_K;
    if (ft == QFT_Q3_K_L) return KVI_TYPE_Q5_K;
    return t;
}

/* llama_tensor_get_type_impl */
static int mix_impl(qmix_state *s, kvi_type t, const char *name, const int64_t *ne, qcat c, kvi_type *out,
                    kvi_error *err)
{
    const int ft = s->p->ftype;
    int il;
    if (c == QC_OUTPUT || (s->tied && c == QC_TOKEN_EMBD))
        t = mix_output(s, t, ne);
    else if (ft == QFT_MXFP4_MOE)
        t = ne[2] > 1 ? KVI_TYPE_MXFP4 : KVI_TYPE_Q8_0;
    else if (c == QC_TOKEN_EMBD)
        t = mix_token_embd(s, t);
    else if (FT_IN(ft, QFT_IQ2_XXS, QFT_IQ2_XS, QFT_IQ1_S, QFT_IQ2_S, QFT_IQ2_M, QFT_IQ1_M))
        t = mix_iq_low(s, t, c);
    else if (is_attn_v(c))
        t = mix_attn_v(s, t);
    else if (c == QC_ATTN_K) {
        if (s->n_expert == 8)
            t = KVI_TYPE_Q8_0;
        else if (ft == QFT_IQ3_XS)
            t = KVI_TYPE_IQ3_XXS;
        else if (ft == QFT_IQ3_XXS)
            t = KVI_TYPE_IQ2_S;
    } else if (c == QC_ATTN_Q) {
        if (ft == QFT_IQ3_XS)
            t = KVI_TYPE_IQ3_XXS;
        else if (ft == QFT_IQ3_XXS)
            t = KVI_TYPE_IQ2_S;
    } else if (c == QC_FFN_DOWN) {
        if ((il = layer_of(s, s->i_ffn_down, name, err)) < 0) return il;
        t = mix_ffn_down(s, t, il);
    } else if (c == QC_ATTN_OUTPUT)
        t = mix_attn_output(s, t);
    else if (c == QC_ATTN_QKV) {
        if (ft == QFT_Q3_K_M || ft == QFT_Q3_K_L || ft == QFT_IQ3_M)
            t = KVI_TYPE_Q4_K;
        else if (ft == QFT_Q4_K_M)
            t = KVI_TYPE_Q5_K;
        else if (ft == QFT_Q5_K_M)
            t = KVI_TYPE_Q6_K;
    } else if (c == QC_FFN_GATE || c == QC_FFN_UP) {
        int *ctr = c == QC_FFN_GATE ? &s->i_ffn_gate : &s->i_ffn_up;
        if ((il = layer_of(s, *ctr, name, err)) < 0) return il;
        if (ft == QFT_IQ3_XS && il >= s->n_layer / 8 && il < 7 * s->n_layer / 8) t = KVI_TYPE_IQ3_XXS;
        ++*ctr;
    }
    *out = t;
    return 0;
}

/* tensor_type_fallback: a type whose block does not divide the row */
static kvi_type fallback(qmix_state *s, const int64_t *ne, kvi_type t)
{
    if (ne[0] % quant_block_elems(t) == 0) return t;
    ++s->n_fallback;
    kvi_type r;
    switch (t) {
    case KVI_TYPE_IQ1_S:
    case KVI_TYPE_IQ1_M:
    case KVI_TYPE_IQ2_XXS:
    case KVI_TYPE_IQ2_XS:
    case KVI_TYPE_IQ2_S:
    case KVI_TYPE_IQ3_XXS:
    case KVI_TYPE_IQ3_S:
    case KVI_TYPE_IQ4_XS: r = KVI_TYPE_IQ4_NL; break;
    case KVI_TYPE_Q2_K:
    case KVI_TYPE_Q3_K:
    case KVI_TYPE_TQ1_0:
    case KVI_TYPE_TQ2_0: r = KVI_TYPE_Q4_0; break;
    case KVI_TYPE_Q4_K: r = KVI_TYPE_Q5_0; break;
    case KVI_TYPE_Q5_K: r = KVI_TYPE_Q5_1; break;
    case KVI_TYPE_Q6_K: r = KVI_TYPE_Q8_0; break;
    default: return KVI_TYPE_COUNT;
    }
    return ne[0] % quant_block_elems(r) ? KVI_TYPE_F16 : r;
}

static bool is_quantized(kvi_type t) { return t != KVI_TYPE_F32 && t != KVI_TYPE_F16 && t != KVI_TYPE_BF16; }

int qmix_type(qmix_state *s, const char *name, const int64_t *ne, uint32_t n_dims, kvi_type cur,
              kvi_type *out, kvi_error *err)
{
    const quantize_params *p = s->p;
    const qcat c = category(name);
    *out = cur;
    if (!qmix_allows(p, name, n_dims)) return 0;
    if (p->embd_type != KVI_TYPE_COUNT && c == QC_TOKEN_EMBD) return (*out = p->embd_type), 0;
    if (p->output_type != KVI_TYPE_COUNT && c == QC_OUTPUT) return (*out = p->output_type), 0;
    kvi_type t = quantize_ftype_default(p->ftype);
    if (!is_quantized(t)) return (*out = t), 0;
    bool manual = false;
    for (int i = 0; i < p->n_overrides && !manual; i++)
        if (regexec(&s->re[i], name, 0, NULL, 0) == 0) {
            t = p->overrides[i].type;
            manual = true;
        }
    if (!manual && !p->pure) {
        const int rc = mix_impl(s, t, name, ne, c, &t, err);
        if (rc) return rc;
    }
    if (is_quantized(t)) t = fallback(s, ne, t);
    if (t == KVI_TYPE_COUNT)
        return err_set(err, KVI_E_UNSUPPORTED, "quantize: %s: no fallback type for a row of %lld", name,
                       (long long)ne[0]);
    *out = t;
    return 0;
}
