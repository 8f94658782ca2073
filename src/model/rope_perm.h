/*
 * rope_perm.h — the row order of q / k projections between a Hugging Face checkpoint
 * and a GGUF file of an interleaved-RoPE (non-NeoX) model: llama.cpp's converter
 * permutes each head's rows from rotate-half order (pairs (i, i + hd/2)) to
 * interleaved (pairs (2i, 2i + 1)). Used for the base matrices (model_hf.c) and for
 * the B matrices of PEFT adapters (lora_peft.c).
 */
#ifndef KVI_MODEL_ROPE_PERM_H
#define KVI_MODEL_ROPE_PERM_H

#include <stddef.h>
#include <stdint.h>

/* dst[r] = src[perm(r)] for n_rows rows of `row` bytes: within each head of hd rows,
 * new row 2i = old row i, new 2i + 1 = old i + hd / 2. dst and src do not overlap. */
void rope_interleave_rows(uint8_t *dst, const uint8_t *src, int64_t n_rows, int64_t hd, size_t row);

#endif
