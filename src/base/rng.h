/*
 * rng.h — the seeded pseudo-random generator shared by the sampler and the
 * synthetic-model writer: xoshiro256** (Blackman & Vigna), its 256-bit state
 * filled from a 64-bit seed by splitmix64.
 *
 * Invariant: the state is never all zero (the one state xoshiro cannot leave);
 * the same seed always yields the same stream, on every platform.
 */
#ifndef KVI_RNG_H
#define KVI_RNG_H

#include <stdint.h>

typedef struct rng_state {
    uint64_t s[4]; /* xoshiro256** state */
} rng_state;

/* One step of splitmix64: advances *x and returns a well-mixed 64-bit value. */
static inline uint64_t rng_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void rng_seed(rng_state *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&x);
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0) r->s[0] = 1;
}

static inline uint64_t rng_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng_state *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rng_rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl64(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static inline double rng_uniform(rng_state *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
