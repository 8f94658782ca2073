/*
 * quant_ggml.h — llama.cpp's weight quantisers (ggml_quantize_chunk), byte for byte:
 * the files `kvinfer quantize` writes equal llama-quantize's.
 *
 * A call quantises nrows rows of n_per_row floats (src [nrows][n_per_row]) into
 * nrows rows of quant_row_bytes(t, n_per_row) bytes (dst). Without an importance
 * matrix (imatrix NULL) each type uses ggml's reference quantiser
 * (quantize_row_*_ref; IQ4_NL / IQ4_XS their search with 7 trial scales); with one
 * (imatrix [n_per_row], the mean squared activation entering each column) the
 * weighted search of ggml's quantize_*_impl. Q8_0, MXFP4 and F16 / BF16 / F32 ignore
 * the matrix, as ggml does. Rows are independent: splitting a tensor's rows between
 * threads changes no byte.
 */
#ifndef KVI_QUANT_GGML_H
#define KVI_QUANT_GGML_H

#include "formats/quant.h"

#include <stdbool.h>

/* Whether quant_ggml_rows can write type t. */
bool quant_ggml_supported(kvi_type t);
/* Bytes written (nrows * row bytes); 0 (nothing written) when t is not supported
 * or n_per_row is not a whole number of its blocks. */
size_t quant_ggml_rows(kvi_type t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                       const float *imatrix);

#endif
