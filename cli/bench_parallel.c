/*
 * bench_parallel.c — `kvinfer bench --parallel N`: B = N sequences prefilled,
 * then decoded together through the engine and the scheduler (kvi_sched_step on
 * this thread: the code path `kvinfer serve` runs, without HTTP), reported like
 * llama-batched-bench -npp PP -ntg TG -npl N, with a per-step breakdown from the
 * engine's own timers (base/prof.h).
 *
 * One run: B requests of PP random token ids each (no two alike, so the prefix
 * cache shares nothing), greedy, ignore_eos, max_tokens TG + 1: the prefill step
 * samples each request's first token, then TG decode steps of B rows each
 * sample the rest (llama-batched-bench's TG decode calls). Every token is
 * turned into text in on_token, as the server does. One untimed warm-up run
 * of the same size first (so the KV pool's pages are touched, as in a server
 * that has run a while, and as llama.cpp clears its KV buffer up front); then
 * one timed run per N.
 *
 * The numbers (as llama-batched-bench's columns):
 *   PP, TG, B      prompt tokens per sequence, decode steps, sequences
 *   N_KV           B x (PP + TG): positions cached at the end
 *   T_PP, S_PP     seconds of the steps that held prefill rows; B x PP / T_PP
 *   T_TG, S_TG     seconds of the decode-only steps; B x TG / T_TG
 *   T, S           T_PP + T_TG; B x (PP + TG) / T
 * The breakdown is ms per decode step (the TG steps): matrix products by row
 * count, attention, the rest of the forward pass (norms, RoPE, K/V writes, the
 * step's checks), of which the pool's hand-offs (the calling thread waiting for
 * its workers inside products and attention), sampling (of which grammar
 * masks), callbacks (of which detokenization), the scheduler's bookkeeping
 * (kvi_sched_step minus the forward pass, sampling and callbacks) and the time
 * between steps (this loop: idle). cpu_ms_per_step is the process's CPU time
 * per decode step (all threads, spinning workers included): on a shared
 * machine, where wall time also counts the time other processes held the
 * cores, it is the steadier figure for before/after comparisons at -t 1.
 *
 * LoRA (--lora / --lora-scaled): the adapters are loaded into the run's engine and
 * every sequence applies all of them at their scales (llama-batched-bench --lora);
 * with --lora-each, sequence i applies adapter i mod n alone (its request's
 * lora_scales), so a batch holds n distinct adapters whose low-rank products
 * each row gathers with its own adapter's rows.
 */
#include "cli/bench_parallel.h"

#include "base/prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct par_req {
    kvi_model *m;
    int32_t n_tokens;
} par_req;

static bool on_token(void *user, int32_t tok)
{
    par_req *r = user;
    char piece[256];
    const uint64_t t0 = prof_begin();
    (void)kvi_token_to_piece(r->m, tok, piece, sizeof piece, false);
    prof_end(PROF_DETOK, t0);
    r->n_tokens++;
    return true;
}

static void on_done(void *user, kvi_finish f, const kvi_usage *u, const kvi_error *err)
{
    (void)user;
    (void)f;
    (void)u;
    (void)err;
}

static void prof_sub(prof_counts *d, const prof_counts *a, const prof_counts *b)
{
    const uint64_t *pa = (const uint64_t *)a, *pb = (const uint64_t *)b;
    uint64_t *pd = (uint64_t *)d;
    for (size_t i = 0; i < sizeof *d / sizeof *pd; i++) pd[i] += pa[i] - pb[i];
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One run of B sequences through sched; the tokens delivered into *n_gen. */
static int one_run(kvi_model *m, kvi_sched *sched, const cli_common *lora, bool lora_each, int B, int pp, int tg,
                   uint64_t *rng, bench_par_result *r)
{
    float scales[CLI_LORA_MAX];
    const int n_lora = lora ? lora->n_lora : 0;
    const int32_t nv = kvi_n_vocab(m);
    int32_t *prompt = malloc((size_t)pp * sizeof *prompt);
    par_req *reqs = calloc((size_t)B, sizeof *reqs);
    if (!prompt || !reqs) {
        free(prompt);
        free(reqs);
        return cli_error("bench: out of memory");
    }
    int rc = 0;
    for (int i = 0; i < B && !rc; i++) {
        for (int k = 0; k < pp; k++) prompt[k] = (int32_t)(xorshift(rng) % (uint64_t)nv);
        reqs[i].m = m;
        kvi_request q;
        memset(&q, 0, sizeof q);
        q.prompt = prompt;
        q.n_prompt = pp;
        kvi_sampler_params_default(&q.sampling);
        q.sampling.temp = 0.0f;
        q.max_tokens = tg + 1;
        q.ignore_eos = true;
        q.on_token = on_token;
        q.on_done = on_done;
        q.user = &reqs[i];
        if (lora_each && n_lora > 0) { /* adapter i mod n at its own scale, the others off */
            for (int k = 0; k < n_lora; k++) scales[k] = k == i % n_lora ? lora->lora_scale[k] : 0.0f;
            q.lora_scales = scales;
            q.n_lora_scales = n_lora;
        }
        kvi_error err = { 0 };
        uint64_t id;
        if (kvi_sched_submit(sched, &q, &id, &err))
            rc = cli_error("bench: --parallel: submit failed: %s", err.msg);
    }
    memset(r, 0, sizeof *r);
    r->B = B, r->pp = pp, r->tg = tg;
    kvi_sched_stats st;
    kvi_sched_stats_get(sched, &st);
    uint64_t prefill_rows = st.n_prefill_tokens;
    int alive = B;
    double t_prev = kvi_time_ms(), c_prev = cpu_ms();
    while (!rc && alive > 0) {
        prof_counts p0, p1;
        prof_get(&p0);
        kvi_error err = { 0 };
        alive = kvi_sched_step(sched, &err);
        if (alive < 0) {
            rc = cli_error("bench: --parallel: step failed: %s", err.msg[0] ? err.msg : kvi_strerror(alive));
            break;
        }
        const double t = kvi_time_ms(), c = cpu_ms();
        prof_get(&p1);
        kvi_sched_stats_get(sched, &st);
        if (st.n_prefill_tokens > prefill_rows) {
            r->t_pp_ms += t - t_prev;
        } else {
            r->t_tg_ms += t - t_prev;
            r->cpu_tg_ms += c - c_prev;
            r->n_tg_steps++;
            prof_sub(&r->tg_prof, &p1, &p0);
        }
        prefill_rows = st.n_prefill_tokens;
        t_prev = t;
        c_prev = c;
    }
    for (int i = 0; i < B; i++) r->n_gen += reqs[i].n_tokens;
    free(prompt);
    free(reqs);
    return rc;
}

int bench_parallel(kvi_model *m, const kvi_engine_params *base, const cli_common *lora, bool lora_each, int B,
                   int pp, int tg, bench_par_result *r)
{
    kvi_engine_params ep = *base;
    ep.n_ctx = pp + tg + 2;
    ep.n_seq_max = B;
    const int64_t rows = (int64_t)B * pp + B;
    ep.n_batch_max = rows > 512 ? (int)rows : 512;
    kvi_engine *e = cli_engine_create(m, &ep, "bench: ");
    if (!e) return 1;
    if (lora && cli_opt_lora(lora, e, "bench: ")) {
        kvi_engine_free(e);
        return 1;
    }
    kvi_sched_params sp;
    kvi_sched_params_default(&sp);
    sp.n_parallel = B;
    sp.queue_max = B;
    sp.batch_tokens = ep.n_batch_max - B; /* every prompt in one step, as llama-batched-bench */
    sp.n_lanes = 1;
    kvi_error err = { 0 };
    kvi_sched *sched = kvi_sched_create(e, &sp, &err);
    if (!sched) {
        kvi_engine_free(e);
        return cli_error("bench: --parallel: %s", err.msg);
    }
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)B;
    bench_par_result warm;
    fprintf(stderr, "kvinfer bench: --parallel %d: pp%d tg%d, warm-up + 1 run\n", B, pp, tg);
    int rc = one_run(m, sched, lora, lora_each, B, pp, tg, &rng, &warm);
    prof_enable(true);
    if (!rc) rc = one_run(m, sched, lora, lora_each, B, pp, tg, &rng, r);
    prof_enable(false);
    kvi_sched_free(sched);
    kvi_engine_free(e);
    return rc;
}

/* ms per decode step of the breakdown's lines, in the order printed. */
static void breakdown(const bench_par_result *r, double out[BENCH_PAR_LINES])
{
    const prof_counts *p = &r->tg_prof;
    const double k = r->n_tg_steps > 0 ? 1e-6 / r->n_tg_steps : 0.0;
    double mm = 0.0;
    for (int b = 0; b < PROF_MM_BUCKETS; b++) {
        out[b] = (double)p->mm_ns[b] * k;
        mm += out[b];
    }
    const double fwd = (double)p->ns[PROF_FORWARD] * k, att = (double)p->ns[PROF_ATTENTION] * k;
    const double smp = (double)p->ns[PROF_SAMPLING] * k, cb = (double)p->ns[PROF_CALLBACKS] * k;
    const double step = (double)p->ns[PROF_SCHED_STEP] * k;
    double *o = out + PROF_MM_BUCKETS;
    o[0] = att;
    o[1] = fwd - mm - att;
    o[2] = (double)p->ns[PROF_POOL_WAIT] * k;
    o[3] = smp;
    o[4] = (double)p->ns[PROF_GRAMMAR] * k;
    o[5] = cb;
    o[6] = (double)p->ns[PROF_DETOK] * k;
    o[7] = step - fwd - smp - cb;
    o[8] = r->n_tg_steps > 0 ? r->t_tg_ms / r->n_tg_steps - step : 0.0;
    o[9] = r->n_tg_steps > 0 ? r->t_tg_ms / r->n_tg_steps : 0.0;
}

static const char *const line_names[BENCH_PAR_LINES - PROF_MM_BUCKETS] = {
    "attention", "forward_other", "pool_handoff_wait", "sampling", "grammar",
    "callbacks", "detokenize",    "sched_bookkeeping", "idle",     "step_total",
};

static void bucket_name(int b, char *buf, size_t cap)
{
    const int64_t lo = prof_mm_bucket_rows(b),
                  hi = b + 1 < PROF_MM_BUCKETS ? prof_mm_bucket_rows(b + 1) - 1 : 0;
    if (hi == lo)
        snprintf(buf, cap, "matmul_rows_%lld", (long long)lo);
    else if (hi)
        snprintf(buf, cap, "matmul_rows_%lld_%lld", (long long)lo, (long long)hi);
    else
        snprintf(buf, cap, "matmul_rows_%lld_up", (long long)lo);
}

static double s_of(double tokens, double ms) { return ms > 0 ? tokens * 1e3 / ms : 0.0; }

void bench_parallel_json(cJSON *arr, const bench_par_result *r)
{
    cJSON *o = cJSON_CreateObject();
    const double t = r->t_pp_ms + r->t_tg_ms;
    cJSON_AddNumberToObject(o, "PP", r->pp);
    cJSON_AddNumberToObject(o, "TG", r->tg);
    cJSON_AddNumberToObject(o, "B", r->B);
    cJSON_AddNumberToObject(o, "N_KV", (double)r->B * (r->pp + r->tg));
    cJSON_AddNumberToObject(o, "T_PP", r->t_pp_ms / 1e3);
    cJSON_AddNumberToObject(o, "S_PP", s_of((double)r->B * r->pp, r->t_pp_ms));
    cJSON_AddNumberToObject(o, "T_TG", r->t_tg_ms / 1e3);
    cJSON_AddNumberToObject(o, "S_TG", s_of((double)r->B * r->tg, r->t_tg_ms));
    cJSON_AddNumberToObject(o, "T", t / 1e3);
    cJSON_AddNumberToObject(o, "S", s_of((double)r->B * (r->pp + r->tg), t));
    cJSON_AddNumberToObject(o, "n_gen", r->n_gen);
    cJSON_AddNumberToObject(o, "tg_steps", r->n_tg_steps);
    cJSON_AddNumberToObject(o, "cpu_ms_per_step", r->n_tg_steps ? r->cpu_tg_ms / r->n_tg_steps : 0.0);
    double v[BENCH_PAR_LINES];
    breakdown(r, v);
    cJSON *bd = cJSON_AddObjectToObject(o, "step_ms");
    char name[48];
    for (int b = 0; b < PROF_MM_BUCKETS; b++) {
        if (!r->tg_prof.mm_calls[b]) continue;
        bucket_name(b, name, sizeof name);
        cJSON_AddNumberToObject(bd, name, v[b]);
    }
    for (int i = PROF_MM_BUCKETS; i < BENCH_PAR_LINES; i++)
        cJSON_AddNumberToObject(bd, line_names[i - PROF_MM_BUCKETS], v[i]);
    cJSON_AddItemToArray(arr, o);
}

void bench_parallel_print(FILE *f, const bench_par_result *res, int n)
{
    fprintf(f, "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    "
               "S t/s |\n");
    fprintf(f, "|-------|--------|------|--------|----------|----------|----------|----------|----------|----"
               "------|\n");
    for (int i = 0; i < n; i++) {
        const bench_par_result *r = &res[i];
        const double t = r->t_pp_ms + r->t_tg_ms;
        fprintf(f, "| %5d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", r->pp,
                r->tg, r->B, r->B * (r->pp + r->tg), r->t_pp_ms / 1e3, s_of((double)r->B * r->pp, r->t_pp_ms),
                r->t_tg_ms / 1e3, s_of((double)r->B * r->tg, r->t_tg_ms), t / 1e3,
                s_of((double)r->B * (r->pp + r->tg), t));
    }
    fprintf(f, "\nms per decode step (TG phase):\n| %-22s |", "");
    for (int i = 0; i < n; i++) fprintf(f, " B=%-6d |", res[i].B);
    fprintf(f, "\n|------------------------|");
    for (int i = 0; i < n; i++) fprintf(f, "----------|");
    fprintf(f, "\n");
    double v[16][BENCH_PAR_LINES];
    for (int i = 0; i < n && i < 16; i++) breakdown(&res[i], v[i]);
    char name[48];
    for (int l = 0; l < BENCH_PAR_LINES; l++) {
        bool any = l >= PROF_MM_BUCKETS;
        for (int i = 0; i < n && i < 16 && !any; i++) any = res[i].tg_prof.mm_calls[l] > 0;
        if (!any) continue;
        if (l < PROF_MM_BUCKETS)
            bucket_name(l, name, sizeof name);
        else
            snprintf(name, sizeof name, "%s", line_names[l - PROF_MM_BUCKETS]);
        fprintf(f, "| %-22s |", name);
        for (int i = 0; i < n && i < 16; i++) fprintf(f, " %8.3f |", v[i][l]);
        fprintf(f, "\n");
    }
}
