/*
 * test_server_hardening.c — hostile clients against `kvinfer serve` on
 * stories260K over real sockets (the JSON-level rules are test_server_parse's):
 *
 *  - slow clients: 40 connections that send half a request line or half a body
 *    and then nothing do not delay a new client (its completion comes back
 *    within 2 s), and the server closes each within its 10 s inactivity
 *    timeout (they read EOF by 13 s);
 *  - headers past 16 KiB get 431 in OpenAI's error shape; a body past 4 MiB
 *    413; both leave the server serving;
 *  - a body with trailing bytes, invalid UTF-8, a lone surrogate, a duplicate
 *    key or 65 levels of nesting gets a 400 with an error object over HTTP, on
 *    every POST endpoint;
 *  - afterwards a plain request still gets its greedy text, equal to a lone
 *    request's before the abuse;
 *  - the flags move the limits: --body-max 4096 answers 413 to 5000 bytes and
 *    serves 3000; --timeout 2 closes a silent connection within 4 s
 *    (--conn-per-ip and --conn-max: test_server_admit).
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char plain_body[] = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0}";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *completion_text(int port)
{
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, plain_body);
    cJSON *j = r.status == 200 && r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    char *s = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(j);
    free(r.body);
    return s;
}

/* A raw request (bytes as given); the reply's status and error message. */
static int raw_status(int port, const char *bytes, size_t n, char *msg, size_t cap)
{
    int fd = http_connect(port);
    if (fd < 0) return 0;
    http_send_all(fd, bytes, n);
    http_resp r = http_read_response(fd);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message");
    snprintf(msg, cap, "%s", cJSON_IsString(m) ? m->valuestring : "(no error object)");
    cJSON_Delete(j);
    free(r.body);
    return r.status;
}

static void test_slow_clients(int port)
{
    enum { N_SLOW = 40 };
    int fds[N_SLOW];
    for (int i = 0; i < N_SLOW; i++) {
        fds[i] = http_connect(port);
        static const char half_line[] = "POST /v1/compl";
        static const char half_body[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                        "application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\": ";
        if (fds[i] >= 0)
            http_send_all(fds[i], i % 2 ? half_body : half_line,
                          i % 2 ? sizeof half_body - 1 : sizeof half_line - 1);
    }
    const double t0 = now_s();
    char *t = completion_text(port);
    const double dt = now_s() - t0;
    CHECK(t && dt < 2.0, "a new client beside %d slow ones: %.2f s", N_SLOW, dt);
    free(t);
    /* every slow connection is closed by the server's 10 s inactivity timeout */
    int closed = 0;
    const double t_end = t0 + 13.0;
    for (int i = 0; i < N_SLOW; i++) {
        if (fds[i] < 0) continue;
        for (;;) {
            const double left = t_end - now_s();
            struct pollfd p = { fds[i], POLLIN, 0 };
            if (left <= 0 || poll(&p, 1, (int)(left * 1000)) <= 0) break;
            char b[512];
            const ssize_t k = read(fds[i], b, sizeof b);
            if (k <= 0) {
                closed++;
                break;
            }
        }
        close(fds[i]);
    }
    CHECK(closed == N_SLOW, "%d of %d slow connections closed by the server within 13 s", closed, N_SLOW);
}

static void test_sizes(int port)
{
    char msg[512];
    /* headers past 16 KiB */
    const size_t hn = 20000;
    char *req = malloc(hn + 512);
    int n = snprintf(req, 512, "POST /v1/completions HTTP/1.0\r\nHost: x\r\nX-Big: ");
    memset(req + n, 'a', hn);
    n += (int)hn;
    n += snprintf(req + n, 512, "\r\nContent-Length: %zu\r\n\r\n%s", strlen(plain_body), plain_body);
    int st = raw_status(port, req, (size_t)n, msg, sizeof msg);
    CHECK(st == 431 && strstr(msg, "headers exceed"), "20 kB of headers: %d %s", st, msg);
    free(req);
    /* a body past 4 MiB */
    const size_t bn = (4u << 20) + 100;
    char *body = malloc(bn + 1);
    memset(body, ' ', bn);
    memcpy(body, plain_body, sizeof plain_body - 1);
    body[bn] = 0;
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, body);
    CHECK(r.status == 413 && r.body && strstr(r.body, "\"error\""), "a 4 MiB body: %d", r.status);
    free(r.body);
    free(body);
}

static void test_bodies(int port)
{
    static const char *const paths[] = { "/v1/completions", "/v1/chat/completions", "/tokenize",
                                         "/detokenize", "/apply-template" };
    char deep[256];
    int n = snprintf(deep, sizeof deep, "{\"prompt\": \"a\", \"x\": ");
    for (int i = 0; i < 70; i++) deep[n++] = '[';
    for (int i = 0; i < 70; i++) deep[n++] = ']';
    snprintf(deep + n, sizeof deep - (size_t)n, "}");
    const struct {
        const char *body;
        const char *want;
    } bad[] = {
        { "{\"prompt\": \"a\", \"content\": \"a\"} junk", "trailing bytes" },
        { "{\"prompt\": \"\xff\xfe\"}", "not valid UTF-8" },
        { "{\"prompt\": \"\\ud83d\"}", "no Unicode code point" },
        { "{\"prompt\": \"a\", \"prompt\": \"b\"}", "twice" },
        { deep, "more than 64 deep" },
    };
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++)
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            http_resp r = http_request(port, "POST", paths[p], NULL, bad[k].body);
            cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
            const cJSON *e = cJSON_GetObjectItem(j, "error");
            const cJSON *m = cJSON_GetObjectItem(e, "message"), *t = cJSON_GetObjectItem(e, "type");
            CHECK(r.status == 400 && cJSON_IsString(m) && strstr(m->valuestring, bad[k].want) &&
                      cJSON_IsString(t) && !strcmp(t->valuestring, "invalid_request_error"),
                  "%s, body %zu: %d %s", paths[p], k, r.status, r.body ? r.body : "");
            cJSON_Delete(j);
            free(r.body);
        }
}

/* Seconds until the server closes fd (reads and discards), or -1 past limit_s. */
static double seconds_to_eof(int fd, double limit_s)
{
    const double t0 = now_s();
    for (;;) {
        const double left = t0 + limit_s - now_s();
        struct pollfd p = { fd, POLLIN, 0 };
        if (left <= 0 || poll(&p, 1, (int)(left * 1000)) <= 0) return -1;
        char b[512];
        if (read(fd, b, sizeof b) <= 0) return now_s() - t0;
    }
}

static void test_flags(void)
{
    test_server s;
    if (!test_server_start(&s, "--parallel 2 --body-max 4096 --timeout 2", "server_hardening_flags.err")) {
        CHECK(false, "server with limit flags did not start");
        return;
    }
    char body[5200];
    for (int k = 0; k < 2; k++) {
        const size_t bn = k ? 5000 : 3000;
        memset(body, ' ', bn);
        memcpy(body, plain_body, sizeof plain_body - 1);
        body[bn] = 0;
        http_resp r = http_request(s.port, "POST", "/v1/completions", NULL, body);
        if (k)
            CHECK(r.status == 413 && r.body && strstr(r.body, "exceeds 4096 bytes"), "--body-max: %d %s",
                  r.status, r.body ? r.body : "");
        else
            CHECK(r.status == 200, "--body-max 4096 serves 3000 bytes: %d", r.status);
        free(r.body);
    }
    int fd = http_connect(s.port);
    http_send_all(fd, "POST /v1/compl", 14);
    const double dt = seconds_to_eof(fd, 6.0);
    CHECK(dt > 1.0 && dt < 4.0, "--timeout 2 closes a silent connection after %.2f s", dt);
    close(fd);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

int main(void)
{
    test_flags();
    test_server s;
    if (!test_server_start(&s, "--parallel 4", "server_hardening.err")) {
        CHECK(false, "server did not start");
        return test_main_end();
    }
    char *before = completion_text(s.port);
    CHECK(before && before[0], "a plain completion");
    test_bodies(s.port);
    test_sizes(s.port);
    test_slow_clients(s.port);
    char *after = completion_text(s.port);
    CHECK(before && after && !strcmp(before, after), "the same greedy text after the abuse: '%s' vs '%s'",
          before ? before : "", after ? after : "");
    free(before);
    free(after);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    return test_main_end();
}
