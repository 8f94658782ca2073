/*
 * cmd_loadgen.c — `kvinfer loadgen`: a load generator for a running
 * OpenAI-compatible server on this machine (loopback only).
 *
 * C worker threads take request numbers 0..N-1 in order; with --rate R request
 * i may not start before its Poisson arrival time (exponential gaps of mean 1/R
 * from a seeded generator). Each request is one HTTP/1.1 connection ("Connection:
 * close") posting a streamed /v1/completions with the prompt as L token ids
 * (the first P shared by every request, the rest drawn per request), max_tokens
 * G and ignore_eos, and reading the server-sent events as they arrive (chunked
 * transfer coding decoded incrementally). Every event carrying a token is
 * timestamped when its bytes are received.
 *
 *   lg_req.tok_t  [n_tok] double   ms since the request was sent, one per token event
 *
 * Metrics follow vLLM's `bench serve`: TTFT = first token time; TPOT per request
 * = (e2e - ttft) / (tokens - 1) over requests with more than one token; ITL =
 * every gap between consecutive token events of a request; throughputs are
 * completed requests and output tokens over the wall time of the whole run.
 * Percentiles interpolate linearly between order statistics (numpy's default).
 *
 * --turns T: --requests conversations of T chat turns each (cli/loadgen_turns.h),
 * --concurrency of them at once; request c * T + t is conversation c's turn t,
 * sent when turn t - 1 has been answered. The report is per turn.
 *
 * --trace FILE: the requests of a Mooncake-format trace (cli/loadgen_trace.h),
 * each sent at its scaled timestamp; the report adds the prompt positions the
 * server took from its cache (usage.prompt_tokens_details.cached_tokens) and
 * those it computed. With --slo-ttft / --slo-tpot, goodput is the completed
 * requests whose TTFT and TPOT are within both bounds, per second of the run
 * (DistServe's definition); a request with one token has no TPOT and meets it.
 *
 * --embeddings: each request posts a batch of --batch texts of a seeded corpus
 * (--texts of them, 20..200 words each; cli/loadgen_embed.h) to /v1/embeddings
 * and reads the whole answer; the report is texts/s, tokens/s (the server's
 * usage.prompt_tokens) and request latency.
 *
 * Invariants: the run is bounded (N requests, and --timeout seconds overall,
 * after which in-flight requests are abandoned and counted as failed); only
 * 127.0.0.0/8, localhost and ::1 are ever connected to (checked before any
 * socket is opened; no name is resolved).
 */
#include "cli/cli.h"
#include "cli/loadgen_embed.h"
#include "cli/loadgen_trace.h"
#include "cli/loadgen_turns.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char loadgen_help[] =
    "usage: kvinfer loadgen --url URL [options]\n"
    "\n"
    "Sends streamed completions (\"stream\": true, \"ignore_eos\": true) to a server on\n"
    "this machine and reports request throughput, output tokens/s, and mean, median\n"
    "and p99 of time to first token (TTFT), time per output token (TPOT) and\n"
    "inter-token latency (ITL), with vLLM `bench serve`'s definitions.\n"
    "\n"
    "  --url URL               http://127.0.0.1:8080 (only 127.0.0.0/8, localhost, [::1]);\n"
    "                          a path other than / is the endpoint (default /v1/completions)\n"
    "  --concurrency C         requests in flight at once (default 1)\n"
    "  --requests N            requests in all (default 16)\n"
    "  --rate R                Poisson arrivals, R requests/s (default: all at once)\n"
    "  --prompt-len L          prompt tokens per request (default 32)\n"
    "  --gen-len G             max_tokens per request (default 128)\n"
    "  --shared-prefix P       first P prompt tokens equal in every request (default 0)\n"
    "  --vocab V               prompt ids are drawn from [3, V) (default 500)\n"
    "  --seed S                seed of prompts and arrivals (default 1)\n"
    "  --timeout SECONDS       bound on the whole run (default 600)\n"
    "  --api-key KEY           sent as \"Authorization: Bearer KEY\"\n"
    "  --model NAME            the request's \"model\" field (default: left out)\n"
    "  --grammar-file F        every request constrained by the GBNF grammar in F (its\n"
    "                          \"grammar\" field), to measure what constrained decoding costs\n"
    "  --lora-each N           request i applies the server's LoRA adapter i mod N alone\n"
    "                          (\"lora\": [{\"id\": i mod N, \"scale\": 1}]), so a batch mixes N\n"
    "                          adapters (kvinfer serve and llama-server read the field)\n"
    "  --trace FILE            replay a Mooncake-format trace (one JSON object a line: timestamp\n"
    "                          ms, input_length, output_length, hash_ids of 512-token blocks);\n"
    "                          equal hash ids give equal token blocks; --gen-len, when given,\n"
    "                          caps output_length; concurrency defaults to 64\n"
    "  --trace-block N         tokens per hash id (default 512; prompts scale by N/512)\n"
    "  --time-scale F          arrival times multiplied by F (default 1; 0.1: ten times faster,\n"
    "                          0: all at once)\n"
    "  --max-requests N        the first N requests of the trace\n"
    "  --slo-ttft MS           goodput: requests with TTFT <= MS (and --slo-tpot) per second\n"
    "  --slo-tpot MS           goodput: requests with TPOT <= MS\n"
    "  --turns T               --requests conversations of T chat turns (/v1/chat/completions):\n"
    "                          each turn's messages are the last turn's, its answer and a new\n"
    "                          user message; reports per turn the prompt positions cached,\n"
    "                          computed and recomputed (held after the last turn, not cached)\n"
    "  --turn-words W          words per user message (default 16)\n"
    "  --embeddings            post batches of texts to /v1/embeddings instead (the default path\n"
    "                          then) and report texts/s and tokens/s (usage.prompt_tokens)\n"
    "  --texts N               the corpus: N texts of 20..200 words (default 256)\n"
    "  --batch B               texts per request (default 16)\n"
    "  --json                  one JSON object on stdout\n"
    "  -h, --help              this help\n";

typedef struct lg_cfg {
    int family; /* AF_INET or AF_INET6 */
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    char host[96]; /* Host header */
    char path[256];
    int concurrency, n_requests, prompt_len, gen_len, shared_prefix, vocab;
    double rate, timeout_s;
    uint64_t seed;
    const char *api_key, *model;
    char *grammar_json; /* --grammar-file's text as a JSON string (malloc'd), or NULL */
    bool embeddings;    /* --embeddings: n_texts texts in requests of batch */
    int n_texts, batch;
    int lora_each; /* --lora-each N: request i names adapter i mod N (its "lora" field), or 0 */
    const char *trace_path;    /* --trace FILE, or NULL */
    lg_trace_opts trace;       /* --trace-block, --time-scale, --max-requests, the --gen-len cap */
    double slo_ttft, slo_tpot; /* ms, 0: no bound */
    int turns, turn_words;     /* --turns (0: off), --turn-words */
} lg_cfg;

/* Growable byte buffer. */
typedef struct lg_buf {
    char *p;
    size_t len, cap;
} lg_buf;

typedef struct lg_req {
    bool ok;
    int status;
    int n_tok;        /* token events */
    int usage_tokens; /* usage.completion_tokens, -1 when absent */
    int n_prompt;     /* prompt tokens sent */
    int cached;       /* usage.prompt_tokens_details.cached_tokens, -1 when absent */
    int usage_prompt; /* usage.prompt_tokens, -1 when absent */
    int dropped;      /* usage.positions_dropped (serve --ctx-policy), 0 when absent */
    lg_buf answer;    /* --turns: the streamed text */
    double e2e;       /* ms */
    double *tok_t;    /* [n_tok] ms since sent */
    int tok_cap;
    char err[200];
} lg_req;

typedef struct lg_run {
    const lg_cfg *cfg;
    lg_req *req;     /* [n_requests] */
    double *arrival; /* [n_requests] ms after start, NULL without --rate */
    int32_t *prefix; /* [shared_prefix] */
    lg_trace trace;  /* --trace: its requests ([n_requests]) */
    pthread_mutex_t mu;
    int next;
    double t0, deadline; /* ms, kvi_time_ms clock */
} lg_run;

/* ---- the loopback-only URL ---- */

static int parse_url(const char *url, lg_cfg *c)
{
    if (strncmp(url, "http://", 7) != 0)
        return cli_error("loadgen: --url '%s' must start with http:// (plain HTTP on this machine)", url);
    const char *h = url + 7, *end;
    char host[64];
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end || (size_t)(end - h - 1) >= sizeof host)
            return cli_error("loadgen: --url '%s': bad [address]", url);
        memcpy(host, h + 1, (size_t)(end - h - 1));
        host[end - h - 1] = 0;
        end++;
    } else {
        end = h + strcspn(h, ":/");
        if ((size_t)(end - h) >= sizeof host || end == h)
            return cli_error("loadgen: --url '%s': bad host", url);
        memcpy(host, h, (size_t)(end - h));
        host[end - h] = 0;
    }
    int64_t port = 80;
    const char *path = end;
    if (*end == ':') {
        char pb[16];
        size_t n = strcspn(end + 1, "/");
        if (n == 0 || n >= sizeof pb) return cli_error("loadgen: --url '%s': bad port", url);
        memcpy(pb, end + 1, n);
        pb[n] = 0;
        if (!cli_parse_i64(pb, 1, 65535, &port))
            return cli_error("loadgen: --url '%s': bad port '%s'", url, pb);
        path = end + 1 + n;
    } else if (*end != '/' && *end != 0) {
        return cli_error("loadgen: --url '%s': bad host", url);
    }
    /* Loopback only, decided on the literal text: no name is ever resolved. */
    struct in_addr v4;
    struct in6_addr v6;
    memset(&c->a4, 0, sizeof c->a4);
    memset(&c->a6, 0, sizeof c->a6);
    if (!strcmp(host, "localhost")) {
        c->family = AF_INET;
        c->a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else if (inet_pton(AF_INET, host, &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) {
        c->family = AF_INET;
        c->a4.sin_addr = v4;
    } else if (inet_pton(AF_INET6, host, &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6)) {
        c->family = AF_INET6;
        c->a6.sin6_addr = v6;
    } else {
        return cli_error("loadgen: refusing host '%s': only loopback servers (127.0.0.0/8, localhost, [::1]) "
                         "may be loaded",
                         host);
    }
    c->a4.sin_family = AF_INET;
    c->a4.sin_port = htons((uint16_t)port);
    c->a6.sin6_family = AF_INET6;
    c->a6.sin6_port = htons((uint16_t)port);
    snprintf(c->host, sizeof c->host, "%s%s%s:%d", c->family == AF_INET6 ? "[" : "", host,
             c->family == AF_INET6 ? "]" : "", (int)port);
    if (*path == 0 || !strcmp(path, "/"))
        path = c->embeddings ? "/v1/embeddings" : c->turns ? "/v1/chat/completions" : "/v1/completions";
    if (strlen(path) >= sizeof c->path || strpbrk(path, " \r\n"))
        return cli_error("loadgen: --url '%s': bad path", url);
    snprintf(c->path, sizeof c->path, "%s", path);
    return 0;
}

/* ---- one request ---- */

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static uint64_t seed_mix(uint64_t seed, uint64_t k)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (k + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 1;
}

/* Request i's prompt ids (malloc'd, *n of them): the trace's, or the shared
 * prefix then ids drawn for request i. */
static int32_t *request_ids(const lg_run *run, int i, int *n)
{
    const lg_cfg *c = run->cfg;
    *n = c->trace_path ? run->trace.req[i].n_prompt : c->prompt_len;
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    if (!ids) return NULL;
    if (c->trace_path) {
        lg_trace_prompt(&run->trace, i, ids);
        return ids;
    }
    uint64_t st = seed_mix(c->seed, (uint64_t)i + 1000);
    for (int k = 0; k < c->prompt_len; k++)
        ids[k] =
            k < c->shared_prefix ? run->prefix[k] : 3 + (int32_t)(xorshift(&st) % (uint64_t)(c->vocab - 3));
    return ids;
}

/* The request body (malloc'd) of request i; r->n_prompt gets its prompt length. */
static char *request_body(const lg_run *run, int i, lg_req *r)
{
    const lg_cfg *c = run->cfg;
    if (c->embeddings) return lg_embed_body(c->seed, c->n_texts, c->batch, i, c->model);
    int n = 0;
    int32_t *ids = request_ids(run, i, &n);
    size_t cap = (size_t)n * 12 + 512, len = 0;
    char *b = ids ? malloc(cap) : NULL;
    if (!b) {
        free(ids);
        return NULL;
    }
    r->n_prompt = n;
    len += (size_t)snprintf(b, cap, "{\"prompt\":[");
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(b + len, cap - len, "%s%d", k ? "," : "", (int)ids[k]);
    free(ids);
    len += (size_t)snprintf(b + len, cap - len,
                            "],\"max_tokens\":%d,\"stream\":true,\"ignore_eos\":true,"
                            "\"stream_options\":{\"include_usage\":true}",
                            c->trace_path ? run->trace.req[i].n_gen : c->gen_len);
    if (c->grammar_json) {
        const size_t gl = strlen(c->grammar_json);
        if (len + gl + 16 > cap) {
            char *nb = realloc(b, len + gl + 64);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap = len + gl + 64;
        }
        len += (size_t)snprintf(b + len, cap - len, ",\"grammar\":%s", c->grammar_json);
    }
    if (c->lora_each > 0) { /* llama.cpp's per-request adapter list, which kvinfer also reads */
        char lb[64];
        const int ll = snprintf(lb, sizeof lb, ",\"lora\":[{\"id\":%d,\"scale\":1}]", i % c->lora_each);
        if (len + (size_t)ll + 16 > cap) {
            char *nb = realloc(b, len + (size_t)ll + 64);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap = len + (size_t)ll + 64;
        }
        len += (size_t)snprintf(b + len, cap - len, "%s", lb);
    }
    if (c->model) {
        cJSON *s = cJSON_CreateString(c->model);
        char *q = s ? cJSON_PrintUnformatted(s) : NULL;
        cJSON_Delete(s);
        if (!q || len + strlen(q) + 16 > cap) {
            free(q);
            free(b);
            return NULL;
        }
        len += (size_t)snprintf(b + len, cap - len, ",\"model\":%s", q);
        free(q);
    }
    snprintf(b + len, cap - len, "}");
    return b;
}

static int lg_connect(const lg_cfg *c)
{
    int fd = socket(c->family, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = { 1, 0 }; /* recv wakes up each second to check the deadline */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const int rc = c->family == AF_INET ? connect(fd, (const struct sockaddr *)&c->a4, sizeof c->a4)
                                        : connect(fd, (const struct sockaddr *)&c->a6, sizeof c->a6);
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n, double deadline)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && kvi_time_ms() < deadline)
            continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

static bool buf_add(lg_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

/* Incremental decoder of the chunked transfer coding. */
typedef struct lg_chunked {
    int state;   /* 0: size line, 1: data, 2: CRLF after data, 3: finished */
    size_t left; /* data bytes left in this chunk */
    char line[32];
    size_t line_len;
} lg_chunked;

/* Decodes raw[0..n) into out. False on a malformed chunk header. */
static bool chunked_feed(lg_chunked *d, const char *raw, size_t n, lg_buf *out)
{
    size_t i = 0;
    while (i < n && d->state != 3) {
        if (d->state == 0) {
            const char ch = raw[i++];
            if (ch == '\n') {
                d->line[d->line_len] = 0;
                char *e;
                const unsigned long long sz = strtoull(d->line, &e, 16);
                if (e == d->line || sz > (1ull << 30)) return false;
                d->line_len = 0;
                d->left = (size_t)sz;
                d->state = sz == 0 ? 3 : 1;
            } else if (ch != '\r') {
                if (d->line_len + 1 >= sizeof d->line) return false;
                d->line[d->line_len++] = ch;
            }
        } else if (d->state == 1) {
            size_t k = n - i < d->left ? n - i : d->left;
            if (!buf_add(out, raw + i, k)) return false;
            i += k;
            d->left -= k;
            if (d->left == 0) d->state = 2;
        } else {
            /* the CRLF that ends a chunk's data */
            if (raw[i++] == '\n') d->state = 0;
        }
    }
    return true;
}

/* Whether the headers in [h, end) hold "Transfer-Encoding: ...chunked". */
static bool header_says_chunked(const char *h, const char *end)
{
    for (const char *p = strstr(h, "\r\n"); p && p < end; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, "Transfer-Encoding:", 18) != 0) continue;
        const char *eol = strstr(p + 2, "\r\n");
        for (const char *q = p + 20; eol && q + 7 <= eol; q++)
            if (!strncasecmp(q, "chunked", 7)) return true;
    }
    return false;
}

static bool add_token_time(lg_req *r, double t)
{
    if (r->n_tok == r->tok_cap) {
        int cap = r->tok_cap ? 2 * r->tok_cap : 256;
        double *p = realloc(r->tok_t, (size_t)cap * sizeof *p);
        if (!p) return false;
        r->tok_t = p;
        r->tok_cap = cap;
    }
    r->tok_t[r->n_tok++] = t;
    return true;
}

/* Handles the complete SSE events in body from *off on (keep_text: their text
 * appended to r->answer). Returns 1 at [DONE], -1 on an error event, 0 otherwise. */
static int sse_scan(lg_req *r, lg_buf *body, size_t *off, double t, bool keep_text)
{
    for (;;) {
        char *start = body->p + *off;
        char *e = strstr(start, "\n\n");
        if (!e) return 0;
        *off = (size_t)(e + 2 - body->p);
        char *d = strstr(start, "data: ");
        if (!d || d > e) continue;
        d += 6;
        if (!strncmp(d, "[DONE]", 6)) return 1;
        cJSON *j = cJSON_ParseWithLength(d, (size_t)(e - d));
        if (!j) {
            snprintf(r->err, sizeof r->err, "malformed event: %.80s", d);
            return -1;
        }
        const cJSON *er = cJSON_GetObjectItem(j, "error");
        if (er) {
            const cJSON *m = cJSON_GetObjectItem(er, "message");
            snprintf(r->err, sizeof r->err, "error event: %.160s", cJSON_IsString(m) ? m->valuestring : "?");
            cJSON_Delete(j);
            return -1;
        }
        const cJSON *u = cJSON_GetObjectItem(j, "usage");
        const cJSON *ct = cJSON_GetObjectItem(u, "completion_tokens");
        if (cJSON_IsNumber(ct)) r->usage_tokens = ct->valueint;
        const cJSON *cached =
            cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), "cached_tokens");
        if (cJSON_IsNumber(cached)) r->cached = cached->valueint;
        const cJSON *pt = cJSON_GetObjectItem(u, "prompt_tokens");
        if (cJSON_IsNumber(pt)) r->usage_prompt = pt->valueint;
        const cJSON *pd = cJSON_GetObjectItem(u, "positions_dropped");
        if (cJSON_IsNumber(pd)) r->dropped = pd->valueint;
        const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *txt = cJSON_GetObjectItem(c0, "text");
        if (!txt) txt = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "delta"), "content");
        if (keep_text && cJSON_IsString(txt) &&
            !buf_add(&r->answer, txt->valuestring, strlen(txt->valuestring))) {
            cJSON_Delete(j);
            snprintf(r->err, sizeof r->err, "out of memory");
            return -1;
        }
        if (c0 && cJSON_IsNull(cJSON_GetObjectItem(c0, "finish_reason")) && !add_token_time(r, t)) {
            cJSON_Delete(j);
            snprintf(r->err, sizeof r->err, "out of memory");
            return -1;
        }
        cJSON_Delete(j);
    }
}

/* Sends body (freed here; NULL: out of memory) as request i and reads its answer into run->req[i]. */
static void run_request(lg_run *run, int i, char *body)
{
    const lg_cfg *c = run->cfg;
    lg_req *r = &run->req[i];
    r->usage_tokens = -1;
    r->cached = -1;
    r->usage_prompt = -1;
    if (!body) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return;
    }
    char head[768];
    const size_t blen = strlen(body);
    int hn = snprintf(
        head, sizeof head,
        "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: kvinfer-loadgen\r\nAccept: text/event-stream\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n%s%s%sContent-Length: %zu\r\n\r\n",
        c->path, c->host, c->api_key ? "Authorization: Bearer " : "", c->api_key ? c->api_key : "",
        c->api_key ? "\r\n" : "", blen);
    const double t_send = kvi_time_ms();
    int fd = hn > 0 && (size_t)hn < sizeof head ? lg_connect(c) : -1;
    if (fd < 0) {
        snprintf(r->err, sizeof r->err, "cannot connect to %s: %s", c->host, strerror(errno));
        free(body);
        return;
    }
    const bool sent =
        send_all(fd, head, (size_t)hn, run->deadline) && send_all(fd, body, blen, run->deadline);
    free(body);
    lg_buf raw = { 0 }, dec = { 0 };
    lg_chunked ck = { 0 };
    size_t hdr_end = 0, raw_used = 0, off = 0;
    bool chunked = false, done = false, failed = !sent;
    if (!sent) snprintf(r->err, sizeof r->err, "send failed");
    char tmp[16384];
    while (!done && !failed) {
        ssize_t k = recv(fd, tmp, sizeof tmp, 0);
        const double t = kvi_time_ms();
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (t > run->deadline) {
                snprintf(r->err, sizeof r->err, "abandoned at the --timeout");
                failed = true;
            }
            continue;
        }
        if (k <= 0) break; /* closed */
        if (!buf_add(&raw, tmp, (size_t)k)) {
            snprintf(r->err, sizeof r->err, "out of memory");
            failed = true;
            break;
        }
        if (hdr_end == 0) {
            char *e = strstr(raw.p, "\r\n\r\n");
            if (!e) {
                if (raw.len > 65536) {
                    snprintf(r->err, sizeof r->err, "response headers too long");
                    failed = true;
                }
                continue;
            }
            hdr_end = (size_t)(e + 4 - raw.p);
            if (sscanf(raw.p, "HTTP/1.%*d %d", &r->status) != 1) {
                snprintf(r->err, sizeof r->err, "not an HTTP response");
                failed = true;
                break;
            }
            chunked = header_says_chunked(raw.p, e);
            raw_used = hdr_end;
        }
        if (raw.len > raw_used) {
            const bool okc = chunked ? chunked_feed(&ck, raw.p + raw_used, raw.len - raw_used, &dec)
                                     : buf_add(&dec, raw.p + raw_used, raw.len - raw_used);
            raw_used = raw.len;
            if (!okc) {
                snprintf(r->err, sizeof r->err, "malformed chunked body");
                failed = true;
                break;
            }
        }
        if (r->status == 200 && dec.len > off && !c->embeddings) {
            const int s = sse_scan(r, &dec, &off, t - t_send, c->turns > 0);
            if (s == 1) done = true;
            if (s < 0) failed = true;
        }
        if (chunked && ck.state == 3) break;
    }
    close(fd);
    r->e2e = kvi_time_ms() - t_send;
    if (!failed && r->status != 200) {
        snprintf(r->err, sizeof r->err, "HTTP %d: %.160s", r->status, dec.p ? dec.p : "");
    } else if (!failed && c->embeddings) {
        r->n_tok = lg_embed_count(c->n_texts, c->batch, i);
        r->ok = lg_embed_check(dec.p, dec.len, r->n_tok, &r->usage_tokens, r->err, sizeof r->err);
    } else if (!failed && !done) {
        snprintf(r->err, sizeof r->err, "stream ended without [DONE] after %d tokens", r->n_tok);
    } else if (!failed) {
        r->ok = r->n_tok > 0;
        if (!r->ok) snprintf(r->err, sizeof r->err, "no token received");
    }
    free(raw.p);
    free(dec.p);
}

static void *worker(void *arg)
{
    lg_run *run = arg;
    for (;;) {
        pthread_mutex_lock(&run->mu);
        const int i = run->next < run->cfg->n_requests && kvi_time_ms() < run->deadline ? run->next++ : -1;
        pthread_mutex_unlock(&run->mu);
        if (i < 0) break;
        if (run->arrival) {
            for (;;) {
                const double wait = run->t0 + run->arrival[i] - kvi_time_ms();
                if (wait <= 0) break;
                if (kvi_time_ms() > run->deadline) break;
                struct timespec ts = { (time_t)(wait / 1000), (long)(fmod(wait, 1000.0) * 1e6) };
                if (wait > 100) ts = (struct timespec){ 0, 100000000L };
                nanosleep(&ts, NULL);
            }
            if (kvi_time_ms() > run->deadline) {
                snprintf(run->req[i].err, sizeof run->req[i].err, "not started before the --timeout");
                continue;
            }
        }
        run_request(run, i, request_body(run, i, &run->req[i]));
    }
    return NULL;
}

/* --turns: conversation ci's turns, one after the other. */
static void run_conversation(lg_run *run, int ci)
{
    const lg_cfg *c = run->cfg;
    lg_conv conv;
    bool ok = lg_conv_init(&conv, c->seed, ci, c->turn_words) == 0;
    for (int t = 0; t < c->turns && ok; t++) {
        lg_req *r = &run->req[ci * c->turns + t];
        run_request(run, ci * c->turns + t, lg_conv_body(&conv, c->gen_len, c->model));
        ok = r->ok && kvi_time_ms() < run->deadline && lg_conv_answer(&conv, r->answer.p) == 0;
        if (!r->ok && !r->err[0]) snprintf(r->err, sizeof r->err, "out of memory");
    }
    lg_conv_free(&conv);
}

static void *conv_worker(void *arg)
{
    lg_run *run = arg;
    const int n_conv = run->cfg->n_requests / run->cfg->turns;
    for (;;) {
        pthread_mutex_lock(&run->mu);
        const int ci = run->next < n_conv && kvi_time_ms() < run->deadline ? run->next++ : -1;
        pthread_mutex_unlock(&run->mu);
        if (ci < 0) break;
        run_conversation(run, ci);
    }
    return NULL;
}

/* ---- statistics ---- */

typedef struct lg_stat {
    double mean, median, p99, max;
    size_t n;
} lg_stat;

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, size_t n, double q)
{
    const double pos = q * (double)(n - 1);
    const size_t lo = (size_t)pos, hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - (double)lo);
}

static lg_stat stat_of(double *v, size_t n)
{
    lg_stat s = { 0, 0, 0, 0, n };
    if (n == 0) return s;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    s.mean = sum / (double)n;
    s.median = quantile(v, n, 0.5);
    s.p99 = quantile(v, n, 0.99);
    s.max = v[n - 1];
    return s;
}

static cJSON *stat_json(cJSON *o, const char *name, lg_stat s)
{
    cJSON *j = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(j, "mean", s.mean);
    cJSON_AddNumberToObject(j, "median", s.median);
    cJSON_AddNumberToObject(j, "p99", s.p99);
    cJSON_AddNumberToObject(j, "max", s.max);
    cJSON_AddNumberToObject(j, "n", (double)s.n);
    return j;
}

static void stat_print(const char *name, const char *unit, lg_stat s)
{
    printf("%-6s %s  mean %9.2f  median %9.2f  p99 %9.2f  max %9.2f  (n %zu)\n", name, unit, s.mean, s.median,
           s.p99, s.max, s.n);
}

/* The flags are loadgen's own: its --model is the request's "model" name (no
 * -m), so none of them is parsed by cli_opt_common. 0: parsed into c, *url and
 * *json; 1: error printed; 2: help printed. */
static int parse_loadgen_args(int argc, char **argv, lg_cfg *c, const char **url_out, bool *json_out)
{
    memset(c, 0, sizeof *c);
    const char *url = NULL;
    bool json = false;
    int64_t conc = 1, nreq = 16, plen = 32, glen = 128, prefix = 0, vocab = 500, timeout = 600, texts = 256,
            batch = 16, lora_each = 0, tblock = LG_TRACE_MOONCAKE_BLOCK, max_req = 0, turns = 0, twords = 16;
    bool conc_given = false, glen_given = false;
    float rate = 0, tscale = 1, slo[2] = { 0, 0 };
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define LG_INT(flag, var, lo, hi)                                                                         \
    if (!strcmp(a, flag)) {                                                                               \
        if (!(v = cli_flag_value(argc, argv, &i))) return 1;                                              \
        if (!cli_parse_i64(v, lo, hi, &var))                                                              \
            return cli_error("loadgen: %s '%s' is not an integer in [%lld, %lld]", a, v, (long long)(lo), \
                             (long long)(hi));                                                            \
        continue;                                                                                         \
    }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(loadgen_help, stdout);
            return 2;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--embeddings")) {
            c->embeddings = true;
            continue;
        }
        if (!strcmp(a, "--url")) {
            if (!(url = cli_flag_value(argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--api-key")) {
            if (!(c->api_key = cli_flag_value(argc, argv, &i))) return 1;
            if (strpbrk(c->api_key, "\r\n")) return cli_error("loadgen: --api-key holds a line break");
            continue;
        }
        if (!strcmp(a, "--model")) {
            if (!(c->model = cli_flag_value(argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--grammar-file")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            size_t gl = 0;
            char *g = cli_read_file(v, &gl);
            if (!g) return cli_error("loadgen: cannot read --grammar-file %s", v);
            cJSON *js = cJSON_CreateString(g);
            free(g);
            free(c->grammar_json);
            c->grammar_json = js ? cJSON_PrintUnformatted(js) : NULL;
            cJSON_Delete(js);
            if (!c->grammar_json) return cli_error("loadgen: out of memory");
            continue;
        }
        if (!strcmp(a, "--rate")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_f32(v, &rate) || !(rate > 0) || !isfinite(rate))
                return cli_error("loadgen: --rate '%s' is not a positive number", v);
            continue;
        }
        if (!strcmp(a, "--trace")) {
            if (!(c->trace_path = cli_flag_value(argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--time-scale") || !strcmp(a, "--slo-ttft") || !strcmp(a, "--slo-tpot")) {
            float *dst = !strcmp(a, "--time-scale") ? &tscale : !strcmp(a, "--slo-ttft") ? &slo[0] : &slo[1];
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_f32(v, dst) || !(*dst >= 0) || !isfinite(*dst))
                return cli_error("loadgen: %s '%s' is not a number >= 0", a, v);
            continue;
        }
        conc_given |= !strcmp(a, "--concurrency");
        glen_given |= !strcmp(a, "--gen-len");
        if (!strcmp(a, "--seed")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_u64(v, &seed)) return cli_error("loadgen: --seed '%s' is not an integer", v);
            continue;
        }
        LG_INT("--concurrency", conc, 1, 1024)
        LG_INT("--requests", nreq, 1, 1000000)
        LG_INT("--prompt-len", plen, 1, 1 << 20)
        LG_INT("--gen-len", glen, 1, 1 << 20)
        LG_INT("--shared-prefix", prefix, 0, 1 << 20)
        LG_INT("--vocab", vocab, 4, 1 << 24)
        LG_INT("--timeout", timeout, 1, 86400)
        LG_INT("--texts", texts, 1, 10000000)
        LG_INT("--batch", batch, 1, 100000)
        LG_INT("--lora-each", lora_each, 1, 1024)
        LG_INT("--trace-block", tblock, 1, 1 << 16)
        LG_INT("--max-requests", max_req, 1, 100000000)
        LG_INT("--turns", turns, 1, 10000)
        LG_INT("--turn-words", twords, 1, 100000)
#undef LG_INT
        return cli_error("loadgen: unknown option '%s' (kvinfer loadgen --help)", a);
    }
    if (!url) return cli_error("loadgen: --url is required (e.g. --url http://127.0.0.1:8080)");
    if (prefix > plen)
        return cli_error("loadgen: --shared-prefix %lld exceeds --prompt-len %lld", (long long)prefix,
                         (long long)plen);
    if (turns && (c->trace_path || c->embeddings))
        return cli_error("loadgen: --turns excludes --trace and --embeddings");
    if (turns && nreq * turns > 100000000) return cli_error("loadgen: --requests x --turns is too many");
    c->turns = (int)turns;
    c->turn_words = (int)twords;
    if (parse_url(url, c) != 0) return 1;
    c->n_texts = (int)texts;
    c->batch = (int)batch;
    c->lora_each = (int)lora_each;
    if (c->embeddings) nreq = (texts + batch - 1) / batch;
    if (c->trace_path && c->embeddings)
        return cli_error("loadgen: --trace and --embeddings exclude each other");
    if (c->trace_path && !conc_given) conc = 64; /* open loop: the trace's arrivals set the load */
    c->trace = (lg_trace_opts){ .block = (int)tblock,
                                .time_scale = tscale,
                                .max_requests = (int)max_req,
                                .gen_cap = glen_given ? (int)glen : 0,
                                .vocab = (int)vocab,
                                .seed = seed };
    c->slo_ttft = slo[0];
    c->slo_tpot = slo[1];
    c->concurrency = (int)(conc < nreq || c->trace_path ? conc : nreq); /* a trace's count: once read */
    c->n_requests = (int)(turns ? nreq * turns : nreq);
    c->prompt_len = (int)plen;
    c->gen_len = (int)glen;
    c->shared_prefix = (int)prefix;
    c->vocab = (int)vocab;
    c->rate = rate;
    c->timeout_s = (double)timeout;
    c->seed = seed;
    *url_out = url;
    *json_out = json;
    return 0;
}

/* The shared prefix and, with --rate, the Poisson arrival times. */
static void plan_requests(lg_run *run)
{
    const lg_cfg *c = run->cfg;
    uint64_t st = seed_mix(c->seed, 0);
    for (int k = 0; k < c->shared_prefix; k++)
        run->prefix[k] = 3 + (int32_t)(xorshift(&st) % (uint64_t)(c->vocab - 3));
    if (c->trace_path) {
        for (int i = 0; i < c->n_requests; i++) run->arrival[i] = run->trace.req[i].arrival;
    } else if (run->arrival) {
        /* Poisson process: exponential gaps, the first request at time 0 */
        uint64_t ar = seed_mix(c->seed, 1);
        double t = 0;
        for (int i = 0; i < c->n_requests; i++) {
            run->arrival[i] = t;
            const double u = ((double)(xorshift(&ar) >> 11) + 0.5) / 9007199254740992.0;
            t += -log(u) / c->rate * 1000.0;
        }
    }
}

/* Runs every request on the worker threads (th: concurrency of them); the wall time in ms. */
static double run_all(lg_run *run, pthread_t *th)
{
    pthread_mutex_init(&run->mu, NULL);
    run->t0 = kvi_time_ms();
    run->deadline = run->t0 + run->cfg->timeout_s * 1000.0;
    int started = 0;
    for (int t = 0; t < run->cfg->concurrency; t++) {
        if (pthread_create(&th[t], NULL, run->cfg->turns ? conv_worker : worker, run) != 0) break;
        started++;
    }
    if (started == 0) (run->cfg->turns ? conv_worker : worker)(run);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    const double duration_ms = kvi_time_ms() - run->t0;
    pthread_mutex_destroy(&run->mu);
    return duration_ms;
}

/* The metrics of a run (see the file comment); the arrays are sorted by stat_of. */
typedef struct lg_summary {
    size_t n_ok;
    size_t n_good; /* completed within the SLO (all completed without one) */
    long long out_tokens;
    long long in_tokens;   /* prompt tokens of the completed requests */
    long long cached;      /* of those, positions the server took from its cache */
    size_t n_cached;       /* requests whose usage said how many */
    const char *first_err; /* the first failed request's error, NULL when none failed */
    double dur_s, req_tp, tok_tp, goodput;
    lg_stat ttft, tpot, itl, e2e;
} lg_summary;

/* Gathers the requests' times; ttft, tpot, e2e hold n_requests values, itl every gap. */
static lg_summary summarize(const lg_run *run, double duration_ms, double *ttft, double *tpot, double *e2e,
                            double *itl)
{
    const lg_cfg *c = run->cfg;
    lg_summary m = { 0 };
    size_t n_tpot = 0, k_itl = 0;
    for (int i = 0; i < c->n_requests; i++) {
        const lg_req *r = &run->req[i];
        if (!r->ok) {
            if (!m.first_err) m.first_err = r->err[0] ? r->err : "not run";
            continue;
        }
        const int n_out = r->usage_tokens >= 0 ? r->usage_tokens : r->n_tok;
        m.out_tokens += n_out;
        m.in_tokens += r->usage_prompt >= 0 ? r->usage_prompt : r->n_prompt;
        m.cached += r->cached > 0 ? r->cached : 0;
        m.n_cached += r->cached >= 0;
        ttft[m.n_ok] = r->tok_t[0];
        e2e[m.n_ok] = r->e2e;
        m.n_ok++;
        const double tp = n_out > 1 ? (r->e2e - r->tok_t[0]) / (double)(n_out - 1) : 0.0;
        if (n_out > 1) tpot[n_tpot++] = tp;
        m.n_good +=
            (c->slo_ttft <= 0 || r->tok_t[0] <= c->slo_ttft) && (c->slo_tpot <= 0 || tp <= c->slo_tpot);
        for (int k = 1; k < r->n_tok; k++) itl[k_itl++] = r->tok_t[k] - r->tok_t[k - 1];
    }
    m.dur_s = duration_ms / 1000.0;
    m.ttft = stat_of(ttft, m.n_ok);
    m.tpot = stat_of(tpot, n_tpot);
    m.itl = stat_of(itl, k_itl);
    m.e2e = stat_of(e2e, m.n_ok);
    m.req_tp = (double)m.n_ok / m.dur_s;
    m.tok_tp = (double)m.out_tokens / m.dur_s;
    m.goodput = (double)m.n_good / m.dur_s;
    return m;
}

/* tr: --turns' results [n_requests] (NULL without). */
static int report_json(const lg_cfg *c, const char *url, const lg_summary *m, const lg_turn_res *tr)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "url", url);
    cJSON_AddStringToObject(o, "endpoint", c->path);
    cJSON_AddNumberToObject(o, "concurrency", c->concurrency);
    cJSON_AddNumberToObject(o, "rate", c->rate);
    cJSON_AddNumberToObject(o, "prompt_len", c->prompt_len);
    cJSON_AddNumberToObject(o, "gen_len", c->gen_len);
    cJSON_AddNumberToObject(o, "shared_prefix", c->shared_prefix);
    cJSON_AddNumberToObject(o, "requests", c->n_requests);
    cJSON_AddNumberToObject(o, "completed", (double)m->n_ok);
    cJSON_AddNumberToObject(o, "failed", (double)(c->n_requests - (int)m->n_ok));
    if (m->first_err) cJSON_AddStringToObject(o, "first_error", m->first_err);
    cJSON_AddNumberToObject(o, "duration_s", m->dur_s);
    cJSON_AddNumberToObject(o, "total_input_tokens", (double)m->in_tokens);
    cJSON_AddNumberToObject(o, "prompt_tokens_cached", (double)m->cached);
    cJSON_AddNumberToObject(o, "prompt_tokens_computed", (double)(m->in_tokens - m->cached));
    cJSON_AddNumberToObject(o, "requests_reporting_cached", (double)m->n_cached);
    if (c->trace_path) {
        cJSON_AddStringToObject(o, "trace", c->trace_path);
        cJSON_AddNumberToObject(o, "trace_block", c->trace.block);
        cJSON_AddNumberToObject(o, "time_scale", c->trace.time_scale);
    }
    cJSON_AddNumberToObject(o, "slo_ttft_ms", c->slo_ttft);
    cJSON_AddNumberToObject(o, "slo_tpot_ms", c->slo_tpot);
    cJSON_AddNumberToObject(o, "requests_within_slo", (double)m->n_good);
    cJSON_AddNumberToObject(o, "goodput", m->goodput);
    cJSON_AddNumberToObject(o, "total_output_tokens", (double)m->out_tokens);
    cJSON_AddNumberToObject(o, "request_throughput", m->req_tp);
    cJSON_AddNumberToObject(o, "output_throughput", m->tok_tp);
    stat_json(o, "ttft_ms", m->ttft);
    stat_json(o, "tpot_ms", m->tpot);
    stat_json(o, "itl_ms", m->itl);
    stat_json(o, "e2e_ms", m->e2e);
    if (tr) lg_turns_report(tr, c->n_requests / c->turns, c->turns, o);
    return cli_print_json(o, "loadgen: out of memory");
}

static void report_text(const lg_cfg *c, const lg_summary *m, const lg_turn_res *tr)
{
    if (c->trace_path)
        printf("loadgen: %s%s  concurrency %d  trace %s  (%d requests, %d tokens per hash id, time x %g)\n",
               c->host, c->path, c->concurrency, c->trace_path, c->n_requests, c->trace.block,
               c->trace.time_scale);
    else if (c->turns)
        printf("loadgen: %s%s  concurrency %d  %d conversations of %d turns (%d words a message)  gen %d\n",
               c->host, c->path, c->concurrency, c->n_requests / c->turns, c->turns, c->turn_words,
               c->gen_len);
    else
        printf("loadgen: %s%s  concurrency %d  rate %s  prompt %d (shared %d)  gen %d\n", c->host, c->path,
               c->concurrency, c->rate > 0 ? "poisson" : "inf", c->prompt_len, c->shared_prefix, c->gen_len);
    if (c->rate > 0) printf("rate: %.3f req/s\n", c->rate);
    printf("requests: %zu completed, %d failed  in %.2f s\n", m->n_ok, c->n_requests - (int)m->n_ok,
           m->dur_s);
    if (m->first_err) printf("first failure: %s\n", m->first_err);
    printf("request throughput: %.3f req/s\n", m->req_tp);
    printf("output throughput:  %.2f tok/s  (%lld tokens)\n", m->tok_tp, m->out_tokens);
    printf("prompt positions:   %lld  cached %lld (%.1f%%)  computed %lld\n", m->in_tokens, m->cached,
           m->in_tokens ? 100.0 * (double)m->cached / (double)m->in_tokens : 0.0, m->in_tokens - m->cached);
    if (c->slo_ttft > 0 || c->slo_tpot > 0)
        printf("goodput:            %.3f req/s  (%zu of %zu within TTFT <= %g ms, TPOT <= %g ms; 0: none)\n",
               m->goodput, m->n_good, m->n_ok, c->slo_ttft, c->slo_tpot);
    stat_print("TTFT", "ms", m->ttft);
    stat_print("TPOT", "ms", m->tpot);
    stat_print("ITL", "ms", m->itl);
    stat_print("E2E", "ms", m->e2e);
    if (tr) lg_turns_report(tr, c->n_requests / c->turns, c->turns, NULL);
}

/* --embeddings: texts/s, tokens/s (usage.prompt_tokens) and request latency; e2e [n_requests]. */
static int report_embed(const lg_run *run, const char *url, bool json, double duration_ms, double *e2e)
{
    const lg_cfg *c = run->cfg;
    size_t n_ok = 0;
    long long texts = 0, tokens = 0;
    const char *first_err = NULL;
    for (int i = 0; i < c->n_requests; i++) {
        const lg_req *r = &run->req[i];
        if (!r->ok && !first_err) first_err = r->err[0] ? r->err : "not run";
        if (!r->ok) continue;
        texts += r->n_tok;
        tokens += r->usage_tokens > 0 ? r->usage_tokens : 0;
        e2e[n_ok++] = r->e2e;
    }
    const double dur_s = duration_ms / 1000.0;
    const lg_stat lat = stat_of(e2e, n_ok);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "url", url);
        cJSON_AddStringToObject(o, "endpoint", c->path);
        cJSON_AddNumberToObject(o, "concurrency", c->concurrency);
        cJSON_AddNumberToObject(o, "texts", c->n_texts);
        cJSON_AddNumberToObject(o, "batch", c->batch);
        cJSON_AddNumberToObject(o, "requests", c->n_requests);
        cJSON_AddNumberToObject(o, "completed", (double)n_ok);
        cJSON_AddNumberToObject(o, "failed", (double)(c->n_requests - (int)n_ok));
        if (first_err) cJSON_AddStringToObject(o, "first_error", first_err);
        cJSON_AddNumberToObject(o, "duration_s", dur_s);
        cJSON_AddNumberToObject(o, "texts_embedded", (double)texts);
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)tokens);
        cJSON_AddNumberToObject(o, "texts_per_s", (double)texts / dur_s);
        cJSON_AddNumberToObject(o, "tokens_per_s", (double)tokens / dur_s);
        stat_json(o, "e2e_ms", lat);
        if (cli_print_json(o, "loadgen: out of memory") != 0) return 1;
    } else {
        printf("loadgen: %s%s  concurrency %d  %d texts in batches of %d\n", c->host, c->path, c->concurrency,
               c->n_texts, c->batch);
        printf("requests: %zu completed, %d failed  in %.2f s\n", n_ok, c->n_requests - (int)n_ok, dur_s);
        if (first_err) printf("first failure: %s\n", first_err);
        printf("throughput: %.2f texts/s  %.1f tokens/s  (%lld texts, %lld tokens)\n", (double)texts / dur_s,
               (double)tokens / dur_s, texts, tokens);
        stat_print("E2E", "ms", lat);
    }
    return n_ok ? 0 : cli_error("loadgen: no request completed (%s)", first_err ? first_err : "?");
}

/* The metrics of the finished run, as JSON or text. */
static int report(const lg_run *run, const char *url, bool json, double duration_ms)
{
    const lg_cfg *c = run->cfg;
    if (c->embeddings) {
        double *e2e = malloc(((size_t)c->n_requests + 1) * sizeof *e2e);
        const int rc =
            e2e ? report_embed(run, url, json, duration_ms, e2e) : cli_error("loadgen: out of memory");
        free(e2e);
        return rc;
    }
    size_t n_itl = 0;
    for (int i = 0; i < c->n_requests; i++)
        if (run->req[i].ok && run->req[i].n_tok > 1) n_itl += (size_t)run->req[i].n_tok - 1;
    double *ttft = malloc(((size_t)c->n_requests + 1) * sizeof *ttft);
    double *tpot = malloc(((size_t)c->n_requests + 1) * sizeof *tpot);
    double *e2e = malloc(((size_t)c->n_requests + 1) * sizeof *e2e);
    double *itl = malloc((n_itl + 1) * sizeof *itl);
    lg_turn_res *tr = c->turns ? malloc((size_t)c->n_requests * sizeof *tr) : NULL;
    int rc = 0;
    if (!ttft || !tpot || !e2e || !itl || (c->turns && !tr)) {
        rc = cli_error("loadgen: out of memory");
    } else {
        for (int i = 0; tr && i < c->n_requests; i++) {
            const lg_req *r = &run->req[i];
            tr[i] = (lg_turn_res){ r->ok,           r->usage_prompt, r->cached,
                                   r->usage_tokens, r->dropped,      r->ok ? r->tok_t[0] : 0 };
        }
        const lg_summary m = summarize(run, duration_ms, ttft, tpot, e2e, itl);
        if (json)
            rc = report_json(c, url, &m, tr);
        else
            report_text(c, &m, tr);
        if (rc == 0 && m.n_ok == 0)
            rc = cli_error("loadgen: no request completed (%s)", m.first_err ? m.first_err : "?");
    }
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
    free(tr);
    return rc;
}

int cmd_loadgen(int argc, char **argv)
{
    lg_cfg c;
    const char *url = NULL;
    bool json = false;
    int prc = parse_loadgen_args(argc, argv, &c, &url, &json);
    if (prc != 0) {
        free(c.grammar_json);
        return prc == 2 ? 0 : 1;
    }

    lg_run run;
    memset(&run, 0, sizeof run);
    run.cfg = &c;
    if (c.trace_path) {
        char err[256];
        if (lg_trace_load(c.trace_path, &c.trace, &run.trace, err, sizeof err) != 0) {
            free(c.grammar_json);
            return cli_error("loadgen: %s", err);
        }
        c.n_requests = run.trace.n;
        if (c.concurrency > c.n_requests) c.concurrency = c.n_requests;
    }
    const bool timed = c.rate > 0 || c.trace_path;
    run.req = calloc((size_t)c.n_requests, sizeof *run.req);
    run.prefix = malloc((size_t)(c.shared_prefix + 1) * sizeof *run.prefix);
    run.arrival = timed ? malloc((size_t)c.n_requests * sizeof *run.arrival) : NULL;
    pthread_t *th = malloc((size_t)c.concurrency * sizeof *th);
    int rc = 0;
    if (!run.req || !run.prefix || (timed && !run.arrival) || !th) {
        rc = cli_error("loadgen: out of memory");
    } else {
        plan_requests(&run);
        const double duration_ms = run_all(&run, th);
        rc = report(&run, url, json, duration_ms);
        for (int i = 0; i < c.n_requests; i++) {
            free(run.req[i].tok_t);
            free(run.req[i].answer.p);
        }
    }
    free(run.req);
    free(run.prefix);
    free(run.arrival);
    lg_trace_free(&run.trace);
    free(th);
    free(c.grammar_json);
    return rc;
}
