/*
 * scheduler.c — continuous batching over one engine: admission by KV budget,
 * chunked prefill, decode rows first, preemption, cancellation, callbacks.
 *
 * Data structure: every accepted request is an sreq. New requests enter the
 * `incoming` list under the mutex (any thread); the engine thread moves them to
 * `live` (an array owned by the engine thread only) at the start of a step.
 * A live request is WAITING (no sequence) or RUNNING (holds a kvi_seq).
 *
 *   tokens  [n_ctx + 1] int32  prompt, then every generated token
 *   n_tokens                   prompt + generated so far
 *   seq len (kvi_seq_len)      positions whose K/V are cached: 0..n_done-1
 *   shift                      tokens[i] sits at position i - shift (0 unless ctx_evict)
 *
 * A request needs rows for tokens[n_done .. n_tokens-1]; the last of them wants
 * logits, from which the next token is sampled. One pending row is a decode row;
 * more are a prefill (a new prompt, or a preempted request being recomputed from
 * its tokens). So preemption is simply: free the sequence, n_done = 0, WAITING.
 *
 * One step: (1) cancellations and new requests; (2) admission, oldest first
 * (preempted ones before new ones), while fewer than n_parallel run and the
 * request's new blocks fit the free blocks of the pool minus those that running
 * prefills still need (the start of its tokens found in the prefix cache is
 * taken, not recomputed: n_done starts there, and only blocks it takes out of
 * the cache's LRU or must still compute count against the budget); (3) the batch: every decode row first, then prefill
 * chunks in admission order until batch_tokens rows; (4) kvi_step; on
 * KVI_E_NO_KV_SPACE the youngest running request is preempted and the batch
 * rebuilt; (5) sampling and callbacks for rows that wanted logits.
 *
 * Speculative decoding (kvi_sched_set_spec): a speculating request owns a
 * kvi_spec whose history equals tokens[0 .. n_tokens). Before the batch is
 * built, each speculating request with one pending row (tokens[L], L = n_done)
 * drafts n tokens (bounded by the context, max_tokens and the rows left in the
 * budget); its rows are (tokens[L], L) and (drafts[i], L+1+i), consecutive in
 * the batch from q->row, all with logits. After the step kvi_spec_verify gives
 * m = 1 .. n+1 tokens (out[i] decided by row i), the sequence is cut to L + m
 * and the tokens are delivered one by one as plain decoding would. Every sampled
 * token of such a request (also the first, after prefill) goes through
 * kvi_spec_verify, so its sampler and history stay in step.
 *   t_rows [rows_cap + 1] double   EMA of kvi_step's ms per row count (0: unseen)
 * Cost model: the marginal ms of the extra rows at the current load, divided by
 * the step's average ms per row, is each kvi_spec's cost_row: a plain round's
 * share of a B-row step is T(B)/B, k more rows cost k * T'(B), so aggregate
 * tokens per second rise exactly when every sequence's own expected tokens per
 * unit cost exceed 1 — which is what kvi_spec's adaptive K maximises. With few
 * rows T' is small (weights streamed once whatever the rows); in a full batch it
 * approaches T(B)/B and speculation pauses unless nearly every draft is kept.
 *
 * Lanes (pipeline micro-batches): with n_lanes > 1 (default kvi_step_depth:
 * the stages of an MPI pipeline, else 1) every running request belongs to one
 * lane, chosen at admission as the lane with the fewest running requests. A
 * step serves lane L = cur and moves cur on: it finishes L's launched batch
 * (kvi_step_finish, the engine's oldest in flight) and delivers its tokens,
 * admits, builds L's batch from L's requests only and launches it
 * (kvi_step_launch) without waiting, so the other lanes' batches are on the
 * later stages meanwhile. A lane's requests are never in two batches at once,
 * so each request's rows and tokens are exactly those of one lane. On
 * KVI_E_NO_KV_SPACE: drafts go; if the youngest running request is in a lane
 * in flight, every lane in flight is finished (oldest first) so that it can be
 * the one preempted; else the youngest is preempted; with nothing to preempt,
 * the lanes in flight finish; then the batch is rebuilt. Speculative decoding uses one lane.
 *   inflight [n_lanes] bool   lane's batch launched and not finished
 *
 * After a step, the plain (not speculating) requests that got logits draw their
 * tokens on the engine's worker pool (sample_rows: each request's own sampler,
 * rows taken from a shared counter), then every request is delivered in `live`
 * order on the engine thread: a sampler's draws depend only on its own state, so
 * the tokens are those of a serial loop.
 *   smp_q   [live_cap] sreq *   this step's requests to sample (engine thread)
 *
 * Invariants: only the engine thread touches the engine, the sequences and
 * `live` (the pool's threads only sample, each request by exactly one thread,
 * while the engine thread waits); callbacks run on it without the mutex held; every accepted request
 * gets exactly one on_done, after which it is freed. The engine is batch
 * invariant, so what a request gets does not depend on what else is running.
 *
 * Context policy (kvi_request.ctx_evict): before a batch is built, a request of
 * the lane whose next rows (at most SCHED_EVICT_CHUNK) would pass n_ctx calls
 * kvi_seq_make_room for them; the positions it drops add to shift and to its
 * positions_dropped, and its prefill chunks stop at n_ctx. Its tokens array
 * grows past n_ctx + 1. Preemption recomputes from the tokens with the policy
 * applied again (shift 0). Where the evictions fall depends on the request's
 * prefill chunks, so such a request is batch invariant only as far as its
 * chunks are.
 */
#include "kvinfer.h"

#include "base/error.h"
#include "base/prof.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { SREQ_WAITING = 0, SREQ_RUNNING = 1 };

typedef struct sreq {
    uint64_t id;
    kvi_request r;   /* r.prompt not used after submit */
    int32_t *tokens; /* [cap] prompt then generated */
    int32_t cap;     /* n_ctx + 1, more with ctx_evict */
    int32_t n_prompt, n_tokens, n_done;
    int32_t shift;   /* tokens[i] is at position i - shift */
    int32_t dropped; /* positions the context policy dropped */
    kvi_sampler *smp;
    kvi_seq *seq; /* RUNNING only */
    int state;
    bool cancel;       /* set under the mutex */
    bool preempted;    /* waiting to be recomputed: admitted before new requests */
    uint64_t admit_no; /* order of admission: the youngest is preempted first */
    int32_t row;       /* batch row whose logits it samples, -1 when none */
    int32_t sampled;   /* token drawn by sample_rows for this step's row (< 0: none) */
    int32_t cached;
    int32_t cached_ram, cached_disk; /* of cached: loaded from the prefix cache's tiers */
    int32_t n_preempted;
    double t_submit, t_admit, t_prefill0, t_first, t_last;
    struct sreq *next; /* incoming list */
    kvi_spec *sp;      /* speculation state; NULL: plain sampling */
    int32_t *drafts;   /* [spec draft_max] this step's proposal */
    int32_t n_draft;   /* drafts in this step's batch, rows row+1 .. row+n_draft */
    int lane;          /* RUNNING: the lane whose batches hold its rows */
    float lora[KVI_ENGINE_LORA_MAX]; /* r.lora_scales copied ([r.n_lora_scales]) */
} sreq;

#define SCHED_LANES_MAX KVI_STEP_DEPTH_MAX
/* rows an evicting request is given room for at once (a quarter of the context at most) */
#define SCHED_EVICT_CHUNK 256

struct kvi_sched {
    kvi_engine *e;
    kvi_sched_params p;
    int n_ctx;
    int32_t n_vocab;
    const kvi_model *m;
    kvi_batch *batch; /* [batch_tokens + n_parallel] rows */
    sreq **live;      /* [live_cap] engine thread only */
    int n_live, live_cap;
    sreq **smp_q; /* [smp_cap] requests sample_rows draws for */
    int smp_cap;
    uint64_t admit_counter;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    sreq *incoming, *incoming_tail;
    uint64_t next_id;
    int n_waiting;     /* incoming + live WAITING (under mu) */
    uint64_t *cancels; /* [n_cancels] ids to cancel (under mu) */
    int n_cancels, cancels_cap;
    kvi_sched_stats st; /* under mu */
    /* block tables of the running requests after the last step (under mu;
     * kvi_sched_kv_view): view[i]'s ids are view_ids[view_off[i] ..] */
    kvi_sched_seq_view *view; /* [view_cap] (blocks pointers unused) */
    int32_t *view_off;        /* [view_cap] */
    int n_view, view_cap;
    int32_t *view_ids; /* [view_ids_cap] */
    int32_t n_view_ids, view_ids_cap;
    bool thread_started, stop;
    pthread_t thread;
    /* speculative decoding (engine thread only, set before start) */
    bool spec_on;
    kvi_spec_params spec_p;
    kvi_engine *draft;     /* shared draft engine, not owned; NULL: n-gram lookup */
    kvi_grammar_vocab *gv; /* the model's token trie, built at the first grammar (under mu) */
    double *t_rows;        /* [rows_cap + 1] EMA of step ms by row count, 0: unseen */
    int32_t rows_cap;
    double draft_ms_tok;                  /* EMA of the draft model's ms per drafted token */
    int32_t spec_rows_prev;               /* draft rows of the previous step */
    const float **spec_lg;                /* [draft_max + 1] logits of a request's rows */
    int32_t *spec_out;                    /* [draft_max + 1] tokens kvi_spec_verify returns */
    /* rows routed to each expert, [n_layers][n_expert] (under mu; copied from the
     * engine in count_rows, after each step); NULL for a dense model */
    uint64_t *routed;
    int n_routed;
    double g_acc, g_trials; /* server-wide EMA of accepted / verified drafts */
    uint64_t spec_steps;    /* steps that planned drafts (probe schedule) */
    /* lanes (engine thread only): lane cur launches at the next step; inflight[l]
     * when lane l's batch is launched and not finished */
    int n_lanes, cur;
    bool inflight[SCHED_LANES_MAX];
};

void kvi_sched_params_default(kvi_sched_params *p)
{
    p->n_parallel = 16;
    p->queue_max = 256;
    p->batch_tokens = 512;
    p->n_lanes = 0;
    p->after_step = NULL;
    p->after_step_user = NULL;
}

kvi_sched *kvi_sched_create(kvi_engine *e, const kvi_sched_params *params, kvi_error *err)
{
    kvi_sched_params p;
    if (params)
        p = *params;
    else
        kvi_sched_params_default(&p);
    if (!e) {
        err_set(err, KVI_E_INVALID, "scheduler: no engine");
        return NULL;
    }
    if (p.n_parallel < 1 || p.n_parallel > 65536 || p.queue_max < 0 || p.queue_max > (1 << 24) ||
        p.batch_tokens < 1 || p.batch_tokens > (1 << 20) || p.n_lanes < 0 || p.n_lanes > KVI_STEP_DEPTH_MAX) {
        err_set(err, KVI_E_INVALID,
                "scheduler: parameter out of range (parallel %d, queue %d, batch %d, lanes %d)", p.n_parallel,
                p.queue_max, p.batch_tokens, p.n_lanes);
        return NULL;
    }
    kvi_sched *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, KVI_E_NOMEM, "scheduler: out of memory");
        return NULL;
    }
    s->e = e;
    s->p = p;
    s->m = kvi_engine_model(e);
    s->n_ctx = kvi_engine_n_ctx(e);
    s->n_vocab = kvi_n_vocab(s->m);
    s->next_id = 1;
    s->n_lanes = p.n_lanes > 0 ? p.n_lanes : kvi_step_depth(e);
    s->live_cap = p.n_parallel + 16;
    s->live = malloc((size_t)s->live_cap * sizeof *s->live);
    s->batch = kvi_batch_create(p.batch_tokens + p.n_parallel);
    s->n_routed = kvi_engine_expert_counts(e, NULL, 0);
    s->routed = s->n_routed > 0 ? calloc((size_t)s->n_routed, sizeof *s->routed) : NULL;
    if (!s->live || !s->batch || (s->n_routed > 0 && !s->routed)) {
        err_set(err, KVI_E_NOMEM, "scheduler: out of memory");
        free(s->routed);
        free(s->live);
        kvi_batch_free(s->batch);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    kvi_stats_get(e, NULL, &s->st.engine);
    return s;
}

static void sreq_free(sreq *q)
{
    if (!q) return;
    if (q->seq) kvi_seq_free(q->seq);
    kvi_sampler_free(q->smp);
    kvi_spec_free(q->sp);
    free(q->drafts);
    free(q->tokens);
    free(q);
}

/* Ends a live request: usage, its sequence freed, on_done, memory freed. */
static void finish(kvi_sched *s, sreq *q, kvi_finish f, const kvi_error *err)
{
    kvi_usage u;
    memset(&u, 0, sizeof u);
    u.prompt_tokens = q->n_prompt;
    u.completion_tokens = q->n_tokens - q->n_prompt;
    u.cached_tokens = q->cached;
    u.cached_ram_tokens = q->cached_ram;
    u.cached_disk_tokens = q->cached_disk;
    u.n_preempted = q->n_preempted;
    u.positions_dropped = q->dropped;
    u.queue_ms = q->t_admit > 0 ? q->t_admit - q->t_submit : 0.0;
    u.prefill_ms = q->t_first > 0 && q->t_prefill0 > 0 ? q->t_first - q->t_prefill0 : 0.0;
    u.ttft_ms = q->t_first > 0 ? q->t_first - q->t_submit : 0.0;
    u.decode_ms = q->t_first > 0 ? q->t_last - q->t_first : 0.0;
    if (q->sp) {
        kvi_spec_stats ss;
        kvi_spec_stats_get(q->sp, &ss);
        u.spec_drafted = (int32_t)ss.n_drafted;
        u.spec_accepted = (int32_t)ss.n_accepted;
    }
    if (q->seq) {
        kvi_stats ks;
        kvi_stats_get(s->e, q->seq, &ks);
        u.kv_bytes = ks.kv_bytes;
        u.kv_bytes_window = ks.kv_bytes_window;
        kvi_seq_free(q->seq);
        q->seq = NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (q->state == SREQ_WAITING) s->n_waiting--;
    s->st.n_done++;
    pthread_mutex_unlock(&s->mu);
    if (q->r.on_done) q->r.on_done(q->r.user, f, &u, err);
    sreq_free(q);
}

int kvi_sched_submit(kvi_sched *s, const kvi_request *r, uint64_t *id, kvi_error *err)
{
    if (!s || !r || !r->prompt || r->n_prompt < 1)
        return err_set(err, KVI_E_INVALID, "scheduler: the prompt is empty");
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab)
            return err_set(err, KVI_E_INVALID, "token id %d at prompt position %d is out of range [0, %d)",
                           r->prompt[i], i, s->n_vocab);
    if (r->top_logprobs < 0 || r->top_logprobs > KVI_LOGPROBS_MAX)
        return err_set(err, KVI_E_INVALID, "top_logprobs is %d, outside [0, %d]", r->top_logprobs,
                       KVI_LOGPROBS_MAX);
    if (r->n_prompt > s->n_ctx && !r->ctx_evict)
        return err_set(err, KVI_E_CONTEXT_FULL,
                       "context_length_exceeded: the prompt has %d tokens but the context holds %d",
                       r->n_prompt, s->n_ctx);
    {
        kvi_stats ks;
        pthread_mutex_lock(&s->mu);
        ks = s->st.engine;
        pthread_mutex_unlock(&s->mu);
        const int64_t held = r->ctx_evict && r->n_prompt > s->n_ctx ? s->n_ctx : r->n_prompt;
        const int64_t need = (held + ks.kv_block_size) / ks.kv_block_size;
        if (need > ks.kv_blocks_total)
            return err_set(err, KVI_E_NO_KV_SPACE,
                           "context_length_exceeded: the prompt needs %lld KV blocks but the KV budget "
                           "holds %d",
                           (long long)need, ks.kv_blocks_total);
    }
    for (int32_t i = 0; i < r->n_bias; i++)
        if (!r->bias_ids || !r->bias_vals || r->bias_ids[i] < 0 || r->bias_ids[i] >= s->n_vocab ||
            !((r->bias_vals[i] >= -100.0f && r->bias_vals[i] <= 100.0f) || r->bias_vals[i] == -INFINITY))
            return err_set(err, KVI_E_INVALID,
                           "logit_bias: token %d or its bias is outside [0, %d) / [-100, 100] or -inf",
                           r->bias_ids ? r->bias_ids[i] : -1, s->n_vocab);
    if (r->n_lora_scales < 0 || r->n_lora_scales > kvi_engine_lora_count(s->e) ||
        (r->n_lora_scales && !r->lora_scales))
        return err_set(err, KVI_E_INVALID, "lora: %d scales for %d adapters", r->n_lora_scales,
                       kvi_engine_lora_count(s->e));
    for (int32_t i = 0, on = 0; i < r->n_lora_scales; i++)
        if (!(r->lora_scales[i] == r->lora_scales[i]) ||
            ((on += r->lora_scales[i] != 0.0f) > KVI_LORA_SET_MAX))
            return err_set(err, KVI_E_INVALID,
                           "lora: a scale is not a number, or more than %d adapters are on",
                           KVI_LORA_SET_MAX);
    kvi_grammar_matcher *gm = NULL;
    if (r->grammar) {
        pthread_mutex_lock(&s->mu);
        if (!s->gv && !r->grammar_vocab) s->gv = kvi_grammar_vocab_create(s->m, err);
        const kvi_grammar_vocab *gv = r->grammar_vocab ? r->grammar_vocab : s->gv;
        pthread_mutex_unlock(&s->mu);
        if (!gv) return err ? err->code : KVI_E_NOMEM;
        gm = kvi_grammar_matcher_create(r->grammar, gv, err);
        if (!gm) return err ? err->code : KVI_E_NOMEM;
    }
    sreq *q = calloc(1, sizeof *q);
    if (!q) {
        kvi_grammar_matcher_free(gm);
        return err_set(err, KVI_E_NOMEM, "scheduler: out of memory");
    }
    q->r = *r;
    q->r.prompt = NULL;
    q->cap = (r->n_prompt > s->n_ctx ? r->n_prompt : s->n_ctx) + 1;
    q->tokens = malloc((size_t)q->cap * sizeof *q->tokens);
    q->r.bias_ids = NULL;
    q->r.bias_vals = NULL;
    q->smp = kvi_sampler_create(&r->sampling, s->n_vocab);
    const int rc_g = q->smp ? kvi_sampler_set_grammar(q->smp, gm) : KVI_E_NOMEM; /* owns gm on 0 */
    if (rc_g != 0) kvi_grammar_matcher_free(gm);
    if (!q->tokens || rc_g != 0 ||
        kvi_sampler_set_logit_bias(q->smp, r->bias_ids, r->bias_vals, r->n_bias) != 0) {
        sreq_free(q);
        return err_set(err, KVI_E_NOMEM, "scheduler: out of memory");
    }
    /* DRY's breakers become token sequences of the model's vocabulary, once */
    if (r->sampling.dry_multiplier != 0.0f && r->sampling.dry_penalty_last_n != 0) {
        const int rc_d = kvi_sampler_set_dry_breakers(q->smp, s->m, r->dry_breakers,
                                                      r->dry_breakers ? r->n_dry_breakers : 0, err);
        if (rc_d != 0) {
            sreq_free(q);
            return rc_d;
        }
    }
    q->r.dry_breakers = NULL;
    if (r->n_lora_scales) memcpy(q->lora, r->lora_scales, (size_t)r->n_lora_scales * sizeof *q->lora);
    q->r.lora_scales = r->lora_scales ? q->lora : NULL;
    memcpy(q->tokens, r->prompt, (size_t)r->n_prompt * sizeof *q->tokens);
    for (int32_t i = 0; i < r->n_prompt; i++) kvi_sampler_accept(q->smp, r->prompt[i]);
    q->n_prompt = q->n_tokens = r->n_prompt;
    q->row = -1;
    q->t_submit = kvi_time_ms();

    pthread_mutex_lock(&s->mu);
    if (s->n_waiting >= s->p.queue_max) {
        s->st.n_rejected++;
        pthread_mutex_unlock(&s->mu);
        sreq_free(q);
        return err_set(err, KVI_E_QUEUE_FULL, "server over capacity: %d requests are already waiting",
                       s->p.queue_max);
    }
    q->id = s->next_id++;
    if (s->incoming_tail)
        s->incoming_tail->next = q;
    else
        s->incoming = q;
    s->incoming_tail = q;
    s->n_waiting++;
    if (id) *id = q->id;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void kvi_sched_cancel(kvi_sched *s, uint64_t id)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cancels_cap) {
        int cap = s->cancels_cap ? 2 * s->cancels_cap : 16;
        uint64_t *nc = realloc(s->cancels, (size_t)cap * sizeof *nc);
        if (!nc) {
            pthread_mutex_unlock(&s->mu);
            return;
        }
        s->cancels = nc;
        s->cancels_cap = cap;
    }
    s->cancels[s->n_cancels++] = id;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void live_remove(kvi_sched *s, int i)
{
    memmove(s->live + i, s->live + i + 1, (size_t)(s->n_live - i - 1) * sizeof *s->live);
    s->n_live--;
}

/* (1) New requests into live; cancelled ones finished. */
static int take_incoming(kvi_sched *s, kvi_error *err)
{
    pthread_mutex_lock(&s->mu);
    sreq *in = s->incoming;
    s->incoming = s->incoming_tail = NULL;
    for (int c = 0; c < s->n_cancels; c++) {
        for (sreq *q = in; q; q = q->next)
            if (q->id == s->cancels[c]) q->cancel = true;
        for (int i = 0; i < s->n_live; i++)
            if (s->live[i]->id == s->cancels[c]) s->live[i]->cancel = true;
    }
    s->n_cancels = 0;
    pthread_mutex_unlock(&s->mu);

    while (in) {
        sreq *q = in;
        in = in->next;
        q->next = NULL;
        if (s->n_live == s->live_cap) {
            int cap = 2 * s->live_cap;
            sreq **nl = realloc(s->live, (size_t)cap * sizeof *nl);
            if (!nl) {
                kvi_error e2;
                err_set(&e2, KVI_E_NOMEM, "scheduler: out of memory");
                finish(s, q, KVI_FINISH_ERROR, &e2);
                continue;
            }
            s->live = nl;
            s->live_cap = cap;
        }
        s->live[s->n_live++] = q;
    }
    for (int i = 0; i < s->n_live;) {
        sreq *q = s->live[i];
        if (q->cancel) {
            live_remove(s, i);
            finish(s, q, KVI_FINISH_CANCELLED, NULL);
        } else {
            i++;
        }
    }
    (void)err;
    return 0;
}

static int32_t blocks_for(int32_t n_pos, int32_t bs) { return (n_pos + bs - 1) / bs; }

/* ---- speculative decoding ---- */

int kvi_sched_set_spec(kvi_sched *s, const kvi_spec_params *p, kvi_engine *draft, kvi_error *err)
{
    if (!s) return err_set(err, KVI_E_INVALID, "scheduler: no scheduler");
    if (s->thread_started)
        return err_set(err, KVI_E_INVALID, "scheduler: speculation is set before the start");
    for (int l = 0; l < s->n_lanes; l++)
        if (s->inflight[l])
            return err_set(err, KVI_E_INVALID, "scheduler: speculation is set before the first step");
    kvi_spec_params pp;
    if (p)
        pp = *p;
    else
        kvi_spec_params_default(&pp);
    /* the same checks kvi_spec_create makes, up front: a bad setting fails here, not per request */
    kvi_spec *probe = kvi_spec_create(&pp, s->m, NULL, NULL, err);
    if (!probe) return err ? err->code : KVI_E_INVALID;
    kvi_spec_free(probe);
    if (draft && kvi_spec_check_vocab(s->m, kvi_engine_model(draft), err) != 0)
        return err ? err->code : KVI_E_INVALID;
    s->rows_cap = s->p.batch_tokens + s->p.n_parallel;
    free(s->t_rows);
    free(s->spec_lg);
    free(s->spec_out);
    s->t_rows = calloc((size_t)s->rows_cap + 1, sizeof *s->t_rows);
    s->spec_lg = malloc(((size_t)pp.draft_max + 1) * sizeof *s->spec_lg);
    s->spec_out = malloc(((size_t)pp.draft_max + 1) * sizeof *s->spec_out);
    if (!s->t_rows || !s->spec_lg || !s->spec_out) {
        s->spec_on = false;
        return err_set(err, KVI_E_NOMEM, "scheduler: out of memory for speculation");
    }
    s->spec_p = pp;
    s->draft = draft;
    s->g_acc = 1.0; /* a weak prior of one draft in two kept */
    s->g_trials = 2.0;
    s->spec_on = true;
    s->n_lanes = 1; /* a round's drafts are verified before its next batch is built */
    s->cur = 0;
    for (int i = 0; i < s->n_live; i++) s->live[i]->lane = 0;
    return 0;
}

/* At first admission: a kvi_spec whose history is the request's tokens. Requests
 * that opt out stay plain, and so do those whose chain keeps state that
 * verification cannot replay (kvi_sampler_params_stateful: mirostat's mu moves
 * with each accepted token's probability, which kvi_spec_verify's
 * kvi_sampler_accept does not pass on; DRY and XTC conservatively too), and any
 * request whose state cannot be made (no draft sequence free). The penalties
 * count every accepted token (llama.cpp's semantics), so verification replays
 * them exactly. */
static void spec_attach(kvi_sched *s, sreq *q)
{
    /* a grammar's mask would have to follow every draft: such requests stay plain */
    if (!s->spec_on || q->r.no_spec || q->r.grammar || q->sp || q->r.ctx_evict) return;
    if (kvi_sampler_params_stateful(&q->r.sampling)) return;
    kvi_error e2 = { 0 };
    q->drafts = malloc((size_t)s->spec_p.draft_max * sizeof *q->drafts);
    q->sp = q->drafts ? kvi_spec_create(&s->spec_p, s->m, s->draft, &q->r.sampling, &e2) : NULL;
    if (q->sp && kvi_spec_begin(q->sp, q->tokens, q->n_tokens, &e2) != 0) {
        kvi_spec_free(q->sp);
        q->sp = NULL;
    }
    if (!q->sp) {
        free(q->drafts);
        q->drafts = NULL;
    }
}

/* Measured ms of a step of r rows: the EMA at r, else linear between the nearest
 * measured counts around r; past the largest, every further row is charged the
 * average row of the largest (pessimistic: speculation must first prove itself
 * at a size before it is trusted there). 0 when nothing was measured. */
static double step_ms_at(const kvi_sched *s, int32_t r)
{
    if (r < 1) r = 1;
    if (r > s->rows_cap) r = s->rows_cap;
    if (s->t_rows[r] > 0.0) return s->t_rows[r];
    int32_t lo = r - 1, hi = r + 1;
    while (lo >= 1 && s->t_rows[lo] <= 0.0) lo--;
    while (hi <= s->rows_cap && s->t_rows[hi] <= 0.0) hi++;
    if (lo >= 1 && hi <= s->rows_cap)
        return s->t_rows[lo] + (s->t_rows[hi] - s->t_rows[lo]) * (double)(r - lo) / (double)(hi - lo);
    if (lo >= 1) return s->t_rows[lo] * (double)r / (double)lo;
    if (hi <= s->rows_cap) return s->t_rows[hi];
    return 0.0;
}

/* Least cost_row ever used: step times are noisy (other processes, attention
 * over longer contexts), and a measured 0 would make any acceptance above 0
 * look worth drafting for; with this floor a sequence whose drafts are almost
 * never kept pauses. */
#define SPEC_COST_ROW_MIN 0.05
/* While the server's acceptance is below break-even: steps between probes. */
#define SPEC_PROBE_EVERY 16

/* cost_row for a step of b plain rows plus about x draft rows: T'(b) / (T(b) / b),
 * the slope taken over at least max(4, b / 2) rows so that two noisy neighbours
 * do not decide it. */
static double spec_cost_row(const kvi_sched *s, int32_t b, int32_t x)
{
    if (b < 1) b = 1;
    const int32_t span = b / 2 > 4 ? b / 2 : 4;
    if (x < span) x = span;
    const double tb = step_ms_at(s, b), tx = step_ms_at(s, b + x);
    if (tb <= 0.0 || tx <= 0.0) return -1.0; /* nothing measured: kvi_spec's prior */
    double c = (tx - tb) / (double)x / (tb / (double)b);
    if (c < SPEC_COST_ROW_MIN) c = SPEC_COST_ROW_MIN;
    if (c > 2.0) c = 2.0;
    return c;
}

static void spec_observe_step(kvi_sched *s, int32_t rows, double ms)
{
    if (!s->spec_on || rows < 1 || rows > s->rows_cap || !(ms > 0.0)) return;
    double *t = &s->t_rows[rows];
    *t = *t > 0.0 ? 0.8 * *t + 0.2 * ms : ms;
}

/* Before the batch: every speculating request with one pending row proposes
 * its drafts, within the context, max_tokens and the rows the budget leaves. */
static void spec_draft_all(kvi_sched *s)
{
    if (!s->spec_on) return;
    int32_t n_plain = 0;
    for (int i = 0; i < s->n_live; i++) {
        sreq *q = s->live[i];
        q->n_draft = 0;
        if (q->state == SREQ_RUNNING && q->n_tokens - q->n_done == 1) n_plain++;
    }
    int32_t budget = s->p.batch_tokens - n_plain;
    const int32_t x_guess = s->spec_rows_prev > 0 ? s->spec_rows_prev : n_plain;
    const double c_row = spec_cost_row(s, n_plain, x_guess);
    const double avg_row = n_plain > 0 ? step_ms_at(s, n_plain) / (double)n_plain : 0.0;
    const double c_draft =
        s->draft && avg_row > 0.0 && s->draft_ms_tok > 0.0 ? s->draft_ms_tok / avg_row : -1.0;
    pthread_mutex_lock(&s->mu);
    if (c_row >= 0.0) s->st.spec_cost_row = c_row;
    pthread_mutex_unlock(&s->mu);
    /* Each kvi_spec learns its acceptance from scratch, ~10 wasted rounds per
     * request. When the server's recent acceptance is below the break-even of
     * even one draft (a < cost_row), a request that has not itself shown
     * acceptance above it drafts only one token, every SPEC_PROBE_EVERY steps. */
    const double c_gate = c_row > SPEC_COST_ROW_MIN ? c_row : SPEC_COST_ROW_MIN;
    const bool gated = s->spec_p.adapt && s->g_acc / s->g_trials < c_gate;
    const bool probe = s->spec_steps++ % SPEC_PROBE_EVERY == 0;
    int32_t rows = 0;
    for (int i = 0; i < s->n_live; i++) {
        sreq *q = s->live[i];
        if (!q->sp || q->state != SREQ_RUNNING || q->n_tokens - q->n_done != 1) continue;
        const int32_t L = q->n_done;
        int32_t kmax = s->spec_p.draft_max;
        if (kmax > s->n_ctx - L - 1) kmax = s->n_ctx - L - 1; /* drafts at L+1 .. L+k < n_ctx */
        if (q->r.max_tokens > 0) {
            const int32_t left = q->r.max_tokens - (q->n_tokens - q->n_prompt);
            if (kmax > left - 1) kmax = left - 1; /* a round yields up to k+1 */
        }
        if (kmax > budget) kmax = budget;
        if (gated) {
            kvi_spec_stats ss;
            kvi_spec_stats_get(q->sp, &ss);
            if (ss.n_drafted < 8 || ss.acceptance < c_gate) kmax = probe && kmax > 0 ? 1 : 0;
        }
        if (kmax < 0) kmax = 0;
        kvi_spec_set_costs(q->sp, c_row, c_draft);
        const double t0 = kvi_time_ms();
        kvi_error e2 = { 0 };
        int32_t n = kvi_spec_draft(q->sp, kmax, q->drafts, &e2);
        if (n < 0 || n > kmax) n = 0; /* a failed draft is a plain round */
        if (s->draft && n > 0) {
            const double ms = (kvi_time_ms() - t0) / (double)n;
            s->draft_ms_tok = s->draft_ms_tok > 0.0 ? 0.8 * s->draft_ms_tok + 0.2 * ms : ms;
        }
        q->n_draft = n;
        budget -= n;
        rows += n;
    }
    s->spec_rows_prev = rows;
}

/* (2) Admission, oldest first with preempted requests ahead of new ones. Each
 * admitted request joins the lane with the fewest running requests, lane L (the
 * one about to launch) on a tie. */
/* A sequence for q with its adapters (the request's, or the engine's scales), or NULL
 * (*lora_gone set when an adapter the request names was unloaded since its submit) */
static kvi_seq *sched_seq_create(kvi_sched *s, const sreq *q, bool *lora_gone)
{
    kvi_seq *seq = kvi_seq_create(s->e);
    *lora_gone = false;
    if (seq && q->r.lora_scales && kvi_seq_set_lora_scales(seq, q->r.n_lora_scales, q->r.lora_scales) != 0) {
        kvi_seq_free(seq);
        *lora_gone = true;
        return NULL;
    }
    return seq;
}

/* Ends waiting request q with an error: its adapter was unloaded (kvi_engine_lora_unload). */
static void drop_lora_gone(kvi_sched *s, sreq *q)
{
    for (int i = 0; i < s->n_live; i++)
        if (s->live[i] == q) {
            live_remove(s, i);
            kvi_error e;
            err_set(&e, KVI_E_INVALID, "lora: an adapter the request uses was unloaded");
            finish(s, q, KVI_FINISH_ERROR, &e);
            return;
        }
}

static void admit(kvi_sched *s, int L)
{
    int per_lane[SCHED_LANES_MAX] = { 0 };
    kvi_stats ks;
    kvi_stats_get(s->e, NULL, &ks);
    const int32_t bs = ks.kv_block_size;
    int n_running = 0;
    int64_t pending = 0; /* blocks that running requests still have to reserve */
    for (int i = 0; i < s->n_live; i++) {
        sreq *q = s->live[i];
        if (q->state != SREQ_RUNNING) continue;
        n_running++;
        per_lane[q->lane]++;
        kvi_stats qs;
        kvi_stats_get(s->e, q->seq, &qs);
        const int32_t want =
            blocks_for(q->r.ctx_evict && q->n_tokens > s->n_ctx ? s->n_ctx : q->n_tokens, bs);
        if (want > qs.kv_blocks_used) pending += want - qs.kv_blocks_used;
    }
    /* (recurrent state snapshots hold blocks the pool takes back when it needs them) */
    int64_t free_blocks = (int64_t)ks.kv_blocks_total - (ks.kv_blocks_used - ks.kv_blocks_snapshot) - pending;
    while (n_running < s->p.n_parallel) {
        sreq *best = NULL;
        for (int i = 0; i < s->n_live; i++) {
            sreq *q = s->live[i];
            if (q->state != SREQ_WAITING) continue;
            if (!best || (q->preempted && !best->preempted) ||
                (q->preempted == best->preempted && q->id < best->id))
                best = q;
        }
        if (!best) break;
        bool gone;
        kvi_seq *seq = sched_seq_create(s, best, &gone);
        if (!seq && gone) {
            drop_lora_gone(s, best);
            continue;
        }
        if (!seq) break;
        /* The prefix cache: whole cached blocks equal to the tokens' start are
         * taken instead of recomputed. Only blocks that were unheld (in the LRU)
         * come out of the free count; blocks shared with a running sequence cost
         * nothing more. */
        kvi_stats before, after, qs;
        kvi_stats_get(s->e, NULL, &before);
        int32_t reused = kvi_seq_reuse_prefix(seq, best->tokens, best->n_tokens);
        if (reused < 0) {
            kvi_seq_free(seq);
            if (!(seq = sched_seq_create(s, best, &gone))) break; /* (an unloaded adapter: next admission) */
            reused = 0;
        }
        kvi_stats_get(s->e, NULL, &after);
        kvi_stats_get(s->e, seq, &qs);
        const int64_t taken = (int64_t)after.kv_blocks_used - before.kv_blocks_used;
        /* the pending rows plus the first generated token's row, beyond the reused blocks */
        const int32_t n_hold =
            best->r.ctx_evict && best->n_tokens >= s->n_ctx ? s->n_ctx : best->n_tokens + 1;
        const int64_t need = (int64_t)blocks_for(n_hold, bs) - qs.kv_blocks_used + (taken > 0 ? taken : 0);
        if (need > free_blocks && n_running > 0) {
            kvi_seq_free(seq);
            break;
        }
        best->seq = seq;
        best->state = SREQ_RUNNING;
        best->n_done = reused;
        best->shift = 0;
        best->row = -1;
        best->n_draft = 0;
        best->lane = L;
        for (int l = 0; l < s->n_lanes; l++)
            if (per_lane[l] < per_lane[best->lane]) best->lane = l;
        per_lane[best->lane]++;
        best->admit_no = ++s->admit_counter;
        const bool first = best->t_admit == 0;
        if (first) best->t_admit = kvi_time_ms();
        best->preempted = false;
        free_blocks -= need;
        n_running++;
        if (first) {
            best->cached = reused < best->n_prompt ? reused : best->n_prompt;
            best->cached_ram = (int32_t)qs.prefix_ram_tokens;
            best->cached_disk = (int32_t)qs.prefix_disk_tokens;
        }
        if (first) spec_attach(s, best);
        pthread_mutex_lock(&s->mu);
        s->n_waiting--;
        if (first) {
            s->st.n_prompt_tokens += (uint64_t)best->n_prompt;
            s->st.n_cached_tokens += (uint64_t)best->cached;
        }
        pthread_mutex_unlock(&s->mu);
    }
}

/* (3) Lane L's batch: its decode rows first, then its prefill chunks in
 * admission order. Returns the number of rows; prefill rows counted in
 * *n_prefill. */
static int32_t build_batch(kvi_sched *s, int L, double t_step, int32_t *n_prefill)
{
    kvi_batch *b = s->batch;
    kvi_batch_clear(b);
    *n_prefill = 0;
    for (int i = 0; i < s->n_live; i++) {
        sreq *q = s->live[i];
        if (q->state != SREQ_RUNNING || q->lane != L) continue;
        q->row = -1;
        if (q->n_tokens - q->n_done != 1) continue;
        q->row = kvi_batch_add(b, q->seq, q->tokens[q->n_done], q->n_done - q->shift, true);
        for (int32_t k = 0; k < q->n_draft; k++)
            kvi_batch_add(b, q->seq, q->drafts[k], q->n_done + 1 + k, true);
    }
    int32_t budget = s->p.batch_tokens - kvi_batch_n_rows(b);
    while (budget > 0) {
        sreq *next = NULL;
        for (int i = 0; i < s->n_live; i++) {
            sreq *q = s->live[i];
            if (q->state != SREQ_RUNNING || q->lane != L || q->row != -1 || q->n_tokens - q->n_done <= 1)
                continue;
            if (!next || q->admit_no < next->admit_no) next = q;
        }
        if (!next) break;
        int32_t n = next->n_tokens - next->n_done;
        if (n > budget) n = budget;
        if (next->r.ctx_evict && n > s->n_ctx - kvi_seq_len(next->seq)) n = s->n_ctx - kvi_seq_len(next->seq);
        if (n <= 0) { /* no room made (evict_all failed): not in this batch */
            next->row = -2;
            continue;
        }
        int32_t last = -1;
        for (int32_t k = 0; k < n; k++) {
            const int32_t i = next->n_done + k;
            last = kvi_batch_add(b, next->seq, next->tokens[i], i - next->shift, i == next->n_tokens - 1);
        }
        if (next->n_done + n == next->n_tokens)
            next->row = last;
        else
            next->row = -2; /* in this batch, no logits yet */
        if (next->t_prefill0 == 0) next->t_prefill0 = t_step;
        budget -= n;
        *n_prefill += n;
    }
    return kvi_batch_n_rows(b);
}

/* Whether the youngest running request is in a lane in flight. */
static bool youngest_in_flight(const kvi_sched *s)
{
    const sreq *y = NULL;
    for (int i = 0; i < s->n_live; i++) {
        const sreq *q = s->live[i];
        if (q->state == SREQ_RUNNING && (!y || q->admit_no > y->admit_no)) y = q;
    }
    return y && s->inflight[y->lane];
}

/* The youngest running request of a lane not in flight gives its blocks back
 * and waits to be recomputed. */
static bool preempt_youngest(kvi_sched *s)
{
    sreq *y = NULL;
    int n_running = 0;
    for (int i = 0; i < s->n_live; i++) {
        sreq *q = s->live[i];
        if (q->state != SREQ_RUNNING) continue;
        n_running++;
        if (s->inflight[q->lane]) continue;
        if (!y || q->admit_no > y->admit_no) y = q;
    }
    if (!y || n_running < 2) return false;
    kvi_seq_free(y->seq);
    y->seq = NULL;
    y->state = SREQ_WAITING;
    y->row = -1;
    y->n_done = 0;
    y->shift = 0;
    y->preempted = true;
    y->n_preempted++;
    pthread_mutex_lock(&s->mu);
    s->n_waiting++;
    s->st.n_preemptions++;
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* The running requests' block tables into the view (mu held). Out of memory
 * leaves tables out; the view is for display only. */
static void view_update(kvi_sched *s)
{
    s->n_view = 0;
    s->n_view_ids = 0;
    for (int i = 0; i < s->n_live; i++) {
        const sreq *q = s->live[i];
        if (q->state != SREQ_RUNNING) continue;
        if (s->n_view == s->view_cap) {
            const int cap = s->view_cap ? 2 * s->view_cap : 16;
            kvi_sched_seq_view *nv = realloc(s->view, (size_t)cap * sizeof *nv);
            if (nv) s->view = nv;
            int32_t *no = realloc(s->view_off, (size_t)cap * sizeof *no);
            if (no) s->view_off = no;
            if (!nv || !no) return;
            s->view_cap = cap;
        }
        const int32_t n = kvi_seq_block_ids(q->seq, NULL, 0);
        if ((int64_t)s->n_view_ids + n > s->view_ids_cap) {
            const int64_t want = 2 * ((int64_t)s->n_view_ids + n);
            int32_t *ni = want <= INT32_MAX ? realloc(s->view_ids, (size_t)want * sizeof *ni) : NULL;
            if (ni) {
                s->view_ids = ni;
                s->view_ids_cap = (int32_t)want;
            }
        }
        int32_t shown = s->view_ids_cap - s->n_view_ids;
        if (shown > n) shown = n;
        kvi_seq_block_ids(q->seq, s->view_ids + s->n_view_ids, shown);
        kvi_sched_seq_view *v = &s->view[s->n_view];
        memset(v, 0, sizeof *v);
        v->id = q->id;
        v->n_prompt = q->n_prompt;
        v->n_tokens = q->n_tokens;
        v->n_kv = kvi_seq_len(q->seq);
        v->n_blocks = n;
        v->n_shown = shown;
        s->view_off[s->n_view++] = s->n_view_ids;
        s->n_view_ids += shown;
    }
}

int kvi_sched_kv_view(kvi_sched *s, kvi_sched_seq_view *views, int max_views, int32_t *ids, int32_t cap_ids)
{
    pthread_mutex_lock(&s->mu);
    const int n = s->n_view;
    int32_t used = 0;
    for (int i = 0; i < n && i < max_views; i++) {
        views[i] = s->view[i];
        int32_t k = s->view[i].n_shown;
        if (k > cap_ids - used) k = cap_ids - used;
        if (k < 0 || !ids) k = 0;
        if (k > 0) memcpy(ids + used, s->view_ids + s->view_off[i], (size_t)k * sizeof *ids);
        views[i].n_shown = k;
        views[i].blocks = ids ? ids + used : NULL;
        used += k;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Counts a step's rows (and the experts they were routed to) before any of its
 * requests is finished: a client that reads the statistics once its reply came
 * sees the step that produced it. */
static void count_rows(kvi_sched *s, int32_t n_prefill, int32_t n_decode)
{
    pthread_mutex_lock(&s->mu);
    s->st.n_steps++;
    s->st.n_prefill_tokens += (uint64_t)n_prefill;
    s->st.n_decode_tokens += (uint64_t)n_decode;
    if (s->routed) kvi_engine_expert_counts(s->e, s->routed, (size_t)s->n_routed);
    pthread_mutex_unlock(&s->mu);
}

static void snapshot(kvi_sched *s)
{
    int n_running = 0;
    for (int i = 0; i < s->n_live; i++) n_running += s->live[i]->state == SREQ_RUNNING;
    kvi_stats ks;
    kvi_stats_get(s->e, NULL, &ks);
    pthread_mutex_lock(&s->mu);
    s->st.engine = ks;
    s->st.n_running = n_running;
    s->st.n_waiting = s->n_waiting;
    view_update(s);
    pthread_mutex_unlock(&s->mu);
}

/* The log-probabilities of a token sampled from logits, for a request that
 * asked for them (a pass over the vocabulary; raw logits, see kvinfer.h). Called
 * right before on_token for every delivered token, whatever path sampled it. */
static void deliver_logprobs(const kvi_sched *s, const sreq *q, const float *logits, int32_t tok)
{
    int32_t ids[KVI_LOGPROBS_MAX];
    float lps[KVI_LOGPROBS_MAX];
    float lp = 0.0f;
    int32_t n = kvi_logprobs_top(logits, s->n_vocab, tok, q->r.top_logprobs, &lp, ids, lps);
    if (n < 0) n = 0;
    q->r.on_logprobs(q->r.user, tok, lp, ids, lps, n);
}

/* Hands one sampled token (already given to the sampler) to the request: end of
 * generation, logprobs, on_token, then max_tokens and the context. true when the
 * request is finished, with *f its reason. */
static bool deliver(kvi_sched *s, sreq *q, const float *logits, int32_t tok, double t_done, kvi_finish *f)
{
    if (q->t_first == 0) q->t_first = t_done;
    q->t_last = t_done;
    const int32_t bos = kvi_token_bos(s->m);
    if (!q->r.ignore_eos && tok != bos && kvi_token_is_eog(s->m, tok)) {
        *f = KVI_FINISH_STOP;
        return true;
    }
    q->tokens[q->n_tokens++] = tok;
    if (q->r.on_logprobs) deliver_logprobs(s, q, logits, tok);
    const bool more = q->r.on_token ? q->r.on_token(q->r.user, tok) : true;
    const int32_t n_gen = q->n_tokens - q->n_prompt;
    if (!more) {
        *f = KVI_FINISH_STOP;
        return true;
    }
    if (q->r.ctx_evict && q->n_tokens >= q->cap) {
        int32_t *nt = q->cap < INT32_MAX / 2 ? realloc(q->tokens, (size_t)q->cap * 2 * sizeof *nt) : NULL;
        if (nt) {
            q->tokens = nt;
            q->cap *= 2;
        }
    }
    if ((q->r.max_tokens > 0 && n_gen >= q->r.max_tokens) || (q->n_tokens > s->n_ctx && !q->r.ctx_evict) ||
        q->n_tokens >= q->cap) {
        *f = KVI_FINISH_LENGTH;
        return true;
    }
    return false;
}

/* A speculating request's round after the step: verify the rows from q->row,
 * keep the accepted positions, deliver the tokens. true when it finished. */
static bool spec_round(kvi_sched *s, sreq *q, double t_done, kvi_finish *f, kvi_error *le)
{
    const int32_t n = q->n_draft;
    for (int32_t k = 0; k <= n; k++) s->spec_lg[k] = kvi_logits(s->e, q->row + k);
    const int32_t L = q->n_tokens - 1; /* the round's first row holds tokens[L] at L */
    const int32_t m = kvi_spec_verify(q->sp, q->smp, s->spec_lg, n, s->spec_out, le);
    q->row = -1;
    q->n_draft = 0;
    if (m < 1) {
        if (m >= 0) err_set(le, KVI_E_INVALID, "scheduler: speculative verification returned no token");
        *f = KVI_FINISH_ERROR;
        return true;
    }
    if (n > 0) {
        const int32_t acc = m - 1 < n ? m - 1 : n;
        pthread_mutex_lock(&s->mu); /* counted before the request can finish */
        s->st.n_spec_drafted += (uint64_t)n;
        s->st.n_spec_accepted += (uint64_t)acc;
        pthread_mutex_unlock(&s->mu);
        s->g_acc = 0.98 * s->g_acc + (double)acc;
        s->g_trials = 0.98 * s->g_trials + (double)n;
        kvi_seq_truncate(q->seq, L + m); /* drops the rejected draft positions */
    }
    q->n_done = L + m;
    for (int32_t k = 0; k < m; k++)
        if (deliver(s, q, s->spec_lg[k], s->spec_out[k], t_done, f)) return true;
    return false;
}

typedef struct {
    kvi_engine *e;
    sreq **q; /* [n] */
    int n;
    atomic_int next;
} sample_job;

static void sample_worker(void *ctx, int ith, int nth)
{
    sample_job *j = ctx;
    (void)ith;
    (void)nth;
    for (;;) {
        const int i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n) break;
        sreq *q = j->q[i];
        const float *logits = kvi_logits(j->e, q->row);
        q->sampled = logits ? kvi_sampler_sample(q->smp, logits) : -1;
    }
}

/* Every plain request of lane L with logits in its finished step draws its
 * token, on the pool when there are several (q->sampled; the order of draws
 * across requests does not matter, each has its own sampler). */
static void sample_rows(kvi_sched *s, int L)
{
    if (s->smp_cap < s->n_live) {
        sreq **nq = realloc(s->smp_q, (size_t)s->live_cap * sizeof *nq);
        if (nq) {
            s->smp_q = nq;
            s->smp_cap = s->live_cap;
        }
    }
    sample_job j = { .e = s->e, .q = s->smp_q, .n = 0 };
    atomic_init(&j.next, 0);
    for (int i = 0; i < s->n_live; i++) {
        sreq *q = s->live[i];
        q->sampled = -1;
        if (q->state != SREQ_RUNNING || q->lane != L || q->row < 0 || q->sp) continue;
        if (j.n < s->smp_cap) {
            s->smp_q[j.n++] = q;
        } else { /* no memory for the list: this one on the engine thread */
            const float *logits = kvi_logits(s->e, q->row);
            q->sampled = logits ? kvi_sampler_sample(q->smp, logits) : -1;
        }
    }
    if (j.n > 1)
        kvi_engine_parallel_for(s->e, sample_worker, &j);
    else if (j.n == 1)
        sample_worker(&j, 0, 1);
}

/* (5) Lane L's finished step: sampling and callbacks for its rows that wanted
 * logits; a prefill chunk short of its last row moves n_done on. */
static void lane_deliver(kvi_sched *s, int L)
{
    const uint64_t t_smp = prof_begin();
    sample_rows(s, L);
    prof_end(PROF_SAMPLING, t_smp);
    const uint64_t t_cb = prof_begin();
    const double t_done = kvi_time_ms();
    for (int i = 0; i < s->n_live;) {
        sreq *q = s->live[i];
        if (q->state != SREQ_RUNNING || q->lane != L || q->row == -1) {
            i++;
            continue;
        }
        if (q->row == -2) {
            /* a prefill chunk that did not reach the last pending row */
            q->n_done = kvi_seq_len(q->seq) + q->shift;
            q->row = -1;
            i++;
            continue;
        }
        kvi_finish f = KVI_FINISH_LENGTH;
        bool done = false;
        kvi_error le = { 0 };
        if (q->sp) {
            done = spec_round(s, q, t_done, &f, &le);
        } else {
            q->n_done = q->n_tokens;
            const float *logits = kvi_logits(s->e, q->row);
            q->row = -1;
            if (logits && q->sampled < 0 && q->r.grammar) {
                err_set(&le, KVI_E_INVALID, "grammar: no token of the vocabulary can continue the output");
                f = KVI_FINISH_ERROR;
                done = true;
            } else if (!logits || q->sampled < 0) {
                err_set(&le, KVI_E_INVALID, "scheduler: no logits for a row that asked for them");
                f = KVI_FINISH_ERROR;
                done = true;
            } else {
                const int32_t tok = q->sampled;
                kvi_sampler_accept_output(q->smp, tok);
                done = deliver(s, q, logits, tok, t_done, &f);
            }
        }
        if (done) {
            live_remove(s, i);
            finish(s, q, f, f == KVI_FINISH_ERROR ? &le : NULL);
        } else {
            i++;
        }
    }
    prof_end(PROF_CALLBACKS, t_cb);
}

/* Room by the context policy for the next rows of lane L's evicting requests
 * (see the file comment); a request whose room cannot be made finishes with the error. */
static void evict_all(kvi_sched *s, int L)
{
    int32_t chunk = s->n_ctx / 4 < SCHED_EVICT_CHUNK ? s->n_ctx / 4 : SCHED_EVICT_CHUNK;
    if (chunk < 1) chunk = 1;
    for (int i = 0; i < s->n_live;) {
        sreq *q = s->live[i];
        const int32_t want = q->n_tokens - q->n_done < chunk ? q->n_tokens - q->n_done : chunk;
        const int32_t held = q->seq ? kvi_seq_len(q->seq) : 0;
        if (q->state != SREQ_RUNNING || q->lane != L || !q->r.ctx_evict || held + want <= s->n_ctx) {
            i++;
            continue;
        }
        kvi_error e = { 0 };
        const int32_t now = kvi_seq_make_room(q->seq, want, &e);
        if (now < 0) {
            live_remove(s, i);
            finish(s, q, KVI_FINISH_ERROR, &e);
            continue;
        }
        q->dropped += held - now;
        q->shift = q->n_done - now;
        i++;
    }
}

/* Fails lane L's requests that have rows in its batch. */
static void lane_fail(kvi_sched *s, int L, const kvi_error *se)
{
    for (int i = 0; i < s->n_live;) {
        sreq *q = s->live[i];
        if (q->state == SREQ_RUNNING && q->lane == L && q->row != -1) {
            live_remove(s, i);
            finish(s, q, KVI_FINISH_ERROR, se);
        } else {
            i++;
        }
    }
}

/* Lane L's launched step, the engine's oldest: finished and delivered. */
static void lane_finish(kvi_sched *s, int L)
{
    s->inflight[L] = false;
    kvi_error se = { 0 };
    if (kvi_step_finish(s->e, &se) != 0)
        lane_fail(s, L, &se);
    else
        lane_deliver(s, L);
}

/* Every lane in flight, in launch order: lane first is the oldest (the next to
 * step), then first + 1 ... */
static void drain_lanes(kvi_sched *s, int first)
{
    for (int k = 0; k < s->n_lanes; k++) {
        const int l = (first + k) % s->n_lanes;
        if (s->inflight[l]) lane_finish(s, l);
    }
}

int kvi_sched_step(kvi_sched *s, kvi_error *err)
{
    const uint64_t t_prof = prof_begin();
    (void)kvi_engine_lora_reap(s->e); /* unloaded adapters no sequence holds any more */
    take_incoming(s, err);
    /* lane L: its launched step (the oldest in flight) finishes, then it takes
     * new requests and launches its next batch, while the other lanes' batches
     * run on the later stages of a pipeline */
    const int L = s->cur;
    s->cur = (L + 1) % s->n_lanes;
    if (s->inflight[L]) lane_finish(s, L);
    admit(s, L);
    evict_all(s, L);
    spec_draft_all(s);
    const double t_step = kvi_time_ms();
    int32_t n_prefill = 0, n_rows = 0;
    for (;;) {
        n_rows = build_batch(s, L, t_step, &n_prefill);
        if (n_rows == 0) break;
        kvi_error se = { 0 };
        const double t0 = kvi_time_ms();
        /* one lane: the whole step now; more: launched, finished at the lane's next turn */
        const uint64_t t_fwd = prof_begin();
        const int rc = s->n_lanes == 1 ? kvi_step(s->e, s->batch, &se) : kvi_step_launch(s->e, s->batch, &se);
        prof_end(PROF_FORWARD, t_fwd);
        if (rc == 0) {
            if (s->n_lanes == 1)
                spec_observe_step(s, n_rows, kvi_time_ms() - t0);
            else
                s->inflight[L] = true;
            break;
        }
        if (rc == KVI_E_NO_KV_SPACE) {
            /* drafts go first (a round without them is a plain step), then the
             * youngest request; when it is in a lane in flight, or nothing can be
             * preempted, the lanes in flight finish first (their requests may
             * then be preempted) */
            bool had_drafts = false, others = false;
            for (int i = 0; i < s->n_live; i++) {
                had_drafts |= s->live[i]->n_draft > 0;
                s->live[i]->n_draft = 0;
            }
            for (int l = 0; l < s->n_lanes; l++) others |= s->inflight[l];
            if (had_drafts) continue;
            if (!(others && youngest_in_flight(s)) && preempt_youngest(s)) continue;
            if (others) {
                drain_lanes(s, s->cur);
                continue;
            }
        }
        /* nothing left to preempt, or a real error: fail the rows' requests */
        lane_fail(s, L, &se);
        n_rows = 0;
        break;
    }
    if (n_rows > 0) {
        count_rows(s, n_prefill, n_rows - n_prefill > 0 ? n_rows - n_prefill : 0);
        if (!s->inflight[L]) lane_deliver(s, L);
    }
    snapshot(s);
    pthread_mutex_lock(&s->mu);
    int alive = s->n_live;
    for (sreq *q = s->incoming; q; q = q->next) alive++;
    pthread_mutex_unlock(&s->mu);
    if (s->p.after_step) s->p.after_step(s->p.after_step_user, s->e, alive);
    prof_end(PROF_SCHED_STEP, t_prof);
    return alive;
}

static void *engine_thread(void *arg)
{
    kvi_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        const uint64_t t_idle = prof_begin();
        while (!s->stop && s->n_live == 0 && !s->incoming && s->n_cancels == 0)
            pthread_cond_wait(&s->cv, &s->mu);
        prof_end(PROF_IDLE, t_idle);
        const bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        kvi_sched_step(s, NULL);
    }
    return NULL;
}

int kvi_sched_start(kvi_sched *s, kvi_error *err)
{
    if (s->thread_started) return 0;
    if (pthread_create(&s->thread, NULL, engine_thread, s) != 0)
        return err_set(err, KVI_E_NOMEM, "scheduler: cannot start the engine thread");
    s->thread_started = true;
    return 0;
}

void kvi_sched_stats_get(kvi_sched *s, kvi_sched_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->n_waiting = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
}

int kvi_sched_expert_counts(kvi_sched *s, uint64_t *out, size_t cap, int *n_expert)
{
    if (n_expert) {
        kvi_model_info info;
        kvi_model_get_info(s->m, &info);
        *n_expert = info.n_expert;
    }
    pthread_mutex_lock(&s->mu);
    const int n = s->n_routed;
    if (out && s->routed) memcpy(out, s->routed, ((size_t)n < cap ? (size_t)n : cap) * sizeof *out);
    pthread_mutex_unlock(&s->mu);
    return n;
}

void kvi_sched_free(kvi_sched *s)
{
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int k = 0; k < s->n_lanes; k++) /* the engine's launched steps, in launch order */
        if (s->inflight[(s->cur + k) % s->n_lanes]) (void)kvi_step_finish(s->e, NULL);
    pthread_mutex_lock(&s->mu);
    sreq *in = s->incoming;
    s->incoming = s->incoming_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (in) {
        sreq *q = in;
        in = in->next;
        finish(s, q, KVI_FINISH_CANCELLED, NULL);
    }
    while (s->n_live > 0) {
        sreq *q = s->live[s->n_live - 1];
        s->n_live--;
        finish(s, q, KVI_FINISH_CANCELLED, NULL);
    }
    kvi_batch_free(s->batch);
    free(s->live);
    free(s->smp_q);
    free(s->cancels);
    free(s->view);
    free(s->view_off);
    free(s->routed);
    free(s->view_ids);
    free(s->t_rows);
    free(s->spec_lg);
    free(s->spec_out);
    kvi_grammar_vocab_free(s->gv);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
