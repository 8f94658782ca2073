/* error.c — kvi_error formatting and the names of the error codes. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

int err_set(kvi_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* one line, whatever a file name or a quoted file field contained */
        for (char *c = err->msg; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        err->code = code;
    }
    return code;
}

const char *kvi_strerror(int code)
{
    switch (code) {
    case KVI_OK: return "ok";
    case KVI_E_INVALID: return "invalid argument";
    case KVI_E_IO: return "i/o error";
    case KVI_E_FORMAT: return "malformed file";
    case KVI_E_NOMEM: return "out of memory";
    case KVI_E_NO_KV_SPACE: return "no KV cache space";
    case KVI_E_BAD_BATCH: return "bad batch";
    case KVI_E_CONTEXT_FULL: return "context_length_exceeded";
    case KVI_E_ABORTED: return "aborted";
    case KVI_E_UNSUPPORTED: return "unsupported";
    case KVI_E_TIMEOUT: return "timed out";
    default: return "unknown error";
    }
}
