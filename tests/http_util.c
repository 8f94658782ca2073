/*
 * http_util.c — the server tests' child `kvinfer serve`, HTTP/1.0 client, SSE
 * event walk, metric lookup and `kvinfer run` reference text (see http_util.h).
 *
 * Responses are read into one growing buffer (starts at 64 KiB, doubles while
 * fewer than 4 KiB are free), NUL-terminated, then split at the first blank line.
 */
#include "http_util.h"

#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

bool test_server_start(test_server *s, const char *extra, const char *err_name)
{
    return test_server_start_via(s, "", extra, err_name);
}

static bool server_start(test_server *s, const char *launcher, const char *extra, const char *err_name,
                         bool quiet)
{
    int fd[2];
    s->pid = -1;
    s->port = 0;
    s->out = NULL;
    if (pipe(fd) != 0) return false;
    s->pid = fork();
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "exec %s '%s' serve -m '%s' --port 0 -t 2 %s %s 2>'%s'", launcher, KVI_BIN,
                 shared_path("models/stories260K.gguf"), quiet ? "--quiet" : "", extra ? extra : "",
                 tmp_path(err_name));
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    s->out = fdopen(fd[0], "r");
    char line[256];
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

bool test_server_start_via(test_server *s, const char *launcher, const char *extra, const char *err_name)
{
    return server_start(s, launcher, extra, err_name, true);
}

bool test_server_start_logged(test_server *s, const char *extra, const char *err_name)
{
    return server_start(s, "", extra, err_name, false);
}

cJSON *test_log_lines(const char *err_name, const char *path, int *n)
{
    char *text = read_file(tmp_path(err_name), NULL);
    cJSON *a = cJSON_CreateArray();
    *n = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : line + strlen(line)) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *j = line[0] == '{' ? cJSON_Parse(line) : NULL;
        const cJSON *p = cJSON_GetObjectItem(j, "path");
        if (cJSON_IsString(p) && !strcmp(p->valuestring, path)) {
            cJSON_AddItemToArray(a, j);
            (*n)++;
        } else {
            cJSON_Delete(j);
        }
    }
    free(text);
    return a;
}

bool test_log_names(const cJSON *line, const char *key, const char *want)
{
    const cJSON *a = cJSON_GetObjectItem(line, key), *e;
    char got[512] = "";
    if (!cJSON_IsArray(a)) return false;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsString(e)) return false;
        const size_t len = strlen(got);
        snprintf(got + len, sizeof got - len, "%s%s", len ? "," : "", e->valuestring);
    }
    return !strcmp(got, want);
}

bool test_log_one(const char *err_name, const char *path, const char *key, const char *want)
{
    int n = 0;
    cJSON *a = test_log_lines(err_name, path, &n);
    const bool ok = n == 1 && test_log_names(cJSON_GetArrayItem(a, 0), key, want);
    cJSON_Delete(a);
    return ok;
}

int test_server_stop(test_server *s)
{
    int st = 0;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, &st, 0);
    }
    if (s->out) fclose(s->out);
    s->out = NULL;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int http_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
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

void http_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        p += k;
        n -= (size_t)k;
    }
}

int http_send_request(int port, const char *method, const char *path, const char *headers, const char *body,
                      size_t blen)
{
    int fd = http_connect(port);
    if (fd < 0) return -1;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\n%sContent-Length: %zu\r\n\r\n",
                     method, path, headers ? headers : "", body ? blen : 0);
    if (n < 0 || (size_t)n >= sizeof head) {
        close(fd);
        return -1;
    }
    http_send_all(fd, head, (size_t)n);
    if (body) http_send_all(fd, body, blen);
    return fd;
}

http_resp http_read_response(int fd)
{
    http_resp r = { 0, NULL };
    if (fd < 0) return r;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap); /* [cap] bytes, [len] filled, NUL at the end */
    if (!buf) {
        close(fd);
        return r;
    }
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = 0;
    sscanf(buf, "HTTP/1.%*d %d", &r.status);
    const char *b = strstr(buf, "\r\n\r\n");
    r.body = strdup(b ? b + 4 : "");
    free(buf);
    return r;
}

http_resp http_request(int port, const char *method, const char *path, const char *headers, const char *body)
{
    return http_read_response(http_send_request(port, method, path, headers, body, body ? strlen(body) : 0));
}

bool sse_next(const char **cursor, const char **data, size_t *n, bool *done)
{
    const char *p = *cursor ? strstr(*cursor, "data: ") : NULL;
    if (!p) return false;
    p += 6;
    const char *e = strstr(p, "\n\n");
    if (!e) return false;
    if (!strncmp(p, "[DONE]", 6)) {
        *done = true;
        return false;
    }
    *data = p;
    *n = (size_t)(e - p);
    *cursor = e;
    return true;
}

double prom_metric(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = text ? strstr(text, key) : NULL;
    return p ? atof(p + strlen(key)) : -1;
}

char *run_text(const char *prompt, int n)
{
    char *args = malloc(strlen(prompt) + 512), *out = NULL;
    if (!args) return strdup("");
    sprintf(args, "run -m '%s' -p '%s' -n %d --temp 0 --ignore-eos --json -t 2",
            shared_path("models/stories260K.gguf"), prompt, n);
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

bool node_ready(const char *node_bin, const char *dir, const char *module_file, const char *packages)
{
    struct stat st;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, module_file);
    if (node_bin[0] && stat(path, &st) == 0) return true;
    if (node_bin[0])
        printf("skipped: the npm packages %s are not installed (npm ci in %s)\n", packages, dir);
    else
        printf("skipped: node is not installed\n");
    return false;
}

void node_script_check(const char *node_bin, const char *dir, const char *script, int port, int min_ok)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s http://127.0.0.1:%d 2>&1", dir, node_bin, script, port);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "node runs");
    char line[8192];
    bool all_ok = false;
    int n_ok = 0;
    while (p && fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        if (!strncmp(line, "ok ", 3)) n_ok++;
        if (!strcmp(line, "all ok\n")) all_ok = true;
    }
    const int rc = p ? pclose(p) : -1;
    CHECK(rc == 0, "%s exit status %d", script, rc);
    CHECK(all_ok && n_ok >= min_ok, "%s: %d checks passed, all ok %d", script, n_ok, all_ok);
}

const char *json_get_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

double json_get_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}
