/*
 * sampler_int.h — what tests may reach in sampler.c beyond kvinfer.h.
 *
 * sampler_set_reference(s, true) makes every later call take the reference
 * chain (the whole row copied into the candidates, then each filter), so a test
 * can compare the fast paths with it on the same logits and seed.
 */
#ifndef KVI_SAMPLER_INTERNAL_H
#define KVI_SAMPLER_INTERNAL_H

#include "kvinfer.h"

#include <stdbool.h>

void sampler_set_reference(kvi_sampler *s, bool on);

#endif
