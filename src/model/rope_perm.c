/*
 * rope_perm.c — rotate-half to interleaved row order of q / k heads (rope_perm.h).
 */
#include "model/rope_perm.h"

#include <string.h>

void rope_interleave_rows(uint8_t *dst, const uint8_t *src, int64_t n_rows, int64_t hd, size_t row)
{
    const int64_t half = hd / 2;
    for (int64_t h = 0; h < n_rows / hd; h++)
        for (int64_t i = 0; i < half; i++) {
            const int64_t base = h * hd;
            memcpy(dst + (size_t)(base + 2 * i) * row, src + (size_t)(base + i) * row, row);
            memcpy(dst + (size_t)(base + 2 * i + 1) * row, src + (size_t)(base + i + half) * row, row);
        }
}
