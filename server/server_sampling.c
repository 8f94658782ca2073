/*
 * server_sampling.c — llama-server's sampling fields of a request:
 * typical_p, mirostat / mirostat_tau / mirostat_eta, dry_* (with
 * dry_sequence_breakers), xtc_*, top_n_sigma, dynatemp_range /
 * dynatemp_exponent, repeat_last_n, min_keep, samplers and n_probs; and, for
 * `kvinfer sampler` and the sampler goldens, the whole set with temperature,
 * top_k, top_p, min_p, the penalties and seed.
 *
 * Data: one table row per numeric field (name, range, integer or not, where it
 * goes in kvi_sampler_params). Invariants: a field that is absent or null keeps
 * its value; one of the wrong type or out of its range is a 400 naming it;
 * repeat_last_n and dry_penalty_last_n -1 mean the whole context (n_ctx); the
 * breaker strings are copied into srv_dry_breakers (at most SRV_DRY_BREAKERS_MAX,
 * each cut at 40 bytes as llama.cpp does), so nothing here allocates.
 */
#include "server/server.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct num_row {
    const char *name;
    double lo, hi;
    bool integer;
    bool base; /* parsed by server_json.c for the server; here only for the whole set */
    size_t off;
} num_row;

#define F(field) offsetof(kvi_sampler_params, field)
static const num_row rows[] = {
    { "temperature", 0, 100, false, true, F(temp) },
    { "top_k", 0, 1 << 30, true, true, F(top_k) },
    { "top_p", 0, 1, false, true, F(top_p) },
    { "min_p", 0, 1, false, true, F(min_p) },
    { "repeat_penalty", 0, 10, false, true, F(repeat_penalty) },
    { "presence_penalty", -2, 2, false, true, F(presence_penalty) },
    { "frequency_penalty", -2, 2, false, true, F(frequency_penalty) },
    { "typical_p", 0, 1, false, false, F(typical_p) },
    { "top_n_sigma", -1e6, 1e6, false, false, F(top_n_sigma) },
    { "xtc_probability", 0, 1, false, false, F(xtc_probability) },
    { "xtc_threshold", 0, 1, false, false, F(xtc_threshold) },
    { "dynatemp_range", 0, 100, false, false, F(dynatemp_range) },
    { "dynatemp_exponent", 0, 100, false, false, F(dynatemp_exponent) },
    { "repeat_last_n", -1, 1 << 20, true, false, F(repeat_last_n) },
    { "min_keep", 0, 1 << 20, true, false, F(min_keep) },
    { "mirostat", 0, 2, true, false, F(mirostat) },
    { "mirostat_tau", 0, 100, false, false, F(mirostat_tau) },
    { "mirostat_eta", 0, 10, false, false, F(mirostat_eta) },
    { "dry_multiplier", 0, 100, false, false, F(dry_multiplier) },
    { "dry_base", 0, 100, false, false, F(dry_base) },
    { "dry_allowed_length", 0, 1 << 20, true, false, F(dry_allowed_length) },
    { "dry_penalty_last_n", -1, 1 << 20, true, false, F(dry_penalty_last_n) },
};
#undef F

static int bad(srv_err *er, const char *field, const char *what)
{
    return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'%s' %s", field, what);
}

static int num_row_parse(const cJSON *root, const num_row *r, kvi_sampler_params *sp, int n_ctx, srv_err *er)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, r->name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return bad(er, r->name, "must be a number");
    const double x = v->valuedouble;
    if (!isfinite(x) || (r->integer && x != floor(x)))
        return bad(er, r->name, r->integer ? "must be an integer" : "must be finite");
    if (x < r->lo || x > r->hi)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value", "'%s' is %g, outside [%g, %g]",
                           r->name, x, r->lo, r->hi);
    char *dst = (char *)sp + r->off;
    if (r->integer) {
        int32_t i = (int32_t)x;
        if (i == -1) i = n_ctx > 0 ? n_ctx : 4096; /* the *_last_n fields: the whole context */
        memcpy(dst, &i, sizeof i);
    } else {
        float f = (float)x;
        memcpy(dst, &f, sizeof f);
    }
    return 0;
}

/* "samplers": an array of names or a string of one-letter codes. */
static int parse_samplers(const cJSON *root, kvi_sampler_params *sp, srv_err *er)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "samplers");
    if (!v || cJSON_IsNull(v)) return 0;
    int rc;
    if (cJSON_IsString(v)) {
        rc = kvi_sampler_order_parse(sp, NULL, 0, v->valuestring, NULL);
    } else if (cJSON_IsArray(v)) {
        const char *names[64];
        int32_t n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, v)
        {
            if (!cJSON_IsString(it)) return bad(er, "samplers", "must hold strings");
            if (n == 64) return bad(er, "samplers", "has more than 64 entries");
            names[n++] = it->valuestring;
        }
        rc = kvi_sampler_order_parse(sp, names, n, NULL, NULL);
    } else {
        return bad(er, "samplers", "must be an array of names or a string of letters");
    }
    return rc ? bad(er, "samplers", "has more than 16 known samplers") : 0;
}

static int parse_breakers(const cJSON *root, srv_dry_breakers *b, srv_err *er)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "dry_sequence_breakers");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return bad(er, "dry_sequence_breakers", "must be an array of strings");
    if (cJSON_GetArraySize(v) > SRV_DRY_BREAKERS_MAX)
        return bad(er, "dry_sequence_breakers", "has more than 16 strings");
    b->given = true;
    b->n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
    {
        if (!cJSON_IsString(it)) return bad(er, "dry_sequence_breakers", "must hold strings");
        snprintf(b->s[b->n], sizeof b->s[b->n], "%s", it->valuestring);
        b->v[b->n] = b->s[b->n];
        b->n++;
    }
    return 0;
}

int srv_sampling_fields(const cJSON *root, bool all, int n_ctx, kvi_sampler_params *sp, srv_dry_breakers *b,
                        srv_err *er)
{
    int rc;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if ((all || !rows[i].base) && (rc = num_row_parse(root, &rows[i], sp, n_ctx, er))) return rc;
    if (all) {
        double seed = (double)sp->seed;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "seed");
        if (v && !cJSON_IsNull(v)) {
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
                fabs(v->valuedouble) > 9007199254740992.0)
                return bad(er, "seed", "must be an integer");
            seed = v->valuedouble;
        }
        sp->seed = seed < 0 ? (uint64_t)(int64_t)seed : (uint64_t)seed;
    }
    if ((rc = parse_samplers(root, sp, er))) return rc;
    return parse_breakers(root, b, er);
}

int srv_parse_sampling(srv_server *srv, const cJSON *root, srv_params *p, srv_err *er)
{
    const int n_ctx = srv->e ? kvi_engine_n_ctx(srv->e) : srv->cfg.n_ctx;
    int rc = srv_sampling_fields(root, false, n_ctx, &p->sp, &p->dry, er);
    if (rc) return rc;
    /* llama-server's n_probs: the top token probabilities, as top_logprobs */
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "n_probs");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return bad(er, "n_probs", "must be an integer");
    if (v->valuedouble < 0 || v->valuedouble > KVI_LOGPROBS_MAX)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           "'n_probs' is %g, outside [0, %d]", v->valuedouble, KVI_LOGPROBS_MAX);
    if (v->valuedouble > 0) {
        p->logprobs = true;
        p->top_logprobs = (int32_t)v->valuedouble;
    }
    return 0;
}
