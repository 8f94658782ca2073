/*
 * test_anthropic_client.c — the official Anthropic TypeScript SDK (npm
 * "@anthropic-ai/sdk", pinned in tests/anthropic/package.json, installed by
 * scripts/deps.sh with npm ci) against `kvinfer serve` on stories260K with
 * Qwen2.5's chat template (Hermes tool calls) from ../shared/templates:
 * tests/anthropic/client.mjs runs messages.create, messages.stream (the SDK's
 * final message must equal the non-streamed one for the same seed), a tool-use
 * round trip whose input validates with ajv, countTokens, and a missing
 * max_tokens that must raise the SDK's BadRequestError. Skips (77) with the
 * reason when node or the npm packages are missing.
 */
#include "testutil.h"

#include "http_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef KVI_ANTHROPIC_DIR
#define KVI_ANTHROPIC_DIR "tests/anthropic"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif

int main(void)
{
    struct stat st;
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/@anthropic-ai/sdk/package.json", KVI_ANTHROPIC_DIR);
    if (!KVI_NODE_BIN[0] || stat(path, &st) != 0) {
        printf("skipped: %s\n", KVI_NODE_BIN[0]
                                    ? "the npm packages @anthropic-ai/sdk and ajv are not installed "
                                      "(npm ci in tests/anthropic)"
                                    : "node is not installed");
        return 77;
    }
    char extra[1024];
    snprintf(extra, sizeof extra, "-c 4096 --api-key sk-anthropic --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    test_server s;
    CHECK(test_server_start(&s, extra, "anthropic_client.err"), "server starts");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' client.mjs http://127.0.0.1:%d 2>&1", KVI_ANTHROPIC_DIR,
             KVI_NODE_BIN, s.port);
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
    CHECK(rc == 0, "client.mjs exit status %d", rc);
    CHECK(all_ok && n_ok >= 11, "client.mjs: %d checks passed, all ok %d", n_ok, all_ok);
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    return test_main_end();
}
