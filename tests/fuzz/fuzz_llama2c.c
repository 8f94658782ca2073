/*
 * fuzz_llama2c.c — a llama2.c checkpoint (model/model_llama2c.c: the config header,
 * then every weight) loaded by kvi_model_load with stories260K's tokenizer
 * (../shared/models/tok512.bin), then one step of two rows when it loads. The bytes
 * go to a .bin file in a private temporary folder (the loader reads a path).
 */
#include "fuzz_util.h"

#include "kvinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tok[4096]; /* stories260K's tokenizer.bin */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = fuzz_input_file("model.bin", data, size);
    if (!p) return 0;
    if (!tok[0]) snprintf(tok, sizeof tok, "%s", fuzz_shared_path("models/tok512.bin"));
    kvi_load_params lp;
    kvi_load_params_default(&lp);
    lp.tokenizer_path = tok;
    kvi_error err = { 0 };
    kvi_model *m = kvi_model_load(p, &lp, &err);
    if (!m) return 0;
    kvi_engine_params ep;
    kvi_engine_params_default(&ep);
    ep.n_threads = 1;
    ep.n_ctx = 16;
    kvi_engine *e = kvi_engine_create(m, &ep, &err);
    kvi_seq *s = e ? kvi_seq_create(e) : NULL;
    kvi_batch *b = kvi_batch_create(2);
    if (s && b && kvi_n_vocab(m) > 2) {
        kvi_batch_add(b, s, 1, 0, false);
        kvi_batch_add(b, s, 2, 1, true);
        (void)kvi_step(e, b, &err);
    }
    kvi_batch_free(b);
    kvi_seq_free(s);
    kvi_engine_free(e);
    kvi_model_free(m);
    return 0;
}
