/*
 * cpu.h — what this CPU can run, detected in one place: the SIMD extensions the
 * kernels dispatch on (AVX2 + FMA + F16C, AVX-512 F/BW/VL, VNNI, BF16) and whether
 * this process may use Intel AMX tiles (Advanced Matrix Extensions: eight 2-D tile
 * registers of up to 16 rows x 64 bytes, and the TDPBSSD / TDPBF16PS products).
 * The tile configuration itself belongs to the kernels (kernels/tiles_amx.h).
 *
 * Invariants: cpu_features() is computed once and never changes; it reports an
 * extension only when the CPU has it (CPUID, through GCC's __builtin_cpu_supports).
 * Invariants: cpu_amx_available() returns 1 only when the CPU reports AMX-TILE,
 * AMX-INT8 and AMX-BF16, the OS has enabled the tile state (XCR0 bits 17 and
 * 18), Linux has granted this process the tile data (arch_prctl
 * ARCH_REQ_XCOMP_PERM). The
 * answer is computed once and never changes; cpu_amx_set() (tests, benchmarks)
 * may only lower it. A kernel using tiles loads its own configuration
 * (_tile_loadconfig with a amx_tile_cfg) on the calling thread and releases the
 * tiles (_tile_release) before it returns, so no tile state outlives a call.
 */
#ifndef KVI_AMX_H
#define KVI_AMX_H

#include <stdbool.h>
#include <stdint.h>

/* The extensions the kernels and the hardware benchmark test for. */
typedef struct cpu_feature_set {
    bool avx2;        /* AVX2 + FMA + F16C: the AVX2 kernel table */
    bool avx512;      /* AVX-512 F + BW + VL, with avx2: the AVX-512 table */
    bool avx512f;     /* AVX-512 F alone (the hardware benchmark's read loops) */
    bool fma;         /* FMA (the hardware benchmark's FP32 peak) */
    bool avx512_vnni; /* VPDPBUSD: the integer products on AVX-512 */
    bool avx512_bf16; /* VDPBF16PS */
} cpu_feature_set;

/* This CPU's extensions (detected on the first call). */
const cpu_feature_set *cpu_features(void);

/* 1 when the AMX kernels may run (see above), else 0. */
int cpu_amx_available(void);

/* Tests and benchmarks: on = 0 turns the AMX kernels off for the rest of the
 * process (or until cpu_amx_set(1)); on = 1 turns them back on only where
 * cpu_amx_available() found them usable. */
void cpu_amx_set(int on);

/* 1 when the AMX kernels are on now (available and not turned off). */
int cpu_amx_on(void);

#endif
