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

#ifndef KVI_ANTHROPIC_DIR
#define KVI_ANTHROPIC_DIR "tests/anthropic"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif

int main(void)
{
    if (!node_ready(KVI_NODE_BIN, KVI_ANTHROPIC_DIR, "node_modules/@anthropic-ai/sdk/package.json",
                    "@anthropic-ai/sdk and ajv"))
        return 77;
    char extra[1024];
    snprintf(extra, sizeof extra, "-c 4096 --api-key sk-anthropic --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    test_server s;
    CHECK(test_server_start(&s, extra, "anthropic_client.err"), "server starts");
    node_script_check(KVI_NODE_BIN, KVI_ANTHROPIC_DIR, "client.mjs", s.port, 11);
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    return test_main_end();
}
