/*
 * cmd_sampler.c — `kvinfer sampler`: one sampler chain on one logits vector,
 * in the format of ../shared/golden/sampling/cases.json (llama.cpp's chain), so
 * that kvinfer's samplers can be compared with llama.cpp's by hand.
 *
 * Input: one case object: "params" (llama-server's sampling fields, read by the
 * server's reader srv_sampling_fields), "history" (token ids accepted before
 * the first draw, as a prompt), "logits" (n_vocab floats), "n_draws", and
 * optionally "force" (token ids accepted in order instead of drawing).
 * Output: {"chain": [names, "?" before those switched off], "candidates":
 * {"ids", "p"} (finite candidates after the whole chain at the first draw),
 * "draws": [...], "trace_n": [...], "trace_p": [...]} — per step the finite
 * candidates and the probability of the token taken; the sampler's state
 * (penalties, DRY, mirostat's mu) carried from step to step.
 *
 * Invariants: only the vocabulary is loaded (no weights); every input is
 * checked (logits count, ids in range) with one error line; --json prints one
 * document and nothing else on stdout.
 */
#include "cli/cli_opts.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char sampler_help[] =
    "usage: kvinfer sampler [-m MODEL] -f CASE.json [--draws N] [--json]\n"
    "\n"
    "Runs llama.cpp's sampler chain, as kvinfer builds it, on one case in the format of\n"
    "shared/golden/sampling/cases.json: {\"params\": {llama-server sampling fields},\n"
    "\"history\": [ids], \"logits\": [n_vocab floats], \"n_draws\": N, \"force\": [ids]}\n"
    "(force, optional: ids taken in order instead of drawing). Prints the chain, the\n"
    "candidates of the first draw and, per step, the token, the number of candidates\n"
    "and the token's probability.\n"
    "\n"
    "options:\n"
    "  -m, --model PATH   the vocabulary (DRY's breakers; n_vocab) (default:\n"
    "                     ../shared/models/stories260K.gguf if it exists)\n"
    "  -f, --file PATH    the case (a JSON object)\n"
    "  --draws N          steps (default: the case's n_draws, else 1)\n"
    "  --json             print one JSON object and nothing else on stdout\n"
    "  -h, --help         this help\n";

typedef struct sampler_run {
    int32_t n_steps;
    int32_t *draws, *trace_n; /* [n_steps] */
    float *trace_p;           /* [n_steps] */
    int32_t *cand_ids;        /* [n_vocab] the first draw's candidates */
    float *cand_p;
    int32_t n_cand;
    char chain[512];
} sampler_run;

/* The ints of a JSON array into a malloc'd array, each in [0, nv). */
static int ids_of(const cJSON *a, const char *what, int32_t nv, int32_t **out, int32_t *n)
{
    *out = NULL;
    *n = 0;
    if (!a) return 0;
    if (!cJSON_IsArray(a)) return cli_error("sampler: '%s' must be an array of token ids", what);
    const int k = cJSON_GetArraySize(a);
    *out = malloc((size_t)(k > 0 ? k : 1) * sizeof **out);
    if (!*out) return cli_error("sampler: out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int32_t)it->valuedouble || it->valueint < 0 ||
            it->valueint >= nv)
            return cli_error("sampler: '%s' holds %g, not a token id in [0, %d)", what, it->valuedouble,
                             (int)nv);
        (*out)[(*n)++] = it->valueint;
    }
    return 0;
}

static int logits_of(const cJSON *a, int32_t nv, float *lg)
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != nv)
        return cli_error("sampler: 'logits' must be an array of %d numbers (the model's vocabulary)",
                         (int)nv);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsNumber(it)) return cli_error("sampler: 'logits' item %d is not a number", i);
        lg[i++] = (float)it->valuedouble;
    }
    return 0;
}

/* The steps: a draw (or the forced id), its candidates and probability, then
 * accept. ids / p: [nv] scratch. */
static void run_steps(kvi_sampler *smp, const float *lg, const int32_t *force, int32_t n_force, int32_t nv,
                      sampler_run *r, int32_t *ids, float *p)
{
    for (int32_t i = 0; i < r->n_steps; i++) {
        int32_t t;
        if (i < n_force) {
            t = force[i];
            kvi_sampler_probs(smp, lg, p); /* the distribution the draw would use */
            r->trace_p[i] = p[t];
        } else {
            t = kvi_sampler_sample(smp, lg);
        }
        const int32_t n = kvi_sampler_last_candidates(smp, ids, p, nv);
        if (i >= n_force) {
            r->trace_p[i] = 0.0f;
            for (int32_t j = 0; j < n; j++)
                if (ids[j] == t) r->trace_p[i] = p[j];
        }
        if (i == 0) {
            r->n_cand = n;
            memcpy(r->cand_ids, ids, (size_t)n * sizeof *ids);
            memcpy(r->cand_p, p, (size_t)n * sizeof *p);
        }
        r->draws[i] = t;
        r->trace_n[i] = n;
        kvi_sampler_accept_output(smp, t);
    }
}

static cJSON *ints_json(const int32_t *v, int32_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *floats_json(const float *v, int32_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static int print_json(const sampler_run *r)
{
    cJSON *root = cJSON_CreateObject(), *chain = cJSON_AddArrayToObject(root, "chain");
    char names[sizeof r->chain];
    memcpy(names, r->chain, sizeof names);
    for (char *t = strtok(names, " "); t; t = strtok(NULL, " "))
        cJSON_AddItemToArray(chain, cJSON_CreateString(t));
    cJSON *cand = cJSON_AddObjectToObject(root, "candidates");
    cJSON_AddItemToObject(cand, "ids", ints_json(r->cand_ids, r->n_cand));
    cJSON_AddItemToObject(cand, "p", floats_json(r->cand_p, r->n_cand));
    cJSON_AddItemToObject(root, "draws", ints_json(r->draws, r->n_steps));
    cJSON_AddItemToObject(root, "trace_n", ints_json(r->trace_n, r->n_steps));
    cJSON_AddItemToObject(root, "trace_p", floats_json(r->trace_p, r->n_steps));
    return cli_print_json(root, "sampler: out of memory for the output");
}

static void print_text(const sampler_run *r)
{
    printf("chain: %s\ncandidates at the first draw (%d):\n", r->chain, (int)r->n_cand);
    for (int32_t i = 0; i < r->n_cand; i++)
        printf("  %6d  %.6f\n", (int)r->cand_ids[i], (double)r->cand_p[i]);
    printf("step  token  candidates  p\n");
    for (int32_t i = 0; i < r->n_steps; i++)
        printf("%4d  %5d  %10d  %.6f\n", (int)i, (int)r->draws[i], (int)r->trace_n[i], (double)r->trace_p[i]);
}

/* The case's sampler: params, DRY's breakers, history accepted. NULL with an error printed. */
static kvi_sampler *case_sampler(const cJSON *c, const kvi_model *m, const int32_t *hist, int32_t n_hist)
{
    kvi_sampler_params sp;
    kvi_sampler_params_default(&sp);
    srv_dry_breakers dry;
    memset(&dry, 0, sizeof dry);
    srv_err er = { 0 };
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
    if (params && !cJSON_IsObject(params)) {
        cli_error("sampler: 'params' must be an object");
        return NULL;
    }
    if (params && srv_sampling_fields(params, true, 4096, &sp, &dry, &er) != 0) {
        cli_error("sampler: params: %s", er.msg);
        return NULL;
    }
    kvi_sampler *smp = kvi_sampler_create(&sp, kvi_n_vocab(m));
    if (!smp) {
        cli_error("sampler: out of memory");
        return NULL;
    }
    kvi_error err = { 0 };
    if (sp.dry_multiplier != 0.0f && sp.dry_penalty_last_n != 0 &&
        kvi_sampler_set_dry_breakers(smp, m, dry.given ? dry.v : NULL, dry.n, &err) != 0) {
        cli_error("sampler: DRY breakers: %s", err.msg);
        kvi_sampler_free(smp);
        return NULL;
    }
    for (int32_t i = 0; i < n_hist; i++) kvi_sampler_accept(smp, hist[i]);
    return smp;
}

static int run_case(const cJSON *c, const kvi_model *m, int64_t n_draws, bool json)
{
    const int32_t nv = kvi_n_vocab(m);
    int32_t *hist = NULL, *force = NULL, n_hist = 0, n_force = 0;
    sampler_run r;
    memset(&r, 0, sizeof r);
    float *lg = malloc((size_t)nv * sizeof *lg), *p = malloc((size_t)nv * sizeof *p);
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    int rc = !lg || !p || !ids ? cli_error("sampler: out of memory") : 0;
    if (rc == 0) rc = logits_of(cJSON_GetObjectItemCaseSensitive(c, "logits"), nv, lg);
    if (rc == 0) rc = ids_of(cJSON_GetObjectItemCaseSensitive(c, "history"), "history", nv, &hist, &n_hist);
    if (rc == 0) rc = ids_of(cJSON_GetObjectItemCaseSensitive(c, "force"), "force", nv, &force, &n_force);
    const cJSON *nd = cJSON_GetObjectItemCaseSensitive(c, "n_draws");
    if (n_draws < 0)
        n_draws = cJSON_IsNumber(nd) && nd->valuedouble >= 1 && nd->valuedouble <= 1e6
                      ? (int64_t)nd->valuedouble
                      : 1;
    r.n_steps = (int32_t)n_draws;
    if (rc == 0 && n_force > 0 && n_force < r.n_steps) r.n_steps = n_force; /* forced: as many steps as ids */
    r.draws = malloc((size_t)r.n_steps * sizeof *r.draws);
    r.trace_n = malloc((size_t)r.n_steps * sizeof *r.trace_n);
    r.trace_p = malloc((size_t)r.n_steps * sizeof *r.trace_p);
    r.cand_ids = malloc((size_t)nv * sizeof *r.cand_ids);
    r.cand_p = malloc((size_t)nv * sizeof *r.cand_p);
    if (rc == 0 && (!r.draws || !r.trace_n || !r.trace_p || !r.cand_ids || !r.cand_p))
        rc = cli_error("sampler: out of memory");
    kvi_sampler *smp = rc == 0 ? case_sampler(c, m, hist, n_hist) : NULL;
    if (rc == 0 && !smp) rc = 1;
    if (rc == 0) {
        kvi_sampler_chain_names(smp, r.chain, sizeof r.chain);
        run_steps(smp, lg, force, n_force, nv, &r, ids, p);
        if (json)
            rc = print_json(&r);
        else
            print_text(&r);
    }
    kvi_sampler_free(smp);
    free(lg);
    free(p);
    free(ids);
    free(hist);
    free(force);
    free(r.draws);
    free(r.trace_n);
    free(r.trace_p);
    free(r.cand_ids);
    free(r.cand_p);
    return rc;
}

int cmd_sampler(int argc, char **argv)
{
    cli_common o;
    cli_common_init(&o);
    const char *file = NULL;
    int64_t n_draws = -1;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(sampler_help, stdout);
            return 0;
        }
        const int r = cli_opt_common(argc, argv, &i, &o, CLI_OPT_MODEL);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_flag_value(argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--draws")) {
            if (cli_flag_i64(a, cli_flag_value(argc, argv, &i), 1, 1000000, &n_draws) < 0) return 1;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else {
            return cli_error("sampler: unknown option '%s' (kvinfer sampler --help)", a);
        }
    }
    if (!file) return cli_error("sampler: no case given: use -f CASE.json");
    const char *path = o.model ? o.model : cli_default_model();
    if (!path) return cli_error("no model given: use -m MODEL.gguf");
    size_t len = 0;
    char *text = cli_read_file(file, &len);
    if (!text) return cli_error("sampler: cannot read '%s'", file);
    cJSON *c = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(c)) {
        cJSON_Delete(c);
        return cli_error("sampler: '%s' is not a JSON object", file);
    }
    kvi_error err = { 0 };
    kvi_model *m = kvi_vocab_load(path, &err);
    int rc = m ? run_case(c, m, n_draws, json)
               : cli_error("cannot load the vocabulary of '%s': %s", path,
                           err.msg[0] ? err.msg : kvi_strerror(err.code));
    kvi_model_free(m);
    cJSON_Delete(c);
    return rc;
}
