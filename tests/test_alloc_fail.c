/*
 * test_alloc_fail.c — allocation-failure injection (SQLite's and Lua's
 * technique). This binary is linked with -Wl,--wrap for malloc, calloc,
 * realloc, strdup, strndup, posix_memalign and aligned_alloc, so every
 * allocation the library's own code makes comes through the __wrap_ functions
 * below; cJSON's allocations come through them too (kvi_json_init's hooks call
 * malloc from the library's code).
 *
 * For each operation and for N = 1, 2, 3, ... the Nth allocation fails (and
 * only it), until the operation completes without reaching an Nth allocation.
 * Every failing run must return an error (KVI_E_NOMEM for the library, HTTP
 * 500/400 with an error object for the server's parser), must not crash, and
 * must leak nothing: the wrapper counts live blocks, and the ASan build's leak
 * checker sees the rest. Operations:
 *   - model load: stories260K.gguf, and the Hugging Face folder TinyStories-656K
 *     (safetensors, config.json, tokenizer.json through PCRE2);
 *   - engine create;
 *   - a tokenizer.json whose normalizer and pre-tokenizers are regexes (PCRE2),
 *     loaded and run: the ids equal a clean run's;
 *   - kvi_step with a mixed batch (a new sequence's prefill beside a decode
 *     row of a live one): after a failure the live sequence is untouched, and
 *     the same batch run again gives the reference logits bit for bit;
 *   - scheduler submit and its steps to completion: the request either fails
 *     cleanly (submit's error, or on_done with KVI_FINISH_ERROR) or yields the
 *     reference greedy tokens;
 *   - a server request: body check and parse of a chat body rendered through
 *     a Jinja template (Qwen2.5's), with tools.
 * The operations run on one thread (n_threads 1), so the Nth allocation is the
 * same one on every run.
 */
#include "testutil.h"

#include "formats/json_util.h"
#include "server/server.h"

#include "kvinfer.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the wrapped allocator ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static atomic_long g_count;   /* allocations since arm() */
static atomic_long g_fail_at; /* fail the allocation with this count (0: never) */
static atomic_bool g_hit;     /* the armed allocation was reached */

static void arm(long n)
{
    atomic_store(&g_count, 0);
    atomic_store(&g_hit, false);
    atomic_store(&g_fail_at, n);
}

static void disarm(void) { atomic_store(&g_fail_at, 0); }

static bool fail_now(void)
{
    const long at = atomic_load(&g_fail_at);
    const long c = atomic_fetch_add(&g_count, 1) + 1;
    if (at > 0 && c == at) {
        atomic_store(&g_hit, true);
        return true;
    }
    return false;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return fail_now() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return fail_now() ? NULL : __real_strndup(s, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    return fail_now() ? 12 /* ENOMEM */ : __real_posix_memalign(p, a, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) { return fail_now() ? NULL : __real_aligned_alloc(a, n); }

/* Runs op(ctx) for N = 1, 2, ... with the Nth allocation failing; op returns 0
 * on success, 1 on a clean failure and -1 on a wrong outcome (it CHECKs the
 * details). Stops at the first N the operation does not reach, or at max_n.
 * Returns how many failure points were exercised. */
static long exhaust(const char *what, int (*op)(void *ctx, long n), void *ctx, long max_n)
{
    long n = 1, bad = 0;
    for (; n <= max_n; n++) {
        arm(n);
        const int r = op(ctx, n);
        disarm();
        const bool hit = atomic_load(&g_hit);
        if (!hit) {
            CHECK(r == 0, "%s: ran without a failure but returned %d", what, r);
            break;
        }
        /* r == 0 after a failed allocation: the operation recovered (a
         * fallback); the op has checked its result */
        if (r < 0) bad++;
    }
    CHECK(n <= max_n, "%s: still failing at allocation %ld", what, max_n);
    CHECK(bad == 0, "%s: %ld of %ld failure points gave a wrong outcome", what, bad, n - 1);
    fprintf(stderr, "  %s: %ld failure points, %ld wrong\n", what, n - 1, bad);
    return n - 1;
}

/* ---- operations ---- */

typedef struct {
    const char *path;
    int32_t ref[3]; /* n_vocab, bos, eos of a clean load */
} load_ctx;

/* A byte-level BPE tokenizer.json whose normalizer and pre-tokenizer are regexes
 * (PCRE2: a Replace, a Split, and ByteLevel's GPT-2 pattern). */
static const char regex_tokenizer[] =
    "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true, "
    "\"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false}], "
    "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": \" \"}, "
    "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
    "{\"Regex\": \"\\\\d\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
    "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}]}, "
    "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
    "\"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null, \"end_of_word_suffix\": "
    "null, "
    "\"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": {\"<s>\": 0, \"H\": 1, \"e\": 2, \"l\": 3, "
    "\"o\": 4, \"He\": 5, \"ll\": 6, \"Hell\": 7, \"Hello\": 8, \"\\u0120\": 9, \"w\": 10, \"r\": 11, "
    "\"d\": 12, \"1\": 13, \"2\": 14, \",\": 15}, \"merges\": [\"H e\", \"l l\", \"He ll\", \"Hell o\"]}}";

typedef struct {
    const char *path;
    int32_t ref[32];
    int n_ref;
} regex_ctx;

static const char regex_text[] = "Hello   world, 12 Hello";

/* Load the regex tokenizer and tokenize regex_text. */
static int regex_run(regex_ctx *c, int32_t *ids, int *n_ids, long n)
{
    kvi_error err = { 0 };
    kvi_model *v = kvi_vocab_load(c->path, &err);
    if (!v) {
        CHECK(err.code == KVI_E_NOMEM, "regex tokenizer, allocation %ld failing: %d (%s)", n, err.code,
              err.msg);
        return err.code == KVI_E_NOMEM ? 1 : -1;
    }
    const int32_t k = kvi_tokenize(v, regex_text, sizeof regex_text - 1, false, false, ids, 32);
    kvi_model_free(v);
    if (k < 0) {
        CHECK(k == KVI_E_NOMEM, "regex tokenize, allocation %ld failing: %d", n, (int)k);
        return k == KVI_E_NOMEM ? 1 : -1;
    }
    *n_ids = k;
    return 0;
}

static int op_regex(void *ctx, long n)
{
    regex_ctx *c = ctx;
    int32_t ids[32];
    int k = 0;
    const int r = regex_run(c, ids, &k, n);
    if (r == 0 && (k != c->n_ref || memcmp(ids, c->ref, sizeof(int32_t) * (size_t)k))) {
        CHECK(false, "regex tokenizer (allocation %ld failing): other ids", n);
        return -1;
    }
    return r;
}

static int op_load(void *ctx, long n)
{
    load_ctx *c = ctx;
    const char *path = c->path;
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(path, &lp, &err);
    if (m) {
        /* a load that recovered from a failed allocation must be the same model */
        const int32_t got[3] = { kvi_n_vocab(m), kvi_token_bos(m), kvi_token_eos(m) };
        kvi_model_free(m);
        const bool same = !memcmp(c->ref, got, sizeof got);
        CHECK(same, "load %s, allocation %ld failing: vocab %d bos %d eos %d", path, n, (int)got[0],
              (int)got[1], (int)got[2]);
        return same ? 0 : -1;
    }
    if (err.code != KVI_E_NOMEM) {
        CHECK(false, "load %s, allocation %ld failing: code %d (%s), want KVI_E_NOMEM", path, n, err.code,
              err.msg);
        return -1;
    }
    return 1;
}

static int op_engine(void *ctx, long n)
{
    kvi_model *m = ctx;
    const kvi_engine_params ep =
        engine_params(KVI_TYPE_F16, 1, 2, 64) /* one thread: the same Nth allocation */;
    kvi_error err = { 0 };
    kvi_engine *e = kvi_engine_create(m, &ep, &err);
    if (e) {
        kvi_engine_free(e);
        return 0;
    }
    if (err.code != KVI_E_NOMEM) {
        CHECK(false, "engine create, allocation %ld failing: code %d (%s)", n, err.code, err.msg);
        return -1;
    }
    return 1;
}

typedef struct {
    kvi_engine *e;
    kvi_seq *live; /* holds LIVE_LEN positions */
    kvi_batch *b;
    float *ref;     /* the live row's logits of the mixed batch */
    float *ref_new; /* the new sequence's last row's logits */
    int n_vocab;
} step_ctx;

enum { LIVE_LEN = 5, NEW_LEN = 7 };
static const int32_t live_tokens[LIVE_LEN + 1] = { 1, 400, 20, 31, 250, 99 };
static const int32_t new_tokens[NEW_LEN] = { 1, 17, 230, 44, 81, 9, 120 };

/* The mixed batch: the live sequence's next token beside seq's whole prompt. */
static void fill_batch(step_ctx *c, kvi_seq *seq)
{
    kvi_batch_clear(c->b);
    kvi_batch_add(c->b, c->live, live_tokens[LIVE_LEN], LIVE_LEN, true);
    for (int i = 0; i < NEW_LEN; i++) kvi_batch_add(c->b, seq, new_tokens[i], i, i == NEW_LEN - 1);
}

static int op_step(void *ctx, long n)
{
    step_ctx *c = ctx;
    kvi_seq *s = kvi_seq_create(c->e);
    if (!s) return 1; /* its own allocation failed */
    fill_batch(c, s);
    kvi_error err = { 0 };
    const int rc = kvi_step(c->e, c->b, &err);
    int out = 0;
    if (rc != 0) {
        const bool untouched = kvi_seq_len(c->live) == LIVE_LEN && kvi_seq_len(s) == 0;
        CHECK(err.code == KVI_E_NOMEM && rc == KVI_E_NOMEM, "step, allocation %ld failing: %d (%s)", n, rc,
              err.msg);
        CHECK(untouched, "step, allocation %ld failing: lengths %d and %d after the error", n,
              (int)kvi_seq_len(c->live), (int)kvi_seq_len(s));
        out = rc == KVI_E_NOMEM && untouched ? 1 : -1;
        /* the same batch again, without failures: the reference bits */
        disarm();
        fill_batch(c, s);
        if (kvi_step(c->e, c->b, &err) != 0) {
            CHECK(false, "step after a failure: %s", err.msg);
            out = -1;
        }
    }
    const float *l0 = kvi_logits(c->e, 0), *l1 = kvi_logits(c->e, NEW_LEN);
    if (!l0 || !l1 || memcmp(l0, c->ref, sizeof(float) * (size_t)c->n_vocab) ||
        memcmp(l1, c->ref_new, sizeof(float) * (size_t)c->n_vocab)) {
        CHECK(false, "step (allocation %ld failing earlier: %d): logits differ from the reference", n, rc);
        out = -1;
    }
    kvi_seq_free(s);
    kvi_seq_truncate(c->live, LIVE_LEN);
    return out;
}

typedef struct {
    kvi_engine *e;
    int32_t ref[8];
    int n_ref;
} sched_ctx;

typedef struct {
    int32_t toks[16];
    int n;
    int done;
    kvi_finish finish;
    int err_code;
} sched_out;

static bool on_tok(void *user, int32_t t)
{
    sched_out *o = user;
    if (o->n < 16) o->toks[o->n++] = t;
    return true;
}

static void on_done(void *user, kvi_finish f, const kvi_usage *u, const kvi_error *err)
{
    sched_out *o = user;
    (void)u;
    o->done++;
    o->finish = f;
    o->err_code = err ? err->code : 0;
}

/* One greedy request through a fresh scheduler; 0 with the tokens, 1 on a
 * clean failure. */
static int sched_run(kvi_engine *e, sched_out *o, long n)
{
    memset(o, 0, sizeof *o);
    kvi_sched_params sp;
    kvi_sched_params_default(&sp);
    kvi_error err = { 0 };
    kvi_sched *s = kvi_sched_create(e, &sp, &err);
    if (!s) {
        if (err.code != KVI_E_NOMEM) CHECK(false, "sched create, allocation %ld: %s", n, err.msg);
        return err.code == KVI_E_NOMEM ? 1 : -1;
    }
    kvi_request r = { 0 };
    r.prompt = new_tokens;
    r.n_prompt = NEW_LEN;
    kvi_sampler_params_default(&r.sampling);
    r.sampling.temp = 0;
    r.max_tokens = 6;
    r.on_token = on_tok;
    r.on_done = on_done;
    r.user = o;
    uint64_t id;
    int out = 0;
    const int rc = kvi_sched_submit(s, &r, &id, &err);
    if (rc != 0) {
        if (rc != KVI_E_NOMEM) CHECK(false, "submit, allocation %ld: %d %s", n, rc, err.msg);
        out = rc == KVI_E_NOMEM ? 1 : -1;
    } else {
        int alive = 1, guard = 0;
        while (alive > 0 && guard++ < 100) {
            alive = kvi_sched_step(s, &err);
            if (alive < 0) {
                CHECK(alive == KVI_E_NOMEM, "sched step, allocation %ld: %d %s", n, alive, err.msg);
                out = alive == KVI_E_NOMEM ? 1 : -1;
                break;
            }
        }
    }
    kvi_sched_free(s);
    if (rc == 0) {
        CHECK(o->done == 1, "on_done called %d times (allocation %ld)", o->done, n);
        if (o->done != 1) out = -1;
        if (o->finish == KVI_FINISH_ERROR) {
            CHECK(o->err_code == KVI_E_NOMEM, "request failed with %d (allocation %ld)", o->err_code, n);
            if (out == 0) out = o->err_code == KVI_E_NOMEM ? 1 : -1;
        } else if (out == 0 && o->finish == KVI_FINISH_CANCELLED) {
            out = 1; /* the step failed and the scheduler was freed */
        }
    }
    return out;
}

static int op_sched(void *ctx, long n)
{
    sched_ctx *c = ctx;
    sched_out o;
    const int r = sched_run(c->e, &o, n);
    if (r == 0 && (o.n != c->n_ref || memcmp(o.toks, c->ref, sizeof(int32_t) * (size_t)o.n))) {
        CHECK(false, "sched (allocation %ld failing): %d tokens, not the reference's %d", n, o.n, c->n_ref);
        return -1;
    }
    return r;
}

static const char chat_body[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
    "\"What is the weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
    "[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"weather\", \"arguments\": "
    "\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": "
    "\"sunny\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
    "[\"city\"]}}}], "
    "\"max_tokens\": 8, \"temperature\": 0, \"stop\": [\"\\n\\n\"], \"logprobs\": true, \"top_logprobs\": 2}";

static int op_server(void *ctx, long n)
{
    srv_server *srv = ctx;
    srv_err er = { 0 };
    if (srv_body_check(chat_body, sizeof chat_body - 1, &er) != 0) {
        const bool ok = er.status == 500 && strstr(er.msg, "memory");
        CHECK(ok, "body check, allocation %ld failing: status %d (%s)", n, er.status, er.msg);
        return ok ? 1 : -1;
    }
    srv_params p;
    memset(&er, 0, sizeof er);
    if (srv_parse_request(srv, chat_body, sizeof chat_body - 1, true, &p, &er) != 0) {
        const bool ok = er.status == 500 && strstr(er.msg, "memory");
        CHECK(ok, "parse, allocation %ld failing: status %d (%s)", n, er.status, er.msg);
        return ok ? 1 : -1;
    }
    const bool good = p.n_prompt > 10;
    CHECK(good, "parse: %d prompt tokens", (int)p.n_prompt);
    srv_params_free(&p);
    return good ? 0 : -1;
}

int main(void)
{
    kvi_json_init(); /* cJSON's allocations through malloc, so through the wrappers */
    kvi_error err = { 0 };
    const char *gguf = shared_path("models/stories260K.gguf");
    char hf[1024];
    snprintf(hf, sizeof hf, "%s", shared_path("models/TinyStories-656K"));

    load_ctx lc[2] = { { gguf, { 0 } }, { hf, { 0 } } };
    for (int i = 0; i < 2; i++) {
        kvi_load_params lp0;
        kvi_load_params_default(&lp0);
        kvi_model *m0 = kvi_model_load(lc[i].path, &lp0, &err);
        CHECK(m0 != NULL, "clean load of %s: %s", lc[i].path, err.msg);
        if (!m0) return test_main_end();
        lc[i].ref[0] = kvi_n_vocab(m0), lc[i].ref[1] = kvi_token_bos(m0), lc[i].ref[2] = kvi_token_eos(m0);
        kvi_model_free(m0);
    }
    regex_ctx rc = { tmp_path("alloc_fail_tokenizer.json"), { 0 }, 0 };
    FILE *f = fopen(rc.path, "wb");
    CHECK(f && fwrite(regex_tokenizer, 1, sizeof regex_tokenizer - 1, f) == sizeof regex_tokenizer - 1,
          "write %s", rc.path);
    if (f) fclose(f);
    CHECK(regex_run(&rc, rc.ref, &rc.n_ref, 0) == 0 && rc.n_ref > 8, "regex tokenizer: %d ids", rc.n_ref);
    exhaust("tokenizer.json with regexes: load and tokenize", op_regex, &rc, 20000);
    exhaust("model load (GGUF)", op_load, &lc[0], 20000);
    exhaust("model load (Hugging Face folder)", op_load, &lc[1], 60000);

    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_model *m = kvi_model_load(gguf, &lp, &err);
    CHECK(m != NULL, "load: %s", err.msg);
    if (!m) return test_main_end();
    exhaust("engine create", op_engine, m, 20000);

    /* kvi_step: references from a clean run */
    const kvi_engine_params ep = engine_params(KVI_TYPE_F16, 1, 2, 64);
    step_ctx sc = { 0 };
    sc.e = kvi_engine_create(m, &ep, &err);
    CHECK(sc.e != NULL, "engine: %s", err.msg);
    if (sc.e) {
        sc.n_vocab = kvi_n_vocab(m);
        sc.b = kvi_batch_create(16);
        sc.live = kvi_seq_create(sc.e);
        for (int i = 0; i < LIVE_LEN; i++) kvi_batch_add(sc.b, sc.live, live_tokens[i], i, false);
        CHECK(kvi_step(sc.e, sc.b, &err) == 0, "live prefill: %s", err.msg);
        sc.ref = malloc(sizeof(float) * (size_t)sc.n_vocab);
        sc.ref_new = malloc(sizeof(float) * (size_t)sc.n_vocab);
        kvi_seq *s = kvi_seq_create(sc.e);
        fill_batch(&sc, s);
        CHECK(kvi_step(sc.e, sc.b, &err) == 0, "mixed batch: %s", err.msg);
        memcpy(sc.ref, kvi_logits(sc.e, 0), sizeof(float) * (size_t)sc.n_vocab);
        memcpy(sc.ref_new, kvi_logits(sc.e, NEW_LEN), sizeof(float) * (size_t)sc.n_vocab);
        kvi_seq_free(s);
        kvi_seq_truncate(sc.live, LIVE_LEN);
        exhaust("kvi_step, mixed batch", op_step, &sc, 20000);
        kvi_seq_free(sc.live);
        kvi_batch_free(sc.b);
        free(sc.ref);
        free(sc.ref_new);
        kvi_engine_free(sc.e);
    }

    /* the scheduler: reference tokens from a clean run */
    sched_ctx schc = { 0 };
    schc.e = kvi_engine_create(m, &ep, &err);
    if (schc.e) {
        sched_out o;
        CHECK(sched_run(schc.e, &o, 0) == 0 && o.n == 6, "reference request: %d tokens", o.n);
        schc.n_ref = o.n;
        memcpy(schc.ref, o.toks, sizeof(int32_t) * (size_t)o.n);
        exhaust("scheduler submit and steps", op_sched, &schc, 20000);
        kvi_engine_free(schc.e);
    }

    /* a server request */
    srv_server srv;
    memset(&srv, 0, sizeof srv);
    srv.m = m;
    srv.cfg.model_name = "stories260K";
    srv.cfg.n_ctx = 4096;
    srv.cfg.quiet = true;
    kvi_sampler_params_default(&srv.cfg.sampling);
    size_t tl = 0;
    char *tt = read_file(shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), &tl);
    CHECK(tt && srv_template_init(&srv, tt, tl, "qwen2.5", &err) == 0, "template: %s", err.msg);
    srv_tools_init(&srv, tt);
    exhaust("server request (chat, template, tools)", op_server, &srv, 20000);
    srv_tools_free(&srv);
    srv_template_free(&srv);
    free(tt);
    kvi_model_free(m);
    return test_main_end();
}
