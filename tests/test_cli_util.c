/*
 * test_cli_util.c — unit tests of the CLI helpers in cli/cli_util.c and of the
 * shared flag parser in cli/cli_opts.c (compiled into this test directly, with
 * cli/cli_pipe.c that cli_load_model calls: the tool's sources are not part of
 * kvinfer_core). Expected values are
 * written out by hand.
 */
#include "kvinfer.h"
#include "cli/cli_util.c"
#include "cli/cli_opts.c"
#include "cli/cli_pipe.c"

#include "testutil.h"

#include <fcntl.h>

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
    const char *bad[] = { "1,,2", ",1", "1,", "1,x", "[1,2", "1,2]", "1.5", "99999999999", "1-2" };
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

    char *s = kvi_utf8_sanitize("a\xc3\xa9"
                                "b",
                                4);
    CHECK(s && strcmp(s, "a\xc3\xa9"
                         "b") == 0,
          "valid text unchanged");
    free(s);
    s = kvi_utf8_sanitize("a\xff"
                          "b",
                          3);
    CHECK(s && strcmp(s, "a\xef\xbf\xbd"
                         "b") == 0,
          "0xFF becomes U+FFFD");
    free(s);
    s = kvi_utf8_sanitize("\xe2\x98", 2); /* truncated sequence: two bad bytes */
    CHECK(s && strcmp(s, "\xef\xbf\xbd\xef\xbf\xbd") == 0, "truncated sequence");
    free(s);
    s = kvi_utf8_sanitize("\xed\xa0\x80", 3); /* a surrogate */
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

    char *argv[] = { "run", "-n", "5", "-m" };
    int i = 1;
    const char *v = cli_flag_value(4, argv, &i);
    CHECK(v && strcmp(v, "5") == 0 && i == 2, "flag value");
    i = 3;
    CHECK(cli_flag_value(4, argv, &i) == NULL && i == 3, "missing value");
}

/* cli_opt_common over words[0..n) (a command name is put before them) from a
 * fresh cli_common: 1 when every word was consumed, else the first other result
 * (0: not a flag of the mask, -1: an error); *stop: the argv index it stopped
 * at (n + 1 when all were consumed). What went to stderr is in err (cut to
 * cap - 1 bytes, NUL-terminated). */
static int parse_words(unsigned which, cli_common *o, int n, const char *const *words, int *stop, char *err,
                       size_t cap)
{
    char *argv[16];
    argv[0] = "cmd";
    for (int k = 0; k < n && k < 15; k++) argv[k + 1] = (char *)words[k];
    const int argc = n + 1;
    cli_common_init(o);
    const char *path = tmp_path("cli_opts_stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    int r = 1, i = 1;
    for (; i < argc; i++)
        if ((r = cli_opt_common(argc, argv, &i, o, which)) != 1) break;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *stop = i;
    size_t len = 0;
    char *text = cli_read_file(path, &len);
    snprintf(err, cap, "%s", text ? text : "");
    free(text);
    return r;
}

#define ALL_FLAGS                                                                                        \
    (CLI_OPT_MODEL | CLI_OPT_TOKENIZER | CLI_OPT_MMAP | CLI_OPT_PROMPT | CLI_OPT_THREADS | CLI_OPT_CTX | \
     CLI_OPT_KV_TYPE | CLI_OPT_KV_TYPE_KV | CLI_OPT_KV_BLOCK | CLI_OPT_KV_BUDGET | CLI_OPT_NO_PREFIX |   \
     CLI_OPT_POLICY)
#define WORDS(...)                                                                                    \
    (int)(sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *)), (const char *const[]) \
    {                                                                                                 \
        __VA_ARGS__                                                                                   \
    }

static void test_common_values(void)
{
    cli_common o;
    char err[512];
    int stop;
    int r = parse_words(ALL_FLAGS, &o, WORDS("-t", "3", "-c", "128", "--kv-type", "q8_0"), &stop, err,
                        sizeof err);
    CHECK(r == 1 && stop == 7 && err[0] == 0, "-t 3 -c 128 --kv-type q8_0: r %d stop %d err '%s'", r, stop,
          err);
    CHECK(o.n_threads == 3 && o.n_ctx == 128, "threads %lld ctx %lld", (long long)o.n_threads,
          (long long)o.n_ctx);
    CHECK(o.kv_k == KVI_TYPE_Q8_0 && o.kv_v == KVI_TYPE_Q8_0, "--kv-type q8_0 sets K and V");
    CHECK(o.sink == 4 && o.keep == 0 && o.window == 0 && !o.ctx_policy && !o.model && !o.mmap && !o.no_prefix,
          "what was not given keeps its default");

    r = parse_words(ALL_FLAGS, &o,
                    WORDS("-m", "a.gguf", "--tokenizer", "t.bin", "--mmap", "--kv-type-k", "q4",
                          "--kv-type-v", "f32", "--kv-block", "8", "--kv-budget", "64KiB",
                          "--no-prefix-cache"),
                    &stop, err, sizeof err);
    CHECK(r == 1 && stop == 15, "model and KV flags: r %d stop %d err '%s'", r, stop, err);
    CHECK(o.model && !strcmp(o.model, "a.gguf") && o.tokenizer && !strcmp(o.tokenizer, "t.bin") && o.mmap,
          "model, tokenizer, mmap");
    CHECK(o.kv_k == KVI_TYPE_KV_Q4 && o.kv_v == KVI_TYPE_F32, "--kv-type-k q4 --kv-type-v f32");
    CHECK(o.kv_block == 8 && o.kv_budget == 65536 && o.no_prefix, "block %lld budget %zu",
          (long long)o.kv_block, o.kv_budget);
    kvi_engine_params ep;
    cli_opt_engine_params(&o, &ep);
    CHECK(ep.kv_type_k == KVI_TYPE_KV_Q4 && ep.kv_type_v == KVI_TYPE_F32 && ep.kv_block_size == 8 &&
              ep.kv_budget_bytes == 65536 && !ep.prefix_cache,
          "applied to the engine parameters");

    r = parse_words(ALL_FLAGS, &o,
                    WORDS("--ctx-policy", "sinks", "--keep", "1", "--sink", "2", "--window", "9"), &stop, err,
                    sizeof err);
    CHECK(r == 1 && o.keep == 1 && o.sink == 2 && o.window == 9, "policy numbers");
    CHECK(cli_opt_policy(&o) && !strcmp(cli_opt_policy(&o), "sinks"), "policy sinks");
    cli_opt_engine_params(&o, &ep);
    CHECK(!strcmp(ep.ctx_policy, "sinks") && ep.n_keep == 1 && ep.n_sink == 2 && ep.n_window == 9,
          "policy applied");
    r = parse_words(ALL_FLAGS, &o, WORDS("--ctx-policy", "error"), &stop, err, sizeof err);
    CHECK(r == 1 && o.ctx_policy && !strcmp(o.ctx_policy, "error") && cli_opt_policy(&o) == NULL,
          "--ctx-policy error is kept as given but evicts nothing");

    r = parse_words(ALL_FLAGS, &o, WORDS("-p", "hi", "-f", "x.txt", "--tokens", "1,2", "--special"), &stop,
                    err, sizeof err);
    CHECK(r == 1 && !strcmp(o.prompt, "hi") && !strcmp(o.file, "x.txt") && !strcmp(o.tokens, "1,2") &&
              o.special,
          "prompt flags");

    /* no flag: the engine parameters are cli_engine_params_default's */
    cli_common_init(&o);
    kvi_engine_params def;
    cli_engine_params_default(&def);
    cli_opt_engine_params(&o, &ep);
    CHECK(ep.n_threads == def.n_threads && ep.n_ctx == def.n_ctx && ep.kv_type_k == def.kv_type_k &&
              ep.kv_type_v == def.kv_type_v && ep.kv_block_size == def.kv_block_size &&
              ep.kv_budget_bytes == def.kv_budget_bytes && ep.prefix_cache == def.prefix_cache &&
              !strcmp(ep.ctx_policy, def.ctx_policy) && ep.n_keep == def.n_keep && ep.n_sink == def.n_sink &&
              ep.n_window == def.n_window && ep.n_seq_max == def.n_seq_max &&
              ep.n_batch_max == def.n_batch_max,
          "no flag given: the defaults");
}

static void test_common_errors(void)
{
    cli_common o;
    char err[512];
    int stop;
    int r = parse_words(ALL_FLAGS, &o, WORDS("-t", "1025"), &stop, err, sizeof err);
    CHECK(r == -1 && !strcmp(err, "kvinfer: error: -t: '1025' is not an integer in [0, 1024]\n") &&
              o.n_threads == 0,
          "-t 1025: r %d '%s'", r, err);
    r = parse_words(ALL_FLAGS, &o, WORDS("--ctx-size", "0"), &stop, err, sizeof err);
    CHECK(r == -1 && !strcmp(err, "kvinfer: error: --ctx-size: '0' is not an integer in [1, 16777216]\n"),
          "-c 0: '%s'", err);
    r = parse_words(ALL_FLAGS | CLI_OPT_CTX_MIN0, &o, WORDS("-c", "0"), &stop, err, sizeof err);
    CHECK(r == 1 && o.n_ctx == 0, "-c 0 with CTX_MIN0");
    r = parse_words(ALL_FLAGS | CLI_OPT_CTX_MIN4, &o, WORDS("-c", "3"), &stop, err, sizeof err);
    CHECK(r == -1 && !strcmp(err, "kvinfer: error: -c: '3' is not an integer in [4, 16777216]\n"),
          "-c 3: '%s'", err);
    r = parse_words(ALL_FLAGS | CLI_OPT_TERSE, &o, WORDS("--threads", "x"), &stop, err, sizeof err);
    CHECK(r == -1 && !strcmp(err, "kvinfer: error: --threads: bad value 'x'\n"), "terse: '%s'", err);
    r = parse_words(ALL_FLAGS, &o, WORDS("--kv-block", "4097"), &stop, err, sizeof err);
    CHECK(r == -1 && o.kv_block == 0, "--kv-block 4097");
    r = parse_words(ALL_FLAGS, &o, WORDS("--sink", "16777217"), &stop, err, sizeof err);
    CHECK(r == -1 && o.sink == 4, "--sink past 2^24");
    r = parse_words(ALL_FLAGS, &o, WORDS("-m"), &stop, err, sizeof err);
    CHECK(r == -1 && !strcmp(err, "kvinfer: error: flag -m needs a value\n"), "-m without a value: '%s'",
          err);

    /* KV types: the cache's types, any type, or checked later */
    r = parse_words(ALL_FLAGS, &o, WORDS("--kv-type", "bf16"), &stop, err, sizeof err);
    CHECK(r == -1 && strstr(err, "--kv-type: unknown KV cache type 'bf16'") && o.kv_k == KVI_TYPE_F16,
          "bf16: '%s'", err);
    r = parse_words(ALL_FLAGS | CLI_OPT_KV_ANY, &o, WORDS("--kv-type", "bf16"), &stop, err, sizeof err);
    CHECK(r == 1 && o.kv_k == KVI_TYPE_BF16 && o.kv_v == KVI_TYPE_BF16, "bf16 with KV_ANY");
    r = parse_words(ALL_FLAGS | CLI_OPT_KV_ANY, &o, WORDS("--kv-type", "nope"), &stop, err, sizeof err);
    CHECK(r == -1 && !strcmp(err, "kvinfer: error: --kv-type: unknown type 'nope'\n"), "KV_ANY: '%s'", err);
    r = parse_words(ALL_FLAGS | CLI_OPT_KV_LATER, &o, WORDS("--kv-type", "nope", "--kv-type-v", "q8_0"),
                    &stop, err, sizeof err);
    CHECK(r == 1 && o.kv_k == KVI_TYPE_F16 && !strcmp(o.kv_k_name, "nope") && !strcmp(o.kv_v_name, "q8_0"),
          "KV_LATER keeps the names");
    CHECK(cli_opt_kv_check(&o) == 1, "KV_LATER: 'nope' fails the check");
    r = parse_words(ALL_FLAGS | CLI_OPT_KV_LATER, &o, WORDS("--kv-type-k", "q4_0", "--kv-type-v", "f32"),
                    &stop, err, sizeof err);
    CHECK(r == 1 && cli_opt_kv_check(&o) == 0 && o.kv_k == KVI_TYPE_Q4_0 && o.kv_v == KVI_TYPE_F32,
          "KV_LATER: resolved by the check");

    /* --kv-budget: 0 only with BUDGET_ZERO */
    r = parse_words(ALL_FLAGS, &o, WORDS("--kv-budget", "0"), &stop, err, sizeof err);
    CHECK(r == -1 &&
              !strcmp(err, "kvinfer: error: --kv-budget: '0' is not a size (bytes, or like 512MiB, 2GiB)\n"),
          "budget 0: '%s'", err);
    r = parse_words(ALL_FLAGS | CLI_OPT_BUDGET_ZERO, &o, WORDS("--kv-budget", "0"), &stop, err, sizeof err);
    CHECK(r == 1 && o.kv_budget == 0, "budget 0 with BUDGET_ZERO");
    r = parse_words(ALL_FLAGS | CLI_OPT_BUDGET_ZERO, &o, WORDS("--kv-budget", "12Q"), &stop, err, sizeof err);
    CHECK(r == -1 && !strcmp(err, "kvinfer: error: --kv-budget: '12Q' is not a size\n"),
          "serve's budget: '%s'", err);

    r = parse_words(ALL_FLAGS, &o, WORDS("--ctx-policy", "nonsense"), &stop, err, sizeof err);
    CHECK(r == -1 && strstr(err, "--ctx-policy: 'nonsense' is not a policy"), "policy: '%s'", err);
    r = parse_words(ALL_FLAGS | CLI_OPT_POLICY_UNKNOWN, &o, WORDS("--ctx-policy", "nonsense"), &stop, err,
                    sizeof err);
    CHECK(r == -1 && strstr(err, "--ctx-policy: unknown policy 'nonsense'"), "policy, perplexity's: '%s'",
          err);
}

static void test_common_mask(void)
{
    cli_common o;
    char err[512];
    int stop;
    /* a flag outside the mask is not consumed: 0, nothing read, nothing printed */
    int r = parse_words(CLI_OPT_THREADS, &o, WORDS("-t", "2", "--kv-type", "f32"), &stop, err, sizeof err);
    CHECK(r == 0 && stop == 3 && o.n_threads == 2 && o.kv_k == KVI_TYPE_F16 && err[0] == 0,
          "--kv-type outside the mask: r %d stop %d", r, stop);
    r = parse_words(CLI_OPT_KV_TYPE, &o, WORDS("--kv-type-k", "f32"), &stop, err, sizeof err);
    CHECK(r == 0 && stop == 1 && o.kv_k == KVI_TYPE_F16, "--kv-type-k needs CLI_OPT_KV_TYPE_KV");
    r = parse_words(CLI_OPT_KV_TYPE_KV, &o, WORDS("--kv-type", "f32"), &stop, err, sizeof err);
    CHECK(r == 0 && stop == 1, "--kv-type needs CLI_OPT_KV_TYPE");
    r = parse_words(CLI_OPT_MODEL, &o, WORDS("--mmap"), &stop, err, sizeof err);
    CHECK(r == 0 && !o.mmap, "--mmap needs CLI_OPT_MMAP");
    r = parse_words(CLI_OPT_MODEL, &o, WORDS("--tokenizer", "t.bin"), &stop, err, sizeof err);
    CHECK(r == 0 && !o.tokenizer, "--tokenizer needs CLI_OPT_TOKENIZER");
    r = parse_words(CLI_OPT_MODEL | CLI_OPT_THREADS, &o, WORDS("-c", "64"), &stop, err, sizeof err);
    CHECK(r == 0 && o.n_ctx == 0, "-c needs CLI_OPT_CTX");
    r = parse_words(CLI_OPT_CTX, &o, WORDS("--kv-block", "8", "--no-prefix-cache"), &stop, err, sizeof err);
    CHECK(r == 0 && stop == 1 && o.kv_block == 0, "--kv-block needs CLI_OPT_KV_BLOCK");
    r = parse_words(CLI_OPT_CTX, &o, WORDS("--no-prefix-cache"), &stop, err, sizeof err);
    CHECK(r == 0 && !o.no_prefix, "--no-prefix-cache needs CLI_OPT_NO_PREFIX");
    r = parse_words(CLI_OPT_KV_TYPE, &o, WORDS("--sink", "2", "--ctx-policy", "shift"), &stop, err,
                    sizeof err);
    CHECK(r == 0 && o.sink == 4 && !o.ctx_policy, "policy flags need CLI_OPT_POLICY");
    r = parse_words(CLI_OPT_MODEL, &o, WORDS("-p", "hi"), &stop, err, sizeof err);
    CHECK(r == 0 && !o.prompt, "-p needs CLI_OPT_PROMPT");
    r = parse_words(ALL_FLAGS, &o, WORDS("--ctx", "64"), &stop, err, sizeof err);
    CHECK(r == 0, "--ctx is kv-plan's own spelling, not a shared flag");
}

int main(void)
{
    test_numbers();
    test_ids();
    test_utf8();
    test_files();
    test_common_values();
    test_common_errors();
    test_common_mask();
    return test_main_end();
}
