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

struct kvi_batch {
    int32_t cap, n;
    kvi_seq **seq;  /* [cap] */
    int32_t *token; /* [cap] */
    int32_t *pos;   /* [cap] */
    bool *want;     /* [cap] */
};

kv_pool *engine_kv_pool(kvi_engine *e);
/* The engine's worker threads (embed.c runs its passes on them). */
tpool *engine_pool(kvi_engine *e);
/* Pipeline stages (engine_pipe.h): the sequence in slot (NULL: none), a
 * sequence's slot, the root's tables hash the next step must match, and the op
 * a root sends to the other stages (0 when e is no root or sends none now). */
kvi_seq *engine_seq_at(kvi_engine *e, int32_t slot);
int32_t engine_seq_slot(const kvi_seq *s);
void engine_pipe_expect(kvi_engine *e, uint64_t tables_hash);
int engine_pipe_send(kvi_engine *e, const int32_t *msg, size_t n);
/* FNV-1a of n bytes, continuing from h */
uint64_t engine_fnv1a(uint64_t h, const void *data, size_t n);
kv_table *engine_seq_table(kvi_seq *s);
kvi_engine *engine_seq_engine(const kvi_seq *s);
bool engine_prefix_cache_on(const kvi_engine *e);
/* [n_ctx] attention each position of s has received so far (policy heavy), or
 * NULL: for tests and debugging. */
const float *engine_seq_recv(const kvi_seq *s);

/* The prefix cache tiers ep asks for on pool p of model m (kv_tier_engine.c);
 * *out NULL when off. 0, or an error. */
struct kv_tier;
int engine_tier_create(const kvi_model *m, const kv_pool *p, const kvi_engine_params *ep,
                       struct kv_tier **out, kvi_error *err);

/* p (NULL: the defaults) as a kernel configuration (cpu_config.c); 0, or
 * KVI_E_INVALID for an unknown isa. */
int engine_cpu_cfg(const kvi_cpu_params *p, kern_cfg *out, kvi_error *err);

#endif
