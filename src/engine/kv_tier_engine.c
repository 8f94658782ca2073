/*
 * kv_tier_engine.c — the engine's side of the prefix cache tiers (kv/kv_tier.h):
 * what a tiered block's bytes depend on (the layout id), and the tiers' creation.
 *
 * Model identity: gguf_model_hash with samples: the GGUF's metadata, every
 * tensor's name, type and shape, and the first and last 256 bytes of each
 * tensor's data — two files that differ only deep inside one tensor collide;
 * that is the price of not hashing gigabytes at start-up, stated in the README.
 * A model without a GGUF source (llama2.c, safetensors) gets no disk tier (its
 * identity would rest on hyper-parameters alone); its RAM tier lives and dies
 * with the engine, so it needs none.
 *
 * Layout id: the model identity, the pool's shape (layers, kv_dim, block size),
 * its K and V types, k_bytes, layer and block bytes, and a format version.
 */
#include "engine/engine_int.h"

#include "base/error.h"
#include "formats/gguf.h"
#include "kv/kv_tier.h"
#include "model/model.h"

#define TIER_SAMPLE 256 /* bytes hashed at each end of a tensor's data */

/* The model's identity, 0 when it has no GGUF source. */
static uint64_t model_identity(const kvi_model *m)
{
    if (!m->gguf) return 0;
    const uint64_t h = gguf_model_hash(m->gguf, TIER_SAMPLE);
    return h ? h : 1;
}

int engine_tier_create(const kvi_model *m, const kv_pool *p, const kvi_engine_params *ep, kv_tier **out,
                       kvi_error *err)
{
    *out = NULL;
    if (ep->kv_cache_ram == 0 && !ep->kv_cache_dir) return 0;
    kv_tier_layout x = { .model_id = model_identity(m),
                         .block_size = p->block_size,
                         .block_bytes = p->gblock_bytes };
    if (ep->kv_cache_dir && x.model_id == 0)
        return err_set(err, KVI_E_UNSUPPORTED,
                       "engine: the disk tier of the KV cache needs a GGUF model (its identity names the "
                       "files): leave --kv-cache-dir off");
    const uint64_t shape[10] = { 1,
                                 x.model_id,
                                 (uint64_t)p->n_layers,
                                 (uint64_t)p->kv_dim,
                                 (uint64_t)p->block_size,
                                 (uint64_t)p->type_k,
                                 (uint64_t)p->type_v,
                                 p->k_bytes,
                                 p->layer_bytes,
                                 p->gblock_bytes };
    x.layout_id = engine_fnv1a(0xcbf29ce484222325ull, shape, sizeof shape);
    return kv_tier_create(p, &x, ep->kv_cache_ram, ep->kv_cache_dir, ep->kv_cache_disk, out, err);
}
