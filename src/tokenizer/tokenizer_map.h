/*
 * tokenizer_map.h — a hash map from byte strings to int32 values.
 *
 * Open addressing with linear probing; the capacity is a power of two at least
 * twice the number of entries, so a probe always ends at an empty slot. Keys are
 * not copied: each key points into memory that outlives the map (the tokenizer's
 * text arenas). Values are >= 0; lookups return -1 when absent.
 */
#ifndef KVI_TOKENIZER_MAP_H
#define KVI_TOKENIZER_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tok_map_slot {
    const char *key; /* NULL: empty slot */
    uint32_t len;    /* key bytes */
    uint32_t hash;
    int32_t val;
} tok_map_slot;

typedef struct tok_map {
    tok_map_slot *slots; /* [cap] */
    size_t cap;          /* power of two, 0 before init */
    size_t n;            /* entries in use */
} tok_map;

/* Room for n_max entries without growth. 0 or KVI_E_NOMEM. */
int tok_map_init(tok_map *m, size_t n_max);
/* Inserts key -> val. An existing key is overwritten when replace, kept otherwise.
 * Fails (KVI_E_INVALID) only when the map is full; size it with init. */
int tok_map_put(tok_map *m, const char *key, size_t len, int32_t val, bool replace);
int32_t tok_map_get(const tok_map *m, const char *key, size_t len);
void tok_map_free(tok_map *m);

#endif
