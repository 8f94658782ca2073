/*
 * server_rerank.c — POST /v1/rerank, /rerank, /v1/reranking and /reranking
 * in the Jina / Cohere shape as llama-server serves it, and TEI's form.
 *
 * Request: "query" (a string), "documents" (strings, or objects with a
 * "text"), "top_n" (results kept, default all), "return_documents" (each
 * result carries {"text"} of its document), "truncate" (a pair longer than the
 * context is cut to it instead of a 400), "model" (any name unless
 * --strict-model), "user" (no effect). TEI's form: "texts" instead of
 * "documents", "return_text"; its answer is a bare list of {"index", "score"
 * (, "text")}. Any other field is a 400 naming it.
 *
 * One input per document: kvi_rerank_tokenize's query + document sequence
 * (the model's rerank template, else [BOS] query [EOS] [SEP] document [EOS]),
 * all of them through kvi_embed with pooling rank; the relevance score is the
 * head's output 0, untransformed (a bert head's logit, qwen3's P(yes)).
 * Answer: {"object": "list", "model", "usage", "results": [{"index",
 * "relevance_score" (, "document")}]}, sorted by score, descending (ties by
 * index), cut to top_n.
 */
#include "server/server_embed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ranked {
    int32_t index;
    float score;
} ranked;

static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The text of documents[i]: a string or {"text": string}; NULL when neither. */
static const char *doc_text(const cJSON *d)
{
    if (cJSON_IsString(d)) return d->valuestring;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "text");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* The pair of query and document i as one input of in. */
static int add_pair(srv_server *srv, srv_emb_inputs *in, const char *q, const char *doc, bool truncate, int i,
                    srv_err *er)
{
    char what[64];
    snprintf(what, sizeof what, "the query with document %d", i);
    const int32_t n = kvi_rerank_tokenize(srv->m, q, strlen(q), doc, strlen(doc), NULL, 0);
    if (n < 0)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "%s cannot be tokenised", what);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    const int32_t got = kvi_rerank_tokenize(srv->m, q, strlen(q), doc, strlen(doc), ids, n);
    const int rc = srv_emb_inputs_add(srv, in, ids, got < n ? got : n, truncate, what, er);
    free(ids);
    return rc;
}

static int parse(srv_server *srv, const cJSON *root, srv_emb_inputs *in, const cJSON **docs, int *top_n,
                 bool *ret_docs, srv_err *er)
{
    static const char *const names[] = { "query",       "documents", "texts", "top_n", "return_documents",
                                         "return_text", "truncate",  "model", "user" };
    int rc = srv_emb_unknown(root, names, sizeof names / sizeof *names, er);
    if (rc || (rc = srv_check_model(srv, root, er))) return rc;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "query");
    if (!cJSON_IsString(q) || !*q->valuestring) return srv_emb_bad(er, "query", "must be a non-empty string");
    const bool tei = !cJSON_GetObjectItemCaseSensitive(root, "documents");
    const char *dname = tei ? "texts" : "documents";
    *docs = cJSON_GetObjectItemCaseSensitive(root, dname);
    if (!cJSON_IsArray(*docs) || !(*docs)->child)
        return srv_emb_bad(er, dname, "must be a non-empty list of strings");
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(root, tei ? "return_text" : "return_documents");
    if (rd && !cJSON_IsBool(rd) && !cJSON_IsNull(rd))
        return srv_emb_bad(er, tei ? "return_text" : "return_documents", "must be a boolean");
    *ret_docs = cJSON_IsTrue(rd);
    const int n_docs = cJSON_GetArraySize(*docs);
    *top_n = n_docs;
    const cJSON *tn = cJSON_GetObjectItemCaseSensitive(root, "top_n");
    if (tn && !cJSON_IsNull(tn)) {
        if (!cJSON_IsNumber(tn) || tn->valuedouble != floor(tn->valuedouble) || tn->valuedouble < 1)
            return srv_emb_bad(er, "top_n", "must be a positive integer");
        if (tn->valuedouble < n_docs) *top_n = (int)tn->valuedouble;
    }
    bool truncate;
    if ((rc = srv_emb_truncate(root, &truncate, er))) return rc;
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, *docs)
    {
        const char *text = doc_text(d);
        if (!text)
            return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                               "'%s[%d]' must be a string (or {\"text\": string})", dname, i);
        if ((rc = add_pair(srv, in, q->valuestring, text, truncate, i++, er))) return rc;
    }
    return 0;
}

int srv_rerank_parse(srv_server *srv, const cJSON *root, srv_emb_inputs *in, srv_err *er)
{
    const cJSON *docs;
    int top_n;
    bool ret_docs;
    return parse(srv, root, in, &docs, &top_n, &ret_docs, er);
}

int srv_rerank(srv_server *srv, struct MHD_Connection *con, const char *body, size_t len)
{
    srv_err er = { 0 };
    srv_emb_inputs in = { 0 };
    const cJSON *docs = NULL;
    int top_n = 0;
    bool ret_docs = false;
    float *out = NULL;
    ranked *rk = NULL;
    cJSON *root = srv_emb_parse(body, len, &er);
    if (!root) return srv_send_error(con, &srv_api_openai, &er);
    const int32_t n_cls = srv->emb->n_cls;
    int rc = parse(srv, root, &in, &docs, &top_n, &ret_docs, &er);
    if (!rc && (!(out = malloc((size_t)in.count * (size_t)n_cls * sizeof *out)) ||
                !(rk = malloc((size_t)in.count * sizeof *rk))))
        rc = srv_err_set(&er, 500, "server_error", NULL, "out of memory");
    if (!rc) rc = srv_emb_run(srv, &in, KVI_POOLING_RANK, out, &er);
    cJSON *a = NULL;
    if (!rc) {
        for (int32_t i = 0; i < in.count; i++) rk[i] = (ranked){ i, out[(size_t)i * (size_t)n_cls] };
        qsort(rk, (size_t)in.count, sizeof *rk, by_score);
        const bool tei = !cJSON_GetObjectItemCaseSensitive(root, "documents");
        a = tei ? cJSON_CreateArray() : srv_emb_list(srv, in.total);
        cJSON *res = tei ? a : cJSON_AddArrayToObject(a, "results");
        for (int i = 0; i < top_n; i++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "index", rk[i].index);
            cJSON_AddNumberToObject(r, tei ? "score" : "relevance_score", (double)rk[i].score);
            const char *text = doc_text(cJSON_GetArrayItem(docs, rk[i].index));
            if (ret_docs && tei) cJSON_AddStringToObject(r, "text", text);
            if (ret_docs && !tei)
                cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "document"), "text", text);
            cJSON_AddItemToArray(res, r);
        }
    }
    cJSON_Delete(root);
    free(out);
    free(rk);
    srv_emb_inputs_free(&in);
    if (rc) return srv_send_error(con, &srv_api_openai, &er);
    char *s = a ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    return srv_send_body(con, 200, s);
}
