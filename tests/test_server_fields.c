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
 *    blocks are freed and /metrics counts it, long before it would have ended;
 *  - KV layer kinds with a gemma-shaped synth model (preset gemma3-tiny: 7 layers,
 *    1 KV head x 64, window 16 on layers 0-4 and 6): usage and /v1/kv report 256
 *    bytes a token for the 1 global layer (2 x 64 x 2 bytes, f16) and 1536 for the
 *    6 window layers; of two requests past the window, the longer one holds more
 *    global bytes (ceil(positions / 16) blocks x 16 x 256) and exactly the same
 *    window bytes (at most the (16 + 64) / 16 + 2 = 7 parts of 16 x 1536 bytes);
 *  - a mixture of experts (../shared/golden/arch/olmoe-f32: 4 layers, 16 experts,
 *    top-4): /metrics counts the rows routed to each expert of each layer; after
 *    two requests every layer's counts sum to 4 x the rows the model ran
 *    (kvinfer_prefill_tokens_total + kvinfer_decode_tokens_total).
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Non-streamed completion: text (malloc'd) and usage numbers. */
typedef struct completion {
    int status;
    char *text;
    int prompt_tokens, completion_tokens, cached_tokens;
    cJSON *json; /* whole response (cJSON_Delete) */
} completion;

static completion complete(int port, const char *body)
{
    completion c = { 0, NULL, -1, -1, -1, NULL };
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, body);
    c.status = r.status;
    c.json = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(c.json, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(c0, "text");
    c.text = strdup(cJSON_IsString(t) ? t->valuestring : "");
    const cJSON *u = cJSON_GetObjectItem(c.json, "usage");
    const cJSON *pt = cJSON_GetObjectItem(u, "prompt_tokens"),
                *ct = cJSON_GetObjectItem(u, "completion_tokens");
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

#define LONG_PROMPT                                                                                          \
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "  \
    "friends. "                                                                                              \
    "One day, she saw a big red ball under a tree. She ran to the ball and picked it up. Her mom said it "   \
    "was time "                                                                                              \
    "to go home, so Lily took the ball and said thank you to the tree. The sun was warm and the birds sang " \
    "a happy "                                                                                               \
    "song. Lily smiled and ran home with her mom"

static void test_prefix_cache(void)
{
    char *ref = run_text(LONG_PROMPT, 24);
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}",
             LONG_PROMPT);

    test_server s;
    if (!test_server_start(&s, "", "fields_server.err")) {
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
    CHECK(!strcmp(a.text, ref) && !strcmp(b.text, ref),
          "greedy text with the prefix cache differs from kvinfer run:\n"
          "  run:    %s\n  first:  %s\n  second: %s",
          ref, a.text, b.text);
    CHECK(b.completion_tokens == 24, "completion tokens %d", b.completion_tokens);

    /* a prompt that shares only the first blocks: fewer cached tokens, still correct */
    char body2[2048], prompt2[1024];
    snprintf(prompt2, sizeof prompt2, "%.120s and a cat sat on the mat", LONG_PROMPT);
    char *ref2 = run_text(prompt2, 16);
    snprintf(body2, sizeof body2,
             "{\"prompt\":\"%s\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}", prompt2);
    completion c = complete(s.port, body2);
    CHECK(c.status == 200 && c.cached_tokens > 0 && c.cached_tokens < want && c.cached_tokens % 16 == 0,
          "partial prefix: %d cached tokens (full prompt %d)", c.cached_tokens, want);
    CHECK(!strcmp(c.text, ref2), "partial prefix text differs: '%s' vs '%s'", c.text, ref2);

    http_resp m = http_request(s.port, "GET", "/metrics", NULL, NULL);
    const double cached = prom_metric(m.body, "kvinfer_prompt_tokens_cached_total");
    const double ratio = prom_metric(m.body, "kvinfer_prefix_cache_hit_ratio");
    const double prompt = a.prompt_tokens + b.prompt_tokens + c.prompt_tokens;
    CHECK(cached == want + c.cached_tokens, "metrics: %g cached tokens, want %d", cached,
          want + c.cached_tokens);
    CHECK(fabs(ratio - cached / prompt) < 1e-6, "hit ratio %g, cached %g of %g prompt tokens", ratio, cached,
          prompt);
    free(m.body);
    CHECK(test_server_stop(&s) == 0, "server exit status");

    /* --no-prefix-cache: nothing cached, the same text */
    if (test_server_start(&s, "--no-prefix-cache", "fields_server.err")) {
        completion d = complete(s.port, body);
        completion e = complete(s.port, body);
        CHECK(d.cached_tokens == 0 && e.cached_tokens == 0, "no prefix cache: %d %d cached", d.cached_tokens,
              e.cached_tokens);
        CHECK(!strcmp(e.text, ref), "no prefix cache text differs");
        completion_free(&d);
        completion_free(&e);
        CHECK(test_server_stop(&s) == 0, "server exit status");
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
    test_server s;
    if (!test_server_start(&s, "", "fields_server.err")) {
        CHECK(false, "server did not start");
        return;
    }
    http_resp r = http_request(s.port, "POST", "/v1/completions", NULL,
                               "{\"prompt\":\"Once\",\"presence_penalty\":2.5}");
    CHECK(r.status == 400 && r.body && strstr(r.body, "presence_penalty"), "presence 2.5: %d %s", r.status,
          r.body);
    free(r.body);
    r = http_request(s.port, "POST", "/v1/completions", NULL,
                     "{\"prompt\":\"Once\",\"frequency_penalty\":\"high\"}");
    CHECK(r.status == 400, "frequency string: %d", r.status);
    free(r.body);

    char *ref = run_text("Once upon a time", 64);
    completion a = complete(s.port, "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,"
                                    "\"ignore_eos\":true,\"presence_penalty\":0,\"frequency_penalty\":0}");
    CHECK(!strcmp(a.text, ref), "penalties 0 change the greedy text");
    completion b = complete(s.port, "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,"
                                    "\"ignore_eos\":true,\"frequency_penalty\":2}");
    CHECK(b.status == 200 && b.completion_tokens == 64 && strcmp(b.text, ref) != 0,
          "frequency 2: same text as greedy");
    CHECK(punct_count(b.text) < punct_count(ref), "frequency 2: %d periods and commas, greedy %d",
          punct_count(b.text), punct_count(ref));
    completion_free(&a);
    completion_free(&b);
    free(ref);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

static void test_disconnect_non_streamed(void)
{
    test_server s;
    if (!test_server_start(&s, "", "fields_server.err")) {
        CHECK(false, "server did not start");
        return;
    }
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":480,\"ignore_eos\":true}";
    const double t0 = kvi_time_ms();
    int fd = http_send_request(s.port, "POST", "/v1/completions", NULL, body, strlen(body));
    CHECK(fd >= 0, "connect");
    /* disconnect as soon as the request runs: 480 tokens of this small model take
     * well under 100 ms, so a fixed wait could outlast the whole generation */
    double running = 0;
    for (int i = 0; i < 2000 && running < 1; i++) {
        http_resp r = http_request(s.port, "GET", "/metrics", NULL, NULL);
        running = prom_metric(r.body, "kvinfer_requests_running");
        free(r.body);
    }
    CHECK(running >= 1, "the request never showed as running");
    close(fd);
    double cancelled = 0, used = -1;
    for (int i = 0; i < 100 && (cancelled != 1 || used != 0); i++) {
        usleep(20000);
        http_resp m = http_request(s.port, "GET", "/metrics", NULL, NULL);
        cancelled = prom_metric(m.body, "kvinfer_requests_cancelled_total");
        used = prom_metric(m.body, "kvinfer_kv_blocks_used");
        free(m.body);
    }
    CHECK(cancelled == 1 && used == 0, "after the disconnect: %g cancelled, %g KV blocks used", cancelled,
          used);
    http_resp m = http_request(s.port, "GET", "/metrics", NULL, NULL);
    CHECK(prom_metric(m.body, "kvinfer_generation_tokens_total") < 480,
          "the request ran to its end (%g tokens)", prom_metric(m.body, "kvinfer_generation_tokens_total"));
    free(m.body);
    /* the server still answers */
    completion c = complete(s.port, "{\"prompt\":\"Once\",\"max_tokens\":4}");
    CHECK(c.status == 200 && c.completion_tokens == 4, "request after the disconnect: %d", c.status);
    completion_free(&c);
    fprintf(stderr, "disconnect handled in %.0f ms\n", kvi_time_ms() - t0);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static void test_window_layers(void)
{
    const char *model = tmp_path("fields_gemma3_tiny.gguf");
    char extra[1024];
    snprintf(extra, sizeof extra, "synth --preset gemma3-tiny -o '%s'", model);
    int rc = run_kvinfer(extra, NULL, NULL);
    CHECK(rc == 0, "synth gemma3-tiny: %d", rc);
    if (rc) return;
    snprintf(extra, sizeof extra, "-m '%s' -c 512", model);
    test_server s;
    if (!test_server_start(&s, extra, "fields_window.err")) {
        CHECK(false, "server did not start (see %s)", tmp_path("fields_window.err"));
        return;
    }
    const int n_gen[2] = { 100, 200 };
    double glob[2] = { 0, 0 }, win[2] = { 0, 0 };
    for (int i = 0; i < 2; i++) {
        char body[256];
        snprintf(
            body, sizeof body,
            "{\"prompt\":\"the quick brown fox\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true}",
            n_gen[i]);
        completion c = complete(s.port, body);
        CHECK(c.status == 200 && c.completion_tokens == n_gen[i], "request %d: status %d, %d tokens", i,
              c.status, c.completion_tokens);
        const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(c.json, "usage"), "timings");
        const cJSON *k = cJSON_GetObjectItem(t, "kv");
        CHECK(jnum(k, "bytes_per_token_global") == 256 && jnum(k, "bytes_per_token_window") == 1536 &&
                  jnum(k, "n_layers_window") == 6 && jnum(k, "window") == 16,
              "usage kv kinds: global %.0f window %.0f layers %.0f W %.0f", jnum(k, "bytes_per_token_global"),
              jnum(k, "bytes_per_token_window"), jnum(k, "n_layers_window"), jnum(k, "window"));
        /* the last sampled token is never run: positions = prompt + completion - 1 */
        const int pos = c.prompt_tokens + c.completion_tokens - 1, blocks = (pos + 15) / 16;
        glob[i] = (double)blocks * 16 * 256;
        win[i] = jnum(t, "kv_bytes") - glob[i];
        CHECK(jnum(k, "bytes_window") == win[i] && jnum(k, "bytes_global") == glob[i],
              "request %d: usage kv bytes_global %.0f / bytes_window %.0f, want %.0f / %.0f", i,
              jnum(k, "bytes_global"), jnum(k, "bytes_window"), glob[i], win[i]);
        CHECK(pos > 16 + 64 + 32, "request %d: %d positions, not past the window", i, pos);
        completion_free(&c);
    }
    CHECK(glob[1] > glob[0], "global bytes %.0f then %.0f", glob[0], glob[1]);
    CHECK(win[0] > 0 && win[0] == win[1] && win[0] <= 7 * 16 * 1536 && fmod(win[0], 16 * 1536) == 0,
          "window bytes %.0f then %.0f (at most %d)", win[0], win[1], 7 * 16 * 1536);
    http_resp r = http_request(s.port, "GET", "/v1/kv", NULL, NULL);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK(r.status == 200 && j, "/v1/kv: %d", r.status);
    CHECK(jnum(j, "bytes_per_token_global") == 256 && jnum(j, "bytes_per_token_window") == 1536 &&
              jnum(j, "n_layers_window") == 6 && jnum(j, "window") == 16,
          "/v1/kv kinds");
    CHECK(jnum(j, "bytes_used") == jnum(j, "bytes_global") + jnum(j, "bytes_window"), "/v1/kv bytes %.0f",
          jnum(j, "bytes_used"));
    /* request 0 released ceil(...) parts too: at least one each */
    CHECK(jnum(j, "window_parts_released") >= 2, "/v1/kv window parts released %.0f",
          jnum(j, "window_parts_released"));
    cJSON_Delete(j);
    free(r.body);
    test_server_stop(&s);
}

static void test_expert_metrics(void)
{
    test_server s;
    char extra[512];
    snprintf(extra, sizeof extra, "-m %s", shared_path("golden/arch/olmoe-f32.gguf"));
    if (!test_server_start(&s, extra, "fields_server.err")) {
        CHECK(false, "server did not start");
        return;
    }
    completion a = complete(s.port, "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"ignore_eos\":true}");
    completion b = complete(s.port, "{\"prompt\":\"Lily\",\"max_tokens\":3,\"ignore_eos\":true}");
    CHECK(a.status == 200 && b.status == 200, "completions: %d %d", a.status, b.status);
    http_resp m = http_request(s.port, "GET", "/metrics", NULL, NULL);
    const double rows = prom_metric(m.body, "kvinfer_prefill_tokens_total") +
                        prom_metric(m.body, "kvinfer_decode_tokens_total");
    /* each prompt once, then one decode row per token after the first */
    CHECK(rows >= a.prompt_tokens + b.prompt_tokens + 5 + 2, "rows run %g", rows);
    for (int l = 0; l < 4; l++) {
        double sum = 0;
        int seen = 0;
        for (int x = 0; x < 16; x++) {
            char name[96];
            snprintf(name, sizeof name, "kvinfer_expert_routed_tokens_total{layer=\"%d\",expert=\"%d\"}", l,
                     x);
            const double v = prom_metric(m.body, name);
            CHECK(v >= 0 && v <= rows, "layer %d expert %d: %g of %g rows", l, x, v, rows);
            sum += v;
            seen += v > 0;
        }
        CHECK(sum == 4 * rows, "layer %d: %g routed, 4 x %g rows", l, sum, rows);
        CHECK(seen >= 4, "layer %d: %d experts used", l, seen);
    }
    CHECK(prom_metric(m.body, "kvinfer_expert_routed_tokens_total{layer=\"4\",expert=\"0\"}") < 0,
          "a fifth layer reported");
    free(m.body);
    completion_free(&a);
    completion_free(&b);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_expert_metrics();
    test_window_layers();
    test_prefix_cache();
    test_penalties();
    test_disconnect_non_streamed();
    return test_main_end();
}
