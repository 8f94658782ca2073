/*
 * server_props.c — llama.cpp's introspection routes, in llama-server's shapes,
 * so that its clients (web UIs, agent tools probing n_ctx) find what they ask:
 *
 *   GET /props: default_generation_settings {id, id_task, n_ctx, speculative,
 *     is_processing, params}, total_slots, model_alias, model_path,
 *     modalities {vision, audio} (both false: text only), chat_template,
 *     bos_token, eos_token, build_info, is_sleeping;
 *   GET /slots: one entry per --parallel slot. kvinfer's scheduler has no
 *     fixed slots: the running requests (kvi_sched_kv_view, a snapshot of the
 *     last step) fill slots 0.. in the view's order, "processing", with their
 *     request id (id_task), prompt, tokens and KV positions; the rest are
 *     "idle". Requests waiting for a slot are not shown (GET /v1/kv counts them).
 *
 * params holds the server's defaults (the sampling of `kvinfer run`, -n as
 * n_predict, -1 when uncapped, -l as logit_bias [[id, bias], ...]); a
 * request's own fields override them for that request only.
 */
#include "server/server.h"

#include <math.h>
#include <stdlib.h>

static cJSON *default_params(const srv_server *srv)
{
    const kvi_sampler_params *sp = &srv->cfg.sampling;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "n_predict", srv->cfg.n_predict > 0 ? srv->cfg.n_predict : -1);
    cJSON_AddNumberToObject(p, "seed", (double)sp->seed);
    cJSON_AddNumberToObject(p, "temperature", sp->temp);
    cJSON_AddNumberToObject(p, "top_k", sp->top_k);
    cJSON_AddNumberToObject(p, "top_p", sp->top_p);
    cJSON_AddNumberToObject(p, "min_p", sp->min_p);
    cJSON_AddNumberToObject(p, "repeat_penalty", sp->repeat_penalty);
    cJSON_AddNumberToObject(p, "repeat_last_n", sp->repeat_last_n);
    cJSON_AddNumberToObject(p, "presence_penalty", sp->presence_penalty);
    cJSON_AddNumberToObject(p, "frequency_penalty", sp->frequency_penalty);
    cJSON *lb = cJSON_AddArrayToObject(p, "logit_bias");
    for (int32_t i = 0; i < srv->cfg.n_bias; i++) {
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(srv->cfg.bias_ids[i]));
        /* llama.cpp writes a bias of -inf as false ("never") */
        cJSON_AddItemToArray(e, isinf(srv->cfg.bias_vals[i]) ? cJSON_CreateFalse()
                                                             : cJSON_CreateNumber(srv->cfg.bias_vals[i]));
        cJSON_AddItemToArray(lb, e);
    }
    cJSON_AddBoolToObject(p, "stream", false);
    return p;
}

static cJSON *slot_json(const srv_server *srv, int id, const kvi_sched_seq_view *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddNumberToObject(o, "id_task", v ? (double)v->id : -1);
    cJSON_AddNumberToObject(o, "n_ctx", srv->cfg.n_ctx);
    cJSON_AddBoolToObject(o, "speculative", false);
    cJSON_AddBoolToObject(o, "is_processing", v != NULL);
    cJSON_AddStringToObject(o, "state", v ? "processing" : "idle");
    cJSON_AddNumberToObject(o, "n_prompt_tokens", v ? v->n_prompt : 0);
    cJSON_AddNumberToObject(o, "n_tokens", v ? v->n_tokens : 0);
    cJSON_AddNumberToObject(o, "n_kv_tokens", v ? v->n_kv : 0);
    cJSON_AddItemToObject(o, "params", default_params(srv));
    cJSON *nt = cJSON_AddObjectToObject(o, "next_token");
    cJSON_AddBoolToObject(nt, "has_next_token", v != NULL);
    cJSON_AddNumberToObject(nt, "n_decoded", v ? v->n_tokens - v->n_prompt : 0);
    return o;
}

static int shutting_down(struct MHD_Connection *con)
{
    srv_err er = { 0 };
    srv_err_set(&er, 503, "server_error", "shutting_down", "the server is shutting down");
    return srv_send_error(con, &srv_api_openai, &er);
}

int srv_props_ep(srv_server *srv, struct MHD_Connection *con)
{
    kvi_sched *s = srv_sched_enter(srv);
    if (!s) return shutting_down(con);
    kvi_sched_stats st;
    kvi_sched_stats_get(s, &st);
    srv_sched_leave(srv);
    cJSON *o = cJSON_CreateObject();
    cJSON *d = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(d, "id", 0);
    cJSON_AddNumberToObject(d, "id_task", -1);
    cJSON_AddNumberToObject(d, "n_ctx", srv->cfg.n_ctx);
    cJSON_AddBoolToObject(d, "speculative", false);
    cJSON_AddBoolToObject(d, "is_processing", st.n_running > 0);
    cJSON_AddItemToObject(d, "params", default_params(srv));
    cJSON_AddNumberToObject(o, "total_slots", srv->cfg.n_parallel);
    cJSON_AddStringToObject(o, "model_alias", srv->cfg.model_name);
    cJSON_AddStringToObject(o, "model_path", srv->cfg.model_path ? srv->cfg.model_path : "");
    cJSON *mod = cJSON_AddObjectToObject(o, "modalities");
    cJSON_AddBoolToObject(mod, "vision", false);
    cJSON_AddBoolToObject(mod, "audio", false);
    cJSON_AddStringToObject(o, "chat_template", srv->cfg.chat_template ? srv->cfg.chat_template : "");
    cJSON_AddStringToObject(o, "bos_token", srv->bos_text ? srv->bos_text : "");
    cJSON_AddStringToObject(o, "eos_token", srv->eos_text ? srv->eos_text : "");
    cJSON_AddStringToObject(o, "build_info", "kvinfer");
    cJSON_AddBoolToObject(o, "is_sleeping", false);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_send_body(con, 200, body);
}

int srv_slots_ep(srv_server *srv, struct MHD_Connection *con)
{
    enum { MAX_IDS = 4096 };
    const int n_slots = srv->cfg.n_parallel > 0 ? srv->cfg.n_parallel : 1;
    kvi_sched_seq_view *v = malloc((size_t)n_slots * sizeof *v);
    int32_t *ids = malloc(MAX_IDS * sizeof *ids);
    if (!v || !ids) {
        free(v);
        free(ids);
        return srv_send_body(con, 500, NULL);
    }
    kvi_sched *s = srv_sched_enter(srv);
    if (!s) {
        free(v);
        free(ids);
        return shutting_down(con);
    }
    int n = kvi_sched_kv_view(s, v, n_slots, ids, MAX_IDS);
    srv_sched_leave(srv);
    if (n > n_slots) n = n_slots;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n_slots; i++) cJSON_AddItemToArray(a, slot_json(srv, i, i < n ? &v[i] : NULL));
    free(v);
    free(ids);
    char *body = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return srv_send_body(con, 200, body);
}
