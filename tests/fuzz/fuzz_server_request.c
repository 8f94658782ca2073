/*
 * fuzz_server_request.c — what the server does with a request body before it
 * reaches the scheduler: the guard every POST endpoint runs (srv_body_check),
 * then the parser (srv_parse_request) with the bytes as a /v1/completions body
 * and as a /v1/chat/completions body, against stories260K (loaded once, as
 * `kvinfer serve` holds it) with the built-in chat layouts, and again with a
 * Jinja template that writes tool calls (Qwen2.5's: tools, tool_choice, the
 * forced-call grammar) and its /apply-template rendering; then as a
 * /v1/responses body (srv_responses_parse: items, tools, text.format, reasoning
 * translated into a chat body) with and without the template. The
 * configuration is test_server_parse's.
 */
#include "fuzz_util.h"

#include "kvinfer.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_server *server(void)
{
    static srv_server srv;
    if (!srv.m) {
        kvi_load_params lp;
        kvi_load_params_default(&lp);
        kvi_error err = { 0 };
        srv.m = kvi_model_load(fuzz_shared_path("models/stories260K.gguf"), &lp, &err);
        if (!srv.m) {
            fprintf(stderr, "fuzz_server_request: cannot load the model: %s\n", err.msg);
            abort();
        }
        srv.cfg.model_name = "stories260K";
        srv.cfg.n_ctx = 256;
        kvi_sampler_params_default(&srv.cfg.sampling);
    }
    return &srv;
}

/* The same model with Qwen2.5's Jinja template and its tool-call format. */
static srv_server *server_jinja(void)
{
    static srv_server srv;
    if (!srv.m) {
        srv = *server();
        srv.cfg.quiet = true;
        char *text = NULL;
        FILE *f = fopen(fuzz_shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "rb");
        size_t n = 0;
        if (f && fseek(f, 0, SEEK_END) == 0) {
            const long len = ftell(f);
            rewind(f);
            text = len > 0 ? malloc((size_t)len + 1) : NULL;
            n = text ? fread(text, 1, (size_t)len, f) : 0;
            if (text) text[n] = 0;
        }
        if (f) fclose(f);
        kvi_error err = { 0 };
        srv.tmpl = NULL;
        if (!text || srv_template_init(&srv, text, n, "qwen2.5", &err) != 0) {
            fprintf(stderr, "fuzz_server_request: no template: %s\n", err.msg);
            abort();
        }
        srv_tools_init(&srv, text);
        free(text);
    }
    return &srv;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_err er;
    memset(&er, 0, sizeof er);
    (void)srv_body_check((const char *)data, size, &er);
    for (int k = 0; k < 3; k++) {
        srv_server *srv = k < 2 ? server() : server_jinja();
        const bool chat = k > 0;
        srv_params p;
        memset(&er, 0, sizeof er);
        if (srv_parse_request(srv, (const char *)data, size, chat, &p, &er) == 0)
            srv_params_free(&p);
        else
            free(srv_error_json(&er));
    }
    /* as a /v1/responses body (translated into a chat body), with and without a template */
    for (int k = 0; k < 2; k++) {
        srv_params p;
        memset(&er, 0, sizeof er);
        if (srv_responses_parse(k ? server_jinja() : server(), (const char *)data, size, &p, &er) == 0)
            srv_params_free(&p);
        else
            free(srv_error_json(&er));
    }
    memset(&er, 0, sizeof er);
    free(srv_template_render(server_jinja(), (const char *)data, size, &er));
    return 0;
}
