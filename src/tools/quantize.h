/*
 * quantize.h — `kvinfer quantize`: a GGUF model written again in another weight
 * type, tensor for tensor as llama.cpp's llama-quantize writes it (same per-tensor
 * types, same bytes, same metadata keys).
 *
 * A "file type" (quantize_ftype, llama.cpp's llama_ftype numbers) names a default
 * tensor type and a mix: which tensors it keeps at more bits, by name, category and
 * layer position (llama-quant.cpp's rules). Overrides apply in llama.cpp's order:
 * --token-embedding-type / --output-tensor-type, then the first matching
 * --tensor-type pattern (POSIX extended regex searched in the name), then the mix
 * (unless pure), then a fallback for rows that are not a whole number of blocks.
 */
#ifndef KVI_QUANTIZE_H
#define KVI_QUANTIZE_H

#include "kvinfer_types.h"
#include "tools/imatrix_file.h"

#include <stdbool.h>
#include <stdint.h>

/* llama.cpp's llama_ftype values */
enum {
    QFT_F32 = 0,
    QFT_F16 = 1,
    QFT_Q4_0 = 2,
    QFT_Q4_1 = 3,
    QFT_Q8_0 = 7,
    QFT_Q5_0 = 8,
    QFT_Q5_1 = 9,
    QFT_Q2_K = 10,
    QFT_Q3_K_S = 11,
    QFT_Q3_K_M = 12,
    QFT_Q3_K_L = 13,
    QFT_Q4_K_S = 14,
    QFT_Q4_K_M = 15,
    QFT_Q5_K_S = 16,
    QFT_Q5_K_M = 17,
    QFT_Q6_K = 18,
    QFT_IQ2_XXS = 19,
    QFT_IQ2_XS = 20,
    QFT_Q2_K_S = 21,
    QFT_IQ3_XS = 22,
    QFT_IQ3_XXS = 23,
    QFT_IQ1_S = 24,
    QFT_IQ4_NL = 25,
    QFT_IQ3_S = 26,
    QFT_IQ3_M = 27,
    QFT_IQ2_S = 28,
    QFT_IQ2_M = 29,
    QFT_IQ4_XS = 30,
    QFT_IQ1_M = 31,
    QFT_BF16 = 32,
    QFT_TQ1_0 = 36,
    QFT_TQ2_0 = 37,
    QFT_MXFP4_MOE = 38,
};

/* The file type named s (llama-quantize's names, any case: "Q4_K_M", "q4_k", "MXFP4_MOE",
 * "MXFP4" as an alias of MXFP4_MOE); -1 when unknown. */
int quantize_ftype_from_name(const char *s);
/* Its default tensor type; KVI_TYPE_COUNT for an unknown file type. */
kvi_type quantize_ftype_default(int ftype);

typedef struct quantize_override {
    const char *pattern; /* regex searched in the lower-cased pattern's tensor names */
    kvi_type type;
} quantize_override;

typedef struct quantize_params {
    int ftype;                          /* QFT_* */
    int nthread;                        /* <= 0: all cores */
    bool pure;                          /* every quantisable tensor in the default type */
    bool leave_output;                  /* output.weight copied as it is */
    bool allow_requantize;              /* accept quantised input tensors */
    kvi_type output_type;               /* KVI_TYPE_COUNT: the mix decides */
    kvi_type embd_type;                 /* KVI_TYPE_COUNT: the mix decides */
    const quantize_override *overrides; /* [n_overrides] */
    int n_overrides;
    const imatrix_data *imatrix; /* NULL: none */
    const char *imatrix_path;    /* written as quantize.imatrix.file */
    /* called before each tensor (cli progress line); may be NULL */
    void (*progress)(void *user, int i, int n, const char *name, kvi_type from, kvi_type to);
    void *progress_user;
} quantize_params;

void quantize_params_init(quantize_params *p);
/* Reads in_path (GGUF), writes out_path. 0 or a KVI_E_* code with err. */
int quantize_file(const char *in_path, const char *out_path, const quantize_params *p, kvi_error *err);

#endif
