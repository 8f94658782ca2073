/*
 * engine_pipe.c — a stage other than the root applies the root's op messages
 * (engine_pipe.h) to its own engine.
 *
 * Invariant: after each op, this engine's sequences (slots, lengths, block
 * tables) equal the root's after the same op. Every op is a deterministic call
 * of the public API on identical state, and each result the root saw (the new
 * slot, the prefix length held, the block tables of a step) is carried in the
 * message and checked here, so a divergence is an error, never wrong bits.
 */
#include "engine/engine_pipe.h"

#include "engine/engine_int.h"
#include "base/error.h"

#include <stdlib.h>

static int apply_step(kvi_engine *e, const int32_t *msg, size_t n, kvi_error *err)
{
    const int32_t rows = msg[1];
    if (rows <= 0 || n != 4 + 4 * (size_t)rows)
        return err_set(err, KVI_E_INVALID, "pipeline: malformed STEP op (%d rows, %zu ints)", rows, n);
    kvi_batch *b = kvi_batch_create(rows);
    if (!b) return err_set(err, KVI_E_NOMEM, "pipeline: out of memory for a batch of %d rows", rows);
    int rc = 0;
    for (int32_t i = 0; i < rows && !rc; i++) {
        const int32_t *r = msg + 4 + 4 * (size_t)i; /* slot, token, pos, want */
        kvi_seq *s = engine_seq_at(e, r[0]);
        if (!s)
            rc = err_set(err, KVI_E_INVALID, "pipeline: STEP row %d names no sequence (slot %d)", i, r[0]);
        else if (kvi_batch_add(b, s, r[1], r[2], r[3] != 0) < 0)
            rc = err_set(err, KVI_E_INVALID, "pipeline: cannot add STEP row %d", i);
    }
    if (!rc) {
        engine_pipe_expect(e, (uint64_t)(uint32_t)msg[2] | (uint64_t)(uint32_t)msg[3] << 32);
        rc = kvi_step(e, b, err);
    }
    kvi_batch_free(b);
    return rc;
}

static int apply_reuse(kvi_engine *e, const int32_t *msg, size_t n, kvi_error *err)
{
    kvi_seq *s = engine_seq_at(e, msg[1]);
    if (!s || msg[2] < 0 || n != 4 + (size_t)msg[2])
        return err_set(err, KVI_E_INVALID, "pipeline: malformed REUSE op");
    const int32_t held = kvi_seq_reuse_prefix(s, msg + 4, msg[2]);
    if (held != msg[3])
        return err_set(err, KVI_E_INVALID, "pipeline: prefix reuse held %d positions here, %d on the root",
                       held, msg[3]);
    return 0;
}

int engine_pipe_apply(kvi_engine *e, const int32_t *msg, size_t n, kvi_error *err)
{
    static const size_t len[] = {
        [PIPE_OP_CREATE] = 2, [PIPE_OP_FREE] = 2, [PIPE_OP_FORK] = 3, [PIPE_OP_TRUNCATE] = 3
    };
    if (n < 1) return err_set(err, KVI_E_INVALID, "pipeline: empty op");
    const int32_t op = msg[0];
    if (op == PIPE_OP_STEP && n >= 4) return apply_step(e, msg, n, err);
    if (op == PIPE_OP_REUSE && n >= 4) return apply_reuse(e, msg, n, err);
    if (op < PIPE_OP_CREATE || op > PIPE_OP_TRUNCATE || n != len[op])
        return err_set(err, KVI_E_INVALID, "pipeline: unknown or malformed op %d (%zu ints)", op, n);
    kvi_seq *s = op == PIPE_OP_CREATE ? NULL : engine_seq_at(e, msg[1]);
    if (op != PIPE_OP_CREATE && !s)
        return err_set(err, KVI_E_INVALID, "pipeline: op %d names no sequence (slot %d)", op, msg[1]);
    switch (op) {
    case PIPE_OP_CREATE:
        s = kvi_seq_create(e);
        if (!s || engine_seq_slot(s) != msg[1])
            return err_set(err, KVI_E_INVALID, "pipeline: sequence created in slot %d here, %d on the root",
                           s ? engine_seq_slot(s) : -1, msg[1]);
        return 0;
    case PIPE_OP_FREE: kvi_seq_free(s); return 0;
    case PIPE_OP_FORK: {
        kvi_seq *c = kvi_seq_fork(s);
        if (!c || engine_seq_slot(c) != msg[2])
            return err_set(err, KVI_E_INVALID, "pipeline: sequence forked into slot %d here, %d on the root",
                           c ? engine_seq_slot(c) : -1, msg[2]);
        return 0;
    }
    default: { /* PIPE_OP_TRUNCATE */
        const int rc = kvi_seq_truncate(s, msg[2]);
        return rc ? err_set(err, rc, "pipeline: truncate of slot %d to %d failed here", msg[1], msg[2]) : 0;
    }
    }
}
