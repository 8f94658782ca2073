/*
 * server_log.c — the request log: one line per request that reached a route,
 * written through the sink in srv_config (log_fn; NULL: nothing, the library
 * never prints), as text or as one JSON object.
 *
 * A request's record (srv_log_rec) lives in its connection's context from
 * routing on; it is bound to the connection thread (libmicrohttpd runs one
 * thread per connection and calls the handler on it), so the parser and the
 * responders fill it without a parameter: srv_log_unknown adds unrecognised
 * field names, the responders the status. A generation that was submitted
 * takes the record (srv_log_take: handed); it is written when the srv_req is
 * freed, after both the engine and the connection let go of it, with the
 * tokens and the finish. Any other request's record is written when its route
 * returns (srv_log_end).
 *
 * Invariants: every string in a record is printable ASCII without spaces
 * (other bytes become '?'), so a client cannot forge or split log lines; the
 * lists (unknown names, left out, notes) stay within their arrays, name each
 * entry once and end with "..." when names did not fit.
 *
 * Text: "TIME ID METHOD PATH STATUS CLIENT [prompt=N cached=N gen=N ttft_ms=X]
 * ms=X [finish=F] [unknown=a,b] [left_out=c,d] [notes=e]" (ID "-" outside
 * generations; left_out: what the route dropped from the request, e.g. the
 * hosted tools of /v1/responses; notes: how it was taken, e.g.
 * special_text_recognised); JSON: the same keys, null where absent, the lists
 * arrays.
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* The known body fields. llama.cpp's sampler fields are parsed by
 * server_sampling.c; kvinfer's own: speculative, ignore_eos, grammar. */
#define SRV_FIELDS_COMMON                                                                                   \
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",               \
        "repeat_penalty", "presence_penalty", "frequency_penalty", "seed", "n", "stream", "stream_options", \
        "ignore_eos", "speculative", "stop", "logprobs", "logit_bias", "grammar", "response_format",        \
        "typical_p", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base",              \
        "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability",             \
        "xtc_threshold", "top_n_sigma", "dynatemp_range", "dynatemp_exponent", "repeat_last_n", "min_keep", \
        "samplers", "n_probs", "lora", "context_policy"

/* "suffix" (with "input_extra") asks for fill in the middle (server_infill.c) */
static const char *const completions_names[] = { SRV_FIELDS_COMMON, "prompt", "suffix", "input_extra" };
/* llama.cpp's /infill: its pieces and n_predict (max_tokens) */
static const char *const infill_names[] = { SRV_FIELDS_COMMON, "prompt",      "input_prefix",
                                            "input_suffix",    "input_extra", "n_predict" };
/* the Jinja template also reads chat_template_kwargs, add_generation_prompt
 * and continue_final_message from the body (src/template/template.c) */
static const char *const chat_names[] = { SRV_FIELDS_COMMON,       "messages",
                                          "top_logprobs",          "tools",
                                          "tool_choice",           "parallel_tool_calls",
                                          "chat_template_kwargs",  "add_generation_prompt",
                                          "continue_final_message" };

const srv_field_set srv_fields_completions = { completions_names,
                                               sizeof completions_names / sizeof *completions_names };
const srv_field_set srv_fields_chat = { chat_names, sizeof chat_names / sizeof *chat_names };
const srv_field_set srv_fields_infill = { infill_names, sizeof infill_names / sizeof *infill_names };

static _Thread_local srv_log_rec *tl_rec;

srv_log_rec *srv_log_current(void) { return tl_rec; }

/* Copies s into dst[cap] with bytes outside '!'..'~' as '?'. */
static void copy_clean(char *dst, size_t cap, const char *s)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < cap; i++) dst[i] = s[i] > ' ' && s[i] <= '~' ? s[i] : '?';
    dst[i] = 0;
}

static void client_address(struct MHD_Connection *con, char *out, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        con ? MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS) : NULL;
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    snprintf(out, cap, "-");
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out, (socklen_t)cap);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out, (socklen_t)cap);
}

void srv_log_begin(srv_log_rec *rec, struct MHD_Connection *con, const char *method, const char *url)
{
    memset(rec, 0, sizeof *rec);
    rec->t0 = kvi_time_ms();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    rec->wall0 = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    copy_clean(rec->method, sizeof rec->method, method);
    copy_clean(rec->path, sizeof rec->path, url);
    client_address(con, rec->client, sizeof rec->client);
    rec->ttft_ms = -1;
    tl_rec = rec;
}

void srv_log_end(srv_server *srv, srv_log_rec *rec)
{
    if (!rec->handed) srv_log_write(srv, rec);
    tl_rec = NULL;
}

static bool in_sets(const char *name, const srv_field_set *sets, int n)
{
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < sets[k].n; i++)
            if (!strcmp(name, sets[k].names[i])) return true;
    return false;
}

/* Appends name (cleaned) to the comma-separated list[cap] unless it is there;
 * once full, ends it with "..." and keeps nothing more. */
static void list_add(char *list, size_t cap, const char *raw)
{
    char name[64];
    copy_clean(name, sizeof name, raw);
    size_t len = strlen(list);
    if (len >= 3 && !strcmp(list + len - 3, "...")) return;
    const size_t nl = strlen(name);
    for (const char *p = list; *p;) { /* each name once */
        const char *c = strchr(p, ',');
        const size_t k = c ? (size_t)(c - p) : strlen(p);
        if (k == nl && !memcmp(p, name, nl)) return;
        p += k + (c != NULL);
    }
    const size_t need = len + (len > 0) + nl + 1;
    if (need + 4 > cap) { /* room for ",..." stays */
        snprintf(list + len, cap - len, "%s...", len ? "," : "");
        return;
    }
    snprintf(list + len, cap - len, "%s%s", len ? "," : "", name);
}

void srv_log_unknown(const cJSON *obj, const srv_field_set *sets, int n)
{
    srv_log_rec *rec = tl_rec;
    if (!rec || !cJSON_IsObject(obj)) return;
    for (const cJSON *e = obj->child; e; e = e->next)
        if (e->string && !in_sets(e->string, sets, n)) list_add(rec->unknown, sizeof rec->unknown, e->string);
}

void srv_log_left_out(const char *name)
{
    if (tl_rec) list_add(tl_rec->left_out, sizeof tl_rec->left_out, name);
}

void srv_log_note(const char *word)
{
    if (tl_rec) list_add(tl_rec->notes, sizeof tl_rec->notes, word);
}

void srv_log_take(srv_req *r)
{
    if (!tl_rec) return;
    r->log = *tl_rec;
    snprintf(r->log.id, sizeof r->log.id, "%s", r->id);
    r->log.handed = true;
    tl_rec->handed = true;
}

static const char *finish_word(kvi_finish f)
{
    return f == KVI_FINISH_STOP        ? "stop"
           : f == KVI_FINISH_LENGTH    ? "length"
           : f == KVI_FINISH_CANCELLED ? "cancelled"
                                       : "error";
}

void srv_log_request(srv_req *r)
{
    if (!r->log.handed) return;
    srv_log_rec *rec = &r->log;
    rec->gen = true;
    rec->n_prompt = r->ch[0].usage.prompt_tokens;
    rec->n_cached = r->ch[0].usage.cached_tokens;
    for (int i = 0; i < r->p.n; i++) rec->n_gen += r->ch[i].usage.completion_tokens;
    rec->ttft_ms = r->ch[0].n_tokens > 0 ? r->ch[0].usage.ttft_ms : -1;
    rec->finish = r->error ? "error" : finish_word(r->ch[0].finish);
    srv_log_write(r->srv, rec);
}

/* "2026-01-02T03:04:05.678Z" */
static void iso_time(double wall, char *out, size_t cap)
{
    const time_t sec = (time_t)wall;
    struct tm tm;
    gmtime_r(&sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%03dZ", day, (int)((wall - (double)sec) * 1000.0));
}

/* o[key]: the names of a comma-separated list, as an array. */
static void add_names(cJSON *o, const char *key, const char *list)
{
    cJSON *u = cJSON_AddArrayToObject(o, key);
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        const size_t n = c ? (size_t)(c - p) : strlen(p);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        cJSON_AddItemToArray(u, cJSON_CreateString(name));
        p += n + (c != NULL);
    }
}

static char *json_line(const srv_log_rec *rec, const char *when, double ms)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "time", when);
    if (rec->id[0])
        cJSON_AddStringToObject(o, "id", rec->id);
    else
        cJSON_AddNullToObject(o, "id");
    cJSON_AddStringToObject(o, "method", rec->method);
    cJSON_AddStringToObject(o, "path", rec->path);
    cJSON_AddNumberToObject(o, "status", rec->status);
    cJSON_AddStringToObject(o, "client", rec->client);
    const char *keys[] = { "prompt_tokens", "cached_tokens", "completion_tokens" };
    const int32_t vals[] = { rec->n_prompt, rec->n_cached, rec->n_gen };
    for (int i = 0; i < 3; i++)
        if (rec->gen)
            cJSON_AddNumberToObject(o, keys[i], vals[i]);
        else
            cJSON_AddNullToObject(o, keys[i]);
    if (rec->gen && rec->ttft_ms >= 0)
        cJSON_AddNumberToObject(o, "ttft_ms", (double)(int64_t)(rec->ttft_ms * 1000.0) / 1000.0);
    else
        cJSON_AddNullToObject(o, "ttft_ms");
    cJSON_AddNumberToObject(o, "duration_ms", (double)(int64_t)(ms * 1000.0) / 1000.0);
    if (rec->finish)
        cJSON_AddStringToObject(o, "finish_reason", rec->finish);
    else
        cJSON_AddNullToObject(o, "finish_reason");
    add_names(o, "unknown_fields", rec->unknown);
    add_names(o, "left_out", rec->left_out);
    add_names(o, "notes", rec->notes);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

void srv_log_write(srv_server *srv, const srv_log_rec *rec)
{
    if (!srv->cfg.log_fn) return;
    char when[40];
    iso_time(rec->wall0, when, sizeof when);
    const double ms = kvi_time_ms() - rec->t0;
    if (srv->cfg.log_json) {
        char *s = json_line(rec, when, ms);
        if (s) srv->cfg.log_fn(srv->cfg.log_user, s);
        cJSON_free(s);
        return;
    }
    char line[1024], gen[160] = "", ttft[32] = "-";
    if (rec->gen) {
        if (rec->ttft_ms >= 0) snprintf(ttft, sizeof ttft, "%.1f", rec->ttft_ms);
        snprintf(gen, sizeof gen, " prompt=%d cached=%d gen=%d ttft_ms=%s", (int)rec->n_prompt,
                 (int)rec->n_cached, (int)rec->n_gen, ttft);
    }
    snprintf(line, sizeof line, "%s %s %s %s %d %s%s ms=%.1f%s%s%s%s%s%s%s%s", when,
             rec->id[0] ? rec->id : "-", rec->method, rec->path, rec->status, rec->client, gen, ms,
             rec->finish ? " finish=" : "", rec->finish ? rec->finish : "",
             rec->unknown[0] ? " unknown=" : "", rec->unknown, rec->left_out[0] ? " left_out=" : "",
             rec->left_out, rec->notes[0] ? " notes=" : "", rec->notes);
    srv->cfg.log_fn(srv->cfg.log_user, line);
}
