/*
 * server_http.c — HTTP with libmicrohttpd: routing, bodies, authentication,
 * and the life of one generation request between a connection thread and the
 * scheduler's engine thread.
 *
 * A connection's body is gathered into conn_ctx (at most SRV_BODY_MAX bytes are
 * kept; a larger body is read to the end and answered 413). A generation
 * request becomes an srv_req with refs = 2: the engine thread drops its
 * reference when the last choice is done, the connection when its response is
 * freed. Streaming: the response is a callback that blocks on the request's
 * condition variable until SSE bytes are queued (one event per token); when the
 * client goes away, libmicrohttpd frees the response and we cancel every choice
 * still running, which frees their sequences within one step. Non-streamed
 * requests wait for the end in the connection thread, looking every 10 ms
 * whether the client closed its socket (EOF or an error on a non-consuming
 * peek): then every choice is cancelled, the same way, and the connection is
 * dropped without an answer. (A client that half-closes after sending its
 * request reads as gone too; HTTP clients do not do that.)
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct conn_ctx {
    char *body; /* [cap] NUL-terminated */
    size_t len, cap;
    bool too_large;
    size_t header_bytes; /* names and values of the request's headers */
    srv_log_rec log;     /* the request log's record, from routing on */
} conn_ctx;

static enum MHD_Result header_bytes(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    *(size_t *)cls += (key ? strlen(key) : 0) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

static void req_release(srv_req *r)
{
    pthread_mutex_lock(&r->mu);
    const int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left > 0) return;
    srv_log_request(r);
    for (int i = 0; i < SRV_MAX_N; i++) {
        free(r->ch[i].text);
        free(r->ch[i].lp);
        srv_output_free(&r->ch[i]);
    }
    free(r->out);
    srv_params_free(&r->p);
    if (r->api->state_free) r->api->state_free(r->api_state);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static bool text_append(srv_choice *c, const char *s, size_t n)
{
    if (c->len + n + 1 > c->cap) {
        size_t cap = (c->len + n + 1) * 2;
        char *nt = realloc(c->text, cap);
        if (!nt) return false;
        c->text = nt;
        c->cap = cap;
    }
    memcpy(c->text + c->len, s, n);
    c->len += n;
    c->text[c->len] = 0;
    return true;
}

/* Bytes at the end of the text that may be the start of a stop string. */
static size_t stop_holdback(const srv_req *r, const srv_choice *c)
{
    size_t hold = 0;
    for (int k = 0; k < r->p.n_stop; k++) {
        const size_t sl = strlen(r->p.stop[k]);
        for (size_t h = sl - 1; h > hold; h--)
            if (h <= c->len && !memcmp(c->text + c->len - h, r->p.stop[k], h)) {
                hold = h;
                break;
            }
    }
    return hold;
}

static bool on_token(void *user, int32_t tok)
{
    srv_choice *c = user;
    srv_req *r = c->req;
    srv_server *srv = r->srv;
    char small[256];
    int32_t n = srv_token_text(r, tok, small, sizeof small);
    const double now = kvi_time_ms();
    if (c->n_tokens > 0)
        srv_hist_observe(&srv->metrics, &srv->metrics.itl, (now - c->t_last) / 1e3);
    else
        srv_hist_observe(&srv->metrics, &srv->metrics.ttft, (now - r->t_submit) / 1e3);
    c->t_last = now;
    pthread_mutex_lock(&r->mu);
    c->n_tokens++;
    const size_t before = c->len;
    bool ok = text_append(c, small, (size_t)n);
    bool more = ok;
    for (int k = 0; ok && k < r->p.n_stop; k++) {
        const size_t sl = strlen(r->p.stop[k]);
        size_t from = before >= sl ? before - sl + 1 : 0;
        const char *hit = NULL;
        for (size_t i = from; i + sl <= c->len; i++)
            if (!memcmp(c->text + i, r->p.stop[k], sl)) {
                hit = c->text + i;
                break;
            }
        if (hit) {
            c->len = (size_t)(hit - c->text);
            c->text[c->len] = 0;
            c->stopped = true;
            c->stop_hit = r->p.stop[k];
            more = false;
        }
    }
    /* the parser reads only text no stop string can still cut */
    if (c->co && ok) ok = srv_output_feed(c, more ? c->len - stop_holdback(r, c) : c->len);
    if (r->p.stream && ok && c->co) {
        ok = r->api->sse_token(r, c, NULL, 0);
        pthread_cond_broadcast(&r->cv);
    } else if (r->p.stream && ok) {
        size_t ready = more ? c->len - stop_holdback(r, c) : c->len;
        if (ready < c->sent) ready = c->sent;
        ready = c->sent + kvi_utf8_complete_prefix(c->text + c->sent, ready - c->sent);
        if (!more) ready = c->sent; /* the final event carries the rest */
        ok = r->api->sse_token(r, c, c->text + c->sent, ready - c->sent);
        c->sent = ready;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return more && ok;
}

/* Before on_token for the same token: its logprobs, formatted with its event. */
static void on_logprobs(void *user, int32_t tok, float lp, const int32_t *ids, const float *lps, int32_t n)
{
    srv_choice *c = user;
    pthread_mutex_lock(&c->req->mu);
    srv_logprobs_push(c, tok, lp, ids, lps, n);
    pthread_mutex_unlock(&c->req->mu);
}

static void on_done(void *user, kvi_finish f, const kvi_usage *u, const kvi_error *err)
{
    srv_choice *c = user;
    srv_req *r = c->req;
    srv_server *srv = r->srv;
    pthread_mutex_lock(&r->mu);
    c->done = true;
    kvi_error oom = { .code = KVI_E_NOMEM, .msg = "out of memory (parsing the output)" };
    if (!srv_output_finish(c) && f != KVI_FINISH_ERROR) {
        f = KVI_FINISH_ERROR;
        err = &oom;
    }
    c->finish = c->stopped ? KVI_FINISH_STOP : f;
    c->usage = *u;
    if (f == KVI_FINISH_ERROR) {
        r->error = true;
        r->err_code = err ? err->code : 0;
        snprintf(r->err_msg, sizeof r->err_msg, "%s", err && err->msg[0] ? err->msg : "generation failed");
    }
    const bool last = ++r->n_done == r->p.n;
    /* the engine's figures for usage.timings.kv, read here where the scheduler
     * is certainly alive (a handler may answer after shutdown freed it) */
    if (last) kvi_sched_stats_get(r->sched, &r->st_end);
    /* counted before the client can see the end (the final event or the answer),
     * so /metrics read after a response already includes it (lock order: r->mu,
     * then metrics.mu; nothing takes them the other way round) */
    pthread_mutex_lock(&srv->metrics.mu);
    if (f == KVI_FINISH_CANCELLED)
        srv->metrics.requests_cancelled++;
    else if (f == KVI_FINISH_ERROR)
        srv->metrics.requests_error++;
    else if (last)
        srv->metrics.requests_ok++;
    srv->metrics.prompt_tokens += last ? (uint64_t)u->prompt_tokens : 0;
    srv->metrics.completion_tokens += (uint64_t)u->completion_tokens;
    pthread_mutex_unlock(&srv->metrics.mu);
    if (last) {
        srv_hist_observe(&srv->metrics, &srv->metrics.e2e, (kvi_time_ms() - r->t_submit) / 1e3);
        if (r->p.stream) r->api->sse_final(r);
        r->finished = true;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    if (last) req_release(r);
}

/* ---- responses ---- */

/* The server the connection thread is answering for (set by the handler; the
 * responders read its CORS origin). */
static _Thread_local const srv_server *tl_srv;

static const char *cors_origin(void)
{
    return tl_srv && tl_srv->cfg.cors_origin ? tl_srv->cfg.cors_origin : "*";
}

/* A CORS preflight (OPTIONS on any path): 204, the origin, the methods, the
 * headers the browser asked for (else the ones the API reads), a day's cache. */
static enum MHD_Result send_preflight(struct MHD_Connection *con)
{
    srv_log_rec *rec = srv_log_current();
    if (rec) rec->status = 204;
    const char *asked = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", cors_origin());
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            asked && *asked ? asked
                                            : "Authorization, Content-Type, x-api-key, anthropic-version, "
                                              "anthropic-beta, OpenAI-Organization, OpenAI-Project");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    enum MHD_Result ret = MHD_queue_response(con, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* An answer; retry_after_s > 0 adds Retry-After (a refusal) and closes the
 * connection after it (a refused connection stays refused). */
static enum MHD_Result send_text_retry(struct MHD_Connection *con, int status, const char *type, char *body,
                                       int retry_after_s)
{
    srv_log_rec *rec = srv_log_current();
    if (rec) rec->status = body ? status : 500;
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of "
                                  "memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Type", "application/json");
        enum MHD_Result ret = MHD_queue_response(con, 500, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", cors_origin());
    if (retry_after_s > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after_s);
        MHD_add_response_header(resp, "Retry-After", ra);
        MHD_add_response_header(resp, "Connection", "close");
    }
    enum MHD_Result ret = MHD_queue_response(con, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *con, int status, const char *type, char *body)
{
    return send_text_retry(con, status, type, body, 0);
}

static enum MHD_Result send_json(struct MHD_Connection *con, int status, cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_text(con, status, "application/json", s);
}

static enum MHD_Result send_error(struct MHD_Connection *con, const srv_err *e)
{
    return send_text(con, e->status, "application/json", srv_error_json(e));
}

int srv_send_body(struct MHD_Connection *con, int status, char *body)
{
    return send_text(con, status, "application/json", body);
}

int srv_send_error(struct MHD_Connection *con, const srv_api *api, const srv_err *e)
{
    return send_text_retry(con, e->status, "application/json", api->error_json(e), e->retry_after_s);
}

/* Counts a refusal in /metrics and names it in the request's log line. */
static void count_refusal(srv_server *srv, int reason)
{
    pthread_mutex_lock(&srv->metrics.mu);
    srv->metrics.refused[reason]++;
    pthread_mutex_unlock(&srv->metrics.mu);
    char note[32];
    snprintf(note, sizeof note, "refused_%s", srv_refusal_name(reason));
    srv_log_note(note);
}

/* ---- streaming ---- */

/* Waits for SSE bytes; when none come for half the connection timeout (a long
 * prefill before the first token), answers an SSE comment line, which every
 * client skips, so that the connection is not closed as silent. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_req *r = cls;
    static const char keep_alive[] = ": keep-alive\n\n";
    const int timeout_s = r->srv->cfg.timeout_s > 0 ? r->srv->cfg.timeout_s : SRV_TIMEOUT_S;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_s > 1 ? timeout_s / 2 : 1;
    bool idle = false;
    pthread_mutex_lock(&r->mu);
    while (r->out_off == r->out_len && !r->finished && !idle)
        idle = pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT;
    ssize_t n;
    if (r->out_off < r->out_len) {
        size_t k = r->out_len - r->out_off;
        if (k > max) k = max;
        memcpy(buf, r->out + r->out_off, k);
        r->out_off += k;
        n = (ssize_t)k;
    } else if (!r->finished && max >= sizeof keep_alive - 1) {
        memcpy(buf, keep_alive, sizeof keep_alive - 1);
        n = (ssize_t)(sizeof keep_alive - 1);
    } else if (!r->finished) {
        n = 0; /* libmicrohttpd calls again */
    } else {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void cancel_unfinished(srv_req *r)
{
    uint64_t ids[SRV_MAX_N];
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->p.n; i++)
        if (!r->ch[i].done && r->ch[i].sched_id) ids[n++] = r->ch[i].sched_id;
    pthread_mutex_unlock(&r->mu);
    kvi_sched *s = __atomic_load_n(&r->srv->s, __ATOMIC_ACQUIRE);
    for (int i = 0; s && i < n; i++) kvi_sched_cancel(s, ids[i]);
}

/* Whether the client of con has closed its end (EOF or a socket error). */
static bool client_gone(struct MHD_Connection *con)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd pf = { ci->connect_fd, POLLIN, 0 };
    if (poll(&pf, 1, 0) <= 0) return false;
    if (pf.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
    char b;
    const ssize_t k = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void sse_free(void *cls)
{
    srv_req *r = cls;
    cancel_unfinished(r);
    req_release(r);
}

/* ---- generation endpoints ---- */

srv_req *srv_req_new(srv_server *srv, const srv_api *api, const char *id_prefix)
{
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->srv = srv;
    r->api = api;
    r->refs = 2;
    r->created = (long)time(NULL);
    r->t_submit = kvi_time_ms();
    pthread_mutex_lock(&srv->mu);
    const uint64_t num = ++srv->next_id;
    pthread_mutex_unlock(&srv->mu);
    snprintf(r->id, sizeof r->id, "%s-%llu", id_prefix, (unsigned long long)num);
    srv_log_rec *rec = srv_log_current();
    if (rec) snprintf(rec->id, sizeof rec->id, "%s", r->id);
    return r;
}

/* Frees a request that was never submitted (no reference given away). */
void srv_req_discard(srv_req *r)
{
    srv_params_free(&r->p);
    if (r->api->state_free) r->api->state_free(r->api_state);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Submits the n choices (the same prompt, seeds seed, seed+1, ...) until one is
 * refused; returns how many were submitted, *er set when fewer than n. The
 * caller holds srv->mu (no submit after shutdown began) and r->mu (no choice
 * can finish before all are counted). */
static int submit_choices(srv_server *srv, srv_req *r, srv_err *er)
{
    int submitted = 0;
    r->sched = srv->s;
    for (int i = 0; i < r->p.n; i++) {
        srv_choice *c = &r->ch[i];
        c->req = r;
        c->index = i;
        if (srv_output_init(r, c) != 0) {
            srv_err_set(er, 500, "server_error", NULL, "out of memory");
            break;
        }
        kvi_request rq;
        memset(&rq, 0, sizeof rq);
        rq.prompt = r->p.prompt;
        rq.n_prompt = r->p.n_prompt;
        rq.sampling = r->p.sp;
        rq.sampling.seed = r->p.sp.seed + (uint64_t)i;
        rq.max_tokens = r->p.max_tokens;
        rq.ignore_eos = r->p.ignore_eos;
        rq.no_spec = r->p.no_spec;
        rq.ctx_evict = r->p.ctx_evict;
        rq.grammar = r->p.grammar; /* the scheduler never speculates for it */
        rq.bias_ids = r->p.bias_ids;
        rq.bias_vals = r->p.bias_vals;
        rq.n_bias = r->p.n_bias;
        rq.dry_breakers = r->p.dry.given ? r->p.dry.v : NULL;
        rq.n_dry_breakers = r->p.dry.n;
        rq.lora_scales = r->p.n_lora ? r->p.lora : NULL;
        rq.n_lora_scales = r->p.n_lora;
        rq.on_token = on_token;
        rq.on_done = on_done;
        rq.user = c;
        if (r->p.logprobs) {
            rq.on_logprobs = on_logprobs;
            rq.top_logprobs = r->p.top_logprobs;
        }
        kvi_error err = { 0 };
        uint64_t id = 0;
        int rc = kvi_sched_submit(srv->s, &rq, &id, &err);
        if (rc != 0) {
            if (rc == KVI_E_QUEUE_FULL) {
                srv_err_set(er, 503, "server_overloaded", "server_overloaded",
                            "The server is over capacity (%s); retry later", err.msg);
                er->retry_after_s = SRV_RETRY_AFTER_S;
                count_refusal(srv, SRV_REFUSED_QUEUE_FULL);
            } else if (rc == KVI_E_CONTEXT_FULL || rc == KVI_E_NO_KV_SPACE)
                srv_err_set(er, 400, "invalid_request_error", "context_length_exceeded", "%s", err.msg);
            else
                srv_err_set(er, 400, "invalid_request_error", "invalid_value", "%s", err.msg);
            break;
        }
        c->sched_id = id;
        submitted++;
    }
    return submitted;
}

/* Not every choice was submitted (the unsubmitted ones already count as done):
 * cancels the others, waits for them and answers the error. */
static enum MHD_Result answer_refused(srv_server *srv, struct MHD_Connection *con, srv_req *r, int submitted,
                                      const srv_err *er)
{
    const bool none = submitted == 0;
    pthread_mutex_lock(&srv->metrics.mu);
    if (er->retry_after_s <= 0) srv->metrics.requests_error++; /* refusals are counted apart */
    pthread_mutex_unlock(&srv->metrics.mu);
    cancel_unfinished(r);
    if (none) req_release(r); /* the engine side's reference */
    pthread_mutex_lock(&r->mu);
    while (!none && !r->finished) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    const srv_api *api = r->api;
    req_release(r);
    return srv_send_error(con, api, er);
}

/* The streamed answer: a response that reads the request's SSE bytes. */
static enum MHD_Result answer_stream(struct MHD_Connection *con, srv_req *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_reader, r, sse_free);
    if (!resp) {
        sse_free(r);
        return MHD_NO;
    }
    r->log.status = 200;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", cors_origin());
    enum MHD_Result ret = MHD_queue_response(con, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Waits for the end of every choice, cancelling them when the client goes away
 * meanwhile; returns whether it went away. */
static bool wait_finished(struct MHD_Connection *con, srv_req *r)
{
    bool gone = false;
    pthread_mutex_lock(&r->mu);
    while (!r->finished) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L; /* a few steps of a small model */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT && !gone && !r->finished &&
            client_gone(con)) {
            gone = true;
            pthread_mutex_unlock(&r->mu);
            cancel_unfinished(r);
            pthread_mutex_lock(&r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return gone;
}

/* The non-streamed answer, after the end: the whole response, or the error;
 * nothing when the client went away. */
static enum MHD_Result answer_final(struct MHD_Connection *con, srv_req *r)
{
    if (wait_finished(con, r)) {
        r->log.status = 499; /* nginx's "client closed request": nothing was sent */
        req_release(r);
        return MHD_NO;
    }
    enum MHD_Result ret;
    if (r->error) {
        srv_err er = { 0 };
        if (r->err_code == KVI_E_TIMEOUT)
            srv_err_set(&er, 503, "server_error", "pipeline_failed", "%s", r->err_msg);
        else
            srv_err_set(&er, 500, "server_error", NULL, "%s", r->err_msg);
        ret = srv_send_error(con, r->api, &er);
        r->log.status = er.status;
    } else {
        ret = send_text(con, 200, "application/json", r->api->response_json(r));
        r->log.status = 200;
    }
    req_release(r);
    return ret;
}

/* Submission of a parsed request's n choices, then the streamed or the final answer. */
int srv_answer(srv_server *srv, struct MHD_Connection *con, srv_req *r)
{
    srv_err er = { 0 };
    pthread_mutex_lock(&srv->mu);
    if (srv->closing || srv->draining) {
        pthread_mutex_unlock(&srv->mu);
        const srv_api *api = r->api;
        srv_req_discard(r);
        srv_err_set(&er, 503, "server_error", "shutting_down", "the server is shutting down");
        return srv_send_error(con, api, &er);
    }
    pthread_mutex_lock(&r->mu);
    const int submitted = submit_choices(srv, r, &er);
    if (submitted < r->p.n) {
        /* choices never submitted count as done; the others are cancelled */
        r->p.stream = false;
        r->n_done += r->p.n - submitted;
    }
    const bool refused = submitted < r->p.n;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&srv->mu);
    if (refused) return answer_refused(srv, con, r, submitted, &er);
    srv_log_take(r);
    if (r->p.stream) return answer_stream(con, r);
    return answer_final(con, r);
}

/* A completion or chat request (OpenAI's routes), or llama.cpp's /infill. */
static enum MHD_Result generate(srv_server *srv, struct MHD_Connection *con, conn_ctx *cc, bool chat, bool infill)
{
    srv_err er = { 0 };
    srv_req *r = srv_req_new(srv, infill ? &srv_api_infill : &srv_api_openai, chat ? "chatcmpl" : "cmpl");
    if (!r) {
        srv_err_set(&er, 500, "server_error", NULL, "out of memory");
        return send_error(con, &er);
    }
    const char *body = cc->body ? cc->body : "";
    if (infill ? srv_parse_infill(srv, body, cc->len, &r->p, &er)
               : srv_parse_request(srv, body, cc->len, chat, &r->p, &er)) {
        srv_req_discard(r);
        return send_error(con, &er);
    }
    return (enum MHD_Result)srv_answer(srv, con, r);
}

/* ---- small endpoints ---- */

static enum MHD_Result tokenize_ep(srv_server *srv, struct MHD_Connection *con, conn_ctx *cc)
{
    srv_err er = { 0 };
    cJSON *root = cJSON_ParseWithLength(cc->body ? cc->body : "", cc->len);
    const cJSON *c = root ? cJSON_GetObjectItemCaseSensitive(root, "content") : NULL;
    if (!c && root) c = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!root || !cJSON_IsString(c)) {
        cJSON_Delete(root);
        srv_err_set(&er, 400, "invalid_request_error", NULL, "expected {\"content\": \"text\"}");
        return send_error(con, &er);
    }
    static const char *const names[] = { "content", "prompt", "add_special" };
    srv_log_unknown(root, &(const srv_field_set){ names, 3 }, 1);
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(root, "add_special");
    const bool add_special = cJSON_IsTrue(as);
    const size_t len = strlen(c->valuestring);
    int32_t n = kvi_tokenize(srv->m, c->valuestring, len, add_special, false, NULL, 0);
    int32_t *ids = n >= 0 ? malloc(((size_t)n + 1) * sizeof *ids) : NULL;
    if (ids) n = kvi_tokenize(srv->m, c->valuestring, len, add_special, false, ids, n);
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t i = 0; ids && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    cJSON_Delete(root);
    return send_json(con, 200, o);
}

/* POST /apply-template (llama.cpp's name): {"prompt": the chat prompt's text}. */
static enum MHD_Result apply_template_ep(srv_server *srv, struct MHD_Connection *con, conn_ctx *cc)
{
    srv_err er = { 0 };
    char *text = srv_chat_prompt_text(srv, cc->body, cc->len, &er);
    if (!text) return send_error(con, &er);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    return send_json(con, 200, o);
}

static enum MHD_Result detokenize_ep(srv_server *srv, struct MHD_Connection *con, conn_ctx *cc)
{
    srv_err er = { 0 };
    cJSON *root = cJSON_ParseWithLength(cc->body ? cc->body : "", cc->len);
    const cJSON *t = root ? cJSON_GetObjectItemCaseSensitive(root, "tokens") : NULL;
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(root);
        srv_err_set(&er, 400, "invalid_request_error", NULL, "expected {\"tokens\": [ids]}");
        return send_error(con, &er);
    }
    static const char *const names[] = { "tokens" };
    srv_log_unknown(root, &(const srv_field_set){ names, 1 }, 1);
    const int n = cJSON_GetArraySize(t);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, t)
    {
        if (!ids || !cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= kvi_n_vocab(srv->m) ||
            v->valuedouble != (double)(int32_t)v->valuedouble) {
            free(ids);
            cJSON_Delete(root);
            srv_err_set(&er, 400, "invalid_request_error", "invalid_value",
                        "'tokens[%d]' is not a token id in [0, %d)", i, (int)kvi_n_vocab(srv->m));
            return send_error(con, &er);
        }
        ids[i++] = (int32_t)v->valuedouble;
    }
    cJSON_Delete(root);
    int32_t need = kvi_detokenize(srv->m, ids, n, NULL, 0, false, false);
    char *txt = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (txt) kvi_detokenize(srv->m, ids, n, txt, (size_t)need + 1, false, false);
    free(ids);
    char *clean = txt ? kvi_utf8_sanitize(txt, (size_t)need) : NULL;
    free(txt);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", clean ? clean : "");
    free(clean);
    return send_json(con, 200, o);
}

/* Quick reads of the scheduler from a handler (stats, views, metrics) hold
 * srv->mu, under which shutdown marks the server closing before it frees the
 * scheduler: the scheduler, or NULL (then nothing to unlock) when closing. */
kvi_sched *srv_sched_enter(srv_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    kvi_sched *s = srv->closing ? NULL : __atomic_load_n(&srv->s, __ATOMIC_ACQUIRE);
    if (!s) pthread_mutex_unlock(&srv->mu);
    return s;
}

void srv_sched_leave(srv_server *srv) { pthread_mutex_unlock(&srv->mu); }

/* One tier of the prefix cache as o[name] (bytes, blocks, hits, misses, ...). */
static void kv_tier_json(cJSON *o, const char *name, const kvi_tier_stats *t)
{
    cJSON *j = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(j, "bytes", (double)t->bytes);
    cJSON_AddNumberToObject(j, "bytes_max", (double)t->bytes_max);
    cJSON_AddNumberToObject(j, "blocks", (double)t->blocks);
    cJSON_AddNumberToObject(j, "hits", (double)t->hits);
    cJSON_AddNumberToObject(j, "misses", (double)t->misses);
    cJSON_AddNumberToObject(j, "evictions", (double)t->evictions);
    cJSON_AddNumberToObject(j, "load_bytes", (double)t->load_bytes);
    cJSON_AddNumberToObject(j, "store_bytes", (double)t->store_bytes);
    cJSON_AddNumberToObject(j, "dropped", (double)t->dropped);
}

static enum MHD_Result kv_ep(srv_server *srv, struct MHD_Connection *con)
{
    kvi_sched_stats st;
    kvi_sched *sched = srv_sched_enter(srv);
    if (!sched) {
        srv_err er = { 0 };
        srv_err_set(&er, 503, "server_error", NULL, "the server is shutting down");
        return send_error(con, &er);
    }
    kvi_sched_stats_get(sched, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "blocks_used", st.engine.kv_blocks_used);
    cJSON_AddNumberToObject(o, "blocks_total", st.engine.kv_blocks_total);
    cJSON_AddNumberToObject(o, "block_size", st.engine.kv_block_size);
    cJSON_AddNumberToObject(o, "bytes_used", (double)st.engine.kv_bytes);
    cJSON_AddNumberToObject(o, "bytes_budget", (double)st.engine.kv_bytes_budget);
    cJSON_AddNumberToObject(o, "bytes_per_token", (double)st.engine.kv_bytes_per_token);
    cJSON_AddNumberToObject(o, "tokens", st.engine.n_tokens);
    cJSON_AddNumberToObject(o, "running", st.n_running);
    cJSON_AddNumberToObject(o, "waiting", st.n_waiting);
    cJSON_AddNumberToObject(o, "steps", (double)st.n_steps);
    cJSON_AddNumberToObject(o, "prefill_tokens", (double)st.n_prefill_tokens);
    cJSON_AddNumberToObject(o, "decode_tokens", (double)st.n_decode_tokens);
    cJSON_AddNumberToObject(o, "preemptions", (double)st.n_preemptions);
    /* the web page's pool view: held blocks (shared: more than one holder),
     * blocks kept for the prefix cache, allocated free blocks, never-allocated */
    cJSON_AddNumberToObject(o, "blocks_shared", st.engine.kv_blocks_shared);
    cJSON_AddNumberToObject(o, "blocks_cached", st.engine.kv_blocks_cached);
    cJSON_AddNumberToObject(o, "blocks_free", st.engine.kv_blocks_free);
    cJSON_AddNumberToObject(o, "prefix_hit_tokens", (double)st.n_cached_tokens);
    kv_tier_json(o, "tier_ram", &st.engine.kv_tier_ram);
    kv_tier_json(o, "tier_disk", &st.engine.kv_tier_disk);
    /* layer kinds: window layers hold a block only while it is within their window */
    cJSON_AddNumberToObject(o, "bytes_per_token_global", (double)st.engine.kv_bytes_per_token_global);
    cJSON_AddNumberToObject(o, "bytes_per_token_window", (double)st.engine.kv_bytes_per_token_window);
    /* sparse attention (deepseek32): the indexer's keys, a second row per token and layer */
    cJSON_AddNumberToObject(o, "bytes_per_token_indexer", (double)st.engine.kv_bytes_per_token_indexer);
    cJSON_AddNumberToObject(o, "n_layers_window", st.engine.kv_n_layers_window);
    cJSON_AddNumberToObject(o, "window", st.engine.kv_window);
    cJSON_AddNumberToObject(o, "bytes_global", (double)st.engine.kv_bytes_global);
    cJSON_AddNumberToObject(o, "bytes_window", (double)st.engine.kv_bytes_window);
    cJSON_AddNumberToObject(o, "window_parts_held", st.engine.kv_wparts_held);
    cJSON_AddNumberToObject(o, "window_parts_released", (double)st.engine.kv_wparts_released);
    /* recurrent layers (hybrid models): a fixed state per sequence, reserved in the budget */
    cJSON_AddNumberToObject(o, "n_layers_recurrent", st.engine.kv_n_layers_recurrent);
    cJSON_AddNumberToObject(o, "bytes_state_per_seq", (double)st.engine.kv_bytes_state_seq);
    cJSON_AddNumberToObject(o, "bytes_state", (double)st.engine.kv_bytes_state);
    cJSON_AddNumberToObject(o, "state_slots", st.engine.kv_state_slots);
    cJSON_AddNumberToObject(o, "state_snapshots", st.engine.kv_snapshots);
    cJSON_AddNumberToObject(o, "state_snapshot_blocks", st.engine.kv_blocks_snapshot);
    enum { MAX_VIEWS = 64, MAX_IDS = 16384 };
    kvi_sched_seq_view *v = malloc(MAX_VIEWS * sizeof *v);
    int32_t *ids = malloc(MAX_IDS * sizeof *ids);
    cJSON *seqs = cJSON_AddArrayToObject(o, "seqs");
    const int n = v && ids ? kvi_sched_kv_view(sched, v, MAX_VIEWS, ids, MAX_IDS) : 0;
    srv_sched_leave(srv);
    for (int i = 0; i < n && i < MAX_VIEWS; i++) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "id", (double)v[i].id);
        cJSON_AddNumberToObject(q, "prompt_tokens", v[i].n_prompt);
        cJSON_AddNumberToObject(q, "tokens", v[i].n_tokens);
        cJSON_AddNumberToObject(q, "kv_tokens", v[i].n_kv);
        cJSON_AddNumberToObject(q, "n_blocks", v[i].n_blocks);
        cJSON *b = cJSON_AddArrayToObject(q, "blocks");
        for (int32_t k = 0; k < v[i].n_shown; k++)
            cJSON_AddItemToArray(b, cJSON_CreateNumber(v[i].blocks[k]));
        cJSON_AddItemToArray(seqs, q);
    }
    free(v);
    free(ids);
    return send_json(con, 200, o);
}

static bool authorized(srv_server *srv, struct MHD_Connection *con)
{
    if (!srv->cfg.api_key) return true;
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "x-api-key"); /* Anthropic's */
    return (h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, srv->cfg.api_key)) ||
           (x && !strcmp(x, srv->cfg.api_key));
}

static enum MHD_Result route(srv_server *srv, struct MHD_Connection *con, conn_ctx *cc, const char *url,
                             const char *method);

/* A request on a connection past a soft limit: 503 + Retry-After in the route
 * family's error shape, counted, logged, and the connection closed. */
static enum MHD_Result refuse(srv_server *srv, struct MHD_Connection *con, const char *url, int reason)
{
    srv_err er = { 0 };
    const bool per_addr = reason == SRV_REFUSED_PER_ADDRESS;
    srv_err_set(&er, 503, "server_overloaded", "server_overloaded",
                "The server is over capacity (%u connections are open %s, --conn-%s); retry later",
                per_addr ? srv_conn_per_addr_limit(&srv->cfg) : srv_conn_limit(&srv->cfg),
                per_addr ? "from your address" : "in all", per_addr ? "per-ip" : "max");
    er.retry_after_s = SRV_RETRY_AFTER_S;
    count_refusal(srv, reason);
    /* Anthropic's shape below /v1/messages, OpenAI's elsewhere (/v1/responses' too) */
    const srv_api *api = srv_messages_path(url) ? &srv_api_messages : &srv_api_openai;
    return (enum MHD_Result)srv_send_error(con, api, &er);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls)
{
    srv_server *srv = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        __atomic_add_fetch(&srv->n_active, 1, __ATOMIC_ACQ_REL);
        MHD_get_connection_values(con, MHD_HEADER_KIND, header_bytes, &cc->header_bytes);
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        const size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cc->too_large || cc->len + n > srv_body_max(srv)) {
            cc->too_large = true;
            return MHD_YES;
        }
        if (cc->len + n + 1 > cc->cap) {
            size_t cap = (cc->len + n + 1) * 2;
            if (cap > srv_body_max(srv) + 1) cap = srv_body_max(srv) + 1;
            char *nb = realloc(cc->body, cap);
            if (!nb) return MHD_NO;
            cc->body = nb;
            cc->cap = cap;
        }
        memcpy(cc->body + cc->len, upload_data, n);
        cc->len += n;
        cc->body[cc->len] = 0;
        return MHD_YES;
    }
    srv_log_begin(&cc->log, con, method, url);
    tl_srv = srv;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    const srv_conn *sc = ci ? ci->socket_context : NULL;
    const enum MHD_Result ret = sc && sc->refused            ? refuse(srv, con, url, sc->refused)
                                : !strcmp(method, "OPTIONS") ? send_preflight(con)
                                                             : route(srv, con, cc, url, method);
    tl_srv = NULL;
    srv_log_end(srv, &cc->log);
    return ret;
}

/* A whole request: its route's answer. */
static enum MHD_Result route(srv_server *srv, struct MHD_Connection *con, conn_ctx *cc, const char *url,
                             const char *method)
{
    srv_err er = { 0 };
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    /* the error shape of the route family (Anthropic's below /v1/messages) */
    const srv_api *api = srv_messages_path(url) ? &srv_api_messages : &srv_api_openai;
    kvi_sched *sched = __atomic_load_n(&srv->s, __ATOMIC_ACQUIRE);
    if (get && !strcmp(url, "/"))
        return send_text(con, 200, "text/html; charset=utf-8", strdup(srv_page_html));
    if (get && !strcmp(url, "/health")) {
        pthread_mutex_lock(&srv->mu);
        const bool draining = srv->draining;
        pthread_mutex_unlock(&srv->mu);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", draining ? "shutting down" : sched ? "ok" : "loading");
        return send_json(con, sched && !draining ? 200 : 503, o);
    }
    if (!sched) {
        pthread_mutex_lock(&srv->mu);
        const bool closing = srv->closing;
        pthread_mutex_unlock(&srv->mu);
        if (closing) {
            srv_err_set(&er, 503, "server_error", "shutting_down", "the server is shutting down");
            return srv_send_error(con, api, &er);
        }
        srv_err_set(&er, 503, "server_error", "model_loading", "the model is still loading");
        return srv_send_error(con, api, &er);
    }
    if (cc->header_bytes > SRV_HEADER_MAX) {
        srv_err_set(&er, 431, "invalid_request_error", "request_header_fields_too_large",
                    "the request headers exceed %u bytes", SRV_HEADER_MAX);
        return srv_send_error(con, api, &er);
    }
    if (cc->too_large) {
        srv_err_set(&er, 413, "invalid_request_error", "request_too_large",
                    "the request body exceeds %zu bytes", srv_body_max(srv));
        return srv_send_error(con, api, &er);
    }
    if (get && !strcmp(url, "/metrics") && (srv->cfg.metrics_public || authorized(srv, con))) {
        kvi_sched *ms = srv_sched_enter(srv);
        char *text = ms ? srv_metrics_render(&srv->metrics, ms) : NULL;
        if (ms) srv_sched_leave(srv);
        if (!ms) {
            srv_err_set(&er, 503, "server_error", NULL, "the server is shutting down");
            return srv_send_error(con, api, &er);
        }
        return send_text(con, 200, "text/plain; version=0.0.4", text);
    }
    if (!authorized(srv, con)) {
        srv_err_set(&er, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided");
        return srv_send_error(con, api, &er);
    }
    if (get && !strcmp(url, "/v1/models")) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *a = cJSON_AddArrayToObject(o, "data");
        cJSON *mo = cJSON_CreateObject();
        cJSON_AddStringToObject(mo, "id", srv->cfg.model_name);
        cJSON_AddStringToObject(mo, "object", "model");
        cJSON_AddNumberToObject(mo, "created", (double)(long)srv->t_start);
        cJSON_AddStringToObject(mo, "owned_by", "kvinfer");
        cJSON_AddNumberToObject(mo, "context_length", srv->cfg.n_ctx);
        cJSON_AddItemToArray(a, mo);
        srv_lora_models(srv, a);
        return send_json(con, 200, o);
    }
    if (get && !strcmp(url, "/v1/kv")) return kv_ep(srv, con);
    if (get && !strcmp(url, "/props")) return (enum MHD_Result)srv_props_ep(srv, con);
    if (get && !strcmp(url, "/lora-adapters")) return (enum MHD_Result)srv_lora_ep(srv, con, false, NULL, 0);
    if (get && !strcmp(url, "/slots")) return (enum MHD_Result)srv_slots_ep(srv, con);
    if (post && srv_body_check(cc->body, cc->len, &er)) return srv_send_error(con, api, &er);
    if (post && !strcmp(url, "/lora-adapters"))
        return (enum MHD_Result)srv_lora_ep(srv, con, true, cc->body, cc->len);
    if (post && (!strcmp(url, "/v1/load_lora_adapter") || !strcmp(url, "/v1/unload_lora_adapter")))
        return (enum MHD_Result)srv_lora_load_ep(srv, con, url[4] == 'l', cc->body, cc->len);
    if (post && srv_embed_path(url))
        return (enum MHD_Result)srv_embed_route(srv, con, url, cc->body, cc->len);
    if (post && srv_embed_refuses(srv, url, &er)) return srv_send_error(con, api, &er);
    if (post && !strcmp(url, "/v1/completions")) return generate(srv, con, cc, false, false);
    if (post && srv_messages_path(url)) return srv_messages(srv, con, url, cc->body, cc->len);
    if (post && !strcmp(url, "/v1/chat/completions")) return generate(srv, con, cc, true, false);
    if (post && !strcmp(url, "/infill")) return generate(srv, con, cc, false, true);
    if (post && !strcmp(url, "/tokenize")) return tokenize_ep(srv, con, cc);
    if (post && !strcmp(url, "/detokenize")) return detokenize_ep(srv, con, cc);
    if (post && !strcmp(url, "/apply-template")) return apply_template_ep(srv, con, cc);
    if (post && !strcmp(url, "/v1/responses"))
        return (enum MHD_Result)srv_responses_create(srv, con, cc->body, cc->len);
    if ((get || !strcmp(method, "DELETE")) && !strncmp(url, "/v1/responses/", 14) && url[14] &&
        !strchr(url + 14, '/'))
        return (enum MHD_Result)(get ? srv_responses_get(srv, con, url + 14)
                                     : srv_responses_delete(srv, con, url + 14));
    srv_err_set(&er, 404, "invalid_request_error", "not_found", "no route %s %.200s", method, url);
    return srv_send_error(con, api, &er);
}

/* Every connection is counted against the soft limits when it opens (refused
 * ones are marked and answered 503 by the handler) and uncounted when it closes. */
static void conn_notify(void *cls, struct MHD_Connection *con, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe)
{
    srv_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = srv_admit_open(srv->admit, ci ? ci->client_addr : NULL);
    } else {
        srv_admit_close(srv->admit, *socket_context);
        *socket_context = NULL;
    }
}

static void completed(void *cls, struct MHD_Connection *con, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    conn_ctx *cc = *con_cls;
    if (cc) {
        free(cc->body);
        free(cc);
        __atomic_sub_fetch(&((srv_server *)cls)->n_active, 1, __ATOMIC_ACQ_REL);
    }
    *con_cls = NULL;
}

int srv_start(srv_server *srv, kvi_error *err)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)srv->cfg.port);
    if (inet_pton(AF_INET, srv->cfg.host, &addr.sin_addr) != 1) {
        if (err) snprintf(err->msg, sizeof err->msg, "--host '%s' is not an IPv4 address", srv->cfg.host);
        return KVI_E_INVALID;
    }
    const bool tls = srv->cfg.tls_cert_pem != NULL;
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        if (err) snprintf(err->msg, sizeof err->msg, "this libmicrohttpd was built without TLS (GnuTLS)");
        return KVI_E_INVALID;
    }
    if (tls != (srv->cfg.tls_key_pem != NULL)) {
        if (err) snprintf(err->msg, sizeof err->msg, "TLS needs both a certificate and its key");
        return KVI_E_INVALID;
    }
    struct MHD_OptionItem tls_opts[] = {
        { tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)srv->cfg.tls_cert_pem },
        { MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)srv->cfg.tls_key_pem },
        { MHD_OPTION_END, 0, NULL },
    };
    srv->t_start = (double)time(NULL);
    if (!srv->admit && !(srv->admit = srv_admit_create(&srv->cfg))) {
        if (err) snprintf(err->msg, sizeof err->msg, "out of memory");
        return KVI_E_NOMEM;
    }
    /* libmicrohttpd's limits reset the connection: far above the soft limits */
    const unsigned hard = srv_conn_limit(&srv->cfg) * SRV_CONN_HARD_FACTOR;
    unsigned hard_addr = srv_conn_per_addr_limit(&srv->cfg) * SRV_CONN_HARD_FACTOR;
    if (hard_addr > hard) hard_addr = hard;
    srv->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                                  (tls ? MHD_USE_TLS : 0),
                              (uint16_t)srv->cfg.port, NULL, NULL, handler, srv, MHD_OPTION_SOCK_ADDR, &addr,
                              MHD_OPTION_NOTIFY_COMPLETED, completed, srv, MHD_OPTION_NOTIFY_CONNECTION,
                              conn_notify, srv, MHD_OPTION_CONNECTION_LIMIT, hard,
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, hard_addr, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)(srv->cfg.timeout_s > 0 ? srv->cfg.timeout_s : SRV_TIMEOUT_S),
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(2 * SRV_HEADER_MAX + 32768),
                              MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!srv->d) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "cannot listen on %s:%d%s", srv->cfg.host, srv->cfg.port,
                     tls ? " with TLS (is the certificate a PEM certificate and the key its PEM private key?)"
                         : "");
        return KVI_E_IO;
    }
    return 0;
}

int srv_bound_port(srv_server *srv)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : srv->cfg.port;
}

bool srv_drain(srv_server *srv, double timeout_ms)
{
    pthread_mutex_lock(&srv->mu);
    srv->draining = true;
    pthread_mutex_unlock(&srv->mu);
    const double end = kvi_time_ms() + timeout_ms;
    const struct timespec tick = { 0, 20 * 1000000L };
    while (__atomic_load_n(&srv->n_active, __ATOMIC_ACQUIRE) > 0) {
        if (kvi_time_ms() >= end) return false;
        nanosleep(&tick, NULL);
    }
    return true;
}

void srv_stop(srv_server *srv)
{
    if (srv->d) MHD_stop_daemon(srv->d);
    srv->d = NULL;
    srv_admit_free(srv->admit);
    srv->admit = NULL;
}
