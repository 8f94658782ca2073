/*
 * fwd_act.c — gated activations (fwd_act.h): SwiGLU, tanh-GeGLU through llama.cpp's
 * f16 table, and gpt-oss's clamped SwiGLU; apertus's ungated xIELU.
 */
#include "forward/fwd_act.h"

#include "formats/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* gelu(x) = x/2 (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), the tanh approximation */
static float gelu_tanh(float x)
{
    const float c = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x)));
}

/* The tanh GELU as llama.cpp's CPU evaluates it (and so its goldens): x rounded to
 * f16, looked up in a table of f16 results (gelu[h] = f16(gelu_tanh(f32(h)))), for
 * |x| < 10; 0 at or below -10, x at or above 10. */
uint16_t *fwd_act_table(model_act act, bool *needed)
{
    *needed = act == MODEL_ACT_GELU_TANH;
    if (!*needed) return NULL;
    uint16_t *t = malloc(65536 * sizeof *t);
    if (!t) return NULL;
    for (uint32_t h = 0; h < 65536; h++) t[h] = quant_f32_to_f16(gelu_tanh(quant_f16_to_f32((quant_f16)h)));
    return t;
}

static inline float gelu_lookup(const uint16_t *t, float x)
{
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return quant_f16_to_f32(t[quant_f32_to_f16(x)]);
}

void fwd_glu(model_act act, const uint16_t *gelu, float *g, const float *u, size_t n)
{
    if (act == MODEL_ACT_GELU_TANH) {
        for (size_t i = 0; i < n; i++) g[i] = gelu_lookup(gelu, g[i]) * u[i];
    } else if (act == MODEL_ACT_SWIGLU_OAI) {
        /* llama.cpp's swiglu_oai: alpha 1.702, limit 7 (constants of the model) */
        const float alpha = 1.702f, limit = 7.0f;
        for (size_t i = 0; i < n; i++) {
            const float x = g[i] < limit ? g[i] : limit;
            const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
            g[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const float x = g[i];
            g[i] = x / (1.0f + expf(-x)) * u[i];
        }
    }
}

void fwd_xielu(const model_xielu *p, float *x, size_t n)
{
    const float ap = p->alpha_p, an = p->alpha_n, b = p->beta, eps = p->eps;
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        x[i] = v > 0.0f ? ap * v * v + b * v : (expm1f(v < eps ? v : eps) - v) * an + b * v;
    }
}

void fwd_relu2(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float v = x[i] > 0.0f ? x[i] : 0.0f;
        x[i] = v * v;
    }
}

float *fwd_gelu_table_f32(const uint16_t *gelu)
{
    float *t = gelu ? malloc(65536 * sizeof *t) : NULL; /* [65536] */
    for (uint32_t h = 0; t && h < 65536; h++) t[h] = quant_f16_to_f32(gelu[h]);
    return t;
}

/* quant_f32_to_f16(x) for 2^-14 <= |x| < 65504 (f16 normals) by the bits alone:
 * the exponent rebased, the mantissa rounded to nearest even */
static inline uint16_t f16_of_normal(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    const uint32_t v = (b & 0x7fffffffu) - (112u << 23);
    return (uint16_t)(((b >> 16) & 0x8000u) | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
}

void fwd_gelu(const float *gelu32, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float v = x[i], a = fabsf(v);
        x[i] = v <= -10.0f             ? 0.0f
               : v >= 10.0f            ? v
               : a >= 6.103515625e-05f ? gelu32[f16_of_normal(v)]
                                       : gelu32[quant_f32_to_f16(v)];
    }
}
