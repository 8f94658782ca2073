/*
 * test_bad_input.c — hostile input, end to end through the real `kvinfer` binary.
 *
 * Data: a corpus of broken files built in the test temp folder from the real files
 * in ../shared/models (GGUF, llama2.c .bin + tokenizer.bin, a Hugging Face folder),
 * and adversarial command lines. Invariant checked for every case: the process
 * exits with status exactly 1 (not a signal, not a timeout: each launch runs under
 * `timeout`), stderr holds exactly one line and it starts "kvinfer: error:" (plus
 * the "no -m given" note only when -m is absent), and stderr has no sanitizer
 * report (ctest also runs this in the ASan/UBSan build, where the binary is
 * sanitized and leaks change the exit status).
 *
 * Exhaustive truncation sweeps run in-process (kvi_model_load / kvi_vocab_load on
 * each length) instead of one process per length, to stay fast under ASan.
 *
 * GGUF corruptions come in two kinds: raw byte patches located by a small GGUF
 * walker written here (independent of src/gguf.c), and well-formed GGUF files with
 * bad contents, rewritten from stories260K.gguf by the project's GGUF writer.
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include "formats/gguf.h"
#include "kvinfer.h"
#include "formats/quant.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- running the binary --------------------------------------------------- */

static int n_launch;

/* Runs `timeout KVI_BIN args` with stdin from /dev/null; rc as run_kvinfer. */
static int run_bounded(const char *args, char **out, char **errout)
{
    char o[4096], e[4096];
    static char cmd[1 << 16];
    snprintf(o, sizeof o, "%s/bad_%d.out", KVI_TMP_DIR, (int)getpid());
    snprintf(e, sizeof e, "%s/bad_%d.err", KVI_TMP_DIR, (int)getpid());
    snprintf(cmd, sizeof cmd, "timeout -k 5 20 '%s' %s </dev/null >'%s' 2>'%s'", KVI_BIN, args, o, e);
    n_launch++;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = system(cmd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (dt > 2.0) printf("slow (%.1f s): kvinfer %.200s\n", dt, args);
    int rc = -1;
    if (st != -1 && WIFEXITED(st))
        rc = WEXITSTATUS(st);
    else if (st != -1 && WIFSIGNALED(st))
        rc = 128 + WTERMSIG(st);
    if (out) *out = read_file(o, NULL);
    if (errout) *errout = read_file(e, NULL);
    remove(o);
    remove(e);
    return rc;
}

/* One failing command: status 1, exactly one "kvinfer: error:" line (the
 * "no -m given" note also allowed when note_ok), no sanitizer output. */
static void expect_fail(const char *what, const char *args, bool note_ok)
{
    char *out = NULL, *err = NULL;
    int rc = run_bounded(args, &out, &err);
    const char *e = err ? err : "";
    int lines = 0, errors = 0, notes = 0;
    for (const char *p = e; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        lines++;
        if (n >= 15 && strncmp(p, "kvinfer: error:", 15) == 0)
            errors++;
        else if (note_ok && n >= 20 && strncmp(p, "kvinfer: no -m given", 20) == 0)
            notes++;
        p += n + (nl ? 1 : 0);
    }
    bool sanitizer = strstr(e, "Sanitizer") || strstr(e, "runtime error") || strstr(e, "==ERROR");
    bool ok = rc == 1 && errors == 1 && lines == errors + notes && !sanitizer;
    CHECK(ok, "%s: `kvinfer %.200s`: exit %d%s, stderr (%d lines): %.600s", what, args, rc,
          rc == 124 || rc == 137 ? " (timeout)"
          : rc > 128             ? " (signal)"
                                 : "",
          lines, e);
    free(out);
    free(err);
}

enum { C_RUN = 1, C_TOK = 2, C_LOG = 4, C_MMAP = 8, C_ALL = 7, C_TOLERATE = 16 };

/* A command on odd but not invalid input: success or one clean error, no crash. */
static void expect_no_crash(const char *what, const char *args)
{
    char *out = NULL, *err = NULL;
    int rc = run_bounded(args, &out, &err);
    const char *e = err ? err : "";
    bool sanitizer = strstr(e, "Sanitizer") || strstr(e, "runtime error") || strstr(e, "==ERROR");
    bool one_error =
        rc == 1 && strncmp(e, "kvinfer: error:", 15) == 0 && strchr(e, '\n') == e + strlen(e) - 1;
    CHECK((rc == 0 || one_error) && !sanitizer, "%s: `kvinfer %.200s`: exit %d, stderr: %.600s", what, args,
          rc, e);
    free(out);
    free(err);
}

/* The model-using commands on one bad model path (or folder). */
static void expect_model_fail(const char *what, const char *path, int cmds)
{
    char args[8192];
    if (cmds & C_TOLERATE) {
        snprintf(args, sizeof args, "run -m '%s' -n 2 --temp 0 -p hello", path);
        expect_no_crash(what, args);
        snprintf(args, sizeof args, "tokenize -m '%s' hello", path);
        expect_no_crash(what, args);
        return;
    }
    if (cmds & C_RUN) {
        snprintf(args, sizeof args, "run -m '%s' -n 2 --temp 0%s", path, cmds & C_MMAP ? " --mmap" : "");
        expect_fail(what, args, false);
    }
    if (cmds & C_TOK) {
        snprintf(args, sizeof args, "tokenize -m '%s' hello", path);
        expect_fail(what, args, false);
    }
    if (cmds & C_LOG) {
        snprintf(args, sizeof args, "logits -m '%s' --tokens 1,2", path);
        expect_fail(what, args, false);
    }
}

/* A good model must still work: guards against a corpus that fails for a reason
 * of its own (e.g. the writer path being broken). */
static void expect_ok(const char *what, const char *args)
{
    char *out = NULL, *err = NULL;
    int rc = run_bounded(args, &out, &err);
    CHECK(rc == 0, "%s: `kvinfer %.200s`: exit %d, stderr: %.400s", what, args, rc, err ? err : "");
    free(out);
    free(err);
}

/* ---- byte helpers --------------------------------------------------------- */

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static uint8_t *dup_bytes(const uint8_t *src, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    if (p && len) memcpy(p, src, len);
    return p;
}

/* Replaces a file by a new one: removing it first matters, since rewriting a
 * truncated file in place makes ext4 flush it at close (auto_da_alloc), which
 * turns thousands of tiny rewrites into seconds of disk waits. */
static int rewrite(const char *path, const void *data, size_t len)
{
    remove(path);
    return write_file(path, data, len);
}

/* Writes a file under tmp_path(name) and returns its path (static rotation). */
static const char *put(const char *name, const void *data, size_t len)
{
    const char *path = tmp_path(name);
    CHECK(rewrite(path, data, len) == 0, "write %s", path);
    return path;
}

/* ---- an independent GGUF walker (v2/v3, little endian) -------------------- */

#define GW_MAX 128
typedef struct {
    size_t key;  /* offset of the key's u64 length */
    size_t type; /* offset of the u32 value type */
    size_t val;  /* offset of the value */
    char name[64];
} gw_kv;
typedef struct {
    size_t name;  /* offset of the name's u64 length */
    size_t ndims; /* offset of u32 n_dims */
    size_t ne;    /* offset of ne[0] (u64 each) */
    size_t type;  /* offset of the u32 tensor type */
    size_t off;   /* offset of the u64 data offset */
    char tname[64];
} gw_tensor;
typedef struct {
    size_t n_kv, n_t, end; /* end: first byte after the tensor infos */
    gw_kv kv[GW_MAX];
    gw_tensor t[GW_MAX];
} gw_map;

static size_t gw_scalar_size(uint32_t t)
{
    static const size_t sz[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    return t < 13 ? sz[t] : 0;
}

static bool gw_str(const uint8_t *b, size_t len, size_t *o, char *copy, size_t cap)
{
    if (*o + 8 > len) return false;
    uint64_t n = rd64(b + *o);
    if (n > len - *o - 8) return false;
    if (copy) snprintf(copy, cap, "%.*s", (int)(n < cap ? n : cap - 1), (const char *)b + *o + 8);
    *o += 8 + (size_t)n;
    return true;
}

static bool gw_walk(const uint8_t *b, size_t len, gw_map *m)
{
    memset(m, 0, sizeof *m);
    if (len < 24) return false;
    m->n_t = (size_t)rd64(b + 8);
    m->n_kv = (size_t)rd64(b + 16);
    if (m->n_t > GW_MAX || m->n_kv > GW_MAX) return false;
    size_t o = 24;
    for (size_t i = 0; i < m->n_kv; i++) {
        gw_kv *k = &m->kv[i];
        k->key = o;
        if (!gw_str(b, len, &o, k->name, sizeof k->name) || o + 4 > len) return false;
        k->type = o;
        uint32_t t = rd32(b + o);
        o += 4;
        k->val = o;
        if (t == GGUF_T_STRING) {
            if (!gw_str(b, len, &o, NULL, 0)) return false;
        } else if (t == GGUF_T_ARRAY) {
            if (o + 12 > len) return false;
            uint32_t et = rd32(b + o);
            uint64_t n = rd64(b + o + 4);
            o += 12;
            for (uint64_t j = 0; j < n; j++) {
                if (et == GGUF_T_STRING) {
                    if (!gw_str(b, len, &o, NULL, 0)) return false;
                } else {
                    size_t s = gw_scalar_size(et);
                    if (!s || o + s > len) return false;
                    o += s;
                }
            }
        } else {
            size_t s = gw_scalar_size(t);
            if (!s || o + s > len) return false;
            o += s;
        }
    }
    for (size_t i = 0; i < m->n_t; i++) {
        gw_tensor *t = &m->t[i];
        t->name = o;
        if (!gw_str(b, len, &o, t->tname, sizeof t->tname) || o + 4 > len) return false;
        t->ndims = o;
        uint32_t nd = rd32(b + o);
        if (nd > 4 || o + 4 + 8 * (size_t)nd + 12 > len) return false;
        t->ne = o + 4;
        t->type = t->ne + 8 * nd;
        t->off = t->type + 4;
        o = t->off + 8;
    }
    m->end = o;
    return true;
}

static const gw_kv *gw_key(const gw_map *m, const char *name)
{
    for (size_t i = 0; i < m->n_kv; i++)
        if (!strcmp(m->kv[i].name, name)) return &m->kv[i];
    return NULL;
}

static const gw_tensor *gw_tensor_named(const gw_map *m, const char *name)
{
    for (size_t i = 0; i < m->n_t; i++)
        if (!strcmp(m->t[i].tname, name)) return &m->t[i];
    return NULL;
}

/* ---- rewritten GGUF variants (well-formed files, bad contents) ------------ */

/* A key to set (or drop): vt is a gguf_vtype, KV_DROP, or KV_ARR + element type
 * for an array of `i` elements (numbers 0.. or the string s repeated). */
enum { KV_DROP = -1, KV_ARR = 100 };
typedef struct {
    const char *key;
    int vt;
    int64_t i;
    double f;
    const char *s;
} kvset;

/* A tensor edit: skip it (skip), or give it the shape [ne0, ne1] (ne1 0: 1-D). */
typedef struct {
    const char *name;
    bool skip;
    int64_t ne0, ne1;
} tedit;

typedef struct {
    const char *what;
    kvset kv[3];
    tedit t[2];
    int cmds;
} gvariant;

static int apply_kv(gguf_writer *w, const kvset *k)
{
    switch (k->vt) {
    case GGUF_T_UINT32: return gguf_writer_set_u32(w, k->key, (uint32_t)k->i);
    case GGUF_T_INT32: return gguf_writer_set_i32(w, k->key, (int32_t)k->i);
    case GGUF_T_UINT64: return gguf_writer_set_u64(w, k->key, (uint64_t)k->i);
    case GGUF_T_INT64: return gguf_writer_set_i64(w, k->key, k->i);
    case GGUF_T_INT8: return gguf_writer_set_i8(w, k->key, (int8_t)k->i);
    case GGUF_T_FLOAT32: return gguf_writer_set_f32(w, k->key, (float)k->f);
    case GGUF_T_FLOAT64: return gguf_writer_set_f64(w, k->key, k->f);
    case GGUF_T_BOOL: return gguf_writer_set_bool(w, k->key, k->i != 0);
    case GGUF_T_STRING: return gguf_writer_set_str(w, k->key, k->s);
    default: break;
    }
    if (k->vt >= KV_ARR) {
        int et = k->vt - KV_ARR;
        size_t n = (size_t)k->i;
        int rc;
        if (et == GGUF_T_STRING) {
            const char **v = malloc((n ? n : 1) * sizeof *v);
            for (size_t j = 0; j < n; j++) v[j] = k->s;
            rc = gguf_writer_set_arr_str(w, k->key, v, n);
            free(v);
        } else if (et == GGUF_T_FLOAT32) {
            float *v = malloc((n ? n : 1) * sizeof *v);
            for (size_t j = 0; j < n; j++) v[j] = -(float)j;
            rc = gguf_writer_set_arr_f32(w, k->key, v, n);
            free(v);
        } else {
            int32_t *v = malloc((n ? n : 1) * sizeof *v);
            for (size_t j = 0; j < n; j++) v[j] = (int32_t)(k->f != 0 ? k->f : (double)j);
            rc = gguf_writer_set_arr_i32(w, k->key, v, n);
            free(v);
        }
        return rc;
    }
    return KVI_E_INVALID;
}

/* Rewrites stories260K.gguf with the variant's changes into tmp_path(name). */
static const char *write_variant(const char *name, const gvariant *v)
{
    kvi_error err = { 0 };
    gguf_ctx *src = NULL;
    if (gguf_open(shared_path("models/stories260K.gguf"), false, &src, &err)) {
        CHECK(0, "open stories260K.gguf: %s", err.msg);
        return NULL;
    }
    gguf_writer *w = gguf_writer_create();
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < gguf_n_kv(src); i++) {
        const char *key = gguf_kv_key(src, i);
        bool replaced = false;
        for (int k = 0; k < 3; k++)
            if (v->kv[k].key && !strcmp(v->kv[k].key, key)) replaced = true;
        if (!replaced) rc = gguf_writer_copy_kv(w, src, key);
    }
    for (int k = 0; rc == 0 && k < 3; k++)
        if (v->kv[k].key && v->kv[k].vt != KV_DROP) rc = apply_kv(w, &v->kv[k]);
    CHECK(rc == 0, "%s: setting keys failed (%d)", v->what, rc);

    int64_t nt = gguf_n_tensors(src), n = 0;
    const void **data = calloc((size_t)nt + 1, sizeof *data);
    void **owned = calloc((size_t)nt + 1, sizeof *owned);
    for (int64_t i = 0; rc == 0 && i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        const tedit *ed = NULL;
        for (int k = 0; k < 2; k++)
            if (v->t[k].name && !strcmp(v->t[k].name, t->name)) ed = &v->t[k];
        if (ed && ed->skip) continue;
        if (ed) {
            int64_t ne[2] = { ed->ne0, ed->ne1 ? ed->ne1 : 1 };
            size_t bytes = quant_row_bytes(t->type, ne[0]) * (size_t)ne[1];
            owned[n] = calloc(bytes ? bytes : 1, 1);
            memset(owned[n], 0x3c, bytes);
            data[n] = owned[n];
            rc = gguf_writer_add_tensor(w, t->name, t->type, ed->ne1 ? 2 : 1, ne);
        } else {
            data[n] = t->data;
            rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        }
        n++;
    }
    const char *path = tmp_path(name);
    FILE *f = rc == 0 ? fopen(path, "wb") : NULL;
    if (f) rc = gguf_writer_write_header(w, f, &err);
    for (int64_t i = 0; f && rc == 0 && i < n; i++) rc = gguf_writer_write_tensor(w, f, i, data[i], &err);
    if (f && fclose(f) != 0) rc = -1;
    CHECK(f && rc == 0, "%s: writing the variant failed: %s", v->what, err.msg);
    for (int64_t i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(data);
    gguf_writer_free(w);
    gguf_close(src);
    return f && rc == 0 ? path : NULL;
}

static void test_gguf_variants(void)
{
    /* The unchanged rewrite must run: proves the variants fail for their change. */
    gvariant same = { "unchanged rewrite", { { 0 } }, { { 0 } }, 0 };
    const char *p = write_variant("bad_same.gguf", &same);
    if (p) {
        char args[4096];
        snprintf(args, sizeof args, "run -m '%s' -n 2 --temp 0 -p hi", p);
        expect_ok("unchanged rewrite", args);
    }
    const int W = C_RUN | C_LOG; /* weights/hparams: tokenize legitimately works */
    const gvariant vs[] = {
        { "attn_q with the wrong dims", { { 0 } }, { { "blk.1.attn_q.weight", false, 64, 32 } }, W },
        { "attn_k with the wrong dims", { { 0 } }, { { "blk.0.attn_k.weight", false, 32, 64 } }, W },
        { "ffn_down transposed", { { 0 } }, { { "blk.4.ffn_down.weight", false, 64, 172 } }, W },
        { "norm vector too short", { { 0 } }, { { "blk.2.attn_norm.weight", false, 63, 0 } }, W },
        { "output_norm as a matrix", { { 0 } }, { { "output_norm.weight", false, 64, 2 } }, W },
        { "missing attn_v", { { 0 } }, { { "blk.3.attn_v.weight", true, 0, 0 } }, W },
        { "missing token_embd", { { 0 } }, { { "token_embd.weight", true, 0, 0 } }, W },
        { "missing output_norm", { { 0 } }, { { "output_norm.weight", true, 0, 0 } }, W },
        { "vocab/embedding mismatch (500 rows, 512 tokens)",
          { { 0 } },
          { { "token_embd.weight", false, 64, 500 }, { "output.weight", false, 64, 500 } },
          W },
        { "output rows differ from token_embd", { { 0 } }, { { "output.weight", false, 64, 511 } }, W },
        { "vocab_size 1000 vs 512 rows",
          { { "llama.vocab_size", GGUF_T_UINT32, 1000, 0, NULL } },
          { { 0 } },
          W },
        { "negative head_count",
          { { "llama.attention.head_count", GGUF_T_INT32, -8, 0, NULL } },
          { { 0 } },
          W },
        { "head_count 0", { { "llama.attention.head_count", GGUF_T_UINT32, 0, 0, NULL } }, { { 0 } }, W },
        { "head_count 2^32-1",
          { { "llama.attention.head_count", GGUF_T_UINT32, 0xFFFFFFFFll, 0, NULL } },
          { { 0 } },
          W },
        { "head_count_kv 3 does not divide 8",
          { { "llama.attention.head_count_kv", GGUF_T_UINT32, 3, 0, NULL } },
          { { 0 } },
          W },
        { "head_count_kv 0",
          { { "llama.attention.head_count_kv", GGUF_T_UINT32, 0, 0, NULL } },
          { { 0 } },
          W },
        { "head_count_kv 16 > head_count",
          { { "llama.attention.head_count_kv", GGUF_T_UINT32, 16, 0, NULL } },
          { { 0 } },
          W },
        { "head_count 16 (head_dim 4, shapes still fit)",
          { { "llama.attention.head_count", GGUF_T_UINT32, 16, 0, NULL } },
          { { 0 } },
          W },
        { "head_count 7 does not divide dim",
          { { "llama.attention.head_count", GGUF_T_UINT32, 7, 0, NULL },
            { "llama.attention.head_count_kv", GGUF_T_UINT32, 7, 0, NULL } },
          { { 0 } },
          W },
        { "context_length 0", { { "llama.context_length", GGUF_T_UINT32, 0, 0, NULL } }, { { 0 } }, W },
        { "context_length 2^31",
          { { "llama.context_length", GGUF_T_UINT32, 1ll << 31, 0, NULL } },
          { { 0 } },
          W },
        { "context_length -1 (i64)",
          { { "llama.context_length", GGUF_T_INT64, -1, 0, NULL } },
          { { 0 } },
          W },
        { "context_length 2^63-1 (u64)",
          { { "llama.context_length", GGUF_T_UINT64, INT64_MAX, 0, NULL } },
          { { 0 } },
          W },
        { "rope dimension 16 > head_dim 8",
          { { "llama.rope.dimension_count", GGUF_T_UINT32, 16, 0, NULL } },
          { { 0 } },
          W },
        { "rope dimension 7 (odd)",
          { { "llama.rope.dimension_count", GGUF_T_UINT32, 7, 0, NULL } },
          { { 0 } },
          W },
        { "rope dimension 0", { { "llama.rope.dimension_count", GGUF_T_UINT32, 0, 0, NULL } }, { { 0 } }, W },
        { "block_count 10^9", { { "llama.block_count", GGUF_T_UINT32, 1000000000, 0, NULL } }, { { 0 } }, W },
        { "block_count 6 (blk.5 missing)",
          { { "llama.block_count", GGUF_T_UINT32, 6, 0, NULL } },
          { { 0 } },
          W },
        { "block_count 0", { { "llama.block_count", GGUF_T_UINT32, 0, 0, NULL } }, { { 0 } }, W },
        { "block_count as a string", { { "llama.block_count", GGUF_T_STRING, 0, 0, "5" } }, { { 0 } }, W },
        { "block_count as an array",
          { { "llama.block_count", KV_ARR + GGUF_T_INT32, 5, 0, NULL } },
          { { 0 } },
          W },
        { "embedding_length 0", { { "llama.embedding_length", GGUF_T_UINT32, 0, 0, NULL } }, { { 0 } }, W },
        { "embedding_length 128 (shapes differ)",
          { { "llama.embedding_length", GGUF_T_UINT32, 128, 0, NULL } },
          { { 0 } },
          W },
        { "embedding_length 2^31",
          { { "llama.embedding_length", GGUF_T_UINT32, 1ll << 31, 0, NULL } },
          { { 0 } },
          W },
        { "feed_forward_length 0",
          { { "llama.feed_forward_length", GGUF_T_UINT32, 0, 0, NULL } },
          { { 0 } },
          W },
        { "feed_forward_length 2^32-1",
          { { "llama.feed_forward_length", GGUF_T_UINT32, 0xFFFFFFFFll, 0, NULL } },
          { { 0 } },
          W },
        { "key_length 0", { { "llama.attention.key_length", GGUF_T_UINT32, 0, 0, NULL } }, { { 0 } }, W },
        { "key_length 10^6",
          { { "llama.attention.key_length", GGUF_T_UINT32, 1000000, 0, NULL } },
          { { 0 } },
          W },
        { "key_length 16 (shapes differ)",
          { { "llama.attention.key_length", GGUF_T_UINT32, 16, 0, NULL },
            { "llama.attention.value_length", GGUF_T_UINT32, 16, 0, NULL } },
          { { 0 } },
          W },
        { "value_length differs",
          { { "llama.attention.value_length", GGUF_T_UINT32, 4, 0, NULL } },
          { { 0 } },
          W },
        { "rms epsilon NaN",
          { { "llama.attention.layer_norm_rms_epsilon", GGUF_T_FLOAT32, 0, 0.0 / 0.0, NULL } },
          { { 0 } },
          W },
        { "rms epsilon negative",
          { { "llama.attention.layer_norm_rms_epsilon", GGUF_T_FLOAT32, 0, -1e-5, NULL } },
          { { 0 } },
          W },
        { "rms epsilon missing",
          { { "llama.attention.layer_norm_rms_epsilon", KV_DROP, 0, 0, NULL } },
          { { 0 } },
          W },
        { "rope freq_base infinite",
          { { "llama.rope.freq_base", GGUF_T_FLOAT64, 0, 1e300 * 1e300, NULL } },
          { { 0 } },
          W },
        { "rope freq_base 0", { { "llama.rope.freq_base", GGUF_T_FLOAT32, 0, 0.0, NULL } }, { { 0 } }, W },
        { "unknown architecture",
          { { "general.architecture", GGUF_T_STRING, 0, 0, "mamba" } },
          { { 0 } },
          W },
        { "architecture not a string",
          { { "general.architecture", GGUF_T_UINT32, 7, 0, NULL } },
          { { 0 } },
          W },
        { "architecture missing", { { "general.architecture", KV_DROP, 0, 0, NULL } }, { { 0 } }, W },
        /* Tokenizer metadata: every command fails. */
        { "bos id 99999",
          { { "tokenizer.ggml.bos_token_id", GGUF_T_UINT32, 99999, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "eos id 512 (= vocab)",
          { { "tokenizer.ggml.eos_token_id", GGUF_T_UINT32, 512, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "unknown id -5",
          { { "tokenizer.ggml.unknown_token_id", GGUF_T_INT32, -5, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "bos id 2^31 (u64)",
          { { "tokenizer.ggml.bos_token_id", GGUF_T_UINT64, 1ll << 31, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "eos id as a string",
          { { "tokenizer.ggml.eos_token_id", GGUF_T_STRING, 0, 0, "2" } },
          { { 0 } },
          C_ALL },
        { "tokens missing", { { "tokenizer.ggml.tokens", KV_DROP, 0, 0, NULL } }, { { 0 } }, C_ALL },
        { "tokens empty array",
          { { "tokenizer.ggml.tokens", KV_ARR + GGUF_T_STRING, 0, 0, "a" } },
          { { 0 } },
          C_ALL },
        { "tokens as integers",
          { { "tokenizer.ggml.tokens", KV_ARR + GGUF_T_INT32, 512, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "scores count 100 != 512",
          { { "tokenizer.ggml.scores", KV_ARR + GGUF_T_FLOAT32, 100, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "token_type count 3 != 512",
          { { "tokenizer.ggml.token_type", KV_ARR + GGUF_T_INT32, 3, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "token_type as strings",
          { { "tokenizer.ggml.token_type", KV_ARR + GGUF_T_STRING, 512, 0, "x" } },
          { { 0 } },
          C_ALL },
        { "tokenizer model unknown",
          { { "tokenizer.ggml.model", GGUF_T_STRING, 0, 0, "nonsense" } },
          { { 0 } },
          C_ALL },
        { "tokenizer model as an int",
          { { "tokenizer.ggml.model", GGUF_T_INT32, 1, 0, NULL } },
          { { 0 } },
          C_ALL },
        { "gpt2 tokenizer without merges",
          { { "tokenizer.ggml.model", GGUF_T_STRING, 0, 0, "gpt2" } },
          { { 0 } },
          C_ALL },
        { "gpt2 merges naming unknown tokens",
          { { "tokenizer.ggml.model", GGUF_T_STRING, 0, 0, "gpt2" },
            { "tokenizer.ggml.merges", KV_ARR + GGUF_T_STRING, 4, 0, "zq\xc3\xbf xk\xc3\xbf" } },
          { { 0 } },
          C_ALL },
        { "gpt2 merge without a space",
          { { "tokenizer.ggml.model", GGUF_T_STRING, 0, 0, "gpt2" },
            { "tokenizer.ggml.merges", KV_ARR + GGUF_T_STRING, 2, 0, "ab" } },
          { { 0 } },
          C_ALL },
        { "unknown pre-tokenizer",
          { { "tokenizer.ggml.model", GGUF_T_STRING, 0, 0, "gpt2" },
            { "tokenizer.ggml.merges", KV_ARR + GGUF_T_STRING, 1, 0, "a b" },
            { "tokenizer.ggml.pre", GGUF_T_STRING, 0, 0, "no-such-pre" } },
          { { 0 } },
          C_ALL /* refused: a wrong pre-split would give wrong ids silently */ },
        { "all tokens empty strings",
          { { "tokenizer.ggml.tokens", KV_ARR + GGUF_T_STRING, 512, 0, "" } },
          { { 0 } },
          C_TOLERATE },
        { "every token a byte token",
          { { "tokenizer.ggml.token_type", KV_ARR + GGUF_T_INT32, 512, 6, NULL } },
          { { 0 } },
          C_TOLERATE },
        { "every token control",
          { { "tokenizer.ggml.token_type", KV_ARR + GGUF_T_INT32, 512, 3, NULL } },
          { { 0 } },
          C_TOLERATE },
        { "byte tokens named <0xZZ>",
          { { "tokenizer.ggml.token_type", KV_ARR + GGUF_T_INT32, 512, 6, NULL },
            { "tokenizer.ggml.tokens", KV_ARR + GGUF_T_STRING, 512, 0, "<0xZZ>" } },
          { { 0 } },
          C_TOLERATE },
    };
    char name[64];
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        snprintf(name, sizeof name, "bad_var%zu.gguf", i);
        const char *path = write_variant(name, &vs[i]);
        if (path) expect_model_fail(vs[i].what, path, vs[i].cmds);
    }
}

/* ---- raw GGUF patches ------------------------------------------------------ */

static void test_gguf_raw(void)
{
    size_t len = 0;
    uint8_t *src = (uint8_t *)read_file(shared_path("models/stories260K.gguf"), &len);
    CHECK(src != NULL && len > 20000, "read stories260K.gguf");
    if (!src) return;
    gw_map m;
    bool walked = gw_walk(src, len, &m);
    CHECK(walked && m.n_t == 48 && m.n_kv == 19, "walker: %zu tensors, %zu keys", m.n_t, m.n_kv);
    const gw_kv *toks = gw_key(&m, "tokenizer.ggml.tokens");
    const gw_kv *arch = gw_key(&m, "general.architecture");
    const gw_kv *bos = gw_key(&m, "tokenizer.ggml.bos_token_id");
    const gw_tensor *emb = gw_tensor_named(&m, "token_embd.weight");
    const gw_tensor *q0 = gw_tensor_named(&m, "blk.0.attn_q.weight");
    const gw_tensor *k0 = gw_tensor_named(&m, "blk.0.attn_k.weight");
    const gw_tensor *last = &m.t[m.n_t - 1];
    if (!walked || !toks || !arch || !bos || !emb || !q0 || !k0) {
        free(src);
        return;
    }
    /* Offset of the 100th token string's length inside the tokens array. */
    size_t tok100 = toks->val + 12;
    for (int j = 0; j < 100; j++) tok100 += 8 + (size_t)rd64(src + tok100);

    /* Truncations through every region, one process each (the in-process sweep
     * below covers every length). */
    const size_t cuts[] = { 0,
                            1,
                            4,
                            7,
                            8,
                            12,
                            23,
                            24,
                            30,
                            toks->val + 5,
                            toks->val + 12,
                            tok100 + 3,
                            tok100 + 9,
                            arch->val + 10,
                            bos->type + 2,
                            emb->name + 4,
                            emb->ne + 9,
                            q0->off + 3,
                            m.end - 1,
                            m.end,
                            m.end + 5,
                            len / 2,
                            len - 1 };
    char name[64], what[128];
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        snprintf(name, sizeof name, "bad_cut%zu.gguf", i);
        snprintf(what, sizeof what, "GGUF truncated at %zu", cuts[i]);
        const char *p = put(name, src, cuts[i]);
        expect_model_fail(what, p, (i % 3 == 0 ? C_ALL : i % 3 == 1 ? C_RUN | C_MMAP : C_TOK));
    }

    /* Patches: (offset, width 4 or 8, value). */
    struct {
        const char *what;
        size_t off;
        int width;
        uint64_t val;
        int cmds;
    } pt[] = {
        { "version 1", 4, 4, 1, C_ALL },
        { "version 4", 4, 4, 4, C_RUN },
        { "version 2^32-1", 4, 4, 0xFFFFFFFFu, C_TOK },
        { "tensor count 2^63", 8, 8, 1ull << 63, C_ALL },
        { "tensor count 10^6", 8, 8, 1000000, C_RUN | C_MMAP },
        { "kv count 2^64-1", 16, 8, UINT64_MAX, C_ALL },
        { "kv count 10^9", 16, 8, 1000000000, C_TOK },
        { "kv count 20 (one too many)", 16, 8, 20, C_RUN },
        { "first key length 2^64-1", 24, 8, UINT64_MAX, C_ALL },
        { "first key length past the end", 24, 8, len, C_TOK },
        { "tokens value type 99", toks->type, 4, 99, C_ALL },
        { "tokens element type 99", toks->val, 4, 99, C_TOK },
        { "tokens element type array (nested)", toks->val, 4, GGUF_T_ARRAY, C_RUN },
        { "tokens count 2^62", toks->val + 4, 8, 1ull << 62, C_ALL },
        { "tokens count 513 (runs into next key)", toks->val + 4, 8, 513, C_TOK },
        { "token #100 length 2^64-1", tok100, 8, UINT64_MAX, C_ALL },
        { "token #100 length past the end", tok100, 8, len, C_RUN },
        { "architecture string length 2^40", arch->val, 8, 1ull << 40, C_RUN },
        { "bos value type 13", bos->type, 4, 13, C_TOK },
        { "token_embd n_dims 5", emb->ndims, 4, 5, C_ALL },
        { "token_embd n_dims 0", emb->ndims, 4, 0, C_RUN },
        { "token_embd ne[0] 0", emb->ne, 8, 0, C_RUN },
        { "token_embd ne[0] -1", emb->ne, 8, UINT64_MAX, C_RUN },
        { "token_embd ne[1] 2^62", emb->ne + 8, 8, 1ull << 62, C_RUN | C_MMAP },
        { "token_embd ne product overflows", emb->ne, 8, 1ull << 33, C_RUN },
        { "token_embd type 99", emb->type, 4, 99, C_ALL },
        { "token_embd type 4 (removed Q4_2)", emb->type, 4, 4, C_RUN },
        { "token_embd type Q4_K (64 not a multiple of 256)", emb->type, 4, KVI_TYPE_Q4_K, C_RUN },
        { "token_embd type Q8_K (not a weight type)", emb->type, 4, KVI_TYPE_Q8_K, C_RUN },
        { "token_embd type F16 (a gap after it: still valid)", emb->type, 4, KVI_TYPE_F16, C_TOLERATE },
        { "attn_q offset past the end", q0->off, 8, (uint64_t)len, C_RUN | C_MMAP },
        { "attn_q offset 2^64-32", q0->off, 8, UINT64_MAX - 31, C_RUN },
        { "attn_q offset misaligned", q0->off, 8, rd64(src + q0->off) + 4, C_RUN },
        { "attn_q overlaps attn_k", q0->off, 8, rd64(src + k0->off), C_RUN },
        { "last tensor offset past the end", last->off, 8, rd64(src + last->off) + 4096, C_LOG },
        { "tensor name length 2^64-1", q0->name, 8, UINT64_MAX, C_RUN },
    };
    for (size_t i = 0; i < sizeof pt / sizeof pt[0]; i++) {
        uint8_t *b = dup_bytes(src, len);
        if (pt[i].width == 4)
            wr32(b + pt[i].off, (uint32_t)pt[i].val);
        else
            wr64(b + pt[i].off, pt[i].val);
        snprintf(name, sizeof name, "bad_patch%zu.gguf", i);
        expect_model_fail(pt[i].what, put(name, b, len), pt[i].cmds);
        free(b);
    }

    /* Renames of equal length: duplicate tensor, duplicate key. */
    {
        uint8_t *b = dup_bytes(src, len);
        memcpy(b + q0->name + 8, "blk.0.attn_k.weight", 19);
        expect_model_fail("duplicate tensor name", put("bad_duptensor.gguf", b, len), C_RUN);
        memcpy(b, src, len);
        memcpy(b + bos->key + 8, "tokenizer.ggml.eos_token_id", 27);
        expect_model_fail("duplicate key", put("bad_dupkey.gguf", b, len), C_ALL);
        /* A key of invalid UTF-8 / control bytes renamed over general.name. */
        memcpy(b, src, len);
        const gw_kv *gn = gw_key(&m, "general.name");
        if (gn) {
            memcpy(b + gn->key + 8, "\xff\n\x01\x1b[2Jname", 12);
            /* Still a valid file: the name is unused; must either work or fail
             * cleanly. Checked with the tokenizer, which loads every key. */
            char args[4096];
            snprintf(args, sizeof args, "tokenize -m '%s' hello", put("bad_keyname.gguf", b, len));
            char *out = NULL, *err = NULL;
            int rc = run_bounded(args, &out, &err);
            CHECK(rc == 0 || rc == 1, "control bytes in a key: exit %d: %.300s", rc, err ? err : "");
            free(out);
            free(err);
        }
        free(b);
    }
    /* Alignment: 0, 3 and 2^31 in general.alignment (written, then patched). */
    {
        gvariant al = { "alignment", { { "general.alignment", GGUF_T_UINT32, 64, 0, NULL } }, { { 0 } }, 0 };
        const char *p = write_variant("bad_align_src.gguf", &al);
        size_t alen = 0;
        uint8_t *ab = p ? (uint8_t *)read_file(p, &alen) : NULL;
        gw_map am;
        const gw_kv *ak = ab && gw_walk(ab, alen, &am) ? gw_key(&am, "general.alignment") : NULL;
        CHECK(ak != NULL, "alignment variant written");
        const uint32_t vals[] = { 0, 3, 48, 1u << 31 };
        for (size_t i = 0; ak && i < 4; i++) {
            wr32(ab + ak->val, vals[i]);
            snprintf(name, sizeof name, "bad_align%zu.gguf", i);
            snprintf(what, sizeof what, "general.alignment %u", vals[i]);
            expect_model_fail(what, put(name, ab, alen), i == 0 ? C_ALL : C_RUN);
        }
        /* The same key as a string. */
        if (ak) {
            wr32(ab + ak->val, 64);
            wr32(ab + ak->type, GGUF_T_INT32);
            expect_model_fail("general.alignment as i32", put("bad_align_t.gguf", ab, alen), C_RUN);
        }
        free(ab);
    }
    free(src);
}

/* ---- in-process truncation sweeps ----------------------------------------- */

/* Loads every given prefix length of a file through load(); returns how many
 * loaded (the caller decides which may). A failure needs an error code and text. */
typedef kvi_model *(*loader_fn)(const char *path, const char *extra);

static kvi_model *load_model(const char *path, const char *tok)
{
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.tokenizer_path = tok;
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(path, &lp, &err);
    if (!m && (err.code >= 0 || !err.msg[0]))
        CHECK(0, "%s: failed without a message (code %d)", path, err.code);
    return m;
}

static kvi_model *load_vocab(const char *path, const char *unused)
{
    (void)unused;
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(path, &err);
    if (!m && (err.code >= 0 || !err.msg[0]))
        CHECK(0, "%s: failed without a message (code %d)", path, err.code);
    return m;
}

/* Lengths tried: all up to dense, every step-th up to mid, ~100 spread beyond,
 * and the last 64. */
static bool want_len(size_t n, size_t len, size_t dense, size_t step, size_t mid)
{
    size_t spread = len / 100 ? len / 100 : 1;
    return n < len && (n <= dense || (n <= mid && n % step == 0) || n % spread == 0 || n + 64 > len);
}

static void sweep_file(const char *what, const char *src_rel, const char *dst_path, loader_fn load,
                       const char *extra, size_t dense, size_t step, size_t mid, bool all_fail)
{
    size_t len = 0;
    char *src = read_file(shared_path(src_rel), &len);
    CHECK(src != NULL, "read %s", src_rel);
    if (!src) return;
    int tried = 0, loaded = 0;
    for (size_t n = 0; n < len; n++) {
        if (!want_len(n, len, dense, step, mid)) continue;
        if (rewrite(dst_path, src, n) != 0) {
            CHECK(0, "write %s", dst_path);
            break;
        }
        kvi_model *m = load(dst_path, extra);
        tried++;
        if (m) {
            loaded++;
            if (all_fail) CHECK(0, "%s truncated to %zu of %zu bytes loaded", what, n, len);
            kvi_model_free(m);
        }
    }
    CHECK(tried > 100, "%s: %d truncations", what, tried);
    printf("  %s: %d truncations\n", what, tried);
    if (!all_fail) CHECK(loaded * 10 < tried, "%s: %d of %d truncations loaded", what, loaded, tried);
    free(src);
}

static void copy_shared(const char *rel, const char *dst)
{
    size_t len = 0;
    char *b = read_file(shared_path(rel), &len);
    CHECK(b && rewrite(dst, b, len) == 0, "copy %s", rel);
    free(b);
}

static void test_sweeps(void)
{
    /* GGUF: every length of the first 4 KiB (inside the tokens array), every 7th
     * through the rest of the key/values and the tensor infos (ending at 14152). */
    sweep_file("stories260K.gguf", "models/stories260K.gguf", tmp_path("sweep.gguf"), load_model, NULL, 4096,
               7, 14400, true);
    sweep_file("stories260K.bin", "models/stories260K.bin", tmp_path("sweep.bin"), load_model,
               shared_path("models/tok512.bin"), 100, 4, 600, true);
    /* A llama2.c tokenizer.bin ends wherever a record ends: truncations at record
     * boundaries are valid smaller vocabularies for kvi_vocab_load ... */
    sweep_file("tok512.bin (vocab)", "models/tok512.bin", tmp_path("sweep_tok.bin"), load_vocab, NULL,
               1 << 20, 1, 0, false);
    /* ... but never for the model, whose header says 512 tokens. */
    static char tokp[4096];
    snprintf(tokp, sizeof tokp, "%s", tmp_path("sweep_tok2.bin"));
    {
        size_t len = 0;
        char *tok = read_file(shared_path("models/tok512.bin"), &len);
        int bad = 0;
        for (size_t n = 0; tok && n < len; n += (n < 64 ? 1 : 97)) {
            rewrite(tokp, tok, n);
            kvi_model *m = load_model(shared_path("models/stories260K.bin"), tokp);
            if (m) bad++;
            kvi_model_free(m);
        }
        CHECK(bad == 0, "%d truncated tokenizer.bin loaded with stories260K.bin", bad);
        free(tok);
    }
    /* Hugging Face folder: config.json and the safetensors header, every length. */
    const char *dir = tmp_path("sweep_hf");
    mkdir(dir, 0755);
    static char d[4096], cfg[4200], st[4200], tj[4200];
    snprintf(d, sizeof d, "%s", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", d);
    snprintf(st, sizeof st, "%s/model.safetensors", d);
    snprintf(tj, sizeof tj, "%s/tokenizer.json", d);
    copy_shared("models/TinyStories-656K/tokenizer.json", tj);
    copy_shared("models/TinyStories-656K/model.safetensors", st);
    {
        size_t len = 0;
        char *c = read_file(shared_path("models/TinyStories-656K/config.json"), &len);
        int loaded = 0, tried = 0;
        for (size_t n = 0; c && n < len; n++) {
            rewrite(cfg, c, n);
            kvi_model *m = load_model(d, NULL);
            tried++;
            if (m) loaded++;
            kvi_model_free(m);
        }
        /* Only the last byte or two (a trailing newline) may go. */
        CHECK(loaded <= 2, "config.json: %d of %d truncations loaded", loaded, tried);
        if (c) rewrite(cfg, c, len);
        free(c);
    }
    {
        size_t len = 0;
        char *s = read_file(shared_path("models/TinyStories-656K/model.safetensors"), &len);
        size_t hdr = s ? 8 + (size_t)rd64((const uint8_t *)s) : 0;
        int loaded = 0;
        for (size_t n = 0; s && n < len; n += (n < hdr + 16 ? 3 : 65537)) {
            rewrite(st, s, n);
            kvi_model *m = load_model(d, NULL);
            if (m) loaded++;
            kvi_model_free(m);
        }
        CHECK(loaded == 0, "model.safetensors: %d truncations loaded", loaded);
        if (s) rewrite(st, s, len);
        free(s);
    }
    sweep_file("tokenizer.json (vocab)", "models/TinyStories-656K/tokenizer.json", tmp_path("sweep_tok.json"),
               load_vocab, NULL, 512, 331, 1 << 20, false);
}

/* ---- llama2.c checkpoints -------------------------------------------------- */

static void test_llama2c(void)
{
    size_t len = 0;
    uint8_t *src = (uint8_t *)read_file(shared_path("models/stories260K.bin"), &len);
    CHECK(src != NULL && len > 1000, "read stories260K.bin");
    if (!src) return;
    const char *tok = shared_path("models/tok512.bin");
    static char tokp[4096];
    snprintf(tokp, sizeof tokp, "%s", tok);
    char args[8192], name[64], what[128];
    /* Header fields: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len. */
    struct {
        const char *what;
        int field;
        int32_t val;
    } hp[] = {
        { "dim 0", 0, 0 },
        { "dim -64", 0, -64 },
        { "dim 2^31-1", 0, INT32_MAX },
        { "dim 63", 0, 63 },
        { "hidden_dim 0", 1, 0 },
        { "hidden_dim -1", 1, -1 },
        { "hidden_dim 2^30", 1, 1 << 30 },
        { "n_layers 0", 2, 0 },
        { "n_layers 10^9", 2, 1000000000 },
        { "n_layers -5", 2, -5 },
        { "n_heads 0", 3, 0 },
        { "n_heads -8", 3, -8 },
        { "n_heads 7", 3, 7 },
        { "n_kv_heads 0", 4, 0 },
        { "n_kv_heads 3", 4, 3 },
        { "n_kv_heads 16", 4, 16 },
        { "vocab_size 0", 5, 0 },
        { "vocab_size INT32_MIN", 5, INT32_MIN },
        { "vocab_size 10^6", 5, 1000000 },
        { "vocab_size 511 (tokenizer has 512)", 5, 511 },
        { "vocab_size -512 (classifier missing)", 5, -512 },
        { "seq_len 0", 6, 0 },
        { "seq_len -1", 6, -1 },
        { "seq_len 2^31-1", 6, INT32_MAX },
    };
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) {
        uint8_t *b = dup_bytes(src, len);
        wr32(b + 4 * hp[i].field, (uint32_t)hp[i].val);
        snprintf(name, sizeof name, "bad_l2c%zu.bin", i);
        snprintf(what, sizeof what, "llama2.c %s", hp[i].what);
        snprintf(args, sizeof args, "%s -m '%s' --tokenizer '%s' %s", i % 2 ? "logits" : "run",
                 put(name, b, len), tokp, i % 2 ? "--tokens 1,2" : "-n 2 --temp 0");
        expect_fail(what, args, false);
        free(b);
    }
    const size_t cuts[] = { 0, 3, 27, 28, 100, len / 2, len - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        snprintf(name, sizeof name, "bad_l2ccut%zu.bin", i);
        snprintf(what, sizeof what, "llama2.c truncated at %zu", cuts[i]);
        snprintf(args, sizeof args, "run -m '%s' --tokenizer '%s' -n 2 --temp 0", put(name, src, cuts[i]),
                 tokp);
        expect_fail(what, args, false);
    }
    /* No tokenizer next to it and none given. */
    snprintf(args, sizeof args, "run -m '%s' -n 2", put("lonely.bin", src, len));
    expect_fail("llama2.c without a tokenizer", args, false);
    snprintf(args, sizeof args, "run -m '%s' --tokenizer '%s' -n 2", shared_path("models/stories260K.bin"),
             tmp_path("no_such_tokenizer.bin"));
    expect_fail("llama2.c, missing --tokenizer file", args, false);

    /* tokenizer.bin: max_len, record lengths. */
    size_t tlen = 0;
    uint8_t *tk = (uint8_t *)read_file(tok, &tlen);
    if (tk && tlen > 100) {
        struct {
            const char *what;
            size_t off;
            uint32_t val;
        } tp[] = {
            { "tokenizer max_token_length -1", 0, 0xFFFFFFFFu },
            { "tokenizer max_token_length 0", 0, 0 },
            { "tokenizer first length past the end", 8, 1u << 30 },
            { "tokenizer first length negative", 8, 0x80000000u },
            { "tokenizer first length > max_token_length", 8, 200 },
        };
        for (size_t i = 0; i < sizeof tp / sizeof tp[0]; i++) {
            uint8_t *b = dup_bytes(tk, tlen);
            wr32(b + tp[i].off, tp[i].val);
            snprintf(name, sizeof name, "bad_tok%zu.bin", i);
            const char *p = put(name, b, tlen);
            snprintf(args, sizeof args, "run -m '%s' --tokenizer '%s' -n 2",
                     shared_path("models/stories260K.bin"), p);
            expect_fail(tp[i].what, args, false);
            snprintf(args, sizeof args, "tokenize -m '%s' hello", p);
            expect_fail(tp[i].what, args, false);
            free(b);
        }
        snprintf(args, sizeof args, "run -m '%s' --tokenizer '%s' -n 2",
                 shared_path("models/stories260K.bin"), put("bad_tokcut.bin", tk, tlen - 3));
        expect_fail("tokenizer.bin truncated", args, false);
        snprintf(args, sizeof args, "tokenize -m '%s' hello", put("bad_tokcut2.bin", tk, 6));
        expect_fail("tokenizer.bin truncated inside the first record", args, false);
    }
    free(tk);
    free(src);
}

/* ---- Hugging Face folders -------------------------------------------------- */

/* Builds tmp/<name>/ from the TinyStories-656K files, with replacements: a NULL
 * argument keeps the original, "" (with len 0) leaves the file out. */
static const char *make_hf(const char *name, const char *cfg, const void *st, size_t st_len, const char *tj)
{
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", tmp_path(name));
    mkdir(dir, 0755);
    char p[4200];
    const char *files[3] = { "config.json", "model.safetensors", "tokenizer.json" };
    const void *repl[3] = { cfg, st, tj };
    size_t rl[3] = { cfg ? strlen(cfg) : 0, st_len, tj ? strlen(tj) : 0 };
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
        if (!repl[i]) {
            char rel[128];
            snprintf(rel, sizeof rel, "models/TinyStories-656K/%s", files[i]);
            copy_shared(rel, p);
        } else if (rl[i] > 0 || i == 1) {
            if (i != 1 || st_len > 0) rewrite(p, repl[i], rl[i]);
        }
    }
    return dir;
}

/* Copy of s with the first occurrence of a replaced by b (malloc'd). */
static char *subst(const char *s, const char *a, const char *b)
{
    const char *at = strstr(s, a);
    CHECK(at != NULL, "subst: '%s' not found", a);
    size_t n = strlen(s), la = strlen(a), lb = strlen(b);
    char *r = malloc(n - (at ? la : 0) + lb + 1);
    if (!at) {
        memcpy(r, s, n + 1);
        return r;
    }
    size_t pre = (size_t)(at - s);
    memcpy(r, s, pre);
    memcpy(r + pre, b, lb);
    memcpy(r + pre + lb, at + la, n - pre - la + 1);
    return r;
}

static void test_hf(void)
{
    char *cfg = read_file(shared_path("models/TinyStories-656K/config.json"), NULL);
    size_t st_len = 0;
    char *st = read_file(shared_path("models/TinyStories-656K/model.safetensors"), &st_len);
    char *tj = read_file(shared_path("models/TinyStories-656K/tokenizer.json"), NULL);
    CHECK(cfg && st && tj, "read the TinyStories-656K folder");
    if (!cfg || !st || !tj) {
        free(cfg);
        free(st);
        free(tj);
        return;
    }
    char args[8192];
    snprintf(args, sizeof args, "run -m '%s' -n 2 --temp 0 -p hi", make_hf("hf_ok", NULL, NULL, 0, NULL));
    expect_ok("unchanged HF folder", args);

    struct {
        const char *what;
        const char *a, *b;
    } cs[] = {
        { "hidden_size missing", "\"hidden_size\": 128,", "" },
        { "hidden_size a string", "\"hidden_size\": 128", "\"hidden_size\": \"128\"" },
        { "hidden_size 10^12", "\"hidden_size\": 128", "\"hidden_size\": 1000000000000" },
        { "hidden_size 1e300", "\"hidden_size\": 128", "\"hidden_size\": 1e300" },
        { "hidden_size 127.5", "\"hidden_size\": 128", "\"hidden_size\": 127.5" },
        { "hidden_size -128", "\"hidden_size\": 128", "\"hidden_size\": -128" },
        { "hidden_size 256 (shapes differ)", "\"hidden_size\": 128", "\"hidden_size\": 256" },
        { "intermediate_size 0", "\"intermediate_size\": 384", "\"intermediate_size\": 0" },
        { "intermediate_size null", "\"intermediate_size\": 384", "\"intermediate_size\": null" },
        { "num_attention_heads 0", "\"num_attention_heads\": 8", "\"num_attention_heads\": 0" },
        { "num_attention_heads -8", "\"num_attention_heads\": 8", "\"num_attention_heads\": -8" },
        { "num_attention_heads 7", "\"num_attention_heads\": 8", "\"num_attention_heads\": 7" },
        { "num_key_value_heads 3", "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 3" },
        { "num_key_value_heads 0", "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 0" },
        { "num_key_value_heads 16", "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 16" },
        { "num_hidden_layers 10^9", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000" },
        { "num_hidden_layers 3 (layer 2 missing)", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3" },
        { "num_hidden_layers a list", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": [2]" },
        { "vocab_size 10^9", "\"vocab_size\": 2048", "\"vocab_size\": 1000000000" },
        { "vocab_size 1000 (shape differs)", "\"vocab_size\": 2048", "\"vocab_size\": 1000" },
        { "max_position_embeddings -1", "\"max_position_embeddings\": 512",
          "\"max_position_embeddings\": -1" },
        { "max_position_embeddings 2^31", "\"max_position_embeddings\": 512",
          "\"max_position_embeddings\": 2147483648" },
        { "rms_norm_eps a string", "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": \"x\"" },
        { "rms_norm_eps negative", "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": -1e-06" },
        { "rope_theta 0", "\"rope_theta\": 10000.0", "\"rope_theta\": 0" },
        { "architectures empty", "\"LlamaForCausalLM\"", "" },
        { "architectures unknown", "\"LlamaForCausalLM\"", "\"MambaForCausalLM\"" },
        { "architectures a string", "[\n    \"LlamaForCausalLM\"\n  ]", "\"LlamaForCausalLM\"" },
        { "tie_word_embeddings false (no lm_head)... a string", "\"tie_word_embeddings\": true",
          "\"tie_word_embeddings\": \"yes\"" },
        { "config not closed", "\n}", "" },
        { "config an array", "{", "[{" },
    };
    char name[64];
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char *c = subst(cfg, cs[i].a, cs[i].b);
        snprintf(name, sizeof name, "hf_cfg%zu", i);
        snprintf(args, sizeof args, "config.json %s", cs[i].what);
        expect_model_fail(args, make_hf(name, c, NULL, 0, NULL), i % 4 == 0 ? (C_RUN | C_LOG) : C_RUN);
        free(c);
    }
    expect_model_fail("config.json missing", make_hf("hf_nocfg", "", NULL, 0, NULL), C_RUN);
    expect_model_fail("config.json empty JSON object", make_hf("hf_emptycfg", "{}", NULL, 0, NULL), C_RUN);
    expect_model_fail("model.safetensors missing", make_hf("hf_nost", NULL, "", 0, NULL), C_RUN | C_LOG);
    expect_model_fail("tokenizer.json missing", make_hf("hf_notj", NULL, NULL, 0, ""), C_RUN | C_TOK);

    /* safetensors: header length and header JSON edits (same-length or re-framed). */
    size_t hlen = (size_t)rd64((const uint8_t *)st);
    char *hdr = malloc(hlen + 1);
    memcpy(hdr, st + 8, hlen);
    hdr[hlen] = 0;
    struct {
        const char *what;
        uint64_t hl;
    } hls[] = {
        { "header length past the end", (uint64_t)st_len },
        { "header length 2^64-1", UINT64_MAX },
        { "header length 0", 0 },
        { "header length 1", 1 },
        { "header length 2^40", 1ull << 40 },
    };
    for (size_t i = 0; i < sizeof hls / sizeof hls[0]; i++) {
        uint8_t *b = dup_bytes((const uint8_t *)st, st_len);
        wr64(b, hls[i].hl);
        snprintf(name, sizeof name, "hf_hl%zu", i);
        snprintf(args, sizeof args, "safetensors %s", hls[i].what);
        expect_model_fail(args, make_hf(name, NULL, b, st_len, NULL), C_RUN);
        free(b);
    }
    struct {
        const char *what;
        const char *a, *b;
    } hs[] = {
        { "offsets past the end", "\"data_offsets\":[0,1048576]", "\"data_offsets\":[0,9048576]" },
        { "offsets begin > end", "\"data_offsets\":[0,1048576]", "\"data_offsets\":[1048576,0]" },
        { "offsets overlapping", "\"data_offsets\":[1048576,1049088]", "\"data_offsets\":[1048064,1048576]" },
        { "offsets negative", "\"data_offsets\":[0,1048576]", "\"data_offsets\":[-4,1048572]" },
        { "offsets 2^64", "\"data_offsets\":[0,1048576]", "\"data_offsets\":[18446744073709551616,1048576]" },
        { "offsets one element", "\"data_offsets\":[0,1048576]", "\"data_offsets\":[1048576]" },
        { "offsets strings", "\"data_offsets\":[0,1048576]", "\"data_offsets\":[\"0\",\"1048576\"]" },
        { "dtype unknown", "\"dtype\":\"F32\"", "\"dtype\":\"F8_E4M3\"" },
        { "dtype a number", "\"dtype\":\"F32\"", "\"dtype\":32" },
        { "shape mismatch", "\"shape\":[2048,128]", "\"shape\":[2048,127]" },
        { "shape negative", "\"shape\":[2048,128]", "\"shape\":[-2048,-128]" },
        { "shape huge", "\"shape\":[2048,128]", "\"shape\":[4294967296,4294967296]" },
        { "shape five dims", "\"shape\":[2048,128]", "\"shape\":[2048,128,1,1,1]" },
        { "shape empty (scalar)", "\"shape\":[2048,128]", "\"shape\":[]" },
        { "shape of a norm wrong", "\"shape\":[128],\"data_offsets\":[1048576,1049088]",
          "\"shape\":[64,2],\"data_offsets\":[1048576,1049088]" },
        { "lm_head missing", "\"lm_head.weight\":{", "\"lm_hXad.weight\":{" },
        { "header not JSON", "{\"__metadata__\"", "{{\"__metadata__\"" },
        { "header a JSON array", "{\"__metadata__\"", "[{\"__metadata__\"" },
    };
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        char *h = subst(hdr, hs[i].a, hs[i].b);
        size_t nh = strlen(h);
        /* Re-frame: new header, then the same data (header padded with spaces to 8). */
        size_t pad = (8 - nh % 8) % 8, total = 8 + nh + pad + (st_len - 8 - hlen);
        uint8_t *b = malloc(total);
        wr64(b, nh + pad);
        memcpy(b + 8, h, nh);
        memset(b + 8 + nh, ' ', pad);
        memcpy(b + 8 + nh + pad, st + 8 + hlen, st_len - 8 - hlen);
        snprintf(name, sizeof name, "hf_st%zu", i);
        snprintf(args, sizeof args, "safetensors %s", hs[i].what);
        expect_model_fail(args, make_hf(name, NULL, b, total, NULL), i % 5 == 0 ? (C_RUN | C_LOG) : C_RUN);
        free(b);
        free(h);
    }
    free(hdr);

    /* tokenizer.json: malformed JSON and bad contents. */
    struct {
        const char *what;
        const char *a, *b;
    } ts[] = {
        { "not JSON", "{", "{{" },
        { "truncated", NULL, NULL },
        { "model type Unigram", "\"type\": \"BPE\"", "\"type\": \"Unigram\"" },
        { "model missing vocab", "\"vocab\"", "\"vocaX\"" },
        { "vocab id out of range", "\"<unk>\": 0", "\"<unk>\": 99999999" },
        { "vocab id negative", "\"<unk>\": 0", "\"<unk>\": -3" },
        { "vocab id a string", "\"<unk>\": 0", "\"<unk>\": \"0\"" },
        { "added token id out of range", "\"id\": 0,", "\"id\": 123456789," },
        { "added token id negative", "\"id\": 0,", "\"id\": -1," },
        { "added token content not a string", "\"content\": \"<unk>\"", "\"content\": 17" },
        { "control bytes in a bad token", "\"<unk>\": 0", "\"\\n<unk>\\r\\nkvinfer: error: fake\": -3" },
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        char *t;
        if (!ts[i].a) {
            size_t n = strlen(tj) / 2;
            t = malloc(n + 1);
            memcpy(t, tj, n);
            t[n] = 0;
        } else {
            t = subst(tj, ts[i].a, ts[i].b);
        }
        snprintf(name, sizeof name, "hf_tj%zu", i);
        const char *dir = make_hf(name, NULL, NULL, 0, t);
        snprintf(args, sizeof args, "tokenizer.json %s", ts[i].what);
        expect_model_fail(args, dir, i % 3 == 0 ? C_ALL : C_TOK);
        /* The file alone, as a vocabulary. */
        char p[4200], a2[8192];
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        snprintf(a2, sizeof a2, "detokenize -m '%s' 1,2", p);
        expect_fail(args, a2, false);
        free(t);
    }
    /* Merges referencing unknown tokens, and a merge without a space. */
    const char *merges = strstr(tj, "\"merges\"");
    CHECK(merges != NULL, "tokenizer.json has merges");
    if (merges) {
        const char *open = strchr(merges, '[');
        size_t pre = (size_t)(open - tj) + 1;
        const char *bad[] = { "\"qqqzz\\u00ff xxyyw\", ", "\"nospace\", ", "17, ", "[\"a\", \"zzqqx\"], " };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            size_t lb = strlen(bad[i]), n = strlen(tj);
            char *t = malloc(n + lb + 1);
            memcpy(t, tj, pre);
            memcpy(t + pre, bad[i], lb);
            memcpy(t + pre + lb, tj + pre, n - pre + 1);
            snprintf(name, sizeof name, "hf_merge%zu", i);
            snprintf(args, sizeof args, "tokenizer.json merge %s", bad[i]);
            expect_model_fail(args, make_hf(name, NULL, NULL, 0, t), C_TOK);
            free(t);
        }
    }
    free(cfg);
    free(st);
    free(tj);
}

/* ---- adversarial command lines -------------------------------------------- */

static void test_cli_args(void)
{
    const char *gg = shared_path("models/stories260K.gguf");
    static char model[4096];
    snprintf(model, sizeof model, "'%s'", gg);
    /* A 1 MB prompt and an empty prompt file. */
    size_t big_n = 1 << 20;
    char *big = malloc(big_n + 1);
    for (size_t i = 0; i < big_n; i++) big[i] = "Once upon a time "[i % 17];
    big[big_n] = 0;
    static char bigp[4096], emptyp[4096], missing_out[4096];
    snprintf(bigp, sizeof bigp, "%s", put("big_prompt.txt", big, big_n));
    snprintf(emptyp, sizeof emptyp, "%s", put("empty_prompt.txt", "", 0));
    free(big);
    snprintf(missing_out, sizeof missing_out, "%s", tmp_path("no_such_dir/out.gguf"));
    const char *dir = tmp_path("");

    static char dirq[4200], outq[4200], missq[4200], bigq[4200], emptyq[4200];
    snprintf(dirq, sizeof dirq, "'%s'", dir);
    snprintf(outq, sizeof outq, "'%s'", tmp_path("synth_bad.gguf"));
    snprintf(missq, sizeof missq, "'%s'", missing_out);
    snprintf(bigq, sizeof bigq, "'%s'", bigp);
    snprintf(emptyq, sizeof emptyq, "'%s'", emptyp);
    const char *M = model, *O = outq;
    /* Each: a format with up to two %s and their arguments. */
    const char *cl[][3] = {
        { "run -m %s --bogus", M },
        { "run -m %s -n", M },
        { "run -m %s -n abc", M },
        { "run -m %s -n -3", M },
        { "run -m %s -n 99999999999999999999", M },
        { "run -m %s -c -5", M },
        { "run -m %s -c 0x10", M },
        { "run -m %s -t 100000", M },
        { "run -m %s -t -1", M },
        { "run -m %s --temp nan", M },
        { "run -m %s --temp -1", M },
        { "run -m %s --top-p 2", M },
        { "run -m %s --top-k -1", M },
        { "run -m %s --seed -1", M },
        { "run -m %s --kv-type q9", M },
        { "run -m %s --kv-block 0", M },
        { "run -m %s --kv-budget 1 -n 2", M },
        { "run -m %s -c 2000000000 -n 2", M },
        { "run -m %s --tokens 1,,2", M },
        { "run -m %s --tokens 99999999999", M },
        { "run -m %s --tokens 512", M },
        { "run -m %s --tokens -1", M },
        { "run -m %s --tokens ''", M },
        { "run -m %s -p x --tokens 1", M },
        { "run -m %s -f /nonexistent/prompt.txt", M },
        { "run -m %s -c 16 -n 2 -f %s", M, bigq },
        { "run -m %s -n 2", dirq },
        { "run -m /dev/null -n 2" },
        { "run -m /nonexistent/model.gguf" },
        { "run -m ''" },
        { "run -m" },
        { "logits -m %s --tokens 1,,2", M },
        { "logits -m %s --tokens 99999999999", M },
        { "logits -m %s --tokens 600", M },
        { "logits -m %s --kv-type bf99 --tokens 1", M },
        { "logits -m %s --tokens", M },
        { "logits -m %s --frobnicate --tokens 1", M },
        { "logits -m /dev/null --tokens 1" },
        { "logits -m %s --tokens 1", dirq },
        { "tokenize -m %s hi", dirq },
        { "tokenize -m /dev/null hi" },
        { "tokenize -m %s --bogus hi", M },
        { "tokenize -m /nonexistent hi" },
        { "detokenize -m %s 1,,2", M },
        { "detokenize -m %s 99999", M },
        { "detokenize -m %s -1", M },
        { "detokenize -m %s abc", M },
        { "detokenize -m %s 99999999999", M },
        { "detokenize -m /dev/null 1" },
        { "synth --dim 0 --ffn 8 --layers 1 --heads 1 -o %s", O },
        { "synth --heads 7 --dim 64 --ffn 8 --layers 1 -o %s", O },
        { "synth --dim 64 --ffn 8 --layers 1 --heads 8 --kv-heads 3 -o %s", O },
        { "synth --dim 64 --ffn 8 --layers 1000000000 --heads 8 -o %s", O },
        { "synth --dim -64 --ffn 8 --layers 1 --heads 8 -o %s", O },
        { "synth --dim 64 --ffn 8 --layers 1 --heads 8 --vocab 0 -o %s", O },
        { "synth --dim 64 --ffn 8 --layers 1 --heads 8 --ctx -1 -o %s", O },
        { "synth --dim 64 --ffn 8 --layers 1 --heads 8 --vocab 3 -o %s", O },
        { "synth --preset stories15M --type q9_9 -o %s", O },
        { "synth --preset nonesuch -o %s", O },
        { "synth --preset tiny -o %s", missq },
        { "synth --preset tiny -o %s", dirq },
        { "synth --preset tiny --vocab-from /dev/null -o %s", O },
        { "synth --preset tiny --vocab-from %s -o %s", dirq, O },
        { "synth --preset tiny" },
        { "synth --preset tiny -o" },
        { "synth --preset tiny --seed abc -o %s", O },
        { "nosuchcommand" },
        { "--nosuchflag" },
    };
    char args[16384];
    for (size_t i = 0; i < sizeof cl / sizeof cl[0]; i++) {
        snprintf(args, sizeof args, cl[i][0], cl[i][1] ? cl[i][1] : "", cl[i][2] ? cl[i][2] : "");
        expect_fail(cl[i][0], args, false);
    }
    /* Valid edge cases: an empty prompt file (BOS alone is a prompt), generation
     * reaching the end of a small context. */
    snprintf(args, sizeof args, "run -m %s -n 2 -f %s", M, emptyq);
    expect_no_crash("empty prompt file", args);
    snprintf(args, sizeof args, "run -m %s -c 16 -n 100 -p 'Once upon a time'", M);
    expect_no_crash("generation up to a 16-token context", args);
    /* No -m at all with a bad flag: the default-model note may precede the error. */
    expect_fail("no -m, bad -n", "run -n abc", true);
    /* A FIFO as -m: opening it for reading would block without a writer; the loader
     * must refuse it as not a regular file. Bounded by timeout anyway. */
    const char *ff = tmp_path("model.fifo");
    remove(ff);
    if (mkfifo(ff, 0600) == 0) {
        snprintf(args, sizeof args, "run -m '%s' -n 2", ff);
        expect_fail("FIFO as -m", args, false);
        snprintf(args, sizeof args, "tokenize -m '%s' hi", ff);
        expect_fail("FIFO as -m (tokenize)", args, false);
        snprintf(args, sizeof args, "run -m '%s' --tokenizer '%s' -n 2",
                 shared_path("models/stories260K.bin"), ff);
        expect_fail("FIFO as --tokenizer (llama2.c)", args, false);
        snprintf(args, sizeof args, "synth --preset tiny --vocab-from '%s' -o %s", ff, O);
        expect_fail("FIFO as --vocab-from", args, false);
        remove(ff);
    }
    /* Each file of a Hugging Face folder as a FIFO (fopen would wait for a writer). */
    const char *files[3] = { "config.json", "model.safetensors", "tokenizer.json" };
    for (int i = 0; i < 3; i++) {
        const char *hd = make_hf("hf_fifo", NULL, NULL, 0, NULL);
        char fp[4300];
        snprintf(fp, sizeof fp, "%s/%s", hd, files[i]);
        remove(fp);
        if (mkfifo(fp, 0600) != 0) continue;
        snprintf(args, sizeof args, "run -m '%s' -n 2", hd);
        expect_fail(files[i], args, false);
        if (i == 2) {
            snprintf(args, sizeof args, "tokenize -m '%s' hi", hd);
            expect_fail(files[i], args, false);
        }
        remove(fp);
    }
    /* A vocabulary-only GGUF where a model is needed. */
    snprintf(args, sizeof args, "run -m '%s' -n 2", shared_path("golden/tokenizer/ggml-vocab-gpt-2.gguf"));
    expect_fail("vocabulary-only GGUF to run", args, false);
    snprintf(args, sizeof args, "logits -m '%s' --tokens 1",
             shared_path("golden/tokenizer/ggml-vocab-llama-spm.gguf"));
    expect_fail("vocabulary-only GGUF to logits", args, false);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void)
{
    struct {
        const char *name;
        void (*fn)(void);
    } parts[] = {
        { "truncation sweeps (in-process)", test_sweeps },
        { "GGUF variants", test_gguf_variants },
        { "GGUF raw patches", test_gguf_raw },
        { "llama2.c", test_llama2c },
        { "Hugging Face folders", test_hf },
        { "command lines", test_cli_args },
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        double t0 = now_s();
        int before = n_launch;
        parts[i].fn();
        printf("%-32s %6.1f s, %d processes\n", parts[i].name, now_s() - t0, n_launch - before);
    }
    printf("%d processes launched\n", n_launch);
    return test_main_end();
}
