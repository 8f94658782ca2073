/*
 * cli_util.c — small helpers shared by every `kvinfer` command (see cli.h):
 * error printing, strict number / size / id-list parsing, whole-file reading,
 * and fetching the value of a flag.
 *
 * Invariants: every parser accepts a whole string or nothing (no trailing junk,
 * no silent wrap-around, no partial output on failure); buffers returned are
 * malloc'd and owned by the caller.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("kvinfer: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s || is_space(*s)) return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return false;
    if ((int64_t)v < min || (int64_t)v > max) return false;
    *out = (int64_t)v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out)
{
    /* strtoull accepts "-1" (wrapping): reject signs explicitly */
    if (!s || !*s || is_space(*s) || *s == '-' || *s == '+') return false;
    errno = 0;
    char *end = NULL;
    /* decimal, or hexadecimal with 0x (never octal: "010" is ten) */
    int base = (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10;
    unsigned long long v = strtoull(s, &end, base);
    if (errno != 0 || end == s || *end != '\0') return false;
    *out = (uint64_t)v;
    return true;
}

bool cli_parse_f32(const char *s, float *out)
{
    if (!s || !*s || is_space(*s)) return false;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0') return false;
    if (!isfinite(v) || fabs(v) > 3.0e38) return false;
    *out = (float)v;
    return true;
}

bool cli_parse_size(const char *s, size_t *out)
{
    if (!s || !*s || is_space(*s) || *s == '-' || *s == '+') return false;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || !isfinite(v) || v < 0) return false;
    double mul = 1.0;
    /* suffix: k/K, M, G, T, with optional "i" and optional "B"; all binary (1024) */
    const char *p = end;
    if (*p) {
        switch (*p) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1024.0 * 1024.0; break;
        case 'g': case 'G': mul = 1024.0 * 1024.0 * 1024.0; break;
        case 't': case 'T': mul = 1024.0 * 1024.0 * 1024.0 * 1024.0; break;
        case 'b': case 'B': mul = 1.0; break;
        default: return false;
        }
        if (*p != 'b' && *p != 'B') {
            p++;
            if (*p == 'i') p++;
            if (*p == 'B' || *p == 'b') p++;
        } else {
            p++;
        }
        if (*p) return false;
    }
    double bytes = v * mul;
    if (bytes >= 18446744073709551616.0 || bytes > (double)SIZE_MAX) return false;
    if (bytes != floor(bytes)) bytes = floor(bytes);
    *out = (size_t)bytes;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, int32_t *n)
{
    if (!s || !ids || !n) return false;
    size_t len = strlen(s);
    /* at most one id per two characters, plus one */
    size_t cap = len / 2 + 1;
    int32_t *arr = malloc(cap * sizeof *arr);   /* (cap) token ids */
    if (!arr) return false;
    size_t count = 0;
    const char *p = s;
    while (is_space(*p)) p++;
    bool bracket = false;
    if (*p == '[') { bracket = true; p++; }
    bool need_sep = false;  /* true right after a number */
    for (;;) {
        while (is_space(*p)) p++;
        if (*p == '\0' || *p == ']') break;
        if (*p == ',') {
            if (!need_sep) goto fail;   /* ",," or leading comma */
            need_sep = false;
            p++;
            continue;
        }
        if (*p < '0' || *p > '9') {
            if (!(*p == '-' && p[1] >= '0' && p[1] <= '9')) goto fail;
        }
        /* numbers separated only by spaces are allowed: "1 2 3" */
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno != 0 || end == p || v < INT32_MIN || v > INT32_MAX) goto fail;
        if (count >= cap) goto fail;
        arr[count++] = (int32_t)v;
        need_sep = true;
        p = end;
        if (*p && !is_space(*p) && *p != ',' && *p != ']') goto fail;
    }
    if (*p == ']') {
        if (!bracket) goto fail;
        p++;
        while (is_space(*p)) p++;
    } else if (bracket) {
        goto fail;
    }
    if (*p != '\0') goto fail;
    if (count > 0 && !need_sep) goto fail;  /* trailing comma */
    *ids = arr;
    *n = (int32_t)count;
    return true;
fail:
    free(arr);
    return false;
}

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);   /* (cap + 1) bytes, NUL-terminated */
    if (!buf) { fclose(f); errno = ENOMEM; return NULL; }
    for (;;) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                free(buf);
                fclose(f);
                errno = e;
                return NULL;
            }
            break;
        }
        if (cap > SIZE_MAX / 2 - 1) { free(buf); fclose(f); errno = ENOMEM; return NULL; }
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) { free(buf); fclose(f); errno = ENOMEM; return NULL; }
        buf = nb;
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

const char *cli_flag_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        cli_error("flag %s needs a value", argv[*i]);
        return NULL;
    }
    *i += 1;
    return argv[*i];
}
