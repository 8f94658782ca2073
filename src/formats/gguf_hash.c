/*
 * gguf_hash.c — a hash naming a GGUF model: FNV-1a 64 over its metadata (each
 * key with its NUL, value type and raw bytes, in file order) and every tensor's
 * name (with NUL), type, four dimensions and byte size, and optionally the first
 * and last `sample` bytes of each tensor's data (gguf.h). Pipeline stages compare
 * it (sample 0); the KV cache's disk tier names its files by it (sample 256).
 */
#include "formats/gguf.h"

#include <string.h>

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

uint64_t gguf_model_hash(const gguf_ctx *g, size_t sample)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_kv_key(g, i);
        const void *raw;
        size_t len;
        gguf_vtype t;
        h = fnv(h, k, strlen(k) + 1);
        if (gguf_kv_raw(g, i, &t, &raw, &len) == 0) h = fnv(fnv(h, &t, sizeof t), raw, len);
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const uint64_t info[6] = { (uint64_t)t->type,  (uint64_t)t->ne[0], (uint64_t)t->ne[1],
                                   (uint64_t)t->ne[2], (uint64_t)t->ne[3], (uint64_t)t->nbytes };
        h = fnv(fnv(h, t->name, strlen(t->name) + 1), info, sizeof info);
        if (!sample || !t->data) continue;
        const size_t n = t->nbytes < sample ? t->nbytes : sample;
        h = fnv(fnv(h, t->data, n), (const uint8_t *)t->data + t->nbytes - n, n);
    }
    return h;
}
