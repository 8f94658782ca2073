/*
 * fuzz_gguf.c — a GGUF image from memory: gguf_open_mem and every metadata getter
 * over every key and tensor, then the full model load (hyper-parameters, tensor
 * binding, tokenizer, validation) from the same bytes, as kvi_model_load reads a
 * file. The image is copied into a 64-byte aligned buffer, as the loader's own
 * reads are.
 */
#include "fuzz_util.h"

#include "kvinfer.h"
#include "formats/gguf.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

static void walk_metadata(const gguf_ctx *g)
{
    kvi_error err = { 0 };
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        int64_t iv;
        double dv;
        bool bv;
        size_t len;
        gguf_vtype elem;
        uint64_t n;
        (void)gguf_get_int(g, key, &iv, &err);
        (void)gguf_get_float(g, key, &dv, &err);
        (void)gguf_get_bool(g, key, &bv, &err);
        (void)gguf_get_str_n(g, key, &len);
        if (gguf_get_arr_info(g, key, &elem, &n, &err) == 0 && n > 0) {
            (void)gguf_get_arr_str(g, key, 0, &len);
            (void)gguf_get_arr_str(g, key, n - 1, &len);
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) (void)gguf_find_tensor(g, gguf_tensor_at(g, i)->name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *buf = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    kvi_error err = { 0 };
    gguf_ctx *g = NULL;
    if (gguf_open_mem(buf, size, &g, &err) == 0) {
        walk_metadata(g);
        gguf_close(g);
    }
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    kvi_model *m = calloc(1, sizeof *m);
    if (m) {
        kvi_model_info info;
        if (model_load_gguf_mem(m, buf, size, &lp, &err) == 0) kvi_model_get_info(m, &info);
        kvi_model_free(m);
    }
    free(buf);
    return 0;
}
