/*
 * test_server_tls.c — `kvinfer serve --ssl-cert-file C --ssl-key-file K` over
 * HTTPS: a self-signed certificate made at test time by the openssl CLI, the
 * requests made by curl -k (both from scripts/deps.sh; the test skips with 77
 * when either is missing).
 *
 *  - GET /health and a greedy completion answer over HTTPS, the completion's
 *    text equal to `kvinfer run --temp 0`'s; the ready line says https://;
 *  - plain HTTP to the TLS port gets no HTTP answer;
 *  - an unreadable certificate, a key given as the certificate, or only one of
 *    the two flags: exit 1 with a message naming the problem.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "http_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define PROMPT "Once upon a time"

/* The whole stdout of a shell command (malloc'd), its exit status in *rc. */
static char *run_cmd(const char *cmd, int *rc)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && len + 1 < cap && (k = fread(buf + len, 1, cap - 1 - len, p)) > 0) len += k;
    if (buf) buf[len] = 0;
    const int st = pclose(p);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return buf;
}

/* kvinfer serve with flags (expected to fail at once): its exit status and stderr. */
static int serve_fails(const char *flags, char **err_text)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' serve -m '%s' --port 0 -t 1 --quiet %s 2>&1 >/dev/null", KVI_BIN,
             shared_path("models/stories260K.gguf"), flags);
    int rc = -1;
    *err_text = run_cmd(cmd, &rc);
    return rc;
}

int main(void)
{
    int rc = 0;
    free(run_cmd("command -v openssl && command -v curl", &rc));
    if (rc != 0) {
        fprintf(stderr, "SKIP: openssl or curl not found (scripts/deps.sh installs them)\n");
        return 77;
    }
    char cert[1024], key[1024], cmd[4096];
    snprintf(cert, sizeof cert, "%s", tmp_path("tls_cert.pem"));
    snprintf(key, sizeof key, "%s", tmp_path("tls_key.pem"));
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
             "-subj /CN=127.0.0.1 -keyout '%s' -out '%s' 2>&1",
             key, cert);
    free(run_cmd(cmd, &rc));
    CHECK(rc == 0, "openssl could not make a certificate");
    if (rc != 0) return test_main_end();

    char flags[2300];
    snprintf(flags, sizeof flags, "--ssl-cert-file '%s' --ssl-key-file '%s'", cert, key);
    test_server s;
    CHECK(test_server_start(&s, flags, "tls.err"), "the TLS server did not start");
    if (s.port > 0) {
        snprintf(cmd, sizeof cmd, "curl -sk --max-time 20 https://127.0.0.1:%d/health", s.port);
        char *out = run_cmd(cmd, &rc);
        CHECK(rc == 0 && out && strstr(out, "\"ok\""), "GET /health over HTTPS: rc %d '%s'", rc,
              out ? out : "");
        free(out);
        snprintf(cmd, sizeof cmd,
                 "curl -sk --max-time 20 -H 'Content-Type: application/json' -d '{\"prompt\": \"" PROMPT
                 "\", \"max_tokens\": 6, \"temperature\": 0}' https://127.0.0.1:%d/v1/completions",
                 s.port);
        out = run_cmd(cmd, &rc);
        cJSON *j = out ? cJSON_Parse(out) : NULL;
        const cJSON *t =
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
        char *ref = run_text(PROMPT, 6);
        CHECK(cJSON_IsString(t) && ref && !strcmp(t->valuestring, ref),
              "completion over HTTPS: '%s', want '%s'", out ? out : "", ref ? ref : "");
        free(ref);
        cJSON_Delete(j);
        free(out);
        http_resp plain = http_request(s.port, "GET", "/health", NULL, NULL);
        CHECK(plain.status == 0, "plain HTTP to the TLS port got status %d", plain.status);
        free(plain.body);
    }
    CHECK(test_server_stop(&s) == 0, "TLS server exit status");

    char *err = NULL;
    snprintf(flags, sizeof flags, "--ssl-cert-file '%s' --ssl-key-file '%s'", tmp_path("no_such_cert.pem"),
             key);
    rc = serve_fails(flags, &err);
    CHECK(rc == 1 && err && strstr(err, "cannot read --ssl-cert-file"), "missing certificate: rc %d '%s'", rc,
          err ? err : "");
    free(err);
    snprintf(flags, sizeof flags, "--ssl-cert-file '%s' --ssl-key-file '%s'", key, key);
    rc = serve_fails(flags, &err);
    CHECK(rc == 1 && err && strstr(err, "with TLS"), "a key as the certificate: rc %d '%s'", rc,
          err ? err : "");
    free(err);
    snprintf(flags, sizeof flags, "--ssl-cert-file '%s'", cert);
    rc = serve_fails(flags, &err);
    CHECK(rc == 1 && err && strstr(err, "both"), "only the certificate: rc %d '%s'", rc, err ? err : "");
    free(err);
    return test_main_end();
}
