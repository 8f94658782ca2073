/*
 * loadgen_turns.c — the conversations of `kvinfer loadgen --turns` and their
 * per-turn report (definitions in loadgen_turns.h).
 *
 * Invariants: a conversation's user messages depend only on (seed, its index,
 * the turn), so every run asks the same questions; a turn's figures are means
 * over the conversations whose turn completed (recomputed: over those whose
 * previous turn completed too).
 */
#include "cli/loadgen_turns.h"

#include "cli/loadgen_embed.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lg_conv_init(lg_conv *c, uint64_t seed, int index, int words)
{
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->index = index;
    c->words = words;
    c->messages = cJSON_CreateArray();
    return c->messages ? 0 : -1;
}

void lg_conv_free(lg_conv *c)
{
    cJSON_Delete(c->messages);
    c->messages = NULL;
}

static int add_message(lg_conv *c, const char *role, const char *text)
{
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", text)) {
        cJSON_Delete(m);
        return -1;
    }
    cJSON_AddItemToArray(c->messages, m);
    return 0;
}

char *lg_conv_body(lg_conv *c, int max_tokens, const char *model)
{
    char *text = malloc((size_t)c->words * (LG_CORPUS_WORD_MAX + 1) + 1);
    if (!text) return NULL;
    /* the stream of (conversation, turn): 2^20 turns per conversation apart */
    lg_corpus_words(text, c->seed, ((uint64_t)c->index << 20) + (uint64_t)c->turn, c->words);
    const int rc = add_message(c, "user", text);
    free(text);
    if (rc) return NULL;
    c->turn++;
    cJSON *o = cJSON_CreateObject();
    cJSON *so = cJSON_CreateObject();
    if (!o || !so || !cJSON_AddItemReferenceToObject(o, "messages", c->messages) ||
        !cJSON_AddNumberToObject(o, "max_tokens", max_tokens) || !cJSON_AddTrueToObject(o, "stream") ||
        !cJSON_AddTrueToObject(o, "ignore_eos") || !cJSON_AddTrueToObject(so, "include_usage") ||
        (model && !cJSON_AddStringToObject(o, "model", model))) {
        cJSON_Delete(o);
        cJSON_Delete(so);
        return NULL;
    }
    cJSON_AddItemToObject(o, "stream_options", so);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return body;
}

int lg_conv_answer(lg_conv *c, const char *text) { return add_message(c, "assistant", text ? text : ""); }

/* The means of turn t over the conversations that completed it. */
typedef struct turn_sum {
    int n, n_re;
    double prompt, cached, computed, recomputed, dropped, ttft;
} turn_sum;

static turn_sum turn_of(const lg_turn_res *res, int n_conv, int turns, int t)
{
    turn_sum s = { 0 };
    for (int c = 0; c < n_conv; c++) {
        const lg_turn_res *r = &res[(size_t)c * (size_t)turns + (size_t)t];
        if (!r->ok || r->prompt < 0) continue;
        const int cached = r->cached > 0 ? r->cached : 0;
        s.n++;
        s.prompt += r->prompt;
        s.cached += cached;
        s.computed += r->prompt - cached;
        s.ttft += r->ttft_ms;
        s.dropped += r->dropped;
        const lg_turn_res *p = t > 0 ? r - 1 : NULL;
        if (p && p->ok && p->prompt >= 0 && p->completion >= 0) {
            s.recomputed += p->prompt + p->completion - cached;
            s.n_re++;
        }
    }
    if (s.n) {
        s.prompt /= s.n;
        s.cached /= s.n;
        s.computed /= s.n;
        s.ttft /= s.n;
        s.dropped /= s.n;
    }
    if (s.n_re) s.recomputed /= s.n_re;
    return s;
}

void lg_turns_report(const lg_turn_res *res, int n_conv, int turns, cJSON *o)
{
    cJSON *a = o ? cJSON_AddArrayToObject(o, "turns") : NULL;
    if (!o)
        printf("turn  completed  prompt  cached  computed  recomputed  dropped  TTFT ms   (means per "
               "conversation)\n");
    for (int t = 0; t < turns; t++) {
        const turn_sum s = turn_of(res, n_conv, turns, t);
        if (!o) {
            printf("%4d  %9d  %6.1f  %6.1f  %8.1f  %10.1f  %7.1f  %7.2f\n", t + 1, s.n, s.prompt, s.cached,
                   s.computed, s.recomputed, s.dropped, s.ttft);
            continue;
        }
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "turn", t + 1);
        cJSON_AddNumberToObject(j, "completed", s.n);
        cJSON_AddNumberToObject(j, "prompt_tokens", s.prompt);
        cJSON_AddNumberToObject(j, "cached_tokens", s.cached);
        cJSON_AddNumberToObject(j, "computed", s.computed);
        cJSON_AddNumberToObject(j, "recomputed", s.recomputed);
        cJSON_AddNumberToObject(j, "positions_dropped", s.dropped);
        cJSON_AddNumberToObject(j, "ttft_ms", s.ttft);
        cJSON_AddItemToArray(a, j);
    }
}
