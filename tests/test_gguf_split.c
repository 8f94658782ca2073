/*
 * test_gguf_split.c — split GGUF models (llama.cpp's gguf-split layout).
 *
 * The test writes the shards itself with the project's GGUF writer, the way
 * llama-gguf-split lays them out: name-00001-of-0000N.gguf ..., every file a complete
 * GGUF with its own tensor infos and data; the first holds all the source's metadata,
 * every file split.no (u16), split.count (u16) and split.tensors.count (i32).
 *
 * 1. Reader: a 3-file stories260K opened at its first file (read and mmap) shows the
 *    source's tensors, each with the source's bytes, the source's metadata, and the
 *    bytes of all three files (stat); a first file holding no tensors works too.
 * 2. Model: kvi_model_load of the split stories260K (read, mmap, metadata-only first
 *    file) and of a 2-file qtest-q8_0 (read mode: weights repacked in every file
 *    where the CPU prefers it) give logits bit-identical to the unsplit file's, and
 *    within the golden tolerances of llama2.c / llama.cpp (golden/README.md);
 *    kvi_model_file_bytes counts all files.
 * 3. Errors, through gguf_open (both modes) and kvi_model_load: a later shard opened
 *    directly, a missing shard, a shard with another split.count or split.no, a tensor
 *    in two files, split.tensors.count disagreeing with the files' sum, a first file
 *    whose name hides the others, split.count of a string type: each a negative code
 *    and one line naming the offending file.
 */
#include "kvinfer.h"
#include "formats/gguf.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILES 4

/* How to write a split model (zero: a correct one). */
typedef struct split_spec {
    const char *src;      /* under ../shared */
    const char *prefix;   /* file name prefix under the test tmp dir */
    int n_files;          /* 2..MAX_FILES */
    bool empty_first;     /* the first file holds metadata only (--no-tensor-first-split) */
    int count_off_file;   /* this file (1-based) says split.count = n_files + 1 */
    int no_off_file;      /* this file (1-based, > 1) says split.no one too high */
    bool dup_tensor;      /* the last file also holds the first tensor */
    int tensors_count_d;  /* split.tensors.count = tensors + this, in every file */
    bool count_as_string; /* the first file's split.count is a string */
} split_spec;

typedef struct split_files {
    char path[MAX_FILES][512]; /* path[i]: file i + 1 */
    size_t bytes;              /* of all files */
} split_files;

static void file_name(char *out, size_t cap, const char *prefix, int i, int n)
{
    char name[256];
    snprintf(name, sizeof name, "%s-%05d-of-%05d.gguf", prefix, i + 1, n);
    snprintf(out, cap, "%s", tmp_path(name));
}

static size_t stat_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* Writes the shards of spec->src; 0 on success. */
static int write_split(const split_spec *sp, split_files *out)
{
    kvi_error err = { 0 };
    gguf_ctx *src = NULL;
    int rc = gguf_open(shared_path(sp->src), false, &src, &err);
    CHECK(rc == 0, "open %s: %s", sp->src, err.msg);
    if (rc) return rc;
    const int n = sp->n_files;
    const int64_t nt = gguf_n_tensors(src);
    /* tensors [lo[i], lo[i + 1]) go to file i */
    int64_t lo[MAX_FILES + 1];
    const int first = sp->empty_first ? 1 : 0;
    for (int i = 0; i <= n; i++) lo[i] = i <= first ? 0 : nt * (i - first) / (n - first);
    out->bytes = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        file_name(out->path[i], sizeof out->path[i], sp->prefix, i, n);
        gguf_writer *w = gguf_writer_create();
        if (i == 0) {
            for (int64_t k = 0; k < gguf_n_kv(src); k++) gguf_writer_copy_kv(w, src, gguf_kv_key(src, k));
            if (sp->count_as_string) gguf_writer_set_str(w, "split.count", "3");
        }
        gguf_writer_set_u16(w, "split.no", (uint16_t)(i + (sp->no_off_file == i + 1 ? 1 : 0)));
        if (!(sp->count_as_string && i == 0))
            gguf_writer_set_u16(w, "split.count", (uint16_t)(n + (sp->count_off_file == i + 1 ? 1 : 0)));
        gguf_writer_set_i32(w, "split.tensors.count", (int32_t)(nt + sp->tensors_count_d));
        int64_t idx[256], m = 0;
        for (int64_t t = lo[i]; t < lo[i + 1] && m < 255; t++) idx[m++] = t;
        if (sp->dup_tensor && i == n - 1) idx[m++] = 0;
        for (int64_t k = 0; k < m; k++) {
            const gguf_tensor *t = gguf_tensor_at(src, idx[k]);
            CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne) == 0, "declare %s", t->name);
        }
        FILE *f = fopen(out->path[i], "wb");
        rc = f ? gguf_writer_write_header(w, f, &err) : -1;
        for (int64_t k = 0; rc == 0 && k < m; k++)
            rc = gguf_writer_write_tensor(w, f, k, gguf_tensor_at(src, idx[k])->data, &err);
        if (f && fclose(f) != 0) rc = -1;
        CHECK(rc == 0, "write %s: %s", out->path[i], err.msg);
        gguf_writer_free(w);
        out->bytes += stat_size(out->path[i]);
    }
    gguf_close(src);
    return rc;
}

static void remove_split(const split_files *f, int n)
{
    for (int i = 0; i < n; i++) remove(f->path[i]);
}

/* ---- 1. the reader ------------------------------------------------------------ */

static void check_reader(const split_spec *sp, bool use_mmap)
{
    split_files f;
    if (write_split(sp, &f)) return;
    kvi_error err = { 0 };
    gguf_ctx *src = NULL, *g = NULL;
    CHECK(gguf_open(shared_path(sp->src), false, &src, &err) == 0, "source: %s", err.msg);
    int rc = gguf_open(f.path[0], use_mmap, &g, &err);
    CHECK(rc == 0, "open split (%s): %s", use_mmap ? "mmap" : "read", err.msg);
    if (rc == 0 && src) {
        CHECK(gguf_n_files(g) == sp->n_files, "files %d", gguf_n_files(g));
        CHECK(gguf_file_size(g) == f.bytes && f.bytes > gguf_file_size(src), "bytes %zu, files %zu",
              gguf_file_size(g), f.bytes);
        CHECK(gguf_n_tensors(g) == gguf_n_tensors(src), "tensors %lld of %lld", (long long)gguf_n_tensors(g),
              (long long)gguf_n_tensors(src));
        int same = 0;
        for (int64_t i = 0; i < gguf_n_tensors(src); i++) {
            const gguf_tensor *a = gguf_tensor_at(src, i), *b = gguf_find_tensor(g, a->name);
            same += b && b->type == a->type && b->nbytes == a->nbytes &&
                    memcmp(b->ne, a->ne, sizeof a->ne) == 0 && memcmp(b->data, a->data, a->nbytes) == 0;
        }
        CHECK(same == gguf_n_tensors(src), "%d of %lld tensors equal", same, (long long)gguf_n_tensors(src));
        /* the last tensor lives in the last file, not in the first file's image */
        const gguf_tensor *last = gguf_tensor_at(g, gguf_n_tensors(g) - 1);
        const uint8_t *img = gguf_file_data(g);
        CHECK(last && ((const uint8_t *)last->data < img ||
                       (const uint8_t *)last->data >= img + stat_size(f.path[0])),
              "last tensor outside the first file");
        CHECK(gguf_n_kv(g) == gguf_n_kv(src) + 3, "kv %lld", (long long)gguf_n_kv(g));
        int64_t no = -1, cnt = -1;
        CHECK(gguf_get_int(g, "split.no", &no, &err) == 0 && no == 0, "split.no %lld", (long long)no);
        CHECK(gguf_get_int(g, "split.count", &cnt, &err) == 0 && cnt == sp->n_files, "split.count %lld",
              (long long)cnt);
        CHECK(gguf_get_str(g, "general.architecture") &&
                  !strcmp(gguf_get_str(g, "general.architecture"), "llama"),
              "architecture");
        gguf_prefault(g); /* every file: must not fault on any */
    }
    gguf_close(g);
    gguf_close(src);
    remove_split(&f, sp->n_files);
}

/* A plain file is one file, as before. */
static void check_plain(void)
{
    kvi_error err = { 0 };
    gguf_ctx *g = NULL;
    const char *p = shared_path("models/stories260K.gguf");
    CHECK(gguf_open(p, true, &g, &err) == 0, "open: %s", err.msg);
    if (!g) return;
    CHECK(gguf_n_files(g) == 1 && gguf_file_size(g) == stat_size(p), "one file of %zu bytes",
          gguf_file_size(g));
    gguf_close(g);
}

/* ---- 2. the model --------------------------------------------------------------- */

static float *logits_of(kvi_model *m, const int32_t *toks, int n)
{
    kvi_engine_params ep = engine_params(KVI_TYPE_F32, 2, 1, 256);
    kvi_engine *e = engine_create_checked(m, &ep);
    if (!e) return NULL;
    float *lg = seq_logits(e, toks, n, false);
    kvi_engine_free(e);
    return lg;
}

static kvi_model *load(const char *path, bool use_mmap)
{
    kvi_error err = { 0 };
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.use_mmap = use_mmap;
    kvi_model *m = kvi_model_load(path, &lp, &err);
    CHECK(m != NULL, "load %s: %s", path, err.msg);
    return m;
}

/* Tokens and reference logits [n][nv] of a golden file: llama2.c's case file
 * (prompt_tokens / prompt_logits) or llama.cpp's qtest file (tokens / logits). */
static int golden(const char *rel, int32_t **toks, float **ref, int nv)
{
    cJSON *j = load_json(shared_path(rel));
    CHECK(j != NULL, "read %s", rel);
    if (!j) return 0;
    const cJSON *t = cJSON_GetObjectItem(j, "prompt_tokens");
    const cJSON *l = cJSON_GetObjectItem(j, "prompt_logits");
    if (!t) t = cJSON_GetObjectItem(j, "tokens"), l = cJSON_GetObjectItem(j, "logits");
    const int n = cJSON_GetArraySize(t);
    *toks = malloc((size_t)n * sizeof **toks);
    *ref = malloc((size_t)n * nv * sizeof **ref);
    for (int i = 0; i < n; i++) {
        (*toks)[i] = cJSON_GetArrayItem(t, i)->valueint;
        const cJSON *row = cJSON_GetArrayItem(l, i);
        CHECK(cJSON_GetArraySize(row) == nv, "%s: row %d has %d logits", rel, i, cJSON_GetArraySize(row));
        for (int k = 0; k < nv; k++) {
            const cJSON *v = cJSON_GetArrayItem(row, k);
            (*ref)[(size_t)i * nv + k] = v ? (float)v->valuedouble : NAN;
        }
    }
    cJSON_Delete(j);
    return n;
}

/* The split model against the unsplit file (bit for bit) and the golden logits:
 * max abs diff <= abs_tol (llama2.c cases) or relative error < rel_tol (qtest). */
static void check_model(const split_spec *sp, bool use_mmap, const char *golden_rel, double abs_tol,
                        double rel_tol)
{
    split_files f;
    if (write_split(sp, &f)) return;
    kvi_model *a = load(shared_path(sp->src), use_mmap), *b = load(f.path[0], use_mmap);
    if (a && b) {
        CHECK(kvi_model_file_bytes(b) == f.bytes, "file bytes %zu, files %zu", kvi_model_file_bytes(b),
              f.bytes);
        const int nv = kvi_n_vocab(a);
        int32_t *toks = NULL;
        float *ref = NULL;
        const int n = golden(golden_rel, &toks, &ref, nv);
        float *la = n ? logits_of(a, toks, n) : NULL, *lb = n ? logits_of(b, toks, n) : NULL;
        if (la && lb) {
            const size_t nn = (size_t)n * nv;
            CHECK(memcmp(la, lb, nn * sizeof *la) == 0,
                  "%s split in %d (%s): logits differ from the unsplit file's", sp->src, sp->n_files,
                  use_mmap ? "mmap" : "read");
            double maxd = 0, num = 0, den = 0;
            for (size_t i = 0; i < nn; i++) {
                const double d = (double)lb[i] - ref[i];
                maxd = fmax(maxd, fabs(d));
                num += d * d;
                den += (double)ref[i] * ref[i];
            }
            const double rel = sqrt(num / den);
            if (abs_tol > 0) CHECK(maxd <= abs_tol, "%s: max abs diff %g vs golden", sp->src, maxd);
            if (rel_tol > 0) CHECK(rel < rel_tol, "%s: relative error %g vs golden", sp->src, rel);
            printf(
                "%s in %d files (%s%s): %d x %d logits bit-identical to the unsplit file; vs golden max abs "
                "%.3g, rel %.3g\n",
                sp->src, sp->n_files, use_mmap ? "mmap" : "read",
                sp->empty_first ? ", metadata-only first" : "", n, nv, maxd, rel);
        }
        free(la);
        free(lb);
        free(toks);
        free(ref);
    }
    kvi_model_free(a);
    kvi_model_free(b);
    remove_split(&f, sp->n_files);
}

/* ---- 3. errors ---------------------------------------------------------------- */

/* Opening `path` fails in both modes and through the loader, with one line that
 * contains `names` (a file name). */
static void expect_error(const char *path, const char *names, const char *what)
{
    const char *base = strrchr(names, '/') ? strrchr(names, '/') + 1 : names;
    for (int mm = 0; mm < 3; mm++) {
        kvi_error err = { 0 };
        int rc;
        if (mm < 2) {
            gguf_ctx *g = NULL;
            rc = gguf_open(path, mm == 1, &g, &err);
            CHECK(g == NULL, "%s: no context on failure", what);
            gguf_close(g);
        } else {
            kvi_load_params lp;
            kvi_load_params_default(&lp);
            kvi_model *m = kvi_model_load(path, &lp, &err);
            rc = m ? 0 : err.code;
            kvi_model_free(m);
        }
        CHECK(rc < 0, "%s (%d): must fail", what, mm);
        CHECK(strstr(err.msg, base) != NULL && !strchr(err.msg, '\n'), "%s (%d): message '%s' should name %s",
              what, mm, err.msg, base);
        if (mm == 0) printf("%s: %s\n", what, err.msg);
    }
}

static void check_errors(void)
{
    split_files f;
    split_spec sp = { .src = "models/stories260K.gguf", .prefix = "gsplit_err", .n_files = 3 };

    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[1], f.path[1], "second shard opened directly");
        expect_error(f.path[2], f.path[2], "last shard opened directly");
        /* a first file whose name does not give the others' */
        const char *renamed = tmp_path("gsplit_err_renamed.gguf");
        CHECK(rename(f.path[0], renamed) == 0, "rename");
        expect_error(renamed, renamed, "first shard renamed");
        CHECK(rename(renamed, f.path[0]) == 0, "rename back");
        /* a missing shard */
        remove(f.path[2]);
        expect_error(f.path[0], f.path[2], "missing shard");
        remove_split(&f, 3);
    }

    sp.count_off_file = 2;
    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[0], f.path[1], "shard with another split.count");
        remove_split(&f, 3);
    }
    sp.count_off_file = 0;

    sp.no_off_file = 2; /* split.no = 2 in the file named 2 of 3 */
    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[0], f.path[1], "shard with a wrong split.no");
        remove_split(&f, 3);
    }
    sp.no_off_file = 3; /* split.no = 3 of 3 */
    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[0], f.path[2], "shard with split.no out of range");
        remove_split(&f, 3);
    }
    sp.no_off_file = 0;

    sp.dup_tensor = true;
    sp.tensors_count_d = 1; /* the duplicate is counted: only the duplicate is wrong */
    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[0], f.path[2], "tensor in two shards");
        remove_split(&f, 3);
    }
    sp.dup_tensor = false;

    sp.tensors_count_d = -1;
    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[0], f.path[0], "split.tensors.count below the sum");
        remove_split(&f, 3);
    }
    sp.tensors_count_d = 2;
    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[0], f.path[0], "split.tensors.count above the sum");
        remove_split(&f, 3);
    }
    sp.tensors_count_d = 0;

    sp.count_as_string = true;
    if (write_split(&sp, &f) == 0) {
        expect_error(f.path[0], f.path[0], "split.count of type string");
        remove_split(&f, 3);
    }
}

int main(void)
{
    split_spec s3 = { .src = "models/stories260K.gguf", .prefix = "gsplit_s3", .n_files = 3 };
    split_spec s3e = {
        .src = "models/stories260K.gguf", .prefix = "gsplit_s3e", .n_files = 3, .empty_first = true
    };
    split_spec q2 = { .src = "golden/quant/qtest-q8_0.gguf", .prefix = "gsplit_q2", .n_files = 2 };
    check_plain();
    check_reader(&s3, false);
    check_reader(&s3, true);
    check_reader(&s3e, false);
    check_model(&s3, false, "golden/stories260K/case1.json", 5e-4, 0);
    check_model(&s3, true, "golden/stories260K/case2.json", 5e-4, 0);
    check_model(&s3e, false, "golden/stories260K/case1.json", 5e-4, 0);
    check_model(&q2, false, "golden/quant/qtest-q8_0.logits.json", 0, 0.03);
    check_model(&q2, true, "golden/quant/qtest-q8_0.logits.json", 0, 0.03);
    check_errors();
    return test_main_end();
}
