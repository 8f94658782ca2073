/*
 * server_store.c — the responses that /v1/responses keeps ("store": true) for
 * GET /v1/responses/{id} and for "previous_response_id".
 *
 * Data: srv_store is a list of srv_stored entries, oldest first (head), each
 * holding one response's id, the id of the response it continued ("" none),
 * its turn's items (the input items it was given, then its output items: a
 * JSON array as text) and its response object (JSON text). A follow-up turn's
 * conversation is the chain of entries reached through prev, each contributing
 * its items, oldest first.
 *
 * Invariants: n and bytes are the number of entries and the sum of their
 * bytes (ids, items and response texts); after every put n <= max_n and
 * bytes <= max_bytes, the oldest entries evicted first (a single entry larger
 * than max_bytes is not kept at all). Every access holds mu, and no other lock
 * is taken under it (callers may hold a request's mutex: lock order r->mu,
 * then the store's). The store is created at the first put (under srv->mu)
 * and freed by srv_store_free after the HTTP daemon stopped.
 */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct srv_stored {
    char id[48], prev[48];
    char *items;    /* JSON array: input items, then output items */
    char *response; /* JSON object */
    size_t bytes;
    struct srv_stored *next; /* younger */
} srv_stored;

typedef struct srv_store {
    pthread_mutex_t mu;
    srv_stored *head, *tail; /* oldest, youngest */
    size_t n, bytes;
    size_t max_n, max_bytes;
} srv_store;

static void stored_free(srv_stored *e)
{
    free(e->items);
    free(e->response);
    free(e);
}

/* The store, created at the first put; NULL when out of memory. */
static srv_store *store_of(srv_server *srv)
{
    srv_store *have = __atomic_load_n(&srv->store, __ATOMIC_ACQUIRE);
    if (have) return have; /* srv->mu only to create it: sse_final calls in holding a request's mutex */
    pthread_mutex_lock(&srv->mu);
    srv_store *made = srv->store ? NULL : calloc(1, sizeof *made);
    if (made) {
        pthread_mutex_init(&made->mu, NULL);
        made->max_n = srv->cfg.responses_max ? srv->cfg.responses_max : SRV_RESPONSES_MAX;
        made->max_bytes =
            srv->cfg.responses_max_bytes ? srv->cfg.responses_max_bytes : SRV_RESPONSES_MAX_BYTES;
        __atomic_store_n(&srv->store, made, __ATOMIC_RELEASE);
    }
    srv_store *st = srv->store;
    pthread_mutex_unlock(&srv->mu);
    return st;
}

/* The entry of id (caller holds mu), or NULL. */
static srv_stored *find(srv_store *st, const char *id, srv_stored **before)
{
    srv_stored *prev = NULL;
    for (srv_stored *e = st->head; e; prev = e, e = e->next)
        if (!strcmp(e->id, id)) {
            if (before) *before = prev;
            return e;
        }
    return NULL;
}

static void unlink_entry(srv_store *st, srv_stored *e, srv_stored *before)
{
    if (before)
        before->next = e->next;
    else
        st->head = e->next;
    if (st->tail == e) st->tail = before;
    st->n--;
    st->bytes -= e->bytes;
    stored_free(e);
}

int srv_store_put(srv_server *srv, const char *id, const char *prev, char *items, char *response)
{
    srv_store *st = store_of(srv);
    srv_stored *e = st && items && response ? calloc(1, sizeof *e) : NULL;
    if (!e) {
        free(items);
        free(response);
        return KVI_E_NOMEM;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    snprintf(e->prev, sizeof e->prev, "%s", prev ? prev : "");
    e->items = items;
    e->response = response;
    e->bytes = sizeof *e + strlen(items) + strlen(response);
    pthread_mutex_lock(&st->mu);
    if (e->bytes > st->max_bytes) {
        pthread_mutex_unlock(&st->mu);
        stored_free(e);
        return 0;
    }
    while (st->head && (st->n + 1 > st->max_n || st->bytes + e->bytes > st->max_bytes))
        unlink_entry(st, st->head, NULL);
    if (st->tail)
        st->tail->next = e;
    else
        st->head = e;
    st->tail = e;
    st->n++;
    st->bytes += e->bytes;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* The store when one was created (lookups do not create it). */
static srv_store *store_peek(srv_server *srv) { return __atomic_load_n(&srv->store, __ATOMIC_ACQUIRE); }

char *srv_store_response(srv_server *srv, const char *id)
{
    srv_store *st = store_peek(srv);
    if (!st) return NULL;
    pthread_mutex_lock(&st->mu);
    const srv_stored *e = find(st, id, NULL);
    char *s = e ? strdup(e->response) : NULL;
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* Appends the items of JSON array text to dst. False: out of memory or not an array. */
static bool append_items(cJSON *dst, const char *text)
{
    cJSON *a = cJSON_Parse(text);
    if (!cJSON_IsArray(a)) {
        cJSON_Delete(a);
        return false;
    }
    while (a->child) cJSON_AddItemToArray(dst, cJSON_DetachItemViaPointer(a, a->child));
    cJSON_Delete(a);
    return true;
}

cJSON *srv_store_chain(srv_server *srv, const char *id, char *missing)
{
    missing[0] = 0;
    srv_store *st = store_peek(srv);
    if (!st) {
        snprintf(missing, 48, "%s", id);
        return NULL;
    }
    pthread_mutex_lock(&st->mu);
    /* the chain, youngest first; a chain is at most n long (ids are unique) */
    const srv_stored **chain = calloc(st->n + 1, sizeof *chain);
    size_t k = 0;
    const char *want = id;
    while (chain && want[0] && k <= st->n) {
        const srv_stored *e = find(st, want, NULL);
        if (!e) {
            snprintf(missing, 48, "%s", want);
            break;
        }
        chain[k++] = e;
        want = e->prev;
    }
    cJSON *all = chain && !missing[0] ? cJSON_CreateArray() : NULL;
    bool ok = all != NULL;
    while (ok && k > 0) ok = append_items(all, chain[--k]->items);
    pthread_mutex_unlock(&st->mu);
    free(chain);
    if (!ok) {
        cJSON_Delete(all);
        return NULL;
    }
    return all;
}

bool srv_store_delete(srv_server *srv, const char *id)
{
    srv_store *st = store_peek(srv);
    if (!st) return false;
    pthread_mutex_lock(&st->mu);
    srv_stored *before = NULL, *e = find(st, id, &before);
    if (e) unlink_entry(st, e, before);
    pthread_mutex_unlock(&st->mu);
    return e != NULL;
}

void srv_store_free(srv_server *srv)
{
    srv_store *st = srv->store;
    if (!st) return;
    while (st->head) unlink_entry(st, st->head, NULL);
    pthread_mutex_destroy(&st->mu);
    free(st);
    srv->store = NULL;
}
