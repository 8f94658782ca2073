/*
 * quant_grid_iq1.h — the codebook of the 1-bit IQ types (IQ1_S, IQ1_M): ggml's
 * iq1s_grid, defined once (quant_grid_iq1.c) for the dequantisers and the kernels.
 *
 * Data: 2048 entries of 8 values each in {-1, 0, +1}; entry k holds value j as the
 * int8 byte j (bits 8j..8j+7, little endian), so reading an entry's 8 bytes as
 * int8_t[8] gives its values in order. An 11-bit index selects an entry.
 * Invariant: the table equals ggml's iq1s_grid (ggml-common.h) entry for entry;
 * tests/test_lowbit.c checks a hash of it computed from gguf-py's packed copy.
 */
#ifndef KVI_QUANT_GRID_IQ1_H
#define KVI_QUANT_GRID_IQ1_H

#include <stdint.h>

#define QUANT_IQ1S_NGRID 2048

/* The grid's shift: value = scale * (grid value + delta), delta = +-1/8 (ggml's
 * IQ1S_DELTA = IQ1M_DELTA). The integer kernels use 8 * grid value +- 1. */
#define QUANT_IQ1_DELTA 0.125f

extern const uint64_t quant_iq1s_grid[QUANT_IQ1S_NGRID];

#endif
