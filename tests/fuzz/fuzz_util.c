/* fuzz_util.c — helpers of the fuzz targets (see fuzz_util.h). */
#define _POSIX_C_SOURCE 200809L
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

static char input_path[4096], input_dir[4000];

static void remove_input(void)
{
    remove(input_path);
    remove(input_dir);
}

const char *fuzz_input_file(const char *name, const uint8_t *data, size_t size)
{
    if (!input_path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(input_dir, sizeof input_dir, "%s/kvi-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(input_dir)) abort();
        snprintf(input_path, sizeof input_path, "%s/%s", input_dir, name);
        atexit(remove_input);
    }
    FILE *f = fopen(input_path, "wb");
    if (!f) return NULL;
    const size_t w = size ? fwrite(data, 1, size, f) : 0;
    if (fclose(f) != 0 || w != size) return NULL;
    return input_path;
}
