/*
 * test_tokenizer_eog.c — the end-of-generation set of GGUF vocabularies.
 *
 * Small vocabularies written with the project's GGUF writer, shaped like Gemma,
 * Phi-3, Qwen 2.5 / 3, Llama 3, gpt-oss and DeepSeek, each with the set llama.cpp's
 * vocabulary loader (llama-vocab.cpp) derives for it, worked out from its rules:
 * EOS, EOT and EOM (from tokenizer.ggml.eot_token_id / eom_token_id, else found by
 * text), the FIM pad / repo / file-separator tokens, every token whose text is one
 * of its end texts; <|end|> leaves the set beside <|return|> and <|call|>. A token
 * recognised by text becomes a control token (hidden when decoding, matched only
 * with parse_special); gpt-oss's <|channel|> becomes user-defined.
 */
#include "formats/gguf.h"
#include "kvinfer.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct vocab_spec {
    const char *name;
    const char *model; /* "llama" or "gpt2" */
    const char *const *toks;
    int n;
    int32_t eos, eot, eom; /* -1: key absent */
    const int32_t *want;   /* the EOG set, any order */
    int n_want;
} vocab_spec;

static tok_tokenizer *load_spec(const vocab_spec *v)
{
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "tokenizer.ggml.model", v->model);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->toks, (size_t)v->n);
    float *scores = calloc((size_t)v->n, sizeof *scores);
    int32_t *types = malloc((size_t)v->n * sizeof *types);
    for (int i = 0; i < v->n; i++) {
        scores[i] = -(float)i;
        /* texts in angle brackets are control tokens, as converters write them */
        types[i] = v->toks[i][0] == '<' && strlen(v->toks[i]) > 2 ? 3 : 1;
    }
    /* one normal-typed end text: llama.cpp turns it into a control token */
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->toks[i], "<|eom_id|>") == 0 || strcmp(v->toks[i], "<|return|>") == 0) types[i] = 1;
    gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)v->n);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)v->n);
    if (strcmp(v->model, "gpt2") == 0) {
        gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, 0);
    }
    if (v->eos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->eot >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot);
    if (v->eom >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eom_token_id", (uint32_t)v->eom);
    const char *path = tmp_path("eog_vocab.gguf");
    FILE *f = fopen(path, "wb");
    kvi_error err = { 0 };
    int rc = f ? gguf_writer_write_header(w, f, &err) : -1;
    if (f) fclose(f);
    gguf_writer_free(w);
    free(scores);
    free(types);
    CHECK(rc == 0, "%s: write gguf: %s", v->name, err.msg);
    gguf_ctx *g = NULL;
    tok_tokenizer *t = NULL;
    rc = gguf_open(path, false, &g, &err);
    if (rc == 0) rc = tokenizer_load_gguf(g, &t, &err);
    CHECK(rc == 0 && t, "%s: load: %s", v->name, err.msg);
    gguf_close(g);
    return t;
}

static void check_set(const vocab_spec *v)
{
    tok_tokenizer *t = load_spec(v);
    if (!t) return;
    int n_eog = 0;
    for (int i = 0; i < v->n; i++) n_eog += tokenizer_is_eog(t, i);
    bool all = true;
    for (int k = 0; k < v->n_want; k++) all = all && tokenizer_is_eog(t, v->want[k]);
    CHECK(all && n_eog == v->n_want, "%s: %d end tokens, want %d (all wanted present: %d)", v->name, n_eog,
          v->n_want, all);
    for (int i = 0; i < v->n; i++)
        if (tokenizer_is_eog(t, i)) {
            bool wanted = false;
            for (int k = 0; k < v->n_want; k++) wanted = wanted || v->want[k] == i;
            CHECK(wanted, "%s: %d '%s' should not end generation", v->name, i, v->toks[i]);
        }
    CHECK(!tokenizer_is_eog(t, -1) && !tokenizer_is_eog(t, v->n), "%s: ids outside are not EOG", v->name);
    tokenizer_free(t);
}

#define SPEC(nm, model, toks, eos, eot, eom, want)                                 \
    (vocab_spec)                                                                   \
    {                                                                              \
        nm, model, toks, (int)(sizeof toks / sizeof toks[0]), eos, eot, eom, want, \
            (int)(sizeof want / sizeof want[0])                                    \
    }

static void test_sets(void)
{
    /* Gemma: <eos> (EOS) and <end_of_turn> (found by text); <start_of_turn> and <bos> do not end */
    static const char *const gemma[] = { "<pad>", "<eos>", "<bos>",           "<unk>",
                                         "a",     "b",     "<start_of_turn>", "<end_of_turn>" };
    static const int32_t gemma_want[] = { 1, 7 };
    check_set(&SPEC("gemma", "llama", gemma, 1, -1, -1, gemma_want));
    /* Phi-3: </s> (EOS), <|endoftext|>, <|end|>; <|user|>, <|assistant|> do not */
    static const char *const phi3[] = { "<unk>",         "<s>",           "</s>",    "a",
                                        "<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>" };
    static const int32_t phi3_want[] = { 2, 4, 6 };
    check_set(&SPEC("phi-3", "llama", phi3, 2, -1, -1, phi3_want));
    /* Qwen 2.5 / 3: <|endoftext|>, <|im_end|>, and the FIM pad, repo-name, file-separator
     * tokens; <|im_start|>, <|fim_prefix|>, <think> do not */
    static const char *const qwen[] = { "a",
                                        "b",
                                        "<|endoftext|>",
                                        "<|im_start|>",
                                        "<|im_end|>",
                                        "<|fim_prefix|>",
                                        "<|fim_pad|>",
                                        "<|repo_name|>",
                                        "<|file_sep|>",
                                        "<think>" };
    static const int32_t qwen_want[] = { 2, 4, 6, 7, 8 };
    check_set(&SPEC("qwen", "gpt2", qwen, 2, -1, -1, qwen_want));
    /* Llama 3.1: <|end_of_text|> (EOS), <|eot_id|>, <|eom_id|> (normal-typed here) */
    static const char *const llama3[] = {
        "a",          "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
        "<|eot_id|>", "<|eom_id|>",        "<|python_tag|>"
    };
    static const int32_t llama3_want[] = { 2, 4, 5 };
    check_set(&SPEC("llama3", "gpt2", llama3, 2, -1, -1, llama3_want));
    /* gpt-oss: <|return|>, <|call|>, <|endoftext|>; <|end|> leaves the set beside them */
    static const char *const gptoss[] = { "a",          "<|startoftext|>", "<|endoftext|>",
                                          "<|return|>", "<|constrain|>",   "<|channel|>",
                                          "<|start|>",  "<|end|>",         "<|message|>",
                                          "<|call|>" };
    static const int32_t gptoss_want[] = { 2, 3, 9 };
    check_set(&SPEC("gpt-oss", "gpt2", gptoss, 3, -1, -1, gptoss_want));
    /* DeepSeek V3: <｜end▁of▁sentence｜> (EOS) */
    static const char *const ds[] = { "<\xEF\xBD\x9C"
                                      "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                      "<\xEF\xBD\x9C"
                                      "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                      "a", "<\xEF\xBD\x9CUser\xEF\xBD\x9C>" };
    static const int32_t ds_want[] = { 1 };
    check_set(&SPEC("deepseek-v3", "gpt2", ds, 1, -1, -1, ds_want));
    /* keys: tokenizer.ggml.eot_token_id and eom_token_id name tokens no text rule knows */
    static const char *const keyed[] = { "<unk>",         "<s>",          "</s>",   "a",
                                         "<my_turn_end>", "<my_msg_end>", "<other>" };
    static const int32_t keyed_want[] = { 2, 4, 5 };
    check_set(&SPEC("eot/eom keys", "llama", keyed, 2, 4, 5, keyed_want));
    /* no key and no known text: only EOS */
    static const char *const plain[] = { "<unk>", "<s>", "</x>", "a", "<eot>" };
    static const int32_t plain_want[] = { 2 };
    check_set(&SPEC("plain", "llama", plain, 2, -1, -1, plain_want));
}

/* What recognising a token by its text changes besides the set. */
static void test_types(void)
{
    static const char *const gptoss[] = { "a",          "<|startoftext|>", "<|endoftext|>",
                                          "<|return|>", "<|constrain|>",   "<|channel|>",
                                          "<|start|>",  "<|end|>",         "<|message|>",
                                          "<|call|>" };
    static const int32_t want[] = { 2, 3, 9 };
    vocab_spec v = SPEC("gpt-oss types", "gpt2", gptoss, 3, -1, -1, want);
    tok_tokenizer *t = load_spec(&v);
    if (!t) return;
    char buf[64];
    /* <|return|> was written normal-typed: now a control token, hidden unless rendered */
    CHECK(tokenizer_token_to_piece(t, 3, buf, sizeof buf, false) == 0,
          "<|return|> hidden as a control token");
    CHECK(tokenizer_token_to_piece(t, 3, buf, sizeof buf, true) == 10, "<|return|> rendered on request");
    /* <|channel|> (control in the file) becomes user-defined: printed, and matched in text */
    int32_t n = tokenizer_token_to_piece(t, 5, buf, sizeof buf, false);
    CHECK(n == 11 && memcmp(buf, "<|channel|>", 11) == 0, "<|channel|> is printed (n=%d)", n);
    int32_t ids[4];
    n = tokenizer_encode(t, "<|channel|>", 11, false, false, ids, 4);
    CHECK(n == 1 && ids[0] == 5, "<|channel|> matched as user-defined text (n=%d)", n);
    /* <|end|> out of the set is user-defined too, as llama.cpp makes it */
    n = tokenizer_token_to_piece(t, 7, buf, sizeof buf, false);
    CHECK(n == 7, "<|end|> printed once out of the set (n=%d)", n);
    tokenizer_free(t);
}

int main(void)
{
    test_sets();
    test_types();
    return test_main_end();
}
