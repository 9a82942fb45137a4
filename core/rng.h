/*
 * core/rng.h - deterministic random numbers for initialization and data order.
 *
 * Streams are keyed by (seed, stream id): a parameter's initial values depend only on the
 * run seed, its name and (for experts) the global expert index, never on how many ranks
 * hold it. That is what makes a run with 4 expert-parallel ranks start from exactly the
 * weights of a single-process run.
 */
#ifndef SL_RNG_H
#define SL_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
    int has_spare;
    double spare;
} sl_rng;

/* 64-bit FNV-1a of a string, for deriving stream ids from names. */
uint64_t sl_hash_str(const char *s);
/* splitmix64's output for state z (z plus the golden-ratio increment, then the finalizer):
 * a stateless 64-bit mixer for keyed permutations (io/reader.c's shuffles). */
uint64_t sl_mix64(uint64_t z);
/* Mixes two 64-bit values into one (for (seed, stream) and sub-streams). */
uint64_t sl_hash_mix(uint64_t a, uint64_t b);

/* A generator for (seed, stream): independent streams of one seed; the next 64 random bits. */
void sl_rng_init(sl_rng *r, uint64_t seed, uint64_t stream);
uint64_t sl_rng_u64(sl_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double sl_rng_uniform(sl_rng *r);
/* Standard normal (Box-Muller, both values used). */
double sl_rng_normal(sl_rng *r);
/* Uniform integer in [0, n). */
uint64_t sl_rng_below(sl_rng *r, uint64_t n);

#endif
