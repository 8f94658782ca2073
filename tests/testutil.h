/*
 * testutil.h — the small harness every test uses.
 *
 * CHECK(cond, fmt, ...) records a pass or a failure (with file:line and message)
 * and continues; test_main_end() prints "N passed, N failed" and returns the exit
 * status (0 only when nothing failed and at least one check ran).
 *
 * Also what several tests share: random data, bit casts and error bounds, JSON token
 * ids, sampler settings, stories260K with its engines and logits, KV sequences and
 * attention rows.
 */
#ifndef KVI_TESTUTIL_H
#define KVI_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "kvinfer.h"

extern int t_passed, t_failed;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (cond) {                                                         \
            t_passed++;                                                     \
        } else {                                                            \
            t_failed++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

int test_main_end(void);

/* Path under ../shared (KVI_SHARED_DIR); static buffer rotated over 8 calls. */
const char *shared_path(const char *rel);
/* Path under the build's test temp folder. */
const char *tmp_path(const char *name);

/* Whole file into a NUL-terminated malloc'd buffer; NULL on failure. */
char *read_file(const char *path, size_t *len);
int write_file(const char *path, const void *data, size_t len);
/* Copies the GGUF src to dst with metadata added: add(w, user) sets keys on the
 * writer (a gguf_writer *) after src's keys were copied, returns 0 on success. */
bool write_gguf_copy(const char *src, const char *dst, int (*add)(void *w, void *user), void *user);
/* Parsed JSON file (cJSON_Delete it), NULL on failure. */
cJSON *load_json(const char *path);

/* The standard output of a shell command (malloc'd, NUL-terminated); NULL when it
 * could not run or exited with a non-zero status. */
char *run_command(const char *cmd);
/* Whether node (node_bin; "" when configuring found none) and the npm package of
 * pkg_json are installed; when not, prints a SKIP line naming `packages` (the test
 * then exits 77). */
bool npm_ready(const char *node_bin, const char *pkg_json, const char *packages);
/* Runs `KVI_BIN args` through /bin/sh with stdin from /dev/null; captures stdout
 * and stderr (malloc'd, may be NULL) and returns the exit status (or 128+signal). */
int run_kvinfer(const char *args, char **out, char **errout);

/* Deterministic random numbers for tests (xorshift). */
uint64_t trand_u64(uint64_t *state);
float trand_normal(uint64_t *state);  /* N(0, 1) */
float trand_uniform(uint64_t *state); /* [0, 1) */
/* x[0..n) = N(0, 1) draws, in order. */
void trand_fill_normal(float *x, int64_t n, uint64_t *state);
/* n N(0, 1) draws (trand_fill_normal) quantised to the kvinfer type `type` into dst. */
void trand_quant_row(int type, void *dst, int64_t n, uint64_t *state);
/* [n_out][n_in] weights of the kvinfer type `type` (a kvi_type), quantised from
 * normal floats with a spread of row scales and a few large inputs, so block
 * scales differ and levels reach the extremes (never all zero); 64-byte aligned,
 * free() it. */
uint8_t *trand_weights(int type, int64_t n_out, int64_t n_in, uint64_t *state);
/* [n_out][n_in] weights of the kvinfer type `type`, row by row quantised from
 * N(0, 1) floats (n_in draws a row, in order); malloc'd, free() it. */
uint8_t *trand_weights_normal(int type, int64_t n_out, int64_t n_in, uint64_t *state);

/* The float whose bit pattern is u. */
float f32_of_bits(uint32_t u);
/* The bit pattern of f. */
uint32_t bits_of_f32(float f);
/* sum over i of |x[i] * w[i]| in double: the magnitude a dot product's error bound scales with. */
double abs_dot(const float *x, const float *w, int64_t n);
/* max |a[i] - b[i]| over n floats (differences in double). */
double max_abs_diff(const float *a, const float *b, size_t n);
/* The ints of a JSON array into out[0..cap); the number of items the array holds
 * (may exceed cap: those past cap are not stored). */
int32_t json_token_ids(const cJSON *arr, int32_t *out, int32_t cap);

/* Sampler parameters: the defaults with temp, top_k, top_p, min_p and seed set,
 * repeat penalty off. */
kvi_sampler_params sampler_params(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed);

/* stories260K (models/stories260K.gguf under ../shared) with the default load
 * parameters; CHECKs the load; *n_vocab (when not NULL) gets its vocabulary size.
 * NULL on failure. */
kvi_model *load_stories260k(int *n_vocab);
/* Engine parameters: the defaults with K and V of type kv, n_threads, n_ctx and
 * (when > 0) n_seq_max = n_seq set. */
kvi_engine_params engine_params(kvi_type kv, int n_threads, int n_seq, int n_ctx);
/* kvi_engine_create(m, p), CHECKed; NULL on failure. */
kvi_engine *engine_create_checked(kvi_model *m, const kvi_engine_params *p);
/* The logits [n][n_vocab] (malloc'd) of toks[0..n) at positions 0..n-1 on a new
 * sequence of e (freed after): one step of all n rows (the engine may chunk it),
 * or with decode one row a step; CHECKs every step. */
float *seq_logits(kvi_engine *e, const int32_t *toks, int n, bool decode);
/* Whether grammar g accepts s exactly: all its bytes taken, complete at the end
 * (the matcher of sampling/grammar_int.h run byte by byte). */
bool grammar_match_exact(const struct kvi_grammar *g, const char *s);
/* ../shared/golden/arch/NAME.gguf (default load parameters) and NAME.logits.json,
 * each CHECKed; false (nothing kept) when either is missing. */
bool load_arch_golden(const char *name, kvi_model **m, cJSON **j);
/* ||lg - ref|| / ||ref|| over rows [0, n) of a golden's "logits" rows of nv values
 * (lg [n][nv]); CHECKs each row's length. */
double golden_rel_err(const char *name, const float *lg, const cJSON *ref, int n, int nv);
/* Two sequences decoded together on an fp32-KV engine (2 threads), the second 5
 * tokens behind on the same tokens: the first's logits [n][n_vocab] (malloc'd),
 * CHECKing every step; NULL on failure. */
float *pair_logits(kvi_model *m, const int32_t *toks, int n);
/* One step of toks[0..n - from) at positions from..n-1 of s, logits only for the
 * last row, copied to last[n_vocab] when last is not NULL; CHECKs the step; its status. */
int step_rows(kvi_engine *e, kvi_seq *s, const int32_t *toks, int from, int n, float *last);

/* KV cache and attention (kv/kv_cache.h, attention/attention.h). */
struct kv_pool;
struct kv_table;
struct tpool;
struct attn_scratch;
struct attn_args;
/* Zeroes the tables t[0..n) and reserves lens[s] positions of kv for t[s], CHECKed. */
void kv_reserve_seqs(struct kv_pool *kv, struct kv_table *t, const int *lens, int n);
/* One batch of every position of the sequences t[0..n) (lens[s] each), in order:
 * row r reads tabs[r] at pos[r]; the number of rows. */
int batch_all_positions(const struct kv_table *t, const int *lens, int n, const struct kv_table **tabs,
                        int32_t *pos);
/* Rows [r0, r0 + n) of the batch a, computed alone by attention_rows into
 * out[n][n_heads * head_dim]. */
void attn_rows_part(struct tpool *pool, struct attn_scratch *sc, const struct attn_args *a, int r0, int n,
                    float *out);

#endif
