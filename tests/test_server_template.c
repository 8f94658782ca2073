/*
 * test_server_template.c — chat templates in `kvinfer serve` (stories260K as a
 * child process on a free port):
 *
 *  - --chat-template-file with a template of ../shared/templates (Qwen2.5's):
 *    POST /apply-template answers exactly what `kvinfer template` prints for
 *    the same body (messages, tools, chat_template_kwargs); the stderr log
 *    names the file;
 *  - /v1/chat/completions runs the rendered prompt: prompt_tokens equals the
 *    ids of the rendered text, and greedy text equals /v1/completions given
 *    those ids; a template writing {{ bos_token }} gets the vocabulary's BOS
 *    text, recognised as the BOS id (one token);
 *  - prompt injection: "<s>" / "</s>" inside a message's content stay plain
 *    text (the ids of kvi_tokenize with parse_special off), while the BOS the
 *    template writes is the BOS id; kvi_tokenize_plain itself: no ranges ==
 *    parse_special on, one range over everything == parse_special off, a
 *    range over one occurrence leaves the others special; with
 *    --special-in-content the content's special text is special (HF's ids);
 *  - a template that raises gives HTTP 400 in OpenAI's error shape carrying
 *    its message, on both endpoints; the server keeps serving;
 *  - a GGUF that ships a template (stories260K copied with tokenizer.chat_template
 *    added by the project's GGUF writer): serve logs and uses it without any
 *    flag, /apply-template == `kvinfer template -m` of that file;
 *  - a model without a template (stories260K) keeps the built-in layout: the
 *    log says so, chat completions still answer, /apply-template shows the
 *    built-in layout's text;
 *  - a --chat-template-file that does not parse stops the server at start;
 *  - `kvinfer chat --chat-template-file F`: the first turn prefills exactly the
 *    ids of F's rendering (BOS + the rendered text, the "<s>" typed by the user
 *    as plain text); the second turn reuses cached ids of the first.
 */
#include "testutil.h"

#include "http_util.h"

#include "formats/gguf.h"
#include "kvinfer.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BODY                                                                                            \
    "{\"messages\": [{\"role\": \"system\", \"content\": \"You tell short stories.\"},"                 \
    " {\"role\": \"user\", \"content\": \"Tell me about Lily and  the ball\\n\"}],"                     \
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": " \
    "\"Weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "        \
    "\"string\"}}, \"required\": [\"city\"]}}}],"                                                       \
    " \"chat_template_kwargs\": {\"enable_thinking\": false}, \"max_tokens\": 12, \"temperature\": 0}"

/* The "prompt" of a POST /apply-template answer (malloc'd), NULL unless 200. */
static char *apply_template(int port, const char *body, int *status)
{
    http_resp r = http_request(port, "POST", "/apply-template", NULL, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *p = cJSON_GetObjectItem(j, "prompt");
    char *out = r.status == 200 && cJSON_IsString(p) ? strdup(p->valuestring) : NULL;
    if (r.status != 200) fprintf(stderr, "apply-template %d: %s\n", r.status, r.body ? r.body : "");
    cJSON_Delete(j);
    free(r.body);
    return out;
}

/* Token ids of text by POST /tokenize (no BOS, special text not parsed) as a JSON array (malloc'd). */
static char *tokenize_json(int port, const char *text, int *n)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "content", text);
    char *body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    http_resp r = http_request(port, "POST", "/tokenize", NULL, body);
    free(body);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *t = cJSON_GetObjectItem(j, "tokens");
    *n = cJSON_GetArraySize(t);
    char *out = cJSON_IsArray(t) ? cJSON_PrintUnformatted(t) : NULL;
    cJSON_Delete(j);
    free(r.body);
    return out;
}

/* A non-streamed answer: its JSON (cJSON_Delete), status in *status. */
static cJSON *post_json(int port, const char *path, const char *body, int *status)
{
    http_resp r = http_request(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (r.status != 200 && r.status != 400) fprintf(stderr, "%s %d: %s\n", path, r.status, r.body);
    free(r.body);
    return j;
}

static int prompt_tokens(const cJSON *j)
{
    const cJSON *pt = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens");
    return cJSON_IsNumber(pt) ? pt->valueint : -1;
}

static const char *first_text(const cJSON *j, bool chat)
{
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content")
                          : cJSON_GetObjectItem(c0, "text");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* Qwen2.5's template concatenates content: a list of text parts reaches it
 * joined with "\n" (the same prompt as that string), in chat completions too;
 * image and audio parts, and unknown part types, are a 400 naming the part. */
static void test_content_parts(int port)
{
    int st = 0;
    char *joined = apply_template(
        port, "{\"messages\": [{\"role\": \"user\", \"content\": \"Lily saw\\na cat\"}]}", &st);
    const char *parts = "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                        "\"Lily saw\"}, {\"type\": \"text\", \"text\": \"a cat\"}]}], \"max_tokens\": 2}";
    char *from_parts = apply_template(port, parts, &st);
    CHECK(st == 200 && joined && from_parts && !strcmp(joined, from_parts),
          "parts joined with a newline: '%s' vs '%s'", from_parts ? from_parts : "", joined ? joined : "");
    cJSON *chat = post_json(port, "/v1/chat/completions", parts, &st);
    CHECK(st == 200, "chat completion of content parts");
    cJSON_Delete(chat);
    static const struct {
        const char *part, *says;
    } bad[] = {
        { "{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,AAAA\"}}",
          "this model takes text only: 'messages[0].content[1]' is an image part" },
        { "{\"type\": \"input_audio\", \"input_audio\": {\"data\": \"AAAA\", \"format\": \"wav\"}}",
          "'messages[0].content[1]' is an audio part" },
        { "{\"type\": \"hologram\", \"text\": \"x\"}", "unknown type 'hologram'" },
        { "{\"text\": \"no type\"}", "must be an object with a string \"type\"" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                 "\"look\"}, %s]}]}",
                 bad[i].part);
        for (int ep = 0; ep < 2; ep++) {
            cJSON *j = post_json(port, ep ? "/apply-template" : "/v1/chat/completions", body, &st);
            const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message");
            CHECK(st == 400 && cJSON_IsString(m) && strstr(m->valuestring, bad[i].says),
                  "part %zu: 400 '%s' (%d %s)", i, bad[i].says, st, cJSON_IsString(m) ? m->valuestring : "");
            cJSON_Delete(j);
        }
    }
    free(joined);
    free(from_parts);
}

static void test_shared_template(void)
{
    const char *tmpl = shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    char body_path[512];
    snprintf(body_path, sizeof body_path, "%s", tmp_path("server_template_body.json"));
    CHECK(write_file(body_path, BODY, strlen(BODY)) == 0, "write the body");
    char args[2048], *ref = NULL, *err = NULL;
    snprintf(args, sizeof args, "template -m '%s' --chat-template-file '%s' -f '%s'",
             shared_path("models/stories260K.gguf"), tmpl, body_path);
    CHECK(run_kvinfer(args, &ref, &err) == 0, "kvinfer template: %s", err ? err : "");
    CHECK(ref && strstr(ref, "get_weather") && strstr(ref, "<|im_start|>assistant\n"), "reference rendering");

    test_server s;
    char extra[1024];
    snprintf(extra, sizeof extra, "--chat-template-file '%s'", tmpl);
    CHECK(test_server_start(&s, extra, "server_template_qwen.err"), "server starts with a template file");
    int st = 0;
    char *prompt = apply_template(s.port, BODY, &st);
    CHECK(st == 200 && prompt, "/apply-template answers");
    CHECK(prompt && ref && !strcmp(prompt, ref), "/apply-template == kvinfer template, byte for byte");

    /* the chat request runs exactly the rendered text's ids */
    int n_ids = 0;
    char *ids = prompt ? tokenize_json(s.port, prompt, &n_ids) : NULL;
    CHECK(ids && n_ids > 20, "the rendered prompt tokenizes");
    cJSON *chat = post_json(s.port, "/v1/chat/completions", BODY, &st);
    CHECK(st == 200, "chat completion with the template");
    CHECK(prompt_tokens(chat) == n_ids, "prompt_tokens %d == ids of the rendered prompt %d",
          prompt_tokens(chat), n_ids);
    char comp_body[65536];
    snprintf(comp_body, sizeof comp_body, "{\"prompt\": %s, \"max_tokens\": 12, \"temperature\": 0}",
             ids ? ids : "[]");
    cJSON *comp = post_json(s.port, "/v1/completions", comp_body, &st);
    CHECK(st == 200, "completion of the ids");
    const char *a = first_text(chat, true), *b = first_text(comp, false);
    CHECK(a && b && !strcmp(a, b), "greedy chat text == completion of the rendered ids ('%s' vs '%s')",
          a ? a : "", b ? b : "");
    cJSON_Delete(chat);
    cJSON_Delete(comp);
    free(ids);
    free(prompt);
    test_content_parts(s.port);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    char *log = read_file(tmp_path("server_template_qwen.err"), NULL);
    CHECK(log && strstr(log, "chat template content format: string (detected)"), "the log names the form");
    CHECK(log && strstr(log, "chat template: Jinja from --chat-template-file") && strstr(log, "Qwen2.5"),
          "the log names the template file: %s", log ? log : "");
    free(log);
    free(ref);
    free(err);
}

/* A template of our own: BOS text from the vocabulary, a raise for role "bad". */
static const char own_template[] =
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role == 'ipython' %}{{ raise_exception('role ipython is not allowed here') }}{% endif %}"
    "[{{ m.role | upper }}] {{ m.content | trim }}\n"
    "{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}";

static void test_own_template(void)
{
    char tpath[512];
    snprintf(tpath, sizeof tpath, "%s", tmp_path("server_template_own.jinja"));
    CHECK(write_file(tpath, own_template, strlen(own_template)) == 0, "write the template");
    test_server s;
    char extra[1024];
    snprintf(extra, sizeof extra, "--chat-template-file '%s'", tpath);
    CHECK(test_server_start(&s, extra, "server_template_own.err"), "server starts");
    const char *ok = "{\"messages\": [{\"role\": \"user\", \"content\": \"  Once upon a time  \"}], "
                     "\"max_tokens\": 4, \"temperature\": 0}";
    int st = 0;
    char *prompt = apply_template(s.port, ok, &st);
    CHECK(prompt && !strcmp(prompt, "<s>[USER] Once upon a time\n[ASSISTANT]"), "BOS text and layout: '%s'",
          prompt ? prompt : "");
    /* "<s>" is written by the template: the BOS id, one token */
    int n_rest = 0;
    char *rest = tokenize_json(s.port, "[USER] Once upon a time\n[ASSISTANT]", &n_rest);
    cJSON *chat = post_json(s.port, "/v1/chat/completions", ok, &st);
    CHECK(st == 200 && prompt_tokens(chat) == n_rest + 1, "prompt_tokens %d == 1 (BOS) + %d",
          prompt_tokens(chat), n_rest);
    cJSON_Delete(chat);
    free(rest);
    free(prompt);

    /* special-token text in the content stays text: 1 (BOS) + its plain ids */
    const char *inj = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once <s> upon </s> a time\"}], "
                      "\"max_tokens\": 4, \"temperature\": 0}";
    kvi_error verr = { 0 };
    kvi_model *v = kvi_vocab_load(shared_path("models/stories260K.gguf"), &verr);
    CHECK(v, "vocabulary");
    const char *inj_text = "[USER] Once <s> upon </s> a time\n[ASSISTANT]";
    const int32_t plain_n = v ? kvi_tokenize(v, inj_text, strlen(inj_text), false, false, NULL, 0) : -1;
    const int32_t special_n = v ? kvi_tokenize(v, inj_text, strlen(inj_text), false, true, NULL, 0) : -1;
    CHECK(special_n < plain_n, "the content's special text would be special tokens (%d < %d)", (int)special_n,
          (int)plain_n);
    chat = post_json(s.port, "/v1/chat/completions", inj, &st);
    CHECK(st == 200 && prompt_tokens(chat) == plain_n + 1, "injected text stays plain: %d == 1 + %d",
          prompt_tokens(chat), (int)plain_n);
    cJSON_Delete(chat);
    if (v) {
        const char *t = "<s>a</s>b<s>";
        const size_t tl = strlen(t), all[2] = { 0, strlen(t) }, mid[2] = { 4, 8 };
        int32_t a[64], b[64], c[64];
        int32_t na = kvi_tokenize_plain(v, t, tl, false, NULL, 0, a, 64);
        int32_t nb = kvi_tokenize(v, t, tl, false, true, b, 64);
        CHECK(na > 0 && na == nb && !memcmp(a, b, (size_t)na * sizeof *a), "no ranges == parse_special");
        na = kvi_tokenize_plain(v, t, tl, false, all, 1, a, 64);
        nb = kvi_tokenize(v, t, tl, false, false, b, 64);
        CHECK(na > 0 && na == nb && !memcmp(a, b, (size_t)na * sizeof *a), "all plain == no parse_special");
        int32_t nc = kvi_tokenize_plain(v, t, tl, false, mid, 1, c, 64);
        const int32_t bos = kvi_token_bos(v), eos = kvi_token_eos(v);
        bool has_eos = false;
        for (int32_t i = 0; i < nc && i < 64; i++) has_eos |= c[i] == eos;
        CHECK(nc > 3 && c[0] == bos && c[nc - 1] == bos && !has_eos, "only the middle </s> is plain (%d ids)",
              (int)nc);
        CHECK(kvi_tokenize_plain(v, t, tl, false, (const size_t[2]){ 3, 99 }, 1, a, 64) < 0,
              "a range past the text is refused");
    }
    kvi_model_free(v);

    const char *bad = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"ipython\", "
                      "\"content\": \"x\"}], \"max_tokens\": 4}";
    const char *paths[2] = { "/v1/chat/completions", "/apply-template" };
    for (int i = 0; i < 2; i++) {
        cJSON *e = post_json(s.port, paths[i], bad, &st);
        const cJSON *eo = cJSON_GetObjectItem(e, "error");
        const cJSON *msg = cJSON_GetObjectItem(eo, "message"), *ty = cJSON_GetObjectItem(eo, "type");
        CHECK(st == 400, "%s: a raising template gives 400 (%d)", paths[i], st);
        CHECK(cJSON_IsString(msg) && strstr(msg->valuestring, "role ipython is not allowed here"),
              "%s: the template's message", paths[i]);
        CHECK(cJSON_IsString(ty) && !strcmp(ty->valuestring, "invalid_request_error"), "%s: error type",
              paths[i]);
        cJSON_Delete(e);
    }
    cJSON *again = post_json(s.port, "/v1/chat/completions", ok, &st);
    CHECK(st == 200, "the server keeps serving after a template error");
    cJSON_Delete(again);
    CHECK(test_server_stop(&s) == 0, "server exit status");

    /* --special-in-content: Hugging Face's ids, the content's "<s>" / "</s>" special */
    snprintf(extra, sizeof extra, "--chat-template-file '%s' --special-in-content", tpath);
    CHECK(test_server_start(&s, extra, "server_template_own_sic.err"), "server starts");
    chat = post_json(s.port, "/v1/chat/completions", inj, &st);
    CHECK(st == 200 && prompt_tokens(chat) == special_n + 1, "--special-in-content: %d == 1 + %d",
          prompt_tokens(chat), (int)special_n);
    cJSON_Delete(chat);
    CHECK(test_server_stop(&s) == 0, "server exit status");
}

static void test_fallback(void)
{
    test_server s;
    CHECK(test_server_start(&s, "", "server_template_fallback.err"), "server starts");
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], "
                       "\"max_tokens\": 4, \"temperature\": 0}";
    int st = 0;
    cJSON *chat = post_json(s.port, "/v1/chat/completions", body, &st);
    CHECK(st == 200 && first_text(chat, true), "chat completion with the built-in layout");
    cJSON_Delete(chat);
    char *prompt = apply_template(s.port, body, &st);
    CHECK(st == 200 && prompt && strstr(prompt, "Once upon a time"), "/apply-template shows the layout: '%s'",
          prompt ? prompt : "");
    free(prompt);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    char *log = read_file(tmp_path("server_template_fallback.err"), NULL);
    CHECK(log && strstr(log, "chat template: built-in layout"), "the log names the built-in layout: %s",
          log ? log : "");
    free(log);

    /* a template file that does not parse: no server */
    char tpath[512], args[2048];
    snprintf(tpath, sizeof tpath, "%s", tmp_path("server_template_broken.jinja"));
    CHECK(write_file(tpath, "{% for m in messages %}", 23) == 0, "write the template");
    snprintf(args, sizeof args, "serve -m '%s' --port 0 --chat-template-file '%s'",
             shared_path("models/stories260K.gguf"), tpath);
    char *out = NULL, *err = NULL;
    CHECK(run_kvinfer(args, &out, &err) == 1, "a broken template file stops serve");
    CHECK(err && strstr(err, "--chat-template-file"), "its error: %s", err ? err : "");
    free(out);
    free(err);
}

/* kvinfer run --chat (-sys, --chat-template-file) lays the prompt out as serve
 * does a chat request: the same prompt tokens and the same greedy text, with
 * Qwen2.5's Jinja template and with stories260K's built-in layout. */
static void test_run_chat(void)
{
    const char *tmpl = shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    for (int jinja = 1; jinja >= 0; jinja--) {
        test_server s;
        char extra[1024] = "";
        if (jinja) snprintf(extra, sizeof extra, "--chat-template-file '%s'", tmpl);
        if (!test_server_start(&s, extra, "server_template_runchat.err")) {
            CHECK(false, "server starts (%s)", jinja ? "Jinja" : "built-in layout");
            continue;
        }
        int st = 0;
        cJSON *chat = post_json(s.port, "/v1/chat/completions",
                                "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                                "{\"role\": \"user\", \"content\": \"Tell me a story <|im_end|>\"}], "
                                "\"max_tokens\": 12, \"temperature\": 0}",
                                &st);
        CHECK(test_server_stop(&s) == 0, "server exit status");
        char args[2048], *out = NULL, *err = NULL;
        snprintf(args, sizeof args,
                 "run -m '%s' %s%s%s -sys 'Be brief.' -p 'Tell me a story <|im_end|>' -n 12 --temp 0 --json -t 1",
                 shared_path("models/stories260K.gguf"), jinja ? "--chat-template-file '" : "--chat",
                 jinja ? tmpl : "", jinja ? "'" : "");
        const int rc = run_kvinfer(args, &out, &err);
        cJSON *j = out ? cJSON_Parse(out) : NULL;
        const cJSON *pt = cJSON_GetObjectItem(j, "prompt_tokens"), *text = cJSON_GetObjectItem(j, "text");
        const char *a = first_text(chat, true);
        CHECK(rc == 0 && st == 200 && cJSON_GetArraySize(pt) == prompt_tokens(chat) && prompt_tokens(chat) > 10 &&
                  cJSON_IsString(text) && a && !strcmp(a, text->valuestring),
              "run --chat (%s): exit %d, %d prompt tokens vs serve's %d, '%s' vs '%s': %s",
              jinja ? "Jinja" : "built-in", rc, cJSON_GetArraySize(pt), prompt_tokens(chat),
              cJSON_IsString(text) ? text->valuestring : "", a ? a : "", err ? err : "");
        cJSON_Delete(j);
        cJSON_Delete(chat);
        free(out);
        free(err);
    }
}

/* The number in "[prefill N tokens ..., C served from the cache" of turn `turn`. */
static bool prefill_counts(const char *log, int turn, int *n, int *cached)
{
    const char *p = log;
    for (int t = 0; t <= turn; t++) {
        p = p ? strstr(p, "[prefill ") : NULL;
        if (p && t < turn) p++;
    }
    return p && sscanf(p, "[prefill %d tokens in %*f ms, %d served", n, cached) == 2;
}

static void test_chat_cli(void)
{
    char tpath[512], in[512], out[512], errp[512], cmd[4096];
    snprintf(tpath, sizeof tpath, "%s", tmp_path("chat_template_own.jinja"));
    snprintf(in, sizeof in, "%s", tmp_path("chat_template.in"));
    snprintf(out, sizeof out, "%s", tmp_path("chat_template.out"));
    snprintf(errp, sizeof errp, "%s", tmp_path("chat_template.err"));
    CHECK(write_file(tpath, own_template, strlen(own_template)) == 0, "write the template");
    const char *lines = "Once <s> upon a time\nLily saw a ball\n";
    CHECK(write_file(in, lines, strlen(lines)) == 0, "write the input");
    snprintf(cmd, sizeof cmd,
             "'%s' chat -m '%s' -t 2 --temp 0 -n 4 --chat-template-file '%s' <'%s' >'%s' 2>'%s'", KVI_BIN,
             shared_path("models/stories260K.gguf"), tpath, in, out, errp);
    CHECK(system(cmd) == 0, "kvinfer chat with a template file");
    char *log = read_file(errp, NULL);
    CHECK(log && strstr(log, "template Jinja"), "chat says it uses the Jinja template: %s", log ? log : "");
    kvi_error err = { 0 };
    kvi_model *v = kvi_vocab_load(shared_path("models/stories260K.gguf"), &err);
    CHECK(v, "vocabulary");
    const char *text = "[USER] Once <s> upon a time\n[ASSISTANT]";
    int32_t want = v ? kvi_tokenize(v, text, strlen(text), false, false, NULL, 0) + 1 : -1;
    int n = -1, cached = -1;
    CHECK(log && prefill_counts(log, 0, &n, &cached) && n == want && cached == 0,
          "first turn prefills BOS + the rendered text: %d (want %d)", n, (int)want);
    CHECK(log && prefill_counts(log, 1, &n, &cached) && cached > 0, "second turn reuses the cache (%d)",
          cached);
    kvi_model_free(v);
    free(log);
}

static int add_template(void *w, void *tmpl)
{
    return gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
}

/* stories260K.gguf with tokenizer.chat_template = tmpl, at path. */
static bool write_gguf_with_template(const char *path, const char *tmpl)
{
    return write_gguf_copy(shared_path("models/stories260K.gguf"), path, add_template, (void *)tmpl);
}

static void test_gguf_template(void)
{
    char gpath[512], bpath[512], args[2048];
    snprintf(gpath, sizeof gpath, "%s", tmp_path("stories260K-tmpl.gguf"));
    snprintf(bpath, sizeof bpath, "%s", tmp_path("server_template_gguf_body.json"));
    CHECK(write_gguf_with_template(gpath, own_template), "write a GGUF with a chat template");
    const char *body = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": "
                       "\"user\", \"content\": \"Tom had a dog\"}], \"max_tokens\": 4, \"temperature\": 0}";
    CHECK(write_file(bpath, body, strlen(body)) == 0, "write the body");
    snprintf(args, sizeof args, "template -m '%s' -f '%s'", gpath, bpath);
    char *ref = NULL, *err = NULL;
    CHECK(run_kvinfer(args, &ref, &err) == 0 && ref, "kvinfer template of the GGUF: %s", err ? err : "");
    /* test_server_start serves stories260K: its -m comes first, a second -m replaces it */
    char extra[1024];
    snprintf(extra, sizeof extra, "-m '%s'", gpath);
    test_server s;
    CHECK(test_server_start(&s, extra, "server_template_gguf.err"), "server starts on the GGUF");
    int st = 0;
    char *prompt = apply_template(s.port, body, &st);
    CHECK(prompt && ref && !strcmp(prompt, ref), "/apply-template == kvinfer template: '%s'",
          prompt ? prompt : "");
    CHECK(prompt && !strcmp(prompt, "<s>[SYSTEM] Be brief.\n[USER] Tom had a dog\n[ASSISTANT]"),
          "the model's own template rendered");
    cJSON *chat = post_json(s.port, "/v1/chat/completions", body, &st);
    CHECK(st == 200 && first_text(chat, true), "chat completion with the model's template");
    cJSON_Delete(chat);
    free(prompt);
    CHECK(test_server_stop(&s) == 0, "server exit status");
    char *log = read_file(tmp_path("server_template_gguf.err"), NULL);
    CHECK(log && strstr(log, "chat template: the model's Jinja template"), "the log says the model's: %s",
          log ? log : "");
    free(log);
    free(ref);
    free(err);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_run_chat();
    test_chat_cli();
    test_gguf_template();
    test_fallback();
    test_own_template();
    test_shared_template();
    return test_main_end();
}
