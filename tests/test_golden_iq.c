/*
 * test_golden_iq.c — the grid-based low-bit weight types (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S) against llama.cpp: ../shared/golden/quant/qtest-TYPE.gguf and its
 * logits.json (README-lowbit.md: relative error over all positions < 0.06).
 *
 * For each file: the logits of one prefill step and of token-by-token decode are
 * each within the tolerance, the two are equal bit for bit, and so are the logits
 * on every kernel path the machine has (scalar, AVX2, AVX-512), and with the
 * weights kept in the file's layout (no repacking).
 */
#include "testutil.h"

#include "kvinfer.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#define TOL 0.06

static float *logits_on(kvi_model *m, const int32_t *toks, int n, bool decode)
{
    const kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 0, 0);
    kvi_engine *e = engine_create_checked(m, &p);
    float *lg = e ? seq_logits(e, toks, n, decode) : NULL;
    kvi_engine_free(e);
    return lg;
}

static void check_type(const char *type)
{
    char name[64], rel[96];
    snprintf(name, sizeof name, "../quant/qtest-%s", type); /* load_arch_golden reads golden/arch/NAME */
    snprintf(rel, sizeof rel, "golden/quant/qtest-%s.gguf", type);
    kvi_model *m;
    cJSON *j;
    if (!load_arch_golden(name, &m, &j)) return;
    int32_t toks[256];
    const int n = json_token_ids(cJSON_GetObjectItem(j, "tokens"), toks, 256);
    const int nv = kvi_n_vocab(m);
    const size_t bytes = (size_t)n * (size_t)nv * sizeof(float);
    const cJSON *ref = cJSON_GetObjectItem(j, "logits");

    float *pre = logits_on(m, toks, n, false), *dec = logits_on(m, toks, n, true);
    if (pre && dec) {
        const double ep = golden_rel_err(rel, pre, ref, n, nv), ed = golden_rel_err(rel, dec, ref, n, nv);
        CHECK(ep < TOL, "qtest-%s prefill: relative error %.4g >= %g", type, ep, TOL);
        CHECK(ed < TOL, "qtest-%s decode: relative error %.4g >= %g", type, ed, TOL);
        CHECK(memcmp(pre, dec, bytes) == 0, "qtest-%s: prefill and decode logits differ", type);
        printf("qtest-%-7s relative error vs llama.cpp: prefill %.5f, decode %.5f (tolerance %.2f)\n", type,
               ep, ed, TOL);
    }
    /* every ISA the CPU has gives the same bits (q8.h contract), prefill and decode */
    const kern_isa best = kern_isa_detect();
    for (int isa = KVI_ISA_SCALAR; pre && isa < (int)best; isa++) {
        kern_isa_set((kern_isa)isa);
        float *p2 = logits_on(m, toks, n, false), *d2 = logits_on(m, toks, n, true);
        CHECK(p2 && memcmp(p2, pre, bytes) == 0, "qtest-%s: %s prefill differs from %s", type,
              kern_isa_str((kern_isa)isa), kern_isa_str(best));
        CHECK(d2 && memcmp(d2, pre, bytes) == 0, "qtest-%s: %s decode differs from %s", type,
              kern_isa_str((kern_isa)isa), kern_isa_str(best));
        free(p2);
        free(d2);
    }
    kern_isa_set(best);
    free(pre);
    free(dec);
    kvi_model_free(m);
    cJSON_Delete(j);
}

int main(void)
{
    const char *types[] = { "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s" };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) check_type(types[i]);
    return test_main_end();
}
