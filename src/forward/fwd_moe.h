/*
 * fwd_moe.h — the mixture-of-experts feed-forward block over a chunk of rows.
 *
 * For rows x [n][dim] (already normed) of a moe layer (model.h):
 *   l = x Router^T (+ router_b)                       l   [n][E]
 *   per row: the chosen experts sel [k] and weights w [k] (fwd_moe_route)
 *   y[r] = sum over the row's chosen e, in increasing e, of
 *          w_e * (act(x[r] G_e^T (+b)) * (x[r] U_e^T (+b))) D_e^T (+b)
 *   y[r] += shared expert (a dense gated FFN) of x[r], when the layer has one
 *
 * Speed: the rows are grouped by expert, so each chosen expert's matrices are read
 * once per chunk for all the rows that chose it (prefill: one product per expert
 * over its rows; decode: one read per expert however many rows chose it), and
 * experts nobody chose are not read at all.
 *
 * Bits: a row's routing depends on its own logits only; each expert's product for
 * a row is a kern_matmul row (whose bits do not depend on the other rows of the
 * call, the threads or the ISA), and a row's sum runs in increasing expert index.
 * So a row gives the same bits alone or in any batch, prefill == decode.
 */
#ifndef KVI_FWD_MOE_H
#define KVI_FWD_MOE_H

#include "base/threadpool.h"
#include "forward/fwd_lora.h"
#include "model/model.h"

#include <stdint.h>

typedef struct fwd_moe fwd_moe;

/* Scratch for chunks of up to `chunk` rows of model m (m->n_expert > 0), or NULL on
 * allocation failure. *bytes += the bytes it holds. */
fwd_moe *fwd_moe_create(const struct kvi_model *m, int chunk, size_t *bytes);
void fwd_moe_free(fwd_moe *s);

/* The experts of one row: from its router logits l [E] (router bias included),
 * the k = n_expert_used chosen experts sel [k] (in the order chosen: best first;
 * ties go to the lower index) and their weights w [k], by m's gating rules
 * (model.h model_gating, expert_norm, expert_scale, expert groups):
 *   p = softmax(l) or sigmoid(l); s = p + sel_bias (selection only; NULL: s = p);
 *   with G groups: a group scores the sum of its two best s, all but the
 *   n_groups_used best groups masked; sel = the k best s;
 *   w = p[sel] (unbiased), / max(sum, 2^-14) when expert_norm, * expert_scale.
 * sel_bias [E] or NULL. scratch: [2 * E] floats. */
void fwd_moe_route(const struct kvi_model *m, const float *sel_bias, const float *l, int *sel, float *w,
                   float *scratch);

/* The LoRA adapters of a call's rows (fwd_lora.h): sets [n] per row of x, or NULL. */
typedef struct fwd_moe_lora {
    fwd_lora *s;
    const lora_set *const *sets;
    int layer;
} fwd_moe_lora;

/* The block for rows x [n][dim] of layer L into y [n][dim] (not overlapping x),
 * n <= chunk. gelu: fwd_act_table's table when m->act needs it. 0 or the first
 * product's error. The rows routed to each expert are added into counts [E]
 * (when counts is not NULL). lora (NULL or sets NULL: none): each chosen expert's
 * products get the row's adapters' terms of that expert. */
int fwd_moe_run(fwd_moe *s, tpool *pool, const struct kvi_model *m, const model_layer *L,
                const uint16_t *gelu, const float *x, int n, float *y, uint64_t *counts,
                const fwd_moe_lora *lora);

#endif
