/*
 * ggml_type_name.h — the names of the tensor type ids found in GGUF files, whether
 * or not kvinfer reads them: llama.cpp's ggml types (0..42, Aug 2026) and
 * ik_llama.cpp's own (36 and 133 and up), so that a refusal can say what a file holds
 * ("IQ4_KS (ggml type 144, ik_llama.cpp)") rather than a bare number.
 */
#ifndef KVI_GGML_TYPE_NAME_H
#define KVI_GGML_TYPE_NAME_H

#include <stdint.h>

/* ggml's upper-case name of type id (e.g. "IQ2_XXS"), or NULL for an id neither
 * llama.cpp nor ik_llama.cpp defines; *fork (when not NULL) is set to
 * "ik_llama.cpp" for ids only that fork defines, else to NULL. */
const char *ggml_type_name(uint32_t id, const char **fork);

#endif
