/*
 * test_cli.c — end-to-end tests of the `kvinfer` tool (run through run_kvinfer()):
 * help texts, one-line errors with exit status 1, tokenize / detokenize, run
 * (greedy tokens, JSON fields, --no-kv-cache, --tokens) and logits, all against
 * the llama2.c golden outputs for stories260K in ../shared/golden.
 *
 * Expected values come from ../shared (golden JSON) or are computed by hand here
 * (row counts, the text of a round trip); never from a previous kvinfer run.
 */
#include "kvinfer.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char model[4096]; /* quoted path of stories260K.gguf */

static int count_char(const char *s, char c)
{
    int n = 0;
    for (; s && *s; s++) n += *s == c;
    return n;
}

/* An error: exit status 1 and exactly one line on stderr starting "kvinfer: error:". */
static void check_one_line_error(const char *args)
{
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 1, "'%s': exit status %d, want 1", args, rc);
    CHECK(err && count_char(err, '\n') == 1 && strncmp(err, "kvinfer: error:", 15) == 0,
          "'%s': want one error line on stderr, got: %s", args, err ? err : "(null)");
    free(out);
    free(err);
}

/* Parses stdout that must be exactly one JSON document (plus whitespace). */
static cJSON *parse_only_json(const char *out, const char *what)
{
    if (!out) {
        CHECK(out != NULL, "%s: no stdout", what);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(out, &end, 0);
    CHECK(j != NULL, "%s: stdout is not JSON: %.200s", what, out);
    if (!j) return NULL;
    while (end && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
    CHECK(end && *end == '\0', "%s: stdout has more than one JSON document", what);
    return j;
}

/* True when the JSON array holds exactly the ints of the golden array (first n of it). */
static bool ids_equal(const cJSON *arr, const cJSON *gold, int n)
{
    if (!cJSON_IsArray(arr) || !cJSON_IsArray(gold)) return false;
    if (cJSON_GetArraySize(arr) != n || cJSON_GetArraySize(gold) < n) return false;
    for (int i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(arr, i), *g = cJSON_GetArrayItem(gold, i);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(g) || a->valueint != g->valueint) return false;
    }
    return true;
}

static void test_help_and_errors(void)
{
    const char *helps[] = { "--help",          "run --help",        "logits --help",
                            "tokenize --help", "detokenize --help", "run -h" };
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        char *out = NULL, *err = NULL;
        int rc = run_kvinfer(helps[i], &out, &err);
        CHECK(rc == 0, "'%s' exit %d", helps[i], rc);
        CHECK(out && strstr(out, "usage") && strlen(out) > 100, "'%s': no help text", helps[i]);
        free(out);
        free(err);
    }
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer("run --help", &out, &err);
    const char *flags[] = { "--n-predict", "--temp",           "--top-k",         "--top-p",
                            "--min-p",     "--repeat-penalty", "--repeat-last-n", "--seed",
                            "--threads",   "--ctx-size",       "--tokens",        "--ignore-eos",
                            "--special",   "--kv-type",        "--no-kv-cache",   "--mmap",
                            "--tokenizer", "--json",           "default 256",     "default 0.8" };
    for (size_t i = 0; rc == 0 && i < sizeof flags / sizeof flags[0]; i++)
        CHECK(out && strstr(out, flags[i]), "run --help does not mention %s", flags[i]);
    free(out);
    free(err);

    rc = run_kvinfer("--version", &out, &err);
    CHECK(rc == 0 && out && strncmp(out, "kvinfer ", 8) == 0, "--version: exit %d", rc);
    free(out);
    free(err);

    rc = run_kvinfer("", &out, &err);
    CHECK(rc == 1 && err && strstr(err, "usage"), "no command: exit %d, want 1 and help on stderr", rc);
    CHECK(out && out[0] == '\0', "no command: stdout should be empty");
    free(out);
    free(err);

    /* the arguments of each, %s standing for the model */
    const char *bad[] = { "frobnicate",
                          "--frobnicate",
                          "run --bogus-flag",
                          "run -m %s -n abc",
                          "run -m %s -n 5x",
                          "run -m %s --temp",
                          "run -m %s --kv-type q9",
                          "run -m /nonexistent/dir/model.gguf -p hi",
                          "run -m %s -f /nonexistent/prompt.txt",
                          "run -m %s -p 'Once upon a time' -c 3", /* 5 tokens > 3 */
                          "run -m %s --tokens 1,99999",
                          "detokenize -m %s 1,512", /* vocab is 512 */
                          "detokenize -m %s 1,x",
                          "tokenize -m %s --bogus hi",
                          "logits -m %s --tokens 1 -t many" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[8192];
        snprintf(args, sizeof args, bad[i], model);
        check_one_line_error(args);
    }
}

/* Runs `<cmd> -m model --json <extra>`, CHECKed to exit 0: its stdout parsed as one
 * JSON document (parse_only_json), NULL on failure. */
static cJSON *cmd_json(const char *cmd, const char *extra)
{
    char args[8192], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "%s -m %s --json %s", cmd, model, extra);
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0, "'%s': exit %d: %s", args, rc, err ? err : "");
    cJSON *j = rc == 0 ? parse_only_json(out, args) : NULL;
    free(out);
    free(err);
    return j;
}

static void test_tokenize(const cJSON *gold)
{
    char args[8192], *out = NULL, *err = NULL;
    cJSON *j = cmd_json("tokenize", "\"Once upon a time\"");
    const cJSON *gp = cJSON_GetObjectItem(gold, "prompt_tokens");
    CHECK(j && ids_equal(cJSON_GetObjectItem(j, "tokens"), gp, cJSON_GetArraySize(gp)),
          "tokenize of 'Once upon a time' differs from the golden [1, 403, 407, 261, 378]");
    cJSON_Delete(j);

    /* the text form: one line per token, id TAB quoted piece */
    snprintf(args, sizeof args, "tokenize -m %s -p \"Once upon a time\"", model);
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0 && out && count_char(out, '\n') == 5 && strncmp(out, "1\t'", 3) == 0 &&
              strstr(out, "\n403\t'"),
          "tokenize text output: %s", out ? out : "(null)");
    free(out);
    free(err);

    /* empty text and whitespace-only text are accepted without BOS */
    snprintf(args, sizeof args, "tokenize -m %s --no-bos --json -p ''", model);
    rc = run_kvinfer(args, &out, &err);
    j = rc == 0 ? parse_only_json(out, "tokenize empty") : NULL;
    CHECK(j && cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) == 0,
          "tokenize --no-bos '' should give no tokens (exit %d): %s", rc, out ? out : "");
    cJSON_Delete(j);
    free(out);
    free(err);

    const char *ws = tmp_path("cli_ws.txt");
    CHECK(write_file(ws, "  \n", 3) == 0, "cannot write %s", ws);
    snprintf(args, sizeof args, "tokenize -m %s --no-bos --json -f '%s'", model, ws);
    rc = run_kvinfer(args, &out, &err);
    j = rc == 0 ? parse_only_json(out, "tokenize whitespace") : NULL;
    const cJSON *toks = j ? cJSON_GetObjectItem(j, "tokens") : NULL;
    CHECK(cJSON_GetArraySize(toks) >= 1, "tokenize --no-bos of '  \\n' (exit %d): %s", rc, err ? err : "");
    /* no BOS (id 1) anywhere */
    for (int i = 0; i < cJSON_GetArraySize(toks); i++)
        CHECK(cJSON_GetArrayItem(toks, i)->valueint != 1, "--no-bos output holds BOS");
    cJSON_Delete(j);
    free(out);
    free(err);

    /* round trip with multi-byte UTF-8 (byte-fallback tokens in a 512-token vocabulary):
     * BOS first, so detokenize drops the SentencePiece leading space */
    const char *text = "Lily saw a caf\xc3\xa9 \xe2\x98\x95 and a cat.";
    const char *tf = tmp_path("cli_utf8.txt");
    CHECK(write_file(tf, text, strlen(text)) == 0, "cannot write %s", tf);
    snprintf(args, sizeof args, "tokenize -m %s --json -f '%s'", model, tf);
    rc = run_kvinfer(args, &out, &err);
    j = rc == 0 ? parse_only_json(out, "tokenize utf8") : NULL;
    char ids[1024] = "";
    toks = j ? cJSON_GetObjectItem(j, "tokens") : NULL;
    for (int i = 0; i < cJSON_GetArraySize(toks) && strlen(ids) < 1000; i++) {
        size_t l = strlen(ids);
        snprintf(ids + l, sizeof ids - l, i ? ",%d" : "%d", cJSON_GetArrayItem(toks, i)->valueint);
    }
    cJSON_Delete(j);
    free(out);
    free(err);
    snprintf(args, sizeof args, "detokenize -m %s --json %s", model, ids);
    rc = run_kvinfer(args, &out, &err);
    j = rc == 0 ? parse_only_json(out, "detokenize utf8") : NULL;
    const cJSON *t = j ? cJSON_GetObjectItem(j, "text") : NULL;
    CHECK(cJSON_IsString(t) && strcmp(t->valuestring, text) == 0,
          "tokenize + detokenize round trip: got '%s', want '%s'",
          cJSON_IsString(t) ? t->valuestring : "(none)", text);
    cJSON_Delete(j);
    free(out);
    free(err);
}

static double stat_num(const cJSON *j, const char *name)
{
    const cJSON *s = cJSON_GetObjectItem(j, "stats");
    const cJSON *v = s ? cJSON_GetObjectItem(s, name) : NULL;
    CHECK(cJSON_IsNumber(v), "stats.%s missing or not a number", name);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void test_run(const cJSON *gold)
{
    const cJSON *gp = cJSON_GetObjectItem(gold, "prompt_tokens");
    const cJSON *gg = cJSON_GetObjectItem(gold, "greedy_tokens");
    const cJSON *gtext = cJSON_GetObjectItem(gold, "greedy_text");

    cJSON *j = cmd_json("run", "--temp 0 -n 20 --kv-type f32 --seed 7 -p \"Once upon a time\"");
    if (j) {
        CHECK(ids_equal(cJSON_GetObjectItem(j, "prompt_tokens"), gp, 5), "prompt_tokens differ from golden");
        CHECK(ids_equal(cJSON_GetObjectItem(j, "tokens"), gg, 20), "greedy tokens differ from golden");
        const cJSON *fr = cJSON_GetObjectItem(j, "finish_reason");
        CHECK(cJSON_IsString(fr) && strcmp(fr->valuestring, "length") == 0, "finish_reason should be length");
        const char *stats[] = { "n_prompt",  "n_gen",        "prefill_ms", "prefill_tok_s",      "ttft_ms",
                                "decode_ms", "decode_tok_s", "kv_bytes",   "kv_bytes_per_token", "n_threads",
                                "seed",      "rows_computed" };
        for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) stat_num(j, stats[i]);
        CHECK(stat_num(j, "n_prompt") == 5 && stat_num(j, "n_gen") == 20, "n_prompt / n_gen");
        CHECK(stat_num(j, "seed") == 7, "seed not reported");
        /* 5 prompt rows + one row for each of tokens 1..19 (token 20 is never run) */
        CHECK(stat_num(j, "rows_computed") == 24, "rows_computed %g, want 24", stat_num(j, "rows_computed"));
        /* f32 K and V: the KV cache grows with the tokens held (24 positions) */
        double bpt = stat_num(j, "kv_bytes_per_token");
        CHECK(bpt > 0 && stat_num(j, "kv_bytes") >= 24 * bpt, "kv_bytes %g < 24 * %g",
              stat_num(j, "kv_bytes"), bpt);
        const cJSON *st = cJSON_GetObjectItem(j, "stats");
        const cJSON *kt = st ? cJSON_GetObjectItem(st, "kv_type") : NULL;
        CHECK(cJSON_IsString(kt) && strcmp(kt->valuestring, "f32") == 0, "stats.kv_type should be f32");
        CHECK(cJSON_IsString(cJSON_GetObjectItem(st, "isa")), "stats.isa missing");

        /* text: the generated part of the golden text, and what detokenize says */
        const cJSON *text = cJSON_GetObjectItem(j, "text");
        CHECK(cJSON_IsString(text) && cJSON_IsString(gtext) && strlen(text->valuestring) > 20 &&
                  strncmp(gtext->valuestring, text->valuestring, strlen(text->valuestring)) == 0,
              "text '%s' is not a prefix of the golden greedy_text",
              cJSON_IsString(text) ? text->valuestring : "");
        char ids[1024] = "", args[8192], *out = NULL, *err = NULL;
        const cJSON *toks = cJSON_GetObjectItem(j, "tokens");
        for (int i = 0; i < cJSON_GetArraySize(toks); i++) {
            size_t l = strlen(ids);
            snprintf(ids + l, sizeof ids - l, i ? ",%d" : "%d", cJSON_GetArrayItem(toks, i)->valueint);
        }
        snprintf(args, sizeof args, "detokenize -m %s --json %s", model, ids);
        int rc = run_kvinfer(args, &out, &err);
        cJSON *d = rc == 0 ? parse_only_json(out, "detokenize") : NULL;
        const cJSON *dt = d ? cJSON_GetObjectItem(d, "text") : NULL;
        CHECK(cJSON_IsString(dt) && cJSON_IsString(text) && strcmp(dt->valuestring, text->valuestring) == 0,
              "run text differs from detokenize of its tokens");
        cJSON_Delete(d);
        free(out);
        free(err);
    }

    /* without the KV cache: same tokens, rows 5 + (6 + 7 + ... + 24) = 290 */
    cJSON *nk = cmd_json("run", "--temp 0 -n 20 --kv-type f32 --no-kv-cache -p \"Once upon a time\"");
    if (nk) {
        CHECK(ids_equal(cJSON_GetObjectItem(nk, "tokens"), gg, 20),
              "--no-kv-cache tokens differ from golden");
        CHECK(stat_num(nk, "rows_computed") == 290, "--no-kv-cache rows_computed %g, want 290",
              stat_num(nk, "rows_computed"));
        if (j) CHECK(stat_num(nk, "rows_computed") > stat_num(j, "rows_computed"), "no-kv rows not larger");
    }
    cJSON_Delete(nk);
    cJSON_Delete(j);

    /* --tokens: used as given, no extra BOS; the golden logits after [1, 403] peak at 407 */
    j = cmd_json("run", "--temp 0 -n 1 --kv-type f32 --tokens 1,403");
    if (j) {
        const cJSON *pt = cJSON_GetObjectItem(j, "prompt_tokens");
        CHECK(cJSON_GetArraySize(pt) == 2 && cJSON_GetArrayItem(pt, 0)->valueint == 1 &&
                  cJSON_GetArrayItem(pt, 1)->valueint == 403,
              "--tokens 1,403 should give prompt_tokens [1, 403]");
        const cJSON *t = cJSON_GetObjectItem(j, "tokens");
        CHECK(cJSON_GetArraySize(t) == 1 && cJSON_GetArrayItem(t, 0)->valueint == 407,
              "after [1, 403] greedy should give 407");
    }
    cJSON_Delete(j);

    /* empty prompt: BOS alone (the model adds BOS) */
    j = cmd_json("run", "--temp 0 -n 2 -p ''");
    if (j) {
        const cJSON *pt = cJSON_GetObjectItem(j, "prompt_tokens");
        CHECK(cJSON_GetArraySize(pt) == 1 && cJSON_GetArrayItem(pt, 0)->valueint == 1,
              "empty prompt should be [BOS]");
    }
    cJSON_Delete(j);

    /* plain mode streams the prompt and the golden continuation to stdout, summary on stderr */
    char args[8192], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m %s --temp 0 -n 12 --kv-type f32 -p \"Once upon a time\"", model);
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0 && out && strncmp(out, "Once upon a time, there was", 27) == 0, "run stdout: %s",
          out ? out : "(null)");
    CHECK(err && strstr(err, "tok/s") && strstr(err, "KV cache") && strstr(err, "seed"), "run summary: %s",
          err ? err : "(null)");
    free(out);
    free(err);
}

static void test_logits(const cJSON *gold)
{
    cJSON *j = cmd_json("logits", "--kv-type f32 -p \"Once upon a time\"");
    const cJSON *gl = cJSON_GetObjectItem(gold, "prompt_logits");
    const cJSON *lg = j ? cJSON_GetObjectItem(j, "logits") : NULL;
    CHECK(j && ids_equal(cJSON_GetObjectItem(j, "prompt_tokens"), cJSON_GetObjectItem(gold, "prompt_tokens"),
                         5),
          "logits prompt_tokens");
    CHECK(cJSON_GetArraySize(lg) == cJSON_GetArraySize(gl) && cJSON_GetArraySize(gl) == 5, "logits rows");
    double maxdiff = 0;
    int n_cmp = 0;
    for (int p = 0; p < cJSON_GetArraySize(lg) && p < cJSON_GetArraySize(gl); p++) {
        const cJSON *a = cJSON_GetArrayItem(lg, p), *b = cJSON_GetArrayItem(gl, p);
        CHECK(cJSON_GetArraySize(a) == cJSON_GetArraySize(b) && cJSON_GetArraySize(b) == 512, "row %d size",
              p);
        for (int v = 0; v < cJSON_GetArraySize(a) && v < cJSON_GetArraySize(b); v++) {
            double d = fabs(cJSON_GetArrayItem(a, v)->valuedouble - cJSON_GetArrayItem(b, v)->valuedouble);
            if (!(d <= maxdiff)) maxdiff = d; /* NaN propagates as a failure */
            n_cmp++;
        }
    }
    CHECK(n_cmp == 5 * 512 && maxdiff <= 5e-4, "logits max abs diff %g over %d values (want <= 5e-4)",
          maxdiff, n_cmp);
    cJSON_Delete(j);

    /* text mode: one line per position */
    char args[8192], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "logits -m %s --kv-type f32 --tokens 1,403", model);
    int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0 && out && count_char(out, '\n') == 2 && strstr(out, " 407 '"), "logits text output: %s",
          out ? out : "(null)");
    free(out);
    free(err);
}

static void test_truncated_model(void)
{
    size_t len = 0;
    char *data = read_file(shared_path("models/stories260K.gguf"), &len);
    CHECK(data && len > 100000, "cannot read stories260K.gguf");
    if (!data) return;
    const char *cuts[] = { "cli_trunc_half.gguf", "cli_trunc_head.gguf" };
    size_t sizes[] = { len / 2, 100 };
    for (int k = 0; k < 2; k++) {
        const char *p = tmp_path(cuts[k]);
        CHECK(write_file(p, data, sizes[k]) == 0, "cannot write %s", p);
        char args[8192];
        snprintf(args, sizeof args, "run -m '%s' -p hi -n 3", p);
        check_one_line_error(args);
        snprintf(args, sizeof args, "logits -m '%s' -p hi", p);
        check_one_line_error(args);
    }
    free(data);
}

/* KV layer kinds in `kvinfer run` with a gemma-shaped synth model (gemma3-tiny:
 * 7 layers, 1 KV head x 64, window 16 on 6 layers): 256 bytes a token for the
 * global layer (2 x 64 x 2, f16), 1536 for the window layers; the global bytes are
 * ceil(positions / 16) blocks x 16 x 256 and grow with the run; the window bytes
 * stop growing past the window (the same at 100 and 200 tokens, at most
 * (16 + 64) / 16 + 2 = 7 parts of 16 x 1536 bytes), and before it nothing is
 * released. */
static void test_run_window(void)
{
    const char *model = tmp_path("cli_gemma3_tiny.gguf");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "synth --preset gemma3-tiny -o '%s'", model);
    int rc = run_kvinfer(cmd, NULL, NULL);
    CHECK(rc == 0, "synth gemma3-tiny: %d", rc);
    if (rc) return;
    const int n_gen[3] = { 4, 100, 200 };
    double glob[3], win[3], rel[3];
    for (int i = 0; i < 3; i++) {
        char *out = NULL, *err = NULL;
        snprintf(cmd, sizeof cmd,
                 "run -m '%s' -p 'the quick brown fox' -n %d --temp 0 --ignore-eos --json -t 2", model,
                 n_gen[i]);
        rc = run_kvinfer(cmd, &out, &err);
        cJSON *j = rc == 0 && out ? cJSON_Parse(out) : NULL;
        CHECK(j != NULL, "%s: rc %d", cmd, rc);
        const double pos = stat_num(j, "kv_tokens"), blocks = ceil(pos / 16);
        glob[i] = stat_num(j, "kv_bytes_global");
        win[i] = stat_num(j, "kv_bytes_window");
        rel[i] = stat_num(j, "kv_wparts_released");
        CHECK(stat_num(j, "kv_bytes_per_token_global") == 256 &&
                  stat_num(j, "kv_bytes_per_token_window") == 1536 &&
                  stat_num(j, "kv_n_layers_window") == 6 && stat_num(j, "kv_window") == 16,
              "run -n %d: per-token kinds", n_gen[i]);
        CHECK(glob[i] == blocks * 16 * 256, "run -n %d: global %.0f for %.0f positions", n_gen[i], glob[i],
              pos);
        CHECK(stat_num(j, "kv_bytes") == glob[i] + win[i], "run -n %d: kv_bytes", n_gen[i]);
        CHECK(win[i] == stat_num(j, "kv_wparts_held") * 16 * 1536, "run -n %d: window parts", n_gen[i]);
        if (i == 0) CHECK(rel[0] == 0 && win[0] == blocks * 16 * 1536, "short run: window %.0f", win[0]);
        CHECK(err && strstr(err, "6 window layers (W 16)"), "run -n %d: summary lacks the kinds line",
              n_gen[i]);
        cJSON_Delete(j);
        free(out);
        free(err);
    }
    CHECK(glob[2] > glob[1] && glob[1] > glob[0], "global bytes %.0f %.0f %.0f", glob[0], glob[1], glob[2]);
    CHECK(win[1] == win[2] && win[1] > 0 && win[1] <= 7 * 16 * 1536, "window bytes %.0f then %.0f", win[1],
          win[2]);
    CHECK(rel[2] > rel[1] && rel[1] > 0, "window parts released %.0f then %.0f", rel[1], rel[2]);
}

/* The run summary of a mixture of experts with latent attention (deepseek2 golden:
 * 4 layers, 8 heads, 8 experts top-2, a latent row of 64 + 16): the active share of
 * the weights, and the latent KV row beside per-head K/V (f16: 4 x 80 x 2 = 640
 * bytes a token; per head 4 x 8 x (48 + 32) x 2 = 5120). */
static void test_run_moe_latent(void)
{
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p Once -n 3 --temp 0 --json",
             shared_path("golden/arch/deepseek2-f32.gguf"));
    const int rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0 && err && strstr(err, "640 bytes/token (K f16, V latent: inside K)") &&
              strstr(err, "would take 5120 bytes/token (the latent row is 87.5% smaller)") &&
              strstr(err, "2 of 8 experts per token"),
          "deepseek2 run summary: %s", err ? err : "(none)");
    cJSON *j = rc == 0 ? parse_only_json(out, "run") : NULL;
    const cJSON *st = j ? cJSON_GetObjectItem(j, "stats") : NULL;
    const cJSON *ap = st ? cJSON_GetObjectItem(st, "active_params") : NULL,
                *np = st ? cJSON_GetObjectItem(st, "n_params") : NULL;
    CHECK(cJSON_IsNumber(ap) && cJSON_IsNumber(np) && ap->valuedouble < np->valuedouble &&
              cJSON_GetObjectItem(st, "n_expert_used") &&
              cJSON_GetObjectItem(st, "n_expert_used")->valueint == 2,
          "deepseek2 --json: active params / experts");
    cJSON_Delete(j);
    free(out);
    free(err);
}

int main(void)
{
    test_run_moe_latent();
    test_run_window();
    snprintf(model, sizeof model, "'%s'", shared_path("models/stories260K.gguf"));
    cJSON *gold = load_json(shared_path("golden/stories260K/case1.json"));
    CHECK(gold != NULL, "cannot load golden case1.json");
    test_help_and_errors();
    if (gold) {
        test_tokenize(gold);
        test_run(gold);
        test_logits(gold);
    }
    test_truncated_model();
    cJSON_Delete(gold);
    return test_main_end();
}
