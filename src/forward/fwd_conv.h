/*
 * fwd_conv.h — the causal depthwise convolution of a recurrent layer over a batch's
 * rows, with each sequence's conv state (the DeltaNet and Mamba-2 mixers share it).
 *
 * A row's sequence keeps conv [K - 1][C] at the start of its layer state: the raw
 * inputs of its last K - 1 positions, oldest first. For the rows of one pass,
 * prev[r] is the previous row of r's sequence in the pass (or -1) and last[r] 1 for
 * its last row; a tap reaching before a sequence's first row in the pass reads its
 * state. Each output is kern_ssm_conv_ref's expression (kernels/ssm.h), whatever
 * the batch and the thread split: channels are split, rows stay in order.
 */
#ifndef KVI_FWD_CONV_H
#define KVI_FWD_CONV_H

#include <stddef.h>
#include <stdint.h>

typedef struct fwd_conv_rows {
    int n, K, C;
    const float *p; /* [n][ldp] the rows' raw inputs (channel c at p[r ldp + c]) */
    size_t ldp;
    float *const *state; /* [n] each row's sequence's layer state: conv [K - 1][C] first */
    float *const *snap;  /* [n] where the state after row r goes (NULL or NULL entries: none) */
    const int *prev;     /* [n] */
    const uint8_t *last; /* [n] */
    const float *w;      /* [C][K] taps */
    const float *b;      /* [C] bias or NULL */
    float *out;          /* [n][C] SiLU(conv) */
} fwd_conv_rows;

/* prev / last of n rows from their states (rows of one sequence share a state
 * pointer), and the state of a row at position 0 zeroed (state_floats floats). */
void fwd_conv_link(float *const *state, const int32_t *pos, int n, size_t state_floats, int *prev,
                   uint8_t *last);
/* Channels of thread ith of nth (a tpool_fn body): outputs, snapshots, the new states. */
void fwd_conv_part(const fwd_conv_rows *t, int ith, int nth);

#endif
