/*
 * loadgen_trace.h — `kvinfer loadgen --trace FILE`: the reader of a request
 * trace in Mooncake's public format and the prompts it stands for
 * (cli/loadgen_trace.c).
 *
 * The file holds one JSON object per line (blank lines skipped):
 *   {"timestamp": ms, "input_length": L, "output_length": G, "hash_ids": [h0, h1, ...]}
 * where hash id h_b names the b-th block of 512 prompt tokens: two requests
 * whose lists start alike share that prefix of their prompts. Scaled to
 * `block` tokens per hash id, request i's prompt has
 *   n_prompt = ceil(L * block / 512), at most n_hash * block when n_hash > 0,
 * and its token k is token k % block of hash id h_{k / block}'s block, drawn
 * from a generator seeded by (seed, h) alone, in [3, vocab): so prefix sharing
 * is exactly the trace's. Tokens past the hash ids (a request without any) are
 * drawn per request. Arrivals are (timestamp - first timestamp) * time_scale
 * ms; timestamps must not decrease.
 *
 *   lg_trace.req   [n]        requests in file order
 *   lg_trace.hash  [n_hash_all] every request's hash ids, request i's from req[i].hash_off
 */
#ifndef KVI_CLI_LOADGEN_TRACE_H
#define KVI_CLI_LOADGEN_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LG_TRACE_MOONCAKE_BLOCK 512 /* tokens per hash id in the published traces */

typedef struct lg_trace_opts {
    int block;         /* tokens per hash id here */
    double time_scale; /* arrival = (timestamp - first) * time_scale */
    int max_requests;  /* lines read at most (0: all) */
    int gen_cap;       /* output_length capped at this (0: as in the trace) */
    int vocab;         /* token ids in [3, vocab) */
    uint64_t seed;
} lg_trace_opts;

typedef struct lg_trace_req {
    double arrival;   /* ms after the first request */
    int32_t n_prompt; /* prompt tokens (scaled) */
    int32_t n_gen;    /* max_tokens, >= 1 */
    size_t hash_off;  /* its hash ids: lg_trace.hash[hash_off .. hash_off + n_hash) */
    int32_t n_hash;
} lg_trace_req;

typedef struct lg_trace {
    lg_trace_opts o;
    lg_trace_req *req; /* [n] */
    int n;
    int64_t *hash; /* [n_hash_all] */
    size_t n_hash_all;
} lg_trace;

/* Reads the trace at path: 0, or -1 with err filled (the file and line named)
 * for an unreadable file, a malformed line, a missing or out-of-range field, a
 * decreasing timestamp or a file without requests. */
int lg_trace_load(const char *path, const lg_trace_opts *o, lg_trace *t, char *err, size_t cap);
void lg_trace_free(lg_trace *t);
/* Request i's prompt ids into ids[req[i].n_prompt]. */
void lg_trace_prompt(const lg_trace *t, int i, int32_t *ids);

#endif
