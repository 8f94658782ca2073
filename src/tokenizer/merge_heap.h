/*
 * merge_heap.h — the priority queue of candidate merges that both tokenizers
 * drain: BPE (lowest merge rank first) and SentencePiece (highest score first).
 *
 * Data: a binary min-heap of tok_pair in v[0..n), ordered by (key asc, left asc);
 * BPE pushes key = rank, SentencePiece key = -score (both exact in a double).
 * Invariant: v[i] is never after its children; a pair records the merged text's
 * size when pushed, so a popped pair whose symbols have changed since is stale and
 * skipped by the caller.
 */
#ifndef KVI_MERGE_HEAP_H
#define KVI_MERGE_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_pair {
    double key;          /* smaller merges first */
    int32_t left, right; /* symbol indices */
    size_t size;         /* bytes of the merged text when pushed */
} tok_pair;

typedef struct tok_heap {
    tok_pair *v; /* [cap] */
    size_t n, cap;
} tok_heap;

/* 0, or KVI_E_NOMEM (the heap unchanged). */
int tok_heap_push(tok_heap *h, tok_pair p);
/* The first pair; h->n must be > 0. */
tok_pair tok_heap_pop(tok_heap *h);

#endif
