/*
 * fwd_alloc.h — the forward pass's scratch allocation: 64-byte aligned blocks
 * (whole cache lines, at least one), their bytes added to a running total so the
 * scratch a pass holds is counted (fwd_scratch_bytes).
 */
#ifndef KVI_FWD_ALLOC_H
#define KVI_FWD_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* bytes rounded up to 64 (at least 64) into *total; NULL with *ok false on failure */
static inline void *fwd_alloc64(size_t bytes, size_t *total, bool *ok)
{
    void *p = NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&p, 64, bytes) != 0) {
        *ok = false;
        return NULL;
    }
    *total += bytes;
    return p;
}

#endif
