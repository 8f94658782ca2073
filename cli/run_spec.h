/*
 * run_spec.h — speculative decoding for `kvinfer run` (cli/run_spec.c): its
 * flags, its generation loop and its share of the summary and the JSON stats.
 * cmd_run.c owns the plain loop, the text and the output; this file drives
 * kvi_spec rounds and hands every generated token to cmd_run.c's callback.
 */
#ifndef KVI_RUN_SPEC_H
#define KVI_RUN_SPEC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "kvinfer.h"

typedef struct run_spec_opts {
    const char *draft_path; /* --draft PATH: a draft model of the same vocabulary */
    bool ngram;             /* --spec ngram: prompt-lookup drafts */
    int32_t draft_max;      /* --draft-max K (default 8) */
    int32_t draft_min;      /* --draft-min N (default 1) */
    int32_t ngram_n;        /* --ngram N (default 3) */
    bool adapt;             /* off with --no-spec-adapt */
} run_spec_opts;

/* What the run summary and --json report. */
typedef struct run_spec_result {
    bool on;          /* speculation was requested */
    const char *mode; /* "off", "ngram" or "draft" */
    kvi_spec_stats st;
    int64_t n_steps;     /* target forward passes after the first token */
    int64_t rows;        /* rows those passes computed */
    double calibrate_ms; /* time spent measuring the costs (not in decode_ms) */
    double draft_ms;     /* time inside kvi_spec_draft (part of decode_ms) */
} run_spec_result;

extern const char run_spec_help[];

void run_spec_opts_default(run_spec_opts *o);
bool run_spec_enabled(const run_spec_opts *o);
/* Parses the speculative flag at argv[*i] (advancing *i past its value): 1 when
 * it was one, 0 when argv[*i] is not a speculative flag, -1 with an error printed. */
int run_spec_parse_flag(int argc, char **argv, int *i, run_spec_opts *o);

/* Receives each generated token in order: 0 to go on, 1 to stop (end of
 * generation, -n reached), -1 on an error already printed. */
typedef int (*run_spec_emit_fn)(void *ctx, int32_t token);

typedef struct run_spec_ctx {
    kvi_model *m;
    kvi_engine *e; /* the target's engine, one sequence */
    kvi_seq *seq;  /* empty */
    kvi_sampler *smp;
    const kvi_sampler_params *sp;
    const int32_t *prompt;
    int32_t n_prompt;
    int32_t n_cached; /* prompt positions the sequence already holds (< n_prompt) */
    int n_ctx;
    int64_t n_predict; /* -1: unlimited (emit still decides when to stop) */
    int n_threads;
    kvi_type kv_k, kv_v;
    bool mmap;
    run_spec_emit_fn emit;
    void *emit_ctx;
} run_spec_ctx;

/* Prefill, first token, then speculative rounds until emit says stop or the
 * context is full. Times in ms from kvi_time_ms. 0, or 1 with the error printed. */
int run_spec_generate(const run_spec_opts *o, const run_spec_ctx *c, double *prefill_ms, double *ttft_ms,
                      double *decode_ms, run_spec_result *res);

void run_spec_print_summary(FILE *f, const run_spec_result *r);
/* Adds spec_* fields to the stats object (zeros when speculation was off). */
bool run_spec_json_add(cJSON *stats, const run_spec_result *r);

#endif
