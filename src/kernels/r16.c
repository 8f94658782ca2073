/*
 * r16.c — dispatch of the integer products over R16 weights
 * (r16.h): the active table's R16 product first (on AVX-512 VNNI: many rows
 * to the AMX tiles where the CPU has them, decode rows to the kernel that streams
 * the tiles as they lie, kernels_avx512.c); everything else unpacks one tile at a time into rows (the
 * tile's 16 rows, 16 * w_rb bytes) and runs the row kernels on it, so every path
 * gives the bits of the rows layout.
 */
#include "kernels/r16.h"

#include "kernels/r16_pack.h"

void kern_qgemm_r16(const kern_table *tab, const kern_qgemm_args *a, uint8_t *rows)
{
    if (tab->qgemm_r16 && tab->qgemm_r16(a)) return;
    for (int64_t jt = a->j0; jt < a->j1; jt += 16) {
        tab->r16_to_rows(a->type, a->w + (size_t)jt * a->w_rb, a->n_in, rows);
        kern_qgemm_args b = *a;
        b.w = rows;
        b.j0 = 0;
        b.j1 = a->j1 - jt < 16 ? a->j1 - jt : 16;
        b.y = a->y + jt;
        if (!(tab->qgemm && tab->qgemm(&b))) kern_qgemm_ref(&b);
    }
}
