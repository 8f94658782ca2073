/*
 * server.h — the OpenAI-compatible HTTP server behind `kvinfer serve`
 * (server/server_*.c): a static library on the public API (include/kvinfer.h)
 * that the CLI links and tests call directly. Shared between the HTTP layer
 * (server_http.c), the JSON request/response mapping (server_json.c), the
 * Prometheus metrics (server_metrics.c) and the web page (server_page.c).
 *
 * Threads: libmicrohttpd runs one thread per connection; the scheduler runs one
 * engine thread. A request (srv_req) is shared by both and freed when both have
 * let go of it (refcount 2 at submit). Its output is a byte queue (out) guarded
 * by its mutex; the engine thread appends, the connection thread drains.
 */
#ifndef KVI_SERVER_H
#define KVI_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvinfer.h"

#include <cjson/cJSON.h>
#include <pthread.h>

#define SRV_MAX_N 8             /* most choices ("n") per request */
#define SRV_MAX_STOP 4          /* most stop strings */
#define SRV_BODY_MAX (4u << 20) /* larger request bodies get 413 */

/* ---- metrics (server_metrics.c) ---- */

#define SRV_HIST_BUCKETS 14
typedef struct srv_hist {
    uint64_t count[SRV_HIST_BUCKETS + 1]; /* per bucket, last: +Inf */
    uint64_t n;
    double sum; /* seconds */
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    srv_hist ttft, itl, e2e;
    uint64_t requests_ok, requests_error, requests_rejected, requests_cancelled;
    uint64_t prompt_tokens, completion_tokens;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);
void srv_hist_observe(srv_metrics *m, srv_hist *h, double seconds);
/* Prometheus text exposition (malloc'd). */
char *srv_metrics_render(srv_metrics *m, kvi_sched *s);

/* ---- the server ---- */

typedef struct srv_config {
    const char *host;
    int port;               /* 0: any free port */
    const char *api_key;    /* NULL: no authentication */
    const char *model_name; /* what `model` may name (alias or file name without .gguf) */
    int n_ctx;
    kvi_sampler_params sampling; /* defaults, as `kvinfer run` */
    bool quiet;
    bool special_in_content; /* Hugging Face's tokenization: special text recognised in message text too */
} srv_config;

typedef struct srv_server {
    srv_config cfg;
    kvi_model *m; /* NULL while loading (GET /health: 503) */
    kvi_engine *e;
    kvi_sched *s;
    struct MHD_Daemon *d;
    srv_metrics metrics;
    pthread_mutex_t mu; /* guards `closing` and the id counter */
    bool closing;
    uint64_t next_id;
    double t_start;
    /* the Jinja chat template (server_template.c); NULL: the built-in layouts */
    kvi_chat_template *tmpl;
    char *bos_text, *eos_text; /* bos_token / eos_token for it (NULL: undefined) */
    char **special;            /* [n_special] texts of the vocabulary's special tokens */
    int n_special;
    bool special_first[256]; /* some special text starts with this byte */
} srv_server;

/* ---- parsed request (server_json.c) ---- */

typedef struct srv_params {
    bool chat;
    int32_t *prompt; /* malloc'd ids */
    int32_t n_prompt;
    int32_t max_tokens; /* 0: until end of generation or a full context */
    int n;
    bool stream, include_usage, ignore_eos;
    bool no_spec; /* kvinfer's "speculative": false (spec2) */
    kvi_sampler_params sp;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    /* logprobs: chat "logprobs": true + "top_logprobs": k; completions "logprobs": k */
    bool logprobs;
    int32_t top_logprobs; /* 0 .. KVI_LOGPROBS_MAX alternatives per token */
    /* "grammar" (GBNF) or "response_format" json_object / json_schema, compiled;
     * NULL: unconstrained. Owned; lives as long as the request. */
    kvi_grammar *grammar;
    /* "logit_bias": {"id": bias}, ids < n_vocab, biases in [-100, 100] */
    int32_t *bias_ids; /* [n_bias] */
    float *bias_vals;  /* [n_bias] */
    int32_t n_bias;
} srv_params;

/* One failure answer: HTTP status plus OpenAI's error object. */
typedef struct srv_err {
    int status;
    const char *type, *code;
    char msg[512];
} srv_err;

int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* {"error":{"message","type","param":null,"code"}} (malloc'd). */
char *srv_error_json(const srv_err *e);
/* Parses a /v1/completions or /v1/chat/completions body. 0, or -1 with *er set. */
int srv_parse_request(srv_server *srv, const char *body, size_t len, bool chat, srv_params *p, srv_err *er);
void srv_params_free(srv_params *p);

/* ---- the chat template (server_template.c) ---- */

/* Sets srv->tmpl from file_text (--chat-template-file, file_name for messages)
 * or, when NULL, the model's tokenizer.chat_template, and logs on stderr which
 * template /v1/chat/completions uses. A file that does not parse is an error;
 * a model's template that does not parse falls back to the built-in layouts
 * with a warning. 0, or a negative code with err filled. */
int srv_template_init(srv_server *srv, const char *file_text, size_t file_len, const char *file_name,
                      kvi_error *err);
void srv_template_free(srv_server *srv);
/* The prompt srv->tmpl renders for a chat body (malloc'd), or NULL with *er
 * set: 400 with the template's message when it raises or the body is bad. */
char *srv_template_render(srv_server *srv, const char *body, size_t len, srv_err *er);
/* The prompt's token ids for a chat body (malloc'd, *n of them), or NULL with
 * *er set as srv_template_render does: special tokens written by the template
 * are recognised, special-token text inside the body's strings (contents,
 * tool results, arguments) stays plain text (see server_template.c). */
int32_t *srv_template_ids(srv_server *srv, const char *body, size_t len, int32_t *n, srv_err *er);
/* The chat prompt as text for a chat body (POST /apply-template): the Jinja
 * rendering, or the built-in layout's tokens shown with their special text.
 * Malloc'd, or NULL with *er set. */
char *srv_chat_prompt_text(srv_server *srv, const char *body, size_t len, srv_err *er);

/* ---- one request in flight (server_http.c builds, server_json.c formats) ---- */

/* The log-probabilities of one generated token (raw logits' log-softmax). */
typedef struct srv_lp {
    int32_t token;
    float logprob;
    size_t offset; /* bytes of the choice's text before it */
    int32_t n_top;
    int32_t top_id[KVI_LOGPROBS_MAX]; /* [n_top] descending */
    float top_lp[KVI_LOGPROBS_MAX];   /* [n_top] */
} srv_lp;

typedef struct srv_choice {
    uint64_t sched_id;
    char *text;            /* generated text (stop strings cut off) */
    size_t len, cap, sent; /* sent: bytes already streamed */
    int32_t n_tokens;
    bool done, stopped; /* stopped: a stop string matched */
    kvi_finish finish;
    kvi_usage usage;
    double t_last;
    struct srv_req *req;
    int index;
    srv_lp *lp; /* [n_lp] one per generated token, when logprobs were asked */
    int32_t n_lp, cap_lp;
} srv_choice;

typedef struct srv_req {
    srv_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    srv_params p;
    char id[48];
    long created;
    srv_choice ch[SRV_MAX_N];
    int n_done;
    char *out; /* SSE bytes not yet read by the connection */
    size_t out_len, out_cap, out_off;
    bool finished; /* every choice done (and, streaming, the tail queued) */
    bool error;
    char err_msg[512];
    double t_submit;
} srv_req;

/* Formats the SSE event of a token, or the final ones (server_json.c). The
 * caller holds r->mu. Returns false when out of memory. */
bool srv_sse_token(srv_req *r, srv_choice *c, const char *piece, size_t n);
bool srv_sse_final(srv_req *r);
/* Records the logprobs of the choice's next token (caller holds r->mu; offset =
 * the text's length now, before the token's text is appended). */
bool srv_logprobs_push(srv_choice *c, int32_t token, float logprob, const int32_t *top_ids,
                       const float *top_lps, int32_t n_top);
/* The non-streamed response body (malloc'd). */
char *srv_response_json(srv_req *r);
/* usage object with prompt_tokens_details and kvinfer's timings */
cJSON *srv_usage_json(srv_req *r);

/* ---- the HTTP layer (server_http.c) ---- */

int srv_start(srv_server *srv, kvi_error *err); /* binds, serves in its own threads */
int srv_bound_port(srv_server *srv);
void srv_stop(srv_server *srv);

/* ---- the web page (server_page.c) ---- */
extern const char srv_page_html[];

#endif
