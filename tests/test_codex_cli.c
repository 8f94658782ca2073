/*
 * test_codex_cli.c — OpenAI's Codex CLI (npm "@openai/codex", pinned in
 * tests/codex/package.json, installed by scripts/deps.sh with npm ci; the
 * native binary comes inside the package's optional platform dependency, no
 * download at run time) runs one `codex exec` turn against `kvinfer serve`'s
 * /v1/responses on stories260K with Qwen2.5's chat template.
 *
 * Codex reads a config.toml in a temporary CODEX_HOME: a model provider whose
 * base_url is the server on 127.0.0.1 with wire_api "responses", no retries,
 * and every feature that reaches the network off (update check, analytics,
 * feedback, plugins and their marketplace sync, apps, request compression).
 * Its first request (~40 KB: developer messages, function tools, a namespace
 * of tools, the hosted web_search tool, reasoning.summary, include, store
 * false, prompt_cache_key, client_metadata) must be accepted as a whole.
 * The tiny model never ends its turn by itself, so the server gets a
 * server-wide bias on its end token (-l 2+100: </s>) and a token cap (-n 32);
 * a context of 65536 holds the ~26k-token prompt. The request log (JSON) has
 * a 200 line for /v1/responses naming web_search as left out. Skips (77) with
 * the reason when node or the package is missing, and in sanitizer builds (a
 * turn takes minutes there).
 */
#include "testutil.h"

#include "http_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef KVI_CODEX_DIR
#define KVI_CODEX_DIR "tests/codex"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif

/* The config Codex reads: the provider, and nothing that leaves 127.0.0.1. */
static bool write_config(const char *home, int port)
{
    char path[1100], text[2048];
    snprintf(path, sizeof path, "%s/config.toml", home);
    const int n =
        snprintf(text, sizeof text,
                 "model = \"stories260K\"\n"
                 "model_provider = \"kvinfer\"\n"
                 "check_for_update_on_startup = false\n"
                 "[analytics]\nenabled = false\n"
                 "[feedback]\nenabled = false\n"
                 "[features]\n"
                 "plugins = false\nremote_plugin = false\nplugin_sharing = false\napps = false\n"
                 "in_app_updates = false\ntool_suggest = false\nskill_mcp_dependency_install = false\n"
                 "enable_request_compression = false\napi_key_model_discovery = false\n"
                 "daemon_auto_start = false\nshell_snapshot = false\n"
                 "[model_providers.kvinfer]\n"
                 "name = \"kvinfer\"\n"
                 "base_url = \"http://127.0.0.1:%d/v1\"\n"
                 "wire_api = \"responses\"\n"
                 "request_max_retries = 0\n"
                 "stream_max_retries = 0\n",
                 port);
    return n > 0 && (size_t)n < sizeof text && write_file(path, text, (size_t)n) == 0;
}

int main(void)
{
#ifdef KVI_SANITIZER_BUILD
    printf("skipped: a sanitizer build (KVI_SANITIZE / KVI_TSAN): the agent CLI's turn takes minutes there; "
           "the SDK tests run the server code under the sanitizer\n");
    return 77;
#endif
    struct stat st;
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/@openai/codex/package.json", KVI_CODEX_DIR);
    if (!KVI_NODE_BIN[0] || stat(path, &st) != 0) {
        printf("skipped: %s\n", KVI_NODE_BIN[0] ? "the npm package @openai/codex is not installed (npm ci in "
                                                  "tests/codex)"
                                                : "node is not installed");
        return 77;
    }
    char extra[1024];
    snprintf(extra, sizeof extra,
             "-c 65536 --parallel 2 -n 32 -l 2+100 --log-format json --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    test_server s;
    CHECK(test_server_start_logged(&s, extra, "codex_cli.err"), "server starts");
    char home[1024], work[1024];
    snprintf(home, sizeof home, "%s", tmp_path("codex_home"));
    snprintf(work, sizeof work, "%s", tmp_path("codex_work"));
    mkdir(home, 0700);
    mkdir(work, 0700);
    CHECK(write_config(home, s.port), "config.toml written");
    char cmd[4096];
    snprintf(
        cmd, sizeof cmd,
        "cd '%s' && CODEX_HOME='%s' PATH=\"$(dirname '%s'):$PATH\" timeout 300 '%s/node_modules/.bin/codex' "
        "exec --skip-git-repo-check --color never 'Say hi' </dev/null 2>&1",
        work, home, KVI_NODE_BIN, KVI_CODEX_DIR);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "codex runs");
    char line[4096];
    bool tokens_used = false, error = false;
    while (p && fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        if (!strncmp(line, "tokens used", 11)) tokens_used = true;
        if (!strncmp(line, "ERROR", 5)) error = true;
    }
    const int rc = p ? pclose(p) : -1;
    CHECK(rc == 0, "codex exec exit status %d", rc);
    CHECK(tokens_used && !error, "one turn completed without an error");
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    int nl = 0;
    cJSON *lines = test_log_lines("codex_cli.err", "/v1/responses", &nl);
    const cJSON *l = cJSON_GetArrayItem(lines, 0), *st_ = cJSON_GetObjectItem(l, "status");
    CHECK(nl > 0 && cJSON_IsNumber(st_) && st_->valueint == 200, "the log's first /v1/responses line: 200");
    CHECK(test_log_names(l, "left_out", "web_search"),
          "the log names the hosted web_search tool as left out");
    cJSON_Delete(lines);
    return test_main_end();
}
