/*
 * tokenizer_llama2c.c — loading a llama2.c tokenizer.bin.
 *
 * Layout (little endian): int32 max_token_length, then n_vocab records of
 * { float32 score; int32 len; len bytes of text }. Ids 0, 1, 2 are <unk>, <s>, </s>;
 * ids 3..258 are the byte tokens <0x00>..<0xFF>. Texts use a plain space (no U+2581).
 * Encoding is llama2.c's encode(): a dummy-prefix space when the text is not empty,
 * code points looked up, unknown ones as byte tokens (id = byte + 3), then the
 * best-scoring adjacent pair merged until none is left — the SPM encoder with
 * escape_space off. Every length is checked against the file size.
 */
#include "base/file.h"
#include "base/error.h"
#include "tokenizer/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_all(const char *path, unsigned char **data, size_t *len, kvi_error *err)
{
    char *buf;
    switch (file_read_all(path, 0, &buf, len)) {
    case FILE_OK: *data = (unsigned char *)buf; return 0;
    case FILE_NOT_REGULAR: return err_set(err, KVI_E_IO, "tokenizer: %s is not a regular file", path);
    case FILE_CANT_OPEN: return err_set(err, KVI_E_IO, "tokenizer: cannot open %s", path);
    case FILE_NOMEM: return err_set(err, KVI_E_NOMEM, "tokenizer: out of memory reading %s", path);
    default: return err_set(err, KVI_E_IO, "tokenizer: read error on %s", path);
    }
}

int tokenizer_load_llama2c(const char *path, int32_t n_vocab, tok_tokenizer **out, kvi_error *err)
{
    if (!path || !out) return err_set(err, KVI_E_INVALID, "tokenizer: no path");
    *out = NULL;
    if (n_vocab < 3)
        return err_set(err, KVI_E_FORMAT, "tokenizer: %s: vocabulary size %d too small", path, (int)n_vocab);
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = read_all(path, &data, &len, err);
    if (rc) return rc;
    tok_tokenizer *t = NULL;
    const char **texts = malloc((size_t)n_vocab * sizeof *texts);
    size_t *lens = malloc((size_t)n_vocab * sizeof *lens);
    if (!texts || !lens) rc = err_set(err, KVI_E_NOMEM, "tokenizer: out of memory");
    if (rc == 0) rc = tok_alloc(&t, n_vocab, err);
    size_t off = 4;
    if (rc == 0 && len < 4) rc = err_set(err, KVI_E_FORMAT, "tokenizer: %s: truncated header", path);
    for (int32_t i = 0; rc == 0 && i < n_vocab; i++) {
        float score;
        int32_t l;
        if (len - off < 8) {
            rc = err_set(err, KVI_E_FORMAT, "tokenizer: %s: truncated at token %d of %d", path, (int)i,
                         (int)n_vocab);
            break;
        }
        memcpy(&score, data + off, 4);
        memcpy(&l, data + off + 4, 4);
        off += 8;
        if (l < 0 || (size_t)l > len - off) {
            rc = err_set(err, KVI_E_FORMAT, "tokenizer: %s: token %d length %d exceeds the file", path,
                         (int)i, (int)l);
            break;
        }
        t->score[i] = score;
        texts[i] = (const char *)data + off;
        lens[i] = (size_t)l;
        off += (size_t)l;
    }
    if (rc == 0) rc = tok_set_texts(t, texts, lens, err);
    free(texts);
    free(lens);
    free(data);
    if (rc == 0) {
        t->algo = TOK_ALGO_SPM;
        t->escape_space = false;
        t->add_space_prefix = true;
        t->add_bos = true;
        t->unk = 0;
        t->bos = 1;
        t->eos = 2;
        t->type[0] = KVI_TOKEN_UNKNOWN;
        t->type[1] = t->type[2] = KVI_TOKEN_CONTROL;
        for (int32_t i = 3; i < n_vocab && i < 259; i++) {
            if (t->text_len[i] == 6 && memcmp(t->text[i], "<0x", 3) == 0) {
                t->type[i] = KVI_TOKEN_BYTE;
                t->byte_id[i - 3] = i;
            }
        }
        rc = tok_finish(t, err);
    }
    if (rc) {
        tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
