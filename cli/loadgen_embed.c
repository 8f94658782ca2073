/*
 * loadgen_embed.c — the corpus and the answer check of `kvinfer loadgen
 * --embeddings` (see loadgen_embed.h for the corpus's definition).
 */
#include "cli/loadgen_embed.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const words[] = {
    "the",     "of",     "and",     "to",       "in",      "is",         "that",   "for",   "it",    "as",
    "was",     "with",   "be",      "by",       "on",      "not",        "he",     "this",  "are",   "or",
    "his",     "from",   "at",      "which",    "but",     "have",       "an",     "had",   "they",  "you",
    "were",    "their",  "one",     "all",      "we",      "can",        "her",    "has",   "there", "been",
    "if",      "more",   "when",    "will",     "would",   "who",        "so",     "no",    "time",  "people",
    "year",    "way",    "day",     "man",      "thing",   "woman",      "life",   "child", "world", "school",
    "state",   "family", "group",   "country",  "problem", "hand",       "part",   "place", "case",  "week",
    "company", "system", "program", "question", "work",    "government", "number", "night", "point", "home",
    "water",   "room",   "mother",  "area",     "money",   "story",      "fact",   "month", "lot",   "right",
    "study",   "book",   "eye",     "job",      "word",    "business",   "issue",  "side",  "kind",  "head",
};

/* splitmix64: the corpus generator */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int lg_embed_count(int n_texts, int batch, int i)
{
    const int a = i * batch, b = a + batch < n_texts ? a + batch : n_texts;
    return b > a ? b - a : 0;
}

/* n words of the stream st appended to b at len, separated by spaces; the new length. */
static size_t add_words(char *b, size_t len, uint64_t *st, int n)
{
    for (int w = 0; w < n; w++) {
        const char *s = words[mix(st) % (sizeof words / sizeof *words)];
        if (w) b[len++] = ' ';
        const size_t sl = strlen(s);
        memcpy(b + len, s, sl);
        len += sl;
    }
    return len;
}

size_t lg_corpus_words(char *b, uint64_t seed, uint64_t k, int n)
{
    uint64_t st = seed * 0x100000001B3ull + k;
    const size_t len = add_words(b, 0, &st, n);
    b[len] = 0;
    return len;
}

/* Appends text k of the corpus to b as a JSON string; the new length. */
static size_t add_text(char *b, size_t len, uint64_t seed, int k)
{
    uint64_t st = seed * 0x100000001B3ull + (uint64_t)k;
    const int n = 20 + (int)(mix(&st) % 181);
    b[len++] = '"';
    len = add_words(b, len, &st, n);
    b[len++] = '.';
    b[len++] = '"';
    return len;
}

char *lg_embed_body(uint64_t seed, int n_texts, int batch, int i, const char *model)
{
    const int n = lg_embed_count(n_texts, batch, i);
    char *q = NULL;
    if (model) {
        cJSON *s = cJSON_CreateString(model);
        q = s ? cJSON_PrintUnformatted(s) : NULL;
        cJSON_Delete(s);
        if (!q) return NULL;
    }
    /* a text: at most 200 words of at most 10 bytes and a space, quotes, a period, a comma */
    const size_t cap = (size_t)n * (200 * 11 + 8) + (q ? strlen(q) : 0) + 64;
    char *b = malloc(cap);
    if (!b) {
        free(q);
        return NULL;
    }
    size_t len = (size_t)snprintf(b, cap, "{\"input\":[");
    for (int k = 0; k < n; k++) {
        if (k) b[len++] = ',';
        len = add_text(b, len, seed, i * batch + k);
    }
    snprintf(b + len, cap - len, "],\"encoding_format\":\"float\"%s%s}", q ? ",\"model\":" : "", q ? q : "");
    free(q);
    return b;
}

bool lg_embed_check(const char *body, size_t len, int want, int *tokens, char *err, size_t cap)
{
    *tokens = -1;
    cJSON *o = cJSON_ParseWithLength(body ? body : "", len);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    int n = 0;
    bool ok = cJSON_IsArray(data);
    const cJSON *d;
    cJSON_ArrayForEach(d, data)
    {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "embedding");
        ok = ok && (cJSON_IsString(e) || (cJSON_IsArray(e) && e->child));
        n++;
    }
    if (!ok || n != want) {
        snprintf(err, cap, "the answer holds %d embeddings (%d asked)%s", n, want,
                 ok ? "" : " or is malformed");
        cJSON_Delete(o);
        return false;
    }
    const cJSON *pt =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "usage"), "prompt_tokens");
    if (cJSON_IsNumber(pt)) *tokens = (int)pt->valuedouble;
    cJSON_Delete(o);
    return true;
}
