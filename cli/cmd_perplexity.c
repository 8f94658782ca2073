/*
 * cmd_perplexity.c — `kvinfer perplexity`: how well the model (and its KV cache
 * type) predicts a text, the way llama-perplexity measures it, and how far its
 * next-token distributions are from a saved baseline run (KL divergence).
 *
 * Method (llama.cpp's): the text is tokenised once (BOS as the model says) and
 * cut into n_chunk = n_tokens / ctx chunks of ctx tokens (the tail is dropped).
 * The first token of each chunk becomes BOS when the model adds one. Each chunk
 * is one fresh sequence, prefilled in one kvi_step (or ceil(ctx / batch) steps
 * with -b), logits for every row. The first half of a chunk is context only: the
 * rows j = first .. ctx - 2 (first = ctx / 2) are scored, row j's distribution
 * against token j + 1. NLL_j = -log softmax(logits_j)[token j+1] (in double).
 *   PPL = exp(mean NLL); its error = PPL x stddev(NLL) / sqrt(N - 1) (delta method).
 *
 * With --ctx-policy shift|sinks|heavy the text is instead ONE sequence past the
 * context (stream mode): the first min(ctx, n_tokens) tokens are prefilled in
 * one pass (-b rows at a time), then every further token is a decode row after
 * kvi_seq_make_room(1) let the policy evict. Row j predicts token j + 1 and is
 * scored when j >= ctx / 2 (the same warm-up as a chunk); the NLL is reported
 * for all scored rows and split into rows inside the first context and rows
 * past it, with the most KV bytes held (blocks + q4 tails) before and after the
 * context filled: constant for sinks and heavy. --save-logits/--kl-base are for
 * the chunked method only.
 *
 * Log-probability file (--save-logits writes, --kl-base reads), little-endian:
 *   header (32 bytes): magic "KVIPPLLP", u32 version (1), u32 n_vocab,
 *                      u64 n_rows, u32 ctx, u32 0
 *   n_rows records:    i32 target token, f32 logprob[n_vocab]
 * Every record of the base is checked against the current run (same vocabulary,
 * row count, context and target tokens) and the file size must be exact.
 * KL_j = sum_v p_base(v) (log p_base(v) - log p_cur(v)), both log-probabilities
 * rounded to float as the file stores them; top-1 agreement: the argmax of both
 * distributions is the same token.
 */
#include "cli/cli_opts.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PPL_MAGIC "KVIPPLLP"
#define PPL_VERSION 1u
#define PPL_HEADER_BYTES 32

static const char ppl_help[] =
    "usage: kvinfer perplexity -m MODEL -f TEXT [-c CTX] [options]\n"
    "\n"
    "Perplexity of the model over a text file (llama-perplexity's method: chunks of\n"
    "CTX tokens, each prefilled in one pass, the second half of each chunk scored),\n"
    "and with --kl-base the KL divergence from a baseline run's saved distributions:\n"
    "the quality cost of a KV cache type.\n"
    "\n"
    "options:\n"
    "  -m, --model PATH     GGUF model, llama2.c checkpoint or Hugging Face folder\n"
    "  -f, --file PATH      the text\n"
    "  -c, --ctx-size N     tokens per chunk (default 256, or the model's context if smaller)\n"
    "  -b, --batch-size N   rows per forward pass (default: the whole chunk)\n"
    "  --chunks N           score at most N chunks (default: all)\n"
    "  --kv-type T          KV cache type for K and V (any type the engine accepts; default f16)\n"
    "  --kv-type-k T        the type of the keys alone\n"
    "  --kv-type-v T        the type of the values alone\n"
    "  --ctx-policy P       error (default): chunks of CTX tokens; shift, sinks, heavy:\n"
    "                       the whole text as one sequence past CTX, evicting by P\n"
    "  --keep N             shift: first tokens never dropped (default 0)\n"
    "  --sink N             sinks, heavy: first tokens kept (default 4; 0: a plain window)\n"
    "  --window N           sinks: recent tokens kept; heavy: recent window (default 0: auto)\n"
    "  -t, --threads N      worker threads (default 0: every core)\n"
    "  --save-logits FILE   write the scored rows' log-probabilities (a KL baseline)\n"
    "  --kl-base FILE       compare with a baseline saved by --save-logits: mean, median,\n"
    "                       99th percentile and max KL divergence, top-1 agreement\n"
    "  --lora FILE          LoRA adapter (GGUF), scale 1; --lora-scaled FILE S (or FILE:S[,..])\n"
    "  --mmap               map the model file instead of reading it\n"
    "  --json               print one JSON object only: perplexity, ppl_error, n_tokens,\n"
    "                       kv_type (+ kld_mean, top1_agreement, ... with --kl-base)\n"
    "  -h, --help           this help\n";

typedef struct ppl_opts {
    cli_common c; /* model, --mmap, threads, -c, KV types, context policy */
    const char *file, *save, *base;
    int64_t batch, chunks;
    const char *policy; /* NULL ("error" or none): chunks; else stream mode */
    bool json;
} ppl_opts;

/* The shared flags `perplexity` takes (cli/cli_opts.h): -c at least 4; the KV
 * types may be any the engine accepts and are checked after every flag (see
 * cmd_perplexity); a bad policy is an "unknown policy". */
#define PPL_OPTS                                                                                         \
    (CLI_OPT_MODEL | CLI_OPT_MMAP | CLI_OPT_THREADS | CLI_OPT_CTX | CLI_OPT_CTX_MIN4 | CLI_OPT_KV_TYPE | \
     CLI_OPT_KV_TYPE_KV | CLI_OPT_KV_LATER | CLI_OPT_POLICY | CLI_OPT_POLICY_UNKNOWN | CLI_OPT_LORA)

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Header of the log-probability file. */
static void header_encode(uint8_t h[PPL_HEADER_BYTES], uint32_t n_vocab, uint64_t n_rows, uint32_t ctx)
{
    memset(h, 0, PPL_HEADER_BYTES);
    memcpy(h, PPL_MAGIC, 8);
    put_u32(h + 8, PPL_VERSION);
    put_u32(h + 12, n_vocab);
    put_u32(h + 16, (uint32_t)n_rows);
    put_u32(h + 20, (uint32_t)(n_rows >> 32));
    put_u32(h + 24, ctx);
}

/* Opens and checks a base file against this run; NULL with the error printed. */
static FILE *base_open(const char *path, uint32_t n_vocab, uint64_t n_rows, uint32_t ctx)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("--kl-base: cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t h[PPL_HEADER_BYTES];
    const char *why = NULL;
    char msg[200];
    if (fread(h, 1, sizeof h, f) != sizeof h || memcmp(h, PPL_MAGIC, 8) != 0) {
        why = "not a kvinfer log-probability file (bad magic or shorter than its header)";
    } else if (get_u32(h + 8) != PPL_VERSION) {
        snprintf(msg, sizeof msg, "version %u is not supported (only %u)", get_u32(h + 8), PPL_VERSION);
        why = msg;
    } else {
        uint32_t fv = get_u32(h + 12), fc = get_u32(h + 24);
        uint64_t fr = (uint64_t)get_u32(h + 16) | (uint64_t)get_u32(h + 20) << 32;
        if (fv != n_vocab) {
            snprintf(msg, sizeof msg, "vocabulary of %u tokens, this model has %u", fv, n_vocab);
            why = msg;
        } else if (fc != ctx) {
            snprintf(msg, sizeof msg, "saved with -c %u, this run uses -c %u", fc, ctx);
            why = msg;
        } else if (fr != n_rows) {
            snprintf(msg, sizeof msg,
                     "holds %llu scored rows, this run scores %llu (another text or --chunks?)",
                     (unsigned long long)fr, (unsigned long long)n_rows);
            why = msg;
        } else if (fseek(f, 0, SEEK_END) == 0) {
            long end = ftell(f);
            uint64_t want = PPL_HEADER_BYTES + n_rows * (4 + 4 * (uint64_t)n_vocab);
            if (end < 0 || (uint64_t)end != want) {
                snprintf(msg, sizeof msg, "file is %ld bytes, its header says %llu", end,
                         (unsigned long long)want);
                why = msg;
            } else if (fseek(f, PPL_HEADER_BYTES, SEEK_SET) != 0) {
                why = "cannot seek";
            }
        } else {
            why = "cannot seek";
        }
    }
    if (why) {
        cli_error("--kl-base: %s: %s", path, why);
        fclose(f);
        return NULL;
    }
    return f;
}

/* log softmax of n logits into out (doubles); false when a logit is not finite. */
static bool log_softmax(const float *lg, int32_t n, double *out)
{
    double mx = -INFINITY;
    for (int32_t v = 0; v < n; v++) {
        if (!isfinite(lg[v])) return false;
        if (lg[v] > mx) mx = lg[v];
    }
    double s = 0.0;
    for (int32_t v = 0; v < n; v++) s += exp((double)lg[v] - mx);
    double lse = mx + log(s);
    for (int32_t v = 0; v < n; v++) out[v] = (double)lg[v] - lse;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_opts(int argc, char **argv, ppl_opts *o, bool *help)
{
    memset(o, 0, sizeof *o);
    cli_common_init(&o->c);
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r;
        const char **path = !strcmp(a, "-f") || !strcmp(a, "--file") ? &o->file
                            : !strcmp(a, "--save-logits")            ? &o->save
                            : !strcmp(a, "--kl-base")                ? &o->base
                                                                     : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            *help = true;
            return 0;
        } else if ((r = cli_opt_common(argc, argv, &i, &o->c, PPL_OPTS)) != 0) {
            if (r < 0) return 1;
        } else if (path) {
            if (!(*path = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (cli_flag_i64(a, cli_flag_value(argc, argv, &i), 1, 1 << 24, &o->batch) < 0) return 1;
        } else if (!strcmp(a, "--chunks")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 1, INT32_MAX, &o->chunks))
                return cli_error("%s: '%s' is not a positive integer", a, v);
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (a[0] == '-') {
            return cli_error("perplexity: unknown option '%s' (kvinfer perplexity --help)", a);
        } else {
            return cli_error("perplexity: unexpected argument '%s' (the text goes after -f)", a);
        }
    }
    o->policy = cli_opt_policy(&o->c);
    if (!o->file) return cli_error("perplexity: no text: use -f FILE");
    if (o->policy && (o->save || o->base))
        return cli_error("perplexity: --save-logits and --kl-base need the chunked method (no --ctx-policy)");
    return 0;
}

/* Running totals of one evaluation. */
typedef struct ppl_acc {
    double nll, nll2; /* sums of NLL and NLL^2 */
    double base_nll;  /* sum of the base's NLL (with --kl-base) */
    uint64_t n;       /* rows scored */
    double *kld;      /* [n_rows] KL of each row (with --kl-base) */
    uint64_t top1_same;
} ppl_acc;

/* Scores one row: its log-probabilities against target; with a base, KL and top-1. */
static int score_row(ppl_acc *acc, const double *lp, int32_t n_vocab, int32_t target, FILE *save, FILE *base,
                     float *rowbuf, const char *save_path, const char *base_path)
{
    double nll = -lp[target];
    acc->nll += nll;
    acc->nll2 += nll * nll;
    if (save) {
        uint8_t t[4];
        put_u32(t, (uint32_t)target);
        for (int32_t v = 0; v < n_vocab; v++) rowbuf[v] = (float)lp[v];
        if (fwrite(t, 1, 4, save) != 4 ||
            fwrite(rowbuf, sizeof(float), (size_t)n_vocab, save) != (size_t)n_vocab)
            return cli_error("--save-logits: writing %s failed: %s", save_path, strerror(errno));
    }
    if (base) {
        uint8_t t[4];
        if (fread(t, 1, 4, base) != 4 ||
            fread(rowbuf, sizeof(float), (size_t)n_vocab, base) != (size_t)n_vocab)
            return cli_error("--kl-base: reading %s failed", base_path);
        if ((int32_t)get_u32(t) != target)
            return cli_error("--kl-base: %s: row %llu predicts token %d, this run token %d (another text?)",
                             base_path, (unsigned long long)acc->n, (int)(int32_t)get_u32(t), (int)target);
        double kl = 0.0;
        int32_t am_b = 0, am_c = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            double lb = rowbuf[v];
            if (!isfinite(lb) || lb > 1e-3)
                return cli_error("--kl-base: %s: row %llu holds a value %g that is not a log-probability",
                                 base_path, (unsigned long long)acc->n, lb);
            /* the current row rounded to float exactly as a saved file holds it, so a
             * run against its own base gives KL 0 */
            double lc = (float)lp[v];
            kl += exp(lb) * (lb - lc);
            if (rowbuf[v] > rowbuf[am_b]) am_b = v;
            if ((float)lp[v] > (float)lp[am_c]) am_c = v;
        }
        acc->kld[acc->n] = kl > 0.0 ? kl : 0.0; /* rounding can give -1e-17 */
        acc->top1_same += am_b == am_c;
        acc->base_nll += -(double)rowbuf[target];
    }
    acc->n++;
    return 0;
}

static const char *kv_label(kvi_type k, kvi_type v, char *buf, size_t cap)
{
    const char *kn = kvi_type_name(k) ? kvi_type_name(k) : "?",
               *vn = kvi_type_name(v) ? kvi_type_name(v) : "?";
    if (k == v)
        snprintf(buf, cap, "%s", kn);
    else
        snprintf(buf, cap, "%s/%s", kn, vn);
    return buf;
}

/* KV bytes the engine holds from the system: blocks and q4 key tails. */
static size_t kv_held(const kvi_engine *e)
{
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    return st.kv_bytes_allocated + st.kv_bytes_tail;
}

/* One evaluation: the model, the engine and the tokens of the text. */
typedef struct ppl_run {
    kvi_model *m;
    kvi_engine *e;
    kvi_batch *b;          /* (batch) rows */
    int32_t *ids, n_tok;   /* the text's tokens */
    int32_t n_vocab, bos;  /* bos: -1 when the model adds none */
    int ctx, batch, first; /* first: the first row scored in a chunk (ctx / 2) */
    int64_t n_chunk;
    uint64_t n_rows; /* rows the chunked method scores */
    double *lp;      /* (n_vocab) log-probabilities of one row */
    float *rowbuf;   /* (n_vocab) a file record */
    FILE *save, *base;
    ppl_acc acc;
    char kvname[64]; /* "f16", or "q4_0/f32" for mixed types */
} ppl_run;

/* Mean NLL of n scored rows, its perplexity and the perplexity's error (delta method). */
typedef struct ppl_value {
    double mean, ppl, err;
} ppl_value;

static ppl_value ppl_of(double nll, double nll2, double n)
{
    ppl_value v;
    v.mean = nll / n;
    v.ppl = exp(v.mean);
    const double var = nll2 / n - v.mean * v.mean;
    v.err = n > 1 && var > 0 ? v.ppl * sqrt(var / (n - 1)) : 0.0;
    return v;
}

/* The fields both methods' JSON documents open with. */
static cJSON *ppl_json_head(ppl_value v, double n_tokens)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "perplexity", v.ppl);
    cJSON_AddNumberToObject(j, "ppl_error", v.err);
    cJSON_AddNumberToObject(j, "nll_mean", v.mean);
    cJSON_AddNumberToObject(j, "n_tokens", n_tokens);
    return j;
}

/* What stream mode measured (see the file header). */
typedef struct ppl_stream {
    double nll[2], nll2; /* [0] rows inside the first context, [1] past it */
    uint64_t cnt[2];
    size_t bytes_full, bytes_max;
    uint64_t n_evicted;
    double secs;
} ppl_stream;

static int report_stream(const ppl_opts *o, const ppl_run *r, const ppl_stream *st)
{
    const uint64_t N = st->cnt[0] + st->cnt[1];
    if (N == 0)
        return cli_error("perplexity: the text has %d tokens, too few to score past %d", (int)r->n_tok,
                         r->first);
    const ppl_value v = ppl_of(st->nll[0] + st->nll[1], st->nll2, (double)N);
    const double ppl_in = st->cnt[0] ? exp(st->nll[0] / (double)st->cnt[0]) : 0.0;
    const double ppl_past = st->cnt[1] ? exp(st->nll[1] / (double)st->cnt[1]) : 0.0;
    if (o->json) {
        cJSON *j = ppl_json_head(v, (double)N);
        cJSON_AddNumberToObject(j, "ctx", r->ctx);
        cJSON_AddStringToObject(j, "kv_type", r->kvname);
        cJSON_AddStringToObject(j, "ctx_policy", o->policy);
        cJSON_AddNumberToObject(j, "ppl_in_ctx", ppl_in);
        cJSON_AddNumberToObject(j, "n_in_ctx", (double)st->cnt[0]);
        cJSON_AddNumberToObject(j, "ppl_past_ctx", ppl_past);
        cJSON_AddNumberToObject(j, "n_past_ctx", (double)st->cnt[1]);
        cJSON_AddNumberToObject(j, "n_evicted", (double)st->n_evicted);
        cJSON_AddNumberToObject(j, "kv_bytes_full", (double)st->bytes_full);
        cJSON_AddNumberToObject(j, "kv_bytes_max", (double)st->bytes_max);
        cJSON_AddNumberToObject(j, "seconds", st->secs);
        return cli_print_json(j, "perplexity: out of memory");
    }
    printf("perplexity      %.4f ± %.4f (%s, one sequence of %d tokens, context %d)\n", v.ppl, v.err,
           o->policy, (int)r->n_tok, r->ctx);
    printf("inside context  %.4f (%llu rows)\n", ppl_in, (unsigned long long)st->cnt[0]);
    printf("past context    %.4f (%llu rows, %llu positions evicted)\n", ppl_past,
           (unsigned long long)st->cnt[1], (unsigned long long)st->n_evicted);
    printf("KV bytes        %zu when the context filled, %zu at most\n", st->bytes_full, st->bytes_max);
    printf("KV type         %s\n", r->kvname);
    printf("time            %.2f s (%.1f tokens/s)\n", st->secs,
           st->secs > 0 ? (double)r->n_tok / st->secs : 0.0);
    return 0;
}

/* Stream mode (see the file header): the text as one sequence past the context. */
static int run_stream(const ppl_opts *o, ppl_run *r)
{
    kvi_seq *seq = kvi_seq_create(r->e);
    if (!seq) return cli_error("perplexity: cannot create a sequence");
    ppl_stream st = { 0 };
    int rc = 0;
    const int32_t n_tok = r->n_tok, n_pre = n_tok < r->ctx ? n_tok : r->ctx;
    const double t0 = kvi_time_ms();
    for (int32_t i = 0; rc == 0 && i < n_tok - 1;) {
        int32_t pos, n;
        kvi_error err = { 0 };
        if (i < n_pre) {
            pos = i;
            n = n_pre - i < r->batch ? n_pre - i : r->batch;
            if (i + n > n_tok - 1) n = n_tok - 1 - i;
        } else {
            pos = kvi_seq_make_room(seq, 1, &err);
            if (pos < 0) {
                rc = cli_error("perplexity: %s at token %d: %s", o->policy, (int)i, err.msg);
                break;
            }
            n = 1;
        }
        kvi_batch_clear(r->b);
        for (int32_t j = 0; j < n; j++) {
            const int32_t tok = i + j == 0 && r->bos >= 0 ? r->bos : r->ids[i + j];
            kvi_batch_add(r->b, seq, tok, pos + j, i + j >= r->first);
        }
        const int sr = kvi_step(r->e, r->b, &err);
        if (sr) {
            rc = cli_error("perplexity: token %d: %s", (int)i, err.msg[0] ? err.msg : kvi_strerror(sr));
            break;
        }
        for (int32_t j = 0; j < n; j++) {
            if (i + j < r->first) continue;
            const float *lg = kvi_logits(r->e, j); /* (n_vocab) */
            if (!lg || !log_softmax(lg, r->n_vocab, r->lp)) {
                rc = cli_error("perplexity: row %d: logits missing or not finite", (int)(i + j));
                break;
            }
            const double x = -r->lp[r->ids[i + j + 1]];
            const int k = i + j >= r->ctx;
            st.nll[k] += x;
            st.nll2 += x * x;
            st.cnt[k]++;
        }
        i += n;
        const size_t held = kv_held(r->e);
        if (held > st.bytes_max) st.bytes_max = held;
        if (i == n_pre) st.bytes_full = held;
    }
    st.secs = (kvi_time_ms() - t0) / 1e3;
    kvi_stats ks;
    kvi_stats_get(r->e, seq, &ks);
    st.n_evicted = ks.n_evicted;
    kvi_seq_free(seq);
    return rc ? rc : report_stream(o, r, &st);
}

/* The chunked method: each chunk one fresh sequence, its second half scored
 * (see the file header). 0, or 1 with the error printed. */
static int run_chunks(const ppl_opts *o, ppl_run *r)
{
    int rc = 0;
    const int ctx = r->ctx;
    for (int64_t c = 0; rc == 0 && c < r->n_chunk; c++) {
        const int32_t *chunk = r->ids + c * ctx; /* (ctx) tokens */
        kvi_seq *seq = kvi_seq_create(r->e);
        if (!seq) return cli_error("perplexity: cannot create a sequence");
        for (int start = 0; rc == 0 && start < ctx; start += r->batch) {
            int n = ctx - start < r->batch ? ctx - start : r->batch;
            kvi_batch_clear(r->b);
            for (int j = 0; j < n; j++) {
                int pos = start + j;
                int32_t tok = pos == 0 && r->bos >= 0 ? r->bos : chunk[pos];
                kvi_batch_add(r->b, seq, tok, pos, true);
            }
            kvi_error err = { 0 };
            int sr = kvi_step(r->e, r->b, &err);
            if (sr) {
                rc = cli_error("perplexity: chunk %lld failed: %s", (long long)c,
                               err.msg[0] ? err.msg : kvi_strerror(sr));
                break;
            }
            for (int j = 0; rc == 0 && j < n; j++) {
                int pos = start + j;
                if (pos < r->first || pos > ctx - 2) continue;
                const float *lg = kvi_logits(r->e, j); /* (n_vocab) */
                if (!lg || !log_softmax(lg, r->n_vocab, r->lp))
                    rc = cli_error("perplexity: chunk %lld row %d: logits missing or not finite",
                                   (long long)c, pos);
                else
                    rc = score_row(&r->acc, r->lp, r->n_vocab, chunk[pos + 1], r->save, r->base, r->rowbuf,
                                   o->save, o->base);
            }
        }
        kvi_seq_free(seq);
        if (rc == 0 && !o->json && r->n_chunk > 1)
            fprintf(stderr, "  [%lld] running PPL %.4f\n", (long long)c + 1,
                    exp(r->acc.nll / (double)r->acc.n));
    }
    return rc;
}

/* KL divergence from the base: mean, median, 99th percentile, max; top-1 agreement; base PPL. */
typedef struct ppl_kl {
    double mean, median, p99, max, top1, ppl_base;
} ppl_kl;

static ppl_kl kl_of(ppl_acc *acc)
{
    ppl_kl k;
    const double N = (double)acc->n;
    double s = 0.0;
    for (uint64_t i = 0; i < acc->n; i++) s += acc->kld[i];
    k.mean = s / N;
    qsort(acc->kld, (size_t)acc->n, sizeof *acc->kld, cmp_double);
    k.median = acc->kld[acc->n / 2];
    k.p99 = acc->kld[(size_t)((double)(acc->n - 1) * 0.99)];
    k.max = acc->kld[acc->n - 1];
    k.top1 = (double)acc->top1_same / N;
    k.ppl_base = exp(acc->base_nll / N);
    return k;
}

static int report_chunks(const ppl_opts *o, ppl_run *r, kvi_type tk, kvi_type tv, double secs)
{
    const double N = (double)r->acc.n;
    const ppl_value v = ppl_of(r->acc.nll, r->acc.nll2, N);
    ppl_kl k = { 0, 0, 0, 0, 0, 0 };
    if (r->base) k = kl_of(&r->acc);
    if (o->json) {
        cJSON *j = ppl_json_head(v, N);
        cJSON_AddNumberToObject(j, "n_chunks", (double)r->n_chunk);
        cJSON_AddNumberToObject(j, "ctx", r->ctx);
        cJSON_AddStringToObject(j, "kv_type", r->kvname);
        cJSON_AddStringToObject(j, "kv_type_k", kvi_type_name(tk) ? kvi_type_name(tk) : "?");
        cJSON_AddStringToObject(j, "kv_type_v", kvi_type_name(tv) ? kvi_type_name(tv) : "?");
        cJSON_AddNumberToObject(j, "seconds", secs);
        if (r->base) {
            cJSON_AddNumberToObject(j, "kld_mean", k.mean);
            cJSON_AddNumberToObject(j, "kld_median", k.median);
            cJSON_AddNumberToObject(j, "kld_p99", k.p99);
            cJSON_AddNumberToObject(j, "kld_max", k.max);
            cJSON_AddNumberToObject(j, "top1_agreement", k.top1);
            cJSON_AddNumberToObject(j, "perplexity_base", k.ppl_base);
            cJSON_AddNumberToObject(j, "delta_ppl", v.ppl - k.ppl_base);
        }
        return cli_print_json(j, "perplexity: out of memory");
    }
    printf("perplexity      %.4f ± %.4f\n", v.ppl, v.err);
    printf("tokens scored   %llu (%lld chunks of %d, second halves)\n", (unsigned long long)r->acc.n,
           (long long)r->n_chunk, r->ctx);
    printf("KV type         %s\n", r->kvname);
    if (r->base) {
        printf("base PPL        %.4f (delta %+.4f, %+.3f%%)\n", k.ppl_base, v.ppl - k.ppl_base,
               100.0 * (v.ppl / k.ppl_base - 1.0));
        printf("KL divergence   mean %.6f, median %.6f, p99 %.6f, max %.6f\n", k.mean, k.median, k.p99,
               k.max);
        printf("top-1 agreement %.4f\n", k.top1);
    }
    printf("time            %.2f s (%.1f tokens/s)\n", secs,
           secs > 0 ? (double)r->n_chunk * r->ctx / secs : 0.0);
    return 0;
}

/* The text's tokens, the chunk size and count, and the engine (with the batch
 * and the row buffers). 0, or 1 with the error printed. */
static int ppl_setup(const ppl_opts *o, ppl_run *r, const char *text, size_t text_len)
{
    kvi_model_info info;
    kvi_model_get_info(r->m, &info);
    r->n_vocab = kvi_n_vocab(r->m);
    r->ctx = (int)o->c.n_ctx;
    if (r->ctx == 0) r->ctx = info.n_ctx_train >= 4 && info.n_ctx_train < 256 ? info.n_ctx_train : 256;
    r->batch = o->batch > 0 && o->batch < r->ctx ? (int)o->batch : r->ctx;
    r->first = r->ctx / 2;
    r->bos = kvi_model_add_bos(r->m) ? kvi_token_bos(r->m) : -1;

    int rc = cli_tokenize(r->m, text, text_len, true, false, &r->ids, &r->n_tok);
    r->n_chunk = rc == 0 ? r->n_tok / r->ctx : 0;
    if (o->policy) r->n_chunk = 1; /* stream mode: one sequence */
    if (rc == 0 && r->n_chunk == 0)
        rc = cli_error(
            "perplexity: the text has %d tokens, fewer than one chunk of %d (-c sets the chunk size)",
            (int)r->n_tok, r->ctx);
    if (o->chunks > 0 && r->n_chunk > o->chunks) r->n_chunk = o->chunks;
    r->n_rows = (uint64_t)r->n_chunk * (uint64_t)(r->ctx - 1 - r->first);
    if (rc != 0) return rc;

    kvi_engine_params ep;
    cli_opt_engine_params(&o->c, &ep);
    ep.n_ctx = r->ctx;
    ep.n_seq_max = 1;
    ep.n_batch_max = r->batch;
    if (!(r->e = cli_engine_create(r->m, &ep, "perplexity: "))) return 1;
    if (cli_opt_lora(&o->c, r->e, "perplexity: ")) return 1;
    if (cli_pipe_attach(r->e, &ep)) return 1; /* mpirun: stage 0 of the pipeline */
    if (!(r->b = kvi_batch_create(r->batch)))
        return cli_error("perplexity: out of memory (batch of %d rows)", r->batch);
    r->lp = malloc((size_t)r->n_vocab * sizeof *r->lp);
    r->rowbuf = malloc((size_t)r->n_vocab * sizeof *r->rowbuf);
    if (!r->lp || !r->rowbuf) return cli_error("perplexity: out of memory");
    return 0;
}

/* Opens --kl-base (checked against this run) and writes --save-logits' header.
 * 0, or 1 with the error printed. */
static int ppl_open_files(const ppl_opts *o, ppl_run *r)
{
    if (o->base) {
        if (!(r->base = base_open(o->base, (uint32_t)r->n_vocab, r->n_rows, (uint32_t)r->ctx))) return 1;
        r->acc.kld = malloc((size_t)r->n_rows * sizeof *r->acc.kld); /* (n_rows) KL of each row */
        if (!r->acc.kld) return cli_error("perplexity: out of memory");
    }
    if (o->save) {
        uint8_t h[PPL_HEADER_BYTES];
        header_encode(h, (uint32_t)r->n_vocab, r->n_rows, (uint32_t)r->ctx);
        if (!(r->save = fopen(o->save, "wb")) || fwrite(h, 1, sizeof h, r->save) != sizeof h)
            return cli_error("--save-logits: cannot write %s: %s", o->save, strerror(errno));
    }
    return 0;
}

int cmd_perplexity(int argc, char **argv)
{
    ppl_opts o;
    bool help;
    if (parse_opts(argc, argv, &o, &help)) return 1;
    if (help) {
        fputs(ppl_help, stdout);
        return 0;
    }
    /* the type names are checked only now: after every flag and the -f check */
    if (cli_opt_kv_check(&o.c)) return 1;
    size_t text_len = 0;
    char *text = cli_read_file(o.file, &text_len);
    if (!text) return cli_error("perplexity: cannot read %s: %s", o.file, strerror(errno));

    ppl_run r;
    memset(&r, 0, sizeof r);
    if (!(r.m = cli_opt_load_model(&o.c))) {
        free(text);
        return 1;
    }
    int rc = ppl_setup(&o, &r, text, text_len);
    if (rc == 0) rc = ppl_open_files(&o, &r);
    kv_label(o.c.kv_k, o.c.kv_v, r.kvname, sizeof r.kvname);
    if (rc == 0 && o.policy) {
        rc = run_stream(&o, &r);
    } else if (rc == 0) {
        fprintf(stderr, "kvinfer perplexity: %d tokens, %lld chunks of %d (scoring %d per chunk), KV %s\n",
                (int)r.n_tok, (long long)r.n_chunk, r.ctx, r.ctx - 1 - r.first, r.kvname);
        double t0 = kvi_time_ms();
        rc = run_chunks(&o, &r);
        double secs = (kvi_time_ms() - t0) / 1e3;
        if (r.save && fclose(r.save) != 0 && rc == 0)
            rc = cli_error("--save-logits: writing %s failed", o.save);
        r.save = NULL;
        if (rc == 0) rc = report_chunks(&o, &r, o.c.kv_k, o.c.kv_v, secs);
    }
    if (r.base) fclose(r.base);
    if (r.save) fclose(r.save);
    free(r.acc.kld);
    free(r.lp);
    free(r.rowbuf);
    if (r.b) kvi_batch_free(r.b);
    if (r.e) kvi_engine_free(r.e);
    kvi_model_free(r.m);
    free(r.ids);
    free(text);
    return rc;
}
