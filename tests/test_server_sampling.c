/*
 * test_server_sampling.c — llama-server's sampling fields on `kvinfer serve`
 * (server/server_sampling.c), over real HTTP with stories260K:
 *  - each out-of-range or mistyped field is a 400 whose message names it;
 *  - greedy stays greedy: temperature 0 with mirostat 2 (temperature, then
 *    mirostat over one candidate) gives `kvinfer run --temp 0`'s text;
 *  - a field takes effect: with the same seed and temperature 1, mirostat 2
 *    (tau 1), typical_p 0.2 and a samplers list without temperature each give
 *    another text than the plain chain, and the same request twice the same
 *    text;
 *  - n_probs (llama.cpp's top probabilities) gives /v1/completions' logprobs
 *    with that many alternatives per token.
 */
#include "testutil.h"

#include "http_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* POST /v1/completions: the status; *text (malloc'd) and *json when 200. */
static int complete(int port, const char *body, char **text, cJSON **json)
{
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, body);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    if (text) *text = strdup(cJSON_IsString(t) ? t->valuestring : "");
    if (json)
        *json = j;
    else
        cJSON_Delete(j);
    free(r.body);
    return r.status;
}

static void check_bad(int port, const char *fields, const char *name)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"Once\",\"max_tokens\":4,%s}", fields);
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, body);
    char quoted[128];
    snprintf(quoted, sizeof quoted, "'%s'", name);
    CHECK(r.status == 400 && r.body && strstr(r.body, quoted), "%s: %d %s", fields, r.status,
          r.body ? r.body : "");
    free(r.body);
}

static char *sampled(int port, const char *extra)
{
    char body[1024], *text = NULL;
    snprintf(body, sizeof body,
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":1.0,\"seed\":42,"
             "\"ignore_eos\":true%s}",
             extra);
    const int st = complete(port, body, &text, NULL);
    CHECK(st == 200 && text && text[0], "%s: status %d", extra, st);
    return text;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char *ref = run_text("Once upon a time", 48);
    test_server s;
    if (!test_server_start(&s, "", "sampling_server.err")) {
        CHECK(false, "server did not start");
        free(ref);
        return test_main_end();
    }
    check_bad(s.port, "\"mirostat\":3", "mirostat");
    check_bad(s.port, "\"typical_p\":1.5", "typical_p");
    check_bad(s.port, "\"mirostat_tau\":-1", "mirostat_tau");
    check_bad(s.port, "\"dry_multiplier\":\"x\"", "dry_multiplier");
    check_bad(s.port, "\"dry_allowed_length\":1.5", "dry_allowed_length");
    check_bad(s.port, "\"dry_sequence_breakers\":\"\\n\"", "dry_sequence_breakers");
    check_bad(s.port, "\"dry_sequence_breakers\":[1]", "dry_sequence_breakers");
    check_bad(s.port, "\"xtc_probability\":2", "xtc_probability");
    check_bad(s.port, "\"xtc_threshold\":-0.1", "xtc_threshold");
    check_bad(s.port, "\"dynatemp_range\":-1", "dynatemp_range");
    check_bad(s.port, "\"repeat_last_n\":-2", "repeat_last_n");
    check_bad(s.port, "\"min_keep\":-1", "min_keep");
    check_bad(s.port, "\"samplers\":5", "samplers");
    check_bad(s.port, "\"samplers\":[\"top_k\",7]", "samplers");
    check_bad(s.port, "\"n_probs\":50", "n_probs");

    /* greedy stays greedy */
    char *g = NULL;
    int st =
        complete(s.port,
                 "{\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true,"
                 "\"mirostat\":2,\"mirostat_tau\":1.0}",
                 &g, NULL);
    CHECK(st == 200 && ref && g && !strcmp(g, ref), "temperature 0 with mirostat 2: not run --temp 0's text");
    free(g);

    /* the fields take effect, deterministically per seed */
    char *plain = sampled(s.port, ""), *plain2 = sampled(s.port, "");
    char *miro = sampled(s.port, ",\"mirostat\":2,\"mirostat_tau\":1.0");
    char *miro2 = sampled(s.port, ",\"mirostat\":2,\"mirostat_tau\":1.0");
    char *typ = sampled(s.port, ",\"typical_p\":0.2");
    char *order = sampled(s.port, ",\"samplers\":\"k\",\"top_k\":2");
    CHECK(!strcmp(plain, plain2), "the same seed gave another text");
    CHECK(!strcmp(miro, miro2), "mirostat: the same seed gave another text");
    CHECK(strcmp(plain, miro) != 0, "mirostat 2 changed nothing");
    CHECK(strcmp(plain, typ) != 0, "typical_p 0.2 changed nothing");
    CHECK(strcmp(plain, order) != 0, "samplers \"k\" changed nothing");
    free(plain);
    free(plain2);
    free(miro);
    free(miro2);
    free(typ);
    free(order);

    /* n_probs: 3 alternatives per token (and the sampled token: OpenAI's "+ 1") */
    cJSON *j = NULL;
    st =
        complete(s.port, "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0,\"n_probs\":3}",
                 NULL, &j);
    const cJSON *lp =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs");
    const cJSON *top = cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "top_logprobs"), 0);
    CHECK(st == 200 && cJSON_IsObject(top) && cJSON_GetArraySize(top) >= 3, "n_probs 3: %d alternatives",
          cJSON_GetArraySize(top));
    cJSON_Delete(j);
    free(ref);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    return test_main_end();
}
