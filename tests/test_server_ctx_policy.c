/*
 * test_server_ctx_policy.c — long conversations in `kvinfer serve`: with
 * --ctx-policy shift or sinks, a request past the context (-c 128 on
 * stories260K) continues instead of getting a 400, and its usage reports the
 * positions the policy dropped.
 *
 * Checks, per policy: a completion whose prompt plus output pass the context
 * completes with every asked token and drops at least the positions past the
 * context (prompt + output - 1 - 128: the last token is never written) and no
 * more than it held; a prompt longer than the context alone is served; a chat
 * of 8 turns, each re-sending the history with its answer, grows past the
 * context with no 400 and drops positions on the turns past it; "context_policy":
 * "error" opts out (the 400 comes back), another policy's name is refused. A
 * server without --ctx-policy keeps the 400.
 */
#include "testutil.h"

#include "http_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX 128

/* "[3, 4, ...]": n prompt ids (malloc'd) */
static char *ids_json(int n)
{
    char *b = malloc((size_t)n * 8 + 4);
    size_t len = 0;
    b[len++] = '[';
    for (int i = 0; i < n; i++) len += (size_t)sprintf(b + len, "%s%d", i ? "," : "", 3 + (i * 7) % 400);
    sprintf(b + len, "]");
    return b;
}

static double usage_num(const cJSON *j, const char *name)
{
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), name);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* POST path with body; the status, the parsed answer in *out. */
static int post(int port, const char *path, const char *body, cJSON **out)
{
    http_resp r = http_request(port, "POST", path, NULL, body);
    *out = r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return r.status;
}

static void test_completion(int port, const char *policy)
{
    char *ids = ids_json(100), body[2048];
    cJSON *j;
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 100, \"ignore_eos\": true}", ids);
    int st = post(port, "/v1/completions", body, &j);
    const double dropped = usage_num(j, "positions_dropped");
    CHECK(st == 200 && usage_num(j, "completion_tokens") == 100,
          "%s: 100 + 100 past %d: status %d, %g tokens", policy, CTX, st, usage_num(j, "completion_tokens"));
    CHECK(dropped >= 100 + 100 - 1 - CTX && dropped <= 199, "%s: %g positions dropped", policy, dropped);
    cJSON_Delete(j);

    /* a prompt longer than the context alone */
    char *long_ids = ids_json(300), *lbody = malloc(4096);
    snprintf(lbody, 4096, "{\"prompt\": %s, \"max_tokens\": 8, \"ignore_eos\": true}", long_ids);
    st = post(port, "/v1/completions", lbody, &j);
    CHECK(st == 200 && usage_num(j, "prompt_tokens") == 300 && usage_num(j, "positions_dropped") >= 300 - CTX,
          "%s: a 300-token prompt: status %d, dropped %g", policy, st, usage_num(j, "positions_dropped"));
    cJSON_Delete(j);
    free(long_ids);
    free(lbody);

    /* opting out brings the 400 back; another policy is refused */
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 100, \"context_policy\": \"error\"}", ids);
    st = post(port, "/v1/completions", body, &j);
    const cJSON *code = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code");
    CHECK(st == 400 && cJSON_IsString(code) && !strcmp(code->valuestring, "context_length_exceeded"),
          "%s: opt-out: %d", policy, st);
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 4, \"context_policy\": \"heavy\"}", ids);
    st = post(port, "/v1/completions", body, &j);
    CHECK(st == 400, "%s: another policy's name: %d", policy, st);
    cJSON_Delete(j);
    free(ids);
}

/* 8 turns of about 30 tokens of question and 24 of answer: past 128 by turn 3 */
static void test_chat(int port, const char *policy)
{
    cJSON *msgs = cJSON_CreateArray();
    double prev_prompt = 0;
    int past = 0;
    for (int t = 0; t < 8; t++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        char q[256];
        snprintf(q, sizeof q,
                 "Turn %d: tell me a story about a cat, a dog and a bird who live in a small house.", t + 1);
        cJSON_AddStringToObject(m, "content", q);
        cJSON_AddItemToArray(msgs, m);
        cJSON *req = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(req, "messages", msgs);
        cJSON_AddNumberToObject(req, "max_tokens", 24);
        cJSON_AddTrueToObject(req, "ignore_eos");
        char *body = cJSON_PrintUnformatted(req);
        cJSON_Delete(req);
        cJSON *j;
        const int st = post(port, "/v1/chat/completions", body, &j);
        free(body);
        const double pr = usage_num(j, "prompt_tokens"), dr = usage_num(j, "positions_dropped");
        CHECK(st == 200, "%s: turn %d: status %d", policy, t + 1, st);
        CHECK(pr > prev_prompt && usage_num(j, "completion_tokens") == 24, "%s: turn %d: prompt %g after %g",
              policy, t + 1, pr, prev_prompt);
        /* positions needed: the prompt and the answer but its last token */
        if (pr + 23 > CTX) {
            past++;
            CHECK(dr >= pr + 23 - CTX, "%s: turn %d: %g dropped of %g", policy, t + 1, dr, pr + 23);
        } else {
            CHECK(dr == 0, "%s: turn %d within the context dropped %g", policy, t + 1, dr);
        }
        prev_prompt = pr;
        const cJSON *c =
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "role", "assistant");
        const cJSON *ct = cJSON_GetObjectItem(c, "content");
        cJSON_AddStringToObject(a, "content", cJSON_IsString(ct) ? ct->valuestring : "");
        cJSON_AddItemToArray(msgs, a);
        cJSON_Delete(j);
    }
    CHECK(past >= 4, "%s: %d turns past the context", policy, past);
    cJSON_Delete(msgs);
}

/* loadgen --turns past the context: every turn completes, the late ones report drops */
static void test_loadgen_turns(int port, const char *policy)
{
    char args[256], *out = NULL;
    snprintf(args, sizeof args,
             "loadgen --url http://127.0.0.1:%d --json --timeout 120 --turns 6 --requests 1 --gen-len 24 "
             "--turn-words 12",
             port);
    const int rc = run_kvinfer(args, &out, NULL);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    const cJSON *turns = cJSON_GetObjectItem(j, "turns");
    CHECK(rc == 0 && cJSON_GetArraySize(turns) == 6, "%s: loadgen --turns: rc %d", policy, rc);
    const cJSON *last = cJSON_GetArrayItem(turns, 5);
    const double pr = cJSON_GetNumberValue(cJSON_GetObjectItem(last, "prompt_tokens")),
                 dr = cJSON_GetNumberValue(cJSON_GetObjectItem(last, "positions_dropped"));
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(last, "completed")) == 1 && pr + 23 > CTX &&
              dr >= pr + 23 - CTX,
          "%s: turn 6: prompt %g, %g dropped", policy, pr, dr);
    cJSON_Delete(j);
    free(out);
}

static void run_policy(const char *policy)
{
    test_server s;
    char extra[128], err_name[64];
    snprintf(extra, sizeof extra, "-c %d --ctx-policy %s", CTX, policy);
    snprintf(err_name, sizeof err_name, "ctx_policy_%s.err", policy);
    if (!test_server_start(&s, extra, err_name)) {
        CHECK(false, "server with %s did not start (see %s)", extra, tmp_path(err_name));
        return;
    }
    test_completion(s.port, policy);
    test_chat(s.port, policy);
    test_loadgen_turns(s.port, policy);
    CHECK(test_server_stop(&s) == 0, "server exit status (see %s)", tmp_path(err_name));
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    run_policy("shift");
    run_policy("sinks");
    /* without a policy the context stays a 400 */
    test_server s;
    if (!test_server_start(&s, "-c 128", "ctx_policy_none.err")) {
        CHECK(false, "server did not start");
        return test_main_end();
    }
    char *ids = ids_json(100), body[2048];
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 100}", ids);
    cJSON *j;
    CHECK(post(s.port, "/v1/completions", body, &j) == 400, "no policy: 400");
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 4, \"context_policy\": \"shift\"}", ids);
    cJSON_Delete(j);
    CHECK(post(s.port, "/v1/completions", body, &j) == 400, "no policy: a request cannot ask for one");
    cJSON_Delete(j);
    free(ids);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    return test_main_end();
}
