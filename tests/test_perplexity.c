/*
 * test_perplexity.c — `kvinfer perplexity` on stories260K over English the model
 * itself wrote (the greedy continuations in ../shared/golden/stories260K).
 *
 *  - the figure is recomputed here for one chunk from `kvinfer tokenize` and
 *    `kvinfer logits --json` output: PPL = exp(mean over rows j = c/2 .. c-2 of
 *    -log softmax(logits_j)[token j+1]), the chunk's first token replaced by BOS;
 *  - f32 and f16 caches give nearly the same perplexity;
 *  - a run against its own saved log-probabilities: KL 0, top-1 agreement 1;
 *  - a damaged, truncated or mismatched base file, a text shorter than a chunk
 *    and an unknown KV type: exit status 1 with a message.
 */
#include "kvinfer.h"
#include "testutil.h"

#include "ppl_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char model[512];
static char text_path[512];

static cJSON *ppl_json(const char *args, int *rc, char **errout)
{
    return ppl_json_run("", model, text_path, args, rc, errout);
}

/* Builds the text: every golden case's prompt and greedy continuation. */
static bool make_text(void) { return ppl_golden_text("ppl_text.txt", text_path, sizeof text_path); }

/* exp(mean NLL) of one chunk of c tokens, from the tokenize and logits commands. */
static double reference_ppl(int c)
{
    char cmd[16384], *out = NULL;
    snprintf(cmd, sizeof cmd, "tokenize --json -m %s -f %s", model, text_path);
    int rc = run_kvinfer(cmd, &out, NULL);
    cJSON *tj = out ? cJSON_Parse(out) : NULL;
    free(out);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(tj, "tokens");
    CHECK(rc == 0 && cJSON_GetArraySize(toks) >= c, "tokenize: exit %d, %d tokens", rc,
          cJSON_GetArraySize(toks));
    if (cJSON_GetArraySize(toks) < c) {
        cJSON_Delete(tj);
        return NAN;
    }
    int ids[512];
    char list[8192];
    size_t n = 0;
    for (int i = 0; i < c; i++) {
        ids[i] = i == 0 ? 1 : cJSON_GetArrayItem(toks, i)->valueint; /* BOS of stories260K is 1 */
        n += (size_t)snprintf(list + n, sizeof list - n, i ? ",%d" : "%d", ids[i]);
    }
    cJSON_Delete(tj);
    snprintf(cmd, sizeof cmd, "logits --json -m %s --kv-type f16 --tokens %s", model, list);
    out = NULL;
    rc = run_kvinfer(cmd, &out, NULL);
    cJSON *lj = out ? cJSON_Parse(out) : NULL;
    free(out);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(lj, "logits");
    CHECK(rc == 0 && cJSON_GetArraySize(rows) == c, "logits: exit %d, %d rows", rc, cJSON_GetArraySize(rows));
    double nll = 0;
    int scored = 0;
    for (int j = c / 2; j <= c - 2 && cJSON_GetArraySize(rows) == c; j++) {
        const cJSON *row = cJSON_GetArrayItem(rows, j), *x;
        double mx = -INFINITY, s = 0;
        cJSON_ArrayForEach(x, row) if (x->valuedouble > mx) mx = x->valuedouble;
        cJSON_ArrayForEach(x, row) s += exp(x->valuedouble - mx);
        nll += -(cJSON_GetArrayItem(row, ids[j + 1])->valuedouble - mx - log(s));
        scored++;
    }
    cJSON_Delete(lj);
    CHECK(scored == c - 1 - c / 2, "scored %d rows", scored);
    return scored ? exp(nll / scored) : NAN;
}

static void expect_fail(const char *args, const char *needle)
{
    int rc;
    char *err = NULL;
    cJSON *j = ppl_json(args, &rc, &err);
    CHECK(rc == 1, "perplexity %s: exit %d, expected 1", args, rc);
    CHECK(err && strstr(err, needle), "perplexity %s: stderr lacks '%s': %s", args, needle, err ? err : "");
    cJSON_Delete(j);
    free(err);
}

int main(void)
{
    snprintf(model, sizeof model, "%s", shared_path("models/stories260K.gguf"));
    CHECK(make_text(), "writing the test text");

    /* one chunk of 64, recomputed independently */
    int rc;
    cJSON *j = ppl_json("-c 64 --chunks 1 --kv-type f16", &rc, NULL);
    double ref = reference_ppl(64);
    CHECK(rc == 0 && j, "perplexity -c 64: exit %d", rc);
    CHECK(fabs(json_num(j, "perplexity") / ref - 1) < 1e-5, "perplexity %.9g, recomputed %.9g",
          json_num(j, "perplexity"), ref);
    CHECK(json_num(j, "n_tokens") == 31 && json_num(j, "n_chunks") == 1, "n_tokens %g n_chunks %g",
          json_num(j, "n_tokens"), json_num(j, "n_chunks"));
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(j, "kv_type");
    CHECK(cJSON_IsString(kv) && !strcmp(kv->valuestring, "f16"), "kv_type");
    CHECK(json_num(j, "ppl_error") > 0 && json_num(j, "ppl_error") < json_num(j, "perplexity"),
          "ppl_error %g", json_num(j, "ppl_error"));
    cJSON_Delete(j);

    /* f32 base saved; f16 nearly the same; f32 against its own base: KL 0, top-1 1 */
    char args[1024];
    char base[512];
    snprintf(base, sizeof base, "%s", tmp_path("ppl_base_f32.lp"));
    snprintf(args, sizeof args, "-c 128 --kv-type f32 --save-logits %s", base);
    cJSON *f32 = ppl_json(args, &rc, NULL);
    CHECK(rc == 0 && f32, "f32 run: exit %d", rc);
    double p32 = json_num(f32, "perplexity");
    CHECK(p32 > 1.0 && p32 < 50.0, "f32 perplexity %g (stories260K on its own text is low)", p32);
    CHECK(json_num(f32, "n_tokens") >= 4 * 63 && fmod(json_num(f32, "n_tokens"), 63) == 0, "n_tokens %g",
          json_num(f32, "n_tokens"));
    cJSON_Delete(f32);

    snprintf(args, sizeof args, "-c 128 --kv-type f16 --kl-base %s", base);
    cJSON *f16 = ppl_json(args, &rc, NULL);
    CHECK(rc == 0 && f16, "f16 run: exit %d", rc);
    double p16 = json_num(f16, "perplexity");
    CHECK(fabs(p16 / p32 - 1) < 0.01, "f16 perplexity %g vs f32 %g", p16, p32);
    CHECK(json_num(f16, "kld_mean") >= 0 && json_num(f16, "kld_mean") < 1e-3, "f16 kld_mean %g",
          json_num(f16, "kld_mean"));
    CHECK(json_num(f16, "top1_agreement") > 0.95, "f16 top1 %g", json_num(f16, "top1_agreement"));
    CHECK(fabs(json_num(f16, "perplexity_base") - p32) < 1e-6 * p32, "perplexity_base %g vs %g",
          json_num(f16, "perplexity_base"), p32);
    cJSON_Delete(f16);

    snprintf(args, sizeof args, "-c 128 --kv-type f32 --kl-base %s", base);
    cJSON *self = ppl_json(args, &rc, NULL);
    CHECK(rc == 0 && self, "self run: exit %d", rc);
    CHECK(json_num(self, "kld_mean") == 0 && json_num(self, "kld_max") == 0, "self KL mean %g max %g",
          json_num(self, "kld_mean"), json_num(self, "kld_max"));
    CHECK(json_num(self, "top1_agreement") == 1, "self top1 %g", json_num(self, "top1_agreement"));
    CHECK(json_num(self, "perplexity") == p32, "same run, different perplexity %.17g vs %.17g",
          json_num(self, "perplexity"), p32);
    cJSON_Delete(self);

    /* bad base files */
    size_t len = 0;
    char *buf = read_file(base, &len);
    CHECK(buf && len > 64, "base file read");
    if (buf) {
        const char *bad = tmp_path("ppl_bad.lp");
        snprintf(args, sizeof args, "-c 128 --kl-base %s", bad);
        write_file(bad, buf, len - 3);
        expect_fail(args, "bytes");
        write_file(bad, buf, 10);
        expect_fail(args, "magic");
        buf[0] = 'X';
        write_file(bad, buf, len);
        expect_fail(args, "magic");
        buf[0] = 'K';
        buf[8] = 9; /* version */
        write_file(bad, buf, len);
        expect_fail(args, "version");
        buf[8] = 1;
        buf[32] ^= 1; /* the first row's target token */
        write_file(bad, buf, len);
        expect_fail(args, "token");
        free(buf);
    }
    snprintf(args, sizeof args, "-c 64 --kl-base %s", base);
    expect_fail(args, "-c 128");
    snprintf(args, sizeof args, "-c 128 --chunks 1 --kl-base %s", base);
    expect_fail(args, "rows");
    snprintf(args, sizeof args, "-c 128 --kl-base %s", tmp_path("ppl_nonexistent.lp"));
    expect_fail(args, "cannot open");

    /* other errors */
    expect_fail("-c 100000", "fewer than one chunk");
    expect_fail("--kv-type f99", "unknown type");
    expect_fail("--ctx-policy nonsense", "--ctx-policy");
    expect_fail("-c 2", "-c");
    return test_main_end();
}
