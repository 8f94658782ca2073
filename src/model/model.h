/*
 * model.h — the weights and hyper-parameters of a decoder-only transformer
 * (architectures "llama" and "qwen2"), bound from a GGUF file, a llama2.c
 * checkpoint or a Hugging Face folder.
 *
 * Invariants once loaded:
 *  - every matrix tensor's n_in/n_out match the hyper-parameters below and its
 *    data spans quant_row_bytes(type, n_in) * n_out valid bytes;
 *  - RoPE for arch "llama" rotates interleaved pairs (x[2i], x[2i+1]); q/k rows of
 *    Hugging Face checkpoints are permuted at load time to that order;
 *    arch "qwen2" uses rope_neox (pairs (x[i], x[i + n_rot/2])).
 *  - 1-D vectors (norms, biases) are f32 arrays owned or borrowed by the model.
 */
#ifndef KVI_MODEL_H
#define KVI_MODEL_H

#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "tokenizer/tokenizer.h"

typedef struct model_layer {
    const float *attn_norm; /* [dim] */
    kern_tensor wq;         /* [n_heads * head_dim][dim] */
    kern_tensor wk;         /* [n_kv_heads * head_dim][dim] */
    kern_tensor wv;         /* [n_kv_heads * head_dim][dim] */
    const float *bq;        /* [n_heads * head_dim] or NULL */
    const float *bk;        /* [n_kv_heads * head_dim] or NULL */
    const float *bv;        /* [n_kv_heads * head_dim] or NULL */
    kern_tensor wo;         /* [dim][n_heads * head_dim] */
    const float *ffn_norm;  /* [dim] */
    kern_tensor w_gate;     /* [ffn_dim][dim] */
    kern_tensor w_up;       /* [ffn_dim][dim] */
    kern_tensor w_down;     /* [dim][ffn_dim] */
} model_layer;

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
};

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
int model_load_llama2c(struct kvi_model *m, const char *path, const kvi_load_params *p, kvi_error *err);
int model_load_hf(struct kvi_model *m, const char *dir, const kvi_load_params *p, kvi_error *err);
/* Checks shapes and sizes of every tensor against the hyper-parameters. */
int model_validate(const struct kvi_model *m, kvi_error *err);

#endif
