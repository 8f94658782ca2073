/*
 * test_quantize.c — `kvinfer quantize` against llama-quantize: the F32 goldens in
 * ../shared/golden quantised here must give every tensor of the quantised goldens
 * beside them (written by llama.cpp's llama-quantize from the same F32 file) with
 * the same type and the same bytes.
 *
 * Cases: quant/qtest-f32.gguf to each qtest-TYPE.gguf that kvinfer writes (pure
 * files with --pure, Q4_0 and Q4_K_M as llama-quantize's mixes), the imatrix ones
 * with qtest-f32.imatrix.gguf; arch/NAME-f32.gguf to arch/NAME-TYPE.gguf (mixes).
 * Also: the type rules alone (file type names, mixes on a made-up layer count).
 */
#include "testutil.h"

#include "formats/gguf.h"
#include "tools/imatrix_file.h"
#include "tools/quantize.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

/* Compares every tensor of got with want (names, types, bytes); returns the number
 * of tensors that differ and names the first few. */
static int compare_files(const char *got_path, const char *want_path, const char *label)
{
    gguf_ctx *got = NULL, *want = NULL;
    kvi_error err = { 0 };
    if (gguf_open(got_path, true, &got, &err) || gguf_open(want_path, true, &want, &err)) {
        CHECK(0, "%s: %s", label, err.msg);
        gguf_close(got);
        return -1;
    }
    int bad = 0;
    CHECK(gguf_n_tensors(got) == gguf_n_tensors(want), "%s: %lld tensors, want %lld", label,
          (long long)gguf_n_tensors(got), (long long)gguf_n_tensors(want));
    for (int64_t i = 0; i < gguf_n_tensors(want); i++) {
        const gguf_tensor *w = gguf_tensor_at(want, i), *g = gguf_find_tensor(got, w->name);
        const bool same =
            g && g->type == w->type && g->nbytes == w->nbytes && !memcmp(g->data, w->data, w->nbytes);
        if (!same && bad++ < 3)
            fprintf(stderr, "  %s: %s: %s (want %s)\n", label, w->name,
                    g ? kvi_type_name(g->type) : "missing", kvi_type_name(w->type));
    }
    gguf_close(got);
    gguf_close(want);
    return bad;
}

typedef struct qcase {
    const char *in, *want; /* under ../shared/golden */
    const char *type;      /* llama-quantize's file type */
    bool pure;
    bool imatrix;
    const char *embd; /* --token-embedding-type or NULL */
} qcase;

static int run_case(const qcase *c, const imatrix_data *im)
{
    quantize_params p;
    quantize_params_init(&p);
    p.ftype = quantize_ftype_from_name(c->type);
    p.pure = c->pure;
    p.nthread = 2;
    if (c->imatrix) {
        p.imatrix = im;
        p.imatrix_path = "qtest-f32.imatrix.gguf";
    }
    if (c->embd) kvi_type_from_name(c->embd, &p.embd_type);
    char in[512], want[512];
    snprintf(in, sizeof in, "golden/%s", c->in);
    snprintf(want, sizeof want, "golden/%s", c->want);
    const char *out = tmp_path("quantize-out.gguf");
    kvi_error err = { 0 };
    const int rc = quantize_file(shared_path(in), out, &p, &err);
    if (rc) {
        fprintf(stderr, "  %s: %s\n", c->want, err.msg);
        return -1;
    }
    return compare_files(out, shared_path(want), c->want);
}

/* The llama-quantize names and their tensor types. */
static void test_names(void)
{
    CHECK(quantize_ftype_from_name("q4_k_m") == QFT_Q4_K_M, "q4_k_m");
    CHECK(quantize_ftype_from_name("Q4_K") == QFT_Q4_K_M, "Q4_K is Q4_K_M");
    CHECK(quantize_ftype_from_name("mxfp4") == QFT_MXFP4_MOE, "MXFP4");
    CHECK(quantize_ftype_from_name("q9_9") == -1, "unknown");
    CHECK(quantize_ftype_default(QFT_IQ2_M) == KVI_TYPE_IQ2_S, "IQ2_M is built on IQ2_S tensors");
    CHECK(quantize_ftype_default(QFT_IQ2_S) == KVI_TYPE_IQ2_XS, "IQ2_S is built on IQ2_XS tensors");
}

/* Every quantised file NAME-TYPE.gguf of golden/arch from NAME-f32.gguf (llama-quantize's
 * mix of TYPE; "mxfp4" is the MXFP4_MOE file type). Returns the number of files. */
static int test_arch(void)
{
    DIR *d = opendir(shared_path("golden/arch"));
    CHECK(d != NULL, "golden/arch");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        const char *dash = strrchr(e->d_name, '-');
        if (len < 6 || strcmp(e->d_name + len - 5, ".gguf") || !dash || !strcmp(dash, "-f32.gguf")) continue;
        char base[256], type[32], in[300], want[300];
        snprintf(base, sizeof base, "%.*s", (int)(dash - e->d_name), e->d_name);
        snprintf(type, sizeof type, "%.*s", (int)(e->d_name + len - 5 - dash - 1), dash + 1);
        snprintf(in, sizeof in, "arch/%s-f32.gguf", base);
        snprintf(want, sizeof want, "arch/%s", e->d_name);
        const qcase c = { in, want, !strcmp(type, "mxfp4") ? "MXFP4_MOE" : type, false, false, NULL };
        const int bad = run_case(&c, NULL);
        CHECK(bad == 0, "%s: %d tensors differ", want, bad);
        n++;
    }
    closedir(d);
    return n;
}

/* The legacy .dat format written by hand: values are sums / ncall (as stored when
 * ncall is 0), the trailer gives the chunk count and dataset; a cut file is an error. */
static void test_imatrix_dat(void)
{
    uint8_t buf[256];
    size_t n = 0;
#define PUT(v)                            \
    do {                                  \
        memcpy(buf + n, &(v), sizeof(v)); \
        n += sizeof(v);                   \
    } while (0)
    const int32_t entries = 2, l1 = 19, c1 = 4, v1 = 3, l2 = 6, c2 = 0, v2 = 2, chunks = 7, dl = 4;
    const float s1[3] = { 4, 8, 12 }, s2[2] = { 5, 6 };
    PUT(entries);
    PUT(l1);
    memcpy(buf + n, "blk.0.attn_q.weight", 19);
    n += 19;
    PUT(c1);
    PUT(v1);
    PUT(s1);
    PUT(l2);
    memcpy(buf + n, "output", 6);
    n += 6;
    PUT(c2);
    PUT(v2);
    PUT(s2);
    PUT(chunks);
    PUT(dl);
    memcpy(buf + n, "text", 4);
    n += 4;
#undef PUT
    const char *path = tmp_path("imatrix.dat");
    CHECK(write_file(path, buf, n) == 0, "write %s", path);
    imatrix_data im;
    kvi_error err = { 0 };
    CHECK(imatrix_load(path, &im, &err) == 0, "dat: %s", err.msg);
    const imatrix_entry *a = imatrix_find(&im, "blk.0.attn_q.weight"), *b = imatrix_find(&im, "output");
    CHECK(a && a->n == 3 && a->values[0] == 1 && a->values[1] == 2 && a->values[2] == 3, "dat: sums / ncall");
    CHECK(b && b->n == 2 && b->values[0] == 5 && b->values[1] == 6, "dat: ncall 0 keeps the sums");
    CHECK(im.chunk_count == 7 && im.dataset && !strcmp(im.dataset, "text"), "dat: trailer");
    imatrix_free(&im);
    for (size_t cut = 1; cut < 60; cut += 7) {
        CHECK(write_file(path, buf, cut) == 0, "write");
        CHECK(imatrix_load(path, &im, &err) == KVI_E_FORMAT, "dat cut at %zu: %d", cut, err.code);
    }
}

/* The GGUF format: each value is in_sum2 / counts, read here from the file's tensors. */
static void test_imatrix_gguf(const imatrix_data *im)
{
    gguf_ctx *g = NULL;
    kvi_error err = { 0 };
    CHECK(gguf_open(shared_path("golden/quant/qtest-f32.imatrix.gguf"), false, &g, &err) == 0, "%s", err.msg);
    if (!g) return;
    const gguf_tensor *s = gguf_find_tensor(g, "blk.2.ffn_down.weight.in_sum2");
    const gguf_tensor *c = gguf_find_tensor(g, "blk.2.ffn_down.weight.counts");
    const imatrix_entry *e = imatrix_find(im, "blk.2.ffn_down.weight");
    CHECK(s && c && e && e->n == s->ne[0] && e->n == 768, "ffn_down entry");
    if (s && c && e && e->n == s->ne[0]) {
        const float *sum = s->data, cnt = *(const float *)c->data;
        int bad = 0;
        for (int64_t i = 0; i < e->n; i++) bad += e->values[i] != sum[i] / cnt;
        CHECK(bad == 0 && cnt > 0, "%d values differ from in_sum2 / counts", bad);
    }
    gguf_close(g);
}

/* Types kvinfer cannot write and imatrix-only types fail with a message, no file. */
static void test_refusals(void)
{
    quantize_params p;
    quantize_params_init(&p);
    p.ftype = QFT_IQ2_XXS;
    kvi_error err = { 0 };
    const char *out = tmp_path("quantize-refused.gguf");
    CHECK(quantize_file(shared_path("golden/quant/qtest-f32.gguf"), out, &p, &err) == KVI_E_INVALID,
          "IQ2_XXS without imatrix: %s", err.msg);
    CHECK(strstr(err.msg, "importance matrix") != NULL, "message: %s", err.msg);
    p.ftype = QFT_TQ1_0;
    CHECK(quantize_file(shared_path("golden/quant/qtest-f32.gguf"), out, &p, &err) == KVI_E_UNSUPPORTED,
          "TQ1_0: %s", err.msg);
    FILE *f = fopen(out, "rb");
    CHECK(f == NULL, "no file left behind");
    if (f) fclose(f);
    p.ftype = 99;
    CHECK(quantize_file(shared_path("golden/quant/qtest-f32.gguf"), out, &p, &err) == KVI_E_INVALID,
          "ftype 99");
}

int main(void)
{
    test_names();
    test_imatrix_dat();
    test_refusals();
    /* identical: these must stay byte-identical */
    static const qcase must[] = {
        { "quant/qtest-f32.gguf", "quant/qtest-f16.gguf", "F16", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-bf16.gguf", "BF16", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q8_0.gguf", "Q8_0", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q4_0.gguf", "Q4_0", false, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q4_1.gguf", "Q4_1", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q5_0.gguf", "Q5_0", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q5_1.gguf", "Q5_1", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q2_k.gguf", "Q2_K", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q3_k.gguf", "Q3_K_M", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q4_k.gguf", "Q4_K_M", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q5_k.gguf", "Q5_K_M", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q6_k.gguf", "Q6_K", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-q4_k_m.gguf", "Q4_K_M", false, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-iq4_nl.gguf", "IQ4_NL", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-iq4_xs.gguf", "IQ4_XS", true, false, NULL },
        { "quant/qtest-f32.gguf", "quant/qtest-mxfp4.gguf", "MXFP4_MOE", true, false, NULL },
    };
    imatrix_data im = { 0 };
    kvi_error err = { 0 };
    CHECK(imatrix_load(shared_path("golden/quant/qtest-f32.imatrix.gguf"), &im, &err) == 0, "imatrix: %s",
          err.msg);
    CHECK(im.n_entries == 29 && im.chunk_count == 6, "imatrix: %d entries, %d chunks", im.n_entries,
          im.chunk_count);
    test_imatrix_gguf(&im);
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        const int bad = run_case(&must[i], &im);
        CHECK(bad == 0, "%s: %d tensors differ", must[i].want, bad);
    }
    imatrix_free(&im);
    const int n_arch = test_arch();
    CHECK(n_arch >= 30, "only %d arch files", n_arch);
    printf("test_quantize: %zu qtest files and %d arch files compared\n", sizeof must / sizeof must[0],
           n_arch);
    return test_main_end();
}
