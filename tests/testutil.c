/* testutil.c — the test harness (see testutil.h). */
#include "testutil.h"

#include "kvinfer.h"
#include "attention/attention.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "sampling/grammar_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int t_passed, t_failed;

/* The CLI's environment overrides of the CPU paths (KVINFER_ISA=avx2|scalar,
 * KVINFER_AMX=0, KVINFER_AMX_F16=1), applied before a test's main() as `kvinfer`
 * applies them before a command: ctest reruns test_engine and test_golden with
 * them (the library itself reads no environment). */
__attribute__((constructor)) static void tu_apply_env(void)
{
    kvi_cpu_params cp;
    kvi_cpu_params_default(&cp);
    const char *isa = getenv("KVINFER_ISA"), *amx = getenv("KVINFER_AMX"), *f16 = getenv("KVINFER_AMX_F16");
    if (isa && (!strcmp(isa, "avx2") || !strcmp(isa, "scalar"))) cp.isa = isa;
    cp.amx = !(amx && !strcmp(amx, "0"));
    cp.amx_f16 = f16 && !strcmp(f16, "1");
    kvi_cpu_configure(&cp, NULL);
}

int test_main_end(void)
{
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return (t_failed == 0 && t_passed > 0) ? 0 : 1;
}

static const char *rotate(const char *a, const char *b)
{
    static char bufs[8][4096];
    static int k;
    char *p = bufs[k++ & 7];
    snprintf(p, 4096, "%s/%s", a, b);
    return p;
}

const char *shared_path(const char *rel) { return rotate(KVI_SHARED_DIR, rel); }
const char *tmp_path(const char *name) { return rotate(KVI_TMP_DIR, name); }

char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else
            buf = nb;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    int rc = fclose(f);
    return (w == len && rc == 0) ? 0 : -1;
}

cJSON *load_json(const char *path)
{
    char *s = read_file(path, NULL);
    if (!s) return NULL;
    cJSON *j = cJSON_Parse(s);
    free(s);
    return j;
}

char *run_command(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    for (size_t r; s && (r = fread(s + n, 1, cap - n - 1, p)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *more = realloc(s, cap *= 2);
            if (!more) free(s);
            s = more;
        }
    }
    int st = pclose(p);
    if (s) s[n] = 0;
    if (st != 0) {
        free(s);
        return NULL;
    }
    return s;
}

bool npm_ready(const char *node_bin, const char *pkg_json, const char *packages)
{
    struct stat st;
    if (node_bin[0] && stat(pkg_json, &st) == 0) return true;
    printf("SKIP: %s%s (run scripts/deps.sh: npm ci)\n",
           node_bin[0] ? "not installed: " : "node was not found when configuring",
           node_bin[0] ? packages : "");
    return false;
}

int run_kvinfer(const char *args, char **out, char **errout)
{
    static int seq;
    char o[4096], e[4096], cmd[16384];
    int id = (int)getpid() * 1000 + seq++;
    snprintf(o, sizeof o, "%s/run_%d.out", KVI_TMP_DIR, id);
    snprintf(e, sizeof e, "%s/run_%d.err", KVI_TMP_DIR, id);
    snprintf(cmd, sizeof cmd, "'%s' %s </dev/null >'%s' 2>'%s'", KVI_BIN, args, o, e);
    int st = system(cmd);
    int rc;
    if (st == -1)
        rc = -1;
    else if (WIFEXITED(st))
        rc = WEXITSTATUS(st);
    else if (WIFSIGNALED(st))
        rc = 128 + WTERMSIG(st);
    else
        rc = -1;
    if (out) *out = read_file(o, NULL);
    if (errout) *errout = read_file(e, NULL);
    remove(o);
    remove(e);
    return rc;
}

uint64_t trand_u64(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

float trand_uniform(uint64_t *s) { return (float)((trand_u64(s) >> 40) * (1.0 / 16777216.0)); }

float trand_normal(uint64_t *s)
{
    float u1 = trand_uniform(s), u2 = trand_uniform(s);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* A row of trand_weights: a row scale in [0.05, 1.05), every 97th input (from 5 on) 8x larger. */
static void draw_spread(float *row, int64_t n, uint64_t *s)
{
    const float sc = 0.05f + trand_uniform(s);
    for (int64_t i = 0; i < n; i++) row[i] = sc * trand_normal(s) * (i % 97 == 5 ? 8.0f : 1.0f);
}

void trand_fill_normal(float *x, int64_t n, uint64_t *s)
{
    for (int64_t i = 0; i < n; i++) x[i] = trand_normal(s);
}

void trand_quant_row(int type, void *dst, int64_t n, uint64_t *s)
{
    float *row = malloc((size_t)n * sizeof(float));
    if (!row) abort();
    trand_fill_normal(row, n, s);
    quant_quantize_row((kvi_type)type, row, dst, n);
    free(row);
}

/* [n_out][n_in] of the kvinfer type `type` (64-byte aligned when aligned, else
 * plain malloc), row j quantised from the n_in floats draw gives; NULL on failure. */
static uint8_t *quant_rows(int type, int64_t n_out, int64_t n_in, uint64_t *s, bool aligned,
                           void (*draw)(float *, int64_t, uint64_t *))
{
    const kvi_type t = (kvi_type)type;
    const size_t rb = quant_row_bytes(t, n_in);
    uint8_t *w =
        aligned ? aligned_alloc(64, (rb * (size_t)n_out + 63) & ~(size_t)63) : malloc(rb * (size_t)n_out);
    float *row = malloc((size_t)n_in * sizeof(float));
    if (!w || !row) {
        free(w);
        free(row);
        return NULL;
    }
    for (int64_t j = 0; j < n_out; j++) {
        draw(row, n_in, s);
        quant_quantize_row(t, row, w + (size_t)j * rb, n_in);
    }
    free(row);
    return w;
}

uint8_t *trand_weights(int type, int64_t n_out, int64_t n_in, uint64_t *s)
{
    return quant_rows(type, n_out, n_in, s, true, draw_spread);
}

uint8_t *trand_weights_normal(int type, int64_t n_out, int64_t n_in, uint64_t *s)
{
    return quant_rows(type, n_out, n_in, s, false, trand_fill_normal);
}

float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

double abs_dot(const float *x, const float *w, int64_t n)
{
    double mag = 0;
    for (int64_t i = 0; i < n; i++) mag += fabs((double)x[i] * w[i]);
    return mag;
}

double max_abs_diff(const float *a, const float *b, size_t n)
{
    double md = 0;
    for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)a[i] - b[i]));
    return md;
}

int32_t json_token_ids(const cJSON *arr, int32_t *out, int32_t cap)
{
    int32_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        if (n < cap) out[n] = (int32_t)it->valuedouble;
        n++;
    }
    return n;
}

kvi_sampler_params sampler_params(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed)
{
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repeat_penalty = 1.0f;
    p.seed = seed;
    return p;
}

kvi_model *load_stories260k(int *n_vocab)
{
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path("models/stories260K.gguf"), NULL, &err);
    CHECK(m != NULL, "load stories260K: %s", err.msg);
    if (m && n_vocab) *n_vocab = kvi_n_vocab(m);
    return m;
}

kvi_engine_params engine_params(kvi_type kv, int n_threads, int n_seq, int n_ctx)
{
    kvi_engine_params p;
    kvi_engine_params_default(&p);
    p.kv_type_k = p.kv_type_v = kv;
    p.n_threads = n_threads;
    if (n_seq > 0) p.n_seq_max = n_seq;
    p.n_ctx = n_ctx;
    return p;
}

kvi_engine *engine_create_checked(kvi_model *m, const kvi_engine_params *p)
{
    kvi_error err = { 0 };
    kvi_engine *e = kvi_engine_create(m, p, &err);
    CHECK(e != NULL, "engine: %s", err.msg);
    return e;
}

float *seq_logits(kvi_engine *e, const int32_t *toks, int n, bool decode)
{
    const int nv = kvi_n_vocab(kvi_engine_model(e));
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(decode ? 1 : n);
    float *out = malloc((size_t)n * nv * sizeof(float));
    kvi_error err = { 0 };
    if (!decode) {
        for (int i = 0; i < n; i++) kvi_batch_add(b, s, toks[i], i, true);
        CHECK(kvi_step(e, b, &err) == 0, "prefill: %s", err.msg);
        for (int i = 0; i < n; i++)
            memcpy(out + (size_t)i * nv, kvi_logits(e, i), (size_t)nv * sizeof(float));
    } else {
        for (int i = 0; i < n; i++) {
            kvi_batch_clear(b);
            kvi_batch_add(b, s, toks[i], i, true);
            CHECK(kvi_step(e, b, &err) == 0, "decode: %s", err.msg);
            memcpy(out + (size_t)i * nv, kvi_logits(e, 0), (size_t)nv * sizeof(float));
        }
    }
    kvi_batch_free(b);
    kvi_seq_free(s);
    return out;
}

int step_rows(kvi_engine *e, kvi_seq *s, const int32_t *toks, int from, int n, float *last)
{
    kvi_batch *b = kvi_batch_create(n - from);
    for (int i = from; i < n; i++) kvi_batch_add(b, s, toks[i - from], i, i == n - 1);
    kvi_error err = { 0 };
    int rc = kvi_step(e, b, &err);
    CHECK(rc == 0, "step: %s", err.msg);
    if (rc == 0 && last)
        memcpy(last, kvi_logits(e, n - 1 - from), (size_t)kvi_n_vocab(kvi_engine_model(e)) * sizeof(float));
    kvi_batch_free(b);
    return rc;
}

void kv_reserve_seqs(kv_pool *kv, kv_table *t, const int *lens, int n)
{
    memset(t, 0, (size_t)n * sizeof *t);
    kvi_error err = { 0 };
    for (int s = 0; s < n; s++) CHECK(kv_table_reserve(kv, &t[s], lens[s], &err) == 0, "%s", err.msg);
}

int batch_all_positions(const kv_table *t, const int *lens, int n, const kv_table **tabs, int32_t *pos)
{
    int r = 0;
    for (int s = 0; s < n; s++)
        for (int p = 0; p < lens[s]; p++, r++) {
            tabs[r] = &t[s];
            pos[r] = p;
        }
    return r;
}

void attn_rows_part(tpool *pool, attn_scratch *sc, const attn_args *a, int r0, int n, float *out)
{
    attn_args b = *a;
    b.n_rows = n;
    b.tables = a->tables + r0;
    b.pos = a->pos + r0;
    b.q = a->q + (size_t)r0 * a->n_heads * a->head_dim;
    b.out = out;
    attention_rows(pool, sc, &b);
}

float *pair_logits(kvi_model *m, const int32_t *toks, int n)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 2, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    const int nv = kvi_n_vocab(m);
    float *out = malloc((size_t)n * nv * sizeof *out);
    kvi_seq *s0 = kvi_seq_create(e), *s1 = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(2);
    kvi_error err = { 0 };
    int rc = 0;
    for (int i = 0; rc == 0 && i < n + 5; i++) {
        kvi_batch_clear(b);
        if (i >= 5) kvi_batch_add(b, s1, toks[i - 5], i - 5, false);
        if (i < n) kvi_batch_add(b, s0, toks[i], i, true);
        rc = kvi_step(e, b, &err);
        if (rc == 0 && i < n) memcpy(out + (size_t)i * nv, kvi_logits(e, i >= 5 ? 1 : 0), nv * sizeof *out);
    }
    CHECK(rc == 0, "pair step: %s", err.msg);
    kvi_batch_free(b);
    kvi_seq_free(s0);
    kvi_seq_free(s1);
    kvi_engine_free(e);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

bool load_arch_golden(const char *name, kvi_model **m, cJSON **j)
{
    char rel[256], grel[256];
    snprintf(rel, sizeof rel, "golden/arch/%s.gguf", name);
    snprintf(grel, sizeof grel, "golden/arch/%s.logits.json", name);
    kvi_error err = { 0 };
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    *m = kvi_model_load(shared_path(rel), &lp, &err);
    CHECK(*m != NULL, "load %s: %s", rel, err.msg);
    *j = load_json(shared_path(grel));
    CHECK(*j != NULL, "read %s", grel);
    if (*m && *j) return true;
    kvi_model_free(*m);
    cJSON_Delete(*j);
    *m = NULL;
    *j = NULL;
    return false;
}

double golden_rel_err(const char *name, const float *lg, const cJSON *ref, int n, int nv)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        CHECK(cJSON_GetArraySize(r) == nv, "%s: golden row of %d, vocab %d", name, cJSON_GetArraySize(r), nv);
        for (int k = 0; k < nv && k < cJSON_GetArraySize(r); k++) {
            const double bv = cJSON_GetArrayItem(r, k)->valuedouble;
            const double d = lg[(size_t)i * nv + k] - bv;
            num += d * d;
            den += bv * bv;
        }
    }
    return sqrt(num / den);
}

bool grammar_match_exact(const struct kvi_grammar *g, const char *s)
{
    gm_scratch sc;
    gm_scratch_init(&sc);
    gm_state a = { 0 }, b = { 0 };
    gm_state_init(g, &a, &sc);
    bool ok = !a.dead;
    for (size_t i = 0; s[i] && ok; i++) {
        ok = gm_advance_byte(g, &a, (uint8_t)s[i], &b, &sc);
        gm_state t = a;
        a = b;
        b = t;
    }
    ok = ok && gm_state_accepting(&a);
    gm_state_free(&a);
    gm_state_free(&b);
    gm_scratch_free(&sc);
    return ok;
}

bool write_gguf_copy(const char *src, const char *dst, int (*add)(void *w, void *user), void *user)
{
    gguf_ctx *g = NULL;
    kvi_error err = { 0 };
    if (gguf_open(src, false, &g, &err) != 0) return false;
    gguf_writer *w = gguf_writer_create();
    bool ok = w != NULL;
    for (int64_t i = 0; ok && i < gguf_n_kv(g); i++) ok = gguf_writer_copy_kv(w, g, gguf_kv_key(g, i)) == 0;
    ok = ok && add(w, user) == 0;
    for (int64_t i = 0; ok && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        ok = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne) == 0;
    }
    FILE *f = ok ? fopen(dst, "wb") : NULL;
    ok = f && gguf_writer_write_header(w, f, &err) == 0;
    for (int64_t i = 0; ok && i < gguf_n_tensors(g); i++)
        ok = gguf_writer_write_tensor(w, f, i, gguf_tensor_at(g, i)->data, &err) == 0;
    if (f && fclose(f) != 0) ok = false;
    gguf_writer_free(w);
    gguf_close(g);
    return ok;
}
