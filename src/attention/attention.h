/*
 * attention.h — causal attention of a batch of rows over the paged KV cache.
 *
 * Row r (query q[r], position pos[r], block table tables[r]) attends to positions
 * w(r)..pos[r] of its own sequence, w(r) = max(0, pos[r] - window + 1) with a
 * sliding window, else 0, and at least pos[r] - pos[r] % chunk with a chunk: the causal mask is implied by the position, so prefill
 * rows and decode rows go through the same code. Softmax is computed online, one
 * block of positions at a time (running max m, running sum l, and an accumulator
 * rescaled when m grows): no scores matrix of n x n is ever built.
 *
 * Window: the blocks wholly before w(r) of every row of a work item are never
 * read, loaded, prefetched, nor their table entries turned into addresses (their
 * memory may have been released), and the work of a row is that of its window,
 * whatever its position. Per score, in this order: s = (q . k) * scale, s =
 * softcap * tanhf(s / softcap) when softcap != 0, then the window mask. A sink
 * logit (sinks[h]) joins the softmax denominator of head h only:
 * p_t = e^(s_t - m) / (sum_k e^(s_k - m) + e^(sink - m)), m = max(max_k s_k, sink).
 *
 * Determinism: each (row, head) output is reduced over positions 0..pos in
 * order, by one thread, independently of the other rows and of the thread count.
 *
 * Quantised caches are read directly: the thread converts only the tile it needs
 * (one kv head's slice of one block's rows) into its scratch. A q4 key (KIVI) at
 * position t is read, for a query at position p, in f16 while t's group is still
 * incomplete at p and quantised once complete: exactly what decode at p saw.
 */
#ifndef KVI_ATTENTION_H
#define KVI_ATTENTION_H

#include "kv/kv_cache.h"
#include "base/threadpool.h"

typedef struct attn_args {
    const kv_pool *kv;
    int layer;
    int n_rows;
    const kv_table *const *tables; /* [n_rows] */
    const int32_t *pos;            /* [n_rows] */
    const float *q;                /* [n_rows][n_heads * head_dim] after RoPE */
    float *out;                    /* [n_rows][n_heads * head_dim] */
    int n_heads, n_kv_heads, head_dim;
    /* Optional (H2O eviction): when recv && recv[r], row r adds to recv[r][t], for
     * every position t of its window (w(r) <= t <= pos[r]; others untouched), the
     * normalised attention weight it gave t (sink included in the norm), summed
     * over heads (rows must not share an array). NULL: nothing recorded (and
     * nothing paid). */
    float *const *recv; /* [n_rows] -> [pos + 1] */
    /* Optional (forward pass): q4 key groups this batch still reads in f16 after the
     * sequence's tail moved on (kv_quant.h). NULL outside a forward pass. */
    const struct kv_stash *stash;
    /* Per-layer options of other architectures (all 0 / NULL: plain causal attention). */
    int window;         /* sliding window of positions (pos - window, pos]; <= 0: none */
    float softcap;      /* scores capped by softcap * tanhf(s / softcap); 0: none (Gemma 2) */
    float scale;        /* KQ scale; 0: 1 / sqrtf(head_dim) */
    const float *sinks; /* [n_heads] sink logits (gpt-oss); NULL: none */
    int chunk;          /* chunked attention (llama4): p sees [p - p % chunk, p] as well; <= 0: none */
} attn_args;

typedef struct attn_scratch attn_scratch;

/* Per-thread working memory for n_threads threads. */
attn_scratch *attn_scratch_create(int n_threads, int block_size, int head_dim, int n_heads, int n_kv_heads,
                                  int kv_dim);
void attn_scratch_free(attn_scratch *s);

void attention_rows(tpool *pool, attn_scratch *s, const attn_args *a);
/* Plain reference: full softmax per (row, head) in double, every option above,
 * single thread (tests). */
void attention_rows_ref(const attn_args *a);

#endif
