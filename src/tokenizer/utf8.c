/*
 * utf8.c — UTF-8 helpers for streaming text out of the tokenizer (public API,
 * include/kvinfer.h): how much of a byte string ends on a whole character, and a
 * copy with every invalid byte replaced by U+FFFD.
 *
 * Invariants: kvi_utf8_complete_prefix never cuts inside a well-formed sequence
 * and never holds back more than 3 bytes; kvi_utf8_sanitize's output is valid
 * UTF-8 (no overlongs, surrogates or NUL) and at most 3 * len + 1 bytes.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvinfer.h"

static int utf8_seq_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

size_t kvi_utf8_complete_prefix(const char *s, size_t len)
{
    /* look back at most 3 bytes for the lead byte of a trailing sequence */
    size_t back = len < 4 ? len : 4;
    for (size_t k = 1; k <= back; k++) {
        unsigned char c = (unsigned char)s[len - k];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: keep looking */
        int need = utf8_seq_len(c);
        if (need > (int)k) return len - k; /* incomplete: hold it back */
        return len;
    }
    return len; /* only stray continuation bytes: nothing to wait for */
}

char *kvi_utf8_sanitize(const char *s, size_t len)
{
    if (len > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(len * 3 + 1); /* (3 * len + 1) bytes: each bad byte becomes 3 */
    if (!out) return NULL;
    size_t o = 0, i = 0;
    while (i < len) {
        const unsigned char *u = (const unsigned char *)s + i;
        int need = utf8_seq_len(u[0]);
        bool ok = need > 0 && i + (size_t)need <= len;
        for (int k = 1; ok && k < need; k++) ok = (u[k] & 0xC0) == 0x80;
        /* reject overlongs and surrogates that the lead-byte ranges let through */
        if (ok && need == 3 && u[0] == 0xE0 && u[1] < 0xA0) ok = false;
        if (ok && need == 3 && u[0] == 0xED && u[1] >= 0xA0) ok = false;
        if (ok && need == 4 && u[0] == 0xF0 && u[1] < 0x90) ok = false;
        if (ok && need == 4 && u[0] == 0xF4 && u[1] >= 0x90) ok = false;
        if (ok && need == 1 && u[0] == 0) ok = false; /* NUL would end the C string */
        if (ok) {
            memcpy(out + o, u, (size_t)need);
            o += (size_t)need;
            i += (size_t)need;
        } else {
            out[o++] = (char)0xEF;
            out[o++] = (char)0xBF;
            out[o++] = (char)0xBD;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}
