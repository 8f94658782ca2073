/*
 * pipeline.h — pipeline-parallel inference over processes: the layer plan
 * (pipeline_plan.c) and the MPI transport that binds engine_pipe.h to it
 * (pipeline_mpi.c; pipeline_nompi.c in a build without MPI).
 *
 * Rank 0 is the root: it loads the model, tokenizes, samples and decides, as a
 * single process does, and runs the first stage. Every other rank runs
 * pipe_worker_run: it applies the root's ops to an identical engine that runs
 * only its own layers. Nothing here reads the environment or prints.
 */
#ifndef KVI_PIPELINE_H
#define KVI_PIPELINE_H

#include "engine/engine_pipe.h"
#include "kvinfer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PIPE_MAX_STAGES 64

typedef struct pipe_stage {
    int l0, l1;          /* layers [l0, l1), at least one */
    size_t weight_bytes; /* its layers' tensors, + the embedding (stage 0), + the output
                            norm and head (the last stage) */
} pipe_stage;

typedef struct pipe_plan {
    int n;                          /* stages, 1..PIPE_MAX_STAGES */
    pipe_stage st[PIPE_MAX_STAGES]; /* [n] contiguous, st[0].l0 == 0, st[n-1].l1 == n_layers */
} pipe_plan;

/* The plan of n stages for m: from spec ("0-7,8-15": one inclusive range per
 * stage, contiguous, covering every layer) when not NULL, else the contiguous
 * split whose largest stage (by weight bytes) is smallest. 0, or KVI_E_INVALID
 * (a bad spec, more stages than layers) / KVI_E_UNSUPPORTED (a model not read
 * from a GGUF file). */
int pipe_plan_make(const kvi_model *m, int n, const char *spec, pipe_plan *out, kvi_error *err);
/* The same plan from the GGUF file at path, before loading it: only its header
 * is read (a rank learns its layers, then loads only them). */
int pipe_plan_file(const char *path, int n, const char *spec, pipe_plan *out, kvi_error *err);
/* The balanced plan of the fewest stages whose every stage's weight_bytes is at
 * most limit, and the file's tensor bytes in *total; KVI_E_UNSUPPORTED (with a
 * message) when no split fits. */
int pipe_plan_fewest(const char *path, size_t limit, pipe_plan *out, size_t *total, kvi_error *err);
/* A hash of the model's metadata and tensor table (names, types, shapes, sizes):
 * two ranks with different files differ. 0 for a model not read from GGUF. */
uint64_t pipe_model_hash(const kvi_model *m);
/* The plan as int32 [1 + 2 n]: n, then l0, l1 per stage (the handshake). */
size_t pipe_plan_encode(const pipe_plan *p, int32_t *out, size_t cap);

/* ---- the process group (MPI) ---- */

typedef struct pipe_world pipe_world;

/* Whether this build has MPI. */
bool pipe_have_mpi(void);
/* Initialises MPI (errors returned, never fatal) and the group: *out, or an
 * error (KVI_E_UNSUPPORTED in a build without MPI). Called only when the launcher
 * started more than one rank. */
int pipe_init(int *argc, char ***argv, pipe_world **out, kvi_error *err);
int pipe_rank(const pipe_world *w);
int pipe_size(const pipe_world *w);
/* The root, once its engine e exists (no sequence yet): sends the handshake
 * (model hash, plan, engine parameters) and collects every rank's answer; on
 * success attaches e as stage 0. An error names the first rank that refused.
 * Every rank, once attached, gives back the pages of the tensors of the other
 * stages (model_release_layers): it holds its own layers' weights only. */
int pipe_root_start(pipe_world *w, kvi_engine *e, const kvi_engine_params *ep, const pipe_plan *plan,
                    kvi_error *err);
/* A rank > 0: waits for the root's handshake (or its end), checks the model hash
 * and plan (m may be NULL when its load failed: it refuses with load_err), creates
 * its engine with the root's parameters and n_threads, and applies the root's ops
 * until the end. 0 after a clean end. */
int pipe_worker_run(pipe_world *w, kvi_model *m, const pipe_plan *plan, int n_threads, const char *load_err,
                    kvi_error *err);
/* The root, after pipe_root_start: bytes of one KV block in rank's pool (its
 * layers only; every rank has the same block ids, so a rank holds blocks in use
 * times this). */
size_t pipe_kv_block_bytes(const pipe_world *w, int rank);
/* The root, after pipe_root_start: every stage's engine_pipe_stats (out[rank],
 * [pipe_size] entries; the root's from e). 0, or the error. */
int pipe_stage_stats(pipe_world *w, const kvi_engine *e, engine_pipe_stats *out, kvi_error *err);
/* The root: tells every other rank to end (once; later calls do nothing). */
void pipe_root_end(pipe_world *w);
/* MPI_Finalize and free (a failed world skips MPI_Finalize: a stuck rank would
 * hold it; the process should then exit, non-zero, and the launcher ends the rest). */
void pipe_finish(pipe_world *w);
/* The root's bound on each wait for another rank (the handshake, every op, the
 * activations and the logits), in seconds; <= 0: none (the default). A wait past
 * it fails with KVI_E_TIMEOUT and fails the world (pipe_failure). */
void pipe_set_timeout(pipe_world *w, double seconds);
/* What failed the world (a rank that did not answer in time), or NULL. */
const char *pipe_failure(const pipe_world *w);
/* Fault injection for tests: a rank > 0 stops answering (blocks until killed)
 * after applying n_ops ops (the handshake counts as one); 0: never. */
void pipe_set_test_stall(pipe_world *w, long n_ops);

#endif
