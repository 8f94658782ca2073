/*
 * tiles_amx.h — the AMX tile configuration the kernels load (LDTILECFG operand)
 * and the compiler barrier they need around tile loads. Whether tiles may be used
 * at all is base/cpu.h's answer (cpu_amx_on).
 *
 * Invariant: a kernel using tiles loads its own configuration on the calling
 * thread and releases the tiles (_tile_release) before it returns.
 */
#ifndef KVI_TILES_AMX_H
#define KVI_TILES_AMX_H

#include <stdint.h>

/* The 64-byte tile configuration (palette 1): tile t has rows[t] rows of colsb[t]
 * bytes; unused tiles have 0 rows and 0 bytes. */
typedef struct amx_tile_cfg {
    uint8_t palette;   /* 1 */
    uint8_t start_row; /* 0 */
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row of each tile (<= 64) */
    uint8_t rows[16];   /* rows of each tile (<= 16) */
} amx_tile_cfg;
_Static_assert(sizeof(amx_tile_cfg) == 64, "amx_tile_cfg is the 64-byte LDTILECFG operand");

/* A compiler barrier for the AMX kernels: GCC's _tile_loadd is inline asm with no
 * memory clobber, so plain stores to a buffer must not be moved past a tile load
 * of it; put this between the two. */
#define KVI_AMX_STORES_BEFORE_TILE_LOADS() __asm__ volatile("" ::: "memory")

#endif
