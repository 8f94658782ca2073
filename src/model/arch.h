/*
 * arch.h — the architectures kvinfer runs, as data.
 *
 * An architecture is the plain llama block (model.h) plus what differs: which
 * tensors the block has (flags below), its q/k norm and RoPE pairing, and a
 * function that reads the hyper-parameters only it has (scales, soft-caps,
 * sliding-window layers, a second RoPE set) into the model's block fields. Each
 * lives in one small file, arch_<name>.c, whose header says what differs;
 * arch_registry.c lists them. The loader (model_gguf.c) binds tensors by these
 * flags and the forward pass (forward.c) runs the fields: neither names an
 * architecture.
 *
 * Invariant: an architecture's hparams function only sets model fields; tensors
 * are bound afterwards, so a refused key never leaves half-bound weights.
 */
#ifndef KVI_MODEL_ARCH_H
#define KVI_MODEL_ARCH_H

#include "model/model.h"

enum {
    ARCH_FUSED_QKV = 1 << 0,          /* attn_qkv [dim] -> [q | k | v] instead of attn_q, attn_k, attn_v */
    ARCH_FUSED_GATE_UP = 1 << 1,      /* ffn_up [dim] -> [gate | up], no ffn_gate (phi3) */
    ARCH_NO_PRE_NORM = 1 << 2,        /* no attn_norm / ffn_norm (olmo2) */
    ARCH_POST_NORMS = 1 << 3,         /* post_attention_norm and post_ffw_norm (gemma2/3, olmo2) */
    ARCH_VISION_PART = 1 << 4,        /* a multimodal file's vision tensors (v.*, mm.*) are left unread */
    ARCH_FFN_NORM_POST_ATTN = 1 << 5, /* the pre-FFN norm is stored as post_attention_norm (gpt-oss) */
    ARCH_FFN_NO_GATE = 1 << 6,        /* FFN down(act(up x)), no ffn_gate (apertus) */
    ARCH_PARALLEL = 1 << 7,           /* one norm a layer, no ffn_norm: the FFN reads attn_norm's output */
    ARCH_ATTN_OUT_GATE = 1 << 8,      /* attn_gate [q dims][dim]: att *= sigmoid(a Wg^T) (afmoe) */
    ARCH_ENCODER_TENSORS = 1 << 9,    /* BERT-family tensors, bound by model_enc_bind_encoder (model_enc.h) */
    ARCH_V_FROM_K = 1 << 10,          /* attn_v may be absent: V is K's projection (gemma4), and
                                         layers with kv_share bind no K/V */
    ARCH_OUT_NORM_EMBD = 1 << 11,     /* the output norm is stored as token_embd_norm (lfm2) */
    ARCH_FFN_NORM_BARE = 1 << 13,     /* the FFN norm is named blk.N.ffn_norm, without .weight (falcon-h1) */
    ARCH_DSA_INDEXER = 1 << 17,       /* a lightning indexer per layer (deepseek32, fwd_dsa.h) */
};

typedef struct model_arch {
    const char *name; /* general.architecture */
    unsigned flags;
    model_qk_norm qk_norm;
    bool rope_neox;
    /* reads what differs from the llama block (after the common keys and
     * model_block_defaults); NULL: nothing */
    int (*hparams)(struct kvi_model *m, const gguf_ctx *g, kvi_error *err);
} model_arch;

/* The architecture named name, or NULL. */
const model_arch *model_arch_find(const char *name);
/* "llama, qwen2, ..." into buf[cap] (for error messages) */
void model_arch_list(char *buf, size_t cap);

/* ---- for the architecture files ---- */

/* "<arch>.<key>" as an int in [lo, hi] / a float > 0 ; def when absent and !required */
int model_gguf_int(const gguf_ctx *g, const char *arch, const char *key, bool required, int64_t def,
                   int64_t lo, int64_t hi, int *out, kvi_error *err);
int model_gguf_float(const gguf_ctx *g, const char *arch, const char *key, bool required, double def,
                     float *out, kvi_error *err);
/* Sliding-window layers as llama.cpp lays them out: "<arch>.attention.sliding_window"
 * (required) is W; "<arch>.attention.sliding_window_pattern" is a period P (layer l is
 * local when l % P < P - 1) or an array of per-layer flags; absent: def_period.
 * Local layers get window W and rope_set local_rope. */
int model_swa_layers(struct kvi_model *m, const gguf_ctx *g, int def_period, int local_rope, kvi_error *err);

/* Sliding-window layers by a period alone, as llama.cpp reads them for exaone4 and
 * cohere2: "<arch>.attention.sliding_window" (required) is W; the period P is
 * "<arch>.attention.sliding_window_pattern" when it is an integer (an array there
 * is ignored), else def_period; layer l is local when l % P < P - 1. Local layers
 * get window W, the global ones no RoPE when global_nope. */
int model_swa_period(struct kvi_model *m, const gguf_ctx *g, int def_period, bool global_nope,
                     kvi_error *err);
/* "<arch>.<key>" as one value per layer into out [n_layers] when it is an int32 array
 * of n_layers values in [lo, hi] (*is_array set); -1 when absent or a plain integer;
 * KVI_E_FORMAT otherwise (model_gguf_layers.c). */
int model_gguf_layer_ints(const gguf_ctx *g, const char *arch, const char *key, int n_layers, int64_t lo,
                          int64_t hi, int32_t *out, bool *is_array, kvi_error *err);
/* model_gguf_int, or the largest value when the key is such an array (n_layers: the
 * block count; 0 when not known yet: arrays refused as by model_gguf_int). */
int model_gguf_int_max(const gguf_ctx *g, const char *arch, const char *key, bool required, int64_t def,
                       int64_t lo, int64_t hi, int n_layers, int *out, kvi_error *err);

/* Hybrid models (qwen35, qwen3next): the ssm.* keys (conv taps, state size, key and
 * value heads, inner size) and which layers are gated DeltaNet layers:
 * "<arch>.attention.recurrent_layers" (per-layer flags) or, absent,
 * full_attention_interval I (default 4): layer l is recurrent when (l + 1) % I != 0. */
int model_hybrid_layers(struct kvi_model *m, const gguf_ctx *g, kvi_error *err);

/* Mamba-2 hybrids (granitehybrid, nemotron_h, falcon-h1; arch_mamba2.c): the ssm.* keys
 * (conv_kernel, inner_size, state_size, time_step_rank heads, group_count) into the
 * model's ssm_* fields with ssm_kind MODEL_SSM_MAMBA2; a layer is recurrent when its
 * attention.head_count_kv entry is 0 and, with mlp_layers, its feed_forward_length
 * entry is 0 too (then the layer is the mixer alone; a layer with an FFN width and no
 * KV heads is the FFN alone, and an attention layer has no FFN). */
int model_mamba2_layers(struct kvi_model *m, const gguf_ctx *g, bool mlp_layers, kvi_error *err);
/* The ssm.* keys alone (model_mamba2_layers reads them first), ssm_kind Mamba-2 ... */
int model_mamba2_keys(struct kvi_model *m, const gguf_ctx *g, kvi_error *err);
/* ... and without the kind or its checks (model_hybrid_layers, arch_mamba2.c) */
int model_ssm_keys(struct kvi_model *m, const gguf_ctx *g, kvi_error *err);
/* granite's four scales (embedding, residual, attention, logit) and its RoPE switch
 * rope.scaling.finetuned (absent: on), arch_granite.c */
int model_granite_scales(struct kvi_model *m, const gguf_ctx *g, kvi_error *err);

/* The routing keys of a mixture of experts (model.h; fwd_moe.h), those named in
 * `keys`: expert_gating_func (1 softmax, 2 sigmoid; def_gating when absent, or an
 * error when def_gating < 0), expert_weights_norm (absent: false), expert_weights_scale
 * (absent or 0: 1), expert_group_count / expert_group_used_count (absent: 1, all). */
enum { MOE_KEY_GATING = 1, MOE_KEY_NORM = 2, MOE_KEY_SCALE = 4, MOE_KEY_GROUPS = 8 };
int model_moe_keys(struct kvi_model *m, const gguf_ctx *g, unsigned keys, int def_gating, kvi_error *err);
/* Binders over a GGUF's tensors for model_enc.c (model_gguf.c's bind_matrix,
 * bind_vector, bind_experts: shapes and byte sizes checked, the tensor marked used). */
typedef struct gbind gbind;
int model_gbind_matrix(gbind *b, const char *name, int64_t n_in, int64_t n_out, bool required,
                       kern_tensor *out, kvi_error *err);
int model_gbind_vector(gbind *b, const char *name, int64_t n, bool required, const float **out,
                       kvi_error *err);
int model_gbind_experts(gbind *b, const char *name, int64_t n_in, int64_t n_out, int64_t n_exp,
                        kern_tensor *out, kvi_error *err);

/* An n-D tensor {ne[0], ne[1], ne[2], ne[3]} (GGUF order) as ne[0] ne[1] ne[2] ne[3]
 * f32 values (conv taps, per-head vectors stored as 4-D); the model its binder fills. */
int model_gbind_f32(gbind *b, const char *name, const int64_t ne[4], const float **out, kvi_error *err);
struct kvi_model *model_gbind_model(gbind *b);
/* Layer l's KDA mixer (model_gguf_kda.c; model.h's ssm_kda fields). */
int model_bind_kda(gbind *b, int l, kvi_error *err);

/* embedding models (model_enc.h) */
extern const model_arch model_arch_bert, model_arch_nomic_bert, model_arch_nomic_bert_moe,
    model_arch_modern_bert, model_arch_gemma_embedding;

extern const model_arch model_arch_llama, model_arch_qwen2, model_arch_qwen3, model_arch_gemma2,
    model_arch_gemma3, model_arch_phi3, model_arch_granite, model_arch_olmo2, model_arch_qwen3moe,
    model_arch_olmoe, model_arch_gptoss, model_arch_deepseek2, model_arch_qwen35, model_arch_qwen3next;
extern const model_arch model_arch_mistral3, model_arch_smollm3, model_arch_seed_oss, model_arch_apertus,
    model_arch_exaone4, model_arch_cohere2;
extern const model_arch model_arch_glm4moe, model_arch_minimax_m2, model_arch_hunyuan_moe, model_arch_ernie45_moe,
    model_arch_bailingmoe2, model_arch_afmoe, model_arch_qwen35moe;
extern const model_arch model_arch_llama4, model_arch_gemma4;
extern const model_arch model_arch_deepseek32;
extern const model_arch model_arch_lfm2, model_arch_lfm2moe;
extern const model_arch model_arch_granitehybrid, model_arch_nemotron_h, model_arch_falcon_h1;
extern const model_arch model_arch_kimi_linear;

#endif
