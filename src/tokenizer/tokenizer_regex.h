/*
 * tokenizer_regex.h — PCRE2 as the tokenizer uses it: every compiled pattern,
 * its match data and pcre2_match's heap frames are allocated with malloc/free
 * from the tokenizer's own code (a general context), so allocation failures are
 * the library's to report (and tests can inject them).
 */
#ifndef KVI_TOKENIZER_REGEX_H
#define KVI_TOKENIZER_REGEX_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdbool.h>

/* pcre2_compile(pattern, NUL-terminated) with those allocators. NULL on
 * failure: *nomem true when memory ran out, else *ecode / *eoff tell the syntax
 * error. */
pcre2_code *tok_regex_compile(const char *pattern, uint32_t options, int *ecode, PCRE2_SIZE *eoff,
                              bool *nomem);
/* The kvinfer code for a negative pcre2_match result other than NOMATCH:
 * KVI_E_NOMEM for memory, else KVI_E_INVALID. */
int tok_regex_error(int match_rc);

#endif
