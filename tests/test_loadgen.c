/*
 * test_loadgen.c — `kvinfer loadgen` against a real `kvinfer serve` on
 * stories260K (a child process on a free port, read from its first stdout line).
 *
 * Checks: every request completes; the JSON report has the vLLM-style fields and
 * they are consistent with what was asked (N requests x G tokens; N x (G - 1)
 * inter-token gaps; median <= p99 <= max); the server's own /metrics counts the
 * same generated tokens and prompt tokens (an independent tally); Poisson
 * arrivals at a low rate make the run last about as long as the arrivals say;
 * non-loopback hosts are refused before any connection, with a clear message.
 * --trace: a four-request Mooncake-format trace written here replays with the
 * prompt lengths the scaling rule gives (computed here from the file), the
 * cached positions that its shared hash ids imply at the server's KV block size
 * (read from /v1/kv), arrivals spread by --time-scale, goodput 0 under an SLO
 * no request can meet and every request under a loose one; malformed traces are
 * refused with the line named. --turns: every turn of every conversation
 * completes, each turn's prompt holds the previous one and its answer, the
 * prompt and cached positions add up to what the server's /metrics counted over
 * the run, and recomputed == held after the last turn - cached.
 */
#include "testutil.h"

#include "http_util.h"

#include "kvinfer.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double num(const cJSON *o, const char *path1, const char *path2)
{
    const cJSON *j = cJSON_GetObjectItem(o, path1);
    if (path2) j = cJSON_GetObjectItem(j, path2);
    return cJSON_IsNumber(j) ? j->valuedouble : -1;
}

static cJSON *loadgen(int port, const char *extra, int *rc)
{
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "loadgen --url http://127.0.0.1:%d --json --timeout 120 %s", port, extra);
    *rc = run_kvinfer(args, &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    if (!j) fprintf(stderr, "loadgen output: %s\nstderr: %s\n", out ? out : "", err ? err : "");
    free(out);
    free(err);
    return j;
}

static void test_closed_loop(int port)
{
    /* 8 requests, 4 at a time, 24-token prompts sharing 8, 12 tokens each */
    int rc;
    cJSON *j =
        loadgen(port, "--concurrency 4 --requests 8 --prompt-len 24 --gen-len 12 --shared-prefix 8", &rc);
    CHECK(rc == 0 && j, "loadgen exit %d", rc);
    CHECK(num(j, "completed", NULL) == 8 && num(j, "failed", NULL) == 0, "completed %g failed %g (%s)",
          num(j, "completed", NULL), num(j, "failed", NULL),
          cJSON_IsString(cJSON_GetObjectItem(j, "first_error"))
              ? cJSON_GetObjectItem(j, "first_error")->valuestring
              : "");
    CHECK(num(j, "total_output_tokens", NULL) == 96, "output tokens %g, want 8 x 12",
          num(j, "total_output_tokens", NULL));
    CHECK(num(j, "total_input_tokens", NULL) == 192, "input tokens %g", num(j, "total_input_tokens", NULL));
    CHECK(num(j, "itl_ms", "n") == 88, "ITL gaps %g, want 8 x 11", num(j, "itl_ms", "n"));
    CHECK(num(j, "ttft_ms", "n") == 8 && num(j, "tpot_ms", "n") == 8, "TTFT/TPOT counts");
    const char *names[] = { "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms" };
    for (int k = 0; k < 4; k++) {
        const double mean = num(j, names[k], "mean"), med = num(j, names[k], "median"),
                     p99 = num(j, names[k], "p99"), mx = num(j, names[k], "max");
        /* an inter-token gap is timed per received chunk, like vLLM's bench: on this
         * tiny model a step takes ~0.1 ms, so several events of a stream can arrive
         * in one read and most gaps (at times all 88) measure 0; every other figure
         * is positive. The gaps are checked against the streams' spans below. */
        const bool pos_ok = k == 2 ? med >= 0 && mean >= 0 : med > 0 && mean > 0;
        CHECK(pos_ok && med <= p99 + 1e-9 && p99 <= mx + 1e-9 && mean <= mx + 1e-9,
              "%s: mean %g median %g p99 %g max %g", names[k], mean, med, p99, mx);
    }
    /* a stream's gaps add up to its last token's time minus its first's, which the
     * request's end (e2e) follows: sum of the 88 gaps <= sum over 8 of (e2e - ttft) */
    const double gaps = num(j, "itl_ms", "mean") * 88,
                 spans = 8 * (num(j, "e2e_ms", "mean") - num(j, "ttft_ms", "mean"));
    CHECK(gaps <= spans + 1e-6 * spans + 1e-6, "ITL gaps add up to %g ms, more than the streams' %g ms", gaps,
          spans);
    /* e2e >= ttft + 11 gaps: TPOT x 11 == e2e - ttft on average */
    CHECK(num(j, "e2e_ms", "mean") > num(j, "ttft_ms", "mean"), "e2e above ttft");
    const double dur = num(j, "duration_s", NULL);
    CHECK(dur > 0 && fabs(num(j, "output_throughput", NULL) - 96 / dur) < 1e-6 * (96 / dur) + 1e-9 &&
              fabs(num(j, "request_throughput", NULL) - 8 / dur) < 1e-6 * (8 / dur) + 1e-9,
          "throughputs over duration %g", dur);
    cJSON_Delete(j);

    /* the server's own tally of the same run */
    char *m = http_request(port, "GET", "/metrics", NULL, NULL).body;
    CHECK(prom_metric(m, "kvinfer_generation_tokens_total") == 96, "server counted %g generated tokens",
          prom_metric(m, "kvinfer_generation_tokens_total"));
    CHECK(prom_metric(m, "kvinfer_prompt_tokens_total") == 192, "server counted %g prompt tokens",
          prom_metric(m, "kvinfer_prompt_tokens_total"));
    CHECK(prom_metric(m, "kvinfer_requests_success_total") == 8, "server counted %g successes",
          prom_metric(m, "kvinfer_requests_success_total"));
    free(m);
}

static void test_poisson(int port)
{
    /* 6 arrivals at 10/s: the last one comes, on average, 0.5 s after the first */
    int rc;
    cJSON *j =
        loadgen(port, "--concurrency 6 --requests 6 --rate 10 --prompt-len 8 --gen-len 4 --seed 7", &rc);
    CHECK(rc == 0 && num(j, "completed", NULL) == 6, "poisson run: rc %d completed %g", rc,
          num(j, "completed", NULL));
    CHECK(num(j, "rate", NULL) == 10, "rate echoed");
    CHECK(num(j, "duration_s", NULL) > 0.05, "arrivals spread the run (%g s)", num(j, "duration_s", NULL));
    cJSON_Delete(j);
}

static void test_refusals(void)
{
    const char *bad[] = { "http://192.168.1.10:8080",         "http://example.com",
                          "http://8.8.8.8:80/v1/completions", "http://[2001:db8::1]:8080",
                          "https://127.0.0.1:8080",           "http://128.0.0.1:80" };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char args[256], *out = NULL, *err = NULL;
        snprintf(args, sizeof args, "loadgen --url '%s' --requests 1 --timeout 5", bad[k]);
        const double t0 = kvi_time_ms();
        int rc = run_kvinfer(args, &out, &err);
        CHECK(rc == 1 && err && (strstr(err, "refusing") || strstr(err, "http://")), "%s: rc %d, stderr %s",
              bad[k], rc, err ? err : "");
        CHECK(kvi_time_ms() - t0 < 4000, "%s refused at once", bad[k]);
        free(out);
        free(err);
    }
    char *err = NULL;
    CHECK(run_kvinfer("loadgen --url http://127.0.0.1:1 --shared-prefix 9 --prompt-len 8", NULL, &err) == 1 &&
              err && strstr(err, "shared-prefix"),
          "prefix longer than the prompt refused");
    free(err);
}

/* Four requests, one at a time: the 2nd shares hash ids 901, 902 with the 1st,
 * the 4th repeats the 1st, the 3rd shares nothing; 32 tokens per hash id. */
static const char trace_text[] =
    "{\"timestamp\": 0, \"input_length\": 1536, \"output_length\": 4, \"hash_ids\": [901, 902, 903]}\n"
    "{\"timestamp\": 1000, \"input_length\": 1500, \"output_length\": 4, \"hash_ids\": [901, 902, 904]}\n"
    "\n"
    "{\"timestamp\": 2000, \"input_length\": 700, \"output_length\": 9, \"hash_ids\": [905, 906]}\n"
    "{\"timestamp\": 3000, \"input_length\": 1536, \"output_length\": 4, \"hash_ids\": [901, 902, 903]}\n";

static void test_trace(int port)
{
    const char *path = tmp_path("loadgen_trace.jsonl");
    CHECK(write_file(path, trace_text, strlen(trace_text)) == 0, "write %s", path);
    char *kvb = http_request(port, "GET", "/v1/kv", NULL, NULL).body;
    cJSON *kv = kvb ? cJSON_Parse(kvb) : NULL;
    const int bs = (int)num(kv, "block_size", NULL);
    cJSON_Delete(kv);
    free(kvb);
    CHECK(bs > 0 && 64 % bs == 0, "KV block size %d", bs);
    /* prompts: ceil(L * 32 / 512) = 96, 94, 44, 96; cached: the whole blocks of
     * the shared 64 tokens for the 2nd, of the 1st's 96 less the last token for the 4th */
    const double want_in = 96 + 94 + 44 + 96, want_cached = 64 + (95 / bs) * bs;
    char args[512];
    int rc;
    snprintf(args, sizeof args,
             "--trace '%s' --trace-block 32 --time-scale 0.05 --concurrency 1 --gen-len 6 --slo-ttft 1e6 "
             "--slo-tpot 1e6",
             path);
    cJSON *j = loadgen(port, args, &rc);
    CHECK(rc == 0 && num(j, "completed", NULL) == 4, "trace run: rc %d completed %g", rc,
          num(j, "completed", NULL));
    CHECK(num(j, "total_input_tokens", NULL) == want_in, "input tokens %g, want %g",
          num(j, "total_input_tokens", NULL), want_in);
    CHECK(num(j, "total_output_tokens", NULL) == 4 + 4 + 6 + 4,
          "output tokens %g (the 3rd capped by --gen-len)", num(j, "total_output_tokens", NULL));
    CHECK(num(j, "prompt_tokens_cached", NULL) == want_cached &&
              num(j, "prompt_tokens_computed", NULL) == want_in - want_cached,
          "cached %g computed %g, want %g and %g", num(j, "prompt_tokens_cached", NULL),
          num(j, "prompt_tokens_computed", NULL), want_cached, want_in - want_cached);
    CHECK(num(j, "duration_s", NULL) >= 0.15, "arrivals 3000 ms x 0.05 apart at the last: run of %g s",
          num(j, "duration_s", NULL));
    CHECK(num(j, "requests_within_slo", NULL) == 4 &&
              fabs(num(j, "goodput", NULL) - num(j, "request_throughput", NULL)) < 1e-9,
          "a loose SLO keeps every request: %g", num(j, "requests_within_slo", NULL));
    cJSON_Delete(j);

    /* an SLO no request meets; the first two requests only */
    snprintf(args, sizeof args,
             "--trace '%s' --trace-block 32 --time-scale 0 --max-requests 2 --slo-ttft 0.0001", path);
    j = loadgen(port, args, &rc);
    CHECK(rc == 0 && num(j, "completed", NULL) == 2 && num(j, "total_input_tokens", NULL) == 96 + 94,
          "--max-requests 2: completed %g, input %g", num(j, "completed", NULL),
          num(j, "total_input_tokens", NULL));
    CHECK(num(j, "concurrency", NULL) == 2, "the default concurrency (64) capped by the 2 requests: %g",
          num(j, "concurrency", NULL));
    CHECK(num(j, "requests_within_slo", NULL) == 0 && num(j, "goodput", NULL) == 0,
          "a TTFT SLO of 0.1 us: %g within", num(j, "requests_within_slo", NULL));
    cJSON_Delete(j);

    const char *bad[] = {
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n{\"timestamp\": 1}\n",
        "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1}\n"
        "{\"timestamp\": 4, \"input_length\": 10, \"output_length\": 1}\n",
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n[1, 2]\n",
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n"
        "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [-3]}\n",
        "\n\n"
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        CHECK(write_file(path, bad[k], strlen(bad[k])) == 0, "write %s", path);
        char *err = NULL;
        snprintf(args, sizeof args, "loadgen --url http://127.0.0.1:%d --trace '%s'", port, path);
        rc = run_kvinfer(args, NULL, &err);
        CHECK(rc == 1 && err && (k == 4 ? strstr(err, "no request") != NULL : strstr(err, "line 2") != NULL),
              "bad trace %zu: rc %d, %s", k, rc, err ? err : "");
        free(err);
    }
}

static void test_turns(int port)
{
    char *m0 = http_request(port, "GET", "/metrics", NULL, NULL).body;
    const double p0 = prom_metric(m0, "kvinfer_prompt_tokens_total"),
                 c0 = prom_metric(m0, "kvinfer_prompt_tokens_cached_total");
    free(m0);
    int rc;
    cJSON *j =
        loadgen(port, "--turns 4 --requests 2 --concurrency 2 --gen-len 8 --turn-words 6 --seed 3", &rc);
    CHECK(rc == 0 && num(j, "completed", NULL) == 8, "turns run: rc %d completed %g", rc,
          num(j, "completed", NULL));
    CHECK(j && !strcmp(cJSON_GetObjectItem(j, "endpoint")->valuestring, "/v1/chat/completions"),
          "chat endpoint");
    const cJSON *turns = cJSON_GetObjectItem(j, "turns");
    CHECK(cJSON_GetArraySize(turns) == 4, "4 turns reported");
    double sum_prompt = 0, sum_cached = 0, prev_held = 0;
    for (int t = 0; t < cJSON_GetArraySize(turns); t++) {
        const cJSON *e = cJSON_GetArrayItem(turns, t);
        const double pr = num(e, "prompt_tokens", NULL), ca = num(e, "cached_tokens", NULL),
                     re = num(e, "recomputed", NULL);
        CHECK(num(e, "turn", NULL) == t + 1 && num(e, "completed", NULL) == 2, "turn %d: completed %g", t + 1,
              num(e, "completed", NULL));
        CHECK(num(e, "computed", NULL) == pr - ca && ca >= 0 && ca < pr,
              "turn %d: prompt %g cached %g computed %g", t + 1, pr, ca, num(e, "computed", NULL));
        /* the answer's 8 tokens come back as text: the prompt holds at least the
         * previous prompt and a new message */
        CHECK(t == 0 || pr > prev_held - 8 + 6, "turn %d: prompt %g after %g held", t + 1, pr, prev_held);
        CHECK(t == 0 ? re == 0 : fabs(re - (prev_held - ca)) < 1e-9 && re >= 0,
              "turn %d: recomputed %g, held %g cached %g", t + 1, re, prev_held, ca);
        CHECK(t == 0 || ca > 0, "turn %d reuses the conversation's cache (%g)", t + 1, ca);
        prev_held = pr + 8;
        sum_prompt += 2 * pr;
        sum_cached += 2 * ca;
    }
    CHECK(num(j, "total_input_tokens", NULL) == sum_prompt &&
              num(j, "prompt_tokens_cached", NULL) == sum_cached,
          "totals %g / %g", num(j, "total_input_tokens", NULL), num(j, "prompt_tokens_cached", NULL));
    char *m1 = http_request(port, "GET", "/metrics", NULL, NULL).body;
    CHECK(prom_metric(m1, "kvinfer_prompt_tokens_total") - p0 == sum_prompt,
          "server counted %g prompt tokens, loadgen %g", prom_metric(m1, "kvinfer_prompt_tokens_total") - p0,
          sum_prompt);
    CHECK(prom_metric(m1, "kvinfer_prompt_tokens_cached_total") - c0 == sum_cached,
          "server counted %g cached tokens, loadgen %g",
          prom_metric(m1, "kvinfer_prompt_tokens_cached_total") - c0, sum_cached);
    free(m1);
    cJSON_Delete(j);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_refusals();
    test_server s;
    if (!test_server_start(&s, "--parallel 8", "loadgen_server.err")) {
        CHECK(false, "server did not start (see %s)", tmp_path("loadgen_server.err"));
        return test_main_end();
    }
    test_closed_loop(s.port);
    test_poisson(s.port);
    test_trace(s.port);
    test_turns(s.port);
    CHECK(test_server_stop(&s) == 0, "server exit status (see %s)", tmp_path("loadgen_server.err"));
    return test_main_end();
}
