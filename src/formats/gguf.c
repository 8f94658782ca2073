/*
 * gguf.c — the GGUF reader (v2 and v3, little-endian).
 *
 * Data structure
 *   gguf_ctx holds the whole file in one buffer `buf` of `size` bytes: an anonymous
 *   page-aligned mapping filled by pread() slices on parallel threads (default), a read-only mapping of the
 *   file (use_mmap; 2 MiB-aligned when the file is at least GGUF_HUGEPAGE_MIN, so
 *   2 MiB page-cache folios map as huge pages; gguf_prefault() maps every page up
 *   front), or a caller's buffer (gguf_open_mem, not owned). Nothing in it
 *   is ever written after parsing.
 *
 *     file  = header | kv[n_kv] | tensor_info[n_tensors] | pad | data section
 *     header: "GGUF" u32 version, u64 n_tensors, u64 n_kv
 *     kv:     string key, u32 type, value   (string = u64 len + bytes)
 *             array value = u32 elem type, u64 count, count elements
 *     info:   string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset
 *
 *   kv[i] (n_kv entries) keeps a NUL-terminated copy of its key, a pointer to the
 *   encoded value inside buf and, for a string value, a NUL-terminated copy. A string
 *   array keeps one table `str_off` (count entries, size_t each) of byte offsets from
 *   the array's first element to each element's u64 length prefix: one allocation per
 *   array, never one per string (vocabularies hold 150k strings).
 *   Two open-addressing hash tables (power-of-two capacity, at least twice the
 *   entries, -1 = empty) map key -> kv index and tensor name -> tensor index.
 *
 *   A split model (llama.cpp's gguf-split: files prefix-00001-of-0000N.gguf ..., each
 *   a complete GGUF; the first holds all metadata, every one its own tensor infos and
 *   data section; keys split.no (u16, 0-based), split.count (u16) and
 *   split.tensors.count (i32, tensors of all files)), opened by gguf_open at its first
 *   file: that file's context also owns shards[n_files - 1], the later files, each a
 *   context of its own (buffer, kv, tensor_names); `tensors` and `tensor_index` then
 *   cover all files in file order, each tensor's data and offset in its own file,
 *   names owned by its file's tensor_names (this file owns n_names of them);
 *   total_size is the bytes of all files (= size for one file).
 *
 * Invariants (all established by parse() before gguf_open* returns 0)
 *   - every length, count and offset read from the file was checked against the bytes
 *     that remain, before any allocation sized by it or any loop bounded by it;
 *   - keys and tensor names are non-empty, contain no NUL byte and are unique;
 *     string *values* may contain NUL bytes: gguf_get_str() then shows the prefix
 *     before the first NUL, gguf_get_str_n() and gguf_get_arr_str() the full length;
 *   - nested arrays (an array whose element type is array) are rejected;
 *   - general.alignment, when present, is a u32 power of two (default 32);
 *   - data_off = header end rounded up to alignment (a file without tensor data may
 *     end before that padding; data_off is then the file size); each tensor has a
 *     known type, 0..4 dims with ne >= 0 (unused dims 1), ne[0] a multiple of its
 *     block size, an element count and byte size without overflow, an aligned offset,
 *     lies inside the file, and no two non-empty tensors overlap;
 *   - a split model: every file's split.count equals the first's, file i has
 *     split.no = i and the name the first's prefix gives it, split.tensors.count (when
 *     present) is the same in all files and equals the tensors they hold together,
 *     no tensor name occurs in two files; a later shard opened directly is refused;
 *   - a failed open frees everything it allocated and fills err with one line that
 *     names the file and the field.
 */
#define _GNU_SOURCE
#include "formats/gguf.h"

#include "base/error.h"
#include "formats/quant.h"
#include "formats/ggml_type_name.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY_LEN 65535
#define GGUF_HUGEPAGE_MIN ((size_t)32 << 20) /* worth a madvise above this size */

enum { BUF_CALLER = 0, BUF_ANON = 1, BUF_FILEMAP = 2 };

typedef struct gguf_kv {
    char *key; /* NUL-terminated copy, key_len bytes + NUL */
    size_t key_len;
    gguf_vtype type;
    gguf_vtype elem;    /* element type when type == GGUF_T_ARRAY, else type */
    uint64_t n;         /* element count of an array; 1 for a scalar or string */
    const uint8_t *val; /* scalar bytes | string bytes | first array element */
    const uint8_t *raw; /* the encoded value as in the file, after the type field */
    size_t raw_len;
    char *str; /* string value: NUL-terminated copy (str_len + 1 bytes) */
    size_t str_len;
    size_t *str_off; /* string arrays: [n] offset of element i's length from val */
} gguf_kv;

typedef struct name_index {
    int64_t *slot; /* [cap] entry index or -1 */
    size_t cap;    /* power of two, >= 2 * entries */
} name_index;

struct gguf_ctx {
    const uint8_t *buf; /* [size] the whole file */
    size_t size;
    int buf_kind;   /* BUF_* : how to release buf */
    size_t map_len; /* bytes mapped (BUF_ANON, BUF_FILEMAP) */
    uint32_t version;
    size_t alignment;
    size_t data_off; /* start of the data section; <= size */
    int64_t n_kv;
    gguf_kv *kv; /* [n_kv] */
    int64_t n_tensors;
    gguf_tensor *tensors; /* [n_tensors]; names point to tensor_names[i] or a shard's */
    char **tensor_names;  /* [n_names] NUL-terminated copies: this file's tensors */
    int64_t n_names;
    name_index kv_index;
    name_index tensor_index;
    int n_files;       /* 1, or split.count of a split model opened at its first shard */
    gguf_ctx **shards; /* [n_files - 1] shards 2..n_files, each a parsed file of its own */
    size_t total_size; /* bytes of all n_files files */
};

/* Defined with the queries below; the split loader reads its keys through them. */
static const gguf_kv *find_kv(const gguf_ctx *g, const char *key);
static bool num_is_int(gguf_vtype t);
static int64_t num_get_i(gguf_vtype t, const uint8_t *p, bool *overflow);

/* ---- little-endian decoding ---------------------------------------------- */

static uint16_t rd_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd_u64(const uint8_t *p) { return (uint64_t)rd_u32(p) | ((uint64_t)rd_u32(p + 4) << 32); }

size_t gguf_vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_T_UINT8:
    case GGUF_T_INT8:
    case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16:
    case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32:
    case GGUF_T_INT32:
    case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64:
    case GGUF_T_INT64:
    case GGUF_T_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *vtype_name(uint32_t t)
{
    static const char *names[GGUF_T_COUNT] = { "u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                               "bool", "string", "array", "u64", "i64", "f64" };
    return t < GGUF_T_COUNT ? names[t] : "unknown";
}

/* ---- the hash index of names ---------------------------------------------- */

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int index_init(name_index *ix, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2; /* n is bounded by the file size: no overflow */
    ix->slot = malloc(cap * sizeof *ix->slot);
    if (!ix->slot) return KVI_E_NOMEM;
    for (size_t i = 0; i < cap; i++) ix->slot[i] = -1;
    ix->cap = cap;
    return 0;
}

/* Slot of `name` (found: *ix->slot >= 0) or the empty slot where it belongs.
 * name_at(i) gives the NUL-terminated name of entry i. */
typedef const char *(*name_at_fn)(const gguf_ctx *g, int64_t i);

static int64_t *index_slot(const name_index *ix, const gguf_ctx *g, name_at_fn name_at, const char *name,
                           size_t len)
{
    size_t mask = ix->cap - 1;
    size_t h = (size_t)name_hash(name, len) & mask;
    for (;;) {
        int64_t *s = &ix->slot[h];
        if (*s < 0) return s;
        const char *other = name_at(g, *s);
        if (strncmp(other, name, len) == 0 && other[len] == 0) return s;
        h = (h + 1) & mask;
    }
}

static const char *kv_name_at(const gguf_ctx *g, int64_t i) { return g->kv[i].key; }
static const char *tensor_name_at(const gguf_ctx *g, int64_t i) { return g->tensors[i].name; }

/* ---- the parsing cursor ---------------------------------------------------- */

typedef struct cursor {
    const uint8_t *buf;
    size_t size;
    size_t pos;       /* <= size */
    const char *file; /* for messages */
    kvi_error *err;
} cursor;

static size_t cur_left(const cursor *c) { return c->size - c->pos; }

static int cur_need(cursor *c, size_t n, const char *what)
{
    if (cur_left(c) < n)
        return err_set(c->err, KVI_E_FORMAT,
                       "gguf: %s: %s at offset %zu needs %zu bytes, only %zu left (truncated file?)", c->file,
                       what, c->pos, n, cur_left(c));
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what)
{
    int rc = cur_need(c, 4, what);
    if (rc) return rc;
    *v = rd_u32(c->buf + c->pos);
    c->pos += 4;
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, const char *what)
{
    int rc = cur_need(c, 8, what);
    if (rc) return rc;
    *v = rd_u64(c->buf + c->pos);
    c->pos += 8;
    return 0;
}

/* A string: u64 length then bytes. *s points into the buffer. */
static int cur_str(cursor *c, const uint8_t **s, size_t *len, const char *what)
{
    uint64_t n = 0;
    *s = NULL;
    *len = 0;
    int rc = cur_u64(c, &n, what);
    if (rc) return rc;
    if (n > cur_left(c))
        return err_set(c->err, KVI_E_FORMAT,
                       "gguf: %s: %s at offset %zu: length %llu exceeds the %zu bytes left", c->file, what,
                       c->pos - 8, (unsigned long long)n, cur_left(c));
    *s = c->buf + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

static char *dup_bytes(const uint8_t *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* A key or tensor name: non-empty, no NUL byte; returns a NUL-terminated copy. */
static int cur_name(cursor *c, char **out, size_t *out_len, const char *what, int64_t idx)
{
    const uint8_t *s = NULL;
    size_t n = 0;
    int rc = cur_str(c, &s, &n, what);
    if (rc) return rc;
    if (n == 0)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: %s #%lld is empty", c->file, what, (long long)idx);
    if (memchr(s, 0, n))
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: %s #%lld contains a NUL byte", c->file, what,
                       (long long)idx);
    *out = dup_bytes(s, n);
    if (!*out) return err_set(c->err, KVI_E_NOMEM, "gguf: %s: out of memory", c->file);
    *out_len = n;
    return 0;
}

/* ---- key/values ------------------------------------------------------------ */

static int parse_array(cursor *c, gguf_kv *kv)
{
    uint32_t elem;
    uint64_t n;
    int rc = cur_u32(c, &elem, "array element type");
    if (rc) return rc;
    if (elem == GGUF_T_ARRAY)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: key '%s': nested arrays are not supported", c->file,
                       kv->key);
    if (elem >= GGUF_T_COUNT)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: key '%s': unknown array element type %u", c->file,
                       kv->key, elem);
    if ((rc = cur_u64(c, &n, "array count"))) return rc;
    kv->elem = (gguf_vtype)elem;
    kv->n = n;
    kv->val = c->buf + c->pos;
    if (elem != GGUF_T_STRING) {
        size_t es = gguf_vtype_size(elem);
        if (n > cur_left(c) / es)
            return err_set(c->err, KVI_E_FORMAT,
                           "gguf: %s: key '%s': array of %llu %s elements exceeds the %zu bytes left",
                           c->file, kv->key, (unsigned long long)n, vtype_name(elem), cur_left(c));
        c->pos += (size_t)n * es;
        return 0;
    }
    /* Each string takes at least its 8-byte length: bound the table by the bytes left. */
    if (n > cur_left(c) / 8)
        return err_set(c->err, KVI_E_FORMAT,
                       "gguf: %s: key '%s': array of %llu strings exceeds the %zu bytes left", c->file,
                       kv->key, (unsigned long long)n, cur_left(c));
    if (n) {
        kv->str_off = malloc((size_t)n * sizeof *kv->str_off);
        if (!kv->str_off) return err_set(c->err, KVI_E_NOMEM, "gguf: %s: out of memory", c->file);
    }
    size_t base = c->pos;
    for (uint64_t i = 0; i < n; i++) {
        kv->str_off[i] = c->pos - base;
        uint64_t len = cur_left(c) >= 8 ? rd_u64(c->buf + c->pos) : 0;
        if (cur_left(c) < 8 || len > cur_left(c) - 8)
            return err_set(c->err, KVI_E_FORMAT,
                           "gguf: %s: key '%s': string #%llu at offset %zu: %s (%zu bytes left)", c->file,
                           kv->key, (unsigned long long)i, c->pos,
                           cur_left(c) < 8 ? "length truncated" : "length past end of file", cur_left(c));
        c->pos += 8 + (size_t)len;
    }
    return 0;
}

static int parse_kv(cursor *c, gguf_ctx *g, int64_t i)
{
    gguf_kv *kv = &g->kv[i];
    int rc = cur_name(c, &kv->key, &kv->key_len, "key", i);
    if (rc) return rc;
    if (kv->key_len > GGUF_MAX_KEY_LEN)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: key #%lld is %zu bytes long (max %d)", c->file,
                       (long long)i, kv->key_len, GGUF_MAX_KEY_LEN);
    uint32_t type;
    if ((rc = cur_u32(c, &type, "value type"))) return rc;
    if (type >= GGUF_T_COUNT)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: key '%s': unknown value type %u", c->file, kv->key,
                       type);
    kv->type = kv->elem = (gguf_vtype)type;
    kv->n = 1;
    kv->raw = c->buf + c->pos;
    if (type == GGUF_T_ARRAY) {
        if ((rc = parse_array(c, kv))) return rc;
    } else if (type == GGUF_T_STRING) {
        const uint8_t *s = NULL;
        if ((rc = cur_str(c, &s, &kv->str_len, "string value"))) return rc;
        kv->val = s;
        kv->str = dup_bytes(s, kv->str_len);
        if (!kv->str) return err_set(c->err, KVI_E_NOMEM, "gguf: %s: out of memory", c->file);
    } else {
        size_t es = gguf_vtype_size(type);
        char what[96];
        snprintf(what, sizeof what, "value of key '%.60s'", kv->key);
        if ((rc = cur_need(c, es, what))) return rc;
        kv->val = c->buf + c->pos;
        c->pos += es;
    }
    kv->raw_len = (size_t)(c->buf + c->pos - kv->raw);

    int64_t *slot = index_slot(&g->kv_index, g, kv_name_at, kv->key, kv->key_len);
    if (*slot >= 0)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: duplicate key '%s' (entries %lld and %lld)", c->file,
                       kv->key, (long long)*slot, (long long)i);
    *slot = i;
    return 0;
}

/* ---- tensors --------------------------------------------------------------- */

static int parse_tensor_info(cursor *c, gguf_ctx *g, int64_t i, uint32_t *type_out)
{
    gguf_tensor *t = &g->tensors[i];
    size_t len;
    int rc = cur_name(c, &g->tensor_names[i], &len, "tensor name", i);
    if (rc) return rc;
    t->name = g->tensor_names[i];
    uint32_t n_dims;
    if ((rc = cur_u32(c, &n_dims, "tensor n_dims"))) return rc;
    if (n_dims > GGUF_MAX_DIMS)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: tensor '%s': n_dims %u (max %d)", c->file, t->name,
                       n_dims, GGUF_MAX_DIMS);
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        if ((rc = cur_u64(c, &ne, "tensor dimension"))) return rc;
        if (ne > (uint64_t)INT64_MAX)
            return err_set(c->err, KVI_E_FORMAT, "gguf: %s: tensor '%s': ne[%u] = %lld is negative", c->file,
                           t->name, d, (long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if ((rc = cur_u32(c, type_out, "tensor type"))) return rc;
    if ((rc = cur_u64(c, &t->offset, "tensor offset"))) return rc;

    int64_t *slot = index_slot(&g->tensor_index, g, tensor_name_at, t->name, len);
    if (*slot >= 0)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: duplicate tensor '%s' (tensors %lld and %lld)",
                       c->file, t->name, (long long)*slot, (long long)i);
    *slot = i;
    return 0;
}

/* Type, shape, size and placement of tensor i; data section of `avail` bytes. */
static int check_tensor(cursor *c, gguf_ctx *g, int64_t i, uint32_t type, size_t avail)
{
    gguf_tensor *t = &g->tensors[i];
    if (type >= KVI_TYPE_COUNT || !quant_type_known((kvi_type)type)) { /* name what it is: ggml_type_name.h */
        const char *fork, *gn = ggml_type_name(type, &fork);
        if (gn)
            return err_set(c->err, KVI_E_UNSUPPORTED,
                           "gguf: %s: tensor '%s': type %s (ggml type %u%s%s) is not supported by kvinfer",
                           c->file, t->name, gn, type, fork ? ", " : "", fork ? fork : "");
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: tensor '%s': unknown type %u (not a ggml type)",
                       c->file, t->name, type);
    }
    t->type = (kvi_type)type;
    int64_t be = quant_block_elems(t->type);
    size_t bb = quant_block_bytes(t->type);
    if (be <= 0 || bb == 0)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: tensor '%s': type %u has no block size", c->file,
                       t->name, type);
    /* The element count must fit int64_t; the rows' product is checked step by step. */
    uint64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = (uint64_t)t->ne[d];
        if (ne != 0 && nel > (uint64_t)INT64_MAX / ne)
            return err_set(c->err, KVI_E_FORMAT,
                           "gguf: %s: tensor '%s': element count overflows (ne = %lld x %lld x %lld x %lld)",
                           c->file, t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)t->ne[3]);
        nel *= ne;
    }
    if (t->ne[0] % be != 0)
        return err_set(c->err, KVI_E_FORMAT,
                       "gguf: %s: tensor '%s': ne[0] = %lld is not a multiple of the block size %lld",
                       c->file, t->name, (long long)t->ne[0], (long long)be);
    /* nel fits int64_t, so nel / be * bb overflows only if bb is large: check against SIZE_MAX. */
    uint64_t blocks = nel / (uint64_t)be;
    if (blocks != 0 && bb > SIZE_MAX / blocks)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: tensor '%s': byte size overflows", c->file, t->name);
    t->nbytes = (size_t)blocks * bb;
    if (t->offset % g->alignment != 0)
        return err_set(c->err, KVI_E_FORMAT,
                       "gguf: %s: tensor '%s': offset %llu is not a multiple of the alignment %zu", c->file,
                       t->name, (unsigned long long)t->offset, g->alignment);
    if (t->offset > avail || t->nbytes > avail - t->offset) {
        unsigned long long end = t->offset + (unsigned long long)t->nbytes;
        if (end < t->offset) end = ULLONG_MAX;
        return err_set(c->err, KVI_E_FORMAT,
                       "gguf: %s: tensor '%s': data [%llu..%llu) past end of file (data section %zu bytes at "
                       "%zu, file size %zu)",
                       c->file, t->name, (unsigned long long)t->offset, end, avail, g->data_off, g->size);
    }
    t->data = g->buf + g->data_off + t->offset;
    return 0;
}

typedef struct span {
    uint64_t off;
    size_t nbytes;
    int64_t idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static int check_overlaps(cursor *c, gguf_ctx *g)
{
    if (g->n_tensors < 2) return 0;
    span *s = malloc((size_t)g->n_tensors * sizeof *s);
    if (!s) return err_set(c->err, KVI_E_NOMEM, "gguf: %s: out of memory", c->file);
    size_t n = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (g->tensors[i].nbytes == 0) continue; /* an empty tensor occupies nothing */
        s[n].off = g->tensors[i].offset;
        s[n].nbytes = g->tensors[i].nbytes;
        s[n].idx = i;
        n++;
    }
    qsort(s, n, sizeof *s, span_cmp);
    int rc = 0;
    for (size_t k = 1; k < n; k++) {
        if (s[k - 1].off + s[k - 1].nbytes > s[k].off) { /* both lie inside the file: no overflow */
            rc =
                err_set(c->err, KVI_E_FORMAT, "gguf: %s: tensors '%s' [%llu..%llu) and '%s' [%llu..) overlap",
                        c->file, g->tensors[s[k - 1].idx].name, (unsigned long long)s[k - 1].off,
                        (unsigned long long)(s[k - 1].off + s[k - 1].nbytes), g->tensors[s[k].idx].name,
                        (unsigned long long)s[k].off);
            break;
        }
    }
    free(s);
    return rc;
}

/* ---- the whole file --------------------------------------------------------- */

static int read_alignment(cursor *c, gguf_ctx *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(g, "general.alignment");
    if (i < 0) return 0;
    const gguf_kv *kv = &g->kv[i];
    if (kv->type != GGUF_T_UINT32)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: general.alignment has type %s (must be u32)", c->file,
                       vtype_name(kv->type));
    uint32_t a = rd_u32(kv->val);
    if (a == 0 || (a & (a - 1)) != 0)
        return err_set(c->err, KVI_E_FORMAT, "gguf: %s: general.alignment = %u is not a nonzero power of two",
                       c->file, a);
    g->alignment = a;
    return 0;
}

static int parse(gguf_ctx *g, const char *file, kvi_error *err)
{
    cursor c = { .buf = g->buf, .size = g->size, .pos = 0, .file = file, .err = err };
    int rc = cur_need(&c, 4 + 4 + 8 + 8, "header");
    if (rc) return rc;
    if (memcmp(g->buf, "GGUF", 4) != 0)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: bad magic (not a GGUF file)", file);
    c.pos = 4;
    cur_u32(&c, &g->version, "version");
    if (g->version == 1)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: GGUF version 1 is not supported (only 2 and 3)", file);
    if (g->version != 2 && g->version != 3)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: GGUF version %u is not supported (only 2 and 3%s)", file,
                       g->version, (g->version & 0xFFFF) == 0 ? "; a big-endian file?" : "");
    uint64_t n_tensors, n_kv;
    cur_u64(&c, &n_tensors, "n_tensors");
    cur_u64(&c, &n_kv, "n_kv");
    /* The smallest kv is 8 (key length) + 1 (key) + 4 (type) + 1 (a u8 value) bytes;
     * the smallest tensor info 8 + 1 + 4 (n_dims 0) + 4 (type) + 8 (offset). */
    if (n_kv > cur_left(&c) / 14)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: n_kv = %llu does not fit the %zu bytes left", file,
                       (unsigned long long)n_kv, cur_left(&c));
    if (n_tensors > cur_left(&c) / 25)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: n_tensors = %llu does not fit the %zu bytes left", file,
                       (unsigned long long)n_tensors, cur_left(&c));

    g->kv = calloc((size_t)n_kv + 1, sizeof *g->kv);
    if (!g->kv || index_init(&g->kv_index, (size_t)n_kv))
        return err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", file);
    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int64_t)i + 1; /* entry i is freed by gguf_close even if half-parsed */
        if ((rc = parse_kv(&c, g, (int64_t)i))) return rc;
    }
    if ((rc = read_alignment(&c, g))) return rc;

    g->tensors = calloc((size_t)n_tensors + 1, sizeof *g->tensors);
    g->tensor_names = calloc((size_t)n_tensors + 1, sizeof *g->tensor_names);
    uint32_t *types = malloc(((size_t)n_tensors + 1) * sizeof *types);
    if (!g->tensors || !g->tensor_names || !types || index_init(&g->tensor_index, (size_t)n_tensors)) {
        free(types);
        return err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", file);
    }
    for (uint64_t i = 0; i < n_tensors && rc == 0; i++) {
        g->n_tensors = g->n_names = (int64_t)i + 1;
        rc = parse_tensor_info(&c, g, (int64_t)i, &types[i]);
    }
    if (rc) {
        free(types);
        return rc;
    }

    /* The data section starts at the next multiple of the alignment. A file without
     * tensor data may end before that padding. */
    size_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_off = pad <= cur_left(&c) ? c.pos + pad : g->size;
    bool data_start_ok = pad <= cur_left(&c);
    size_t avail = g->size - g->data_off;
    for (int64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        rc = check_tensor(&c, g, i, types[i], avail);
        if (rc == 0 && !data_start_ok && g->tensors[i].nbytes > 0)
            rc =
                err_set(err, KVI_E_FORMAT,
                        "gguf: %s: tensor '%s': data section would start at %zu, past end of file (size %zu)",
                        file, g->tensors[i].name, c.pos + pad, g->size);
    }
    free(types);
    if (rc) return rc;
    return check_overlaps(&c, g);
}

/* ---- opening and closing ---------------------------------------------------- */

static gguf_ctx *ctx_new(void)
{
    gguf_ctx *g = calloc(1, sizeof *g);
    if (g) {
        g->alignment = GGUF_DEFAULT_ALIGNMENT;
        g->n_files = 1;
    }
    return g;
}

void gguf_close(gguf_ctx *g)
{
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
        free(g->kv[i].str_off);
    }
    free(g->kv);
    for (int64_t i = 0; i < g->n_names; i++) free(g->tensor_names[i]);
    free(g->tensor_names);
    for (int i = 0; g->shards && i < g->n_files - 1; i++) gguf_close(g->shards[i]);
    free(g->shards);
    free(g->tensors);
    free(g->kv_index.slot);
    free(g->tensor_index.slot);
    if (g->buf_kind != BUF_CALLER && g->buf) munmap((void *)g->buf, g->map_len);
    free(g);
}

static int open_parsed(gguf_ctx *g, const char *file, gguf_ctx **out, kvi_error *err)
{
    int rc = parse(g, file, err);
    if (rc) {
        /* Names come from the file: keep the message one printable line. */
        if (err)
            for (char *p = err->msg; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open_mem(const void *buf, size_t len, gguf_ctx **out, kvi_error *err)
{
    if (!out) return err_set(err, KVI_E_INVALID, "gguf: <memory>: no output pointer");
    *out = NULL;
    if (!buf && len) return err_set(err, KVI_E_INVALID, "gguf: <memory>: NULL buffer");
    gguf_ctx *g = ctx_new();
    if (!g) return err_set(err, KVI_E_NOMEM, "gguf: <memory>: out of memory");
    g->buf = buf;
    g->size = g->total_size = len;
    g->buf_kind = BUF_CALLER;
    return open_parsed(g, "<memory>", out, err);
}

/* One slice [off, off + len) of the file read into dst + off by one thread. Most of
 * the time of a read from the page cache goes into faulting in (zeroing) the fresh
 * anonymous pages and copying, both per-CPU work: slices on several threads divide
 * the start-up time of a large model by the cores. */
typedef struct read_slice {
    int fd;
    uint8_t *dst; /* the whole buffer */
    size_t off, len;
    size_t done; /* bytes read */
    int err;     /* errno of a failed read, -1 when the file ended early, 0 */
} read_slice;

static void *read_slice_run(void *arg)
{
    read_slice *s = arg;
    while (s->done < s->len) {
        size_t chunk = s->len - s->done;
        if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
        ssize_t r = pread(s->fd, s->dst + s->off + s->done, chunk, (off_t)(s->off + s->done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            s->err = r == 0 ? -1 : errno;
            break;
        }
        s->done += (size_t)r;
    }
    return NULL;
}

#ifndef GGUF_READ_SLICES_MAX
#define GGUF_READ_SLICES_MAX 8
#endif
#define GGUF_READ_SLICE_MIN ((size_t)32 << 20) /* smaller files are read by one thread */

/* [0, size) in n slices with 2 MiB-aligned bounds, one per core (at most
 * GGUF_READ_SLICES_MAX, none smaller than GGUF_READ_SLICE_MIN but the last):
 * slice i is [off[i], off[i] + len[i]). Returns n >= 1. */
static size_t plan_slices(size_t size, size_t off[GGUF_READ_SLICES_MAX], size_t len[GGUF_READ_SLICES_MAX])
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t n = cores > 1 ? (size_t)cores : 1;
    if (n > GGUF_READ_SLICES_MAX) n = GGUF_READ_SLICES_MAX;
    if (n > size / GGUF_READ_SLICE_MIN) n = size / GGUF_READ_SLICE_MIN > 0 ? size / GGUF_READ_SLICE_MIN : 1;
    const size_t step = ((size / n) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    for (size_t i = 0; i < n; i++) {
        const size_t o = i * step < size ? i * step : size;
        const size_t end = (i + 1) * step < size && i + 1 < n ? (i + 1) * step : size;
        off[i] = o;
        len[i] = end - o;
    }
    return n;
}

/* fn(args + i * arg_size) for i < n: slices 1.. on their own threads, slice 0 here,
 * and any slice whose thread could not start here too. Returns when all are done. */
static void run_slices(size_t n, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t th[GGUF_READ_SLICES_MAX];
    bool started[GGUF_READ_SLICES_MAX] = { false };
    uint8_t *a = args;
    for (size_t i = 1; i < n; i++) started[i] = pthread_create(&th[i], NULL, fn, a + i * arg_size) == 0;
    fn(a);
    for (size_t i = 1; i < n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fn(a + i * arg_size);
    }
}

/* Reads the whole file into an anonymous mapping (page-aligned, so 64-aligned). */
/* Reads [off[r], off[r] + len[r]) of the file for r < n_ranges into the same
 * offsets of a fresh private anonymous image of size bytes (the rest stays
 * untouched: zero pages that cost no memory until written). */
static int read_ranges(int fd, size_t size, const size_t *roff, const size_t *rlen, size_t n_ranges,
                       const char *path, void **out, kvi_error *err)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return err_set(err, KVI_E_NOMEM, "gguf: %s: cannot allocate %zu bytes: %s", path, size,
                       strerror(errno));
#ifdef MADV_HUGEPAGE
    if (size >= GGUF_HUGEPAGE_MIN) (void)madvise(p, size, MADV_HUGEPAGE); /* a hint only */
#endif
    for (size_t r = 0; r < n_ranges; r++) {
        size_t off[GGUF_READ_SLICES_MAX], len[GGUF_READ_SLICES_MAX];
        const size_t n = plan_slices(rlen[r], off, len);
        read_slice sl[GGUF_READ_SLICES_MAX]; /* [n] */
        for (size_t i = 0; i < n; i++)
            sl[i] = (read_slice){ .fd = fd, .dst = p, .off = roff[r] + off[i], .len = len[i] };
        run_slices(n, read_slice_run, sl, sizeof sl[0]);
        for (size_t i = 0; i < n; i++) {
            if (sl[i].err == 0) continue;
            const size_t at = sl[i].off + sl[i].done;
            const int e = sl[i].err;
            munmap(p, size);
            if (e < 0)
                return err_set(err, KVI_E_IO,
                               "gguf: %s: file shrank while reading (ended before byte %zu of %zu)", path, at,
                               size);
            return err_set(err, KVI_E_IO, "gguf: %s: read failed at offset %zu: %s", path, at, strerror(e));
        }
    }
    (void)mprotect(p, size, PROT_READ); /* nothing writes the file image after this */
    *out = p;
    return 0;
}

static int read_whole(int fd, size_t size, const char *path, void **out, kvi_error *err)
{
    const size_t off = 0;
    return read_ranges(fd, size, &off, &size, 1, path, out, err);
}

/* A read-only private mapping of the file at a 2 MiB-aligned address (when the file
 * is large enough to hold a huge page): page-cache folios of 2 MiB can then be
 * mapped by one page-table entry each (fewer TLB misses when decode streams the
 * weights). A region 2 MiB larger is reserved, the file mapped over it at the
 * aligned address, the slack on both sides unmapped: exactly [p, p + size) remains,
 * so gguf_close's munmap(buf, map_len) is unchanged. MAP_FAILED on failure. */
static void *map_file_aligned(int fd, size_t size)
{
    const size_t huge = (size_t)2 << 20;
    if (size < GGUF_HUGEPAGE_MIN || size > SIZE_MAX - huge)
        return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    uint8_t *r = mmap(NULL, size + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    uint8_t *a = (uint8_t *)(((uintptr_t)r + huge - 1) & ~(uintptr_t)(huge - 1));
    void *p = mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(r, size + huge);
        return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t end = ((size_t)(a - r) + size + page - 1) / page * page; /* file pages end here */
    if (a > r) munmap(r, (size_t)(a - r));
    if (end < size + huge) munmap(r + end, size + huge - end);
    return p;
}

/* One page-aligned slice of a file mapping populated by one thread: the kernel's
 * MADV_POPULATE_READ (Linux 5.14+), else one read per page. */
typedef struct fault_slice {
    const uint8_t *p;
    size_t len;
} fault_slice;

static void *fault_slice_run(void *arg)
{
    const fault_slice *s = arg;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)s->p, s->len, MADV_POPULATE_READ) == 0) return NULL;
#endif
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < s->len; i += 4096) sink ^= s->p[i];
    (void)sink;
    return NULL;
}

static void prefault_file(const gguf_ctx *g)
{
    if (g->buf_kind != BUF_FILEMAP || !g->buf || g->map_len == 0) return;
    const uint8_t *p = g->buf;
    const size_t size = g->map_len;
#ifdef MADV_HUGEPAGE
    if (size >= GGUF_HUGEPAGE_MIN) (void)madvise((void *)p, size, MADV_HUGEPAGE); /* a hint only */
#endif
    size_t off[GGUF_READ_SLICES_MAX], len[GGUF_READ_SLICES_MAX];
    const size_t n = plan_slices(size, off, len);
    fault_slice sl[GGUF_READ_SLICES_MAX]; /* [n] */
    for (size_t i = 0; i < n; i++) sl[i] = (fault_slice){ .p = p + off[i], .len = len[i] };
    run_slices(n, fault_slice_run, sl, sizeof sl[0]);
}

void gguf_prefault(const gguf_ctx *g)
{
    if (!g) return;
    prefault_file(g);
    for (int i = 0; g->shards && i < g->n_files - 1; i++) prefault_file(g->shards[i]);
}

/* One file, mapped or read, parsed; split keys not followed. */
static int open_file(const char *path, bool use_mmap, gguf_ctx **out, kvi_error *err)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then refuses it);
     * reads of a regular file are unaffected. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return err_set(err, KVI_E_IO, "gguf: %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, KVI_E_IO, "gguf: %s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, KVI_E_IO, "gguf: %s: not a regular file", path);
    }
    int64_t fsize = (int64_t)st.st_size;
    if (fsize < 24) {
        close(fd);
        return err_set(err, KVI_E_FORMAT, "gguf: %s: file of %lld bytes is too small for a GGUF header", path,
                       (long long)fsize);
    }
    if ((uint64_t)fsize > (uint64_t)SIZE_MAX) {
        close(fd);
        return err_set(err, KVI_E_UNSUPPORTED, "gguf: %s: file of %lld bytes does not fit in memory", path,
                       (long long)fsize);
    }
    size_t size = (size_t)fsize;
    gguf_ctx *g = ctx_new();
    if (!g) {
        close(fd);
        return err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", path);
    }
    void *p = NULL;
    if (use_mmap) {
        p = map_file_aligned(fd, size);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(g);
            return err_set(err, KVI_E_IO, "gguf: %s: mmap failed: %s", path, strerror(e));
        }
        g->buf_kind = BUF_FILEMAP;
    } else {
        int rc = read_whole(fd, size, path, &p, err);
        if (rc) {
            close(fd);
            free(g);
            return rc;
        }
        g->buf_kind = BUF_ANON;
    }
    close(fd);
    g->buf = p;
    g->size = g->total_size = size;
    g->map_len = size;
    return open_parsed(g, path, out, err);
}

/* ---- a part of the tensors (a pipeline stage) --------------------------------- */

typedef struct byte_range {
    size_t off, len;
} byte_range;

static int range_cmp(const void *a, const void *b)
{
    const byte_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

int gguf_open_filtered(const char *path, bool use_mmap, gguf_keep_fn keep, void *user, gguf_ctx **out,
                       kvi_error *err)
{
    if (!out || !path) return err_set(err, KVI_E_INVALID, "gguf: no path or output pointer");
    *out = NULL;
    if (!keep || use_mmap) return gguf_open(path, use_mmap, out, err); /* a mapping reads what is used */
    gguf_ctx *map = NULL; /* the header parsed through a mapping: only its pages are read */
    int rc = gguf_open(path, true, &map, err);
    if (rc) return rc;
    if (map->n_files > 1) { /* split models: read whole */
        gguf_close(map);
        return gguf_open(path, false, out, err);
    }
    byte_range *r = malloc(((size_t)map->n_tensors + 1) * sizeof *r); /* [n_tensors + 1] */
    if (!r) {
        gguf_close(map);
        return err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", path);
    }
    size_t n = 0;
    r[n++] = (byte_range){ 0, map->data_off };
    for (int64_t i = 0; i < map->n_tensors; i++) {
        const gguf_tensor *t = &map->tensors[i];
        if (t->nbytes && keep(map, t, user))
            r[n++] = (byte_range){ (size_t)((const uint8_t *)t->data - map->buf), t->nbytes };
    }
    qsort(r, n, sizeof *r, range_cmp);
    size_t m = 0; /* merged: ranges closer than 64 KiB become one read */
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].off <= r[m - 1].off + r[m - 1].len + ((size_t)64 << 10)) {
            const size_t end = r[i].off + r[i].len;
            if (end > r[m - 1].off + r[m - 1].len) r[m - 1].len = end - r[m - 1].off;
        } else {
            r[m++] = r[i];
        }
    }
    const size_t size = map->size;
    size_t *roff = malloc(2 * m * sizeof *roff); /* [2 m]: offsets, then lengths */
    int fd = roff ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
    if (!roff || fd < 0) {
        const int e = errno;
        free(r);
        free(roff);
        gguf_close(map);
        return roff ? err_set(err, KVI_E_IO, "gguf: %s: cannot open: %s", path, strerror(e))
                    : err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", path);
    }
    for (size_t i = 0; i < m; i++) {
        roff[i] = r[i].off;
        roff[m + i] = r[i].len;
    }
    free(r);
    void *p = NULL;
    struct stat st;
    rc = fstat(fd, &st) != 0 || (uint64_t)st.st_size != (uint64_t)size
             ? err_set(err, KVI_E_IO, "gguf: %s: the file changed while it was opened", path)
             : read_ranges(fd, size, roff, roff + m, m, path, &p, err);
    close(fd);
    free(roff);
    gguf_ctx *g = NULL;
    if (!rc) {
        g = ctx_new();
        if (!g) {
            munmap(p, size);
            rc = err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", path);
        } else {
            g->buf = p;
            g->size = g->total_size = g->map_len = size;
            g->buf_kind = BUF_ANON;
            rc = open_parsed(g, path, &g, err);
        }
    }
    /* the image's table must be the one the ranges came from */
    bool same = !rc && g->n_tensors == map->n_tensors && g->data_off == map->data_off;
    for (int64_t i = 0; same && i < g->n_tensors; i++)
        same = (const uint8_t *)g->tensors[i].data - g->buf == (const uint8_t *)map->tensors[i].data - map->buf &&
               g->tensors[i].nbytes == map->tensors[i].nbytes;
    gguf_close(map);
    if (rc) return rc;
    if (!same) {
        gguf_close(g);
        return err_set(err, KVI_E_IO, "gguf: %s: the file changed while it was opened", path);
    }
    *out = g;
    return 0;
}

/* ---- split models (llama.cpp's gguf-split) ------------------------------------ */

/* The split keys of one file: split.count (a u16 as written; absent or 0 = not
 * split, read as 1), split.no (0-based shard number, default 0, below the count)
 * and split.tensors.count (tensors of all shards, an i32; -1 when absent). */
typedef struct split_keys {
    int64_t no, count, n_tensors;
    bool has_count;
} split_keys;

/* Integer key `key` in [0, hi] into *out (left as is when absent; *found tells). */
static int split_int(const gguf_ctx *g, const char *file, const char *key, int64_t hi, int64_t *out,
                     bool *found, kvi_error *err)
{
    const gguf_kv *kv = find_kv(g, key);
    if (found) *found = kv != NULL;
    if (!kv) return 0;
    if (kv->type == GGUF_T_ARRAY || !num_is_int(kv->type) || kv->type == GGUF_T_BOOL)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: %s has type %s, expected an integer", file, key,
                       vtype_name(kv->type));
    bool ovf;
    *out = num_get_i(kv->type, kv->val, &ovf);
    if (ovf || *out < 0 || *out > hi)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: %s = %lld is out of range [0, %lld]", file, key,
                       ovf ? (long long)INT64_MAX : (long long)*out, (long long)hi);
    return 0;
}

static int split_read_keys(const gguf_ctx *g, const char *file, split_keys *k, kvi_error *err)
{
    k->no = 0;
    k->count = 1;
    k->n_tensors = -1;
    int rc;
    if ((rc = split_int(g, file, "split.count", UINT16_MAX, &k->count, &k->has_count, err)) ||
        (rc = split_int(g, file, "split.no", UINT16_MAX, &k->no, NULL, err)) ||
        (rc = split_int(g, file, "split.tensors.count", INT32_MAX, &k->n_tensors, NULL, err)))
        return rc;
    if (k->count == 0) k->count = 1; /* how llama.cpp marks a merged file */
    if (k->no >= k->count)
        return err_set(err, KVI_E_FORMAT, "gguf: %s: split.no = %lld is not below split.count = %lld", file,
                       (long long)k->no, (long long)k->count);
    return 0;
}

/* Length of the prefix of `path` when it ends in -NNNNN-of-MMMMM.gguf for shard
 * `no` (0-based) of `count` (llama.cpp's llama_split_prefix), else 0. */
static size_t split_prefix_len(const char *path, int64_t no, int64_t count)
{
    char post[48];
    snprintf(post, sizeof post, "-%05lld-of-%05lld.gguf", (long long)(no + 1), (long long)count);
    const size_t n = strlen(path), m = strlen(post);
    return n > m && strcmp(path + n - m, post) == 0 ? n - m : 0;
}

/* Appends " (shard i+1 of count)" to err's message where it fits. */
static int err_shard(kvi_error *err, int rc, int i, int64_t count)
{
    if (err) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, " (shard %d of %lld)", i + 1, (long long)count);
    }
    return rc;
}

/* Opens shard number i (0-based, i >= 1: prefix-<i+1>-of-<count>.gguf) into
 * g->shards[i - 1] and checks its split keys against the first file's. */
static int split_open_shard(gguf_ctx *g, const char *path, size_t plen, int i, const split_keys *k,
                            bool use_mmap, kvi_error *err)
{
    char *sp = malloc(plen + 48);
    if (!sp) return err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", path);
    memcpy(sp, path, plen);
    snprintf(sp + plen, 48, "-%05d-of-%05lld.gguf", i + 1, (long long)k->count);
    int rc = open_file(sp, use_mmap, &g->shards[i - 1], err);
    if (rc) {
        free(sp);
        return err_shard(err, rc, i, k->count);
    }
    split_keys s;
    rc = split_read_keys(g->shards[i - 1], sp, &s, err);
    if (rc == 0 && (!s.has_count || s.count != k->count))
        rc = err_set(err, KVI_E_FORMAT, "gguf: %s: split.count = %lld%s differs from the first shard's %lld",
                     sp, (long long)s.count, s.has_count ? "" : " (absent)", (long long)k->count);
    if (rc == 0 && s.no != i)
        rc = err_set(err, KVI_E_FORMAT, "gguf: %s: split.no = %lld, expected %d for this file name", sp,
                     (long long)s.no, i);
    if (rc == 0 && s.n_tensors != k->n_tensors)
        rc = err_set(err, KVI_E_FORMAT,
                     "gguf: %s: split.tensors.count = %lld differs from the first shard's %lld", sp,
                     (long long)s.n_tensors, (long long)k->n_tensors);
    free(sp);
    return rc;
}

/* File index (0 = the first) of merged tensor j, tensors in file order. */
static int split_file_of(const gguf_ctx *g, int64_t j, int64_t n_first)
{
    if (j < n_first) return 0;
    j -= n_first;
    int f = 1;
    while (f < g->n_files - 1 && j >= g->shards[f - 1]->n_tensors) j -= g->shards[f - 1]->n_tensors, f++;
    return f;
}

/* One tensor table and name index over all files, tensors in file order; each
 * tensor's data stays in its own file's buffer. */
static int split_merge(gguf_ctx *g, const char *path, size_t plen, int64_t n_total, kvi_error *err)
{
    gguf_tensor *all = malloc(((size_t)n_total + 1) * sizeof *all);
    name_index ix = { 0 };
    if (!all || index_init(&ix, (size_t)n_total)) {
        free(all);
        return err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", path);
    }
    const int64_t n_first = g->n_tensors;
    int64_t n = 0;
    for (int f = 0; f < g->n_files; f++) {
        const gguf_ctx *s = f == 0 ? g : g->shards[f - 1];
        memcpy(all + n, s->tensors, (size_t)s->n_tensors * sizeof *all);
        n += s->n_tensors;
    }
    gguf_tensor *own = g->tensors;
    name_index own_ix = g->tensor_index;
    g->tensors = all; /* index_slot reads names through g */
    for (int64_t j = 0; j < n_total; j++) {
        int64_t *slot = index_slot(&ix, g, tensor_name_at, all[j].name, strlen(all[j].name));
        if (*slot < 0) {
            *slot = j;
            continue;
        }
        const int a = split_file_of(g, *slot, n_first), b = split_file_of(g, j, n_first);
        const long long cnt = g->n_files;
        int rc = err_set(err, KVI_E_FORMAT,
                         "gguf: %.*s-%05d-of-%05lld.gguf: tensor '%s' is also in %.*s-%05d-of-%05lld.gguf",
                         (int)plen, path, b + 1, cnt, all[j].name, (int)plen, path, a + 1, cnt);
        g->tensors = own;
        free(all);
        free(ix.slot);
        return rc;
    }
    free(own);
    free(own_ix.slot);
    g->tensor_index = ix;
    g->n_tensors = n_total;
    return 0;
}

/* A file opened by gguf_open: when its split keys make it the first shard of a split
 * model, opens the others (prefix-NNNNN-of-MMMMM.gguf beside it) and merges their
 * tensors; when they make it a later shard, refuses it. Plain files pass unchanged. */
static int split_open(gguf_ctx *g, const char *path, bool use_mmap, kvi_error *err)
{
    split_keys k;
    int rc = split_read_keys(g, path, &k, err);
    if (rc || k.count == 1) return rc;
    const size_t plen = split_prefix_len(path, k.no, k.count);
    if (k.no != 0) {
        if (plen)
            return err_set(err, KVI_E_FORMAT,
                           "gguf: %s: shard %lld of %lld of a split model: open the first shard, "
                           "%.*s-00001-of-%05lld.gguf",
                           path, (long long)k.no + 1, (long long)k.count, (int)plen, path,
                           (long long)k.count);
        return err_set(err, KVI_E_FORMAT,
                       "gguf: %s: shard %lld of %lld of a split model: open the first shard", path,
                       (long long)k.no + 1, (long long)k.count);
    }
    if (plen == 0)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: %s: first of %lld shards, but its name does not end in -00001-of-%05lld.gguf, "
                       "so the others cannot be found",
                       path, (long long)k.count, (long long)k.count);
    g->shards = calloc((size_t)k.count - 1, sizeof *g->shards);
    if (!g->shards) return err_set(err, KVI_E_NOMEM, "gguf: %s: out of memory", path);
    g->n_files = (int)k.count;
    size_t total = g->size;
    int64_t n_total = g->n_tensors;
    for (int i = 1; i < g->n_files; i++) {
        if ((rc = split_open_shard(g, path, plen, i, &k, use_mmap, err))) return rc;
        const gguf_ctx *s = g->shards[i - 1];
        if (s->size > SIZE_MAX - total)
            return err_set(err, KVI_E_UNSUPPORTED, "gguf: %s: the shards' sizes overflow", path);
        total += s->size;
        n_total += s->n_tensors;
    }
    if (k.n_tensors >= 0 && k.n_tensors != n_total)
        return err_set(err, KVI_E_FORMAT,
                       "gguf: %s: split.tensors.count = %lld, but the %lld shards hold %lld tensors", path,
                       (long long)k.n_tensors, (long long)k.count, (long long)n_total);
    if ((rc = split_merge(g, path, plen, n_total, err))) return rc;
    g->total_size = total;
    return 0;
}

int gguf_open(const char *path, bool use_mmap, gguf_ctx **out, kvi_error *err)
{
    if (!out || !path) return err_set(err, KVI_E_INVALID, "gguf: no path or output pointer");
    *out = NULL;
    gguf_ctx *g = NULL;
    int rc = open_file(path, use_mmap, &g, err);
    if (rc) return rc;
    if ((rc = split_open(g, path, use_mmap, err))) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* ---- queries ------------------------------------------------------------------ */

uint32_t gguf_version(const gguf_ctx *g) { return g->version; }
size_t gguf_alignment(const gguf_ctx *g) { return g->alignment; }
size_t gguf_file_size(const gguf_ctx *g) { return g->total_size; }
int gguf_n_files(const gguf_ctx *g) { return g->n_files; }
size_t gguf_data_offset(const gguf_ctx *g) { return g->data_off; }
const void *gguf_file_data(const gguf_ctx *g) { return g->buf; }

int64_t gguf_n_kv(const gguf_ctx *g) { return g->n_kv; }

const char *gguf_kv_key(const gguf_ctx *g, int64_t i)
{
    return (i >= 0 && i < g->n_kv) ? g->kv[i].key : NULL;
}

gguf_vtype gguf_kv_type(const gguf_ctx *g, int64_t i)
{
    return (i >= 0 && i < g->n_kv) ? g->kv[i].type : GGUF_T_COUNT;
}

int gguf_kv_raw(const gguf_ctx *g, int64_t i, gguf_vtype *type, const void **raw, size_t *len)
{
    if (i < 0 || i >= g->n_kv) return -1;
    *type = g->kv[i].type;
    *raw = g->kv[i].raw;
    *len = g->kv[i].raw_len;
    return 0;
}

int64_t gguf_find_key(const gguf_ctx *g, const char *key)
{
    if (!key || !g->kv_index.slot) return -1;
    return *index_slot(&g->kv_index, g, kv_name_at, key, strlen(key));
}

static const gguf_kv *find_kv(const gguf_ctx *g, const char *key)
{
    int64_t i = gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

/* Element i of a fixed-size numeric array (or the scalar, i = 0) as int64 / double.
 * is_int tells whether the type is an integer (or bool) type. */
static bool num_is_int(gguf_vtype t)
{
    return t != GGUF_T_FLOAT32 && t != GGUF_T_FLOAT64 && gguf_vtype_size(t) != 0;
}

static int64_t num_get_i(gguf_vtype t, const uint8_t *p, bool *overflow)
{
    *overflow = false;
    switch (t) {
    case GGUF_T_UINT8:
    case GGUF_T_BOOL: return p[0];
    case GGUF_T_INT8: return (int8_t)p[0];
    case GGUF_T_UINT16: return rd_u16(p);
    case GGUF_T_INT16: return (int16_t)rd_u16(p);
    case GGUF_T_UINT32: return rd_u32(p);
    case GGUF_T_INT32: return (int32_t)rd_u32(p);
    case GGUF_T_INT64: return (int64_t)rd_u64(p);
    case GGUF_T_UINT64: {
        uint64_t v = rd_u64(p);
        if (v > (uint64_t)INT64_MAX) *overflow = true;
        return (int64_t)(v & (uint64_t)INT64_MAX);
    }
    default: return 0;
    }
}

static double num_get_f(gguf_vtype t, const uint8_t *p)
{
    if (t == GGUF_T_FLOAT32) {
        uint32_t u = rd_u32(p);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (t == GGUF_T_FLOAT64) {
        uint64_t u = rd_u64(p);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    if (t == GGUF_T_UINT64) return (double)rd_u64(p);
    bool ovf;
    return (double)num_get_i(t, p, &ovf);
}

int gguf_get_int(const gguf_ctx *g, const char *key, int64_t *out, kvi_error *err)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return -1;
    if (kv->type == GGUF_T_ARRAY || !num_is_int(kv->type))
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s' has type %s, expected an integer", key,
                       vtype_name(kv->type));
    bool ovf;
    int64_t v = num_get_i(kv->type, kv->val, &ovf);
    if (ovf)
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s' = %llu does not fit int64", key,
                       (unsigned long long)rd_u64(kv->val));
    *out = v;
    return 0;
}

int gguf_get_float(const gguf_ctx *g, const char *key, double *out, kvi_error *err)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return -1;
    if (kv->type == GGUF_T_ARRAY || kv->type == GGUF_T_BOOL || gguf_vtype_size(kv->type) == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s' has type %s, expected a number", key,
                       vtype_name(kv->type));
    *out = num_get_f(kv->type, kv->val);
    return 0;
}

int gguf_get_bool(const gguf_ctx *g, const char *key, bool *out, kvi_error *err)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return -1;
    if (kv->type != GGUF_T_BOOL)
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s' has type %s, expected bool", key,
                       vtype_name(kv->type));
    *out = kv->val[0] != 0;
    return 0;
}

const char *gguf_get_str(const gguf_ctx *g, const char *key)
{
    const gguf_kv *kv = find_kv(g, key);
    return (kv && kv->type == GGUF_T_STRING) ? kv->str : NULL;
}

const char *gguf_get_str_n(const gguf_ctx *g, const char *key, size_t *len)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != GGUF_T_STRING) return NULL;
    if (len) *len = kv->str_len;
    return kv->str;
}

int gguf_get_arr_info(const gguf_ctx *g, const char *key, gguf_vtype *elem, uint64_t *n, kvi_error *err)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return -1;
    if (kv->type != GGUF_T_ARRAY)
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s' has type %s, expected an array", key,
                       vtype_name(kv->type));
    if (elem) *elem = kv->elem;
    if (n) *n = kv->n;
    return 0;
}

const char *gguf_get_arr_str(const gguf_ctx *g, const char *key, uint64_t i, size_t *len)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != GGUF_T_ARRAY || kv->elem != GGUF_T_STRING || i >= kv->n) return NULL;
    const uint8_t *p = kv->val + kv->str_off[i];
    if (len) *len = (size_t)rd_u64(p);
    return (const char *)p + 8;
}

/* The numeric array `key` with at least n elements, or an error / -1. */
static int num_array(const gguf_ctx *g, const char *key, uint64_t n, const gguf_kv **out, kvi_error *err)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return -1;
    if (kv->type != GGUF_T_ARRAY || gguf_vtype_size(kv->elem) == 0)
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s' has type %s%s%s, expected a numeric array", key,
                       vtype_name(kv->type), kv->type == GGUF_T_ARRAY ? " of " : "",
                       kv->type == GGUF_T_ARRAY ? vtype_name(kv->elem) : "");
    if (n > kv->n)
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s': %llu elements requested, the array has %llu", key,
                       (unsigned long long)n, (unsigned long long)kv->n);
    *out = kv;
    return 0;
}

int gguf_get_arr_f32(const gguf_ctx *g, const char *key, float *out, uint64_t n, kvi_error *err)
{
    const gguf_kv *kv;
    int rc = num_array(g, key, n, &kv, err);
    if (rc) return rc;
    size_t es = gguf_vtype_size(kv->elem);
    for (uint64_t i = 0; i < n; i++) out[i] = (float)num_get_f(kv->elem, kv->val + i * es);
    return 0;
}

int gguf_get_arr_i32(const gguf_ctx *g, const char *key, int32_t *out, uint64_t n, kvi_error *err)
{
    const gguf_kv *kv;
    int rc = num_array(g, key, n, &kv, err);
    if (rc) return rc;
    if (!num_is_int(kv->elem))
        return err_set(err, KVI_E_FORMAT, "gguf: key '%s' is an array of %s, expected integers", key,
                       vtype_name(kv->elem));
    size_t es = gguf_vtype_size(kv->elem);
    for (uint64_t i = 0; i < n; i++) {
        bool ovf;
        int64_t v = num_get_i(kv->elem, kv->val + i * es, &ovf);
        if (ovf || v < INT32_MIN || v > INT32_MAX)
            return err_set(err, KVI_E_FORMAT, "gguf: key '%s': element %llu does not fit int32", key,
                           (unsigned long long)i);
        out[i] = (int32_t)v;
    }
    return 0;
}

int64_t gguf_n_tensors(const gguf_ctx *g) { return g->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i)
{
    return (i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name)
{
    if (!name || !g->tensor_index.slot) return NULL;
    int64_t i = *index_slot(&g->tensor_index, g, tensor_name_at, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- giving back pages (a pipeline stage's other layers) -------------------- */

/* The file of g (or of a shard) whose buffer holds [p, p + n), or NULL. */
static const gguf_ctx *file_holding(const gguf_ctx *g, const uint8_t *p, size_t n)
{
    for (int i = 0; i < g->n_files; i++) {
        const gguf_ctx *f = i == 0 ? g : g->shards[i - 1];
        if (f->buf && p >= f->buf && n <= f->size && (size_t)(p - f->buf) <= f->size - n) return f;
    }
    return NULL;
}

size_t gguf_release(gguf_ctx *g, const void *data, size_t n)
{
    const uint8_t *p = data;
    const gguf_ctx *f = g ? file_holding(g, p, n) : NULL;
    if (!f || (f->buf_kind != BUF_ANON && f->buf_kind != BUF_FILEMAP)) return 0;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + page - 1) / page * page, b = ((uintptr_t)p + n) / page * page;
    if (b <= a || madvise((void *)a, b - a, MADV_DONTNEED) != 0) return 0;
    return (size_t)(b - a);
}

/* ---- in-place rewriting (weight repacking at load) ------------------------- */

static int set_writable_file(gguf_ctx *g, bool writable)
{
    if (g->buf_kind != BUF_ANON || !g->buf || g->map_len == 0) return 0;
    return mprotect((void *)g->buf, g->map_len, writable ? PROT_READ | PROT_WRITE : PROT_READ) == 0 ? 1 : 0;
}

/* Every file of a split model, or none: a shard that refuses puts back the ones done. */
int gguf_set_writable(gguf_ctx *g, bool writable)
{
    if (!g) return 0;
    for (int i = 0; i < g->n_files; i++) {
        gguf_ctx *f = i == 0 ? g : g->shards[i - 1];
        if (set_writable_file(f, writable)) continue;
        for (int j = 0; j < i; j++) (void)set_writable_file(j == 0 ? g : g->shards[j - 1], !writable);
        return 0;
    }
    return 1;
}
