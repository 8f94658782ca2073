/*
 * fuzz_session.c — a session file (kv/kv_session.h) loaded by kvi_seq_load into two
 * engines made once per process: stories260K (f16 K/V, a plain cache) and the qwen35
 * golden (../shared/golden/arch: a hybrid whose file also carries the recurrent
 * state). The bytes go to a file in a private temporary folder (the loader reads a
 * path); a load the header accepts is then continued by one decode step, so a
 * restored table, its tokens and its state are used as the product would use them.
 * Each engine's pool must be empty again after the sequence is freed.
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct target {
    kvi_model *m;
    kvi_engine *e;
    kvi_batch *b;
} target;

static target tg[2];

static void free_targets(void)
{
    for (int i = 0; i < 2; i++) {
        kvi_batch_free(tg[i].b);
        kvi_engine_free(tg[i].e);
        kvi_model_free(tg[i].m);
    }
}

static void make_targets(void)
{
    static int done;
    if (done) return;
    done = 1;
    const char *rel[2] = { "models/stories260K.gguf", "golden/arch/qwen35-f32.gguf" };
    for (int i = 0; i < 2; i++) {
        tg[i].m = kvi_model_load(fuzz_shared_path(rel[i]), NULL, NULL);
        if (!tg[i].m) abort(); /* the reference data is missing: not a finding */
        kvi_engine_params p;
        kvi_engine_params_default(&p);
        p.n_threads = 1;
        p.n_ctx = 256;
        p.kv_type_k = p.kv_type_v = i ? KVI_TYPE_F32 : KVI_TYPE_F16;
        tg[i].e = kvi_engine_create(tg[i].m, &p, NULL);
        tg[i].b = kvi_batch_create(1);
        if (!tg[i].e || !tg[i].b) abort();
    }
    atexit(free_targets);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    make_targets();
    const char *p = fuzz_input_file("seq.session", data, size);
    if (!p) return 0;
    for (int i = 0; i < 2; i++) {
        kvi_seq *s = kvi_seq_create(tg[i].e);
        if (!s) abort();
        kvi_error err = { 0 };
        if (kvi_seq_load(s, p, NULL, &err) == 0) {
            const int32_t n = kvi_seq_len(s);
            if (n < 256) { /* one more token where the file left the sequence */
                kvi_batch_clear(tg[i].b);
                kvi_batch_add(tg[i].b, s, 5, n, true);
                (void)kvi_step(tg[i].e, tg[i].b, &err);
            }
        }
        kvi_seq_free(s);
        kvi_stats st;
        kvi_stats_get(tg[i].e, NULL, &st);
        if (st.kv_bytes_state != 0) abort(); /* a freed sequence left its state behind */
    }
    return 0;
}
