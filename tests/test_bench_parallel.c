/*
 * test_bench_parallel.c — `kvinfer bench --parallel 1,4` on stories260K (the
 * scheduler's path, no HTTP): llama-batched-bench's columns with their
 * definitions (N_KV = B x (PP + TG), S_PP = B x PP / T_PP, S_TG = B x TG / T_TG,
 * S = B x (PP + TG) / T, T = T_PP + T_TG), every request delivering TG + 1
 * tokens (the prefill's, then one per decode step), TG decode steps, and the
 * per-step breakdown: matrix products only in the bucket of B rows (every
 * product of a decode step has one row per sequence, the logits' included),
 * every line finite and not negative, the lines adding up to the step
 * (products + attention + other = forward; + sampling + callbacks + bookkeeping
 * = kvi_sched_step; + idle = the wall time per step). Timings themselves are not
 * asserted (the machine is shared). A bad --parallel value exits 1.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-6 * (fabs(a) + fabs(b)) + 1e-9; }

static void check_one(const cJSON *r, int B, int pp, int tg, const char *bucket)
{
    CHECK(num(r, "B") == B && num(r, "PP") == pp && num(r, "TG") == tg, "B=%d: PP, TG, B", B);
    CHECK(num(r, "N_KV") == B * (pp + tg), "B=%d: N_KV %g", B, num(r, "N_KV"));
    CHECK(num(r, "n_gen") == B * (tg + 1), "B=%d: %g tokens delivered, expected %d", B, num(r, "n_gen"),
          B * (tg + 1));
    CHECK(num(r, "tg_steps") == tg, "B=%d: %g decode steps", B, num(r, "tg_steps"));
    const double t_pp = num(r, "T_PP"), t_tg = num(r, "T_TG"), t = num(r, "T");
    CHECK(t_pp > 0 && t_tg > 0 && near(t, t_pp + t_tg), "B=%d: T = T_PP + T_TG", B);
    CHECK(near(num(r, "S_PP"), B * pp / t_pp) && near(num(r, "S_TG"), B * tg / t_tg) &&
              near(num(r, "S"), B * (pp + tg) / t),
          "B=%d: S_PP, S_TG, S as llama-batched-bench defines them", B);
    const cJSON *bd = cJSON_GetObjectItemCaseSensitive(r, "step_ms");
    double mm = 0.0;
    int n_buckets = 0;
    for (const cJSON *c = bd ? bd->child : NULL; c; c = c->next) {
        CHECK(cJSON_IsNumber(c) && isfinite(c->valuedouble), "B=%d: %s finite", B, c->string);
        if (strcmp(c->string, "forward_other") && strcmp(c->string, "sched_bookkeeping") &&
            strcmp(c->string, "idle"))
            CHECK(c->valuedouble >= 0, "B=%d: %s = %g >= 0", B, c->string, c->valuedouble);
        if (!strncmp(c->string, "matmul_rows_", 12)) {
            n_buckets++;
            mm += c->valuedouble;
            CHECK(!strcmp(c->string, bucket), "B=%d: products only in %s, not %s", B, bucket, c->string);
        }
    }
    CHECK(n_buckets == 1 && mm > 0, "B=%d: one bucket of products (%d)", B, n_buckets);
    const double fwd = mm + num(bd, "attention") + num(bd, "forward_other");
    const double step = fwd + num(bd, "sampling") + num(bd, "callbacks") + num(bd, "sched_bookkeeping");
    CHECK(near(step + num(bd, "idle"), num(bd, "step_total")), "B=%d: the lines add up to the step", B);
    CHECK(near(num(bd, "step_total"), t_tg * 1e3 / tg), "B=%d: step_total = T_TG / TG", B);
    CHECK(num(bd, "detokenize") <= num(bd, "callbacks") + 1e-9 && num(bd, "grammar") == 0,
          "B=%d: detokenization inside the callbacks, no grammar", B);
}

int main(void)
{
    char cmd[1024], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "bench --json -m %s -t 2 -p 8 -n 6 --parallel 1,4",
             shared_path("models/stories260K.gguf"));
    int rc = run_kvinfer(cmd, &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(rc == 0 && j, "bench --parallel: exit %d, %.300s %.300s", rc, out ? out : "", err ? err : "");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(j, "parallel");
    CHECK(cJSON_GetArraySize(par) == 2, "two results");
    if (cJSON_GetArraySize(par) == 2) {
        check_one(cJSON_GetArrayItem(par, 0), 1, 8, 6, "matmul_rows_1");
        check_one(cJSON_GetArrayItem(par, 1), 4, 8, 6, "matmul_rows_2_4");
    }
    cJSON_Delete(j);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "bench -m %s --parallel 0", shared_path("models/stories260K.gguf"));
    out = err = NULL;
    CHECK(run_kvinfer(cmd, &out, &err) == 1, "--parallel 0 exits 1");
    free(out);
    free(err);
    return test_main_end();
}
