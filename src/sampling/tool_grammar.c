/*
 * tool_grammar.c — a GBNF grammar whose sentences are tool calls in the wire
 * form a chat template renders them in (kvi_tool_format), each call's
 * arguments valid against its tool's "parameters" schema.
 *
 * Data structure: one gbnf_buf (json_schema_int.h) the rules are appended to.
 * Tool i (among those selected: all, or the one named) owns the rules of its
 * arguments schema, prefixed t<i>- with top rule tc-args-<i> (for the XML-like
 * formats, one schema per parameter: t<i>-p<k>- with top t<i>-p<k>), and its
 * call rule tc-call-<i>; tc-call is their union and root frames one call or
 * several. The scaffolding's own rules all start with "tc-", the schemas'
 * with "t<digit>", and the primitives shared by all schemas (ws, string ...)
 * are emitted once at the end, so no two rules share a name.
 *
 * Invariants: every literal of the wire forms is the text the format's chat
 * template renders (checked in tests/test_tool_grammar.c by rendering the
 * templates); where a template puts a newline the grammar takes that one
 * newline or none (tc-ws; after a reasoning block up to two: tc-think-ws;
 * Command R's list indentation: tc-ind), and between JSON tokens json.dumps'
 * separators ", " and ": " and nothing else (JS_WS_COMPACT): the compact
 * form, no free white space outside string values, so a weak model spends no
 * tokens on layout. With one call (no KVI_TOOL_CALL_PARALLEL) nothing but the
 * end of generation can follow it; with several, the end may follow any
 * whole call. Free text
 * appears only where bounded by a closing marker the text cannot contain (a
 * reasoning block, a raw string parameter), built as the automaton of "no
 * occurrence of the marker" (put_not_containing). Nothing here parses or
 * prints beyond building text; errors go to err.
 */
#include "kvinfer.h"
#include "formats/json_util.h"
#include "base/error.h"
#include "sampling/json_schema_int.h"

#include <cjson/cJSON.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TG_MAX_TOOLS 1024

typedef struct tg {
    gbnf_buf b;
    unsigned prims;
    kvi_tool_format f;
    kvi_error *err;
} tg;

static int tg_fail(tg *t, const char *fmt, ...) KVI_PRINTF(2, 3);
static int tg_fail(tg *t, const char *fmt, ...)
{
    char msg[sizeof t->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(t->err, KVI_E_INVALID, "tool grammar: %s", msg);
    return -1;
}

/* A string as its compact JSON text ("...", escaped); malloc'd, NULL on OOM. */
static char *json_quote(const char *s)
{
    cJSON *v = cJSON_CreateString(s);
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    return t;
}

/* A literal of s as JSON string text. */
static void put_json_string(tg *t, const char *s)
{
    char *q = json_quote(s);
    if (!q) {
        t->b.oom = true;
        return;
    }
    gbnf_put_literal(&t->b, q);
    cJSON_free(q);
}

/* One byte of a character class, escaped. */
static void put_class_byte(tg *t, unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        gbnf_put(&t->b, "%c", c);
    else
        gbnf_put(&t->b, "\\x%02X", c);
}

/* name ::= any text not containing stop (ASCII, its first byte nowhere else in
 * it). States: name (nothing of stop matched) and name-k (its first k bytes
 * matched, 1 <= k < len); the byte completing stop has no transition. */
static void put_not_containing(tg *t, const char *name, const char *stop)
{
    const size_t n = strlen(stop);
    const unsigned char c0 = (unsigned char)stop[0];
    gbnf_put(&t->b, "%s ::= \"\" | [^", name);
    put_class_byte(t, c0);
    gbnf_put(&t->b, "] %s | ", name);
    gbnf_put_literal(&t->b, (char[]){ (char)c0, 0 });
    gbnf_put(&t->b, " %s-1\n", name);
    for (size_t k = 1; k < n; k++) {
        const unsigned char ck = (unsigned char)stop[k];
        gbnf_put(&t->b, "%s-%zu ::= \"\" | ", name, k);
        if (k + 1 < n) {
            gbnf_put_literal(&t->b, (char[]){ (char)ck, 0 });
            gbnf_put(&t->b, " %s-%zu | ", name, k + 1);
        }
        gbnf_put_literal(&t->b, (char[]){ (char)c0, 0 });
        gbnf_put(&t->b, " %s-1 | [^", name);
        put_class_byte(t, c0);
        put_class_byte(t, ck);
        gbnf_put(&t->b, "] %s\n", name);
    }
}

static bool fmt_reasons(kvi_tool_format f)
{
    return f == KVI_TOOLS_HERMES || f == KVI_TOOLS_QWEN3_CODER || f == KVI_TOOLS_DEEPSEEK_R1 ||
           f == KVI_TOOLS_DEEPSEEK_V31 || f == KVI_TOOLS_GLM;
}

/* Formats that write one call per message. */
static bool fmt_single(kvi_tool_format f) { return f == KVI_TOOLS_LLAMA3 || f == KVI_TOOLS_HARMONY; }

/* Formats whose parameters are XML-like elements, strings written raw. */
static bool fmt_xml(kvi_tool_format f) { return f == KVI_TOOLS_QWEN3_CODER || f == KVI_TOOLS_GLM; }

/* A property schema written raw in the XML-like formats: a plain string, or an
 * enum of strings (1: plain, 2: enum, 0: neither). */
static int raw_string_kind(const cJSON *s)
{
    if (!cJSON_IsObject(s)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (en && cJSON_IsArray(en) && en->child) {
        for (const cJSON *e = en->child; e; e = e->next)
            if (!cJSON_IsString(e)) return 0;
        return 2;
    }
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "string") != 0) return 0;
    for (const cJSON *c = s->child; c; c = c->next)
        if (strcmp(c->string, "type") != 0 && strcmp(c->string, "description") != 0 &&
            strcmp(c->string, "title") != 0)
            return 0; /* formats, lengths ...: as a JSON string */
    return 1;
}

/* One parameter's value rule t<i>-p<k> for the XML-like formats. */
static int put_param_value(tg *t, const cJSON *params, const cJSON *ps, int i, int k)
{
    char pre[32], top[32];
    snprintf(pre, sizeof pre, "t%d-p%d-", i, k);
    snprintf(top, sizeof top, "t%d-p%d", i, k);
    int kind = raw_string_kind(ps);
    if (kind == 1) {
        gbnf_put(&t->b, "%s ::= tc-raw\n", top);
        return 0;
    }
    if (kind == 2) {
        gbnf_put(&t->b, "%s ::= ", top);
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(ps, "enum");
        for (const cJSON *e = en->child; e; e = e->next) {
            gbnf_put(&t->b, "%s", e == en->child ? "" : " | ");
            gbnf_put_literal(&t->b, e->valuestring);
        }
        gbnf_put(&t->b, "\n");
        return 0;
    }
    return json_schema_rules(&t->b, params, ps, pre, top, &t->prims, t->err);
}

/* The elements of one parameter, opening and closing tags around value v. */
static void put_param(tg *t, const char *pname, const char *v)
{
    if (t->f == KVI_TOOLS_QWEN3_CODER) {
        char *open = malloc(strlen(pname) + 16);
        if (!open) {
            t->b.oom = true;
            return;
        }
        sprintf(open, "<parameter=%s>", pname);
        gbnf_put_literal(&t->b, open);
        gbnf_put(&t->b, " tc-ws %s tc-ws \"</parameter>\" tc-ws", v);
        free(open);
    } else {
        gbnf_put(&t->b, "\"<arg_key>\" ");
        gbnf_put_literal(&t->b, pname);
        gbnf_put(&t->b, " \"</arg_key>\" tc-ws \"<arg_value>\" %s \"</arg_value>\" tc-ws", v);
    }
}

/* tc-args-<i> for the XML-like formats: the parameters in declared order, the
 * required ones present (chain of rules t<i>-q<k>: from parameter k on). */
static int put_xml_args(tg *t, const cJSON *params, int i)
{
    if (params && !cJSON_IsObject(params))
        return err_set(t->err, KVI_E_INVALID, "'parameters' must be a JSON schema object"), -1;
    const cJSON *props = params ? cJSON_GetObjectItemCaseSensitive(params, "properties") : NULL;
    const cJSON *req = params ? cJSON_GetObjectItemCaseSensitive(params, "required") : NULL;
    if (!props || !cJSON_IsObject(props) || !props->child) {
        /* no declared parameters: any names, raw values */
        if (t->f == KVI_TOOLS_QWEN3_CODER)
            gbnf_put(&t->b,
                     "tc-args-%d ::= (\"<parameter=\" tc-pname \">\" tc-ws tc-raw tc-ws \"</parameter>\" "
                     "tc-ws)*\n",
                     i);
        else
            gbnf_put(&t->b,
                     "tc-args-%d ::= (\"<arg_key>\" tc-pname \"</arg_key>\" tc-ws \"<arg_value>\" tc-raw "
                     "\"</arg_value>\" tc-ws)*\n",
                     i);
        return 0;
    }
    int k = 0;
    for (const cJSON *p = props->child; p; p = p->next, k++) {
        if (put_param_value(t, params, p, i, k) < 0) return -1;
        bool required = false;
        for (const cJSON *r = req ? req->child : NULL; r && !required; r = r->next)
            required = cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0;
        char v[32];
        snprintf(v, sizeof v, "t%d-p%d", i, k);
        gbnf_put(&t->b, "t%d-q%d ::= ", i, k);
        put_param(t, p->string, v);
        gbnf_put(&t->b, " t%d-q%d%s", i, k + 1, required ? "\n" : " | ");
        if (!required) gbnf_put(&t->b, "t%d-q%d\n", i, k + 1);
    }
    gbnf_put(&t->b, "t%d-q%d ::= \"\"\ntc-args-%d ::= t%d-q0\n", i, k, i, i);
    return 0;
}

/* tc-call-<i>: one call of tool i (name nm) in the format's wire form. */
static void put_call(tg *t, int i, const char *nm)
{
    gbnf_buf *b = &t->b;
    gbnf_put(b, "tc-call-%d ::= ", i);
    switch (t->f) {
    case KVI_TOOLS_HERMES:
        gbnf_put(b, "\"<tool_call>\" tc-ws \"{\" ws \"\\\"name\\\"\" ws \":\" sp ");
        put_json_string(t, nm);
        gbnf_put(b,
                 " ws \",\" sp \"\\\"arguments\\\"\" ws \":\" sp tc-args-%d ws \"}\" tc-ws \"</tool_call>\"",
                 i);
        break;
    case KVI_TOOLS_QWEN3_CODER: {
        char *open = malloc(strlen(nm) + 16);
        if (!open) {
            b->oom = true;
            return;
        }
        sprintf(open, "<function=%s>", nm);
        gbnf_put(b, "\"<tool_call>\" tc-ws ");
        gbnf_put_literal(b, open);
        gbnf_put(b, " tc-ws tc-args-%d \"</function>\" tc-ws \"</tool_call>\"", i);
        free(open);
        break;
    }
    case KVI_TOOLS_LLAMA3:
        gbnf_put(b, "\"{\" ws \"\\\"name\\\"\" ws \":\" sp ");
        put_json_string(t, nm);
        gbnf_put(b, " ws \",\" sp \"\\\"parameters\\\"\" ws \":\" sp tc-args-%d ws \"}\"", i);
        break;
    case KVI_TOOLS_MISTRAL:
        gbnf_put(b, "\"{\" ws \"\\\"name\\\"\" ws \":\" sp ");
        put_json_string(t, nm);
        gbnf_put(b,
                 " ws \",\" sp \"\\\"arguments\\\"\" ws \":\" sp tc-args-%d ws \",\" sp \"\\\"id\\\"\" ws "
                 "\":\" sp "
                 "\"\\\"\" [a-zA-Z0-9]{9} \"\\\"\" ws \"}\"",
                 i);
        break;
    case KVI_TOOLS_MISTRAL_ARGS:
        gbnf_put(b, "\"[TOOL_CALLS]\" ");
        gbnf_put_literal(b, nm);
        gbnf_put(b, " (\"[CALL_ID]\" [a-zA-Z0-9]{9})? \"[ARGS]\" tc-args-%d", i);
        break;
    case KVI_TOOLS_HARMONY:
        /* the recipient in the channel header (as models write it) or in the
         * role header (as the template renders it) */
        gbnf_put(b, "(\"<|channel|>commentary to=functions.\" ");
        gbnf_put_literal(b, nm);
        gbnf_put(b, " | \" to=functions.\" ");
        gbnf_put_literal(b, nm);
        gbnf_put(
            b,
            " \"<|channel|>commentary\") (\" <|constrain|>json\" | \" json\")? \"<|message|>\" tc-args-%d "
            "\"<|call|>\"",
            i);
        break;
    case KVI_TOOLS_DEEPSEEK_R1:
        gbnf_put(b, "\"<｜tool▁call▁begin｜>function<｜tool▁sep｜>\" ");
        gbnf_put_literal(b, nm);
        gbnf_put(b, " tc-ws \"```json\" tc-ws tc-args-%d tc-ws \"```\" tc-ws \"<｜tool▁call▁end｜>\"", i);
        break;
    case KVI_TOOLS_DEEPSEEK_V31:
        gbnf_put(b, "\"<｜tool▁call▁begin｜>\" ");
        gbnf_put_literal(b, nm);
        gbnf_put(b, " \"<｜tool▁sep｜>\" tc-args-%d \"<｜tool▁call▁end｜>\"", i);
        break;
    case KVI_TOOLS_GRANITE:
        gbnf_put(b, "\"{\" ws \"\\\"name\\\"\" ws \":\" sp ");
        put_json_string(t, nm);
        gbnf_put(b, " ws \",\" sp \"\\\"arguments\\\"\" ws \":\" sp tc-args-%d ws \"}\"", i);
        break;
    case KVI_TOOLS_COMMAND_R:
        gbnf_put(b, "\"{\" ws \"\\\"tool_call_id\\\"\" ws \":\" sp \"\\\"\" [0-9]{1,3} \"\\\"\" ws \",\" sp "
                    "\"\\\"tool_name\\\"\" ws \":\" sp ");
        put_json_string(t, nm);
        gbnf_put(b, " ws \",\" sp \"\\\"parameters\\\"\" ws \":\" sp tc-args-%d ws \"}\"", i);
        break;
    case KVI_TOOLS_KIMI_K2:
        gbnf_put(b, "\"<|tool_call_begin|>functions.\" ");
        gbnf_put_literal(b, nm);
        gbnf_put(b, " \":\" [0-9]{1,3} \"<|tool_call_argument_begin|>\" tc-args-%d \"<|tool_call_end|>\"", i);
        break;
    case KVI_TOOLS_GLM:
        gbnf_put(b, "\"<tool_call>\" ");
        gbnf_put_literal(b, nm);
        gbnf_put(b, " tc-ws tc-args-%d \"</tool_call>\"", i);
        break;
    default: break;
    }
    gbnf_put(b, "\n");
}

/* root: an optional reasoning prefix, then one call or (parallel) several. */
static void put_root(tg *t, unsigned flags)
{
    bool parallel = flags & KVI_TOOL_CALL_PARALLEL;
    gbnf_buf *b = &t->b;
    if (fmt_single(t->f)) parallel = false;
    const char *calls = parallel ? "tc-calls" : "tc-call";
    const char *sep = t->f == KVI_TOOLS_MISTRAL_ARGS                           ? ""
                      : t->f == KVI_TOOLS_MISTRAL || t->f == KVI_TOOLS_GRANITE ? "ws \",\" sp "
                      : t->f == KVI_TOOLS_COMMAND_R                            ? "\",\" (\" \" | tc-ind) "
                                                                               : "tc-ws ";
    gbnf_put(b, "tc-calls ::= tc-call (%stc-call)*\n", sep);
    /* the template's line breaks: one or none (up to a blank line after a reasoning
     * block), Command R's indented list */
    gbnf_put(b, "tc-ws ::= \"\\n\"?\ntc-ind ::= (\"\\n\" \" \"{0,4})?\ntc-think-ws ::= \"\\n\"{0,2}\n");
    switch (t->f) {
    case KVI_TOOLS_HARMONY:
        /* an optional analysis message first */
        put_not_containing(t, "tc-text", "<|end|>");
        gbnf_put(b,
                 "root ::= (\"<|channel|>analysis<|message|>\" tc-text \"<|end|><|start|>assistant\")? %s\n",
                 calls);
        return;
    case KVI_TOOLS_COMMAND_R:
        put_not_containing(t, "tc-text", "<|END_THINKING|>");
        gbnf_put(b,
                 "root ::= (\"<|START_THINKING|>\" tc-text \"<|END_THINKING|>\" tc-think-ws)? "
                 "\"<|START_ACTION|>\" "
                 "\"[\" tc-ind %s tc-ind \"]\" \"<|END_ACTION|>\"\n",
                 calls);
        return;
    default: break;
    }
    const char *open = t->f == KVI_TOOLS_MISTRAL   ? "\"[TOOL_CALLS]\" \"[\" ws "
                       : t->f == KVI_TOOLS_GRANITE ? "\"<|tool_call|>\" \"[\" ws "
                       : t->f == KVI_TOOLS_DEEPSEEK_R1 || t->f == KVI_TOOLS_DEEPSEEK_V31
                           ? "\"<｜tool▁calls▁begin｜>\" "
                       : t->f == KVI_TOOLS_KIMI_K2 ? "\"<|tool_calls_section_begin|>\" "
                                                   : "";
    const char *close = t->f == KVI_TOOLS_MISTRAL || t->f == KVI_TOOLS_GRANITE ? " ws \"]\""
                        : t->f == KVI_TOOLS_DEEPSEEK_R1 || t->f == KVI_TOOLS_DEEPSEEK_V31
                            ? " \"<｜tool▁calls▁end｜>\""
                        : t->f == KVI_TOOLS_KIMI_K2 ? " \"<|tool_calls_section_end|>\""
                                                    : "";
    if (fmt_reasons(t->f) && (flags & KVI_TOOL_CALL_IN_THINK)) {
        /* the prompt opened the reasoning block: its rest, then the call */
        put_not_containing(t, "tc-think-text", "</think>");
        gbnf_put(b, "root ::= tc-think-text \"</think>\" tc-think-ws %s%s%s\n", open, calls, close);
    } else if (fmt_reasons(t->f) && (flags & KVI_TOOL_CALL_THINK)) {
        /* an optional reasoning block first */
        put_not_containing(t, "tc-think-text", "</think>");
        gbnf_put(b, "root ::= (\"<think>\" tc-think-text \"</think>\" tc-think-ws)? %s%s%s\n", open, calls,
                 close);
    } else {
        gbnf_put(b, "root ::= %s%s%s\n", open, calls, close);
    }
}

/* The selected tools' rules; their number, or -1 (err filled). */
static int put_tools(tg *t, const cJSON *tools, const char *name)
{
    if (!cJSON_IsArray(tools)) return tg_fail(t, "tools must be a JSON array");
    int n = 0, k = 0;
    for (const cJSON *tool = tools->child; tool; tool = tool->next, k++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(nm) || !nm->valuestring[0])
            return tg_fail(t, "tools[%d] has no function.name", k);
        if (name && strcmp(name, nm->valuestring) != 0) continue;
        if (n >= TG_MAX_TOOLS) return tg_fail(t, "more than %d tools", TG_MAX_TOOLS);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char pre[32], top[32];
        snprintf(pre, sizeof pre, "t%d-", n);
        snprintf(top, sizeof top, "tc-args-%d", n);
        int rc = fmt_xml(t->f) ? put_xml_args(t, params, n)
                               : json_schema_rules(&t->b, params, params, pre, top, &t->prims, t->err);
        if (rc < 0) {
            /* name the tool whose schema was refused */
            if (t->err && t->err->code != KVI_E_NOMEM) {
                char msg[sizeof t->err->msg];
                snprintf(msg, sizeof msg, "%s", t->err->msg);
                tg_fail(t, "tool '%.100s': %s", nm->valuestring, msg);
            }
            return -1;
        }
        put_call(t, n, nm->valuestring);
        n++;
    }
    if (n == 0)
        return name ? tg_fail(t, "no tool is named '%.200s'", name) : tg_fail(t, "the tools array is empty");
    gbnf_put(&t->b, "tc-call ::= ");
    for (int i = 0; i < n; i++) gbnf_put(&t->b, "%stc-call-%d", i ? " | " : "", i);
    gbnf_put(&t->b, "\n");
    return n;
}

char *kvi_tool_call_gbnf(kvi_tool_format f, const char *tools_json, size_t len, const char *name,
                         unsigned flags, kvi_error *err)
{
    tg t = { .f = f, .err = err };
    if ((unsigned)f >= KVI_TOOLS_COUNT_ || f == KVI_TOOLS_NONE) {
        err_set(err, KVI_E_INVALID, "tool grammar: format '%s' writes no tool calls",
                kvi_tool_format_name(f));
        return NULL;
    }
    bool oom = false;
    cJSON *tools = tools_json ? kvi_json_parse(tools_json, len, &oom) : NULL;
    if (oom) {
        err_set(err, KVI_E_NOMEM, "tool grammar: out of memory");
        return NULL;
    }
    if (!tools) {
        err_set(err, KVI_E_INVALID, "tool grammar: tools is not valid JSON");
        return NULL;
    }
    int rc = put_tools(&t, tools, name);
    cJSON_Delete(tools);
    if (rc > 0) {
        put_root(&t, flags);
        if (fmt_xml(f)) {
            put_not_containing(&t, "tc-raw", f == KVI_TOOLS_GLM ? "</arg_value>" : "</parameter>");
            gbnf_put(&t.b, "tc-pname ::= [a-zA-Z0-9_.-]{1,64}\n");
        }
        json_schema_put_prims(&t.b, t.prims | JS_WS_COMPACT);
    }
    if (rc > 0 && t.b.oom) err_set(err, KVI_E_NOMEM, "tool grammar: out of memory");
    if (rc <= 0 || t.b.oom) {
        free(t.b.text);
        return NULL;
    }
    return t.b.text;
}
