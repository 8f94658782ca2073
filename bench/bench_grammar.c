/*
 * bench_grammar.c — what a grammar's token mask costs per generated token.
 *
 * For a model's vocabulary (default stories260K; any GGUF, e.g. one from
 * `kvinfer synth --vocab 128000`), S streams (matchers of one JSON grammar, the
 * shape of response_format json_object) each take a random allowed token per
 * step; every stream's mask is computed every step, as the scheduler does. Prints
 * microseconds per mask (the public path: trie walk plus the per-state cache).
 * tests/test_grammar.c prints the cache-off and brute-force figures too.
 *
 * Build: built with kvinfer (BUILD/bench_grammar).
 * Run: BUILD/bench_grammar [model.gguf] [steps=64]
 */
#include "kvinfer.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char json_gbnf[] =
    "root ::= object\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt])* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,15})?\n"
    "ws ::= \"\" | \" \" | \"\\n\" [ \\t]{0,20}\n";

static uint64_t rng = 0x853C49E6748FEA9Bull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* One run: us per mask over steps x streams. */
static double run(const kvi_grammar *g, const kvi_grammar_vocab *v, const kvi_model *mdl, int streams,
                  int steps)
{
    kvi_grammar_matcher *ms[16];
    const int32_t nv = kvi_n_vocab(mdl);
    uint32_t *bits = malloc(((size_t)nv + 31) / 32 * 4);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    for (int i = 0; i < streams; i++) ms[i] = kvi_grammar_matcher_create(g, v, NULL);
    double t_mask = 0;
    int n = 0;
    for (int s = 0; s < steps; s++)
        for (int i = 0; i < streams; i++) {
            double t0 = kvi_time_ms();
            int32_t c = kvi_grammar_matcher_mask(ms[i], bits);
            t_mask += kvi_time_ms() - t0;
            n++;
            int32_t na = 0;
            for (int32_t t = 0; c > 0 && t < nv; t++)
                if (((bits[t >> 5] >> (t & 31)) & 1) && !kvi_token_is_eog(mdl, t)) allowed[na++] = t;
            if (na == 0) {
                kvi_grammar_matcher_free(ms[i]); /* complete: start again */
                ms[i] = kvi_grammar_matcher_create(g, v, NULL);
                continue;
            }
            kvi_grammar_matcher_accept_token(ms[i], allowed[next_rand() % (uint64_t)na]);
        }
    for (int i = 0; i < streams; i++) kvi_grammar_matcher_free(ms[i]);
    free(bits);
    free(allowed);
    return 1000.0 * t_mask / n;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "../shared/models/stories260K.gguf";
    const int steps = argc > 2 ? atoi(argv[2]) : 64;
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(path, &err);
    if (!m) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    kvi_grammar_vocab *v = kvi_grammar_vocab_create(m, &err);
    kvi_grammar *g = kvi_grammar_parse(json_gbnf, strlen(json_gbnf), &err);
    if (!v || !g) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    printf("vocabulary %d tokens, JSON grammar, %d steps\n", kvi_n_vocab(m), steps);
    for (int streams = 1; streams <= 16; streams *= 16)
        printf("  %2d stream%s: %8.1f us per mask\n", streams, streams > 1 ? "s" : " ",
               run(g, v, m, streams, steps));
    kvi_grammar_free(g);
    kvi_grammar_vocab_free(v);
    kvi_model_free(m);
    return 0;
}
