/*
 * safetensors.c — parser of the safetensors header (see safetensors.h).
 *
 * Data structure: an array of st_tensor built from the JSON header; data pointers
 * point into the caller's buffer. Nothing from the header is trusted: the header
 * length, every dtype, dimension and offset is checked against the buffer, and all
 * size arithmetic is overflow-checked, so a lying header is an error, never a read
 * outside the buffer. No two non-empty tensors may share bytes (as the format's own
 * validation demands): overlapping ranges are an error.
 */
#include "formats/safetensors.h"
#include "formats/json_util.h"

#include "base/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The format's own limit on the JSON header. */
#define ST_MAX_HEADER (100u * 1024u * 1024u)

typedef struct st_dtype_info {
    const char *name;
    int size;
    bool is_float;
    kvi_type type;
} st_dtype_info;

static const st_dtype_info st_dtypes[] = {
    { "F32", 4, true, KVI_TYPE_F32 },      { "F16", 2, true, KVI_TYPE_F16 },
    { "BF16", 2, true, KVI_TYPE_BF16 },    { "F64", 8, false, KVI_TYPE_F32 },
    { "I64", 8, false, KVI_TYPE_F32 },     { "U64", 8, false, KVI_TYPE_F32 },
    { "I32", 4, false, KVI_TYPE_F32 },     { "U32", 4, false, KVI_TYPE_F32 },
    { "I16", 2, false, KVI_TYPE_F32 },     { "U16", 2, false, KVI_TYPE_F32 },
    { "I8", 1, false, KVI_TYPE_F32 },      { "U8", 1, false, KVI_TYPE_F32 },
    { "BOOL", 1, false, KVI_TYPE_F32 },    { "F8_E4M3", 1, false, KVI_TYPE_F32 },
    { "F8_E5M2", 1, false, KVI_TYPE_F32 },
};

static const st_dtype_info *st_dtype_find(const char *s)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, s) == 0) return &st_dtypes[i];
    return NULL;
}

/* A JSON number that is a non-negative integer exactly representable in a double. */
static bool st_json_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0.0 || d > 9007199254740992.0 || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static char *st_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void st_free(st_index *ix)
{
    if (!ix) return;
    for (size_t i = 0; i < ix->n_tensors; i++) free(ix->tensors[i].name);
    free(ix->tensors);
    free(ix);
}

const st_tensor *st_find(const st_index *ix, const char *name)
{
    if (!ix || !name) return NULL;
    for (size_t i = 0; i < ix->n_tensors; i++)
        if (strcmp(ix->tensors[i].name, name) == 0) return &ix->tensors[i];
    return NULL;
}

/* Fills t from one header entry; data is the data section of data_len bytes. */
static int st_parse_entry(const cJSON *e, const uint8_t *data, size_t data_len, st_tensor *t, kvi_error *err)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' is not a JSON object", name);

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(jd))
        return err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' has no dtype string", name);
    const st_dtype_info *di = st_dtype_find(jd->valuestring);
    if (!di)
        return err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' has unknown dtype '%.16s'", name,
                       jd->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", di->name);
    t->elem_size = di->size;
    t->is_float = di->is_float;
    t->type = di->type;

    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(js))
        return err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' has no shape array", name);
    int nd = cJSON_GetArraySize(js);
    if (nd < 0 || nd > ST_MAX_DIMS)
        return err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' has %d dimensions (max %d)", name, nd,
                       ST_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    uint64_t n_elems = 1;
    for (int i = 0; i < ST_MAX_DIMS; i++) t->shape[i] = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (!st_json_u64(cJSON_GetArrayItem(js, i), &d) || d > (uint64_t)INT64_MAX)
            return err_set(err, KVI_E_FORMAT,
                           "safetensors: tensor '%s' shape[%d] is not a non-negative integer", name, i);
        if (d != 0 && n_elems > UINT64_MAX / d)
            return err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' shape overflows", name);
        n_elems *= d;
        t->shape[i] = (int64_t)d;
    }
    if (n_elems > UINT64_MAX / (uint64_t)di->size)
        return err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' size overflows", name);
    uint64_t want = n_elems * (uint64_t)di->size;

    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t b, en;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !st_json_u64(cJSON_GetArrayItem(jo, 0), &b) ||
        !st_json_u64(cJSON_GetArrayItem(jo, 1), &en))
        return err_set(err, KVI_E_FORMAT,
                       "safetensors: tensor '%s' needs data_offsets [begin, end] of integers", name);
    if (b > en || en > (uint64_t)data_len)
        return err_set(err, KVI_E_FORMAT,
                       "safetensors: tensor '%s' data_offsets [%llu, %llu) outside the %zu-byte data section",
                       name, (unsigned long long)b, (unsigned long long)en, data_len);
    if (en - b != want)
        return err_set(err, KVI_E_FORMAT,
                       "safetensors: tensor '%s' spans %llu bytes but shape and dtype need %llu", name,
                       (unsigned long long)(en - b), (unsigned long long)want);
    t->data = data + b;
    t->nbytes = (size_t)want;
    return 0;
}

static int st_cmp_data(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    uintptr_t px = (uintptr_t)x->data, py = (uintptr_t)y->data;
    return px < py ? -1 : px > py;
}

/* Sorted by start, each non-empty tensor must end at or before the next one starts:
 * a hostile header could otherwise alias one weight onto another's bytes. */
static int st_check_overlaps(const st_index *ix, kvi_error *err)
{
    if (ix->n_tensors < 2) return 0;
    const st_tensor **s = malloc(ix->n_tensors * sizeof *s);
    if (!s) return err_set(err, KVI_E_NOMEM, "safetensors: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < ix->n_tensors; i++)
        if (ix->tensors[i].nbytes > 0) s[n++] = &ix->tensors[i];
    qsort(s, n, sizeof *s, st_cmp_data);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++)
        if ((uintptr_t)s[i - 1]->data + s[i - 1]->nbytes > (uintptr_t)s[i]->data)
            rc = err_set(err, KVI_E_FORMAT, "safetensors: tensors '%s' and '%s' overlap", s[i - 1]->name,
                         s[i]->name);
    free(s);
    return rc;
}

int st_parse(const void *buf, size_t len, st_index **out, kvi_error *err)
{
    *out = NULL;
    const uint8_t *p = buf;
    if (!buf || len < 8)
        return err_set(err, KVI_E_FORMAT, "safetensors: file of %zu bytes has no header", len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > (uint64_t)(len - 8))
        return err_set(err, KVI_E_FORMAT, "safetensors: header length %llu invalid for a %zu-byte file",
                       (unsigned long long)hlen, len);
    const uint8_t *data = p + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;

    bool oom = false;
    cJSON *root = kvi_json_parse((const char *)p + 8, (size_t)hlen, &oom);
    if (oom) return err_set(err, KVI_E_NOMEM, "safetensors: out of memory reading the header");
    if (!root) return err_set(err, KVI_E_FORMAT, "safetensors: header is not valid JSON");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(err, KVI_E_FORMAT, "safetensors: header is not a JSON object");
    }

    int rc = 0;
    st_index *ix = calloc(1, sizeof *ix);
    size_t n = (size_t)cJSON_GetArraySize(root);
    if (!ix || !(ix->tensors = calloc(n ? n : 1, sizeof *ix->tensors))) {
        rc = err_set(err, KVI_E_NOMEM, "safetensors: out of memory for %zu tensors", n);
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, root)
    {
        if (!e->string) {
            rc = err_set(err, KVI_E_FORMAT, "safetensors: header entry without a name");
            goto done;
        }
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if (st_find(ix, e->string)) {
            rc = err_set(err, KVI_E_FORMAT, "safetensors: tensor '%s' listed twice", e->string);
            goto done;
        }
        st_tensor *t = &ix->tensors[ix->n_tensors];
        rc = st_parse_entry(e, data, data_len, t, err);
        if (rc) goto done;
        t->name = st_strdup(e->string);
        if (!t->name) {
            rc = err_set(err, KVI_E_NOMEM, "safetensors: out of memory");
            goto done;
        }
        ix->n_tensors++;
    }
    rc = st_check_overlaps(ix, err);
done:
    cJSON_Delete(root);
    if (rc) {
        st_free(ix);
        return rc;
    }
    *out = ix;
    return 0;
}
