/*
 * lora_bt.h — the second half of a LoRA term, y += s (B t), from B stored
 * transposed in panels of 16 output columns (model/lora.h: bt), so that each output
 * column is one lane and a panel's r x 16 values are contiguous:
 *
 *   bt  [ceil(n_out / 16)][r][16]   column j, k at kern_lora_bt_at(r, j, k); the
 *                                   last panel's columns past n_out are zeros
 *   t   [cnt][ldt]  the rows' A products (r used of each row)
 *   y   cnt row pointers, columns j0 .. j0 + n from y[i]; bt points at the panel of
 *       column j0, a multiple of 16
 *   for every row i and column j < n:
 *       acc = 0; for k = 0 .. r - 1: acc = fma(t[i][k], bt[k][j], acc)   (fused, in order)
 *       y[i][j] = y[i][j] + acc * s[i]                                    (rounded product, then sum)
 * Every ISA path computes exactly these operations per element (kern_lora_bt_ref is
 * the reference), so a row's bits do not depend on the ISA, on the other rows, or
 * on how the columns are split between calls.
 */
#ifndef KVI_KERNELS_LORA_BT_H
#define KVI_KERNELS_LORA_BT_H

#include "base/threadpool.h"

#include <stdint.h>

#include <stddef.h>

/* where column j, row k of B transposed lies in the panels of rank r */
static inline size_t kern_lora_bt_at(int r, int64_t j, int k)
{
    return ((size_t)(j >> 4) * (size_t)r + (size_t)k) * 16 + (size_t)(j & 15);
}
/* floats of the panels of n_out columns */
static inline size_t kern_lora_bt_floats(int r, int64_t n_out)
{
    return (size_t)((n_out + 15) / 16) * 16 * (size_t)r;
}

void kern_lora_bt_ref(const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n, const float *s,
                      float *const *y);
/* The same on the pool's ISA path (the same bits). */
void kern_lora_bt(const tpool *pool, const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n,
                  const float *s, float *const *y);

#endif
