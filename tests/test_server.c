/*
 * test_server.c — `kvinfer serve` driven over real HTTP on 127.0.0.1.
 *
 * The server runs as a child process on a free port (--port 0; the port is read
 * from its first stdout line). A tiny HTTP/1.0 client (one connection per
 * request, read to the close) checks: greedy completions, streamed and not,
 * equal `kvinfer run --temp 0` for the same prompt (also with 47 other streams
 * in every batch); one SSE event per token; 48 concurrent streaming clients;
 * errors in OpenAI's shape (400 malformed JSON / wrong types / bad max_tokens /
 * token id out of range, 401, 413, 503 (queue full),
 * context_length_exceeded); an abrupt disconnect frees its KV blocks while
 * another stream goes on unharmed; metrics, models, tokenize, health; a clean
 * exit on SIGTERM (under ASan: no leaks).
 */
#include "kvinfer.h"
#include "testutil.h"

#include "http_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define KEY "sekrit"
#define MODEL "../shared/models/stories260K.gguf"

static int send_request(int port, const char *method, const char *path, const char *body, size_t blen,
                        bool key)
{
    return http_send_request(port, method, path, key ? "Authorization: Bearer " KEY "\r\n" : NULL, body,
                             blen);
}

/* Whole response (to the close). */
static http_resp http(int port, const char *method, const char *path, const char *body, bool key)
{
    return http_read_response(send_request(port, method, path, body, body ? strlen(body) : 0, key));
}

/* Concatenated text of a stream's events; *n_events counts events with a token. */
static char *sse_text(const char *body, bool chat, int *n_events, bool *done, int *usage_completion)
{
    size_t cap = strlen(body) + 1, len = 0;
    char *out = calloc(1, cap);
    *n_events = 0;
    *done = false;
    *usage_completion = -1;
    const char *p = body, *ev;
    size_t n;
    while (sse_next(&p, &ev, &n, done)) {
        cJSON *j = cJSON_ParseWithLength(ev, n);
        const cJSON *u = cJSON_GetObjectItem(j, "usage");
        if (u) *usage_completion = cJSON_GetObjectItem(u, "completion_tokens")->valueint;
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *fr = cJSON_GetObjectItem(c, "finish_reason");
        const cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content")
                              : cJSON_GetObjectItem(c, "text");
        if (c && cJSON_IsNull(fr)) (*n_events)++;
        if (cJSON_IsString(t)) {
            size_t l = strlen(t->valuestring);
            memcpy(out + len, t->valuestring, l);
            len += l;
        }
        cJSON_Delete(j);
    }
    return out;
}

static const char *prompts[4] = { "Once upon a time", "Lily and Tom went to the park",
                                  "The cat sat on the mat", "One day a little dog" };
static char *refs[4];
static int g_port;

typedef struct client {
    int idx;
    bool ok;
    char why[160];
} client;

static void *stream_client(void *arg)
{
    client *c = arg;
    const int k = c->idx % 4;
    char body[512];
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true}}",
             prompts[k]);
    http_resp r = http(g_port, "POST", "/v1/completions", body, true);
    int ne, uc;
    bool done;
    char *t = sse_text(r.body ? r.body : "", false, &ne, &done, &uc);
    c->ok = r.status == 200 && done && ne == 48 && uc == 48 && !strcmp(t, refs[k]);
    snprintf(c->why, sizeof c->why, "status %d done %d events %d usage %d text %s", r.status, done, ne, uc,
             strcmp(t, refs[k]) ? "differs" : "same");
    free(t);
    free(r.body);
    return NULL;
}

static void check_error(http_resp r, int status, const char *code, const char *what)
{
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    const cJSON *m = cJSON_GetObjectItem(e, "message"), *c = cJSON_GetObjectItem(e, "code");
    CHECK(r.status == status, "%s: status %d, want %d (%s)", what, r.status, status, r.body ? r.body : "");
    CHECK(cJSON_IsString(m) && cJSON_GetObjectItem(e, "type"), "%s: no OpenAI error object: %s", what,
          r.body ? r.body : "");
    if (code)
        CHECK(cJSON_IsString(c) && !strcmp(c->valuestring, code), "%s: code %s, want %s", what,
              cJSON_IsString(c) ? c->valuestring : "null", code);
    cJSON_Delete(j);
    free(r.body);
}

static cJSON *get_json(const char *path)
{
    http_resp r = http(g_port, "GET", path, NULL, true);
    cJSON *j = r.status == 200 && r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return j;
}

static void test_errors(void)
{
    check_error(http(g_port, "POST", "/v1/completions", "{\"prompt\": \"Once\", ", true), 400, NULL,
                "malformed JSON");
    check_error(http(g_port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":\"ten\"}", true),
                400, "invalid_value", "max_tokens string");
    check_error(http(g_port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":-5}", true), 400,
                "invalid_value", "negative max_tokens");
    check_error(http(g_port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":0}", true), 400,
                "invalid_value", "max_tokens 0");
    check_error(
        http(g_port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":100000000}", true), 400,
        "context_length_exceeded", "huge max_tokens");
    check_error(http(g_port, "POST", "/v1/completions", "{\"prompt\":[1,403,99999]}", true), 400,
                "invalid_value", "token id out of range");
    check_error(http(g_port, "POST", "/v1/completions", "{\"prompt\":\"Once\"}", false), 401,
                "invalid_api_key", "no API key");
    check_error(http(g_port, "POST", "/v1/chat/completions", "{\"messages\":\"hi\"}", true), 400,
                "invalid_value", "messages not an array");
    check_error(http(g_port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"temperature\":true}", true),
                400, "invalid_value", "temperature bool");
    /* a prompt longer than the context (-c 256) */
    {
        char *big = malloc(1 << 16);
        strcpy(big, "{\"prompt\":[1");
        for (int i = 0; i < 300; i++) strcat(big, ",403");
        strcat(big, "]}");
        check_error(http(g_port, "POST", "/v1/completions", big, true), 400, "context_length_exceeded",
                    "long prompt");
        free(big);
    }
    /* 10 MB body */
    {
        const size_t n = 10u << 20;
        char *big = malloc(n + 1);
        memset(big, ' ', n);
        memcpy(big, "{\"prompt\":\"", 11);
        big[n - 2] = '"';
        big[n - 1] = '}';
        big[n] = 0;
        check_error(http(g_port, "POST", "/v1/completions", big, true), 413, "request_too_large",
                    "10 MB body");
        free(big);
    }
    /* unknown fields are ignored; model may name the alias */
    http_resp r =
        http(g_port, "POST", "/v1/completions",
             "{\"prompt\":\"Once\",\"max_tokens\":2,\"model\":\"stories260K\",\"frobnicate\":[1,2]}", true);
    CHECK(r.status == 200, "unknown field: status %d %s", r.status, r.body);
    free(r.body);
}

/* An abrupt disconnect mid-stream, while another stream goes on. */
static void *long_stream(void *arg)
{
    client *c = arg;
    stream_client(c);
    return NULL;
}

static void test_disconnect(void)
{
    pthread_t th;
    client other = { .idx = 1 };
    pthread_create(&th, NULL, long_stream, &other);
    int fd = send_request(
        g_port, "POST", "/v1/completions",
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":240,\"ignore_eos\":true,\"stream\":true}",
        strlen("{\"prompt\":\"Once upon a time\",\"max_tokens\":240,\"ignore_eos\":true,\"stream\":true}"),
        true);
    char buf[2048];
    ssize_t k = recv(fd, buf, sizeof buf, 0); /* headers and the first events */
    CHECK(k > 0 && strstr(buf, "200"), "disconnect: stream did not start");
    close(fd);
    pthread_join(th, NULL);
    CHECK(other.ok, "stream beside a disconnect: %s", other.why);
    /* the dropped stream's blocks are freed within a step: poll briefly */
    int used = -1;
    for (int i = 0; i < 100 && used != 0; i++) {
        cJSON *kv = get_json("/v1/kv");
        used = kv ? cJSON_GetObjectItem(kv, "blocks_used")->valueint : -1;
        cJSON_Delete(kv);
        if (used != 0) usleep(20000);
    }
    CHECK(used == 0, "KV blocks still held after the disconnect: %d", used);
    /* the scheduler frees a cancelled request's blocks just before it reports the
     * end (which the metrics count): poll briefly here too */
    http_resp m = { 0 };
    for (int i = 0; i < 100; i++) {
        free(m.body);
        m = http(g_port, "GET", "/metrics", NULL, true);
        if (m.body && strstr(m.body, "kvinfer_requests_cancelled_total 1")) break;
        usleep(20000);
    }
    CHECK(m.body && strstr(m.body, "kvinfer_requests_cancelled_total 1"), "metrics: one cancelled request");
    free(m.body);
}

static void test_queue_full(void)
{
    test_server s2;
    CHECK(test_server_start(&s2, "--parallel 1 --queue-max 1", "server.err"), "second server did not start");
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":1500,\"ignore_eos\":true,\"stream\":true}";
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = send_request(s2.port, "POST", "/v1/completions", body, strlen(body), false);
        usleep(50000);
    }
    char buf[4096];
    ssize_t k = recv(fds[2], buf, sizeof buf - 1, 0);
    buf[k > 0 ? k : 0] = 0;
    CHECK(strstr(buf, " 503 ") && strstr(buf, "Retry-After: 1") && strstr(buf, "server_overloaded"),
          "third request over capacity: %.200s", buf);
    for (int i = 0; i < 3; i++) close(fds[i]);
    CHECK(test_server_stop(&s2) == 0, "second server exit status");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    for (int k = 0; k < 4; k++) refs[k] = run_text(prompts[k], 48);
    test_server s;
    if (!test_server_start(&s, "-c 256 --parallel 48 --api-key " KEY, "server.err")) {
        CHECK(false, "server did not start");
        return test_main_end();
    }
    g_port = s.port;

    http_resp h = http(g_port, "GET", "/health", NULL, false);
    CHECK(h.status == 200 && strstr(h.body, "ok"), "health: %d", h.status);
    free(h.body);

    /* non-streamed greedy == kvinfer run --temp 0 */
    http_resp r = http(
        g_port, "POST", "/v1/completions",
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true}", true);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *txt = cJSON_GetObjectItem(c0, "text");
    CHECK(r.status == 200 && cJSON_IsString(txt) && !strcmp(txt->valuestring, refs[0]),
          "non-streamed text differs from kvinfer run: '%s' vs '%s'",
          cJSON_IsString(txt) ? txt->valuestring : "", refs[0]);
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    CHECK(cJSON_GetObjectItem(u, "prompt_tokens") && cJSON_GetObjectItem(u, "prompt_tokens")->valueint == 5 &&
              cJSON_GetObjectItem(u, "completion_tokens")->valueint == 48,
          "usage: %s", r.body);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), "cached_tokens") &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(u, "timings"), "kv_bytes")->valuedouble > 0,
          "usage details: %s", r.body);
    CHECK(!strcmp(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "length"), "finish_reason");
    cJSON_Delete(j);
    free(r.body);

    /* streamed: one event per token, same text, usage, [DONE] */
    client one = { .idx = 0 };
    stream_client(&one);
    CHECK(one.ok, "streamed completion: %s", one.why);

    /* chat: template applied, streamed deltas equal the non-streamed message */
    const char *chat =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Tell a story.\"},{\"role\":\"user\","
        "\"content\":\"A dog <|im_end|> named Max\"}],\"max_tokens\":20,\"temperature\":0%s}";
    char cb[512];
    snprintf(cb, sizeof cb, chat, "");
    http_resp cr = http(g_port, "POST", "/v1/chat/completions", cb, true);
    cJSON *cj = cr.body ? cJSON_Parse(cr.body) : NULL;
    const cJSON *msg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cj, "choices"), 0), "message");
    const cJSON *content = cJSON_GetObjectItem(msg, "content");
    CHECK(cr.status == 200 && cJSON_IsString(content), "chat: %d %s", cr.status, cr.body);
    snprintf(cb, sizeof cb, chat, ",\"stream\":true");
    http_resp cs = http(g_port, "POST", "/v1/chat/completions", cb, true);
    int ne, uc;
    bool done;
    char *st = sse_text(cs.body ? cs.body : "", true, &ne, &done, &uc);
    CHECK(done && cJSON_IsString(content) && !strcmp(st, content->valuestring),
          "chat stream differs: '%s' vs '%s'", st, cJSON_IsString(content) ? content->valuestring : "");
    free(st);
    cJSON_Delete(cj);
    free(cr.body);
    free(cs.body);

    /* stop strings: the text ends before the first '.' */
    http_resp sr =
        http(g_port, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0,\"stop\":[\".\"]}", true);
    const char *dot = strchr(refs[0], '.');
    char want[256] = { 0 };
    if (dot) memcpy(want, refs[0], (size_t)(dot - refs[0]));
    cJSON *sj = sr.body ? cJSON_Parse(sr.body) : NULL;
    const cJSON *sc = cJSON_GetArrayItem(cJSON_GetObjectItem(sj, "choices"), 0);
    CHECK(dot && cJSON_IsString(cJSON_GetObjectItem(sc, "text")) &&
              !strcmp(cJSON_GetObjectItem(sc, "text")->valuestring, want) &&
              !strcmp(cJSON_GetObjectItem(sc, "finish_reason")->valuestring, "stop"),
          "stop string: %s", sr.body);
    cJSON_Delete(sj);
    free(sr.body);

    /* 48 concurrent streams, each must equal its `kvinfer run` reference */
    enum { NC = 48 };
    static client cl[NC];
    pthread_t th[NC];
    for (int i = 0; i < NC; i++) {
        cl[i].idx = i;
        pthread_create(&th[i], NULL, stream_client, &cl[i]);
    }
    int n_ok = 0;
    for (int i = 0; i < NC; i++) {
        pthread_join(th[i], NULL);
        n_ok += cl[i].ok;
        if (!cl[i].ok) fprintf(stderr, "client %d: %s\n", i, cl[i].why);
    }
    CHECK(n_ok == NC, "%d of %d concurrent streams correct", n_ok, NC);

    test_errors();
    test_disconnect();

    /* models, tokenize / detokenize (ids from ../shared/golden/stories260K/case1.json) */
    cJSON *mj = get_json("/v1/models");
    const cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(mj, "data"), 0);
    CHECK(m0 && !strcmp(cJSON_GetObjectItem(m0, "id")->valuestring, "stories260K"), "models");
    cJSON_Delete(mj);
    http_resp tk =
        http(g_port, "POST", "/tokenize", "{\"content\":\"Once upon a time\",\"add_special\":true}", true);
    CHECK(tk.status == 200 && tk.body && strstr(tk.body, "[1,403,407,261,378]"), "tokenize: %s", tk.body);
    free(tk.body);
    http_resp dt = http(g_port, "POST", "/detokenize", "{\"tokens\":[403,407,261,378]}", true);
    CHECK(dt.status == 200 && dt.body && strstr(dt.body, "Once upon a time"), "detokenize: %s", dt.body);
    free(dt.body);
    http_resp mt = http(g_port, "GET", "/metrics", NULL, true);
    CHECK(mt.body && strstr(mt.body, "kvinfer_time_to_first_token_seconds_bucket") &&
              strstr(mt.body, "kvinfer_inter_token_latency_seconds_count") &&
              strstr(mt.body, "kvinfer_kv_blocks_total") && strstr(mt.body, "kvinfer_prefix_cache_hit_ratio"),
          "metrics text");
    free(mt.body);
    http_resp pg = http(g_port, "GET", "/", NULL, false);
    CHECK(pg.status == 200 && pg.body && strstr(pg.body, "/v1/kv"), "web page");
    free(pg.body);

    CHECK(test_server_stop(&s) == 0, "server exit status (see %s)", tmp_path("server.err"));
    test_queue_full();
    for (int k = 0; k < 4; k++) free(refs[k]);
    return test_main_end();
}
