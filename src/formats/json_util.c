/*
 * json_util.c — cJSON parsing that tells an allocation failure from bad JSON.
 *
 * State: one process-wide pthread_once for the hooks, and a thread-local flag
 * set by the malloc hook when an allocation fails. kvi_json_parse clears the
 * flag, parses, and reports it; the flag belongs to the calling thread, so
 * concurrent parses on other threads cannot set it.
 */
#include "formats/json_util.h"

#include <pthread.h>
#include <stdlib.h>

static _Thread_local bool t_failed;
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void *json_malloc(size_t n)
{
    void *p = malloc(n);
    if (!p) t_failed = true;
    return p;
}

static void json_free(void *p) { free(p); }

static void install(void)
{
    cJSON_Hooks h = { .malloc_fn = json_malloc, .free_fn = json_free };
    cJSON_InitHooks(&h);
}

void kvi_json_init(void) { pthread_once(&hooks_once, install); }

cJSON *kvi_json_parse_opts(const char *text, size_t len, const char **end, bool *oom)
{
    kvi_json_init();
    t_failed = false;
    cJSON *r = cJSON_ParseWithLengthOpts(text ? text : "", text ? len : 0, end, false);
    if (oom) *oom = !r && t_failed;
    return r;
}

cJSON *kvi_json_parse(const char *text, size_t len, bool *oom)
{
    const char *end = NULL;
    cJSON *r = kvi_json_parse_opts(text, len, &end, oom);
    return r;
}
