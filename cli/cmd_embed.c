/*
 * cmd_embed.c — `kvinfer embed` (a text's pooled vector, or every token's) and
 * `kvinfer rerank` (a reranker's relevance score of documents for a query), on
 * kvi_embed. Texts come from -p (repeatable) or -f (one text per line, empty
 * lines skipped) and run in batches of --batch texts per pass.
 *
 * Output: JSON lines on stdout. embed: {"index": i, "n_tokens": n, "embedding":
 * [...]} per text ("embeddings": [[...], ...] with pooling none); rerank:
 * {"index": i, "score": s} per document, best first, as /v1/rerank orders them.
 * The summary (texts/s, tokens/s) goes to stderr.
 */
#include "cli/cli_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char embed_help[] =
    "usage: kvinfer embed -m MODEL [-f TEXTS | -p TEXT...] [--pooling P] [--embd-normalize N] [--batch N]\n"
    "       kvinfer rerank -m MODEL --query Q [-f DOCS | -p DOC...] [--batch N] [--top-n N]\n"
    "\n"
    "embed prints one JSON line per text: {\"index\", \"n_tokens\", \"embedding\"} (with\n"
    "pooling none \"embeddings\", one vector per token, not normalised). rerank prints\n"
    "{\"index\", \"score\"} per document, best first (bert rerankers: the raw logit;\n"
    "Qwen3-Reranker: P(yes)).\n"
    "\n"
    "options:\n"
    "  -m, --model PATH       embedding model or reranker (GGUF)\n"
    "  -p, --prompt TEXT      a text (repeatable)\n"
    "  -f, --file PATH        one text per line (empty lines skipped)\n"
    "  --pooling P            none, mean, cls, last, rank (default: the model's)\n"
    "  --embd-normalize N     -1 none, 0 max |x| to 32760, 1 taxicab, 2 euclidean (default),\n"
    "                         p > 2 p-norm (llama.cpp's embd_normalize)\n"
    "  --query Q              rerank: the query\n"
    "  --top-n N              rerank: print the N best only (default: all)\n"
    "  --batch N              texts per forward pass (default 32)\n"
    "  -t, --threads N        worker threads (default: every core)\n"
    "  -c, --ctx-size N       the longest text in tokens (default: the model's context)\n"
    "  -h, --help             this help\n";

typedef struct texts {
    int n, cap;
    char **s; /* [n] NUL-terminated, owned */
} texts;

static int texts_add(texts *t, const char *s, size_t len)
{
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        char **p = realloc(t->s, (size_t)cap * sizeof *p);
        if (!p) return 1;
        t->s = p, t->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return 1;
    memcpy(c, s, len), c[len] = 0;
    t->s[t->n++] = c;
    return 0;
}

static void texts_free(texts *t)
{
    for (int i = 0; i < t->n; i++) free(t->s[i]);
    free(t->s);
}

/* every non-empty line of path (a trailing \r dropped) */
static int texts_read(texts *t, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return cli_error("cannot open '%s'", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (n > 0 && texts_add(t, line, (size_t)n)) rc = cli_error("out of memory");
    }
    free(line);
    fclose(f);
    return rc;
}

typedef struct embed_opts {
    cli_common c;
    texts in;
    kvi_pooling pooling;
    int normalize;
    int64_t batch, top_n;
    const char *query;
} embed_opts;

static int parse(int argc, char **argv, embed_opts *o, bool rerank)
{
    cli_common_init(&o->c);
    o->pooling = rerank ? KVI_POOLING_RANK : KVI_POOLING_MODEL;
    o->normalize = 2, o->batch = 32, o->top_n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = cli_opt_common(argc, argv, &i, &o->c, CLI_OPT_MODEL | CLI_OPT_THREADS | CLI_OPT_CTX);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(embed_help, stdout);
            return -1;
        }
        if (i + 1 >= argc) return cli_error("unknown option or missing value: %s", a);
        const char *v = argv[++i];
        int64_t n;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (texts_add(&o->in, v, strlen(v))) return cli_error("out of memory");
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (texts_read(&o->in, v)) return 1;
        } else if (!strcmp(a, "--pooling") && !rerank) {
            if (kvi_pooling_parse(v, &o->pooling)) return cli_error("--pooling: unknown pooling '%s'", v);
        } else if (!strcmp(a, "--embd-normalize") && !rerank) {
            if (!cli_parse_i64(v, -1, 64, &n)) return cli_error("--embd-normalize: bad value '%s'", v);
            o->normalize = (int)n;
        } else if (!strcmp(a, "--batch")) {
            if (!cli_parse_i64(v, 1, 1 << 16, &o->batch)) return cli_error("--batch: bad value '%s'", v);
        } else if (!strcmp(a, "--top-n") && rerank) {
            if (!cli_parse_i64(v, 0, 1 << 30, &o->top_n)) return cli_error("--top-n: bad value '%s'", v);
        } else if (!strcmp(a, "--query") && rerank) {
            o->query = v;
        } else {
            return cli_error("unknown option: %s", a);
        }
    }
    if (o->in.n == 0) return cli_error("no texts: give -p TEXT or -f FILE");
    if (rerank && !o->query) return cli_error("rerank needs --query");
    return 0;
}

/* The ids of text i (the rerank pair with the query) into a malloc'd *ids; the count or -1. */
static int32_t tokenize(const kvi_model *m, const embed_opts *o, int i, int32_t **ids)
{
    const char *s = o->in.s[i];
    for (int32_t cap = 256;; cap *= 2) {
        if (!(*ids = malloc((size_t)cap * sizeof **ids))) return -1;
        const int32_t n = o->query
                              ? kvi_rerank_tokenize(m, o->query, strlen(o->query), s, strlen(s), *ids, cap)
                              : kvi_tokenize(m, s, strlen(s), true, true, *ids, cap);
        if (n >= 0 && n <= cap) return n;
        free(*ids);
        *ids = NULL;
        if (n < 0) return -1;
    }
}

static void print_vec(const float *v, int n)
{
    putchar('[');
    for (int i = 0; i < n; i++) printf("%s%.9g", i ? ", " : "", v[i]);
    putchar(']');
}

typedef struct scored {
    int index;
    float score;
} scored;

static int by_score(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : x->index - y->index;
}

/* One batch of texts [i0, i1): tokenised, embedded, printed (rerank: scored). */
static int run_batch(kvi_engine *e, const embed_opts *o, kvi_pooling pl, int i0, int i1, scored *sc,
                     int64_t *n_tokens)
{
    const kvi_model *m = kvi_engine_model(e);
    const int n = i1 - i0, w = pl == KVI_POOLING_RANK ? kvi_n_cls_out(m) : kvi_n_embd_out(m);
    int32_t **ids = calloc((size_t)n, sizeof *ids), *nt = calloc((size_t)n, sizeof *nt);
    int rc = ids && nt ? 0 : cli_error("out of memory");
    size_t rows = 0;
    for (int i = 0; !rc && i < n; i++) {
        if ((nt[i] = tokenize(m, o, i0 + i, &ids[i])) < 1) rc = cli_error("text %d: no tokens", i0 + i);
        rows += pl == KVI_POOLING_NONE ? (size_t)nt[i] : 1;
    }
    float *out = rc ? NULL : malloc(rows * (size_t)w * sizeof *out);
    kvi_error err = { 0 };
    if (!rc && !out) rc = cli_error("out of memory");
    if (!rc && kvi_embed(e, (const int32_t *const *)ids, nt, n, pl, out, &err))
        rc = cli_error("embed: %s", err.msg);
    for (int i = 0, r = 0; !rc && i < n; i++) {
        *n_tokens += nt[i];
        if (pl == KVI_POOLING_RANK) {
            sc[i0 + i] = (scored){ i0 + i, out[(size_t)i * w] };
            continue;
        }
        printf("{\"index\": %d, \"n_tokens\": %d, \"%s\": ", i0 + i, (int)nt[i],
               pl == KVI_POOLING_NONE ? "embeddings" : "embedding");
        if (pl == KVI_POOLING_NONE) putchar('[');
        for (int t = 0; t < (pl == KVI_POOLING_NONE ? nt[i] : 1); t++, r++) {
            if (t) fputs(", ", stdout);
            if (pl != KVI_POOLING_NONE) kvi_embd_normalize(out + (size_t)r * w, w, o->normalize);
            print_vec(out + (size_t)r * w, w);
        }
        puts(pl == KVI_POOLING_NONE ? "]}" : "}");
    }
    for (int i = 0; ids && i < n; i++) free(ids[i]);
    free(ids), free(nt), free(out);
    return rc;
}

static int embed_main(int argc, char **argv, bool rerank)
{
    embed_opts o = { 0 };
    int rc = parse(argc, argv, &o, rerank);
    if (rc) {
        texts_free(&o.in);
        return rc < 0 ? 0 : rc;
    }
    kvi_model *m = cli_opt_load_model(&o.c);
    kvi_engine_params ep;
    cli_opt_engine_params(&o.c, &ep);
    kvi_engine *e = m ? cli_engine_create(m, &ep, "") : NULL;
    const kvi_pooling pl = o.pooling == KVI_POOLING_MODEL && m ? kvi_model_pooling(m) : o.pooling;
    scored *sc = calloc((size_t)o.in.n, sizeof *sc);
    rc = e && sc ? 0 : 1;
    if (!rc && pl == KVI_POOLING_RANK && kvi_n_cls_out(m) == 0)
        rc = cli_error("the model has no rerank head");
    int64_t n_tokens = 0;
    const double t0 = kvi_time_ms();
    for (int i0 = 0; !rc && i0 < o.in.n; i0 += (int)o.batch)
        rc = run_batch(e, &o, pl, i0, i0 + o.batch < o.in.n ? i0 + (int)o.batch : o.in.n, sc, &n_tokens);
    const double ms = kvi_time_ms() - t0;
    if (!rc && pl == KVI_POOLING_RANK) {
        qsort(sc, (size_t)o.in.n, sizeof *sc, by_score);
        for (int i = 0; i < o.in.n && (o.top_n == 0 || i < o.top_n); i++)
            printf("{\"index\": %d, \"score\": %.9g}\n", sc[i].index, sc[i].score);
    }
    if (!rc)
        fprintf(stderr, "kvinfer: %d texts, %lld tokens in %.1f ms: %.1f texts/s, %.1f tokens/s\n", o.in.n,
                (long long)n_tokens, ms, o.in.n * 1000.0 / ms, n_tokens * 1000.0 / ms);
    free(sc);
    kvi_engine_free(e);
    kvi_model_free(m);
    texts_free(&o.in);
    return rc;
}

int cmd_embed(int argc, char **argv) { return embed_main(argc, argv, false); }

int cmd_rerank(int argc, char **argv) { return embed_main(argc, argv, true); }
