/*
 * test_wordpiece.c — WordPiece (and the embedding models' other vocabularies)
 * against the token ids llama.cpp fed its encoders.
 *
 *  - every ../shared/golden/embed/NAME.embed.json: each input's text, encoded with
 *    the vocabulary of NAME.gguf as llama-server encodes /v1/embeddings inputs
 *    (add_special, parse_special), must give its `tokens` exactly. The bert-family
 *    files are WordPiece ([CLS] ... [SEP]); gemma-embedding is SentencePiece
 *    ([BOS] ... [EOS]) and qwen3-embed byte-level BPE (text [EOS]);
 *  - bert-rerank's query / document pairs (tokenizer_encode_pair) give the
 *    `tokens` of its rerank.json ([CLS] query [SEP] document [SEP]), and without the
 *    add_* keys llama.cpp's defaults give [CLS] query [SEP] document (kvi_tokenize_pair);
 *  - decoding: the BGE vocabulary's ids back to the normalised text (## joins);
 *  - robustness: invalid UTF-8, control characters, an over-long word, empty text,
 *    short output buffers.
 */
#include "kvinfer.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* The vocabulary of ../shared/REL through the public API. */
static kvi_model *load_tok(const char *rel)
{
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(shared_path(rel), &err);
    CHECK(m != NULL, "kvi_vocab_load %s: %s", rel, err.msg);
    return m;
}

static bool same_ids(const int32_t *got, int32_t n_got, const cJSON *want, const char *what)
{
    int32_t w[1024];
    int32_t n_want = json_token_ids(want, w, 1024);
    bool ok = n_want == n_got && n_got >= 0 && memcmp(got, w, (size_t)n_got * sizeof *got) == 0;
    CHECK(ok, "%s: %d ids, want %d", what, n_got, n_want);
    if (!ok) {
        fprintf(stderr, "    got :");
        for (int32_t i = 0; i < n_got && i < 64; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n    want:");
        for (int32_t i = 0; i < n_want && i < 64; i++) fprintf(stderr, " %d", w[i]);
        fputc('\n', stderr);
    }
    return ok;
}

static void test_embed_golden(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "golden/embed/%s.gguf", name);
    kvi_model *t = load_tok(rel);
    snprintf(rel, sizeof rel, "golden/embed/%s.embed.json", name);
    cJSON *j = load_json(shared_path(rel));
    CHECK(j != NULL, "cannot load %s", rel);
    const cJSON *inputs = cJSON_GetObjectItem(j, "inputs"), *in;
    int n = 0, same = 0, total = 0;
    cJSON_ArrayForEach(in, inputs)
    {
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(in, "text"));
        int32_t ids[1024];
        int32_t k = t && text ? kvi_tokenize(t, text, strlen(text), true, true, ids, 1024) : -1;
        char what[160];
        snprintf(what, sizeof what, "%s input %d \"%.50s\"", name, n, text ? text : "?");
        same += same_ids(ids, k, cJSON_GetObjectItem(in, "tokens"), what);
        total += k > 0 ? k : 0;
        n++;
    }
    CHECK(n == 8 && same == n, "%s: %d of %d inputs give llama.cpp's ids", name, same, n);
    printf("%-20s %d/%d inputs, %d tokens\n", name, same, n, total);
    cJSON_Delete(j);
    kvi_model_free(t);
}

/* A copy of bert-rerank-f32.gguf without the add_bos / add_eos / add_sep keys is
 * what an older conversion writes: llama.cpp's defaults then give [CLS] q [SEP] d. */
static void test_rerank(void)
{
    kvi_model *t = load_tok("golden/embed/bert-rerank-f32.gguf");
    cJSON *j = load_json(shared_path("golden/embed/bert-rerank-f32.rerank.json"));
    CHECK(t && j, "bert-rerank vocabulary and golden");
    if (!t || !j) {
        kvi_model_free(t);
        cJSON_Delete(j);
        return;
    }
    const char *q = cJSON_GetStringValue(cJSON_GetObjectItem(j, "query"));
    const cJSON *doc;
    int n = 0, same = 0;
    int32_t q_ids[256];
    int32_t nq = kvi_tokenize(t, q, strlen(q), false, false, q_ids, 256);
    cJSON_ArrayForEach(doc, cJSON_GetObjectItem(j, "documents"))
    {
        const char *d = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "text"));
        int32_t ids[1024], types[1024];
        int32_t k = kvi_tokenize_pair(t, q, strlen(q), d, strlen(d), ids, types, 1024);
        char what[160];
        snprintf(what, sizeof what, "rerank document %d \"%.50s\"", n, d);
        same += same_ids(ids, k, cJSON_GetObjectItem(doc, "tokens"), what);
        /* [CLS] q [SEP] of type 0, then d [SEP] of type 1 */
        bool types_ok = k > nq + 2;
        for (int32_t i = 0; i < k; i++) types_ok = types_ok && types[i] == (i < nq + 2 ? 0 : 1);
        CHECK(types_ok, "%s: segment types", what);
        /* a short buffer still reports the full count */
        int32_t small[4];
        CHECK(kvi_tokenize_pair(t, q, strlen(q), d, strlen(d), small, NULL, 4) == k && small[0] == ids[0],
              "%s: short buffer", what);
        n++;
    }
    CHECK(n == 6 && same == n, "bert-rerank: %d of %d pairs give llama.cpp's ids", same, n);
    printf("%-20s %d/%d pairs\n", "bert-rerank", same, n);
    cJSON_Delete(j);
    kvi_model_free(t);

    /* the BGE vocabulary has no add_* keys: [CLS] a [SEP] b, with no final [SEP];
     * through the public API on the vocabulary-only file */
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(shared_path("golden/embed/ggml-vocab-bert-bge.gguf"), &err);
    CHECK(m != NULL, "load the BGE vocabulary: %s", err.msg);
    if (!m) return;
    int32_t ids[16], types[16];
    int32_t k = kvi_tokenize_pair(m, "Hello", 5, "world", 5, ids, types, 16);
    CHECK(k == 4 && ids[0] == 101 && ids[1] == 7592 && ids[2] == 102 && ids[3] == 2088,
          "defaults: [CLS] hello [SEP] world, n=%d", k);
    CHECK(k == 4 && types[0] == 0 && types[2] == 0 && types[3] == 1, "segments 0 0 0 1");
    CHECK(kvi_tokenize_pair(m, NULL, 3, "x", 1, ids, NULL, 16) == KVI_E_INVALID, "NULL query refused");
    kvi_model_free(m);
}

static void test_decode_and_edges(void)
{
    kvi_model *t = load_tok("golden/embed/ggml-vocab-bert-bge.gguf");
    if (!t) return;
    CHECK(kvi_token_bos(t) == 101 && kvi_n_vocab(t) == 30522, "BGE specials");
    const char *s = "Héllo, Wörld! Tokenization 中文 don't";
    int32_t ids[64];
    int32_t n = kvi_tokenize(t, s, strlen(s), true, false, ids, 64);
    CHECK(n > 4 && ids[0] == 101 && ids[n - 1] == 102, "[CLS] ... [SEP], n=%d", n);
    char buf[256];
    int32_t len = kvi_detokenize(t, ids, n, buf, sizeof buf, false, true);
    CHECK(len >= 0 && strcmp(buf, "hello, world! tokenization 中 文 don't") == 0, "decode: \"%s\"", buf);
    len = kvi_detokenize(t, ids, n, buf, sizeof buf, true, true);
    CHECK(len >= 0 && strncmp(buf, "[CLS] hello", 11) == 0, "decode with specials: \"%s\"", buf);

    /* control characters, U+FFFD and invalid bytes vanish; tabs and newlines split words */
    const char odd[] = "hel\x01lo\xEF\xBF\xBD\xFF\tworld\n";
    int32_t a[16], b[16];
    int32_t na = kvi_tokenize(t, odd, sizeof odd - 1, false, false, a, 16);
    int32_t nb = kvi_tokenize(t, "hello world", 11, false, false, b, 16);
    CHECK(na == nb && na == 2 && memcmp(a, b, 2 * sizeof *a) == 0, "cleaned text: %d ids", na);
    /* a word with a character the vocabulary lacks is one [UNK]: "x🍕y" */
    n = kvi_tokenize(t, "a x\xF0\x9F\x8D\x95y b", 10, false, false, ids, 64);
    CHECK(n == 3 && ids[1] == 100, "unknown word: n=%d id %d", n, n > 1 ? ids[1] : -1);
    /* a very long word still matches piece by piece (llama.cpp has no word limit) */
    char longw[2001];
    memset(longw, 'a', 2000);
    longw[2000] = 0;
    n = kvi_tokenize(t, longw, 2000, false, false, NULL, 0);
    CHECK(n > 100, "2000-letter word: %d pieces", n);
    CHECK(kvi_tokenize(t, "", 0, true, false, ids, 64) == 2, "empty text: [CLS] [SEP]");
    CHECK(kvi_tokenize(t, " \t\n", 3, false, false, ids, 64) == 0, "only white space: nothing");
    kvi_model_free(t);
}

int main(void)
{
    const char *names[] = { "bert-f32",        "bert-q8_0",           "nomic-bert-f32",  "nomic-bert-moe-f32",
                            "modern-bert-f32", "gemma-embedding-f32", "qwen3-embed-f32", "qwen3-embed-q8_0" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) test_embed_golden(names[i]);
    test_rerank();
    test_decode_and_edges();
    return test_main_end();
}
