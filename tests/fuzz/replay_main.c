/*
 * replay_main.c — a plain driver for a fuzz target (no libFuzzer): every file
 * named on the command line, or every file of every folder named, is passed once
 * to LLVMFuzzerTestOneInput. Exit 0 when all ran (a crash or a sanitizer report
 * ends the process), 1 when a path could not be read or nothing was replayed.
 */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *more = realloc(buf, cap * 2);
        if (!more) {
            free(buf);
            buf = NULL;
        } else {
            buf = more;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return -1;
    /* an exact-size copy: ASan sees a read past the input as libFuzzer's runs do */
    uint8_t *exact = malloc(n ? n : 1);
    if (exact) memcpy(exact, buf, n);
    free(buf);
    if (!exact) return -1;
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays the regular files of dir in name order; the count, or -1. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char **more = realloc(names, (n + 1) * sizeof *names);
        if (!more) break;
        names = more;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) break;
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(names[i]) != 0) count = -1;
            if (count >= 0) count++;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv)
{
    int total = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int n = stat(argv[i], &st) != 0     ? -1
                : S_ISDIR(st.st_mode)       ? replay_dir(argv[i])
                : replay_file(argv[i]) == 0 ? 1
                                            : -1;
        if (n < 0) {
            fprintf(stderr, "replay: cannot read %s\n", argv[i]);
            failed = 1;
        } else
            total += n;
    }
    printf("replayed %d inputs\n", total);
    return failed || total == 0 ? 1 : 0;
}
