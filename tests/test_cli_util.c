/*
 * test_cli_util.c — unit tests of the CLI helpers in cli/cli_util.c (compiled
 * into this test directly: the tool's sources are not part of kvinfer_core).
 * Expected values are written out by hand.
 */
#include "kvinfer.h"
#include "cli/cli_util.c"

#include "testutil.h"

static void test_numbers(void)
{
    int64_t v = 0;
    CHECK(cli_parse_i64("128", -1, 1000, &v) && v == 128, "128");
    CHECK(cli_parse_i64("-1", -1, 1000, &v) && v == -1, "-1");
    CHECK(!cli_parse_i64("-2", -1, 1000, &v), "-2 below min");
    CHECK(!cli_parse_i64("1001", -1, 1000, &v), "above max");
    CHECK(!cli_parse_i64("abc", -1, 1000, &v), "abc");
    CHECK(!cli_parse_i64("5x", -1, 1000, &v), "5x");
    CHECK(!cli_parse_i64("", -1, 1000, &v), "empty");
    CHECK(!cli_parse_i64(" 5", -1, 1000, &v), "leading space");
    CHECK(!cli_parse_i64("99999999999999999999", INT64_MIN, INT64_MAX, &v), "overflow");

    uint64_t u = 0;
    CHECK(cli_parse_u64("18446744073709551615", &u) && u == UINT64_MAX, "u64 max");
    CHECK(cli_parse_u64("010", &u) && u == 10, "010 is decimal ten");
    CHECK(cli_parse_u64("0x10", &u) && u == 16, "0x10");
    CHECK(!cli_parse_u64("-1", &u), "-1 is not unsigned");
    CHECK(!cli_parse_u64("18446744073709551616", &u), "u64 overflow");

    float f = 0;
    CHECK(cli_parse_f32("0.8", &f) && f == 0.8f, "0.8");
    CHECK(cli_parse_f32("1e-3", &f) && f == 1e-3f, "1e-3");
    CHECK(!cli_parse_f32("0.8x", &f), "0.8x");
    CHECK(!cli_parse_f32("nan", &f), "nan");
    CHECK(!cli_parse_f32("inf", &f), "inf");
    CHECK(!cli_parse_f32("1e39", &f), "beyond float range");

    size_t s = 0;
    CHECK(cli_parse_size("4096", &s) && s == 4096, "4096");
    CHECK(cli_parse_size("512MiB", &s) && s == (size_t)512 << 20, "512MiB");
    CHECK(cli_parse_size("2GiB", &s) && s == (size_t)2 << 30, "2GiB");
    CHECK(cli_parse_size("1.5G", &s) && s == (size_t)3 << 29, "1.5G");
    CHECK(cli_parse_size("64k", &s) && s == 65536, "64k");
    CHECK(cli_parse_size("100B", &s) && s == 100, "100B");
    CHECK(!cli_parse_size("12Q", &s), "12Q");
    CHECK(!cli_parse_size("-5", &s), "-5");
    CHECK(!cli_parse_size("5MiBx", &s), "5MiBx");
    CHECK(!cli_parse_size("", &s), "empty size");
}

static void test_ids(void)
{
    int32_t *ids = NULL, n = -1;
    CHECK(cli_parse_ids("1,2,3", &ids, &n) && n == 3 && ids[0] == 1 && ids[2] == 3, "1,2,3");
    free(ids);
    ids = NULL;
    CHECK(cli_parse_ids("[1, 403, 407]", &ids, &n) && n == 3 && ids[1] == 403, "[1, 403, 407]");
    free(ids);
    ids = NULL;
    CHECK(cli_parse_ids("7 8", &ids, &n) && n == 2 && ids[1] == 8, "7 8");
    free(ids);
    ids = NULL;
    const char *bad[] = {"1,,2", ",1", "1,", "1,x", "[1,2", "1,2]", "1.5", "99999999999", "1-2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ids = NULL;
        CHECK(!cli_parse_ids(bad[i], &ids, &n), "'%s' should be rejected", bad[i]);
        CHECK(ids == NULL, "'%s': no array on failure", bad[i]);
    }
}

static void test_utf8(void)
{
    /* "é" = C3 A9, "☕" = E2 98 95, "😀" = F0 9F 98 80 */
    CHECK(kvi_utf8_complete_prefix("ab", 2) == 2, "ascii");
    CHECK(kvi_utf8_complete_prefix("a\xc3", 2) == 1, "lead of 2 held back");
    CHECK(kvi_utf8_complete_prefix("a\xc3\xa9", 3) == 3, "complete 2");
    CHECK(kvi_utf8_complete_prefix("a\xe2\x98", 3) == 1, "2 of 3 held back");
    CHECK(kvi_utf8_complete_prefix("\xe2\x98\x95", 3) == 3, "complete 3");
    CHECK(kvi_utf8_complete_prefix("x\xf0\x9f\x98", 4) == 1, "3 of 4 held back");
    CHECK(kvi_utf8_complete_prefix("\xf0\x9f\x98\x80", 4) == 4, "complete 4");
    CHECK(kvi_utf8_complete_prefix("a\x80", 2) == 2, "stray continuation is not waited for");

    char *s = kvi_utf8_sanitize("a\xc3\xa9" "b", 4);
    CHECK(s && strcmp(s, "a\xc3\xa9" "b") == 0, "valid text unchanged");
    free(s);
    s = kvi_utf8_sanitize("a\xff" "b", 3);
    CHECK(s && strcmp(s, "a\xef\xbf\xbd" "b") == 0, "0xFF becomes U+FFFD");
    free(s);
    s = kvi_utf8_sanitize("\xe2\x98", 2);   /* truncated sequence: two bad bytes */
    CHECK(s && strcmp(s, "\xef\xbf\xbd\xef\xbf\xbd") == 0, "truncated sequence");
    free(s);
    s = kvi_utf8_sanitize("\xed\xa0\x80", 3);   /* a surrogate */
    CHECK(s && strlen(s) == 9, "surrogate rejected");
    free(s);
}

static void test_files(void)
{
    const char *p = tmp_path("cli_util_read.txt");
    const char text[] = "line one\nline two\n";
    CHECK(write_file(p, text, sizeof text - 1) == 0, "write %s", p);
    size_t len = 0;
    char *s = cli_read_file(p, &len);
    CHECK(s && len == sizeof text - 1 && strcmp(s, text) == 0, "read back");
    free(s);
    CHECK(cli_read_file(tmp_path("does/not/exist.txt"), &len) == NULL, "missing file gives NULL");

    char *argv[] = {"run", "-n", "5", "-m"};
    int i = 1;
    const char *v = cli_flag_value(4, argv, &i);
    CHECK(v && strcmp(v, "5") == 0 && i == 2, "flag value");
    i = 3;
    CHECK(cli_flag_value(4, argv, &i) == NULL && i == 3, "missing value");
}

int main(void)
{
    test_numbers();
    test_ids();
    test_utf8();
    test_files();
    return test_main_end();
}
