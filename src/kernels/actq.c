/*
 * actq.c — the F32 -> F16 row conversion (actq.h) through the active ISA's
 * table, and its scalar reference (quant_f32_to_f16() element by element). Every path writes the same bytes; nothing here allocates.
 */
#include "kernels/actq.h"

#include "kernels/kernels.h"
#include "kernels/kernels_int.h"

#include <string.h>

void kern_f16_row_ref(const float *src, void *dst, int64_t n)
{
    uint8_t *h = dst; /* [n][2] bytes, any alignment */
    for (int64_t i = 0; i < n; i++) {
        const quant_f16 v = quant_f32_to_f16(src[i]);
        memcpy(h + 2 * i, &v, 2);
    }
}

void kern_f32_to_f16_row(const float *src, void *dst, int64_t n)
{
    kern_table_active()->f16_row(src, dst, n);
}

int kern_quantize_row(kvi_type t, const float *src, void *dst, int64_t n)
{
    if (t != KVI_TYPE_F16) return quant_quantize_row(t, src, dst, n);
    if (n < 0 || (n > 0 && (!src || !dst))) return KVI_E_INVALID;
    kern_f32_to_f16_row(src, dst, n);
    return KVI_OK;
}
