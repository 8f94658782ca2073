/*
 * lora_bt.c — the reference of y += s (B t) from B transposed (lora_bt.h) and the
 * per-ISA paths' contract (the dispatch, kern_lora_bt, is in kernels.c).
 */
#include "kernels/lora_bt.h"

#include <math.h>
#include <stddef.h>

void kern_lora_bt_ref(const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n, const float *s,
                      float *const *y)
{
    for (int i = 0; i < cnt; i++) {
        const float *ti = t + (size_t)i * (size_t)ldt;
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int k = 0; k < r; k++) acc = fmaf(ti[k], bt[kern_lora_bt_at(r, j, k)], acc);
            const float p = acc * s[i];
            y[i][j] = y[i][j] + p;
        }
    }
}
