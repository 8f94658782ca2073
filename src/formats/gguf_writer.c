/*
 * gguf_writer.c — writing GGUF v3 files.
 *
 * Data structure
 *   kv[n_kv]:       key/values in the order first set; each keeps a NUL-terminated key,
 *                   its value type and `val` = the value encoded exactly as in the file
 *                   after the type field (little-endian; an array starts with its element
 *                   type and count). Setting a key again replaces the value in place.
 *   tensors[n_t]:   declared tensors (name, type, n_dims, ne[4], nbytes) in order; their
 *                   offsets are assigned by gguf_writer_write_header.
 *
 * Invariants
 *   - keys and tensor names are non-empty and unique;
 *   - alignment is a power of two (32 unless general.alignment was set to another u32
 *     power of two), and every tensor offset and the data section start are multiples
 *     of it; each tensor's data is followed by zero padding to the next multiple;
 *   - tensors are written after the header, each exactly once, in declaration order
 *     (`next` is the index of the next one); the file is complete when next == n_t.
 */
#include "formats/gguf.h"

#include "base/error.h"
#include "formats/quant.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_WRITER_ALIGNMENT 32

typedef struct wkv {
    char *key; /* NUL-terminated */
    gguf_vtype type;
    uint8_t *val; /* [len] encoded value */
    size_t len;
} wkv;

typedef struct wtensor {
    char *name; /* NUL-terminated */
    kvi_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims 1 */
    size_t nbytes;
    uint64_t offset; /* relative to the data section, set by write_header */
} wtensor;

struct gguf_writer {
    wkv *kv; /* [cap_kv], n_kv used */
    size_t n_kv, cap_kv;
    wtensor *t; /* [cap_t], n_t used */
    size_t n_t, cap_t;
    size_t alignment;
    bool header_done;
    int64_t next; /* next tensor to write */
};

/* ---- a growable byte buffer for encoding values ---------------------------- */

typedef struct bytes {
    uint8_t *p; /* [cap], n used */
    size_t n, cap;
    bool oom; /* sticky: an append failed */
} bytes;

static void b_put(bytes *b, const void *src, size_t n)
{
    if (b->oom) return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* An unsigned value of `size` bytes, little-endian. */
static void b_le(bytes *b, uint64_t v, size_t size)
{
    uint8_t tmp[8];
    for (size_t i = 0; i < size; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    b_put(b, tmp, size);
}

static void b_str(bytes *b, const char *s, size_t n)
{
    b_le(b, n, 8);
    b_put(b, s, n);
}

/* Host value of `size` bytes at p, as an unsigned integer to encode. */
static uint64_t host_bits(const void *p, size_t size)
{
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    switch (size) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 2: memcpy(&u16, p, 2); return u16;
    case 4: memcpy(&u32, p, 4); return u32;
    default: memcpy(&u64, p, 8); return u64;
    }
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- creating and freeing ---------------------------------------------------- */

gguf_writer *gguf_writer_create(void)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_WRITER_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

/* ---- key/values ---------------------------------------------------------------- */

/* Stores (key, type, encoded value); takes ownership of b->p in every case. */
static int put_kv(gguf_writer *w, const char *key, gguf_vtype type, bytes *b)
{
    int rc = 0;
    if (!w || !key || !key[0] || w->header_done)
        rc = KVI_E_INVALID;
    else if (b->oom)
        rc = KVI_E_NOMEM;
    else if (strcmp(key, "general.alignment") == 0) {
        /* The writer pads to this value, so it must be one the reader accepts. */
        uint32_t a = (type == GGUF_T_UINT32 && b->n == 4)
                         ? (uint32_t)(b->p[0] | (b->p[1] << 8) | (b->p[2] << 16) | ((uint32_t)b->p[3] << 24))
                         : 0;
        if (a == 0 || (a & (a - 1)) != 0)
            rc = KVI_E_INVALID;
        else
            w->alignment = a;
    }
    if (rc) {
        free(b->p);
        return rc;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].val);
            w->kv[i].type = type;
            w->kv[i].val = b->p;
            w->kv[i].len = b->n;
            return 0;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            free(b->p);
            return KVI_E_NOMEM;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = dup_str(key);
    if (!k) {
        free(b->p);
        return KVI_E_NOMEM;
    }
    w->kv[w->n_kv++] = (wkv){ .key = k, .type = type, .val = b->p, .len = b->n };
    return 0;
}

static int set_scalar(gguf_writer *w, const char *key, gguf_vtype type, uint64_t bits)
{
    bytes b = { 0 };
    b_le(&b, bits, gguf_vtype_size(type));
    return put_kv(w, key, type, &b);
}

int gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v)
{
    return set_scalar(w, key, GGUF_T_UINT8, v);
}
int gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v)
{
    return set_scalar(w, key, GGUF_T_INT8, (uint8_t)v);
}
int gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v)
{
    return set_scalar(w, key, GGUF_T_UINT16, v);
}
int gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v)
{
    return set_scalar(w, key, GGUF_T_INT16, (uint16_t)v);
}
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, GGUF_T_UINT32, v);
}
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, GGUF_T_INT32, (uint32_t)v);
}
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v)
{
    return set_scalar(w, key, GGUF_T_UINT64, v);
}
int gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v)
{
    return set_scalar(w, key, GGUF_T_INT64, (uint64_t)v);
}
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    return set_scalar(w, key, GGUF_T_BOOL, v ? 1 : 0);
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float v)
{
    return set_scalar(w, key, GGUF_T_FLOAT32, host_bits(&v, 4));
}

int gguf_writer_set_f64(gguf_writer *w, const char *key, double v)
{
    return set_scalar(w, key, GGUF_T_FLOAT64, host_bits(&v, 8));
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v)
{
    if (!v) return KVI_E_INVALID;
    bytes b = { 0 };
    b_str(&b, v, strlen(v));
    return put_kv(w, key, GGUF_T_STRING, &b);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *v, uint64_t n)
{
    size_t es = gguf_vtype_size(elem);
    if (es == 0 || (n && !v) || n > SIZE_MAX / es) return KVI_E_INVALID;
    bytes b = { 0 };
    b_le(&b, elem, 4);
    b_le(&b, n, 8);
    const uint8_t *p = v;
    for (uint64_t i = 0; i < n && !b.oom; i++) b_le(&b, host_bits(p + i * es, es), es);
    return put_kv(w, key, GGUF_T_ARRAY, &b);
}

int gguf_writer_set_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n)
{
    return gguf_writer_set_arr(w, key, GGUF_T_FLOAT32, v, n);
}

int gguf_writer_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n)
{
    return gguf_writer_set_arr(w, key, GGUF_T_INT32, v, n);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n)
{
    if (n && !v) return KVI_E_INVALID;
    for (uint64_t i = 0; i < n; i++)
        if (!v[i]) return KVI_E_INVALID;
    bytes b = { 0 };
    b_le(&b, GGUF_T_STRING, 4);
    b_le(&b, n, 8);
    for (uint64_t i = 0; i < n && !b.oom; i++) b_str(&b, v[i], strlen(v[i]));
    return put_kv(w, key, GGUF_T_ARRAY, &b);
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_ctx *src, const char *key)
{
    if (!src || !key) return KVI_E_INVALID;
    int64_t i = gguf_find_key(src, key);
    gguf_vtype type;
    const void *raw;
    size_t len;
    if (i < 0 || gguf_kv_raw(src, i, &type, &raw, &len) != 0) return KVI_E_INVALID;
    bytes b = { 0 };
    b_put(&b, raw, len);
    return put_kv(w, key, type, &b);
}

/* ---- tensors ------------------------------------------------------------------------ */

int gguf_writer_add_tensor(gguf_writer *w, const char *name, kvi_type type, uint32_t n_dims,
                           const int64_t *ne)
{
    if (!w || !name || !name[0] || w->header_done || n_dims > GGUF_MAX_DIMS || (n_dims && !ne))
        return KVI_E_INVALID;
    if ((unsigned)type >= KVI_TYPE_COUNT || !quant_type_known(type)) return KVI_E_INVALID;
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return KVI_E_INVALID;
    wtensor t = { .type = type, .n_dims = n_dims };
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0) return KVI_E_INVALID;
        if (t.ne[d] != 0 && nel > (uint64_t)INT64_MAX / (uint64_t)t.ne[d]) return KVI_E_INVALID;
        nel *= (uint64_t)t.ne[d];
    }
    int64_t be = quant_block_elems(type);
    size_t bb = quant_block_bytes(type);
    if (be <= 0 || bb == 0 || t.ne[0] % be != 0) return KVI_E_INVALID;
    uint64_t blocks = nel / (uint64_t)be;
    if (blocks && bb > (SIZE_MAX / 2) / blocks) return KVI_E_INVALID;
    t.nbytes = (size_t)blocks * bb;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return KVI_E_NOMEM;
        w->t = nt;
        w->cap_t = cap;
    }
    t.name = dup_str(name);
    if (!t.name) return KVI_E_NOMEM;
    w->t[w->n_t++] = t;
    return 0;
}

/* ---- writing --------------------------------------------------------------------------- */

static size_t pad_to(uint64_t pos, size_t align) { return (size_t)((align - pos % align) % align); }

static int write_zeros(FILE *f, size_t n)
{
    static const uint8_t zeros[64];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k) return -1;
        n -= k;
    }
    return 0;
}

int gguf_writer_write_header(gguf_writer *w, FILE *f, kvi_error *err)
{
    if (!w || !f) return err_set(err, KVI_E_INVALID, "gguf writer: no writer or file");
    if (w->header_done) return err_set(err, KVI_E_INVALID, "gguf writer: header already written");
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t sz = (uint64_t)w->t[i].nbytes + pad_to(w->t[i].nbytes, w->alignment);
        if (off > UINT64_MAX - sz || off + sz > (uint64_t)INT64_MAX)
            return err_set(err, KVI_E_INVALID, "gguf writer: tensor '%s': data section too large",
                           w->t[i].name);
        off += sz;
    }
    bytes b = { 0 };
    b_put(&b, "GGUF", 4);
    b_le(&b, 3, 4);
    b_le(&b, w->n_t, 8);
    b_le(&b, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        b_str(&b, w->kv[i].key, strlen(w->kv[i].key));
        b_le(&b, w->kv[i].type, 4);
        b_put(&b, w->kv[i].val, w->kv[i].len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        b_str(&b, t->name, strlen(t->name));
        b_le(&b, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) b_le(&b, (uint64_t)t->ne[d], 8);
        b_le(&b, (uint32_t)t->type, 4);
        b_le(&b, t->offset, 8);
    }
    static const uint8_t zeros[GGUF_WRITER_ALIGNMENT];
    size_t pad = pad_to(b.n, w->alignment);
    while (pad && !b.oom) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        b_put(&b, zeros, k);
        pad -= k;
    }
    if (b.oom) {
        free(b.p);
        return err_set(err, KVI_E_NOMEM, "gguf writer: out of memory building the header");
    }
    size_t wrote = fwrite(b.p, 1, b.n, f);
    size_t n = b.n;
    free(b.p);
    if (wrote != n)
        return err_set(err, KVI_E_IO, "gguf writer: writing the header failed: %s", strerror(errno));
    w->header_done = true;
    w->next = 0;
    return 0;
}

int gguf_writer_write_tensor(gguf_writer *w, FILE *f, int64_t idx, const void *data, kvi_error *err)
{
    if (!w || !f) return err_set(err, KVI_E_INVALID, "gguf writer: no writer or file");
    if (!w->header_done)
        return err_set(err, KVI_E_INVALID, "gguf writer: tensor %lld written before the header",
                       (long long)idx);
    if (idx != w->next || idx < 0 || (size_t)idx >= w->n_t)
        return err_set(err, KVI_E_INVALID,
                       "gguf writer: tensor %lld written out of order (expected %lld of %zu)", (long long)idx,
                       (long long)w->next, w->n_t);
    const wtensor *t = &w->t[idx];
    if (t->nbytes && !data) return err_set(err, KVI_E_INVALID, "gguf writer: tensor '%s': no data", t->name);
    if ((t->nbytes && fwrite(data, 1, t->nbytes, f) != t->nbytes) ||
        write_zeros(f, pad_to(t->nbytes, w->alignment)) != 0)
        return err_set(err, KVI_E_IO, "gguf writer: tensor '%s': write failed: %s", t->name, strerror(errno));
    w->next++;
    return 0;
}
