/*
 * test_server_ops.c — `kvinfer serve`'s operations flags over real HTTP on
 * 127.0.0.1 (stories260K as a child process; http_util.h):
 *
 *  - any `model` name is served and answered with the alias; --strict-model
 *    refuses another name with 404 model_not_found;
 *  - -n caps an absent or larger max_tokens (finish "length", the text equal to
 *    `kvinfer run --temp 0`'s for that many tokens), a smaller one stands;
 *  - -l adds to every request's logit_bias: -l 2+100 (</s>) ends every
 *    generation at once unless the request's own {"2": -100} cancels it (the
 *    two are summed: the greedy text is run's again); -l 2-inf beside it keeps
 *    </s> out whatever else is added;
 *  - the request log (stderr): one line per request that reached a route, in
 *    JSON (--log-format json) and in text, its id, route, status, client,
 *    tokens and finish equal to the response's, the unknown body fields
 *    named; --quiet writes none;
 *  - CORS: OPTIONS on any path (no key needed) is a 204 preflight with
 *    --cors-origin, the methods, the asked headers echoed (else a list with
 *    Authorization and x-api-key) and a max age; every answer carries the
 *    origin; /metrics needs the key under --api-key unless --metrics-public;
 *  - GET /props (behind the key): -c as n_ctx, --parallel as total_slots, -n
 *    and -l in params, the model's path, text-only modalities, the chat
 *    template in use; GET /slots: --parallel entries, a running stream in one
 *    as "processing" with its prompt's token count, the other "idle";
 *  - SIGTERM drains: a stream in flight runs to its end (max_tokens, [DONE]),
 *    a new request meanwhile gets 503 in OpenAI's error shape, /health 503
 *    "shutting down", and the process exits 0 within the timeout; with
 *    --shutdown-timeout 1 a long stream is cut and the exit comes within 1 s
 *    plus the shutdown's own time; a second SIGTERM cuts it at once.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "http_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROMPT "Once upon a time"

/* A non-streamed completion: its parsed body (NULL unless status 200). */
static cJSON *complete(int port, const char *body, int *status)
{
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, body);
    *status = r.status;
    cJSON *j = r.status == 200 && r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return j;
}

static const cJSON *choice0(const cJSON *j)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static int completion_tokens(const cJSON *j)
{
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* A greedy completion of PROMPT with extra fields: its text, tokens and finish
 * must be these (ref NULL: any text). */
static void expect_completion(int port, const char *fields, const char *ref, int n_tokens, const char *finish,
                              const char *what)
{
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\": \"" PROMPT "\", \"temperature\": 0%s}", fields);
    int status = 0;
    cJSON *j = complete(port, body, &status);
    CHECK(j != NULL, "%s: status %d", what, status);
    if (!j) return;
    CHECK(completion_tokens(j) == n_tokens, "%s: %d tokens, want %d", what, completion_tokens(j), n_tokens);
    CHECK(!strcmp(str_of(choice0(j), "finish_reason"), finish), "%s: finish %s, want %s", what,
          str_of(choice0(j), "finish_reason"), finish);
    if (ref)
        CHECK(!strcmp(str_of(choice0(j), "text"), ref), "%s: text '%s', want run's '%s'", what,
              str_of(choice0(j), "text"), ref);
    cJSON_Delete(j);
}

/* --strict-model -n 5 -l 2+100: the cap, the merged bias, the strict name. */
static void test_cap_bias_strict(const char *ref5, const char *ref3)
{
    test_server s;
    CHECK(test_server_start(&s, "--strict-model -n 5 -l 2+100", "ops_cap.err"), "server did not start");
    if (s.port <= 0) {
        test_server_stop(&s);
        return;
    }
    static const char cancel[] = ", \"logit_bias\": {\"2\": -100}";
    char f[256];
    expect_completion(s.port, cancel, ref5, 5, "length", "-n 5, no max_tokens");
    snprintf(f, sizeof f, "%s, \"max_tokens\": 50", cancel);
    expect_completion(s.port, f, ref5, 5, "length", "-n 5, max_tokens 50");
    snprintf(f, sizeof f, "%s, \"max_tokens\": 3", cancel);
    expect_completion(s.port, f, ref3, 3, "length", "-n 5, max_tokens 3");
    /* the server's +100 alone: </s> at once */
    expect_completion(s.port, "", NULL, 0, "stop", "-l 2+100 without the request's bias");
    int status = 0;
    cJSON *j = complete(s.port, "{\"prompt\": \"Once\", \"model\": \"gpt-4\"}", &status);
    CHECK(status == 404 && !j, "--strict-model: another name got %d", status);
    cJSON_Delete(j);
    j = complete(s.port, "{\"prompt\": \"Once\", \"model\": \"stories260K\", \"max_tokens\": 1}", &status);
    CHECK(status == 200, "--strict-model: its own name got %d", status);
    cJSON_Delete(j);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

/* No --strict-model, -l 2+100 -l 2-inf: any name, answered with the alias;
 * </s> never sampled. */
static void test_any_model(const char *ref6)
{
    test_server s;
    CHECK(test_server_start(&s, "-l 2+100 -l 2-inf", "ops_any.err"), "server did not start");
    if (s.port <= 0) {
        test_server_stop(&s);
        return;
    }
    int status = 0;
    cJSON *j = complete(s.port,
                        "{\"prompt\": \"" PROMPT "\", \"model\": \"claude-sonnet-4-5\", \"max_tokens\": 6, "
                        "\"temperature\": 0}",
                        &status);
    CHECK(status == 200, "another model's name got %d", status);
    CHECK(!strcmp(str_of(j, "model"), "stories260K"), "answered as '%s', want the alias", str_of(j, "model"));
    CHECK(!strcmp(str_of(choice0(j), "text"), ref6), "text '%s', want run's '%s'", str_of(choice0(j), "text"),
          ref6);
    CHECK(!strcmp(str_of(choice0(j), "finish_reason"), "length"), "-inf: finish %s",
          str_of(choice0(j), "finish_reason"));
    cJSON_Delete(j);
    http_resp r = http_request(s.port, "POST", "/v1/chat/completions", NULL,
                               "{\"model\": \"gpt-4o\", \"messages\": [{\"role\": \"user\", \"content\": "
                               "\"hi\"}], \"max_tokens\": 2}");
    j = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK(r.status == 200 && !strcmp(str_of(j, "model"), "stories260K"), "chat with gpt-4o: %d %s", r.status,
          r.body ? r.body : "");
    cJSON_Delete(j);
    free(r.body);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

static int num_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* POST body to path on port: CHECKs the status. */
static void expect_status(int port, const char *path, const char *body, int status)
{
    http_resp r = http_request(port, "POST", path, NULL, body);
    CHECK(r.status == status, "%s: %d, want %d (%.200s)", path, r.status, status, r.body ? r.body : "");
    free(r.body);
}

static void test_log_json(void)
{
    test_server s;
    char extra[1024];
    snprintf(extra, sizeof extra, "--log-format json --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    CHECK(test_server_start_logged(&s, extra, "ops_log.err"), "server did not start");
    if (s.port <= 0) {
        test_server_stop(&s);
        return;
    }
    http_resp h = http_request(s.port, "GET", "/health", NULL, NULL);
    free(h.body);
    int status = 0;
    cJSON *j =
        complete(s.port,
                 "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 7, \"temperature\": 0, \"foo_unknown\": 1, "
                 "\"user\": \"u\", \"mirostat\": 0}",
                 &status);
    CHECK(j != NULL, "completion: %d", status);
    http_resp bad =
        http_request(s.port, "POST", "/v1/completions", NULL, "{\"prompt\": \"x\", \"top_k\": \"a\"}");
    CHECK(bad.status == 400, "bad top_k: %d", bad.status);
    free(bad.body);
    expect_status(s.port, "/tokenize", "{\"content\": \"a\", \"add_special\": true, \"with_pieces\": true}",
                  200);
    /* special-token text beside a private-use marker: it cannot be told apart,
     * so it is recognised and the log line says so */
    expect_status(s.port, "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\ue000</s>\"}], \"max_tokens\": 1}",
                  200);
    /* fill in the middle: stories260K has no FIM tokens (400), but the fields are known */
    expect_status(s.port, "/v1/completions",
                  "{\"prompt\": \"a\", \"suffix\": \"b\", \"input_extra\": [], \"foo_fim\": 1}", 400);
    expect_status(s.port, "/infill",
                  "{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [], "
                  "\"n_predict\": 4, \"prompt\": \"\", \"foo_fim\": 1}",
                  400);
    bad = http_request(s.port, "POST", "/infill", NULL, "{\"input_prefix\": \"a\", \"n_probs\": 3}");
    CHECK(bad.status == 400 && bad.body && strstr(bad.body, "'n_probs' is not supported on /infill"),
          "n_probs on /infill: %d %s", bad.status, bad.body ? bad.body : "");
    free(bad.body);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    int n = 0;
    cJSON *a = test_log_lines("ops_log.err", "/health", &n);
    const cJSON *l = cJSON_GetArrayItem(a, 0);
    CHECK(n == 1 && num_of(l, "status") == 200 && !strcmp(str_of(l, "method"), "GET") &&
              cJSON_IsNull(cJSON_GetObjectItem(l, "id")) &&
              cJSON_IsNull(cJSON_GetObjectItem(l, "finish_reason")),
          "/health line (%d)", n);
    cJSON_Delete(a);
    a = test_log_lines("ops_log.err", "/v1/completions", &n);
    CHECK(n == 3, "%d completion lines, want 3", n);
    /* a generation's line is written when the request is freed, which may come
     * after the client had its answer and sent the next request */
    int first = 0, fim = -1;
    for (int i = 0; i < n; i++) {
        const cJSON *li = cJSON_GetArrayItem(a, i);
        if (!strcmp(str_of(li, "id"), str_of(j, "id"))) first = i;
        if (cJSON_GetArraySize(cJSON_GetObjectItem(li, "unknown_fields")) == 1) fim = i;
    }
    l = cJSON_GetArrayItem(a, first);
    const cJSON *usage = cJSON_GetObjectItem(j, "usage");
    CHECK(!strcmp(str_of(l, "id"), str_of(j, "id")), "log id %s, response id %s", str_of(l, "id"),
          str_of(j, "id"));
    CHECK(num_of(l, "status") == 200 && !strcmp(str_of(l, "client"), "127.0.0.1") &&
              !strcmp(str_of(l, "method"), "POST"),
          "status / client / method");
    CHECK(num_of(l, "completion_tokens") == 7 && !strcmp(str_of(l, "finish_reason"), "length"),
          "tokens %d, finish %s", num_of(l, "completion_tokens"), str_of(l, "finish_reason"));
    CHECK(num_of(l, "prompt_tokens") == num_of(usage, "prompt_tokens") && num_of(l, "prompt_tokens") > 0,
          "prompt_tokens %d, response %d", num_of(l, "prompt_tokens"), num_of(usage, "prompt_tokens"));
    CHECK(num_of(l, "cached_tokens") == 0, "cached_tokens %d", num_of(l, "cached_tokens"));
    const cJSON *ttft = cJSON_GetObjectItem(l, "ttft_ms"), *dur = cJSON_GetObjectItem(l, "duration_ms");
    CHECK(cJSON_IsNumber(ttft) && cJSON_IsNumber(dur) && ttft->valuedouble >= 0 &&
              dur->valuedouble >= ttft->valuedouble,
          "ttft / duration");
    const cJSON *u = cJSON_GetObjectItem(l, "unknown_fields");
    CHECK(cJSON_GetArraySize(u) == 2 && !strcmp(cJSON_GetArrayItem(u, 0)->valuestring, "foo_unknown") &&
              !strcmp(cJSON_GetArrayItem(u, 1)->valuestring, "user"),
          "unknown fields: want foo_unknown, user (mirostat is known)");
    l = cJSON_GetArrayItem(a, 3 - first - fim);
    CHECK(num_of(l, "status") == 400 && cJSON_IsNull(cJSON_GetObjectItem(l, "completion_tokens")),
          "the refused request's line");
    l = cJSON_GetArrayItem(a, fim);
    CHECK(num_of(l, "status") == 400 && test_log_names(l, "unknown_fields", "foo_fim"),
          "suffix and input_extra are known on /v1/completions");
    cJSON_Delete(a);
    CHECK(test_log_one("ops_log.err", "/v1/chat/completions", "notes", "special_text_recognised"),
          "the chat line notes the special text");
    CHECK(test_log_one("ops_log.err", "/tokenize", "unknown_fields", "with_pieces"),
          "/tokenize names with_pieces");
    a = test_log_lines("ops_log.err", "/infill", &n);
    l = cJSON_GetArrayItem(a, 0);
    CHECK(n == 2 && num_of(l, "status") == 400 && test_log_names(l, "unknown_fields", "foo_fim"),
          "/infill's fields are known (%d lines)", n);
    cJSON_Delete(a);
    cJSON_Delete(j);
}

/* Text: "TIME ID METHOD PATH STATUS CLIENT prompt=N cached=N gen=N ttft_ms=X ms=X finish=F unknown=..." */
static void test_log_text(void)
{
    test_server s;
    CHECK(test_server_start_logged(&s, "", "ops_logt.err"), "server did not start");
    if (s.port <= 0) {
        test_server_stop(&s);
        return;
    }
    http_resp r =
        http_request(s.port, "POST", "/v1/chat/completions", NULL,
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3, "
                     "\"stream\": true, \"metadata\": {}}");
    CHECK(r.status == 200, "stream: %d", r.status);
    free(r.body);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    size_t len = 0;
    char *text = read_file(tmp_path("ops_logt.err"), &len);
    const char *line = text ? strstr(text, " POST /v1/chat/completions ") : NULL;
    char id[64] = "", client[64] = "", finish[32] = "", unknown[64] = "";
    int status = 0, prompt = -1, cached = -1, gen = -1;
    double ttft = -1, ms = -1;
    while (line && line > text && line[-1] != '\n') line--;
    const int got = line ? sscanf(line,
                                  "%*s %63s POST /v1/chat/completions %d %63s prompt=%d cached=%d gen=%d "
                                  "ttft_ms=%lf ms=%lf finish=%31s unknown=%63s",
                                  id, &status, client, &prompt, &cached, &gen, &ttft, &ms, finish, unknown)
                         : 0;
    CHECK(got == 10, "text line fields: %d in '%.200s'", got, line ? line : "(no line)");
    CHECK(!strncmp(id, "chatcmpl-", 9) && status == 200 && !strcmp(client, "127.0.0.1"), "id %s status %d",
          id, status);
    CHECK(gen == 3 && prompt > 0 && cached == 0 && !strcmp(finish, "length") && ms >= ttft && ttft >= 0,
          "tokens / finish");
    CHECK(!strcmp(unknown, "metadata"), "unknown=%s, want metadata", unknown);
    free(text);
    /* --quiet: no line */
    CHECK(test_server_start(&s, "", "ops_quiet.err"), "quiet server did not start");
    http_resp h = http_request(s.port, "GET", "/health", NULL, NULL);
    free(h.body);
    test_server_stop(&s);
    text = read_file(tmp_path("ops_quiet.err"), &len);
    CHECK(text && !strstr(text, "/health"), "--quiet wrote a log line");
    free(text);
}

/* One exchange, the whole reply as read (headers and body; malloc'd). */
static char *raw_exchange(int port, const char *method, const char *path, const char *headers,
                          const char *body)
{
    int fd = http_send_request(port, method, path, headers, body, body ? strlen(body) : 0);
    if (fd < 0) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t k;
    while (buf && len + 1 < cap && (k = recv(fd, buf + len, cap - 1 - len, 0)) > 0) len += (size_t)k;
    close(fd);
    if (buf) buf[len] = 0;
    return buf;
}

static int raw_status(const char *reply)
{
    int st = 0;
    return reply && sscanf(reply, "HTTP/1.%*d %d", &st) == 1 ? st : 0;
}

/* The value of header name in reply's head (case-insensitive name), or "". */
static void header_of(const char *reply, const char *name, char *out, size_t cap)
{
    out[0] = 0;
    const size_t n = strlen(name);
    for (const char *l = reply ? strstr(reply, "\r\n") : NULL; l && strncmp(l, "\r\n\r\n", 4) != 0;
         l = strstr(l + 2, "\r\n")) {
        if (!strncasecmp(l + 2, name, n) && l[2 + n] == ':') {
            const char *v = l + 3 + n;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            snprintf(out, cap, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return;
        }
    }
}

#define KEY_HDR "Authorization: Bearer k3y\r\n"

static void test_cors_metrics(void)
{
    test_server s;
    CHECK(test_server_start(&s, "--api-key k3y --cors-origin https://app.example", "ops_cors.err"),
          "server did not start");
    if (s.port <= 0) {
        test_server_stop(&s);
        return;
    }
    char v[256];
    char *r = raw_exchange(s.port, "OPTIONS", "/v1/chat/completions",
                           "Origin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n"
                           "Access-Control-Request-Headers: authorization,content-type,x-stainless-os\r\n",
                           NULL);
    CHECK(raw_status(r) == 204, "preflight status %d", raw_status(r));
    header_of(r, "Access-Control-Allow-Origin", v, sizeof v);
    CHECK(!strcmp(v, "https://app.example"), "preflight origin '%s'", v);
    header_of(r, "Access-Control-Allow-Methods", v, sizeof v);
    CHECK(strstr(v, "POST") && strstr(v, "GET") && strstr(v, "OPTIONS"), "methods '%s'", v);
    header_of(r, "Access-Control-Allow-Headers", v, sizeof v);
    CHECK(!strcmp(v, "authorization,content-type,x-stainless-os"), "asked headers not echoed: '%s'", v);
    header_of(r, "Access-Control-Max-Age", v, sizeof v);
    CHECK(atoi(v) > 0, "max age '%s'", v);
    free(r);
    r = raw_exchange(s.port, "OPTIONS", "/v1/messages", NULL, NULL);
    header_of(r, "Access-Control-Allow-Headers", v, sizeof v);
    CHECK(raw_status(r) == 204 && strstr(v, "Authorization") && strstr(v, "x-api-key") &&
              strstr(v, "anthropic-version") && strstr(v, "Content-Type"),
          "preflight without asked headers: %d '%s'", raw_status(r), v);
    free(r);
    r = raw_exchange(s.port, "POST", "/v1/completions", KEY_HDR, "{\"prompt\": \"Once\", \"max_tokens\": 2}");
    header_of(r, "Access-Control-Allow-Origin", v, sizeof v);
    CHECK(raw_status(r) == 200 && !strcmp(v, "https://app.example"), "completion: %d origin '%s'",
          raw_status(r), v);
    free(r);
    r = raw_exchange(s.port, "POST", "/v1/completions", KEY_HDR,
                     "{\"prompt\": \"Once\", \"max_tokens\": 2, \"stream\": true}");
    header_of(r, "Access-Control-Allow-Origin", v, sizeof v);
    CHECK(raw_status(r) == 200 && !strcmp(v, "https://app.example"), "stream: %d origin '%s'", raw_status(r),
          v);
    free(r);
    r = raw_exchange(s.port, "GET", "/v1/models", NULL, NULL);
    header_of(r, "Access-Control-Allow-Origin", v, sizeof v);
    CHECK(raw_status(r) == 401 && !strcmp(v, "https://app.example"), "401: %d origin '%s'", raw_status(r), v);
    free(r);
    r = raw_exchange(s.port, "GET", "/metrics", NULL, NULL);
    CHECK(raw_status(r) == 401, "/metrics without the key: %d", raw_status(r));
    free(r);
    r = raw_exchange(s.port, "GET", "/metrics", KEY_HDR, NULL);
    CHECK(raw_status(r) == 200 && strstr(r, "kvinfer_"), "/metrics with the key: %d", raw_status(r));
    free(r);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    CHECK(test_server_start(&s, "--api-key k3y --metrics-public", "ops_cors2.err"), "server did not start");
    r = raw_exchange(s.port, "GET", "/metrics", NULL, NULL);
    CHECK(raw_status(r) == 200, "--metrics-public: %d", raw_status(r));
    header_of(r, "Access-Control-Allow-Origin", v, sizeof v);
    CHECK(!strcmp(v, "*"), "default origin '%s'", v);
    free(r);
    r = raw_exchange(s.port, "GET", "/v1/models", NULL, NULL);
    CHECK(raw_status(r) == 401, "--metrics-public opened /v1/models: %d", raw_status(r));
    free(r);
    test_server_stop(&s);
}

static cJSON *get_json(int port, const char *path, const char *headers, int *status)
{
    http_resp r = http_request(port, "GET", path, headers, NULL);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return j;
}

static double num_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItem(b ? cJSON_GetObjectItem(o, a) : o, b ? b : a);
    return cJSON_IsNumber(v) ? v->valuedouble : -1e9;
}

static void test_props_slots(void)
{
    test_server s;
    char extra[512];
    snprintf(extra, sizeof extra,
             "-c 1024 --parallel 2 -n 900 -l 5+1.5 --api-key k3y --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    CHECK(test_server_start(&s, extra, "ops_props.err"), "server did not start");
    if (s.port <= 0) {
        test_server_stop(&s);
        return;
    }
    int st = 0;
    cJSON *j = get_json(s.port, "/props", NULL, &st);
    CHECK(st == 401, "/props without the key: %d", st);
    cJSON_Delete(j);
    j = get_json(s.port, "/props", KEY_HDR, &st);
    CHECK(st == 200 && j, "/props: %d", st);
    const cJSON *d = cJSON_GetObjectItem(j, "default_generation_settings");
    CHECK(num_at(d, "n_ctx", NULL) == 1024, "n_ctx %g", num_at(d, "n_ctx", NULL));
    CHECK(num_at(d, "params", "n_predict") == 900, "n_predict %g", num_at(d, "params", "n_predict"));
    const cJSON *lb =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "params"), "logit_bias"), 0);
    CHECK(cJSON_GetArraySize(lb) == 2 && cJSON_GetArrayItem(lb, 0)->valueint == 5 &&
              cJSON_GetArrayItem(lb, 1)->valuedouble == 1.5,
          "logit_bias [[5, 1.5]]");
    CHECK(num_at(j, "total_slots", NULL) == 2, "total_slots %g", num_at(j, "total_slots", NULL));
    CHECK(strstr(str_of(j, "model_path"), "stories260K.gguf") != NULL, "model_path %s",
          str_of(j, "model_path"));
    CHECK(!strcmp(str_of(j, "model_alias"), "stories260K"), "model_alias");
    CHECK(strstr(str_of(j, "chat_template"), "<|im_start|>") != NULL, "chat_template");
    const cJSON *mo = cJSON_GetObjectItem(j, "modalities");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(mo, "vision")) && cJSON_IsFalse(cJSON_GetObjectItem(mo, "audio")),
          "modalities");
    cJSON_Delete(j);
    /* a long stream; /slots polled while it runs */
    bool seen = false;
    for (int attempt = 0; attempt < 5 && !seen; attempt++) {
        static const char body[] = "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 900, \"ignore_eos\": true, "
                                   "\"stream\": true}";
        int fd = http_send_request(s.port, "POST", "/v1/completions", KEY_HDR, body, strlen(body));
        for (int poll = 0; poll < 200 && !seen; poll++) {
            j = get_json(s.port, "/slots", KEY_HDR, &st);
            const cJSON *s0 = cJSON_GetArrayItem(j, 0), *s1 = cJSON_GetArrayItem(j, 1);
            CHECK(st == 200 && cJSON_GetArraySize(j) == 2, "/slots: %d, %d entries", st,
                  cJSON_GetArraySize(j));
            if (cJSON_IsTrue(cJSON_GetObjectItem(s0, "is_processing"))) {
                seen = true;
                CHECK(!strcmp(str_of(s0, "state"), "processing") && !strcmp(str_of(s1, "state"), "idle"),
                      "slot states %s / %s", str_of(s0, "state"), str_of(s1, "state"));
                CHECK(num_at(s0, "n_prompt_tokens", NULL) == 5, "slot prompt tokens %g (want 5: BOS + 4)",
                      num_at(s0, "n_prompt_tokens", NULL));
                CHECK(num_at(s0, "n_tokens", NULL) >= 5 && num_at(s0, "n_ctx", NULL) == 1024,
                      "slot tokens / n_ctx");
            }
            cJSON_Delete(j);
        }
        if (fd >= 0) close(fd);
    }
    CHECK(seen, "no slot was seen processing");
    test_server_stop(&s);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A growing read buffer of one streamed reply. */
typedef struct stream_buf {
    char *p;
    size_t len, cap;
} stream_buf;

/* Reads fd into b until needle appears (NULL: to the close). Whether it did. */
static bool read_until(int fd, stream_buf *b, const char *needle)
{
    for (;;) {
        if (b->p && needle && strstr(b->p, needle)) return true;
        if (b->len + 4096 > b->cap) {
            b->cap = b->cap ? b->cap * 2 : 1 << 16;
            b->p = realloc(b->p, b->cap);
            if (!b->p) return false;
        }
        const ssize_t k = recv(fd, b->p + b->len, b->cap - b->len - 1, 0);
        if (k <= 0) return needle == NULL;
        b->len += (size_t)k;
        b->p[b->len] = 0;
    }
}

/* Token events and the last finish_reason of the SSE body in b. */
static int count_events(const char *body, char *finish, size_t cap, bool *done)
{
    const char *cur = body ? strstr(body, "\r\n\r\n") : NULL, *ev;
    size_t n;
    int events = 0;
    *done = false;
    finish[0] = 0;
    while (cur && sse_next(&cur, &ev, &n, done)) {
        cJSON *j = cJSON_ParseWithLength(ev, n);
        const cJSON *c = choice0(j);
        const cJSON *t = cJSON_GetObjectItem(c, "text");
        if (cJSON_IsString(t) && t->valuestring[0]) events++;
        const cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
        if (cJSON_IsString(f)) snprintf(finish, cap, "%s", f->valuestring);
        cJSON_Delete(j);
    }
    return events;
}

static int wait_exit(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* A server with flags, a greedy stream of max_tokens on it read to its first
 * event, then SIGTERM at *t0: the stream's socket, or -1 (server stopped). */
static int stream_then_term(const char *flags, const char *err_name, int max_tokens, test_server *s,
                            stream_buf *b, double *t0)
{
    CHECK(test_server_start(s, flags, err_name), "server did not start");
    if (s->port <= 0) {
        test_server_stop(s);
        return -1;
    }
    char body[256];
    snprintf(body, sizeof body,
             "{\"prompt\": \"" PROMPT "\", \"max_tokens\": %d, \"ignore_eos\": true, \"temperature\": 0, "
             "\"stream\": true}",
             max_tokens);
    int fd = http_send_request(s->port, "POST", "/v1/completions", NULL, body, strlen(body));
    CHECK(read_until(fd, b, "data: "), "no first event");
    kill(s->pid, SIGTERM);
    *t0 = now_s();
    return fd;
}

/* The stream read to the close (and freed): its token events, finish and [DONE]. */
static int stream_end(int fd, stream_buf *b, char *finish, size_t cap, bool *done)
{
    read_until(fd, b, NULL);
    close(fd);
    const int events = count_events(b->p, finish, cap, done);
    free(b->p);
    return events;
}

/* The server exits 0 within limit_s of the SIGTERM at t0. */
static void expect_exit(test_server *s, double t0, double limit_s)
{
    const int rc = wait_exit(s->pid);
    const double took = now_s() - t0;
    CHECK(rc == 0 && took < limit_s, "exit %d after %.1f s (limit %.0f s)", rc, took, limit_s);
    if (s->out) fclose(s->out);
}

static void test_drain(void)
{
    test_server s;
    stream_buf b = { 0 };
    double t0 = 0;
    const int fd = stream_then_term("-c 2048 --shutdown-timeout 120", "ops_drain.err", 2000, &s, &b, &t0);
    if (fd < 0) return;
    const struct timespec pause = { 0, 200 * 1000000L };
    nanosleep(&pause, NULL);
    http_resp r = http_request(s.port, "POST", "/v1/chat/completions", NULL,
                               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK(r.status == 503 && cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")),
          "a request while draining: %d %s", r.status, r.body ? r.body : "");
    cJSON_Delete(j);
    free(r.body);
    r = http_request(s.port, "GET", "/health", NULL, NULL);
    CHECK(r.status == 503 && r.body && strstr(r.body, "shutting down"), "/health while draining: %d %s",
          r.status, r.body ? r.body : "");
    free(r.body);
    char finish[32];
    bool done = false;
    const int events = stream_end(fd, &b, finish, sizeof finish, &done);
    CHECK(done && !strcmp(finish, "length") && events >= 1990, "the stream in flight: %d events, finish %s%s",
          events, finish, done ? "" : ", no [DONE]");
    expect_exit(&s, t0, 120.0); /* the stream's own time: under TSan 25 s */
}

/* A long stream cut by the drain's end: --shutdown-timeout 1 (the cut comes
 * after the timeout), or the default 30 s and a second SIGTERM 0.3 s later. */
static void test_drain_cut(bool second_signal)
{
    test_server s;
    stream_buf b = { 0 };
    double t0 = 0;
    const int fd = stream_then_term(second_signal ? "-c 8192" : "-c 8192 --shutdown-timeout 1",
                                    second_signal ? "ops_drain2.err" : "ops_drain1.err", 8000, &s, &b, &t0);
    if (fd < 0) return;
    if (second_signal) {
        const struct timespec pause = { 0, 300 * 1000000L };
        nanosleep(&pause, NULL);
        kill(s.pid, SIGTERM);
    }
    char finish[32];
    bool done = false;
    const int events = stream_end(fd, &b, finish, sizeof finish, &done);
    const double cut = now_s() - t0;
    CHECK(events < 8000 && strcmp(finish, "length") != 0, "%s: not cut: %d events, finish %s",
          second_signal ? "second signal" : "timeout 1 s", events, finish);
    CHECK(second_signal || cut >= 0.9, "cut after %.2f s, before the timeout", cut);
    expect_exit(&s, t0, 4.0);
}

int main(void)
{
    char *ref3 = run_text(PROMPT, 3), *ref5 = run_text(PROMPT, 5), *ref6 = run_text(PROMPT, 6);
    test_cap_bias_strict(ref5, ref3);
    test_any_model(ref6);
    test_log_json();
    test_log_text();
    test_cors_metrics();
    test_props_slots();
    test_drain();
    test_drain_cut(false);
    test_drain_cut(true);
    free(ref3);
    free(ref5);
    free(ref6);
    return test_main_end();
}
