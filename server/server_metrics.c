/*
 * server_metrics.c — the server's Prometheus metrics (GET /metrics).
 *
 * Data structure: three latency histograms (time to first token, inter-token
 * latency, end-to-end request latency) with fixed bucket bounds in seconds, and
 * request / token counters, all under one mutex; the scheduler's own counters
 * (rows, running, waiting, KV blocks, prefix-cache hits) are read from
 * kvi_sched_stats_get() at render time; the owner's extra lines (a pipeline's
 * per-stage figures, refreshed by the owner) are copied under the mutex and
 * appended.
 *
 * Invariant: count[i] counts observations <= bounds[i] and > bounds[i-1]; the
 * exposition makes them cumulative, as Prometheus wants.
 */
#include "server/server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double bounds[SRV_HIST_BUCKETS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                 0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0 };

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_free(srv_metrics *m)
{
    free(m->extra);
    m->extra = NULL;
    pthread_mutex_destroy(&m->mu);
}

void srv_metrics_set_extra(srv_metrics *m, char *text)
{
    pthread_mutex_lock(&m->mu);
    char *old = m->extra;
    m->extra = text;
    pthread_mutex_unlock(&m->mu);
    free(old);
}

void srv_hist_observe(srv_metrics *m, srv_hist *h, double seconds)
{
    int b = 0;
    while (b < SRV_HIST_BUCKETS && seconds > bounds[b]) b++;
    pthread_mutex_lock(&m->mu);
    h->count[b]++;
    h->n++;
    h->sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
}

static void hist(sbuf *b, const char *name, const char *help, const srv_hist *h)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->count[i];
        sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += h->count[SRV_HIST_BUCKETS];
    sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum,
              name, h->sum, name, (unsigned long long)h->n);
}

static void counter(sbuf *b, const char *name, const char *type, const char *help, double v)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* One tier of the prefix cache (RAM or disk): kvinfer_kv_<tier>_... */
static void tier_metrics(sbuf *b, const char *tier, const kvi_tier_stats *t)
{
    const struct {
        const char *name, *type, *help;
        double v;
    } m[] = {
        { "bytes", "gauge", "Bytes the prefix cache tier holds.", (double)t->bytes },
        { "bytes_max", "gauge", "Bound on the tier's bytes.", (double)t->bytes_max },
        { "blocks", "gauge", "KV blocks the tier holds.", (double)t->blocks },
        { "hits_total", "counter", "Blocks prefix matches loaded from the tier.", (double)t->hits },
        { "misses_total", "counter", "Blocks prefix matches looked for in the tier in vain.",
          (double)t->misses },
        { "evictions_total", "counter", "Blocks the tier's bound pushed out.", (double)t->evictions },
        { "load_bytes_total", "counter", "Bytes read from the tier.", (double)t->load_bytes },
        { "store_bytes_total", "counter", "Bytes written into the tier.", (double)t->store_bytes },
        { "dropped_total", "counter", "Damaged block files deleted.", (double)t->dropped },
    };
    char name[96];
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        snprintf(name, sizeof name, "kvinfer_kv_%s_%s", tier, m[i].name);
        counter(b, name, m[i].type, m[i].help, m[i].v);
    }
}

/* A mixture of experts: rows routed to each expert of each layer (nothing for a
 * dense model). */
static void experts(sbuf *b, kvi_sched *s)
{
    int n_expert = 0;
    const int n = kvi_sched_expert_counts(s, NULL, 0, &n_expert);
    if (n <= 0 || n_expert <= 0) return;
    uint64_t *c = malloc((size_t)n * sizeof *c); /* [n_layers][n_expert] */
    if (!c) {
        b->oom = true;
        return;
    }
    kvi_sched_expert_counts(s, c, (size_t)n, NULL);
    const char *name = "kvinfer_expert_routed_tokens_total";
    sb_printf(b, "# HELP %s Rows routed to an expert (a row counts once for each of its chosen experts).\n",
              name);
    sb_printf(b, "# TYPE %s counter\n", name);
    for (int i = 0; i < n; i++)
        sb_printf(b, "%s{layer=\"%d\",expert=\"%d\"} %llu\n", name, i / n_expert, i % n_expert,
                  (unsigned long long)c[i]);
    free(c);
}

char *srv_metrics_render(srv_metrics *m, kvi_sched *s)
{
    kvi_sched_stats st;
    memset(&st, 0, sizeof st);
    if (s) kvi_sched_stats_get(s, &st);
    sbuf b = { malloc(8192), 0, 8192, false };
    if (!b.p) return NULL;
    b.p[0] = 0;
    pthread_mutex_lock(&m->mu);
    srv_metrics c = *m;
    char *extra = m->extra ? strdup(m->extra) : NULL;
    const bool extra_oom = m->extra && !extra;
    pthread_mutex_unlock(&m->mu);
    b.oom = extra_oom;
    hist(&b, "kvinfer_time_to_first_token_seconds", "Time from request arrival to its first token.", &c.ttft);
    hist(&b, "kvinfer_inter_token_latency_seconds", "Time between consecutive tokens of a stream.", &c.itl);
    hist(&b, "kvinfer_e2e_request_latency_seconds", "Time from request arrival to its last token.", &c.e2e);
    counter(&b, "kvinfer_prefill_tokens_total", "counter",
            "Prompt rows run through the model (prefill, including recomputation).",
            (double)st.n_prefill_tokens);
    counter(&b, "kvinfer_decode_tokens_total", "counter", "Decode rows run through the model.",
            (double)st.n_decode_tokens);
    counter(&b, "kvinfer_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
            (double)c.prompt_tokens);
    counter(&b, "kvinfer_generation_tokens_total", "counter", "Generated tokens of finished requests.",
            (double)c.completion_tokens);
    counter(&b, "kvinfer_requests_success_total", "counter", "Requests answered in full.",
            (double)c.requests_ok);
    counter(&b, "kvinfer_requests_cancelled_total", "counter", "Requests whose client went away.",
            (double)c.requests_cancelled);
    counter(&b, "kvinfer_requests_rejected_total", "counter", "Requests refused with 503 (queue full).",
            (double)st.n_rejected);
    const char *rn = "kvinfer_requests_refused_total";
    sb_printf(&b,
              "# HELP %s Requests answered 503 with Retry-After, by reason: per_address (--conn-per-ip), "
              "global (--conn-max), queue_full (--queue-max).\n# TYPE %s counter\n",
              rn, rn);
    for (int r = SRV_REFUSED_PER_ADDRESS; r <= SRV_REFUSED_QUEUE_FULL; r++)
        sb_printf(&b, "%s{reason=\"%s\"} %llu\n", rn, srv_refusal_name(r), (unsigned long long)c.refused[r]);
    counter(&b, "kvinfer_requests_error_total", "counter", "Requests answered with an error.",
            (double)c.requests_error);
    counter(&b, "kvinfer_preemptions_total", "counter", "Sequences preempted to free KV blocks.",
            (double)st.n_preemptions);
    counter(&b, "kvinfer_steps_total", "counter", "Forward passes run by the scheduler.", (double)st.n_steps);
    counter(&b, "kvinfer_pool_runs_parallel_total", "counter",
            "Thread-pool runs (matrix products, attention ...) spread over the threads.",
            (double)st.engine.pool_runs_parallel);
    counter(&b, "kvinfer_pool_runs_serial_total", "counter",
            "Thread-pool runs done by one thread because the workers were late (a shared CPU).",
            (double)st.engine.pool_runs_serial);
    counter(&b, "kvinfer_spec_drafted_total", "counter", "Draft tokens verified by speculative decoding.",
            (double)st.n_spec_drafted);
    counter(&b, "kvinfer_spec_accepted_total", "counter", "Draft tokens accepted by speculative decoding.",
            (double)st.n_spec_accepted);
    counter(&b, "kvinfer_spec_cost_row", "gauge",
            "Measured cost of one more verified row at the current load, in average rows of a step.",
            st.spec_cost_row);
    counter(&b, "kvinfer_requests_running", "gauge", "Requests holding a sequence.", st.n_running);
    counter(&b, "kvinfer_requests_waiting", "gauge", "Requests queued for admission.", st.n_waiting);
    counter(&b, "kvinfer_kv_blocks_used", "gauge", "KV cache blocks held by sequences.",
            st.engine.kv_blocks_used);
    counter(&b, "kvinfer_kv_blocks_total", "gauge", "KV cache blocks the budget allows.",
            st.engine.kv_blocks_total);
    counter(&b, "kvinfer_kv_bytes_used", "gauge", "KV cache bytes held by sequences.",
            (double)st.engine.kv_bytes);
    counter(&b, "kvinfer_prompt_tokens_cached_total", "counter",
            "Prompt tokens of admitted requests served from the prefix cache.", (double)st.n_cached_tokens);
    counter(&b, "kvinfer_prefix_cache_hit_ratio", "gauge",
            "Prompt tokens served from the prefix cache / prompt tokens.",
            st.n_prompt_tokens ? (double)st.n_cached_tokens / (double)st.n_prompt_tokens : 0.0);
    tier_metrics(&b, "ram", &st.engine.kv_tier_ram);
    tier_metrics(&b, "disk", &st.engine.kv_tier_disk);
    if (s) experts(&b, s);
    if (extra) sb_printf(&b, "%s", extra);
    free(extra);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
