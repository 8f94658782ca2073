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

int main(void)
{
    test_names();
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
