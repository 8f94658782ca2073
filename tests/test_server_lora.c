/*
 * test_server_lora.c — LoRA adapters through `kvinfer serve` (llama-server's API):
 * adapters loaded by --lora NAME=PATH / --lora-scaled listed at GET /lora-adapters (id,
 * path, name, scale), POST /lora-adapters setting the server-wide scales, a request's "lora"
 * list, an adapter named as the request's "model" and listed at GET /v1/models (vLLM),
 * bad ids refused (400).
 * The generated tokens are greedy on the qwen3 golden model: with adapter A at
 * scale 1 (by its id, or by its name as the model) they must equal
 * each other, and differ from the base model's for at least one of the prompts
 * (llama.cpp's goldens move the logits by 0.52 relative).
 */
#include "testutil.h"

#include "http_util.h"

#include <stdlib.h>
#include <string.h>

/* The tokens of a greedy completion of prompt ids with extra JSON fields */
static char *complete(int port, const char *prompt, const char *extra)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\": [%s], \"max_tokens\": 8, \"temperature\": 0%s%s}", prompt,
             extra[0] ? ", " : "", extra);
    http_resp r = http_request(port, "POST", "/v1/completions", NULL, body);
    CHECK(r.status == 200, "completion %s: %d %s", extra, r.status, r.body ? r.body : "");
    cJSON *o = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *c = o ? cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0) : NULL;
    const char *t = c ? json_get_str(c, "text") : NULL;
    char *out = strdup(t ? t : "");
    cJSON_Delete(o);
    free(r.body);
    return out;
}

/* POST /v1/load_lora_adapter and /v1/unload_lora_adapter (serve --lora-runtime): adapter
 * A loaded at runtime as "hot" gives, selected by name, the tokens it gives loaded at
 * start (want_a); the default stays the base model (want_none); a second load of the
 * name and a bad file are 400s; after the unload the name selects nothing (the base
 * model's tokens) and a second unload is a 404. */
static void check_runtime(const char *const prompts[3], char *const want_a[3], char *const want_none[3])
{
    char extra[1024], body[1024];
    snprintf(extra, sizeof extra, "-m %s --kv-type f32 --lora-runtime",
             shared_path("golden/arch/qwen3-f32.gguf"));
    test_server s;
    CHECK(test_server_start(&s, extra, "lora_rt.err"), "server (--lora-runtime) did not start");
    if (s.pid <= 0) return;
    snprintf(body, sizeof body, "{\"lora_name\": \"hot\", \"lora_path\": \"%s\"}",
             shared_path("golden/lora/qwen3-lora-attn-r4-f32.gguf"));
    http_resp r = http_request(s.port, "POST", "/v1/load_lora_adapter", NULL, body);
    CHECK(r.status == 200 && r.body && strstr(r.body, "added successfully"), "runtime load: %d %s", r.status,
          r.body ? r.body : "");
    free(r.body);
    r = http_request(s.port, "POST", "/v1/load_lora_adapter", NULL, body);
    CHECK(r.status == 400 && r.body && strstr(r.body, "already been loaded"), "a second load of the name: %d",
          r.status);
    free(r.body);
    r = http_request(s.port, "POST", "/v1/load_lora_adapter", NULL,
                     "{\"lora_name\": \"bad\", \"lora_path\": \"/nonexistent/adapter.gguf\"}");
    CHECK(r.status == 400, "a load of a missing file: %d", r.status);
    free(r.body);
    r = http_request(s.port, "GET", "/lora-adapters", NULL, NULL);
    CHECK(r.status == 200 && r.body && strstr(r.body, "\"hot\"") && !strstr(r.body, "\"bad\""),
          "the loaded adapter listed: %s", r.body ? r.body : "");
    free(r.body);
    for (int i = 0; i < 3; i++) {
        char *hot = complete(s.port, prompts[i], "\"model\": \"hot\"");
        char *def = complete(s.port, prompts[i], "");
        CHECK(!strcmp(hot, want_a[i]), "runtime adapter by name: '%s' vs '%s' loaded at start", hot,
              want_a[i]);
        CHECK(!strcmp(def, want_none[i]), "the default after a runtime load: '%s' vs the base '%s'", def,
              want_none[i]);
        free(hot);
        free(def);
    }
    r = http_request(s.port, "POST", "/v1/unload_lora_adapter", NULL, "{\"lora_name\": \"hot\"}");
    CHECK(r.status == 200 && r.body && strstr(r.body, "removed successfully"), "unload: %d", r.status);
    free(r.body);
    for (int i = 0; i < 3; i++) {
        char *hot = complete(s.port, prompts[i], "\"model\": \"hot\"");
        CHECK(!strcmp(hot, want_none[i]), "after the unload the name selects no adapter: '%s'", hot);
        free(hot);
    }
    r = http_request(s.port, "POST", "/v1/unload_lora_adapter", NULL, "{\"lora_name\": \"hot\"}");
    CHECK(r.status == 404, "a second unload: %d", r.status);
    free(r.body);
    r = http_request(s.port, "POST", "/v1/completions", NULL,
                     "{\"prompt\": [1, 2], \"max_tokens\": 1, \"lora\": [{\"id\": 0, \"scale\": 1}]}");
    CHECK(r.status == 400 && r.body && strstr(r.body, "unloaded"), "a request naming the unloaded id: %d %s",
          r.status, r.body ? r.body : "");
    free(r.body);
    test_server_stop(&s);
}

int main(void)
{
    char extra[2048];
    snprintf(extra, sizeof extra, "-m %s --kv-type f32 --lora attn-a=%s --lora-scaled %s 0",
             shared_path("golden/arch/qwen3-f32.gguf"),
             shared_path("golden/lora/qwen3-lora-attn-r4-f32.gguf"),
             shared_path("golden/lora/qwen3-lora-all-r8-f32.gguf"));
    test_server s;
    CHECK(test_server_start(&s, extra, "lora.err"), "server did not start");
    if (s.pid <= 0) return test_main_end();

    http_resp r = http_request(s.port, "GET", "/lora-adapters", NULL, NULL);
    cJSON *l = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK(r.status == 200 && cJSON_GetArraySize(l) == 2, "GET /lora-adapters: %s", r.body ? r.body : "");
    const cJSON *a0 = cJSON_GetArrayItem(l, 0), *a1 = cJSON_GetArrayItem(l, 1);
    CHECK(a0 && json_get_num(a0, "id") == 0 && json_get_num(a0, "scale") == 1 &&
              strstr(json_get_str(a0, "path"), "qwen3-lora-attn-r4-f32.gguf") && json_get_str(a0, "name") &&
              !strcmp(json_get_str(a0, "name"), "attn-a"),
          "adapter 0 (named by --lora attn-a=PATH)");
    CHECK(a1 && json_get_num(a1, "id") == 1 && json_get_num(a1, "scale") == 0 && json_get_str(a1, "name") &&
              !strcmp(json_get_str(a1, "name"), "qwen3-lora-all-r8-f32"),
          "adapter 1 (named by its file)");
    cJSON_Delete(l);
    free(r.body);

    r = http_request(s.port, "GET", "/v1/models", NULL, NULL);
    CHECK(r.status == 200 && r.body && strstr(r.body, "\"qwen3-lora-all-r8-f32\"") &&
              strstr(r.body, "\"attn-a\"") && strstr(r.body, "\"parent\""),
          "the adapters as models: %s", r.body ? r.body : "");
    free(r.body);

    static const char *const prompts[] = { "1, 69, 200, 257, 306", "5, 9, 77, 301",
                                           "42, 43, 44, 45, 46, 47" };
    char *want_a[3] = { 0 }, *want_none[3] = { 0 }; /* adapter A alone / none, for the runtime load below */
    bool differs = false;
    for (int i = 0; i < 3; i++) {
        char *def = complete(s.port, prompts[i], "");
        char *by_id = complete(s.port, prompts[i], "\"lora\": [{\"id\": 0, \"scale\": 1}]");
        char *by_name = complete(s.port, prompts[i], "\"model\": \"attn-a\"");
        char *none = complete(s.port, prompts[i], "\"lora\": []");
        CHECK(!strcmp(def, by_id) && !strcmp(by_id, by_name),
              "adapter A by default, id and name: '%s' '%s' '%s'", def, by_id, by_name);
        differs |= strcmp(by_id, none) != 0;
        want_a[i] = by_id;
        want_none[i] = none;
        free(def);
        free(by_name);
    }
    CHECK(differs, "the adapter changes no completion");

    /* POST sets the server-wide scales: adapter 0 off, so the default is the base model */
    r = http_request(s.port, "POST", "/lora-adapters", NULL, "[{\"id\": 1, \"scale\": 0}]");
    CHECK(r.status == 200, "POST /lora-adapters: %d", r.status);
    free(r.body);
    r = http_request(s.port, "GET", "/lora-adapters", NULL, NULL);
    l = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK(json_get_num(cJSON_GetArrayItem(l, 0), "scale") == 0, "scale 0 after POST: %s",
          r.body ? r.body : "");
    cJSON_Delete(l);
    free(r.body);
    for (int i = 0; i < 3; i++) {
        char *def = complete(s.port, prompts[i], "");
        char *none = complete(s.port, prompts[i], "\"lora\": []");
        CHECK(!strcmp(def, none), "after POST the default is no adapter");
        free(def);
        free(none);
    }
    r = http_request(s.port, "POST", "/v1/completions", NULL,
                     "{\"prompt\": [1, 2], \"max_tokens\": 1, \"lora\": [{\"id\": 7, \"scale\": 1}]}");
    CHECK(r.status == 400, "a bad adapter id: %d", r.status);
    free(r.body);
    r = http_request(s.port, "POST", "/lora-adapters", NULL, "{\"id\": 0}");
    CHECK(r.status == 400, "POST of a non-list: %d", r.status);
    free(r.body);
    r = http_request(s.port, "POST", "/v1/load_lora_adapter", NULL,
                     "{\"lora_name\": \"x\", \"lora_path\": \"y\"}");
    CHECK(r.status == 403 && r.body && strstr(r.body, "--lora-runtime"),
          "runtime load without --lora-runtime: %d %s", r.status, r.body ? r.body : "");
    free(r.body);
    test_server_stop(&s);
    check_runtime(prompts, want_a, want_none);
    for (int i = 0; i < 3; i++) free(want_a[i]), free(want_none[i]);
    return test_main_end();
}
