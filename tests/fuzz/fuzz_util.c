/* fuzz_util.c — helpers of the fuzz targets (see fuzz_util.h). */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KVI_SHARED_DIR
#define KVI_SHARED_DIR "../shared"
#endif

const char *fuzz_shared_path(const char *rel)
{
    static char path[4096];
    const char *dir = getenv("KVI_SHARED_DIR");
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : KVI_SHARED_DIR, rel);
    return path;
}

char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return NULL;
    if (size) memcpy(s, data, size);
    s[size] = 0;
    return s;
}
