/*
 * test_sampler_penalty.c — the presence and frequency penalties in the sampler
 * (llama.cpp's semantics), against hand-computed values:
 *   logit[t] -= presence * (count[t] > 0) + frequency * count[t],
 * count = occurrences of t among the last repeat_last_n accepted tokens, the
 * prompt's (kvi_sampler_accept) and the generated ones (kvi_sampler_accept_output)
 * alike; with temp 0 the argmax of the penalised logits; with both penalties 0
 * nothing changes (bit for bit).
 */
#include "testutil.h"

#include "kvinfer.h"

#include <math.h>
#include <stdlib.h>

static kvi_sampler *make(float temp, float presence, float frequency, int32_t nv)
{
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    return kvi_sampler_create(&p, nv);
}

static void test_greedy(void)
{
    const float logits[4] = { 1.0f, 0.9f, 0.5f, 0.2f };
    /* presence 0.05: 0.95 still wins; 0.2: 0.8 < 0.9 */
    kvi_sampler *s = make(0, 0.05f, 0, 4);
    kvi_sampler_accept_output(s, 0);
    CHECK(kvi_sampler_sample(s, logits) == 0, "presence 0.05 keeps token 0");
    kvi_sampler_free(s);
    s = make(0, 0.2f, 0, 4);
    CHECK(kvi_sampler_sample(s, logits) == 0, "nothing generated yet: no penalty");
    kvi_sampler_accept_output(s, 0);
    CHECK(kvi_sampler_sample(s, logits) == 1, "presence 0.2 moves the argmax to 1");
    /* presence is paid once however often the token came */
    kvi_sampler_accept_output(s, 1);
    kvi_sampler_accept_output(s, 1);
    kvi_sampler_accept_output(s, 1);
    CHECK(kvi_sampler_sample(s, logits) == 0, "0.8 vs 0.7: token 0 again (presence once each)");
    kvi_sampler_free(s);

    /* frequency 0.06: once 0.94 > 0.9, twice 0.88 < 0.9 */
    s = make(0, 0, 0.06f, 4);
    kvi_sampler_accept_output(s, 0);
    CHECK(kvi_sampler_sample(s, logits) == 0, "frequency once keeps 0");
    kvi_sampler_accept_output(s, 0);
    CHECK(kvi_sampler_sample(s, logits) == 1, "frequency twice moves to 1");
    kvi_sampler_free(s);

    /* prompt tokens count too: presence 0.05 + frequency 0.02 * 3 = 0.11: 0.89 < 0.9 */
    s = make(0, 0.05f, 0.02f, 4);
    for (int i = 0; i < 2; i++) kvi_sampler_accept(s, 0);
    CHECK(kvi_sampler_sample(s, logits) == 0, "prompt token twice: 1 - 0.09 = 0.91 keeps token 0");
    kvi_sampler_accept(s, 0);
    CHECK(kvi_sampler_sample(s, logits) == 1, "prompt token three times: 0.89 < 0.9 moves to 1");
    kvi_sampler_free(s);

    /* only the last repeat_last_n accepted tokens count */
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    p.temp = 0;
    p.presence_penalty = 0.2f;
    p.repeat_last_n = 2;
    s = kvi_sampler_create(&p, 4);
    kvi_sampler_accept(s, 0);
    CHECK(kvi_sampler_sample(s, logits) == 1, "token 0 in the window: 0.8 < 0.9");
    kvi_sampler_accept_output(s, 2);
    kvi_sampler_accept_output(s, 3);
    CHECK(kvi_sampler_sample(s, logits) == 0, "token 0 left the window of 2");
    kvi_sampler_free(s);

    /* a negative penalty encourages: 0.2 + 0.9 = 1.1 > 1.0 */
    s = make(0, -0.9f, 0, 4);
    kvi_sampler_accept_output(s, 3);
    CHECK(kvi_sampler_sample(s, logits) == 3, "negative presence encourages token 3");
    kvi_sampler_free(s);
}

static void test_probs(void)
{
    /* temp 1, no filters: logits 0,0,0 with token 1 generated twice under
     * presence 0.5 and frequency 0.25: logit1 = -1 */
    const float logits[3] = { 0, 0, 0 };
    kvi_sampler *s = make(1.0f, 0.5f, 0.25f, 3);
    kvi_sampler_accept_output(s, 1);
    kvi_sampler_accept_output(s, 1);
    float pr[3];
    CHECK(kvi_sampler_probs(s, logits, pr) == 0, "probs");
    const double z = 2.0 + exp(-1.0);
    CHECK(fabs(pr[0] - 1.0 / z) < 1e-6 && fabs(pr[1] - exp(-1.0) / z) < 1e-6 && fabs(pr[2] - 1.0 / z) < 1e-6,
          "probs %g %g %g, want %g %g %g", pr[0], pr[1], pr[2], 1.0 / z, exp(-1.0) / z, 1.0 / z);
    /* draws follow it: token 1 about 0.155 of the time */
    int n1 = 0;
    const int n = 20000;
    for (int i = 0; i < n; i++) n1 += kvi_sampler_sample(s, logits) == 1;
    CHECK(fabs((double)n1 / n - exp(-1.0) / z) < 0.02, "token 1 drawn %.3f of the time, want %.3f",
          (double)n1 / n, exp(-1.0) / z);
    kvi_sampler_free(s);
}

static void test_off_is_unchanged(void)
{
    /* both penalties 0: the same tokens as a sampler that never heard of them */
    enum { NV = 300 };
    uint64_t st = 77;
    float *logits = malloc(NV * sizeof *logits);
    kvi_sampler_params p;
    kvi_sampler_params_default(&p);
    p.seed = 5;
    kvi_sampler *a = kvi_sampler_create(&p, NV);
    kvi_sampler *b = kvi_sampler_create(&p, NV);
    int same = 0;
    for (int step = 0; step < 200; step++) {
        for (int i = 0; i < NV; i++) logits[i] = 2.0f * trand_normal(&st);
        const int32_t ta = kvi_sampler_sample(a, logits), tb = kvi_sampler_sample(b, logits);
        same += ta == tb;
        kvi_sampler_accept(a, ta);
        kvi_sampler_accept_output(b, tb);
    }
    CHECK(same == 200, "penalties off: %d of 200 draws equal", same);
    kvi_sampler_free(a);
    kvi_sampler_free(b);
    free(logits);
    /* non-finite penalties are off, not NaN logits */
    kvi_sampler *c = make(0, NAN, INFINITY, 4);
    const float l4[4] = { 1.0f, 0.9f, 0.5f, 0.2f };
    kvi_sampler_accept_output(c, 0);
    CHECK(c && kvi_sampler_sample(c, l4) == 0, "NaN/inf penalties ignored");
    kvi_sampler_free(c);
}

int main(void)
{
    test_greedy();
    test_probs();
    test_off_is_unchanged();
    return test_main_end();
}
