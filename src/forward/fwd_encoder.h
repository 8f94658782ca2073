/*
 * fwd_encoder.h — one pass of an embedding model over whole inputs, without a KV
 * cache (model_enc.h: encoders, and decoders used for embeddings or reranking).
 */
#ifndef KVI_FWD_ENCODER_H
#define KVI_FWD_ENCODER_H

#include "base/threadpool.h"
#include "model/model_enc.h"

/* Runs n_in inputs (input i: toks[i][0 .. n_toks[i]), 1 <= n_toks[i], ids < n_vocab,
 * positions 0 .. n_toks[i] - 1, each attending only within itself) through m and
 * writes out as kvinfer.h's kvi_embed says for pooling (a kvi_pooling other than
 * KVI_POOLING_MODEL). Scratch is allocated here and freed before returning.
 * 0, KVI_E_INVALID (a token id), KVI_E_NOMEM, KVI_E_UNSUPPORTED (rank pooling
 * without a head), or a matrix product's error. */
int fwd_encode(tpool *pool, const struct kvi_model *m, const int32_t *const toks[], const int32_t n_toks[],
               int n_in, int pooling, float *out, kvi_error *err);

#endif
