/*
 * test_agents.c — more agent clients against `kvinfer serve` on stories260K
 * with Qwen2.5's chat template (Hermes/Qwen tool calls), from the npm packages
 * pinned in tests/agents/package.json (installed by scripts/deps.sh with npm ci;
 * nothing is downloaded at run time):
 *
 *   1. The Vercel AI SDK (tests/agents/ai.mjs): generateText, streamText and a
 *      required tool call (plain, with its result sent back, and streamed), through the
 *      openai-compatible provider and @ai-sdk/openai (chat completions), the
 *      Responses API and @ai-sdk/anthropic (Messages). Its request bodies go
 *      to testtmp/agents_ai_requests.txt.
 *   2. Qwen Code (`qwen "Say hi"`), twice: over OpenAI chat completions
 *      (content as a list of text parts, 11 function tools, stream with
 *      include_usage; its own request log, --openai-logging, in
 *      testtmp/agents_qwen_log) and over the Messages API (--auth-type
 *      anthropic: thinking budget_tokens 32000 over max_tokens 8000 under the
 *      anthropic-beta interleaved-thinking header, tools, cache_control). HOME is a
 *      temporary folder whose settings turn off usage statistics, telemetry,
 *      auto-update and the background memory extractor, so nothing leaves
 *      127.0.0.1. The tiny model never ends a turn, so the server caps every
 *      answer at 32 tokens (-n 32); Qwen Code then raises max_tokens and asks
 *      to continue, and prints the answers joined. Its first request is sent
 *      again (not streamed): the printed answer must begin with that text (the
 *      server's seed is fixed for its lifetime, so the same prompt gives the
 *      same tokens).
 *   3. pi (@mariozechner/pi-coding-agent, `pi -p 'Say hi'`) on the same
 *      server through a models.json provider of each API it speaks
 *      (openai-completions: store false, max_completion_tokens;
 *      openai-responses: prompt_cache_key, store false; anthropic-messages),
 *      PI_OFFLINE=1 (no update check, install ping or tool download). The
 *      extension tests/agents/pi_record.mjs writes each payload pi builds to
 *      testtmp/agents_pi_requests.txt; the first is sent again (not streamed)
 *      and pi must have printed exactly its text.
 *
 * Every request in each server's log must have been answered 200; the fields
 * a route does not know (accepted, named in the log line) are printed. Skips (77) with the reason when node or the packages are
 * missing, and in sanitizer builds (the clients, not the C code, are under
 * test, and the ~21k-token prompt of Qwen Code is slow there).
 */
#include "testutil.h"

#include "http_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#ifndef KVI_AGENTS_DIR
#define KVI_AGENTS_DIR "tests/agents"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif

/* Every request line of a server's log (test_server_start_logged) to path was
 * answered 200; n_min lines at least. The fields a route does not know are
 * accepted and named in the line (unknown=...): those are printed, as a
 * record of what the clients send beyond what kvinfer reads. */
static void check_log(const char *err_name, const char *path, int n_min)
{
    char *log = read_file(tmp_path(err_name), NULL);
    CHECK(log != NULL, "%s read", err_name);
    int n = 0;
    for (const char *p = log ? strstr(log, path) : NULL; p; p = strstr(p + 1, path)) {
        const char *end = strchr(p, '\n');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        CHECK(strstr(line, " 200 ") != NULL, "answered 200: %s", line);
        const char *unknown = strstr(line, " unknown=");
        if (unknown) printf("%s: accepted without effect:%s\n", path, unknown);
        n++;
    }
    CHECK(n >= n_min, "%s: %d requests to %s (at least %d)", err_name, n, path, n_min);
    free(log);
}

/* Starts a server with flags and Qwen2.5's template, its request log in
 * tmp_path(err_name). */
static void start_server(test_server *s, const char *flags, const char *err_name)
{
    char extra[1024];
    snprintf(extra, sizeof extra, "%s --chat-template-file '%s'", flags,
             shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    CHECK(test_server_start_logged(s, extra, err_name), "server starts (%s)", flags);
}

static void ai_sdk(void)
{
    test_server s;
    start_server(&s, "-c 4096", "agents_ai.err");
    const char *dump = tmp_path("agents_ai_requests.txt");
    remove(dump);
    setenv("KVI_AGENTS_DUMP", dump, 1);
    node_script_check(KVI_NODE_BIN, KVI_AGENTS_DIR, "ai.mjs", s.port, 16);
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    check_log("agents_ai.err", " POST /v1/", 20);
}

/* The name of the oldest file in dir (Qwen Code's log names begin with an ISO
 * time), malloc'd; NULL when there is none. */
static char *oldest_file(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *best = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || (best && strcmp(e->d_name, best) >= 0)) continue;
        free(best);
        best = strdup(e->d_name);
    }
    closedir(d);
    return best;
}

static bool write_settings(const char *home)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/.qwen", home);
    mkdir(home, 0700);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/.qwen/settings.json", home);
    static const char text[] = "{\n"
                               "  \"general\": {\"enableAutoUpdate\": false},\n"
                               "  \"privacy\": {\"usageStatisticsEnabled\": false},\n"
                               "  \"telemetry\": {\"enabled\": false},\n"
                               "  \"memory\": {\"enableManagedAutoMemory\": false}\n"
                               "}\n";
    return write_file(path, text, sizeof text - 1) == 0;
}

/* A growing string: s (malloc'd, NUL-terminated) holds n bytes; NULL when empty. */
typedef struct sbuf_t {
    char *s;
    size_t n;
} sbuf_t;

static void add_bytes(sbuf_t *b, const char *t, size_t n)
{
    char *p = realloc(b->s, b->n + n + 1);
    if (!p) return;
    memcpy(p + b->n, t, n);
    p[b->n + n] = 0;
    b->s = p;
    b->n += n;
}

/* Appends text (a string item) to b, when it is one. */
static void add_text(sbuf_t *b, const cJSON *text)
{
    if (cJSON_IsString(text)) add_bytes(b, text->valuestring, strlen(text->valuestring));
}

/* The answer's text on route path: chat completions' message content, the
 * Responses API's output_text parts, the Messages API's text blocks. */
static void answer_text(const char *path, const cJSON *a, sbuf_t *b)
{
    if (!strcmp(path, "/v1/chat/completions")) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a, "choices"), 0), "message");
        add_text(b, cJSON_GetObjectItemCaseSensitive(msg, "content"));
        return;
    }
    const bool responses = !strcmp(path, "/v1/responses");
    const cJSON *item, *part;
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(a, responses ? "output" : "content"))
    {
        if (!responses) {
            if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(item, "type")) &&
                !strcmp(cJSON_GetObjectItemCaseSensitive(item, "type")->valuestring, "text"))
                add_text(b, cJSON_GetObjectItemCaseSensitive(item, "text"));
            continue;
        }
        cJSON_ArrayForEach(part, cJSON_GetObjectItemCaseSensitive(item, "content"))
        {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
            if (cJSON_IsString(t) && !strcmp(t->valuestring, "output_text"))
                add_text(b, cJSON_GetObjectItemCaseSensitive(part, "text"));
        }
    }
}

/* req (a client's streamed request body, consumed) sent again to path without
 * stream: the text of the answer (malloc'd; NULL on failure). who sent it is
 * printed with the shape of the body. */
static char *send_again(int port, const char *path, cJSON *req, const char *who)
{
    printf("%s sent %s:", who, path);
    for (const cJSON *f = req ? req->child : NULL; f; f = f->next)
        printf(cJSON_IsArray(f) ? " %s[%d]" : " %s", f->string, cJSON_GetArraySize(f));
    printf("\n");
    cJSON_DeleteItemFromObjectCaseSensitive(req, "stream_options");
    cJSON_DeleteItemFromObjectCaseSensitive(req, "stream");
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    http_resp r = http_request(port, "POST", path, NULL, body);
    free(body);
    CHECK(r.status == 200, "%s's first request again: HTTP %d", who, r.status);
    cJSON *answer = cJSON_Parse(r.body ? r.body : "");
    free(r.body);
    sbuf_t b = { 0 };
    answer_text(path, answer, &b);
    cJSON_Delete(answer);
    return b.s;
}

/* The text of the first request in Qwen Code's log, sent again without stream
 * (malloc'd; NULL on failure). */
static char *first_request_again(int port, const char *logdir)
{
    char *name = oldest_file(logdir);
    CHECK(name != NULL, "Qwen Code logged its requests in %s", logdir);
    if (!name) return NULL;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", logdir, name);
    free(name);
    cJSON *log = load_json(path);
    cJSON *req = cJSON_DetachItemFromObjectCaseSensitive(log, "request");
    cJSON_Delete(log);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages");
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(last, "content"), 0);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    CHECK(cJSON_IsString(text) && strstr(text->valuestring, "Say hi"),
          "the prompt is the last message's first text part");
    return send_again(port, "/v1/chat/completions", req, "Qwen Code");
}

/* cmd's standard output (malloc'd), *rc its exit status. */
static char *run_capture(const char *cmd, int *rc)
{
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "%.60s... runs", cmd);
    sbuf_t b = { 0 };
    char buf[4096];
    for (size_t got; p && (got = fread(buf, 1, sizeof buf, p)) > 0;) add_bytes(&b, buf, got);
    *rc = p ? pclose(p) : -1;
    return b.s ? b.s : strdup("");
}

/* Runs `qwen 'Say hi'` in the folders under testtmp against port with auth
 * ("openai": chat completions, its requests logged in logdir; "anthropic":
 * Messages); CHECKs its exit status and a result without an error, and
 * returns the printed answer (malloc'd) or NULL. */
static char *run_qwen(int port, const char *auth, const char *logdir)
{
    char home[1024], work[1024], cmd[8192], env[1024];
    snprintf(home, sizeof home, "%s", tmp_path("agents_qwen_home"));
    snprintf(work, sizeof work, "%s", tmp_path("agents_qwen_work"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", home, work, logdir);
    CHECK(system(cmd) == 0, "old folders removed");
    mkdir(work, 0700);
    CHECK(write_settings(home), "settings.json written");
    if (!strcmp(auth, "openai"))
        snprintf(env, sizeof env,
                 "OPENAI_BASE_URL=http://127.0.0.1:%d/v1 OPENAI_API_KEY=none OPENAI_MODEL=stories260K", port);
    else
        snprintf(env, sizeof env,
                 "ANTHROPIC_BASE_URL=http://127.0.0.1:%d ANTHROPIC_API_KEY=none ANTHROPIC_MODEL=stories260K",
                 port);
    snprintf(
        cmd, sizeof cmd,
        "cd '%s' && HOME='%s' QWEN_HOME='%s/.qwen' %s timeout 300 '%s' "
        "'%s/node_modules/@qwen-code/qwen-code/cli.js' --auth-type %s --system-prompt 'You are a helpful "
        "assistant.' --openai-logging --openai-logging-dir '%s' -o json 'Say hi' </dev/null 2>'%s'",
        work, home, home, env, KVI_NODE_BIN, KVI_AGENTS_DIR, auth, logdir,
        tmp_path("agents_qwen_stderr.txt"));
    int rc = 0;
    char *out = run_capture(cmd, &rc);
    CHECK(rc == 0, "qwen --auth-type %s: exit status %d: %s", auth, rc, out ? out : "");
    /* -o json: an array of events; the last is the result */
    cJSON *events = cJSON_Parse(out ? out : "");
    free(out);
    const cJSON *result = cJSON_GetArrayItem(events, cJSON_GetArraySize(events) - 1);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(result, "result");
    const bool ok =
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(result, "is_error")) && cJSON_IsString(text);
    CHECK(ok, "qwen --auth-type %s: a result without an error", auth);
    char *answer = ok ? strdup(text->valuestring) : NULL;
    printf("Qwen Code (%s) printed: %s\n", auth, answer ? answer : "(none)");
    cJSON_Delete(events);
    return answer;
}

/* pi (pi -p, its payloads recorded by the extension pi_record.mjs) against
 * port over api ("openai-completions", "openai-responses",
 * "anthropic-messages", the model provider in its models.json, which route
 * path serves): the printed answer is the server's text for its request. */
static void run_pi(int port, const char *api, const char *path)
{
    char dir[1024], work[1024], file[1100], cmd[8192], text[1024];
    const char *dump = tmp_path("agents_pi_requests.txt");
    snprintf(dir, sizeof dir, "%s", tmp_path("agents_pi_home"));
    snprintf(work, sizeof work, "%s", tmp_path("agents_pi_work"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", dir, work, dump);
    CHECK(system(cmd) == 0, "old folders removed");
    mkdir(dir, 0700);
    mkdir(work, 0700);
    snprintf(file, sizeof file, "%s/models.json", dir);
    /* Anthropic's base URL has no /v1 (the client adds /v1/messages) */
    const int n = snprintf(text, sizeof text,
                           "{\"providers\": {\"kvinfer\": {\"baseUrl\": \"http://127.0.0.1:%d%s\", \"api\": "
                           "\"%s\", \"apiKey\": \"none\", \"models\": [{\"id\": \"stories260K\"}]}}}\n",
                           port, strcmp(api, "anthropic-messages") ? "/v1" : "", api);
    CHECK(n > 0 && (size_t)n < sizeof text && write_file(file, text, (size_t)n) == 0, "models.json written");
    /* PI_OFFLINE: no update check, no install ping, no tool download */
    snprintf(
        cmd, sizeof cmd,
        "cd '%s' && HOME='%s' PI_CODING_AGENT_DIR='%s' PI_OFFLINE=1 KVI_AGENTS_DUMP='%s' timeout 300 '%s' "
        "'%s/node_modules/@mariozechner/pi-coding-agent/dist/cli.js' -p --no-session -e "
        "'%s/pi_record.mjs' --provider kvinfer --model stories260K 'Say hi' </dev/null 2>'%s'",
        work, dir, dir, dump, KVI_NODE_BIN, KVI_AGENTS_DIR, KVI_AGENTS_DIR, tmp_path("agents_pi_stderr.txt"));
    int rc = 0;
    char *out = run_capture(cmd, &rc);
    CHECK(rc == 0, "pi over %s: exit status %d: %s", api, rc, out);
    printf("pi (%s) printed: %s", api, out);
    /* the first payload pi sent, again */
    char *lines = read_file(dump, NULL);
    char *nl = lines ? strchr(lines, '\n') : NULL;
    if (nl) *nl = 0;
    char who[64];
    snprintf(who, sizeof who, "pi (%s)", api);
    char *first = send_again(port, path, cJSON_Parse(lines ? lines : ""), who);
    free(lines);
    size_t len = strlen(out);
    while (len && out[len - 1] == '\n') out[--len] = 0; /* pi ends the answer with a newline */
    CHECK(first && first[0] && !strcmp(out, first), "pi over %s printed the server's text %s", api,
          first ? first : "(none)");
    free(first);
    free(out);
}

static void cli_agents(void)
{
    test_server s;
    start_server(&s, "-c 65536 --parallel 2 -n 32", "agents_qwen.err");
    const char *logdir = tmp_path("agents_qwen_log");
    char *answer = run_qwen(s.port, "openai", logdir);
    char *first = first_request_again(s.port, logdir);
    CHECK(answer && first && first[0] && !strncmp(answer, first, strlen(first)),
          "the printed answer %s begins with the server's text %s", answer ? answer : "(none)",
          first ? first : "(none)");
    free(first);
    free(answer);
    /* the Messages API: thinking budget_tokens 32000 over max_tokens 8000
     * under anthropic-beta interleaved-thinking-2025-05-14, tools, cache_control */
    answer = run_qwen(s.port, "anthropic", logdir);
    CHECK(answer && answer[0], "an answer over /v1/messages");
    free(answer);
    run_pi(s.port, "openai-completions", "/v1/chat/completions");
    run_pi(s.port, "openai-responses", "/v1/responses");
    run_pi(s.port, "anthropic-messages", "/v1/messages");
    CHECK(test_server_stop(&s) == 0, "server stops cleanly");
    check_log("agents_qwen.err", " POST /v1/chat/completions ", 4);
    check_log("agents_qwen.err", " POST /v1/messages ", 4);
    check_log("agents_qwen.err", " POST /v1/responses ", 2);
}

#if defined(__SANITIZE_ADDRESS__)
static const bool sanitizer_build = true;
#else
static const bool sanitizer_build = false;
#endif

int main(void)
{
    if (sanitizer_build) {
        printf("skipped: agent clients are not run in sanitizer builds (the clients are under test, and Qwen "
               "Code's "
               "~21k-token prompt is slow there)\n");
        return 77;
    }
    if (!node_ready(KVI_NODE_BIN, KVI_AGENTS_DIR, "node_modules/ai/package.json",
                    "ai, @ai-sdk/*, @qwen-code/qwen-code and @mariozechner/pi-coding-agent"))
        return 77;
    ai_sdk();
    cli_agents();
    return test_main_end();
}
