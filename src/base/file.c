/*
 * file.c — file_read_all (file.h): stat, then fread into a buffer that doubles
 * from 64 KiB until a short read, one byte kept for the NUL.
 */
#include "base/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

file_status file_read_all(const char *path, size_t max_bytes, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return FILE_NOT_REGULAR;
    FILE *f = fopen(path, "rb");
    if (!f) return FILE_CANT_OPEN;
    size_t cap = 1 << 16, n = 0;
    char *buf = NULL; /* [cap + 1] */
    file_status st = FILE_OK;
    for (;;) {
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            st = FILE_NOMEM;
            break;
        }
        buf = nb;
        n += fread(buf + n, 1, cap - n, f);
        if (max_bytes && n > max_bytes) {
            st = FILE_TOO_LARGE;
            break;
        }
        if (n < cap) break;
        cap *= 2;
    }
    if (st == FILE_OK && ferror(f)) st = FILE_READ_ERROR;
    fclose(f);
    if (st != FILE_OK) {
        free(buf);
        return st;
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return FILE_OK;
}
