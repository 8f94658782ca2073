/*
 * fuzz_grammar.c — the GBNF parser, the JSON-schema compiler and the grammar
 * matcher. Byte 0 picks the form: even, the text up to the first NUL is GBNF;
 * odd, it is a JSON schema compiled to GBNF (kvi_json_schema_to_gbnf) and the
 * result parsed, as the server does for response_format. The bytes after the NUL
 * are output text fed to a matcher over stories260K's vocabulary in chunks of
 * 1 .. 8 bytes (byte 1 picks the size), then the token mask is computed.
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* stories260K's vocabulary (loaded once) and its grammar trie. */
static kvi_model *vocab_model(void)
{
    static kvi_model *m;
    if (!m) {
        kvi_error err = { 0 };
        m = kvi_vocab_load(fuzz_shared_path("models/stories260K.gguf"), &err);
        if (!m) {
            fprintf(stderr, "fuzz_grammar: cannot load the vocabulary: %s\n", err.msg);
            abort(); /* the reference data is missing: not a finding */
        }
    }
    return m;
}

static kvi_grammar_vocab *the_vocab(void)
{
    static kvi_grammar_vocab *v;
    if (!v) {
        kvi_error err = { 0 };
        v = kvi_grammar_vocab_create(vocab_model(), &err);
        if (!v) {
            fprintf(stderr, "fuzz_grammar: no grammar vocabulary: %s\n", err.msg);
            abort();
        }
    }
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    const bool schema = data[0] & 1;
    const size_t chunk = (size_t)(data[1] % 8) + 1;
    data += 2;
    size -= 2;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t tlen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    const size_t text_len = nul ? size - tlen - 1 : 0;
    kvi_error err = { 0 };
    char *gbnf = NULL;
    if (schema) {
        char *s = fuzz_strndup(data, tlen);
        if (!s) return 0;
        gbnf = kvi_json_schema_to_gbnf(s, tlen, &err);
        free(s);
        if (!gbnf) return 0;
    }
    kvi_grammar *g = schema ? kvi_grammar_parse(gbnf, strlen(gbnf), &err)
                            : kvi_grammar_parse((const char *)data, tlen, &err);
    free(gbnf);
    if (!g) return 0;
    kvi_grammar_matcher *mt = kvi_grammar_matcher_create(g, the_vocab(), &err);
    if (mt) {
        for (size_t off = 0; off < text_len; off += chunk) {
            const size_t n = text_len - off < chunk ? text_len - off : chunk;
            if (kvi_grammar_matcher_accept_bytes(mt, text + off, n) != 0) break;
        }
        (void)kvi_grammar_matcher_can_end(mt);
        const int32_t nv = kvi_n_vocab(vocab_model());
        uint32_t *bits = calloc(((size_t)nv + 31) / 32, sizeof *bits);
        if (bits) (void)kvi_grammar_matcher_mask(mt, bits);
        free(bits);
        kvi_grammar_matcher_free(mt);
    }
    kvi_grammar_free(g);
    return 0;
}
