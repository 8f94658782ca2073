/*
 * quantize_mix.h — llama.cpp's choice of each tensor's type in a quantised file
 * (llama-quant.cpp: tensor_allows_quantization, llama_tensor_get_type(_impl),
 * tensor_type_fallback), private to quantize.c.
 *
 * qmix_state carries the model's hyper-parameters the rules read and the counters
 * they advance: tensors must be presented once each, in the order llama-quantize
 * visits them (non-layer tensors by name, then by layer number, then by name).
 */
#ifndef KVI_QUANTIZE_MIX_H
#define KVI_QUANTIZE_MIX_H

#include "tools/quantize.h"

#include <regex.h>

typedef struct qmix_state {
    const quantize_params *p;
    int n_gqa;    /* heads per KV head of layer 0 (0 when unknown) */
    int n_expert; /* 0 for a dense model */
    int n_layer;  /* block_count */
    bool falcon;  /* architecture "falcon" */
    bool is_70b;  /* llama.cpp's LLM_TYPE_70B (a llama with 80 layers) */
    bool has_imatrix;
    bool tied; /* no output.weight in the file */
    int n_attention_wv, i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up;
    int n_fallback;
    regex_t *re; /* [p->n_overrides] compiled patterns */
} qmix_state;

/* The first pass over all tensor names: counts the attn_v-like matrices, notes an
 * output.weight (the embedding is not tied). */
void qmix_note(qmix_state *s, const char *name);
/* Whether a tensor of n_dims dimensions named name is quantised at all. */
bool qmix_allows(const quantize_params *p, const char *name, uint32_t n_dims);
/* The type tensor (name, ne, current type cur) is written in; advances the counters.
 * -1 (KVI_E_FORMAT in err) for a tensor the rules cannot place (bad layer). */
int qmix_type(qmix_state *s, const char *name, const int64_t *ne, uint32_t n_dims, kvi_type cur,
              kvi_type *out, kvi_error *err);
/* Whether llama-quantize refuses to write tensor name in type t without an imatrix. */
bool qmix_requires_imatrix(const char *name, kvi_type t, int ftype);

#endif
