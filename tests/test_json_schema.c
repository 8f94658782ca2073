/*
 * test_json_schema.c — JSON Schema to GBNF (src/sampling/json_schema.c):
 *
 *  - every keyword it cannot enforce is an error naming it; bad schemas too;
 *  - the grammar of each schema accepts valid JSON texts and rejects invalid ones
 *    (wrong types, missing required, extra properties, counts, enum, formats);
 *  - constrained generation on stories260K (greedy and random sampling through
 *    the scheduler) always gives text that parses (cJSON) and satisfies the
 *    schema, judged by a small validator written here and, when Debian's
 *    python3-jsonschema is importable, by it too (skipped with a message if not).
 */
#include "testutil.h"

#include "sched_util.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check_error(const char *schema, const char *want)
{
    kvi_error err = { 0 };
    char *g = kvi_json_schema_to_gbnf(schema, strlen(schema), &err);
    CHECK(g == NULL, "schema %s should be refused, got\n%s", schema, g ? g : "");
    CHECK(err.code == KVI_E_INVALID && strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
    free(g);
}

static kvi_grammar *schema_grammar(const char *schema)
{
    kvi_error err = { 0 };
    char *text = kvi_json_schema_to_gbnf(schema, schema ? strlen(schema) : 0, &err);
    CHECK(text != NULL, "schema refused: %s: %s", err.msg, schema ? schema : "(json_object)");
    if (!text) return NULL;
    kvi_grammar *g = kvi_grammar_parse(text, strlen(text), &err);
    CHECK(g != NULL, "its grammar does not parse: %s\n%s", err.msg, text);
    free(text);
    return g;
}

static void test_errors(void)
{
    check_error("{\"type\":\"string\",\"pattern\":\"a+\"}", "keyword 'pattern' is not supported");
    check_error("{\"type\":\"array\",\"uniqueItems\":true}", "keyword 'uniqueItems'");
    check_error("{\"type\":\"integer\",\"minimum\":0}", "keyword 'minimum'");
    check_error("{\"type\":\"object\",\"patternProperties\":{}}", "keyword 'patternProperties'");
    check_error("{\"not\":{}}", "keyword 'not'");
    check_error("{\"type\":\"foo\"}", "type 'foo'");
    check_error("{\"type\":\"string\",\"format\":\"ipv6\"}", "format 'ipv6'");
    check_error("{\"$ref\":\"http://example.com/s.json\"}",
                "$ref 'http://example.com/s.json' is not supported");
    check_error("{\"$ref\":\"#/$defs/missing\"}", "points nowhere");
    check_error("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
                "required property 'b'");
    check_error("{\"type\":\"array\",\"maxItems\":5000}", "maxItems");
    check_error("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems > maxItems");
    check_error("{\"type\":\"string\",\"minLength\":-1}", "minLength");
    /* counts beyond any integer type (a double converted to int64_t out of its
     * range is undefined behaviour: the fuzzer found 1e300 here) */
    check_error("{\"type\":\"array\",\"maxItems\":1e300}", "'maxItems' above");
    check_error("{\"type\":\"string\",\"minLength\":-1e300}", "'minLength' must be a non-negative integer");
    check_error("{\"type\":\"string\",\"maxLength\":2.5}", "'maxLength' must be a non-negative integer");
    check_error("{\"enum\":[1e300,0.5],\"type\":\"integer\"}", "not of type 'integer'");
    check_error("{\"allOf\":[{},{}]}", "allOf");
    check_error("{\"enum\":[1,\"a\"],\"type\":\"string\"}", "not of type 'string'");
    check_error(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"contentEncoding\":\"x\"}}}",
        "keyword 'contentEncoding'");
    check_error("{\"type\":", "not valid JSON");
    check_error("false", "allows no value");
    { /* a schema that is only a reference to itself: its grammar is refused */
        kvi_error err = { 0 };
        char *t = kvi_json_schema_to_gbnf("{\"$ref\":\"#\"}", 12, &err);
        kvi_grammar *g = t ? kvi_grammar_parse(t, strlen(t), &err) : NULL;
        CHECK(g == NULL && strstr(err.msg, "left-recursive"), "self reference: '%s'", err.msg);
        kvi_grammar_free(g);
        free(t);
    }
    /* deep nesting is bounded */
    char deep[2000];
    size_t n = 0;
    for (int i = 0; i < 100; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"items\":");
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{}");
    for (int i = 0; i < 100; i++) deep[n++] = '}';
    deep[n] = 0;
    check_error(deep, "nested deeper");
}

typedef struct case_ {
    const char *schema;
    const char *yes[8];
    const char *no[10];
} case_;

static const case_ cases[] = {
    { "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{"
      "\"type\":"
      "\"integer\"},\"pet\":{\"enum\":[\"cat\",\"dog\",null]},\"tags\":{\"type\":\"array\",\"items\":{"
      "\"type\":"
      "\"string\",\"maxLength\":6},\"maxItems\":3}},\"required\":[\"name\",\"age\"],\"additionalProperties\":"
      "false}",
      { "{\"name\":\"Tim\",\"age\":3}", "{ \"name\" : \"\" , \"age\" : -12, \"pet\": null }",
        "{\"name\":\"a\",\"age\":0,\"tags\":[\"x\",\"yy\"]}",
        "{\"name\":\"\\u00e9\\n\",\"age\":1,\"pet\":\"dog\",\"tags\":[]}", NULL },
      { "{\"age\":3}", "{\"name\":\"Tim\"}", "{\"name\":\"Tim\",\"age\":3.5}",
        "{\"name\":\"Tim\",\"age\":3,\"x\":1}", "{\"name\":\"Tim\",\"age\":3,\"pet\":\"cow\"}",
        "{\"name\":\"Timothy Tomkins\",\"age\":3}",
        "{\"name\":\"a\",\"age\":1,\"tags\":[\"a\",\"b\",\"c\",\"d\"]}", "{\"name\":\"a\",\"age\":01}", "[]",
        NULL } },
    { "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{"
      "\"type\":"
      "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\"],"
      "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
      { "{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}", NULL },
      { "{\"v\":1,\"kids\":[{}]}", "{\"v\":1,\"kids\":[{\"v\":1},{\"v\":2},{\"v\":3}]}", NULL } },
    { "{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"object\",\"properties\":{\"ok\":"
      "{\"const\":true}},\"required\":[\"ok\"]}]}",
      { "\"2024-02-29\"", "{\"ok\":true}", NULL },
      { "\"2024-13-01\"", "{\"ok\":false}", "\"hello\"", NULL } },
    { "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"type\":\"number\"}],\"items\":false}",
      { "[true,1.5e3]", "[ false , -0.25 ]", NULL },
      { "[true]", "[true,1,2]", "[1,true]", NULL } },
    { "{\"type\":[\"string\",\"null\"],\"minLength\":2,\"maxLength\":3}",
      { "\"ab\"", "\"abc\"", "null", NULL },
      { "\"a\"", "\"abcd\"", "1", NULL } },
    { "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"uuid\"},\"minItems\":1,\"maxItems\":"
      "2}",
      { "[\"123e4567-e89b-12d3-a456-426614174000\"]", NULL },
      { "[]", "[\"123e4567\"]", NULL } },
    { "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}",
      { "{}", "{\"a\":true,\"b\":false}", NULL },
      { "{\"a\":1}", NULL } },
    { NULL, /* json_object */
      { "{}", "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}", NULL },
      { "[]", "1", "{\"a\"}", NULL } },
};
#define N_CASES (int)(sizeof cases / sizeof *cases)

static void test_grammars(void)
{
    for (int c = 0; c < N_CASES; c++) {
        kvi_grammar *g = schema_grammar(cases[c].schema);
        if (!g) continue;
        for (int i = 0; cases[c].yes[i]; i++)
            CHECK(grammar_match_exact(g, cases[c].yes[i]), "case %d: %s should be accepted", c, cases[c].yes[i]);
        for (int i = 0; cases[c].no[i]; i++)
            CHECK(!grammar_match_exact(g, cases[c].no[i]), "case %d: %s should be refused", c, cases[c].no[i]);
        kvi_grammar_free(g);
    }
}

/* ---- an independent validator (the keywords the cases use) ---- */

static size_t utf8_len(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool valid(const cJSON *root, const cJSON *s, const cJSON *v, int depth);

static bool of_type(const cJSON *v, const char *t)
{
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble;
    return false;
}

static bool valid_format(const char *f, const char *s)
{
    if (!strcmp(f, "date")) {
        int y, m, d;
        return strlen(s) == 10 && sscanf(s, "%4d-%2d-%2d", &y, &m, &d) == 3 && m >= 1 && m <= 12 && d >= 1 &&
               d <= 31;
    }
    if (!strcmp(f, "uuid"))
        return strlen(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-';
    return true;
}

static bool valid(const cJSON *root, const cJSON *s, const cJSON *v, int depth)
{
    if (depth > 200) return false;
    if (cJSON_IsTrue(s)) return true;
    const cJSON *k;
    if ((k = cJSON_GetObjectItem(s, "$ref"))) {
        const char *r = k->valuestring;
        const cJSON *t =
            !strcmp(r, "#") ? root : cJSON_GetObjectItem(cJSON_GetObjectItem(root, "$defs"), r + 8);
        return t && valid(root, t, v, depth + 1);
    }
    if ((k = cJSON_GetObjectItem(s, "type"))) {
        bool ok = false;
        if (cJSON_IsString(k)) ok = of_type(v, k->valuestring);
        for (const cJSON *t = cJSON_IsArray(k) ? k->child : NULL; t; t = t->next)
            ok |= of_type(v, t->valuestring);
        if (!ok) return false;
    }
    if ((k = cJSON_GetObjectItem(s, "const")) && !cJSON_Compare(k, v, true)) return false;
    if ((k = cJSON_GetObjectItem(s, "enum"))) {
        bool ok = false;
        for (const cJSON *e = k->child; e; e = e->next) ok |= cJSON_Compare(e, v, true);
        if (!ok) return false;
    }
    if ((k = cJSON_GetObjectItem(s, "anyOf"))) {
        bool ok = false;
        for (const cJSON *e = k->child; e; e = e->next) ok |= valid(root, e, v, depth + 1);
        if (!ok) return false;
    }
    if (cJSON_IsString(v)) {
        size_t n = utf8_len(v->valuestring);
        if ((k = cJSON_GetObjectItem(s, "minLength")) && n < (size_t)k->valueint) return false;
        if ((k = cJSON_GetObjectItem(s, "maxLength")) && n > (size_t)k->valueint) return false;
        if ((k = cJSON_GetObjectItem(s, "format")) && !valid_format(k->valuestring, v->valuestring))
            return false;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItem(s, "properties"),
                    *add = cJSON_GetObjectItem(s, "additionalProperties");
        for (const cJSON *r = cJSON_GetObjectItem(s, "required") ? cJSON_GetObjectItem(s, "required")->child
                                                                 : NULL;
             r; r = r->next)
            if (!cJSON_GetObjectItem(v, r->valuestring)) return false;
        for (const cJSON *m = v->child; m; m = m->next) {
            const cJSON *ps = props ? cJSON_GetObjectItem(props, m->string) : NULL;
            if (ps) {
                if (!valid(root, ps, m, depth + 1)) return false;
            } else if (add && cJSON_IsFalse(add)) {
                return false;
            } else if (add && cJSON_IsObject(add) && !valid(root, add, m, depth + 1)) {
                return false;
            }
        }
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if ((k = cJSON_GetObjectItem(s, "minItems")) && n < k->valueint) return false;
        if ((k = cJSON_GetObjectItem(s, "maxItems")) && n > k->valueint) return false;
        const cJSON *pre = cJSON_GetObjectItem(s, "prefixItems"), *items = cJSON_GetObjectItem(s, "items");
        int np = pre ? cJSON_GetArraySize(pre) : 0, i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            if (i < np) {
                if (!valid(root, cJSON_GetArrayItem(pre, i), e, depth + 1)) return false;
            } else if (items && cJSON_IsFalse(items)) {
                return false;
            } else if (items && cJSON_IsObject(items) && !valid(root, items, e, depth + 1)) {
                return false;
            }
        }
    }
    return true;
}

/* ---- generation ---- */

typedef struct gen {
    char text[8192];
    size_t len;
    const kvi_model *m;
    bool done;
    kvi_finish finish;
    char err[600];
} gen;

static bool gen_token(void *user, int32_t tok)
{
    gen *g = user;
    char piece[256];
    int32_t n = kvi_token_to_piece(g->m, tok, piece, sizeof piece, false);
    if (n > 0 && g->len + (size_t)n < sizeof g->text) {
        memcpy(g->text + g->len, piece, (size_t)n);
        g->len += (size_t)n;
    }
    return true;
}

static void gen_done(void *user, kvi_finish f, const kvi_usage *u, const kvi_error *err)
{
    gen *g = user;
    g->done = true;
    g->finish = f;
    if (err) snprintf(g->err, sizeof g->err, "%s", err->msg);
}

static bool have_py_jsonschema(void) { return system("python3 -c 'import jsonschema' >/dev/null 2>&1") == 0; }

/* Judges every (schema, instance) pair of the JSON array file at `path` with one
 * python3 run (its start costs most); ok[i] = pair i is valid. */
static bool py_validate_all(const char *path, int n, bool *ok)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys,jsonschema\n"
             "for s, i in json.load(open(sys.argv[1])):\n"
             "    v = jsonschema.Draft202012Validator(s, format_checker=jsonschema.FormatChecker())\n"
             "    print(1 if v.is_valid(i) else 0)' '%s'",
             path);
    FILE *f = popen(cmd, "r");
    if (!f) return false;
    int k = 0, x;
    while (k < n && fscanf(f, "%d", &x) == 1) ok[k++] = x == 1;
    return pclose(f) == 0 && k == n;
}

static void test_generation(kvi_model *m)
{
    kvi_engine *e = make_engine(m, 8, 0);
    kvi_sched *s = e ? make_sched(e, 8, 128, 0) : NULL;
    if (!s) {
        kvi_engine_free(e);
        return;
    }
    const bool py = have_py_jsonschema();
    if (!py)
        printf("python3 jsonschema not importable: only the validator written here judges the outputs\n");
    enum { PER = 4 };
    kvi_grammar *gs[N_CASES];
    static gen res[N_CASES * PER];
    memset(res, 0, sizeof res);
    int32_t prompt[16];
    int32_t np = kvi_tokenize(m, "Once upon a time", 16, true, false, prompt, 16);
    for (int c = 0; c < N_CASES; c++) {
        gs[c] = schema_grammar(cases[c].schema);
        for (int k = 0; k < PER && gs[c]; k++) {
            gen *r = &res[c * PER + k];
            r->m = m;
            kvi_request rq = { 0 };
            rq.prompt = prompt;
            rq.n_prompt = np;
            rq.sampling = sampler_params(k == 0 ? 0.0f : 0.9f, 40, 1.0f, 0.0f, 77 + (uint64_t)(c * PER + k));
            rq.max_tokens = 400;
            rq.on_token = gen_token;
            rq.on_done = gen_done;
            rq.user = r;
            rq.grammar = gs[c];
            kvi_error err = { 0 };
            uint64_t id;
            CHECK(kvi_sched_submit(s, &rq, &id, &err) == 0, "submit: %s", err.msg);
        }
    }
    run_until_done(s, 20000);
    int n_complete = 0, n_py = 0;
    cJSON *py_pairs = cJSON_CreateArray();
    int py_who[N_CASES * PER];
    for (int c = 0; c < N_CASES; c++) {
        const char *schema = cases[c].schema ? cases[c].schema : "{\"type\":\"object\"}";
        cJSON *sch = cJSON_Parse(schema);
        for (int k = 0; k < PER && gs[c]; k++) {
            gen *r = &res[c * PER + k];
            CHECK(r->done, "case %d/%d finished", c, k);
            r->text[r->len] = 0;
            if (r->finish != KVI_FINISH_STOP) {
                CHECK(r->finish == KVI_FINISH_LENGTH, "case %d/%d: finish %d (%s)", c, k, r->finish, r->err);
                continue;
            }
            n_complete++;
            cJSON *v = cJSON_Parse(r->text);
            CHECK(v != NULL, "case %d/%d: output is not JSON: %s", c, k, r->text);
            CHECK(v && valid(sch, sch, v, 0), "case %d/%d: output does not satisfy the schema: %s", c, k,
                  r->text);
            if (py && v) {
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_Parse(schema));
                cJSON_AddItemToArray(pair, cJSON_Duplicate(v, true));
                cJSON_AddItemToArray(py_pairs, pair);
                py_who[n_py++] = c * PER + k;
            }
            if (k <= 1) printf("case %d %s: %s\n", c, k == 0 ? "greedy" : "sampled", r->text);
            cJSON_Delete(v);
        }
        cJSON_Delete(sch);
        kvi_grammar_free(gs[c]);
    }
    if (n_py > 0) {
        char *txt = cJSON_PrintUnformatted(py_pairs);
        const char *path = tmp_path("js_pairs.json");
        write_file(path, txt, strlen(txt));
        free(txt);
        bool ok[N_CASES * PER];
        CHECK(py_validate_all(path, n_py, ok), "python jsonschema did not run");
        for (int i = 0; i < n_py; i++)
            CHECK(ok[i], "case %d/%d: python jsonschema refuses %s", py_who[i] / PER, py_who[i] % PER,
                  res[py_who[i]].text);
    }
    cJSON_Delete(py_pairs);
    CHECK(n_complete >= N_CASES * PER * 3 / 4, "only %d of %d outputs completed", n_complete, N_CASES * PER);
    printf("%d of %d outputs complete and valid (%d also checked by python jsonschema)\n", n_complete,
           N_CASES * PER, n_py);
    kvi_sched_free(s);
    kvi_engine_free(e);
}

int main(void)
{
    test_errors();
    test_grammars();
    kvi_model *m = load_stories260k(NULL);
    if (m) {
        test_generation(m);
        kvi_model_free(m);
    }
    return test_main_end();
}
