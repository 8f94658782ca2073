/*
 * pipeline_mpi.c — the pipeline's transport over MPI (Open MPI): one rank per
 * stage, rank r runs plan stage r.
 *
 * Messages on the group's own communicator (a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN: an MPI failure is a KVI_E_IO here, never an abort):
 *   TAG_OP     root -> every rank   int32 op messages (engine_pipe.h), the
 *                                   handshake (PIPE_OP_HELLO) first, END last
 *   TAG_REPLY  rank -> root         the handshake's answer: int32 code, then the
 *                                   rank's message (char [REPLY_MSG])
 *   TAG_X      rank r -> r + 1      x [rows][dim] f32 of one forward chunk
 *   TAG_LOGITS last rank -> root    logits [n_out][n_vocab] f32 of one chunk
 *   TAG_STATS  rank -> root         its engine_pipe_stats, answering PIPE_OP_STATS
 * MPI keeps the order of messages of one sender, tag and communicator, so every
 * rank sees the ops, and each stage its chunks, in the root's order.
 *
 * Faults: Open MPI ends the job when a rank dies. A rank that stops answering is
 * the root's to catch: every send and receive of the root (rank 0) waits at most
 * the timeout (pipe_set_timeout), then fails with KVI_E_TIMEOUT naming the rank;
 * the world is then failed: no END is sent and MPI is not finalised (a stuck
 * rank would hold MPI_Finalize), so the root's process can exit non-zero at once
 * and the launcher ends the other ranks. The other ranks wait for the root
 * without a bound (a server may idle for hours).
 *
 * Handshake (PIPE_OP_HELLO), int32: [HELLO, hash lo, hash hi, engine params
 * (HELLO_PARAMS ints), plan (1 + 2 n ints)]. A rank answers 0 only when its model
 * hash and its own plan equal the root's and its engine was created.
 */
#include "pipeline/pipeline.h"

#include "base/error.h"
#include "engine/engine_pipe.h"
#include "model/model.h"

#include <mpi.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_OP 1
#define TAG_REPLY 2
#define TAG_X 3
#define TAG_LOGITS 4
#define TAG_STATS 5
#define REPLY_MSG 240
#define HELLO_PARAMS 12
#define OPQ_MAX 8 /* the root's op sends in flight (a step sends one) */

struct pipe_world {
    MPI_Comm comm;
    int rank, size;
    bool ended;                          /* the root sent END */
    double timeout_s;                    /* the root's bound on each wait (<= 0: none) */
    atomic_bool failed;                  /* a wait timed out: no END, no MPI_Finalize (after fail_msg) */
    char fail_msg[200];                  /* what timed out */
    long stall_after;                    /* fault injection: a rank > 0 stops answering after
                                            this many ops (0: never) */
    MPI_Request *lreq;                   /* [n_lreq] the root's posted logits receives, in order; */
    size_t *lfloats;                     /* [n_lreq] and their floats; lreq[l_head ..] not waited for */
    size_t n_lreq, cap_lreq, l_head;
    size_t block_bytes[PIPE_MAX_STAGES]; /* [size] each stage's bytes per KV block (the root's
                                               copy, from the handshake) */
    /* the root's op sends not known complete, oldest first: opq[(op_head + i) % OPQ_MAX],
     * i < n_op. An op is copied into its slot and sent to every rank without waiting: the
     * copy is delivered only once the rank has received it, which it does when done with
     * the ops before, and the root meanwhile computes the step's first layers. */
    struct op_slot {
        MPI_Request req[PIPE_MAX_STAGES]; /* [size] req[r] to rank r (req[0] unused) */
        int32_t *buf;                     /* [cap] the op */
        size_t cap;
    } opq[OPQ_MAX];
    int op_head, n_op;
};

/* A rank's answer to the handshake */
typedef struct hello_reply {
    int32_t code; /* 0 or the refusal's KVI_E_* */
    int32_t unused;
    uint64_t block_bytes; /* bytes of one KV block of its pool */
    char msg[REPLY_MSG];  /* the refusal */
} hello_reply;

bool pipe_have_mpi(void) { return true; }
int pipe_rank(const pipe_world *w) { return w->rank; }
int pipe_size(const pipe_world *w) { return w->size; }

/* An MPI return code as a kvi error. */
static int mpi_err(int rc, kvi_error *err, const char *what)
{
    if (rc == MPI_SUCCESS) return 0;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) len = 0;
    s[len] = 0;
    return err_set(err, KVI_E_IO, "pipeline: %s: MPI error %d (%s)", what, rc, len ? s : "?");
}

int pipe_init(int *argc, char ***argv, pipe_world **out, kvi_error *err)
{
    *out = NULL;
    int provided = MPI_THREAD_SINGLE;
    /* serialized: the server's scheduler thread steps the engine (one thread at a time) */
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return err_set(err, KVI_E_IO, "pipeline: MPI_Init_thread failed (%d)", rc);
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return err_set(err, KVI_E_UNSUPPORTED,
                       "pipeline: this MPI library cannot be called from more than one thread "
                       "(MPI_THREAD_SERIALIZED)");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    pipe_world *w = calloc(1, sizeof *w);
    if (!w) {
        MPI_Finalize();
        return err_set(err, KVI_E_NOMEM, "pipeline: out of memory");
    }
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
    if (!rc) rc = MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
    if (!rc) rc = MPI_Comm_rank(w->comm, &w->rank);
    if (!rc) rc = MPI_Comm_size(w->comm, &w->size);
    if (rc) {
        free(w);
        MPI_Finalize();
        return mpi_err(rc, err, "setting up the communicator");
    }
    *out = w;
    return 0;
}

static int ops_wait(pipe_world *w, int n);

void pipe_finish(pipe_world *w)
{
    if (!w) return;
    const bool failed = w->failed;
    if (!failed) {
        (void)ops_wait(w, w->n_op);
        MPI_Comm_free(&w->comm);
    }
    /* after a failure an op's sends may still be active (MPI could read the copy):
     * the copies stay, the process is ending */
    for (int i = 0; i < OPQ_MAX && !failed; i++) free(w->opq[i].buf);
    free(w->lreq);
    free(w->lfloats);
    free(w);
    if (!failed) MPI_Finalize();
}

void pipe_set_timeout(pipe_world *w, double seconds) { w->timeout_s = seconds; }
void pipe_set_test_stall(pipe_world *w, long n_ops) { w->stall_after = n_ops; }
const char *pipe_failure(const pipe_world *w) { return w && w->failed ? w->fail_msg : NULL; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Completes *req. On the root with a timeout: polls (MPI_Test, yielding between
 * tries after the first millisecond) and gives up after timeout_s, failing the
 * world with a message naming peer and what was awaited. 0, KVI_E_IO or
 * KVI_E_TIMEOUT. */
static int wait_req(pipe_world *w, MPI_Request *req, int peer, const char *what)
{
    if (w->failed) return KVI_E_TIMEOUT;
    if (w->rank != 0 || w->timeout_s <= 0)
        return MPI_Wait(req, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0 : KVI_E_IO;
    const double t0 = now_s();
    for (long i = 0;; i++) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return KVI_E_IO;
        if (done) return 0;
        if ((i & 63) != 0) continue;
        const double t = now_s() - t0;
        if (t > w->timeout_s) {
            snprintf(w->fail_msg, sizeof w->fail_msg,
                     "pipeline: rank %d did not answer within %g s (%s); the job ends", peer, w->timeout_s,
                     what);
            w->failed = true; /* an atomic store after the message */
            (void)MPI_Cancel(req);
            return KVI_E_TIMEOUT;
        }
        if (t > 1e-3) sched_yield();
    }
}

/* ---- the engine's callbacks (engine_pipe.h); ctx is the world ---- */

/* The root: the oldest op send leaves the ring. */
static void ops_pop(pipe_world *w)
{
    w->op_head = (w->op_head + 1) % OPQ_MAX;
    w->n_op--;
}

/* The root: completes the n oldest op sends (n <= n_op). 0 or wait_req's error. */
static int ops_wait(pipe_world *w, int n)
{
    int rc = 0;
    for (; n > 0 && !rc; n--) {
        struct op_slot *o = &w->opq[w->op_head];
        for (int r = 1; r < w->size && !rc; r++) rc = wait_req(w, &o->req[r], r, "sending it an op");
        ops_pop(w);
    }
    return rc;
}

/* The root: the op msg [n] to every other rank, in order. It returns once the op is
 * copied and its sends started; the oldest sends are completed here when OPQ_MAX are
 * in flight, the completed ones are retired. */
static int io_send_op(void *ctx, const int32_t *msg, size_t n)
{
    pipe_world *w = ctx;
    if (w->failed) return KVI_E_TIMEOUT; /* no slot is reused while a failed send may be active */
    while (w->n_op > 0) { /* retire what has completed, oldest first */
        struct op_slot *o = &w->opq[w->op_head];
        int done = 0;
        if (MPI_Testall(w->size - 1, o->req + 1, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return KVI_E_IO;
        if (!done) break;
        ops_pop(w);
    }
    int rc = w->n_op == OPQ_MAX ? ops_wait(w, 1) : 0;
    if (rc) return rc;
    struct op_slot *o = &w->opq[(w->op_head + w->n_op) % OPQ_MAX];
    if (n > o->cap) {
        int32_t *nb = realloc(o->buf, n * sizeof *nb);
        if (!nb) return KVI_E_NOMEM;
        o->buf = nb;
        o->cap = n;
    }
    memcpy(o->buf, msg, n * sizeof *msg);
    for (int r = 1; r < w->size; r++) o->req[r] = MPI_REQUEST_NULL;
    w->n_op++;
    for (int r = 1; r < w->size; r++)
        if (MPI_Isend(o->buf, (int)n, MPI_INT32_T, r, TAG_OP, w->comm, &o->req[r]) != MPI_SUCCESS)
            return KVI_E_IO;
    return 0;
}

/* n floats in pieces of at most INT_MAX / 2 elements (MPI counts are int) */
#define PIECE ((size_t)1 << 30)

static int io_recv(pipe_world *w, float *x, size_t n, int src, int tag)
{
    for (size_t o = 0; o < n; o += PIECE) {
        const int c = (int)(n - o < PIECE ? n - o : PIECE);
        MPI_Request q;
        if (MPI_Irecv(x + o, c, MPI_FLOAT, src, tag, w->comm, &q) != MPI_SUCCESS) return KVI_E_IO;
        const int rc = wait_req(w, &q, src, tag == TAG_LOGITS ? "waiting for the logits" : "waiting for activations");
        if (rc) return rc;
    }
    return 0;
}

static int io_send(pipe_world *w, const float *x, size_t n, int dst, int tag)
{
    for (size_t o = 0; o < n; o += PIECE) {
        const int c = (int)(n - o < PIECE ? n - o : PIECE);
        MPI_Request q;
        if (MPI_Isend(x + o, c, MPI_FLOAT, dst, tag, w->comm, &q) != MPI_SUCCESS) return KVI_E_IO;
        const int rc = wait_req(w, &q, dst, "sending it activations");
        if (rc) return rc;
    }
    return 0;
}

static int io_recv_x(void *ctx, float *x, size_t n)
{
    pipe_world *w = ctx;
    return io_recv(w, x, n, w->rank - 1, TAG_X);
}
static int io_send_x(void *ctx, const float *x, size_t n)
{
    pipe_world *w = ctx;
    return io_send(w, x, n, w->rank + 1, TAG_X);
}
/* The root: a receive of one chunk's logits from the last rank, posted now so the
 * last rank's send completes while the root computes its next chunk (or step). */
static int io_post_logits(void *ctx, float *lg, size_t n)
{
    pipe_world *w = ctx;
    if (w->l_head > 0) { /* the waited-for ones leave the front */
        memmove(w->lreq, w->lreq + w->l_head, (w->n_lreq - w->l_head) * sizeof *w->lreq);
        memmove(w->lfloats, w->lfloats + w->l_head, (w->n_lreq - w->l_head) * sizeof *w->lfloats);
        w->n_lreq -= w->l_head;
        w->l_head = 0;
    }
    for (size_t o = 0; o < n; o += PIECE) {
        if (w->n_lreq == w->cap_lreq) {
            const size_t cap = w->cap_lreq ? 2 * w->cap_lreq : 16;
            MPI_Request *nr = realloc(w->lreq, cap * sizeof *nr);
            if (nr) w->lreq = nr;
            size_t *nf = nr ? realloc(w->lfloats, cap * sizeof *nf) : NULL;
            if (!nf) return KVI_E_NOMEM;
            w->lfloats = nf;
            w->cap_lreq = cap;
        }
        const int c = (int)(n - o < PIECE ? n - o : PIECE);
        if (MPI_Irecv(lg + o, c, MPI_FLOAT, w->size - 1, TAG_LOGITS, w->comm, &w->lreq[w->n_lreq]) !=
            MPI_SUCCESS)
            return KVI_E_IO;
        w->lfloats[w->n_lreq++] = (size_t)c;
    }
    return 0;
}

/* The root: completes the oldest posted logits receives, in order, until n floats
 * are in (a whole step's: its chunks were posted together). */
static int io_wait_logits(void *ctx, size_t n)
{
    pipe_world *w = ctx;
    int rc = 0;
    size_t got = 0;
    while (got < n && w->l_head < w->n_lreq) {
        const int r = wait_req(w, &w->lreq[w->l_head], w->size - 1, "waiting for the logits");
        if (!rc) rc = r;
        got += w->lfloats[w->l_head++];
    }
    if (w->l_head == w->n_lreq) w->n_lreq = w->l_head = 0;
    return rc ? rc : got == n ? 0 : KVI_E_INVALID;
}
static int io_send_logits(void *ctx, const float *lg, size_t n)
{
    pipe_world *w = ctx;
    return io_send(w, lg, n, 0, TAG_LOGITS);
}

static const char *io_failure(void *ctx) { return pipe_failure(ctx); }

static int attach(pipe_world *w, kvi_engine *e, const pipe_plan *plan, kvi_error *err)
{
    const engine_pipe_io io = {
        .ctx = w,
        .l0 = plan->st[w->rank].l0,
        .l1 = plan->st[w->rank].l1,
        .n_stages = plan->n,
        .send_op = io_send_op,
        .recv_x = io_recv_x,
        .send_x = io_send_x,
        .post_logits = io_post_logits,
        .wait_logits = io_wait_logits,
        .send_logits = io_send_logits,
        .failure = io_failure,
    };
    const int rc = engine_pipe_attach(e, &io, err);
    /* the other stages' tensors: never read here */
    if (!rc) (void)model_release_layers(kvi_engine_model(e), io.l0, io.l1);
    return rc;
}

/* ---- the handshake ---- */

static void params_encode(const kvi_engine_params *p, int32_t *o)
{
    o[0] = p->n_ctx, o[1] = (int32_t)p->kv_type_k, o[2] = (int32_t)p->kv_type_v, o[3] = p->kv_block_size;
    o[4] = (int32_t)(uint32_t)p->kv_budget_bytes,
    o[5] = (int32_t)(uint32_t)((uint64_t)p->kv_budget_bytes >> 32);
    o[6] = p->n_seq_max, o[7] = p->n_batch_max, o[8] = p->prefix_cache, o[9] = p->fwd_chunk;
    o[10] = p->n_sink, o[11] = p->n_keep;
}

static void params_decode(const int32_t *o, kvi_engine_params *p)
{
    kvi_engine_params_default(p);
    p->n_ctx = o[0], p->kv_type_k = (kvi_type)o[1], p->kv_type_v = (kvi_type)o[2], p->kv_block_size = o[3];
    p->kv_budget_bytes = (size_t)((uint64_t)(uint32_t)o[4] | (uint64_t)(uint32_t)o[5] << 32);
    p->n_seq_max = o[6], p->n_batch_max = o[7], p->prefix_cache = o[8] != 0, p->fwd_chunk = o[9];
    p->n_sink = o[10], p->n_keep = o[11];
}

int pipe_root_start(pipe_world *w, kvi_engine *e, const kvi_engine_params *ep, const pipe_plan *plan,
                    kvi_error *err)
{
    if (plan->n != w->size)
        return err_set(err, KVI_E_INVALID, "pipeline: a plan of %d stages for %d ranks", plan->n, w->size);
    int32_t msg[3 + HELLO_PARAMS + 1 + 2 * PIPE_MAX_STAGES];
    const uint64_t h = pipe_model_hash(kvi_engine_model(e));
    msg[0] = PIPE_OP_HELLO, msg[1] = (int32_t)(uint32_t)h, msg[2] = (int32_t)(uint32_t)(h >> 32);
    params_encode(ep, msg + 3);
    const size_t n =
        3 + HELLO_PARAMS + pipe_plan_encode(plan, msg + 3 + HELLO_PARAMS, 1 + 2 * PIPE_MAX_STAGES);
    int rc = io_send_op(w, msg, n);
    if (rc) return err_set(err, rc, "%s", w->failed ? w->fail_msg : "pipeline: cannot send the handshake");
    int first_bad = 0;
    for (int r = 1; r < w->size; r++) {
        hello_reply reply;
        MPI_Request q;
        rc = MPI_Irecv(&reply, (int)sizeof reply, MPI_BYTE, r, TAG_REPLY, w->comm, &q);
        if (rc) return mpi_err(rc, err, "waiting for the handshake's answers");
        if ((rc = wait_req(w, &q, r, "the start-up handshake: loading its stage and answering")))
            return err_set(err, rc, "%s", w->failed ? w->fail_msg : "pipeline: the handshake failed");
        reply.msg[REPLY_MSG - 1] = 0;
        w->block_bytes[r] = (size_t)reply.block_bytes;
        if (reply.code && !first_bad) {
            first_bad = r;
            err_set(err, reply.code, "pipeline: rank %d refused: %s", r, reply.msg);
        }
    }
    if (first_bad) return err->code;
    if ((rc = attach(w, e, plan, err))) return rc;
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    w->block_bytes[0] = st.kv_bytes_block;
    return 0;
}

int pipe_stage_stats(pipe_world *w, const kvi_engine *e, engine_pipe_stats *out, kvi_error *err)
{
    if (w->rank != 0 || w->ended) return err_set(err, KVI_E_INVALID, "pipeline: statistics are the root's, before END");
    const int32_t op = PIPE_OP_STATS;
    int rc = io_send_op(w, &op, 1);
    if (rc) return err_set(err, rc, "%s", w->failed ? w->fail_msg : "pipeline: cannot ask for statistics");
    engine_pipe_get_stats(e, &out[0]);
    for (int r = 1; r < w->size; r++) {
        MPI_Request q;
        if ((rc = MPI_Irecv(&out[r], (int)sizeof out[r], MPI_BYTE, r, TAG_STATS, w->comm, &q)))
            return mpi_err(rc, err, "waiting for a rank's statistics");
        if ((rc = wait_req(w, &q, r, "waiting for its statistics")))
            return err_set(err, rc, "%s", w->failed ? w->fail_msg : "pipeline: no statistics");
    }
    return 0;
}

size_t pipe_kv_block_bytes(const pipe_world *w, int rank)
{
    return rank >= 0 && rank < w->size && rank < PIPE_MAX_STAGES ? w->block_bytes[rank] : 0;
}

void pipe_root_end(pipe_world *w)
{
    if (!w || w->rank != 0 || w->ended || w->failed) return;
    w->ended = true;
    const int32_t end = PIPE_OP_END;
    if (io_send_op(w, &end, 1) == 0) (void)ops_wait(w, w->n_op);
}

/* Receives the next op into *buf (grown as needed): its length, or -1. */
static long recv_op(pipe_world *w, int32_t **buf, size_t *cap, kvi_error *err)
{
    MPI_Status st;
    int count = 0, rc = MPI_Probe(0, TAG_OP, w->comm, &st);
    if (!rc) rc = MPI_Get_count(&st, MPI_INT32_T, &count);
    if (rc) return mpi_err(rc, err, "waiting for the root"), -1;
    if ((size_t)count > *cap) {
        int32_t *nb = realloc(*buf, (size_t)count * sizeof *nb);
        if (!nb) return err_set(err, KVI_E_NOMEM, "pipeline: out of memory for an op of %d ints", count), -1;
        *buf = nb;
        *cap = (size_t)count;
    }
    rc = MPI_Recv(*buf, count, MPI_INT32_T, 0, TAG_OP, w->comm, MPI_STATUS_IGNORE);
    if (rc) return mpi_err(rc, err, "receiving an op from the root"), -1;
    return count;
}

/* The handshake on a rank > 0: 0 and *e, or the refusal (also sent to the root). */
static int worker_hello(pipe_world *w, kvi_model *m, const pipe_plan *plan, int n_threads,
                        const char *load_err, const int32_t *msg, long n, kvi_engine **e, kvi_error *err)
{
    int32_t mine[1 + 2 * PIPE_MAX_STAGES];
    const size_t np = pipe_plan_encode(plan, mine, 1 + 2 * PIPE_MAX_STAGES);
    const uint64_t h = m ? pipe_model_hash(m) : 0;
    int rc = 0;
    if (!m)
        rc = err_set(err, KVI_E_IO, "%s", load_err ? load_err : "no model");
    else if (n < 3 + HELLO_PARAMS || h != ((uint64_t)(uint32_t)msg[1] | (uint64_t)(uint32_t)msg[2] << 32))
        rc = err_set(err, KVI_E_INVALID, "its model file differs from the root's (metadata hash)");
    else if ((size_t)n != 3 + HELLO_PARAMS + np || memcmp(mine, msg + 3 + HELLO_PARAMS, np * sizeof *mine))
        rc = err_set(err, KVI_E_INVALID,
                     "its layer plan differs from the root's (same --pp-layers on every rank?)");
    if (!rc) {
        kvi_engine_params ep;
        params_decode(msg + 3, &ep);
        ep.n_threads = n_threads;
        if (!(*e = kvi_engine_create(m, &ep, err)))
            rc = err->code ? err->code : KVI_E_NOMEM;
        else if ((rc = attach(w, *e, plan, err))) {
            kvi_engine_free(*e);
            *e = NULL;
        }
    }
    hello_reply reply = { .code = rc };
    if (*e) {
        kvi_stats st;
        kvi_stats_get(*e, NULL, &st);
        reply.block_bytes = st.kv_bytes_block;
    }
    if (rc) { /* the message's head: a refusal is one line */
        const size_t len = strnlen(err->msg, REPLY_MSG - 1);
        memcpy(reply.msg, err->msg, len);
        reply.msg[len] = 0;
    }
    const int src = MPI_Send(&reply, (int)sizeof reply, MPI_BYTE, 0, TAG_REPLY, w->comm);
    if (!rc && src) rc = mpi_err(src, err, "answering the handshake");
    return rc;
}

int pipe_worker_run(pipe_world *w, kvi_model *m, const pipe_plan *plan, int n_threads, const char *load_err,
                    kvi_error *err)
{
    int32_t *buf = NULL;
    size_t cap = 0;
    kvi_engine *e = NULL;
    int rc = 0;
    for (;;) {
        const long n = recv_op(w, &buf, &cap, err);
        if (n < 0) {
            rc = err->code;
            break;
        }
        if (n < 1 || buf[0] == PIPE_OP_END) break;
        if (buf[0] == PIPE_OP_STATS && e && !rc) {
            engine_pipe_stats st;
            engine_pipe_get_stats(e, &st);
            const int src = MPI_Send(&st, (int)sizeof st, MPI_BYTE, 0, TAG_STATS, w->comm);
            if (src) rc = mpi_err(src, err, "sending its statistics");
        } else if (buf[0] == PIPE_OP_HELLO && !e && !rc)
            rc = worker_hello(w, m, plan, n_threads, load_err, buf, n, &e, err);
        else if (e && !rc)
            rc = engine_pipe_apply(e, buf, (size_t)n, err);
        if (w->stall_after > 0 && --w->stall_after == 0)
            for (;;) pause(); /* fault injection: stop answering, as a hung host would */
        /* after an error, the ops go unanswered until END: the root's next wait fails */
        if (rc && e) break;
    }
    kvi_engine_free(e);
    free(buf);
    return rc;
}
