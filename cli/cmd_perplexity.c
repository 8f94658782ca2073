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
#include "cli/cli.h"

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
    "  --mmap               map the model file instead of reading it\n"
    "  --json               print one JSON object only: perplexity, ppl_error, n_tokens,\n"
    "                       kv_type (+ kld_mean, top1_agreement, ... with --kl-base)\n"
    "  -h, --help           this help\n";

typedef struct ppl_opts {
    const char *model, *file, *save, *base;
    int64_t ctx, batch, chunks, threads;
    const char *kv_k, *kv_v;
    const char *policy;        /* NULL or "error": chunks; else stream mode */
    int64_t keep, sink, window;
    bool mmap, json;
} ppl_opts;

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
            snprintf(msg, sizeof msg, "holds %llu scored rows, this run scores %llu (another text or --chunks?)",
                     (unsigned long long)fr, (unsigned long long)n_rows);
            why = msg;
        } else if (fseek(f, 0, SEEK_END) == 0) {
            long end = ftell(f);
            uint64_t want = PPL_HEADER_BYTES + n_rows * (4 + 4 * (uint64_t)n_vocab);
            if (end < 0 || (uint64_t)end != want) {
                snprintf(msg, sizeof msg, "file is %ld bytes, its header says %llu", end, (unsigned long long)want);
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
    o->sink = 4;
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            *help = true;
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(o->model = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(o->file = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 4, 1 << 24, &o->ctx)) return cli_error("%s: '%s' is not an integer in [4, 16777216]", a, v);
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 1, 1 << 24, &o->batch)) return cli_error("%s: '%s' is not an integer in [1, 16777216]", a, v);
        } else if (!strcmp(a, "--chunks")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 1, INT32_MAX, &o->chunks)) return cli_error("%s: '%s' is not a positive integer", a, v);
        } else if (!strcmp(a, "--kv-type")) {
            if (!(o->kv_k = o->kv_v = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--kv-type-k")) {
            if (!(o->kv_k = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--kv-type-v")) {
            if (!(o->kv_v = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--ctx-policy")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (strcmp(v, "error") && strcmp(v, "shift") && strcmp(v, "sinks") && strcmp(v, "heavy"))
                return cli_error("%s: unknown policy '%s' (error, shift, sinks, heavy)", a, v);
            o->policy = strcmp(v, "error") ? v : NULL;
        } else if (!strcmp(a, "--keep") || !strcmp(a, "--sink") || !strcmp(a, "--window")) {
            int64_t *dst = a[2] == 'k' ? &o->keep : a[2] == 's' ? &o->sink : &o->window;
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 0, 1 << 24, dst)) return cli_error("%s: '%s' is not an integer in [0, 16777216]", a, v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_flag_value(argc, argv, &i))) return 1;
            if (!cli_parse_i64(v, 0, 1024, &o->threads)) return cli_error("%s: '%s' is not an integer in [0, 1024]", a, v);
        } else if (!strcmp(a, "--save-logits")) {
            if (!(o->save = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--kl-base")) {
            if (!(o->base = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--mmap")) {
            o->mmap = true;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (a[0] == '-') {
            return cli_error("perplexity: unknown option '%s' (kvinfer perplexity --help)", a);
        } else {
            return cli_error("perplexity: unexpected argument '%s' (the text goes after -f)", a);
        }
    }
    if (!o->file) return cli_error("perplexity: no text: use -f FILE");
    if (o->policy && (o->save || o->base))
        return cli_error("perplexity: --save-logits and --kl-base need the chunked method (no --ctx-policy)");
    return 0;
}

/* Running totals of one evaluation. */
typedef struct ppl_acc {
    double nll, nll2;          /* sums of NLL and NLL^2 */
    double base_nll;           /* sum of the base's NLL (with --kl-base) */
    uint64_t n;                /* rows scored */
    double *kld;               /* [n_rows] KL of each row (with --kl-base) */
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
        if (fwrite(t, 1, 4, save) != 4 || fwrite(rowbuf, sizeof(float), (size_t)n_vocab, save) != (size_t)n_vocab)
            return cli_error("--save-logits: writing %s failed: %s", save_path, strerror(errno));
    }
    if (base) {
        uint8_t t[4];
        if (fread(t, 1, 4, base) != 4 || fread(rowbuf, sizeof(float), (size_t)n_vocab, base) != (size_t)n_vocab)
            return cli_error("--kl-base: reading %s failed", base_path);
        if ((int32_t)get_u32(t) != target)
            return cli_error("--kl-base: %s: row %llu predicts token %d, this run token %d (another text?)",
                             base_path, (unsigned long long)acc->n, (int)(int32_t)get_u32(t), (int)target);
        double kl = 0.0;
        int32_t am_b = 0, am_c = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            double lb = rowbuf[v];
            if (!isfinite(lb) || lb > 1e-3) return cli_error("--kl-base: %s: row %llu holds a value %g that is not a log-probability",
                                                             base_path, (unsigned long long)acc->n, lb);
            /* the current row rounded to float exactly as a saved file holds it, so a
             * run against its own base gives KL 0 */
            double lc = (float)lp[v];
            kl += exp(lb) * (lb - lc);
            if (rowbuf[v] > rowbuf[am_b]) am_b = v;
            if ((float)lp[v] > (float)lp[am_c]) am_c = v;
        }
        acc->kld[acc->n] = kl > 0.0 ? kl : 0.0;   /* rounding can give -1e-17 */
        acc->top1_same += am_b == am_c;
        acc->base_nll += -(double)rowbuf[target];
    }
    acc->n++;
    return 0;
}

static const char *kv_label(kvi_type k, kvi_type v, char *buf, size_t cap)
{
    const char *kn = kvi_type_name(k) ? kvi_type_name(k) : "?", *vn = kvi_type_name(v) ? kvi_type_name(v) : "?";
    if (k == v) snprintf(buf, cap, "%s", kn);
    else snprintf(buf, cap, "%s/%s", kn, vn);
    return buf;
}

/* KV bytes the engine holds from the system: blocks and q4 key tails. */
static size_t kv_held(const kvi_engine *e)
{
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    return st.kv_bytes_allocated + st.kv_bytes_tail;
}

/* Stream mode (see the file header): ids[0..n_tok) as one sequence past ctx. */
static int run_stream(const ppl_opts *o, kvi_engine *e, kvi_batch *b, const int32_t *ids, int32_t n_tok, int ctx,
                      int batch, int32_t bos, int32_t n_vocab, double *lp, const char *kvname)
{
    kvi_seq *seq = kvi_seq_create(e);
    if (!seq) return cli_error("perplexity: cannot create a sequence");
    const int first = ctx / 2;
    double nll[2] = {0, 0}, nll2 = 0;   /* [0] rows inside the first context, [1] past it */
    uint64_t cnt[2] = {0, 0};
    size_t bytes_full = 0, bytes_max = 0;
    int rc = 0;
    const int32_t n_pre = n_tok < ctx ? n_tok : ctx;
    const double t0 = kvi_time_ms();
    for (int32_t i = 0; rc == 0 && i < n_tok - 1;) {
        int32_t pos, n;
        kvi_error err = {0};
        if (i < n_pre) {
            pos = i;
            n = n_pre - i < batch ? n_pre - i : batch;
            if (i + n > n_tok - 1) n = n_tok - 1 - i;
        } else {
            pos = kvi_seq_make_room(seq, 1, &err);
            if (pos < 0) {
                rc = cli_error("perplexity: %s at token %d: %s", o->policy, (int)i, err.msg);
                break;
            }
            n = 1;
        }
        kvi_batch_clear(b);
        for (int32_t j = 0; j < n; j++) {
            const int32_t tok = i + j == 0 && bos >= 0 ? bos : ids[i + j];
            kvi_batch_add(b, seq, tok, pos + j, i + j >= first);
        }
        const int r = kvi_step(e, b, &err);
        if (r) {
            rc = cli_error("perplexity: token %d: %s", (int)i, err.msg[0] ? err.msg : kvi_strerror(r));
            break;
        }
        for (int32_t j = 0; j < n; j++) {
            if (i + j < first) continue;
            const float *lg = kvi_logits(e, j);   /* (n_vocab) */
            if (!lg || !log_softmax(lg, n_vocab, lp)) {
                rc = cli_error("perplexity: row %d: logits missing or not finite", (int)(i + j));
                break;
            }
            const double x = -lp[ids[i + j + 1]];
            const int k = i + j >= ctx;
            nll[k] += x;
            nll2 += x * x;
            cnt[k]++;
        }
        i += n;
        const size_t held = kv_held(e);
        if (held > bytes_max) bytes_max = held;
        if (i == n_pre) bytes_full = held;
    }
    const double secs = (kvi_time_ms() - t0) / 1e3;
    kvi_stats st;
    kvi_stats_get(e, seq, &st);
    kvi_seq_free(seq);
    if (rc) return rc;
    const uint64_t N = cnt[0] + cnt[1];
    if (N == 0) return cli_error("perplexity: the text has %d tokens, too few to score past %d", (int)n_tok, first);
    const double mean = (nll[0] + nll[1]) / (double)N, ppl = exp(mean);
    const double var = nll2 / (double)N - mean * mean;
    const double err_ppl = N > 1 && var > 0 ? ppl * sqrt(var / (double)(N - 1)) : 0.0;
    const double ppl_in = cnt[0] ? exp(nll[0] / (double)cnt[0]) : 0.0, ppl_past = cnt[1] ? exp(nll[1] / (double)cnt[1]) : 0.0;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "perplexity", ppl);
        cJSON_AddNumberToObject(j, "ppl_error", err_ppl);
        cJSON_AddNumberToObject(j, "nll_mean", mean);
        cJSON_AddNumberToObject(j, "n_tokens", (double)N);
        cJSON_AddNumberToObject(j, "ctx", ctx);
        cJSON_AddStringToObject(j, "kv_type", kvname);
        cJSON_AddStringToObject(j, "ctx_policy", o->policy);
        cJSON_AddNumberToObject(j, "ppl_in_ctx", ppl_in);
        cJSON_AddNumberToObject(j, "n_in_ctx", (double)cnt[0]);
        cJSON_AddNumberToObject(j, "ppl_past_ctx", ppl_past);
        cJSON_AddNumberToObject(j, "n_past_ctx", (double)cnt[1]);
        cJSON_AddNumberToObject(j, "n_evicted", (double)st.n_evicted);
        cJSON_AddNumberToObject(j, "kv_bytes_full", (double)bytes_full);
        cJSON_AddNumberToObject(j, "kv_bytes_max", (double)bytes_max);
        cJSON_AddNumberToObject(j, "seconds", secs);
        char *txt = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!txt) return cli_error("perplexity: out of memory");
        puts(txt);
        free(txt);
    } else {
        printf("perplexity      %.4f ± %.4f (%s, one sequence of %d tokens, context %d)\n", ppl, err_ppl, o->policy,
               (int)n_tok, ctx);
        printf("inside context  %.4f (%llu rows)\n", ppl_in, (unsigned long long)cnt[0]);
        printf("past context    %.4f (%llu rows, %llu positions evicted)\n", ppl_past, (unsigned long long)cnt[1],
               (unsigned long long)st.n_evicted);
        printf("KV bytes        %zu when the context filled, %zu at most\n", bytes_full, bytes_max);
        printf("KV type         %s\n", kvname);
        printf("time            %.2f s (%.1f tokens/s)\n", secs, secs > 0 ? (double)n_tok / secs : 0.0);
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
    kvi_type tk = KVI_TYPE_F16, tv = KVI_TYPE_F16;
    if (o.kv_k && kvi_type_from_name(o.kv_k, &tk) != 0) return cli_error("--kv-type-k: unknown type '%s'", o.kv_k);
    if (o.kv_v && kvi_type_from_name(o.kv_v, &tv) != 0) return cli_error("--kv-type-v: unknown type '%s'", o.kv_v);
    size_t text_len = 0;
    char *text = cli_read_file(o.file, &text_len);
    if (!text) return cli_error("perplexity: cannot read %s: %s", o.file, strerror(errno));

    kvi_model *m = cli_load_model(o.model, o.mmap, NULL);
    if (!m) {
        free(text);
        return 1;
    }
    int rc = 0;
    int32_t *ids = NULL, n_tok = 0;
    kvi_engine *e = NULL;
    kvi_seq *seq = NULL;
    kvi_batch *b = NULL;
    FILE *save = NULL, *base = NULL;
    double *lp = NULL;
    float *rowbuf = NULL;
    ppl_acc acc = {0};
    kvi_model_info info;
    kvi_model_get_info(m, &info);
    int32_t n_vocab = kvi_n_vocab(m);
    int ctx = (int)o.ctx;
    if (ctx == 0) ctx = info.n_ctx_train >= 4 && info.n_ctx_train < 256 ? info.n_ctx_train : 256;
    int batch = o.batch > 0 && o.batch < ctx ? (int)o.batch : ctx;
    int first = ctx / 2;
    int32_t bos = kvi_model_add_bos(m) ? kvi_token_bos(m) : -1;

    rc = cli_tokenize(m, text, text_len, true, false, &ids, &n_tok);
    int64_t n_chunk = rc == 0 ? n_tok / ctx : 0;
    if (o.policy) n_chunk = 1;   /* stream mode: one sequence */
    if (rc == 0 && n_chunk == 0)
        rc = cli_error("perplexity: the text has %d tokens, fewer than one chunk of %d (-c sets the chunk size)",
                       (int)n_tok, ctx);
    if (o.chunks > 0 && n_chunk > o.chunks) n_chunk = o.chunks;
    uint64_t n_rows = (uint64_t)n_chunk * (uint64_t)(ctx - 1 - first);

    if (rc == 0) {
        kvi_engine_params ep;
        cli_engine_params_default(&ep);
        ep.n_threads = (int)o.threads;
        ep.n_ctx = ctx;
        ep.kv_type_k = tk;
        ep.kv_type_v = tv;
        ep.n_seq_max = 1;
        ep.n_batch_max = batch;
        if (o.policy) {
            ep.ctx_policy = o.policy;
            ep.n_keep = (int)o.keep;
            ep.n_sink = (int)o.sink;
            ep.n_window = (int)o.window;
        }
        kvi_error err = {0};
        if (!(e = kvi_engine_create(m, &ep, &err)))
            rc = cli_error("perplexity: cannot create the engine: %s", err.msg[0] ? err.msg : kvi_strerror(err.code));
    }
    if (rc == 0 && !(b = kvi_batch_create(batch))) rc = cli_error("perplexity: out of memory (batch of %d rows)", batch);
    if (rc == 0) {
        lp = malloc((size_t)n_vocab * sizeof *lp);         /* (n_vocab) log-probabilities of one row */
        rowbuf = malloc((size_t)n_vocab * sizeof *rowbuf);  /* (n_vocab) file record */
        if (!lp || !rowbuf) rc = cli_error("perplexity: out of memory");
    }
    if (rc == 0 && o.base) {
        if (!(base = base_open(o.base, (uint32_t)n_vocab, n_rows, (uint32_t)ctx))) rc = 1;
        else if (!(acc.kld = malloc((size_t)n_rows * sizeof *acc.kld))) rc = cli_error("perplexity: out of memory");
    }
    if (rc == 0 && o.save) {
        uint8_t h[PPL_HEADER_BYTES];
        header_encode(h, (uint32_t)n_vocab, n_rows, (uint32_t)ctx);
        if (!(save = fopen(o.save, "wb")) || fwrite(h, 1, sizeof h, save) != sizeof h)
            rc = cli_error("--save-logits: cannot write %s: %s", o.save, strerror(errno));
    }

    char kvbuf[64];
    const char *kvname = kv_label(tk, tv, kvbuf, sizeof kvbuf);
    if (rc == 0 && !o.policy)
        fprintf(stderr, "kvinfer perplexity: %d tokens, %lld chunks of %d (scoring %d per chunk), KV %s\n", (int)n_tok,
                (long long)n_chunk, ctx, ctx - 1 - first, kvname);
    if (rc == 0 && o.policy) {
        rc = run_stream(&o, e, b, ids, n_tok, ctx, batch, bos, n_vocab, lp, kvname);
        n_chunk = 0;   /* the chunked loop and report below are skipped */
        if (rc == 0) rc = -1;
    }
    double t0 = kvi_time_ms();
    for (int64_t c = 0; rc == 0 && c < n_chunk; c++) {
        const int32_t *chunk = ids + c * ctx;   /* (ctx) tokens */
        if (!(seq = kvi_seq_create(e))) {
            rc = cli_error("perplexity: cannot create a sequence");
            break;
        }
        for (int start = 0; rc == 0 && start < ctx; start += batch) {
            int n = ctx - start < batch ? ctx - start : batch;
            kvi_batch_clear(b);
            for (int j = 0; j < n; j++) {
                int pos = start + j;
                int32_t tok = pos == 0 && bos >= 0 ? bos : chunk[pos];
                kvi_batch_add(b, seq, tok, pos, true);
            }
            kvi_error err = {0};
            int r = kvi_step(e, b, &err);
            if (r) {
                rc = cli_error("perplexity: chunk %lld failed: %s", (long long)c, err.msg[0] ? err.msg : kvi_strerror(r));
                break;
            }
            for (int j = 0; rc == 0 && j < n; j++) {
                int pos = start + j;
                if (pos < first || pos > ctx - 2) continue;
                const float *lg = kvi_logits(e, j);   /* (n_vocab) */
                if (!lg || !log_softmax(lg, n_vocab, lp))
                    rc = cli_error("perplexity: chunk %lld row %d: logits missing or not finite", (long long)c, pos);
                else
                    rc = score_row(&acc, lp, n_vocab, chunk[pos + 1], save, base, rowbuf, o.save, o.base);
            }
        }
        kvi_seq_free(seq);
        seq = NULL;
        if (rc == 0 && !o.json && n_chunk > 1)
            fprintf(stderr, "  [%lld] running PPL %.4f\n", (long long)c + 1, exp(acc.nll / (double)acc.n));
    }
    double secs = (kvi_time_ms() - t0) / 1e3;
    if (save && fclose(save) != 0 && rc == 0) rc = cli_error("--save-logits: writing %s failed", o.save);
    save = NULL;

    if (rc == 0) {
        double N = (double)acc.n;
        double mean = acc.nll / N, ppl = exp(mean);
        double var = acc.nll2 / N - mean * mean;
        double err_ppl = acc.n > 1 && var > 0 ? ppl * sqrt(var / (N - 1)) : 0.0;
        double kmean = 0, kmed = 0, k99 = 0, kmax = 0, top1 = 0, ppl_base = 0;
        if (base) {
            double s = 0.0;
            for (uint64_t i = 0; i < acc.n; i++) s += acc.kld[i];
            kmean = s / N;
            qsort(acc.kld, (size_t)acc.n, sizeof *acc.kld, cmp_double);
            kmed = acc.kld[acc.n / 2];
            k99 = acc.kld[(size_t)((double)(acc.n - 1) * 0.99)];
            kmax = acc.kld[acc.n - 1];
            top1 = (double)acc.top1_same / N;
            ppl_base = exp(acc.base_nll / N);
        }
        if (o.json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddNumberToObject(j, "perplexity", ppl);
            cJSON_AddNumberToObject(j, "ppl_error", err_ppl);
            cJSON_AddNumberToObject(j, "nll_mean", mean);
            cJSON_AddNumberToObject(j, "n_tokens", N);
            cJSON_AddNumberToObject(j, "n_chunks", (double)n_chunk);
            cJSON_AddNumberToObject(j, "ctx", ctx);
            cJSON_AddStringToObject(j, "kv_type", kvname);
            cJSON_AddStringToObject(j, "kv_type_k", kvi_type_name(tk) ? kvi_type_name(tk) : "?");
            cJSON_AddStringToObject(j, "kv_type_v", kvi_type_name(tv) ? kvi_type_name(tv) : "?");
            cJSON_AddNumberToObject(j, "seconds", secs);
            if (base) {
                cJSON_AddNumberToObject(j, "kld_mean", kmean);
                cJSON_AddNumberToObject(j, "kld_median", kmed);
                cJSON_AddNumberToObject(j, "kld_p99", k99);
                cJSON_AddNumberToObject(j, "kld_max", kmax);
                cJSON_AddNumberToObject(j, "top1_agreement", top1);
                cJSON_AddNumberToObject(j, "perplexity_base", ppl_base);
                cJSON_AddNumberToObject(j, "delta_ppl", ppl - ppl_base);
            }
            char *s = cJSON_PrintUnformatted(j);
            cJSON_Delete(j);
            if (!s) rc = cli_error("perplexity: out of memory");
            else puts(s);
            free(s);
        } else {
            printf("perplexity      %.4f ± %.4f\n", ppl, err_ppl);
            printf("tokens scored   %llu (%lld chunks of %d, second halves)\n", (unsigned long long)acc.n,
                   (long long)n_chunk, ctx);
            printf("KV type         %s\n", kvname);
            if (base) {
                printf("base PPL        %.4f (delta %+.4f, %+.3f%%)\n", ppl_base, ppl - ppl_base, 100.0 * (ppl / ppl_base - 1.0));
                printf("KL divergence   mean %.6f, median %.6f, p99 %.6f, max %.6f\n", kmean, kmed, k99, kmax);
                printf("top-1 agreement %.4f\n", top1);
            }
            printf("time            %.2f s (%.1f tokens/s)\n", secs, secs > 0 ? (double)n_chunk * ctx / secs : 0.0);
        }
    }
    if (rc == -1) rc = 0;   /* stream mode reported already */
    if (base) fclose(base);
    if (save) fclose(save);
    free(acc.kld);
    free(lp);
    free(rowbuf);
    if (b) kvi_batch_free(b);
    if (e) kvi_engine_free(e);
    kvi_model_free(m);
    free(ids);
    free(text);
    return rc;
}
