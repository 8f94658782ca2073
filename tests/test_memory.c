/*
 * test_memory.c — memory and loading modes:
 *  1. `kvinfer run --json` reports its peak resident set, and it stays within
 *     model file + KV cache + 64 MiB (issue 3) on a synthesised stories15M-shaped F32
 *     model of ~98 MB (more than the 64 MiB slack, so a second copy of the weights
 *     fails the bound), both reading the file and with --mmap; the two modes
 *     generate the same tokens; model_bytes is the file's size;
 *  2. a model read into memory and the same model mapped (--mmap) give identical
 *     logits, for GGUF and for a llama2.c checkpoint (../shared stories260K);
 *  3. the forward pass split into 16-row chunks (kvi_engine_params.fwd_chunk) gives the same
 *     logits, bit for bit, as one unchunked pass over 40 prompt rows.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MIB ((size_t)1 << 20)
#define N_ROWS 40

/* Logits [N_ROWS][n_vocab] of one prefill pass of N_ROWS tokens, malloc'd; NULL on failure. */
static float *prefill_logits(kvi_model *m, int32_t fwd_chunk)
{
    const int nv = kvi_n_vocab(m);
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 0, 128);
    p.fwd_chunk = fwd_chunk;
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(N_ROWS);
    float *out = malloc((size_t)N_ROWS * nv * sizeof *out); /* [N_ROWS][nv] */
    bool ok = s && b && out;
    uint64_t st = 12345;
    for (int i = 0; ok && i < N_ROWS; i++) {
        int32_t tok = i == 0 ? 1 : 2 + (int32_t)(trand_u64(&st) % (uint64_t)(nv - 2));
        ok = kvi_batch_add(b, s, tok, i, true) >= 0;
    }
    if (ok) {
        kvi_error err = { 0 };
        int rc = kvi_step(e, b, &err);
        CHECK(rc == 0, "step: %s", err.msg);
        ok = rc == 0;
    }
    for (int i = 0; ok && i < N_ROWS; i++) {
        const float *l = kvi_logits(e, i);
        ok = l != NULL;
        if (l) memcpy(out + (size_t)i * nv, l, (size_t)nv * sizeof *out);
    }
    CHECK(ok, "prefill of %d rows", N_ROWS);
    if (!ok) {
        free(out);
        out = NULL;
    }
    kvi_batch_free(b);
    if (s) kvi_seq_free(s);
    kvi_engine_free(e);
    return out;
}

static kvi_model *load(const char *path, const char *tok, bool use_mmap)
{
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.use_mmap = use_mmap;
    lp.tokenizer_path = tok;
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(path, &lp, &err);
    CHECK(m != NULL, "load %s (mmap %d): %s", path, (int)use_mmap, err.msg);
    return m;
}

/* Same logits whether the file is read or mapped; also checks model_bytes. */
static void test_mmap_same_logits(const char *name, const char *tok)
{
    const char *path = shared_path(name);
    kvi_model *a = load(path, tok, false), *b = load(path, tok, true);
    if (!a || !b) {
        kvi_model_free(a);
        kvi_model_free(b);
        return;
    }
    struct stat st;
    CHECK(stat(path, &st) == 0, "stat %s", path);
    CHECK(kvi_model_file_bytes(a) == (size_t)st.st_size && kvi_model_file_bytes(b) == (size_t)st.st_size,
          "%s: model bytes %zu / %zu, file %lld", name, kvi_model_file_bytes(a), kvi_model_file_bytes(b),
          (long long)st.st_size);
    float *la = prefill_logits(a, 0), *lb = prefill_logits(b, 0);
    if (la && lb) {
        const size_t n = (size_t)N_ROWS * kvi_n_vocab(a);
        bool nonzero = false;
        for (size_t i = 0; i < n; i++) nonzero |= la[i] != 0.0f;
        CHECK(nonzero, "%s: logits are all zero", name);
        CHECK(memcmp(la, lb, n * sizeof *la) == 0, "%s: logits differ between read and --mmap", name);
    }
    free(la);
    free(lb);
    kvi_model_free(a);
    kvi_model_free(b);
}

static void test_chunked_forward(void)
{
    kvi_model *m = load(shared_path("models/stories260K.gguf"), NULL, false);
    if (!m) return;
    float *whole = prefill_logits(m, 0);
    float *chunked = prefill_logits(m, 16); /* 40 rows = 16 + 16 + 8 */
    if (whole && chunked)
        CHECK(memcmp(whole, chunked, (size_t)N_ROWS * kvi_n_vocab(m) * sizeof *whole) == 0,
              "chunked forward pass differs from one pass");
    free(whole);
    free(chunked);
    kvi_model_free(m);
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    CHECK(cJSON_IsNumber(v), "JSON stats lack %s", k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

/* One `kvinfer run --json`; returns the generated tokens as a malloc'd string. */
static char *run_bound(const char *model, bool use_mmap)
{
    char prompt[2048];
    size_t len = 0;
    for (int i = 0; i < 200 && len + 16 < sizeof prompt; i++)
        len += (size_t)snprintf(prompt + len, sizeof prompt - len, "%s%d", i ? "," : "", 10 + 37 * i);
    char args[2600];
    snprintf(args, sizeof args, "run -m '%s' --tokens %s -n 4 --temp 0 -t 2 --json%s", model, prompt,
             use_mmap ? " --mmap" : "");
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0, "kvinfer run (mmap %d) exited %d: %s", (int)use_mmap, rc, err ? err : "");
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j != NULL, "run --json output does not parse");
    char *toks = NULL;
    const cJSON *st = j ? cJSON_GetObjectItemCaseSensitive(j, "stats") : NULL;
    if (st) {
        struct stat fs;
        CHECK(stat(model, &fs) == 0, "stat %s", model);
        const double rss = num(st, "rss_peak_bytes"), mb = num(st, "model_bytes");
        const double kv = num(st, "kv_bytes_allocated"), scr = num(st, "scratch_bytes");
        const double bound = mb + kv + 64.0 * MIB;
        fprintf(stderr,
                "mmap %d: peak RSS %.1f MiB, model %.1f MiB, KV %.1f MiB, scratch %.1f MiB, "
                "bound %.1f MiB\n",
                (int)use_mmap, rss / MIB, mb / MIB, kv / MIB, scr / MIB, bound / MIB);
        CHECK(mb == (double)fs.st_size, "model_bytes %.0f != file size %lld", mb, (long long)fs.st_size);
        CHECK(kv > 0 && scr > 0, "kv %.0f, scratch %.0f", kv, scr);
        CHECK(rss > 0 && rss <= bound, "peak RSS %.0f exceeds model + KV + 64 MiB = %.0f", rss, bound);
        /* read into memory, every weight byte is resident: the measurement is real */
        if (!use_mmap) CHECK(rss >= mb, "peak RSS %.0f below the model's %.0f bytes", rss, mb);
        toks = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "tokens"));
    }
    cJSON_Delete(j);
    free(out);
    free(err);
    return toks;
}

static void test_rss_bound(void)
{
    const char *model = tmp_path("mem_stories15M_f32.gguf");
    char args[1024];
    snprintf(args, sizeof args, "synth --preset stories15M --type f32 --seed 7 -o '%s'", model);
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0, "synth exited %d: %s", rc, err ? err : "");
    free(out);
    free(err);
    if (rc != 0) return;
    char *a = run_bound(model, false), *b = run_bound(model, true);
    CHECK(a && b && strcmp(a, b) == 0, "tokens differ: read %s, mmap %s", a ? a : "-", b ? b : "-");
    free(a);
    free(b);
    remove(model);
}

int main(void)
{
    test_mmap_same_logits("models/stories260K.gguf", NULL);
    test_mmap_same_logits("models/stories260K.bin", shared_path("models/tok512.bin"));
    test_chunked_forward();
    test_rss_bound();
    return test_main_end();
}
