/*
 * arch_registry.c — the table of architectures (arch.h): one line each.
 */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

static const model_arch *const archs[] = {
    &model_arch_llama,       &model_arch_qwen2,       &model_arch_qwen3,       &model_arch_gemma2,
    &model_arch_gemma3,      &model_arch_phi3,        &model_arch_granite,     &model_arch_olmo2,
    &model_arch_qwen3moe,    &model_arch_olmoe,       &model_arch_gptoss,      &model_arch_deepseek2,
    &model_arch_qwen35,      &model_arch_qwen3next,   &model_arch_mistral3,    &model_arch_smollm3,
    &model_arch_seed_oss,    &model_arch_apertus,     &model_arch_exaone4,     &model_arch_cohere2,
    &model_arch_glm4moe,     &model_arch_minimax_m2,  &model_arch_hunyuan_moe, &model_arch_ernie45_moe,
    &model_arch_bailingmoe2, &model_arch_afmoe,       &model_arch_qwen35moe,   &model_arch_llama4,
    &model_arch_gemma4,      &model_arch_deepseek32,  &model_arch_lfm2,        &model_arch_lfm2moe,
    &model_arch_granitehybrid, &model_arch_nemotron_h, &model_arch_falcon_h1, &model_arch_kimi_linear,
    /* embedding models */
    &model_arch_bert, &model_arch_nomic_bert, &model_arch_nomic_bert_moe, &model_arch_modern_bert,
    &model_arch_gemma_embedding,
};

const model_arch *model_arch_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i]->name, name) == 0) return archs[i];
    return NULL;
}

void model_arch_list(char *buf, size_t cap)
{
    size_t n = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; cap && i < sizeof archs / sizeof archs[0]; i++) {
        const int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", archs[i]->name);
        if (w < 0 || (size_t)w >= cap - n) break;
        n += (size_t)w;
    }
}
