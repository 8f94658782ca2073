/*
 * arch_gemma_embd.c — "gemma-embedding" (EmbeddingGemma): the gemma3 block
 * (arch_gemma.c: GeGLU, embedding times sqrt(dim), pre and post norms, per-head
 * q/k RMSNorm, 1/sqrt(head_dim)) with bidirectional attention (llama.cpp hard-codes
 * it for this arch), a symmetric sliding window on the local layers (period 6
 * unless sliding_window_pattern says otherwise; local RoPE base
 * rope.freq_base_swa, else 10000), mean pooling and the dense projections
 * dense_2, dense_3 after it (model_enc.h).
 */
#include "model/arch.h"
#include "model/model_enc.h"

#include "base/error.h"

#include <math.h>

static int gemma_embd_hparams(struct kvi_model *m, const gguf_ctx *g, kvi_error *err)
{
    model_enc *e = model_enc_get(m);
    if (!e) return err_set(err, KVI_E_NOMEM, "gguf: out of memory");
    e->encoder = true;
    e->rope = true;
    e->sym_window = true;
    m->act = MODEL_ACT_GELU_TANH;
    m->emb_scale = sqrtf((float)m->dim);
    m->kq_scale = 1.0f / sqrtf((float)m->head_dim);
    m->n_rope_sets = 2;
    m->rope[1] = (model_rope){ .theta = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f };
    int rc = model_gguf_float(g, m->arch, "rope.freq_base_swa", false, 10000.0, &m->rope[1].theta, err);
    return rc ? rc : model_swa_layers(m, g, 6, 1, err);
}

const model_arch model_arch_gemma_embedding = { "gemma-embedding", ARCH_POST_NORMS, MODEL_QK_HEAD, true,
                                                gemma_embd_hparams };
