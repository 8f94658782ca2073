/*
 * isa_target.h — the function attributes that compile one function for one ISA
 * (GCC/Clang __attribute__((target))), written once for every per-ISA file of the
 * kernels and the attention layer. No global -march flag is used: a function so
 * marked runs only after the CPU has been checked (base/cpu.h, the kernel tables).
 * Also the one F16C rounding helper the per-ISA activation quantisers share.
 *
 * Invariant: the _NOFMA variants leave FMA out on purpose: those files (the
 * activation quantisation) must keep the scalar reference's separate multiply and
 * add, and without the FMA target the compiler cannot contract them.
 */
#ifndef KVI_ISA_TARGET_H
#define KVI_ISA_TARGET_H

#define KVI_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVI_TARGET_AVX2_NOFMA __attribute__((target("avx2,f16c")))
#define KVI_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define KVI_TARGET_AVX512_NOFMA __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define KVI_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define KVI_TARGET_AMX_INT8 \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define KVI_TARGET_AMX_BF16 \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

/* The same, for small helpers that must be inlined into their callers. */
#define KVI_INLINE_AVX2 KVI_TARGET_AVX2 __attribute__((always_inline)) static inline
#define KVI_INLINE_AVX512 KVI_TARGET_AVX512 __attribute__((always_inline)) static inline

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* f32 -> f16 (nearest even) -> f32 of one value with F16C: the per-ISA activation
 * quantisers' rounding of their scales (the bits of quant_f32_to_f16's). Callable
 * from any function compiled for AVX2 or AVX-512. */
KVI_TARGET_AVX2_NOFMA static inline float kern_f16_round_f16c(float v)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT)));
}
#endif

#endif
