/*
 * server_embed.h — what the embedding routes (server_embed.c) and the rerank
 * routes (server_rerank.c) share: the embedder, the token inputs of one
 * request, and the checks both make of a body.
 *
 * srv_embedder: kvi_embed's own engine e (never the scheduler's, so embedding
 * requests run beside generation); under mu, the queue of jobs (head..tail)
 * and busy: at most one thread runs kvi_embed on e, the others wait on cv;
 * pooling is resolved (never KVI_POOLING_MODEL).
 * srv_emb_inputs: count token sequences, toks[i] [n[i]] malloc'd, each 1 ..
 * n_ctx ids in [0, n_vocab); total = sum n[i].
 */
#ifndef KVI_SERVER_EMBED_H
#define KVI_SERVER_EMBED_H

#include "server/server.h"

struct srv_embedder {
    kvi_engine *e;
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* a batch ended */
    struct emb_job *head, *tail; /* jobs waiting, oldest first (server_embed.c) */
    bool busy;                   /* a leader runs a batch on e */
    kvi_pooling pooling;
    int32_t n_ctx, n_out, n_cls;
};

typedef struct srv_emb_inputs {
    int32_t **toks; /* [count] */
    int32_t *n;     /* [count] */
    int32_t count, cap;
    int64_t total;
} srv_emb_inputs;

/* Tokens per kvi_embed call: a request's inputs are run in groups this large. */
#define SRV_EMB_BATCH_TOKENS 8192

void srv_emb_inputs_free(srv_emb_inputs *in);
/* Appends a copy of ids [n] as one input: 400 when empty, when an id is
 * outside [0, n_vocab) or when n > n_ctx without truncate (then cut to n_ctx);
 * what names the input in the message. 0, or -1 with *er set. */
int srv_emb_inputs_add(srv_server *srv, srv_emb_inputs *in, const int32_t *ids, int32_t n, bool truncate,
                       const char *what, srv_err *er);
/* Every input through kvi_embed with pooling, batched with other requests'
 * inputs up to SRV_EMB_BATCH_TOKENS tokens, or alone in groups of about that
 * many, into out (kvi_embed's layout for all of them).
 * 0, or -1 with *er set (400 for a refused input, 500 otherwise). */
int srv_emb_run(srv_server *srv, const srv_emb_inputs *in, kvi_pooling pooling, float *out, srv_err *er);
/* 400 invalid_value "'field' what". Returns -1. */
int srv_emb_bad(srv_err *er, const char *field, const char *what);
/* 400 naming the first member of root that is not in names [n]; 0 when none. */
int srv_emb_unknown(const cJSON *root, const char *const *names, size_t n, srv_err *er);
/* "truncate" (a boolean, default false): 0, or -1 with *er set. */
int srv_emb_truncate(const cJSON *root, bool *truncate, srv_err *er);
/* The parsed body of an embedding or rerank request: NULL with *er set (400
 * for a body that is not a JSON object). */
cJSON *srv_emb_parse(const char *body, size_t len, srv_err *er);
/* {"object": "list", "model", "usage": {prompt_tokens, total_tokens}} to add to. */
cJSON *srv_emb_list(const srv_server *srv, int64_t tokens);
/* A rerank body's inputs (root parsed), as the routes check them. 0, or -1 with *er set. */
int srv_rerank_parse(srv_server *srv, const cJSON *root, srv_emb_inputs *in, srv_err *er);
/* An embedding body (as /v1/embeddings) or a rerank body, parsed and checked as
 * the routes do, without running it (the fuzz target): its inputs into *in
 * (freed by the caller). 0, or -1 with *er set and *in empty. */
int srv_embed_parse(srv_server *srv, const char *body, size_t len, bool rerank, srv_emb_inputs *in,
                    srv_err *er);
/* The rerank routes (server_rerank.c); body checked by srv_body_check. */
int srv_rerank(srv_server *srv, struct MHD_Connection *con, const char *body, size_t len);

#endif
