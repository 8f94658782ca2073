/*
 * ggml_type_name.c — id -> name of the ggml tensor types (ggml_type_name.h).
 *
 * Data: two tables, by id: llama.cpp's enum ggml_type (ggml/include/ggml.h, Aug
 * 2026; 4 and 5 were removed before GGUF, 31..33 and 36..38 were the repacked
 * Q4_0 / IQ4_NL layouts since removed from files) and ik_llama.cpp's additions
 * (ggml/include/ggml.h of that fork: I2_S at 36, its own quants from 133 on; its
 * activation-only types 97..99 never appear in a file and are left out).
 * Where both define an id, llama.cpp's name is given (41: llama.cpp's Q1_0,
 * ik_llama.cpp's Q1_0_G128).
 */
#include "formats/ggml_type_name.h"

#include <stddef.h>

static const char *const MAINLINE[] = {
    [0] = "F32",         [1] = "F16",       [2] = "Q4_0",   [3] = "Q4_1",    [6] = "Q5_0",
    [7] = "Q5_1",        [8] = "Q8_0",      [9] = "Q8_1",   [10] = "Q2_K",   [11] = "Q3_K",
    [12] = "Q4_K",       [13] = "Q5_K",     [14] = "Q6_K",  [15] = "Q8_K",   [16] = "IQ2_XXS",
    [17] = "IQ2_XS",     [18] = "IQ3_XXS",  [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S",
    [22] = "IQ2_S",      [23] = "IQ4_XS",   [24] = "I8",    [25] = "I16",    [26] = "I32",
    [27] = "I64",        [28] = "F64",      [29] = "IQ1_M", [30] = "BF16",   [31] = "Q4_0_4_4",
    [32] = "Q4_0_4_8",   [33] = "Q4_0_8_8", [34] = "TQ1_0", [35] = "TQ2_0",  [37] = "IQ4_NL_4_8",
    [38] = "IQ4_NL_8_8", [39] = "MXFP4",    [40] = "NVFP4", [41] = "Q1_0",   [42] = "Q2_0",
};

typedef struct fork_type {
    uint32_t id;
    const char *name;
} fork_type;

static const fork_type IK[] = {
    { 36, "I2_S" },       { 133, "Q6_0" },       { 134, "IQ1_BN" },    { 135, "IQ2_BN" },
    { 136, "Q8_K64" },    { 137, "IQ2_K" },      { 138, "IQ3_K" },     { 139, "IQ4_K" },
    { 140, "IQ5_K" },     { 141, "IQ6_K" },      { 144, "IQ4_KS" },    { 145, "IQ2_KS" },
    { 146, "IQ4_KSS" },   { 147, "Q8_K16" },     { 148, "Q8_K32" },    { 149, "Q8_KR8" },
    { 150, "Q8_K128" },   { 151, "Q8_KV" },      { 152, "IQ5_KS" },    { 153, "IQ2_KT" },
    { 154, "IQ3_KT" },    { 155, "IQ4_KT" },     { 156, "IQ3_KS" },    { 157, "IQ2_KL" },
    { 158, "IQ1_KT" },    { 202, "Q4_0_R8" },    { 206, "Q5_0_R4" },   { 208, "Q8_0_R8" },
    { 210, "Q2_K_R4" },   { 211, "Q3_K_R4" },    { 212, "Q4_K_R4" },   { 213, "Q5_K_R4" },
    { 214, "Q6_K_R4" },   { 216, "IQ2_XXS_R4" }, { 217, "IQ2_XS_R4" }, { 218, "IQ3_XXS_R4" },
    { 219, "IQ1_S_R4" },  { 220, "IQ4_NL_R4" },  { 221, "IQ3_S_R4" },  { 222, "IQ2_S_R4" },
    { 223, "IQ4_XS_R8" }, { 229, "IQ1_M_R4" },   { 230, "BF16_R16" },  { 233, "Q6_0_R4" },
    { 335, "IQ2_BN_R4" }, { 337, "IQ2_K_R4" },   { 338, "IQ3_K_R4" },  { 339, "IQ4_K_R4" },
    { 340, "IQ5_K_R4" },  { 344, "IQ4_KS_R4" },  { 352, "IQ5_KS_R4" }, { 353, "MXFP4_R8" },
    { 397, "Q8_K_R16" },  { 398, "Q8_KV_R8" },   { 399, "Q8_K_R8" },
};

const char *ggml_type_name(uint32_t id, const char **fork)
{
    if (fork) *fork = NULL;
    if (id < sizeof MAINLINE / sizeof MAINLINE[0] && MAINLINE[id]) return MAINLINE[id];
    for (size_t i = 0; i < sizeof IK / sizeof IK[0]; i++)
        if (IK[i].id == id) {
            if (fork) *fork = "ik_llama.cpp";
            return IK[i].name;
        }
    return NULL;
}
