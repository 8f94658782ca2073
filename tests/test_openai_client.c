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
 * delete, json_schema) against POST /v1/responses. And as test_openai_embeddings
 * with KVI_OPENAI_EMBED: tests/openai/embeddings.mjs (embeddings.create) against
 * `serve --embeddings` on the synthetic qwen3-embed of ../shared/golden/embed.
 */
#include "testutil.h"

#include "http_util.h"

#include <stdlib.h>

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
    if (!node_ready(KVI_NODE_BIN, KVI_OPENAI_DIR, "node_modules/openai/package.json", "openai and ajv"))
        return 77;
    char extra[1024];
#ifdef KVI_OPENAI_EMBED
    /* embeddings.mjs: the synthetic qwen3-embed and its goldens */
    setenv("KVI_SHARED_DIR", KVI_SHARED_DIR, 1);
    snprintf(extra, sizeof extra, "-m '%s' -c 512 --embeddings",
             shared_path("golden/embed/qwen3-embed-f32.gguf"));
#else
    snprintf(extra, sizeof extra, "-c 4096 --chat-template-file '%s'",
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
#endif
    test_server s;
    CHECK(test_server_start(&s, extra, KVI_OPENAI_SCRIPT ".err"), "server starts");
    node_script_check(KVI_NODE_BIN, KVI_OPENAI_DIR, KVI_OPENAI_SCRIPT, s.port, KVI_OPENAI_MIN_OK);
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    return test_main_end();
}
