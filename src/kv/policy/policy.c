/*
 * policy.c — the policy registry and the compaction every policy shares
 * (contract in policy.h).
 *
 * Compaction runs in increasing new position i; keep[] is strictly increasing,
 * so keep[i] >= i and a source row is never overwritten before it is read.
 * RoPE by a delta d rotates each pair of a key by d * freq_j, the pairs being
 * (2j, 2j+1) for llama and (j, j + n_rot/2) for NeoX (qwen2), with the same
 * frequencies the forward pass uses (rope_theta, optional rope_freqs divisors).
 * Rows moved by the same delta share one table of cos/sin.
 *
 * q4 (KIVI) keys: a key group is re-quantised whenever one of its rows is
 * written, so compaction works one destination group at a time: all its source
 * rows are read first (from untouched groups, and the newest group's exact f16
 * rows from a snapshot of the tail taken before anything moved), then written.
 * Afterwards the tail holds the new last group's rows, exactly n_keep's worth
 * (kivi_tail_fit). Moved keys of complete groups are quantised again: the cost
 * of moving a 4-bit key, as RoPE re-rotation is the cost of moving any key.
 */
#include "kv/policy/policy.h"

#include "base/error.h"
#include "kernels/rope.h"
#include "kv/kv_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kv_policy *const registry[] = {
    &kv_policy_error, &kv_policy_shift, &kv_policy_sinks, &kv_policy_heavy, NULL,
};

const kv_policy *kv_policy_find(const char *name)
{
    if (!name || !name[0]) return &kv_policy_error;
    for (int i = 0; registry[i]; i++)
        if (!strcmp(registry[i]->name, name)) return registry[i];
    return NULL;
}

const char *kv_policy_names(void) { return "error, shift, sinks, heavy"; }

int kv_policy_apply(kv_pool *p, kv_table *t, const kv_rope *m, const int32_t *keep, int32_t n_keep,
                    float *recv, kvi_error *err)
{
    int32_t first = 0;
    while (first < n_keep && keep[first] == first) first++;
    const int bs = p->block_size, half = m->n_rot / 2, hd = m->head_dim, kvd = p->kv_dim;
    if (first < n_keep) {
        int rc = kv_table_make_private(p, t, first / bs, (n_keep - 1) / bs, err);
        if (rc) return rc;
    }
    /* kbuf, vbuf [block_size][kv_dim]: one destination group's rows as f32;
     * cos/sin and frequencies [half]; snap [tail_bytes]: the tail before any move */
    float *kbuf = malloc((size_t)bs * kvd * sizeof *kbuf);
    float *vbuf = malloc((size_t)bs * kvd * sizeof *vbuf);
    double *freq = malloc((size_t)(half > 0 ? half : 1) * sizeof *freq);
    float *cs = malloc((size_t)(half > 0 ? half : 1) * 2 * sizeof *cs); /* [2][half]: cos, sin */
    uint8_t *snap = t->tail && p->tail_bytes ? malloc(p->tail_bytes) : NULL;
    if (!kbuf || !vbuf || !freq || !cs || (t->tail && p->tail_bytes && !snap)) {
        free(kbuf);
        free(vbuf);
        free(freq);
        free(cs);
        free(snap);
        return err_set(err, KVI_E_NOMEM, "context policy: out of memory");
    }
    /* sources are read through a view whose tail is the snapshot: the newest
     * group's exact keys stay readable after the live tail has moved on */
    kv_table src_view = *t;
    if (snap) {
        memcpy(snap, t->tail, p->tail_bytes);
        src_view.tail = snap;
    }
    for (int j = 0; j < half; j++) freq[j] = kern_rope_freq(m->theta, m->n_rot, m->freqs, j);
    /* group by group: every source of a destination group lies in it or later
     * (keep[i] >= i) and is read before the group is written; the unmoved rows
     * of the first group are written back too, so that a q4 group is rebuilt
     * from the best values there are */
    for (int32_t g0 = first - first % bs; first < n_keep && g0 < n_keep; g0 += bs) {
        const int32_t g1 = g0 + bs < n_keep ? g0 + bs : n_keep;
        for (int l = 0; l < p->n_layers; l++) {
            int32_t cur_delta = 0;
            bool have = false;
            for (int32_t i = g0; i < g1; i++) {
                const int32_t src = i < first ? i : keep[i], delta = i - src;
                float *k = kbuf + (size_t)(i - g0) * kvd;
                kv_read_row(p, &src_view, l, 0, src, k);
                kv_read_row(p, &src_view, l, 1, src, vbuf + (size_t)(i - g0) * kvd);
                if (delta == 0) continue;
                if (!have || delta != cur_delta) {
                    kern_rope_cos_sin((double)delta, freq, half, cs, cs + half);
                    cur_delta = delta;
                    have = true;
                }
                for (int h = 0; h < m->n_kv_heads; h++)
                    kern_rope_head(k + (size_t)h * hd, cs, cs + half, half, m->neox);
            }
            for (int32_t i = g0; i < g1; i++) {
                /* an unmoved row is rewritten only to rebuild a q4 key group */
                if (i < first && !snap) continue;
                kv_write_row(p, t, l, 0, i, kbuf + (size_t)(i - g0) * kvd);
                if (i >= first) kv_write_row(p, t, l, 1, i, vbuf + (size_t)(i - g0) * kvd);
            }
        }
        for (int32_t i = g0 > first ? g0 : first; i < g1; i++) {
            t->tokens[i] = t->tokens[keep[i]];
            if (recv) recv[i] = recv[keep[i]];
        }
    }
    if (first < n_keep) kivi_tail_fit(p, t, n_keep);
    free(kbuf);
    free(vbuf);
    free(freq);
    free(cs);
    free(snap);
    kv_table_truncate(p, t, n_keep);
    t->n_pos = n_keep;
    t->no_index = true;
    return 0;
}
