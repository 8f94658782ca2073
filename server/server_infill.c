/*
 * server_infill.c — fill-in-the-middle: the prompt of POST /infill (llama.cpp's
 * fields) and of /v1/completions with "suffix" (OpenAI's), and /infill's
 * answer in llama.cpp's /completion shape.
 *
 * The prompt is laid out as llama.cpp's server lays it (format_prompt_infill,
 * the repository-level pattern of Qwen2.5-Coder), in token ids:
 *
 *   extra  = [FIM_REP] "myproject\n"                     (when the model has FIM_REP)
 *            per input_extra chunk: [FIM_SEP] filename "\n" (filename default "tmp")
 *                                   or, without FIM_SEP, "\n\n--- snippet ---\n\n"
 *                                   then the chunk's text
 *            [FIM_SEP] "filename\n"                      (when the model has FIM_SEP)
 *   prompt = extra[last n_extra] BOS? [FIM_PRE] prefix[last n_pre] prompt
 *            [FIM_SUF] suffix[first n_suf] [FIM_MID]
 *
 * with n_pre = min(|prefix|, 3 (n_batch / 4)), n_suf = min(|suffix|,
 * max(0, n_batch / 4 - 2 - |prompt|)), n_extra = min(|extra|, max(0, n_ctx -
 * n_batch - 2 n_predict)); BOS when the model adds one. Texts are tokenized with
 * no BOS and special text left plain, except /infill's "prompt", whose special
 * text is recognised (llama.cpp's tokenize_input_prompts). n_batch is llama.cpp's
 * default, 2048, at most the context; n_predict the request's max_tokens, else -1
 * (llama.cpp takes its server's -n, whose default is -1). Only the prefix-suffix-
 * middle order (llama.cpp's default; its --spm-infill is not offered).
 *
 * A model needs FIM_PRE, FIM_SUF and FIM_MID (kvi_token_fim): else a 400. The ids
 * then go through the completions path like any id prompt, with the completion
 * fields (/infill also takes llama.cpp's n_predict for max_tokens).
 *
 * /infill's answer (llama.cpp's /completion): {"index", "content", "tokens": [],
 * "id_slot": -1, "stop": true, "model", "tokens_predicted", "tokens_evaluated",
 * "stop_type": "eos" | "word" | "limit" | "none", "stopping_word", "truncated":
 * false, "tokens_cached", "timings": {prompt_n, prompt_ms, predicted_n,
 * predicted_ms}} — an array of them when n > 1. Streamed: one event per token
 * {"index", "content", "tokens": [], "stop": false, "id_slot": -1,
 * "tokens_predicted", "tokens_evaluated"}, then the final object per choice
 * (content: the text not yet sent); no "[DONE]" (llama.cpp sends none there).
 */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

#define INFILL_BATCH 2048 /* llama.cpp's default n_batch */

/* A growing id array: v[0 .. n), capacity cap. */
typedef struct ids_buf {
    int32_t *v;
    int32_t n, cap;
} ids_buf;

static int oom(srv_err *er) { return srv_err_set(er, 500, "server_error", NULL, "out of memory"); }

static int buf_push(ids_buf *b, const int32_t *ids, int32_t n, srv_err *er)
{
    if (n <= 0) return 0; /* ids may be NULL then (an empty buffer) */
    if (b->n + n > b->cap) {
        const int32_t cap = (b->n + n) * 2 + 16;
        int32_t *nv = realloc(b->v, (size_t)cap * sizeof *nv);
        if (!nv) return oom(er);
        b->v = nv;
        b->cap = cap;
    }
    memcpy(b->v + b->n, ids, (size_t)n * sizeof *ids);
    b->n += n;
    return 0;
}

static int buf_push1(ids_buf *b, int32_t id, srv_err *er) { return buf_push(b, &id, 1, er); }

/* Appends the ids of text (no BOS; special text recognised only when special). */
static int buf_text(ids_buf *b, const kvi_model *m, const char *s, bool special, srv_err *er)
{
    const size_t len = strlen(s);
    const int32_t need = kvi_tokenize(m, s, len, false, special, NULL, 0);
    if (need == KVI_E_NOMEM) return oom(er);
    if (need < 0) return srv_err_set(er, 400, "invalid_request_error", NULL, "the text cannot be tokenized");
    int32_t *tmp = malloc(((size_t)need + 1) * sizeof *tmp);
    if (!tmp) return oom(er);
    const int32_t got = kvi_tokenize(m, s, len, false, special, tmp, need);
    const int rc = got == need ? buf_push(b, tmp, got, er) : oom(er);
    free(tmp);
    return rc;
}

static int bad(srv_err *er, const char *field, const char *what)
{
    return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'%s' %s", field, what);
}

/* input_prefix / input_suffix: a string, or an array of strings and token ids
 * (llama.cpp's tokenize_mixed); absent is a 400. */
static int mixed_field(const cJSON *root, const char *field, const kvi_model *m, ids_buf *b, srv_err *er)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!v)
        return srv_err_set(er, 400, "invalid_request_error", "missing_required_parameter", "'%s' is required",
                           field);
    if (cJSON_IsString(v)) return buf_text(b, m, v->valuestring, false, er);
    if (!cJSON_IsArray(v)) return bad(er, field, "must be a string or an array of strings and token ids");
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        int rc;
        if (cJSON_IsString(e)) {
            rc = buf_text(b, m, e->valuestring, false, er);
        } else if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < kvi_n_vocab(m) &&
                   e->valuedouble == (double)(int32_t)e->valuedouble) {
            rc = buf_push1(b, (int32_t)e->valuedouble, er);
        } else {
            rc = bad(er, field, "must hold only strings and token ids of the vocabulary");
        }
        if (rc) return rc;
    }
    return 0;
}

/* The extra context (the repository-level pattern, or snippets). */
static int extra_ids(const cJSON *root, const kvi_model *m, ids_buf *b, srv_err *er)
{
    const int32_t rep = kvi_token_fim(m, KVI_FIM_REP), sep = kvi_token_fim(m, KVI_FIM_SEP);
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(root, "input_extra");
    if (ex && !cJSON_IsNull(ex) && !cJSON_IsArray(ex))
        return bad(er, "input_extra", "must be an array of {\"filename\": string, \"text\": string}");
    int rc = 0;
    if (rep >= 0 && !(rc = buf_push1(b, rep, er))) rc = buf_text(b, m, "myproject\n", false, er);
    int i = 0;
    const cJSON *chunks = cJSON_IsArray(ex) ? ex : NULL, *c;
    cJSON_ArrayForEach(c, chunks)
    {
        if (rc) return rc;
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "filename");
        if (!cJSON_IsObject(c) || !cJSON_IsString(text))
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'input_extra[%d]' must be an object with a string \"text\"", i);
        if (name && !cJSON_IsString(name))
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'input_extra[%d].filename' must be a string", i);
        if (sep >= 0) {
            const char *fn = name ? name->valuestring : "tmp";
            const size_t len = strlen(fn);
            char *line = malloc(len + 2);
            if (!line) return oom(er);
            memcpy(line, fn, len);
            memcpy(line + len, "\n", 2);
            rc = buf_push1(b, sep, er);
            if (!rc) rc = buf_text(b, m, line, false, er);
            free(line);
        } else {
            rc = buf_text(b, m, "\n\n--- snippet ---\n\n", false, er);
        }
        if (!rc) rc = buf_text(b, m, text->valuestring, false, er);
        i++;
    }
    if (!rc && sep >= 0 && !(rc = buf_push1(b, sep, er))) rc = buf_text(b, m, "filename\n", false, er);
    return rc;
}

/* The prompt's ids into out (see the file's comment); the pieces are already checked. */
static int assemble(const kvi_model *m, const ids_buf *extra, const ids_buf *pre, const ids_buf *suf,
                    const ids_buf *prompt, int n_batch, int n_ctx, int n_predict, ids_buf *out, srv_err *er)
{
    const int32_t n_pre = pre->n < 3 * (n_batch / 4) ? pre->n : 3 * (n_batch / 4);
    const int32_t room = n_batch / 4 - (2 + prompt->n);
    const int32_t n_suf = suf->n < (room > 0 ? room : 0) ? suf->n : (room > 0 ? room : 0);
    const int64_t extra_room = (int64_t)n_ctx - n_batch - 2 * (int64_t)n_predict;
    const int32_t n_extra = extra_room <= 0 ? 0 : extra_room < extra->n ? (int32_t)extra_room : extra->n;
    const int32_t bos = kvi_token_bos(m);
    int rc = n_extra ? buf_push(out, extra->v + extra->n - n_extra, n_extra, er) : 0;
    if (!rc && kvi_model_add_bos(m) && bos >= 0) rc = buf_push1(out, bos, er);
    if (!rc) rc = buf_push1(out, kvi_token_fim(m, KVI_FIM_PRE), er);
    if (!rc && n_pre) rc = buf_push(out, pre->v + pre->n - n_pre, n_pre, er);
    if (!rc) rc = buf_push(out, prompt->v, prompt->n, er);
    if (!rc) rc = buf_push1(out, kvi_token_fim(m, KVI_FIM_SUF), er);
    if (!rc) rc = buf_push(out, suf->v, n_suf, er);
    if (!rc) rc = buf_push1(out, kvi_token_fim(m, KVI_FIM_MID), er);
    return rc;
}

/* The prefix text of /v1/completions with "suffix": "prompt" as a string or
 * an array of one string. */
static const char *openai_prefix(const cJSON *root, srv_err *er)
{
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1) pr = cJSON_GetArrayItem(pr, 0);
    if (cJSON_IsString(pr)) return pr->valuestring;
    if (!pr)
        srv_err_set(er, 400, "invalid_request_error", "missing_required_parameter", "'prompt' is required");
    else
        bad(er, "prompt", "must be one string when 'suffix' is given (fill in the middle)");
    return NULL;
}

int32_t *srv_infill_ids(const kvi_model *m, const cJSON *root, bool openai, int n_batch, int n_ctx,
                        int n_predict, int32_t *n, srv_err *er)
{
    ids_buf extra = { 0 }, pre = { 0 }, suf = { 0 }, prompt = { 0 }, out = { 0 };
    int rc = 0;
    if (openai) {
        const cJSON *sfx = cJSON_GetObjectItemCaseSensitive(root, "suffix");
        const char *prefix = openai_prefix(root, er);
        if (!prefix)
            rc = -1;
        else if (!cJSON_IsString(sfx))
            rc = bad(er, "suffix", "must be a string");
        else if (!(rc = buf_text(&pre, m, prefix, false, er)) &&
                 !(rc = buf_text(&suf, m, sfx->valuestring, false, er)))
            rc = extra_ids(root, m, &extra, er);
    } else {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        if (pr && !cJSON_IsNull(pr) && !cJSON_IsString(pr))
            rc = bad(er, "prompt", "must be a string");
        else if (!(rc = mixed_field(root, "input_prefix", m, &pre, er)) &&
                 !(rc = mixed_field(root, "input_suffix", m, &suf, er)) &&
                 !(rc = extra_ids(root, m, &extra, er)))
            rc = cJSON_IsString(pr) ? buf_text(&prompt, m, pr->valuestring, true, er) : 0;
    }
    if (!rc && (kvi_token_fim(m, KVI_FIM_PRE) < 0 || kvi_token_fim(m, KVI_FIM_SUF) < 0 ||
                kvi_token_fim(m, KVI_FIM_MID) < 0))
        rc = srv_err_set(er, 400, "invalid_request_error", "model_not_supported",
                         "Infill is not supported by this model: its vocabulary has no fill-in-the-middle "
                         "prefix, suffix and middle tokens (tokenizer.ggml.fim_pre_token_id, "
                         "fim_suf_token_id, fim_mid_token_id)");
    if (!rc) rc = assemble(m, &extra, &pre, &suf, &prompt, n_batch, n_ctx, n_predict, &out, er);
    free(extra.v);
    free(pre.v);
    free(suf.v);
    free(prompt.v);
    if (rc) {
        free(out.v);
        return NULL;
    }
    *n = out.n;
    return out.v;
}

int srv_infill_prompt(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er)
{
    const int n_batch = srv->cfg.n_ctx < INFILL_BATCH ? srv->cfg.n_ctx : INFILL_BATCH;
    const int n_predict = p->max_tokens > 0 ? p->max_tokens : -1;
    int32_t n = 0;
    int32_t *ids = srv_infill_ids(srv->m, root, !p->infill, n_batch, srv->cfg.n_ctx, n_predict, &n, er);
    if (!ids) return -1;
    free(p->prompt);
    p->prompt = ids;
    p->n_prompt = n;
    return 0;
}

bool srv_infill_wanted(const cJSON *root, const srv_params *p)
{
    const cJSON *sfx = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    return p->infill || (!p->chat && sfx && !cJSON_IsNull(sfx));
}

/* ---- /infill's answer ---- */

static const char *stop_type(const srv_choice *c)
{
    if (c->finish == KVI_FINISH_LENGTH) return "limit";
    if (c->finish != KVI_FINISH_STOP) return "none";
    return c->stopped ? "word" : "eos";
}

/* The fields every event and answer of a choice carry. */
static cJSON *choice_head(const srv_req *r, const srv_choice *c, const char *content, size_t len, bool stop)
{
    cJSON *o = cJSON_CreateObject();
    char *clean = kvi_utf8_sanitize(content ? content : "", content ? len : 0);
    cJSON_AddNumberToObject(o, "index", c->index);
    cJSON_AddStringToObject(o, "content", clean ? clean : "");
    free(clean);
    cJSON_AddArrayToObject(o, "tokens");
    cJSON_AddNumberToObject(o, "id_slot", -1);
    cJSON_AddBoolToObject(o, "stop", stop);
    cJSON_AddNumberToObject(o, "tokens_predicted", c->n_tokens);
    cJSON_AddNumberToObject(o, "tokens_evaluated", r->p.n_prompt);
    return o;
}

/* The final object of a choice: content from byte `from` of its text. */
static cJSON *choice_final(const srv_req *r, const srv_choice *c, size_t from)
{
    cJSON *o = choice_head(r, c, c->text ? c->text + from : NULL, c->text ? c->len - from : 0, true);
    cJSON_AddStringToObject(o, "model", r->srv->cfg.model_name);
    cJSON_AddStringToObject(o, "stop_type", stop_type(c));
    cJSON_AddStringToObject(o, "stopping_word", "");
    cJSON_AddBoolToObject(o, "truncated", false);
    cJSON_AddNumberToObject(o, "tokens_cached", c->usage.cached_tokens);
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_n", r->p.n_prompt - c->usage.cached_tokens);
    cJSON_AddNumberToObject(t, "prompt_ms", c->usage.prefill_ms);
    cJSON_AddNumberToObject(t, "predicted_n", c->n_tokens);
    cJSON_AddNumberToObject(t, "predicted_ms", c->usage.decode_ms);
    return o;
}

static bool srv_infill_sse_token(srv_req *r, srv_choice *c, const char *piece, size_t n)
{
    return srv_sse_event(r, choice_head(r, c, piece, n, false));
}

static bool srv_infill_sse_final(srv_req *r)
{
    bool ok = true;
    for (int i = 0; i < r->p.n; i++) {
        srv_choice *c = &r->ch[i];
        ok = ok && srv_sse_event(r, choice_final(r, c, c->sent));
        c->sent = c->len;
    }
    return ok;
}

static char *srv_infill_response_json(srv_req *r)
{
    cJSON *o = r->p.n == 1 ? choice_final(r, &r->ch[0], 0) : cJSON_CreateArray();
    for (int i = 0; r->p.n > 1 && i < r->p.n; i++) cJSON_AddItemToArray(o, choice_final(r, &r->ch[i], 0));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

const srv_api srv_api_infill = {
    .name = "infill",
    .sse_token = srv_infill_sse_token,
    .sse_final = srv_infill_sse_final,
    .response_json = srv_infill_response_json,
    .error_json = srv_error_json,
    .state_free = NULL,
};
