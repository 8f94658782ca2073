/*
 * fuzz_safetensors.c — a .safetensors header (8-byte length, JSON index) parsed
 * from memory by st_parse, every tensor looked up again by name.
 */
#include "fuzz_util.h"

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_index *ix = NULL;
    kvi_error err = { 0 };
    if (st_parse(data, size, &ix, &err) == 0) {
        for (size_t i = 0; i < ix->n_tensors; i++) (void)st_find(ix, ix->tensors[i].name);
        st_free(ix);
    }
    return 0;
}
