/*
 * run_spec.c — the speculative loop of `kvinfer run` (see run_spec.h).
 *
 * Pipeline: prefill the whole prompt in one pass; the first token is sampled
 * from its last row (kvi_spec_verify with no drafts); then each round drafts up
 * to K tokens (n-gram lookup or the draft model), runs ONE target pass over the
 * newest token plus the drafts (logits on every row), lets kvi_spec_verify keep
 * the accepted prefix and the target's own next token, and truncates the target
 * sequence to the kept positions. The draft model's rollback is kvi_spec's.
 *
 * Invariants: between rounds the target caches positions 0 .. L-1 where the
 * newest generated token (not yet run) takes position L; every round stays
 * within the context (drafts at positions <= n_ctx - 1) and never drafts more
 * tokens than -n still allows (a round yields at most drafts + 1 tokens).
 */
#include "cli/run_spec.h"

#include "cli/cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char run_spec_help[] =
    "speculative decoding (same tokens with --temp 0, same distribution when sampling):\n"
    "  --spec ngram            draft by prompt lookup: continue the latest earlier match\n"
    "                          of the last N tokens (default: off)\n"
    "  --ngram N               longest suffix matched, tried down to 1 (default 3)\n"
    "  --draft PATH            draft with a smaller model of the same vocabulary\n"
    "  --draft-max K           most tokens drafted per step (default 8)\n"
    "  --draft-min N           verify only proposals of at least N tokens (default 1)\n"
    "  --no-spec-adapt         always draft K; by default K shrinks, and speculation\n"
    "                          pauses, while the acceptance is below the break-even\n";

void run_spec_opts_default(run_spec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->draft_max = 8;
    o->draft_min = 1;
    o->ngram_n = 3;
    o->adapt = true;
}

bool run_spec_enabled(const run_spec_opts *o) { return o->ngram || o->draft_path != NULL; }

int run_spec_parse_flag(int argc, char **argv, int *i, run_spec_opts *o)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--spec")) {
        const char *v = cli_flag_value(argc, argv, i);
        if (!v) return -1;
        if (strcmp(v, "ngram") != 0) {
            cli_error("--spec: '%s' is not a speculation mode (ngram; a draft model is --draft PATH)", v);
            return -1;
        }
        o->ngram = true;
        return 1;
    }
    if (!strcmp(a, "--draft")) {
        if (!(o->draft_path = cli_flag_value(argc, argv, i))) return -1;
        return 1;
    }
    if (!strcmp(a, "--draft-max"))
        return cli_flag_i32(a, cli_flag_value(argc, argv, i), 1, 256, &o->draft_max);
    if (!strcmp(a, "--draft-min"))
        return cli_flag_i32(a, cli_flag_value(argc, argv, i), 0, 256, &o->draft_min);
    if (!strcmp(a, "--ngram")) return cli_flag_i32(a, cli_flag_value(argc, argv, i), 1, 64, &o->ngram_n);
    if (!strcmp(a, "--no-spec-adapt")) {
        o->adapt = false;
        return 1;
    }
    return 0;
}

/* Runs one pass; prints the library's error and returns 1 on failure. */
static int step_checked(kvi_engine *e, kvi_batch *b, const char *phase)
{
    kvi_error err = { 0 };
    int rc = kvi_step(e, b, &err);
    if (rc != 0) return cli_error("%s failed: %s", phase, err.msg[0] ? err.msg : kvi_strerror(rc));
    return 0;
}

/* Draft model and its engine, sized like the target's. NULL (error printed) on failure. */
static kvi_engine *load_draft(const run_spec_opts *o, const run_spec_ctx *c, kvi_model **dm)
{
    *dm = cli_load_model(o->draft_path, c->mmap, NULL);
    if (!*dm) return NULL;
    kvi_engine_params ep;
    cli_engine_params_default(&ep);
    ep.n_threads = c->n_threads;
    ep.n_ctx = c->n_ctx;
    ep.kv_type_k = c->kv_k;
    ep.kv_type_v = c->kv_v;
    ep.n_seq_max = 1;
    kvi_error err = { 0 };
    kvi_engine *de = kvi_engine_create(*dm, &ep, &err);
    if (!de) cli_error("cannot create the draft engine: %s", err.msg[0] ? err.msg : kvi_strerror(err.code));
    return de;
}

/* The rounds after the first token (see the file comment). */
static int spec_rounds(const run_spec_opts *o, const run_spec_ctx *c, kvi_spec *sp, kvi_batch *b,
                       int32_t newest, run_spec_result *res, double *t_last)
{
    const int32_t K = o->draft_max;
    int32_t *drafts = malloc((size_t)K * sizeof *drafts);    /* (K) proposed tokens */
    int32_t *got = malloc(((size_t)K + 1) * sizeof *got);    /* (K+1) tokens of a round */
    const float **lg = malloc(((size_t)K + 1) * sizeof *lg); /* (K+1) logits rows */
    int rc = (drafts && got && lg) ? 0 : cli_error("out of memory for speculation buffers");
    int64_t n_gen = 1; /* the first token came from the prefill */
    while (rc == 0) {
        const int32_t L = kvi_seq_len(c->seq);
        if (L >= c->n_ctx) break; /* no position left for the newest token */
        int64_t kmax = K;
        if (kmax > c->n_ctx - 1 - L) kmax = c->n_ctx - 1 - L;
        if (c->n_predict >= 0 && kmax > c->n_predict - n_gen - 1) kmax = c->n_predict - n_gen - 1;
        kvi_error err = { 0 };
        int32_t k = 0;
        if (kmax > 0) {
            double t0 = kvi_time_ms();
            k = kvi_spec_draft(sp, (int32_t)kmax, drafts, &err);
            res->draft_ms += kvi_time_ms() - t0;
            if (k < 0) {
                rc = cli_error("drafting failed: %s", err.msg);
                break;
            }
        }
        kvi_batch_clear(b);
        kvi_batch_add(b, c->seq, newest, L, true);
        for (int32_t i = 0; i < k; i++) kvi_batch_add(b, c->seq, drafts[i], L + 1 + i, true);
        if ((rc = step_checked(c->e, b, "verification step")) != 0) break;
        res->n_steps++;
        res->rows += k + 1;
        for (int32_t i = 0; i <= k; i++) lg[i] = kvi_logits(c->e, i);
        int32_t m = kvi_spec_verify(sp, c->smp, lg, k, got, &err);
        if (m < 1) {
            rc = cli_error("verification failed: %s", err.msg);
            break;
        }
        *t_last = kvi_time_ms();
        kvi_seq_truncate(c->seq, L + m);
        newest = got[m - 1];
        int stop = 0;
        for (int32_t i = 0; i < m && stop == 0; i++, n_gen++) stop = c->emit(c->emit_ctx, got[i]);
        if (stop < 0) rc = 1;
        if (stop != 0) break;
    }
    free(drafts);
    free(got);
    free(lg);
    return rc;
}

int run_spec_generate(const run_spec_opts *o, const run_spec_ctx *c, double *prefill_ms, double *ttft_ms,
                      double *decode_ms, run_spec_result *res)
{
    memset(res, 0, sizeof *res);
    res->on = true;
    res->mode = o->draft_path ? "draft" : "ngram";
    *prefill_ms = *ttft_ms = *decode_ms = 0.0;
    kvi_model *dm = NULL;
    kvi_engine *de = NULL;
    if (o->draft_path && !(de = load_draft(o, c, &dm))) {
        kvi_model_free(dm);
        return 1;
    }
    kvi_spec_params pp;
    kvi_spec_params_default(&pp);
    pp.draft_max = o->draft_max;
    pp.draft_min = o->draft_min > o->draft_max ? o->draft_max : o->draft_min;
    pp.ngram_max = o->ngram_n;
    pp.adapt = o->adapt;
    pp.seed = c->sp->seed ^ 0x5EEC5EEC5EECull;
    kvi_error err = { 0 };
    kvi_spec *sp = kvi_spec_create(&pp, c->m, de, c->sp, &err);
    int rc = sp ? 0 : cli_error("cannot start speculative decoding: %s", err.msg);
    if (rc == 0 && kvi_spec_begin(sp, c->prompt, c->n_prompt, &err) != 0)
        rc = cli_error("cannot start speculative decoding: %s", err.msg);
    const int32_t rows = c->n_prompt > o->draft_max + 1 ? c->n_prompt : o->draft_max + 1;
    kvi_batch *b = rc == 0 ? kvi_batch_create(rows) : NULL;
    if (rc == 0 && !b) rc = cli_error("out of memory creating a batch of %d rows", (int)rows);

    if (rc == 0) {
        /* prefill: every prompt row in one pass, logits of the last row only */
        double t0 = kvi_time_ms();
        const int32_t from = c->n_cached > 0 && c->n_cached < c->n_prompt ? c->n_cached : 0;
        for (int32_t i = from; i < c->n_prompt; i++)
            kvi_batch_add(b, c->seq, c->prompt[i], i, i == c->n_prompt - 1);
        rc = step_checked(c->e, b, "prefill");
        double t1 = kvi_time_ms();
        *prefill_ms = t1 - t0;
        for (int32_t i = 0; rc == 0 && i < c->n_prompt; i++) kvi_sampler_accept(c->smp, c->prompt[i]);
        int32_t first = 0;
        if (rc == 0) {
            const float *lg[1] = { kvi_logits(c->e, c->n_prompt - 1 - from) };
            if (kvi_spec_verify(sp, c->smp, lg, 0, &first, &err) != 1)
                rc = cli_error("sampling the first token failed: %s", err.msg);
        }
        double t_first = kvi_time_ms(), t_last = t_first;
        *ttft_ms = t_first - t0;
        int stop = rc == 0 ? c->emit(c->emit_ctx, first) : 0;
        if (stop < 0) rc = 1;
        if (rc == 0 && stop == 0) {
            /* measure what a verified row and a draft token cost, once (rolled back) */
            if (o->adapt && kvi_seq_len(c->seq) + o->draft_max + 1 <= c->n_ctx) {
                double tc = kvi_time_ms();
                if (kvi_spec_calibrate(sp, c->e, c->seq, 3, &err) != 0)
                    fprintf(stderr, "kvinfer: warning: speculation costs not measured: %s\n", err.msg);
                res->calibrate_ms = kvi_time_ms() - tc;
                t_first = t_last = kvi_time_ms();
            }
            rc = spec_rounds(o, c, sp, b, first, res, &t_last);
        }
        *decode_ms = t_last - t_first;
    }
    kvi_spec_stats_get(sp, &res->st);
    kvi_batch_free(b);
    kvi_spec_free(sp);
    kvi_engine_free(de);
    kvi_model_free(dm);
    return rc;
}

void run_spec_print_summary(FILE *f, const run_spec_result *r)
{
    if (!r->on) return;
    const kvi_spec_stats *s = &r->st;
    double per_step =
        r->n_steps > 0 && s->n_generated > 0 ? (double)(s->n_generated - 1) / (double)r->n_steps : 0.0;
    fprintf(f,
            "kvinfer: speculative %s: drafted %" PRIu64 ", accepted %" PRIu64 " (acceptance %.3f), "
            "%.2f tokens per target pass (%" PRId64 " passes, %" PRId64 " rows)\n",
            r->mode, s->n_drafted, s->n_accepted, s->acceptance, per_step, r->n_steps, r->rows);
    fprintf(f,
            "kvinfer: speculative costs: verified row %.3f, draft token %.3f (x one decode pass); "
            "break-even acceptance at K=%d: %.3f; K now %d, expected speed-up %.2fx; "
            "drafting %.2f ms, calibration %.2f ms\n",
            s->cost_row, s->cost_draft, (int)(s->k_max), s->break_even, (int)s->k_now, s->est_speedup,
            r->draft_ms, r->calibrate_ms);
}

bool run_spec_json_add(cJSON *s, const run_spec_result *r)
{
    const kvi_spec_stats *st = &r->st;
    double per_step =
        r->n_steps > 0 && st->n_generated > 0 ? (double)(st->n_generated - 1) / (double)r->n_steps : 0.0;
    return cJSON_AddStringToObject(s, "spec_mode", r->on ? r->mode : "off") &&
           cJSON_AddNumberToObject(s, "spec_drafted", (double)st->n_drafted) &&
           cJSON_AddNumberToObject(s, "spec_accepted", (double)st->n_accepted) &&
           cJSON_AddNumberToObject(s, "spec_acceptance", st->acceptance) &&
           cJSON_AddNumberToObject(s, "spec_target_passes", (double)r->n_steps) &&
           cJSON_AddNumberToObject(s, "spec_tokens_per_pass", per_step) &&
           cJSON_AddNumberToObject(s, "spec_k_now", st->k_now) &&
           cJSON_AddNumberToObject(s, "spec_cost_row", st->cost_row) &&
           cJSON_AddNumberToObject(s, "spec_cost_draft", st->cost_draft) &&
           cJSON_AddNumberToObject(s, "spec_break_even", st->break_even) &&
           cJSON_AddNumberToObject(s, "spec_est_speedup", st->est_speedup) &&
           cJSON_AddNumberToObject(s, "spec_draft_ms", r->draft_ms) &&
           cJSON_AddNumberToObject(s, "spec_calibrate_ms", r->calibrate_ms);
}
