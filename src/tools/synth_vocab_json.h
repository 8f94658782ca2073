/*
 * synth_vocab_json.h — a Hugging Face tokenizer.json (byte-level BPE, the form of
 * Llama 3 and Qwen2/3) as GGUF tokenizer metadata, for `kvinfer synth
 * --vocab-from tokenizer.json`: a synthetic model with a real vocabulary.
 */
#ifndef KVI_TOOLS_SYNTH_VOCAB_JSON_H
#define KVI_TOOLS_SYNTH_VOCAB_JSON_H

#include "formats/gguf.h"
#include "kvinfer.h"

typedef struct synth_json_vocab synth_json_vocab;

/* Reads path: NULL with err filled (KVI_E_UNSUPPORTED for a tokenizer that is
 * not byte-level BPE or whose pre-tokenizer regex kvinfer's GGUF loader has no
 * name for; KVI_E_FORMAT for a malformed file). */
synth_json_vocab *synth_vocab_json_load(const char *path, kvi_error *err);
/* The token count (the largest id + 1). */
int synth_vocab_json_n(const synth_json_vocab *v);
/* Writes tokenizer.ggml.{model "gpt2", pre, tokens, token_type, merges, bos/eos
 * ids, add_bos/add_eos} into w. */
int synth_vocab_json_write(gguf_writer *w, const synth_json_vocab *v, kvi_error *err);
void synth_vocab_json_free(synth_json_vocab *v);

#endif
