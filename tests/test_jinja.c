/*
 * test_jinja.c — the Jinja interpreter (src/template/) on hand-written templates
 * with exact expected outputs (those Python's jinja2 gives with transformers'
 * settings): whitespace control, loops and loop.*, scoping of set, namespace,
 * block set, macros and call blocks, filters, tests, methods, tojson's ints,
 * floats, unicode and key order, Python's printing of values; errors with their
 * messages (raise_exception, iterating none, str + dict, the sandbox refusing
 * append/pop, syntax errors); limits (endless loops, infinite recursion, output
 * and memory bombs, deep nesting) failing quickly; small memory limits failing
 * cleanly at every size; the chat rendering (tool-call arguments parsed, ints
 * and floats kept); and `kvinfer template` on a GGUF, a Hugging Face folder and
 * a bare tokenizer.json.
 */
#include "kvinfer.h"
#include "testutil.h"
#include "template/template.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct tcase {
    const char *tmpl, *vars;
    const char *want; /* NULL: an error whose message contains err */
    const char *err;
} tcase;

static const tcase cases[] = {
    { "{% if true %}\n  a\n{% endif %}\nb", "{}", "  a\nb", NULL },
    { "  {%- if true -%}  x  {%- endif -%}  y", "{}", "xy", NULL },
    { "<{{- ' v ' -}}>", "{}", "< v >", NULL },
    { "a\n    {% if true %}\n    b\n    {% endif %}\nc", "{}", "a\n    b\nc", NULL },
    { "{# comment #}\nx {#- c -#} y", "{}", "xy", NULL },
    { "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}{% if "
      "loop.first %}F{% endif %}{% if loop.last %}L{% endif %};{% endfor %}",
      "{\"xs\": [\"a\",\"b\",\"c\"]}", "1/0/3/3F;2/1/3/2;3/2/3/1L;", NULL },
    { "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }},{% else %}none{% endfor %}", "{\"xs\": [1,2,3]}",
      "22,32,", NULL },
    { "{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty", NULL },
    { "{% for x in xs %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x "
      "}}{% endfor %}",
      "{\"xs\": [0,1,2,3,4]}", "02", NULL },
    { "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
      "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1;a=2;ba", NULL },
    { "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}", "{}",
      "1011121", NULL },
    { "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s "
      "~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
      "{}", "6 0123", NULL },
    { "{% set b %}  block {{ 1 + 1 }} {% endset %}[{{ b }}][{{ b | trim }}]", "{}", "[  block 2 ][block 2]",
      NULL },
    { "{% macro m(a, b='d', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, "
      "c=3) }}",
      "{}", "1-d-None|1-2-None|1-d-3", NULL },
    { "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}inner{% endcall %}", "{}", "<inner>",
      NULL },
    { "{% filter upper %}abc{% endfilter %}", "{}", "ABC", NULL },
    { "{{ d | tojson }}|{{ d | tojson(indent=2) }}",
      "{\"d\": {\"z\": 1, \"a\": [1.0, 2.5, -0.0, 1e-07, 1e+16, 123456789012], \"u\": \"h\\u00e9 "
      "\\ud83c\\udf89 \\\"q\\\" \\n\\t\", \"n\": null, \"t\": true, \"e\": {}, \"l\": []}}",
      "{\"z\": 1, \"a\": [1.0, 2.5, -0.0, 1e-07, 1e+16, 123456789012], \"u\": \"hé 🎉 \\\"q\\\" \\n\\t\", "
      "\"n\": null, \"t\": true, \"e\": {}, \"l\": []}|{\n  \"z\": 1,\n  \"a\": [\n    1.0,\n    2.5,\n    "
      "-0.0,\n    1e-07,\n    1e+16,\n    123456789012\n  ],\n  \"u\": \"hé 🎉 \\\"q\\\" \\n\\t\",\n  \"n\": "
      "null,\n  \"t\": true,\n  \"e\": {},\n  \"l\": []\n}",
      NULL },
    { "{{ 'é' | tojson(ensure_ascii=True) }} {{ d | tojson(sort_keys=True, separators=(',', ':')) }}",
      "{\"d\": {\"b\": 1, \"a\": 2}}", "\"\\u00e9\" {\"a\":2,\"b\":1}", NULL },
    { "{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }} {{ (1,) }} {{ 1.0 }} {{ 3 / 2 }} {{ 7 // 2 }} {{ -7 // 2 "
      "}} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 10 / 2 }}",
      "{}", "[1, 'a', None, True, 1.5, {'k': 'v'}] (1,) 1.0 1.5 3 -4 2 1024 5.0", NULL },
    { "{{ 'ab' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': "
      "1} }}",
      "{}", "ab1NoneTrue ababab True True True", NULL },
    { "{{ s[1:3] }}|{{ s[-2:] }}|{{ s[::-1] }}|{{ s | length }}|{{ xs[-1] }}|{{ xs[1:] }}|{{ xs[::2] }}",
      "{\"s\": \"h\\u00e9llo\", \"xs\": [1,2,3,4]}", "él|lo|olléh|5|4|[2, 3, 4]|[1, 3]", NULL },
    { "{{ x if c else y }}|{{ x if not c }}|{{ 'yes' if c and x or y }}",
      "{\"x\": \"X\", \"y\": \"Y\", \"c\": false}", "Y|X|yes", NULL },
    { "{{ d.a }}|{{ d['a'] }}|{{ d.missing }}|{{ d.get('a') }}|{{ d.get('m', 'def') }}|{{ d.keys() | list "
      "}}|{{ d.values() | list }}",
      "{\"d\": {\"a\": 1}}", "1|1||1|def|['a']|[1]", NULL },
    { "{{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ ' a'.lstrip() }}|{{ 'a '.rstrip() }}|{{ "
      "'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'a-b-c'.rsplit('-', 1) "
      "}}",
      "{}", "x y|hi|a|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b-c']|['a-b', 'c']", NULL },
    { "{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}|{{ 'aXa'.replace('a', 'b') }}|{{ "
      "'ab'.upper() }}{{ 'AB'.lower() }}|{{ 'hello world'.title() }}|{{ '{} and {}'.format(1, 'b') }}|{{ "
      "'hello'.find('l') }}|{{ 'hello'.count('l') }}",
      "{}", "TrueTrue|bXb|ABab|Hello World|1 and b|2|2", NULL },
    { "{{ xs | map(attribute='n') | join(', ') }}|{{ xs | selectattr('t', 'equalto', 'f') | "
      "map(attribute='n') | list }}|{{ xs | rejectattr('t') | list | length }}|{{ xs | selectattr('t', "
      "'defined') | list | count }}",
      "{\"xs\": [{\"n\": \"a\", \"t\": \"f\"}, {\"n\": \"b\", \"t\": \"g\"}, {\"n\": \"c\"}]}",
      "a, b, c|['a']|1|2", NULL },
    { "{{ xs | first }}{{ xs | last }}|{{ u | default('dflt') }}|{{ '' | default('e', true) }}|{{ 'ab' | "
      "upper }}|{{ 'x y' | replace(' ', '_') }}|{{ 3 | string }}{{ '42' | int + 1 }}|{{ '2.5' | float }}|{{ "
      "'hello there' | capitalize }}|{{ ['b', 'a', 'B'] | unique | list }}|{{ [3, 1, 2] | sort }}|{{ [1, 2] "
      "| reverse | list }}|{{ {'b': 1, 'A': 2} | dictsort }}",
      "{\"xs\": [1, 2, 3]}",
      "13|dflt|e|AB|x_y|343|2.5|Hello there|['b', 'a']|[1, 2, 3]|[2, 1]|[('A', 2), ('b', 1)]", NULL },
    { "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'one two  three' | wordcount "
      "}}|{{ -3 | abs }}|{{ 2.567 | round(1) }}|{{ 2.5 | round }}|{{ d | items | list }}",
      "{\"d\": {\"k\": 1}}", "a\n  b\n\n  c|  a\n  b|3|3|2.6|2.0|[('k', 1)]", NULL },
    { "{{ x is defined }}{{ u is undefined }}{{ n is none }}{{ s is string }}{{ 1 is number }}{{ d is "
      "mapping }}{{ xs is iterable }}{{ xs is sequence }}{{ n is sameas none }}{{ true is true }}{{ false is "
      "false }}{{ 2 is in [1, 2] }}{{ 'a' is equalto 'a' }}{{ 3 is odd }}{{ x is not none }}",
      "{\"x\": 1, \"n\": null, \"s\": \"s\", \"d\": {}, \"xs\": []}",
      "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue", NULL },
    { "{{ undefined_name }}|{{ none }}|{{ u.attr is defined }}", "{}", NULL, "is undefined" },
    { "{{ raise_exception('bad role: ' ~ r) }}", "{\"r\": \"x\"}", NULL, "bad role: x" },
    { "{% for m in n %}{% endfor %}", "{\"n\": null}", NULL, "not iterable" },
    { "{{ 'a' + d }}", "{\"d\": {}}", NULL, "can only concatenate str" },
    { "{% set l = [] %}{% set _ = l.append(1) %}", "{}", NULL, "unsafe" },
    { "{{ xs.pop(0) }}", "{\"xs\": [1]}", NULL, "unsafe" },
    { "{{ 1 / 0 }}", "{}", NULL, "division by zero" },
    { "{{ undefined_fn() }}", "{}", NULL, "is undefined" },
    { "{% if %}", "{}", NULL, "expected" },
    { "{% for x in xs %}", "{\"xs\": []}", NULL, "expected 'endfor'" },
    { "{{ x | no_such_filter }}", "{\"x\": 1}", NULL, "no filter named" },
    { "{{ 1 < 'a' }}", "{}", NULL, "not supported between" },
    { "{% generation %}gen {{ 1 }}{% endgeneration %}!", "{}", "gen 1!", NULL },
    { "{% raw %}{{ not rendered }}{% endraw %}", "{}", "{{ not rendered }}", NULL },
    { "a\r\nb\n", "{}", "a\nb", NULL },
    { "{{ '%s-%d' % ('a', 3) }} {{ 'x' ~ 1.5e-05 }} {{ 0.1 + 0.2 }} {{ 1e300 * 1e10 }} {{ "
      "12345678901234567.0 }}",
      "{}", "a-3 x1.5e-05 0.30000000000000004 inf 1.2345678901234568e+16", NULL },
};

/* Renders tmpl with vars (JSON) under lim; the output (malloc'd) or NULL with err. */
static char *render_lim(const char *tmpl, const char *vars, const jlimits *lim, kvi_error *err)
{
    kvi_chat_template *t = kvi_chat_template_parse(tmpl, strlen(tmpl), err);
    if (!t) return NULL;
    char *out = NULL;
    jinja_render_vars(t, vars, strlen(vars), lim, &out, NULL, err);
    kvi_chat_template_free(t);
    return out;
}

static void test_cases(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tcase *c = &cases[i];
        kvi_error err = { 0 };
        char *out = render_lim(c->tmpl, c->vars, NULL, &err);
        if (c->want) {
            CHECK(out && !strcmp(out, c->want), "case %zu %s: got [%s] want [%s] (%s)", i, c->tmpl,
                  out ? out : "(error)", c->want, err.msg);
        } else {
            CHECK(!out && err.code < 0 && strstr(err.msg, c->err),
                  "case %zu %s: want an error with '%s', got [%s] (%s)", i, c->tmpl, c->err,
                  out ? out : "(error)", err.msg);
        }
        free(out);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Hostile templates end in an error, quickly. */
static void test_limits(void)
{
    static const struct {
        const char *tmpl, *err;
    } bombs[] = {
        { "{% for i in range(1000000000) %}{% for j in range(1000000000) %}{% endfor %}{% endfor %}",
          "limit" },
        { "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion" },
        { "{% set s = 'x' * 100000 %}{% for i in range(100000) %}{{ s }}{% endfor %}", "output limit" },
        { "{% set ns = namespace(s='xx') %}{% for i in range(80) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
          "limit" },
        { "{{ 'x' * 100000000000 }}", "limit" },
        { "{% set ns = namespace(l=[1]) %}{% for i in range(80) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
          "limit" },
        { "{{ 2 ** 100 }}", "overflow" },
    };
    for (size_t i = 0; i < sizeof bombs / sizeof bombs[0]; i++) {
        kvi_error err = { 0 };
        double t0 = now_s();
        char *out = render_lim(bombs[i].tmpl, "{}", NULL, &err);
        double dt = now_s() - t0;
        CHECK(!out && strstr(err.msg, bombs[i].err), "bomb %zu: want '%s', got %s", i, bombs[i].err, err.msg);
        CHECK(dt < 20.0, "bomb %zu took %.1f s", i, dt);
        free(out);
    }
    /* nesting deeper than the parser allows: an error, not a stack overflow */
    size_t deep = 100000;
    char *t = malloc(2 * deep + 16);
    strcpy(t, "{{ ");
    for (size_t i = 0; i < deep; i++) t[3 + i] = '(';
    t[3 + deep] = '1';
    for (size_t i = 0; i < deep; i++) t[4 + deep + i] = ')';
    strcpy(t + 4 + 2 * deep, " }}");
    kvi_error err = { 0 };
    char *out = render_lim(t, "{}", NULL, &err);
    CHECK(!out && strstr(err.msg, "deeper"), "deep parens: %s", err.msg);
    free(out);
    /* the same for statements and for the variables' JSON */
    strcpy(t, "");
    for (size_t i = 0; i < 2000; i++) strcat(t, "{% if 1 %}");
    out = render_lim(t, "{}", NULL, &err);
    CHECK(!out && err.code < 0, "deep ifs: %s", err.msg);
    free(out);
    for (size_t i = 0; i < deep; i++) t[i] = '[';
    t[deep] = 0;
    kvi_chat_template *tm = kvi_chat_template_parse("x", 1, &err);
    char *o2 = NULL;
    CHECK(jinja_render_vars(tm, t, deep, NULL, &o2, NULL, &err) < 0 && !o2, "deep JSON accepted");
    kvi_chat_template_free(tm);
    free(t);
}

/* Every arena size from tiny up: a render either succeeds with the right text or
 * fails with an error (the memory limit standing in for a failed malloc). */
static void test_memory_limits(void)
{
    const char *tmpl = "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ m.role %}"
                       "<{{ m.role }}>{{ m.content | trim }}{{ m | tojson }}{% endfor %}{{ ns.s }}";
    const char *vars =
        "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"assistant\", "
        "\"content\": \"yo\"}]}";
    kvi_error err = { 0 };
    char *full = render_lim(tmpl, vars, NULL, &err);
    CHECK(full != NULL, "full render: %s", err.msg);
    int ok = 0, failed = 0;
    for (size_t cap = 0; cap <= (size_t)1 << 18; cap = cap ? cap + cap / 4 + 16 : 16) {
        jlimits lim = jinja_default_limits();
        lim.max_bytes = cap;
        kvi_error e = { 0 };
        char *out = render_lim(tmpl, vars, &lim, &e);
        if (out) {
            CHECK(full && !strcmp(out, full), "cap %zu: different output", cap);
            ok++;
        } else {
            CHECK(e.code < 0 && strstr(e.msg, "memory"), "cap %zu: %s", cap, e.msg);
            failed++;
        }
        free(out);
    }
    CHECK(ok > 0 && failed > 0, "memory limits: %d ok, %d failed", ok, failed);
    free(full);
}

static void test_chat(void)
{
    const char *tmpl = "{{ bos_token }}{% for m in messages %}{{ m.role }}:"
                       "{% if m.content is string %}{{ m.content }}{% else %}{{ m.content | "
                       "map(attribute='text') | join }}{% endif %}"
                       "{% for tc in m.tool_calls %}[{{ tc.function.arguments | tojson }}|{{ "
                       "tc.function.arguments.n + 1 }}]{% endfor %};"
                       "{% endfor %}{{ add_generation_prompt }} {{ tools }} {{ enable_thinking }} {{ "
                       "eos_token is defined }}";
    const char *req =
        "{\"messages\": [{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
        "{\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": \"\", "
        "\"tool_calls\": "
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"z\\\": 1.0, "
        "\\\"n\\\": 2, \\\"s\\\": \\\"\\u00e9\\\"}\"}}]}], "
        "\"chat_template_kwargs\": {\"enable_thinking\": false}}";
    kvi_error err = { 0 };
    kvi_chat_template *t = kvi_chat_template_parse(tmpl, strlen(tmpl), &err);
    CHECK(t != NULL, "parse: %s", err.msg);
    /* no loop iterates the content (vLLM's "string" form): the parts come joined with "\n" */
    CHECK(kvi_chat_template_content_format(t) == KVI_CONTENT_STRING, "detected as the string form");
    char *out = kvi_chat_template_render(t, req, "<s>", NULL, &err);
    CHECK(out && !strncmp(out, "<s>developer:a\nb;", 17), "joined parts: %s", out ? out : err.msg);
    free(out);
    kvi_chat_template_set_content_format(t, KVI_CONTENT_OPENAI); /* the list as given */
    out = kvi_chat_template_render(t, req, "<s>", NULL, &err);
    const char *want =
        "<s>developer:ab;assistant:[{\"z\": 1.0, \"n\": 2, \"s\": \"\xc3\xa9\"}|3];True None False False";
    CHECK(out && !strcmp(out, want), "chat: got [%s] want [%s] (%s)", out ? out : "(error)", want, err.msg);
    free(out);
    out = kvi_chat_template_render(t, "{\"messages\": 3}", NULL, NULL, &err);
    CHECK(!out && strstr(err.msg, "messages"), "bad messages accepted: %s", err.msg);
    free(out);
    out = kvi_chat_template_render(t, "{not json", NULL, NULL, &err);
    CHECK(!out && strstr(err.msg, "JSON"), "bad JSON accepted: %s", err.msg);
    free(out);
    kvi_chat_template_free(t);
}

static void write_text(const char *path, const char *text)
{
    CHECK(write_file(path, text, strlen(text)) == 0, "write %s", path);
}

static void test_cli(void)
{
    char args[4096], *out = NULL, *errout = NULL;
    const char *req = tmp_path("jinja_req.json"), *tf = tmp_path("jinja_t.jinja");
    write_text(req, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi \\u00e9\"}], "
                    "\"add_generation_prompt\": false}");
    write_text(tf, "{{ bos_token }}|{% for m in messages %}{{ m.role }}={{ m.content }}{% endfor %}|{{ "
                   "add_generation_prompt }}|{{ eos_token }}\n");
    /* a GGUF: bos/eos from its vocabulary; no template of its own */
    snprintf(args, sizeof args, "template -m '%s' --chat-template-file '%s' -f '%s'",
             shared_path("models/stories260K.gguf"), tf, req);
    int rc = run_kvinfer(args, &out, &errout);
    CHECK(rc == 0 && out && !strcmp(out, "<s>|user=Hi \xc3\xa9|False|</s>"), "gguf: rc %d [%s] %s", rc,
          out ? out : "", errout ? errout : "");
    free(out), free(errout), out = errout = NULL;
    snprintf(args, sizeof args, "template -m '%s' -f '%s'", shared_path("models/stories260K.gguf"), req);
    rc = run_kvinfer(args, &out, &errout);
    CHECK(rc == 1 && errout && strstr(errout, "no chat template"), "gguf without template: rc %d", rc);
    free(out), free(errout), out = errout = NULL;
    /* a Hugging Face folder: template and tokens from tokenizer_config.json; eos named as {"content"} */
    const char *dir = tmp_path("jinja_hf");
    mkdir(dir, 0755);
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    write_text(cfg,
               "{\"bos_token\": \"<|begin|>\", \"eos_token\": {\"content\": \"<|end|>\"}, \"chat_template\": "
               "\"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{% if messages[0].content == 'boom' "
               "%}{{ raise_exception('no boom') }}{% endif %}\"}");
    char tj[2048];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    write_text(tj, "{}");
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "template -m '%s' -f '%s'", k ? tj : dir, req);
        rc = run_kvinfer(args, &out, &errout);
        CHECK(rc == 0 && out && !strcmp(out, "<|begin|>Hi \xc3\xa9<|end|>"), "hf %d: rc %d [%s] %s", k, rc,
              out ? out : "", errout ? errout : "");
        free(out), free(errout), out = errout = NULL;
    }
    /* a template error: exit 1, the message on stderr, nothing on stdout */
    write_text(req, "{\"messages\": [{\"role\": \"user\", \"content\": \"boom\"}]}");
    snprintf(args, sizeof args, "template -m '%s' -f '%s'", dir, req);
    rc = run_kvinfer(args, &out, &errout);
    CHECK(rc == 1 && errout && strstr(errout, "no boom") && (!out || !out[0]), "raise: rc %d %s", rc,
          errout ? errout : "");
    free(out), free(errout), out = errout = NULL;
    rc = run_kvinfer("template --help", &out, &errout);
    CHECK(rc == 0 && out && strstr(out, "--chat-template-file"), "help: rc %d", rc);
    free(out), free(errout);
}

/* Untrusted input: every real template cut short at many points and with bytes
 * changed at random parses or fails, renders or fails, and never crashes (run
 * under the sanitizers); the failures carry a message. */
static void test_mutations(void)
{
    static const char *const names[] = { "Qwen3-Coder.jinja", "openai-gpt-oss-120b.jinja",
                                         "google-gemma-4-31B-it-interleaved.jinja", "Kimi-K2-Instruct.jinja",
                                         "Apertus-8B-Instruct.jinja" };
    const char *req =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
        "\"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": [{\"type\": "
        "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]}, "
        "{\"role\": \"tool\", \"content\": \"r\"}], \"tools\": [{\"type\": \"function\", \"function\": "
        "{\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}]}";
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int n_ok = 0, n_err = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[1024];
        snprintf(path, sizeof path, "templates/%s", names[k]);
        size_t len = 0;
        char *text = read_file(shared_path(path), &len);
        if (!text) continue;
        char *buf = malloc(len + 1);
        for (int m = 0; m < 120; m++) {
            memcpy(buf, text, len + 1);
            size_t n = len;
            if (m < 60) {
                n = (size_t)(trand_u64(&rng) % (len + 1)); /* a prefix */
            } else {
                static const char pokes[] = "{}%#-+()[]'\"|.x \n";
                for (int j = 0; j < 4; j++)
                    buf[trand_u64(&rng) % len] = pokes[trand_u64(&rng) % (sizeof pokes - 1)];
            }
            kvi_error err = { 0 };
            kvi_chat_template *t = kvi_chat_template_parse(buf, n, &err);
            char *out = t ? kvi_chat_template_render(t, req, "<s>", "</s>", &err) : NULL;
            if (out)
                n_ok++;
            else {
                n_err++;
                CHECK(err.code < 0 && err.msg[0], "%s mutant %d: an error without a message", names[k], m);
            }
            free(out);
            kvi_chat_template_free(t);
        }
        free(buf);
        free(text);
    }
    printf("mutated templates: %d rendered, %d errors\n", n_ok, n_err);
    CHECK(n_ok + n_err > 0, "no templates under ../shared/templates");
}

int main(void)
{
    test_mutations();
    test_cases();
    test_limits();
    test_memory_limits();
    test_chat();
    test_cli();
    return test_main_end();
}
