/*
 * forward.h — one transformer pass over a batch of rows.
 *
 * A row is (token, position, block table of its sequence). Prefill rows and
 * decode rows are the same thing here: a prompt contributes many rows, a decoding
 * sequence one. The caller has reserved KV blocks for every row's position.
 */
#ifndef KVI_FORWARD_H
#define KVI_FORWARD_H

#include "kv/kv_cache.h"
#include "model/lora.h"
#include "model/model.h"
#include "base/threadpool.h"

typedef struct fwd_rows {
    int n;                         /* rows, <= the n_rows_max of fwd_create */
    const int32_t *tokens;         /* [n] */
    const int32_t *pos;            /* [n] */
    const kv_table *const *tables; /* [n] the row's sequence */
    int n_out;                     /* rows that want logits */
    const int32_t *out_rows;       /* [n_out] row indices, increasing */
    float *logits;                 /* [n_out][n_vocab] */
    float *const *recv;            /* [n] per row: received attention out ([pos + 1],
                                         accumulated; see attn_args), or NULL; NULL: none */
    float *const *snap;            /* [n] per row: where the recurrent layers' states go as they
                                         are right after the row (kv state layout), or NULL;
                                         NULL: none */
    const lora_set *const *lora;   /* [n] per row: its LoRA adapters (lora.h) or NULL; NULL: none */
} fwd_rows;

typedef struct fwd_ctx fwd_ctx;

/* chunk: rows per chunk of the pass, 0 to size it by FWD_CHUNK_BYTES of scratch;
 * n_ctx: positions per sequence (LongRoPE models choose their factors by it) */
fwd_ctx *fwd_create(const struct kvi_model *m, int n_rows_max, int chunk, int n_threads, int block_size,
                    int n_ctx, kvi_error *err);
void fwd_free(fwd_ctx *f);
/* Bytes of scratch memory held (activations, attention tiles). */
size_t fwd_scratch_bytes(const fwd_ctx *f);
/* Rows routed to each expert since fwd_create, [n_layers][n_expert] (a row counts
 * once per chosen expert), or NULL for a dense model. */
const uint64_t *fwd_routed(const fwd_ctx *f);

/* Runs every layer over the rows: K and V of each row are written into the cache
 * at its position, then each row attends to its sequence's positions 0..pos.
 * 0, or the first matrix product's error (KVI_E_INVALID: a weight or token the
 * product refuses; KVI_E_NOMEM): the rows' cache positions are then partly
 * written and the logits undefined. */
int fwd_run(fwd_ctx *f, tpool *pool, kv_pool *kv, const fwd_rows *rows);
/* One pipeline stage of fwd_run: layers [l0, l1) only. l0 == 0 embeds the tokens;
 * l0 > 0 reads the rows' residual stream x [n][dim] from fwd_x, which the caller
 * filled with the previous stage's output. head: the output norm and logits after
 * layer l1 - 1 (l1 == n_layers). The stream after layer l1 - 1 stays in fwd_x.
 * Same bits as fwd_run for any split: each layer reads only x and its own cache. */
int fwd_run_layers(fwd_ctx *f, tpool *pool, kv_pool *kv, const fwd_rows *rows, int l0, int l1, bool head);
/* The residual stream [n_rows_max][dim] f32 of the last (or next) pass. */
float *fwd_x(fwd_ctx *f);

#endif
