/*
 * kv_tier_disk.c — the disk tier: one file per KV block in a directory, bounded,
 * least recently used first out (format kv_tier_file.c, keys kv_tier.h).
 *
 * A block's file is named <layout id>-<key>.kvb (16 hex digits each), so models
 * and layouts sharing a directory never see each other's files. It is written to
 * <name>.tmp and renamed, so a file under its final name was complete once;
 * the checksum catches what happened to it after. The index (ent[], a hash
 * table on the key and an LRU list) holds every .kvb file of this layout:
 * opening scans the directory, oldest modification first, deleting leftovers
 * (.tmp files of an interrupted store, files of the wrong size).
 *
 * Invariants:
 *  - st->blocks == entries in the index == its files; st->bytes == st->blocks *
 *    file_bytes <= st->bytes_max;
 *  - an entry is on its bucket's chain and in the LRU (head oldest) exactly
 *    once; freed entries are on the free list (lru_next links), key unused.
 */
#include "kv/kv_tier.h"

#include "base/error.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct disk_ent {
    uint64_t key;
    int32_t prev, next; /* LRU (older, newer) or free list (next) */
    int32_t hnext;      /* bucket chain */
} disk_ent;

struct kv_tier_disk {
    char *dir;
    kv_tier_layout x;
    size_t file_bytes;
    kvi_tier_stats *st;
    disk_ent *ent; /* [cap] */
    int32_t cap, free_head, lru_head, lru_tail;
    int32_t *bucket; /* [n_buckets] */
    uint32_t n_buckets;
    uint8_t *buf; /* [file_bytes] one file being read or written */
};

static void ent_path(const kv_tier_disk *d, uint64_t key, const char *ext, char *out, size_t n)
{
    snprintf(out, n, "%s/%016llx-%016llx.%s", d->dir, (unsigned long long)d->x.layout_id,
             (unsigned long long)key, ext);
}

static uint32_t bucket_of(const kv_tier_disk *d, uint64_t key)
{
    return (uint32_t)(key ^ (key >> 32)) & (d->n_buckets - 1);
}

static int32_t find(const kv_tier_disk *d, uint64_t key)
{
    for (int32_t i = d->bucket[bucket_of(d, key)]; i >= 0; i = d->ent[i].hnext)
        if (d->ent[i].key == key) return i;
    return -1;
}

static void lru_unlink(kv_tier_disk *d, int32_t i)
{
    disk_ent *e = &d->ent[i];
    if (e->prev >= 0)
        d->ent[e->prev].next = e->next;
    else
        d->lru_head = e->next;
    if (e->next >= 0)
        d->ent[e->next].prev = e->prev;
    else
        d->lru_tail = e->prev;
}

static void lru_push(kv_tier_disk *d, int32_t i)
{
    d->ent[i].prev = d->lru_tail;
    d->ent[i].next = -1;
    if (d->lru_tail >= 0)
        d->ent[d->lru_tail].next = i;
    else
        d->lru_head = i;
    d->lru_tail = i;
}

/* A new entry for key (most recent), or -1 out of memory. */
static int32_t ent_add(kv_tier_disk *d, uint64_t key)
{
    if (d->free_head < 0) {
        const int32_t cap = d->cap ? d->cap * 2 : 64;
        disk_ent *ne = realloc(d->ent, (size_t)cap * sizeof *ne);
        if (!ne) return -1;
        d->ent = ne;
        for (int32_t i = cap - 1; i >= d->cap; i--) {
            d->ent[i].next = d->free_head;
            d->free_head = i;
        }
        d->cap = cap;
    }
    const int32_t i = d->free_head;
    d->free_head = d->ent[i].next;
    d->ent[i].key = key;
    const uint32_t bk = bucket_of(d, key);
    d->ent[i].hnext = d->bucket[bk];
    d->bucket[bk] = i;
    lru_push(d, i);
    d->st->blocks++;
    d->st->bytes += d->file_bytes;
    return i;
}

/* Removes entry i and deletes its file. */
static void ent_drop(kv_tier_disk *d, int32_t i)
{
    char path[4096];
    ent_path(d, d->ent[i].key, "kvb", path, sizeof path);
    (void)unlink(path);
    int32_t *link = &d->bucket[bucket_of(d, d->ent[i].key)];
    while (*link != i) link = &d->ent[*link].hnext;
    *link = d->ent[i].hnext;
    lru_unlink(d, i);
    d->ent[i].next = d->free_head;
    d->free_head = i;
    d->st->blocks--;
    d->st->bytes -= d->file_bytes;
}

typedef struct scan_file {
    uint64_t key;
    int64_t mtime_ns;
} scan_file;

static int by_mtime(const void *a, const void *b)
{
    const int64_t x = ((const scan_file *)a)->mtime_ns, y = ((const scan_file *)b)->mtime_ns;
    return (x > y) - (x < y);
}

/* The directory's files of this layout into the index, oldest first. */
static int scan_dir(kv_tier_disk *d, kvi_error *err)
{
    DIR *dh = opendir(d->dir);
    if (!dh) return err_set(err, KVI_E_IO, "kv tier: cannot open directory %s: %s", d->dir, strerror(errno));
    scan_file *fs = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    char path[4096];
    for (struct dirent *de; (de = readdir(dh)) != NULL;) {
        unsigned long long lay, key;
        char ext[8] = { 0 };
        int end = 0;
        if (sscanf(de->d_name, "%16llx-%16llx.%3s%n", &lay, &key, ext, &end) != 3 ||
            de->d_name[end] != '\0' || lay != d->x.layout_id)
            continue;
        snprintf(path, sizeof path, "%s/%s", d->dir, de->d_name);
        struct stat sb;
        const bool ok = strcmp(ext, "kvb") == 0 && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
                        (uint64_t)sb.st_size == d->file_bytes;
        if (!ok) { /* an interrupted store or a damaged file of ours */
            if (unlink(path) == 0) d->st->dropped++;
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            scan_file *nf = realloc(fs, cap * sizeof *nf);
            if (!nf) {
                rc = err_set(err, KVI_E_NOMEM, "kv tier: out of memory scanning %s", d->dir);
                break;
            }
            fs = nf;
        }
        fs[n].key = key;
        fs[n++].mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    }
    closedir(dh);
    if (rc == 0 && n) qsort(fs, n, sizeof *fs, by_mtime);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (find(d, fs[i].key) < 0 && ent_add(d, fs[i].key) < 0)
            rc = err_set(err, KVI_E_NOMEM, "kv tier: out of memory indexing %s", d->dir);
    free(fs);
    while (rc == 0 && d->st->bytes > d->st->bytes_max && d->lru_head >= 0) {
        ent_drop(d, d->lru_head);
        d->st->evictions++;
    }
    return rc;
}

kv_tier_disk *kv_tier_disk_open(const char *dir, size_t bytes_max, const kv_tier_layout *x,
                                kvi_tier_stats *st, kvi_error *err)
{
    if (!dir || !*dir || strlen(dir) > 3000) {
        err_set(err, KVI_E_INVALID, "kv tier: bad cache directory");
        return NULL;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        err_set(err, KVI_E_IO, "kv tier: cannot create directory %s: %s", dir, strerror(errno));
        return NULL;
    }
    kv_tier_disk *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(err, KVI_E_NOMEM, "kv tier: out of memory");
        return NULL;
    }
    d->x = *x;
    d->st = st;
    d->file_bytes = kv_tier_file_bytes(x);
    d->free_head = d->lru_head = d->lru_tail = -1;
    const size_t want = bytes_max / d->file_bytes;
    d->n_buckets = 64;
    while (d->n_buckets < want && d->n_buckets < (1u << 20)) d->n_buckets <<= 1;
    st->bytes_max = bytes_max;
    d->dir = strdup(dir);
    d->bucket = malloc(d->n_buckets * sizeof *d->bucket);
    d->buf = malloc(d->file_bytes);
    if (!d->dir || !d->bucket || !d->buf) {
        kv_tier_disk_close(d);
        err_set(err, KVI_E_NOMEM, "kv tier: out of memory");
        return NULL;
    }
    for (uint32_t i = 0; i < d->n_buckets; i++) d->bucket[i] = -1;
    if (scan_dir(d, err) != 0) {
        kv_tier_disk_close(d);
        return NULL;
    }
    return d;
}

void kv_tier_disk_close(kv_tier_disk *d)
{
    if (!d) return;
    free(d->dir);
    free(d->ent);
    free(d->bucket);
    free(d->buf);
    free(d);
}

bool kv_tier_disk_has(const kv_tier_disk *d, uint64_t key) { return find(d, key) >= 0; }

int kv_tier_disk_put(kv_tier_disk *d, uint64_t key, const int32_t *tok, const uint8_t *data)
{
    const int32_t had = find(d, key);
    if (had >= 0) {
        lru_unlink(d, had);
        lru_push(d, had);
        return 0;
    }
    if (d->file_bytes > d->st->bytes_max) return 0;
    while (d->st->bytes + d->file_bytes > d->st->bytes_max && d->lru_head >= 0) {
        ent_drop(d, d->lru_head);
        d->st->evictions++;
    }
    char tmp[4096], path[4096];
    ent_path(d, key, "tmp", tmp, sizeof tmp);
    ent_path(d, key, "kvb", path, sizeof path);
    kv_tier_file_encode(&d->x, key, tok, data, d->buf);
    FILE *f = fopen(tmp, "wb");
    if (!f) return KVI_E_IO;
    const bool ok = fwrite(d->buf, 1, d->file_bytes, f) == d->file_bytes;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        (void)unlink(tmp);
        return KVI_E_IO;
    }
    if (ent_add(d, key) < 0) {
        (void)unlink(path);
        return KVI_E_NOMEM;
    }
    d->st->store_bytes += d->file_bytes;
    return 0;
}

int kv_tier_disk_get(kv_tier_disk *d, uint64_t key, const int32_t *tok, uint8_t *dst)
{
    const int32_t i = find(d, key);
    if (i < 0) {
        d->st->misses++;
        return -1;
    }
    char path[4096];
    ent_path(d, key, "kvb", path, sizeof path);
    FILE *f = fopen(path, "rb");
    size_t got = 0;
    if (f) {
        got = fread(d->buf, 1, d->file_bytes, f);
        if (got == d->file_bytes && fgetc(f) != EOF) got++; /* longer than a block file */
        fclose(f);
    }
    const uint8_t *data = NULL;
    if (!f || kv_tier_file_check(&d->x, key, tok, d->buf, got, &data, NULL) != 0) {
        ent_drop(d, i);
        d->st->dropped++;
        d->st->misses++;
        return -1;
    }
    memcpy(dst, data, d->x.block_bytes);
    lru_unlink(d, i);
    lru_push(d, i);
    d->st->hits++;
    d->st->load_bytes += d->file_bytes;
    return 0;
}
