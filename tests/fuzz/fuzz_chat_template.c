/*
 * fuzz_chat_template.c — the Jinja chat-template parser and renderer. The bytes
 * up to the first NUL are the template text; the bytes after it, when there is
 * a NUL, are the request body (JSON) it renders, else a fixed conversation with
 * tools. The render runs with and without bos/eos tokens.
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static const char fixed_request[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Hi\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":"
    "{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
    "{\"role\":\"tool\",\"content\":\"2\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
    "\"ok\"}]}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
    "\"chat_template_kwargs\":{\"enable_thinking\":false}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *request = nul ? fuzz_strndup(nul + 1, size - tlen - 1) : NULL;
    if (nul && !request) return 0;
    kvi_error err = { 0 };
    kvi_chat_template *t = kvi_chat_template_parse((const char *)data, tlen, &err);
    if (t) {
        const char *body = request ? request : fixed_request;
        free(kvi_chat_template_render(t, body, "<s>", "</s>", &err));
        free(kvi_chat_template_render(t, body, NULL, NULL, &err));
        kvi_chat_template_free(t);
    }
    free(request);
    return 0;
}
