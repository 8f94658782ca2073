/*
 * pipeline_nompi.c — the process group in a build without MPI: there is none.
 * pipe_init refuses, so a launcher's N ranks never run as N independent copies.
 */
#include "pipeline/pipeline.h"

#include "base/error.h"

struct pipe_world {
    int unused;
};

bool pipe_have_mpi(void) { return false; }

int pipe_init(int *argc, char ***argv, pipe_world **out, kvi_error *err)
{
    *out = NULL;
    return err_set(err, KVI_E_UNSUPPORTED,
                   "started by mpirun with several ranks, but this kvinfer was built without MPI "
                   "(install libopenmpi-dev and rebuild with -DKVI_MPI=ON)");
}
int pipe_rank(const pipe_world *w) { return 0; }
int pipe_size(const pipe_world *w) { return 1; }
int pipe_root_start(pipe_world *w, kvi_engine *e, const kvi_engine_params *ep, const pipe_plan *plan,
                    kvi_error *err)
{
    return err_set(err, KVI_E_UNSUPPORTED, "pipeline: built without MPI");
}
int pipe_worker_run(pipe_world *w, kvi_model *m, const pipe_plan *plan, int n_threads, const char *load_err,
                    kvi_error *err)
{
    return err_set(err, KVI_E_UNSUPPORTED, "pipeline: built without MPI");
}
size_t pipe_kv_block_bytes(const pipe_world *w, int rank) { return 0; }
void pipe_root_end(pipe_world *w) {}
void pipe_finish(pipe_world *w) {}
void pipe_set_timeout(pipe_world *w, double seconds) {}
const char *pipe_failure(const pipe_world *w) { return NULL; }
void pipe_set_test_stall(pipe_world *w, long n_ops) {}
int pipe_stage_stats(pipe_world *w, const kvi_engine *e, engine_pipe_stats *out, kvi_error *err)
{
    return err_set(err, KVI_E_UNSUPPORTED, "pipeline: built without MPI");
}
