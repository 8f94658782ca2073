/*
 * test_server_embed.c — POST /v1/embeddings, /embedding and the rerank routes of
 * `kvinfer serve` against llama.cpp's goldens (../shared/golden/embed): every
 * served vector by cosine similarity to the golden of its input (F32: 1 - cos
 * <= 1e-5, Q8_0: cos >= 0.998), raw vectors and per-token rows by relative
 * error (< 0.002), rerank scores to 0.001 and their order; the base64
 * encoding decoded here (little-endian float32) against the float one;
 * "dimensions" against the golden raw vector cut and renormalised here; the
 * refusals (unknown field, bad values, a context overflow, routes the model
 * does not serve).
 *
 * Servers (tiny synthetic models, one at a time): qwen3-embed f32 and q8_0
 * (last-token pooling, texts and token-id inputs), gemma-embedding (an
 * encoder: embeddings without --embeddings, chat refused), qwen3-embed with
 * --pooling none (per-token rows), qwen3-rerank with --reranking (scores to
 * 0.001), bert and nomic-bert (WordPiece texts), bert-rerank (scores to 0.01).
 */
#include "testutil.h"

#include "http_util.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static cJSON *post_json(int port, const char *path, const char *body, int *status)
{
    http_resp r = http_request(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *o = r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return o;
}

/* The vector of a JSON list of numbers into v (at most cap); its length. */
static int vec_of(const cJSON *a, double *v, int cap)
{
    int n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a)
    {
        if (n < cap) v[n] = x->valuedouble;
        n++;
    }
    return n;
}

static double cosine(const double *a, const double *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

static double rel_err(const double *a, const double *b, int n)
{
    double d = 0, s = 0;
    for (int i = 0; i < n; i++) d += (a[i] - b[i]) * (a[i] - b[i]), s += b[i] * b[i];
    return sqrt(d / s);
}

/* base64 of little-endian float32 values, decoded into v (at most cap); the count, -1 when malformed. */
static int unbase64(const char *s, double *v, int cap)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char bytes[4096 * 4];
    size_t nb = 0, len = strlen(s);
    if (len % 4) return -1;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t t = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *p = s[i + (size_t)k] == '=' ? NULL : strchr(al, s[i + (size_t)k]);
            if (!p && s[i + (size_t)k] != '=') return -1;
            pad += !p;
            t = t << 6 | (p ? (uint32_t)(p - al) : 0);
        }
        for (int k = 0; k < 3 - pad && nb < sizeof bytes; k++)
            bytes[nb++] = (unsigned char)(t >> (16 - 8 * k));
    }
    int n = 0;
    for (size_t i = 0; i + 4 <= nb && n < cap; i += 4) {
        const uint32_t u = (uint32_t)bytes[i] | (uint32_t)bytes[i + 1] << 8 | (uint32_t)bytes[i + 2] << 16 |
                           (uint32_t)bytes[i + 3] << 24;
        float f;
        memcpy(&f, &u, 4);
        v[n++] = f;
    }
    return n;
}

/* A JSON list of inputs: texts (as strings) or their golden token ids. Malloc'd. */
static char *inputs_body(const cJSON *inputs, bool tokens, const char *extra)
{
    cJSON *a = cJSON_CreateArray();
    const cJSON *in;
    cJSON_ArrayForEach(in, inputs)
    {
        const cJSON *x = cJSON_GetObjectItem(in, tokens ? "tokens" : "text");
        cJSON_AddItemToArray(a, cJSON_Duplicate(x, true));
    }
    char *arr = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    size_t n = strlen(arr) + strlen(extra) + 64;
    char *body = malloc(n);
    snprintf(body, n, "{\"model\":\"any\",\"input\":%s%s}", arr, extra);
    free(arr);
    return body;
}

/* Every input of the golden file served (as texts or ids) within 1 - cos <= tol. */
static void check_inputs(int port, const cJSON *g, bool tokens, double min_cos, const char *name)
{
    const cJSON *inputs = cJSON_GetObjectItem(g, "inputs");
    char *body = inputs_body(inputs, tokens, "");
    int st;
    cJSON *r = post_json(port, "/v1/embeddings", body, &st);
    free(body);
    CHECK(st == 200 && r, "%s: status %d", name, st);
    const cJSON *data = cJSON_GetObjectItem(r, "data");
    CHECK(cJSON_GetArraySize(data) == cJSON_GetArraySize(inputs), "%s: %d vectors", name,
          cJSON_GetArraySize(data));
    int i = 0, total = 0;
    double worst = 1;
    const cJSON *in;
    cJSON_ArrayForEach(in, inputs)
    {
        double a[4096], b[4096];
        const cJSON *d = cJSON_GetArrayItem(data, i);
        const int na = vec_of(cJSON_GetObjectItem(d, "embedding"), a, 4096);
        const int nb = vec_of(cJSON_GetObjectItem(in, "embedding"), b, 4096);
        CHECK(na == nb && (int)json_get_num(d, "index") == i &&
                  !strcmp(json_get_str(d, "object"), "embedding"),
              "%s input %d: length %d, golden %d", name, i, na, nb);
        const double c = na == nb ? cosine(a, b, na) : 0;
        if (c < worst) worst = c;
        CHECK(c >= min_cos, "%s input %d (%s): cos %.9f", name, i, tokens ? "ids" : "text", c);
        total += cJSON_GetArraySize(cJSON_GetObjectItem(in, "tokens"));
        i++;
    }
    const cJSON *u = cJSON_GetObjectItem(r, "usage");
    CHECK((int)json_get_num(u, "prompt_tokens") == total && (int)json_get_num(u, "total_tokens") == total,
          "%s: usage %g, golden tokens %d", name, json_get_num(u, "prompt_tokens"), total);
    CHECK(!strcmp(json_get_str(r, "object"), "list"), "%s: object", name);
    printf("%s (%s): worst 1 - cos %.3g over %d inputs\n", name, tokens ? "token ids" : "texts", 1 - worst,
           i);
    cJSON_Delete(r);
}

static void expect_error(int port, const char *path, const char *body, int status, const char *needle)
{
    int st;
    cJSON *r = post_json(port, path, body, &st);
    const cJSON *e = cJSON_GetObjectItem(r, "error");
    const char *msg = json_get_str(e, "message");
    CHECK(st == status && msg && strstr(msg, needle), "%s %s: status %d (want %d), message '%s' (want '%s')",
          path, body, st, status, msg ? msg : "(none)", needle);
    cJSON_Delete(r);
}

/* base64, dimensions, /embedding's raw vector and the refusals, on qwen3-embed. */
static void check_options(int port, const cJSON *g)
{
    const cJSON *in0 = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "inputs"), 0);
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(in0, "tokens"));
    double gold[4096], raw[4096], a[4096], b[4096];
    const int n = vec_of(cJSON_GetObjectItem(in0, "embedding"), gold, 4096);
    vec_of(cJSON_GetObjectItem(in0, "embedding_raw"), raw, 4096);
    char body[16384];
    int st;

    /* base64: the same floats as "float" */
    snprintf(body, sizeof body, "{\"input\":%s,\"encoding_format\":\"base64\",\"user\":\"u1\"}", ids);
    cJSON *r = post_json(port, "/v1/embeddings", body, &st);
    const char *s = json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "data"), 0), "embedding");
    const int nb = s ? unbase64(s, b, 4096) : -1;
    snprintf(body, sizeof body, "{\"input\":%s,\"encoding_format\":\"float\"}", ids);
    cJSON *rf = post_json(port, "/v1/embeddings", body, &st);
    const int na = vec_of(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(rf, "data"), 0), "embedding"), a, 4096);
    bool same = nb == n && na == n;
    for (int i = 0; same && i < n; i++) same = (float)a[i] == (float)b[i];
    CHECK(same, "base64: %d floats, float: %d, the same values: %d", nb, na, same);
    CHECK(nb == n && cosine(b, gold, n) >= 0.99999, "base64 vs golden: cos %.9f", cosine(b, gold, n));
    cJSON_Delete(r);
    cJSON_Delete(rf);

    /* dimensions: the golden raw vector's first 32 values, renormalised here */
    snprintf(body, sizeof body, "{\"input\":%s,\"dimensions\":32}", ids);
    r = post_json(port, "/v1/embeddings", body, &st);
    const int nd = vec_of(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "data"), 0), "embedding"), a, 4096);
    double norm = 0;
    for (int i = 0; i < nd && i < 32; i++) norm += a[i] * a[i];
    CHECK(st == 200 && nd == 32 && fabs(norm - 1) < 1e-5, "dimensions 32: status %d, %d values, |v|^2 %g", st,
          nd, norm);
    CHECK(nd == 32 && cosine(a, raw, 32) >= 0.99999, "dimensions 32 vs golden raw[:32]: cos %.9f",
          cosine(a, raw, 32));
    cJSON_Delete(r);

    /* llama.cpp's /embedding: [{"index", "embedding": [[v]]}]; embd_normalize -1: raw */
    snprintf(body, sizeof body, "{\"content\":%s,\"embd_normalize\":-1}", ids);
    r = post_json(port, "/embedding", body, &st);
    const cJSON *e = cJSON_GetObjectItem(cJSON_GetArrayItem(r, 0), "embedding");
    const int nr = vec_of(cJSON_GetArrayItem(e, 0), a, 4096);
    CHECK(st == 200 && cJSON_IsArray(r) && nr == n && rel_err(a, raw, n) < 0.002,
          "/embedding raw: status %d, %d values, rel err %.3g", st, nr, nr == n ? rel_err(a, raw, n) : -1);
    cJSON_Delete(r);
    /* embd_normalize 1 (taxicab): sum |v| = 1 */
    snprintf(body, sizeof body, "{\"content\":%s,\"embd_normalize\":1}", ids);
    r = post_json(port, "/embeddings", body, &st);
    vec_of(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(r, 0), "embedding"), 0), a, 4096);
    double l1 = 0;
    for (int i = 0; i < n; i++) l1 += fabs(a[i]);
    CHECK(st == 200 && fabs(l1 - 1) < 1e-5, "/embeddings taxicab: status %d, sum |v| %g", st, l1);
    cJSON_Delete(r);

    /* refusals */
    expect_error(port, "/v1/embeddings", "{\"input\":\"a\",\"temperature\":1}", 400, "temperature");
    expect_error(port, "/v1/embeddings", "{\"input\":\"a\",\"dimensions\":129}", 400, "[1, 128]");
    expect_error(port, "/v1/embeddings", "{\"input\":\"a\",\"dimensions\":0}", 400, "dimensions");
    expect_error(port, "/v1/embeddings", "{\"input\":\"a\",\"encoding_format\":\"hex\"}", 400,
                 "encoding_format");
    expect_error(port, "/v1/embeddings", "{\"input\":\"\"}", 400, "empty");
    expect_error(port, "/v1/embeddings", "{\"input\":[]}", 400, "input");
    expect_error(port, "/v1/embeddings", "{\"input\":[[1,2],[]]}", 400, "'input[1]' is empty");
    expect_error(port, "/v1/embeddings", "{\"input\":[1,2,99999]}", 400, "99999");
    expect_error(port, "/v1/embeddings", "{\"input\":[\"a\",3]}", 400, "input[1]");
    expect_error(port, "/v1/embeddings", "{\"model\":3,\"input\":\"a\"}", 400, "model");
    expect_error(port, "/v1/embeddings", "{\"texts\":[\"a\"]}", 400, "texts");
    expect_error(port, "/v1/embeddings", "{}", 400, "'input' is required");
    expect_error(port, "/v1/embeddings", "[1]", 400, "JSON object");
    expect_error(port, "/v1/rerank", "{\"query\":\"a\",\"documents\":[\"b\"]}", 501, "--reranking");
    /* longer than the context (512): a 400 naming it, unless truncate */
    char *big = malloc(8192), *p = big;
    p += sprintf(p, "{\"input\":[");
    for (int i = 0; i < 600; i++) p += sprintf(p, "%s%d", i ? "," : "", 5 + i % 50);
    sprintf(p, "]}");
    expect_error(port, "/v1/embeddings", big, 400, "context of 512");
    sprintf(p, "],\"truncate\":true}");
    r = post_json(port, "/v1/embeddings", big, &st);
    CHECK(st == 200 && (int)json_get_num(cJSON_GetObjectItem(r, "usage"), "prompt_tokens") == 512,
          "truncate: status %d, %g tokens", st,
          json_get_num(cJSON_GetObjectItem(r, "usage"), "prompt_tokens"));
    cJSON_Delete(r);
    free(big);
    free(ids);
}

/* Concurrent requests (batched across requests by the server) beside a
 * generation on the scheduler's engine: each thread posts golden input (k %
 * 8) four times and counts answers within 1 - cos <= 1e-5. */
typedef struct conc_arg {
    int port, k, good;
    const cJSON *g;
} conc_arg;

static void *conc_embed(void *p)
{
    conc_arg *a = p;
    const cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItem(a->g, "inputs"), a->k % 8);
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(in, "tokens"));
    char body[16384];
    snprintf(body, sizeof body, "{\"input\":[%s]}", ids);
    free(ids);
    double gold[4096], v[4096];
    const int n = vec_of(cJSON_GetObjectItem(in, "embedding"), gold, 4096);
    for (int r = 0; r < 4; r++) {
        int st;
        cJSON *o = post_json(a->port, "/v1/embeddings", body, &st);
        const int nv = vec_of(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "data"), 0), "embedding"), v, 4096);
        a->good += st == 200 && nv == n && cosine(v, gold, n) >= 0.99999;
        cJSON_Delete(o);
    }
    return NULL;
}

static void *conc_generate(void *p)
{
    conc_arg *a = p;
    int st;
    cJSON *o = post_json(a->port, "/v1/completions",
                         "{\"prompt\":[5,6,7,8],\"max_tokens\":16,\"ignore_eos\":true}", &st);
    a->good = st == 200 && cJSON_GetObjectItem(o, "choices");
    cJSON_Delete(o);
    return NULL;
}

static void check_concurrent(int port, const cJSON *g)
{
    enum { T = 12 };
    pthread_t th[T + 1];
    conc_arg args[T + 1];
    for (int k = 0; k <= T; k++) {
        args[k] = (conc_arg){ port, k, 0, g };
        pthread_create(&th[k], NULL, k < T ? conc_embed : conc_generate, &args[k]);
    }
    int good = 0;
    for (int k = 0; k <= T; k++) {
        pthread_join(th[k], NULL);
        if (k < T) good += args[k].good;
    }
    CHECK(good == 4 * T, "concurrent embeddings: %d of %d within 1e-5 of the golden", good, 4 * T);
    CHECK(args[T].good, "a completion beside them");
}

/* kvinfer loadgen --embeddings against the server: every text embedded, tokens counted. */
static void check_loadgen(int port)
{
    char args[256], *out = NULL;
    snprintf(args, sizeof args,
             "loadgen --url http://127.0.0.1:%d --embeddings --texts 10 --batch 4 --concurrency 2 --json",
             port);
    const int rc = run_kvinfer(args, &out, NULL);
    cJSON *o = out ? cJSON_Parse(out) : NULL;
    CHECK(rc == 0 && o, "loadgen: exit %d, output '%s'", rc, out ? out : "");
    CHECK(json_get_num(o, "requests") == 3 && json_get_num(o, "completed") == 3 &&
              json_get_num(o, "texts_embedded") == 10 && json_get_num(o, "prompt_tokens") >= 10 * 20 &&
              json_get_num(o, "texts_per_s") > 0,
          "loadgen: %s", out ? out : "");
    cJSON_Delete(o);
    free(out);
}

/* --pooling none: /embedding gives every token's raw row; /v1/embeddings refuses. */
static void check_per_token(int port, const cJSON *g)
{
    const cJSON *in0 = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "inputs"), 0);
    const cJSON *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(g, "token_embeddings"), "rows");
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(in0, "tokens"));
    char body[16384];
    snprintf(body, sizeof body, "{\"content\":%s}", ids);
    int st;
    cJSON *r = post_json(port, "/embedding", body, &st);
    const cJSON *e = cJSON_GetObjectItem(cJSON_GetArrayItem(r, 0), "embedding");
    CHECK(st == 200 && cJSON_GetArraySize(e) == cJSON_GetArraySize(rows),
          "per token: status %d, %d rows of %d", st, cJSON_GetArraySize(e), cJSON_GetArraySize(rows));
    double d = 0, s = 0;
    for (int t = 0; t < cJSON_GetArraySize(rows) && t < cJSON_GetArraySize(e); t++) {
        double a[4096], b[4096];
        const int n = vec_of(cJSON_GetArrayItem(e, t), a, 4096);
        CHECK(vec_of(cJSON_GetArrayItem(rows, t), b, 4096) == n, "row %d length", t);
        for (int i = 0; i < n; i++) d += (a[i] - b[i]) * (a[i] - b[i]), s += b[i] * b[i];
    }
    CHECK(s > 0 && sqrt(d / s) < 0.002, "per-token rows: rel err %.3g", s > 0 ? sqrt(d / s) : -1);
    printf("per-token rows (pooling none): rel err %.3g\n", s > 0 ? sqrt(d / s) : -1);
    cJSON_Delete(r);
    snprintf(body, sizeof body, "{\"input\":%s}", ids);
    expect_error(port, "/v1/embeddings", body, 400, "not OpenAI-compatible");
    free(ids);
}

/* /v1/rerank (and its aliases, TEI's form) against a reranker's golden scores, within tol. */
static void check_rerank(int port, const cJSON *g, double tol, const char *name)
{
    const cJSON *docs = cJSON_GetObjectItem(g, "documents");
    const int nd = cJSON_GetArraySize(docs);
    int best = 0; /* the golden's top document */
    for (int i = 1; i < nd; i++)
        if (json_get_num(cJSON_GetArrayItem(docs, i), "score") >
            json_get_num(cJSON_GetArrayItem(docs, best), "score"))
            best = i;
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", "reranker");
    cJSON_AddStringToObject(req, "query", json_get_str(g, "query"));
    cJSON *a = cJSON_AddArrayToObject(req, "documents");
    const cJSON *d;
    cJSON_ArrayForEach(d, docs) cJSON_AddItemToArray(a, cJSON_CreateString(json_get_str(d, "text")));
    char *body = cJSON_PrintUnformatted(req);
    int st;
    cJSON *r = post_json(port, "/v1/rerank", body, &st);
    const cJSON *res = cJSON_GetObjectItem(r, "results");
    CHECK(st == 200 && cJSON_GetArraySize(res) == nd, "rerank: status %d, %d results", st,
          cJSON_GetArraySize(res));
    double worst = 0, prev = INFINITY;
    int total = 0;
    cJSON_ArrayForEach(d, docs) total += cJSON_GetArraySize(cJSON_GetObjectItem(d, "tokens"));
    const cJSON *x;
    cJSON_ArrayForEach(x, res)
    {
        const int i = (int)json_get_num(x, "index");
        const double s = json_get_num(x, "relevance_score");
        const double want = i >= 0 && i < nd ? json_get_num(cJSON_GetArrayItem(docs, i), "score") : NAN;
        if (fabs(s - want) > worst) worst = fabs(s - want);
        CHECK(fabs(s - want) <= tol, "%s document %d: %.7f, golden %.7f", name, i, s, want);
        CHECK(want <= prev, "rerank: document %d (golden %.4f) after one of golden %.4f", i, want, prev);
        CHECK(!cJSON_GetObjectItem(x, "document"), "no document unless asked");
        prev = want;
    }
    CHECK((int)json_get_num(cJSON_GetObjectItem(r, "usage"), "prompt_tokens") == total,
          "rerank usage %g, want %d", json_get_num(cJSON_GetObjectItem(r, "usage"), "prompt_tokens"), total);
    printf("rerank (%s): worst |score - golden| %.3g over %d documents\n", name, worst, nd);
    cJSON_Delete(r);
    free(body);

    /* top_n and return_documents, on the alias /rerank */
    cJSON_AddNumberToObject(req, "top_n", 2);
    cJSON_AddBoolToObject(req, "return_documents", true);
    body = cJSON_PrintUnformatted(req);
    r = post_json(port, "/rerank", body, &st);
    res = cJSON_GetObjectItem(r, "results");
    const cJSON *top = cJSON_GetArrayItem(res, 0);
    const int i0 = (int)json_get_num(top, "index");
    CHECK(st == 200 && cJSON_GetArraySize(res) == 2 && i0 == best, "top_n 2: status %d, %d results, first %d",
          st, cJSON_GetArraySize(res), i0);
    const char *text = json_get_str(cJSON_GetObjectItem(top, "document"), "text");
    CHECK(text && !strcmp(text, json_get_str(cJSON_GetArrayItem(docs, best), "text")),
          "return_documents: '%s'", text ? text : "(none)");
    cJSON_Delete(r);
    free(body);
    cJSON_Delete(req);

    /* TEI's form: texts in, a bare list of {index, score} out */
    char tei[512];
    snprintf(tei, sizeof tei, "{\"query\":\"%s\",\"texts\":[\"%s\",\"%s\"]}", json_get_str(g, "query"),
             json_get_str(cJSON_GetArrayItem(docs, best ? 0 : 1), "text"),
             json_get_str(cJSON_GetArrayItem(docs, best), "text"));
    r = post_json(port, "/v1/reranking", tei, &st);
    const double s1 = json_get_num(cJSON_GetArrayItem(r, 0), "score");
    CHECK(st == 200 && cJSON_IsArray(r) && (int)json_get_num(cJSON_GetArrayItem(r, 0), "index") == 1 &&
              fabs(s1 - json_get_num(cJSON_GetArrayItem(docs, best), "score")) <= tol,
          "TEI: status %d, score %g", st, s1);
    cJSON_Delete(r);

    expect_error(port, "/v1/rerank", "{\"query\":\"a\"}", 400, "texts");
    expect_error(port, "/v1/rerank", "{\"query\":\"\",\"documents\":[\"b\"]}", 400, "query");
    expect_error(port, "/v1/rerank", "{\"query\":\"a\",\"documents\":[\"b\"],\"top_n\":0}", 400, "top_n");
    expect_error(port, "/v1/rerank", "{\"query\":\"a\",\"documents\":[1]}", 400, "documents[0]");
    expect_error(port, "/v1/rerank", "{\"query\":\"a\",\"documents\":[\"b\"],\"rank\":1}", 400, "rank");
    expect_error(port, "/v1/embeddings", "{\"input\":\"a\"}", 400, "/v1/rerank");
}

/* A server on golden model name with flags; the golden JSON (NULL when either failed). */
static cJSON *start(test_server *s, const char *name, const char *flags, const char *json)
{
    char extra[1024], gg[256], gj[256];
    snprintf(gg, sizeof gg, "golden/embed/%s.gguf", name);
    snprintf(gj, sizeof gj, "golden/embed/%s", json);
    snprintf(extra, sizeof extra, "-m '%s' -c 512 --parallel 2 %s", shared_path(gg), flags);
    cJSON *g = load_json(shared_path(gj));
    CHECK(g != NULL, "golden %s", json);
    const bool up = test_server_start(s, extra, "server_embed.err");
    CHECK(up, "serve %s %s", name, flags);
    if (!up) {
        cJSON_Delete(g);
        return NULL;
    }
    return g;
}

static void stop(test_server *s, cJSON *g)
{
    CHECK(test_server_stop(s) == 0, "server exit status");
    cJSON_Delete(g);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_server s;
    cJSON *g = start(&s, "qwen3-embed-f32", "--embeddings", "qwen3-embed-f32.embed.json");
    if (g) {
        check_inputs(s.port, g, false, 0.99999, "qwen3-embed-f32");
        check_inputs(s.port, g, true, 0.99999, "qwen3-embed-f32");
        check_options(s.port, g);
        check_concurrent(s.port, g);
        stop(&s, g);
    }
    if ((g = start(&s, "qwen3-embed-q8_0", "--embeddings -c 1024", "qwen3-embed-q8_0.embed.json"))) {
        check_inputs(s.port, g, true, 0.998, "qwen3-embed-q8_0");
        check_loadgen(s.port);
        stop(&s, g);
    }
    if ((g = start(&s, "gemma-embedding-f32", "", "gemma-embedding-f32.embed.json"))) {
        check_inputs(s.port, g, true, 0.99999, "gemma-embedding-f32");
        check_inputs(s.port, g, false, 0.99999, "gemma-embedding-f32");
        expect_error(s.port, "/v1/chat/completions",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 400, "encoder");
        expect_error(s.port, "/v1/completions", "{\"prompt\":\"hi\"}", 400, "encoder");
        stop(&s, g);
    }
    if ((g = start(&s, "qwen3-embed-f32", "--embeddings --pooling none", "qwen3-embed-f32.embed.json"))) {
        check_per_token(s.port, g);
        stop(&s, g);
    }
    if ((g = start(&s, "qwen3-rerank-f32", "--reranking", "qwen3-rerank-f32.rerank.json"))) {
        check_rerank(s.port, g, 0.001, "qwen3-rerank-f32");
        stop(&s, g);
    }
    /* the bert family: WordPiece texts */
    if ((g = start(&s, "bert-f32", "", "bert-f32.embed.json"))) {
        check_inputs(s.port, g, false, 0.99999, "bert-f32");
        check_inputs(s.port, g, true, 0.99999, "bert-f32");
        stop(&s, g);
    }
    if ((g = start(&s, "nomic-bert-f32", "--embeddings", "nomic-bert-f32.embed.json"))) {
        check_inputs(s.port, g, false, 0.99999, "nomic-bert-f32");
        stop(&s, g);
    }
    if ((g = start(&s, "bert-rerank-f32", "--reranking", "bert-rerank-f32.rerank.json"))) {
        check_rerank(s.port, g, 0.01, "bert-rerank-f32");
        stop(&s, g);
    }
    return test_main_end();
}
