/*
 * merge_heap.c — tok_heap push and pop (merge_heap.h): sift up, sift down.
 */
#include "tokenizer/merge_heap.h"

#include "kvinfer_types.h"

#include <stdbool.h>
#include <stdlib.h>

static bool pair_before(const tok_pair *a, const tok_pair *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

int tok_heap_push(tok_heap *h, tok_pair p)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tok_pair *nv = realloc(h->v, cap * sizeof *nv);
        if (!nv) return KVI_E_NOMEM;
        h->v = nv;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_before(&p, &h->v[up])) break;
        h->v[i] = h->v[up];
        i = up;
    }
    h->v[i] = p;
    return 0;
}

tok_pair tok_heap_pop(tok_heap *h)
{
    tok_pair top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && pair_before(&h->v[c + 1], &h->v[c])) c++;
        if (!pair_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}
