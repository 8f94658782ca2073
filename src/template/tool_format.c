/*
 * tool_format.c — which wire form a chat template's model writes tool calls in,
 * and which special tokens are that form's markers.
 *
 * Data: two constant tables. detect[] holds, per format, substrings that its
 * template text contains when it renders assistant tool calls in that form; the
 * first row whose every needle occurs wins, so a more specific row (DeepSeek
 * V3.1's name-before-separator) stands before a looser one, and a KVI_TOOLS_NONE
 * row stops a template whose own form kvinfer does not parse from matching a
 * looser row. markers[] lists, per format, the special-token texts the model
 * writes as part of a call.
 *
 * Invariants: detection reads only the template text (no rendering), is pure
 * and returns KVI_TOOLS_NONE for a template that renders no tool calls or
 * renders them in a form kvinfer does not parse. A
 * marker is never a general turn delimiter (<|im_end|>, <|eot_id|>), except
 * where the format's calls are closed by one (Harmony's <|call|>).
 */
#include "kvinfer.h"

#include <string.h>

typedef struct {
    kvi_tool_format f;
    const char *needles[3]; /* all must occur; NULL-terminated early */
} detect_row;

static const detect_row detect[] = {
    /* Apriel 1.5 writes <tool_calls>[{...}, ...]</tool_calls>: no form kvinfer parses, though its
     * system prompt names <tool_call></tool_call> as Hermes does */
    { KVI_TOOLS_NONE, { "<tool_calls>[", NULL } },
    { KVI_TOOLS_HARMONY, { "<|channel|>", "functions.", "<|call|>" } },
    { KVI_TOOLS_DEEPSEEK_V31,
      { "<｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>", NULL } },
    { KVI_TOOLS_DEEPSEEK_V31,
      { "<｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>", NULL } },
    { KVI_TOOLS_DEEPSEEK_R1, { "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", NULL } },
    { KVI_TOOLS_KIMI_K2, { "<|tool_calls_section_begin|>", "<|tool_call_argument_begin|>", NULL } },
    { KVI_TOOLS_COMMAND_R, { "<|START_ACTION|>", "<|END_ACTION|>", NULL } },
    { KVI_TOOLS_MISTRAL_ARGS, { "[TOOL_CALLS]", "[ARGS]", NULL } },
    { KVI_TOOLS_MISTRAL, { "[TOOL_CALLS]", NULL } },
    { KVI_TOOLS_GRANITE, { "<|tool_call|>", NULL } },
    { KVI_TOOLS_QWEN3_CODER, { "<tool_call>", "<function=", "<parameter=" } },
    { KVI_TOOLS_GLM, { "<tool_call>", "<arg_key>", "<arg_value>" } },
    { KVI_TOOLS_HERMES, { "<tool_call>", "</tool_call>", "tool_calls" } },
    { KVI_TOOLS_LLAMA3, { "\"parameters\": ", "tool_calls", "<|eot_id|>" } },
};

typedef struct {
    kvi_tool_format f;
    const char *texts[8]; /* NULL-terminated early */
} marker_row;

static const marker_row markers[] = {
    { KVI_TOOLS_HERMES, { "<tool_call>", "</tool_call>", NULL } },
    { KVI_TOOLS_QWEN3_CODER, { "<tool_call>", "</tool_call>", NULL } },
    { KVI_TOOLS_LLAMA3, { "<|python_tag|>", NULL } },
    { KVI_TOOLS_MISTRAL, { "[TOOL_CALLS]", NULL } },
    { KVI_TOOLS_MISTRAL_ARGS, { "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", NULL } },
    { KVI_TOOLS_HARMONY,
      { "<|channel|>", "<|message|>", "<|constrain|>", "<|start|>", "<|end|>", "<|call|>", NULL } },
    { KVI_TOOLS_DEEPSEEK_R1,
      { "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>", NULL } },
    { KVI_TOOLS_DEEPSEEK_V31,
      { "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>", NULL } },
    { KVI_TOOLS_GRANITE, { "<|tool_call|>", NULL } },
    { KVI_TOOLS_COMMAND_R,
      { "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>",
        "<|END_THINKING|>", NULL } },
    { KVI_TOOLS_KIMI_K2,
      { "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", NULL } },
    { KVI_TOOLS_GLM,
      { "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", NULL } },
};

static const char *const names[KVI_TOOLS_COUNT_] = {
    [KVI_TOOLS_NONE] = "none",
    [KVI_TOOLS_HERMES] = "hermes",
    [KVI_TOOLS_QWEN3_CODER] = "qwen3-coder",
    [KVI_TOOLS_LLAMA3] = "llama3",
    [KVI_TOOLS_MISTRAL] = "mistral",
    [KVI_TOOLS_MISTRAL_ARGS] = "mistral-args",
    [KVI_TOOLS_HARMONY] = "harmony",
    [KVI_TOOLS_DEEPSEEK_R1] = "deepseek-r1",
    [KVI_TOOLS_DEEPSEEK_V31] = "deepseek-v3.1",
    [KVI_TOOLS_GRANITE] = "granite",
    [KVI_TOOLS_COMMAND_R] = "command-r",
    [KVI_TOOLS_KIMI_K2] = "kimi-k2",
    [KVI_TOOLS_GLM] = "glm",
};

kvi_tool_format kvi_tool_format_of(const char *template_text)
{
    if (!template_text) return KVI_TOOLS_NONE;
    for (size_t r = 0; r < sizeof detect / sizeof detect[0]; r++) {
        bool all = true;
        for (int k = 0; k < 3 && detect[r].needles[k] && all; k++)
            all = strstr(template_text, detect[r].needles[k]) != NULL;
        if (all) return detect[r].f;
    }
    return KVI_TOOLS_NONE;
}

const char *kvi_tool_format_name(kvi_tool_format f)
{
    return (unsigned)f < KVI_TOOLS_COUNT_ && names[f] ? names[f] : "none";
}

bool kvi_template_reasons(const char *template_text)
{
    return template_text && strstr(template_text, "</think>") != NULL;
}

bool kvi_tool_format_marker(kvi_tool_format f, bool reasoning, const char *special_text)
{
    if (!special_text) return false;
    if (reasoning && (!strcmp(special_text, "<think>") || !strcmp(special_text, "</think>"))) return true;
    for (size_t r = 0; r < sizeof markers / sizeof markers[0]; r++) {
        if (markers[r].f != f) continue;
        for (int k = 0; k < 8 && markers[r].texts[k]; k++)
            if (!strcmp(markers[r].texts[k], special_text)) return true;
    }
    return false;
}
