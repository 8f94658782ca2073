/*
 * kv_policy.c — the policy registry and the compaction every policy shares
 * (contract in kv_policy.h).
 *
 * Compaction runs in increasing new position i; keep[] is strictly increasing,
 * so keep[i] >= i and a source row is never overwritten before it is read.
 * RoPE by a delta d rotates each pair of a key by d * freq_j, the pairs being
 * (2j, 2j+1) for llama and (j, j + n_rot/2) for NeoX (qwen2), with the same
 * frequencies the forward pass uses (rope_theta, optional rope_freqs divisors).
 * Rows moved by the same delta share one table of cos/sin.
 */
#include "kv_policy.h"

#include "error.h"
#include "model.h"

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

int kv_policy_apply(kv_pool *p, kv_table *t, const struct kvi_model *m, const int32_t *keep,
                    int32_t n_keep, float *recv, kvi_error *err)
{
    int32_t first = 0;
    while (first < n_keep && keep[first] == first) first++;
    const int bs = p->block_size, half = m->n_rot / 2, hd = m->head_dim;
    if (first < n_keep) {
        int rc = kv_table_make_private(p, t, first / bs, (n_keep - 1) / bs, err);
        if (rc) return rc;
    }
    /* row [kv_dim] as f32; cos/sin and frequencies [half] */
    float *row = malloc((size_t)p->kv_dim * sizeof *row);
    double *freq = malloc((size_t)(half > 0 ? half : 1) * sizeof *freq);
    float *cs = malloc((size_t)(half > 0 ? half : 1) * 2 * sizeof *cs);
    if (!row || !freq || !cs) {
        free(row);
        free(freq);
        free(cs);
        return kvi_err_set(err, KVI_E_NOMEM, "context policy: out of memory");
    }
    for (int j = 0; j < half; j++) {
        double fr = pow((double)m->rope_theta, -2.0 * j / (double)m->n_rot);
        if (m->rope_freqs) fr /= m->rope_freqs[j];
        freq[j] = fr;
    }
    int32_t cur_delta = 0;
    bool have = false;
    for (int32_t i = first; i < n_keep; i++) {
        const int32_t src = keep[i], delta = i - src;
        if (!have || delta != cur_delta) {
            for (int j = 0; j < half; j++) {
                const double ang = (double)delta * freq[j];
                cs[2 * j] = (float)cos(ang);
                cs[2 * j + 1] = (float)sin(ang);
            }
            cur_delta = delta;
            have = true;
        }
        for (int l = 0; l < p->n_layers; l++) {
            kv_read_row(p, t, l, 0, src, row);
            for (int h = 0; h < m->n_kv_heads; h++) {
                float *v = row + (size_t)h * hd;
                for (int j = 0; j < half; j++) {
                    const int a = m->rope_neox ? j : 2 * j;
                    const int b = m->rope_neox ? j + half : 2 * j + 1;
                    const float v0 = v[a], v1 = v[b];
                    v[a] = v0 * cs[2 * j] - v1 * cs[2 * j + 1];
                    v[b] = v0 * cs[2 * j + 1] + v1 * cs[2 * j];
                }
            }
            kv_write_row(p, t, l, 0, i, row);
            kv_read_row(p, t, l, 1, src, row);
            kv_write_row(p, t, l, 1, i, row);
        }
        t->tokens[i] = t->tokens[src];
        if (recv) recv[i] = recv[src];
    }
    free(row);
    free(freq);
    free(cs);
    kv_table_truncate(p, t, n_keep);
    t->n_pos = n_keep;
    t->no_index = true;
    return 0;
}
