/*
 * fwd_mla.h — multi-head latent attention (DeepSeek-V2/V3's MLA) of one layer over
 * a chunk of rows, in the absorbed form: the cache holds per position one row
 * [c | k_pe] of head_dim = KR + R (model.h), and every head attends over it as
 * one shared KV head.
 *
 * With NH heads, a head's query [q_nope (nope) | q_pe (R)] and c the normed latent:
 *   k_nope(h) = k_b[h]^T c,  v(h) = v_b[h] c       (the per-head form, never built)
 *   q_nope . k_nope(h) = (k_b[h] q_nope) . c         so the head's query in cache
 *   space is [k_b[h] q_nope (KR) | rope(q_pe) (R)],  scores over [c | rope(k_pe)],
 *   the attention output o(h) [KR + R] weighted rows of the cache, of which the first
 *   KR are the weighted c; the head's value is v_b[h] o(h)[0..KR).
 * Each row goes through its own fixed sequence of operations (matrix products of
 * its row, a per-row norm and RoPE), so a row gives the same bits alone or in any
 * batch, and prefill the bits of token-by-token decode.
 */
#ifndef KVI_FWD_MLA_H
#define KVI_FWD_MLA_H

#include "base/threadpool.h"
#include "model/model.h"

#include <stddef.h>

typedef struct fwd_mla fwd_mla;

/* Scratch for chunks of up to `chunk` rows; its bytes are added to *bytes. NULL
 * on allocation failure. */
fwd_mla *fwd_mla_create(const struct kvi_model *m, int chunk, size_t *bytes);
void fwd_mla_free(fwd_mla *s);

/* From the normed input xb [n][dim]: the queries in cache space q [n][NH * head_dim]
 * and the cache rows k [n][head_dim] (RoPE applied with the rows' tables rc, rs
 * [n][R / 2]). 0 or a matrix product's error. */
int fwd_mla_qk(fwd_mla *s, tpool *pool, const struct kvi_model *m, const model_layer *L, const float *xb,
               int n, const float *rc, const float *rs, float *q, float *k);
/* The normed q_a rows [n][q_rank] of the last fwd_mla_qk (q_rank > 0): the queries'
 * compressed form, which DeepSeek V3.2's indexer reads too (fwd_dsa.h). */
const float *fwd_mla_qa(const fwd_mla *s);
/* From the attention output att [n][NH * head_dim]: the heads' values
 * out [n][NH * mla_v_dim] (the input of attn_output). */
int fwd_mla_values(tpool *pool, const struct kvi_model *m, const model_layer *L, const float *att, int n,
                   float *out);

#endif
