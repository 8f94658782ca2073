/*
 * test_server_admit.c — connection admission of `kvinfer serve` on stories260K
 * over real sockets:
 *
 *  - default flags (--parallel 16): 80 concurrent connections from 127.0.0.1,
 *    each with a greedy completion sent before any answer is read, all get 200
 *    and the same text as a lone `kvinfer run --temp 0` (no reset, no refusal);
 *  - --conn-per-ip 8 --conn-max 10: with 8 connections held open from
 *    127.0.0.1, a 9th from there gets 503 with Retry-After in Anthropic's error
 *    shape on /v1/messages and a 10th in OpenAI's on /v1/chat/completions; two
 *    from 127.0.0.2 are served (10 open), one from 127.0.0.3 gets 503 (the
 *    global limit); once they close, requests are served again, /metrics counts
 *    kvinfer_requests_refused_total per_address 2 and global 1, and each refusal
 *    has a request-log line with status 503 and its reason among the notes;
 *  - --parallel 1 --queue-max 1: a third generation while one runs and one
 *    waits gets 503 + Retry-After, counted as queue_full.
 *
 * Connections from 127.0.0.2 and 127.0.0.3 bind their source address (Linux
 * routes all of 127/8 to the loopback).
 */
#include "testutil.h"

#include "http_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define N_CLIENTS 80

static const char plain_body[] = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0}";

/* A TCP connection to 127.0.0.1:port from the source address src ("127.0.0.2"), or -1. */
static int connect_from(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in d;
    memset(&d, 0, sizeof d);
    d.sin_family = AF_INET;
    d.sin_port = htons((uint16_t)port);
    d.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || connect(fd, (struct sockaddr *)&d, sizeof d) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends a POST of body on fd and reads the whole answer (headers too) to the close. */
static char *exchange(int fd, const char *path, const char *body)
{
    char head[256];
    const int hn = snprintf(head, sizeof head,
                            "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            "anthropic-version: 2023-06-01\r\nContent-Length: %zu\r\n\r\n",
                            path, strlen(body));
    http_send_all(fd, head, (size_t)hn);
    http_send_all(fd, body, strlen(body));
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, 20000) <= 0) break;
        if (len + 1024 > cap) buf = realloc(buf, cap *= 2);
        const ssize_t k = read(fd, buf + len, cap - len - 1);
        if (k <= 0) break;
        len += (size_t)k;
    }
    buf[len] = 0;
    close(fd);
    return buf;
}

/* The JSON after the headers of a raw answer (NULL when none parses). */
static cJSON *answer_json(const char *raw)
{
    const char *b = strstr(raw, "\r\n\r\n");
    return b ? cJSON_Parse(b + 4) : NULL;
}

static void test_many_from_one_address(void)
{
    char *ref = run_text("Once upon a time", 12);
    test_server s;
    if (!test_server_start(&s, "", "server_admit_default.err")) {
        CHECK(false, "server with default flags did not start");
        free(ref);
        return;
    }
    int fds[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        fds[i] = http_send_request(s.port, "POST", "/v1/completions", NULL, plain_body, strlen(plain_body));
        CHECK(fds[i] >= 0, "client %d connected", i);
    }
    int ok = 0, same = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        if (fds[i] < 0) continue;
        http_resp r = http_read_response(fds[i]);
        cJSON *j = r.status == 200 && r.body ? cJSON_Parse(r.body) : NULL;
        const cJSON *t =
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
        ok += r.status == 200;
        same += cJSON_IsString(t) && ref && !strcmp(t->valuestring, ref);
        if (r.status != 200) fprintf(stderr, "client %d: %d %.200s\n", i, r.status, r.body ? r.body : "");
        cJSON_Delete(j);
        free(r.body);
    }
    CHECK(ok == N_CLIENTS, "%d concurrent clients from 127.0.0.1 with default flags: %d answered 200",
          N_CLIENTS, ok);
    CHECK(same == N_CLIENTS, "... each with the lone greedy text '%s': %d", ref ? ref : "", same);
    free(ref);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

/* A raw answer is a 503 with Retry-After: 1 whose JSON is the family's error shape. */
static void check_refusal(const char *raw, bool anthropic, const char *what)
{
    CHECK(!strncmp(raw, "HTTP/1.1 503", 12), "%s: 503 (%.60s)", what, raw);
    CHECK(strstr(raw, "\r\nRetry-After: 1\r\n") != NULL, "%s: Retry-After: 1", what);
    cJSON *j = answer_json(raw);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    if (anthropic)
        CHECK(json_get_str(j, "type") && !strcmp(json_get_str(j, "type"), "error") &&
                  json_get_str(e, "type") && !strcmp(json_get_str(e, "type"), "overloaded_error"),
              "%s: Anthropic's error shape", what);
    else
        CHECK(json_get_str(e, "code") && !strcmp(json_get_str(e, "code"), "server_overloaded") &&
                  json_get_str(e, "message") && cJSON_HasObjectItem(e, "param"),
              "%s: OpenAI's error shape", what);
    cJSON_Delete(j);
}

static void test_refusals(void)
{
    const char *err = "server_admit_limits.err";
    test_server s;
    if (!test_server_start_logged(
            &s, "--conn-per-ip 8 --conn-max 10 --parallel 1 --queue-max 1 --log-format json", err)) {
        CHECK(false, "server with limit flags did not start");
        return;
    }
    int held[10];
    for (int i = 0; i < 8; i++) {
        held[i] = http_connect(s.port);
        http_send_all(held[i], "GET /he", 7);
    }
    usleep(200000); /* the server has counted them */
    const char *msg =
        "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
    char *raw = exchange(http_connect(s.port), "/v1/messages", msg);
    check_refusal(raw, true, "9th connection from 127.0.0.1, /v1/messages");
    free(raw);
    const char *chat = "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
    raw = exchange(http_connect(s.port), "/v1/chat/completions", chat);
    check_refusal(raw, false, "10th connection from 127.0.0.1, /v1/chat/completions");
    free(raw);
    held[8] = connect_from(s.port, "127.0.0.2");
    held[9] = connect_from(s.port, "127.0.0.2");
    CHECK(held[8] >= 0 && held[9] >= 0, "connections from 127.0.0.2");
    http_send_all(held[8], "GET /he", 7);
    http_send_all(held[9], "GET /he", 7);
    usleep(200000);
    raw = exchange(connect_from(s.port, "127.0.0.3"), "/v1/completions", plain_body);
    check_refusal(raw, false, "11th connection in all, from 127.0.0.3");
    free(raw);
    for (int i = 0; i < 10; i++) close(held[i]);
    usleep(300000); /* the server has seen them close */
    http_resp r = http_request(s.port, "POST", "/v1/completions", NULL, plain_body);
    CHECK(r.status == 200, "served again once the connections closed: %d", r.status);
    free(r.body);

    /* the queue: one running, one waiting, the third refused */
    const char *longb = "{\"prompt\":\"Once\",\"max_tokens\":1500,\"ignore_eos\":true,\"stream\":true}";
    int q[2];
    for (int i = 0; i < 2; i++) {
        q[i] = http_send_request(s.port, "POST", "/v1/completions", NULL, longb, strlen(longb));
        usleep(100000);
    }
    raw = exchange(http_connect(s.port), "/v1/completions", longb);
    check_refusal(raw, false, "a generation past --queue-max");
    free(raw);
    for (int i = 0; i < 2; i++) close(q[i]);

    r = http_request(s.port, "GET", "/metrics", NULL, NULL);
    CHECK(r.status == 200, "GET /metrics: %d", r.status);
    const double pa = prom_metric(r.body, "kvinfer_requests_refused_total{reason=\"per_address\"}");
    const double gl = prom_metric(r.body, "kvinfer_requests_refused_total{reason=\"global\"}");
    const double qf = prom_metric(r.body, "kvinfer_requests_refused_total{reason=\"queue_full\"}");
    CHECK(pa == 2 && gl == 1 && qf == 1,
          "refusals counted: per_address %g (2), global %g (1), queue_full %g (1)", pa, gl, qf);
    free(r.body);
    CHECK(test_server_stop(&s) == 0, "server exit status");

    static const struct {
        const char *path, *note;
        int n;
    } logs[] = { { "/v1/messages", "refused_per_address", 1 },
                 { "/v1/chat/completions", "refused_per_address", 1 } };
    for (size_t k = 0; k < sizeof logs / sizeof logs[0]; k++) {
        int n = 0;
        cJSON *lines = test_log_lines(err, logs[k].path, &n);
        const cJSON *l = cJSON_GetArrayItem(lines, 0);
        CHECK(n == logs[k].n && json_get_num(l, "status") == 503 && test_log_names(l, "notes", logs[k].note),
              "%s: one log line, status 503, notes %s (%d lines)", logs[k].path, logs[k].note, n);
        cJSON_Delete(lines);
    }
    int n = 0;
    cJSON *lines = test_log_lines(err, "/v1/completions", &n);
    int global = 0, queue = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *l = cJSON_GetArrayItem(lines, i);
        global += json_get_num(l, "status") == 503 && test_log_names(l, "notes", "refused_global");
        queue += json_get_num(l, "status") == 503 && test_log_names(l, "notes", "refused_queue_full");
    }
    CHECK(global == 1 && queue == 1,
          "/v1/completions log: one refused_global (%d), one refused_queue_full (%d)", global, queue);
    cJSON_Delete(lines);
}

int main(void)
{
    test_many_from_one_address();
    test_refusals();
    return test_main_end();
}
