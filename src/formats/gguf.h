/*
 * gguf.h — reading and writing GGUF files (v2 and v3).
 *
 * Reader: the whole file is read into one 64-byte aligned buffer (or mapped with
 * use_mmap). Every count, length, offset and size is validated against the file
 * before use; a hostile file yields KVI_E_FORMAT with a message naming the field,
 * never a crash. Metadata values stay in the buffer; keys and string values are
 * available NUL-terminated (copies); tensor data pointers point into the buffer
 * and are aligned to general.alignment (default 32) relative to the data section.
 *
 * Split models (llama.cpp's gguf-split, name-00001-of-00003.gguf ...): gguf_open of
 * the first file opens the others beside it and presents one set of tensors (each
 * tensor's data in its own file's buffer, its offset relative to its own file's data
 * section) and the first file's metadata. A later shard opened directly, a missing
 * shard, disagreeing split keys or a tensor in two files is an error naming the file.
 *
 * Writer: collect key/values and tensor descriptions, then stream the header and
 * each tensor's data in order (tensor data need not all be in memory at once).
 *
 * Strings: keys and tensor names containing a NUL byte are rejected; string values
 * keep their full length (gguf_get_str shows the part before a NUL, gguf_get_str_n
 * the whole). Nested arrays (arrays of arrays) are rejected.
 */
#ifndef KVI_GGUF_H
#define KVI_GGUF_H

#include "kvinfer_types.h"
#include <stdint.h>
#include <stdio.h>

typedef enum gguf_vtype {
    GGUF_T_UINT8 = 0,
    GGUF_T_INT8 = 1,
    GGUF_T_UINT16 = 2,
    GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4,
    GGUF_T_INT32 = 5,
    GGUF_T_FLOAT32 = 6,
    GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8,
    GGUF_T_ARRAY = 9,
    GGUF_T_UINT64 = 10,
    GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12,
    GGUF_T_COUNT = 13,
} gguf_vtype;

#define GGUF_MAX_DIMS 4

/* Bytes of one element of a fixed-size value type; 0 for string, array, unknown. */
size_t gguf_vtype_size(uint32_t t);

typedef struct gguf_tensor {
    const char *name; /* NUL-terminated */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the innermost (row length); unused dims are 1 */
    kvi_type type;
    uint64_t offset; /* relative to the data section */
    size_t nbytes;
    const void *data; /* inside the file buffer */
} gguf_tensor;

typedef struct gguf_ctx gguf_ctx;

/* ---- reader ---- */
int gguf_open(const char *path, bool use_mmap, gguf_ctx **out, kvi_error *err);
/* As gguf_open, but a file read into memory (not use_mmap) holds only the tensors
 * keep() accepts (and the header): the others' bytes are never read and their
 * pages cost no memory (reading them gives zeros). A pipeline stage reads its own
 * layers only. The header is parsed through a mapping first; a file that changed
 * between that and the read is an error. Split models are read whole. keep NULL:
 * every tensor. */
typedef bool (*gguf_keep_fn)(const gguf_ctx *g, const gguf_tensor *t, void *user);
int gguf_open_filtered(const char *path, bool use_mmap, gguf_keep_fn keep, void *user, gguf_ctx **out,
                       kvi_error *err);
/* Parses a buffer the caller keeps alive (tests, fuzzing): one file, split keys
 * not followed. */
int gguf_open_mem(const void *buf, size_t len, gguf_ctx **out, kvi_error *err);
void gguf_close(gguf_ctx *g);
/* A file-mapped context (use_mmap): maps every page of the file (all files of a
 * split model) now, on parallel threads, with a huge-page hint, so the first
 * forward pass takes no page faults.
 * Pages the kernel cannot map now are faulted later as usual; no effect on other
 * kinds of buffer. */
void gguf_prefault(const gguf_ctx *g);

/* A file image read into private anonymous memory (not use_mmap, not a caller's
 * buffer) can be made writable for in-place rewriting (weight repacking at load) and
 * sealed again: 1 when done (for every file of a split model), 0 for other kinds of
 * buffer (nothing changed). */
int gguf_set_writable(gguf_ctx *g, bool writable);
/* Gives the whole pages inside [data, data + n) of g's file buffers back to the
 * system (a pipeline stage's tensors that other processes hold): reading them
 * afterwards gives zeros (a file read into memory) or the file again (a mapping).
 * The bytes given back; 0 for a caller's buffer (gguf_open_mem) or a range
 * outside g's files. */
size_t gguf_release(gguf_ctx *g, const void *data, size_t n);

uint32_t gguf_version(const gguf_ctx *g);
size_t gguf_alignment(const gguf_ctx *g);
/* Bytes of the file; of all its files for a split model. */
size_t gguf_file_size(const gguf_ctx *g);
/* Files opened: 1, or a split model's split.count. */
int gguf_n_files(const gguf_ctx *g);

/* Start of the data section (bytes from the file start) and the file image (of the
 * first file of a split model). */
size_t gguf_data_offset(const gguf_ctx *g);
const void *gguf_file_data(const gguf_ctx *g);

int64_t gguf_n_kv(const gguf_ctx *g);
const char *gguf_kv_key(const gguf_ctx *g, int64_t i);
gguf_vtype gguf_kv_type(const gguf_ctx *g, int64_t i);
int64_t gguf_find_key(const gguf_ctx *g, const char *key); /* -1 when absent */
/* The encoded value of kv i exactly as in the file (after its type field; an array
 * starts with its element type and count). 0, or -1 when i is out of range. */
int gguf_kv_raw(const gguf_ctx *g, int64_t i, gguf_vtype *type, const void **raw, size_t *len);

/* Typed getters by key. Return 0 when found and convertible, -1 when absent,
 * KVI_E_FORMAT when present with an incompatible type (message in err). */
int gguf_get_int(const gguf_ctx *g, const char *key, int64_t *out, kvi_error *err); /* any integer or bool */
int gguf_get_float(const gguf_ctx *g, const char *key, double *out,
                   kvi_error *err); /* float32/64 or integer */
int gguf_get_bool(const gguf_ctx *g, const char *key, bool *out, kvi_error *err);
/* NUL-terminated copy owned by g; NULL when absent or not a string. */
const char *gguf_get_str(const gguf_ctx *g, const char *key);
/* The same with its full length in *len (the value may contain NUL bytes). */
const char *gguf_get_str_n(const gguf_ctx *g, const char *key, size_t *len);

/* Arrays: element type and count. 0 found, -1 absent, KVI_E_FORMAT not an array. */
int gguf_get_arr_info(const gguf_ctx *g, const char *key, gguf_vtype *elem, uint64_t *n, kvi_error *err);
/* i-th string of a string array; not NUL-terminated, *len receives its length.
 * NULL when absent, out of range or not a string array. */
const char *gguf_get_arr_str(const gguf_ctx *g, const char *key, uint64_t i, size_t *len);
/* Copies a numeric array converting to float / int32 (n = number of elements to
 * copy, must be <= the array's count). 0, -1 absent, KVI_E_FORMAT bad type. */
int gguf_get_arr_f32(const gguf_ctx *g, const char *key, float *out, uint64_t n, kvi_error *err);
int gguf_get_arr_i32(const gguf_ctx *g, const char *key, int32_t *out, uint64_t n, kvi_error *err);

int64_t gguf_n_tensors(const gguf_ctx *g);
const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name); /* NULL when absent */

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_create(void);
void gguf_writer_free(gguf_writer *w);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
int gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v);
int gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v);
int gguf_writer_set_f64(gguf_writer *w, const char *key, double v);
/* An array of any fixed-size element type (not string/array); v holds n host values. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *v, uint64_t n);
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
int gguf_writer_set_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
int gguf_writer_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Setters return 0, KVI_E_INVALID (bad key/argument; general.alignment must be a
 * u32 power of two and then sets the writer's alignment) or KVI_E_NOMEM. Setting a
 * key again replaces its value in place. */
/* Copies key/value `key` (any type, arrays included) from a reader. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_ctx *src, const char *key);
/* Declares a tensor; its data is written later with gguf_writer_write_tensor. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, kvi_type type, uint32_t n_dims,
                           const int64_t *ne);
/* Writes magic, version 3, all key/values and tensor infos, padded to alignment. */
int gguf_writer_write_header(gguf_writer *w, FILE *f, kvi_error *err);
/* Writes the data of tensor idx (declaration order, each exactly once, in order). */
int gguf_writer_write_tensor(gguf_writer *w, FILE *f, int64_t idx, const void *data, kvi_error *err);

/* A hash naming the model in g (gguf_hash.c): metadata, tensor names, types and
 * shapes, and the first and last `sample` bytes of each tensor's data (0: none). */
uint64_t gguf_model_hash(const gguf_ctx *g, size_t sample);

#endif
