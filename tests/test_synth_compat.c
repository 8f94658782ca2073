/*
 * test_synth_compat.c — what `kvinfer synth` writes has the layout llama.cpp
 * writes. ../shared/golden/quant/qtest-TYPE.gguf were written by llama.cpp's own
 * tools for a model of the `qtest` shape; synth's file of the same shape and type
 * must carry the same architecture keys with the same value types and values
 * (general.name aside), the same tensors with the same dims and types, and the
 * same alignment — the metadata llama.cpp's loader reads.
 */
#include "testutil.h"

#include "formats/gguf.h"
#include "kvinfer.h"

#include <string.h>

static void compare(const char *type)
{
    char ref[256], out[256], cmd[1024];
    snprintf(ref, sizeof ref, "golden/quant/qtest-%s.gguf", type);
    snprintf(out, sizeof out, "synth_compat_%s.gguf", type);
    const char *outp = tmp_path(out);
    snprintf(cmd, sizeof cmd, "synth --preset qtest --type %s --vocab-from '%s' -o '%s'", type,
             shared_path("models/stories260K.gguf"), outp);
    int rc = run_kvinfer(cmd, NULL, NULL);
    CHECK(rc == 0, "%s: synth exit %d", type, rc);
    if (rc) return;
    gguf_ctx *a = NULL, *b = NULL;
    kvi_error err = { 0 };
    CHECK(gguf_open(shared_path(ref), false, &a, &err) == 0, "%s: %s", ref, err.msg);
    CHECK(gguf_open(outp, false, &b, &err) == 0, "%s: %s", outp, err.msg);
    if (!a || !b) goto done;
    CHECK(gguf_version(a) == gguf_version(b) && gguf_alignment(a) == gguf_alignment(b),
          "%s: version %u/%u alignment %zu/%zu", type, gguf_version(a), gguf_version(b), gguf_alignment(a),
          gguf_alignment(b));
    int n_keys = 0;
    for (int64_t i = 0; i < gguf_n_kv(a); i++) {
        const char *k = gguf_kv_key(a, i);
        if (strncmp(k, "tokenizer.", 10) == 0 || strcmp(k, "general.name") == 0) continue;
        n_keys++;
        int64_t j = gguf_find_key(b, k);
        CHECK(j >= 0, "%s: synth lacks key %s", type, k);
        if (j < 0) continue;
        CHECK(gguf_kv_type(a, i) == gguf_kv_type(b, j), "%s: key %s has value type %d, llama.cpp's %d", type,
              k, gguf_kv_type(b, j), gguf_kv_type(a, i));
        if (gguf_kv_type(a, i) == GGUF_T_STRING) {
            CHECK(strcmp(gguf_get_str(a, k), gguf_get_str(b, k)) == 0, "%s: %s = %s, llama.cpp %s", type, k,
                  gguf_get_str(b, k), gguf_get_str(a, k));
        } else if (gguf_kv_type(a, i) == GGUF_T_FLOAT32) {
            double x, y;
            gguf_get_float(a, k, &x, NULL);
            gguf_get_float(b, k, &y, NULL);
            CHECK(x == y, "%s: %s = %g, llama.cpp %g", type, k, y, x);
        } else {
            int64_t x, y;
            gguf_get_int(a, k, &x, NULL);
            gguf_get_int(b, k, &y, NULL);
            CHECK(x == y, "%s: %s = %lld, llama.cpp %lld", type, k, (long long)y, (long long)x);
        }
    }
    CHECK(n_keys >= 12, "%s: only %d architecture keys compared", type, n_keys);
    CHECK(gguf_n_tensors(a) == gguf_n_tensors(b), "%s: %lld tensors, llama.cpp %lld", type,
          (long long)gguf_n_tensors(b), (long long)gguf_n_tensors(a));
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i);
        const gguf_tensor *tb = gguf_find_tensor(b, ta->name);
        CHECK(tb != NULL, "%s: synth lacks tensor %s", type, ta->name);
        if (!tb) continue;
        bool same = ta->n_dims == tb->n_dims && ta->type == tb->type;
        for (uint32_t d = 0; same && d < ta->n_dims; d++) same = ta->ne[d] == tb->ne[d];
        CHECK(same, "%s: tensor %s differs in dims or type (%s vs llama.cpp %s)", type, ta->name,
              kvi_type_name(tb->type), kvi_type_name(ta->type));
    }
done:
    gguf_close(a);
    gguf_close(b);
    remove(outp);
}

int main(void)
{
    const char *types[] = { "f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",
                            "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "mxfp4" };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) compare(types[i]);
    return test_main_end();
}
