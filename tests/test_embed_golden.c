/*
 * test_embed_golden.c — embedding models and rerankers against llama.cpp
 * (../shared/golden/embed, README there): for every file, the pooled vector of each
 * input (cosine with llama.cpp's normalised vector, relative error of the raw one),
 * the per-token rows of input 0 (pooling none), the rerankers' scores and order;
 * from the token ids llama.cpp fed the model. Invariants: each input alone gives
 * the same bits as inside one batch of all; 1 and 2 threads give the same bits.
 */
#include "testutil.h"

#include "formats/quant.h"
#include "forward/fwd_act.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IN 16
#define MAX_TOK 512

typedef struct inputs {
    int n;
    int32_t *toks[MAX_IN];
    int32_t n_toks[MAX_IN];
} inputs;

static void inputs_free(inputs *in)
{
    for (int i = 0; i < in->n; i++) free(in->toks[i]);
}

static void inputs_read(const cJSON *arr, inputs *in)
{
    in->n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        if (in->n == MAX_IN) break;
        int32_t *t = malloc(MAX_TOK * sizeof *t);
        in->n_toks[in->n] = json_token_ids(cJSON_GetObjectItem(it, "tokens"), t, MAX_TOK);
        in->toks[in->n++] = t;
    }
}

/* floats of a JSON array into out (at most cap); the count */
static int floats(const cJSON *arr, float *out, int cap)
{
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (n < cap) out[n] = (float)v->valuedouble;
        n++;
    }
    return n;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

static double rel_err(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(d / r);
}

/* The model of golden/embed/NAME.gguf (a failed load is a failure) */
static kvi_model *load(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "golden/embed/%s.gguf", name);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path(path), NULL, &err);
    CHECK(m != NULL, "%s: %s", name, err.msg);
    return m;
}

/* The model and its golden NAME.KIND.json; false (both freed) when either is missing */
static bool open_golden(const char *name, const char *kind, kvi_model **m, cJSON **j)
{
    char path[256];
    snprintf(path, sizeof path, "golden/embed/%s.%s.json", name, kind);
    *j = load_json(shared_path(path));
    *m = load(name);
    CHECK(*j != NULL, "%s: no golden", name);
    if (*m && *j) return true;
    kvi_model_free(*m);
    cJSON_Delete(*j);
    return false;
}

static kvi_engine *open_engine(kvi_model *m, int threads)
{
    kvi_engine_params ep;
    kvi_engine_params_default(&ep);
    ep.n_threads = threads;
    kvi_error err = { 0 };
    kvi_engine *e = kvi_engine_create(m, &ep, &err);
    CHECK(e != NULL, "engine: %s", err.msg);
    return e;
}

/* out of all inputs in one call; each alone must give the same bits */
static void check_batch_invariance(const char *name, kvi_engine *e, const inputs *in, const float *all, int w)
{
    float *one = malloc((size_t)w * sizeof *one);
    for (int i = 0; i < in->n; i++) {
        const int32_t *t[1] = { in->toks[i] };
        kvi_error err = { 0 };
        CHECK(kvi_embed(e, t, &in->n_toks[i], 1, KVI_POOLING_MODEL, one, &err) == 0, "%s", err.msg);
        CHECK(memcmp(one, all + (size_t)i * w, (size_t)w * sizeof *one) == 0,
              "%s: input %d alone != in the batch", name, i);
    }
    free(one);
}

static void check_embed(const char *name, double min_cos, double max_rel)
{
    kvi_error err = { 0 };
    kvi_model *m;
    cJSON *j;
    if (!open_golden(name, "embed", &m, &j)) return;
    const int w = kvi_n_embd_out(m);
    CHECK(w == cJSON_GetObjectItem(j, "n_embd_out")->valueint, "%s: n_embd_out %d", name, w);
    kvi_pooling pl;
    CHECK(kvi_pooling_parse(cJSON_GetObjectItem(j, "pooling")->valuestring, &pl) == 0 &&
              pl == kvi_model_pooling(m),
          "%s: pooling %d", name, (int)kvi_model_pooling(m));
    inputs in;
    inputs_read(cJSON_GetObjectItem(j, "inputs"), &in);
    float *out = malloc((size_t)in.n * w * sizeof *out), *ref = malloc((size_t)w * sizeof *ref);
    kvi_engine *e1 = open_engine(m, 1), *e2 = open_engine(m, 2);
    int rc = kvi_embed(e2, (const int32_t *const *)in.toks, in.n_toks, in.n, KVI_POOLING_MODEL, out, &err);
    CHECK(rc == 0, "%s: %s", name, err.msg);
    double worst_cos = 1, worst_rel = 0;
    const cJSON *it = cJSON_GetObjectItem(j, "inputs")->child;
    for (int i = 0; rc == 0 && i < in.n; i++, it = it->next) {
        float *o = out + (size_t)i * w;
        CHECK(floats(cJSON_GetObjectItem(it, "embedding_raw"), ref, w) == w, "%s: width", name);
        const double re = rel_err(o, ref, (size_t)w);
        float *nv = malloc((size_t)w * sizeof *nv);
        memcpy(nv, o, (size_t)w * sizeof *nv);
        kvi_embd_normalize(nv, w, 2);
        floats(cJSON_GetObjectItem(it, "embedding"), ref, w);
        const double c = cosine(nv, ref, w);
        free(nv);
        CHECK(c >= min_cos, "%s input %d: cos %.9f", name, i, c);
        CHECK(re < max_rel, "%s input %d: raw rel err %.3g", name, i, re);
        worst_cos = c < worst_cos ? c : worst_cos;
        worst_rel = re > worst_rel ? re : worst_rel;
    }
    printf("%-22s pooled: 1-cos %.2e, raw rel %.2e\n", name, 1 - worst_cos, worst_rel);
    /* per-token rows of input 0 */
    const cJSON *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "token_embeddings"), "rows");
    const int nt = in.n_toks[0];
    float *tok = malloc((size_t)nt * w * sizeof *tok), *tref = malloc((size_t)nt * w * sizeof *tref);
    const int32_t *t0[1] = { in.toks[0] };
    CHECK(kvi_embed(e1, t0, &in.n_toks[0], 1, KVI_POOLING_NONE, tok, &err) == 0, "%s", err.msg);
    int k = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows) k += floats(r, tref + (size_t)k, nt * w - k);
    CHECK(k == nt * w, "%s: %d token values", name, k);
    const double tre = rel_err(tok, tref, (size_t)nt * w);
    CHECK(tre < max_rel, "%s: per-token rel err %.3g", name, tre);
    printf("%-22s per-token rel %.2e\n", name, tre);
    /* threads 1 vs 2, alone vs batch */
    float *out1 = malloc((size_t)in.n * w * sizeof *out1);
    CHECK(kvi_embed(e1, (const int32_t *const *)in.toks, in.n_toks, in.n, KVI_POOLING_MODEL, out1, &err) == 0,
          "%s", err.msg);
    CHECK(memcmp(out, out1, (size_t)in.n * w * sizeof *out) == 0, "%s: 1 thread != 2 threads", name);
    check_batch_invariance(name, e2, &in, out, w);
    free(out1), free(tok), free(tref), free(out), free(ref);
    inputs_free(&in);
    kvi_engine_free(e1), kvi_engine_free(e2);
    kvi_model_free(m);
    cJSON_Delete(j);
}

static void check_rerank(const char *name, double tol, double max_rel)
{
    kvi_error err = { 0 };
    kvi_model *m;
    cJSON *j;
    if (!open_golden(name, "rerank", &m, &j)) return;
    const int nc = kvi_n_cls_out(m), w = kvi_n_embd_out(m);
    CHECK(kvi_model_pooling(m) == KVI_POOLING_RANK && nc >= 1, "%s: pooling %d, %d outputs", name,
          (int)kvi_model_pooling(m), nc);
    inputs in;
    inputs_read(cJSON_GetObjectItem(j, "documents"), &in);
    float *out = malloc((size_t)in.n * (nc > 0 ? nc : 1) * sizeof *out), ref[16];
    kvi_engine *e = open_engine(m, 2);
    int rc = kvi_embed(e, (const int32_t *const *)in.toks, in.n_toks, in.n, KVI_POOLING_RANK, out, &err);
    CHECK(rc == 0, "%s: %s", name, err.msg);
    double worst = 0;
    const cJSON *it = cJSON_GetObjectItem(j, "documents")->child;
    for (int i = 0; rc == 0 && i < in.n; i++, it = it->next) {
        CHECK(floats(cJSON_GetObjectItem(it, "output"), ref, 16) == nc, "%s: outputs", name);
        for (int c = 0; c < nc; c++) {
            const double d = fabs(out[(size_t)i * nc + c] - ref[c]);
            CHECK(d <= tol, "%s doc %d output %d: %.6f vs %.6f", name, i, c, out[(size_t)i * nc + c], ref[c]);
            worst = d > worst ? d : worst;
        }
    }
    /* the order of the scores */
    it = cJSON_GetObjectItem(j, "documents")->child;
    for (int a = 0; rc == 0 && a < in.n; a++, it = it->next) {
        const cJSON *jb = cJSON_GetObjectItem(j, "documents")->child;
        const double sa = cJSON_GetObjectItem(it, "score")->valuedouble;
        for (int b = 0; b < in.n; b++, jb = jb->next)
            CHECK((out[(size_t)a * nc] > out[(size_t)b * nc]) ==
                      (sa > cJSON_GetObjectItem(jb, "score")->valuedouble),
                  "%s: order of %d, %d", name, a, b);
    }
    printf("%-22s scores: max |d| %.2e\n", name, worst);
    /* the sequences as llama-server builds them from the texts */
    it = cJSON_GetObjectItem(j, "documents")->child;
    const char *q = cJSON_GetObjectItem(j, "query")->valuestring;
    for (int i = 0; i < in.n; i++, it = it->next) {
        int32_t ids[MAX_TOK];
        const char *d = cJSON_GetObjectItem(it, "text")->valuestring;
        const int32_t n = kvi_rerank_tokenize(m, q, strlen(q), d, strlen(d), ids, MAX_TOK);
        CHECK(n == in.n_toks[i] && memcmp(ids, in.toks[i], (size_t)n * sizeof *ids) == 0,
              "%s doc %d: %d tokens from the texts, %d in the golden", name, i, (int)n, (int)in.n_toks[i]);
    }
    /* the head's input: per-token rows at the position the head reads */
    const cJSON *hrow = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "head_input"), "rows")->child;
    const bool first = kvi_model_is_encoder(m);
    double hw = 0;
    for (int i = 0; hrow && i < in.n; i++, hrow = hrow->next) {
        float *tok = malloc((size_t)in.n_toks[i] * w * sizeof *tok), *hr = malloc((size_t)w * sizeof *hr);
        const int32_t *t[1] = { in.toks[i] };
        CHECK(kvi_embed(e, t, &in.n_toks[i], 1, KVI_POOLING_NONE, tok, &err) == 0, "%s", err.msg);
        CHECK(floats(hrow, hr, w) == w, "%s: head_input width", name);
        const double re = rel_err(tok + (size_t)(first ? 0 : in.n_toks[i] - 1) * w, hr, (size_t)w);
        CHECK(re < max_rel, "%s doc %d: head input rel err %.3g", name, i, re);
        hw = re > hw ? re : hw;
        free(tok), free(hr);
    }
    printf("%-22s head input rel %.2e\n", name, hw);
    check_batch_invariance(name, e, &in, out, nc);
    free(out);
    inputs_free(&in);
    kvi_engine_free(e);
    kvi_model_free(m);
    cJSON_Delete(j);
}

/* refusals: too long, a bad id, rank without a head, a step on an encoder */
static void check_errors(void)
{
    kvi_model *m = load("modern-bert-f32");
    if (!m) return;
    kvi_engine *e = open_engine(m, 1);
    const int n_ctx = kvi_engine_n_ctx(e);
    int32_t *toks = calloc((size_t)n_ctx + 1, sizeof *toks), n = n_ctx + 1;
    const int32_t *t[1] = { toks };
    float *out = malloc((size_t)(n_ctx + 1) * kvi_n_embd_out(m) * sizeof *out);
    kvi_error err = { 0 };
    CHECK(kvi_embed(e, t, &n, 1, KVI_POOLING_MODEL, out, &err) == KVI_E_CONTEXT_FULL, "%s", err.msg);
    n = 3, toks[1] = 512;
    CHECK(kvi_embed(e, t, &n, 1, KVI_POOLING_MEAN, out, &err) == KVI_E_INVALID, "%s", err.msg);
    toks[1] = 7, n = 0;
    CHECK(kvi_embed(e, t, &n, 1, KVI_POOLING_MEAN, out, &err) == KVI_E_INVALID, "%s", err.msg);
    n = 3;
    CHECK(kvi_embed(e, t, &n, 1, KVI_POOLING_RANK, out, &err) == KVI_E_UNSUPPORTED, "%s", err.msg);
    kvi_batch *b = kvi_batch_create(1);
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch_add(b, s, 7, 0, true);
    CHECK(kvi_step(e, b, &err) == KVI_E_UNSUPPORTED, "step on an encoder: %s", err.msg);
    kvi_seq_free(s);
    kvi_batch_free(b);
    kvi_engine_free(e);
    kvi_model_free(m);
    /* a chat model's features the embedding pass does not run are refused by name */
    static const char *const refused[] = { "golden/arch/qwen3moe-f32.gguf", "golden/arch/qwen35-f32.gguf" };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        m = kvi_model_load(shared_path(refused[i]), NULL, &err);
        CHECK(m != NULL, "%s: %s", refused[i], err.msg);
        if (!m) continue;
        e = open_engine(m, 1);
        CHECK(e && kvi_embed(e, t, &n, 1, KVI_POOLING_MEAN, out, &err) == KVI_E_UNSUPPORTED, "%s: %s",
              refused[i], err.msg);
        kvi_engine_free(e);
        kvi_model_free(m);
    }
    free(toks), free(out);
}

/* fwd_gelu's bit conversion against the reference lookup: f16 of x by
 * quant_f32_to_f16, the table's f16 result widened (random x, and every f16 value
 * with the point halfway to the next, where the rounding decides) */
static void check_gelu(void)
{
    bool need;
    uint16_t *t16 = fwd_act_table(MODEL_ACT_GELU_TANH, &need);
    float *t32 = fwd_gelu_table_f32(t16);
    uint64_t st = 42;
    int bad = 0;
    for (int i = 0; i < 3000000 && t32; i++) {
        float x = i < 131072 ? quant_f16_to_f32((quant_f16)(i / 2)) : (trand_uniform(&st) - 0.5f) * 24.0f;
        if (i < 131072 && (i & 1)) /* halfway to the next f16 value: the tie rounds to even */
            x = 0.5f * (x + quant_f16_to_f32((quant_f16)(i / 2 + 1)));
        if (!isfinite(x)) continue;
        float y = x;
        fwd_gelu(t32, &y, 1);
        const float ref = x <= -10.0f ? 0.0f : x >= 10.0f ? x : quant_f16_to_f32(t16[quant_f32_to_f16(x)]);
        bad += bits_of_f32(y) != bits_of_f32(ref);
    }
    CHECK(t32 && bad == 0, "fwd_gelu: %d values differ from the table lookup", bad);
    free(t16), free(t32);
}

/* A synthetic BERT (kvinfer synth --arch bert) of type t: 40 inputs of 1..300
 * tokens in one call (FFN chunks and thread splits cut across inputs) give the
 * bits of each input alone and of 1 thread, with every pooling. */
static void check_synth_batch(kvi_type t)
{
    kvi_synth_params sp = { .arch = "bert",
                            .dim = 64,
                            .ffn_dim = 128,
                            .n_layers = 2,
                            .n_heads = 4,
                            .n_kv_heads = 4,
                            .n_ctx = 512,
                            .type = t,
                            .seed = 5,
                            .vocab_from = shared_path("golden/embed/ggml-vocab-bert-bge.gguf") };
    const char *path = tmp_path("embed_synth_bert.gguf");
    kvi_error err = { 0 };
    CHECK(kvi_synth_write(&sp, path, &err) == 0, "synth: %s", err.msg);
    kvi_model *m = kvi_model_load(path, NULL, &err);
    CHECK(m != NULL, "synth bert: %s", err.msg);
    if (!m) return;
    enum { N = 40 };
    int32_t *toks[N], n[N], total = 0;
    uint64_t st = 9;
    for (int i = 0; i < N; i++) {
        n[i] = 1 + (int32_t)(trand_u64(&st) % 300);
        toks[i] = malloc((size_t)n[i] * sizeof **toks);
        for (int j = 0; j < n[i]; j++) toks[i][j] = (int32_t)(trand_u64(&st) % 30522);
        total += n[i];
    }
    const int w = kvi_n_embd_out(m);
    float *all = malloc((size_t)total * w * sizeof *all), *one = malloc((size_t)total * w * sizeof *one);
    kvi_engine *e1 = open_engine(m, 1), *e2 = open_engine(m, 2);
    for (int pl = KVI_POOLING_NONE; pl <= KVI_POOLING_LAST; pl++) {
        CHECK(kvi_embed(e2, (const int32_t *const *)toks, n, N, (kvi_pooling)pl, all, &err) == 0, "%s",
              err.msg);
        CHECK(kvi_embed(e1, (const int32_t *const *)toks, n, N, (kvi_pooling)pl, one, &err) == 0, "%s",
              err.msg);
        const size_t rows = pl == KVI_POOLING_NONE ? (size_t)total : N;
        CHECK(memcmp(all, one, rows * w * sizeof *all) == 0, "synth bert pooling %d: 1 thread != 2", pl);
        bool finite = true;
        for (size_t i = 0; i < rows * w; i++) finite &= isfinite(all[i]) != 0;
        CHECK(finite, "synth bert pooling %d: not finite", pl);
        size_t r0 = 0;
        for (int i = 0; i < N; i++) {
            const int32_t *t1[1] = { toks[i] };
            CHECK(kvi_embed(e2, t1, &n[i], 1, (kvi_pooling)pl, one, &err) == 0, "%s", err.msg);
            const size_t k = pl == KVI_POOLING_NONE ? (size_t)n[i] : 1;
            CHECK(memcmp(all + r0 * w, one, k * w * sizeof *one) == 0,
                  "synth bert pooling %d: input %d alone", pl, i);
            r0 += k;
        }
    }
    for (int i = 0; i < N; i++) free(toks[i]);
    free(all), free(one);
    kvi_engine_free(e1), kvi_engine_free(e2);
    kvi_model_free(m);
}

static void check_normalize(void)
{
    float v[3] = { 3, -4, 0 };
    kvi_embd_normalize(v, 3, 2);
    CHECK(v[0] == 0.6f && v[1] == -0.8f && v[2] == 0, "euclid %g %g", v[0], v[1]);
    float a[2] = { 1, -3 };
    kvi_embd_normalize(a, 2, 1);
    CHECK(a[0] == 0.25f && a[1] == -0.75f, "taxicab %g %g", a[0], a[1]);
    float c[2] = { 1, -2 };
    kvi_embd_normalize(c, 2, 0);
    CHECK(c[0] == 16380.0f && c[1] == -32760.0f, "max %g %g", c[0], c[1]);
    float z[2] = { 0, 0 };
    kvi_embd_normalize(z, 2, 2);
    CHECK(z[0] == 0 && z[1] == 0, "zero");
    kvi_pooling p;
    CHECK(kvi_pooling_parse("rank", &p) == 0 && p == KVI_POOLING_RANK && !strcmp(kvi_pooling_name(p), "rank"),
          "rank");
    CHECK(kvi_pooling_parse("avg", &p) == KVI_E_INVALID, "unknown pooling");
}

/* `kvinfer embed` from the texts of inputs 0 and 1 (the tokenizer included): the vectors of /v1/embeddings (normalised), in order */
static void check_cli(const char *name)
{
    char path[256], args[4096];
    snprintf(path, sizeof path, "golden/embed/%s.embed.json", name);
    cJSON *j = load_json(shared_path(path));
    const cJSON *in0 = cJSON_GetObjectItem(j, "inputs")->child, *in1 = in0->next;
    const char *f = tmp_path("embed_cli_texts.txt");
    FILE *fp = fopen(f, "w");
    fprintf(fp, "%s\n%s\n", cJSON_GetObjectItem(in0, "text")->valuestring,
            cJSON_GetObjectItem(in1, "text")->valuestring);
    fclose(fp);
    snprintf(path, sizeof path, "golden/embed/%s.gguf", name);
    snprintf(args, sizeof args, "embed -m %s -f %s -t 2", shared_path(path), f);
    char *out = NULL, *errout = NULL;
    const int rc = run_kvinfer(args, &out, &errout);
    CHECK(rc == 0 && out, "kvinfer %s: %s", args, errout ? errout : "");
    const char *line = out;
    const cJSON *ref = in0;
    for (int i = 0; rc == 0 && i < 2; i++, ref = ref->next) {
        cJSON *l = cJSON_Parse(line);
        float a[512], b[512];
        const int n = l ? floats(cJSON_GetObjectItem(l, "embedding"), a, 512) : 0;
        CHECK(n > 0 && n == floats(cJSON_GetObjectItem(ref, "embedding"), b, 512), "%s cli: line %d", name,
              i);
        CHECK(n > 0 && cosine(a, b, n) >= 0.99999, "%s cli: input %d cos %.9f", name, i,
              n ? cosine(a, b, n) : 0);
        CHECK(l && cJSON_GetObjectItem(l, "index")->valueint == i, "%s cli: index", name);
        cJSON_Delete(l);
        line = strchr(line, '\n');
        if (!line) break;
        line++;
    }
    free(out), free(errout);
    cJSON_Delete(j);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL; /* one file's checks */
    static const char *const cli[] = { "qwen3-embed-f32", "gemma-embedding-f32", "bert-f32",
                                       "nomic-bert-f32",  "nomic-bert-moe-f32",  "modern-bert-f32" };
    for (size_t i = 0; !only && i < sizeof cli / sizeof *cli; i++) check_cli(cli[i]);
    check_normalize();
    check_gelu();
    if (!only) {
        check_synth_batch(KVI_TYPE_F32);
        check_synth_batch(KVI_TYPE_Q8_0);
    }
    check_errors();
    static const struct {
        const char *name;
        bool q8;
    } embed[] = {
        { "qwen3-embed-f32", false },    { "qwen3-embed-q8_0", true }, { "gemma-embedding-f32", false },
        { "bert-f32", false },           { "bert-q8_0", true },        { "nomic-bert-f32", false },
        { "nomic-bert-moe-f32", false }, { "modern-bert-f32", false }
    };
    for (size_t i = 0; i < sizeof embed / sizeof *embed; i++)
        if (!only || strcmp(only, embed[i].name) == 0)
            check_embed(embed[i].name, embed[i].q8 ? 0.998 : 0.99999, embed[i].q8 ? 0.06 : 0.002);
    if (!only || strcmp(only, "qwen3-rerank-f32") == 0) check_rerank("qwen3-rerank-f32", 0.001, 0.002);
    if (!only || strcmp(only, "bert-rerank-f32") == 0) check_rerank("bert-rerank-f32", 0.01, 0.002);
    return test_main_end();
}
