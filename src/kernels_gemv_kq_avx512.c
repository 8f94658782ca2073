/*
 * kernels_gemv_kq_avx512.c — K-quant (Q4_K Q5_K Q6_K) products with few input rows
 * (decode), with AVX-512 VNNI; the bits of kernels_q8.h's contract.
 *
 * Not written yet: kvi_qgemv_kq_avx512 declines every call, so the K-quants take
 * the packed-tile path of kernels_avx512.c (correct, slower for one row).
 */
#include "kernels_vnni.h"

int kvi_qgemv_kq_avx512(const kvi_qgemm_args *a)
{
    (void)a;
    return 0;
}
