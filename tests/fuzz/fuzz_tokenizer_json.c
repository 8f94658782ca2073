/*
 * fuzz_tokenizer_json.c — a Hugging Face tokenizer.json loaded by kvi_vocab_load
 * (the bytes written to a file in a private temporary folder, as the loader reads
 * a path), then a fixed text tokenized with and without special tokens and
 * detokenized. Bytes not starting with '{' reach the llama2.c tokenizer.bin reader.
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char text[] = "Hello world! <s> caf\xc3\xa9 \xf0\x9f\x98\x80 12345  tabs\tand\nlines";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_input_file("tokenizer.json", data, size);
    if (!path) return 0;
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(path, &err);
    if (!m) return 0;
    int32_t ids[256];
    char out[512];
    for (int special = 0; special < 2; special++) {
        int32_t n = kvi_tokenize(m, text, sizeof text - 1, special, special, ids, 256);
        if (n > 256) n = 256;
        if (n > 0) (void)kvi_detokenize(m, ids, n, out, sizeof out, special, special);
    }
    kvi_model_free(m);
    return 0;
}
