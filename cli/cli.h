/*
 * cli.h — the `kvinfer` command-line tool: one cmd_*.c per command, each a
 * function taking the arguments after the command name (argv[0] is the command
 * name). The CLI uses only the public API (include/kvinfer.h) plus cJSON.
 *
 * Conventions shared by every command:
 *  - errors: one line "kvinfer: error: ..." on stderr via cli_error(), return 1;
 *  - --help / -h: the command's help on stdout, return 0;
 *  - --json: stdout holds exactly one JSON document and nothing else (progress
 *    and summaries go to stderr);
 *  - the flags several commands share (model, threads, context, KV cache) are
 *    parsed by cli_opt_common (cli/cli_opts.h), each command naming those it takes.
 */
#ifndef KVI_CLI_H
#define KVI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvinfer.h"

int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_toy(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_loadgen(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_sampler(int argc, char **argv);
int cmd_embed(int argc, char **argv);  /* cmd_embed.c */
int cmd_rerank(int argc, char **argv); /* cmd_embed.c */

/* ---- helpers (cli/cli_util.c) ---- */

/* Prints "kvinfer: error: <message>\n" to stderr. Always returns 1 (the exit status). */
int cli_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* Strict number parsing of a whole string within [min, max]; false on any junk. */
bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
bool cli_parse_f32(const char *s, float *out);
bool cli_parse_u64(const char *s, uint64_t *out);
/* b bytes as "512 B", "1.50 KiB" ... "2.00 GiB" (binary units, two decimals). */
void cli_human_bytes(char *buf, size_t cap, double b);
/* "4096", "512MiB", "2GiB", "1.5G", "64k": bytes. */
bool cli_parse_size(const char *s, size_t *out);
/* "1,2,3" (also spaces or '[1, 2, 3]') into a malloc'd array; false on junk. */
bool cli_parse_ids(const char *s, int32_t **ids, int32_t *n);
/* Whole file into a malloc'd NUL-terminated buffer; NULL (and errno) on failure. */
char *cli_read_file(const char *path, size_t *len);
/* The text of a vocabulary token, special tokens included (malloc'd), NULL when
 * id < 0 or it is too long: bos_token / eos_token for chat templates. */
char *cli_token_text(const kvi_model *m, int32_t id);
/* Value of a flag that takes an argument: returns argv[*i + 1] and advances *i,
 * or prints "flag X needs a value" and returns NULL. */
const char *cli_flag_value(int argc, char **argv, int *i);
/* The integer value v of flag, within [lo, hi]: 1, or -1 with "F: 'V' is not an
 * integer in [lo, hi]" printed. v NULL (a missing value that cli_flag_value has
 * reported) gives -1 alone. */
int cli_flag_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out);
int cli_flag_i32(const char *flag, const char *v, int32_t lo, int32_t hi, int32_t *out);
/* --chat-template-content-format's value v (auto, string, openai) into *out (a
 * kvi_content_format): 1, or -1 with the error printed. */
int cli_flag_content_format(const char *v, int *out);
#define CLI_CONTENT_FORMAT_HELP                                                                \
    "  --chat-template-content-format F  auto (default): message content as the template\n"    \
    "                          expects it (a list of parts when it loops over content, else\n" \
    "                          the text parts joined with newlines); string; openai (lists)\n"

/* Prints root unformatted and a newline on stdout, then frees root. 0, or 1 with
 * oom_msg printed as the error when it cannot be printed (out of memory). */
struct cJSON;
int cli_print_json(struct cJSON *root, const char *oom_msg);

/* ---- more helpers (cli/cli_util.c), shared by run / logits / tokenize ---- */

/* "../shared/models/stories260K.gguf" when that file exists relative to the
 * current directory, else NULL. */
const char *cli_default_model(void);
/* Tokenizes text into a malloc'd array (*ids, *n). Returns 0, or prints an error
 * and returns 1. */
int cli_tokenize(const kvi_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t **ids, int32_t *n);
/* Text of ids as a malloc'd NUL-terminated string (length in *len when non-NULL);
 * NULL (error printed) on failure. */
char *cli_detokenize(const kvi_model *m, const int32_t *ids, int32_t n, bool render_special,
                     bool remove_leading_space, size_t *len);
/* Checks every id is in [0, n_vocab); prints an error naming the first bad one
 * and returns 1, else 0. */
int cli_check_ids(const kvi_model *m, const int32_t *ids, int32_t n);
/* Prints "context_length_exceeded: the prompt has N tokens but the context holds
 * C (-c sets the context size)"; returns 1. */
int cli_ctx_exceeded(int32_t n_prompt, int n_ctx);
/* Number of online CPU cores (at least 1): what n_threads 0 means. */
int cli_n_cores(void);
/* Parses "f32", "f16", ... into a KV cache element type; prints an error naming
 * the flag and returns false when unknown. */
bool cli_parse_kv_type(const char *flag, const char *s, kvi_type *out);

/* kvi_engine_params_default, then the environment's KVINFER_FWD_CHUNK=N (rows per
 * forward chunk; the library reads no environment). */
void cli_engine_params_default(kvi_engine_params *p);
/* The environment's CPU-path overrides, applied once in main() before any command:
 * KVINFER_ISA=avx2|scalar, KVINFER_AMX=0, KVINFER_AMX_F16=1 (kvi_cpu_configure).
 * KVINFER_REPACK=0 is read by cli_load_model. 0, or 1 with the error printed. */
int cli_apply_env(void);

/* Loads a model with weights from path, or from cli_default_model() when path is
 * NULL (saying so on stderr). NULL with one error line printed on failure
 * (unreadable/corrupt file: the library's message; vocabulary-only file). */
kvi_model *cli_load_model(const char *path, bool use_mmap, const char *tokenizer_path);
/* The prompt ids from exactly one of: text (-p), file (-f; one trailing newline
 * dropped) or ids_str (--tokens "1,2,3": used as given, no BOS added, range
 * checked). Text is tokenized with BOS as the model says. No source: empty text.
 * An empty result is an error (a model without BOS needs a prompt). Returns 0 with
 * a malloc'd array, or 1 with the error printed. */
int cli_prompt_ids(const kvi_model *m, const char *text, const char *file, const char *ids_str,
                   bool parse_special, int32_t **ids, int32_t *n);

/* ---- pipeline over MPI (cli/cli_pipe.c) ---- */

/* Called first in main(): takes --pp-layers and --mem-limit out of argv and, when the launcher
 * started several ranks, joins the MPI group (a build without MPI refuses). 0, or 1
 * with the error printed. */
int cli_pipe_begin(int *argc, char ***argv);
/* Whether this process is one rank of several; whether it is a rank > 0. */
bool cli_pipe_active(void);
bool cli_pipe_worker(void);
/* What failed the pipeline (a rank that stopped answering), or NULL. */
const char *cli_pipe_failure(void);
/* What this process loads of the model at path: under mpirun its stage's layers
 * (lp->stage_first/stage_end, from the plan of the file's header); with
 * --mem-limit, a refusal when its weights exceed the bound (a single process: how
 * many ranks would fit). 0, or 1 with the message in msg. */
int cli_pipe_load_params(const char *path, kvi_load_params *lp, char *msg, size_t cap);
/* A rank > 0: serves its pipeline stage for rank 0 (argv: the command's). */
int cli_pipe_worker_main(int argc, char **argv);
/* Rank 0: makes e stage 0 of the pipeline (no-op for a single process). 0, or 1
 * with the error printed. */
int cli_pipe_attach(kvi_engine *e, const kvi_engine_params *ep);
/* Rank 0: ends the other ranks and leaves the group (no-op for a single process). */
void cli_pipe_end(void);
/* Rank 0: one line per stage on stderr (compute, transport and waiting, bytes
 * sent per row); nothing for a single process. */
void cli_pipe_summary(const kvi_engine *e);
/* The "pipeline" object of --json output ({"stages": [...]}, with each stage's
 * costs), or NULL for a single process. */
struct cJSON *cli_pipe_json(const kvi_engine *e);
/* Rank 0: each stage's figures as Prometheus exposition lines (malloc'd), for the
 * server's /metrics; NULL for a single process or when the pipeline failed (the
 * failure is reported by cli_pipe_failure). It asks every rank (MPI): call it
 * where no step runs beside it (the scheduler's after_step, or before start). */
char *cli_pipe_metrics(const kvi_engine *e);

#endif
