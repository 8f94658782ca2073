/*
 * bench_parallel.h — `kvinfer bench --parallel N` (bench_parallel.c): B
 * sequences prefilled and decoded together through the scheduler, reported as
 * llama-batched-bench's columns plus a per-decode-step breakdown.
 */
#ifndef KVI_CLI_BENCH_PARALLEL_H
#define KVI_CLI_BENCH_PARALLEL_H

#include "cli/cli_opts.h"
#include "base/prof.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* the breakdown's lines: PROF_MM_BUCKETS products, then attention ... step_total */
#define BENCH_PAR_LINES (PROF_MM_BUCKETS + 10)

typedef struct bench_par_result {
    int B, pp, tg;
    double t_pp_ms, t_tg_ms; /* steps with prefill rows; decode-only steps */
    double cpu_tg_ms;        /* the process's CPU time in the decode-only steps */
    int n_tg_steps, n_gen;   /* decode-only steps; tokens delivered (B x (TG + 1)) */
    prof_counts tg_prof;     /* the engine's timers over the decode-only steps */
} bench_par_result;

/* One warm-up and one timed run of B sequences of pp prompt tokens and tg decode
 * steps on a fresh engine (base's threads, KV types ...) and scheduler. 0, or 1
 * with the error printed. */
/* lora: the adapters to load into the run's engine (cli_opt_lora), or NULL; lora_each:
 * sequence i uses adapter i mod n alone (at its scale) instead of all of them, so a
 * batch of B >= n sequences mixes n distinct adapters. */
int bench_parallel(kvi_model *m, const kvi_engine_params *base, const cli_common *lora, bool lora_each, int B,
                   int pp, int tg, bench_par_result *r);
void bench_parallel_json(cJSON *arr, const bench_par_result *r);
void bench_parallel_print(FILE *f, const bench_par_result *res, int n);

#endif
