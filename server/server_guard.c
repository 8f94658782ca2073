/*
 * server_guard.c — what every JSON request body must be before any endpoint
 * reads it: valid UTF-8 (no overlong forms, no surrogates, nothing past
 * U+10FFFF), exactly one JSON value with only white space after it, escapes
 * that form code points (a lone \uD800 is refused), objects and arrays nested
 * at most SRV_JSON_DEPTH_MAX deep, and no object with the same key twice. A
 * body that fails gets a 400 in OpenAI's error shape saying what and where
 * (the byte offset), never a guess at what the client meant.
 *
 * The check parses the body once with cJSON and walks the tree; the endpoints
 * parse it again (a request body is at most SRV_BODY_MAX bytes, and a forward
 * pass costs far more). Duplicate keys are found by sorting each object's keys,
 * so an object of n keys costs O(n log n), never O(n^2).
 */
#include "server/server.h"
#include "formats/json_util.h"

#include <stdlib.h>
#include <string.h>

/* The offset of the first byte that is not part of valid UTF-8, or len. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        const unsigned c = s[i];
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0) lo = 0xA0; /* overlong */
            if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0) lo = 0x90; /* overlong */
            if (c == 0xF4) hi = 0x8F; /* past U+10FFFF */
        } else {
            return i;
        }
        if (i + n > len || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < n; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
        i += n;
    }
    return len;
}

/* Where a string holds a raw control byte (JSON wants them escaped) or a \u
 * escape that forms no code point (a lone or reversed surrogate), or len.
 * Outside strings such bytes are syntax errors cJSON reports. */
static size_t bad_string_at(const char *s, size_t len)
{
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            in_str = s[i] == '"';
            continue;
        }
        if (s[i] == '"') {
            in_str = false;
            continue;
        }
        if ((unsigned char)s[i] < 0x20) return i;
        if (s[i] != '\\') continue;
        if (i + 1 < len && s[i + 1] != 'u') {
            i++;
            continue;
        }
        if (i + 5 >= len) return i;
        unsigned v = (unsigned)strtoul((char[5]){ s[i + 2], s[i + 3], s[i + 4], s[i + 5], 0 }, NULL, 16);
        if (v >= 0xDC00 && v <= 0xDFFF) return i; /* a low surrogate first */
        if (v >= 0xD800 && v <= 0xDBFF) {
            if (i + 11 >= len || s[i + 6] != '\\' || s[i + 7] != 'u') return i;
            unsigned w =
                (unsigned)strtoul((char[5]){ s[i + 8], s[i + 9], s[i + 10], s[i + 11], 0 }, NULL, 16);
            if (w < 0xDC00 || w > 0xDFFF) return i;
            i += 6;
        }
        i += 5;
    }
    return len;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Depth and duplicate keys of the tree under x (at depth d). 0, or -1 with *er set. */
static int walk(const cJSON *x, int d, srv_err *er)
{
    if (!cJSON_IsObject(x) && !cJSON_IsArray(x)) return 0;
    if (d > SRV_JSON_DEPTH_MAX)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           "the body nests objects and arrays more than %d deep", SRV_JSON_DEPTH_MAX);
    int n = 0;
    for (const cJSON *c = x->child; c; c = c->next) {
        if (walk(c, d + 1, er)) return -1;
        n++;
    }
    if (!cJSON_IsObject(x) || n < 2) return 0;
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    int k = 0;
    for (const cJSON *c = x->child; c; c = c->next) keys[k++] = c->string ? c->string : "";
    qsort(keys, (size_t)n, sizeof *keys, key_cmp);
    int rc = 0;
    for (int i = 1; i < n && !rc; i++)
        if (!strcmp(keys[i - 1], keys[i]))
            rc = srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                             "the body has the key '%.100s' twice in one object", keys[i]);
    free(keys);
    return rc;
}

int srv_body_check(const char *body, size_t len, srv_err *er)
{
    if (!body) body = "", len = 0;
    size_t at = utf8_invalid_at((const unsigned char *)body, len);
    if (at < len)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           "the body is not valid UTF-8 (byte %zu)", at);
    if ((at = bad_string_at(body, len)) < len)
        return srv_err_set(er, 400, "invalid_request_error", "invalid_value",
                           (unsigned char)body[at] < 0x20
                               ? "the body has a raw control character in a string (byte %zu)"
                               : "the body's \\u escape at byte %zu forms no Unicode code point (a lone "
                                 "surrogate)",
                           at);
    const char *end = NULL;
    bool oom = false;
    cJSON *root = kvi_json_parse_opts(body, len, &end, &oom);
    if (oom) return srv_err_set(er, 500, "server_error", NULL, "out of memory");
    if (!root) { /* cJSON sets end to where it stopped on failure too */
        const size_t off = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return srv_err_set(er, 400, "invalid_request_error", NULL, "the body is not valid JSON (byte %zu)",
                           off);
    }
    size_t k = end ? (size_t)(end - body) : len;
    while (k < len && (body[k] == ' ' || body[k] == '\t' || body[k] == '\n' || body[k] == '\r')) k++;
    int rc = 0;
    if (k < len)
        rc = srv_err_set(er, 400, "invalid_request_error", NULL,
                         "the body holds more than one JSON value (trailing bytes at byte %zu)", k);
    else
        rc = walk(root, 1, er);
    cJSON_Delete(root);
    return rc;
}
