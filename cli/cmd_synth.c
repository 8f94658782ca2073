/*
 * cmd_synth.c — `kvinfer synth`: writes a llama-architecture GGUF with random
 * weights (kvi_synth_write) from a preset, explicit shapes, or a preset with
 * some fields overridden.
 *
 * Invariant: the parameters are assembled in a kvi_synth_params in this order —
 * preset (when given), then every explicit flag on top — and nothing is written
 * unless every flag parsed; without a preset, --dim --ffn --layers --heads are
 * required (kv-heads defaults to heads, vocab to 32000, ctx to 2048).
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void synth_help(FILE *f)
{
    fprintf(f, "usage: kvinfer synth --preset NAME -o FILE [options]\n"
               "       kvinfer synth --dim N --ffn N --layers N --heads N [--kv-heads N] [--vocab N] [--ctx "
               "N] -o FILE\n"
               "\n"
               "Writes a GGUF v3 model of architecture llama with random weights: matrices\n"
               "N(0, 0.02), norm weights 1 + N(0, 0.02). Each tensor's values come from a\n"
               "generator seeded by (seed, tensor name), so the same seed gives the same\n"
               "underlying weights whatever --type; they are then quantised. Norms stay f32.\n"
               "Matrices whose rows do not fit the type's block size are stored as q8_0\n"
               "(or f16) instead, with a note. The file is written tensor by tensor.\n"
               "\n"
               "options:\n"
               "  --preset NAME       start from a preset shape (shape flags below override it)\n"
               "  -o, --output FILE   the GGUF to write (required)\n"
               "  --type T            matrix type: f32 (default), f16, bf16, q8_0, q4_0, q4_1,\n"
               "                      q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl,\n"
               "                      iq4_xs (any case)\n"
               "  --seed S            weight seed (default 1)\n"
               "  --vocab-from GGUF   copy that file's tokenizer.* metadata and take its vocab\n"
               "                      size (default: a generated SentencePiece-style vocabulary)\n"
               "  --name NAME         general.name (default: the preset's name or kvinfer-synth)\n"
               "  --dim N --ffn N --layers N --heads N --kv-heads N --vocab N --ctx N\n"
               "                      the shape: embedding, feed-forward, block count, attention\n"
               "                      heads, key/value heads, vocabulary size, context length\n"
               "  -h, --help          this help\n"
               "\n"
               "presets (dim, ffn, layers, heads, kv heads, vocab, ctx):\n");
    const char *const *names = kvi_synth_preset_names();
    for (int i = 0; names && names[i]; i++) {
        kvi_synth_params p;
        if (kvi_synth_preset(names[i], &p) != 0) continue;
        fprintf(f, "  %-12s %5d %6d %3d %3d %3d %6d %5d\n", names[i], p.dim, p.ffn_dim, p.n_layers, p.n_heads,
                p.n_kv_heads, p.n_vocab, p.n_ctx);
    }
    fprintf(f, "\nexample: kvinfer synth --preset stories15M --type q8_0 -o s15m-q8.gguf\n");
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
    synth_flag shape[] = {
        { "--dim", &dim, false },     { "--ffn", &ffn, false },           { "--layers", &layers, false },
        { "--heads", &heads, false }, { "--kv-heads", &kv_heads, false }, { "--vocab", &vocab, false },
        { "--ctx", &ctx, false },
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
                                                                          : NULL;
        if (str) {
            if (!(*str = cli_flag_value(argc, argv, &i))) return 1;
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
    if (type && kvi_type_from_name(type, &p.type) != 0)
        return cli_error("synth: unknown --type '%s' (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, ...)", type);

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
    fprintf(
        stderr,
        "synth: wrote %s: dim %d, ffn %d, %d layers, %d heads (%d kv), %s, ctx %d, %s, seed %llu in %.1f s\n",
        out, p.dim, p.ffn_dim, p.n_layers, p.n_heads, p.n_kv_heads, vocab_desc, p.n_ctx,
        kvi_type_name(p.type) ? kvi_type_name(p.type) : "?", (unsigned long long)p.seed,
        (kvi_time_ms() - t0) / 1000.0);
    return 0;
}
