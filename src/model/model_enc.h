/*
 * model_enc.h — what an embedding model has beyond the decoder block of model.h:
 * the pooling it was converted with, the heads after the trunk (dense projections,
 * a reranker's classification head) and the encoder block's own tensors
 * (absolute position and token-type embeddings, LayerNorm biases, BERT's post-LN).
 *
 * An encoder (bert, nomic-bert, nomic-bert-moe, modern-bert, gemma-embedding)
 * attends bidirectionally, keeps no KV cache and has no logits; its block, as
 * fwd_encoder.c runs it, is model.h's with these differences:
 *
 *   x = embed(token) * emb_scale (+ pos_embd[pos]) (+ tok_type0); x = LN(x) by embd_norm
 *   per layer (post_ln, BERT): h = LN(x + attn(x)) by attn_out_norm
 *                              x = LN(h + ffn(h)) by out_norm
 *   per layer (pre-norm):      model.h's block, norms LayerNorm when layer_norm
 *   ffn: gated (model.h), or plain when w_gate is unbound: down(gelu(up h + b_up)) + b_down;
 *        experts: sum of the chosen experts' plain GELU FFNs, weighted by the
 *        router's softmax probabilities as they are
 *   out = output_norm ? norm(x) : x
 * The attention mask: all of the input's positions (encoders), or 0..pos (decoders);
 * a window layer of an encoder sees |p_q - p_k| <= window / 2.
 *
 * After the trunk, per input (kvinfer.h kvi_pooling): pooled rows, then each dense
 * projection in turn (gemma-embedding: dense_2, dense_3, also on per-token rows);
 * rank pooling: h = [CLS] row (encoders) or last row (decoders);
 * h = tanh(cls h + cls_b) when cls is bound; scores = cls_out h + cls_out_b,
 * softmax over them when cls_softmax (qwen3).
 *
 * Invariants once loaded: every bound vector has dim floats (cls_b: dim,
 * cls_out_b: n_cls_out); pos_embd has n_pos >= 1 rows of dim; dense[i] chain from
 * dim to n_embd_out; cls_out is [n_cls_out][dim].
 */
#ifndef KVI_MODEL_ENC_H
#define KVI_MODEL_ENC_H

#include "model/model.h"

#define MODEL_MAX_DENSE 2

typedef struct model_enc_layer {
    const float *attn_norm_b;     /* [dim] LayerNorm bias of attn_norm, or NULL */
    const float *ffn_norm_b;      /* [dim] or NULL */
    const float *attn_out_norm;   /* [dim] post-LN after attention (BERT), or NULL */
    const float *attn_out_norm_b; /* [dim] or NULL */
    const float *out_norm;        /* [dim] post-LN after the FFN (BERT), or NULL */
    const float *out_norm_b;      /* [dim] or NULL */
} model_enc_layer;

typedef struct model_enc {
    int pooling;              /* kvi_pooling of the file: <arch>.pooling_type (0: none) */
    bool encoder;             /* bidirectional attention, no KV cache, no logits */
    bool layer_norm;          /* norms are LayerNorm (mean removed, bias) instead of RMSNorm */
    bool post_ln;             /* BERT's post-LN blocks (model_enc_layer attn_out_norm, out_norm) */
    bool rope;                /* RoPE on q and k (else absolute positions or none) */
    bool sym_window;          /* a window layer sees |p_q - p_k| <= window / 2 (else the last window) */
    int moe_every;            /* layer l has experts when l % moe_every == 1 (nomic-bert-moe); 0: none */
    kern_tensor pos_embd;     /* [n_pos][dim] absolute positions, or data NULL */
    const float *tok_type0;   /* [dim] row 0 of token_types (llama.cpp's sentence A), or NULL */
    const float *embd_norm;   /* [dim] LayerNorm of the embeddings, or NULL */
    const float *embd_norm_b; /* [dim] or NULL */
    const float *out_norm_b;  /* [dim] bias of output_norm (LayerNorm), or NULL */
    model_enc_layer *layers;  /* [n_layers] (encoders), or NULL */
    int n_dense;              /* projections after pooling */
    kern_tensor dense[MODEL_MAX_DENSE]; /* dense[i] [out_i][in_i], in_0 = dim */
    int n_embd_out;                     /* the vectors' length: dim, or the last dense's out */
    kern_tensor cls;                    /* [dim][dim] rerank dense before tanh, or data NULL */
    const float *cls_b;                 /* [dim] or NULL */
    kern_tensor cls_out;                /* [n_cls_out][dim], or data NULL */
    const float *cls_out_b;             /* [n_cls_out] or NULL */
    int n_cls_out;
    bool cls_softmax; /* the head's outputs through softmax (qwen3) */
} model_enc;

/* m->enc, allocated (zeroed, owned by m) on first use; NULL when out of memory.
 * The architectures' hparams functions set the encoder's switches through it. */
model_enc *model_enc_get(struct kvi_model *m);

/* For arch.h's binders (gbind: model_gguf.c's binder over the file's tensors). */
typedef struct gbind gbind;

/* The embedding heads any architecture may have (pooling_type, dense_N, cls.*):
 * read and bound into a new m->enc. Called for every GGUF model, before the
 * check that every tensor was used. */
int model_enc_bind_heads(gbind *b, struct kvi_model *m, const gguf_ctx *g, kvi_error *err);
/* An encoder's tensors (ARCH_ENCODER in arch.h) in place of the decoder's: the
 * embeddings, each layer's attention (fused qkv or three), norms with their biases,
 * the FFN (plain, gated, fused GeGLU or experts) and the output norm. */
int model_enc_bind_encoder(gbind *b, struct kvi_model *m, unsigned arch_flags, kvi_error *err);
/* The checks of model_validate that hold for an encoder (its tokenizer, embedding). */
int model_enc_validate(const struct kvi_model *m, kvi_error *err);

#endif
