/*
 * loadgen_turns.h — `kvinfer loadgen --turns T`: multi-turn chats
 * (cli/loadgen_turns.c).
 *
 * Conversation c is T requests to /v1/chat/completions, one after the other:
 * turn t's messages are turn t-1's, the assistant's answer to them (the
 * streamed text) and a new user message of `words` words drawn from (seed, c,
 * t) alone (cli/loadgen_embed.h's corpus). What a turn costs beyond its new
 * text is what the server recomputes of the context it held after the
 * previous turn:
 *
 *   held_{t-1}       = prompt_{t-1} + completion_{t-1}   (usage of turn t-1)
 *   recomputed_t     = held_{t-1} - cached_t              (cached_t: usage's cached_tokens)
 *
 * so block rounding, a template that drops or rewrites earlier turns (reasoning
 * left out, say) and an answer tokenized differently when it comes back as text
 * all show as recomputed positions; positions a server's context policy
 * dropped (usage.positions_dropped) are reported beside. The report gives, per turn, the means over
 * the conversations that reached it.
 *
 *   lg_conv.messages   JSON list of {"role", "content"}, the conversation so far
 *   lg_turn_res        [n_conv * turns] results, conversation-major
 */
#ifndef KVI_CLI_LOADGEN_TURNS_H
#define KVI_CLI_LOADGEN_TURNS_H

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

typedef struct lg_conv {
    struct cJSON *messages;
    uint64_t seed;
    int index; /* the conversation's number */
    int turn;  /* turns asked so far */
    int words; /* words per user message */
} lg_conv;

/* One turn's outcome, as the response's usage said (-1: absent). */
typedef struct lg_turn_res {
    bool ok;
    int prompt, cached, completion;
    int dropped; /* positions the server's context policy dropped */
    double ttft_ms;
} lg_turn_res;

/* 0, or -1 when out of memory. */
int lg_conv_init(lg_conv *c, uint64_t seed, int index, int words);
void lg_conv_free(lg_conv *c);
/* The next turn's request body (malloc'd; NULL when out of memory): a new user
 * message appended, max_tokens, streamed with usage; model NULL: left out. */
char *lg_conv_body(lg_conv *c, int max_tokens, const char *model);
/* The assistant's answer to the last turn appended; 0, or -1 when out of memory. */
int lg_conv_answer(lg_conv *c, const char *text);

/* Per-turn means of res [n_conv * turns] on stdout: JSON members added to o
 * when o is not NULL, else text lines. */
void lg_turns_report(const lg_turn_res *res, int n_conv, int turns, struct cJSON *o);

#endif
