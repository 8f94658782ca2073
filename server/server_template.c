/*
 * server_template.c — the chat template of `kvinfer serve`: the model's Jinja
 * template (tokenizer.chat_template), or one given with --chat-template-file,
 * parsed once at start and rendered for each /v1/chat/completions and
 * /apply-template body. A model that ships no template keeps the built-in
 * layouts of kvi_chat_apply (src/tokenizer/chat_template.c).
 *
 * Prompt injection: the rendered prompt is tokenized with the special tokens
 * the template writes recognised, but special-token text that came from the
 * request (a message's content, a tool result, arguments, any string of the
 * body) stays plain text. When some string of the body holds special-token
 * text, the body is rendered a second time with each such occurrence wrapped
 * in two private-use markers (U+E000 ... U+E001); with the markers removed
 * that rendering must equal the real one byte for byte (a template whose
 * output depends on the markers, or a body that holds them itself, fails the
 * check), and then the marked ranges are the plain ones (kvi_tokenize_plain).
 * When the check fails the prompt is tokenized as Hugging Face does (special
 * text recognised everywhere) and the request log line says so (notes=
 * special_text_recognised); that is also
 * what --special-in-content (cfg.special_in_content) asks for.
 */
#include "server/server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text of a vocabulary token (bos/eos for the template), NULL when none. */
static char *token_text(const kvi_model *m, int32_t id)
{
    if (id < 0) return NULL;
    char buf[256];
    int32_t n = kvi_token_to_piece(m, id, buf, sizeof buf, true);
    if (n < 0 || (size_t)n >= sizeof buf) return NULL;
    buf[n] = 0;
    return strdup(buf);
}

/* The texts of the vocabulary's special tokens: those shown only when
 * render_special (control tokens, BOS/EOS ...). */
static int collect_special(srv_server *srv)
{
    const int32_t nv = kvi_n_vocab(srv->m);
    for (int32_t id = 0; id < nv; id++) {
        char plain[8], full[256];
        int32_t np = kvi_token_to_piece(srv->m, id, plain, sizeof plain, false);
        int32_t nf = kvi_token_to_piece(srv->m, id, full, sizeof full, true);
        if (np != 0 || nf <= 0 || (size_t)nf >= sizeof full) continue;
        char **ns = realloc(srv->special, ((size_t)srv->n_special + 1) * sizeof *ns);
        if (!ns) return KVI_E_NOMEM;
        srv->special = ns;
        full[nf] = 0;
        if (!(ns[srv->n_special] = strdup(full))) return KVI_E_NOMEM;
        srv->n_special++;
        srv->special_first[(unsigned char)full[0]] = true;
    }
    return 0;
}

void srv_note(srv_server *srv, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const size_t have = srv->notes ? strlen(srv->notes) : 0, n = strlen(line);
    char *notes = realloc(srv->notes, have + n + 2);
    if (!notes) return; /* a note is informative only */
    memcpy(notes + have, line, n);
    memcpy(notes + have + n, "\n", 2);
    srv->notes = notes;
}

int srv_template_init(srv_server *srv, const char *file_text, size_t file_len, const char *file_name,
                      kvi_error *err)
{
    const char *text = file_text;
    size_t len = file_len;
    if (!text) {
        text = kvi_model_chat_template(srv->m);
        len = text ? strlen(text) : 0;
    }
    if (text) {
        kvi_error perr = { 0 };
        srv->tmpl = kvi_chat_template_parse(text, len, &perr);
        if (!srv->tmpl && file_text) {
            if (err) {
                err->code = perr.code ? perr.code : KVI_E_INVALID;
                snprintf(err->msg, sizeof err->msg, "--chat-template-file %.200s: %.280s", file_name,
                         perr.msg);
            }
            return err ? err->code : KVI_E_INVALID;
        }
        if (!srv->tmpl)
            srv_note(srv, "the model's chat template does not parse (%s); using the built-in layout '%s'",
                     perr.msg, kvi_chat_family(srv->m));
    }
    if (srv->tmpl && collect_special(srv) != 0) {
        if (err) {
            err->code = KVI_E_NOMEM;
            snprintf(err->msg, sizeof err->msg, "out of memory");
        }
        return KVI_E_NOMEM;
    }
    if (srv->tmpl) {
        srv->bos_text = token_text(srv->m, kvi_token_bos(srv->m));
        srv->eos_text = token_text(srv->m, kvi_token_eos(srv->m));
        if (file_text)
            srv_note(srv, "chat template: Jinja from --chat-template-file %s", file_name);
        else
            srv_note(srv, "chat template: the model's Jinja template (tokenizer.chat_template)");
        const kvi_content_format found = kvi_chat_template_content_format(srv->tmpl);
        kvi_chat_template_set_content_format(srv->tmpl, (kvi_content_format)srv->cfg.content_format);
        const bool forced = srv->cfg.content_format != KVI_CONTENT_AUTO;
        srv_note(srv, "chat template content format: %s (%s)",
                 kvi_chat_template_content_format(srv->tmpl) == KVI_CONTENT_OPENAI ? "openai" : "string",
                 !forced ? "detected"
                 : kvi_chat_template_content_format(srv->tmpl) == found
                     ? "given, as detected"
                     : "given; the template looks otherwise");
    } else if (!text) {
        srv_note(srv, "chat template: built-in layout '%s' (the model ships no chat template)",
                 kvi_chat_family(srv->m));
    }
    return 0;
}

void srv_template_free(srv_server *srv)
{
    kvi_chat_template_free(srv->tmpl);
    srv->tmpl = NULL;
    free(srv->bos_text);
    free(srv->eos_text);
    srv->bos_text = srv->eos_text = NULL;
    for (int i = 0; i < srv->n_special; i++) free(srv->special[i]);
    free(srv->special);
    srv->special = NULL;
    srv->n_special = 0;
    free(srv->notes);
    srv->notes = NULL;
    srv_tools_free(srv);
    memset(srv->special_first, 0, sizeof srv->special_first);
}

char *srv_template_render(srv_server *srv, const char *body, size_t len, srv_err *er)
{
    char *req = malloc(len + 1);
    if (!req) {
        srv_err_set(er, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    memcpy(req, body, len);
    req[len] = 0;
    kvi_error err = { 0 };
    char *out = kvi_chat_template_render(srv->tmpl, req, srv->bos_text, srv->eos_text, &err);
    free(req);
    if (!out && err.code == KVI_E_NOMEM)
        srv_err_set(er, 500, "server_error", NULL, "out of memory");
    else if (!out)
        srv_err_set(er, 400, "invalid_request_error", NULL, "chat template: %s",
                    err.msg[0] ? err.msg : kvi_strerror(err.code));
    return out;
}

#define MARK_OPEN "\xEE\x80\x80"  /* U+E000 */
#define MARK_CLOSE "\xEE\x80\x81" /* U+E001 */
#define MARK_LEN 3

/* The longest special-token text at s (NULL when none), its length in *n. */
static const char *special_at(const srv_server *srv, const char *s, size_t *n)
{
    const char *best = NULL;
    *n = 0;
    if (!srv->special_first[(unsigned char)s[0]]) return NULL;
    for (int k = 0; k < srv->n_special; k++) {
        const char *t = srv->special[k];
        size_t l = strlen(t);
        if (t[0] == s[0] && l > *n && !strncmp(s, t, l)) best = t, *n = l;
    }
    return best;
}

/* s with every special-token text wrapped in the markers (malloc'd), NULL when
 * it holds none (or out of memory: *oom set). */
static char *mark_string(const srv_server *srv, const char *s, bool *oom)
{
    size_t l, hits = 0;
    for (const char *p = s; *p;) {
        if (special_at(srv, p, &l))
            hits++, p += l;
        else
            p++;
    }
    if (!hits) return NULL;
    char *out = malloc(strlen(s) + hits * 2 * MARK_LEN + 1);
    if (!out) {
        *oom = true;
        return NULL;
    }
    size_t n = 0;
    for (const char *p = s; *p;) {
        if (!special_at(srv, p, &l)) {
            out[n++] = *p++;
            continue;
        }
        memcpy(out + n, MARK_OPEN, MARK_LEN);
        memcpy(out + n + MARK_LEN, p, l);
        memcpy(out + n + MARK_LEN + l, MARK_CLOSE, MARK_LEN);
        n += l + 2 * MARK_LEN;
        p += l;
    }
    out[n] = 0;
    return out;
}

/* Marks every string (keys too) of the tree; returns how many were marked. */
static int mark_tree(const srv_server *srv, cJSON *x, bool *oom)
{
    int marked = 0;
    for (cJSON *c = x ? x->child : NULL; c; c = c->next) {
        if (c->string && !(c->type & cJSON_StringIsConst)) {
            char *m = mark_string(srv, c->string, oom);
            if (m) {
                free(c->string);
                c->string = m;
                marked++;
            }
        }
        if (cJSON_IsString(c)) {
            char *m = mark_string(srv, c->valuestring, oom);
            if (m) {
                free(c->valuestring);
                c->valuestring = m;
                marked++;
            }
        }
        marked += mark_tree(srv, c, oom);
    }
    return marked;
}

/* Removes the markers of a marked rendering in place; the ranges they enclosed
 * (in the unmarked text) go to *ranges (malloc'd pairs). False when they do not
 * pair up. */
static bool unmark(char *s, size_t **ranges, size_t *n_ranges)
{
    size_t w = 0, cap = 0, open_at = 0;
    bool open = false;
    *ranges = NULL;
    *n_ranges = 0;
    for (size_t r = 0; s[r];) {
        bool o = !strncmp(s + r, MARK_OPEN, MARK_LEN), c = !o && !strncmp(s + r, MARK_CLOSE, MARK_LEN);
        if (!o && !c) {
            s[w++] = s[r++];
            continue;
        }
        if (o == open) return false; /* nested open, or close without open */
        r += MARK_LEN;
        if (o) {
            open = true;
            open_at = w;
            continue;
        }
        open = false;
        if (*n_ranges == cap) {
            size_t *nr = realloc(*ranges, (cap = cap ? 2 * cap : 16) * 2 * sizeof *nr);
            if (!nr) return false;
            *ranges = nr;
        }
        (*ranges)[2 * *n_ranges] = open_at;
        (*ranges)[2 * *n_ranges + 1] = w;
        (*n_ranges)++;
    }
    s[w] = 0;
    return !open;
}

/* Plain ranges of text (the real rendering) for the body, by the marked
 * rendering. 1 with *ranges set when every special text of the body could be
 * placed (0 ranges when the body holds none), 0 when the check failed. */
static int plain_ranges_of(srv_server *srv, const char *body, size_t len, const char *text, size_t **ranges,
                           size_t *n_ranges)
{
    *ranges = NULL;
    *n_ranges = 0;
    if (srv->n_special == 0) return 1;
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool oom = false;
    int marked = root ? mark_tree(srv, root, &oom) : 0;
    if (!root || oom || (marked > 0 && (strstr(text, MARK_OPEN) || strstr(text, MARK_CLOSE)))) {
        cJSON_Delete(root);
        return 0;
    }
    char *mbody = marked > 0 ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (marked == 0) return 1;
    kvi_error err = { 0 };
    char *mtext =
        mbody ? kvi_chat_template_render(srv->tmpl, mbody, srv->bos_text, srv->eos_text, &err) : NULL;
    free(mbody);
    int ok = mtext && unmark(mtext, ranges, n_ranges) && !strcmp(mtext, text);
    free(mtext);
    if (!ok) {
        free(*ranges);
        *ranges = NULL;
        *n_ranges = 0;
    }
    return ok;
}

/* Whether the prompt ends by opening a reasoning block ("<think>" and white space). */
static bool opens_think(const char *text)
{
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == '\t'))
        n--;
    return n >= 7 && !memcmp(text + n - 7, "<think>", 7);
}

int32_t *srv_template_ids(srv_server *srv, const char *body, size_t len, int32_t *n, bool *in_reasoning,
                          srv_err *er)
{
    char *text = srv_template_render(srv, body, len, er);
    if (!text) return NULL;
    *in_reasoning = opens_think(text);
    size_t *ranges = NULL, n_ranges = 0;
    /* the request log line says when special-token text of the request could
     * not be told apart from the template's (then it is recognised) */
    if (!srv->cfg.special_in_content && !plain_ranges_of(srv, body, len, text, &ranges, &n_ranges))
        srv_log_note("special_text_recognised");
    const size_t tl = strlen(text);
    int32_t cnt = kvi_tokenize_plain(srv->m, text, tl, false, ranges, n_ranges, NULL, 0);
    int32_t *ids = cnt >= 0 ? malloc(((size_t)cnt + 1) * sizeof *ids) : NULL;
    if (ids && kvi_tokenize_plain(srv->m, text, tl, false, ranges, n_ranges, ids, cnt) != cnt) {
        free(ids);
        ids = NULL;
    }
    if (!ids) {
        const bool bad = cnt < 0 && cnt != KVI_E_NOMEM;
        srv_err_set(er, bad ? 400 : 500, bad ? "invalid_request_error" : "server_error", NULL,
                    bad ? "the prompt cannot be tokenized" : "out of memory");
    } else
        *n = cnt;
    free(ranges);
    free(text);
    return ids;
}
