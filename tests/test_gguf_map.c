/*
 * test_gguf_map.c — the mapped GGUF load (use_mmap) of a file large enough for the
 * huge-page path (>= 32 MiB): the mapping starts on a 2 MiB boundary, holds exactly
 * the bytes the default read path holds (whole file compared), gguf_prefault()
 * leaves them unchanged and is a no-op on other buffers and NULL; a model loaded
 * both ways gives the same logits bit for bit.
 */
#include "formats/gguf.h"
#include "kvinfer.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int run_logits(kvi_model *m, const int32_t *ids, int n, float *out, int n_vocab)
{
    kvi_engine_params ep;
    kvi_engine_params_default(&ep);
    ep.n_threads = 2;
    ep.n_ctx = 64;
    kvi_error err = { 0 };
    kvi_engine *e = kvi_engine_create(m, &ep, &err);
    CHECK(e != NULL, "engine: %s", err.msg);
    if (!e) return -1;
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    int rc = -1;
    if (s && b) {
        for (int i = 0; i < n; i++) kvi_batch_add(b, s, ids[i], i, i == n - 1);
        rc = kvi_step(e, b, &err);
    }
    CHECK(rc == 0, "step: %d %s", rc, err.msg);
    const float *lg = rc == 0 ? kvi_logits(e, n - 1) : NULL;
    if (lg) memcpy(out, lg, (size_t)n_vocab * sizeof *out);
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    return lg ? 0 : -1;
}

int main(void)
{
    /* n_vocab 32000: two 32000 x 512 Q8_0 matrices, ~35 MB */
    const kvi_synth_params p = { .dim = 512,
                                 .ffn_dim = 1024,
                                 .n_layers = 2,
                                 .n_heads = 8,
                                 .n_kv_heads = 4,
                                 .n_vocab = 32000,
                                 .n_ctx = 64,
                                 .type = KVI_TYPE_Q8_0,
                                 .seed = 7,
                                 .name = "map-test" };
    const char *path = tmp_path("gguf_map.gguf");
    kvi_error err = { 0 };
    int rc = kvi_synth_write(&p, path, &err);
    CHECK(rc == 0, "synth: %s", err.msg);
    if (rc) return test_main_end();

    gguf_ctx *gr = NULL, *gm = NULL;
    CHECK(gguf_open(path, false, &gr, &err) == 0, "read: %s", err.msg);
    CHECK(gguf_open(path, true, &gm, &err) == 0, "map: %s", err.msg);
    if (gr && gm) {
        const size_t n = gguf_file_size(gr);
        CHECK(n >= ((size_t)32 << 20) && n == gguf_file_size(gm), "sizes %zu %zu", n, gguf_file_size(gm));
        CHECK(((uintptr_t)gguf_file_data(gm) & (((uintptr_t)2 << 20) - 1)) == 0,
              "mapping at %p is not 2 MiB-aligned", gguf_file_data(gm));
        CHECK(memcmp(gguf_file_data(gr), gguf_file_data(gm), n) == 0, "mapped bytes differ from read bytes");
        gguf_prefault(gm);
        gguf_prefault(gr);
        gguf_prefault(NULL);
        CHECK(memcmp(gguf_file_data(gr), gguf_file_data(gm), n) == 0, "bytes differ after gguf_prefault");
        CHECK(gguf_n_tensors(gm) == gguf_n_tensors(gr) && gguf_n_tensors(gm) > 0, "tensors %lld",
              (long long)gguf_n_tensors(gm));
    }
    gguf_close(gr);
    gguf_close(gm);

    /* the model both ways: same logits */
    float *la = malloc(32000 * sizeof(float)), *lb = malloc(32000 * sizeof(float));
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_model *ma = kvi_model_load(path, &lp, &err);
    lp.use_mmap = true;
    kvi_model *mb = kvi_model_load(path, &lp, &err);
    CHECK(ma && mb && la && lb, "load: %s", err.msg);
    if (ma && mb && la && lb) {
        const int32_t ids[] = { 1, 500, 31999, 42, 7 };
        int ra = run_logits(ma, ids, 5, la, 32000), rb = run_logits(mb, ids, 5, lb, 32000);
        CHECK(ra == 0 && rb == 0 && memcmp(la, lb, 32000 * sizeof(float)) == 0,
              "mapped model's logits differ");
        bool nonzero = false;
        for (int i = 0; i < 32000; i++) nonzero |= la[i] != 0.0f;
        CHECK(nonzero, "all logits zero");
    }
    kvi_model_free(ma);
    kvi_model_free(mb);
    free(la);
    free(lb);
    remove(path);
    return test_main_end();
}
