/*
 * test_claude_code.c — Claude Code (npm "@anthropic-ai/claude-code" 2.0.76,
 * pinned in tests/anthropic/package.json: its cli.js is plain JavaScript, no
 * download at install time) runs one non-interactive turn, `claude -p "Say hi"
 * --output-format json`, against `kvinfer serve` on stories260K with Qwen2.5's
 * chat template through ANTHROPIC_BASE_URL, with telemetry, error reports,
 * updates and other nonessential traffic off, so nothing leaves 127.0.0.1.
 *
 * Its first request is about 70 KB (the system prompt and 18 tools; 47,816
 * prompt tokens in stories260K's vocabulary, so the server runs with -c
 * 131072), streamed, max_tokens 32000 unless CLAUDE_CODE_MAX_OUTPUT_TOKENS caps
 * it: the tiny model never ends its turn by itself, so the cap (64) ends it.
 * Every model name Claude Code sends is set to the served alias (ANTHROPIC_MODEL
 * and the default Haiku/Sonnet/Opus names). Checks: the result is a success
 * (not an error) with text, and the server counted the long prompt. Skips
 * (77) when node or the package is missing.
 */
#include "testutil.h"

#include "http_util.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#ifndef KVI_ANTHROPIC_DIR
#define KVI_ANTHROPIC_DIR "tests/anthropic"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif

int main(void)
{
    if (!node_ready(KVI_NODE_BIN, KVI_ANTHROPIC_DIR, "node_modules/@anthropic-ai/claude-code/cli.js",
                    "@anthropic-ai/claude-code"))
        return 77;
    char cli[1024];
    snprintf(cli, sizeof cli, "%s/node_modules/@anthropic-ai/claude-code/cli.js", KVI_ANTHROPIC_DIR);
    char extra[1024];
    snprintf(extra, sizeof extra, "-c 131072 --parallel 4 --api-key sk-claude --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    test_server s;
    CHECK(test_server_start(&s, extra, "claude_code.err"), "server starts");
    const char *home = tmp_path("claude_home");
    char cmd[4096];
    snprintf(
        cmd, sizeof cmd,
        "rm -rf '%s' && mkdir -p '%s' && cd '%s' && env HOME='%s' ANTHROPIC_BASE_URL=http://127.0.0.1:%d "
        "ANTHROPIC_API_KEY=sk-claude ANTHROPIC_MODEL=stories260K ANTHROPIC_SMALL_FAST_MODEL=stories260K "
        "ANTHROPIC_DEFAULT_HAIKU_MODEL=stories260K ANTHROPIC_DEFAULT_SONNET_MODEL=stories260K "
        "ANTHROPIC_DEFAULT_OPUS_MODEL=stories260K CLAUDE_CODE_MAX_OUTPUT_TOKENS=64 "
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 "
        "DISABLE_AUTOUPDATER=1 DISABLE_BUG_COMMAND=1 timeout 500 '%s' '%s' -p 'Say hi' --output-format json "
        "2>&1",
        home, home, home, home, s.port, KVI_NODE_BIN, cli);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "node runs");
    static char out[1 << 16];
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    const int rc = p ? pclose(p) : -1;
    printf("%s\n", out);
    CHECK(rc == 0, "claude -p exit status %d", rc);
    const char *result = strstr(out, "{\"type\":\"result\"");
    cJSON *j = cJSON_Parse(result ? result : out);
    const cJSON *sub = cJSON_GetObjectItem(j, "subtype"), *res = cJSON_GetObjectItem(j, "result");
    CHECK(cJSON_IsString(sub) && !strcmp(sub->valuestring, "success") &&
              cJSON_IsFalse(cJSON_GetObjectItem(j, "is_error")),
          "the turn succeeded");
    CHECK(cJSON_IsString(res) && strlen(res->valuestring) > 0, "the turn has text");
    cJSON_Delete(j);
    http_resp m = http_request(s.port, "GET", "/metrics", NULL, NULL);
    const double prompt = m.body ? prom_metric(m.body, "kvinfer_prompt_tokens_total") : -1;
    CHECK(prompt > 40000, "the server answered the long first request (%g prompt tokens in all)", prompt);
    free(m.body);
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    return test_main_end();
}
