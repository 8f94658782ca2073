/*
 * fuzz_server_request.c — what the server does with a request body before it
 * reaches the scheduler: the guard every POST endpoint runs (srv_body_check),
 * then the parser (srv_parse_request) with the bytes as a /v1/completions body
 * (a "suffix" makes it fill in the middle), as a /v1/chat/completions body and
 * as a POST /infill body (srv_parse_infill), against stories260K (loaded once, as
 * `kvinfer serve` holds it) with the built-in chat layouts, and again with a
 * Jinja template that writes tool calls (Qwen2.5's: tools, tool_choice, the
 * forced-call grammar), as an Anthropic /v1/messages and count_tokens body
 * (srv_messages_parse), and its /apply-template rendering. The configuration is
 * test_server_parse's, plus the operations flags that reach the parser (-n 16,
 * -l 2-inf merged into each logit_bias) and the request log: each parse fills a
 * log record (the unknown field names, sanitised) that is then formatted, as
 * text and as JSON, into a sink that drops it.
 * Then as a /v1/responses body (srv_responses_parse: items, tools, text.format,
 * reasoning translated into a chat body) with and without the template. Then as
 * a /v1/embeddings and a /v1/rerank body (srv_embed_parse: inputs tokenised and
 * checked, nothing run) on an embedder of stories260K (mean pooling, a
 * 64-token engine).
 */
#include "fuzz_util.h"

#include "kvinfer.h"
#include "server/server.h"
#include "server/server_embed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The request log's sink: the line is formatted, then dropped. */
static void log_drop(void *user, const char *line) { *(size_t *)user += strlen(line); }

static size_t g_logged;

static srv_server *server(void)
{
    static srv_server srv;
    static const int32_t bias_ids[] = { 2 };
    static const float bias_vals[] = { -INFINITY };
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
        srv.cfg.n_predict = 16;
        srv.cfg.bias_ids = bias_ids;
        srv.cfg.bias_vals = bias_vals;
        srv.cfg.n_bias = 1;
        srv.cfg.log_fn = log_drop;
        srv.cfg.log_user = &g_logged;
    }
    return &srv;
}

/* server() with an embedder: stories260K pooled by its mean, a context of 64. */
static srv_server *server_embed(void)
{
    srv_server *srv = server();
    if (!srv->emb) {
        kvi_engine_params ep;
        kvi_engine_params_default(&ep);
        ep.n_ctx = 64;
        ep.n_seq_max = 1;
        ep.n_threads = 1;
        kvi_error err = { 0 };
        kvi_engine *e = kvi_engine_create(srv->m, &ep, &err);
        if (!e || srv_embed_attach(srv, e, KVI_POOLING_MEAN, &err) != 0) {
            fprintf(stderr, "fuzz_server_request: no embedder: %s\n", err.msg);
            abort();
        }
    }
    return srv;
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
        srv_log_rec rec;
        srv_log_begin(&rec, NULL, "POST", chat ? "/v1/chat/completions" : "/v1/completions");
        if (srv_parse_request(srv, (const char *)data, size, chat, &p, &er) == 0)
            srv_params_free(&p);
        else
            free(srv_error_json(&er));
        srv->cfg.log_json = k == 1;
        srv_log_end(srv, &rec);
    }
    /* as an Anthropic /v1/messages and count_tokens body */
    for (int k = 0; k < 2; k++) {
        srv_params p;
        memset(&er, 0, sizeof er);
        if (srv_messages_parse(server_jinja(), (const char *)data, size, k == 1, &p, &er) == 0)
            srv_params_free(&p);
        else
            free(srv_api_messages.error_json(&er));
    }
    srv_params p;
    memset(&er, 0, sizeof er);
    if (srv_parse_infill(server(), (const char *)data, size, &p, &er) == 0)
        srv_params_free(&p);
    else
        free(srv_error_json(&er));
    /* as a /v1/responses body (translated into a chat body), with and without a template */
    for (int k = 0; k < 2; k++) {
        srv_params p;
        memset(&er, 0, sizeof er);
        if (srv_responses_parse(k ? server_jinja() : server(), (const char *)data, size, &p, &er) == 0)
            srv_params_free(&p);
        else
            free(srv_error_json(&er));
    }
    /* as an embedding and a rerank body */
    for (int k = 0; k < 2; k++) {
        srv_emb_inputs in;
        memset(&er, 0, sizeof er);
        if (srv_embed_parse(server_embed(), (const char *)data, size, k == 1, &in, &er) == 0)
            srv_emb_inputs_free(&in);
        else
            free(srv_error_json(&er));
    }
    memset(&er, 0, sizeof er);
    free(srv_template_render(server_jinja(), (const char *)data, size, &er));
    return 0;
}
