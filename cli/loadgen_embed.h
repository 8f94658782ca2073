/*
 * loadgen_embed.h — `kvinfer loadgen --embeddings`: the corpus of texts and
 * the check of one /v1/embeddings answer (cli/loadgen_embed.c).
 *
 * Text k of the corpus (k < n_texts) is 20 .. 200 words of common English
 * drawn by a generator seeded from (seed, k) alone, so every run and every
 * batch size sends the same texts; request i carries texts [i * batch,
 * min((i + 1) * batch, n_texts)) as OpenAI's "input": a list of strings.
 */
#ifndef KVI_CLI_LOADGEN_EMBED_H
#define KVI_CLI_LOADGEN_EMBED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The body of request i (malloc'd; NULL when out of memory); model NULL: left out. */
char *lg_embed_body(uint64_t seed, int n_texts, int batch, int i, const char *model);
/* n words of common English drawn from (seed, k) alone into b (room for
 * LG_CORPUS_WORD_MAX + 1 bytes a word, and the NUL); the length written. */
#define LG_CORPUS_WORD_MAX 10
size_t lg_corpus_words(char *b, uint64_t seed, uint64_t k, int n);
/* Texts in request i. */
int lg_embed_count(int n_texts, int batch, int i);
/* Checks a 200 answer (body [len]): an object whose "data" holds want
 * embeddings, each a list of numbers or a base64 string; *tokens gets
 * usage.prompt_tokens (-1 when absent). false with err filled otherwise. */
bool lg_embed_check(const char *body, size_t len, int want, int *tokens, char *err, size_t cap);

#endif
