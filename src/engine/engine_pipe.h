/*
 * engine_pipe.h — an engine as one stage of a pipeline split over processes.
 *
 * Each stage holds the same engine (same parameters, same sequences, same KV
 * block ids) and runs only its layers [l0, l1) of every forward pass. The root
 * stage (l0 == 0) decides: every change it makes to a sequence (create, fork,
 * free, truncate, prefix reuse) and every batch it runs is sent to the other
 * stages as an op message before its own pass starts, and they apply the ops in
 * the same order (engine_pipe_apply), so their block tables stay identical to
 * the root's (each STEP op carries a hash of the root's block tables after the
 * reservation, checked by every stage). Activations x [rows][dim] f32 go from
 * stage to stage (send_x / recv_x, per forward chunk of n_batch_max rows); the
 * last stage (l1 == n_layers) runs the output head and sends the logits
 * [n_out][n_vocab] f32 to the root.
 *
 * The engine knows nothing of the transport: the callbacks below move the bytes
 * (src/pipeline/ binds them to MPI). A callback returns 0 or a KVI_E_* code.
 *
 * Op message, int32 [len]:
 *   [PIPE_OP_CREATE, slot]                 [PIPE_OP_FREE, slot]
 *   [PIPE_OP_FORK, src slot, new slot]     [PIPE_OP_TRUNCATE, slot, n]
 *   [PIPE_OP_REUSE, slot, n, held, tokens [n]]
 *   [PIPE_OP_STEP, n rows, tables hash lo, hi, rows [n][slot, token, pos, want]]
 *   [PIPE_OP_END]
 */
#ifndef KVI_ENGINE_PIPE_H
#define KVI_ENGINE_PIPE_H

#include "kvinfer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    PIPE_OP_END = 0,
    PIPE_OP_CREATE = 1,
    PIPE_OP_FREE = 2,
    PIPE_OP_FORK = 3,
    PIPE_OP_TRUNCATE = 4,
    PIPE_OP_REUSE = 5,
    PIPE_OP_STEP = 6,
    PIPE_OP_HELLO = 7, /* start-up handshake (src/pipeline/), never given to an engine */
    PIPE_OP_STATS = 8, /* each stage's engine_pipe_stats to the root (src/pipeline/), idem */
};

typedef struct engine_pipe_io {
    void *ctx;
    int l0, l1;   /* this stage's layers [l0, l1) */
    int n_stages; /* stages of the pipeline: the root keeps up to this many steps in flight
                     (kvi_step_launch) */
    /* root (l0 == 0): to every other stage, in order */
    int (*send_op)(void *ctx, const int32_t *msg, size_t n);
    /* x [n][dim] f32 from the previous stage (l0 > 0), to the next (l1 < n_layers) */
    int (*recv_x)(void *ctx, float *x, size_t n_floats);
    int (*send_x)(void *ctx, const float *x, size_t n_floats);
    /* logits [n_out][n_vocab] f32: the last stage sends them to the root; the root
     * posts a receive per forward chunk (post_logits: logits must stay valid) and
     * completes the oldest posted receives, in order, covering n_floats floats
     * (wait_logits) when the step is finished (kvi_step_finish), so it computes its
     * next chunk, and its next launched step, while the later stages compute this
     * one */
    int (*post_logits)(void *ctx, float *logits, size_t n_floats);
    int (*wait_logits)(void *ctx, size_t n_floats);
    int (*send_logits)(void *ctx, const float *logits, size_t n_floats);
    /* what made a transport call fail (a rank that did not answer), or NULL */
    const char *(*failure)(void *ctx);
} engine_pipe_io;

/* Makes e one stage: io is copied. KVI_E_UNSUPPORTED for a context policy
 * other than "error" (it would move keys on one stage only) or a model with
 * recurrent layers; KVI_E_INVALID for a bad range. Call before any sequence
 * exists. Without window layers the engine's KV pool is rebuilt to hold only
 * layers [l0, l1), with the same number of block ids; with them every stage keeps
 * the whole model's pool (their parts are bounded by bytes, not by block ids). */
int engine_pipe_attach(kvi_engine *e, const engine_pipe_io *io, kvi_error *err);
/* A stage other than the root: applies one op message of the root (not END,
 * not HELLO). 0, or the error (a stage whose state differs from the root's). */
int engine_pipe_apply(kvi_engine *e, const int32_t *msg, size_t n, kvi_error *err);
/* What a stage's forward chunks cost since it was attached: compute_ms in its
 * layers; wait_ms in the transport (waiting for x from the previous stage, sending
 * x on, and on the root waiting for the logits, which is the later stages' time);
 * bytes_sent of x and logits (ops not counted); chunks and rows run. */
typedef struct engine_pipe_stats {
    double compute_ms, wait_ms;
    uint64_t bytes_sent, chunks, rows;
} engine_pipe_stats;
void engine_pipe_get_stats(const kvi_engine *e, engine_pipe_stats *st);
/* The layers [*l0, *l1) e runs; false when e is no stage of a pipeline. */
bool engine_pipe_range(const kvi_engine *e, int *l0, int *l1);

#endif
