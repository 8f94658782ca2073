/*
 * server_embed.c — embeddings over HTTP: POST /v1/embeddings in OpenAI's shape,
 * llama.cpp's POST /embedding and /embeddings, the embedder they and the rerank
 * routes (server_rerank.c) share, and the refusal of generation on an encoder.
 *
 * The embedder (server_embed.h) owns its engine, created for it alone by the
 * caller (cli/cmd_serve.c), so kvi_embed never runs beside the
 * scheduler's kvi_step on one engine. Batching across requests: each request
 * queues a job; whichever waiting connection thread finds the engine free leads
 * and runs the queue's first jobs (up to SRV_EMB_BATCH_TOKENS tokens, one
 * pooling) in one kvi_embed call, then wakes them; a job larger than that runs
 * alone in groups of inputs of about that size. kvi_embed gives an input the
 * same bits in any batch, so batching changes no answer.
 *
 * Request ("input" or llama.cpp's "content"): a string, a list of strings, a
 * list of token ids (one input) or a list of lists of ids (strings and lists
 * may mix). A string is tokenised with the model's special tokens added and
 * special text recognised (as llama-server). Fields: "model" (any name unless
 * --strict-model), "encoding_format" float | base64 (little-endian float32),
 * "dimensions" (1 .. n_embd_out: the pooled vector cut to its first values,
 * then normalised), "embd_normalize" (-1 none, 0 max |x| 32760, 1 taxicab, 2
 * euclidean: the default, p > 2 p-norm), "truncate" (inputs longer than the
 * context are cut to it instead of a 400), "user" (accepted, no effect). Any
 * other field is a 400 naming it.
 *
 * Answers: /v1/embeddings {"object": "list", "data": [{"object": "embedding",
 * "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}
 * (pooling none is refused there, as llama-server does); /embedding(s) a bare
 * list [{"index", "embedding": [[...]]}]: one normalised vector, or with
 * pooling none every token's vector, raw.
 */
#include "server/server_embed.h"

#include "formats/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_emb_bad(srv_err *er, const char *field, const char *what)
{
    snprintf(er->param, sizeof er->param, "%s", field);
    return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'%s' %s", field, what);
}

int srv_embed_attach(srv_server *srv, kvi_engine *e, kvi_pooling pooling, kvi_error *err)
{
    const kvi_pooling p = pooling == KVI_POOLING_MODEL ? kvi_model_pooling(srv->m) : pooling;
    if (p == KVI_POOLING_RANK && kvi_n_cls_out(srv->m) < 1) {
        if (err) snprintf(err->msg, sizeof err->msg, "reranking needs a classification head (cls.output)");
        if (err) err->code = KVI_E_UNSUPPORTED;
        return KVI_E_UNSUPPORTED;
    }
    struct srv_embedder *em = calloc(1, sizeof *em);
    if (!em) return KVI_E_NOMEM;
    pthread_mutex_init(&em->mu, NULL);
    pthread_cond_init(&em->cv, NULL);
    em->e = e;
    em->pooling = p;
    em->n_ctx = kvi_engine_n_ctx(e);
    em->n_out = kvi_n_embd_out(srv->m);
    em->n_cls = kvi_n_cls_out(srv->m);
    srv->emb = em;
    return 0;
}

void srv_embed_free(srv_server *srv)
{
    if (!srv->emb) return;
    pthread_mutex_destroy(&srv->emb->mu);
    pthread_cond_destroy(&srv->emb->cv);
    kvi_engine_free(srv->emb->e);
    free(srv->emb);
    srv->emb = NULL;
}

static bool is_embed_url(const char *url)
{
    return !strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings") || !strcmp(url, "/embedding");
}

static bool is_rerank_url(const char *url)
{
    return !strcmp(url, "/v1/rerank") || !strcmp(url, "/rerank") || !strcmp(url, "/v1/reranking") ||
           !strcmp(url, "/reranking");
}

bool srv_embed_path(const char *url) { return is_embed_url(url) || is_rerank_url(url); }

bool srv_embed_refuses(const srv_server *srv, const char *url, srv_err *er)
{
    static const char *const gen[] = { "/v1/completions", "/v1/chat/completions",      "/infill",
                                       "/v1/messages",    "/v1/messages/count_tokens", "/v1/responses",
                                       "/completion" };
    if (!srv->m || !kvi_model_is_encoder(srv->m)) return false;
    for (size_t i = 0; i < sizeof gen / sizeof *gen; i++)
        if (!strcmp(url, gen[i])) {
            srv_err_set(er, 400, "invalid_request_error", "model_not_generative",
                        "this server's model is an encoder: it gives embeddings (POST /v1/embeddings%s), "
                        "not text",
                        srv->emb && srv->emb->pooling == KVI_POOLING_RANK ? " or /v1/rerank" : "");
            return true;
        }
    return false;
}

/* ---- shared with server_rerank.c ---- */

void srv_emb_inputs_free(srv_emb_inputs *in)
{
    for (int32_t i = 0; i < in->count; i++) free(in->toks[i]);
    free(in->toks);
    free(in->n);
    memset(in, 0, sizeof *in);
}

static int oom(srv_err *er) { return srv_err_set(er, 500, "server_error", NULL, "out of memory"); }

int srv_emb_inputs_add(srv_server *srv, srv_emb_inputs *in, const int32_t *ids, int32_t n, bool truncate,
                       const char *what, srv_err *er)
{
    const int32_t n_ctx = srv->emb->n_ctx, n_vocab = kvi_n_vocab(srv->m);
    if (n < 1) return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "%s is empty", what);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "%s: token %d is %d, not an id in [0, %d)", what, (int)i, (int)ids[i],
                               (int)n_vocab);
    if (n > n_ctx && !truncate)
        return srv_err_set(er, 400, "invalid_request_error", "context_length_exceeded",
                           "%s has %d tokens, more than the context of %d (\"truncate\": true cuts it)", what,
                           (int)n, (int)n_ctx);
    if (n > n_ctx) n = n_ctx;
    if (in->count == in->cap) {
        const int32_t cap = in->cap ? in->cap * 2 : 8;
        int32_t **t = realloc(in->toks, (size_t)cap * sizeof *t);
        if (t) in->toks = t;
        int32_t *nn = t ? realloc(in->n, (size_t)cap * sizeof *nn) : NULL;
        if (!nn) return oom(er);
        in->n = nn;
        in->cap = cap;
    }
    int32_t *copy = malloc((size_t)n * sizeof *copy);
    if (!copy) return oom(er);
    memcpy(copy, ids, (size_t)n * sizeof *copy);
    in->toks[in->count] = copy;
    in->n[in->count++] = n;
    in->total += n;
    return 0;
}

/* One request's inputs waiting for, or in, a forward pass. */
typedef struct emb_job {
    const srv_emb_inputs *in;
    kvi_pooling pooling;
    float *out;
    int rc;
    kvi_error err;
    bool done;
    struct emb_job *next;
} emb_job;

/* Rows one input fills in kvi_embed's output. */
static size_t rows_of(kvi_pooling pooling, int32_t n_toks)
{
    return pooling == KVI_POOLING_NONE ? (size_t)n_toks : 1;
}

/* One job alone: its inputs in groups of about SRV_EMB_BATCH_TOKENS tokens. */
static int run_one(struct srv_embedder *em, emb_job *j, size_t row)
{
    const srv_emb_inputs *in = j->in;
    float *out = j->out;
    int rc = 0;
    for (int32_t a = 0, b; a < in->count && !rc; a = b) {
        int64_t tokens = in->n[a];
        for (b = a + 1; b < in->count && tokens + in->n[b] <= SRV_EMB_BATCH_TOKENS; b++) tokens += in->n[b];
        rc = kvi_embed(em->e, (const int32_t *const *)in->toks + a, in->n + a, b - a, j->pooling, out,
                       &j->err);
        out += (j->pooling == KVI_POOLING_NONE ? (size_t)tokens : (size_t)(b - a)) * row;
    }
    return rc;
}

/* The jobs of the list batch (one pooling) through kvi_embed: one call for all
 * of them (their inputs in order), each job's rows copied to its out; a single
 * job runs alone. Sets every job's rc and err. */
static void run_batch(struct srv_embedder *em, emb_job *batch)
{
    const kvi_pooling pooling = batch->pooling;
    const size_t row = pooling == KVI_POOLING_RANK ? (size_t)em->n_cls : (size_t)em->n_out;
    if (!batch->next) {
        batch->rc = run_one(em, batch, row);
        return;
    }
    int32_t count = 0;
    size_t rows = 0;
    for (emb_job *j = batch; j; j = j->next) {
        count += j->in->count;
        for (int32_t i = 0; i < j->in->count; i++) rows += rows_of(pooling, j->in->n[i]);
    }
    const int32_t **toks = malloc((size_t)count * sizeof *toks);
    int32_t *n = malloc((size_t)count * sizeof *n);
    float *out = malloc(rows * row * sizeof *out);
    kvi_error err = { 0 };
    int rc = KVI_E_NOMEM;
    if (toks && n && out) {
        int32_t k = 0;
        for (emb_job *j = batch; j; j = j->next)
            for (int32_t i = 0; i < j->in->count; i++, k++) toks[k] = j->in->toks[i], n[k] = j->in->n[i];
        rc = kvi_embed(em->e, toks, n, count, pooling, out, &err);
    }
    size_t at = 0;
    for (emb_job *j = batch; j; j = j->next) {
        size_t r = 0;
        for (int32_t i = 0; i < j->in->count; i++) r += rows_of(pooling, j->in->n[i]);
        if (!rc) memcpy(j->out, out + at * row, r * row * sizeof *out);
        at += r;
        j->rc = rc;
        j->err = err;
    }
    free(toks);
    free(n);
    free(out);
}

int srv_emb_run(srv_server *srv, const srv_emb_inputs *in, kvi_pooling pooling, float *out, srv_err *er)
{
    struct srv_embedder *em = srv->emb;
    emb_job job = { .in = in, .pooling = pooling, .out = out };
    pthread_mutex_lock(&em->mu);
    if (em->tail)
        em->tail->next = &job;
    else
        em->head = &job;
    em->tail = &job;
    while (!job.done) {
        if (em->busy) {
            pthread_cond_wait(&em->cv, &em->mu);
            continue;
        }
        /* lead: the queue's first jobs of one pooling, up to SRV_EMB_BATCH_TOKENS tokens */
        em->busy = true;
        emb_job *batch = em->head, *last = batch;
        int64_t tokens = batch->in->total;
        while (last->next && last->next->pooling == batch->pooling &&
               tokens + last->next->in->total <= SRV_EMB_BATCH_TOKENS) {
            last = last->next;
            tokens += last->in->total;
        }
        em->head = last->next;
        if (!em->head) em->tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&em->mu);
        run_batch(em, batch);
        pthread_mutex_lock(&em->mu);
        for (emb_job *j = batch; j; j = j->next) j->done = true;
        em->busy = false;
        pthread_cond_broadcast(&em->cv);
    }
    pthread_mutex_unlock(&em->mu);
    const int rc = job.rc;
    if (!rc) return 0;
    if (rc == KVI_E_NOMEM) return oom(er);
    return srv_err_set(er, rc == KVI_E_INVALID || rc == KVI_E_CONTEXT_FULL ? 400 : 500,
                       rc == KVI_E_INVALID || rc == KVI_E_CONTEXT_FULL ? "invalid_request_error"
                                                                       : "server_error",
                       NULL, "%s", job.err.msg);
}

int srv_emb_unknown(const cJSON *root, const char *const *names, size_t n, srv_err *er)
{
    for (const cJSON *f = root->child; f; f = f->next) {
        size_t i = 0;
        while (i < n && strcmp(f->string, names[i]) != 0) i++;
        if (i == n) snprintf(er->param, sizeof er->param, "%.95s", f->string);
        if (i == n)
            return srv_err_set(er, 400, "invalid_request_error", "unknown_parameter",
                               "Unrecognized request argument supplied: %.200s", f->string);
    }
    return 0;
}

int srv_emb_truncate(const cJSON *root, bool *truncate, srv_err *er)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "truncate");
    if (t && !cJSON_IsBool(t) && !cJSON_IsNull(t)) return srv_emb_bad(er, "truncate", "must be a boolean");
    *truncate = cJSON_IsTrue(t);
    return 0;
}

cJSON *srv_emb_parse(const char *body, size_t len, srv_err *er)
{
    bool no_mem = false;
    cJSON *root = kvi_json_parse(body ? body : "", len, &no_mem);
    if (no_mem) {
        oom(er);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        srv_err_set(er, 400, "invalid_request_error", NULL, "the body is not a JSON object");
        return NULL;
    }
    return root;
}

cJSON *srv_emb_list(const srv_server *srv, int64_t tokens)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(o, "model", srv->cfg.model_name ? srv->cfg.model_name : "");
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)tokens);
    return o;
}

/* ---- the embedding routes ---- */

/* A string's ids: special tokens added, special text recognised. */
static int add_text(srv_server *srv, srv_emb_inputs *in, const char *s, bool truncate, const char *what,
                    srv_err *er)
{
    const size_t len = strlen(s);
    if (!len) return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "%s is empty", what);
    int32_t n = kvi_tokenize(srv->m, s, len, true, true, NULL, 0);
    int32_t *ids = n >= 0 ? malloc(((size_t)n + 1) * sizeof *ids) : NULL;
    if (n < 0 || !ids) {
        free(ids);
        return n < 0 ? srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                                   "%s cannot be tokenised", what)
                     : oom(er);
    }
    n = kvi_tokenize(srv->m, s, len, true, true, ids, n);
    const int rc = srv_emb_inputs_add(srv, in, ids, n, truncate, what, er);
    free(ids);
    return rc;
}

/* A JSON list of token ids as one input. */
static int add_ids(srv_server *srv, srv_emb_inputs *in, const cJSON *a, bool truncate, const char *what,
                   srv_err *er)
{
    const int n = cJSON_GetArraySize(a);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return oom(er);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a)
    {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2e9) {
            free(ids);
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "%s: element %d is not a token id", what, i);
        }
        ids[i++] = (int32_t)v->valuedouble;
    }
    const int rc = srv_emb_inputs_add(srv, in, ids, i, truncate, what, er);
    free(ids);
    return rc;
}

/* "input" / "content" into in. */
static int parse_input(srv_server *srv, const cJSON *x, const char *field, bool truncate, srv_emb_inputs *in,
                       srv_err *er)
{
    char what[96];
    if (cJSON_IsString(x)) {
        snprintf(what, sizeof what, "'%s'", field);
        return add_text(srv, in, x->valuestring, truncate, what, er);
    }
    if (!cJSON_IsArray(x) || !x->child)
        return srv_emb_bad(
            er, field, "must be a string, a list of strings or a non-empty list of token ids or of lists");
    if (cJSON_IsNumber(x->child)) {
        snprintf(what, sizeof what, "'%s'", field);
        return add_ids(srv, in, x, truncate, what, er);
    }
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, x)
    {
        snprintf(what, sizeof what, "'%s[%d]'", field, i++);
        const int rc = cJSON_IsString(v)  ? add_text(srv, in, v->valuestring, truncate, what, er)
                       : cJSON_IsArray(v) ? add_ids(srv, in, v, truncate, what, er)
                                          : srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                                                        "%s must be a string or a list of token ids", what);
        if (rc) return rc;
    }
    return 0;
}

/* The options of an embedding request. */
typedef struct emb_opts {
    bool oai, base64, truncate;
    int32_t dims; /* 0: all */
    int norm;     /* kvi_embd_normalize's mode */
} emb_opts;

static int parse_opts(srv_server *srv, const cJSON *root, emb_opts *o, srv_err *er)
{
    const int32_t n_out = srv->emb->n_out;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f) ||
            (strcmp(f->valuestring, "float") != 0 && strcmp(f->valuestring, "base64") != 0))
            return srv_emb_bad(er, "encoding_format", "must be \"float\" or \"base64\"");
        o->base64 = !strcmp(f->valuestring, "base64");
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    if (d && !cJSON_IsNull(d)) {
        if (!cJSON_IsNumber(d) || d->valuedouble != floor(d->valuedouble) || d->valuedouble < 1 ||
            d->valuedouble > n_out)
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'dimensions' must be an integer in [1, %d] (the model's embedding length)",
                               (int)n_out);
        if (srv->emb->pooling == KVI_POOLING_NONE)
            return srv_emb_bad(er, "dimensions", "needs a pooled embedding (this server's pooling is none)");
        o->dims = (int32_t)d->valuedouble;
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "embd_normalize");
    o->norm = 2;
    if (nm && !cJSON_IsNull(nm)) {
        if (!cJSON_IsNumber(nm) || nm->valuedouble != floor(nm->valuedouble) || nm->valuedouble < -1 ||
            nm->valuedouble > 1000)
            return srv_emb_bad(er, "embd_normalize", "must be an integer in [-1, 1000]");
        o->norm = (int)nm->valuedouble;
    }
    return srv_emb_truncate(root, &o->truncate, er);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* v [n] as the base64 of its little-endian float32 bytes (malloc'd). */
static char *base64_floats(const float *v, int32_t n)
{
    const size_t nb = (size_t)n * 4;
    unsigned char *bytes = malloc(nb + 2);
    char *s = malloc((nb + 2) / 3 * 4 + 1);
    if (!bytes || !s) {
        free(bytes);
        free(s);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) bytes[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    size_t j = 0;
    for (size_t i = 0; i < nb; i += 3) {
        const uint32_t t = (uint32_t)bytes[i] << 16 | (i + 1 < nb ? (uint32_t)bytes[i + 1] << 8 : 0) |
                           (i + 2 < nb ? bytes[i + 2] : 0);
        s[j++] = b64[t >> 18 & 63];
        s[j++] = b64[t >> 12 & 63];
        s[j++] = i + 1 < nb ? b64[t >> 6 & 63] : '=';
        s[j++] = i + 2 < nb ? b64[t & 63] : '=';
    }
    s[j] = 0;
    free(bytes);
    return s;
}

/* One vector as JSON: a list of numbers, or its base64 string. NULL: out of memory. */
static cJSON *vector_json(const float *v, int32_t n, bool base64)
{
    if (base64) {
        char *s = base64_floats(v, n);
        cJSON *o = s ? cJSON_CreateString(s) : NULL;
        free(s);
        return o;
    }
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

/* The answer of an embedding request from out (srv_emb_run's layout). */
static cJSON *answer(srv_server *srv, const srv_emb_inputs *in, const emb_opts *o, float *out)
{
    const int32_t n_out = srv->emb->n_out, dims = o->dims ? o->dims : n_out;
    const bool per_token = srv->emb->pooling == KVI_POOLING_NONE;
    cJSON *root = o->oai ? srv_emb_list(srv, in->total) : cJSON_CreateArray();
    cJSON *data = o->oai ? cJSON_AddArrayToObject(root, "data") : root;
    for (int32_t i = 0; i < in->count; i++) {
        cJSON *item = cJSON_CreateObject();
        if (o->oai) cJSON_AddStringToObject(item, "object", "embedding");
        cJSON_AddNumberToObject(item, "index", i);
        cJSON *e;
        if (per_token) { /* llama.cpp's /embedding: every token's vector, raw */
            e = cJSON_CreateArray();
            for (int32_t t = 0; t < in->n[i]; t++, out += n_out)
                cJSON_AddItemToArray(e, vector_json(out, n_out, false));
        } else {
            float *v = out;
            out += n_out;
            kvi_embd_normalize(v, dims, o->norm);
            cJSON *vec = vector_json(v, dims, o->base64);
            if (o->oai) {
                e = vec;
            } else {
                e = cJSON_CreateArray();
                cJSON_AddItemToArray(e, vec);
            }
        }
        cJSON_AddItemToObject(item, "embedding", e);
        cJSON_AddItemToArray(data, item);
    }
    return root;
}

/* An embedding body's options and inputs (root parsed), as the routes check them. 0, or -1 with *er set. */
static int parse_embed(srv_server *srv, const cJSON *root, emb_opts *o, srv_emb_inputs *in, srv_err *er)
{
    static const char *const names[] = { "input",      "content",        "model",    "encoding_format",
                                         "dimensions", "embd_normalize", "truncate", "user" };
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "input");
    const char *field = "input";
    if (!x) x = cJSON_GetObjectItemCaseSensitive(root, field = "content");
    int rc = srv_emb_unknown(root, names, sizeof names / sizeof *names, er);
    if (!rc && !x)
        rc = srv_err_set(er, 400, "invalid_request_error", "missing_required_parameter",
                         "'input' is required");
    if (!rc && o->oai && srv->emb->pooling == KVI_POOLING_NONE)
        rc = srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                         "pooling 'none' is not OpenAI-compatible: use /embeddings, or serve with --pooling "
                         "mean, cls or last");
    if (!rc && srv->emb->pooling == KVI_POOLING_RANK)
        rc = srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                         "this server reranks (pooling rank): use POST /v1/rerank");
    if (!rc) rc = srv_check_model(srv, root, er);
    if (!rc) rc = parse_opts(srv, root, o, er);
    if (!rc) rc = parse_input(srv, x, field, o->truncate, in, er);
    return rc;
}

int srv_embed_parse(srv_server *srv, const char *body, size_t len, bool rerank, srv_emb_inputs *in,
                    srv_err *er)
{
    memset(in, 0, sizeof *in);
    cJSON *root = srv_emb_parse(body, len, er);
    if (!root) return -1;
    emb_opts o = { .oai = true };
    const int rc = rerank ? srv_rerank_parse(srv, root, in, er) : parse_embed(srv, root, &o, in, er);
    cJSON_Delete(root);
    if (rc) srv_emb_inputs_free(in);
    return rc;
}

static int embeddings(srv_server *srv, struct MHD_Connection *con, bool oai, const char *body, size_t len)
{
    srv_err er = { 0 };
    srv_emb_inputs in = { 0 };
    emb_opts o = { .oai = oai };
    float *out = NULL;
    cJSON *root = srv_emb_parse(body, len, &er);
    if (!root) return srv_send_error(con, &srv_api_openai, &er);
    int rc = parse_embed(srv, root, &o, &in, &er);
    const size_t rows = srv->emb->pooling == KVI_POOLING_NONE ? (size_t)in.total : (size_t)in.count;
    if (!rc && !(out = malloc(rows * (size_t)srv->emb->n_out * sizeof *out))) rc = oom(&er);
    if (!rc) rc = srv_emb_run(srv, &in, srv->emb->pooling, out, &er);
    cJSON_Delete(root);
    cJSON *a = rc ? NULL : answer(srv, &in, &o, out);
    free(out);
    srv_emb_inputs_free(&in);
    if (rc) return srv_send_error(con, &srv_api_openai, &er);
    char *s = a ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    return srv_send_body(con, 200, s);
}

int srv_embed_route(srv_server *srv, struct MHD_Connection *con, const char *url, const char *body,
                    size_t len)
{
    srv_err er = { 0 };
    const bool rerank = is_rerank_url(url);
    if (!srv->emb || (rerank && srv->emb->pooling != KVI_POOLING_RANK)) {
        srv_err_set(&er, 501, "not_supported_error", NULL,
                    rerank ? "This server does not support reranking. Start it with `--reranking`"
                           : "This server does not support embeddings. Start it with `--embeddings`");
        return srv_send_error(con, &srv_api_openai, &er);
    }
    if (rerank) return srv_rerank(srv, con, body, len);
    return embeddings(srv, con, !strcmp(url, "/v1/embeddings"), body, len);
}
