/*
 * test_tokenizer_hf.c — tokenizer.json pipelines on hand-made files, ids worked out by
 * hand: the NFC normalizer, a TemplateProcessing inside a post-processor Sequence,
 * BOS from tokenizer_config.json's add_bos_token when there is no template, added
 * tokens matched leftmost-longest (Hugging Face's added vocabulary) and only with
 * parse_special when special, and an unknown normalizer refused by name.
 * (tests/test_tokref.c compares real tokenizer.json files with transformers.js.)
 */
#include "kvinfer.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Byte-level vocabulary: a b c d e, U+00E9 (as its two byte-level characters "Ã©"),
 * e + U+0301 ("e" "Ì" "ģ" bytes CC 81), and added tokens. */
#define MODEL                                                                                       \
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"d\":3,\"e\":4,\"\\u00c3\":5," \
    "\"\\u00a9\":6,"                                                                                \
    "\"\\u00c3\\u00a9\":7,\"\\u00cc\":8,\"\\u0123\":9},\"merges\":[\"\\u00c3 \\u00a9\"]},"
#define VOCAB \
    MODEL "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false},"

static tok_tokenizer *load(const char *dir, const char *json, const char *config, int want_rc)
{
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path(dir));
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tmp_path(dir));
    remove(path);
    if (config) write_file(path, config, strlen(config));
    snprintf(path, sizeof path, "%s/tokenizer.json", tmp_path(dir));
    write_file(path, json, strlen(json));
    kvi_error err = { 0 };
    tok_tokenizer *t = NULL;
    int rc = tokenizer_load_hf(path, &t, &err);
    CHECK(rc == want_rc, "%s: load rc %d want %d: %s", dir, rc, want_rc, err.msg);
    return t;
}

static bool ids_are(const tok_tokenizer *t, const char *s, bool add, bool special, const int32_t *want, int n)
{
    int32_t got[64];
    int32_t k = tokenizer_encode(t, s, strlen(s), add, special, got, 64);
    if (k != n) return false;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return false;
    return true;
}

int main(void)
{
    /* NFC: e + U+0301 becomes U+00E9 (bytes C3 A9 -> "Ã©" merged to 7); a template
     * inside a Sequence adds <s> (10) before and </s> (11) after */
    tok_tokenizer *t =
        load("hf_nfc",
             "{\"added_tokens\":[{\"id\":10,\"content\":\"<s>\",\"special\":true},"
             "{\"id\":11,\"content\":\"</s>\",\"special\":true}],"
             "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}," VOCAB
             "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},"
             "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
             "{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"</s>\"}}],"
             "\"special_tokens\":{\"<s>\":{\"ids\":[10]},\"</s>\":{\"ids\":[11]}}}]}}",
             NULL, 0);
    if (t) {
        CHECK(ids_are(t, "e\xCC\x81", false, false, (const int32_t[]){ 7 }, 1), "NFC composes e + U+0301");
        CHECK(ids_are(t, "a\xC3\xA9", true, false, (const int32_t[]){ 10, 0, 7, 11 }, 4),
              "template ids around");
        CHECK(ids_are(t, "", true, false, (const int32_t[]){ 10, 11 }, 2), "template on empty text");
        CHECK(tokenizer_add_bos(t) && tokenizer_bos(t) == 10, "template BOS reported");
        /* special text: plain by default, the token with parse_special */
        CHECK(ids_are(t, "<s>", false, true, (const int32_t[]){ 10 }, 1), "<s> parsed with parse_special");
        int32_t got[16];
        CHECK(tokenizer_encode(t, "<s>", 3, false, false, got, 16) != 1 || got[0] != 10,
              "<s> plain by default");
        tokenizer_free(t);
    }
    /* no normalizer: the decomposed form stays e, U+0301 bytes (CC -> "Ì" 8, 81 -> "ģ" 9) */
    t = load("hf_plain", "{\"added_tokens\":[]," VOCAB "\"post_processor\":null}", NULL, 0);
    if (t) {
        CHECK(ids_are(t, "e\xCC\x81", true, false, (const int32_t[]){ 4, 8, 9 }, 3),
              "no normalizer, no template");
        tokenizer_free(t);
    }
    /* no template: tokenizer_config.json's add_bos_token adds bos_token (as transformers) */
    t = load("hf_cfg",
             "{\"added_tokens\":[{\"id\":10,\"content\":\"<s>\",\"special\":true}]," VOCAB
             "\"post_processor\":null}",
             "{\"add_bos_token\":true,\"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\"}}", 0);
    if (t) {
        CHECK(ids_are(t, "a", true, false, (const int32_t[]){ 10, 0 }, 2), "config add_bos_token");
        tokenizer_free(t);
    }
    /* added tokens "ab" (12) and "bcd" (13): leftmost-longest takes "ab" at 0, then c, d
     * (longest-first over the whole text would take "bcd") */
    t = load("hf_left",
             "{\"added_tokens\":[{\"id\":12,\"content\":\"ab\",\"special\":false},"
             "{\"id\":13,\"content\":\"bcd\",\"special\":false}]," VOCAB "\"post_processor\":null}",
             NULL, 0);
    if (t) {
        CHECK(ids_are(t, "abcd", false, false, (const int32_t[]){ 12, 2, 3 }, 3),
              "leftmost-longest added tokens");
        CHECK(ids_are(t, "abcdbcd", false, false, (const int32_t[]){ 12, 2, 3, 13 }, 4), "then bcd");
        tokenizer_free(t);
    }
    /* an unknown normalizer or Split behaviour is refused by name */
    kvi_error err = { 0 };
    t = load("hf_bad", "{\"added_tokens\":[],\"normalizer\":{\"type\":\"Precompiled\"}," VOCAB "\"x\":0}",
             NULL, KVI_E_UNSUPPORTED);
    CHECK(!t, "Precompiled refused");
    t = load(
        "hf_bad2",
        "{\"added_tokens\":[]," MODEL
        "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Removed\"}}",
        NULL, KVI_E_UNSUPPORTED);
    CHECK(!t, "Split Removed refused");
    (void)err;
    return test_main_end();
}
