/*
 * http_util.h — what the server tests share: `kvinfer serve` on stories260K as a
 * child process on a free port, its request log's JSON lines, a tiny HTTP/1.0
 * client, SSE events, Prometheus metric lines, the `kvinfer run --temp 0` reference text, and Node test
 * scripts (their skip and their "ok" / "all ok" lines).
 *
 * Invariants: a started test_server has pid > 0, port > 0 and `out` the read end
 * of the child's stdout (the port comes from its "127.0.0.1:<port>" line, ready
 * at "kvinfer: ready"); test_server_stop always reaps the child and closes `out`.
 * Every HTTP exchange is one connection, one request, read to the close.
 */
#ifndef KVI_TEST_HTTP_UTIL_H
#define KVI_TEST_HTTP_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

typedef struct test_server {
    pid_t pid;
    int port;
    FILE *out;
} test_server;

/* Runs `KVI_BIN serve -m stories260K --port 0 -t 2 --quiet <extra>` with stderr to
 * tmp_path(err_name); true once it printed "kvinfer: ready" and a port > 0. */
bool test_server_start(test_server *s, const char *extra, const char *err_name);
/* The same under a launcher: launcher (shell words, e.g. "mpirun -np 2") runs
 * the command. */
bool test_server_start_via(test_server *s, const char *launcher, const char *extra, const char *err_name);
/* The same without --quiet: the request log goes to tmp_path(err_name). */
bool test_server_start_logged(test_server *s, const char *extra, const char *err_name);
/* The request log's lines (--log-format json) in tmp_path(err_name) whose path
 * is path, in order, as an array of objects (cJSON_Delete it); *n of them. */
cJSON *test_log_lines(const char *err_name, const char *path, int *n);
/* o[k] as a string (NULL when absent or another type) / as a number (-1 then). */
const char *json_get_str(const cJSON *o, const char *k);
double json_get_num(const cJSON *o, const char *k);
/* Whether line[key] is an array of the names in want ("a,b"; "" for none). */
bool test_log_names(const cJSON *line, const char *key, const char *want);
/* Whether the log has exactly one line for path and its key names want. */
bool test_log_one(const char *err_name, const char *path, const char *key, const char *want);
/* SIGTERM and wait: the exit status, or 128 + the signal that ended it. */
int test_server_stop(test_server *s);

/* A connected TCP socket to 127.0.0.1:port, or -1. */
int http_connect(int port);
/* Sends all n bytes (stops quietly if the peer is gone; never SIGPIPE). */
void http_send_all(int fd, const char *p, size_t n);
/* Sends "METHOD path HTTP/1.0" with Host, JSON Content-Type, the extra header
 * lines `headers` (each ending "\r\n"; NULL for none), Content-Length blen and
 * the body (NULL: none, length 0). Returns the socket to read the reply from, or -1. */
int http_send_request(int port, const char *method, const char *path, const char *headers, const char *body,
                      size_t blen);

typedef struct http_resp {
    int status; /* from the status line; 0 when nothing came */
    char *body; /* malloc'd, after the headers; NULL when no connection */
} http_resp;

/* Reads fd to the close (and closes it): status and body. */
http_resp http_read_response(int fd);
/* One whole exchange: http_send_request with body's strlen, then http_read_response. */
http_resp http_request(int port, const char *method, const char *path, const char *headers, const char *body);

/* The next event of an SSE body from *cursor: true with its payload in
 * [*data, *data + *n); false at the end, with *done set on "data: [DONE]". */
bool sse_next(const char **cursor, const char **data, size_t *n, bool *done);

/* Value of the Prometheus line "name value" in text, or -1 when absent. */
double prom_metric(const char *text, const char *name);

/* `kvinfer run --temp 0 --ignore-eos --json -t 2` text of prompt, n tokens, on
 * stories260K (malloc'd; CHECKs the exit status). */
char *run_text(const char *prompt, int n);

/* Node test scripts (tests/openai, tests/anthropic): whether node (the path
 * node_bin, "" when not found at configure time) and dir/module_file exist;
 * when not, prints "skipped: <why>" naming packages (the caller returns 77). */
bool node_ready(const char *node_bin, const char *dir, const char *module_file, const char *packages);
/* Runs `cd dir && node_bin script http://127.0.0.1:port 2>&1`, echoing its
 * output; CHECKs its exit status 0, a final "all ok" line and at least
 * min_ok "ok ..." lines. */
void node_script_check(const char *node_bin, const char *dir, const char *script, int port, int min_ok);

#endif
