/*
 * tokenizer_spm.c — SentencePiece BPE encoding (merges ordered by piece score).
 *
 * The text (spaces already "▁" when the vocabulary escapes them, see tokenizer.c) is cut into UTF-8
 * characters: symbols in a doubly linked list over one array. Every adjacent pair
 * whose concatenation is a token goes into a max-heap keyed by (score desc, left
 * index asc). Popping the best pair merges right into left (right.n = 0) unless
 * either side changed since the push (stale entries are skipped by checking the
 * lengths), then the new neighbours are pushed. At the end each symbol is a token,
 * or an unknown character that is emitted as its byte-fallback tokens.
 * This is llama.cpp's llm_tokenizer_spm and, with a plain space and no escaping,
 * exactly the merge order of llama2.c's encode() (best score, leftmost on ties).
 * Cost: O(n log n) for n characters.
 */
#include "tokenizer/tokenizer_int.h"
#include "tokenizer/merge_heap.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_sym {
    int32_t prev, next; /* neighbours in the list, -1 at the ends */
    size_t off, n;      /* bytes [off, off+n) of the text; n == 0 once merged away */
} spm_sym;

static int try_pair(const tok_tokenizer *t, const char *text, const spm_sym *s, int32_t l, int32_t r,
                    tok_heap *h)
{
    if (l < 0 || r < 0) return 0;
    size_t size = s[l].n + s[r].n;
    int32_t id = tok_find(t, text + s[l].off, size);
    if (id < 0) return 0;
    return tok_heap_push(h, (tok_pair){ -(double)t->score[id], l, r, size });
}

/* An unknown character: its byte tokens, or one <unk> when a byte has none. */
static int emit_bytes(const tok_tokenizer *t, const char *p, size_t n, tok_ids *out)
{
    for (size_t j = 0; j < n; j++)
        if (t->byte_id[(unsigned char)p[j]] < 0) return t->unk >= 0 ? tok_ids_push(out, t->unk) : 0;
    for (size_t j = 0; j < n; j++)
        if (tok_ids_push(out, t->byte_id[(unsigned char)p[j]]) != 0) return KVI_E_NOMEM;
    return 0;
}

int tok_spm_encode(const tok_tokenizer *t, const char *raw, size_t raw_len, tok_ids *out)
{
    if (raw_len == 0) return 0;
    const char *s = raw;
    size_t len = raw_len;

    int rc = 0;
    tok_heap heap = { 0 };                    /* candidate merges, key = -score */
    spm_sym *sym = malloc(len * sizeof *sym); /* at most one symbol per byte */
    if (!sym || len > INT32_MAX) {
        free(sym);
        return KVI_E_NOMEM;
    }
    int32_t ns = 0;
    for (size_t off = 0; off < len;) {
        size_t n = tok_utf8_char(s + off, len - off);
        sym[ns] = (spm_sym){ ns - 1, -1, off, n };
        if (ns > 0) sym[ns - 1].next = ns;
        ns++;
        off += n;
    }
    for (int32_t i = 1; i < ns && rc == 0; i++) rc = try_pair(t, s, sym, i - 1, i, &heap);
    while (rc == 0 && heap.n > 0) {
        tok_pair p = tok_heap_pop(&heap);
        spm_sym *l = &sym[p.left], *r = &sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        rc = try_pair(t, s, sym, l->prev, p.left, &heap);
        if (rc == 0) rc = try_pair(t, s, sym, p.left, l->next, &heap);
    }
    for (int32_t i = 0; rc == 0 && i >= 0 && ns > 0; i = sym[i].next) {
        int32_t id = tok_find(t, s + sym[i].off, sym[i].n);
        if (id >= 0)
            rc = tok_ids_push(out, id);
        else
            rc = emit_bytes(t, s + sym[i].off, sym[i].n, out);
    }
    free(heap.v);
    free(sym);
    return rc;
}
