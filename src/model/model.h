/*
 * model.h — the weights and hyper-parameters of a decoder-only transformer,
 * bound from a GGUF file, a llama2.c checkpoint or a Hugging Face folder.
 *
 * One block shape serves every dense architecture (model/arch.h lists them):
 *
 *   x = embed(token) * emb_scale
 *   per layer l:
 *     a = attn_norm ? rmsnorm(x) * attn_norm : x
 *     q, k, v = a Wq, a Wk, a Wv (+ biases)   -- views of one fused matrix or three
 *     q, k = qk_norm(q), qk_norm(k)           -- none, per head, or over the whole row
 *     q, k = rope(q, k; the layer's rope set) -- partial when n_rot < head_dim; none
 *                                                on a no_rope (NoPE) layer; the q/k norm
 *                                                after it when qk_norm_after_rope
 *     q *= temperature(pos)                   -- layers with q_temp (mistral3)
 *     o = attention(q, K, V; kq_scale, attn_softcap, the layer's window)
 *     o = o * sigmoid(a Wo_gate) when wo_gate; o = o Wo (+ bo)
 *     x += residual_scale * (post_attn_norm ? rmsnorm(o) * post_attn_norm : o)
 *     f = ffn_norm ? rmsnorm(x) * ffn_norm : x   -- parallel_ffn: f = a (x before the attention add)
 *     h = act(f Wgate (+b)) * (f Wup (+b)), act = SiLU or tanh-GELU; ungated: xielu(f Wup (+b))
 *     d = h Wdown (+ b)
 *     x += residual_scale * (post_ffn_norm ? rmsnorm(d) * post_ffn_norm : d)
 *   logits = softcap(rmsnorm(x) * output_norm Wout / logit_scale; final_softcap)
 *
 * (rmsnorm of the pre- and output norms is LayerNorm when norm is MODEL_NORM_LAYER.)
 * An architecture differs from the plain llama block only by these fields; which
 * tensors exist decides the optional steps (a NULL norm is skipped).
 *
 * Invariants once loaded:
 *  - every matrix tensor's n_in/n_out match the hyper-parameters below and its
 *    data spans quant_row_bytes(type, n_in) * n_out valid bytes;
 *  - RoPE for arch "llama" rotates interleaved pairs (x[2i], x[2i+1]); q/k rows of
 *    Hugging Face checkpoints are permuted at load time to that order;
 *    arch "qwen2" uses rope_neox (pairs (x[i], x[i + n_rot/2])).
 *  - 1-D vectors (norms, biases) are f32 arrays owned or borrowed by the model.
 *  - every layer's window is 0 (global) or >= 1, and its rope_set < n_rope_sets.
 */
#ifndef KVI_MODEL_H
#define KVI_MODEL_H

#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "tokenizer/tokenizer.h"

/* q/k normalisation before RoPE */
typedef enum model_qk_norm {
    MODEL_QK_NONE = 0,
    MODEL_QK_HEAD, /* RMSNorm of each head, weights [head_dim] shared by the heads (qwen3, gemma3) */
    MODEL_QK_FULL, /* one RMSNorm over the whole projection, weights [n_heads * head_dim] (olmo2) */
} model_qk_norm;

typedef enum model_act {
    MODEL_ACT_SILU = 0,   /* SwiGLU */
    MODEL_ACT_GELU_TANH,  /* GeGLU with the tanh approximation (gemma) */
    MODEL_ACT_SWIGLU_OAI, /* gpt-oss: g = min(g, 7), u = clamp(u, -7, 7), g * sigmoid(1.702 g) * (u + 1) */
    MODEL_ACT_XIELU,      /* apertus, no gate: xielu(up) with the layer's parameters (model_xielu) */
    MODEL_ACT_RELU2,      /* nemotron_h, no gate: relu(up)^2 */
} model_act;

/* The norm of the block's pre-norms and the output norm (q/k and post norms stay RMS). */
typedef enum model_norm {
    MODEL_NORM_RMS = 0, /* x / sqrt(mean(x^2) + eps) * w */
    MODEL_NORM_LAYER,   /* (x - mean(x)) / sqrt(var(x) + eps) * w, no bias (cohere2) */
} model_norm;

/* xIELU's parameters of one layer (apertus), as the activation uses them:
 * alpha_p = softplus(raw alpha_p), alpha_n = beta + softplus(raw alpha_n);
 * xielu(x) = alpha_p x^2 + beta x (x > 0), (expm1(min(x, eps)) - x) alpha_n + beta x. */
typedef struct model_xielu {
    float alpha_p, alpha_n, beta, eps;
} model_xielu;

/* The kind of a hybrid model's recurrent layers. */
typedef enum model_ssm {
    MODEL_SSM_DELTA = 0, /* gated DeltaNet (fwd_delta.h) */
    MODEL_SSM_MAMBA2,    /* Mamba-2 (fwd_mamba2.h) */
} model_ssm;

/* How a mixture-of-experts layer turns router logits l [n_expert] into the chosen
 * experts and their weights (fwd_moe.c). Every kind selects the top n_expert_used
 * by its selection score, ties broken by the lower expert index. */
typedef enum model_gating {
    MODEL_GATE_SOFTMAX = 0, /* p = softmax(l); select by p (+ sel_bias: ERNIE); w = p[sel] (Mixtral, Qwen3-MoE) */
    MODEL_GATE_SIGMOID, /* p = sigmoid(l); select by p + sel_bias (in the chosen groups); w = p[sel] (DeepSeek-V3) */
    MODEL_GATE_SOFTMAX_CHOSEN, /* select by l; w = softmax over the chosen l only (gpt-oss) */
} model_gating;

/* One RoPE parameter set (a model has one, or two: gemma3's local layers use another
 * base and no scaling). Pair i of the n_rot rotated dims turns by pos * f_i,
 *   f_i = theta^(-2i / n_rot) / factor_i                 (factor: Llama 3, LongRoPE)
 *   f_i *= freq_scale (linear), or with YaRN (yarn_ext):
 *   f_i *= freq_scale * (1 - r_i) + r_i, r_i = ramp(i; yarn_lo, yarn_hi)
 * and cos, sin are multiplied by mscale (YaRN's and LongRoPE's attention factor). */
typedef struct model_rope {
    float theta;
    float freq_scale;     /* 1 / scaling factor; 1: none */
    const float *factors; /* [n_rot / 2] frequency divisors or NULL */
    bool yarn;            /* YaRN ramp between interpolation and extrapolation */
    float yarn_lo, yarn_hi;
    float mscale; /* multiplies cos and sin; 1: none */
    int n_rot;    /* rotated dims of this set (gemma4's sliding layers); 0: the model's n_rot */
} model_rope;

typedef struct model_layer {
    int window;                  /* 0: global attention; W: sliding window (sees pos-W+1..pos) */
    int rope_set;                /* index into rope[] */
    const float *attn_norm;      /* [dim] or NULL (no pre-norm: olmo2) */
    kern_tensor wq;              /* [n_heads * head_dim][dim] */
    kern_tensor wk;              /* [n_kv_heads * head_dim][dim] */
    kern_tensor wv;              /* [n_kv_heads * head_dim][dim] */
    const float *bq;             /* [n_heads * head_dim] or NULL */
    const float *bk;             /* [n_kv_heads * head_dim] or NULL */
    const float *bv;             /* [n_kv_heads * head_dim] or NULL */
    const float *q_norm;         /* [head_dim] (MODEL_QK_HEAD), [n_heads * head_dim] (FULL), or NULL */
    const float *k_norm;         /* [head_dim] or [n_kv_heads * head_dim], or NULL */
    kern_tensor wo;              /* [dim][n_heads * head_dim] */
    kern_tensor wo_gate;         /* [n_heads * head_dim][dim]: att *= sigmoid(a Wg^T) before wo (afmoe), or data NULL */
    const float *bo;             /* [dim] or NULL */
    const float *sinks;          /* [n_heads] attention sink logits (gpt-oss) or NULL */
    const float *post_attn_norm; /* [dim] or NULL */
    const float *ffn_norm;       /* [dim] or NULL */
    kern_tensor w_gate;          /* [ffn_dim][dim] */
    kern_tensor w_up;            /* [ffn_dim][dim] */
    kern_tensor w_down;          /* [dim][ffn_dim] */
    const float *b_gate;         /* [ffn_dim] or NULL */
    const float *b_up;           /* [ffn_dim] or NULL */
    const float *b_down;         /* [dim] or NULL */
    const float *post_ffn_norm;  /* [dim] or NULL */
    /* mixture of experts (moe): the FFN above is replaced by the routed experts (the
     * dense w_gate / w_up / w_down stay NULL) plus, when sh_gate is bound, a shared
     * expert; E = n_expert, F = expert_ffn. Expert e's matrices are rows
     * [e * F, (e + 1) * F) of exp_gate / exp_up and [e * dim, (e + 1) * dim) of exp_down. */
    bool moe;
    kern_tensor router;         /* [E][dim] ffn_gate_inp */
    const float *router_b;      /* [E] or NULL (gpt-oss) */
    const float *sel_bias;      /* [E] exp_probs_b: added to the selection score only, or NULL */
    kern_tensor exp_gate;       /* [E * F][dim] */
    kern_tensor exp_up;         /* [E * F][dim], or data NULL when exp_gate_up */
    bool exp_gate_up;           /* exp_gate is one fused [E * 2F][dim] (ffn_gate_up_exps): expert e's
                                   gate rows [2eF, 2eF + F), its up rows [2eF + F, 2(e + 1)F) */
    kern_tensor exp_down;       /* [E * dim][F] */
    const float *exp_b_gate;    /* [E][F] or NULL */
    const float *exp_b_up;      /* [E][F] or NULL */
    const float *exp_b_down;    /* [E][dim] or NULL */
    kern_tensor sh_gate, sh_up; /* [shared_ffn][dim] shared expert, or data NULL */
    kern_tensor sh_down;        /* [dim][shared_ffn] */
    /* multi-head latent attention (kvi_model mla_kv_rank > 0; wq / wk / wv unused,
     * wq only without a q rank): Q = NH heads of [nope | rope] = QH dims, KR = mla_kv_rank,
     * R = n_rot, VH = mla_v_dim. Head h's matrices of wk_b / wv_b are rows
     * [h * KR, (h + 1) * KR) / [h * VH, (h + 1) * VH). */
    kern_tensor wq_a;         /* [q_rank][dim], or data NULL (queries from wq [NH * QH][dim]) */
    const float *q_a_norm;    /* [q_rank] */
    kern_tensor wq_b;         /* [NH * QH][q_rank] */
    kern_tensor wkv_a;        /* [KR + R][dim]: the latent c and the shared RoPE key part */
    const float *kv_a_norm;   /* [KR] */
    kern_tensor wk_b;         /* [NH * KR][nope]: q_nope of head h into the latent space */
    kern_tensor wv_b;         /* [NH * VH][KR]: the latent output of head h to its value */
    const float *sh_gate_inp; /* [dim] the shared expert's scalar gate sigmoid(x . w), or NULL */
    /* DeepSeek V3.2's lightning indexer (kvi_model idx_heads > 0; fwd_dsa.h): IH heads of
     * ID dims, each [rope (n_rot) | nope]; one key per position in the KV pool's indexer rows */
    kern_tensor idx_wq_b;    /* [IH * ID][q_rank] the heads' queries from the normed q_a */
    kern_tensor idx_wk;      /* [ID][dim] the key */
    const float *idx_k_norm; /* [ID] LayerNorm weight of the key */
    const float *idx_k_bias; /* [ID] its bias */
    kern_tensor idx_proj;    /* [IH][dim] the heads' weights */
    /* gated DeltaNet (recurrent) layer, when recurrent (kvi_model ssm_*; fwd_delta.h): no
     * attention matrices and no KV; Hk key heads, Hv value heads of dk (= dv) dims,
     * C = conv_dim = 2 Hk dk + Hv dk, K = ssm_conv taps */
    bool recurrent;
    kern_tensor ssm_qkv;   /* [C][dim]: [q (Hk dk) | k (Hk dk) | v (Hv dk)], head-major */
    kern_tensor ssm_z;     /* [Hv dk][dim] output gate z */
    kern_tensor ssm_beta;  /* [Hv][dim] (qwen35) or data NULL */
    kern_tensor ssm_alpha; /* [Hv][dim] (qwen35) or data NULL */
    kern_tensor ssm_ba;    /* [2 Hv][dim] per key head g: r b's then r a's (qwen3next), or NULL */
    const float *conv_w;   /* [C][K] causal depthwise conv taps, [K - 1] the current token */
    const float *dt_bias;  /* [Hv], or [Hv dk] (ssm_kda: one per key channel) */
    const float *ssm_a;    /* [Hv] -exp(A_log), negative */
    const float *ssm_norm; /* [dk] gated output RMSNorm, shared by the heads */
    kern_tensor ssm_out;   /* [dim][Hv dk] (Mamba-2: [dim][d_inner]) */
    /* Mamba-2 layer (ssm_kind MODEL_SSM_MAMBA2; fwd_mamba2.h), besides conv_w [C][K],
     * dt_bias, ssm_a [n_h], ssm_norm [d_inner] (G groups; NULL: none) and ssm_out:
     * C = d_inner + 2 G N conv channels */
    kern_tensor ssm_in;  /* [2 d_inner + 2 G N + n_h][dim]: [z | x B C | dt] */
    const float *conv_b; /* [C] conv bias */
    const float *ssm_d;  /* [n_h] skip D */
    /* layers with one sub-layer only (nemotron_h): no_mixer, the FFN alone, normed by
     * attn_norm (bound as ffn_norm); no_ffn, the mixer alone */
    bool no_mixer, no_ffn;
    /* KDA (kvi_model ssm_kda): q, k, v from wq / wk / wv [Hv dk][dim] into conv_w's
     * [q | k | v] channels (ssm_qkv unbound), beta from ssm_beta, and low-rank gates of
     * rank R: the decay's f_b f_a and the output gate's g_b g_a */
    kern_tensor ssm_f_a, ssm_g_a; /* [R][dim] */
    kern_tensor ssm_f_b, ssm_g_b; /* [Hv dk][R] */
    /* position handling and activation of dense variants (smollm3, mistral3, apertus, ...) */
    bool no_rope;      /* q and k are not rotated (NoPE layer) */
    bool q_temp;       /* q times the position's temperature (kvi_model q_temp_*) after RoPE */
    model_xielu xielu; /* MODEL_ACT_XIELU's parameters; w_gate unbound (down(xielu(up x))) */
    /* llama4 and later (all false / 0: the blocks above) */
    bool qk_rms_post; /* q, k RMS-normed per head without weight after RoPE */
    int attn_chunk;   /* chunked attention: p sees (floor(p / C) C .. p]; 0: none */
    /* gemma4 (all 0 / NULL: the model's widths, own K/V) */
    int head_dim, n_kv_heads, ffn_dim; /* this layer's widths; 0: the model's */
    int kv_share;           /* 1 + the layer whose cached K/V this one reads (it stores none); 0: own */
    bool v_rms;             /* V RMS-normed per head without weight (wv absent: V = the raw K projection) */
    const float *out_scale; /* [1] the residual stream times it after the layer, or NULL */
    kern_tensor ple_gate;   /* [ple_dim][dim] inp_gate: per-layer input branch, or data NULL */
    kern_tensor ple_proj;   /* [dim][ple_dim] proj */
    const float *ple_norm;  /* [dim] post_norm of the branch */
} model_layer;

#define MODEL_MAX_ROPE_SETS 2

/* Upper bounds on hyper-parameters: far above any real model, low enough that
 * products of two of them cannot overflow 64 bits. */
#define MODEL_MAX_DIM (1 << 17)
#define MODEL_MAX_FFN (1 << 20)
#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_HEADS 4096
#define MODEL_MAX_HEAD_DIM 4096
#define MODEL_MAX_VOCAB (1 << 24)
#define MODEL_MAX_CTX (1 << 24)
#define MODEL_MAX_EXPERTS 1024

struct kvi_model {
    char arch[32];
    char name[64];
    int n_vocab;
    int dim; /* embedding width */
    int n_layers;
    int n_heads;
    int n_kv_heads; /* < n_heads with grouped-query attention */
    int head_dim;
    int ffn_dim;
    int n_ctx_train; /* context_length metadata */
    int n_rot;       /* rotated dimensions per head (<= head_dim) */
    float rms_eps;
    float rope_theta;        /* frequency base */
    bool rope_neox;          /* pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    const float *rope_freqs; /* [n_rot/2] frequency divisors (Llama 3) or NULL */
    /* the block's shape (see the top of this file); model_block_defaults() sets the
     * plain llama block, an architecture's hparams function changes what differs */
    model_qk_norm qk_norm;
    bool qk_norm_after_rope; /* q/k norm applied after RoPE (Hunyuan), else before */
    model_act act;
    float emb_scale;      /* 1: none */
    float residual_scale; /* 1: none */
    float kq_scale;       /* attention score scale (default 1/sqrt(head_dim)) */
    float attn_softcap;   /* 0: none */
    float final_softcap;  /* 0: none */
    float logit_scale;    /* logits divided by it; 1: none */
    int n_rope_sets;      /* 1 or 2 */
    model_rope rope[MODEL_MAX_ROPE_SETS];
    /* LongRoPE: both factor sets from the file; which one rope[0] uses is chosen per
     * engine by its context (model_rope_for_ctx) */
    const float *rope_long, *rope_short; /* [n_rot/2] or NULL */
    int rope_orig_ctx;                   /* original_context_length (LongRoPE, YaRN) */
    int n_unread_tensors;                /* tensors of another part (vision, MTP) left unread */
    int n_nextn;                         /* multi-token-prediction blocks after the layers, not run */
    int stage_l0, stage_l1;              /* layers whose tensors were read (a pipeline stage's
                                            load); [0, n_layers) for a whole model */
    /* mixture of experts: n_expert 0 for a dense model. Layers [0, n_dense_lead) keep
     * the dense FFN (DeepSeek's leading dense blocks), the others are moe. */
    int n_expert, n_expert_used;
    int expert_ffn;   /* F: one expert's width */
    int shared_ffn;   /* shared expert width (0: none) */
    int n_dense_lead; /* leading dense layers */
    model_gating gating;
    bool expert_norm;    /* the chosen weights divided by max(their sum, 2^-14) */
    float expert_scale;  /* the chosen weights multiplied by it (1: none) */
    int n_expert_groups; /* experts in n_expert_groups equal groups, only the */
    int n_groups_used;   /* n_groups_used best groups selectable (DeepSeek); 1, 1: none */
    /* multi-head latent attention (DeepSeek-V2/V3), on when mla_kv_rank > 0: the KV
     * cache holds per position and layer one row [c (mla_kv_rank) | k_pe (n_rot)]
     * = head_dim, n_kv_heads == 1, values inside the keys (KVI_TYPE_KV_LATENT);
     * queries are taken into that space (fwd_mla.h), kq_scale 1/sqrt(nope + n_rot) */
    int mla_q_rank;  /* 0: queries straight from wq */
    int mla_kv_rank; /* c's width */
    int mla_nope;    /* per-head query/key dims without RoPE (key_length_mla - n_rot) */
    int mla_v_dim;   /* per-head value dims (value_length_mla) */
    /* DeepSeek V3.2 sparse attention (fwd_dsa.h): the indexer's heads, key dims and the
     * positions each query keeps (top_k); idx_heads 0: none (dense MLA) */
    int idx_heads, idx_dim, idx_top_k;
    /* hybrid models (qwen35, qwen3next): layers marked recurrent are gated DeltaNet
     * layers keeping a fixed-size state per sequence (conv: (K - 1) C floats, delta
     * rule: Hv dk dk floats) instead of KV; n_recurrent of them; ssm_conv 0: none */
    int n_recurrent;
    int ssm_conv;    /* K: conv taps */
    int ssm_dk;      /* state_size: dims of a key / value head */
    int ssm_hk;      /* group_count: key heads */
    int ssm_hv;      /* time_step_rank: value heads, a multiple of ssm_hk */
    bool ssm_tiled;  /* value head j reads key head j % Hk (qwen35), else j / (Hv / Hk) */
    /* the recurrent layers' kind: DeltaNet as above, or Mamba-2 (granitehybrid,
     * nemotron_h, falcon-h1) with ssm_conv K, ssm_dk the state size N, ssm_hk the
     * groups G, ssm_hv the heads n_h, ssm_inner d_inner = n_h P; its state per layer:
     * conv (K - 1) (d_inner + 2 G N), SSM N d_inner floats (fwd_mamba2.h) */
    model_ssm ssm_kind;
    int ssm_inner;
    bool ssm_both;   /* every layer runs attention and a Mamba-2 mixer in parallel (falcon-h1) */
    /* KDA (kimi-linear) instead of the gated DeltaNet's gates: Hk == Hv; the decay per
     * key channel exp(softplus(f_b f_a x + dt_bias) A_j), the output gate sigmoid(g_b g_a x)
     * instead of SiLU(z); R = ssm_rank */
    bool ssm_kda;
    int ssm_rank;
    bool attn_gated; /* attention q rows per head [q | gate]; the output times sigmoid(gate) */
    /* lfm2: the recurrent layers are gated short convolutions (fwd_shortconv.h), not
     * DeltaNet: ssm_qkv is in_proj [3 dim][dim] -> [B | C | x], conv_w [dim][ssm_conv],
     * ssm_out out_proj [dim][dim]; state (ssm_conv - 1) dim floats; ssm_dk/hk/hv 0 */
    bool shortconv;
    /* dense variants: the pre- and output norms' kind; a parallel block (the FFN reads
     * the attention's normed input, no ffn_norm: x += attn(h) + ffn(h)); the query
     * temperature of layers with q_temp at position p:
     * 1 + q_temp_beta ln(floor((p + q_temp_offset) / q_temp_len) + 1) (beta 0: none;
     * mistral3: every layer; llama4: its NoPE layers, offset 1, len 8192, beta 0.1) */
    model_norm norm;
    bool parallel_ffn;
    float q_temp_beta;
    int q_temp_len, q_temp_offset;
    /* llama4: moe on layer l only when (l + 1) % moe_step == 0 (0, 1: every layer past
     * n_dense_lead); the chosen weight multiplies the expert's input instead of its output */
    int moe_step;
    bool moe_weight_input;
    /* gemma4 per-layer inputs (fwd_ple.h), P = ple_dim (0: none), N = n_layers */
    int ple_dim;
    kern_tensor ple_tok;        /* [n_vocab][N * P] per_layer_token_embd */
    kern_tensor ple_model_proj; /* [N * P][dim] per_layer_model_proj */
    const float *ple_proj_norm; /* [P] per_layer_proj_norm */

    kern_tensor tok_embd;     /* [n_vocab][dim] */
    const float *output_norm; /* [dim] */
    kern_tensor output;       /* [n_vocab][dim]; equals tok_embd when tied */
    model_layer *layers;      /* [n_layers] */

    tok_tokenizer *tok; /* never NULL after a successful load */
    bool has_weights;
    size_t weight_bytes;
    size_t file_bytes; /* bytes of the file(s) read or mapped (all shards) */

    /* ownership */
    gguf_ctx *gguf; /* GGUF source (NULL for other formats) */
    void **owned;   /* buffers to free with the model */
    size_t n_owned, cap_owned;
    void *map_addr; /* llama2.c / safetensors file mapped with use_mmap, or NULL */
    size_t map_len;
    struct model_enc *enc; /* embedding pooling, heads and encoder tensors (model_enc.h), or NULL */
};

/* Whether layer l's FFN is a mixture of experts (n_expert, n_dense_lead, moe_step). */
static inline bool model_layer_moe(const struct kvi_model *m, int l)
{
    return m->n_expert > 0 && l >= m->n_dense_lead && (m->moe_step <= 1 || (l + 1) % m->moe_step == 0);
}

/* Layer L's widths (its own, else the model's) and the widest K/V row any layer
 * stores (the cache's row: n_kv_heads * head_dim without per-layer widths). */
static inline int model_lhd(const struct kvi_model *m, const model_layer *L)
{
    return L->head_dim ? L->head_dim : m->head_dim;
}
static inline int model_lkvh(const struct kvi_model *m, const model_layer *L)
{
    return L->n_kv_heads ? L->n_kv_heads : m->n_kv_heads;
}
static inline int model_lffn(const struct kvi_model *m, const model_layer *L)
{
    return L->ffn_dim ? L->ffn_dim : m->ffn_dim;
}
int model_kv_dim(const struct kvi_model *m);

/* Keeps buf alive until the model is freed; returns buf (NULL on allocation failure
 * of the bookkeeping, in which case buf has been freed). */
void *model_own(struct kvi_model *m, void *buf);

/* The whole file at path, read into one 64-byte aligned buffer owned by the model,
 * or mapped read-only when use_mmap (one mapping per model). Empty files are an error. */
int model_read_file(struct kvi_model *m, const char *path, bool use_mmap, const uint8_t **data, size_t *size,
                    kvi_error *err);

/* A 1-D vector of n elements stored as F32, F16 or BF16, as f32: borrowed when it
 * is F32 and 4-byte aligned, else converted into a buffer owned by the model.
 * name is used in error messages only. */
int model_vec_f32(struct kvi_model *m, const char *name, const void *data, kvi_type type, int64_t n,
                  const float **out, kvi_error *err);

/* The plain llama block: no q/k norm, SiLU, scales 1, kq_scale 1/sqrt(head_dim), one
 * rope set from rope_theta / rope_freqs; every layer global. Loaders call it once the
 * widths are known, before an architecture adjusts the fields. */
void model_block_defaults(struct kvi_model *m);
/* YaRN on rope set r (its theta set): the ramp's correction range as llama.cpp
 * computes it from n_rot, the original context and beta_fast / beta_slow, the
 * frequency scale 1 / factor, mscale = attn_factor * (1 + 0.1 ln factor). */
void model_rope_yarn(model_rope *r, int n_rot, int orig_ctx, double factor, double beta_fast,
                     double beta_slow, double attn_factor);
/* The rope sets for an engine whose sequences hold n_ctx positions: LongRoPE models
 * take the long factors when n_ctx (rounded up to 256, as llama.cpp sizes contexts)
 * exceeds rope_orig_ctx, else the short ones; other models rope[] as loaded. */
void model_rope_for_ctx(const struct kvi_model *m, int n_ctx, model_rope out[MODEL_MAX_ROPE_SETS]);

/* The shape part of kvi_model_info (names, widths, heads, vocabulary, context) and
 * the layer kinds (window layers, largest window) of m's layers array (none when
 * NULL); the other fields are left as they are. */
void model_info_shape(const struct kvi_model *m, kvi_model_info *out);

/* Floats of one recurrent layer's state per sequence (fwd_delta.h's layout: conv
 * (K - 1) C, delta rule Hv dk dk; a short convolution's (K - 1) dim), 0 without
 * linear attention. */
size_t model_state_layer_floats(const struct kvi_model *m);

/* Checks the hyper-parameters alone (ranges, divisibility); loaders call it before
 * binding tensors. */
int model_check_hparams(const struct kvi_model *m, kvi_error *err);
/* src (NULL: "") into dst[cap] as one printable line: truncated, NUL-terminated,
 * control characters as '?' (names from a file go into messages and JSON). */
void model_copy_str(char *dst, size_t cap, const char *src);

/* "dir/name" in a malloc'd string (NULL on allocation failure). */
char *model_path_join(const char *dir, const char *name);

/* Hyper-parameters from a GGUF's metadata alone (no tensor is bound): arch, name,
 * context, widths, heads, head_dim, vocabulary size; unless metadata_only, also what
 * the forward pass computes with (n_rot, rms epsilon, rope base), checked by
 * model_check_hparams. The loader and kvi_model_info_from_file both read a file
 * through it, so they cannot disagree about a shape. */
int model_hparams_gguf(struct kvi_model *m, const gguf_ctx *g, bool metadata_only, kvi_error *err);

/* Loaders; each fills a zeroed model. On error the partially built model is freed
 * by the caller with kvi_model_free(). */
int model_load_gguf(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err);
/* The same from a GGUF image in memory that the caller keeps alive until
 * kvi_model_free() (fuzzing, tests); the weights stay in the caller's layout. */
int model_load_gguf_mem(struct kvi_model *m, const void *buf, size_t len, const kvi_load_params *p,
                        kvi_error *err);
int model_load_llama2c(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err);
int model_load_hf(struct kvi_model *m, const char *dir, const kvi_load_params *p, kvi_error *err);
/* Checks shapes and sizes of every tensor against the hyper-parameters. */
int model_validate(const struct kvi_model *m, kvi_error *err);
/* The part of model_validate every model shares: hyper-parameters, a tokenizer that
 * fits the embedding (encoders, model_enc.h, check their tensors as they bind them). */
int model_validate_vocab(const struct kvi_model *m, kvi_error *err);
/* A pipeline stage that runs layers [l0, l1) only: gives back the pages of the
 * GGUF tensors it never reads (blk.L.* of other layers; token_embd unless l0 == 0
 * or it is the tied head of the last stage; output.weight unless l1 == n_layers).
 * Their data must not be read afterwards. The bytes given back (0: not a GGUF). */
size_t model_release_layers(const struct kvi_model *m, int l0, int l1);
/* Whether a stage that runs layers [l0, l1) of n_layers reads tensor t (the rule
 * model_release_layers and a staged load, kvi_load_params.stage_*, share): blk.L.*
 * for its layers, token_embd when l0 == 0 or it is the tied head of the last
 * stage, output.weight on the last stage, every other tensor (norms, RoPE factors). */
/* The layers a GGUF's model runs, from its metadata alone: block_count less the
 * trailing multi-token-prediction blocks (nextn_predict_layers); 0 when unreadable. */
int model_gguf_n_layers(const gguf_ctx *g);
bool model_stage_keeps(const gguf_ctx *g, const gguf_tensor *t, int l0, int l1, int n_layers);

#endif
