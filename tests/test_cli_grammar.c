/*
 * test_cli_grammar.c — `kvinfer run` with --grammar, --grammar-file,
 * --json-schema (inline and file) and --json-schema-file on stories260K:
 *
 *  - greedy and sampled outputs are sentences of the grammar (the generated text
 *    from --json checked by a matcher) and end with finish_reason "stop";
 *  - a JSON Schema's output parses and has the required keys and types;
 *  - errors exit 1 with one clear line: a grammar that does not parse (line and
 *    column), an unsupported schema keyword (named), two constraints at once, a
 *    grammar with speculative decoding, a missing file; --help documents the flags.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static cJSON *run_json(const char *flags, int *status)
{
    char args[2048];
    snprintf(args, sizeof args, "run -m %s -t 2 -p 'Once upon a time' --json %s",
             shared_path("models/stories260K.gguf"), flags);
    char *out = NULL, *err = NULL;
    *status = run_kvinfer(args, &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    if (!j) fprintf(stderr, "stdout: %s\nstderr: %s\n", out ? out : "", err ? err : "");
    free(out);
    free(err);
    return j;
}

static void run_fails(const char *flags, const char *want)
{
    char args[2048];
    snprintf(args, sizeof args, "run -m %s -t 2 -p 'Once' -n 8 %s", shared_path("models/stories260K.gguf"),
             flags);
    char *out = NULL, *err = NULL;
    int st = run_kvinfer(args, &out, &err);
    CHECK(st == 1, "exit %d for %s", st, flags);
    CHECK(err && strstr(err, want), "stderr '%s' lacks '%s'", err ? err : "", want);
    free(out);
    free(err);
}

static const char *text_of(const cJSON *j)
{
    const cJSON *t = cJSON_GetObjectItem(j, "text");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static const char *finish_of(const cJSON *j)
{
    const cJSON *t = cJSON_GetObjectItem(j, "finish_reason");
    return cJSON_IsString(t) ? t->valuestring : "";
}

int main(void)
{
    kvi_model *m = load_stories260k(NULL);
    kvi_grammar_vocab *v = m ? kvi_grammar_vocab_create(m, NULL) : NULL;
    const char *gbnf = "root ::= \" \" [A-Z] [a-z]{1,8} (\" \" [a-z]{1,8}){2,6} \".\"";
    const char *gpath = tmp_path("cli_grammar.gbnf");
    write_file(gpath, gbnf, strlen(gbnf));
    kvi_grammar *g = kvi_grammar_parse(gbnf, strlen(gbnf), NULL);
    for (int k = 0; k < 3 && v && g; k++) {
        char flags[512];
        snprintf(flags, sizeof flags, "-n 80 --temp %s --seed %d --grammar-file %s", k ? "1.0" : "0", k,
                 gpath);
        int st = 0;
        cJSON *j = run_json(flags, &st);
        const char *t = text_of(j);
        kvi_grammar_matcher *mt = kvi_grammar_matcher_create(g, v, NULL);
        CHECK(st == 0 && j, "exit %d", st);
        CHECK(mt && kvi_grammar_matcher_accept_bytes(mt, t, strlen(t)) == 0 &&
                  kvi_grammar_matcher_can_end(mt),
              "run %d: '%s' is not a sentence of the grammar", k, t);
        CHECK(!strcmp(finish_of(j), "stop"), "finish '%s'", finish_of(j));
        if (k == 0) printf("--grammar-file, greedy: '%s'\n", t);
        kvi_grammar_matcher_free(mt);
        cJSON_Delete(j);
    }
    {
        int st = 0;
        cJSON *j = run_json("-n 40 --temp 0 --grammar 'root ::= \" yes\" | \" no\"'", &st);
        CHECK(st == 0 && (!strcmp(text_of(j), " yes") || !strcmp(text_of(j), " no")), "--grammar text '%s'",
              text_of(j));
        cJSON_Delete(j);
    }
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"s\":{\"type\":"
        "\"string\",\"maxLength\":8}},\"required\":[\"n\",\"s\"],\"additionalProperties\":false}";
    const char *spath = tmp_path("cli_schema.json");
    write_file(spath, schema, strlen(schema));
    for (int k = 0; k < 3; k++) {
        char flags[1024];
        if (k == 0) snprintf(flags, sizeof flags, "-n 200 --temp 0 --json-schema %s", spath);
        if (k == 1) snprintf(flags, sizeof flags, "-n 200 --temp 0.8 --seed 5 --json-schema-file %s", spath);
        if (k == 2) snprintf(flags, sizeof flags, "-n 200 --temp 0.8 --seed 6 --json-schema '%s'", schema);
        int st = 0;
        cJSON *j = run_json(flags, &st);
        cJSON *o = cJSON_Parse(text_of(j));
        CHECK(st == 0 && !strcmp(finish_of(j), "stop"), "schema run %d: exit %d finish %s", k, st,
              finish_of(j));
        CHECK(cJSON_IsObject(o) && cJSON_IsNumber(cJSON_GetObjectItem(o, "n")) &&
                  cJSON_IsString(cJSON_GetObjectItem(o, "s")) &&
                  strlen(cJSON_GetObjectItem(o, "s")->valuestring) <= 8 && cJSON_GetArraySize(o) == 2,
              "schema run %d: '%s'", k, text_of(j));
        cJSON_Delete(o);
        cJSON_Delete(j);
    }
    run_fails("--grammar 'root ::= ('", "grammar: line 1, column 11: expected ')'");
    run_fails("--json-schema '{\"type\":\"string\",\"pattern\":\"x\"}'",
              "keyword 'pattern' is not supported");
    run_fails("--grammar 'root ::= \"a\"' --json-schema '{}'", "give one of --grammar");
    run_fails("--grammar 'root ::= \"a\"' --spec ngram", "cannot be combined with speculative decoding");
    run_fails("--grammar-file /nonexistent/x.gbnf", "cannot read '/nonexistent/x.gbnf'");
    char *out = NULL;
    CHECK(run_kvinfer("run --help", &out, NULL) == 0 && out && strstr(out, "--grammar-file FILE") &&
              strstr(out, "--json-schema S"),
          "--help documents the flags");
    free(out);
    kvi_grammar_free(g);
    kvi_grammar_vocab_free(v);
    kvi_model_free(m);
    return test_main_end();
}
