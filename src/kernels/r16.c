/*
 * r16.c — dispatch of the integer products over R16 weights
 * (r16.h): many rows go to the AMX tiles where the CPU has them
 * (qgemm_amx.h), decode rows to the AVX-512 VNNI kernel that streams the
 * tiles as they lie; everything else unpacks one tile at a time into rows (the
 * tile's 16 rows, 16 * w_rb bytes) and runs the row kernels on it, so every path
 * gives the bits of the rows layout.
 */
#include "kernels/r16.h"

#include "kernels/qgemm_amx.h"
#include "kernels/vnni_avx512.h"
#include "kernels/r16_pack.h"

void kvi_qgemm_r16(const kvi_kernel_table *tab, const kvi_qgemm_args *a, uint8_t *rows)
{
    const bool avx512 = tab->isa == KVI_ISA_AVX512 && kvi_has_vnni();
    if (avx512 && kvi_qgemm_amx_q8(a, true)) return;
    if (avx512 && a->n_rows <= KVI_R16_STREAM_ROWS_MAX && kvi_qgemv_r16_avx512(a)) return;
    if (avx512 && a->n_rows > KVI_R16_STREAM_ROWS_MAX && kvi_qgemm_r16_many_avx512(a)) return;
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        if (avx512) kvi_r16_to_rows_avx512(a->type, a->w + (size_t)jt * a->w_rb, a->n_in, rows);
        else kvi_r16_to_rows(a->type, a->w + (size_t)jt * a->w_rb, a->n_in, rows);
        kvi_qgemm_args b = *a;
        b.w = rows;
        b.j0 = 0;
        b.j1 = a->j1 - jt < 16 ? a->j1 - jt : 16;
        b.y = a->y + jt;
        if (!(tab->qgemm && tab->qgemm(&b))) kvi_qgemm_ref(&b);
    }
}
