/*
 * file.h — reading a whole (small) file into memory: config.json,
 * tokenizer.json, llama2.c's tokenizer.bin. Model weights never come this way
 * (formats/gguf.c maps or reads them with every offset checked).
 *
 * Invariants: only a regular file is opened (a FIFO would block forever); on
 * success *data holds *len bytes plus a terminating NUL (so text can be parsed in
 * place) and belongs to the caller; on failure nothing is allocated.
 */
#ifndef KVI_FILE_H
#define KVI_FILE_H

#include <stddef.h>

typedef enum file_status {
    FILE_OK = 0,
    FILE_NOT_REGULAR, /* exists but is not a regular file */
    FILE_CANT_OPEN,
    FILE_NOMEM,
    FILE_READ_ERROR,
    FILE_TOO_LARGE, /* more than max_bytes */
} file_status;

/* The whole file at path into *data (malloc'd, NUL-terminated) and *len; at most
 * max_bytes (0: no limit). */
file_status file_read_all(const char *path, size_t max_bytes, char **data, size_t *len);

#endif
