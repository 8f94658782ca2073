/*
 * fuzz_tokenizer.c — tokenize and detokenize arbitrary bytes with each kind of
 * vocabulary (loaded once): stories260K's SentencePiece (GGUF), TinyStories-656K's
 * tokenizer.json (BPE with Prepend/Replace normalizers), a byte-level BPE with
 * regex pre-tokenizers (Split, ByteLevel: PCRE2) and a SentencePiece-style BPE
 * with byte fallback (Llama 2's tokenizer.json form), BGE's WordPiece (GGUF). For each: the bytes as user text and as text with special tokens
 * parsed, then the ids back to text, piece by piece and whole; and the bytes read
 * as token ids (any int32), as a request's "prompt": [ids] could hold.
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char byte_bpe_json[] =
    "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true}, "
    "{\"id\": 1, \"content\": \"</s>\", \"special\": true}], \"normalizer\": {\"type\": \"NFC\"}, "
    "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
    "{\"Regex\": \"\\\\p{N}{1,3}\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
    "\"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}]}, "
    "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
    "\"byte_fallback\": false, \"vocab\": {\"<s>\": 0, \"</s>\": 1, \"H\": 2, \"e\": 3, \"l\": 4, "
    "\"o\": 5, \"He\": 6, \"ll\": 7, \"Hell\": 8, \"Hello\": 9, \"\\u0120\": 10, \"w\": 11, \"1\": 12, "
    "\"\\u00c3\": 13}, \"merges\": [\"H e\", \"l l\", \"He ll\", \"Hell o\"]}}";

static const char bytefallback_json[] =
    "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": tru"
    "e}, {\"id\": 1, \"content\": \"<s>\", \"special\": true}], \"normalizer\": {\"type\": \"Seque"
    "nce\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"▁\"}, {\"type\": \"Replace\", \""
    "pattern\": {\"String\": \" \"}, \"content\": \"▁\"}]}, \"pre_tokenizer\": null, \"decoder\": "
    "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"▁\"}"
    ", \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\","
    " \"content\": \" \", \"start\": 1, \"stop\": 0}]}, \"model\": {\"type\": \"BPE\", \"unk_token\":"
    " \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": "
    "1, \"<0x41>\": 2, \"▁\": 3, \"a\": 4, \"▁a\": 5, \"b\": 6, \"ab\": 7}, \"merges\": [[\"▁\", \"a\"]"
    ", [\"a\", \"b\"]]}}";

enum { N_VOCABS = 5 };

static kvi_model *load_or_die(const char *path)
{
    kvi_error err = { 0 };
    kvi_model *m = path ? kvi_vocab_load(path, &err) : NULL;
    if (!m) {
        fprintf(stderr, "fuzz_tokenizer: cannot load the vocabulary %s: %s\n", path ? path : "", err.msg);
        abort(); /* the reference data is missing: not a finding */
    }
    return m;
}

/* The vocabularies, loaded at the first call. */
static kvi_model *vocab(int k)
{
    static kvi_model *m[N_VOCABS];
    if (!m[0]) {
        m[0] = load_or_die(fuzz_shared_path("models/stories260K.gguf"));
        m[1] = load_or_die(fuzz_shared_path("models/TinyStories-656K/tokenizer.json"));
        m[2] = load_or_die(
            fuzz_input_file("tokenizer.json", (const uint8_t *)byte_bpe_json, sizeof byte_bpe_json - 1));
        m[3] = load_or_die(fuzz_input_file("tokenizer.json", (const uint8_t *)bytefallback_json,
                                           sizeof bytefallback_json - 1));
        m[4] = load_or_die(fuzz_shared_path("golden/embed/ggml-vocab-bert-bge.gguf"));
    }
    return m[k];
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
    for (int k = 0; k < N_VOCABS; k++) {
        const kvi_model *m = vocab(k);
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
    }
    return 0;
}
