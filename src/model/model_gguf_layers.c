/*
 * model_gguf_layers.c — hyper-parameters a GGUF may hold per layer (gemma4's
 * feed_forward_length and attention.head_count_kv): an integer, or an int32 array
 * of one value per layer.
 *
 * Invariant: an array is accepted only with exactly n_layers elements, each in
 * [lo, hi] (model_gguf_int_max: in [0, hi], its largest >= lo); the model-wide value read from it is the largest (what the scratch and
 * the widest layer need), the per-layer values go into the layers.
 */
#include "model/arch.h"

#include "base/error.h"

#include <stdlib.h>

int model_gguf_layer_ints(const gguf_ctx *g, const char *arch, const char *key, int n_layers, int64_t lo,
                          int64_t hi, int32_t *out, bool *is_array, kvi_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    gguf_vtype et;
    uint64_t n = 0;
    *is_array = false;
    if (gguf_find_key(g, full) < 0) return -1;
    if (gguf_get_arr_info(g, full, &et, &n, NULL) != 0) return -1; /* a plain integer */
    if (n != (uint64_t)n_layers || gguf_get_arr_i32(g, full, out, n, err) != 0)
        return err_set(err, KVI_E_FORMAT, "gguf: %s must be an integer or %d integers (one per layer)", full,
                       n_layers);
    for (int l = 0; l < n_layers; l++)
        if (out[l] < lo || out[l] > hi)
            return err_set(err, KVI_E_FORMAT, "gguf: %s[%d] = %d out of range [%lld, %lld]", full, l,
                           (int)out[l], (long long)lo, (long long)hi);
    *is_array = true;
    return 0;
}

int model_gguf_int_max(const gguf_ctx *g, const char *arch, const char *key, bool required, int64_t def,
                       int64_t lo, int64_t hi, int n_layers, int *out, kvi_error *err)
{
    bool arr = false;
    int32_t *v = n_layers > 0 ? malloc((size_t)n_layers * sizeof *v) : NULL; /* [n_layers] */
    /* an array's entries may be 0 (hybrids: a layer without attention or FFN); its largest must be >= lo */
    int rc = v ? model_gguf_layer_ints(g, arch, key, n_layers, lo < 0 ? lo : 0, hi, v, &arr, err) : -1;
    if (rc > -1 && rc != 0) {
        free(v);
        return rc;
    }
    if (arr) {
        int mx = v[0];
        for (int l = 1; l < n_layers; l++) mx = v[l] > mx ? v[l] : mx;
        *out = mx;
        if (mx < lo) {
            free(v);
            return err_set(err, KVI_E_FORMAT, "gguf: %s.%s: every layer's value is below %lld", arch, key,
                           (long long)lo);
        }
    }
    free(v);
    return arr ? 0 : model_gguf_int(g, arch, key, required, def, lo, hi, out, err);
}
