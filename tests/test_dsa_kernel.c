/*
 * test_dsa_kernel.c — DeepSeek Sparse Attention's kernels (kernels/dsa.h) against
 * independent references:
 *  - kern_dsa_topk: on random distinct scores, the set of the k largest (a full sort
 *    in double); on ties, the sets std::partial_sort gives in llama.cpp's TOP_K
 *    (libstdc++, comparator a before b when v[a] > v[b]), transcribed from running
 *    it on these inputs — the survivors among equal scores are not simply the lowest
 *    indices (cases 1 and 3);
 *  - kern_dsa_scores: sum_j w_j relu(q_j . k) in double, within 1e-5 relative;
 *  - kern_dsa_attend: softmax attention in double, within 1e-5 relative.
 */
#include "testutil.h"

#include "kernels/dsa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345u;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) / 16777216.0 * 2.0 - 1.0);
}

static int cmp_int(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

/* the sets std::partial_sort keeps (sorted), k = 3, 4, 5, 8 */
static void check_ties(void)
{
    static const float v0[12] = { 0 };
    static const float v1[13] = { 1, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0 };
    static const float v2[16] = { 0, 0.5f, 0, 0, 0.5f, 0, 0, 0.5f, 0, 0, 0.5f, 0, 0.5f, 0, 0, 0.5f };
    static const float v3[20] = { 3, 1, 1, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    static const struct {
        const float *v;
        int n;
        int want[4][8];
    } c[4] = {
        { v0, 12, { { 0, 1, 2 }, { 0, 1, 2, 3 }, { 0, 1, 2, 3, 4 }, { 0, 1, 2, 3, 4, 5, 6, 7 } } },
        { v1, 13, { { 0, 3, 7 }, { 0, 1, 3, 7 }, { 0, 1, 3, 4, 7 }, { 0, 1, 2, 3, 4, 5, 6, 7 } } },
        { v2, 16, { { 1, 4, 7 }, { 1, 4, 7, 10 }, { 1, 4, 7, 10, 12 }, { 1, 3, 4, 5, 7, 10, 12, 15 } } },
        { v3, 20, { { 0, 4, 10 }, { 0, 1, 4, 10 }, { 0, 1, 3, 4, 10 }, { 0, 1, 2, 3, 4, 5, 7, 10 } } },
    };
    static const int ks[4] = { 3, 4, 5, 8 };
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int32_t sel[8];
            const int n = kern_dsa_topk(c[i].v, c[i].n, ks[j], sel);
            qsort(sel, (size_t)n, sizeof *sel, cmp_int);
            CHECK(n == ks[j] && !memcmp(sel, c[i].want[j], (size_t)n * sizeof *sel),
                  "topk ties: case %d k %d: got %d %d %d ...", i, ks[j], sel[0], sel[1], sel[2]);
        }
    int32_t sel[8];
    CHECK(kern_dsa_topk(v1, 5, 8, sel) == 5 && sel[4] == 4, "topk: n <= k keeps all");
}

static int cmp_desc(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static void check_random_topk(void)
{
    enum { N = 300 };
    float v[N];
    double s[N];
    int32_t sel[64];
    for (int it = 0; it < 50; it++) {
        const int n = 1 + (int)((frand() + 1.0f) * 0.5f * (N - 1)), k = 1 + it % 40;
        for (int i = 0; i < n; i++) s[i] = v[i] = frand() * 100.0f + (float)i * 1e-3f;
        qsort(s, (size_t)n, sizeof *s, cmp_desc);
        const int got = kern_dsa_topk(v, n, k, sel);
        bool ok = got == (n < k ? n : k);
        for (int i = 0; ok && i < got; i++) ok = n <= k || v[sel[i]] >= s[k - 1];
        for (int i = 0; ok && i < got; i++)
            for (int j = 0; j < i; j++) ok = ok && sel[i] != sel[j];
        CHECK(ok, "topk: random case %d (n %d, k %d) is not the k largest", it, n, k);
    }
}

static void check_scores_attend(void)
{
    enum { IH = 8, ID = 64, NK = 37, HD = 96 };
    float q[IH * ID], w[IH], k[NK * ID], out[NK];
    for (int i = 0; i < IH * ID; i++) q[i] = frand();
    for (int i = 0; i < IH; i++) w[i] = frand();
    for (int i = 0; i < NK * ID; i++) k[i] = frand();
    kern_dsa_scores(q, w, IH, ID, k, ID, NK, out);
    double err = 0, nrm = 0;
    for (int s = 0; s < NK; s++) {
        double acc = 0;
        for (int j = 0; j < IH; j++) {
            double d = 0;
            for (int i = 0; i < ID; i++) d += (double)q[j * ID + i] * k[s * ID + i];
            acc += w[j] * (d > 0 ? d : 0);
        }
        err += (out[s] - acc) * (out[s] - acc);
        nrm += acc * acc;
    }
    CHECK(sqrt(err / nrm) < 1e-5, "scores: %.3g relative from the double reference", sqrt(err / nrm));

    float qa[HD], rows[NK * HD], o[HD];
    for (int i = 0; i < HD; i++) qa[i] = frand();
    for (int i = 0; i < NK * HD; i++) rows[i] = frand();
    const float scale = 0.125f;
    kern_dsa_attend(qa, rows, HD, NK, HD, scale, o);
    double sc[NK], mx = -1e300, sum = 0;
    for (int s = 0; s < NK; s++) {
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)qa[i] * rows[s * HD + i];
        sc[s] = d * scale;
        mx = sc[s] > mx ? sc[s] : mx;
    }
    for (int s = 0; s < NK; s++) sum += exp(sc[s] - mx);
    err = nrm = 0;
    for (int i = 0; i < HD; i++) {
        double r = 0;
        for (int s = 0; s < NK; s++) r += exp(sc[s] - mx) / sum * rows[s * HD + i];
        err += (o[i] - r) * (o[i] - r);
        nrm += r * r;
    }
    CHECK(sqrt(err / nrm) < 1e-5, "attend: %.3g relative from the double reference", sqrt(err / nrm));
}

int main(void)
{
    check_ties();
    check_random_topk();
    check_scores_attend();
    return test_main_end();
}
