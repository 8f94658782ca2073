/*
 * fuzz_util.h — what the libFuzzer targets share (tests/fuzz/fuzz_*.c).
 *
 * Each target defines LLVMFuzzerTestOneInput: it calls the library on the bytes
 * exactly as the product would, prints nothing and frees everything, so a leak or
 * a sanitizer report is the library's. The same targets link with libFuzzer
 * (KVI_FUZZ=ON, clang) or with replay_main.c (every build: ctest replays the
 * committed corpus through them).
 */
#ifndef KVI_FUZZ_UTIL_H
#define KVI_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A file under the shared reference data: $KVI_SHARED_DIR/rel, else the folder
 * compiled in (KVI_SHARED_DIR, as the tests use). Static storage, one at a time. */
const char *fuzz_shared_path(const char *rel);

/* A NUL-terminated malloc'd copy of data[0..size) (NULL when out of memory). */
char *fuzz_strndup(const uint8_t *data, size_t size);

/* data[0..size) written to the file `name` in a private temporary folder made once
 * per process (both removed at exit; one name per process), for loaders that read
 * a path; that path, or NULL when the file could not be written. */
const char *fuzz_input_file(const char *name, const uint8_t *data, size_t size);

#endif
