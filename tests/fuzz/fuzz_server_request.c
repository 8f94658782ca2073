/*
 * fuzz_server_request.c — the server's request parser (srv_parse_request): the
 * bytes as a /v1/completions body and as a /v1/chat/completions body, against
 * stories260K (loaded once, as `kvinfer serve` holds it), with the server's
 * configuration as test_server_parse sets it.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_server *srv = server();
    for (int chat = 0; chat < 2; chat++) {
        srv_params p;
        srv_err er;
        memset(&er, 0, sizeof er);
        if (srv_parse_request(srv, (const char *)data, size, chat, &p, &er) == 0)
            srv_params_free(&p);
        else
            free(srv_error_json(&er));
    }
    return 0;
}
