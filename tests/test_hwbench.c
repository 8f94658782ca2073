/*
 * test_hwbench.c — the read loops behind `kvinfer bench --hw`: every read method
 * the CPU supports gives the scalar reference's checksum (hw_read_ref) on random
 * bytes, at every length 0..2100 and a few large ones, from aligned and unaligned
 * starts (so the stream split, the prefetch and the tail are all covered); the
 * reference itself against a checksum written out here; a changed byte changes
 * every method's checksum. kvi_hw_bench(quick) fills the method fields.
 */
#include "tools/hwbench.h"
#include "kvinfer.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The checksum's definition, written out byte by byte (little-endian words). */
static uint64_t naive_sum(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    size_t w = n / 8 * 8;
    for (size_t i = 0; i < w; i += 8) {
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--) v = (v << 8) | p[i + (size_t)b];
        s += v;
    }
    for (size_t i = w; i < n; i++) s += p[i];
    return s;
}

static void test_methods(void)
{
    const size_t cap = ((size_t)3 << 20) + 4096;
    uint8_t *buf = malloc(cap);
    CHECK(buf != NULL, "out of memory");
    if (!buf) return;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < cap; i++) buf[i] = (uint8_t)(xorshift(&seed) >> 24) | 1; /* never zero */

    CHECK(naive_sum(buf, 4099) == hw_read_ref(buf, 4099), "reference != written-out checksum");
    const int nm = hw_read_n_methods();
    CHECK(nm >= 2 && hw_read_method_name(nm) == NULL && hw_read_method_name(-1) == NULL, "%d methods", nm);
    int supported = 0;
    for (int m = 0; m < nm; m++) {
        if (!hw_read_method_supported(m)) continue;
        supported++;
        int bad = 0;
        for (size_t n = 0; n <= 2100; n++) {
            const size_t off = n % 67; /* unaligned starts too */
            if (hw_read_sum(m, buf + off, n) != hw_read_ref(buf + off, n)) bad++;
        }
        CHECK(bad == 0, "%s: %d of the lengths 0..2100 differ from the reference", hw_read_method_name(m),
              bad);
        const size_t big[] = { (size_t)1 << 20, ((size_t)3 << 20) + 1000, 8192 * 16 + 7, 16384 * 8 - 64 };
        for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
            for (size_t off = 0; off < 130; off += 64 + 1) {
                const uint64_t got = hw_read_sum(m, buf + off, big[k]), want = hw_read_ref(buf + off, big[k]);
                CHECK(got == want, "%s: %zu bytes at +%zu: %llu != %llu", hw_read_method_name(m), big[k], off,
                      (unsigned long long)got, (unsigned long long)want);
            }
        /* one changed byte deep inside a stream changes the sum */
        const size_t n = (size_t)1 << 20, at = n / 2 + 777;
        const uint64_t before = hw_read_sum(m, buf, n);
        buf[at] ^= 0x40;
        CHECK(hw_read_sum(m, buf, n) != before, "%s: a changed byte went unseen", hw_read_method_name(m));
        buf[at] ^= 0x40;
    }
    CHECK(supported >= 1, "no read method supported (the scalar one always is)");
    CHECK(!hw_read_method_supported(nm) && hw_read_sum(nm, buf, 64) == 0, "out-of-range method accepted");
    free(buf);
}

static void test_bench_fields(void)
{
    kvi_hw_limits hw;
    kvi_error e = { 0 };
    CHECK(kvi_hw_bench(&hw, 2, true, &e) == 0, "kvi_hw_bench: %s", e.msg);
    CHECK(hw.n_read_methods == 1 && hw.read_method && hw.read_methods[0].method &&
              !strcmp(hw.read_method, hw.read_methods[0].method),
          "quick: %d methods", hw.n_read_methods);
    CHECK(hw.read_gbs > 0 && hw.read_gbs == hw.read_methods[0].median_gbs &&
              hw.read_methods[0].best_gbs >= hw.read_methods[0].median_gbs,
          "read %g median %g best %g", hw.read_gbs, hw.read_methods[0].median_gbs,
          hw.read_methods[0].best_gbs);
}

int main(void)
{
    test_methods();
    test_bench_fields();
    return test_main_end();
}
