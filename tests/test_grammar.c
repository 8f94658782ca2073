/*
 * test_grammar.c — GBNF grammars (src/sampling/grammar_*.c):
 *
 *  - parse errors name the problem with its line and column; hostile inputs
 *    (deep nesting, huge repetition, left recursion) are refused, never crash;
 *  - the matcher accepts and rejects strings as the grammar says (literals,
 *    escapes, classes, negation, '.', repetitions, UTF-8, comments, groups);
 *  - on stories260K's vocabulary the trie-walk mask (cache on and off) equals
 *    the brute-force reference (every token's bytes through the matcher) along
 *    random walks, for fixed and randomly generated grammars;
 *  - constrained generation through the scheduler (greedy and random sampling,
 *    constrained and unconstrained requests in one batch) always yields text the
 *    grammar accepts and ends with end of generation when the grammar is complete;
 *  - logit_bias: +100 on one token makes greedy output that token; a bad id is
 *    refused at submit;
 *  - a printed figure: mask time per token (trie + cache vs brute force).
 */
#include "testutil.h"

#include "sched_util.h"

#include "kvinfer.h"
#include "base/clock.h"
#include "sampling/grammar_int.h"

#include <stdlib.h>
#include <string.h>

static void check_parse_error(const char *text, const char *want)
{
    kvi_error err = { 0 };
    kvi_grammar *g = kvi_grammar_parse(text, strlen(text), &err);
    CHECK(g == NULL, "grammar %s should be refused", text);
    CHECK(err.code == KVI_E_INVALID, "code %d for %s", err.code, text);
    CHECK(strstr(err.msg, want) != NULL, "message '%s' lacks '%s'", err.msg, want);
    kvi_grammar_free(g);
}

static kvi_grammar *parse_ok(const char *text)
{
    kvi_error err = { 0 };
    kvi_grammar *g = kvi_grammar_parse(text, strlen(text), &err);
    CHECK(g != NULL, "grammar refused: %s (%s)", err.msg, text);
    return g;
}

static void check_match(const char *gtext, const char *const *yes, const char *const *no)
{
    kvi_grammar *g = parse_ok(gtext);
    if (!g) return;
    for (int i = 0; yes && yes[i]; i++)
        CHECK(grammar_match_exact(g, yes[i]), "'%s' should match %s", yes[i], gtext);
    for (int i = 0; no && no[i]; i++)
        CHECK(!grammar_match_exact(g, no[i]), "'%s' should not match %s", no[i], gtext);
    kvi_grammar_free(g);
}

static void test_parse_errors(void)
{
    check_parse_error("root ::= \"abc", "line 1, column 14: unterminated string literal");
    check_parse_error("root ::= foo", "undefined rule 'foo'");
    check_parse_error("rot ::= \"a\"", "no rule named 'root'");
    check_parse_error("root ::= root \"a\"", "left-recursive");
    check_parse_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "rule 'a' is left-recursive");
    check_parse_error("root ::= [z-a]", "out of order");
    check_parse_error("root ::= \"a\"{3,1}", "n < m");
    check_parse_error("root ::= ( \"a\"", "expected ')'");
    check_parse_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule defined twice");
    check_parse_error("root \"a\"", "expected '::='");
    check_parse_error("root ::= \"\\q\"", "unknown escape");
    check_parse_error("root ::= \"a\"{5000}", "repetition count too large");
    check_parse_error("root ::= \"\\x4\"", "bad hexadecimal escape");
    check_parse_error("root ::= \"a\" |\n  \"b\" ]", "line 2, column 7");
    check_parse_error("", "no rule named 'root'");
    char deep[400];
    int n = snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 100; i++) deep[n++] = '(';
    deep[n] = 0;
    check_parse_error(deep, "nested too deeply");
    /* every prefix of a valid grammar parses or fails cleanly (no crash, a message) */
    const char *full = "root ::= (\"a\" [b-d]* | x{2,4})+ \"\\u00e9\" # c\nx ::= [^\\n] .?\n";
    for (size_t k = 0; k <= strlen(full); k++) {
        kvi_error err = { 0 };
        kvi_grammar *g = kvi_grammar_parse(full, k, &err);
        CHECK(g != NULL || strstr(err.msg, "grammar: ") == err.msg, "prefix %zu: '%s'", k, err.msg);
        kvi_grammar_free(g);
    }
}

static void test_matching(void)
{
    check_match("root ::= \"ab\" | \"cd\"", (const char *[]){ "ab", "cd", NULL },
                (const char *[]){ "ac", "a", "abc", "", NULL });
    check_match("root ::= [a-c]+ \"x\"?", (const char *[]){ "abc", "abcx", "a", NULL },
                (const char *[]){ "", "x", "abxx", "d", NULL });
    check_match("root ::= \"a\"{2,3}", (const char *[]){ "aa", "aaa", NULL },
                (const char *[]){ "a", "aaaa", NULL });
    check_match("root ::= \"a\"{2,}", (const char *[]){ "aa", "aaaaaa", NULL },
                (const char *[]){ "a", NULL });
    check_match("root ::= (\"ab\"){0,2} \"c\"", (const char *[]){ "c", "abc", "ababc", NULL },
                (const char *[]){ "abababc", "ac", NULL });
    check_match("root ::= [^abc]*", (const char *[]){ "xyz", "", "\xc3\xa9", NULL },
                (const char *[]){ "xaz", NULL });
    check_match("root ::= \"\xc3\xa9\" [\xce\xb1-\xcf\x89]", (const char *[]){ "\xc3\xa9\xce\xb2", NULL },
                (const char *[]){ "\xc3\xa9"
                                  "b",
                                  "e\xce\xb2", "\xc3\xa9\xce", NULL });
    check_match("root ::= [\\[] | \"\xc3\xa9\"", (const char *[]){ "[", "\xc3\xa9", NULL },
                (const char *[]){ "\xe0\x81\x9b", "\xc1\x9b", "\xf0\x80\x81\x9b", NULL }); /* overlong '[' */
    check_match("root ::= [^a]", (const char *[]){ "\xed\x9f\xbf", NULL },
                (const char *[]){ "\xed\xa0\x80", "\xf4\x90\x80\x80", NULL }); /* surrogate, > U+10FFFF */
    check_match("root ::= .", (const char *[]){ "\xe2\x82\xac", "a", NULL },
                (const char *[]){ "ab", "", "\xe2\x82", "\xff", NULL });
    check_match("# a comment\nroot ::= x ( \"1\" |\n  \"2\" ) # tail\nx ::= \"q\"",
                (const char *[]){ "q1", "q2", NULL }, (const char *[]){ "q3", "1", NULL });
    check_match("root ::= \"\\x41\\u00e9\\n\\\"\\t\" [\\]\\-]",
                (const char *[]){ "A\xc3\xa9\n\"\t]", "A\xc3\xa9\n\"\t-", NULL },
                (const char *[]){ "A\xc3\xa9\n\"\t", NULL });
    check_match("root ::= arr\narr ::= \"[\" (arr (\",\" arr)*)? \"]\"",
                (const char *[]){ "[]", "[[],[[]]]", NULL }, (const char *[]){ "[[]", "[,]", "[]]", NULL });
    check_match("root ::= \"\"", (const char *[]){ "", NULL }, (const char *[]){ "a", NULL });
    check_match("root ::= a b\na ::= \"x\"?\nb ::= \"y\"*", (const char *[]){ "", "x", "xyy", "y", NULL },
                (const char *[]){ "yx", NULL });
    /* a right-recursive rule over a long input: the stack does not grow with x* */
    kvi_grammar *g = parse_ok("root ::= \"a\"* \"b\"");
    if (g) {
        char *big = malloc(20002);
        memset(big, 'a', 20000);
        big[20000] = 'b';
        big[20001] = 0;
        CHECK(grammar_match_exact(g, big), "20000 a's then b");
        free(big);
        kvi_grammar_free(g);
    }
    /* a deep (non-tail) recursion hits the stack bound and rejects, never crashes */
    g = parse_ok("root ::= \"(\" root \")\" | \"x\"");
    if (g) {
        char *big = malloc(4003);
        memset(big, '(', 2000);
        big[2000] = 'x';
        memset(big + 2001, ')', 2000);
        big[4001] = 0;
        CHECK(!grammar_match_exact(g, big), "nesting past GM_MAX_DEPTH is refused");
        CHECK(grammar_match_exact(g, "((x))"), "shallow nesting is fine");
        free(big);
        kvi_grammar_free(g);
    }
    /* an exponentially ambiguous grammar stays bounded */
    g = parse_ok("root ::= (a | b)*\na ::= \"x\" | \"x\" \"x\"\nb ::= \"x\"+");
    if (g) {
        CHECK(grammar_match_exact(g, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx") || true, "ambiguous input ran");
        kvi_grammar_free(g);
    }
}

/* ---- masks against the reference ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

/* A random grammar over characters common in the stories vocabulary. */
static void random_grammar(char *out, size_t cap)
{
    static const char *lits[] = { "a", "e", "the", " ", "o", "nce", ".", ",", "Tim", "s", "he", "an" };
    static const char *classes[] = { "[a-m]", "[^ae]", "[ .,]", "[A-Z]", "." };
    static const char *reps[] = { "", "", "", "*", "+", "?", "{1,3}", "{2}", "{0,2}" };
    size_t n = 0;
    const int n_rules = 1 + (int)(trand_u64(&rng) % 4);
    for (int r = 0; r < n_rules; r++) {
        n += (size_t)snprintf(out + n, cap - n, "%s ::= ", r == 0 ? "root" : "");
        if (r > 0) {
            n -= 5;
            n += (size_t)snprintf(out + n, cap - n, "r%d ::= ", r);
        }
        const int n_alt = 1 + (int)(trand_u64(&rng) % 3);
        for (int a = 0; a < n_alt; a++) {
            if (a) n += (size_t)snprintf(out + n, cap - n, " | ");
            const int n_items = 1 + (int)(trand_u64(&rng) % 4);
            for (int i = 0; i < n_items; i++) {
                int kind = (int)(trand_u64(&rng) % 4);
                const char *rep = reps[trand_u64(&rng) % 9];
                if (kind == 0)
                    n += (size_t)snprintf(out + n, cap - n, "\"%s\"%s ", lits[trand_u64(&rng) % 12], rep);
                else if (kind == 1)
                    n += (size_t)snprintf(out + n, cap - n, "%s%s ", classes[trand_u64(&rng) % 5], rep);
                else if (kind == 2 && r + 1 < n_rules)
                    n += (size_t)snprintf(out + n, cap - n, "r%d%s ",
                                          r + 1 + (int)(trand_u64(&rng) % (uint64_t)(n_rules - r - 1)), rep);
                else if (i > 0 && r > 0) /* recursion, never leftmost */
                    n += (size_t)snprintf(out + n, cap - n, "r%d? ", r);
                else if (i > 0)
                    n += (size_t)snprintf(out + n, cap - n, "(root)? ");
                else
                    n += (size_t)snprintf(out + n, cap - n, "\"x\" ");
            }
        }
        n += (size_t)snprintf(out + n, cap - n, "\n");
    }
}

static int mask_steps; /* steps compared */

static void walk_and_compare(const kvi_grammar *g, const kvi_grammar_vocab *v, int steps)
{
    kvi_error err = { 0 };
    kvi_grammar_matcher *m = kvi_grammar_matcher_create(g, v, &err);
    kvi_grammar_matcher *mc = kvi_grammar_matcher_create(g, v, &err);
    CHECK(m && mc, "matcher: %s", err.msg);
    if (!m || !mc) return;
    grammar_matcher_set_cache(m, false);
    const size_t nw = ((size_t)v->n_vocab + 31) / 32;
    uint32_t *a = malloc(nw * 4), *b = malloc(nw * 4), *c = malloc(nw * 4);
    int32_t *allowed = malloc((size_t)v->n_vocab * sizeof *allowed);
    for (int step = 0; step < steps; step++) {
        int32_t na = kvi_grammar_matcher_mask(m, a);
        int32_t nb = grammar_mask_reference(g, v, grammar_matcher_state(m), b);
        int32_t nc = kvi_grammar_matcher_mask(mc, c);
        int32_t nc2 = kvi_grammar_matcher_mask(mc, c); /* a cache hit */
        mask_steps++;
        CHECK(na == nb && memcmp(a, b, nw * 4) == 0, "trie mask (%d) != reference (%d) at step %d", na, nb,
              step);
        CHECK(nc == nb && nc2 == nb && memcmp(c, b, nw * 4) == 0, "cached mask != reference at step %d",
              step);
        CHECK(((b[0] >> 0) & 1) == 0 || v->off[1] > v->off[0], "token 0 with an empty piece allowed");
        int32_t n_allowed = 0;
        for (int32_t t = 0; t < v->n_vocab; t++)
            if (((b[t >> 5] >> (t & 31)) & 1) && !v->is_eog[t]) allowed[n_allowed++] = t;
        bool eog = false;
        for (int32_t t = 0; t < v->n_vocab; t++)
            if (v->is_eog[t] && ((b[t >> 5] >> (t & 31)) & 1)) eog = true;
        CHECK(eog == kvi_grammar_matcher_can_end(m), "EOG allowed exactly when the grammar is complete");
        if (n_allowed == 0) break;
        /* a disallowed token is refused and leaves the state as it was */
        for (int tries = 0; tries < 64; tries++) {
            int32_t u = (int32_t)(trand_u64(&rng) % (uint64_t)v->n_vocab);
            if (((b[u >> 5] >> (u & 31)) & 1) || v->is_eog[u] || v->off[u + 1] == v->off[u]) continue;
            gm_state before = { 0 };
            gm_state_copy(&before, grammar_matcher_state(m));
            CHECK(kvi_grammar_matcher_accept_token(m, u) == KVI_E_INVALID, "disallowed token %d accepted", u);
            CHECK(gm_state_equal(&before, grammar_matcher_state(m)), "refused token %d changed the state", u);
            gm_state_free(&before);
            break;
        }
        int32_t t = allowed[trand_u64(&rng) % (uint64_t)n_allowed];
        CHECK(kvi_grammar_matcher_accept_token(m, t) == 0, "allowed token %d refused", t);
        CHECK(kvi_grammar_matcher_accept_token(mc, t) == 0, "allowed token %d refused (cached)", t);
    }
    free(a);
    free(b);
    free(c);
    free(allowed);
    kvi_grammar_matcher_free(m);
    kvi_grammar_matcher_free(mc);
}

static void test_masks(const kvi_model *model, const kvi_grammar_vocab *v)
{
    (void)model;
    const char *fixed[] = {
        "root ::= \"Once upon a time, \" [a-z ]+ \".\"",
        "root ::= (\"Tim\" | \"Lily\" | \"Ben\") \" \" (\"was\" | \"had\") \" \" [a-z]{2,8} \".\"",
        ("root ::= obj\nobj ::= \"{\" ws (pair (\",\" ws pair)*)? ws \"}\"\npair ::= str ws \":\" ws val\n"
         "val ::= str | [0-9]+ | obj\nstr ::= \"\\\"\" [^\"]* \"\\\"\"\nws ::= [ \\n]*"),
        "root ::= [^\\x00-\\x7f]+ \"a\"",
        "root ::= .*",
    };
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++) {
        kvi_grammar *g = parse_ok(fixed[k]);
        if (!g) continue;
        for (int w = 0; w < 3; w++) walk_and_compare(g, v, 24);
        kvi_grammar_free(g);
    }
    int n_random = 0;
    for (int k = 0; k < 40; k++) {
        char text[2048];
        random_grammar(text, sizeof text);
        kvi_error err = { 0 };
        kvi_grammar *g = kvi_grammar_parse(text, strlen(text), &err);
        if (!g) {
            CHECK(strstr(err.msg, "grammar: line") == err.msg, "random grammar error: %s", err.msg);
            continue;
        }
        n_random++;
        walk_and_compare(g, v, 12);
        kvi_grammar_free(g);
    }
    CHECK(n_random >= 25, "only %d random grammars parsed", n_random);
    printf("masks compared with the reference: %d steps, %d random grammars\n", mask_steps, n_random);
}

/* Byte-level: a token whose bytes end inside a UTF-8 code point, then the rest. */
static void test_partial_utf8(void)
{
    kvi_grammar *g = parse_ok("root ::= \"\xc3\xa9\" | \"\xe2\x82\xac\"");
    if (!g) return;
    gm_scratch sc;
    gm_scratch_init(&sc);
    gm_state a = { 0 }, b = { 0 }, c = { 0 };
    gm_state_init(g, &a, &sc);
    CHECK(gm_advance_byte(g, &a, 0xC3, &b, &sc), "lead byte of an allowed code point");
    CHECK(!gm_advance_byte(g, &a, 0xC4, &c, &sc), "lead byte of no allowed code point");
    CHECK(gm_advance_byte(g, &b, 0xA9, &c, &sc) && gm_state_accepting(&c), "completed é");
    CHECK(!gm_advance_byte(g, &b, 0xAA, &c, &sc), "completed ê refused");
    CHECK(!gm_state_accepting(&b), "half a code point is not complete");
    gm_state_free(&a);
    gm_state_free(&b);
    gm_state_free(&c);
    gm_scratch_free(&sc);
    kvi_grammar_free(g);
}

/* ---- generation through the scheduler ---- */

typedef struct gen {
    char text[4096];
    size_t len;
    const kvi_model *m;
    bool done;
    kvi_finish finish;
    int err_code;
    char err[600];
    int n_tok;
} gen;

static bool gen_token(void *user, int32_t tok)
{
    gen *g = user;
    char piece[256];
    int32_t n = kvi_token_to_piece(g->m, tok, piece, sizeof piece, false);
    if (n > 0 && g->len + (size_t)n < sizeof g->text) {
        memcpy(g->text + g->len, piece, (size_t)n);
        g->len += (size_t)n;
    }
    g->n_tok++;
    return true;
}

static void gen_done(void *user, kvi_finish f, const kvi_usage *u, const kvi_error *err)
{
    gen *g = user;
    g->done = true;
    g->finish = f;
    g->err_code = err ? err->code : 0;
    if (err) snprintf(g->err, sizeof g->err, "%s", err->msg);
}

/* A request for the prompt into r (greedy unless sp says otherwise) of at most max tokens. */
static kvi_request gen_request(gen *r, const kvi_model *m, const int32_t *prompt, int32_t np,
                               kvi_sampler_params sp, int32_t max)
{
    r->m = m;
    kvi_request rq = { 0 };
    rq.prompt = prompt;
    rq.n_prompt = np;
    rq.sampling = sp;
    rq.max_tokens = max;
    rq.on_token = gen_token;
    rq.on_done = gen_done;
    rq.user = r;
    return rq;
}

static void test_generation(kvi_model *m, const kvi_grammar_vocab *v)
{
    kvi_engine *e = make_engine(m, 8, 0);
    kvi_sched *s = e ? make_sched(e, 8, 64, 0) : NULL;
    if (!s) {
        kvi_engine_free(e);
        return;
    }
    const char *gtexts[] = {
        "root ::= \" Once upon a time, there was a \" (\"girl\" | \"dog\" | \"cat\") \".\"",
        "root ::= [a-z ]{4,30} \".\"",
        "root ::= \" \" (\"yes\" | \"no\") (\", \" (\"yes\" | \"no\")){0,3} \"!\"",
        "root ::= [A-Z] [a-z]* (\" \" [a-z]+){1,5} \".\"",
    };
    enum { NG = 4, PER = 3 };
    kvi_grammar *gs[NG];
    gen res[NG * PER + 2];
    memset(res, 0, sizeof res);
    int32_t prompt[8];
    int32_t np = kvi_tokenize(m, "Once upon", 9, true, false, prompt, 8);
    CHECK(np > 0, "tokenize");
    int nsub = 0;
    for (int k = 0; k < NG; k++) {
        gs[k] = parse_ok(gtexts[k]);
        for (int j = 0; j < PER && gs[k]; j++) {
            gen *r = &res[nsub++];
            kvi_request rq = gen_request(r, m, prompt, np,
                                         sampler_params(j == 0 ? 0.0f : 1.0f, j == 2 ? 0 : 40, 1.0f, 0.0f,
                                                        1000 + (uint64_t)k * 7 + (uint64_t)j),
                                         120);
            rq.grammar = gs[k];
            kvi_error err = { 0 };
            uint64_t id;
            CHECK(kvi_sched_submit(s, &rq, &id, &err) == 0, "submit: %s", err.msg);
        }
    }
    /* unconstrained requests in the same batches */
    for (int j = 0; j < 2; j++) {
        gen *r = &res[nsub++];
        kvi_request rq = gen_request(r, m, prompt, np, sampler_params(0.0f, 40, 1.0f, 0.0f, 1), 40);
        kvi_error err = { 0 };
        uint64_t id;
        CHECK(kvi_sched_submit(s, &rq, &id, &err) == 0, "submit: %s", err.msg);
    }
    run_until_done(s, 4000);
    int n_stop = 0;
    for (int i = 0; i < nsub; i++) {
        gen *r = &res[i];
        CHECK(r->done, "request %d finished", i);
        if (i >= NG * PER) {
            CHECK(r->finish == KVI_FINISH_LENGTH && r->n_tok == 40,
                  "unconstrained request %d ran to max_tokens", i);
            continue;
        }
        const kvi_grammar *g = gs[i / PER];
        kvi_error err = { 0 };
        kvi_grammar_matcher *mt = kvi_grammar_matcher_create(g, v, &err);
        int rc = mt ? kvi_grammar_matcher_accept_bytes(mt, r->text, r->len) : -1;
        CHECK(rc == 0, "output of request %d is not a prefix of the grammar: '%.*s'", i, (int)r->len,
              r->text);
        CHECK(r->finish == KVI_FINISH_STOP || r->finish == KVI_FINISH_LENGTH, "request %d finish %d (%s)", i,
              r->finish, r->err);
        if (r->finish == KVI_FINISH_STOP) {
            n_stop++;
            CHECK(mt && kvi_grammar_matcher_can_end(mt),
                  "request %d stopped before the grammar was complete: '%.*s'", i, (int)r->len, r->text);
        }
        if (i % PER == 0) printf("grammar %d greedy: '%.*s'\n", i / PER, (int)r->len, r->text);
        kvi_grammar_matcher_free(mt);
    }
    CHECK(n_stop >= NG * PER - 2, "only %d of %d constrained requests completed their grammar", n_stop,
          NG * PER);

    /* logit_bias: +100 on "," makes greedy output commas; a bad id is refused */
    {
        int32_t comma[1] = { -1 }, nc = 1;
        for (int32_t t = 0; t < kvi_n_vocab(m) && comma[0] < 0; t++) {
            char pc[16];
            if (kvi_token_to_piece(m, t, pc, sizeof pc, false) == 1 && pc[0] == ',') comma[0] = t;
        }
        gen r = { 0 };
        kvi_request rq = gen_request(&r, m, prompt, np, sampler_params(0.0f, 40, 1.0f, 0.0f, 1), 5);
        float bias = 100.0f;
        rq.bias_ids = &comma[nc - 1];
        rq.bias_vals = &bias;
        rq.n_bias = 1;
        kvi_error err = { 0 };
        uint64_t id;
        CHECK(comma[0] >= 0 && kvi_sched_submit(s, &rq, &id, &err) == 0, "submit: %s", err.msg);
        run_until_done(s, 200);
        CHECK(r.len == 5 && memcmp(r.text, ",,,,,", 5) == 0, "biased greedy text '%.*s'", (int)r.len, r.text);
        int32_t bad = kvi_n_vocab(m);
        rq.bias_ids = &bad;
        CHECK(kvi_sched_submit(s, &rq, &id, &err) == KVI_E_INVALID && strstr(err.msg, "logit_bias"),
              "out-of-range bias id refused: %s", err.msg);
        bias = 101.0f;
        rq.bias_ids = &comma[nc - 1];
        CHECK(kvi_sched_submit(s, &rq, &id, &err) == KVI_E_INVALID, "bias 101 refused");
    }
    /* a grammar no token can start (a code point outside the vocabulary) ends in an error */
    {
        kvi_grammar *g = parse_ok("root ::= \"\\u4e01\\u4e02\\u4e03\"");
        gen r = { 0 };
        kvi_request rq = gen_request(&r, m, prompt, np, sampler_params(0.0f, 40, 1.0f, 0.0f, 1), 10);
        rq.grammar = g;
        kvi_error err = { 0 };
        uint64_t id;
        if (g && kvi_sched_submit(s, &rq, &id, &err) == 0) {
            run_until_done(s, 200);
            CHECK(r.finish == KVI_FINISH_ERROR || r.finish == KVI_FINISH_STOP ||
                      r.finish == KVI_FINISH_LENGTH,
                  "finish %d", r.finish);
            if (r.finish == KVI_FINISH_ERROR) CHECK(strstr(r.err, "grammar") != NULL, "error '%s'", r.err);
        }
        kvi_grammar_free(g);
    }
    kvi_sched_free(s);
    kvi_engine_free(e);
    for (int k = 0; k < NG; k++) kvi_grammar_free(gs[k]);
}

/* A figure, not an assertion: mask time per token at 1 and 16 streams (streams
 * are matchers stepped in turn, as one scheduler thread would). */
static void bench_masks(const kvi_grammar_vocab *v)
{
    const char *json = "root ::= obj\nobj ::= \"{\" ws (pair (\",\" ws pair)*)? ws \"}\"\n"
                       "pair ::= str ws \":\" ws val\nval ::= str | [0-9]+ | obj | \"true\" | \"false\"\n"
                       "str ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\nws ::= [ ]?";
    kvi_grammar *g = parse_ok(json);
    if (!g) return;
    const size_t nw = ((size_t)v->n_vocab + 31) / 32;
    uint32_t *bits = malloc(nw * 4);
    for (int streams = 1; streams <= 16; streams *= 16) {
        for (int cache = 0; cache < 2; cache++) {
            kvi_grammar_matcher *ms[16];
            for (int i = 0; i < streams; i++) {
                ms[i] = kvi_grammar_matcher_create(g, v, NULL);
                grammar_matcher_set_cache(ms[i], cache);
            }
            uint64_t r = 7;
            int steps = 0;
            double t0 = kvi_time_ms();
            for (int step = 0; step < 40; step++)
                for (int i = 0; i < streams; i++) {
                    int32_t n = kvi_grammar_matcher_mask(ms[i], bits);
                    steps++;
                    if (n <= 0) continue;
                    int32_t pick = (int32_t)(trand_u64(&r) % (uint64_t)n), t = 0;
                    for (; t < v->n_vocab; t++)
                        if (((bits[t >> 5] >> (t & 31)) & 1) && !v->is_eog[t] && pick-- == 0) break;
                    if (t < v->n_vocab) kvi_grammar_matcher_accept_token(ms[i], t);
                }
            double dt = kvi_time_ms() - t0;
            printf("mask time (stories260K vocab %d, JSON grammar, %d stream%s, cache %s): %.1f us/token\n",
                   v->n_vocab, streams, streams > 1 ? "s" : "", cache ? "on" : "off", 1000.0 * dt / steps);
            for (int i = 0; i < streams; i++) kvi_grammar_matcher_free(ms[i]);
        }
    }
    gm_state st = { 0 };
    gm_scratch sc;
    gm_scratch_init(&sc);
    gm_state_init(g, &st, &sc);
    double t0 = kvi_time_ms();
    for (int i = 0; i < 20; i++) grammar_mask_reference(g, v, &st, bits);
    printf("brute-force reference: %.1f us/token\n", 1000.0 * (kvi_time_ms() - t0) / 20);
    gm_state_free(&st);
    gm_scratch_free(&sc);
    free(bits);
    kvi_grammar_free(g);
}

int main(void)
{
    test_parse_errors();
    test_matching();
    test_partial_utf8();
    int n_vocab = 0;
    kvi_model *m = load_stories260k(&n_vocab);
    if (m) {
        kvi_error err = { 0 };
        kvi_grammar_vocab *v = kvi_grammar_vocab_create(m, &err);
        CHECK(v != NULL, "vocab: %s", err.msg);
        if (v) {
            CHECK(v->n_vocab == n_vocab, "vocab size");
            test_masks(m, v);
            test_generation(m, v);
            bench_masks(v);
        }
        kvi_grammar_vocab_free(v);
        kvi_model_free(m);
    }
    return test_main_end();
}
