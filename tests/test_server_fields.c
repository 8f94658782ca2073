/*
 * test_server_fields.c — `kvinfer serve` features beyond test_server.c, over
 * real HTTP on 127.0.0.1 with stories260K (a child process on a free port):
 *
 *  - the prefix cache across requests: the same long prompt twice; the second
 *    reports usage.prompt_tokens_details.cached_tokens (whole 16-token blocks,
 *    never the whole prompt) and the same greedy text, both equal to
 *    `kvinfer run --temp 0`; /metrics counts the cached tokens; with
 *    --no-prefix-cache nothing is cached and the text is the same;
 *  - presence_penalty / frequency_penalty: outside [-2, 2] is 400; 0 leaves the
 *    greedy text as `kvinfer run` gives it; a strong frequency penalty makes a
 *    greedy text with fewer of the most repeated tokens (periods and commas);
 *  - a non-streamed request whose client disconnects is cancelled: its KV
 *    blocks are freed and /metrics counts it, long before it would have ended.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct server {
    pid_t pid;
    int port;
    FILE *out;
} server;

static bool server_start(server *s, const char *extra)
{
    int fd[2];
    if (pipe(fd) != 0) return false;
    s->pid = fork();
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "exec '%s' serve -m '%s' --port 0 -t 2 --quiet %s 2>'%s'", KVI_BIN,
                 shared_path("models/stories260K.gguf"), extra, tmp_path("fields_server.err"));
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    s->out = fdopen(fd[0], "r");
    char line[256];
    s->port = 0;
    bool ready = false;
    while (s->out && fgets(line, sizeof line, s->out)) {
        const char *p = strstr(line, "127.0.0.1:");
        if (p) s->port = atoi(p + 10);
        if (strstr(line, "kvinfer: ready")) {
            ready = true;
            break;
        }
    }
    return ready && s->port > 0;
}

static int server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    int st = 0;
    waitpid(s->pid, &st, 0);
    if (s->out) fclose(s->out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_request(int port, const char *method, const char *path, const char *body)
{
    int fd = connect_to(port);
    if (fd < 0) return -1;
    char head[512];
    const size_t blen = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, blen);
    send(fd, head, (size_t)n, MSG_NOSIGNAL);
    if (body) send(fd, body, blen, MSG_NOSIGNAL);
    return fd;
}

typedef struct resp {
    int status;
    char *body;   /* malloc'd, after the headers */
} resp;

static resp http(int port, const char *method, const char *path, const char *body)
{
    resp r = {0, NULL};
    int fd = send_request(port, method, path, body);
    if (fd < 0) return r;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = 0;
    sscanf(buf, "HTTP/1.%*d %d", &r.status);
    char *b = strstr(buf, "\r\n\r\n");
    r.body = strdup(b ? b + 4 : "");
    free(buf);
    return r;
}

static double metric(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = text ? strstr(text, key) : NULL;
    return p ? atof(p + strlen(key)) : -1;
}

/* `kvinfer run --temp 0 --json` text of a prompt. */
static char *run_text(const char *prompt, int n)
{
    char *args = malloc(strlen(prompt) + 512), *out = NULL;
    sprintf(args, "run -m '%s' -p '%s' -n %d --temp 0 --ignore-eos --json -t 2", shared_path("models/stories260K.gguf"),
            prompt, n);
    int rc = run_kvinfer(args, &out, NULL);
    free(args);
    CHECK(rc == 0, "kvinfer run failed (%d)", rc);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    const cJSON *t = cJSON_GetObjectItem(j, "text");
    char *s = strdup(cJSON_IsString(t) ? t->valuestring : "");
    cJSON_Delete(j);
    free(out);
    return s;
}

/* Non-streamed completion: text (malloc'd) and usage numbers. */
typedef struct completion {
    int status;
    char *text;
    int prompt_tokens, completion_tokens, cached_tokens;
    cJSON *json;   /* whole response (cJSON_Delete) */
} completion;

static completion complete(int port, const char *body)
{
    completion c = {0, NULL, -1, -1, -1, NULL};
    resp r = http(port, "POST", "/v1/completions", body);
    c.status = r.status;
    c.json = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(c.json, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(c0, "text");
    c.text = strdup(cJSON_IsString(t) ? t->valuestring : "");
    const cJSON *u = cJSON_GetObjectItem(c.json, "usage");
    const cJSON *pt = cJSON_GetObjectItem(u, "prompt_tokens"), *ct = cJSON_GetObjectItem(u, "completion_tokens");
    const cJSON *cc = cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), "cached_tokens");
    if (cJSON_IsNumber(pt)) c.prompt_tokens = pt->valueint;
    if (cJSON_IsNumber(ct)) c.completion_tokens = ct->valueint;
    if (cJSON_IsNumber(cc)) c.cached_tokens = cc->valueint;
    if (c.status != 200) fprintf(stderr, "response %d: %s\n", r.status, r.body ? r.body : "");
    free(r.body);
    return c;
}

static void completion_free(completion *c)
{
    free(c->text);
    cJSON_Delete(c->json);
}

#define LONG_PROMPT                                                                                                 \
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. " \
    "One day, she saw a big red ball under a tree. She ran to the ball and picked it up. Her mom said it was time "  \
    "to go home, so Lily took the ball and said thank you to the tree. The sun was warm and the birds sang a happy " \
    "song. Lily smiled and ran home with her mom"

static void test_prefix_cache(void)
{
    char *ref = run_text(LONG_PROMPT, 24);
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}", LONG_PROMPT);

    server s;
    if (!server_start(&s, "")) {
        CHECK(false, "server did not start (see %s)", tmp_path("fields_server.err"));
        free(ref);
        return;
    }
    completion a = complete(s.port, body);
    completion b = complete(s.port, body);
    CHECK(a.status == 200 && b.status == 200, "status %d %d", a.status, b.status);
    CHECK(a.prompt_tokens > 64 && a.prompt_tokens == b.prompt_tokens, "prompt tokens %d %d", a.prompt_tokens,
          b.prompt_tokens);
    CHECK(a.cached_tokens == 0, "first request: %d cached tokens on a fresh server", a.cached_tokens);
    /* whole 16-token blocks, the last prompt token always computed */
    const int want = (b.prompt_tokens - 1) / 16 * 16;
    CHECK(b.cached_tokens == want, "second request: %d cached tokens, want %d of %d", b.cached_tokens, want,
          b.prompt_tokens);
    CHECK(!strcmp(a.text, ref) && !strcmp(b.text, ref), "greedy text with the prefix cache differs from kvinfer run:\n"
          "  run:    %s\n  first:  %s\n  second: %s", ref, a.text, b.text);
    CHECK(b.completion_tokens == 24, "completion tokens %d", b.completion_tokens);

    /* a prompt that shares only the first blocks: fewer cached tokens, still correct */
    char body2[2048], prompt2[1024];
    snprintf(prompt2, sizeof prompt2, "%.120s and a cat sat on the mat", LONG_PROMPT);
    char *ref2 = run_text(prompt2, 16);
    snprintf(body2, sizeof body2, "{\"prompt\":\"%s\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}", prompt2);
    completion c = complete(s.port, body2);
    CHECK(c.status == 200 && c.cached_tokens > 0 && c.cached_tokens < want && c.cached_tokens % 16 == 0,
          "partial prefix: %d cached tokens (full prompt %d)", c.cached_tokens, want);
    CHECK(!strcmp(c.text, ref2), "partial prefix text differs: '%s' vs '%s'", c.text, ref2);

    resp m = http(s.port, "GET", "/metrics", NULL);
    const double cached = metric(m.body, "kvinfer_prompt_tokens_cached_total");
    const double ratio = metric(m.body, "kvinfer_prefix_cache_hit_ratio");
    const double prompt = a.prompt_tokens + b.prompt_tokens + c.prompt_tokens;
    CHECK(cached == want + c.cached_tokens, "metrics: %g cached tokens, want %d", cached, want + c.cached_tokens);
    CHECK(fabs(ratio - cached / prompt) < 1e-6, "hit ratio %g, cached %g of %g prompt tokens", ratio, cached, prompt);
    free(m.body);
    CHECK(server_stop(&s) == 0, "server exit status");

    /* --no-prefix-cache: nothing cached, the same text */
    if (server_start(&s, "--no-prefix-cache")) {
        completion d = complete(s.port, body);
        completion e = complete(s.port, body);
        CHECK(d.cached_tokens == 0 && e.cached_tokens == 0, "no prefix cache: %d %d cached", d.cached_tokens,
              e.cached_tokens);
        CHECK(!strcmp(e.text, ref), "no prefix cache text differs");
        completion_free(&d);
        completion_free(&e);
        CHECK(server_stop(&s) == 0, "server exit status");
    } else {
        CHECK(false, "server --no-prefix-cache did not start");
    }
    completion_free(&a);
    completion_free(&b);
    completion_free(&c);
    free(ref);
    free(ref2);
}

/* Periods and commas in a text: the tokens a small story model repeats most. */
static int punct_count(const char *t)
{
    int n = 0;
    for (; *t; t++) n += *t == '.' || *t == ',';
    return n;
}

static void test_penalties(void)
{
    server s;
    if (!server_start(&s, "")) {
        CHECK(false, "server did not start");
        return;
    }
    resp r = http(s.port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"presence_penalty\":2.5}");
    CHECK(r.status == 400 && r.body && strstr(r.body, "presence_penalty"), "presence 2.5: %d %s", r.status, r.body);
    free(r.body);
    r = http(s.port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"frequency_penalty\":\"high\"}");
    CHECK(r.status == 400, "frequency string: %d", r.status);
    free(r.body);

    char *ref = run_text("Once upon a time", 64);
    completion a = complete(s.port, "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,"
                                    "\"ignore_eos\":true,\"presence_penalty\":0,\"frequency_penalty\":0}");
    CHECK(!strcmp(a.text, ref), "penalties 0 change the greedy text");
    completion b = complete(s.port, "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,"
                                    "\"ignore_eos\":true,\"frequency_penalty\":2}");
    CHECK(b.status == 200 && b.completion_tokens == 64 && strcmp(b.text, ref) != 0, "frequency 2: same text as greedy");
    CHECK(punct_count(b.text) < punct_count(ref), "frequency 2: %d periods and commas, greedy %d", punct_count(b.text),
          punct_count(ref));
    completion_free(&a);
    completion_free(&b);
    free(ref);
    CHECK(server_stop(&s) == 0, "server exit status");
}

static void test_disconnect_non_streamed(void)
{
    server s;
    if (!server_start(&s, "")) {
        CHECK(false, "server did not start");
        return;
    }
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":480,\"ignore_eos\":true}";
    const double t0 = kvi_time_ms();
    int fd = send_request(s.port, "POST", "/v1/completions", body);
    CHECK(fd >= 0, "connect");
    usleep(100000);
    close(fd);
    double cancelled = 0, used = -1;
    for (int i = 0; i < 100 && (cancelled != 1 || used != 0); i++) {
        usleep(20000);
        resp m = http(s.port, "GET", "/metrics", NULL);
        cancelled = metric(m.body, "kvinfer_requests_cancelled_total");
        used = metric(m.body, "kvinfer_kv_blocks_used");
        free(m.body);
    }
    CHECK(cancelled == 1 && used == 0, "after the disconnect: %g cancelled, %g KV blocks used", cancelled, used);
    resp m = http(s.port, "GET", "/metrics", NULL);
    CHECK(metric(m.body, "kvinfer_generation_tokens_total") < 480, "the request ran to its end (%g tokens)",
          metric(m.body, "kvinfer_generation_tokens_total"));
    free(m.body);
    /* the server still answers */
    completion c = complete(s.port, "{\"prompt\":\"Once\",\"max_tokens\":4}");
    CHECK(c.status == 200 && c.completion_tokens == 4, "request after the disconnect: %d", c.status);
    completion_free(&c);
    fprintf(stderr, "disconnect handled in %.0f ms\n", kvi_time_ms() - t0);
    CHECK(server_stop(&s) == 0, "server exit status");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_prefix_cache();
    test_penalties();
    test_disconnect_non_streamed();
    return test_main_end();
}
