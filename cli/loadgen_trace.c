/*
 * loadgen_trace.c — the Mooncake trace reader and its prompts (the format,
 * the scaling and the token generator are stated in loadgen_trace.h).
 *
 * Invariants: every field is checked before it is used (a number where one is
 * expected, lengths in [0, 2^24], hash ids in [0, 2^53]); a request's prompt
 * depends only on (seed, its hash ids, its index, block, its length), never
 * on the other requests or the order of reading.
 */
#include "cli/loadgen_trace.h"

#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LG_TRACE_LEN_MAX (1 << 24)
#define LG_TRACE_HASH_MAX 9007199254740992.0 /* 2^53: exact in a JSON number */

/* splitmix64 step: the block and request token streams */
static uint64_t trace_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A whole-number field in [lo, hi]; false when absent or out of range. */
static bool int_field(const cJSON *o, const char *name, double lo, double hi, double *out)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= lo && j->valuedouble <= hi) ||
        j->valuedouble != floor(j->valuedouble))
        return false;
    *out = j->valuedouble;
    return true;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* One line's request appended to t; 0, or -1 with err filled. */
/* The reader's state between lines. */
typedef struct trace_rd {
    double t_first, t_prev; /* timestamps of the first and the previous request */
    size_t req_cap, hash_cap;
} trace_rd;

static int add_line(lg_trace *t, const char *s, size_t len, int line, trace_rd *rd, char *err, size_t cap)
{
    cJSON *o = cJSON_ParseWithLength(s, len);
    double ts = 0, in = 0, out = 0;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "hash_ids");
    const char *bad = !cJSON_IsObject(o)                                          ? "not a JSON object"
                      : !int_field(o, "input_length", 0, LG_TRACE_LEN_MAX, &in)   ? "input_length"
                      : !int_field(o, "output_length", 0, LG_TRACE_LEN_MAX, &out) ? "output_length"
                      : !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "timestamp")) ? "timestamp"
                      : h && !cJSON_IsArray(h)                                            ? "hash_ids"
                                                                                          : NULL;
    if (!bad) {
        ts = cJSON_GetObjectItemCaseSensitive(o, "timestamp")->valuedouble;
        if (!isfinite(ts) || ts < 0) bad = "timestamp";
    }
    const size_t n_hash = h ? (size_t)cJSON_GetArraySize(h) : 0;
    if (!bad && n_hash > LG_TRACE_LEN_MAX) bad = "hash_ids";
    if (bad) {
        cJSON_Delete(o);
        snprintf(err, cap,
                 "line %d: %s is missing or out of range (want a JSON object with timestamp >= 0, "
                 "input_length and output_length in [0, 2^24], hash_ids a list)",
                 line, bad);
        return -1;
    }
    if (t->n == 0) rd->t_first = rd->t_prev = ts;
    if (ts < rd->t_prev) {
        cJSON_Delete(o);
        snprintf(err, cap, "line %d: timestamp %.17g is before the previous request's (%.17g)", line, ts,
                 rd->t_prev);
        return -1;
    }
    rd->t_prev = ts;
    if (!grow((void **)&t->req, &rd->req_cap, (size_t)t->n + 1, sizeof *t->req) ||
        !grow((void **)&t->hash, &rd->hash_cap, t->n_hash_all + n_hash, sizeof *t->hash)) {
        cJSON_Delete(o);
        snprintf(err, cap, "out of memory");
        return -1;
    }
    lg_trace_req *r = &t->req[t->n];
    r->hash_off = t->n_hash_all;
    r->n_hash = (int32_t)n_hash;
    const cJSON *e;
    cJSON_ArrayForEach(e, h)
    {
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble <= LG_TRACE_HASH_MAX) ||
            e->valuedouble != floor(e->valuedouble)) {
            cJSON_Delete(o);
            snprintf(err, cap, "line %d: hash_ids holds a value that is not an integer in [0, 2^53]", line);
            return -1;
        }
        t->hash[t->n_hash_all++] = (int64_t)e->valuedouble;
    }
    cJSON_Delete(o);
    /* ceil(in * block / 512), bounded by the blocks the hash ids name */
    int64_t np = ((int64_t)in * t->o.block + LG_TRACE_MOONCAKE_BLOCK - 1) / LG_TRACE_MOONCAKE_BLOCK;
    if (n_hash > 0 && np > (int64_t)n_hash * t->o.block) np = (int64_t)n_hash * t->o.block;
    if (np < 1) np = 1;
    if (np > LG_TRACE_LEN_MAX) np = LG_TRACE_LEN_MAX;
    r->n_prompt = (int32_t)np;
    r->n_gen = out < 1 ? 1 : (int32_t)out;
    if (t->o.gen_cap > 0 && r->n_gen > t->o.gen_cap) r->n_gen = t->o.gen_cap;
    r->arrival = (ts - rd->t_first) * t->o.time_scale;
    t->n++;
    return 0;
}

int lg_trace_load(const char *path, const lg_trace_opts *o, lg_trace *t, char *err, size_t cap)
{
    memset(t, 0, sizeof *t);
    t->o = *o;
    if (o->block < 1 || o->block > LG_TRACE_LEN_MAX || !(o->time_scale >= 0) || o->vocab < 4) {
        snprintf(err, cap, "bad trace options (block %d, time scale %g)", o->block, o->time_scale);
        return -1;
    }
    size_t len = 0;
    char *buf = cli_read_file(path, &len);
    if (!buf) {
        snprintf(err, cap, "cannot read the trace %s", path);
        return -1;
    }
    trace_rd rd = { 0 };
    int line = 0, rc = 0;
    for (size_t at = 0; at < len && rc == 0 && (o->max_requests <= 0 || t->n < o->max_requests);) {
        const char *nl = memchr(buf + at, '\n', len - at);
        const size_t end = nl ? (size_t)(nl - buf) : len;
        line++;
        size_t a = at;
        while (a < end && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r')) a++;
        if (a < end) rc = add_line(t, buf + a, end - a, line, &rd, err, cap);
        at = end + 1;
    }
    free(buf);
    if (rc == 0 && t->n == 0) {
        snprintf(err, cap, "the trace %s holds no request", path);
        rc = -1;
    }
    if (rc != 0) lg_trace_free(t);
    return rc;
}

void lg_trace_free(lg_trace *t)
{
    free(t->req);
    free(t->hash);
    t->req = NULL;
    t->hash = NULL;
    t->n = 0;
    t->n_hash_all = 0;
}

void lg_trace_prompt(const lg_trace *t, int i, int32_t *ids)
{
    const lg_trace_req *r = &t->req[i];
    const uint64_t range = (uint64_t)(t->o.vocab - 3);
    uint64_t st = 0;
    for (int32_t k = 0; k < r->n_prompt; k++) {
        const int32_t b = k / t->o.block;
        /* a hash id's block starts its own stream; past the hash ids, the request's */
        if (k % t->o.block == 0 && b < r->n_hash)
            st = t->o.seed ^ ((uint64_t)t->hash[r->hash_off + (size_t)b] * 0xD6E8FEB86659FD93ull);
        else if ((int64_t)k == (int64_t)r->n_hash * t->o.block)
            st = ~t->o.seed ^ ((uint64_t)i * 0xA0761D6478BD642Full);
        ids[k] = 3 + (int32_t)(trace_mix(&st) % range);
    }
}
