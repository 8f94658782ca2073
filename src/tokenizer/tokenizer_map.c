/*
 * tokenizer_map.c — string -> int32 hash map (see tokenizer_map.h).
 *
 * Hash: FNV-1a over the key bytes. The table is sized once, at init, to a power
 * of two >= 2 * n_max, so the load factor stays <= 1/2 and probing terminates.
 */
#include "tokenizer/tokenizer_map.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static uint32_t map_hash(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

int tok_map_init(tok_map *m, size_t n_max)
{
    size_t cap = 16;
    while (cap < 2 * n_max + 2) {
        if (cap > SIZE_MAX / 4 / sizeof(tok_map_slot)) return KVI_E_NOMEM;
        cap *= 2;
    }
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return KVI_E_NOMEM;
    m->cap = cap;
    m->n = 0;
    return 0;
}

int tok_map_put(tok_map *m, const char *key, size_t len, int32_t val, bool replace)
{
    if (!m->slots || len > UINT32_MAX) return KVI_E_INVALID;
    uint32_t h = map_hash(key, len);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        tok_map_slot *s = &m->slots[i];
        if (!s->key) {
            if (2 * (m->n + 1) > m->cap) return KVI_E_INVALID;
            s->key = key;
            s->len = (uint32_t)len;
            s->hash = h;
            s->val = val;
            m->n++;
            return 0;
        }
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            if (replace) s->val = val;
            return 0;
        }
    }
}

int32_t tok_map_get(const tok_map *m, const char *key, size_t len)
{
    if (!m->slots) return -1;
    uint32_t h = map_hash(key, len);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const tok_map_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s->val;
    }
}

void tok_map_free(tok_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}
