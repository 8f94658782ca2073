/*
 * grammar_mask.c — which tokens a grammar allows next: the vocabulary as a trie
 * of byte strings (kvi_grammar_vocab, layout in grammar_int.h) and the mask walk.
 *
 * The trie is built once per model from the tokens sorted by their bytes (each
 * token shares its longest common prefix with the previous one), so children
 * are in byte order and tokens with the same bytes sit on one node. Tokens with
 * an empty piece (control tokens) and end-of-generation tokens are not in it,
 * except, in a vocabulary made with markers, the control tokens that are a
 * tool-call format's markers (kvi_tool_format_marker): they stand for their
 * special text, and one that ends generation is not an end-of-generation
 * token there (the grammar places it).
 *
 * The mask walks the trie depth first from the matcher's state: the state after
 * a node is one gm_advance_byte from its parent's, so a prefix shared by many
 * tokens is matched once, and a dead state prunes the whole subtree; a byte that
 * leaves the state as it was (most bytes inside a string) costs no advance (see
 * mask_walk). A node's
 * tokens are allowed when the state after it is alive (a half-read UTF-8 code
 * point counts as alive while some stack could still take it). End-of-generation
 * tokens are allowed exactly when the state is accepting.
 *
 * Invariants: the walk gives exactly grammar_mask_reference's answer (every
 * token's bytes run through the matcher alone; tests/test_grammar.c compares
 * them on random grammars and states); the walk's states and node cursor are
 * sized once per matcher (max token length + 2), so a mask allocates only when a
 * state outgrows its buffer. Masks are cached per matcher by state (GM_CACHE
 * entries, least recently used replaced): a state seen before costs a compare
 * and a copy.
 */
#include "kvinfer.h"
#include "base/error.h"
#include "sampling/grammar_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- the vocabulary ---- */

typedef struct sort_ctx {
    const uint8_t *bytes;
    const uint32_t *off;
} sort_ctx;

static int tok_cmp(const sort_ctx *c, int32_t a, int32_t b)
{
    uint32_t la = c->off[a + 1] - c->off[a], lb = c->off[b + 1] - c->off[b];
    int r = memcmp(c->bytes + c->off[a], c->bytes + c->off[b], la < lb ? la : lb);
    if (r) return r;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Sorts toks[0 .. n) by bytes: a bottom-up merge sort (qsort has no context
 * argument in C11, and the vocabulary may be built on several threads). */
static int sort_tokens(int32_t *toks, int32_t n, const sort_ctx *ctx)
{
    int32_t *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return KVI_E_NOMEM;
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = tok_cmp(ctx, toks[j], toks[i]) < 0 ? toks[j++] : toks[i++];
            while (i < mid) tmp[k++] = toks[i++];
            while (j < hi) tmp[k++] = toks[j++];
        }
        memcpy(toks, tmp, (size_t)n * sizeof *toks);
    }
    free(tmp);
    return 0;
}

/* The piece token t stands for in grammars: its text, or for a hidden (control)
 * token that is a marker of f (with markers on), its special text. Sets *marker
 * for the latter. The length (may exceed cap: then the token is never allowed). */
static int32_t vocab_piece(const kvi_model *m, int32_t t, bool markers, kvi_tool_format f, bool reasoning,
                           char *piece, size_t cap, bool *marker)
{
    *marker = false;
    int32_t n = kvi_token_to_piece(m, t, piece, cap, false);
    if (n > 0 || !markers) return n;
    int32_t ns = kvi_token_to_piece(m, t, piece, cap - 1, true);
    if (ns <= 0 || (size_t)ns >= cap) return n;
    piece[ns] = 0;
    if (!kvi_tool_format_marker(f, reasoning, piece)) return n;
    *marker = true;
    return ns;
}

static kvi_grammar_vocab *vocab_build(const kvi_model *m, bool markers, kvi_tool_format f, bool reasoning,
                                      kvi_error *err)
{
    const int32_t nv = m ? kvi_n_vocab(m) : 0;
    if (nv <= 0) {
        err_set(err, KVI_E_INVALID, "grammar: no vocabulary");
        return NULL;
    }
    kvi_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) goto oom;
    v->n_vocab = nv;
    v->off = malloc(((size_t)nv + 1) * sizeof *v->off);
    v->is_eog = calloc((size_t)nv, 1);
    v->toks = malloc((size_t)nv * sizeof *v->toks);
    if (!v->off || !v->is_eog || !v->toks) goto oom;
    size_t cap = (size_t)nv * 8 + 64, len = 0;
    v->bytes = malloc(cap);
    if (!v->bytes) goto oom;
    char piece[256];
    for (int32_t t = 0; t < nv; t++) {
        v->off[t] = (uint32_t)len;
        bool marker;
        int32_t n = vocab_piece(m, t, markers, f, reasoning, piece, sizeof piece, &marker);
        /* a marker that ends generation (Harmony's <|call|>) is text the grammar places */
        v->is_eog[t] = kvi_token_is_eog(m, t) && !marker;
        if (v->is_eog[t] || n <= 0) continue;
        if ((size_t)n > sizeof piece) n = 0; /* longer than any real token: never allowed */
        if (len + (size_t)n > UINT32_MAX / 2) goto oom;
        if (len + (size_t)n > cap) {
            cap = 2 * (len + (size_t)n);
            uint8_t *b = realloc(v->bytes, cap);
            if (!b) goto oom;
            v->bytes = b;
        }
        memcpy(v->bytes + len, piece, (size_t)n);
        len += (size_t)n;
        if ((uint32_t)n > v->max_len) v->max_len = (uint32_t)n;
    }
    v->off[nv] = (uint32_t)len;

    /* trie over the non-empty tokens in byte order */
    int32_t nt = 0;
    for (int32_t t = 0; t < nv; t++)
        if (v->off[t + 1] > v->off[t]) v->toks[nt++] = t;
    sort_ctx ctx = { v->bytes, v->off };
    if (sort_tokens(v->toks, nt, &ctx) != 0) goto oom;
    v->nodes = calloc(len + 1, sizeof *v->nodes);
    uint32_t *path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    uint32_t *last = calloc(len + 1, sizeof *last); /* last child of each node */
    if (!v->nodes || !path || !last) {
        free(path);
        free(last);
        goto oom;
    }
    v->n_nodes = 1;
    path[0] = 0;
    uint32_t prev_len = 0;
    const uint8_t *prev = NULL;
    for (int32_t i = 0; i < nt; i++) {
        const int32_t t = v->toks[i];
        const uint8_t *s = v->bytes + v->off[t];
        const uint32_t l = v->off[t + 1] - v->off[t];
        uint32_t lcp = 0;
        while (prev && lcp < l && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        for (uint32_t d = lcp; d < l; d++) {
            uint32_t nd = v->n_nodes++, parent = path[d];
            v->nodes[nd].byte = s[d];
            if (last[parent])
                v->nodes[last[parent]].next_sibling = nd;
            else
                v->nodes[parent].first_child = nd;
            last[parent] = nd;
            path[d + 1] = nd;
        }
        gv_node *leaf = &v->nodes[path[l]];
        if (leaf->n_tok == 0) leaf->tok_first = (uint32_t)i;
        leaf->n_tok++;
        prev = s;
        prev_len = l;
    }
    free(path);
    free(last);
    return v;
oom:
    kvi_grammar_vocab_free(v);
    err_set(err, KVI_E_NOMEM, "grammar: out of memory");
    return NULL;
}

kvi_grammar_vocab *kvi_grammar_vocab_create(const kvi_model *m, kvi_error *err)
{
    return vocab_build(m, false, KVI_TOOLS_NONE, false, err);
}

kvi_grammar_vocab *kvi_grammar_vocab_create_markers(const kvi_model *m, kvi_tool_format f, bool reasoning,
                                                    kvi_error *err)
{
    return vocab_build(m, true, f, reasoning, err);
}

void kvi_grammar_vocab_free(kvi_grammar_vocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->is_eog);
    free(v->nodes);
    free(v->toks);
    free(v);
}

/* ---- masks ---- */

static int32_t set_eog(const kvi_grammar_vocab *v, const gm_state *st, uint32_t *bits)
{
    if (!gm_state_accepting(st)) return 0;
    int32_t n = 0;
    for (int32_t t = 0; t < v->n_vocab; t++)
        if (v->is_eog[t]) {
            bits[t >> 5] |= 1u << (t & 31);
            n++;
        }
    return n;
}

int32_t grammar_mask_reference(const kvi_grammar *g, const kvi_grammar_vocab *v, const gm_state *st,
                               uint32_t *bits)
{
    const size_t nw = ((size_t)v->n_vocab + 31) / 32;
    memset(bits, 0, nw * sizeof *bits);
    gm_state a = { 0 }, b = { 0 };
    gm_scratch sc;
    if (gm_scratch_init(&sc) != 0) return KVI_E_NOMEM;
    int32_t count = set_eog(v, st, bits);
    for (int32_t t = 0; t < v->n_vocab; t++) {
        const uint32_t lo = v->off[t], hi = v->off[t + 1];
        if (v->is_eog[t] || lo == hi) continue;
        const gm_state *from = st;
        bool ok = true;
        for (uint32_t i = lo; i < hi && ok; i++) {
            gm_state *to = ((i - lo) & 1) ? &b : &a;
            ok = gm_advance_byte(g, from, v->bytes[i], to, &sc);
            from = to;
        }
        if (ok) {
            bits[t >> 5] |= 1u << (t & 31);
            count++;
        }
    }
    gm_state_free(&a);
    gm_state_free(&b);
    gm_scratch_free(&sc);
    return count;
}

/* The trie walk (see the header). State objects: 0 is the matcher's state, k > 0
 * is walk[k]; depth d's state is object obj[d]. A transition that gives back the
 * same state (inside a string, most bytes) makes the child share its parent's
 * object, and each object remembers which bytes loop or die, so a subtree of
 * such bytes costs no advance at all. */
static int32_t mask_walk(kvi_grammar_matcher *m, uint32_t *bits)
{
    const kvi_grammar_vocab *v = m->v;
    const gv_node *nodes = v->nodes;
    memset(bits, 0, ((size_t)v->n_vocab + 31) / 32 * sizeof *bits);
    int32_t count = set_eog(v, &m->cur, bits);
    if (m->cur.dead) return count;
    int32_t d = 0;
    m->it[0] = nodes[0].first_child;
    m->obj[0] = 0;
    memset(&m->memo[0], 0, sizeof m->memo[0]);
    while (d >= 0) {
        const uint32_t c = m->it[d];
        if (c == 0) {
            d--;
            continue;
        }
        m->it[d] = nodes[c].next_sibling;
        const uint32_t o = m->obj[d];
        gm_memo *mo = &m->memo[o];
        const uint8_t b = nodes[c].byte;
        const uint64_t bit = 1ull << (b & 63);
        if (mo->known[b >> 6] & bit) {
            if (mo->dead[b >> 6] & bit) continue;
            m->obj[d + 1] = o; /* known and alive: a loop (others are never recorded) */
        } else {
            const gm_state *from = o == 0 ? &m->cur : &m->walk[o];
            gm_state *to = &m->walk[d + 1];
            if (!gm_advance_byte(m->g, from, b, to, &m->sc)) {
                mo->known[b >> 6] |= bit;
                mo->dead[b >> 6] |= bit;
                continue;
            }
            if (gm_state_equal(to, from)) {
                mo->known[b >> 6] |= bit;
                mo->loop[b >> 6] |= bit;
                m->obj[d + 1] = o;
            } else {
                m->obj[d + 1] = (uint32_t)d + 1;
                memset(&m->memo[d + 1], 0, sizeof m->memo[d + 1]);
            }
        }
        for (uint32_t k = 0; k < nodes[c].n_tok; k++) {
            const int32_t t = v->toks[nodes[c].tok_first + k];
            bits[t >> 5] |= 1u << (t & 31);
        }
        count += (int32_t)nodes[c].n_tok;
        if (nodes[c].first_child) {
            d++;
            m->it[d] = nodes[c].first_child;
        }
    }
    return count;
}

int32_t kvi_grammar_matcher_mask(kvi_grammar_matcher *m, uint32_t *bits)
{
    if (!m || !bits) return KVI_E_INVALID;
    const size_t nw = ((size_t)m->v->n_vocab + 31) / 32;
    if (!m->cache_on) return mask_walk(m, bits);
    const uint64_t h = gm_state_hash(&m->cur);
    m->tick++;
    int victim = 0;
    for (int i = 0; i < GM_CACHE; i++) {
        gm_cache_entry *e = &m->cache[i];
        if (e->used && e->hash == h && gm_state_equal(&e->key, &m->cur)) {
            e->used = m->tick;
            memcpy(bits, e->bits, nw * sizeof *bits);
            return e->count;
        }
        if (e->used < m->cache[victim].used) victim = i;
    }
    const int32_t count = mask_walk(m, bits);
    gm_cache_entry *e = &m->cache[victim];
    if (!e->bits) e->bits = malloc(nw * sizeof *e->bits);
    if (e->bits && gm_state_copy(&e->key, &m->cur) == 0) {
        memcpy(e->bits, bits, nw * sizeof *bits);
        e->hash = h;
        e->count = count;
        e->used = m->tick;
    } else {
        e->used = 0;
    }
    return count;
}
