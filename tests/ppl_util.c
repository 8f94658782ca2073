/*
 * ppl_util.c — the golden text file and the perplexity --json run shared by the
 * perplexity tests (see ppl_util.h). The text is built in one 64 KiB buffer.
 */
#include "ppl_util.h"

#include "testutil.h"

#include <math.h>
#include <stdlib.h>

bool ppl_golden_text(const char *name, char *path, size_t cap_path)
{
    size_t cap = 1 << 16, len = 0;
    char *t = malloc(cap); /* [cap] bytes, [len] written */
    if (!t) return false;
    for (int i = 1; i <= 4; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "golden/stories260K/case%d.json", i);
        cJSON *c = load_json(shared_path(rel));
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "prompt");
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(c, "greedy_text");
        if (cJSON_IsString(p) && cJSON_IsString(g))
            len += (size_t)snprintf(t + len, cap - len, "%s%s\n", p->valuestring, g->valuestring);
        cJSON_Delete(c);
    }
    snprintf(path, cap_path, "%s", tmp_path(name));
    bool ok = len > 1000 && write_file(path, t, len) == 0;
    free(t);
    return ok;
}

cJSON *ppl_json_run(const char *flags, const char *model, const char *text, const char *args, int *rc,
                    char **errout)
{
    char cmd[2048], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "perplexity --json %s -m %s -f %s %s", flags, model, text, args);
    *rc = run_kvinfer(cmd, &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    if (*rc == 0 && !j) fprintf(stderr, "perplexity %s: stdout not JSON: %.300s\n", args, out ? out : "");
    free(out);
    if (errout)
        *errout = err;
    else
        free(err);
    return j;
}

double json_num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
