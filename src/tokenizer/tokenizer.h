/*
 * tokenizer.h — text <-> token ids.
 *
 * Three algorithms, chosen by the vocabulary:
 *  - SPM ("llama"): SentencePiece BPE over pieces with scores; spaces become "▁",
 *    a dummy-prefix space is added (tokenizer.ggml.add_space_prefix, default true),
 *    unknown bytes fall back to <0xXX> tokens.
 *  - BPE ("gpt2"): the pre-tokenizer regex named by tokenizer.ggml.pre (run with
 *    PCRE2), byte-to-unicode mapping, then merges by rank (tokenizer.ggml.merges).
 *  - WordPiece ("bert", tokenizer.json model "WordPiece"): BERT's normalisation
 *    (lower case, accents stripped, CJK and punctuation split), greedy longest
 *    match per word, [UNK] for a word that cannot be matched; add_special gives
 *    [CLS] text [SEP]. tokenizer_encode_pair builds rerank pairs.
 * Special tokens (control / user-defined types) are matched in the text only when
 * parse_special is set. Vocabularies come from GGUF metadata, a llama2.c
 * tokenizer.bin, or a Hugging Face tokenizer.json.
 */
#ifndef KVI_TOKENIZER_H
#define KVI_TOKENIZER_H

#include "formats/gguf.h"
#include "kvinfer.h"

typedef struct tok_tokenizer tok_tokenizer;

/* Token types, as in GGUF tokenizer.ggml.token_type */
enum {
    KVI_TOKEN_NORMAL = 1,
    KVI_TOKEN_UNKNOWN = 2,
    KVI_TOKEN_CONTROL = 3,
    KVI_TOKEN_USER_DEFINED = 4,
    KVI_TOKEN_UNUSED = 5,
    KVI_TOKEN_BYTE = 6
};

int tokenizer_load_gguf(const gguf_ctx *g, tok_tokenizer **out, kvi_error *err);
/* llama2.c tokenizer.bin; n_vocab from the checkpoint header. */
int tokenizer_load_llama2c(const char *path, int32_t n_vocab, tok_tokenizer **out, kvi_error *err);
/* Hugging Face tokenizer.json (plus tokenizer_config.json beside it when present). */
int tokenizer_load_hf(const char *json_path, tok_tokenizer **out, kvi_error *err);
void tokenizer_free(tok_tokenizer *t);

/* See kvi_tokenize() in kvinfer.h for the contract. */
int32_t tokenizer_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t *out, int32_t n_max);
/* The same, special tokens (other than user-defined ones) never matched where
 * they overlap a byte range [plain[2k], plain[2k+1]), k < n_plain. */
int32_t tokenizer_encode_plain(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
                               bool parse_special, const size_t *plain, size_t n_plain, int32_t *out,
                               int32_t n_max);
/* A query / document pair for a cross-encoder (rerank), as llama.cpp's server builds
 * it when the model has no rerank template: both encoded without special tokens
 * (parse_special off for GGUF vocabularies; on for tokenizer.json ones, whose added
 * tokens Hugging Face always splits), then
 *   [BOS if add_bos] a [EOS if add_eos] [SEP if add_sep] b [EOS if add_eos]
 * where EOS falls back to SEP when the vocabulary has none (a GGUF WordPiece file
 * with add_bos, add_eos, no add_sep gives [CLS] a [SEP] b [SEP]); with a
 * tokenizer.json post-processor template: pre a post b post. types[i] (NULL: not
 * written) is the segment of out[i]: 0 up to the end of a's part, 1 for b's
 * (Hugging Face's token_type_ids; llama.cpp feeds type 0 everywhere). Returns the
 * full count (out / types filled up to n_max) or a negative KVI_E_* code. */
int32_t tokenizer_encode_pair(const tok_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                              int32_t *out, int32_t *types, int32_t n_max);
/* [SEP] of a WordPiece vocabulary, -1 when none. */
int32_t tokenizer_sep(const tok_tokenizer *t);
int32_t tokenizer_token_to_piece(const tok_tokenizer *t, int32_t id, char *buf, size_t cap,
                                 bool render_special);
int32_t tokenizer_detokenize(const tok_tokenizer *t, const int32_t *ids, int32_t n, char *buf, size_t cap,
                             bool render_special, bool remove_leading_space);

int32_t tokenizer_n_vocab(const tok_tokenizer *t);
int32_t tokenizer_bos(const tok_tokenizer *t); /* -1 when none */
int32_t tokenizer_eos(const tok_tokenizer *t); /* -1 when none */
/* A fill-in-the-middle token, kind a kvi_fim_kind (-1 when none). */
int32_t tokenizer_fim(const tok_tokenizer *t, int kind);
bool tokenizer_is_eog(const tok_tokenizer *t, int32_t id);
bool tokenizer_add_bos(const tok_tokenizer *t);
/* The text of a token as stored in the vocabulary (NUL-terminated), NULL if out of range. */
const char *tokenizer_token_text(const tok_tokenizer *t, int32_t id);
/* tokenizer.chat_template, NULL when absent. */
const char *tokenizer_chat_template(const tok_tokenizer *t);
/* Messages to ids in the layout of a chat family (chat_template.c; the public
 * kvi_chat_apply_family of include/kvinfer.h on the model's tokenizer). */
int32_t tokenizer_chat_apply(const tok_tokenizer *t, const char *family, const kvi_chat_msg *msgs, int n,
                             bool add_assistant, int32_t *out, int32_t n_max, kvi_error *err);

#endif
