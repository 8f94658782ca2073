/*
 * dsa.c — DeepSeek Sparse Attention's kernels (dsa.h): scalar, the reference.
 *
 * The top-k is a binary heap of k indices, ordered so that its top is the index
 * that compares "last" under ggml's comparator (the smallest score); the steps below
 * are those of libstdc++'s heap algorithms, written from their specification, so
 * that equal scores leave the heap in the same order as in llama.cpp.
 */
#include "kernels/dsa.h"

#include "kernels/delta.h"

#include <math.h>

void kern_dsa_scores(const float *q, const float *w, int ih, int id, const float *k, int64_t ld, int n,
                     float *out)
{
    for (int s = 0; s < n; s++) {
        const float *ks = k + (size_t)s * (size_t)ld;
        float acc = 0.0f;
        for (int j = 0; j < ih; j++) {
            const float d = kern_delta_dot(q + (size_t)j * id, ks, id);
            acc += w[j] * (d > 0.0f ? d : 0.0f);
        }
        out[s] = acc;
    }
}

/* ggml's comparator: a goes before b */
static int before(const float *v, int32_t a, int32_t b) { return v[a] > v[b]; }

/* libstdc++ __push_heap: value moves up from hole while its parent goes before it */
static void push_heap(const float *v, int32_t *h, int hole, int top, int32_t value)
{
    int parent = (hole - 1) / 2;
    while (hole > top && before(v, h[parent], value)) {
        h[hole] = h[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    h[hole] = value;
}

/* libstdc++ __adjust_heap: the hole sinks to a leaf along the later-going child,
 * then value is pushed up from there */
static void adjust_heap(const float *v, int32_t *h, int hole, int len, int32_t value)
{
    const int top = hole;
    int child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (before(v, h[child], h[child - 1])) child--;
        h[hole] = h[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        h[hole] = h[child - 1];
        hole = child - 1;
    }
    push_heap(v, h, hole, top, value);
}

int kern_dsa_topk(const float *v, int n, int k, int32_t *sel)
{
    if (n <= k) {
        for (int i = 0; i < n; i++) sel[i] = i;
        return n;
    }
    for (int i = 0; i < k; i++) sel[i] = i;
    if (k >= 2) /* __make_heap */
        for (int parent = (k - 2) / 2; parent >= 0; parent--) adjust_heap(v, sel, parent, k, sel[parent]);
    for (int i = k; i < n; i++) /* __heap_select: __pop_heap(first, middle, i) */
        if (before(v, i, sel[0])) adjust_heap(v, sel, 0, k, i);
    return k;
}

void kern_dsa_attend(const float *q, const float *rows, int64_t ld, int n, int hd, float scale, float *out)
{
    float mx = -INFINITY;
    for (int i = 0; i < hd; i++) out[i] = 0.0f;
    if (n <= 0) return;
    for (int i = 0; i < n; i++) {
        const float s = kern_delta_dot(q, rows + (size_t)i * (size_t)ld, hd) * scale;
        if (s > mx) mx = s;
    }
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *r = rows + (size_t)i * (size_t)ld;
        const float p = expf(kern_delta_dot(q, r, hd) * scale - mx);
        sum += p;
        for (int j = 0; j < hd; j++) out[j] += p * r[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < hd; j++) out[j] *= inv;
}
