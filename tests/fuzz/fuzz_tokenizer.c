/*
 * fuzz_tokenizer.c — tokenize and detokenize arbitrary bytes with a fixed small
 * vocabulary (stories260K's SentencePiece tokenizer, loaded once): the bytes as
 * user text and as text with special tokens parsed, then the ids back to text,
 * piece by piece and whole; and the bytes read as token ids (any int32), as a
 * request's "prompt": [ids] could hold.
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvi_model *vocab(void)
{
    static kvi_model *m;
    if (!m) {
        kvi_error err = { 0 };
        m = kvi_vocab_load(fuzz_shared_path("models/stories260K.gguf"), &err);
        if (!m) {
            fprintf(stderr, "fuzz_tokenizer: cannot load the vocabulary: %s\n", err.msg);
            abort();
        }
    }
    return m;
}

static void round_trip(const kvi_model *m, const char *text, size_t len, bool add_special, bool parse_special)
{
    int32_t cap = 64;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return;
    int32_t n = kvi_tokenize(m, text, len, add_special, parse_special, ids, cap);
    if (n > cap) {
        int32_t *more = realloc(ids, (size_t)n * sizeof *ids);
        if (!more) {
            free(ids);
            return;
        }
        ids = more;
        cap = n;
        n = kvi_tokenize(m, text, len, add_special, parse_special, ids, cap);
    }
    if (n > 0 && n <= cap) {
        char piece[64];
        for (int32_t i = 0; i < n; i++)
            (void)kvi_token_to_piece(m, ids[i], piece, sizeof piece, parse_special);
        int32_t need = kvi_detokenize(m, ids, n, NULL, 0, parse_special, add_special);
        if (need >= 0) {
            char *out = malloc((size_t)need + 1);
            if (out) (void)kvi_detokenize(m, ids, n, out, (size_t)need + 1, parse_special, add_special);
            free(out);
        }
        char small[8];
        (void)kvi_detokenize(m, ids, n, small, sizeof small, !parse_special, !add_special);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const kvi_model *m = vocab();
    round_trip(m, (const char *)data, size, false, false);
    round_trip(m, (const char *)data, size, true, true);
    size_t n = size / sizeof(int32_t);
    int32_t *ids = malloc(n * sizeof *ids + 1);
    if (!ids) return 0;
    if (n) memcpy(ids, data, n * sizeof *ids);
    char out[256], piece[16];
    (void)kvi_detokenize(m, ids, (int32_t)n, out, sizeof out, true, true);
    for (size_t i = 0; i < n; i++) (void)kvi_token_to_piece(m, ids[i], piece, sizeof piece, true);
    free(ids);
    return 0;
}
