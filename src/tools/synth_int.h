/*
 * synth_int.h — private to tools/synth*.c: the tensor table synth.c streams into a
 * GGUF, and the hooks of architectures described in their own file
 * (synth_llama4.c, synth_gemma4.c) instead of synth.c's common table.
 *
 * A table is an array of synth_tensor in file order; each tensor's values depend
 * only on (seed, name) (synth.c). An architecture with hooks builds its whole
 * table (at most table_cap(p) tensors) and writes its keys after the common ones
 * (a key written again replaces the common value).
 */
#ifndef KVI_TOOLS_SYNTH_INT_H
#define KVI_TOOLS_SYNTH_INT_H

#include "formats/gguf.h"
#include "kvinfer.h"

typedef enum synth_kind {
    SK_MATRIX,      /* N(0, 0.02) */
    SK_NORM,        /* 1 + N(0, 0.02) */
    SK_BIAS,        /* N(0, 0.02), 1-D */
    SK_ROPE_LONG,   /* LongRoPE factors, the long set */
    SK_ROPE_SHORT,  /* ... the short set */
    SK_ROUTER,      /* N(0, 0.02), a matrix kept in F32 (llama.cpp's quantiser leaves routers) */
    SK_SINK,        /* attention sink logits: 1 + N(0, 0.02) */
    SK_CONV,        /* DeltaNet conv taps: N(0, 0.3), F32 (llama-quantize leaves them) */
    SK_SSM_A,       /* DeltaNet decay rates, stored negative: -exp(N(-1.5, 0.5)) */
    SK_DT_BIAS,     /* DeltaNet time-step bias: 1 + N(0, 0.3) */
    SK_ONE,         /* a vector of ones (gemma4's layer_output_scale) */
    SK_PROP_ROPE,   /* gemma4's proportional RoPE factors: 1 for the first quarter of the pairs, then 1e30 */
    SK_ROPE_LLAMA3, /* llama4's Llama 3 frequency factors (synth_llama3_factor) */
    SK_ROPE_FREQS,  /* Llama 3 frequency factors of apertus / exaone4 (synth_dense_t3.h) */
} synth_kind;

typedef struct synth_tensor {
    char name[64];
    int64_t ne[4]; /* GGUF dims: ne[0] row length, ne[1] rows (1 for a vector), ne[2] experts (1), ne[3] 1 */
    uint32_t n_dims; /* 1 for vectors, 2 for matrices (and expert biases), 3 for expert matrices, 4 for
                        kimi-linear's conv taps {K, 1, C, 1} and ssm_a {1, H, 1, 1} */
    kvi_type type;
    synth_kind kind;
} synth_tensor;

typedef struct synth_table {
    synth_tensor *t;
    size_t n;
} synth_table;

/* A tensor {ne0, ne1} of kind (matrices stored as `want`, or a fallback type). */
void synth_add(synth_table *tab, const char *name, int64_t ne0, int64_t ne1, synth_kind kind, kvi_type want);
/* An expert tensor {ne0, ne1, n_exp}: a matrix per expert, or (bias) a vector per expert. */
void synth_add_experts(synth_table *tab, const char *name, int64_t ne0, int64_t ne1, int64_t n_exp,
                       synth_kind kind, kvi_type want);
/* Tensor blk.<l>.<role>.weight {ne0, ne1} of kind, typed as llama-quantize types role
 * (synth_role_type); with n_exp > 0 an expert tensor {ne0, ne1, n_exp}. */
void synth_add_block(synth_table *tab, const kvi_synth_params *p, int l, const char *role, int64_t ne0,
                     int64_t ne1, synth_kind kind, int64_t n_exp);
/* The type llama-quantize gives matrix `role` of layer l (-1: not in a block). */
kvi_type synth_role_type(const kvi_synth_params *p, const char *role, int l, bool is_output);

/* Llama 3's RoPE factor of pair i of n_rot / 2 (rope_freqs), as the converters
 * compute it: base, scaling factor, low / high frequency factors 1 / 4, over the
 * original context orig (llama4: factor 16, rope_orig_ctx; apertus / exaone4:
 * synth_dense_t3.c). */
float synth_llama3_factor(double base, int64_t n_rot, int64_t i, double factor, double orig);

/* p = a preset's common fields (F32, seed 1, named after the preset). */
void synth_preset_base(kvi_synth_params *p, const char *name, const char *arch, int dim, int ffn, int layers,
                       int heads, int kv_heads, int head_dim, int vocab, int ctx);

typedef struct synth_hooks {
    void (*resolve)(kvi_synth_params *p);                       /* defaults of the architecture's fields */
    int (*check)(const kvi_synth_params *p, kvi_error *err);    /* its fields' ranges */
    int (*metadata)(gguf_writer *w, const kvi_synth_params *p); /* its keys: 0 or KVI_E_NOMEM */
    size_t (*table_cap)(const kvi_synth_params *p);             /* tensors it writes at most */
    void (*table)(const kvi_synth_params *p, int n_vocab, synth_table *tab);
    int (*preset)(const char *name, kvi_synth_params *p); /* p filled for its preset name: 0, else -1 */
} synth_hooks;

extern const synth_hooks synth_hooks_llama4, synth_hooks_gemma4;
extern const synth_hooks synth_hooks_lfm2; /* lfm2, lfm2moe */
/* granitehybrid, nemotron_h, falcon-h1 (synth_mamba2.c) */
extern const synth_hooks synth_hooks_mamba2;
extern const synth_hooks synth_hooks_kimi_linear;

#endif
