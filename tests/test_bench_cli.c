/*
 * test_bench_cli.c — `kvinfer bench` and `kvinfer bench --hw`: JSON shape with
 * llama-bench's field names, which tests run (pp then tg; -p 0 / -n 0 skip),
 * depth, exit codes; kvi_hw_bench() limits plausible; the model-size functions
 * against stories260K's shape computed by hand from its hyper-parameters.
 * Timings are not asserted beyond being positive and finite (the machine is shared).
 */
#include "base/cpu.h"
#include "kernels/fmm_amx.h"
#include "testutil.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static cJSON *bench_json(const char *args, int *rc)
{
    char cmd[1024], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "bench --json %s", args);
    *rc = run_kvinfer(cmd, &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    if (!j)
        fprintf(stderr, "bench %s: exit %d, stdout not JSON: %.300s\nstderr: %.500s\n", args, *rc,
                out ? out : "", err ? err : "");
    free(out);
    free(err);
    return j;
}

/* bench_json, CHECKed to exit 0 with JSON: the document (NULL on failure), its
 * "results" into *res. */
static cJSON *bench_ok(const char *args, const cJSON **res)
{
    int rc;
    cJSON *j = bench_json(args, &rc);
    CHECK(rc == 0 && j, "bench %s: exit %d", args, rc);
    *res = cJSON_GetObjectItemCaseSensitive(j, "results");
    return j;
}

/* CHECKs that res holds n results; true when it does. */
static bool n_results(const cJSON *res, int n)
{
    CHECK(cJSON_GetArraySize(res) == n, "%d results, expected %d", cJSON_GetArraySize(res), n);
    return cJSON_GetArraySize(res) == n;
}

static double num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Checks one result object: its name and counts, and sane figures. */
static void check_result(const cJSON *r, const char *test, int n_prompt, int n_gen, int depth, int reps,
                         bool roof)
{
    CHECK(!strcmp(str(r, "test"), test), "test name '%s', expected '%s'", str(r, "test"), test);
    CHECK(num(r, "n_prompt") == n_prompt && num(r, "n_gen") == n_gen && num(r, "n_depth") == depth,
          "%s: n_prompt %g n_gen %g n_depth %g", test, num(r, "n_prompt"), num(r, "n_gen"),
          num(r, "n_depth"));
    double avg = num(r, "avg_ts"), sd = num(r, "stddev_ts");
    CHECK(isfinite(avg) && avg > 0 && isfinite(sd) && sd >= 0, "%s: avg_ts %g stddev_ts %g", test, avg, sd);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "samples_ts");
    CHECK(cJSON_GetArraySize(s) == reps, "%s: %d samples, expected %d", test, cJSON_GetArraySize(s), reps);
    /* avg_ts is the mean of the samples */
    double sum = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, s) sum += x->valuedouble;
    CHECK(fabs(sum / reps - avg) <= 1e-9 * avg, "%s: avg_ts %g is not the mean of the samples %g", test, avg,
          sum / reps);
    const char *achieved = n_prompt ? "achieved_gops" : "achieved_gbs";
    CHECK(num(r, achieved) > 0, "%s: %s missing", test, achieved);
    if (roof) {
        const char *limit = n_prompt ? "limit_gops" : "limit_gbs";
        CHECK(num(r, limit) > 0 && num(r, "roofline_frac") > 0, "%s: %s / roofline_frac missing", test,
              limit);
    }
}

int main(void)
{
    char args[1024];
    char model[512];
    snprintf(model, sizeof model, "%s", shared_path("models/stories260K.gguf"));
    int rc;

    /* pp then tg, the llama-bench fields, with a quick roofline */
    snprintf(args, sizeof args, "-m %s -p 8 -n 4 -r 2 -t 1 --quick", model);
    const cJSON *res;
    cJSON *j = bench_ok(args, &res);
    if (j) {
        CHECK(!strcmp(str(j, "type"), "f32"), "type '%s' (stories260K is f32)", str(j, "type"));
        CHECK(num(j, "threads") == 1, "threads %g", num(j, "threads"));
        CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "model")), "no model field");
        if (n_results(res, 2)) {
            check_result(cJSON_GetArrayItem(res, 0), "pp8", 8, 0, 0, 2, true);
            check_result(cJSON_GetArrayItem(res, 1), "tg4", 0, 4, 0, 2, true);
        }
        const cJSON *hw = cJSON_GetObjectItemCaseSensitive(j, "hw");
        CHECK(num(hw, "read_gbs") > 0, "hw.read_gbs missing");
        cJSON_Delete(j);
    }

    /* several values, a depth, -p 0 skips pp, no limits measured */
    snprintf(args, sizeof args, "-m %s -p 0 -n 2,3 -d 5 -r 1 -t 1 --no-hw", model);
    j = bench_ok(args, &res);
    if (j) {
        if (n_results(res, 2)) {
            check_result(cJSON_GetArrayItem(res, 0), "tg2 @ d5", 0, 2, 5, 1, false);
            check_result(cJSON_GetArrayItem(res, 1), "tg3 @ d5", 0, 3, 5, 1, false);
        }
        CHECK(!cJSON_GetObjectItemCaseSensitive(j, "hw"), "--no-hw still measured the limits");
        cJSON_Delete(j);
    }
    snprintf(args, sizeof args, "-m %s -p 16,4 -n 0 -d 0,20 -r 1 -t 2 --no-hw", model);
    j = bench_ok(args, &res);
    if (j) {
        const char *names[] = { "pp16", "pp16 @ d20", "pp4", "pp4 @ d20" };
        n_results(res, 4);
        for (int i = 0; i < 4 && i < cJSON_GetArraySize(res); i++)
            check_result(cJSON_GetArrayItem(res, i), names[i], i < 2 ? 16 : 4, 0, i % 2 ? 20 : 0, 1, false);
        cJSON_Delete(j);
    }

    /* a mixture of experts (olmoe golden: 16 experts, top-4): the active share of
     * the parameters and the decode roofline's bytes; a dense model's are all */
    snprintf(args, sizeof args, "-m %s -p 4 -n 2 -r 1 -t 1 --no-hw",
             shared_path("golden/arch/olmoe-f32.gguf"));
    j = bench_ok(args, &res);
    if (j) {
        const double act = num(j, "model_active_params"), all = num(j, "model_n_params");
        CHECK(num(j, "n_expert") == 16 && num(j, "n_expert_used") == 4, "experts %g used %g",
              num(j, "n_expert"), num(j, "n_expert_used"));
        CHECK(act > 0.25 * all && act < 0.75 * all, "active %g of %g params", act, all);
        CHECK(num(j, "decode_bytes") > 0 && num(j, "decode_bytes") < num(j, "model_size"),
              "active bytes %g, file %g", num(j, "decode_bytes"), num(j, "model_size"));
        if (n_results(res, 2)) {
            const cJSON *tg = cJSON_GetArrayItem(res, 1);
            const double want = num(j, "decode_bytes") * num(tg, "avg_ts") / 1e9;
            CHECK(fabs(num(tg, "achieved_gbs") - want) <= 1e-9 * want, "tg GB/s %g, active bytes x t/s %g",
                  num(tg, "achieved_gbs"), want);
        }
        cJSON_Delete(j);
    }
    snprintf(args, sizeof args, "-m %s -p 0 -n 2 -r 1 -t 1 --no-hw", model);
    j = bench_ok(args, &res);
    if (j) {
        /* stories260K: untied, vocabulary 512 x dim 64: one embedding row of 512 is read */
        CHECK(num(j, "n_expert") == 0 && num(j, "model_active_params") == num(j, "model_n_params") - 511 * 64,
              "dense: experts %g, active %g of %g", num(j, "n_expert"), num(j, "model_active_params"),
              num(j, "model_n_params"));
        cJSON_Delete(j);
    }

    /* the text table */
    char *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "bench -m %s -p 4 -n 2 -r 1 -t 1 --no-hw", model);
    rc = run_kvinfer(args, &out, &err);
    CHECK(rc == 0 && out && strstr(out, "pp4") && strstr(out, "tg2") && strstr(out, "t/s") &&
              strstr(out, "GB/s") && strstr(out, "active per decode token"),
          "table: %s", out ? out : "(none)");
    free(out);
    free(err);

    /* exit codes */
    const char *bad[] = { "bench -r 0",       "bench -p abc",
                          "bench -p 1,,2",    "bench --hw --no-hw",
                          "bench --nonsense", "bench -m /nonexistent/model.gguf -p 1 -n 1 --no-hw" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = err = NULL;
        rc = run_kvinfer(bad[i], &out, &err);
        CHECK(rc == 1 && err && strstr(err, "error"), "'%s': exit %d, stderr %s", bad[i], rc, err ? err : "");
        free(out);
        free(err);
    }

    /* bench --hw --json: only {"hw": {...}} */
    j = bench_json("--hw --quick -t 1", &rc);
    CHECK(rc == 0 && j && cJSON_GetArraySize(j) == 1, "bench --hw: exit %d", rc);
    if (j) {
        const cJSON *hw = cJSON_GetObjectItemCaseSensitive(j, "hw");
        CHECK(num(hw, "threads") == 1 && num(hw, "read_gbs") > 0, "hw: threads %g read %g",
              num(hw, "threads"), num(hw, "read_gbs"));
        cJSON_Delete(j);
    }

    /* the library call: figures present exactly when the CPU has the instruction */
    kvi_hw_limits hw;
    kvi_error e = { 0 };
    rc = kvi_hw_bench(&hw, 1, true, &e);
    CHECK(rc == 0, "kvi_hw_bench: %d %s", rc, e.msg);
    __builtin_cpu_init();
    CHECK(hw.n_threads == 1 && hw.read_bytes >= ((size_t)16 << 20), "threads %d, buffer %zu", hw.n_threads,
          hw.read_bytes);
    CHECK(hw.read_gbs > 0.1 && hw.read_gbs < 10000, "read %g GB/s", hw.read_gbs);
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    CHECK(avx2 ? hw.fp32_gflops > 0.5 : hw.fp32_gflops == 0, "fp32 %g GFLOP/s (avx2 %d)", hw.fp32_gflops,
          avx2);
    bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
    CHECK(vnni ? hw.int8_gops > 0.5 : hw.int8_gops == 0, "int8 %g GOP/s (vnni %d)", hw.int8_gops, vnni);
    CHECK(cpu_amx_on() ? hw.amx_int8_gops > 0.5 : hw.amx_int8_gops == 0, "amx int8 %g GOP/s (amx %d)",
          hw.amx_int8_gops, cpu_amx_on());
    CHECK(cpu_amx_on() ? hw.amx_bf16_gflops > 0.5 : hw.amx_bf16_gflops == 0, "amx bf16 %g GFLOP/s (amx %d)",
          hw.amx_bf16_gflops, cpu_amx_on());
    CHECK(hw.f16_on_amx == (kern_amx_f16_on() != 0), "f16_on_amx %d", hw.f16_on_amx);
    bool bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    CHECK(bf16 ? hw.bf16_gflops > 0.5 : hw.bf16_gflops == 0, "bf16 %g GFLOP/s (bf16 %d)", hw.bf16_gflops,
          bf16);
    CHECK(kvi_hw_bench(&hw, -1, true, &e) == KVI_E_INVALID && e.msg[0], "negative threads accepted");
    CHECK(kvi_hw_bench(NULL, 1, true, &e) == KVI_E_INVALID, "NULL output accepted");

    /* model sizes from stories260K's hyper-parameters, by hand:
     * per layer wq, wo: dim x dim; wk, wv: dim x kv_dim; gate, up, down: dim x ffn;
     * plus the output matrix n_vocab x dim. */
    kvi_model *m = kvi_model_load(model, NULL, &e);
    CHECK(m != NULL, "load: %s", e.msg);
    if (m) {
        kvi_model_info in;
        kvi_model_get_info(m, &in);
        uint64_t d = (uint64_t)in.dim, kvd = (uint64_t)in.n_kv_heads * (uint64_t)in.head_dim,
                 f = (uint64_t)in.ffn_dim;
        uint64_t mm =
            (uint64_t)in.n_layers * (2 * d * d + 2 * d * kvd + 3 * d * f) + (uint64_t)in.n_vocab * d;
        CHECK(kvi_model_matmul_params(m) == mm, "matmul params %llu, expected %llu",
              (unsigned long long)kvi_model_matmul_params(m), (unsigned long long)mm);
        /* all f32: decode reads every matrix (4 bytes each), the norms, at most one embedding row */
        uint64_t norms = (uint64_t)in.n_layers * 2 * d + d;
        size_t db = kvi_model_decode_bytes(m);
        CHECK(db == 4 * (mm + norms) || db == 4 * (mm + norms + d), "decode bytes %zu, expected %llu (+%llu)",
              db, (unsigned long long)(4 * (mm + norms)), (unsigned long long)(4 * d));
        uint64_t np = kvi_model_n_params(m);
        CHECK(np == mm + norms || np == mm + norms + (uint64_t)in.n_vocab * d, "n_params %llu",
              (unsigned long long)np);
        CHECK(in.weight_bytes == 4 * np, "weight_bytes %zu vs 4 x n_params %llu", in.weight_bytes,
              (unsigned long long)np);
        kvi_model_free(m);
    }
    CHECK(kvi_model_n_params(NULL) == 0 && kvi_model_decode_bytes(NULL) == 0, "NULL model");
    return test_main_end();
}
