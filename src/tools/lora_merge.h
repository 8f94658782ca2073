/*
 * lora_merge.h — `kvinfer lora-merge`: a base GGUF with LoRA adapters merged into its
 * matrices (the adapted ones written as F32, W + s B A; everything else copied).
 */
#ifndef KVI_LORA_MERGE_H
#define KVI_LORA_MERGE_H

#include "kvinfer.h"

/* Writes base + the n adapters paths[k] at user scales[k] to out. 0 or a KVI_E_* code
 * with err set (adapters checked against the base as kvi_lora_load does). */
/* out_type: the type of the merged matrices (a type quant_quantize_row writes), or -1 for
 * each base matrix's own type. */
int lora_merge(const char *base, int n, const char *const *paths, const float *scales, int out_type,
               const char *out, kvi_error *err);

#endif
