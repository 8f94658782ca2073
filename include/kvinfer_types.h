/*
 * kvinfer_types.h — the base types of kvinfer's public API: the error codes
 * (KVI_OK, KVI_E_*), the error record (kvi_error) and the tensor element types
 * (kvi_type). include/kvinfer.h includes it; so do the library's lowest layers
 * (base, formats, kernels), which must not see the rest of the public API.
 *
 * Invariants: every error code is negative and distinct; kvi_type numbers follow
 * GGUF / ggml, except KVI_TYPE_KV_Q4, which never appears in a file.
 */
#ifndef KVINFER_TYPES_H
#define KVINFER_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

enum {
    KVI_OK = 0,
    KVI_E_INVALID = -1,      /* bad argument or request */
    KVI_E_IO = -2,           /* file could not be opened / read / written */
    KVI_E_FORMAT = -3,       /* malformed or unsupported file contents */
    KVI_E_NOMEM = -4,        /* allocation failed */
    KVI_E_NO_KV_SPACE = -5,  /* the KV pool has no free block left */
    KVI_E_BAD_BATCH = -6,    /* rows out of order, position gap, bad token id */
    KVI_E_CONTEXT_FULL = -7, /* a sequence would exceed n_ctx */
    KVI_E_ABORTED = -8,
    KVI_E_UNSUPPORTED = -9, /* valid input that kvinfer does not handle (yet) */
    KVI_E_TIMEOUT = -10,    /* another process of a pipeline did not answer in time */
    KVI_E_QUEUE_FULL = -20, /* kvi_sched_submit: the waiting queue is full (HTTP 429) */
};

typedef struct kvi_error {
    int code;      /* last KVI_E_* code, 0 when none */
    char msg[512]; /* one line, no trailing newline */
} kvi_error;

const char *kvi_strerror(int code);

/* ---- tensor element types (numbering follows GGUF / ggml) --------------- */

typedef enum kvi_type {
    KVI_TYPE_F32 = 0,
    KVI_TYPE_F16 = 1,
    KVI_TYPE_Q4_0 = 2,
    KVI_TYPE_Q4_1 = 3,
    KVI_TYPE_Q5_0 = 6,
    KVI_TYPE_Q5_1 = 7,
    KVI_TYPE_Q8_0 = 8,
    KVI_TYPE_Q8_1 = 9,
    KVI_TYPE_Q2_K = 10,
    KVI_TYPE_Q3_K = 11,
    KVI_TYPE_Q4_K = 12,
    KVI_TYPE_Q5_K = 13,
    KVI_TYPE_Q6_K = 14,
    KVI_TYPE_Q8_K = 15,
    KVI_TYPE_IQ2_XXS = 16, /* 256 per block: 8-value grid entries, signs, 4-bit scales */
    KVI_TYPE_IQ2_XS = 17,
    KVI_TYPE_IQ3_XXS = 18, /* 256 per block: 4-value grid entries */
    KVI_TYPE_IQ1_S = 19, /* 256 per block: 11-bit indices into iq1s_grid (-1, 0, +1), 3-bit scales */
    KVI_TYPE_IQ4_NL = 20, /* 32 per block: f16 d, 4-bit indices into a 16-value codebook */
    KVI_TYPE_IQ3_S = 21,
    KVI_TYPE_IQ2_S = 22,
    KVI_TYPE_IQ4_XS = 23, /* 256 per block: the same codebook, 6-bit scales per 32 */
    KVI_TYPE_IQ1_M = 29, /* 256 per block: IQ1_S's grid, scales per 16, the f16 d spread over them */
    KVI_TYPE_BF16 = 30,
    KVI_TYPE_TQ1_0 = 34, /* 256 per block: ternary, 5 digits per byte (base 3) */
    KVI_TYPE_TQ2_0 = 35, /* 256 per block: ternary, 2 bits per value */
    KVI_TYPE_MXFP4 = 39, /* 32 per block: E8M0 exponent e, 4-bit FP4 (E2M1) codes */
    KVI_TYPE_NVFP4 = 40, /* 64 per block: a UE4M3 scale per 16, 4-bit FP4 (E2M1) codes */
    KVI_TYPE_COUNT = 41,
    /* KV-cache-only type, outside ggml's numbering (never a tensor type in a file):
     * "q4" = KIVI. Keys: 4-bit codes quantised per channel over each KV block of
     * block_size tokens (f16 scale and min per channel), the newest, incomplete
     * block kept in f16 per sequence; values: q4_0 (a value type of q4 means q4_0). */
    KVI_TYPE_KV_Q4 = 64,
    /* KV-cache-only value "type" of latent attention (DeepSeek's MLA): no value rows
     * of their own; a position's value is the first elements of its key row (the
     * latent c), so the cache holds one row per position and layer. */
    KVI_TYPE_KV_LATENT = 65,
} kvi_type;

/* "f32", "q4_k", ..., "q4" (KVI_TYPE_KV_Q4), "latent"; NULL for a number that is not a known type. */
const char *kvi_type_name(kvi_type t);
/* Case-insensitive parse of a type name; 0 on success, KVI_E_INVALID otherwise. */
int kvi_type_from_name(const char *name, kvi_type *out);

#ifdef __cplusplus
}
#endif

#endif
