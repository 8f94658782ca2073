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

#define SRV_MAX_N 128              /* most choices ("n") per request */
#define SRV_MAX_STOP 64            /* most stop strings */
#define SRV_STOP_MAX_LEN 256       /* longest stop string, bytes */
#define SRV_BODY_MAX (4u << 20)    /* larger request bodies get 413 */
#define SRV_JSON_DEPTH_MAX 64      /* deeper request JSON gets 400 */
#define SRV_HEADER_MAX (16u << 10) /* larger request headers (all together) get 431 */
#define SRV_TIMEOUT_S 10           /* a connection silent this long while sending is closed */
#define SRV_CONN_MAX 1024          /* connections served at once (at least 8 x n_parallel) */
#define SRV_CONN_PER_IP 256        /* of them from one address (at least 8 x n_parallel) */
#define SRV_CONN_HARD_FACTOR 4     /* libmicrohttpd's own limits (a reset) are this many times higher */
#define SRV_RETRY_AFTER_S 1        /* Retry-After of a 503 for a refused connection or a full queue */

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
    uint64_t refused[4]; /* requests answered 503 for a refusal, by srv_refusal reason */
    uint64_t prompt_tokens, completion_tokens;
    char *extra; /* the owner's exposition lines appended to /metrics (a pipeline's stages), or NULL */
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);
void srv_hist_observe(srv_metrics *m, srv_hist *h, double seconds);
/* Replaces the extra exposition lines (thread-safe); takes text (malloc'd, or NULL). */
void srv_metrics_set_extra(srv_metrics *m, char *text);
/* Prometheus text exposition (malloc'd). */
char *srv_metrics_render(srv_metrics *m, kvi_sched *s);

/* ---- connection admission (server_admit.c) ---- */

/* Why a request was refused with 503 + Retry-After (/metrics' reason label). */
enum { SRV_REFUSED_NONE, SRV_REFUSED_PER_ADDRESS, SRV_REFUSED_GLOBAL, SRV_REFUSED_QUEUE_FULL };
const char *srv_refusal_name(int reason); /* "per_address", "global", "queue_full" */

typedef struct srv_admit srv_admit;
/* One connection's socket context: its client address and whether it is served. */
typedef struct srv_conn {
    uint8_t key[16]; /* the client's address (IPv4 v4-mapped) */
    int refused;     /* SRV_REFUSED_NONE: counted in the limits and served */
} srv_conn;
struct srv_config;
struct sockaddr;
/* The soft limits in force: --conn-max / --conn-per-ip, else the larger of the
 * SRV_CONN_* default and 8 x n_parallel: a load of 4 x n_parallel clients from
 * one address has room for the connections being replaced. */
unsigned srv_conn_limit(const struct srv_config *c);
unsigned srv_conn_per_addr_limit(const struct srv_config *c);
srv_admit *srv_admit_create(const struct srv_config *c);
void srv_admit_free(srv_admit *a);
/* A new connection from peer: counted and served, or refused (no count). NULL: out of memory. */
srv_conn *srv_admit_open(srv_admit *a, const struct sockaddr *peer);
void srv_admit_close(srv_admit *a, srv_conn *c);

/* ---- the request log (server_log.c) ---- */

/* The log sink: one line (no newline) per request that reached a route; may be
 * called from any of the server's threads, one line per call. */
typedef void (*srv_log_fn)(void *user, const char *line);

#define SRV_LOG_UNKNOWN_MAX 256 /* bytes of unrecognised field names kept per request */

/* What the log line of one request says (its connection's, then its srv_req's). */
typedef struct srv_log_rec {
    double t0;                 /* kvi_time_ms at the request's routing */
    double wall0;              /* seconds since the epoch then */
    char method[12], path[96]; /* as sent; bytes outside printable ASCII are '?' */
    char client[48];           /* the peer's address */
    char id[48];               /* the generation's id ("" for other routes) */
    int status;                /* HTTP status sent (0: none yet) */
    bool gen;                  /* a generation: the token figures below are set */
    int32_t n_prompt, n_cached, n_gen;
    double ttft_ms; /* submit to first token (-1: no token) */
    const char *finish;
    char unknown[SRV_LOG_UNKNOWN_MAX];  /* unrecognised body fields, comma-separated */
    char left_out[SRV_LOG_UNKNOWN_MAX]; /* what the route left out of the request (hosted tools) */
    char notes[128]; /* how the request was taken, one word each (special_text_recognised) */
    bool handed;     /* its srv_req logs it when freed */
} srv_log_rec;

/* ---- the server ---- */

typedef struct srv_config {
    const char *host;
    int port;               /* 0: any free port */
    const char *api_key;    /* NULL: no authentication */
    const char *model_name; /* what `model` may name (alias or file name without .gguf) */
    int n_ctx;
    const char *ctx_policy;      /* the engine's context policy (--ctx-policy), NULL: error */
    kvi_sampler_params sampling; /* defaults, as `kvinfer run` */
    bool quiet;
    bool special_in_content; /* Hugging Face's tokenization: special text recognised in message text too */
    bool no_reasoning;       /* --reasoning-format none: <think> text stays in content */
    int content_format;      /* kvi_content_format (--chat-template-content-format); AUTO: detected */
    /* HTTP limits; 0: the SRV_* default below */
    int timeout_s;        /* SRV_TIMEOUT_S */
    size_t body_max;      /* SRV_BODY_MAX */
    unsigned conn_max;    /* SRV_CONN_MAX */
    unsigned conn_per_ip; /* SRV_CONN_PER_IP */
    /* operations (cli/cmd_serve.c's flags; zero: off) */
    bool strict_model; /* --strict-model: a `model` other than model_name is a 404 */
    int32_t n_predict; /* -n: most tokens any request generates (0: no cap) */
    /* -l: a logit bias added to every request's own (ids < n_vocab, biases in
     * [-100, 100] or -inf: never sampled) */
    const int32_t *bias_ids; /* [n_bias] */
    const float *bias_vals;  /* [n_bias] */
    int32_t n_bias;
    /* the request log: NULL writes nothing (the library never prints) */
    srv_log_fn log_fn;
    void *log_user;
    bool log_json;           /* one JSON object per line instead of text */
    const char *cors_origin; /* Access-Control-Allow-Origin of every answer (NULL: "*") */
    /* for GET /props and /slots */
    const char *model_path;    /* as given to --model (NULL: unknown) */
    const char *chat_template; /* the Jinja text in use (NULL: the built-in layouts) */
    int n_parallel;            /* sequence slots (the scheduler's n_parallel) */
    /* HTTPS (--ssl-cert-file / --ssl-key-file): PEM texts, both or neither */
    const char *tls_cert_pem, *tls_key_pem;
    bool metrics_public; /* GET /metrics without the API key */
    /* stored responses of /v1/responses (server_store.c); 0: the SRV_RESPONSES_* default */
    size_t responses_max;       /* most responses kept (--responses-max) */
    size_t responses_max_bytes; /* most bytes they hold (--responses-max-bytes) */
    /* embeddings and reranking (server_embed.c; --embeddings, --reranking, --pooling) */
    bool embeddings, reranking;
    bool lora_runtime; /* --lora-runtime: POST /v1/load_lora_adapter, /v1/unload_lora_adapter */
    int pooling; /* kvi_pooling; KVI_POOLING_MODEL: the model's */
} srv_config;

#define SRV_RESPONSES_MAX 1024                      /* stored responses kept by default */
#define SRV_RESPONSES_MAX_BYTES ((size_t)256 << 20) /* and their bytes */

typedef struct srv_server {
    srv_config cfg;
    kvi_model *m; /* NULL while loading (GET /health: 503) */
    kvi_engine *e;
    kvi_sched *s;
    struct MHD_Daemon *d;
    srv_admit *admit; /* connections counted against the soft limits (server_admit.c) */
    srv_metrics metrics;
    pthread_mutex_t mu; /* guards `closing` and the id counter */
    bool closing;
    bool draining; /* SIGTERM: new generations get 503, those in flight finish (under mu) */
    int n_active;  /* requests between their first byte and their answer's end (atomic) */
    uint64_t next_id;
    double t_start;
    /* the Jinja chat template (server_template.c); NULL: the built-in layouts */
    kvi_chat_template *tmpl;
    char *bos_text, *eos_text; /* bos_token / eos_token for it (NULL: undefined) */
    char **special;            /* [n_special] texts of the vocabulary's special tokens */
    int n_special;
    bool special_first[256]; /* some special text starts with this byte */
    /* tools and reasoning (server_tools.c), from the Jinja template's text */
    int tool_format;               /* kvi_tool_format; KVI_TOOLS_NONE: tools are refused */
    bool reasons;                  /* the template writes <think> (or harmony analysis) reasoning */
    kvi_grammar_vocab *gv_markers; /* the vocabulary of forced calls (built at the first; under mu) */
    /* what the Jinja template's text reads (server_tools.c), for /v1/responses */
    bool tmpl_think_switch;  /* enable_thinking: reasoning can be switched off */
    bool tmpl_effort;        /* reasoning_effort */
    bool tmpl_reasoning_in;  /* reasoning_content of earlier assistant messages */
    struct srv_store *store; /* stored responses (server_store.c); NULL until the first */
    struct srv_embedder *emb; /* embeddings and reranking (server_embed.c); NULL: not served */
    /* start-up notes (the template in use, its tool format): lines, each ending
     * in "\n", for the caller to show (the library never prints); NULL: none.
     * Freed by srv_template_free. */
    char *notes;
    /* LoRA (server_lora.c): the server-wide scale of each of the engine's adapters,
     * under mu; lora_ready false until copied from the engine's */
    bool lora_ready;
    float lora_scale[KVI_ENGINE_LORA_MAX];
} srv_server;

/* The body limit in force (--body-max, else SRV_BODY_MAX). */
static inline size_t srv_body_max(const srv_server *srv)
{
    return srv->cfg.body_max ? srv->cfg.body_max : SRV_BODY_MAX;
}

/* ---- parsed request (server_json.c) ---- */

/* DRY's "dry_sequence_breakers" of a request: given false keeps llama.cpp's
 * defaults; v[i] points at s[i] (each string cut at 40 bytes, as llama.cpp). */
#define SRV_DRY_BREAKERS_MAX 16
typedef struct srv_dry_breakers {
    bool given;
    int32_t n;
    char s[SRV_DRY_BREAKERS_MAX][41];
    const char *v[SRV_DRY_BREAKERS_MAX];
} srv_dry_breakers;

typedef struct srv_params {
    bool chat;
    int32_t *prompt; /* malloc'd ids */
    int32_t n_prompt;
    int32_t max_tokens; /* 0: until end of generation or a full context */
    int n;
    bool stream, include_usage, ignore_eos;
    bool no_spec; /* kvinfer's "speculative": false (spec2) */
    bool ctx_evict; /* kvinfer's "context_policy": past the context, the server's policy makes room */
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
    /* tools and reasoning (server_tools.c) */
    int tool_choice;    /* SRV_TOOLS_* */
    int tool_format;    /* kvi_tool_format the output is parsed in; KVI_TOOLS_NONE: no tool calls */
    bool reasoning;     /* <think> / analysis text goes to reasoning_content */
    bool in_reasoning;  /* the rendered prompt opened the reasoning (ends with "<think>") */
    bool forced_call;   /* "required" or a named function: the grammar forces the call */
    bool tool_parallel; /* parallel_tool_calls (default true) */
    const kvi_grammar_vocab *grammar_vocab; /* of a forced call's grammar (the server's); NULL: the model's */
    srv_dry_breakers dry;                   /* server_sampling.c */
    bool infill; /* POST /infill: llama.cpp's fields in, its /completion shape out (server_infill.c) */
    int32_t n_lora;                  /* the engine's adapters (server_lora.c) */
    float lora[KVI_ENGINE_LORA_MAX]; /* their scales for this request */
} srv_params;

enum { SRV_TOOLS_NONE, SRV_TOOLS_AUTO, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED };

/* One failure answer: HTTP status plus OpenAI's error object. */
typedef struct srv_err {
    int status;
    const char *type, *code;
    char msg[512];
    char param[96];    /* the field at fault ("" : null); srv_err_set leaves it */
    int retry_after_s; /* > 0: a Retry-After header (a refusal's 503); srv_err_set leaves it */
} srv_err;

int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* {"error":{"message","type","param","code"}} (malloc'd; param null when unset). */
char *srv_error_json(const srv_err *e);
/* Every JSON body before its endpoint reads it (server_guard.c): valid UTF-8,
 * one JSON value and nothing after it, escapes that form code points, nesting
 * at most SRV_JSON_DEPTH_MAX, no duplicate keys. 0, or -1 with a 400 in *er. */
int srv_body_check(const char *body, size_t len, srv_err *er);
/* Parses a /v1/completions or /v1/chat/completions body. 0, or -1 with *er set. */
int srv_parse_request(srv_server *srv, const char *body, size_t len, bool chat, srv_params *p, srv_err *er);
/* The same for a POST /infill body (p->infill set). */
int srv_parse_infill(srv_server *srv, const char *body, size_t len, srv_params *p, srv_err *er);
void srv_params_free(srv_params *p);
/* llama-server's sampling fields (server_sampling.c): typical_p, mirostat*,
 * dry_*, xtc_*, top_n_sigma, dynatemp_*, repeat_last_n, min_keep, samplers, and
 * n_probs (as top_logprobs). 0, or -1 with a 400 naming the field in *er. */
int srv_parse_sampling(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er);
/* The same fields into sp and b; with all, also temperature, top_k, top_p, min_p,
 * the three penalties and seed (a case of `kvinfer sampler`). The *_last_n -1
 * becomes n_ctx. */
int srv_sampling_fields(const cJSON *root, bool all, int n_ctx, kvi_sampler_params *sp, srv_dry_breakers *b,
                        srv_err *er);

/* ---- fill in the middle (server_infill.c) ---- */

/* Whether the prompt is a fill-in-the-middle one: /infill, or "suffix" on /v1/completions. */
bool srv_infill_wanted(const cJSON *root, const srv_params *p);
/* Its ids into p->prompt (after max_tokens was read). 0, or -1 with *er set. */
int srv_infill_prompt(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er);
/* The ids of a fill-in-the-middle body as llama.cpp's server lays them out
 * (/infill's fields, or with openai "prompt" + "suffix"), for a budget of
 * n_batch, n_ctx and n_predict (malloc'd, *n of them), or NULL with *er set (a
 * 400 when the model has no FIM prefix/suffix/middle tokens). */
int32_t *srv_infill_ids(const kvi_model *m, const cJSON *root, bool openai, int n_batch, int n_ctx,
                        int n_predict, int32_t *n, srv_err *er);

/* ---- the chat template (server_template.c) ---- */

/* Sets srv->tmpl from file_text (--chat-template-file, file_name for messages)
 * or, when NULL, the model's tokenizer.chat_template, and notes in srv->notes
 * which template /v1/chat/completions uses. A file that does not parse is an
 * error; a model's template that does not parse falls back to the built-in
 * layouts with a note. 0, or a negative code with err filled. */
int srv_template_init(srv_server *srv, const char *file_text, size_t file_len, const char *file_name,
                      kvi_error *err);
void srv_template_free(srv_server *srv);
/* Appends one line (printf's fmt, no newline) to srv->notes; none when out of memory. */
void srv_note(srv_server *srv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The prompt srv->tmpl renders for a chat body (malloc'd), or NULL with *er
 * set: 400 with the template's message when it raises or the body is bad. */
char *srv_template_render(srv_server *srv, const char *body, size_t len, srv_err *er);
/* The prompt's token ids for a chat body (malloc'd, *n of them), or NULL with
 * *er set as srv_template_render does: special tokens written by the template
 * are recognised, special-token text inside the body's strings (contents,
 * tool results, arguments) stays plain text (see server_template.c).
 * *in_reasoning: the prompt ends by opening a <think> block. */
int32_t *srv_template_ids(srv_server *srv, const char *body, size_t len, int32_t *n, bool *in_reasoning,
                          srv_err *er);
/* The chat prompt as text for a chat body (POST /apply-template): the Jinja
 * rendering, or the built-in layout's tokens shown with their special text.
 * Malloc'd, or NULL with *er set. */
char *srv_chat_prompt_text(srv_server *srv, const char *body, size_t len, srv_err *er);

/* ---- one request in flight (server_http.c builds, a route family formats) ---- */

struct srv_req;
struct srv_choice;
struct MHD_Connection;

/* A route family's wire format: how its requests' tokens, ends and errors are
 * written. OpenAI's completions and chat (server_json.c: srv_api_openai) is
 * one; every other family (a file of its own in server/) translates its body
 * into the shared request model (srv_params) and gives its own formatters, so
 * scheduling, stop strings, tool-call parsing and logprobs are written once.
 * The sse_* functions run with r->mu held and append to r->out; false: out of
 * memory. state_free (may be NULL) frees r->api_state with the request. */
typedef struct srv_api {
    const char *name; /* "openai", ...: the request log's route family */
    bool (*sse_token)(struct srv_req *r, struct srv_choice *c, const char *piece, size_t n);
    bool (*sse_final)(struct srv_req *r);
    char *(*response_json)(struct srv_req *r); /* the non-streamed body (malloc'd) */
    char *(*error_json)(const srv_err *e);     /* the family's error body (malloc'd) */
    void (*state_free)(void *state);
} srv_api;

extern const srv_api srv_api_openai;
extern const srv_api srv_api_messages; /* Anthropic's Messages API (server_messages.c) */

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
    bool done, stopped;   /* stopped: a stop string matched */
    const char *stop_hit; /* the stop string that matched (one of req->p.stop), or NULL */
    kvi_finish finish;
    kvi_usage usage;
    double t_last;
    struct srv_req *req;
    int index;
    srv_lp *lp; /* [n_lp] one per generated token, when logprobs were asked */
    int32_t n_lp, cap_lp;
    /* content / reasoning / tool calls of text (server_tools.c); NULL: text is the content */
    kvi_chat_output *co;
    size_t co_fed;                       /* bytes of text fed to co */
    size_t sent_content, sent_reasoning; /* bytes of co's results streamed */
    int sent_calls;                      /* calls streamed */
} srv_choice;

typedef struct srv_req {
    srv_server *srv;
    const srv_api *api;     /* the route family that formats it */
    void *api_state;        /* the family's own per-request data (api->state_free frees it), or NULL */
    kvi_sched *sched;       /* the scheduler its choices were submitted to */
    kvi_sched_stats st_end; /* its stats when the last choice ended (on the scheduler's thread) */
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
    int err_code; /* the KVI_E_* of the error: KVI_E_TIMEOUT (a pipeline rank that stopped
                     answering) is a 503, the rest 500 */
    char err_msg[512];
    double t_submit;
    srv_log_rec log; /* log.handed: the request writes its log line when freed */
} srv_req;

/* Appends n bytes to r->out (caller holds r->mu). False: out of memory. */
bool srv_out_append(srv_req *r, const char *s, size_t n);

/* OpenAI's formatters (srv_api_openai): the SSE event of a token, or the final
 * ones (server_json.c). The caller holds r->mu. Returns false when out of memory. */
bool srv_sse_token(srv_req *r, srv_choice *c, const char *piece, size_t n);
bool srv_sse_final(srv_req *r);
/* Queues "data: <o>\n\n" and frees o (caller holds r->mu). False when out of memory. */
bool srv_sse_event(srv_req *r, cJSON *o);
/* The same with an "event: <o.type>" line first (Anthropic's and the Responses
 * API's typed events); false also when o has no string "type". */
bool srv_sse_named(srv_req *r, cJSON *o);
/* /infill's answers in llama.cpp's /completion shape (server_infill.c), OpenAI's errors. */
extern const srv_api srv_api_infill;
/* Records the logprobs of the choice's next token (caller holds r->mu; offset =
 * the text's length now, before the token's text is appended). */
bool srv_logprobs_push(srv_choice *c, int32_t token, float logprob, const int32_t *top_ids,
                       const float *top_lps, int32_t n_top);
/* Appends n bytes to r->out, the stream's queued bytes (caller holds r->mu). */
bool srv_out_append(srv_req *r, const char *s, size_t n);
/* The non-streamed response body (malloc'd). */
char *srv_response_json(srv_req *r);
/* usage object with prompt_tokens_details and kvinfer's timings */
cJSON *srv_usage_json(srv_req *r);

/* ---- tools and reasoning (server_tools.c) ---- */

/* The template's tool-call format and reasoning (logged); template_text NULL: none. */
void srv_tools_init(srv_server *srv, const char *template_text);
void srv_tools_free(srv_server *srv);
/* "tools", "tool_choice", "parallel_tool_calls" of a chat body, checked (after
 * "grammar"/"response_format", before the messages). 0, or -1 with *er set. */
int srv_parse_tools(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er);
/* After the messages (the prompt decides whether the reply opens inside a
 * reasoning block): for "required" or a named function, the grammar that forces
 * the call. 0, or -1 with *er set. */
int srv_tools_grammar(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er);
/* The text a generated token adds: its plain piece, or for a control token
 * the parser reads (a tool-call or reasoning marker) its special text. */
int32_t srv_token_text(const srv_req *r, int32_t tok, char *buf, size_t cap);
/* The choice's parser when its request needs one (KVI_E_NOMEM on failure). */
int srv_output_init(srv_req *r, srv_choice *c);
void srv_output_free(srv_choice *c);
/* Feeds c->text up to byte upto; finish: all of it, then the end. False: out of memory. */
bool srv_output_feed(srv_choice *c, size_t upto);
bool srv_output_finish(srv_choice *c);
bool srv_output_has_calls(const srv_choice *c);
/* Adds to the delta d what was parsed since the last one (reasoning_content,
 * content, tool_calls); whole UTF-8 characters unless final. Whether it added any. */
bool srv_output_delta(srv_req *r, srv_choice *c, cJSON *d, bool final);
/* message.content (null beside calls when empty), reasoning_content, tool_calls. */
void srv_output_message(srv_req *r, srv_choice *c, cJSON *m);

/* ---- Anthropic's Messages API (server_messages.c) ---- */

/* Whether url is one of its routes (/v1/messages and below): errors there,
 * even those found before the route runs, take Anthropic's shape. */
bool srv_messages_path(const char *url);
/* An Anthropic body translated and parsed into *p (count: a count_tokens
 * body, max_tokens not required), as the route does for a request without an
 * anthropic-beta header. 0, or -1 with *er set. */
int srv_messages_parse(srv_server *srv, const char *body, size_t len, bool count, srv_params *p, srv_err *er);
/* POST /v1/messages and /v1/messages/count_tokens (body already checked by
 * srv_body_check). Returns the enum MHD_Result. */
int srv_messages(srv_server *srv, struct MHD_Connection *con, const char *url, const char *body, size_t len);

/* ---- the HTTP layer (server_http.c) ---- */

/* A new generation request of family api (refs 2, id "<id_prefix>-<n>"), its
 * r->p not yet filled: the caller parses into it, then calls srv_answer (or
 * srv_req_discard). NULL when out of memory. */
srv_req *srv_req_new(srv_server *srv, const srv_api *api, const char *id_prefix);
void srv_req_discard(srv_req *r);
/* Submits r's choices and answers on con: streamed (api->sse_*), whole
 * (api->response_json) or an error (api->error_json). Takes r. Returns the
 * enum MHD_Result to hand back to libmicrohttpd. */
int srv_answer(srv_server *srv, struct MHD_Connection *con, srv_req *r);
/* A JSON answer (takes body: malloc'd; NULL answers 500 out of memory) / the
 * family's error answer. Return enum MHD_Result. */
int srv_send_body(struct MHD_Connection *con, int status, char *body);
int srv_send_error(struct MHD_Connection *con, const srv_api *api, const srv_err *e);

/* Quick reads of the scheduler from a handler hold srv->mu, under which
 * shutdown marks the server closing before it frees the scheduler: the
 * scheduler (then srv_sched_leave), or NULL when closing (nothing to leave). */
kvi_sched *srv_sched_enter(srv_server *srv);
void srv_sched_leave(srv_server *srv);

int srv_start(srv_server *srv, kvi_error *err); /* binds, serves in its own threads */
int srv_bound_port(srv_server *srv);
/* A graceful stop's first half: new generations get 503 in their family's
 * shape and GET /health says "shutting down", while the requests in flight
 * go on; returns once none is left (true) or after timeout_ms (false). */
bool srv_drain(srv_server *srv, double timeout_ms);
void srv_stop(srv_server *srv);

/* ---- the request log (server_log.c) ---- */

/* A set of body field names a route recognises (the rest are named in the log). */
typedef struct srv_field_set {
    const char *const *names;
    size_t n;
} srv_field_set;

/* OpenAI's completions / chat fields, with llama.cpp's and kvinfer's own;
 * llama.cpp's /infill fields. */
extern const srv_field_set srv_fields_completions, srv_fields_chat, srv_fields_infill;

/* Starts the log record of a request on this connection thread: the record the
 * calls below fill until srv_log_end. */
void srv_log_begin(srv_log_rec *rec, struct MHD_Connection *con, const char *method, const char *url);
/* Writes rec's line unless a request took it (srv_log_take), and unbinds it. */
void srv_log_end(srv_server *srv, srv_log_rec *rec);
/* The record bound to this thread, or NULL (outside a route, e.g. in tests). */
srv_log_rec *srv_log_current(void);
/* Names obj's members that are in none of the n sets in the current record. */
void srv_log_unknown(const cJSON *obj, const srv_field_set *sets, int n);
/* Adds name to the current record's left_out list (what a route dropped from
 * the request, e.g. a hosted tool it cannot run). */
void srv_log_left_out(const char *name);
/* Adds a note (one word, e.g. special_text_recognised) to the current record. */
void srv_log_note(const char *word);
/* The current record becomes r's (r logs it when freed: srv_log_request). */
void srv_log_take(srv_req *r);
/* r's line, with its tokens, first-token time and finish (when r->log.handed). */
void srv_log_request(srv_req *r);
/* Formats and writes one record through srv->cfg.log_fn. */
void srv_log_write(srv_server *srv, const srv_log_rec *rec);

/* ---- llama.cpp's introspection routes (server_props.c) ---- */

/* GET /props: the default generation settings, slots, model, template. */
int srv_props_ep(srv_server *srv, struct MHD_Connection *con);
/* GET /slots: what each of the --parallel sequence slots holds now. */
int srv_slots_ep(srv_server *srv, struct MHD_Connection *con);
/* ---- LoRA adapters (server_lora.c) ---- */

/* A request's adapter scales into p: its "lora" list ([{"id": N, "scale": S}],
 * adapters not listed at 0), or the adapter its "model" names (scale 1, the others
 * 0), else the server-wide scales. 0, or -1 with *er set (400). */
int srv_lora_parse(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er);
/* Whether name is one of the adapters' names (the file name less ".gguf"). */
bool srv_lora_named(const srv_server *srv, const char *name);
/* The adapters as models of GET /v1/models (vLLM): {"id": name, "object": "model",
 * "parent": the base model's name, "owned_by"} appended to data. */
void srv_lora_models(const srv_server *srv, cJSON *data);
/* GET /lora-adapters: [{"id", "path", "scale"}]; POST: a list like a request's
 * "lora" sets the server-wide scales (adapters not listed at 0). */
int srv_lora_ep(srv_server *srv, struct MHD_Connection *con, bool post, const char *body, size_t len);
/* POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter
 * {"lora_name"} (vLLM's), with --lora-runtime only (else 403): a loaded adapter gets
 * the next id at server-wide scale 0 (requests select it by name as the model or by
 * their lora list); an unloaded one stops being selectable at once and is freed when
 * the requests using it end. */
int srv_lora_load_ep(srv_server *srv, struct MHD_Connection *con, bool load, const char *body, size_t len);

/* ---- the Responses API (server_responses.c, server_store.c) ---- */

/* POST /v1/responses (body checked by srv_body_check), GET and DELETE
 * /v1/responses/{id}. Return enum MHD_Result. */
int srv_responses_create(srv_server *srv, struct MHD_Connection *con, const char *body, size_t len);
int srv_responses_get(srv_server *srv, struct MHD_Connection *con, const char *id);
int srv_responses_delete(srv_server *srv, struct MHD_Connection *con, const char *id);
/* A /v1/responses body translated and parsed into *p, as the route does but
 * without a connection (the fuzz target). 0, or -1 with *er set. */
int srv_responses_parse(srv_server *srv, const char *body, size_t len, srv_params *p, srv_err *er);

/* The store of responses ("store": true), bounded by cfg.responses_max and
 * cfg.responses_max_bytes (the oldest evicted first). Thread-safe. */
/* Keeps a response: its turn's items (input then output, a JSON array) and
 * the response object (JSON); takes both strings. prev: the previous
 * response's id ("" none). 0, or KVI_E_NOMEM (nothing kept, strings freed). */
int srv_store_put(srv_server *srv, const char *id, const char *prev, char *items, char *response);
/* A copy of the stored response object (malloc'd), or NULL when unknown. */
char *srv_store_response(srv_server *srv, const char *id);
/* The conversation up to and including response id: the items of each
 * response of its chain, oldest first (a new array), or NULL with *missing
 * (>= 48 bytes) set to the first id of the chain that is not stored, or
 * empty when out of memory. */
cJSON *srv_store_chain(srv_server *srv, const char *id, char *missing);
/* Removes response id; whether it was stored. */
bool srv_store_delete(srv_server *srv, const char *id);
void srv_store_free(srv_server *srv);

/* ---- embeddings and reranking (server_embed.c, server_rerank.c) ---- */

/* Serves POST /v1/embeddings, /embedding(s) and, with pooling rank, the rerank
 * routes (/v1/rerank, /rerank, /v1/reranking, /reranking) with e: an engine of
 * srv->m of its own, never the scheduler's, which srv_embed_free frees (after
 * srv_stop). pooling KVI_POOLING_MODEL: the model's. 0, or a negative KVI_E_*
 * with err set (rank without a classification head; e is not taken then). */
int srv_embed_attach(srv_server *srv, kvi_engine *e, kvi_pooling pooling, kvi_error *err);
void srv_embed_free(srv_server *srv);
/* Whether url is one of the routes above. */
bool srv_embed_path(const char *url);
/* Answers a POST to one of them (body checked by srv_body_check). Returns the enum MHD_Result. */
int srv_embed_route(srv_server *srv, struct MHD_Connection *con, const char *url, const char *body,
                    size_t len);
/* A generation route on an encoder-only model: true with a 400 in *er. */
bool srv_embed_refuses(const srv_server *srv, const char *url, srv_err *er);
/* "model" of a body: a string, any name unless --strict-model. 0, or -1 with *er set. */
int srv_check_model(const srv_server *srv, const cJSON *root, srv_err *er);

/* ---- the web page (server_page.c) ---- */
extern const char srv_page_html[];

#endif
