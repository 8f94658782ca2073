/*
 * test_lora.c — LoRA adapters against llama.cpp (../shared/golden/lora, README there):
 * every golden case (base, one adapter, a scale, two adapters; dense qwen3 and MoE
 * llama-moe; F32 and Q8_0 adapters; the Q8_0 base) within the README's tolerances
 * (F32 adapters on the F32 base < 0.002, otherwise < 0.03), for one prefill step and
 * token by token (the same bits as the prefill); sequences with four different
 * adapters (F32 and Q8_0, attention-only and all matrices, experts on llama-moe), none
 * and two together, their rows interleaved in one batch, each bit-identical to the
 * same sequence alone; the prefix cache keyed by the adapter set; the CLI flags;
 * kvinfer lora-merge (dense and MoE) against the runtime golden; bad adapter files refused with an error naming the fault.
 */
#include "testutil.h"

#include "kvinfer.h"
#include "formats/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_TOK 48

static kvi_lora *load_adapter(kvi_model *m, const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/lora/%s", file);
    kvi_error err = { 0 };
    kvi_lora *a = kvi_lora_load(m, shared_path(rel), &err);
    CHECK(a != NULL, "%s: %s", file, err.msg);
    return a;
}

/* Logits [n][nv] of toks on a new sequence of an engine that owns the adapters
 * golden/lora/files[i] at scales[i] (new sequences take them): one prefill step, or
 * one row a step with decode (seq_logits). */
static float *lora_logits(kvi_model *m, const int32_t *toks, int n, int na, const char *const *files,
                          const float *scales, bool decode)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 1, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    bool ok = true;
    for (int i = 0; i < na; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "golden/lora/%s", files[i]);
        kvi_error err = { 0 };
        ok &= kvi_engine_lora_load(e, shared_path(rel), scales[i], &err) == i;
        CHECK(ok, "%s: %s", files[i], err.msg);
    }
    float *out = ok ? seq_logits(e, toks, n, decode) : NULL;
    kvi_engine_free(e);
    return out;
}

/* One golden: golden/lora/<name>.logits.json on base model m */
static void check_golden_as(kvi_model *m, const char *name, double tol, bool apply)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/lora/%s.logits.json", name);
    cJSON *j = load_json(shared_path(rel));
    CHECK(j != NULL, "%s missing", rel);
    if (!j) return;
    int32_t toks[N_TOK];
    const int n = json_token_ids(cJSON_GetObjectItem(j, "tokens"), toks, N_TOK);
    const cJSON *ads = cJSON_GetObjectItem(j, "adapters");
    const char *files[KVI_LORA_SET_MAX];
    float sc[KVI_LORA_SET_MAX];
    int na = 0;
    for (int i = 0; apply && ads && i < cJSON_GetArraySize(ads) && na < KVI_LORA_SET_MAX; i++, na++) {
        const cJSON *it = cJSON_GetArrayItem(ads, i);
        files[na] = cJSON_GetObjectItem(it, "file")->valuestring;
        sc[na] = (float)cJSON_GetObjectItem(it, "scale")->valuedouble;
    }
    const int nv = kvi_n_vocab(m);
    float *pre = lora_logits(m, toks, n, na, files, sc, false);
    float *dec = lora_logits(m, toks, n, na, files, sc, true);
    if (pre) {
        const double e = golden_rel_err(name, pre, cJSON_GetObjectItem(j, "logits"), n, nv);
        CHECK(e < tol, "%s: relative error %.4g >= %.3g", name, e, tol);
        printf("%-34s relative error vs llama.cpp %.6f (tolerance %.3f)\n", name, e, tol);
    }
    CHECK(pre && dec && !memcmp(pre, dec, (size_t)n * nv * sizeof *pre), "%s: decode differs from prefill",
          name);
    free(pre);
    free(dec);
    cJSON_Delete(j);
}

static void check_golden(kvi_model *m, const char *name, double tol) { check_golden_as(m, name, tol, true); }

/* Six sequences: no adapter, each of the four adapter files of model mname (attention
 * and all-matrix adapters, F32 and Q8_0) alone at its own scale, and two together;
 * their rows interleaved in one batch (sequence q offset by q), each against the same
 * sequence alone. */
#define MIX 6
static void check_mixed(kvi_model *m, const char *mname)
{
    char f[4][128];
    static const char *const kinds[4] = { "attn-r4-f32", "all-r8-q8_0", "attn-r4-q8_0", "all-r8-f32" };
    kvi_lora *ad[4];
    for (int i = 0; i < 4; i++) {
        snprintf(f[i], sizeof f[i], "%s-lora-%s.gguf", mname, kinds[i]);
        if (!(ad[i] = load_adapter(m, f[i]))) return;
    }
    const int use[MIX][2] = { { -1, -1 }, { 0, -1 }, { 1, -1 }, { 2, -1 }, { 3, -1 }, { 0, 1 } };
    const float scales[MIX][2] = { { 0, 0 }, { 0.5f, 0 }, { 1, 0 }, { 2, 0 }, { 0.75f, 0 }, { 1, 0.25f } };
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++) toks[i] = (int32_t)((i * 37 + 11) % kvi_n_vocab(m));
    const int nv = kvi_n_vocab(m);
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, MIX, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    kvi_seq *s[MIX];
    int nset[MIX];
    for (int q = 0; q < MIX; q++) {
        kvi_lora *set[2];
        nset[q] = 0;
        for (int k = 0; k < 2; k++)
            if (use[q][k] >= 0) set[nset[q]++] = ad[use[q][k]];
        s[q] = kvi_seq_create(e);
        CHECK(kvi_seq_set_lora(s[q], nset[q], set, scales[q]) == 0, "set");
    }
    CHECK(kvi_lora_free(ad[0]) == KVI_E_INVALID, "an adapter in use cannot be freed");
    kvi_batch *b = kvi_batch_create(MIX * N_TOK);
    /* sequence q holds toks[q .. N_TOK); rows interleaved: position i of every sequence */
    for (int i = 0; i < N_TOK; i++)
        for (int q = 0; q < MIX; q++)
            if (q + i < N_TOK) kvi_batch_add(b, s[q], toks[q + i], i, true);
    kvi_error err = { 0 };
    CHECK(kvi_step(e, b, &err) == 0, "mixed step: %s", err.msg);
    bool same = true;
    for (int q = 0; q < MIX; q++) {
        const char *files[2] = { NULL, NULL };
        for (int k = 0; k < nset[q]; k++) files[k] = f[use[q][k]];
        float *alone = lora_logits(m, toks + q, N_TOK - q, nset[q], files, scales[q], false);
        if (!alone) continue;
        int row = 0;
        for (int i = 0; i < N_TOK; i++)
            for (int qq = 0; qq < MIX; qq++) {
                if (qq + i >= N_TOK) continue;
                if (qq == q)
                    same &= !memcmp(kvi_logits(e, row), alone + (size_t)i * nv, (size_t)nv * sizeof(float));
                row++;
            }
        free(alone);
    }
    CHECK(same, "%s: rows of different adapters in one batch differ from each alone", mname);
    printf("%s: 4 adapters (+ none, + two together) interleaved in one batch == each alone: %s\n", mname,
           same ? "yes" : "NO");
    kvi_batch_free(b);
    for (int q = 0; q < MIX; q++) kvi_seq_free(s[q]);
    kvi_engine_free(e);
    for (int i = 0; i < 4; i++) CHECK(kvi_lora_free(ad[i]) == 0, "free after use");
}

static void check_models(const char *mname, const char *base, double tol_base)
{
    char rel[128];
    snprintf(rel, sizeof rel, "golden/arch/%s.gguf", base);
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path(rel), NULL, &err);
    CHECK(m != NULL, "%s: %s", rel, err.msg);
    if (!m) return;
    static const char *const cases[] = {
        "base",      "A-f32.s1",    "A-f32.s0.5",           "B-f32.s1", "A-f32.s1+B-f32.s0.5",
        "A-q8_0.s1", "A-q8_0.s0.5", "A-q8_0.s1+B-q8_0.s0.5"
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s.%s", mname, cases[i]);
        check_golden(m, name, strstr(cases[i], "q8_0") ? 0.03 : tol_base);
    }
    check_mixed(m, mname);
    kvi_model_free(m);
}

/* A refused adapter: kvi_lora_load fails with a message containing want. */
static void expect_refused(kvi_model *m, const char *path, const char *want, const char *what)
{
    kvi_error err = { 0 };
    kvi_lora *a = kvi_lora_load(m, path, &err);
    CHECK(a == NULL && strstr(err.msg, want), "%s: want an error with '%s', got '%s'", what, want, err.msg);
    if (a) kvi_lora_free(a);
}

/* Writes an adapter with one pair for blk.0.<mat>.weight, A {n_in, r}, B {r, n_out}, F32. */
static bool write_adapter(const char *path, const char *arch, const char *type, const char *mat, int64_t n_in,
                          int64_t r, int64_t n_out)
{
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", arch);
    if (type) gguf_writer_set_str(w, "general.type", type);
    gguf_writer_set_str(w, "adapter.type", "lora");
    gguf_writer_set_f32(w, "adapter.lora.alpha", 8.0f);
    char na[128], nb[128];
    snprintf(na, sizeof na, "blk.0.%s.weight.lora_a", mat);
    snprintf(nb, sizeof nb, "blk.0.%s.weight.lora_b", mat);
    const int64_t nea[2] = { n_in, r }, neb[2] = { r, n_out };
    gguf_writer_add_tensor(w, na, KVI_TYPE_F32, 2, nea);
    gguf_writer_add_tensor(w, nb, KVI_TYPE_F32, 2, neb);
    float *z = calloc((size_t)(n_in > n_out ? n_in : n_out) * (size_t)r, sizeof *z);
    FILE *f = fopen(path, "wb");
    kvi_error err = { 0 };
    bool ok = f && z && gguf_writer_write_header(w, f, &err) == 0 &&
              gguf_writer_write_tensor(w, f, 0, z, &err) == 0 &&
              gguf_writer_write_tensor(w, f, 1, z, &err) == 0;
    if (f) fclose(f);
    free(z);
    gguf_writer_free(w);
    CHECK(ok, "write %s: %s", path, err.msg);
    return ok;
}

static void check_refusals(void)
{
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path("golden/arch/qwen3-f32.gguf"), NULL, &err);
    CHECK(m != NULL, "qwen3: %s", err.msg);
    if (!m) return;
    expect_refused(m, shared_path("golden/lora/llama-moe-lora-attn-r4-f32.gguf"), "arch mismatch",
                   "wrong arch");
    expect_refused(m, shared_path("golden/arch/qwen3-f32.gguf"), "general.type", "a model, not an adapter");
    const int dim = 64; /* qwen3's golden width; attn_q is {dim, n_heads * head_dim} */
    (void)dim;
    const char *p = tmp_path("lora_bad_shape.gguf");
    if (write_adapter(p, "qwen3", "adapter", "attn_q", 96, 4, 64))
        expect_refused(m, p, "incorrect shape", "wrong shape");
    p = tmp_path("lora_bad_name.gguf");
    if (write_adapter(p, "qwen3", "adapter", "attn_nothing", 64, 4, 64))
        expect_refused(m, p, "does not exist in base model", "unknown matrix");
    p = tmp_path("lora_no_type.gguf");
    if (write_adapter(p, "qwen3", NULL, "attn_q", 64, 4, 64))
        expect_refused(m, p, "general.type", "no general.type");
    /* every truncation of a real adapter file is refused cleanly */
    size_t len = 0;
    char *buf = read_file(shared_path("golden/lora/qwen3-lora-attn-r4-q8_0.gguf"), &len);
    CHECK(buf != NULL, "read adapter");
    bool all = true;
    for (size_t cut = 0; buf && cut < len; cut += cut < 4096 ? 97 : 1531) {
        const char *tp = tmp_path("lora_trunc.gguf");
        write_file(tp, buf, cut);
        kvi_error e2 = { 0 };
        kvi_lora *a = kvi_lora_load(m, tp, &e2);
        all &= a == NULL && e2.msg[0] != '\0';
        if (a) kvi_lora_free(a);
    }
    CHECK(all, "a truncated adapter file must be refused with a message");
    free(buf);
    kvi_model_free(m);
}

/* The engine's own adapters (default scales for new sequences) and the prefix cache
 * keyed by the adapter set: a prefix cached under adapter A is reused by a sequence
 * with A, never by one without it or with another scale. */
static void check_engine_adapters(void)
{
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(shared_path("golden/arch/qwen3-f32.gguf"), NULL, &err);
    CHECK(m != NULL, "qwen3: %s", err.msg);
    if (!m) return;
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 2, 0);
    p.kv_block_size = 16;
    kvi_engine *e = engine_create_checked(m, &p);
    const int id =
        kvi_engine_lora_load(e, shared_path("golden/lora/qwen3-lora-attn-r4-f32.gguf"), 1.0f, &err);
    CHECK(id == 0 && kvi_engine_lora_count(e) == 1, "engine load: %s", err.msg);
    CHECK(kvi_engine_lora_load(e, shared_path("golden/arch/qwen3-f32.gguf"), 1.0f, &err) < 0, "bad load");
    int32_t toks[N_TOK];
    for (int i = 0; i < N_TOK; i++) toks[i] = (int32_t)(i * 7 + 3);
    kvi_seq *s = kvi_seq_create(e); /* starts with adapter 0 at scale 1 */
    CHECK(kvi_seq_lora_hash(s) != 0, "default set applied");
    CHECK(step_rows(e, s, toks, 0, N_TOK, NULL) == 0, "run");
    kvi_seq_free(s);
    s = kvi_seq_create(e);
    CHECK(kvi_seq_reuse_prefix(s, toks, N_TOK) == 32, "same adapter: the cached prefix is reused");
    kvi_seq_free(s);
    const float half = 0.5f;
    s = kvi_seq_create(e);
    CHECK(kvi_seq_set_lora_scales(s, 1, &half) == 0, "set scales");
    CHECK(kvi_seq_reuse_prefix(s, toks, N_TOK) == 0, "another scale: no reuse");
    kvi_seq_free(s);
    CHECK(kvi_engine_lora_set_scale(e, 0, 0.0f) == 0, "off");
    s = kvi_seq_create(e);
    CHECK(kvi_seq_lora_hash(s) == 0, "no adapter");
    CHECK(kvi_seq_reuse_prefix(s, toks, N_TOK) == 0, "no adapter: no reuse");
    kvi_seq_free(s);
    kvi_engine_free(e);
    kvi_model_free(m);
}

/* `kvinfer logits --json` with LoRA flags against golden/lora/<golden>; args: the flags */
static void check_cli(const char *golden, const char *flags)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/lora/%s.logits.json", golden);
    cJSON *j = load_json(shared_path(rel));
    if (!j) return;
    int32_t toks[N_TOK];
    const int n = json_token_ids(cJSON_GetObjectItem(j, "tokens"), toks, N_TOK);
    char ids[1024] = "", args[4096];
    for (int i = 0; i < n; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", toks[i]);
    snprintf(args, sizeof args, "logits --json --kv-type f32 -m %s --tokens %s %s",
             shared_path("golden/arch/qwen3-f32.gguf"), ids, flags);
    char *out = NULL, *errout = NULL;
    const int rc = run_kvinfer(args, &out, &errout);
    CHECK(rc == 0, "kvinfer %s: %s", flags, errout ? errout : "");
    cJSON *o = rc == 0 && out ? cJSON_Parse(out) : NULL;
    const cJSON *lg = o ? cJSON_GetObjectItem(o, "logits") : NULL;
    if (lg && cJSON_GetArraySize(lg) == n) {
        const int nv = cJSON_GetArraySize(cJSON_GetArrayItem(lg, 0));
        float *v = malloc((size_t)n * nv * sizeof *v);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nv; k++)
                v[(size_t)i * nv + k] = (float)cJSON_GetArrayItem(cJSON_GetArrayItem(lg, i), k)->valuedouble;
        const double e = golden_rel_err(golden, v, cJSON_GetObjectItem(j, "logits"), n, nv);
        CHECK(e < 0.002, "cli %s: relative error %.4g", flags, e);
        printf("kvinfer logits %-60s vs %s: %.6f\n", flags, golden, e);
        free(v);
    } else {
        CHECK(false, "cli %s: no logits", flags);
    }
    cJSON_Delete(o);
    cJSON_Delete(j);
    free(out);
    free(errout);
}

static void check_cli_all(void)
{
    char a[512], b[512], f[1200];
    snprintf(a, sizeof a, "%s", shared_path("golden/lora/qwen3-lora-attn-r4-f32.gguf"));
    snprintf(b, sizeof b, "%s", shared_path("golden/lora/qwen3-lora-all-r8-f32.gguf"));
    snprintf(f, sizeof f, "--lora %s", a);
    check_cli("qwen3.A-f32.s1", f);
    snprintf(f, sizeof f, "--lora-scaled %s 0.5", a);
    check_cli("qwen3.A-f32.s0.5", f);
    snprintf(f, sizeof f, "--lora-scaled %s:1,%s:0.5", a, b);
    check_cli("qwen3.A-f32.s1+B-f32.s0.5", f);
    snprintf(f, sizeof f, "--lora %s --lora-scaled %s:0.5", a, b);
    check_cli("qwen3.A-f32.s1+B-f32.s0.5", f);
    char args[2048], *out = NULL, *errout = NULL;
    snprintf(args, sizeof args, "logits -m %s --tokens 1,2,3 --lora %s",
             shared_path("golden/arch/qwen3-f32.gguf"),
             shared_path("golden/lora/llama-moe-lora-attn-r4-f32.gguf"));
    const int rc = run_kvinfer(args, &out, &errout);
    CHECK(rc == 1 && errout && strstr(errout, "arch mismatch"), "cli: a wrong adapter is refused: %s",
          errout ? errout : "");
    free(out);
    free(errout);
}

/* kvinfer lora-merge of base + A (1) + B (0.5), the merged matrices as type (NULL: the
 * default, F32): the merged model's logits against llama.cpp's runtime-adapter golden
 * within tol (the F32 tolerance, or the README's for the quantised type). */
static void check_merge(const char *mname, const char *type, double tol)
{
    char args[2048], out_name[64], golden[128];
    snprintf(out_name, sizeof out_name, "lora_merged_%s_%s.gguf", mname, type ? type : "default");
    const char *out = tmp_path(out_name);
    char base[512], fa[512];
    snprintf(base, sizeof base, "golden/arch/%s-f32.gguf", mname);
    snprintf(fa, sizeof fa, "golden/lora/%s-lora-attn-r4-f32.gguf", mname);
    snprintf(args, sizeof args, "lora-merge -m %s --lora %s", shared_path(base), shared_path(fa));
    snprintf(fa, sizeof fa, "golden/lora/%s-lora-all-r8-f32.gguf", mname);
    snprintf(args + strlen(args), sizeof args - strlen(args), " --lora-scaled %s 0.5 -o %s", shared_path(fa),
             out);
    if (type) snprintf(args + strlen(args), sizeof args - strlen(args), " --type %s", type);
    char *o = NULL, *e = NULL;
    const int rc = run_kvinfer(args, &o, &e);
    CHECK(rc == 0, "lora-merge: %s", e ? e : "");
    free(o);
    free(e);
    kvi_error err = { 0 };
    kvi_model *m = rc == 0 ? kvi_model_load(out, NULL, &err) : NULL;
    CHECK(m != NULL, "merged model: %s", err.msg);
    if (!m) return;
    snprintf(golden, sizeof golden, "%s.A-f32.s1+B-f32.s0.5", mname);
    check_golden_as(m, golden, tol, false); /* the adapters are in the weights */
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    CHECK(!type || strcmp(type, "q8_0") || info.weight_type == KVI_TYPE_Q8_0,
          "lora-merge --type q8_0: the merged model's matrices are %s", kvi_type_name(info.weight_type));
    kvi_model_free(m);
}

/* How far Q8_0 weights alone move model mname's logits in llama.cpp's own goldens
 * (golden/arch/<m>-q8_0 against <m>-f32): the floor a merged Q8_0 file sits on. */
static double q8_floor(const char *mname)
{
    char a[128], b[128];
    snprintf(a, sizeof a, "golden/arch/%s-f32.logits.json", mname);
    snprintf(b, sizeof b, "golden/arch/%s-q8_0.logits.json", mname);
    cJSON *ja = load_json(shared_path(a)), *jb = load_json(shared_path(b));
    const cJSON *la = cJSON_GetObjectItem(ja, "logits"), *lb = cJSON_GetObjectItem(jb, "logits");
    const int n = cJSON_GetArraySize(lb), nv = n > 0 ? cJSON_GetArraySize(cJSON_GetArrayItem(lb, 0)) : 0;
    float *f = n > 0 && nv > 0 ? malloc((size_t)n * nv * sizeof *f) : NULL;
    for (int i = 0; f && i < n; i++)
        for (int v = 0; v < nv; v++)
            f[(size_t)i * nv + v] = (float)cJSON_GetArrayItem(cJSON_GetArrayItem(lb, i), v)->valuedouble;
    const double e = f && la ? golden_rel_err(b, f, la, n, nv) : 1.0;
    CHECK(f && la && e < 0.1, "%s / %s: cannot compare (%.3g)", a, b, e);
    free(f);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return e;
}

int main(void)
{
    check_merge("qwen3", NULL, 0.002);
    check_merge("llama-moe", NULL, 0.002);
    /* quantised merges: Q8_0's tolerance (0.03), or 1.25 x what Q8_0 alone does to the model
     * in llama.cpp's goldens where that is more (qwen3: 0.028) */
    const double fq = 1.25 * q8_floor("qwen3");
    check_merge("qwen3", "q8_0", fq > 0.03 ? fq : 0.03);
    check_merge("llama-moe", "q8_0", 0.03);
    check_merge("qwen3", "base", 0.002); /* an F32 base stays F32 */
    { /* a type the rows cannot hold is refused before anything is written */
        char args[1024], *o = NULL, *e = NULL;
        snprintf(args, sizeof args, "lora-merge -m %s --lora %s --type q4_k -o %s",
                 shared_path("golden/arch/qwen3-f32.gguf"), shared_path("golden/lora/qwen3-lora-attn-r4-f32.gguf"),
                 tmp_path("lora_merged_bad.gguf"));
        const int rc = run_kvinfer(args, &o, &e);
        CHECK(rc == 1 && e && strstr(e, "cannot be stored as"), "lora-merge --type q4_k on rows of 64: %s",
              e ? e : "");
        free(o);
        free(e);
    }
    check_cli_all();
    check_engine_adapters();
    check_refusals();
    check_models("qwen3", "qwen3-f32", 0.002);
    check_models("llama-moe", "llama-moe-f32", 0.002);
    { /* the Q8_0 base with an F32 adapter */
        kvi_error err = { 0 };
        kvi_model *m = kvi_model_load(shared_path("golden/arch/qwen3-q8_0.gguf"), NULL, &err);
        CHECK(m != NULL, "qwen3-q8_0: %s", err.msg);
        if (m) check_golden(m, "qwen3-q8_0.A-f32.s1", 0.03);
        kvi_model_free(m);
    }
    return test_main_end();
}
