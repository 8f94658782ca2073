/*
 * server_lora.c — LoRA adapters over HTTP, as llama-server has them: the adapters
 * loaded at start (kvinfer serve --lora / --lora-scaled: the engine's, ids in load
 * order) listed at GET /lora-adapters, their server-wide scales set by POST
 * /lora-adapters, a request's own scales in its "lora" list, and vLLM's convention
 * of naming an adapter as the request's "model" (listed at GET /v1/models).
 *
 * Data structure: srv->lora_scale [n adapters] the server-wide scales, under srv->mu
 * (copied from the engine's at first use). Invariant: every request submitted
 * carries explicit scales for every adapter (srv_params lora), so the scheduler
 * never reads a scale a handler is changing.
 */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Live adapter id's name (kvi_lora_name: --lora NAME=PATH or the load request's, else
 * the file name without folders and ".gguf") into out[cap]; false when id was unloaded.
 * Copied under the engine's lock: a handler never holds an adapter another thread
 * may free. */
static bool adapter_name(srv_server *srv, int id, char *out, size_t cap)
{
    return kvi_engine_lora_describe(srv->e, id, out, cap, NULL, 0, NULL) == 0;
}

/* srv->lora_scale made ready (under srv->mu) */
static void scales_ready(srv_server *srv)
{
    if (srv->lora_ready) return;
    for (int i = 0; i < kvi_engine_lora_count(srv->e); i++)
        srv->lora_scale[i] = kvi_engine_lora_scale(srv->e, i);
    srv->lora_ready = true; /* later loads (POST /v1/load_lora_adapter) start at scale 0 */
}

/* The live adapter named name, or -1 */
static int named_id(srv_server *srv, const char *name)
{
    for (int i = 0; srv->e && i < kvi_engine_lora_count(srv->e); i++) {
        char n[256];
        if (adapter_name(srv, i, n, sizeof n) && !strcmp(n, name)) return i;
    }
    return -1;
}

bool srv_lora_named(const srv_server *srv, const char *name)
{
    return named_id((srv_server *)srv, name) >= 0;
}

void srv_lora_models(const srv_server *srv, cJSON *data)
{
    for (int i = 0; srv->e && i < kvi_engine_lora_count(srv->e); i++) {
        char n[256];
        if (!adapter_name((srv_server *)srv, i, n, sizeof n)) continue;
        cJSON *mo = cJSON_CreateObject();
        cJSON_AddStringToObject(mo, "id", n);
        cJSON_AddStringToObject(mo, "object", "model");
        cJSON_AddStringToObject(mo, "parent", srv->cfg.model_name);
        cJSON_AddStringToObject(mo, "owned_by", "kvinfer");
        cJSON_AddItemToArray(data, mo);
    }
}

/* A list [{"id": N, "scale": S}, ...] into scales [n] (the others 0). 0, or -1 with *er set. */
static int parse_list(srv_server *srv, const cJSON *l, int n, float *scales, srv_err *er)
{
    if (!cJSON_IsArray(l))
        return srv_err_set(er, 400, "invalid_request_error", NULL,
                           "lora: must be a list of {\"id\", \"scale\"}");
    for (int i = 0; i < n; i++) scales[i] = 0.0f;
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(it, "scale");
        if (!cJSON_IsNumber(id) || id->valuedouble != (double)(int)id->valuedouble || id->valueint < 0 ||
            id->valueint >= n)
            return srv_err_set(er, 400, "invalid_request_error", NULL,
                               "lora: id must be an adapter id in [0, %d)", n);
        if (!cJSON_IsNumber(sc) || !(sc->valuedouble >= -1e6 && sc->valuedouble <= 1e6))
            return srv_err_set(er, 400, "invalid_request_error", NULL, "lora: scale must be a number");
        scales[id->valueint] = (float)sc->valuedouble;
        if (scales[id->valueint] != 0.0f && !kvi_engine_lora_get(srv->e, id->valueint))
            return srv_err_set(er, 400, "invalid_request_error", NULL, "lora: adapter %d was unloaded",
                               id->valueint);
    }
    int on = 0;
    for (int i = 0; i < n; i++) on += scales[i] != 0.0f;
    if (on > KVI_LORA_SET_MAX)
        return srv_err_set(er, 400, "invalid_request_error", NULL, "lora: at most %d adapters at once",
                           KVI_LORA_SET_MAX);
    return 0;
}

int srv_lora_parse(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er)
{
    const int n = srv->e ? kvi_engine_lora_count(srv->e) : 0;
    p->n_lora = n;
    if (n == 0) return 0;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, "lora");
    if (l && !cJSON_IsNull(l)) return parse_list(srv, l, n, p->lora, er);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const int i = cJSON_IsString(model) ? named_id(srv, model->valuestring) : -1;
    if (i >= 0) {
        for (int k = 0; k < n; k++) p->lora[k] = k == i ? 1.0f : 0.0f;
        return 0;
    }
    pthread_mutex_lock(&srv->mu);
    scales_ready(srv);
    memcpy(p->lora, srv->lora_scale, (size_t)n * sizeof *p->lora);
    pthread_mutex_unlock(&srv->mu);
    return 0;
}

int srv_lora_ep(srv_server *srv, struct MHD_Connection *con, bool post, const char *body, size_t len)
{
    const int n = srv->e ? kvi_engine_lora_count(srv->e) : 0;
    srv_err er = { 0 };
    if (post) {
        float sc[KVI_ENGINE_LORA_MAX];
        cJSON *root = cJSON_ParseWithLength(body ? body : "", len);
        const int rc = parse_list(srv, root, n, sc, &er);
        cJSON_Delete(root);
        if (rc) return srv_send_error(con, &srv_api_openai, &er);
        pthread_mutex_lock(&srv->mu);
        memcpy(srv->lora_scale, sc, (size_t)n * sizeof *sc);
        srv->lora_ready = true;
        pthread_mutex_unlock(&srv->mu);
    }
    cJSON *a = cJSON_CreateArray();
    pthread_mutex_lock(&srv->mu);
    scales_ready(srv);
    for (int i = 0; i < n; i++) {
        char name[256], path[512];
        if (kvi_engine_lora_describe(srv->e, i, name, sizeof name, path, sizeof path, NULL)) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddNumberToObject(o, "scale", srv->lora_scale[i]);
        cJSON_AddItemToArray(a, o);
    }
    pthread_mutex_unlock(&srv->mu);
    char *out = post ? strdup("{\"success\":true}") : cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return srv_send_body(con, 200, out);
}

/* The string field k of a JSON body, or NULL with *er set (400 naming it) */
static const char *str_field(const cJSON *root, const char *k, srv_err *er)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, k);
    if (cJSON_IsString(v) && v->valuestring[0]) return v->valuestring;
    srv_err_set(er, 400, "invalid_request_error", NULL, "'%s' must be a non-empty string", k);
    snprintf(er->param, sizeof er->param, "%s", k);
    return NULL;
}

int srv_lora_load_ep(srv_server *srv, struct MHD_Connection *con, bool load, const char *body, size_t len)
{
    srv_err er = { 0 };
    if (!srv->cfg.lora_runtime) {
        srv_err_set(&er, 403, "invalid_request_error", NULL,
                    "loading and unloading LoRA adapters at runtime is off: start serve with --lora-runtime");
        return srv_send_error(con, &srv_api_openai, &er);
    }
    cJSON *root = cJSON_ParseWithLength(body ? body : "", len);
    const char *name = root ? str_field(root, "lora_name", &er) : NULL;
    const char *path = load && name ? str_field(root, "lora_path", &er) : NULL;
    if (!root) srv_err_set(&er, 400, "invalid_request_error", NULL, "the body is not JSON");
    char msg[512];
    int id = -1;
    if (name && load && path) {
        kvi_error err = { 0 };
        if (named_id(srv, name) >= 0) {
            srv_err_set(&er, 400, "invalid_request_error", NULL,
                        "The lora adapter '%s' has already been loaded.", name);
            snprintf(er.param, sizeof er.param, "lora_name");
        } else if ((id = kvi_engine_lora_load_named(srv->e, name, path, 0.0f, &err)) < 0) {
            srv_err_set(&er, 400, "invalid_request_error", NULL, "%s", err.msg[0] ? err.msg : "cannot load");
            snprintf(er.param, sizeof er.param, "lora_path");
        } else {
            pthread_mutex_lock(&srv->mu);
            scales_ready(srv);
            srv->lora_scale[id] = 0.0f; /* selected by name or by a request's list only */
            pthread_mutex_unlock(&srv->mu);
            snprintf(msg, sizeof msg, "Success: LoRA adapter '%s' added successfully.", name);
        }
    } else if (name && !load) {
        if ((id = named_id(srv, name)) < 0 || kvi_engine_lora_unload(srv->e, id) != 0) {
            srv_err_set(&er, 404, "not_found_error", NULL, "The lora adapter '%s' cannot be found.", name);
            snprintf(er.param, sizeof er.param, "lora_name");
        } else {
            pthread_mutex_lock(&srv->mu);
            scales_ready(srv);
            srv->lora_scale[id] = 0.0f;
            pthread_mutex_unlock(&srv->mu);
            snprintf(msg, sizeof msg, "Success: LoRA adapter '%s' removed successfully.", name);
        }
    }
    cJSON_Delete(root);
    if (er.status) return srv_send_error(con, &srv_api_openai, &er);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", msg);
    cJSON_AddNumberToObject(o, "id", id);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_send_body(con, 200, out);
}
