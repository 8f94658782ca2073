/*
 * synth_bert.h — synthetic BERT encoders (kvinfer synth --arch bert): the keys and
 * tensors llama.cpp's converter writes for a BERT / BGE / MiniLM embedding model,
 * random weights, the WordPiece vocabulary copied from a GGUF.
 */
#ifndef KVI_SYNTH_BERT_H
#define KVI_SYNTH_BERT_H

#include "kvinfer.h"

/* Fills p from a BERT-shaped preset ("all-minilm-l6", "bge-small", "bge-base"):
 * 0, or KVI_E_INVALID for another name (p untouched). */
int synth_bert_preset(const char *name, kvi_synth_params *p);
/* Writes p (arch "bert") to path: n_ctx positions (0: 512), pooling mean unless the
 * preset said CLS (window_pattern 2: the pooling_type key), matrices of p->type,
 * embeddings of positions and token types, norms and biases in F32. p->vocab_from
 * must be a GGUF with a WordPiece vocabulary; n_vocab is its size. */
int synth_bert_write(const kvi_synth_params *p, const char *path, kvi_error *err);

#endif
