/*
 * error.h — how errors travel inside kvinfer.
 *
 * Every fallible function returns 0 or a negative KVI_E_* code and takes a
 * kvi_error* (which may be NULL) that receives one line of text. err_set()
 * formats the message and returns the code, so a failure reads:
 *     if (n > max) return err_set(err, KVI_E_FORMAT, "gguf: %s: count %llu too large", ...);
 */
#ifndef KVI_ERROR_H
#define KVI_ERROR_H

#include "kvinfer_types.h"

#if defined(__GNUC__)
#define KVI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KVI_PRINTF(a, b)
#endif

int err_set(kvi_error *err, int code, const char *fmt, ...) KVI_PRINTF(3, 4);

#endif
