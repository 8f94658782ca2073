/*
 * template.h — the template layer's interface: Jinja chat templates parsed once
 * and rendered with an OpenAI-style chat request, as Hugging Face transformers
 * renders them with jinja2 (trim_blocks, lstrip_blocks, loop controls, an
 * immutable sandbox, tojson without ASCII escaping, {% generation %}).
 *
 * A parsed template (struct kvi_chat_template, opaque in include/kvinfer.h) is
 * read-only: any number of renders may use it, from any threads. Every render is
 * bounded by jlimits (steps, output bytes, memory, call depth).
 */
#ifndef KVI_TEMPLATE_H
#define KVI_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "kvinfer.h"

typedef struct jlimits {
    uint64_t max_steps; /* expressions and statements evaluated */
    size_t max_output;  /* bytes of output, every buffer together */
    size_t max_bytes;   /* bytes of the render's arena */
    int max_depth;      /* nested macro calls, expressions, statements */
} jlimits;

/* The defaults of kvi_chat_template_render. */
jlimits jinja_default_limits(void);

/* Renders t with the variables of vars_json (a JSON object: each key a variable)
 * into a malloc'd NUL-terminated string (*out_len bytes). 0 or a negative code
 * with err filled; *out NULL then. */
int jinja_render_vars(const kvi_chat_template *t, const char *vars_json, size_t n, const jlimits *lim,
                      char **out, size_t *out_len, kvi_error *err);
/* The same from an OpenAI chat body (see kvi_chat_template_render). */
int jinja_render_chat(const kvi_chat_template *t, const char *request_json, size_t n, const char *bos_token,
                      const char *eos_token, const jlimits *lim, char **out, size_t *out_len, kvi_error *err);

#endif
