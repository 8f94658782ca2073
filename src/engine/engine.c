/*
 * engine.c — the public engine API: sequences, batches, kvi_step, statistics.
 *
 * An engine owns one model reference, one worker pool, one KV block pool and
 * the forward scratch. A sequence is a block table plus its length. kvi_step
 * validates the whole batch first (tokens, order, positions, context), then
 * reserves every block the rows need; only when all of that succeeded does any
 * sequence change, so an error leaves every sequence as it was. Batches larger
 * than n_batch_max run as consecutive forward passes of at most n_batch_max
 * rows: a row only ever reads positions <= its own, which earlier chunks have
 * already written, so the split changes no result.
 *
 * A step runs in four phases: validate, reserve, run (the forward passes),
 * commit. Sharing (kv_cache.h, kv_prefix.c): the reservation phase is one KV
 * transaction (kv/kv_txn.h) that also gives each sequence a private copy of
 * every shared block its rows will write (copy on write), remembered so that a
 * later failure puts the shared block back (rollback); only after every
 * reservation succeeded are the old references dropped and overwritten indexed
 * blocks unindexed (the transaction's commit). The commit phase records each row's token
 * and indexes the blocks that became full. kvi_step never evicts: a sequence at
 * n_ctx calls kvi_seq_make_room() (context policy, policy.h) and continues at
 * the position it returns. For the "heavy" policy, a sequence with exactly one
 * row in a step (a decode row) accumulates the attention each of its positions
 * received into recv (summed over layers and heads).
 */
#include "kvinfer.h"

#include "engine/engine_int.h"
#include "engine/engine_pipe.h"
#include "base/error.h"
#include "forward/forward.h"
#include "kv/kv_cache.h"
#include "kv/kv_tier.h"
#include "kv/kv_txn.h"
#include "kv/policy/policy.h"
#include "model/lora.h"
#include "model/model.h"
#include "formats/quant.h"
#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Positions a window layer keeps past its window, so that a sequence can be
 * rewound that far (speculative decoding drops rejected drafts) */
#define ENGINE_WIN_SLACK 64

/* Policies that move keys re-rotate them with one plain RoPE (kv_rope): a model
 * with window layers, two RoPE sets, scaled frequencies or layers that are not
 * rotated alike cannot be moved so. */
static bool engine_policy_fits(const kvi_model *m)
{
    const model_rope *r = &m->rope[0];
    if (m->n_rope_sets != 1 || r->yarn || r->freq_scale != 1.0f || r->mscale != 1.0f || m->rope_long ||
        m->mla_kv_rank > 0 || m->n_recurrent > 0)
        return false;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].window || m->layers[l].no_rope || m->layers[l].attn_chunk || m->layers[l].kv_share ||
            m->layers[l].head_dim) /* llama4's NoPE and chunked layers, gemma4's shared or narrow ones */
            return false;
    return true;
}

struct kvi_seq {
    kvi_engine *e;
    kv_table table;
    int slot;
    float *recv; /* [n_ctx] received attention per position (heavy policy), or NULL */
    uint64_t prefix_hit, prefix_miss, n_evicted;
    uint64_t prefix_ram, prefix_disk; /* of prefix_hit: loaded from the tiers */
    /* per-step bookkeeping, valid only inside kvi_step */
    uint64_t step_stamp;
    int32_t step_first, step_last, step_rows;
    int32_t step_snap; /* index into snap_stage, or -1 */
    int32_t step_bnd;  /* the block boundary whose state step_snap keeps */
    lora_set lora;     /* LoRA adapters of its rows (n 0: none); each holds a use of its adapter */
    uint64_t lora_hash; /* of lora, 0 when none */
};

/* Launched steps in flight at most, and the slots they need. */
#define ENGINE_DEPTH_MAX KVI_STEP_DEPTH_MAX
#define ENGINE_FLIGHTS (ENGINE_DEPTH_MAX + 1)

/* One launched step's results. */
typedef struct step_flight {
    float *logits; /* [logits_cap][n_vocab] */
    int32_t logits_cap;
    int32_t *row_logit; /* [row_logit_cap] batch row -> logits row or -1 */
    int32_t row_logit_cap;
    int32_t n_rows;   /* rows of the step */
    size_t n_posted;  /* a pipeline's root: logits floats posted to the transport, not yet waited for */
    int wrc;          /* a pipeline's root: the wait's result once done early (n_posted then 0) */
} step_flight;

struct kvi_engine {
    kvi_model *m;
    kvi_engine_params p;
    tpool *pool;
    kern_cfg kcfg; /* the kernels of this engine's pool, when p.cpu was given */
    kv_pool kv;
    fwd_ctx *fwd;
    kvi_seq **slots; /* [n_seq_max] */
    uint64_t stamp;
    /* per-step arrays, [n_batch_max] */
    const kv_table **tables;
    const lora_set **lora_rows;            /* [n_batch_max] per row of a forward chunk: its sequence's set */
    /* adapters the engine owns (kvi_engine_lora_load), by id; ids [0, n_lora) are
     * published (n_lora grows by a release store after its slot is written, so any
     * thread may read ids below an acquire load of it); an unloaded id is gone for
     * good (lora_gone, its scale 0) and its adapter freed by kvi_engine_lora_reap on
     * the stepping thread once no sequence holds it (lora[id] then NULL). lora_mu
     * orders loads, unloads, reaps and kvi_engine_lora_describe. */
    kvi_lora *lora[KVI_ENGINE_LORA_MAX];
    float lora_scale[KVI_ENGINE_LORA_MAX]; /* their scales for new sequences */
    atomic_bool lora_gone[KVI_ENGINE_LORA_MAX];
    atomic_int n_lora;
    pthread_mutex_t lora_mu;
    float **snap_rows; /* [snap_rows_cap] per batch row: where its recurrent state snapshot goes, or NULL */
    int32_t snap_rows_cap;
    float *snap_stage; /* [snap_cap][state floats] snapshots taken during the pass */
    int32_t snap_cap;
    int32_t *out_rows;
    /* launched steps (kvi_step_launch): fl[fl_order[0 .. n_flight)] in flight,
     * oldest first; fl[fl_cur] the last finished, whose logits kvi_logits reads
     * (-1: none). A launch takes the lowest slot neither in flight nor fl_cur
     * (n_flight < ENGINE_DEPTH_MAX < ENGINE_FLIGHTS), so a finished step's
     * logits stay valid until the next finish, and an engine that keeps k steps
     * in flight grows only k + 1 slots' logits (kvi_step: slot 0 alone). */
    step_flight fl[ENGINE_FLIGHTS];
    int fl_order[ENGINE_FLIGHTS];
    int n_flight, fl_cur;
    /* sharing and context policy */
    const kv_policy *policy;
    kv_policy_params pp;
    kv_txn txn;        /* the KV changes of the current step (kv_txn.h) */
    float **recv_rows; /* [recv_cap] per batch row: its sequence's recv or NULL */
    int32_t recv_cap;
    int32_t *keep; /* [n_ctx] positions a policy keeps */
    /* statistics */
    uint64_t n_steps, n_rows;
    uint64_t prefix_hit, prefix_miss, n_evicted;
    uint64_t prefix_ram, prefix_disk;
    struct kv_tier *tier; /* the prefix cache tiers (kv/kv_tier.h), or NULL; kv.tier uses it
                             unless the pool is a pipeline stage's */
    double forward_ms;
    /* a stage of a pipeline (engine_pipe.h), or piped false */
    bool piped;
    engine_pipe_io pipe;
    bool pipe_quiet;    /* the root sends no op (inside a call that sends its own) */
    engine_pipe_stats pipe_st; /* this stage's compute, waits and bytes sent */
    uint64_t pipe_hash; /* a stage other than the root: the root's tables hash of this step */
    bool pipe_broken;   /* the root: a forward pass failed after its batch went to the other
                           stages, which now wait for its activations: no step may follow */
};

void kvi_engine_params_default(kvi_engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_threads = 0;
    p->n_ctx = 0;
    p->kv_type_k = KVI_TYPE_F16;
    p->kv_type_v = KVI_TYPE_F16;
    p->kv_block_size = 16;
    p->kv_budget_bytes = 0;
    p->n_seq_max = 1;
    p->n_batch_max = 512;
    p->prefix_cache = true;
    p->ctx_policy = "error";
    p->n_keep = 0;
    p->n_sink = 4;
    p->n_window = 0;
}

void kvi_engine_free(kvi_engine *e)
{
    if (!e) return;
    if (e->slots) {
        for (int i = 0; i < e->p.n_seq_max; i++)
            if (e->slots[i]) kvi_seq_free(e->slots[i]);
        free(e->slots);
    }
    for (int i = 0; i < atomic_load(&e->n_lora); i++) lora_free(e->lora[i]);
    pthread_mutex_destroy(&e->lora_mu);
    fwd_free(e->fwd);
    (void)kv_tier_flush(e->kv.tier, &e->kv, NULL); /* a clean shutdown: the disk tier keeps them */
    kv_pool_free(&e->kv);
    kv_tier_free(e->tier);
    tpool_free(e->pool);
    free(e->tables);
    free(e->lora_rows);
    free(e->snap_rows);
    free(e->snap_stage);
    free(e->out_rows);
    for (int i = 0; i < ENGINE_FLIGHTS; i++) {
        free(e->fl[i].logits);
        free(e->fl[i].row_logit);
    }
    kv_txn_free(&e->txn);
    free(e->recv_rows);
    free(e->keep);
    free(e);
}

kvi_engine *kvi_engine_create(kvi_model *m, const kvi_engine_params *params, kvi_error *err)
{
    kvi_engine_params p;
    if (params)
        p = *params;
    else
        kvi_engine_params_default(&p);
    if (!m || !m->has_weights) {
        err_set(err, KVI_E_INVALID, "engine: the model has no weights (vocabulary-only file?)");
        return NULL;
    }
    if (p.n_ctx <= 0) p.n_ctx = m->n_ctx_train > 0 ? m->n_ctx_train : 2048;
    if (p.kv_block_size <= 0) p.kv_block_size = 16;
    if (p.n_seq_max <= 0) p.n_seq_max = 1;
    if (kvi_model_is_encoder(m)) p.n_seq_max = 1; /* no steps (kvi_embed keeps no KV): the least pool */
    if (p.n_batch_max <= 0) p.n_batch_max = 512;
    if (p.n_threads <= 0) p.n_threads = tpool_n_cores();
    if (p.kv_block_size > 4096 || p.n_ctx > (1 << 24) || p.n_seq_max > (1 << 16) ||
        p.n_batch_max > (1 << 20) || p.n_threads > 1024) {
        err_set(err, KVI_E_INVALID,
                "engine: parameter out of range (ctx %d, block %d, seqs %d, batch %d, threads %d)", p.n_ctx,
                p.kv_block_size, p.n_seq_max, p.n_batch_max, p.n_threads);
        return NULL;
    }
    if (!kv_layout_type_ok(p.kv_type_k)) {
        err_set(err, KVI_E_UNSUPPORTED, "engine: KV key type %s is not supported (f32, f16, q8_0, q4_0, q4)",
                kvi_type_name(p.kv_type_k) ? kvi_type_name(p.kv_type_k) : "?");
        return NULL;
    }
    const kv_policy *policy = kv_policy_find(p.ctx_policy);
    if (!policy) {
        err_set(err, KVI_E_INVALID, "engine: unknown context policy '%s' (%s)", p.ctx_policy,
                kv_policy_names());
        return NULL;
    }
    if (strcmp(p.ctx_policy, "error") != 0 && !engine_policy_fits(m)) {
        err_set(err, KVI_E_UNSUPPORTED, "engine: context policy '%s' %s (use --ctx-policy error)",
                p.ctx_policy,
                m->n_recurrent > 0
                    ? "drops old positions, but a recurrent layer's state cannot forget selectively"
                    : "moves cached keys by re-rotating them, which this model's sliding-window "
                      "layers, RoPE scaling or latent attention do not allow");
        return NULL;
    }
    if (m->n_recurrent > 0 && p.kv_type_k == KVI_TYPE_KV_Q4) {
        err_set(err, KVI_E_UNSUPPORTED,
                "engine: q4 (KIVI) keys are not supported with recurrent layers yet (use f32, f16, q8_0 or "
                "q4_0)");
        return NULL;
    }
    if (p.n_keep < 0 || p.n_sink < 0 || p.n_window < 0) {
        err_set(err, KVI_E_INVALID, "engine: negative keep/sink/window (%d, %d, %d)", p.n_keep, p.n_sink,
                p.n_window);
        return NULL;
    }
    if (!kv_layout_type_ok(p.kv_type_v)) {
        err_set(err, KVI_E_UNSUPPORTED,
                "engine: KV value type %s is not supported (f32, f16, q8_0, q4_0, q4)",
                kvi_type_name(p.kv_type_v) ? kvi_type_name(p.kv_type_v) : "?");
        return NULL;
    }

    kvi_engine *e = calloc(1, sizeof *e);
    if (!e) {
        err_set(err, KVI_E_NOMEM, "engine: out of memory");
        return NULL;
    }
    e->fl_cur = -1;
    pthread_mutex_init(&e->lora_mu, NULL);
    e->m = m;
    e->p = p;
    e->policy = policy;
    e->pp = (kv_policy_params){ .n_ctx = p.n_ctx,
                                .n_keep = p.n_keep,
                                .n_sink = p.n_sink,
                                .n_window = p.n_window,
                                .block_size = p.kv_block_size };
    const int kv_dim = model_kv_dim(m); /* the widest layer's (gemma4), else n_kv_heads * head_dim */
    /* latent attention: the cache holds the latent rows only (values inside them) */
    if (m->mla_kv_rank > 0) e->p.kv_type_v = p.kv_type_v = KVI_TYPE_KV_LATENT;
    int *windows =
        malloc((size_t)m->n_layers * sizeof *windows); /* [n_layers] each layer's window, 0: global */
    if (!windows) {
        err_set(err, KVI_E_NOMEM, "engine: out of memory");
        goto fail;
    }
    int n_win = 0;
    for (int l = 0; l < m->n_layers; l++) {
        windows[l] = m->layers[l].recurrent ? KV_LAYER_RECURRENT
                     : m->layers[l].kv_share || m->layers[l].no_mixer
                         ? KV_LAYER_ABSENT /* reads another layer's K/V, or has no attention */
                     : m->ssm_both ? KV_LAYER_GLOBAL_STATE /* attention beside a recurrent mixer */
                                   : m->layers[l].window;
        n_win += windows[l] > 0;
    }
    const size_t state_layer = m->n_recurrent > 0 ? model_state_layer_floats(m) * sizeof(float) : 0;
    if (p.kv_budget_bytes == 0) {
        /* every sequence at full length, and the window parts one step of
         * n_batch_max rows holds until it commits (kv_cache.h) */
        e->p.kv_budget_bytes =
            (size_t)p.n_seq_max * kv_layout_seq_bytes(m->n_layers, windows, ENGINE_WIN_SLACK, kv_dim,
                                                      p.kv_block_size, p.kv_type_k, p.kv_type_v, p.n_ctx) +
            (n_win ? ((size_t)p.n_batch_max / p.kv_block_size + 2) *
                         kv_layout_block_bytes(n_win, kv_dim, p.kv_block_size, p.kv_type_k, p.kv_type_v)
                   : 0) +
            (size_t)p.n_seq_max * (size_t)m->n_recurrent * state_layer + /* the recurrent states */
            (size_t)p.n_seq_max * kv_layout_indexer_seq_bytes(m->n_layers - m->n_recurrent, m->idx_dim,
                                                              p.kv_block_size, p.n_ctx); /* indexer rows */
    }
    const int kv_rc =
        kv_pool_init_layers(&e->kv, m->n_layers, windows, ENGINE_WIN_SLACK, kv_dim, p.kv_block_size,
                            p.kv_type_k, p.kv_type_v, e->p.kv_budget_bytes, err);
    free(windows);
    if (kv_rc != 0) goto fail;
    if (m->idx_heads > 0 && kv_pool_indexer_init(&e->kv, m->idx_dim, err) != 0) goto fail;
    if (m->n_recurrent > 0 && kv_pool_state_init(&e->kv, state_layer, p.n_seq_max, err) != 0) goto fail;
    if (engine_tier_create(m, &e->kv, &e->p, &e->tier, err) != 0) goto fail;
    e->kv.tier = e->tier;
    e->pool = tpool_create(p.n_threads);
    e->slots = calloc((size_t)p.n_seq_max, sizeof *e->slots);
    e->tables = malloc((size_t)p.n_batch_max * sizeof *e->tables);
    e->lora_rows = malloc((size_t)p.n_batch_max * sizeof *e->lora_rows);
    e->out_rows = malloc((size_t)p.n_batch_max * sizeof *e->out_rows);
    e->keep = malloc((size_t)p.n_ctx * sizeof *e->keep);
    if (!e->pool || !e->slots || !e->tables || !e->lora_rows || !e->out_rows || !e->keep) {
        err_set(err, KVI_E_NOMEM, "engine: out of memory");
        goto fail;
    }
    if (p.cpu) {
        if (engine_cpu_cfg(p.cpu, &e->kcfg, err)) goto fail;
        tpool_set_user(e->pool, &e->kcfg);
    }
    e->p.cpu = NULL; /* read once: the caller's struct need not outlive this call */
    e->fwd = fwd_create(m, p.n_batch_max, p.fwd_chunk, tpool_size(e->pool), p.kv_block_size, p.n_ctx, err);
    if (!e->fwd) goto fail;
    return e;
fail:
    kvi_engine_free(e);
    return NULL;
}

const kvi_model *kvi_engine_model(const kvi_engine *e) { return e->m; }
int kvi_engine_n_ctx(const kvi_engine *e) { return e->p.n_ctx; }

int kvi_engine_expert_counts(const kvi_engine *e, uint64_t *out, size_t cap)
{
    const uint64_t *c = e ? fwd_routed(e->fwd) : NULL;
    if (!c) return 0;
    const size_t n = (size_t)e->m->n_layers * (size_t)e->m->n_expert;
    if (out) memcpy(out, c, (n < cap ? n : cap) * sizeof *out);
    return (int)n;
}

size_t kvi_engine_scratch_bytes(const kvi_engine *e)
{
    if (!e) return 0;
    size_t logits = 0;
    for (int i = 0; i < ENGINE_FLIGHTS; i++)
        logits += (size_t)e->fl[i].logits_cap * (size_t)e->m->n_vocab * sizeof(float);
    return fwd_scratch_bytes(e->fwd) + tpool_scratch_bytes(e->pool) + logits;
}

kvi_seq *kvi_seq_create(kvi_engine *e)
{
    for (int i = 0; i < e->p.n_seq_max; i++) {
        if (!e->slots[i]) {
            kvi_seq *s = calloc(1, sizeof *s);
            if (!s) return NULL;
            s->e = e;
            s->slot = i;
            if (e->policy->needs_recv) {
                s->recv = calloc((size_t)e->p.n_ctx, sizeof *s->recv);
                if (!s->recv) {
                    free(s);
                    return NULL;
                }
            }
            e->slots[i] = s;
            const int nl = atomic_load(&e->n_lora);
            if (nl && kvi_seq_set_lora_scales(s, nl, e->lora_scale) != 0) {
                kvi_seq_free(s); /* more adapters on than one sequence may use */
                return NULL;
            }
            const int32_t msg[2] = { PIPE_OP_CREATE, i };
            if (engine_pipe_send(e, msg, 2) != 0) {
                e->pipe_quiet = true;
                kvi_seq_free(s);
                e->pipe_quiet = false;
                return NULL;
            }
            return s;
        }
    }
    return NULL;
}

void kvi_seq_free(kvi_seq *s)
{
    if (!s) return;
    const int32_t msg[2] = { PIPE_OP_FREE, s->slot };
    (void)engine_pipe_send(s->e, msg, 2); /* a lost stage fails the next step */
    kv_table_release(&s->e->kv, &s->table);
    (void)kvi_seq_set_lora(s, 0, NULL, NULL);
    s->e->slots[s->slot] = NULL;
    free(s->recv);
    free(s);
}

kvi_seq *kvi_seq_fork(kvi_seq *s)
{
    if (!s) return NULL;
    kvi_engine *e = s->e;
    const bool quiet = e->pipe_quiet;
    e->pipe_quiet = true; /* one FORK op, not CREATE */
    kvi_seq *c = kvi_seq_create(e);
    if (c && kv_table_share(&e->kv, &c->table, &s->table, NULL) != 0) {
        kvi_seq_free(c);
        c = NULL;
    }
    e->pipe_quiet = quiet;
    if (!c) return NULL;
    if (s->recv && c->recv) memcpy(c->recv, s->recv, (size_t)e->p.n_ctx * sizeof *c->recv);
    (void)kvi_seq_set_lora(c, s->lora.n, (kvi_lora *const *)s->lora.ad, s->lora.scale);
    const int32_t msg[3] = { PIPE_OP_FORK, s->slot, c->slot };
    if (engine_pipe_send(e, msg, 3) != 0) {
        e->pipe_quiet = true;
        kvi_seq_free(c);
        e->pipe_quiet = quiet;
        return NULL;
    }
    return c;
}

int kvi_seq_set_lora(kvi_seq *s, int n, kvi_lora *const *ad, const float *scales)
{
    if (!s || n < 0 || n > KVI_LORA_SET_MAX || (n > 0 && (!ad || !scales))) return KVI_E_INVALID;
    if (n > 0 && s->e->piped) return KVI_E_INVALID; /* the other stages would not know the set */
    for (int i = 0; i < n; i++)
        if (!ad[i] || ad[i]->m != s->e->m || !(scales[i] == scales[i])) return KVI_E_INVALID;
    for (int i = 0; i < s->lora.n; i++) ((kvi_lora *)s->lora.ad[i])->n_users--;
    lora_set ls = { 0 };
    uint64_t h = 0;
    for (int i = 0; i < n; i++) {
        if (scales[i] == 0.0f) continue; /* dropped, as llama.cpp drops it */
        ls.ad[ls.n] = ad[i];
        ls.scale[ls.n++] = scales[i];
        ad[i]->n_users++;
        h = engine_fnv1a(h ? h : 0xcbf29ce484222325ull, &ad[i]->id, sizeof ad[i]->id);
        h = engine_fnv1a(h, &scales[i], sizeof scales[i]);
    }
    /* K/V already cached under another set: its blocks must not be offered as this set's */
    if (s->table.n_pos > 0 && h != s->table.salt) s->table.no_index = true;
    s->lora = ls;
    s->lora_hash = h;
    s->table.salt = h;
    return 0;
}

int kvi_engine_lora_load_named(kvi_engine *e, const char *name, const char *path, float scale, kvi_error *err)
{
    if (!e || !(scale == scale)) return err_set(err, KVI_E_INVALID, "lora: no engine or a bad scale");
    if (e->piped) /* the other stages would run their layers without the adapter */
        return err_set(err, KVI_E_UNSUPPORTED, "lora: adapters are not split over pipeline stages (MPI) yet");
    if (atomic_load(&e->n_lora) >= KVI_ENGINE_LORA_MAX)
        return err_set(err, KVI_E_INVALID, "lora: an engine holds at most %d adapters", KVI_ENGINE_LORA_MAX);
    kvi_lora *a = kvi_lora_load(e->m, path, err); /* outside the lock: it reads the file */
    if (!a) return err && err->code ? err->code : KVI_E_INVALID;
    if (name && kvi_lora_set_name(a, name)) {
        lora_free(a);
        return err_set(err, KVI_E_INVALID, "lora: '%s' is not a name (printable ASCII without spaces, '/', '=')",
                       name);
    }
    pthread_mutex_lock(&e->lora_mu);
    const int id = atomic_load(&e->n_lora);
    int rc = id < KVI_ENGINE_LORA_MAX ? 0 : KVI_E_INVALID;
    for (int i = 0; !rc && name && i < id; i++)
        if (e->lora[i] && !atomic_load(&e->lora_gone[i]) && !strcmp(kvi_lora_name(e->lora[i]), name))
            rc = 1; /* the name is taken */
    if (!rc) {
        e->lora[id] = a;
        e->lora_scale[id] = scale;
        atomic_store(&e->lora_gone[id], false);
        atomic_store_explicit(&e->n_lora, id + 1, memory_order_release);
    }
    pthread_mutex_unlock(&e->lora_mu);
    if (rc) {
        lora_free(a);
        return rc == 1 ? err_set(err, KVI_E_INVALID, "lora: an adapter named '%s' is loaded", name)
                       : err_set(err, rc, "lora: an engine holds at most %d adapters", KVI_ENGINE_LORA_MAX);
    }
    return id;
}

int kvi_engine_lora_load(kvi_engine *e, const char *path, float scale, kvi_error *err)
{
    return kvi_engine_lora_load_named(e, NULL, path, scale, err);
}

int kvi_engine_lora_count(const kvi_engine *e)
{
    return e ? atomic_load_explicit(&((kvi_engine *)e)->n_lora, memory_order_acquire) : 0;
}

static bool lora_live(const kvi_engine *e, int id)
{
    return e && id >= 0 && id < kvi_engine_lora_count(e) && !atomic_load(&((kvi_engine *)e)->lora_gone[id]);
}

kvi_lora *kvi_engine_lora_get(const kvi_engine *e, int id) { return lora_live(e, id) ? e->lora[id] : NULL; }

float kvi_engine_lora_scale(const kvi_engine *e, int id) { return lora_live(e, id) ? e->lora_scale[id] : 0.0f; }

int kvi_engine_lora_set_scale(kvi_engine *e, int id, float scale)
{
    if (!lora_live(e, id) || !(scale == scale)) return KVI_E_INVALID;
    e->lora_scale[id] = scale;
    return 0;
}

int kvi_engine_lora_unload(kvi_engine *e, int id)
{
    if (!e) return KVI_E_INVALID;
    pthread_mutex_lock(&e->lora_mu);
    const bool live = lora_live(e, id);
    if (live) {
        e->lora_scale[id] = 0.0f;
        atomic_store(&e->lora_gone[id], true);
    }
    pthread_mutex_unlock(&e->lora_mu);
    return live ? 0 : KVI_E_INVALID;
}

int kvi_engine_lora_reap(kvi_engine *e)
{
    int n = 0;
    if (!e) return 0;
    pthread_mutex_lock(&e->lora_mu);
    for (int i = 0; i < atomic_load(&e->n_lora); i++)
        if (atomic_load(&e->lora_gone[i]) && e->lora[i] && e->lora[i]->n_users == 0) {
            lora_free(e->lora[i]);
            e->lora[i] = NULL;
            n++;
        }
    pthread_mutex_unlock(&e->lora_mu);
    return n;
}

int kvi_engine_lora_describe(kvi_engine *e, int id, char *name, size_t name_cap, char *path, size_t path_cap,
                             float *scale)
{
    if (!e) return KVI_E_INVALID;
    pthread_mutex_lock(&e->lora_mu);
    const bool live = lora_live(e, id);
    if (live) {
        if (name && name_cap) snprintf(name, name_cap, "%s", kvi_lora_name(e->lora[id]));
        if (path && path_cap) snprintf(path, path_cap, "%s", kvi_lora_path(e->lora[id]));
        if (scale) *scale = e->lora_scale[id];
    }
    pthread_mutex_unlock(&e->lora_mu);
    return live ? 0 : KVI_E_INVALID;
}

int kvi_seq_set_lora_scales(kvi_seq *s, int n, const float *scales)
{
    if (!s || n < 0 || n > kvi_engine_lora_count(s->e) || (n > 0 && !scales)) return KVI_E_INVALID;
    kvi_lora *ad[KVI_LORA_SET_MAX];
    float sc[KVI_LORA_SET_MAX];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (scales[i] == 0.0f) continue;
        if (k == KVI_LORA_SET_MAX || !lora_live(s->e, i)) return KVI_E_INVALID; /* unloaded meanwhile */
        ad[k] = s->e->lora[i];
        sc[k++] = scales[i];
    }
    return kvi_seq_set_lora(s, k, ad, sc);
}

uint64_t kvi_seq_lora_hash(const kvi_seq *s) { return s ? s->lora_hash : 0; }

int32_t kvi_seq_reuse_prefix(kvi_seq *s, const int32_t *tokens, int32_t n)
{
    if (!s || (n > 0 && !tokens) || n < 0) return KVI_E_INVALID;
    kvi_engine *e = s->e;
    if (s->table.n_pos != 0 || s->table.n_blocks != 0) return KVI_E_INVALID;
    int32_t held = 0;
    if (e->p.prefix_cache && n > 1) {
        /* at least the last token stays to compute; never past the context */
        int32_t n_max = n - 1 < e->p.n_ctx ? n - 1 : e->p.n_ctx;
        held = kv_prefix_match(&e->kv, &s->table, tokens, n_max, NULL);
        if (held < 0) return held;
        int32_t n_ram = 0, n_disk = 0;
        if (e->kv.tier && !e->piped) {
            kv_tier_extend(e->kv.tier, &e->kv, &s->table, tokens, n_max, &n_ram, &n_disk);
            held = s->table.n_pos;
        }
        s->prefix_ram += (uint64_t)n_ram;
        s->prefix_disk += (uint64_t)n_disk;
        e->prefix_ram += (uint64_t)n_ram;
        e->prefix_disk += (uint64_t)n_disk;
    }
    s->prefix_hit += (uint64_t)held;
    s->prefix_miss += (uint64_t)(n - held);
    e->prefix_hit += (uint64_t)held;
    e->prefix_miss += (uint64_t)(n - held);
    if (e->piped && !e->pipe_quiet && e->pipe.l0 == 0) {
        int32_t *msg = malloc((4 + (size_t)n) * sizeof *msg);
        if (!msg) return KVI_E_NOMEM;
        msg[0] = PIPE_OP_REUSE, msg[1] = s->slot, msg[2] = n, msg[3] = held;
        if (n > 0) memcpy(msg + 4, tokens, (size_t)n * sizeof *msg);
        const int rc = engine_pipe_send(e, msg, 4 + (size_t)n);
        free(msg);
        if (rc) return rc;
    }
    return held;
}

int32_t kvi_seq_make_room(kvi_seq *s, int32_t n_needed, kvi_error *err)
{
    if (!s || n_needed < 0) return err_set(err, KVI_E_INVALID, "make_room: bad arguments");
    kvi_engine *e = s->e;
    const int32_t n_pos = s->table.n_pos;
    if ((int64_t)n_pos + n_needed <= e->p.n_ctx) return n_pos;
    if (n_needed > e->p.n_ctx)
        return err_set(err, KVI_E_CONTEXT_FULL,
                       "context_length_exceeded: %d positions needed, the context holds %d", n_needed,
                       e->p.n_ctx);
    const int32_t n_keep = e->policy->select(&e->pp, n_pos, n_needed, s->recv, e->keep, err);
    if (n_keep < 0) return n_keep;
    if (n_keep >= n_pos) return n_pos;
    const kv_rope rope = { e->m->n_rot,      e->m->head_dim,  e->m->n_kv_heads,
                           e->m->rope_theta, e->m->rope_neox, e->m->rope_freqs };
    int rc = kv_policy_apply(&e->kv, &s->table, &rope, e->keep, n_keep, s->recv, err);
    if (rc) return rc;
    if (s->recv) memset(s->recv + n_keep, 0, (size_t)(e->p.n_ctx - n_keep) * sizeof *s->recv);
    s->n_evicted += (uint64_t)(n_pos - n_keep);
    e->n_evicted += (uint64_t)(n_pos - n_keep);
    return n_keep;
}

const int32_t *kvi_seq_tokens(const kvi_seq *s) { return s->table.tokens; }

int32_t kvi_seq_len(const kvi_seq *s) { return s->table.n_pos; }

int kvi_seq_truncate(kvi_seq *s, int32_t n)
{
    if (n < 0) return KVI_E_INVALID;
    /* recurrent layers keep only the state after the last position: a sequence
     * restarts from 0, or keeps all it has */
    if (s->e->kv.n_rlayers && n > 0 && n < s->table.n_pos) return KVI_E_UNSUPPORTED;
    if (n > 0 && n < s->table.n_pos && n < kv_table_rewind_min(&s->e->kv, &s->table)) return KVI_E_INVALID;
    if (n < s->table.n_pos) kv_table_truncate(&s->e->kv, &s->table, n);
    const int32_t msg[3] = { PIPE_OP_TRUNCATE, s->slot, n };
    return engine_pipe_send(s->e, msg, 3);
}

/* ---- batches ---- */

kvi_batch *kvi_batch_create(int32_t n_rows_max)
{
    if (n_rows_max <= 0) return NULL;
    kvi_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->cap = n_rows_max;
    b->seq = malloc((size_t)n_rows_max * sizeof *b->seq);
    b->token = malloc((size_t)n_rows_max * sizeof *b->token);
    b->pos = malloc((size_t)n_rows_max * sizeof *b->pos);
    b->want = malloc((size_t)n_rows_max * sizeof *b->want);
    if (!b->seq || !b->token || !b->pos || !b->want) {
        kvi_batch_free(b);
        return NULL;
    }
    return b;
}

void kvi_batch_free(kvi_batch *b)
{
    if (!b) return;
    free(b->seq);
    free(b->token);
    free(b->pos);
    free(b->want);
    free(b);
}

void kvi_batch_clear(kvi_batch *b) { b->n = 0; }
int32_t kvi_batch_n_rows(const kvi_batch *b) { return b->n; }

int kvi_batch_add(kvi_batch *b, kvi_seq *s, int32_t token, int32_t pos, bool want_logits)
{
    if (b->n >= b->cap || !s) return KVI_E_INVALID;
    const int32_t i = b->n++;
    b->seq[i] = s;
    b->token[i] = token;
    b->pos[i] = pos;
    b->want[i] = want_logits;
    return i;
}

/* ---- the step ---- */

static int grow_logits(const kvi_engine *e, step_flight *f, int32_t n_out, int32_t n_rows, kvi_error *err)
{
    if (n_out > f->logits_cap) {
        float *nl = realloc(f->logits, (size_t)n_out * e->m->n_vocab * sizeof(float));
        if (!nl) return err_set(err, KVI_E_NOMEM, "engine: cannot allocate logits for %d rows", n_out);
        f->logits = nl;
        f->logits_cap = n_out;
    }
    if (n_rows > f->row_logit_cap) {
        int32_t *nr = realloc(f->row_logit, (size_t)n_rows * sizeof *nr);
        if (!nr) return err_set(err, KVI_E_NOMEM, "engine: out of memory");
        f->row_logit = nr;
        f->row_logit_cap = n_rows;
    }
    return 0;
}

/* Phase 1: every row is valid; per sequence, positions are consecutive and
 * start at most at its length. Sets step_first/last/rows of each sequence
 * (stamped with stamp) and *n_out, the rows that want logits. */
static int step_validate(kvi_engine *e, const kvi_batch *b, uint64_t stamp, int32_t *n_out, kvi_error *err)
{
    for (int32_t i = 0; i < b->n; i++) {
        kvi_seq *s = b->seq[i];
        if (s->e != e) return err_set(err, KVI_E_BAD_BATCH, "step: row %d: sequence of another engine", i);
        if (b->token[i] < 0 || b->token[i] >= e->m->n_vocab)
            return err_set(err, KVI_E_BAD_BATCH, "step: row %d: token id %d out of range [0, %d)", i,
                           b->token[i], e->m->n_vocab);
        if (b->pos[i] < 0) return err_set(err, KVI_E_BAD_BATCH, "step: row %d: negative position", i);
        if (b->pos[i] >= e->p.n_ctx)
            return err_set(err, KVI_E_CONTEXT_FULL,
                           "context_length_exceeded: step: row %d: position %d is past the "
                           "context size %d",
                           i, b->pos[i], e->p.n_ctx);
        if (s->step_stamp != stamp) {
            if (e->kv.n_rlayers && b->pos[i] > 0 && b->pos[i] != s->table.n_pos)
                return err_set(
                    err, KVI_E_BAD_BATCH,
                    "step: row %d: position %d: the recurrent layers hold the state after position "
                    "%d only (a sequence continues at its length or restarts at 0)",
                    i, b->pos[i], s->table.n_pos - 1);
            if (b->pos[i] > s->table.n_pos)
                return err_set(err, KVI_E_BAD_BATCH,
                               "step: row %d: position %d leaves a gap (sequence holds %d positions)", i,
                               b->pos[i], s->table.n_pos);
            if (b->pos[i] > 0 && b->pos[i] < s->table.n_pos &&
                b->pos[i] < kv_table_rewind_min(&e->kv, &s->table))
                return err_set(err, KVI_E_BAD_BATCH,
                               "step: row %d: position %d rewrites positions the sliding-window layers "
                               "released (the earliest possible is %d)",
                               i, b->pos[i], kv_table_rewind_min(&e->kv, &s->table));
            s->step_stamp = stamp;
            s->step_first = b->pos[i];
            s->step_rows = 0;
        } else if (b->pos[i] != s->step_last + 1) {
            return err_set(err, KVI_E_BAD_BATCH,
                           "step: row %d: position %d does not follow %d of the same sequence", i, b->pos[i],
                           s->step_last);
        }
        s->step_last = b->pos[i];
        s->step_rows++;
        if (b->want[i]) (*n_out)++;
    }
    return 0;
}

/* A failed step after phase 2 began: the KV transaction rolls back (every table
 * holds its blocks from before again, the copies and new blocks go back to the
 * pool) and no sequence stays marked as joined. */
static void step_rollback(kvi_engine *e, const kvi_batch *b)
{
    kv_txn_rollback(&e->txn);
    for (int32_t i = 0; i < b->n; i++) b->seq[i]->step_stamp = 0;
}

/* The staging slot of sequence s's snapshot in this step (step_snap >= 0). */
static float *snap_slot(const kvi_engine *e, const kvi_seq *s)
{
    return e->snap_stage + (size_t)s->step_snap * (e->kv.state_bytes / sizeof(float));
}

/* Phase 2: every sequence of the batch joins one KV transaction (kv_txn.h):
 * private copies of the shared blocks its rows write, then new blocks. On a
 * failure the transaction rolls back and no sequence has changed; on success it
 * stays open through the forward pass (kvi_step commits or rolls it back) and each
 * row's received-attention target is set. */
static int step_reserve(kvi_engine *e, const kvi_batch *b, kvi_error *err)
{
    if (kv_txn_begin(&e->txn, &e->kv, b->n, b->n) != 0)
        return err_set(err, KVI_E_NOMEM, "engine: out of memory");
    if (e->recv_cap < b->n) {
        float **nr = realloc(e->recv_rows, (size_t)b->n * sizeof *nr);
        if (!nr) return err_set(err, KVI_E_NOMEM, "engine: out of memory");
        e->recv_rows = nr;
        e->recv_cap = b->n;
    }
    const uint64_t stamp = ++e->stamp;
    int32_t n_snap = 0;
    for (int32_t i = 0; i < b->n; i++) {
        kvi_seq *s = b->seq[i];
        if (s->step_stamp == stamp) continue;
        s->step_stamp = stamp;
        int rc = kv_txn_add(&e->txn, &s->table, s->step_first, s->step_last, err);
        if (!rc) rc = kv_table_state_take(&e->kv, &s->table, err);
        if (rc) {
            step_rollback(e, b);
            return rc;
        }
        /* recurrent layers: the state after the last block boundary the step crosses
         * before its last row (what a repeat of a prompt ending here reuses: never its
         * last row), else after its last row when that ends a block (the next chunk,
         * turn or a longer prompt reuses it): a prefix snapshot (kv_cache.h) */
        const int32_t bs = e->p.kv_block_size, inner = s->step_last / bs * bs;
        s->step_snap = -1;
        s->step_bnd = inner >= bs && inner - 1 >= s->step_first ? inner
                      : (s->step_last + 1) % bs == 0            ? s->step_last + 1
                                                                : 0;
        if (e->kv.snap_blocks > 0 && e->p.prefix_cache && s->step_bnd > 0) s->step_snap = n_snap++;
    }
    if (e->kv.n_rlayers && e->snap_rows_cap < b->n) {
        float **nr = realloc(e->snap_rows, (size_t)b->n * sizeof *nr);
        if (!nr) {
            step_rollback(e, b);
            return err_set(err, KVI_E_NOMEM, "engine: out of memory");
        }
        e->snap_rows = nr;
        e->snap_rows_cap = b->n;
    }
    if (n_snap > e->snap_cap) {
        free(e->snap_stage);
        e->snap_cap = 0;
        e->snap_stage = malloc((size_t)n_snap * e->kv.state_bytes);
        if (!e->snap_stage) {
            step_rollback(e, b);
            return err_set(err, KVI_E_NOMEM, "engine: out of memory for %d state snapshots", n_snap);
        }
        e->snap_cap = n_snap;
    }
    for (int32_t i = 0; e->kv.n_rlayers && i < b->n; i++) {
        const kvi_seq *s = b->seq[i];
        e->snap_rows[i] = s->step_snap >= 0 && b->pos[i] == s->step_bnd - 1 ? snap_slot(e, s) : NULL;
    }
    for (int32_t i = 0; i < b->n; i++) {
        kvi_seq *s = b->seq[i];
        e->recv_rows[i] = s->recv && s->step_rows == 1 ? s->recv : NULL;
    }
    return 0;
}

/* Phase 3 of a pipeline stage (engine_pipe.h) for one forward chunk: x from the
 * previous stage, this stage's layers, x to the next stage; the logits from the
 * last stage to the root. */
static int step_run_stage(kvi_engine *e, const fwd_rows *rows)
{
    const engine_pipe_io *io = &e->pipe;
    const bool last = io->l1 == e->m->n_layers;
    float *x = fwd_x(e->fwd); /* [rows->n][dim] */
    const size_t nx = (size_t)rows->n * (size_t)e->m->dim, nl = (size_t)rows->n_out * (size_t)e->m->n_vocab;
    engine_pipe_stats *st = &e->pipe_st;
    int rc = 0;
    double t = kvi_time_ms();
    if (io->l0 > 0) rc = io->recv_x(io->ctx, x, nx);
    double t1 = kvi_time_ms();
    st->wait_ms += t1 - t;
    if (!rc) rc = fwd_run_layers(e->fwd, e->pool, &e->kv, rows, io->l0, io->l1, last);
    t = kvi_time_ms();
    st->compute_ms += t - t1;
    if (!rc && !last) rc = io->send_x(io->ctx, x, nx);
    if (!rc && !last) st->bytes_sent += nx * sizeof *x;
    if (!rc && nl > 0 && io->l0 == 0) rc = io->post_logits(io->ctx, rows->logits, nl);
    if (!rc && nl > 0 && last) rc = io->send_logits(io->ctx, rows->logits, nl);
    if (!rc && nl > 0 && last) st->bytes_sent += nl * sizeof *rows->logits;
    st->wait_ms += kvi_time_ms() - t;
    st->chunks += !rc;
    st->rows += rc ? 0 : (uint64_t)rows->n;
    return rc;
}

/* Phase 3: the forward passes, n_batch_max rows at a time, into flight f;
 * f->row_logit maps each batch row to its logits row (or -1). 0, or the pass's
 * error code. A pipeline's root does not wait for a chunk's logits before its next
 * chunk (while a later stage computes chunk c, the earlier ones compute chunk
 * c + 1), nor at the end: the receives are posted (f->n_posted floats) and
 * kvi_step_finish completes them. */
static int step_run(kvi_engine *e, const kvi_batch *b, step_flight *f)
{
    int32_t o = 0;
    int rc = 0;
    f->n_posted = 0;
    f->wrc = 0;
    for (int32_t start = 0; !rc && start < b->n; start += e->p.n_batch_max) {
        const int32_t n = (b->n - start) < e->p.n_batch_max ? (b->n - start) : e->p.n_batch_max;
        int32_t n_out_chunk = 0;
        bool any_lora = false;
        for (int32_t i = 0; i < n; i++) {
            e->tables[i] = &b->seq[start + i]->table;
            e->lora_rows[i] = b->seq[start + i]->lora.n ? &b->seq[start + i]->lora : NULL;
            any_lora |= e->lora_rows[i] != NULL;
            f->row_logit[start + i] = -1;
            if (b->want[start + i]) {
                e->out_rows[n_out_chunk++] = i;
                f->row_logit[start + i] = o + n_out_chunk - 1;
            }
        }
        const fwd_rows rows = {
            .n = n,
            .tokens = b->token + start,
            .pos = b->pos + start,
            .tables = e->tables,
            .n_out = n_out_chunk,
            .out_rows = e->out_rows,
            .logits = f->logits + (size_t)o * e->m->n_vocab,
            .recv = e->recv_rows + start,
            .snap = e->kv.n_rlayers ? e->snap_rows + start : NULL,
            .lora = any_lora ? e->lora_rows : NULL,
        };
        if (e->piped) {
            rc = step_run_stage(e, &rows);
            if (!rc && e->pipe.l0 == 0) f->n_posted += (size_t)n_out_chunk * (size_t)e->m->n_vocab;
        } else {
            rc = fwd_run(e->fwd, e->pool, &e->kv, &rows);
        }
        o += n_out_chunk;
    }
    return rc;
}

/* A pipeline's root: completes flight f's posted logits receives (the older
 * flights' first: the transport completes them in order). */
static int flight_wait(kvi_engine *e, step_flight *f)
{
    if (f->n_posted == 0) return f->wrc;
    const double t = kvi_time_ms();
    f->wrc = e->pipe.wait_logits(e->pipe.ctx, f->n_posted);
    f->n_posted = 0;
    const double ms = kvi_time_ms() - t;
    e->pipe_st.wait_ms += ms;
    e->forward_ms += ms;
    return f->wrc;
}

/* Phase 4: each sequence now holds positions 0..last, with their tokens; blocks
 * that became full join the prefix index. */
static void step_commit(kvi_engine *e, const kvi_batch *b)
{
    const int bs = e->p.kv_block_size;
    for (int32_t i = 0; i < b->n; i++) b->seq[i]->table.tokens[b->pos[i]] = b->token[i];
    for (int32_t i = 0; i < b->n; i++) {
        kvi_seq *s = b->seq[i];
        if (s->step_stamp == 0) continue;
        s->step_stamp = 0;
        kv_table_truncate(&e->kv, &s->table, s->step_last + 1);
        s->table.n_pos = s->step_last + 1;
        if (e->p.prefix_cache) kv_prefix_index_table(&e->kv, &s->table, s->step_first / bs);
        if (e->kv.n_rlayers && s->step_snap >= 0) { /* the snapshot joins its block (kv_cache.h) */
            const int32_t b = s->table.blocks[s->step_bnd / bs - 1];
            if (kv_snap_put(&e->kv, b, snap_slot(e, s)) == 0) {
                /* a table keeps its two newest snapshots: the older one goes */
                if (s->table.snap_at[1] > 0 && s->table.snap_at[1] - 1 != b)
                    kv_snap_drop(&e->kv, s->table.snap_at[1] - 1);
                s->table.snap_at[1] = s->table.snap_at[0];
                s->table.snap_at[0] = 1 + b;
            }
        }
        kv_table_window_release(&e->kv, &s->table);
    }
}

/* FNV-1a of the block tables of the batch's sequences (slot, length, block ids),
 * each once, in batch order: equal on every stage while their KV states agree. */
static uint64_t step_tables_hash(const kvi_batch *b)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < b->n; i++) {
        const kvi_seq *s = b->seq[i];
        if (b->pos[i] != s->step_first) continue; /* not the sequence's first row */
        const int32_t head[2] = { s->slot, s->table.n_blocks };
        h = engine_fnv1a(h, head, sizeof head);
        h = engine_fnv1a(h, s->table.blocks, (size_t)s->table.n_blocks * sizeof *s->table.blocks);
    }
    return h;
}

/* Between phases 2 and 3 of a pipeline stage: the root sends the batch (with its
 * tables hash) to the other stages; another stage checks its tables against the
 * root's. */
static int step_pipe_sync(kvi_engine *e, const kvi_batch *b, kvi_error *err)
{
    const uint64_t h = step_tables_hash(b);
    if (e->pipe.l0 > 0) {
        if (h != e->pipe_hash)
            return err_set(err, KVI_E_INVALID,
                           "pipeline: this stage's KV block tables differ from the root's (layers %d-%d)",
                           e->pipe.l0, e->pipe.l1 - 1);
        return 0;
    }
    int32_t *msg = malloc((4 + 4 * (size_t)b->n) * sizeof *msg);
    if (!msg) return err_set(err, KVI_E_NOMEM, "engine: out of memory");
    msg[0] = PIPE_OP_STEP, msg[1] = b->n, msg[2] = (int32_t)(uint32_t)h,
    msg[3] = (int32_t)(uint32_t)(h >> 32);
    for (int32_t i = 0; i < b->n; i++) {
        int32_t *r = msg + 4 + 4 * (size_t)i;
        r[0] = b->seq[i]->slot, r[1] = b->token[i], r[2] = b->pos[i], r[3] = b->want[i];
    }
    const int rc = e->pipe.send_op(e->pipe.ctx, msg, 4 + 4 * (size_t)b->n);
    free(msg);
    return rc ? err_set(err, rc, "pipeline: cannot send the batch to the other stages") : 0;
}

int kvi_step_depth(const kvi_engine *e)
{
    if (!e->piped || e->pipe.l0 > 0 || e->pipe.n_stages < 2) return 1;
    return e->pipe.n_stages < ENGINE_DEPTH_MAX ? e->pipe.n_stages : ENGINE_DEPTH_MAX;
}

/* The lowest flight slot neither in flight nor the last finished (one exists:
 * n_flight + 1 < ENGINE_FLIGHTS). */
static int flight_free_slot(const kvi_engine *e)
{
    for (int slot = 0;; slot++) {
        bool used = slot == e->fl_cur;
        for (int k = 0; k < e->n_flight && !used; k++) used = e->fl_order[k] == slot;
        if (!used) return slot;
    }
}

int kvi_step_launch(kvi_engine *e, kvi_batch *b, kvi_error *err)
{
    const double t0 = kvi_time_ms();
    if (!b || b->n == 0) return err_set(err, KVI_E_BAD_BATCH, "step: empty batch");
    if (kvi_model_is_encoder(e->m))
        return err_set(err, KVI_E_UNSUPPORTED,
                       "step: %s is an encoder: it gives embeddings (kvi_embed), no logits", e->m->arch);
    if (e->pipe_broken)
        return err_set(err, KVI_E_IO,
                       "pipeline: an earlier forward pass failed on this stage after its batch was sent; "
                       "the other stages are out of step, the pipeline cannot go on");
    if (e->n_flight >= ENGINE_DEPTH_MAX)
        return err_set(err, KVI_E_INVALID,
                       "step: %d launched steps are in flight, the most this engine keeps", e->n_flight);
    const int slot = flight_free_slot(e);
    step_flight *f = &e->fl[slot];
    const uint64_t stamp = ++e->stamp;
    int32_t n_out = 0;
    int rc = step_validate(e, b, stamp, &n_out, err);
    if (rc) return rc;
    rc = grow_logits(e, f, n_out > 0 ? n_out : 1, b->n, err);
    if (rc) return rc;
    rc = step_reserve(e, b, err);
    if (rc) return rc;
    if (e->piped) {
        rc = step_pipe_sync(e, b, err);
        if (rc) {
            step_rollback(e, b);
            return rc;
        }
    }
    rc = step_run(e, b, f);
    if (rc) {
        e->pipe_broken = e->piped && e->pipe.l0 == 0;
        /* a pipeline's root completes what it posted (the steps in flight keep
         * their results for kvi_step_finish) */
        for (int k = 0; k < e->n_flight; k++) (void)flight_wait(e, &e->fl[e->fl_order[k]]);
        (void)flight_wait(e, f);
        /* positions below a sequence's old length that the batch rewrote, and a q4
         * key tail, keep what the failed pass wrote */
        step_rollback(e, b);
        if (e->kv.n_rlayers) { /* a recurrent state cannot be rolled back: restart */
            for (int32_t i = 0; i < b->n; i++) kv_table_truncate(&e->kv, &b->seq[i]->table, 0);
            return err_set(err, rc,
                           "step: the forward pass failed (%s); the recurrent state of the batch's sequences "
                           "is lost, they restart at position 0",
                           kvi_strerror(rc));
        }
        const char *why = e->piped && e->pipe.failure ? e->pipe.failure(e->pipe.ctx) : NULL;
        if (why) return err_set(err, rc, "step: %s", why);
        return err_set(err, rc, "step: the forward pass failed (%s)", kvi_strerror(rc));
    }
    /* the root's layers are done: the later stages apply this step before any
     * later op, so its KV changes are committed now */
    kv_txn_commit(&e->txn);
    step_commit(e, b);
    f->n_rows = b->n;
    e->fl_order[e->n_flight++] = slot;
    e->n_steps++;
    e->n_rows += (uint64_t)b->n;
    e->forward_ms += kvi_time_ms() - t0;
    return 0;
}

int kvi_step_finish(kvi_engine *e, kvi_error *err)
{
    if (e->n_flight == 0) return err_set(err, KVI_E_INVALID, "step: no launched step to finish");
    const int i = e->fl_order[0];
    e->n_flight--;
    memmove(e->fl_order, e->fl_order + 1, (size_t)e->n_flight * sizeof *e->fl_order);
    e->fl_cur = i;
    const int rc = flight_wait(e, &e->fl[i]);
    if (!rc) return 0;
    e->fl_cur = -1;
    const char *why = e->pipe.failure ? e->pipe.failure(e->pipe.ctx) : NULL;
    if (why) return err_set(err, rc, "step: %s", why);
    return err_set(err, rc, "step: the logits of the later stages did not arrive (%s)", kvi_strerror(rc));
}

int kvi_step(kvi_engine *e, kvi_batch *b, kvi_error *err)
{
    if (e->n_flight > 0)
        return err_set(err, KVI_E_INVALID, "step: %d launched steps are not finished", e->n_flight);
    e->fl_cur = -1;
    const int rc = kvi_step_launch(e, b, err);
    return rc ? rc : kvi_step_finish(e, err);
}

const float *kvi_logits(const kvi_engine *e, int32_t row)
{
    if (e->fl_cur < 0) return NULL;
    const step_flight *f = &e->fl[e->fl_cur];
    if (row < 0 || row >= f->n_rows) return NULL;
    const int32_t o = f->row_logit[row];
    return o < 0 ? NULL : f->logits + (size_t)o * e->m->n_vocab;
}

kv_pool *engine_kv_pool(kvi_engine *e) { return &e->kv; }

tpool *engine_pool(kvi_engine *e) { return e->pool; }

uint64_t engine_fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int engine_pipe_send(kvi_engine *e, const int32_t *msg, size_t n)
{
    if (!e->piped || e->pipe_quiet || e->pipe.l0 > 0) return 0;
    return e->pipe.send_op(e->pipe.ctx, msg, n);
}

/* A stage's KV pool (no sequence exists yet): only layers [l0, l1) hold memory,
 * and the pool has as many block ids as the whole model's, so that the root's
 * block decisions mean the same on every stage. */
static int pipe_kv_init(kvi_engine *e, int l0, int l1, kvi_error *err)
{
    const kvi_model *m = e->m;
    const int32_t nb = e->kv.n_blocks_max;
    const size_t budget = (size_t)nb * (size_t)(l1 - l0) * e->kv.layer_bytes;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].kv_share || m->ple_dim) /* a stage would need another stage's K/V or embeddings */
            return err_set(err, KVI_E_UNSUPPORTED,
                           "pipeline: a model with per-layer inputs or shared K/V (gemma4 E2B/E4B) "
                           "cannot be split into stages");
    int *win = malloc((size_t)m->n_layers * sizeof *win); /* [n_layers] 0 or KV_LAYER_ABSENT */
    if (!win) return err_set(err, KVI_E_NOMEM, "engine: out of memory");
    for (int l = 0; l < m->n_layers; l++) win[l] = l >= l0 && l < l1 ? 0 : KV_LAYER_ABSENT;
    kv_pool_free(&e->kv);
    int rc = kv_pool_init_layers(&e->kv, m->n_layers, win, ENGINE_WIN_SLACK, model_kv_dim(m),
                                 e->p.kv_block_size, e->p.kv_type_k, e->p.kv_type_v, budget, err);
    free(win);
    if (!rc && e->kv.n_blocks_max != nb)
        rc = err_set(err, KVI_E_INVALID, "pipeline: the stage's KV pool has %d blocks, the model's %d",
                     e->kv.n_blocks_max, nb);
    return rc;
}

int engine_pipe_attach(kvi_engine *e, const engine_pipe_io *io, kvi_error *err)
{
    if (io->l0 < 0 || io->l1 <= io->l0 || io->l1 > e->m->n_layers)
        return err_set(err, KVI_E_INVALID, "pipeline: layers %d-%d are not a range of the model's %d", io->l0,
                       io->l1 - 1, e->m->n_layers);
    if (strcmp(e->p.ctx_policy, "error") != 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "pipeline: context policy '%s' is not supported across stages yet (use error)",
                       e->p.ctx_policy);
    if (e->m->n_recurrent > 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "pipeline: models with recurrent layers are not supported yet");
    if (e->m->idx_heads > 0)
        return err_set(
            err, KVI_E_UNSUPPORTED,
            "pipeline: sparse attention's indexer cache (deepseek32) is not supported across stages yet");
    for (int i = 0; i < e->p.n_seq_max; i++)
        if (e->slots[i]) return err_set(err, KVI_E_INVALID, "pipeline: attach before any sequence exists");
    /* window layers: the budget, not the block count alone, bounds their parts */
    if (e->kv.n_wlayers == 0) {
        const int rc = pipe_kv_init(e, io->l0, io->l1, err);
        if (rc) return rc;
    }
    e->pipe = *io;
    e->piped = true;
    return 0;
}

bool engine_pipe_range(const kvi_engine *e, int *l0, int *l1)
{
    if (!e->piped) return false;
    *l0 = e->pipe.l0;
    *l1 = e->pipe.l1;
    return true;
}

kvi_seq *engine_seq_at(kvi_engine *e, int32_t slot)
{
    return slot >= 0 && slot < e->p.n_seq_max ? e->slots[slot] : NULL;
}
int32_t engine_seq_slot(const kvi_seq *s) { return s->slot; }
void engine_pipe_expect(kvi_engine *e, uint64_t tables_hash) { e->pipe_hash = tables_hash; }
kv_table *engine_seq_table(kvi_seq *s) { return &s->table; }
kvi_engine *engine_seq_engine(const kvi_seq *s) { return s->e; }
bool engine_prefix_cache_on(const kvi_engine *e) { return e->p.prefix_cache; }
void kvi_engine_parallel_for(kvi_engine *e, void (*fn)(void *ctx, int ith, int nth), void *ctx)
{
    tpool_run(e->pool, fn, ctx);
}
const float *engine_seq_recv(const kvi_seq *s) { return s->recv; }

void kvi_stats_get(const kvi_engine *e, const kvi_seq *s, kvi_stats *out)
{
    memset(out, 0, sizeof *out);
    const kv_pool *kv = &e->kv;
    out->kv_bytes_per_token = kv_pool_bytes_per_token(kv);
    out->kv_block_size = kv->block_size;
    out->kv_blocks_total = kv->n_blocks_max;
    out->kv_bytes_budget = kv->budget;
    out->kv_bytes_allocated = kv_pool_bytes_allocated(kv);
    out->kv_bytes_block = kv->block_bytes;
    out->kv_blocks_cached = kv->n_cached;
    out->kv_blocks_free = kv->n_free;
    out->n_cow = kv->n_cow;
    out->n_lru_evicted = kv->n_lru_evicted;
    out->kv_bytes_tail = kv_pool_bytes_tails(kv);
    out->n_steps = e->n_steps;
    out->n_rows = e->n_rows;
    out->forward_ms = e->forward_ms;
    out->kv_bytes_per_token_global = kv->gblock_bytes / (size_t)kv->block_size;
    out->kv_bytes_per_token_window = kv->wblock_bytes / (size_t)kv->block_size;
    out->kv_bytes_per_token_indexer = kv_pool_bytes_per_token_indexer(kv);
    out->kv_n_layers_window = kv->n_wlayers;
    out->kv_window = kv->win_max;
    out->kv_n_layers_recurrent = kv->n_rlayers;
    out->kv_bytes_state_seq = kv->state_bytes;
    if (!s) {
        tpool_stats ts;
        tpool_get_stats(e->pool, &ts);
        out->pool_runs_parallel = ts.runs_parallel;
        out->pool_runs_serial = ts.runs_serial;
        out->pool_to_serial = ts.to_serial;
    }
    if (s) {
        out->kv_blocks_used = s->table.n_blocks;
        /* window layers hold only the blocks from the table's cursor on */
        out->kv_wparts_held = kv->n_wlayers ? s->table.n_blocks - s->table.wdrop : 0;
        out->kv_wparts_released = kv->n_wlayers ? (uint64_t)s->table.wdrop : 0;
        out->kv_bytes_global = (size_t)s->table.n_blocks * kv->gblock_bytes;
        out->kv_bytes_window = (size_t)out->kv_wparts_held * kv->wblock_bytes;
        out->kv_bytes = out->kv_bytes_global + out->kv_bytes_window;
        out->n_tokens = s->table.n_pos;
        for (int32_t i = 0; i < s->table.n_blocks; i++)
            if (kv->refcount[s->table.blocks[i]] > 1) out->kv_blocks_shared++;
        out->prefix_hit_tokens = s->prefix_hit;
        out->prefix_ram_tokens = s->prefix_ram;
        out->prefix_disk_tokens = s->prefix_disk;
        out->prefix_miss_tokens = s->prefix_miss;
        out->n_evicted = s->n_evicted;
        out->kv_bytes_tail = s->table.tail ? kv->tail_bytes : 0;
        out->kv_bytes_state = s->table.state ? kv->state_bytes : 0;
    } else {
        out->kv_bytes_state = kv_pool_bytes_states(kv);
        out->kv_state_slots = kv->n_state_slots;
        out->kv_snapshots = kv->n_snaps;
        out->kv_blocks_snapshot = kv->n_snaps * kv->snap_blocks;
        out->kv_snapshots_taken = kv->n_snaps_taken;
        out->kv_snapshots_restored = kv->n_snaps_restored;
        out->kv_snapshots_evicted = kv->n_snaps_evicted;
        out->kv_blocks_used = kv->n_used;
        out->kv_wparts_held = kv->n_walloc - kv->n_wfree;
        out->kv_wparts_released = kv->n_wreleased;
        out->kv_bytes_global = (size_t)kv->n_used * kv->gblock_bytes;
        out->kv_bytes_window = (size_t)out->kv_wparts_held * kv->wblock_bytes;
        out->kv_bytes = out->kv_bytes_global + out->kv_bytes_window;
        for (int i = 0; i < e->p.n_seq_max; i++)
            if (e->slots[i]) out->n_tokens += e->slots[i]->table.n_pos;
        for (int32_t b = 0; b < kv->n_alloc; b++)
            if (kv->refcount[b] > 1) out->kv_blocks_shared++;
        out->prefix_hit_tokens = e->prefix_hit;
        out->prefix_ram_tokens = e->prefix_ram;
        out->prefix_disk_tokens = e->prefix_disk;
        kvi_tier_stats ts[2];
        kv_tier_get_stats(e->kv.tier, ts);
        out->kv_tier_ram = ts[0];
        out->kv_tier_disk = ts[1];
        out->prefix_miss_tokens = e->prefix_miss;
        out->n_evicted = e->n_evicted;
    }
}

int kvi_engine_kv_flush(kvi_engine *e, kvi_error *err)
{
    if (!e) return err_set(err, KVI_E_INVALID, "kv flush: no engine");
    return kv_tier_flush(e->kv.tier, &e->kv, err);
}

void engine_pipe_get_stats(const kvi_engine *e, engine_pipe_stats *st)
{
    if (e->piped)
        *st = e->pipe_st;
    else
        memset(st, 0, sizeof *st);
}
