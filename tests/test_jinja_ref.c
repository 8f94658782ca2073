/*
 * test_jinja_ref.c — every chat template of ../shared/templates/ rendered by
 * kvinfer and by Python's jinja2 configured as Hugging Face transformers
 * configures it (tests/jinja_ref.py), over the conversations of
 * tests/jinja_conversations.json (system prompt, multi-turn unicode and
 * whitespace, tool definitions with a tool call and its result, list-of-parts
 * content, no generation prompt, chat_template_kwargs, the developer role, no
 * bos/eos). The two renderings must be byte-identical; a case jinja2 refuses
 * (raise_exception, a type error) must be an error in kvinfer too.
 *
 * Needs python3 with jinja2 (Debian python3-jinja2, installed by scripts/deps.sh).
 * Without them it skips (exit 77) saying so, unless KVI_REQUIRE_JINJA2=1, which
 * makes their absence a failure (CI sets it).
 */
#include "kvinfer.h"
#include "testutil.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#ifndef KVI_JINJA_REF
#define KVI_JINJA_REF "tests/jinja_ref.py"
#endif
#ifndef KVI_JINJA_CONVERSATIONS
#define KVI_JINJA_CONVERSATIONS "tests/jinja_conversations.json"
#endif

static char *run_capture(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    for (size_t r; s && (r = fread(s + n, 1, cap - n - 1, p)) > 0;) {
        n += r;
        if (n + 1 == cap) s = realloc(s, cap *= 2);
    }
    *status = pclose(p);
    if (s) s[n] = 0;
    return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The *.jinja files of dir, sorted (malloc'd names). */
static int list_templates(const char *dir, char ***out)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 64;
    char **names = malloc(cap * sizeof *names);
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".jinja")) continue;
        if (n == cap) names = realloc(names, (cap *= 2) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    *out = names;
    return n;
}

static bool require_ref(void)
{
    const char *v = getenv("KVI_REQUIRE_JINJA2");
    return v && v[0] && strcmp(v, "0") != 0;
}

int main(void)
{
    char cmd[4096];
    /* the first interpreter that has jinja2: the PATH's python3, else Debian's (a
     * user's python3 on PATH, pyenv for instance, may lack the system's packages) */
    static const char *const pythons[] = { "python3", "/usr/bin/python3" };
    const char *py = NULL;
    int st = -1;
    for (size_t i = 0; !py && i < sizeof pythons / sizeof *pythons; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import jinja2' 2>/dev/null", pythons[i]);
        if ((st = system(cmd)) == 0) py = pythons[i];
    }
    if (!py) {
        fprintf(stderr, "test_jinja_ref: python3 with jinja2 not found (apt install python3-jinja2)%s\n",
                require_ref() ? "; KVI_REQUIRE_JINJA2 is set: failing" : "; skipped");
        return require_ref() ? 1 : 77;
    }
    cJSON *convs = load_json(KVI_JINJA_CONVERSATIONS);
    CHECK(convs && cJSON_IsArray(convs), "cannot read %s", KVI_JINJA_CONVERSATIONS);
    if (!convs) return test_main_end();
    const char *tdir = shared_path("templates");
    char **names = NULL;
    int n_t = list_templates(tdir, &names);
    CHECK(n_t > 0, "no templates under %s", tdir);
    int n_c = cJSON_GetArraySize(convs);

    /* the cases: every template x every conversation */
    cJSON *cases = cJSON_CreateArray();
    for (int t = 0; t < n_t; t++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", tdir, names[t]);
        for (int c = 0; c < n_c; c++) {
            const cJSON *conv = cJSON_GetArrayItem(convs, c);
            cJSON *k = cJSON_CreateObject();
            cJSON_AddStringToObject(k, "template", path);
            cJSON_AddItemToObject(k, "request", cJSON_Duplicate(cJSON_GetObjectItem(conv, "request"), 1));
            cJSON_AddItemToObject(k, "bos", cJSON_Duplicate(cJSON_GetObjectItem(conv, "bos"), 1));
            cJSON_AddItemToObject(k, "eos", cJSON_Duplicate(cJSON_GetObjectItem(conv, "eos"), 1));
            cJSON_AddItemToArray(cases, k);
        }
    }
    char *cases_text = cJSON_PrintUnformatted(cases);
    const char *cases_path = tmp_path("jinja_cases.json");
    CHECK(write_file(cases_path, cases_text, strlen(cases_text)) == 0, "cannot write %s", cases_path);
    snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py, KVI_JINJA_REF, cases_path);
    char *ref_text = run_capture(cmd, &st);
    cJSON *ref = ref_text && st == 0 ? cJSON_Parse(ref_text) : NULL;
    CHECK(ref && cJSON_GetArraySize(ref) == n_t * n_c, "reference renderer failed (status %d)", st);
    if (!ref) return test_main_end();

    int total_same = 0, total_errors_both = 0;
    for (int t = 0; t < n_t; t++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", tdir, names[t]);
        size_t len = 0;
        char *text = read_file(path, &len);
        kvi_error err = { 0 };
        kvi_chat_template *tmpl = text ? kvi_chat_template_parse(text, len, &err) : NULL;
        int same = 0;
        for (int c = 0; c < n_c; c++) {
            const cJSON *conv = cJSON_GetArrayItem(convs, c);
            const cJSON *r = cJSON_GetArrayItem(ref, t * n_c + c);
            const char *cname = cJSON_GetObjectItem(conv, "name")->valuestring;
            bool ref_ok = cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"));
            char *req = cJSON_PrintUnformatted(cJSON_GetObjectItem(conv, "request"));
            const cJSON *bos = cJSON_GetObjectItem(conv, "bos"), *eos = cJSON_GetObjectItem(conv, "eos");
            kvi_error rerr = { 0 };
            char *out =
                tmpl ? kvi_chat_template_render(tmpl, req, cJSON_IsString(bos) ? bos->valuestring : NULL,
                                                cJSON_IsString(eos) ? eos->valuestring : NULL, &rerr)
                     : NULL;
            if (!tmpl) rerr = err;
            bool ok;
            if (ref_ok) {
                const char *want = cJSON_GetObjectItem(r, "text")->valuestring;
                ok = out && !strcmp(out, want);
                if (!ok && out) {
                    size_t i = 0;
                    while (out[i] && out[i] == want[i]) i++;
                    fprintf(stderr,
                            "  %s x %s: differs at byte %zu:\n    kvinfer: %.80s\n    jinja2:  %.80s\n",
                            names[t], cname, i, out + (i > 20 ? i - 20 : 0), want + (i > 20 ? i - 20 : 0));
                } else if (!ok) {
                    fprintf(stderr, "  %s x %s: kvinfer error: %s\n", names[t], cname, rerr.msg);
                }
            } else {
                ok = out == NULL;
                if (ok) total_errors_both++;
                if (!ok)
                    fprintf(stderr, "  %s x %s: jinja2 raised (%s), kvinfer rendered\n", names[t], cname,
                            cJSON_GetObjectItem(r, "error")->valuestring);
            }
            CHECK(ok, "%s x %s", names[t], cname);
            same += ok;
            free(out);
            free(req);
        }
        printf("%-55s %d/%d identical\n", names[t], same, n_c);
        total_same += same;
        kvi_chat_template_free(tmpl);
        free(text);
        free(names[t]);
    }
    printf("templates: %d x %d conversations: %d/%d identical (%d of them errors in both)\n", n_t, n_c,
           total_same, n_t * n_c, total_errors_both);
    free(names);
    free(ref_text);
    free(cases_text);
    cJSON_Delete(ref);
    cJSON_Delete(cases);
    cJSON_Delete(convs);
    return test_main_end();
}
