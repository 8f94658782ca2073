/*
 * synth_dense_t3.h — what synth (tools/synth.c) writes beyond the common keys and
 * tensors for mistral3, smollm3, seed_oss, apertus, exaone4 and cohere2, as
 * llama.cpp's converter writes them (the goldens in ../shared/golden/arch carry the
 * same keys): mistral3's YaRN and query temperature keys, apertus's per-layer xIELU
 * arrays, exaone4's window and its per-layer pattern array, cohere2's logit scale,
 * and the Llama 3 rope_freqs of apertus and exaone4.
 *
 * Invariant: every value depends only on the resolved parameters (no randomness),
 * so every weight type of a shape carries the same metadata.
 */
#ifndef KVI_SYNTH_DENSE_T3_H
#define KVI_SYNTH_DENSE_T3_H

#include "formats/gguf.h"
#include "kvinfer.h"

#include <stdbool.h>
#include <stdint.h>

/* The defaults of out's 0 fields that these architectures add (exaone4's window). */
void synth_dt3_resolve(kvi_synth_params *out);

/* The keys of the resolved p beyond synth.c's common ones (nothing for the other
 * architectures): 0, or KVI_E_NOMEM. */
int synth_dt3_metadata(gguf_writer *w, const kvi_synth_params *p);

/* Whether p's architecture stores Llama 3 frequency factors (rope_freqs [n_rot / 2]). */
bool synth_dt3_has_rope_freqs(const kvi_synth_params *p);

/* Factor i of those n_rot / 2 factors: Llama 3's rule with the published model's
 * scaling (apertus: factor 8, exaone4: 16; low / high frequency factors 1 / 4 over
 * an original context of 8192). */
float synth_dt3_rope_freq(const kvi_synth_params *p, int64_t i);

#endif
