/*
 * test_session.c — session files: a saved and restored sequence continues bit
 * for bit like the original (every KV type: f32, f16, q8_0, q4_0 and q4, whose
 * f16 key tail the file carries); a restored session serves its
 * blocks to the prefix cache; a corpus of corrupted, truncated and mismatched
 * files is refused with a clear error and leaves the sequence and pool as they
 * were.
 */
#include "testutil.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

static kvi_model *M;
static int NV;

static kvi_engine *engine(kvi_type kv, int block, int n_seq)
{
    kvi_engine_params p = engine_params(kv, 2, n_seq, 256);
    p.kv_block_size = block;
    return engine_create_checked(M, &p);
}

enum { NPR = 45 };
static int32_t P[NPR + 1];

static void round_trip(kvi_type kv)
{
    char name[64];
    snprintf(name, sizeof name, "sess_%s.kvs", kvi_type_name(kv));
    const char *path = tmp_path(name);
    float *orig = malloc(NV * sizeof(float)), *rest = malloc(NV * sizeof(float));
    kvi_engine *e = engine(kv, 16, 2);
    kvi_seq *s = kvi_seq_create(e);
    step_rows(e, s, P, 0, NPR, NULL);
    kvi_error err = { 0 };
    CHECK(kvi_seq_save(s, path, &err) == 0, "save: %s", err.msg);
    step_rows(e, s, P + NPR, NPR, NPR + 1, orig);
    kvi_engine_free(e);

    /* another engine (another process, as far as the cache knows) */
    e = engine(kv, 16, 2);
    s = kvi_seq_create(e);
    bool shifted = true;
    CHECK(kvi_seq_load(s, path, &shifted, &err) == 0, "load: %s", err.msg);
    CHECK(kvi_seq_len(s) == NPR && !shifted, "restored length %d", kvi_seq_len(s));
    CHECK(memcmp(kvi_seq_tokens(s), P, NPR * sizeof(int32_t)) == 0, "restored tokens differ");
    step_rows(e, s, P + NPR, NPR, NPR + 1, rest);
    CHECK(memcmp(orig, rest, NV * sizeof(float)) == 0, "%s: restored session continues differently",
          kvi_type_name(kv));
    /* its full blocks are in the prefix index now */
    kvi_seq *t = kvi_seq_create(e);
    CHECK(kvi_seq_reuse_prefix(t, P, NPR + 1) == 32, "restored blocks not reusable");
    kvi_engine_free(e);
    free(orig);
    free(rest);
}

static void expect_refused(kvi_engine *e, const char *path, const char *what)
{
    kvi_seq *s = kvi_seq_create(e);
    kvi_error err = { 0 };
    int rc = kvi_seq_load(s, path, NULL, &err);
    CHECK(rc < 0 && err.msg[0], "%s: accepted (rc %d)", what, rc);
    CHECK(kvi_seq_len(s) == 0, "%s: sequence not empty after a refused load", what);
    kvi_stats st;
    kvi_stats_get(e, NULL, &st);
    CHECK(st.kv_blocks_used == 0, "%s: %d blocks held after a refused load", what, st.kv_blocks_used);
    kvi_seq_free(s);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void corpus(void)
{
    const char *good = tmp_path("sess_good.kvs"), *bad = tmp_path("sess_bad.kvs");
    kvi_engine *e = engine(KVI_TYPE_F16, 16, 2);
    kvi_seq *s = kvi_seq_create(e);
    step_rows(e, s, P, 0, NPR, NULL);
    kvi_error err = { 0 };
    CHECK(kvi_seq_save(s, good, &err) == 0, "save: %s", err.msg);
    kvi_seq_free(s);
    kvi_engine_free(e);
    size_t len = 0;
    uint8_t *data = (uint8_t *)read_file(good, &len);
    CHECK(data && len > 100, "session file of %zu bytes", len);
    if (!data) return;
    uint8_t *buf = malloc(len + 16);

    e = engine(KVI_TYPE_F16, 16, 2);
    expect_refused(e, tmp_path("no_such_session.kvs"), "missing file");
    write_file(bad, data, 0);
    expect_refused(e, bad, "empty file");
    const size_t cuts[] = {
        7, 40, 79, 80, 95, 96, 97, 96 + 4 * NPR - 1, 96 + 4 * NPR + 100, len - 9, len - 1
    };
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_file(bad, data, cuts[i]);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cuts[i]);
        expect_refused(e, bad, what);
    }
    memcpy(buf, data, len);
    memcpy(buf + len, "junk", 4);
    write_file(bad, buf, len + 4);
    expect_refused(e, bad, "trailing bytes");
    struct {
        size_t off;
        uint32_t v;
        const char *what;
    } fields[] = {
        { 0, 0x4b4b4b4b, "magic" },
        { 8, 1, "version 1 (no key tail)" },
        { 8, 4, "version 4" },
        { 12, 6, "flags" },
        { 16, 1234, "model checksum" },
        { 24, 4, "n_layers" },
        { 28, 64, "kv_dim" },
        { 32, 32, "block size" },
        { 36, 0, "type_k" },
        { 40, 99, "type_v" },
        { 44, 0x7fffffff, "n_pos huge" },
        { 44, 0xffffffff, "n_pos negative" },
        { 44, 44, "n_pos smaller" },
        { 48, 12345, "block bytes" },
        { 56, 1, "row bytes k" },
        { 72, 9, "n_blocks" },
        { 80, 16, "tail bytes for an f16 cache" },
        { 88, 4, "lossy block past the blocks" },
        { 88, 0xffffffff, "lossy block negative" },
        { 92, 1, "a recurrent state flag (a model without recurrent layers)" },
        { 92, 2, "a recurrent state flag of 2" },
        { 96 + 4 * 3, 5000, "token out of vocabulary" },
        { 96 + 4 * 3, 0x80000000u, "negative token" },
        { 96 + 4 * 3, 7, "token changed (checksum)" },
        { 96 + 4 * NPR + 17, 0x3c003c00, "block data changed (checksum)" },
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        memcpy(buf, data, len);
        put32(buf + fields[i].off, fields[i].v);
        write_file(bad, buf, len);
        expect_refused(e, bad, fields[i].what);
    }
    /* random byte flips anywhere */
    uint64_t rs = 99;
    for (int k = 0; k < 40; k++) {
        memcpy(buf, data, len);
        const size_t at = (size_t)(trand_u64(&rs) % len);
        buf[at] ^= (uint8_t)(1 + trand_u64(&rs) % 255);
        write_file(bad, buf, len);
        expect_refused(e, bad, "byte flip");
    }
    kvi_engine_free(e);
    /* the right file into the wrong engine */
    e = engine(KVI_TYPE_F32, 16, 1);
    expect_refused(e, good, "other KV type");
    kvi_engine_free(e);
    e = engine(KVI_TYPE_F16, 32, 1);
    expect_refused(e, good, "other block size");
    kvi_engine_free(e);
    /* and a non-empty target is refused too */
    e = engine(KVI_TYPE_F16, 16, 1);
    s = kvi_seq_create(e);
    step_rows(e, s, P, 0, 3, NULL);
    CHECK(kvi_seq_load(s, good, NULL, &err) == KVI_E_INVALID && kvi_seq_len(s) == 3, "non-empty target");
    kvi_engine_free(e);
    free(buf);
    free(data);
}

/* FNV-1a 64 of the documented format, rewritten at the file's end: a file whose
 * only fault is a field the checksum cannot catch. */
static void fix_sum(uint8_t *d, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len - 8; i++) {
        h ^= d[i];
        h *= 0x100000001b3ull;
    }
    for (int i = 0; i < 8; i++) d[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

/* q4 files: the key tail (stories260K: 5 layers, kv_dim 32, blocks of 16:
 * 5 x (16 + 16 x 32 x 2) = 5200 bytes before the checksum) is validated. */
static void tail_corpus(void)
{
    const char *good = tmp_path("sess_q4_good.kvs"), *bad = tmp_path("sess_q4_bad.kvs");
    kvi_engine *e = engine(KVI_TYPE_KV_Q4, 16, 2);
    kvi_seq *s = kvi_seq_create(e);
    step_rows(e, s, P, 0, NPR, NULL);
    kvi_error err = { 0 };
    CHECK(kvi_seq_save(s, good, &err) == 0, "save: %s", err.msg);
    kvi_engine_free(e);
    size_t len = 0;
    uint8_t *data = (uint8_t *)read_file(good, &len);
    CHECK(data && len > 5300, "q4 session file of %zu bytes", len);
    if (!data || len <= 5300) return;
    const size_t part = 16 + 16 * 32 * 2, tail0 = len - 8 - 5 * part;
    uint32_t tb = 0;
    for (int i = 0; i < 4; i++) tb |= (uint32_t)data[80 + i] << (8 * i);
    CHECK(tb == 5 * part, "q4 file: tail of %u bytes, want %zu", tb, 5 * part);
    /* the tail of every layer names group 2 (positions 32..44) with 13 rows */
    for (int l = 0; l < 5; l++) {
        int32_t g, n;
        memcpy(&g, data + tail0 + l * part, 4);
        memcpy(&n, data + tail0 + l * part + 4, 4);
        CHECK(g == 2 && n == 13, "layer %d tail: group %d, %d rows", l, g, n);
    }
    uint8_t *buf = malloc(len);
    e = engine(KVI_TYPE_KV_Q4, 16, 2);
    struct {
        size_t off;
        uint32_t v;
        const char *what;
    } fields[] = {
        { tail0, 3, "tail group past the blocks" },
        { tail0 + 2 * part, (uint32_t)-2, "tail group -2" },
        { tail0 + 4, 17, "tail rows > block" },
        { tail0 + 4 * part + 4, (uint32_t)-1, "tail rows negative" },
        { 80, 16, "tail bytes wrong" },
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        memcpy(buf, data, len);
        put32(buf + fields[i].off, fields[i].v);
        fix_sum(buf, len);
        write_file(bad, buf, len);
        expect_refused(e, bad, fields[i].what);
    }
    /* a file without its tail (tail bytes 0, tail cut off) loads: keys read quantised */
    memcpy(buf, data, len);
    put32(buf + 80, 0);
    memmove(buf + tail0, buf + len - 8, 8);
    fix_sum(buf, tail0 + 8);
    write_file(bad, buf, tail0 + 8);
    s = kvi_seq_create(e);
    CHECK(kvi_seq_load(s, bad, NULL, &err) == 0 && kvi_seq_len(s) == NPR, "tail-less q4 file: %s", err.msg);
    kvi_stats st;
    kvi_stats_get(e, s, &st);
    CHECK(st.kv_bytes_tail == 0, "tail-less restore holds a tail of %zu bytes", st.kv_bytes_tail);
    kvi_engine_free(e);
    free(buf);
    free(data);
}

int main(void)
{
    M = load_stories260k(&NV);
    if (!M) return test_main_end();
    uint64_t rs = 0x5e55;
    P[0] = 1;
    for (int i = 1; i <= NPR; i++) P[i] = 3 + (int32_t)(trand_u64(&rs) % (uint64_t)(NV - 3));
    round_trip(KVI_TYPE_F32);
    round_trip(KVI_TYPE_F16);
    round_trip(KVI_TYPE_Q8_0);
    round_trip(KVI_TYPE_Q4_0);
    round_trip(KVI_TYPE_KV_Q4);
    corpus();
    tail_corpus();
    kvi_model_free(M);
    return test_main_end();
}
