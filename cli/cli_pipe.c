/*
 * cli_pipe.c — `mpirun -np N kvinfer run|logits ...`: the command-line side of
 * pipeline-parallel inference (src/pipeline/pipeline.h).
 *
 * Every rank runs the same command line. main() calls cli_pipe_begin first: a
 * process the launcher started as one of several ranks (OMPI_COMM_WORLD_SIZE,
 * or PMI_SIZE, above 1, read before any MPI call) joins the MPI group; a single
 * process never initialises MPI. --pp-layers SPEC is taken out of argv here, on
 * every rank. Rank 0 then runs the command as a single process would, and its
 * engine becomes stage 0 in cli_pipe_attach (cmd_run.c, cmd_logits.c); every other
 * rank loads the model named by -m and serves its stage (cli_pipe_worker_main)
 * until rank 0 ends. Only rank 0 writes to stdout.
 *
 * State: one group per process (g_world, NULL when not under mpirun), the
 * layer spec, and the plan rank 0 attached (n 0 until then).
 */
#include "cli/cli.h"

#include "pipeline/pipeline.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pipe_world *g_world;
static const char *g_spec; /* --pp-layers, or NULL */
static size_t g_mem_limit; /* --mem-limit: bytes of weights a process may hold (0: no bound) */
static double g_timeout = 300; /* --pp-timeout: seconds rank 0 waits for another rank */
static pipe_plan g_plan;   /* the plan rank 0 attached */

/* Ranks the launcher started, from its environment (1: not under a launcher). */
static long launcher_size(void)
{
    const char *names[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return strtol(v, NULL, 10);
    }
    return 1;
}

/* Takes "--pp-layers SPEC" and "--mem-limit SIZE" (or the =VALUE forms) out of
 * argv. 0, or 1 with the error printed. */
static int take_spec(int *argc, char **argv)
{
    int o = 0;
    for (int i = 0; i < *argc; i++) {
        const char *limit = NULL;
        if (!strcmp(argv[i], "--pp-layers")) {
            if (i + 1 >= *argc) return cli_error("--pp-layers needs a value (ranges like 0-7,8-15)");
            g_spec = argv[++i];
        } else if (!strncmp(argv[i], "--pp-layers=", 12)) {
            g_spec = argv[i] + 12;
        } else if (!strcmp(argv[i], "--pp-timeout") || !strncmp(argv[i], "--pp-timeout=", 13)) {
            const char *v = argv[i][12] == '=' ? argv[i] + 13 : i + 1 < *argc ? argv[++i] : NULL;
            char *end = NULL;
            g_timeout = v ? strtod(v, &end) : -1;
            if (!v || end == v || *end || !(g_timeout >= 0) || g_timeout > 1e6)
                return cli_error("--pp-timeout needs seconds, 0 (wait forever) to 1000000");
        } else if (!strcmp(argv[i], "--mem-limit") || !strncmp(argv[i], "--mem-limit=", 12)) {
            if (argv[i][11] == '=')
                limit = argv[i] + 12;
            else if (i + 1 < *argc)
                limit = argv[++i];
            if (!limit || !cli_parse_size(limit, &g_mem_limit) || g_mem_limit == 0)
                return cli_error("--mem-limit needs a size above 0 (bytes, or like 512MiB / 8GiB)");
        } else {
            argv[o++] = argv[i];
        }
    }
    argv[o] = NULL;
    *argc = o;
    return 0;
}

int cli_pipe_begin(int *argc, char ***argv)
{
    if (take_spec(argc, *argv)) return 1;
    const long n = launcher_size();
    if (n <= 1) return g_spec ? cli_error("--pp-layers: only under mpirun with more than one rank") : 0;
    kvi_error err = { 0 };
    if (pipe_init(argc, argv, &g_world, &err)) return cli_error("%s", err.msg);
    pipe_set_timeout(g_world, g_timeout);
    const char *stall = getenv("KVINFER_PIPE_TEST_STALL"); /* fault injection (test_pipeline_mpi) */
    if (stall && *stall) pipe_set_test_stall(g_world, strtol(stall, NULL, 10));
    if (pipe_size(g_world) != n) {
        cli_error("the launcher said %ld ranks, MPI says %d", n, pipe_size(g_world));
        pipe_finish(g_world);
        g_world = NULL;
        return 1;
    }
    return 0;
}

bool cli_pipe_active(void) { return g_world != NULL; }
const char *cli_pipe_failure(void) { return g_world ? pipe_failure(g_world) : NULL; }
bool cli_pipe_worker(void) { return g_world && pipe_rank(g_world) > 0; }

void cli_pipe_end(void)
{
    if (!g_world) return;
    const char *failure = pipe_failure(g_world);
    if (failure) cli_error("%s", failure);
    pipe_root_end(g_world);
    pipe_finish(g_world);
    g_world = NULL;
}

int cli_pipe_attach(kvi_engine *e, const kvi_engine_params *ep)
{
    if (!g_world) return 0;
    if (g_plan.n) return cli_error("pipeline: one engine per run is split over the ranks");
    if (kvi_engine_lora_count(e) > 0) /* the other stages would run their layers without them */
        return cli_error("pipeline: LoRA adapters are not split over pipeline stages yet (merge them with "
                         "`kvinfer lora-merge`, or run without mpirun)");
    kvi_error err = { 0 };
    pipe_plan plan;
    if (pipe_plan_make(kvi_engine_model(e), pipe_size(g_world), g_spec, &plan, &err) ||
        pipe_root_start(g_world, e, ep, &plan, &err))
        return cli_error("%s", err.msg);
    g_plan = plan;
    for (int k = 0; k < plan.n; k++)
        fprintf(stderr, "kvinfer: pipeline stage %d (rank %d): layers %d-%d, %.2f MiB of weights\n", k, k,
                plan.st[k].l0, plan.st[k].l1 - 1, plan.st[k].weight_bytes / 1048576.0);
    return 0;
}

/* Every stage's costs (engine_pipe_stats) into st[pipe_size], or 1 with the error printed. */
static int stage_stats(const kvi_engine *e, engine_pipe_stats *st)
{
    kvi_error err = { 0 };
    if (pipe_stage_stats(g_world, e, st, &err) == 0) return 0;
    return cli_error("%s", err.msg);
}

/* A stage's occupancy: compute / (compute + transport and waiting), 0 before any work. */
static double busy_share(const engine_pipe_stats *st)
{
    const double t = st->compute_ms + st->wait_ms;
    return t > 0 ? st->compute_ms / t : 0.0;
}

/* KV bytes stage k holds: the blocks in use (the same ids on every rank) times its bytes per block. */
static double stage_kv_bytes(const kvi_engine *e, int k)
{
    kvi_stats s;
    kvi_stats_get(e, NULL, &s);
    return (double)s.kv_blocks_used * (double)pipe_kv_block_bytes(g_world, k);
}

void cli_pipe_summary(const kvi_engine *e)
{
    engine_pipe_stats st[PIPE_MAX_STAGES];
    if (!g_world || !g_plan.n || stage_stats(e, st)) return;
    for (int k = 0; k < g_plan.n; k++) {
        const double busy = 100.0 * busy_share(&st[k]);
        char sent[32];
        cli_human_bytes(sent, sizeof sent, (double)st[k].bytes_sent);
        fprintf(stderr,
                "kvinfer: stage %d (rank %d, layers %d-%d): compute %.2f ms, transport and waiting %.2f ms "
                "(busy %.0f%%), sent %s, %.0f B per row, %llu rows in %llu chunks\n",
                k, k, g_plan.st[k].l0, g_plan.st[k].l1 - 1, st[k].compute_ms, st[k].wait_ms, busy, sent,
                st[k].rows ? (double)st[k].bytes_sent / (double)st[k].rows : 0.0, (unsigned long long)st[k].rows,
                (unsigned long long)st[k].chunks);
    }
}

cJSON *cli_pipe_json(const kvi_engine *e)
{
    if (!g_world || !g_plan.n) return NULL;
    engine_pipe_stats ps[PIPE_MAX_STAGES];
    const bool have = stage_stats(e, ps) == 0;
    cJSON *o = cJSON_CreateObject(), *st = cJSON_AddArrayToObject(o, "stages");
    for (int k = 0; st && k < g_plan.n; k++) {
        cJSON *j = cJSON_CreateObject();
        const int range[2] = { g_plan.st[k].l0, g_plan.st[k].l1 - 1 };
        cJSON_AddNumberToObject(j, "rank", k);
        cJSON_AddItemToObject(j, "layers", cJSON_CreateIntArray(range, 2));
        cJSON_AddNumberToObject(j, "weight_bytes", (double)g_plan.st[k].weight_bytes);
        cJSON_AddNumberToObject(j, "kv_bytes", stage_kv_bytes(e, k));
        if (have) {
            cJSON_AddNumberToObject(j, "compute_ms", ps[k].compute_ms);
            cJSON_AddNumberToObject(j, "wait_ms", ps[k].wait_ms);
            cJSON_AddNumberToObject(j, "bytes_sent", (double)ps[k].bytes_sent);
            cJSON_AddNumberToObject(j, "rows", (double)ps[k].rows);
            cJSON_AddNumberToObject(j, "chunks", (double)ps[k].chunks);
        }
        cJSON_AddItemToArray(st, j);
    }
    return o;
}

/* One metric's HELP and TYPE, then its value for every stage. */
static void metric(FILE *f, const char *name, const char *type, const char *help, const double *v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int k = 0; k < g_plan.n; k++)
        fprintf(f, "%s{stage=\"%d\",rank=\"%d\",layers=\"%d-%d\"} %.17g\n", name, k, k, g_plan.st[k].l0,
                g_plan.st[k].l1 - 1, v[k]);
}

char *cli_pipe_metrics(const kvi_engine *e)
{
    if (!g_world || !g_plan.n || pipe_failure(g_world)) return NULL;
    engine_pipe_stats ps[PIPE_MAX_STAGES];
    kvi_error err = { 0 };
    if (pipe_stage_stats(g_world, e, ps, &err)) return NULL;
    double compute[PIPE_MAX_STAGES], wait[PIPE_MAX_STAGES], sent[PIPE_MAX_STAGES], rows[PIPE_MAX_STAGES],
        busy[PIPE_MAX_STAGES], weights[PIPE_MAX_STAGES], kv[PIPE_MAX_STAGES];
    for (int k = 0; k < g_plan.n; k++) {
        compute[k] = ps[k].compute_ms / 1000.0;
        wait[k] = ps[k].wait_ms / 1000.0;
        sent[k] = (double)ps[k].bytes_sent;
        rows[k] = (double)ps[k].rows;
        busy[k] = busy_share(&ps[k]);
        weights[k] = (double)g_plan.st[k].weight_bytes;
        kv[k] = stage_kv_bytes(e, k);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    metric(f, "kvinfer_pipeline_stage_compute_seconds_total", "counter",
           "Time a pipeline stage spent computing its layers.", compute);
    metric(f, "kvinfer_pipeline_stage_wait_seconds_total", "counter",
           "Time a pipeline stage spent in the transport: waiting for the previous stage and sending on "
           "(stage 0: waiting for the logits).",
           wait);
    metric(f, "kvinfer_pipeline_stage_busy_ratio", "gauge",
           "A stage's occupancy: compute time / (compute + transport and waiting) since the start.", busy);
    metric(f, "kvinfer_pipeline_stage_sent_bytes_total", "counter",
           "Bytes a stage sent on: activations to the next stage, the last stage's logits to stage 0.", sent);
    metric(f, "kvinfer_pipeline_stage_rows_total", "counter", "Rows a stage ran through its layers.", rows);
    metric(f, "kvinfer_pipeline_stage_weight_bytes", "gauge", "Weight bytes a stage holds.", weights);
    metric(f, "kvinfer_pipeline_stage_kv_bytes", "gauge",
           "KV cache bytes a stage holds for the blocks in use.", kv);
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        free(text);
        return NULL;
    }
    return text;
}

int cli_pipe_load_params(const char *path, kvi_load_params *lp, char *msg, size_t cap)
{
    if (!g_world && !g_mem_limit) return 0;
    kvi_error err = { 0 };
    char lim[32], need[32], top_s[32];
    cli_human_bytes(lim, sizeof lim, (double)g_mem_limit);
    pipe_plan fit;
    size_t total = 0;
    if (g_world) {
        pipe_plan plan;
        if (pipe_plan_file(path, pipe_size(g_world), g_spec, &plan, &err)) {
            snprintf(msg, cap, "%s", err.msg);
            return 1;
        }
        const int r = pipe_rank(g_world);
        const pipe_stage *st = &plan.st[r];
        if (g_mem_limit && st->weight_bytes > g_mem_limit) {
            cli_human_bytes(need, sizeof need, (double)st->weight_bytes);
            if (pipe_plan_fewest(path, g_mem_limit, &fit, &total, &err) == 0)
                snprintf(msg, cap,
                         "stage %d (layers %d-%d) holds %s of weights, over --mem-limit %s: the balanced "
                         "split fits with -np %d",
                         r, st->l0, st->l1 - 1, need, lim, fit.n);
            else
                snprintf(msg, cap, "stage %d (layers %d-%d) holds %s of weights, over --mem-limit %s (%s)",
                         r, st->l0, st->l1 - 1, need, lim, err.msg);
            return 1;
        }
        lp->stage_first = st->l0;
        lp->stage_end = st->l1;
        return 0;
    }
    const int rc = pipe_plan_fewest(path, g_mem_limit, &fit, &total, &err);
    if (rc == 0 && fit.n == 1) return 0;
    if (rc && total == 0) { /* not a GGUF: a Hugging Face folder or a llama2.c checkpoint */
        kvi_model_info info;
        kvi_error ierr = { 0 };
        if (kvi_model_info_from_file(path, &info, &ierr)) {
            snprintf(msg, cap, "--mem-limit: %s", ierr.msg);
            return 1;
        }
        if (info.weight_bytes <= g_mem_limit) return 0;
        cli_human_bytes(need, sizeof need, (double)info.weight_bytes);
        snprintf(msg, cap, "the model's weights take %s, over --mem-limit %s (only GGUF files split over ranks)",
                 need, lim);
        return 1;
    }
    cli_human_bytes(need, sizeof need, (double)total);
    if (rc) {
        snprintf(msg, cap, "the model's weights take %s, over --mem-limit %s, and no split of its layers fits it",
                 need, lim);
        return 1;
    }
    size_t top = 0;
    for (int k = 0; k < fit.n; k++) top = fit.st[k].weight_bytes > top ? fit.st[k].weight_bytes : top;
    cli_human_bytes(top_s, sizeof top_s, (double)top);
    snprintf(msg, cap,
             "the model's weights take %s, over --mem-limit %s: split them over %d processes (mpirun -np %d "
             "kvinfer ...; the largest stage then holds %s)",
             need, lim, fit.n, fit.n, top_s);
    return 1;
}

int cli_pipe_worker_main(int argc, char **argv)
{
    /* mpirun forwards SIGINT / SIGTERM to every rank: rank 0 shuts down and sends
     * END, which ends this rank cleanly (if rank 0 dies instead, mpirun kills it) */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    const char *model = NULL, *tokenizer = NULL;
    bool mmap = false;
    int64_t threads = 0;
    /* the flags a worker needs; the command's others concern rank 0 alone */
    for (int i = 1; i < argc; i++) {
        const bool has_value = i + 1 < argc;
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && has_value)
            model = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && has_value)
            tokenizer = argv[++i];
        else if (!strcmp(argv[i], "--mmap"))
            mmap = true;
        else if ((!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) && has_value &&
                 !cli_parse_i64(argv[++i], 0, 1024, &threads))
            threads = 0;
    }
    kvi_error err = { 0 };
    pipe_plan plan = { 0 };
    char load_err[sizeof err.msg] = "";
    kvi_load_params lp; /* its stage, or why it refuses (the root reports the reason) */
    kvi_load_params_default(&lp);
    const char *path = model ? model : cli_default_model();
    kvi_model *m = NULL;
    if (!path)
        snprintf(load_err, sizeof load_err, "no model given (-m)");
    else if (cli_pipe_load_params(path, &lp, load_err, sizeof load_err))
        ; /* load_err says why */
    else if (!(m = cli_load_model(model, mmap, tokenizer)))
        snprintf(load_err, sizeof load_err, "cannot load its model '%s'", path);
    else if (pipe_plan_make(m, pipe_size(g_world), g_spec, &plan, &err))
        memcpy(load_err, err.msg, sizeof load_err);
    const bool ok = m && !load_err[0];
    int rc =
        pipe_worker_run(g_world, ok ? m : NULL, &plan, (int)threads, load_err[0] ? load_err : NULL, &err);
    if (rc && ok) cli_error("pipeline rank %d: %s", pipe_rank(g_world), err.msg);
    kvi_model_free(m);
    return rc || !ok ? 1 : 0;
}
