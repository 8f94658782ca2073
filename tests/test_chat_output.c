/*
 * test_chat_output.c — the streaming parser of generated assistant messages
 * (src/template/chat_output.c) and the format detection it relies on
 * (src/template/tool_format.c).
 *
 * 1. Round trips: each tool-calling template in ../shared/templates renders an
 *    assistant turn with one and with two tool calls (nested objects, unicode,
 *    quotes, braces in strings, 1.5); the turn's text (the rendering with the
 *    message minus the rendering without it, turn header and end marker cut
 *    off) parses back to the same names and compact arguments and no content.
 *    Templates that cannot render their own calls (R1-Distill concatenates the
 *    arguments as text, Granite 3.3 renders none) get the text their template
 *    or system prompt spells out, written here.
 * 2. Hand-written outputs per format: content around calls, content only,
 *    malformed calls that become content verbatim, reasoning splits.
 * 3. Every parse runs five ways (one piece, byte by byte, three random
 *    chunkings) and must give the same content, reasoning and calls, with
 *    content and reasoning growing append-only after each feed; also on random
 *    texts strung from every format's markers and call pieces, under every
 *    format, and on long calls (past the size where a waiting call is parsed
 *    again on every feed).
 * 4. Failed allocations: with the k-th allocation of every feed and finish
 *    failing (the test wraps malloc, realloc and calloc at link time), each
 *    failed call returns KVI_E_NOMEM and changes nothing, so feeding the same
 *    bytes again ends with the result of a run without failures.
 */
#include "kvinfer.h"
#include "testutil.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CALLS 8

typedef struct result {
    char *content, *reasoning;
    int n_calls;
    char *name[MAX_CALLS], *args[MAX_CALLS];
} result;

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void result_free(result *r)
{
    free(r->content);
    free(r->reasoning);
    for (int i = 0; i < r->n_calls && i < MAX_CALLS; i++) {
        free(r->name[i]);
        free(r->args[i]);
    }
    memset(r, 0, sizeof *r);
}

/* What o holds now (malloc'd copies). */
static result collect(const kvi_chat_output *o)
{
    result r = { 0 };
    size_t nc, nr;
    const char *c = kvi_chat_output_content(o, &nc), *rs = kvi_chat_output_reasoning(o, &nr);
    r.content = dup_n(c, nc);
    r.reasoning = dup_n(rs, nr);
    r.n_calls = kvi_chat_output_n_calls(o);
    for (int i = 0; i < r.n_calls && i < MAX_CALLS; i++) {
        const char *nm, *a;
        CHECK(kvi_chat_output_call(o, i, &nm, &a) == 0, "call %d", i);
        r.name[i] = strdup(nm);
        r.args[i] = strdup(a);
    }
    CHECK(kvi_chat_output_call(o, r.n_calls, NULL, NULL) == KVI_E_INVALID, "call out of range");
    return r;
}

/* Parses text fed in chunks: mode 0 one piece, 1 byte by byte, 2 random sizes
 * 1..9 (seeded). CHECKs append-only growth after every feed. */
static result parse_chunks(kvi_chat_output_params p, const char *text, size_t len, int mode, uint64_t seed)
{
    result r = { 0 };
    kvi_chat_output *o = kvi_chat_output_create(&p);
    CHECK(o != NULL, "create");
    if (!o) return r;
    char *prev_c = dup_n("", 0), *prev_r = dup_n("", 0);
    size_t nprev_c = 0, nprev_r = 0;
    bool grows = true;
    for (size_t at = 0; at < len || at == 0;) {
        size_t k = mode == 0 ? len : mode == 1 ? 1 : 1 + trand_u64(&seed) % 9;
        if (k > len - at) k = len - at;
        CHECK(kvi_chat_output_feed(o, text + at, k) == 0, "feed");
        at += k;
        for (int last = 0; last < 2; last++) {
            if (at < len && last) break;
            if (last) CHECK(kvi_chat_output_finish(o) == 0, "finish");
            size_t nc, nr;
            const char *c = kvi_chat_output_content(o, &nc), *rs = kvi_chat_output_reasoning(o, &nr);
            grows &=
                nc >= nprev_c && !memcmp(c, prev_c, nprev_c) && nr >= nprev_r && !memcmp(rs, prev_r, nprev_r);
            free(prev_c);
            free(prev_r);
            prev_c = dup_n(c, nc);
            prev_r = dup_n(rs, nr);
            nprev_c = nc;
            nprev_r = nr;
        }
        if (len == 0) break;
    }
    CHECK(grows, "content and reasoning append-only (mode %d) for: %s", mode, text);
    free(prev_c);
    free(prev_r);
    r = collect(o);
    kvi_chat_output_free(o);
    return r;
}

static bool same(const result *a, const result *b)
{
    if (strcmp(a->content, b->content) || strcmp(a->reasoning, b->reasoning) || a->n_calls != b->n_calls)
        return false;
    for (int i = 0; i < a->n_calls && i < MAX_CALLS; i++)
        if (strcmp(a->name[i], b->name[i]) || strcmp(a->args[i], b->args[i])) return false;
    return true;
}

static uint64_t g_seed = 0x5eed;

/* The one-piece result, CHECKed equal to byte-by-byte and three random splits. */
static result parse(kvi_chat_output_params p, const char *text)
{
    size_t len = strlen(text);
    result r = parse_chunks(p, text, len, 0, 0);
    for (int k = 0; k < 4; k++) {
        result s = parse_chunks(p, text, len, k == 0 ? 1 : 2, g_seed++);
        CHECK(same(&r, &s),
              "split %d differs for [%s]: content [%s] vs [%s], reasoning [%s] vs [%s], %d vs %d calls", k,
              text, r.content, s.content, r.reasoning, s.reasoning, r.n_calls, s.n_calls);
        result_free(&s);
    }
    return r;
}

static kvi_chat_output_params params(kvi_tool_format f, bool reasoning, bool in_reasoning)
{
    kvi_chat_output_params p = { f, reasoning, in_reasoning };
    return p;
}

/* Checks a parse: content, reasoning, and calls given as name, args pairs (NULL-terminated). */
static void expect(kvi_chat_output_params p, const char *text, const char *content, const char *reasoning,
                   ...)
{
    result r = parse(p, text);
    CHECK(!strcmp(r.content, content), "[%s] (%s): content [%s], want [%s]", text,
          kvi_tool_format_name(p.tools), r.content, content);
    CHECK(!strcmp(r.reasoning, reasoning), "[%s]: reasoning [%s], want [%s]", text, r.reasoning, reasoning);
    va_list ap;
    va_start(ap, reasoning);
    int i = 0;
    for (const char *nm; (nm = va_arg(ap, const char *)); i++) {
        const char *args = va_arg(ap, const char *);
        CHECK(i < r.n_calls && !strcmp(r.name[i], nm) && !strcmp(r.args[i], args),
              "[%s] (%s): call %d: %s %s, want %s %s", text, kvi_tool_format_name(p.tools), i,
              i < r.n_calls ? r.name[i] : "-", i < r.n_calls ? r.args[i] : "-", nm, args);
    }
    va_end(ap);
    CHECK(r.n_calls == i, "[%s] (%s): %d calls, want %d", text, kvi_tool_format_name(p.tools), r.n_calls, i);
    result_free(&r);
}

/* ---- 1. round trips through the templates ---- */

static const char *const ARGS1_IN = "{\"city\": \"Paris \\\"\xc3\xa9\\\" {x} \xe2\x98\x80\", \"days\": 3, "
                                    "\"o\": {\"a\": [1, 1.5], \"b\": {\"c\": null}}, \"ok\": true}";
static const char *const ARGS1 =
    "{\"city\":\"Paris \\\"\xc3\xa9\\\" {x} "
    "\xe2\x98\x80\",\"days\":3,\"o\":{\"a\":[1,1.5],\"b\":{\"c\":null}},\"ok\":true}";
static const char *const ARGS2_IN = "{\"tz\": \"CET\"}";
static const char *const ARGS2 = "{\"tz\":\"CET\"}";

typedef struct rt_case {
    const char *file;
    kvi_tool_format f;
    int max_calls;     /* the template renders at most this many calls per message */
    const char *start; /* the turn's header, cut off when the turn starts with it */
    const char *end;   /* the turn's end marker: the turn is cut there */
    bool reasoning, in_reasoning;
    const char *hand[2]; /* the turn's text for 1 and 2 calls, written here (the template cannot render it) */
} rt_case;

#define RT(file_, f_, max_, start_, end_) \
    .file = file_, .f = f_, .max_calls = max_, .start = start_, .end = end_

static const rt_case rt_cases[] = {
    { RT("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", KVI_TOOLS_HERMES, 2, "<|im_start|>assistant\n",
         "<|im_end|>") },
    { RT("Qwen-Qwen2.5-7B-Instruct", KVI_TOOLS_HERMES, 2, "<|im_start|>assistant\n", "<|im_end|>") },
    { RT("ibm-granite-granite-4.1", KVI_TOOLS_HERMES, 2, "<|start_of_role|>assistant<|end_of_role|>",
         "<|end_of_text|>") },
    { RT("Qwen3-Coder", KVI_TOOLS_QWEN3_CODER, 2, "<|im_start|>assistant\n", "<|im_end|>") },
    { RT("meta-llama-Llama-3.2-3B-Instruct", KVI_TOOLS_LLAMA3, 1,
         "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>") },
    { RT("mistralai-Mistral-Nemo-Instruct-2407", KVI_TOOLS_MISTRAL, 2, NULL, "</s>") },
    { RT("Mistral-Small-3.2-24B-Instruct-2506", KVI_TOOLS_MISTRAL_ARGS, 2, NULL, "</s>") },
    { RT("openai-gpt-oss-120b", KVI_TOOLS_HARMONY, 1, "<|start|>assistant", NULL) },
    /* the template's own form ('+' of the arguments as text), with its '\n' between calls */
    { RT("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", KVI_TOOLS_DEEPSEEK_R1, 2, NULL, NULL), .reasoning = true,
      .hand = { "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n%s\n`"
                "``"
                "<｜tool▁call▁end｜>",
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n%s\n`"
                "``"
                "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n%s\n```"
                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>" } },
    { RT("deepseek-ai-DeepSeek-V3.1", KVI_TOOLS_DEEPSEEK_V31, 2, "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
      .reasoning = true },
    /* as its system prompt asks: <|tool_call|> and a JSON list */
    { RT("ibm-granite-granite-3.3-2B-Instruct", KVI_TOOLS_GRANITE, 2, NULL, NULL),
      .hand = { "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": %s}]",
                "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": %s}, {\"name\": \"get_time\", "
                "\"arguments\": %s}]" } },
    { RT("CohereForAI-c4ai-command-r7b-12-2024-tool_use", KVI_TOOLS_COMMAND_R, 2, NULL,
         "<|END_OF_TURN_TOKEN|>") },
    /* the template's form (kvinfer's sandbox, like jinja2's, refuses its list.append) */
    { RT("Kimi-K2-Instruct", KVI_TOOLS_KIMI_K2, 2, NULL, NULL),
      .hand = { "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_"
                "begin|>%s"
                "<|tool_call_end|><|tool_calls_section_end|>",
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_"
                "begin|>%s"
                "<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>%s"
                "<|tool_call_end|><|tool_calls_section_end|>" } },
    { RT("GLM-4.7-Flash", KVI_TOOLS_GLM, 2, "<|assistant|>", "<|user|>"), .reasoning = true,
      .in_reasoning = true },
};

/* The request: a user turn, and (with_reply) an assistant turn with n_calls calls. */
static char *request(int n_calls, bool with_reply)
{
    cJSON *req = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(req, "messages");
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", "hi");
    cJSON_AddItemToArray(msgs, u);
    cJSON *tools = cJSON_AddArrayToObject(req, "tools");
    const char *names[2] = { "get_weather", "get_time" }, *args[2] = { ARGS1_IN, ARGS2_IN };
    const char *ids[2] = { "abcDEF123", "abcDEF124" };
    for (int i = 0; i < 2; i++) {
        cJSON *t = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(t, "function");
        cJSON_AddStringToObject(t, "type", "function");
        cJSON_AddStringToObject(fn, "name", names[i]);
        cJSON_AddStringToObject(fn, "description", "d");
        cJSON *ps = cJSON_AddObjectToObject(fn, "parameters");
        cJSON_AddStringToObject(ps, "type", "object");
        cJSON_AddObjectToObject(ps, "properties");
        cJSON_AddItemToArray(tools, t);
    }
    if (with_reply) {
        cJSON *a = cJSON_CreateObject(), *tc = cJSON_CreateArray();
        cJSON_AddStringToObject(a, "role", "assistant");
        cJSON_AddStringToObject(a, "content", "");
        for (int i = 0; i < n_calls; i++) {
            cJSON *c = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(c, "id", ids[i]);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON_AddStringToObject(fn, "name", names[i]);
            cJSON_AddStringToObject(fn, "arguments", args[i]);
            cJSON_AddItemToArray(tc, c);
        }
        cJSON_AddItemToObject(a, "tool_calls", tc);
        cJSON_AddItemToArray(msgs, a);
    }
    cJSON_AddBoolToObject(req, "add_generation_prompt", false);
    char *s = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    return s;
}

/* The assistant turn as the template writes it (malloc'd), NULL on failure. */
static char *rendered_turn(const rt_case *c, const kvi_chat_template *t, int n_calls)
{
    kvi_error err = { 0 };
    char *rq0 = request(n_calls, false), *rq1 = request(n_calls, true);
    char *a = kvi_chat_template_render(t, rq0, "<s>", "</s>", &err);
    CHECK(a != NULL, "%s: render without the reply: %s", c->file, err.msg);
    char *b = kvi_chat_template_render(t, rq1, "<s>", "</s>", &err);
    CHECK(b != NULL, "%s: render with %d calls: %s", c->file, n_calls, err.msg);
    char *turn = NULL;
    if (a && b) {
        size_t k = 0;
        while (a[k] && a[k] == b[k]) k++;
        const char *s = b + k;
        if (c->start && !strncmp(s, c->start, strlen(c->start))) s += strlen(c->start);
        const char *e = c->end ? strstr(s, c->end) : NULL;
        turn = dup_n(s, e ? (size_t)(e - s) : strlen(s));
    }
    free(rq0);
    free(rq1);
    free(a);
    free(b);
    return turn;
}

static void round_trips(void)
{
    for (size_t i = 0; i < sizeof rt_cases / sizeof rt_cases[0]; i++) {
        const rt_case *c = &rt_cases[i];
        char path[256];
        snprintf(path, sizeof path, "templates/%s.jinja", c->file);
        size_t len;
        char *text = read_file(shared_path(path), &len);
        CHECK(text != NULL, "%s: missing", path);
        if (!text) continue;
        CHECK(kvi_tool_format_of(text) == c->f, "%s: format %s, want %s", c->file,
              kvi_tool_format_name(kvi_tool_format_of(text)), kvi_tool_format_name(c->f));
        kvi_error err = { 0 };
        kvi_chat_template *t = kvi_chat_template_parse(text, len, &err);
        CHECK(t != NULL, "%s: parse: %s", c->file, err.msg);
        for (int n = 1; n <= c->max_calls && t; n++) {
            char *turn;
            if (c->hand[0]) {
                turn = malloc(4096);
                snprintf(turn, 4096, c->hand[n - 1], ARGS1_IN, ARGS2_IN);
            } else {
                turn = rendered_turn(c, t, n);
            }
            if (!turn) continue;
            result r = parse(params(c->f, c->reasoning, c->in_reasoning), turn);
            CHECK(r.n_calls == n, "%s: %d calls, want %d in [%s]", c->file, r.n_calls, n, turn);
            CHECK(!strcmp(r.content, "") && !strcmp(r.reasoning, ""),
                  "%s: content [%s] reasoning [%s] in [%s]", c->file, r.content, r.reasoning, turn);
            const char *names[2] = { "get_weather", "get_time" }, *args[2] = { ARGS1, ARGS2 };
            for (int k = 0; k < n && k < r.n_calls; k++)
                CHECK(!strcmp(r.name[k], names[k]) && !strcmp(r.args[k], args[k]),
                      "%s: call %d: %s %s, want %s %s", c->file, k, r.name[k], r.args[k], names[k], args[k]);
            result_free(&r);
            free(turn);
        }
        kvi_chat_template_free(t);
        free(text);
    }
    /* templates that render no calls kvinfer knows stay NONE */
    char *phi = read_file(shared_path("templates/microsoft-Phi-3.5-mini-instruct.jinja"), NULL);
    CHECK(phi && kvi_tool_format_of(phi) == KVI_TOOLS_NONE, "phi-3.5: %s",
          phi ? kvi_tool_format_name(kvi_tool_format_of(phi)) : "missing");
    free(phi);
    char *apriel = read_file(shared_path("templates/unsloth-Apriel-1.5.jinja"), NULL);
    CHECK(apriel && kvi_tool_format_of(apriel) == KVI_TOOLS_NONE, "apriel-1.5: %s",
          apriel ? kvi_tool_format_name(kvi_tool_format_of(apriel)) : "missing");
    free(apriel);
}

/* ---- 2. hand-written outputs ---- */

#define P(f) params(f, false, false)
#define PR(f) params(f, true, false)

static void hermes_like(void)
{
    kvi_tool_format H = KVI_TOOLS_HERMES;
    expect(P(H), "Hello there.", "Hello there.", "", NULL);
    expect(P(H), "", "", "", NULL);
    expect(P(H),
           "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"}{\\\"\"}}\n</tool_call>",
           "Let me check.\n", "", "f", "{\"a\":\"}{\\\"\"}", NULL);
    /* several calls, whitespace between and after them dropped; text after the calls is content */
    expect(P(H),
           "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n\n<tool_call>\n{\"name\": \"b\", "
           "\"arguments\": {\"x\": [1, {\"y\": \"\xe6\x97\xa5\"}]}}\n</tool_call>\n",
           "", "", "a", "{}", "b", "{\"x\":[1,{\"y\":\"\xe6\x97\xa5\"}]}", NULL);
    expect(P(H), "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\nDone.", "\nDone.", "", "a", "{}",
           NULL);
    /* arguments given as a string holding the object */
    expect(P(H), "<tool_call>{\"name\":\"a\",\"arguments\":\"{\\\"k\\\": 1}\"}</tool_call>", "", "", "a",
           "{\"k\":1}", NULL);
    /* malformed: content verbatim, markers included */
    expect(P(H), "x <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
           "x <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>", "", NULL);
    expect(P(H), "<tool_call>{\"nom\": \"f\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"nom\": \"f\", \"arguments\": {}}</tool_call>", "", NULL);
    expect(P(H), "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": tru",
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": tru", "", NULL);
    /* a bad call, then a good one */
    expect(P(H),
           "<tool_call>oops</tool_call><tool_call>{\"name\":\"g\",\"arguments\":{\"n\":-1.5e3}}</tool_call>",
           "<tool_call>oops</tool_call>", "", "g", "{\"n\":-1.5e3}", NULL);
    /* a bad call after a good one: its whitespace, marker and text are content verbatim */
    expect(P(H), "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>nope</tool_call>",
           "\n<tool_call>nope</tool_call>", "", "a", "{}", NULL);
    /* a complete call missing only its closing tag is taken at the end */
    expect(P(H), "<tool_call>{\"name\":\"g\",\"arguments\":{}}", "", "", "g", "{}", NULL);
    /* marker-like text that is no marker */
    expect(P(H), "a <tool b <tool_cal", "a <tool b <tool_cal", "", NULL);
    /* reasoning */
    expect(PR(H), "<think>\nplan\n</think>\n\nAnswer", "Answer", "plan\n", NULL);
    expect(params(H, true, true), "plan</think>\n<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>",
           "", "plan", "f", "{}", NULL);
    expect(P(H), "<think>x</think>y", "<think>x</think>y", "", NULL);
    expect(params(KVI_TOOLS_NONE, true, false), "<think> a </think> b <tool_call>", "b <tool_call>", "a ",
           NULL);
    expect(params(KVI_TOOLS_NONE, true, true), "unfinished thought", "", "unfinished thought", NULL);

    kvi_tool_format Q = KVI_TOOLS_QWEN3_CODER;
    expect(
        P(Q),
        "Sure.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -l \"x\"\n</parameter>\n<parameter=n>\n2\n"
        "</parameter>\n<parameter=o>\n{\"a\": [true, null]}\n</parameter>\n<parameter=s>\nmulti\nline {\n"
        "</parameter>\n</function>\n</tool_call>",
        "Sure.\n", "", "run",
        "{\"cmd\":\"ls -l \\\"x\\\"\",\"n\":2,\"o\":{\"a\":[true,null]},\"s\":\"multi\\nline {\"}", NULL);
    expect(P(Q), "<tool_call><function=noargs></function></tool_call>", "", "", "noargs", "{}", NULL);
    expect(P(Q), "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n",
           "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n", "", NULL);

    kvi_tool_format G = KVI_TOOLS_GLM;
    expect(P(G), "I write <tool_call> to call.", "I write <tool_call> to call.", "", NULL);
    expect(params(G, true, true),
           "hmm</think>Calling.<tool_call>get_w\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
           "<arg_key>n</arg_key><arg_value>3</arg_value></tool_call>",
           "Calling.", "hmm", "get_w", "{\"city\":\"Paris\",\"n\":3}", NULL);
    expect(P(G), "<tool_call>f<arg_key>a</arg_value></tool_call>",
           "<tool_call>f<arg_key>a</arg_value></tool_call>", "", NULL);
}

static void llama_mistral(void)
{
    kvi_tool_format L = KVI_TOOLS_LLAMA3;
    expect(P(L), " {\"name\": \"f\", \"parameters\": {\"q\": \"a}b\"}}", "", "", "f", "{\"q\":\"a}b\"}",
           NULL);
    expect(P(L), "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", "", "f", "{}", NULL);
    expect(P(L), "{\"name\": \"f\", \"parameters\": {}} and more",
           "{\"name\": \"f\", \"parameters\": {}} and more", "", NULL);
    expect(P(L), "{\"answer\": 42}", "{\"answer\": 42}", "", NULL);
    expect(P(L), "The JSON is {\"name\": \"f\", \"parameters\": {}}",
           "The JSON is {\"name\": \"f\", \"parameters\": {}}", "", NULL);
    expect(P(L), "{\"name\": \"f\", \"parameters\": {", "{\"name\": \"f\", \"parameters\": {", "", NULL);

    kvi_tool_format M = KVI_TOOLS_MISTRAL;
    expect(P(M),
           "Ok [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abcDEF123\"}, {\"name\": "
           "\"b\", "
           "\"arguments\": {}}]",
           "Ok ", "", "a", "{\"x\":1}", "b", "{}", NULL);
    expect(P(M), "[TOOL_CALLS][{\"name\": \"a\"}]", "[TOOL_CALLS][{\"name\": \"a\"}]", "", NULL);
    expect(P(M), "[TOOL_CALLS][]", "[TOOL_CALLS][]", "", NULL);

    kvi_tool_format MA = KVI_TOOLS_MISTRAL_ARGS;
    expect(P(MA), "[TOOL_CALLS]a[ARGS]{\"x\": \"[ARGS]\"}[TOOL_CALLS]b[CALL_ID]123456789[ARGS]{}", "", "",
           "a", "{\"x\":\"[ARGS]\"}", "b", "{}", NULL);
    expect(P(MA), "[TOOL_CALLS]not a name at all[ARGS]{}", "[TOOL_CALLS]not a name at all[ARGS]{}", "", NULL);

    kvi_tool_format GR = KVI_TOOLS_GRANITE;
    expect(P(GR), "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"u\": \"\\u00e9\"}}]", "", "", "a",
           "{\"u\":\"\\u00e9\"}", NULL);
    expect(P(GR), "no calls", "no calls", "", NULL);

    kvi_tool_format C = KVI_TOOLS_COMMAND_R;
    expect(P(C),
           "<|START_THINKING|>I should call.<|END_THINKING|><|START_ACTION|>[\n {\"tool_call_id\": \"0\", "
           "\"tool_name\": \"a\", \"parameters\": {\"k\": 1}}\n]<|END_ACTION|>",
           "", "I should call.", "a", "{\"k\":1}", NULL);
    expect(P(C), "<|START_THINKING|>t<|END_THINKING|><|START_RESPONSE|>Hi!<|END_RESPONSE|>", "Hi!", "t",
           NULL);
}

static void deepseek_kimi(void)
{
    kvi_tool_format V = KVI_TOOLS_DEEPSEEK_V31, R = KVI_TOOLS_DEEPSEEK_R1;
    expect(PR(V),
           "<think>hm</think>Text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": \"x\"}"
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
           "Text", "hm", "f", "{\"a\":\"x\"}", NULL);
    expect(P(V), "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": ",
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": ", "", NULL);
    expect(params(R, true, true),
           "Let me think.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
           "```json\n{\"b\": [1]}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
           "", "Let me think.\n", "f", "{\"b\":[1]}", NULL);

    kvi_tool_format K = KVI_TOOLS_KIMI_K2;
    expect(P(K),
           "Sure<|tool_calls_section_begin|><|tool_call_begin|>functions.get_x:0<|tool_call_argument_begin|>"
           "{\"a\": 1}<|tool_call_end|><|tool_call_begin|>functions.b:1<|tool_call_argument_begin|>{}"
           "<|tool_call_end|><|tool_calls_section_end|>",
           "Sure", "", "get_x", "{\"a\":1}", "b", "{}", NULL);
}

static void harmony(void)
{
    kvi_tool_format H = KVI_TOOLS_HARMONY;
    expect(P(H),
           "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
           "", "Need weather.", "get_weather", "{\"city\":\"Paris\"}", NULL);
    expect(P(H),
           "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>The "
           "answer.<|return|>",
           "The answer.", "Think.", NULL);
    expect(P(H), "<|channel|>final<|message|>Streaming without end", "Streaming without end", "", NULL);
    expect(P(H), "Plain text", "Plain text", "", NULL);
    expect(P(H),
           "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{}<|call|><|start|>assistant"
           "<|channel|>commentary to=functions.b json<|message|>{\"x\": [\"<|call|>\"]}<|call|>",
           "", "", "a", "{}", "b", "{\"x\":[\"<|call|>\"]}", NULL);
    /* a preamble to the user (commentary without a recipient) is content */
    expect(P(H), "<|channel|>commentary<|message|>Checking.<|end|>", "Checking.", "", NULL);
    /* an open call whose JSON is complete is taken at the end */
    expect(P(H), " to=functions.f<|channel|>commentary json<|message|>{\"a\": [1, 2]}", "", "", "f",
           "{\"a\":[1,2]}", NULL);
    expect(P(H), "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": ",
           "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": ", "", NULL);
}

/* ---- 3. split invariance on random texts ---- */

/* Texts strung from every format's markers, pieces of calls and plain text
 * (whole calls among them): under every format, parse() CHECKs that one piece,
 * byte by byte and random chunks agree and that outputs only grow. */
static void random_texts(void)
{
    static const char *const pieces[] = {
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        "<|python_tag|>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "[CALL_ID]",
        "<|channel|>",
        "<|message|>",
        "<|start|>",
        "<|end|>",
        "<|call|>",
        "<|return|>",
        "<|constrain|>",
        "analysis",
        "final",
        "commentary",
        " to=functions.f",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "<|tool_call|>",
        "<|START_ACTION|>",
        "<|END_ACTION|>",
        "<|START_THINKING|>",
        "<|END_THINKING|>",
        "<|START_RESPONSE|>",
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "functions.f:0",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<|tool_calls_section_end|>",
        "<function=f>",
        "</function>",
        "<parameter=p>",
        "</parameter>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "{\"name\": \"f\", \"arguments\": "
        "{\"a\": [1, \"}\"]}}",
        "{\"name\": \"g\", \"parameters\": {}}",
        "[{\"name\": \"f\", \"arguments\": {}}]",
        "[{\"tool_name\": \"f\", \"parameters\": {}}]",
        "{\"k\": \"v\"}",
        "{",
        "}",
        "[",
        "]",
        "\"",
        ":",
        ",",
        " ",
        "\n",
        "text",
        "\xc3\xa9",
        "\xe2\x98\x80",
        "<",
        "|",
        "```json\n",
        "```",
        "function",
        "f",
        "1.5",
        "true",
        /* whole calls, one per format */
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=p>\nv\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
        "[TOOL_CALLS]f[ARGS]{}",
        "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
        "<|channel|>commentary to=functions.f json<|message|>{}<|call|>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<"
        "｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜>",
        "<|tool_call|>[{\"name\": \"f\", \"arguments\": {}}]",
        "<|START_ACTION|>[{\"tool_name\": \"f\", \"parameters\": {}}]<|END_ACTION|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}"
        "<|tool_call_end|><|tool_calls_section_end|>",
    };
    const int n_pieces = (int)(sizeof pieces / sizeof pieces[0]);
    uint64_t seed = 0xc0ffee;
    char text[1024];
    int n_calls = 0;
    for (int f = 0; f < KVI_TOOLS_COUNT_; f++) {
        for (int t = 0; t < 120; t++) {
            size_t len = 0;
            int n = 1 + (int)(trand_u64(&seed) % 14);
            for (int k = 0; k < n; k++) {
                const char *pc = pieces[trand_u64(&seed) % (uint64_t)n_pieces];
                size_t l = strlen(pc);
                if (len + l >= sizeof text) break;
                memcpy(text + len, pc, l);
                len += l;
            }
            text[len] = 0;
            int mode = (int)(trand_u64(&seed) % 3);
            result r = parse(params((kvi_tool_format)f, mode > 0, mode > 1), text);
            n_calls += r.n_calls;
            result_free(&r);
        }
    }
    CHECK(n_calls > 20, "random texts gave %d calls", n_calls);
}

/* Long calls (past the size below which a waiting unit is parsed on every
 * feed): the same result however split, taken when whole, refused verbatim when
 * broken at the very end. */
static void long_calls(void)
{
    size_t cap = 40000;
    char *body = malloc(cap), *text = malloc(2 * cap), *want = malloc(2 * cap);
    size_t n = 0;
    while (n + 64 < cap - 1024)
        n += (size_t)snprintf(body + n, cap - n, "if (x[%zu] > 0) { y = \"</tool_call>]}\"; }\n", n);
    body[n] = 0;
    /* Qwen3-Coder: the body as a string parameter */
    snprintf(text, 2 * cap,
             "<tool_call>\n<function=write>\n<parameter=text>\n%s\n</parameter>\n</function>\n</tool_call>",
             body);
    result r = parse(P(KVI_TOOLS_QWEN3_CODER), text);
    CHECK(r.n_calls == 1 && !strcmp(r.name[0], "write") && strlen(r.args[0]) > n && !strcmp(r.content, ""),
          "long qwen3-coder call: %d calls, content %zu bytes", r.n_calls, strlen(r.content));
    result_free(&r);
    /* Hermes: the body as a JSON string (quotes escaped, newlines as \n) */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (body[i] == '"') want[k++] = '\\';
        if (body[i] == '\n') {
            want[k++] = '\\';
            want[k++] = 'n';
            continue;
        }
        want[k++] = body[i];
    }
    want[k] = 0;
    snprintf(text, 2 * cap, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"t\": \"%.*s\"}}\n</tool_call>",
             (int)k, want);
    r = parse(P(KVI_TOOLS_HERMES), text);
    CHECK(r.n_calls == 1 && strlen(r.args[0]) == k + 8 && !strcmp(r.content, ""),
          "long hermes call: %d calls", r.n_calls);
    result_free(&r);
    /* broken at its end: content verbatim */
    snprintf(text, 2 * cap, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"t\": \"%.*s\"}]\n</tool_call>",
             (int)k, want);
    r = parse(P(KVI_TOOLS_HERMES), text);
    CHECK(r.n_calls == 0 && !strcmp(r.content, text), "broken long hermes call: %d calls", r.n_calls);
    result_free(&r);
    /* Harmony and Mistral */
    snprintf(text, 2 * cap,
             "<|channel|>commentary to=functions.w <|constrain|>json<|message|>{\"t\": \"%.*s\"}<|call|>",
             (int)k, want);
    r = parse(P(KVI_TOOLS_HARMONY), text);
    CHECK(r.n_calls == 1 && strlen(r.args[0]) == k + 8, "long harmony call: %d calls", r.n_calls);
    result_free(&r);
    snprintf(text, 2 * cap, "[TOOL_CALLS][{\"name\": \"w\", \"arguments\": {\"t\": \"%.*s\"}}]", (int)k,
             want);
    r = parse(P(KVI_TOOLS_MISTRAL), text);
    CHECK(r.n_calls == 1 && strlen(r.args[0]) == k + 8, "long mistral call: %d calls", r.n_calls);
    result_free(&r);
    /* Llama 3: a long JSON answer that is no call stays content */
    snprintf(text, 2 * cap, "{\"name\": \"w\", \"parameters\": {\"t\": \"%.*s\"}} and then", (int)k, want);
    r = parse(P(KVI_TOOLS_LLAMA3), text);
    CHECK(r.n_calls == 0 && !strcmp(r.content, text), "long llama3 answer: %d calls", r.n_calls);
    result_free(&r);
    free(body);
    free(text);
    free(want);
}

/* ---- 4. failed allocations ---- */

/* The test is linked with --wrap for malloc, realloc and calloc: while
 * alloc_left >= 0, only that many more allocations succeed. */
void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_calloc(size_t n, size_t size);
static long alloc_left = -1;

static bool alloc_ok(void)
{
    if (alloc_left < 0) return true;
    if (alloc_left == 0) return false;
    alloc_left--;
    return true;
}

void *__wrap_malloc(size_t n) { return alloc_ok() ? __real_malloc(n) : NULL; }
void *__wrap_realloc(void *p, size_t n) { return alloc_ok() ? __real_realloc(p, n) : NULL; }
void *__wrap_calloc(size_t n, size_t size) { return alloc_ok() ? __real_calloc(n, size) : NULL; }

/* With the k+1-th allocation of every feed and finish failing: each failed
 * call returns KVI_E_NOMEM and leaves the parser as it was, so feeding the
 * same bytes again (allocations allowed) ends with the same result. */
static void out_of_memory(void)
{
    static const struct {
        kvi_tool_format f;
        bool reasoning;
        const char *text;
    } cases[] = {
        { KVI_TOOLS_HERMES, true,
          "<think>\nplan it\n</think>\nOk \xe2\x98\x80.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
          "{\"x\": [1, "
          "{\"y\": \"z\"}]}}\n</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": "
          "{}}</tool_call><tool_call>bad" },
        { KVI_TOOLS_QWEN3_CODER, false,
          "Hi<tool_call>\n<function=f>\n<parameter=p>\nv "
          "\"q\"\n</parameter>\n<parameter=n>\n1.5\n</parameter>\n"
          "</function>\n</tool_call>" },
        { KVI_TOOLS_HARMONY, false,
          "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary to=functions.f "
          "<|constrain|>json<|message|>{\"a\": \"\\u00e9\"}<|call|>" },
        { KVI_TOOLS_DEEPSEEK_V31, false,
          "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": "
          "1}<｜tool▁call▁end｜><｜tool▁call▁begin"
          "｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kvi_chat_output_params p = params(cases[c].f, cases[c].reasoning, false);
        const char *text = cases[c].text;
        size_t len = strlen(text);
        result want = parse_chunks(p, text, len, 2, 99);
        int rounds = 0;
        for (long k = 0; k < 64; k++, rounds++) {
            kvi_chat_output *o = kvi_chat_output_create(&p);
            uint64_t seed = 99;
            int failed = 0;
            for (size_t at = 0;;) {
                bool fin = at == len;
                size_t n = fin ? 0 : 1 + trand_u64(&seed) % 9;
                if (n > len - at) n = len - at;
                alloc_left = k;
                int r = fin ? kvi_chat_output_finish(o) : kvi_chat_output_feed(o, text + at, n);
                alloc_left = -1;
                if (r == KVI_E_NOMEM) {
                    failed++;
                    r = fin ? kvi_chat_output_finish(o) : kvi_chat_output_feed(o, text + at, n);
                }
                CHECK(r == 0, "%s: k %ld: at %zu: %d", kvi_tool_format_name(p.tools), k, at, r);
                if (fin) break;
                at += n;
            }
            result got = collect(o);
            CHECK(same(&got, &want), "%s: k %ld: content [%s] reasoning [%s] %d calls after failures",
                  kvi_tool_format_name(p.tools), k, got.content, got.reasoning, got.n_calls);
            result_free(&got);
            kvi_chat_output_free(o);
            if (!failed) break;
        }
        CHECK(rounds > 1 && rounds < 64, "%s: %d rounds of failures", kvi_tool_format_name(p.tools), rounds);
        result_free(&want);
    }
}

int main(void)
{
    round_trips();
    hermes_like();
    llama_mistral();
    deepseek_kimi();
    harmony();
    random_texts();
    long_calls();
    out_of_memory();
    return test_main_end();
}
