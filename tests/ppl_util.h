/*
 * ppl_util.h — what the `kvinfer perplexity` tests share: the text file they
 * score (every golden case's prompt and greedy continuation from
 * ../shared/golden/stories260K, one case a line) and the command's --json run.
 *
 * Invariant: a text written by ppl_golden_text is over 1000 bytes.
 */
#ifndef KVI_TEST_PPL_UTIL_H
#define KVI_TEST_PPL_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Writes the golden text to tmp_path(name) and its path into path[cap]; false on failure. */
bool ppl_golden_text(const char *name, char *path, size_t cap);
/* `kvinfer perplexity --json <flags> -m model -f text <args>`: the parsed stdout
 * (cJSON_Delete it; NULL when not JSON), *rc the exit status, *errout the stderr
 * (malloc'd) when errout is not NULL. */
cJSON *ppl_json_run(const char *flags, const char *model, const char *text, const char *args, int *rc,
                    char **errout);
/* The number under key, or NAN. */
double json_num(const cJSON *j, const char *key);

#endif
