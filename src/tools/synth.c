/*
 * synth.c — synthetic llama-architecture GGUF files with random weights, for
 * benchmarks and tests of shapes no trained model in ../shared has.
 *
 * Data structure: a table of synth_tensor descriptions (name, GGUF dims, element
 * type, norm or matrix), built from the hyper-parameters in llama.cpp's order:
 * token_embd, blk.0..N-1.{attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output. Dims are GGUF's:
 * ne[0] is the row length (the input side of a matrix), ne[1] the rows.
 *
 * Invariants:
 *   - the f32 values of a tensor depend only on (seed, tensor name): each tensor
 *     has its own generator seeded from both, so every --type stores the same
 *     underlying weights, quantised;
 *   - matrices are N(0, 0.02), norm weights 1 + N(0, 0.02); never all zero;
 *   - a matrix whose row length is not a multiple of the type's block falls back
 *     to Q8_0 (row length % 32 == 0) or F16, with a notice (kvi_synth_params
 *     notice; the library never prints: the CLI prints notices and progress);
 *   - the file is streamed: one tensor's quantised bytes plus one f32 row are in
 *     memory at a time, never the whole model;
 *   - on any failure the partial output file is removed.
 */
#include "base/error.h"
#include "formats/gguf.h"
#include "kvinfer.h"
#include "formats/quant.h"
#include "base/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- presets ---- */

typedef struct synth_preset {
    const char *name;
    int dim, ffn_dim, n_layers, n_heads, n_kv_heads, n_vocab, n_ctx;
} synth_preset;

static const synth_preset k_presets[] = {
    /* the shape of stories260K (../shared/models/stories260K.gguf) */
    { "tiny", 64, 172, 5, 8, 4, 512, 512 },
    /* the shape of ../shared/golden/quant/qtest-*.gguf */
    { "qtest", 256, 768, 4, 8, 4, 512, 512 },
    { "stories15M", 288, 768, 6, 6, 6, 32000, 256 },
    { "stories42M", 512, 1376, 8, 8, 8, 32000, 1024 },
    { "stories110M", 768, 2048, 12, 12, 12, 32000, 1024 },
    { "llama-1b", 2048, 8192, 16, 32, 8, 32000, 2048 },
};
#define N_PRESETS (sizeof k_presets / sizeof k_presets[0])

static const char *const k_preset_names[N_PRESETS + 1] = {
    "tiny", "qtest", "stories15M", "stories42M", "stories110M", "llama-1b", NULL,
};

const char *const *kvi_synth_preset_names(void) { return k_preset_names; }

static int ascii_casecmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        int ca = (unsigned char)*a, cb = (unsigned char)*b;
        if (ca >= 'A' && ca <= 'Z') ca += 32;
        if (cb >= 'A' && cb <= 'Z') cb += 32;
        if (ca != cb || ca == 0) return ca - cb;
    }
}

int kvi_synth_preset(const char *name, kvi_synth_params *p)
{
    if (!name || !p) return KVI_E_INVALID;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const synth_preset *s = &k_presets[i];
        if (ascii_casecmp(name, s->name) != 0) continue;
        memset(p, 0, sizeof *p);
        p->dim = s->dim;
        p->ffn_dim = s->ffn_dim;
        p->n_layers = s->n_layers;
        p->n_heads = s->n_heads;
        p->n_kv_heads = s->n_kv_heads;
        p->n_vocab = s->n_vocab;
        p->n_ctx = s->n_ctx;
        p->type = KVI_TYPE_F32;
        p->seed = 1;
        p->vocab_from = NULL;
        p->name = s->name;
        return KVI_OK;
    }
    return KVI_E_INVALID;
}

/* ---- the random weights ---- */

/* Normal deviates by the Box-Muller transform, two per 64-bit draw; the spare
 * carries over between calls so a tensor's stream does not depend on row size. */
typedef struct synth_normal {
    rng_state rng;
    float spare;
    int has_spare;
} synth_normal;

/* The generator of one tensor: seeded from the model seed and the tensor's name. */
static void synth_normal_init(synth_normal *g, uint64_t seed, const char *name)
{
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a of the name */
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) h = (h ^ *c) * 0x100000001B3ull;
    uint64_t x = seed;
    rng_seed(&g->rng, rng_splitmix64(&x) ^ h);
    g->has_spare = 0;
    g->spare = 0.0f;
}

static void synth_normal_fill(synth_normal *g, float *dst, int64_t n, float mean, float std)
{
    int64_t i = 0;
    if (n > 0 && g->has_spare) {
        dst[i++] = mean + std * g->spare;
        g->has_spare = 0;
    }
    for (; i < n; i += 2) {
        uint64_t r = rng_next(&g->rng);
        /* u1 in (0, 1] (log is finite), u2 in [0, 1), 24 bits each */
        float u1 = (float)((r >> 40) + 1) * (1.0f / 16777216.0f);
        float u2 = (float)((r >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
        float rad = sqrtf(-2.0f * logf(u1));
        float th = 6.28318530718f * u2;
        dst[i] = mean + std * rad * cosf(th);
        float z1 = rad * sinf(th);
        if (i + 1 < n) {
            dst[i + 1] = mean + std * z1;
        } else {
            g->spare = z1;
            g->has_spare = 1;
        }
    }
}

/* ---- the tensor table ---- */

typedef struct synth_tensor {
    char name[64];
    int64_t ne[2];   /* GGUF dims: ne[0] row length, ne[1] rows (1 for a norm) */
    uint32_t n_dims; /* 1 for norms, 2 for matrices */
    kvi_type type;
    bool is_norm;
} synth_tensor;

/* llama.cpp's LLAMA_FTYPE_MOSTLY_* for a file whose matrices are all `t`
 * ("pure" K types take the _S number, as llama-quantize --pure writes them). */
static int synth_file_type(kvi_type t)
{
    switch (t) {
    case KVI_TYPE_F32: return 0;
    case KVI_TYPE_F16: return 1;
    case KVI_TYPE_Q4_0: return 2;
    case KVI_TYPE_Q4_1: return 3;
    case KVI_TYPE_Q8_0: return 7;
    case KVI_TYPE_Q5_0: return 8;
    case KVI_TYPE_Q5_1: return 9;
    case KVI_TYPE_Q2_K: return 10;
    case KVI_TYPE_Q3_K: return 11;
    case KVI_TYPE_Q4_K: return 14;
    case KVI_TYPE_Q5_K: return 16;
    case KVI_TYPE_Q6_K: return 18;
    case KVI_TYPE_IQ4_NL: return 25;
    case KVI_TYPE_IQ4_XS: return 30;
    case KVI_TYPE_BF16: return 32;
    default: return -1;
    }
}

/* The stored type of a matrix with rows of n elements, and a note when it differs. */
static kvi_type synth_matrix_type(kvi_type want, int64_t n)
{
    int64_t blk = quant_block_elems(want);
    if (blk > 0 && n % blk == 0) return want;
    if (n % QK8_0 == 0) return KVI_TYPE_Q8_0;
    return KVI_TYPE_F16;
}

static void synth_add(synth_tensor *t, size_t *n, const char *name, int64_t ne0, int64_t ne1, bool is_norm,
                      kvi_type want)
{
    synth_tensor *d = &t[(*n)++];
    snprintf(d->name, sizeof d->name, "%s", name);
    d->ne[0] = ne0;
    d->ne[1] = ne1;
    d->n_dims = is_norm ? 1 : 2;
    d->is_norm = is_norm;
    d->type = is_norm ? KVI_TYPE_F32 : synth_matrix_type(want, ne0);
}

/* One notice per row length that could not take the requested type, naming
 * the matrices (their role: "attn_q" stands for every layer's); nothing when p
 * has no notice callback. */
static void synth_note_fallbacks(const kvi_synth_params *p, const synth_tensor *t, size_t n)
{
    const kvi_type want = p->type;
    int64_t done[2] = { 0, 0 }; /* row lengths already reported (dim and ffn at most) */
    for (size_t i = 0; p->notice && i < n; i++) {
        if (t[i].is_norm || t[i].type == want || t[i].ne[0] == done[0] || t[i].ne[0] == done[1]) continue;
        if (!strcmp(t[i].name, "output.weight") && t[i].type == KVI_TYPE_Q6_K) continue; /* deliberate */
        const int64_t len = t[i].ne[0];
        char roles[256] = "";
        for (size_t j = i; j < n; j++) {
            if (t[j].is_norm || t[j].type == want || t[j].ne[0] != len) continue;
            const char *nm = t[j].name;
            if (!strncmp(nm, "blk.", 4)) {
                if (strncmp(nm, "blk.0.", 6) != 0) continue;
                nm += 6;
            }
            size_t rl = strcspn(nm, ".");
            size_t used = strlen(roles);
            if (used + rl + 3 < sizeof roles)
                snprintf(roles + used, sizeof roles - used, "%s%.*s", used ? ", " : "", (int)rl, nm);
        }
        char msg[512];
        snprintf(msg, sizeof msg,
                 "synth: note: rows of %lld are not a multiple of %s's block of %lld: %s stored as %s",
                 (long long)len, kvi_type_name(want), (long long)quant_block_elems(want), roles,
                 kvi_type_name(t[i].type));
        p->notice(p->user, msg);
        done[done[0] ? 1 : 0] = len;
    }
}

/* Fills t (room for 3 + 9 * n_layers) in file order; returns the count. */
static size_t synth_build_table(const kvi_synth_params *p, int n_vocab, synth_tensor *t)
{
    const int64_t dim = p->dim, ffn = p->ffn_dim;
    const int64_t kv_dim = (int64_t)p->dim / p->n_heads * p->n_kv_heads;
    size_t n = 0;
    char nm[64];
    synth_add(t, &n, "token_embd.weight", dim, n_vocab, false, p->type);
    for (int l = 0; l < p->n_layers; l++) {
#define BLK(suffix, ne0, ne1, norm)                         \
    snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", l); \
    synth_add(t, &n, nm, ne0, ne1, norm, p->type)
        BLK("attn_norm", dim, 1, true);
        BLK("attn_q", dim, dim, false);
        BLK("attn_k", dim, kv_dim, false);
        BLK("attn_v", dim, kv_dim, false);
        BLK("attn_output", dim, dim, false);
        BLK("ffn_norm", dim, 1, true);
        BLK("ffn_gate", dim, ffn, false);
        BLK("ffn_up", dim, ffn, false);
        BLK("ffn_down", ffn, dim, false);
#undef BLK
    }
    synth_add(t, &n, "output_norm.weight", dim, 1, true, p->type);
    synth_add(t, &n, "output.weight", dim, n_vocab, false, p->type);
    /* llama.cpp's Q4_0 file type keeps the output matrix in Q6_K (its quantiser's
     * default, and what ../shared/golden/quant/qtest-q4_0.gguf holds): do the same,
     * so benchmarks against llama.cpp's Q4_0 files compare like with like. */
    if (p->type == KVI_TYPE_Q4_0 && dim % QK_K == 0) t[n - 1].type = KVI_TYPE_Q6_K;
    return n;
}

/* ---- the generated SentencePiece-style vocabulary ---- */

#define SYNTH_N_SPECIAL 3  /* <unk> <s> </s> */
#define SYNTH_N_BYTES 256  /* <0x00> .. <0xFF> */
#define SYNTH_PIECE_MAX 24 /* bytes per generated piece, NUL included */

/* The k-th synthetic piece: "▁" alone, then for L = 1, 2, ...: every word of L
 * letters with the "▁" word-start prefix, then without it, letters in English
 * frequency order. All pieces differ, and every prefix of a piece of length L
 * (with or without "▁") occurs earlier, so SentencePiece merges can build it. */
static void synth_piece(uint64_t k, char *out)
{
    static const char letters[] = "etaoinshrdlcumwfgypbvkjxqz";
    if (k == 0) {
        memcpy(out, "\xE2\x96\x81", 4);
        return;
    }
    k -= 1;
    uint64_t group = 26; /* 26^L */
    int len = 1;
    while (k >= 2 * group && len < 12) {
        k -= 2 * group;
        group *= 26;
        len++;
    }
    char *o = out;
    if (k < group) { /* prefixed half */
        memcpy(o, "\xE2\x96\x81", 3);
        o += 3;
    } else {
        k -= group;
    }
    for (int i = len - 1; i >= 0; i--) {
        o[i] = letters[k % 26];
        k /= 26;
    }
    o[len] = 0;
}

static int synth_vocab_generated(gguf_writer *w, int n_vocab, kvi_error *err)
{
    const size_t n = (size_t)n_vocab;
    char *text = malloc(n * SYNTH_PIECE_MAX);
    const char **tok = malloc(n * sizeof *tok);
    float *score = malloc(n * sizeof *score);
    int32_t *ttype = malloc(n * sizeof *ttype);
    int rc = KVI_OK;
    if (!text || !tok || !score || !ttype) {
        rc = err_set(err, KVI_E_NOMEM, "synth: no memory for a vocabulary of %d tokens", n_vocab);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char *s = text + i * SYNTH_PIECE_MAX;
        tok[i] = s;
        score[i] = 0.0f;
        if (i == 0) {
            strcpy(s, "<unk>");
            ttype[i] = 2;
        } else if (i == 1) {
            strcpy(s, "<s>");
            ttype[i] = 3;
        } else if (i == 2) {
            strcpy(s, "</s>");
            ttype[i] = 3;
        } else if (i < SYNTH_N_SPECIAL + SYNTH_N_BYTES) {
            snprintf(s, SYNTH_PIECE_MAX, "<0x%02X>", (unsigned)(i - SYNTH_N_SPECIAL));
            ttype[i] = 6;
        } else {
            uint64_t k = i - SYNTH_N_SPECIAL - SYNTH_N_BYTES;
            synth_piece(k, s);
            score[i] = -(float)k; /* earlier pieces merge first */
            ttype[i] = 1;
        }
    }
    if (gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") < 0 ||
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, n) < 0 ||
        gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", score, n) < 0 ||
        gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", ttype, n) < 0 ||
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1) < 0 ||
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2) < 0 ||
        gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0) < 0 ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true) < 0 ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false) < 0)
        rc = err_set(err, KVI_E_NOMEM, "synth: could not add the tokenizer metadata");
done:
    free(text);
    free(tok);
    free(score);
    free(ttype);
    return rc;
}

/* The token count of src's vocabulary (validated). */
static int synth_vocab_count(const gguf_ctx *src, const char *path, int *n_vocab, kvi_error *err)
{
    gguf_vtype et;
    uint64_t n = 0;
    int rc = gguf_get_arr_info(src, "tokenizer.ggml.tokens", &et, &n, err);
    if (rc == -1) return err_set(err, KVI_E_FORMAT, "synth: %s has no tokenizer.ggml.tokens", path);
    if (rc < 0) return rc;
    if (et != GGUF_T_STRING || n == 0 || n > (1u << 24))
        return err_set(err, KVI_E_FORMAT,
                       "synth: %s: tokenizer.ggml.tokens is not a string array of 1..2^24 entries", path);
    *n_vocab = (int)n;
    return KVI_OK;
}

/* Copies every tokenizer.* key of src. */
static int synth_vocab_copy(gguf_writer *w, const gguf_ctx *src, const char *path, kvi_error *err)
{
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *key = gguf_kv_key(src, i);
        if (!key || strncmp(key, "tokenizer.", 10) != 0) continue;
        int rc = gguf_writer_copy_kv(w, src, key);
        if (rc < 0) return err_set(err, rc, "synth: could not copy %s from %s", key, path);
    }
    return KVI_OK;
}

/* ---- validation ---- */

static int synth_check(const kvi_synth_params *p, kvi_error *err)
{
#define NEED(cond, ...) \
    if (!(cond)) return err_set(err, KVI_E_INVALID, __VA_ARGS__)
    NEED(p->dim > 0 && p->dim <= 65536, "synth: dim %d out of range 1..65536", p->dim);
    NEED(p->ffn_dim > 0 && p->ffn_dim <= 262144, "synth: ffn %d out of range 1..262144", p->ffn_dim);
    NEED(p->n_layers > 0 && p->n_layers <= 1024, "synth: layers %d out of range 1..1024", p->n_layers);
    NEED(p->n_heads > 0 && p->n_heads <= p->dim, "synth: heads %d out of range 1..dim", p->n_heads);
    NEED(p->dim % p->n_heads == 0, "synth: dim %d is not a multiple of heads %d", p->dim, p->n_heads);
    NEED((p->dim / p->n_heads) % 2 == 0, "synth: head dim %d must be even (RoPE rotates pairs)",
         p->dim / p->n_heads);
    NEED(p->n_kv_heads > 0 && p->n_kv_heads <= p->n_heads && p->n_heads % p->n_kv_heads == 0,
         "synth: kv-heads %d must divide heads %d", p->n_kv_heads, p->n_heads);
    NEED(p->n_ctx > 0 && p->n_ctx <= (1 << 24), "synth: ctx %d out of range 1..16777216", p->n_ctx);
    if (!p->vocab_from)
        NEED(p->n_vocab > SYNTH_N_SPECIAL + SYNTH_N_BYTES && p->n_vocab <= (1 << 22),
             "synth: vocab %d out of range %d..4194304 (3 special + 256 byte tokens + pieces)", p->n_vocab,
             SYNTH_N_SPECIAL + SYNTH_N_BYTES + 1);
    if (synth_file_type(p->type) < 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "synth: type %s is not supported for weights (use f32, f16, "
                       "bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl or iq4_xs)",
                       kvi_type_name(p->type) ? kvi_type_name(p->type) : "(unknown)");
#undef NEED
    return KVI_OK;
}

/* ---- writing ---- */

static int synth_set_metadata(gguf_writer *w, const kvi_synth_params *p, int n_vocab)
{
    const uint32_t head_dim = (uint32_t)(p->dim / p->n_heads);
    int bad = 0;
    bad |= gguf_writer_set_str(w, "general.architecture", "llama") < 0;
    bad |= gguf_writer_set_str(w, "general.name", p->name && p->name[0] ? p->name : "kvinfer-synth") < 0;
    bad |= gguf_writer_set_u32(w, "general.file_type", (uint32_t)synth_file_type(p->type)) < 0;
    /* llama.cpp's quantiser writes the version for every file type, f16/bf16 included */
    if (p->type != KVI_TYPE_F32) bad |= gguf_writer_set_u32(w, "general.quantization_version", 2) < 0;
    bad |= gguf_writer_set_u32(w, "llama.context_length", (uint32_t)p->n_ctx) < 0;
    bad |= gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)p->dim) < 0;
    bad |= gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)p->ffn_dim) < 0;
    bad |= gguf_writer_set_u32(w, "llama.block_count", (uint32_t)p->n_layers) < 0;
    bad |= gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)p->n_heads) < 0;
    bad |= gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)p->n_kv_heads) < 0;
    bad |= gguf_writer_set_u32(w, "llama.rope.dimension_count", head_dim) < 0;
    bad |= gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f) < 0;
    bad |= gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f) < 0;
    bad |= gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)n_vocab) < 0;
    return bad ? KVI_E_NOMEM : KVI_OK;
}

/* One kvi_synth_write in progress: what it holds and must free. */
typedef struct synth_job {
    const kvi_synth_params *p;
    gguf_ctx *src; /* p->vocab_from, or NULL */
    gguf_writer *w;
    int n_vocab;
    synth_tensor *tab; /* [3 + 9 * n_layers] the tensor table, n_t used */
    size_t n_t;
    size_t max_bytes;   /* the largest tensor in its stored type */
    size_t total_bytes; /* every tensor's bytes */
    int64_t max_row;    /* the longest row (ne0) */
    uint8_t *qbuf;      /* [max_bytes] one tensor in its stored type */
    float *row;         /* [max_row] one row of f32 weights */
} synth_job;

static void synth_job_free(synth_job *j)
{
    free(j->qbuf);
    free(j->row);
    free(j->tab);
    gguf_writer_free(j->w);
    if (j->src) gguf_close(j->src);
}

/* The vocabulary's source and size, then the metadata in llama.cpp's order:
 * general, arch, then tokenizer. */
static int synth_metadata(synth_job *j, kvi_error *err)
{
    const kvi_synth_params *p = j->p;
    int rc;
    if (p->vocab_from) {
        rc = gguf_open(p->vocab_from, true, &j->src, err);
        if (rc < 0) return rc;
        rc = synth_vocab_count(j->src, p->vocab_from, &j->n_vocab, err);
        if (rc < 0) return rc;
    }
    rc = synth_set_metadata(j->w, p, j->n_vocab);
    if (rc < 0) return err_set(err, rc, "synth: could not add the model metadata");
    return p->vocab_from ? synth_vocab_copy(j->w, j->src, p->vocab_from, err)
                         : synth_vocab_generated(j->w, j->n_vocab, err);
}

/* The tensor table (with notices of type fallbacks), each tensor declared to
 * the writer, and the buffers for the largest one. */
static int synth_tensors(synth_job *j, kvi_error *err)
{
    const kvi_synth_params *p = j->p;
    j->tab = calloc(3 + 9 * (size_t)p->n_layers, sizeof *j->tab);
    if (!j->tab) return err_set(err, KVI_E_NOMEM, "synth: no memory for the tensor table");
    j->n_t = synth_build_table(p, j->n_vocab, j->tab);
    synth_note_fallbacks(p, j->tab, j->n_t);
    for (size_t i = 0; i < j->n_t; i++) {
        const synth_tensor *t = &j->tab[i];
        size_t b = quant_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
        if (b == 0)
            return err_set(err, KVI_E_UNSUPPORTED, "synth: %s: no row size for type %s", t->name,
                           kvi_type_name(t->type));
        if (b > j->max_bytes) j->max_bytes = b;
        if (t->ne[0] > j->max_row) j->max_row = t->ne[0];
        j->total_bytes += b;
        int rc = gguf_writer_add_tensor(j->w, t->name, t->type, t->n_dims, t->ne);
        if (rc < 0) return err_set(err, rc, "synth: could not declare tensor %s", t->name);
    }
    j->qbuf = malloc(j->max_bytes);
    j->row = malloc((size_t)j->max_row * sizeof *j->row);
    if (!j->qbuf || !j->row)
        return err_set(err, KVI_E_NOMEM, "synth: no memory for a tensor of %zu bytes", j->max_bytes);
    return KVI_OK;
}

/* Every tensor's data after the header, generated and quantised one tensor at a
 * time; progress reported after each. */
static int synth_data(synth_job *j, FILE *f, kvi_error *err)
{
    const kvi_synth_params *p = j->p;
    size_t done_bytes = 0;
    for (size_t i = 0; i < j->n_t; i++) {
        const synth_tensor *t = &j->tab[i];
        const size_t rb = quant_row_bytes(t->type, t->ne[0]);
        synth_normal g;
        synth_normal_init(&g, p->seed, t->name);
        for (int64_t r = 0; r < t->ne[1]; r++) {
            synth_normal_fill(&g, j->row, t->ne[0], t->is_norm ? 1.0f : 0.0f, 0.02f);
            int rc = quant_quantize_row(t->type, j->row, j->qbuf + (size_t)r * rb, t->ne[0]);
            if (rc < 0)
                return err_set(err, rc, "synth: %s: quantisation to %s failed", t->name,
                               kvi_type_name(t->type));
        }
        int rc = gguf_writer_write_tensor(j->w, f, (int64_t)i, j->qbuf, err);
        if (rc < 0) return rc;
        done_bytes += rb * (size_t)t->ne[1];
        if (p->progress) p->progress(p->user, i + 1, j->n_t, done_bytes, j->total_bytes);
    }
    return KVI_OK;
}

int kvi_synth_write(const kvi_synth_params *p, const char *path, kvi_error *err)
{
    if (!p || !path || !path[0]) return err_set(err, KVI_E_INVALID, "synth: no parameters or no output path");
    int rc = synth_check(p, err);
    if (rc < 0) return rc;

    synth_job j = { .p = p, .n_vocab = p->n_vocab };
    FILE *f = NULL;
    bool created = false; /* path is ours to remove on failure */
    j.w = gguf_writer_create();
    if (!j.w) return err_set(err, KVI_E_NOMEM, "synth: no memory for the GGUF writer");
    rc = synth_metadata(&j, err);
    if (rc == 0) rc = synth_tensors(&j, err);
    if (rc == 0) {
        f = fopen(path, "wb");
        if (!f) rc = err_set(err, KVI_E_IO, "synth: cannot create %s", path);
    }
    if (rc == 0) {
        created = true;
        rc = gguf_writer_write_header(j.w, f, err);
    }
    if (rc == 0) rc = synth_data(&j, f, err);
    if (rc == 0) {
        const int closed = fclose(f);
        f = NULL;
        if (closed != 0) rc = err_set(err, KVI_E_IO, "synth: writing %s failed (disk full?)", path);
    }
    if (rc != 0) {
        if (f) fclose(f);
        if (created) remove(path);
    }
    synth_job_free(&j);
    return rc;
}
