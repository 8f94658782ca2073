/*
 * jinja_content.c — which form of message content a chat template expects, read
 * from its syntax tree the way vLLM's _detect_content_format reads jinja2's:
 * "openai" (a list of parts) when some loop iterates a message's content, else
 * "string".
 *
 * The walk: the names that hold the messages are "messages" and, breadth first,
 * every name a `set` assigns from one of them (the value itself, through filters
 * or tests, or a slice of it); the names that hold one message are the targets
 * of `for` loops over those; the template iterates content when a `for` loop
 * runs over message['content'] or message.content of one of them (again through
 * filters, tests or a slice). As in vLLM there is no scoping: a name counts
 * wherever it is assigned. A matching `set` or `for` whose target is not a
 * plain name (a tuple) ends the walk with "string", vLLM's default.
 *
 * Bounded: at most CN_MAX names are followed; the tree is read, never written.
 */
#include "template/jinja_int.h"

#include <stdlib.h>
#include <string.h>

#define CN_MAX 64 /* names followed (a template assigns the messages to a few) */

typedef struct cnames {
    const char *s[CN_MAX];
    size_t n[CN_MAX];
    int count;
} cnames;

static bool name_is(const jnode *x, const char *s, size_t n)
{
    return x && x->type == N_NAME && x->n == n && !memcmp(x->s, s, n);
}

/* x is name[key] or name.key (key a string literal). */
static bool is_key(const jnode *x, const char *s, size_t n, const char *key)
{
    const size_t kn = strlen(key);
    if (!x || x->nk < 1 || !name_is(x->kids[0], s, n)) return false;
    if (x->type == N_ATTR) return x->n == kn && !memcmp(x->s, key, kn);
    if (x->type != N_ITEM || x->nk < 2 || !x->kids[1] || x->kids[1]->type != N_LIT) return false;
    const jv *v = x->kids[1]->val;
    return v && v->kind == JV_STR && v->u.str.n == kn && !memcmp(v->u.str.s, key, kn);
}

/* x reads name (key NULL) or name[key], maybe through filters, tests or a slice. */
static bool reads(const jnode *x, const char *s, size_t n, const char *key)
{
    while (x && (x->type == N_FILTER || x->type == N_TEST || x->type == N_SLICE) && x->nk > 0) x = x->kids[0];
    if (!x) return false;
    return key ? is_key(x, s, n, key) : name_is(x, s, n);
}

static bool cn_has(const cnames *c, const char *s, size_t n)
{
    for (int i = 0; i < c->count; i++)
        if (c->n[i] == n && !memcmp(c->s[i], s, n)) return true;
    return false;
}

static void cn_add(cnames *c, const char *s, size_t n)
{
    if (c->count < CN_MAX && !cn_has(c, s, n)) {
        c->s[c->count] = s;
        c->n[c->count++] = n;
    }
}

/* The statements of the tree of one kind (N_SET or N_FOR), depth first. */
typedef struct cwalk {
    const jnode *found[1024];
    int n;
} cwalk;

static void collect(const jnode *x, int type, cwalk *w, int depth)
{
    if (!x || depth > 200) return;
    if (x->type == type && w->n < (int)(sizeof w->found / sizeof *w->found)) w->found[w->n++] = x;
    for (size_t i = 0; i < x->nk; i++) collect(x->kids[i], type, w, depth + 1);
}

/* Adds to out the names `for` loops over a name of in bind (key: over name[key]);
 * false when such a loop's target is not a name. */
static bool loop_targets(const cwalk *loops, const cnames *in, const char *key, cnames *out)
{
    for (int l = 0; l < loops->n; l++) {
        const jnode *f = loops->found[l];
        if (f->nk < 2) continue;
        for (int i = 0; i < in->count; i++) {
            if (!reads(f->kids[1], in->s[i], in->n[i], key)) continue;
            if (!f->kids[0] || f->kids[0]->type != N_NAME) return false;
            cn_add(out, f->kids[0]->s, f->kids[0]->n);
            break;
        }
    }
    return true;
}

bool jinja_iterates_content(const jnode *root)
{
    cwalk *ws = calloc(2, sizeof *ws); /* the sets and the loops (8 KiB each: not on the stack) */
    if (!ws) return false;
    collect(root, N_SET, &ws[0], 0);
    collect(root, N_FOR, &ws[1], 0);
    cnames msgs = { .count = 0 }, one = { .count = 0 }, parts = { .count = 0 };
    cn_add(&msgs, "messages", 8);
    bool ok = true;
    /* breadth first: the list grows while it is read */
    for (int q = 0; ok && q < msgs.count; q++)
        for (int k = 0; k < ws[0].n; k++) {
            const jnode *st = ws[0].found[k];
            if (st->nk < 2 || !reads(st->kids[1], msgs.s[q], msgs.n[q], NULL)) continue;
            if (!st->kids[0] || st->kids[0]->type != N_NAME) {
                ok = false;
                break;
            }
            cn_add(&msgs, st->kids[0]->s, st->kids[0]->n);
        }
    ok = ok && loop_targets(&ws[1], &msgs, NULL, &one) && loop_targets(&ws[1], &one, "content", &parts);
    free(ws);
    return ok && parts.count > 0;
}
