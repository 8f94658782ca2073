/*
 * test_toy.c — `kvinfer toy`: the causal mask printed exactly in PyTorch's
 * notation, and --json rows against values computed here by hand from the
 * documented heads (A: q 1, k 2 at even positions else 0; B: q 2, k = position;
 * v = token value 10, 20, 1, 5, then 8; output = mean of the two heads).
 */
#include "kvinfer.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double k_val[5] = { 10, 20, 1, 5, 8 };

/* Row i of the blended output, by the textbook formula. */
static double expected_row(int i)
{
    double out = 0.0;
    for (int h = 0; h < 2; h++) {
        double num = 0, den = 0;
        for (int j = 0; j <= i; j++) {
            double score = h == 0 ? (j % 2 == 0 ? 2.0 : 0.0) : 2.0 * j;
            num += exp(score) * k_val[j];
            den += exp(score);
        }
        out += 0.5 * num / den;
    }
    return out;
}

int main(void)
{
    char *out = NULL, *err = NULL;
    int rc = run_kvinfer("toy", &out, &err);
    CHECK(rc == 0 && out, "kvinfer toy: rc %d, stderr %s", rc, err ? err : "");
    const char *mask = "tensor([[ True, False, False, False],\n"
                       "        [ True,  True, False, False],\n"
                       "        [ True,  True,  True, False],\n"
                       "        [ True,  True,  True,  True]])\n";
    CHECK(out && strstr(out, mask), "the mask is not printed as PyTorch does:\n%s", out ? out : "");
    CHECK(out && strstr(out, "agree"), "no agreement line");
    free(out);
    free(err);

    rc = run_kvinfer("toy --json", &out, &err);
    CHECK(rc == 0, "kvinfer toy --json: rc %d", rc);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j != NULL, "--json output is not one JSON document");
    if (j) {
        const cJSON *m = cJSON_GetObjectItem(j, "mask");
        int bad = 0;
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) {
                const cJSON *e = cJSON_GetArrayItem(cJSON_GetArrayItem(m, r), c);
                bad += !e || !cJSON_IsBool(e) || (cJSON_IsTrue(e) != 0) != (c <= r);
            }
        CHECK(cJSON_GetArraySize(m) == 4 && bad == 0, "json mask wrong (%d bad entries)", bad);
        const cJSON *pre = cJSON_GetObjectItem(j, "prefill_rows");
        CHECK(cJSON_GetArraySize(pre) == 4, "prefill rows");
        for (int i = 0; i < 4; i++) {
            const cJSON *o = cJSON_GetObjectItem(cJSON_GetArrayItem(pre, i), "output");
            double got = cJSON_IsNumber(o) ? o->valuedouble : NAN;
            CHECK(fabs(got - expected_row(i)) < 1e-9, "prefill row %d: %g, want %g", i, got, expected_row(i));
        }
        const cJSON *dec = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "decode_row"), "output");
        CHECK(cJSON_IsNumber(dec) && fabs(dec->valuedouble - expected_row(4)) < 1e-9, "decode row: want %g",
              expected_row(4));
        const cJSON *full = cJSON_GetObjectItem(j, "recompute_rows");
        CHECK(cJSON_GetArraySize(full) == 5, "recompute rows");
        const cJSON *ag = cJSON_GetObjectItem(j, "agree");
        CHECK(cJSON_IsTrue(ag), "agree flag is not true");
        cJSON_Delete(j);
    }
    free(out);
    free(err);

    rc = run_kvinfer("toy --bogus", &out, &err);
    CHECK(rc == 1 && err && strstr(err, "kvinfer: error:"), "unknown option: rc %d", rc);
    free(out);
    free(err);
    return test_main_end();
}
