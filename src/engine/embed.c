/*
 * embed.c — kvi_embed (kvinfer.h): the inputs checked against the engine's
 * context and the model's head, then one encoder pass (forward/fwd_encoder.h) on
 * the engine's threads. The KV cache and the engine's sequences are not touched;
 * the pass's scratch lives for the call only.
 */
#include "engine/engine_int.h"

#include "base/error.h"
#include "forward/fwd_encoder.h"

int kvi_embed(kvi_engine *e, const int32_t *const toks[], const int32_t n_toks[], int32_t n_inputs,
              kvi_pooling pooling, float *out, kvi_error *err)
{
    if (!e || !toks || !n_toks || !out || n_inputs < 1)
        return err_set(err, KVI_E_INVALID, "embed: no inputs");
    const struct kvi_model *m = kvi_engine_model(e);
    const int n_ctx = kvi_engine_n_ctx(e);
    int64_t total = 0;
    for (int32_t i = 0; i < n_inputs; i++) {
        if (n_toks[i] < 1 || !toks[i]) return err_set(err, KVI_E_INVALID, "embed: input %d is empty", (int)i);
        if (n_toks[i] > n_ctx)
            return err_set(err, KVI_E_CONTEXT_FULL,
                           "embed: input %d has %d tokens, more than the context of %d", (int)i,
                           (int)n_toks[i], n_ctx);
        total += n_toks[i];
    }
    if (total > (int64_t)1 << 30)
        return err_set(err, KVI_E_INVALID, "embed: %lld tokens in one call", (long long)total);
    if (pooling == KVI_POOLING_MODEL) pooling = kvi_model_pooling(m);
    return fwd_encode(engine_pool(e), m, toks, n_toks, n_inputs, (int)pooling, out, err);
}
