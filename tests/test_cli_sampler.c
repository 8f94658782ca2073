/*
 * test_cli_sampler.c — `kvinfer sampler` end to end (run through run_kvinfer())
 * against llama.cpp's goldens (../shared/golden/sampling): a case of
 * cases.json written to a file, with "force" set to llama.cpp's draws for the
 * stateful ones, must print llama.cpp's chain, the first draw's candidates
 * (|p - p_expected| <= 1e-5) and, step by step, trace_n and trace_p (within
 * 1e-5); a stateless case's own draws stay inside the candidate set; bad input
 * is one error line and exit status 1.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const cJSON *by_name(const cJSON *arr, const char *name)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, name)) return it;
    return NULL;
}

/* Runs `kvinfer sampler --json` on case c (with force = the expected draws when
 * forced); the parsed output or NULL. */
static cJSON *run_case(const cJSON *c, const cJSON *e, bool forced)
{
    cJSON *dup = cJSON_Duplicate(c, true);
    if (forced) cJSON_AddItemToObject(dup, "force", cJSON_Duplicate(cJSON_GetObjectItem(e, "draws"), true));
    char *text = cJSON_PrintUnformatted(dup);
    char path[4096], args[8192];
    snprintf(path, sizeof path, "%s/sampler_case_%d.json", KVI_TMP_DIR, (int)getpid());
    CHECK(write_file(path, text, strlen(text)) == 0, "write %s", path);
    snprintf(args, sizeof args, "sampler -m '%s' -f '%s' --json", shared_path("models/stories260K.gguf"),
             path);
    char *out = NULL, *err = NULL;
    const int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0, "sampler exit %d: %s", rc, err ? err : "");
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j != NULL, "sampler printed one JSON object");
    remove(path);
    free(text);
    free(out);
    free(err);
    cJSON_Delete(dup);
    return j;
}

static void check_chain_and_candidates(const cJSON *got, const cJSON *e, const char *name)
{
    const cJSON *gc = cJSON_GetObjectItem(got, "chain"), *ec = cJSON_GetObjectItem(e, "chain");
    bool same = cJSON_GetArraySize(gc) == cJSON_GetArraySize(ec);
    for (int i = 0; same && i < cJSON_GetArraySize(ec); i++)
        same = !strcmp(cJSON_GetArrayItem(gc, i)->valuestring, cJSON_GetArrayItem(ec, i)->valuestring);
    CHECK(same, "%s: chain", name);
    const cJSON *gi = cJSON_GetObjectItem(cJSON_GetObjectItem(got, "candidates"), "ids"),
                *gp = cJSON_GetObjectItem(cJSON_GetObjectItem(got, "candidates"), "p"),
                *ei = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "candidates"), "ids"),
                *ep = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "candidates"), "p");
    CHECK(cJSON_GetArraySize(gi) == cJSON_GetArraySize(ei), "%s: %d candidates, want %d", name,
          cJSON_GetArraySize(gi), cJSON_GetArraySize(ei));
    int matched = 0;
    for (int i = 0; i < cJSON_GetArraySize(ei); i++)
        for (int j = 0; j < cJSON_GetArraySize(gi); j++)
            if (cJSON_GetArrayItem(gi, j)->valueint == cJSON_GetArrayItem(ei, i)->valueint)
                matched += fabs(cJSON_GetArrayItem(gp, j)->valuedouble -
                                cJSON_GetArrayItem(ep, i)->valuedouble) <= 1e-5;
    CHECK(matched == cJSON_GetArraySize(ei), "%s: %d of %d candidates with the expected p", name, matched,
          cJSON_GetArraySize(ei));
}

static void check_forced(const cJSON *cases, const cJSON *ecases, const char *name)
{
    const cJSON *c = by_name(cases, name), *e = by_name(ecases, name);
    cJSON *got = c && e ? run_case(c, e, true) : NULL;
    if (!got) return;
    check_chain_and_candidates(got, e, name);
    const cJSON *tn = cJSON_GetObjectItem(got, "trace_n"), *tp = cJSON_GetObjectItem(got, "trace_p");
    const cJSON *en = cJSON_GetObjectItem(e, "trace_n"), *ep = cJSON_GetObjectItem(e, "trace_p");
    CHECK(cJSON_GetArraySize(tn) == 200 && cJSON_GetArraySize(tp) == 200, "%s: 200 steps", name);
    const cJSON *fragile = cJSON_GetObjectItem(e, "fragile_steps"), *f;
    int bad = 0;
    for (int i = 0; i < cJSON_GetArraySize(en) && i < cJSON_GetArraySize(tn); i++) {
        bool skip = false;
        cJSON_ArrayForEach(f, fragile) skip = skip || f->valueint == i;
        if (skip) continue;
        bad += cJSON_GetArrayItem(tn, i)->valueint != cJSON_GetArrayItem(en, i)->valueint ||
               fabs(cJSON_GetArrayItem(tp, i)->valuedouble - cJSON_GetArrayItem(ep, i)->valuedouble) > 1e-5;
    }
    CHECK(bad == 0, "%s: %d of 200 steps off llama.cpp's trace", name, bad);
    cJSON_Delete(got);
}

static void check_drawn(const cJSON *cases, const cJSON *ecases, const char *name)
{
    const cJSON *c = by_name(cases, name), *e = by_name(ecases, name);
    cJSON *got = c && e ? run_case(c, e, false) : NULL;
    if (!got) return;
    check_chain_and_candidates(got, e, name);
    const cJSON *d = cJSON_GetObjectItem(got, "draws"),
                *ei = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "candidates"), "ids");
    int outside = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, d)
    {
        bool in = false;
        const cJSON *id;
        cJSON_ArrayForEach(id, ei) in = in || id->valueint == t->valueint;
        outside += !in;
    }
    CHECK(cJSON_GetArraySize(d) == 200 && outside == 0, "%s: %d draws, %d outside the candidates", name,
          cJSON_GetArraySize(d), outside);
    cJSON_Delete(got);
}

static void check_errors(const cJSON *cases)
{
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer("sampler --json", &out, &err);
    CHECK(rc == 1 && err && strstr(err, "-f CASE.json"), "no case: rc %d, %s", rc, err ? err : "");
    free(out);
    free(err);
    char path[4096], args[8192];
    snprintf(path, sizeof path, "%s/sampler_bad_%d.json", KVI_TMP_DIR, (int)getpid());
    const char *bad = "{\"params\": {}, \"logits\": [1, 2, 3]}";
    write_file(path, bad, strlen(bad));
    snprintf(args, sizeof args, "sampler -m '%s' -f '%s'", shared_path("models/stories260K.gguf"), path);
    rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 1 && err && strstr(err, "'logits' must be an array of 512 numbers"),
          "short logits: rc %d, %s", rc, err ? err : "");
    free(out);
    free(err);
    cJSON *dup = cJSON_Duplicate(by_name(cases, "default"), true);
    cJSON_AddNumberToObject(cJSON_GetObjectItem(dup, "params"), "mirostat", 3);
    char *badp = cJSON_PrintUnformatted(dup);
    write_file(path, badp, strlen(badp));
    free(badp);
    cJSON_Delete(dup);
    rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 1 && err && strstr(err, "'mirostat' is 3, outside [0, 2]"), "mirostat 3: rc %d, %s", rc,
          err ? err : "");
    free(out);
    free(err);
    remove(path);
}

int main(void)
{
    cJSON *cases = load_json(shared_path("golden/sampling/cases.json"));
    cJSON *exp = load_json(shared_path("golden/sampling/expected.json"));
    CHECK(cases && exp, "goldens");
    if (!cases || !exp) return test_main_end();
    const cJSON *ec = cJSON_GetObjectItem(exp, "cases");
    check_forced(cases, ec, "mirostat1_tau5");
    check_forced(cases, ec, "dry_custom_breakers");
    check_forced(cases, ec, "everything");
    check_drawn(cases, ec, "typical_default_chain");
    check_drawn(cases, ec, "order_chars");
    check_errors(cases);
    cJSON_Delete(cases);
    cJSON_Delete(exp);
    return test_main_end();
}
