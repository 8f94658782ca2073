/*
 * test_openai_client.c — the official OpenAI Node client (npm "openai", pinned in
 * tests/openai/package.json, installed by scripts/deps.sh with npm ci) against
 * `kvinfer serve` on stories260K with Qwen2.5's chat template (Hermes/Qwen tool
 * calls) from ../shared/templates: tests/openai/client.mjs asks for a required
 * tool call (plain and streamed through the client's accumulating stream
 * helper), a named function, and a json_schema response (plain and streamed),
 * and validates every answer with ajv against its schema; a bad tool_choice must
 * raise the client's BadRequestError. Skips (77) with the reason when node or
 * the npm packages are missing.
 *
 * Built a second time as test_openai_responses (CMakeLists.txt) with
 * KVI_OPENAI_SCRIPT "responses.mjs": the client's Responses API (create,
 * stream, a function tool round trip by previous_response_id, retrieve,
 * delete, json_schema) against POST /v1/responses.
 */
#include "testutil.h"

#include "http_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef KVI_OPENAI_DIR
#define KVI_OPENAI_DIR "tests/openai"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif
#ifndef KVI_OPENAI_SCRIPT
#define KVI_OPENAI_SCRIPT "client.mjs" /* and the least number of "ok" lines it prints */
#define KVI_OPENAI_MIN_OK 7
#endif

int main(void)
{
    struct stat st;
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/openai/package.json", KVI_OPENAI_DIR);
    if (!KVI_NODE_BIN[0] || stat(path, &st) != 0) {
        printf("skipped: %s\n", KVI_NODE_BIN[0]
                                    ? "the npm packages openai and ajv are not installed (npm ci in "
                                      "tests/openai)"
                                    : "node is not installed");
        return 77;
    }
    char extra[1024];
    snprintf(extra, sizeof extra, "-c 4096 --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    test_server s;
    CHECK(test_server_start(&s, extra, KVI_OPENAI_SCRIPT ".err"), "server starts");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s http://127.0.0.1:%d 2>&1", KVI_OPENAI_DIR, KVI_NODE_BIN,
             KVI_OPENAI_SCRIPT, s.port);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "node runs");
    char line[4096];
    bool all_ok = false;
    int n_ok = 0;
    while (p && fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        if (!strncmp(line, "ok ", 3)) n_ok++;
        if (!strcmp(line, "all ok\n")) all_ok = true;
    }
    const int rc = p ? pclose(p) : -1;
    CHECK(rc == 0, "%s exit status %d", KVI_OPENAI_SCRIPT, rc);
    CHECK(all_ok && n_ok >= KVI_OPENAI_MIN_OK, "%s: %d checks passed, all ok %d", KVI_OPENAI_SCRIPT, n_ok,
          all_ok);
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    return test_main_end();
}
