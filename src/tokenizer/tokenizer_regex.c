/*
 * tokenizer_regex.c — compiles tokenizer regexes with a PCRE2 general context
 * whose allocators are malloc and free called from here. PCRE2 copies the
 * context's allocators into the compiled pattern, and match data created from
 * the pattern (pcre2_match_data_create_from_pattern(re, NULL)) and pcre2_match's
 * heap frames use them too. The contexts live only during the compile.
 */
#include "tokenizer/tokenizer_regex.h"

#include <stdlib.h>

#include "kvinfer_types.h"

static void *re_malloc(PCRE2_SIZE n, void *data)
{
    (void)data;
    return malloc(n);
}

static void re_free(void *p, void *data)
{
    (void)data;
    free(p);
}

pcre2_code *tok_regex_compile(const char *pattern, uint32_t options, int *ecode, PCRE2_SIZE *eoff,
                              bool *nomem)
{
    *nomem = false;
    *ecode = 0;
    *eoff = 0;
    pcre2_general_context *g = pcre2_general_context_create(re_malloc, re_free, NULL);
    pcre2_compile_context *c = g ? pcre2_compile_context_create(g) : NULL;
    pcre2_code *re =
        c ? pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, options, ecode, eoff, c) : NULL;
    if (!re && (!c || *ecode == PCRE2_ERROR_HEAP_FAILED)) *nomem = true;
    pcre2_compile_context_free(c);
    pcre2_general_context_free(g);
    return re;
}

int tok_regex_error(int match_rc) { return match_rc == PCRE2_ERROR_NOMEMORY ? KVI_E_NOMEM : KVI_E_INVALID; }
