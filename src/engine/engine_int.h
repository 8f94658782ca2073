/*
 * engine_int.h — what other library files (session.c) may see of an
 * engine and its sequences, without the struct layouts of engine.c.
 */
#ifndef KVI_ENGINE_INTERNAL_H
#define KVI_ENGINE_INTERNAL_H

#include "kvinfer.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "base/threadpool.h"

kv_pool *engine_kv_pool(kvi_engine *e);
kv_table *engine_seq_table(kvi_seq *s);
kvi_engine *engine_seq_engine(const kvi_seq *s);
bool engine_prefix_cache_on(const kvi_engine *e);
/* [n_ctx] attention each position of s has received so far (policy heavy), or
 * NULL: for tests and debugging. */
const float *engine_seq_recv(const kvi_seq *s);

/* p (NULL: the defaults) as a kernel configuration (cpu_config.c); 0, or
 * KVI_E_INVALID for an unknown isa. */
int engine_cpu_cfg(const kvi_cpu_params *p, kern_cfg *out, kvi_error *err);

#endif
