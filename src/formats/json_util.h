/*
 * json_util.h — cJSON parsing that tells an allocation failure from bad JSON.
 *
 * cJSON_Parse returns NULL for both; a loader or a server must answer the first
 * with KVI_E_NOMEM (HTTP 500) and the second with a format error (HTTP 400).
 * The first call installs cJSON hooks that are malloc and free themselves (as
 * cJSON's defaults) plus a per-thread record of a failed allocation.
 */
#ifndef KVI_FORMATS_JSON_UTIL_H
#define KVI_FORMATS_JSON_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* cJSON_ParseWithLengthOpts (end may be NULL; trailing text allowed): the tree,
 * or NULL with *oom true when an allocation failed, false when the text is not
 * JSON. */
cJSON *kvi_json_parse_opts(const char *text, size_t len, const char **end, bool *oom);
/* The same for exactly len bytes of text. */
cJSON *kvi_json_parse(const char *text, size_t len, bool *oom);
/* Installs the hooks (idempotent; thread-safe). */
void kvi_json_init(void);

#endif
