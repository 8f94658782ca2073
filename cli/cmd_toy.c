/*
 * cmd_toy.c — `kvinfer toy`: the worked example of prefill, the causal mask,
 * decode and the KV cache, small enough to follow with pencil and paper.
 *
 * Data: four tokens, each one number (its "embedding"): Today 10, weather 20,
 * is 1, so 5; then a fifth token, nice 8, arrives for the decode step. Two
 * attention heads with one-dimensional queries, keys and values, written by hand:
 *   head A "attend to even positions": q = 1, k = 2 at even positions else 0;
 *   head B "attend to the last token": q = 2, k = position (later keys score higher);
 *   both heads: v = the token's value.
 * A row's output is 0.5 * (head A output) + 0.5 * (head B output).
 *
 * Buffers (n = number of positions, at most TOY_MAX):
 *   q[h][n], k[h][n], v[h][n]   per head h in {A, B}
 *   score[h][n][n], weight[h][n][n]   one row per query position (prefill only)
 *   cache_k[h][TOY_MAX], cache_v[h][TOY_MAX]   the KV cache, filled 0..len-1
 *
 * Invariants the program demonstrates (and checks, printing the agreement flag):
 *   - row i only sees positions 0..i (the mask), so adding a fifth token never
 *     changes rows 0..3;
 *   - the decode row computed from cached keys/values equals row 4 of a full
 *     recompute of all five rows.
 */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TOY_MAX 5
#define TOY_HEADS 2

typedef struct toy_token {
    const char *text;
    double value;
} toy_token;

static const toy_token k_tokens[TOY_MAX] = {
    { "Today", 10 }, { "weather", 20 }, { "is", 1 }, { "so", 5 }, { "nice", 8 },
};
static const char *const k_head_name[TOY_HEADS] = { "attend to even positions", "attend to the last token" };

/* The hand-written projections of head h for the token at position pos. */
static double toy_query(int h, int pos)
{
    (void)pos;
    return h == 0 ? 1.0 : 2.0;
}
static double toy_key(int h, int pos) { return h == 0 ? (pos % 2 == 0 ? 2.0 : 0.0) : (double)pos; }
static double toy_value(int h, int pos)
{
    (void)h;
    return k_tokens[pos].value;
}

/* Attention of one query over keys/values 0..n-1: fills score and weight
 * (softmax of the scores, max subtracted) and returns the weighted sum of values. */
static double toy_attend(double q, const double *k, const double *v, int n, double *score, double *weight)
{
    double mx = -INFINITY, sum = 0.0, out = 0.0;
    for (int j = 0; j < n; j++) {
        score[j] = q * k[j];
        if (score[j] > mx) mx = score[j];
    }
    for (int j = 0; j < n; j++) sum += (weight[j] = exp(score[j] - mx));
    for (int j = 0; j < n; j++) {
        weight[j] /= sum;
        out += weight[j] * v[j];
    }
    return out;
}

/* A full forward pass over positions 0..n-1 at once ("prefill"): every row i
 * computes scores against every column j, then the causal mask sets j > i to
 * -inf (weight 0). Fills out[i] (blended), head_out[h][i], score, weight. */
typedef struct toy_pass {
    int n;
    double q[TOY_HEADS][TOY_MAX], k[TOY_HEADS][TOY_MAX], v[TOY_HEADS][TOY_MAX];
    double score[TOY_HEADS][TOY_MAX][TOY_MAX];  /* [h][row][col], -inf where masked */
    double weight[TOY_HEADS][TOY_MAX][TOY_MAX]; /* [h][row][col], 0 where masked */
    double head_out[TOY_HEADS][TOY_MAX];
    double out[TOY_MAX];
} toy_pass;

static void toy_full_pass(toy_pass *p, int n)
{
    p->n = n;
    for (int h = 0; h < TOY_HEADS; h++)
        for (int i = 0; i < n; i++) {
            p->q[h][i] = toy_query(h, i);
            p->k[h][i] = toy_key(h, i);
            p->v[h][i] = toy_value(h, i);
        }
    for (int h = 0; h < TOY_HEADS; h++)
        for (int i = 0; i < n; i++) {
            double s[TOY_MAX], w[TOY_MAX];
            double mx = -INFINITY, sum = 0.0, o = 0.0;
            for (int j = 0; j < n; j++) {
                s[j] = (j <= i) ? p->q[h][i] * p->k[h][j] : -INFINITY; /* the causal mask */
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < n; j++) sum += (w[j] = exp(s[j] - mx)); /* exp(-inf) = 0 */
            for (int j = 0; j < n; j++) {
                w[j] /= sum;
                o += w[j] * p->v[h][j];
                p->score[h][i][j] = s[j];
                p->weight[h][i][j] = w[j];
            }
            p->head_out[h][i] = o;
        }
    for (int i = 0; i < n; i++) p->out[i] = 0.5 * p->head_out[0][i] + 0.5 * p->head_out[1][i];
}

static void toy_print_mask(int n)
{
    for (int i = 0; i < n; i++) {
        printf("%s", i == 0 ? "tensor([[" : "        [");
        for (int j = 0; j < n; j++) printf("%s%5s", j ? ", " : "", j <= i ? "True" : "False");
        printf("]%s\n", i == n - 1 ? "])" : ",");
    }
}

static void toy_print_matrix(const double m[TOY_MAX][TOY_MAX], int n, const char *indent)
{
    for (int i = 0; i < n; i++) {
        printf("%s%-8s [", indent, k_tokens[i].text);
        for (int j = 0; j < n; j++) {
            if (isinf(m[i][j]))
                printf(" %6s", "-inf");
            else
                printf(" %6.2f", m[i][j]);
        }
        printf(" ]\n");
    }
}

static cJSON *toy_json_row(const toy_pass *p, int i)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "pos", i);
    cJSON_AddStringToObject(r, "token", k_tokens[i].text);
    cJSON_AddNumberToObject(r, "head_a", p->head_out[0][i]);
    cJSON_AddNumberToObject(r, "head_b", p->head_out[1][i]);
    cJSON_AddNumberToObject(r, "output", p->out[i]);
    cJSON *w = cJSON_AddArrayToObject(r, "weights_a");
    for (int j = 0; j <= i; j++) cJSON_AddItemToArray(w, cJSON_CreateNumber(p->weight[0][i][j]));
    w = cJSON_AddArrayToObject(r, "weights_b");
    for (int j = 0; j <= i; j++) cJSON_AddItemToArray(w, cJSON_CreateNumber(p->weight[1][i][j]));
    return r;
}

/* Everything the example computes (see the file comment). */
typedef struct toy_demo {
    toy_pass pre, full; /* prefill of rows 0..3; the recompute of all five rows */
    double cache_k[TOY_HEADS][TOY_MAX], cache_v[TOY_HEADS][TOY_MAX];
    int cache_len;
    int pos; /* the decoded position */
    double dq[TOY_HEADS], dscore[TOY_HEADS][TOY_MAX], dweight[TOY_HEADS][TOY_MAX], dout[TOY_HEADS];
    double decoded;  /* the decode row's blended output */
    double max_diff; /* largest difference from the recompute */
    bool agree;
} toy_demo;

/* Prefill, the KV cache, decode from the cache, and the recompute that checks it. */
static void toy_compute(toy_demo *demo)
{
    /* Prefill: rows 0..3 in one pass; their keys and values go into the cache. */
    toy_full_pass(&demo->pre, 4);
    demo->cache_len = 4;
    for (int h = 0; h < TOY_HEADS; h++)
        for (int j = 0; j < demo->cache_len; j++) {
            demo->cache_k[h][j] = demo->pre.k[h][j];
            demo->cache_v[h][j] = demo->pre.v[h][j];
        }

    /* Decode: position 4 computes only its own q, k, v, appends k and v, and
     * attends over the cache; nothing of rows 0..3 is recomputed. */
    demo->pos = 4;
    for (int h = 0; h < TOY_HEADS; h++) {
        demo->dq[h] = toy_query(h, demo->pos);
        demo->cache_k[h][demo->pos] = toy_key(h, demo->pos);
        demo->cache_v[h][demo->pos] = toy_value(h, demo->pos);
    }
    demo->cache_len = 5;
    for (int h = 0; h < TOY_HEADS; h++)
        demo->dout[h] = toy_attend(demo->dq[h], demo->cache_k[h], demo->cache_v[h], demo->cache_len,
                                   demo->dscore[h], demo->dweight[h]);
    demo->decoded = 0.5 * demo->dout[0] + 0.5 * demo->dout[1];

    /* The check: all five rows from scratch. */
    toy_full_pass(&demo->full, 5);
    demo->max_diff = 0.0;
    for (int i = 0; i < 4; i++)
        demo->max_diff = fmax(demo->max_diff, fabs(demo->full.out[i] - demo->pre.out[i]));
    demo->max_diff = fmax(demo->max_diff, fabs(demo->full.out[4] - demo->decoded));
    demo->agree = demo->max_diff <= 1e-12;
}

/* One JSON document: the mask, the rows and the agreement flag. */
static int toy_print_json(const toy_demo *demo)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(root, "tokens");
    for (int i = 0; i < TOY_MAX; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "text", k_tokens[i].text);
        cJSON_AddNumberToObject(t, "value", k_tokens[i].value);
        cJSON_AddItemToArray(toks, t);
    }
    cJSON *mask = cJSON_AddArrayToObject(root, "mask");
    for (int i = 0; i < 4; i++) {
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < 4; j++) cJSON_AddItemToArray(row, cJSON_CreateBool(j <= i));
        cJSON_AddItemToArray(mask, row);
    }
    cJSON *rows = cJSON_AddArrayToObject(root, "prefill_rows");
    for (int i = 0; i < 4; i++) cJSON_AddItemToArray(rows, toy_json_row(&demo->pre, i));
    cJSON *d = cJSON_AddObjectToObject(root, "decode_row");
    cJSON_AddNumberToObject(d, "pos", demo->pos);
    cJSON_AddStringToObject(d, "token", k_tokens[demo->pos].text);
    cJSON_AddNumberToObject(d, "head_a", demo->dout[0]);
    cJSON_AddNumberToObject(d, "head_b", demo->dout[1]);
    cJSON_AddNumberToObject(d, "output", demo->decoded);
    cJSON *w = cJSON_AddArrayToObject(d, "weights_a");
    for (int j = 0; j < demo->cache_len; j++)
        cJSON_AddItemToArray(w, cJSON_CreateNumber(demo->dweight[0][j]));
    w = cJSON_AddArrayToObject(d, "weights_b");
    for (int j = 0; j < demo->cache_len; j++)
        cJSON_AddItemToArray(w, cJSON_CreateNumber(demo->dweight[1][j]));
    rows = cJSON_AddArrayToObject(root, "recompute_rows");
    for (int i = 0; i < 5; i++) cJSON_AddItemToArray(rows, toy_json_row(&demo->full, i));
    cJSON_AddNumberToObject(root, "max_abs_diff", demo->max_diff);
    cJSON_AddBoolToObject(root, "agree", demo->agree);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) return cli_error("toy: out of memory");
    printf("%s\n", s);
    cJSON_free(s);
    return demo->agree ? 0 : 1;
}

/* The walk-through, step by step. */
static void toy_print_text(const toy_demo *demo)
{
    printf("kvinfer toy: prefill, decode and the KV cache, by hand\n\n");
    printf("1. Four tokens, each reduced to one number (its \"embedding\"):\n");
    for (int i = 0; i < 4; i++) printf("     pos %d  %-8s %4.0f\n", i, k_tokens[i].text, k_tokens[i].value);

    printf("\n2. Two hand-written heads give every position a query q, a key k and a value v:\n"
           "     head A \"%s\": q = 1, k = 2 at even positions and 0 at odd ones, v = value\n"
           "     head B \"%s\": q = 2, k = the position (later is larger), v = value\n"
           "   score = q * k; weights = softmax of a row's scores; output = sum of weight * v;\n"
           "   a row's final output = 0.5 * head A + 0.5 * head B.\n",
           k_head_name[0], k_head_name[1]);
    printf("     pos  token     A: q   k   v     B: q   k   v\n");
    for (int i = 0; i < 4; i++)
        printf("     %3d  %-8s  %4.0f %3.0f %3.0f     %4.0f %3.0f %3.0f\n", i, k_tokens[i].text,
               demo->pre.q[0][i], demo->pre.k[0][i], demo->pre.v[0][i], demo->pre.q[1][i], demo->pre.k[1][i],
               demo->pre.v[1][i]);

    printf("\n3. The causal mask: row i (a query) may look at columns 0..i (keys), never ahead:\n");
    toy_print_mask(4);

    printf("\n4. Prefill: all four rows in one pass. Scores q*k, masked to -inf above the diagonal:\n");
    for (int h = 0; h < TOY_HEADS; h++) {
        printf("   head %c scores:\n", 'A' + h);
        toy_print_matrix(demo->pre.score[h], 4, "     ");
        printf("   head %c weights (softmax of each row; masked columns get 0):\n", 'A' + h);
        toy_print_matrix(demo->pre.weight[h], 4, "     ");
    }
    printf("   outputs (weights times values, summed along each row):\n");
    printf("     pos  token      head A   head B   blended\n");
    for (int i = 0; i < 4; i++)
        printf("     %3d  %-8s  %7.2f  %7.2f  %8.2f\n", i, k_tokens[i].text, demo->pre.head_out[0][i],
               demo->pre.head_out[1][i], demo->pre.out[i]);

    printf("\n5. The KV cache keeps every position's keys and values, so nothing is recomputed later:\n");
    for (int h = 0; h < TOY_HEADS; h++) {
        printf("     head %c  k = [", 'A' + h);
        for (int j = 0; j < 4; j++) printf("%s%g", j ? ", " : "", demo->cache_k[h][j]);
        printf("]  v = [");
        for (int j = 0; j < 4; j++) printf("%s%g", j ? ", " : "", demo->cache_v[h][j]);
        printf("]\n");
    }

    printf("\n6. Decode: \"%s\" (value %g) arrives at position %d. Only its row is computed: its\n"
           "   q, k, v; k and v are appended to the cache; q is scored against all 5 cached keys\n"
           "   (no mask needed: every cached position is in the past or is itself):\n",
           k_tokens[demo->pos].text, k_tokens[demo->pos].value, demo->pos);
    for (int h = 0; h < TOY_HEADS; h++) {
        printf("     head %c  scores [", 'A' + h);
        for (int j = 0; j < demo->cache_len; j++) printf(" %5.2f", demo->dscore[h][j]);
        printf(" ]  weights [");
        for (int j = 0; j < demo->cache_len; j++) printf(" %4.2f", demo->dweight[h][j]);
        printf(" ]  output %.2f\n", demo->dout[h]);
    }
    printf("     blended output of \"%s\": %.2f\n", k_tokens[demo->pos].text, demo->decoded);

    printf("\n7. Check: recompute all five rows from scratch (5x5 scores, masked):\n");
    printf("     pos  token      recompute   cached (prefill rows 0-3, decode row 4)\n");
    for (int i = 0; i < 5; i++)
        printf("     %3d  %-8s  %9.4f   %9.4f\n", i, k_tokens[i].text, demo->full.out[i],
               i < 4 ? demo->pre.out[i] : demo->decoded);
    printf("   max |difference| = %.3g: the rows %s.\n", demo->max_diff,
           demo->agree ? "agree" : "DO NOT agree");
    printf("   Rows 0-3 did not change when \"%s\" arrived (the mask hides the future), so the\n"
           "   cache is exact. Decode scored 5 keys instead of recomputing 25 scores per head;\n"
           "   at step n it scores n keys instead of n*n: that is what the KV cache buys.\n",
           k_tokens[demo->pos].text);
}

int cmd_toy(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: kvinfer toy [--json]\n\n"
                   "A worked example of the two phases of inference on four tokens with\n"
                   "two hand-written attention heads: the causal mask, prefill (all rows\n"
                   "at once), the KV cache, decode (one new row from cached keys and\n"
                   "values), and the check that decode equals a full recompute.\n\n"
                   "  --json   one JSON document: the mask, the rows and the agreement flag\n");
            return 0;
        } else {
            return cli_error("toy: unknown option '%s' (kvinfer toy --help)", argv[i]);
        }
    }
    toy_demo demo;
    toy_compute(&demo);
    if (json) return toy_print_json(&demo);
    toy_print_text(&demo);
    return demo.agree ? 0 : 1;
}
