/*
 * test_jinja_ref.c — every chat template of ../shared/templates/ rendered by
 * kvinfer and by Python's jinja2 configured as Hugging Face transformers
 * configures it (tests/jinja_ref.py), over the conversations of
 * tests/jinja_conversations.json (system prompt, multi-turn unicode and
 * whitespace, tool definitions with a tool call and its result, list-of-parts
 * content, no generation prompt, chat_template_kwargs, the developer role, no
 * bos/eos). The two renderings must be byte-identical; a case jinja2 refuses
 * (raise_exception, a type error) must be an error in kvinfer too. Before them,
 * small snippets of filters, tests and markup (`safe` + plain strings) the same way.
 * Message content goes to each template in the form it expects (a list of parts
 * joined into a string unless the template iterates content): kvinfer detects
 * the form on its own syntax tree, jinja_ref.py as vLLM does on jinja2's; both
 * detections must agree for every template, and forcing the other form must
 * render (or fail) alike.
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

/* Snippets of filter, test and markup behaviour, each rendered by kvinfer and by
 * jinja2 (the variables: d = {"a": 1}, s = "<x>", tools none; x undefined). */
static const char *const snippets[] = {
    /* map and the select family give nothing for a false value (none, undefined, 0, "") */
    "{{ tools|selectattr('type', 'equalto', 'function')|list|length }}",
    "{%- set fns = tools | selectattr('type','equalto','function') | map(attribute='function') | list %}"
    "{{ fns|length }}",
    "{{ none|select|list }}{{ none|reject|list }}{{ none|rejectattr('a')|list }}"
    "{{ none|map(attribute='a')|list }}{{ none|map('upper')|list }}",
    "{{ 0|select|list }}{{ false|map('upper')|list }}{{ ''|reject|list }}{{ x|selectattr('a')|list }}",
    "{{ 5|select|list }}",
    "{{ none|join(',') }}",
    "{{ none|length }}",
    "{% for a in none %}{% endfor %}",
    /* Markup: safe / escape give markup; + and % escape a plain operand, ~ does not */
    "{{ 'a\"b'|safe + 'c\"d' }}|{{ 'c\"d' + 'a\"b'|safe }}|{{ 'a\"b'|safe ~ 'c\"d' }}|{{ 'c\"d' ~ "
    "'a\"b'|safe }}",
    "{{ '<tools>'|safe + {'a': '\"x\" & <y>'}|tojson + '</tools>'|safe }}",
    "{{ (('<'|safe) + '<') + '<' }}|{{ '<' + ('<'|safe) + '<' }}|{{ ('<'|safe) * 2 + '>' }}",
    "{{ '<'|safe|escape }}|{{ '<'|escape|escape }}|{{ '<'|escape + '<' }}|{{ ('<'|safe)|forceescape }}|"
    "{{ ('<'|safe) is escaped }}|{{ '<' is escaped }}|{{ ('<'|safe) is string }}",
    "{{ ('<'|safe).upper() + '<' }}|{{ ('<'|safe).strip() + '<' }}|{{ ('<'|safe)[0] + '<' }}|"
    "{{ ('<'|safe)[:1] + '<' }}|{{ ('<'|safe).replace('<','>') + '<' }}|{{ ('<'|safe).split('x')[0] + '<' }}|"
    "{{ ('<'|safe).join(['<','>']) }}",
    "{{ ('<%s'|safe) % '>' }}|{{ ('<%s%s'|safe) % ('>', 1) }}",
    "{{ ('<'|safe)|string + '<' }}|{{ ('<'|safe)|trim + '<' }}|{{ ('<'|safe)|upper + '<' }}|"
    "{{ ('<'|safe)|center(3) + '<' }}|{{ ('<'|safe)|title + '<' }}|{{ ('<'|safe)|first + '<' }}",
    "{{ ('<'|safe)|replace('<','&') + '<' }}|{{ '%s'|format('<'|safe) + '<' }}|{{ ('<%s'|safe)|format('>') "
    "}}|"
    "{{ ['<'|safe, '>']|join + '<' }}|{{ ('<'|safe)|tojson }}|{{ ('a'|safe) == 'a' }}|{{ ('a'|safe) in 'xa' "
    "}}",
    "{% set ns = namespace(s='<'|safe) %}{% set ns.s = ns.s + '<' %}{{ ns.s }}|"
    "{% macro m() %}<{% endmacro %}{{ m() + '<' }}",
    "{{ ('x'|safe) + 1 }}",
    "{{ 5|safe + '<' }}|{{ none|safe + '<' }}",
    "{{ ('<'|safe)|trim('<') + '<' }}|{{ ('<'|safe)|indent(2) + '<' }}|{{ ('<'|safe)|lower + '<' }}|"
    "{{ ('<'|safe)|capitalize + '<' }}|{{ ('<'|safe)|reverse + '<' }}",
    "{{ ('<'|safe).lstrip('<') + '<' }}|{{ ('a<'|safe).rstrip('<') + '<' }}|{{ ('<'|safe).center(3) + '<' }}|"
    "{{ ('<'|safe).title() + '<' }}|{{ ('<'|safe).format() + '<' }}|{{ ('<{}'|safe).format('>') }}",
    "{% for c in '<'|safe %}{{ c + '<' }}{% endfor %}|{{ {'<'|safe: 1}['<'] }}|{{ ['<'|safe]|tojson }}",
    "{{ s|safe + s }}|{{ s|e + s }}|{{ (s|e)|safe + s }}|{{ s ~ s|safe }}|{{ (s ~ s)|safe + s }}",
    /* other filters on none / undefined, and filters kvinfer lacked */
    "{{ x|default('d') }}|{{ none|default('d') }}|{{ none|default('d', true) }}|{{ x|list }}|{{ x|length }}|"
    "{{ x|join }}|{{ x|first }}|{{ x|items|list }}",
    "{{ x|dictsort }}",
    "{{ x|int }}",
    "{{ x|float }}",
    "{{ none|string }}|{{ none|lower }}|{{ none|trim }}|{{ none|int }}|{{ none|float }}|{{ none|tojson }}",
    "{{ x is none }}|{{ none is defined }}|{{ x is iterable }}|{{ none is iterable }}|{{ none is sequence }}|"
    "{{ x is mapping }}|{{ x is string }}|{{ none is string }}",
    "{{ 'a<b c_d \u00e9'|wordcount }}|{{ '<'|wordcount }}|{{ ''|wordcount }}|{{ 'a-b'|wordcount }}|{{ "
    "x|wordcount }}",
    "{{ 'ab'|center(6) }}|{{ 'ab'.center(7, '*') }}|{{ 'ab'.ljust(5, '.') }}|{{ 'ab'.rjust(5) }}|"
    "{{ '\u00e9'.center(4, '-') }}",
    "{{ [1,2,3,4,5]|batch(2)|list }}|{{ [1,2,3]|batch(2, 0)|list }}|{{ [1,2,3,4,5]|slice(2)|list }}|"
    "{{ [1,2,3,4]|slice(3, 'x')|list }}|{{ x|batch(2)|list }}|{{ x|slice(2)|list }}",
    "{{ 'Hello big wide world of text'|truncate(12) }}|{{ 'Hello big wide world of text'|truncate(12, true) "
    "}}|"
    "{{ 'Hello big wide world'|truncate(18) }}|{{ 'Hello big wide world'|truncate(12, false, '..', 0) }}|"
    "{{ 'abc'|truncate(3) }}|{{ 'Hello world foo bar baz'|truncate(10, end='!') }}",
    "{{ 'a\u00e9 b c d e f'|truncate(5, true) }}|{{ ('<a b c d e f g'|safe)|truncate(8) + '<' }}|"
    "{{ 'HelloWorldLongWord more'|truncate(8) }}",
    "{{ 'abc'|truncate(2) }}",
    "{{ 'upper' is filter }}|{{ 'nope' is filter }}|{{ 'odd' is test }}|{{ 'nope' is test }}|{{ 3 is filter "
    "}}",
};
#define N_SNIPPETS (sizeof snippets / sizeof *snippets)
#define SNIPPET_REQUEST                                                                                      \
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": {\"d\": {\"a\": " \
    "1}, \"s\": \"<x>\"}}"

/* The snippets by kvinfer and by jinja2 (py): the same text, or errors in both. */
static void test_snippets(const char *py)
{
    cJSON *cases = cJSON_CreateArray();
    for (size_t i = 0; i < N_SNIPPETS; i++) {
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "template_text", snippets[i]);
        cJSON_AddItemToObject(k, "request", cJSON_Parse(SNIPPET_REQUEST));
        cJSON_AddItemToArray(cases, k);
    }
    char *text = cJSON_PrintUnformatted(cases);
    const char *path = tmp_path("jinja_snippets.json");
    CHECK(write_file(path, text, strlen(text)) == 0, "cannot write %s", path);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py, KVI_JINJA_REF, path);
    int st = 0;
    char *ref_text = run_capture(cmd, &st);
    cJSON *ref = ref_text && st == 0 ? cJSON_Parse(ref_text) : NULL;
    CHECK(ref && cJSON_GetArraySize(ref) == (int)N_SNIPPETS, "reference renderer failed (status %d)", st);
    int same = 0;
    for (size_t i = 0; ref && i < N_SNIPPETS; i++) {
        const cJSON *r = cJSON_GetArrayItem(ref, (int)i);
        kvi_error err = { 0 };
        kvi_chat_template *t = kvi_chat_template_parse(snippets[i], strlen(snippets[i]), &err);
        char *out = t ? kvi_chat_template_render(t, SNIPPET_REQUEST, NULL, NULL, &err) : NULL;
        const bool ref_ok = cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"));
        const char *want = ref_ok ? cJSON_GetObjectItem(r, "text")->valuestring : NULL;
        const bool ok = ref_ok ? out && !strcmp(out, want) : !out;
        CHECK(ok, "snippet %s\n    kvinfer: %s\n    jinja2:  %s", snippets[i], out ? out : err.msg,
              ref_ok ? want : cJSON_GetObjectItem(r, "error")->valuestring);
        same += ok;
        free(out);
        kvi_chat_template_free(t);
    }
    printf("snippets: %d/%d as jinja2\n", same, (int)N_SNIPPETS);
    cJSON_Delete(ref);
    free(ref_text);
    free(text);
    cJSON_Delete(cases);
}

/* --chat-template-content-format forced against the detection: Qwen2.5 (which
 * concatenates content) given lists fails in both; Mistral Small 3.2 (which
 * iterates content) given joined strings renders the same in both. */
static void test_forced_format(const char *py)
{
    static const struct {
        const char *file;
        kvi_content_format f;
        const char *name;
    } forced[] = { { "Qwen-Qwen2.5-7B-Instruct.jinja", KVI_CONTENT_OPENAI, "openai" },
                   { "Mistral-Small-3.2-24B-Instruct-2506.jinja", KVI_CONTENT_STRING, "string" },
                   { "Qwen-Qwen2.5-7B-Instruct.jinja", KVI_CONTENT_STRING, "string" } };
    const char *req = "{\"messages\": [{\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": "
                      "\"Be brief.\"}]}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                      "\"Hi\"}, {\"type\": \"text\", \"text\": \"there\"}]}]}";
    cJSON *cases = cJSON_CreateArray();
    char path[3][2048];
    for (int i = 0; i < 3; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", shared_path("templates"), forced[i].file);
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "template", path[i]);
        cJSON_AddItemToObject(k, "request", cJSON_Parse(req));
        cJSON_AddStringToObject(k, "content_format", forced[i].name);
        cJSON_AddStringToObject(k, "bos", "<s>");
        cJSON_AddStringToObject(k, "eos", "</s>");
        cJSON_AddItemToArray(cases, k);
    }
    char *text = cJSON_PrintUnformatted(cases), cmd[4096];
    const char *cpath = tmp_path("jinja_forced.json");
    CHECK(write_file(cpath, text, strlen(text)) == 0, "cannot write %s", cpath);
    snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py, KVI_JINJA_REF, cpath);
    int st = 0;
    char *ref_text = run_capture(cmd, &st);
    cJSON *ref = ref_text && st == 0 ? cJSON_Parse(ref_text) : NULL;
    CHECK(cJSON_GetArraySize(ref) == 3, "reference renderer failed (status %d)", st);
    for (int i = 0; ref && i < 3; i++) {
        size_t len = 0;
        char *src = read_file(path[i], &len);
        kvi_error err = { 0 };
        kvi_chat_template *t = src ? kvi_chat_template_parse(src, len, &err) : NULL;
        kvi_chat_template_set_content_format(t, forced[i].f);
        char *out = t ? kvi_chat_template_render(t, req, "<s>", "</s>", &err) : NULL;
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        const bool ref_ok = cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"));
        const char *want = ref_ok ? cJSON_GetObjectItem(r, "text")->valuestring : NULL;
        CHECK(ref_ok ? out && !strcmp(out, want) : !out, "%s forced to %s: kvinfer '%s', jinja2 '%s'",
              forced[i].file, forced[i].name, out ? out : err.msg,
              ref_ok ? want : cJSON_GetObjectItem(r, "error")->valuestring);
        CHECK(i != 2 || (out && strstr(out, "Hi\nthere")), "parts joined with a newline: %s", out ? out : "");
        free(out);
        kvi_chat_template_free(t);
        free(src);
    }
    cJSON_Delete(ref);
    free(ref_text);
    free(text);
    cJSON_Delete(cases);
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
    test_snippets(py);
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

    int total_same = 0, total_errors_both = 0, n_openai = 0;
    for (int t = 0; t < n_t; t++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", tdir, names[t]);
        size_t len = 0;
        char *text = read_file(path, &len);
        kvi_error err = { 0 };
        kvi_chat_template *tmpl = text ? kvi_chat_template_parse(text, len, &err) : NULL;
        int same = 0;
        /* the content form vLLM's detection gives, on jinja2's own syntax tree */
        const cJSON *f0 = cJSON_GetObjectItem(cJSON_GetArrayItem(ref, t * n_c), "format");
        const kvi_content_format want_cf = cJSON_IsString(f0) && !strcmp(f0->valuestring, "openai")
                                               ? KVI_CONTENT_OPENAI
                                               : KVI_CONTENT_STRING;
        CHECK(tmpl && kvi_chat_template_content_format(tmpl) == want_cf, "%s: content format %s", names[t],
              cJSON_IsString(f0) ? f0->valuestring : "?");
        n_openai += want_cf == KVI_CONTENT_OPENAI;
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
    printf("templates: %d x %d conversations: %d/%d identical (%d of them errors in both); %d templates "
           "iterate content\n",
           n_t, n_c, total_same, n_t * n_c, total_errors_both, n_openai);
    CHECK(n_openai > 0 && n_openai < n_t, "both content forms among the templates (%d of %d openai)",
          n_openai, n_t);
    test_forced_format(py);
    free(names);
    free(ref_text);
    free(cases_text);
    cJSON_Delete(ref);
    cJSON_Delete(cases);
    cJSON_Delete(convs);
    return test_main_end();
}
