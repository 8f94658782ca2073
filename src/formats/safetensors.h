/*
 * safetensors.h — reading the tensor index of a .safetensors file.
 *
 * File layout: an 8-byte little-endian header length N, N bytes of JSON, then the
 * data section (everything after the header). The JSON object maps each tensor
 * name to {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end)}
 * with offsets relative to the data section; the key "__metadata__" holds free
 * strings and is ignored.
 *
 * The parser does not own the file bytes: the caller keeps the buffer alive as
 * long as the index is used. Invariants after a successful st_parse():
 *  - every tensor's [begin, end) lies inside the data section;
 *  - end - begin == product(shape) * element size of dtype, without overflow;
 *  - names are unique, NUL-terminated copies owned by the index.
 */
#ifndef KVI_SAFETENSORS_H
#define KVI_SAFETENSORS_H

#include "kvinfer_types.h"
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 4

typedef struct st_tensor {
    char *name;                 /* NUL-terminated, owned by the index */
    char dtype[8];              /* as written: "F32", "BF16", "I64" ... */
    int elem_size;              /* bytes per element of dtype */
    bool is_float;              /* dtype is F32, F16 or BF16 ... */
    kvi_type type;              /* ... and then its kvi type */
    uint32_t n_dims;            /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS]; /* outermost first (PyTorch order) */
    const void *data;           /* inside the caller's buffer */
    size_t nbytes;
} st_tensor;

typedef struct st_index {
    st_tensor *tensors; /* [n_tensors] */
    size_t n_tensors;
} st_index;

/* Parses the header of a safetensors file held in buf[0..len). */
int st_parse(const void *buf, size_t len, st_index **out, kvi_error *err);
void st_free(st_index *ix);
/* NULL when absent. */
const st_tensor *st_find(const st_index *ix, const char *name);

#endif
