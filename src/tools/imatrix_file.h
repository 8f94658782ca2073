/*
 * imatrix_file.h — llama.cpp's importance-matrix files, read as llama-quantize reads
 * them: the GGUF format (tensors NAME.in_sum2 [n] and NAME.counts [n / ne0] as F32,
 * keys imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size) and the legacy
 * .dat format (int32 n_entries; per entry int32 name length, name, int32 ncall,
 * int32 nval, float[nval]; optionally int32 chunk count, int32 length, dataset name).
 *
 * Each entry's values are the mean squared activation per input column: GGUF
 * sums[j][i] / (float)lround(counts[j]) (1 where a count is 0), legacy
 * sums[i] / ncall (the sums as stored when ncall is 0).
 */
#ifndef KVI_IMATRIX_FILE_H
#define KVI_IMATRIX_FILE_H

#include "kvinfer_types.h"

#include <stdint.h>

typedef struct imatrix_entry {
    char *name;    /* the weight's tensor name, NUL-terminated */
    float *values; /* [n] */
    int64_t n;
} imatrix_entry;

typedef struct imatrix_data {
    imatrix_entry *e; /* [n_entries] */
    int n_entries;
    int chunk_count; /* 0 when the file does not say */
    char *dataset;   /* the first dataset name, or NULL */
} imatrix_data;

/* 0 or KVI_E_FORMAT / KVI_E_IO / KVI_E_NOMEM with err (nothing to free then). */
int imatrix_load(const char *path, imatrix_data *out, kvi_error *err);
void imatrix_free(imatrix_data *d);
/* The entry named name, or NULL. */
const imatrix_entry *imatrix_find(const imatrix_data *d, const char *name);

#endif
