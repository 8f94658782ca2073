/*
 * imatrix_file.c — reading llama.cpp's importance matrices (imatrix_file.h).
 *
 * Data: imatrix_data.e [n_entries] in the file's order (GGUF: the order of the
 * .in_sum2 tensors), each owning its name and values. Invariants: every size read
 * from a file is checked against the bytes there before use; a GGUF entry's
 * in_sum2 and counts are F32, its value count a positive multiple of its count of
 * counts.
 */
#include "tools/imatrix_file.h"

#include "base/error.h"
#include "formats/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void imatrix_free(imatrix_data *d)
{
    if (!d) return;
    for (int i = 0; i < d->n_entries; i++) {
        free(d->e[i].name);
        free(d->e[i].values);
    }
    free(d->e);
    free(d->dataset);
    memset(d, 0, sizeof *d);
}

const imatrix_entry *imatrix_find(const imatrix_data *d, const char *name)
{
    for (int i = 0; i < d->n_entries; i++)
        if (!strcmp(d->e[i].name, name)) return &d->e[i];
    return NULL;
}

/* Appends an entry of n values named name[0..len) (values uninitialised). */
static imatrix_entry *add_entry(imatrix_data *d, const char *name, size_t len, int64_t n)
{
    imatrix_entry *e = realloc(d->e, (size_t)(d->n_entries + 1) * sizeof *e);
    if (!e) return NULL;
    d->e = e;
    e += d->n_entries;
    e->name = malloc(len + 1);
    e->values = malloc((size_t)n * sizeof(float));
    e->n = n;
    if (!e->name || !e->values) {
        free(e->name);
        free(e->values);
        return NULL;
    }
    memcpy(e->name, name, len);
    e->name[len] = '\0';
    d->n_entries++;
    return e;
}

/* ---- GGUF ---------------------------------------------------------------- */

static int gguf_entry(imatrix_data *d, const gguf_ctx *g, const gguf_tensor *sums, kvi_error *err)
{
    const size_t len = strlen(sums->name) - strlen(".in_sum2");
    char cname[512];
    if (len + sizeof ".counts" > sizeof cname) return err_set(err, KVI_E_FORMAT, "imatrix: name too long");
    memcpy(cname, sums->name, len);
    memcpy(cname + len, ".counts", sizeof ".counts");
    const gguf_tensor *cnt = gguf_find_tensor(g, cname);
    if (!cnt) return err_set(err, KVI_E_FORMAT, "imatrix: %s has no .counts", sums->name);
    if (sums->type != KVI_TYPE_F32 || cnt->type != KVI_TYPE_F32)
        return err_set(err, KVI_E_FORMAT, "imatrix: %s: sums and counts must be F32", cname);
    const int64_t nval = (int64_t)(sums->nbytes / 4), ncounts = (int64_t)(cnt->nbytes / 4);
    if (nval < 1 || ncounts < 1 || nval % ncounts)
        return err_set(err, KVI_E_FORMAT, "imatrix: %s: %lld values for %lld counts", cname, (long long)nval,
                       (long long)ncounts);
    imatrix_entry *e = add_entry(d, sums->name, len, nval);
    if (!e) return err_set(err, KVI_E_NOMEM, "imatrix: out of memory");
    const float *s = sums->data, *c = cnt->data;
    const int64_t ne0 = nval / ncounts;
    for (int64_t j = 0; j < ncounts; j++) {
        float cf;
        memcpy(&cf, c + j, 4);
        const float count = (float)lroundf(cf);
        for (int64_t i = 0; i < ne0; i++) {
            float v;
            memcpy(&v, s + j * ne0 + i, 4);
            e->values[j * ne0 + i] = count > 0.0f ? v / count : 1;
        }
    }
    return 0;
}

static int load_gguf(gguf_ctx *g, imatrix_data *d, kvi_error *err)
{
    int64_t v;
    if (gguf_get_int(g, "imatrix.chunk_count", &v, NULL) == 0) d->chunk_count = (int)v;
    size_t dl;
    const char *ds = gguf_get_arr_str(g, "imatrix.datasets", 0, &dl);
    if (ds && !(d->dataset = strndup(ds, dl))) return err_set(err, KVI_E_NOMEM, "imatrix: out of memory");
    if (gguf_find_key(g, "imatrix.datasets") < 0 || gguf_find_key(g, "imatrix.chunk_count") < 0 ||
        gguf_find_key(g, "imatrix.chunk_size") < 0)
        return err_set(err, KVI_E_FORMAT,
                       "imatrix: missing imatrix metadata (datasets, chunk_count, chunk_size)");
    const char *suf = ".in_sum2";
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const size_t n = strlen(t->name), ns = strlen(suf);
        if (n <= ns || strcmp(t->name + n - ns, suf)) continue;
        const int rc = gguf_entry(d, g, t, err);
        if (rc) return rc;
    }
    if (d->n_entries == 0) return err_set(err, KVI_E_FORMAT, "imatrix: no entries");
    return 0;
}

/* ---- legacy .dat --------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p; /* [n] */
    size_t n, at;
} rd;

static bool rd_i32(rd *r, int32_t *v)
{
    if (r->n - r->at < 4) return false;
    memcpy(v, r->p + r->at, 4);
    r->at += 4;
    return true;
}

static int load_legacy(const uint8_t *buf, size_t n, imatrix_data *d, kvi_error *err)
{
    rd r = { buf, n, 0 };
    int32_t n_entries;
    if (!rd_i32(&r, &n_entries) || n_entries < 1) return err_set(err, KVI_E_FORMAT, "imatrix: no data");
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (!rd_i32(&r, &len) || len < 0 || (size_t)len > r.n - r.at)
            return err_set(err, KVI_E_FORMAT, "imatrix: entry %d: bad name length", (int)i + 1);
        const char *name = (const char *)r.p + r.at;
        r.at += (size_t)len;
        if (!rd_i32(&r, &ncall) || !rd_i32(&r, &nval) || nval < 1 || (size_t)nval > (r.n - r.at) / 4)
            return err_set(err, KVI_E_FORMAT, "imatrix: entry %d: bad value count", (int)i + 1);
        const size_t nl = strnlen(name, (size_t)len);
        imatrix_entry *e = add_entry(d, name, nl, nval);
        if (!e) return err_set(err, KVI_E_NOMEM, "imatrix: out of memory");
        for (int32_t k = 0; k < nval; k++) {
            float v;
            memcpy(&v, r.p + r.at + 4 * (size_t)k, 4);
            e->values[k] = ncall > 0 ? v / (float)ncall : v;
        }
        r.at += 4 * (size_t)nval;
    }
    int32_t chunks, len;
    if (rd_i32(&r, &chunks)) {
        d->chunk_count = chunks;
        if (rd_i32(&r, &len) && len > 0 && (size_t)len <= r.n - r.at) {
            d->dataset = strndup((const char *)r.p + r.at, (size_t)len);
            if (!d->dataset) return err_set(err, KVI_E_NOMEM, "imatrix: out of memory");
        }
    }
    return 0;
}

static int read_all(const char *path, uint8_t **buf, size_t *n, kvi_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, KVI_E_IO, "imatrix: cannot open %s", path);
    size_t cap = 1 << 16, len = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        len += fread(b + len, 1, cap - len, f);
        if (len < cap) break;
        uint8_t *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (!b) return err_set(err, KVI_E_NOMEM, "imatrix: out of memory reading %s", path);
    if (bad) {
        free(b);
        return err_set(err, KVI_E_IO, "imatrix: cannot read %s", path);
    }
    *buf = b;
    *n = len;
    return 0;
}

int imatrix_load(const char *path, imatrix_data *out, kvi_error *err)
{
    memset(out, 0, sizeof *out);
    uint8_t *buf = NULL;
    size_t n = 0;
    int rc = read_all(path, &buf, &n, err);
    if (rc) return rc;
    gguf_ctx *g = NULL;
    if (n >= 4 && !memcmp(buf, "GGUF", 4)) {
        rc = gguf_open_mem(buf, n, &g, err);
        if (!rc) rc = load_gguf(g, out, err);
        gguf_close(g);
    } else
        rc = load_legacy(buf, n, out, err);
    free(buf);
    if (rc) imatrix_free(out);
    return rc;
}
