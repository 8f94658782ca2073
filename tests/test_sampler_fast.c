/*
 * test_sampler_fast.c — the sampler's fast top-k (top_k_direct, logits read in
 * place) against its reference chain (sampler_set_reference: every logit copied
 * into the candidates, then apply_top_k) on random rows: the distribution of
 * kvi_sampler_probs must be identical bit for bit, and a run of draws with the
 * same seed must give the same tokens. Rows have ties (values rounded to a
 * coarse grid), NaN and -inf entries, all-NaN rows, and vocabulary sizes that
 * are and are not multiples of 16; top-k from 1 to n_vocab - 1 with top-p,
 * min-p and temperature in the chain after it.
 */
#include "kvinfer.h"
#include "sampling/sampler_int.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A random row of n logits: N(0, scale), rounded to a grid of `grid` when > 0
 * (ties), a fraction of NaN and of -inf entries. */
static void fill_row(float *row, int n, float scale, float grid, float frac_nan, float frac_ninf,
                     uint64_t *rs)
{
    for (int i = 0; i < n; i++) {
        float v = trand_normal(rs) * scale;
        if (grid > 0.0f) v = roundf(v / grid) * grid;
        const float u = trand_uniform(rs);
        if (u < frac_nan)
            v = NAN;
        else if (u < frac_nan + frac_ninf)
            v = -INFINITY;
        row[i] = v;
    }
}

/* One row under one setting: probs bit-identical, then 8 draws identical. */
static void compare(const kvi_sampler_params *p, const float *row, int nv, float *pa, float *pb,
                    const char *what)
{
    kvi_sampler *fast = kvi_sampler_create(p, nv), *ref = kvi_sampler_create(p, nv);
    CHECK(fast && ref, "create");
    if (!fast || !ref) {
        kvi_sampler_free(fast);
        kvi_sampler_free(ref);
        return;
    }
    sampler_set_reference(ref, true);
    CHECK(kvi_sampler_probs(fast, row, pa) == 0 && kvi_sampler_probs(ref, row, pb) == 0, "probs %s", what);
    CHECK(!memcmp(pa, pb, (size_t)nv * sizeof *pa),
          "probs differ: %s (top_k %d, top_p %g, min_p %g, temp %g)", what, p->top_k, p->top_p, p->min_p,
          p->temp);
    int same = 1;
    for (int d = 0; d < 8; d++) {
        const int32_t a = kvi_sampler_sample(fast, row), b = kvi_sampler_sample(ref, row);
        if (a != b || a < 0 || a >= nv) same = 0;
    }
    CHECK(same, "draws differ: %s (top_k %d)", what, p->top_k);
    kvi_sampler_free(fast);
    kvi_sampler_free(ref);
}

static void test_random_rows(void)
{
    static const int vocabs[] = { 17, 1000, 1003, 32000 };
    static const int32_t ks[] = { 1, 2, 5, 16, 40, 100 };
    static const float tops_p[] = { 1.0f, 0.95f, 0.5f };
    static const float mins_p[] = { 0.0f, 0.05f };
    static const float temps[] = { 0.3f, 0.8f, 1.5f };
    uint64_t rs = 0x5A3C0FFEEull;
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        const int nv = vocabs[v];
        float *row = malloc((size_t)nv * sizeof *row);
        float *pa = malloc((size_t)nv * sizeof *pa), *pb = malloc((size_t)nv * sizeof *pb);
        CHECK(row && pa && pb, "alloc");
        if (!row || !pa || !pb) return;
        for (int kind = 0; kind < 5; kind++) {
            /* 0 plain, 1 coarse ties, 2 NaN and -inf, 3 very coarse (many equal), 4 all NaN */
            const float scale = kind == 0 ? 3.0f : 1.0f;
            const float grid = kind == 1 ? 0.25f : kind == 3 ? 1.0f : 0.0f;
            fill_row(row, nv, scale, grid,
                     kind == 2   ? 0.1f
                     : kind == 4 ? 1.0f
                                 : 0.0f,
                     kind == 2 ? 0.1f : 0.0f, &rs);
            for (size_t a = 0; a < sizeof ks / sizeof *ks; a++) {
                int32_t k = ks[a] < nv ? ks[a] : nv - 1;
                for (size_t b = 0; b < sizeof tops_p / sizeof *tops_p; b++)
                    for (size_t c = 0; c < sizeof mins_p / sizeof *mins_p; c++)
                        for (size_t d = 0; d < sizeof temps / sizeof *temps; d++) {
                            const kvi_sampler_params p =
                                sampler_params(temps[d], k, tops_p[b], mins_p[c], 1000 + a + 7 * b);
                            char what[64];
                            snprintf(what, sizeof what, "vocab %d, row kind %d", nv, kind);
                            compare(&p, row, nv, pa, pb, what);
                        }
            }
            /* the largest k the fast path takes */
            const kvi_sampler_params p = sampler_params(0.8f, nv - 1, 0.95f, 0.05f, 77);
            compare(&p, row, nv, pa, pb, "k = n_vocab - 1");
        }
        free(row);
        free(pa);
        free(pb);
    }
}

/* The top logit at the very end of the row and equal logits straddling a group
 * of 16: the lower id must win the tie, as the reference has it. */
static void test_ties_at_edges(void)
{
    enum { NV = 100 };
    float row[NV], pa[NV], pb[NV];
    for (int i = 0; i < NV; i++) row[i] = (float)(i % 7) * 0.01f;
    row[NV - 1] = 5.0f;
    row[15] = row[16] = row[47] = 2.0f;
    for (int32_t k = 1; k <= 5; k++) {
        const kvi_sampler_params p = sampler_params(1.0f, k, 1.0f, 0.0f, 5);
        compare(&p, row, NV, pa, pb, "edge ties");
    }
    /* greedy-like: k = 2 keeps 5.0 (id 99) and 2.0 (id 15, not 16 or 47) */
    kvi_sampler_params p = sampler_params(1.0f, 2, 1.0f, 0.0f, 5);
    kvi_sampler *s = kvi_sampler_create(&p, NV);
    CHECK(s && kvi_sampler_probs(s, row, pa) == 0, "probs");
    CHECK(pa[99] > 0.0f && pa[15] > 0.0f && pa[16] == 0.0f && pa[47] == 0.0f, "k = 2 keeps ids 99 and 15");
    kvi_sampler_free(s);
}

int main(void)
{
    test_random_rows();
    test_ties_at_edges();
    return test_main_end();
}
