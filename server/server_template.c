/*
 * server_template.c — the chat template of `kvinfer serve`: the model's Jinja
 * template (tokenizer.chat_template), or one given with --chat-template-file,
 * parsed once at start and rendered for each /v1/chat/completions and
 * /apply-template body. A model that ships no template keeps the built-in
 * layouts of kvi_chat_apply (src/tokenizer/chat_template.c).
 *
 * The rendered prompt is tokenized with special tokens recognised anywhere in
 * it (Hugging Face's behaviour): text from message contents is not yet told
 * apart from the template's own text.
 */
#include "server/server.h"

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
            fprintf(
                stderr,
                "kvinfer: the model's chat template does not parse (%s); using the built-in layout '%s'\n",
                perr.msg, kvi_chat_family(srv->m));
    }
    if (srv->tmpl) {
        srv->bos_text = token_text(srv->m, kvi_token_bos(srv->m));
        srv->eos_text = token_text(srv->m, kvi_token_eos(srv->m));
        if (file_text)
            fprintf(stderr, "kvinfer: chat template: Jinja from --chat-template-file %s\n", file_name);
        else
            fprintf(stderr, "kvinfer: chat template: the model's Jinja template (tokenizer.chat_template)\n");
    } else if (!text) {
        fprintf(stderr, "kvinfer: chat template: built-in layout '%s' (the model ships no chat template)\n",
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
