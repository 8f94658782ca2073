/*
 * fuzz_chat_output.c — the parser of generated assistant messages (tool calls,
 * reasoning). Byte 0 picks the format (mod KVI_TOOLS_COUNT_), byte 1 the flags
 * (bit 0 reasoning, bit 1 in_reasoning) and the chunk size (bits 2..4: 1 .. 8
 * bytes); the rest is the model's output text. It is parsed twice, in one piece
 * and in chunks, and the two results must agree (the parser's split invariance:
 * a difference aborts, a finding like a crash); content and reasoning must grow
 * append-only while fed.
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    kvi_chat_output *o;
    bool ok;
} parsed;

static parsed parse(const kvi_chat_output_params *p, const uint8_t *text, size_t n, size_t chunk)
{
    parsed r = { kvi_chat_output_create(p), false };
    if (!r.o) return r;
    size_t prev_c = 0, prev_r = 0;
    char *snap_c = NULL, *snap_r = NULL;
    for (size_t off = 0; off < n; off += chunk) {
        const size_t k = n - off < chunk ? n - off : chunk;
        if (kvi_chat_output_feed(r.o, (const char *)text + off, k) != 0) goto out;
        size_t nc, nr;
        const char *c = kvi_chat_output_content(r.o, &nc), *rs = kvi_chat_output_reasoning(r.o, &nr);
        /* append-only: what was returned before is a prefix of what is returned now */
        if (nc < prev_c || nr < prev_r) abort();
        if ((prev_c && memcmp(c, snap_c, prev_c)) || (prev_r && memcmp(rs, snap_r, prev_r))) abort();
        free(snap_c);
        free(snap_r);
        snap_c = malloc(nc + 1);
        snap_r = malloc(nr + 1);
        if (!snap_c || !snap_r) goto out;
        memcpy(snap_c, c, nc);
        memcpy(snap_r, rs, nr);
        prev_c = nc, prev_r = nr;
    }
    r.ok = kvi_chat_output_finish(r.o) == 0;
out:
    free(snap_c);
    free(snap_r);
    return r;
}

static bool same_bytes(const char *a, size_t na, const char *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    kvi_chat_output_params p = { .tools = (kvi_tool_format)(data[0] % KVI_TOOLS_COUNT_),
                                 .reasoning = data[1] & 1,
                                 .in_reasoning = (data[1] >> 1) & 1 };
    const size_t chunk = (size_t)((data[1] >> 2) & 7) + 1;
    parsed whole = parse(&p, data + 2, size - 2, size);
    parsed split = parse(&p, data + 2, size - 2, chunk);
    if (whole.ok && split.ok) {
        size_t na, nb;
        const char *a = kvi_chat_output_content(whole.o, &na), *b = kvi_chat_output_content(split.o, &nb);
        if (!same_bytes(a, na, b, nb)) abort();
        a = kvi_chat_output_reasoning(whole.o, &na);
        b = kvi_chat_output_reasoning(split.o, &nb);
        if (!same_bytes(a, na, b, nb)) abort();
        const int n = kvi_chat_output_n_calls(whole.o);
        if (n != kvi_chat_output_n_calls(split.o)) abort();
        for (int i = 0; i < n; i++) {
            const char *n1, *a1, *n2, *a2;
            if (kvi_chat_output_call(whole.o, i, &n1, &a1) || kvi_chat_output_call(split.o, i, &n2, &a2))
                abort();
            if (strcmp(n1, n2) || strcmp(a1, a2)) abort();
        }
    }
    kvi_chat_output_free(whole.o);
    kvi_chat_output_free(split.o);
    return 0;
}
