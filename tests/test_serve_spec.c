/*
 * test_serve_spec.c — `kvinfer serve --spec ngram` and `--draft` over real HTTP
 * on 127.0.0.1 with stories260K (a child process on a free port):
 *
 *  - a greedy completion equals `kvinfer run --temp 0` (lossless), with
 *    usage.timings.spec_drafted > 0, spec_accepted <= spec_drafted and
 *    spec_acceptance = accepted / drafted;
 *  - "speculative": false gives the same text and drafts nothing; a non-boolean
 *    value is a 400;
 *  - /metrics counts kvinfer_spec_drafted_total / kvinfer_spec_accepted_total as
 *    the sum of the requests' usage;
 *  - stories260K as its own draft model: the same text, every draft accepted;
 *  - conflicting or bad speculation flags are refused with one clear line.
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROMPT "Once upon a time, there was a little girl named Lily. She loved to play"

typedef test_server child;

/* Starts the server (4 sequences) with extra flags; true once it printed "kvinfer: ready". */
static bool serve(child *c, const char *extra)
{
    char flags[1200];
    snprintf(flags, sizeof flags, "--parallel 4 %s", extra);
    return test_server_start(c, flags, "serve_spec.err");
}

static void stop(child *c)
{
    const int st = test_server_stop(c);
    CHECK(st == 0, "server exit status %d", st);
}

/* One HTTP/1.0 exchange; returns the body (malloc'd) and sets *status. */
static char *http(int port, const char *method, const char *path, const char *body, int *status)
{
    http_resp r = http_request(port, method, path, NULL, body);
    *status = r.status;
    return r.body;
}

typedef struct answer {
    int status;
    char text[4096];
    double drafted, accepted, acceptance;
} answer;

static answer complete(int port, const char *extra_fields)
{
    answer an;
    memset(&an, 0, sizeof an);
    an.drafted = an.accepted = an.acceptance = -1;
    char body[1024];
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":64,\"temperature\":0,\"ignore_eos\":true%s}", PROMPT,
             extra_fields);
    char *r = http(port, "POST", "/v1/completions", body, &an.status);
    cJSON *j = r ? cJSON_Parse(r) : NULL;
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    if (cJSON_IsString(t)) snprintf(an.text, sizeof an.text, "%s", t->valuestring);
    const cJSON *tm = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "timings");
    const cJSON *d = cJSON_GetObjectItem(tm, "spec_drafted"), *ac = cJSON_GetObjectItem(tm, "spec_accepted");
    const cJSON *ar = cJSON_GetObjectItem(tm, "spec_acceptance");
    if (cJSON_IsNumber(d)) an.drafted = d->valuedouble;
    if (cJSON_IsNumber(ac)) an.accepted = ac->valuedouble;
    if (cJSON_IsNumber(ar)) an.acceptance = ar->valuedouble;
    cJSON_Delete(j);
    free(r);
    return an;
}

static double metric(int port, const char *name)
{
    int st = 0;
    char *r = http(port, "GET", "/metrics", NULL, &st);
    double v = prom_metric(r, name);
    free(r);
    return v;
}

static void test_ngram(const char *ref)
{
    child c;
    if (!serve(&c, "--spec ngram --draft-max 6")) {
        CHECK(false, "server with --spec ngram did not start");
        stop(&c);
        return;
    }
    answer a = complete(c.port, "");
    CHECK(a.status == 200 && !strcmp(a.text, ref),
          "ngram: status %d, text differs from kvinfer run:\n'%s'\n'%s'", a.status, a.text, ref);
    CHECK(a.drafted > 0 && a.accepted >= 0 && a.accepted <= a.drafted, "ngram: drafted %g accepted %g",
          a.drafted, a.accepted);
    CHECK(a.drafted > 0 && fabs(a.acceptance - a.accepted / a.drafted) < 1e-9, "acceptance %g for %g / %g",
          a.acceptance, a.accepted, a.drafted);
    answer b = complete(c.port, ",\"speculative\":false");
    CHECK(b.status == 200 && !strcmp(b.text, ref), "speculative false: status %d text '%s'", b.status,
          b.text);
    CHECK(b.drafted == 0 && b.accepted == 0 && b.acceptance == 0, "speculative false drafted %g", b.drafted);
    answer e = complete(c.port, ",\"speculative\":1");
    CHECK(e.status == 400, "\"speculative\": 1 gets %d", e.status);
    CHECK(metric(c.port, "kvinfer_spec_drafted_total") == a.drafted, "metrics drafted %g vs %g",
          metric(c.port, "kvinfer_spec_drafted_total"), a.drafted);
    CHECK(metric(c.port, "kvinfer_spec_accepted_total") == a.accepted, "metrics accepted %g vs %g",
          metric(c.port, "kvinfer_spec_accepted_total"), a.accepted);
    stop(&c);
}

static void test_draft(const char *ref)
{
    child c;
    char extra[1024];
    snprintf(extra, sizeof extra, "--draft '%s' --draft-max 4", shared_path("models/stories260K.gguf"));
    if (!serve(&c, extra)) {
        CHECK(false, "server with --draft did not start");
        stop(&c);
        return;
    }
    answer a = complete(c.port, "");
    CHECK(a.status == 200 && !strcmp(a.text, ref), "draft: status %d text '%s'", a.status, a.text);
    CHECK(a.drafted > 0 && a.accepted == a.drafted && a.acceptance == 1.0, "own draft: accepted %g of %g",
          a.accepted, a.drafted);
    stop(&c);
}

static void test_bad_flags(void)
{
    char args[1024], *err = NULL;
    snprintf(args, sizeof args, "serve -m '%s' --port 0 --spec fast", shared_path("models/stories260K.gguf"));
    int rc = run_kvinfer(args, NULL, &err);
    CHECK(rc != 0 && err && strstr(err, "--spec"), "--spec fast: rc %d '%s'", rc, err ? err : "");
    free(err);
    err = NULL;
    snprintf(args, sizeof args, "serve -m '%s' --port 0 --spec ngram --draft '%s'",
             shared_path("models/stories260K.gguf"), shared_path("models/stories260K.gguf"));
    rc = run_kvinfer(args, NULL, &err);
    CHECK(rc != 0 && err && strstr(err, "choose one"), "ngram and draft: rc %d '%s'", rc, err ? err : "");
    free(err);
    err = NULL;
    snprintf(args, sizeof args, "serve -m '%s' --port 0 --spec ngram --draft-max 2 --draft-min 3",
             shared_path("models/stories260K.gguf"));
    rc = run_kvinfer(args, NULL, &err);
    CHECK(rc != 0 && err && strstr(err, "--draft-min"), "draft-min > draft-max: rc %d '%s'", rc,
          err ? err : "");
    free(err);
}

int main(void)
{
    char *ref = run_text(PROMPT, 64);
    CHECK(ref && strlen(ref) > 20, "reference text '%s'", ref ? ref : "");
    if (ref && strlen(ref) > 20) {
        test_ngram(ref);
        test_draft(ref);
    }
    test_bad_flags();
    free(ref);
    return test_main_end();
}
