/*
 * pipeline_plan.c — which layers each pipeline stage holds, and the model hash
 * every rank compares at start-up.
 *
 * Invariants of a plan (pipeline.h): n stages, each a non-empty range of layers,
 * contiguous and in order, together every layer exactly once. A plan depends only
 * on the model's tensor table and the spec, so every rank computes the same one
 * from the same file (the handshake checks it).
 *
 * Balance: a stage's cost is the bytes of its tensors (what it streams per
 * decode step and holds): blk.L.* for its layers, token_embd on stage 0, the
 * output norm and head (output, or token_embd when tied) on the last. The split
 * minimises the largest stage's bytes (dynamic programme over prefixes, ties
 * to the earliest boundary).
 */
#include "pipeline/pipeline.h"

#include "base/error.h"
#include "formats/gguf.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t pipe_model_hash(const kvi_model *m) { return m->gguf ? gguf_model_hash(m->gguf, 0) : 0; }

/* Bytes of each layer's tensors (blk.L.*) into layer [n_layers], and of the
 * embedding, output norm and head into *embd, *head. */
static void layer_bytes(const gguf_ctx *g, int n_layers, size_t *layer, size_t *embd, size_t *head)
{
    bool tied = true;
    memset(layer, 0, (size_t)n_layers * sizeof *layer);
    *embd = *head = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int l, end = 0;
        if (sscanf(t->name, "blk.%d.%n", &l, &end) == 1 && end > 0) {
            if (l >= 0 && l < n_layers) layer[l] += t->nbytes;
        } else if (!strcmp(t->name, "token_embd.weight")) {
            *embd += t->nbytes;
        } else if (!strncmp(t->name, "output", 6)) {
            *head += t->nbytes;
            if (!strcmp(t->name, "output.weight")) tied = false;
        }
    }
    if (tied) *head += *embd;
}

static int plan_parse(const char *spec, int n, int n_layers, pipe_plan *p, kvi_error *err)
{
    const char *s = spec;
    int k = 0, next = 0;
    while (*s) {
        int a, b, used = 0;
        if (sscanf(s, "%d-%d%n", &a, &b, &used) != 2 || used == 0)
            return err_set(err, KVI_E_INVALID, "--pp-layers '%s': expected ranges like 0-7,8-15", spec);
        if (k >= n || a != next || b < a || b >= n_layers)
            return err_set(err, KVI_E_INVALID,
                           "--pp-layers '%s': need %d contiguous ranges covering layers 0-%d, one per rank",
                           spec, n, n_layers - 1);
        p->st[k].l0 = a;
        p->st[k].l1 = b + 1;
        next = b + 1;
        k++;
        s += used;
        if (*s == ',')
            s++;
        else if (*s)
            return err_set(err, KVI_E_INVALID, "--pp-layers '%s': expected ranges like 0-7,8-15", spec);
    }
    if (k != n || next != n_layers)
        return err_set(err, KVI_E_INVALID,
                       "--pp-layers '%s': need %d contiguous ranges covering layers 0-%d, one per rank", spec,
                       n, n_layers - 1);
    return 0;
}

/* best[k][j]: the smallest largest-stage cost of layers [0, j) in k stages */
static int plan_balance(const size_t *cost, int L, int n, size_t embd, size_t head, pipe_plan *p)
{
    size_t *pre = calloc((size_t)L + 1, sizeof *pre);
    size_t *best = malloc((size_t)(n + 1) * (size_t)(L + 1) * sizeof *best);
    int *cut = malloc((size_t)(n + 1) * (size_t)(L + 1) * sizeof *cut);
    if (!pre || !best || !cut) {
        free(pre), free(best), free(cut);
        return KVI_E_NOMEM;
    }
    for (int j = 0; j < L; j++) pre[j + 1] = pre[j] + cost[j];
#define B(k, j) best[(size_t)(k) * (size_t)(L + 1) + (size_t)(j)]
#define C(k, j) cut[(size_t)(k) * (size_t)(L + 1) + (size_t)(j)]
    for (int k = 0; k <= n; k++)
        for (int j = 0; j <= L; j++) B(k, j) = SIZE_MAX, C(k, j) = 0;
    B(0, 0) = 0;
    for (int k = 1; k <= n; k++)
        for (int j = k; j <= L - (n - k); j++)
            for (int i = k - 1; i < j; i++) {
                if (B(k - 1, i) == SIZE_MAX) continue;
                size_t c = pre[j] - pre[i] + (k == 1 ? embd : 0) + (k == n ? head : 0);
                if (B(k - 1, i) > c) c = B(k - 1, i);
                if (c < B(k, j)) B(k, j) = c, C(k, j) = i;
            }
    for (int k = n, j = L; k >= 1; k--) {
        p->st[k - 1].l0 = C(k, j);
        p->st[k - 1].l1 = j;
        j = C(k, j);
    }
#undef B
#undef C
    free(pre), free(best), free(cut);
    return 0;
}

/* The plan of n stages for the n_layers layers of g's tensor table. */
static int plan_of(const gguf_ctx *g, int n_layers, int n, const char *spec, pipe_plan *out, kvi_error *err)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || n > PIPE_MAX_STAGES || n > n_layers)
        return err_set(err, KVI_E_INVALID,
                       "pipeline: %d ranks for a model of %d layers (at most one rank per layer, %d ranks)",
                       n, n_layers, PIPE_MAX_STAGES);
    size_t *cost = malloc((size_t)n_layers * sizeof *cost), embd, head;
    if (!cost) return err_set(err, KVI_E_NOMEM, "pipeline: out of memory");
    layer_bytes(g, n_layers, cost, &embd, &head);
    out->n = n;
    int rc = spec ? plan_parse(spec, n, n_layers, out, err) : plan_balance(cost, n_layers, n, embd, head, out);
    if (rc == KVI_E_NOMEM) err_set(err, rc, "pipeline: out of memory");
    for (int k = 0; !rc && k < n; k++) {
        pipe_stage *s = &out->st[k];
        for (int l = s->l0; l < s->l1; l++) s->weight_bytes += cost[l];
        s->weight_bytes += (k == 0 ? embd : 0) + (k == n - 1 ? head : 0);
    }
    free(cost);
    return rc;
}

int pipe_plan_make(const kvi_model *m, int n, const char *spec, pipe_plan *out, kvi_error *err)
{
    memset(out, 0, sizeof *out);
    if (!m->gguf)
        return err_set(err, KVI_E_UNSUPPORTED, "pipeline: only GGUF models can be split over ranks");
    return plan_of(m->gguf, m->n_layers, n, spec, out, err);
}

/* The header of the GGUF at path through a mapping (no tensor data is read) and
 * its layer count. */
static int open_table(const char *path, gguf_ctx **g, int *n_layers, kvi_error *err)
{
    int rc = gguf_open(path, true, g, err);
    if (rc) return rc;
    *n_layers = model_gguf_n_layers(*g);
    if (*n_layers > 0) return 0;
    gguf_close(*g);
    *g = NULL;
    return err_set(err, KVI_E_FORMAT, "pipeline: %s: no layer count in its metadata", path);
}

int pipe_plan_file(const char *path, int n, const char *spec, pipe_plan *out, kvi_error *err)
{
    memset(out, 0, sizeof *out);
    gguf_ctx *g;
    int n_layers, rc = open_table(path, &g, &n_layers, err);
    if (rc) return rc;
    rc = plan_of(g, n_layers, n, spec, out, err);
    gguf_close(g);
    return rc;
}

int pipe_plan_fewest(const char *path, size_t limit, pipe_plan *out, size_t *total, kvi_error *err)
{
    memset(out, 0, sizeof *out);
    gguf_ctx *g;
    int n_layers, rc = open_table(path, &g, &n_layers, err);
    if (rc) return rc;
    *total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) *total += gguf_tensor_at(g, i)->nbytes;
    const int k_max = n_layers < PIPE_MAX_STAGES ? n_layers : PIPE_MAX_STAGES;
    bool fits = false;
    for (int k = 1; !rc && !fits && k <= k_max; k++) {
        rc = plan_of(g, n_layers, k, NULL, out, err);
        fits = !rc;
        for (int s = 0; fits && s < k; s++) fits = out->st[s].weight_bytes <= limit;
    }
    gguf_close(g);
    if (!rc && !fits)
        rc = err_set(err, KVI_E_UNSUPPORTED, "pipeline: no split into at most %d stages fits %zu bytes a stage",
                     k_max, limit);
    return rc;
}

size_t pipe_plan_encode(const pipe_plan *p, int32_t *out, size_t cap)
{
    const size_t need = 1 + 2 * (size_t)p->n;
    if (cap < need) return 0;
    out[0] = p->n;
    for (int k = 0; k < p->n; k++) out[1 + 2 * k] = p->st[k].l0, out[2 + 2 * k] = p->st[k].l1;
    return need;
}
