/*
 * mem_stats.c — where the process's memory goes (kvi_mem_stats).
 *
 * Data structure: none kept; each call reads
 *   - the model's file bytes (kvi_model_file_bytes),
 *   - the engine's KV bytes (pool stats: allocated blocks + q4 key tails) and scratch
 *     (kvi_engine_scratch_bytes: forward activations, kernel per-thread scratch, logits),
 *   - the resident set from /proc/self/status (VmRSS, VmHWM; kB lines), with
 *     getrusage(RUSAGE_SELF).ru_maxrss as the peak where /proc is missing.
 *
 * Invariants: never fails; a figure that cannot be read is 0. The file is parsed
 * with bounded line reads and overflow-checked arithmetic.
 */
#include "kvinfer.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

size_t kvi_model_file_bytes(const kvi_model *m) { return m ? m->file_bytes : 0; }

/* "Key:   1234 kB" -> bytes; 0 when the line does not parse. */
static size_t kb_line(const char *line, size_t key_len)
{
    const char *p = line + key_len;
    while (*p == ' ' || *p == '\t') p++;
    size_t kb = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (kb > (SIZE_MAX / 1024 - 9) / 10) return 0;
        kb = kb * 10 + (size_t)(*p - '0');
    }
    return kb * 1024;
}

static void read_rss(size_t *rss, size_t *peak)
{
    *rss = *peak = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256]; /* longer lines are read in pieces; no key of interest is long */
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "VmRSS:", 6))
                *rss = kb_line(line, 6);
            else if (!strncmp(line, "VmHWM:", 6))
                *peak = kb_line(line, 6);
        }
        fclose(f);
    }
    if (*peak == 0) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0) *peak = (size_t)ru.ru_maxrss * 1024;
    }
}

void kvi_mem_stats_get(const kvi_model *m, const kvi_engine *e, kvi_mem_stats *out)
{
    memset(out, 0, sizeof *out);
    out->model_bytes = kvi_model_file_bytes(m);
    if (e) {
        kvi_stats st;
        kvi_stats_get(e, NULL, &st);
        out->kv_bytes = st.kv_bytes_allocated + st.kv_bytes_tail;
        out->scratch_bytes = kvi_engine_scratch_bytes(e);
    }
    read_rss(&out->rss_bytes, &out->rss_peak_bytes);
}
