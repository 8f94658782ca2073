/*
 * bench_grammar.c — what a grammar's token mask costs per generated token.
 *
 * For a model's vocabulary (default stories260K; any GGUF, e.g. one from
 * `kvinfer synth --vocab 128000`), S streams (matchers of one JSON grammar, the
 * shape of response_format json_object) each take a random allowed token per
 * step; every stream's mask is computed every step, as the scheduler does. Prints
 * microseconds per mask with the per-state cache on and off, and the brute-force
 * reference (every token's bytes through the matcher) for comparison.
 *
 * Build: built with kvinfer (BUILD/bench_grammar).
 * Run: BUILD/bench_grammar [model.gguf] [steps=64]
 */
#include "kvinfer.h"
#include "base/clock.h"
#include "sampling/grammar_int.h"

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
static double run(const kvi_grammar *g, const kvi_grammar_vocab *v, int streams, bool cache, int steps)
{
    kvi_grammar_matcher *ms[16];
    uint32_t *bits = malloc(((size_t)v->n_vocab + 31) / 32 * 4);
    int32_t *allowed = malloc((size_t)v->n_vocab * sizeof *allowed);
    for (int i = 0; i < streams; i++) {
        ms[i] = kvi_grammar_matcher_create(g, v, NULL);
        grammar_matcher_set_cache(ms[i], cache);
    }
    double t_mask = 0;
    int n = 0;
    for (int s = 0; s < steps; s++)
        for (int i = 0; i < streams; i++) {
            double t0 = kvi_time_ms();
            int32_t c = kvi_grammar_matcher_mask(ms[i], bits);
            t_mask += kvi_time_ms() - t0;
            n++;
            int32_t na = 0;
            for (int32_t t = 0; c > 0 && t < v->n_vocab; t++)
                if (((bits[t >> 5] >> (t & 31)) & 1) && !v->is_eog[t]) allowed[na++] = t;
            if (na == 0) {
                kvi_grammar_matcher_free(ms[i]); /* complete: start again */
                ms[i] = kvi_grammar_matcher_create(g, v, NULL);
                grammar_matcher_set_cache(ms[i], cache);
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
    printf("vocabulary %d tokens (%u trie nodes), JSON grammar, %d steps\n", v->n_vocab, v->n_nodes, steps);
    for (int streams = 1; streams <= 16; streams *= 16)
        for (int cache = 0; cache < 2; cache++)
            printf("  %2d stream%s, cache %-3s: %8.1f us per mask\n", streams, streams > 1 ? "s" : " ",
                   cache ? "on" : "off", run(g, v, streams, cache, steps));
    gm_scratch sc;
    gm_scratch_init(&sc);
    gm_state st = { 0 };
    gm_state_init(g, &st, &sc);
    uint32_t *bits = malloc(((size_t)v->n_vocab + 31) / 32 * 4);
    double t0 = kvi_time_ms();
    for (int i = 0; i < 4; i++) grammar_mask_reference(g, v, &st, bits);
    printf("  brute-force reference  : %8.1f us per mask\n", 1000.0 * (kvi_time_ms() - t0) / 4);
    free(bits);
    gm_state_free(&st);
    gm_scratch_free(&sc);
    kvi_grammar_free(g);
    kvi_grammar_vocab_free(v);
    kvi_model_free(m);
    return 0;
}
