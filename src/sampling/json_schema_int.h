/*
 * json_schema_int.h — building GBNF text, and JSON schemas compiled into rules of
 * a larger grammar: shared by json_schema.c (which implements them) and
 * tool_grammar.c (one grammar holding every tool's arguments schema).
 *
 * A gbnf_buf is text appended to with printf formats; once an append fails
 * (out of memory) `oom` stays set and later appends do nothing, so a builder
 * checks once at the end. Schema rules are named <prefix>s<N>, <prefix>f<N> and
 * <prefix>c<N>, so schemas compiled with distinct prefixes coexist; the
 * primitive rules they share (ws, value, object, array, string, char, number,
 * integer, boolean, null, date, time, uuid, hex, email) are unprefixed and
 * emitted once, by json_schema_put_prims, for the union of the uses.
 */
#ifndef KVI_JSON_SCHEMA_INT_H
#define KVI_JSON_SCHEMA_INT_H

#include "kvinfer.h"
#include "base/error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct cJSON;

#define JS_MAX_PREFIX 48 /* bytes of a rule prefix */

typedef struct gbnf_buf {
    char *text; /* NUL-terminated when len > 0; malloc'd */
    size_t len, cap;
    bool oom;
} gbnf_buf;

void gbnf_put(gbnf_buf *b, const char *fmt, ...) KVI_PRINTF(2, 3);
void gbnf_vput(gbnf_buf *b, const char *fmt, va_list ap);
/* Raw bytes s as one GBNF string literal ("..." with escapes). */
void gbnf_put_literal(gbnf_buf *b, const char *s);

/* Appends the rules of `schema` (a node of the cJSON document `doc`, against
 * which its $refs resolve; NULL: any JSON object) to b, each named with prefix
 * (letters, digits, '-'; at most JS_MAX_PREFIX bytes), and `top ::= ...` for the
 * schema itself. The primitives used are or-ed into *prims. 0, or -1 with err
 * filled (the schema's first unsupported keyword, or out of memory). */
int json_schema_rules(gbnf_buf *b, const struct cJSON *doc, const struct cJSON *schema, const char *prefix,
                      const char *top, unsigned *prims, kvi_error *err);
/* Or-ed into prims before json_schema_put_prims: JSON in the compact form
 * json.dumps writes (and chat templates' tojson): one space after ':' and ','
 * (rule sp), none elsewhere (rule ws), no free white space outside strings;
 * tool calls use it so that a weak model cannot spend tokens on layout.
 * Without it ws is free bounded white space and sp the same as ws. */
#define JS_WS_COMPACT (1u << 30)
/* The primitive rules of *prims' uses (and those they need), each once. */
void json_schema_put_prims(gbnf_buf *b, unsigned prims);

#endif
