/*
 * synth_moe_t3.h — what `kvinfer synth` writes beyond its common block for the
 * mixture-of-experts architectures of issue 36 (glm4moe, minimax-m2, hunyuan-moe,
 * ernie4_5-moe, bailingmoe2, afmoe, qwen35moe), as llama.cpp's converter writes
 * them (the goldens in ../shared/golden/arch, README-moe-t3.md, carry the same
 * keys and tensors): routing keys, leading dense blocks, the selection bias, the
 * ungated shared expert, afmoe's attention output gate, and the trailing
 * next-token-prediction (MTP) block of glm4moe and qwen35moe.
 *
 * synth.c calls these hooks for an architecture it flags as one of them; they
 * emit tensors through synth.c's own emitter (so types and mixes stay synth.c's)
 * and keys through the GGUF writer. Everything here depends on the resolved
 * parameters only.
 */
#ifndef KVI_TOOLS_SYNTH_MOE_T3_H
#define KVI_TOOLS_SYNTH_MOE_T3_H

#include "formats/gguf.h"
#include "kvinfer.h"

#include <stdint.h>

typedef enum synth_t3_kind { T3_MATRIX, T3_NORM, T3_BIAS } synth_t3_kind;

/* Adds tensor blk.<l>.<role-suffixed name> {ne0, ne1}; role names the matrix for
 * the quantisation mix ("ffn_down", "attn_gate", ...). */
typedef void (*synth_t3_emit)(void *ctx, int l, const char *name, int64_t ne0, int64_t ne1,
                              synth_t3_kind kind, const char *role);

/* Leading dense layers and trailing MTP blocks of the resolved p. */
int synth_t3_dense_lead(const kvi_synth_params *p);
int synth_t3_nextn(const kvi_synth_params *p);
/* Defaults of p (resolved by synth.c first): expert and shared widths. */
void synth_t3_resolve(kvi_synth_params *p);
/* The tensors of block l (l >= n_layers: an MTP block) that synth.c's common
 * block does not write. */
void synth_t3_block(const kvi_synth_params *p, int l, synth_t3_emit emit, void *ctx);
/* The architecture's keys that synth.c's common ones do not cover; < 0 on failure. */
int synth_t3_keys(gguf_writer *w, const kvi_synth_params *p);

#endif
