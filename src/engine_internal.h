/*
 * engine_internal.h — what other library files (session.c) may see of an
 * engine and its sequences, without the struct layouts of engine.c.
 */
#ifndef KVI_ENGINE_INTERNAL_H
#define KVI_ENGINE_INTERNAL_H

#include "kv_cache.h"

kv_pool *engine_kv_pool(kvi_engine *e);
kv_table *engine_seq_table(kvi_seq *s);
kvi_engine *engine_seq_engine(const kvi_seq *s);
bool engine_prefix_cache_on(const kvi_engine *e);

#endif
