/*
 * kvinfer.h — the public C API of kvinfer.
 *
 * Inference has two phases. Prefill runs all prompt rows through the network in
 * one forward pass; decode adds one row per step. Both are just "rows" here: a
 * row is (sequence, position, token), and kvi_step() runs one forward pass over
 * a batch of rows from any number of sequences. Each row attends to its own
 * sequence's cached positions 0..pos (the causal mask is implied by position);
 * its keys and values are appended to the sequence's paged KV cache.
 *
 * All handles are opaque. Functions that can fail return 0 (KVI_OK) or a
 * negative KVI_E_* code, and fill a kvi_error with one line of text when given.
 * Nothing in the library exits or aborts on bad input.
 */
#ifndef KVINFER_H
#define KVINFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvinfer_types.h" /* kvi_error, KVI_E_*, kvi_type */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU paths (process-wide) ------------------------------------------ */

/* Which of the CPU's paths the kernels may take. Every path gives the same bits
 * (the integer products everywhere; the float products per ISA, see kernels.h), so
 * these choose speed, not results. The library reads no environment variable:
 * the CLI maps KVINFER_ISA, KVINFER_AMX and KVINFER_AMX_F16 onto these fields. */
typedef struct kvi_cpu_params {
    const char *isa; /* highest SIMD path: "avx512" (default; capped at what the
                          CPU has), "avx2" or "scalar" */
    bool amx;        /* AMX tiles for Q8_0 / Q4_0 products where the CPU and the OS
                          allow them (default true) */
    bool amx_f16;    /* F16 / BF16 products on AMX-BF16 too (default false) */
} kvi_cpu_params;

void kvi_cpu_params_default(kvi_cpu_params *p);
/* Applies p for the whole process; call it before loading a model (the loader
 * lays weights out for the kernels chosen then) and never while a kvi_step
 * runs. 0, or KVI_E_INVALID for an unknown isa. One engine can take other paths
 * than the process's: kvi_engine_params.cpu. */
int kvi_cpu_configure(const kvi_cpu_params *p, kvi_error *err);

/* ---- models -------------------------------------------------------------- */

typedef struct kvi_model kvi_model;

typedef struct kvi_load_params {
    bool use_mmap;              /* map the file instead of reading it into memory */
    const char *tokenizer_path; /* llama2.c checkpoints: tokenizer.bin (NULL: next to the model) */
    bool repack;                /* Q8_0 / Q4_0 / IQ4_NL / MXFP4 / Q4_K / Q6_K matrices into the
                                    kernels' R16 tiles where they read them faster (default
                                    true; false keeps the file's layout; never with use_mmap) */
    int stage_first, stage_end; /* a pipeline stage (GGUF): only layers [stage_first,
                                    stage_end), the embedding when stage_first is 0 and the
                                    output head when stage_end is the last layer are read
                                    and held; the other tensors are bound but never read
                                    (zeros). 0, 0 (default): the whole model */
} kvi_load_params;

void kvi_load_params_default(kvi_load_params *p);

/* Loads a GGUF file, a llama2.c checkpoint (.bin) or a Hugging Face folder. */
kvi_model *kvi_model_load(const char *path, const kvi_load_params *p, kvi_error *err);
/* Loads only a tokenizer (a GGUF with a tokenizer section and possibly no tensors,
 * a llama2.c tokenizer.bin, or a tokenizer.json): kvi_model_has_weights() is false. */
kvi_model *kvi_vocab_load(const char *path, kvi_error *err);
void kvi_model_free(kvi_model *m);

typedef struct kvi_model_info {
    char arch[32]; /* general.architecture: "llama", "qwen3", "gemma3" ... */
    char name[64];
    int n_vocab;
    int n_ctx_train; /* context_length metadata */
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim;
    kvi_type weight_type; /* type of most matrix weights */
    size_t weight_bytes;  /* bytes of all weight tensors */
    bool has_weights;
    int n_unread_tensors; /* tensors of a part the architecture does not run (a
                             multimodal file's vision tower), left unread */
    /* layer kinds (kvi_model_info_from_file; as the loader lays them out) */
    int n_layers_window; /* sliding-window layers: their KV is bounded by the window */
    int window;          /* the largest window of those layers (positions), 0: none */
    /* mixture of experts (a loaded model's info; 0 for dense models) */
    int n_expert, n_expert_used, expert_ffn;
    /* multi-head latent attention (DeepSeek-V2/V3; kvi_model_info_from_file too): the
     * cache holds one row of head_dim = mla_kv_rank + RoPE dims per position and
     * layer (n_kv_heads 1, no value rows); per-head attention would hold n_heads x
     * (mla_k_head + mla_v_head). 0: none */
    int mla_kv_rank, mla_k_head, mla_v_head;
    /* hybrid models (Qwen3.5, Qwen3-Next; kvi_model_info_from_file too): gated
     * DeltaNet layers keep no K/V but a fixed f32 state per sequence, state_bytes
     * over all of them. 0: none */
    int n_layers_recurrent;
    size_t state_bytes;
} kvi_model_info;

void kvi_model_get_info(const kvi_model *m, kvi_model_info *out);
bool kvi_model_has_weights(const kvi_model *m);

/* ---- tokenizer ----------------------------------------------------------- */

/* Encodes text. add_special: add BOS (and EOS) as the model's metadata says
 * (WordPiece: [CLS] text [SEP], as llama.cpp feeds an embedding model).
 * parse_special: text such as "<s>" becomes its special token (off for user text).
 * Returns the number of tokens (which may exceed n_max: then only n_max were written
 * and the caller retries with a larger buffer), or a negative KVI_E_* code. */
int32_t kvi_tokenize(const kvi_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                     int32_t *out, int32_t n_max);
/* kvi_tokenize with parse_special, except that special tokens (other than
 * user-defined ones, which plain text matches too) are not recognised where they
 * overlap a byte range [plain[2k], plain[2k+1]), k < n_plain: a chat prompt
 * whose message contents stay plain text. */
int32_t kvi_tokenize_plain(const kvi_model *m, const char *text, size_t len, bool add_special,
                           const size_t *plain, size_t n_plain, int32_t *out, int32_t n_max);
/* A query / document pair for a cross-encoder reranker without a rerank template,
 * as llama.cpp's server builds it: [CLS] query [SEP] document [SEP] for a WordPiece
 * GGUF with add_bos / add_eos (the add_*_token keys decide; a tokenizer.json's
 * post-processor template otherwise). types (NULL: not written) receives each
 * token's segment, 0 for the query's part and 1 for the document's, as Hugging
 * Face's token_type_ids (llama.cpp feeds 0 to every token). Returns the full count
 * (out and types filled up to n_max) or a negative code. */
int32_t kvi_tokenize_pair(const kvi_model *m, const char *query, size_t qlen, const char *doc, size_t dlen,
                          int32_t *out, int32_t *types, int32_t n_max);

/* The bytes of one token (SentencePiece "▁" shown as a space, byte tokens as their
 * byte). Special tokens are rendered only when render_special. Returns the number
 * of bytes (may exceed cap: then the output is truncated and not terminated), or a
 * negative code for an out-of-range id. */
int32_t kvi_token_to_piece(const kvi_model *m, int32_t token, char *buf, size_t cap, bool render_special);

/* Text of a token sequence, as a user should read it (the leading space that
 * SentencePiece adds after BOS removed when remove_leading_space). Returns bytes
 * needed; writes at most cap-1 and terminates when cap > 0. */
int32_t kvi_detokenize(const kvi_model *m, const int32_t *tokens, int32_t n, char *buf, size_t cap,
                       bool render_special, bool remove_leading_space);

int32_t kvi_token_bos(const kvi_model *m);                /* -1 when none */
int32_t kvi_token_eos(const kvi_model *m);                /* -1 when none */
/* The fill-in-the-middle tokens: tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id
 * (the older prefix/suffix/middle_token_id too), else found by their text as
 * llama.cpp does (<|fim_prefix|>, <fim-prefix>, <PRE>, ...). */
typedef enum kvi_fim_kind {
    KVI_FIM_PRE,
    KVI_FIM_SUF,
    KVI_FIM_MID,
    KVI_FIM_PAD,
    KVI_FIM_REP, /* repository name */
    KVI_FIM_SEP, /* file separator */
} kvi_fim_kind;
int32_t kvi_token_fim(const kvi_model *m, kvi_fim_kind kind); /* -1 when none */
bool kvi_token_is_eog(const kvi_model *m, int32_t token); /* EOS, EOT, ... */
bool kvi_model_add_bos(const kvi_model *m);               /* does add_special put BOS first */
int32_t kvi_n_vocab(const kvi_model *m);

/* Length of the longest prefix of s that does not end inside an incomplete UTF-8
 * sequence (what can be printed now while streaming). */
size_t kvi_utf8_complete_prefix(const char *s, size_t len);
/* Copy of s (malloc'd, NUL-terminated) with invalid UTF-8 replaced by U+FFFD, so
 * that it can go into JSON; NULL when out of memory. */
char *kvi_utf8_sanitize(const char *s, size_t len);

/* ---- engine, sequences, batches ------------------------------------------ */

typedef struct kvi_engine kvi_engine;
typedef struct kvi_seq kvi_seq;
typedef struct kvi_batch kvi_batch;

typedef struct kvi_engine_params {
    int n_threads;          /* 0: every core */
    int n_ctx;              /* positions per sequence; 0: the model's context_length */
    kvi_type kv_type_k;     /* element type of cached keys (default F16) */
    kvi_type kv_type_v;     /* element type of cached values (default F16) */
    int kv_block_size;      /* tokens per KV block (default 16) */
    size_t kv_budget_bytes; /* bound on the whole KV pool; 0: n_seq_max * n_ctx tokens */
    int n_seq_max;          /* sequences alive at once (default 1) */
    int n_batch_max;        /* rows per forward pass; larger batches are split (default 512) */
    /* KV sharing and bounded context */
    bool prefix_cache;         /* index full blocks for reuse by kvi_seq_reuse_prefix (default on) */
    const char *ctx_policy;    /* at n_ctx: "error" (default), "shift", "sinks", "heavy" */
    int32_t n_keep;            /* shift: first tokens never dropped (default 0) */
    int32_t n_sink;            /* sinks, heavy: attention-sink tokens kept (default 4) */
    int32_t n_window;          /* sinks: recent tokens kept (0: all that fit);
                                heavy: recent window (0: n_ctx / 4) */
    int32_t fwd_chunk;         /* rows per chunk of the forward pass (0: sized by its
                                scratch budget; N > 0 forces N: tests of the chunked path) */
    const kvi_cpu_params *cpu; /* this engine's CPU paths, read at kvi_engine_create (NULL:
                                  the process-wide choice of kvi_cpu_configure); the
                                  process-wide AMX switch bounds an engine's */
    /* tiers of the prefix cache: blocks the pool evicts go to host RAM (bounded,
     * LRU), from there and at kvi_engine_free to files in kv_cache_dir, found
     * again by later prompts and after a restart (full-attention models only) */
    size_t kv_cache_ram;      /* bytes of the RAM tier (0: off, the default) */
    const char *kv_cache_dir; /* directory of the disk tier (NULL: off) */
    size_t kv_cache_disk;     /* bytes of the disk tier's files */
} kvi_engine_params;

void kvi_engine_params_default(kvi_engine_params *p);
kvi_engine *kvi_engine_create(kvi_model *m, const kvi_engine_params *p, kvi_error *err);
void kvi_engine_free(kvi_engine *e);
const kvi_model *kvi_engine_model(const kvi_engine *e);
int kvi_engine_n_ctx(const kvi_engine *e);
/* Runs fn(ctx, ith, nth) once on each of the engine's nth worker threads
 * (ith = 0 .. nth-1) and returns when all are done. For per-row work between
 * kvi_step calls (the scheduler's sampling), never during one. */
void kvi_engine_parallel_for(kvi_engine *e, void (*fn)(void *ctx, int ith, int nth), void *ctx);

/* An empty sequence; it holds no KV memory until rows are run for it. NULL when
 * n_seq_max sequences already exist. */
kvi_seq *kvi_seq_create(kvi_engine *e);
void kvi_seq_free(kvi_seq *s);         /* returns its blocks to the pool */
int32_t kvi_seq_len(const kvi_seq *s); /* positions held in the cache */
/* Forgets positions >= n (rollback); their blocks return to the pool.
 * KVI_E_INVALID when n < 0, or when 0 < n and sliding-window layers have released
 * what position n would need (they keep their window plus 64 positions). */
int kvi_seq_truncate(kvi_seq *s, int32_t n);

/* ---- LoRA adapters (llama.cpp's GGUF adapter format) ----
 * An adapter adds s * B (A x) to the product of each matrix it adapts (attention,
 * FFN, experts), s = scale * alpha / rank (scale alone when the file's alpha is 0
 * or absent). Adapters are loaded on a model and chosen per sequence: rows of
 * sequences with different adapter sets share one kvi_step, each row computed with
 * its own set (a row gives the same bits alone or in any batch). */
typedef struct kvi_lora kvi_lora;
#define KVI_LORA_SET_MAX 8 /* adapters one sequence uses at once */
/* Loads the adapter at path, checked against m (architecture, every shape; the
 * error names the tensor at fault). NULL on error. m must outlive it. */
kvi_lora *kvi_lora_load(const kvi_model *m, const char *path, kvi_error *err);
/* Frees a; 0, or KVI_E_INVALID (nothing freed) while a sequence's set holds it. */
int kvi_lora_free(kvi_lora *a);
/* The file an adapter was loaded from; its rank (the largest of its pairs) and alpha. */
const char *kvi_lora_path(const kvi_lora *a);
/* Its name: the one set (kvi_lora_set_name), else the file name without folders
 * and ".gguf". Names are up to 127 bytes of printable ASCII other than '/' and '='. */
const char *kvi_lora_name(const kvi_lora *a);
int kvi_lora_set_name(kvi_lora *a, const char *name); /* 0 or KVI_E_INVALID (unchanged) */
int kvi_lora_rank(const kvi_lora *a);
float kvi_lora_alpha(const kvi_lora *a);
/* Sets s's adapters for its next rows: ad[i] with user scale scales[i], i < n <=
 * KVI_LORA_SET_MAX (n 0: none; adapters with scale 0 are left out); each adapter
 * of the engine's model. The cache already holds K/V of the old set: change it on
 * an empty sequence (or truncate). 0, or KVI_E_INVALID (nothing changed). */
int kvi_seq_set_lora(kvi_seq *s, int n, kvi_lora *const *ad, const float *scales);
/* A hash of s's adapter set (0: none); the prefix cache keys s's blocks by it. */
uint64_t kvi_seq_lora_hash(const kvi_seq *s);
/* Adapters an engine owns (freed with it), numbered 0, 1, ... in load order, each
 * with a scale that sequences created afterwards start with (0: off).
 * kvi_engine_lora_load returns the new id, or a negative code (err says why). */
#define KVI_ENGINE_LORA_MAX 64
int kvi_engine_lora_load(kvi_engine *e, const char *path, float scale, kvi_error *err);
/* The same with a name (kvi_lora_set_name's rules; NULL: the file's), refused
 * (KVI_E_INVALID) when a loaded adapter has it. Loading, unloading, describing and
 * reading the count, adapters and scales may happen on any thread while another
 * steps the engine (a server's hot load and unload). */
int kvi_engine_lora_load_named(kvi_engine *e, const char *name, const char *path, float scale, kvi_error *err);
/* Ids issued so far (unloaded ones included: ids are never reused). */
int kvi_engine_lora_count(const kvi_engine *e);
kvi_lora *kvi_engine_lora_get(const kvi_engine *e, int id); /* NULL: no such id, or unloaded */
/* Unloads adapter id: no sequence created or set afterwards may use it (its scale
 * 0; kvi_seq_set_lora_scales naming it fails); sequences holding it keep it until
 * they drop it, and kvi_engine_lora_reap, on the thread that steps the engine, frees
 * it then (it returns how many it freed). 0, or KVI_E_INVALID (no such live id). */
int kvi_engine_lora_unload(kvi_engine *e, int id);
int kvi_engine_lora_reap(kvi_engine *e);
/* Copies live adapter id's name, path and scale (any may be NULL); KVI_E_INVALID
 * when id is not a live adapter. */
int kvi_engine_lora_describe(kvi_engine *e, int id, char *name, size_t name_cap, char *path, size_t path_cap,
                             float *scale);
float kvi_engine_lora_scale(const kvi_engine *e, int id);
int kvi_engine_lora_set_scale(kvi_engine *e, int id, float scale); /* 0 or KVI_E_INVALID */
/* s's set from the engine's adapters: scales[id] for id < n (the others 0);
 * kvi_seq_set_lora's rules. */
int kvi_seq_set_lora_scales(kvi_seq *s, int n, const float *scales);

kvi_batch *kvi_batch_create(int32_t n_rows_max);
void kvi_batch_free(kvi_batch *b);
void kvi_batch_clear(kvi_batch *b);
int32_t kvi_batch_n_rows(const kvi_batch *b);
/* Appends a row. Rows of one sequence must have consecutive positions, in order,
 * starting at most at kvi_seq_len(s). Returns the row index, or KVI_E_INVALID
 * when the batch is full. */
int kvi_batch_add(kvi_batch *b, kvi_seq *s, int32_t token, int32_t pos, bool want_logits);

/* One forward pass over all rows of the batch: 0, or KVI_E_NO_KV_SPACE,
 * KVI_E_BAD_BATCH, KVI_E_CONTEXT_FULL ... On error no sequence is changed. */
int kvi_step(kvi_engine *e, kvi_batch *b, kvi_error *err);
/* Pipelined steps. kvi_step is kvi_step_launch then kvi_step_finish. On the
 * root of a pipeline over processes, launch returns once the root's own layers
 * have run (the later stages go on with the batch) and finish waits for its
 * logits, so the root runs its part of the next batches while the later stages
 * run the earlier ones; kvi_step_depth is how many launched steps keep every
 * stage busy (the stages, at most KVI_STEP_DEPTH_MAX). Elsewhere launch runs the
 * whole pass and the depth is 1 (more may still be in flight, up to
 * KVI_STEP_DEPTH_MAX, to no gain). A launched step's KV changes are done at
 * launch (its sequences' lengths include its rows; a failed finish fails the
 * pipeline). Steps finish in launch order; kvi_logits then reads the finished
 * step's rows, until the next finish. b may be reused once launch returns.
 * kvi_step refuses while launched steps are not finished. */
#define KVI_STEP_DEPTH_MAX 4
int kvi_step_depth(const kvi_engine *e);
int kvi_step_launch(kvi_engine *e, kvi_batch *b, kvi_error *err);
int kvi_step_finish(kvi_engine *e, kvi_error *err);
/* Logits (n_vocab floats) of batch row `row` after kvi_step (or the last
 * kvi_step_finish); NULL when the row was added without want_logits. Valid until
 * the next kvi_step or kvi_step_finish. */
const float *kvi_logits(const kvi_engine *e, int32_t row);

/* One tier of the prefix cache (kvi_engine_params kv_cache_ram / kv_cache_dir). */
typedef struct kvi_tier_stats {
    size_t bytes, bytes_max;          /* held (RAM: block bytes; disk: file bytes) and the bound */
    int64_t blocks;                   /* blocks held */
    uint64_t hits, misses;            /* blocks a prefix match loaded from it / looked for in vain */
    uint64_t evictions;               /* blocks pushed out by the bound (RAM: to disk) */
    uint64_t load_bytes, store_bytes; /* bytes read from it / written into it */
    uint64_t dropped;                 /* disk: damaged, foreign-sized or torn files deleted */
} kvi_tier_stats;

typedef struct kvi_stats {
    /* KV cache (for a sequence: its blocks; for the pool: all blocks) */
    size_t kv_bytes;           /* bytes of the blocks held */
    size_t kv_bytes_allocated; /* pool: bytes allocated from the system */
    size_t kv_bytes_budget;    /* pool: upper bound */
    size_t kv_bytes_per_token; /* for the engine's K and V types */
    int32_t kv_blocks_used;
    int32_t kv_blocks_total; /* pool: blocks the budget allows */
    int32_t kv_block_size;
    int32_t n_tokens; /* sequence: its length; pool: positions held */
    /* forward passes */
    uint64_t n_steps;
    uint64_t n_rows;
    double forward_ms; /* wall time inside kvi_step */
    /* sharing, prefix cache, eviction. For a sequence: its own
     * figures; for the pool: totals. Invariant: kv_bytes_allocated ==
     * (kv_blocks_used + kv_blocks_cached + kv_blocks_free) * block bytes. */
    int32_t kv_blocks_shared;    /* held blocks with more than one holder */
    int32_t kv_blocks_cached;    /* pool: unheld blocks kept in the prefix LRU */
    int32_t kv_blocks_free;      /* pool: allocated blocks on the free list */
    size_t kv_bytes_block;       /* bytes of one block */
    uint64_t prefix_hit_tokens;  /* prompt positions taken from the prefix cache */
    uint64_t prefix_miss_tokens; /* prompt positions that had to be computed */
    uint64_t n_evicted;          /* positions dropped by the context policy */
    uint64_t n_cow;              /* pool: blocks copied before a write (copy on write) */
    uint64_t n_lru_evicted;      /* pool: cached blocks reused for new data */
    /* q4 keys: the f16 tail of the newest key group that each
     * sequence holds outside the pool (sequence: its own; pool: every tail).
     * Every KV byte allocated = kv_bytes_allocated + kv_bytes_tail. */
    size_t kv_bytes_tail;
    /* layer kinds: global layers keep every position; sliding-window layers keep
     * a block's K/V only until the sequence is past it by the window + 64
     * positions (then its window part is released). kv_bytes_per_token ==
     * kv_bytes_per_token_global + kv_bytes_per_token_window (row types; q4 keys
     * up to the rounding of a group per block); kv_bytes ==
     * kv_bytes_global + kv_bytes_window. Without window layers the window
     * figures are 0. */
    size_t kv_bytes_per_token_global; /* K + V bytes a token takes in the global layers */
    size_t kv_bytes_per_token_window; /* ... in the window layers (while in the window) */
    int32_t kv_n_layers_window;       /* window layers of the model */
    int32_t kv_window;                /* their largest window (positions), 0: none */
    size_t kv_bytes_global;           /* of kv_bytes: the blocks' global parts */
    size_t kv_bytes_window;           /* of kv_bytes: the window parts held */
    int32_t kv_wparts_held;           /* window parts held (sequence: its blocks from its
                                         release cursor on; pool: parts in use) */
    uint64_t kv_wparts_released;      /* sequence: its blocks whose window part it gave
                                         up; pool: parts given up by tables so far */
    /* recurrent layers (hybrid models: gated DeltaNet): a fixed-size state per
     * sequence instead of K/V, reserved from the budget (kv_bytes_budget holds
     * kv_state_slots of them beside the blocks). Every KV byte allocated =
     * kv_bytes_allocated + kv_bytes_tail + kv_bytes_state. Prefix snapshots of the
     * state live in ordinary blocks (counted in kv_blocks_used). 0 without. */
    int32_t kv_n_layers_recurrent;                      /* recurrent layers of the model */
    size_t kv_bytes_state_seq;                          /* one sequence's state (all recurrent layers) */
    size_t kv_bytes_state;                              /* sequence: its state; pool: all states held */
    int32_t kv_state_slots;                             /* pool: states the budget reserves (n_seq_max) */
    int32_t kv_snapshots;                               /* pool: prefix snapshots held */
    int32_t kv_blocks_snapshot;                         /* pool: blocks they hold */
    uint64_t kv_snapshots_taken, kv_snapshots_restored; /* pool */
    /* DeepSeek V3.2's lightning indexer: a second row per position and layer beside
     * the latent row, inside the blocks (counted in kv_bytes_per_token and the block
     * figures above); its part reported apart. 0 without. */
    size_t kv_bytes_per_token_indexer;
    uint64_t kv_snapshots_evicted;                      /* pool: dropped to give their blocks to new data */
    /* the thread pool on a shared CPU (engine only): parallel runs (matrix
     * products, attention ...), runs the calling thread did alone because the
     * workers were late (another process held their cores), and how often the
     * pool turned to running alone. Same results either way. */
    uint64_t pool_runs_parallel, pool_runs_serial, pool_to_serial;
    /* prefix cache tiers: of prefix_hit_tokens, positions loaded from RAM / disk
     * (sequence: its own; engine: totals); the tiers' figures (engine only) */
    uint64_t prefix_ram_tokens, prefix_disk_tokens;
    kvi_tier_stats kv_tier_ram, kv_tier_disk;
} kvi_stats;

/* Statistics of one sequence (s != NULL) or of the whole engine (s == NULL). */
void kvi_stats_get(const kvi_engine *e, const kvi_seq *s, kvi_stats *out);
/* Writes every cached prefix block (RAM tier and pool) to the disk tier, as
 * kvi_engine_free does; 0 without a disk tier, or a negative code. */
int kvi_engine_kv_flush(kvi_engine *e, kvi_error *err);

/* ---- KV sharing, context policies, sessions -------------- */

/* A new sequence holding every block of s (shared, copy on write): parallel
 * sampling from one prompt. NULL when n_seq_max sequences exist or no memory. */
kvi_seq *kvi_seq_fork(kvi_seq *s);
/* For an empty s about to run tokens[0..n): takes the longest run of whole cached
 * blocks equal to the prompt's start, never all of it (at least the last token is
 * left to compute, so the caller gets logits). Returns the positions now held
 * (the caller continues at that position), or a negative code. 0 when the prefix
 * cache is off. Counts prefix hits and misses. */
int32_t kvi_seq_reuse_prefix(kvi_seq *s, const int32_t *tokens, int32_t n);
/* Makes room for n_needed more positions within n_ctx by the engine's context
 * policy (kvi_step itself never evicts). Returns the positions held afterwards
 * (the next row's position), unchanged when there was room; KVI_E_CONTEXT_FULL
 * ("context_length_exceeded") under policy "error"; KVI_E_NO_KV_SPACE. */
int32_t kvi_seq_make_room(kvi_seq *s, int32_t n_needed, kvi_error *err);
/* The tokens of the cached positions (kvi_seq_len of them; after a policy moved
 * positions, those now held). Valid until the sequence changes. */
const int32_t *kvi_seq_tokens(const kvi_seq *s);
/* Writes s (tokens and KV blocks, with the KV types, block size and model shape)
 * to a versioned binary session file. */
int kvi_seq_save(const kvi_seq *s, const char *path, kvi_error *err);
/* Restores a session file into the empty s; every field is validated (a file of
 * another model, KV type or block size, truncated or corrupted, is refused with
 * KVI_E_FORMAT / KVI_E_INVALID and s stays empty). *shifted (may be NULL) tells
 * whether a context policy had re-assigned its positions. */
int kvi_seq_load(kvi_seq *s, const char *path, bool *shifted, kvi_error *err);

/* ---- sampling ------------------------------------------------------------ */

typedef struct kvi_sampler kvi_sampler;

/* The samplers of a chain, in llama.cpp's order and with its parameters and
 * semantics (common_sampler_init): each field says its default and the value that
 * switches it off. The chain works on every token's (id, logit) of the row;
 * kvi_sampler_accept / kvi_sampler_accept_output record the accepted tokens (the
 * prompt's and the generated ones alike) that the penalties and DRY look back
 * over. */
#define KVI_SAMPLERS_MAX 16 /* letters in kvi_sampler_params.samplers */
typedef struct kvi_sampler_params {
    float temp;            /* <= 0: greedy (default 0.8); 1 with dynatemp off: off */
    int32_t top_k;         /* 0: off (default 40) */
    float top_p;           /* 1: off (default 0.95) */
    float min_p;           /* 0: off (default 0.05) */
    float repeat_penalty;  /* 1: off (default 1.0): l / r when l > 0, else l * r */
    int32_t repeat_last_n; /* accepted tokens the three penalties count over (default 64; 0: off) */
    uint64_t seed;         /* default 0xC0FFEE; the CLI picks a random seed and prints it */
    /* llama.cpp's penalties: logit[t] -= presence * (count[t] > 0) + frequency *
     * count[t], count = occurrences of t among the last repeat_last_n accepted
     * tokens, prompt included. 0: off (default). */
    float presence_penalty;
    float frequency_penalty;
    float typical_p;         /* locally typical sampling; >= 1: off (default 1.0) */
    float top_n_sigma;       /* logits below max - n * stddev dropped; <= 0: off (default -1) */
    float xtc_probability;   /* chance XTC fires per token; <= 0: off (default 0) */
    float xtc_threshold;     /* XTC's probability threshold; > 0.5: off (default 0.1) */
    float dynatemp_range;    /* temperature spans temp +- range by entropy; <= 0: off (default 0) */
    float dynatemp_exponent; /* default 1 */
    int32_t min_keep;        /* least candidates top_p, min_p, typical and XTC keep (default 0) */
    /* mirostat 1 or 2 replaces the whole chain by temperature then mirostat (every
     * other field but seed ignored); 0: off (default). tau: target surprise
     * (default 5), eta: learning rate (default 0.1); mu = 2 tau, updated by each
     * kvi_sampler_accept_output. */
    int32_t mirostat;
    float mirostat_tau;
    float mirostat_eta;
    /* DRY: a token that would extend a repeat of L >= allowed_length tokens of the
     * last penalty_last_n accepted ones loses multiplier * base^(L - allowed_length).
     * multiplier 0 or penalty_last_n 0: off (defaults 0, 1.75, 2, 64; a base below
     * 1 is 1.75). Its sequence breakers: kvi_sampler_set_dry_breakers. */
    float dry_multiplier;
    float dry_base;
    int32_t dry_allowed_length;
    int32_t dry_penalty_last_n;
    /* The chain's order as llama.cpp's one-letter codes: e penalties, d dry,
     * s top_n_sigma, k top_k, y typical, p top_p, m min_p, x xtc, t temperature.
     * "" (the default, all zero) is "edskypmxt"; "-" is no sampler at all (only
     * the final draw over the raw logits). kvi_sampler_order_parse fills it. */
    char samplers[KVI_SAMPLERS_MAX + 1];
} kvi_sampler_params;

void kvi_sampler_params_default(kvi_sampler_params *p);
/* Sets p->samplers from llama.cpp's names (names != NULL: n of them,
 * case-insensitive, with its aliases: top_k / top-k / topk, typ_p / typical_p /
 * typ, top_p / nucleus, temperature / temp, ...) or, names == NULL, from the
 * one-letter codes in codes. Unknown names and letters are skipped (as
 * llama.cpp does) and counted in *n_unknown (may be NULL). KVI_E_INVALID when
 * more than KVI_SAMPLERS_MAX remain. */
int kvi_sampler_order_parse(kvi_sampler_params *p, const char *const *names, int32_t n, const char *codes,
                            int32_t *n_unknown);
kvi_sampler *kvi_sampler_create(const kvi_sampler_params *p, int32_t n_vocab);
void kvi_sampler_free(kvi_sampler *s);
/* DRY's sequence breakers (llama.cpp's dry_sequence_breakers) as token sequences
 * of m's vocabulary: a token whose text (detokenized alone, special tokens as
 * text) contains a breaker breaks alone; one whose text ends with a proper
 * prefix of it breaks when followed by the tokens of the rest (tokenized, at most
 * 20). Each string is cut at 40 bytes; empty ones are skipped. breakers NULL:
 * llama.cpp's defaults "\n", ":", "\"", "*"; n 0: none. Replaces the earlier
 * set; without a call DRY has no breakers. */
int kvi_sampler_set_dry_breakers(kvi_sampler *s, const kvi_model *m, const char *const *breakers, int32_t n,
                                 kvi_error *err);
/* The breakers set: for i < the count returned, head token *head and its tail
 * (*n_tail tokens, 0: the head alone breaks) written to tail[0 .. min(*n_tail,
 * cap)). With i out of range only the count is returned. */
int32_t kvi_sampler_dry_breaker(const kvi_sampler *s, int32_t i, int32_t *head, int32_t *tail, int32_t cap,
                                int32_t *n_tail);
/* The chain's samplers in order with llama.cpp's names (penalties, dry,
 * top-n-sigma, top-k, typical, top-p, min-p, xtc, temp-ext, temp, mirostat,
 * mirostat-v2, dist), a "?" before those whose parameters switch them off,
 * separated by single spaces, into buf (terminated when cap > 0). Returns the
 * length needed. */
int32_t kvi_sampler_chain_names(const kvi_sampler *s, char *buf, size_t cap);
/* Picks a token from logits (n_vocab floats; not modified). */
int32_t kvi_sampler_sample(kvi_sampler *s, const float *logits);
/* The candidates with a finite logit after the whole chain of the last
 * kvi_sampler_sample or kvi_sampler_probs (with XTC's coin, probs' last run is
 * the one where it did not fire): ids and the probabilities the draw used, in
 * the chain's array order, at most cap written. Returns their number. */
int32_t kvi_sampler_last_candidates(const kvi_sampler *s, int32_t *ids, float *p, int32_t cap);
/* Records a token of the sequence (prompt or generated) for the penalties and DRY. */
void kvi_sampler_accept(kvi_sampler *s, int32_t token);
/* Records a generated token: kvi_sampler_accept, and advances the grammar and
 * mirostat's mu, with the probability the last kvi_sampler_sample or
 * kvi_sampler_probs of this sampler gave token. */
void kvi_sampler_accept_output(kvi_sampler *s, int32_t token);
/* Whether the chain has state that a replay of probabilities cannot follow
 * (mirostat's mu, DRY's history, XTC's coin): speculative verification then
 * cannot stay lossless. */
bool kvi_sampler_params_stateful(const kvi_sampler_params *p);

/* ---- constrained decoding (src/sampling/grammar_*.c, json_schema.c) ---- */

/* A grammar in llama.cpp's GBNF: rules `name ::= alternatives`, `|`, sequences,
 * ( ), * + ? {m} {m,} {m,n}, "literals" with escapes, [a-z] [^...] classes, `.`,
 * # comments; generation starts at the rule `root`. Immutable once parsed, so one
 * grammar may serve many matchers on many threads. */
typedef struct kvi_grammar kvi_grammar;
/* The byte strings of a model's tokens as a trie, built once per model. */
typedef struct kvi_grammar_vocab kvi_grammar_vocab;
/* Where one output stands in a grammar (one per request; not thread-safe). */
typedef struct kvi_grammar_matcher kvi_grammar_matcher;

/* Parses GBNF text (untrusted: bounded sizes and depth). NULL with err set
 * (KVI_E_INVALID, "grammar: line L, column C: ...") on any error: syntax, an
 * undefined or left-recursive rule, no `root`. */
kvi_grammar *kvi_grammar_parse(const char *text, size_t len, kvi_error *err);
void kvi_grammar_free(kvi_grammar *g);
/* Tokens whose piece is empty (control tokens) are never allowed; end-of-generation
 * tokens (kvi_token_is_eog) are allowed exactly where the grammar is complete. */
kvi_grammar_vocab *kvi_grammar_vocab_create(const kvi_model *m, kvi_error *err);
void kvi_grammar_vocab_free(kvi_grammar_vocab *v);
/* g and v must outlive the matcher. */
kvi_grammar_matcher *kvi_grammar_matcher_create(const kvi_grammar *g, const kvi_grammar_vocab *v,
                                                kvi_error *err);
void kvi_grammar_matcher_free(kvi_grammar_matcher *m);
/* Consumes bytes (a token's piece, or any text). 0, or KVI_E_INVALID when the
 * grammar rejects them (the state is then unchanged). */
int kvi_grammar_matcher_accept_bytes(kvi_grammar_matcher *m, const char *s, size_t n);
/* Consumes a token's bytes; an end-of-generation token is accepted only where the
 * grammar is complete and changes nothing. */
int kvi_grammar_matcher_accept_token(kvi_grammar_matcher *m, int32_t token);
/* The output so far is a complete sentence of the grammar. */
bool kvi_grammar_matcher_can_end(const kvi_grammar_matcher *m);
/* The tokens that may come next: bit t of bits[t / 32] (bits holds (n_vocab + 31)
 * / 32 words). Returns how many are allowed (0: none can continue), or < 0. */
int32_t kvi_grammar_matcher_mask(kvi_grammar_matcher *m, uint32_t *bits);

/* JSON Schema (draft 2020-12 subset: type, properties, required,
 * additionalProperties, enum, const, anyOf/oneOf, items/prefixItems,
 * minItems/maxItems, minLength/maxLength, $ref to #/$defs|definitions, string
 * formats date, time, date-time, uuid, email) as GBNF text (malloc'd, NUL-ended).
 * schema NULL means any JSON object (response_format json_object). Any keyword it
 * cannot enforce is an error naming it (KVI_E_INVALID), never ignored. */
char *kvi_json_schema_to_gbnf(const char *schema, size_t len, kvi_error *err);

/* Logit bias and a grammar on a sampler. The bias (OpenAI logit_bias: added to
 * the raw logit of each id, -100 .. 100 or -inf) is copied; the sampler owns the matcher
 * from then on (NULL: none): kvi_sampler_sample then draws only among the tokens
 * it allows (KVI_E_INVALID when there are none), and kvi_sampler_accept_output
 * advances it. */
int kvi_sampler_set_logit_bias(kvi_sampler *s, const int32_t *ids, const float *bias, int32_t n);
int kvi_sampler_set_grammar(kvi_sampler *s, kvi_grammar_matcher *m);

/* ---- scheduler: continuous batching over one engine ------ */

typedef struct kvi_sched kvi_sched;

typedef struct kvi_sched_params {
    int n_parallel;   /* sequences running at once (default 16; <= the engine's n_seq_max) */
    int queue_max;    /* requests waiting beyond those; past it submit fails (default 256) */
    int batch_tokens; /* rows per step: decode rows first, then prefill chunks (default 512) */
    /* Batches in flight at once (kvi_step_launch), one per lane: 0, the default,
     * takes the engine's kvi_step_depth (a pipeline's root: one per stage, so
     * every stage has work; elsewhere 1); 1 runs one step at a time; at most
     * KVI_STEP_DEPTH_MAX. Each running request belongs to one lane, whose batch
     * holds only its rows; with speculative decoding there is one lane. */
    int n_lanes;
    /* Called on the engine thread at the end of every step (kvi_sched_start's
     * thread, or kvi_sched_step's caller), never beside a step, with the number
     * of requests still alive (0: the scheduler goes idle): where the owner may
     * drive the engine's own transport (a pipeline's per-stage figures).
     * Default NULL. */
    void (*after_step)(void *user, kvi_engine *e, int n_alive);
    void *after_step_user;
} kvi_sched_params;

typedef enum kvi_finish {
    KVI_FINISH_STOP = 0,      /* end-of-generation token, or on_token returned false */
    KVI_FINISH_LENGTH = 1,    /* max_tokens reached or the context is full */
    KVI_FINISH_CANCELLED = 2, /* kvi_sched_cancel() or the scheduler was freed */
    KVI_FINISH_ERROR = 3,     /* the request could not run (error in on_done's err) */
} kvi_finish;

/* The cost of one request, delivered with on_done. */
typedef struct kvi_usage {
    int32_t prompt_tokens, completion_tokens;
    int32_t cached_tokens;  /* prompt tokens served from the prefix cache */
    int32_t cached_ram_tokens, cached_disk_tokens; /* of cached_tokens: loaded from the RAM / disk tier */
    int32_t n_preempted;    /* times its blocks were freed and recomputed later */
    double queue_ms;        /* submit to admission */
    double prefill_ms;      /* start of its first prefill chunk to its first token */
    double ttft_ms;         /* submit to first token */
    double decode_ms;       /* first token to last token */
    size_t kv_bytes;        /* KV bytes the sequence held at the end */
    size_t kv_bytes_window; /* of kv_bytes: its sliding-window layers' parts (bounded by the window) */
    /* speculative decoding (kvi_sched_set_spec): draft tokens
     * verified for this request and how many of them were accepted */
    int32_t spec_drafted, spec_accepted;
    int32_t positions_dropped; /* by the context policy (kvi_request.ctx_evict) */
} kvi_usage;

/* Both run on the scheduler's thread (the engine thread), never concurrently for
 * one request. on_token: one call per generated token (an end-of-generation token
 * is not delivered); return false to finish with KVI_FINISH_STOP (stop strings).
 * on_done: exactly once per accepted request, last; err is non-NULL only for
 * KVI_FINISH_ERROR. The request's memory is the caller's again after on_done. */
typedef bool (*kvi_token_fn)(void *user, int32_t token);
typedef void (*kvi_done_fn)(void *user, kvi_finish finish, const kvi_usage *u, const kvi_error *err);

/* Log-probabilities. The log-softmax of the RAW logits of the
 * position a token was sampled from (before penalties, temperature, top-k/p and
 * min-p, as OpenAI's API reports them): the sampled token's own value and the
 * n_top most likely tokens in descending order (ties: lower id first). */
#define KVI_LOGPROBS_MAX 20
typedef void (*kvi_logprobs_fn)(void *user, int32_t token, float logprob, const int32_t *top_ids,
                                const float *top_logprobs, int32_t n_top);
/* Computes those for logits[0..n_vocab): *token_lp (may be NULL) for `token`, and
 * the min(k, n_vocab) best into top_ids/top_lps (k <= KVI_LOGPROBS_MAX). Returns
 * how many were written, or KVI_E_INVALID. */
int32_t kvi_logprobs_top(const float *logits, int32_t n_vocab, int32_t token, int32_t k, float *token_lp,
                         int32_t *top_ids, float *top_lps);

typedef struct kvi_request {
    const int32_t *prompt; /* copied at submit */
    int32_t n_prompt;
    kvi_sampler_params sampling;
    int32_t max_tokens; /* <= 0: until end of generation or a full context */
    bool ignore_eos;
    kvi_token_fn on_token;
    kvi_done_fn on_done;
    void *user;
    /* logprobs: when on_logprobs is set, it is called on the
     * engine thread just before on_token, for the same token, with top_logprobs
     * (0 .. KVI_LOGPROBS_MAX) alternatives; computed only for such requests. */
    kvi_logprobs_fn on_logprobs;
    int32_t top_logprobs;
    bool no_spec; /* (spec2) never speculate for this request, even when enabled */
    /* constrained decoding: every generated token keeps the output a prefix of
     * the grammar's language, end of generation only where it is complete (NULL:
     * none). Must stay valid until on_done. Never speculated. */
    const kvi_grammar *grammar;
    /* the vocabulary the grammar's masks are computed over (NULL: the model's,
     * built at the first grammar; a tool-call grammar may need
     * kvi_grammar_vocab_create_markers'). Must outlive the scheduler's use. */
    const kvi_grammar_vocab *grammar_vocab;
    /* OpenAI logit_bias: bias_vals[i] added to the logit of bias_ids[i]
     * (-100 .. 100, or -inf: never sampled; ids < n_vocab); copied at submit. */
    const int32_t *bias_ids;
    const float *bias_vals;
    int32_t n_bias;
    /* DRY's sequence breakers (kvi_sampler_set_dry_breakers; NULL: llama.cpp's
     * defaults), used when sampling turns DRY on. Valid until on_done. */
    const char *const *dry_breakers;
    int32_t n_dry_breakers;
    /* LoRA: the scale of each of the engine's adapters by id (kvi_engine_lora_*),
     * ids >= n_lora_scales at 0; copied at submit. NULL: the engine's scales. */
    const float *lora_scales;
    int32_t n_lora_scales;
    /* at the context's end, room is made by the engine's context policy
     * (kvi_seq_make_room) instead of finishing; a prompt may then be longer than
     * the context. Never speculated. */
    bool ctx_evict;
} kvi_request;

typedef struct kvi_sched_stats {
    int n_running, n_waiting;
    uint64_t n_steps, n_prefill_tokens, n_decode_tokens, n_preemptions;
    uint64_t n_prompt_tokens, n_cached_tokens; /* prefix cache hit ratio = cached / prompt */
    uint64_t n_done, n_rejected;
    kvi_stats engine; /* snapshot of kvi_stats_get(e, NULL) after the last step */
    /* speculative decoding: draft tokens verified / accepted over
     * all requests, and the cost of one more verified row at the current load in
     * units of the step's average row (what kvi_spec_set_costs gets as cost_row) */
    uint64_t n_spec_drafted, n_spec_accepted;
    double spec_cost_row;
} kvi_sched_stats;

void kvi_sched_params_default(kvi_sched_params *p);
/* kvi_engine_expert_counts as of the last step (thread-safe): rows routed to each
 * expert, [n_layers][n_expert], into out (at most cap), the model's n_expert into
 * *n_expert (when not NULL); returns n_layers * n_expert, 0 for a dense model. */
int kvi_sched_expert_counts(kvi_sched *s, uint64_t *out, size_t cap, int *n_expert);
/* The scheduler drives e exclusively from then on (one thread at a time). */
kvi_sched *kvi_sched_create(kvi_engine *e, const kvi_sched_params *p, kvi_error *err);
/* Stops the thread; requests still alive get on_done(KVI_FINISH_CANCELLED). */
void kvi_sched_free(kvi_sched *s);
/* Queues a request (thread-safe). 0 with *id set, or KVI_E_INVALID (bad ids),
 * KVI_E_CONTEXT_FULL (context_length_exceeded), KVI_E_NO_KV_SPACE (can never fit
 * the KV budget), KVI_E_QUEUE_FULL; on error no callback is ever called. */
int kvi_sched_submit(kvi_sched *s, const kvi_request *r, uint64_t *id, kvi_error *err);
/* Thread-safe; the request's sequence is freed at the start of the next step. */
void kvi_sched_cancel(kvi_sched *s, uint64_t id);
/* One step on the calling thread (when no thread was started): admission, one
 * forward pass, sampling, callbacks. Returns the number of requests still alive,
 * or a negative code. */
int kvi_sched_step(kvi_sched *s, kvi_error *err);
/* Runs steps on an engine thread of its own until kvi_sched_free. */
int kvi_sched_start(kvi_sched *s, kvi_error *err);
void kvi_sched_stats_get(kvi_sched *s, kvi_sched_stats *out);

/* ---- KV view of the running requests (the web page) ------ */

/* Physical block ids of s's KV table in logical order (position p lives in block
 * ids[p / block_size]). Returns the table's length; writes min(that, cap). */
int32_t kvi_seq_block_ids(const kvi_seq *s, int32_t *ids, int32_t cap);

typedef struct kvi_sched_seq_view {
    uint64_t id;           /* kvi_sched_submit's id */
    int32_t n_prompt;      /* prompt tokens */
    int32_t n_tokens;      /* prompt + generated so far */
    int32_t n_kv;          /* positions held in the KV cache */
    int32_t n_blocks;      /* length of its block table */
    int32_t n_shown;       /* entries of it copied into the caller's ids (<= n_blocks) */
    const int32_t *blocks; /* [n_shown] into the caller's ids buffer */
} kvi_sched_seq_view;

/* The block tables of the requests running after the last step (a snapshot the
 * engine thread takes each step; thread-safe). Fills up to max_views views and
 * up to cap_ids ids; returns the number of running requests. A block id in two
 * tables is shared (prefix cache or parallel choices). */
int kvi_sched_kv_view(kvi_sched *s, kvi_sched_seq_view *views, int max_views, int32_t *ids, int32_t cap_ids);

/* ---- chat templates (src/tokenizer/chat_template.c) ----------------- */

typedef struct kvi_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* plain text: never parsed for special tokens */
} kvi_chat_msg;

/* The template family of the model's tokenizer.chat_template, detected by
 * substrings: "llama2", "llama3", "chatml", "phi3", "gemma", "mistral", or
 * "fallback" (no or unknown template: chatml-shaped markers, as special tokens
 * when the vocabulary has them, else as plain text). */
const char *kvi_chat_family(const kvi_model *m);
/* Token ids of messages[0..n) in the model's chat format (BOS as the model says,
 * markers as special-token ids, message text tokenized with parse_special off),
 * followed by the assistant's opening when add_assistant. Returns the number of
 * ids (may exceed n_max: then only n_max were written), or a negative code. */
int32_t kvi_chat_apply(const kvi_model *m, const kvi_chat_msg *msgs, int n, bool add_assistant, int32_t *out,
                       int32_t n_max, kvi_error *err);
/* The same for a given family, and the family a template text belongs to (tests,
 * and models whose template kvinfer should not trust). */
int32_t kvi_chat_apply_family(const kvi_model *m, const char *family, const kvi_chat_msg *msgs, int n,
                              bool add_assistant, int32_t *out, int32_t n_max, kvi_error *err);
const char *kvi_chat_family_of(const char *template_text);

/* ---- Jinja chat templates (src/template/) ------------------------------ */

/* A chat template as models ship it (tokenizer.chat_template), parsed once;
 * read-only afterwards (renders may run on any threads). */
typedef struct kvi_chat_template kvi_chat_template;

/* Parses a Jinja template; NULL with err filled on a syntax error. */
kvi_chat_template *kvi_chat_template_parse(const char *text, size_t len, kvi_error *err);
void kvi_chat_template_free(kvi_chat_template *t);
/* Renders t as Hugging Face transformers does (jinja2, trim_blocks,
 * lstrip_blocks) for an OpenAI-style chat body (JSON text): variables messages
 * (function.arguments given as JSON strings parsed into objects), tools (none
 * when absent), add_generation_prompt (true when absent), each key of
 * chat_template_kwargs, and bos_token / eos_token (undefined when NULL). With
 * "continue_final_message": true (vLLM's field) the prompt ends right after the
 * final message's text, as transformers cuts it (add_generation_prompt then
 * false when absent; both true is an error).
 * Returns the prompt (malloc'd, NUL-terminated) or NULL with err filled: a bad
 * body, a template error (raise_exception, a type error ...) or an exhausted
 * limit (steps, output size, memory, recursion). */
char *kvi_chat_template_render(const kvi_chat_template *t, const char *request_json, const char *bos_token,
                               const char *eos_token, kvi_error *err);
/* The form of a message's content the template is given, as vLLM's
 * --chat-template-content-format: OPENAI, the list of parts as the body has it;
 * STRING, a list of parts joined into one string (text parts, "\n" between
 * them; a part of another type is a render error). A string content stays a
 * string either way. AUTO (the default) is what the template expects: OPENAI
 * when some loop iterates a message's content, as vLLM detects it, else STRING. */
typedef enum kvi_content_format {
    KVI_CONTENT_AUTO,
    KVI_CONTENT_STRING,
    KVI_CONTENT_OPENAI
} kvi_content_format;
/* Sets the form (before any render: a template is read-only while rendered). */
void kvi_chat_template_set_content_format(kvi_chat_template *t, kvi_content_format f);
/* The form in force: the one set, or the detected one (never AUTO). */
kvi_content_format kvi_chat_template_content_format(const kvi_chat_template *t);
/* "auto", "string" or "openai" to the enum; -1 for another name. */
int kvi_content_format_parse(const char *name);
/* The model's tokenizer.chat_template (GGUF metadata or tokenizer_config.json),
 * NULL when it ships none. */
const char *kvi_model_chat_template(const kvi_model *m);

/* ---- tool calls and reasoning in model output (src/template/chat_output.c,
 *      src/sampling/tool_grammar.c) --------------------------------------- */

/* How a chat template's model writes tool calls (the wire form its template
 * renders an assistant message's tool_calls into). */
typedef enum kvi_tool_format {
    KVI_TOOLS_NONE = 0,    /* the template renders no tool calls */
    KVI_TOOLS_HERMES,      /* <tool_call>{"name": N, "arguments": {...}}</tool_call> (Hermes, Qwen2.5, Qwen3) */
    KVI_TOOLS_QWEN3_CODER, /* <tool_call><function=N><parameter=P>V</parameter></function></tool_call> */
    KVI_TOOLS_LLAMA3,      /* {"name": N, "parameters": {...}} as the whole message (Llama 3.1/3.2) */
    KVI_TOOLS_MISTRAL,     /* [TOOL_CALLS][{"name": N, "arguments": {...}, "id": I}, ...] (Nemo) */
    KVI_TOOLS_MISTRAL_ARGS, /* [TOOL_CALLS]N[ARGS]{...} per call (Mistral Small 3.2) */
    KVI_TOOLS_HARMONY,     /* gpt-oss: <|channel|>commentary to=functions.N ... <|message|>{...}<|call|> */
    KVI_TOOLS_DEEPSEEK_R1, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>... */
    KVI_TOOLS_DEEPSEEK_V31, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>... */
    KVI_TOOLS_GRANITE,     /* <|tool_call|>[{"name": N, "arguments": {...}}, ...] (Granite 3.3) */
    KVI_TOOLS_COMMAND_R,   /* <|START_ACTION|>[{"tool_call_id": I, "tool_name": N, "parameters": {...}}]<|END_ACTION|> */
    KVI_TOOLS_KIMI_K2,     /* <|tool_calls_section_begin|><|tool_call_begin|>functions.N:K<|tool_call_argument_begin|>{...}<|tool_call_end|>... */
    KVI_TOOLS_GLM,         /* <tool_call>N<arg_key>P</arg_key><arg_value>V</arg_value>...</tool_call> (GLM 4.5-4.7) */
    KVI_TOOLS_COUNT_
} kvi_tool_format;

/* The format a chat template writes tool calls in (KVI_TOOLS_NONE when it
 * renders none or kvinfer does not know its form), its name ("hermes",
 * "qwen3-coder", ...; "none"), and whether the template's model reasons in
 * <think> ... </think> before answering (DeepSeek R1, Qwen3, GLM ...). */
kvi_tool_format kvi_tool_format_of(const char *template_text);
const char *kvi_tool_format_name(kvi_tool_format f);
bool kvi_template_reasons(const char *template_text);
/* Whether a special token's text is one of the format's markers (or, with
 * reasoning, <think> / </think>): such tokens are output text to the parser
 * and to tool-call grammars, while other control tokens stay hidden. */
bool kvi_tool_format_marker(kvi_tool_format f, bool reasoning, const char *special_text);

/* A parser of one generated assistant message: splits the text as it streams
 * into reasoning, content and tool calls. Same result however the text is
 * split between kvi_chat_output_feed calls. Content, reasoning and calls are
 * append-only (what was returned once never changes), so a server streams
 * deltas of them. Text the parser cannot yet classify (a possible start of a
 * marker) is held back until it can. */
typedef struct kvi_chat_output_params {
    kvi_tool_format tools; /* KVI_TOOLS_NONE: no calls are parsed, all text is content */
    bool reasoning;        /* split <think> ... </think> into reasoning */
    bool in_reasoning;     /* the prompt already opened <think>: output starts in it */
} kvi_chat_output_params;

typedef struct kvi_chat_output kvi_chat_output;

kvi_chat_output *kvi_chat_output_create(const kvi_chat_output_params *p);
void kvi_chat_output_free(kvi_chat_output *o);
/* Feeds n bytes of output text (special tokens as their text). 0, or
 * KVI_E_NOMEM (the bytes were not taken and nothing changed: feed them again),
 * or KVI_E_INVALID after kvi_chat_output_finish. */
int kvi_chat_output_feed(kvi_chat_output *o, const char *text, size_t n);
/* The end of the message: held-back text is settled (an unfinished or invalid
 * call becomes content verbatim). 0, or KVI_E_NOMEM (nothing changed: call it
 * again). */
int kvi_chat_output_finish(kvi_chat_output *o);
/* Content and reasoning so far (not NUL-terminated; n bytes). */
const char *kvi_chat_output_content(const kvi_chat_output *o, size_t *n);
const char *kvi_chat_output_reasoning(const kvi_chat_output *o, size_t *n);
/* Complete tool calls so far, and call i: its name and its arguments as compact
 * JSON object text (both NUL-terminated, owned by o). 0, or KVI_E_INVALID. */
int kvi_chat_output_n_calls(const kvi_chat_output *o);
int kvi_chat_output_call(const kvi_chat_output *o, int i, const char **name, const char **arguments);

/* Flags of kvi_tool_call_gbnf. */
#define KVI_TOOL_CALL_PARALLEL 1u /* one or more calls (else exactly one) */
#define KVI_TOOL_CALL_THINK 2u    /* reasoning formats: an optional <think> ... </think> first */
#define KVI_TOOL_CALL_IN_THINK 4u /* reasoning formats: the prompt opened <think>: its rest and
                                     </think> first */

/* A GBNF grammar (malloc'd text) for the output of a forced tool call in format
 * f: tools_json is the request's "tools" array (OpenAI form); name forces that
 * tool (NULL: any of them); flags KVI_TOOL_CALL_*. Each call's arguments follow
 * its tool's "parameters" JSON schema (as kvi_json_schema_to_gbnf). Without a
 * THINK flag the call comes first (a weak model cannot wander off into a
 * reasoning block); Harmony always admits an analysis message first, Command R
 * a thinking block. Formats that write one call per message ignore PARALLEL.
 * NULL with err filled on a bad tools array, an unknown name or an unsupported
 * format (KVI_E_NOMEM when memory ran out). */
char *kvi_tool_call_gbnf(kvi_tool_format f, const char *tools_json, size_t len, const char *name, unsigned flags,
                         kvi_error *err);
/* kvi_grammar_vocab_create, except that control tokens whose text is a marker
 * of f (kvi_tool_format_marker) count as that text, so a tool-call grammar can
 * steer the model onto its own single-token markers. A marker that ends
 * generation (Harmony's <|call|>) is text there, placed by the grammar. */
kvi_grammar_vocab *kvi_grammar_vocab_create_markers(const kvi_model *m, kvi_tool_format f, bool reasoning,
                                                    kvi_error *err);

/* ---- speculative decoding (src/sampling/speculative.c) --------------- */

/* The final distribution kvi_sampler_sample() would draw from for these logits
 * (the whole chain applied): n_vocab floats summing to 1, zero for filtered
 * tokens, one-hot when the outcome is certain (greedy); with XTC's coin
 * (0 < xtc_probability < 1) the mixture of the chain where it fires and where
 * it does not. Changes no state. */
int kvi_sampler_probs(kvi_sampler *s, const float *logits, float *probs_out);
/* Draws a token from non-negative weights (n_vocab floats, any positive sum) with
 * the sampler's generator; argmax (lowest id on ties) when temp <= 0 and dynamic
 * temperature is off. Negative KVI_E_INVALID when no weight is positive. */
int32_t kvi_sampler_sample_probs(kvi_sampler *s, const float *weights);

/* One kvi_spec per sequence. It holds the sequence's token history, proposes
 * draft tokens (n-gram lookup in that history, or a smaller draft model with
 * its own engine and sequence) and judges the target's logits for them with the
 * lossless acceptance rule. Per round, for a target sequence holding positions
 * 0 .. L-1 whose newest token (history[L]) is not yet run:
 *   n = kvi_spec_draft(sp, k_max, drafts, err);          0 .. k_max tokens
 *   rows (history[L], L), (drafts[i], L+1+i) for i < n, want_logits on all,
 *   in any batch (rows of other sequences may share it); kvi_step;
 *   m = kvi_spec_verify(sp, smp, row_logits, n, out, err);   1 .. n+1 tokens
 *   kvi_seq_truncate(target, L + m);   drops the rejected positions
 * out[0 .. m) are the new tokens in order (already given to kvi_sampler_accept
 * and appended to the history; the last one is the newest, not yet run). The
 * draft model's rollback happens inside kvi_spec_verify. With n == 0 a round is
 * a plain decode step. A round with temp 0 yields exactly what plain greedy
 * decoding yields; with sampling, the tokens follow exactly the distribution of
 * kvi_sampler_sample (accept with min(1, p/q), else resample max(0, p - q)). */
typedef struct kvi_spec kvi_spec;

typedef struct kvi_spec_params {
    int32_t draft_max; /* K: most tokens drafted per round (default 8) */
    int32_t draft_min; /* a proposal shorter than this is not verified (default 1) */
    int32_t ngram_max; /* n-gram lookup: longest suffix matched, down to 1 (default 3) */
    bool adapt;        /* shrink K / pause below the break-even acceptance (default true) */
    uint64_t seed;     /* acceptance draws and the draft's sampler (default 0x5EEC) */
} kvi_spec_params;

typedef struct kvi_spec_stats {
    uint64_t n_rounds;      /* kvi_spec_verify calls */
    uint64_t n_spec_rounds; /* ... of which verified at least one draft */
    uint64_t n_drafted;     /* draft tokens verified */
    uint64_t n_accepted;    /* ... of which accepted */
    uint64_t n_generated;   /* tokens returned by kvi_spec_verify */
    double acceptance;      /* n_accepted / n_drafted, 0 when nothing drafted */
    double alpha;           /* recent per-token acceptance estimate (adaptive) */
    int32_t k_now;          /* K the next round may draft; 0 while paused */
    int32_t k_max;          /* draft_max */
    double cost_row;        /* cost of each extra verified row, in 1-row steps */
    double cost_draft;      /* cost of one draft token, in 1-row target steps */
    double break_even;      /* acceptance at which K = draft_max just pays */
    double est_speedup;     /* expected tokens per unit cost at alpha and k_now */
} kvi_spec_stats;

void kvi_spec_params_default(kvi_spec_params *p);
/* Same n_vocab, BOS/EOS and the text of every token; else KVI_E_INVALID naming
 * the first difference. */
int kvi_spec_check_vocab(const kvi_model *target, const kvi_model *draft, kvi_error *err);
/* draft == NULL: n-gram lookup. Otherwise a draft model's engine (vocabulary
 * checked against target; one sequence of it is taken for this kvi_spec). sp: the
 * request's sampling parameters (the draft samples with them, penalty off). */
kvi_spec *kvi_spec_create(const kvi_spec_params *p, const kvi_model *target, kvi_engine *draft,
                          const kvi_sampler_params *sp, kvi_error *err);
void kvi_spec_free(kvi_spec *s);
/* Starts a sequence: its history becomes the prompt (the draft model's sequence
 * is emptied). Then the first token comes from kvi_spec_verify(.., n_draft 0). */
int kvi_spec_begin(kvi_spec *s, const int32_t *prompt, int32_t n, kvi_error *err);
/* Proposes up to min(k_max, the adaptive K) tokens continuing the history. */
int32_t kvi_spec_draft(kvi_spec *s, int32_t k_max, int32_t *drafts, kvi_error *err);
/* logits[i]: the target's logits of the round's row i (i = 0 .. n_draft). */
int32_t kvi_spec_verify(kvi_spec *s, kvi_sampler *smp, const float *const *logits, int32_t n_draft,
                        int32_t *out, kvi_error *err);
/* Costs for the adaptive choice of K, in units of one 1-row target step:
 * verifying 1 + j rows costs 1 + j * cost_row; each draft token costs cost_draft. */
void kvi_spec_set_costs(kvi_spec *s, double cost_row, double cost_draft);
/* Measures those costs by timing target steps of 1 and K+1 rows at the end of seq
 * (and a draft step), each rolled back: seq must hold >= 1 position and have room
 * for K+1 more. Medians of `reps`. The sequence is left as it was. */
int kvi_spec_calibrate(kvi_spec *s, kvi_engine *target, kvi_seq *seq, int reps, kvi_error *err);
void kvi_spec_stats_get(const kvi_spec *s, kvi_spec_stats *out);

/* ---- speculative decoding in the scheduler ---------------- */

/* Every request admitted from now on speculates (unless its no_spec is set or it
 * uses presence/frequency penalties): one kvi_spec per request with parameters p
 * (NULL: defaults), n-gram lookup when draft is NULL, else drafts from the draft
 * engine (vocabulary checked; it needs n_seq_max >= the scheduler's n_parallel;
 * the scheduler drives it from the engine thread only). Call before
 * kvi_sched_start. The cost of extra rows is measured from the scheduler's own
 * step times per row count, so under load speculation backs off by itself. */
int kvi_sched_set_spec(kvi_sched *s, const kvi_spec_params *p, kvi_engine *draft, kvi_error *err);

/* ---- synthetic models (benchmarks and tests) ----------------------------- */

typedef struct kvi_synth_params {
    int dim, ffn_dim, n_layers, n_heads, n_kv_heads, n_vocab, n_ctx;
    kvi_type type; /* type of the matrices (norms stay F32) */
    uint64_t seed;
    const char *vocab_from; /* GGUF whose tokenizer section is copied, a Hugging Face
                               tokenizer.json (byte-level BPE: Llama 3, Qwen) written
                               as one, or NULL */
    const char *name;       /* general.name */
    /* The architecture (NULL or "": llama) and its fields; 0 takes the
     * architecture's default (kvinfer synth --help lists them). */
    const char *arch;      /* llama, qwen2, qwen3, gemma2, gemma3, phi3, granite, olmo2, qwen3moe,
                              olmoe, gpt-oss, qwen35, qwen3next, llama4, gemma4 */
    int head_dim;          /* 0: dim / n_heads (else attention.key_length is written) */
    int n_rot;             /* RoPE dims per head (partial rotary, phi3); 0: head_dim */
    int window;            /* gemma2/3: sliding window of the local layers; phi3: the
                              attention.sliding_window key (llama.cpp ignores it for phi3) */
    int window_pattern;    /* gemma2/3: layer l is local when l % P < P - 1 (llama.cpp
                              assumes 2 for gemma2, 6 for gemma3; another P is written) */
    int tie;               /* 1: no output.weight (logits from token_embd), -1: an output
                              matrix of its own, 0: the architecture's default */
    float rope_base;       /* rope.freq_base */
    float rope_base_local; /* gemma3: the local layers' RoPE base (10000) */
    float rope_linear;     /* gemma3: linear RoPE scaling of the global layers; 0: none */
    int rope_orig_ctx;     /* phi3: LongRoPE factors for an original context of this
                              many positions (< n_ctx); 0: no LongRoPE */
    float rms_eps;
    bool mix_m; /* type q4_k / q5_k as llama.cpp's Q4_K_M / Q5_K_M mix (attn_v, ffn_down
                   of some layers and the output matrix in Q6_K, fused attn_qkv one K
                   type up) */
    /* mixture of experts (llama, qwen3moe, olmoe, gpt-oss): n_expert experts of
     * width expert_ffn (0: ffn_dim) in every layer, n_expert_used chosen per token;
     * 0 experts: a dense FFN (qwen3moe, olmoe and gpt-oss need experts) */
    int n_expert, n_expert_used, expert_ffn;
    /* hybrids (qwen35, qwen3next: gated DeltaNet layers, every attn_interval-th layer
     * attention): key heads, value heads and their dims, conv taps; 0: the defaults
     * (16 / 16 / 128 / 4 / 4); qwen3next's shared expert width shared_ffn (0: ffn_dim) */
    int ssm_groups, ssm_heads, ssm_state, ssm_conv, attn_interval, shared_ffn;
    int ssm_inner; /* Mamba-2 hybrids (granitehybrid, nemotron_h, falcon-h1): d_inner (0: 2 dim) */
    /* llama4: moe_step (0: 1) makes every moe_step-th layer a mixture of experts with
     * a shared expert, the others dense. gemma4: the global layers' head dim and KV
     * heads (0: 2 x head_dim, n_kv_heads; head_dim and n_kv_heads are the sliding
     * layers'), k_eq_v 1: global layers without attn_v (V = K), ple_dim per-layer
     * input width (0: none), the last shared_kv_layers layers reading earlier layers'
     * K/V, their FFN ffn_dim_shared wide (0: ffn_dim) */
    int moe_step, head_dim_global, n_kv_heads_global, k_eq_v, ple_dim, shared_kv_layers, ffn_dim_shared;
    /* kimi-linear: head_dim is the KDA heads' dims, ssm_conv their conv taps, every
     * attn_interval-th layer MLA (0: 4) with a latent of kv_lora_rank, mla_nope key dims
     * without RoPE, n_rot with (used as they are: no RoPE), mla_v_dim value dims per head
     * (0: 512, 128, 64, 128); shared_ffn: the shared expert's width (0: expert_ffn) */
    int kv_lora_rank, mla_nope, mla_v_dim;
    /* Reports, each optional (NULL: silent; the library never prints), called on
     * the caller's thread with user: progress after each tensor's data is written
     * (counts and bytes so far, of the totals); notice for a remark such as a
     * matrix stored in another type than requested (one line, no newline). */
    void (*progress)(void *user, size_t tensors_done, size_t tensors_total, size_t bytes_done,
                     size_t bytes_total);
    void (*notice)(void *user, const char *msg);
    void *user;
} kvi_synth_params;

/* Fills p from a preset ("stories15M", "llama-1b", "qwen3-0.6b", "gemma-3-1b",
 * "phi-4-mini", ...). */
int kvi_synth_preset(const char *name, kvi_synth_params *p);
/* Names of the presets, NULL-terminated. */
const char *const *kvi_synth_preset_names(void);
/* Names of the architectures synth writes, NULL-terminated. */
const char *const *kvi_synth_arch_names(void);
/* p with every 0 field of the architecture resolved to its default (what
 * kvi_synth_write writes); KVI_E_INVALID for an unknown architecture. */
int kvi_synth_resolve(const kvi_synth_params *p, kvi_synth_params *out);
/* Writes a GGUF of p's architecture with random N(0, 0.02) weights, with the keys
 * and tensors llama.cpp's converter writes for it. */
int kvi_synth_write(const kvi_synth_params *p, const char *path, kvi_error *err);

/* ---- measurement: machine limits, model sizes -------------- */

/* Limits of this machine measured by micro-benchmarks on n_threads threads
 * (medians of `reps` runs). A figure is 0 when the CPU lacks the instruction. */
#define KVI_HW_READ_METHODS_MAX 8
typedef struct kvi_hw_read_figure {
    const char *method; /* e.g. "avx512 s4 pf512": streams per thread, prefetch distance */
    double median_gbs;  /* median of the reps runs, 1e9 bytes/s */
    double best_gbs;    /* fastest run */
} kvi_hw_read_figure;

typedef struct kvi_hw_limits {
    int n_threads;
    int reps;
    size_t read_bytes;       /* size of the buffer streamed by the read test */
    double read_gbs;         /* streaming read bandwidth, 1e9 bytes/s: the highest
                               * median over the read methods tried */
    const char *read_method; /* the method that gave read_gbs */
    int n_read_methods;      /* read methods tried (1 when quick) */
    kvi_hw_read_figure read_methods[KVI_HW_READ_METHODS_MAX]; /* [n_read_methods] */
    double fp32_gflops;     /* FP32 FMA (AVX-512 or AVX2 vfmadd), 1e9 FLOP/s */
    double bf16_gflops;     /* AVX512_BF16 vdpbf16ps, 1e9 FLOP/s (a pair product + add = 2) */
    double int8_gops;       /* AVX512_VNNI vpdpbusd, 1e9 OP/s (a u8*s8 product + add = 2) */
    double amx_int8_gops;   /* AMX tdpbssd, 1e9 OP/s (a s8*s8 product + add = 2); 0 when
                               * AMX is off or missing (KVINFER_AMX=0) */
    double amx_bf16_gflops; /* AMX tdpbf16ps, 1e9 FLOP/s (a bf16 product + add = 2); 0 as above */
    bool f16_on_amx;        /* F16 / BF16 weights are multiplied on AMX (KVINFER_AMX_F16=1),
                               * else in FP32 FMA */
    const char *fp32_isa;   /* "avx512", "avx2" or "none" */
} kvi_hw_limits;

/* Measures the limits; quick: a small buffer, one read method and short runs
 * (tests), else a 1 GiB buffer (huge-page hinted, faulted in first) read by every
 * read method in turn, reps rounds, threads pinned to distinct cores, and compute
 * runs of about 0.1 s. n_threads 0: every core. */
int kvi_hw_bench(kvi_hw_limits *out, int n_threads, bool quick, kvi_error *err);

/* Hyper-parameters of a model file without loading its weights: a GGUF's header is
 * parsed from a read-only mapping (tensor data pages are never touched); other
 * formats are loaded. has_weights tells whether the file holds tensors. */
int kvi_model_info_from_file(const char *path, kvi_model_info *out, kvi_error *err);
/* Elements of all weight tensors (the tied output matrix counted once). */
uint64_t kvi_model_n_params(const kvi_model *m);
/* Elements of the matrices one token passes through (every dense layer matrix, the
 * output matrix; in a mixture of experts the router, the shared expert and
 * n_expert_used of the routed experts): the forward pass costs 2 x this many FLOP
 * per token. */
uint64_t kvi_model_matmul_params(const kvi_model *m);
/* Parameters one token reads (its active parameters): kvi_model_matmul_params, the
 * 1-D vectors (the chosen experts' biases only) and one embedding row. Equal to
 * kvi_model_n_params for a dense model with a tied output, near it otherwise. */
uint64_t kvi_model_active_params(const kvi_model *m);
/* Weight bytes one decode step of one sequence reads: every dense layer matrix, the
 * output matrix, the norms and one row of the token embeddings; of a mixture of
 * experts the router, the shared expert and n_expert_used experts' matrices (its
 * active bytes: the decode roofline's bytes, not the file's size). */
size_t kvi_model_decode_bytes(const kvi_model *m);

/* ---- memory accounting -------------------------------------- */

/* Where a process's memory goes. Bound that `kvinfer run` keeps (tests/test_memory):
 * rss_peak_bytes <= model_bytes + kv_bytes + 64 MiB. */
typedef struct kvi_mem_stats {
    size_t model_bytes;    /* bytes of the model file(s), read into memory or mapped */
    size_t kv_bytes;       /* KV cache allocated: pool blocks and q4 key tails */
    size_t scratch_bytes;  /* activations, kernel per-thread scratch, logits */
    size_t rss_bytes;      /* resident set now (VmRSS); 0 where unknown */
    size_t rss_peak_bytes; /* peak resident set (VmHWM, else getrusage); 0 where unknown */
} kvi_mem_stats;

/* m and e may be NULL (their figures are then 0). */
void kvi_mem_stats_get(const kvi_model *m, const kvi_engine *e, kvi_mem_stats *out);
size_t kvi_model_file_bytes(const kvi_model *m);
size_t kvi_engine_scratch_bytes(const kvi_engine *e);
/* Rows routed to each expert since the engine was created, [n_layers][n_expert] (a
 * row counts once for each expert it chose; kvi_model_info's n_expert), into out
 * (at most cap values). Returns n_layers * n_expert, 0 for a dense model. */
int kvi_engine_expert_counts(const kvi_engine *e, uint64_t *out, size_t cap);

/* ---- embeddings and reranking ------------------------------------------- */

/* Encoder models (bert, nomic-bert, nomic-bert-moe, modern-bert, gemma-embedding)
 * and decoders used as embedding models (qwen3 with last-token pooling) or
 * rerankers (a cls.output head) give vectors instead of logits. kvi_embed runs
 * its inputs through the network in one pass with no KV cache kept: every input
 * attends only within itself (bidirectionally for encoders, causally for
 * decoders), so an input's vector has the same bits alone or inside any batch,
 * at any thread count. An encoder model has no logits: kvi_step refuses it, and its
 * engine keeps the smallest KV pool (n_seq_max 1 whatever the parameters say).
 *
 * Pooling (values as llama.cpp's pooling_type): */
typedef enum kvi_pooling {
    KVI_POOLING_MODEL = -1, /* the model's own: <arch>.pooling_type (kvi_model_pooling) */
    KVI_POOLING_NONE = 0,   /* one vector per token */
    KVI_POOLING_MEAN = 1,   /* the mean of the input's token vectors */
    KVI_POOLING_CLS = 2,    /* the vector of the first token */
    KVI_POOLING_LAST = 3,   /* the vector of the last token */
    KVI_POOLING_RANK = 4,   /* the classification head (cls.*) on the [CLS] (encoders) or last
                               (decoders) token: kvi_n_cls_out scores per input */
} kvi_pooling;

/* "none", "mean", "cls", "last", "rank" (NULL for another value) */
const char *kvi_pooling_name(kvi_pooling p);
/* The pooling named name (as above; "model" for KVI_POOLING_MODEL), or
 * KVI_E_INVALID. */
int kvi_pooling_parse(const char *name, kvi_pooling *out);
/* The file's pooling (<arch>.pooling_type; a file with a cls.output head and no
 * key: rank); KVI_POOLING_NONE when it has none (a chat model). */
kvi_pooling kvi_model_pooling(const kvi_model *m);
/* Whether m is an encoder (bidirectional, no KV cache, no logits). */
bool kvi_model_is_encoder(const kvi_model *m);
/* Length of every vector kvi_embed writes for pooling none / mean / cls / last: the
 * model's width, or the last dense projection's (gemma-embedding's dense_3). */
int32_t kvi_n_embd_out(const kvi_model *m);
/* Outputs of the classification head (1 for bge-reranker, 2 for Qwen3-Reranker's
 * yes / no), 0 when the model has none. */
int32_t kvi_n_cls_out(const kvi_model *m);
/* The query + document sequence a reranker scores, as llama.cpp's server builds it:
 * the model's tokenizer.chat_template.rerank with {query} and {document} replaced
 * (no BOS / EOS added), else [BOS] query [EOS] [SEP] document [EOS] by the file's
 * add_bos / add_eos / add_sep flags (EOS falling back to SEP). Returns the number of
 * tokens (more than cap: only cap were written), or a negative KVI_E_*. */
int32_t kvi_rerank_tokenize(const kvi_model *m, const char *query, size_t query_len, const char *doc,
                            size_t doc_len, int32_t *out, int32_t cap);

/* Runs n_inputs token sequences (input i: toks[i][0 .. n_toks[i])) through the
 * engine's model in one pass and writes, row-major, f32:
 *   NONE:             out [sum n_toks][kvi_n_embd_out]  every token's vector, inputs in order
 *   MEAN, CLS, LAST:  out [n_inputs][kvi_n_embd_out]    the pooled vectors, raw (not normalised)
 *   RANK:             out [n_inputs][kvi_n_cls_out]     the head's outputs; output 0 is the
 *                     relevance score (bert: the raw logit; qwen3: softmax, P(yes))
 * pooling KVI_POOLING_MODEL takes kvi_model_pooling. Every input needs 1 ..
 * kvi_engine_n_ctx(e) tokens (KVI_E_CONTEXT_FULL otherwise, naming the limit) of
 * valid ids (KVI_E_INVALID); RANK needs a classification head (KVI_E_UNSUPPORTED).
 * Not concurrently with kvi_step or another kvi_embed on the same engine. Its
 * scratch is allocated per call and freed before it returns; the KV cache is not
 * touched. 0 or a negative KVI_E_*. */
int kvi_embed(kvi_engine *e, const int32_t *const toks[], const int32_t n_toks[], int32_t n_inputs,
              kvi_pooling pooling, float *out, kvi_error *err);

/* Normalises v[0 .. n) in place as llama.cpp's embd_normalize: -1 none, 0 scaled so
 * that max |v| is 32760, 1 taxicab, 2 euclidean (the default of /v1/embeddings), p > 2
 * the p-norm; sums in double. A zero vector stays zero. */
void kvi_embd_normalize(float *v, int32_t n, int mode);

/* ---- misc ---------------------------------------------------------------- */

/* The SIMD path in use: "avx512", "avx2" or "scalar" (KVINFER_ISA overrides). */
const char *kvi_isa_name(void);
double kvi_time_ms(void); /* monotonic clock */

#ifdef __cplusplus
}
#endif
#endif /* KVINFER_H */
