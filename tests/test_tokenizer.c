/*
 * test_tokenizer.c — tokenizer against published test vectors and golden data.
 *
 *  - every case of the nine llama.cpp vocabularies in ../shared/golden/tokenizer
 *    and of the WordPiece BGE vocabulary in ../shared/golden/embed (.inp inputs
 *    separated by "\n__ggml_vocab_test__\n", .out expected ids);
 *  - llama2.c tokenizer.bin encodes the golden prompts to their prompt_tokens, and
 *    the stories260K GGUF vocabulary gives the same ids;
 *  - decoding golden greedy tokens reproduces llama2.c's greedy_text;
 *  - the Hugging Face tokenizer.json of TinyStories-656K;
 *  - robustness: invalid UTF-8, empty text, bad ids, short buffers, bad files.
 */
#include "kvinfer.h"
#include "formats/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static tok_tokenizer *load_gguf_tok(const char *rel, gguf_ctx **gout)
{
    kvi_error err = { 0 };
    gguf_ctx *g = NULL;
    int rc = gguf_open(shared_path(rel), false, &g, &err);
    CHECK(rc == 0, "gguf_open %s: %s", rel, err.msg);
    if (rc) return NULL;
    tok_tokenizer *t = NULL;
    rc = tokenizer_load_gguf(g, &t, &err);
    CHECK(rc == 0 && t, "tokenizer_load_gguf %s: %s", rel, err.msg);
    if (gout)
        *gout = g;
    else
        gguf_close(g);
    return t;
}

/* Encodes into a malloc'd array; *n receives the count (negative on error). */
static int32_t *encode(const tok_tokenizer *t, const char *s, size_t len, bool add_special,
                       bool parse_special, int32_t *n)
{
    int32_t cap = 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = tokenizer_encode(t, s, len, add_special, parse_special, ids, cap);
    if (*n > cap) {
        cap = *n;
        ids = realloc(ids, cap * sizeof *ids);
        int32_t again = tokenizer_encode(t, s, len, add_special, parse_special, ids, cap);
        CHECK(again == *n, "second encode gave %d, first %d", again, *n);
    }
    return ids;
}

static void print_ids(const char *what, const int32_t *ids, int32_t n)
{
    fprintf(stderr, "    %s:", what);
    for (int32_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* ../shared/DIR/ggml-vocab-NAME.gguf against its .inp / .out. */
static void test_vocab_in(const char *dir, const char *name)
{
    char rel[128], inp_rel[160], out_rel[160];
    snprintf(rel, sizeof rel, "%s/ggml-vocab-%s.gguf", dir, name);
    snprintf(inp_rel, sizeof inp_rel, "%s.inp", rel);
    snprintf(out_rel, sizeof out_rel, "%s.out", rel);
    tok_tokenizer *t = load_gguf_tok(rel, NULL);
    size_t inp_len = 0;
    char *inp = read_file(shared_path(inp_rel), &inp_len);
    char *out = read_file(shared_path(out_rel), NULL);
    CHECK(inp && out, "%s: cannot read test vectors", name);
    if (!t || !inp || !out) {
        tokenizer_free(t);
        free(inp);
        free(out);
        return;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    char *in_p = inp, *out_p = out;
    int n_cases = 0, n_fail = 0;
    double t0 = now_ms();
    for (;;) {
        char *end = strstr(in_p, sep);
        if (!end) break;
        char *eol = strchr(out_p, '\n');
        CHECK(eol != NULL, "%s: fewer expected lines than inputs", name);
        if (!eol) break;
        *eol = 0;
        int32_t want[512];
        int32_t n_want = 0;
        for (char *q = out_p; *q;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            if (n_want < 512) want[n_want++] = (int32_t)v;
            q = e;
        }
        int32_t n_got;
        int32_t *got = encode(t, in_p, (size_t)(end - in_p), false, false, &n_got);
        bool ok = n_got == n_want && memcmp(got, want, (size_t)n_want * sizeof *want) == 0;
        CHECK(ok, "%s case %d: input \"%.*s\"", name, n_cases, (int)(end - in_p), in_p);
        if (!ok) {
            print_ids("want", want, n_want);
            print_ids("got ", got, n_got);
            n_fail++;
        }
        free(got);
        n_cases++;
        in_p = end + sep_len;
        out_p = eol + 1;
    }
    CHECK(n_cases == 46 && *out_p == 0, "%s: %d cases, expected 46 matching the .out lines", name, n_cases);
    printf("vocab %-15s %d cases, %d failed, %.1f ms\n", name, n_cases, n_fail, now_ms() - t0);
    tokenizer_free(t);
    free(inp);
    free(out);
}

/* Golden case rel under ../shared, CHECKed to load (cJSON_Delete it; NULL when it
 * did not): its prompt and greedy_text into *prompt and *text. */
static cJSON *load_case(const char *rel, const char **prompt, const char **text)
{
    cJSON *j = load_json(shared_path(rel));
    CHECK(j != NULL, "cannot load %s", rel);
    *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(j, "prompt"));
    *text = cJSON_GetStringValue(cJSON_GetObjectItem(j, "greedy_text"));
    return j;
}

/* prompt -> prompt_tokens (BOS first) for a llama2.c-style golden case. */
static void check_prompt(const tok_tokenizer *t, const char *case_rel, const char *what)
{
    const char *prompt, *text;
    cJSON *j = load_case(case_rel, &prompt, &text);
    if (!j) return;
    int32_t want[256];
    int32_t n_want = json_token_ids(cJSON_GetObjectItem(j, "prompt_tokens"), want, 256);
    int32_t n_got;
    int32_t *got = encode(t, prompt, strlen(prompt), true, false, &n_got);
    bool ok = n_got == n_want && memcmp(got, want, (size_t)n_want * sizeof *want) == 0;
    CHECK(ok, "%s: %s prompt \"%s\"", what, case_rel, prompt);
    if (!ok) {
        print_ids("want", want, n_want);
        print_ids("got ", got, n_got);
    }
    free(got);
    cJSON_Delete(j);
}

static char *detok(const tok_tokenizer *t, const int32_t *ids, int32_t n, bool special, bool strip)
{
    int32_t need = tokenizer_detokenize(t, ids, n, NULL, 0, special, strip);
    CHECK(need >= 0, "detokenize size: %d", need);
    if (need < 0) return NULL;
    char *buf = malloc((size_t)need + 1);
    int32_t got = tokenizer_detokenize(t, ids, n, buf, (size_t)need + 1, special, strip);
    CHECK(got == need, "detokenize: %d then %d", need, got);
    return buf;
}

/* greedy_tokens decode to greedy_text; the whole stream (prompt + continuation)
 * decodes, with BOS rendered and the space after each BOS removed, as llama2.c prints it. */
static void check_decode(const tok_tokenizer *t, const char *case_rel, const char *what)
{
    const char *prompt, *text;
    cJSON *j = load_case(case_rel, &prompt, &text);
    if (!j) return;
    int32_t ids[1024];
    int32_t np = json_token_ids(cJSON_GetObjectItem(j, "prompt_tokens"), ids, 256);
    int32_t ng = json_token_ids(cJSON_GetObjectItem(j, "greedy_tokens"), ids + np, 768);
    bool has_bos = false;
    for (int32_t i = np; i < np + ng; i++) has_bos |= ids[i] == tokenizer_bos(t);
    char *s = detok(t, ids + np, ng, true, false);
    if (!has_bos)
        CHECK(s && strcmp(s, text) == 0, "%s: %s greedy text:\n got  \"%s\"\n want \"%s\"", what, case_rel, s,
              text);
    free(s);
    s = detok(t, ids, np + ng, true, true);
    size_t want_len = strlen(prompt) + strlen(text) + 8;
    char *want = malloc(want_len);
    snprintf(want, want_len, "%s%s%s", tokenizer_token_text(t, tokenizer_bos(t)), prompt, text);
    CHECK(s && strcmp(s, want) == 0, "%s: %s stream:\n got  \"%s\"\n want \"%s\"", what, case_rel, s, want);
    free(want);
    free(s);
    cJSON_Delete(j);
}

static void test_llama2c(void)
{
    kvi_error err = { 0 };
    tok_tokenizer *t = NULL;
    int rc = tokenizer_load_llama2c(shared_path("models/tok512.bin"), 512, &t, &err);
    CHECK(rc == 0 && t, "load tok512.bin: %s", err.msg);
    if (!t) return;
    CHECK(tokenizer_n_vocab(t) == 512 && tokenizer_bos(t) == 1 && tokenizer_eos(t) == 2, "llama2c ids");
    CHECK(tokenizer_add_bos(t), "llama2c adds BOS");
    CHECK(tokenizer_is_eog(t, 2) && !tokenizer_is_eog(t, 1), "llama2c EOG set");
    for (int c = 1; c <= 4; c++) {
        char rel[64];
        snprintf(rel, sizeof rel, "golden/stories260K/case%d.json", c);
        check_prompt(t, rel, "tok512.bin");
        check_decode(t, rel, "tok512.bin");
    }
    /* byte fallback: a code point outside the 512 vocabulary becomes bytes + 3 */
    int32_t n;
    int32_t *ids = encode(t, "\xF0\x9F\x98\x80", 4, false, false, &n); /* U+1F600 */
    bool bytes_ok =
        n == 5 && ids[1] == 0xF0 + 3 && ids[2] == 0x9F + 3 && ids[3] == 0x98 + 3 && ids[4] == 0x80 + 3;
    CHECK(bytes_ok, "emoji falls back to its four byte tokens (n=%d)", n);
    char *s = detok(t, ids, n, false, true);
    CHECK(s && strcmp(s, "\xF0\x9F\x98\x80") == 0, "emoji round trip: \"%s\"", s);
    free(s);
    free(ids);
    tokenizer_free(t);

    rc = tokenizer_load_llama2c(shared_path("models/aidreams260K/tok512.bin"), 512, &t, &err);
    CHECK(rc == 0 && t, "load aidreams tok512.bin: %s", err.msg);
    if (t) {
        check_prompt(t, "golden/aidreams260K/case1.json", "aidreams tok512.bin");
        check_decode(t, "golden/aidreams260K/case1.json", "aidreams tok512.bin");
        tokenizer_free(t);
    }

    /* the GGUF of the same model has the same vocabulary and must give the same ids */
    t = load_gguf_tok("models/stories260K.gguf", NULL);
    if (t) {
        for (int c = 1; c <= 4; c++) {
            char rel[64];
            snprintf(rel, sizeof rel, "golden/stories260K/case%d.json", c);
            check_prompt(t, rel, "stories260K.gguf");
        }
        tokenizer_free(t);
    }

    /* a truncated tokenizer.bin is an error, not a crash */
    size_t len;
    char *raw = read_file(shared_path("models/tok512.bin"), &len);
    CHECK(raw && len > 100, "read tok512.bin");
    if (raw) {
        const size_t cuts[] = { 0, 3, 4, 10, 100, len / 2, len - 1 };
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            write_file(tmp_path("tok_trunc.bin"), raw, cuts[k]);
            t = NULL;
            rc = tokenizer_load_llama2c(tmp_path("tok_trunc.bin"), 512, &t, &err);
            CHECK(rc == KVI_E_FORMAT && !t, "truncated to %zu bytes: rc %d", cuts[k], rc);
        }
        /* a hostile length field */
        int32_t big = 0x7FFFFFF0;
        memcpy(raw + 8, &big, 4);
        write_file(tmp_path("tok_bad.bin"), raw, len);
        rc = tokenizer_load_llama2c(tmp_path("tok_bad.bin"), 512, &t, &err);
        CHECK(rc == KVI_E_FORMAT, "huge token length: rc %d", rc);
        free(raw);
    }
    rc = tokenizer_load_llama2c(tmp_path("does_not_exist.bin"), 512, &t, &err);
    CHECK(rc == KVI_E_IO, "missing file: rc %d", rc);
}

static void test_hf(void)
{
    kvi_error err = { 0 };
    tok_tokenizer *t = NULL;
    int rc = tokenizer_load_hf(shared_path("models/TinyStories-656K/tokenizer.json"), &t, &err);
    CHECK(rc == 0 && t, "load tokenizer.json: %s", err.msg);
    if (!t) return;
    CHECK(tokenizer_n_vocab(t) == 2048, "hf n_vocab %d", tokenizer_n_vocab(t));
    CHECK(tokenizer_bos(t) == 1 && tokenizer_eos(t) == 2 && tokenizer_add_bos(t), "hf bos/eos %d %d",
          tokenizer_bos(t), tokenizer_eos(t));
    CHECK(tokenizer_is_eog(t, 2), "hf eos is EOG");
    for (int c = 1; c <= 2; c++) {
        char rel[64];
        snprintf(rel, sizeof rel, "golden/tinystories656K/case%d.json", c);
        const char *prompt, *text;
        cJSON *j = load_case(rel, &prompt, &text);
        if (!j) continue;
        int32_t ids[1024];
        int32_t ng = json_token_ids(cJSON_GetObjectItem(j, "greedy_tokens"), ids, 1024);
        int32_t upto = ng;
        for (int32_t i = 0; i < ng; i++)
            if (ids[i] == 2) {
                upto = i;
                break;
            }
        char *s = detok(t, ids, upto, true, false);
        /* llama2.c printed the text before EOS; compare that part */
        size_t sl = s ? strlen(s) : 0;
        CHECK(s && sl > 20 && strncmp(s, text, sl) == 0,
              "%s greedy text before EOS:\n got  \"%s\"\n want \"%.*s\"", rel, s, (int)sl, text);
        free(s);
        int32_t n;
        int32_t *p = encode(t, prompt, strlen(prompt), true, false, &n);
        CHECK(n >= 2 && p[0] == 1, "%s: prompt encodes with BOS first (n=%d)", rel, n);
        s = detok(t, p, n, false, true);
        CHECK(s && strcmp(s, prompt) == 0, "%s: prompt round trip \"%s\"", rel, s);
        free(s);
        free(p);
        cJSON_Delete(j);
    }
    int32_t n;
    int32_t *p = encode(t, "<|start_story|>Hi", 17, false, true, &n);
    CHECK(n >= 2 && p[0] == 1, "hf: parse_special finds <|start_story|> (n=%d, first %d)", n,
          n > 0 ? p[0] : -1);
    free(p);
    /* this vocabulary has no <0xXX> tokens: an unknown character is <unk> (id 0) */
    p = encode(t, "a\xE2\x82\xAC", 4, false, false, &n);
    CHECK(n >= 2 && p[n - 1] == 0, "hf: unknown character gives <unk> (n=%d)", n);
    free(p);
    tokenizer_free(t);
    rc = tokenizer_load_hf(shared_path("models/TinyStories-656K/config.json"), &t, &err);
    CHECK(rc < 0 && !t, "config.json is not a tokenizer: rc %d", rc);
}

/* A hand-made byte-level tokenizer.json: ids worked out by hand from the merges. */
static void test_hf_byte_level(void)
{
    static const char json[] =
        "{\"added_tokens\":[{\"id\":14,\"content\":\"<|eot|>\",\"special\":true}],"
        "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"h\":0,\"e\":1,\"l\":2,\"o\":3,\"\u0120\":4,\"w\":5,"
        "\"r\":6,\"d\":7,\"he\":8,\"ll\":9,\"hell\":10,\"hello\":11,\"\u0120w\":12,\"or\":13},"
        "\"merges\":[\"h e\",\"l l\",[\"he\",\"ll\"],\"hell o\",\"\u0120 w\",\"o r\"]}}";
    CHECK(write_file(tmp_path("bl_tokenizer.json"), json, sizeof json - 1) == 0, "write tokenizer.json");
    kvi_error err = { 0 };
    tok_tokenizer *t = NULL;
    int rc = tokenizer_load_hf(tmp_path("bl_tokenizer.json"), &t, &err);
    CHECK(rc == 0 && t, "byte-level tokenizer.json: %s", err.msg);
    if (!t) return;
    CHECK(!tokenizer_add_bos(t) && tokenizer_n_vocab(t) == 15, "byte-level: no BOS, 15 tokens");
    int32_t n;
    int32_t *p = encode(t, "hello world<|eot|>", 18, false, true, &n);
    const int32_t want[] = { 11, 12, 13, 2, 7, 14 };
    CHECK(n == 6 && memcmp(p, want, sizeof want) == 0, "byte-level encode (n=%d)", n);
    char *s = detok(t, p, n, true, false);
    CHECK(s && strcmp(s, "hello world<|eot|>") == 0, "byte-level decode \"%s\"", s);
    CHECK(tokenizer_is_eog(t, 14) == false, "<|eot|> is not a known end-of-generation text");
    free(s);
    free(p);
    tokenizer_free(t);

    /* malformed files: errors, never crashes */
    static const char *bad[] = {
        "{",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1e12},\"merges\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":{\"a\":0},\"merges\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(tmp_path("bad_tokenizer.json"), bad[i], strlen(bad[i]));
        t = NULL;
        rc = tokenizer_load_hf(tmp_path("bad_tokenizer.json"), &t, &err);
        CHECK(rc < 0 && !t, "bad tokenizer.json %zu: rc %d", i, rc);
    }
}

/* Writes a small vocabulary GGUF; `variant` breaks one thing. Returns its path. */
static const char *write_vocab_gguf(int variant)
{
    const char *toks[] = { "<unk>", "<s>", "</s>", "a", "b", "ab" };
    const float scores[] = { 0, 0, 0, -1, -2, -0.5f };
    const int32_t types[] = { 2, 3, 3, 1, 1, 1 };
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "tokenizer.ggml.model", variant == 1 ? "ugm" : variant == 2 ? "gpt2" : "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 6);
    gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, variant == 3 ? 5 : 6);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 6);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", variant == 4 ? 99 : 1);
    if (variant == 5) gguf_writer_set_str(w, "tokenizer.ggml.eos_token_id", "two");
    const char *path = tmp_path("vocab_variant.gguf");
    FILE *f = fopen(path, "wb");
    kvi_error err = { 0 };
    int rc = f ? gguf_writer_write_header(w, f, &err) : -1;
    if (f) fclose(f);
    gguf_writer_free(w);
    CHECK(rc == 0, "write vocab gguf: %s", err.msg);
    return path;
}

static void test_gguf_metadata(void)
{
    kvi_error err = { 0 };
    for (int variant = 0; variant <= 5; variant++) {
        const char *path = write_vocab_gguf(variant);
        gguf_ctx *g = NULL;
        if (gguf_open(path, false, &g, &err) != 0) {
            CHECK(0, "reopen variant %d: %s", variant, err.msg);
            continue;
        }
        tok_tokenizer *t = NULL;
        err.msg[0] = 0;
        int rc = tokenizer_load_gguf(g, &t, &err);
        if (variant == 0) {
            CHECK(rc == 0 && t, "good vocabulary: %s", err.msg);
            int32_t ids[8];
            /* " ab" -> "▁", then "a"+"b" merge to "ab" (score -0.5); "▁" is unknown: bytes, none here: <unk> */
            int32_t n = tokenizer_encode(t, "ab", 2, true, false, ids, 8);
            CHECK(n == 3 && ids[0] == 1 && ids[1] == 0 && ids[2] == 5, "tiny SPM encode n=%d", n);
        } else {
            CHECK(rc < 0 && !t && err.msg[0], "variant %d must fail with a message (rc %d)", variant, rc);
            if (variant == 1) CHECK(rc == KVI_E_UNSUPPORTED, "unknown model type: rc %d", rc);
        }
        tokenizer_free(t);
        gguf_close(g);
    }
}

/* Robustness on vocabularies of both kinds. */
static void test_robust(void)
{
    const char *vocabs[] = { "golden/tokenizer/ggml-vocab-llama-spm.gguf",
                             "golden/tokenizer/ggml-vocab-gpt-2.gguf",
                             "golden/tokenizer/ggml-vocab-deepseek-llm.gguf" };
    for (int v = 0; v < 3; v++) {
        tok_tokenizer *t = load_gguf_tok(vocabs[v], NULL);
        if (!t) continue;
        int32_t ids[64];
        CHECK(tokenizer_encode(t, "", 0, false, false, ids, 64) == 0, "%s: empty text gives no tokens",
              vocabs[v]);
        int32_t nb = tokenizer_encode(t, "", 0, true, false, ids, 64);
        CHECK(nb == (tokenizer_add_bos(t) ? 1 : 0), "%s: empty text with add_special: %d", vocabs[v], nb);
        CHECK(tokenizer_encode(t, NULL, 0, false, false, ids, 64) == 0, "%s: NULL empty text", vocabs[v]);
        /* invalid UTF-8: stray continuation, truncated sequence, overlong, 0xFF */
        const char bad[] = "a\x80\x80 b\xE2\x82 c\xC0\xAF d\xFF\xFE e";
        int32_t n;
        int32_t *p = encode(t, bad, sizeof bad - 1, false, false, &n);
        CHECK(n > 0, "%s: invalid UTF-8 encodes (%d)", vocabs[v], n);
        char *s = n > 0 ? detok(t, p, n, false, true) : NULL;
        /* deepseek's user-defined tokens "À", "ÿ"... stand for the bytes invalid in UTF-8
         * but decode as their text (llama.cpp does the same): no exact round trip there */
        if (v < 2)
            CHECK(s && strlen(s) == sizeof bad - 1 && memcmp(s, bad, sizeof bad - 1) == 0,
                  "%s: invalid UTF-8 bytes survive a round trip", vocabs[v]);
        free(s);
        free(p);
        /* short output buffer: the full count comes back, only n_max written */
        const char *txt = "Hello world, this is a longer sentence.";
        int32_t full = tokenizer_encode(t, txt, strlen(txt), false, false, NULL, 0);
        CHECK(full > 3, "%s: count with n_max 0: %d", vocabs[v], full);
        ids[2] = -77;
        CHECK(tokenizer_encode(t, txt, strlen(txt), false, false, ids, 2) == full && ids[2] == -77,
              "%s: n_max respected", vocabs[v]);
        /* ids out of range */
        char buf[16];
        CHECK(tokenizer_token_to_piece(t, -1, buf, sizeof buf, true) < 0, "negative id");
        CHECK(tokenizer_token_to_piece(t, tokenizer_n_vocab(t), buf, sizeof buf, true) < 0, "id n_vocab");
        int32_t badids[2] = { 5, 1 << 30 };
        CHECK(tokenizer_detokenize(t, badids, 2, buf, sizeof buf, false, false) < 0, "detokenize bad id");
        CHECK(tokenizer_token_text(t, -5) == NULL, "token_text bad id");
        /* detokenize into a tiny buffer: terminated, returns the full size */
        int32_t hello[64];
        int32_t nh = tokenizer_encode(t, "Hello world", 11, false, false, hello, 64);
        char tiny[4];
        int32_t need = tokenizer_detokenize(t, hello, nh, tiny, sizeof tiny, false, true);
        CHECK(need == 11 && tiny[3] == 0 && memcmp(tiny, "Hel", 3) == 0, "%s: tiny buffer: need %d \"%s\"",
              vocabs[v], need, tiny);
        /* performance: ~8 KB of mixed text in milliseconds */
        size_t big_len = 0;
        char *big = malloc(9000);
        const char *chunk = "The quick brown fox, 1234567 jumps!  Über naïve café — 你好世界 \n\t";
        while (big_len + strlen(chunk) < 8192) {
            memcpy(big + big_len, chunk, strlen(chunk));
            big_len += strlen(chunk);
        }
        double t0 = now_ms();
        p = encode(t, big, big_len, true, false, &n);
        double dt = now_ms() - t0;
        CHECK(n > 1000 && dt < 500, "%s: 8 KB took %.1f ms for %d tokens", vocabs[v], dt, n);
        printf("%s: %zu bytes -> %d tokens in %.2f ms\n", vocabs[v], big_len, n, dt);
        s = detok(t, p, n, false, true);
        CHECK(s && strlen(s) == big_len && memcmp(s, big, big_len) == 0, "%s: 8 KB round trip", vocabs[v]);
        free(s);
        free(p);
        /* long runs (one huge piece for the merges, long regex matches) stay fast */
        const char *fills[] = { "a", " ", "1", "\n" };
        big = realloc(big, 65536);
        for (int f = 0; f < 4; f++) {
            memset(big, fills[f][0], 65536);
            t0 = now_ms();
            p = encode(t, big, 65536, false, false, &n);
            dt = now_ms() - t0;
            CHECK(n > 0 && dt < 2000, "%s: 64 KB of '%s' took %.1f ms (%d tokens)", vocabs[v], fills[f], dt,
                  n);
            free(p);
        }
        free(big);
        tokenizer_free(t);
    }
}

/* Special tokens: parse_special, EOG set, BOS handling on the phi-3 (SPM) and deepseek-coder vocabularies. */
static void test_special(void)
{
    tok_tokenizer *t = load_gguf_tok("golden/tokenizer/ggml-vocab-phi-3.gguf", NULL);
    if (t) {
        /* <|end|> = 32007 and <|endoftext|> = 32000 are control tokens: EOG; BOS is not */
        CHECK(tokenizer_is_eog(t, 32007) && tokenizer_is_eog(t, 32000) && !tokenizer_is_eog(t, 1),
              "phi-3 EOG set");
        int32_t n;
        int32_t *p = encode(t, "<|user|>hi<|end|>", 17, false, true, &n);
        CHECK(n >= 3 && p[0] == 32010 && p[n - 1] == 32007, "phi-3 parse_special (n=%d)", n);
        free(p);
        p = encode(t, "<|user|>", 8, false, false, &n);
        CHECK(n > 1 && p[0] != 32010, "phi-3 without parse_special keeps text (n=%d)", n);
        char *s = detok(t, p, n, false, true);
        CHECK(s && strcmp(s, "<|user|>") == 0, "phi-3 plain-text special round trip \"%s\"", s);
        free(s);
        free(p);
        int32_t ids[3] = { 1, 32010, 32007 };
        s = detok(t, ids, 3, false, false);
        CHECK(s && s[0] == 0, "control tokens hidden without render_special: \"%s\"", s);
        free(s);
        s = detok(t, ids, 3, true, false);
        CHECK(s && strcmp(s, "<s><|user|><|end|>") == 0, "control tokens rendered: \"%s\"", s);
        free(s);
        CHECK(tokenizer_chat_template(t) != NULL && strstr(tokenizer_chat_template(t), "<|user|>"),
              "phi-3 chat template");
        tokenizer_free(t);
    }
    t = load_gguf_tok("golden/tokenizer/ggml-vocab-deepseek-coder.gguf", NULL);
    if (t) {
        int32_t n;
        int32_t *p = encode(t, "x", 1, true, false, &n);
        CHECK(n == 2 && p[0] == 32013, "deepseek-coder add_bos from metadata (n=%d)", n);
        free(p);
        tokenizer_free(t);
    }
    t = load_gguf_tok("golden/tokenizer/ggml-vocab-gpt-2.gguf", NULL);
    if (t) {
        CHECK(!tokenizer_add_bos(t), "gpt-2 adds no BOS by default");
        CHECK(tokenizer_is_eog(t, 50256), "gpt-2 <|endoftext|> is EOG");
        tokenizer_free(t);
    }
}

/* Pieces joined with '|' into a fixed buffer. */
typedef struct joined {
    char s[256];
    size_t n;
} joined;

static int join_piece(void *ctx, const char *piece, size_t len)
{
    joined *j = ctx;
    if (j->n + len + 2 >= sizeof j->s) return -100;
    if (j->n) j->s[j->n++] = '|';
    memcpy(j->s + j->n, piece, len);
    j->n += len;
    j->s[j->n] = 0;
    return 0;
}

/* Pre-tokenizers without a vocabulary file here, against hand-applied regexes. */
static void test_pretok(void)
{
    static const struct {
        const char *pre, *text, *want;
    } cases[] = {
        /* Llama 3: digits in groups of up to three, \s+(?!\S) leaves the last space to the word */
        { "llama-bpe", "I'm 12345  ok\n\n", "I|'m| |123|45| | ok|\n\n" },
        { "llama-bpe", "HELLO'S x", "HELLO|'S| x" },
        /* Qwen2: single digits */
        { "qwen2", "a 123", "a| |1|2|3" },
        /* GPT-2: a space joins the next word, digits stay together */
        { "gpt-2", "Hello  world 123!", "Hello| | world| 123|!" },
        /* StarCoder: every digit apart, first */
        { "starcoder", "x42", "x|4|2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvi_error err = { 0 };
        tok_pretok *p = NULL;
        int rc = tok_pretok_create(cases[i].pre, &p, &err);
        CHECK(rc == 0, "pretok %s: %s", cases[i].pre, err.msg);
        if (rc) continue;
        joined j = { .n = 0 };
        rc = tok_pretok_split(p, cases[i].text, strlen(cases[i].text), join_piece, &j);
        CHECK(rc == 0 && strcmp(j.s, cases[i].want) == 0, "pretok %s \"%s\": got \"%s\" want \"%s\"",
              cases[i].pre, cases[i].text, j.s, cases[i].want);
        tok_pretok_free(p);
    }
    {
        tok_pretok *u = NULL;
        kvi_error e2 = { 0 };
        CHECK(tok_pretok_create("no-such-pre", &u, &e2) == KVI_E_UNSUPPORTED && !u &&
                  strstr(e2.msg, "no-such-pre"),
              "an unknown pre-tokenizer name is refused, naming it: %s", e2.msg);
    }
    const char *bad[] = { "(" };
    tok_pretok *p = NULL;
    kvi_error err = { 0 };
    CHECK(tok_pretok_create_patterns(bad, 1, &p, &err) == KVI_E_FORMAT && !p && err.msg[0],
          "a bad regex is an error with a message");
}

int main(void)
{
    const char *names[] = { "llama-spm", "phi-3",  "gpt-2",          "mpt",         "falcon",
                            "starcoder", "refact", "deepseek-coder", "deepseek-llm" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) test_vocab_in("golden/tokenizer", names[i]);
    test_vocab_in("golden/embed", "bert-bge"); /* WordPiece (BGE) */
    test_llama2c();
    test_hf();
    test_hf_byte_level();
    test_gguf_metadata();
    test_special();
    test_pretok();
    test_robust();
    return test_main_end();
}
