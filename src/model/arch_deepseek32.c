/*
 * arch_deepseek32.c — "deepseek32" (DeepSeek V3.2 with DeepSeek Sparse Attention, as
 * llama.cpp's converter writes it).
 *
 * What differs from deepseek2 (arch_deepseek2.c, whose keys it reads first: latent
 * attention, experts, YaRN):
 *  - a lightning indexer in every layer (model.h idx_*, fwd_dsa.h): IH heads of ID
 *    dims whose queries come from the normed q_a, one key per position from the
 *    layer input (LayerNorm with weight and bias), NeoX RoPE on the first n_rot dims
 *    of both, a weight per head; each query keeps the idx_top_k past positions of
 *    largest sum_j w_j relu(q_j . k), and its latent attention reads only those;
 *  - the indexer keys are a second per-position cache beside the latent rows (the
 *    KV pool's indexer rows, kv_cache.h), f32.
 * Keys: attention.indexer.head_count, attention.indexer.key_length (2 n_rot: llama.cpp
 * takes the no-RoPE half at an offset of its own size), attention.indexer.top_k.
 *
 * Invariant: idx_heads > 0 exactly for this architecture's models; hparams sets
 * fields only (tensors are bound afterwards by model_gguf.c).
 */
#include "model/arch.h"

#include "base/error.h"

static int deepseek32_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    int rc;
    if ((rc = model_arch_deepseek2.hparams(m, g, err))) return rc;
    if ((rc = model_gguf_int(g, "deepseek32", "attention.indexer.head_count", true, 0, 1, 4096, &m->idx_heads,
                             err)) ||
        (rc = model_gguf_int(g, "deepseek32", "attention.indexer.key_length", true, 0, 2, MODEL_MAX_HEAD_DIM,
                             &m->idx_dim, err)) ||
        (rc = model_gguf_int(g, "deepseek32", "attention.indexer.top_k", true, 0, 1, 1 << 24, &m->idx_top_k,
                             err)))
        return rc;
    if (m->mla_q_rank == 0 || m->idx_dim != 2 * m->n_rot)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: deepseek32: the indexer needs attention.q_lora_rank > 0 (has %d) and "
                       "indexer.key_length %d equal to 2 x rope.dimension_count %d",
                       m->mla_q_rank, m->idx_dim, m->n_rot);
    return 0;
}

const model_arch model_arch_deepseek32 = { "deepseek32", ARCH_DSA_INDEXER, MODEL_QK_NONE, false,
                                           deepseek32_hparams };
