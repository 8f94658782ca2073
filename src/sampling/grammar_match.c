/*
 * grammar_match.c — where an output stands in a grammar: a set of stacks of
 * element positions (gm_state, layout in grammar_int.h), advanced one byte at a
 * time over UTF-8, and the public kvi_grammar_matcher calls that consume text.
 *
 * Expansion: a position is resolved until it is a GR_CHAR (the stack is emitted
 * with it on top), or the stack runs out (the empty stack: the root is complete).
 * GR_END pops; GR_REF r pushes the position after it (unless that is an END: a
 * tail call, so `x*` does not grow the stack) and expands each alternative of r.
 * While expanding, the stack is the advanced stack's positions base[0 .. k) (read
 * only) under a linked list of pushed positions that lives in the callers' frames,
 * so alternatives never see each other's pushes and pops and nothing is copied
 * until a stack is emitted.
 *
 * Invariants: a state's stacks are distinct (a hash set per advance dedupes
 * them); every bound (GM_MAX_STACKS stacks, GM_MAX_DEPTH positions a stack,
 * GM_MAX_LEVEL nested references, GM_MAX_EXPAND steps an advance) turns the
 * output dead rather than growing or recursing further, so a hostile grammar
 * rejects instead of exhausting memory or the thread's stack; the grammar has no
 * left recursion (grammar_parse.c), so expansion terminates. A UTF-8 lead byte
 * keeps the stacks and records the bits so far; the state is alive only while
 * some stack's character set meets the code points that could still follow.
 */
#include "kvinfer.h"
#include "base/error.h"
#include "sampling/grammar_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- character sets ---- */

bool gr_set_has(const kvi_grammar *g, uint32_t set, uint32_t c)
{
    const gr_set *s = &g->sets[set];
    if (c < 128) return (s->ascii[c >> 6] >> (c & 63)) & 1;
    const uint32_t *r = g->ranges + 2 * (size_t)s->first;
    uint32_t lo = 0, hi = s->n; /* first range whose end >= c */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r[2 * mid + 1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && r[2 * lo] <= c;
}

bool gr_set_meets(const kvi_grammar *g, uint32_t set, uint32_t a, uint32_t b)
{
    const gr_set *s = &g->sets[set];
    const uint32_t *r = g->ranges + 2 * (size_t)s->first;
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r[2 * mid + 1] < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && r[2 * lo] <= b;
}

/* ---- states ---- */

int gm_scratch_init(gm_scratch *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->stk = malloc((GM_MAX_DEPTH + 1) * sizeof *sc->stk);
    sc->hash = calloc(GM_HASH_CAP, sizeof *sc->hash);
    if (!sc->stk || !sc->hash) {
        gm_scratch_free(sc);
        return KVI_E_NOMEM;
    }
    return 0;
}

void gm_scratch_free(gm_scratch *sc)
{
    free(sc->stk);
    free(sc->hash);
    sc->stk = NULL;
    sc->hash = NULL;
}

void gm_state_free(gm_state *st)
{
    free(st->buf);
    memset(st, 0, sizeof *st);
}

static bool state_reserve(gm_state *st, size_t need)
{
    if (need <= st->cap) return true;
    size_t nc = st->cap ? st->cap * 2 : 64;
    while (nc < need) nc *= 2;
    uint32_t *b = realloc(st->buf, nc * sizeof *b);
    if (!b) return false;
    st->buf = b;
    st->cap = nc;
    return true;
}

static void state_clear(gm_state *st)
{
    st->len = 0;
    st->n_stacks = 0;
    st->cp = 0;
    st->need = 0;
    st->slen = 0;
    st->dead = false;
}

int gm_state_copy(gm_state *dst, const gm_state *src)
{
    if (!state_reserve(dst, src->len)) return KVI_E_NOMEM;
    if (src->len) memcpy(dst->buf, src->buf, src->len * sizeof *dst->buf);
    dst->len = src->len;
    dst->n_stacks = src->n_stacks;
    dst->cp = src->cp;
    dst->need = src->need;
    dst->slen = src->slen;
    dst->dead = src->dead;
    return 0;
}

bool gm_state_equal(const gm_state *a, const gm_state *b)
{
    return a->len == b->len && a->n_stacks == b->n_stacks && a->cp == b->cp && a->need == b->need &&
           a->slen == b->slen && a->dead == b->dead &&
           (a->len == 0 || memcmp(a->buf, b->buf, a->len * sizeof *a->buf) == 0);
}

static uint64_t hash_words(const uint32_t *w, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

uint64_t gm_state_hash(const gm_state *st)
{
    uint64_t h = hash_words(st->buf, st->len, 0xCBF29CE484222325ull);
    uint32_t tail[4] = { st->cp, st->need, st->slen, st->dead };
    return hash_words(tail, 4, h);
}

bool gm_state_accepting(const gm_state *st)
{
    if (st->dead || st->need) return false;
    for (size_t o = 0; o < st->len; o += 1 + st->buf[o])
        if (st->buf[o] == 0) return true;
    return false;
}

/* ---- expansion ---- */

typedef struct gm_node {
    uint32_t pos;
    uint32_t depth; /* positions in the list from here down */
    const struct gm_node *next;
} gm_node;

/* Appends the stack in sc->stk[0 .. n) to out unless it is there already. */
static void emit(gm_state *out, gm_scratch *sc, uint32_t n)
{
    uint64_t h = hash_words(sc->stk, n, 0xCBF29CE484222325ull ^ n);
    uint32_t slot = (uint32_t)(h ^ (h >> 29)) & (GM_HASH_CAP - 1);
    for (;;) {
        uint64_t e = sc->hash[slot];
        if ((uint32_t)(e >> 32) != sc->stamp) break;
        const uint32_t *s = out->buf + (uint32_t)e;
        if (s[0] == n && memcmp(s + 1, sc->stk, n * sizeof *s) == 0) return;
        slot = (slot + 1) & (GM_HASH_CAP - 1);
    }
    if (out->n_stacks >= GM_MAX_STACKS || !state_reserve(out, out->len + 1 + n)) {
        out->dead = true;
        return;
    }
    sc->hash[slot] = ((uint64_t)sc->stamp << 32) | (uint32_t)out->len;
    out->buf[out->len] = n;
    memcpy(out->buf + out->len + 1, sc->stk, n * sizeof *sc->stk);
    out->len += 1 + n;
    out->n_stacks++;
}

/* Resolves position pos over the stack base[0 .. k) + top (see the header). */
static void expand(const kvi_grammar *g, gm_state *out, gm_scratch *sc, const uint32_t *base, uint32_t k,
                   const gm_node *top, uint32_t pos, uint32_t level)
{
    for (;;) {
        if (out->dead) return;
        if (++sc->n_expand > GM_MAX_EXPAND) {
            out->dead = true;
            return;
        }
        const gr_elem *e = &g->elems[pos];
        if (e->kind == GR_END) {
            if (top) {
                pos = top->pos;
                top = top->next;
            } else if (k > 0) {
                pos = base[--k];
            } else {
                emit(out, sc, 0);
                return;
            }
            continue;
        }
        if (e->kind == GR_CHAR) {
            uint32_t nt = top ? top->depth : 0;
            if (k + nt + 1 > GM_MAX_DEPTH) {
                out->dead = true;
                return;
            }
            if (k) memcpy(sc->stk, base, k * sizeof *base);
            uint32_t i = k + nt;
            for (const gm_node *t = top; t; t = t->next) sc->stk[--i] = t->pos;
            sc->stk[k + nt] = pos;
            emit(out, sc, k + nt + 1);
            return;
        }
        if (level >= GM_MAX_LEVEL) {
            out->dead = true;
            return;
        }
        gm_node n = { pos + 1, (top ? top->depth : 0) + 1, top };
        const gm_node *t2 = g->elems[pos + 1].kind == GR_END ? top : &n;
        const gr_rule *r = &g->rules[e->arg];
        for (uint32_t a = 0; a < r->n_alts; a++)
            expand(g, out, sc, base, k, t2, g->alts[r->alt_first + a], level + 1);
        return;
    }
}

static void begin(gm_state *out, gm_scratch *sc)
{
    state_clear(out);
    sc->n_expand = 0;
    if (++sc->stamp == 0) { /* wrapped: forget every entry */
        memset(sc->hash, 0, GM_HASH_CAP * sizeof *sc->hash);
        sc->stamp = 1;
    }
}

int gm_state_init(const kvi_grammar *g, gm_state *st, gm_scratch *sc)
{
    begin(st, sc);
    const gr_rule *r = &g->rules[g->root];
    for (uint32_t a = 0; a < r->n_alts; a++) expand(g, st, sc, NULL, 0, NULL, g->alts[r->alt_first + a], 0);
    if (st->n_stacks == 0) st->dead = true;
    return 0;
}

/* out = in after code point c. */
static bool advance_cp(const kvi_grammar *g, const gm_state *in, uint32_t c, gm_state *out, gm_scratch *sc)
{
    begin(out, sc);
    for (size_t o = 0; o < in->len; o += 1 + in->buf[o]) {
        const uint32_t n = in->buf[o];
        if (n == 0) continue;
        const uint32_t *s = in->buf + o + 1;
        const uint32_t topp = s[n - 1];
        if (!gr_set_has(g, g->elems[topp].arg, c)) continue;
        expand(g, out, sc, s, n - 1, NULL, topp + 1, 0);
        if (out->dead) return false;
    }
    if (out->n_stacks == 0) out->dead = true;
    return !out->dead;
}

/* Some stack can take a code point in [lo, hi]. */
static bool any_meets(const kvi_grammar *g, const gm_state *st, uint32_t lo, uint32_t hi)
{
    for (size_t o = 0; o < st->len; o += 1 + st->buf[o]) {
        const uint32_t n = st->buf[o];
        if (n && gr_set_meets(g, g->elems[st->buf[o + n]].arg, lo, hi)) return true;
    }
    return false;
}

bool gm_advance_byte(const kvi_grammar *g, const gm_state *in, uint8_t b, gm_state *out, gm_scratch *sc)
{
    if (in->dead) {
        state_clear(out);
        out->dead = true;
        return false;
    }
    uint32_t cp;
    uint8_t need, slen;
    if (in->need == 0) {
        if (b < 0x80) return advance_cp(g, in, b, out, sc);
        if ((b & 0xE0) == 0xC0) {
            cp = b & 0x1F;
            need = 1;
        } else if ((b & 0xF0) == 0xE0) {
            cp = b & 0x0F;
            need = 2;
        } else if ((b & 0xF8) == 0xF0) {
            cp = b & 0x07;
            need = 3;
        } else {
            state_clear(out);
            out->dead = true;
            return false;
        }
        slen = (uint8_t)(need + 1);
    } else {
        if ((b & 0xC0) != 0x80) {
            state_clear(out);
            out->dead = true;
            return false;
        }
        cp = (in->cp << 6) | (b & 0x3F);
        need = (uint8_t)(in->need - 1);
        slen = in->slen;
    }
    /* the code points this sequence can still become, in its shortest form only */
    static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < min_cp[slen]) lo = min_cp[slen];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) {
        state_clear(out);
        out->dead = true;
        return false;
    }
    if (need == 0) return advance_cp(g, in, cp, out, sc);
    if (!any_meets(g, in, lo, hi) || gm_state_copy(out, in) != 0) {
        state_clear(out);
        out->dead = true;
        return false;
    }
    out->cp = cp;
    out->need = need;
    out->slen = slen;
    return true;
}

/* ---- the public matcher: consuming text ---- */

const gm_state *grammar_matcher_state(const kvi_grammar_matcher *m) { return m ? &m->cur : NULL; }

void grammar_matcher_set_cache(kvi_grammar_matcher *m, bool on)
{
    if (m) m->cache_on = on;
}

kvi_grammar_matcher *kvi_grammar_matcher_create(const kvi_grammar *g, const kvi_grammar_vocab *v,
                                                kvi_error *err)
{
    if (!g || !v) {
        err_set(err, KVI_E_INVALID, "grammar: matcher needs a grammar and a vocabulary");
        return NULL;
    }
    kvi_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->g = g;
    m->v = v;
    m->cache_on = true;
    const size_t nd = (size_t)v->max_len + 2;
    m->walk = calloc(nd, sizeof *m->walk);
    m->it = calloc(nd, sizeof *m->it);
    m->obj = calloc(nd, sizeof *m->obj);
    m->memo = calloc(nd, sizeof *m->memo);
    if (!m->walk || !m->it || !m->obj || !m->memo || gm_scratch_init(&m->sc) != 0) goto oom;
    gm_state_init(g, &m->cur, &m->sc);
    return m;
oom:
    kvi_grammar_matcher_free(m);
    err_set(err, KVI_E_NOMEM, "grammar: out of memory");
    return NULL;
}

void kvi_grammar_matcher_free(kvi_grammar_matcher *m)
{
    if (!m) return;
    gm_state_free(&m->cur);
    gm_state_free(&m->tmp);
    gm_state_free(&m->tmp2);
    if (m->walk)
        for (uint32_t d = 0; d < m->v->max_len + 2; d++) gm_state_free(&m->walk[d]);
    free(m->walk);
    free(m->it);
    free(m->obj);
    free(m->memo);
    for (int i = 0; i < GM_CACHE; i++) {
        gm_state_free(&m->cache[i].key);
        free(m->cache[i].bits);
    }
    gm_scratch_free(&m->sc);
    free(m);
}

int kvi_grammar_matcher_accept_bytes(kvi_grammar_matcher *m, const char *s, size_t n)
{
    if (!m || (!s && n)) return KVI_E_INVALID;
    if (n == 0) return 0;
    /* ping-pong between tmp and tmp2; cur untouched until every byte is taken */
    gm_state *buf[2] = { &m->tmp, &m->tmp2 };
    const gm_state *from = &m->cur;
    gm_state *to = NULL;
    for (size_t i = 0; i < n; i++) {
        to = buf[i & 1];
        if (!gm_advance_byte(m->g, from, (uint8_t)s[i], to, &m->sc)) return KVI_E_INVALID;
        from = to;
    }
    gm_state t = m->cur;
    m->cur = *to;
    *to = t;
    return 0;
}

int kvi_grammar_matcher_accept_token(kvi_grammar_matcher *m, int32_t token)
{
    if (!m || token < 0 || token >= m->v->n_vocab) return KVI_E_INVALID;
    if (m->v->is_eog[token]) return gm_state_accepting(&m->cur) ? 0 : KVI_E_INVALID;
    const uint32_t a = m->v->off[token], b = m->v->off[token + 1];
    if (a == b) return KVI_E_INVALID;
    return kvi_grammar_matcher_accept_bytes(m, (const char *)m->v->bytes + a, b - a);
}

bool kvi_grammar_matcher_can_end(const kvi_grammar_matcher *m) { return m && gm_state_accepting(&m->cur); }
