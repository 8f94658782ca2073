/*
 * cmd_synth.c — `kvinfer synth`: writes a GGUF of any architecture kvinfer runs
 * with random weights (kvi_synth_write) from a preset, explicit shapes, or a
 * preset with some fields overridden.
 *
 * Invariant: the parameters are assembled in a kvi_synth_params in this order —
 * preset (when given), then every explicit flag on top (--arch replaces the
 * preset's architecture; fields left 0 take the architecture's defaults in
 * kvi_synth_resolve) — and nothing is written unless every flag parsed; without
 * a preset, --dim --ffn --layers --heads are required (kv-heads defaults to
 * heads, vocab to 32000, ctx to 2048).
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void synth_help(FILE *f)
{
    fprintf(
        f, "usage: kvinfer synth --preset NAME -o FILE [options]\n"
           "       kvinfer synth [--arch A] --dim N --ffn N --layers N --heads N [--kv-heads N] [--vocab N]\n"
           "                     [--ctx N] -o FILE\n"
           "\n"
           "Writes a GGUF v3 model with random weights, with the metadata keys and tensors\n"
           "llama.cpp's converter writes for the architecture: matrices N(0, 0.02), norm\n"
           "weights 1 + N(0, 0.02) (Gemma's stored shifted by 1, as in its GGUF files).\n"
           "Each tensor's values come from a generator seeded by (seed, tensor name), so\n"
           "the same seed gives the same underlying weights whatever --type; they are then\n"
           "quantised. Norms stay f32. Matrices whose rows do not fit the type's block size\n"
           "are stored as q8_0 (or f16) instead, with a note. The file is written tensor by\n"
           "tensor.\n"
           "\n"
           "architectures (--arch; default llama):\n"
           "  llama    the plain block; rope.dimension_count, vocab_size\n"
           "  qwen2    + q/k/v biases; NeoX RoPE base 1e6\n"
           "  qwen3    per-head attn_q_norm / attn_k_norm [head_dim]; key_length; tied\n"
           "  gemma2   GeGLU, post-norms, soft-caps 50 / 30, window 4096 on even layers; tied\n"
           "  gemma3   gemma2 with q/k norms, no soft-caps, window 512 on 5 of 6 layers,\n"
           "           local RoPE base 10000, global 1e6; tied\n"
           "  phi3     fused attn_qkv and ffn_up [gate | up]; partial rotary (--rot);\n"
           "           LongRoPE factors with --rope-orig-ctx\n"
           "  granite  embedding 12, residual 0.22, attention 1/head_dim, logit 8 scales\n"
           "  olmo2    no pre-norms, post-norms, q/k norms over the whole projection\n"
           "  qwen3moe qwen3's attention, every FFN experts (softmax, top-k renormalised);\n"
           "           expert_feed_forward_length\n"
           "  olmoe    q/k norms over the whole projection, experts (softmax, top-k as is)\n"
           "  gpt-oss  attention biases and sinks, window 128 on even layers, YaRN 32,\n"
           "           biased router and experts, clamped SwiGLU\n"
           "  qwen35   hybrid: gated DeltaNet layers (a fixed-size state, no KV), every 4th\n"
           "           layer gated attention (q/k norms, partial NeoX RoPE); tied\n"
           "  qwen3next qwen35 with experts and a sigmoid-gated shared expert\n"
           "  mistral3 llama with a query temperature; YaRN with --rope-orig-ctx\n"
           "  smollm3  llama without RoPE on every 4th layer; tied\n"
           "  seed_oss q/k/v biases, NeoX RoPE base 1e7, the pre-FFN norm as post_attention_norm\n"
           "  apertus  q/k norms, ungated xIELU FFN (per-layer xielu.* arrays), rope_freqs\n"
           "  exaone4  no pre-norms, post-norms, q/k norms, rope_freqs; with 64 layers a\n"
           "           window (4096) on 3 of 4 layers, no RoPE on the others\n"
           "  cohere2  LayerNorm, parallel attention + FFN, window 4096 on 3 of 4 layers (no\n"
           "           RoPE on the others), logit scale 0.25; tied\n"
           "  glm4moe  q/k/v biases, q/k norms, partial RoPE, 1 dense layer, sigmoid routing\n"
           "           with a selection bias, scale 2.5, a shared expert, 1 MTP block\n"
           "  minimax-m2 q/k norms over the projection, sigmoid routing with a selection bias\n"
           "  hunyuan-moe q/k norms after RoPE, softmax routing, a shared expert; tied\n"
           "  ernie4_5-moe 1 dense layer, softmax routing with a selection bias, shared\n"
           "           experts; tied\n"
           "  bailingmoe2 fused attn_qkv, 1 dense layer, sigmoid routing in 4 groups (2\n"
           "           kept), scale 2.5, a shared expert\n"
           "  afmoe    attention output gate, post-norms, window 4096 on 3 of 4 layers, no\n"
           "           RoPE on the 4th, sigmoid routing, scale 2.826; tied\n"
           "  qwen35moe qwen35 with qwen3next's experts, 1 MTP block\n"
           "  (llama with --experts is the Mixtral layout)\n"
           "\n"
           "options:\n"
           "  --preset NAME       start from a preset (shape flags below override it)\n"
           "  -o, --output FILE   the GGUF to write (required)\n"
           "  --arch A            the architecture (above)\n"
           "  --type T            matrix type: f32 (default), f16, bf16, q8_0, q4_0, q4_1,\n"
           "                      q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl,\n"
           "                      iq4_xs, mxfp4, or llama.cpp's\n"
           "                      q4_k_m / q5_k_m mixes (any case)\n"
           "  --seed S            weight seed (default 1)\n"
           "  --vocab-from FILE   a GGUF: copy its tokenizer.* metadata and take its vocab;\n"
           "                      a tokenizer.json (byte-level BPE: Llama 3, Qwen): write\n"
           "                      it as GGUF tokenizer metadata (default: a generated\n"
           "                      SentencePiece-style vocabulary of --vocab tokens)\n"
           "  --name NAME         general.name (default: the preset's name or kvinfer-synth)\n"
           "  --dim N --ffn N --layers N --heads N --kv-heads N --vocab N --ctx N\n"
           "                      the shape: embedding, feed-forward, block count, attention\n"
           "                      heads, key/value heads, vocabulary size, context length\n"
           "  --head-dim N        per-head width (default dim / heads)\n"
           "  --rot N             rotated dims per head (default head-dim)\n"
           "  --window N          gemma2/3: sliding window of the local layers\n"
           "  --window-pattern P  gemma2/3: layer l local when l %% P < P - 1 (llama.cpp\n"
           "                      assumes 2 for gemma2, 6 for gemma3)\n"
           "  --tied, --untied    output matrix = token embedding, or one of its own\n"
           "  --rope-base F       rope.freq_base\n"
           "  --rope-linear F     gemma3: linear RoPE scaling of the global layers\n"
           "  --rope-orig-ctx N   phi3: LongRoPE, gpt-oss / mistral3: YaRN (factor ctx / N) for an original\n"
           "                      context of N (< ctx)\n"
           "  --experts N         a mixture of N experts in every layer's FFN\n"
           "  --experts-used K    experts chosen per token (default 2)\n"
           "  --expert-ffn N      one expert's width (default --ffn)\n"
           "  --ssm-groups N --ssm-heads N --ssm-state N --attn-interval N\n"
           "                      qwen35/qwen3next: DeltaNet key heads (default 16), value\n"
           "                      heads (default = key heads), their dims (128), and every\n"
           "                      N-th layer attention (4)\n"
           "  --shared-ffn N      qwen3next: the shared expert's width (default --ffn)\n"
           "  --moe-step N        llama4: every N-th layer experts + a shared expert (default 1)\n"
           "  --head-dim-global N --kv-heads-global N --k-eq-v 1 --ple-dim N\n"
           "  --shared-kv-layers N --ffn-shared N\n"
           "                      gemma4: global layers' head dim (2 x --head-dim) and KV heads\n"
           "                      (--kv-heads), global layers without attn_v, per-layer input\n"
           "                      width (0), the last N layers reading earlier layers' K/V and\n"
           "                      their FFN width (--ffn)\n"
           "  -h, --help          this help\n"
           "\n"
           "presets (arch, dim, ffn, layers, heads, kv heads, head dim, vocab, ctx):\n");
    const char *const *names = kvi_synth_preset_names();
    for (int i = 0; names && names[i]; i++) {
        kvi_synth_params p, r;
        if (kvi_synth_preset(names[i], &p) != 0 || kvi_synth_resolve(&p, &r) != 0) continue;
        fprintf(f, "  %-14s %-8s %5d %5d %3d %3d %3d %4d %6d %6d", names[i], r.arch, r.dim, r.ffn_dim,
                r.n_layers, r.n_heads, r.n_kv_heads, r.head_dim, r.n_vocab, r.n_ctx);
        if (r.n_rot != r.head_dim) fprintf(f, ", rotary %d", r.n_rot);
        if (!strcmp(r.arch, "gemma2") || !strcmp(r.arch, "gemma3") || !strcmp(r.arch, "cohere2") ||
            !strcmp(r.arch, "exaone4"))
            fprintf(f, ", window %d / %d", r.window, r.window_pattern);
        if (r.rope_orig_ctx) fprintf(f, ", LongRoPE from %d", r.rope_orig_ctx);
        if (r.tie > 0) fprintf(f, ", tied");
        if (r.n_expert > 0)
            fprintf(f, ", %d experts x %d, %d used", r.n_expert, r.expert_ffn, r.n_expert_used);
        if (r.ssm_heads > 0)
            fprintf(f, ", DeltaNet %d/%d heads of %d, attention every %d", r.ssm_groups, r.ssm_heads,
                    r.ssm_state, r.attn_interval);
        fputc('\n', f);
    }
    fprintf(f, "\nexamples: kvinfer synth --preset stories15M --type q8_0 -o s15m-q8.gguf\n"
               "          kvinfer synth --preset gemma-3-1b --type q4_k_m -o gemma3-1b.gguf\n"
               "          kvinfer synth --preset tiny --arch olmo2 -o olmo2-tiny.gguf\n");
}

/* The library's notices (a matrix stored in another type), one line each. */
static void synth_notice(void *user, const char *msg)
{
    (void)user;
    fprintf(stderr, "%s\n", msg);
}

/* A progress line, rewritten in place, only on a terminal and for files over
 * 64 MiB; a newline after the last tensor. */
static void synth_progress(void *user, size_t done, size_t total, size_t bytes_done, size_t bytes_total)
{
    (void)user;
    if (!isatty(fileno(stderr)) || bytes_total <= (64u << 20)) return;
    fprintf(stderr, "\rsynth: %zu/%zu tensors, %zu of %zu MiB", done, total, bytes_done >> 20,
            bytes_total >> 20);
    if (done == total) fputc('\n', stderr);
}

/* A shape flag: its name and where its value goes. */
typedef struct synth_flag {
    const char *name;
    int *dst;
    bool set;
} synth_flag;

int cmd_synth(int argc, char **argv)
{
    kvi_synth_params p;
    memset(&p, 0, sizeof p);
    p.type = KVI_TYPE_F32;
    p.seed = 1;
    const char *preset = NULL, *out = NULL, *type = NULL, *name = NULL;
    int dim = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0, ctx = 0;
    int head_dim = 0, rot = 0, window = 0, pattern = 0, orig_ctx = 0, tie = 0;
    int experts = 0, experts_used = 0, expert_ffn = 0;
    int ssm_groups = 0, ssm_heads = 0, ssm_state = 0, attn_interval = 0, shared_ffn = 0;
    const char *arch = NULL, *rope_base = NULL, *rope_linear = NULL;
    int extra[7] = { 0 }; /* llama4 / gemma4 fields (kvi_synth_params) */
    synth_flag shape[] = {
        { "--dim", &dim, false },
        { "--ffn", &ffn, false },
        { "--layers", &layers, false },
        { "--heads", &heads, false },
        { "--kv-heads", &kv_heads, false },
        { "--vocab", &vocab, false },
        { "--ctx", &ctx, false },
        { "--head-dim", &head_dim, false },
        { "--rot", &rot, false },
        { "--window", &window, false },
        { "--window-pattern", &pattern, false },
        { "--rope-orig-ctx", &orig_ctx, false },
        { "--experts", &experts, false },
        { "--experts-used", &experts_used, false },
        { "--expert-ffn", &expert_ffn, false },
        { "--ssm-groups", &ssm_groups, false },
        { "--ssm-heads", &ssm_heads, false },
        { "--ssm-state", &ssm_state, false },
        { "--attn-interval", &attn_interval, false },
        { "--shared-ffn", &shared_ffn, false },
        { "--moe-step", &extra[0], false },
        { "--head-dim-global", &extra[1], false },
        { "--kv-heads-global", &extra[2], false },
        { "--k-eq-v", &extra[3], false },
        { "--ple-dim", &extra[4], false },
        { "--shared-kv-layers", &extra[5], false },
        { "--ffn-shared", &extra[6], false },
    };
    const size_t n_shape = sizeof shape / sizeof shape[0];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            synth_help(stdout);
            return 0;
        }
        size_t k = 0;
        for (; k < n_shape; k++)
            if (!strcmp(a, shape[k].name)) break;
        if (k < n_shape) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return 1;
            int64_t x;
            if (!cli_parse_i64(v, 1, 1 << 24, &x))
                return cli_error("%s needs a whole number in 1..16777216, got '%s'", a, v);
            *shape[k].dst = (int)x;
            shape[k].set = true;
            continue;
        }
        const char **str = !strcmp(a, "--preset")                         ? &preset
                           : (!strcmp(a, "-o") || !strcmp(a, "--output")) ? &out
                           : !strcmp(a, "--type")                         ? &type
                           : !strcmp(a, "--vocab-from")                   ? &p.vocab_from
                           : !strcmp(a, "--name")                         ? &name
                           : !strcmp(a, "--arch")                         ? &arch
                           : !strcmp(a, "--rope-base")                    ? &rope_base
                           : !strcmp(a, "--rope-linear")                  ? &rope_linear
                                                                          : NULL;
        if (str) {
            if (!(*str = cli_flag_value(argc, argv, &i))) return 1;
            continue;
        }
        if (!strcmp(a, "--tied") || !strcmp(a, "--untied")) {
            tie = !strcmp(a, "--tied") ? 1 : -1;
            continue;
        }
        if (!strcmp(a, "--seed")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return 1;
            if (!cli_parse_u64(v, &p.seed))
                return cli_error("--seed needs an unsigned 64-bit number, got '%s'", v);
            continue;
        }
        return cli_error("synth: unknown option '%s' (kvinfer synth --help)", a);
    }

    if (!out) return cli_error("synth: no output file (-o FILE)");
    if (preset) {
        const char *vf = p.vocab_from;
        uint64_t seed = p.seed;
        if (kvi_synth_preset(preset, &p) != 0) {
            char list[512] = "";
            const char *const *names = kvi_synth_preset_names();
            for (int i = 0; names && names[i]; i++) {
                if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, names[i], sizeof list - strlen(list) - 1);
            }
            return cli_error("synth: unknown preset '%s' (presets: %s)", preset, list);
        }
        p.vocab_from = vf;
        p.seed = seed;
    } else {
        const char *missing = !shape[0].set   ? "--dim"
                              : !shape[1].set ? "--ffn"
                              : !shape[2].set ? "--layers"
                              : !shape[3].set ? "--heads"
                                              : NULL;
        if (missing)
            return cli_error("synth: without --preset, %s is required (kvinfer synth --help)", missing);
        p.n_kv_heads = heads;
        p.n_vocab = 32000;
        p.n_ctx = 2048;
        p.name = "kvinfer-synth";
    }
    if (shape[0].set) p.dim = dim;
    if (shape[1].set) p.ffn_dim = ffn;
    if (shape[2].set) p.n_layers = layers;
    if (shape[3].set) p.n_heads = heads;
    if (shape[4].set)
        p.n_kv_heads = kv_heads;
    else if (shape[3].set && p.n_kv_heads > p.n_heads)
        p.n_kv_heads = p.n_heads;
    if (shape[5].set) p.n_vocab = vocab;
    if (shape[6].set) p.n_ctx = ctx;
    if (shape[5].set && p.vocab_from)
        fprintf(stderr, "synth: note: --vocab is ignored, the vocabulary of %s decides\n", p.vocab_from);
    if (name) p.name = name;
    if (arch) {
        const char *const *an = kvi_synth_arch_names();
        int k = 0;
        while (an[k] && strcmp(an[k], arch) != 0) k++;
        if (!an[k])
            return cli_error(
                "synth: unknown --arch '%s' (llama, qwen2, qwen3, gemma2, gemma3, phi3, granite, "
                "olmo2, qwen3moe, olmoe, gpt-oss, qwen35, qwen3next, mistral3, smollm3, seed_oss, "
                "apertus, exaone4, cohere2, glm4moe, minimax-m2, hunyuan-moe, ernie4_5-moe, "
                "bailingmoe2, afmoe, qwen35moe, llama4, gemma4)",
                arch);
        p.arch = an[k];
    }
    if (shape[7].set) p.head_dim = head_dim;
    if (shape[8].set) p.n_rot = rot;
    if (shape[9].set) p.window = window;
    if (shape[10].set) p.window_pattern = pattern;
    if (shape[11].set) p.rope_orig_ctx = orig_ctx;
    if (tie) p.tie = tie;
    if (shape[12].set) p.n_expert = experts;
    if (shape[13].set) p.n_expert_used = experts_used;
    if (shape[14].set) p.expert_ffn = expert_ffn;
    if (shape[15].set) p.ssm_groups = ssm_groups;
    if (shape[16].set) p.ssm_heads = ssm_heads;
    if (shape[17].set) p.ssm_state = ssm_state;
    if (shape[18].set) p.attn_interval = attn_interval;
    if (shape[19].set) p.shared_ffn = shared_ffn;
    int *const xf[7] = { &p.moe_step, &p.head_dim_global,  &p.n_kv_heads_global, &p.k_eq_v,
                         &p.ple_dim,  &p.shared_kv_layers, &p.ffn_dim_shared };
    for (int i = 0; i < 7; i++)
        if (shape[20 + i].set) *xf[i] = extra[i];
    if (p.n_expert > 0 && p.n_expert_used == 0) p.n_expert_used = p.n_expert < 2 ? p.n_expert : 2;
    if (rope_base && (!cli_parse_f32(rope_base, &p.rope_base) || !(p.rope_base > 0)))
        return cli_error("--rope-base needs a positive number, got '%s'", rope_base);
    if (rope_linear && (!cli_parse_f32(rope_linear, &p.rope_linear) || !(p.rope_linear > 0)))
        return cli_error("--rope-linear needs a positive number, got '%s'", rope_linear);
    if (type) {
        const size_t tl = strlen(type);
        char base[16];
        p.mix_m = tl == 6 && (type[5] == 'm' || type[5] == 'M') && type[4] == '_';
        snprintf(base, sizeof base, "%.*s", (int)(p.mix_m ? 4 : tl), type);
        if (kvi_type_from_name(base, &p.type) != 0 ||
            (p.mix_m && p.type != KVI_TYPE_Q4_K && p.type != KVI_TYPE_Q5_K))
            return cli_error(
                "synth: unknown --type '%s' (f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_m, q6_k, ...)", type);
    }

    char vocab_desc[64];
    if (p.vocab_from)
        snprintf(vocab_desc, sizeof vocab_desc, "vocab from --vocab-from");
    else
        snprintf(vocab_desc, sizeof vocab_desc, "vocab %d", p.n_vocab);
    p.notice = synth_notice;
    p.progress = synth_progress;
    kvi_error err = { 0 };
    const double t0 = kvi_time_ms();
    int rc = kvi_synth_write(&p, out, &err);
    if (rc != 0) return cli_error("%s", err.msg[0] ? err.msg : kvi_strerror(rc));
    /* Described only after success, so that a failure is exactly one error line. */
    kvi_synth_params r;
    if (kvi_synth_resolve(&p, &r) != 0) r = p;
    fprintf(
        stderr,
        "synth: wrote %s: %s, dim %d, ffn %d, %d layers, %d heads (%d kv) x %d, %s, ctx %d, %s%s, seed %llu "
        "in %.1f s\n",
        out, r.arch ? r.arch : "llama", r.dim, r.ffn_dim, r.n_layers, r.n_heads, r.n_kv_heads, r.head_dim,
        vocab_desc, r.n_ctx, kvi_type_name(r.type) ? kvi_type_name(r.type) : "?", r.mix_m ? "_m" : "",
        (unsigned long long)r.seed, (kvi_time_ms() - t0) / 1000.0);
    if (r.n_expert > 0)
        fprintf(stderr, "synth: %d experts of width %d in every layer, %d chosen per token\n", r.n_expert,
                r.expert_ffn, r.n_expert_used);
    return 0;
}
