/*
 * server_admit.c — which connections are served: the server's own count of open
 * connections, overall and per client address, against the soft limits
 * (--conn-max, --conn-per-ip). libmicrohttpd's accept policy can only refuse a
 * connection by closing it (a reset to the client); so libmicrohttpd gets hard
 * limits SRV_CONN_HARD_FACTOR times higher (against abuse only), and a
 * connection past a soft limit is accepted, marked refused, and its requests
 * are answered 503 with Retry-After in the route's error shape, then closed
 * (server_http.c).
 *
 * Data structure: an open-addressing table (linear probing, backward-shift
 * deletion, no tombstones) from a client address (16 bytes: an IPv4 address is
 * stored v4-mapped) to the number of admitted connections open from it.
 *   tab  [cap] srv_admit_slot   cap a power of two >= 2 x the hard limit
 * Each connection's socket context is an srv_conn (its key and whether it was
 * admitted), made when libmicrohttpd reports it started and freed when closed.
 *
 * Invariants (under mu): n_open = sum of tab[i].n = connections admitted and
 * not yet closed; a slot with n = 0 is empty; every non-empty slot is reachable
 * from its home slot without crossing an empty one. A refused connection counts
 * in no limit, so refusals never lock anyone out once connections close.
 */
#include "server/server.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct srv_admit_slot {
    uint8_t key[16];
    unsigned n; /* admitted connections open from this address; 0: empty slot */
} srv_admit_slot;

struct srv_admit {
    pthread_mutex_t mu;
    unsigned max_open, max_per_addr; /* the soft limits */
    unsigned n_open;
    srv_admit_slot *tab; /* [cap] */
    size_t cap;          /* a power of two */
};

unsigned srv_conn_limit(const srv_config *c)
{
    if (c->conn_max) return c->conn_max;
    const unsigned p8 = c->n_parallel > 0 ? 8u * (unsigned)c->n_parallel : 0;
    return p8 > SRV_CONN_MAX ? p8 : SRV_CONN_MAX;
}

unsigned srv_conn_per_addr_limit(const srv_config *c)
{
    if (c->conn_per_ip) return c->conn_per_ip;
    const unsigned p8 = c->n_parallel > 0 ? 8u * (unsigned)c->n_parallel : 0;
    return p8 > SRV_CONN_PER_IP ? p8 : SRV_CONN_PER_IP;
}

srv_admit *srv_admit_create(const srv_config *c)
{
    srv_admit *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->max_open = srv_conn_limit(c);
    a->max_per_addr = srv_conn_per_addr_limit(c);
    size_t cap = 64;
    while (cap < 2 * (size_t)a->max_open * SRV_CONN_HARD_FACTOR) cap *= 2;
    a->tab = calloc(cap, sizeof *a->tab);
    if (!a->tab) {
        free(a);
        return NULL;
    }
    a->cap = cap;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void srv_admit_free(srv_admit *a)
{
    if (!a) return;
    pthread_mutex_destroy(&a->mu);
    free(a->tab);
    free(a);
}

static size_t home(const srv_admit *a, const uint8_t key[16])
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < 16; i++) h = (h ^ key[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (a->cap - 1);
}

/* The slot of key, or the empty slot where it would go. */
static size_t find(const srv_admit *a, const uint8_t key[16])
{
    size_t i = home(a, key);
    while (a->tab[i].n && memcmp(a->tab[i].key, key, 16)) i = (i + 1) & (a->cap - 1);
    return i;
}

/* Empties slot i and moves later entries of its cluster back so that each
 * stays reachable from its home slot. */
static void slot_clear(srv_admit *a, size_t i)
{
    const size_t mask = a->cap - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!a->tab[j].n) break;
        const size_t k = home(a, a->tab[j].key);
        /* the entry at j may move to i unless its home lies cyclically in (i, j] */
        const bool stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
        if (stays) continue;
        a->tab[i] = a->tab[j];
        i = j;
    }
    a->tab[i].n = 0;
}

static void addr_key(const struct sockaddr *sa, uint8_t key[16])
{
    memset(key, 0, 16);
    if (!sa) return;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)(const void *)sa;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &v4->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    }
}

srv_conn *srv_admit_open(srv_admit *a, const struct sockaddr *peer)
{
    srv_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    addr_key(peer, c->key);
    pthread_mutex_lock(&a->mu);
    const size_t i = find(a, c->key);
    if (a->n_open >= a->max_open)
        c->refused = SRV_REFUSED_GLOBAL;
    else if (a->tab[i].n >= a->max_per_addr)
        c->refused = SRV_REFUSED_PER_ADDRESS;
    else {
        if (!a->tab[i].n) memcpy(a->tab[i].key, c->key, 16);
        a->tab[i].n++;
        a->n_open++;
    }
    pthread_mutex_unlock(&a->mu);
    return c;
}

void srv_admit_close(srv_admit *a, srv_conn *c)
{
    if (!c) return;
    if (c->refused == SRV_REFUSED_NONE) {
        pthread_mutex_lock(&a->mu);
        const size_t i = find(a, c->key);
        if (a->tab[i].n) {
            a->n_open--;
            if (--a->tab[i].n == 0) slot_clear(a, i);
        }
        pthread_mutex_unlock(&a->mu);
    }
    free(c);
}

const char *srv_refusal_name(int reason)
{
    switch (reason) {
    case SRV_REFUSED_PER_ADDRESS: return "per_address";
    case SRV_REFUSED_GLOBAL: return "global";
    case SRV_REFUSED_QUEUE_FULL: return "queue_full";
    default: return "none";
    }
}
