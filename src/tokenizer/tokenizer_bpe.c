/*
 * tokenizer_bpe.c — BPE encoding with ranked merges (GPT-2 byte level, or
 * SentencePiece-style with byte fallback as Hugging Face's BPE model does).
 *
 * The pre-tokenizer cuts the text into pieces; each piece is encoded alone:
 *  1. byte level: each byte becomes the code point GPT-2's bytes_to_unicode gives it
 *     (printable Latin-1 bytes stand for themselves, the other 68 map to U+0100..);
 *  2. the piece is cut into UTF-8 characters (symbols in a linked list over an array);
 *  3. every adjacent pair "left right" found in the merges map is pushed on a
 *     min-heap keyed by (rank asc, left index asc); popping merges right into left
 *     unless either side changed since the push (merged texts only grow, so a
 *     length check finds stale entries); new neighbour pairs are pushed;
 *  4. each final symbol is a token; otherwise its bytes fall back to <0xXX> tokens
 *     (SPM-style vocabularies) or to single-byte tokens when they exist (byte level).
 * With ignore_merges (Llama 3) a piece that already is a token is emitted whole, and so
 * is a newline run with newline_runs_whole (Gemma 4).
 * Merges: tok_map "left right" -> rank (first occurrence wins), keys in merges_arena;
 * both halves of every merge are tokens (checked when built).
 */
#include "base/error.h"
#include "tokenizer/tokenizer_int.h"
#include "tokenizer/merge_heap.h"

#include <stdlib.h>
#include <string.h>

/* ---- GPT-2 bytes_to_unicode ---------------------------------------------- */

static bool byte_is_direct(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cpt(uint8_t b)
{
    if (byte_is_direct(b)) return b;
    uint32_t k = 0; /* rank of b among the bytes that are not direct */
    for (unsigned x = 0; x < b; x++) k += !byte_is_direct(x);
    return 256 + k;
}

int tok_cpt_to_byte(uint32_t cpt)
{
    if (cpt < 256) return byte_is_direct(cpt) ? (int)cpt : -1;
    if (cpt >= 256 + 68) return -1;
    uint32_t k = cpt - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_direct(x) && k-- == 0) return (int)x;
    return -1;
}

void tok_byte_enc_init(tok_tokenizer *t)
{
    for (unsigned b = 0; b < 256; b++) {
        uint32_t c = tok_byte_to_cpt((uint8_t)b);
        if (c < 0x80) {
            t->byte_enc[b][0] = (char)c;
            t->byte_enc_len[b] = 1;
        } else {
            t->byte_enc[b][0] = (char)(0xC0 | (c >> 6));
            t->byte_enc[b][1] = (char)(0x80 | (c & 0x3F));
            t->byte_enc_len[b] = 2;
        }
    }
}

/* ---- merges -------------------------------------------------------------- */

int tok_merges_build(tok_tokenizer *t, const char *const *merges, const size_t *lens, size_t n,
                     kvi_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] > UINT32_MAX / 2 || total > SIZE_MAX / 2)
            return err_set(err, KVI_E_FORMAT, "tokenizer: merge %zu too long", i);
        total += lens[i];
    }
    if (n > INT32_MAX) return err_set(err, KVI_E_FORMAT, "tokenizer: %zu merges is too many", n);
    free(t->merges_arena);
    tok_map_free(&t->merges);
    t->merges_arena = malloc(total ? total : 1);
    if (!t->merges_arena || tok_map_init(&t->merges, n) != 0)
        return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory for %zu merges", n);
    char *p = t->merges_arena;
    for (size_t i = 0; i < n; i++) {
        const char *sp = lens[i] > 1 ? memchr(merges[i] + 1, ' ', lens[i] - 1) : NULL;
        if (!sp) return err_set(err, KVI_E_FORMAT, "tokenizer: merge %zu has no space separator", i);
        /* Both halves must be tokens (as Hugging Face tokenizers requires): a merge of
         * unknown pieces can never fire and means the file is corrupt. */
        size_t ll = (size_t)(sp - merges[i]), lr = lens[i] - ll - 1;
        if (tok_map_get(&t->map, merges[i], ll) < 0 || tok_map_get(&t->map, sp + 1, lr) < 0)
            return err_set(err, KVI_E_FORMAT, "tokenizer: merge %zu names a piece that is not a token", i);
        memcpy(p, merges[i], lens[i]);
        tok_map_put(&t->merges, p, lens[i], (int32_t)i, false);
        p += lens[i];
    }
    return 0;
}

/* ---- encoding ------------------------------------------------------------ */

typedef struct bpe_sym {
    int32_t prev, next; /* neighbours, -1 at the ends */
    size_t off, n;      /* bytes of the piece; n == 0 once merged away */
} bpe_sym;

typedef struct bpe_work {
    const tok_tokenizer *t;
    tok_ids *out;
    char *word; /* [word_cap] the piece, byte-level encoded */
    size_t word_cap;
    bpe_sym *sym; /* [sym_cap] */
    size_t sym_cap;
    tok_heap heap; /* candidate merges, key = rank */
    char *key;     /* [key_cap] "left right" scratch */
    size_t key_cap;
} bpe_work;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *nv = realloc(*p, c * elem);
    if (!nv) return KVI_E_NOMEM;
    *p = nv;
    *cap = c;
    return 0;
}

static int try_pair(bpe_work *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return 0;
    const bpe_sym *a = &w->sym[l], *b = &w->sym[r];
    size_t klen = a->n + 1 + b->n;
    if (grow((void **)&w->key, &w->key_cap, klen, 1) != 0) return KVI_E_NOMEM;
    memcpy(w->key, w->word + a->off, a->n);
    w->key[a->n] = ' ';
    memcpy(w->key + a->n + 1, w->word + b->off, b->n);
    int32_t rank = tok_map_get(&w->t->merges, w->key, klen);
    if (rank < 0) return 0;
    return tok_heap_push(&w->heap, (tok_pair){ (double)rank, l, r, a->n + b->n });
}

static int emit_unknown(bpe_work *w, const char *p, size_t n)
{
    const tok_tokenizer *t = w->t;
    for (size_t j = 0; !t->byte_level && j < n; j++) /* a byte without its token: one <unk> */
        if (t->byte_id[(unsigned char)p[j]] < 0) return t->unk >= 0 ? tok_ids_push(w->out, t->unk) : 0;
    for (size_t j = 0; j < n; j++) {
        int32_t id = t->byte_level ? tok_find(t, p + j, 1) : t->byte_id[(unsigned char)p[j]];
        if (id < 0 && !t->byte_level) id = t->unk;
        if (id >= 0 && tok_ids_push(w->out, id) != 0) return KVI_E_NOMEM;
    }
    return 0;
}

static bool all_newlines(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n') return false;
    return n > 0;
}

static int encode_piece(void *ctx, const char *piece, size_t plen)
{
    bpe_work *w = ctx;
    const tok_tokenizer *t = w->t;
    if (plen == 0) return 0;
    size_t len = 0;
    if (t->byte_level) {
        if (plen > SIZE_MAX / 2 || grow((void **)&w->word, &w->word_cap, 2 * plen, 1) != 0)
            return KVI_E_NOMEM;
        for (size_t i = 0; i < plen; i++) {
            unsigned char b = (unsigned char)piece[i];
            memcpy(w->word + len, t->byte_enc[b], t->byte_enc_len[b]);
            len += t->byte_enc_len[b];
        }
    } else {
        if (grow((void **)&w->word, &w->word_cap, plen, 1) != 0) return KVI_E_NOMEM;
        memcpy(w->word, piece, plen);
        len = plen;
    }
    if (t->ignore_merges || (t->newline_runs_whole && all_newlines(w->word, len))) {
        int32_t id = tok_find(t, w->word, len);
        if (id >= 0) return tok_ids_push(w->out, id);
    }
    if (len > INT32_MAX || grow((void **)&w->sym, &w->sym_cap, len, sizeof *w->sym) != 0) return KVI_E_NOMEM;
    int32_t ns = 0;
    for (size_t off = 0; off < len;) {
        size_t n = tok_utf8_char(w->word + off, len - off);
        w->sym[ns] = (bpe_sym){ ns - 1, -1, off, n };
        if (ns > 0) w->sym[ns - 1].next = ns;
        ns++;
        off += n;
    }
    w->heap.n = 0;
    int rc = 0;
    for (int32_t i = 1; i < ns && rc == 0; i++) rc = try_pair(w, i - 1, i);
    while (rc == 0 && w->heap.n > 0) {
        tok_pair p = tok_heap_pop(&w->heap);
        bpe_sym *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = p.left;
        rc = try_pair(w, l->prev, p.left);
        if (rc == 0) rc = try_pair(w, p.left, l->next);
    }
    for (int32_t i = 0; rc == 0 && i >= 0; i = w->sym[i].next) {
        int32_t id = tok_find(t, w->word + w->sym[i].off, w->sym[i].n);
        if (id >= 0)
            rc = tok_ids_push(w->out, id);
        else
            rc = emit_unknown(w, w->word + w->sym[i].off, w->sym[i].n);
    }
    return rc;
}

int tok_bpe_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
    bpe_work w = { .t = t, .out = out };
    int rc =
        t->pretok ? tok_pretok_split(t->pretok, text, len, encode_piece, &w) : encode_piece(&w, text, len);
    free(w.word);
    free(w.sym);
    free(w.heap.v);
    free(w.key);
    return rc;
}
