/*
 * tokenizer_gguf.c — building a tok_tokenizer from GGUF tokenizer.* metadata.
 *
 * tokenizer.ggml.model selects the algorithm: "llama" (SentencePiece: tokens,
 * scores, token_type; dummy-prefix space unless tokenizer.ggml.add_space_prefix is
 * false; spaces as U+2581) or "gpt2" (byte-level BPE: tokens, token_type, merges in
 * rank order, pre-tokenizer regexes named by tokenizer.ggml.pre; "gemma4" is BPE
 * over raw UTF-8), or "bert" (WordPiece: word-initial pieces stored as "▁the",
 * continuations bare; llama.cpp's defaults BOS = [CLS] 101, UNK 100, SEP 102
 * (tokenizer.ggml.seperator_token_id, llama.cpp's spelling), add_bos, add_sep;
 * tokenizer.ggml.normalizer.lowercase / .strip_accents, true when absent).
 * Array lengths must agree with the token count; every special id
 * (BOS, EOS, EOT, EOM, UNK, PAD, SEP, FIM pad/repo/separator) must be inside the
 * vocabulary. The end-of-generation set follows llama.cpp (tok_finish).
 */
#include "base/error.h"
#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

/* Reads an optional integer id key into *id (kept when absent). */
static int get_id(const gguf_ctx *g, const char *key, int32_t n_vocab, int32_t *id, kvi_error *err)
{
    int64_t v;
    int rc = gguf_get_int(g, key, &v, err);
    if (rc == -1) return 0;
    if (rc < 0) return rc;
    if (v == 0xFFFFFFFFll) v = -1; /* uint32 written for "none" */
    if (v < -1 || v >= n_vocab)
        return err_set(err, KVI_E_FORMAT, "tokenizer: %s = %lld outside the vocabulary of %d tokens", key,
                       (long long)v, (int)n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int get_flag(const gguf_ctx *g, const char *key, bool *flag, kvi_error *err)
{
    bool b;
    int rc = gguf_get_bool(g, key, &b, err);
    if (rc == -1) return 0;
    if (rc < 0) return rc;
    *flag = b;
    return 0;
}

/* Reads a string array key fully: pointers into g and lengths (malloc'd arrays). */
static int get_str_array(const gguf_ctx *g, const char *key, uint64_t n, const char ***strs, size_t **lens,
                         kvi_error *err)
{
    *strs = malloc((n ? n : 1) * sizeof **strs);
    *lens = malloc((n ? n : 1) * sizeof **lens);
    if (!*strs || !*lens) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory reading %s", key);
    for (uint64_t i = 0; i < n; i++) {
        (*strs)[i] = gguf_get_arr_str(g, key, i, &(*lens)[i]);
        if (!(*strs)[i])
            return err_set(err, KVI_E_FORMAT, "tokenizer: %s[%llu] is not a string", key,
                           (unsigned long long)i);
    }
    return 0;
}

static int load(const gguf_ctx *g, tok_tokenizer **out, kvi_error *err)
{
    const char *model = gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) return err_set(err, KVI_E_FORMAT, "tokenizer: tokenizer.ggml.model missing");
    bool spm = strcmp(model, "llama") == 0, bpe = strcmp(model, "gpt2") == 0 || strcmp(model, "gemma4") == 0;
    bool wpm = strcmp(model, "bert") == 0;
    if (!spm && !bpe && !wpm)
        return err_set(err, KVI_E_UNSUPPORTED, "tokenizer: tokenizer.ggml.model '%s' not supported", model);

    gguf_vtype et;
    uint64_t n;
    int rc = gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n, err);
    if (rc == -1) return err_set(err, KVI_E_FORMAT, "tokenizer: tokenizer.ggml.tokens missing");
    if (rc < 0) return rc;
    if (et != GGUF_T_STRING || n == 0 || n > (1u << 28))
        return err_set(err, KVI_E_FORMAT, "tokenizer: tokenizer.ggml.tokens must be 1..2^28 strings");

    tok_tokenizer *t;
    rc = tok_alloc(&t, (int32_t)n, err);
    if (rc) return rc;
    *out = t;
    const char **strs = NULL;
    size_t *lens = NULL;
    rc = get_str_array(g, "tokenizer.ggml.tokens", n, &strs, &lens, err);
    if (rc == 0) rc = tok_set_texts(t, strs, lens, err);
    free(strs);
    free(lens);
    if (rc) return rc;

    uint64_t m;
    rc = gguf_get_arr_info(g, "tokenizer.ggml.scores", &et, &m, err);
    if (rc == 0) {
        if (m != n)
            return err_set(err, KVI_E_FORMAT, "tokenizer: %llu scores for %llu tokens", (unsigned long long)m,
                           (unsigned long long)n);
        rc = gguf_get_arr_f32(g, "tokenizer.ggml.scores", t->score, n, err);
    }
    if (rc < -1 || rc > 0) return rc;
    rc = gguf_get_arr_info(g, "tokenizer.ggml.token_type", &et, &m, err);
    if (rc == 0) {
        if (m != n)
            return err_set(err, KVI_E_FORMAT, "tokenizer: %llu token types for %llu tokens",
                           (unsigned long long)m, (unsigned long long)n);
        int32_t *types = malloc(n * sizeof *types);
        if (!types) return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
        rc = gguf_get_arr_i32(g, "tokenizer.ggml.token_type", types, n, err);
        for (uint64_t i = 0; rc == 0 && i < n; i++)
            t->type[i] = (types[i] >= KVI_TOKEN_NORMAL && types[i] <= KVI_TOKEN_BYTE) ? (uint8_t)types[i]
                                                                                      : KVI_TOKEN_NORMAL;
        free(types);
    }
    if (rc < -1 || rc > 0) return rc;

    int32_t nv = t->n_vocab;
    if (spm) {
        t->algo = TOK_ALGO_SPM;
        t->escape_space = true;
        t->add_space_prefix = true;
        t->add_bos = true;
        t->bos = nv > 1 ? 1 : -1;
        t->eos = nv > 2 ? 2 : -1;
        t->unk = 0;
    } else if (wpm) {
        tok_wpm_init(t, "\xE2\x96\x81", "");
        t->escape_space = true; /* "▁" decodes to a space */
        t->add_bos = t->add_sep = true;
        t->bos = nv > 101 ? 101 : -1;
        t->unk = nv > 100 ? 100 : -1;
        t->sep = nv > 102 ? 102 : -1;
        t->pad = 0;
        if ((rc = get_id(g, "tokenizer.ggml.seperator_token_id", nv, &t->sep, err)) ||
            (rc = get_flag(g, "tokenizer.ggml.add_sep_token", &t->add_sep, err)) ||
            (rc = get_flag(g, "tokenizer.ggml.normalizer.lowercase", &t->wpm_lower, err)) ||
            (rc = get_flag(g, "tokenizer.ggml.normalizer.strip_accents", &t->wpm_strip_accents, err)))
            return rc;
    } else {
        t->algo = TOK_ALGO_BPE;
        const char *pre = strcmp(model, "gemma4") == 0 ? "gemma4" : gguf_get_str(g, "tokenizer.ggml.pre");
        unsigned flags = 0;
        rc = tok_pretok_create_named(pre, &t->pretok, &flags, err);
        if (rc) return rc;
        t->ignore_merges = flags & TOK_PRE_IGNORE_MERGES;
        t->add_bos = flags & TOK_PRE_ADD_BOS;
        t->byte_level = !(flags & TOK_PRE_RAW_BYTES);
        t->escape_space = flags & TOK_PRE_RAW_BYTES;
        t->newline_runs_whole = flags & TOK_PRE_RAW_BYTES;
        rc = gguf_get_arr_info(g, "tokenizer.ggml.merges", &et, &m, err);
        if (rc == -1) return err_set(err, KVI_E_FORMAT, "tokenizer: tokenizer.ggml.merges missing");
        if (rc < 0) return rc;
        if (et != GGUF_T_STRING || m > (1u << 28))
            return err_set(err, KVI_E_FORMAT, "tokenizer: tokenizer.ggml.merges must be strings");
        rc = get_str_array(g, "tokenizer.ggml.merges", m, &strs, &lens, err);
        if (rc == 0) rc = tok_merges_build(t, strs, lens, m, err);
        free(strs);
        free(lens);
        if (rc) return rc;
    }
    if ((rc = get_id(g, "tokenizer.ggml.bos_token_id", nv, &t->bos, err)) ||
        (rc = get_id(g, "tokenizer.ggml.eos_token_id", nv, &t->eos, err)) ||
        (rc = get_id(g, "tokenizer.ggml.eot_token_id", nv, &t->eot, err)) ||
        (rc = get_id(g, "tokenizer.ggml.eom_token_id", nv, &t->eom, err)) ||
        (rc = get_id(g, "tokenizer.ggml.unknown_token_id", nv, &t->unk, err)) ||
        (rc = get_id(g, "tokenizer.ggml.padding_token_id", nv, &t->pad, err)) ||
        (rc = get_id(g, "tokenizer.ggml.fim_pad_token_id", nv, &t->fim_pad, err)) ||
        (rc = get_id(g, "tokenizer.ggml.fim_rep_token_id", nv, &t->fim_rep, err)) ||
        (rc = get_id(g, "tokenizer.ggml.fim_sep_token_id", nv, &t->fim_sep, err)) ||
        (rc = get_id(g, "tokenizer.ggml.fim_pre_token_id", nv, &t->fim_pre, err)) ||
        (rc = get_id(g, "tokenizer.ggml.fim_suf_token_id", nv, &t->fim_suf, err)) ||
        (rc = get_id(g, "tokenizer.ggml.fim_mid_token_id", nv, &t->fim_mid, err)) ||
        /* the older names, read after the new ones as llama.cpp does */
        (rc = get_id(g, "tokenizer.ggml.prefix_token_id", nv, &t->fim_pre, err)) ||
        (rc = get_id(g, "tokenizer.ggml.suffix_token_id", nv, &t->fim_suf, err)) ||
        (rc = get_id(g, "tokenizer.ggml.middle_token_id", nv, &t->fim_mid, err)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)))
        return rc;
    if (bpe || wpm) t->add_space_prefix = false;  /* llama.cpp's BPE never adds the dummy prefix */
    if (bpe && !t->byte_level) t->add_bos = true; /* llama.cpp forces it for Gemma 4 */
    /* as llama.cpp: tokens it recognises by text become control tokens, and gpt-oss's
     * channel markers are user-defined (always printed) */
    t->eog_to_control = true;
    static const char *const shown[] = { "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>" };
    for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
        int32_t id = tok_find(t, shown[k], strlen(shown[k]));
        if (id >= 0) t->type[id] = KVI_TOKEN_USER_DEFINED;
    }
    const char *tmpl = gguf_get_str(g, "tokenizer.chat_template");
    if (tmpl && !(t->chat_template = strdup(tmpl)))
        return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    return tok_finish(t, err);
}

int tokenizer_load_gguf(const gguf_ctx *g, tok_tokenizer **out, kvi_error *err)
{
    if (!g || !out) return err_set(err, KVI_E_INVALID, "tokenizer: no GGUF context");
    *out = NULL;
    tok_tokenizer *t = NULL;
    int rc = load(g, &t, err);
    if (rc) {
        tokenizer_free(t);
        return rc < 0 ? rc : KVI_E_FORMAT;
    }
    *out = t;
    return 0;
}
