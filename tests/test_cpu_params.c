/*
 * test_cpu_params.c — two engines in one process on different CPU paths
 * (kvi_engine_params.cpu), without touching the process-wide choice:
 *
 *  - references: the logits of a prompt on stories260K (F32 weights: the float
 *    products' reduction order depends on the ISA, kernels.h) with the whole
 *    process on the scalar path, then on the best path (kvi_cpu_configure);
 *  - on a CPU with AVX2 or better the two references differ (else this test could
 *    not tell the paths apart), and every logit is finite;
 *  - two engines created side by side, one with cpu.isa "scalar" and one with the
 *    best path, their steps interleaved, each give exactly its reference's bits,
 *    prefill and token by token;
 *  - the process-wide choice is left as it was; an unknown isa is refused by
 *    kvi_engine_create with KVI_E_INVALID.
 */
#include "kvinfer.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_TOK 12

static const int32_t toks[N_TOK] = { 1, 403, 407, 261, 378, 304, 292, 357, 260, 412, 302, 270 };

/* Logits [N_TOK][nv] of toks on a new engine of m with these CPU paths (NULL: the
 * process's); decode: one row a step. */
static float *run(kvi_model *m, const kvi_cpu_params *cpu, bool decode)
{
    kvi_engine_params p = engine_params(KVI_TYPE_F32, 2, 1, 64);
    p.cpu = cpu;
    kvi_engine *e = engine_create_checked(m, &p);
    if (!e) return NULL;
    float *l = seq_logits(e, toks, N_TOK, decode);
    kvi_engine_free(e);
    return l;
}

static bool same(const float *a, const float *b, size_t n) { return a && b && !memcmp(a, b, n * sizeof *a); }

int main(void)
{
    int nv = 0;
    kvi_model *m = load_stories260k(&nv);
    if (!m) return test_main_end();
    const size_t n = (size_t)N_TOK * (size_t)nv;
    const char *best = kvi_isa_name(); /* the process's path before the test */

    kvi_cpu_params scalar, fast;
    kvi_cpu_params_default(&scalar);
    kvi_cpu_params_default(&fast);
    scalar.isa = "scalar";
    fast.isa = best;

    CHECK(kvi_cpu_configure(&scalar, NULL) == 0, "configure scalar");
    float *ref_s = run(m, NULL, false);
    CHECK(kvi_cpu_configure(&fast, NULL) == 0, "configure %s", best);
    float *ref_f = run(m, NULL, false);
    CHECK(!strcmp(kvi_isa_name(), best), "process path %s, want %s", kvi_isa_name(), best);
    bool finite = ref_s && ref_f;
    for (size_t i = 0; finite && i < n; i++) finite = isfinite(ref_s[i]) && isfinite(ref_f[i]);
    CHECK(finite, "references not finite");
    if (strcmp(best, "scalar") != 0)
        CHECK(ref_s && ref_f && !same(ref_s, ref_f, n),
              "scalar and %s gave the same bits: the test cannot tell them apart", best);

    /* two engines side by side, steps interleaved */
    kvi_engine_params ps = engine_params(KVI_TYPE_F32, 2, 1, 64), pf = ps;
    ps.cpu = &scalar;
    pf.cpu = &fast;
    kvi_engine *es = engine_create_checked(m, &ps), *ef = engine_create_checked(m, &pf);
    if (es && ef) {
        kvi_seq *ss = kvi_seq_create(es), *sf = kvi_seq_create(ef);
        float *ls = malloc(n * sizeof *ls), *lf = malloc(n * sizeof *lf);
        for (int i = 0; ss && sf && ls && lf && i < N_TOK; i++) {
            step_rows(es, ss, toks + i, i, i + 1, ls + (size_t)i * nv);
            step_rows(ef, sf, toks + i, i, i + 1, lf + (size_t)i * nv);
        }
        CHECK(same(ls, ref_s, n), "scalar engine beside a %s one: not the scalar reference's bits", best);
        CHECK(same(lf, ref_f, n), "%s engine beside a scalar one: not the %s reference's bits", best, best);
        CHECK(!strcmp(kvi_isa_name(), best), "engines changed the process path to %s", kvi_isa_name());
        free(ls);
        free(lf);
        kvi_seq_free(ss);
        kvi_seq_free(sf);
    }
    kvi_engine_free(es);
    kvi_engine_free(ef);

    /* prefill through a per-engine scalar path, the process on the best one */
    float *pre_s = run(m, &scalar, false);
    CHECK(same(pre_s, ref_s, n), "scalar engine prefill: not the scalar reference's bits");

    kvi_cpu_params bad;
    kvi_cpu_params_default(&bad);
    bad.isa = "sse9";
    kvi_engine_params pb = engine_params(KVI_TYPE_F32, 1, 1, 64);
    pb.cpu = &bad;
    kvi_error err = { 0 };
    kvi_engine *eb = kvi_engine_create(m, &pb, &err);
    CHECK(!eb && err.code == KVI_E_INVALID && strstr(err.msg, "sse9"), "unknown isa: engine %p, code %d '%s'",
          (void *)eb, err.code, err.msg);
    kvi_engine_free(eb);

    free(ref_s);
    free(ref_f);
    free(pre_s);
    kvi_model_free(m);
    return test_main_end();
}
