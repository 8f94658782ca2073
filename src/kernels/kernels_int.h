/*
 * kernels_int.h — the per-ISA function table behind kernels.c's dispatch
 * (internal to the kernels; only kernels*.c include it).
 *
 * One table exists per instruction set (scalar in kernels.c, AVX2 in
 * kernels_avx2.c, AVX-512 in kernels_avx512.c). kernels.c picks one table once and
 * swaps it only through kern_isa_set(). Each ISA file compiles its functions with
 * __attribute__((target(...))), so no global -march flag is needed and a table is
 * used only after the CPU has been checked.
 *
 * Invariant: `dequant` produces exactly the floats of quant_dequant_row() (every
 * supported format dequantises exactly: products of small integers and halves),
 * or returns 0 to let the caller fall back to quant_dequant_row().
 *
 * Invariant: `qgemm` gives exactly kern_qgemm_ref()'s bits (q8.h contract),
 * or returns 0 (type not handled, or CPU feature missing) and writes nothing.
 */
#ifndef KVI_KERNELS_ISA_H
#define KVI_KERNELS_ISA_H

#include "kernels/kernels.h"
#include "kernels/actq.h"
#include "kernels/fmm_avx512.h"
#include "kernels/q8.h"

typedef struct kern_table {
    kern_isa isa;
    /* sum_i a[i] * b[i], reduction order fixed by n and the ISA */
    float (*dot)(const float *a, const float *b, int64_t n);
    /* n elements of type t into dst; returns 0 when the type has no fast path */
    int (*dequant)(kvi_type t, const void *src, float *dst, int64_t n);
    /* out[2r + t] = dot(x + r * ldx, w + t * ldw, n) for r < 3, t < 2, with dot's
     * bits; n a multiple of 64; NULL when the ISA has none */
    void (*dot_3x2)(const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t n, float out[6]);
    /* integer product with quantised activations; 1 when done, 0 to fall back */
    int (*qgemm)(const kern_qgemm_args *a);
    /* activation quantisation (q8.h): nb blocks of 32 (kern_q8a) or 256 (kern_q8k)
     * inputs, and n floats into halves; the bytes of the scalar reference */
    void (*actq_a)(const float *x, kern_q8a *b, int64_t nb);
    void (*actq_k)(const float *x, kern_q8k *b, int64_t nb);
    void (*f16_row)(const float *src, void *dst, int64_t n);
    /* R16 weights (r16.h): the product straight from the tiles, 1 when done, 0 to
     * unpack them (NULL where the ISA has no such kernel); one tile into rows */
    int (*qgemm_r16)(const kern_qgemm_args *a);
    void (*r16_to_rows)(kvi_type t, const uint8_t *tile, int64_t n_in, uint8_t *rows);
    /* whether R16 is the faster layout for the weights on this path (r16_pack.h) */
    bool (*r16_preferred)(void);
    /* float weights (F32/F16/BF16): a thread's share of the product in the order
     * of fmm_avx512.h, 1 when done; the whole product on AMX-BF16 when that path
     * is on (fmm_amx.h), 1 when done. NULL where the ISA has none. */
    int (*fmm)(const kern_fmm_args *a);
    int (*fmm_amx)(tpool *pool, const kern_tensor *W, const float *x, int64_t ldx, int64_t n_rows, float *y,
                   int64_t ldy);
    /* the integer products may go to the AMX tiles (qgemm_amx.h): build their
     * activation tiles */
    bool amx_q8;
    /* the gated delta rule's step (delta.h), with the reference's bits; NULL: the reference */
    void (*delta_step)(float *S, const float *q, const float *k, const float *v, float decay, const float *gk,
                       float beta, float scale, int dk, float *o);
    /* y += s (B t) from B transposed (lora_bt.h), with the reference's bits; NULL: the reference */
    void (*lora_bt)(const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n, const float *s,
                    float *const *y);
    /* the short convolution's row step (shortconv.h), with the reference's bits; NULL: the reference */
    void (*shortconv_row)(const float *w, int K, float *st, size_t ld, const float *b, const float *c,
                          const float *x, int c0, int c1, float *y);
} kern_table;

/* The table of the active ISA (kernels.c): every SIMD entry is reached through it. */
const kern_table *kern_table_active(void);

/* The scalar references the scalar table points at (q8.c, actq.c, r16_pack.c). */
void kern_actq_a_ref(const float *x, kern_q8a *b, int64_t nb);
void kern_actq_k_ref(const float *x, kern_q8k *b, int64_t nb);
void kern_f16_row_ref(const float *src, void *dst, int64_t n);

extern const kern_table kern_table_avx2;
extern const kern_table kern_table_avx512;

void kern_lora_bt_avx512(const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n, const float *s,
                         float *const *y);
void kern_lora_bt_avx2(const float *t, int64_t ldt, int cnt, int r, const float *bt, int64_t n, const float *s,
                       float *const *y);
void kern_delta_step_avx512(float *S, const float *q, const float *k, const float *v, float decay,
                            const float *gk, float beta, float scale, int dk, float *o);
void kern_shortconv_row_avx512(const float *w, int K, float *st, size_t ld, const float *b, const float *c,
                               const float *x, int c0, int c1, float *y);

/* The AVX2 dequantisation, reused by the AVX-512 table for the block types. */
int kern_dequant_avx2(kvi_type t, const void *src, float *dst, int64_t n);

#endif
