/*
 * amx.h — whether this process may use Intel AMX tiles (Advanced Matrix
 * Extensions: eight 2-D tile registers of up to 16 rows x 64 bytes, and the
 * TDPBSSD / TDPBF16PS tile products), and the tile configuration they need.
 * Internal to the kernels.
 *
 * Invariants: kvi_amx_available() returns 1 only when the CPU reports AMX-TILE,
 * AMX-INT8 and AMX-BF16, the OS has enabled the tile state (XCR0 bits 17 and
 * 18), Linux has granted this process the tile data (arch_prctl
 * ARCH_REQ_XCOMP_PERM), and the environment does not say KVINFER_AMX=0. The
 * answer is computed once and never changes; kvi_amx_set() (tests, benchmarks)
 * may only lower it. A kernel using tiles loads its own configuration
 * (_tile_loadconfig with a kvi_amx_cfg) on the calling thread and releases the
 * tiles (_tile_release) before it returns, so no tile state outlives a call.
 */
#ifndef KVI_AMX_H
#define KVI_AMX_H

#include <stdint.h>

/* The 64-byte tile configuration (palette 1): tile t has rows[t] rows of colsb[t]
 * bytes; unused tiles have 0 rows and 0 bytes. */
typedef struct kvi_amx_cfg {
    uint8_t palette;      /* 1 */
    uint8_t start_row;    /* 0 */
    uint8_t reserved[14];
    uint16_t colsb[16];   /* bytes per row of each tile (<= 64) */
    uint8_t rows[16];     /* rows of each tile (<= 16) */
} kvi_amx_cfg;
_Static_assert(sizeof(kvi_amx_cfg) == 64, "kvi_amx_cfg is the 64-byte LDTILECFG operand");

/* A compiler barrier for the AMX kernels: GCC's _tile_loadd is inline asm with no
 * memory clobber, so plain stores to a buffer must not be moved past a tile load
 * of it; put this between the two. */
#define KVI_AMX_STORES_BEFORE_TILE_LOADS() __asm__ volatile("" ::: "memory")

/* 1 when the AMX kernels may run (see above), else 0. */
int kvi_amx_available(void);

/* Tests and benchmarks: on = 0 turns the AMX kernels off for the rest of the
 * process (or until kvi_amx_set(1)); on = 1 turns them back on only where
 * kvi_amx_available() found them usable. */
void kvi_amx_set(int on);

/* 1 when the AMX kernels are on now (available and not turned off). */
int kvi_amx_on(void);

#endif
