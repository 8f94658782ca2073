/*
 * lora.h — LoRA adapters (llama.cpp's GGUF adapter format) bound to a loaded model.
 *
 * An adapter is, per layer and adapted matrix W [n_out][n_in] of the model, a pair
 *   A [r][n_in]   (GGUF "<name>.lora_a", ggml {n_in, r})
 *   B [n_out][r]  (GGUF "<name>.lora_b", ggml {r, n_out})
 * and the adapted product is y = W x + s B (A x) with s = user_scale * ar,
 * ar = alpha / r (alpha != 0) or 1 (alpha 0 or absent: llama.cpp's rule). An expert
 * matrix ([E * n_out][n_in], expert e rows [e n_out, (e + 1) n_out)) has one pair per
 * expert: A [E * r][n_in] (expert e rows [e r, (e + 1) r)), B [E * n_out][r].
 *
 * Invariants once loaded (lora_load): every pair's shapes equal its base matrix's
 * (n_in; n_out, per expert for expert matrices), 1 <= r <= LORA_MAX_RANK, A and B
 * are F32, F16 or Q8_0 (Q8_0 only where the row length is a multiple of 32) in the
 * row layout, and their data lies inside the adapter's file buffer, which the
 * adapter owns; bt holds B's values (exact, widened to f32) transposed, which the
 * products read (B itself is kept for lora-merge and listings). The model must outlive the adapter; the adapter must outlive every
 * sequence that uses it (kvi_lora_free refuses while one does).
 */
#ifndef KVI_LORA_H
#define KVI_LORA_H

#include "formats/gguf.h"
#include "model/model.h"

/* The matrices of a layer an adapter may adapt. */
typedef enum lora_mat {
    LORA_WQ = 0,
    LORA_WK,
    LORA_WV,
    LORA_WO,
    LORA_GATE,
    LORA_UP,
    LORA_DOWN,
    LORA_EXP_GATE, /* expert matrices: one pair per expert */
    LORA_EXP_UP,
    LORA_EXP_DOWN,
    LORA_N_MAT
} lora_mat;

#define LORA_MAX_RANK 1024
/* adapters one sequence can use at once */
#define LORA_SET_MAX KVI_LORA_SET_MAX

typedef struct lora_pair {
    kern_tensor a; /* [r][n_in], experts [E * r][n_in]; data NULL: matrix not adapted */
    kern_tensor b; /* [n_out][r], experts [E * n_out][r] */
    float *bt;     /* B transposed in f32 panels (kernels/lora_bt.h), one part per expert */
    int rank;      /* r */
    float ar;      /* alpha / r, or 1 when alpha is 0 */
} lora_pair;

struct kvi_lora {
    const struct kvi_model *m; /* the base model it was checked against */
    char path[256];            /* the file, for listings (truncated) */
    char name[128];            /* kvi_lora_name: set, or the file name less folders and .gguf */
    float alpha;
    int n_pairs;      /* pairs bound (an expert matrix counts once) */
    int max_rank;     /* the largest r */
    lora_pair *pairs; /* [n_layers][LORA_N_MAT] */
    int n_users;      /* sequences whose set holds it */
    uint64_t id;      /* distinct for every adapter loaded by this process (keys cached prefixes) */
    gguf_ctx *g;      /* the adapter file (owns the tensor bytes), or NULL */
    void *own;        /* a PEFT folder's safetensors bytes and permuted copies (lora_peft.c), or NULL */
};

/* A sequence's adapters: scales[i] is adapter ad[i]'s user scale (never 0: such an
 * adapter is left out). Order matters for the bits (terms add in index order). */
typedef struct lora_set {
    int n;
    const struct kvi_lora *ad[LORA_SET_MAX];
    float scale[LORA_SET_MAX];
} lora_set;

/* The pair of layer l, matrix w (a.data NULL when not adapted). */
static inline const lora_pair *lora_pair_of(const struct kvi_lora *a, int l, lora_mat w)
{
    return &a->pairs[(size_t)l * LORA_N_MAT + w];
}

/* The base matrix of layer l, matrix w, or NULL when the model has none there;
 * *per_out: rows per expert (expert matrices), else its n_out. */
const kern_tensor *lora_base(const struct kvi_model *m, int l, lora_mat w, int64_t *per_out);

/* The GGUF name of matrix w ("attn_q", "ffn_down_exps", ...) */
const char *lora_mat_name(lora_mat w);

/* Loads and checks the adapter at path against m (see the top of this file); the
 * error names the tensor or key at fault. 0 or KVI_E_FORMAT / KVI_E_INVALID /
 * KVI_E_NOMEM / KVI_E_IO, *out NULL on error. */
int lora_load(const struct kvi_model *m, const char *path, struct kvi_lora **out, kvi_error *err);
/* A Hugging Face PEFT folder (adapter_config.json + adapter_model.safetensors): lora_peft.c.
 * lora_load takes this path for a folder. */
int lora_load_peft(const struct kvi_model *m, const char *dir, struct kvi_lora **out, kvi_error *err);
/* For the loaders: an empty adapter of m named after path (NULL: out of memory), and
 * the check and binding of one pair (ga: A {n_in, r[, E]}, gb: B {r, n_out[, E]}). */
struct kvi_lora *lora_alloc(const struct kvi_model *m, const char *path);
int lora_bind_pair(struct kvi_lora *a, int l, lora_mat w, const gguf_tensor *ga, const gguf_tensor *gb,
                   kvi_error *err);
/* The same from a GGUF image in memory that the caller keeps alive (tests, fuzzing). */
int lora_load_mem(const struct kvi_model *m, const void *buf, size_t len, struct kvi_lora **out,
                  kvi_error *err);
void lora_free(struct kvi_lora *a);

#endif
