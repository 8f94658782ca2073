/*
 * test_synth_arch.c — `kvinfer synth` for every architecture the loader runs.
 *
 *  - golden layout: for qwen3, gemma2, gemma3, phi3, phi3 with LongRoPE, granite,
 *    olmo2, the mixtures of experts, the hybrids and mistral3, smollm3, seed_oss,
 *    apertus, exaone4 (64 layers), cohere2, synth's F32 file of the shape of ../shared/golden/arch/ARCH-f32.gguf
 *    (written by the golden's generator in llama.cpp's conventions) carries exactly
 *    that file's metadata keys (tokenizer.* and general.name aside) with the same
 *    value types and, for the shape keys, the same values, and exactly its tensors
 *    with the same dims;
 *  - every architecture x every weight type synth writes: the file loads, the
 *    loaded model has the fields the architecture implies (window layers by the
 *    pattern worked out here, RoPE sets, norms, biases, tied output, scales) and
 *    one step over 8 rows gives finite, varying logits; in F32 the 8 rows run as
 *    one prefill and as 8 decode steps give the same bits; exaone4 also with 64
 *    layers, where its windows and NoPE layers exist;
 *  - llama4 and gemma4 (test_t3): the golden files' keys (llama4: and tensors, Llama
 *    3 factors), at golden size in four weight types: loads with the layer fields
 *    of the architecture, runs, prefill == decode; their real-shape presets;
 *  - the presets of real models against their config.json values (typed in here),
 *    the q4_k_m mix's per-layer types against llama.cpp's use_more_bits rule
 *    worked out by hand, LongRoPE's attention factor, and --help.
 */
#include "testutil.h"

#include "formats/gguf.h"
#include "kvinfer.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_archs[] = { "llama",   "qwen2",    "qwen3",    "gemma2",  "gemma3",  "phi3",
                                       "granite", "olmo2",    "qwen3moe", "olmoe",   "gpt-oss", "mistral3",
                                       "smollm3", "seed_oss", "apertus",  "exaone4", "cohere2" };
#define N_ARCHS (int)(sizeof k_archs / sizeof k_archs[0])

/* ---- the golden files' layout ---- */

/* keys whose values must match (the shape); other keys are compared by type only */
static bool value_key(const char *k)
{
    static const char *const suffix[] = {
        ".context_length",
        ".embedding_length",
        ".block_count",
        ".feed_forward_length",
        ".attention.head_count",
        ".attention.head_count_kv",
        ".attention.key_length",
        ".attention.value_length",
        ".rope.dimension_count",
        ".rope.freq_base",
        ".attention.sliding_window",
        ".attention.layer_norm_rms_epsilon",
        ".rope.scaling.factor",
        ".rope.scaling.attn_factor",
        ".rope.scaling.original_context_length",
        ".attention.scale",
        ".embedding_scale",
        ".residual_scale",
        ".logit_scale",
        "general.architecture",
        "general.file_type",
        ".ssm.conv_kernel",
        ".ssm.state_size",
        ".ssm.group_count",
        ".ssm.time_step_rank",
        ".ssm.inner_size",
        ".full_attention_interval",
        ".expert_count",
        ".expert_used_count",
        ".expert_feed_forward_length",
        ".expert_shared_feed_forward_length",
    };
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        size_t n = strlen(k), m = strlen(suffix[i]);
        if (n >= m && !strcmp(k + n - m, suffix[i])) return true;
    }
    return false;
}

/* Same key sets (one way: every key of a is in b) with types and shape values. */
static void keys_in(const char *what, const gguf_ctx *a, const gguf_ctx *b, bool values)
{
    for (int64_t i = 0; i < gguf_n_kv(a); i++) {
        const char *k = gguf_kv_key(a, i);
        if (!strncmp(k, "tokenizer.", 10) || !strcmp(k, "general.name")) continue;
        const int64_t j = gguf_find_key(b, k);
        CHECK(j >= 0, "%s: key %s missing", what, k);
        if (j < 0) continue;
        CHECK(gguf_kv_type(a, i) == gguf_kv_type(b, j), "%s: key %s type %d vs %d", what, k,
              (int)gguf_kv_type(a, i), (int)gguf_kv_type(b, j));
        if (!values || !value_key(k)) continue;
        int64_t ia = 0, ib = 0;
        double fa = 0, fb = 0;
        const char *sa = gguf_get_str(a, k), *sb = gguf_get_str(b, k);
        if (sa || sb) {
            CHECK(sa && sb && !strcmp(sa, sb), "%s: %s '%s' vs '%s'", what, k, sa ? sa : "", sb ? sb : "");
        } else if (gguf_get_int(a, k, &ia, NULL) == 0) {
            CHECK(gguf_get_int(b, k, &ib, NULL) == 0 && ia == ib, "%s: %s %lld vs %lld", what, k,
                  (long long)ia, (long long)ib);
        } else if (gguf_get_float(a, k, &fa, NULL) == 0) {
            CHECK(gguf_get_float(b, k, &fb, NULL) == 0 && (float)fa == (float)fb, "%s: %s %.9g vs %.9g", what,
                  k, fa, fb);
        }
    }
}

static void compare_golden(const char *golden, kvi_synth_params p)
{
    char rel[128], out[128];
    snprintf(rel, sizeof rel, "golden/arch/%s-f32.gguf", golden);
    snprintf(out, sizeof out, "synth_arch_%s.gguf", golden);
    const char *path = tmp_path(out);
    kvi_error err = { 0 };
    p.type = KVI_TYPE_F32;
    p.seed = 3;
    p.vocab_from = shared_path("models/stories260K.gguf");
    p.name = "golden-shape";
    int rc = kvi_synth_write(&p, path, &err);
    CHECK(rc == 0, "%s: synth %d %s", golden, rc, err.msg);
    gguf_ctx *a = NULL, *b = NULL;
    CHECK(gguf_open(shared_path(rel), false, &a, &err) == 0, "%s: %s", rel, err.msg);
    CHECK(rc == 0 && gguf_open(path, false, &b, &err) == 0, "%s: %s", path, err.msg);
    if (a && b) {
        keys_in(golden, a, b, true);
        keys_in(golden, b, a, false); /* no key the golden lacks */
        CHECK(gguf_n_tensors(a) == gguf_n_tensors(b), "%s: %lld tensors vs %lld", golden,
              (long long)gguf_n_tensors(a), (long long)gguf_n_tensors(b));
        for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
            const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_find_tensor(b, ta->name);
            CHECK(tb != NULL, "%s: tensor %s missing", golden, ta->name);
            if (!tb) continue;
            CHECK(ta->n_dims == tb->n_dims && ta->ne[0] == tb->ne[0] && ta->ne[1] == tb->ne[1] &&
                      ta->ne[2] == tb->ne[2] && ta->type == tb->type,
                  "%s: %s dims %u [%lld %lld] type %d vs %u [%lld %lld] type %d", golden, ta->name,
                  ta->n_dims, (long long)ta->ne[0], (long long)ta->ne[1], (int)ta->type, tb->n_dims,
                  (long long)tb->ne[0], (long long)tb->ne[1], (int)tb->type);
        }
    }
    if (a) gguf_close(a);
    if (b) gguf_close(b);
}

static kvi_synth_params shape(const char *arch, int dim, int layers, int heads, int kv, int head_dim, int ffn)
{
    return (kvi_synth_params){ .arch = arch,
                               .dim = dim,
                               .ffn_dim = ffn,
                               .n_layers = layers,
                               .n_heads = heads,
                               .n_kv_heads = kv,
                               .head_dim = head_dim,
                               .n_vocab = 300,
                               .n_ctx = 512 };
}

/* The shapes of ../shared/golden/arch/README.md's table, with each file's keys. */
static void test_golden_layout(void)
{
    kvi_synth_params p = shape("qwen3", 128, 4, 4, 2, 64, 192);
    compare_golden("qwen3", p);
    p = shape("gemma3", 128, 7, 4, 1, 64, 128);
    p.window = 8;
    p.rope_linear = 8.0f;
    compare_golden("gemma3", p);
    p = shape("gemma2", 128, 4, 4, 2, 64, 192);
    p.window = 8;
    compare_golden("gemma2", p);
    p = shape("phi3", 128, 4, 4, 2, 0, 256);
    p.window = 2047;
    compare_golden("phi3", p);
    p = shape("phi3", 128, 4, 4, 2, 0, 256);
    p.window = 262144;
    p.n_rot = 24;
    p.tie = 1;
    p.rope_orig_ctx = 32;
    compare_golden("phi3-longrope", p);
    p = shape("granite", 128, 4, 4, 2, 0, 256);
    compare_golden("granite", p);
    p = shape("olmo2", 128, 4, 4, 2, 0, 256);
    compare_golden("olmo2", p);
    /* mixtures of experts: 8 (olmoe 16) experts of width 32 */
    p = shape("qwen3moe", 256, 4, 4, 2, 64, 128);
    p.n_expert = 8, p.n_expert_used = 2, p.expert_ffn = 32;
    compare_golden("qwen3moe", p);
    p = shape("llama", 256, 4, 4, 2, 0, 32);
    p.n_expert = 8, p.n_expert_used = 2;
    compare_golden("llama-moe", p);
    p = shape("olmoe", 256, 4, 4, 4, 0, 32);
    p.n_expert = 16, p.n_expert_used = 4;
    compare_golden("olmoe", p);
    p = shape("gpt-oss", 256, 4, 4, 2, 64, 32);
    p.n_expert = 8, p.n_expert_used = 4, p.expert_ffn = 32, p.window = 8, p.rope_orig_ctx = 128;
    compare_golden("gpt-oss", p);
    /* hybrids: DeltaNet 2 key / 4 value heads of 32, attention every 4th layer */
    p = shape("qwen35", 128, 8, 4, 2, 64, 256);
    p.n_rot = 16, p.ssm_groups = 2, p.ssm_heads = 4, p.ssm_state = 32, p.tie = -1;
    compare_golden("qwen35", p);
    p = shape("qwen3next", 128, 8, 4, 2, 64, 128);
    p.n_rot = 16, p.ssm_groups = 2, p.ssm_heads = 4, p.ssm_state = 32;
    p.n_expert = 8, p.n_expert_used = 2, p.expert_ffn = 64, p.shared_ffn = 128;
    compare_golden("qwen3next", p);
    /* more dense architectures (README-dense-t3.md) */
    p = shape("mistral3", 64, 4, 4, 2, 32, 64);
    p.tie = 1, p.rope_orig_ctx = 8, p.rope_linear = 16.0f;
    compare_golden("mistral3", p);
    p = shape("smollm3", 64, 4, 4, 1, 0, 96);
    compare_golden("smollm3", p);
    p = shape("seed_oss", 64, 4, 4, 2, 32, 64);
    compare_golden("seed_oss", p);
    p = shape("apertus", 64, 4, 4, 2, 0, 128);
    compare_golden("apertus", p);
    p = shape("exaone4", 32, 64, 2, 1, 0, 32);
    p.window = 8;
    compare_golden("exaone4", p);
    p = shape("cohere2", 64, 4, 2, 1, 0, 96);
    p.window = 8;
    compare_golden("cohere2", p);
    /* issue 36's mixtures of experts (README-moe-t3.md): dim 64, 8 experts of 32 */
    static const struct {
        const char *arch;
        int layers, heads, kv, head_dim, ffn, n_rot, used, window;
    } t3[] = { { "glm4moe", 3, 4, 2, 32, 128, 16, 3, 0 },    { "minimax-m2", 4, 4, 2, 32, 32, 16, 2, 0 },
               { "hunyuan-moe", 3, 2, 1, 0, 32, 0, 2, 0 },   { "ernie4_5-moe", 3, 4, 2, 16, 128, 0, 3, 0 },
               { "bailingmoe2", 3, 4, 2, 16, 128, 8, 2, 0 }, { "afmoe", 4, 4, 2, 0, 128, 0, 2, 8 } };
    for (size_t i = 0; i < sizeof t3 / sizeof t3[0]; i++) {
        p = shape(t3[i].arch, 64, t3[i].layers, t3[i].heads, t3[i].kv, t3[i].head_dim, t3[i].ffn);
        p.n_rot = t3[i].n_rot, p.window = t3[i].window;
        p.n_expert = 8, p.n_expert_used = t3[i].used, p.expert_ffn = 32;
        compare_golden(t3[i].arch, p);
    }
    p = shape("qwen35moe", 64, 4, 4, 2, 32, 64);
    p.n_rot = 8, p.ssm_groups = 2, p.ssm_heads = 4, p.ssm_state = 16;
    p.n_expert = 8, p.n_expert_used = 2, p.expert_ffn = 32, p.shared_ffn = 64;
    compare_golden("qwen35moe", p);
}

/* ---- every architecture x every type: load and run ---- */

/* Checks the loaded model's fields against what arch implies for p (resolved). */
static void check_fields(const char *what, const struct kvi_model *m, const kvi_synth_params *r)
{
    CHECK(!strcmp(m->arch, r->arch), "%s: arch %s", what, m->arch);
    CHECK(m->head_dim == r->head_dim && m->n_rot == r->n_rot && m->n_kv_heads == r->n_kv_heads,
          "%s: head_dim %d", what, m->head_dim);
    const bool tied = r->tie > 0;
    CHECK((m->output.data == m->tok_embd.data) == tied, "%s: tied %d", what, (int)tied);
    const bool gemma = !strcmp(r->arch, "gemma2") || !strcmp(r->arch, "gemma3");
    const bool oss = !strcmp(r->arch, "gpt-oss");
    /* period 4 windows: cohere2 always, exaone4 only with 64 layers (llama.cpp's rule) */
    const bool p4 = !strcmp(r->arch, "cohere2") || (!strcmp(r->arch, "exaone4") && r->n_layers == 64);
    const bool exa = !strcmp(r->arch, "exaone4");
    int n_local = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        /* gemma2: even layers local; gemma3: 5 local : 1 global */
        const int period = !strcmp(r->arch, "gemma2") || oss ? 2 : 6;
        const bool local = ((gemma || oss) && l % period < period - 1) || (p4 && l % 4 < 3);
        n_local += local;
        CHECK(L->window == (local ? r->window : 0), "%s: layer %d window %d", what, l, L->window);
        CHECK((L->attn_norm != NULL) == (strcmp(r->arch, "olmo2") != 0 && !exa), "%s: attn_norm", what);
        CHECK((L->post_attn_norm != NULL) == (gemma || !strcmp(r->arch, "olmo2") || exa), "%s: post norm",
              what);
        const bool qk = !strcmp(r->arch, "qwen3") || !strcmp(r->arch, "gemma3") ||
                        !strcmp(r->arch, "olmo2") || !strcmp(r->arch, "qwen3moe") ||
                        !strcmp(r->arch, "olmoe") || !strcmp(r->arch, "apertus") || exa;
        CHECK((L->q_norm != NULL) == qk && (L->k_norm != NULL) == qk, "%s: q/k norms", what);
        CHECK((L->bq != NULL) == (!strcmp(r->arch, "qwen2") || oss || !strcmp(r->arch, "seed_oss")),
              "%s: q bias", what);
        /* NoPE: smollm3 every 4th layer, the global layers of cohere2 / 64-layer exaone4 */
        CHECK(L->no_rope == ((!strcmp(r->arch, "smollm3") && l % 4 == 3) || (p4 && l % 4 == 3)),
              "%s: layer %d RoPE", what, l);
        CHECK((L->moe || (L->w_gate.data == NULL) == !strcmp(r->arch, "apertus")) &&
                  (L->ffn_norm == NULL) == (exa || !strcmp(r->arch, "cohere2") || !strcmp(r->arch, "olmo2")),
              "%s: layer %d FFN gate / norm", what, l);
        CHECK(L->q_temp == !strcmp(r->arch, "mistral3"), "%s: layer %d temperature", what, l);
        CHECK((L->sinks != NULL) == oss && (L->bo != NULL) == oss, "%s: sinks, output bias", what);
        CHECK(L->moe == (r->n_expert > 0) &&
                  (!L->moe || (L->router.n_out == r->n_expert &&
                               L->exp_gate.n_out == (int64_t)r->n_expert * r->expert_ffn &&
                               (L->router_b != NULL) == oss && (L->exp_b_down != NULL) == oss)),
              "%s: layer %d experts", what, l);
    }
    if (gemma) CHECK(n_local > 0 && n_local < m->n_layers, "%s: %d local layers", what, n_local);
    if (!strcmp(r->arch, "cohere2"))
        CHECK(m->norm == MODEL_NORM_LAYER && m->parallel_ffn && m->logit_scale == 4.0f, "%s: cohere2 block",
              what);
    if (!strcmp(r->arch, "apertus"))
        CHECK(m->act == MODEL_ACT_XIELU && m->rope_freqs && m->rope_neox &&
                  fabsf(m->layers[0].xielu.beta - 0.5f) < 1e-7f &&
                  fabsf(m->layers[1].xielu.alpha_p - log1pf(expf(-0.25f))) < 1e-6f,
              "%s: xIELU", what);
    if (!strcmp(r->arch, "mistral3"))
        CHECK(m->q_temp_beta == 0.1f && m->q_temp_len == (r->rope_orig_ctx ? r->rope_orig_ctx : r->n_ctx) &&
                  m->rope[0].yarn == (r->rope_orig_ctx > 0) && m->rope[0].mscale == 1.0f,
              "%s: YaRN / temperature", what);
    if (!strcmp(r->arch, "gemma3"))
        CHECK(m->n_rope_sets == 2 && m->rope[1].theta == 10000.0f && m->rope[0].theta == 1e6f,
              "%s: rope sets", what);
    if (!strcmp(r->arch, "gemma2"))
        CHECK(m->attn_softcap == 50.0f && m->final_softcap == 30.0f, "%s: soft-caps %g %g", what,
              m->attn_softcap, m->final_softcap);
    if (!strcmp(r->arch, "granite"))
        CHECK(m->emb_scale == 12.0f && m->residual_scale == 0.22f && m->logit_scale == 8.0f &&
                  m->kq_scale == 1.0f / (float)r->head_dim,
              "%s: granite scales", what);
    if (r->n_expert)
        CHECK(m->n_expert == r->n_expert && m->n_expert_used == r->n_expert_used &&
                  m->expert_ffn == r->expert_ffn &&
                  m->expert_norm == !strcmp(r->arch, "llama") + !strcmp(r->arch, "qwen3moe") &&
                  m->gating == (oss ? MODEL_GATE_SOFTMAX_CHOSEN : MODEL_GATE_SOFTMAX) &&
                  m->act == (oss ? MODEL_ACT_SWIGLU_OAI : MODEL_ACT_SILU),
              "%s: expert fields", what);
    if (oss && r->rope_orig_ctx)
        CHECK(m->rope[0].yarn && m->rope[0].freq_scale == (float)r->rope_orig_ctx / (float)r->n_ctx,
              "%s: YaRN", what);
    if (r->rope_orig_ctx && !oss && strcmp(r->arch, "mistral3") != 0)
        CHECK(m->rope_long && m->rope_short && m->rope_orig_ctx == r->rope_orig_ctx, "%s: LongRoPE", what);
}

/* Logits of tokens[0..n) as one prefill step (decode = false) or n steps; into
 * out[n][n_vocab]. 0 on success. */
static int run_rows(kvi_model *m, const int32_t *tokens, int n, bool decode, float *out, int n_vocab)
{
    kvi_engine_params ep;
    kvi_engine_params_default(&ep);
    ep.n_ctx = 64;
    ep.n_threads = 2;
    ep.kv_type_k = ep.kv_type_v = KVI_TYPE_F32;
    kvi_error err = { 0 };
    kvi_engine *e = kvi_engine_create(m, &ep, &err);
    if (!e) return -1;
    kvi_seq *s = kvi_seq_create(e);
    kvi_batch *b = kvi_batch_create(n);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        kvi_batch_add(b, s, tokens[i], i, true);
        if (decode || i == n - 1) {
            rc = kvi_step(e, b, &err);
            for (int r = 0; rc == 0 && r < kvi_batch_n_rows(b); r++) {
                const int pos = i - kvi_batch_n_rows(b) + 1 + r;
                memcpy(out + (size_t)pos * n_vocab, kvi_logits(e, r), (size_t)n_vocab * sizeof(float));
            }
            kvi_batch_clear(b);
        }
    }
    if (rc) fprintf(stderr, "step: %s\n", err.msg);
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    return rc;
}

/* n_layers 0: 3 (gemma3 7); dim 0: 256 */
static void run_arch_shape(const char *arch, const char *type, int n_layers, int dim)
{
    char what[64], file[96];
    snprintf(what, sizeof what, "%s %s%s", arch, type, n_layers ? " (64 layers)" : "");
    snprintf(file, sizeof file, "synth_run_%s_%s.gguf", arch, type);
    /* rows of 256 so every K type stores its own blocks; head_dim 64 != 256 / 8 */
    kvi_synth_params p = shape(arch, dim ? dim : 256,
                               n_layers                  ? n_layers
                               : !strcmp(arch, "gemma3") ? 7
                                                         : 3,
                               8, 2, 64, 512);
    p.window = 4;
    p.seed = 11;
    if (!strcmp(arch, "qwen3moe") || !strcmp(arch, "olmoe") || !strcmp(arch, "gpt-oss"))
        p.n_expert = 4, p.n_expert_used = 2, p.expert_ffn = 256;
    if (!strcmp(arch, "gpt-oss")) p.rope_orig_ctx = 128;
    if (!strcmp(arch, "mistral3")) p.rope_orig_ctx = 4; /* the temperature changes inside the 8 rows */
    if (!strcmp(arch, "phi3")) {
        p.n_rot = 48;
        p.rope_orig_ctx = 32;
        p.tie = 1;
    }
    size_t tl = strlen(type);
    char base[16];
    p.mix_m = tl == 6 && type[5] == 'm';
    snprintf(base, sizeof base, "%.*s", (int)(p.mix_m ? 4 : tl), type);
    CHECK(kvi_type_from_name(base, &p.type) == 0, "%s: type", what);
    kvi_synth_params r;
    CHECK(kvi_synth_resolve(&p, &r) == 0, "%s: resolve", what);
    const char *path = tmp_path(file);
    kvi_error err = { 0 };
    int rc = kvi_synth_write(&p, path, &err);
    CHECK(rc == 0, "%s: synth %d %s", what, rc, err.msg);
    if (rc) return;
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_model *m = kvi_model_load(path, &lp, &err);
    CHECK(m != NULL, "%s: load: %s", what, err.msg);
    if (!m) return;
    check_fields(what, m, &r);
    enum { N = 8 };
    const int32_t tokens[N] = { 1, 270, 31, 99, 280, 7, 150, 42 };
    const int nv = kvi_n_vocab(m);
    float *a = malloc(sizeof(float) * N * (size_t)nv), *d = malloc(sizeof(float) * N * (size_t)nv);
    CHECK(run_rows(m, tokens, N, false, a, nv) == 0, "%s: prefill step", what);
    int finite = 1;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (size_t)N * nv; i++) {
        finite &= isfinite(a[i]) != 0;
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    CHECK(finite && hi - lo > 1e-3, "%s: logits finite %d, range %g..%g", what, finite, lo, hi);
    CHECK(memcmp(a, a + (size_t)(N - 1) * nv, (size_t)nv * sizeof(float)) != 0, "%s: rows 0 and 7 equal",
          what);
    if (p.type == KVI_TYPE_F32) {
        CHECK(run_rows(m, tokens, N, true, d, nv) == 0, "%s: decode steps", what);
        CHECK(memcmp(a, d, sizeof(float) * N * (size_t)nv) == 0, "%s: prefill and decode differ", what);
    }
    free(a);
    free(d);
    kvi_model_free(m);
    remove(path);
}

/* p written in weight type `type` ("q4_k_m": the mix) to tmp file `file` and loaded,
 * or NULL (a failed check); *path: the file. */
static kvi_model *write_load(kvi_synth_params *p, const char *type, const char *what, const char *file,
                             const char **path)
{
    const size_t tl = strlen(type);
    char base[16];
    p->mix_m = tl == 6 && type[5] == 'm';
    snprintf(base, sizeof base, "%.*s", (int)(p->mix_m ? 4 : tl), type);
    CHECK(kvi_type_from_name(base, &p->type) == 0, "%s: type", what);
    *path = tmp_path(file);
    kvi_error err = { 0 };
    int rc = kvi_synth_write(p, *path, &err);
    CHECK(rc == 0, "%s: synth %d %s", what, rc, err.msg);
    if (rc) return NULL;
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_model *m = kvi_model_load(*path, &lp, &err);
    CHECK(m != NULL, "%s: load: %s", what, err.msg);
    return m;
}

/* 8 rows of m: finite logits, rows 0 and 7 differ, one prefill step == 8 decode steps */
static void check_rows(kvi_model *m, const char *what)
{
    enum { N = 8 };
    const int32_t tokens[N] = { 1, 270, 31, 99, 280, 7, 150, 42 };
    const int nv = kvi_n_vocab(m);
    float *a = malloc(sizeof(float) * N * (size_t)nv), *d = malloc(sizeof(float) * N * (size_t)nv);
    CHECK(run_rows(m, tokens, N, false, a, nv) == 0, "%s: prefill step", what);
    int finite = 1;
    for (size_t i = 0; i < (size_t)N * nv; i++) finite &= isfinite(a[i]) != 0;
    CHECK(finite && memcmp(a, a + (size_t)(N - 1) * nv, (size_t)nv * sizeof(float)) != 0,
          "%s: logits finite %d, rows 0 and 7 differ", what, finite);
    CHECK(run_rows(m, tokens, N, true, d, nv) == 0 && memcmp(a, d, sizeof(float) * N * (size_t)nv) == 0,
          "%s: prefill and decode differ", what);
    free(a);
    free(d);
}

static void run_arch(const char *arch, const char *type) { run_arch_shape(arch, type, 0, 0); }

/* A hybrid of each kind in a few weight types: loads with its recurrent layers
 * where the interval puts them, runs, and (F32) prefill == token-by-token decode. */
static void run_hybrid(const char *arch, const char *type)
{
    char what[64], file[96];
    snprintf(what, sizeof what, "%s %s", arch, type);
    snprintf(file, sizeof file, "synth_run_%s_%s.gguf", arch, type);
    kvi_synth_params p = shape(arch, 256, 4, 8, 2, 64, 512);
    p.seed = 12;
    p.n_rot = 32, p.ssm_groups = 2, p.ssm_heads = 4, p.ssm_state = 64, p.attn_interval = 2;
    if (strcmp(arch, "qwen35") != 0) p.n_expert = 4, p.n_expert_used = 2, p.expert_ffn = 256;
    const char *path;
    kvi_model *m = write_load(&p, type, what, file, &path);
    if (!m) return;
    CHECK(m->n_recurrent == 2 && m->layers[0].recurrent && !m->layers[1].recurrent &&
              m->layers[2].recurrent && !m->layers[3].recurrent && m->ssm_hk == 2 && m->ssm_hv == 4 &&
              m->ssm_dk == 64 && m->ssm_tiled == (strcmp(arch, "qwen3next") != 0) && m->attn_gated,
          "%s: layer kinds / DeltaNet shape", what);
    check_rows(m, what);
    kvi_model_free(m);
    remove(path);
}

static void test_run_all(void)
{
    static const char *const htypes[] = { "f32", "q8_0", "q4_0", "q4_k_m" };
    for (size_t t = 0; t < sizeof htypes / sizeof htypes[0]; t++) {
        run_hybrid("qwen35", htypes[t]);
        run_hybrid("qwen3next", htypes[t]);
        run_hybrid("qwen35moe", htypes[t]);
    }
    static const char *const types[] = {
        "f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",   "q5_0",   "q5_1",
        "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m", "mxfp4"
    };
    for (int a = 0; a < N_ARCHS; a++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) run_arch(k_archs[a], types[t]);
    /* exaone4's sliding windows exist only with 64 layers (llama.cpp's rule) */
    run_arch_shape("exaone4", "f32", 64, 64);
    run_arch_shape("exaone4", "q8_0", 64, 64);
}

/* Issue 36's mixtures of experts in a weight type: the file loads with the routing
 * its architecture implies (README-moe-t3.md's table), runs, and (F32) prefill ==
 * token-by-token decode. 256 wide, 8 heads of 64 (bailingmoe2: of 32, its q width
 * is dim), 8 experts of 256, 2 used; afmoe 4 layers (a NoPE global layer). */
static void run_moe_t3(const char *arch, const char *type)
{
    char what[64], file[96];
    snprintf(what, sizeof what, "%s %s", arch, type);
    snprintf(file, sizeof file, "synth_run_%s_%s.gguf", arch, type);
    const bool bailing = !strcmp(arch, "bailingmoe2"), af = !strcmp(arch, "afmoe");
    kvi_synth_params p = shape(arch, 256, af ? 4 : 3, 8, 2, bailing ? 32 : 64, 512);
    p.seed = 13, p.window = 4, p.n_rot = 32;
    p.n_expert = 8, p.n_expert_used = 2, p.expert_ffn = 256;
    const char *path;
    kvi_model *m = write_load(&p, type, what, file, &path);
    if (!m) return;
    const bool sig = strcmp(arch, "hunyuan-moe") != 0 && strcmp(arch, "ernie4_5-moe") != 0;
    const bool lead = !strcmp(arch, "glm4moe") || !strcmp(arch, "ernie4_5-moe") || bailing || af;
    const bool shared = strcmp(arch, "minimax-m2") != 0;
    const bool glm = !strcmp(arch, "glm4moe");
    CHECK(m->n_layers == p.n_layers && m->n_nextn == glm && (m->n_unread_tensors > 0) == glm &&
              m->n_dense_lead == lead && m->gating == (sig ? MODEL_GATE_SIGMOID : MODEL_GATE_SOFTMAX) &&
              m->n_expert_groups == (bailing ? 4 : 1) &&
              m->qk_norm_after_rope == !strcmp(arch, "hunyuan-moe"),
          "%s: layers %d MTP %d unread %d, dense lead %d, gating %d", what, m->n_layers, m->n_nextn,
          m->n_unread_tensors, m->n_dense_lead, (int)m->gating);
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        CHECK(L->moe == (l >= (lead ? 1 : 0)) && (!L->moe || (L->sh_gate.data != NULL) == shared) &&
                  (L->wo_gate.data != NULL) == af && L->no_rope == (af && l == 3) &&
                  L->window == (af && l < 3 ? 4 : 0),
              "%s: layer %d", what, l);
    }
    check_rows(m, what);
    kvi_model_free(m);
    remove(path);
}

static void test_moe_t3(void)
{
    static const char *const archs[] = { "glm4moe",      "minimax-m2",  "hunyuan-moe",
                                         "ernie4_5-moe", "bailingmoe2", "afmoe" };
    static const char *const types[] = { "f32", "q8_0", "q4_0", "q4_k_m" };
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) run_moe_t3(archs[a], types[t]);
    /* the presets of real shapes against their config.json values (typed in here):
     * zai-org/GLM-4.5-Air, Qwen/Qwen3.5-35B-A3B (text part), MiniMaxAI/MiniMax-M2 */
    kvi_synth_params p, r;
    CHECK(kvi_synth_preset("glm-4.5-air-4l", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "glm-4.5-air-4l");
    CHECK(!strcmp(r.arch, "glm4moe") && r.dim == 4096 && r.ffn_dim == 10944 && r.n_layers == 4 &&
              r.n_heads == 96 && r.n_kv_heads == 8 && r.head_dim == 128 && r.n_rot == 64 &&
              r.n_expert == 128 && r.n_expert_used == 8 && r.expert_ffn == 1408 && r.shared_ffn == 1408 &&
              r.n_vocab == 151552 && r.n_ctx == 131072 && r.tie == -1,
          "glm-4.5-air-4l shape");
    CHECK(kvi_synth_preset("qwen3.5-35b-a3b-8l", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "qwen3.5-35b");
    CHECK(!strcmp(r.arch, "qwen35moe") && r.dim == 2048 && r.n_layers == 8 && r.n_heads == 16 &&
              r.n_kv_heads == 2 && r.head_dim == 256 && r.n_rot == 64 && r.n_expert == 256 &&
              r.n_expert_used == 8 && r.expert_ffn == 512 && r.shared_ffn == 512 && r.ssm_groups == 16 &&
              r.ssm_heads == 32 && r.ssm_state == 128 && r.attn_interval == 4 && r.n_vocab == 248320 &&
              r.n_ctx == 262144 && r.tie == -1,
          "qwen3.5-35b-a3b-8l shape");
    CHECK(kvi_synth_preset("minimax-m2-4l", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "minimax-m2-4l");
    CHECK(!strcmp(r.arch, "minimax-m2") && r.dim == 3072 && r.n_layers == 4 && r.n_heads == 48 &&
              r.n_kv_heads == 8 && r.head_dim == 128 && r.n_rot == 64 && r.n_expert == 256 &&
              r.n_expert_used == 8 && r.expert_ffn == 1536 && r.n_vocab == 200064 && r.n_ctx == 196608,
          "minimax-m2-4l shape");
}

/* ---- llama4 and gemma4 (issue 36) ---- */

/* Tensor `name` of the two files as floats, element for element within tol
 * (a table of the file format: rope_freqs). */
static void same_values(const char *what, const char *name, const gguf_ctx *a, const gguf_ctx *b, double tol)
{
    const gguf_tensor *ta = gguf_find_tensor(a, name), *tb = gguf_find_tensor(b, name);
    CHECK(ta && tb && ta->type == KVI_TYPE_F32 && tb->type == KVI_TYPE_F32 && ta->ne[0] == tb->ne[0],
          "%s: %s in both, F32", what, name);
    for (int64_t i = 0; ta && tb && ta->type == KVI_TYPE_F32 && tb->type == KVI_TYPE_F32 && i < ta->ne[0];
         i++) {
        const float x = ((const float *)ta->data)[i], y = ((const float *)tb->data)[i];
        CHECK(fabs(x - y) <= tol * fabs(x), "%s: %s[%lld] %g vs %g", what, name, (long long)i, x, y);
    }
}

/* The preset at golden size, synthesised in `type`: loads with the fields the
 * architecture implies, runs, and prefill == token-by-token decode. */
static void run_t3(const char *preset, const char *type)
{
    char what[64], file[96];
    snprintf(what, sizeof what, "%s %s", preset, type);
    snprintf(file, sizeof file, "synth_t3_%s_%s.gguf", preset, type);
    kvi_synth_params p;
    CHECK(kvi_synth_preset(preset, &p) == 0, "%s: preset", what);
    p.seed = 13;
    const char *path;
    kvi_model *m = write_load(&p, type, what, file, &path);
    if (!m) return;
    if (!strcmp(p.arch, "llama4")) /* 4 layers: NoPE on 3, experts on 1 and 3 */
        CHECK(m->layers[3].no_rope && !m->layers[2].no_rope && m->layers[0].qk_rms_post && m->layers[1].moe &&
                  !m->layers[2].moe && m->layers[3].moe && m->layers[1].sh_gate.data && m->moe_weight_input &&
                  m->rope_freqs,
              "%s: llama4 layer fields", what);
    else /* 6 layers, period 3 (2 and 5 global), the last 3 reading layers 1 and 2 */
        CHECK(m->layers[0].window == 8 && m->layers[2].window == 0 && m->layers[2].head_dim == 64 &&
                  m->layers[0].head_dim == 32 && m->layers[2].n_kv_heads == 1 && !m->layers[2].wv.data &&
                  m->layers[0].wv.data && m->layers[3].kv_share == 2 && m->layers[4].kv_share == 2 &&
                  m->layers[5].kv_share == 3 && m->layers[5].ffn_dim == 128 && m->ple_dim == 32 &&
                  m->layers[5].ple_gate.data && m->final_softcap == 30.0f,
              "%s: gemma4 layer fields", what);
    check_rows(m, what);
    kvi_model_free(m);
    remove(path);
}

static void test_t3(void)
{
    /* llama4 at the golden's shape: its keys and tensors, and the Llama 3 factors */
    kvi_synth_params p;
    CHECK(kvi_synth_preset("llama4-tiny", &p) == 0, "llama4-tiny");
    compare_golden("llama4", p);
    gguf_ctx *a = NULL, *b = NULL;
    kvi_error err = { 0 };
    if (gguf_open(shared_path("golden/arch/llama4-f32.gguf"), false, &a, &err) == 0 &&
        gguf_open(tmp_path("synth_arch_llama4.gguf"), false, &b, &err) == 0)
        same_values("llama4", "rope_freqs.weight", a, b, 1e-6);
    if (a) gguf_close(a);
    if (b) gguf_close(b);
    /* gemma4: every key of the golden (whose 5-layer pattern is not periodic) with
     * its type, and no other */
    CHECK(kvi_synth_preset("gemma4-tiny", &p) == 0, "gemma4-tiny");
    p.type = KVI_TYPE_F32;
    p.vocab_from = shared_path("models/stories260K.gguf");
    const char *path = tmp_path("synth_arch_gemma4.gguf");
    CHECK(kvi_synth_write(&p, path, &err) == 0, "gemma4: synth %s", err.msg);
    a = b = NULL;
    if (gguf_open(shared_path("golden/arch/gemma4-f32.gguf"), false, &a, &err) == 0 &&
        gguf_open(path, false, &b, &err) == 0) {
        keys_in("gemma4", a, b, false);
        keys_in("gemma4", b, a, false);
        same_values("gemma4", "rope_freqs.weight", a, b, 0);
    }
    if (a) gguf_close(a);
    if (b) gguf_close(b);
    /* the real shapes (config.json values typed in here) */
    kvi_synth_params r;
    CHECK(kvi_synth_preset("llama-4-scout-4l", &p) == 0 && kvi_synth_resolve(&p, &r) == 0 &&
              !strcmp(r.arch, "llama4") && r.dim == 5120 && r.n_heads == 40 && r.n_kv_heads == 8 &&
              r.head_dim == 128 && r.n_expert == 16 && r.n_expert_used == 1 && r.expert_ffn == 8192 &&
              r.ffn_dim == 16384 && r.moe_step == 1 && r.n_vocab == 202048 && r.rope_base == 500000.0f,
          "llama-4-scout shape");
    CHECK(kvi_synth_preset("gemma-4-E4B", &p) == 0 && kvi_synth_resolve(&p, &r) == 0 &&
              !strcmp(r.arch, "gemma4") && r.dim == 2560 && r.n_layers == 42 && r.n_heads == 8 &&
              r.n_kv_heads == 2 && r.head_dim == 256 && r.head_dim_global == 512 && r.ple_dim == 256 &&
              r.shared_kv_layers == 18 && r.window == 512 && r.window_pattern == 6 && r.tie == 1,
          "gemma-4-E4B shape");
    CHECK(kvi_synth_preset("gemma-4-31b-6l", &p) == 0 && kvi_synth_resolve(&p, &r) == 0 && r.dim == 5376 &&
              r.n_heads == 32 && r.n_kv_heads == 16 && r.n_kv_heads_global == 4 && r.k_eq_v == 1 &&
              r.ple_dim == 0 && r.window == 1024,
          "gemma-4-31B shape");
    static const char *const types[] = { "f32", "q8_0", "q4_0", "q4_k" };
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        run_t3("llama4-tiny", types[t]);
        run_t3("gemma4-tiny", types[t]);
    }
}

/* ---- presets, mixes, LongRoPE factor, CLI ---- */

static void test_presets(void)
{
    kvi_synth_params p, r;
    /* Qwen/Qwen3.5-0.8B config.json (text part): layer_types 3 linear : 1 full */
    CHECK(kvi_synth_preset("qwen3.5-0.8b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "qwen3.5-0.8b");
    CHECK(!strcmp(r.arch, "qwen35") && r.dim == 1024 && r.n_layers == 24 && r.n_heads == 8 &&
              r.n_kv_heads == 2 && r.head_dim == 256 && r.n_rot == 64 && r.ffn_dim == 3584 && r.tie == 1 &&
              r.rope_base == 1e7f && r.n_vocab == 248320 && r.ssm_groups == 16 && r.ssm_heads == 16 &&
              r.ssm_state == 128 && r.ssm_conv == 4 && r.attn_interval == 4,
          "qwen3.5-0.8b shape");
    /* Qwen/Qwen3-0.6B config.json */
    CHECK(kvi_synth_preset("qwen3-0.6b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "qwen3-0.6b");
    CHECK(!strcmp(r.arch, "qwen3") && r.dim == 1024 && r.n_layers == 28 && r.n_heads == 16 &&
              r.n_kv_heads == 8 && r.head_dim == 128 && r.ffn_dim == 3072 && r.tie == 1 &&
              r.rope_base == 1e6f && r.n_vocab == 151936,
          "qwen3-0.6b shape");
    /* google/gemma-3-1b-pt config.json */
    CHECK(kvi_synth_preset("gemma-3-1b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "gemma-3-1b");
    CHECK(!strcmp(r.arch, "gemma3") && r.dim == 1152 && r.n_layers == 26 && r.n_heads == 4 &&
              r.n_kv_heads == 1 && r.head_dim == 256 && r.ffn_dim == 6912 && r.window == 512 &&
              r.window_pattern == 6 && r.tie == 1 && r.rope_base == 1e6f && r.rope_base_local == 10000.0f &&
              r.rope_linear == 0.0f,
          "gemma-3-1b shape");
    /* allenai/OLMoE-1B-7B-0924 config.json: num_experts 64, num_experts_per_tok 8 */
    CHECK(kvi_synth_preset("olmoe-1b-7b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "olmoe-1b-7b");
    CHECK(!strcmp(r.arch, "olmoe") && r.dim == 2048 && r.n_layers == 16 && r.n_heads == 16 &&
              r.n_kv_heads == 16 && r.head_dim == 128 && r.expert_ffn == 1024 && r.n_expert == 64 &&
              r.n_expert_used == 8 && r.n_vocab == 50304 && r.n_ctx == 4096 && r.rope_base == 10000.0f,
          "olmoe-1b-7b shape");
    /* openai/gpt-oss-20b config.json (6 of its 24 layers): experts 32 x 2880, 4 per
     * token, sliding_window 128, rope_theta 150000, YaRN factor 32 over 4096 */
    CHECK(kvi_synth_preset("gpt-oss-20b-6l", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "gpt-oss-20b-6l");
    CHECK(!strcmp(r.arch, "gpt-oss") && r.dim == 2880 && r.n_layers == 6 && r.n_heads == 64 &&
              r.n_kv_heads == 8 && r.head_dim == 64 && r.expert_ffn == 2880 && r.n_expert == 32 &&
              r.n_expert_used == 4 && r.n_vocab == 201088 && r.window == 128 && r.window_pattern == 2 &&
              r.rope_base == 150000.0f && r.rope_orig_ctx == 4096 && r.n_ctx == 131072 && r.tie == -1,
          "gpt-oss-20b-6l shape");
    /* microsoft/Phi-4-mini-instruct config.json */
    CHECK(kvi_synth_preset("phi-4-mini", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "phi-4-mini");
    CHECK(!strcmp(r.arch, "phi3") && r.dim == 3072 && r.n_layers == 32 && r.n_heads == 24 &&
              r.n_kv_heads == 8 && r.head_dim == 128 && r.n_rot == 96 && r.ffn_dim == 8192 && r.tie == 1 &&
              r.rope_orig_ctx == 4096 && r.n_ctx == 131072 && r.n_vocab == 200064,
          "phi-4-mini shape");

    /* more dense architectures, their config.json values (text part) */
    CHECK(kvi_synth_preset("ministral-3-8b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "ministral-3-8b");
    CHECK(!strcmp(r.arch, "mistral3") && r.dim == 4096 && r.ffn_dim == 14336 && r.n_layers == 34 &&
              r.n_heads == 32 && r.n_kv_heads == 8 && r.head_dim == 128 && r.n_vocab == 131072 &&
              r.n_ctx == 262144 && r.rope_orig_ctx == 16384 && r.rope_base == 1e6f && r.tie == -1,
          "ministral-3-8b shape");
    CHECK(kvi_synth_preset("smollm3-3b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "smollm3-3b");
    CHECK(!strcmp(r.arch, "smollm3") && r.dim == 2048 && r.ffn_dim == 11008 && r.n_layers == 36 &&
              r.n_heads == 16 && r.n_kv_heads == 4 && r.head_dim == 128 && r.n_vocab == 128256 &&
              r.n_ctx == 65536 && r.rope_base == 5e6f && r.tie == 1,
          "smollm3-3b shape");
    CHECK(kvi_synth_preset("seed-oss-36b-8l", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "seed-oss-36b-8l");
    CHECK(!strcmp(r.arch, "seed_oss") && r.dim == 5120 && r.ffn_dim == 27648 && r.n_layers == 8 &&
              r.n_heads == 80 && r.n_kv_heads == 8 && r.head_dim == 128 && r.n_vocab == 155136 &&
              r.n_ctx == 524288 && r.rope_base == 1e7f && r.tie == -1,
          "seed-oss-36b-8l shape");
    CHECK(kvi_synth_preset("apertus-8b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "apertus-8b");
    CHECK(!strcmp(r.arch, "apertus") && r.dim == 4096 && r.ffn_dim == 21504 && r.n_layers == 32 &&
              r.n_heads == 32 && r.n_kv_heads == 8 && r.n_vocab == 131072 && r.n_ctx == 65536 &&
              r.rope_base == 1.2e7f && r.tie == -1,
          "apertus-8b shape");
    CHECK(kvi_synth_preset("exaone-4-32b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "exaone-4-32b");
    CHECK(!strcmp(r.arch, "exaone4") && r.dim == 5120 && r.ffn_dim == 27392 && r.n_layers == 64 &&
              r.n_heads == 40 && r.n_kv_heads == 8 && r.head_dim == 128 && r.n_vocab == 102400 &&
              r.n_ctx == 131072 && r.window == 4096 && r.rope_base == 1e6f && r.tie == -1,
          "exaone-4-32b shape");
    CHECK(kvi_synth_preset("command-r7b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0, "command-r7b");
    CHECK(!strcmp(r.arch, "cohere2") && r.dim == 4096 && r.ffn_dim == 14336 && r.n_layers == 32 &&
              r.n_heads == 32 && r.n_kv_heads == 8 && r.n_vocab == 256000 && r.window == 4096 &&
              r.window_pattern == 4 && r.rope_base == 5e4f && r.tie == 1,
          "command-r7b shape");
    /* Apertus-8B's Llama 3 factors (factor 8, low 1, high 4 over 8192, theta 1.2e7, 64
     * pairs): pair 0 keeps its frequency, the last is divided by 8 */
    p = shape("apertus", 128, 1, 1, 1, 128, 128);
    {
        const char *path = tmp_path("synth_apertus_freqs.gguf");
        gguf_ctx *g = NULL;
        kvi_error err = { 0 };
        CHECK(kvi_synth_write(&p, path, &err) == 0 && gguf_open(path, false, &g, &err) == 0, "apertus: %s",
              err.msg);
        if (g) {
            const gguf_tensor *t = gguf_find_tensor(g, "rope_freqs.weight");
            CHECK(t && t->ne[0] == 64, "apertus rope_freqs dims");
            if (t) {
                const float *v = (const float *)t->data;
                /* wavelength 2 pi 1.2e7^(2i/128): < 2048 -> 1, > 8192 -> 8, between smooth */
                int ok = 1;
                for (int i = 0; i < 64; i++) {
                    const double wl = 6.283185307179586 * pow(1.2e7, 2.0 * i / 128);
                    const double sm = (8192.0 / wl - 1.0) / 3.0;
                    const double want = wl < 2048 ? 1.0 : wl > 8192 ? 8.0 : 1.0 / ((1 - sm) / 8.0 + sm);
                    ok &= fabs(v[i] - want) < 1e-5 * want;
                }
                CHECK(ok && v[0] == 1.0f && v[63] == 8.0f, "apertus rope_freqs values");
            }
            gguf_close(g);
        }
    }

    /* Phi-4-mini's metadata on a small shape: attn_factor = sqrt(1 + ln(131072 / 4096) /
     * ln 4096) = sqrt(1 + 5/12) = 1.1902381; factors [n_rot / 2] */
    p = shape("phi3", 128, 1, 4, 2, 0, 128);
    p.n_ctx = 131072;
    p.rope_orig_ctx = 4096;
    p.n_rot = 24;
    kvi_error err = { 0 };
    gguf_ctx *g = NULL;
    const char *path = tmp_path("synth_phi_lr.gguf");
    CHECK(kvi_synth_write(&p, path, &err) == 0 && gguf_open(path, false, &g, &err) == 0, "phi3 LongRoPE: %s",
          err.msg);
    if (g) {
        double af = 0;
        int64_t oc = 0;
        CHECK(gguf_get_float(g, "phi3.rope.scaling.attn_factor", &af, NULL) == 0 &&
                  fabs(af - 1.1902381) < 1e-6,
              "attn_factor %.9g", af);
        CHECK(gguf_get_int(g, "phi3.rope.scaling.original_context_length", &oc, NULL) == 0 && oc == 4096,
              "orig %lld", (long long)oc);
        const gguf_tensor *fl = gguf_find_tensor(g, "rope_factors_long.weight");
        CHECK(fl && fl->ne[0] == 12 && fl->n_dims == 1, "long factors dims");
        if (fl) {
            const float *v = (const float *)fl->data;
            /* 1 at the first pair, ctx / orig = 32 at the last */
            CHECK(v[0] == 1.0f && fabsf(v[11] - 32.0f) < 1e-3f, "long factors %g .. %g", v[0], v[11]);
        }
        gguf_close(g);
    }

    /* q4_k_m with 8 layers: use_more_bits(l, 8) = l < 1 || l >= 7 || (l - 1) % 3 == 2
     * -> layers 0, 3, 6, 7 take Q6_K for attn_v and ffn_down; the others Q4_K */
    p = shape("llama", 256, 8, 4, 4, 0, 512);
    p.type = KVI_TYPE_Q4_K;
    p.mix_m = true;
    path = tmp_path("synth_q4km.gguf");
    g = NULL;
    CHECK(kvi_synth_write(&p, path, &err) == 0 && gguf_open(path, false, &g, &err) == 0, "q4_k_m: %s",
          err.msg);
    if (g) {
        int64_t ft = 0;
        CHECK(gguf_get_int(g, "general.file_type", &ft, NULL) == 0 && ft == 15, "q4_k_m file type %lld",
              (long long)ft);
        for (int l = 0; l < 8; l++) {
            const bool more = l == 0 || l == 3 || l == 6 || l == 7;
            char nv[64], nd[64], nq[64];
            snprintf(nv, sizeof nv, "blk.%d.attn_v.weight", l);
            snprintf(nd, sizeof nd, "blk.%d.ffn_down.weight", l);
            snprintf(nq, sizeof nq, "blk.%d.attn_q.weight", l);
            const gguf_tensor *tv = gguf_find_tensor(g, nv), *td = gguf_find_tensor(g, nd),
                              *tq = gguf_find_tensor(g, nq);
            const kvi_type want = more ? KVI_TYPE_Q6_K : KVI_TYPE_Q4_K;
            CHECK(tv && td && tq && tv->type == want && td->type == want && tq->type == KVI_TYPE_Q4_K,
                  "q4_k_m layer %d types", l);
        }
        const gguf_tensor *to = gguf_find_tensor(g, "output.weight");
        CHECK(to && to->type == KVI_TYPE_Q6_K, "q4_k_m output type");
        gguf_close(g);
    }

    /* refusals */
    p = shape("mamba", 128, 2, 4, 2, 0, 256);
    CHECK(kvi_synth_write(&p, tmp_path("synth_bad_arch.gguf"), &err) == KVI_E_INVALID &&
              strstr(err.msg, "mamba"),
          "unknown arch: %s", err.msg);
    p = shape("qwen3", 128, 2, 4, 2, 0, 256);
    p.n_rot = 40; /* > head_dim 32 */
    CHECK(kvi_synth_write(&p, tmp_path("synth_bad_rot.gguf"), &err) == KVI_E_INVALID, "rot > head_dim");
    p = shape("qwen3", 128, 2, 4, 2, 0, 256);
    p.rope_orig_ctx = 64; /* LongRoPE is phi3's */
    CHECK(kvi_synth_write(&p, tmp_path("synth_bad_lr.gguf"), &err) == KVI_E_INVALID, "LongRoPE on qwen3");
}

static void test_cli(void)
{
    char *out = NULL, *errs = NULL;
    int rc = run_kvinfer("synth --help", &out, &errs);
    CHECK(rc == 0 && out, "synth --help: %d", rc);
    for (int a = 0; out && a < N_ARCHS; a++)
        CHECK(strstr(out, k_archs[a]) != NULL, "help lacks arch %s", k_archs[a]);
    const char *presets[] = { "qwen3-0.6b", "gemma-3-1b", "phi-4-mini", "gemma3-tiny", "q4_k_m" };
    for (size_t i = 0; out && i < sizeof presets / sizeof presets[0]; i++)
        CHECK(strstr(out, presets[i]) != NULL, "help lacks %s", presets[i]);
    free(out);
    free(errs);
    char args[512];
    const char *path = tmp_path("synth_cli_arch.gguf");
    snprintf(args, sizeof args,
             "synth --preset gemma3-tiny --type q4_k_m --window 32 --window-pattern 3 -o '%s'", path);
    rc = run_kvinfer(args, &out, &errs);
    CHECK(rc == 0, "%s: %d %s", args, rc, errs ? errs : "");
    free(out);
    free(errs);
    gguf_ctx *g = NULL;
    kvi_error err = { 0 };
    if (rc == 0 && gguf_open(path, false, &g, &err) == 0) {
        int64_t w = 0, pat = 0, ft = 0;
        CHECK(gguf_get_int(g, "gemma3.attention.sliding_window", &w, NULL) == 0 && w == 32, "window %lld",
              (long long)w);
        CHECK(gguf_get_int(g, "gemma3.attention.sliding_window_pattern", &pat, NULL) == 0 && pat == 3,
              "pattern");
        CHECK(gguf_get_int(g, "general.file_type", &ft, NULL) == 0 && ft == 15, "file type");
        gguf_close(g);
    }
    rc = run_kvinfer("synth --preset tiny --arch mamba -o /dev/null", &out, &errs);
    CHECK(rc == 1 && errs && strstr(errs, "mamba"), "unknown arch: rc %d", rc);
    free(out);
    free(errs);
    rc = run_kvinfer("synth --preset tiny --type q6_k_m -o /dev/null", &out, &errs);
    CHECK(rc == 1, "q6_k_m accepted: rc %d", rc);
    free(out);
    free(errs);
}

/* ---- lfm2, lfm2moe (issue 41) ---- */

/* The golden shapes' keys and tensors; each at golden size in three weight types:
 * loads with convolution layers 0, 1, 3 (attention 2), the output norm bound, the
 * experts past layer 0 (lfm2moe), runs, prefill == decode; the real-shape presets
 * against their config.json values (typed in here). */
static void test_lfm2(void)
{
    static const char *const presets[] = { "lfm2-tiny", "lfm2moe-tiny" };
    static const char *const golden[] = { "lfm2", "lfm2moe" };
    static const char *const types[] = { "f32", "q8_0", "q4_k" };
    kvi_synth_params p, r;
    for (int a = 0; a < 2; a++) {
        CHECK(kvi_synth_preset(presets[a], &p) == 0, "%s", presets[a]);
        compare_golden(golden[a], p);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            char what[64], file[96];
            snprintf(what, sizeof what, "%s %s", presets[a], types[t]);
            snprintf(file, sizeof file, "synth_lfm2_%s_%s.gguf", presets[a], types[t]);
            CHECK(kvi_synth_preset(presets[a], &p) == 0, "%s", what);
            p.seed = 17;
            const char *path;
            kvi_model *m = write_load(&p, types[t], what, file, &path);
            if (!m) continue;
            CHECK(m->shortconv && m->ssm_conv == 3 && m->n_recurrent == 3 && m->layers[0].recurrent &&
                      m->layers[1].recurrent && !m->layers[2].recurrent && m->layers[3].recurrent &&
                      m->layers[2].q_norm && m->output_norm && m->output.data == m->tok_embd.data &&
                      (a == 0 ? m->n_expert == 0
                              : !m->layers[0].moe && m->layers[1].moe && m->layers[3].sel_bias),
                  "%s: lfm2 layer fields", what);
            check_rows(m, what);
            kvi_model_free(m);
            remove(path);
        }
    }
    CHECK(kvi_synth_preset("lfm2-1.2b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0 &&
              !strcmp(r.arch, "lfm2") && r.dim == 2048 && r.ffn_dim == 8192 && r.n_layers == 16 &&
              r.n_heads == 32 && r.n_kv_heads == 8 && r.head_dim == 64 && r.n_vocab == 65536 &&
              r.n_ctx == 128000 && r.ssm_conv == 3 && r.tie == 1 && r.rope_base == 1e6f,
          "lfm2-1.2b shape");
    CHECK(kvi_synth_preset("lfm2-8b-a1b", &p) == 0 && kvi_synth_resolve(&p, &r) == 0 &&
              !strcmp(r.arch, "lfm2moe") && r.dim == 2048 && r.ffn_dim == 7168 && r.n_layers == 24 &&
              r.n_heads == 32 && r.n_kv_heads == 8 && r.n_expert == 32 && r.n_expert_used == 4 &&
              r.expert_ffn == 1792 && r.n_vocab == 65536,
          "lfm2-8b-a1b shape");
}

/* The Mamba-2 hybrids (README-state-t3.md): each golden-shape preset carries exactly
 * the golden file's keys and tensors, and loads in F32 and Q8_0 with its layer kinds
 * (granitehybrid: layer 2 attention, the others Mamba-2; nemotron_h: M-*-M- with MLP
 * layers 1, 3, 5; falcon-h1: both in every layer), runs, prefill == decode. */
static void test_mamba2(void)
{
    static const struct {
        const char *preset, *golden;
    } t[] = { { "granitehybrid-tiny", "granitehybrid" },
              { "nemotron_h-tiny", "nemotron_h" },
              { "falcon-h1-tiny", "falcon-h1" } };
    static const char *const types[] = { "f32", "q8_0" };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        kvi_synth_params p;
        CHECK(kvi_synth_preset(t[i].preset, &p) == 0, "%s: preset", t[i].preset);
        compare_golden(t[i].golden, p);
        for (int k = 0; k < 2; k++) {
            char what[64], file[96];
            snprintf(what, sizeof what, "%s %s", t[i].preset, types[k]);
            snprintf(file, sizeof file, "synth_m2_%s_%s.gguf", t[i].preset, types[k]);
            p.seed = 17;
            const char *path;
            kvi_model *m = write_load(&p, types[k], what, file, &path);
            if (!m) continue;
            const model_layer *L = m->layers;
            if (i == 0)
                CHECK(L[0].recurrent && L[1].recurrent && !L[2].recurrent && L[3].recurrent && L[0].moe &&
                          L[0].ssm_in.data && L[0].ssm_norm && m->n_recurrent == 3,
                      "%s: layer kinds", what);
            else if (i == 1)
                CHECK(L[0].recurrent && L[1].no_mixer && !L[2].recurrent && L[2].no_ffn && L[3].no_mixer &&
                          L[4].recurrent && L[5].no_mixer && m->n_recurrent == 2,
                      "%s: layer kinds", what);
            else
                CHECK(m->ssm_both && m->n_recurrent == 3 && L[0].wq.data && L[0].ssm_in.data &&
                          !L[0].ssm_norm,
                      "%s: layer kinds", what);
            check_rows(m, what);
            kvi_model_free(m);
            remove(path);
        }
    }
}

/* kimi-linear (issue 41): the golden file's keys and tensors (4-D conv taps and ssm_a
 * included) at its shape; in F32 and Q8_0 the file loads with KDA layers 0-2 and
 * an MLA layer 3 without RoPE, runs, and prefill == decode. */
static void test_kimi(void)
{
    kvi_synth_params p;
    CHECK(kvi_synth_preset("kimi-linear-tiny", &p) == 0, "kimi-linear-tiny");
    compare_golden("kimi-linear", p);
    static const char *const types[] = { "f32", "q8_0" };
    for (int t = 0; t < 2; t++) {
        char what[64], file[64];
        snprintf(what, sizeof what, "kimi-linear-tiny %s", types[t]);
        snprintf(file, sizeof file, "synth_kimi_%s.gguf", types[t]);
        CHECK(kvi_synth_preset("kimi-linear-tiny", &p) == 0, "%s: preset", what);
        p.seed = 13;
        const char *path;
        kvi_model *m = write_load(&p, types[t], what, file, &path);
        if (!m) continue;
        CHECK(m->ssm_kda && m->n_recurrent == 3 && m->layers[0].recurrent && m->layers[2].recurrent &&
                  !m->layers[3].recurrent && m->layers[3].no_rope && m->mla_kv_rank == 32 &&
                  !m->layers[0].moe && m->layers[1].moe && m->layers[3].moe && m->layers[1].sh_gate.data &&
                  m->expert_norm && fabsf(m->expert_scale - 2.446f) < 1e-6f,
              "%s: kimi-linear layer fields", what);
        check_rows(m, what);
        kvi_model_free(m);
        remove(path);
    }
}

int main(void)
{
    test_golden_layout();
    test_presets();
    test_cli();
    test_t3();
    test_run_all();
    test_moe_t3();
    test_lfm2();
    test_mamba2();
    test_kimi();
    return test_main_end();
}
