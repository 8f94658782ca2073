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
 */
#include "kvinfer.h"

#include "error.h"
#include "forward.h"
#include "kv_cache.h"
#include "model.h"
#include "quant.h"
#include "threads.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kvi_seq {
    kvi_engine *e;
    kv_table table;
    int slot;
    /* per-step bookkeeping, valid only inside kvi_step */
    uint64_t step_stamp;
    int32_t step_first, step_last, step_blocks_before;
};

struct kvi_batch {
    int32_t cap, n;
    kvi_seq **seq;     /* [cap] */
    int32_t *token;    /* [cap] */
    int32_t *pos;      /* [cap] */
    bool *want;        /* [cap] */
};

struct kvi_engine {
    kvi_model *m;
    kvi_engine_params p;
    kvi_pool *pool;
    kv_pool kv;
    fwd_ctx *fwd;
    kvi_seq **slots;           /* [n_seq_max] */
    uint64_t stamp;
    /* per-step arrays, [n_batch_max] */
    const kv_table **tables;
    int32_t *out_rows;
    /* logits of the last step */
    float *logits;             /* [logits_cap][n_vocab] */
    int32_t logits_cap;
    int32_t *row_logit;        /* [row_logit_cap] batch row -> logits row or -1 */
    int32_t row_logit_cap;
    int32_t n_rows_last;
    /* statistics */
    uint64_t n_steps, n_rows;
    double forward_ms;
};

double kvi_time_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

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
}

void kvi_engine_free(kvi_engine *e)
{
    if (!e) return;
    if (e->slots) {
        for (int i = 0; i < e->p.n_seq_max; i++)
            if (e->slots[i]) kvi_seq_free(e->slots[i]);
        free(e->slots);
    }
    fwd_free(e->fwd);
    kv_pool_free(&e->kv);
    kvi_pool_free(e->pool);
    free(e->tables);
    free(e->out_rows);
    free(e->logits);
    free(e->row_logit);
    free(e);
}

kvi_engine *kvi_engine_create(kvi_model *m, const kvi_engine_params *params, kvi_error *err)
{
    kvi_engine_params p;
    if (params) p = *params;
    else kvi_engine_params_default(&p);
    if (!m || !m->has_weights) {
        kvi_err_set(err, KVI_E_INVALID, "engine: the model has no weights (vocabulary-only file?)");
        return NULL;
    }
    if (p.n_ctx <= 0) p.n_ctx = m->n_ctx_train > 0 ? m->n_ctx_train : 2048;
    if (p.kv_block_size <= 0) p.kv_block_size = 16;
    if (p.n_seq_max <= 0) p.n_seq_max = 1;
    if (p.n_batch_max <= 0) p.n_batch_max = 512;
    if (p.n_threads <= 0) p.n_threads = kvi_n_cores();
    if (p.kv_block_size > 4096 || p.n_ctx > (1 << 24) || p.n_seq_max > (1 << 16) ||
        p.n_batch_max > (1 << 20) || p.n_threads > 1024) {
        kvi_err_set(err, KVI_E_INVALID,
                    "engine: parameter out of range (ctx %d, block %d, seqs %d, batch %d, threads %d)",
                    p.n_ctx, p.kv_block_size, p.n_seq_max, p.n_batch_max, p.n_threads);
        return NULL;
    }
    if (p.kv_type_k != KVI_TYPE_F32 && p.kv_type_k != KVI_TYPE_F16) {
        kvi_err_set(err, KVI_E_UNSUPPORTED, "engine: KV key type %s is not supported (f32, f16)",
                    kvi_type_name(p.kv_type_k) ? kvi_type_name(p.kv_type_k) : "?");
        return NULL;
    }
    if (p.kv_type_v != KVI_TYPE_F32 && p.kv_type_v != KVI_TYPE_F16) {
        kvi_err_set(err, KVI_E_UNSUPPORTED, "engine: KV value type %s is not supported (f32, f16)",
                    kvi_type_name(p.kv_type_v) ? kvi_type_name(p.kv_type_v) : "?");
        return NULL;
    }

    kvi_engine *e = calloc(1, sizeof *e);
    if (!e) {
        kvi_err_set(err, KVI_E_NOMEM, "engine: out of memory");
        return NULL;
    }
    e->m = m;
    e->p = p;
    const int kv_dim = m->n_kv_heads * m->head_dim;
    if (p.kv_budget_bytes == 0) {
        const size_t blocks_per_seq = ((size_t)p.n_ctx + p.kv_block_size - 1) / p.kv_block_size;
        const size_t bpt = (size_t)m->n_layers *
                           (kvi_row_bytes(p.kv_type_k, kv_dim) + kvi_row_bytes(p.kv_type_v, kv_dim));
        e->p.kv_budget_bytes = blocks_per_seq * p.n_seq_max * p.kv_block_size * bpt;
    }
    if (kv_pool_init(&e->kv, m->n_layers, kv_dim, p.kv_block_size, p.kv_type_k, p.kv_type_v,
                     e->p.kv_budget_bytes, err) != 0)
        goto fail;
    e->pool = kvi_pool_create(p.n_threads);
    e->slots = calloc((size_t)p.n_seq_max, sizeof *e->slots);
    e->tables = malloc((size_t)p.n_batch_max * sizeof *e->tables);
    e->out_rows = malloc((size_t)p.n_batch_max * sizeof *e->out_rows);
    if (!e->pool || !e->slots || !e->tables || !e->out_rows) {
        kvi_err_set(err, KVI_E_NOMEM, "engine: out of memory");
        goto fail;
    }
    e->fwd = fwd_create(m, p.n_batch_max, kvi_pool_size(e->pool), p.kv_block_size, err);
    if (!e->fwd) goto fail;
    return e;
fail:
    kvi_engine_free(e);
    return NULL;
}

const kvi_model *kvi_engine_model(const kvi_engine *e) { return e->m; }
int kvi_engine_n_ctx(const kvi_engine *e) { return e->p.n_ctx; }

kvi_seq *kvi_seq_create(kvi_engine *e)
{
    for (int i = 0; i < e->p.n_seq_max; i++) {
        if (!e->slots[i]) {
            kvi_seq *s = calloc(1, sizeof *s);
            if (!s) return NULL;
            s->e = e;
            s->slot = i;
            e->slots[i] = s;
            return s;
        }
    }
    return NULL;
}

void kvi_seq_free(kvi_seq *s)
{
    if (!s) return;
    kv_table_release(&s->e->kv, &s->table);
    s->e->slots[s->slot] = NULL;
    free(s);
}

int32_t kvi_seq_len(const kvi_seq *s) { return s->table.n_pos; }

int kvi_seq_truncate(kvi_seq *s, int32_t n)
{
    if (n < 0) return KVI_E_INVALID;
    if (n < s->table.n_pos) kv_table_truncate(&s->e->kv, &s->table, n);
    return 0;
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

static int grow_logits(kvi_engine *e, int32_t n_out, int32_t n_rows, kvi_error *err)
{
    if (n_out > e->logits_cap) {
        float *nl = realloc(e->logits, (size_t)n_out * e->m->n_vocab * sizeof(float));
        if (!nl) return kvi_err_set(err, KVI_E_NOMEM, "engine: cannot allocate logits for %d rows", n_out);
        e->logits = nl;
        e->logits_cap = n_out;
    }
    if (n_rows > e->row_logit_cap) {
        int32_t *nr = realloc(e->row_logit, (size_t)n_rows * sizeof *nr);
        if (!nr) return kvi_err_set(err, KVI_E_NOMEM, "engine: out of memory");
        e->row_logit = nr;
        e->row_logit_cap = n_rows;
    }
    return 0;
}

int kvi_step(kvi_engine *e, kvi_batch *b, kvi_error *err)
{
    const double t0 = kvi_time_ms();
    e->n_rows_last = 0;
    if (!b || b->n == 0) return kvi_err_set(err, KVI_E_BAD_BATCH, "step: empty batch");
    const uint64_t stamp = ++e->stamp;
    int32_t n_out = 0;

    /* 1. validate every row; per sequence, positions must be consecutive */
    for (int32_t i = 0; i < b->n; i++) {
        kvi_seq *s = b->seq[i];
        if (s->e != e) return kvi_err_set(err, KVI_E_BAD_BATCH, "step: row %d: sequence of another engine", i);
        if (b->token[i] < 0 || b->token[i] >= e->m->n_vocab)
            return kvi_err_set(err, KVI_E_BAD_BATCH, "step: row %d: token id %d out of range [0, %d)", i,
                               b->token[i], e->m->n_vocab);
        if (b->pos[i] < 0) return kvi_err_set(err, KVI_E_BAD_BATCH, "step: row %d: negative position", i);
        if (b->pos[i] >= e->p.n_ctx)
            return kvi_err_set(err, KVI_E_CONTEXT_FULL,
                               "step: row %d: position %d is past the context size %d", i, b->pos[i],
                               e->p.n_ctx);
        if (s->step_stamp != stamp) {
            if (b->pos[i] > s->table.n_pos)
                return kvi_err_set(err, KVI_E_BAD_BATCH,
                                   "step: row %d: position %d leaves a gap (sequence holds %d positions)",
                                   i, b->pos[i], s->table.n_pos);
            s->step_stamp = stamp;
            s->step_first = b->pos[i];
        } else if (b->pos[i] != s->step_last + 1) {
            return kvi_err_set(err, KVI_E_BAD_BATCH,
                               "step: row %d: position %d does not follow %d of the same sequence", i,
                               b->pos[i], s->step_last);
        }
        s->step_last = b->pos[i];
        if (b->want[i]) n_out++;
    }
    int rc = grow_logits(e, n_out > 0 ? n_out : 1, b->n, err);
    if (rc) return rc;

    /* 2. reserve blocks for every sequence; undo all on failure */
    ++e->stamp;
    for (int32_t i = 0; i < b->n; i++) {
        kvi_seq *s = b->seq[i];
        if (s->step_stamp == e->stamp) continue;
        s->step_stamp = e->stamp;
        s->step_blocks_before = s->table.n_blocks;
        rc = kv_table_reserve(&e->kv, &s->table, s->step_last + 1, err);
        if (rc) {
            for (int32_t j = 0; j < i; j++) {
                kvi_seq *u = b->seq[j];
                if (u->step_stamp != e->stamp || u == s) continue;
                u->step_stamp = 0;
                kv_table_truncate(&e->kv, &u->table,
                                  u->table.n_pos < u->step_blocks_before * e->p.kv_block_size
                                      ? u->table.n_pos
                                      : u->step_blocks_before * e->p.kv_block_size);
            }
            return rc;
        }
    }

    /* 3. the forward passes, n_batch_max rows at a time */
    int32_t o = 0;
    for (int32_t start = 0; start < b->n; start += e->p.n_batch_max) {
        const int32_t n = (b->n - start) < e->p.n_batch_max ? (b->n - start) : e->p.n_batch_max;
        int32_t n_out_chunk = 0;
        for (int32_t i = 0; i < n; i++) {
            e->tables[i] = &b->seq[start + i]->table;
            e->row_logit[start + i] = -1;
            if (b->want[start + i]) {
                e->out_rows[n_out_chunk++] = i;
                e->row_logit[start + i] = o + n_out_chunk - 1;
            }
        }
        const fwd_rows rows = {
            .n = n, .tokens = b->token + start, .pos = b->pos + start, .tables = e->tables,
            .n_out = n_out_chunk, .out_rows = e->out_rows,
            .logits = e->logits + (size_t)o * e->m->n_vocab,
        };
        fwd_run(e->fwd, e->pool, &e->kv, &rows);
        o += n_out_chunk;
    }

    /* 4. commit: each sequence now holds positions 0..last */
    for (int32_t i = 0; i < b->n; i++) {
        kvi_seq *s = b->seq[i];
        if (s->step_stamp == 0) continue;
        s->step_stamp = 0;
        kv_table_truncate(&e->kv, &s->table, s->step_last + 1);
        s->table.n_pos = s->step_last + 1;
    }
    e->n_rows_last = b->n;
    e->n_steps++;
    e->n_rows += (uint64_t)b->n;
    e->forward_ms += kvi_time_ms() - t0;
    return 0;
}

const float *kvi_logits(const kvi_engine *e, int32_t row)
{
    if (row < 0 || row >= e->n_rows_last) return NULL;
    const int32_t o = e->row_logit[row];
    return o < 0 ? NULL : e->logits + (size_t)o * e->m->n_vocab;
}

void kvi_stats_get(const kvi_engine *e, const kvi_seq *s, kvi_stats *out)
{
    memset(out, 0, sizeof *out);
    out->kv_bytes_per_token = kv_pool_bytes_per_token(&e->kv);
    out->kv_block_size = e->kv.block_size;
    out->kv_blocks_total = e->kv.n_blocks_max;
    out->kv_bytes_budget = (size_t)e->kv.n_blocks_max * e->kv.block_bytes;
    out->kv_bytes_allocated = kv_pool_bytes_allocated(&e->kv);
    out->n_steps = e->n_steps;
    out->n_rows = e->n_rows;
    out->forward_ms = e->forward_ms;
    if (s) {
        out->kv_blocks_used = s->table.n_blocks;
        out->kv_bytes = (size_t)s->table.n_blocks * e->kv.block_bytes;
        out->n_tokens = s->table.n_pos;
    } else {
        out->kv_blocks_used = e->kv.n_used;
        out->kv_bytes = (size_t)e->kv.n_used * e->kv.block_bytes;
        for (int i = 0; i < e->p.n_seq_max; i++)
            if (e->slots[i]) out->n_tokens += e->slots[i]->table.n_pos;
    }
}
